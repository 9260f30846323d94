//! Driving the Gust run and turning its report plus the server measurements
//! into the reference-compatible JSON (bench.md) and a human text report.

use super::floor::Floor;
use super::scenario::BenchSource;
use super::server::{ServerCounters, ServerUnderTest};
use super::{Keys, Mode, RunArgs, Scenario};
use anyhow::{Result, anyhow};
use gust_engine::{LoadModel, Report, RunEvent, RunSpec, Stage, ThinkTime};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};
use warrant_store::Durability;

pub struct Outcome {
    pub report: Report,
    pub server_cpu_s: Option<f64>,
    /// `server_cpu_s` per kind of server thread (embedded server only).
    pub server_cpu_s_by_thread: Option<BTreeMap<String, f64>>,
    pub timed_out: bool,
}

/// The Gust load model for a mode.
///
/// `random` is the reference's random mode as bench.md words it: each agent
/// waits an exponential think time with mean `interval` between requests. In
/// Gust that is the closed model with [`ThinkTime::Exponential`]: `agents`
/// slots, each sending, then thinking Exp(interval), then sending again. The
/// superposition of the agents' think times is a Poisson-like arrival stream
/// at about agents / (interval + latency) per second, and at most `agents`
/// requests are ever in flight (one per agent).
///
/// A closed slot sends its first request as soon as it is active, so with all
/// slots active at t = 0 every agent would fire at once (that burst is T4's
/// subject, not a steady state). The slots therefore join on the staggered
/// schedule of [`staggered_start`]: agent k's first request comes at the k-th
/// quantile of Exp(interval), which is where a memoryless process that had
/// been running for a long time would put it, so the aggregate rate is
/// agents / interval from the first second on.
pub fn load_model(args: &RunArgs) -> (LoadModel, Option<usize>) {
    match args.mode {
        Mode::Stress if args.qps > 0.0 => (
            LoadModel::Open {
                rate: args.qps,
                stages: Vec::new(),
            },
            Some(args.agents),
        ),
        Mode::Stress => (
            LoadModel::Closed {
                concurrency: args.agents,
                stages: Vec::new(),
                think_time: ThinkTime::None,
            },
            None,
        ),
        Mode::Random => (
            LoadModel::Closed {
                concurrency: args.agents,
                stages: staggered_start(args.agents, args.interval, args.duration),
                think_time: ThinkTime::Exponential {
                    mean: args.interval,
                },
            },
            None,
        ),
    }
}

/// Pieces of the piecewise-linear approximation of agents · (1 − e^(−t/I)).
const STAGGER_PIECES: u32 = 16;

/// Closed-model concurrency stages over exactly `duration` under which the
/// number of active agents follows agents · (1 − e^(−t/interval)): linear
/// between the j/16 quantiles of Exp(interval), the last 1/16 joining over one
/// more mean (the exponential's mean residual life), then all agents until the
/// end. Targets are whole agents (Gust's closed stages count slots).
pub fn staggered_start(agents: usize, interval: Duration, duration: Duration) -> Vec<Stage> {
    let mean = interval.as_secs_f64();
    let end = duration.as_secs_f64();
    let n = agents as f64;
    // (time, active agents) corners of the ramp, ending with everyone active.
    let mut corners: Vec<(f64, f64)> = (1..STAGGER_PIECES)
        .map(|j| {
            let q = f64::from(j) / f64::from(STAGGER_PIECES);
            (-mean * (1.0 - q).ln(), n * q)
        })
        .collect();
    let last = corners.last().map_or(0.0, |c| c.0);
    corners.push((last + mean, n));
    let mut stages = Vec::with_capacity(corners.len() + 1);
    let (mut t0, mut v0) = (0.0, 0.0);
    for (t1, v1) in corners {
        if t0 >= end {
            break;
        }
        // A piece that crosses the end of the run is cut there.
        let (t, v) = if t1 > end {
            (end, v0 + (v1 - v0) * (end - t0) / (t1 - t0))
        } else {
            (t1, v1)
        };
        stages.push(Stage {
            duration: Duration::from_secs_f64(t - t0),
            target: v.round(),
        });
        (t0, v0) = (t, v);
    }
    if t0 < end {
        stages.push(Stage {
            duration: Duration::from_secs_f64(end - t0),
            target: n,
        });
    }
    stages
}

pub fn drive(
    sut: &ServerUnderTest,
    args: &RunArgs,
    source: BenchSource,
    wall_limit: Option<Duration>,
) -> Result<Outcome> {
    let (model, max_in_flight) = load_model(args);
    // Closed stages already span exactly `duration`; Gust takes one or the other.
    let staged = matches!(&model, LoadModel::Closed { stages, .. } if !stages.is_empty());
    let mut spec = RunSpec::new(format!("{}/", sut.url()), model);
    spec.method = "POST".into();
    spec.duration = (!staged).then_some(args.duration);
    spec.workers = args.workers;
    spec.max_in_flight = max_in_flight;
    spec.timeout = Some(Duration::from_secs(30));
    spec.grace = Some(Duration::from_secs(30));
    spec.success_status = Some("200".into());
    if let Some(m) = max_in_flight {
        spec.connections = Some(m.min(1024));
    }
    let config = spec
        .validate_with_source(Some(Arc::new(source)))
        .map_err(|e| anyhow!("load model: {e}"))?;
    let cpu_before = sut.cpu_seconds();
    let mut run = gust_engine::start(config).map_err(|e| anyhow!("starting the load: {e}"))?;
    let events = run.take_events();
    let stop = run.stop_handle();
    let timed_out = Arc::new(std::sync::atomic::AtomicBool::new(false));
    if let Some(limit) = wall_limit {
        let stop = stop.clone();
        let flag = timed_out.clone();
        std::thread::spawn(move || {
            std::thread::sleep(limit);
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
            stop.stop();
        });
    }
    let tty = std::io::stderr().is_terminal();
    let verbose = args.verbose;
    let progress = events.map(|mut rx| {
        std::thread::spawn(move || {
            let mut last_verbose = Instant::now();
            while let Some(ev) = rx.blocking_recv() {
                if let RunEvent::Tick(t) = ev {
                    if tty {
                        eprint!(
                            "\r{:6.1}s  {:8.0} req/s  ok {:>9}  fail {:>7}  in-flight {:>5}  p99 {:>7.1} ms ",
                            t.elapsed_s,
                            t.rps,
                            t.totals.successes,
                            t.totals.failures,
                            t.in_flight,
                            t.service.p99_us as f64 / 1000.0
                        );
                    }
                    if verbose && last_verbose.elapsed() >= Duration::from_secs(5) {
                        last_verbose = Instant::now();
                        eprintln!(
                            "{}progress {:.0}s: ok {} fail {} dropped {} · {:.0} req/s · p50 {:.1} ms p99 {:.1} ms",
                            if tty { "\n" } else { "" },
                            t.elapsed_s,
                            t.totals.successes,
                            t.totals.failures,
                            t.totals.dropped,
                            t.rps,
                            t.service.p50_us as f64 / 1000.0,
                            t.service.p99_us as f64 / 1000.0
                        );
                    }
                }
            }
            if tty {
                eprintln!();
            }
        })
    });
    let report = run.wait();
    let cpu_after = sut.cpu_seconds();
    if let Some(p) = progress {
        let _ = p.join();
    }
    let server_cpu_s = match (cpu_before.total, cpu_after.total) {
        (Some(a), Some(b)) => Some((b - a).max(0.0)),
        _ => None,
    };
    let server_cpu_s_by_thread = match (cpu_before.by_thread, cpu_after.by_thread) {
        (Some(a), Some(b)) => Some(
            b.into_iter()
                .map(|(k, v)| {
                    let before = a.get(&k).copied().unwrap_or(0.0);
                    (k, (v - before).max(0.0))
                })
                .collect(),
        ),
        _ => None,
    };
    Ok(Outcome {
        report,
        server_cpu_s,
        server_cpu_s_by_thread,
        timed_out: timed_out.load(std::sync::atomic::Ordering::Relaxed),
    })
}

/// The window per-second rates are taken over: the configured duration, or
/// the elapsed time when the run was cut short. Answers to requests sent
/// just before the deadline arrive after it; like Gust's own `rps`, they are
/// not allowed to stretch the window (which would understate the rate).
fn rate_window_s(elapsed_s: f64, duration_s: Option<f64>) -> f64 {
    let w = duration_s.map_or(elapsed_s, |d| d.min(elapsed_s));
    if w > 0.0 { w } else { 1.0 }
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Totals {
    pub total_requests: u64,
    pub success: u64,
    pub failures: u64,
    /// HTTP status (as a string key) → count, for every non-200 answer; "0" =
    /// transport errors (connect, reset, timeout…).
    pub error_codes: BTreeMap<String, u64>,
    /// Seconds from the start of the load to the end of the run (the last
    /// answer, or the wall limit). The per-second rates divide by the
    /// measured window instead (see [`rate_window_s`]).
    pub elapsed: f64,
    pub issued_per_sec: f64,
    pub requests_per_sec: f64,
    /// Service latency: from the actual send to the answer (the reference's meaning).
    pub latency_p50_ms: f64,
    pub latency_p95_ms: f64,
    pub latency_p99_ms: f64,
    pub latency_p999_ms: f64,
    pub latency_max_ms: f64,
    /// From the intended send time to the answer: in random mode the end of
    /// the agent's think time (so a busy client, DA signing and connecting
    /// count), in stress mode with qps the open schedule's due time; null in
    /// plain stress mode (agents send back to back: there is no intended time).
    pub corrected_latency_p50_ms: Option<f64>,
    pub corrected_latency_p95_ms: Option<f64>,
    pub corrected_latency_p99_ms: Option<f64>,
    pub corrected_latency_p999_ms: Option<f64>,
    pub corrected_latency_max_ms: Option<f64>,
    /// Requests the open model (stress with qps) could not send because
    /// `agents` were already in flight.
    pub dropped: u64,
    /// Server RSS at the end of the run (Go's MemStats.Alloc has no exact Rust
    /// counterpart; resident memory is what an operator pays for).
    pub mem_alloc_bytes: Option<u64>,
    pub db_size_bytes: Option<u64>,
    /// Certificate rows written during the run, counted in the DB.
    pub certificate_rows: Option<u64>,
    pub server_cpu_seconds: Option<f64>,
    /// Mean time a durable issuance waited for its commit and WAL fsync
    /// (the server's `warrant_durable_wait_seconds`, over the run): the
    /// part of the latency that buffered mode does not wait for. Null when
    /// none waited (buffered) or `/metrics` could not be read.
    pub durable_wait_mean_ms: Option<f64>,
    pub server_peak_rss_bytes: Option<u64>,
    pub cpu_us_per_cert: Option<f64>,
    /// `cpu_us_per_cert` split by kind of server thread (embedded server:
    /// `wsrv` = HTTP and issuance; `sqlite-writer`; `sqlite-syncer` = WAL fsyncs; `sqlite-checkpt` = WAL checkpoints; `sqlx-sqlite`),
    /// null otherwise. Says which part to drive down.
    pub cpu_us_per_cert_by_thread: Option<BTreeMap<String, f64>>,
    pub crypto_floor_us_per_cert: f64,
    pub efficiency: Option<f64>,
    /// CPU seconds of Gust's own threads (the client, incl. DA signing).
    pub client_cpu_seconds: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchReport {
    pub mode: Mode,
    pub scenario: Scenario,
    pub duration: String,
    pub agents: usize,
    pub users: usize,
    pub target_qps: f64,
    pub interval: String,
    pub keys: Keys,
    pub server: &'static str,
    pub server_config: String,
    /// `durable` or `buffered`; null for a `--target` server.
    pub durability: Option<&'static str>,
    pub load_model: String,
    pub timed_out: bool,
    pub totals: Totals,
    pub crypto_floor: Floor,
    /// true/false when the DB was counted and the server answers after its
    /// commit (durable mode, or a `--target` server); null otherwise.
    pub rows_match: Option<bool>,
    pub csr_pool: Option<usize>,
}

fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms % 60_000 == 0 && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

impl BenchReport {
    pub fn build(
        args: &RunArgs,
        users: usize,
        sut: &ServerUnderTest,
        outcome: Outcome,
        floor: Floor,
        before: ServerCounters,
        after: ServerCounters,
    ) -> Result<Self> {
        let r = &outcome.report;
        let mut error_codes = BTreeMap::new();
        for (code, n) in &r.status {
            if code != "200" && *n > 0 {
                error_codes.insert(code.clone(), *n);
            }
        }
        let transport: u64 = r
            .errors
            .iter()
            .filter(|(k, _)| k.as_str() != "cancelled")
            .map(|(_, n)| n)
            .sum();
        if transport > 0 {
            error_codes.insert("0".into(), transport);
        }
        let success = r.successes;
        let total = r.sent;
        let secs = rate_window_s(r.elapsed_s, r.duration_s);
        let cpu_per = outcome
            .server_cpu_s
            .filter(|_| success > 0)
            .map(|c| c * 1e6 / success as f64);
        // Gust measures `latency` from the intended send: the open schedule's
        // due time, or in the closed model the moment the slot meant to send
        // (after its think time). Without think time there is no intention to
        // report apart from the send itself.
        let corrected = r.latency_corrected || args.mode == Mode::Random;
        let c = |v: u64| corrected.then(|| ms(v));
        let certificate_rows = match (before.cert_rows, after.cert_rows) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        // A buffered server answers before its commit, so its count may
        // trail the successes without any acknowledged row being lost yet.
        let rows_match = certificate_rows
            .filter(|_| sut.durability != Some(Durability::Buffered))
            .map(|n| n == success);
        let model = load_model(args).0;
        let totals = Totals {
            total_requests: total,
            success,
            failures: total.saturating_sub(success),
            error_codes,
            elapsed: r.elapsed_s,
            issued_per_sec: success as f64 / secs,
            requests_per_sec: total as f64 / secs,
            latency_p50_ms: ms(r.service.p50_us),
            latency_p95_ms: ms(r.service.p95_us),
            latency_p99_ms: ms(r.service.p99_us),
            latency_p999_ms: ms(r.service.p999_us),
            latency_max_ms: ms(r.service.max_us),
            corrected_latency_p50_ms: c(r.latency.p50_us),
            corrected_latency_p95_ms: c(r.latency.p95_us),
            corrected_latency_p99_ms: c(r.latency.p99_us),
            corrected_latency_p999_ms: c(r.latency.p999_us),
            corrected_latency_max_ms: c(r.latency.max_us),
            dropped: r.dropped,
            mem_alloc_bytes: sut.rss_now(),
            db_size_bytes: sut.db_size(),
            certificate_rows,
            server_cpu_seconds: outcome.server_cpu_s,
            durable_wait_mean_ms: after
                .durable_wait
                .and_then(|a| a.mean_ms_since(before.durable_wait)),
            server_peak_rss_bytes: sut.peak_rss(),
            cpu_us_per_cert: cpu_per,
            cpu_us_per_cert_by_thread: outcome
                .server_cpu_s_by_thread
                .as_ref()
                .filter(|_| success > 0)
                .map(|m| {
                    m.iter()
                        .map(|(k, c)| (k.clone(), c * 1e6 / success as f64))
                        .collect()
                }),
            crypto_floor_us_per_cert: floor.per_cert_us,
            efficiency: cpu_per.filter(|c| *c > 0.0).map(|c| floor.per_cert_us / c),
            client_cpu_seconds: r.client_cpu_s,
        };
        Ok(Self {
            mode: args.mode,
            scenario: args.scenario,
            duration: fmt_duration(args.duration),
            agents: args.agents,
            users,
            target_qps: args.qps,
            interval: fmt_duration(args.interval),
            keys: args.keys,
            server: sut.kind_name(),
            server_config: sut.describe(),
            durability: sut.durability.map(Durability::as_str),
            load_model: match model {
                LoadModel::Closed {
                    concurrency,
                    think_time: ThinkTime::Exponential { mean },
                    ..
                } => format!(
                    "closed, {concurrency} agents, exponential think time with mean {} (staggered exponential start)",
                    fmt_duration(mean)
                ),
                LoadModel::Closed { concurrency, .. } => {
                    format!("closed, {concurrency} agents back to back")
                }
                LoadModel::Open { rate, .. } => {
                    format!("open, {rate:.1} req/s, at most {} in flight", args.agents)
                }
            },
            timed_out: outcome.timed_out,
            totals,
            crypto_floor: floor,
            rows_match,
            csr_pool: (args.keys == Keys::Csr).then_some(args.csr_pool),
        })
    }

    pub fn text(&self) -> String {
        let t = &self.totals;
        let opt = |v: Option<f64>, unit: &str| {
            v.map(|x| format!("{x:.1}{unit}"))
                .unwrap_or_else(|| "n/a".into())
        };
        let mb = |v: Option<u64>| {
            v.map(|x| format!("{:.1} MiB", x as f64 / 1048576.0))
                .unwrap_or_else(|| "n/a".into())
        };
        let mut s = String::new();
        s.push_str(&format!(
            "warrant bench: mode={:?} scenario={:?} keys={:?} duration={} agents={} users={} qps={} interval={}\n",
            self.mode, self.scenario, self.keys, self.duration, self.agents, self.users, self.target_qps, self.interval
        ));
        s.push_str(&format!(
            "  server: {} · load: {}\n",
            self.server, self.load_model
        ));
        if self.timed_out {
            s.push_str("  TIMEOUT: the wall limit stopped the run early\n");
        }
        s.push_str(&format!(
            "  requests {} · success {} · failures {} · codes {:?}{}\n",
            t.total_requests,
            t.success,
            t.failures,
            t.error_codes,
            if t.dropped > 0 {
                format!(" · dropped (agents busy) {}", t.dropped)
            } else {
                String::new()
            }
        ));
        s.push_str(&format!(
            "  issued {:.0} certs/s · {:.0} req/s over {} (run ended after {:.1} s)\n",
            t.issued_per_sec, t.requests_per_sec, self.duration, t.elapsed
        ));
        s.push_str(&format!(
            "  latency (service)   p50 {:.2} ms  p95 {:.2} ms  p99 {:.2} ms  p99.9 {:.2} ms  max {:.2} ms\n",
            t.latency_p50_ms, t.latency_p95_ms, t.latency_p99_ms, t.latency_p999_ms, t.latency_max_ms
        ));
        if let Some(wait) = t.durable_wait_mean_ms {
            s.push_str(&format!(
                "  durable wait        mean {wait:.2} ms (queue, commit and WAL fsync, per issuance)\n"
            ));
        }
        if t.corrected_latency_p50_ms.is_some() {
            s.push_str(&format!(
                "  latency (corrected) p50 {}  p95 {}  p99 {}  p99.9 {}  max {}\n",
                opt(t.corrected_latency_p50_ms, " ms"),
                opt(t.corrected_latency_p95_ms, " ms"),
                opt(t.corrected_latency_p99_ms, " ms"),
                opt(t.corrected_latency_p999_ms, " ms"),
                opt(t.corrected_latency_max_ms, " ms"),
            ));
        }
        let by_thread = t
            .cpu_us_per_cert_by_thread
            .as_ref()
            .map(|m| {
                let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k} {v:.0}")).collect();
                format!(" ({} µs)", parts.join(" · "))
            })
            .unwrap_or_default();
        s.push_str(&format!(
            "  server CPU {} · {} per cert{by_thread} · peak RSS {} · RSS now {} · client CPU {:.1} s\n",
            opt(t.server_cpu_seconds, " s"),
            opt(t.cpu_us_per_cert, " µs"),
            mb(t.server_peak_rss_bytes),
            mb(t.mem_alloc_bytes),
            t.client_cpu_seconds
        ));
        let f = &self.crypto_floor;
        s.push_str(&format!(
            "  crypto floor {:.1} µs/cert ({}×keygen {:.1} + {}×sign {:.1} + {:.2}×verify {:.1} µs) · efficiency {}\n",
            f.per_cert_us,
            f.keygens,
            f.keygen_us,
            f.signs,
            f.sign_us,
            f.verifies,
            f.verify_us,
            t.efficiency.map(|e| format!("{e:.2}")).unwrap_or_else(|| "n/a".into())
        ));
        s.push_str(&format!(
            "  DB: {} rows written · {} · {}\n",
            t.certificate_rows
                .map(|n| n.to_string())
                .unwrap_or_else(|| "n/a".into()),
            mb(t.db_size_bytes),
            match self.rows_match {
                Some(true) => "every success is a row".to_string(),
                Some(false) => "MISMATCH with successes".to_string(),
                None if self.durability == Some(Durability::Buffered.as_str()) => {
                    "not checked (buffered: answers precede the commit)".to_string()
                }
                None => "not checked (DB not reachable)".to_string(),
            }
        ));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(mode: Mode, agents: usize, interval: Duration, duration: Duration) -> RunArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            run: RunArgs,
        }
        let mut a = Cli::parse_from(["bench"]).run;
        a.mode = mode;
        a.agents = agents;
        a.interval = interval;
        a.duration = duration;
        a
    }

    #[test]
    fn random_mode_is_closed_with_exponential_think_time() {
        let a = args(
            Mode::Random,
            5000,
            Duration::from_secs(6),
            Duration::from_secs(120),
        );
        let (model, max_in_flight) = load_model(&a);
        assert_eq!(max_in_flight, None, "one request per agent is the bound");
        match model {
            LoadModel::Closed {
                concurrency,
                stages,
                think_time,
            } => {
                assert_eq!(concurrency, 5000);
                assert_eq!(
                    think_time,
                    ThinkTime::Exponential {
                        mean: Duration::from_secs(6)
                    }
                );
                let total: Duration = stages.iter().map(|s| s.duration).sum();
                assert!((total.as_secs_f64() - 120.0).abs() < 1e-6, "{total:?}");
                assert_eq!(stages.last().map(|s| s.target), Some(5000.0));
            }
            other => panic!("random mode must be closed with think time, got {other:?}"),
        }
        let stress = args(Mode::Stress, 8, Duration::ZERO, Duration::from_secs(5));
        assert!(matches!(
            load_model(&stress).0,
            LoadModel::Closed {
                think_time: ThinkTime::None,
                ..
            }
        ));
    }

    /// The active agents follow agents · (1 − e^(−t/I)): agent k starts at the
    /// k-th quantile of Exp(I), so no burst at t = 0.
    #[test]
    fn staggered_start_follows_the_exponential_cdf() {
        use gust_engine::schedule::{Profile, slot_active};
        let (agents, mean) = (1000usize, 6.0);
        let stages = staggered_start(
            agents,
            Duration::from_secs_f64(mean),
            Duration::from_secs(120),
        );
        let profile = Profile::stages(&stages);
        let active = |t: f64| (0..agents).filter(|&s| slot_active(&profile, s, t)).count();
        assert!(active(0.0) <= 1, "all agents at t=0 would be a burst");
        for t in [1.0, 3.0, 6.0, 12.0, 18.0] {
            let want = agents as f64 * (1.0 - (-t / mean).exp());
            let got = active(t) as f64;
            assert!(
                (got - want).abs() <= 0.02 * agents as f64,
                "t={t}: {got} active, want {want:.0}"
            );
        }
        assert_eq!(active(60.0), agents);
        assert_eq!(active(119.9), agents);
    }

    #[test]
    fn staggered_start_is_cut_at_a_short_duration() {
        // Default flags: interval 10m, duration 5m; the ramp outlives the run.
        let stages = staggered_start(100, Duration::from_secs(600), Duration::from_secs(300));
        let total: Duration = stages.iter().map(|s| s.duration).sum();
        assert!((total.as_secs_f64() - 300.0).abs() < 1e-6);
        let last = stages.last().map(|s| s.target).unwrap_or(0.0);
        // 1 − e^(−0.5) ≈ 39 % of the agents have started by then.
        assert!((35.0..=43.0).contains(&last), "{last}");
        assert!(stages.iter().all(|s| s.target.fract() == 0.0));
    }

    #[test]
    fn rates_are_taken_over_the_measured_window() {
        // A 20 s run whose last answers came at 20.4 s, and one stopped at 7 s.
        assert_eq!(rate_window_s(20.4, Some(20.0)), 20.0);
        assert_eq!(rate_window_s(7.0, Some(20.0)), 7.0);
        assert_eq!(rate_window_s(3.0, None), 3.0);
        assert_eq!(rate_window_s(0.0, Some(5.0)), 1.0);
    }

    #[test]
    fn durations_print_in_reference_units() {
        assert_eq!(fmt_duration(Duration::from_secs(300)), "5m");
        assert_eq!(fmt_duration(Duration::from_secs(20)), "20s");
        assert_eq!(fmt_duration(Duration::from_millis(100)), "100ms");
    }
}
