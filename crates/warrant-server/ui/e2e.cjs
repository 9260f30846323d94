// Browser test of the delegations console (run by .ci/run): Playwright-core
// driving Debian's Chromium, headless. It logs in, finds the person's agent,
// revokes the person (confirming the cascade preview) and sees the agent
// marked revoked, in the page and through the API.
// Usage: WARRANT_ADMIN_PASSWORD=… node e2e.cjs BASE_URL PERSON_CN AGENT_ID SCREENSHOT
"use strict";
const { chromium } = require("playwright-core");
const fs = require("fs");
const os = require("os");
const path = require("path");

const [base, personCn, agentId, shot] = process.argv.slice(2);
const password = process.env.WARRANT_ADMIN_PASSWORD;

async function main() {
  if (!base || !personCn || !agentId || !shot || !password) {
    throw new Error("usage: WARRANT_ADMIN_PASSWORD=… node e2e.cjs BASE_URL PERSON_CN AGENT_ID SCREENSHOT");
  }
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "warrant-chromium-"));
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1400, height: 1000 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const problems = [];
  try {
    const page = await browser.newPage();
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    page.on("console", (m) => {
      // A CSP violation (an inline script or style the policy blocked) is a failure.
      if (m.type() === "error" && /Content Security Policy/i.test(m.text())) problems.push(m.text());
    });
    const resp = await page.goto(base + "/ui/");
    const csp = resp.headers()["content-security-policy"] || "";
    if (!csp.includes("default-src 'self'")) throw new Error(`no strict CSP on /ui/: ${csp}`);

    await page.waitForSelector("#login-panel:not([hidden])");
    await page.fill("#username", "admin");
    await page.fill("#password", password);
    await page.click("#login-submit");
    await page.waitForSelector("#console:not([hidden])");
    console.log(`logged in as ${await page.textContent("#whoami")}`);

    const person = `.person[data-cn="${personCn}"]`;
    const agentRow = `${person} tr.agent-row[data-agent-id="${agentId}"]`;
    await page.waitForSelector(agentRow, { timeout: 15000 });
    const before = await page.textContent(`${agentRow} .agent-status`);
    console.log(`agent ${agentId} of ${personCn}: ${before.trim()}`);
    if (before.trim() !== "valid") throw new Error(`agent not shown as valid: ${before}`);
    const serial = await page.getAttribute(agentRow, "data-serial");

    // Revoke the person: the dialog previews the cascade, then we confirm.
    await page.click(`${person} button.revoke`);
    await page.waitForSelector("#revoke-dialog[open]");
    const preview = Number(await page.textContent("#revoke-count"));
    console.log(`cascade preview: ${preview} live agent(s)`);
    if (!(preview >= 1)) throw new Error(`cascade preview counts ${preview} agents`);
    await page.selectOption("#revoke-reason", "keyCompromise");
    await page.click("#revoke-confirm");
    await page.waitForSelector("#revoke-dialog[open]", { state: "detached" });
    await page.waitForFunction((sel) => {
      const b = document.querySelector(sel);
      return b && b.textContent.trim() === "revoked";
    }, `${agentRow} .agent-status .badge`, { timeout: 15000 });
    const note = await page.textContent("#notice");
    console.log(`notice: ${note}`);
    if (!note.includes(`${preview} agent certificate(s) revoked`)) throw new Error("cascade count differs from the preview");

    // The API agrees (the page's own session cookie, read-only request).
    const status = await page.evaluate(async (s) => {
      const r = await fetch(`/api/v1/cert/people/${s}`, { headers: { Accept: "application/json" } });
      return (await r.json()).status;
    }, serial);
    console.log(`API status of agent ${serial}: ${status}`);
    if (status !== "R") throw new Error(`the API says the agent's status is ${status}`);

    // Let one more metrics poll land so the chart has points, then screenshot.
    await page.waitForTimeout(3500);
    fs.mkdirSync(path.dirname(shot), { recursive: true });
    await page.screenshot({ path: shot, fullPage: true });
    console.log(`screenshot saved to ${shot}`);
    if (problems.length) throw new Error(problems.join("\n"));
  } finally {
    await browser.close();
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
