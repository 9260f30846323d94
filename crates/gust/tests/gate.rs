//! `gust run SPEC.toml` as a CI gate, locally and through a real daemon:
//! 0 = thresholds met, 1 = one violated, 2 = could not run.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use gust_engine::{TargetConfig, TargetServer};

fn target() -> TargetServer {
    let cfg = TargetConfig {
        threads: 1,
        ..TargetConfig::default()
    };
    TargetServer::start("127.0.0.1:0".parse().unwrap(), cfg).unwrap()
}

struct Daemon(Child, String);
impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn daemon(db: &Path) -> Daemon {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gust"))
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(db)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let base = loop {
        let line = lines.next().unwrap().unwrap();
        if let Some(url) = line.strip_prefix("gust serve listening on ") {
            break url.to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Daemon(child, base)
}

fn spec(dir: &Path, name: &str, url: &str, extra: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!("name = \"{name}\"\nurl = \"{url}\"\nmode = \"closed\"\nconcurrency = 2\nworkers = 1\niterations = 200\n{extra}\n"),
    )
    .unwrap();
    path
}

fn gust(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gust"))
        .args(args)
        .output()
        .unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap()
}

#[test]
fn local_spec_run_exits_0_when_met_and_1_when_violated() {
    let t = target();
    let dir = tempfile::tempdir().unwrap();
    let met = spec(
        dir.path(),
        "met.toml",
        &t.url(),
        "thresholds = [\"p99<10s\", \"errors<1%\"]",
    );
    let o = gust(&["run", met.to_str().unwrap(), "--json"]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["passed"], true);
    assert_eq!(v["report"]["responses"], 200);
    let bad = spec(
        dir.path(),
        "bad.toml",
        &t.url(),
        "thresholds = [\"p50<1us\"]",
    );
    let junit = dir.path().join("junit.xml");
    let o = gust(&[
        "run",
        bad.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 1, "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        std::fs::read_to_string(&junit)
            .unwrap()
            .contains("<failure")
    );
}

#[test]
fn daemon_spec_run_exits_with_the_verdict() {
    let t = target();
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(&dir.path().join("h.db"));
    let met = spec(
        dir.path(),
        "met.toml",
        &t.url(),
        "thresholds = [\"p99<10s\"]",
    );
    let o = gust(&[
        "run",
        met.to_str().unwrap(),
        "--daemon",
        &d.1,
        "--wait",
        "--json",
    ]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["passed"], true);
    assert_eq!(v["report"]["responses"], 200);
    let bad = spec(
        dir.path(),
        "bad.toml",
        &t.url(),
        "thresholds = [\"p50<1us\"]",
    );
    let junit = dir.path().join("junit.xml");
    let o = gust(&[
        "run",
        bad.to_str().unwrap(),
        "--daemon",
        &d.1,
        "--wait",
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 1, "{}", String::from_utf8_lossy(&o.stderr));
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("<failure") && xml.contains("p50&lt;1us"),
        "{xml}"
    );
}

#[test]
fn spec_run_exits_2_when_it_cannot_run() {
    let t = target();
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(&dir.path().join("h.db"));
    let unknown_mode = dir.path().join("mode.toml");
    std::fs::write(
        &unknown_mode,
        format!(
            "url = \"{}\"\nmode = \"burst\"\nduration = \"1s\"\n",
            t.url()
        ),
    )
    .unwrap();
    let o = gust(&[
        "run",
        unknown_mode.to_str().unwrap(),
        "--daemon",
        &d.1,
        "--wait",
    ]);
    assert_eq!(code(&o), 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("burst"));
    let ok = spec(dir.path(), "ok.toml", &t.url(), "");
    // A daemon that is not there (a port just closed).
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let o = gust(&[
        "run",
        ok.to_str().unwrap(),
        "--daemon",
        &format!("http://{closed}"),
        "--wait",
    ]);
    assert_eq!(code(&o), 2, "{}", String::from_utf8_lossy(&o.stderr));
    let o = gust(&["run", dir.path().join("missing.toml").to_str().unwrap()]);
    assert_eq!(code(&o), 2);
}
