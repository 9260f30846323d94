// gust dashboard: plain JS over the daemon's REST + SSE API; charts are uPlot.
"use strict";

const token = new URLSearchParams(location.hash.slice(1)).get("token");
const $ = (id) => document.getElementById(id);

async function api(method, path, body, contentType) {
  const headers = { "Content-Type": contentType || "application/json" };
  if (token) headers.Authorization = "Bearer " + token;
  const raw = body === undefined || typeof body === "string" ? body : JSON.stringify(body);
  const res = await fetch(path, { method, headers, body: raw });
  const text = await res.text();
  const data = text ? JSON.parse(text) : null;
  if (!res.ok) throw new Error(data && data.error ? `${data.error.code}: ${data.error.message}` : res.statusText);
  return data;
}

// Everything a run spec or scenario names (run names, URLs, step names) is text, never
// markup.
function esc(v) {
  return String(v ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function fmtUs(us) {
  if (us == null) return "–";
  if (us < 1000) return us.toFixed(0) + "µs";
  if (us < 1e6) return (us / 1000).toFixed(2) + "ms";
  return (us / 1e6).toFixed(2) + "s";
}

// ---- charts -------------------------------------------------------------
const charts = {};
function makeChart(id, title, series, yLabel) {
  const el = $(id);
  const opts = {
    title, width: Math.max(300, el.clientWidth || 420), height: 170,
    scales: { x: { time: false } },
    axes: [{ label: "s" }, { label: yLabel }],
    series: [{ label: "t (s)" }].concat(series.map(([label, stroke]) => ({ label, stroke, width: 2 }))),
  };
  const data = [[]].concat(series.map(() => []));
  charts[id] = { plot: new uPlot(opts, data, el), data };
}
function resetCharts() {
  for (const id of Object.keys(charts)) { charts[id].plot.destroy(); $(id).innerHTML = ""; delete charts[id]; }
  makeChart("chart-rps", "req/s", [["req/s", "#1f77b4"]], "req/s");
  makeChart("chart-latency", "latency (ms)", [["p50", "#2ca02c"], ["p90", "#ff7f0e"], ["p99", "#d62728"]], "ms");
  makeChart("chart-errors", "errors", [["failures", "#d62728"]], "count");
  makeChart("chart-inflight", "in flight", [["in flight", "#9467bd"]], "requests");
  makeChart("chart-dropped", "dropped", [["dropped", "#8c564b"]], "count");
}
function push(id, x, ys) {
  const c = charts[id];
  c.data[0].push(x);
  ys.forEach((y, i) => c.data[i + 1].push(y));
  c.plot.setData(c.data);
}

// ---- live run -------------------------------------------------------------
let current = null; // { id, source }
function onTick(t) {
  $("live-rps").textContent = t.rps.toFixed(0);
  $("live-p50").textContent = fmtUs(t.latency.p50_us);
  $("live-p90").textContent = fmtUs(t.latency.p90_us);
  $("live-p99").textContent = fmtUs(t.latency.p99_us);
  $("live-errors").textContent = t.totals.failures;
  $("live-inflight").textContent = t.in_flight;
  $("live-dropped").textContent = t.totals.dropped;
  $("live-total").textContent = t.totals.responses;
  const x = t.elapsed_s;
  push("chart-rps", x, [t.rps]);
  push("chart-latency", x, [t.latency.p50_us / 1000, t.latency.p90_us / 1000, t.latency.p99_us / 1000]);
  push("chart-errors", x, [t.failures]);
  push("chart-inflight", x, [t.in_flight]);
  push("chart-dropped", x, [t.dropped]);
}

// A run whose segments run elsewhere and meet on this daemon: each segment's state,
// and the parts of the run no segment holds.
function segmentsLine(s) {
  const parts = s.segments.map((x) => `${esc(x.segment)} ${esc(x.state)}` +
    (x.late ? ` (late ${x.start_late_ms} ms)` : ""));
  if (s.missing && s.missing.length) parts.push("missing " + s.missing.map(esc).join(", "));
  return parts.join(" · ");
}
function showSegments(s) {
  const el = $("live-segments");
  el.hidden = false;
  el.innerHTML = `segments of <strong>${esc(s.name)}</strong>: ` + segmentsLine(s);
}

const LIVE_FIGURES = ["live-rps", "live-p50", "live-p90", "live-p99", "live-errors", "live-inflight", "live-dropped", "live-total"];
function follow(id) {
  if (current && current.source) current.source.close();
  resetCharts();
  // Nothing of the run followed before stays on the panel that now names this one.
  for (const f of LIVE_FIGURES) $(f).textContent = "–";
  $("live-segments").hidden = true;
  $("live-segments").textContent = "";
  $("live-run").textContent = "#" + id;
  $("live-status").textContent = "running";
  $("stop").disabled = false;
  // EventSource reconnects by itself and sends Last-Event-ID, so the daemon replays
  // only what was missed.
  const source = new EventSource(`/runs/${id}/live` + (token ? `?token=${encodeURIComponent(token)}` : ""));
  current = { id, source };
  source.addEventListener("tick", (e) => onTick(JSON.parse(e.data)));
  source.addEventListener("segments", (e) => showSegments(JSON.parse(e.data)));
  source.addEventListener("capacity_step", (e) => window.gustCapacity.onStep(id, JSON.parse(e.data)));
  source.addEventListener("complete", (e) => {
    source.close();
    const done = JSON.parse(e.data);
    $("live-status").textContent = done.status;
    $("stop").disabled = true;
    refreshHistory();
    openReport(id);
  });
}

$("f-mode").addEventListener("change", () => {
  $("f-level-label").textContent = $("f-mode").value === "open" ? "Rate (req/s)" : "Concurrency";
});

function parseStages(text) {
  return text.split(",").map((s) => s.trim()).filter(Boolean).map((s) => {
    const [duration, target] = s.split(":");
    return { duration: duration.trim(), target: Number(target) };
  });
}

$("run-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("form-error").textContent = "";
  const spec = { url: $("f-url").value.trim(), method: $("f-method").value.trim() || "GET", mode: $("f-mode").value };
  const headers = $("f-headers").value.split("\n").map((l) => l.trim()).filter(Boolean).map((l) => {
    const i = l.indexOf(":");
    return [l.slice(0, i).trim(), l.slice(i + 1).trim()];
  });
  if (headers.length) spec.headers = headers;
  if ($("f-body").value) spec.body = $("f-body").value;
  if ($("f-nokeepalive").checked) spec.no_keepalive = true;
  const stages = parseStages($("f-stages").value);
  const level = Number($("f-level").value);
  if (spec.mode === "open") spec.rate = level; else spec.concurrency = level;
  if (stages.length) spec.stages = stages; else spec.duration = $("f-duration").value.trim();
  const thresholds = $("f-thresholds").value.split(",").map((s) => s.trim()).filter(Boolean);
  if (thresholds.length) spec.thresholds = thresholds;
  const monitor = monitorUrlsFromForm();
  if (monitor.length) spec.monitor = monitor;
  try {
    const { run_id } = await api("POST", "/runs", spec);
    $("report-panel").hidden = true;
    follow(run_id);
    refreshHistory();
  } catch (e) {
    $("form-error").textContent = e.message;
  }
});

// A scenario file (TOML, the same as `gust run FILE.toml`) goes to the daemon as is.
$("scenario-file").addEventListener("change", async () => {
  const file = $("scenario-file").files[0];
  if (file) $("scenario-text").value = await file.text();
});
$("scenario-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("form-error").textContent = "";
  try {
    const { run_id } = await api("POST", "/runs", $("scenario-text").value, "application/toml");
    $("report-panel").hidden = true;
    follow(run_id);
    refreshHistory();
  } catch (e) {
    $("form-error").textContent = e.message;
  }
});

$("stop").addEventListener("click", async () => {
  if (!current) return;
  try { await api("POST", `/runs/${current.id}/stop`); } catch (e) { $("form-error").textContent = e.message; }
});

// ---- report, baseline, compare -------------------------------------------
let shown = null;
const ROWS = [
  ["responses", (r) => r.responses, String, +1],
  ["req/s", (r) => r.rps, (v) => v.toFixed(1), +1],
  ["error rate", (r) => r.error_rate, (v) => (v * 100).toFixed(3) + "%", -1],
  ["dropped", (r) => r.dropped, String, -1],
  ["p50", (r) => r.latency.p50_us, fmtUs, -1],
  ["p90", (r) => r.latency.p90_us, fmtUs, -1],
  ["p99", (r) => r.latency.p99_us, fmtUs, -1],
  ["p99.9", (r) => r.latency.p999_us, fmtUs, -1],
  ["max", (r) => r.latency.max_us, fmtUs, -1],
  ["peak in flight", (r) => r.peak_in_flight, String, 0],
];
function reportTable(r) {
  return "<table>" + ROWS.map(([n, get, f]) => `<tr><td>${n}</td><td>${f(get(r))}</td></tr>`).join("") + "</table>";
}

// A scenario's per-step results, beside the totals.
function stepsTable(steps) {
  if (!steps || !steps.length) return "";
  const rows = steps.map((s) => `<tr><td>${esc(s.name)}</td><td>${s.responses}</td><td>${s.failures}</td>` +
    `<td>${fmtUs(s.latency.p50_us)}</td><td>${fmtUs(s.latency.p99_us)}</td></tr>`).join("");
  return `<table id="steps-table"><tr><th>step</th><th>responses</th><th>failures</th><th>p50</th><th>p99</th></tr>${rows}</table>`;
}

// Connection phases: DNS once per run, connect and TLS per new connection, time to
// first byte per response. A phase that never happened (count 0) is left out.
function phasesTable(phases) {
  if (!phases) return "";
  const rows = ["dns", "connect", "tls", "ttfb"].filter((p) => phases[p] && phases[p].count > 0).map((p) => {
    const s = phases[p];
    return `<tr><td>${p}</td><td>${s.count}</td><td>${fmtUs(s.p50_us)}</td><td>${fmtUs(s.p99_us)}</td><td>${fmtUs(s.max_us)}</td></tr>`;
  }).join("");
  return rows ? `<table id="phases-table"><tr><th>phase</th><th>count</th><th>p50</th><th>p99</th><th>max</th></tr>${rows}</table>` : "";
}

async function openReport(id) {
  try {
    const data = await api("GET", `/runs/${id}/report`);
    if (window.gustCapacity.claim(data)) { $("report-panel").hidden = true; return; }
    shown = data;
    $("report-panel").hidden = false;
    $("compare-panel").hidden = true;
    $("report-run").textContent = "#" + id;
    $("report-total").textContent = data.report.responses;
    $("report-status").textContent = data.status;
    $("report-verdict").textContent = data.verdict;
    const verdicts = data.verdicts.map((v) => `<li>${v.passed ? "PASS" : "FAIL"} ${esc(v.expr)} (actual ${v.actual.toFixed(4)})</li>`).join("");
    const segments = data.report.segments ? `<p id="report-segments">segments: ${segmentsLine(data.report)}</p>` : "";
    $("report-body").innerHTML = reportTable(data.report) + segments + stepsTable(data.report.steps) + phasesTable(data.report.phases) + (verdicts ? `<ul>${verdicts}</ul>` : "");
    showMonitor(id);
  } catch (e) {
    $("form-error").textContent = e.message;
  }
}

$("mark-baseline").addEventListener("click", async () => {
  if (!shown) return;
  await api("PUT", `/runs/${shown.run_id}/baseline`, { baseline: true });
  refreshHistory();
});

$("compare").addEventListener("click", async () => {
  if (!shown) return;
  const run = await api("GET", `/runs/${shown.run_id}`);
  const panel = $("compare-panel");
  panel.hidden = false;
  if (run.baseline_id == null) { panel.textContent = "No baseline yet: mark a run as baseline first."; return; }
  const base = await api("GET", `/runs/${run.baseline_id}/report`);
  const rows = ROWS.map(([n, get, f, better]) => {
    const a = get(shown.report), b = get(base.report);
    const cls = better === 0 || a === b ? "" : (a - b) * better > 0 ? "better" : "worse";
    return `<tr><td>${n}</td><td class="${cls}">${f(a)}</td><td>${f(b)}</td></tr>`;
  }).join("");
  panel.innerHTML = `<div class="side"><table id="compare-table"><tr><th></th><th>run #${shown.run_id}</th><th>baseline #${run.baseline_id}</th></tr>${rows}</table></div>`;
});

// ---- history ----------------------------------------------------------------
async function refreshHistory() {
  const { runs } = await api("GET", "/runs?limit=50");
  $("history").querySelector("tbody").innerHTML = runs.map((r) => {
    const rep = r.report || {};
    return `<tr data-id="${r.id}"><td>${r.id}</td><td>${esc(r.name)}</td><td>${esc(r.spec.url)}</td><td>${esc(r.status)}</td>` +
      `<td>${r.verdict || ""}</td><td>${rep.responses ?? ""}</td><td>${rep.rps != null ? rep.rps.toFixed(1) : rep.best_rate != null ? "best " + Number(rep.best_rate).toFixed(0) : ""}</td>` +
      `<td>${rep.p99_us != null ? fmtUs(rep.p99_us) : ""}</td><td>${r.baseline ? "★" : ""}</td>` +
      `<td><button data-open="${r.id}">open</button> <button data-delete="${r.id}">delete</button></td></tr>`;
  }).join("");
}
$("history").addEventListener("click", async (ev) => {
  const open = ev.target.getAttribute("data-open");
  const del = ev.target.getAttribute("data-delete");
  if (open) openReport(Number(open));
  if (del) { try { await api("DELETE", `/runs/${del}`); refreshHistory(); } catch (e) { $("form-error").textContent = e.message; } }
});

async function init() {
  resetCharts();
  try {
    const h = await api("GET", "/health");
    $("health").textContent = `v${h.version} · ${h.workers} workers`;
    if (h.active_run != null) follow(h.active_run);
  } catch (e) {
    $("health").textContent = e.message;
  }
  refreshHistory();
}
init();

// Runs start elsewhere too (the CLI, or segments meeting here): while the panel is
// not following a running run, pick up the one the daemon is running.
setInterval(async () => {
  if (current && $("live-status").textContent === "running") return;
  try {
    const h = await api("GET", "/health");
    if (h.active_run != null && (!current || current.id !== h.active_run)) follow(h.active_run);
  } catch (e) {
    // The next poll tries again.
  }
}, 1000);

// ---- target monitoring ------------------------------------------------------
// A finished run's monitor series (GET /runs/{id}/series → monitor), charted below a
// per-second latency chart on the same x axis (seconds since the run start) with a
// shared cursor: one chart per metric name, one line per label set.
const MONITOR_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
const MONITOR_MAX_CHARTS = 16;
const MONITOR_MAX_LINES = MONITOR_COLORS.length;
let monitorPlots = [];

function clearMonitorCharts() {
  for (const p of monitorPlots) p.destroy();
  monitorPlots = [];
  const el = $("monitor-charts");
  if (el) { el.innerHTML = ""; el.hidden = true; }
}

function monitorLineLabel(s) {
  const labels = Object.entries(s.labels || {}).map(([k, v]) => `${k}=${v}`).join(",");
  return labels || s.name;
}

// Aligns series with different timestamps on one x array (uPlot wants one), with
// null where a series has no point.
function alignPoints(lines) {
  const xs = Array.from(new Set(lines.flatMap((l) => l.points.map((p) => p[0])))).sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const ys = lines.map((l) => {
    const y = new Array(xs.length).fill(null);
    for (const [t, v] of l.points) y[index.get(t)] = v;
    return y;
  });
  return [xs].concat(ys);
}

function addMonitorPlot(container, title, yLabel, labels, data, xRange) {
  const div = document.createElement("div");
  container.appendChild(div);
  const opts = {
    title, width: Math.max(300, container.clientWidth ? Math.min(container.clientWidth, 640) : 420), height: 170,
    scales: { x: { time: false, range: () => xRange } },
    cursor: { sync: { key: "gust-monitor" } },
    axes: [{ label: "s" }, { label: yLabel }],
    series: [{ label: "t (s)" }].concat(labels.map((label, i) => ({ label, stroke: MONITOR_COLORS[i % MONITOR_COLORS.length], width: 2, spanGaps: true }))),
  };
  monitorPlots.push(new uPlot(opts, data, div));
}

function monitorGroups(monitor) {
  const groups = new Map();
  for (const s of monitor) {
    const key = `${s.name} · ${s.source}`;
    if (!groups.has(key)) groups.set(key, []);
    const g = groups.get(key);
    if (g.length < MONITOR_MAX_LINES) g.push(s);
  }
  return Array.from(groups.entries()).slice(0, MONITOR_MAX_CHARTS);
}

async function showMonitor(id) {
  clearMonitorCharts();
  const el = $("monitor-charts");
  if (!el) return;
  let data;
  try { data = await api("GET", `/runs/${id}/series`); } catch (e) { return; }
  const monitor = data.monitor || [];
  if (!monitor.length) return;
  el.hidden = false;
  const secs = data.series.map((s) => s.second);
  const ts = monitor.flatMap((s) => s.points.map((p) => p[0])).concat(secs, secs.map((s) => s + 1));
  const xRange = [Math.min(0, ...ts), Math.max(...ts)];
  addMonitorPlot(el, "latency (ms), per second", "ms", ["p50", "p99"],
    [secs, data.series.map((s) => s.latency.p50_us / 1000), data.series.map((s) => s.latency.p99_us / 1000)], xRange);
  for (const [title, lines] of monitorGroups(monitor)) {
    const unit = lines[0].unit || "";
    addMonitorPlot(el, `${title} (${lines[0].kind}${unit ? ", " + unit : ""})`, unit, lines.map(monitorLineLabel), alignPoints(lines), xRange);
  }
}

// Start form: comma-separated monitor URLs.
function monitorUrlsFromForm() {
  const input = $("f-monitor");
  if (!input) return [];
  return input.value.split(",").map((s) => s.trim()).filter(Boolean);
}
