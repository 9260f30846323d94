//! Issued certificates, CSRs and CRLs checked by the real `openssl` binary.

mod common;

use std::process::Command;
use std::time::SystemTime;

use common::*;
use warrant_ca::*;

#[test]
fn person_cert_verifies_with_openssl_against_root_and_people() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let cert = fx.person(&key);
    let (ok, out) = openssl_verify(&fx, &cert.pem, "sslclient");
    assert!(ok, "{out}");
    assert!(out.contains(": OK"), "{out}");
}

#[test]
fn agent_cert_with_aic_full_verifies_with_openssl() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let cert = fx.agent(&key);
    let (ok, out) = openssl_verify(&fx, &cert.pem, "sslclient");
    assert!(ok, "{out}");
}

#[test]
fn every_key_type_and_profile_verifies_with_openssl() {
    let fx = Fixture::new();
    for key_type in [
        KeyType::EcdsaP256,
        KeyType::EcdsaP384,
        KeyType::Ed25519,
        KeyType::Rsa2048,
    ] {
        let key = generate_key(key_type).unwrap();
        for (profile, purpose) in [
            (Profile::TlsClient, "sslclient"),
            (Profile::TlsServer, "sslserver"),
            (Profile::AgentProxy, "sslclient"),
        ] {
            let subject = Subject::for_request(
                Some("/O=Acme/OU=gateway:reader/CN=host.example"),
                "ignored",
                "",
                "",
            )
            .unwrap();
            let now = SystemTime::now();
            let cert = issue_leaf(
                fx.people(),
                &LeafSpec {
                    profile,
                    subject: &subject,
                    san: &[],
                    spki_der: &key.spki_der,
                    not_before: now,
                    not_after: now + HOUR,
                    extensions: &[],
                    urls: None,
                },
            )
            .unwrap();
            let (ok, out) = openssl_verify(&fx, &cert.pem, purpose);
            assert!(ok, "{key_type} {profile}: {out}");
        }
    }
}

#[test]
fn leaf_fields_match_the_profile() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::Rsa2048).unwrap();
    let subject = Subject::parse("/CN=www.example.com").unwrap();
    let now = SystemTime::now();
    let cert = issue_leaf(
        fx.people(),
        &LeafSpec {
            profile: Profile::TlsServer,
            subject: &subject,
            san: &[],
            spki_der: &key.spki_der,
            not_before: now,
            not_after: now + HOUR,
            extensions: &[],
            urls: None,
        },
    )
    .unwrap();
    let path = fx.dir.path().join("srv.pem");
    std::fs::write(&path, &cert.pem).unwrap();
    let (ok, text) = run(Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&path));
    assert!(ok, "{text}");
    assert!(
        text.contains("Digital Signature, Key Encipherment"),
        "{text}"
    );
    assert!(text.contains("TLS Web Server Authentication"), "{text}");
    assert!(text.contains("CA:FALSE"), "{text}");
    assert!(text.contains("DNS:www.example.com"), "{text}");
    let (ok, serial) = run(Command::new("openssl")
        .args(["x509", "-noout", "-serial", "-in"])
        .arg(&path));
    assert!(ok, "{serial}");
    // openssl prints whole octets without leading zero octets; compare digits.
    assert_eq!(
        serial
            .trim()
            .trim_start_matches("serial=")
            .trim_start_matches('0'),
        cert.serial_hex.trim_start_matches('0')
    );
    assert!(text.contains("ecdsa-with-SHA256"), "{text}");
}

#[test]
fn each_leaf_has_its_own_ski_and_the_issuer_ski_as_aki() {
    let fx = Fixture::new();
    let k1 = generate_key(KeyType::EcdsaP256).unwrap();
    let k2 = generate_key(KeyType::EcdsaP256).unwrap();
    let c1 = fx.person(&k1);
    let c2 = fx.person(&k2);
    let ext = |c: &IssuedCert, name: &str| {
        let path = fx.dir.path().join(format!("{}.pem", c.serial_hex));
        std::fs::write(&path, &c.pem).unwrap();
        let (ok, text) = run(Command::new("openssl")
            .args(["x509", "-noout", "-ext", name, "-in"])
            .arg(&path));
        assert!(ok, "{text}");
        text.lines().nth(1).unwrap().trim().to_string()
    };
    let ski1 = ext(&c1, "subjectKeyIdentifier");
    let ski2 = ext(&c2, "subjectKeyIdentifier");
    assert_ne!(ski1, ski2);
    let ca_ski: String = fx
        .people()
        .ski()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":");
    assert_ne!(ski1.replace(':', ""), ca_ski.replace(':', ""));
    assert!(ext(&c1, "authorityKeyIdentifier").contains(&ca_ski));
}

#[test]
fn root_and_issuing_ca_certificates_look_right_to_openssl() {
    let fx = Fixture::new();
    let (root, people) = fx.write_chain();
    let (ok, text) = run(Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&root));
    assert!(ok, "{text}");
    assert!(text.contains("ecdsa-with-SHA384"), "{text}");
    assert!(
        text.contains("NIST CURVE: P-384") || text.contains("P-384"),
        "{text}"
    );
    assert!(text.contains("Certificate Sign, CRL Sign"), "{text}");
    let (ok, text) = run(Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&people));
    assert!(ok, "{text}");
    assert!(text.contains("CA:TRUE, pathlen:0"), "{text}");
    assert!(text.contains("P-256"), "{text}");
    let (ok, out) = run(Command::new("openssl")
        .args(["verify", "-x509_strict", "-CAfile"])
        .arg(&root)
        .arg(&people));
    assert!(ok, "{out}");
}
