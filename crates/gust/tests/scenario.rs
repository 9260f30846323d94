//! `gust run scenario.toml` against the built-in target: extraction feeding a
//! templated header, a failing check counted against its step, per-step JSON and CSV,
//! a step threshold's exit code, and a vegeta-style targets file.

mod common;

use std::process::Command;

use common::daemon::start_daemon;
use gust_engine::{TargetConfig, TargetServer};

fn target() -> TargetServer {
    let cfg = TargetConfig {
        body: br#"{"token":"abc","ok":true}"#.to_vec(),
        ..TargetConfig::default()
    };
    TargetServer::start("127.0.0.1:0".parse().unwrap(), cfg).unwrap()
}

fn gust(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gust"))
        .args(args)
        .output()
        .unwrap()
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("gust-scenario-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn scenario(url: &str, thresholds: &str, with_failing_step: bool) -> String {
    let mut text = format!(
        r#"
url = "{url}"
mode = "closed"
concurrency = 2
workers = 1
iterations = 20
thresholds = [{thresholds}]

[data]
file = "users.csv"
mode = "sequential"

[[steps]]
name = "login"
method = "POST"
path = "/login"
body = '{{"user":"{{{{data.user}}}}","n":{{{{seq}}}}}}'
once = true
status = [200]
extract.token = {{ json = "/token" }}

[[steps]]
name = "issue"
path = "/issue/{{{{uuid}}}}"
headers = {{ Authorization = "Bearer {{{{token}}}}" }}
json_equals = {{ "/token" = "abc" }}
json_exists = ["/ok"]
"#
    );
    if with_failing_step {
        text.push_str(
            r#"
[[steps]]
name = "verify"
path = "/verify"
body_contains = "not in the body"
"#,
        );
    }
    text
}

#[test]
fn failing_check_counts_against_its_step_and_step_threshold_exits_1() {
    let server = target();
    let dir = temp_dir("fail");
    std::fs::write(dir.join("users.csv"), "user\nalice\nbob\n").unwrap();
    let spec = dir.join("scenario.toml");
    std::fs::write(
        &spec,
        scenario(
            &server.url(),
            r#""step.verify.errors<1%", "step.issue.p99<10s""#,
            true,
        ),
    )
    .unwrap();
    let out = gust(&["run", spec.to_str().unwrap(), "--json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let steps = json["report"]["steps"].as_array().unwrap();
    let names: Vec<_> = steps.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["login", "issue", "verify"]);
    // Once per VU; every iteration passes "issue" (the extracted token was sent and
    // the JSON checks hold) and fails "verify" on its body check.
    assert_eq!(steps[0]["sent"], 2);
    assert_eq!(steps[0]["successes"], 2);
    assert_eq!(steps[1]["sent"], 20);
    assert_eq!(steps[1]["failures"], 0);
    assert_eq!(steps[2]["sent"], 20);
    assert_eq!(steps[2]["failures"], 20);
    assert_eq!(steps[2]["check_failures"], 20);
    assert_eq!(steps[2]["status"]["200"], 20);
    assert!(steps[1]["latency"]["p99_us"].as_u64().unwrap() > 0);
    assert_eq!(json["report"]["failures"], 20);
    assert_eq!(json["report"]["iterations"]["failed"], 20);
    let verdicts = json["thresholds"].as_array().unwrap();
    assert_eq!(verdicts[0]["passed"], false);
    assert_eq!(verdicts[1]["passed"], true);
}

#[test]
fn passing_scenario_exits_0_and_text_shows_steps() {
    let server = target();
    let dir = temp_dir("pass");
    std::fs::write(dir.join("users.csv"), "user\nalice\n").unwrap();
    let spec = dir.join("scenario.toml");
    std::fs::write(
        &spec,
        scenario(
            &server.url(),
            r#""step.issue.errors<1%", "errors<1%""#,
            false,
        ),
    )
    .unwrap();
    let csv = dir.join("run.csv");
    let out = gust(&[
        "run",
        spec.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Step"), "{text}");
    assert!(text.contains("issue"), "{text}");
    assert!(
        text.contains("Iterations: 20 started, 20 completed, 0 failed"),
        "{text}"
    );
    let steps = std::fs::read_to_string(dir.join("run.steps.csv")).unwrap();
    let lines: Vec<&str> = steps.lines().collect();
    assert!(lines[0].starts_with("step,sent,responses,successes,failures,check_failures"));
    assert!(lines[1].starts_with("login,2,2,2,0,0,0,"), "{steps}");
    assert!(lines[2].starts_with("issue,20,20,20,0,0,0,"), "{steps}");
}

#[test]
fn rejects_threshold_naming_an_unknown_step_with_exit_2() {
    let server = target();
    let dir = temp_dir("unknown");
    std::fs::write(dir.join("users.csv"), "user\nalice\n").unwrap();
    let spec = dir.join("scenario.toml");
    std::fs::write(
        &spec,
        scenario(&server.url(), r#""step.nope.p99<1s""#, false),
    )
    .unwrap();
    let out = gust(&["run", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"nope\""), "{err}");
}

#[test]
fn rejects_unknown_data_column_with_exit_2() {
    let server = target();
    let dir = temp_dir("column");
    std::fs::write(dir.join("users.csv"), "name\nalice\n").unwrap();
    let spec = dir.join("scenario.toml");
    std::fs::write(&spec, scenario(&server.url(), "", false)).unwrap();
    let out = gust(&["run", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("data.user"), "{err}");
}

#[test]
fn targets_file_replays_its_requests_and_writes_step_free_csv() {
    let server = target();
    let dir = temp_dir("targets");
    std::fs::write(dir.join("body.json"), "{\"x\":1}").unwrap();
    let targets = dir.join("targets.txt");
    std::fs::write(
        &targets,
        format!(
            "GET {}a\nX-Test: 1\n\nPOST /b\nContent-Type: application/json\n@body.json\n",
            server.url()
        ),
    )
    .unwrap();
    let out = gust(&[
        "-c",
        "2",
        "-n",
        "10",
        "-t",
        "1",
        "--json",
        "--targets",
        targets.to_str().unwrap(),
        &server.url(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["report"]["responses"], 10);
    assert!(json["report"].get("steps").is_none());
    assert_eq!(json["config"]["targets"], targets.to_str().unwrap());
}

#[test]
fn daemon_takes_a_toml_scenario_and_reports_its_steps() {
    let server = target();
    let dir = temp_dir("daemon");
    let d = start_daemon(&dir.join("history.db"), &["--workers", "1"]);
    let client = reqwest::blocking::Client::new();
    let toml = format!(
        "url = \"{}\"\nmode = \"closed\"\nconcurrency = 1\niterations = 5\nthresholds = [\"step.use.errors<1%\"]\n\n[[steps]]\nname = \"login\"\nonce = true\nextract.token = {{ json = \"/token\" }}\n\n[[steps]]\nname = \"use\"\nheaders = {{ Authorization = \"Bearer {{{{token}}}}\" }}\n",
        server.url()
    );
    let r = client
        .post(format!("{}/runs", d.base))
        .header("Content-Type", "application/toml")
        .body(toml)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    let run_id = r.json::<serde_json::Value>().unwrap()["run_id"]
        .as_i64()
        .unwrap();
    let mut report = serde_json::Value::Null;
    for _ in 0..600 {
        let r = client
            .get(format!("{}/runs/{run_id}/report", d.base))
            .send()
            .unwrap();
        if r.status().as_u16() == 200 {
            report = r.json().unwrap();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let steps = report["report"]["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("no steps in {report}"));
    assert_eq!(steps[0]["sent"], 1);
    assert_eq!(steps[1]["sent"], 5);
    assert_eq!(steps[1]["failures"], 0);

    let bad = client
        .post(format!("{}/runs", d.base))
        .header("Content-Type", "application/toml")
        .body("url = \"http://127.0.0.1:1/\"\nmode = \"closed\"\nconcurrency = 1\niterations = 1\n[[steps]]\nname = \"a\"\npath = \"/{{nope}}\"\n")
        .send()
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    let body: serde_json::Value = bad.json().unwrap();
    assert_eq!(body["error"]["code"], "invalid_spec");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("nope"),
        "{body}"
    );
}
