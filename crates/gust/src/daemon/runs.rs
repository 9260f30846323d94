//! Run lifecycle: start a validated config on the engine, fan its events out to SSE
//! subscribers and to the history, write the report, prune.
//!
//! Every event of a run is kept in memory (with its SSE id) while it runs and for the
//! last few finished runs, so a client reconnecting with `Last-Event-ID` gets exactly
//! what it missed. Older runs replay from the stored series. Ticks (250 ms) make a
//! one-hour run about 14,400 small events: bounded, and worth exact replay.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gust_engine::capacity::CapacityStop;
use gust_engine::threshold::Threshold;
use gust_engine::{RunConfig, RunEvent, StopHandle};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::meeting::Meetings;
use super::metrics::{DaemonCounters, Finish};
use super::settings::EngineLimits;
use super::store::{Retention, Store};

/// Finished runs whose full event log stays in memory for replay.
const KEPT_FINISHED: usize = 8;
/// How long a run whose segments run elsewhere waits, after its planned end and
/// the last word from a segment, for reports still to come.
pub const DEFAULT_SEGMENT_GRACE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct Event {
    pub id: u64,
    pub kind: &'static str,
    pub data: String,
}

/// The in-memory event log of one run. `version` bumps on every push so subscribers
/// wake; the log is complete once its last event is `complete`.
pub struct Live {
    pub events: Mutex<Vec<Event>>,
    pub version: watch::Sender<u64>,
    stop: Mutex<Option<Stopper>>,
}

/// What `POST /runs/{id}/stop` stops: an engine run, a capacity search, or a run
/// whose segments run elsewhere (they learn it in the answer to their next tick).
#[derive(Clone)]
pub enum Stopper {
    Run(StopHandle),
    Capacity(CapacityStop),
    Meeting(Arc<AtomicBool>),
}

impl Stopper {
    fn stop(&self) {
        match self {
            Stopper::Run(h) => h.stop(),
            Stopper::Capacity(h) => h.stop(),
            Stopper::Meeting(flag) => flag.store(true, Ordering::Relaxed),
        }
    }
}

impl Live {
    pub(super) fn set_stopper(&self, stopper: Stopper) {
        *lock(&self.stop) = Some(stopper);
    }

    pub(super) fn push(&self, kind: &'static str, data: String) {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let id = events.len() as u64 + 1;
        events.push(Event { id, kind, data });
        drop(events);
        self.version.send_modify(|v| *v += 1);
    }

    /// Events after `after` (an SSE id), and whether the log is complete.
    pub fn since(&self, after: u64) -> (Vec<Event>, bool) {
        let events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let out = events.iter().skip(after as usize).cloned().collect();
        // Read under the same lock as the events: `complete` is always the last one.
        let done = events.last().is_some_and(|e| e.kind == "complete");
        (out, done)
    }
}

pub struct Manager {
    pub store: Store,
    pub counters: DaemonCounters,
    pub retention: Mutex<Retention>,
    pub workers: Mutex<Option<usize>>,
    pub limits: Mutex<EngineLimits>,
    pub segment_grace: Mutex<Duration>,
    pub(super) meetings: Meetings,
    live: Mutex<HashMap<i64, Arc<Live>>>,
    finished: Mutex<VecDeque<i64>>,
    active: Mutex<Option<i64>>,
}

#[derive(Debug)]
pub enum StartError {
    Active(i64),
    Store(String),
}

impl Manager {
    pub fn new(store: Store, retention: Retention, workers: Option<usize>) -> Self {
        Self {
            store,
            counters: DaemonCounters::default(),
            retention: Mutex::new(retention),
            workers: Mutex::new(workers),
            limits: Mutex::new(EngineLimits::default()),
            segment_grace: Mutex::new(DEFAULT_SEGMENT_GRACE),
            meetings: Meetings::default(),
            live: Mutex::new(HashMap::new()),
            finished: Mutex::new(VecDeque::new()),
            active: Mutex::new(None),
        }
    }

    pub fn live(&self, run_id: i64) -> Option<Arc<Live>> {
        lock(&self.live).get(&run_id).cloned()
    }

    pub fn active(&self) -> Option<i64> {
        *lock(&self.active)
    }

    /// Stops the run if it is the one running; false otherwise.
    pub fn stop(&self, run_id: i64) -> bool {
        if self.active() != Some(run_id) {
            return false;
        }
        match self.live(run_id).and_then(|l| lock(&l.stop).clone()) {
            Some(h) => {
                h.stop();
                true
            }
            None => false,
        }
    }

    /// Inserts the row and starts the engine on its own threads. The config is
    /// already validated, so the only failures here are "busy" and storage.
    pub fn start(
        self: &Arc<Self>,
        name: Option<String>,
        spec: Value,
        cfg: RunConfig,
        thresholds: Vec<Threshold>,
    ) -> Result<i64, StartError> {
        let (run_id, live) = self.reserve(name, "run", &spec)?;
        let me = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name(format!("gust-run-{run_id}"))
            .spawn(move || me.drive(run_id, cfg, thresholds, live));
        if let Err(e) = spawned {
            self.fail(run_id, &format!("cannot spawn run thread: {e}"));
            return Err(StartError::Store(e.to_string()));
        }
        Ok(run_id)
    }

    /// Takes the one active slot, inserts the row (of `kind`: "run" or "capacity")
    /// and opens its in-memory event log.
    pub(super) fn reserve(
        &self,
        name: Option<String>,
        kind: &str,
        spec: &Value,
    ) -> Result<(i64, Arc<Live>), StartError> {
        let mut active = lock(&self.active);
        if let Some(id) = *active {
            return Err(StartError::Active(id));
        }
        let url = spec
            .get("url")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let run_id = self
            .store
            .insert_run_of_kind(kind, name.as_deref(), &url, spec)
            .map_err(|e| StartError::Store(e.to_string()))?;
        let (version, _) = watch::channel(0);
        let live = Arc::new(Live {
            events: Mutex::new(Vec::new()),
            version,
            stop: Mutex::new(None),
        });
        lock(&self.live).insert(run_id, Arc::clone(&live));
        *active = Some(run_id);
        self.counters.run_started();
        Ok((run_id, live))
    }

    pub(super) fn fail(&self, run_id: i64, reason: &str) {
        self.counters.run_finished(Finish::Failed);
        let _ = self
            .store
            .finish_run(run_id, "failed", Some(reason), None, None, &json!([]));
        let live = self.live(run_id);
        self.retire(run_id);
        if let Some(live) = live {
            live.push(
                "complete",
                json!({"run_id": run_id, "status": "failed", "reason": reason}).to_string(),
            );
        }
    }

    pub(super) fn retire(&self, run_id: i64) {
        {
            let mut active = lock(&self.active);
            if *active == Some(run_id) {
                *active = None;
            }
        }
        let mut finished = lock(&self.finished);
        finished.push_back(run_id);
        while finished.len() > KEPT_FINISHED {
            if let Some(old) = finished.pop_front() {
                lock(&self.live).remove(&old);
            }
        }
        drop(finished);
        let retention = *lock(&self.retention);
        if let Ok(pruned) = self.store.prune(retention) {
            let mut live = lock(&self.live);
            for id in pruned {
                live.remove(&id);
            }
        }
    }

    fn drive(
        self: Arc<Self>,
        run_id: i64,
        cfg: RunConfig,
        thresholds: Vec<Threshold>,
        live: Arc<Live>,
    ) {
        let mut handle = match gust_engine::start(cfg) {
            Ok(h) => h,
            Err(e) => return self.fail(run_id, &e.to_string()),
        };
        live.set_stopper(Stopper::Run(handle.stop_handle()));
        let events = handle.take_events();
        let forwarder = events.map(|mut rx| {
            let live = Arc::clone(&live);
            let me = Arc::clone(&self);
            std::thread::spawn(move || {
                while let Some(ev) = rx.blocking_recv() {
                    match ev {
                        RunEvent::Tick(t) => {
                            me.counters.tick(&t);
                            if let Ok(data) = serde_json::to_string(&t) {
                                live.push("tick", data);
                            }
                        }
                        RunEvent::Second { sample, .. } => {
                            // Written as it arrives, so a crash keeps the partial series.
                            if let Ok(v) = serde_json::to_value(&sample) {
                                let _ = me.store.insert_second(run_id, sample.second, &v);
                                live.push("second", v.to_string());
                            }
                        }
                    }
                }
            })
        });
        let report = handle.wait();
        if let Some(t) = forwarder {
            let _ = t.join();
        }
        let verdicts: Vec<_> = thresholds.iter().map(|t| t.check(&report)).collect();
        let passed = verdicts.iter().all(|v| v.passed);
        let mut report_json = serde_json::to_value(&report).unwrap_or(Value::Null);
        if let Some(obj) = report_json.as_object_mut() {
            obj.remove("series");
        }
        let verdicts_json = serde_json::to_value(&verdicts).unwrap_or(json!([]));
        self.conclude(
            run_id,
            &live,
            Conclusion {
                kind: "run",
                stopped: report.stopped,
                passed,
                report: report_json,
                verdicts: verdicts_json,
                reason: None,
            },
        );
    }

    /// The one ending of a run or search that ran: count it, store its report,
    /// free the slot, then tell the live subscribers. Retire (free the slot, prune)
    /// comes before `complete`, so a client that starts its next run on `complete`
    /// is never told a run is still active.
    pub(super) fn conclude(&self, run_id: i64, live: &Live, end: Conclusion) {
        let (status, finish) = if end.stopped {
            ("stopped", Finish::Stopped)
        } else {
            ("completed", Finish::Completed)
        };
        let verdict = if end.passed { "pass" } else { "fail" };
        self.counters.run_finished(finish);
        let _ = self.store.finish_run(
            run_id,
            status,
            end.reason.as_deref(),
            Some(verdict),
            Some(&end.report),
            &end.verdicts,
        );
        self.retire(run_id);
        let mut complete = json!({"run_id": run_id, "status": status, "verdict": verdict,
                                  "verdicts": end.verdicts, "report": end.report});
        if end.kind != "run" {
            complete["kind"] = json!(end.kind);
        }
        if let Some(reason) = &end.reason {
            complete["reason"] = json!(reason);
        }
        live.push("complete", complete.to_string());
    }
}

/// How a run or search that ran to its end (or to a stop) went.
pub(super) struct Conclusion {
    /// "run" or "capacity".
    pub kind: &'static str,
    pub stopped: bool,
    pub passed: bool,
    pub report: Value,
    pub verdicts: Value,
    /// Why a run that ran is short of what it was asked (segments missing).
    pub reason: Option<String>,
}

pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
