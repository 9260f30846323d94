//! The HTTP surface: routes, the caller extractor, thin handlers.

use crate::auth::{self, AuthMethod, Caller, Permission, Resolution, Role, TokenSource};
use crate::error::{ApiError, ErrorKey};
use crate::extract::{self, ApiJson, MAX_BODY_BYTES};
use crate::issuance::{self, IssueRequest, rfc3339};
use crate::state::{AppState, now_unix, store_error};
use axum::extract::{DefaultBodyLimit, Extension, FromRequestParts, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header, request::Parts};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use warrant_store::{CertFilter, CertRecord, CertStatus};

pub type SharedState = Arc<AppState>;

/// The verified client certificate of an mTLS connection (leaf DER), put in
/// the request extensions by the TLS listener.
#[derive(Clone, Debug)]
pub struct ClientCert(pub Vec<u8>);

/// Put in the request extensions by the TLS listener on every request it
/// serves: the session cookie it sets is `Secure`, and an `http://` Origin
/// is another site.
#[derive(Clone, Copy, Debug)]
pub struct OverTls;

/// Probes and scrapes (`/healthz`, `/readyz`, `/metrics`) are outside the
/// per-client rate limit: a monitor must see an overloaded server as it is.
/// Every other request is inside it: the `/api/…` routes, login included
/// (slowing password guessing is one of its jobs), and unknown paths and
/// methods, so that a client probing for routes spends the same budget.
pub fn router(state: SharedState) -> Router {
    let probes = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .method_not_allowed_fallback(method_not_allowed);
    let limited = api_routes()
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(crate::middleware::RateLimitLayer::new(state.clone()));
    probes
        .merge(limited)
        .layer(crate::middleware::ObserveLayer)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            crate::error::panic_response,
        ))
        .with_state(state)
}

fn api_routes() -> Router<SharedState> {
    Router::new()
        .route("/api/v1/version", get(version))
        .route("/api/v1/users/login", post(login))
        .route("/api/v1/users/logout", post(logout))
        .route("/api/v1/users/info", get(info))
        .route("/api/v1/users", get(list_users).post(create_user))
        .route("/api/v1/users/{id}", delete(delete_user).patch(update_user))
        .route(
            "/api/v1/users/{id}/operator-cert",
            post(issue_operator_cert),
        )
        .route("/api/v1/tokens", get(list_tokens).post(create_token))
        .route("/api/v1/tokens/{id}", delete(delete_token))
        .route("/api/v1/certs", get(list_certs).post(issue_cert))
        .route(
            "/api/v1/certs/revoke-by-principal",
            post(revoke_by_principal),
        )
        .route("/api/v1/cert/{ca}/{serial}", get(get_cert))
        .route("/api/v1/cert/{ca}/{serial}/revoke", post(revoke_cert))
        .route("/api/v1/crl/{ca}", get(crl))
        .route("/api/v1/ca/{name}", get(ca_cert))
}

async fn not_found() -> ApiError {
    ApiError::detail(ErrorKey::NotFound, "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(ErrorKey::MethodNotAllowed)
}

impl FromRequestParts<SharedState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &SharedState,
    ) -> Result<Self, Self::Rejection> {
        let presented = auth::presented_token(&parts.headers);
        // The CSRF gate (crate::csrf) comes before any credential is looked
        // at, so a forged cross-site request is refused whoever it names.
        if extract::declares_body(&parts.headers) {
            extract::require_json_content_type(&parts.headers)?;
        }
        if let Some((_, TokenSource::Cookie)) = presented {
            crate::csrf::require_same_origin(
                &parts.method,
                &parts.headers,
                parts.uri.authority().map(|a| a.as_str()),
                parts.extensions.get::<OverTls>().is_some(),
            )?;
        }
        let client_cert = parts.extensions.get::<ClientCert>().map(|c| c.0.clone());
        if let Some((token, _)) = presented {
            // A presented token decides: a bad one is refused, never
            // silently replaced by the connection's certificate.
            let mut caller = authenticate_token(state, token, now_unix()).await?;
            caller.client_cert_der = client_cert;
            return Ok(caller);
        }
        match client_cert {
            Some(der) => caller_from_cert(state, der).await,
            None => Err(ApiError::detail(
                ErrorKey::Unauthorized,
                "authentication required",
            )),
        }
    }
}

fn bad_token() -> ApiError {
    ApiError::detail(ErrorKey::Unauthorized, "invalid or expired token")
}

/// A presented token's caller: from memory, or read through to the
/// database for a token another node created. A one-time token proceeds
/// only if this request's delete removed its row.
async fn authenticate_token(state: &AppState, token: &str, now: i64) -> Result<Caller, ApiError> {
    match state.auth.resolve_token(token, now) {
        Resolution::Caller(caller) => Ok(caller),
        Resolution::Refused => Err(bad_token()),
        Resolution::OneTime { caller, token_id } => {
            // Out of memory first, so this node's later requests with it
            // go to the database, which has the last word.
            state.auth.remove_token(&token_id);
            spend_one_time(state, &token_id).await?;
            Ok(caller)
        }
        Resolution::Unknown { hash } => {
            let _slot = state.auth.lookup_slot().ok_or_else(|| {
                ApiError::detail(
                    ErrorKey::Unavailable,
                    "too many unknown tokens being looked up",
                )
                .with_retry_after(1)
            })?;
            let epoch = state.auth.epoch();
            let Some(row) = state
                .store
                .token_by_hash(&hash)
                .await
                .map_err(store_error)?
                .filter(|t| t.expires_at > now)
            else {
                state.auth.remember_missing(hash);
                return Err(bad_token());
            };
            let token = crate::state::token_entry(&row);
            let user = match state.auth.user(&token.user_id) {
                Some(u) => u,
                None => match state
                    .store
                    .get_user(row.user_id)
                    .await
                    .map_err(store_error)?
                {
                    Some(u) => crate::state::user_entry(&u),
                    None => return Err(bad_token()),
                },
            };
            let caller = auth::caller_for(&user, &token);
            if token.one_time {
                spend_one_time(state, &token.id).await?;
            } else {
                state.auth.cache_if_unchanged(epoch, token, user);
            }
            Ok(caller)
        }
    }
}

/// Deletes a one-time token's row; refuses unless this delete removed it.
async fn spend_one_time(state: &AppState, token_id: &str) -> Result<(), ApiError> {
    let id: i64 = token_id.parse().map_err(|_| bad_token())?;
    if state.store.delete_token(id).await.map_err(store_error)? {
        Ok(())
    } else {
        Err(bad_token())
    }
}

/// mTLS identity. The TLS layer has verified the chain to the Root; here the
/// certificate must also be one of ours (a record in the store: none is
/// refused), valid now and not revoked. It acts as a user only when it was
/// issued *for* that user (`POST /api/v1/users/{id}/operator-cert`, the
/// binding kept in its row), with that user's current role; a CN equal to a
/// username grants nothing. Any other certificate acts as a certificate
/// holder: it may only delegate to agents with itself.
async fn caller_from_cert(state: &SharedState, der: Vec<u8>) -> Result<Caller, ApiError> {
    let cert = warrant_ca::verify_principal_cert(&der, &state.hierarchy, SystemTime::now())
        .map_err(|e| {
            ApiError::detail(ErrorKey::Unauthorized, format!("client certificate: {e}"))
        })?;
    let standing = state
        .store
        .cert_status(&cert.issuing_ca, &cert.serial_hex)
        .await
        .map_err(store_error)?
        .ok_or_else(|| {
            ApiError::detail(
                ErrorKey::Unauthorized,
                "client certificate has no record in this CA's store",
            )
        })?;
    if standing.status == CertStatus::Revoked {
        return Err(ApiError::detail(
            ErrorKey::Unauthorized,
            "client certificate is revoked",
        ));
    }
    match standing.bound_user_id {
        Some(id) => {
            let user = state.auth.user(&id.to_string()).ok_or_else(|| {
                ApiError::detail(
                    ErrorKey::Unauthorized,
                    "the user this certificate was issued for no longer exists",
                )
            })?;
            Ok(Caller {
                user_id: user.id,
                username: user.username,
                role: user.role,
                method: AuthMethod::ClientCert,
                client_cert_der: Some(der),
            })
        }
        None => Ok(Caller {
            user_id: String::new(),
            username: cert.common_name.unwrap_or_default(),
            role: Role::CertificateHolder,
            method: AuthMethod::ClientCert,
            client_cert_der: Some(der),
        }),
    }
}

async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn readyz(State(state): State<SharedState>) -> Response {
    let db = tokio::time::timeout(Duration::from_secs(5), state.store.ping()).await;
    let db_ok = matches!(db, Ok(Ok(())));
    let write_ok = state.store.write_path_healthy();
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

async fn metrics(State(state): State<SharedState>) -> Response {
    crate::metrics::refresh_gauges(&state);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        crate::metrics::render(),
    )
        .into_response()
}

async fn version() -> Json<Value> {
    Json(json!({"name": "warrant", "version": env!("CARGO_PKG_VERSION")}))
}

#[derive(Deserialize)]
struct LoginRequest {
    username: String,
    password: String,
}

/// Answers the token in the body (API clients) and sets it as the session
/// cookie (browsers); see [`auth::session_cookie`].
async fn login(
    State(state): State<SharedState>,
    tls: Option<Extension<OverTls>>,
    ApiJson(req): ApiJson<LoginRequest>,
) -> Result<Response, ApiError> {
    if req.username.len() > 128 {
        return Err(ApiError::field("username", "longer than 128 bytes"));
    }
    if req.password.len() > 1024 {
        return Err(ApiError::field("password", "longer than 1024 bytes"));
    }
    let cfg = &state.config.config.auth;
    // Counted as a failure before Argon2 runs (see `crate::login`); the slot is
    // moved into the blocking task so it stays taken until Argon2 returns,
    // even if this request is dropped meanwhile.
    let slot = state.login.admit(&req.username, now_unix())?;
    let user = user_by_name(&state, &req.username).await?;
    let phc = user
        .as_ref()
        .map(|u| u.password_hash.clone())
        .unwrap_or_else(|| auth::decoy_password_hash().to_string());
    let password = req.password;
    let ok = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        auth::verify_password(&password, &phc)
    })
    .await
    .unwrap_or(false);
    let user = match (ok, user) {
        (true, Some(u)) => u,
        _ => {
            return Err(ApiError::detail(
                ErrorKey::LoginFailed,
                "invalid username or password",
            ));
        }
    };
    state.login.succeed(&req.username);
    let ttl = auth::token_ttl(None, cfg.token_expiry, cfg.token_max_lifetime)?;
    let (token, expires_at, _) = mint_token(&state, &user.id, "login", ttl).await?;
    let cookie = auth::session_cookie(&token, ttl, tls.is_some());
    Ok((
        [(header::SET_COOKIE, cookie)],
        Json(json!({
            "token": token,
            "user_id": user.id.parse::<i64>().unwrap_or_default(),
            "username": user.username,
            "role": user.role.as_str(),
            "expires_at": rfc3339(expires_at),
        })),
    )
        .into_response())
}

/// A user by name from memory, else from the database (created on another
/// node and not yet applied from the change feed). Not cached: the feed
/// brings it within `auth.sync_interval`.
async fn user_by_name(state: &AppState, name: &str) -> Result<Option<auth::UserEntry>, ApiError> {
    if let Some(u) = state.auth.user_by_name(name) {
        return Ok(Some(u));
    }
    let row = state
        .store
        .get_user_by_name(name)
        .await
        .map_err(store_error)?;
    Ok(row.as_ref().map(crate::state::user_entry))
}

/// Stores a token's hash, then indexes it in memory. Returns (token, expiry, id).
async fn mint_token(
    state: &AppState,
    user_id: &str,
    name: &str,
    ttl: u64,
) -> Result<(String, i64, i64), ApiError> {
    let uid: i64 = user_id.parse().map_err(|_| {
        ApiError::detail(
            ErrorKey::Forbidden,
            "certificate identities cannot hold tokens",
        )
    })?;
    let (token, hash) = auth::new_token()?;
    let now = now_unix();
    let expires_at = now.saturating_add(ttl as i64);
    let id = state
        .store
        .create_token(&warrant_store::NewApiToken {
            token_hash: hash,
            user_id: uid,
            name: name.to_string(),
            created_at: now,
            expires_at,
            one_time: false,
        })
        .await
        .map_err(store_error)?;
    state.auth.insert_token(auth::TokenEntry {
        id: id.to_string(),
        user_id: user_id.to_string(),
        name: name.to_string(),
        hash,
        expires_at,
        one_time: false,
    });
    Ok((token, expires_at, id))
}

/// Deletes the token the caller presented and clears the session cookie.
async fn logout(
    State(state): State<SharedState>,
    tls: Option<Extension<OverTls>>,
    caller: Caller,
) -> Result<Response, ApiError> {
    if let AuthMethod::Token { token_id } = &caller.method {
        if let Ok(id) = token_id.parse::<i64>() {
            state.store.delete_token(id).await.map_err(store_error)?;
        }
        state.auth.remove_token(token_id);
    }
    let cookie = auth::session_cookie("", 0, tls.is_some());
    Ok((
        [(header::SET_COOKIE, cookie)],
        Json(json!({"status": "logged_out"})),
    )
        .into_response())
}

async fn info(caller: Caller) -> Json<Value> {
    Json(json!({
        "user_id": caller.user_id.parse::<i64>().ok(),
        "username": caller.username,
        "role": caller.role.as_str(),
        "auth": match caller.method { AuthMethod::Token { .. } => "token", AuthMethod::ClientCert => "certificate" },
    }))
}

fn user_json(u: &auth::UserEntry) -> Value {
    json!({"id": u.id.parse::<i64>().unwrap_or_default(), "username": u.username, "role": u.role.as_str()})
}

async fn list_users(
    State(state): State<SharedState>,
    caller: Caller,
) -> Result<Json<Value>, ApiError> {
    caller.require(Permission::UserAdmin)?;
    let users: Vec<Value> = state.auth.users().iter().map(user_json).collect();
    Ok(Json(json!({"users": users, "total": users.len()})))
}

#[derive(Deserialize)]
struct CreateUserRequest {
    username: String,
    password: String,
    #[serde(default)]
    role: Option<String>,
}

async fn create_user(
    State(state): State<SharedState>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateUserRequest>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Permission::UserAdmin)?;
    let name = req.username.trim();
    if name.is_empty()
        || name.len() > 128
        || name.chars().any(|c| c.is_control() || c.is_whitespace())
    {
        return Err(ApiError::field(
            "username",
            "1..128 bytes without spaces or control characters",
        ));
    }
    check_new_password(&req.password)?;
    let (role, store_role) = parse_role(req.role.as_deref().unwrap_or("operator"))?;
    let hash = hash_off_runtime(req.password).await?;
    let id = state
        .store
        .create_user(&warrant_store::NewUser {
            username: name.to_string(),
            password_hash: hash.clone(),
            role: store_role,
            created_at: now_unix(),
        })
        .await
        .map_err(store_error)?;
    let entry = auth::UserEntry {
        id: id.to_string(),
        username: name.to_string(),
        role,
        password_hash: hash,
    };
    state.auth.upsert_user(entry.clone());
    Ok(Json(user_json(&entry)))
}

fn check_new_password(password: &str) -> Result<(), ApiError> {
    if password.len() < 8 || password.len() > 1024 {
        return Err(ApiError::field("password", "must be 8..1024 bytes"));
    }
    Ok(())
}

/// A role a user may be given, in the server's and the store's terms.
fn parse_role(name: &str) -> Result<(Role, warrant_store::Role), ApiError> {
    let role = Role::parse(name).ok_or_else(|| {
        ApiError::field(
            "role",
            format!("{name:?}: expected admin, operator or auditor"),
        )
    })?;
    let store_role = crate::state::role_to_store(role)
        .ok_or_else(|| ApiError::field("role", "not assignable"))?;
    Ok((role, store_role))
}

async fn hash_off_runtime(password: String) -> Result<String, ApiError> {
    tokio::task::spawn_blocking(move || auth::hash_password(&password))
        .await
        .map_err(|e| ApiError::detail(ErrorKey::Internal, e.to_string()))?
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateUserRequest {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// `PATCH /api/v1/users/{id}` `{role?, password?}`: admin only. A new
/// password also deletes the user's tokens (whoever held them must log in
/// again). Every node applies the change within `auth.sync_interval`.
async fn update_user(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<UpdateUserRequest>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Permission::UserAdmin)?;
    let num: i64 = id
        .parse()
        .map_err(|_| ApiError::field("id", "not a user id"))?;
    if req.role.is_none() && req.password.is_none() {
        return Err(ApiError::field("role", "give role and/or password"));
    }
    let role = req.role.as_deref().map(parse_role).transpose()?;
    if role.is_some() && id == caller.user_id {
        // As with deleting oneself: an admin cannot lock the last admin out
        // by accident.
        return Err(ApiError::detail(
            ErrorKey::Forbidden,
            "cannot change your own role",
        ));
    }
    let password_hash = match req.password {
        Some(p) => {
            check_new_password(&p)?;
            Some(hash_off_runtime(p).await?)
        }
        None => None,
    };
    let update = warrant_store::UserUpdate {
        role: role.map(|(_, r)| r),
        password_hash,
    };
    if !state
        .store
        .update_user(num, &update)
        .await
        .map_err(store_error)?
    {
        return Err(ApiError::detail(ErrorKey::NotFound, "user not found"));
    }
    let change = warrant_store::AuthChange {
        seq: 0,
        entity: warrant_store::AuthEntity::User,
        entity_id: num,
    };
    crate::state::apply_auth_change(&state.auth, state.store.as_ref(), &change)
        .await
        .map_err(store_error)?;
    let user = state
        .auth
        .user(&id)
        .ok_or_else(|| ApiError::detail(ErrorKey::NotFound, "user not found"))?;
    Ok(Json(user_json(&user)))
}

async fn delete_user(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Permission::UserAdmin)?;
    let num: i64 = id
        .parse()
        .map_err(|_| ApiError::field("id", "not a user id"))?;
    if id == caller.user_id {
        return Err(ApiError::detail(
            ErrorKey::Forbidden,
            "cannot delete yourself",
        ));
    }
    if !state.store.delete_user(num).await.map_err(store_error)? {
        return Err(ApiError::detail(ErrorKey::NotFound, "user not found"));
    }
    state.auth.remove_user(&id);
    Ok(Json(json!({"deleted": num})))
}

/// `POST /api/v1/users/{id}/operator-cert` (admin): a client certificate
/// that authenticates as user `id` over mTLS.
async fn issue_operator_cert(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<issuance::OperatorCertRequest>,
) -> Result<Response, ApiError> {
    caller.require(Permission::UserAdmin)?;
    let num: i64 = id
        .parse()
        .map_err(|_| ApiError::field("id", "not a user id"))?;
    let user = state
        .auth
        .user(&id)
        .ok_or_else(|| ApiError::detail(ErrorKey::NotFound, "user not found"))?;
    issuance::issue_operator_cert(&state, num, &user.username, req)
        .await
        .map(IntoResponse::into_response)
}

fn token_json(t: &auth::TokenEntry) -> Value {
    json!({
        "id": t.id.parse::<i64>().unwrap_or_default(),
        "user_id": t.user_id.parse::<i64>().unwrap_or_default(),
        "name": t.name,
        "expires_at": rfc3339(t.expires_at),
    })
}

async fn list_tokens(
    State(state): State<SharedState>,
    caller: Caller,
) -> Result<Json<Value>, ApiError> {
    caller.require(Permission::TokenSelf)?;
    let scope = if caller.role.allows(Permission::UserAdmin) {
        None
    } else {
        Some(caller.user_id.as_str())
    };
    let tokens: Vec<Value> = state.auth.tokens_of(scope).iter().map(token_json).collect();
    Ok(Json(json!({"tokens": tokens, "total": tokens.len()})))
}

#[derive(Deserialize, Default)]
struct CreateTokenRequest {
    #[serde(default)]
    name: Option<String>,
    /// Seconds; default `auth.token_expiry`.
    #[serde(default)]
    expires_in: Option<u64>,
}

async fn create_token(
    State(state): State<SharedState>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateTokenRequest>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Permission::TokenSelf)?;
    let name = req.name.unwrap_or_else(|| "api".into());
    if name.len() > 128 {
        return Err(ApiError::field("name", "longer than 128 bytes"));
    }
    let cfg = &state.config.config.auth;
    let ttl = auth::token_ttl(req.expires_in, cfg.token_expiry, cfg.token_max_lifetime)?;
    let (token, expires_at, id) = mint_token(&state, &caller.user_id, &name, ttl).await?;
    Ok(Json(
        json!({"id": id, "token": token, "name": name, "expires_at": rfc3339(expires_at)}),
    ))
}

async fn delete_token(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Permission::TokenSelf)?;
    let num: i64 = id
        .parse()
        .map_err(|_| ApiError::field("id", "not a token id"))?;
    // The database, not memory: the token may come from another node.
    let token = state
        .store
        .get_token(num)
        .await
        .map_err(store_error)?
        .ok_or_else(|| ApiError::detail(ErrorKey::NotFound, "token not found"))?;
    if token.user_id.to_string() != caller.user_id && !caller.role.allows(Permission::UserAdmin) {
        return Err(ApiError::detail(ErrorKey::NotFound, "token not found"));
    }
    state.store.delete_token(num).await.map_err(store_error)?;
    state.auth.remove_token(&id);
    Ok(Json(json!({"deleted": num})))
}

async fn issue_cert(
    State(state): State<SharedState>,
    caller: Caller,
    ApiJson(req): ApiJson<IssueRequest>,
) -> Result<Response, ApiError> {
    let _in_flight = state.limits.admit_issuance()?;
    issuance::issue(&state, &caller, req)
        .await
        .map(IntoResponse::into_response)
}

#[derive(Serialize)]
struct CertJson {
    serial_number: String,
    ca: String,
    common_name: String,
    profile: String,
    status: &'static str,
    not_before: String,
    not_after: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    principal_uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    revoked_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    revocation_reason: Option<String>,
    cert_pem: String,
}

fn cert_json(r: &CertRecord) -> CertJson {
    CertJson {
        serial_number: r.serial.clone(),
        ca: r.ca.clone(),
        common_name: r.common_name.clone(),
        profile: r.profile.clone(),
        status: r.status.as_str(),
        not_before: rfc3339(r.not_before),
        not_after: rfc3339(r.not_after),
        principal_uid: r.principal_uid.clone(),
        agent_id: r.agent_id.clone(),
        revoked_at: r.revoked_at.map(rfc3339),
        revocation_reason: r.revocation_reason.clone(),
        cert_pem: pem("CERTIFICATE", &r.der),
    }
}

pub fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[derive(Deserialize)]
struct ListQuery {
    ca: Option<String>,
    status: Option<String>,
    cn: Option<String>,
    principal_uid: Option<String>,
    limit: Option<String>,
    offset: Option<String>,
}

async fn list_certs(
    State(state): State<SharedState>,
    caller: Caller,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Permission::CertRead)?;
    let Query(q) = query.map_err(|e| ApiError::field("query", e.body_text()))?;
    let status = match q.status.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => Some(
            s.parse::<CertStatus>()
                .map_err(|_| ApiError::field("status", "expected V or R"))?,
        ),
    };
    let limit: u32 = match q.limit.as_deref().filter(|s| !s.is_empty()) {
        None => 100,
        Some(s) => s
            .parse()
            .map_err(|_| ApiError::field("limit", "not a non-negative integer"))?,
    };
    let offset: u64 = match q.offset.as_deref().filter(|s| !s.is_empty()) {
        None => 0,
        Some(s) => s
            .parse()
            .map_err(|_| ApiError::field("offset", "not a non-negative integer"))?,
    };
    let filter = CertFilter {
        ca: q.ca.filter(|s| !s.is_empty()),
        status,
        common_name: q.cn.filter(|s| !s.is_empty()),
        principal_uid: q.principal_uid.filter(|s| !s.is_empty()),
        limit: limit.min(warrant_store::MAX_LIST_LIMIT),
        offset,
    };
    let rows = state.store.list_certs(&filter).await.map_err(store_error)?;
    let certs: Vec<CertJson> = rows.iter().map(cert_json).collect();
    Ok(Json(
        json!({"certificates": certs, "count": certs.len(), "limit": filter.limit, "offset": offset}),
    ))
}

async fn find_cert(state: &AppState, ca: &str, serial: &str) -> Result<CertRecord, ApiError> {
    if state.hierarchy.ca(ca).is_none() {
        return Err(ApiError::detail(
            ErrorKey::CaNotFound,
            format!("ca: {ca:?}"),
        ));
    }
    let serial = serial.to_ascii_uppercase();
    if serial.is_empty() || serial.len() > 64 || !serial.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::field("serial", "must be hexadecimal"));
    }
    state
        .store
        .get_cert(ca, &serial)
        .await
        .map_err(store_error)?
        .ok_or_else(|| ApiError::detail(ErrorKey::NotFound, "certificate not found"))
}

async fn get_cert(
    State(state): State<SharedState>,
    caller: Caller,
    Path((ca, serial)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    caller.require(Permission::CertRead)?;
    let rec = find_cert(&state, &ca, &serial).await?;
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if accept.contains("application/pkix-cert") || accept.contains("application/octet-stream") {
        return Ok(([(header::CONTENT_TYPE, "application/pkix-cert")], rec.der).into_response());
    }
    if accept.contains("pem") || accept.starts_with("text/plain") {
        return Ok((
            [(header::CONTENT_TYPE, "application/x-pem-file")],
            pem("CERTIFICATE", &rec.der),
        )
            .into_response());
    }
    Ok(Json(cert_json(&rec)).into_response())
}

#[derive(Deserialize, Default)]
struct RevokeRequest {
    #[serde(default)]
    reason: Option<String>,
}

/// RFC 5280 reason names, accepted as `keyCompromise`, `key_compromise` or `KEY-COMPROMISE`.
fn parse_reason(s: Option<&str>) -> Result<warrant_ca::RevocationReason, ApiError> {
    let s = s
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::detail(ErrorKey::ReasonRequired, "reason: required"))?;
    let norm = |x: &str| {
        x.chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase()
    };
    let wanted = norm(s);
    warrant_ca::RevocationReason::ALL
        .into_iter()
        .find(|r| norm(r.as_str()) == wanted)
        .ok_or_else(|| ApiError::field("reason", format!("{s:?} is not an RFC 5280 reason")))
}

async fn revoke_cert(
    State(state): State<SharedState>,
    caller: Caller,
    Path((ca, serial)): Path<(String, String)>,
    ApiJson(req): ApiJson<RevokeRequest>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Permission::CertRevoke)?;
    let reason = parse_reason(req.reason.as_deref())?;
    let rec = find_cert(&state, &ca, &serial).await?;
    let now = now_unix();
    let outcome = state
        .store
        .revoke_cert(&rec.ca, &rec.serial, reason.as_str(), now)
        .await
        .map_err(store_error)?
        .ok_or_else(|| ApiError::detail(ErrorKey::NotFound, "certificate not found"))?;
    Ok(Json(json!({
        "serial_number": rec.serial,
        "ca": rec.ca,
        "status": "R",
        "reason": reason.as_str(),
        "already_revoked": outcome.already_revoked,
        "cascade_count": outcome.cascade_count,
    })))
}

#[derive(Deserialize)]
struct RevokeByPrincipalRequest {
    principal_uid: String,
    #[serde(default)]
    reason: Option<String>,
}

async fn revoke_by_principal(
    State(state): State<SharedState>,
    caller: Caller,
    ApiJson(req): ApiJson<RevokeByPrincipalRequest>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Permission::CertRevoke)?;
    let uid = req.principal_uid.trim();
    if uid.is_empty() || uid.len() > issuance::limits::PRINCIPAL_UID {
        return Err(ApiError::detail(
            ErrorKey::InvalidPrincipalUid,
            "principal_uid: required, at most 512 bytes",
        ));
    }
    aic::PrincipalUid::parse(uid).map_err(|e| {
        ApiError::detail(ErrorKey::InvalidPrincipalUid, format!("principal_uid: {e}"))
    })?;
    let reason = match req.reason.as_deref() {
        None => warrant_ca::RevocationReason::CessationOfOperation,
        Some(r) => parse_reason(Some(r))?,
    };
    let n = state
        .store
        .revoke_by_principal(uid, reason.as_str(), now_unix())
        .await
        .map_err(store_error)?;
    Ok(Json(
        json!({"principal_uid": uid, "revoked_count": n, "reason": reason.as_str()}),
    ))
}

/// CRLs are public, like the certificates they cover.
async fn crl(
    State(state): State<SharedState>,
    Path(ca_name): Path<String>,
) -> Result<Response, ApiError> {
    let ca_name = ca_name.trim_end_matches(".crl").to_string();
    let ca = state
        .hierarchy
        .ca(&ca_name)
        .ok_or_else(|| ApiError::detail(ErrorKey::CaNotFound, format!("ca: {ca_name:?}")))?
        .clone();
    let now = now_unix();
    let rows = state
        .store
        .list_revoked(&ca_name, now)
        .await
        .map_err(store_error)?;
    let entries: Vec<warrant_ca::RevokedEntry<'_>> = rows
        .iter()
        .map(|r| warrant_ca::RevokedEntry {
            serial_hex: &r.serial,
            revoked_at: issuance::from_unix(r.revoked_at),
            reason: r
                .reason
                .as_deref()
                .and_then(|s| s.parse().ok())
                .unwrap_or(warrant_ca::RevocationReason::Unspecified),
        })
        .collect();
    let der = warrant_ca::build_crl(
        &ca,
        &entries,
        issuance::from_unix(now),
        issuance::from_unix(now + 24 * 3600),
        state.next_crl_number(),
    )
    .map_err(issuance::ca_error)?;
    Ok(([(header::CONTENT_TYPE, "application/pkix-crl")], der).into_response())
}

/// CA certificates (PEM): `root`, or an issuing CA's name (its cert, then the root).
async fn ca_cert(
    State(state): State<SharedState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let body = if name == "root" {
        state.hierarchy.root_cert_pem().to_string()
    } else {
        state
            .hierarchy
            .ca(&name)
            .ok_or_else(|| ApiError::detail(ErrorKey::CaNotFound, format!("ca: {name:?}")))?
            .cert_pem()
            .to_string()
    };
    Ok(([(header::CONTENT_TYPE, "application/x-pem-file")], body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revocation_reasons_accept_common_spellings() {
        assert_eq!(
            parse_reason(Some("keyCompromise")).unwrap().as_str(),
            "keyCompromise"
        );
        assert_eq!(
            parse_reason(Some("key_compromise")).unwrap().as_str(),
            "keyCompromise"
        );
        assert_eq!(
            parse_reason(None).unwrap_err().key,
            ErrorKey::ReasonRequired
        );
        assert_eq!(
            parse_reason(Some("bored")).unwrap_err().key,
            ErrorKey::InvalidField
        );
    }
}
