// Creating VMs from the page, with the choices of `virtplane vm create`: name and count, a
// template (its disks copied) or a new root disk (empty or from a disk image) in a pool chosen
// for the cluster, CPU and memory (sizes with units), NICs, cloud-init and labels; free
// volumes may be added as more disks. One POST /v1/vms/actions/create makes them all, checked
// whole before anything is written.

import { $, el, field, input, select } from "./dom.js";
import { listAll, send } from "./api.js";
import { notify, openDialog } from "./dialogs.js";
import { can, state } from "./state.js";
import { DEFAULT_RUN_POLICY, RUN_POLICIES } from "./vocabulary.js";

// The pool for new disks, as the CLI's choose_pool: a shared volume pool (its VMs may run on
// any of its hosts), the one most hosts reach; never a host's local pool, which would pin the
// VM to that host. A local pool is only chosen by hand.
export function clusterPool(pools) {
  const shared = pools.filter((p) => p.spec && p.spec.kind === "shared" && (p.spec.content || "volumes") === "volumes");
  const reach = (p) => ((p.status && p.status.reachable_hosts) || []).length;
  shared.sort((a, b) => reach(b) - reach(a) || a.metadata.name.localeCompare(b.metadata.name));
  return shared.length ? shared[0].metadata.name : "";
}

function textarea(name, placeholder) {
  return el("textarea", { attrs: { name, rows: 2, spellcheck: "false", placeholder } });
}

function parseLabels(text) {
  const labels = {};
  for (const part of text.split(/[,\n]/).map((p) => p.trim()).filter(Boolean)) {
    const at = part.indexOf("=");
    if (at < 1) throw new Error(`label ${part}: write key=value`);
    labels[part.slice(0, at).trim()] = part.slice(at + 1).trim();
  }
  return labels;
}

function namesOf(name, count) {
  return count <= 1 ? [name] : Array.from({ length: count }, (_, i) => `${name}-${i + 1}`);
}

async function createDialog() {
  const dialog = openDialog({ name: "create-vm", title: "New virtual machine", body: [el("p", { cls: "hint", text: "Loading volumes, pools, images, networks and templates…" })] });
  dialog.setActions([]);
  const signal = state.abort && state.abort.signal;
  let volumes;
  let pools;
  let images;
  let networks;
  let vms;
  let snapshots;
  try {
    [volumes, pools, images, networks, vms, snapshots] = await Promise.all(["volumes", "storagepools", "images", "networks", "vms", "snapshots"].map(async (p) => [...(await listAll(p, signal)).items.values()]));
  } catch (err) {
    dialog.showError(err);
    return;
  }
  const free = volumes.filter((v) => !(v.status && v.status.attached_vm)).sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
  const diskPools = pools.filter((p) => (p.spec && p.spec.content) !== "images").map((p) => [p.metadata.name, `${p.metadata.name} (${p.spec.kind}${p.spec.kind === "local" ? `, pins the VM to ${p.spec.host}` : ""})`]);
  const diskImages = images.filter((i) => i.spec && i.spec.kind === "Disk").map((i) => [i.metadata.name, i.metadata.name]);
  // templates, then snapshots (a snapshot is a template too: its captured spec, its saved disks)
  const templates = [
    ...vms.filter((v) => v.spec && v.spec.template).map((v) => [v.metadata.name, v.metadata.name]),
    ...snapshots.filter((s) => s.status && s.status.phase === "Ready").map((s) => [`snapshot:${s.metadata.name}`, `snapshot ${s.metadata.name} (of ${s.spec.vm})`]),
  ];
  const chosenPool = clusterPool(pools);

  const name = input("name", "", { required: true, spellcheck: "false", placeholder: "web-3" });
  const template = select("template", [["", "none: a new VM"], ...templates], "");
  const rootDisk = el("fieldset", { cls: "choices", data: { part: "root-disk" } }, [el("legend", { text: "New root disk" }),
    el("label", { cls: "choice" }, [el("input", { attrs: { type: "checkbox", name: "new_disk", checked: diskPools.length > 0, disabled: diskPools.length === 0 } }),
      el("span", { text: "Create a volume <name>-root and boot from it" })]),
    el("div", { cls: "row" }, [
      field("Pool", select("pool", chosenPool ? diskPools : [["", "no shared pool: choose one"], ...diskPools], chosenPool), "a shared pool of the cluster"),
      field("Size", input("size", "20Gi", { spellcheck: "false" }), "e.g. 20Gi"),
      field("Image", select("image", [["", "empty disk"], ...diskImages], "")),
    ]),
  ]);
  const form = el("div", { cls: "form" }, [
    el("div", { cls: "row" }, [
      field("Name", name),
      field("Count", input("count", 1, { type: "number", min: 1, max: 100 }), "more than 1: <name>-1 … <name>-N"),
    ]),
    el("div", { cls: "row" }, [
      field("Template", template, "a template or a snapshot: its disks are copied; new MACs, addresses and instance id"),
      field("Run policy", select("run_policy", RUN_POLICIES.map((p) => [p, p]), DEFAULT_RUN_POLICY)),
    ]),
    el("div", { cls: "row" }, [
      field("vCPUs", input("cpu", 1, { type: "number", min: 1, max: 256 })),
      field("Memory", input("memory", "1Gi", { spellcheck: "false" }), "e.g. 4Gi, 512Mi"),
    ]),
    rootDisk,
    el("fieldset", { cls: "choices" }, [el("legend", { text: "NICs" }),
      ...(networks.length ? networks.map((n) => el("label", { cls: "choice" }, [
        el("input", { attrs: { type: "checkbox", name: `network:${n.metadata.name}` } }),
        el("span", { text: `${n.metadata.name} (${n.spec.subnet || n.spec.kind})` }),
      ])) : [el("p", { cls: "empty", text: "no networks" })]),
    ]),
    el("fieldset", { cls: "choices" }, [el("legend", { text: "Cloud-init" }),
      field("SSH keys", textarea("ssh_keys", "ssh-ed25519 AAAA… me@laptop (one a line)")),
      field("User data", textarea("user_data", "#cloud-config")),
    ]),
    field("Labels", input("labels", "", { spellcheck: "false", placeholder: "app=web, tier=front" })),
    el("fieldset", { cls: "choices" }, [el("legend", { text: "Existing volumes (not attached to a VM)" }),
      ...(free.length ? free.map((v) => el("label", { cls: "choice", data: { volume: v.metadata.name } }, [
        el("input", { attrs: { type: "checkbox", name: `volume:${v.metadata.name}` } }),
        el("span", { text: `${v.metadata.name} (${v.spec.size_gib} GiB in ${v.spec.pool})` }),
      ])) : [el("p", { cls: "empty", text: "none" })]),
    ]),
  ]);
  template.addEventListener("change", () => { rootDisk.hidden = Boolean(template.value); });
  dialog.setBody([form]);
  dialog.setActions([{ name: "confirm", label: "Create", run: async () => {
    const values = {};
    for (const node of form.querySelectorAll("input, select, textarea")) values[node.name] = node.type === "checkbox" ? node.checked : node.value;
    const names = namesOf(values.name.trim(), Number(values.count) || 1);
    const spec = { run_policy: values.run_policy, cpu: Number(values.cpu), memory_mib: values.memory.trim() };
    const nics = networks.filter((n) => values[`network:${n.metadata.name}`]).map((n) => ({ network: n.metadata.name }));
    if (nics.length) spec.nics = nics;
    const keys = values.ssh_keys.split("\n").map((k) => k.trim()).filter(Boolean);
    if (keys.length || values.user_data.trim()) spec.cloud_init = { ssh_authorized_keys: keys, user_data: values.user_data };
    const existing = free.filter((v) => values[`volume:${v.metadata.name}`]);
    if (existing.length && names.length > 1) throw new Error("an existing volume is a disk of one VM: make one VM, or none of them");
    const body = { names, spec, labels: parseLabels(values.labels), run_policy: values.run_policy, volumes: [] };
    const newRoot = !values.template && values.new_disk;
    if (values.template.startsWith("snapshot:")) body.snapshot = values.template.slice("snapshot:".length);
    else if (values.template) body.template = values.template;
    else if (newRoot) {
      const source = values.image ? { image: values.image } : null;
      body.volumes.push({ suffix: "root", spec: { pool: values.pool, size_gib: values.size.trim(), source }, boot_order: 1 });
    }
    spec.disks = existing.map((v, i) => ({ volume: v.metadata.name, boot_order: (newRoot ? 2 : 1) + i }));
    if (values.template && !existing.length) delete spec.disks;  // the template's own disks
    const made = await send("POST", "/v1/vms/actions/create", body);
    dialog.close();
    const count = made.items.filter((i) => i.kind === "VirtualMachine").length;
    notify("ok", count === 1 ? `VM ${names[0]} created.` : `${count} VMs created (${names[0]} … ${names[names.length - 1]}).`);
  } }]);
}

// The toolbar button is shown to operators and admins (app.js calls this when the role is known).
export function showCreateButton() {
  $("create-vm").hidden = !can("operator");
}

$("create-vm").addEventListener("click", createDialog);
