// The tables and counts, drawn from what the watches keep in state.

import { $, badge, bar, cell, countBy, el, ago, gib, link, text, timeNode, toneOf } from "./dom.js";
import { createList } from "./list.js";
import { go, href } from "./router.js";
import { state } from "./state.js";
import { FINISHED_OPERATION_STATES, HOST_STATES, OPERATION_STATES, VM_PHASES } from "./vocabulary.js";

const EVENTS_KEPT = 1000;
// Counts always shown (zero or not), in this order; any other value is added when present.

const OP_PHASES = OPERATION_STATES;
export const FINISHED_OPS = new Set(FINISHED_OPERATION_STATES);
// Conditions where True is the notable state, not the healthy one. (Migration is not one: it
// is Unknown while a migration runs, False after one failed, and gone once the VM arrived.)
const NEGATIVE_CONDITIONS = new Set(["StartFailed", "RestartRequired", "Maintenance"]);

export function render(data) {
  renderCounts("host-counts", "host-total", data.hosts, (h) => h.status && h.status.resource_state, HOST_STATES);
  renderCounts("vm-counts", "vm-total", data.vms, (v) => v.status && v.status.phase, VM_PHASES, true);
  renderCounts("op-counts", "op-total", data.ops, (o) => o.status && o.status.phase, OP_PHASES);
  hostList.update(data.hosts);
  vmList.update(data.vms);
  opList.update(data.ops);
  showVmFilter();
}

function renderCounts(containerId, totalId, items, key, known, filterable = false) {
  const counts = countBy(items, (item) => text(key(item), "Unknown"));
  const order = [...known, ...[...counts.keys()].filter((k) => !known.includes(k)).sort()];
  const chips = [];
  for (const value of order) {
    const count = counts.get(value) || 0;
    if (!count && !known.includes(value)) continue;
    const chip = el(filterable ? "button" : "span", {
      cls: `count tone-${toneOf(value)}${count ? "" : " zero"}`,
      data: { value, count },
      title: filterable ? `show only ${value} VMs` : undefined,
    }, [el("span", { cls: "count-n", text: count }), el("span", { cls: "count-label", text: value })]);
    if (filterable) {
      chip.type = "button";
      chip.setAttribute("aria-pressed", String(vmList.filterOf("phase") === value));
      chip.addEventListener("click", () => {
        vmList.setFilter("phase", vmList.filterOf("phase") === value ? "" : value);
        go("vms");
        if (state.lastData) renderCounts(containerId, totalId, state.lastData.vms, key, known, true);
        showVmFilter();
      });
    }
    chips.push(chip);
  }
  $(containerId).replaceChildren(...chips);
  $(totalId).textContent = String(items.length);
}

// What placement may give out: the capacity times the host's allocation ratios.
function capacityOf(host) {
  const status = host.status || {};
  return status.allocatable || status.capacity || (host.spec && host.spec.capacity) || null;
}

// The host is probed every 30 s, and a change of its answers is written at once (answering_since,
// silent_since); last_heartbeat is recorded only every 5 minutes (HEARTBEAT_RECORD_S), so it
// is no measure of an answering host's liveness: "5m ago" beside Up would be stale (issue 39).
function liveness(status) {
  const recorded = status.last_heartbeat ? `; heartbeat recorded ${status.last_heartbeat} (every 5 minutes)` : "";
  if (status.silent_since) {
    const silent = ago(status.silent_since).replace(/ ago$/, "");
    return el("span", { text: `silent for ${silent}`, title: `no answer since ${status.silent_since}${recorded}` });
  }
  if (status.answering_since && status.connection === "Up") {
    return el("span", { text: "answering", title: `answering since ${status.answering_since}; probed every 30 s${recorded}` });
  }
  return el("span", { text: ago(status.last_heartbeat), title: text(recorded.slice(2), "no heartbeat yet") });
}

export function hostMeters(host) {
  const status = host.status || {};
  const allocated = status.allocated || {};
  const capacity = capacityOf(host);
  const cpu = capacity
    ? bar(allocated.vcpus / capacity.vcpus, `${allocated.vcpus || 0} / ${capacity.vcpus}`, "vCPUs allocated / allocatable", true)
    : text(allocated.vcpus, "0");
  const memory = capacity
    ? bar(allocated.memory_mib / capacity.memory_mib, `${gib(allocated.memory_mib)} / ${gib(capacity.memory_mib)}`, "memory allocated / allocatable", true)
    : gib(allocated.memory_mib);
  return { cpu, memory };
}

const st = (obj) => obj.status || {};
const capacityShare = (host, key) => {
  const capacity = capacityOf(host);
  return capacity && capacity[key] ? (st(host).allocated || {})[key] / capacity[key] : null;
};

export const hostList = createList({
  id: "hosts",
  kind: "host",
  emptyText: "No hosts yet.",
  columns: [
    { key: "name", label: "Name", value: (h) => h.metadata.name, cell: (h) => link(href("hosts", h.metadata.name), h.metadata.name) },
    { key: "cluster", label: "Cluster", value: (h) => h.spec && h.spec.cluster, search: true },
    { key: "state", label: "State", value: (h) => st(h).resource_state, cell: (h) => badge(st(h).resource_state), search: true },
    { key: "connection", label: "Connection", value: (h) => st(h).connection, cell: (h) => badge(st(h).connection) },
    { key: "cpu", label: "vCPUs", value: (h) => capacityShare(h, "vcpus"), cell: (h) => hostMeters(h).cpu },
    { key: "memory", label: "Memory", value: (h) => capacityShare(h, "memory_mib"), cell: (h) => hostMeters(h).memory },
    { key: "vms", label: "VMs", num: true, value: (h) => (st(h).allocated || {}).vms || 0 },
    { key: "heartbeat", label: "Liveness", value: (h) => st(h).silent_since || "", cell: (h) => liveness(st(h)) },
    { key: "message", label: "Message", value: (h) => st(h).message, search: true },
  ],
  filters: [
    { name: "state", label: "State", values: (items) => items.map((h) => st(h).resource_state), match: (h, v) => st(h).resource_state === v },
    { name: "cluster", label: "Cluster", values: (items) => items.map((h) => h.spec && h.spec.cluster), match: (h, v) => (h.spec && h.spec.cluster) === v },
  ],
});

function conditionChip(condition, phase) {
  const negative = NEGATIVE_CONDITIONS.has(condition.type);
  const truthy = condition.status === "True";
  let tone = "idle";
  if (condition.status === "True") tone = negative ? "warn" : "ok";
  // a stopped VM is not Ready, as expected: nothing to draw attention to
  else if (condition.status === "False") tone = negative || phase === "Stopped" ? "idle" : "warn";
  const mark = condition.status === "True" ? "✓" : condition.status === "False" ? "✗" : "?";
  const reason = !truthy && condition.reason ? ` (${condition.reason})` : "";
  const title = [condition.reason, condition.message].filter(Boolean).join(": ");
  return el("span", { cls: `chip tone-${tone}`, text: `${mark} ${condition.type}${reason}`, title: title || condition.status });
}

function labelsOf(obj) {
  return Object.entries(obj.metadata.labels || {}).sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => `${k}=${v}`);
}

// The VM's first address: what its guest reports, else what its NIC was given.
export function addressOf(vm) {
  const status = st(vm);
  for (const iface of status.guest_addresses || []) if (iface.addresses && iface.addresses.length) return iface.addresses[0].split("/")[0];
  const nic = (status.nics || []).find((n) => n.ip);
  return nic ? nic.ip : null;
}

export const vmList = createList({
  id: "vms",
  kind: "vm",
  selectable: true,
  emptyText: "No virtual machines yet.",
  columns: [
    { key: "name", label: "Name", value: (vm) => vm.metadata.name, cell: (vm) => link(href("vms", vm.metadata.name), vm.metadata.name) },
    { key: "phase", label: "Phase", value: (vm) => text(st(vm).phase, "Unknown"), cell: (vm) => badge(st(vm).phase), search: true },
    { key: "policy", label: "Run policy", value: (vm) => vm.spec && vm.spec.run_policy, search: true },
    { key: "host", label: "Host", value: (vm) => st(vm).host, cell: (vm) => (st(vm).host ? link(href("hosts", st(vm).host), st(vm).host) : null), search: true },
    { key: "size", label: "vCPU / memory", num: true, value: (vm) => ((vm.spec && vm.spec.cpu) || 0) * 1e7 + ((vm.spec && vm.spec.memory_mib) || 0),
      cell: (vm) => `${text(vm.spec && vm.spec.cpu, "?")} / ${gib(vm.spec && vm.spec.memory_mib)}` },
    { key: "address", label: "Address", value: addressOf, search: true },
    { key: "age", label: "Age", value: (vm) => vm.metadata.created_at, cell: (vm) => timeNode(vm.metadata.created_at) },
    { key: "conditions", label: "Conditions", value: (vm) => (st(vm).conditions || []).map((c) => c.type).join(" "),
      cell: (vm) => el("span", { cls: "chips" }, (st(vm).conditions || []).map((c) => conditionChip(c, st(vm).phase))) },
    { key: "labels", label: "Labels", value: (vm) => labelsOf(vm).join(" "), search: true,
      cell: (vm) => el("span", { cls: "chips" }, labelsOf(vm).map((l) => el("span", { cls: "chip label", text: l }))) },
  ],
  filters: [
    { name: "phase", label: "Phase", values: (items) => items.map((vm) => text(st(vm).phase, "Unknown")), match: (vm, v) => text(st(vm).phase, "Unknown") === v },
    { name: "host", label: "Host", values: (items) => items.map((vm) => st(vm).host), match: (vm, v) => st(vm).host === v },
    { name: "label", label: "Label", values: (items) => items.flatMap(labelsOf), match: (vm, v) => labelsOf(vm).includes(v) },
  ],
});

function showVmFilter() {
  const filter = vmList.filterOf("phase");
  const indicator = $("vm-filter");
  indicator.hidden = !filter;
  indicator.textContent = filter ? `phase ${filter} (click the count again to show all)` : "";
  for (const chip of document.querySelectorAll("#vm-counts button.count")) chip.setAttribute("aria-pressed", String(chip.dataset.value === filter));
}

export function progressCell(progress) {
  const entries = Object.entries(progress || {}).filter(([, v]) => v !== null && v !== "" && !(typeof v === "object" && Object.keys(v).length === 0));
  const parts = [];
  const pctEntry = entries.find(([k, v]) => /^(percent|pct|progress_pct|progress)$/.test(k) && Number.isFinite(Number(v)));
  if (pctEntry) parts.push(bar(Number(pctEntry[1]) / 100, `${Math.round(Number(pctEntry[1]))}%`, pctEntry[0]));
  for (const [key, value] of entries) {
    if (pctEntry && key === pctEntry[0]) continue;
    const shown = typeof value === "object" ? JSON.stringify(value) : String(value);
    parts.push(el("span", { cls: "chip kv", text: `${key}=${shown}` }));
  }
  return parts.length ? el("span", { cls: "chips" }, parts) : "–";
}

const startedAt = (op) => st(op).started_at || st(op).finished_at || op.metadata.created_at || "";

export const opList = createList({
  id: "operations",
  emptyText: "No operations.",
  sortKey: "started",
  sortDir: -1,
  rowData: (op) => ({ phase: text(st(op).phase, "Pending") }),
  columns: [
    { key: "name", label: "Name", value: (op) => op.metadata.name, cell: (op) => link(href("operations", op.metadata.name), op.metadata.name) },
    { key: "vm", label: "VM", value: (op) => op.spec && op.spec.vm, cell: (op) => (op.spec && op.spec.vm ? link(href("vms", op.spec.vm), op.spec.vm) : null), search: true },
    { key: "type", label: "Type", value: (op) => op.spec && op.spec.type, search: true },
    { key: "phase", label: "Phase", value: (op) => st(op).phase, cell: (op) => badge(st(op).phase), search: true },
    { key: "step", label: "Step", value: (op) => st(op).step },
    { key: "progress", label: "Progress", value: (op) => JSON.stringify(st(op).progress || {}), cell: (op) => progressCell(st(op).progress) },
    { key: "message", label: "Message", value: (op) => st(op).message, search: true },
    // running first (newest first), then the finished ones, newest first
    { key: "started", label: "Started", value: (op) => `${FINISHED_OPS.has(st(op).phase) ? 0 : 1}${startedAt(op)}`, cell: (op) => timeNode(startedAt(op)) },
  ],
  filters: [
    { name: "phase", label: "Phase", values: (items) => items.map((op) => st(op).phase), match: (op, v) => st(op).phase === v },
    { name: "type", label: "Type", values: (items) => items.map((op) => op.spec && op.spec.type), match: (op, v) => (op.spec && op.spec.type) === v },
  ],
});

const eventFilter = { query: "", type: "", kind: "" };

function eventShown(row) {
  return (!eventFilter.type || row.dataset.type === eventFilter.type)
    && (!eventFilter.kind || row.dataset.kind === eventFilter.kind)
    && (!eventFilter.query || row.textContent.toLowerCase().includes(eventFilter.query));
}

// The event log's search and filters (type, kind): rows that do not match are hidden (the log
// stays one table, followed by its watch and paged by its own continue tokens).
export function filterEvents(query, type = eventFilter.type, kind = eventFilter.kind) {
  eventFilter.query = query.trim().toLowerCase();
  eventFilter.type = type;
  eventFilter.kind = kind;
  for (const row of $("events").tBodies[0].rows) row.hidden = !eventShown(row);
}

function eventRow(event, fresh) {
  const row = eventRowOf(event, fresh);
  row.hidden = !eventShown(row);
  return row;
}

export function eventRowOf(event, fresh) {
  return el("tr", { cls: fresh ? "fresh" : "", data: { id: event.id, reason: event.reason, type: event.type || "Normal", kind: text(event.kind, "") } }, [
    cell(timeNode(event.time), "time"),
    cell(badge(event.type || "Normal"), "type"),
    cell(`${text(event.kind, "?")}/${text(event.name, "?")}`, "object"),
    cell(event.reason, "reason"),
    cell(event.message, "message"),
  ]);
}

// A new event goes on top, drawn as fresh; the log keeps the newest EVENTS_KEPT rows.
// Returns false when the oldest row was cut (no page continues the rows below any more).
export function prependEvent(event) {
  const body = $("events").tBodies[0];
  body.prepend(eventRow(event, true));
  state.eventCount += 1;
  $("events-empty").hidden = true;
  if (state.eventCount > EVENTS_KEPT) {
    body.lastElementChild.remove();
    state.eventCount -= 1;
    return false;
  }
  return true;
}

// A page of older events (oldest first, as the API sends them) goes below the rows shown.
export function appendEvents(items) {
  const rows = items.map((event) => eventRow(event, false)).reverse();
  $("events").tBodies[0].append(...rows);
  state.eventCount += rows.length;
  $("events-empty").hidden = state.eventCount > 0;
}
