// Host maintenance: the panel of each host's maintenance with its live per-VM progress, and the
// admin's host actions: maintenance with a strategy picker that previews the plan (a dry run)
// before the operator confirms, cancel (with or without return_vms), enable and disable.

import { $, badge, bar, button, cell, el, pick, text } from "./dom.js";
import { path, send } from "./api.js";
import { formValues, notify, notifyError, openDialog } from "./dialogs.js";
import { addRowAction } from "./registry.js";
import { can, state } from "./state.js";
import { MAINTENANCE_HOST_STATES as VOCABULARY_HOST_STATES, STRATEGIES } from "./vocabulary.js";

const ACTIVE_MAINTENANCE = new Set(["Draining", "Cancelling"]);
export const MAINTENANCE_HOST_STATES = new Set(VOCABULARY_HOST_STATES);
const STRATEGY_CHOICES = [
  ["", "Default", "the setting host.maintenance.local.storage.strategy decides"],
  ...STRATEGIES.map(([value, meaning]) => [value, value, meaning]),
];

// One plan item in words: what maintenance will do with the VM.
function planWords(item) {
  const target = item.target ? ` to ${item.target}` : "";
  switch (item.action) {
    case "Migrate": return `migrate${target}`;
    case "MigrateWithStorage": return `migrate with storage${target}`;
    case "Stop": return "stop (shut down, then forced)";
    case "ForceStop": return "stop (power off)";
    case "Leave": return "leave (not running)";
    case "Blocked": return `blocked because ${text(item.reason, "it cannot be moved")}`;
    default: return text(item.action);
  }
}

function planItems(m) {
  const plan = pick(m, "status.plan", "plan") || [];
  return Array.isArray(plan) ? plan : Array.isArray(plan.items) ? plan.items : [];
}

// what the hypervisor measures of a migration under way (domain/progress.py's fields)
function measured(p) {
  if (!p.iteration || !["Migrating", "Returning"].includes(p.state)) return "";
  const mode = p.post_copy ? "post-copy" : `pass ${p.iteration}`;
  return `${mode}, dirtying ${Math.round(p.dirty_rate_mib_s)} MiB/s, ${Math.round(p.remaining_mib)} MiB left`;
}

export function renderMaintenance(found) {
  state.maintenanceHosts = new Set(
    found.filter(([, m]) => pick(m, "status.phase", "phase") !== "Cancelled").map(([name]) => name),
  );
  const blocks = found.sort((a, b) => a[0].localeCompare(b[0])).map(([host, m]) => {
    const phase = pick(m, "status.phase", "phase");
    const strategy = pick(m, "status.strategy", "spec.strategy", "strategy");
    const message = pick(m, "status.message", "message");
    const dryRun = pick(m, "spec.dry_run", "dry_run");
    const progress = pick(m, "status.progress", "progress") || {};
    const planned = new Map(planItems(m).filter((p) => p && p.vm).map((p) => [p.vm, p]));
    const vmNames = [...new Set([...planned.keys(), ...Object.keys(progress)])].sort();
    const rows = vmNames.map((vm) => {
      const item = planned.get(vm) || {};
      const p = progress[vm] || {};
      const vmState = p.state || p.phase;
      const pct = Number(p.progress_pct ?? p.percent ?? p.pct);
      return el("tr", { data: { vm } }, [
        cell(vm, "name"),
        cell(item.action),
        cell(p.target || item.target),
        cell(vmState ? badge(vmState) : "–", "state"),
        cell(Number.isFinite(pct) ? bar(pct / 100, `${Math.round(pct)}%`, "progress") : "–", "progress"),
        cell([p.message || item.reason, measured(p), item.risk ? `risk: ${item.risk}` : ""].filter(Boolean).join(" · "), "message"),
      ]);
    });
    const table = el("table", { cls: "grid compact" }, [
      el("thead", {}, [el("tr", {}, ["VM", "Action", "Target", "State", "Progress", "Message"].map((h) => el("th", { text: h })))]),
      el("tbody", {}, rows),
    ]);
    const cancellable = ACTIVE_MAINTENANCE.has(phase) || phase === "Completed" || phase === "Failed";
    return el("div", { cls: "maintenance", data: { host } }, [
      el("h3", {}, [
        el("span", { cls: "name", text: host }),
        " ",
        badge(phase),
        el("span", { cls: "note", text: `strategy ${text(strategy, "default")}${dryRun ? " · dry run" : ""}` }),
        can("admin") && cancellable && phase !== "Cancelling"
          ? button("Cancel maintenance…", () => cancelDialog(host), { cls: "small", data: { action: "cancel-maintenance" } })
          : null,
      ]),
      message ? el("p", { cls: "message", text: message }) : null,
      rows.length ? table : el("p", { cls: "empty", text: "Nothing to move." }),
    ]);
  });
  $("maintenance").replaceChildren(...blocks);
  $("maintenance-panel").hidden = blocks.length === 0;
}

function planTable(answer) {
  const items = planItems(answer);
  const feasible = pick(answer, "plan.feasible");
  const rows = items.map((item) => el("tr", { data: { vm: item.vm, action: item.action } }, [
    cell(item.vm, "name"),
    cell(badge(item.action), "kind"),
    cell(planWords(item), "plan"),
  ]));
  return el("div", { cls: "plan", data: { feasible: String(Boolean(feasible)) } }, [
    el("p", { cls: feasible ? "plan-summary" : "plan-summary blocked", text: feasible
      ? `${items.length} VM(s) on the host; every one can be handled.`
      : `Blocked: ${(answer.blocking || []).join(", ") || "some VMs"} cannot be handled with this strategy.` }),
    rows.length
      ? el("table", { cls: "grid compact" }, [
        el("thead", {}, [el("tr", {}, ["VM", "Action", "What happens"].map((h) => el("th", { text: h })))]),
        el("tbody", {}, rows),
      ])
      : el("p", { cls: "empty", text: "No VMs on this host: nothing to move." }),
  ]);
}

function maintenanceDialog(host) {
  const name = host.metadata.name;
  const picker = el("fieldset", { cls: "choices" }, [el("legend", { text: "Strategy for running VMs with local disks" }),
    ...STRATEGY_CHOICES.map(([value, label, hint]) => {
      const radio = el("input", { attrs: { type: "radio", name: "strategy", value, checked: value === "" } });
      return el("label", { cls: "choice" }, [radio, el("strong", { text: label }), el("span", { cls: "hint", text: hint })]);
    })]);
  const preview = el("div", { cls: "plan-preview" }, [el("p", { cls: "hint", text: "Loading the plan…" })]);
  let shown = 0; // only the latest preview is drawn
  const dialog = openDialog({ name: "maintenance", title: `Maintenance of host ${name}`, body: [picker, preview] });
  const strategy = () => formValues(picker).strategy || null;
  async function previewPlan() {
    const asked = ++shown;
    dialog.clearError();
    preview.replaceChildren(el("p", { cls: "hint", text: "Loading the plan…" }));
    try {
      const answer = await send("POST", `/v1/hosts/${path(name)}/maintenance`, { strategy: strategy(), dry_run: true });
      if (asked === shown && !dialog.closed) preview.replaceChildren(planTable(answer));
    } catch (err) {
      if (asked === shown && !dialog.closed) { preview.replaceChildren(); dialog.showError(err); }
    }
  }
  picker.addEventListener("change", previewPlan);
  dialog.setActions([{ name: "confirm", label: "Start maintenance", cls: "danger", run: async () => {
    await send("POST", `/v1/hosts/${path(name)}/maintenance`, { strategy: strategy(), dry_run: false });
    dialog.close();
    notify("ok", `Maintenance of ${name} started (strategy ${strategy() || "default"}).`);
  } }]);
  previewPlan();
}

function cancelDialog(name) {
  const back = el("input", { attrs: { type: "checkbox", name: "return_vms" } });
  const dialog = openDialog({
    name: "cancel-maintenance",
    title: `Cancel the maintenance of ${name}`,
    body: [
      el("p", { text: "No new moves are scheduled, migrations in flight end, the host returns to Enabled and the VMs maintenance stopped start again." }),
      el("label", { cls: "choice" }, [back, el("span", { text: "Migrate back the VMs that left the host (return_vms)" })]),
    ],
  });
  dialog.setActions([{ name: "confirm", label: "Cancel maintenance", cls: "danger", run: async () => {
    const returning = back.checked;
    await send("DELETE", `/v1/hosts/${path(name)}/maintenance?return_vms=${returning}`);
    dialog.close();
    notify("ok", `Maintenance of ${name} cancelled${returning ? "; the VMs that left come back" : ""}.`);
  } }]);
}

async function setEnabled(host, enabled) {
  const name = host.metadata.name;
  try {
    await send("PATCH", `/v1/hosts/${path(name)}`, { spec: { enabled } });
    notify("ok", `Host ${name} ${enabled ? "enabled" : "disabled"}.`);
  } catch (err) {
    notifyError(err);
  }
}

const hostState = (host) => host.status && host.status.resource_state;

addRowAction("host", { name: "maintenance", label: "Maintenance…", role: "admin",
  when: (h) => hostState(h) === "Enabled" || hostState(h) === "ErrorInMaintenance", run: maintenanceDialog });
addRowAction("host", { name: "cancel-maintenance", label: "Cancel maintenance…", role: "admin",
  when: (h) => MAINTENANCE_HOST_STATES.has(hostState(h)), run: (h) => cancelDialog(h.metadata.name) });
addRowAction("host", { name: "disable", label: "Disable", role: "admin",
  when: (h) => hostState(h) === "Enabled", run: (h) => setEnabled(h, false) });
addRowAction("host", { name: "enable", label: "Enable", role: "admin",
  when: (h) => hostState(h) === "Disabled", run: (h) => setEnabled(h, true) });
