//! `POST /api/v1/certs` with arbitrary bytes as its body, through the real
//! router (every middleware, the JSON extractor, auth, issuance) on a
//! temporary SQLite data dir: never a panic and never a 5xx. A panic would
//! surface as a 500 through the router's panic layer, so one assertion
//! covers both. `crates/warrant-server/tests/security/errors.rs` runs a
//! fixed corpus of the same kind in CI, where this target cannot run.
#![no_main]

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};
use tower::ServiceExt;

const ADMIN_PASSWORD: &str = "fuzz-admin-password";

/// Built once per fuzzing process: the runtime, the router over a started
/// `AppState`, and an admin token to call it with.
struct Target {
    rt: tokio::runtime::Runtime,
    router: axum::Router,
    token: String,
    _dir: tempfile::TempDir,
}

fn target() -> &'static Target {
    static TARGET: OnceLock<Target> = OnceLock::new();
    TARGET.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let dir = tempfile::tempdir().expect("temp data dir");
        std::fs::write(
            dir.path().join(warrant_server::config::CONFIG_FILE),
            "listen = \"127.0.0.1:0\"\nlog_level = \"error\"\n",
        )
        .expect("writing warrant.toml");
        let (router, token) = rt.block_on(async {
            warrant_server::init_data_dir(dir.path(), Some(ADMIN_PASSWORD.into()))
                .await
                .expect("warrant init");
            let loaded = warrant_server::LoadedConfig::load(dir.path()).expect("config");
            let state = warrant_server::AppState::load(loaded).await.expect("state");
            let router = warrant_server::api::router(Arc::new(state));
            let token = login(&router).await;
            (router, token)
        });
        Target {
            rt,
            router,
            token,
            _dir: dir,
        }
    })
}

/// An admin token from the login route (the bootstrap token may be
/// single-use).
async fn login(router: &axum::Router) -> String {
    let body = serde_json::json!({"username": "admin", "password": ADMIN_PASSWORD});
    let req = Request::post("/api/v1/users/login")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("login request");
    let resp = router.clone().oneshot(req).await.expect("login answer");
    assert_eq!(resp.status(), StatusCode::OK, "fuzz target login");
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("login body");
    let v: serde_json::Value = serde_json::from_slice(&bytes).expect("login JSON");
    v["token"].as_str().expect("token").to_string()
}

fuzz_target!(|data: &[u8]| {
    let t = target();
    let req = Request::post("/api/v1/certs")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, format!("Bearer {}", t.token))
        .body(Body::from(data.to_vec()))
        .expect("issue request");
    let (status, body) = t.rt.block_on(async {
        let resp = t.router.clone().oneshot(req).await.expect("infallible");
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap_or_default();
        (status, body)
    });
    assert!(
        !status.is_server_error(),
        "{status} for {:?}: {}",
        String::from_utf8_lossy(data),
        String::from_utf8_lossy(&body)
    );
});
