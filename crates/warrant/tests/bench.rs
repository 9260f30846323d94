//! `warrant bench` end to end: the real binary, an embedded server on
//! 127.0.0.1 with a temp SQLite DB, a few agents for a few seconds. Refusals
//! are provoked for real: 503 (write queue of one), 429 (rate limit), 0
//! (nothing listening).

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
    "durable_wait_mean_ms",
    "records_per_commit",
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
    "cpu_us_per_cert_by_thread",
    "crypto_floor_us_per_cert",
    "efficiency",
];

/// The groups `cpu_us_per_cert_by_thread` splits the embedded server's CPU into.
const THREAD_GROUPS: &[&str] = &[
    "tokio-workers",
    "blocking-pool",
    "sqlx-sqlite-workers",
    "other",
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
        for f in [
            "cpu_model",
            "cores_available",
            "kernel",
            "data_dir_fs",
            "fsync_median_us",
        ] {
            assert!(r["host"].get(f).is_some(), "{args:?}: missing host.{f}");
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
        assert_eq!(r["durability"], "durable", "the default");
        // Each success waited for its commit; the server said how long.
        let wait = t["durable_wait_mean_ms"].as_f64();
        assert!(
            wait.is_some_and(|w| w > 0.0),
            "{args:?}: durable wait {wait:?}"
        );
        // Every commit carried at least one record.
        let per_commit = t["records_per_commit"].as_f64();
        assert!(
            per_commit.is_some_and(|n| n >= 1.0),
            "{args:?}: records per commit {per_commit:?}"
        );
        assert_eq!(
            t["failures"].as_u64(),
            Some(0),
            "{args:?}: {}",
            t["error_codes"]
        );
        assert!(t["crypto_floor_us_per_cert"].as_f64().unwrap() > 0.0);
        assert!(t["server_cpu_seconds"].as_f64().is_some());
        // The embedded server's CPU per cert, split by group of threads,
        // adds up to the total; the tokio workers did part of the work, and
        // only the bench's own groups appear.
        let parts = t["cpu_us_per_cert_by_thread"]
            .as_object()
            .unwrap_or_else(|| panic!("{args:?}: no per-thread CPU: {t}"));
        let sum: f64 = parts.values().filter_map(Value::as_f64).sum();
        let total = t["cpu_us_per_cert"].as_f64().unwrap();
        assert!(
            (sum - total).abs() <= 1e-6 * total + 1e-6,
            "{args:?}: parts {parts:?} add up to {sum}, not {total}"
        );
        assert!(
            parts.get("tokio-workers").and_then(Value::as_f64) > Some(0.0),
            "{args:?}: {parts:?}"
        );
        for group in parts.keys() {
            assert!(
                THREAD_GROUPS.contains(&group.as_str()),
                "{args:?}: unknown thread group {group}"
            );
        }
        let random = extra.contains(&"random");
        assert_eq!(
            t["corrected_latency_p99_ms"].is_number(),
            random,
            "{args:?}: corrected latency (from the intended send) only in random mode"
        );
        if random {
            assert_random_mode_thinks(&r, 4.0, 2.0, 0.05);
        }
    }
}

/// Random mode is Gust's closed model with exponential think time: each of
/// `agents` agents averages one request per `interval`, so a run sends about
/// agents · duration / interval requests — far fewer than back to back. The
/// bound is generous (2× the mean plus one per agent; the count is nearly
/// Poisson, so exceeding it by chance is negligible) and a slow machine only
/// lowers the count, so it holds on any box.
fn assert_random_mode_thinks(r: &Value, agents: f64, duration_s: f64, interval_s: f64) {
    let model = r["load_model"].as_str().unwrap_or_default();
    assert!(
        model.starts_with("closed") && model.contains("exponential think time"),
        "random mode must be a closed model with exponential think time: {model}"
    );
    // An agent thinking past the deadline stops at it: the run does not wait
    // out Gust's 30 s grace period (the bound is far from both).
    let elapsed = r["totals"]["elapsed"].as_f64().unwrap_or(f64::MAX);
    assert!(
        elapsed < duration_s + 15.0,
        "a {duration_s} s random run lasted {elapsed} s"
    );
    let sent = r["totals"]["total_requests"].as_f64().unwrap_or(0.0);
    let mean = agents * duration_s / interval_s;
    assert!(
        sent <= 2.0 * mean + agents,
        "random mode sent {sent} requests; agents thinking Exp({interval_s} s) send about {mean}"
    );
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
fn rate_limited_requests_are_counted_as_429() {
    // The embedded server takes WARRANT_* overrides like `warrant serve`: a
    // per-client-IP limit of 20/s (burst 5) on /api lets the setup login
    // through and refuses most of a back-to-back load with 429.
    let out = Command::new(env!("CARGO_BIN_EXE_warrant"))
        .args([
            "bench",
            "-duration",
            "2s",
            "-agents",
            "8",
            "-workers",
            "1",
            "-json",
        ])
        .env("WARRANT_RATE_LIMIT_ENABLED", "true")
        .env("WARRANT_RATE_LIMIT_RATE", "20")
        .env("WARRANT_RATE_LIMIT_BURST", "5")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &r["totals"];
    let n429 = t["error_codes"]["429"].as_u64().unwrap_or(0);
    assert!(n429 > 0, "no 429 under a 20/s rate limit: {t}");
    assert!(t["success"].as_u64().unwrap_or(0) > 0, "{t}");
    assert!(
        t["failures"].as_u64().unwrap_or(0) >= n429,
        "429s are failures: {t}"
    );
    assert_eq!(
        t["certificate_rows"].as_u64(),
        t["success"].as_u64(),
        "a 429 must not leave a row"
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
fn a_buffered_server_is_measured_and_reported_as_such() {
    let (ok, r, stderr) = bench(&[
        "-scenario",
        "aic",
        "-durability",
        "buffered",
        "-duration",
        "2s",
        "-agents",
        "4",
        "-workers",
        "1",
    ]);
    assert!(ok, "buffered run failed: {stderr}");
    assert_eq!(r["durability"], "buffered");
    let config = r["server_config"].as_str().unwrap_or_default();
    assert!(config.contains("durability buffered"), "{config}");
    let t = &r["totals"];
    assert!(t["success"].as_u64().unwrap_or(0) > 0, "no success: {r}");
    assert_eq!(t["failures"].as_u64(), Some(0), "{}", t["error_codes"]);
    // Counted, but a buffered answer may precede its row: not checked.
    assert!(t["certificate_rows"].as_u64().is_some());
    assert_eq!(r["rows_match"], Value::Null);
    // Answered on enqueue: nothing waited for a commit.
    assert_eq!(t["durable_wait_mean_ms"], Value::Null);
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
    let out = Command::new(env!("CARGO_BIN_EXE_warrant"))
        .args(["bench", "-durability", "eventually", "-duration", "1s"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("durability") && stderr.contains("eventually"),
        "{stderr}"
    );
}
