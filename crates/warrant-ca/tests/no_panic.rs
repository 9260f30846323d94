//! Bad input never panics: every single-byte corruption and every truncation
//! of a valid certificate and CSR yields a result, not a panic.

mod common;

use std::process::Command;
use std::time::SystemTime;

use common::*;
use warrant_ca::*;

#[test]
fn corrupted_principal_certs_never_panic_and_never_pass() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let der = fx.agent(&key).der;
    let now = SystemTime::now();
    for i in 0..der.len() {
        for mask in [0x01u8, 0x80, 0xFF] {
            let mut bad = der.clone();
            bad[i] ^= mask;
            // Every byte is covered by the signature, by strict DER, or by the
            // signature-algorithm checks: a changed certificate must not pass.
            if let Ok(p) = verify_principal_cert(&bad, &fx.hierarchy, now) {
                panic!("accepted a corrupted certificate (byte {i}, mask {mask:#x}): {p:?}");
            }
            let _ = certificate_extensions(&bad);
        }
    }
    for len in 0..der.len() {
        assert!(verify_principal_cert(&der[..len], &fx.hierarchy, now).is_err());
        let _ = certificate_extensions(&der[..len]);
    }
}

#[test]
fn corrupted_csrs_never_panic_and_never_pass() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k.pem");
    let (ok, out) = run(Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
        ])
        .arg(&key));
    assert!(ok, "{out}");
    let (ok, out) = run(Command::new("openssl")
        .args([
            "req", "-new", "-subj", "/CN=fuzz", "-outform", "DER", "-key",
        ])
        .arg(&key)
        .arg("-out")
        .arg(dir.path().join("csr.der")));
    assert!(ok, "{out}");
    let der = std::fs::read(dir.path().join("csr.der")).unwrap();
    verify_csr_der(&der).unwrap();
    for i in 0..der.len() {
        for mask in [0x01u8, 0x80, 0xFF] {
            let mut bad = der.clone();
            bad[i] ^= mask;
            assert!(
                verify_csr_der(&bad).is_err(),
                "accepted a corrupted CSR (byte {i}, mask {mask:#x})"
            );
        }
    }
    for len in 0..der.len() {
        assert!(verify_csr_der(&der[..len]).is_err());
    }
}
