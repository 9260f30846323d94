//! `warrant delegate serve` and `warrant agent` as real processes against a
//! real `warrant serve` (SQLite): an agent keeps a 60 s certificate renewed
//! with no gap, and stops (non-zero) when its person is revoked or its grant
//! withdrawn. The signer's refusals are checked over its socket.

#[path = "../../warrant-server/tests/common/mod.rs"]
mod common;
mod support;

use common::{Person, grants, openssl_csr};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::{Api, DataDir, Node, warrant_bin};

/// The operator role until the least-privilege `issuer` role lands: the
/// agent's token only needs `cert:issue`.
const AGENT_ROLE: &str = "issuer";
const AGENT: &str = "report-bot";

fn grant_file(agent: &str, extra: &str) -> String {
    format!(
        r#"
[[agent]]
id = "{agent}"
capabilities = ["db:read"]
mode = "authorized"
max_window = "1h"
max_da_lifetime = "1h"
max_das_per_hour = 100
{extra}
"#
    )
}

/// A child process killed on drop, its stdout and stderr in files.
struct Proc {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Proc {
    fn spawn(cmd: &mut Command, dir: &Path, name: &str) -> Proc {
        let out = dir.join(format!("{name}.stdout"));
        let err = dir.join(format!("{name}.stderr"));
        let child = cmd
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        Proc { child, out, err }
    }

    fn output(&self) -> String {
        format!(
            "{}{}",
            std::fs::read_to_string(&self.out).unwrap_or_default(),
            std::fs::read_to_string(&self.err).unwrap_or_default()
        )
    }

    /// Waits up to `bound` for the exit status.
    fn wait_exit(&mut self, bound: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < bound {
            if let Some(s) = self.child.try_wait().unwrap() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        None
    }

    fn terminate(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.wait_exit(Duration::from_secs(10));
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A person's files and a running signer for them.
struct Signer {
    proc: Proc,
    socket: PathBuf,
    grants: PathBuf,
}

fn start_signer(dir: &Path, person: &Person, grant_text: &str) -> Signer {
    start_signer_with(dir, person, grant_text, &[])
}

fn start_signer_with(dir: &Path, person: &Person, grant_text: &str, extra: &[&str]) -> Signer {
    let key = dir.join("alice.key");
    let cert = dir.join("alice.pem");
    std::fs::write(&key, &person.key_pem).unwrap();
    std::fs::write(&cert, &person.cert_pem).unwrap();
    let grants = dir.join("grants.toml");
    std::fs::write(&grants, grant_text).unwrap();
    let socket = dir.join("signer.sock");
    let proc = Proc::spawn(
        Command::new(warrant_bin())
            .args(["delegate", "serve", "--principal-key"])
            .arg(&key)
            .arg("--principal-cert")
            .arg(&cert)
            .args(["--principal-uid", &person.uid, "--grants"])
            .arg(&grants)
            .arg("--socket")
            .arg(&socket)
            .args(extra),
        dir,
        "signer",
    );
    let start = Instant::now();
    while !socket.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "signer did not start: {}",
            proc.output()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Signer {
        proc,
        socket,
        grants,
    }
}

/// One `POST /v1/da` over the signer's socket: (status, JSON body).
fn ask_signer(socket: &Path, body: &Value) -> (u16, Value) {
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    let body = body.to_string();
    write!(
        s,
        "POST /v1/da HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status: u16 = text[9..12].parse().unwrap();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap();
    // Chunked or not: the JSON is between the first '{' and the last '}'.
    let json = match (rest.find('{'), rest.rfind('}')) {
        (Some(a), Some(b)) => serde_json::from_str(&rest[a..=b]).unwrap(),
        _ => panic!("no JSON in {head}\n{rest}"),
    };
    (status, json)
}

/// A server, an admin client, a person whose PA grants db:read, and a
/// token with `cert:issue` for the agent.
struct Ca {
    data: DataDir,
    node: Node,
    api: Api,
    person: Person,
    token_file: PathBuf,
}

async fn start_ca(dir: &Path) -> Ca {
    let data = DataDir::init_with_dsn(None);
    let node = data.serve("ca");
    let api = Api::login(&node).await;
    let person = api
        .person_with_pa(&node, "alice", &grants(&[("db", "read")], 1_000_000, 0))
        .await;
    let user = json!({"username": "bot-runner", "password": "password-123", "role": AGENT_ROLE});
    let (s, b) = api.post(&node.url("/api/v1/users"), &user).await.unwrap();
    assert_eq!(s, 200, "{b}");
    let (s, b) = Api::new("")
        .post(
            &node.url("/api/v1/users/login"),
            &json!({"username": "bot-runner", "password": "password-123"}),
        )
        .await
        .unwrap();
    assert_eq!(s, 200, "{b}");
    let login = Api::new(b["token"].as_str().unwrap());
    let (s, b) = login
        .post(&node.url("/api/v1/tokens"), &json!({"name": AGENT}))
        .await
        .unwrap();
    assert_eq!(s, 200, "{b}");
    let token_file = dir.join("token");
    std::fs::write(&token_file, b["token"].as_str().unwrap()).unwrap();
    Ca {
        data,
        node,
        api,
        person,
        token_file,
    }
}

fn start_agent(dir: &Path, ca: &Ca, signer: &Signer, extra: &[&str]) -> Proc {
    let unix = format!("unix:{}", signer.socket.display());
    agent_with(dir, ca, &unix, AGENT, extra, "agent")
}

fn agent_with(dir: &Path, ca: &Ca, signer: &str, agent: &str, extra: &[&str], name: &str) -> Proc {
    Proc::spawn(
        Command::new(warrant_bin())
            .args(["agent", "--ca-url", &ca.node.base, "--signer", signer])
            .arg("--token-file")
            .arg(&ca.token_file)
            .args(["--agent-id", agent, "--lifetime", "60", "--dir"])
            .arg(dir.join("agent"))
            .args(extra),
        dir,
        name,
    )
}

fn wait_for_file(path: &Path, proc: &Proc, bound: Duration) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < bound,
            "{} not written in {bound:?}: {}",
            path.display(),
            proc.output()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn openssl(args: &[&str], file: &Path) -> (bool, String) {
    let out = Command::new("openssl")
        .args(args)
        .arg(file)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// (notBefore, notAfter) of a PEM certificate file, by openssl.
fn validity(cert: &Path) -> (i64, i64) {
    let (ok, text) = openssl(
        &[
            "x509",
            "-noout",
            "-startdate",
            "-enddate",
            "-dateopt",
            "iso_8601",
            "-in",
        ],
        cert,
    );
    assert!(ok, "{text}");
    let field = |name: &str| {
        let v = text
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} in {text}"));
        aic::time::parse_rfc3339(&v.trim().replace(' ', "T")).unwrap_or_else(|| panic!("{v:?}"))
    };
    (field("notBefore="), field("notAfter="))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_renews_without_a_gap_for_three_minutes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = start_ca(dir).await;
    let signer = start_signer(dir, &ca.person, &grant_file(AGENT, ""));
    let hook_log = dir.join("hook.log");
    let mut agent = start_agent(
        dir,
        &ca,
        &signer,
        &[
            "--exec",
            &format!("echo renewed >> '{}'", hook_log.display()),
        ],
    );
    let cert = dir.join("agent/cert.pem");
    wait_for_file(&cert, &agent, Duration::from_secs(60));
    let root = ca.data.path.join("ca/root.cert.pem");
    let people = ca.data.path.join("ca/people.cert.pem");
    let mut seen: Vec<(String, i64, i64)> = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(180) {
        assert!(
            agent.child.try_wait().unwrap().is_none(),
            "agent exited: {}",
            agent.output()
        );
        let pem = std::fs::read_to_string(&cert).unwrap();
        // The file on disk is valid now, at every poll.
        let (ok, text) = openssl(&["x509", "-noout", "-checkend", "0", "-in"], &cert);
        assert!(ok, "cert.pem expired on disk: {text}");
        if seen.last().map(|s| &s.0) != Some(&pem) {
            let (ok, text) = openssl(
                &[
                    "verify",
                    "-CAfile",
                    root.to_str().unwrap(),
                    "-untrusted",
                    people.to_str().unwrap(),
                ],
                &cert,
            );
            assert!(ok && text.contains(": OK"), "openssl verify: {text}");
            let (nb, na) = validity(&cert);
            assert!(na - nb <= 61, "a 60 s certificate lives {}s", na - nb);
            if let Some((_, _, prev_na)) = seen.last() {
                assert!(
                    nb <= *prev_na,
                    "gap: notBefore {nb} after previous notAfter {prev_na}"
                );
            }
            seen.push((pem, nb, na));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    agent.terminate();
    let renewals = seen.len() - 1;
    assert!(
        renewals >= 3,
        "{renewals} renewals in 3 minutes: {}",
        agent.output()
    );
    let hooks = std::fs::read_to_string(&hook_log)
        .unwrap_or_default()
        .lines()
        .count();
    assert!(
        hooks >= seen.len() && hooks <= seen.len() + 1,
        "--exec ran {hooks} times for {} certificates",
        seen.len()
    );
    // `warrant agent status` reports the last renewal.
    let out = Command::new(warrant_bin())
        .args(["agent", "status", "--dir"])
        .arg(dir.join("agent"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("db:read") && text.contains("last renewal:"),
        "{text}"
    );
    // The signer logged every DA it signed.
    let log = std::fs::read_to_string(dir.join("da-log.jsonl")).unwrap();
    assert!(log.lines().count() >= seen.len(), "{log}");
    let first: Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    assert_eq!(first["agent_id"], AGENT);
    assert_eq!(first["nonce"].as_str().unwrap().len(), 64);
    drop(signer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_the_person_stops_the_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = start_ca(dir).await;
    let signer = start_signer(dir, &ca.person, &grant_file(AGENT, ""));
    let mut agent = start_agent(dir, &ca, &signer, &[]);
    wait_for_file(&dir.join("agent/cert.pem"), &agent, Duration::from_secs(60));
    let (s, b) = ca
        .api
        .post(
            &ca.node
                .url(&format!("/api/v1/cert/people/{}/revoke", ca.person.serial)),
            &json!({"reason": "keyCompromise"}),
        )
        .await
        .unwrap();
    assert_eq!(s, 200, "{b}");
    let status = agent
        .wait_exit(Duration::from_secs(75))
        .unwrap_or_else(|| panic!("agent still running after revocation: {}", agent.output()));
    let out = agent.output();
    assert_eq!(status.code(), Some(2), "{out}");
    assert!(out.contains("api.principal_cert_untrusted"), "{out}");
    drop(signer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn withdrawing_the_grant_stops_the_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = start_ca(dir).await;
    let signer = start_signer(dir, &ca.person, &grant_file(AGENT, ""));
    let mut agent = start_agent(dir, &ca, &signer, &[]);
    wait_for_file(&dir.join("agent/cert.pem"), &agent, Duration::from_secs(60));
    std::fs::write(&signer.grants, grant_file("someone-else", "")).unwrap();
    let status = agent
        .wait_exit(Duration::from_secs(75))
        .unwrap_or_else(|| panic!("agent still running after withdrawal: {}", agent.output()));
    let out = agent.output();
    assert_eq!(status.code(), Some(3), "{out}");
    assert!(
        out.contains("grant.unknown_agent") && out.contains("withdrawn"),
        "{out}"
    );
}

/// A signer for a person no CA knows (a self-signed certificate): its
/// refusals need no CA.
fn offline_signer(dir: &Path, grant_text: &str) -> Signer {
    let (key_pem, _) = openssl_csr(dir, "alice");
    let self_signed = dir.join("alice-self.pem");
    let (ok, out) = common::run(
        Command::new("openssl")
            .args(["req", "-x509", "-subj", "/CN=alice", "-days", "1", "-key"])
            .arg(dir.join("alice.key"))
            .arg("-out")
            .arg(&self_signed),
    );
    assert!(ok, "{out}");
    let cert_pem = std::fs::read_to_string(&self_signed).unwrap();
    let person = Person {
        uid: common::uid_for_spki("example:alice", &common::spki_of_cert_pem(&cert_pem)),
        cert_pem,
        key_der: aic::cert::pem_decode(&key_pem, "PRIVATE KEY").expect("PKCS#8 key"),
        key_pem,
        serial: String::new(),
    };
    start_signer(dir, &person, grant_text)
}

fn da_ask(dir: &Path, agent: &str, extra: Value) -> (Value, String) {
    let (_, csr) = openssl_csr(dir, &format!("{agent}-agent"));
    let mut body = json!({"agent_id": agent, "csr_pem": csr});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    (body, csr)
}

fn assert_refused(got: (u16, Value), key: &str) {
    assert_eq!(got.0, 403, "{}", got.1);
    assert_eq!(got.1["error"], key, "{}", got.1);
    assert!(!got.1["detail"].as_str().unwrap_or_default().is_empty());
}

#[test]
fn rejects_unknown_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let s = offline_signer(tmp.path(), &grant_file(AGENT, ""));
    let (body, _) = da_ask(tmp.path(), "nobody", json!({}));
    assert_refused(ask_signer(&s.socket, &body), "grant.unknown_agent");
}

#[test]
fn rejects_capability_not_granted() {
    let tmp = tempfile::tempdir().unwrap();
    let s = offline_signer(tmp.path(), &grant_file(AGENT, ""));
    let (body, _) = da_ask(tmp.path(), AGENT, json!({"capabilities": ["db:write"]}));
    assert_refused(ask_signer(&s.socket, &body), "grant.capability_not_granted");
}

#[test]
fn rejects_key_mismatch() {
    let tmp = tempfile::tempdir().unwrap();
    let pinned = format!("key_sha256 = \"{}\"", "00".repeat(32));
    let s = offline_signer(tmp.path(), &grant_file(AGENT, &pinned));
    let (body, _) = da_ask(tmp.path(), AGENT, json!({}));
    assert_refused(ask_signer(&s.socket, &body), "grant.key_mismatch");
}

#[test]
fn rejects_lifetime_too_long() {
    let tmp = tempfile::tempdir().unwrap();
    let s = offline_signer(tmp.path(), &grant_file(AGENT, ""));
    let (body, _) = da_ask(tmp.path(), AGENT, json!({"lifetime": 3601}));
    assert_refused(ask_signer(&s.socket, &body), "grant.lifetime_too_long");
}

#[test]
fn rejects_window_ended() {
    let tmp = tempfile::tempdir().unwrap();
    let text = grant_file(AGENT, "").replace("max_window = \"1h\"", "max_window = \"2s\"");
    let s = offline_signer(tmp.path(), &text);
    let (body, _) = da_ask(tmp.path(), AGENT, json!({"lifetime": 60}));
    let (status, answer) = ask_signer(&s.socket, &body);
    assert_eq!(status, 200, "{answer}");
    // Clipped to the 2 s window.
    assert!(answer["lifetime"].as_i64().unwrap() <= 2, "{answer}");
    std::thread::sleep(Duration::from_millis(2500));
    assert_refused(ask_signer(&s.socket, &body), "grant.window_ended");
}

#[test]
fn rejects_rate_exceeded() {
    let tmp = tempfile::tempdir().unwrap();
    let text = grant_file(AGENT, "").replace("max_das_per_hour = 100", "max_das_per_hour = 1");
    let s = offline_signer(tmp.path(), &text);
    let (body, _) = da_ask(tmp.path(), AGENT, json!({}));
    let (status, answer) = ask_signer(&s.socket, &body);
    assert_eq!(status, 200, "{answer}");
    assert_refused(ask_signer(&s.socket, &body), "grant.rate_exceeded");
}

#[test]
fn rejects_other_users_by_socket_permissions_0600() {
    let tmp = tempfile::tempdir().unwrap();
    let s = offline_signer(tmp.path(), &grant_file(AGENT, ""));
    let mode = std::fs::metadata(&s.socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
}

#[test]
fn follows_the_grant_file_and_keeps_the_last_good_one() {
    let tmp = tempfile::tempdir().unwrap();
    let s = offline_signer(tmp.path(), &grant_file(AGENT, ""));
    let (body, _) = da_ask(tmp.path(), AGENT, json!({}));
    assert_eq!(ask_signer(&s.socket, &body).0, 200);
    // A broken file is logged and ignored.
    std::fs::write(&s.grants, "[[agent]]\nid = ").unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(ask_signer(&s.socket, &body).0, 200);
    assert!(
        s.proc.output().contains("keeping the previous grants"),
        "{}",
        s.proc.output()
    );
    // Removing the agent withdraws its grant.
    std::fs::write(&s.grants, grant_file("someone-else", "")).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert_refused(ask_signer(&s.socket, &body), "grant.unknown_agent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mtls_signer_checks_the_client_certificates_agent_id() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = start_ca(dir).await;
    // The signer's own TLS certificate, from the same CA.
    let (s, b) = ca
        .api
        .post(
            &ca.node.url("/api/v1/certs"),
            &json!({"cn": "signer", "profile": "tls-server", "san": "IP:127.0.0.1"}),
        )
        .await
        .unwrap();
    assert_eq!(s, 200, "{b}");
    let people = std::fs::read_to_string(ca.data.path.join("ca/people.cert.pem")).unwrap();
    let tls_cert = dir.join("signer-tls.pem");
    let tls_key = dir.join("signer-tls.key");
    std::fs::write(
        &tls_cert,
        format!("{}{people}", b["cert_pem"].as_str().unwrap()),
    )
    .unwrap();
    std::fs::write(&tls_key, b["key_pem"].as_str().unwrap()).unwrap();
    let root = ca.data.path.join("ca/root.cert.pem");
    let grant_text = format!("{}{}", grant_file(AGENT, ""), grant_file("other-bot", ""));
    let signer = start_signer_with(
        dir,
        &ca.person,
        &grant_text,
        &[
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            tls_cert.to_str().unwrap(),
            "--tls-key",
            tls_key.to_str().unwrap(),
            "--client-ca",
            root.to_str().unwrap(),
        ],
    );
    let start = Instant::now();
    let url = loop {
        let out = signer.proc.output();
        if let Some(u) = out
            .lines()
            .find_map(|l| l.strip_prefix("delegate serve: listening on "))
            && u.starts_with("https://")
        {
            break u.to_string();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no https listener: {out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // The first certificate comes through the socket...
    let unix = format!("unix:{}", signer.socket.display());
    let mut first = agent_with(dir, &ca, &unix, AGENT, &["--once"], "first");
    let status = first
        .wait_exit(Duration::from_secs(60))
        .expect("first --once");
    assert!(status.success(), "{}", first.output());
    let cert_one = std::fs::read_to_string(dir.join("agent/cert.pem")).unwrap();
    // ...the renewal over mTLS with it.
    let mut renew = agent_with(dir, &ca, &url, AGENT, &["--once"], "renew");
    let status = renew
        .wait_exit(Duration::from_secs(60))
        .expect("mTLS --once");
    assert!(status.success(), "{}", renew.output());
    assert_ne!(
        std::fs::read_to_string(dir.join("agent/cert.pem")).unwrap(),
        cert_one
    );
    // report-bot's certificate cannot ask for other-bot.
    let mut other = agent_with(dir, &ca, &url, "other-bot", &["--once"], "other");
    let status = other
        .wait_exit(Duration::from_secs(60))
        .expect("other --once");
    assert_eq!(status.code(), Some(3), "{}", other.output());
    assert!(
        other.output().contains("auth.agent_mismatch"),
        "{}",
        other.output()
    );
    // Bob's report-bot is not Alice's: agent ids are unique per principal only.
    let pa = grants(&[("db", "read")], 1_000_000, 0);
    let (s, b) = ca
        .api
        .post(
            &ca.node.url("/api/v1/certs"),
            &json!({"cn": "bob", "principal_authorization": pa}),
        )
        .await
        .unwrap();
    assert_eq!(s, 200, "{b}");
    let bob_dir = dir.join("bob");
    std::fs::create_dir(&bob_dir).unwrap();
    let bob_signer = start_signer(&bob_dir, &Person::from_response(&b), &grant_file(AGENT, ""));
    let bob_unix = format!("unix:{}", bob_signer.socket.display());
    let mut bob = agent_with(&bob_dir, &ca, &bob_unix, AGENT, &["--once"], "bob-first");
    let status = bob.wait_exit(Duration::from_secs(60)).expect("bob --once");
    assert!(status.success(), "{}", bob.output());
    let mut bob = agent_with(&bob_dir, &ca, &url, AGENT, &["--once"], "bob-at-alice");
    let status = bob
        .wait_exit(Duration::from_secs(60))
        .expect("bob at alice");
    assert_eq!(status.code(), Some(3), "{}", bob.output());
    assert!(
        bob.output().contains("auth.principal_mismatch"),
        "{}",
        bob.output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_out_keeps_an_aic_jwt_and_a_bad_token_stops_the_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = start_ca(dir).await;
    let signer = start_signer(dir, &ca.person, &grant_file(AGENT, ""));
    let jwt = dir.join("aic.jwt");
    // --signal: a process whose default SIGHUP action ends it.
    let mut reloadable = Command::new("sleep").arg("120").spawn().unwrap();
    let signal = format!("{}:HUP", reloadable.id());
    let mut agent = start_agent(
        dir,
        &ca,
        &signer,
        &[
            "--once",
            "--jwt-out",
            jwt.to_str().unwrap(),
            "--signal",
            &signal,
        ],
    );
    let status = agent.wait_exit(Duration::from_secs(60)).expect("--once");
    assert!(status.success(), "{}", agent.output());
    let hup = reloadable.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&hup),
        Some(libc::SIGHUP),
        "{hup:?}"
    );
    let token = std::fs::read_to_string(&jwt).unwrap();
    assert_eq!(token.split('.').count(), 3, "{token}");
    let out = Command::new(warrant_bin())
        .args(["aic-jwt", "verify", "--token"])
        .arg(format!("@{}", jwt.display()))
        .args(["--jwks", &ca.node.url("/.well-known/jwks.json")])
        .args(["--capability", "db:read", "--principal-spki"])
        .arg(base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            common::spki_of_cert_pem(&ca.person.cert_pem),
        ))
        .args(["--at", &common::now().to_string()])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("\"permit\": true") || text.contains("\"permit\":true"),
        "{text}"
    );
    // Two DAs: one for the certificate, one for the token.
    let log = std::fs::read_to_string(dir.join("da-log.jsonl")).unwrap();
    let kinds: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["kind"].clone())
        .collect();
    assert_eq!(kinds, vec![json!("certificate"), json!("jwt")], "{log}");
    // A token the CA does not know is a final refusal (exit 2).
    std::fs::write(&ca.token_file, "not-a-token").unwrap();
    let mut agent = start_agent(dir, &ca, &signer, &["--once"]);
    let status = agent.wait_exit(Duration::from_secs(60)).expect("bad token");
    assert_eq!(status.code(), Some(2), "{}", agent.output());
    assert!(
        agent.output().contains("api.unauthorized"),
        "{}",
        agent.output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_while_the_signer_is_down() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = start_ca(dir).await;
    let socket = dir.join("signer.sock");
    let unix = format!("unix:{}", socket.display());
    let mut agent = agent_with(dir, &ca, &unix, AGENT, &["--once"], "agent");
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        agent.child.try_wait().unwrap().is_none(),
        "gave up at once: {}",
        agent.output()
    );
    let state = std::fs::read_to_string(dir.join("agent/state.json")).unwrap();
    assert!(state.contains("cannot reach the signer"), "{state}");
    let _signer = start_signer(dir, &ca.person, &grant_file(AGENT, ""));
    let status = agent.wait_exit(Duration::from_secs(60)).expect("--once");
    assert!(status.success(), "{}", agent.output());
    assert!(dir.join("agent/cert.pem").exists());
}
