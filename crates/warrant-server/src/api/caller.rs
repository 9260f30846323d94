//! Who is calling: the [`Caller`] extractor, from a presented token or the
//! connection's client certificate, after the body and CSRF gates.

use crate::auth::{self, AuthMethod, Caller, Resolution, Role, TokenSource};
use crate::clock::{system_now, unix_now};
use crate::conn::{ClientCert, OverTls};
use crate::error::{ApiError, ErrorKey, client_cert_refused};
use crate::extract;
use crate::state::{AppState, SharedState};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use warrant_store::CertStatus;

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
            let mut caller = authenticate_token(state, token, unix_now()).await?;
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
        Resolution::Unknown { hash } => read_through(state, hash, now).await,
    }
}

/// A token this node does not hold, looked up by hash (a bounded number of
/// lookups at once) and cached unless the auth index changed meanwhile.
async fn read_through(state: &AppState, hash: [u8; 32], now: i64) -> Result<Caller, ApiError> {
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
        .accounts()
        .token_by_hash(&hash)
        .await?
        .filter(|t| t.expires_at > now)
    else {
        state.auth.remember_missing(hash);
        return Err(bad_token());
    };
    let token = crate::state::token_entry(&row);
    let user = match state.auth.user(&token.user_id) {
        Some(u) => u,
        None => match state.store.accounts().get_user(row.user_id).await? {
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

/// Deletes a one-time token's row; refuses unless this delete removed it.
async fn spend_one_time(state: &AppState, token_id: &str) -> Result<(), ApiError> {
    let id: i64 = token_id.parse().map_err(|_| bad_token())?;
    if state.store.accounts().delete_token(id).await? {
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
    let cert = warrant_ca::verify_principal_cert(&der, &state.cas().hierarchy, system_now())
        .map_err(client_cert_refused)?;
    let standing = state
        .store
        .certs()
        .cert_status(&cert.issuing_ca, &cert.serial_hex)
        .await?
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
