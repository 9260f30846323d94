// Warrant delegations console. Reads everything through the public API with
// the pki_token session cookie (HttpOnly: this script never sees or keeps a
// token). Every value from the server reaches the page as text
// (textContent, setAttribute), never as markup.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);

  const CERT_PAGE = 1000; // rows per /api/v1/certs request
  const CERT_SCAN_MAX = 10000; // rows read per refresh at most
  const PEOPLE_PER_PAGE = 20;
  const AUDIT_PAGE = 50;
  const AUDIT_SCAN = 1000; // events read for modes and refusals
  const METRICS_EVERY_MS = 3000;
  const DATA_EVERY_MS = 15000;
  const CRL_EVERY_MS = 30000;
  const CHART_POINTS = 200;

  const state = {
    user: null,
    people: [], // person certificates, sorted by CN
    agents: new Map(), // principal_uid -> agent certificates (unexpired)
    names: new Map(), // principal_uid -> CN
    truncated: false,
    peoplePage: 0,
    issueEvents: new Map(), // serial -> latest issue event's detail
    audit: "unknown", // "ok" | "missing" | "forbidden" | "error"
    auditOffset: 0,
    timers: [],
    lastMetrics: null,
    series: [[], [], [], []],
    chart: null,
    revoking: null,
  };

  // ---- small helpers -------------------------------------------------------

  /** An element with text children only; attributes set one by one. */
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = String(v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) {
      if (c === undefined || c === null) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function setText(id, v) {
    $(id).textContent = v === undefined || v === null ? "" : String(v);
  }

  function fmtTime(iso) {
    if (!iso) return "–";
    return String(iso).replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  function fmtDuration(seconds) {
    if (!Number.isFinite(seconds)) return "–";
    if (seconds <= 0) return "ended";
    const s = Math.floor(seconds);
    const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600);
    const m = Math.floor((s % 3600) / 60), r = s % 60;
    if (d > 0) return `${d}d ${h}h`;
    if (h > 0) return `${h}h ${m}m`;
    if (m > 0) return `${m}m ${r}s`;
    return `${r}s`;
  }

  function fmtRate(x) {
    if (!Number.isFinite(x)) return "–";
    return x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2);
  }

  function shortUid(uid) {
    const s = String(uid || "");
    return s.length > 40 ? s.slice(0, 28) + "…" + s.slice(-8) : s;
  }

  function principalLabel(uid) {
    if (!uid) return "(none)";
    const cn = state.names.get(uid);
    return cn ? `${cn} (${shortUid(uid)})` : shortUid(uid);
  }

  /** A JSON API call with the session cookie. Never throws for HTTP errors. */
  async function api(path, opts = {}) {
    const init = {
      method: opts.method || "GET",
      credentials: "same-origin",
      headers: { Accept: "application/json" },
      cache: "no-store",
    };
    if (opts.body !== undefined) {
      // JSON, as crate::csrf requires; the browser adds Origin and
      // Sec-Fetch-Site: same-origin to this same-origin POST.
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(opts.body);
    }
    let r;
    try {
      r = await fetch(path, init);
    } catch (e) {
      return { status: 0, ok: false, body: null, error: `network error: ${e.message}` };
    }
    let body = null;
    try {
      body = await r.json();
    } catch (_) {
      body = null;
    }
    if (r.status === 401 && !opts.allow401 && state.user) {
      showLogin("Your session ended; log in again.");
    }
    return { status: r.status, ok: r.ok, body };
  }

  function errorText(r) {
    if (r.error) return r.error;
    const b = r.body || {};
    const key = b.message || b.error || "";
    return `${r.status} ${key}${b.detail ? `: ${b.detail}` : ""}`.trim();
  }

  function notice(text) {
    const n = $("notice");
    n.textContent = text || "";
    n.hidden = !text;
  }

  // ---- session -------------------------------------------------------------

  function stopTimers() {
    for (const t of state.timers) clearInterval(t);
    state.timers = [];
  }

  function showLogin(message) {
    stopTimers();
    state.user = null;
    $("console").hidden = true;
    $("logout").hidden = true;
    setText("whoami", "");
    $("login-panel").hidden = false;
    setText("login-error", message || "");
    $("username").focus();
  }

  async function start() {
    const r = await api("/api/v1/users/info", { allow401: true });
    if (r.status === 401) return showLogin("");
    if (!r.ok) return showLogin(`The server answered ${errorText(r)}.`);
    state.user = r.body;
    $("login-panel").hidden = true;
    $("console").hidden = false;
    $("logout").hidden = false;
    setText("whoami", `${r.body.username} (${r.body.role})`);
    setupChart();
    // People first: the other panels name principals by their CN.
    await refreshData();
    await Promise.all([refreshCrl(), pollMetrics(), loadAuditPage()]);
    state.timers.push(setInterval(pollMetrics, METRICS_EVERY_MS));
    state.timers.push(setInterval(() => { if (!state.revoking) refreshData(); }, DATA_EVERY_MS));
    state.timers.push(setInterval(refreshCrl, CRL_EVERY_MS));
  }

  $("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    setText("login-error", "");
    $("login-submit").disabled = true;
    const r = await api("/api/v1/users/login", {
      method: "POST",
      body: { username: $("username").value, password: $("password").value },
      allow401: true,
    });
    $("login-submit").disabled = false;
    $("password").value = "";
    // The answer also carries the token for API clients; the page relies on
    // the HttpOnly cookie and drops it.
    if (!r.ok) return setText("login-error", r.status === 401 ? "Wrong username or password." : errorText(r));
    await start();
  });

  $("logout").addEventListener("click", async () => {
    await api("/api/v1/users/logout", { method: "POST", allow401: true });
    showLogin("Logged out.");
  });

  // ---- people and agents ---------------------------------------------------

  async function listCerts(query) {
    const rows = [];
    let truncated = false;
    for (let offset = 0; ; offset += CERT_PAGE) {
      if (offset >= CERT_SCAN_MAX) { truncated = true; break; }
      const q = new URLSearchParams({ ...query, limit: CERT_PAGE, offset });
      const r = await api(`/api/v1/certs?${q}`);
      if (!r.ok) throw new Error(`listing certificates: ${errorText(r)}`);
      const page = r.body.certificates || [];
      rows.push(...page);
      if (page.length < CERT_PAGE) break;
    }
    return { rows, truncated };
  }

  /** Latest `issue` event per serial: the mode and the delegation's end. */
  async function loadIssueEvents() {
    const r = await api(`/api/v1/audit?${new URLSearchParams({ event: "issue", limit: AUDIT_SCAN })}`);
    auditAvailability(r);
    const map = new Map();
    if (!r.ok) return map;
    for (const ev of r.body.events || []) {
      if (!ev.serial) continue;
      const prev = map.get(ev.serial);
      if (!prev || (ev.seq || 0) > (prev.seq || 0)) map.set(ev.serial, ev);
    }
    return map;
  }

  function auditAvailability(r) {
    if (r.ok) state.audit = "ok";
    else if (r.status === 404 || r.status === 405) state.audit = "missing";
    else if (r.status === 403) state.audit = "forbidden";
    else state.audit = "error";
  }

  function auditUnavailableText() {
    switch (state.audit) {
      case "missing": return "audit log unavailable: this server has no /api/v1/audit route yet";
      case "forbidden": return "audit log unavailable: it needs the admin or auditor role";
      case "error": return "audit log unavailable: the server refused the request";
      default: return "";
    }
  }

  async function refreshData() {
    setText("people-error", "");
    try {
      const [persons, live, issues] = await Promise.all([
        listCerts({ ca: "people", profile: "tls-client" }),
        listCerts({ ca: "people", profile: "agent-proxy" }),
        loadIssueEvents(),
      ]);
      const rows = persons.rows.concat(live.rows);
      const truncated = persons.truncated || live.truncated;
      const now = Date.now();
      const people = [];
      const agents = new Map();
      const names = new Map();
      for (const c of rows) {
        if (!c.principal_uid) continue;
        if (c.profile === "tls-client") {
          people.push(c);
          if (!names.has(c.principal_uid) || c.status === "V") names.set(c.principal_uid, c.common_name);
        } else if (c.profile === "agent-proxy" && Date.parse(c.not_after) > now) {
          if (!agents.has(c.principal_uid)) agents.set(c.principal_uid, []);
          agents.get(c.principal_uid).push(c);
        }
      }
      people.sort((a, b) => a.common_name.localeCompare(b.common_name) || a.serial_number.localeCompare(b.serial_number));
      Object.assign(state, { people, agents, names, truncated, issueEvents: issues });
      renderPeople();
      setText("people-updated", `updated ${new Date().toLocaleTimeString()}`);
      await loadRefusals();
    } catch (e) {
      setText("people-error", e.message);
    }
  }

  function liveAgents(person) {
    return (state.agents.get(person.principal_uid) || []).filter((a) => a.status === "V");
  }

  function filteredPeople() {
    const f = $("people-filter").value.trim().toLowerCase();
    if (!f) return state.people;
    return state.people.filter((p) =>
      p.common_name.toLowerCase().includes(f) || p.principal_uid.toLowerCase().includes(f));
  }

  function renderPeople() {
    const people = filteredPeople();
    const pages = Math.max(1, Math.ceil(people.length / PEOPLE_PER_PAGE));
    state.peoplePage = Math.min(state.peoplePage, pages - 1);
    const start = state.peoplePage * PEOPLE_PER_PAGE;
    const list = $("people-list");
    list.replaceChildren(...people.slice(start, start + PEOPLE_PER_PAGE).map(personCard));
    if (people.length === 0) list.append(el("p", { class: "muted", text: "No person certificates." }));
    setText("people-count", `${people.length} person certificate(s)${state.truncated ? ` (first ${CERT_SCAN_MAX} certificates read)` : ""}`);
    setText("people-page", `page ${state.peoplePage + 1} of ${pages}`);
    $("people-prev").disabled = state.peoplePage === 0;
    $("people-next").disabled = state.peoplePage >= pages - 1;
  }

  function statusBadge(c) {
    const revoked = c.status === "R";
    return el("span", { class: `badge ${revoked ? "revoked" : "valid"}`, "data-status": revoked ? "revoked" : "valid" },
      revoked ? "revoked" : "valid");
  }

  function personCard(p) {
    const agents = state.agents.get(p.principal_uid) || [];
    const live = agents.filter((a) => a.status === "V");
    const revokeBtn = el("button", { type: "button", class: "revoke danger", disabled: p.status === "R" },
      p.status === "R" ? "Revoked" : "Revoke…");
    revokeBtn.addEventListener("click", () => openRevoke(p));
    const card = el("article", {
      class: `person${p.status === "R" ? " is-revoked" : ""}`,
      "data-cn": p.common_name,
      "data-serial": p.serial_number,
    },
    el("div", { class: "person-head" },
      el("h3", {}, p.common_name),
      statusBadge(p),
      el("span", { class: "muted" }, `expires ${fmtTime(p.not_after)}`),
      p.revoked_at ? el("span", { class: "muted" }, `revoked ${fmtTime(p.revoked_at)} (${p.revocation_reason || "?"})`) : null,
      el("span", { class: "spacer" }),
      el("span", { class: "live-count" }, `${live.length} live agent(s)`),
      revokeBtn),
    el("div", { class: "mono muted", title: p.principal_uid }, `UID ${p.principal_uid} · serial ${p.serial_number}`));
    if (agents.length > 0) card.append(agentTable(agents));
    return card;
  }

  function agentTable(agents) {
    const auditNote = state.audit === "ok" ? "" : " (notAfter)";
    const rows = agents.map((a) => {
      const ev = state.issueEvents.get(a.serial_number);
      const detail = (ev && ev.detail) || {};
      const ends = detail.delegation_ends || a.not_after;
      const left = (Date.parse(ends) - Date.now()) / 1000;
      const caps = Array.isArray(a.capabilities) ? a.capabilities.map(capText).join(", ") : "–";
      return el("tr", {
        class: `agent-row${a.status === "R" ? " is-revoked" : ""}`,
        "data-agent-id": a.agent_id || "",
        "data-serial": a.serial_number,
      },
      el("td", {}, a.agent_id || a.common_name),
      el("td", { class: "mono", title: a.serial_number }, a.serial_number.slice(0, 16) + "…"),
      el("td", {}, caps),
      el("td", {}, detail.mode || "–"),
      el("td", {}, fmtTime(a.not_after)),
      el("td", { title: `delegation ends ${fmtTime(ends)}${detail.delegation_ends ? "" : " (certificate notAfter)"}` },
        a.status === "R" ? "–" : fmtDuration(left) + (detail.delegation_ends ? "" : auditNote)),
      el("td", { class: "agent-status" }, statusBadge(a)));
    });
    return el("table", { class: "agents" },
      el("thead", {}, el("tr", {},
        ...["agent", "serial", "capabilities", "mode", "expires", "delegation left", "status"].map((h) => el("th", {}, h)))),
      el("tbody", {}, ...rows));
  }

  function capText(c) {
    if (c && typeof c === "object") {
      const scheme = c.scheme_id ?? c.scheme ?? "";
      const cap = c.capability_id ?? c.capability ?? "";
      if (scheme || cap) return `${scheme}:${cap}`;
      return JSON.stringify(c);
    }
    return String(c);
  }

  $("people-filter").addEventListener("input", () => { state.peoplePage = 0; renderPeople(); });
  $("people-prev").addEventListener("click", () => { state.peoplePage--; renderPeople(); });
  $("people-next").addEventListener("click", () => { state.peoplePage++; renderPeople(); });
  $("refresh").addEventListener("click", () => { refreshData(); refreshCrl(); loadAuditPage(); });

  // ---- revocation with cascade preview -------------------------------------

  function openRevoke(person) {
    const live = liveAgents(person);
    state.revoking = person;
    setText("revoke-cn", person.common_name);
    setText("revoke-serial", `serial ${person.serial_number}`);
    setText("revoke-count", live.length);
    $("revoke-agents").replaceChildren(...live.map((a) =>
      el("li", {}, `${a.agent_id || a.common_name} (expires ${fmtTime(a.not_after)})`)));
    setText("revoke-error", "");
    $("revoke-confirm").disabled = false;
    $("revoke-dialog").showModal();
  }

  function closeRevoke() {
    state.revoking = null;
    if ($("revoke-dialog").open) $("revoke-dialog").close();
  }

  $("revoke-cancel").addEventListener("click", closeRevoke);
  $("revoke-dialog").addEventListener("close", () => { state.revoking = null; });

  $("revoke-confirm").addEventListener("click", async () => {
    const p = state.revoking;
    if (!p) return;
    const preview = liveAgents(p).length;
    $("revoke-confirm").disabled = true;
    const path = `/api/v1/cert/${encodeURIComponent(p.ca)}/${encodeURIComponent(p.serial_number)}/revoke`;
    const r = await api(path, { method: "POST", body: { reason: $("revoke-reason").value } });
    if (!r.ok) {
      $("revoke-confirm").disabled = false;
      return setText("revoke-error", errorText(r));
    }
    closeRevoke();
    const n = r.body.cascade_count;
    const more = n !== preview ? ` (the preview counted ${preview}: the list had changed)` : "";
    notice(`${p.common_name} revoked${r.body.already_revoked ? " (it already was)" : ""}; ${n} agent certificate(s) revoked with it${more}.`);
    await Promise.all([refreshData(), refreshCrl(), loadAuditPage()]);
  });

  // ---- refusals per principal ----------------------------------------------

  async function loadRefusals() {
    const body = $("refusals").tBodies[0];
    const r = await api(`/api/v1/audit?${new URLSearchParams({ event: "refuse", limit: AUDIT_SCAN })}`);
    auditAvailability(r);
    if (!r.ok) {
      body.replaceChildren();
      return setText("refusals-state", auditUnavailableText());
    }
    const by = new Map();
    for (const ev of r.body.events || []) {
      const uid = ev.principal_uid || "";
      if (!by.has(uid)) by.set(uid, { uid, count: 0, reasons: new Map(), last: "" });
      const g = by.get(uid);
      g.count++;
      const key = (ev.detail && ev.detail.error) || "?";
      g.reasons.set(key, (g.reasons.get(key) || 0) + 1);
      if (String(ev.at) > g.last) g.last = String(ev.at);
    }
    const groups = [...by.values()].sort((a, b) => b.count - a.count);
    body.replaceChildren(...groups.map((g) => el("tr", {},
      el("td", { title: g.uid }, principalLabel(g.uid)),
      el("td", { class: "num" }, g.count),
      el("td", {}, el("ul", { class: "reasons" },
        ...[...g.reasons.entries()].sort((a, b) => b[1] - a[1]).map(([k, n]) => el("li", {}, el("code", {}, k), ` × ${n}`)))),
      el("td", {}, fmtTime(g.last)))));
    const n = (r.body.events || []).length;
    setText("refusals-state", n === 0 ? "No refusals recorded." : `${n} refusal(s) among the latest ${AUDIT_SCAN} refuse events.`);
  }

  // ---- audit log -------------------------------------------------------------

  function auditQuery() {
    const q = new URLSearchParams();
    const add = (k, v) => { if (v) q.set(k, v); };
    add("principal", $("audit-principal").value.trim());
    add("agent", $("audit-agent").value.trim());
    add("event", $("audit-event").value);
    // datetime-local is the browser's local time; the API takes RFC 3339.
    const when = (id) => {
      const v = $(id).value;
      if (!v) return "";
      const d = new Date(v);
      return Number.isNaN(d.getTime()) ? "" : d.toISOString();
    };
    add("since", when("audit-since"));
    add("until", when("audit-until"));
    q.set("limit", AUDIT_PAGE);
    q.set("offset", state.auditOffset);
    return q;
  }

  async function loadAuditPage() {
    const body = $("audit").tBodies[0];
    const r = await api(`/api/v1/audit?${auditQuery()}`);
    auditAvailability(r);
    if (!r.ok) {
      body.replaceChildren();
      setText("audit-state", state.audit === "error" ? `${auditUnavailableText()} (${errorText(r)})` : auditUnavailableText());
      $("audit-prev").disabled = true;
      $("audit-next").disabled = true;
      setText("audit-page", "");
      return;
    }
    const events = r.body.events || [];
    body.replaceChildren(...events.map((ev) => el("tr", { class: `ev-${String(ev.event || "").replace(/[^a-z_]/g, "")}` },
      el("td", { class: "nowrap" }, fmtTime(ev.at)),
      el("td", {}, ev.event),
      el("td", {}, ev.actor),
      el("td", { title: ev.principal_uid || "" }, ev.principal_uid ? principalLabel(ev.principal_uid) : ""),
      el("td", {}, ev.agent_id || ""),
      el("td", { class: "mono", title: ev.serial || "" }, ev.serial ? `${ev.ca || ""} ${String(ev.serial).slice(0, 12)}…` : ""),
      el("td", { class: "detail" }, ev.detail ? JSON.stringify(ev.detail) : ""))));
    setText("audit-state", events.length === 0 ? "No events match." : "");
    setText("audit-page", events.length ? `events ${state.auditOffset + 1}–${state.auditOffset + events.length}` : "");
    $("audit-prev").disabled = state.auditOffset === 0;
    $("audit-next").disabled = events.length < AUDIT_PAGE;
  }

  $("audit-form").addEventListener("submit", (ev) => { ev.preventDefault(); state.auditOffset = 0; loadAuditPage(); });
  $("audit-prev").addEventListener("click", () => { state.auditOffset = Math.max(0, state.auditOffset - AUDIT_PAGE); loadAuditPage(); });
  $("audit-next").addEventListener("click", () => { state.auditOffset += AUDIT_PAGE; loadAuditPage(); });

  // ---- CRL (minimal DER reading) ----------------------------------------------

  /** One DER TLV at `pos`: tag, content start and end. Definite lengths only. */
  function tlv(buf, pos, end) {
    if (pos + 2 > end) throw new Error("truncated DER");
    const tag = buf[pos];
    let len = buf[pos + 1];
    let start = pos + 2;
    if (len & 0x80) {
      const n = len & 0x7f;
      if (n < 1 || n > 4) throw new Error("unsupported DER length");
      len = 0;
      for (let i = 0; i < n; i++) len = len * 256 + buf[start + i];
      start += n;
    }
    if (start + len > end) throw new Error("truncated DER");
    return { tag, start, end: start + len };
  }

  function kids(buf, node) {
    const out = [];
    for (let p = node.start; p < node.end;) {
      const k = tlv(buf, p, node.end);
      out.push(k);
      p = k.end;
    }
    return out;
  }

  function derTime(buf, node) {
    const s = String.fromCharCode(...buf.subarray(node.start, node.end));
    let m;
    if (node.tag === 0x17 && (m = /^(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})Z$/.exec(s))) {
      const y = Number(m[1]);
      return `${y < 50 ? 2000 + y : 1900 + y}-${m[2]}-${m[3]}T${m[4]}:${m[5]}:${m[6]}Z`;
    }
    if (node.tag === 0x18 && (m = /^(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})Z$/.exec(s))) {
      return `${m[1]}-${m[2]}-${m[3]}T${m[4]}:${m[5]}:${m[6]}Z`;
    }
    throw new Error("unexpected time in CRL");
  }

  const isTime = (n) => n && (n.tag === 0x17 || n.tag === 0x18);
  const CRL_NUMBER_OID = [0x55, 0x1d, 0x14]; // 2.5.29.20

  /** thisUpdate, nextUpdate, the number of entries and the CRL number. */
  function parseCrl(buf) {
    const outer = tlv(buf, 0, buf.length);
    const tbs = kids(buf, outer)[0];
    const f = kids(buf, tbs);
    let i = 0;
    if (f[i] && f[i].tag === 0x02) i++; // version
    i += 2; // signature algorithm, issuer
    if (!isTime(f[i])) throw new Error("CRL without thisUpdate");
    const out = { thisUpdate: derTime(buf, f[i++]), nextUpdate: null, entries: 0, number: null };
    if (isTime(f[i])) out.nextUpdate = derTime(buf, f[i++]);
    if (f[i] && f[i].tag === 0x30) out.entries = kids(buf, f[i++]).length;
    if (f[i] && f[i].tag === 0xa0) {
      for (const ext of kids(buf, kids(buf, f[i])[0])) {
        const [oid, ...rest] = kids(buf, ext);
        const o = buf.subarray(oid.start, oid.end);
        if (o.length === 3 && CRL_NUMBER_OID.every((b, j) => o[j] === b)) {
          const octets = rest[rest.length - 1];
          const int = tlv(buf, octets.start, octets.end);
          let n = 0n;
          for (let j = int.start; j < int.end; j++) n = n * 256n + BigInt(buf[j]);
          out.number = n.toString();
        }
      }
    }
    return out;
  }

  async function refreshCrl() {
    try {
      const r = await fetch("/api/v1/crl/people", { cache: "no-store", credentials: "same-origin" });
      if (!r.ok) throw new Error(`GET /api/v1/crl/people: ${r.status}`);
      const crl = parseCrl(new Uint8Array(await r.arrayBuffer()));
      setText("crl-this", fmtTime(crl.thisUpdate));
      setText("crl-next", crl.nextUpdate ? fmtTime(crl.nextUpdate) : "–");
      setText("crl-number", crl.number ?? "–");
      setText("crl-entries", crl.entries);
      setText("crl-error", "");
    } catch (e) {
      setText("crl-error", `CRL: ${e.message}`);
    }
  }

  // ---- metrics and the rate chart ---------------------------------------------

  /** Prometheus text → [{name, labels, value}] (samples only). */
  function parseMetrics(text) {
    const out = [];
    for (const line of text.split("\n")) {
      if (!line || line[0] === "#") continue;
      const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
      if (!m) continue;
      const labels = {};
      for (const l of (m[2] || "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
      out.push({ name: m[1], labels, value: Number(m[3]) });
    }
    return out;
  }

  function sumOf(samples, name, pred) {
    return samples.filter((s) => s.name === name && (!pred || pred(s.labels))).reduce((a, s) => a + s.value, 0);
  }

  /** Refusals are every rejected request but a path or method that does
   *  not exist (a probe for routes, or this page asking for an audit log the
   *  server does not have). */
  const isRefusal = (l) => l.reason !== "not_found" && l.reason !== "method_not_allowed";

  function setupChart() {
    if (state.chart || typeof uPlot === "undefined") {
      if (typeof uPlot === "undefined") {
        $("rates-chart").replaceChildren(el("p", { class: "muted" },
          "Chart library not bundled (this binary was built without npm); the rates are below."));
      }
      return;
    }
    const width = Math.max(320, $("rates-chart").clientWidth || 600);
    state.chart = new uPlot({
      width, height: 220,
      series: [
        {},
        { label: "people issued/s", stroke: "#2f6fde", width: 2 },
        { label: "agents issued/s", stroke: "#1a9e55", width: 2 },
        { label: "refused/s", stroke: "#d03b3b", width: 2 },
      ],
      // Times in UTC, like every other time on the page.
      axes: [{ values: (u, splits) => splits.map((t) => new Date(t * 1000).toISOString().slice(11, 19)) }, { size: 50 }],
      scales: {
        // The last CHART_POINTS polls, even while there are only a few.
        x: { time: true, range: (u, min, max) => [max - (CHART_POINTS * METRICS_EVERY_MS) / 1000, max] },
        y: { range: (u, min, max) => [0, Math.max(1, max)] },
      },
    }, state.series, $("rates-chart"));
  }

  async function pollMetrics() {
    let text;
    try {
      const r = await fetch("/metrics", { cache: "no-store" });
      if (!r.ok) throw new Error(`GET /metrics: ${r.status}`);
      text = await r.text();
      setText("rates-error", "");
    } catch (e) {
      return setText("rates-error", e.message);
    }
    const s = parseMetrics(text);
    const now = Date.now() / 1000;
    const cur = {
      t: now,
      people: sumOf(s, "warrant_certs_issued_total", (l) => l.profile !== "agent-proxy"),
      agents: sumOf(s, "warrant_certs_issued_total", (l) => l.profile === "agent-proxy"),
      refused: sumOf(s, "warrant_rejected_requests_total", isRefusal),
      ocsp: sumOf(s, "warrant_http_requests_total", (l) => (l.route || "").startsWith("/ocsp")),
    };
    const ocspByStatus = new Map();
    for (const x of s) {
      if (x.name === "warrant_http_requests_total" && (x.labels.route || "").startsWith("/ocsp")) {
        ocspByStatus.set(x.labels.status, (ocspByStatus.get(x.labels.status) || 0) + x.value);
      }
    }
    setText("ocsp-total", cur.ocsp);
    setText("ocsp-status", ocspByStatus.size ? [...ocspByStatus.entries()].map(([k, v]) => `${k}: ${v}`).join(", ") : "none yet");
    const prev = state.lastMetrics;
    state.lastMetrics = cur;
    if (!prev) return;
    const dt = cur.t - prev.t;
    if (dt <= 0) return;
    // A counter that went down means the server restarted: count from zero.
    const rate = (k) => Math.max(0, cur[k] >= prev[k] ? cur[k] - prev[k] : cur[k]) / dt;
    const point = [Math.round(now), rate("people"), rate("agents"), rate("refused")];
    point.forEach((v, j) => {
      state.series[j].push(v);
      if (state.series[j].length > CHART_POINTS) state.series[j].shift();
    });
    setText("ocsp-rate", `${fmtRate(rate("ocsp"))}/s`);
    const reasons = s.filter((x) => x.name === "warrant_rejected_requests_total" && isRefusal(x.labels) && x.value > 0)
      .sort((a, b) => b.value - a.value).slice(0, 5).map((x) => `${x.labels.reason} ${x.value}`);
    setText("rates-figures",
      `now: people ${fmtRate(point[1])}/s · agents ${fmtRate(point[2])}/s · refused ${fmtRate(point[3])}/s. ` +
      `Since start: ${cur.people + cur.agents} issued, ${cur.refused} refused` +
      (reasons.length ? ` (${reasons.join(", ")})` : "") + ".");
    if (state.chart) state.chart.setData(state.series);
  }

  window.addEventListener("resize", () => {
    if (state.chart) state.chart.setSize({ width: Math.max(320, $("rates-chart").clientWidth), height: 220 });
  });

  start();
})();
