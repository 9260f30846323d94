//! The run: worker threads, load models, deadline and cancellation.
//!
//! Each worker is an OS thread with a current-thread tokio runtime and a `LocalSet`;
//! it owns its connections and its interval stats, so the hot path takes no lock. The
//! only shared state is a handful of atomics (in-flight gauge and peak, iteration
//! tickets). Budgets are global: slots, connections and open-model sequence numbers
//! are split across workers so that the totals are exactly what was asked.
//!
//! The parts: `shared` (the run-wide state), `worker` (one worker's state and
//! connection pool), `exchange` (one request on the wire), `load` (closed slots and
//! the open-model generator) and `collect` (the aggregator and the report). This
//! module starts the threads and drives each worker to the deadline.

mod collect;
mod exchange;
mod load;
mod scenario;
mod shared;
mod turns;
mod worker;

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::RunConfig;
use crate::error::ConfigError;
use crate::http1::encode_request;
use crate::metrics::{PhaseStats, RunEvent};
use crate::report::Report;
use crate::runner::collect::{aggregate, thread_cpu};
use crate::runner::load::{closed_slot, open_generator};
use crate::runner::shared::{Shared, WorkerMsg};
use crate::runner::worker::Worker;
use crate::schedule::Profile;
use crate::spec::LoadModel;
use crate::transport::Connector;

/// Stops a running run early (same path as reaching the deadline: no new requests,
/// in-flight ones get the grace period, then are cancelled).
#[derive(Clone)]
pub struct StopHandle {
    wake: Arc<watch::Sender<bool>>,
    stopped: Arc<AtomicBool>,
}

impl StopHandle {
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        let _ = self.wake.send(true);
    }
}

/// A started run.
pub struct RunHandle {
    events: Option<tokio::sync::mpsc::UnboundedReceiver<RunEvent>>,
    stop: StopHandle,
    aggregator: JoinHandle<Report>,
    start_late: Option<Duration>,
}

impl RunHandle {
    /// The live event stream (ticks and whole seconds). Can be taken once; events are
    /// discarded if nobody takes it.
    pub fn take_events(&mut self) -> Option<tokio::sync::mpsc::UnboundedReceiver<RunEvent>> {
        self.events.take()
    }

    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// How far past `start_at` this run starts (over 100 ms), known once started.
    pub fn start_late(&self) -> Option<Duration> {
        self.start_late
    }

    /// Block until the run is over and return its report.
    pub fn wait(self) -> Report {
        drop(self.events);
        match self.aggregator.join() {
            Ok(report) => report,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

/// Validate, start and wait: the one-call form.
pub fn run(cfg: RunConfig) -> Result<Report, ConfigError> {
    Ok(start(cfg)?.wait())
}

/// Start a run on its own threads. Errors are configuration problems found while
/// preparing (TLS files); nothing has been sent when one is returned.
pub fn start(cfg: RunConfig) -> Result<RunHandle, ConfigError> {
    let connector = Connector::new(&cfg.target, &cfg.tls, cfg.http2)?;
    // More workers than slots/connections would leave some idle (or, for open
    // HTTP/1.1, with no connection to use), so cap them.
    let limit = match &cfg.model {
        LoadModel::Closed { .. } if !cfg.http2 => cfg.slots,
        _ => cfg.connections,
    };
    let workers = cfg.workers.min(limit).max(1);
    let static_req = cfg.source.as_static().cloned();
    let authority = cfg.target.authority();
    let static_h1 = static_req.as_ref().map(|r| {
        let mut out = Vec::new();
        if cfg.no_keepalive {
            let mut closing = r.clone();
            exchange::request_close(&mut closing);
            encode_request(&closing, &authority, &mut out);
        } else {
            encode_request(r, &authority, &mut out);
        }
        Bytes::from(out)
    });
    let is_head = static_req
        .as_ref()
        .is_some_and(|r| r.method == http::Method::HEAD);
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let (event_tx, event_rx) = tokio::sync::mpsc::unbounded_channel();
    let (wall_now, now) = (SystemTime::now(), Instant::now());
    let start = start_instant(cfg.start_at, wall_now, now);
    let start_wall = wall_now + start.saturating_duration_since(now);
    let start_late = cfg
        .start_at
        .and_then(|at| start_wall.duration_since(at).ok())
        .filter(|late| *late > Duration::from_millis(100));
    // Its own thread, on the run's time axis; stopped once the report is built.
    let monitor = crate::monitor::spawn(&cfg.monitor, &cfg.tls, start.into_std())?;
    let late_by = start_late;
    let shared = Arc::new(Shared {
        deadline: cfg.duration.map(|d| start + d),
        cfg,
        workers,
        connector,
        start,
        start_wall,
        start_late,
        in_flight: AtomicU64::new(0),
        peak_in_flight: AtomicU64::new(0),
        tickets: AtomicU64::new(0),
        data_cursor: AtomicU64::new(0),
        static_h1,
        static_req,
        is_head,
        stop: stop_rx,
        stopped: Arc::clone(&stopped),
        tx,
    });
    let mut threads = Vec::with_capacity(workers);
    for w in 0..workers {
        let shared = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name(format!("gust-worker-{w}"))
            .spawn(move || worker_main(shared, w));
        match spawned {
            Ok(t) => threads.push(t),
            Err(e) => {
                let _ = stop_tx.send(true);
                return Err(ConfigError::new(
                    "workers",
                    format!("cannot start worker thread: {e}"),
                ));
            }
        }
    }
    let aggregator = std::thread::Builder::new()
        .name("gust-aggregator".into())
        .spawn(move || {
            let mut report = aggregate(shared, rx, event_tx, threads);
            if let Some(monitor) = monitor {
                report.monitor = monitor.finish();
            }
            report
        })
        .map_err(|e| ConfigError::new("workers", format!("cannot start aggregator thread: {e}")))?;
    Ok(RunHandle {
        events: Some(event_rx),
        stop: StopHandle {
            wake: Arc::new(stop_tx),
            stopped,
        },
        aggregator,
        start_late: late_by,
    })
}

/// The run's start: `start_at` on this clock when it is still ahead, else 20 ms from
/// now (time for the threads to start), so a late segment starts at once.
fn start_instant(start_at: Option<SystemTime>, wall_now: SystemTime, now: Instant) -> Instant {
    let soon = now + Duration::from_millis(20);
    match start_at.and_then(|at| at.duration_since(wall_now).ok()) {
        Some(wait) => (now + wait).max(soon),
        None => soon,
    }
}

/// Sends the worker's `Done` when dropped, so the aggregator is released even if the
/// worker thread unwinds (a panicking `RequestSource`, say) instead of waiting forever.
struct DoneOnDrop {
    tx: mpsc::Sender<WorkerMsg>,
    worker: usize,
    cpu_start: Duration,
    /// Filled with the worker's phase stats once it finished normally.
    phases: Option<Box<PhaseStats>>,
}

impl Drop for DoneOnDrop {
    fn drop(&mut self) {
        let _ = self.tx.send(WorkerMsg::Done {
            worker: self.worker,
            cpu: thread_cpu().saturating_sub(self.cpu_start),
            phases: self.phases.take().unwrap_or_default(),
        });
    }
}

fn worker_main(shared: Arc<Shared>, index: usize) {
    let mut done = DoneOnDrop {
        tx: shared.tx.clone(),
        worker: index,
        cpu_start: thread_cpu(),
        phases: None,
    };
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    let worker = Rc::new(Worker::new(shared, index));
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, worker_run(Rc::clone(&worker)));
    // Dropping the LocalSet drops request tasks still queued or in flight; their
    // guards count them as cancelled before the final flush below.
    drop(local);
    drop(rt);
    worker.flush();
    done.phases = Some(Box::new(worker.phases.take()));
}

async fn worker_run(worker: Rc<Worker>) {
    let shared = Arc::clone(&worker.shared);
    tokio::time::sleep_until(shared.start).await;
    let ticker = tokio::task::spawn_local(ticker(Rc::clone(&worker)));
    let load = async {
        match &shared.cfg.model {
            LoadModel::Closed {
                stages, think_time, ..
            } => {
                let profile = (!stages.is_empty()).then(|| Profile::stages(stages));
                // The worker's share of the process's slots, by their run-wide
                // numbers (the staged profile activates slots by those).
                let segment = shared.cfg.segment;
                let slots: Vec<_> = (worker.index..shared.cfg.slots)
                    .step_by(shared.workers)
                    .map(|local| segment.global(local as u64) as usize)
                    .map(|slot| {
                        if let Some(sc) = &shared.cfg.scenario {
                            return tokio::task::spawn_local(scenario::closed_vu(
                                Rc::clone(&worker),
                                Arc::clone(sc),
                                slot,
                                profile.clone(),
                                *think_time,
                            ));
                        }
                        tokio::task::spawn_local(closed_slot(
                            Rc::clone(&worker),
                            slot,
                            profile.clone(),
                            *think_time,
                        ))
                    })
                    .collect();
                for s in slots {
                    let _ = s.await;
                }
            }
            LoadModel::Open { rate, stages } => {
                let profile = if stages.is_empty() {
                    Profile::constant(*rate, shared.cfg.duration)
                } else {
                    Profile::stages(stages)
                };
                open_generator(Rc::clone(&worker), profile).await;
            }
        }
    };
    let mut stop = shared.stop.clone();
    let hard_end = async {
        let deadline = async {
            match shared.deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = deadline => {}
            _ = stop.wait_for(|stopped| *stopped) => {}
        }
        tokio::time::sleep(shared.cfg.grace).await;
    };
    tokio::select! {
        _ = load => {}
        _ = hard_end => {}
    }
    ticker.abort();
}

async fn ticker(worker: Rc<Worker>) {
    let shared = Arc::clone(&worker.shared);
    loop {
        let n = worker.next_tick();
        let boundary = shared.start + shared.cfg.tick * (n as u32 + 1);
        tokio::time::sleep_until(boundary).await;
        worker.flush();
    }
}
