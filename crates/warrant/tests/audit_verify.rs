//! `warrant audit verify` on a real server's SQLite data dir: a scripted
//! session's chains verify; one byte changed in one row makes it fail and
//! name that row.

#[path = "../../warrant-server/tests/common/mod.rs"]
mod common;
mod support;

use common::Da;
use serde_json::json;
use sqlx::Executor;
use std::process::Command;
use support::*;

fn verify(data: &DataDir) -> (i32, String) {
    verify_dir(&data.path)
}

fn verify_dir(path: &std::path::Path) -> (i32, String) {
    let out = Command::new(warrant_bin())
        .args(["audit", "verify", "--data-dir"])
        .arg(path)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_verify_passes_then_names_the_row_with_a_changed_byte() {
    let data = DataDir::init_with_dsn(None);
    let node = data.serve("node-0");
    let api = Api::login(&node).await;
    // A scripted session: a person, two agents, a refused replay, a
    // revocation with its cascade.
    let alice = api.person(&node, "alice").await;
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
    node.stop();

    let (code, text) = verify(&data);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("audit log verified"), "{text}");

    // One byte of one row: the actor of bot-2's issuance.
    let db = data.path.join("warrant.db");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let (chain, seq): (String, i64) = sqlx::query_as(
        "SELECT chain, seq FROM warrant_audit WHERE event = 'issue' AND agent_id = 'bot-2'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.execute(
        sqlx::query("UPDATE warrant_audit SET actor = 'bdmin' WHERE chain = ? AND seq = ?")
            .bind(&chain)
            .bind(seq),
    )
    .await
    .unwrap();
    pool.close().await;

    let (code, text) = verify(&data);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(&format!("chain {chain} row {seq}:")),
        "the broken row is named: {text}"
    );
}

#[test]
fn rejects_a_data_dir_that_was_never_initialised() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("typo");
    let (code, text) = verify_dir(&missing);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("not an initialised data dir"), "{text}");
    assert!(!missing.exists(), "nothing was created");
}
