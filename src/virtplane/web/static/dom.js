// Building the page from data: every value that comes from the API goes in with textContent
// (through el() and text()), never as HTML: names, labels and messages may be hostile.

export const $ = (id) => document.getElementById(id);

const TONES = {
  ok: ["Running", "Enabled", "Up", "Completed", "Ready", "Normal", "Migrated", "Planned", "Returned"],
  busy: ["Starting", "Stopping", "Migrating", "Pending", "InProgress", "PrepareForMaintenance",
    "Draining", "Cancelling", "WaitingForSlot", "Returning", "Retrying"],
  warn: ["Paused", "Degraded", "Maintenance", "Blocked", "Warning", "Left", "NotReturned"],
  bad: ["Failed", "ErrorInPrepareForMaintenance", "ErrorInMaintenance", "Down", "Disconnected"],
  idle: ["Stopped", "Disabled", "Superseded", "Cancelled", "Unknown"],
};
const TONE_OF = new Map();
for (const [tone, values] of Object.entries(TONES)) {
  for (const value of values) TONE_OF.set(value, tone);
}

export function el(tag, opts = {}, children = []) {
  const node = document.createElement(tag);
  if (opts.cls) node.className = opts.cls;
  if (opts.text !== undefined && opts.text !== null) node.textContent = String(opts.text);
  if (opts.title) node.title = String(opts.title);
  if (opts.data) {
    for (const [key, value] of Object.entries(opts.data)) node.dataset[key] = String(value);
  }
  if (opts.attrs) {
    for (const [key, value] of Object.entries(opts.attrs)) {
      if (value === true) node.setAttribute(key, "");
      else if (value !== false && value !== null && value !== undefined) node.setAttribute(key, String(value));
    }
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function text(value, fallback = "–") {
  return value === null || value === undefined || value === "" ? fallback : String(value);
}

export function toneOf(value) {
  return TONE_OF.get(String(value)) || "idle";
}

export function badge(value, extraCls = "") {
  const shown = text(value, "Unknown");
  return el("span", { cls: `badge tone-${toneOf(shown)} ${extraCls}`.trim(), text: shown });
}

export function cell(content, cls) {
  const td = el("td", { cls });
  if (content instanceof Node) td.append(content);
  else td.textContent = text(content);
  return td;
}

// A small meter; for allocations (warnHigh) a nearly full one is drawn in amber.
export function bar(fraction, label, title, warnHigh = false) {
  const clamped = Math.max(0, Math.min(1, Number.isFinite(fraction) ? fraction : 0));
  const fill = el("span", { cls: "bar-fill" });
  fill.style.width = `${(clamped * 100).toFixed(1)}%`;
  if (warnHigh && clamped >= 0.9) fill.classList.add("high");
  return el("span", { cls: "meter", title }, [el("span", { cls: "bar" }, [fill]), el("span", { cls: "meter-label", text: label })]);
}

export function button(label, onClick, opts = {}) {
  const node = el("button", { cls: `button ${opts.cls || ""}`.trim(), text: label, title: opts.title, data: opts.data });
  node.type = "button";
  node.addEventListener("click", onClick);
  return node;
}

// A labelled form field: <label>text <input …></label>.
export function field(label, input, hint) {
  return el("label", { cls: "field" }, [el("span", { cls: "field-label", text: label }), input,
    hint ? el("span", { cls: "hint", text: hint }) : null]);
}

export function input(name, value, attrs = {}) {
  const node = el("input", { attrs: { name, ...attrs } });
  if (value !== undefined && value !== null) node.value = String(value);
  return node;
}

export function select(name, options, chosen) {
  const node = el("select", { attrs: { name } }, options.map(([value, label]) => {
    const option = el("option", { text: label });
    option.value = value;
    option.selected = value === chosen;
    return option;
  }));
  return node;
}

export function fillBody(table, rows, emptyId) {
  table.tBodies[0].replaceChildren(...rows);
  $(emptyId).hidden = rows.length > 0;
}

export function formatTime(iso) {
  if (!iso) return "–";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return String(iso);
  return date.toLocaleTimeString([], { hour12: false });
}

// A time shown relative ("3m ago"), the absolute one on hover; kept current by tickTimes().
export function timeNode(iso) {
  if (!iso) return el("span", { text: "–" });
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return el("span", { text: String(iso) });
  const node = el("time", { cls: "rel", text: ago(iso), title: date.toLocaleString([], { hour12: false }), attrs: { datetime: iso } });
  return node;
}

export function tickTimes() {
  for (const node of document.querySelectorAll("time.rel")) node.textContent = ago(node.getAttribute("datetime"));
}

export function ago(iso) {
  if (!iso) return "never";
  const then = new Date(iso).getTime();
  if (Number.isNaN(then)) return String(iso);
  const seconds = Math.max(0, Math.round((Date.now() - then) / 1000));
  if (seconds < 60) return `${seconds}s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ago`;
  if (seconds < 172800) return `${Math.floor(seconds / 3600)}h ago`;
  return `${Math.floor(seconds / 86400)}d ago`;
}

export function gib(mib) {
  return `${(Number(mib || 0) / 1024).toFixed(1)} GiB`;
}

export function countBy(items, key) {
  const counts = new Map();
  for (const item of items) {
    const value = key(item);
    counts.set(value, (counts.get(value) || 0) + 1);
  }
  return counts;
}

export function pick(obj, ...paths) {
  for (const path of paths) {
    let value = obj;
    for (const part of path.split(".")) value = value && typeof value === "object" ? value[part] : undefined;
    if (value !== undefined && value !== null) return value;
  }
  return undefined;
}

export function link(hash, label, cls) {
  return el("a", { cls, text: label, attrs: { href: hash } });
}

export function byName(a, b) {
  return a.metadata.name.localeCompare(b.metadata.name);
}
