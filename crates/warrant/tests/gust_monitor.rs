//! Gust's target monitoring against a real `warrant serve` (SQLite): a short load on
//! `/healthz` with the monitor scraping warrant's `/metrics` and sampling the server
//! process. The report must carry warrant's request-counter rate and the process's
//! CPU and RSS, on the run's time axis.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gust_engine::{LoadModel, RunSpec, SeriesKind, ThinkTime};

const ADMIN_PASSWORD: &str = "gust monitor test password";

/// Kills the server when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_warrant(data: &std::path::Path) -> (Server, String) {
    let bin = env!("CARGO_BIN_EXE_warrant");
    let init = Command::new(bin)
        .args(["init", "--data-dir"])
        .arg(data)
        .args(["--admin-password", ADMIN_PASSWORD])
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    assert!(
        init.status.success(),
        "warrant init failed: {}",
        String::from_utf8_lossy(&init.stderr)
    );
    let mut child = Command::new(bin)
        .args(["serve", "--data-dir"])
        .arg(data)
        .env_remove("DATABASE_URL")
        .env("WARRANT_LISTEN", "127.0.0.1:0")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let server = Server(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.strip_prefix("listening on http://") {
                let _ = tx.send(format!("http://{}", rest.trim()));
            }
        }
    });
    let base = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("warrant serve did not report its address");
    (server, base)
}

#[test]
fn monitor_series_from_warrant_serve_are_in_the_report() {
    let tmp = tempfile::tempdir().unwrap();
    let (server, base) = start_warrant(&tmp.path().join("data"));
    let pid = server.0.id();

    let mut spec = RunSpec::new(
        format!("{base}/healthz"),
        LoadModel::Closed {
            concurrency: 2,
            stages: vec![],
            think_time: ThinkTime::Fixed {
                time: Duration::from_millis(2),
            },
        },
    );
    spec.duration = Some(Duration::from_secs(4));
    spec.workers = Some(1);
    spec.monitor = vec![format!("{base}/metrics")];
    spec.monitor_metric = vec!["warrant_http_requests_*".into()];
    spec.monitor_pid = vec![pid];
    let report = gust_engine::run(spec.validate().unwrap()).unwrap();

    assert!(report.successes > 0, "the load itself failed: {report:?}");
    let sources = &report.monitor.monitor_sources;
    assert_eq!(sources.len(), 2, "{sources:?}");
    assert!(
        sources.iter().all(|s| s.attempts >= 4),
        "a 4 s run reads each source at 0, 1, 2, 3 s and at the end: {sources:?}"
    );
    let series = &report.monitor.monitor;
    let healthz = series
        .iter()
        .find(|s| {
            s.name == "warrant_http_requests_total"
                && s.labels.get("route").map(String::as_str) == Some("/healthz")
        })
        .unwrap_or_else(|| panic!("no /healthz request counter in {series:#?}"));
    assert_eq!(healthz.kind, SeriesKind::Rate);
    assert_eq!(healthz.unit.as_deref(), Some("/s"));
    assert!(healthz.points.len() >= 2, "{healthz:?}");
    assert!(
        healthz.points.iter().any(|p| p[1] > 0.0),
        "warrant counted no /healthz requests per second: {healthz:?}"
    );
    // The counter's rates add up to (about) what gust sent: every /healthz
    // request of the run falls in one of the scrape intervals.
    let counted: f64 = healthz
        .points
        .windows(2)
        .map(|w| w[0][1] * (w[1][0] - w[0][0]))
        .sum();
    assert!(counted > 0.0);
    assert!(
        series.iter().all(|s| s.name.starts_with("warrant_http_requests_")
            || s.name.starts_with("process_")),
        "the glob let through other series"
    );
    for p in &healthz.points {
        assert!(
            p[0] >= -0.1 && p[0] <= report.elapsed_s + 1.0,
            "point outside the run's time axis: {p:?}"
        );
    }
    let cpu = series
        .iter()
        .find(|s| s.name == "process_cpu_percent")
        .expect("process CPU series");
    assert_eq!(cpu.labels.get("pid"), Some(&pid.to_string()));
    assert!(
        cpu.points.iter().any(|p| p[1] > 0.0),
        "warrant used no CPU serving the load: {cpu:?}"
    );
    let rss = series
        .iter()
        .find(|s| s.name == "process_rss_bytes")
        .expect("process RSS series");
    assert!(rss.points.iter().all(|p| p[1] > 0.0), "{rss:?}");

    let json = serde_json::to_value(&report).unwrap();
    assert!(json["monitor"].as_array().is_some_and(|a| !a.is_empty()));
    assert!(json["monitor_sources"][0]["attempts"].as_u64().unwrap() >= 4);
}
