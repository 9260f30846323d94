//! When a closed slot or a scenario VU takes its next turn, and its pauses between
//! turns: shared by the plain load models (`load`) and scenarios (`scenario`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::runner::worker::{Conn, Worker};
use crate::schedule::{Profile, slot_active};
use crate::spec::ThinkTime;

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
        // Both count this process's turns; the segment maps them to run-wide numbers.
        let segment = &shared.cfg.segment;
        let local = match shared.cfg.iterations {
            Some(m) => {
                let ticket = shared.tickets.fetch_add(1, Ordering::Relaxed);
                if ticket >= segment.count_below(m) {
                    return None;
                }
                ticket
            }
            None => {
                let n = worker.next_seq.get();
                worker.next_seq.set(n + 1);
                n * shared.workers as u64 + worker.index as u64
            }
        };
        return Some((now, segment.global(local)));
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
