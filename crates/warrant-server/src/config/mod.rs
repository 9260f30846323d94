//! Typed configuration: `warrant.toml` in the data dir, then `WARRANT_…` env
//! overrides, validated once at start-up.
//!
//! Every key has a default, so the set of valid keys (and their env names) is
//! derived from `Config::default()` itself: adding a field to a section is all
//! it takes for the file, the env override and `--print-config` to know it.
//! That is why optional settings use an empty string for "unset" instead of
//! `Option`: an absent value would hide the key from the registry.
//!
//! - `schema`: the sections and their keys;
//! - `duration`: the duration value type;
//! - `defaults`: every key's default and the `device_profile` values;
//! - `load`: file, environment and profile merged by precedence;
//! - `validate`: range and cross-field checks;
//! - `print`: `--print-config`, the starter file, secret redaction.

mod defaults;
mod duration;
mod load;
mod print;
mod schema;
mod validate;

pub use defaults::PROFILES;
pub use duration::ConfigDuration;
pub use load::{LoadedConfig, Source, apply_profile, env_name};
pub use print::{REDACTED, redact_dsn, redact_value};
pub use schema::{
    AuditConfig, AuthConfig, Config, DatabaseConfig, EngineConfig, HttpConfig, IssuanceConfig,
    KeysConfig, OcspConfig, PrincipalLimitConfig, RateLimitConfig, RecordBufferConfig,
    RetentionConfig, StorageConfig, TlsConfig, TokenConfig,
};
pub use validate::MIN_HEADER_BYTES;

use std::path::PathBuf;

/// Name of the config file inside the data dir.
pub const CONFIG_FILE: &str = "warrant.toml";

/// Hard cap on agent certificate validity, whatever the config says (ca.md §2).
pub const AGENT_PROXY_HARD_CAP_SECS: u64 = 24 * 3600;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: invalid TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("unknown config key `{key}`")]
    UnknownKey { key: String },
    #[error("config key `{key}`: {message}")]
    InvalidValue { key: String, message: String },
}

#[cfg(test)]
mod test_support {
    use super::{ConfigError, LoadedConfig};
    use std::collections::BTreeMap;
    use std::path::Path;

    pub fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    pub fn load(file: Option<&str>, vars: &[(&str, &str)]) -> Result<LoadedConfig, ConfigError> {
        LoadedConfig::from_parts(Path::new("/d"), file, &env(vars))
    }

    pub fn invalid_key(err: ConfigError) -> String {
        match err {
            ConfigError::InvalidValue { key, .. } => key,
            other => panic!("expected an invalid value, got {other}"),
        }
    }
}
