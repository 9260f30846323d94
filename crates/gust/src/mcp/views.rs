//! What the tools answer, built from the daemon API's JSON: a run's status with
//! progress and live numbers, the run list, a compact report and the comparison of
//! two reports. Pure functions of their inputs, so each rule has a unit test.

use gust_engine::parse_duration;
use serde_json::{Map, Value, json};

/// A run row of `GET /runs/{id}` (or one of `GET /runs`), shortened to what an agent
/// needs to pick a run.
pub fn run_brief(row: &Value) -> Value {
    json!({
        "run_id": row["id"],
        "name": row["name"],
        "kind": kind(row),
        "status": row["status"],
        "verdict": row["verdict"],
        "baseline": row["baseline"],
        "url": row.pointer("/spec/url").cloned().unwrap_or(Value::Null),
        "created_at": row["created_at"],
        "finished_at": row["finished_at"],
    })
}

fn kind(row: &Value) -> Value {
    match row.get("kind") {
        Some(Value::String(k)) => json!(k),
        _ => json!("run"),
    }
}

/// `run_status`: the row, the fraction done and the numbers of the last finished
/// second (`series` is `GET /runs/{id}/series`'s list, oldest first). A running run
/// without a series yet (or a capacity search, which keeps none) counts its elapsed
/// time from its creation to `now_s` (Unix seconds).
pub fn run_status(row: &Value, series: &[Value], now_s: i64) -> Value {
    let mut out = run_brief(row);
    let running = row["status"] == "running";
    let elapsed_s = match series.last().and_then(|s| s["second"].as_u64()) {
        Some(second) => second + 1,
        None if running => row["created_at"]
            .as_i64()
            .map_or(0, |created| (now_s - created).max(0) as u64),
        None => 0,
    };
    let responses: u64 = series.iter().filter_map(|s| s["responses"].as_u64()).sum();
    let failures: u64 = series.iter().filter_map(|s| s["failures"].as_u64()).sum();
    let progress = if running {
        progress(&row["spec"], elapsed_s, responses)
    } else if row["status"] == "completed" {
        Some(1.0)
    } else {
        None
    };
    out["progress"] = json!(progress);
    out["elapsed_s"] = json!(elapsed_s);
    out["reason"] = row["reason"].clone();
    out["baseline_id"] = row.get("baseline_id").cloned().unwrap_or(Value::Null);
    out["live"] = match series.last() {
        Some(last) => json!({
            "second": last["second"],
            "rps": last["responses"],
            "p50_ms": us_to_ms(last.pointer("/latency/p50_us")),
            "p99_ms": us_to_ms(last.pointer("/latency/p99_us")),
            "error_rate": last["error_rate"],
            "dropped": last["dropped"],
            "responses_total": responses,
            "failures_total": failures,
        }),
        None => Value::Null,
    };
    if !running {
        out["next"] = json!("the run has ended: get_report gives its report");
    }
    out
}

/// Fraction (0..=1) of a running run's length done, when its spec fixes one: its
/// `duration`, the sum of its `stages`, or its `iterations` (request count).
pub fn progress(spec: &Value, elapsed_s: u64, responses: u64) -> Option<f64> {
    let seconds = |v: &Value| v.as_str().and_then(|t| parse_duration(t).ok());
    let total_s = match seconds(&spec["duration"]) {
        Some(d) => Some(d.as_secs_f64()),
        None => spec["stages"].as_array().and_then(|stages| {
            stages
                .iter()
                .map(|s| seconds(&s["duration"]).map(|d| d.as_secs_f64()))
                .sum::<Option<f64>>()
        }),
    };
    let fraction = match (total_s, spec["iterations"].as_u64()) {
        (Some(total), _) if total > 0.0 => elapsed_s as f64 / total,
        (_, Some(n)) if n > 0 => responses as f64 / n as f64,
        _ => return None,
    };
    Some(fraction.clamp(0.0, 1.0))
}

fn us_to_ms(v: Option<&Value>) -> Value {
    match v.and_then(Value::as_f64) {
        Some(us) => json!(us / 1000.0),
        None => Value::Null,
    }
}

/// The headline numbers of a load report (the `report` of `GET /runs/{id}/report`),
/// or `None` when it is not one (a capacity search's report).
fn headline(report: &Value) -> Option<Map<String, Value>> {
    let latency = report.get("latency")?.as_object()?;
    let ms = |key: &str| us_to_ms(latency.get(key));
    let mut m = Map::new();
    m.insert("rps".into(), report["rps"].clone());
    m.insert("p50_ms".into(), ms("p50_us"));
    m.insert("p99_ms".into(), ms("p99_us"));
    m.insert("p99_9_ms".into(), ms("p999_us"));
    m.insert("error_rate".into(), report["error_rate"].clone());
    Some(m)
}

/// `get_report` with `summary: true`: headline numbers, counts and the verdict; for
/// a capacity search its result and one line per step. Any other report is passed
/// through whole.
pub fn report_summary(answer: &Value) -> Value {
    let report = &answer["report"];
    if report.get("steps").is_some_and(Value::is_array) {
        return capacity_summary(answer);
    }
    let Some(mut m) = headline(report) else {
        return answer.clone();
    };
    m.insert("max_ms".into(), us_to_ms(report.pointer("/latency/max_us")));
    for key in [
        "url",
        "model",
        "elapsed_s",
        "responses",
        "successes",
        "failures",
        "dropped",
        "status",
        "errors",
        "latency_corrected",
    ] {
        m.insert(key.into(), report[key].clone());
    }
    let thresholds: Vec<Value> = answer["verdicts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| json!({"expr": v["expr"], "passed": v["passed"], "actual": v["actual"]}))
        .collect();
    json!({
        "run_id": answer["run_id"],
        "status": answer["status"],
        "verdict": answer["verdict"],
        "thresholds": thresholds,
        "summary": m,
    })
}

/// A capacity search's report (`gust_engine::capacity::CapacityReport`), shortened:
/// the highest rate that met the SLO, why the search stopped, and every step.
fn capacity_summary(answer: &Value) -> Value {
    let report = &answer["report"];
    let steps: Vec<Value> = report["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            json!({
                "rate": s["rate"],
                "achieved_rps": s["achieved_rps"],
                "p50_ms": us_to_ms(s.get("p50_us")),
                "p99_ms": us_to_ms(s.get("p99_us")),
                "error_rate": s["error_rate"],
                "dropped": s["dropped"],
                "passed": s["passed"],
            })
        })
        .collect();
    json!({
        "run_id": answer["run_id"],
        "kind": "capacity",
        "status": answer["status"],
        "verdict": answer["verdict"],
        "summary": {
            "url": report["url"],
            "slo": report["slo"],
            "best_rate": report["best_rate"],
            "lowest_failing_rate": report["lowest_failing_rate"],
            "stop_reason": report["stop_reason"],
            "elapsed_s": report["elapsed_s"],
            "steps": steps,
        },
    })
}

/// Why two reports cannot be compared.
#[derive(Debug, Clone, PartialEq)]
pub struct NotComparable {
    pub run_id: Value,
}

/// `compare_runs`: each headline metric of both runs, `delta` = run − baseline and
/// `ratio` = run / baseline (null when the baseline's value is 0).
pub fn compare(run: &Value, baseline: &Value) -> Result<Value, NotComparable> {
    let not_comparable = |a: &Value| NotComparable {
        run_id: a["run_id"].clone(),
    };
    let r = headline(&run["report"]).ok_or_else(|| not_comparable(run))?;
    let b = headline(&baseline["report"]).ok_or_else(|| not_comparable(baseline))?;
    let mut metrics = Map::new();
    for (key, value) in &r {
        let (x, y) = (value.as_f64(), b.get(key).and_then(Value::as_f64));
        let (delta, ratio) = match (x, y) {
            (Some(x), Some(y)) => (
                json!(x - y),
                if y == 0.0 { Value::Null } else { json!(x / y) },
            ),
            _ => (Value::Null, Value::Null),
        };
        metrics.insert(
            key.clone(),
            json!({"run": value, "baseline": b.get(key), "delta": delta, "ratio": ratio}),
        );
    }
    Ok(json!({
        "run_id": run["run_id"],
        "baseline_id": baseline["run_id"],
        "metrics": metrics,
        "note": "delta = run − baseline, ratio = run / baseline; for rps higher is better, \
                 for latency and error_rate lower is better",
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(id: i64, rps: f64, p50: u64, p99: u64, p999: u64, error_rate: f64) -> Value {
        json!({"run_id": id, "status": "completed", "verdict": "pass",
               "verdicts": [{"expr": "p99<1s", "passed": true, "actual": 0.5, "extra": 1}],
               "report": {"url": "http://127.0.0.1:1/", "model": "closed", "rps": rps,
                          "error_rate": error_rate, "responses": 100, "successes": 100,
                          "failures": 0, "dropped": 0, "elapsed_s": 2.0,
                          "latency": {"p50_us": p50, "p99_us": p99, "p999_us": p999, "max_us": 9000}}})
    }

    #[test]
    fn compare_gives_delta_and_ratio_per_metric() {
        let run = answer(2, 1200.0, 1000, 4000, 8000, 0.01);
        let base = answer(1, 1000.0, 500, 5000, 8000, 0.0);
        let c = compare(&run, &base).unwrap();
        assert_eq!(c["run_id"], 2);
        assert_eq!(c["baseline_id"], 1);
        let m = &c["metrics"];
        assert_eq!(m["rps"]["delta"], 200.0);
        assert_eq!(m["rps"]["ratio"], 1.2);
        assert_eq!(m["p50_ms"]["run"], 1.0);
        assert_eq!(m["p50_ms"]["baseline"], 0.5);
        assert_eq!(m["p50_ms"]["ratio"], 2.0);
        assert_eq!(m["p99_ms"]["delta"], -1.0);
        assert_eq!(m["p99_9_ms"]["ratio"], 1.0);
        // A zero baseline has no ratio, but a delta.
        assert_eq!(m["error_rate"]["ratio"], Value::Null);
        assert_eq!(m["error_rate"]["delta"], 0.01);
    }

    #[test]
    fn compare_of_a_run_with_itself_is_all_ones() {
        let run = answer(3, 900.0, 700, 2000, 3000, 0.02);
        let c = compare(&run, &run).unwrap();
        for key in ["rps", "p50_ms", "p99_ms", "p99_9_ms", "error_rate"] {
            assert_eq!(c["metrics"][key]["ratio"], 1.0, "{key}");
            assert_eq!(c["metrics"][key]["delta"], 0.0, "{key}");
        }
    }

    #[test]
    fn rejects_comparing_a_report_without_latency() {
        let run = answer(2, 1.0, 1, 1, 1, 0.0);
        let capacity = json!({"run_id": 9, "report": {"max_rate": 2000}});
        assert_eq!(
            compare(&run, &capacity).unwrap_err(),
            NotComparable { run_id: json!(9) }
        );
        assert_eq!(
            compare(&capacity, &run).unwrap_err(),
            NotComparable { run_id: json!(9) }
        );
    }

    #[test]
    fn summary_has_headline_in_ms_and_the_thresholds() {
        let s = report_summary(&answer(5, 1500.0, 1500, 3000, 6000, 0.0));
        assert_eq!(s["run_id"], 5);
        assert_eq!(s["verdict"], "pass");
        assert_eq!(s["summary"]["p50_ms"], 1.5);
        assert_eq!(s["summary"]["p99_9_ms"], 6.0);
        assert_eq!(s["summary"]["max_ms"], 9.0);
        assert_eq!(s["summary"]["responses"], 100);
        assert_eq!(
            s["thresholds"],
            json!([{"expr": "p99<1s", "passed": true, "actual": 0.5}])
        );
    }

    #[test]
    fn status_of_a_running_run_without_series_counts_wall_time() {
        let row = json!({"id": 6, "status": "running", "kind": "capacity", "created_at": 90,
                         "spec": {"url": "http://127.0.0.1:1/"}});
        let s = run_status(&row, &[], 100);
        assert_eq!(s["elapsed_s"], 10);
        assert_eq!(s["progress"], Value::Null);
        assert_eq!(s["live"], Value::Null);
        // A clock behind the row's creation never gives a negative time.
        assert_eq!(run_status(&row, &[], 80)["elapsed_s"], 0);
    }

    #[test]
    fn capacity_summary_has_the_result_and_a_line_per_step() {
        let a = json!({"run_id": 9, "status": "completed", "verdict": "pass", "verdicts": [],
                       "report": {"url": "http://127.0.0.1:1/", "slo": ["errors<1%"],
                                  "best_rate": 200.0, "lowest_failing_rate": 400.0,
                                  "stop_reason": "bracket within precision", "elapsed_s": 5.0,
                                  "steps": [{"rate": 200.0, "achieved_rps": 199.5,
                                             "p50_us": 250, "p99_us": 4000, "error_rate": 0.0,
                                             "dropped": 0, "passed": true, "verdicts": []}]}});
        let s = report_summary(&a);
        assert_eq!(s["kind"], "capacity");
        assert_eq!(s["summary"]["best_rate"], 200.0);
        assert_eq!(s["summary"]["lowest_failing_rate"], 400.0);
        assert_eq!(
            s["summary"]["steps"],
            json!([{"rate": 200.0, "achieved_rps": 199.5, "p50_ms": 0.25, "p99_ms": 4.0,
                    "error_rate": 0.0, "dropped": 0, "passed": true}])
        );
    }

    #[test]
    fn summary_of_a_non_load_report_is_the_report() {
        let a = json!({"run_id": 9, "report": {"max_rate": 2000}});
        assert_eq!(report_summary(&a), a);
    }

    #[test]
    fn progress_from_duration_stages_or_iterations() {
        assert_eq!(progress(&json!({"duration": "10000ms"}), 4, 0), Some(0.4));
        assert_eq!(
            progress(
                &json!({"stages": [{"duration": "5s", "target": 1}, {"duration": "15s", "target": 1}]}),
                5,
                0
            ),
            Some(0.25)
        );
        assert_eq!(progress(&json!({"iterations": 200}), 1, 50), Some(0.25));
        // Past the end (grace time): capped.
        assert_eq!(progress(&json!({"duration": "2s"}), 3, 0), Some(1.0));
        // No known length.
        assert_eq!(progress(&json!({"url": "x"}), 3, 10), None);
        assert_eq!(progress(&json!({"duration": "bogus"}), 3, 10), None);
    }

    #[test]
    fn status_of_a_running_run_has_progress_and_live_numbers() {
        let row = json!({"id": 4, "name": null, "status": "running", "baseline": false,
                         "created_at": 1, "finished_at": null, "reason": null,
                         "spec": {"url": "http://127.0.0.1:1/", "duration": "4s"}});
        let series = [
            json!({"second": 0, "responses": 90, "failures": 0, "error_rate": 0.0, "dropped": 0,
                   "latency": {"p50_us": 1000, "p99_us": 2000}}),
            json!({"second": 1, "responses": 110, "failures": 1, "error_rate": 0.009, "dropped": 0,
                   "latency": {"p50_us": 1200, "p99_us": 2500}}),
        ];
        let s = run_status(&row, &series, 100);
        assert_eq!(s["run_id"], 4);
        assert_eq!(s["kind"], "run");
        assert_eq!(s["url"], "http://127.0.0.1:1/");
        assert_eq!(s["progress"], 0.5);
        assert_eq!(s["elapsed_s"], 2);
        assert_eq!(s["live"]["rps"], 110);
        assert_eq!(s["live"]["p99_ms"], 2.5);
        assert_eq!(s["live"]["responses_total"], 200);
        assert_eq!(s["live"]["failures_total"], 1);
        assert!(s.get("next").is_none());
    }

    #[test]
    fn status_of_a_finished_run_points_to_the_report() {
        let row = json!({"id": 4, "status": "completed", "kind": "capacity",
                         "spec": {"url": "http://127.0.0.1:1/"}});
        let s = run_status(&row, &[], 100);
        assert_eq!(s["progress"], 1.0);
        assert_eq!(s["kind"], "capacity");
        assert_eq!(s["live"], Value::Null);
        assert!(s["next"].as_str().unwrap().contains("get_report"));
        let stopped = json!({"id": 5, "status": "stopped", "spec": {}});
        assert_eq!(run_status(&stopped, &[], 100)["progress"], Value::Null);
    }
}
