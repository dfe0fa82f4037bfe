// The views of storage pools and volumes, images, networks with their address allocations, and
// snapshots, in the same list component as the VMs. A view's kinds are listed when it is shown
// and then followed by a watch while it stays shown (not always, as VMs and hosts are: a large
// fleet's volumes would cost every page a list it may never look at); Reload lists again.

import { badge, el, link, text, timeNode } from "./dom.js";
import { ExpiredError, listAll, pause, readStream } from "./api.js";
import { createList } from "./list.js";
import { href, onView } from "./router.js";
import { can, state } from "./state.js";
import { uploadForm } from "./image-upload.js";

const st = (obj) => (obj && obj.status) || {};
const sp = (obj) => (obj && obj.spec) || {};
const nameCol = { key: "name", label: "Name", value: (o) => o.metadata.name };
const phaseCol = { key: "phase", label: "Phase", value: (o) => st(o).phase, cell: (o) => badge(st(o).phase), search: true };
const messageCol = { key: "message", label: "Message", value: (o) => st(o).message, search: true };
const vmLink = (vm) => (vm ? link(href("vms", vm), vm) : null);
const phaseFilter = { name: "phase", label: "Phase", values: (items) => items.map((o) => st(o).phase), match: (o, v) => st(o).phase === v };

const lists = {
  pools: createList({ id: "pools", emptyText: "No storage pools.", columns: [nameCol,
    { key: "kind", label: "Kind", value: (p) => sp(p).kind, search: true },
    { key: "content", label: "Content", value: (p) => sp(p).content, search: true },
    { key: "where", label: "Host / cluster", value: (p) => sp(p).host || sp(p).cluster || (sp(p).hosts || []).join(" "), search: true },
    { key: "used", label: "Used / capacity", num: true, value: (p) => (st(p).capacity_gib ? st(p).used_gib / st(p).capacity_gib : null),
      cell: (p) => `${text(st(p).used_gib, "0")} / ${text(st(p).capacity_gib || sp(p).capacity_gib, "?")} GiB` },
  ] }),
  volumes: createList({ id: "volumes", emptyText: "No volumes.", filters: [phaseFilter,
    { name: "pool", label: "Pool", values: (items) => items.map((v) => sp(v).pool), match: (v, value) => sp(v).pool === value }],
  columns: [nameCol, phaseCol,
    { key: "pool", label: "Pool", value: (v) => sp(v).pool, search: true },
    { key: "size", label: "Size GiB", num: true, value: (v) => sp(v).size_gib },
    { key: "vm", label: "Attached to", value: (v) => st(v).attached_vm, cell: (v) => vmLink(st(v).attached_vm), search: true },
    messageCol] }),
  images: createList({ id: "images", emptyText: "No images.", filters: [phaseFilter], columns: [nameCol, phaseCol,
    { key: "kind", label: "Kind", value: (i) => sp(i).kind, search: true },
    { key: "pool", label: "Pool", value: (i) => sp(i).pool, search: true },
    { key: "file", label: "File", value: (i) => sp(i).file, search: true },
    { key: "size", label: "Size MiB", num: true, value: (i) => Math.round((st(i).size_bytes || 0) / 1048576) },
    messageCol] }),
  networks: createList({ id: "networks", emptyText: "No networks.", columns: [nameCol,
    { key: "kind", label: "Kind", value: (n) => sp(n).kind, search: true },
    { key: "subnet", label: "Subnet", value: (n) => sp(n).subnet, search: true },
    { key: "vlan", label: "VLAN", value: (n) => sp(n).vlan },
    { key: "used", label: "Addresses used", num: true, value: (n) => st(n).addresses_in_use },
    { key: "free", label: "Free", num: true, value: (n) => st(n).addresses_free },
    messageCol] }),
  allocations: createList({ id: "allocations", emptyText: "No addresses allocated.", rowKey: (a) => `${a.network}/${a.mac}`,
    filters: [{ name: "network", label: "Network", values: (items) => items.map((a) => a.network), match: (a, v) => a.network === v }],
    columns: [
      { key: "ip", label: "Address", value: (a) => a.ip, search: true },
      { key: "network", label: "Network", value: (a) => a.network, search: true },
      { key: "vm", label: "VM", value: (a) => a.vm, cell: (a) => vmLink(a.vm), search: true },
      { key: "mac", label: "MAC", value: (a) => a.mac, search: true },
    ] }),
  snapshots: createList({ id: "snapshots", emptyText: "No snapshots.", filters: [phaseFilter,
    { name: "vm", label: "VM", values: (items) => items.map((s) => sp(s).vm), match: (s, v) => sp(s).vm === v }],
  columns: [nameCol,
    { key: "vm", label: "VM", value: (s) => sp(s).vm, cell: (s) => vmLink(sp(s).vm), search: true },
    phaseCol,
    { key: "memory", label: "Memory", value: (s) => (sp(s).with_memory ? "with memory" : "disks only") },
    { key: "consistency", label: "Consistency", value: (s) => st(s).consistency },
    { key: "created", label: "Taken", value: (s) => s.metadata.created_at, cell: (s) => timeNode(s.metadata.created_at) },
    messageCol] }),
};

const VIEWS = {
  storage: [["pools-list", "storagepools", "pools"], ["volumes-list", "volumes", "volumes"]],
  images: [["images-list", "images", "images"]],
  networks: [["networks-list", "networks", "networks"]],
  snapshots: [["snapshots-list", "snapshots", "snapshots"]],
};

const upload = uploadForm(() => [], () => load("images"));

async function libraries() {
  const found = await listAll("storagepools", state.abort.signal);
  upload.setPools([...found.items.values()].filter((p) => sp(p).content === "images").map((p) => p.metadata.name));
}

async function load(view) {
  if (view === "images") {
    const holder = document.getElementById("image-upload");
    holder.hidden = !can("admin");
    if (can("admin")) {
      if (!holder.contains(upload.root)) holder.replaceChildren(upload.root);
      libraries().catch(() => {});
    }
  }
  if (following) following.abort();
  const watches = new AbortController();
  following = watches;
  state.abort.signal.addEventListener("abort", () => watches.abort(), { once: true }); // signed out
  for (const [container, plural, key] of VIEWS[view]) {
    const list = lists[key];
    const holder = document.getElementById(container);
    if (!holder.contains(list.root)) {
      const reload = el("button", { cls: "button small subtle-ink", text: "Reload", data: { reload: plural } });
      reload.type = "button";
      reload.addEventListener("click", () => load(view));
      holder.replaceChildren(list.root);
      list.root.querySelector(".list-tools").append(reload);
    }
    followKind(plural, (items) => show(key, items), holder, watches.signal);
  }
}

const WATCH_RETRY_MS = 2000;
let following = null; // the shown view's watches, aborted when it is left or loaded again

function show(key, items) {
  lists[key].update([...items.values()]);
  if (key === "networks") {
    lists.allocations.update([...items.values()].flatMap((n) => (st(n).allocations || []).map((a) => ({ ...a, network: n.metadata.name }))));
    const holder = document.getElementById("allocations-list");
    if (!holder.contains(lists.allocations.root)) holder.replaceChildren(lists.allocations.root);
  }
}

// List the kind, then watch it from the list's revision until ``signal`` aborts, handing every
// state of it to ``onItems(Map name -> object)``; a stream that ends is opened again from the
// last revision seen, one the server cannot resume (410) lists again. Errors are shown in ``holder``.
export async function followKind(plural, onItems, holder, signal) {
  let items = null;
  let revision = null;
  while (!signal.aborted) {
    try {
      if (items === null) {
        const found = await listAll(plural, signal);
        ({ items, revision } = found);
        if (signal.aborted) return;
        holder.querySelector(".dialog-error")?.remove();
        onItems(items);
      }
      await readStream(`/v1/${plural}?watch=1&resource_version=${revision}`, (event) => {
        const obj = event.object || {};
        const meta = obj.metadata || {};
        if (typeof meta.resource_version === "number" && meta.resource_version > revision) revision = meta.resource_version;
        if (event.type === "BOOKMARK" || !meta.name || signal.aborted) return;
        if (event.type === "DELETED") items.delete(meta.name);
        else items.set(meta.name, obj);
        onItems(items);
      }, signal);
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof ExpiredError) { items = null; continue; }
      holder.querySelector(".dialog-error")?.remove();
      holder.append(el("p", { cls: "dialog-error", text: `${err.reason || "Error"}: ${err.message}` }));
    }
    await pause(WATCH_RETRY_MS, signal);
  }
}

let shown = null;
for (const view of Object.keys(VIEWS)) {
  onView(view, (route) => {
    // drawn when the view is entered (not on every change the watches bring)
    if (!route) {
      if (shown === view && following) { following.abort(); following = null; }
      shown = null;
      return;
    }
    if ((shown === view && (view !== "images" || document.getElementById("image-upload").hidden === !can("admin"))) || !state.abort) return;
    shown = view;
    load(view);
  });
}

export { lists as viewLists };
