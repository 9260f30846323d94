//! The `gust` binary against the built-in target on 127.0.0.1: exit codes, JSON
//! schema, CSV, JUnit and HdrHistogram log outputs.

use std::process::Command;

use gust_engine::{TargetConfig, TargetServer};

fn target() -> TargetServer {
    TargetServer::start("127.0.0.1:0".parse().unwrap(), TargetConfig::default()).unwrap()
}

fn gust(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gust"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn met_thresholds_exit_0_and_json_has_the_versioned_schema() {
    let server = target();
    let dir = std::env::temp_dir().join(format!("gust-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("series.csv");
    let junit = dir.join("junit.xml");
    let hdr = dir.join("latency.hlog");
    let out = gust(&[
        "-R",
        "200",
        "-d",
        "1s",
        "-t",
        "1",
        "--json",
        "--threshold",
        "errors<1%",
        "--threshold",
        "p99<5s",
        "--csv",
        csv.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
        "--hdr-log",
        hdr.to_str().unwrap(),
        &server.url(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["schema"], "gust.report");
    assert_eq!(json["version"], 1);
    assert_eq!(json["passed"], true);
    let report = &json["report"];
    assert_eq!(report["model"], "open");
    assert_eq!(
        report["sent"].as_u64().unwrap() + report["dropped"].as_u64().unwrap(),
        200
    );
    for key in [
        "latency",
        "service",
        "status",
        "errors",
        "series",
        "generator_lag",
        "client_cpu_s",
        "peak_in_flight",
    ] {
        assert!(!report[key].is_null(), "missing {key}");
    }
    assert!(report["latency"]["p999_us"].is_u64());
    let csv = std::fs::read_to_string(csv).unwrap();
    assert!(csv.starts_with("second,sent,responses"));
    assert!(csv.lines().count() >= 2);
    let junit = std::fs::read_to_string(junit).unwrap();
    assert!(junit.contains("tests=\"2\" failures=\"0\""));
    let hdr = std::fs::read_to_string(hdr).unwrap();
    assert!(hdr.lines().any(|l| l.starts_with("0.000,1.000,")), "{hdr}");
}

#[test]
fn violated_threshold_exits_1_and_is_a_junit_failure() {
    let server = target();
    let junit = std::env::temp_dir().join(format!("gust-cli-fail-{}.xml", std::process::id()));
    let out = gust(&[
        "-c",
        "2",
        "-n",
        "50",
        "-t",
        "1",
        "--threshold",
        "rps>100000000",
        "--junit",
        junit.to_str().unwrap(),
        &server.url(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("50 requests"), "{text}");
    assert!(text.contains("FAIL"), "{text}");
    let xml = std::fs::read_to_string(junit).unwrap();
    assert!(xml.contains("<failure"));
}

#[test]
fn invalid_configuration_exits_2_before_running() {
    for args in [
        vec!["-R", "0", "http://127.0.0.1:9/"],
        vec!["--max-in-flight", "5", "-c", "2", "http://127.0.0.1:9/"],
        vec!["--threshold", "latency<5ms", "http://127.0.0.1:9/"],
        vec!["ftp://127.0.0.1/"],
        vec!["--tick", "300ms", "http://127.0.0.1:9/"],
    ] {
        let out = gust(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stdout.is_empty(), "{args:?} printed a report");
    }
}

#[test]
fn no_progress_line_on_a_pipe() {
    let server = target();
    let out = gust(&["-c", "1", "-d", "600ms", "-t", "1", &server.url()]);
    assert_eq!(out.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("req/s"));
}
