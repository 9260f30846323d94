//! See `main.rs`. Two real servers on one database (`second_node`), on
//! SQLite, PostgreSQL and MariaDB: a user, role or token created, changed or
//! deleted on node A takes effect on node B within 2 s (read-through on a
//! cache miss, plus the auth change feed). Then the token rules of issue 29
//! item 8: the lifetime cap, the one-time bootstrap token, pruning.

use crate::common::*;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use warrant_server::{ErrorKey, RunningServer};

/// The contract: a change on one node is in force on every node within this.
const WITHIN: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(50);

/// Node B of a deployment whose node A is `srv`.
struct NodeB {
    server: Option<RunningServer>,
    base: String,
}

impl NodeB {
    async fn start(srv: &TestServer) -> NodeB {
        let (server, base) = srv.second_node().await;
        NodeB {
            server: Some(server),
            base,
        }
    }

    async fn stop(mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown().await;
        }
    }
}

async fn send(
    srv: &TestServer,
    method: reqwest::Method,
    base: &str,
    token: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut req = srv
        .http
        .request(method, format!("{base}{path}"))
        .bearer_auth(token);
    if let Some(b) = body {
        req = req.json(b);
    }
    decode(req.send().await.unwrap()).await
}

async fn get_on(srv: &TestServer, base: &str, token: &str, path: &str) -> (u16, Value) {
    send(srv, reqwest::Method::GET, base, token, path, None).await
}

/// Polls `GET path` on `base` with `token` every 50 ms until it answers
/// `want`; panics with the last answer if that takes longer than [`WITHIN`]
/// from `since` (the moment node A answered the change).
async fn expect_within(
    srv: &TestServer,
    base: &str,
    token: &str,
    path: &str,
    want: u16,
    since: Instant,
) -> (u16, Value) {
    loop {
        let got = get_on(srv, base, token, path).await;
        if got.0 == want {
            return got;
        }
        assert!(
            since.elapsed() <= WITHIN,
            "node B still answers {} {} to GET {path} {:?} after the change (want {want})",
            got.0,
            got.1,
            since.elapsed()
        );
        tokio::time::sleep(POLL).await;
    }
}

/// A user of `role` created on node A, and its id and login token (from A).
async fn user_on_a(srv: &TestServer, name: &str, role: &str) -> (i64, String) {
    let (s, b) = srv
        .post(
            "/api/v1/users",
            &json!({"username": name, "password": "password-123", "role": role}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let token = login(&srv.http, &srv.base, name, "password-123").await;
    (b["id"].as_i64().unwrap(), token)
}

async fn accepts_a_token_created_on_another_node_at_once(b: Backend) {
    // The feed polls at most once a second here: only read-through can
    // make the token work on B straight away.
    let srv = TestServer::on_with(b, "[auth]\nsync_interval = \"1s\"\n").await;
    let node_b = NodeB::start(&srv).await;
    let (s, body) = srv
        .post("/api/v1/tokens", &json!({"name": "ci", "expires_in": 3600}))
        .await;
    assert_eq!(s, 200, "{body}");
    let token = body["token"].as_str().unwrap();
    let (s, info) = get_on(&srv, &node_b.base, token, "/api/v1/users/info").await;
    assert_eq!(
        (s, info["username"].as_str()),
        (200, Some("admin")),
        "{info}"
    );
    // A user created on A logs in on B at once too, and B's token works on A.
    let (s, created) = srv
        .post(
            "/api/v1/users",
            &json!({"username": "olga", "password": "password-123", "role": "operator"}),
        )
        .await;
    assert_eq!(s, 200, "{created}");
    let olga = login(&srv.http, &node_b.base, "olga", "password-123").await;
    let (s, info) = get_on(&srv, &srv.base, &olga, "/api/v1/users/info").await;
    assert_eq!(
        (s, info["role"].as_str()),
        (200, Some("operator")),
        "{info}"
    );
    node_b.stop().await;
    srv.stop().await;
}

async fn rejects_a_token_deleted_on_another_node(b: Backend) {
    let srv = TestServer::on(b).await;
    let node_b = NodeB::start(&srv).await;
    let (s, body) = srv.post("/api/v1/tokens", &json!({"name": "doomed"})).await;
    assert_eq!(s, 200, "{body}");
    let (id, token) = (
        body["id"].as_i64().unwrap(),
        body["token"].as_str().unwrap(),
    );
    // B holds it in memory now.
    let got = get_on(&srv, &node_b.base, token, "/api/v1/users/info").await;
    assert_eq!(got.0, 200, "{}", got.1);
    let (s, body) = send(
        &srv,
        reqwest::Method::DELETE,
        &srv.base,
        &srv.token,
        &format!("/api/v1/tokens/{id}"),
        None,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let since = Instant::now();
    let got = expect_within(&srv, &node_b.base, token, "/api/v1/users/info", 401, since).await;
    assert_error(&got, ErrorKey::Unauthorized);
    node_b.stop().await;
    srv.stop().await;
}

async fn rejects_tokens_of_a_user_deleted_on_another_node(b: Backend) {
    let srv = TestServer::on(b).await;
    let node_b = NodeB::start(&srv).await;
    let (id, token) = user_on_a(&srv, "dave", "operator").await;
    let got = get_on(&srv, &node_b.base, &token, "/api/v1/users/info").await;
    assert_eq!(got.0, 200, "{}", got.1);
    let (s, body) = send(
        &srv,
        reqwest::Method::DELETE,
        &srv.base,
        &srv.token,
        &format!("/api/v1/users/{id}"),
        None,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let since = Instant::now();
    let got = expect_within(&srv, &node_b.base, &token, "/api/v1/users/info", 401, since).await;
    assert_error(&got, ErrorKey::Unauthorized);
    // Nor can the user log in there again.
    let (s, _) = send(
        &srv,
        reqwest::Method::POST,
        &node_b.base,
        "",
        "/api/v1/users/login",
        Some(&json!({"username": "dave", "password": "password-123"})),
    )
    .await;
    assert_eq!(s, 401);
    node_b.stop().await;
    srv.stop().await;
}

async fn rejects_an_admin_action_after_a_role_change_on_another_node(b: Backend) {
    let srv = TestServer::on(b).await;
    let node_b = NodeB::start(&srv).await;
    let (id, carol) = user_on_a(&srv, "carol", "admin").await;
    let got = get_on(&srv, &node_b.base, &carol, "/api/v1/users").await;
    assert_eq!(got.0, 200, "{}", got.1);
    let (s, body) = send(
        &srv,
        reqwest::Method::PATCH,
        &srv.base,
        &srv.token,
        &format!("/api/v1/users/{id}"),
        Some(&json!({"role": "auditor"})),
    )
    .await;
    assert_eq!((s, body["role"].as_str()), (200, Some("auditor")), "{body}");
    let since = Instant::now();
    let got = expect_within(&srv, &node_b.base, &carol, "/api/v1/users", 403, since).await;
    assert_error(&got, ErrorKey::Forbidden);
    // Still a valid token, now an auditor's.
    let (s, info) = get_on(&srv, &node_b.base, &carol, "/api/v1/users/info").await;
    assert_eq!((s, info["role"].as_str()), (200, Some("auditor")), "{info}");
    node_b.stop().await;
    srv.stop().await;
}

async fn rejects_the_bootstrap_token_after_its_first_use(b: Backend) {
    let srv = TestServer::on(b).await;
    let node_b = NodeB::start(&srv).await;
    let boot = srv.bootstrap_token.clone();
    // Both nodes at once: only the node whose delete removed the row may
    // proceed.
    let path = "/api/v1/users/info";
    let (a, bb) = tokio::join!(
        get_on(&srv, &srv.base, &boot, path),
        get_on(&srv, &node_b.base, &boot, path)
    );
    let mut statuses = [a.0, bb.0];
    statuses.sort();
    assert_eq!(
        statuses,
        [200, 401],
        "A: {} {}, B: {} {}",
        a.0,
        a.1,
        bb.0,
        bb.1
    );
    let winner = if a.0 == 200 { &a } else { &bb };
    assert_eq!(winner.1["role"].as_str(), Some("admin"), "{}", winner.1);
    for base in [&srv.base, &node_b.base] {
        let got = get_on(&srv, base, &boot, path).await;
        assert_error(&got, ErrorKey::Unauthorized);
    }
    // Not in the database any more.
    let state = &srv.server.as_ref().unwrap().state;
    let tokens = state.store.accounts().list_tokens(None).await.unwrap();
    assert!(
        tokens.iter().all(|t| t.name != "bootstrap" && !t.one_time),
        "{tokens:?}"
    );
    node_b.stop().await;
    srv.stop().await;
}

async fn expired_tokens_are_pruned_from_memory_and_the_database(b: Backend) {
    let srv = TestServer::on_with(b, "[auth]\ntoken_prune_interval = \"100ms\"\n").await;
    let (s, body) = srv
        .post("/api/v1/tokens", &json!({"name": "brief", "expires_in": 1}))
        .await;
    assert_eq!(s, 200, "{body}");
    let id = body["id"].as_i64().unwrap();
    let state = srv.server.as_ref().unwrap().state.clone();
    assert!(
        state
            .store
            .accounts()
            .get_token(id)
            .await
            .unwrap()
            .is_some()
    );
    // Expires within 1-2 s (whole seconds), then the next prune removes it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while state
        .store
        .accounts()
        .get_token(id)
        .await
        .unwrap()
        .is_some()
    {
        assert!(
            Instant::now() < deadline,
            "expired token {id} still in the database after 10 s"
        );
        tokio::time::sleep(POLL).await;
    }
    assert!(state.auth.token_by_id(&id.to_string()).is_none());
    let (s, list) = srv.get("/api/v1/tokens").await;
    assert_eq!(s, 200, "{list}");
    let ids: Vec<i64> = list["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["id"].as_i64())
        .collect();
    assert!(!ids.contains(&id), "{list}");
    // The admin's own login token is not expired and stays.
    assert_eq!(srv.get("/api/v1/users/info").await.0, 200);
    srv.stop().await;
}

crate::backend_matrix!(
    accepts_a_token_created_on_another_node_at_once,
    rejects_a_token_deleted_on_another_node,
    rejects_tokens_of_a_user_deleted_on_another_node,
    rejects_an_admin_action_after_a_role_change_on_another_node,
    rejects_the_bootstrap_token_after_its_first_use,
    expired_tokens_are_pruned_from_memory_and_the_database,
);

// ----- tokens (item 8) and user updates, on SQLite -----

#[tokio::test]
async fn rejects_token_lifetime_over_the_cap() {
    let srv = TestServer::start().await;
    let year = 365 * 86_400;
    let got = srv
        .post(
            "/api/v1/tokens",
            &json!({"name": "long", "expires_in": year}),
        )
        .await;
    assert_error(&got, ErrorKey::InvalidField);
    let detail = got.1["detail"].as_str().unwrap_or_default();
    assert!(
        detail.starts_with("expires_in") && detail.contains("604800"),
        "{detail}"
    );
    // At the cap (7 days by default) is fine.
    let (s, b) = srv
        .post("/api/v1/tokens", &json!({"expires_in": 7 * 86_400}))
        .await;
    assert_eq!(s, 200, "{b}");
    srv.stop().await;
}

#[tokio::test]
async fn rejects_login_token_lifetime_over_the_cap() {
    // token_expiry = cap, so a login token lives exactly the cap, never more.
    let srv = TestServer::start_with(
        None,
        "[auth]\ntoken_expiry = 3600\ntoken_max_lifetime = 3600\n",
    )
    .await;
    let (s, b) = srv
        .post_as(
            "",
            "/api/v1/users/login",
            &json!({"username": "admin", "password": ADMIN_PASSWORD}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let expires = aic::time::parse_rfc3339(b["expires_at"].as_str().unwrap()).unwrap();
    assert!(expires <= now() + 3600, "{b}");
    let got = srv
        .post("/api/v1/tokens", &json!({"expires_in": 3601}))
        .await;
    assert_error(&got, ErrorKey::InvalidField);
    srv.stop().await;
}

#[tokio::test]
async fn rejects_user_updates_with_bad_fields() {
    let srv = TestServer::start().await;
    let (id, operator) = user_on_a(&srv, "erin", "operator").await;
    let path = format!("/api/v1/users/{id}");
    let patch = |token: String, body: Value| {
        let (srv, path) = (&srv, path.clone());
        async move {
            send(
                srv,
                reqwest::Method::PATCH,
                &srv.base,
                &token,
                &path,
                Some(&body),
            )
            .await
        }
    };
    for (body, field) in [
        (json!({"role": "root"}), "role"),
        (json!({"password": "short"}), "password"),
        (json!({}), "role"),
    ] {
        let got = patch(srv.token.clone(), body.clone()).await;
        assert_error(&got, ErrorKey::InvalidField);
        let detail = got.1["detail"].as_str().unwrap_or_default();
        assert!(detail.starts_with(field), "{body}: {detail}");
    }
    let got = patch(srv.token.clone(), json!({"role": 1})).await;
    assert_error(&got, ErrorKey::InvalidField);
    let got = patch(srv.token.clone(), json!({"rol": "admin"})).await;
    assert_eq!(got.0, 400, "{}", got.1);
    // Admin only.
    let got = patch(operator.clone(), json!({"role": "admin"})).await;
    assert_error(&got, ErrorKey::Forbidden);
    // Unknown user.
    let got = send(
        &srv,
        reqwest::Method::PATCH,
        &srv.base,
        &srv.token,
        "/api/v1/users/424242",
        Some(&json!({"role": "auditor"})),
    )
    .await;
    assert_error(&got, ErrorKey::NotFound);
    // A new password ends the user's sessions; the new one logs in.
    let (s, b) = patch(srv.token.clone(), json!({"password": "another-password"})).await;
    assert_eq!(s, 200, "{b}");
    let got = get_on(&srv, &srv.base, &operator, "/api/v1/users/info").await;
    assert_error(&got, ErrorKey::Unauthorized);
    login(&srv.http, &srv.base, "erin", "another-password").await;
    srv.stop().await;
}
