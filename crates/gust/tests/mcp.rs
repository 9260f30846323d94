//! `gust mcp` driven by an independent MCP client, the Python `mcp` SDK
//! (tests/mcp_client.py), in both modes: standalone (in-process daemon) and
//! `--daemon URL` against a `gust serve` process with a token. Load goes to a
//! `gust target` process on loopback.

use std::io::{BufRead, BufReader, Lines};
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Stdio};

const GUST: &str = env!("CARGO_BIN_EXE_gust");
const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp_client.py");

/// A child process killed when the test ends, whatever the outcome.
struct Proc {
    child: Child,
    url: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `gust ARGS` and waits for the stderr line `PREFIX URL`.
fn start(args: &[&str], prefix: &str) -> Proc {
    let mut child = Command::new(GUST)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines: Lines<BufReader<ChildStderr>> =
        BufReader::new(child.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("gust {args:?} exited before listening"))
            .unwrap();
        if let Some(url) = line.strip_prefix(prefix) {
            break url.trim().to_string();
        }
    };
    // Keep draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Proc { child, url }
}

fn target() -> Proc {
    start(
        &["target", "--listen", "127.0.0.1:0", "--threads", "1"],
        "gust target listening on ",
    )
}

/// Whether the Python MCP SDK is importable. Missing under CI=true is a failure
/// (.ci/run installs it); elsewhere the test says why it skips.
fn python_mcp_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import mcp"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "python3 with the `mcp` package is required under CI=true \
             (python3 -m pip install 'mcp>=1,<2')"
        );
        eprintln!("skipped: python3 cannot import mcp (python3 -m pip install 'mcp>=1,<2')");
    }
    ok
}

fn run_client(target: &str, mode_args: &[&str]) {
    let out = Command::new("python3")
        .arg(CLIENT)
        .args(["--gust", GUST, "--target", target])
        .args(mode_args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "MCP client failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    println!("{stdout}");
}

#[test]
fn python_mcp_client_drives_standalone_gust_mcp() {
    if !python_mcp_available() {
        return;
    }
    let target = target();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("history.db");
    run_client(&target.url, &["--db", path(&db)]);
    assert!(
        db.exists(),
        "the in-process daemon keeps its history in --db"
    );
}

#[test]
fn python_mcp_client_drives_gust_mcp_against_a_daemon() {
    if !python_mcp_available() {
        return;
    }
    let target = target();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("daemon.db");
    let daemon = start(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--token",
            "mcp-test-token",
            "--db",
            path(&db),
        ],
        "gust serve listening on ",
    );
    run_client(
        &target.url,
        &["--daemon", &daemon.url, "--token", "mcp-test-token"],
    );
}

#[test]
fn rejects_a_wrong_daemon_token_as_a_tool_error() {
    // Plain JSON-RPC over the pipes: the refusal must be a tool result with isError
    // naming the cause, not a protocol failure, even without the Python SDK.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("daemon.db");
    let daemon = start(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--token",
            "right",
            "--db",
            path(&db),
        ],
        "gust serve listening on ",
    );
    let answers = raw_session(
        &["mcp", "--daemon", &daemon.url, "--token", "wrong"],
        &[
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_runs","arguments":{}}}"#,
        ],
    );
    let call = &answers[1];
    assert_eq!(call["id"], 2);
    assert_eq!(call["result"]["isError"], true, "{call}");
    let text = call["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("unauthorized"), "{text}");
}

#[test]
fn rejects_an_unknown_tool_as_a_protocol_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("history.db");
    let answers = raw_session(
        &["mcp", "--db", path(&db)],
        &[
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"explode","arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#,
        ],
    );
    assert_eq!(answers[1]["id"], 2);
    assert!(
        answers[1]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("explode")
    );
    let names: Vec<&str> = answers[2]["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 7, "{names:?}");
}

#[test]
fn rejects_db_together_with_daemon() {
    let out = Command::new(GUST)
        .args(["mcp", "--daemon", "http://127.0.0.1:9", "--db", "x.db"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "stdout is the protocol's only");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--db"), "{stderr}");
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Initializes an MCP session over `gust ARGS`'s stdio, sends `requests` one after
/// another, and returns every answer with an id (the initialize answer first).
fn raw_session(args: &[&str], requests: &[&str]) -> Vec<serde_json::Value> {
    use std::io::Write;
    let mut child = Command::new(GUST)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut answers = Vec::new();
    let mut read_answer = |answers: &mut Vec<serde_json::Value>| loop {
        let line = stdout.next().expect("gust mcp closed stdout").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout must carry only JSON-RPC, got {line:?}: {e}"));
        if v.get("id").is_some() {
            answers.push(v);
            return;
        }
    };
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    writeln!(stdin, "{init}").unwrap();
    read_answer(&mut answers);
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .unwrap();
    for r in requests {
        writeln!(stdin, "{r}").unwrap();
        read_answer(&mut answers);
    }
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "gust mcp exit status {status}");
    answers
}
