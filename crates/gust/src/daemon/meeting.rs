//! A run whose segments run elsewhere and meet here (`gust run --segment i/n
//! --daemon URL --run NAME`): the daemon shows them live as one run and stores the
//! merged report in its history.
//!
//! A segment joins with its run request (name, spec with `segment` and `start_at`,
//! thresholds). Segments of one run share the name and the start instant; every
//! other key of their specs must be equal, their segments must have one period and
//! must not overlap. The run holds the daemon's one active slot from the first join
//! to its end.
//!
//! Ticks carry their histograms, so the live view's percentiles are the run's own
//! (`gust_engine::merge::live`); a segment sends each second's ticks in one request
//! (why: docs/benchmarks/2026-12-07-gust-segment-streaming.md). The run ends when its segments' reports cover the
//! whole run, or `segment_grace` after both its planned end and the last word from
//! any segment; it is then merged from the reports that came (`gust_engine::merge`),
//! and what never came is named as missing, with a failed check so a CI gate sees
//! it. A segment that started more than [`LATE_AFTER_MS`] after the shared instant
//! is marked late: the merged series places it by whole seconds.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gust_engine::merge::live::{MergedTick, TickError, TickMerger};
use gust_engine::merge::{Part, merge};
use gust_engine::spec::segment::Segment;
use gust_engine::threshold::{Threshold, Verdict};
use gust_engine::{LiveTick, Report};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::runs::{Conclusion, Live, Manager, StartError, Stopper, lock};
use crate::spec_file::RunRequest;

/// A segment that started this much after the shared instant is late.
pub const LATE_AFTER_MS: u64 = 500;
/// Highest tick index a segment may send: about 29 days at 250 ms.
const MAX_TICK_INDEX: u64 = 10_000_000;
/// Most ticks in one request (a segment sends a second's worth: 1 to 1000).
const MAX_BATCH: usize = 1000;
/// How many ended meetings are remembered, to refuse a segment that comes after
/// its run ended instead of starting the run again.
const REMEMBERED: usize = 32;

/// Why a segment was refused; each maps to one API code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SegmentError {
    #[error("{0}")]
    Invalid(String),
    #[error("run {0} is running; stop it or wait")]
    Active(i64),
    #[error("run {name:?} (run {run_id}) has ended; a segment cannot join it now")]
    Ended { name: String, run_id: i64 },
    #[error("this segment's spec differs from run {name:?}'s: {what}")]
    Mismatch { name: String, what: String },
    #[error(
        "segment {segment} and run {name:?}'s segment {other} have different periods (use one n for every segment)"
    )]
    Period {
        name: String,
        segment: String,
        other: String,
    },
    #[error("segment {segment} overlaps segment {other}, already in run {name:?}")]
    Overlap {
        name: String,
        segment: String,
        other: String,
    },
    #[error("no segment {member} in run {run_id}")]
    NotFound { run_id: i64, member: usize },
    #[error("segment {0} has already sent its report")]
    Reported(String),
    #[error("{0}")]
    Store(String),
}

impl SegmentError {
    /// The API's machine code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "invalid_segment",
            Self::Active(_) => "run_active",
            Self::Ended { .. } => "run_ended",
            Self::Mismatch { .. } => "segment_mismatch",
            Self::Period { .. } => "segment_period",
            Self::Overlap { .. } => "segment_overlap",
            Self::NotFound { .. } => "not_found",
            Self::Reported(_) => "segment_reported",
            Self::Store(_) => "internal",
        }
    }
}

/// What a joining segment is told.
#[derive(Debug, Serialize, Deserialize)]
pub struct Joined {
    pub run_id: i64,
    pub member: usize,
}

/// A segment's ticks as it streams them: a second's worth in one request, each
/// tick's index on the run's axis.
#[derive(Debug, Serialize, Deserialize)]
pub struct SegmentTicks {
    /// How far past the shared instant the segment started.
    #[serde(default)]
    pub start_late_ms: u64,
    pub ticks: Vec<LiveTick>,
}

struct Member {
    segment: Segment,
    start_late_ms: Option<u64>,
    report: Option<Report>,
}

impl Member {
    fn late(&self) -> bool {
        self.start_late_ms.is_some_and(|ms| ms > LATE_AFTER_MS)
    }

    fn view(&self) -> Value {
        let state = match (&self.report, self.start_late_ms) {
            (Some(_), _) => "reported",
            (None, Some(_)) => "running",
            (None, None) => "joined",
        };
        json!({"segment": self.segment.to_string(), "state": state, "late": self.late(),
               "start_late_ms": self.start_late_ms})
    }
}

struct State {
    members: Vec<Member>,
    ticks: TickMerger,
    /// Wall-clock ms of the last word from any segment.
    last_word_ms: u64,
    ended: bool,
}

pub struct Meeting {
    pub run_id: i64,
    name: String,
    start_at: String,
    /// The run request without its segment: equal for every segment of the run.
    identity: Value,
    thresholds: Vec<Threshold>,
    planned_end_ms: u64,
    live: Arc<Live>,
    stop: Arc<AtomicBool>,
    state: Mutex<State>,
}

/// The meeting open now (at most one: it holds the active slot) and the ones that
/// ended lately, by (name, start instant).
#[derive(Default)]
pub struct Meetings {
    open: Mutex<Option<Arc<Meeting>>>,
    ended: Mutex<VecDeque<(String, String, i64)>>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The parts of a join request a meeting needs, checked.
struct Request {
    name: String,
    start_at: String,
    start_at_ms: u64,
    segment: Segment,
    identity: Value,
    thresholds: Vec<Threshold>,
    duration_ms: u64,
    tick: Duration,
}

fn check_request(req: &RunRequest) -> Result<Request, SegmentError> {
    let invalid = |m: &str| SegmentError::Invalid(m.to_string());
    let name = req
        .name
        .clone()
        .filter(|n| !n.trim().is_empty())
        .ok_or_else(|| invalid("name: required: segments meet under a run name (--run NAME)"))?;
    let segment = req.spec.segment.filter(|s| !s.is_whole()).ok_or_else(|| {
        invalid("segment: required: only a segment of a run joins one (--segment i/n)")
    })?;
    let start_at = req.spec.start_at.clone().ok_or_else(|| {
        invalid("start_at: required: a run's segments meet on one start instant (--start-at)")
    })?;
    let start_at_ms = gust_engine::config::parse_start_at(&start_at)
        .map_err(|e| SegmentError::Invalid(e.to_string()))?
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let thresholds = req.parse_thresholds().map_err(SegmentError::Invalid)?;
    let mut whole = req.clone();
    whole.spec.segment = None;
    // Each segment resolved its spec's file paths against its own directory, so
    // segments on different machines name one data file by different paths.
    let file_name = |p: &mut std::path::PathBuf| {
        if let Some(name) = p.file_name() {
            *p = name.into();
        }
    };
    if let Some(d) = &mut whole.spec.data {
        file_name(&mut d.file);
    }
    if let Some(t) = &mut whole.spec.targets {
        file_name(t);
    }
    let identity =
        serde_json::to_value(&whole).map_err(|e| SegmentError::Invalid(e.to_string()))?;
    let tick = req.spec.tick.unwrap_or(gust_engine::config::DEFAULT_TICK);
    if tick.is_zero() {
        return Err(invalid("tick: must be above zero"));
    }
    Ok(Request {
        name,
        start_at,
        start_at_ms,
        segment,
        identity,
        thresholds,
        duration_ms: req.spec.duration.map_or(0, |d| d.as_millis() as u64),
        tick,
    })
}

/// The parts of the run none of `held` (segments of one period) covers, named.
fn missing(held: &[Segment]) -> Vec<String> {
    Segment::gaps(held).iter().map(Segment::to_string).collect()
}

/// The first key whose value differs between two identities (JSON objects).
fn first_difference(a: &Value, b: &Value) -> String {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return "the request".into();
    };
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .find(|k| a.get(*k) != b.get(*k))
        .map_or_else(|| "the request".into(), |k| format!("`{k}`"))
}

impl Manager {
    /// A segment joins its run, opening it if it is the first.
    pub fn join_segment(self: &Arc<Self>, req: &RunRequest) -> Result<Joined, SegmentError> {
        let r = check_request(req)?;
        let mut open = lock(&self.meetings.open);
        if let Some(m) = open.as_ref() {
            if m.name == r.name && m.start_at == r.start_at {
                return m.admit(&r);
            }
            return Err(SegmentError::Active(m.run_id));
        }
        if let Some((_, _, run_id)) = lock(&self.meetings.ended)
            .iter()
            .find(|(n, at, _)| *n == r.name && *at == r.start_at)
        {
            return Err(SegmentError::Ended {
                name: r.name,
                run_id: *run_id,
            });
        }
        let (run_id, live) = match self.reserve(Some(r.name.clone()), "run", &r.identity) {
            Ok(v) => v,
            Err(StartError::Active(id)) => return Err(SegmentError::Active(id)),
            Err(StartError::Store(e)) => return Err(SegmentError::Store(e)),
        };
        let stop = Arc::new(AtomicBool::new(false));
        live.set_stopper(Stopper::Meeting(Arc::clone(&stop)));
        let meeting = Arc::new(Meeting {
            run_id,
            name: r.name.clone(),
            start_at: r.start_at.clone(),
            identity: r.identity.clone(),
            thresholds: r.thresholds.clone(),
            planned_end_ms: r.start_at_ms + r.duration_ms,
            live,
            stop,
            state: Mutex::new(State {
                members: Vec::new(),
                ticks: TickMerger::new(r.tick),
                last_word_ms: now_ms(),
                ended: false,
            }),
        });
        let joined = meeting.admit(&r)?;
        *open = Some(Arc::clone(&meeting));
        drop(open);
        let me = Arc::clone(self);
        tokio::spawn(async move { me.watch(meeting).await });
        Ok(joined)
    }

    fn meeting(&self, run_id: i64) -> Result<Arc<Meeting>, SegmentError> {
        if let Some(m) = lock(&self.meetings.open)
            .as_ref()
            .filter(|m| m.run_id == run_id)
        {
            return Ok(Arc::clone(m));
        }
        match lock(&self.meetings.ended)
            .iter()
            .find(|(_, _, id)| *id == run_id)
        {
            Some((name, _, _)) => Err(SegmentError::Ended {
                name: name.clone(),
                run_id,
            }),
            None => Err(SegmentError::NotFound { run_id, member: 0 }),
        }
    }

    /// A segment's ticks; answers whether the run was asked to stop.
    pub fn segment_ticks(
        &self,
        run_id: i64,
        member: usize,
        batch: &SegmentTicks,
    ) -> Result<bool, SegmentError> {
        let m = self.meeting(run_id)?;
        let mut st = lock(&m.state);
        if st.ended {
            return Err(SegmentError::Ended {
                name: m.name.clone(),
                run_id,
            });
        }
        if member >= st.members.len() {
            return Err(SegmentError::NotFound { run_id, member });
        }
        if batch.ticks.len() > MAX_BATCH {
            return Err(SegmentError::Invalid(format!(
                "ticks: {} in one request (at most {MAX_BATCH})",
                batch.ticks.len()
            )));
        }
        for t in &batch.ticks {
            if t.index > MAX_TICK_INDEX {
                return Err(SegmentError::Invalid(format!(
                    "ticks: index {} is past any run's end",
                    t.index
                )));
            }
            if t.histograms.is_none() {
                return Err(SegmentError::Invalid(format!(
                    "ticks: tick {} carries no histograms (a segment's ticks do)",
                    t.index
                )));
            }
        }
        for t in &batch.ticks {
            let released = st.ticks.add(member, t).map_err(|e| match e {
                TickError::UnknownMember(_) => SegmentError::NotFound { run_id, member },
                other => SegmentError::Invalid(format!("ticks: {other}")),
            })?;
            self.publish(&m, &released);
        }
        st.last_word_ms = now_ms();
        let first = st
            .members
            .get_mut(member)
            .is_some_and(|m| m.start_late_ms.replace(batch.start_late_ms).is_none());
        if first {
            m.live.push("segments", m.view(&st.members));
        }
        Ok(m.stop.load(Ordering::Relaxed))
    }

    /// A segment's final report. The run ends here when the reports cover it.
    pub fn segment_report(
        &self,
        run_id: i64,
        member: usize,
        report: Report,
    ) -> Result<(), SegmentError> {
        let m = self.meeting(run_id)?;
        let complete = {
            let mut st = lock(&m.state);
            if st.ended {
                return Err(SegmentError::Ended {
                    name: m.name.clone(),
                    run_id,
                });
            }
            let mine = st
                .members
                .get_mut(member)
                .ok_or(SegmentError::NotFound { run_id, member })?;
            let joined_as = mine.segment.to_string();
            if mine.report.is_some() {
                return Err(SegmentError::Reported(joined_as));
            }
            if report.segment.as_deref() != Some(joined_as.as_str()) {
                return Err(SegmentError::Invalid(format!(
                    "report: it is of segment {:?}, not {joined_as} (this member's)",
                    report.segment.as_deref().unwrap_or("(none)")
                )));
            }
            mine.start_late_ms = Some(report.start_late_ms.unwrap_or(0));
            mine.report = Some(report);
            st.last_word_ms = now_ms();
            let released = st
                .ticks
                .finish(member)
                .map_err(|_| SegmentError::NotFound { run_id, member })?;
            self.publish(&m, &released);
            m.live.push("segments", m.view(&st.members));
            let segments: Vec<Segment> = st.members.iter().map(|m| m.segment).collect();
            st.members.iter().all(|m| m.report.is_some()) && Segment::tile_whole(&segments)
        };
        if complete {
            self.end_meeting(&m);
        }
        Ok(())
    }

    fn publish(&self, m: &Meeting, ticks: &[MergedTick]) {
        for t in ticks {
            self.counters.tick(&t.tick);
            if let Ok(mut v) = serde_json::to_value(&t.tick) {
                v["segments"] = json!(t.segments);
                m.live.push("tick", v.to_string());
            }
        }
    }

    /// Ends the run `segment_grace` after its planned end and the last word from a
    /// segment, if its reports have not ended it before.
    async fn watch(self: Arc<Self>, m: Arc<Meeting>) {
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let grace = lock(&self.segment_grace).as_millis() as u64;
            let due = {
                let st = lock(&m.state);
                if st.ended {
                    return;
                }
                now_ms() > m.planned_end_ms.max(st.last_word_ms) + grace
            };
            if due {
                let me = Arc::clone(&self);
                let meeting = Arc::clone(&m);
                // Merging decodes every second's histograms: off the async workers.
                let _ = tokio::task::spawn_blocking(move || me.end_meeting(&meeting)).await;
                return;
            }
        }
    }

    /// Merges what came, stores it, frees the slot and tells the subscribers. Once.
    fn end_meeting(&self, m: &Meeting) {
        let (parts, views, released) = {
            let mut st = lock(&m.state);
            if st.ended {
                return;
            }
            st.ended = true;
            let released = st.ticks.flush();
            let parts: Vec<(Segment, Part)> = st
                .members
                .iter()
                .filter_map(|mem| {
                    mem.report.clone().map(|report| {
                        (
                            mem.segment,
                            Part {
                                name: format!("segment {}", mem.segment),
                                report,
                            },
                        )
                    })
                })
                .collect();
            let views: Vec<Value> = st.members.iter().map(Member::view).collect();
            (parts, views, released)
        };
        self.publish(m, &released);
        {
            let mut open = lock(&self.meetings.open);
            if open.as_ref().is_some_and(|o| o.run_id == m.run_id) {
                *open = None;
            }
            let mut ended = lock(&self.meetings.ended);
            ended.push_back((m.name.clone(), m.start_at.clone(), m.run_id));
            while ended.len() > REMEMBERED {
                ended.pop_front();
            }
        }
        let reported: Vec<Segment> = parts.iter().map(|(s, _)| *s).collect();
        let parts: Vec<Part> = parts.into_iter().map(|(_, p)| p).collect();
        if parts.is_empty() {
            return self.fail(
                m.run_id,
                "no segment sent its report before the run's end and grace",
            );
        }
        let merged = match merge(&parts, true) {
            Ok(r) => r,
            Err(e) => return self.fail(m.run_id, &format!("cannot merge the segments: {e}")),
        };
        let missing = missing(&reported);
        let mut verdicts: Vec<Verdict> = m.thresholds.iter().map(|t| t.check(&merged)).collect();
        if !missing.is_empty() {
            verdicts.push(Verdict {
                expr: format!("every segment reported (missing {})", missing.join(", ")),
                actual: missing.len() as f64,
                limit: 0.0,
                passed: false,
            });
        }
        for s in &merged.series {
            if let Ok(v) = serde_json::to_value(s) {
                let _ = self.store.insert_second(m.run_id, s.second, &v);
            }
        }
        let mut report = serde_json::to_value(&merged).unwrap_or(Value::Null);
        if let Some(obj) = report.as_object_mut() {
            obj.remove("series");
            obj.insert("segments".into(), Value::Array(views));
            obj.insert("missing".into(), json!(missing));
        }
        self.conclude(
            m.run_id,
            &m.live,
            Conclusion {
                kind: "run",
                stopped: merged.stopped || m.stop.load(Ordering::Relaxed),
                passed: verdicts.iter().all(|v| v.passed),
                report,
                verdicts: serde_json::to_value(&verdicts).unwrap_or(json!([])),
                reason: (!missing.is_empty())
                    .then(|| format!("segments missing: {}", missing.join(", "))),
            },
        );
    }
}

impl Meeting {
    /// Adds a segment, refusing one of another spec, another period, or one that
    /// overlaps a segment already here.
    fn admit(&self, r: &Request) -> Result<Joined, SegmentError> {
        if r.identity != self.identity {
            return Err(SegmentError::Mismatch {
                name: self.name.clone(),
                what: first_difference(&r.identity, &self.identity),
            });
        }
        let mut st = lock(&self.state);
        if st.ended {
            return Err(SegmentError::Ended {
                name: self.name.clone(),
                run_id: self.run_id,
            });
        }
        for other in &st.members {
            if other.segment.period() != r.segment.period() {
                return Err(SegmentError::Period {
                    name: self.name.clone(),
                    segment: r.segment.to_string(),
                    other: other.segment.to_string(),
                });
            }
            if other.segment.overlaps(&r.segment) {
                return Err(SegmentError::Overlap {
                    name: self.name.clone(),
                    segment: r.segment.to_string(),
                    other: other.segment.to_string(),
                });
            }
        }
        let member = st.ticks.join();
        st.members.push(Member {
            segment: r.segment,
            start_late_ms: None,
            report: None,
        });
        st.last_word_ms = now_ms();
        self.live.push("segments", self.view(&st.members));
        Ok(Joined {
            run_id: self.run_id,
            member,
        })
    }

    /// The `segments` event: each segment's state, and what no segment holds yet.
    fn view(&self, members: &[Member]) -> String {
        let held: Vec<Segment> = members.iter().map(|m| m.segment).collect();
        let missing = missing(&held);
        json!({"run_id": self.run_id, "name": self.name, "start_at": self.start_at,
               "segments": members.iter().map(Member::view).collect::<Vec<_>>(),
               "missing": missing})
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(segment: &str, start_at: Option<&str>, name: Option<&str>) -> RunRequest {
        let mut req: RunRequest = serde_json::from_value(json!({
            "url": "http://127.0.0.1:1/", "mode": "open", "rate": 10.0, "duration": "1s",
        }))
        .unwrap();
        req.spec.segment = Some(Segment::parse(segment).unwrap());
        req.spec.start_at = start_at.map(str::to_string);
        req.name = name.map(str::to_string);
        req
    }

    #[test]
    fn rejects_a_join_without_name_start_or_segment() {
        let at = Some("2026-12-07T10:00:00Z");
        let e = check_request(&request("0/2", at, None)).err().unwrap();
        assert!(e.to_string().starts_with("name:"), "{e}");
        let e = check_request(&request("0/2", None, Some("r")))
            .err()
            .unwrap();
        assert!(e.to_string().starts_with("start_at:"), "{e}");
        let e = check_request(&request("0/1", at, Some("r"))).err().unwrap();
        assert!(e.to_string().starts_with("segment:"), "{e}");
        let e = check_request(&request("0/2", Some("tomorrow"), Some("r")))
            .err()
            .unwrap();
        assert!(e.to_string().contains("start_at"), "{e}");
        assert_eq!(e.code(), "invalid_segment");
    }

    #[test]
    fn segments_of_one_run_share_an_identity_without_their_segment() {
        let at = Some("2026-12-07T10:00:00Z");
        let a = check_request(&request("0/2", at, Some("r"))).unwrap();
        let b = check_request(&request("1/2", at, Some("r"))).unwrap();
        assert_eq!(a.identity, b.identity);
        let mut other = request("1/2", at, Some("r"));
        other.thresholds = vec!["p99<1s".into()];
        let c = check_request(&other).unwrap();
        assert_eq!(first_difference(&a.identity, &c.identity), "`thresholds`");
    }

    #[test]
    fn segments_on_other_machines_name_their_data_file_by_other_paths() {
        let at = Some("2026-12-07T10:00:00Z");
        let with_data = |segment: &str, file: &str| {
            let mut req = request(segment, at, Some("r"));
            req.spec.data =
                Some(serde_json::from_value(json!({"file": file, "mode": "unique"})).unwrap());
            check_request(&req).unwrap().identity
        };
        let a = with_data("0/2", "/home/a/load/users.csv");
        assert_eq!(a, with_data("1/2", "/srv/b/users.csv"));
        assert_ne!(a, with_data("1/2", "/srv/b/other.csv"));
    }
}
