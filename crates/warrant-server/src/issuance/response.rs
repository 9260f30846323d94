//! The answer of every issuance endpoint, and its encoding.

use crate::error::internal;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::value::RawValue;

/// The answer to `POST /api/v1/certs` (and to the operator-certificate
/// endpoint). It borrows the issuing CA's name and pre-encoded chain from the
/// server state, so it is turned into a [`Response`] before the handler
/// returns. Built only by [`super::record::Signed::into_parts`].
#[derive(Debug, Serialize)]
pub struct IssueResponse<'a> {
    pub serial_number: String,
    pub common_name: String,
    pub cert_pem: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_pem: Option<String>,
    pub chain_pem: &'a RawValue,
    pub ca: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spiffe_id: Option<String>,
    /// Warrant addition: the principal this certificate names (person
    /// certificates: the UID an agent DA must use; agents: their delegator).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal_uid: Option<String>,
    pub profile: &'static str,
    pub not_before: String,
    pub not_after: String,
}

impl IssueResponse<'_> {
    /// An upper bound of the encoded size in practice, so the body is written
    /// into one allocation rather than grown from a small buffer several
    /// times over. PEM text escapes only its newlines (one extra byte per
    /// 64-character line); the rest is field names and the short fields.
    fn encoded_len_hint(&self) -> usize {
        let pem = |s: &str| s.len() + s.len() / 32;
        let short = [
            &self.serial_number,
            &self.common_name,
            &self.not_before,
            &self.not_after,
        ]
        .iter()
        .map(|s| s.len())
        .sum::<usize>()
            + self.spiffe_id.as_deref().map_or(0, str::len)
            + self.principal_uid.as_deref().map_or(0, str::len)
            + self.ca.len()
            + self.profile.len();
        256 + pem(&self.cert_pem)
            + self.key_pem.as_deref().map_or(0, pem)
            + self.chain_pem.get().len()
            + 2 * short
    }
}

impl IntoResponse for IssueResponse<'_> {
    fn into_response(self) -> Response {
        let mut body = Vec::with_capacity(self.encoded_len_hint());
        match serde_json::to_writer(&mut body, &self) {
            Ok(()) => (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response(),
            Err(e) => internal(e.to_string()).into_response(),
        }
    }
}
