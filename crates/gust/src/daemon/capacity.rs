//! `POST /capacity`: a capacity search run by the daemon as a run of kind "capacity".
//!
//! The body is a run spec as for `POST /runs` (its load model and length are replaced
//! by each step's, so `mode` may be left out) plus the search's keys: `slo` (required
//! unless the spec has `thresholds`), `start`, `max`, `step_duration`, `precision`,
//! `max_steps`, `pause`. It takes the one active slot like a run; every finished step
//! is a `capacity_step` event on `/runs/{id}/live`, and the final
//! [`CapacityReport`](gust_engine::capacity::CapacityReport) is the run's report.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gust_engine::capacity::{CapacitySearch, SearchSettings, Slo, StopCode, parse_precision};
use gust_engine::metrics::error_rate;
use gust_engine::{LiveTick, RunEvent, Totals, parse_duration};
use serde_json::{Map, Value, json};

use super::runs::{Conclusion, Live, Manager, StartError, Stopper};
use crate::spec_file::RunRequest;

/// The keys `POST /capacity` takes besides the run spec's.
const SEARCH_KEYS: [&str; 7] = [
    "slo",
    "start",
    "max",
    "step_duration",
    "precision",
    "max_steps",
    "pause",
];

/// A validated request, ready to start: the first step is prepared (DNS resolved).
pub struct Prepared {
    pub name: Option<String>,
    /// The request as sent, kept as the run's spec snapshot.
    pub snapshot: Value,
    pub search: CapacitySearch,
}

/// Parses and validates a `POST /capacity` body. Blocking (resolves the host name).
/// The error names the offending field.
pub fn prepare(body: &[u8], default_workers: Option<usize>) -> Result<Prepared, String> {
    let snapshot: Value =
        serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))?;
    let Value::Object(mut spec_keys) = snapshot.clone() else {
        return Err("the body must be a JSON object".into());
    };
    let mut search_keys = Map::new();
    for key in SEARCH_KEYS {
        if let Some(v) = spec_keys.remove(key) {
            search_keys.insert(key.to_string(), v);
        }
    }
    // Each step sets its own open model; a spec without a mode is still a valid base.
    spec_keys
        .entry("mode")
        .or_insert_with(|| Value::from("open"));
    let mut req: RunRequest = serde_json::from_value(Value::Object(spec_keys))
        .map_err(|e| format!("invalid spec: {e}"))?;
    if req.spec.workers.is_none() {
        req.spec.workers = default_workers;
    }
    let slo = match (search_keys.get("slo"), req.thresholds.is_empty()) {
        (Some(_), false) => {
            return Err("invalid slo: give `slo` or `thresholds`, not both".into());
        }
        (Some(v), true) => slo_of(v)?,
        (None, false) => {
            Slo::from_exprs(req.thresholds.iter().map(String::as_str)).map_err(|e| e.to_string())?
        }
        (None, true) => return Err("invalid slo: required, e.g. \"p99<50ms,errors<1%\"".into()),
    };
    let settings = settings_of(&search_keys)?;
    // A scenario spec that needs its own request source plugs it in here with
    // `CapacitySearch::with_prepare`.
    let search = CapacitySearch::new(req.spec, slo, settings).map_err(|e| e.to_string())?;
    search.check().map_err(|e| e.to_string())?;
    Ok(Prepared {
        name: req.name,
        snapshot,
        search,
    })
}

fn slo_of(v: &Value) -> Result<Slo, String> {
    let slo = match v {
        Value::String(text) => Slo::parse(text),
        Value::Array(items) => {
            let exprs = items
                .iter()
                .map(|i| i.as_str().ok_or("invalid slo: array items must be strings"))
                .collect::<Result<Vec<_>, _>>()?;
            Slo::from_exprs(exprs)
        }
        _ => return Err("invalid slo: must be a string like \"p99<50ms,errors<1%\"".into()),
    };
    slo.map_err(|e| e.to_string())
}

fn settings_of(keys: &Map<String, Value>) -> Result<SearchSettings, String> {
    let mut s = SearchSettings::default();
    let number = |key: &str| -> Result<Option<f64>, String> {
        match keys.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| format!("invalid {key}: must be a number")),
        }
    };
    let duration = |key: &str| -> Result<Option<Duration>, String> {
        match keys.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => parse_duration(text)
                .map(Some)
                .map_err(|e| format!("invalid {key}: {e}")),
            Some(_) => Err(format!("invalid {key}: must be a duration like \"10s\"")),
        }
    };
    if let Some(v) = number("start")? {
        s.start = v;
    }
    if let Some(v) = number("max")? {
        s.max = v;
    }
    match keys.get("precision") {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => {
            s.precision = parse_precision(text).map_err(|e| e.to_string())?
        }
        Some(v) => {
            s.precision = v
                .as_f64()
                .ok_or("invalid precision: must be a fraction (0.05) or a percent (\"5%\")")?;
        }
    }
    if let Some(v) = keys.get("max_steps").filter(|v| !v.is_null()) {
        s.max_steps = v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or("invalid max_steps: must be a whole number")?;
    }
    if let Some(d) = duration("step_duration")? {
        s.step_duration = d;
    }
    if let Some(d) = duration("pause")? {
        s.pause = d;
    }
    s.validate().map_err(|e| e.to_string())?;
    Ok(s)
}

/// A capacity search's ticks on one time axis, with totals over the whole search:
/// each step is a run of its own, whose ticks start again at 0 s. A step's ticks
/// all arrive before the next step's (the search joins each step's forwarder).
#[derive(Debug, Default)]
struct SearchAxis {
    /// Totals of the steps already finished.
    finished: Totals,
    /// Load time of the steps already finished (the pauses between steps are not
    /// on the axis).
    offset_s: f64,
    /// The latest tick's step, elapsed time and totals.
    last: Option<(u32, f64, Totals)>,
}

impl SearchAxis {
    fn place(&mut self, step: u32, mut t: LiveTick) -> LiveTick {
        if let Some((last_step, elapsed_s, totals)) = self.last
            && step != last_step
        {
            self.finished = add_totals(&self.finished, &totals);
            self.offset_s += elapsed_s;
        }
        self.last = Some((step, t.elapsed_s, t.totals));
        t.elapsed_s += self.offset_s;
        t.totals = add_totals(&self.finished, &t.totals);
        t
    }
}

fn add_totals(a: &Totals, b: &Totals) -> Totals {
    let (successes, failures) = (a.successes + b.successes, a.failures + b.failures);
    Totals {
        sent: a.sent + b.sent,
        responses: a.responses + b.responses,
        successes,
        failures,
        dropped: a.dropped + b.dropped,
        error_rate: error_rate(failures, successes),
    }
}

impl Manager {
    /// Takes the active slot, inserts a row of kind "capacity" and runs the search on
    /// its own thread.
    pub fn start_capacity(self: &Arc<Self>, prepared: Prepared) -> Result<i64, StartError> {
        let Prepared {
            name,
            snapshot,
            search,
        } = prepared;
        let (run_id, live) = self.reserve(name, "capacity", &snapshot)?;
        // The search's requests count in the daemon's /metrics like a run's, and its
        // ticks feed the live panel that follows it, on one time axis.
        let manager = Arc::clone(self);
        let ticks_to = Arc::clone(&live);
        let axis = Mutex::new(SearchAxis::default());
        let search = search.with_events(Arc::new(move |step, event| {
            if let RunEvent::Tick(t) = event {
                manager.counters.tick(t);
                let placed = match axis.lock() {
                    Ok(mut axis) => axis.place(step, t.clone()),
                    Err(_) => return,
                };
                if let Ok(data) = serde_json::to_string(&placed) {
                    ticks_to.push("tick", data);
                }
            }
        }));
        live.set_stopper(Stopper::Capacity(search.stop_handle()));
        let me = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name(format!("gust-capacity-{run_id}"))
            .spawn(move || me.drive_capacity(run_id, search, live));
        if let Err(e) = spawned {
            self.fail(run_id, &format!("cannot spawn search thread: {e}"));
            return Err(StartError::Store(e.to_string()));
        }
        Ok(run_id)
    }

    fn drive_capacity(self: Arc<Self>, run_id: i64, search: CapacitySearch, live: Arc<Live>) {
        let result = search.run(|step| {
            if let Ok(data) = serde_json::to_string(step) {
                live.push("capacity_step", data);
            }
        });
        let report = match result {
            Ok(r) => r,
            Err(e) => return self.fail(run_id, &e.to_string()),
        };
        self.conclude(
            run_id,
            &live,
            Conclusion {
                kind: "capacity",
                stopped: report.stop_code == StopCode::Stopped,
                // A search passes when some rate met the SLO.
                passed: report.best_rate.is_some(),
                report: serde_json::to_value(&report).unwrap_or(Value::Null),
                verdicts: json!([]),
                reason: None,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(index: u64, responses: u64, failures: u64) -> LiveTick {
        LiveTick {
            index,
            elapsed_s: (index + 1) as f64 * 0.25,
            rps: 0.0,
            sent: 0,
            responses: 0,
            failures: 0,
            dropped: 0,
            in_flight: 0,
            latency: Default::default(),
            service: Default::default(),
            totals: Totals {
                sent: responses,
                responses,
                successes: responses - failures,
                failures,
                dropped: 0,
                error_rate: 0.0,
            },
            histograms: None,
        }
    }

    #[test]
    fn a_search_s_steps_are_one_time_axis_with_totals_over_the_search() {
        let mut axis = SearchAxis::default();
        let placed: Vec<LiveTick> = [
            (0, tick(0, 10, 0)),
            (0, tick(1, 20, 0)),
            (1, tick(0, 30, 3)),
            (1, tick(1, 60, 6)),
        ]
        .into_iter()
        .map(|(step, t)| axis.place(step, t))
        .collect();
        let elapsed: Vec<f64> = placed.iter().map(|t| t.elapsed_s).collect();
        assert_eq!(elapsed, [0.25, 0.5, 0.75, 1.0]);
        let responses: Vec<u64> = placed.iter().map(|t| t.totals.responses).collect();
        assert_eq!(
            responses,
            [10, 20, 50, 80],
            "the second step adds to the first"
        );
        assert!((placed[3].totals.error_rate - 6.0 / 80.0).abs() < 1e-12);
    }

    fn err(body: Value) -> String {
        match prepare(body.to_string().as_bytes(), None) {
            Ok(_) => panic!("accepted {body}"),
            Err(e) => e,
        }
    }

    #[test]
    fn accepts_a_url_and_an_slo_with_defaults() {
        let p = prepare(
            br#"{"url":"http://127.0.0.1:1/","slo":"p99<50ms,errors<1%","start":50,"step_duration":"2s","precision":"10%"}"#,
            Some(1),
        )
        .unwrap();
        let s = p.search.settings();
        assert_eq!(s.start, 50.0);
        assert_eq!(s.step_duration, Duration::from_secs(2));
        assert_eq!(s.precision, 0.1);
        assert_eq!(s.max, SearchSettings::default().max);
        assert_eq!(p.search.slo().exprs(), vec!["p99<50ms", "errors<1%"]);
        assert_eq!(p.snapshot["slo"], "p99<50ms,errors<1%");
    }

    #[test]
    fn takes_the_spec_thresholds_as_the_slo_and_a_closed_spec_as_a_base() {
        let p = prepare(
            br#"{"url":"http://127.0.0.1:1/","mode":"closed","concurrency":3,"thresholds":["errors<1%"],"precision":0.02}"#,
            None,
        )
        .unwrap();
        assert_eq!(p.search.slo().exprs(), vec!["errors<1%"]);
        assert_eq!(p.search.settings().precision, 0.02);
    }

    #[test]
    fn rejects_a_missing_slo() {
        assert!(err(json!({"url": "http://127.0.0.1:1/"})).contains("slo"));
    }

    #[test]
    fn rejects_slo_and_thresholds_together() {
        let e = err(
            json!({"url": "http://127.0.0.1:1/", "slo": "errors<1%", "thresholds": ["p99<1s"]}),
        );
        assert!(e.contains("slo"), "{e}");
    }

    #[test]
    fn rejects_a_bad_slo() {
        let e = err(json!({"url": "http://127.0.0.1:1/", "slo": "latency<1s"}));
        assert!(e.starts_with("invalid slo"), "{e}");
        let e = err(json!({"url": "http://127.0.0.1:1/", "slo": 5}));
        assert!(e.starts_with("invalid slo"), "{e}");
    }

    #[test]
    fn rejects_bad_search_settings_naming_the_field() {
        let base = |k: &str, v: Value| {
            let mut body = json!({"url": "http://127.0.0.1:1/", "slo": "errors<1%"});
            body[k] = v;
            err(body)
        };
        assert!(base("start", json!(0)).starts_with("invalid start"));
        assert!(base("start", json!("fast")).starts_with("invalid start"));
        assert!(base("max", json!(-1)).starts_with("invalid max"));
        assert!(base("precision", json!(5)).starts_with("invalid precision"));
        assert!(base("precision", json!("0%")).starts_with("invalid precision"));
        assert!(base("step_duration", json!("soon")).starts_with("invalid step_duration"));
        assert!(base("step_duration", json!(10)).starts_with("invalid step_duration"));
        assert!(base("max_steps", json!(0)).starts_with("invalid max_steps"));
        assert!(base("max_steps", json!(1.5)).starts_with("invalid max_steps"));
    }

    #[test]
    fn rejects_unknown_keys_and_a_bad_url() {
        let e = err(json!({"url": "http://127.0.0.1:1/", "slo": "errors<1%", "bogus": 1}));
        assert!(e.contains("bogus"), "{e}");
        let e = err(json!({"url": "ftp://x/", "slo": "errors<1%"}));
        assert!(e.contains("url"), "{e}");
        assert!(err(json!(["not", "an", "object"])).contains("object"));
    }
}
