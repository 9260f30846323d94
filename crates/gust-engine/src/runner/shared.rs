//! What every worker of a run shares: the validated configuration, the connector,
//! the clock and deadline, the in-flight gauge, the stop signal and the channel to
//! the aggregator. Only atomics change during the run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::RunConfig;
use crate::metrics::{IntervalStats, PhaseStats};
use crate::source::Request;
use crate::transport::Connector;

/// What a worker thread tells the aggregator.
pub(super) enum WorkerMsg {
    Tick {
        worker: usize,
        index: u64,
        stats: Box<IntervalStats>,
    },
    Done {
        worker: usize,
        cpu: Duration,
        phases: Box<PhaseStats>,
    },
}

pub(super) struct Shared {
    pub(super) cfg: RunConfig,
    pub(super) workers: usize,
    pub(super) connector: Connector,
    pub(super) start: Instant,
    /// `start` on the wall clock (the report's time origin, for merging segments).
    pub(super) start_wall: std::time::SystemTime,
    /// How far past `start_at` the run started, when it was late.
    pub(super) start_late: Option<Duration>,
    pub(super) deadline: Option<Instant>,
    pub(super) in_flight: AtomicU64,
    pub(super) peak_in_flight: AtomicU64,
    /// Closed model: next global sequence number / iteration ticket.
    pub(super) tickets: AtomicU64,
    /// Scenario data file: the run's row cursor (sequential and unique modes).
    pub(super) data_cursor: AtomicU64,
    /// Static source encoded once for HTTP/1.1.
    pub(super) static_h1: Option<Bytes>,
    pub(super) static_req: Option<Request>,
    pub(super) is_head: bool,
    pub(super) stop: watch::Receiver<bool>,
    /// Mirror of `stop` for the hot path: a relaxed load instead of the watch lock.
    pub(super) stopped: Arc<AtomicBool>,
    pub(super) tx: mpsc::Sender<WorkerMsg>,
}

impl Shared {
    pub(super) fn enter_flight(&self) {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        // Read before writing: the peak rarely changes, and a plain load keeps the
        // cache line shared between workers.
        if now > self.peak_in_flight.load(Ordering::Relaxed) {
            self.peak_in_flight.fetch_max(now, Ordering::Relaxed);
        }
    }

    /// Admit a request unless `max_in_flight` is reached.
    pub(super) fn try_enter_flight(&self, max: usize) -> bool {
        let max = max as u64;
        let admitted = self
            .in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            });
        match admitted {
            Ok(prev) => {
                self.peak_in_flight.fetch_max(prev + 1, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
    }

    pub(super) fn past_deadline(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| now >= d) || self.stopped.load(Ordering::Relaxed)
    }

    pub(super) fn elapsed_us(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.start).as_micros() as u64
    }
}
