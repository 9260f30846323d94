//! `warrant admit` as a real process beside a real `warrant serve`
//! (SQLite): the nginx `auth_request` and Envoy `ext_authz` protocols
//! driven by a raw HTTP client, revocation picked up from Warrant's CRL,
//! and the rule file followed.

#[path = "../../warrant-server/tests/common/mod.rs"]
mod common;
mod support;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use common::{Da, Person, grants};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::{Api, DataDir, Node, warrant_bin};

const RULES: &str = "\
GET     /healthz       public
GET     /v1/rows/*     db:read
POST    /v1/rows       db:write
";

/// A `warrant admit` child, killed on drop.
struct Admit {
    child: Child,
    base: String,
    err: PathBuf,
}

impl Admit {
    fn start(dir: &Path, node: &Node, principals: Option<&Path>) -> Admit {
        Admit::start_with_crl(dir, &node.url("/api/v1/crl/people"), principals)
    }

    fn start_with_crl(dir: &Path, crl_url: &str, principals: Option<&Path>) -> Admit {
        Admit::start_with_args(dir, crl_url, principals, &[])
    }

    /// With `extra` flags after the usual ones (`--clock-skew-secs 0`).
    fn start_with_args(
        dir: &Path,
        crl_url: &str,
        principals: Option<&Path>,
        extra: &[&str],
    ) -> Admit {
        let out = dir.join("admit.stdout");
        let err = dir.join("admit.stderr");
        let mut cmd = Command::new(warrant_bin());
        cmd.args(["admit", "--listen", "127.0.0.1:0", "--trust"])
            .arg(dir.join("trust.pem"))
            .arg("--rules")
            .arg(dir.join("rules.txt"))
            .args(["--crl-url", crl_url])
            .args(["--refresh-ms", "300", "--max-staleness-secs", "30"])
            .arg("--decision-log")
            .arg(dir.join("decisions.jsonl"));
        if let Some(p) = principals {
            cmd.arg("--principals").arg(p);
        }
        cmd.args(extra);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        let start = Instant::now();
        let base = loop {
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            if let Some(addr) = text
                .lines()
                .find_map(|l| l.strip_prefix("admit: listening on "))
            {
                break addr.trim().to_string();
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "admit did not start: {}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Admit { child, base, err }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }
}

impl Drop for Admit {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn escaped(pem: &str) -> String {
    percent_encoding::utf8_percent_encode(pem, percent_encoding::NON_ALPHANUMERIC).to_string()
}

struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
}

impl Answer {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// An nginx `auth_request` subrequest as docs/admission.md configures it.
async fn nginx(admit: &Admit, method: &str, uri: &str, cert_pem: Option<&str>, ip: &str) -> Answer {
    let mut req = reqwest::Client::new()
        .get(format!("{}/nginx", admit.base))
        .header("X-Original-Method", method)
        .header("X-Original-URI", uri)
        .header("X-Real-IP", ip);
    // nginx sends an empty value when the client presented no certificate.
    req = req.header("X-Client-Cert", cert_pem.map(escaped).unwrap_or_default());
    let resp = req.send().await.unwrap();
    Answer {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
    }
}

/// An Envoy `ext_authz` HTTP check: the original method and path under
/// the `/envoy` prefix, the certificate in XFCC.
async fn envoy(admit: &Admit, method: &str, path: &str, cert_pem: &str) -> Answer {
    let xfcc = format!(
        "By=spiffe://upstream;Hash=0011;Cert=\"{}\";Subject=\"CN=x\"",
        escaped(cert_pem)
    );
    let resp = reqwest::Client::new()
        .request(
            reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
            format!("{}/envoy{path}", admit.base),
        )
        .header("x-forwarded-client-cert", xfcc)
        .header("x-forwarded-for", "203.0.113.9, 127.0.0.1")
        .send()
        .await
        .unwrap();
    Answer {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
    }
}

struct World {
    /// The server's data dir (its CA keys), held for the test's length.
    data: DataDir,
    _dir: tempfile::TempDir,
    dir: PathBuf,
    node: Node,
    api: Api,
    alice: Person,
}

async fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let data = DataDir::init_with_dsn(None);
    let node = data.serve("ca");
    let api = Api::login(&node).await;
    let alice = api
        .person_with_pa(&node, "alice", &grants(&[("db", "read")], 1_000_000, 0))
        .await;
    let mut trust = String::new();
    for ca in ["people", "root"] {
        let pem = reqwest::get(node.url(&format!("/api/v1/ca/{ca}")))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        trust.push_str(&pem);
    }
    std::fs::write(path.join("trust.pem"), trust).unwrap();
    std::fs::write(path.join("rules.txt"), RULES).unwrap();
    std::fs::write(path.join("alice.pem"), &alice.cert_pem).unwrap();
    World {
        data,
        _dir: dir,
        dir: path,
        node,
        api,
        alice,
    }
}

impl World {
    /// An agent certificate for alice: (PEM, serial).
    async fn agent(&self, id: &str) -> (String, String) {
        let (cert, serial, _) = self.agent_with_key(id).await;
        (cert, serial)
    }

    /// An agent certificate for alice with the key the CA generated:
    /// (certificate PEM, serial, key PEM).
    async fn agent_with_key(&self, id: &str) -> (String, String, String) {
        let body = Da::new(&self.alice, id, &[("db", "read")]).body(&self.alice);
        let (s, b) = self
            .api
            .post(&self.node.url("/api/v1/certs"), &body)
            .await
            .unwrap();
        assert_eq!(s, 200, "{b}\n{}", self.node.stderr_log());
        (
            b["cert_pem"].as_str().unwrap().to_string(),
            b["serial_number"].as_str().unwrap().to_string(),
            b["key_pem"].as_str().unwrap().to_string(),
        )
    }

    async fn revoke(&self, serial: &str) {
        let (s, b) = self
            .api
            .post(
                &self
                    .node
                    .url(&format!("/api/v1/cert/people/{serial}/revoke")),
                &json!({"reason": "keyCompromise"}),
            )
            .await
            .unwrap();
        assert_eq!(s, 200, "{b}");
    }
}

/// Waits until the service has a fresh revocation state.
async fn ready(admit: &Admit) {
    let start = Instant::now();
    loop {
        let s = reqwest::get(format!("{}/readyz", admit.base))
            .await
            .unwrap()
            .status();
        if s == 200 {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never ready: {}",
            admit.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Asks until `want` or `bound`; returns how long it took.
async fn until_status(admit: &Admit, cert: &str, want: u16, bound: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let a = nginx(admit, "GET", "/v1/rows/1", Some(cert), "127.0.0.1").await;
        if a.status == want {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < bound,
            "still {} ({}) after {bound:?}: {}",
            a.status,
            a.header("x-admit-reason"),
            admit.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admits_and_refuses_over_the_nginx_protocol_with_identity_headers() {
    let w = world().await;
    let (cert, serial) = w.agent("report-bot").await;
    let principals = w.dir.join("alice.pem");
    let admit = Admit::start(&w.dir, &w.node, Some(&principals));
    ready(&admit).await;

    let a = nginx(&admit, "GET", "/v1/rows/7?x=1", Some(&cert), "127.0.0.1").await;
    assert_eq!(a.status, 200, "{}", a.header("x-admit-reason"));
    assert_eq!(a.header("x-agent-id"), "report-bot");
    assert_eq!(a.header("x-agent-principal"), {
        let mut parts = w.alice.uid.rsplitn(2, ':');
        parts.next();
        parts.next().unwrap().to_string()
    });
    assert_eq!(a.header("x-agent-mode"), "authorized");
    assert_eq!(a.header("x-agent-capabilities"), "db:read");
    assert_eq!(a.header("x-agent-serial"), serial);

    // Another route, another method, no certificate, a public route.
    let a = nginx(&admit, "POST", "/v1/rows", Some(&cert), "127.0.0.1").await;
    assert_eq!(
        (a.status, a.header("x-admit-reason")),
        (403, "admit.capability_not_granted")
    );
    let a = nginx(&admit, "DELETE", "/v1/rows/1", Some(&cert), "127.0.0.1").await;
    assert_eq!(
        (a.status, a.header("x-admit-reason")),
        (403, "admit.no_route")
    );
    let a = nginx(&admit, "GET", "/v1/rows/1", None, "127.0.0.1").await;
    assert_eq!(
        (a.status, a.header("x-admit-reason")),
        (401, "admit.no_credential")
    );
    let a = nginx(&admit, "GET", "/healthz", None, "127.0.0.1").await;
    assert_eq!(a.status, 200);
    // A person's certificate is not an agent's.
    let a = nginx(
        &admit,
        "GET",
        "/v1/rows/1",
        Some(&w.alice.cert_pem),
        "127.0.0.1",
    )
    .await;
    assert_eq!(
        (a.status, a.header("x-admit-reason")),
        (403, "admit.not_an_agent")
    );

    // The decision log has every decision and no credential.
    let log = std::fs::read_to_string(w.dir.join("decisions.jsonl")).unwrap();
    assert!(log.lines().count() >= 6, "{log}");
    assert!(log.contains("\"admit.capability_not_granted\""));
    assert!(!log.contains("BEGIN CERTIFICATE") && !log.contains(&escaped(&cert)[..60]));
    assert!(!log.contains("x=1"), "queries stay out of the log");

    // The metrics count them by result and reason.
    let metrics = reqwest::get(format!("{}/metrics", admit.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            "warrant_admit_decisions_total{result=\"refuse\",reason=\"admit.no_route\"} 1"
        ),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_envoy_ext_authz_checks_with_allowed_headers() {
    let w = world().await;
    let (cert, _) = w.agent("envoy-bot").await;
    let admit = Admit::start(&w.dir, &w.node, None);
    ready(&admit).await;
    let a = envoy(&admit, "GET", "/v1/rows/3?q=1", &cert).await;
    assert_eq!(a.status, 200, "{}", a.header("x-admit-reason"));
    assert_eq!(a.header("x-agent-id"), "envoy-bot");
    let a = envoy(&admit, "POST", "/v1/rows", &cert).await;
    assert_eq!(
        (a.status, a.header("x-admit-reason")),
        (403, "admit.capability_not_granted")
    );
    let a = envoy(&admit, "GET", "/v1/rows/..%2Fadmin", &cert).await;
    assert_eq!(
        (a.status, a.header("x-admit-reason")),
        (403, "admit.path_invalid")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_within_two_seconds_of_revoking_the_agent_or_its_person() {
    let w = world().await;
    let (first, first_serial) = w.agent("bot-1").await;
    let (second, _) = w.agent("bot-2").await;
    let admit = Admit::start(&w.dir, &w.node, None);
    ready(&admit).await;
    until_status(&admit, &first, 200, Duration::from_secs(5)).await;
    until_status(&admit, &second, 200, Duration::from_secs(5)).await;

    w.revoke(&first_serial).await;
    let took = until_status(&admit, &first, 403, Duration::from_secs(2)).await;
    eprintln!("agent revocation seen after {took:?}");
    let a = nginx(&admit, "GET", "/v1/rows/1", Some(&first), "127.0.0.1").await;
    assert_eq!(a.header("x-admit-reason"), "admit.revoked");

    // Revoking the person cascades to every agent of hers.
    w.revoke(&w.alice.serial).await;
    let took = until_status(&admit, &second, 403, Duration::from_secs(2)).await;
    eprintln!("person revocation seen after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_a_bad_rule_file_whole_and_follows_a_good_one() {
    let w = world().await;
    let (cert, _) = w.agent("rules-bot").await;
    let admit = Admit::start(&w.dir, &w.node, None);
    ready(&admit).await;
    let rules = w.dir.join("rules.txt");
    // A broken file: refused, with its line, and the rules in force stay.
    std::fs::write(&rules, "GET /v1/rows/* db:read\nGET /broken\n").unwrap();
    let start = Instant::now();
    while !admit.stderr().contains("line 2") {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{}",
            admit.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let a = nginx(&admit, "POST", "/v1/rows", Some(&cert), "127.0.0.1").await;
    assert_eq!(a.header("x-admit-reason"), "admit.capability_not_granted");
    // A good one replaces them: POST /v1/rows now has no rule.
    std::fs::write(&rules, "GET /v1/rows/* db:read\n").unwrap();
    let start = Instant::now();
    loop {
        let a = nginx(&admit, "POST", "/v1/rows", Some(&cert), "127.0.0.1").await;
        if a.header("x-admit-reason") == "admit.no_route" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{}",
            admit.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_everything_but_public_routes_when_the_crl_cannot_be_fetched() {
    let w = world().await;
    let (cert, _) = w.agent("stale-bot").await;
    // A CRL URL where nothing answers: no list ever arrives.
    let admit = Admit::start_with_crl(&w.dir, "http://127.0.0.1:9/api/v1/crl/people", None);
    let a = nginx(&admit, "GET", "/v1/rows/1", Some(&cert), "127.0.0.1").await;
    assert_eq!(
        (a.status, a.header("x-admit-reason")),
        (403, "admit.revocation_stale")
    );
    let a = nginx(&admit, "GET", "/healthz", None, "127.0.0.1").await;
    assert_eq!(a.status, 200);
    let s = reqwest::get(format!("{}/readyz", admit.base))
        .await
        .unwrap()
        .status();
    assert_eq!(s, 503);
}

// ---- A real nginx in front of a static upstream ----------------------------

/// nginx runs as the Debian package installs it (`.ci/run` installs it);
/// missing locally, the test says so and passes; in CI it fails.
fn nginx_binary() -> Option<PathBuf> {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

struct Nginx {
    child: Child,
    base: String,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// nginx with mTLS (`ssl_verify_client optional`: a certificate that is
/// presented must chain to the bundle; none reaches admission, which
/// answers 401), `auth_request` to `admit`, and the identity headers passed
/// to an upstream that echoes them. The `location` blocks are the ones
/// docs/admission.md gives.
fn start_nginx(bin: &Path, dir: &Path, admit: &Admit) -> Nginx {
    let ok = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-subj", "/CN=localhost", "-days", "1", "-keyout"])
        .arg(dir.join("nginx.key"))
        .arg("-out")
        .arg(dir.join("nginx.crt"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success(), "openssl req");
    let (front, upstream) = (support::free_port(), support::free_port());
    let admit_addr = admit.base.trim_start_matches("http://");
    let d = dir.display();
    let conf = format!(
        r#"daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {d}/client_body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  upstream warrant_admit {{
    server {admit_addr};
    keepalive 64;
  }}
  server {{
    listen 127.0.0.1:{upstream};
    location / {{
      return 200 "agent=$http_x_agent_id principal=$http_x_agent_principal mode=$http_x_agent_mode caps=$http_x_agent_capabilities serial=$http_x_agent_serial\n";
    }}
  }}
  server {{
    listen 127.0.0.1:{front} ssl;
    ssl_certificate {d}/nginx.crt;
    ssl_certificate_key {d}/nginx.key;
    ssl_client_certificate {d}/trust.pem;
    ssl_verify_client optional;
    ssl_verify_depth 2;

    location = /_admit {{
      internal;
      proxy_pass http://warrant_admit/nginx;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_set_header X-Client-Cert $ssl_client_escaped_cert;
      proxy_set_header X-Original-Method $request_method;
      proxy_set_header X-Original-URI $request_uri;
      proxy_set_header X-Real-IP $remote_addr;
    }}
    location / {{
      auth_request /_admit;
      auth_request_set $agent_id $upstream_http_x_agent_id;
      auth_request_set $agent_principal $upstream_http_x_agent_principal;
      auth_request_set $agent_mode $upstream_http_x_agent_mode;
      auth_request_set $agent_capabilities $upstream_http_x_agent_capabilities;
      auth_request_set $agent_serial $upstream_http_x_agent_serial;
      proxy_set_header X-Agent-Id $agent_id;
      proxy_set_header X-Agent-Principal $agent_principal;
      proxy_set_header X-Agent-Mode $agent_mode;
      proxy_set_header X-Agent-Capabilities $agent_capabilities;
      proxy_set_header X-Agent-Serial $agent_serial;
      proxy_pass http://127.0.0.1:{upstream};
    }}
  }}
}}
"#
    );
    let conf_path = dir.join("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let child = Command::new(bin)
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(&conf_path)
        .arg("-e")
        .arg(dir.join("nginx-startup.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut nginx = Nginx {
        child,
        base: format!("https://127.0.0.1:{front}"),
    };
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", front)).is_err() {
        if let Ok(Some(status)) = nginx.child.try_wait() {
            panic!(
                "nginx exited ({status}): {}",
                std::fs::read_to_string(dir.join("nginx-startup.log")).unwrap_or_default()
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "nginx did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    nginx
}

/// A client of nginx presenting `identity` (certificate and key PEM), or
/// none. nginx's own certificate is self-signed for the test.
fn client(identity: Option<(&str, &str)>) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .tls_danger_accept_invalid_certs(true);
    if let Some((cert, key)) = identity {
        b = b.identity(reqwest::Identity::from_pem(format!("{key}{cert}").as_bytes()).unwrap());
    }
    b.build().unwrap()
}

async fn via_nginx(c: &reqwest::Client, nginx: &Nginx, method: &str, path: &str) -> (u16, String) {
    let resp = c
        .request(
            reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
            format!("{}{path}", nginx.base),
        )
        .send()
        .await
        .unwrap();
    (
        resp.status().as_u16(),
        resp.text().await.unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_admits_refuses_and_follows_revocation_with_auth_request() {
    let Some(bin) = nginx_binary() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "nginx is required in CI (Debian package `nginx`; .ci/run installs it)"
        );
        eprintln!("skipped: nginx is not installed");
        return;
    };
    let w = world().await;
    let (cert, serial, key) = w.agent_with_key("nginx-bot").await;
    let principals = w.dir.join("alice.pem");
    let admit = Admit::start(&w.dir, &w.node, Some(&principals));
    ready(&admit).await;
    let nginx = start_nginx(&bin, &w.dir, &admit);
    let agent = client(Some((&cert, &key)));

    // Admitted, and the upstream receives the identity.
    let (status, body) = via_nginx(&agent, &nginx, "GET", "/v1/rows/1?limit=2").await;
    assert_eq!(status, 200, "{body}: {}", admit.stderr());
    assert!(body.contains("agent=nginx-bot "), "{body}");
    assert!(body.contains("mode=authorized caps=db:read"), "{body}");
    assert!(body.contains(&format!("serial={serial}")), "{body}");
    let principal = w.alice.uid.rsplit_once(':').unwrap().0.to_string();
    assert!(body.contains(&format!("principal={principal} ")), "{body}");

    // Another route, another method: 403.
    assert_eq!(via_nginx(&agent, &nginx, "POST", "/v1/rows").await.0, 403);
    assert_eq!(via_nginx(&agent, &nginx, "GET", "/v1/other").await.0, 403);
    // No certificate: 401; a public route needs none.
    let anonymous = client(None);
    assert_eq!(
        via_nginx(&anonymous, &nginx, "GET", "/v1/rows/1").await.0,
        401
    );
    assert_eq!(
        via_nginx(&anonymous, &nginx, "GET", "/healthz").await.0,
        200
    );
    // A person's certificate is not an agent's: 403.
    let person = client(Some((&w.alice.cert_pem, &w.alice.key_pem)));
    assert_eq!(via_nginx(&person, &nginx, "GET", "/v1/rows/1").await.0, 403);

    // A certificate of a foreign CA never gets through.
    let other = world().await;
    let (foreign, _, foreign_key) = other.agent_with_key("nginx-bot").await;
    let stranger = client(Some((&foreign, &foreign_key)));
    let refused = via_nginx(&stranger, &nginx, "GET", "/v1/rows/1").await.0;
    assert!(refused == 400 || refused == 403, "{refused}");

    // Revoked: refused within 2 s.
    w.revoke(&serial).await;
    let start = Instant::now();
    loop {
        let (status, _) = via_nginx(&agent, &nginx, "GET", "/v1/rows/1").await;
        if status == 403 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "still {status} 2 s after the revocation"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("nginx: revocation refused after {:?}", start.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_a_subrequest_without_the_original_request_and_a_bad_start() {
    let w = world().await;
    let admit = Admit::start(&w.dir, &w.node, None);
    ready(&admit).await;
    // nginx not configured to send the original method and URI: refused,
    // never guessed.
    let resp = reqwest::Client::new()
        .get(format!("{}/nginx", admit.base))
        .header("X-Original-Method", "GET")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    assert_eq!(
        resp.headers()["x-admit-reason"].to_str().unwrap(),
        "admit.proxy_misconfigured"
    );
    // A trust bundle without its root, or a broken rule file: no start.
    std::fs::write(w.dir.join("people-only.pem"), {
        let pem = std::fs::read_to_string(w.dir.join("trust.pem")).unwrap();
        let end = "-----END CERTIFICATE-----";
        pem[..pem.find(end).unwrap() + end.len()].to_string()
    })
    .unwrap();
    std::fs::write(w.dir.join("bad-rules.txt"), "GET /a\n").unwrap();
    for (trust, rules, names) in [
        ("people-only.pem", "rules.txt", "--trust"),
        ("trust.pem", "bad-rules.txt", "line 1"),
    ] {
        let out = Command::new(warrant_bin())
            .args(["admit", "--listen", "127.0.0.1:0", "--trust"])
            .arg(w.dir.join(trust))
            .arg("--rules")
            .arg(w.dir.join(rules))
            .args(["--crl-url", &w.node.url("/api/v1/crl/people")])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{trust} {rules}");
        assert!(err.contains(names), "{err}");
    }
}

// ---- Expiry, delegation mode and constraints through nginx ----------------
//
// nginx answers a refusal with its own 401/403 page: `auth_request` passes
// no header of the subrequest's answer to the client (`x-admit-reason`
// included) unless configured to, and the configuration under test is the
// documented one. The reason of each request is read where `warrant admit`
// records it, its decision log (written before it answers nginx); each
// request below has a path of its own, so its line is found by path.

/// nginx for the tests below, or `None` with a note when it is not
/// installed outside CI; in CI a missing nginx fails, as above.
fn nginx_or_skip() -> Option<PathBuf> {
    let bin = nginx_binary();
    if bin.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "nginx is required in CI (Debian package `nginx`; .ci/run installs it)"
        );
        eprintln!("skipped: nginx is not installed");
    }
    bin
}

/// `warrant admit` with step 6 on (alice's and `more` persons' certificates
/// as `--principals`) and `extra` flags, once its revocation state is
/// fresh, and nginx in front of it.
async fn admit_behind_nginx(
    bin: &Path,
    w: &World,
    more: &[&Person],
    extra: &[&str],
) -> (Admit, Nginx) {
    let mut pem = String::new();
    for p in std::iter::once(&w.alice).chain(more.iter().copied()) {
        pem.push_str(p.cert_pem.trim_end());
        pem.push('\n');
    }
    let principals = w.dir.join("principals.pem");
    std::fs::write(&principals, pem).unwrap();
    let admit = Admit::start_with_args(
        &w.dir,
        &w.node.url("/api/v1/crl/people"),
        Some(&principals),
        extra,
    );
    ready(&admit).await;
    let nginx = start_nginx(bin, &w.dir, &admit);
    (admit, nginx)
}

/// Every decision `warrant admit` logged so far, oldest first.
fn decisions(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("decisions.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The one decision logged for `path`: (result, reason).
fn decision_for(dir: &Path, path: &str) -> (String, String) {
    let found: Vec<_> = decisions(dir)
        .into_iter()
        .filter(|d| d["path"] == path)
        .collect();
    assert_eq!(found.len(), 1, "decisions for {path}: {found:?}");
    let text = |k: &str| found[0][k].as_str().unwrap_or_default().to_string();
    (text("result"), text("reason"))
}

fn refused(reason: &str) -> (String, String) {
    ("refuse".to_string(), reason.to_string())
}

fn admitted() -> (String, String) {
    ("admit".to_string(), "admitted".to_string())
}

/// The constraint scheme of aic.md (constraints are capabilities of it).
const CONSTRAINT_SCHEME: &str = "varwof/constraint-v1";

/// `allowed-cidr`: its parameters are a JSON array of CIDRs.
fn allowed_cidr(cidrs: &[&str]) -> aic::Capability {
    let params = serde_json::to_vec(cidrs).unwrap();
    aic::Capability::new(CONSTRAINT_SCHEME, "allowed-cidr", Some(&params))
}

/// The TBS of `da` with `constraints` (which `common::Da` does not carry)
/// and `person`'s signature over it, as `common::Da::body` builds them.
fn sign_da(
    person: &Person,
    da: &Da,
    constraints: &[aic::Capability],
) -> (aic::DelegationAuthTbs, aic::AlgorithmIdentifier, Vec<u8>) {
    let tbs = aic::DelegationRequest {
        agent_id: da.agent_id.clone(),
        principal_uid: aic::PrincipalUid::parse(&da.uid).unwrap(),
        reason: aic::Reason::new("task", "nightly report"),
        capabilities: da
            .caps
            .iter()
            .map(|(s, i)| aic::Capability::new(s, i, None))
            .collect(),
        delegation_mode: aic::DelegationMode::from_i64(da.mode, "mode").unwrap(),
        constraints: constraints.to_vec(),
        requested_lifetime: da.lifetime,
        timestamp: da.timestamp,
        nonce: da.nonce,
        agent_spki_der: None,
    }
    .tbs()
    .unwrap();
    let (alg, sig) = aic::sign_delegation(
        &tbs.to_der(),
        &person.key_der,
        aic::DaSigningAlgorithm::EcdsaP256Sha256,
    )
    .unwrap();
    (tbs, alg, sig)
}

/// An agent certificate the CA issued.
struct Issued {
    cert_pem: String,
    key_pem: String,
    serial: String,
    /// Unix seconds.
    not_after: i64,
}

impl World {
    /// `POST /api/v1/certs` for `da`, signed by `person`, with `constraints`
    /// (`authorization_constraints`): the CA's answer.
    async fn issue(
        &self,
        person: &Person,
        da: &Da,
        constraints: &[aic::Capability],
    ) -> (u16, serde_json::Value) {
        let (_, _, sig) = sign_da(person, da, constraints);
        let mut body = da.body(person);
        body["user_auth_signature"] = json!(STANDARD.encode(sig));
        body["authorization_constraints"] = constraints
            .iter()
            .map(|c| {
                json!({
                    "scheme_id": c.scheme_id,
                    "capability_id": c.capability_id,
                    "parameters": c.parameters.as_ref().map(|p| STANDARD.encode(p)),
                })
            })
            .collect();
        self.api
            .post(&self.node.url("/api/v1/certs"), &body)
            .await
            .unwrap()
    }

    /// [`World::issue`], which must succeed.
    async fn issue_ok(&self, person: &Person, da: &Da, constraints: &[aic::Capability]) -> Issued {
        let (s, b) = self.issue(person, da, constraints).await;
        assert_eq!(s, 200, "{b}\n{}", self.node.stderr_log());
        let text = |k: &str| b[k].as_str().unwrap().to_string();
        Issued {
            cert_pem: text("cert_pem"),
            key_pem: text("key_pem"),
            serial: text("serial_number"),
            not_after: aic::time::parse_rfc3339(&text("not_after")).unwrap(),
        }
    }
}

/// An extension value of a certificate (PEM).
fn extension(cert_pem: &str, oid: &warrant_ca::ObjectIdentifier) -> Vec<u8> {
    let exts = warrant_ca::certificate_extensions(cert_pem.as_bytes()).unwrap();
    warrant_ca::find_extension(&exts, oid)
        .unwrap_or_else(|| panic!("no extension {oid}"))
        .value
        .clone()
}

/// An agent certificate for `da` (signed by alice) signed with the People
/// CA's own key from the server's data dir, carrying `pa_der` as its PA:
/// what the CA would issue were its policy checks skipped. (certificate
/// PEM, key PEM.)
fn issue_outside_the_server(w: &World, da: &Da, pa_der: Vec<u8>) -> (String, String) {
    let hierarchy = warrant_ca::Hierarchy::load(&w.data.path, None).unwrap();
    let people = hierarchy.ca("people").unwrap();
    let (tbs, alg, sig) = sign_da(&w.alice, da, &[]);
    // The extensions the server writes (`issuance::agent`).
    let depth = aic::DelegationDepthControl {
        chain_depth: 0,
        max_depth: 1,
    };
    let aic_der = tbs.into_aic(alg, sig, vec![depth.to_ext_field()]).to_der();
    let key = warrant_ca::generate_key("ecdsa-p256".parse().unwrap()).unwrap();
    let subject = warrant_ca::Subject::for_request(
        Some(&format!("/OU=gateway:reader/CN={}", da.agent_id)),
        &da.agent_id,
        "Warrant",
        "US",
    )
    .unwrap();
    let now = std::time::SystemTime::now();
    let cert = warrant_ca::issue_leaf(
        people,
        &warrant_ca::LeafSpec {
            profile: warrant_ca::Profile::AgentProxy,
            subject: &subject,
            san: &[],
            spki_der: &key.spki_der,
            not_before: now,
            not_after: now + Duration::from_secs(600),
            extensions: &[
                warrant_ca::ExtraExtension::non_critical(warrant_ca::oids::AIC_EXTENSION, aic_der),
                warrant_ca::ExtraExtension::non_critical(warrant_ca::oids::PA_EXTENSION, pa_der),
            ],
            urls: None,
        },
    )
    .unwrap();
    (cert.pem, key.pkcs8_pem.to_string())
}

/// A certificate that expires while its TLS connection to nginx stays
/// open. nginx (`ssl_verify_client optional`, as docs/admission.md has
/// it) verifies a client certificate once, in the handshake, against its
/// own clock with no skew: a new connection presenting the expired
/// certificate gets nginx's own 400 ("The SSL certificate error") and
/// admission is never asked. A request on a keep-alive connection opened
/// before the expiry reaches admission with the certificate, which refuses
/// it with `admit.expired` (step 2). `--clock-skew-secs 0`, so the test
/// waits only the certificate's few seconds (the default skew, 60 s,
/// would admit it for another minute).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_an_expired_agent_certificate_through_nginx() {
    let Some(bin) = nginx_or_skip() else {
        return;
    };
    let w = world().await;
    let (admit, nginx) = admit_behind_nginx(&bin, &w, &[], &["--clock-skew-secs", "0"]).await;
    // The DA's requested lifetime bounds the certificate's (ca.md §2).
    let mut da = Da::new(&w.alice, "brief-bot", &[("db", "read")]);
    da.lifetime = 5;
    let issued = w.issue_ok(&w.alice, &da, &[]).await;
    let left = issued.not_after - common::now();
    assert!((0..=5).contains(&left), "NotAfter is {left} s away");

    let agent = client(Some((&issued.cert_pem, &issued.key_pem)));
    let (status, body) = via_nginx(&agent, &nginx, "GET", "/v1/rows/1").await;
    assert_eq!(status, 200, "{body}: {}", admit.stderr());
    assert_eq!(decision_for(&w.dir, "/v1/rows/1"), admitted());

    // Past NotAfter (whole seconds), on the same connection.
    let expired =
        std::time::UNIX_EPOCH + Duration::from_millis(issued.not_after as u64 * 1000 + 1500);
    if let Ok(wait) = expired.duration_since(std::time::SystemTime::now()) {
        tokio::time::sleep(wait).await;
    }
    let (status, body) = via_nginx(&agent, &nginx, "GET", "/v1/rows/2").await;
    assert_eq!(
        status, 403,
        "admission's refusal on the open connection (400 would be nginx's, on a new one): {body}"
    );
    assert_eq!(decision_for(&w.dir, "/v1/rows/2"), refused("admit.expired"));

    // A new connection: nginx's handshake verification refuses it first.
    let asked = decisions(&w.dir).len();
    let fresh = client(Some((&issued.cert_pem, &issued.key_pem)));
    let (status, body) = via_nginx(&fresh, &nginx, "GET", "/v1/rows/3").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("SSL certificate error"), "{body}");
    assert_eq!(decisions(&w.dir).len(), asked, "admission was asked");
}

/// Representative mode for a person whose PA has `allowedMode = 1` and
/// grants db:read and db:write, delegating db:read only: admitted through
/// nginx, and the upstream sees `mode=representative` with db:read alone.
/// The effective capabilities are P ∩ C (admit.md §2 step 8), not the
/// person's grants: db:write, granted to the person but not delegated, is
/// refused. (The real CA issues only capabilities its grants cover, ca.md
/// §4, so C ⊆ P and P ∩ C = C for any certificate it issues; a C reaching
/// outside P cannot come from it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admits_a_representative_agent_through_nginx_with_only_its_delegated_capabilities() {
    let Some(bin) = nginx_or_skip() else {
        return;
    };
    let w = world().await;
    let bob = w
        .api
        .person_with_pa(
            &w.node,
            "bob",
            &grants(&[("db", "read"), ("db", "write")], 1_000_000, 1),
        )
        .await;
    let (admit, nginx) = admit_behind_nginx(&bin, &w, &[&bob], &[]).await;
    let mut da = Da::new(&bob, "stand-in", &[("db", "read")]);
    da.mode = 1;
    let issued = w.issue_ok(&bob, &da, &[]).await;
    let agent = client(Some((&issued.cert_pem, &issued.key_pem)));

    let (status, body) = via_nginx(&agent, &nginx, "GET", "/v1/rows/1").await;
    assert_eq!(status, 200, "{body}: {}", admit.stderr());
    let principal = bob.uid.rsplit_once(':').unwrap().0;
    assert!(body.contains("agent=stand-in "), "{body}");
    assert!(body.contains(&format!("principal={principal} ")), "{body}");
    assert!(
        body.contains("mode=representative caps=db:read serial="),
        "{body}"
    );
    assert!(
        body.contains(&format!("serial={}", issued.serial)),
        "{body}"
    );
    assert_eq!(decision_for(&w.dir, "/v1/rows/1"), admitted());

    let (status, _) = via_nginx(&agent, &nginx, "POST", "/v1/rows").await;
    assert_eq!(status, 403);
    assert_eq!(
        decision_for(&w.dir, "/v1/rows"),
        refused("admit.capability_not_granted")
    );
}

/// Representative mode for alice, whose PA leaves `allowedMode` at 0.
/// The real CA refuses to issue it (`api.representative_policy_denied`),
/// and no body PA can widen the policy, so no certificate the server
/// issues is one. The closest real artifact: the same delegation, signed
/// by alice's real key, in a certificate signed by the real People CA key
/// with alice's own PA, issued outside the server's policy (a CA that
/// skipped the check, or a key used elsewhere). nginx lets it through (it
/// chains), and admission refuses it with `admit.representative_denied`
/// (step 8). A control certificate made the same way in authorized mode is
/// admitted, so the refusal is the mode's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_a_representative_agent_whose_person_pa_lacks_allowed_mode_through_nginx() {
    let Some(bin) = nginx_or_skip() else {
        return;
    };
    let w = world().await;
    let (admit, nginx) = admit_behind_nginx(&bin, &w, &[], &[]).await;
    let mut da = Da::new(&w.alice, "stand-in", &[("db", "read")]);
    da.mode = 1;
    let (s, b) = w.issue(&w.alice, &da, &[]).await;
    assert_eq!(
        (s, b["message"].as_str()),
        (403, Some("api.representative_policy_denied")),
        "{b}"
    );

    let pa_der = extension(&w.alice.cert_pem, &warrant_ca::oids::PA_EXTENSION);
    let pa = aic::PrincipalAuthorization::from_der(&pa_der).unwrap();
    assert_eq!(
        pa.delegation_policy.as_ref().map(|p| p.allowed_mode),
        Some(0),
        "{pa:?}"
    );
    let (cert, key) = issue_outside_the_server(&w, &da, pa_der.clone());
    let agent = client(Some((&cert, &key)));
    let (status, body) = via_nginx(&agent, &nginx, "GET", "/v1/rows/1").await;
    assert_eq!(status, 403, "{body}: {}", admit.stderr());
    assert_eq!(
        decision_for(&w.dir, "/v1/rows/1"),
        refused("admit.representative_denied")
    );

    let mut control = Da::new(&w.alice, "stand-in", &[("db", "read")]);
    control.mode = 0;
    let (cert, key) = issue_outside_the_server(&w, &control, pa_der);
    let agent = client(Some((&cert, &key)));
    let (status, body) = via_nginx(&agent, &nginx, "GET", "/v1/rows/2").await;
    assert_eq!(status, 200, "{body}: {}", admit.stderr());
    assert!(body.contains("mode=authorized caps=db:read "), "{body}");
}

/// An `allowed-cidr` of 127.0.0.0/8 in the DA (the CA carries it into the
/// AIC): nginx reports the client at 127.0.0.1 (`X-Real-IP
/// $remote_addr`), inside it, and the agent is admitted (step 7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admits_an_agent_whose_allowed_cidr_holds_the_address_nginx_reports() {
    let Some(bin) = nginx_or_skip() else {
        return;
    };
    let w = world().await;
    let (admit, nginx) = admit_behind_nginx(&bin, &w, &[], &[]).await;
    let da = Da::new(&w.alice, "local-bot", &[("db", "read")]);
    let constraint = allowed_cidr(&["127.0.0.0/8"]);
    let issued = w
        .issue_ok(&w.alice, &da, std::slice::from_ref(&constraint))
        .await;
    let aic = aic::Aic::from_der(&extension(
        &issued.cert_pem,
        &warrant_ca::oids::AIC_EXTENSION,
    ))
    .unwrap();
    assert_eq!(aic.constraints, [constraint]);

    let agent = client(Some((&issued.cert_pem, &issued.key_pem)));
    let (status, body) = via_nginx(&agent, &nginx, "GET", "/v1/rows/1").await;
    assert_eq!(status, 200, "{body}: {}", admit.stderr());
    assert!(body.contains("agent=local-bot "), "{body}");
    assert_eq!(decision_for(&w.dir, "/v1/rows/1"), admitted());
}

/// An `allowed-cidr` of 10.0.0.0/8: the address nginx reports, 127.0.0.1,
/// is outside it, and admission refuses with `admit.constraint_denied`
/// (step 7) although the route and capability would admit the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_an_agent_whose_allowed_cidr_excludes_the_address_nginx_reports() {
    let Some(bin) = nginx_or_skip() else {
        return;
    };
    let w = world().await;
    let (admit, nginx) = admit_behind_nginx(&bin, &w, &[], &[]).await;
    let da = Da::new(&w.alice, "office-bot", &[("db", "read")]);
    let issued = w
        .issue_ok(&w.alice, &da, &[allowed_cidr(&["10.0.0.0/8"])])
        .await;
    let agent = client(Some((&issued.cert_pem, &issued.key_pem)));
    let (status, body) = via_nginx(&agent, &nginx, "GET", "/v1/rows/1").await;
    assert_eq!(status, 403, "{body}: {}", admit.stderr());
    assert_eq!(
        decision_for(&w.dir, "/v1/rows/1"),
        refused("admit.constraint_denied")
    );
}

/// An agent's own P-256 key, as a JWS signer and its SPKI.
fn agent_jws_key() -> (aic::jwt::JwsSigningKey, Vec<u8>) {
    let pkcs8 = aic::generate_signing_key(aic::DaSigningAlgorithm::EcdsaP256Sha256).unwrap();
    let spki = aic::spki_from_pkcs8(&pkcs8).unwrap();
    let key = aic::jwt::JwsSigningKey {
        alg: aic::jwt::JwsAlgorithm::ES256,
        pkcs8_der: pkcs8,
        kid: None,
    };
    (key, spki)
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A DPoP-bound AIC-JWT from the real `/oauth/token`: alice delegates
/// `db:read` to `agent_id` in a DA JWT, and the agent redeems it with a
/// proof of its key.
async fn dpop_token(
    w: &World,
    agent_id: &str,
    agent: &(aic::jwt::JwsSigningKey, Vec<u8>),
) -> String {
    let pem = aic::cert::pem_decode(&w.alice.cert_pem, "CERTIFICATE").unwrap();
    let alice_spki = aic::cert::CertificateView::from_der(&pem)
        .unwrap()
        .subject_spki_der;
    let da = aic::jwt::DaJwtRequest {
        principal: aic::PrincipalUid::parse(&w.alice.uid).unwrap(),
        principal_spki_der: alice_spki,
        key_hash_alg: aic::jwt::KeyHashAlg::Sha256,
        agent_id: agent_id.into(),
        audience: vec![],
        reason: aic::jwt::ReasonClaim {
            code: "task".into(),
            desc: "admission over a token".into(),
        },
        capabilities: vec![aic::jwt::CapabilityClaim {
            scheme: "db".into(),
            id: "read".into(),
            params: None,
        }],
        delegation_mode: aic::DelegationMode::Authorized,
        constraints: vec![],
        requested_lifetime: 600,
        ts: unix_now(),
        nonce: aic::crypto::sha256(agent_id.as_bytes()),
        agent_spki_der: None,
    };
    let alice_key = aic::jwt::JwsSigningKey {
        alg: aic::jwt::JwsAlgorithm::ES256,
        pkcs8_der: w.alice.key_der.clone(),
        kid: None,
    };
    let da_jwt = aic::jwt::issue_da_jwt(&da, &alice_key).unwrap();
    let endpoint = w.node.url("/oauth/token");
    let proof =
        aic::jwt::dpop::sign_dpop_proof(&agent.0, &agent.1, "POST", &endpoint, unix_now(), "t1")
            .unwrap();
    let enc = |v: &str| {
        percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC).to_string()
    };
    let body = format!(
        "grant_type={}&assertion={}&principal_cert={}",
        enc("urn:ietf:params:oauth:grant-type:jwt-bearer"),
        enc(&da_jwt),
        enc(&w.alice.cert_pem)
    );
    let resp = reqwest::Client::new()
        .post(&endpoint)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("DPoP", proof)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let b: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(status, 200, "{b}");
    assert_eq!(b["token_type"], "DPoP", "{b}");
    b["access_token"].as_str().unwrap().to_string()
}

/// An nginx subrequest for a request that presents `authorization` (and a
/// `DPoP` proof), no client certificate, with the absolute URL nginx is
/// configured to send.
async fn nginx_with_token(
    admit: &Admit,
    method: &str,
    path: &str,
    authorization: &str,
    proof: Option<&str>,
) -> Answer {
    let mut req = reqwest::Client::new()
        .get(format!("{}/nginx", admit.base))
        .header("X-Original-Method", method)
        .header("X-Original-URI", path)
        .header("X-Original-URL", format!("https://api.test{path}"))
        .header("X-Real-IP", "127.0.0.1")
        .header("X-Client-Cert", "")
        .header("Authorization", authorization);
    if let Some(p) = proof {
        req = req.header("DPoP", p);
    }
    let resp = req.send().await.unwrap();
    Answer {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admits_a_dpop_token_from_oauth_token_and_rejects_its_replay_and_other_uris() {
    let w = world().await;
    let jwks = w.node.url("/.well-known/jwks.json");
    let admit = Admit::start_with_args(
        &w.dir,
        &w.node.url("/api/v1/crl/people"),
        Some(&w.dir.join("alice.pem")),
        &["--jwks", &jwks],
    );
    ready(&admit).await;
    let agent = agent_jws_key();
    let token = dpop_token(&w, "token-bot", &agent).await;
    let proof_for = |method: &str, path: &str, jti: &str| {
        aic::jwt::dpop::sign_dpop_proof_for_token(
            &agent.0,
            &agent.1,
            method,
            &format!("https://api.test{path}"),
            unix_now(),
            jti,
            &token,
        )
        .unwrap()
    };
    let dpop = format!("DPoP {token}");

    // The key set is fetched in the background: admitted once it is in.
    let start = Instant::now();
    let (proof, ok) = loop {
        let jti = format!("first-{}", start.elapsed().as_millis());
        let proof = proof_for("GET", "/v1/rows/1", &jti);
        let a = nginx_with_token(&admit, "GET", "/v1/rows/1", &dpop, Some(&proof)).await;
        if a.status == 200 || start.elapsed() > Duration::from_secs(10) {
            break (proof, a);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(ok.status, 200, "{}", admit.stderr());
    assert_eq!(ok.header("x-agent-id"), "token-bot");
    assert_eq!(ok.header("x-agent-capabilities"), "db:read");
    assert!(!ok.header("x-agent-token-id").is_empty());
    assert!(ok.headers.get("x-agent-serial").is_none());

    let replay = nginx_with_token(&admit, "GET", "/v1/rows/1", &dpop, Some(&proof)).await;
    assert_eq!(
        (replay.status, replay.header("x-admit-reason")),
        (401, "admit.dpop_replayed")
    );
    let elsewhere = proof_for("GET", "/v1/rows/2", "elsewhere");
    let a = nginx_with_token(&admit, "GET", "/v1/rows/1", &dpop, Some(&elsewhere)).await;
    assert_eq!(
        (a.status, a.header("x-admit-reason")),
        (401, "admit.dpop_proof_invalid")
    );
    let bearer = nginx_with_token(
        &admit,
        "GET",
        "/v1/rows/1",
        &format!("Bearer {token}"),
        None,
    )
    .await;
    assert_eq!(
        (bearer.status, bearer.header("x-admit-reason")),
        (401, "admit.token_binding_mismatch")
    );
    let write = proof_for("POST", "/v1/rows", "write");
    let a = nginx_with_token(&admit, "POST", "/v1/rows", &dpop, Some(&write)).await;
    assert_eq!(
        (a.status, a.header("x-admit-reason")),
        (403, "admit.capability_not_granted")
    );
    // Envoy's check: the proof names the original Host and path.
    let envoy_proof = proof_for("GET", "/v1/rows/5", "via-envoy");
    let resp = reqwest::Client::new()
        .get(format!("{}/envoy/v1/rows/5", admit.base))
        .header("host", "api.test")
        .header("x-forwarded-proto", "https")
        .header("authorization", &dpop)
        .header("dpop", &envoy_proof)
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status(),
        200,
        "{:?}",
        resp.headers().get("x-admit-reason")
    );
    assert_eq!(resp.headers()["x-agent-id"], "token-bot");
    // The person's revocation reaches her tokens too.
    w.revoke(&w.alice.serial).await;
    let start = Instant::now();
    loop {
        let jti = format!("after-{}", start.elapsed().as_millis());
        let proof = proof_for("GET", "/v1/rows/1", &jti);
        let a = nginx_with_token(&admit, "GET", "/v1/rows/1", &dpop, Some(&proof)).await;
        if a.header("x-admit-reason") == "admit.principal_revoked" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "still {} {}",
            a.status,
            a.header("x-admit-reason")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // No credential material in the decision log.
    let log = std::fs::read_to_string(w.dir.join("decisions.jsonl")).unwrap();
    assert!(!log.contains(&token[..40]));
}
