// Browser test of the gust dashboard (run by .ci/run): Playwright-core driving
// Debian's Chromium, headless. Usage: node e2e.cjs DAEMON_URL TARGET_URL SCREENSHOT
"use strict";
const { chromium } = require("playwright-core");
const fs = require("fs");
const os = require("os");
const path = require("path");

const [base, targetUrl, shot] = process.argv.slice(2);

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
  } finally {
    await browser.close();
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
