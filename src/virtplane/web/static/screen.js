// virtplane dashboard: a VM's screen, in a panel with noVNC (vendor/novnc, its ES modules), and
// a thumbnail of it in the VM list. A row action like the console's (registry.js): operators and
// admins get a Screen button, with the thumbnail, on each VM whose guest runs.
//
// noVNC speaks RFB over the API's WebSocket /v1/vms/{name}/vnc, which reaches the VM's VNC
// server through its host's libvirt; the token travels as a subprotocol as the console's does
// (console.js), and a refusal is a close with 4000 + the HTTP status and the reason. The
// WebSocket is made here and handed to noVNC, so that the panel can say why it closed.
// Thumbnails are GET /v1/vms/{name}/screenshot (PNG), at most one per VM every THUMB_EVERY_MS,
// shown as data: URLs (the page's policy allows images from itself and data: only).
// noVNC's modules are loaded when a screen is first opened, not with the page.

import { $, el } from "./dom.js";
import { session as apiSession } from "./api.js";
import { addRowAction } from "./registry.js";
import { go } from "./router.js";
import { CONSOLE_PHASES } from "./vocabulary.js";

const PROTOCOL = "virtplane.vnc.v1";
const TOKEN_PREFIX = "virtplane.bearer.";
const SCREEN_PHASES = new Set(CONSOLE_PHASES);  // the serial console's: while the domain is live
const THUMB_EVERY_MS = 30000;
const THUMBS_AT_ONCE = 2; // a large fleet's list asks its hosts for a few screenshots at a time
const encoder = new TextEncoder();

const screen = { rfb: null, ws: null, vm: null };
const thumbs = new Map(); // VM name -> { url, at, loading }
let loadingThumbs = 0;
let pumpQueued = false;

function base64url(text) {
  let binary = "";
  for (const b of encoder.encode(text)) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function setStatus(message) {
  $("screen-status").textContent = message;
}

function close() {
  const { rfb } = screen;
  screen.rfb = null;
  screen.ws = null;
  screen.vm = null;
  if (rfb) rfb.disconnect();
  $("screen-view").replaceChildren();
  $("screen-panel").hidden = true;
}

async function open(vm) {
  close();
  const token = apiSession.token;
  if (!token) return;
  screen.vm = vm;
  $("screen-title").textContent = `Screen: ${vm}`;
  setStatus("loading noVNC…");
  const { default: RFB } = await import("./vendor/novnc/core/rfb.js");
  if (screen.vm !== vm) return; // closed, or another opened, meanwhile
  $("screen-panel").hidden = false;
  setStatus("connecting…");
  const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
  const url = `${scheme}//${window.location.host}/v1/vms/${encodeURIComponent(vm)}/vnc`;
  const ws = new WebSocket(url, [PROTOCOL, TOKEN_PREFIX + base64url(token)]);
  ws.binaryType = "arraybuffer";
  ws.addEventListener("close", (ev) => {
    if (screen.ws !== ws) return;
    let why = ev.reason || (ev.code === 1000 ? "closed" : `the connection was lost (${ev.code})`);
    if (ev.code >= 4000 && ev.code < 5000) why = `refused (${ev.code - 4000}): ${ev.reason}`;
    setStatus(`screen closed: ${why}`);
  });
  const rfb = new RFB($("screen-view"), ws, { shared: true });
  rfb.scaleViewport = true;
  rfb.addEventListener("connect", () => {
    if (screen.rfb === rfb) setStatus("connected");
  });
  screen.rfb = rfb;
  screen.ws = ws;
}

// Load the thumbnails the VM list shows now, the stalest first, a few at a time.
function pumpThumbs() {
  if (!apiSession.token) return;
  // only the thumbnails in sight: an actions menu's while it is open, a VM page's toolbar
  const shown = [...new Set([...document.querySelectorAll("img.screen-thumb")]
    .filter((img) => img.offsetParent !== null).map((img) => img.dataset.vm))];
  const due = shown
    .map((name) => [name, thumbs.get(name) || { url: null, at: 0, loading: false }])
    .filter(([, entry]) => !entry.loading && Date.now() - entry.at >= THUMB_EVERY_MS)
    .sort(([, a], [, b]) => a.at - b.at);
  for (const [name, entry] of due) {
    if (loadingThumbs >= THUMBS_AT_ONCE) return;
    thumbs.set(name, entry);
    loadThumb(name, entry);
  }
}

async function loadThumb(name, entry) {
  entry.loading = true;
  loadingThumbs += 1;
  try {
    const response = await fetch(`/v1/vms/${encodeURIComponent(name)}/screenshot`, {
      cache: "no-store", headers: { Authorization: `Bearer ${apiSession.token}`, Accept: "image/png" },
    });
    if (!response.ok) return; // a VM that just stopped, or a host without screens: no thumbnail
    const blob = await response.blob();
    entry.url = await new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve(reader.result);
      reader.onerror = () => reject(reader.error);
      reader.readAsDataURL(blob);
    });
    for (const img of document.querySelectorAll("img.screen-thumb")) {
      if (img.dataset.vm === name) img.src = entry.url;
    }
  } catch (err) {
    // tried again when it is due
  } finally {
    entry.at = Date.now();
    entry.loading = false;
    loadingThumbs -= 1;
    pumpThumbs();
  }
}

function thumbnail(vm) {
  const name = vm.metadata.name;
  const entry = thumbs.get(name);
  if (!pumpQueued) { // once the rows are in the table: one look for all the rows drawn together
    pumpQueued = true;
    queueMicrotask(() => { pumpQueued = false; pumpThumbs(); });
  }
  return el("img", {
    cls: "screen-thumb", data: { vm: name },
    attrs: { alt: "", width: 64, height: 40, src: entry && entry.url ? entry.url : null },
  });
}

const phaseOf = (vm) => (vm.status && vm.status.phase) || "Unknown";

addRowAction("vm", {
  name: "screen", label: "Screen", role: "operator", title: "The VM's screen (VNC)",
  when: (vm) => SCREEN_PHASES.has(phaseOf(vm)), icon: thumbnail, run: (vm) => go("vms", vm.metadata.name, "screen"),
});

$("screen-close").addEventListener("click", close);
document.addEventListener("menuopened", pumpThumbs);
setInterval(pumpThumbs, THUMB_EVERY_MS / 6);
$("signout").addEventListener("click", () => {
  close();
  thumbs.clear();
});

// The VM page's tab opens it (and closes it when left).
export { open as openScreen, close as closeScreen };
