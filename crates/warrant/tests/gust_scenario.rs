//! A gust scenario against a real `warrant serve`: each virtual user logs in once
//! (`POST /api/v1/users/login`, token extracted from `/token`), then lists
//! certificates with `Authorization: Bearer {{token}}` on every iteration. Zero
//! failures and exact per-step counts prove extraction, `once` steps and templated
//! headers end to end, through the `gust_engine` library.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use gust_engine::spec::steps::{ExtractSpec, HeaderSpec, StepSpec};
use gust_engine::{LoadModel, RunSpec};

struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn login_then_list_certs_has_zero_failures() {
    let dir = tempfile::tempdir().unwrap();
    let password = "scenario password 1";
    let mut child = Command::new(env!("CARGO_BIN_EXE_warrant"))
        .args(["serve", "--data-dir"])
        .arg(dir.path().join("data"))
        .env("WARRANT_LISTEN", "127.0.0.1:0")
        .env("WARRANT_ADMIN_PASSWORD", password)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let _server = Server(child);
    let mut url = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("listening on http://") {
            url = Some(format!("http://{rest}/"));
            break;
        }
    }
    let url = url.expect("warrant serve did not report its address");

    let mut login = StepSpec::new("login", "/api/v1/users/login");
    login.method = "POST".into();
    login.once = true;
    login.headers = HeaderSpec::Map(BTreeMap::from([(
        "Content-Type".to_string(),
        "application/json".to_string(),
    )]));
    login.body = Some(format!(r#"{{"username":"admin","password":"{password}"}}"#));
    login.status = Some(vec![200]);
    login.json_exists = vec!["/token".into()];
    login.extract.insert(
        "token".into(),
        ExtractSpec {
            json: Some("/token".into()),
            header: None,
            regex: None,
            group: None,
        },
    );
    let mut list = StepSpec::new("list_certs", "/api/v1/certs");
    list.headers = HeaderSpec::Map(BTreeMap::from([(
        "Authorization".to_string(),
        "Bearer {{token}}".to_string(),
    )]));
    list.status = Some(vec![200]);
    list.json_exists = vec!["/certificates".into()];

    let vus = 3;
    let iterations = 30;
    let mut spec = RunSpec::new(url, LoadModel::closed(vus));
    spec.iterations = Some(iterations);
    spec.workers = Some(1);
    spec.steps = vec![login, list];
    let report = gust_engine::run(spec.validate().unwrap()).unwrap();

    assert_eq!(report.failures, 0, "{:?} {:?}", report.status, report.steps);
    assert_eq!(report.steps.len(), 2);
    let (login, list) = (&report.steps[0], &report.steps[1]);
    assert_eq!(login.name, "login");
    // One login per VU, one list per iteration.
    assert_eq!(login.sent, vus as u64);
    assert_eq!(login.successes, vus as u64);
    assert_eq!(list.sent, iterations);
    assert_eq!(list.successes, iterations);
    assert_eq!(list.status.get("200"), Some(&iterations));
    assert_eq!(report.sent, iterations + vus as u64);
    let it = report.iterations.unwrap();
    assert_eq!(
        (it.started, it.completed, it.failed),
        (iterations, iterations, 0)
    );
}
