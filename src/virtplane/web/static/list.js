// One list component for every list of the page: a search box, filters, sorting by a column's
// header, a page of rows at a time (10,000 VMs draw their first PAGE rows only), and, where the
// caller asks for it, a check box per row for a bulk action. One line per object: a cell that
// is too long is cut with an ellipsis and says all of itself in its title.
//
// columns: [{ key, label, cls, value(obj) -> sortable value, cell(obj) -> Node | text,
//            num?, search?: true (its value is searched too) }]
// filters: [{ name, label, values(items) -> [value…], match(obj, value) -> bool }]

import { el, text } from "./dom.js";
import { actionsCell } from "./registry.js";

const PAGE = 100;
const IDLE_MS = 300;

function compare(a, b) {
  if (a === b) return 0;
  if (a === null || a === undefined || a === "") return 1;
  if (b === null || b === undefined || b === "") return -1;
  if (typeof a === "number" && typeof b === "number") return a - b;
  return String(a).localeCompare(String(b), undefined, { numeric: true });
}

export function createList(opts) {
  const { id, columns, kind = null, selectable = false, filters = [], emptyText = "Nothing here yet.",
    rowKey = (obj) => obj.metadata.name, rowData = () => ({}), pageSize = PAGE } = opts;
  const list = {
    items: [], shown: [], sortKey: opts.sortKey || columns[0].key, sortDir: opts.sortDir || 1, page: 0, query: "",
    chosen: new Map(filters.map((f) => [f.name, ""])), selected: new Set(), onSelect: null, dirty: false,
  };

  const search = el("input", { cls: "list-search", attrs: { type: "search", placeholder: "Search…", "aria-label": "Search", name: "search" } });
  search.addEventListener("input", () => { list.query = search.value.trim().toLowerCase(); list.page = 0; draw(); });
  const filterNodes = new Map(filters.map((f) => {
    const node = el("select", { cls: "list-filter", data: { filter: f.name }, attrs: { "aria-label": f.label } });
    node.addEventListener("change", () => { list.chosen.set(f.name, node.value); list.page = 0; draw(); });
    return [f.name, node];
  }));
  const count = el("span", { cls: "list-count" });
  const tools = el("div", { cls: "list-tools" }, [search, ...filterNodes.values(), count]);

  const all = el("input", { attrs: { type: "checkbox", "aria-label": "Select all shown" } });
  all.addEventListener("change", () => {
    for (const obj of list.shown) { if (all.checked) list.selected.add(rowKey(obj)); else list.selected.delete(rowKey(obj)); }
    draw();
  });
  const heads = columns.map((col) => {
    const th = el("th", { cls: `${col.cls || col.key}${col.num ? " num" : ""} sortable`, text: col.label, data: { key: col.key }, attrs: { tabindex: 0 } });
    const sort = () => {
      list.sortDir = list.sortKey === col.key ? -list.sortDir : 1;
      list.sortKey = col.key;
      draw();
    };
    th.addEventListener("click", sort);
    th.addEventListener("keydown", (ev) => { if (ev.key === "Enter") sort(); });
    return th;
  });
  const headRow = el("tr", {}, [selectable ? el("th", { cls: "select" }, [all]) : null, ...heads,
    kind ? el("th", { cls: "actions", text: "Actions" }) : null]);
  const table = el("table", { cls: "grid list-table", attrs: { id } }, [el("thead", {}, [headRow]), el("tbody")]);
  const empty = el("p", { cls: "empty", text: emptyText, attrs: { id: `${id}-empty` } });
  empty.hidden = true;
  const prev = el("button", { cls: "button small subtle-ink", text: "‹ Previous", data: { page: "prev" } });
  const next = el("button", { cls: "button small subtle-ink", text: "Next ›", data: { page: "next" } });
  const where = el("span", { cls: "pager-where" });
  prev.type = next.type = "button";
  prev.addEventListener("click", () => { list.page -= 1; draw(); });
  next.addEventListener("click", () => { list.page += 1; draw(); });
  const pager = el("div", { cls: "pager" }, [prev, where, next]);
  const root = el("div", { cls: "list", data: { list: id } }, [tools, el("div", { cls: "table-wrap" }, [table]), empty, pager]);
  root.addEventListener("menuclosed", () => { if (list.dirty) window.setTimeout(draw, 0); });

  function matches(obj) {
    for (const f of filters) {
      const wanted = list.chosen.get(f.name);
      if (wanted && !f.match(obj, wanted)) return false;
    }
    if (!list.query) return true;
    const haystack = [rowKey(obj), ...columns.filter((c) => c.search).map((c) => text(c.value(obj), ""))].join(" ").toLowerCase();
    return haystack.includes(list.query);
  }

  function fillFilters() {
    for (const f of filters) {
      const node = filterNodes.get(f.name);
      const values = [...new Set(f.values(list.items))].filter((v) => v !== null && v !== undefined && v !== "").sort(compare);
      const wanted = list.chosen.get(f.name);
      if (wanted && !values.includes(wanted)) values.unshift(wanted);
      const signature = values.join("\u0000");
      if (node.dataset.signature === signature && node.value === wanted) continue;
      node.dataset.signature = signature;
      node.replaceChildren(el("option", { text: `${f.label}: all`, attrs: { value: "" } }),
        ...values.map((v) => el("option", { text: `${f.label}: ${v}`, attrs: { value: v } })));
      node.value = wanted;
    }
  }

  function row(obj) {
    const key = rowKey(obj);
    const cells = columns.map((col) => {
      const content = col.cell ? col.cell(obj) : col.value(obj);
      const td = el("td", { cls: `${col.cls || col.key}${col.num ? " num" : ""}` });
      if (content instanceof Node) td.append(content);
      else td.textContent = text(content);
      if (!td.title && td.textContent.length > 24) td.title = td.textContent;
      return td;
    });
    let box = null;
    if (selectable) {
      const check = el("input", { attrs: { type: "checkbox", "aria-label": `Select ${key}`, checked: list.selected.has(key) } });
      check.addEventListener("change", () => {
        if (check.checked) list.selected.add(key); else list.selected.delete(key);
        draw();
      });
      box = el("td", { cls: "select" }, [check]);
    }
    return el("tr", { data: { name: key, ...rowData(obj) } }, [box, ...cells, kind ? actionsCell(kind, obj) : null]);
  }

  // Drawn again when the data change, unless an actions menu is open in it: the menu's row
  // would go away under the pointer; the list is drawn when the menu closes.
  function draw() {
    if (root.querySelector(".menu:not([hidden])")) {
      list.dirty = true;
      return;
    }
    list.dirty = false;
    fillFilters();
    const col = columns.find((c) => c.key === list.sortKey) || columns[0];
    const matching = list.items.filter(matches);
    const keyed = matching.map((obj) => [col.value(obj), rowKey(obj), obj]);
    keyed.sort((a, b) => list.sortDir * (compare(a[0], b[0]) || compare(a[1], b[1])));
    const pages = Math.max(1, Math.ceil(keyed.length / pageSize));
    list.page = Math.min(Math.max(0, list.page), pages - 1);
    list.shown = keyed.slice(list.page * pageSize, (list.page + 1) * pageSize).map(([, , obj]) => obj);
    table.tBodies[0].replaceChildren(...list.shown.map(row));
    if (!list.marked && list.shown.length) {
      list.marked = true;
      performance.mark(`list-${id}-drawn`); // the first rows drawn (bench row 17 reads it)
    }
    for (const th of heads) {
      if (th.dataset.key === list.sortKey) th.setAttribute("aria-sort", list.sortDir > 0 ? "ascending" : "descending");
      else th.removeAttribute("aria-sort");
    }
    empty.hidden = keyed.length > 0;
    empty.textContent = list.items.length ? "Nothing matches the search and filters." : emptyText;
    count.textContent = keyed.length === list.items.length ? `${list.items.length}` : `${keyed.length} of ${list.items.length}`;
    pager.hidden = pages <= 1;
    where.textContent = `${list.page * pageSize + 1}–${Math.min(keyed.length, (list.page + 1) * pageSize)} of ${keyed.length}`;
    prev.disabled = list.page === 0;
    next.disabled = list.page >= pages - 1;
    const known = new Set(list.items.map(rowKey));
    for (const key of [...list.selected]) if (!known.has(key)) list.selected.delete(key);
    all.checked = list.shown.length > 0 && list.shown.every((obj) => list.selected.has(rowKey(obj)));
    if (list.onSelect) list.onSelect([...list.selected]);
  }

  // A list out of sight is drawn when the page is idle: the one shown comes first.
  let idle = null;
  function later() {
    if (idle !== null) return;
    idle = window.requestIdleCallback(() => { idle = null; draw(); }, { timeout: IDLE_MS });
  }

  return {
    root,
    table,
    search,
    update(items) {
      list.items = items;
      const view = root.closest("section.view");
      if (view && view.hidden) later();
      else draw();
    },
    redraw() { if (list.dirty) draw(); },
    setFilter(name, value) {
      list.chosen.set(name, value || "");
      filterNodes.get(name).value = value || "";
      list.page = 0;
      draw();
    },
    filterOf: (name) => list.chosen.get(name),
    selected: () => [...list.selected],
    clearSelection() { list.selected.clear(); draw(); },
    onSelect(handler) { list.onSelect = handler; },
  };
}
