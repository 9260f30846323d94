//! See `main.rs`. Issue #29 items 2 (CSRF) and 6 (HTTP limits): a page on
//! another site riding the session cookie, and clients that hold connections
//! without finishing a request.

use crate::common::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use warrant_server::ErrorKey;

const EVIL: &str = "https://evil.example";

/// A raw request to `srv` with exactly these headers (reqwest adds only
/// `Host` and `Content-Length`).
async fn send(
    srv: &TestServer,
    method: reqwest::Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, Value) {
    let mut req = srv.http.request(method, srv.url(path));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(body) = body {
        req = req.body(body.to_string());
    }
    decode(req.send().await.unwrap()).await
}

fn cookie(srv: &TestServer) -> String {
    format!("pki_token={}", srv.token)
}

async fn usernames(srv: &TestServer) -> Vec<String> {
    let (s, b) = srv.get("/api/v1/users").await;
    assert_eq!(s, 200, "{b}");
    b["users"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["username"].as_str().unwrap().to_string())
        .collect()
}

fn new_admin(name: &str) -> Value {
    json!({"username": name, "password": "password-123", "role": "admin"})
}

#[tokio::test]
async fn rejects_cross_site_text_plain_post() {
    let srv = TestServer::start().await;
    let c = cookie(&srv);
    // The attack as a browser sends it: a simple request (no preflight)
    // from a page on another site, the session cookie attached.
    let r = send(
        &srv,
        reqwest::Method::POST,
        "/api/v1/users",
        &[
            ("content-type", "text/plain"),
            ("origin", EVIL),
            ("cookie", &c),
        ],
        Some(&new_admin("mallory")),
    )
    .await;
    assert_error(&r, ErrorKey::UnsupportedMediaType);
    // The other two content types a page may send without a preflight.
    for ct in [
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let r = send(
            &srv,
            reqwest::Method::POST,
            "/api/v1/users",
            &[("content-type", ct), ("origin", EVIL), ("cookie", &c)],
            Some(&new_admin("mallory")),
        )
        .await;
        assert_error(&r, ErrorKey::UnsupportedMediaType);
    }
    assert!(!usernames(&srv).await.contains(&"mallory".to_string()));
    srv.stop().await;
}

#[tokio::test]
async fn rejects_json_body_without_json_content_type() {
    let srv = TestServer::start().await;
    let bearer = format!("Bearer {}", srv.token);
    // Whoever the caller is: a bearer token and no Content-Type at all.
    let r = send(
        &srv,
        reqwest::Method::POST,
        "/api/v1/users",
        &[("authorization", &bearer)],
        Some(&new_admin("nobody")),
    )
    .await;
    assert_error(&r, ErrorKey::UnsupportedMediaType);
    // Login reads JSON too.
    let r = send(
        &srv,
        reqwest::Method::POST,
        "/api/v1/users/login",
        &[("content-type", "text/plain")],
        Some(&json!({"username": "admin", "password": ADMIN_PASSWORD})),
    )
    .await;
    assert_error(&r, ErrorKey::UnsupportedMediaType);
    // Parameters and case are allowed.
    let r = send(
        &srv,
        reqwest::Method::POST,
        "/api/v1/users",
        &[
            ("authorization", &bearer),
            ("content-type", "Application/JSON; charset=utf-8"),
        ],
        Some(&new_admin("somebody")),
    )
    .await;
    assert_eq!(r.0, 200, "{}", r.1);
    assert!(!usernames(&srv).await.contains(&"nobody".to_string()));
    srv.stop().await;
}

#[tokio::test]
async fn rejects_cookie_auth_from_foreign_origin() {
    let srv = TestServer::start().await;
    let c = cookie(&srv);
    let json_ct = ("content-type", "application/json");
    let r = send(
        &srv,
        reqwest::Method::POST,
        "/api/v1/users",
        &[json_ct, ("origin", EVIL), ("cookie", &c)],
        Some(&new_admin("mallory")),
    )
    .await;
    assert_error(&r, ErrorKey::Forbidden);
    let detail = r.1["detail"].as_str().unwrap();
    assert!(detail.contains("Origin"), "{detail}");
    // Without an Origin, or only a cross-site Sec-Fetch-Site, the cookie
    // proves nothing about the page that sent it.
    for headers in [
        vec![json_ct, ("cookie", c.as_str())],
        vec![
            json_ct,
            ("cookie", c.as_str()),
            ("sec-fetch-site", "cross-site"),
        ],
        vec![
            json_ct,
            ("cookie", c.as_str()),
            ("origin", "null"),
            ("sec-fetch-site", "same-site"),
        ],
    ] {
        let r = send(
            &srv,
            reqwest::Method::POST,
            "/api/v1/users",
            &headers,
            Some(&new_admin("mallory")),
        )
        .await;
        assert_error(&r, ErrorKey::Forbidden);
    }
    // A bodyless state change as well: deleting a user, logging out.
    let victim = srv.user_token("victim", "operator").await;
    let (_, users) = srv.get("/api/v1/users").await;
    let id = users["users"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["username"] == "victim")
        .unwrap()["id"]
        .as_i64()
        .unwrap();
    let r = send(
        &srv,
        reqwest::Method::DELETE,
        &format!("/api/v1/users/{id}"),
        &[("origin", EVIL), ("cookie", &c)],
        None,
    )
    .await;
    assert_error(&r, ErrorKey::Forbidden);
    let r = send(
        &srv,
        reqwest::Method::POST,
        "/api/v1/users/logout",
        &[("origin", EVIL), ("cookie", &format!("pki_token={victim}"))],
        None,
    )
    .await;
    assert_error(&r, ErrorKey::Forbidden);
    let names = usernames(&srv).await;
    assert!(names.contains(&"victim".to_string()));
    assert!(!names.contains(&"mallory".to_string()));
    // The victim's session survived the forged logout.
    let r = send(
        &srv,
        reqwest::Method::GET,
        "/api/v1/users/info",
        &[("authorization", &format!("Bearer {victim}"))],
        None,
    )
    .await;
    assert_eq!(r.0, 200, "{}", r.1);
    srv.stop().await;
}

#[tokio::test]
async fn cookie_auth_from_same_origin_works() {
    let srv = TestServer::start().await;
    let c = cookie(&srv);
    let json_ct = ("content-type", "application/json");
    // The server's own page: its Origin is the server's scheme, host and port.
    let r = send(
        &srv,
        reqwest::Method::POST,
        "/api/v1/users",
        &[json_ct, ("origin", &srv.base), ("cookie", &c)],
        Some(&new_admin("web-1")),
    )
    .await;
    assert_eq!(r.0, 200, "{}", r.1);
    let r = send(
        &srv,
        reqwest::Method::POST,
        "/api/v1/users",
        &[json_ct, ("sec-fetch-site", "same-origin"), ("cookie", &c)],
        Some(&new_admin("web-2")),
    )
    .await;
    assert_eq!(r.0, 200, "{}", r.1);
    // Reads need no Origin: SameSite=Strict keeps the cookie off
    // cross-site requests, and a read changes nothing.
    let r = send(
        &srv,
        reqwest::Method::GET,
        "/api/v1/users/info",
        &[("cookie", &c)],
        None,
    )
    .await;
    assert_eq!(r.0, 200, "{}", r.1);
    let names = usernames(&srv).await;
    assert!(names.contains(&"web-1".to_string()) && names.contains(&"web-2".to_string()));
    srv.stop().await;
}

#[tokio::test]
async fn bearer_without_origin_works() {
    let srv = TestServer::start().await;
    let json_ct = ("content-type", "application/json");
    let bearer = format!("Bearer {}", srv.token);
    let r = send(
        &srv,
        reqwest::Method::POST,
        "/api/v1/users",
        &[json_ct, ("authorization", &bearer)],
        Some(&new_admin("api-1")),
    )
    .await;
    assert_eq!(r.0, 200, "{}", r.1);
    // A browser never attaches a bearer token by itself, so even a foreign
    // Origin does not matter for it (nor for X-Auth-Token).
    let r = send(
        &srv,
        reqwest::Method::POST,
        "/api/v1/users",
        &[json_ct, ("x-auth-token", &srv.token), ("origin", EVIL)],
        Some(&new_admin("api-2")),
    )
    .await;
    assert_eq!(r.0, 200, "{}", r.1);
    srv.stop().await;
}

/// The `Set-Cookie` of a response, which must be exactly one.
fn set_cookie(resp: &reqwest::Response) -> String {
    let all: Vec<_> = resp.headers().get_all("set-cookie").iter().collect();
    assert_eq!(all.len(), 1, "{all:?}");
    all[0].to_str().unwrap().to_string()
}

fn attributes(cookie: &str) -> Vec<String> {
    cookie.split(';').map(|a| a.trim().to_string()).collect()
}

#[tokio::test]
async fn login_sets_httponly_samesite_strict_cookie() {
    let srv = TestServer::start_with(None, "[tls]\nlisten = \"127.0.0.1:0\"\n").await;
    let creds = json!({"username": "admin", "password": ADMIN_PASSWORD});
    let resp = srv
        .http
        .post(srv.url("/api/v1/users/login"))
        .json(&creds)
        .send()
        .await
        .unwrap();
    let cookie = set_cookie(&resp);
    let (s, body) = decode(resp).await;
    assert_eq!(s, 200, "{body}");
    let attrs = attributes(&cookie);
    let token = body["token"].as_str().unwrap();
    assert_eq!(attrs[0], format!("pki_token={token}"), "{cookie}");
    for a in ["Path=/", "HttpOnly", "SameSite=Strict"] {
        assert!(attrs.iter().any(|x| x == a), "{a} missing in {cookie}");
    }
    // The token's lifetime (auth.token_expiry, 7 days by default).
    assert!(attrs.iter().any(|x| x == "Max-Age=604800"), "{cookie}");
    assert!(
        !attrs.iter().any(|x| x == "Secure"),
        "plain HTTP cannot carry a Secure cookie back: {cookie}"
    );

    // Logout clears it.
    let resp = srv
        .http
        .post(srv.url("/api/v1/users/logout"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let cleared = set_cookie(&resp);
    assert_eq!(resp.status(), 200);
    let attrs = attributes(&cleared);
    assert_eq!(attrs[0], "pki_token=", "{cleared}");
    assert!(attrs.iter().any(|x| x == "Max-Age=0"), "{cleared}");

    // Over the TLS listener the cookie is also Secure.
    let tls = srv.server.as_ref().unwrap().tls_addr.unwrap();
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(srv.root_pem().as_bytes()).unwrap()])
        .build()
        .unwrap();
    let resp = client
        .post(format!(
            "https://localhost:{}/api/v1/users/login",
            tls.port()
        ))
        .json(&creds)
        .send()
        .await
        .unwrap();
    let cookie = set_cookie(&resp);
    assert_eq!(resp.status(), 200);
    let attrs = attributes(&cookie);
    for a in ["HttpOnly", "SameSite=Strict", "Secure"] {
        assert!(attrs.iter().any(|x| x == a), "{a} missing in {cookie}");
    }
    srv.stop().await;
}

// ---- HTTP limits ----

/// Reads until the server closes the connection (EOF or reset) and returns
/// how long that took; panics if it is still open after `limit`.
async fn closed_within<S: AsyncRead + Unpin>(s: &mut S, limit: Duration) -> Duration {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at((start + limit).into(), s.read(&mut buf)).await {
            Err(_) => panic!("connection still open after {limit:?}"),
            Ok(Ok(0)) | Ok(Err(_)) => return start.elapsed(),
            Ok(Ok(_)) => continue,
        }
    }
}

/// One keep-alive `GET /healthz` on `s`; panics unless it answers 200.
async fn healthz<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) {
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&got).contains("\"ok\"") {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("no answer within 5 s")
            .unwrap();
        assert!(
            n > 0,
            "closed before answering: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
}

const HALF_HEADERS: &[u8] =
    b"POST /api/v1/users HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nX-Slow";

fn tls_connector(srv: &TestServer) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(srv.root_pem().as_bytes()).unwrap())
        .unwrap();
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

const SLOW: &str = "[http]\nheader_read_timeout = \"1s\"\nidle_timeout = \"30s\"\n\
                    [tls]\nlisten = \"127.0.0.1:0\"\n";

#[tokio::test]
async fn rejects_slowloris_headers() {
    let srv = TestServer::start_with(None, SLOW).await;
    let plain = srv.server.as_ref().unwrap().http_addr;
    // Half a request head, then silence: closed at the 1 s header timeout,
    // long before the 30 s idle timeout.
    let mut s = TcpStream::connect(plain).await.unwrap();
    s.write_all(HALF_HEADERS).await.unwrap();
    let took = closed_within(&mut s, Duration::from_secs(5)).await;
    assert!(took >= Duration::from_millis(900), "closed early: {took:?}");
    // One byte that could still be the HTTP/2 preface ("PRI * …"): the
    // protocol is not known yet, the clock runs all the same.
    let mut s = TcpStream::connect(plain).await.unwrap();
    s.write_all(b"P").await.unwrap();
    closed_within(&mut s, Duration::from_secs(5)).await;
    // A head sent a byte at a time, each within the timeout, is still one
    // head: the clock starts at its first byte.
    let mut s = TcpStream::connect(plain).await.unwrap();
    let start = Instant::now();
    let mut closed = false;
    for b in HALF_HEADERS {
        if s.write_all(&[*b]).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        if start.elapsed() > Duration::from_secs(3) {
            break;
        }
    }
    if !closed {
        closed_within(&mut s, Duration::from_millis(500)).await;
    }
    // The server still serves.
    let mut s = TcpStream::connect(plain).await.unwrap();
    healthz(&mut s).await;
    srv.stop().await;
}

/// A whole head, then a login body trickled a byte every 300 ms: each byte
/// comes well within any per-read timer, and the request is in flight, so
/// neither the header nor the idle timeout applies. The body timeout
/// (1 s here) answers 408 and closes the connection.
#[tokio::test]
async fn rejects_a_body_trickled_past_the_body_read_timeout() {
    let srv = TestServer::start_with(
        None,
        "[http]\nbody_read_timeout = \"1s\"\nheader_read_timeout = \"10s\"\nidle_timeout = \"30s\"\n",
    )
    .await;
    let plain = srv.server.as_ref().unwrap().http_addr;
    let s = TcpStream::connect(plain).await.unwrap();
    let (mut rx, mut tx) = tokio::io::split(s);
    tx.write_all(
        b"POST /api/v1/users/login HTTP/1.1\r\nHost: t\r\n\
          Content-Type: application/json\r\nContent-Length: 200\r\n\r\n",
    )
    .await
    .unwrap();
    let start = Instant::now();
    let trickle = tokio::spawn(async move {
        for b in br#"{"username":"admin","password":"#.iter().cycle().take(100) {
            if tx.write_all(&[*b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at((start + Duration::from_secs(5)).into(), rx.read(&mut buf))
            .await
        {
            Err(_) => panic!(
                "connection still open after 5 s: {:?}",
                String::from_utf8_lossy(&got)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
    let took = start.elapsed();
    trickle.abort();
    let answer = String::from_utf8_lossy(&got);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("api.request_timeout"), "{answer}");
    assert!(
        took >= Duration::from_millis(900),
        "answered early: {took:?}"
    );
    // The server still serves.
    let mut s = TcpStream::connect(plain).await.unwrap();
    healthz(&mut s).await;
    srv.stop().await;
}

#[tokio::test]
async fn rejects_slowloris_headers_over_tls() {
    let srv = TestServer::start_with(None, SLOW).await;
    let addr = srv.server.as_ref().unwrap().tls_addr.unwrap();
    let connector = tls_connector(&srv);
    let name = ServerName::try_from("localhost").unwrap();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut tls = connector.connect(name.clone(), tcp).await.unwrap();
    tls.write_all(HALF_HEADERS).await.unwrap();
    tls.flush().await.unwrap();
    let took = closed_within(&mut tls, Duration::from_secs(5)).await;
    assert!(took >= Duration::from_millis(900), "closed early: {took:?}");
    // A client that never finishes the handshake is closed as well.
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
    closed_within(&mut tcp, Duration::from_secs(5)).await;
    // A complete request over TLS still works.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut tls = connector.connect(name, tcp).await.unwrap();
    healthz(&mut tls).await;
    srv.stop().await;
}

#[tokio::test]
async fn rejects_connections_over_the_cap() {
    let mut srv = TestServer::start_with(None, "[http]\nmax_connections = 4\n").await;
    let addr = srv.server.as_ref().unwrap().http_addr;
    // The harness's client keeps its login connection alive; dropping the
    // client closes it, and the server's slot frees once it sees the close.
    srv.http = reqwest::Client::new();
    let mut held = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while held.len() < 4 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 1024];
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {
                assert!(buf.starts_with(b"HTTP/1.1 200"));
                held.push(s);
            }
            // The login connection still held its slot: try again.
            _ => {
                assert!(Instant::now() < deadline, "only {} admitted", held.len());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    // Four connections open, each answered and kept alive: the fifth is
    // accepted and closed without an answer.
    let mut fifth = TcpStream::connect(addr).await.unwrap();
    let _ = fifth
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .await;
    closed_within(&mut fifth, Duration::from_secs(5)).await;
    // The held ones still work.
    healthz(&mut held[0]).await;
    // Releasing one frees its slot.
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = srv.http.get(srv.url("/healthz")).send().await;
        if r.as_ref().is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(Instant::now() < deadline, "slot not freed: {r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(held);
    srv.stop().await;
}

/// Idle connections closed after one second; heads get the default time.
const IDLE_1S: &str = "[http]\nidle_timeout = \"1s\"\nheader_read_timeout = \"10s\"\n";

#[tokio::test]
async fn closes_idle_keep_alive_connections() {
    let srv = TestServer::start_with(None, IDLE_1S).await;
    let addr = srv.server.as_ref().unwrap().http_addr;
    let mut s = TcpStream::connect(addr).await.unwrap();
    healthz(&mut s).await;
    let took = closed_within(&mut s, Duration::from_secs(5)).await;
    assert!(took >= Duration::from_millis(900), "closed early: {took:?}");
    // A connection that never sends anything is idle too.
    let mut s = TcpStream::connect(addr).await.unwrap();
    closed_within(&mut s, Duration::from_secs(5)).await;
    srv.stop().await;
}

/// The server announces its idle timeout on HTTP/1.1 answers, and a pooled
/// client that idles past it gets its next request answered (its pool sees
/// the close and connects again); HTTP/2 answers carry no `Keep-Alive`.
#[tokio::test]
async fn a_client_idle_past_the_timeout_is_answered_on_its_next_request() {
    let srv = TestServer::start_with(None, IDLE_1S).await;
    let addr = srv.server.as_ref().unwrap().http_addr;
    let client = reqwest::Client::builder().http1_only().build().unwrap();
    let url = format!("http://{addr}/healthz");
    for _ in 0..2 {
        let resp = client.get(&url).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers()
                .get("keep-alive")
                .map(|v| v.to_str().unwrap()),
            Some("timeout=1")
        );
        tokio::time::sleep(Duration::from_millis(1_600)).await;
    }
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let resp = h2.get(&url).send().await.unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    assert!(resp.headers().get("keep-alive").is_none());
    srv.stop().await;
}

#[tokio::test]
async fn h2_client_over_tls_still_works() {
    let srv = TestServer::start_with(None, "[tls]\nlisten = \"127.0.0.1:0\"\n").await;
    let tls = srv.server.as_ref().unwrap().tls_addr.unwrap();
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(srv.root_pem().as_bytes()).unwrap()])
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let base = format!("https://localhost:{}", tls.port());
    // Several requests at once, as streams of one connection.
    let mut answers = Vec::new();
    for i in 0..8 {
        let req = client
            .post(format!("{base}/api/v1/users"))
            .bearer_auth(&srv.token)
            .json(&new_admin(&format!("h2-{i}")));
        answers.push(tokio::spawn(async move { req.send().await.unwrap() }));
    }
    for a in answers {
        let resp = a.await.unwrap();
        assert_eq!(resp.version(), reqwest::Version::HTTP_2);
        let (s, b) = decode(resp).await;
        assert_eq!(s, 200, "{b}");
    }
    assert_eq!(
        usernames(&srv)
            .await
            .iter()
            .filter(|n| n.starts_with("h2-"))
            .count(),
        8
    );
    srv.stop().await;
}
