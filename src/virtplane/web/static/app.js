// virtplane console: lists hosts, VMs and operations a page at a time, then follows the API's
// watches (JSON lines from GET /v1/{kind}?watch=1&resource_version=N) and renders every change;
// the event log loads its newest page, follows new events the same way, and loads older pages
// on request. Plain JavaScript modules, no build step, no dependencies.
//
// The modules: dom (building nodes: never HTML from strings), api (requests and streams),
// state, render (the tables), registry (row actions), dialogs, and the actions: vm-actions,
// create-vm, maintenance, console, screen. A module that adds row buttons registers them and is imported here.

import { $, formatTime, tickTimes } from "./dom.js";
import { api, AuthError, ExpiredError, listAll, pause, readStream, session, UnreachableError } from "./api.js";
import { hideNotice } from "./dialogs.js";
import { appendEvents, filterEvents, hostList, opList, prependEvent, render, vmList } from "./render.js";
import { refresh, startRouter } from "./router.js";
import { setupBulk } from "./bulk.js";
import { setupShortcuts } from "./shortcuts.js";
import "./vm-page.js";
import "./host-page.js";
import "./views.js";
import "./backups-view.js";
import "./placement-view.js";
import "./op-page.js";
import { eventListeners, notifyWaiters, state } from "./state.js";
import { MAINTENANCE_HOST_STATES, renderMaintenance } from "./maintenance.js";
import { showCreateButton } from "./create-vm.js";
import "./vm-actions.js";
import "./console.js";
import "./screen.js";

const TOKEN_KEY = "virtplane.token";
const RETRY_MS = 2000; // after a failed request or stream
const RESTREAM_MS = 1000; // before opening again a stream that the server ended at once
const RENDER_MS = 100; // changes that arrive together are drawn once
const MAINTENANCE_MS = 500;
const EVENT_PAGE = 50;
const KINDS = ["hosts", "vms", "operations"]; // followed by watches, besides the events
const TICK_MS = 10000; // relative times ("3m ago") are written again this often
const REFUSED = (err) => `The API refused the token (401 Unauthorized): ${err.message}. Enter a valid token.`;

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
    const listed = await listAll(plural, signal, "", (sofar) => {
      if (run !== state.run) return;
      state.objects[plural] = new Map(sofar);
      changed(plural);
    });
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
    // once the oldest rows are cut, no page continues the rows below any more
    if (event.object && !prependEvent(event.object)) setOlderEvents(null);
    if (event.object) for (const listener of eventListeners) listener(event.object);
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
    if (err instanceof AuthError) signOut(REFUSED(err));
    else showBanner("error", `The older events could not be loaded: ${err.message}`);
  } finally {
    $("events-older").disabled = false;
  }
}

function setOlderEvents(token) {
  state.olderEvents = token;
  $("events-older").hidden = !token;
}

// Hosts whose maintenance is worth asking for (the endpoint answers 404 when there is none):
// those in a maintenance state, and those whose maintenance is shown and not over yet (a
// cancelled one is followed until it says Cancelled, with the VMs it returned).
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

function changed(plural) {
  notifyWaiters();
  if (!state.drawn.has(plural)) {
    state.drawn.add(plural);
    renderAll(); // a kind's first data: drawn at once (a large fleet's first screen)
  } else if (state.renderTimer === null) {
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
    // a maintenance that ended (Cancelled) stays on screen until its host has a new one
    const asked = new Set(found.map(([name]) => name));
    const kept = state.maintenance.filter(([name]) => !asked.has(name) && !state.maintenanceHosts.has(name)
      && state.objects.hosts.has(name));
    state.maintenance = [...found, ...kept];
    renderMaintenance(state.maintenance);
  } catch (err) {
    if (run === state.run && err instanceof AuthError) signOut(REFUSED(err));
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
  refresh();
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
    signOut(REFUSED(err));
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

// Who is signed in: the page offers only the actions the role allows (the API checks again).
async function learnRole(run, signal) {
  while (run === state.run) {
    try {
      const me = await api("/v1/whoami", signal);
      if (run !== state.run) return;
      state.role = me.role;
      state.user = me.name;
      document.body.dataset.role = me.role;
      $("whoami").textContent = `${me.name} · ${me.role}`;
      $("whoami").hidden = false;
      showCreateButton();
      if (state.lastData) renderAll();
      if (state.maintenance.length) renderMaintenance(state.maintenance);
      refresh();
      return;
    } catch (err) {
      if (signal.aborted || run !== state.run) return;
      if (err instanceof AuthError) return; // the streams sign out with the message
      await pause(RETRY_MS, signal);
    }
  }
}

function resetSession() {
  state.role = null;
  state.user = null;
  delete document.body.dataset.role;
  $("whoami").hidden = true;
  showCreateButton();
  hideNotice();
  for (const dialog of document.querySelectorAll("dialog")) dialog.close();
}

function start(token) {
  if (state.abort) state.abort.abort();
  session.token = token;
  state.run += 1;
  state.abort = new AbortController();
  state.objects = { hosts: new Map(), vms: new Map(), operations: new Map() };
  state.lastData = null;
  state.drawn = new Set();
  state.streams = new Set();
  state.failing = new Set();
  state.maintenance = [];
  state.maintenanceHosts = new Set();
  state.maintenanceTimer = null;
  resetSession();
  $("events").tBodies[0].replaceChildren();
  state.eventCount = 0;
  setOlderEvents(null);
  $("login").hidden = true;
  $("dashboard").hidden = false;
  $("signout").hidden = false;
  setStatus("connecting", "connecting…");
  const { signal } = state.abort;
  learnRole(state.run, signal);
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
  session.token = null;
  resetSession();
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

function init() {
  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const token = $("token-input").value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("login-error").hidden = true;
    start(token);
  });
  $("signout").addEventListener("click", () => {
    // a login's session is revoked on the server too (a pasted service token gets a 409 and stays)
    const token = session.token;
    if (token) {
      fetch("/v1/logout", { method: "POST", headers: { Authorization: `Bearer ${token}` } }).catch(() => {});
    }
    signOut(null);
  });
  $("events-older").addEventListener("click", loadOlderEvents);
  $("notice-close").addEventListener("click", hideNotice);
  $("vms-list").append(vmList.root);
  $("hosts-list").append(hostList.root);
  $("operations-list").append(opList.root);
  const eventFilters = () => filterEvents($("events-search").value, $("events-type").value, $("events-kind").value);
  for (const id of ["events-search", "events-type", "events-kind"]) $(id).addEventListener("input", eventFilters);
  setupBulk();
  setupShortcuts();
  window.setInterval(tickTimes, TICK_MS);
  // an OpenID Connect login comes back as /ui/#session=TOKEN: keep it, and take it out of the address
  const fromLogin = new URLSearchParams(window.location.hash.slice(1)).get("session");
  if (fromLogin) {
    sessionStorage.setItem(TOKEN_KEY, fromLogin);
    history.replaceState(null, "", window.location.pathname + window.location.search);
  }
  fetch("/auth/oidc").then((r) => (r.ok ? r.json() : null)).then((offered) => {
    $("oidc-login").hidden = !(offered && offered.enabled);
  }).catch(() => {});
  startRouter();
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (saved) start(saved);
  else signOut(null);
}

init(); // a module runs once the document is parsed
