// virtplane dashboard: the serial console of a VM, in a panel with xterm.js (vendor/xterm.js).
// A row action like the others (registry.js): operators and admins get a Console button on
// each VM whose guest runs; the module talks to the API's WebSocket /v1/vms/{name}/console.
//
// A browser cannot set the Authorization header on a WebSocket, and a token in the URL would
// end up in access logs, so the token travels as a subprotocol (virtplane.bearer.<base64url>).
// The server refuses such a session by closing it with 4000 + the HTTP status and the reason.

import { $ } from "./dom.js";
import { session as apiSession } from "./api.js";
import { addRowAction } from "./registry.js";
import { go } from "./router.js";
import { CONSOLE_PHASES } from "./vocabulary.js";

const PROTOCOL = "virtplane.console.v1";
const TOKEN_PREFIX = "virtplane.bearer.";
const CONSOLE = new Set(CONSOLE_PHASES);
const encoder = new TextEncoder();

const session = { ws: null, term: null, vm: null };

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

// xterm.js (a classic script defining window.Terminal) is loaded when a console is first opened.
let xterm = null;
function loadXterm() {
  if (!xterm) {
    xterm = new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = "static/vendor/xterm.js";
      script.onload = resolve;
      script.onerror = () => { xterm = null; reject(new Error("xterm.js did not load")); };
      document.head.append(script);
    });
  }
  return xterm;
}

async function open(vm) {
  detach();
  session.vm = vm;
  await loadXterm();
  if (session.vm !== vm) return; // detached, or another opened, meanwhile
  const token = apiSession.token;
  if (!token || !window.Terminal) return;
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

const phaseOf = (vm) => (vm.status && vm.status.phase) || "Unknown";

addRowAction("vm", {
  name: "console", label: "Console", role: "operator", title: "The VM's serial console",
  when: (vm) => CONSOLE.has(phaseOf(vm)), run: (vm) => go("vms", vm.metadata.name, "console"),
});

$("console-detach").addEventListener("click", detach);
$("signout").addEventListener("click", detach);

// The VM page's tab opens it (and closes it when left).
export { open as openConsole, detach as detachConsole };
