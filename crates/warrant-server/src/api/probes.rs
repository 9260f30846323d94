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
    let body = json!({
        "status": if db_ok && write_ok { "ready" } else { "not_ready" },
        "database": db_ok,
        "write_path": write_ok,
        "backend": state.store.backend().as_str(),
    });
    let status = if db_ok && write_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

pub(super) async fn metrics(State(state): State<SharedState>) -> Response {
    crate::metrics::refresh_gauges(&state.gauges());
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        crate::metrics::render(),
    )
        .into_response()
}

pub(super) async fn version() -> Json<Value> {
    Json(json!({"name": "warrant", "version": env!("CARGO_PKG_VERSION")}))
}
