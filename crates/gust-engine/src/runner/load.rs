//! The two load models as worker tasks: closed slots that send their next request
//! when the previous one completes, and the open-model generator that releases each
//! request at its scheduled due time whatever the responses do.

use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::ThinkTime;
use crate::pacer::Pacer;
use crate::runner::worker::{Conn, FlightGuard, Lease, Worker};
use crate::schedule::{OpenSchedule, Profile, slot_active};

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

/// A closed slot's next turn: the time it starts and its sequence number, once the
/// staged profile has the slot active; `None` when the slot is done (deadline, stop
/// or iteration budget). Shared by plain slots and scenario VUs.
pub(super) async fn next_closed_turn(
    worker: &Worker,
    slot: usize,
    profile: Option<&Profile>,
    conn: &mut Option<Conn>,
) -> Option<(Instant, u64)> {
    let shared = &worker.shared;
    loop {
        let now = Instant::now();
        if shared.past_deadline(now) {
            return None;
        }
        if let Some(p) = profile {
            let t = now.saturating_duration_since(shared.start).as_secs_f64();
            if !slot_active(p, slot, t) {
                *conn = None;
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        }
        // Iteration-bound runs need one global ticket counter; otherwise sequence
        // numbers are made unique per worker without touching shared memory.
        let seq = match shared.cfg.iterations {
            Some(m) => {
                let seq = shared.tickets.fetch_add(1, Ordering::Relaxed);
                if seq >= m {
                    return None;
                }
                seq
            }
            None => {
                let n = worker.next_seq.get();
                worker.next_seq.set(n + 1);
                n * shared.workers as u64 + worker.index as u64
            }
        };
        return Some((now, seq));
    }
}

/// The slot's think time after a response; `false` if the run was stopped meanwhile.
pub(super) async fn think_within_run(worker: &Worker, think: ThinkTime) -> bool {
    let pause = match think {
        ThinkTime::None => return true,
        ThinkTime::Fixed { time } => time,
        ThinkTime::Exponential { mean } => worker.rng.borrow_mut().exponential(mean),
    };
    pause_within_run(worker, pause).await
}

/// Pause for `pause`, but never past the deadline; `false` if the run was stopped.
/// A think time never outlasts the run: a slot that would wake after the deadline
/// wakes at it and stops, and a stop wakes it at once, instead of holding the run
/// open until the grace period ends.
pub(super) async fn pause_within_run(worker: &Worker, pause: Duration) -> bool {
    let shared = &worker.shared;
    let wake = Instant::now() + pause;
    let until = match shared.deadline {
        Some(d) if wake > d => d,
        _ => wake,
    };
    let mut stop = shared.stop.clone();
    tokio::select! {
        _ = tokio::time::sleep_until(until) => true,
        _ = stop.wait_for(|s| *s) => false,
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
    let mut k = worker.index as u64;
    let step = shared.workers as u64;
    loop {
        if cfg.iterations.is_some_and(|m| k >= m) {
            break;
        }
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
            k += step;
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
        k += step;
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
