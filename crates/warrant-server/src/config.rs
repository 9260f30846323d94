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
use std::time::Duration;

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
    /// `durable` (answer after commit) or `buffered` (answer on enqueue:
    /// **lossy** on crash; exists to compare with varwof-core).
    pub durability: String,
    /// `""`, `low_mem` or `high_throughput`: fills the `record_buffer.*` /
    /// `engine.*` values that were not set explicitly (see [`PROFILES`]).
    pub device_profile: String,
    pub database: DatabaseConfig,
    pub tls: TlsConfig,
    pub http: HttpConfig,
    pub issuance: IssuanceConfig,
    pub auth: AuthConfig,
    pub keys: KeysConfig,
    pub record_buffer: RecordBufferConfig,
    pub engine: EngineConfig,
    pub rate_limit: RateLimitConfig,
}

/// The group-commit write queue (ca.md §5).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RecordBufferConfig {
    /// Most records written in one transaction.
    pub threshold: u64,
    /// Longest a queued record waits for its commit in buffered mode (and
    /// the retry pace after a failed buffered commit).
    pub max_latency: ConfigDuration,
    /// Longest a committer that took only a few records lets the requests
    /// being checked and signed reach the queue before it commits; `0`
    /// commits at once. Fewer, larger commits spread each commit's fixed
    /// cost (transaction, WAL fsync, hand-offs) over more certificates.
    pub max_gather: ConfigDuration,
    /// Records queued or committing at most; beyond it issuance answers 503
    /// `api.too_many_requests` with `Retry-After`.
    pub max_pending: u64,
    /// SQLite: WAL pages after which the WAL is copied back into the
    /// database file (checkpointed) by the store's checkpointer thread.
    pub wal_checkpoint_pages: u64,
}

/// In-memory budgets (ca.md §5).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// Recent-certificates window; full of live certificates → 503.
    pub max_certs: u64,
    /// How long past its `not_after` a certificate stays in the window.
    pub grace: ConfigDuration,
    /// DA nonce ledger budget.
    pub max_da_nonces: u64,
    /// Ceiling on all in-memory nonce sets together. The DA ledger is the
    /// only one, so its budget is `min(max_da_nonces, max_nonces)`.
    pub max_nonces: u64,
    /// Issuance requests in flight at once (admitted, not yet answered:
    /// key generation, signing, waiting for the commit). Beyond it
    /// `POST /api/v1/certs` answers 503 `api.too_many_requests` before
    /// doing any work, which bounds CPU and memory ahead of the write queue.
    pub write_max_pending: u64,
}

/// Per-client-IP limit on every `/api/…` route (ca.md §5): 429
/// `api.rate_limited` with `Retry-After`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RateLimitConfig {
    pub enabled: bool,
    /// Sustained requests per second per client (fractions allowed).
    pub rate: f64,
    /// Requests a client may send at once before the rate applies.
    pub burst: u32,
    /// Take the client address from the last `X-Forwarded-For` entry (set
    /// by a reverse proxy you run) instead of the TCP peer. Off: a client
    /// could otherwise pick its own bucket.
    pub trust_forwarded_for: bool,
}

/// Per-principal issuance limit: 429 `api.principal_rate_limited` with
/// `Retry-After`. Keyed by the delegating principal for agent
/// certificates, by the authenticated user for the others.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PrincipalLimitConfig {
    pub enabled: bool,
    /// Sustained issuances per second per principal (fractions allowed).
    pub rate: f64,
    pub burst: u32,
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

/// Connection limits of both listeners (plain and TLS), which serve
/// connections the same way (`server::serve_connection`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Longest a client may take from the first byte of a request to the end
    /// of its headers (also the TLS handshake's limit). A slower connection
    /// is closed.
    pub header_read_timeout: ConfigDuration,
    /// A connection with no request in flight and no request begun is closed
    /// after this long (HTTP/2: with a GOAWAY).
    pub idle_timeout: ConfigDuration,
    /// Connections open at once over both listeners; one more is accepted
    /// and closed at once.
    pub max_connections: u64,
    /// Largest request head: HTTP/1 request line and headers (431 above
    /// it), HTTP/2 header list (the `SETTINGS_MAX_HEADER_LIST_SIZE` sent).
    pub max_header_bytes: u64,
    /// HTTP/2 streams (requests) open at once on one connection.
    pub h2_max_concurrent_streams: u64,
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
    /// The trust domain of agents' SPIFFE IDs (`is_spiffe`); a request may
    /// not name another. Empty: SPIFFE IDs are refused.
    pub spiffe_trust_domain: String,
    /// The gateway roles (subject OUs) an agent certificate may carry. A
    /// request picks among them through its `subject`'s OUs; without one
    /// the agent gets the first. This list is the only source of OUs.
    pub agent_gateway_roles: Vec<String>,
    /// CRL distribution point URL base; `{ca}` is replaced by the CA name.
    pub crl_url: String,
    /// AIA caIssuers URL base; `{ca}` is replaced by the CA name.
    pub aia_url: String,
    pub per_principal: PrincipalLimitConfig,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Lifetime of login tokens and the default of `POST /api/v1/tokens`,
    /// seconds; at most `token_max_lifetime`.
    pub token_expiry: u64,
    /// Cap on every token's lifetime, seconds: `expires_in` above it is
    /// refused.
    pub token_max_lifetime: u64,
    /// How often expired tokens are dropped from memory and deleted from
    /// the database (in batches of 1000), and change-feed rows older than
    /// an hour are deleted.
    pub token_prune_interval: ConfigDuration,
    /// How often each node reads the auth change feed (users, roles and
    /// tokens changed by any node); a change takes effect on every node
    /// within about this plus one database round trip (10ms..=1s).
    pub sync_interval: ConfigDuration,
    /// Login attempts per username before it is locked. Each attempt is
    /// counted before its password is verified, so parallel guesses cannot
    /// exceed it.
    pub max_login_failures: u32,
    /// Seconds an account stays locked after `max_login_failures`; also how
    /// long a failed attempt is remembered.
    pub lockout: u64,
    /// Argon2 password verifications running at once (about 19 MiB each);
    /// a login beyond it is answered 503 with `Retry-After`, never queued.
    /// `0`: twice the CPU cores.
    pub max_concurrent_logins: u64,
    /// Usernames (known or not) the failed-login table tracks at most. When
    /// it is full of live entries, logins for usernames not in it are
    /// answered 503 with `Retry-After` until the oldest entry expires.
    pub max_lock_entries: u64,
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
            durability: "durable".into(),
            device_profile: String::new(),
            database: DatabaseConfig::default(),
            tls: TlsConfig::default(),
            http: HttpConfig::default(),
            issuance: IssuanceConfig::default(),
            auth: AuthConfig::default(),
            keys: KeysConfig::default(),
            record_buffer: RecordBufferConfig::default(),
            engine: EngineConfig::default(),
            rate_limit: RateLimitConfig::default(),
        }
    }
}

/// Defaults are the store's, so the two cannot drift apart.
impl Default for RecordBufferConfig {
    fn default() -> Self {
        let store = warrant_store::StoreOptions::default();
        Self {
            threshold: store.threshold as u64,
            max_latency: ConfigDuration(store.max_latency),
            max_gather: ConfigDuration(store.max_gather),
            max_pending: store.max_pending as u64,
            wal_checkpoint_pages: u64::from(store.wal_checkpoint_pages),
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        let store = warrant_store::StoreOptions::default();
        Self {
            max_certs: store.max_certs as u64,
            grace: ConfigDuration(store.cert_grace),
            max_da_nonces: store.max_da_nonces as u64,
            max_nonces: store.max_da_nonces as u64,
            write_max_pending: store.max_pending as u64,
        }
    }
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            rate: 100.0,
            burst: 200,
            trust_forwarded_for: false,
        }
    }
}

impl Default for PrincipalLimitConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            rate: 10.0,
            burst: 100,
        }
    }
}

/// A duration key: an integer is seconds (like every other duration in this
/// file), a string may carry a unit: `250ms`, `5s`, `2m`, `1h`, `500us`.
/// Rendered with the largest unit that is exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigDuration(pub Duration);

impl ConfigDuration {
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (digits, unit) = t.split_at(split);
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("`{text}` is not a duration (e.g. 250ms, 5s, 2m, 1h)"))?;
        let d = match unit.trim() {
            "" | "s" => Duration::from_secs(n),
            "ms" => Duration::from_millis(n),
            "us" => Duration::from_micros(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            u => {
                return Err(format!(
                    "`{text}`: unknown unit `{u}` (use us, ms, s, m or h)"
                ));
            }
        };
        Ok(ConfigDuration(d))
    }
}

impl std::fmt::Display for ConfigDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let us = self.0.as_micros();
        match us {
            0 => f.write_str("0s"),
            _ if us % 3_600_000_000 == 0 => write!(f, "{}h", us / 3_600_000_000),
            _ if us % 60_000_000 == 0 => write!(f, "{}m", us / 60_000_000),
            _ if us % 1_000_000 == 0 => write!(f, "{}s", us / 1_000_000),
            _ if us % 1_000 == 0 => write!(f, "{}ms", us / 1_000),
            _ => write!(f, "{us}us"),
        }
    }
}

impl Serialize for ConfigDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ConfigDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ConfigDuration;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("seconds, or a string such as \"250ms\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                u64::try_from(v)
                    .map(|s| ConfigDuration(Duration::from_secs(s)))
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(ConfigDuration(Duration::from_secs(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                ConfigDuration::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// `device_profile` values (ca.md §5), exactly as the spec gives them. A
/// profile only fills keys that neither the file nor the environment set.
pub const PROFILES: &[(&str, &[(&str, i64)])] = &[
    ("", &[]),
    (
        "low_mem",
        &[
            ("record_buffer.threshold", 200),
            ("record_buffer.max_pending", 5_000),
            ("engine.max_certs", 50_000),
            ("engine.max_da_nonces", 50_000),
            ("engine.max_nonces", 50_000),
            ("engine.write_max_pending", 5_000),
        ],
    ),
    (
        "high_throughput",
        &[
            ("record_buffer.max_pending", 100_000),
            ("engine.write_max_pending", 100_000),
        ],
    ),
];

/// Fills the values of `profile` into every key whose source is still the
/// default. Pure: the precedence explicit > profile > default lives here.
pub fn apply_profile(
    profile: &str,
    merged: &mut BTreeMap<String, toml::Value>,
    sources: &mut BTreeMap<String, Source>,
) -> Result<(), ConfigError> {
    let values = PROFILES
        .iter()
        .find(|(name, _)| *name == profile)
        .map(|(_, values)| *values)
        .ok_or_else(|| ConfigError::InvalidValue {
            key: "device_profile".into(),
            message: format!(
                "unknown profile `{profile}`: expected \"\", low_mem or high_throughput"
            ),
        })?;
    for (key, value) in values {
        if sources.get(*key) == Some(&Source::Default) {
            merged.insert(key.to_string(), toml::Value::Integer(*value));
            sources.insert(key.to_string(), Source::Profile(profile.to_string()));
        }
    }
    Ok(())
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

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            header_read_timeout: ConfigDuration(Duration::from_secs(10)),
            idle_timeout: ConfigDuration(Duration::from_secs(30)),
            max_connections: 1024,
            max_header_bytes: 16 * 1024,
            h2_max_concurrent_streams: 128,
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
            agent_gateway_roles: vec!["gateway:reader".into()],
            crl_url: String::new(),
            aia_url: String::new(),
            per_principal: PrincipalLimitConfig::default(),
        }
    }
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            token_expiry: 7 * 24 * 3600,
            token_max_lifetime: 7 * 24 * 3600,
            token_prune_interval: ConfigDuration(Duration::from_secs(60)),
            sync_interval: ConfigDuration(Duration::from_millis(250)),
            max_login_failures: 5,
            lockout: 300,
            max_concurrent_logins: 0,
            max_lock_entries: 10_000,
        }
    }
}

/// Where an effective value came from (`--print-config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    /// Filled by `device_profile` (its name).
    Profile(String),
    File,
    Env(String),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::Profile(name) => write!(f, "profile:{name}"),
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

        let profile = match merged.get("device_profile") {
            Some(toml::Value::String(p)) => p.clone(),
            _ => {
                return Err(ConfigError::InvalidValue {
                    key: "device_profile".into(),
                    message: "must be a string".into(),
                });
            }
        };
        apply_profile(&profile, &mut merged, &mut sources)?;

        // The path of a value that does not fit its key names that key.
        let config: Config = serde_path_to_error::deserialize(unflatten(&merged)).map_err(
            |e: serde_path_to_error::Error<toml::de::Error>| ConfigError::InvalidValue {
                key: e.path().to_string(),
                message: e.inner().message().to_string(),
            },
        )?;
        config.validate()?;
        Ok(Self {
            config,
            sources,
            data_dir: data_dir.to_path_buf(),
        })
    }

    /// `key = value  # source` lines, one per key, sorted, with secrets
    /// redacted ([`redact_value`]): the output is meant to be pasted into
    /// tickets and logs.
    pub fn render(&self) -> String {
        let flat = match to_table(&self.config) {
            Ok(t) => flatten(&t),
            Err(e) => return format!("# {e}\n"),
        };
        let mut out = String::new();
        for (key, value) in flat {
            let source = self.sources.get(&key).cloned().unwrap_or(Source::Default);
            let value = redact_value(&key, value);
            out.push_str(&format!("{key} = {value}  # {source}\n"));
        }
        out
    }

    /// [`database_url`](Self::database_url) with its password redacted, for
    /// logs and messages.
    pub fn database_url_redacted(&self) -> String {
        redact_dsn(&self.database_url())
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
        if iss.agent_gateway_roles.is_empty() {
            return Err(invalid(
                "issuance.agent_gateway_roles",
                "name at least one role: every agent certificate carries one".into(),
            ));
        }
        if let Some(bad) = iss
            .agent_gateway_roles
            .iter()
            .find(|r| r.trim().is_empty() || r.contains('*') || r.chars().count() > 64)
        {
            return Err(invalid(
                "issuance.agent_gateway_roles",
                format!("{bad:?}: a role is 1..=64 characters without wildcards"),
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
        if self.auth.token_expiry > self.auth.token_max_lifetime {
            return Err(invalid(
                "auth.token_expiry",
                format!(
                    "{} s exceeds auth.token_max_lifetime ({} s)",
                    self.auth.token_expiry, self.auth.token_max_lifetime
                ),
            ));
        }
        // i64 Unix seconds must hold `now + lifetime`.
        if self.auth.token_max_lifetime > 100 * 366 * 86_400 {
            return Err(invalid(
                "auth.token_max_lifetime",
                "must be at most 100 years".into(),
            ));
        }
        let prune = self.auth.token_prune_interval.0;
        if prune < Duration::from_millis(10) || prune > Duration::from_secs(86_400) {
            return Err(invalid(
                "auth.token_prune_interval",
                format!(
                    "{} is not within 10ms..=24h",
                    self.auth.token_prune_interval
                ),
            ));
        }
        let sync = self.auth.sync_interval.0;
        // The feed is what bounds how long a change on one node takes to
        // reach the others (2 s): a slower poll could not keep that.
        if sync < Duration::from_millis(10) || sync > Duration::from_secs(1) {
            return Err(invalid(
                "auth.sync_interval",
                format!("{} is not within 10ms..=1s", self.auth.sync_interval),
            ));
        }
        if self.auth.max_login_failures == 0 {
            return Err(invalid(
                "auth.max_login_failures",
                "must be positive".into(),
            ));
        }
        if self.auth.max_concurrent_logins > MAX_CONCURRENT_LOGINS {
            return Err(invalid(
                "auth.max_concurrent_logins",
                format!("must be at most {MAX_CONCURRENT_LOGINS} (0: twice the CPU cores)"),
            ));
        }
        if !(1..=MAX_BUDGET).contains(&self.auth.max_lock_entries) {
            return Err(invalid(
                "auth.max_lock_entries",
                format!("must be within 1..={MAX_BUDGET}"),
            ));
        }
        if warrant_store::Durability::parse(&self.durability).is_none() {
            return Err(invalid(
                "durability",
                format!("`{}`: expected durable or buffered", self.durability),
            ));
        }
        let in_range = |key: &str, v: u64, min: u64, max: u64| {
            if (min..=max).contains(&v) {
                Ok(())
            } else {
                Err(invalid(key, format!("{v} is not within {min}..={max}")))
            }
        };
        let rb = &self.record_buffer;
        in_range("record_buffer.threshold", rb.threshold, 1, 1_000_000)?;
        in_range("record_buffer.max_pending", rb.max_pending, 1, MAX_BUDGET)?;
        in_range(
            "record_buffer.wal_checkpoint_pages",
            rb.wal_checkpoint_pages,
            1,
            1_000_000,
        )?;
        let latency = rb.max_latency.0;
        if latency < Duration::from_millis(1) || latency > Duration::from_secs(60) {
            return Err(invalid(
                "record_buffer.max_latency",
                format!("{} is not within 1ms..=60s", rb.max_latency),
            ));
        }
        if rb.max_gather.0 > Duration::from_secs(1) {
            return Err(invalid(
                "record_buffer.max_gather",
                format!("{} is not within 0..=1s", rb.max_gather),
            ));
        }
        let en = &self.engine;
        in_range("engine.max_certs", en.max_certs, 1, MAX_BUDGET)?;
        in_range("engine.max_da_nonces", en.max_da_nonces, 1, MAX_BUDGET)?;
        in_range("engine.max_nonces", en.max_nonces, 1, MAX_BUDGET)?;
        in_range(
            "engine.write_max_pending",
            en.write_max_pending,
            1,
            MAX_BUDGET,
        )?;
        if en.grace.0 > Duration::from_secs(366 * 86_400) {
            return Err(invalid("engine.grace", "must be at most 366 days".into()));
        }
        let http = &self.http;
        for (key, d) in [
            ("http.header_read_timeout", http.header_read_timeout),
            ("http.idle_timeout", http.idle_timeout),
        ] {
            if d.0 < Duration::from_millis(10) || d.0 > Duration::from_secs(3600) {
                return Err(invalid(key, format!("{d} is not within 10ms..=1h")));
            }
        }
        in_range("http.max_connections", http.max_connections, 1, 1_000_000)?;
        // hyper's HTTP/1 read buffer cannot be smaller than 8 KiB.
        in_range(
            "http.max_header_bytes",
            http.max_header_bytes,
            MIN_HEADER_BYTES,
            1 << 20,
        )?;
        in_range(
            "http.h2_max_concurrent_streams",
            http.h2_max_concurrent_streams,
            1,
            10_000,
        )?;
        check_quota("rate_limit", self.rate_limit.rate, self.rate_limit.burst)?;
        let pp = &self.issuance.per_principal;
        check_quota("issuance.per_principal", pp.rate, pp.burst)?;
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

    /// The file `warrant init` writes: every key with its default, commented
    /// out. Written as live values, every key would count as set in the file,
    /// and a `device_profile` chosen later could fill none of them.
    pub fn starter_toml() -> String {
        let mut out = String::from(
            "# Warrant configuration. Every key is listed with its default, commented out:\n\
             # uncomment a line to set it. `warrant serve --print-config` shows each\n\
             # effective value and where it came from (default, device_profile, this\n\
             # file or a WARRANT_... environment variable).\n\n",
        );
        for line in Config::default().to_toml().lines() {
            if !line.is_empty() && !line.starts_with('[') {
                out.push_str("# ");
            }
            out.push_str(line);
            out.push('\n');
        }
        out
    }
}

/// Upper bound of `auth.max_concurrent_logins`: at 19 MiB per Argon2
/// verification, 1024 of them already hold 19 GiB.
const MAX_CONCURRENT_LOGINS: u64 = 1024;

/// Smallest `http.max_header_bytes`: hyper's HTTP/1 read buffer, which
/// bounds the request head, refuses to be smaller (it panics).
pub const MIN_HEADER_BYTES: u64 = 8192;

/// Upper bound of the count budgets: far above any real deployment, low
/// enough that a typo cannot ask for more memory than a machine has.
const MAX_BUDGET: u64 = 100_000_000;

/// `rate` (per second) and `burst` of a limit, named under `prefix`.
fn check_quota(prefix: &str, rate: f64, burst: u32) -> Result<(), ConfigError> {
    if !(rate.is_finite() && (0.000_001..=1_000_000.0).contains(&rate)) {
        return Err(ConfigError::InvalidValue {
            key: format!("{prefix}.rate"),
            message: format!("{rate} is not within 0.000001..=1000000 per second"),
        });
    }
    if burst == 0 {
        return Err(ConfigError::InvalidValue {
            key: format!("{prefix}.burst"),
            message: "must be at least 1".into(),
        });
    }
    Ok(())
}

/// What replaces a secret in printed configuration.
pub const REDACTED: &str = "***";

/// A config value as it may be printed: `database.url` with its password
/// redacted ([`redact_dsn`]); any non-empty key named `…password`,
/// `…secret` or `…passphrase` replaced whole. (`keys.passphrase_env` and
/// `keys.passphrase_file` name where the passphrase is, not the passphrase,
/// and are printed.)
pub fn redact_value(key: &str, value: toml::Value) -> toml::Value {
    let last = key.rsplit('.').next().unwrap_or(key);
    match value {
        toml::Value::String(s) if key == "database.url" => toml::Value::String(redact_dsn(&s)),
        toml::Value::String(s)
            if !s.is_empty()
                && ["password", "secret", "passphrase"]
                    .iter()
                    .any(|w| last.ends_with(w)) =>
        {
            toml::Value::String(REDACTED.into())
        }
        other => other,
    }
}

/// Query parameters of a DSN that carry a secret (compared case-insensitively).
const SECRET_DSN_PARAMS: &[&str] = &["password", "pass", "pwd", "sslpassword"];

/// A DSN with its secrets replaced by [`REDACTED`]: the password of the
/// userinfo (`postgres://user:***@host/db`) and secret query parameters
/// (`?password=***`). A SQLite path has none and is returned as it is.
pub fn redact_dsn(dsn: &str) -> String {
    let Some(scheme_end) = dsn.find("://").map(|i| i + 3) else {
        return dsn.to_string();
    };
    let (head, rest) = dsn.split_at(scheme_end);
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let mut out = String::with_capacity(dsn.len());
    out.push_str(head);
    // The host follows the *last* `@`: a password may itself contain `@`.
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            match userinfo.split_once(':') {
                Some((user, _password)) => {
                    out.push_str(user);
                    out.push(':');
                    out.push_str(REDACTED);
                }
                None => out.push_str(userinfo),
            }
            out.push('@');
            out.push_str(host);
        }
        None => out.push_str(authority),
    }
    let (path, query) = match tail.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (tail, None),
    };
    out.push_str(path);
    if let Some(query) = query {
        let (query, fragment) = match query.split_once('#') {
            Some((q, f)) => (q, Some(f)),
            None => (query, None),
        };
        out.push('?');
        for (i, pair) in query.split('&').enumerate() {
            if i > 0 {
                out.push('&');
            }
            match pair.split_once('=') {
                Some((name, _))
                    if SECRET_DSN_PARAMS
                        .iter()
                        .any(|p| p.eq_ignore_ascii_case(name)) =>
                {
                    out.push_str(name);
                    out.push('=');
                    out.push_str(REDACTED);
                }
                _ => out.push_str(pair),
            }
        }
        if let Some(f) = fragment {
            out.push('#');
            out.push_str(f);
        }
    }
    out
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
    fn rejects_agent_gateway_roles_that_are_empty_or_wild() {
        for file in [
            "[issuance]\nagent_gateway_roles = []\n",
            "[issuance]\nagent_gateway_roles = [\"gateway:*\"]\n",
            "[issuance]\nagent_gateway_roles = [\"\"]\n",
        ] {
            let err = LoadedConfig::from_parts(Path::new("/d"), Some(file), &env(&[])).unwrap_err();
            assert!(
                matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "issuance.agent_gateway_roles"),
                "{file}: {err}"
            );
        }
        let ok = LoadedConfig::from_parts(
            Path::new("/d"),
            None,
            &env(&[(
                "WARRANT_ISSUANCE_AGENT_GATEWAY_ROLES",
                "[\"gateway:reader\", \"gateway:admin\"]",
            )]),
        )
        .unwrap();
        assert_eq!(
            ok.config.issuance.agent_gateway_roles,
            ["gateway:reader", "gateway:admin"]
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
    fn rejects_token_expiry_over_the_max_lifetime_naming_both_keys() {
        let err = load(
            Some("[auth]\ntoken_expiry = 700000\ntoken_max_lifetime = 600000\n"),
            &[],
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "auth.token_expiry"),
            "{text}"
        );
        assert!(text.contains("auth.token_max_lifetime"), "{text}");
        // Lowering only the cap below the default expiry is refused too.
        let err = load(Some("[auth]\ntoken_max_lifetime = 3600\n"), &[]).unwrap_err();
        assert!(err.to_string().contains("auth.token_max_lifetime"), "{err}");
        let ok = load(
            Some("[auth]\ntoken_expiry = 3600\ntoken_max_lifetime = 3600\n"),
            &[],
        )
        .unwrap();
        assert_eq!(ok.config.auth.token_max_lifetime, 3600);
    }

    #[test]
    fn rejects_a_sync_interval_that_cannot_keep_the_two_second_bound() {
        let err = load(Some("[auth]\nsync_interval = \"5s\"\n"), &[]).unwrap_err();
        assert_eq!(invalid_key(err), "auth.sync_interval");
        let err = load(None, &[("WARRANT_AUTH_TOKEN_PRUNE_INTERVAL", "0")]).unwrap_err();
        assert_eq!(invalid_key(err), "auth.token_prune_interval");
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

    fn load(file: Option<&str>, vars: &[(&str, &str)]) -> Result<LoadedConfig, ConfigError> {
        LoadedConfig::from_parts(Path::new("/d"), file, &env(vars))
    }

    fn invalid_key(err: ConfigError) -> String {
        match err {
            ConfigError::InvalidValue { key, .. } => key,
            other => panic!("expected an invalid value, got {other}"),
        }
    }

    #[test]
    fn no_profile_gives_store_defaults() {
        let c = load(None, &[]).unwrap();
        let store = warrant_store::StoreOptions::default();
        assert_eq!(c.config.record_buffer.max_pending, 20_000);
        assert_eq!(c.config.record_buffer.threshold, store.threshold as u64);
        assert_eq!(c.config.record_buffer.max_latency.0, store.max_latency);
        assert_eq!(c.config.engine.max_certs, store.max_certs as u64);
        assert_eq!(c.config.engine.grace.0, store.cert_grace);
        assert_eq!(c.config.durability, "durable");
        assert_eq!(c.sources["record_buffer.max_pending"], Source::Default);
    }

    #[test]
    fn low_mem_profile_gives_the_documented_values() {
        let c = load(Some("device_profile = \"low_mem\"\n"), &[]).unwrap();
        let (rb, en) = (&c.config.record_buffer, &c.config.engine);
        assert_eq!(rb.threshold, 200);
        assert_eq!(rb.max_pending, 5_000);
        assert_eq!(en.max_certs, 50_000);
        assert_eq!(en.max_da_nonces, 50_000);
        assert_eq!(en.max_nonces, 50_000);
        assert_eq!(en.write_max_pending, 5_000);
        let profile = Source::Profile("low_mem".into());
        for key in [
            "record_buffer.threshold",
            "record_buffer.max_pending",
            "engine.max_certs",
            "engine.max_da_nonces",
            "engine.max_nonces",
            "engine.write_max_pending",
        ] {
            assert_eq!(c.sources[key], profile, "{key}");
        }
        // Keys the profile does not name keep their defaults.
        assert_eq!(c.sources["record_buffer.max_latency"], Source::Default);
        assert_eq!(
            c.config.record_buffer.max_latency,
            Config::default().record_buffer.max_latency
        );
        assert!(
            c.render()
                .contains("record_buffer.threshold = 200  # profile:low_mem\n")
        );
    }

    #[test]
    fn high_throughput_profile_gives_the_documented_values() {
        let c = load(None, &[("WARRANT_DEVICE_PROFILE", "high_throughput")]).unwrap();
        assert_eq!(c.config.record_buffer.max_pending, 100_000);
        assert_eq!(c.config.engine.write_max_pending, 100_000);
        assert_eq!(
            c.sources["engine.write_max_pending"],
            Source::Profile("high_throughput".into())
        );
        let d = Config::default();
        assert_eq!(c.config.record_buffer.threshold, d.record_buffer.threshold);
        assert_eq!(c.config.engine.max_certs, d.engine.max_certs);
        assert_eq!(c.config.engine.max_da_nonces, d.engine.max_da_nonces);
    }

    #[test]
    fn explicit_file_value_wins_over_profile() {
        let file = "device_profile = \"low_mem\"\n[record_buffer]\nmax_pending = 7\n[engine]\nmax_certs = 9\n";
        let c = load(Some(file), &[]).unwrap();
        assert_eq!(c.config.record_buffer.max_pending, 7);
        assert_eq!(c.sources["record_buffer.max_pending"], Source::File);
        assert_eq!(c.config.engine.max_certs, 9);
        assert_eq!(c.config.record_buffer.threshold, 200);
    }

    #[test]
    fn explicit_env_value_wins_over_profile() {
        // The env names `warrant bench --server-process` passes to its child.
        let c = load(
            None,
            &[
                ("WARRANT_DEVICE_PROFILE", "low_mem"),
                ("WARRANT_RECORD_BUFFER_MAX_PENDING", "3"),
            ],
        )
        .unwrap();
        assert_eq!(c.config.record_buffer.max_pending, 3);
        assert_eq!(
            c.sources["record_buffer.max_pending"],
            Source::Env("WARRANT_RECORD_BUFFER_MAX_PENDING".into())
        );
        assert_eq!(c.config.engine.write_max_pending, 5_000);
        assert_eq!(
            c.sources["device_profile"],
            Source::Env("WARRANT_DEVICE_PROFILE".into())
        );
    }

    #[test]
    fn unknown_profile_is_an_error_naming_device_profile() {
        let err = load(Some("device_profile = \"tiny\"\n"), &[]).unwrap_err();
        assert!(err.to_string().contains("tiny"), "{err}");
        assert_eq!(invalid_key(err), "device_profile");
    }

    #[test]
    fn every_profile_names_only_known_integer_keys() {
        let defaults = flatten(&to_table(&Config::default()).unwrap());
        for (name, values) in PROFILES {
            for (key, _) in *values {
                assert!(
                    matches!(defaults.get(*key), Some(toml::Value::Integer(_))),
                    "profile {name}: {key}"
                );
            }
        }
    }

    #[test]
    fn durations_take_seconds_or_a_unit() {
        let c = load(
            Some("[record_buffer]\nmax_latency = \"250ms\"\n[engine]\ngrace = 2\n"),
            &[],
        )
        .unwrap();
        assert_eq!(
            c.config.record_buffer.max_latency.0,
            Duration::from_millis(250)
        );
        assert_eq!(c.config.engine.grace.0, Duration::from_secs(2));
        assert!(
            c.render()
                .contains("record_buffer.max_latency = \"250ms\"  # warrant.toml")
        );
        let c = load(None, &[("WARRANT_ENGINE_GRACE", "5m")]).unwrap();
        assert_eq!(c.config.engine.grace.0, Duration::from_secs(300));
        let c = load(None, &[("WARRANT_ENGINE_GRACE", "90")]).unwrap();
        assert_eq!(c.config.engine.grace.0, Duration::from_secs(90));
        for (text, shown) in [
            ("1h", "1h"),
            ("120s", "2m"),
            ("1500ms", "1500ms"),
            ("0", "0s"),
        ] {
            assert_eq!(ConfigDuration::parse(text).unwrap().to_string(), shown);
        }
    }

    #[test]
    fn bad_write_path_values_name_their_key() {
        // (file, env, the key the error must name)
        type Case<'a> = (Option<&'a str>, &'a [(&'a str, &'a str)], &'a str);
        let cases: &[Case] = &[
            (
                Some("[record_buffer]\nmax_latency = \"soon\"\n"),
                &[],
                "record_buffer.max_latency",
            ),
            (
                Some("[record_buffer]\nmax_pending = \"lots\"\n"),
                &[],
                "record_buffer.max_pending",
            ),
            (
                Some("[record_buffer]\nmax_pending = -1\n"),
                &[],
                "record_buffer.max_pending",
            ),
            (
                None,
                &[("WARRANT_RECORD_BUFFER_MAX_PENDING", "0")],
                "record_buffer.max_pending",
            ),
            (
                None,
                &[("WARRANT_RECORD_BUFFER_THRESHOLD", "x")],
                "record_buffer.threshold",
            ),
            (
                None,
                &[("WARRANT_RECORD_BUFFER_MAX_LATENCY", "0ms")],
                "record_buffer.max_latency",
            ),
            (
                None,
                &[("WARRANT_RECORD_BUFFER_MAX_GATHER", "2s")],
                "record_buffer.max_gather",
            ),
            (None, &[("WARRANT_ENGINE_GRACE", "-3")], "engine.grace"),
            (
                None,
                &[("WARRANT_ENGINE_MAX_NONCES", "0")],
                "engine.max_nonces",
            ),
            (
                None,
                &[("WARRANT_ENGINE_WRITE_MAX_PENDING", "0")],
                "engine.write_max_pending",
            ),
            (None, &[("WARRANT_DURABILITY", "eventually")], "durability"),
            (
                None,
                &[("WARRANT_HTTP_HEADER_READ_TIMEOUT", "0")],
                "http.header_read_timeout",
            ),
            (
                Some("[http]\nidle_timeout = \"2h\"\n"),
                &[],
                "http.idle_timeout",
            ),
            (
                None,
                &[("WARRANT_HTTP_MAX_CONNECTIONS", "0")],
                "http.max_connections",
            ),
            (
                None,
                &[("WARRANT_HTTP_MAX_HEADER_BYTES", "4096")],
                "http.max_header_bytes",
            ),
            (
                None,
                &[("WARRANT_HTTP_H2_MAX_CONCURRENT_STREAMS", "0")],
                "http.h2_max_concurrent_streams",
            ),
            (None, &[("WARRANT_RATE_LIMIT_RATE", "0")], "rate_limit.rate"),
            (
                None,
                &[("WARRANT_RATE_LIMIT_BURST", "0")],
                "rate_limit.burst",
            ),
            (
                None,
                &[("WARRANT_ISSUANCE_PER_PRINCIPAL_RATE", "-1")],
                "issuance.per_principal.rate",
            ),
        ];
        for (file, vars, key) in cases {
            let err = load(*file, vars).unwrap_err();
            assert_eq!(&invalid_key(err), key, "{file:?} {vars:?}");
        }
    }

    #[test]
    fn env_names_are_unique() {
        let defaults = flatten(&to_table(&Config::default()).unwrap());
        let names: std::collections::BTreeSet<String> =
            defaults.keys().map(|k| env_name(k)).collect();
        assert_eq!(names.len(), defaults.len());
    }

    #[test]
    fn render_names_every_key_with_its_source() {
        let c = load(
            Some("device_profile = \"high_throughput\"\n[rate_limit]\nenabled = true\n"),
            &[("WARRANT_ENGINE_MAX_CERTS", "1234")],
        )
        .unwrap();
        let text = c.render();
        let defaults = flatten(&to_table(&Config::default()).unwrap());
        assert_eq!(text.lines().count(), defaults.len(), "{text}");
        for line in [
            "device_profile = \"high_throughput\"  # warrant.toml",
            "rate_limit.enabled = true  # warrant.toml",
            "engine.max_certs = 1234  # env WARRANT_ENGINE_MAX_CERTS",
            "record_buffer.max_pending = 100000  # profile:high_throughput",
            "record_buffer.threshold = 1000  # default",
            "durability = \"durable\"  # default",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn starter_file_sets_nothing_so_a_profile_chosen_later_applies() {
        let text = Config::starter_toml();
        let c = LoadedConfig::from_parts(Path::new("/d"), Some(&text), &env(&[])).unwrap();
        assert_eq!(c.config, Config::default());
        assert!(c.sources.values().all(|s| *s == Source::Default));

        let chosen = text.replace("# device_profile = \"\"", "device_profile = \"low_mem\"");
        assert_ne!(chosen, text, "the starter file lists device_profile");
        let c = LoadedConfig::from_parts(Path::new("/d"), Some(&chosen), &env(&[])).unwrap();
        assert_eq!(c.config.record_buffer.max_pending, 5_000);
        assert_eq!(c.config.engine.max_certs, 50_000);
        assert_eq!(
            c.sources.get("record_buffer.max_pending"),
            Some(&Source::Profile("low_mem".into()))
        );
    }

    #[test]
    fn dsn_secrets_are_redacted() {
        for (dsn, shown) in [
            (
                "postgres://warrant:hunter2@db.example:5432/ca",
                "postgres://warrant:***@db.example:5432/ca",
            ),
            (
                "mysql://root:p@ss:w@rd@127.0.0.1/test?ssl-mode=required",
                "mysql://root:***@127.0.0.1/test?ssl-mode=required",
            ),
            (
                "postgresql://u@h/db?sslmode=require&password=s3cret&application_name=w",
                "postgresql://u@h/db?sslmode=require&password=***&application_name=w",
            ),
            (
                "mariadb://admin:x@h?PWD=y#frag",
                "mariadb://admin:***@h?PWD=***#frag",
            ),
            ("postgres://h/db", "postgres://h/db"),
            (
                "sqlite:///var/lib/warrant/warrant.db",
                "sqlite:///var/lib/warrant/warrant.db",
            ),
            ("/var/lib/warrant/warrant.db", "/var/lib/warrant/warrant.db"),
        ] {
            assert_eq!(redact_dsn(dsn), shown, "{dsn}");
        }
    }

    #[test]
    fn print_config_redacts_the_database_password() {
        let file = "[database]\nurl = \"postgres://w:file-secret@h/db\"\n";
        let c = load(Some(file), &[]).unwrap();
        let text = c.render();
        assert!(!text.contains("file-secret"), "{text}");
        assert!(
            text.lines()
                .any(|l| l == "database.url = \"postgres://w:***@h/db\"  # warrant.toml"),
            "{text}"
        );
        let c = load(None, &[("DATABASE_URL", "mysql://root:env-secret@h/db")]).unwrap();
        assert!(!c.render().contains("env-secret"));
        assert_eq!(c.database_url_redacted(), "mysql://root:***@h/db");
        // The server still gets the real DSN.
        assert_eq!(c.database_url(), "mysql://root:env-secret@h/db");
    }

    #[test]
    fn secret_named_keys_are_redacted_whole() {
        let v = |s: &str| toml::Value::String(s.into());
        assert_eq!(redact_value("x.admin_password", v("p")), v(REDACTED));
        assert_eq!(redact_value("x.token_secret", v("p")), v(REDACTED));
        assert_eq!(redact_value("x.admin_password", v("")), v(""));
        assert_eq!(
            redact_value("keys.passphrase_env", v("WARRANT_PASS")),
            v("WARRANT_PASS")
        );
    }

    #[test]
    fn init_toml_round_trips() {
        let text = Config::default().to_toml();
        let c = LoadedConfig::from_parts(Path::new("/d"), Some(&text), &env(&[])).unwrap();
        assert_eq!(c.config, Config::default());
    }
}
