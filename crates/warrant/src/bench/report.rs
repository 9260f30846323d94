//! Driving the Gust run and turning its report plus the server measurements
//! into the reference-compatible JSON (bench.md) and a human text report.

use super::floor::Floor;
use super::scenario::BenchSource;
use super::server::ServerUnderTest;
use super::{Keys, Mode, RunArgs, Scenario};
use anyhow::{Result, anyhow};
use gust_engine::{LoadModel, Report, RunEvent, RunSpec, ThinkTime};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Outcome {
    pub report: Report,
    pub server_cpu_s: Option<f64>,
    pub timed_out: bool,
}

/// The Gust load model for a mode. `random` is an open model at the
/// aggregate rate agents / interval (the superposition of the agents'
/// exponential think times), so latency is measured from the intended send
/// time (no coordinated omission); at most `agents` requests are in flight,
/// as each agent has at most one outstanding request. Arrivals are evenly
/// paced (the engine's open model), not Poisson: same mean rate, smoother.
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
            LoadModel::Open {
                rate: random_rate(args.agents, args.interval),
                stages: Vec::new(),
            },
            Some(args.agents),
        ),
    }
}

pub fn random_rate(agents: usize, interval: Duration) -> f64 {
    agents as f64 / interval.as_secs_f64()
}

pub fn drive(
    sut: &ServerUnderTest,
    args: &RunArgs,
    source: BenchSource,
    wall_limit: Option<Duration>,
) -> Result<Outcome> {
    let (model, max_in_flight) = load_model(args);
    let mut spec = RunSpec::new(format!("{}/", sut.url()), model);
    spec.method = "POST".into();
    spec.duration = Some(args.duration);
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
    let server_cpu_s = match (cpu_before, cpu_after) {
        (Some(a), Some(b)) => Some((b - a).max(0.0)),
        _ => None,
    };
    Ok(Outcome {
        report,
        server_cpu_s,
        timed_out: timed_out.load(std::sync::atomic::Ordering::Relaxed),
    })
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
    /// Seconds from the first request to the last answer.
    pub elapsed: f64,
    pub issued_per_sec: f64,
    pub requests_per_sec: f64,
    /// Service latency: from the actual send to the answer (the reference's meaning).
    pub latency_p50_ms: f64,
    pub latency_p95_ms: f64,
    pub latency_p99_ms: f64,
    pub latency_p999_ms: f64,
    pub latency_max_ms: f64,
    /// From the intended send time (open models: random mode, stress with qps);
    /// null when the model is closed (there is no schedule to fall behind).
    pub corrected_latency_p50_ms: Option<f64>,
    pub corrected_latency_p95_ms: Option<f64>,
    pub corrected_latency_p99_ms: Option<f64>,
    pub corrected_latency_p999_ms: Option<f64>,
    pub corrected_latency_max_ms: Option<f64>,
    /// Requests an open model could not send because `agents` were already in flight.
    pub dropped: u64,
    /// Server RSS at the end of the run (Go's MemStats.Alloc has no exact Rust
    /// counterpart; resident memory is what an operator pays for).
    pub mem_alloc_bytes: Option<u64>,
    pub db_size_bytes: Option<u64>,
    /// Certificate rows written during the run, counted in the DB.
    pub certificate_rows: Option<u64>,
    pub server_cpu_seconds: Option<f64>,
    pub server_peak_rss_bytes: Option<u64>,
    pub cpu_us_per_cert: Option<f64>,
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
    pub load_model: String,
    pub timed_out: bool,
    pub totals: Totals,
    pub crypto_floor: Floor,
    /// true/false when the DB was counted (durable mode); null otherwise.
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
        rows_before: Option<u64>,
        rows_after: Option<u64>,
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
        let secs = if r.elapsed_s > 0.0 { r.elapsed_s } else { 1.0 };
        let cpu_per = outcome
            .server_cpu_s
            .filter(|_| success > 0)
            .map(|c| c * 1e6 / success as f64);
        let corrected = r.latency_corrected;
        let c = |v: u64| corrected.then(|| ms(v));
        let certificate_rows = match (rows_before, rows_after) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        let rows_match = certificate_rows.map(|n| n == success);
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
            server_peak_rss_bytes: sut.peak_rss(),
            cpu_us_per_cert: cpu_per,
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
            load_model: match model {
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
            "  issued {:.0} certs/s · {:.0} req/s over {:.1} s\n",
            t.issued_per_sec, t.requests_per_sec, t.elapsed
        ));
        s.push_str(&format!(
            "  latency (service)   p50 {:.2} ms  p95 {:.2} ms  p99 {:.2} ms  p99.9 {:.2} ms  max {:.2} ms\n",
            t.latency_p50_ms, t.latency_p95_ms, t.latency_p99_ms, t.latency_p999_ms, t.latency_max_ms
        ));
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
        s.push_str(&format!(
            "  server CPU {} · {} per cert · peak RSS {} · RSS now {} · client CPU {:.1} s\n",
            opt(t.server_cpu_seconds, " s"),
            opt(t.cpu_us_per_cert, " µs"),
            mb(t.server_peak_rss_bytes),
            mb(t.mem_alloc_bytes),
            t.client_cpu_seconds
        ));
        let f = &self.crypto_floor;
        s.push_str(&format!(
            "  crypto floor {:.1} µs/cert ({}×keygen {:.1} + {}×sign {:.1} + {}×verify {:.1} µs) · efficiency {}\n",
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
                None => "not checked (DB not reachable)".to_string(),
            }
        ));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_mode_rate_is_agents_over_interval() {
        assert!((random_rate(5000, Duration::from_secs(6)) - 833.333).abs() < 0.01);
        assert_eq!(random_rate(2500, Duration::from_millis(100)), 25_000.0);
    }

    #[test]
    fn durations_print_in_reference_units() {
        assert_eq!(fmt_duration(Duration::from_secs(300)), "5m");
        assert_eq!(fmt_duration(Duration::from_secs(20)), "20s");
        assert_eq!(fmt_duration(Duration::from_millis(100)), "100ms");
    }
}
