//! `warrant bench soak`: the fleet's day, compressed. An open arrival stream
//! of agent issuances at the fleet's rate (500k agents and people, one agent
//! certificate per agent every 10 min ≈ 4,167/s), with agent certificates
//! that live a minute and a server that prunes them 30 s after expiry, so
//! the whole life cycle of a row (insert, expire, prune) turns over many
//! times within the run. What must hold: no errors, a low tail latency, and
//! memory and DB size that level off instead of growing with the run.
//!
//! The evaluation (intervals, growth, pass/fail, CSV) is pure and tested;
//! the run, the scrapes and the files are the IO around it.

use crate::args::{RunArgs, Scenario};
use crate::scenario::BenchSource;
use crate::server::{ExtraConfig, ServerUnderTest};
use crate::{chart, db, host, http, setup};
use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, ValueEnum};
use gust_engine::{
    ErrorClass, LoadModel, Request, RequestSource, ResponseInterest, ResponseView, RunEvent,
    RunSpec, WorkerSource,
};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The pass thresholds (issue #32).
pub const P99_LIMIT_MS: f64 = 50.0;
pub const GROWTH_LIMIT: f64 = 0.05;
/// The server's counter of pruned certificate rows.
pub const PRUNED_METRIC: &str = "warrant_retention_pruned_total";
pub const ARCHIVED_METRIC: &str = "warrant_retention_archived_total";

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CertDer {
    Keep,
    Drop,
}

impl CertDer {
    fn as_str(self) -> &'static str {
        match self {
            CertDer::Keep => "keep",
            CertDer::Drop => "drop",
        }
    }
}

/// The fleet day compressed (see the crate README).
#[derive(Args, Debug, Clone, Serialize)]
pub struct SoakArgs {
    /// Agent issuances per second (open model: arrivals do not wait for answers).
    #[arg(long, default_value_t = 4167.0)]
    pub rate: f64,
    /// Measured window.
    #[arg(long, default_value = "10m", value_parser = crate::args::parse_duration)]
    #[serde(serialize_with = "secs")]
    pub duration: Duration,
    /// Agents (agent i belongs to user i mod users): the reference's 10 per person.
    #[arg(long, default_value_t = 10_000)]
    pub agents: usize,
    /// People; setup issues one person certificate each.
    #[arg(long, default_value_t = 1_000)]
    pub users: usize,
    /// Requested lifetime of each DA, hence of each agent certificate.
    #[arg(long, default_value = "60s", value_parser = crate::args::parse_duration)]
    #[serde(serialize_with = "secs")]
    pub cert_lifetime: Duration,
    /// The server's retention.expired_grace (pruner interval 1 s).
    #[arg(long, default_value = "30s", value_parser = crate::args::parse_duration)]
    #[serde(serialize_with = "secs")]
    pub retention_grace: Duration,
    /// The server's storage.agent_cert_der.
    #[arg(long, value_enum, default_value = "drop")]
    pub agent_cert_der: CertDer,
    /// One sample (and one printed line) per interval; whole seconds.
    #[arg(long, default_value = "10s", value_parser = crate::args::parse_duration)]
    #[serde(serialize_with = "secs")]
    pub report_interval: Duration,
    /// Left out of the p99 check (connections, caches, first commits).
    #[arg(long, default_value = "30s", value_parser = crate::args::parse_duration)]
    #[serde(serialize_with = "secs")]
    pub warmup: Duration,
    /// SQLite path or postgres:// / mysql:// / mariadb:// URL (default: temp SQLite).
    #[arg(long)]
    pub db: Option<String>,
    /// record_buffer.max_pending of the server under test.
    #[arg(long)]
    pub maxpending: Option<usize>,
    /// Run the server as a child process, so RSS is the server's alone.
    #[arg(long)]
    pub server_process: bool,
    /// Gust worker threads (default: available cores).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Where soak.json, soak.csv and soak.svg go (default results/soak-<timestamp>/).
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
    /// The effective server config and setup progress.
    #[arg(short = 'v', long = "v")]
    pub verbose: bool,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// One report interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Sample {
    /// End of the interval, seconds from the start of the load.
    pub t_s: f64,
    pub interval_s: f64,
    pub certs: u64,
    pub certs_per_s: f64,
    /// Failures in the interval: HTTP status, or `0` for no response.
    pub errors: BTreeMap<String, u64>,
    /// Corrected latency (from the intended send time) of this interval.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub rss_bytes: Option<u64>,
    pub db_bytes: Option<u64>,
    pub live_rows: Option<u64>,
    /// The server's pruned-rows counter (None: not exported).
    pub pruned_total: Option<u64>,
    pub archived_total: Option<u64>,
}

/// One pass/fail criterion and its figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    pub name: String,
    pub pass: bool,
    pub detail: String,
}

/// Growth of a series over the last third of the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Growth {
    /// The value at the start of the last third (the last sample at or
    /// before 2/3 of the run).
    pub base: u64,
    /// The highest sample within the last third.
    pub peak: u64,
    /// (peak − base) / base.
    pub ratio: f64,
}

/// Growth of `values` (one per sample at times `t`) over the last third of a
/// run lasting `duration_s`: the highest value after 2/3 of the run against
/// the value at 2/3 (the last sample at or before it). Max-against-start,
/// not a fit: a leak or an unpruned table that rises at any point of the
/// last third fails, and a series that only wobbles around a plateau passes
/// as long as no wobble tops 5 %. None when the series lacks a base or a
/// sample after it, or the base is 0.
pub fn last_third_growth(t: &[f64], values: &[Option<u64>], duration_s: f64) -> Option<Growth> {
    let cut = duration_s * 2.0 / 3.0;
    let pairs = t.iter().zip(values).filter_map(|(t, v)| Some((*t, (*v)?)));
    let mut base = None;
    let mut peak: Option<u64> = None;
    for (ti, v) in pairs {
        if ti <= cut + 1e-9 {
            base = Some(v);
        } else {
            peak = Some(peak.map_or(v, |p| p.max(v)));
        }
    }
    let (base, peak) = (base.filter(|b| *b > 0)?, peak?);
    Some(Growth {
        base,
        peak,
        ratio: (peak as f64 - base as f64) / base as f64,
    })
}

fn growth_check(name: &str, g: Option<Growth>) -> Check {
    match g {
        Some(g) => Check {
            name: name.into(),
            pass: g.ratio <= GROWTH_LIMIT,
            detail: format!(
                "{:+.1} % over the last third (peak {} vs {} at its start; limit +{:.0} %)",
                g.ratio * 100.0,
                g.peak,
                g.base,
                GROWTH_LIMIT * 100.0
            ),
        },
        None => Check {
            name: name.into(),
            pass: false,
            detail: "not measured: no sample at the start of the last third or none after it"
                .into(),
        },
    }
}

/// The criteria of issue #32 over a finished run.
pub fn evaluate(
    samples: &[Sample],
    duration_s: f64,
    errors: u64,
    dropped: u64,
    p99_after_warmup_ms: Option<f64>,
    warmup_s: f64,
) -> Vec<Check> {
    let t: Vec<f64> = samples.iter().map(|s| s.t_s).collect();
    let rss: Vec<Option<u64>> = samples.iter().map(|s| s.rss_bytes).collect();
    let db: Vec<Option<u64>> = samples.iter().map(|s| s.db_bytes).collect();
    vec![
        Check {
            name: "errors".into(),
            pass: errors == 0 && dropped == 0,
            detail: format!(
                "{errors} failed, {dropped} not sent (the generator fell behind); need 0"
            ),
        },
        match p99_after_warmup_ms {
            Some(p) => Check {
                name: "p99".into(),
                pass: p < P99_LIMIT_MS,
                detail: format!(
                    "corrected p99 {p:.2} ms after a {warmup_s:.0} s warm-up; limit < {P99_LIMIT_MS:.0} ms"
                ),
            },
            None => Check {
                name: "p99".into(),
                pass: false,
                detail: format!("no response after the {warmup_s:.0} s warm-up"),
            },
        },
        growth_check("rss", last_third_growth(&t, &rss, duration_s)),
        growth_check("db_size", last_third_growth(&t, &db, duration_s)),
    ]
}

/// Pruned rows over the run from the samples' counter readings: None when
/// the server never exported the counter.
pub fn pruned_over(samples: &[Sample], before: Option<u64>) -> Option<u64> {
    let last = samples.iter().rev().find_map(|s| s.pruned_total)?;
    Some(last.saturating_sub(before.unwrap_or(0)))
}

/// The sum of a Prometheus counter over all its label sets; None when the
/// exposition has no sample of it.
pub fn parse_counter(text: &str, name: &str) -> Option<u64> {
    let mut found = false;
    let mut sum = 0.0;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        // `name{labels} v` or `name v`, not a longer name sharing the prefix.
        let value = if let Some(labelled) = rest.strip_prefix('{') {
            labelled.split_once('}').map(|(_, v)| v)
        } else {
            rest.strip_prefix(' ')
        };
        if let Some(v) = value.and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok()) {
            found = true;
            sum += v;
        }
    }
    found.then_some(sum.max(0.0) as u64)
}

/// Error counts of one interval: `now − before` per code, zeros left out.
pub fn count_diff(
    before: &BTreeMap<String, u64>,
    now: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    now.iter()
        .filter_map(|(k, v)| {
            let d = v.saturating_sub(before.get(k).copied().unwrap_or(0));
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

fn cell<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// `503:3 0:1` style, which needs no CSV quoting.
fn errors_cell(e: &BTreeMap<String, u64>) -> String {
    e.iter()
        .map(|(k, v)| format!("{k}:{v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

pub const CSV_HEADER: &str = "t_s,interval_s,certs,certs_per_s,errors,p50_ms,p99_ms,rss_bytes,db_bytes,live_rows,pruned_total,archived_total";

/// The samples as CSV (header first; an unknown figure is an empty cell).
pub fn csv(samples: &[Sample]) -> String {
    let mut out = format!("{CSV_HEADER}\n");
    for s in samples {
        out.push_str(&format!(
            "{:.1},{:.1},{},{:.1},{},{:.3},{:.3},{},{},{},{},{}\n",
            s.t_s,
            s.interval_s,
            s.certs,
            s.certs_per_s,
            errors_cell(&s.errors),
            s.p50_ms,
            s.p99_ms,
            cell(s.rss_bytes),
            cell(s.db_bytes),
            cell(s.live_rows),
            cell(s.pruned_total),
            cell(s.archived_total),
        ));
    }
    out
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// Whole seconds grouped into report intervals: seconds
/// `[k·n, (k+1)·n)` make interval k.
#[derive(Default)]
pub struct IntervalAcc {
    seconds: u64,
    certs: u64,
    hist: Option<Histogram<u64>>,
}

impl IntervalAcc {
    pub fn add(&mut self, successes: u64, latency: &Histogram<u64>) {
        self.seconds += 1;
        self.certs += successes;
        match &mut self.hist {
            Some(h) => {
                // Both come from the engine with the same bounds; a failed
                // add only loses this second's percentiles, not the run.
                let _ = h.add(latency);
            }
            None => self.hist = Some(latency.clone()),
        }
    }

    /// The interval's rate and latency; the caller fills in the scrapes.
    pub fn finish(&mut self, t_s: f64) -> Option<Sample> {
        if self.seconds == 0 {
            return None;
        }
        let interval_s = self.seconds as f64;
        let (p50, p99) = self.hist.as_ref().map_or((0, 0), |h| {
            if h.is_empty() {
                (0, 0)
            } else {
                (h.value_at_quantile(0.5), h.value_at_quantile(0.99))
            }
        });
        let s = Sample {
            t_s,
            interval_s,
            certs: self.certs,
            certs_per_s: self.certs as f64 / interval_s,
            p50_ms: ms(p50),
            p99_ms: ms(p99),
            ..Sample::default()
        };
        *self = IntervalAcc::default();
        Some(s)
    }
}

/// Non-200 answers and transport failures by code, counted by the workers
/// (Gust's per-second samples carry error classes but not status codes).
#[derive(Default)]
pub struct ErrorCounters {
    /// HTTP status 0..=599 (0: no response).
    by_status: Vec<AtomicU64>,
}

impl ErrorCounters {
    pub fn new() -> Self {
        Self {
            by_status: (0..600).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub fn record(&self, status: u16) {
        if let Some(c) = self.by_status.get(usize::from(status)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.by_status
            .iter()
            .enumerate()
            .filter_map(|(code, n)| {
                let n = n.load(Ordering::Relaxed);
                (n > 0).then(|| (code.to_string(), n))
            })
            .collect()
    }
}

/// The bench source, with every answer other than 200 counted by code.
struct Counting {
    inner: BenchSource,
    errors: Arc<ErrorCounters>,
}

struct CountingWorker {
    inner: Box<dyn WorkerSource>,
    errors: Arc<ErrorCounters>,
}

impl RequestSource for Counting {
    fn for_worker(&self, worker: usize) -> Box<dyn WorkerSource> {
        Box::new(CountingWorker {
            inner: self.inner.for_worker(worker),
            errors: self.errors.clone(),
        })
    }
}

impl WorkerSource for CountingWorker {
    fn next_request(&mut self, seq: u64) -> Request {
        self.inner.next_request(seq)
    }
    fn interest(&self) -> ResponseInterest {
        ResponseInterest::Head
    }
    fn on_response(&mut self, _seq: u64, r: &ResponseView<'_>) {
        if r.status != 200 {
            self.errors.record(r.status);
        }
    }
    fn on_failure(&mut self, _seq: u64, _class: ErrorClass) {
        self.errors.record(0);
    }
}

/// The whole soak report (`soak.json`).
#[derive(Debug, Serialize)]
pub struct SoakReport {
    pub config: SoakArgs,
    /// Why this mix (README).
    pub mix: String,
    pub server: String,
    pub host: host::HostFacts,
    pub samples: Vec<Sample>,
    pub total_certs: u64,
    pub total_failures: u64,
    pub dropped: u64,
    pub errors_by_code: BTreeMap<String, u64>,
    /// Gust's classes of the failures without a response (code 0):
    /// timeout, reset, cancelled at the end of the grace period, …
    pub transport_errors: BTreeMap<String, u64>,
    pub p99_after_warmup_ms: Option<f64>,
    /// None: the server exports no pruned-rows counter.
    pub pruned_rows: Option<u64>,
    pub checks: Vec<Check>,
    pub pass: bool,
}

/// Seconds a DA nonce stays in the server's ledger by default: the
/// timestamp skew (60 s) plus the retention buffer (180 s), plus the
/// ledger's 5 s pruning period.
const NONCE_LEDGER_SECS: f64 = 245.0;

/// The ledger size a rate needs with a quarter to spare: 1.28M at 4,167/s,
/// past the 1M default (which a fleet at that rate must raise too; see
/// docs/configuration.md). Never below the default.
pub fn nonce_budget(rate: f64) -> u64 {
    ((rate * NONCE_LEDGER_SECS * 1.25).ceil() as u64).max(1_000_000)
}

/// The server settings soak adds: retention compressed to the run, a nonce
/// ledger sized for the rate ([`nonce_budget`]) (the
/// recent-certificates window's grace too: it holds a certificate until
/// `notAfter` + `engine.grace`, and at the default 300 s a 60 s certificate
/// at 4,167/s would need 1.5M places, past `engine.max_certs`), and an
/// idle timeout longer than the run. The load keeps up to 1,024 pooled
/// connections and reuses some less often than the default 30 s idle
/// timeout; a request written on a connection the server is closing that
/// instant ends as a reset, a race of the client's pool and not a refusal
/// of the CA (the T3 suite test shows the same).
pub fn extra_config(args: &SoakArgs) -> ExtraConfig {
    ExtraConfig {
        http: format!(
            "idle_timeout = \"{}s\"\n",
            args.duration.as_secs().saturating_add(120)
        ),
        tables: format!(
            "[retention]\nexpired_grace = \"{grace}ms\"\ninterval = \"1s\"\n\
             [engine]\ngrace = \"{grace}ms\"\nmax_da_nonces = {nonces}\nmax_nonces = {nonces}\n\
             [storage]\nagent_cert_der = \"{}\"\n",
            args.agent_cert_der.as_str(),
            grace = args.retention_grace.as_millis(),
            nonces = nonce_budget(args.rate),
        ),
    }
}

pub(crate) fn base_run_args() -> Result<RunArgs> {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }
    Cli::try_parse_from(["bench"])
        .map(|c| c.run)
        .map_err(|e| anyhow!("{e}"))
}

fn check_args(a: &SoakArgs) -> Result<()> {
    if !(a.rate > 0.0 && a.rate.is_finite()) {
        bail!("rate: must be a positive number");
    }
    if a.agents == 0 || a.users == 0 {
        bail!("agents/users: must be at least 1");
    }
    if a.duration.is_zero() {
        bail!("duration: must be positive");
    }
    if a.report_interval.as_secs() == 0 || a.report_interval.subsec_nanos() != 0 {
        bail!("report-interval: whole seconds, at least 1s");
    }
    if a.cert_lifetime.as_secs() == 0 || a.cert_lifetime.subsec_nanos() != 0 {
        bail!("cert-lifetime: whole seconds, at least 1s");
    }
    if a.warmup >= a.duration {
        bail!("warmup: must be shorter than duration");
    }
    if let Some(db) = &a.db {
        warrant_store::parse_dsn(db).map_err(|e| anyhow!("db: {e}"))?;
    }
    crate::server::check_server_config("", a.maxpending)?;
    Ok(())
}

pub(crate) fn timestamp_dir_name(prefix: &str) -> String {
    let now = aic::time::format_rfc3339(warrant_server::clock::unix_now());
    format!("{prefix}-{}", now.replace(['-', ':'], ""))
}

pub const MIX: &str = "people : agents = 1 : 10 (the reference's 50k people × 10 agents); \
    defaults 1,000 people and 10,000 agents, because setup issues one person certificate \
    per person through the API before the window and the ratio, not the head count, shapes the load";

/// `1 : 10` for the reference mix; the ratio of any other.
pub fn mix_ratio(users: usize, agents: usize) -> String {
    if users > 0 && agents.is_multiple_of(users) {
        format!("1 : {}", agents / users)
    } else {
        format!("1 : {:.2}", agents as f64 / users.max(1) as f64)
    }
}

impl SoakArgs {
    /// Every flag at its default (the suite's T6 starts from these).
    pub fn defaults() -> SoakArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            soak: SoakArgs,
        }
        Cli::parse_from(["soak"]).soak
    }
}

/// `warrant bench soak`: 0 pass, 1 fail, 2 could not run.
pub(crate) fn run_soak(args: SoakArgs) -> ExitCode {
    match soak(&args) {
        Ok(r) if r.pass => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn scrape_counters(addr: std::net::SocketAddr) -> (Option<u64>, Option<u64>) {
    match http::request(addr, "GET", "/metrics", None, "") {
        Ok(r) if r.status == 200 => {
            let text = String::from_utf8_lossy(&r.body);
            (
                parse_counter(&text, PRUNED_METRIC),
                parse_counter(&text, ARCHIVED_METRIC),
            )
        }
        _ => (None, None),
    }
}

fn print_sample(s: &Sample) {
    println!(
        "{:6.0}s {:7.0} certs/s  errors {:<12} p50 {:6.2} ms p99 {:7.2} ms  rss {:>6} MiB  db {:>7} MiB  live {:>8}  pruned {:>9}",
        s.t_s,
        s.certs_per_s,
        if s.errors.is_empty() {
            "0".to_string()
        } else {
            errors_cell(&s.errors)
        },
        s.p50_ms,
        s.p99_ms,
        s.rss_bytes.map_or("?".into(), |b| (b >> 20).to_string()),
        s.db_bytes
            .map_or("?".into(), |b| format!("{:.1}", b as f64 / 1048576.0)),
        cell(s.live_rows),
        s.pruned_total.map_or("-".into(), |p| p.to_string()),
    );
}

pub(crate) fn soak(args: &SoakArgs) -> Result<SoakReport> {
    check_args(args)?;
    let out_dir = args
        .out_dir
        .clone()
        .unwrap_or_else(|| Path::new("results").join(timestamp_dir_name("soak")));
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let mut run = base_run_args()?;
    run.scenario = Scenario::Aic;
    run.agents = args.agents;
    run.users = Some(args.users);
    run.db = args.db.clone();
    run.maxpending = args.maxpending;
    run.server_process = args.server_process;
    run.duration = args.duration;
    run.workers = args.workers;
    run.verbose = args.verbose;
    // A missing MySQL/PostgreSQL database is created (or named, with the
    // admin SQL), as for a single run.
    if let Some(db) = &args.db {
        crate::dbadmin::ensure_database(db)?;
    }
    let sut = ServerUnderTest::start_with(&run, &extra_config(args))
        .context("starting the server under test")?;
    let result = soak_with(args, &run, &sut, &out_dir);
    sut.shutdown();
    result
}

fn soak_with(
    args: &SoakArgs,
    run: &RunArgs,
    sut: &ServerUnderTest,
    out_dir: &Path,
) -> Result<SoakReport> {
    let host_dir = sut.data_dir.clone().unwrap_or_else(std::env::temp_dir);
    let host = host::collect(&host_dir);
    println!("{}", sut.describe());
    print!("{}", host.text());
    println!(
        "soak: {:.0}/s agent issuances for {:.0} s · {} people, {} agents (mix {}) · cert lifetime {} s · retention grace {} s · agent_cert_der {} · warm-up {} s",
        args.rate,
        args.duration.as_secs_f64(),
        args.users,
        args.agents,
        mix_ratio(args.users, args.agents),
        args.cert_lifetime.as_secs(),
        args.retention_grace.as_secs_f64(),
        args.agent_cert_der.as_str(),
        args.warmup.as_secs_f64(),
    );
    let token = setup::operator_token(sut, run)?;
    let principals = setup::create_principals(sut, &token, args.users, Scenario::Aic, true)?;
    let (pruned_before, _) = scrape_counters(sut.addr);
    let errors = Arc::new(ErrorCounters::new());
    let source = Counting {
        inner: BenchSource::new(run, &sut.base_path, &token, principals, Vec::new())
            .with_da_lifetime(args.cert_lifetime.as_secs() as i64),
        errors: errors.clone(),
    };
    let mut spec = RunSpec::new(
        format!("{}/", sut.url()),
        LoadModel::Open {
            rate: args.rate,
            stages: Vec::new(),
        },
    );
    spec.method = "POST".into();
    spec.duration = Some(args.duration);
    spec.workers = args.workers;
    // At most one request in flight per agent, as in the single run's paced mode.
    spec.max_in_flight = Some(args.agents);
    spec.connections = Some(args.agents.min(1024));
    spec.timeout = Some(Duration::from_secs(30));
    spec.grace = Some(Duration::from_secs(30));
    spec.success_status = Some("200".into());
    let config = spec
        .validate_with_source(Some(Arc::new(source)))
        .map_err(|e| anyhow!("load model: {e}"))?;
    let mut handle = gust_engine::start(config).map_err(|e| anyhow!("starting the load: {e}"))?;
    let mut events = handle
        .take_events()
        .ok_or_else(|| anyhow!("the load engine gave no event stream"))?;
    let per = args.report_interval.as_secs();
    let warmup_s = args.warmup.as_secs();
    let dsn = sut.dsn.clone();
    let addr = sut.addr;
    let rss = || sut.rss_now();
    let db_size = || sut.db_size();
    // Samples are taken on this thread as whole seconds arrive; the engine
    // keeps running on its own threads meanwhile (the event channel is unbounded).
    let mut samples: Vec<Sample> = Vec::new();
    let mut acc = IntervalAcc::default();
    let mut after_warmup: Option<Histogram<u64>> = None;
    let mut errors_before = BTreeMap::new();
    let window_s = args.duration.as_secs_f64().ceil() as u64;
    let mut take = |acc: &mut IntervalAcc, t_s: f64, samples: &mut Vec<Sample>| {
        let Some(mut s) = acc.finish(t_s) else {
            return;
        };
        let now = errors.snapshot();
        s.errors = count_diff(&errors_before, &now);
        errors_before = now;
        s.rss_bytes = rss();
        s.db_bytes = db_size();
        s.live_rows = dsn.as_deref().and_then(|d| {
            db::live_cert_rows(d, warrant_server::clock::unix_now())
                .map_err(|e| eprintln!("live rows: {e:#}"))
                .ok()
        });
        (s.pruned_total, s.archived_total) = scrape_counters(addr);
        print_sample(&s);
        samples.push(s);
    };
    while let Some(ev) = events.blocking_recv() {
        let RunEvent::Second { sample, latency } = ev else {
            continue;
        };
        if sample.second >= warmup_s {
            match &mut after_warmup {
                Some(h) => {
                    let _ = h.add(&*latency);
                }
                None => after_warmup = Some((*latency).clone()),
            }
        }
        // The seconds after the window (answers still arriving in the grace
        // period) count in the totals and the p99 above, but make no sample:
        // a last "interval" of a few stragglers would chart a false drop.
        if sample.second >= window_s {
            continue;
        }
        acc.add(sample.successes, &latency);
        if (sample.second + 1) % per == 0 {
            take(&mut acc, (sample.second + 1) as f64, &mut samples);
        }
    }
    // A window that is not a whole number of intervals ends with a short one.
    take(&mut acc, args.duration.as_secs_f64(), &mut samples);
    let report = handle.wait();
    let p99_after_warmup_ms = after_warmup
        .filter(|h| !h.is_empty())
        .map(|h| ms(h.value_at_quantile(0.99)));
    let errors_by_code = errors.snapshot();
    let duration_s = args.duration.as_secs_f64();
    let checks = evaluate(
        &samples,
        duration_s,
        report.failures,
        report.dropped,
        p99_after_warmup_ms,
        warmup_s as f64,
    );
    let pass = checks.iter().all(|c| c.pass);
    let r = SoakReport {
        config: args.clone(),
        mix: MIX.into(),
        server: sut.describe(),
        host,
        total_certs: report.successes,
        total_failures: report.failures,
        dropped: report.dropped,
        errors_by_code,
        transport_errors: report.errors.clone(),
        p99_after_warmup_ms,
        pruned_rows: pruned_over(&samples, pruned_before),
        samples,
        checks,
        pass,
    };
    write_outputs(&r, out_dir)?;
    print_verdict(&r, out_dir);
    Ok(r)
}

fn write_outputs(r: &SoakReport, dir: &Path) -> Result<()> {
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))
    };
    write(
        "soak.json",
        format!("{}\n", serde_json::to_string_pretty(r)?),
    )?;
    write("soak.csv", csv(&r.samples))?;
    write("soak.svg", chart::soak_svg(&r.samples)?)?;
    Ok(())
}

fn print_verdict(r: &SoakReport, dir: &Path) {
    println!(
        "total: {} certificates, {} failed, {} not sent; errors by code {:?}; without a response {:?}",
        r.total_certs, r.total_failures, r.dropped, r.errors_by_code, r.transport_errors
    );
    match r.pruned_rows {
        Some(n) => println!("pruned: {n} certificate rows during the run"),
        None => println!(
            "pruned: not observed (the server exports no {PRUNED_METRIC}; retention not in this build)"
        ),
    }
    for c in &r.checks {
        println!(
            "{} {:<8} {}",
            if c.pass { "PASS" } else { "FAIL" },
            c.name,
            c.detail
        );
    }
    println!(
        "{}: {}",
        if r.pass { "PASS" } else { "FAIL" },
        dir.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: f64, rss: u64, db: u64) -> Sample {
        Sample {
            t_s: t,
            rss_bytes: Some(rss),
            db_bytes: Some(db),
            ..Sample::default()
        }
    }

    #[test]
    fn growth_compares_the_last_thirds_peak_with_its_start() {
        let t = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0];
        // 2/3 of 60 s is 40 s: base = the 40 s sample, peak over 50..60.
        let v = [
            Some(50),
            Some(90),
            Some(99),
            Some(100),
            Some(104),
            Some(103),
        ];
        let g = last_third_growth(&t, &v, 60.0).unwrap();
        assert_eq!((g.base, g.peak), (100, 104));
        assert!((g.ratio - 0.04).abs() < 1e-12);
        // A decline is negative growth.
        let down = [Some(1), Some(1), Some(1), Some(100), Some(80), Some(90)];
        assert!(last_third_growth(&t, &down, 60.0).unwrap().ratio < 0.0);
        // A missing base falls back to the last known sample before the cut.
        let gap = [Some(1), Some(1), Some(100), None, Some(106), None];
        let g = last_third_growth(&t, &gap, 60.0).unwrap();
        assert_eq!((g.base, g.peak), (100, 106));
        // Nothing after the cut, or a zero base: not measurable.
        assert!(last_third_growth(&t[..4], &v[..4], 60.0).is_none());
        let zero = [None, None, None, Some(0), Some(5), Some(5)];
        assert!(last_third_growth(&t, &zero, 60.0).is_none());
    }

    #[test]
    fn the_verdict_names_each_criterion_with_its_figures() {
        let flat: Vec<Sample> = (1..=9)
            .map(|i| sample(f64::from(i) * 10.0, 1000, 5000))
            .collect();
        let c = evaluate(&flat, 90.0, 0, 0, Some(12.5), 30.0);
        assert!(c.iter().all(|c| c.pass), "{c:?}");
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["errors", "p99", "rss", "db_size"]);
        assert!(c[1].detail.contains("12.50 ms") && c[1].detail.contains("30 s"));

        let mut growing = flat.clone();
        growing[8].db_bytes = Some(5300); // +6 %
        growing[7].rss_bytes = Some(1050); // +5 % exactly passes
        let c = evaluate(&growing, 90.0, 1, 2, Some(50.0), 30.0);
        let pass: Vec<bool> = c.iter().map(|c| c.pass).collect();
        assert_eq!(pass, [false, false, true, false]);
        assert!(c[0].detail.starts_with("1 failed, 2 not sent"));
        assert!(c[3].detail.contains("+6.0 %"), "{}", c[3].detail);
        let c = evaluate(&flat[..3], 90.0, 0, 0, None, 30.0);
        assert!(!c[1].pass && !c[2].pass && !c[3].pass);
    }

    #[test]
    fn counters_are_summed_over_labels_and_absent_is_none() {
        let text = "# TYPE warrant_retention_pruned_total counter\n\
            warrant_retention_pruned_total{ca=\"people\"} 40\n\
            warrant_retention_pruned_total{ca=\"agents\"} 2\n\
            warrant_retention_pruned_total_bogus 7\n\
            warrant_retention_archived_total 5\n";
        assert_eq!(parse_counter(text, PRUNED_METRIC), Some(42));
        assert_eq!(parse_counter(text, ARCHIVED_METRIC), Some(5));
        assert_eq!(
            parse_counter("warrant_commits_total 3\n", PRUNED_METRIC),
            None
        );
        let s = |p: Option<u64>| Sample {
            pruned_total: p,
            ..Sample::default()
        };
        assert_eq!(
            pruned_over(&[s(Some(3)), s(Some(9)), s(None)], Some(1)),
            Some(8)
        );
        assert_eq!(pruned_over(&[s(None)], None), None);
    }

    #[test]
    fn csv_has_one_row_per_sample_and_empty_unknowns() {
        let mut s = sample(10.0, 1 << 20, 4096);
        s.interval_s = 10.0;
        s.certs = 41670;
        s.certs_per_s = 4167.0;
        s.errors = BTreeMap::from([("0".to_string(), 1), ("503".to_string(), 3)]);
        s.p50_ms = 1.25;
        s.p99_ms = 9.5;
        let mut t = s.clone();
        t.rss_bytes = None;
        let text = csv(&[s, t]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], CSV_HEADER);
        assert_eq!(
            lines[1],
            "10.0,10.0,41670,4167.0,0:1 503:3,1.250,9.500,1048576,4096,,,"
        );
        assert_eq!(lines[2].split(',').nth(7), Some(""));
        assert_eq!(lines.len(), 3);
        assert!(lines.iter().all(|l| l.split(',').count() == 12));
    }

    #[test]
    fn error_counts_are_per_interval() {
        let c = ErrorCounters::new();
        c.record(503);
        c.record(0);
        let first = c.snapshot();
        c.record(503);
        c.record(999); // out of range: ignored, not a panic
        let d = count_diff(&first, &c.snapshot());
        assert_eq!(d, BTreeMap::from([("503".to_string(), 1)]));
    }

    #[test]
    fn intervals_merge_their_seconds() {
        let mut h1 = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        let mut h2 = h1.clone();
        for _ in 0..99 {
            h1.record(1_000).unwrap();
        }
        h2.record(80_000).unwrap();
        h2.record(80_000).unwrap();
        let mut acc = IntervalAcc::default();
        acc.add(100, &h1);
        acc.add(300, &h2);
        let s = acc.finish(20.0).unwrap();
        assert_eq!((s.certs, s.interval_s, s.certs_per_s), (400, 2.0, 200.0));
        assert!((s.p50_ms - 1.0).abs() < 0.01, "{}", s.p50_ms);
        assert!((s.p99_ms - 80.0).abs() < 0.1, "{}", s.p99_ms);
        assert!(acc.finish(30.0).is_none(), "the accumulator restarts empty");
    }

    #[test]
    fn the_soak_settings_reach_the_server_config() {
        let mut a = soak_defaults();
        a.retention_grace = Duration::from_millis(2500);
        let text = crate::server::bench_config_toml_with(
            "sqlite://b.db",
            "",
            None,
            warrant_store::Durability::Durable,
            a.agents,
            &extra_config(&a),
        );
        let c = warrant_server::LoadedConfig::from_parts(
            Path::new("."),
            Some(&text),
            &Default::default(),
        )
        .expect("soak config resolves");
        assert_eq!(
            c.config.retention.expired_grace.0,
            Duration::from_millis(2500)
        );
        assert_eq!(c.config.retention.interval.0, Duration::from_secs(1));
        assert_eq!(c.config.engine.grace.0, Duration::from_millis(2500));
        assert_eq!(c.config.engine.max_da_nonces, nonce_budget(4167.0));
        assert_eq!(nonce_budget(4167.0), 1_276_144);
        assert_eq!(nonce_budget(100.0), 1_000_000);
        assert_eq!(c.config.storage.agent_cert_der, "drop");
        assert_eq!(c.config.http.max_connections, 10_064);
        // Ten minutes of run, two more of idle timeout.
        assert_eq!(c.config.http.idle_timeout.0, Duration::from_secs(720));
    }

    fn soak_defaults() -> SoakArgs {
        SoakArgs::defaults()
    }

    #[test]
    fn defaults_are_the_fleet_rate_and_the_reference_mix() {
        let a = soak_defaults();
        assert_eq!(a.rate, 4167.0);
        assert_eq!(a.duration, Duration::from_secs(600));
        assert_eq!((a.users, a.agents), (1_000, 10_000));
        assert_eq!(a.cert_lifetime, Duration::from_secs(60));
        assert_eq!(a.retention_grace, Duration::from_secs(30));
        assert_eq!(a.agent_cert_der, CertDer::Drop);
        assert_eq!(a.report_interval, Duration::from_secs(10));
        assert_eq!(mix_ratio(a.users, a.agents), "1 : 10");
        assert_eq!(mix_ratio(3, 10), "1 : 3.33");
        assert!(check_args(&a).is_ok());
        let mut bad = a.clone();
        bad.report_interval = Duration::from_millis(1500);
        assert!(
            check_args(&bad)
                .unwrap_err()
                .to_string()
                .starts_with("report-interval")
        );
        let mut bad = a;
        bad.warmup = bad.duration;
        assert!(
            check_args(&bad)
                .unwrap_err()
                .to_string()
                .starts_with("warmup")
        );
    }
}
