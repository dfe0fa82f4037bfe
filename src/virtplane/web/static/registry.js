// Row actions: each module adds the buttons it offers for a kind ("vm", "host"); the lists
// draw, in each row, a menu of those the caller's role allows and that apply to the object now.
// A new module (e.g. a console panel) adds its own with addRowAction and is imported by app.js.
// The menu opens at a fixed place computed from its button and kept inside the window, so that
// neither a scrolled table nor a narrow screen can cut it.

import { el } from "./dom.js";
import { can } from "./state.js";

const actions = { vm: [], host: [] };
let openMenu = null; // { menu, toggle, onClose }

// action: { name, label, role ("operator" or "admin"), when(obj) -> bool, run(obj), title?,
//          icon(obj) -> Node? (drawn in the button before its label, e.g. a screen's thumbnail) }
export function addRowAction(kind, action) {
  if (!actions[kind]) actions[kind] = [];
  actions[kind].push(action);
}

// The buttons of the actions ``obj`` offers now, for a menu or a page's toolbar.
export function actionButtons(kind, obj) {
  return (actions[kind] || [])
    .filter((action) => can(action.role) && (!action.when || action.when(obj)))
    .map((action) => {
      const node = el("button", { cls: "button small", text: action.label, title: action.title, data: { action: action.name } });
      node.type = "button";
      if (action.icon) node.prepend(action.icon(obj));
      node.addEventListener("click", () => {
        closeMenu();
        action.run(obj);
      });
      return node;
    });
}

export function closeMenu() {
  if (!openMenu) return;
  const { menu, toggle, onClose } = openMenu;
  openMenu = null;
  menu.hidden = true;
  toggle.setAttribute("aria-expanded", "false");
  toggle.parentElement.classList.remove("menu-open");
  if (onClose) onClose();
}

function place(menu, toggle) {
  const box = toggle.getBoundingClientRect();
  const width = menu.offsetWidth;
  const height = menu.offsetHeight;
  const left = Math.max(4, Math.min(box.right - width, window.innerWidth - width - 4));
  const below = box.bottom + 4;
  const top = below + height > window.innerHeight - 4 ? Math.max(4, box.top - height - 4) : below;
  menu.style.left = `${left}px`;
  menu.style.top = `${top}px`;
}

// A cell with the "Actions" button and its menu (empty when the caller may do nothing).
export function actionsCell(kind, obj, onClose) {
  const buttons = actionButtons(kind, obj);
  if (!buttons.length) return el("td", { cls: "actions" });
  const menu = el("div", { cls: "menu", attrs: { role: "menu" } }, buttons);
  menu.hidden = true;
  const toggle = el("button", { cls: "button small menu-toggle", text: "Actions ▾", attrs: { "aria-haspopup": "menu", "aria-expanded": "false" } });
  toggle.type = "button";
  toggle.addEventListener("click", (ev) => {
    ev.stopPropagation();
    const wasOpen = openMenu && openMenu.menu === menu;
    closeMenu();
    if (wasOpen) return;
    menu.hidden = false;
    toggle.setAttribute("aria-expanded", "true");
    toggle.parentElement.classList.add("menu-open");
    const table = toggle.closest(".list");
    openMenu = { menu, toggle, onClose: () => table && table.dispatchEvent(new CustomEvent("menuclosed")) };
    place(menu, toggle);
    document.dispatchEvent(new Event("menuopened"));
    const first = menu.querySelector("button");
    if (first) first.focus({ preventScroll: true });
  });
  return el("td", { cls: "actions" }, [toggle, menu]);
}

document.addEventListener("click", (ev) => {
  if (openMenu && !openMenu.menu.contains(ev.target)) closeMenu();
});
document.addEventListener("keydown", (ev) => {
  if (!openMenu) return;
  if (ev.key === "Escape") {
    const { toggle } = openMenu;
    closeMenu();
    toggle.focus();
  } else if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {
    // the arrows move between the menu's items, round
    const items = [...openMenu.menu.querySelectorAll("button")];
    const at = items.indexOf(document.activeElement);
    const next = items[(at + (ev.key === "ArrowDown" ? 1 : items.length - 1)) % items.length];
    if (next) { ev.preventDefault(); next.focus({ preventScroll: true }); }
  }
});
// a scroll (the window's or the table's) moves the menu with its button
const follow = () => { if (openMenu) place(openMenu.menu, openMenu.toggle); };
window.addEventListener("resize", follow);
window.addEventListener("scroll", follow, true);
