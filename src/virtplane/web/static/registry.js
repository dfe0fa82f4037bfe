// Row actions: each module adds the buttons it offers for a kind ("vm", "host"); the tables
// draw, in each row, those the caller's role allows and that apply to the object now. A new
// module (e.g. a console panel) adds its own with addRowAction and is imported by app.js.

import { el } from "./dom.js";
import { can } from "./state.js";

const actions = { vm: [], host: [] };

// action: { name, label, role ("operator" or "admin"), when(obj) -> bool, run(obj), title?,
//          icon(obj) -> Node? (drawn in the button before its label, e.g. a screen's thumbnail) }
export function addRowAction(kind, action) {
  if (!actions[kind]) actions[kind] = [];
  actions[kind].push(action);
}

export function actionsCell(kind, obj) {
  const buttons = (actions[kind] || [])
    .filter((action) => can(action.role) && (!action.when || action.when(obj)))
    .map((action) => {
      const node = el("button", { cls: "button small", text: action.label, title: action.title, data: { action: action.name } });
      node.type = "button";
      if (action.icon) node.prepend(action.icon(obj));
      node.addEventListener("click", () => action.run(obj));
      return node;
    });
  return el("td", { cls: "actions" }, [el("span", { cls: "action-buttons" }, buttons)]);
}
