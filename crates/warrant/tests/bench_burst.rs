//! `warrant bench burst` end to end with a small fleet: 300 agents, one
//! connection each, released together against an embedded server.

use std::process::Command;

#[test]
fn a_small_burst_serves_every_agent_and_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("burst.json");
    let out = Command::new(env!("CARGO_BIN_EXE_warrant"))
        .args(["bench", "burst", "--agents", "300", "--out"])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("file descriptors: soft limit"), "{stdout}");
    assert!(stdout.contains("reference estimate 82 s"), "{stdout}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(r["agents"].as_u64(), Some(300));
    assert_eq!(r["users"].as_u64(), Some(30), "the 1 : 10 mix");
    assert_eq!(r["served"].as_u64(), Some(300));
    assert_eq!(r["errors_by_code"], serde_json::json!({}));
    assert_eq!(r["pass"], true);
    assert!(r["time_all_served_s"].as_f64().unwrap() > 0.0);
    let (p50, p99, max) = (
        r["latency_p50_ms"].as_f64().unwrap(),
        r["latency_p99_ms"].as_f64().unwrap(),
        r["latency_max_ms"].as_f64().unwrap(),
    );
    assert!(p50 <= p99 && p99 <= max, "{p50} {p99} {max}");
    // Every agent held its connection until served; sampled every 100 ms.
    assert!(r["peak_server_connections"].as_u64().unwrap() > 0);
    assert!(r["peak_rss_bytes"].as_u64().unwrap() > 0);
    assert!(r["extrapolated_500k_s"].as_f64().unwrap() > 0.0);
    assert!(r["reference_500k_s"].as_f64().unwrap() > 81.0);
    assert!(r["nofile"]["soft_after"].as_u64() >= r["nofile"]["soft_before"].as_u64());
    assert!(r["host"]["cores_available"].as_u64().unwrap() >= 1);
}

#[test]
fn a_burst_beyond_the_descriptor_limit_fails_naming_it() {
    // Ten million connections need twenty million descriptors: above any
    // hard limit the kernel allows by default (fs.nr_open is 1,048,576).
    let out = Command::new(env!("CARGO_BIN_EXE_warrant"))
        .args(["bench", "burst", "--agents", "10000000"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("RLIMIT_NOFILE") && stderr.contains("ulimit -n"),
        "{stderr}"
    );
}
