//! Typed configuration: `warrant.toml` in the data dir, then `WARRANT_…` env
//! overrides, validated once at start-up.
//!
//! Every key has a default, so the set of valid keys (and their env names) is
//! derived from `Config::default()` itself: adding a field to a section is all
//! it takes for the file, the env override and `--print-config` to know it.
//! That is why optional settings use an empty string for "unset" instead of
//! `Option`: an absent value would hide the key from the registry.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Name of the config file inside the data dir.
pub const CONFIG_FILE: &str = "warrant.toml";

/// Hard cap on agent certificate validity, whatever the config says (ca.md §2).
pub const AGENT_PROXY_HARD_CAP_SECS: u64 = 24 * 3600;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Plain HTTP listener.
    pub listen: String,
    pub log_format: String,
    pub log_level: String,
    pub database: DatabaseConfig,
    pub tls: TlsConfig,
    pub issuance: IssuanceConfig,
    pub auth: AuthConfig,
    pub keys: KeysConfig,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// DSN or SQLite path; empty means `warrant.db` in the data dir.
    /// `DATABASE_URL` overrides it.
    pub url: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// Empty disables the TLS listener.
    pub listen: String,
    /// Server certificate chain (PEM). Empty: a `tls-server` cert for
    /// `server_name` is issued by the People CA at start-up.
    pub cert_file: String,
    pub key_file: String,
    pub server_name: String,
    /// `none`, `optional` or `required`: client certificates chaining to the Root.
    pub client_auth: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IssuanceConfig {
    pub default_org: String,
    pub default_country: String,
    /// Default validity of `tls-client` / `tls-server` certificates, days.
    pub default_validity_days: u32,
    /// Cap on requested validity, days (also capped by the CA's NotAfter).
    pub max_validity_days: u32,
    /// Seconds; hard-capped at 24 h.
    pub agent_proxy_max_validity: u64,
    /// Seconds; 0 disables the freshness check.
    pub da_max_timestamp_skew: u64,
    /// Added to `timestamp + skew` to decide how long a nonce is remembered.
    pub nonce_retention_buffer: u64,
    pub spiffe_trust_domain: String,
    /// CRL distribution point URL base; `{ca}` is replaced by the CA name.
    pub crl_url: String,
    /// AIA caIssuers URL base; `{ca}` is replaced by the CA name.
    pub aia_url: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// API token lifetime, seconds.
    pub token_expiry: u64,
    pub max_login_failures: u32,
    /// Seconds an account stays locked after `max_login_failures`.
    pub lockout: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct KeysConfig {
    /// Name of an env var holding the CA key passphrase (empty: none).
    pub passphrase_env: String,
    /// File holding the CA key passphrase (empty: none).
    pub passphrase_file: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8443".into(),
            log_format: "text".into(),
            log_level: "info".into(),
            database: DatabaseConfig::default(),
            tls: TlsConfig::default(),
            issuance: IssuanceConfig::default(),
            auth: AuthConfig::default(),
            keys: KeysConfig::default(),
        }
    }
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self {
            listen: String::new(),
            cert_file: String::new(),
            key_file: String::new(),
            server_name: "localhost".into(),
            client_auth: "optional".into(),
        }
    }
}

impl Default for IssuanceConfig {
    fn default() -> Self {
        Self {
            default_org: "Warrant".into(),
            default_country: "US".into(),
            default_validity_days: 365,
            max_validity_days: 825,
            agent_proxy_max_validity: 3600,
            da_max_timestamp_skew: 60,
            nonce_retention_buffer: 180,
            spiffe_trust_domain: String::new(),
            crl_url: String::new(),
            aia_url: String::new(),
        }
    }
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            token_expiry: 7 * 24 * 3600,
            max_login_failures: 5,
            lockout: 300,
        }
    }
}

/// Where an effective value came from (`--print-config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    File,
    Env(String),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File => f.write_str(CONFIG_FILE),
            Source::Env(name) => write!(f, "env {name}"),
        }
    }
}

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

/// The validated configuration plus the source of each value.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub config: Config,
    pub sources: BTreeMap<String, Source>,
    pub data_dir: PathBuf,
}

impl LoadedConfig {
    /// Loads `<data_dir>/warrant.toml` (absent file = defaults) and applies the
    /// process environment.
    pub fn load(data_dir: &Path) -> Result<Self, ConfigError> {
        let path = data_dir.join(CONFIG_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(ConfigError::Read { path, source }),
        };
        let env: BTreeMap<String, String> = std::env::vars().collect();
        Self::from_parts(data_dir, text.as_deref(), &env)
    }

    /// Pure core of [`load`](Self::load), so precedence is unit-testable.
    pub fn from_parts(
        data_dir: &Path,
        file_text: Option<&str>,
        env: &BTreeMap<String, String>,
    ) -> Result<Self, ConfigError> {
        let defaults = flatten(&to_table(&Config::default())?);
        let mut merged = defaults.clone();
        let mut sources: BTreeMap<String, Source> = defaults
            .keys()
            .map(|k| (k.clone(), Source::Default))
            .collect();

        if let Some(text) = file_text {
            let table: toml::Table =
                text.parse()
                    .map_err(|e: toml::de::Error| ConfigError::Syntax {
                        path: data_dir.join(CONFIG_FILE),
                        message: e.message().to_string(),
                    })?;
            for (key, value) in flatten(&table) {
                if !defaults.contains_key(&key) {
                    return Err(ConfigError::UnknownKey { key });
                }
                merged.insert(key.clone(), value);
                sources.insert(key, Source::File);
            }
        }

        for (key, default_value) in &defaults {
            let var = env_name(key);
            let raw = if key == "database.url" {
                // The conventional name wins over ours, as ca.md §5 says.
                env.get("DATABASE_URL")
                    .map(|v| ("DATABASE_URL", v))
                    .or_else(|| env.get(&var).map(|v| (var.as_str(), v)))
            } else {
                env.get(&var).map(|v| (var.as_str(), v))
            };
            if let Some((name, raw)) = raw {
                let value = parse_env_value(key, raw, default_value)?;
                merged.insert(key.clone(), value);
                sources.insert(key.clone(), Source::Env(name.to_string()));
            }
        }

        let config: Config = unflatten(&merged)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::InvalidValue {
                key: "config".into(),
                message: e.message().to_string(),
            })?;
        config.validate()?;
        Ok(Self {
            config,
            sources,
            data_dir: data_dir.to_path_buf(),
        })
    }

    /// `key = value  # source` lines, one per key, sorted.
    pub fn render(&self) -> String {
        let flat = match to_table(&self.config) {
            Ok(t) => flatten(&t),
            Err(e) => return format!("# {e}\n"),
        };
        let mut out = String::new();
        for (key, value) in flat {
            let source = self.sources.get(&key).cloned().unwrap_or(Source::Default);
            out.push_str(&format!("{key} = {value}  # {source}\n"));
        }
        out
    }

    /// The database DSN with the data-dir default applied.
    pub fn database_url(&self) -> String {
        if self.config.database.url.is_empty() {
            format!("sqlite://{}", self.data_dir.join("warrant.db").display())
        } else {
            self.config.database.url.clone()
        }
    }
}

impl Config {
    /// Cross-field and range checks; each error names its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::InvalidValue {
            key: key.into(),
            message,
        };
        self.listen
            .parse::<SocketAddr>()
            .map_err(|e| invalid("listen", e.to_string()))?;
        if !self.tls.listen.is_empty() {
            self.tls
                .listen
                .parse::<SocketAddr>()
                .map_err(|e| invalid("tls.listen", e.to_string()))?;
        }
        if self.tls.cert_file.is_empty() != self.tls.key_file.is_empty() {
            return Err(invalid(
                "tls.cert_file",
                "tls.cert_file and tls.key_file must be set together".into(),
            ));
        }
        if !matches!(
            self.tls.client_auth.as_str(),
            "none" | "optional" | "required"
        ) {
            return Err(invalid(
                "tls.client_auth",
                format!(
                    "`{}`: expected none, optional or required",
                    self.tls.client_auth
                ),
            ));
        }
        if !matches!(self.log_format.as_str(), "text" | "json") {
            return Err(invalid("log_format", "expected text or json".into()));
        }
        let iss = &self.issuance;
        if iss.agent_proxy_max_validity == 0
            || iss.agent_proxy_max_validity > AGENT_PROXY_HARD_CAP_SECS
        {
            return Err(invalid(
                "issuance.agent_proxy_max_validity",
                format!("must be 1..={AGENT_PROXY_HARD_CAP_SECS} seconds"),
            ));
        }
        if iss.default_validity_days == 0 || iss.max_validity_days == 0 {
            return Err(invalid(
                "issuance.default_validity_days",
                "validity must be at least one day".into(),
            ));
        }
        if iss.default_country.chars().count() != 2 {
            return Err(invalid(
                "issuance.default_country",
                "must be a two-letter country code".into(),
            ));
        }
        if self.auth.token_expiry == 0 {
            return Err(invalid("auth.token_expiry", "must be positive".into()));
        }
        if self.auth.max_login_failures == 0 {
            return Err(invalid(
                "auth.max_login_failures",
                "must be positive".into(),
            ));
        }
        Ok(())
    }

    pub fn listen_addr(&self) -> SocketAddr {
        // Validated in `validate`; the fallback only guards direct construction.
        self.listen
            .parse()
            .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 8443)))
    }

    /// The TOML written by `warrant init`: every key with its default, so an
    /// operator sees what can be changed.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }
}

/// `issuance.da_max_timestamp_skew` → `WARRANT_ISSUANCE_DA_MAX_TIMESTAMP_SKEW`.
pub fn env_name(key: &str) -> String {
    format!("WARRANT_{}", key.replace('.', "_").to_uppercase())
}

fn to_table<T: Serialize>(value: &T) -> Result<toml::Table, ConfigError> {
    toml::Table::try_from(value).map_err(|e| ConfigError::InvalidValue {
        key: "config".into(),
        message: e.to_string(),
    })
}

fn flatten(table: &toml::Table) -> BTreeMap<String, toml::Value> {
    fn walk(prefix: &str, table: &toml::Table, out: &mut BTreeMap<String, toml::Value>) {
        for (k, v) in table {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                toml::Value::Table(t) => walk(&key, t, out),
                other => {
                    out.insert(key, other.clone());
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk("", table, &mut out);
    out
}

fn unflatten(flat: &BTreeMap<String, toml::Value>) -> toml::Value {
    let mut root = toml::Table::new();
    for (key, value) in flat {
        let mut parts: Vec<&str> = key.split('.').collect();
        let last = parts.pop().unwrap_or_default();
        let mut table = &mut root;
        for part in parts {
            let entry = table
                .entry(part.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if !entry.is_table() {
                *entry = toml::Value::Table(toml::Table::new());
            }
            match entry {
                toml::Value::Table(t) => table = t,
                _ => unreachable!("entry was just made a table"),
            }
        }
        table.insert(last.to_string(), value.clone());
    }
    toml::Value::Table(root)
}

/// Env values are strings; they take the type of the key's default.
fn parse_env_value(
    key: &str,
    raw: &str,
    default: &toml::Value,
) -> Result<toml::Value, ConfigError> {
    let invalid = |what: &str| ConfigError::InvalidValue {
        key: key.into(),
        message: format!("env value `{raw}` is not {what}"),
    };
    Ok(match default {
        toml::Value::String(_) => toml::Value::String(raw.to_string()),
        toml::Value::Integer(_) => {
            toml::Value::Integer(raw.trim().parse().map_err(|_| invalid("an integer"))?)
        }
        toml::Value::Float(_) => {
            toml::Value::Float(raw.trim().parse().map_err(|_| invalid("a number"))?)
        }
        toml::Value::Boolean(_) => toml::Value::Boolean(match raw.trim() {
            "1" | "true" | "yes" | "on" => true,
            "0" | "false" | "no" | "off" => false,
            _ => return Err(invalid("a boolean")),
        }),
        _ => {
            let wrapped = format!("v = {raw}");
            let t: toml::Table = wrapped.parse().map_err(|_| invalid("a TOML value"))?;
            t.get("v").cloned().ok_or_else(|| invalid("a TOML value"))?
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_validate() {
        let c = LoadedConfig::from_parts(Path::new("/d"), None, &env(&[])).unwrap();
        assert_eq!(c.config, Config::default());
        assert_eq!(c.sources["listen"], Source::Default);
        assert_eq!(c.database_url(), "sqlite:///d/warrant.db");
    }

    #[test]
    fn env_overrides_file_and_file_overrides_default() {
        let file = "listen = \"127.0.0.1:9000\"\n[issuance]\nda_max_timestamp_skew = 30\n";
        let c = LoadedConfig::from_parts(
            Path::new("/d"),
            Some(file),
            &env(&[("WARRANT_ISSUANCE_DA_MAX_TIMESTAMP_SKEW", "0")]),
        )
        .unwrap();
        assert_eq!(c.config.listen, "127.0.0.1:9000");
        assert_eq!(c.sources["listen"], Source::File);
        assert_eq!(c.config.issuance.da_max_timestamp_skew, 0);
        assert_eq!(
            c.sources["issuance.da_max_timestamp_skew"],
            Source::Env("WARRANT_ISSUANCE_DA_MAX_TIMESTAMP_SKEW".into())
        );
        assert!(c.render().contains(
            "issuance.da_max_timestamp_skew = 0  # env WARRANT_ISSUANCE_DA_MAX_TIMESTAMP_SKEW"
        ));
    }

    #[test]
    fn database_url_env_wins() {
        let c = LoadedConfig::from_parts(
            Path::new("/d"),
            Some("[database]\nurl = \"sqlite:///x.db\"\n"),
            &env(&[("DATABASE_URL", "postgres://u@h/db")]),
        )
        .unwrap();
        assert_eq!(c.database_url(), "postgres://u@h/db");
    }

    #[test]
    fn rejects_unknown_key_naming_it() {
        let err =
            LoadedConfig::from_parts(Path::new("/d"), Some("[issuance]\nbogus = 1\n"), &env(&[]))
                .unwrap_err();
        assert!(
            matches!(err, ConfigError::UnknownKey { ref key } if key == "issuance.bogus"),
            "{err}"
        );
    }

    #[test]
    fn rejects_agent_validity_over_hard_cap() {
        let err = LoadedConfig::from_parts(
            Path::new("/d"),
            None,
            &env(&[("WARRANT_ISSUANCE_AGENT_PROXY_MAX_VALIDITY", "90000")]),
        )
        .unwrap_err();
        assert!(
            matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "issuance.agent_proxy_max_validity")
        );
    }

    #[test]
    fn rejects_non_integer_env_value() {
        let err = LoadedConfig::from_parts(
            Path::new("/d"),
            None,
            &env(&[("WARRANT_AUTH_LOCKOUT", "soon")]),
        )
        .unwrap_err();
        assert!(matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "auth.lockout"));
    }

    #[test]
    fn rejects_bad_client_auth_mode() {
        let err = LoadedConfig::from_parts(
            Path::new("/d"),
            Some("[tls]\nclient_auth = \"maybe\"\n"),
            &env(&[]),
        )
        .unwrap_err();
        assert!(
            matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "tls.client_auth")
        );
    }

    #[test]
    fn init_toml_round_trips() {
        let text = Config::default().to_toml();
        let c = LoadedConfig::from_parts(Path::new("/d"), Some(&text), &env(&[])).unwrap();
        assert_eq!(c.config, Config::default());
    }
}
