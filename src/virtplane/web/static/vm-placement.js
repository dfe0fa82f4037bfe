// The VM page's Placement tab (#/vms/NAME/placement, issue 37): each host's verdict for the VM
// now, from GET /v1/vms/NAME/placement: where it would go (chosen), the others that could take
// it ranked with why, and those excluded with every reason (rules by name).

import { badge, el, link, text } from "./dom.js";
import { api, path } from "./api.js";
import { explainError } from "./dialogs.js";
import { href } from "./router.js";

const TONE = { chosen: "ok", current: "idle", ranked: "busy", excluded: "bad" };
const ORDER = { chosen: 0, current: 1, ranked: 2, excluded: 3 };

function hostRow(verdict) {
  const why = verdict.verdict === "excluded" ? verdict.reasons.join("; ") || verdict.reason : verdict.why;
  const broken = (verdict.broken_preferred || []).length ? ` (breaks preferred: ${verdict.broken_preferred.join(", ")})` : "";
  return el("tr", { data: { host: verdict.host, verdict: verdict.verdict } }, [
    el("td", { cls: "host" }, [link(href("hosts", verdict.host), verdict.host)]),
    el("td", { cls: "verdict" }, [el("span", { cls: `badge tone-${TONE[verdict.verdict] || "idle"}`, text: verdict.verdict })]),
    el("td", { cls: "rank num", text: verdict.rank ? String(verdict.rank) : "–" }),
    el("td", { cls: "score num", text: verdict.rank ? verdict.score.toFixed(3) : "–" }),
    el("td", { cls: "why", text: `${text(why)}${broken}` }),
  ]);
}

export async function placementTab(name, body) {
  let found;
  try {
    found = await api(`/v1/vms/${path(name)}/placement`);
  } catch (err) {
    body.replaceChildren(el("p", { cls: "dialog-error", text: explainError(err).join(": ") }));
    return;
  }
  const hosts = [...found.hosts].sort((a, b) => (ORDER[a.verdict] - ORDER[b.verdict]) || (a.rank - b.rank) || a.host.localeCompare(b.host));
  const facts = el("dl", { cls: "facts placement-facts" }, [
    el("dt", { text: "Judged for" }), el("dd", { text: found.mode === "migration" ? "a live migration (it runs)" : "its start" }),
    el("dt", { text: "Runs on" }), el("dd", { text: text(found.host) }),
    el("dt", { text: "Would go to" }), el("dd", { cls: "chosen" }, [found.chosen ? link(href("hosts", found.chosen), found.chosen) : "no host fits"]),
    el("dt", { text: "Rules" }), el("dd", { cls: "rules", text: found.rules.length ? found.rules.join(", ") : "none select it" }),
    found.blocked ? el("dt", { text: "Cannot move" }) : null, found.blocked ? el("dd", { cls: "blocked" }, [badge("Blocked"), ` ${found.blocked}`]) : null,
  ]);
  const table = el("div", { cls: "table-wrap" }, [el("table", { cls: "grid placement", attrs: { id: "vm-placement" } }, [
    el("thead", {}, [el("tr", {}, ["Host", "Verdict", "Rank", "Score", "Why"].map((h) => el("th", { text: h })))]),
    el("tbody", {}, hosts.map(hostRow))])]);
  body.replaceChildren(facts, table);
}
