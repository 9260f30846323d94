//! The two load models as worker tasks: closed slots that send their next request
//! when the previous one completes, and the open-model generator that releases each
//! request at its scheduled due time whatever the responses do.

use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::time::Instant;

use crate::pacer::Pacer;
use crate::runner::turns::{next_closed_turn, think_within_run};
use crate::runner::worker::{Conn, FlightGuard, Lease, Worker};
use crate::schedule::{OpenSchedule, Profile};
use crate::spec::ThinkTime;

/// One closed-model slot: a loop of request, response, think time until the
/// deadline, the iteration budget or a stop. Staged runs park the slot while the
/// profile has it inactive.
pub(super) async fn closed_slot(
    worker: Rc<Worker>,
    slot: usize,
    profile: Option<Profile>,
    think: ThinkTime,
) {
    let shared = Arc::clone(&worker.shared);
    let mut conn: Option<Conn> = None;
    let timer = tokio::time::sleep(shared.cfg.timeout);
    tokio::pin!(timer);
    while let Some((now, seq)) = next_closed_turn(&worker, slot, profile.as_ref(), &mut conn).await
    {
        shared.enter_flight();
        let mut guard = FlightGuard::new(&worker);
        worker
            .perform(&mut conn, seq, now, &guard.wrote, Some(timer.as_mut()))
            .await;
        guard.finished = true;
        drop(guard);
        if !think_within_run(&worker, think).await {
            break;
        }
    }
}

/// The open-model generator of one worker: it releases every `workers`-th
/// request of the schedule at its due time, drops those over `max_in_flight`, and
/// returns once all it released have finished.
pub(super) async fn open_generator(worker: Rc<Worker>, profile: Profile) {
    let shared = Arc::clone(&worker.shared);
    let cfg = &shared.cfg;
    let mut schedule = OpenSchedule::new(profile);
    let pacer = Pacer::new();
    let mut stop = shared.stop.clone();
    // `local` counts this process's requests (the worker takes every `workers`-th);
    // `k`, the request's number in the run-wide schedule, sets its due time.
    let segment = cfg.segment;
    let limit = cfg.iterations.map(|m| segment.count_below(m));
    let mut local = worker.index as u64;
    let step = shared.workers as u64;
    loop {
        if limit.is_some_and(|m| local >= m) {
            break;
        }
        let k = segment.global(local);
        let Some(due) = schedule.due(k) else { break };
        if cfg.duration.is_some_and(|d| due >= d) {
            break;
        }
        let due_at = shared.start + due;
        if due_at > Instant::now() {
            tokio::select! {
                _ = pacer.sleep_until(due_at) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        let now = Instant::now();
        if shared.past_deadline(now) {
            if shared.stopped.load(Ordering::Relaxed) {
                break;
            }
            // Came due before the deadline but the generator only got here after it:
            // it is not sent, and counts as dropped so sent + dropped stays exact.
            worker.stats.borrow_mut().dropped += 1;
            local += step;
            continue;
        }
        worker
            .stats
            .borrow_mut()
            .record_lag(now.saturating_duration_since(due_at).as_micros() as u64);
        if !shared.try_enter_flight(cfg.max_in_flight) {
            worker.stats.borrow_mut().dropped += 1;
        } else {
            worker.outstanding.set(worker.outstanding.get() + 1);
            if cfg.scenario.is_some() {
                tokio::task::spawn_local(super::scenario::open_iteration(
                    Rc::clone(&worker),
                    k,
                    due_at,
                ));
            } else {
                tokio::task::spawn_local(open_request(Rc::clone(&worker), k, due_at));
            }
        }
        local += step;
    }
    while worker.outstanding.get() > 0 {
        worker.idle_notify.notified().await;
    }
}

/// One released open-model request, on a pooled HTTP/1.1 connection or over HTTP/2.
async fn open_request(worker: Rc<Worker>, seq: u64, intended: Instant) {
    let mut guard = FlightGuard::new(&worker);
    if worker.shared.cfg.http2 {
        worker
            .perform(&mut None, seq, intended, &guard.wrote, None)
            .await;
    } else {
        let mut conn = match worker.acquire().await {
            Lease::Reuse(c) => Some(c),
            Lease::Fresh => None,
        };
        worker
            .perform(&mut conn, seq, intended, &guard.wrote, None)
            .await;
        worker.release(conn);
    }
    guard.finished = true;
    drop(guard);
    worker.outstanding.set(worker.outstanding.get() - 1);
    if worker.outstanding.get() == 0 {
        worker.idle_notify.notify_waiters();
    }
}
