//! CA keys in a PKCS#11 token, against the real SoftHSM2 (Debian's
//! `softhsm2`; `.ci/run` installs it). Without it these tests fail under
//! CI and skip, saying so, elsewhere.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use aws_lc_rs::signature::{self, UnparsedPublicKey};
use warrant_ca::{
    CaError, Hierarchy, InitOptions, KeyPlacement, Pkcs11Access, Pkcs11Key, Pkcs11Uri,
    PublicKeyKind, TokenPlacement,
};
use zeroize::Zeroizing;

const PIN: &str = "4321";

/// A SoftHSM2 of its own with one token, reached through `SOFTHSM2_CONF`.
/// The variable is process-wide, so every test of this file uses the one
/// installation (`hsm()`), each with a token of its own label.
struct SoftHsm {
    dir: PathBuf,
    module: PathBuf,
}

fn hsm() -> Option<&'static SoftHsm> {
    static HSM: std::sync::OnceLock<Option<SoftHsm>> = std::sync::OnceLock::new();
    HSM.get_or_init(|| {
        let module = [
            "/usr/lib/softhsm/libsofthsm2.so",
            "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
            "/usr/lib/aarch64-linux-gnu/softhsm/libsofthsm2.so",
        ]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
        let Some(module) = module else {
            assert!(
                std::env::var_os("CI").is_none(),
                "SoftHSM2 (apt-get install softhsm2) is required by this test and CI is set"
            );
            eprintln!("skipping: SoftHSM2 is not installed");
            return None;
        };
        let dir = tempfile::tempdir().unwrap().keep();
        std::fs::create_dir(dir.join("tokens")).unwrap();
        let conf = dir.join("softhsm2.conf");
        std::fs::write(
            &conf,
            format!(
                "directories.tokendir = {}\nobjectstore.backend = file\nlog.level = ERROR\n",
                dir.join("tokens").display()
            ),
        )
        .unwrap();
        // SAFETY: set once, before any thread of this process loads the
        // module (the OnceLock runs this first), and never changed.
        unsafe { std::env::set_var("SOFTHSM2_CONF", &conf) };
        Some(SoftHsm { dir, module })
    })
    .as_ref()
}

impl SoftHsm {
    /// A new token labelled `label`; its URI, with the module.
    fn token(&self, label: &str) -> Pkcs11Uri {
        let out = Command::new("softhsm2-util")
            .env("SOFTHSM2_CONF", self.dir.join("softhsm2.conf"))
            .args(["--init-token", "--free", "--label", label])
            .args(["--pin", PIN, "--so-pin", "8765"])
            .output()
            .expect("softhsm2-util");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Pkcs11Uri::parse(&format!(
            "pkcs11:token={label}?module-path={}",
            self.module.display()
        ))
        .unwrap()
    }
}

fn access(pin: &str) -> Pkcs11Access {
    Pkcs11Access {
        pin: Some(Zeroizing::new(pin.to_string())),
        default_module: None,
    }
}

#[test]
fn token_keys_sign_on_many_threads_and_every_signature_verifies() {
    let Some(hsm) = hsm() else { return };
    let token = hsm.token("threads");
    for (kind, label, alg) in [
        (
            PublicKeyKind::EcdsaP256,
            "p256",
            &signature::ECDSA_P256_SHA256_FIXED,
        ),
        (
            PublicKeyKind::EcdsaP384,
            "p384",
            &signature::ECDSA_P384_SHA384_FIXED,
        ),
    ] {
        let (key, uri) = Pkcs11Key::generate(&token, label, kind, &access(PIN)).unwrap();
        assert_eq!(uri.object.as_deref(), Some(label));
        let key = Arc::new(key);
        let spki = key.spki_der().to_vec();
        let point = spki_point(&spki);
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let key = Arc::clone(&key);
                std::thread::spawn(move || {
                    (0..40)
                        .map(|i| {
                            let msg = format!("message {t}/{i}").into_bytes();
                            let sig = key.sign_fixed(&msg).unwrap();
                            (msg, sig)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for t in threads {
            for (msg, sig) in t.join().unwrap() {
                UnparsedPublicKey::new(alg, &point)
                    .verify(&msg, &sig)
                    .unwrap_or_else(|_| panic!("{label}: a signature does not verify"));
            }
        }
        // The same key opened again by its URI is the same public key.
        let again = Pkcs11Key::open(&uri, &access(PIN)).unwrap();
        assert_eq!(again.spki_der(), spki);
    }
}

/// The EC point of an SPKI (its last 65 or 97 bytes).
fn spki_point(spki: &[u8]) -> Vec<u8> {
    let len = if spki.len() < 100 { 65 } else { 97 };
    spki[spki.len() - len..].to_vec()
}

#[test]
fn a_hierarchy_made_in_a_token_loads_from_its_uris_and_reuses_labelled_keys() {
    let Some(hsm) = hsm() else { return };
    let token = hsm.token("hierarchy");
    let opts = InitOptions {
        keys: KeyPlacement::Token(Box::new(TokenPlacement {
            token: token.clone(),
            keys: Default::default(),
            access: access(PIN),
        })),
        ..Default::default()
    };
    let first = tempfile::tempdir().unwrap();
    let made = Hierarchy::init_with(first.path(), None, &opts).unwrap();
    let people_uri = made.default_ca().unwrap().key_uri().unwrap();
    assert!(people_uri.contains("object=warrant-people"), "{people_uri}");
    assert!(!first.path().join("ca/people.key.pem").exists());
    assert!(!first.path().join("ca/root.key.pem").exists());

    let loaded = Hierarchy::load_with(first.path(), None, &access(PIN)).unwrap();
    loaded.check_keys().unwrap();
    assert_eq!(
        loaded.default_ca().unwrap().spki_der(),
        made.default_ca().unwrap().spki_der()
    );

    // A second hierarchy on the same token finds the labelled keys and uses
    // them instead of making new ones.
    let second = tempfile::tempdir().unwrap();
    let again = Hierarchy::init_with(second.path(), None, &opts).unwrap();
    assert_eq!(
        again.default_ca().unwrap().spki_der(),
        made.default_ca().unwrap().spki_der()
    );
}

#[test]
fn rejects_loading_without_a_pin_or_with_a_wrong_one() {
    let Some(hsm) = hsm() else { return };
    let token = hsm.token("refusals");
    let opts = InitOptions {
        keys: KeyPlacement::Token(Box::new(TokenPlacement {
            token: token.clone(),
            keys: Default::default(),
            access: access(PIN),
        })),
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    Hierarchy::init_with(dir.path(), None, &opts).unwrap();
    let err = Hierarchy::load_with(dir.path(), None, &Pkcs11Access::default()).unwrap_err();
    assert!(
        matches!(&err, CaError::KeyUnavailable { reason, .. } if reason.contains("no PIN")),
        "{err}"
    );
    let err = Hierarchy::load_with(dir.path(), None, &access("0000")).unwrap_err();
    assert!(
        matches!(&err, CaError::KeyUnavailable { reason, .. } if reason.contains("C_Login")),
        "{err}"
    );
}

#[test]
fn rejects_a_uri_that_names_no_key_or_a_key_the_token_lacks() {
    let Some(hsm) = hsm() else { return };
    let token = hsm.token("missing");
    let err = Pkcs11Key::open(&token, &access(PIN)).unwrap_err();
    assert_eq!(err.invalid_field(), Some("pkcs11_uri"), "{err}");
    let missing = Pkcs11Uri {
        object: Some("nothing-here".into()),
        ..token.clone()
    };
    let err = Pkcs11Key::open(&missing, &access(PIN)).unwrap_err();
    assert!(err.is_key_unavailable(), "{err}");
    assert!(err.to_string().contains("no EC private key"), "{err}");
    let other = Pkcs11Uri {
        token: Some("no-such-token".into()),
        object: Some("x".into()),
        ..token
    };
    let err = Pkcs11Key::open(&other, &access(PIN)).unwrap_err();
    assert!(err.to_string().contains("no token matches"), "{err}");
}
