//! Measurement: per-worker interval stats (with a scenario's per-step counters,
//! [`steps`]), their merge, live ticks and per-second series. The final report that
//! gathers them is [`crate::report`].
//!
//! One source of truth: workers record into interval stats and hand them over at each
//! tick boundary; the aggregator merges those same stats into the live tick, into the
//! per-second sample (so a second's percentiles cover every sample of the whole second,
//! not its last tick) and into the run totals. Percentiles are only ever computed from
//! merged histograms, never averaged.

pub mod steps;

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use steps::ScenarioStats;

/// Why a request ended without a response. The same enum names the JSON keys, the
/// CLI columns and what tests expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// The target refused the TCP connection.
    ConnectRefused,
    /// Any other connection failure (unreachable, DNS address unusable, …).
    Connect,
    /// The connection was reset or closed before the response was complete.
    Reset,
    /// No complete response within `timeout`.
    Timeout,
    /// TLS handshake or record failure.
    Tls,
    /// The response was not valid HTTP.
    Protocol,
    /// The body exceeded `max_body`.
    BodyTooLarge,
    /// Still in flight when the grace period after the deadline ran out.
    Cancelled,
}

impl ErrorClass {
    pub const ALL: [ErrorClass; 8] = [
        ErrorClass::ConnectRefused,
        ErrorClass::Connect,
        ErrorClass::Reset,
        ErrorClass::Timeout,
        ErrorClass::Tls,
        ErrorClass::Protocol,
        ErrorClass::BodyTooLarge,
        ErrorClass::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::ConnectRefused => "connect_refused",
            ErrorClass::Connect => "connect",
            ErrorClass::Reset => "reset",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Tls => "tls",
            ErrorClass::Protocol => "protocol",
            ErrorClass::BodyTooLarge => "body_too_large",
            ErrorClass::Cancelled => "cancelled",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Histogram bounds: 1 µs .. 1 h at 3 significant digits.
pub const HIST_LOW_US: u64 = 1;
pub const HIST_HIGH_US: u64 = 3_600_000_000;
pub const HIST_SIGFIG: u8 = 3;

pub fn new_histogram() -> Histogram<u64> {
    // The bounds are constants known to be valid.
    Histogram::new_with_bounds(HIST_LOW_US, HIST_HIGH_US, HIST_SIGFIG)
        .unwrap_or_else(|_| unreachable!("constant histogram bounds are valid"))
}

/// A histogram as HdrHistogram's V2 encoding in base64: the form in which a
/// segment's report and its streamed ticks carry their histograms. Not the deflate
/// variant: V2 already run-length encodes the empty buckets, and deflate's
/// per-call tables cost a streamed tick more CPU than its bytes save. The decoder
/// reads both.
pub fn encode_histogram(h: &Histogram<u64>) -> String {
    use base64::Engine;
    use hdrhistogram::serialization::{Serializer, V2Serializer};
    let mut bytes = Vec::new();
    // Writing into a Vec cannot fail; an empty string would decode as an error.
    let _ = V2Serializer::new().serialize(h, &mut bytes);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The inverse of [`encode_histogram`]; `None` for anything that is not one.
pub fn decode_histogram(text: &str) -> Option<Histogram<u64>> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    let decoded: Histogram<u64> = hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .ok()?;
    // Re-record into the run's bounds, so every merge adds like histograms.
    let mut h = new_histogram();
    h.add(&decoded).ok()?;
    Some(h)
}

/// An interval's corrected and service latency histograms, encoded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalHistograms {
    pub latency: String,
    pub service: String,
}

impl IntervalHistograms {
    pub fn of(latency: &Histogram<u64>, service: &Histogram<u64>) -> Self {
        Self {
            latency: encode_histogram(latency),
            service: encode_histogram(service),
        }
    }

    /// (latency, service); `None` if either is not an encoded histogram.
    pub fn decode(&self) -> Option<(Histogram<u64>, Histogram<u64>)> {
        Some((
            decode_histogram(&self.latency)?,
            decode_histogram(&self.service)?,
        ))
    }
}

/// One second's corrected and service latency histograms, encoded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SecondHistograms {
    pub second: u64,
    #[serde(flatten)]
    pub histograms: IntervalHistograms,
}

/// Counters and histograms for one interval of one worker (or a merge of several).
#[derive(Debug, Clone)]
pub struct IntervalStats {
    /// Open model: from intended send time to response (corrected). Closed: = service.
    pub latency: Histogram<u64>,
    /// From actual send to response.
    pub service: Histogram<u64>,
    pub sent: u64,
    pub successes: u64,
    pub failures: u64,
    pub dropped: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub connections_opened: u64,
    pub status: Vec<u64>,
    pub errors: [u64; ErrorClass::ALL.len()],
    pub lag_sum_us: u64,
    pub lag_max_us: u64,
    pub lag_count: u64,
    /// Latest send, as µs since run start (0 = none).
    pub last_send_us: u64,
    /// Per-step and per-iteration counters of a scenario run (empty otherwise).
    pub scenario: ScenarioStats,
}

impl Default for IntervalStats {
    fn default() -> Self {
        Self::new()
    }
}

impl IntervalStats {
    pub fn new() -> Self {
        Self {
            latency: new_histogram(),
            service: new_histogram(),
            sent: 0,
            successes: 0,
            failures: 0,
            dropped: 0,
            bytes_in: 0,
            bytes_out: 0,
            connections_opened: 0,
            status: vec![0; 600],
            errors: [0; ErrorClass::ALL.len()],
            lag_sum_us: 0,
            lag_max_us: 0,
            lag_count: 0,
            last_send_us: 0,
            scenario: ScenarioStats::default(),
        }
    }

    pub fn record_response(
        &mut self,
        status: u16,
        success: bool,
        latency_us: u64,
        service_us: u64,
    ) {
        if let Some(slot) = self.status.get_mut(usize::from(status)) {
            *slot += 1;
        }
        if success {
            self.successes += 1;
        } else {
            self.failures += 1;
        }
        self.latency.saturating_record(latency_us.max(1));
        self.service.saturating_record(service_us.max(1));
    }

    pub fn record_error(&mut self, class: ErrorClass) {
        self.errors[class.index()] += 1;
        self.failures += 1;
    }

    pub fn record_lag(&mut self, lag_us: u64) {
        self.lag_sum_us += lag_us;
        self.lag_max_us = self.lag_max_us.max(lag_us);
        self.lag_count += 1;
    }

    pub fn responses(&self) -> u64 {
        self.status.iter().sum()
    }

    pub fn merge(&mut self, other: &IntervalStats) {
        // Same bounds everywhere, so adding cannot fail.
        let _ = self.latency.add(&other.latency);
        let _ = self.service.add(&other.service);
        self.sent += other.sent;
        self.successes += other.successes;
        self.failures += other.failures;
        self.dropped += other.dropped;
        self.bytes_in += other.bytes_in;
        self.bytes_out += other.bytes_out;
        self.connections_opened += other.connections_opened;
        for (a, b) in self.status.iter_mut().zip(&other.status) {
            *a += b;
        }
        for (a, b) in self.errors.iter_mut().zip(&other.errors) {
            *a += b;
        }
        self.lag_sum_us += other.lag_sum_us;
        self.lag_max_us = self.lag_max_us.max(other.lag_max_us);
        self.lag_count += other.lag_count;
        self.last_send_us = self.last_send_us.max(other.last_send_us);
        self.scenario.merge(&other.scenario);
    }

    pub fn reset(&mut self) {
        self.latency.reset();
        self.service.reset();
        self.status.fill(0);
        self.errors = [0; ErrorClass::ALL.len()];
        self.sent = 0;
        self.successes = 0;
        self.failures = 0;
        self.dropped = 0;
        self.bytes_in = 0;
        self.bytes_out = 0;
        self.connections_opened = 0;
        self.lag_sum_us = 0;
        self.lag_max_us = 0;
        self.lag_count = 0;
        self.last_send_us = 0;
        self.scenario.reset();
    }

    pub fn error_count(&self, class: ErrorClass) -> u64 {
        self.errors[class.index()]
    }

    pub fn status_map(&self) -> BTreeMap<String, u64> {
        self.status
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(code, n)| (code.to_string(), *n))
            .collect()
    }

    pub fn error_map(&self) -> BTreeMap<String, u64> {
        ErrorClass::ALL
            .iter()
            .filter(|c| self.errors[c.index()] > 0)
            .map(|c| (c.as_str().to_string(), self.errors[c.index()]))
            .collect()
    }
}

/// The one error-rate definition: failed / finished, where a request fails when it got
/// no response or a status outside the success set. Dropped requests were never sent
/// and are reported separately.
pub fn error_rate(failures: u64, successes: u64) -> f64 {
    let finished = failures + successes;
    if finished == 0 {
        0.0
    } else {
        failures as f64 / finished as f64
    }
}

/// Percentiles for charts and ticks (µs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct QuickPercentiles {
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

impl QuickPercentiles {
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Self {
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            max_us: h.max(),
        }
    }
}

/// The full latency summary of the report (µs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub min_us: u64,
    pub mean_us: f64,
    pub stdev_us: f64,
    pub p50_us: u64,
    pub p75_us: u64,
    pub p90_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub p9999_us: u64,
    pub max_us: u64,
}

impl LatencySummary {
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Self {
            count: h.len(),
            min_us: h.min(),
            mean_us: h.mean(),
            stdev_us: h.stdev(),
            p50_us: h.value_at_quantile(0.50),
            p75_us: h.value_at_quantile(0.75),
            p90_us: h.value_at_quantile(0.90),
            p95_us: h.value_at_quantile(0.95),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            p9999_us: h.value_at_quantile(0.9999),
            max_us: h.max(),
        }
    }

    /// Percentile table rows for text output.
    pub fn rows(&self) -> [(&'static str, u64); 8] {
        [
            ("50%", self.p50_us),
            ("75%", self.p75_us),
            ("90%", self.p90_us),
            ("95%", self.p95_us),
            ("99%", self.p99_us),
            ("99.9%", self.p999_us),
            ("99.99%", self.p9999_us),
            ("max", self.max_us),
        ]
    }
}

/// Running totals carried in every tick, so a UI that joins late is still correct.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub sent: u64,
    pub responses: u64,
    pub successes: u64,
    pub failures: u64,
    pub dropped: u64,
    pub error_rate: f64,
}

/// A live snapshot, emitted every `tick` (250 ms by default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveTick {
    /// Index of this tick; it covers `[index·tick, (index+1)·tick)` of the run.
    pub index: u64,
    pub elapsed_s: f64,
    /// Completed responses per second over this tick.
    pub rps: f64,
    pub sent: u64,
    pub responses: u64,
    pub failures: u64,
    pub dropped: u64,
    pub in_flight: u64,
    pub latency: QuickPercentiles,
    pub service: QuickPercentiles,
    pub totals: Totals,
    /// This tick's histograms, carried by a segment's ticks only, so the daemon that
    /// segments stream to can merge their percentiles exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histograms: Option<IntervalHistograms>,
}

/// One whole second of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SecondSample {
    /// Second index from run start.
    pub second: u64,
    pub sent: u64,
    pub responses: u64,
    pub successes: u64,
    pub failures: u64,
    pub dropped: u64,
    pub error_rate: f64,
    pub bytes_in: u64,
    pub latency: QuickPercentiles,
    pub service: QuickPercentiles,
    pub errors: BTreeMap<String, u64>,
}

impl SecondSample {
    pub(crate) fn of(second: u64, s: &IntervalStats) -> Self {
        Self {
            second,
            sent: s.sent,
            responses: s.responses(),
            successes: s.successes,
            failures: s.failures,
            dropped: s.dropped,
            error_rate: error_rate(s.failures, s.successes),
            bytes_in: s.bytes_in,
            latency: QuickPercentiles::of(&s.latency),
            service: QuickPercentiles::of(&s.service),
            errors: s.error_map(),
        }
    }
}

/// Events a UI consumes while a run is going.
#[derive(Debug, Clone)]
pub enum RunEvent {
    Tick(LiveTick),
    /// A finished second, with its merged corrected-latency histogram (for HdrHistogram
    /// interval logs and for merging runs across machines).
    Second {
        sample: SecondSample,
        latency: Box<Histogram<u64>>,
    },
}

/// Where a request's time went, per phase. DNS, connect and TLS are measured once per
/// new connection (a reused keep-alive connection has none); time to first byte is
/// measured for every response, from the request's send to the first response byte.
/// Kept apart from [`IntervalStats`]: phases are reported for the whole run only, so
/// workers accumulate them and hand them over once, at the end, instead of cloning
/// four more histograms every tick.
#[derive(Debug, Clone)]
pub struct PhaseStats {
    pub dns: Histogram<u64>,
    pub connect: Histogram<u64>,
    pub tls: Histogram<u64>,
    pub ttfb: Histogram<u64>,
}

impl Default for PhaseStats {
    fn default() -> Self {
        Self::new()
    }
}

impl PhaseStats {
    pub fn new() -> Self {
        Self {
            dns: new_histogram(),
            connect: new_histogram(),
            tls: new_histogram(),
            ttfb: new_histogram(),
        }
    }

    pub fn record_connection(&mut self, timing: &ConnectTiming) {
        if let Some(dns) = timing.dns {
            self.dns.saturating_record(micros(dns));
        }
        self.connect.saturating_record(micros(timing.connect));
        if let Some(tls) = timing.tls {
            self.tls.saturating_record(micros(tls));
        }
    }

    pub fn record_ttfb(&mut self, ttfb: Duration) {
        self.ttfb.saturating_record(micros(ttfb));
    }

    pub fn merge(&mut self, other: &PhaseStats) {
        // Same bounds everywhere, so adding cannot fail.
        let _ = self.dns.add(&other.dns);
        let _ = self.connect.add(&other.connect);
        let _ = self.tls.add(&other.tls);
        let _ = self.ttfb.add(&other.ttfb);
    }

    pub fn summary(&self) -> PhaseReport {
        PhaseReport {
            dns: LatencySummary::of(&self.dns),
            connect: LatencySummary::of(&self.connect),
            tls: LatencySummary::of(&self.tls),
            ttfb: LatencySummary::of(&self.ttfb),
        }
    }
}

/// A histogram sample in µs; 0 is not representable, so sub-µs phases count as 1 µs.
fn micros(d: Duration) -> u64 {
    (d.as_micros() as u64).max(1)
}

/// How long one new connection took to set up. `dns` is `None` when the target is an
/// IP literal (nothing was looked up); `tls` is `None` on plain HTTP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectTiming {
    pub dns: Option<Duration>,
    pub connect: Duration,
    pub tls: Option<Duration>,
}

/// The run's phases. A phase that never happened (no TLS on plain HTTP, no DNS for an
/// IP literal, no new connection) has `count` 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseReport {
    pub dns: LatencySummary,
    pub connect: LatencySummary,
    pub tls: LatencySummary,
    pub ttfb: LatencySummary,
}

impl PhaseReport {
    /// (name, summary) in wire order, for text and CSV renderers.
    pub fn rows(&self) -> [(&'static str, &LatencySummary); 4] {
        [
            ("dns", &self.dns),
            ("connect", &self.connect),
            ("tls", &self.tls),
            ("ttfb", &self.ttfb),
        ]
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LagSummary {
    pub mean_us: f64,
    pub max_us: u64,
}

pub(crate) fn lag_summary(s: &IntervalStats) -> LagSummary {
    LagSummary {
        mean_us: if s.lag_count == 0 {
            0.0
        } else {
            s.lag_sum_us as f64 / s.lag_count as f64
        },
        max_us: s.lag_max_us,
    }
}

/// Accumulates worker intervals into ticks, whole seconds and totals.
///
/// Tick `n` is complete once every worker has either reported `n` or finished (a
/// worker's messages arrive in order, so a finished worker has nothing left to send).
pub(crate) struct Aggregator {
    ticks_per_second: u64,
    tick: Duration,
    /// Per worker: next tick index it will report, and whether it finished.
    next_index: Vec<u64>,
    done: Vec<bool>,
    /// tick index → merged stats of the workers that reported it
    pending_ticks: BTreeMap<u64, IntervalStats>,
    current_second: Option<(u64, IntervalStats)>,
    pub total: IntervalStats,
    pub series: Vec<SecondSample>,
    /// Each finished second's histograms, encoded; kept only for a segment's
    /// report.
    pub second_histograms: Option<Vec<SecondHistograms>>,
    /// Whether each tick carries its histograms (a segment's ticks).
    pub tick_histograms: bool,
}

pub(crate) struct Emitted {
    pub ticks: Vec<LiveTick>,
    pub seconds: Vec<(SecondSample, Box<Histogram<u64>>)>,
}

impl Aggregator {
    pub fn new(workers: usize, tick: Duration) -> Self {
        let ticks_per_second = (Duration::from_secs(1).as_nanos() / tick.as_nanos()).max(1) as u64;
        Self {
            ticks_per_second,
            tick,
            next_index: vec![0; workers],
            done: vec![false; workers],
            pending_ticks: BTreeMap::new(),
            current_second: None,
            total: IntervalStats::new(),
            series: Vec::new(),
            second_histograms: None,
            tick_histograms: false,
        }
    }

    /// Worker `worker`'s stats for tick `index`.
    pub fn add(
        &mut self,
        worker: usize,
        index: u64,
        stats: &IntervalStats,
        in_flight: u64,
    ) -> Emitted {
        self.pending_ticks.entry(index).or_default().merge(stats);
        if let Some(next) = self.next_index.get_mut(worker) {
            *next = (*next).max(index + 1);
        }
        self.drain(in_flight)
    }

    /// Worker `worker` finished; it sends nothing more.
    pub fn worker_done(&mut self, worker: usize, in_flight: u64) -> Emitted {
        if let Some(d) = self.done.get_mut(worker) {
            *d = true;
        }
        self.drain(in_flight)
    }

    fn drain(&mut self, in_flight: u64) -> Emitted {
        let mut out = Emitted {
            ticks: Vec::new(),
            seconds: Vec::new(),
        };
        let flush = self.done.iter().all(|d| *d);
        // Every tick below this index has been reported by all live workers.
        let complete_below = self
            .next_index
            .iter()
            .zip(&self.done)
            .filter(|(_, done)| !**done)
            .map(|(next, _)| *next)
            .min()
            .unwrap_or(u64::MAX);
        while let Some(&index) = self.pending_ticks.keys().next() {
            if index >= complete_below {
                break;
            }
            let Some(stats) = self.pending_ticks.remove(&index) else {
                break;
            };
            self.total.merge(&stats);
            out.ticks.push(self.tick_of(index, &stats, in_flight));
            let second = index / self.ticks_per_second;
            match &mut self.current_second {
                Some((s, acc)) if *s == second => acc.merge(&stats),
                _ => {
                    if let Some((s, acc)) = self.current_second.take() {
                        out.seconds.push(self.finish_second(s, acc));
                    }
                    self.current_second = Some((second, stats));
                }
            }
            if (index + 1) % self.ticks_per_second == 0
                && let Some((s, acc)) = self.current_second.take()
            {
                out.seconds.push(self.finish_second(s, acc));
            }
        }
        if flush && let Some((s, acc)) = self.current_second.take() {
            out.seconds.push(self.finish_second(s, acc));
        }
        out
    }

    fn finish_second(
        &mut self,
        second: u64,
        acc: IntervalStats,
    ) -> (SecondSample, Box<Histogram<u64>>) {
        let sample = SecondSample::of(second, &acc);
        self.series.push(sample.clone());
        if let Some(kept) = &mut self.second_histograms {
            kept.push(SecondHistograms {
                second,
                histograms: IntervalHistograms::of(&acc.latency, &acc.service),
            });
        }
        (sample, Box::new(acc.latency))
    }

    fn tick_of(&self, index: u64, s: &IntervalStats, in_flight: u64) -> LiveTick {
        let t = &self.total;
        LiveTick {
            index,
            elapsed_s: (index + 1) as f64 * self.tick.as_secs_f64(),
            rps: s.responses() as f64 / self.tick.as_secs_f64(),
            sent: s.sent,
            responses: s.responses(),
            failures: s.failures,
            dropped: s.dropped,
            in_flight,
            latency: QuickPercentiles::of(&s.latency),
            service: QuickPercentiles::of(&s.service),
            totals: Totals {
                sent: t.sent,
                responses: t.responses(),
                successes: t.successes,
                failures: t.failures,
                dropped: t.dropped,
                error_rate: error_rate(t.failures, t.successes),
            },
            histograms: self
                .tick_histograms
                .then(|| IntervalHistograms::of(&s.latency, &s.service)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats_with(latencies_us: &[u64]) -> IntervalStats {
        let mut s = IntervalStats::new();
        for &l in latencies_us {
            s.sent += 1;
            s.record_response(200, true, l, l);
        }
        s
    }

    #[test]
    fn second_percentiles_cover_every_tick_of_the_second() {
        // 4 ticks per second; only the first tick is slow. A series built from the
        // last tick alone would report a 1 ms max.
        let mut agg = Aggregator::new(1, Duration::from_millis(250));
        let mut seconds = Vec::new();
        for (i, lat) in [100_000, 1_000, 1_000, 1_000].iter().enumerate() {
            let e = agg.add(0, i as u64, &stats_with(&[*lat; 10]), 0);
            seconds.extend(e.seconds);
        }
        assert_eq!(seconds.len(), 1);
        let (sample, hist) = &seconds[0];
        assert_eq!(sample.responses, 40);
        assert!(sample.latency.max_us >= 99_000);
        assert_eq!(hist.len(), 40);
    }

    #[test]
    fn ticks_wait_for_every_live_worker() {
        let mut agg = Aggregator::new(2, Duration::from_millis(250));
        assert!(agg.add(0, 0, &stats_with(&[10]), 0).ticks.is_empty());
        assert!(agg.add(0, 1, &stats_with(&[10]), 0).ticks.is_empty());
        let e = agg.add(1, 0, &stats_with(&[20]), 0);
        assert_eq!(e.ticks.len(), 1);
        assert_eq!(e.ticks[0].responses, 2);
        assert_eq!(e.ticks[0].totals.responses, 2);
        // Worker 1 finishes: tick 1 needs only worker 0, which already sent it.
        assert_eq!(agg.worker_done(1, 0).ticks.len(), 1);
        let e = agg.worker_done(0, 0);
        assert_eq!(e.seconds.len(), 1);
        assert_eq!(agg.total.responses(), 3);
        assert_eq!(agg.series.len(), 1);
    }

    #[test]
    fn merged_percentiles_are_not_averaged() {
        let mut a = stats_with(&[1_000; 99]);
        let b = stats_with(&[1_000_000]);
        a.merge(&b);
        assert_eq!(a.latency.len(), 100);
        assert!(a.latency.value_at_quantile(0.999) >= 999_000);
        assert!(a.latency.value_at_quantile(0.5) < 1_100);
    }

    #[test]
    fn error_rate_counts_failures_over_finished_requests() {
        assert_eq!(error_rate(0, 0), 0.0);
        assert!((error_rate(1, 3) - 0.25).abs() < 1e-12);
    }

    #[test]
    fn reset_clears_everything() {
        let mut s = stats_with(&[5, 6]);
        s.record_error(ErrorClass::Reset);
        s.reset();
        assert_eq!(s.responses(), 0);
        assert_eq!(s.error_count(ErrorClass::Reset), 0);
        assert!(s.latency.is_empty());
    }
}
