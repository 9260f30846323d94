//! CI smoke test of `warrant bench soak`: one minute at 200/s on a temp
//! SQLite DB, agent certificates living 10 s and pruned 5 s after expiry,
//! so retention turns over several times within the run. Checks the three
//! outputs and that the server pruned rows (which needs the server's
//! retention and its `warrant_retention_pruned_total` counter).

use std::process::Command;

#[test]
fn a_one_minute_soak_writes_json_csv_svg_and_prunes() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_warrant"))
        .args([
            "bench",
            "soak",
            "--rate",
            "200",
            "--duration",
            "60s",
            "--users",
            "20",
            "--agents",
            "200",
            "--cert-lifetime",
            "10s",
            "--retention-grace",
            "5s",
            "--warmup",
            "10s",
            "--out-dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // 0 pass, 1 fail: either way the soak ran; 2 would mean it could not.
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{:?}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    for name in ["errors", "p99", "rss", "db_size"] {
        assert!(
            stdout
                .lines()
                .any(|l| (l.starts_with("PASS ") || l.starts_with("FAIL ")) && l.contains(name)),
            "no verdict line for {name}: {stdout}"
        );
    }

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("soak.json")).unwrap())
            .unwrap();
    let samples = json["samples"].as_array().unwrap();
    assert!(samples.len() >= 5, "{} samples", samples.len());
    for key in [
        "certs_per_s",
        "p99_ms",
        "rss_bytes",
        "db_bytes",
        "live_rows",
    ] {
        assert!(samples[0].get(key).is_some(), "sample without {key}");
    }
    assert!(json["total_certs"].as_u64().unwrap() > 0);
    assert!(json["host"]["kernel"].is_string());
    assert_eq!(json["checks"].as_array().unwrap().len(), 4);

    let csv = std::fs::read_to_string(dir.path().join("soak.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert!(rows[0].starts_with("t_s,"), "{}", rows[0]);
    assert_eq!(rows.len(), samples.len() + 1);
    let columns = rows[0].split(',').count();
    assert!(rows.iter().all(|r| r.split(',').count() == columns));

    let svg = std::fs::read_to_string(dir.path().join("soak.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("server RSS") && svg.contains("DB size on disk"));

    // Needs the server's retention (the pruner and its counter).
    let pruned = json["pruned_rows"].as_u64();
    assert!(
        pruned.is_some_and(|n| n > 0),
        "no rows pruned ({pruned:?}): {stdout}"
    );
}

#[test]
fn a_soak_that_cannot_run_exits_2_naming_the_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_warrant"))
        .args(["bench", "soak", "--duration", "10s", "--warmup", "20s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("warmup"));
}
