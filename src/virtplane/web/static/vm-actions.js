// The VM row actions: start, stop (graceful, or forced after a confirmation), restart, migrate
// (a target picker with each host's placement verdict), snapshot, restore (a mode picker; a
// DryRun shows what would change before the real restore) and delete. Which buttons a row shows
// follows its phase only; the API decides the rest (run policies) and says why it refuses.

import { badge, cell, el, field, input, text } from "./dom.js";
import { api, ApiStatusError, listAll, path, send } from "./api.js";
import { formValues, notify, notifyError, openDialog } from "./dialogs.js";
import { addRowAction } from "./registry.js";
import { state, waitFor } from "./state.js";
import { FINISHED_OPS } from "./render.js";
import { OPERATION_PHASES } from "./vocabulary.js";

const takes = (type) => new Set(OPERATION_PHASES[type]);  // as the server admits the operation
const STARTABLE = takes("Start");
const STOPPABLE = takes("Stop");
const RESTARTABLE = takes("Restart");
const MIGRATABLE = takes("Migrate");
const SUFFIX = "abcdefghijklmnopqrstuvwxyz0123456789";

function suffix() {
  return [...crypto.getRandomValues(new Uint8Array(5))].map((b) => SUFFIX[b % SUFFIX.length]).join("");
}

// <vm>-<word>-<suffix>, the VM's name shortened so that the whole stays a DNS label.
function generatedName(vm, word) {
  const tail = `-${word}-${suffix()}`;
  return vm.slice(0, 63 - tail.length).replace(/-+$/, "") + tail;
}

const phaseOf = (vm) => (vm.status && vm.status.phase) || "Unknown";
const nameOf = (vm) => vm.metadata.name;

async function operate(vm, type, extra = {}) {
  const name = generatedName(vm, type.toLowerCase());
  await send("POST", "/v1/operations", {
    kind: "VirtualMachineOperation", metadata: { name }, spec: { vm, type, ...extra },
  });
  return name;
}

async function direct(vm, type) {
  try {
    const op = await operate(nameOf(vm), type);
    notify("ok", `${type} of ${nameOf(vm)}: operation ${op} created.`);
  } catch (err) {
    notifyError(err);
  }
}

function stopDialog(vm) {
  const name = nameOf(vm);
  const dialog = openDialog({
    name: "stop",
    title: `Stop VM ${name}`,
    body: [el("p", { text: `Shut down asks the guest to shut down within its grace period (${text(vm.spec && vm.spec.termination_grace_period_s, "the default")} s), then powers it off.` })],
  });
  const stop = (force) => async () => {
    const op = await operate(name, "Stop", { force });
    dialog.close();
    notify("ok", `${force ? "Forced stop" : "Stop"} of ${name}: operation ${op} created.`);
  };
  dialog.setActions([
    { name: "graceful", label: "Shut down", run: stop(false) },
    { name: "force", label: "Power off…", cls: "danger", run: async () => {
      dialog.setBody([el("p", { cls: "warning", text: `Power off ${name} now? The guest is not asked to shut down: what it has not written to disk is lost.` })]);
      dialog.setActions([{ name: "confirm-force", label: "Power off now", cls: "danger", run: stop(true) }]);
    } },
  ]);
}

async function migrateDialog(vm) {
  const name = nameOf(vm);
  const dialog = openDialog({ name: "migrate", title: `Migrate VM ${name}`, body: [el("p", { cls: "hint", text: "Asking each host…" })] });
  dialog.setActions([]);
  let targets;
  try {
    targets = await api(`/v1/vms/${path(name)}/placement`, state.abort && state.abort.signal);
  } catch (err) {
    dialog.showError(err);
    return;
  }
  const auto = el("input", { attrs: { type: "radio", name: "target", value: "", checked: Boolean(targets.chosen), disabled: !targets.chosen } });
  const rows = targets.hosts.map((verdict) => {
    const radio = el("input", { attrs: { type: "radio", name: "target", value: verdict.host, disabled: !verdict.ok } });
    return el("tr", { cls: verdict.ok ? "ok" : "rejected", data: { host: verdict.host } }, [
      cell(radio, "pick"),
      cell(verdict.host, "name"),
      cell(badge(verdict.ok ? "Ready" : "Blocked"), "verdict"),
      cell(verdict.ok ? (verdict.host === targets.chosen ? "placement's pick" : "can take it") : verdict.reason, "reason"),
    ]);
  });
  const form = el("div", { cls: "targets" }, [
    el("p", { text: `On ${text(targets.host)} (${targets.phase})${targets.copy_storage ? "; its local disks are copied too" : ""}.` }),
    targets.blocked ? el("p", { cls: "warning", text: `The VM cannot leave ${targets.blocked}.` }) : null,
    el("label", { cls: "choice", data: { host: "" } }, [auto, el("span", { text: targets.chosen ? `Automatic (now: ${targets.chosen})` : "Automatic (no host fits now)" })]),
    el("table", { cls: "grid compact" }, [
      el("thead", {}, [el("tr", {}, ["", "Host", "Verdict", "Why"].map((h) => el("th", { text: h })))]),
      el("tbody", {}, rows),
    ]),
  ]);
  dialog.setBody([form]);
  dialog.setActions([{ name: "confirm", label: "Migrate", run: async () => {
    const target = formValues(form).target;
    if (target === undefined) throw new ApiStatusError(0, "pick a host that can take the VM", "NoTarget");
    const op = await operate(name, "Migrate", target ? { migrate: { target_host: target } } : {});
    dialog.close();
    notify("ok", `Migration of ${name}${target ? ` to ${target}` : ""}: operation ${op} created.`);
  } }]);
}

function snapshotDialog(vm) {
  const name = nameOf(vm);
  const running = phaseOf(vm) === "Running";
  const snapName = input("name", generatedName(name, "snap"), { required: true, spellcheck: "false" });
  const memory = el("input", { attrs: { type: "checkbox", name: "with_memory", disabled: !running } });
  const dialog = openDialog({
    name: "snapshot",
    title: `Snapshot VM ${name}`,
    body: [
      field("Snapshot name", snapName),
      el("label", { cls: "choice" }, [memory, el("span", { text: running ? "With memory (the running guest's RAM too)" : "With memory (only for a running VM)" })]),
    ],
  });
  dialog.setActions([{ name: "confirm", label: "Take snapshot", run: async () => {
    await send("POST", "/v1/snapshots", {
      kind: "VirtualMachineSnapshot", metadata: { name: snapName.value.trim() }, spec: { vm: name, with_memory: memory.checked },
    });
    dialog.close();
    notify("ok", `Snapshot ${snapName.value.trim()} of ${name} requested.`);
  } }]);
}

function reportTable(progress) {
  const rows = Object.entries(progress || {}).map(([key, value]) => el("tr", { data: { key } }, [
    cell(key, "name"), cell(typeof value === "object" ? JSON.stringify(value) : value, "change"),
  ]));
  return el("table", { cls: "grid compact report" }, [
    el("thead", {}, [el("tr", {}, [el("th", { text: "Resource" }), el("th", { text: "What would change" })])]),
    el("tbody", {}, rows),
  ]);
}

// From a snapshot, or (kind "backup") from a backup: the same operation, another source.
export async function restoreDialog(vm, preferred = null, kind = "snapshot") {
  const name = nameOf(vm);
  const plural = `${kind}s`;
  const usable = kind === "backup" ? "Succeeded" : "Ready";
  const dialog = openDialog({ name: "restore", title: `Restore VM ${name}`, body: [el("p", { cls: "hint", text: `Loading its ${plural}…` })] });
  dialog.setActions([]);
  let sources;
  try {
    sources = [...(await listAll(kind === "backup" ? "backups" : "snapshots", state.abort && state.abort.signal, `&fieldSelector=${encodeURIComponent(`spec.vm=${name}`)}`)).items.values()];
  } catch (err) {
    dialog.showError(err);
    return;
  }
  if (!sources.length) {
    dialog.setBody([el("p", { cls: "empty", text: `VM ${name} has no ${plural} yet.` })]);
    return;
  }
  const chooser = el("select", { attrs: { name: kind } }, sources.map((s) => {
    const phase = (s.status && s.status.phase) || "Pending";
    const what = kind === "backup" ? (s.status && s.status.mode) || "" : (s.status && s.status.power_state) || "";
    const option = el("option", { text: `${s.metadata.name} (${phase}${what ? `, ${what}` : ""})` });
    option.value = s.metadata.name;
    option.disabled = phase !== usable;
    option.selected = s.metadata.name === preferred;
    return option;
  }));
  const modes = el("fieldset", { cls: "choices" }, [el("legend", { text: "Mode" }), ...[
    ["DryRun", "DryRun: show what would change; change nothing"],
    ["Strict", "Strict: fail if any disk or name is missing"],
    ["BestEffort", "BestEffort: skip what is missing and say so"],
  ].map(([value, label]) => el("label", { cls: "choice" }, [
    el("input", { attrs: { type: "radio", name: "mode", value, checked: value === "DryRun" } }), el("span", { text: label })]))]);
  const report = el("div", { cls: "dry-run" });
  const form = el("div", {}, [field(kind === "backup" ? "Backup" : "Snapshot", chooser), modes, report]);
  dialog.setBody([form]);
  const run = async () => {
    const { mode } = formValues(form);
    const snapshot = formValues(form)[kind];
    const op = await operate(name, "Restore", { restore: { [kind]: snapshot, mode } });
    if (mode !== "DryRun") {
      dialog.close();
      notify("ok", `Restore of ${name} from ${kind} ${snapshot} (${mode}): operation ${op} created.`);
      return;
    }
    report.replaceChildren(el("p", { cls: "hint", text: `Operation ${op}: checking…` }));
    const done = await waitFor(() => {
      const found = state.objects.operations.get(op);
      return found && FINISHED_OPS.has(found.status && found.status.phase) ? found : null;
    });
    if (done.status.phase !== "Completed") {
      report.replaceChildren();
      throw new ApiStatusError(0, done.status.message, done.status.reason || done.status.phase);
    }
    report.replaceChildren(el("p", { cls: "hint", text: `${snapshot}: ${done.status.message}` }), reportTable(done.status.progress));
    for (const radio of modes.querySelectorAll("input")) radio.checked = radio.value === "Strict";
    label();
  };
  const label = () => {
    const mode = formValues(form).mode;
    dialog.setActions([{ name: "run", label: mode === "DryRun" ? "Preview changes" : `Restore now (${mode})`, cls: mode === "DryRun" ? "" : "danger", run }]);
  };
  modes.addEventListener("change", label);
  label();
}

// A backup of the VM now, into a target chosen among those defined (full or incremental as the
// controller decides, or full when asked).
export async function backupDialog(vm) {
  const name = nameOf(vm);
  const dialog = openDialog({ name: "backup", title: `Back up VM ${name}`, body: [el("p", { cls: "hint", text: "Loading the backup targets…" })] });
  dialog.setActions([]);
  let targets;
  try {
    targets = [...(await listAll("backuptargets", state.abort && state.abort.signal)).items.values()];
  } catch (err) {
    dialog.showError(err);
    return;
  }
  if (!targets.length) {
    dialog.setBody([el("p", { cls: "empty", text: "No backup target is defined (an admin's BackupTarget)." })]);
    return;
  }
  const chooser = el("select", { attrs: { name: "target" } }, targets.map((t) => {
    const option = el("option", { text: `${t.metadata.name} (${(t.status && t.status.free_gib) || 0} GiB free)` });
    option.value = t.metadata.name;
    return option;
  }));
  const full = el("label", { cls: "choice" }, [el("input", { attrs: { type: "checkbox", name: "full" } }), el("span", { text: "Full, even where an incremental one could be" })]);
  const form = el("div", {}, [field("Target", chooser), full]);
  dialog.setBody([form]);
  dialog.setActions([{ name: "confirm", label: "Back up now", run: async () => {
    const backup = generatedName(name, "backup");
    const { target, full: wanted } = formValues(form);
    await send("POST", "/v1/backups", { kind: "VirtualMachineBackup", metadata: { name: backup }, spec: { vm: name, target, full: wanted } });
    dialog.close();
    notify("ok", `Backup ${backup} of ${name} created.`);
  } }]);
}

function deleteDialog(vm) {
  const name = nameOf(vm);
  const dialog = openDialog({
    name: "delete",
    title: `Delete VM ${name}`,
    body: [el("p", { cls: "warning", text: `Delete ${name}? Its domain is destroyed and removed from its host. Its volumes stay.` })],
  });
  dialog.setActions([{ name: "confirm", label: "Delete", cls: "danger", run: async () => {
    await send("DELETE", `/v1/vms/${path(name)}`);
    dialog.close();
    notify("ok", `VM ${name} deleted.`);
  } }]);
}

addRowAction("vm", { name: "start", label: "Start", role: "operator", when: (vm) => STARTABLE.has(phaseOf(vm)), run: (vm) => direct(vm, "Start") });
addRowAction("vm", { name: "stop", label: "Stop…", role: "operator", when: (vm) => STOPPABLE.has(phaseOf(vm)), run: stopDialog });
addRowAction("vm", { name: "restart", label: "Restart", role: "operator", when: (vm) => RESTARTABLE.has(phaseOf(vm)), run: (vm) => direct(vm, "Restart") });
addRowAction("vm", { name: "migrate", label: "Migrate…", role: "operator", when: (vm) => MIGRATABLE.has(phaseOf(vm)), run: migrateDialog });
addRowAction("vm", { name: "snapshot", label: "Snapshot…", role: "operator", run: snapshotDialog });
addRowAction("vm", { name: "restore", label: "Restore…", role: "operator", run: restoreDialog });
addRowAction("vm", { name: "delete", label: "Delete…", role: "operator", run: deleteDialog });
