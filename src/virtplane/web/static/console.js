// virtplane dashboard: the serial console of a VM, in a panel with xterm.js (vendor/xterm.js).
// Kept apart from app.js: it adds a Console button to each running VM's row of the VM table
// (whenever app.js draws it) and talks to the API's WebSocket /v1/vms/{name}/console itself.
//
// A browser cannot set the Authorization header on a WebSocket, and a token in the URL would
// end up in access logs, so the token travels as a subprotocol (virtplane.bearer.<base64url>).
// The server refuses such a session by closing it with 4000 + the HTTP status and the reason.
"use strict";

(() => {
  const TOKEN_KEY = "virtplane.token"; // where app.js keeps the token of the session
  const PROTOCOL = "virtplane.console.v1";
  const TOKEN_PREFIX = "virtplane.bearer.";
  const CONSOLE_PHASES = new Set(["Running", "Paused", "Degraded", "Migrating"]);
  const encoder = new TextEncoder();

  const session = { ws: null, term: null, vm: null };
  const $ = (id) => document.getElementById(id);

  function base64url(text) {
    const bytes = encoder.encode(text);
    let binary = "";
    for (const b of bytes) binary += String.fromCharCode(b);
    return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function setStatus(message) {
    $("console-status").textContent = message;
  }

  function detach() {
    if (session.ws) session.ws.close(1000, "detached");
    session.ws = null;
    if (session.term) session.term.dispose();
    session.term = null;
    session.vm = null;
    $("console-panel").hidden = true;
  }

  function open(vm) {
    detach();
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) return;
    session.vm = vm;
    $("console-title").textContent = `Console: ${vm}`;
    $("console-panel").hidden = false;
    setStatus("connecting…");
    const term = new window.Terminal({
      cursorBlink: true, rows: 24, cols: 100, fontFamily: "\"DejaVu Sans Mono\", monospace", fontSize: 14,
    });
    session.term = term;
    term.open($("console-terminal"));
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    const url = `${scheme}//${window.location.host}/v1/vms/${encodeURIComponent(vm)}/console`;
    const ws = new WebSocket(url, [PROTOCOL, TOKEN_PREFIX + base64url(token)]);
    ws.binaryType = "arraybuffer";
    session.ws = ws;
    ws.onopen = () => {
      if (session.ws === ws) setStatus("attached");
      term.focus();
    };
    ws.onmessage = (ev) => {
      term.write(typeof ev.data === "string" ? ev.data : new Uint8Array(ev.data));
    };
    ws.onclose = (ev) => {
      if (session.ws !== ws) return;
      session.ws = null;
      let why = ev.reason || (ev.code === 1000 ? "closed" : `the connection was lost (${ev.code})`);
      if (ev.code >= 4000 && ev.code < 5000) why = `refused (${ev.code - 4000}): ${ev.reason}`;
      setStatus(`console closed: ${why}`);
    };
    term.onData((data) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(encoder.encode(data));
    });
  }

  // The VM table is redrawn by app.js on every change: give each drawn row its button again.
  function decorate(table) {
    const header = table.tHead && table.tHead.rows[0];
    if (header && !header.querySelector("th.console-col")) {
      const th = document.createElement("th");
      th.className = "console-col";
      th.textContent = "Console";
      header.appendChild(th);
    }
    for (const row of table.tBodies[0].rows) {
      if (!row.dataset.name || row.querySelector("td.console-col")) continue;
      const td = document.createElement("td");
      td.className = "console-col";
      const phase = row.querySelector("td.phase");
      if (phase && CONSOLE_PHASES.has(phase.textContent.trim())) {
        const button = document.createElement("button");
        button.type = "button";
        button.className = "button small console-open";
        button.textContent = "Console";
        const vm = row.dataset.name;
        button.addEventListener("click", () => open(vm));
        td.appendChild(button);
      }
      row.appendChild(td);
    }
  }

  function init() {
    const table = $("vms");
    if (!table || !window.Terminal) return;
    decorate(table);
    new MutationObserver(() => decorate(table)).observe(table.tBodies[0], { childList: true });
    $("console-detach").addEventListener("click", detach);
    $("signout").addEventListener("click", detach);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
