// Hash routes: #/vms, #/vms/NAME[/TAB], #/hosts, #/hosts/NAME, #/storage, #/images, #/networks,
// #/snapshots, #/backups, #/placement, #/operations, #/events. The address says what is shown, so that back and forward,
// a reload and a link someone pasted all land on the same view. Each view is a
// <section class="view" data-view="…"> of index.html; a module that draws one registers a
// handler, called whenever its view is shown (with the route) and with null when it is left.

export const LISTS = ["vms", "hosts", "storage", "images", "networks", "snapshots", "backups", "placement", "operations", "events"];
const PAGES = { vms: "vm", hosts: "host", operations: "operation" }; // the lists whose items have a page of their own
const DEFAULT = "vms";

const handlers = new Map(); // view -> [handler(route | null)]
export const current = { route: null };

// What a hash shows: { list, view, name, tab }. Anything else (an OIDC login's #session=…, a
// mistyped view) shows the VM list.
export function parseRoute(hash) {
  const parts = String(hash || "").replace(/^#\/?/, "").split("/").filter(Boolean);
  let decoded;
  try {
    decoded = parts.map((part) => decodeURIComponent(part));
  } catch (err) {
    decoded = [];
  }
  const [list, name, tab] = decoded;
  if (!LISTS.includes(list)) return { list: DEFAULT, view: DEFAULT, name: null, tab: null };
  if (name && PAGES[list]) return { list, view: PAGES[list], name, tab: tab || null };
  return { list, view: list, name: null, tab: null };
}

export function href(list, name, tab) {
  return `#/${[list, name, tab].filter(Boolean).map((part) => encodeURIComponent(part)).join("/")}`;
}

export function go(list, name, tab) {
  const wanted = href(list, name, tab);
  if (window.location.hash !== wanted) window.location.hash = wanted;
  else show();
}

export function onView(view, handler) {
  if (!handlers.has(view)) handlers.set(view, []);
  handlers.get(view).push(handler);
}

function show() {
  const route = parseRoute(window.location.hash);
  const left = current.route;
  current.route = route;
  document.body.dataset.view = route.view;
  for (const section of document.querySelectorAll("section.view")) section.hidden = section.dataset.view !== route.view;
  for (const link of document.querySelectorAll("#nav a[data-list]")) {
    if (link.dataset.list === route.list) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (left && left.view !== route.view) for (const handler of handlers.get(left.view) || []) handler(null);
  for (const handler of handlers.get(route.view) || []) handler(route);
  if (left && (left.view !== route.view || left.name !== route.name)) window.scrollTo(0, 0);
}

// Draws the current view again (after a sign-in, or when its data changed).
export function refresh() {
  if (current.route) for (const handler of handlers.get(current.route.view) || []) handler(current.route);
}

export function startRouter() {
  window.addEventListener("hashchange", show);
  show();
}
