//! The reference-compatible JSON report (bench.md) and its human text form,
//! built from the Gust report plus the server measurements.

use crate::args::{Keys, Mode, RunArgs, Scenario};
use crate::floor::Floor;
use crate::load::{Outcome, load_model};
use crate::server::{ServerCounters, ServerUnderTest};
use anyhow::Result;
use gust_engine::{LoadModel, ThinkTime};
use std::collections::BTreeMap;
use std::time::Duration;
use warrant_store::Durability;

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
    /// Mean records per commit of the write path over the run (the
    /// server's `warrant_commit_batch_size`): how far a commit's fixed cost
    /// (the transaction, SQLite's WAL fsync, the hand-offs) is shared. Null
    /// when nothing was committed or `/metrics` could not be read.
    pub records_per_commit: Option<f64>,
    pub server_peak_rss_bytes: Option<u64>,
    pub cpu_us_per_cert: Option<f64>,
    /// `cpu_us_per_cert` split by group of server threads (embedded server
    /// only, null otherwise): `tokio-workers` (HTTP, checks, signing),
    /// `blocking-pool` (tokio's `spawn_blocking`), `sqlx-sqlite-workers`
    /// (sqlx's SQLite connection threads) and `other` (any other thread of
    /// the server); only the groups that have a thread. Says which part to
    /// drive down.
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
    /// What the reference's flags given to this run (`-engine`, `-sync`,
    /// `-cpuprofile`, `-memprofile`) mean in Warrant.
    pub notes: Vec<String>,
    /// The machine and the data dir's disk the figures come from.
    pub host: Option<crate::host::HostFacts>,
}

fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(60_000) && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
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
                .and_then(|a| a.mean_since(before.durable_wait))
                .map(|s| s * 1e3),
            records_per_commit: after
                .commit_batch
                .and_then(|a| a.mean_since(before.commit_batch)),
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
            notes: Vec::new(),
            host: None,
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
        if let Some(n) = t.records_per_commit {
            s.push_str(&format!(
                "  commits             {n:.1} records per commit\n"
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
        for n in &self.notes {
            s.push_str(&format!("  note: {n}\n"));
        }
        if let Some(h) = &self.host {
            for line in h.text().lines() {
                s.push_str(&format!("  {line}\n"));
            }
            for w in h.warnings() {
                s.push_str(&format!("  warning: {w}\n"));
            }
        }
        s
    }
}
#[cfg(test)]
mod tests {
    use super::*;

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
