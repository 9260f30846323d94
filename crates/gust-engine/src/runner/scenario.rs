//! Scenario execution. Closed model: each slot is a virtual user (VU) that runs the
//! steps in order, iteration after iteration, on its own connection. Open model: each
//! arrival runs one iteration with an idle VU state taken from the worker's pool (a
//! new VU, when none is idle, runs its `once` steps first) on a pooled connection.
//!
//! Latency: in the open model only the first step of an arrival is measured from its
//! intended time (coordinated-omission correction: that is the request the schedule
//! promised); later steps are measured from when the VU issued them, since their
//! start depends on the earlier responses by design.
//!
//! `in_flight` counts iterations in progress (busy VUs), so `max_in_flight` bounds
//! concurrent iterations in the open model.
//!
//! A step that fails (transport error, status outside its set, failed check or
//! extraction) ends the iteration; the steps it would still have run are counted as
//! `skipped`.

use std::cell::Cell;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::time::Instant;

use crate::metrics::ErrorClass;
use crate::runner::exchange::{StepCall, within_timeout};
use crate::runner::turns::{next_closed_turn, pause_within_run, think_within_run};
use crate::runner::worker::{Conn, Lease, Worker};
use crate::scenario::{Scenario, VuState, render_ctx};
use crate::schedule::Profile;
use crate::spec::{LoadModel, ThinkTime};

fn record_step_error(worker: &Worker, step: usize, wrote: bool, class: ErrorClass) {
    worker.record_failure(wrote, class);
    if let Some(s) = worker.stats.borrow_mut().scenario.steps.get_mut(step) {
        s.sent += 1;
        s.record_error(class);
    }
}

/// Keeps the in-flight gauge (iterations) honest and counts the step in flight as
/// cancelled if the iteration is dropped (grace expired) before it finished.
struct IterationGuard<'a> {
    worker: &'a Worker,
    pending: Cell<Option<usize>>,
    wrote: Cell<bool>,
}

impl<'a> IterationGuard<'a> {
    fn new(worker: &'a Worker) -> Self {
        Self {
            worker,
            pending: Cell::new(None),
            wrote: Cell::new(false),
        }
    }
}

impl Drop for IterationGuard<'_> {
    fn drop(&mut self) {
        self.worker.shared.in_flight.fetch_sub(1, Ordering::Relaxed);
        if let Some(step) = self.pending.get() {
            record_step_error(self.worker, step, self.wrote.get(), ErrorClass::Cancelled);
        }
    }
}

enum StepResult {
    Passed,
    Failed,
    /// The run ended while connecting (closed model): nothing was sent.
    Stopped,
}

enum IterationEnd {
    Completed,
    Failed,
    Stopped,
    DataExhausted,
}

/// Send one step and record the outcome, bounded by the request timeout.
async fn perform_step(
    worker: &Worker,
    conn: &mut Option<Conn>,
    call: &mut StepCall<'_>,
    seq: u64,
    intended: Instant,
    wrote: &Cell<bool>,
    timer: Option<Pin<&mut tokio::time::Sleep>>,
) -> StepResult {
    let index = call.index;
    let result = {
        let exchange = worker.exchange_with(conn, seq, intended, wrote, Some(&mut *call));
        within_timeout(worker.shared.cfg.timeout, timer, exchange).await
    };
    let class = match result {
        Ok(Ok(())) => {
            return match &call.verdict {
                Some(v) if v.passed() => StepResult::Passed,
                _ => StepResult::Failed,
            };
        }
        Ok(Err(ErrorClass::Cancelled))
            if matches!(worker.shared.cfg.model, LoadModel::Closed { .. }) =>
        {
            return StepResult::Stopped;
        }
        Ok(Err(class)) => class,
        Err(()) => ErrorClass::Timeout,
    };
    *conn = None;
    record_step_error(worker, index, wrote.get(), class);
    StepResult::Failed
}

/// One iteration of `vu`: the steps in order (`once` steps only until they have
/// passed for this VU), ending at the first failure.
#[allow(clippy::too_many_arguments)]
async fn run_iteration(
    worker: &Worker,
    sc: &Scenario,
    vu: &mut VuState,
    seq: u64,
    mut first_intended: Option<Instant>,
    conn: &mut Option<Conn>,
    mut timer: Option<Pin<&mut tokio::time::Sleep>>,
    guard: &IterationGuard<'_>,
) -> IterationEnd {
    let shared = &worker.shared;
    let row = match &sc.data {
        None => None,
        Some(d) => match d.pick(
            &shared.data_cursor,
            &mut worker.rng.borrow_mut(),
            &shared.cfg.segment,
        ) {
            Some(i) => d.rows.get(i).map(Vec::as_slice),
            None => return IterationEnd::DataExhausted,
        },
    };
    worker.stats.borrow_mut().scenario.iterations += 1;
    for (i, step) in sc.steps.iter().enumerate() {
        if step.once && vu.initialized {
            continue;
        }
        let now = Instant::now();
        if shared.past_deadline(now) {
            return IterationEnd::Stopped;
        }
        let request = {
            let mut rng = worker.rng.borrow_mut();
            step.render(&mut render_ctx(seq, row, &vu.vars, &mut rng))
        };
        let intended = first_intended.take().unwrap_or(now);
        let mut call = StepCall {
            index: i,
            step,
            request: Some(request),
            vars: &mut vu.vars,
            verdict: None,
        };
        guard.pending.set(Some(i));
        guard.wrote.set(false);
        let result = perform_step(
            worker,
            conn,
            &mut call,
            seq,
            intended,
            &guard.wrote,
            timer.as_mut().map(|t| t.as_mut()),
        )
        .await;
        guard.pending.set(None);
        match result {
            StepResult::Passed => {}
            StepResult::Stopped => return IterationEnd::Stopped,
            StepResult::Failed => {
                let initialized = vu.initialized;
                let mut stats = worker.stats.borrow_mut();
                for (later, s) in sc.steps.iter().enumerate().skip(i + 1) {
                    if !(s.once && initialized)
                        && let Some(st) = stats.scenario.steps.get_mut(later)
                    {
                        st.skipped += 1;
                    }
                }
                stats.scenario.failed += 1;
                return IterationEnd::Failed;
            }
        }
        if step.once && !sc.steps[i + 1..].iter().any(|s| s.once) {
            vu.initialized = true;
        }
        if let Some(think) = step.think
            && !pause_within_run(worker, think).await
        {
            return IterationEnd::Stopped;
        }
    }
    worker.stats.borrow_mut().scenario.completed += 1;
    IterationEnd::Completed
}

/// Closed model: one VU, iterating until the deadline, the iteration budget, a stop
/// or (with a `unique` data file) the end of the data.
pub(super) async fn closed_vu(
    worker: Rc<Worker>,
    scenario: Arc<Scenario>,
    slot: usize,
    profile: Option<Profile>,
    think: ThinkTime,
) {
    let shared = Arc::clone(&worker.shared);
    let mut vu = scenario.new_vu();
    let mut conn: Option<Conn> = None;
    let timer = tokio::time::sleep(shared.cfg.timeout);
    tokio::pin!(timer);
    // `iterations` counts scenario iterations.
    while let Some((_, seq)) = next_closed_turn(&worker, slot, profile.as_ref(), &mut conn).await {
        shared.enter_flight();
        let guard = IterationGuard::new(&worker);
        let end = run_iteration(
            &worker,
            &scenario,
            &mut vu,
            seq,
            None,
            &mut conn,
            Some(timer.as_mut()),
            &guard,
        )
        .await;
        drop(guard);
        match end {
            IterationEnd::Completed | IterationEnd::Failed => {}
            IterationEnd::Stopped => break,
            IterationEnd::DataExhausted => {
                worker.stats.borrow_mut().scenario.data_exhausted += 1;
                break;
            }
        }
        if !think_within_run(&worker, think).await {
            break;
        }
    }
}

/// Open model: one admitted arrival (already counted in flight) runs one iteration.
pub(super) async fn open_iteration(worker: Rc<Worker>, seq: u64, intended: Instant) {
    let Some(scenario) = worker.shared.cfg.scenario.clone() else {
        return;
    };
    {
        let guard = IterationGuard::new(&worker);
        let mut vu = worker
            .vus
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| scenario.new_vu());
        let http2 = worker.shared.cfg.http2;
        let mut conn = if http2 {
            None
        } else {
            match worker.acquire().await {
                Lease::Reuse(c) => Some(c),
                Lease::Fresh => None,
            }
        };
        let end = run_iteration(
            &worker,
            &scenario,
            &mut vu,
            seq,
            Some(intended),
            &mut conn,
            None,
            &guard,
        )
        .await;
        if !http2 {
            worker.release(conn);
        }
        worker.vus.borrow_mut().push(vu);
        if let IterationEnd::DataExhausted = end {
            worker.stats.borrow_mut().scenario.data_exhausted += 1;
        }
        drop(guard);
    }
    worker.outstanding.set(worker.outstanding.get() - 1);
    if worker.outstanding.get() == 0 {
        worker.idle_notify.notify_waiters();
    }
}
