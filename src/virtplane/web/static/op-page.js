// An operation's page (#/operations/NAME): its phase, step and progress as the operations'
// watch brings them, and its task log: the operation's events, followed live.

import { $, badge, el, link, text, timeNode } from "./dom.js";
import { api } from "./api.js";
import { eventRowOf, progressCell } from "./render.js";
import { href, onView } from "./router.js";
import { eventListeners, state } from "./state.js";

const KIND = "VirtualMachineOperation";
const page = { name: null, loaded: null };
const st = (obj) => (obj && obj.status) || {};

function summary(op) {
  const status = st(op);
  const spec = op.spec || {};
  return el("div", { cls: "panel", attrs: { id: "op-summary" } }, [el("h2", { text: "Progress" }), el("dl", { cls: "facts" }, [
    el("dt", { text: "Phase" }), el("dd", { cls: "phase" }, [badge(status.phase)]),
    el("dt", { text: "VM" }), el("dd", {}, [spec.vm ? link(href("vms", spec.vm), spec.vm) : "–"]),
    el("dt", { text: "Type" }), el("dd", { text: text(spec.type) }),
    el("dt", { text: "Step" }), el("dd", { cls: "step", text: text(status.step) }),
    el("dt", { text: "Progress" }), el("dd", { cls: "progress" }, [progressCell(status.progress)]),
    el("dt", { text: "Message" }), el("dd", { cls: "message", text: text(status.message) }),
    el("dt", { text: "Started" }), el("dd", {}, [timeNode(status.started_at || op.metadata.created_at)]),
    el("dt", { text: "Finished" }), el("dd", {}, [timeNode(status.finished_at)]),
  ])]);
}

async function taskLog(body) {
  const found = await api(`/v1/events?kind=${KIND}&name=${encodeURIComponent(page.name)}&limit=100`, state.abort.signal);
  const rows = (found.items || []).map((event) => eventRowOf(event, false)).reverse();
  body.replaceChildren(el("table", { cls: "grid compact", attrs: { id: "op-log" } }, [
    el("thead", {}, [el("tr", {}, ["Time", "Type", "Object", "Reason", "Message"].map((h) => el("th", { text: h })))]),
    el("tbody", {}, rows)]));
}

eventListeners.add((event) => {
  const log = document.querySelector("#op-log tbody");
  if (log && page.name && event.kind === KIND && event.name === page.name) log.prepend(eventRowOf(event, true));
});

function draw(route) {
  const op = state.objects.operations.get(route.name);
  if (page.name === route.name && op && page.loaded !== null) {
    if (op.metadata.resource_version === page.loaded) return;
    page.loaded = op.metadata.resource_version;
    $("op-summary").replaceWith(summary(op));
    $("op-page").querySelector(".page-head .badge").replaceWith(badge(st(op).phase));
    return;
  }
  page.name = route.name;
  page.loaded = op ? op.metadata.resource_version : null;
  const head = el("div", { cls: "page-head" }, [link("#/operations", "‹ Operations", "back"), el("h1", { text: route.name }), badge(op ? st(op).phase : "Unknown")]);
  if (!op) {
    $("op-page").replaceChildren(head, el("p", { cls: "empty", text: state.streams.has("operations") ? `No operation ${route.name}.` : "Loading…" }));
    return;
  }
  const log = el("div", {}, [el("p", { cls: "hint", text: "Loading…" })]);
  $("op-page").replaceChildren(head, summary(op), el("div", { cls: "panel" }, [el("h2", {}, ["Task log ", el("span", { cls: "note", text: "its events, newest first" })]), log]));
  taskLog(log).catch((err) => log.replaceChildren(el("p", { cls: "dialog-error", text: err.message })));
}

onView("operation", (route) => {
  if (!route) { page.name = null; return; }
  draw(route);
});
