//! The OCSP responder over real HTTP, asked by the real `openssl ocsp`:
//! good, then revoked after `POST …/revoke` (and for a cascade-revoked
//! agent), unknown for a certificate the database never saw, the root's
//! answer for the issuing CA, the GET form with its cache headers,
//! malformed requests, the AIA extension, and a revocation seen by a second
//! node.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use common::*;
use serde_json::json;

const OCSP_TOML: &str = "[ocsp]\nbase_url = \"http://ocsp.example\"\n";

/// `openssl ocsp` against `url` for `cert` issued by `issuer`, the answer
/// verified against the root; returns its output (which names the status).
fn openssl_ocsp(dir: &Path, url: &str, issuer: &Path, cert: &Path, nonce: bool) -> String {
    let root = dir.join("ca/root.cert.pem");
    let (ok, out) = run(Command::new("openssl")
        .args(["ocsp", "-url", url, "-issuer"])
        .arg(issuer)
        .arg("-cert")
        .arg(cert)
        .arg(if nonce { "-nonce" } else { "-no_nonce" })
        .arg("-CAfile")
        .arg(&root)
        .arg("-verify_other")
        .arg(dir.join("ca/people.cert.pem")));
    assert!(ok, "{out}");
    assert!(out.contains("Response verify OK"), "{out}");
    assert!(!out.contains("WARNING"), "{out}");
    out
}

/// A `tls-client` leaf signed by `ca` directly: no server stored it.
fn unstored_leaf(ca: &warrant_ca::IssuingCa, cn: &str) -> warrant_ca::IssuedCert {
    let key = warrant_ca::generate_key(warrant_ca::KeyType::EcdsaP256).unwrap();
    let subject = warrant_ca::Subject::parse(&format!("/CN={cn}")).unwrap();
    let now = SystemTime::now();
    warrant_ca::issue_leaf(
        ca,
        &warrant_ca::LeafSpec {
            profile: warrant_ca::Profile::TlsClient,
            subject: &subject,
            san: &[],
            spki_der: &key.spki_der,
            not_before: now,
            not_after: now + Duration::from_secs(3600),
            extensions: &[],
            urls: None,
        },
    )
    .unwrap()
}

fn people(srv: &TestServer) -> PathBuf {
    srv.dir.path().join("ca/people.cert.pem")
}

fn status_line(out: &str, cert: &Path) -> String {
    let prefix = format!("{}: ", cert.display());
    out.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no status for {}: {out}", cert.display()))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openssl_ocsp_reads_good_then_revoked_after_revoke_and_for_the_cascade() {
    let srv = TestServer::start_with(None, OCSP_TOML).await;
    let url = srv.url("/ocsp");
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let (s, agent) = srv
        .post(
            "/api/v1/certs",
            &Da::new(&alice, "bot", &[("db", "read")]).body(&alice),
        )
        .await;
    assert_eq!(s, 200, "{agent}");
    let alice_pem = write(srv.dir.path(), "alice.pem", &alice.cert_pem);
    let agent_pem = write(
        srv.dir.path(),
        "agent.pem",
        agent["cert_pem"].as_str().unwrap(),
    );
    let dir = srv.dir.path().to_path_buf();
    for nonce in [true, false, false] {
        let out = openssl_ocsp(&dir, &url, &people(&srv), &alice_pem, nonce);
        assert_eq!(status_line(&out, &alice_pem), "good", "{out}");
        let out = openssl_ocsp(&dir, &url, &people(&srv), &agent_pem, nonce);
        assert_eq!(status_line(&out, &agent_pem), "good", "{out}");
    }

    let (s, r) = srv
        .post(
            &format!("/api/v1/cert/people/{}/revoke", alice.serial),
            &json!({"reason": "keyCompromise"}),
        )
        .await;
    assert_eq!(s, 200, "{r}");
    // At once, on this node, from the kept answer's path and the signed one.
    for nonce in [false, true] {
        let out = openssl_ocsp(&dir, &url, &people(&srv), &alice_pem, nonce);
        assert_eq!(status_line(&out, &alice_pem), "revoked", "{out}");
        assert!(out.contains("Reason: keyCompromise"), "{out}");
        let out = openssl_ocsp(&dir, &url, &people(&srv), &agent_pem, nonce);
        assert_eq!(status_line(&out, &agent_pem), "revoked", "{out}");
    }
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openssl_ocsp_reads_unknown_for_a_certificate_never_stored() {
    let srv = TestServer::start_with(None, OCSP_TOML).await;
    let hierarchy = warrant_ca::Hierarchy::load(srv.dir.path(), None).unwrap();
    let stray = unstored_leaf(hierarchy.ca("people").unwrap(), "stray");
    let stray_pem = write(srv.dir.path(), "stray.pem", &stray.pem);
    let out = openssl_ocsp(
        srv.dir.path(),
        &srv.url("/ocsp"),
        &people(&srv),
        &stray_pem,
        false,
    );
    assert_eq!(status_line(&out, &stray_pem), "unknown", "{out}");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_roots_responder_answers_for_the_issuing_ca() {
    let srv = TestServer::start_with(None, OCSP_TOML).await;
    let root = srv.dir.path().join("ca/root.cert.pem");
    let people_pem = people(&srv);
    let out = openssl_ocsp(srv.dir.path(), &srv.url("/ocsp"), &root, &people_pem, true);
    assert_eq!(status_line(&out, &people_pem), "good", "{out}");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issued_certificates_name_the_responder_in_their_aia() {
    let srv = TestServer::start_with(None, OCSP_TOML).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let pem = write(srv.dir.path(), "alice.pem", &alice.cert_pem);
    let (ok, out) = run(Command::new("openssl")
        .args(["x509", "-noout", "-ocsp_uri", "-in"])
        .arg(&pem));
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "http://ocsp.example/ocsp");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_answers_with_cache_headers_and_verifies() {
    let srv = TestServer::start_with(None, OCSP_TOML).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let dir = srv.dir.path();
    let pem = write(dir, "alice.pem", &alice.cert_pem);
    let req = dir.join("req.der");
    let (ok, out) = run(Command::new("openssl")
        .args(["ocsp", "-no_nonce", "-issuer"])
        .arg(people(&srv))
        .arg("-cert")
        .arg(&pem)
        .arg("-reqout")
        .arg(&req));
    assert!(ok, "{out}");
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(std::fs::read(&req).unwrap());
    let resp = srv
        .http
        .get(srv.url(&format!("/ocsp/{}", urlencode(&b64))))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let headers = resp.headers().clone();
    assert_eq!(headers["content-type"], "application/ocsp-response");
    let cache = headers["cache-control"].to_str().unwrap().to_string();
    let max_age: u64 = cache
        .split(',')
        .find_map(|p| p.trim().strip_prefix("max-age="))
        .unwrap_or_else(|| panic!("no max-age: {cache}"))
        .parse()
        .unwrap();
    assert!((3500..=3600).contains(&max_age), "{cache}");
    let der = resp.bytes().await.unwrap();
    let resp_path = dir.join("resp.der");
    std::fs::write(&resp_path, &der).unwrap();
    let (ok, out) = run(Command::new("openssl")
        .args(["ocsp", "-no_nonce", "-respin"])
        .arg(&resp_path)
        .arg("-issuer")
        .arg(people(&srv))
        .arg("-cert")
        .arg(&pem)
        .arg("-CAfile")
        .arg(dir.join("ca/root.cert.pem"))
        .arg("-verify_other")
        .arg(people(&srv)));
    assert!(ok, "{out}");
    assert_eq!(status_line(&out, &pem), "good", "{out}");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_malformed_requests_with_malformed_request_never_a_500() {
    let srv = TestServer::start_with(None, OCSP_TOML).await;
    let malformed: &[u8] = &[0x30, 0x03, 0x0A, 0x01, 0x01];
    for body in [
        b"".to_vec(),
        b"hello".to_vec(),
        vec![0x30, 0x80],
        vec![0x30; 5000],
    ] {
        let resp = srv
            .http
            .post(srv.url("/ocsp"))
            .header("content-type", "application/ocsp-request")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{body:?}");
        assert_eq!(resp.bytes().await.unwrap().as_ref(), malformed);
    }
    for path in ["/ocsp/not-base64!", "/ocsp/aGVsbG8="] {
        let resp = srv.http.get(srv.url(path)).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{path}");
        assert_eq!(resp.bytes().await.unwrap().as_ref(), malformed, "{path}");
    }
    srv.stop().await;
}

/// A revocation made on one node shows on another within
/// `STATUS_FRESHNESS` (there is no message between them: the other node
/// reads the status again once its kept answer is that old).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_on_another_node_shows_within_a_second() {
    let srv = TestServer::start_with(None, OCSP_TOML).await;
    let (node2, base2) = srv.second_node().await;
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let pem = write(srv.dir.path(), "alice.pem", &alice.cert_pem);
    let url2 = format!("{base2}/ocsp");
    let out = openssl_ocsp(srv.dir.path(), &url2, &people(&srv), &pem, false);
    assert_eq!(status_line(&out, &pem), "good", "{out}");
    let (s, r) = srv
        .post(
            &format!("/api/v1/cert/people/{}/revoke", alice.serial),
            &json!({"reason": "superseded"}),
        )
        .await;
    assert_eq!(s, 200, "{r}");
    let revoked_at = Instant::now();
    // A request sent once the second node's answer is older than
    // STATUS_FRESHNESS must see the revocation (the margin is for timer
    // granularity; how long openssl itself takes does not count).
    let deadline = warrant_server::ocsp::STATUS_FRESHNESS + Duration::from_millis(100);
    loop {
        let sent = revoked_at.elapsed();
        let out = openssl_ocsp(srv.dir.path(), &url2, &people(&srv), &pem, false);
        if status_line(&out, &pem) == "revoked" {
            break;
        }
        assert!(
            sent < deadline,
            "still good on the second node for a request sent {sent:?} after the revocation"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node2.shutdown().await;
    srv.stop().await;
}

/// A CA that is not ours: `unauthorized` (RFC 5019 §2.2.3), not `unknown`,
/// since no responder here may speak for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_a_request_about_another_cas_certificate_with_unauthorized() {
    let srv = TestServer::start_with(None, OCSP_TOML).await;
    let other = tempfile::tempdir().unwrap();
    let hierarchy = warrant_ca::Hierarchy::init(other.path(), None).unwrap();
    let people = hierarchy.ca("people").unwrap();
    let foreign = unstored_leaf(people, "foreign");
    let leaf = write(other.path(), "foreign.pem", &foreign.pem);
    let issuer = write(other.path(), "issuer.pem", people.cert_pem());
    let req = other.path().join("req.der");
    let (ok, out) = run(Command::new("openssl")
        .args(["ocsp", "-no_nonce", "-issuer"])
        .arg(&issuer)
        .arg("-cert")
        .arg(&leaf)
        .arg("-reqout")
        .arg(&req));
    assert!(ok, "{out}");
    let resp = srv
        .http
        .post(srv.url("/ocsp"))
        .header("content-type", "application/ocsp-request")
        .body(std::fs::read(&req).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.bytes().await.unwrap().as_ref(),
        &[0x30, 0x03, 0x0A, 0x01, 0x06]
    );
    srv.stop().await;
}
