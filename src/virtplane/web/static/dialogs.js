// Modal dialogs (the page's own <dialog>, never the browser's confirm()) and the notice line
// under the top bar. An API error is shown as the API sent it: its reason and its message.

import { $, el } from "./dom.js";
import { ApiStatusError, AuthError, UnreachableError } from "./api.js";

// The parts of an error worth showing: [reason, message, status].
export function explainError(err) {
  if (err instanceof ApiStatusError) return [err.reason || `HTTP ${err.status}`, err.message, err.status];
  if (err instanceof AuthError) return ["Unauthorized", err.message, 401];
  if (err instanceof UnreachableError) return ["Unreachable", `cannot reach the API: ${err.message}`, null];
  return ["Error", String(err && err.message ? err.message : err), null];
}

function errorNodes(err) {
  const [reason, message, status] = explainError(err);
  return [
    el("strong", { cls: "reason", text: reason }),
    el("span", { cls: "message", text: message }),
    status ? el("span", { cls: "status-code", text: `HTTP ${status}` }) : null,
  ];
}

// The notice line: what an action started, or why the API refused it.
export function notify(kind, message) {
  const notice = $("notice");
  notice.dataset.kind = kind;
  notice.dataset.reason = "";
  $("notice-text").replaceChildren(el("span", { cls: "message", text: message }));
  notice.hidden = false;
}

export function notifyError(err) {
  const notice = $("notice");
  notice.dataset.kind = "error";
  notice.dataset.reason = explainError(err)[0];
  $("notice-text").replaceChildren(...errorNodes(err));
  notice.hidden = false;
}

export function hideNotice() {
  $("notice").hidden = true;
}

// A dialog: a title, a body (nodes), and actions. An action's run(dialog) may throw: the error
// is shown in the dialog and the buttons come back; it closes the dialog itself when done.
export function openDialog({ name, title, body = [], actions = [] }) {
  const node = el("dialog", { cls: "dialog", data: { dialog: name } });
  const content = el("div", { cls: "dialog-body" });
  const error = el("p", { cls: "dialog-error", attrs: { role: "alert" } });
  error.hidden = true;
  const footer = el("div", { cls: "dialog-actions" });
  node.append(el("h2", { text: title }), content, error, footer);
  document.body.append(node);

  const dialog = {
    node,
    closed: false,
    close() {
      if (dialog.closed) return;
      dialog.closed = true;
      node.close();
      node.remove();
    },
    setBody(nodes) {
      content.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined));
    },
    showError(err) {
      error.dataset.reason = explainError(err)[0];
      error.replaceChildren(...errorNodes(err));
      error.hidden = false;
    },
    clearError() {
      error.hidden = true;
      error.replaceChildren();
    },
    busy(on) {
      for (const b of footer.querySelectorAll("button")) b.disabled = on || b.dataset.off === "1";
      node.dataset.busy = on ? "1" : "";
    },
    setActions(list) {
      const buttons = list.map((action) => {
        const b = el("button", { cls: `button ${action.cls || ""}`.trim(), text: action.label, data: { act: action.name } });
        b.type = "button";
        if (action.disabled) { b.disabled = true; b.dataset.off = "1"; }
        b.addEventListener("click", async () => {
          dialog.clearError();
          dialog.busy(true);
          try {
            await action.run(dialog);
          } catch (err) {
            if (!dialog.closed) dialog.showError(err);
          } finally {
            if (!dialog.closed) dialog.busy(false);
          }
        });
        return b;
      });
      const cancel = el("button", { cls: "button subtle", text: "Cancel", data: { act: "cancel" } });
      cancel.type = "button";
      cancel.addEventListener("click", () => dialog.close());
      footer.replaceChildren(cancel, ...buttons);
    },
  };
  node.addEventListener("close", () => { if (!dialog.closed) { dialog.closed = true; node.remove(); } });
  dialog.setBody(body);
  dialog.setActions(actions);
  node.showModal();
  return dialog;
}

// A form's values by input name (checkboxes as booleans, radios as the checked value).
export function formValues(root) {
  const values = {};
  for (const input of root.querySelectorAll("input, select, textarea")) {
    if (!input.name) continue;
    if (input.type === "checkbox") values[input.name] = input.checked;
    else if (input.type === "radio") { if (input.checked) values[input.name] = input.value; }
    else values[input.name] = input.value;
  }
  return values;
}
