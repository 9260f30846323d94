//! One worker's state, owned by its thread: interval stats, its request source,
//! the HTTP/1.1 connection pool of the open model, its HTTP/2 connections, and the
//! guard that keeps the in-flight gauge and the sent count honest.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::oneshot;

use crate::http1::H1Conn;
use crate::metrics::steps::ScenarioStats;
use crate::metrics::{ErrorClass, IntervalStats, PhaseStats};
use crate::runner::shared::{Shared, WorkerMsg};
use crate::scenario::VuState;
use crate::schedule::Rng;
use crate::source::{ResponseInterest, WorkerSource};
use crate::transport::{H2Sender, Stream};

pub(super) type Conn = H1Conn<Stream>;

/// A worker's part of a global budget: `total` split over `parts` as evenly as
/// possible, so the parts add up to exactly `total`.
fn share(total: usize, parts: usize, index: usize) -> usize {
    total / parts + usize::from(index < total % parts)
}

/// Idle HTTP/1.1 connections of one worker (open model), with a FIFO of requests
/// waiting for one. A lease is either a reused connection or the right to open one.
struct Pool {
    idle: Vec<Conn>,
    open: usize,
    budget: usize,
    waiters: VecDeque<oneshot::Sender<Lease>>,
}

pub(super) enum Lease {
    Reuse(Conn),
    Fresh,
}

pub(super) struct Worker {
    pub(super) shared: Arc<Shared>,
    pub(super) index: usize,
    pub(super) stats: RefCell<IntervalStats>,
    /// Cumulative for the whole run; handed to the aggregator once, when the worker ends.
    pub(super) phases: RefCell<PhaseStats>,
    pub(super) source: RefCell<Box<dyn WorkerSource>>,
    pub(super) interest: ResponseInterest,
    pool: RefCell<Pool>,
    pub(super) h2: Vec<tokio::sync::Mutex<Option<H2Sender>>>,
    pub(super) h2_next: Cell<usize>,
    next_tick: Cell<u64>,
    pub(super) next_seq: Cell<u64>,
    pub(super) outstanding: Cell<usize>,
    pub(super) idle_notify: tokio::sync::Notify,
    pub(super) rng: RefCell<Rng>,
    /// Open-model scenario: idle VU states, reused by later arrivals.
    pub(super) vus: RefCell<Vec<VuState>>,
}

impl Worker {
    /// Worker `index` of the run. Must be called on the worker's own thread: it asks
    /// the run's source for this worker's [`WorkerSource`].
    pub(super) fn new(shared: Arc<Shared>, index: usize) -> Self {
        let cfg = &shared.cfg;
        let source = cfg.source.for_worker(index);
        let interest = source.interest();
        let h2_conns = if cfg.http2 {
            share(cfg.connections, shared.workers, index).max(1)
        } else {
            0
        };
        let mut stats = IntervalStats::new();
        if let Some(sc) = &cfg.scenario {
            stats.scenario = ScenarioStats::with_steps(sc.steps.len());
        }
        Worker {
            index,
            stats: RefCell::new(stats),
            phases: RefCell::new(PhaseStats::new()),
            source: RefCell::new(source),
            interest,
            pool: RefCell::new(Pool {
                idle: Vec::new(),
                open: 0,
                budget: share(cfg.connections, shared.workers, index),
                waiters: VecDeque::new(),
            }),
            h2: (0..h2_conns)
                .map(|_| tokio::sync::Mutex::new(None))
                .collect(),
            h2_next: Cell::new(0),
            next_tick: Cell::new(0),
            next_seq: Cell::new(0),
            outstanding: Cell::new(0),
            idle_notify: tokio::sync::Notify::new(),
            rng: RefCell::new(Rng::new(index as u64 + 1)),
            vus: RefCell::new(Vec::new()),
            shared,
        }
    }

    /// The tick index whose interval is being recorded now.
    pub(super) fn next_tick(&self) -> u64 {
        self.next_tick.get()
    }

    /// Hand the current interval to the aggregator under the next tick index.
    pub(super) fn flush(&self) {
        let n = self.next_tick.get();
        let snapshot = {
            let mut stats = self.stats.borrow_mut();
            let snapshot = stats.clone();
            stats.reset();
            snapshot
        };
        self.next_tick.set(n + 1);
        let _ = self.shared.tx.send(WorkerMsg::Tick {
            worker: self.index,
            index: n,
            stats: Box::new(snapshot),
        });
    }

    pub(super) async fn acquire(&self) -> Lease {
        let rx = {
            let mut pool = self.pool.borrow_mut();
            if let Some(c) = pool.idle.pop() {
                return Lease::Reuse(c);
            }
            if pool.open < pool.budget {
                pool.open += 1;
                return Lease::Fresh;
            }
            let (tx, rx) = oneshot::channel();
            pool.waiters.push_back(tx);
            rx
        };
        // The pool never drops a waiter's sender without sending, except when the
        // worker is shutting down; then opening a connection is moot.
        rx.await.unwrap_or(Lease::Fresh)
    }

    pub(super) fn release(&self, conn: Option<Conn>) {
        let mut pool = self.pool.borrow_mut();
        let mut lease = match conn {
            Some(c) => Lease::Reuse(c),
            None => Lease::Fresh,
        };
        while let Some(waiter) = pool.waiters.pop_front() {
            match waiter.send(lease) {
                Ok(()) => return,
                Err(back) => lease = back,
            }
        }
        match lease {
            Lease::Reuse(c) => pool.idle.push(c),
            Lease::Fresh => pool.open -= 1,
        }
    }

    /// Counts a request that ended without a response. One that failed before
    /// reaching the wire (refused, TLS, cancelled while queued) still counts as
    /// sent: it was issued and it failed.
    pub(super) fn record_failure(&self, wrote: bool, class: ErrorClass) {
        let mut stats = self.stats.borrow_mut();
        if !wrote {
            stats.sent += 1;
        }
        stats.record_error(class);
    }
}

/// Keeps the in-flight gauge honest and reports a request as cancelled if its future
/// is dropped (grace expired) before it finished.
pub(super) struct FlightGuard<'a> {
    worker: &'a Worker,
    pub(super) finished: bool,
    /// Set once the request reached the wire (and was counted as sent).
    pub(super) wrote: Cell<bool>,
}

impl<'a> FlightGuard<'a> {
    pub(super) fn new(worker: &'a Worker) -> Self {
        Self {
            worker,
            finished: false,
            wrote: Cell::new(false),
        }
    }
}

impl Drop for FlightGuard<'_> {
    fn drop(&mut self) {
        self.worker.shared.in_flight.fetch_sub(1, Ordering::Relaxed);
        if !self.finished {
            self.worker
                .record_failure(self.wrote.get(), ErrorClass::Cancelled);
        }
    }
}
