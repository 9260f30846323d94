//! `warrant audit verify` and `warrant audit witness` against real servers
//! on SQLite data dirs: a session's log verifies against a checkpoint saved
//! over HTTP; truncation, one changed leaf, a swapped pair and a fork
//! between two nodes are each named; the witness cosigns, checks
//! consistency, and refuses a rollback. And the independent verifier
//! (Python, `tests/independent/verify_log.py`) checks an inclusion proof,
//! a consistency proof and the checkpoint's signature.

#[path = "../../warrant-server/tests/common/mod.rs"]
mod common;
mod support;

use common::Da;
use serde_json::{Value, json};
use sqlx::Executor;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::*;

fn run_warrant(args: &[&str], extra: &[&Path]) -> (i32, String) {
    let out = Command::new(warrant_bin())
        .args(args)
        .args(extra)
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn verify(data: &DataDir, checkpoint: Option<&Path>) -> (i32, String) {
    let mut extra: Vec<&Path> = vec![&data.path];
    let mut args = vec!["audit", "verify"];
    if let Some(c) = checkpoint {
        args.push("--checkpoint");
        extra = vec![c, Path::new("--data-dir"), &data.path];
    } else {
        args.push("--data-dir");
    }
    run_warrant(&args, &extra)
}

/// A session on `node`: a person, two agents, a refused replay, a
/// revocation with its cascade.
async fn session(api: &Api, node: &Node, person: &str) {
    let alice = api.person(node, person).await;
    let first = Da::new(&alice, "bot-1", &[]).body(&alice);
    let (s, b) = api.post(&node.url("/api/v1/certs"), &first).await.unwrap();
    assert_eq!(s, 200, "{b}");
    let second = Da::new(&alice, "bot-2", &[]);
    let (s, b) = api
        .post(&node.url("/api/v1/certs"), &second.body(&alice))
        .await
        .unwrap();
    assert_eq!(s, 200, "{b}");
    let (s, _) = api.post(&node.url("/api/v1/certs"), &first).await.unwrap();
    assert_eq!(s, 403);
    let (s, b) = api
        .post(
            &node.url(&format!("/api/v1/cert/people/{}/revoke", alice.serial)),
            &json!({"reason": "keyCompromise"}),
        )
        .await
        .unwrap();
    assert_eq!((s, b["cascade_count"].as_u64()), (200, Some(2)), "{b}");
}

/// Saves the node's checkpoint listing (signed now) to `dir/name`.
async fn save_checkpoint(node: &Node, dir: &Path, name: &str) -> (PathBuf, Value) {
    // The refusal's row is queued without waiting: let it land first.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let resp = reqwest::get(node.url("/api/v1/audit/checkpoint?fresh=true"))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    let path = dir.join(name);
    std::fs::write(&path, &text).unwrap();
    (path, serde_json::from_str(&text).unwrap())
}

async fn sqlite(data: &DataDir) -> sqlx::SqlitePool {
    let db = data.path.join("warrant.db");
    sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap()
}

/// One certificate row of the data dir's log: serial and index, by agent.
async fn cert_at(pool: &sqlx::SqlitePool, agent: &str) -> (String, i64) {
    sqlx::query_as("SELECT serial, log_index FROM warrant_certs WHERE agent_id = ?")
        .bind(agent)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// A served data dir with a session, its checkpoint saved; the node stopped.
async fn logged_data_dir(tmp: &Path) -> (DataDir, PathBuf) {
    let data = DataDir::init_with_dsn(None);
    let node = data.serve("node-0");
    let api = Api::login(&node).await;
    session(&api, &node, "alice").await;
    let (file, _) = save_checkpoint(&node, tmp, "checkpoint.json").await;
    node.stop();
    (data, file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_verify_holds_the_log_to_a_saved_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, file) = logged_data_dir(tmp.path()).await;
    let (code, text) = verify(&data, None);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("audit log verified"), "{text}");
    let (code, text) = verify(&data, Some(&file));
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("consistent with 1 saved checkpoint"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_a_truncated_log() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, file) = logged_data_dir(tmp.path()).await;
    // The newest certificate row goes, behind the log's back.
    let pool = sqlite(&data).await;
    pool.execute(
        "DELETE FROM warrant_certs WHERE log_index = (SELECT MAX(log_index) FROM warrant_certs)",
    )
    .await
    .unwrap();
    pool.close().await;
    let (code, text) = verify(&data, Some(&file));
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("truncated"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_one_changed_leaf() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, file) = logged_data_dir(tmp.path()).await;
    let pool = sqlite(&data).await;
    let (serial, _) = cert_at(&pool, "bot-2").await;
    pool.execute(
        sqlx::query("UPDATE warrant_certs SET capabilities = '[\"admin\"]' WHERE serial = ?")
            .bind(&serial),
    )
    .await
    .unwrap();
    pool.close().await;
    let (code, text) = verify(&data, Some(&file));
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("a changed leaf"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_a_swapped_pair() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, file) = logged_data_dir(tmp.path()).await;
    let pool = sqlite(&data).await;
    let (s1, i1) = cert_at(&pool, "bot-1").await;
    let (s2, i2) = cert_at(&pool, "bot-2").await;
    for (serial, index) in [(&s1, -1), (&s2, i1), (&s1, i2)] {
        pool.execute(
            sqlx::query("UPDATE warrant_certs SET log_index = ? WHERE serial = ?")
                .bind(index)
                .bind(serial),
        )
        .await
        .unwrap();
    }
    pool.close().await;
    let (code, text) = verify(&data, Some(&file));
    assert_eq!(code, 1, "{text}");
    let (a, b) = (i1.min(i2), i1.max(i2));
    assert!(
        text.contains(&format!("reordered: leaves {a} and {b} are swapped")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_a_fork_between_two_nodes() {
    let tmp = tempfile::tempdir().unwrap();
    // Two nodes with one log key (a copied data dir), each on its own
    // database: node A's checkpoint is saved; node B's tree is then made
    // to claim A's tree's name and B signs it (it holds the key): two
    // different trees for one name and size, both signed.
    let a = DataDir::init_with_dsn(None);
    let b = a.copy();
    let node_a = a.serve("node-a");
    let api = Api::login(&node_a).await;
    session(&api, &node_a, "alice").await;
    let (file, listing) = save_checkpoint(&node_a, tmp.path(), "a.json").await;
    node_a.stop();
    let a_tree = listing["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|c| c["size"].as_u64())
        .unwrap()["tree"]
        .as_str()
        .unwrap()
        .to_string();
    let node_b = b.serve("node-b");
    let api = Api::login(&node_b).await;
    session(&api, &node_b, "mallory").await;
    let extra = api.person(&node_b, "mallory-2").await;
    assert!(!extra.serial.is_empty());
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    node_b.stop();
    let pool = sqlite(&b).await;
    pool.execute(
        sqlx::query(
            "UPDATE warrant_log_trees SET name = ?, checkpoint = NULL, checkpoint_size = 0 \
             WHERE size = (SELECT MAX(size) FROM warrant_log_trees)",
        )
        .bind(&a_tree),
    )
    .await
    .unwrap();
    pool.close().await;
    // B's start signs the trees that have no checkpoint.
    let node_b = b.serve("node-b2");
    node_b.stop();
    let (code, text) = verify(&b, Some(&file));
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("a fork") && text.contains(&a_tree), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_witness_cosigns_and_refuses_a_rollback() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("witness");
    let data = DataDir::init_with_dsn(None);
    let node = data.serve("node-0");
    let api = Api::login(&node).await;
    session(&api, &node, "alice").await;
    let witness = |node: &Node| {
        run_warrant(
            &["audit", "witness", "--log", &node.base, "--state"],
            &[&state],
        )
    };
    let (code, text) = witness(&node);
    assert_eq!(code, 0, "{text}");
    // What it holds: each tree's checkpoint, cosigned by the witness's key.
    let vkey = text
        .lines()
        .find_map(|l| l.strip_prefix("witness "))
        .unwrap()
        .to_string();
    let witness_key = warrant_tlog::WitnessVerifier::parse(&vkey).unwrap();
    let held: Vec<PathBuf> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "checkpoint"))
        .collect();
    assert!(!held.is_empty());
    for p in &held {
        let note = warrant_tlog::SignedNote::parse(&std::fs::read_to_string(p).unwrap()).unwrap();
        witness_key.verify(&note).unwrap();
    }
    node.stop();
    // A snapshot of the database at this point, for the rollback below.
    let db = data.path.join("warrant.db");
    let snapshot = tmp.path().join("snapshot.db");
    std::fs::copy(&db, &snapshot).unwrap();
    // The log grows; the witness checks the consistency and cosigns again.
    let node = data.serve("node-1");
    let api = Api::login(&node).await;
    session(&api, &node, "bob").await;
    let (code, text) = witness(&node);
    assert_eq!(code, 0, "{text}");
    node.stop();
    // The operator restores the old database: the trees the witness saw
    // grow are smaller now.
    std::fs::copy(&snapshot, &db).unwrap();
    for side in ["warrant.db-wal", "warrant.db-shm"] {
        let _ = std::fs::remove_file(data.path.join(side));
    }
    let node = data.serve("node-2");
    let (code, text) = witness(&node);
    node.stop();
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("refused: rollback"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_independent_verifier_checks_proofs_and_the_checkpoint() {
    let python = Command::new("python3")
        .args(["-c", "import cryptography"])
        .status()
        .expect("python3 is required (installed by .ci/run)");
    assert!(python.success(), "python3 needs the cryptography package");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/independent/verify_log.py");
    let tmp = tempfile::tempdir().unwrap();
    let data = DataDir::init_with_dsn(None);
    let node = data.serve("node-0");
    let api = Api::login(&node).await;
    // A certificate issued over HTTP.
    let alice = api.person(&node, "alice").await;
    let pem = tmp.path().join("alice.pem");
    std::fs::write(&pem, &alice.cert_pem).unwrap();
    let (_, listing) = save_checkpoint(&node, tmp.path(), "listing.json").await;
    let key = listing["key"].as_str().unwrap().to_string();
    let (s, proof) = api
        .get(&node.url(&format!(
            "/api/v1/audit/proof/inclusion?serial={}",
            alice.serial
        )))
        .await
        .unwrap();
    assert_eq!(s, 200, "{proof}");
    let inclusion = tmp.path().join("inclusion.json");
    std::fs::write(&inclusion, proof.to_string()).unwrap();
    let old_note = tmp.path().join("old.note");
    std::fs::write(&old_note, proof["checkpoint"].as_str().unwrap()).unwrap();
    let py = |args: &[&str], files: &[&Path]| {
        let out = Command::new("python3")
            .arg(&script)
            .args(args)
            .args(files)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let (code, text) = py(&["selftest"], &[]);
    assert_eq!(code, 0, "{text}");
    let (code, text) = py(&["checkpoint", "--key", &key, "--note"], &[&old_note]);
    assert_eq!(code, 0, "{text}");
    let (code, text) = py(
        &["inclusion", "--key", &key, "--cert-pem"],
        &[&pem, Path::new("--response"), &inclusion],
    );
    assert_eq!(code, 0, "{text}");
    // The log grows; a consistency proof from the size the proof came with.
    let tree = proof["tree"].as_str().unwrap();
    for i in 0..3 {
        let da = Da::new(&alice, &format!("bot-{i}"), &[]).body(&alice);
        let (s, b) = api.post(&node.url("/api/v1/certs"), &da).await.unwrap();
        assert_eq!(s, 200, "{b}");
    }
    let (s, cons) = api
        .get(&node.url(&format!(
            "/api/v1/audit/proof/consistency?tree={tree}&from={}",
            proof["size"]
        )))
        .await
        .unwrap();
    assert_eq!(s, 200, "{cons}");
    assert!(cons["to"].as_u64() > proof["size"].as_u64(), "{cons}");
    let consistency = tmp.path().join("consistency.json");
    std::fs::write(&consistency, cons.to_string()).unwrap();
    let (code, text) = py(
        &["consistency", "--key", &key, "--old"],
        &[&old_note, Path::new("--response"), &consistency],
    );
    assert_eq!(code, 0, "{text}");
    // A proof with one hash changed fails there too.
    let mut bad = proof.clone();
    bad["leaf"] = json!(bad["leaf_hash"].clone());
    std::fs::write(&inclusion, bad.to_string()).unwrap();
    let (code, text) = py(
        &["inclusion", "--key", &key, "--cert-pem"],
        &[&pem, Path::new("--response"), &inclusion],
    );
    assert_eq!(code, 1, "{text}");
    node.stop();
}

#[test]
fn rejects_a_data_dir_that_was_never_initialised() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("typo");
    let (code, text) = run_warrant(&["audit", "verify", "--data-dir"], &[&missing]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("not an initialised data dir"), "{text}");
    assert!(!missing.exists(), "nothing was created");
}
