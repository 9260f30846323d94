//! The final report of a run: the merged totals, latency summaries and per-second
//! series of [`metrics`](crate::metrics), with the scenario's per-step results and the
//! target monitor's series beside them. It sits above all three, which never read it.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::metrics::steps::{IterationSummary, StepReport};
use crate::metrics::{
    ErrorClass, LagSummary, LatencySummary, PhaseReport, SecondHistograms, SecondSample,
    new_histogram,
};
use crate::monitor::MonitorReport;

/// Final run report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub url: String,
    /// "open" or "closed".
    pub model: String,
    pub workers: usize,
    pub connections: usize,
    /// This process's share of a run several generate together (`"i/n"` or
    /// `"a:b"`); absent for a whole run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment: Option<String>,
    /// The run's time origin on the wall clock (Unix ms): second `n` of `series`
    /// began `n` seconds after it.
    pub started_at_ms: u64,
    /// How late the run started after its `start_at` (ms), when it was late.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_late_ms: Option<u64>,
    /// Configured duration (s), if time-bound.
    pub duration_s: Option<f64>,
    /// From start to the last request finishing (s).
    pub elapsed_s: f64,
    pub sent: u64,
    pub responses: u64,
    pub successes: u64,
    pub failures: u64,
    pub dropped: u64,
    pub cancelled: u64,
    pub error_rate: f64,
    /// Responses per second over the sending phase.
    pub rps: f64,
    /// Open: corrected (from intended send time). Closed: same as `service`.
    pub latency: LatencySummary,
    /// From actual send to response.
    pub service: LatencySummary,
    pub latency_corrected: bool,
    pub status: BTreeMap<String, u64>,
    pub errors: BTreeMap<String, u64>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub connections_opened: u64,
    /// DNS, connect and TLS per new connection; time to first byte per response.
    pub phases: PhaseReport,
    pub peak_in_flight: u64,
    pub generator_lag: LagSummary,
    /// µs after start of the last request sent.
    pub last_send_offset_us: u64,
    /// CPU time (user + system) of the engine's own threads.
    pub client_cpu_s: f64,
    /// The run was ended early through a [`crate::StopHandle`].
    pub stopped: bool,
    pub series: Vec<SecondSample>,
    /// Scenario runs: per-step results in step order (absent for plain runs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepReport>,
    /// Scenario runs: iteration counts (absent for plain runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iterations: Option<IterationSummary>,
    /// Target monitoring series and per-source scrape counts (absent without a monitor).
    #[serde(flatten)]
    pub monitor: MonitorReport,
    /// A segment's histograms, so `gust merge` computes the run's percentiles
    /// exactly (absent for a whole run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histograms: Option<Histograms>,
    #[serde(skip, default = "new_histogram")]
    pub latency_histogram: Histogram<u64>,
    #[serde(skip, default = "new_histogram")]
    pub service_histogram: Histogram<u64>,
}

impl Report {
    pub fn error_count(&self, class: ErrorClass) -> u64 {
        self.errors.get(class.as_str()).copied().unwrap_or(0)
    }
}

/// The histograms behind a segment's report, each HdrHistogram's V2 encoding in
/// base64 ([`crate::metrics::encode_histogram`]) (µs, the run's bounds): the run's corrected and service
/// latency, the connection phases, each scenario step's latency in step order, and
/// each second of `series`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Histograms {
    pub latency: String,
    pub service: String,
    pub dns: String,
    pub connect: String,
    pub tls: String,
    pub ttfb: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<String>,
    pub seconds: Vec<SecondHistograms>,
}
