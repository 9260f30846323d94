//! API errors: one enum of keys, each with its HTTP status (ca.md §3).
//!
//! The tests import [`ErrorKey`] too, so the key a client sees and the key a
//! test expects come from the same place.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKey {
    InvalidJson,
    CnRequired,
    InvalidField,
    PayloadTooLarge,
    /// A JSON endpoint was sent a body that is not `application/json`
    /// (415): also what turns away a cross-site HTML form or `text/plain`
    /// `fetch`, which browsers send without a CORS preflight.
    UnsupportedMediaType,
    Unauthorized,
    Forbidden,
    CaNotFound,
    NotFound,
    MethodNotAllowed,
    AicRequiresAuth,
    ReasonRequired,
    InvalidPrincipalUid,
    PrincipalCertUntrusted,
    DelegationSignatureInvalid,
    DaTimestampStale,
    DaNonceReplayed,
    RepresentativePolicyDenied,
    CapabilityNotGranted,
    MaxAgentsExceeded,
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
    Internal,
}

impl ErrorKey {
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKey::InvalidJson => "api.invalid_json",
            ErrorKey::CnRequired => "api.cn_required",
            ErrorKey::InvalidField => "api.invalid_field",
            ErrorKey::PayloadTooLarge => "api.payload_too_large",
            ErrorKey::UnsupportedMediaType => "api.unsupported_media_type",
            ErrorKey::Unauthorized => "api.unauthorized",
            ErrorKey::Forbidden => "api.forbidden",
            ErrorKey::CaNotFound => "api.ca_not_found",
            ErrorKey::NotFound => "api.not_found",
            ErrorKey::MethodNotAllowed => "api.method_not_allowed",
            ErrorKey::AicRequiresAuth => "api.aic_requires_auth",
            ErrorKey::ReasonRequired => "api.reason_required",
            ErrorKey::InvalidPrincipalUid => "api.invalid_principal_uid",
            ErrorKey::PrincipalCertUntrusted => "api.principal_cert_untrusted",
            ErrorKey::DelegationSignatureInvalid => "api.delegation_signature_invalid",
            ErrorKey::DaTimestampStale => "api.da_timestamp_stale",
            ErrorKey::DaNonceReplayed => "api.da_nonce_replayed",
            ErrorKey::RepresentativePolicyDenied => "api.representative_policy_denied",
            ErrorKey::CapabilityNotGranted => "api.capability_not_granted",
            ErrorKey::MaxAgentsExceeded => "api.max_agents_exceeded",
            ErrorKey::RateLimited => "api.rate_limited",
            ErrorKey::PrincipalRateLimited => "api.principal_rate_limited",
            ErrorKey::Overloaded => "api.too_many_requests",
            ErrorKey::AccountLocked => "api.account_locked",
            ErrorKey::LoginFailed => "api.login_failed",
            ErrorKey::Conflict => "api.conflict",
            ErrorKey::Unavailable => "api.unavailable",
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
            | ErrorKey::InvalidPrincipalUid => StatusCode::BAD_REQUEST,
            ErrorKey::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKey::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorKey::Unauthorized | ErrorKey::LoginFailed => StatusCode::UNAUTHORIZED,
            ErrorKey::Forbidden
            | ErrorKey::PrincipalCertUntrusted
            | ErrorKey::DelegationSignatureInvalid
            | ErrorKey::DaTimestampStale
            | ErrorKey::DaNonceReplayed
            | ErrorKey::RepresentativePolicyDenied
            | ErrorKey::CapabilityNotGranted
            | ErrorKey::MaxAgentsExceeded => StatusCode::FORBIDDEN,
            ErrorKey::CaNotFound | ErrorKey::NotFound => StatusCode::NOT_FOUND,
            ErrorKey::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorKey::RateLimited | ErrorKey::PrincipalRateLimited | ErrorKey::AccountLocked => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ErrorKey::Overloaded | ErrorKey::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
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

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.key.status();
        let request_id = status.is_server_error().then(new_request_id);
        let body = match &request_id {
            Some(id) => self.scrubbed_5xx(id),
            None => self.body(),
        };
        let mut resp = (status, axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        if let Some(id) = request_id {
            if let Ok(v) = HeaderValue::from_str(&id) {
                resp.headers_mut().insert(REQUEST_ID_HEADER, v);
            }
        }
        resp.extensions_mut().insert(self.key);
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
