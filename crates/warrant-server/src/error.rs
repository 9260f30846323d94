//! API errors: one enum of keys, each with its HTTP status (ca.md §3).
//!
//! The tests import [`ErrorKey`] too, so the key a client sees and the key a
//! test expects come from the same place.
//!
//! Every conversion of another error type into an [`ApiError`] is here
//! ([`From`] impls below the wire form): the store, the write path, the
//! policy rules, the CA and AIC crates, the login gate. Domain modules
//! return their own errors; the edge turns them into keys with `?`.

use crate::login::Refusal;
use crate::policy::{PolicyError, PolicyField};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::time::Duration;
use warrant_store::{NonceError, StoreError, WriteError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKey {
    InvalidJson,
    CnRequired,
    InvalidField,
    PayloadTooLarge,
    /// The request body did not arrive within `http.body_read_timeout`
    /// (408; the connection is closed).
    RequestTimeout,
    /// A JSON endpoint was sent a body that is not `application/json`
    /// (415): also what turns away a cross-site HTML form or `text/plain`
    /// `fetch`, which browsers send without a CORS preflight.
    UnsupportedMediaType,
    Unauthorized,
    Forbidden,
    CaNotFound,
    NotFound,
    /// The certificate's row was stored without its DER
    /// (`storage.agent_cert_der = "drop"`): its metadata is there, the
    /// certificate itself is gone for good (410).
    CertDerDropped,
    MethodNotAllowed,
    AicRequiresAuth,
    ReasonRequired,
    InvalidPrincipalUid,
    PrincipalCertUntrusted,
    DelegationSignatureInvalid,
    DaTimestampStale,
    /// A DA nonce that is not 32 bytes (400): its own key, since the codec
    /// keeps any length (aic.md rule 6) and issuance alone refuses it.
    InvalidDaNonce,
    DaNonceReplayed,
    RepresentativePolicyDenied,
    CapabilityNotGranted,
    MaxAgentsExceeded,
    /// A renewal would reach past `issuance.renewal_max_total_days`.
    RenewalLimitReached,
    /// Per-client-IP rate limit (429 with `Retry-After`): its own key, so a
    /// client can tell "slow down" from "the server is full" (ca.md §7.6).
    RateLimited,
    /// Per-principal issuance limit (429 with `Retry-After`).
    PrincipalRateLimited,
    /// Write pipeline full (503 with `Retry-After`); the key varwof-core
    /// uses for it, kept for compatibility.
    Overloaded,
    AccountLocked,
    LoginFailed,
    Conflict,
    /// Storage unreachable: the request may be retried; never a client fault.
    Unavailable,
    /// A CA key's PKCS#11 token cannot sign now (gone, failing, PIN
    /// refused): the request may be retried; never a client fault.
    CaKeyUnavailable,
    Internal,
}

impl ErrorKey {
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKey::InvalidJson => "api.invalid_json",
            ErrorKey::CnRequired => "api.cn_required",
            ErrorKey::InvalidField => "api.invalid_field",
            ErrorKey::PayloadTooLarge => "api.payload_too_large",
            ErrorKey::RequestTimeout => "api.request_timeout",
            ErrorKey::UnsupportedMediaType => "api.unsupported_media_type",
            ErrorKey::Unauthorized => "api.unauthorized",
            ErrorKey::Forbidden => "api.forbidden",
            ErrorKey::CaNotFound => "api.ca_not_found",
            ErrorKey::NotFound => "api.not_found",
            ErrorKey::CertDerDropped => "api.cert_der_dropped",
            ErrorKey::MethodNotAllowed => "api.method_not_allowed",
            ErrorKey::AicRequiresAuth => "api.aic_requires_auth",
            ErrorKey::ReasonRequired => "api.reason_required",
            ErrorKey::InvalidPrincipalUid => "api.invalid_principal_uid",
            ErrorKey::PrincipalCertUntrusted => "api.principal_cert_untrusted",
            ErrorKey::DelegationSignatureInvalid => "api.delegation_signature_invalid",
            ErrorKey::DaTimestampStale => "api.da_timestamp_stale",
            ErrorKey::InvalidDaNonce => "api.invalid_da_nonce",
            ErrorKey::DaNonceReplayed => "api.da_nonce_replayed",
            ErrorKey::RepresentativePolicyDenied => "api.representative_policy_denied",
            ErrorKey::CapabilityNotGranted => "api.capability_not_granted",
            ErrorKey::MaxAgentsExceeded => "api.max_agents_exceeded",
            ErrorKey::RenewalLimitReached => "api.renewal_limit_reached",
            ErrorKey::RateLimited => "api.rate_limited",
            ErrorKey::PrincipalRateLimited => "api.principal_rate_limited",
            ErrorKey::Overloaded => "api.too_many_requests",
            ErrorKey::AccountLocked => "api.account_locked",
            ErrorKey::LoginFailed => "api.login_failed",
            ErrorKey::Conflict => "api.conflict",
            ErrorKey::Unavailable => "api.unavailable",
            ErrorKey::CaKeyUnavailable => "api.ca_key_unavailable",
            ErrorKey::Internal => "api.internal_error",
        }
    }

    pub const fn status(self) -> StatusCode {
        match self {
            ErrorKey::InvalidJson
            | ErrorKey::CnRequired
            | ErrorKey::InvalidField
            | ErrorKey::AicRequiresAuth
            | ErrorKey::ReasonRequired
            | ErrorKey::InvalidPrincipalUid
            | ErrorKey::InvalidDaNonce => StatusCode::BAD_REQUEST,
            ErrorKey::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKey::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            ErrorKey::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorKey::Unauthorized | ErrorKey::LoginFailed => StatusCode::UNAUTHORIZED,
            ErrorKey::Forbidden
            | ErrorKey::PrincipalCertUntrusted
            | ErrorKey::DelegationSignatureInvalid
            | ErrorKey::DaTimestampStale
            | ErrorKey::DaNonceReplayed
            | ErrorKey::RepresentativePolicyDenied
            | ErrorKey::CapabilityNotGranted
            | ErrorKey::MaxAgentsExceeded
            | ErrorKey::RenewalLimitReached => StatusCode::FORBIDDEN,
            ErrorKey::CaNotFound | ErrorKey::NotFound => StatusCode::NOT_FOUND,
            ErrorKey::CertDerDropped => StatusCode::GONE,
            ErrorKey::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorKey::RateLimited | ErrorKey::PrincipalRateLimited | ErrorKey::AccountLocked => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ErrorKey::Overloaded | ErrorKey::Unavailable | ErrorKey::CaKeyUnavailable => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ErrorKey::Conflict => StatusCode::CONFLICT,
            ErrorKey::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// An error on its way to the wire.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub key: ErrorKey,
    pub detail: Option<String>,
    /// Seconds, for 429/503 answers.
    pub retry_after: Option<u64>,
}

/// The wire form, also used by tests to decode answers.
#[derive(Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct ErrorBody {
    pub code: u16,
    pub message: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

impl ApiError {
    pub fn new(key: ErrorKey) -> Self {
        Self {
            key,
            detail: None,
            retry_after: None,
        }
    }

    pub fn detail(key: ErrorKey, detail: impl Into<String>) -> Self {
        Self {
            key,
            detail: Some(detail.into()),
            retry_after: None,
        }
    }

    /// 400 `api.invalid_field`, naming the field first so clients can parse it.
    pub fn field(field: &str, why: impl std::fmt::Display) -> Self {
        Self::detail(ErrorKey::InvalidField, format!("{field}: {why}"))
    }

    pub fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs.max(1));
        self
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            code: self.key.status().as_u16(),
            message: self.key.as_str().to_string(),
            detail: self.detail.clone().unwrap_or_default(),
        }
    }
}

impl From<ErrorKey> for ApiError {
    fn from(key: ErrorKey) -> Self {
        ApiError::new(key)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.detail {
            Some(d) => write!(f, "{}: {d}", self.key.as_str()),
            None => f.write_str(self.key.as_str()),
        }
    }
}

impl std::error::Error for ApiError {}

/// Whole seconds for `Retry-After`: rounded up, at least one.
pub fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

/// 403 `api.principal_cert_untrusted`: the principal certificate of an agent
/// request is not one this CA vouches for (chain, record, revocation, UID).
pub fn principal_untrusted(detail: impl Into<String>) -> ApiError {
    ApiError::detail(ErrorKey::PrincipalCertUntrusted, detail)
}

/// 500 `api.internal_error`: a fault of the server, never of the request.
pub fn internal(detail: impl Into<String>) -> ApiError {
    ApiError::detail(ErrorKey::Internal, detail)
}

/// The store: a duplicate is 409, a missing reference 404, an unreachable
/// database or a conflict that outlived its retries 503 (retry), anything
/// else 500.
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict(what) => {
                ApiError::detail(ErrorKey::Conflict, format!("{what} already exists"))
            }
            StoreError::MissingReference(what) => {
                ApiError::detail(ErrorKey::NotFound, format!("{what} does not exist"))
            }
            StoreError::Unavailable(d) => {
                ApiError::detail(ErrorKey::Unavailable, format!("database: {d}"))
                    .with_retry_after(1)
            }
            StoreError::Retryable(d) => {
                ApiError::detail(ErrorKey::Unavailable, format!("database conflict: {d}"))
                    .with_retry_after(1)
            }
            other => internal(other.to_string()),
        }
    }
}

/// The issuance write path: backpressure is 503 `api.too_many_requests`, a
/// nonce the database already holds is 403 `api.da_nonce_replayed`.
impl From<WriteError> for ApiError {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::Overloaded { retry_after } => {
                ApiError::detail(ErrorKey::Overloaded, "write pipeline full")
                    .with_retry_after(retry_after_secs(retry_after))
            }
            WriteError::NonceReplayed => nonce_replayed(),
            WriteError::Unavailable(d) => {
                ApiError::detail(ErrorKey::Unavailable, format!("database: {d}"))
                    .with_retry_after(1)
            }
            WriteError::ShuttingDown => {
                ApiError::detail(ErrorKey::Unavailable, "server is shutting down")
                    .with_retry_after(1)
            }
            WriteError::EmptyRecord => internal(e.to_string()),
        }
    }
}

/// Reserving a DA nonce in memory: held by another request or committed is
/// a replay; a full ledger is backpressure.
impl From<NonceError> for ApiError {
    fn from(e: NonceError) -> Self {
        match e {
            NonceError::Replayed => nonce_replayed(),
            NonceError::Full => {
                ApiError::detail(ErrorKey::Overloaded, "nonce ledger full").with_retry_after(1)
            }
        }
    }
}

fn nonce_replayed() -> ApiError {
    ApiError::detail(
        ErrorKey::DaNonceReplayed,
        "user_auth_nonce: already consumed",
    )
}

/// A policy refusal: its own key, the rule's message as the detail (it
/// starts with the field it concerns).
impl From<PolicyError> for ApiError {
    fn from(e: PolicyError) -> Self {
        let key = match &e {
            PolicyError::CapabilityNotGranted(_) | PolicyError::GrantNotInCertificate(_) => {
                ErrorKey::CapabilityNotGranted
            }
            PolicyError::RepresentativeModeDenied
            | PolicyError::PolicyWiderThanCertificate(
                PolicyField::AllowedMode | PolicyField::MaxSessionHours,
            ) => ErrorKey::RepresentativePolicyDenied,
            PolicyError::MaxAgentsExceeded { .. }
            | PolicyError::PolicyWiderThanCertificate(PolicyField::MaxAgents) => {
                ErrorKey::MaxAgentsExceeded
            }
            PolicyError::TimestampOutsideSkew { .. }
            | PolicyError::DelegationEnded { .. }
            | PolicyError::DelegationEndsBeforeStart => ErrorKey::DaTimestampStale,
            PolicyError::UnknownDelegationMode(_) | PolicyError::ZeroValidity => {
                ErrorKey::InvalidField
            }
            PolicyError::IssuerExpired => ErrorKey::Internal,
        };
        ApiError::detail(key, e.to_string())
    }
}

/// A `warrant_ca` error: client faults name their field (400), a CA key
/// whose token cannot sign now is 503 (retry), the rest are 500s.
impl From<warrant_ca::CaError> for ApiError {
    fn from(e: warrant_ca::CaError) -> Self {
        if e.is_key_unavailable() {
            return ApiError::detail(ErrorKey::CaKeyUnavailable, e.to_string()).with_retry_after(1);
        }
        match e.invalid_field() {
            Some(field) => ApiError::field(field, e.to_string()),
            None => internal(e.to_string()),
        }
    }
}

/// An AIC decode error, named by the API field its ASN.1 field path came
/// from (400 `api.invalid_field`).
impl From<aic::DecodeError> for ApiError {
    fn from(e: aic::DecodeError) -> Self {
        let f = e.field;
        let api = if f.contains("agentId") {
            "agent_id"
        } else if f.contains("reasonCode") {
            "user_auth_reason_code"
        } else if f.contains("description") || f.contains("reason") {
            "user_auth_reason_description"
        } else if f.contains("onstraint") {
            "authorization_constraints"
        } else if f.contains("apabilit") {
            "capabilities"
        } else if f.contains("Lifetime") {
            "user_auth_lifetime"
        } else if f.contains("rincipal") {
            "principal_uid"
        } else if f.contains("nonce") {
            "user_auth_nonce"
        } else if f.contains("Mode") {
            "delegation_mode"
        } else {
            "delegation"
        };
        ApiError::field(api, e.to_string())
    }
}

/// A principal certificate (an agent request's `user_cert_pem`) that does
/// not verify: 403 `api.principal_cert_untrusted`.
impl From<warrant_ca::PrincipalCertError> for ApiError {
    fn from(e: warrant_ca::PrincipalCertError) -> Self {
        principal_untrusted(e.to_string())
    }
}

/// A client certificate presented over mTLS that does not verify: the
/// caller is not authenticated (401 `api.unauthorized`).
pub fn client_cert_refused(e: warrant_ca::PrincipalCertError) -> ApiError {
    ApiError::detail(ErrorKey::Unauthorized, format!("client certificate: {e}"))
}

/// A principal UID the request names that does not parse (400
/// `api.invalid_principal_uid`).
impl From<aic::PrincipalUidParseError> for ApiError {
    fn from(e: aic::PrincipalUidParseError) -> Self {
        ApiError::detail(ErrorKey::InvalidPrincipalUid, format!("principal_uid: {e}"))
    }
}

/// The DA signature does not verify under the principal certificate's key
/// (403 `api.delegation_signature_invalid`).
impl From<aic::DaError> for ApiError {
    fn from(e: aic::DaError) -> Self {
        ApiError::detail(
            ErrorKey::DelegationSignatureInvalid,
            format!("user_auth_signature: {e}"),
        )
    }
}

/// The login gate: a locked account is 429, a full table or verifier pool
/// 503, each with the wait.
impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Locked { retry_after } => ApiError::detail(
                ErrorKey::AccountLocked,
                format!("try again in {retry_after} s"),
            )
            .with_retry_after(retry_after),
            Refusal::TableFull { retry_after } => {
                ApiError::detail(ErrorKey::Overloaded, "too many failed logins in progress")
                    .with_retry_after(retry_after)
            }
            Refusal::VerifiersBusy => {
                ApiError::detail(ErrorKey::Overloaded, "too many logins in progress")
                    .with_retry_after(1)
            }
        }
    }
}

/// A blocking task (key generation, password hashing) that panicked or was
/// cancelled.
impl From<tokio::task::JoinError> for ApiError {
    fn from(e: tokio::task::JoinError) -> Self {
        internal(e.to_string())
    }
}

/// The header that carries the request id of a 5xx answer.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// A fresh request id: 16 hex digits. Made only when a 5xx answer is built,
/// so the 200 path pays nothing for it.
pub fn new_request_id() -> String {
    let mut raw = [0u8; 8];
    if aws_lc_rs::rand::fill(&mut raw).is_err() {
        // Still unique within the process: a counter stands in for the CSPRNG.
        use std::sync::atomic::{AtomicU64, Ordering};
        static FALLBACK: AtomicU64 = AtomicU64::new(0);
        raw = FALLBACK.fetch_add(1, Ordering::Relaxed).to_be_bytes();
    }
    hex::encode(raw)
}

/// What a client is told about a 5xx: the kind of failure, never its text
/// (database driver messages, file paths, panics stay in the log). An
/// `Overloaded` detail is kept: it is always one of the server's own fixed
/// phrases naming the budget that is full (`write pipeline full`, …), which
/// tells a client what to back off from.
fn public_detail(key: ErrorKey, detail: &str) -> &str {
    match key {
        ErrorKey::Overloaded if !detail.is_empty() => detail,
        ErrorKey::Overloaded => "server busy",
        ErrorKey::Unavailable => "database unavailable",
        ErrorKey::CaKeyUnavailable => "CA signing key unavailable",
        _ => "internal error",
    }
}

impl ApiError {
    /// The wire form of a 5xx: its detail replaced by [`public_detail`] and
    /// `request_id`, after the full error was logged under the same id.
    fn scrubbed_5xx(&self, request_id: &str) -> ErrorBody {
        let detail = self.detail.as_deref().unwrap_or("");
        match self.key {
            // Backpressure, not a fault: the rejection counter tracks it, and
            // a log line per refused request would add load to an overloaded
            // server.
            ErrorKey::Overloaded => {
                tracing::debug!(request_id, key = self.key.as_str(), detail, "refused")
            }
            ErrorKey::Unavailable => {
                tracing::warn!(
                    request_id,
                    key = self.key.as_str(),
                    detail,
                    "storage unavailable"
                )
            }
            ErrorKey::CaKeyUnavailable => {
                tracing::warn!(
                    request_id,
                    key = self.key.as_str(),
                    detail,
                    "CA key unavailable"
                )
            }
            _ => tracing::error!(
                request_id,
                key = self.key.as_str(),
                detail,
                "internal error"
            ),
        }
        ErrorBody {
            code: self.key.status().as_u16(),
            message: self.key.as_str().to_string(),
            detail: format!(
                "{} (request id {request_id})",
                public_detail(self.key, detail)
            ),
        }
    }
}

impl ApiError {
    /// What a client may be told, and the request id of a 5xx (whose full
    /// error is logged under it).
    pub(crate) fn public_body(&self) -> (ErrorBody, Option<String>) {
        match self.key.status().is_server_error().then(new_request_id) {
            Some(id) => (self.scrubbed_5xx(&id), Some(id)),
            None => (self.body(), None),
        }
    }

    /// The headers and extension every error answer carries, whatever its
    /// body's shape: `Retry-After`, the request id, and the key (which the
    /// metrics layer counts).
    pub(crate) fn decorate(&self, resp: &mut Response, request_id: Option<String>) {
        if let Some(secs) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        if let Some(id) = request_id
            && let Ok(v) = HeaderValue::from_str(&id)
        {
            resp.headers_mut().insert(REQUEST_ID_HEADER, v);
        }
        resp.extensions_mut().insert(self.key);
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (body, request_id) = self.public_body();
        let mut resp = (self.key.status(), axum::Json(body)).into_response();
        self.decorate(&mut resp, request_id);
        resp
    }
}

/// Turns a caught panic into the standard 500 body; the panic text is logged
/// under the answer's request id.
pub fn panic_response(err: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let msg = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic");
    ApiError::detail(ErrorKey::Internal, format!("handler panicked: {msg}")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(10)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(100)), 100);
    }

    /// Each policy refusal keeps the key and detail it had when the rules
    /// built API errors themselves.
    #[test]
    fn policy_refusals_map_to_their_keys() {
        use crate::policy::{CapName, SkewSide};
        let cases = [
            (
                PolicyError::CapabilityNotGranted(CapName("db:drop".into())),
                ErrorKey::CapabilityNotGranted,
                "capabilities: db:drop is not granted to the principal",
            ),
            (
                PolicyError::GrantNotInCertificate(CapName("db:drop".into())),
                ErrorKey::CapabilityNotGranted,
                "principal_authorization.grants: db:drop is not in the principal certificate's grants",
            ),
            (
                PolicyError::RepresentativeModeDenied,
                ErrorKey::RepresentativePolicyDenied,
                "delegation_mode: the principal's policy allows authorized mode only",
            ),
            (
                PolicyError::UnknownDelegationMode(2),
                ErrorKey::InvalidField,
                "delegation_mode: 2 is not 0 or 1",
            ),
            (
                PolicyError::MaxAgentsExceeded { active: 3, max: 3 },
                ErrorKey::MaxAgentsExceeded,
                "principal has 3 active agent certificates; policy allows 3",
            ),
            (
                PolicyError::PolicyWiderThanCertificate(PolicyField::AllowedMode),
                ErrorKey::RepresentativePolicyDenied,
                "principal_authorization.delegation_policy.allowed_mode: wider than the principal certificate's",
            ),
            (
                PolicyError::PolicyWiderThanCertificate(PolicyField::MaxAgents),
                ErrorKey::MaxAgentsExceeded,
                "principal_authorization.delegation_policy.max_agents: wider than the principal certificate's",
            ),
            (
                PolicyError::PolicyWiderThanCertificate(PolicyField::MaxSessionHours),
                ErrorKey::RepresentativePolicyDenied,
                "principal_authorization.delegation_policy.max_session_hours: wider than the principal certificate's",
            ),
            (
                PolicyError::TimestampOutsideSkew {
                    delta: 90,
                    side: SkewSide::Future,
                    skew: 60,
                },
                ErrorKey::DaTimestampStale,
                "user_auth_timestamp: 90 s in the future; allowed skew is 60 s",
            ),
            (
                PolicyError::DelegationEnded { ago: 5 },
                ErrorKey::DaTimestampStale,
                "user_auth_timestamp: the delegation ended 5 s ago (timestamp + user_auth_lifetime)",
            ),
            (
                PolicyError::DelegationEndsBeforeStart,
                ErrorKey::DaTimestampStale,
                "user_auth_timestamp: the delegation ends before a certificate could start",
            ),
            (
                PolicyError::ZeroValidity,
                ErrorKey::InvalidField,
                "validity: must be at least 1 day",
            ),
            (
                PolicyError::IssuerExpired,
                ErrorKey::Internal,
                "issuing CA has expired",
            ),
        ];
        for (refusal, key, detail) in cases {
            let e = ApiError::from(refusal);
            assert_eq!(e.key, key, "{detail}");
            assert_eq!(e.detail.as_deref(), Some(detail));
        }
    }

    #[test]
    fn write_path_and_nonce_refusals_keep_their_keys() {
        let e = ApiError::from(WriteError::Overloaded {
            retry_after: Duration::from_millis(1500),
        });
        assert_eq!((e.key, e.retry_after), (ErrorKey::Overloaded, Some(2)));
        for e in [
            ApiError::from(WriteError::NonceReplayed),
            ApiError::from(NonceError::Replayed),
        ] {
            assert_eq!(e.key, ErrorKey::DaNonceReplayed);
            assert_eq!(
                e.detail.as_deref(),
                Some("user_auth_nonce: already consumed")
            );
        }
        let e = ApiError::from(NonceError::Full);
        assert_eq!((e.key, e.retry_after), (ErrorKey::Overloaded, Some(1)));
        let e = ApiError::from(StoreError::Unavailable("gone".into()));
        assert_eq!((e.key, e.retry_after), (ErrorKey::Unavailable, Some(1)));
        assert_eq!(
            ApiError::from(StoreError::Conflict("user")).key,
            ErrorKey::Conflict
        );
    }

    #[test]
    fn overload_and_rate_limits_differ_in_key_and_status() {
        assert_eq!(ErrorKey::Overloaded.as_str(), "api.too_many_requests");
        assert_eq!(
            ErrorKey::Overloaded.status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        for key in [ErrorKey::RateLimited, ErrorKey::PrincipalRateLimited] {
            assert_ne!(key.as_str(), ErrorKey::Overloaded.as_str());
            assert_eq!(key.status(), StatusCode::TOO_MANY_REQUESTS);
        }
        assert_ne!(
            ErrorKey::RateLimited.as_str(),
            ErrorKey::PrincipalRateLimited.as_str()
        );
    }

    fn answer(e: ApiError) -> (StatusCode, axum::http::HeaderMap, ErrorBody) {
        let resp = e.into_response();
        let (parts, body) = resp.into_parts();
        let bytes = body_bytes(body);
        (
            parts.status,
            parts.headers,
            serde_json::from_slice(&bytes).unwrap(),
        )
    }

    fn body_bytes(body: axum::body::Body) -> Vec<u8> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            axum::body::to_bytes(body, usize::MAX)
                .await
                .unwrap()
                .to_vec()
        })
    }

    #[test]
    fn a_5xx_detail_carries_a_request_id_and_no_internal_text() {
        let driver = "error returned from database: password authentication failed for user \"w\"";
        for (e, key) in [
            (
                ApiError::detail(ErrorKey::Unavailable, format!("database: {driver}"))
                    .with_retry_after(1),
                ErrorKey::Unavailable,
            ),
            (
                ApiError::detail(ErrorKey::Internal, format!("corrupt row: {driver}")),
                ErrorKey::Internal,
            ),
            (
                ApiError::detail(ErrorKey::Overloaded, "write pipeline full").with_retry_after(2),
                ErrorKey::Overloaded,
            ),
        ] {
            let retry = e.retry_after;
            let (status, headers, body) = answer(e);
            assert_eq!(status, key.status());
            assert_eq!(body.message, key.as_str());
            assert!(!body.detail.contains("database:"), "{}", body.detail);
            assert!(!body.detail.contains("password"), "{}", body.detail);
            if key == ErrorKey::Overloaded {
                assert!(
                    body.detail.starts_with("write pipeline full ("),
                    "{}",
                    body.detail
                );
            }
            let id = headers[REQUEST_ID_HEADER].to_str().unwrap();
            assert_eq!(id.len(), 16);
            assert!(
                body.detail.ends_with(&format!("(request id {id})")),
                "{}",
                body.detail
            );
            assert_eq!(
                headers.get(header::RETRY_AFTER).map(|v| v
                    .to_str()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()),
                retry
            );
        }
    }

    #[test]
    fn a_4xx_keeps_its_detail_and_gets_no_request_id() {
        let (status, headers, body) = answer(ApiError::field("cn", "required"));
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body.detail, "cn: required");
        assert!(headers.get(REQUEST_ID_HEADER).is_none());
    }

    #[test]
    fn request_ids_differ() {
        assert_ne!(new_request_id(), new_request_id());
    }

    #[test]
    fn field_error_names_field_first() {
        let e = ApiError::field("validity", "must be positive");
        assert_eq!(e.body().detail, "validity: must be positive");
        assert_eq!(e.body().code, 400);
    }
}
