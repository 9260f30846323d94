//! See `main.rs`. Item 10 of the security pass: a storage fault stops the
//! write path. After the first failed fsync of the SQLite WAL, no issuance
//! is answered 200 again, even once the disk works again, and `/readyz`
//! says not ready until the server is restarted. The fault is injected with
//! `warrant_store::faults` (a test-only cargo feature) under this test's own
//! data directory.

#[allow(unused_imports)]
use crate::common::*;

use serde_json::{Value, json};
use warrant_server::ErrorKey;
use warrant_store::faults;

fn pa() -> Value {
    json!({
        "grants": [{"scheme_id": "db", "capability_id": "read"}],
        "delegation_policy": {"allowed_mode": 0, "max_agents": 1000}
    })
}

async fn issue_agent(srv: &TestServer, alice: &Person, n: usize) -> (u16, Value) {
    let da = Da::new(alice, &format!("bot-{n}"), &[("db", "read")]);
    srv.post("/api/v1/certs", &da.body(alice)).await
}

/// A 503 `api.unavailable` that tells the client when to retry.
async fn assert_unavailable_with_retry_after(srv: &TestServer, body: &Value) {
    let resp = srv
        .http
        .post(srv.url("/api/v1/certs"))
        .bearer_auth(&srv.token)
        .json(body)
        .send()
        .await
        .unwrap();
    assert!(
        resp.headers().contains_key("retry-after"),
        "{:?}",
        resp.headers()
    );
    assert_error(&decode(resp).await, ErrorKey::Unavailable);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_issuance_after_a_failed_fsync() {
    let srv = TestServer::start_with(None, "durability = \"durable\"\n").await;
    let data = srv.dir.path().to_path_buf();
    let alice = srv.person("alice", pa()).await;
    let ok = issue_agent(&srv, &alice, 0).await;
    assert_eq!(ok.0, 200, "{}", ok.1);
    assert_eq!(srv.get("/readyz").await.0, 200);

    faults::fail_fsyncs(&data);
    let failed = issue_agent(&srv, &alice, 1).await;
    assert_error(&failed, ErrorKey::Unavailable);

    // The disk works again: still no 200, for agents or people.
    faults::clear(&data);
    for n in 2..6 {
        assert_error(&issue_agent(&srv, &alice, n).await, ErrorKey::Unavailable);
    }
    let person = srv
        .post(
            "/api/v1/certs",
            &json!({"cn": "bob", "principal_authorization": pa()}),
        )
        .await;
    assert_error(&person, ErrorKey::Unavailable);
    let da = Da::new(&alice, "bot-retry", &[("db", "read")]);
    assert_unavailable_with_retry_after(&srv, &da.body(&alice)).await;

    let (status, ready) = srv.get("/readyz").await;
    assert_eq!(status, 503, "{ready}");
    assert_eq!(ready["write_path"], false, "{ready}");
    srv.stop().await;
}
