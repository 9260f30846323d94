//! `warrant admit` as a real process beside a real `warrant serve`
//! (SQLite): the nginx `auth_request` and Envoy `ext_authz` protocols
//! driven by a raw HTTP client, revocation picked up from Warrant's CRL,
//! and the rule file followed.

#[path = "../../warrant-server/tests/common/mod.rs"]
mod common;
mod support;

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
    /// Holds the server's data dir for the test's length.
    _data: DataDir,
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
        _data: data,
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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
    let (front, upstream) = (free_port(), free_port());
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
      proxy_pass http://{admit_addr}/nginx;
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
