// virtplane console: lists hosts, VMs and operations a page at a time, then follows the API's
// watches (JSON lines from GET /v1/{kind}?watch=1&resource_version=N) and renders every change;
// the event log loads its newest page, follows new events the same way, and loads older pages
// on request. Plain JavaScript, no build step, no dependencies.
//
// Every value that comes from the API is put into the page with textContent (through
// el() and text()), never as HTML: names, labels and messages may be hostile.
"use strict";

(() => {
  const TOKEN_KEY = "virtplane.token";
  const RETRY_MS = 2000; // after a failed request or stream
  const RESTREAM_MS = 1000; // before opening again a stream that the server ended at once
  const RENDER_MS = 100; // changes that arrive together are drawn once
  const MAINTENANCE_MS = 500;
  const PAGE = 500;
  const EVENT_PAGE = 50;
  const EVENTS_KEPT = 1000;
  const FINISHED_OPS_SHOWN = 10;
  const KINDS = ["hosts", "vms", "operations"]; // followed by watches, besides the events

  // Counts always shown (zero or not), in this order; any other value is added when present.
  const VM_PHASES = ["Running", "Starting", "Stopping", "Migrating", "Pending", "Stopped"];
  const HOST_STATES = ["Enabled", "Disabled", "PrepareForMaintenance", "Maintenance"];
  const OP_PHASES = ["Pending", "InProgress", "Completed", "Failed"];
  const FINISHED_OPS = new Set(["Completed", "Failed", "Superseded"]);
  // Hosts whose maintenance is worth asking for (the endpoint answers 404 when there is none);
  // a host that left these states is asked once more while its maintenance was still active,
  // so that a cancelled one shows its last phase before it goes.
  const MAINTENANCE_HOST_STATES = new Set([
    "PrepareForMaintenance", "ErrorInPrepareForMaintenance", "Maintenance", "ErrorInMaintenance",
  ]);
  const ACTIVE_MAINTENANCE = new Set(["Draining", "Cancelling"]);

  const TONES = {
    ok: ["Running", "Enabled", "Up", "Completed", "Ready", "Normal", "Migrated", "Planned"],
    busy: ["Starting", "Stopping", "Migrating", "Pending", "InProgress", "PrepareForMaintenance",
      "Draining", "Cancelling", "WaitingForSlot"],
    warn: ["Paused", "Degraded", "Maintenance", "Blocked", "Warning", "Left"],
    bad: ["Failed", "ErrorInPrepareForMaintenance", "ErrorInMaintenance", "Down", "Disconnected"],
    idle: ["Stopped", "Disabled", "Superseded", "Cancelled", "Unknown"],
  };
  const TONE_OF = new Map();
  for (const [tone, values] of Object.entries(TONES)) {
    for (const value of values) TONE_OF.set(value, tone);
  }
  // Conditions where True is the notable state, not the healthy one.
  const NEGATIVE_CONDITIONS = new Set(["StartFailed", "RestartRequired", "Maintenance", "Migration"]);

  const $ = (id) => document.getElementById(id);

  const state = {
    token: null,
    run: 0, // bumped on sign-in/out so that a late answer of an old session is dropped
    abort: null, // ends every request and stream of the session
    objects: { hosts: new Map(), vms: new Map(), operations: new Map() },
    streams: new Set(), // what has been loaded and is being followed: hosts, vms, operations, events
    failing: new Set(), // what cannot reach the server right now
    eventCount: 0,
    olderEvents: null, // the continue token of the next older page of events
    maintenance: [],
    maintenanceHosts: new Set(),
    renderTimer: null,
    maintenanceTimer: null,
    vmPhaseFilter: null,
    lastData: null,
  };

  class AuthError extends Error {}
  class UnreachableError extends Error {}
  class ExpiredError extends Error {}
  class ApiStatusError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  // ------------------------------------------------------------------ DOM helpers

  function el(tag, opts = {}, children = []) {
    const node = document.createElement(tag);
    if (opts.cls) node.className = opts.cls;
    if (opts.text !== undefined && opts.text !== null) node.textContent = String(opts.text);
    if (opts.title) node.title = String(opts.title);
    if (opts.data) {
      for (const [key, value] of Object.entries(opts.data)) node.dataset[key] = String(value);
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function text(value, fallback = "–") {
    return value === null || value === undefined || value === "" ? fallback : String(value);
  }

  function toneOf(value) {
    return TONE_OF.get(String(value)) || "idle";
  }

  function badge(value, extraCls = "") {
    const shown = text(value, "Unknown");
    return el("span", { cls: `badge tone-${toneOf(shown)} ${extraCls}`.trim(), text: shown });
  }

  function cell(content, cls) {
    const td = el("td", { cls });
    if (content instanceof Node) td.append(content);
    else td.textContent = text(content);
    return td;
  }

  // A small meter; for allocations (warnHigh) a nearly full one is drawn in amber.
  function bar(fraction, label, title, warnHigh = false) {
    const clamped = Math.max(0, Math.min(1, Number.isFinite(fraction) ? fraction : 0));
    const fill = el("span", { cls: "bar-fill" });
    fill.style.width = `${(clamped * 100).toFixed(1)}%`;
    if (warnHigh && clamped >= 0.9) fill.classList.add("high");
    return el("span", { cls: "meter", title }, [el("span", { cls: "bar" }, [fill]), el("span", { cls: "meter-label", text: label })]);
  }

  function fillBody(table, rows, emptyId) {
    table.tBodies[0].replaceChildren(...rows);
    $(emptyId).hidden = rows.length > 0;
  }

  function formatTime(iso) {
    if (!iso) return "–";
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return String(iso);
    return date.toLocaleTimeString([], { hour12: false });
  }

  function ago(iso) {
    if (!iso) return "never";
    const then = new Date(iso).getTime();
    if (Number.isNaN(then)) return String(iso);
    const seconds = Math.max(0, Math.round((Date.now() - then) / 1000));
    if (seconds < 60) return `${seconds}s ago`;
    if (seconds < 3600) return `${Math.floor(seconds / 60)}m ago`;
    return `${Math.floor(seconds / 3600)}h ago`;
  }

  function gib(mib) {
    return `${(Number(mib || 0) / 1024).toFixed(1)} GiB`;
  }

  function countBy(items, key) {
    const counts = new Map();
    for (const item of items) {
      const value = key(item);
      counts.set(value, (counts.get(value) || 0) + 1);
    }
    return counts;
  }

  // ------------------------------------------------------------------ API access

  async function api(path, signal) {
    let response;
    try {
      response = await fetch(path, { headers: headers("application/json"), cache: "no-store", signal });
    } catch (err) {
      if (signal && signal.aborted) throw err;
      throw new UnreachableError(String(err && err.message ? err.message : err));
    }
    await check(response);
    try {
      return await response.json();
    } catch (err) {
      throw new ApiStatusError(response.status, "the server sent a response that is not JSON");
    }
  }

  function headers(accept) {
    return { Authorization: `Bearer ${state.token}`, Accept: accept };
  }

  async function check(response) {
    if (response.status === 401) {
      throw new AuthError(await errorMessage(response, "the token is not valid"));
    }
    if (response.status === 410) throw new ExpiredError(await errorMessage(response, "expired"));
    if (!response.ok) {
      throw new ApiStatusError(response.status, await errorMessage(response, response.statusText));
    }
  }

  async function errorMessage(response, fallback) {
    try {
      const body = await response.json();
      return text(body && body.message, fallback);
    } catch (err) {
      return fallback;
    }
  }

  // Every object of a kind, a page at a time; and the revision to watch from.
  async function listAll(plural, signal) {
    const items = new Map();
    let revision = null;
    let token = null;
    do {
      const more = token ? `&continue=${encodeURIComponent(token)}` : "";
      const page = await api(`/v1/${plural}?limit=${PAGE}${more}`, signal);
      for (const item of page.items || []) items.set(item.metadata.name, item);
      const meta = page.metadata || {};
      if (revision === null) revision = meta.resource_version || 0;
      token = meta.continue || null;
    } while (token);
    return { items, revision };
  }

  // Reads one watch stream, a JSON line at a time, until the server ends it; throws on a failure.
  async function readStream(path, onEvent, signal) {
    let response;
    try {
      response = await fetch(path, { headers: headers("application/x-ndjson"), cache: "no-store", signal });
    } catch (err) {
      if (signal.aborted) throw err;
      throw new UnreachableError(String(err && err.message ? err.message : err));
    }
    await check(response);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (err) {
        if (signal.aborted) throw err;
        throw new UnreachableError(String(err && err.message ? err.message : err));
      }
      if (chunk.done) return;
      buffer += decoder.decode(chunk.value, { stream: true });
      let end = buffer.indexOf("\n");
      while (end >= 0) {
        const line = buffer.slice(0, end).trim();
        buffer = buffer.slice(end + 1);
        if (line) onEvent(JSON.parse(line));
        end = buffer.indexOf("\n");
      }
    }
  }

  function pause(ms, signal) {
    return new Promise((resolve) => {
      const timer = window.setTimeout(resolve, ms);
      signal.addEventListener("abort", () => { window.clearTimeout(timer); resolve(); }, { once: true });
    });
  }

  function revisionOf(obj, fallback) {
    const value = obj && obj.metadata ? obj.metadata.resource_version : obj && obj.id;
    return typeof value === "number" && value > fallback ? value : fallback;
  }

  // Keeps one kind current: list it, then watch from the list's revision; a stream that ends or
  // breaks is opened again from the last revision seen, and one the server cannot resume (410)
  // lists again.
  async function follow(run, name, load, watchPath, onEvent, signal) {
    let revision = null;
    while (run === state.run) {
      const opened = Date.now();
      try {
        if (revision === null) revision = await load();
        if (run !== state.run) return;
        await readStream(watchPath(revision), (event) => {
          if (run !== state.run) return;
          connected(name);
          revision = revisionOf(event.object, revision);
          if (event.type !== "BOOKMARK") onEvent(event);
        }, signal);
        if (Date.now() - opened < RESTREAM_MS) await pause(RESTREAM_MS, signal);
      } catch (err) {
        if (signal.aborted || run !== state.run) return;
        if (err instanceof ExpiredError) {
          revision = null;
          continue;
        }
        failed(name, err);
        await pause(RETRY_MS, signal);
      }
    }
  }

  function followKind(run, plural, signal) {
    return follow(run, plural, async () => {
      const listed = await listAll(plural, signal);
      if (run === state.run) {
        state.objects[plural] = listed.items;
        changed(plural);
      }
      return listed.revision;
    }, (revision) => `/v1/${plural}?watch=1&resource_version=${revision}`, (event) => {
      const obj = event.object || {};
      const name = obj.metadata && obj.metadata.name;
      if (!name) return;
      if (event.type === "DELETED") state.objects[plural].delete(name);
      else state.objects[plural].set(name, obj);
      changed(plural);
    }, signal);
  }

  function followEvents(run, signal) {
    return follow(run, "events", async () => {
      const page = await api(`/v1/events?limit=${EVENT_PAGE}`, signal);
      const meta = page.metadata || {};
      if (run === state.run) {
        $("events").tBodies[0].replaceChildren();
        state.eventCount = 0;
        appendEvents(page.items || []);
        setOlderEvents(meta.continue || null);
      }
      return meta.resource_version || 0;
    }, (revision) => `/v1/events?watch=1&resource_version=${revision}`, (event) => {
      if (event.object) prependEvent(event.object);
    }, signal);
  }

  async function loadOlderEvents() {
    const token = state.olderEvents;
    if (!token || !state.abort) return;
    $("events-older").disabled = true;
    try {
      const page = await api(`/v1/events?limit=${EVENT_PAGE}&continue=${encodeURIComponent(token)}`, state.abort.signal);
      appendEvents(page.items || []);
      setOlderEvents((page.metadata || {}).continue || null);
    } catch (err) {
      if (err instanceof AuthError) signOut(`The API refused the token (401 Unauthorized): ${err.message}. Enter a valid token.`);
      else showBanner("error", `The older events could not be loaded: ${err.message}`);
    } finally {
      $("events-older").disabled = false;
    }
  }

  function setOlderEvents(token) {
    state.olderEvents = token;
    $("events-older").hidden = !token;
  }

  async function fetchMaintenance(hosts, signal) {
    const wanted = hosts
      .filter((h) => MAINTENANCE_HOST_STATES.has(h.status && h.status.resource_state)
        || state.maintenanceHosts.has(h.metadata.name))
      .map((h) => h.metadata.name);
    const found = await Promise.all(wanted.map(async (name) => {
      try {
        return [name, await api(`/v1/hosts/${encodeURIComponent(name)}/maintenance`, signal)];
      } catch (err) {
        if (err instanceof AuthError || err instanceof UnreachableError || signal.aborted) throw err;
        return [name, null]; // 404: no maintenance (or no endpoint yet); show nothing
      }
    }));
    return found.filter(([, m]) => m && typeof m === "object");
  }

  // ------------------------------------------------------------------ following changes

  function changed(plural) {
    if (state.renderTimer === null) {
      state.renderTimer = window.setTimeout(() => {
        state.renderTimer = null;
        renderAll();
      }, RENDER_MS);
    }
    if (KINDS.includes(plural) && state.maintenanceTimer === null) {
      // maintenance has no watch of its own: it is read again when hosts, VMs or operations change
      state.maintenanceTimer = window.setTimeout(refreshMaintenance, MAINTENANCE_MS);
    }
  }

  async function refreshMaintenance() {
    const run = state.run;
    if (!state.abort) return;
    try {
      const found = await fetchMaintenance([...state.objects.hosts.values()], state.abort.signal);
      if (run !== state.run) return;
      state.maintenance = found;
      renderMaintenance(found);
    } catch (err) {
      if (run === state.run && err instanceof AuthError) signOut(`The API refused the token (401 Unauthorized): ${err.message}. Enter a valid token.`);
    } finally {
      if (run === state.run) state.maintenanceTimer = null;
    }
  }

  function renderAll() {
    state.lastData = {
      hosts: [...state.objects.hosts.values()],
      vms: [...state.objects.vms.values()],
      ops: [...state.objects.operations.values()],
    };
    render(state.lastData);
    if (state.failing.size === 0 && state.streams.size === KINDS.length + 1) {
      setStatus("live", `live · updated ${formatTime(new Date().toISOString())}`);
    }
  }

  function connected(name) {
    const first = !state.streams.has(name) || state.failing.has(name);
    state.streams.add(name);
    state.failing.delete(name);
    if (first && state.failing.size === 0 && state.streams.size === KINDS.length + 1) {
      setStatus("live", `live · updated ${formatTime(new Date().toISOString())}`);
      hideBanner();
    }
  }

  function failed(name, err) {
    if (err instanceof AuthError) {
      signOut(`The API refused the token (401 Unauthorized): ${err.message}. Enter a valid token.`);
      return;
    }
    state.failing.add(name);
    if (err instanceof UnreachableError) {
      setStatus("down", "server unreachable");
      showBanner("error", `Cannot reach the virtplane API at ${window.location.origin}. `
        + `Retrying every ${RETRY_MS / 1000} s; the tables below show the last data received.`);
    } else {
      setStatus("down", `error ${err.status || ""}`.trim());
      showBanner("error", `The API answered with an error${err.status ? ` (${err.status})` : ""}: ${err.message}`);
    }
  }

  function start(token) {
    if (state.abort) state.abort.abort();
    state.token = token;
    state.run += 1;
    state.abort = new AbortController();
    state.objects = { hosts: new Map(), vms: new Map(), operations: new Map() };
    state.streams = new Set();
    state.failing = new Set();
    state.maintenance = [];
    state.maintenanceHosts = new Set();
    state.maintenanceTimer = null;
    $("events").tBodies[0].replaceChildren();
    state.eventCount = 0;
    setOlderEvents(null);
    $("login").hidden = true;
    $("dashboard").hidden = false;
    $("signout").hidden = false;
    setStatus("connecting", "connecting…");
    const { signal } = state.abort;
    for (const plural of KINDS) followKind(state.run, plural, signal);
    followEvents(state.run, signal);
  }

  function signOut(message) {
    state.run += 1;
    if (state.abort) state.abort.abort();
    state.abort = null;
    window.clearTimeout(state.renderTimer);
    window.clearTimeout(state.maintenanceTimer);
    state.renderTimer = null;
    state.maintenanceTimer = null;
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    $("dashboard").hidden = true;
    $("signout").hidden = true;
    $("login").hidden = false;
    hideBanner();
    const error = $("login-error");
    error.hidden = !message;
    error.textContent = message || "";
    setStatus(message ? "down" : "idle", message ? "unauthorized" : "not connected");
    $("token-input").value = "";
    $("token-input").focus();
  }

  function setStatus(kind, message) {
    $("status").dataset.state = kind;
    $("status-text").textContent = message;
  }

  function showBanner(kind, message) {
    const banner = $("banner");
    banner.dataset.kind = kind;
    banner.textContent = message;
    banner.hidden = false;
  }

  function hideBanner() {
    $("banner").hidden = true;
    $("banner").textContent = "";
  }

  // ------------------------------------------------------------------ rendering

  function render(data) {
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
      const heartbeat = el("span", { text: ago(status.last_heartbeat), title: text(status.last_heartbeat, "no heartbeat yet") });
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
      ]);
    });
    fillBody($("hosts"), rows, "hosts-empty");
  }

  function pick(obj, ...paths) {
    for (const path of paths) {
      let value = obj;
      for (const part of path.split(".")) value = value && typeof value === "object" ? value[part] : undefined;
      if (value !== undefined && value !== null) return value;
    }
    return undefined;
  }

  function renderMaintenance(found) {
    state.maintenanceHosts = new Set(
      found.filter(([, m]) => ACTIVE_MAINTENANCE.has(pick(m, "status.phase", "phase"))).map(([name]) => name),
    );
    const blocks = found.sort((a, b) => a[0].localeCompare(b[0])).map(([host, m]) => {
      const phase = pick(m, "status.phase", "phase");
      const strategy = pick(m, "status.strategy", "spec.strategy", "strategy");
      const message = pick(m, "status.message", "message");
      const dryRun = pick(m, "spec.dry_run", "dry_run");
      let plan = pick(m, "status.plan", "plan") || [];
      if (!Array.isArray(plan)) plan = Array.isArray(plan.items) ? plan.items : [];
      const progress = pick(m, "status.progress", "progress") || {};
      const planned = new Map(plan.filter((p) => p && p.vm).map((p) => [p.vm, p]));
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
          cell(Number.isFinite(pct) ? bar(pct / 100, `${Math.round(pct)}%`, "progress") : "–"),
          cell(p.message || item.reason, "message"),
        ]);
      });
      const table = el("table", { cls: "grid compact" }, [
        el("thead", {}, [el("tr", {}, ["VM", "Action", "Target", "State", "Progress", "Message"].map((h) => el("th", { text: h })))]),
        el("tbody", {}, rows),
      ]);
      return el("div", { cls: "maintenance", data: { host } }, [
        el("h3", {}, [
          el("span", { cls: "name", text: host }),
          " ",
          badge(phase),
          el("span", { cls: "note", text: `strategy ${text(strategy, "default")}${dryRun ? " · dry run" : ""}` }),
        ]),
        message ? el("p", { cls: "message", text: message }) : null,
        rows.length ? table : el("p", { cls: "empty", text: "Nothing to move." }),
      ]);
    });
    $("maintenance").replaceChildren(...blocks);
    $("maintenance-panel").hidden = blocks.length === 0;
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
  function prependEvent(event) {
    const body = $("events").tBodies[0];
    body.prepend(eventRow(event, true));
    state.eventCount += 1;
    if (state.eventCount > EVENTS_KEPT) {
      body.lastElementChild.remove();
      state.eventCount -= 1;
      setOlderEvents(null); // the rows below the cut are gone: no page continues them any more
    }
    $("events-empty").hidden = true;
  }

  // A page of older events (oldest first, as the API sends them) goes below the rows shown.
  function appendEvents(items) {
    const rows = items.map((event) => eventRow(event, false)).reverse();
    $("events").tBodies[0].append(...rows);
    state.eventCount += rows.length;
    $("events-empty").hidden = state.eventCount > 0;
  }

  function byName(a, b) {
    return a.metadata.name.localeCompare(b.metadata.name);
  }

  // ------------------------------------------------------------------ start-up

  function init() {
    $("login-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const token = $("token-input").value.trim();
      if (!token) return;
      sessionStorage.setItem(TOKEN_KEY, token);
      $("login-error").hidden = true;
      start(token);
    });
    $("signout").addEventListener("click", () => signOut(null));
    $("events-older").addEventListener("click", loadOlderEvents);
    const saved = sessionStorage.getItem(TOKEN_KEY);
    if (saved) start(saved);
    else signOut(null);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
