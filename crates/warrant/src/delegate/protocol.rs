//! The signer's wire protocol, shared by `warrant delegate serve` and
//! `warrant agent`: HTTP/1.1, `POST /v1/da` with a JSON [`DaRequest`];
//! 200 with a [`DaResponse`], or 4xx/5xx with a [`SignerError`] whose
//! `error` is a stable key (`grant.*`, `request.invalid`, `signer.internal`).

use serde::{Deserialize, Serialize};

pub const PATH: &str = "/v1/da";

/// What the DA is for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DaKind {
    /// A `POST /api/v1/certs` body (DER DA, v2: bound to the CSR's key).
    #[default]
    Certificate,
    /// A DA JWT for `POST /oauth/token`, bound to the CSR's key by thumbprint.
    Jwt,
}

impl DaKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DaKind::Certificate => "certificate",
            DaKind::Jwt => "jwt",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaRequest {
    pub agent_id: String,
    /// The agent's CSR (PEM); every DA is bound to its key.
    pub csr_pem: String,
    /// `scheme:id`; empty: everything the grant gives.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Seconds; absent: the grant's `max_da_lifetime`.
    #[serde(default)]
    pub lifetime: Option<i64>,
    #[serde(default)]
    pub kind: DaKind,
    /// With `kind = jwt`: the token issuer (`aud`).
    #[serde(default)]
    pub audience: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DaResponse {
    pub kind: DaKind,
    /// The DA's lifetime, seconds (clipped to the grant's window).
    pub lifetime: i64,
    /// `kind = certificate`: the whole `POST /api/v1/certs` body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_request: Option<serde_json::Value>,
    /// `kind = jwt`: the DA JWT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub da_jwt: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SignerError {
    pub error: String,
    pub detail: String,
}
