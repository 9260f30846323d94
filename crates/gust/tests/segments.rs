//! Four `gust run --segment i/4` processes against a real nginx at one fixed total
//! rate, started together with `--start-at`, then `gust merge`: the merged run sent
//! the whole schedule, nginx's access log saw exactly the merged responses, and
//! each row of a `unique` data file was used once across the four processes.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::nginx::{nginx_or_skip, start_nginx};
use common::process::{gust, output_of, rfc3339_in, wait_bounded};
use serde_json::Value;

const RATE: u64 = 300;
const SECS: u64 = 4;
const ROWS: u64 = 2000;

fn write_spec(dir: &Path, url: &str) {
    let mut rows = String::from("id\n");
    for i in 0..ROWS {
        rows.push_str(&format!("u{i}\n"));
    }
    std::fs::write(dir.join("users.csv"), rows).unwrap();
    std::fs::write(
        dir.join("run.toml"),
        format!(
            r#"
url = "{url}"
mode = "open"
rate = {RATE}
duration = "{SECS}s"
workers = 1
thresholds = ["errors<1%"]

[data]
file = "users.csv"
mode = "unique"

[[steps]]
name = "get"
path = "/users/{{{{data.id}}}}"
status = [200]
"#
        ),
    )
    .unwrap();
}

/// The four segments, started together; their JSON report files.
fn run_four(dir: &Path) -> Vec<std::path::PathBuf> {
    let start_at = rfc3339_in(500);
    let children: Vec<(std::path::PathBuf, Child)> = (0..4)
        .map(|i| {
            let out = dir.join(format!("segment-{i}.json"));
            let child = gust()
                .arg("run")
                .arg(dir.join("run.toml"))
                .args([
                    "--segment",
                    &format!("{i}/4"),
                    "--start-at",
                    &start_at,
                    "--json",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (out, child)
        })
        .collect();
    children
        .into_iter()
        .map(|(path, child)| {
            let out = wait_bounded(child, Duration::from_secs(SECS + 30));
            assert_eq!(
                out.status.code(),
                Some(0),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::fs::write(&path, &out.stdout).unwrap();
            path
        })
        .collect()
}

#[test]
fn four_segments_against_nginx_are_one_run() {
    let Some(bin) = nginx_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let nginx = start_nginx(
        &bin,
        dir.path(),
        &format!(
            "log_format paths '$request_uri $status';\n  access_log {} paths;",
            log.display()
        ),
        "return 200 \"ok\\n\";",
    );
    write_spec(dir.path(), &format!("http://{}/", nginx.addr));
    let files = run_four(dir.path());

    let merged = output_of(gust().arg("merge").args(&files).arg("--json"));
    assert_eq!(
        merged.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    let merged: Value = serde_json::from_slice(&merged.stdout).unwrap();
    let report = &merged["report"];
    assert!(
        report.get("segment").is_none(),
        "four quarters are the whole run"
    );
    assert_eq!(merged["passed"], true, "errors<1% from the segments' spec");

    // The whole schedule, within 0.1 % (a request the box could not send before
    // the deadline is dropped, not sent).
    let sent = report["sent"].as_u64().unwrap();
    let schedule = RATE * SECS;
    assert!(
        sent.abs_diff(schedule) * 1000 <= schedule,
        "sent {sent} of {schedule}"
    );
    assert_eq!(sent + report["dropped"].as_u64().unwrap(), schedule);

    // nginx saw exactly the merged responses, each unique row once.
    drop(nginx);
    let text = std::fs::read_to_string(&log).unwrap();
    let mut rows: BTreeMap<&str, usize> = BTreeMap::new();
    for line in text.lines() {
        let (path, status) = line.split_once(' ').unwrap();
        assert_eq!(status, "200", "{line}");
        *rows.entry(path).or_default() += 1;
    }
    let lines: usize = rows.values().sum();
    assert_eq!(lines as u64, report["responses"].as_u64().unwrap());
    let reused: Vec<_> = rows.iter().filter(|(_, n)| **n > 1).collect();
    assert!(reused.is_empty(), "rows used twice: {reused:?}");
    assert_eq!(
        report["steps"][0]["responses"].as_u64().unwrap(),
        lines as u64
    );

    // The per-second series is the run's, on one time axis.
    let series = report["series"].as_array().unwrap();
    let by_second: u64 = series
        .iter()
        .map(|s| s["responses"].as_u64().unwrap())
        .sum();
    assert_eq!(by_second, lines as u64);
    assert!(series.len() as u64 <= SECS + 1, "{} seconds", series.len());
}

#[test]
fn merge_refuses_overlapping_or_missing_segments_naming_the_files() {
    let Some(bin) = nginx_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let nginx = start_nginx(&bin, dir.path(), "access_log off;", "return 200 \"ok\\n\";");
    let url = format!("http://{}/", nginx.addr);
    let segment = |i: u32, name: &str| {
        let out = output_of(
            gust()
                .args([&url, "-R", "100", "-d", "300ms", "-t", "1", "--json"])
                .args(["--segment", &format!("{i}/2")]),
        );
        assert_eq!(out.status.code(), Some(0));
        let path = dir.path().join(name);
        std::fs::write(&path, out.stdout).unwrap();
        path
    };
    let a = segment(0, "a.json");
    let b = segment(0, "b.json");
    let merge =
        |files: &[&Path], extra: &[&str]| output_of(gust().arg("merge").args(files).args(extra));
    let out = merge(&[&a, &b], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("a.json") && stderr.contains("b.json") && stderr.contains("overlap"),
        "{stderr}"
    );

    let out = merge(&[&a], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("leave part of the run out"), "{stderr}");
    let out = merge(&[&a], &["--partial", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let partial: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(partial["report"]["segment"], "0/2");

    // A threshold on the merged result gates the exit code.
    let c = segment(1, "c.json");
    let out = merge(&[&a, &c], &["--threshold", "rps>1000000"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
