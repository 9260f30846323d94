//! `gust capacity` (the binary) and `POST /capacity` on a real `gust serve`, against a
//! real `TargetServer` on loopback. Rates are low and steps short: these check the
//! plumbing (exit codes, JSON, events, stop, history), not a capacity; the measured
//! search is `tests/capacity.rs`.

mod common;

use std::process::Command;

use common::daemon::{client, events, get, post, start_daemon};
use gust_engine::{TargetConfig, TargetServer};
use serde_json::{Value, json};

fn target(status: u16) -> TargetServer {
    TargetServer::start(
        "127.0.0.1:0".parse().unwrap(),
        TargetConfig {
            threads: 1,
            status,
            ..TargetConfig::default()
        },
    )
    .unwrap()
}

fn gust(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gust"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const QUICK: [&str; 8] = [
    "--start",
    "50",
    "--max",
    "200",
    "--step-duration",
    "500ms",
    "--pause",
    "0s",
];

#[test]
fn cli_reports_max_reached_and_exits_0_when_every_step_passes() {
    let t = target(200);
    let url = t.url();
    let mut args = vec!["capacity", url.as_str(), "--slo", "errors<1%", "--json"];
    args.extend(QUICK);
    let (code, stdout, stderr) = gust(&args);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let r: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(r["version"], 1);
    assert_eq!(r["best_rate"], 200.0);
    assert_eq!(r["stop_code"], "max_reached_and_passed");
    let rates: Vec<f64> = r["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["rate"].as_f64().unwrap())
        .collect();
    assert_eq!(rates, vec![50.0, 100.0, 200.0]);
    let first = &r["steps"][0];
    assert_eq!(first["passed"], true);
    assert_eq!(first["verdicts"][0]["expr"], "errors<1%");
    assert!(first["sent"].as_u64().unwrap() > 0);
    assert_eq!(r["slo"], json!(["errors<1%"]));
}

#[test]
fn cli_prints_the_step_table_and_exits_1_when_the_first_step_fails() {
    let t = target(503);
    let url = t.url();
    let mut args = vec!["capacity", url.as_str(), "--slo", "errors<1%"];
    args.extend(QUICK);
    let (code, stdout, stderr) = gust(&args);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(stdout.contains("achieved"), "{stdout}");
    assert!(stdout.contains("FAIL"), "{stdout}");
    assert!(stdout.contains("errors<1% violated"), "{stdout}");
    assert!(stdout.contains("best rate: none"), "{stdout}");
    assert!(stdout.contains("first step failed"), "{stdout}");
}

#[test]
fn cli_takes_a_spec_file_and_its_thresholds_as_the_slo() {
    let t = target(200);
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.toml");
    std::fs::write(
        &spec,
        format!(
            "url = \"{}\"\nmode = \"closed\"\nconcurrency = 2\nduration = \"1s\"\nthresholds = [\"errors<1%\"]\nheaders = [[\"X-Test\", \"1\"]]\n",
            t.url()
        ),
    )
    .unwrap();
    let spec = spec.to_str().unwrap();
    let mut args = vec!["capacity", spec, "--json"];
    args.extend(QUICK);
    let (code, stdout, stderr) = gust(&args);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let r: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(r["slo"], json!(["errors<1%"]));
    assert_eq!(r["best_rate"], 200.0);
}

#[test]
fn rejects_bad_cli_input_with_exit_2() {
    let t = target(200);
    let url = t.url();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["capacity", &url], "--slo"),
        (vec!["capacity", &url, "--slo", "latency<1s"], "slo"),
        (
            vec!["capacity", &url, "--slo", "errors<1%", "--start", "0"],
            "start",
        ),
        (
            vec![
                "capacity",
                &url,
                "--slo",
                "errors<1%",
                "--start",
                "100",
                "--max",
                "10",
            ],
            "max",
        ),
        (
            vec!["capacity", &url, "--slo", "errors<1%", "--precision", "0%"],
            "precision",
        ),
        (
            vec!["capacity", "ftp://127.0.0.1/", "--slo", "errors<1%"],
            "url",
        ),
        (
            vec!["capacity", "/nonexistent/spec.toml", "--slo", "errors<1%"],
            "cannot read",
        ),
    ];
    for (args, needle) in cases {
        let (code, stdout, stderr) = gust(&args);
        assert_eq!(code, 2, "{args:?}: {stdout}\n{stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(
            stdout.is_empty() || !stdout.contains("step"),
            "{args:?}: {stdout}"
        );
    }
}

#[test]
fn daemon_runs_a_capacity_search_as_a_run_of_kind_capacity() {
    let t = target(200);
    let dir = tempfile::tempdir().unwrap();
    let d = start_daemon(&dir.path().join("h.db"), &[]);
    let (status, body) = post(
        &d,
        "/capacity",
        &json!({"url": t.url(), "slo": "p99<1s,errors<1%", "start": 50, "max": 200,
                "step_duration": "500ms", "precision": 0.05, "pause": "0s", "name": "cap"}),
    );
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_i64().unwrap();
    assert_eq!(body["run_id"], id);

    // One run or search at a time.
    let (status, body) = post(
        &d,
        "/runs",
        &json!({"url": t.url(), "mode": "closed", "concurrency": 1, "duration": "1s"}),
    );
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "run_active");

    let evs = events(&d, id);
    let steps: Vec<&Value> = evs
        .iter()
        .filter(|(k, _)| k == "capacity_step")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(steps.len(), 3, "{evs:?}");
    assert_eq!(steps[0]["rate"], 50.0);
    assert_eq!(steps[2]["index"], 3);
    // The steps' ticks feed the live panel on one time axis, with totals over the
    // whole search.
    let ticks: Vec<&Value> = evs
        .iter()
        .filter(|(k, _)| k == "tick")
        .map(|(_, v)| v)
        .collect();
    let elapsed: Vec<f64> = ticks
        .iter()
        .map(|t| t["elapsed_s"].as_f64().unwrap())
        .collect();
    assert!(
        !elapsed.is_empty() && elapsed.windows(2).all(|w| w[0] < w[1]),
        "{elapsed:?}"
    );
    let searched: u64 = steps.iter().map(|s| s["responses"].as_u64().unwrap()).sum();
    assert_eq!(ticks.last().unwrap()["totals"]["responses"], searched);
    let (kind, complete) = evs.last().unwrap();
    assert_eq!(kind, "complete");
    assert_eq!(complete["status"], "completed");
    assert_eq!(complete["report"]["best_rate"], 200.0);

    let (status, row) = get(&d, &format!("/runs/{id}"));
    assert_eq!(status, 200);
    assert_eq!(row["kind"], "capacity");
    assert_eq!(row["status"], "completed");
    assert_eq!(row["name"], "cap");
    let (status, rep) = get(&d, &format!("/runs/{id}/report"));
    assert_eq!(status, 200);
    assert_eq!(rep["kind"], "capacity");
    assert_eq!(rep["report"]["stop_code"], "max_reached_and_passed");
    assert_eq!(rep["report"]["steps"].as_array().unwrap().len(), 3);
    assert_eq!(rep["report"]["steps"], json!(steps));
    let (_, list) = get(&d, "/runs");
    assert_eq!(list["runs"][0]["report"]["best_rate"], 200.0);
    // Its requests count in the daemon's metrics like a run's.
    let sent: u64 = rep["report"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sent"].as_u64().unwrap())
        .sum();
    let metrics = client()
        .get(format!("{}/metrics", d.base))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let counted: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("gust_requests_sent_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(counted as u64, sent, "{metrics}");
}

#[test]
fn daemon_stops_a_capacity_search() {
    let t = target(200);
    let dir = tempfile::tempdir().unwrap();
    let d = start_daemon(&dir.path().join("h.db"), &[]);
    let (status, body) = post(
        &d,
        "/capacity",
        &json!({"url": t.url(), "slo": "errors<1%", "start": 20, "max": 100,
                "step_duration": "60s"}),
    );
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_i64().unwrap();
    let (status, body) = post(&d, &format!("/runs/{id}/stop"), &json!({}));
    assert_eq!(status, 202, "{body}");
    let evs = events(&d, id);
    let (_, complete) = evs.last().unwrap();
    assert_eq!(complete["status"], "stopped", "{evs:?}");
    assert_eq!(complete["report"]["stop_code"], "stopped");
    assert_eq!(complete["report"]["best_rate"], Value::Null);
    let (_, row) = get(&d, &format!("/runs/{id}"));
    assert_eq!(row["status"], "stopped");
    // The slot is free again.
    let (status, _) = post(&d, &format!("/runs/{id}/stop"), &json!({}));
    assert_eq!(status, 409);
}

#[test]
fn rejects_invalid_capacity_requests_before_any_row_exists() {
    let dir = tempfile::tempdir().unwrap();
    let d = start_daemon(&dir.path().join("h.db"), &[]);
    let cases = [
        (json!({"url": "http://127.0.0.1:1/"}), "slo"),
        (
            json!({"url": "http://127.0.0.1:1/", "slo": "latency<1s"}),
            "slo",
        ),
        (
            json!({"url": "http://127.0.0.1:1/", "slo": "errors<1%", "start": -1}),
            "start",
        ),
        (
            json!({"url": "http://127.0.0.1:1/", "slo": "errors<1%", "precision": 2}),
            "precision",
        ),
        (
            json!({"url": "http://127.0.0.1:1/", "slo": "errors<1%", "step_duration": "x"}),
            "step_duration",
        ),
        (
            json!({"url": "http://127.0.0.1:1/", "slo": "errors<1%", "bogus": true}),
            "bogus",
        ),
        (json!({"url": "nope", "slo": "errors<1%"}), "url"),
    ];
    for (body, needle) in cases {
        let (status, answer) = post(&d, "/capacity", &body);
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_spec");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{body}: {message}");
    }
    let (_, list) = get(&d, "/runs");
    assert_eq!(list["runs"], json!([]));
}

#[test]
fn a_history_from_before_the_kind_column_reads_as_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("old.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(
            "CREATE TABLE runs (
               id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, status TEXT NOT NULL,
               reason TEXT, verdict TEXT, baseline INTEGER NOT NULL DEFAULT 0,
               created_at INTEGER NOT NULL, finished_at INTEGER, url TEXT NOT NULL,
               spec TEXT NOT NULL, report TEXT, verdicts TEXT NOT NULL DEFAULT '[]');
             CREATE TABLE series (run_id INTEGER NOT NULL, second INTEGER NOT NULL,
               sample TEXT NOT NULL, PRIMARY KEY (run_id, second));
             INSERT INTO runs (name, status, created_at, url, spec)
               VALUES ('old', 'completed', strftime('%s','now'), 'http://x/', '{}');",
        )
        .unwrap();
    }
    let d = start_daemon(&db, &[]);
    let (status, row) = get(&d, "/runs/1");
    assert_eq!(status, 200, "{row}");
    assert_eq!(row["kind"], "run");
    assert_eq!(row["name"], "old");
    drop(d);
    // A second start finds the column and leaves it.
    let d = start_daemon(&db, &[]);
    assert_eq!(get(&d, "/runs/1").1["kind"], "run");
}
