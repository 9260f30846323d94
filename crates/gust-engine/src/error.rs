//! The error every stage before the first request reports: validation, request
//! sources, TLS set-up and thread start-up.

/// A configuration error found before anything runs. `field` names the offending
/// option so CLIs and APIs can point at it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {reason}")]
pub struct ConfigError {
    pub field: &'static str,
    pub reason: String,
}

impl ConfigError {
    pub fn new(field: &'static str, reason: impl Into<String>) -> Self {
        ConfigError {
            field,
            reason: reason.into(),
        }
    }
}
