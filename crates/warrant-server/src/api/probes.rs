//! Probes and the scrape: `/healthz`, `/readyz`, `/metrics`, and the
//! version.

use crate::state::SharedState;
use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::time::Duration;

pub(super) async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

pub(super) async fn readyz(State(state): State<SharedState>) -> Response {
    let db = tokio::time::timeout(Duration::from_secs(5), state.store.ping()).await;
    let db_ok = matches!(db, Ok(Ok(())));
    let write_ok = state.store.issuance().healthy();
    // Keys in a PKCS#11 token sign a test message each (keys in memory are
    // not asked): a token that is gone or failing makes the node not ready.
    let (cas, tokens) = (state.cas(), state.tokens.clone());
    let keys = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::task::spawn_blocking(move || {
            cas.hierarchy.check_keys()?;
            tokens.check_keys()
        }),
    )
    .await;
    let keys_ok = match keys {
        Ok(Ok(Ok(()))) => true,
        Ok(Ok(Err(e))) => {
            tracing::warn!(error = %e, "readiness: a CA key cannot sign");
            false
        }
        _ => false,
    };
    let ready = db_ok && write_ok && keys_ok;
    // A CA near its end is a warning, not a failure: the node still issues.
    let window = i64::try_from(state.config.config.keys.ca_expiry_warning_days)
        .unwrap_or(i64::MAX / 86_400)
        .saturating_mul(86_400);
    let warnings = crate::key_life::expiry_warnings(
        &crate::key_life::ca_ends(&state.cas().hierarchy),
        crate::clock::unix_now(),
        window,
    );
    let body = json!({
        "status": if ready { "ready" } else { "not_ready" },
        "database": db_ok,
        "write_path": write_ok,
        "ca_keys": keys_ok,
        "warnings": warnings,
        "backend": state.store.backend().as_str(),
    });
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

pub(super) async fn metrics(State(state): State<SharedState>) -> Response {
    crate::metrics::refresh_gauges(&state.gauges());
    let now = crate::clock::unix_now();
    crate::metrics::key_lives(
        &crate::key_life::ca_ends(&state.cas().hierarchy),
        &crate::key_life::token_key_lives(&state.tokens.ring(), now),
        now,
    );
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        crate::metrics::render(),
    )
        .into_response()
}

pub(super) async fn version() -> Json<Value> {
    Json(json!({"name": "warrant", "version": env!("CARGO_PKG_VERSION")}))
}
