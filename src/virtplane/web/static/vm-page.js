// A VM's page (#/vms/NAME/TAB): its actions, and tabs for its summary (with the usage graphs),
// serial console, screen, disks, NICs with their addresses, snapshots (a tree, with restore),
// backups (Backup now; restore with a dry run first, as for snapshots), events, and its YAML in an editor that applies changes the way `virtplane apply` does (PUT of
// labels, annotations and spec; a change of those made in between is a Conflict).

import { $, badge, el, gib, link, text, timeNode } from "./dom.js";
import { api, ApiStatusError, listAll, path, send } from "./api.js";
import { notify } from "./dialogs.js";
import { actionButtons } from "./registry.js";
import { addressOf, eventRowOf } from "./render.js";
import { href, onView } from "./router.js";
import { can, eventListeners, state } from "./state.js";
import { backupDialog, restoreDialog } from "./vm-actions.js";
import { detachConsole, openConsole } from "./console.js";
import { closeScreen, openScreen } from "./screen.js";
import { mountUsage } from "./usage-charts.js";
import { placementTab } from "./vm-placement.js";

let jsYaml = null; // js-yaml, loaded with the first YAML tab
const yamlModule = () => { if (!jsYaml) jsYaml = import("./vendor/js-yaml.js"); return jsYaml; };
const TABS = [["summary", "Summary"], ["console", "Console"], ["screen", "Screen"], ["disks", "Disks"],
  ["nics", "NICs"], ["snapshots", "Snapshots"], ["backups", "Backups"], ["placement", "Placement"], ["events", "Events"],
  ["yaml", "YAML"]];
const EVENTS_SHOWN = 100;

const page = { name: null, tab: null, stopUsage: null, base: null, loaded: null, editing: false };

const st = (obj) => (obj && obj.status) || {};
const dl = (pairs) => el("dl", { cls: "facts" }, pairs.flatMap(([k, v]) => [el("dt", { text: k }),
  el("dd", {}, [v instanceof Node ? v : text(v)])]));
const table = (heads, rows, cls = "") => el("table", { cls: `grid compact ${cls}`.trim() }, [
  el("thead", {}, [el("tr", {}, heads.map((h) => el("th", { text: h })))]), el("tbody", {}, rows)]);
const tr = (data, cells) => el("tr", { data }, cells.map(([v, cls]) => {
  const td = el("td", { cls });
  td.append(v instanceof Node ? v : text(v));
  return td;
}));

function leave() {
  if (page.stopUsage) page.stopUsage();
  page.stopUsage = null;
  if (page.tab === "console") detachConsole();
  if (page.tab === "screen") closeScreen();
  $("console-panel").hidden = true;
  $("screen-panel").hidden = true;
}

function header(vm) {
  const status = st(vm);
  return el("div", { cls: "page-head" }, [
    link("#/vms", "‹ VMs", "back"),
    el("h1", { text: page.name }),
    badge(vm ? status.phase : "Unknown"),
    status.host ? el("span", {}, ["on ", link(href("hosts", status.host), status.host)]) : null,
    vm ? el("span", { cls: "action-buttons", data: { for: "vm" } }, actionButtons("vm", vm)) : null,
  ]);
}

function tabs() {
  return el("nav", { cls: "tabs", attrs: { role: "tablist" } }, TABS.map(([key, label]) => el("a", {
    text: label, data: { tab: key }, attrs: { href: href("vms", page.name, key), role: "tab", "aria-selected": String(key === page.tab) },
  })));
}

function facts(vm) {
  const status = st(vm);
  const spec = vm.spec || {};
  const labels = Object.entries(vm.metadata.labels || {}).map(([k, v]) => `${k}=${v}`).join(", ");
  const conditions = (status.conditions || []).map((c) => `${c.type}=${c.status}${c.reason ? ` (${c.reason})` : ""}`).join(", ");
  return el("div", { cls: "panel", attrs: { id: "vm-facts" } }, [el("h2", { text: "Summary" }), dl([
    ["Phase", badge(status.phase)], ["Host", status.host ? link(href("hosts", status.host), status.host) : "–"],
    ["Run policy", spec.run_policy], ["vCPUs", spec.cpu], ["Memory", gib(spec.memory_mib)], ["Address", addressOf(vm)],
    ["Created", timeNode(vm.metadata.created_at)], ["Conditions", conditions], ["Labels", labels],
    ["Last exit", status.last_exit], ["Message", status.message],
  ])]);
}

function summary(vm, body) {
  const usage = el("div", { cls: "usage", attrs: { id: "vm-usage" } });
  body.append(facts(vm), el("div", { cls: "panel" }, [el("h2", { text: "Usage" }), usage]));
  page.stopUsage = mountUsage(usage, "vm", page.name).stop;
}

async function disks(vm, body) {
  const rows = await Promise.all((vm.spec.disks || []).map(async (disk) => {
    let volume = null;
    try { volume = await api(`/v1/volumes/${path(disk.volume)}`, state.abort.signal); } catch (err) { volume = null; }
    return tr({ volume: disk.volume }, [[disk.volume, "name"], [volume && volume.spec.pool, "pool"],
      [volume ? `${volume.spec.size_gib} GiB` : null, "size"], [volume && st(volume).phase, "phase"], [disk.boot_order, "boot"]]);
  }));
  body.append(el("div", { cls: "panel" }, [el("h2", { text: "Disks" }), rows.length
    ? table(["Volume", "Pool", "Size", "Phase", "Boot order"], rows, "disks") : el("p", { cls: "empty", text: "No disks." })]));
}

function nics(vm, body) {
  const status = st(vm);
  const guest = new Map((status.guest_addresses || []).map((g) => [g.mac, g]));
  const rows = (status.nics || []).map((nic) => tr({ mac: nic.mac }, [[nic.network, "network"], [nic.mac, "mac"],
    [nic.ip ? `${nic.ip}${nic.prefix_length ? `/${nic.prefix_length}` : ""}` : null, "ip"], [nic.gateway, "gateway"],
    [((guest.get(nic.mac) || {}).addresses || []).join(", "), "guest"]]));
  body.append(el("div", { cls: "panel" }, [el("h2", { text: "NICs" }), rows.length
    ? table(["Network", "MAC", "Address", "Gateway", "Guest reports"], rows, "nics") : el("p", { cls: "empty", text: "No NICs." })]));
}

// The API records no parent of a snapshot: the tree is the VM's history, each snapshot under
// the one taken before it.
async function snapshots(vm, body) {
  const found = await listAll("snapshots", state.abort.signal, `&fieldSelector=${encodeURIComponent(`spec.vm=${page.name}`)}`);
  const items = [...found.items.values()].sort((a, b) => String(a.metadata.created_at).localeCompare(String(b.metadata.created_at)));
  const root = el("ul", { cls: "tree", attrs: { id: "snapshot-tree" } });
  let parent = root;
  for (const snap of items) {
    const phase = text(st(snap).phase, "Pending");
    const restore = can("operator") && phase === "Ready"
      ? el("button", { cls: "button small", text: "Restore…", data: { restore: snap.metadata.name } }) : null;
    if (restore) { restore.type = "button"; restore.addEventListener("click", () => restoreDialog(vm, snap.metadata.name)); }
    const children = el("ul");
    parent.append(el("li", { data: { snapshot: snap.metadata.name } }, [el("span", { cls: "snap" }, [
      el("strong", { text: snap.metadata.name }), badge(phase), el("span", { text: snap.spec.with_memory ? "with memory" : "disks" }),
      timeNode(snap.metadata.created_at), restore]), children]));
    parent = children;
  }
  parent.append(el("li", { cls: "now", text: "now" }));
  body.append(el("div", { cls: "panel" }, [el("h2", { text: "Snapshots" }), items.length ? root : el("p", { cls: "empty", text: "No snapshots yet." })]));
}

const CONSISTENCY = { FilesystemFrozen: "yes: filesystems frozen", PoweredOff: "yes: VM stopped", CrashConsistent: "crash-consistent" };
const mib = (bytes) => (bytes ? `${(bytes / 2 ** 20).toFixed(1)} MiB` : "–");

// Newest first; an incremental names the backup it builds on.
async function backups(vm, body) {
  const found = await listAll("backups", state.abort.signal, `&fieldSelector=${encodeURIComponent(`spec.vm=${page.name}`)}`);
  const items = [...found.items.values()].sort((a, b) => String(b.metadata.created_at).localeCompare(String(a.metadata.created_at)));
  const button = (label, data, run) => {
    const made = el("button", { cls: "button small", text: label, data });
    made.type = "button";
    made.addEventListener("click", run);
    return made;
  };
  const rows = items.map((backup) => {
    const status = st(backup);
    const phase = text(status.phase, "Pending");
    const restore = can("operator") && phase === "Succeeded"
      ? button("Restore…", { restore: backup.metadata.name }, () => restoreDialog(vm, backup.metadata.name, "backup")) : "";
    const mode = status.mode ? `${status.mode}${status.base ? ` on ${status.base}` : ""}` : "–";
    return tr({ name: backup.metadata.name }, [[backup.metadata.name, "name"], [badge(phase), "phase"], [mode, "mode"],
      [mib(status.total_bytes), "size"], [CONSISTENCY[status.consistency] || "–", "consistent"],
      [timeNode(status.finished_at || backup.metadata.created_at), "taken"], [restore, "restore"]]);
  });
  const now = can("operator") ? button("Backup now", { act: "backup" }, () => backupDialog(vm)) : null;
  body.append(el("div", { cls: "panel" }, [el("h2", { text: "Backups" }), el("div", { cls: "toolbar" }, [now]), rows.length
    ? table(["Name", "Phase", "Mode", "Written", "Consistent", "Taken", ""], rows, "backups")
    : el("p", { cls: "empty", text: "No backups yet." })]));
}

async function events(body) {
  const found = await api(`/v1/events?kind=VirtualMachine&name=${encodeURIComponent(page.name)}&limit=${EVENTS_SHOWN}`, state.abort.signal);
  const rows = (found.items || []).map((event) => eventRowOf(event, false)).reverse(); // newest first
  body.append(el("div", { cls: "panel" }, [el("h2", { text: "Events (newest first)" }), rows.length
    ? table(["Time", "Type", "Object", "Reason", "Message"], rows, "vm-events") : el("p", { cls: "empty", text: "No events." })]));
}

// What `apply` writes: kind, name, labels, annotations and spec.
function applied(vm) {
  const meta = { name: vm.metadata.name };
  if (vm.metadata.labels && Object.keys(vm.metadata.labels).length) meta.labels = vm.metadata.labels;
  if (vm.metadata.annotations && Object.keys(vm.metadata.annotations).length) meta.annotations = vm.metadata.annotations;
  return { apiVersion: vm.apiVersion || "virtplane.io/v1", kind: "VirtualMachine", metadata: meta, spec: vm.spec };
}

async function yaml(vm, body) {
  const { dump, load } = await yamlModule();
  const editor = el("textarea", { cls: "yaml-editor", attrs: { id: "yaml-editor", spellcheck: "false", "aria-label": "YAML", readonly: !can("operator") } });
  editor.value = dump(applied(vm), { noRefs: true, lineWidth: 120 });
  page.base = JSON.stringify(applied(vm)); // what the editor was opened on
  page.editing = false;
  editor.addEventListener("input", () => { page.editing = true; });
  const error = el("p", { cls: "dialog-error", attrs: { role: "alert", id: "yaml-error" } });
  error.hidden = true;
  const apply = el("button", { cls: "button", text: "Apply", data: { act: "apply" } });
  apply.type = "button";
  apply.hidden = !can("operator");
  apply.addEventListener("click", async () => {
    error.hidden = true;
    apply.disabled = true;
    try {
      let doc;
      try { doc = load(editor.value); } catch (err) { throw new ApiStatusError(0, err.message, "InvalidYAML"); }
      if (!doc || typeof doc !== "object") throw new ApiStatusError(0, "the YAML is not a mapping", "InvalidYAML");
      // the status changes all the time (a running VM's): only a change of what apply writes,
      // made since the editor was opened, is a conflict; the write is pinned to the version read
      const current = await api(`/v1/vms/${path(page.name)}`, state.abort.signal);
      if (JSON.stringify(applied(current)) !== page.base) {
        throw new ApiStatusError(409, "the VM's labels, annotations or spec changed since the editor was opened: open the tab again", "Conflict");
      }
      doc.metadata = { ...(doc.metadata || {}), resource_version: current.metadata.resource_version };
      const saved = await send("PUT", `/v1/vms/${path(page.name)}`, doc);
      page.editing = false;
      page.base = JSON.stringify(applied(saved));
      notify("ok", `VM ${page.name} configured (resource version ${saved.metadata.resource_version}).`);
    } catch (err) {
      error.dataset.reason = err.reason || "";
      error.textContent = `${err.reason || "Error"}: ${err.message}${err.status ? ` (HTTP ${err.status})` : ""}`;
      error.hidden = false;
    } finally {
      apply.disabled = false;
    }
  });
  const note = el("span", { cls: "hint", text: "Labels, annotations and spec; applied at the version shown (a change made since is a 409 Conflict)." });
  body.append(el("div", { cls: "panel" }, [el("h2", { text: "YAML" }), el("div", { cls: "toolbar" }, [apply, note]), error, editor]));
}

async function draw(route) {
  const vm = state.objects.vms.get(route.name);
  const same = page.name === route.name && page.tab === (route.tab || "summary");
  const root = $("vm-page");
  if (same) {
    // the data changed: the header and the tabs drawn from the VM itself follow it; a console,
    // a screen, an editor being typed in and the fetched lists stay as they are
    if (!vm || vm.metadata.resource_version === page.loaded) return;
    page.loaded = vm.metadata.resource_version;
    root.firstChild.replaceWith(header(vm));
    // the graphs keep running: only the facts are drawn again
    if (page.tab === "summary") $("vm-facts").replaceWith(facts(vm));
    if (page.tab === "nics") { const body = $("vm-tab"); body.replaceChildren(); nics(vm, body); }
    if (page.tab === "yaml" && !page.editing) { const body = $("vm-tab"); body.replaceChildren(); await yaml(vm, body); }
    return;
  }
  leave();
  page.name = route.name;
  page.tab = route.tab || "summary";
  page.loaded = vm ? vm.metadata.resource_version : null;
  const body = el("div", { attrs: { id: "vm-tab" }, data: { tab: page.tab } });
  root.replaceChildren(header(vm), tabs(), body);
  if (!vm) {
    body.append(el("p", { cls: "empty", text: state.objects.vms.size || state.streams.has("vms") ? `No VM ${route.name}.` : "Loading…" }));
    page.loaded = null;
    page.tab = null; // drawn again once the VM is known
    return;
  }
  try {
    if (page.tab === "summary") summary(vm, body);
    else if (page.tab === "console") { $("console-panel").hidden = false; openConsole(page.name); }
    else if (page.tab === "screen") { $("screen-panel").hidden = false; openScreen(page.name); }
    else if (page.tab === "disks") await disks(vm, body);
    else if (page.tab === "nics") nics(vm, body);
    else if (page.tab === "snapshots") await snapshots(vm, body);
    else if (page.tab === "backups") await backups(vm, body);
    else if (page.tab === "placement") await placementTab(page.name, body);
    else if (page.tab === "events") await events(body);
    else if (page.tab === "yaml") await yaml(vm, body);
  } catch (err) {
    body.append(el("p", { cls: "dialog-error", text: `${err.reason || "Error"}: ${err.message}` }));
  }
}

// the events tab follows the event log's watch: the newest event of the VM is on top
eventListeners.add((event) => {
  const shown = document.querySelector("#vm-tab .vm-events tbody");
  if (!shown || page.tab !== "events" || event.kind !== "VirtualMachine" || event.name !== page.name) return;
  shown.prepend(eventRowOf(event, true));
});

onView("vm", (route) => {
  if (!route) {
    leave();
    page.name = null;
    page.tab = null;
    return;
  }
  draw(route);
});
