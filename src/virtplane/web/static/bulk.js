// A bulk action on the VMs selected in the list, through the API's bulk path (POST
// /v1/vms/actions/{start,stop,restart}), which admits each VM as if it had been asked alone and
// says why it refused one. A field selector takes no list of names (only =, ==, !=), so a
// selection is sent as one request per VM, a few at a time.

import { $ } from "./dom.js";
import { send } from "./api.js";
import { notify, notifyError } from "./dialogs.js";
import { vmList } from "./render.js";
import { can } from "./state.js";

const AT_ONCE = 8;

async function act(type, names) {
  let created = 0;
  const refused = [];
  const queue = [...names];
  const worker = async () => {
    while (queue.length) {
      const name = queue.shift();
      const answer = await send("POST", `/v1/vms/actions/${type}`, { fieldSelector: `metadata.name=${name}` });
      created += answer.metadata.created;
      for (const item of answer.items) if (!item.operation) refused.push(`${item.vm}: ${item.reason}`);
    }
  };
  await Promise.all(Array.from({ length: Math.min(AT_ONCE, names.length) }, worker));
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
