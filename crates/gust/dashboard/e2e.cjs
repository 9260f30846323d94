// Browser test of the gust dashboard (run by .ci/run): Playwright-core driving
// Debian's Chromium, headless. Usage: node e2e.cjs DAEMON_URL TARGET_URL SCREENSHOT GUST_BIN
"use strict";
const { chromium } = require("playwright-core");
const { spawn } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");

const [base, targetUrl, shot, gustBin] = process.argv.slice(2);

// A `gust` process; resolves with its exit code and output.
function gust(args) {
  return new Promise((resolve) => {
    const child = spawn(gustBin, args, { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d) => { out += d; });
    child.stderr.on("data", (d) => { out += d; });
    child.on("close", (code) => resolve({ code, out }));
  });
}

async function main() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "gust-chromium-"));
  // A fresh profile directory: Playwright passes it as --user-data-dir.
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1400, height: 1000 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  try {
    const page = await browser.newPage();
    page.on("pageerror", (e) => { throw e; });
    await page.goto(base + "/");
    await page.waitForFunction(() => document.getElementById("health").textContent.includes("workers"));
    await page.fill("#f-url", targetUrl);
    await page.selectOption("#f-mode", "closed");
    await page.fill("#f-level", "4");
    await page.fill("#f-duration", "6s");
    await page.fill("#f-thresholds", "p99<10s");
    await page.click("#start");
    await page.waitForFunction(() => /#\d+/.test(document.getElementById("live-run").textContent));
    const runId = Number((await page.textContent("#live-run")).slice(1));
    // Watch the live req/s figure while the run goes.
    const seen = [];
    const deadline = Date.now() + 30000;
    while (Date.now() < deadline) {
      const rps = await page.textContent("#live-rps");
      if (rps !== "–" && rps !== seen[seen.length - 1]) seen.push(rps);
      if ((await page.textContent("#live-status")) !== "running") break;
      await page.waitForTimeout(100);
    }
    console.log(`run ${runId}: live req/s values seen: ${seen.join(", ")}`);
    if (seen.length < 4) throw new Error(`live req/s changed only ${seen.length - 1} times`);
    await page.waitForSelector("#report-panel:not([hidden])", { timeout: 60000 });
    await page.waitForFunction(() => document.getElementById("report-total").textContent !== "");
    const shown = Number(await page.textContent("#report-total"));
    const api = await (await fetch(`${base}/runs/${runId}/report`)).json();
    console.log(`dashboard total ${shown}, API total ${api.report.responses}`);
    if (shown !== api.report.responses || !(shown > 0)) throw new Error("report total differs from the API");
    // Connection phases: the run opened connections and timed every first byte.
    const ttfbCount = await page.textContent("#phases-table tr:has(td:text-is('ttfb')) td:nth-child(2)");
    if (Number(ttfbCount) !== api.report.phases.ttfb.count) throw new Error(`ttfb count ${ttfbCount} differs from the API`);
    // Baseline and compare side by side, then screenshot.
    await page.click("#mark-baseline");
    await page.waitForFunction(() => document.querySelector("#history tbody").textContent.includes("★"));
    // A second, shorter run, compared side by side with the baseline.
    await page.fill("#f-duration", "2s");
    await page.click("#start");
    await page.waitForFunction((first) => document.getElementById("live-run").textContent !== "#" + first, runId);
    await page.waitForFunction(() => document.getElementById("live-status").textContent === "completed", null, { timeout: 60000 });
    await page.waitForFunction((first) => document.getElementById("report-run").textContent !== "#" + first, runId);
    await page.click("#compare");
    await page.waitForSelector("#compare-table", { timeout: 10000 });
    fs.mkdirSync(path.dirname(shot), { recursive: true });
    await page.screenshot({ path: shot, fullPage: true });
    console.log(`screenshot saved to ${shot}`);
    // A scenario file, picked in the file input: two steps, the second using what
    // the first extracted; the report shows each step beside the totals.
    const scenario = [
      `url = "${targetUrl}"`, 'mode = "closed"', "concurrency = 2", 'duration = "2s"', "",
      "[[steps]]", 'name = "first"', 'path = "/"', "extract.word = { regex = '(\\w+)', group = 1 }", "",
      "[[steps]]", 'name = "second"', 'path = "/?w={{word}}"', "status = [200]", "",
    ].join("\n");
    await page.setInputFiles("#scenario-file", { name: "two-steps.toml", mimeType: "text/plain", buffer: Buffer.from(scenario) });
    await page.waitForFunction(() => document.getElementById("scenario-text").value.includes("[[steps]]"));
    const before = await page.textContent("#live-run");
    await page.click("#start-scenario");
    await page.waitForFunction((prev) => document.getElementById("live-run").textContent !== prev, before);
    const scenarioId = Number((await page.textContent("#live-run")).slice(1));
    await page.waitForFunction((id) => document.getElementById("report-run").textContent === "#" + id, scenarioId, { timeout: 60000 });
    await page.waitForSelector("#steps-table");
    const stepRows = await page.$$eval("#steps-table tr", (trs) => trs.slice(1).map((tr) => [...tr.children].map((td) => td.textContent)));
    const scenarioApi = await (await fetch(`${base}/runs/${scenarioId}/report`)).json();
    console.log(`scenario run ${scenarioId}: steps ${JSON.stringify(stepRows)}`);
    const apiSteps = scenarioApi.report.steps;
    if (stepRows.length !== 2 || apiSteps.length !== 2) throw new Error("scenario steps missing from the report");
    stepRows.forEach((row, i) => {
      if (row[0] !== apiSteps[i].name || Number(row[1]) !== apiSteps[i].responses || !(apiSteps[i].responses > 0))
        throw new Error(`step row ${row} differs from the API's ${JSON.stringify(apiSteps[i])}`);
      if (apiSteps[i].failures !== 0) throw new Error(`step ${apiSteps[i].name} failed: ${JSON.stringify(apiSteps[i])}`);
    });
    // A short capacity search: the step table fills live and the chart renders.
    const scenarioTotal = await page.textContent("#live-total");
    await page.fill("#c-url", targetUrl);
    await page.fill("#c-slo", "errors<1%");
    await page.fill("#c-start", "20");
    await page.fill("#c-max", "80");
    await page.fill("#c-step", "1s");
    await page.click("#capacity-start");
    await page.waitForFunction(() => document.getElementById("capacity-summary").textContent.startsWith("best rate"),
      null, { timeout: 60000 });
    const rows = await page.$$eval("#capacity-steps tbody tr", (trs) => trs.length);
    const canvas = await page.$$eval("#capacity-chart canvas", (cs) => cs.filter((c) => c.width > 0 && c.height > 0).length);
    console.log(`capacity: ${rows} steps, ${canvas} chart canvas, ${await page.textContent("#capacity-summary")}`);
    if (rows !== 3 || canvas < 1) throw new Error("capacity search table or chart missing");
    // The live panel shows the search it names: its own ticks and totals, nothing of
    // the scenario run before it.
    const liveRun = await page.textContent("#live-run");
    await page.waitForFunction(() => document.getElementById("live-status").textContent === "completed", null, { timeout: 30000 });
    const liveTotal = await page.textContent("#live-total");
    const capacityRun = await (await fetch(`${base}/runs/${liveRun.slice(1)}/report`)).json();
    const searched = capacityRun.report.steps.reduce((n, s) => n + s.responses, 0);
    console.log(`live panel: ${liveRun}, total ${liveTotal} (scenario run's was ${scenarioTotal}), search responses ${searched}`);
    if (liveRun === "#" + scenarioId) throw new Error("the live panel still names the scenario run");
    if (Number(liveTotal) !== searched) throw new Error(`live total ${liveTotal} is not the search's ${searched}`);
    const capShot = path.join(path.dirname(shot), "dashboard-capacity.png");
    await page.screenshot({ path: capShot, fullPage: true });
    console.log(`screenshot saved to ${capShot}`);
    // Four segments of one run, started by the CLI and meeting on the daemon: the
    // panel picks the run up by itself and shows it live as one, with its segments.
    const segDir = fs.mkdtempSync(path.join(os.tmpdir(), "gust-segments-"));
    const spec = path.join(segDir, "four.toml");
    fs.writeFileSync(spec, [`url = "${targetUrl}"`, 'mode = "open"', "rate = 200", 'duration = "5s"', "workers = 1", 'thresholds = ["errors<1%"]', ""].join("\n"));
    const startAt = new Date(Date.now() + 3000).toISOString();
    const procs = [0, 1, 2, 3].map((i) => gust(["run", spec, "--segment", `${i}/4`, "--start-at", startAt,
      "--daemon", base, "--run", "e2e-four"]));
    await page.waitForFunction((prev) => document.getElementById("live-run").textContent !== prev, liveRun, { timeout: 20000 });
    const fourId = Number((await page.textContent("#live-run")).slice(1));
    // Segments send a second's ticks at a time: the running total moves each second,
    // and every tick lands on the req/s chart.
    const totals = [];
    const fourDeadline = Date.now() + 40000;
    while (Date.now() < fourDeadline) {
      const total = await page.textContent("#live-total");
      if (total !== "–" && total !== totals[totals.length - 1]) totals.push(total);
      if ((await page.textContent("#live-status")) !== "running") break;
      await page.waitForTimeout(100);
    }
    const exits = await Promise.all(procs);
    exits.forEach((e, i) => { if (e.code !== 0) throw new Error(`segment ${i}/4 exited ${e.code}: ${e.out}`); });
    const points = await page.evaluate(() => charts["chart-rps"].data[0].length);
    console.log(`four segments: run ${fourId}, live totals seen: ${totals.join(", ")}; ${points} req/s chart points`);
    if (totals.length < 3) throw new Error(`the live total of the four-segment run moved only ${totals.length} times`);
    if (points < 16) throw new Error(`the req/s chart holds ${points} ticks of a 5 s run (4 a second)`);
    await page.waitForFunction(() => document.getElementById("live-status").textContent === "completed", null, { timeout: 30000 });
    const segLine = await page.textContent("#live-segments");
    console.log(`live segments: ${segLine}`);
    for (let i = 0; i < 4; i++) if (!segLine.includes(`${i}/4 reported`)) throw new Error(`segment ${i}/4 not shown as reported: ${segLine}`);
    if (!segLine.includes("e2e-four")) throw new Error("the segments line does not name the run");
    const fourApi = await (await fetch(`${base}/runs/${fourId}/report`)).json();
    const fourTotal = await page.textContent("#live-total");
    console.log(`four segments: sent ${fourApi.report.sent}, responses ${fourApi.report.responses}, live total ${fourTotal}`);
    if (fourApi.report.sent !== 1000) throw new Error(`the merged run sent ${fourApi.report.sent}, not 200/s × 5 s`);
    if (Number(fourTotal) !== fourApi.report.responses) throw new Error("the live total is not the merged report's");
    if (fourApi.report.segments.length !== 4 || fourApi.report.missing.length !== 0) throw new Error("the stored report lacks its segments");
    await page.waitForFunction((id) => document.getElementById("report-run").textContent === "#" + id, fourId, { timeout: 10000 });
    if (Number(await page.textContent("#report-total")) !== fourApi.report.responses) throw new Error("the report panel's total differs");
    const segShot = path.join(path.dirname(shot), "dashboard-segments.png");
    await page.screenshot({ path: segShot, fullPage: true });
    console.log(`screenshot saved to ${segShot}`);
  } finally {
    await browser.close();
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
