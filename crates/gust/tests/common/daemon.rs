//! A real `gust serve` process on 127.0.0.1:0 with its SQLite history, and the
//! blocking HTTP calls the daemon tests make to it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

pub struct Daemon {
    pub child: Child,
    pub base: String,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `gust serve` on `db` (plus `extra` flags; 2 workers unless they say) and
/// waits for its address.
pub fn start_daemon(db: &Path, extra: &[&str]) -> Daemon {
    let workers: &[&str] = if extra.contains(&"--workers") {
        &[]
    } else {
        &["--workers", "2"]
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_gust"))
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(db)
        .args(workers)
        .args(extra)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let base = loop {
        let line = lines
            .next()
            .expect("daemon exited before listening")
            .unwrap();
        if let Some(url) = line.strip_prefix("gust serve listening on ") {
            break url.to_string();
        }
    };
    // Keep draining stderr so the daemon never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Daemon { child, base }
}

pub fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

pub fn post(d: &Daemon, path: &str, body: &Value) -> (u16, Value) {
    let r = client()
        .post(format!("{}{path}", d.base))
        .json(body)
        .send()
        .unwrap();
    (r.status().as_u16(), r.json().unwrap_or(Value::Null))
}

pub fn get(d: &Daemon, path: &str) -> (u16, Value) {
    let r = client().get(format!("{}{path}", d.base)).send().unwrap();
    (r.status().as_u16(), r.json().unwrap_or(Value::Null))
}

/// The SSE stream of a run up to its `complete` event: (event type, data).
pub fn events(d: &Daemon, run_id: i64) -> Vec<(String, Value)> {
    events_at(&d.base, run_id)
}

/// [`events`] of the daemon at `base` (for a thread that does not own it).
pub fn events_at(base: &str, run_id: i64) -> Vec<(String, Value)> {
    let resp = client()
        .get(format!("{base}/runs/{run_id}/live"))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut out = Vec::new();
    let (mut kind, mut data) = (String::new(), String::new());
    for line in BufReader::new(resp).lines() {
        let line = line.unwrap();
        if line.is_empty() {
            if !kind.is_empty() {
                let done = kind == "complete";
                out.push((
                    std::mem::take(&mut kind),
                    serde_json::from_str(&data).unwrap(),
                ));
                data.clear();
                if done {
                    break;
                }
            }
        } else if let Some(v) = line.strip_prefix("event: ") {
            kind = v.to_string();
        } else if let Some(v) = line.strip_prefix("data: ") {
            data.push_str(v);
        }
    }
    out
}
