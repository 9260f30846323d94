//! `/api/v1/users…`: the session (login, logout, info), user administration
//! and operator certificates.

use super::tokens::mint_token;
use crate::audit::{self, Entry, EventKind};
use crate::auth::{self, AuthMethod, Caller, Permission, Role};
use crate::clock::{rfc3339, unix_now};
use crate::conn::OverTls;
use crate::error::{ApiError, ErrorKey};
use crate::extract::ApiJson;
use crate::issuance::{self, OperatorCertRequest};
use crate::state::{AppState, SharedState};
use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
pub(super) struct LoginRequest {
    username: String,
    password: String,
}

/// Answers the token in the body (API clients) and sets it as the session
/// cookie (browsers); see [`auth::session_cookie`].
pub(super) async fn login(
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
    let attempted = req.username.clone();
    let user = match verify_login(&state, req.username, req.password).await {
        Ok(u) => u,
        Err(e) => {
            audit::record(
                &state,
                Entry::new(EventKind::LoginFailed, attempted).detail("error", e.key.as_str()),
            )
            .await;
            return Err(e);
        }
    };
    let cfg = &state.config.config.auth;
    let ttl = auth::token_ttl(None, cfg.token_expiry, cfg.token_max_lifetime)?;
    let (token, expires_at, token_id) = mint_token(&state, &user.id, "login", ttl).await?;
    audit::record(
        &state,
        Entry::new(EventKind::Login, user.username.clone()).detail("token_id", token_id),
    )
    .await;
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

/// The user whose password this is. The attempt is counted as a failure
/// before Argon2 runs (see `crate::login`); the verifier slot is moved into
/// the blocking task so it stays taken until Argon2 returns, even if this
/// request is dropped meanwhile. Unknown users verify a decoy hash, so the
/// answer's timing does not tell which users exist.
async fn verify_login(
    state: &AppState,
    username: String,
    password: String,
) -> Result<auth::UserEntry, ApiError> {
    let slot = state.login.admit(&username, unix_now())?;
    let user = user_by_name(state, &username).await?;
    let phc = user
        .as_ref()
        .map(|u| u.password_hash.clone())
        .unwrap_or_else(|| auth::decoy_password_hash().to_string());
    let ok = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        auth::verify_password(&password, &phc)
    })
    .await
    .unwrap_or(false);
    match (ok, user) {
        (true, Some(u)) => {
            state.login.succeed(&username);
            Ok(u)
        }
        _ => Err(ApiError::detail(
            ErrorKey::LoginFailed,
            "invalid username or password",
        )),
    }
}

/// A user by name from memory, else from the database (created on another
/// node and not yet applied from the change feed). Not cached: the feed
/// brings it within `auth.sync_interval`.
async fn user_by_name(state: &AppState, name: &str) -> Result<Option<auth::UserEntry>, ApiError> {
    if let Some(u) = state.auth.user_by_name(name) {
        return Ok(Some(u));
    }
    let row = state.store.accounts().get_user_by_name(name).await?;
    Ok(row.as_ref().map(crate::state::user_entry))
}

/// Deletes the token the caller presented and clears the session cookie.
pub(super) async fn logout(
    State(state): State<SharedState>,
    tls: Option<Extension<OverTls>>,
    caller: Caller,
) -> Result<Response, ApiError> {
    if let AuthMethod::Token { token_id } = &caller.method {
        if let Ok(id) = token_id.parse::<i64>() {
            state.store.accounts().delete_token(id).await?;
        }
        state.auth.remove_token(token_id);
    }
    audit::record(&state, Entry::by(EventKind::Logout, &caller)).await;
    let cookie = auth::session_cookie("", 0, tls.is_some());
    Ok((
        [(header::SET_COOKIE, cookie)],
        Json(json!({"status": "logged_out"})),
    )
        .into_response())
}

pub(super) async fn info(caller: Caller) -> Json<Value> {
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

pub(super) async fn list_users(
    State(state): State<SharedState>,
    caller: Caller,
) -> Result<Json<Value>, ApiError> {
    caller.require(Permission::UserAdmin)?;
    let users: Vec<Value> = state.auth.users().iter().map(user_json).collect();
    Ok(Json(json!({"users": users, "total": users.len()})))
}

#[derive(Deserialize)]
pub(super) struct CreateUserRequest {
    username: String,
    password: String,
    #[serde(default)]
    role: Option<String>,
}

pub(super) async fn create_user(
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
        .accounts()
        .create_user(&warrant_store::NewUser {
            username: name.to_string(),
            password_hash: hash.clone(),
            role: store_role,
            created_at: unix_now(),
        })
        .await?;
    let entry = auth::UserEntry {
        id: id.to_string(),
        username: name.to_string(),
        role,
        password_hash: hash,
    };
    state.auth.upsert_user(entry.clone());
    audit::record(
        &state,
        Entry::by(EventKind::UserCreate, &caller)
            .detail("user_id", id)
            .detail("username", name)
            .detail("role", role.as_str()),
    )
    .await;
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
            format!("{name:?}: expected admin, operator, auditor or issuer"),
        )
    })?;
    let store_role = crate::state::role_to_store(role)
        .ok_or_else(|| ApiError::field("role", "not assignable"))?;
    Ok((role, store_role))
}

async fn hash_off_runtime(password: String) -> Result<String, ApiError> {
    tokio::task::spawn_blocking(move || auth::hash_password(&password)).await?
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UpdateUserRequest {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// `PATCH /api/v1/users/{id}` `{role?, password?}`: admin only. A new
/// password also deletes the user's tokens (whoever held them must log in
/// again). Every node applies the change within `auth.sync_interval`.
pub(super) async fn update_user(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<UpdateUserRequest>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Permission::UserAdmin)?;
    let num = user_id(&id)?;
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
    let mut entry = Entry::by(EventKind::UserUpdate, &caller).detail("user_id", num);
    if let Some((r, _)) = role {
        entry = entry.detail("role", r.as_str());
    }
    if password_hash.is_some() {
        entry = entry.detail("password_changed", true);
    }
    let update = warrant_store::UserUpdate {
        role: role.map(|(_, r)| r),
        password_hash,
    };
    if !state.store.accounts().update_user(num, &update).await? {
        return Err(user_not_found());
    }
    let change = warrant_store::AuthChange {
        seq: 0,
        entity: warrant_store::AuthEntity::User,
        entity_id: num,
    };
    crate::state::apply_auth_change(&state.auth, state.store.as_ref(), &change).await?;
    audit::record(&state, entry).await;
    let user = state.auth.user(&id).ok_or_else(user_not_found)?;
    Ok(Json(user_json(&user)))
}

pub(super) async fn delete_user(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Permission::UserAdmin)?;
    let num = user_id(&id)?;
    if id == caller.user_id {
        return Err(ApiError::detail(
            ErrorKey::Forbidden,
            "cannot delete yourself",
        ));
    }
    if !state.store.accounts().delete_user(num).await? {
        return Err(user_not_found());
    }
    state.auth.remove_user(&id);
    audit::record(
        &state,
        Entry::by(EventKind::UserDelete, &caller).detail("user_id", num),
    )
    .await;
    Ok(Json(json!({"deleted": num})))
}

/// `POST /api/v1/users/{id}/operator-cert` (admin): a client certificate
/// that authenticates as user `id` over mTLS.
pub(super) async fn issue_operator_cert(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<OperatorCertRequest>,
) -> Result<Response, ApiError> {
    caller.require(Permission::UserAdmin)?;
    let num = user_id(&id)?;
    let user = state.auth.user(&id).ok_or_else(user_not_found)?;
    let cas = state.cas();
    let issued = issuance::issue_operator_cert(&state, &cas, num, &user.username, req).await?;
    audit::record(
        &state,
        Entry::by(EventKind::Issue, &caller)
            .cert(issued.ca, &issued.serial_number)
            .detail("profile", issued.profile)
            .detail("operator_for", user.username.as_str()),
    )
    .await;
    Ok(issued.into_response())
}

/// The `{id}` of a user route.
fn user_id(id: &str) -> Result<i64, ApiError> {
    id.parse()
        .map_err(|_| ApiError::field("id", "not a user id"))
}

fn user_not_found() -> ApiError {
    ApiError::detail(ErrorKey::NotFound, "user not found")
}
