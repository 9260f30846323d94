//! Hierarchy creation and loading: files, modes, passphrases.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::*;
use warrant_ca::*;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn key_files_are_mode_0600() {
    let dir = tempfile::tempdir().unwrap();
    Hierarchy::init(dir.path(), None).unwrap();
    for name in ["root", "people"] {
        assert_eq!(mode(&dir.path().join(format!("ca/{name}.key.pem"))), 0o600);
        assert!(dir.path().join(format!("ca/{name}.cert.pem")).exists());
    }
    assert_eq!(mode(&dir.path().join("ca")), 0o700);
}

#[test]
fn load_returns_the_same_cas() {
    let dir = tempfile::tempdir().unwrap();
    let h = Hierarchy::init(dir.path(), None).unwrap();
    let loaded = Hierarchy::load(dir.path(), None).unwrap();
    assert_eq!(h.root_cert_der(), loaded.root_cert_der());
    let (a, b) = (h.ca("people").unwrap(), loaded.ca("people").unwrap());
    assert_eq!(a.cert_der(), b.cert_der());
    assert_eq!(a.ski(), b.ski());
    assert_eq!(
        b.chain_pem(),
        format!("{}{}", b.cert_pem(), loaded.root_cert_pem())
    );
    assert_eq!(loaded.default_ca().unwrap().name(), "people");
}

#[test]
fn load_or_init_creates_once() {
    let dir = tempfile::tempdir().unwrap();
    let (_, created) = Hierarchy::load_or_init(dir.path(), None).unwrap();
    assert!(created);
    let (_, created) = Hierarchy::load_or_init(dir.path(), None).unwrap();
    assert!(!created);
}

#[test]
fn rejects_init_over_an_existing_hierarchy() {
    let dir = tempfile::tempdir().unwrap();
    Hierarchy::init(dir.path(), None).unwrap();
    assert!(matches!(
        Hierarchy::init(dir.path(), None),
        Err(CaError::AlreadyInitialized(_))
    ));
}

#[test]
fn rejects_load_of_an_empty_dir() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        Hierarchy::load(dir.path(), None),
        Err(CaError::NotInitialized(_))
    ));
}

#[test]
fn passphrase_round_trip_and_wrong_or_missing_passphrase_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let h = Hierarchy::init(dir.path(), Some("correct horse")).unwrap();
    let key_pem = std::fs::read_to_string(dir.path().join("ca/people.key.pem")).unwrap();
    assert!(key_pem.starts_with("-----BEGIN ENCRYPTED PRIVATE KEY-----"));

    let loaded = Hierarchy::load(dir.path(), Some("correct horse")).unwrap();
    assert_eq!(
        h.ca("people").unwrap().cert_der(),
        loaded.ca("people").unwrap().cert_der()
    );
    // The loaded key signs certificates that verify.
    let fx_key = generate_key(KeyType::EcdsaP256).unwrap();
    let subject = Subject::parse("/CN=x").unwrap();
    let now = std::time::SystemTime::now();
    let cert = issue_leaf(
        loaded.ca("people").unwrap(),
        &LeafSpec {
            profile: Profile::TlsClient,
            subject: &subject,
            san: &[],
            spki_der: &fx_key.spki_der,
            not_before: now,
            not_after: now + HOUR,
            extensions: &[],
            urls: None,
        },
    )
    .unwrap();
    verify_principal_cert(cert.pem.as_bytes(), &h, now).unwrap();

    assert!(matches!(
        Hierarchy::load(dir.path(), Some("wrong")),
        Err(CaError::BadKeyFile { .. })
    ));
    assert!(matches!(
        Hierarchy::load(dir.path(), None),
        Err(CaError::PassphraseRequired(_))
    ));
}

#[test]
fn encrypted_key_file_is_readable_by_openssl() {
    let dir = tempfile::tempdir().unwrap();
    Hierarchy::init(dir.path(), Some("pw")).unwrap();
    let (ok, out) = run(Command::new("openssl")
        .args(["pkey", "-noout", "-passin", "pass:pw", "-in"])
        .arg(dir.path().join("ca/people.key.pem")));
    assert!(ok, "{out}");
}

#[test]
fn more_issuing_cas_by_name_are_created_and_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Hierarchy::init(dir.path(), None).unwrap();
    let devices = h
        .add_issuing_ca(dir.path(), "devices", None, &InitOptions::default())
        .unwrap();
    assert_eq!(devices.name(), "devices");
    assert!(
        h.add_issuing_ca(dir.path(), "devices", None, &InitOptions::default())
            .is_err()
    );
    assert_eq!(
        h.add_issuing_ca(dir.path(), "Bad/Name", None, &InitOptions::default())
            .unwrap_err()
            .invalid_field(),
        Some("ca")
    );
    let loaded = Hierarchy::load(dir.path(), None).unwrap();
    let names: Vec<_> = loaded.issuing_cas().map(|c| c.name().to_string()).collect();
    assert_eq!(names, ["devices", "people"]);
}

#[test]
fn rejects_an_issuing_ca_not_signed_by_the_root() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    Hierarchy::init(a.path(), None).unwrap();
    Hierarchy::init(b.path(), None).unwrap();
    // Swap in another hierarchy's People CA (same names, different root key).
    for f in ["people.cert.pem", "people.key.pem"] {
        std::fs::copy(b.path().join("ca").join(f), a.path().join("ca").join(f)).unwrap();
    }
    assert!(matches!(
        Hierarchy::load(a.path(), None),
        Err(CaError::BadCaCert { .. })
    ));
}

#[test]
fn rejects_a_key_file_readable_by_others() {
    let dir = tempfile::tempdir().unwrap();
    Hierarchy::init(dir.path(), None).unwrap();
    let key = dir.path().join("ca/people.key.pem");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = Hierarchy::load(dir.path(), None).unwrap_err();
    assert!(matches!(err, CaError::BadKeyFile { .. }), "{err}");
    assert!(err.to_string().contains("chmod 600"), "{err}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    Hierarchy::load(dir.path(), None).unwrap();
}
