//! `GET /metrics`: the daemon's own counters in Prometheus text format, so the
//! machine that generates load can be watched like the one that takes it.
//!
//! Counters start at zero with the process (Prometheus handles resets); requests are
//! summed from the live ticks of every run, so they move while a run is going.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use gust_engine::LiveTick;

#[derive(Debug, Default)]
pub struct DaemonCounters {
    runs_started: AtomicU64,
    runs_completed: AtomicU64,
    runs_stopped: AtomicU64,
    runs_failed: AtomicU64,
    requests_sent: AtomicU64,
    responses: AtomicU64,
    failures: AtomicU64,
    dropped: AtomicU64,
    /// The latest tick's responses per second, as `f64` bits.
    last_rps: AtomicU64,
}

/// How a run ended, for `gust_runs_finished_total{status}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    Completed,
    Stopped,
    Failed,
}

impl DaemonCounters {
    pub fn run_started(&self) {
        self.runs_started.fetch_add(1, Ordering::Relaxed);
    }

    pub fn run_finished(&self, how: Finish) {
        let counter = match how {
            Finish::Completed => &self.runs_completed,
            Finish::Stopped => &self.runs_stopped,
            Finish::Failed => &self.runs_failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A tick's interval counts (not its running totals, which would double count).
    pub fn tick(&self, t: &LiveTick) {
        self.requests_sent.fetch_add(t.sent, Ordering::Relaxed);
        self.responses.fetch_add(t.responses, Ordering::Relaxed);
        self.failures.fetch_add(t.failures, Ordering::Relaxed);
        self.dropped.fetch_add(t.dropped, Ordering::Relaxed);
        self.last_rps.store(t.rps.to_bits(), Ordering::Relaxed);
    }

    /// The exposition text. `active_run` is the id of the run going now, if any.
    pub fn render(&self, active_run: Option<i64>) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let live_rps = active_run.map(|_| f64::from_bits(get(&self.last_rps)));
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, f64)]| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (labels, value) in samples {
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        };
        metric(
            "gust_build_info",
            "gauge",
            "Gust version (always 1).",
            &[(
                &format!("{{version=\"{}\"}}", env!("CARGO_PKG_VERSION")),
                1.0,
            )],
        );
        metric(
            "gust_runs_started_total",
            "counter",
            "Runs started by this daemon since it started.",
            &[("", get(&self.runs_started) as f64)],
        );
        metric(
            "gust_runs_finished_total",
            "counter",
            "Runs that ended, by how they ended.",
            &[
                ("{status=\"completed\"}", get(&self.runs_completed) as f64),
                ("{status=\"stopped\"}", get(&self.runs_stopped) as f64),
                ("{status=\"failed\"}", get(&self.runs_failed) as f64),
            ],
        );
        metric(
            "gust_run_active",
            "gauge",
            "1 while a run is going, else 0.",
            &[("", if active_run.is_some() { 1.0 } else { 0.0 })],
        );
        if let Some(id) = active_run {
            metric(
                "gust_active_run_id",
                "gauge",
                "Id of the run going now.",
                &[("", id as f64)],
            );
        }
        if let Some(rps) = live_rps {
            metric(
                "gust_active_run_rps",
                "gauge",
                "Responses per second of the run going now, over its last tick.",
                &[("", rps)],
            );
        }
        metric(
            "gust_requests_sent_total",
            "counter",
            "Requests sent by all runs of this daemon.",
            &[("", get(&self.requests_sent) as f64)],
        );
        metric(
            "gust_responses_total",
            "counter",
            "Responses received by all runs of this daemon.",
            &[("", get(&self.responses) as f64)],
        );
        metric(
            "gust_request_failures_total",
            "counter",
            "Requests that failed (error or unsuccessful status).",
            &[("", get(&self.failures) as f64)],
        );
        metric(
            "gust_requests_dropped_total",
            "counter",
            "Open-model requests dropped at the in-flight bound.",
            &[("", get(&self.dropped) as f64)],
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_the_active_run() {
        let c = DaemonCounters::default();
        c.run_started();
        c.run_finished(Finish::Stopped);
        c.tick(&LiveTick {
            index: 0,
            elapsed_s: 0.25,
            rps: 12.5,
            sent: 4,
            responses: 3,
            failures: 1,
            dropped: 0,
            in_flight: 1,
            latency: Default::default(),
            service: Default::default(),
            totals: Default::default(),
            histograms: None,
        });
        let text = c.render(Some(7));
        assert!(text.contains("gust_requests_sent_total 4\n"), "{text}");
        assert!(text.contains("gust_request_failures_total 1\n"));
        assert!(text.contains("gust_runs_started_total 1\n"), "{text}");
        assert!(text.contains("gust_runs_finished_total{status=\"stopped\"} 1\n"));
        assert!(text.contains("gust_run_active 1\n"));
        assert!(text.contains("gust_active_run_id 7\n"));
        assert!(text.contains("gust_active_run_rps 12.5\n"));
        let idle = c.render(None);
        assert!(idle.contains("gust_run_active 0\n"));
        assert!(!idle.contains("gust_active_run_id"));
    }
}
