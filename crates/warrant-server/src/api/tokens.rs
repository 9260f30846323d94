//! `/api/v1/tokens…`: API tokens, and the one place a token is minted.

use crate::audit::{self, Entry, EventKind};
use crate::auth::{self, Caller, Permission};
use crate::clock::{rfc3339, unix_now};
use crate::error::{ApiError, ErrorKey};
use crate::extract::ApiJson;
use crate::state::{AppState, SharedState};
use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};

/// Stores a token's hash, then indexes it in memory. Returns (token, expiry, id).
pub(super) async fn mint_token(
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
    let now = unix_now();
    let expires_at = now.saturating_add(ttl as i64);
    let id = state
        .store
        .accounts()
        .create_token(&warrant_store::NewApiToken {
            token_hash: hash,
            user_id: uid,
            name: name.to_string(),
            created_at: now,
            expires_at,
            one_time: false,
        })
        .await?;
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

fn token_json(t: &auth::TokenEntry) -> Value {
    json!({
        "id": t.id.parse::<i64>().unwrap_or_default(),
        "user_id": t.user_id.parse::<i64>().unwrap_or_default(),
        "name": t.name,
        "expires_at": rfc3339(t.expires_at),
    })
}

pub(super) async fn list_tokens(
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
pub(super) struct CreateTokenRequest {
    #[serde(default)]
    name: Option<String>,
    /// Seconds; default `auth.token_expiry`.
    #[serde(default)]
    expires_in: Option<u64>,
}

pub(super) async fn create_token(
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
    audit::record(
        &state,
        Entry::by(EventKind::TokenCreate, &caller)
            .detail("token_id", id)
            .detail("name", name.as_str()),
    )
    .await;
    Ok(Json(
        json!({"id": id, "token": token, "name": name, "expires_at": rfc3339(expires_at)}),
    ))
}

pub(super) async fn delete_token(
    State(state): State<SharedState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Permission::TokenSelf)?;
    let num: i64 = id
        .parse()
        .map_err(|_| ApiError::field("id", "not a token id"))?;
    let not_found = || ApiError::detail(ErrorKey::NotFound, "token not found");
    // The database, not memory: the token may come from another node.
    let token = state
        .store
        .accounts()
        .get_token(num)
        .await?
        .ok_or_else(not_found)?;
    if token.user_id.to_string() != caller.user_id && !caller.role.allows(Permission::UserAdmin) {
        return Err(not_found());
    }
    state.store.accounts().delete_token(num).await?;
    state.auth.remove_token(&id);
    audit::record(
        &state,
        Entry::by(EventKind::TokenDelete, &caller)
            .detail("token_id", num)
            .detail("owner_user_id", token.user_id),
    )
    .await;
    Ok(Json(json!({"deleted": num})))
}
