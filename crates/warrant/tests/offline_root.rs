//! The offline root (issue 47), with the real `warrant` binary and the real
//! `openssl`: `warrant init --root-offline` leaves no root key in the data
//! dir (searched for it); what needs the root later is signed from the
//! export (`warrant ca sign`, `warrant ca root-crl`); and a People CA made
//! with `warrant ca csr`, signed by a root that `openssl` made and keeps,
//! and installed with `warrant ca install`, issues end to end.

#[path = "../../warrant-server/tests/common/mod.rs"]
mod common;
mod support;

use common::{Da, run, write};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::*;

const ROOT_PASSPHRASE: &str = "offline root passphrase";

fn warrant(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    run(Command::new(warrant_bin())
        .args(args)
        .envs(env.iter().copied()))
}

fn path_str(p: &Path) -> String {
    p.display().to_string()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// `openssl verify` of `cert_pem` against `root`, with `intermediate`.
fn openssl_verify(dir: &Path, root: &Path, intermediate: &Path, cert_pem: &str, name: &str) {
    let cert = write(dir, &format!("{name}.pem"), cert_pem);
    let (ok, out) = run(Command::new("openssl")
        .args(["verify", "-CAfile"])
        .arg(root)
        .arg("-untrusted")
        .arg(intermediate)
        .arg(&cert));
    assert!(ok && out.contains(": OK"), "openssl verify {name}: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_root_is_nowhere_in_the_data_dir_and_signs_from_its_export() {
    let export_tmp = tempfile::tempdir().unwrap();
    let export = export_tmp.path().join("root-export");
    let env = [("WARRANT_ROOT_PASSPHRASE", ROOT_PASSPHRASE)];
    let data = DataDir::try_init(None, &["--root-offline", &path_str(&export)], &env)
        .unwrap_or_else(|out| panic!("warrant init --root-offline: {out}"));
    let d = data.path.clone();

    // The root's private key, as the export holds it, decrypted by openssl.
    let key_der = export.join("root.key.der");
    let (ok, out) = run(Command::new("openssl")
        .args(["pkey", "-in"])
        .arg(export.join("root.key.pem"))
        .args([
            "-passin",
            &format!("pass:{ROOT_PASSPHRASE}"),
            "-outform",
            "DER",
            "-out",
        ])
        .arg(&key_der));
    assert!(ok, "the export's root key, decrypted: {out}");
    let key_der = std::fs::read(&key_der).unwrap();
    let (ok, text) = run(Command::new("openssl")
        .args(["ec", "-in"])
        .arg(export.join("root.key.pem"))
        .args([
            "-passin",
            &format!("pass:{ROOT_PASSPHRASE}"),
            "-noout",
            "-text",
        ]));
    assert!(ok, "{text}");
    let scalar: Vec<u8> = text
        .split("priv:")
        .nth(1)
        .and_then(|t| t.split("pub:").next())
        .unwrap()
        .split(|c: char| c == ':' || c.is_whitespace())
        .filter(|h| !h.is_empty())
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    assert!(scalar.len() >= 47, "{text}");
    let encrypted = std::fs::read(export.join("root.key.pem")).unwrap();
    let b64 = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(&key_der)
    };
    for f in files_under(&d) {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            !name.starts_with("root.key"),
            "a root key file in the data dir: {f:?}"
        );
        let bytes = std::fs::read(&f).unwrap();
        for (what, needle) in [
            ("the root key's DER", key_der.as_slice()),
            ("the root key's scalar", scalar.as_slice()),
            ("the root key in base64", &b64.as_bytes()[..64]),
            ("the encrypted export", &encrypted[40..120]),
        ] {
            assert!(!contains(&bytes, needle), "{what} is in {f:?}");
        }
    }
    assert_eq!(
        std::fs::read(d.join("ca/root.cert.pem")).unwrap(),
        std::fs::read(export.join("root.cert.pem")).unwrap()
    );

    // The server runs and issues without the root's key.
    let node = data.serve("offline");
    let api = Api::login(&node).await;
    let (s, ready) = api.get(&node.url("/readyz")).await.unwrap();
    assert_eq!(s, 200, "{ready}");
    let alice = api
        .person_with_pa(&node, "alice", &common::grants(&[("db", "read")], 5, 0))
        .await;
    openssl_verify(
        &d,
        &d.join("ca/root.cert.pem"),
        &d.join("ca/people.cert.pem"),
        &alice.cert_pem,
        "alice",
    );
    let (s, agent) = api
        .post(
            &node.url("/api/v1/certs"),
            &Da::new(&alice, "bot", &[("db", "read")]).body(&alice),
        )
        .await
        .unwrap();
    assert_eq!(s, 200, "{agent}");

    // No root CRL until the offline machine signs one.
    let (s, _) = api.get(&node.url("/api/v1/crl/root")).await.unwrap();
    assert_eq!(s, 404);
    let root_args = [
        "--root-cert",
        &path_str(&export.join("root.cert.pem")),
        "--root-key",
        &path_str(&export.join("root.key.pem")),
    ];
    let crl = d.join("ca/root.crl");
    let mut args = vec!["ca", "root-crl"];
    args.extend_from_slice(&root_args);
    let crl_arg = path_str(&crl);
    args.extend_from_slice(&["--out", &crl_arg]);
    let (ok, out) = warrant(&args, &[("WARRANT_ROOT_PASSPHRASE", "wrong")]);
    assert!(!ok && out.contains("wrong passphrase"), "{out}");
    assert!(!crl.exists());
    let (ok, out) = warrant(&args, &env);
    assert!(ok, "{out}");
    let fetched = api
        .http
        .get(node.url("/api/v1/crl/root"))
        .send()
        .await
        .unwrap();
    assert_eq!(fetched.status().as_u16(), 200);
    let served = d.join("served-root.crl");
    std::fs::write(&served, fetched.bytes().await.unwrap()).unwrap();
    let (ok, text) = run(Command::new("openssl")
        .args(["crl", "-inform", "DER", "-noout", "-text", "-CAfile"])
        .arg(d.join("ca/root.cert.pem"))
        .arg("-in")
        .arg(&served));
    assert!(ok && text.contains("verify OK"), "{text}");
    node.stop();

    // A second issuing CA: its request made here, signed from the export,
    // installed, and issuing after a restart.
    let csr = d.join("devices.csr");
    let (ok, out) = warrant(
        &[
            "ca",
            "csr",
            "--data-dir",
            &path_str(&d),
            "--name",
            "devices",
            "--out",
            &path_str(&csr),
        ],
        &[],
    );
    assert!(ok, "{out}");
    let devices = d.join("devices.cert.pem");
    let mut args = vec!["ca", "sign"];
    args.extend_from_slice(&root_args);
    let (csr_arg, out_arg) = (path_str(&csr), path_str(&devices));
    args.extend_from_slice(&["--csr", &csr_arg, "--days", "365", "--out", &out_arg]);
    let (ok, out) = warrant(&args, &env);
    assert!(ok, "{out}");
    let (ok, out) = warrant(
        &[
            "ca",
            "install",
            "--data-dir",
            &path_str(&d),
            "--name",
            "devices",
            "--cert",
            &out_arg,
        ],
        &[],
    );
    assert!(ok, "{out}");
    let node = data.serve("offline-2");
    let api = Api::login(&node).await;
    let (s, cert) = api
        .post(
            &node.url("/api/v1/certs"),
            &json!({"cn": "sensor-1", "ca": "devices"}),
        )
        .await
        .unwrap();
    assert_eq!(s, 200, "{cert}");
    assert_eq!(cert["ca"], "devices");
    openssl_verify(
        &d,
        &d.join("ca/root.cert.pem"),
        &d.join("ca/devices.cert.pem"),
        cert["cert_pem"].as_str().unwrap(),
        "sensor",
    );
    node.stop();
}

/// A root made and kept by `openssl` (P-384, self-signed).
fn openssl_root(dir: &Path) -> (PathBuf, PathBuf) {
    let (key, cert) = (dir.join("ext-root.key"), dir.join("ext-root.pem"));
    let (ok, out) = run(Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-384",
        ])
        .args([
            "-nodes",
            "-days",
            "3650",
            "-subj",
            "/O=Example Corp/CN=Example Root",
        ])
        .args(["-addext", "basicConstraints=critical,CA:TRUE"])
        .args(["-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert));
    assert!(ok, "openssl req -x509: {out}");
    (key, cert)
}

/// `openssl x509 -req`: the request signed as an issuing CA by `root`.
fn openssl_sign_ca(dir: &Path, root: &(PathBuf, PathBuf), csr: &Path, out: &Path) {
    let ext = write(
        dir,
        "ca.ext",
        "basicConstraints=critical,CA:TRUE,pathlen:0\nkeyUsage=critical,keyCertSign,cRLSign\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n",
    );
    let (ok, text) = run(Command::new("openssl")
        .args(["x509", "-req", "-in"])
        .arg(csr)
        .arg("-CA")
        .arg(&root.1)
        .arg("-CAkey")
        .arg(&root.0)
        .args(["-CAcreateserial", "-days", "365", "-sha384", "-extfile"])
        .arg(&ext)
        .arg("-out")
        .arg(out));
    assert!(ok, "openssl x509 -req: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_people_ca_signed_by_a_root_kept_elsewhere_issues_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let root = openssl_root(tmp.path());
    let data = DataDir::try_init(None, &["--root-cert", &path_str(&root.1)], &[])
        .unwrap_or_else(|out| panic!("warrant init --root-cert: {out}"));
    let d = data.path.clone();
    assert!(!d.join("ca/people.cert.pem").exists());

    // Without an issuing CA the server does not start, and says what to do.
    let out = Command::new(warrant_bin())
        .args(["serve", "--data-dir"])
        .arg(&d)
        .env("WARRANT_LISTEN", "127.0.0.1:0")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && text.contains("warrant ca csr"),
        "{text}"
    );

    let csr = tmp.path().join("people.csr");
    let (ok, out) = warrant(
        &[
            "ca",
            "csr",
            "--data-dir",
            &path_str(&d),
            "--out",
            &path_str(&csr),
        ],
        &[],
    );
    assert!(ok, "{out}");
    let people = tmp.path().join("people.pem");
    openssl_sign_ca(tmp.path(), &root, &csr, &people);
    let (ok, out) = warrant(
        &[
            "ca",
            "install",
            "--data-dir",
            &path_str(&d),
            "--cert",
            &path_str(&people),
        ],
        &[],
    );
    assert!(ok, "{out}");

    let node = data.serve("external");
    let api = Api::login(&node).await;
    let alice = api
        .person_with_pa(&node, "alice", &common::grants(&[("db", "read")], 5, 0))
        .await;
    openssl_verify(tmp.path(), &root.1, &people, &alice.cert_pem, "alice");
    let (s, agent) = api
        .post(
            &node.url("/api/v1/certs"),
            &Da::new(&alice, "bot", &[("db", "read")]).body(&alice),
        )
        .await
        .unwrap();
    assert_eq!(s, 200, "{agent}");
    openssl_verify(
        tmp.path(),
        &root.1,
        &people,
        agent["cert_pem"].as_str().unwrap(),
        "agent",
    );
    // Chains in the answers end at the external root.
    let chain = agent["chain_pem"].as_str().unwrap_or_default();
    assert!(
        chain.contains(std::fs::read_to_string(&root.1).unwrap().trim()),
        "{agent}"
    );
    node.stop();
}

#[test]
fn rejects_an_install_from_another_root_for_another_key_or_without_a_request() {
    let tmp = tempfile::tempdir().unwrap();
    let root = openssl_root(tmp.path());
    let data = DataDir::try_init(None, &["--root-cert", &path_str(&root.1)], &[])
        .unwrap_or_else(|out| panic!("warrant init --root-cert: {out}"));
    let d = path_str(&data.path);
    let install = |cert: &Path| {
        warrant(
            &["ca", "install", "--data-dir", &d, "--cert", &path_str(cert)],
            &[],
        )
    };

    // A request of openssl's own key, signed by our root: no key waits for it.
    let (ok, out) = run(Command::new("openssl")
        .args([
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-subj", "/CN=Other", "-keyout"])
        .arg(tmp.path().join("other.key"))
        .arg("-out")
        .arg(tmp.path().join("other.csr")));
    assert!(ok, "{out}");
    let other = tmp.path().join("other.pem");
    openssl_sign_ca(tmp.path(), &root, &tmp.path().join("other.csr"), &other);
    let (ok, out) = install(&other);
    assert!(!ok && out.contains("warrant ca csr"), "{out}");

    // With our request waiting: a certificate for another key is refused.
    let csr = tmp.path().join("people.csr");
    let (ok, out) = warrant(
        &["ca", "csr", "--data-dir", &d, "--out", &path_str(&csr)],
        &[],
    );
    assert!(ok, "{out}");
    let (ok, out) = install(&other);
    assert!(!ok && out.contains("another key"), "{out}");
    // A second request while one waits is refused.
    let (ok, out) = warrant(&["ca", "csr", "--data-dir", &d], &[]);
    assert!(!ok && out.contains("waiting"), "{out}");

    // Our request signed by another root with the same name is refused.
    let elsewhere = tempfile::tempdir().unwrap();
    let other_root = openssl_root(elsewhere.path());
    let foreign = tmp.path().join("foreign.pem");
    openssl_sign_ca(tmp.path(), &other_root, &csr, &foreign);
    let (ok, out) = install(&foreign);
    assert!(
        !ok && out.contains("not signed by this data dir's root"),
        "{out}"
    );
    assert!(!data.path.join("ca/people.cert.pem").exists());

    // An offline root without a passphrase for its export: nothing is made.
    let export = tmp.path().join("export");
    match DataDir::try_init(None, &["--root-offline", &path_str(&export)], &[]) {
        Ok(d) => panic!(
            "init --root-offline without a passphrase made {}",
            d.path.display()
        ),
        Err(out) => assert!(out.contains("WARRANT_ROOT_PASSPHRASE"), "{out}"),
    }
    assert!(!export.exists());
}

/// `ca rotate` signs the new CA with the root on this machine; with the root
/// offline it is refused, naming the offline step, and writes nothing.
#[test]
fn rejects_rotating_under_an_offline_root() {
    let export_tmp = tempfile::tempdir().unwrap();
    let export = export_tmp.path().join("root-export");
    let env = [("WARRANT_ROOT_PASSPHRASE", ROOT_PASSPHRASE)];
    let data = DataDir::try_init(None, &["--root-offline", &path_str(&export)], &env)
        .unwrap_or_else(|out| panic!("warrant init --root-offline: {out}"));
    let before = files_under(&data.path.join("ca"));
    let (ok, out) = warrant(
        &[
            "ca",
            "rotate",
            "people",
            "--data-dir",
            &path_str(&data.path),
        ],
        &env,
    );
    assert!(!ok && out.contains("the root CA's key is offline"), "{out}");
    assert_eq!(files_under(&data.path.join("ca")), before);
}
