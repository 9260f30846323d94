//! Per-step and per-iteration counters of a scenario run. They ride inside the
//! worker's interval stats, so they are merged exactly like the run's totals
//! (per-worker interval → aggregator → report) and cost nothing on plain runs
//! (an empty vector).

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::metrics::{ErrorClass, LatencySummary, error_rate, new_histogram};

/// One step's counters for one interval of one worker (or a merge).
#[derive(Debug, Clone)]
pub struct StepStats {
    /// Same values as the run's `latency` histogram records for these requests.
    pub latency: Histogram<u64>,
    pub sent: u64,
    pub successes: u64,
    pub failures: u64,
    /// Failures caused by a content check or an extraction (a subset of `failures`).
    pub check_failures: u64,
    /// Not sent because an earlier step of the iteration failed.
    pub skipped: u64,
    pub status: BTreeMap<u16, u64>,
    pub errors: [u64; ErrorClass::ALL.len()],
}

impl Default for StepStats {
    fn default() -> Self {
        Self {
            latency: new_histogram(),
            sent: 0,
            successes: 0,
            failures: 0,
            check_failures: 0,
            skipped: 0,
            status: BTreeMap::new(),
            errors: [0; ErrorClass::ALL.len()],
        }
    }
}

impl StepStats {
    pub fn record_response(&mut self, status: u16, success: bool, check_failed: bool, us: u64) {
        *self.status.entry(status).or_default() += 1;
        if success {
            self.successes += 1;
        } else {
            self.failures += 1;
        }
        if check_failed {
            self.check_failures += 1;
        }
        self.latency.saturating_record(us.max(1));
    }

    pub fn record_error(&mut self, class: ErrorClass) {
        self.errors[class as usize] += 1;
        self.failures += 1;
    }

    fn merge(&mut self, o: &StepStats) {
        let _ = self.latency.add(&o.latency);
        self.sent += o.sent;
        self.successes += o.successes;
        self.failures += o.failures;
        self.check_failures += o.check_failures;
        self.skipped += o.skipped;
        for (k, v) in &o.status {
            *self.status.entry(*k).or_default() += v;
        }
        for (a, b) in self.errors.iter_mut().zip(&o.errors) {
            *a += b;
        }
    }

    fn reset(&mut self) {
        self.latency.reset();
        self.sent = 0;
        self.successes = 0;
        self.failures = 0;
        self.check_failures = 0;
        self.skipped = 0;
        self.status.clear();
        self.errors = [0; ErrorClass::ALL.len()];
    }
}

/// Scenario counters of one interval; empty (no steps) on plain runs.
#[derive(Debug, Clone, Default)]
pub struct ScenarioStats {
    pub steps: Vec<StepStats>,
    pub iterations: u64,
    pub completed: u64,
    pub failed: u64,
    /// A `unique` data file ran out: closed model, VUs that stopped; open model,
    /// arrivals that found no row and ran nothing.
    pub data_exhausted: u64,
}

impl ScenarioStats {
    pub fn with_steps(n: usize) -> Self {
        Self {
            steps: (0..n).map(|_| StepStats::default()).collect(),
            ..Self::default()
        }
    }

    pub fn merge(&mut self, o: &ScenarioStats) {
        if self.steps.len() < o.steps.len() {
            self.steps.resize_with(o.steps.len(), StepStats::default);
        }
        for (a, b) in self.steps.iter_mut().zip(&o.steps) {
            a.merge(b);
        }
        self.iterations += o.iterations;
        self.completed += o.completed;
        self.failed += o.failed;
        self.data_exhausted += o.data_exhausted;
    }

    pub fn reset(&mut self) {
        for s in &mut self.steps {
            s.reset();
        }
        self.iterations = 0;
        self.completed = 0;
        self.failed = 0;
        self.data_exhausted = 0;
    }
}

/// One step in the report (`steps[]` of the JSON report).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepReport {
    pub name: String,
    pub sent: u64,
    pub responses: u64,
    pub successes: u64,
    pub failures: u64,
    pub check_failures: u64,
    pub skipped: u64,
    pub error_rate: f64,
    pub status: BTreeMap<String, u64>,
    pub errors: BTreeMap<String, u64>,
    pub latency: LatencySummary,
    #[serde(skip, default = "new_histogram")]
    pub latency_histogram: Histogram<u64>,
}

impl StepReport {
    pub fn of(name: &str, s: &StepStats) -> Self {
        Self {
            name: name.to_string(),
            sent: s.sent,
            responses: s.status.values().sum(),
            successes: s.successes,
            failures: s.failures,
            check_failures: s.check_failures,
            skipped: s.skipped,
            error_rate: error_rate(s.failures, s.successes),
            status: s.status.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            errors: ErrorClass::ALL
                .iter()
                .filter(|c| s.errors[**c as usize] > 0)
                .map(|c| (c.as_str().to_string(), s.errors[*c as usize]))
                .collect(),
            latency: LatencySummary::of(&s.latency),
            latency_histogram: s.latency.clone(),
        }
    }
}

/// Iteration counts of a scenario run (`iterations` of the JSON report).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct IterationSummary {
    pub started: u64,
    pub completed: u64,
    pub failed: u64,
    /// Closed: VUs stopped because a `unique` data file ran out; open: arrivals not run.
    pub data_exhausted: u64,
}

impl IterationSummary {
    pub fn of(s: &ScenarioStats) -> Self {
        Self {
            started: s.iterations,
            completed: s.completed,
            failed: s.failed,
            data_exhausted: s.data_exhausted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_adds_steps_and_grows_an_empty_accumulator() {
        let mut a = ScenarioStats::default();
        let mut b = ScenarioStats::with_steps(2);
        b.steps[1].sent = 2;
        b.steps[1].record_response(200, true, false, 100);
        b.steps[1].record_response(500, false, false, 100);
        b.steps[0].record_error(ErrorClass::Reset);
        b.iterations = 2;
        a.merge(&b);
        a.merge(&b);
        assert_eq!(a.steps.len(), 2);
        let r = StepReport::of("x", &a.steps[1]);
        assert_eq!((r.sent, r.responses, r.failures), (4, 4, 2));
        assert_eq!(r.status["500"], 2);
        assert_eq!(StepReport::of("y", &a.steps[0]).errors["reset"], 2);
        assert_eq!(a.iterations, 4);
        a.reset();
        assert_eq!(a.steps[1].sent, 0);
        assert!(a.steps[1].latency.is_empty());
    }
}
