#![allow(dead_code)]
//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use warrant_ca::*;

pub const HOUR: Duration = Duration::from_secs(3600);

/// The Go reference's DER vectors: under `AIC_CONFORMANCE_DIR` if set (as
/// in aic's and warrant's tests), else in `shared/conformance` beside the
/// checkout.
fn der_vectors() -> serde_json::Value {
    let dir = std::env::var("AIC_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance")
        });
    let path = dir.join("aic-der-vectors.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; set AIC_CONFORMANCE_DIR to the folder holding aic-der-vectors.json",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// AIC_FULL from the Go reference vectors, read at run time.
pub fn aic_full_der() -> Vec<u8> {
    hex_decode(der_vectors()["AIC_FULL"].as_str().expect("AIC_FULL"))
}

/// PA from the same vectors, used as the person certificate's opaque PA value.
pub fn pa_der() -> Vec<u8> {
    hex_decode(der_vectors()["PA"].as_str().expect("PA"))
}

pub fn hex_decode(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub hierarchy: Hierarchy,
}

impl Fixture {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let hierarchy = Hierarchy::init(dir.path(), None).unwrap();
        Fixture { dir, hierarchy }
    }

    pub fn people(&self) -> &IssuingCa {
        self.hierarchy.ca("people").unwrap()
    }

    /// Writes root.pem and people.pem next to the hierarchy, returns their paths.
    pub fn write_chain(&self) -> (PathBuf, PathBuf) {
        let root = self.dir.path().join("root.pem");
        let people = self.dir.path().join("people.pem");
        std::fs::write(&root, self.hierarchy.root_cert_pem()).unwrap();
        std::fs::write(&people, self.people().cert_pem()).unwrap();
        (root, people)
    }

    pub fn person(&self, key: &GeneratedKey) -> IssuedCert {
        let subject = Subject::for_request(None, "alice", "Warrant", "US").unwrap();
        let san = parse_san("email:alice@corp.example").unwrap();
        let now = SystemTime::now();
        let ext = [ExtraExtension::non_critical(oids::PA_EXTENSION, pa_der())];
        issue_leaf(
            self.people(),
            &LeafSpec {
                profile: Profile::TlsClient,
                subject: &subject,
                san: &san,
                spki_der: &key.spki_der,
                not_before: now,
                not_after: now + 24 * HOUR,
                extensions: &ext,
                urls: None,
            },
        )
        .unwrap()
    }

    /// An agent certificate with the SPIFFE URI SAN (`is_spiffe`).
    pub fn agent(&self, key: &GeneratedKey) -> IssuedCert {
        self.agent_with(key, true)
    }

    pub fn agent_with(&self, key: &GeneratedKey, with_spiffe: bool) -> IssuedCert {
        let subject = Subject::parse("/C=US/O=Warrant/OU=gateway:reader/CN=agent-109").unwrap();
        let san = if with_spiffe {
            let id = spiffe_id("corp.example", "agent-109").unwrap();
            parse_san(&format!("URI:{id}")).unwrap()
        } else {
            Vec::new()
        };
        let now = SystemTime::now();
        let ext = [
            ExtraExtension::non_critical(oids::AIC_EXTENSION, aic_full_der()),
            ExtraExtension::non_critical(oids::PA_EXTENSION, pa_der()),
        ];
        let urls = LeafUrls::new(
            Some("http://127.0.0.1:8443/api/v1/crl/people"),
            Some("http://127.0.0.1:8443/ca/people.crt"),
            None,
        )
        .unwrap();
        issue_leaf(
            self.people(),
            &LeafSpec {
                profile: Profile::AgentProxy,
                subject: &subject,
                san: &san,
                spki_der: &key.spki_der,
                not_before: now,
                not_after: now + HOUR,
                extensions: &ext,
                urls: Some(&urls),
            },
        )
        .unwrap()
    }
}

/// Runs a command, returning (success, stdout+stderr).
pub fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// `openssl verify -CAfile root -untrusted people leaf` (the real binary).
pub fn openssl_verify(fx: &Fixture, leaf_pem: &str, purpose: &str) -> (bool, String) {
    let (root, people) = fx.write_chain();
    let leaf = fx.dir.path().join("leaf.pem");
    std::fs::write(&leaf, leaf_pem).unwrap();
    run(Command::new("openssl")
        .arg("verify")
        .arg("-x509_strict")
        .arg("-purpose")
        .arg(purpose)
        .arg("-CAfile")
        .arg(root)
        .arg("-untrusted")
        .arg(people)
        .arg(leaf))
}
