// The backups view (#/backups, issue 36): the backups (VM, target, full or incremental, phase,
// size, consistency, verification), the targets (capacity, health) and the policies (schedule,
// selector, last and next run, missed windows), each in the one list component and followed by
// a watch while the view is shown (the backups; the other two are listed). An operator or admin may ask for a backup's verification.

import { badge, bar, el, link, text, timeNode } from "./dom.js";
import { listAll, path, send } from "./api.js";
import { explainError, notify, notifyError } from "./dialogs.js";
import { createList } from "./list.js";
import { addRowAction } from "./registry.js";
import { href, onView } from "./router.js";
import { state } from "./state.js";
import { followKind } from "./views.js";

const st = (obj) => (obj && obj.status) || {};
const sp = (obj) => (obj && obj.spec) || {};
const nameCol = { key: "name", label: "Name", value: (o) => o.metadata.name };
const messageCol = { key: "message", label: "Message", value: (o) => st(o).message, search: true };

function size(bytes) {
  if (!bytes) return null;
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${value.toFixed(unit && value < 10 ? 1 : 0)} ${units[unit]}`;
}

// A backup's verification: Ok or Failed, or "asked" while a request (the annotation the verify
// endpoint sets) waits for its check.
const VERIFY_REQUESTED = "virtplane.io/verify-requested";
function verification(b) {
  const found = st(b).verification;
  const asked = (b.metadata.annotations || {})[VERIFY_REQUESTED];
  if (asked && (!found || found.requested !== asked || !found.result)) return el("span", { cls: "verify-asked", text: "asked…" });
  if (!found || !found.result) return null;
  const ok = found.result === "Ok";
  return el("span", { title: found.message || undefined }, [el("span", { cls: `badge tone-${ok ? "ok" : "bad"} verify`, text: found.result }),
    ok ? null : ` ${text(found.message, "")}`]);
}

// A time to come (a policy's next run): "ago" says nothing of it, the date and time do.
function whenNode(iso) {
  const date = iso ? new Date(iso) : null;
  if (!date || Number.isNaN(date.getTime())) return el("span", { text: text(iso) });
  const shown = date.toLocaleString([], { hour12: false, month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  return el("time", { text: shown, attrs: { datetime: iso } });
}

const lists = {
  backups: createList({ id: "backups", kind: "backup", emptyText: "No backups.", sortKey: "time", sortDir: -1,
    rowData: (b) => ({ vm: sp(b).vm }),
    filters: [
      { name: "phase", label: "Phase", values: (items) => items.map((b) => st(b).phase), match: (b, v) => st(b).phase === v },
      { name: "vm", label: "VM", values: (items) => items.map((b) => sp(b).vm), match: (b, v) => sp(b).vm === v },
    ],
    columns: [nameCol,
      { key: "vm", label: "VM", value: (b) => sp(b).vm, cell: (b) => link(href("vms", sp(b).vm), sp(b).vm), search: true },
      { key: "target", label: "Target", value: (b) => sp(b).target, search: true },
      { key: "mode", label: "Mode", value: (b) => st(b).mode, cell: (b) => el("span", { text: text(st(b).mode), title: st(b).mode_reason || undefined }) },
      { key: "phase", label: "Phase", value: (b) => st(b).phase, cell: (b) => badge(st(b).phase), search: true },
      { key: "size", label: "Size", num: true, value: (b) => st(b).total_bytes, cell: (b) => text(size(st(b).total_bytes)) },
      { key: "consistency", label: "Consistent", value: (b) => st(b).consistency,
        cell: (b) => el("span", { text: text(st(b).consistency), title: st(b).consistency_reason || undefined }) },
      { key: "verified", label: "Verified", value: (b) => (st(b).verification || {}).result, cell: verification },
      { key: "time", label: "Time", value: (b) => st(b).finished_at || st(b).started_at || b.metadata.created_at,
        cell: (b) => timeNode(st(b).finished_at || st(b).started_at || b.metadata.created_at) },
      messageCol] }),
  targets: createList({ id: "backuptargets", emptyText: "No backup targets.", columns: [nameCol,
    { key: "cluster", label: "Cluster", value: (t) => sp(t).cluster, search: true },
    { key: "path", label: "Path", value: (t) => sp(t).path, search: true },
    { key: "used", label: "Used / capacity", num: true, value: (t) => (st(t).capacity_gib ? st(t).used_gib / st(t).capacity_gib : null),
      cell: (t) => bar(st(t).capacity_gib ? st(t).used_gib / st(t).capacity_gib : 0,
        `${text(st(t).used_gib, "0")} / ${text(st(t).capacity_gib || sp(t).capacity_gib, "?")} GiB`, null, true) },
    { key: "free", label: "Free GiB", num: true, value: (t) => st(t).free_gib },
    { key: "health", label: "Health", value: (t) => (st(t).healthy ? "Healthy" : "Unhealthy"),
      cell: (t) => el("span", { cls: `badge tone-${st(t).healthy ? "ok" : "bad"}`, text: st(t).healthy ? "Healthy" : "Unhealthy" }) },
    { key: "unreachable", label: "Unreachable from", value: (t) => Object.keys(st(t).unreachable_hosts || {}).join(" "),
      cell: (t) => el("span", { text: text(Object.keys(st(t).unreachable_hosts || {}).join(", ")),
        title: Object.entries(st(t).unreachable_hosts || {}).map(([h, why]) => `${h}: ${why}`).join("\n") || undefined }), search: true },
    messageCol] }),
  policies: createList({ id: "backuppolicies", emptyText: "No backup policies.", columns: [nameCol,
    { key: "schedule", label: "Schedule", value: (p) => sp(p).schedule, search: true },
    { key: "selector", label: "Selector", value: (p) => sp(p).selector, search: true },
    { key: "target", label: "Target", value: (p) => sp(p).target, search: true },
    { key: "last", label: "Last run", value: (p) => st(p).last_run, cell: (p) => timeNode(st(p).last_run) },
    { key: "next", label: "Next run", value: (p) => st(p).next_run, cell: (p) => whenNode(st(p).next_run) },
    { key: "missed", label: "Missed", num: true, value: (p) => st(p).missed_windows,
      cell: (p) => el("span", { text: text(st(p).missed_windows, "0"), title: st(p).last_missed_reason || undefined }) },
    { key: "kept", label: "Kept", num: true, value: (p) => st(p).backups },
    messageCol] }),
};

addRowAction("backup", {
  name: "verify",
  label: "Verify",
  role: "operator",
  title: "Check the backup's files on its target (qemu-img check and compare)",
  when: (b) => st(b).phase === "Succeeded" && !b.metadata.deletion_requested_at,
  async run(b) {
    try {
      await send("POST", `/v1/backups/${path(b.metadata.name)}/verify`);
      notify("info", `Verification of ${b.metadata.name} asked for: its result shows in the list.`);
    } catch (err) {
      notifyError(err);
    }
  },
});

// The browser keeps at most six connections to the server, and the page's own watches take
// four: the view watches its backups only, and lists the targets and policies when it is shown,
// again (a second later) when a backup changes (their usage and runs follow the backups), and on
// Reload.
const LISTED = [["backuptargets-list", "backuptargets", "targets"], ["backuppolicies-list", "backuppolicies", "policies"]];
const RELIST_MS = 1000;
let following = null; // the view's watch while it is shown
let relist = null;

async function listOthers(signal) {
  for (const [container, plural, key] of LISTED) {
    const holder = document.getElementById(container);
    try {
      const found = await listAll(plural, signal);
      holder.querySelector(".dialog-error")?.remove();
      lists[key].update([...found.items.values()]);
    } catch (err) {
      if (signal.aborted) return;
      holder.querySelector(".dialog-error")?.remove();
      holder.append(el("p", { cls: "dialog-error", text: explainError(err).join(": ") }));
    }
  }
}

function listLater(signal) {
  if (relist !== null) return;
  relist = window.setTimeout(() => { relist = null; if (!signal.aborted) listOthers(signal); }, RELIST_MS);
}

function load() {
  if (following) following.abort();
  const watches = new AbortController();
  following = watches;
  state.abort.signal.addEventListener("abort", () => watches.abort(), { once: true }); // signed out
  const holder = document.getElementById("backups-list");
  if (!holder.contains(lists.backups.root)) {
    const reload = el("button", { cls: "button small subtle-ink", text: "Reload", data: { reload: "backups" } });
    reload.type = "button";
    reload.addEventListener("click", () => load());
    holder.replaceChildren(lists.backups.root);
    lists.backups.root.querySelector(".list-tools").append(reload);
  }
  for (const [container, , key] of LISTED) {
    const other = document.getElementById(container);
    if (!other.contains(lists[key].root)) other.replaceChildren(lists[key].root);
  }
  let first = true;
  followKind("backups", (items) => {
    lists.backups.update([...items.values()]);
    if (first) first = false;
    else listLater(watches.signal);
  }, holder, watches.signal);
  listOthers(watches.signal);
}

let shownRun = null; // the session and role the view was loaded for: drawn again when either changes
onView("backups", (route) => {
  if (!route) {
    if (following) { following.abort(); following = null; }
    shownRun = null;
    return;
  }
  if (!state.abort || shownRun === `${state.run}/${state.role}`) return;
  shownRun = `${state.run}/${state.role}`;
  load();
});

export { lists as backupLists };
