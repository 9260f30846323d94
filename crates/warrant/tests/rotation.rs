//! Issuing-CA rotation under load (issue 47), with the real binary: Gust
//! (`warrant bench --target`) drives agent issuance at a steady rate while
//! `warrant ca rotate people` makes the next People CA and it activates.
//! No request fails; both CAs issue; certificates of both verify with
//! `openssl verify` against the bundle; a DA signed before the rotation
//! issues after it; revoking a person issued by the old CA cascades to
//! agents issued by the new one, and the old CA's CRL still lists it. On
//! SQLite, and on PostgreSQL with two nodes.

#[path = "../../warrant-server/tests/common/mod.rs"]
mod common;
mod support;

use common::{Backend, Da, Person, TestDb, run, write};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::*;

/// How often each node re-reads `ca/`.
const RELOAD: (&str, &str) = ("WARRANT_KEYS_CA_RELOAD_INTERVAL", "200ms");
const LOAD_SECS: u64 = 8;
/// The bench's `--agents`: the most requests it holds in flight at 150/s.
const IN_FLIGHT: u64 = 32;

/// A data dir whose agents may ask for `gateway:admin` (what the bench's
/// agents ask for), reloading `ca/` often.
fn data_dir(db: &TestDb) -> DataDir {
    let mut data = DataDir::try_init(db.dsn.clone(), &[], &[RELOAD])
        .unwrap_or_else(|out| panic!("warrant init: {out}"));
    let toml = data.path.join("warrant.toml");
    let text = std::fs::read_to_string(&toml).unwrap().replace(
        "# agent_gateway_roles = [\"gateway:reader\"]",
        "agent_gateway_roles = [\"gateway:reader\", \"gateway:admin\"]",
    );
    std::fs::write(&toml, text).unwrap();
    data.env.push((RELOAD.0.into(), RELOAD.1.into()));
    data
}

/// `warrant bench --target` at a steady rate for `LOAD_SECS`, as a child.
fn start_load(node: &Node, token: &str, out: &Path) -> Child {
    Command::new(warrant_bin())
        .args(["bench", "--target", &node.base, "--token", token])
        .args(["--scenario", "aic", "--agents", &IN_FLIGHT.to_string()])
        .args(["--qps", "150"])
        .args(["--duration", &format!("{LOAD_SECS}s"), "--out"])
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The finished load's totals: it ran, and nothing failed. The bench holds at
/// most `IN_FLIGHT` (32) requests in flight, so a pause of the node longer than
/// 32 / 150 s (213 ms) makes it skip the due requests it has no room for rather
/// than queue them: those were never sent, so they cannot fail, and at most 1 %
/// of the schedule may be skipped. (A 2-core box running two nodes, PostgreSQL
/// and two loads pauses a node for 130-180 ms now and then; with 8 in flight
/// that skipped 6-14 requests.)
fn finish_load(child: Child, out: &Path, name: &str) {
    let done = child.wait_with_output().unwrap();
    assert!(
        done.status.success(),
        "{name}: bench: {}",
        String::from_utf8_lossy(&done.stderr)
    );
    let report: Value = serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap();
    let t = &report["totals"];
    assert!(t["success"].as_u64().unwrap() > 300, "{name}: {t}");
    assert_eq!(t["failures"], 0, "{name}: {t}");
    let dropped = t["dropped"].as_u64().unwrap();
    assert!(dropped * 100 <= 150 * LOAD_SECS, "{name}: {t}");
}

/// `warrant_certs_issued_total` of `ca` for agent certificates on `node`.
async fn issued_by(node: &Node, ca: &str) -> f64 {
    let text = reqwest::get(node.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series = format!(r#"warrant_certs_issued_total{{ca="{ca}",profile="agent-proxy"}}"#);
    text.lines()
        .find_map(|l| l.strip_prefix(&series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

fn openssl_verify(dir: &Path, bundle: &Path, cert_pem: &str, name: &str) {
    let cert = write(dir, &format!("{name}.pem"), cert_pem);
    let (ok, out) = run(Command::new("openssl")
        .args(["verify", "-CAfile"])
        .arg(dir.join("ca/root.cert.pem"))
        .arg("-untrusted")
        .arg(bundle)
        .arg(&cert));
    assert!(ok && out.contains(": OK"), "openssl verify {name}: {out}");
}

async fn rotation_under_load(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let data_a = data_dir(&db);
    // A second node on its own copy of the data dir, when the database is
    // shared.
    let data_b = (backend != Backend::Sqlite).then(|| data_a.copy());
    let node_a = data_a.serve("node-a");
    let node_b = data_b.as_ref().map(|d| d.serve("node-b"));
    let api = Api::login(&node_a).await;
    let pa = common::grants(&[("db", "read")], 1_000, 0);
    let alice = api.person_with_pa(&node_a, "alice", &pa).await;
    // Signed now, sent after the rotation.
    let early_da = Da::new(&alice, "early-bot", &[("db", "read")]).body(&alice);

    let dir = tempfile::tempdir().unwrap();
    let loads: Vec<(Child, std::path::PathBuf, &str)> = std::iter::once((&node_a, "node-a"))
        .chain(node_b.as_ref().map(|n| (n, "node-b")))
        .map(|(node, name)| {
            let out = dir.path().join(format!("{name}.json"));
            (start_load(node, &api.token, &out), out, name)
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (ok, out) = run(Command::new(warrant_bin())
        .args([
            "ca",
            "rotate",
            "people",
            "--activate-in",
            "2s",
            "--data-dir",
        ])
        .arg(&data_a.path)
        .envs(data_a.env.iter().map(|(k, v)| (k, v))));
    assert!(ok, "warrant ca rotate: {out}");
    assert!(out.contains("\"people-2\""), "{out}");
    if let Some(b) = &data_b {
        for file in ["people-2.cert.pem", "people-2.key.pem", "people.rotations"] {
            std::fs::copy(
                data_a.path.join("ca").join(file),
                b.path.join("ca").join(file),
            )
            .unwrap();
        }
    }
    for (child, out, name) in loads {
        finish_load(child, &out, name);
    }
    for node in std::iter::once(&node_a).chain(node_b.as_ref()) {
        let (old, new) = (
            issued_by(node, "people").await,
            issued_by(node, "people-2").await,
        );
        assert!(
            old > 0.0 && new > 0.0,
            "{}: people {old}, people-2 {new}",
            node.name
        );
    }

    // After the activation: the new CA issues, for the old principal, from
    // a DA signed before the rotation; the principal keeps its UID.
    let (s, early) = api
        .post(&node_a.url("/api/v1/certs"), &early_da)
        .await
        .unwrap();
    assert_eq!(s, 200, "{early}");
    assert_eq!(early["ca"], "people-2", "{early}");
    assert_eq!(early["principal_uid"], alice.uid.as_str(), "{early}");
    let bob: Person = api.person(&node_a, "bob").await;
    let (s, bob_row) = api
        .get(&node_a.url(&format!("/api/v1/cert/people-2/{}", bob.serial)))
        .await
        .unwrap();
    assert_eq!(s, 200, "bob is issued by the new CA: {bob_row}");

    // The bundle: both People CAs; certificates of both verify with it.
    let bundle_pem = api
        .http
        .get(node_a.url("/api/v1/ca/people"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        bundle_pem.matches("BEGIN CERTIFICATE").count(),
        2,
        "{bundle_pem}"
    );
    let d = &data_a.path;
    let bundle = write(d, "people-bundle.pem", &bundle_pem);
    openssl_verify(d, &bundle, &alice.cert_pem, "alice-old-ca");
    openssl_verify(d, &bundle, &bob.cert_pem, "bob-new-ca");
    openssl_verify(
        d,
        &bundle,
        early["cert_pem"].as_str().unwrap(),
        "agent-new-ca",
    );

    // Revoking alice (old CA) revokes her agent of the new CA; the old CA's
    // CRL lists her, the new one's her agent.
    let (s, r) = api
        .post(
            &node_a.url(&format!("/api/v1/cert/people/{}/revoke", alice.serial)),
            &json!({"reason": "keyCompromise"}),
        )
        .await
        .unwrap();
    assert_eq!(s, 200, "{r}");
    let agent_serial = early["serial_number"].as_str().unwrap();
    let (s, row) = api
        .get(&node_a.url(&format!("/api/v1/cert/people-2/{agent_serial}")))
        .await
        .unwrap();
    assert_eq!(s, 200, "{row}");
    assert_eq!(row["status"], "R", "{row}");
    for (ca, serial) in [
        ("people", alice.serial.as_str()),
        ("people-2", agent_serial),
    ] {
        let der = api
            .http
            .get(node_a.url(&format!("/api/v1/crl/{ca}")))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        let crl = d.join(format!("{ca}.crl"));
        std::fs::write(&crl, der).unwrap();
        let (ok, text) = run(Command::new("openssl")
            .args(["crl", "-inform", "DER", "-noout", "-text", "-CAfile"])
            .arg(d.join(format!("ca/{ca}.cert.pem")))
            .arg("-in")
            .arg(&crl));
        assert!(ok && text.contains("verify OK"), "{ca}: {text}");
        assert!(
            text.to_uppercase().contains(&serial.to_uppercase()),
            "{ca}'s CRL lists {serial}: {text}"
        );
    }
    node_a.stop();
    if let Some(b) = node_b {
        b.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_under_load_sqlite() {
    rotation_under_load(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_under_load_on_two_postgresql_nodes() {
    rotation_under_load(Backend::Postgres).await;
}

/// Every file under `ca/`, with its bytes.
fn ca_files(data: &DataDir) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    files_under(&data.path.join("ca"))
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

#[test]
fn rejects_rotating_a_ca_that_does_not_exist_and_changes_nothing() {
    let data = DataDir::init_with_dsn(None);
    let before = ca_files(&data);
    let refusals: [(&[&str], &str); 4] = [
        (&["nobody"], "\"nobody\" is not an issuing CA"),
        (&["root"], "\"root\" is not an issuing CA"),
        (
            &["people", "--activate-at", "next tuesday"],
            "--activate-at \"next tuesday\": RFC 3339 or Unix seconds",
        ),
        (&["people", "--activate-in", "soon"], "--activate-in"),
    ];
    for (args, expected) in refusals {
        let (ok, out) = run(Command::new(warrant_bin())
            .args(["ca", "rotate"])
            .args(args)
            .arg("--data-dir")
            .arg(&data.path));
        assert!(!ok && out.contains(expected), "ca rotate {args:?}: {out}");
        assert!(ca_files(&data) == before, "ca rotate {args:?} changed ca/");
    }
}
