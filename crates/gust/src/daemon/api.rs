//! HTTP surface: routing, the same-origin/token gate, error mapping, SSE.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use super::meeting::{SegmentError, SegmentTicks};
use super::runs::{Manager, StartError, lock};
use super::settings::EngineLimits;
use super::store::{ListQuery, Retention};

#[derive(Clone)]
struct AppState {
    manager: Arc<Manager>,
    token: Option<String>,
    local: SocketAddr,
}

/// An API error: `{"error":{"code","message"}}` with a stable machine code.
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }
    fn not_found(id: i64) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", format!("no run {id}"))
    }
    fn internal(e: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({"error": {"code": self.code, "message": self.message}})),
        )
            .into_response()
    }
}

type ApiResult<T> = Result<T, ApiError>;

pub fn router(manager: Arc<Manager>, token: Option<String>, local: SocketAddr) -> Router {
    let state = AppState {
        manager,
        token: token.filter(|t| !t.is_empty()),
        local,
    };
    let api = Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/config", get(get_config).post(post_config))
        .route("/runs", get(list_runs).post(post_run))
        .route("/runs/{id}", get(get_run).delete(delete_run))
        .route("/runs/{id}/stop", post(stop_run))
        .route("/runs/{id}/live", get(live))
        .route("/runs/{id}/report", get(report))
        .route("/runs/{id}/series", get(series))
        .route("/runs/{id}/baseline", put(baseline))
        .route("/capacity", post(post_capacity))
        .route("/segments", post(post_segment))
        .route(
            "/runs/{id}/segments/{member}/ticks",
            post(post_segment_ticks),
        )
        .route(
            "/runs/{id}/segments/{member}/report",
            // A long segment's report carries every second's histograms.
            post(post_segment_report).layer(DefaultBodyLimit::max(SEGMENT_REPORT_LIMIT)),
        )
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/", get(|| asset("index.html")))
        .route(
            "/assets/{file}",
            get(|Path(f): Path<String>| asset_owned(f)),
        )
        .merge(api)
        .fallback(|| async {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
        })
        .layer(middleware::from_fn_with_state(state.clone(), same_origin))
        .with_state(state)
}

/// Rejects cross-origin browser requests (a page elsewhere driving load from the
/// user's machine) and, on a loopback bind, Host names other than loopback ones
/// (DNS rebinding).
async fn same_origin(State(st): State<AppState>, req: Request, next: Next) -> Response {
    // Scoped: a borrow of the (non-Sync) request must not live across the await.
    let verdict = {
        let headers = req.headers();
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        origin_check(
            text("sec-fetch-site"),
            text("origin"),
            text("host").unwrap_or(""),
            st.local.ip().is_loopback(),
        )
    };
    match verdict {
        Ok(()) => next.run(req).await,
        Err(message) => forbidden(message),
    }
}

/// The same-origin decision, as a pure function of the request's headers.
pub fn origin_check(
    sec_fetch_site: Option<&str>,
    origin: Option<&str>,
    host: &str,
    loopback_bind: bool,
) -> Result<(), &'static str> {
    if sec_fetch_site.is_some_and(|s| !matches!(s, "same-origin" | "none")) {
        return Err("cross-origin requests are refused");
    }
    if let Some(origin) = origin {
        let same = origin
            .strip_prefix("http://")
            .is_some_and(|o| o.eq_ignore_ascii_case(host));
        if !same {
            return Err("cross-origin requests are refused");
        }
    }
    if loopback_bind {
        let name = host
            .rsplit_once(':')
            .map_or(host, |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']');
        if !matches!(name, "127.0.0.1" | "localhost" | "::1") {
            return Err("Host must be a loopback name on a loopback bind");
        }
    }
    Ok(())
}

fn forbidden(message: &str) -> Response {
    ApiError::new(StatusCode::FORBIDDEN, "forbidden", message).into_response()
}

/// With a token configured, every API call needs `Authorization: Bearer TOKEN` (or
/// `?token=` for EventSource, which cannot set headers).
async fn require_token(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let Some(token) = &st.token else {
        return next.run(req).await;
    };
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let query = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("token="));
    if bearer == Some(token.as_str()) || query == Some(token.as_str()) {
        next.run(req).await
    } else {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid token is required",
        )
        .into_response()
    }
}

async fn asset_owned(file: String) -> Response {
    asset(&file).await
}

async fn asset(file: &str) -> Response {
    let Some((body, ty)) = crate::dashboard::file(file) else {
        return ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such asset").into_response();
    };
    ([(header::CONTENT_TYPE, HeaderValue::from_static(ty))], body).into_response()
}

async fn health(State(st): State<AppState>) -> Json<Value> {
    let configured = *lock(&st.manager.workers);
    let workers =
        configured.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "workers": workers,
        "active_run": st.manager.active(),
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DaemonConfig {
    retention: Retention,
    /// Default worker threads for runs whose spec sets none; null = available cores.
    workers: Option<usize>,
    #[serde(default)]
    max_connections_per_host: Option<usize>,
    #[serde(default, with = "gust_engine::spec::opt_duration_serde")]
    tick: Option<Duration>,
    #[serde(default)]
    max_body: Option<u64>,
    /// How long a run whose segments run elsewhere waits for their reports after
    /// its planned end and the last word from a segment.
    #[serde(default, with = "gust_engine::spec::opt_duration_serde")]
    segment_grace: Option<Duration>,
}

/// Largest segment report accepted: an hour's seconds of histograms fit well.
const SEGMENT_REPORT_LIMIT: usize = 64 * 1024 * 1024;

async fn metrics(State(st): State<AppState>) -> Response {
    let body = st.manager.counters.render(st.manager.active());
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        body,
    )
        .into_response()
}

async fn get_config(State(st): State<AppState>) -> Json<Value> {
    let limits = *lock(&st.manager.limits);
    Json(json!({
        "retention": *lock(&st.manager.retention),
        "workers": *lock(&st.manager.workers),
        "max_connections_per_host": limits.max_connections_per_host,
        "tick": limits.tick.map(|t| format!("{}ms", t.as_secs_f64() * 1e3)),
        "max_body": limits.max_body,
        "segment_grace": format!("{}ms", lock(&st.manager.segment_grace).as_millis()),
    }))
}

/// All-or-nothing: the whole body is parsed and checked before anything changes.
async fn post_config(State(st): State<AppState>, body: Bytes) -> ApiResult<Json<Value>> {
    let cfg: DaemonConfig = serde_json::from_slice(&body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_config", e.to_string()))?;
    if cfg.retention.max_runs == 0 {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_config",
            "invalid retention.max_runs: must be at least 1",
        ));
    }
    if cfg.retention.max_age_days == 0 {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_config",
            "invalid retention.max_age_days: must be at least 1",
        ));
    }
    if cfg.workers == Some(0) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_config",
            "invalid workers: must be at least 1",
        ));
    }
    let limits = EngineLimits {
        max_connections_per_host: cfg.max_connections_per_host,
        tick: cfg.tick,
        max_body: cfg.max_body,
    };
    limits
        .validate()
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_config", e.0))?;
    *lock(&st.manager.retention) = cfg.retention;
    *lock(&st.manager.workers) = cfg.workers;
    *lock(&st.manager.limits) = limits;
    if let Some(grace) = cfg.segment_grace {
        *lock(&st.manager.segment_grace) = grace;
    }
    Ok(get_config(State(st)).await)
}

async fn post_run(
    State(st): State<AppState>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let invalid = |m: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid_spec", m);
    let mut req = crate::spec_file::parse_body(&headers, &body).map_err(invalid)?;
    if req.spec.workers.is_none() {
        req.spec.workers = *lock(&st.manager.workers);
    }
    let limits = *lock(&st.manager.limits);
    limits.apply_defaults(&mut req.spec);
    let thresholds = req.parse_thresholds().map_err(invalid)?;
    let spec = req.spec.clone();
    // Validation resolves the host name: off the async workers.
    let cfg = tokio::task::spawn_blocking(move || spec.validate())
        .await
        .map_err(ApiError::internal)?
        .map_err(|e| invalid(e.to_string()))?;
    limits.check(&cfg).map_err(|e| invalid(e.0))?;
    let snapshot = serde_json::to_value(&req).map_err(ApiError::internal)?;
    match st
        .manager
        .start(req.name.clone(), snapshot, cfg, thresholds)
    {
        Ok(run_id) => Ok((StatusCode::ACCEPTED, Json(json!({"run_id": run_id}))).into_response()),
        Err(StartError::Active(id)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "run_active",
            format!("run {id} is running; stop it or wait"),
        )),
        Err(StartError::Store(e)) => Err(ApiError::internal(e)),
    }
}

/// A capacity search: validated (spec, SLO, settings, DNS) before a row exists →
/// 201 `{"id", "run_id"}`; then a run of kind "capacity".
async fn post_capacity(State(st): State<AppState>, body: Bytes) -> ApiResult<Response> {
    let workers = *lock(&st.manager.workers);
    let prepared = tokio::task::spawn_blocking(move || super::capacity::prepare(&body, workers))
        .await
        .map_err(ApiError::internal)?
        .map_err(|m| ApiError::new(StatusCode::BAD_REQUEST, "invalid_spec", m))?;
    match st.manager.start_capacity(prepared) {
        Ok(id) => Ok((StatusCode::CREATED, Json(json!({"id": id, "run_id": id}))).into_response()),
        Err(StartError::Active(id)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "run_active",
            format!("run {id} is running; stop it or wait"),
        )),
        Err(StartError::Store(e)) => Err(ApiError::internal(e)),
    }
}

impl From<SegmentError> for ApiError {
    fn from(e: SegmentError) -> Self {
        let status = match &e {
            SegmentError::Invalid(_) => StatusCode::BAD_REQUEST,
            SegmentError::NotFound { .. } => StatusCode::NOT_FOUND,
            SegmentError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::CONFLICT,
        };
        ApiError::new(status, e.code(), e.to_string())
    }
}

/// A segment of a run joins it (`gust run --segment i/n --daemon URL --run NAME`):
/// the body is the segment's run request → 201 `{"run_id", "member"}`.
async fn post_segment(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let req = crate::spec_file::parse_body(&headers, &body)
        .map_err(|m| ApiError::new(StatusCode::BAD_REQUEST, "invalid_segment", m))?;
    let joined = st.manager.join_segment(&req)?;
    Ok((StatusCode::CREATED, Json(json!(joined))).into_response())
}

/// A segment's ticks → `{"stop": bool}` (whether the run was asked to stop).
async fn post_segment_ticks(
    State(st): State<AppState>,
    Path((id, member)): Path<(i64, usize)>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let batch: SegmentTicks = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_segment",
            format!("ticks: {e}"),
        )
    })?;
    let stop = st.manager.segment_ticks(id, member, &batch)?;
    Ok(Json(json!({"stop": stop})))
}

/// A segment's final report (the engine's report with its histograms).
async fn post_segment_report(
    State(st): State<AppState>,
    Path((id, member)): Path<(i64, usize)>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let manager = Arc::clone(&st.manager);
    // Parsing and, for the last report, merging decode histograms: off the workers.
    tokio::task::spawn_blocking(move || {
        let report: gust_engine::Report = serde_json::from_slice(&body).map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_segment",
                format!("report: {e}"),
            )
        })?;
        manager.segment_report(id, member, report)?;
        Ok(Json(
            json!({"run_id": id, "member": member, "accepted": true}),
        ))
    })
    .await
    .map_err(ApiError::internal)?
}

async fn list_runs(
    State(st): State<AppState>,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Value>> {
    let Query(q) =
        q.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", e.body_text()))?;
    let runs = st.manager.store.list(&q).map_err(ApiError::internal)?;
    let limit = q.limit.unwrap_or(50).clamp(1, 500) as usize;
    let next_before = (runs.len() == limit)
        .then(|| runs.last().map(|r| r.id))
        .flatten();
    Ok(Json(json!({"runs": runs, "next_before": next_before})))
}

fn load(st: &AppState, id: i64) -> ApiResult<super::store::RunRow> {
    st.manager
        .store
        .get(id)
        .map_err(ApiError::internal)?
        .ok_or_else(|| ApiError::not_found(id))
}

async fn get_run(State(st): State<AppState>, Path(id): Path<i64>) -> ApiResult<Json<Value>> {
    let mut row = load(&st, id)?;
    row.report = None;
    let baseline_id = st
        .manager
        .store
        .baseline_for(id)
        .map_err(ApiError::internal)?;
    let mut v = serde_json::to_value(&row).map_err(ApiError::internal)?;
    v["baseline_id"] = json!(baseline_id);
    Ok(Json(v))
}

async fn report(State(st): State<AppState>, Path(id): Path<i64>) -> ApiResult<Json<Value>> {
    let row = load(&st, id)?;
    match row.report {
        Some(report) => Ok(Json(json!({
            "run_id": id, "kind": row.kind, "status": row.status, "verdict": row.verdict,
            "verdicts": row.verdicts, "report": report,
        }))),
        None => Err(ApiError::new(
            StatusCode::CONFLICT,
            "no_report",
            format!("run {id} is {} and has no report", row.status),
        )),
    }
}

async fn series(State(st): State<AppState>, Path(id): Path<i64>) -> ApiResult<Json<Value>> {
    let row = load(&st, id)?;
    let series = st.manager.store.series(id).map_err(ApiError::internal)?;
    // Monitor series are kept in the stored report (written once, at the end).
    let monitor = row
        .report
        .as_ref()
        .and_then(|r| r.get("monitor").cloned())
        .unwrap_or_else(|| json!([]));
    Ok(Json(
        json!({"run_id": id, "series": series, "monitor": monitor}),
    ))
}

async fn stop_run(State(st): State<AppState>, Path(id): Path<i64>) -> ApiResult<Response> {
    let row = load(&st, id)?;
    if st.manager.stop(id) {
        Ok((
            StatusCode::ACCEPTED,
            Json(json!({"run_id": id, "stopping": true})),
        )
            .into_response())
    } else {
        Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_running",
            format!("run {id} is {}", row.status),
        ))
    }
}

async fn delete_run(State(st): State<AppState>, Path(id): Path<i64>) -> ApiResult<StatusCode> {
    let row = load(&st, id)?;
    if row.status == "running" {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "run_active",
            format!("run {id} is running; stop it first"),
        ));
    }
    st.manager.store.delete(id).map_err(ApiError::internal)?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct BaselineBody {
    #[serde(default = "yes")]
    baseline: bool,
}
fn yes() -> bool {
    true
}

async fn baseline(
    State(st): State<AppState>,
    Path(id): Path<i64>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let b: BaselineBody = if body.is_empty() {
        BaselineBody { baseline: true }
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", e.to_string()))?
    };
    let row = load(&st, id)?;
    if b.baseline && row.report.is_none() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "no_report",
            format!(
                "run {id} is {}; only a finished run can be a baseline",
                row.status
            ),
        ));
    }
    st.manager
        .store
        .set_baseline(id, b.baseline)
        .map_err(ApiError::internal)?;
    Ok(Json(json!({"run_id": id, "baseline": b.baseline})))
}

/// SSE: `tick` and `second` events with ids, then `complete`. A reconnecting client
/// sends `Last-Event-ID` and gets only what it missed.
async fn live(
    State(st): State<AppState>,
    Path(id): Path<i64>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let row = load(&st, id)?;
    let after: u64 = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let to_sse = |e: super::runs::Event| {
        Ok::<_, Infallible>(
            SseEvent::default()
                .id(e.id.to_string())
                .event(e.kind)
                .data(e.data),
        )
    };
    if let Some(live) = st.manager.live(id) {
        let mut version = live.version.subscribe();
        let stream = async_stream(move |tx| async move {
            let mut cursor = after;
            loop {
                let (events, done) = live.since(cursor);
                for e in events {
                    cursor = e.id;
                    if tx.send(to_sse(e)).await.is_err() {
                        return;
                    }
                }
                if done {
                    return;
                }
                if version.changed().await.is_err() {
                    return;
                }
            }
        });
        return Ok(Sse::new(stream)
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
            .into_response());
    }
    // Not in memory (an older run): replay the stored seconds, then `complete`. Ids
    // are the positions in this replay.
    let mut events = Vec::new();
    for s in st.manager.store.series(id).map_err(ApiError::internal)? {
        events.push(("second", s.to_string()));
    }
    events.push((
        "complete",
        json!({"run_id": id, "status": row.status, "verdict": row.verdict, "reason": row.reason,
               "verdicts": row.verdicts, "report": row.report})
        .to_string(),
    ));
    let items: Vec<_> = events
        .into_iter()
        .enumerate()
        .map(|(i, (kind, data))| super::runs::Event {
            id: i as u64 + 1,
            kind,
            data,
        })
        .filter(|e| e.id > after)
        .map(to_sse)
        .collect();
    Ok(Sse::new(futures_util::stream::iter(items)).into_response())
}

/// A stream fed by a task through a small channel (no macro crate needed).
fn async_stream<F, Fut>(f: F) -> impl futures_util::Stream<Item = Result<SseEvent, Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<SseEvent, Infallible>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(f(tx));
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use super::origin_check;

    #[test]
    fn accepts_same_origin_and_non_browser_clients() {
        assert!(origin_check(None, None, "127.0.0.1:9876", true).is_ok());
        assert!(
            origin_check(
                Some("same-origin"),
                Some("http://127.0.0.1:9876"),
                "127.0.0.1:9876",
                true
            )
            .is_ok()
        );
        assert!(origin_check(Some("none"), None, "localhost:9876", true).is_ok());
        assert!(origin_check(None, None, "[::1]:9876", true).is_ok());
    }

    #[test]
    fn rejects_cross_site_fetch_metadata() {
        assert!(origin_check(Some("cross-site"), None, "127.0.0.1:9876", true).is_err());
        assert!(origin_check(Some("same-site"), None, "127.0.0.1:9876", true).is_err());
    }

    #[test]
    fn rejects_foreign_origin() {
        assert!(origin_check(None, Some("http://evil.example"), "127.0.0.1:9876", true).is_err());
        assert!(origin_check(None, Some("null"), "127.0.0.1:9876", true).is_err());
        assert!(origin_check(None, Some("http://127.0.0.1:1"), "127.0.0.1:9876", true).is_err());
    }

    #[test]
    fn rejects_non_loopback_host_on_loopback_bind() {
        assert!(origin_check(None, None, "rebind.example:9876", true).is_err());
        assert!(origin_check(None, None, "gust.internal:9876", false).is_ok());
    }
}
