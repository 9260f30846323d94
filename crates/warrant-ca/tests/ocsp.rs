//! OCSP requests made by the real `openssl ocsp`, answered by
//! [`OcspResponder`], and the answers checked by `openssl ocsp` against the
//! CA chain: status, revocation time and reason, nonce, responder signature.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use common::*;
use warrant_ca::*;

const DAY: Duration = Duration::from_secs(86_400);

struct Case {
    fx: Fixture,
    leaf: PathBuf,
    issued: IssuedCert,
    responder: OcspResponder,
}

fn case() -> Case {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let issued = fx.person(&key);
    let leaf = fx.dir.path().join("leaf.pem");
    std::fs::write(&leaf, &issued.pem).unwrap();
    fx.write_chain();
    let responder = OcspResponder::new(fx.people(), SystemTime::now(), DAY).unwrap();
    Case {
        fx,
        leaf,
        issued,
        responder,
    }
}

fn path(fx: &Fixture, name: &str) -> PathBuf {
    fx.dir.path().join(name)
}

/// `openssl ocsp -reqout` for `leaf`, with or without a nonce.
fn openssl_request(fx: &Fixture, leaf: &Path, nonce: bool) -> Vec<u8> {
    let out = path(fx, "req.der");
    let (ok, text) = run(Command::new("openssl")
        .args(["ocsp", "-issuer"])
        .arg(path(fx, "people.pem"))
        .arg("-cert")
        .arg(leaf)
        .arg(if nonce { "-nonce" } else { "-no_nonce" })
        .arg("-reqout")
        .arg(&out));
    assert!(ok, "{text}");
    std::fs::read(out).unwrap()
}

/// `openssl ocsp -respin` checking `response` against the chain (root
/// trusted, the issuing CA untrusted): once against `request` (signature and
/// nonce), once for `leaf` (its status). Returns both outputs.
fn openssl_check(fx: &Fixture, leaf: &Path, request: &[u8], response: &[u8]) -> (bool, String) {
    let req = path(fx, "req-check.der");
    let resp = path(fx, "resp.der");
    std::fs::write(&req, request).unwrap();
    std::fs::write(&resp, response).unwrap();
    let verify = |cmd: &mut Command| {
        cmd.arg("-respin")
            .arg(&resp)
            .arg("-CAfile")
            .arg(path(fx, "root.pem"))
            .arg("-verify_other")
            .arg(path(fx, "people.pem"));
    };
    let mut against_request = Command::new("openssl");
    against_request.args(["ocsp", "-reqin"]).arg(&req);
    verify(&mut against_request);
    let (ok1, out1) = run(&mut against_request);
    // With `-cert`, openssl builds a request of its own: no nonce to compare.
    let mut for_leaf = Command::new("openssl");
    for_leaf
        .args(["ocsp", "-no_nonce", "-issuer"])
        .arg(path(fx, "people.pem"))
        .arg("-cert")
        .arg(leaf);
    verify(&mut for_leaf);
    let (ok2, out2) = run(&mut for_leaf);
    (ok1 && ok2, format!("{out1}\n{out2}"))
}

fn times() -> OcspTimes {
    let now = SystemTime::now();
    OcspTimes {
        produced_at: now,
        this_update: now,
        next_update: now + Duration::from_secs(3600),
    }
}

fn answer(c: &Case, request: &[u8], status: OcspCertStatus) -> Vec<u8> {
    let parsed = parse_ocsp_request(request).unwrap();
    assert_eq!(parsed.queries.len(), 1);
    let q = &parsed.queries[0];
    assert!(
        c.responder.answers_for(q),
        "the people CA's CertID not matched"
    );
    assert_eq!(q.serial, parse_serial_hex(&c.issued.serial_hex).unwrap());
    c.responder
        .respond(&[(q, status)], times(), parsed.nonce.as_deref())
        .unwrap()
}

#[test]
fn openssl_reads_good_with_a_verified_signature_and_the_nonce() {
    let c = case();
    let req = openssl_request(&c.fx, &c.leaf, true);
    assert!(parse_ocsp_request(&req).unwrap().nonce.is_some());
    let resp = answer(&c, &req, OcspCertStatus::Good);
    let (ok, out) = openssl_check(&c.fx, &c.leaf, &req, &resp);
    assert!(ok, "{out}");
    assert!(out.contains("Response verify OK"), "{out}");
    assert!(out.contains(": good"), "{out}");
    assert!(!out.contains("Nonce Verify error"), "{out}");
    assert!(!out.contains("WARNING"), "{out}");
}

#[test]
fn openssl_reads_revoked_with_time_and_reason() {
    let c = case();
    let req = openssl_request(&c.fx, &c.leaf, false);
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_000_000);
    let resp = answer(
        &c,
        &req,
        OcspCertStatus::Revoked {
            at,
            reason: Some(RevocationReason::KeyCompromise),
        },
    );
    let (ok, out) = openssl_check(&c.fx, &c.leaf, &req, &resp);
    assert!(ok, "{out}");
    assert!(out.contains("Response verify OK"), "{out}");
    assert!(out.contains(": revoked"), "{out}");
    assert!(out.contains("Reason: keyCompromise"), "{out}");
    assert!(
        out.contains("Revocation Time: Nov 30 00:53:20 2026 GMT"),
        "{out}"
    );
}

#[test]
fn openssl_reads_unknown() {
    let c = case();
    let req = openssl_request(&c.fx, &c.leaf, false);
    let resp = answer(&c, &req, OcspCertStatus::Unknown);
    let (ok, out) = openssl_check(&c.fx, &c.leaf, &req, &resp);
    assert!(ok, "{out}");
    assert!(out.contains(": unknown"), "{out}");
}

#[test]
fn the_responder_certificate_is_a_delegated_ocsp_signer() {
    let c = case();
    let pem = path(&c.fx, "responder.pem");
    std::fs::write(&pem, pem_of(c.responder.cert_der())).unwrap();
    let (ok, out) = run(Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&pem));
    assert!(ok, "{out}");
    assert!(out.contains("OCSP Signing"), "{out}");
    assert!(out.contains("OCSP No Check"), "{out}");
    assert!(out.contains("CA:FALSE"), "{out}");
    let (ok, out) = run(Command::new("openssl")
        .args([
            "verify",
            "-x509_strict",
            "-purpose",
            "ocsphelper",
            "-CAfile",
        ])
        .arg(path(&c.fx, "root.pem"))
        .arg("-untrusted")
        .arg(path(&c.fx, "people.pem"))
        .arg(&pem));
    assert!(ok, "{out}");
}

#[test]
fn rejects_a_response_signed_for_another_ca() {
    let c = case();
    let other = Fixture::new();
    let stranger = OcspResponder::new(other.people(), SystemTime::now(), DAY).unwrap();
    let req = openssl_request(&c.fx, &c.leaf, false);
    let parsed = parse_ocsp_request(&req).unwrap();
    assert!(!stranger.answers_for(&parsed.queries[0]));
    let resp = stranger
        .respond(&[(&parsed.queries[0], OcspCertStatus::Good)], times(), None)
        .unwrap();
    let (ok, out) = openssl_check(&c.fx, &c.leaf, &req, &resp);
    assert!(!ok || !out.contains("Response verify OK"), "{out}");
}

#[test]
fn rejects_malformed_and_oversized_requests() {
    assert!(matches!(
        parse_ocsp_request(b"not der"),
        Err(OcspRequestError::Malformed(_))
    ));
    assert!(matches!(
        parse_ocsp_request(&[0u8; OCSP_MAX_REQUEST_LEN + 1]),
        Err(OcspRequestError::TooLarge)
    ));
    let failure = ocsp_failure_response(OcspFailure::MalformedRequest);
    assert_eq!(failure, [0x30, 0x03, 0x0A, 0x01, 0x01]);
}

#[test]
fn rejects_a_request_for_too_many_certificates() {
    let c = case();
    let mut cmd = Command::new("openssl");
    cmd.args(["ocsp", "-no_nonce", "-issuer"])
        .arg(path(&c.fx, "people.pem"));
    for _ in 0..=OCSP_MAX_REQUEST_ENTRIES {
        cmd.arg("-cert").arg(&c.leaf);
    }
    let out = path(&c.fx, "many.der");
    cmd.arg("-reqout").arg(&out);
    let (ok, text) = run(&mut cmd);
    assert!(ok, "{text}");
    let req = std::fs::read(out).unwrap();
    assert_eq!(
        parse_ocsp_request(&req),
        Err(OcspRequestError::TooManyEntries(
            OCSP_MAX_REQUEST_ENTRIES + 1
        ))
    );
}

fn pem_of(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// The root's responder answers for the issuing CAs it signed.
#[test]
fn openssl_reads_good_for_an_issuing_ca_from_the_roots_responder() {
    let fx = Fixture::new();
    let (root, people) = fx.write_chain();
    let responder = OcspResponder::new(fx.hierarchy.root(), SystemTime::now(), DAY).unwrap();
    let req_path = path(&fx, "root-req.der");
    let (ok, text) = run(Command::new("openssl")
        .args(["ocsp", "-no_nonce", "-issuer"])
        .arg(&root)
        .arg("-cert")
        .arg(&people)
        .arg("-reqout")
        .arg(&req_path));
    assert!(ok, "{text}");
    let parsed = parse_ocsp_request(&std::fs::read(&req_path).unwrap()).unwrap();
    let q = &parsed.queries[0];
    assert!(responder.answers_for(q));
    assert_eq!(q.serial, fx.people().serial());
    let resp = responder
        .respond(&[(q, OcspCertStatus::Good)], times(), None)
        .unwrap();
    let resp_path = path(&fx, "root-resp.der");
    std::fs::write(&resp_path, resp).unwrap();
    let (ok, out) = run(Command::new("openssl")
        .args(["ocsp", "-no_nonce", "-respin"])
        .arg(&resp_path)
        .arg("-issuer")
        .arg(&root)
        .arg("-cert")
        .arg(&people)
        .arg("-CAfile")
        .arg(&root));
    assert!(ok, "{out}");
    assert!(out.contains("Response verify OK"), "{out}");
    assert!(out.contains(": good"), "{out}");
}
