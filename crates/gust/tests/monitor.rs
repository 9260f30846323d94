//! `gust --monitor`: the CLI against the built-in target, with a small Prometheus
//! endpoint on a thread (a counter that grows by 7 per scrape, a gauge, a histogram
//! and a series the pattern must leave out). The JSON report and the long CSV carry
//! the series; a dead endpoint is counted, not fatal; bad settings exit 2.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use gust_engine::{TargetConfig, TargetServer};

fn gust(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gust"))
        .args(args)
        .output()
        .unwrap()
}

/// Serves the exposition on every request (one per connection); returns its URL.
fn metrics_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/metrics", listener.local_addr().unwrap());
    let scrapes = Arc::new(AtomicU64::new(0));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            let n = scrapes.fetch_add(1, Ordering::Relaxed);
            let body = format!(
                "# HELP demo_requests_total Requests.\n\
                 # TYPE demo_requests_total counter\n\
                 demo_requests_total{{path=\"/a \\\"quoted\\\"\"}} {}\n\
                 # TYPE demo_queue gauge\n\
                 demo_queue 42\n\
                 # TYPE demo_latency_seconds histogram\n\
                 demo_latency_seconds_bucket{{le=\"+Inf\"}} {n}\n\
                 demo_latency_seconds_sum {}\n\
                 demo_latency_seconds_count {n}\n\
                 this line is malformed\n\
                 other_metric 1\n",
                n * 7,
                n as f64 * 0.5
            );
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

#[test]
fn json_and_csv_carry_the_monitor_series() {
    let server =
        TargetServer::start("127.0.0.1:0".parse().unwrap(), TargetConfig::default()).unwrap();
    let metrics = metrics_endpoint();
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("monitor.csv");
    let pid = std::process::id().to_string();
    let out = gust(&[
        "-c",
        "2",
        "-d",
        "3s",
        "-t",
        "1",
        "--json",
        "--monitor",
        &metrics,
        "--monitor-metric",
        "demo_*",
        "--monitor-pid",
        &pid,
        "--monitor-csv",
        csv.to_str().unwrap(),
        &server.url(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let report = &json["report"];
    assert_eq!(json["config"]["monitor"][0], metrics.as_str());
    let series = report["monitor"].as_array().expect("monitor series");
    let find = |name: &str| {
        series
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {series:#?}"))
    };
    let counter = find("demo_requests_total");
    assert_eq!(counter["kind"], "rate");
    assert_eq!(counter["labels"]["path"], "/a \"quoted\"");
    let rates: Vec<f64> = counter["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[1].as_f64().unwrap())
        .collect();
    assert!(rates.len() >= 2, "{counter}");
    assert!(rates.iter().all(|r| *r > 0.0), "7 per scrape: {rates:?}");
    let gauge = find("demo_queue");
    assert_eq!(gauge["kind"], "gauge");
    assert!(
        gauge["points"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p[1] == 42.0)
    );
    assert_eq!(find("demo_latency_seconds_count")["kind"], "rate");
    assert_eq!(find("demo_latency_seconds_sum")["unit"], "s/s");
    assert!(series.iter().all(|s| s["name"] != "other_metric"));
    assert!(
        series
            .iter()
            .all(|s| s["name"] != "demo_latency_seconds_bucket"),
        "buckets are not charted"
    );
    let cpu = find("process_cpu_percent");
    assert_eq!(cpu["labels"]["pid"], pid.as_str());
    assert!(find("process_rss_bytes")["points"][0][1].as_f64().unwrap() > 0.0);
    let sources = report["monitor_sources"].as_array().unwrap();
    assert_eq!(sources[0]["source"], metrics.as_str());
    assert!(sources[0]["malformed_lines"].as_u64().unwrap() >= 3);
    assert_eq!(sources[1]["source"], format!("pid:{pid}"));

    let csv = std::fs::read_to_string(csv).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("t_s,source,series,name,kind,unit,value"));
    assert!(lines.any(|l| l.contains(",demo_queue,gauge,,42")), "{csv}");
}

#[test]
fn dead_and_silent_endpoints_are_counted_and_the_run_still_passes() {
    let server =
        TargetServer::start("127.0.0.1:0".parse().unwrap(), TargetConfig::default()).unwrap();
    // Bound and closed again: nothing listens there.
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/metrics", l.local_addr().unwrap())
    };
    // Accepts and never answers: each scrape times out.
    let silent_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent = format!("http://{}/metrics", silent_listener.local_addr().unwrap());
    let out = gust(&[
        "-c",
        "1",
        "-d",
        "1s",
        "-t",
        "1",
        "--json",
        "--monitor",
        &dead,
        "--monitor",
        &silent,
        &server.url(),
    ]);
    drop(silent_listener);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let source = &json["report"]["monitor_sources"][0];
    assert!(source["errors"].as_u64().unwrap() >= 1, "{source}");
    assert_eq!(source["errors"], source["attempts"]);
    assert!(source["last_error"].as_str().unwrap().contains("connect"));
    let source = &json["report"]["monitor_sources"][1];
    assert!(source["errors"].as_u64().unwrap() >= 1, "{source}");
    assert_eq!(source["errors"], source["attempts"]);
    assert!(
        source["last_error"]
            .as_str()
            .unwrap()
            .contains("no answer within"),
        "{source}"
    );
    assert!(json["report"].get("monitor").is_none(), "no series, no key");
}

#[test]
fn rejects_bad_monitor_settings_with_exit_2() {
    for (args, field) in [
        (vec!["--monitor-pid", "0"], "monitor_pid"),
        (vec!["--monitor", "ftp://127.0.0.1/metrics"], "monitor"),
        (
            vec![
                "--monitor",
                "http://127.0.0.1:9/metrics",
                "--monitor-metric",
                "a-b",
            ],
            "monitor_metric",
        ),
    ] {
        let mut all = vec!["-d", "1s"];
        all.extend(args);
        all.push("http://127.0.0.1:9/");
        let out = gust(&all);
        assert_eq!(out.status.code(), Some(2), "{all:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("invalid {field}")),
            "{all:?}: {stderr}"
        );
    }
}

/// `gust serve`: a run posted with `monitor` keeps its series in the history and
/// serves them from `/runs/{id}/series`.
#[test]
fn the_daemon_stores_and_serves_the_monitor_series() {
    let server = TargetServer::start(
        "127.0.0.1:0".parse().unwrap(),
        TargetConfig {
            threads: 1,
            ..TargetConfig::default()
        },
    )
    .unwrap();
    let metrics = metrics_endpoint();
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_gust"))
        .args(["serve", "--listen", "127.0.0.1:0", "--workers", "1", "--db"])
        .arg(dir.path().join("history.db"))
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let _daemon = Kill(child);
    let base = loop {
        let line = lines.next().expect("daemon exited").unwrap();
        if let Some(url) = line.strip_prefix("gust serve listening on ") {
            break url.to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let http = reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .unwrap();
    let spec = serde_json::json!({
        "url": server.url(), "mode": "closed", "concurrency": 1, "duration": "2s",
        "monitor": [metrics], "monitor_metric": ["demo_requests_total"],
    });
    let r = http
        .post(format!("{base}/runs"))
        .json(&spec)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    let run_id = r.json::<serde_json::Value>().unwrap()["run_id"]
        .as_i64()
        .unwrap();
    // A 2 s run; the bound only turns a hang into a failure.
    let mut report = None;
    for _ in 0..300 {
        let r = http
            .get(format!("{base}/runs/{run_id}/report"))
            .send()
            .unwrap();
        if r.status().as_u16() == 200 {
            report = Some(r.json::<serde_json::Value>().unwrap());
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let report = report.expect("the run never finished");
    let stored = &report["report"]["monitor"];
    assert_eq!(stored.as_array().unwrap().len(), 1, "{stored}");
    let series: serde_json::Value = http
        .get(format!("{base}/runs/{run_id}/series"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(&series["monitor"], stored);
    assert_eq!(series["monitor"][0]["name"], "demo_requests_total");
    assert!(
        !series["monitor"][0]["points"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert!(!series["series"].as_array().unwrap().is_empty());
}
