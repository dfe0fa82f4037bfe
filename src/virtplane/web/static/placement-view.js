// The placement view (#/placement, issue 37): the placement rules (followed by a watch while the
// view is shown), and per cluster its balance (each host's load, the spread) and the rebalance
// plan now with each move (VM, source -> target, the gain, the reason). An admin may plan again
// now (a dry run); nobody carries a plan out from here.

import { $, badge, bar, el, link, text, timeNode } from "./dom.js";
import { api, path, send } from "./api.js";
import { explainError } from "./dialogs.js";
import { createList } from "./list.js";
import { href, onView } from "./router.js";
import { can, state } from "./state.js";
import { followKind } from "./views.js";

const sp = (obj) => (obj && obj.spec) || {};

// Affinity and AntiAffinity say required or preferred; a Host rule's mode (must, should, mustNot).
function enforcement(rule) {
  const spec = sp(rule);
  if (spec.type === "Host") return spec.mode;
  return spec.enforcement || "required";
}

const rules = createList({ id: "placementrules", emptyText: "No placement rules.", columns: [
  { key: "name", label: "Name", value: (r) => r.metadata.name },
  { key: "type", label: "Type", value: (r) => sp(r).type, search: true },
  { key: "vms", label: "VMs", value: (r) => sp(r).vm_selector, search: true },
  { key: "hosts", label: "Hosts", value: (r) => sp(r).host_selector, search: true },
  { key: "enforcement", label: "Enforcement / mode", value: enforcement, search: true },
] });

const fixed = (value, digits = 3) => (typeof value === "number" ? value.toFixed(digits) : "–");

function balanceTable(balance) {
  const hosts = Object.entries(balance.hosts || {}).sort(([a], [b]) => a.localeCompare(b, undefined, { numeric: true }));
  const rows = hosts.map(([host, load]) => el("tr", { data: { host } }, [
    el("td", { cls: "host" }, [link(href("hosts", host), host)]),
    el("td", { cls: "load" }, [bar(load, fixed(load), `load ${fixed(load, 5)}`, true)]),
  ]));
  return el("table", { cls: "grid compact balance" }, [
    el("thead", {}, [el("tr", {}, [el("th", { text: "Host" }), el("th", { text: "Load" })])]),
    el("tbody", {}, rows)]);
}

function planNodes(plan) {
  const moves = plan.moves || [];
  const summary = el("p", { cls: "plan-summary", text: moves.length
    ? `${moves.length} move${moves.length === 1 ? "" : "s"}: spread of load (std) ${fixed(plan.std_before)} → ${fixed(plan.std_after)}`
    : `No move would help (std ${fixed(plan.std_before)}).` });
  const rows = moves.map((m) => el("tr", { data: { vm: m.vm } }, [
    el("td", { cls: "vm" }, [link(href("vms", m.vm), m.vm)]),
    el("td", { cls: "move", text: `${m.source} → ${m.target}` }),
    el("td", { cls: "gain num", text: fixed(m.gain, 4), title: `std ${fixed(m.std_before, 5)} → ${fixed(m.std_after, 5)}` }),
    el("td", { cls: "reason", text: text(m.reason) }),
  ]));
  const table = moves.length ? el("div", { cls: "table-wrap" }, [el("table", { cls: "grid compact plan" }, [
    el("thead", {}, [el("tr", {}, ["VM", "Source → target", "Gain", "Reason"].map((h) => el("th", { text: h })))]),
    el("tbody", {}, rows)])]) : null;
  const held = Object.entries(plan.unmovable || {});
  const unmovable = held.length ? el("p", { cls: "note", text: `Not movable: ${held.map(([vm, why]) => `${vm} (${why})`).join("; ")}` }) : null;
  const unrepaired = (plan.unrepaired || []).length ? el("p", { cls: "note", text: `Rules no plan repairs: ${plan.unrepaired.join(", ")}` }) : null;
  return [summary, table, unmovable, unrepaired];
}

function clusterBlock(cluster) {
  const block = el("div", { cls: "cluster", data: { cluster } }, [el("h3", { text: `Cluster ${cluster}` })]);
  const body = el("div", { cls: "cluster-body" }, [el("p", { cls: "note", text: "Loading…" })]);
  const planHolder = el("div", { cls: "plan-holder" });
  block.append(body);

  function draw(shown) {
    const balance = shown.balance || {};
    const heading = block.querySelector("h3");
    heading.replaceChildren(`Cluster ${cluster} `, badge(shown.mode === "off" ? "Disabled" : "Enabled", "mode"),
      el("span", { cls: "note", text: `rebalancing ${shown.mode}` }));
    if (can("admin")) {
      const plan = el("button", { cls: "button small", text: "Plan now", data: { action: "plan" }, title: "Compute the plan now (a dry run: nothing moves)" });
      plan.type = "button";
      plan.addEventListener("click", async () => {
        plan.disabled = true;
        try {
          const answer = await send("POST", `/v1/clusters/${path(cluster)}/rebalance?dryRun=true`);
          planHolder.replaceChildren(el("p", { cls: "note planned", text: "Planned now (dry run):" }), ...planNodes(answer.plan).filter(Boolean));
        } catch (err) {
          planHolder.replaceChildren(el("p", { cls: "dialog-error", text: explainError(err).join(": ") }));
        } finally {
          plan.disabled = false;
        }
      });
      heading.append(plan);
    }
    const last = shown.last ? el("p", { cls: "note" }, ["The leader's last look: ", timeNode(shown.last.at),
      shown.last.paused ? ` (paused: ${shown.last.paused})` : ""]) : null;
    planHolder.replaceChildren(...planNodes(shown.plan || {}).filter(Boolean));
    body.replaceChildren(...[
      el("p", { cls: "balance-summary", text: `Spread ${fixed(balance.spread)} · std ${fixed(balance.std)} · mean load ${fixed(balance.mean)}` }),
      balanceTable(balance), last, el("h4", { text: "Plan" }), planHolder].filter(Boolean));
  }

  async function load(signal) {
    try {
      draw(await api(`/v1/clusters/${path(cluster)}/rebalance`, signal));
    } catch (err) {
      if (signal.aborted) return;
      body.replaceChildren(el("p", { cls: "dialog-error", text: explainError(err).join(": ") }));
    }
  }
  return { block, load };
}

let following = null;
let shownRun = null;

function clusters() {
  return [...new Set([...state.objects.hosts.values()].map((h) => sp(h).cluster || "default"))].sort();
}

function loadClusters(signal) {
  const holder = $("balance");
  const names = clusters();
  if (!names.length) { holder.replaceChildren(el("p", { cls: "empty", text: "No hosts, so no cluster to balance." })); return; }
  const blocks = names.map(clusterBlock);
  holder.replaceChildren(...blocks.map((b) => b.block));
  for (const b of blocks) b.load(signal);
}

function load() {
  if (following) following.abort();
  const watches = new AbortController();
  following = watches;
  state.abort.signal.addEventListener("abort", () => watches.abort(), { once: true }); // signed out
  const holder = $("placementrules-list");
  if (!holder.contains(rules.root)) {
    const reload = el("button", { cls: "button small subtle-ink", text: "Reload balance", data: { reload: "balance" } });
    reload.type = "button";
    reload.addEventListener("click", () => loadClusters(following ? following.signal : watches.signal));
    holder.replaceChildren(rules.root);
    rules.root.querySelector(".list-tools").append(reload);
  }
  followKind("placementrules", (items) => rules.update([...items.values()]), holder, watches.signal);
  loadClusters(watches.signal);
}

onView("placement", (route) => {
  if (!route) {
    if (following) { following.abort(); following = null; }
    shownRun = null;
    return;
  }
  // the clusters come from the hosts: drawn once they are known
  if (!state.abort || shownRun === `${state.run}/${state.role}` || !state.drawn.has("hosts")) return;
  shownRun = `${state.run}/${state.role}`;
  load();
});
