// The tables and counts, drawn from what the watches keep in state.

import { $, badge, bar, byName, cell, countBy, el, fillBody, formatTime, ago, gib, text, toneOf } from "./dom.js";
import { actionsCell } from "./registry.js";
import { state } from "./state.js";
import { FINISHED_OPERATION_STATES, HOST_STATES, OPERATION_STATES, VM_PHASES } from "./vocabulary.js";

const FINISHED_OPS_SHOWN = 10;
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
  renderHosts(data.hosts);
  renderVms(data.vms);
  renderOperations(data.ops);
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
      chip.setAttribute("aria-pressed", String(state.vmPhaseFilter === value));
      chip.addEventListener("click", () => {
        state.vmPhaseFilter = state.vmPhaseFilter === value ? null : value;
        if (state.lastData) {
          renderCounts(containerId, totalId, state.lastData.vms, key, known, true);
          renderVms(state.lastData.vms);
        }
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

function renderHosts(hosts) {
  const rows = [...hosts].sort(byName).map((host) => {
    const status = host.status || {};
    const allocated = status.allocated || {};
    const capacity = capacityOf(host);
    const cpu = capacity
      ? bar(allocated.vcpus / capacity.vcpus, `${allocated.vcpus || 0} / ${capacity.vcpus}`, "vCPUs allocated / allocatable", true)
      : text(allocated.vcpus, "0");
    const memory = capacity
      ? bar(allocated.memory_mib / capacity.memory_mib, `${gib(allocated.memory_mib)} / ${gib(capacity.memory_mib)}`, "memory allocated / allocatable", true)
      : gib(allocated.memory_mib);
    const heartbeat = liveness(status);
    return el("tr", { data: { name: host.metadata.name } }, [
      cell(host.metadata.name, "name"),
      cell(host.spec && host.spec.cluster),
      cell(badge(status.resource_state), "state"),
      cell(badge(status.connection), "connection"),
      cell(cpu, "cpu"),
      cell(memory, "memory"),
      cell(allocated.vms || 0, "num vms"),
      cell(heartbeat, "heartbeat"),
      cell(status.message, "message"),
      actionsCell("host", host),
    ]);
  });
  fillBody($("hosts"), rows, "hosts-empty");
}

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

function renderVms(vms) {
  const filter = state.vmPhaseFilter;
  const indicator = $("vm-filter");
  indicator.hidden = !filter;
  indicator.textContent = filter ? `phase ${filter} (click the count again to show all)` : "";
  const rows = [...vms]
    .filter((vm) => !filter || text(vm.status && vm.status.phase, "Unknown") === filter)
    .sort(byName)
    .map((vm) => {
      const status = vm.status || {};
      const spec = vm.spec || {};
      const labels = Object.entries(vm.metadata.labels || {}).sort(([a], [b]) => a.localeCompare(b))
        .map(([k, v]) => el("span", { cls: "chip label", text: `${k}=${v}` }));
      const conditions = (status.conditions || []).map((c) => conditionChip(c, status.phase));
      return el("tr", { data: { name: vm.metadata.name } }, [
        cell(vm.metadata.name, "name"),
        cell(badge(status.phase), "phase"),
        cell(status.host, "host"),
        cell(spec.run_policy, "policy"),
        cell(spec.cpu, "num"),
        cell(spec.memory_mib === undefined ? null : `${spec.memory_mib} MiB`, "num"),
        cell(el("span", { cls: "chips" }, conditions), "conditions"),
        cell(status.last_exit, "last-exit"),
        cell(el("span", { cls: "chips" }, labels), "labels"),
        cell(status.message, "message"),
        actionsCell("vm", vm),
      ]);
    });
  fillBody($("vms"), rows, "vms-empty");
}

function progressCell(progress) {
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

function renderOperations(ops) {
  const started = (op) => (op.status && (op.status.started_at || op.status.finished_at)) || op.metadata.created_at || "";
  const newestFirst = (a, b) => String(started(b)).localeCompare(String(started(a)));
  const running = ops.filter((op) => !FINISHED_OPS.has(op.status && op.status.phase)).sort(newestFirst);
  const finished = ops.filter((op) => FINISHED_OPS.has(op.status && op.status.phase))
    .sort((a, b) => String((b.status.finished_at || "")).localeCompare(String(a.status.finished_at || "")))
    .slice(0, FINISHED_OPS_SHOWN);
  const rows = [...running, ...finished].map((op) => {
    const status = op.status || {};
    const spec = op.spec || {};
    const done = FINISHED_OPS.has(status.phase);
    return el("tr", { cls: done ? "finished" : "active", data: { name: op.metadata.name } }, [
      cell(op.metadata.name, "name"),
      cell(spec.vm),
      cell(spec.type),
      cell(badge(status.phase), "phase"),
      cell(status.step, "step"),
      cell(progressCell(status.progress), "progress"),
      cell(status.message, "message"),
      cell(el("span", { text: formatTime(status.started_at || op.metadata.created_at), title: text(status.started_at, "") })),
    ]);
  });
  fillBody($("operations"), rows, "operations-empty");
}

function eventRow(event, fresh) {
  return el("tr", { cls: fresh ? "fresh" : "", data: { id: event.id, reason: event.reason } }, [
    cell(el("span", { text: formatTime(event.time), title: text(event.time, "") }), "time"),
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
