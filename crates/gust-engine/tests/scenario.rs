//! Scenario execution through the engine against the built-in target on 127.0.0.1:
//! the open model (one iteration per arrival, pooled VUs), a `unique` data file
//! running out, and a failed step skipping the rest of its iteration.

use std::time::Duration;

mod common;

use gust_engine::spec::steps::{DataMode, DataSpec, ExtractSpec, HeaderSpec, StepSpec};
use gust_engine::{LoadModel, RunSpec, TargetConfig, TargetServer};

fn target() -> TargetServer {
    let cfg = TargetConfig {
        body: br#"{"token":"abc"}"#.to_vec(),
        threads: 1,
        ..TargetConfig::default()
    };
    TargetServer::start("127.0.0.1:0".parse().unwrap(), cfg).unwrap()
}

fn login_then_use() -> Vec<StepSpec> {
    let mut login = StepSpec::new("login", "/login");
    login.method = "POST".into();
    login.once = true;
    login.extract.insert(
        "token".into(),
        ExtractSpec {
            json: Some("/token".into()),
            header: None,
            regex: None,
            group: None,
        },
    );
    let mut use_token = StepSpec::new("use", "/use/{{seq}}");
    use_token.headers = HeaderSpec::List(vec![("Authorization".into(), "Bearer {{token}}".into())]);
    use_token
        .json_equals
        .insert("/token".into(), serde_json::json!("abc"));
    vec![login, use_token]
}

/// `common::closed` on one worker thread.
fn closed(url: &str, concurrency: usize) -> RunSpec {
    let mut spec = common::closed(url, concurrency);
    spec.workers = Some(1);
    spec
}

#[test]
fn open_model_runs_one_iteration_per_arrival() {
    let server = target();
    let mut spec = RunSpec::new(
        server.url(),
        LoadModel::Open {
            rate: 200.0,
            stages: vec![],
        },
    );
    spec.duration = Some(Duration::from_secs(1));
    spec.workers = Some(2);
    spec.steps = login_then_use();
    let r = gust_engine::run(spec.validate().unwrap()).unwrap();
    let it = r.iterations.unwrap();
    assert_eq!(r.failures, 0, "{:?}", r.steps);
    assert_eq!(it.started + r.dropped, 200);
    assert_eq!(it.completed, it.started);
    let (login, use_token) = (&r.steps[0], &r.steps[1]);
    assert_eq!(use_token.sent, it.started);
    // One login per VU, and VUs are reused: never more VUs than arrivals.
    assert!(
        login.sent >= 1 && login.sent <= it.started,
        "{}",
        login.sent
    );
    assert_eq!(r.sent, login.sent + use_token.sent);
}

#[test]
fn unique_data_stops_each_vu_when_the_rows_run_out() {
    let server = target();
    let dir = std::env::temp_dir().join(format!("gust-engine-scenario-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("users.jsonl");
    std::fs::write(
        &file,
        (0..5)
            .map(|i| format!("{{\"user\":\"u{i}\"}}\n"))
            .collect::<String>(),
    )
    .unwrap();
    let mut spec = closed(&server.url(), 2);
    spec.duration = Some(Duration::from_secs(30));
    spec.data = Some(DataSpec {
        file,
        mode: DataMode::Unique,
    });
    spec.steps = vec![StepSpec::new("get", "/users/{{data.user}}")];
    let r = gust_engine::run(spec.validate().unwrap()).unwrap();
    let it = r.iterations.unwrap();
    assert_eq!(it.started, 5);
    assert_eq!(it.data_exhausted, 2);
    assert_eq!(r.steps[0].sent, 5);
    assert_eq!(r.responses, 5);
}

#[test]
fn failed_step_skips_the_rest_of_the_iteration() {
    let server = target();
    let mut spec = closed(&server.url(), 1);
    spec.iterations = Some(10);
    let mut first = StepSpec::new("first", "/");
    first.status = Some(vec![201]);
    spec.steps = vec![
        first,
        StepSpec::new("second", "/"),
        StepSpec::new("third", "/"),
    ];
    let r = gust_engine::run(spec.validate().unwrap()).unwrap();
    assert_eq!(r.steps[0].failures, 10);
    assert_eq!(r.steps[0].check_failures, 0);
    assert_eq!(r.steps[1].sent, 0);
    assert_eq!(r.steps[1].skipped, 10);
    assert_eq!(r.steps[2].skipped, 10);
    assert_eq!(r.failures, 10);
    assert_eq!(r.iterations.unwrap().failed, 10);
}

#[test]
fn rejects_steps_with_a_top_level_body_and_steps_with_targets() {
    let mut spec = closed("http://127.0.0.1:9/", 1);
    spec.duration = Some(Duration::from_secs(1));
    spec.steps = vec![StepSpec::new("a", "/")];
    spec.body = Some(b"x".to_vec());
    assert_eq!(spec.validate().unwrap_err().field, "body");
    spec.body = None;
    spec.targets = Some("targets.txt".into());
    assert_eq!(spec.validate().unwrap_err().field, "targets");
}

#[test]
fn rejects_data_without_steps() {
    let mut spec = closed("http://127.0.0.1:9/", 1);
    spec.duration = Some(Duration::from_secs(1));
    spec.data = Some(DataSpec {
        file: "users.csv".into(),
        mode: DataMode::Sequential,
    });
    assert_eq!(spec.validate().unwrap_err().field, "data");
}

#[test]
fn http2_scenario_extracts_and_sends_the_token() {
    let server = TargetServer::start(
        "127.0.0.1:0".parse().unwrap(),
        TargetConfig {
            body: br#"{"token":"abc"}"#.to_vec(),
            threads: 1,
            http2: true,
            ..TargetConfig::default()
        },
    )
    .unwrap();
    let mut spec = closed(&server.url(), 2);
    spec.http2 = true;
    spec.iterations = Some(10);
    spec.steps = login_then_use();
    let r = gust_engine::run(spec.validate().unwrap()).unwrap();
    assert_eq!(r.failures, 0, "{:?}", r.steps);
    assert_eq!(r.steps[0].sent, 2);
    assert_eq!(r.steps[1].sent, 10);
    assert_eq!(r.steps[1].successes, 10);
}
