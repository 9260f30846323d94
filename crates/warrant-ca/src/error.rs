//! Error types. Client-caused problems carry the API field they came from so the
//! HTTP layer can answer `400 api.invalid_field` with a precise detail, without
//! string matching.

use std::path::PathBuf;

/// Everything that can go wrong in the CA crate except principal-certificate
/// validation, which has its own [`PrincipalCertError`] because the server maps
/// it to a different status (403).
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// Bad client input. `field` is the API field name (`subject`, `san`,
    /// `key_type`, `csr_pem`, `validity`, `agent_id`, `spiffe_trust_domain`,
    /// `public_key`, `extensions`, `reason`, `serial`, `ca`, ...).
    #[error("invalid {field}: {reason}")]
    InvalidField { field: &'static str, reason: String },
    /// A hierarchy already exists where `init` was asked to create one.
    #[error("a CA hierarchy already exists in {0}")]
    AlreadyInitialized(PathBuf),
    /// No hierarchy where `load` looked.
    #[error("no CA hierarchy in {0} (run `warrant init`)")]
    NotInitialized(PathBuf),
    /// A key file is encrypted but no passphrase was given.
    #[error("{0} is encrypted: a passphrase is required")]
    PassphraseRequired(PathBuf),
    /// The key file could not be decrypted or parsed (wrong passphrase or damage).
    #[error("cannot read CA key {path}: {reason}")]
    BadKeyFile { path: PathBuf, reason: String },
    /// A CA certificate on disk is unusable (damaged, wrong key, broken chain).
    #[error("CA certificate {path}: {reason}")]
    BadCaCert { path: PathBuf, reason: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A CA key kept in a PKCS#11 token cannot sign now, or could not be
    /// opened: the token is absent or failing, the PIN was refused, or no
    /// single key matches its URI. The server answers 503 and `/readyz`
    /// fails until the token answers again.
    #[error("CA key {key} is unavailable: {reason}")]
    KeyUnavailable { key: String, reason: String },
    /// A signature was asked of a CA whose key is not on this machine (an
    /// offline root): that signing step runs on the offline machine.
    #[error("the {ca} CA's key is offline: sign on the offline machine (docs/keys.md)")]
    KeyOffline { ca: String },
    /// A failure inside the crypto library or the encoder that input cannot cause.
    #[error("internal CA error: {0}")]
    Internal(String),
}

impl CaError {
    pub(crate) fn field(field: &'static str, reason: impl Into<String>) -> Self {
        CaError::InvalidField {
            field,
            reason: reason.into(),
        }
    }

    pub(crate) fn internal(what: impl std::fmt::Display) -> Self {
        CaError::Internal(what.to_string())
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CaError::Io {
            path: path.into(),
            source,
        }
    }

    /// Whether a token-held key could not be used (a 503, not a 500).
    pub fn is_key_unavailable(&self) -> bool {
        matches!(self, CaError::KeyUnavailable { .. })
    }

    /// The API field at fault, when the caller is to blame.
    pub fn invalid_field(&self) -> Option<&'static str> {
        match self {
            CaError::InvalidField { field, .. } => Some(field),
            _ => None,
        }
    }
}

pub type Result<T, E = CaError> = std::result::Result<T, E>;

/// Why a principal (person) certificate was refused. The server answers all of
/// these with 403 `api.principal_cert_untrusted`; the variants exist for the
/// detail message and for tests.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrincipalCertError {
    /// Not a parseable DER/PEM X.509 certificate.
    #[error("malformed principal certificate: {0}")]
    Malformed(String),
    /// Does not chain to the trust anchor (unknown issuer, bad signature, a CA
    /// certificate, an unknown critical extension...).
    #[error("principal certificate untrusted: {0}")]
    Untrusted(String),
    /// `now` is after NotAfter (of the leaf or its issuing CA).
    #[error("principal certificate expired")]
    Expired,
    /// `now` is before NotBefore.
    #[error("principal certificate not yet valid")]
    NotYetValid,
}
