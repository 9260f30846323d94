// Capacity search in the gust dashboard: the form (POST /capacity), the step table
// (live from `capacity_step` events, then from the report) and a uPlot chart of the
// achieved rate and p99 against the offered rate. Loaded after app.js, whose helpers
// ($, api, fmtUs, follow, refreshHistory) it uses; app.js calls back through
// window.gustCapacity.
"use strict";

window.gustCapacity = (() => {
  let runId = null;
  let steps = [];
  let plot = null;

  // Step notes carry user text (SLO expressions): set as text, never as markup.
  function text(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }

  function fmtRate(r) {
    return Number.isInteger(r) ? String(r) : r.toFixed(1);
  }

  function chartData() {
    // uPlot wants x ascending; bisection offers rates out of order.
    const measured = steps.filter((s) => s.sent > 0).sort((a, b) => a.rate - b.rate);
    return [
      measured.map((s) => s.rate),
      measured.map((s) => s.achieved_rps),
      measured.map((s) => s.p99_us / 1000),
    ];
  }

  function ensureChart() {
    if (plot) return;
    const el = $("capacity-chart");
    plot = new uPlot({
      title: "achieved rate and p99 against offered rate",
      width: Math.max(400, el.clientWidth || 640), height: 240,
      scales: { x: { time: false }, rps: {}, ms: {} },
      axes: [
        { label: "offered req/s" },
        { scale: "rps", label: "achieved req/s" },
        { scale: "ms", label: "p99 ms", side: 1, grid: { show: false } },
      ],
      series: [
        { label: "offered req/s" },
        { label: "achieved req/s", scale: "rps", stroke: "#1f77b4", width: 2, points: { show: true, size: 7 } },
        { label: "p99 ms", scale: "ms", stroke: "#d62728", width: 2, points: { show: true, size: 7 } },
      ],
    }, chartData(), el);
  }

  function render() {
    $("capacity-panel").hidden = false;
    $("capacity-run").textContent = runId == null ? "" : "#" + runId;
    ensureChart();
    plot.setData(chartData());
    $("capacity-steps").querySelector("tbody").innerHTML = steps.map((s) => {
      const notes = s.verdicts.filter((v) => !v.passed).map((v) => `${v.expr} violated`)
        .concat(s.issues.map((i) => i.message)).join("; ");
      return `<tr class="${s.passed ? "better" : "worse"}"><td>${s.index}</td><td>${fmtRate(s.rate)}</td>` +
        `<td>${s.achieved_rps.toFixed(1)}</td><td>${fmtUs(s.p50_us)}</td><td>${fmtUs(s.p99_us)}</td>` +
        `<td>${(s.error_rate * 100).toFixed(2)}%</td><td>${s.dropped}</td><td>${s.passed ? "pass" : "fail"}</td><td>${text(notes)}</td></tr>`;
    }).join("");
  }

  // A step event from the live stream of run `id`.
  function onStep(id, step) {
    if (id !== runId) { runId = id; steps = []; $("capacity-summary").textContent = "searching…"; }
    steps = steps.filter((s) => s.index !== step.index).concat([step]);
    render();
  }

  // A report answer from GET /runs/{id}/report: true when it is a capacity search's
  // (and is now shown), false otherwise (the capacity panel is hidden).
  function claim(data) {
    if (data.kind !== "capacity") { $("capacity-panel").hidden = true; return false; }
    runId = data.run_id;
    const r = data.report;
    steps = r.steps.slice();
    render();
    $("capacity-summary").textContent = (r.best_rate != null
      ? `best rate ${fmtRate(r.best_rate)} req/s met the SLO (${r.slo.join(", ")})`
      : `no rate met the SLO (${r.slo.join(", ")})`) + ` · stopped: ${r.stop_reason} · ${r.steps.length} steps`;
    return true;
  }

  $("capacity-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    $("capacity-error").textContent = "";
    const body = {
      url: $("c-url").value.trim(),
      slo: $("c-slo").value.trim(),
      start: Number($("c-start").value),
      max: Number($("c-max").value),
      step_duration: $("c-step").value.trim(),
    };
    if ($("c-precision").value.trim()) body.precision = $("c-precision").value.trim();
    try {
      const { id } = await api("POST", "/capacity", body);
      runId = id; steps = [];
      $("report-panel").hidden = true;
      $("capacity-summary").textContent = "searching…";
      render();
      follow(id);
      refreshHistory();
    } catch (e) {
      $("capacity-error").textContent = e.message;
    }
  });

  return { onStep, claim };
})();
