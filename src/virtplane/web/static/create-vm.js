// Creating a VM from the page: name, run policy, CPU, memory, and disks (free volumes, and
// optionally a new root disk made first, empty or from a disk image).

import { $, el, field, input, select } from "./dom.js";
import { listAll, send } from "./api.js";
import { notify, openDialog } from "./dialogs.js";
import { can, state } from "./state.js";
import { DEFAULT_RUN_POLICY, RUN_POLICIES } from "./vocabulary.js";

async function createDialog() {
  const dialog = openDialog({ name: "create-vm", title: "New virtual machine", body: [el("p", { cls: "hint", text: "Loading volumes, pools and images…" })] });
  dialog.setActions([]);
  const signal = state.abort && state.abort.signal;
  let volumes;
  let pools;
  let images;
  try {
    [volumes, pools, images] = await Promise.all(["volumes", "storagepools", "images"].map(async (p) => [...(await listAll(p, signal)).items.values()]));
  } catch (err) {
    dialog.showError(err);
    return;
  }
  const free = volumes.filter((v) => !(v.status && v.status.attached_vm)).sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
  const diskPools = pools.filter((p) => (p.spec && p.spec.content) !== "images").map((p) => [p.metadata.name, `${p.metadata.name} (${p.spec.kind})`]);
  const diskImages = images.filter((i) => i.spec && i.spec.kind === "Disk").map((i) => [i.metadata.name, i.metadata.name]);

  const name = input("name", "", { required: true, spellcheck: "false", placeholder: "web-3" });
  const form = el("div", { cls: "form" }, [
    field("Name", name),
    field("Run policy", select("run_policy", RUN_POLICIES.map((p) => [p, p]), DEFAULT_RUN_POLICY)),
    el("div", { cls: "row" }, [
      field("vCPUs", input("cpu", 1, { type: "number", min: 1, max: 512 })),
      field("Memory (MiB)", input("memory_mib", 1024, { type: "number", min: 64, step: 64 })),
    ]),
    el("fieldset", { cls: "choices" }, [el("legend", { text: "New root disk" }),
      el("label", { cls: "choice" }, [el("input", { attrs: { type: "checkbox", name: "new_disk", checked: diskPools.length > 0, disabled: diskPools.length === 0 } }),
        el("span", { text: "Create a volume <name>-root and boot from it" })]),
      el("div", { cls: "row" }, [
        field("Pool", select("pool", diskPools, diskPools.length ? diskPools[0][0] : "")),
        field("Size (GiB)", input("size_gib", 20, { type: "number", min: 1 })),
        field("Image", select("image", [["", "empty disk"], ...diskImages], "")),
      ]),
    ]),
    el("fieldset", { cls: "choices" }, [el("legend", { text: "Existing volumes (not attached to a VM)" }),
      ...(free.length ? free.map((v) => el("label", { cls: "choice", data: { volume: v.metadata.name } }, [
        el("input", { attrs: { type: "checkbox", name: `volume:${v.metadata.name}` } }),
        el("span", { text: `${v.metadata.name} (${v.spec.size_gib} GiB in ${v.spec.pool})` }),
      ])) : [el("p", { cls: "empty", text: "none" })]),
    ]),
  ]);
  dialog.setBody([form]);
  dialog.setActions([{ name: "confirm", label: "Create VM", run: async () => {
    const values = {};
    for (const node of form.querySelectorAll("input, select")) values[node.name] = node.type === "checkbox" ? node.checked : node.value;
    const vmName = values.name.trim();
    const root = `${vmName}-root`;
    const disks = values.new_disk ? [{ volume: root, boot_order: 1 }] : [];
    for (const v of free) {
      if (values[`volume:${v.metadata.name}`]) disks.push({ volume: v.metadata.name, boot_order: disks.length + 1 });
    }
    // The VM first: a name taken or a bad value stops here, before anything is created; the VM
    // waits for its new volume, which follows at once.
    await send("POST", "/v1/vms", {
      kind: "VirtualMachine",
      metadata: { name: vmName },
      spec: { run_policy: values.run_policy, cpu: Number(values.cpu), memory_mib: Number(values.memory_mib), disks },
    });
    if (values.new_disk) {
      const source = values.image ? { image: values.image } : null;
      try {
        await send("POST", "/v1/volumes", {
          kind: "Volume", metadata: { name: root }, spec: { pool: values.pool, size_gib: Number(values.size_gib), source },
        });
      } catch (err) {
        dialog.setBody([el("p", { cls: "warning", text: `VM ${vmName} was created, but its root volume ${root} was not; create the volume, or delete the VM.` })]);
        dialog.setActions([]);
        throw err;
      }
    }
    dialog.close();
    notify("ok", `VM ${vmName} created with ${disks.length} disk(s).`);
  } }]);
}

// The toolbar button is shown to operators and admins (app.js calls this when the role is known).
export function showCreateButton() {
  $("create-vm").hidden = !can("operator");
}

$("create-vm").addEventListener("click", createDialog);
