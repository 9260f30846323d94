//! Segments of one run meeting on a real `gust serve` (`gust run --segment i/n
//! --start-at T --daemon URL --run NAME`): the daemon's live view is one run whose
//! ticks hold every segment, its stored report is the one `gust merge` makes of the
//! segments' own reports, a segment that never comes is named and fails the gate,
//! a late one is marked, and every refusal names what was wrong.

mod common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::daemon::{Daemon, events, events_at, get, post, start_daemon};
use common::process::{gust, output_of, rfc3339_in, wait_bounded};
use gust_engine::{TargetConfig, TargetServer};
use serde_json::{Value, json};

const RATE: u64 = 400;
const SECS: u64 = 3;

fn target() -> TargetServer {
    TargetServer::start(
        "127.0.0.1:0".parse().unwrap(),
        TargetConfig {
            threads: 1,
            delay: Duration::from_millis(2),
            ..TargetConfig::default()
        },
    )
    .unwrap()
}

fn write_spec(dir: &Path, url: &str) -> std::path::PathBuf {
    let path = dir.join("run.toml");
    std::fs::write(
        &path,
        format!(
            "url = \"{url}\"\nmode = \"open\"\nrate = {RATE}\nduration = \"{SECS}s\"\nworkers = 1\nthresholds = [\"errors<1%\"]\n"
        ),
    )
    .unwrap();
    path
}

fn set_grace(d: &Daemon, grace: &str) {
    let (status, body) = post(
        d,
        "/config",
        &json!({"retention": {"max_runs": 200, "max_age_days": 30}, "workers": null,
                "segment_grace": grace}),
    );
    assert_eq!(status, 200, "{body}");
}

fn segment(d: &Daemon, spec: &Path, i: u64, start_at: &str, extra: &[&str]) -> Child {
    gust()
        .arg("run")
        .arg(spec)
        .args(["--segment", &format!("{i}/4"), "--start-at", start_at])
        .args(["--daemon", &d.base, "--run", "four"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The run the daemon is holding, once a segment has opened it.
fn active_run(d: &Daemon) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(id) = get(d, "/health").1["active_run"].as_i64() {
            return id;
        }
        assert!(Instant::now() < deadline, "no segment opened the run");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn four_segments_meet_on_the_daemon_as_one_run() {
    let t = target();
    let dir = tempfile::tempdir().unwrap();
    let d = start_daemon(&dir.path().join("history.db"), &[]);
    let spec = write_spec(dir.path(), &format!("http://{}/", t.addr()));
    let start_at = rfc3339_in(1500);
    let children: Vec<Child> = (0..4)
        .map(|i| segment(&d, &spec, i, &start_at, &["--json"]))
        .collect();
    let run_id = active_run(&d);
    let base = d.base.clone();
    let watcher = std::thread::spawn(move || events_at(&base, run_id));
    let mut files = Vec::new();
    for (i, child) in children.into_iter().enumerate() {
        let out = wait_bounded(child, Duration::from_secs(SECS + 40));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "segment {i}: {stderr}");
        assert!(stderr.contains(&format!("joined run {run_id}")), "{stderr}");
        let path = dir.path().join(format!("segment-{i}.json"));
        std::fs::write(&path, &out.stdout).unwrap();
        files.push(path);
    }
    let evs = watcher.join().unwrap();

    // The stored report is the merge of the segments' own reports.
    let merged = output_of(gust().arg("merge").args(&files).arg("--json"));
    assert_eq!(merged.status.code(), Some(0));
    let offline: Value = serde_json::from_slice(&merged.stdout).unwrap();
    let offline = &offline["report"];
    let (status, stored) = get(&d, &format!("/runs/{run_id}/report"));
    assert_eq!(status, 200, "{stored}");
    assert_eq!(stored["status"], "completed", "{stored}");
    assert_eq!(stored["verdict"], "pass", "{stored}");
    let report = &stored["report"];
    for key in ["sent", "responses", "failures", "dropped"] {
        assert_eq!(report[key], offline[key], "{key}");
    }
    // The whole schedule, once: on a loaded box a request can find every
    // connection busy and be counted as dropped instead of sent.
    let (sent, dropped) = (report["sent"].as_u64(), report["dropped"].as_u64());
    assert_eq!(
        sent.zip(dropped).map(|(s, d)| s + d),
        Some(RATE * SECS),
        "sent {sent:?} + dropped {dropped:?}"
    );
    assert_eq!(report["latency"], offline["latency"]);
    assert_eq!(report["missing"], json!([]));
    let segments = report["segments"].as_array().unwrap();
    assert_eq!(segments.len(), 4);
    assert!(
        segments.iter().all(|s| s["state"] == "reported"),
        "{segments:?}"
    );
    let (_, series) = get(&d, &format!("/runs/{run_id}/series"));
    assert_eq!(
        series["series"].as_array().unwrap().len(),
        offline["series"].as_array().unwrap().len()
    );

    // Live: ticks that hold all four segments, totals that end at the run's.
    let ticks: Vec<&Value> = evs
        .iter()
        .filter(|(k, _)| k == "tick")
        .map(|(_, v)| v)
        .collect();
    let full = ticks.iter().filter(|t| t["segments"] == 4).count();
    assert!(
        full as u64 >= SECS * 4 - 2,
        "{full} of {} ticks held all four segments",
        ticks.len()
    );
    let indices: Vec<u64> = ticks.iter().map(|t| t["index"].as_u64().unwrap()).collect();
    assert!(indices.windows(2).all(|w| w[0] < w[1]), "{indices:?}");
    let last = ticks.last().unwrap();
    assert_eq!(last["totals"]["responses"], report["responses"]);
    let live_sum: u64 = ticks.iter().map(|t| t["responses"].as_u64().unwrap()).sum();
    assert_eq!(live_sum, report["responses"].as_u64().unwrap());
    let (kind, complete) = evs.last().unwrap();
    assert_eq!(kind, "complete");
    assert_eq!(complete["report"]["responses"], report["responses"]);
}

#[test]
fn a_missing_segment_is_named_and_fails_the_gate_and_a_late_one_is_marked() {
    let t = target();
    let dir = tempfile::tempdir().unwrap();
    let d = start_daemon(&dir.path().join("history.db"), &[]);
    set_grace(&d, "2s");
    let spec = write_spec(dir.path(), &format!("http://{}/", t.addr()));
    let start_at = rfc3339_in(1000);
    let waiting = segment(&d, &spec, 0, &start_at, &["--wait"]);
    let on_time = segment(&d, &spec, 1, &start_at, &[]);
    let run_id = active_run(&d);
    // The shared instant is 1 to 2 s away: segment 2 comes over a second after
    // it, while the run still goes; segment 3 never comes.
    std::thread::sleep(Duration::from_millis(3200));
    let late = segment(&d, &spec, 2, &start_at, &[]);
    for child in [on_time, late] {
        let out = wait_bounded(child, Duration::from_secs(SECS + 40));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = wait_bounded(waiting, Duration::from_secs(SECS + 40));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "the gate fails: {stdout}");
    assert!(
        stdout.contains("FAIL every segment reported (missing 3/4)"),
        "{stdout}"
    );

    let (_, row) = get(&d, &format!("/runs/{run_id}"));
    assert_eq!(row["status"], "completed");
    assert_eq!(row["reason"], "segments missing: 3/4");
    assert_eq!(row["verdict"], "fail");
    let (_, stored) = get(&d, &format!("/runs/{run_id}/report"));
    let report = &stored["report"];
    assert_eq!(report["missing"], json!(["3/4"]));
    assert_eq!(report["segment"], "0/4,1/4,2/4");
    let late: Vec<&Value> = report["segments"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["late"] == true)
        .collect();
    assert_eq!(late.len(), 1, "{}", report["segments"]);
    assert_eq!(late[0]["segment"], "2/4");
    assert!(late[0]["start_late_ms"].as_u64().unwrap() > 500);
    // Three quarters of the schedule: the late segment sends its whole share.
    let (sent, dropped) = (report["sent"].as_u64(), report["dropped"].as_u64());
    assert_eq!(
        sent.zip(dropped).map(|(s, d)| s + d),
        Some(RATE * SECS * 3 / 4),
        "sent {sent:?} + dropped {dropped:?}"
    );
}

fn join_body(segment: &str, start_at: &str, name: &str, rate: u64) -> Value {
    json!({"name": name, "url": "http://127.0.0.1:9/", "mode": "open", "rate": rate,
           "duration": "1s", "segment": segment, "start_at": start_at})
}

#[test]
fn rejects_segments_that_do_not_belong_to_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = start_daemon(&dir.path().join("history.db"), &[]);
    set_grace(&d, "1s");
    let at = rfc3339_in(1000);
    let refused = |body: Value, status: u16, code: &str, says: &str| {
        let (s, b) = post(&d, "/segments", &body);
        assert_eq!(
            (s, b["error"]["code"].as_str()),
            (status, Some(code)),
            "{b}"
        );
        let message = b["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
    };
    let mut unnamed = join_body("0/2", &at, "r", 10);
    unnamed.as_object_mut().unwrap().remove("name");
    refused(unnamed, 400, "invalid_segment", "name");
    let mut unstarted = join_body("0/2", &at, "r", 10);
    unstarted.as_object_mut().unwrap().remove("start_at");
    refused(unstarted, 400, "invalid_segment", "start_at");
    refused(
        join_body("0/1", &at, "r", 10),
        400,
        "invalid_segment",
        "segment",
    );

    let (s, first) = post(&d, "/segments", &join_body("0/2", &at, "r", 10));
    assert_eq!(s, 201, "{first}");
    let run_id = first["run_id"].as_i64().unwrap();
    refused(
        join_body("1/2", &at, "r", 20),
        409,
        "segment_mismatch",
        "`rate`",
    );
    refused(
        join_body("0/2", &at, "r", 10),
        409,
        "segment_overlap",
        "0/2",
    );
    refused(join_body("1/4", &at, "r", 10), 409, "segment_period", "1/4");
    refused(
        join_body("1/2", &at, "other", 10),
        409,
        "run_active",
        "running",
    );
    let (s, b) = post(
        &d,
        "/runs",
        &json!({"url": "http://127.0.0.1:9/", "mode": "closed", "concurrency": 1, "duration": "1s"}),
    );
    assert_eq!((s, b["error"]["code"].as_str()), (409, Some("run_active")));

    let tick = |member: u64, body: Value| {
        post(
            &d,
            &format!("/runs/{run_id}/segments/{member}/ticks"),
            &body,
        )
    };
    let bare = json!({"start_late_ms": 0, "ticks": [{"index": 0, "elapsed_s": 0.25, "rps": 0.0,
        "sent": 0, "responses": 0, "failures": 0, "dropped": 0, "in_flight": 0,
        "latency": {"p50_us": 0, "p90_us": 0, "p99_us": 0, "max_us": 0},
        "service": {"p50_us": 0, "p90_us": 0, "p99_us": 0, "max_us": 0},
        "totals": {"sent": 0, "responses": 0, "successes": 0, "failures": 0, "dropped": 0,
                   "error_rate": 0.0}}]});
    let (s, b) = tick(0, bare.clone());
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (400, Some("invalid_segment")),
        "{b}"
    );
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("histograms")
    );
    let (s, b) = tick(9, bare);
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{b}"
    );
    let (s, b) = post(
        &d,
        &format!("/runs/{run_id}/segments/0/report"),
        &json!({"not": "a report"}),
    );
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (400, Some("invalid_segment")),
        "{b}"
    );

    // No segment reports: the run fails after its end and grace, and is then closed.
    let complete = events(&d, run_id);
    let (_, done) = complete.last().unwrap();
    assert_eq!(done["status"], "failed", "{done}");
    assert!(done["reason"].as_str().unwrap().contains("no segment"));
    refused(join_body("1/2", &at, "r", 10), 409, "run_ended", "ended");
}

#[test]
fn stopping_the_run_stops_its_segments() {
    let t = target();
    let dir = tempfile::tempdir().unwrap();
    let d = start_daemon(&dir.path().join("history.db"), &[]);
    let spec = dir.path().join("long.toml");
    std::fs::write(
        &spec,
        format!(
            "url = \"http://{}/\"\nmode = \"open\"\nrate = 100\nduration = \"60s\"\nworkers = 1\n",
            t.addr()
        ),
    )
    .unwrap();
    let start_at = rfc3339_in(500);
    let children: Vec<Child> = (0..4)
        .map(|i| segment(&d, &spec, i, &start_at, &[]))
        .collect();
    let run_id = active_run(&d);
    std::thread::sleep(Duration::from_secs(3));
    let (s, b) = post(&d, &format!("/runs/{run_id}/stop"), &json!({}));
    assert_eq!(s, 202, "{b}");
    let begin = Instant::now();
    for child in children {
        let out = wait_bounded(child, Duration::from_secs(30));
        assert_eq!(out.status.code(), Some(0));
    }
    assert!(begin.elapsed() < Duration::from_secs(20));
    let (_, row) = get(&d, &format!("/runs/{run_id}"));
    assert_eq!(row["status"], "stopped", "{row}");
}

#[test]
fn rejects_segments_without_the_daemon_token() {
    let dir = tempfile::tempdir().unwrap();
    let d = start_daemon(&dir.path().join("history.db"), &["--token", "s3cret"]);
    let at = rfc3339_in(1000);
    let (s, b) = post(&d, "/segments", &join_body("0/2", &at, "r", 10));
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (401, Some("unauthorized"))
    );
    let (s, _) = post(&d, "/runs/1/segments/0/ticks", &json!({}));
    assert_eq!(s, 401);
    let (s, _) = post(&d, "/runs/1/segments/0/report", &json!({}));
    assert_eq!(s, 401);
    assert_eq!(get(&d, "/health").0, 401);
}

#[test]
fn rejects_bad_segment_flags_before_any_load() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(dir.path(), "http://127.0.0.1:9/");
    let at = rfc3339_in(1000);
    let cases: [(&[&str], &str); 5] = [
        (&["--run", "r"], "--daemon"),
        (
            &["--run", "r", "--daemon", "http://127.0.0.1:9"],
            "--segment",
        ),
        (&["--segment", "4/4"], "segment"),
        (&["--segment", "1/2", "--start-at", "tomorrow"], "start_at"),
        (
            &["--segment", "0:1/2", "--execution-segment", "1/2:1"],
            "segment",
        ),
    ];
    let start = ["--start-at", at.as_str()];
    for (flags, names) in cases {
        let start: &[&str] = if flags.contains(&"--start-at") {
            &[]
        } else {
            &start
        };
        let out = output_of(gust().arg("run").arg(&spec).args(flags).args(start));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(names), "{flags:?}: {stderr}");
    }
}
