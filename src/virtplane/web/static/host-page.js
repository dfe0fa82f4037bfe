// A host's page (#/hosts/NAME): its allocation against what it may give out (and its usage
// graphs), the maintenance actions its state allows, its VMs, and its maintenance history (its
// current maintenance, if any, and its events).

import { $, badge, el, link, text } from "./dom.js";
import { api, AuthError, path } from "./api.js";
import { createList } from "./list.js";
import { actionButtons } from "./registry.js";
import { addressOf, eventRowOf, hostMeters } from "./render.js";
import { href, onView } from "./router.js";
import { state } from "./state.js";
import { mountUsage } from "./usage-charts.js";

const EVENTS_SHOWN = 100;
const page = { name: null, stopUsage: null, loaded: null };
const st = (obj) => (obj && obj.status) || {};

const hostVms = createList({
  id: "host-vms",
  kind: "vm",
  emptyText: "No VMs on this host.",
  columns: [
    { key: "name", label: "Name", value: (vm) => vm.metadata.name, cell: (vm) => link(href("vms", vm.metadata.name), vm.metadata.name) },
    { key: "phase", label: "Phase", value: (vm) => st(vm).phase, cell: (vm) => badge(st(vm).phase), search: true },
    { key: "size", label: "vCPUs", num: true, value: (vm) => vm.spec && vm.spec.cpu },
    { key: "memory", label: "Memory MiB", num: true, value: (vm) => vm.spec && vm.spec.memory_mib },
    { key: "address", label: "Address", value: addressOf, search: true },
  ],
});

function header(host) {
  const status = st(host);
  return el("div", { cls: "page-head" }, [
    link("#/hosts", "‹ Hosts", "back"),
    el("h1", { text: page.name }),
    badge(host ? status.resource_state : "Unknown"),
    host ? badge(status.connection) : null,
    host ? el("span", { cls: "action-buttons", data: { for: "host" } }, actionButtons("host", host)) : null,
  ]);
}

function allocation(host) {
  const { cpu, memory } = hostMeters(host);
  const status = st(host);
  return el("dl", { cls: "facts", attrs: { id: "host-allocation" } }, [
    el("dt", { text: "vCPUs allocated / allocatable" }), el("dd", { cls: "cpu" }, [cpu]),
    el("dt", { text: "Memory allocated / allocatable" }), el("dd", { cls: "memory" }, [memory]),
    el("dt", { text: "VMs" }), el("dd", { text: text((status.allocated || {}).vms, "0") }),
    el("dt", { text: "Cluster" }), el("dd", { text: text(host.spec && host.spec.cluster) }),
    el("dt", { text: "Message" }), el("dd", { text: text(status.message) }),
  ]);
}

async function history(body) {
  const signal = state.abort.signal;
  let current = null;
  try {
    current = await api(`/v1/hosts/${path(page.name)}/maintenance`, signal);
  } catch (err) {
    if (err instanceof AuthError) throw err;
    current = null; // 404: none
  }
  const found = await api(`/v1/events?kind=Host&name=${encodeURIComponent(page.name)}&limit=${EVENTS_SHOWN}`, signal);
  const rows = (found.items || []).map((event) => eventRowOf(event, false)).reverse();
  body.replaceChildren(
    current ? el("p", { cls: "maintenance-now" }, ["Maintenance: ", badge(current.phase), ` strategy ${text(current.strategy)} `, text(current.message, "")]) : null,
    rows.length ? el("table", { cls: "grid compact", attrs: { id: "host-events" } }, [
      el("thead", {}, [el("tr", {}, ["Time", "Type", "Object", "Reason", "Message"].map((h) => el("th", { text: h })))]),
      el("tbody", {}, rows)]) : el("p", { cls: "empty", text: "No events." }),
  );
}

function draw(route) {
  const host = state.objects.hosts.get(route.name);
  const vms = [...state.objects.vms.values()].filter((vm) => st(vm).host === route.name);
  if (page.name === route.name && host && page.loaded !== null) {
    hostVms.update(vms);
    if (host.metadata.resource_version === page.loaded) return;
    page.loaded = host.metadata.resource_version;
    $("host-page").firstChild.replaceWith(header(host));
    $("host-allocation").replaceWith(allocation(host));
    history($("host-history")).catch(() => {});
    return;
  }
  if (page.stopUsage) page.stopUsage();
  page.stopUsage = null;
  page.name = route.name;
  page.loaded = host ? host.metadata.resource_version : null;
  if (!host) {
    $("host-page").replaceChildren(header(null), el("p", { cls: "empty", text: state.streams.has("hosts") ? `No host ${route.name}.` : "Loading…" }));
    return;
  }
  const usage = el("div", { cls: "usage", attrs: { id: "host-usage" } });
  const historyBody = el("div", { attrs: { id: "host-history" } }, [el("p", { cls: "hint", text: "Loading…" })]);
  $("host-page").replaceChildren(header(host),
    el("div", { cls: "panel" }, [el("h2", { text: "Allocation" }), allocation(host)]),
    el("div", { cls: "panel" }, [el("h2", { text: "Usage" }), usage]),
    el("div", { cls: "panel" }, [el("h2", { text: "VMs on this host" }), hostVms.root]),
    el("div", { cls: "panel" }, [el("h2", {}, ["Maintenance history ", el("span", { cls: "note", text: "its current maintenance and events, newest first" })]), historyBody]));
  page.stopUsage = mountUsage(usage, "host", page.name).stop;
  hostVms.update(vms);
  history(historyBody).catch((err) => historyBody.replaceChildren(el("p", { cls: "dialog-error", text: err.message })));
}

onView("host", (route) => {
  if (!route) {
    if (page.stopUsage) page.stopUsage();
    page.stopUsage = null;
    page.name = null;
    return;
  }
  draw(route);
});

