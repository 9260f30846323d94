//! API tests against a real `gust serve` process on 127.0.0.1:0 with a real SQLite
//! file, driving load at a real `TargetServer` on loopback.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::daemon::{Daemon, client, get, start_daemon};
use gust_engine::{Stall, TargetConfig, TargetServer};
use serde_json::{Value, json};

fn target(cfg: TargetConfig) -> TargetServer {
    TargetServer::start("127.0.0.1:0".parse().unwrap(), cfg).unwrap()
}

fn fast_target() -> TargetServer {
    target(TargetConfig {
        threads: 1,
        ..TargetConfig::default()
    })
}

fn post_run(d: &Daemon, spec: &Value) -> (u16, Value) {
    let r = client()
        .post(format!("{}/runs", d.base))
        .json(spec)
        .send()
        .unwrap();
    (r.status().as_u16(), r.json().unwrap())
}

#[derive(Debug, Clone)]
struct Ev {
    id: u64,
    kind: String,
    data: Value,
}

/// Reads the SSE stream; stops after `limit` events or at its end.
fn sse(d: &Daemon, run_id: i64, last_event_id: Option<u64>, limit: usize) -> Vec<Ev> {
    let mut req = client().get(format!("{}/runs/{run_id}/live", d.base));
    if let Some(id) = last_event_id {
        req = req.header("Last-Event-ID", id.to_string());
    }
    let resp = req.send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut out = Vec::new();
    let (mut id, mut kind, mut data) = (0, String::new(), String::new());
    for line in BufReader::new(resp).lines() {
        let line = line.unwrap();
        if line.is_empty() {
            if !kind.is_empty() {
                out.push(Ev {
                    id,
                    kind: std::mem::take(&mut kind),
                    data: serde_json::from_str(&data).unwrap(),
                });
                data.clear();
                if out.len() == limit {
                    break;
                }
            }
            continue;
        }
        if let Some(v) = line.strip_prefix("id: ") {
            id = v.parse().unwrap();
        } else if let Some(v) = line.strip_prefix("event: ") {
            kind = v.to_string();
        } else if let Some(v) = line.strip_prefix("data: ") {
            data.push_str(v);
        }
    }
    out
}

fn wait_complete(d: &Daemon, run_id: i64) -> Value {
    let evs = sse(d, run_id, None, usize::MAX);
    let last = evs.last().expect("no events");
    assert_eq!(last.kind, "complete");
    last.data.clone()
}

fn tmp_db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("history.db");
    (dir, db)
}

fn closed(url: &str, extra: Value) -> Value {
    let mut spec = json!({"url": url, "mode": "closed", "concurrency": 2, "workers": 1});
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    spec
}

#[test]
fn rejects_invalid_specs_before_any_row_exists() {
    let (_dir, db) = tmp_db();
    let d = start_daemon(&db, &[]);
    let cases = [
        (
            json!({"url": "http://127.0.0.1:1/", "mode": "burst", "duration": "1s"}),
            "burst",
        ),
        (
            json!({"url": "http://127.0.0.1:1/", "mode": "closed", "concurrency": 1, "duration": "1s", "colour": "red"}),
            "colour",
        ),
        (
            json!({"url": "ftp://127.0.0.1:1/", "mode": "closed", "concurrency": 1, "duration": "1s"}),
            "url",
        ),
        (
            json!({"url": "http://127.0.0.1:1/", "mode": "closed", "concurrency": 1}),
            "duration",
        ),
        (
            json!({"url": "http://127.0.0.1:1/", "mode": "closed", "concurrency": 1, "duration": "1s", "thresholds": ["p99<<1"]}),
            "p99",
        ),
    ];
    for (spec, mentions) in cases {
        let (status, body) = post_run(&d, &spec);
        assert_eq!(status, 400, "{spec} -> {body}");
        assert_eq!(body["error"]["code"], "invalid_spec", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(mentions),
            "{message} should name {mentions}"
        );
    }
    let r = client()
        .post(format!("{}/runs", d.base))
        .body("{not json")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let (status, list) = get(&d, "/runs");
    assert_eq!(status, 200);
    assert_eq!(
        list["runs"].as_array().unwrap().len(),
        0,
        "no row for a rejected run"
    );
    let (status, body) = get(&d, "/runs/42");
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "not_found");
}

#[test]
fn rejects_cross_origin_requests_and_foreign_hosts() {
    let (_dir, db) = tmp_db();
    let d = start_daemon(&db, &[]);
    let c = client();
    let r = c
        .get(format!("{}/runs", d.base))
        .header("Origin", "http://evil.example")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let r = c
        .get(format!("{}/runs", d.base))
        .header("Sec-Fetch-Site", "cross-site")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let r = c
        .get(format!("{}/runs", d.base))
        .header("Host", "rebind.example")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let origin = d.base.clone();
    let r = c
        .get(format!("{}/runs", d.base))
        .header("Origin", origin)
        .header("Sec-Fetch-Site", "same-origin")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

#[test]
fn requires_token_when_configured_and_for_non_loopback_binds() {
    let (_dir, db) = tmp_db();
    let out = Command::new(env!("CARGO_BIN_EXE_gust"))
        .args(["serve", "--listen", "0.0.0.0:0", "--db"])
        .arg(&db)
        .env_remove("GUST_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("token"));
    let d = start_daemon(&db, &["--token", "s3cret"]);
    let r = client().get(format!("{}/runs", d.base)).send().unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = client()
        .get(format!("{}/runs", d.base))
        .bearer_auth("s3cret")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

#[test]
fn health_and_config_are_validated_all_or_nothing() {
    let (_dir, db) = tmp_db();
    let d = start_daemon(&db, &[]);
    let (_, h) = get(&d, "/health");
    assert_eq!(h["workers"], 2);
    let c = client();
    let bad = json!({"retention": {"max_runs": 5, "max_age_days": 0}, "workers": 3});
    let r = c
        .post(format!("{}/config", d.base))
        .json(&bad)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let (_, cfg) = get(&d, "/config");
    assert_eq!(
        cfg["retention"]["max_runs"], 200,
        "nothing applied from a rejected config"
    );
    assert_eq!(cfg["workers"], 2);
    let good = json!({"retention": {"max_runs": 5, "max_age_days": 7}, "workers": 3});
    let r = c
        .post(format!("{}/config", d.base))
        .json(&good)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let (_, h) = get(&d, "/health");
    assert_eq!(h["workers"], 3);
}

#[test]
fn lifecycle_start_live_complete_report() {
    let t = fast_target();
    let (_dir, db) = tmp_db();
    let d = start_daemon(&db, &[]);
    let (status, body) = post_run(
        &d,
        &closed(&t.url(), json!({"duration": "2s", "name": "life"})),
    );
    assert_eq!(status, 202, "{body}");
    let id = body["run_id"].as_i64().unwrap();
    let (_, run) = get(&d, &format!("/runs/{id}"));
    assert_eq!(run["status"], "running");
    let (status, busy) = post_run(&d, &closed(&t.url(), json!({"duration": "1s"})));
    assert_eq!(status, 409, "one run at a time: {busy}");
    let evs = sse(&d, id, None, usize::MAX);
    let ids: Vec<u64> = evs.iter().map(|e| e.id).collect();
    assert_eq!(
        ids,
        (1..=evs.len() as u64).collect::<Vec<_>>(),
        "ids are 1..n"
    );
    assert!(evs.iter().any(|e| e.kind == "tick"));
    let complete = evs.last().unwrap();
    assert_eq!(complete.kind, "complete");
    assert_eq!(complete.data["status"], "completed");
    let (status, rep) = get(&d, &format!("/runs/{id}/report"));
    assert_eq!(status, 200);
    let responses = rep["report"]["responses"].as_u64().unwrap();
    assert!(responses > 0);
    assert_eq!(
        complete.data["report"], rep["report"],
        "live complete event == stored report"
    );
    let last_tick = evs.iter().rev().find(|e| e.kind == "tick").unwrap();
    assert_eq!(
        last_tick.data["totals"]["responses"].as_u64().unwrap(),
        responses,
        "live totals == report"
    );
    let (_, series) = get(&d, &format!("/runs/{id}/series"));
    let live_seconds: Vec<Value> = evs
        .iter()
        .filter(|e| e.kind == "second")
        .map(|e| e.data.clone())
        .collect();
    assert_eq!(
        series["series"].as_array().unwrap(),
        &live_seconds,
        "stored series == live seconds"
    );
    let (_, run) = get(&d, &format!("/runs/{id}"));
    assert_eq!(run["status"], "completed");
    assert_eq!(run["name"], "life");
    assert_eq!(run["spec"]["url"], t.url());
    // Baseline, then delete.
    let c = client();
    let r = c
        .put(format!("{}/runs/{id}/baseline", d.base))
        .json(&json!({"baseline": true}))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let (_, list) = get(&d, "/runs?baseline=true");
    assert_eq!(list["runs"][0]["id"], id);
    let r = c.delete(format!("{}/runs/{id}", d.base)).send().unwrap();
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(get(&d, &format!("/runs/{id}")).0, 404);
}

#[test]
fn stop_mid_run_ends_it_early_with_a_report() {
    let t = fast_target();
    let (_dir, db) = tmp_db();
    let d = start_daemon(&db, &[]);
    let (_, body) = post_run(&d, &closed(&t.url(), json!({"duration": "60s"})));
    let id = body["run_id"].as_i64().unwrap();
    let first = sse(&d, id, None, 1);
    assert_eq!(first[0].kind, "tick");
    let r = client()
        .post(format!("{}/runs/{id}/stop", d.base))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    let complete = wait_complete(&d, id);
    assert_eq!(complete["status"], "stopped");
    assert_eq!(complete["report"]["stopped"], true);
    assert!(complete["report"]["elapsed_s"].as_f64().unwrap() < 30.0);
    let r = client()
        .post(format!("{}/runs/{id}/stop", d.base))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 409, "stopping a finished run");
}

#[test]
fn sse_replays_from_last_event_id_after_reconnect() {
    let t = fast_target();
    let (_dir, db) = tmp_db();
    let d = start_daemon(&db, &[]);
    let (_, body) = post_run(&d, &closed(&t.url(), json!({"duration": "2s"})));
    let id = body["run_id"].as_i64().unwrap();
    let head = sse(&d, id, None, 3);
    assert_eq!(head.iter().map(|e| e.id).collect::<Vec<_>>(), vec![1, 2, 3]);
    // Reconnect while the run goes on: only what was missed, without gaps.
    let rest = sse(&d, id, Some(3), usize::MAX);
    assert_eq!(rest[0].id, 4);
    assert_eq!(rest.last().unwrap().kind, "complete");
    let full = sse(&d, id, None, usize::MAX);
    let joined: Vec<u64> = head.iter().chain(&rest).map(|e| e.id).collect();
    assert_eq!(joined, full.iter().map(|e| e.id).collect::<Vec<_>>());
    assert_eq!(full[3].data, rest[0].data, "same event for the same id");
}

#[test]
fn retention_prunes_oldest_runs_and_keeps_baselines() {
    let t = fast_target();
    let (_dir, db) = tmp_db();
    let mut ids = Vec::new();
    {
        let d = start_daemon(&db, &["--retain-runs", "2"]);
        for i in 0..4 {
            let (status, body) = post_run(&d, &closed(&t.url(), json!({"iterations": 20})));
            assert_eq!(status, 202, "{body}");
            let id = body["run_id"].as_i64().unwrap();
            wait_complete(&d, id);
            ids.push(id);
            if i == 0 {
                let r = client()
                    .put(format!("{}/runs/{id}/baseline", d.base))
                    .send()
                    .unwrap();
                assert_eq!(r.status().as_u16(), 200);
            }
        }
        // Pruning runs after each run, before the complete event is sent only in the
        // next run's tail, so give the last prune a moment through a fresh list.
        let mut listed = Vec::new();
        for _ in 0..50 {
            let (_, list) = get(&d, "/runs");
            listed = list["runs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["id"].as_i64().unwrap())
                .collect();
            if listed.len() == 3 {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(
            listed,
            vec![ids[3], ids[2], ids[0]],
            "2 newest + the baseline"
        );
        assert_eq!(get(&d, &format!("/runs/{}/series", ids[1])).0, 404);
    }
    // Pruning at start, with a smaller limit.
    let d = start_daemon(&db, &["--retain-runs", "1"]);
    let (_, list) = get(&d, "/runs");
    let listed: Vec<i64> = list["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(listed, vec![ids[3], ids[0]]);
}

#[test]
fn runs_left_running_by_a_crash_are_marked_failed_at_start() {
    let t = fast_target();
    let (_dir, db) = tmp_db();
    let id;
    {
        let mut d = start_daemon(&db, &[]);
        let (_, body) = post_run(&d, &closed(&t.url(), json!({"duration": "60s"})));
        id = body["run_id"].as_i64().unwrap();
        // Let at least one second reach the history, then SIGKILL the daemon.
        let evs = sse(&d, id, None, 6);
        assert!(evs.iter().any(|e| e.kind == "second"));
        d.child.kill().unwrap();
        d.child.wait().unwrap();
    }
    let conn = rusqlite::Connection::open(&db).unwrap();
    let status: String = conn
        .query_row("SELECT status FROM runs WHERE id = ?1", [id], |r| r.get(0))
        .unwrap();
    assert_eq!(status, "running", "the crash left the row running");
    drop(conn);
    let d = start_daemon(&db, &[]);
    let (_, run) = get(&d, &format!("/runs/{id}"));
    assert_eq!(run["status"], "failed");
    assert!(
        run["reason"].as_str().unwrap().contains("daemon stopped"),
        "{run}"
    );
    let (_, series) = get(&d, &format!("/runs/{id}/series"));
    assert!(
        !series["series"].as_array().unwrap().is_empty(),
        "partial series kept"
    );
    // Its live stream ends at once with the failure.
    let complete = wait_complete(&d, id);
    assert_eq!(complete["status"], "failed");
}

/// The stored percentiles of a second come from every sample of that second, not from
/// its last tick: compare each stored second with the four 250 ms ticks it spans, on a
/// target that stalls for 200 ms every 700 ms. Stalled requests all complete at a stall's
/// end, and stall ends are 700 ms apart, so they fall in different ticks of different
/// seconds: at least one second has its slowest tick before its last one.
#[test]
fn per_second_series_covers_every_sample_of_the_second() {
    let t = target(TargetConfig {
        threads: 1,
        stall: Some(Stall {
            every: Duration::from_millis(700),
            length: Duration::from_millis(200),
        }),
        ..TargetConfig::default()
    });
    let (_dir, db) = tmp_db();
    let d = start_daemon(&db, &[]);
    let (_, body) = post_run(
        &d,
        &closed(&t.url(), json!({"duration": "4s", "concurrency": 4})),
    );
    let id = body["run_id"].as_i64().unwrap();
    let evs = sse(&d, id, None, usize::MAX);
    let ticks: Vec<&Value> = evs
        .iter()
        .filter(|e| e.kind == "tick")
        .map(|e| &e.data)
        .collect();
    let (_, series) = get(&d, &format!("/runs/{id}/series"));
    let series = series["series"].as_array().unwrap().clone();
    assert!(series.len() >= 3, "{series:?}");
    let mut saw_uneven_second = false;
    for s in &series {
        let second = s["second"].as_u64().unwrap();
        let in_second: Vec<&&Value> = ticks
            .iter()
            .filter(|t| t["index"].as_u64().unwrap() / 4 == second)
            .collect();
        if in_second.len() < 4 {
            continue; // a partial last second (grace period)
        }
        let tick_responses: u64 = in_second
            .iter()
            .map(|t| t["responses"].as_u64().unwrap())
            .sum();
        assert_eq!(
            s["responses"].as_u64().unwrap(),
            tick_responses,
            "second {second} counts every tick"
        );
        let tick_max = in_second
            .iter()
            .map(|t| t["latency"]["max_us"].as_u64().unwrap())
            .max()
            .unwrap();
        assert_eq!(
            s["latency"]["max_us"].as_u64().unwrap(),
            tick_max,
            "second {second} max"
        );
        let p50s: Vec<u64> = in_second
            .iter()
            .filter(|t| t["responses"].as_u64().unwrap() > 0)
            .map(|t| t["latency"]["p50_us"].as_u64().unwrap())
            .collect();
        let p50 = s["latency"]["p50_us"].as_u64().unwrap();
        assert!(
            p50 >= *p50s.iter().min().unwrap() && p50 <= *p50s.iter().max().unwrap(),
            "second {second}: merged p50 {p50} within tick p50s {p50s:?}"
        );
        let last_max = in_second[3]["latency"]["max_us"].as_u64().unwrap();
        if last_max < tick_max {
            saw_uneven_second = true;
        }
    }
    assert!(
        saw_uneven_second,
        "the stall pattern should make some second's last tick unrepresentative"
    );
    // And the seconds add up to the report (one source of truth).
    let (_, rep) = get(&d, &format!("/runs/{id}/report"));
    let total: u64 = series
        .iter()
        .map(|s| s["responses"].as_u64().unwrap())
        .sum();
    assert_eq!(total, rep["report"]["responses"].as_u64().unwrap());
    let max = series
        .iter()
        .map(|s| s["latency"]["max_us"].as_u64().unwrap())
        .max()
        .unwrap();
    assert_eq!(max, rep["report"]["latency"]["max_us"].as_u64().unwrap());
}

fn get_text(d: &Daemon, path: &str) -> (u16, String) {
    let r = client().get(format!("{}{path}", d.base)).send().unwrap();
    (r.status().as_u16(), r.text().unwrap())
}

/// The value of an unlabelled sample in Prometheus text.
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} missing from:\n{text}"))
        .parse()
        .unwrap()
}

#[test]
fn metrics_count_runs_and_the_requests_they_sent() {
    let t = fast_target();
    let (_dir, db) = tmp_db();
    let d = start_daemon(&db, &[]);
    let (status, text) = get_text(&d, "/metrics");
    assert_eq!(status, 200);
    assert_eq!(sample(&text, "gust_runs_started_total"), 0.0);
    assert_eq!(sample(&text, "gust_run_active"), 0.0);
    let (status, body) = post_run(&d, &closed(&t.url(), json!({"iterations": 400})));
    assert_eq!(status, 202, "{body}");
    let id = body["run_id"].as_i64().unwrap();
    let done = wait_complete(&d, id);
    let (_, text) = get_text(&d, "/metrics");
    assert_eq!(sample(&text, "gust_runs_started_total"), 1.0);
    assert!(
        text.contains("gust_runs_finished_total{status=\"completed\"} 1\n"),
        "{text}"
    );
    assert_eq!(sample(&text, "gust_run_active"), 0.0);
    assert_eq!(
        sample(&text, "gust_requests_sent_total"),
        done["report"]["sent"].as_f64().unwrap()
    );
    assert_eq!(sample(&text, "gust_requests_sent_total"), 400.0);
}

#[test]
fn engine_settings_are_validated_and_applied_to_runs() {
    let t = fast_target();
    let (_dir, db) = tmp_db();
    let d = start_daemon(&db, &[]);
    let c = client();
    let retention = json!({"max_runs": 50, "max_age_days": 7});
    for (bad, field) in [
        (
            json!({"retention": retention, "workers": 1, "tick": "300ms"}),
            "tick",
        ),
        (
            json!({"retention": retention, "workers": 1, "max_body": 0}),
            "max_body",
        ),
        (
            json!({"retention": retention, "workers": 1, "max_connections_per_host": 0}),
            "max_connections_per_host",
        ),
        (
            json!({"retention": retention, "workers": 1, "colour": 1}),
            "colour",
        ),
    ] {
        let r = c
            .post(format!("{}/config", d.base))
            .json(&bad)
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{bad}");
        let body: Value = r.json().unwrap();
        assert!(
            body["error"]["message"].as_str().unwrap().contains(field),
            "{body}"
        );
    }
    let good = json!({"retention": retention, "workers": 1, "tick": "100ms",
                      "max_body": 4096, "max_connections_per_host": 4});
    let r = c
        .post(format!("{}/config", d.base))
        .json(&good)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let (_, cfg) = get(&d, "/config");
    assert_eq!(cfg["tick"], "100ms");
    assert_eq!(cfg["max_body"], 4096);
    assert_eq!(cfg["max_connections_per_host"], 4);

    // Over the per-host connection limit: refused before any row exists.
    let (status, body) = post_run(
        &d,
        &closed(&t.url(), json!({"concurrency": 8, "duration": "1s"})),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_connections_per_host"),
        "{body}"
    );
    // Within it: the daemon's tick applies (ten ticks a second).
    let (status, body) = post_run(
        &d,
        &closed(&t.url(), json!({"concurrency": 4, "duration": "1s"})),
    );
    assert_eq!(status, 202, "{body}");
    let id = body["run_id"].as_i64().unwrap();
    wait_complete(&d, id);
    let (_, run) = get(&d, &format!("/runs/{id}"));
    assert_eq!(run["spec"]["tick"], "100ms", "{run}");
}
