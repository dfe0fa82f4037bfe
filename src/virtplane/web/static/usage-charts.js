// Live usage graphs of a VM or a host (issue 35): CPU, memory, disk and network, from the usage
// API (GET /v1/vms/NAME/usage, /v1/hosts/NAME/usage: columnar, t[] and one array per metric),
// drawn with uPlot (vendored, ./vendor/uPlot.esm.js) and redrawn at the collection interval.
// mountUsage returns { stop, refresh }; the graphs stop on their own once the element has
// left the page (a MutationObserver, checked at each change of the page), so a view that
// replaces its content needs to do nothing.

import uPlot from "./vendor/uPlot.esm.js";
import { api } from "./api.js";

const BYTES = ["B/s", "KiB/s", "MiB/s", "GiB/s"];

function perSecond(value) {
  if (value == null) return "-";
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < BYTES.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(unit ? 1 : 0)} ${BYTES[unit]}`;
}

const percent = (value) => (value == null ? "-" : `${value.toFixed(1)} %`);
const mebibytes = (value) => (value == null ? "-" : `${value.toFixed(0)} MiB`);

const CHARTS = {
  vm: [
    { title: "CPU (of its vCPUs)", format: percent, range: [0, 100], series: [["cpu_pct", "CPU"]] },
    { title: "Memory used", format: mebibytes, series: [["memory_used_mib", "used"]] },
    { title: "Disk I/O", format: perSecond, series: [["disk_read_bps", "read"], ["disk_write_bps", "write"]] },
    { title: "Network", format: perSecond, series: [["net_rx_bps", "received"], ["net_tx_bps", "sent"]] },
  ],
  host: [
    { title: "CPU (of its CPUs)", format: percent, range: [0, 100], series: [["cpu_pct", "CPU"]] },
    {
      title: "Memory",
      format: mebibytes,
      series: [["memory_used_mib", "used"], ["memory_total_mib", "total"]],
    },
    {
      title: "Disk I/O of its VMs",
      format: perSecond,
      series: [["disk_read_bps", "read"], ["disk_write_bps", "write"]],
    },
    { title: "Network of its VMs", format: perSecond, series: [["net_rx_bps", "received"], ["net_tx_bps", "sent"]] },
  ],
};

const COLOURS = ["#2f6fdf", "#d9822b"];
const HEIGHT = 160;
const RETRY_MS = 10000;

function ensureStyle() {
  if (document.querySelector("link[data-usage-charts]")) return;
  const link = document.createElement("link");
  link.rel = "stylesheet";
  link.href = new URL("./vendor/uPlot.min.css", import.meta.url).href;
  link.dataset.usageCharts = "";
  document.head.append(link);
}

function options(spec, width) {
  return {
    title: spec.title,
    width,
    height: HEIGHT,
    scales: { x: { time: true }, y: spec.range ? { range: spec.range } : {} },
    axes: [{}, { values: (_, ticks) => ticks.map(spec.format), size: 70 }],
    series: [
      {},
      ...spec.series.map(([, label], i) => ({
        label,
        stroke: COLOURS[i % COLOURS.length],
        width: 1.5,
        spanGaps: false, // a missed round stays a gap: no figure is not zero
        value: (_, v) => spec.format(v),
      })),
    ],
  };
}

export function mountUsage(element, kind, name, { since = "1h" } = {}) {
  const specs = CHARTS[kind];
  if (!specs) throw new Error(`mountUsage: kind is "vm" or "host", not ${kind}`);
  ensureStyle();
  const plural = kind === "vm" ? "vms" : "hosts";
  const path = `/v1/${plural}/${encodeURIComponent(name)}/usage?since=${encodeURIComponent(since)}`;
  const controller = new AbortController();
  const status = document.createElement("p");
  status.className = "usage-status";
  const grid = document.createElement("div");
  grid.className = "usage-charts";
  element.replaceChildren(grid, status);
  const charts = specs.map((spec) => {
    const box = document.createElement("div");
    box.className = "usage-chart";
    box.dataset.metric = spec.series[0][0];
    grid.append(box);
    return { spec, box, plot: null };
  });
  let timer = null;
  let stopped = false;

  function stop() {
    if (stopped) return;
    stopped = true;
    clearTimeout(timer);
    controller.abort();
    watcher.disconnect();
    resized.disconnect();
    for (const chart of charts) chart.plot?.destroy();
  }

  const watcher = new MutationObserver(() => {
    if (!element.isConnected) stop();
  });
  watcher.observe(document.body, { childList: true, subtree: true });
  const resized = new ResizeObserver(() => {
    for (const chart of charts) chart.plot?.setSize({ width: chart.box.clientWidth || 320, height: HEIGHT });
  });
  resized.observe(grid);

  function draw(answer) {
    for (const chart of charts) {
      const columns = [answer.t, ...chart.spec.series.map(([metric]) => answer[metric])];
      if (chart.plot) chart.plot.setData(columns);
      else chart.plot = new uPlot(options(chart.spec, chart.box.clientWidth || 320), columns, chart.box);
    }
  }

  async function refresh() {
    clearTimeout(timer);
    if (stopped) return;
    if (!element.isConnected) return stop();
    let wait = RETRY_MS;
    try {
      const answer = await api(path, controller.signal);
      if (stopped) return;
      draw(answer);
      status.textContent = answer.t.length ? "" : "No figures yet: the first arrive within a collection interval.";
      wait = answer.interval_s * 1000;
    } catch (err) {
      if (stopped || controller.signal.aborted) return;
      status.textContent = `Usage unavailable: ${err.message}`;
    }
    timer = setTimeout(refresh, wait);
  }

  refresh();
  return { stop, refresh };
}
