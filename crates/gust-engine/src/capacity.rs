//! Capacity search: the highest open-model rate a target carries within an SLO.
//!
//! Two parts, split the usual way:
//!
//! - [`Planner`], pure: given whether each offered rate met the SLO, it picks the next
//!   rate. It doubles from `start` while steps pass, then bisects between the last
//!   passing and the first failing rate until the bracket is within `precision` of the
//!   passing rate, `max` has passed, or the step budget is spent. [`judge_step`] (also
//!   pure) decides whether one step passed.
//! - [`CapacitySearch`], the driver: runs each step on the engine (a clone of a base
//!   [`RunSpec`] with an open model at the step's rate for `step_duration`), reports
//!   every finished step through a callback and can be stopped from another thread.
//!
//! Only the open model measures capacity honestly: a closed model slows down with the
//! target, so "it kept up" would always be true. A step also fails when the achieved
//! rate falls well below the offered one (the client or the target could not keep up;
//! the SLO figures of such a step describe a smaller load than the one offered) or when
//! many requests were dropped at `max_in_flight`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::RunConfig;
use crate::error::ConfigError;
use crate::metrics::RunEvent;
use crate::report::Report;
use crate::runner::StopHandle;
use crate::spec::{LoadModel, RunSpec, parse_duration};
use crate::threshold::{self, Threshold, Verdict};

/// Version of the [`CapacityReport`] JSON shape.
pub const REPORT_VERSION: u32 = 1;

/// The service-level objective every step must meet: thresholds in the syntax of
/// [`crate::threshold`], all of which must pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Slo {
    thresholds: Vec<Threshold>,
}

impl Slo {
    /// Parse `p99<50ms,errors<1%` (comma-separated thresholds).
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        Self::from_exprs(text.split(','))
    }

    /// One threshold per item; empty items are ignored, and at least one must remain.
    pub fn from_exprs<'a>(exprs: impl IntoIterator<Item = &'a str>) -> Result<Self, ConfigError> {
        let thresholds = exprs
            .into_iter()
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|e| threshold::parse(e).map_err(|reason| ConfigError::new("slo", reason)))
            .collect::<Result<Vec<_>, _>>()?;
        if thresholds.is_empty() {
            return Err(ConfigError::new(
                "slo",
                "needs at least one threshold, e.g. 'p99<50ms,errors<1%'",
            ));
        }
        Ok(Self { thresholds })
    }

    pub fn exprs(&self) -> Vec<String> {
        self.thresholds.iter().map(|t| t.expr.clone()).collect()
    }

    pub fn check(&self, report: &Report) -> Vec<Verdict> {
        self.thresholds.iter().map(|t| t.check(report)).collect()
    }
}

/// How the search proceeds. Every field has a default; [`SearchSettings::validate`]
/// names the field of the first bad value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchSettings {
    /// First offered rate (req/s).
    pub start: f64,
    /// Highest rate tried (req/s). Growth is capped at it.
    pub max: f64,
    /// Stop bisecting once `failing - passing <= precision × passing` (a fraction).
    pub precision: f64,
    /// Step budget: at most this many steps run.
    pub max_steps: u32,
    /// Length of each step.
    #[serde(with = "duration_text")]
    pub step_duration: Duration,
    /// Rest between steps, so one step's queues (ours, the target's) drain before the
    /// next is measured.
    #[serde(with = "duration_text")]
    pub pause: Duration,
    /// A step whose achieved rate is below this fraction of the offered rate fails.
    pub min_achieved_ratio: f64,
    /// A step that dropped more than this fraction of its due requests fails.
    pub max_dropped_ratio: f64,
}

impl Default for SearchSettings {
    fn default() -> Self {
        Self {
            start: 100.0,
            max: 100_000.0,
            precision: 0.05,
            max_steps: 20,
            step_duration: Duration::from_secs(10),
            pause: Duration::from_secs(1),
            min_achieved_ratio: 0.9,
            max_dropped_ratio: 0.01,
        }
    }
}

impl SearchSettings {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.start.is_finite() && self.start > 0.0) {
            return Err(ConfigError::new(
                "start",
                "must be a positive number of requests per second",
            ));
        }
        if !self.max.is_finite() {
            return Err(ConfigError::new("max", "must be a finite rate"));
        }
        if self.max < self.start {
            return Err(ConfigError::new(
                "max",
                format!("{} is below start {}", self.max, self.start),
            ));
        }
        if !(self.precision > 0.0 && self.precision < 1.0) {
            return Err(ConfigError::new(
                "precision",
                "must be a fraction between 0 and 1 (exclusive), e.g. 0.05 or 5%",
            ));
        }
        if self.max_steps == 0 {
            return Err(ConfigError::new("max_steps", "must be at least 1"));
        }
        if self.step_duration.is_zero() {
            return Err(ConfigError::new("step_duration", "must be positive"));
        }
        if !(self.min_achieved_ratio > 0.0 && self.min_achieved_ratio <= 1.0) {
            return Err(ConfigError::new(
                "min_achieved_ratio",
                "must be a fraction in (0, 1]",
            ));
        }
        if !(0.0..1.0).contains(&self.max_dropped_ratio) {
            return Err(ConfigError::new(
                "max_dropped_ratio",
                "must be a fraction in [0, 1)",
            ));
        }
        Ok(())
    }
}

/// Parse a precision: `5%` or a fraction (`0.05`).
pub fn parse_precision(text: &str) -> Result<f64, ConfigError> {
    let t = text.trim();
    let value = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| ConfigError::new("precision", format!("bad value {text:?} (try 5%)")))?;
    if !(value > 0.0 && value < 1.0) {
        return Err(ConfigError::new(
            "precision",
            format!("{text:?} must be between 0 and 100% (exclusive)"),
        ));
    }
    Ok(value)
}

/// Why a search ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopCode {
    /// The passing and failing rates are within `precision` of each other.
    BracketWithinPrecision,
    /// `max` was offered and met the SLO: the capacity is at least `max`.
    MaxReachedAndPassed,
    /// `start` already failed the SLO: the capacity is below `start`.
    FirstStepFailed,
    /// `max_steps` steps ran without another stop condition.
    StepBudgetSpent,
    /// Stopped through a [`CapacityStop`].
    Stopped,
    /// A step could not be prepared or started (nothing measured at that rate).
    StepCouldNotRun,
}

/// The pure search: which rate to offer next, from the outcomes so far.
#[derive(Debug, Clone, PartialEq)]
pub struct Planner {
    max: f64,
    precision: f64,
    max_steps: u32,
    steps: u32,
    passing: Option<f64>,
    failing: Option<f64>,
    next: Option<f64>,
    stop: Option<StopCode>,
}

impl Planner {
    pub fn new(settings: &SearchSettings) -> Result<Self, ConfigError> {
        settings.validate()?;
        Ok(Self {
            max: settings.max,
            precision: settings.precision,
            max_steps: settings.max_steps,
            steps: 0,
            passing: None,
            failing: None,
            next: Some(settings.start),
            stop: None,
        })
    }

    /// The rate the next step should offer; `None` once the search has ended.
    pub fn next_rate(&self) -> Option<f64> {
        self.next
    }

    /// Records whether the step at [`Planner::next_rate`] met the SLO and picks the
    /// next rate (or ends the search). Ignored once the search has ended.
    pub fn record(&mut self, passed: bool) {
        let Some(rate) = self.next.take() else {
            return;
        };
        self.steps += 1;
        if passed {
            self.passing = Some(rate);
        } else {
            self.failing = Some(rate);
        }
        let next = match (self.passing, self.failing) {
            (Some(_), None) if rate >= self.max => {
                return self.end(StopCode::MaxReachedAndPassed);
            }
            (Some(_), None) => (rate * 2.0).min(self.max),
            (None, _) => return self.end(StopCode::FirstStepFailed),
            (Some(lo), Some(hi)) => {
                if hi - lo <= self.precision * lo {
                    return self.end(StopCode::BracketWithinPrecision);
                }
                midpoint(lo, hi)
            }
        };
        if self.steps >= self.max_steps {
            return self.end(StopCode::StepBudgetSpent);
        }
        self.next = Some(next);
    }

    /// Ends the search from outside the planner (stopped, a step that could not run).
    pub fn halt(&mut self, code: StopCode) {
        if self.stop.is_none() {
            self.end(code);
        }
    }

    fn end(&mut self, code: StopCode) {
        self.next = None;
        self.stop = Some(code);
    }

    pub fn stop_code(&self) -> Option<StopCode> {
        self.stop
    }

    /// The highest rate that met the SLO.
    pub fn best(&self) -> Option<f64> {
        self.passing
    }

    /// The lowest rate that failed it.
    pub fn lowest_failing(&self) -> Option<f64> {
        self.failing
    }

    pub fn steps(&self) -> u32 {
        self.steps
    }

    /// A sentence for people: why the search ended, with the figures.
    pub fn stop_reason(&self) -> String {
        let pct = self.precision * 100.0;
        match (self.stop, self.passing, self.failing) {
            (None, ..) => "running".to_string(),
            (Some(StopCode::BracketWithinPrecision), Some(lo), Some(hi)) => {
                format!("bracket within {pct}% ({lo}–{hi} req/s)")
            }
            (Some(StopCode::MaxReachedAndPassed), ..) => {
                format!("max rate reached and passed ({} req/s)", self.max)
            }
            (Some(StopCode::FirstStepFailed), _, Some(hi)) => {
                format!("first step failed ({hi} req/s already misses the SLO)")
            }
            (Some(StopCode::StepBudgetSpent), ..) => {
                format!("step budget spent ({} steps)", self.max_steps)
            }
            (Some(StopCode::Stopped), ..) => "stopped".to_string(),
            (Some(StopCode::StepCouldNotRun), ..) => "a step could not run".to_string(),
            (Some(code), ..) => format!("{code:?}"),
        }
    }
}

/// The rate halfway between `lo` and `hi`, a whole number when one fits strictly
/// between them (tables read better), else the exact midpoint.
fn midpoint(lo: f64, hi: f64) -> f64 {
    let mid = (lo + hi) / 2.0;
    let whole = mid.round();
    if whole > lo && whole < hi { whole } else { mid }
}

/// What made a step fail besides an SLO threshold, or why it does not count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IssueKind {
    /// Achieved rate below `min_achieved_ratio` of the offered one.
    BelowOfferedRate,
    /// More than `max_dropped_ratio` of the due requests dropped.
    TooManyDropped,
    /// Nothing was sent at all.
    NothingSent,
    /// The step was cut short by a stop.
    Stopped,
    /// The step could not be prepared or started.
    CouldNotRun,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepIssue {
    pub kind: IssueKind,
    pub message: String,
}

/// The figures [`judge_step`] needs from one step's report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepFigures {
    pub offered_rps: f64,
    pub achieved_rps: f64,
    pub sent: u64,
    pub dropped: u64,
    pub stopped: bool,
}

/// Responses per second over the step's configured length: the length the offered
/// rate is defined over. (The report's `rps` divides by the time to the last response
/// when that is shorter, which overstates a low rate by up to one request.)
pub fn achieved_rps(report: &Report) -> f64 {
    match report.duration_s {
        Some(d) if d > 0.0 => report.responses as f64 / d,
        _ => report.rps,
    }
}

impl StepFigures {
    pub fn of(offered_rps: f64, report: &Report) -> Self {
        Self {
            offered_rps,
            achieved_rps: achieved_rps(report),
            sent: report.sent,
            dropped: report.dropped,
            stopped: report.stopped,
        }
    }
}

/// Whether one step passed: every SLO verdict passed and no issue was found.
pub fn judge_step(
    figures: &StepFigures,
    verdicts: &[Verdict],
    settings: &SearchSettings,
) -> (bool, Vec<StepIssue>) {
    let mut issues = Vec::new();
    if figures.stopped {
        issues.push(StepIssue {
            kind: IssueKind::Stopped,
            message: "stopped before the step's end; not counted".to_string(),
        });
    }
    if figures.sent == 0 {
        issues.push(StepIssue {
            kind: IssueKind::NothingSent,
            message: "no request was sent".to_string(),
        });
    }
    let floor = settings.min_achieved_ratio * figures.offered_rps;
    if figures.achieved_rps < floor {
        issues.push(StepIssue {
            kind: IssueKind::BelowOfferedRate,
            message: format!(
                "achieved {:.1} req/s is below {}% of the offered {} req/s: the client or the target could not keep up",
                figures.achieved_rps,
                settings.min_achieved_ratio * 100.0,
                figures.offered_rps
            ),
        });
    }
    let due = figures.sent + figures.dropped;
    let dropped_ratio = if due == 0 {
        0.0
    } else {
        figures.dropped as f64 / due as f64
    };
    if dropped_ratio > settings.max_dropped_ratio {
        issues.push(StepIssue {
            kind: IssueKind::TooManyDropped,
            message: format!(
                "{} of {due} due requests dropped ({:.2}% > {}%): too many in flight",
                figures.dropped,
                dropped_ratio * 100.0,
                settings.max_dropped_ratio * 100.0
            ),
        });
    }
    let passed = issues.is_empty() && verdicts.iter().all(|v| v.passed);
    (passed, issues)
}

/// One finished step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityStep {
    /// 1-based.
    pub index: u32,
    /// Offered rate (req/s).
    pub rate: f64,
    /// Responses per second over the step.
    pub achieved_rps: f64,
    pub sent: u64,
    pub responses: u64,
    pub dropped: u64,
    pub error_rate: f64,
    /// Corrected latency (from the intended send time).
    pub p50_us: u64,
    pub p99_us: u64,
    pub passed: bool,
    pub verdicts: Vec<Verdict>,
    #[serde(default)]
    pub issues: Vec<StepIssue>,
    pub elapsed_s: f64,
}

impl CapacityStep {
    fn from_report(
        index: u32,
        rate: f64,
        report: &Report,
        slo: &Slo,
        settings: &SearchSettings,
    ) -> Self {
        let verdicts = slo.check(report);
        let (passed, issues) = judge_step(&StepFigures::of(rate, report), &verdicts, settings);
        Self {
            index,
            rate,
            achieved_rps: achieved_rps(report),
            sent: report.sent,
            responses: report.responses,
            dropped: report.dropped,
            error_rate: report.error_rate,
            p50_us: report.latency.p50_us,
            p99_us: report.latency.p99_us,
            passed,
            verdicts,
            issues,
            elapsed_s: report.elapsed_s,
        }
    }

    fn could_not_run(index: u32, rate: f64, error: &ConfigError) -> Self {
        Self {
            index,
            rate,
            achieved_rps: 0.0,
            sent: 0,
            responses: 0,
            dropped: 0,
            error_rate: 0.0,
            p50_us: 0,
            p99_us: 0,
            passed: false,
            verdicts: Vec::new(),
            issues: vec![StepIssue {
                kind: IssueKind::CouldNotRun,
                message: error.to_string(),
            }],
            elapsed_s: 0.0,
        }
    }
}

/// The result of a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityReport {
    pub version: u32,
    pub url: String,
    /// The highest offered rate that met the SLO; `None` when none did.
    pub best_rate: Option<f64>,
    /// The lowest offered rate that failed it, if any.
    pub lowest_failing_rate: Option<f64>,
    pub slo: Vec<String>,
    pub settings: SearchSettings,
    pub steps: Vec<CapacityStep>,
    pub stop_code: StopCode,
    pub stop_reason: String,
    pub elapsed_s: f64,
}

/// Stops a running search from any thread: the current step ends as a stopped run
/// (in-flight requests get their grace) and no further step starts.
#[derive(Clone, Default)]
pub struct CapacityStop {
    stopped: Arc<AtomicBool>,
    current: Arc<Mutex<Option<StopHandle>>>,
}

impl CapacityStop {
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        if let Some(run) = lock(&self.current).as_ref() {
            run.stop();
        }
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Publishes the running step's handle; stops it at once if a stop came first.
    fn attach(&self, run: StopHandle) {
        *lock(&self.current) = Some(run.clone());
        if self.is_stopped() {
            run.stop();
        }
    }

    fn detach(&self) {
        *lock(&self.current) = None;
    }

    /// Sleeps up to `pause`, returning early when stopped.
    fn rest(&self, pause: Duration) {
        let end = Instant::now() + pause;
        while !self.is_stopped() {
            let now = Instant::now();
            if now >= end {
                break;
            }
            std::thread::sleep((end - now).min(Duration::from_millis(50)));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Turns a step's spec into a runnable config. The default is [`RunSpec::validate`];
/// a caller whose spec needs a custom [`crate::RequestSource`] (a scenario) plugs in
/// its own.
pub type Prepare = Arc<dyn Fn(&RunSpec) -> Result<RunConfig, ConfigError> + Send + Sync>;

/// Receives every live event of every step (with the step's 1-based index), on a
/// forwarding thread per step: a daemon counts the requests of a search as it goes.
pub type EventSink = Arc<dyn Fn(u32, &RunEvent) + Send + Sync>;

/// The spec of one step: the base with an open model at `rate` for `duration`.
/// Everything else (URL, headers, body, connections, TLS, …) is the base's.
pub fn step_spec(base: &RunSpec, rate: f64, duration: Duration) -> RunSpec {
    let mut spec = base.clone();
    spec.model = LoadModel::Open {
        rate,
        stages: Vec::new(),
    };
    spec.duration = Some(duration);
    spec.iterations = None;
    spec
}

/// A capacity search ready to run.
pub struct CapacitySearch {
    base: RunSpec,
    slo: Slo,
    settings: SearchSettings,
    prepare: Prepare,
    events: Option<EventSink>,
    stop: CapacityStop,
}

impl CapacitySearch {
    pub fn new(base: RunSpec, slo: Slo, settings: SearchSettings) -> Result<Self, ConfigError> {
        settings.validate()?;
        Ok(Self {
            base,
            slo,
            settings,
            prepare: Arc::new(|spec: &RunSpec| spec.validate()),
            events: None,
            stop: CapacityStop::default(),
        })
    }

    /// Replaces how each step's spec becomes a config (see [`Prepare`]).
    pub fn with_prepare(mut self, prepare: Prepare) -> Self {
        self.prepare = prepare;
        self
    }

    /// Forwards each step's live events (ticks, seconds) to `sink`.
    pub fn with_events(mut self, sink: EventSink) -> Self {
        self.events = Some(sink);
        self
    }

    pub fn settings(&self) -> &SearchSettings {
        &self.settings
    }

    pub fn slo(&self) -> &Slo {
        &self.slo
    }

    pub fn stop_handle(&self) -> CapacityStop {
        self.stop.clone()
    }

    /// Prepares the first step (validation, DNS) without sending anything, so a bad
    /// spec is reported before a search is announced.
    pub fn check(&self) -> Result<RunConfig, ConfigError> {
        (self.prepare)(&step_spec(
            &self.base,
            self.settings.start,
            self.settings.step_duration,
        ))
    }

    /// Runs the search to its end, calling `on_step` after each finished step. Blocks:
    /// call it from a plain thread. `Err` only when the first step cannot be prepared
    /// (nothing was sent); a later step that cannot run ends the search with
    /// [`StopCode::StepCouldNotRun`].
    pub fn run(
        self,
        mut on_step: impl FnMut(&CapacityStep),
    ) -> Result<CapacityReport, ConfigError> {
        let first = self.check()?;
        let url = first.target.url_with_path(&first.target.path);
        let mut prepared = Some(first);
        let started = Instant::now();
        let mut planner = Planner::new(&self.settings)?;
        let mut steps = Vec::new();
        while let Some(rate) = planner.next_rate() {
            if self.stop.is_stopped() {
                planner.halt(StopCode::Stopped);
                break;
            }
            let index = planner.steps() + 1;
            let cfg = match prepared.take() {
                Some(cfg) => Ok(cfg),
                None => (self.prepare)(&step_spec(&self.base, rate, self.settings.step_duration)),
            };
            let handle = cfg.and_then(crate::runner::start);
            let mut handle = match handle {
                Ok(h) => h,
                Err(e) => {
                    let step = CapacityStep::could_not_run(index, rate, &e);
                    on_step(&step);
                    steps.push(step);
                    planner.halt(StopCode::StepCouldNotRun);
                    break;
                }
            };
            let forwarder = match (&self.events, handle.take_events()) {
                (Some(sink), Some(mut rx)) => {
                    let sink = Arc::clone(sink);
                    // Without the thread the events are dropped: they are a courtesy,
                    // the step's report does not depend on them.
                    std::thread::Builder::new()
                        .name(format!("gust-capacity-events-{index}"))
                        .spawn(move || {
                            while let Some(event) = rx.blocking_recv() {
                                sink(index, &event);
                            }
                        })
                        .ok()
                }
                // Nobody reads the live stream: dropping it discards the events.
                _ => None,
            };
            self.stop.attach(handle.stop_handle());
            let report = handle.wait();
            self.stop.detach();
            if let Some(t) = forwarder {
                let _ = t.join();
            }
            let step = CapacityStep::from_report(index, rate, &report, &self.slo, &self.settings);
            on_step(&step);
            let stopped = report.stopped || self.stop.is_stopped();
            let passed = step.passed;
            steps.push(step);
            if stopped {
                planner.halt(StopCode::Stopped);
                break;
            }
            planner.record(passed);
            if planner.next_rate().is_some() {
                self.stop.rest(self.settings.pause);
            }
        }
        if planner.stop_code().is_none() {
            planner.halt(StopCode::Stopped);
        }
        let stop_code = planner.stop_code().unwrap_or(StopCode::Stopped);
        let mut stop_reason = planner.stop_reason();
        if stop_code == StopCode::StepCouldNotRun
            && let Some(issue) = steps.last().and_then(|s| s.issues.first())
        {
            stop_reason = format!("a step could not run: {}", issue.message);
        }
        Ok(CapacityReport {
            version: REPORT_VERSION,
            url,
            best_rate: planner.best(),
            lowest_failing_rate: planner.lowest_failing(),
            slo: self.slo.exprs(),
            settings: self.settings,
            steps,
            stop_code,
            stop_reason,
            elapsed_s: started.elapsed().as_secs_f64(),
        })
    }
}

/// Durations as text (`"10s"`, `"250ms"`) both ways, like run specs write them.
mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}ms", d.as_secs_f64() * 1e3))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        super::parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(start: f64, max: f64) -> SearchSettings {
        SearchSettings {
            start,
            max,
            ..SearchSettings::default()
        }
    }

    /// Runs the planner against a target that passes every rate up to `capacity`.
    fn search(s: &SearchSettings, capacity: f64) -> (Vec<f64>, Planner) {
        let mut p = Planner::new(s).unwrap();
        let mut rates = Vec::new();
        while let Some(rate) = p.next_rate() {
            rates.push(rate);
            p.record(rate <= capacity);
            assert!(rates.len() <= 100, "planner does not end");
        }
        (rates, p)
    }

    #[test]
    fn grows_by_doubling_then_bisects_to_the_precision() {
        let (rates, p) = search(&settings(100.0, 100_000.0), 2000.0);
        assert_eq!(
            rates,
            vec![
                100.0, 200.0, 400.0, 800.0, 1600.0, 3200.0, 2400.0, 2000.0, 2200.0, 2100.0
            ]
        );
        assert_eq!(p.best(), Some(2000.0));
        assert_eq!(p.lowest_failing(), Some(2100.0));
        assert_eq!(p.stop_code(), Some(StopCode::BracketWithinPrecision));
        assert_eq!(p.stop_reason(), "bracket within 5% (2000–2100 req/s)");
    }

    #[test]
    fn finds_every_capacity_within_the_precision() {
        for capacity in [137.0, 999.0, 2000.0, 2050.0, 7777.0, 31_000.0] {
            let (_, p) = search(&settings(100.0, 100_000.0), capacity);
            let (lo, hi) = (p.best().unwrap(), p.lowest_failing().unwrap());
            assert!(lo <= capacity && capacity < hi, "{capacity}: {lo}..{hi}");
            assert!(hi - lo <= 0.05 * lo, "{capacity}: {lo}..{hi}");
        }
    }

    #[test]
    fn a_finer_precision_takes_more_steps() {
        let coarse = search(&settings(100.0, 100_000.0), 2050.0).0.len();
        let fine = search(
            &SearchSettings {
                precision: 0.005,
                ..settings(100.0, 100_000.0)
            },
            2050.0,
        );
        assert!(fine.0.len() > coarse);
        let (lo, hi) = (fine.1.best().unwrap(), fine.1.lowest_failing().unwrap());
        assert!(hi - lo <= 0.005 * lo);
    }

    #[test]
    fn growth_is_capped_at_max_and_a_passing_max_ends_the_search() {
        let (rates, p) = search(&settings(100.0, 500.0), 1e9);
        assert_eq!(rates, vec![100.0, 200.0, 400.0, 500.0]);
        assert_eq!(p.best(), Some(500.0));
        assert_eq!(p.stop_code(), Some(StopCode::MaxReachedAndPassed));
        assert_eq!(p.stop_reason(), "max rate reached and passed (500 req/s)");
    }

    #[test]
    fn start_equal_to_max_runs_one_step() {
        let (rates, p) = search(&settings(300.0, 300.0), 1e9);
        assert_eq!(rates, vec![300.0]);
        assert_eq!(p.stop_code(), Some(StopCode::MaxReachedAndPassed));
    }

    #[test]
    fn a_failing_max_is_bisected_below_it() {
        let (rates, p) = search(&settings(100.0, 500.0), 450.0);
        assert_eq!(&rates[..4], &[100.0, 200.0, 400.0, 500.0]);
        assert_eq!(rates[4], 450.0);
        assert_eq!(p.best(), Some(450.0));
        assert_eq!(p.stop_code(), Some(StopCode::BracketWithinPrecision));
    }

    #[test]
    fn a_failing_start_ends_at_once_with_no_best_rate() {
        let (rates, p) = search(&settings(1000.0, 100_000.0), 10.0);
        assert_eq!(rates, vec![1000.0]);
        assert_eq!(p.best(), None);
        assert_eq!(p.stop_code(), Some(StopCode::FirstStepFailed));
        assert!(p.stop_reason().starts_with("first step failed"));
    }

    #[test]
    fn the_step_budget_ends_the_search_with_the_best_so_far() {
        let s = SearchSettings {
            max_steps: 3,
            ..settings(100.0, 100_000.0)
        };
        let (rates, p) = search(&s, 2000.0);
        assert_eq!(rates, vec![100.0, 200.0, 400.0]);
        assert_eq!(p.best(), Some(400.0));
        assert_eq!(p.stop_code(), Some(StopCode::StepBudgetSpent));
    }

    #[test]
    fn a_decisive_last_step_beats_the_budget() {
        // The second step spends the budget and brackets within the precision: the
        // bracket, the more useful answer, is the reason given.
        let s = SearchSettings {
            max_steps: 2,
            ..settings(1000.0, 1040.0)
        };
        let (rates, p) = search(&s, 1000.0);
        assert_eq!(rates, vec![1000.0, 1040.0]);
        assert_eq!(p.stop_code(), Some(StopCode::BracketWithinPrecision));
    }

    #[test]
    fn halt_ends_the_search_and_record_after_it_is_ignored() {
        let mut p = Planner::new(&settings(100.0, 1000.0)).unwrap();
        p.record(true);
        p.halt(StopCode::Stopped);
        assert_eq!(p.next_rate(), None);
        p.record(true);
        assert_eq!(p.steps(), 1);
        p.halt(StopCode::StepCouldNotRun);
        assert_eq!(p.stop_code(), Some(StopCode::Stopped));
        assert_eq!(p.best(), Some(100.0));
    }

    #[test]
    fn midpoints_are_whole_rates_when_one_fits() {
        assert_eq!(midpoint(2000.0, 2125.0), 2063.0);
        assert_eq!(midpoint(10.0, 11.0), 10.5);
        assert_eq!(midpoint(0.5, 0.75), 0.625);
    }

    #[test]
    fn fractional_rates_are_searched_too() {
        let (_, p) = search(&settings(0.5, 100.0), 3.3);
        let (lo, hi) = (p.best().unwrap(), p.lowest_failing().unwrap());
        assert!(lo <= 3.3 && 3.3 < hi && hi - lo <= 0.05 * lo, "{lo}..{hi}");
    }

    fn figures(achieved: f64, sent: u64, dropped: u64) -> StepFigures {
        StepFigures {
            offered_rps: 1000.0,
            achieved_rps: achieved,
            sent,
            dropped,
            stopped: false,
        }
    }

    fn verdict(passed: bool) -> Verdict {
        Verdict {
            expr: "errors<1%".into(),
            actual: 0.0,
            limit: 0.01,
            passed,
        }
    }

    #[test]
    fn a_step_passes_when_the_slo_holds_and_the_rate_was_delivered() {
        let s = SearchSettings::default();
        let (passed, issues) = judge_step(&figures(995.0, 10_000, 0), &[verdict(true)], &s);
        assert!(passed);
        assert!(issues.is_empty());
    }

    #[test]
    fn a_violated_threshold_fails_the_step() {
        let s = SearchSettings::default();
        let (passed, issues) = judge_step(&figures(1000.0, 10_000, 0), &[verdict(false)], &s);
        assert!(!passed);
        assert!(issues.is_empty());
    }

    #[test]
    fn an_achieved_rate_well_below_the_offered_one_fails_the_step() {
        let s = SearchSettings::default();
        let (passed, issues) = judge_step(&figures(850.0, 8_500, 0), &[verdict(true)], &s);
        assert!(!passed);
        assert_eq!(issues[0].kind, IssueKind::BelowOfferedRate);
        assert!(issues[0].message.contains("could not keep up"));
        // Exactly at the floor still passes.
        let (passed, _) = judge_step(&figures(900.0, 9_000, 0), &[verdict(true)], &s);
        assert!(passed);
    }

    #[test]
    fn many_dropped_requests_fail_the_step() {
        let s = SearchSettings::default();
        let (passed, issues) = judge_step(&figures(950.0, 9_500, 500), &[verdict(true)], &s);
        assert!(!passed);
        assert_eq!(issues[0].kind, IssueKind::TooManyDropped);
        let (passed, _) = judge_step(&figures(1000.0, 10_000, 50), &[verdict(true)], &s);
        assert!(passed, "0.5% dropped is within 1%");
    }

    #[test]
    fn a_stopped_or_empty_step_does_not_pass() {
        let s = SearchSettings::default();
        let mut f = figures(1000.0, 1000, 0);
        f.stopped = true;
        let (passed, issues) = judge_step(&f, &[verdict(true)], &s);
        assert!(!passed);
        assert_eq!(issues[0].kind, IssueKind::Stopped);
        let (passed, issues) = judge_step(&figures(0.0, 0, 0), &[], &s);
        assert!(!passed);
        assert!(issues.iter().any(|i| i.kind == IssueKind::NothingSent));
    }

    #[test]
    fn slo_parses_a_comma_separated_list() {
        let slo = Slo::parse("p99<50ms, errors<1%").unwrap();
        assert_eq!(slo.exprs(), vec!["p99<50ms", "errors<1%"]);
    }

    #[test]
    fn rejects_an_empty_slo() {
        assert_eq!(Slo::parse(" , ").unwrap_err().field, "slo");
        assert_eq!(Slo::parse("").unwrap_err().field, "slo");
    }

    #[test]
    fn rejects_a_bad_slo_threshold() {
        let e = Slo::parse("p99<50ms,latency<1s").unwrap_err();
        assert_eq!(e.field, "slo");
        assert!(e.reason.contains("latency"), "{e}");
    }

    fn rejected(s: SearchSettings) -> &'static str {
        Planner::new(&s).unwrap_err().field
    }

    #[test]
    fn rejects_a_non_positive_or_non_finite_start() {
        assert_eq!(rejected(settings(0.0, 10.0)), "start");
        assert_eq!(rejected(settings(-5.0, 10.0)), "start");
        assert_eq!(rejected(settings(f64::NAN, 10.0)), "start");
        assert_eq!(rejected(settings(f64::INFINITY, 10.0)), "start");
    }

    #[test]
    fn rejects_a_max_below_start_or_infinite() {
        assert_eq!(rejected(settings(100.0, 50.0)), "max");
        assert_eq!(rejected(settings(100.0, f64::INFINITY)), "max");
    }

    #[test]
    fn rejects_a_precision_outside_zero_to_one() {
        for precision in [0.0, 1.0, -0.1, 5.0, f64::NAN] {
            let s = SearchSettings {
                precision,
                ..SearchSettings::default()
            };
            assert_eq!(rejected(s), "precision", "{precision}");
        }
    }

    #[test]
    fn rejects_a_zero_step_budget() {
        let s = SearchSettings {
            max_steps: 0,
            ..SearchSettings::default()
        };
        assert_eq!(rejected(s), "max_steps");
    }

    #[test]
    fn rejects_a_zero_step_duration() {
        let s = SearchSettings {
            step_duration: Duration::ZERO,
            ..SearchSettings::default()
        };
        assert_eq!(rejected(s), "step_duration");
    }

    #[test]
    fn rejects_bad_achieved_and_dropped_ratios() {
        let s = SearchSettings {
            min_achieved_ratio: 0.0,
            ..SearchSettings::default()
        };
        assert_eq!(rejected(s), "min_achieved_ratio");
        let s = SearchSettings {
            min_achieved_ratio: 1.5,
            ..SearchSettings::default()
        };
        assert_eq!(rejected(s), "min_achieved_ratio");
        let s = SearchSettings {
            max_dropped_ratio: 1.0,
            ..SearchSettings::default()
        };
        assert_eq!(rejected(s), "max_dropped_ratio");
    }

    #[test]
    fn parses_precision_as_percent_or_fraction() {
        assert_eq!(parse_precision("5%").unwrap(), 0.05);
        assert_eq!(parse_precision("0.02").unwrap(), 0.02);
    }

    #[test]
    fn rejects_a_bad_precision_text() {
        assert_eq!(parse_precision("five").unwrap_err().field, "precision");
        assert_eq!(parse_precision("0%").unwrap_err().field, "precision");
        assert_eq!(parse_precision("100%").unwrap_err().field, "precision");
        assert_eq!(parse_precision("5").unwrap_err().field, "precision");
    }

    #[test]
    fn rejects_unknown_settings_keys() {
        let e = serde_json::from_str::<SearchSettings>(r#"{"strat": 10}"#).unwrap_err();
        assert!(e.to_string().contains("strat"), "{e}");
    }

    #[test]
    fn settings_round_trip_through_json_with_text_durations() {
        let s = SearchSettings {
            step_duration: Duration::from_millis(2500),
            ..SearchSettings::default()
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["step_duration"], "2500ms");
        let back: SearchSettings = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
        let partial: SearchSettings =
            serde_json::from_str(r#"{"start": 50, "step_duration": "2s"}"#).unwrap();
        assert_eq!(partial.start, 50.0);
        assert_eq!(partial.step_duration, Duration::from_secs(2));
        assert_eq!(partial.max, SearchSettings::default().max);
    }

    #[test]
    fn a_step_spec_is_the_base_with_an_open_model_and_the_step_duration() {
        let mut base = RunSpec::new(
            "http://127.0.0.1:1/x",
            LoadModel::Closed {
                concurrency: 4,
                stages: Vec::new(),
                think_time: Default::default(),
            },
        );
        base.iterations = Some(10);
        base.headers = vec![("A".into(), "b".into())];
        let s = step_spec(&base, 250.0, Duration::from_secs(3));
        assert_eq!(
            s.model,
            LoadModel::Open {
                rate: 250.0,
                stages: Vec::new()
            }
        );
        assert_eq!(s.duration, Some(Duration::from_secs(3)));
        assert_eq!(s.iterations, None);
        assert_eq!(s.headers, base.headers);
        assert!(s.validate().is_ok());
    }
}
