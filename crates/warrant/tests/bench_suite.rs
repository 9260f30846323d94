//! CI smoke test of the suite: `warrant bench suite --scale 0.05 --only t3`
//! exactly as documented (T3 keeps its 120 s window: the steady state is the
//! point of T3, so the scale shrinks the load, not the time; ~2.5 minutes).

use std::process::Command;

#[test]
fn suite_t3_at_scale_005_writes_summary_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_warrant"))
        .args([
            "bench",
            "suite",
            "--scale",
            "0.05",
            "--only",
            "t3",
            "--results",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_dir = std::fs::read_dir(dir.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let summary = std::fs::read_to_string(run_dir.join("SUMMARY.md")).unwrap();
    assert!(summary.contains("| T3 | OK |"), "{summary}");
    assert!(summary.contains("scale 0.05"));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("t3.json")).unwrap()).unwrap();
    assert_eq!(r["agents"].as_u64(), Some(250));
    let t = &r["totals"];
    assert!(t["success"].as_u64().unwrap() > 0);
    assert_eq!(t["certificate_rows"].as_u64(), t["success"].as_u64());
}
