//! CSR verification against CSRs made by the real `openssl req`.

mod common;

use std::process::Command;

use common::*;
use warrant_ca::*;

fn openssl_csr(dir: &std::path::Path, keygen: &[&str]) -> String {
    let key = dir.join("k.pem");
    let (ok, out) = run(Command::new("openssl").args(keygen).arg("-out").arg(&key));
    assert!(ok, "{out}");
    let (ok, out) = run(Command::new("openssl")
        .args(["req", "-new", "-subj", "/O=Acme/CN=csr-user", "-key"])
        .arg(&key));
    assert!(ok, "{out}");
    out
}

#[test]
fn accepts_openssl_csrs_of_every_key_type() {
    let dir = tempfile::tempdir().unwrap();
    for (keygen, kind) in [
        (
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ][..],
            PublicKeyKind::EcdsaP256,
        ),
        (
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-384",
            ][..],
            PublicKeyKind::EcdsaP384,
        ),
        (
            &["genpkey", "-algorithm", "ED25519"][..],
            PublicKeyKind::Ed25519,
        ),
        (
            &[
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
            ][..],
            PublicKeyKind::Rsa(2048),
        ),
    ] {
        let pem = openssl_csr(dir.path(), keygen);
        let info = verify_csr(&pem).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        assert_eq!(info.key_kind, kind);
        assert_eq!(info.common_name.as_deref(), Some("csr-user"));
    }
}

#[test]
fn accepts_rsa_pss_csr() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k.pem");
    let (ok, out) = run(Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
        ])
        .arg(&key));
    assert!(ok, "{out}");
    let (ok, pem) = run(Command::new("openssl")
        .args([
            "req",
            "-new",
            "-subj",
            "/CN=pss",
            "-sigopt",
            "rsa_padding_mode:pss",
            "-sigopt",
            "rsa_pss_saltlen:digest",
            "-key",
        ])
        .arg(&key));
    assert!(ok, "{pem}");
    verify_csr(&pem).unwrap();
}

#[test]
fn rejects_csr_with_bad_signature() {
    let dir = tempfile::tempdir().unwrap();
    let pem = openssl_csr(
        dir.path(),
        &[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ],
    );
    let (_, mut der) = der_of(&pem);
    // Flip a bit inside the CN value ("csr-user"): the signature no longer matches.
    let pos = der.windows(8).position(|w| w == b"csr-user").unwrap();
    der[pos] ^= 0x01;
    let err = verify_csr_der(&der).unwrap_err();
    assert_eq!(err.invalid_field(), Some("csr_pem"));
    assert!(err.to_string().contains("signature"), "{err}");
}

#[test]
fn rejects_csr_signed_by_another_key() {
    let dir = tempfile::tempdir().unwrap();
    let a = openssl_csr(dir.path(), &["genpkey", "-algorithm", "ED25519"]);
    let b = openssl_csr(dir.path(), &["genpkey", "-algorithm", "ED25519"]);
    let (_, a) = der_of(&a);
    let (_, b) = der_of(&b);
    // Same layout: take a's signature onto b's request.
    let mut mixed = b.clone();
    let n = mixed.len();
    mixed[n - 64..].copy_from_slice(&a[a.len() - 64..]);
    assert_eq!(
        verify_csr_der(&mixed).unwrap_err().invalid_field(),
        Some("csr_pem")
    );
}

#[test]
fn rejects_non_csr_pem_and_garbage() {
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    for bad in ["", "hello", key.pkcs8_pem.as_str()] {
        assert_eq!(
            verify_csr(bad).unwrap_err().invalid_field(),
            Some("csr_pem")
        );
    }
    let huge = "A".repeat(MAX_CSR_PEM_LEN + 1);
    assert_eq!(
        verify_csr(&huge).unwrap_err().invalid_field(),
        Some("csr_pem")
    );
}

fn der_of(pem: &str) -> (String, Vec<u8>) {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = Command::new("openssl")
        .args(["base64", "-d", "-A"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(body.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap()
        .stdout;
    (body, der)
}

#[test]
fn accepts_crlf_pem_csr() {
    let dir = tempfile::tempdir().unwrap();
    let pem = openssl_csr(dir.path(), &["genpkey", "-algorithm", "ED25519"]);
    verify_csr(&pem.replace('\n', "\r\n")).unwrap();
}
