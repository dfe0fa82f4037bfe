// A bulk action on the VMs selected in the list: one request per action through the API's
// bulk path (POST /v1/vms/actions/{start,stop,restart} with a field selector naming them),
// which admits each VM as if it had been asked alone and answers per VM.

import { $ } from "./dom.js";
import { send } from "./api.js";
import { notify, notifyError } from "./dialogs.js";
import { vmList } from "./render.js";
import { can } from "./state.js";

const NAMES_PER_REQUEST = 200; // the selector takes at most 256 values in one ``in``

async function act(type, names) {
  let created = 0;
  const refused = [];
  for (let i = 0; i < names.length; i += NAMES_PER_REQUEST) {
    const chunk = names.slice(i, i + NAMES_PER_REQUEST);
    const answer = await send("POST", `/v1/vms/actions/${type}`, { fieldSelector: `metadata.name in (${chunk.join(",")})` });
    created += answer.metadata.created;
    for (const item of answer.items) if (!item.operation) refused.push(`${item.vm}: ${item.reason}`);
  }
  return { created, refused };
}

export function setupBulk() {
  const bar = $("vm-bulk");
  vmList.onSelect((names) => {
    bar.hidden = names.length === 0 || !can("operator");
    $("vm-bulk-count").textContent = `${names.length} selected`;
  });
  for (const button of bar.querySelectorAll("button[data-bulk]")) {
    button.addEventListener("click", async () => {
      const type = button.dataset.bulk;
      if (type === "clear") {
        vmList.clearSelection();
        return;
      }
      const names = vmList.selected();
      button.disabled = true;
      try {
        const { created, refused } = await act(type, names);
        const label = type[0].toUpperCase() + type.slice(1);
        notify(refused.length ? "error" : "ok", `${label} of ${names.length} VMs: ${created} operations created`
          + (refused.length ? `; refused: ${refused.join("; ")}` : "."));
        vmList.clearSelection();
      } catch (err) {
        notifyError(err);
      } finally {
        button.disabled = false;
      }
    });
  }
}
