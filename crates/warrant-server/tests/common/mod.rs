//! Test harness: a real Warrant server on 127.0.0.1:0 with a real database,
//! plus helpers to build person certificates and signed DAs.
//!
//! [`TestServer::on`] starts it on a fresh database of a [`Backend`], and
//! [`backend_matrix!`] turns each `async fn case(b: Backend)` into one test
//! per backend, so the whole suite runs on SQLite, PostgreSQL and MariaDB.
#![allow(dead_code)]

pub mod db;
pub use db::{Backend, TestDb};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use warrant_server::{ErrorBody, ErrorKey, LoadedConfig, RunningServer};

pub struct TestServer {
    pub server: Option<RunningServer>,
    pub dir: tempfile::TempDir,
    pub base: String,
    /// An admin login token (the bootstrap token is spent on nothing here).
    pub token: String,
    /// The one-time token `init` printed, unused.
    pub bootstrap_token: String,
    pub admin_password: String,
    pub http: reqwest::Client,
    /// The per-test database (dropped after the server, see [`TestDb`]).
    pub db: Option<TestDb>,
}

pub const ADMIN_PASSWORD: &str = "correct horse battery";

impl TestServer {
    /// On a fresh database of `backend`; the caller (normally
    /// [`backend_matrix!`]) has checked [`Backend::available`].
    pub async fn on(backend: Backend) -> TestServer {
        Self::on_with(backend, "").await
    }

    /// [`on`](Self::on) with `extra_toml` appended to `warrant.toml`.
    pub async fn on_with(backend: Backend, extra_toml: &str) -> TestServer {
        let db = TestDb::create(backend)
            .await
            .unwrap_or_else(|| panic!("{backend:?} is not available"));
        let mut srv = Self::start_with(db.dsn.as_deref(), extra_toml).await;
        srv.db = Some(db);
        srv
    }

    /// SQLite in the temp data dir.
    pub async fn start() -> TestServer {
        Self::start_with(None, "").await
    }

    pub async fn start_with_dsn(dsn: &str) -> TestServer {
        Self::start_with(Some(dsn), "").await
    }

    /// `extra_toml` is appended to the generated `warrant.toml` (its sections
    /// must not repeat `[database]`).
    pub async fn start_with(dsn: Option<&str>, extra_toml: &str) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let mut toml = String::from("listen = \"127.0.0.1:0\"\nlog_level = \"warn\"\n");
        if let Some(dsn) = dsn {
            toml.push_str(&format!("[database]\nurl = \"{dsn}\"\n"));
        }
        toml.push_str(extra_toml);
        std::fs::write(dir.path().join("warrant.toml"), &toml).unwrap();
        let report = warrant_server::init_data_dir(dir.path(), Some(ADMIN_PASSWORD.into()))
            .await
            .unwrap();
        assert_eq!(report.bootstrap_token.len(), 64);
        let (server, base) = serve(dir.path(), &toml).await;
        let http = reqwest::Client::new();
        let token = login(&http, &base, "admin", ADMIN_PASSWORD).await;
        TestServer {
            server: Some(server),
            dir,
            base,
            token,
            bootstrap_token: report.bootstrap_token,
            admin_password: ADMIN_PASSWORD.into(),
            http,
            db: None,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_as(&self.token, path, body).await
    }

    pub async fn post_as(&self, token: &str, path: &str, body: &Value) -> (u16, Value) {
        let resp = self
            .http
            .post(self.url(path))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .unwrap();
        decode(resp).await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.get_as(&self.token, path).await
    }

    /// A GET with `token` (empty: no credentials).
    pub async fn get_as(&self, token: &str, path: &str) -> (u16, Value) {
        let mut req = self.http.get(self.url(path));
        if !token.is_empty() {
            req = req.bearer_auth(token);
        }
        decode(req.send().await.unwrap()).await
    }

    /// A GET without credentials, the body as text.
    pub async fn get_text(&self, path: &str) -> (u16, String) {
        let resp = self.http.get(self.url(path)).send().await.unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    }

    pub async fn post_raw(&self, path: &str, body: Vec<u8>) -> (u16, Value) {
        let resp = self
            .http
            .post(self.url(path))
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        decode(resp).await
    }

    /// Creates a user with `role` and returns a login token for it.
    pub async fn user_token(&self, name: &str, role: &str) -> String {
        let (s, b) = self
            .post(
                "/api/v1/users",
                &json!({"username": name, "password": "password-123", "role": role}),
            )
            .await;
        assert_eq!(s, 200, "{b}");
        let (s, b) = self
            .post_as(
                "",
                "/api/v1/users/login",
                &json!({"username": name, "password": "password-123"}),
            )
            .await;
        assert_eq!(s, 200, "{b}");
        b["token"].as_str().unwrap().to_string()
    }

    /// Issues a person (`tls-client`) certificate with a PA.
    pub async fn person(&self, cn: &str, pa: Value) -> Person {
        let (s, b) = self
            .post(
                "/api/v1/certs",
                &json!({"cn": cn, "principal_authorization": pa}),
            )
            .await;
        assert_eq!(s, 200, "{b}");
        Person::from_response(&b)
    }

    /// `GET /api/v1/crl/people` (public), checked by `openssl crl` against
    /// the People CA (its text includes `verify OK`).
    pub async fn people_crl_text(&self) -> String {
        let crl = self
            .http
            .get(self.url("/api/v1/crl/people"))
            .send()
            .await
            .unwrap();
        assert_eq!(crl.status().as_u16(), 200);
        let crl_path = self.dir.path().join("people.crl");
        std::fs::write(&crl_path, crl.bytes().await.unwrap()).unwrap();
        let (ok, text) = run(Command::new("openssl")
            .args(["crl", "-inform", "DER", "-noout", "-text", "-CAfile"])
            .arg(self.dir.path().join("ca/people.cert.pem"))
            .arg("-in")
            .arg(&crl_path));
        assert!(ok, "{text}");
        text
    }

    /// `GET /metrics` (public), which must answer 200.
    pub async fn metrics_text(&self) -> String {
        let r = self.http.get(self.url("/metrics")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
        r.text().await.unwrap()
    }

    pub fn root_pem(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("ca/root.cert.pem")).unwrap()
    }

    pub fn people_pem(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("ca/people.cert.pem")).unwrap()
    }

    /// A second server on this one's data dir and database, as another node
    /// of one deployment, and its base URL; the caller shuts it down.
    pub async fn second_node(&self) -> (RunningServer, String) {
        let toml = std::fs::read_to_string(self.dir.path().join("warrant.toml")).unwrap();
        serve(self.dir.path(), &toml).await
    }

    pub async fn stop(mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown().await;
        }
    }
}

/// A reqwest client presenting `cert_pem` + `key_pem` (chain with the People
/// CA) and trusting only the Root.
pub fn mtls_client(srv: &TestServer, cert_pem: &str, key_pem: &str) -> reqwest::Client {
    let identity = format!("{key_pem}{cert_pem}{}", srv.people_pem());
    reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(srv.root_pem().as_bytes()).unwrap()])
        .identity(reqwest::Identity::from_pem(identity.as_bytes()).unwrap())
        .build()
        .unwrap()
}

/// Logs in over HTTP and returns the session token.
pub async fn login(http: &reqwest::Client, base: &str, username: &str, password: &str) -> String {
    let resp = http
        .post(format!("{base}/api/v1/users/login"))
        .json(&json!({"username": username, "password": password}))
        .send()
        .await
        .unwrap();
    let (s, b) = decode(resp).await;
    assert_eq!(s, 200, "login as {username}: {b}");
    b["token"].as_str().unwrap().to_string()
}

/// A server on the initialised data dir `dir` with `toml` as its config, and
/// its base URL.
async fn serve(dir: &Path, toml: &str) -> (RunningServer, String) {
    let loaded = LoadedConfig::from_parts(dir, Some(toml), &BTreeMap::new()).unwrap();
    let server = warrant_server::start(loaded).await.unwrap();
    let base = format!("http://{}", server.http_addr);
    (server, base)
}

/// One `#[tokio::test]` per backend for each `async fn case(b: Backend)`:
/// `sqlite::case`, `postgres::case` and `mysql::case`. A backend whose
/// server is not configured is skipped with a note, or fails under CI.
#[macro_export]
macro_rules! backend_matrix {
    ($($case:ident),* $(,)?) => {
        $crate::backend_matrix!(@one sqlite, Sqlite, $($case),*);
        $crate::backend_matrix!(@one postgres, Postgres, $($case),*);
        $crate::backend_matrix!(@one mysql, MySql, $($case),*);
    };
    (@one $module:ident, $variant:ident, $($case:ident),*) => {
        mod $module {
            $(
                #[tokio::test]
                async fn $case() {
                    let backend = $crate::common::Backend::$variant;
                    if backend.available() {
                        super::$case(backend).await;
                    }
                }
            )*
        }
    };
}

pub async fn decode(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.unwrap();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, v)
}

/// Asserts an error answer: status and key from the same enum the server uses.
pub fn assert_error(got: &(u16, Value), key: ErrorKey) {
    let body: ErrorBody = serde_json::from_value(got.1.clone())
        .unwrap_or_else(|e| panic!("not an error body ({e}): {}", got.1));
    assert_eq!(
        (got.0, body.message.as_str()),
        (key.status().as_u16(), key.as_str()),
        "detail: {}",
        body.detail
    );
    assert_eq!(body.code, got.0);
}

#[derive(Clone)]
pub struct Person {
    pub cert_pem: String,
    pub key_pem: String,
    pub key_der: Vec<u8>,
    pub uid: String,
    pub serial: String,
}

impl Person {
    pub fn from_response(b: &Value) -> Person {
        let key_pem = b["key_pem"].as_str().unwrap().to_string();
        Person {
            cert_pem: b["cert_pem"].as_str().unwrap().to_string(),
            key_der: aic::cert::pem_decode(&key_pem, "PRIVATE KEY").unwrap(),
            key_pem,
            uid: b["principal_uid"].as_str().unwrap().to_string(),
            serial: b["serial_number"].as_str().unwrap().to_string(),
        }
    }
}

/// A delegation to sign; defaults give a fresh, valid v1 DA.
#[derive(Clone)]
pub struct Da {
    pub agent_id: String,
    pub uid: String,
    pub caps: Vec<(String, String)>,
    pub mode: i64,
    pub lifetime: i64,
    pub timestamp: i64,
    pub nonce: [u8; 32],
    pub agent_spki: Option<Vec<u8>>,
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

pub fn random_nonce() -> [u8; 32] {
    let mut n = [0u8; 32];
    aws_lc_rs::rand::fill(&mut n).unwrap();
    n
}

impl Da {
    pub fn new(person: &Person, agent_id: &str, caps: &[(&str, &str)]) -> Da {
        Da {
            agent_id: agent_id.into(),
            uid: person.uid.clone(),
            caps: caps
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            mode: 0,
            lifetime: 600,
            timestamp: now(),
            nonce: random_nonce(),
            agent_spki: None,
        }
    }

    fn tbs_der(&self) -> Vec<u8> {
        aic::DelegationRequest {
            agent_id: self.agent_id.clone(),
            principal_uid: aic::PrincipalUid::parse(&self.uid).unwrap(),
            reason: aic::Reason::new("task", "nightly report"),
            capabilities: self
                .caps
                .iter()
                .map(|(s, i)| aic::Capability::new(s, i, None))
                .collect(),
            delegation_mode: aic::DelegationMode::from_i64(self.mode, "mode").unwrap(),
            constraints: vec![],
            requested_lifetime: self.lifetime,
            timestamp: self.timestamp,
            nonce: self.nonce,
            agent_spki_der: self.agent_spki.clone(),
        }
        .tbs()
        .unwrap()
        .to_der()
    }

    /// The request body, signed with `signer` (normally the person's key).
    pub fn body_signed_by(&self, person: &Person, signer_pkcs8: &[u8]) -> Value {
        let (_, sig) = aic::sign_delegation(
            &self.tbs_der(),
            signer_pkcs8,
            aic::DaSigningAlgorithm::EcdsaP256Sha256,
        )
        .unwrap();
        json!({
            "profile": "agent-proxy",
            "cn": self.agent_id,
            "subject": format!("/OU=gateway:reader/CN={}", self.agent_id),
            "agent_id": self.agent_id,
            "principal_uid": self.uid,
            "delegation_mode": self.mode,
            "capabilities": self.caps.iter().map(|(s, i)| json!({"scheme_id": s, "capability_id": i})).collect::<Vec<_>>(),
            "user_auth_signature": STANDARD.encode(sig),
            "user_auth_signature_algo": "ECDSA-SHA256",
            "user_auth_nonce": STANDARD.encode(self.nonce),
            "user_auth_lifetime": self.lifetime,
            "user_auth_timestamp": aic::time::format_rfc3339(self.timestamp),
            "user_auth_reason_code": "task",
            "user_auth_reason_description": "nightly report",
            "user_cert_pem": person.cert_pem,
            "agent_key_binding": self.agent_spki.is_some(),
        })
    }

    pub fn body(&self, person: &Person) -> Value {
        self.body_signed_by(person, &person.key_der)
    }
}

/// `realm:id:base64url(sha256(spki))` for an arbitrary SPKI.
pub fn uid_for_spki(realm_id: &str, spki: &[u8]) -> String {
    format!(
        "{realm_id}:{}",
        URL_SAFE_NO_PAD.encode(aic::crypto::sha256(spki))
    )
}

/// Percent-encodes a query parameter value.
pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A P-256 key and CSR made with the real openssl binary; returns (key, csr) PEM.
pub fn openssl_csr(dir: &Path, name: &str) -> (String, String) {
    let key = dir.join(format!("{name}.key"));
    let csr = dir.join(format!("{name}.csr"));
    let (ok, out) = run(Command::new("openssl")
        .args([
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
        ])
        .arg(format!("/CN={name}"))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&csr));
    assert!(ok, "openssl req: {out}");
    (
        std::fs::read_to_string(key).unwrap(),
        std::fs::read_to_string(csr).unwrap(),
    )
}

/// `openssl verify -CAfile root -untrusted people cert`.
pub fn openssl_verify(srv: &TestServer, cert_pem: &str, name: &str) {
    let d = srv.dir.path();
    let cert = write(d, &format!("{name}.pem"), cert_pem);
    let (ok, out) = run(Command::new("openssl")
        .args(["verify", "-CAfile"])
        .arg(d.join("ca/root.cert.pem"))
        .arg("-untrusted")
        .arg(d.join("ca/people.cert.pem"))
        .arg(&cert));
    assert!(ok && out.contains(": OK"), "openssl verify failed: {out}");
}

/// A principal authorization: these grants, `max_agents`, `allowed_mode`.
pub fn grants(caps: &[(&str, &str)], max_agents: i64, allowed_mode: i64) -> Value {
    json!({
        "grants": caps.iter().map(|(s, i)| json!({"scheme_id": s, "capability_id": i})).collect::<Vec<_>>(),
        "delegation_policy": {"allowed_mode": allowed_mode, "max_agents": max_agents}
    })
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

pub fn spki_of_cert_pem(pem: &str) -> Vec<u8> {
    let der = aic::cert::pem_decode(pem, "CERTIFICATE").unwrap();
    aic::cert::CertificateView::from_der(&der)
        .unwrap()
        .subject_spki_der
}
