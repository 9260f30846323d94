//! `warrant bench` end to end: the real binary, an embedded server on
//! 127.0.0.1 with a temp SQLite DB, a few agents for a few seconds.

use serde_json::Value;
use std::process::Command;

fn bench(args: &[&str]) -> (bool, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_warrant"))
        .arg("bench")
        .args(args)
        .arg("-json")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}); stdout: {} stderr: {stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (out.status.success(), json, stderr)
}

const TOP_FIELDS: &[&str] = &[
    "mode",
    "scenario",
    "duration",
    "agents",
    "users",
    "target_qps",
    "interval",
    "totals",
];
const TOTALS_FIELDS: &[&str] = &[
    "total_requests",
    "success",
    "failures",
    "error_codes",
    "elapsed",
    "issued_per_sec",
    "requests_per_sec",
    "latency_p50_ms",
    "latency_p95_ms",
    "latency_p99_ms",
    "latency_max_ms",
    "mem_alloc_bytes",
    "db_size_bytes",
    "certificate_rows",
    "latency_p999_ms",
    "corrected_latency_p50_ms",
    "corrected_latency_p99_ms",
    "corrected_latency_p999_ms",
    "server_cpu_seconds",
    "server_peak_rss_bytes",
    "cpu_us_per_cert",
    "crypto_floor_us_per_cert",
    "efficiency",
];

#[test]
fn both_scenarios_and_modes_run_and_every_success_is_a_certificate_row() {
    let runs: &[&[&str]] = &[
        &["-scenario", "regular", "-mode", "stress", "-keys", "server"],
        &[
            "-scenario",
            "aic",
            "-mode",
            "random",
            "-interval",
            "50ms",
            "-keys",
            "csr",
            "-csr-pool",
            "16",
        ],
        &[
            "--scenario",
            "aic",
            "--mode",
            "stress",
            "--keys",
            "server",
            "--users",
            "2",
        ],
        &[
            "-scenario",
            "regular",
            "-mode",
            "random",
            "-interval",
            "50ms",
            "-keys",
            "csr",
            "-csr-pool",
            "8",
        ],
    ];
    for extra in runs {
        let mut args = vec!["-duration", "2s", "-agents", "4", "-workers", "1"];
        args.extend_from_slice(extra);
        let (ok, r, stderr) = bench(&args);
        assert!(ok, "{args:?} failed: {stderr}");
        for f in TOP_FIELDS {
            assert!(r.get(f).is_some(), "{args:?}: missing {f}");
        }
        let t = &r["totals"];
        for f in TOTALS_FIELDS {
            assert!(t.get(f).is_some(), "{args:?}: missing totals.{f}");
        }
        let success = t["success"].as_u64().unwrap();
        assert!(success > 0, "{args:?}: no success: {r}");
        assert_eq!(
            t["certificate_rows"].as_u64(),
            Some(success),
            "{args:?}: rows != successes"
        );
        assert_eq!(r["rows_match"], Value::Bool(true));
        assert_eq!(
            t["failures"].as_u64(),
            Some(0),
            "{args:?}: {}",
            t["error_codes"]
        );
        assert!(t["crypto_floor_us_per_cert"].as_f64().unwrap() > 0.0);
        assert!(t["server_cpu_seconds"].as_f64().is_some());
        let random = extra.contains(&"random");
        assert_eq!(
            t["corrected_latency_p99_ms"].is_number(),
            random,
            "{args:?}: corrected latency only for open models"
        );
    }
}

#[test]
fn full_write_queue_is_counted_as_503() {
    // max_pending 1: concurrent issuances find the queue full while a commit runs.
    let (ok, r, stderr) = bench(&[
        "-duration",
        "2s",
        "-agents",
        "32",
        "-workers",
        "1",
        "-maxpending",
        "1",
    ]);
    assert!(ok, "{stderr}");
    let t = &r["totals"];
    let n503 = t["error_codes"]["503"].as_u64().unwrap_or(0);
    assert!(n503 > 0, "no 503 with maxpending 1: {t}");
    assert_eq!(
        t["certificate_rows"].as_u64(),
        t["success"].as_u64(),
        "a 503 must not leave a row, a 200 must"
    );
}

#[test]
fn transport_errors_are_counted_as_code_0() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let (ok, r, stderr) = bench(&[
        "-target",
        &url,
        "-token",
        "x",
        "-duration",
        "1s",
        "-agents",
        "2",
        "-workers",
        "1",
    ]);
    assert!(ok, "{stderr}");
    let t = &r["totals"];
    assert_eq!(t["success"].as_u64(), Some(0));
    assert!(t["error_codes"]["0"].as_u64().unwrap_or(0) > 0, "{t}");
    assert!(
        t["certificate_rows"].is_null(),
        "a remote target's DB is not counted"
    );
}

#[test]
fn rejects_bad_flags_naming_them() {
    let out = Command::new(env!("CARGO_BIN_EXE_warrant"))
        .args(["bench", "-profile", "turbo", "-duration", "1s"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("profile"));
    let out = Command::new(env!("CARGO_BIN_EXE_warrant"))
        .args(["bench", "-duration", "soon"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("duration"));
}
