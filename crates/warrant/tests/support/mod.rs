//! Drives the real `warrant` binary for the durability tests: `warrant init`,
//! `warrant serve` child processes (killed with SIGKILL or stopped with
//! SIGTERM), a concurrent issuance load that records every acknowledged
//! certificate, and the checks that nothing acknowledged was lost.
//!
//! DA signing and the per-test databases come from the server's API test
//! helpers (`crates/warrant-server/tests/common`, included by path).
#![allow(dead_code)]

use crate::common::{Da, Person, TestDb, decode};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Every file under `dir`, recursively, sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}

pub const ADMIN_PASSWORD: &str = "durability test password";
/// Bound on any one request: only there to turn a hang into a failure.
pub const REQUEST_BOUND: Duration = Duration::from_secs(30);
/// Bound on a server start (a loaded 2-core box builds nothing here, but
/// migrations on MariaDB can take a few seconds).
const START_BOUND: Duration = Duration::from_secs(120);
/// DAs are re-sent after restarts to prove their nonce is burnt; a wide skew
/// keeps a slow run from turning the expected replay into "stale".
pub const DA_SKEW_ENV: (&str, &str) = ("WARRANT_ISSUANCE_DA_MAX_TIMESTAMP_SKEW", "900");

/// A loopback port free a moment ago (for a child process that takes a
/// port number, not a listener).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn warrant_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_warrant"))
}

/// A data dir made by `warrant init`, with the database it points at.
pub struct DataDir {
    pub path: PathBuf,
    /// `DATABASE_URL` for every process on this data dir (`None`: SQLite).
    pub dsn: Option<String>,
    /// The one-time token `warrant init` printed: spent by its first request,
    /// so the tests log in instead ([`Api::login`]).
    pub bootstrap_token: String,
    /// Environment every `warrant` process on this data dir gets (a
    /// PKCS#11 token's configuration and PIN, for instance).
    pub env: Vec<(String, String)>,
    _tmp: tempfile::TempDir,
}

impl DataDir {
    /// `warrant init` on a new temp dir against `db`.
    pub fn init(db: &TestDb) -> DataDir {
        Self::init_with_dsn(db.dsn.clone())
    }

    pub fn init_with_dsn(dsn: Option<String>) -> DataDir {
        Self::try_init(dsn, &[], &[]).unwrap_or_else(|out| panic!("warrant init failed: {out}"))
    }

    /// `warrant init` with more arguments, and `env` for it and for every
    /// later process on the data dir; `Err` holds its output when it fails.
    pub fn try_init(
        dsn: Option<String>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<DataDir, String> {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("data");
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut cmd = Command::new(warrant_bin());
        cmd.args(["init", "--data-dir"])
            .arg(&path)
            .args(["--admin-password", ADMIN_PASSWORD])
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)));
        set_database(&mut cmd, dsn.as_deref());
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            return Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr)));
        }
        let bootstrap_token = text
            .lines()
            .find_map(|l| l.split_once("bootstrap token (shown once): "))
            .map(|(_, t)| t.trim().to_string())
            .unwrap_or_else(|| panic!("no bootstrap token in: {text}"));
        Ok(DataDir {
            path,
            dsn,
            bootstrap_token,
            env,
            _tmp: tmp,
        })
    }

    /// A second data dir with the same files (CA keys, config), for another
    /// node on the same database.
    pub fn copy(&self) -> DataDir {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("data");
        copy_dir(&self.path, &path);
        DataDir {
            path,
            dsn: self.dsn.clone(),
            bootstrap_token: self.bootstrap_token.clone(),
            env: self.env.clone(),
            _tmp: tmp,
        }
    }

    /// `warrant serve` on this data dir, once it reported its address.
    pub fn serve(&self, name: &str) -> Node {
        Node::start(self, name)
    }
}

/// `DATABASE_URL` wins over the config file; SQLite runs must not inherit one.
fn set_database(cmd: &mut Command, dsn: Option<&str>) {
    match dsn {
        Some(d) => cmd.env("DATABASE_URL", d),
        None => cmd.env_remove("DATABASE_URL"),
    };
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A running `warrant serve`. Dropping it SIGKILLs it, so a failing test
/// leaves no server behind.
pub struct Node {
    child: Child,
    pub base: String,
    pub name: String,
    log: PathBuf,
}

impl Node {
    fn start(data: &DataDir, name: &str) -> Node {
        let log = data.path.join(format!("{name}.stderr.log"));
        let mut cmd = Command::new(warrant_bin());
        cmd.args(["serve", "--data-dir"])
            .arg(&data.path)
            .env("WARRANT_LISTEN", "127.0.0.1:0")
            .env(DA_SKEW_ENV.0, DA_SKEW_ENV.1)
            // What these tests check; a developer's exported setting must not
            // turn them into tests of the lossy mode.
            .env("WARRANT_DURABILITY", "durable")
            .env("RUST_LOG", "warn")
            .envs(data.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap());
        set_database(&mut cmd, data.dsn.as_deref());
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        // Reads the address, then keeps draining stdout until the process ends.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix("listening on http://") {
                    let _ = tx.send(format!("http://{rest}"));
                }
            }
        });
        let base = match rx.recv_timeout(START_BOUND) {
            Ok(b) => b,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{name}: warrant serve did not start: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
        };
        Node {
            child,
            base,
            name: name.to_string(),
            log,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// SIGKILL, no chance to flush anything.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM: graceful shutdown (drains the write path).
    pub fn stop(mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        for _ in 0..600 {
            if self.child.try_wait().unwrap().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{}: warrant serve ignored SIGTERM for 60 s", self.name);
    }

    pub fn stderr_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// An HTTP client for one server: bearer token, bounded requests.
#[derive(Clone)]
pub struct Api {
    pub http: reqwest::Client,
    pub token: String,
}

impl Api {
    pub fn new(token: &str) -> Api {
        Api {
            http: reqwest::Client::builder()
                .timeout(REQUEST_BOUND)
                .build()
                .unwrap(),
            token: token.to_string(),
        }
    }

    /// Logs in to `node` as admin. Login tokens live in the database, so the
    /// client keeps working across restarts and on every node of it.
    pub async fn login(node: &Node) -> Api {
        let api = Api::new("");
        let (s, b) = api
            .post(
                &node.url("/api/v1/users/login"),
                &json!({"username": "admin", "password": ADMIN_PASSWORD}),
            )
            .await
            .unwrap_or_else(|e| panic!("{}: login: {e}", node.name));
        assert_eq!(s, 200, "{}: login: {b}", node.name);
        Api::new(b["token"].as_str().unwrap())
    }

    /// `Err` only for transport failures (refused, reset, timed out).
    pub async fn post(&self, url: &str, body: &Value) -> Result<(u16, Value), reqwest::Error> {
        let resp = self
            .http
            .post(url)
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await?;
        Ok(decode(resp).await)
    }

    pub async fn get(&self, url: &str) -> Result<(u16, Value), reqwest::Error> {
        let resp = self.http.get(url).bearer_auth(&self.token).send().await?;
        Ok(decode(resp).await)
    }

    /// A person certificate whose PA allows plenty of agents.
    pub async fn person(&self, node: &Node, cn: &str) -> Person {
        let pa = json!({"grants": [], "delegation_policy": {"allowed_mode": 0, "max_agents": 1_000_000}});
        self.person_with_pa(node, cn, &pa).await
    }

    /// A person certificate carrying `pa` (`common::grants` builds one).
    pub async fn person_with_pa(&self, node: &Node, cn: &str, pa: &Value) -> Person {
        let (s, b) = self
            .post(
                &node.url("/api/v1/certs"),
                &json!({"cn": cn, "principal_authorization": pa}),
            )
            .await
            .unwrap();
        assert_eq!(s, 200, "{b}");
        Person::from_response(&b)
    }
}

/// An issuance the server answered 200 to.
#[derive(Clone, Debug)]
pub struct Acked {
    pub ca: String,
    pub serial: String,
    /// The request body, for agent issuances (re-sent to check the replay).
    pub da_body: Option<Value>,
}

/// What the clients of a load run saw.
#[derive(Default)]
pub struct Seen {
    pub acked: Vec<Acked>,
    /// Non-200 answers by status, with one body per status for messages.
    pub statuses: BTreeMap<u16, (usize, Value)>,
    /// Agent request bodies that got 503 (to retry after an outage).
    pub unavailable_das: Vec<Value>,
    pub transport_errors: usize,
    /// Transport errors that were our own [`REQUEST_BOUND`] timeout: hangs.
    pub timeouts: usize,
}

impl Seen {
    pub fn non_200(&self) -> String {
        format!("{:?}", self.statuses)
    }
}

/// Issuance load against one server: `clients` tasks issuing as fast as
/// they can, three agent issuances (fresh DA, round-robin over `people`)
/// for every regular one. Every answer is recorded in `seen`.
pub struct Load {
    pub seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    clients: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    pub fn start(api: &Api, base: &str, people: &[Person], clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let clients = (0..clients)
            .map(|c| {
                let (api, url, people) =
                    (api.clone(), format!("{base}/api/v1/certs"), people.to_vec());
                let (stop, seen) = (stop.clone(), seen.clone());
                tokio::spawn(async move {
                    let mut i = 0usize;
                    while !stop.load(Ordering::Relaxed) {
                        i += 1;
                        let da_body = (!i.is_multiple_of(4)).then(|| {
                            let p = &people[(c + i) % people.len()];
                            Da::new(p, &format!("agent-{c}-{i}"), &[]).body(p)
                        });
                        let body = da_body
                            .clone()
                            .unwrap_or_else(|| json!({"cn": format!("load-{c}-{i}")}));
                        let r = api.post(&url, &body).await;
                        let server_gone = record(&mut seen.lock().unwrap(), r, da_body);
                        if server_gone {
                            // Refused or reset (killed server): do not spin.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                })
            })
            .collect();
        Load {
            seen,
            stop,
            clients,
        }
    }

    /// Stops the clients, waits for them, and returns what they saw.
    pub async fn finish(self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        for c in self.clients {
            c.await.unwrap();
        }
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

/// Records one answer; `true` for a transport error.
fn record(
    seen: &mut Seen,
    answer: Result<(u16, Value), reqwest::Error>,
    da_body: Option<Value>,
) -> bool {
    match answer {
        Ok((200, b)) => {
            seen.acked.push(Acked {
                ca: b["ca"].as_str().unwrap().to_string(),
                serial: b["serial_number"].as_str().unwrap().to_string(),
                da_body,
            });
            false
        }
        Ok((status, b)) => {
            if status == 503 {
                seen.unavailable_das.extend(da_body);
            }
            seen.statuses.entry(status).or_insert((0, b)).0 += 1;
            false
        }
        Err(e) => {
            seen.transport_errors += 1;
            if e.is_timeout() {
                seen.timeouts += 1;
            }
            true
        }
    }
}

pub fn acked_count(seen: &Mutex<Seen>) -> usize {
    seen.lock().unwrap().acked.len()
}

/// Every acknowledged certificate is in the database (read back through
/// the API), and every acknowledged DA is refused as a replay. Checks all of
/// them, then fails once with the count and a few examples.
pub async fn assert_nothing_lost(api: &Api, node: &Node, acked: &[Acked], context: &str) {
    // Every acknowledged issuance has its audit row (written in the same
    // commit as the certificate).
    let mut audited = std::collections::HashSet::new();
    let mut offset = 0;
    loop {
        let url = node.url(&format!(
            "/api/v1/audit?event=issue&limit=10000&offset={offset}"
        ));
        let (s, b) = api.get(&url).await.unwrap();
        assert_eq!(s, 200, "{context}: audit log: {b}");
        let events = b["events"].as_array().unwrap();
        for e in events {
            audited.insert(e["serial"].as_str().unwrap_or_default().to_string());
        }
        if events.len() < 10_000 {
            break;
        }
        offset += events.len();
    }
    let unaudited: Vec<&str> = acked
        .iter()
        .filter(|a| !audited.contains(&a.serial))
        .map(|a| a.serial.as_str())
        .collect();
    assert!(
        unaudited.is_empty(),
        "{context}: {} of {} acknowledged issuances have no audit row, e.g. {:?}",
        unaudited.len(),
        acked.len(),
        &unaudited[..unaudited.len().min(5)]
    );
    // And a sample of them proves its inclusion in a signed checkpoint.
    let (s, listing) = api
        .get(&node.url("/api/v1/audit/checkpoint?fresh=true"))
        .await
        .unwrap();
    assert_eq!(s, 200, "{context}: checkpoints: {listing}");
    let key = warrant_tlog::NoteVerifier::parse(listing["key"].as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{context}: log key: {e}"));
    for a in acked.iter().step_by((acked.len() / 8).max(1)) {
        let url = node.url(&format!(
            "/api/v1/audit/proof/inclusion?serial={}",
            a.serial
        ));
        let (s, p) = api.get(&url).await.unwrap();
        assert_eq!(s, 200, "{context}: inclusion of {}: {p}", a.serial);
        let cp = warrant_tlog::Checkpoint::open(p["checkpoint"].as_str().unwrap_or_default(), &key)
            .unwrap_or_else(|e| panic!("{context}: checkpoint: {e}"));
        let b64 = |v: &Value| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(v.as_str().unwrap_or_default())
                .unwrap_or_default()
        };
        let proof: Vec<[u8; 32]> = p["proof"]
            .as_array()
            .map(|a| a.iter().filter_map(|h| b64(h).try_into().ok()).collect())
            .unwrap_or_default();
        warrant_tlog::verify_inclusion(
            p["index"].as_u64().unwrap_or(u64::MAX),
            cp.size,
            &warrant_tlog::leaf_hash(&b64(&p["leaf"])),
            &proof,
            &cp.root,
        )
        .unwrap_or_else(|e| panic!("{context}: inclusion of {}: {e:?}", a.serial));
    }
    let sem = Arc::new(tokio::sync::Semaphore::new(16));
    let mut tasks = tokio::task::JoinSet::new();
    for a in acked.iter().cloned() {
        let (api, sem) = (api.clone(), sem.clone());
        let get = node.url(&format!("/api/v1/cert/{}/{}", a.ca, a.serial));
        let post = node.url("/api/v1/certs");
        tasks.spawn(async move {
            let _permit = sem.acquire_owned().await.unwrap();
            let mut problems = Vec::new();
            let (s, b) = api.get(&get).await.unwrap();
            if (s, b["status"].as_str()) != (200, Some("V")) {
                problems.push(format!(
                    "certificate {} lost: {s} {}",
                    a.serial, b["message"]
                ));
            }
            if let Some(body) = &a.da_body {
                let (s, b) = api.post(&post, body).await.unwrap();
                if (s, b["message"].as_str()) != (403, Some("api.da_nonce_replayed")) {
                    problems.push(format!(
                        "DA of {} not refused as a replay: {s} {b}",
                        a.serial
                    ));
                }
            }
            problems
        });
    }
    let mut problems = Vec::new();
    while let Some(r) = tasks.join_next().await {
        problems.extend(r.unwrap_or_else(|e| panic!("{context}: {}", panic_text(e))));
    }
    assert!(
        problems.is_empty(),
        "{context}: {} problems among {} acknowledged issuances, e.g.:\n{}",
        problems.len(),
        acked.len(),
        problems[..problems.len().min(5)].join("\n")
    );
}

fn panic_text(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(p) => p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default(),
        Err(e) => e.to_string(),
    }
}
