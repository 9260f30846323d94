//! Range and cross-field checks, run once after loading; each error names
//! its key.

use super::schema::{
    AuthConfig, Config, EngineConfig, HttpConfig, OcspConfig, RecordBufferConfig, RetentionConfig,
    StorageConfig, TokenConfig,
};
use super::{AGENT_PROXY_HARD_CAP_SECS, ConfigError};
use std::net::SocketAddr;
use std::time::Duration;

/// Upper bound of `auth.max_concurrent_logins`: at 19 MiB per Argon2
/// verification, 1024 of them already hold 19 GiB.
const MAX_CONCURRENT_LOGINS: u64 = 1024;

/// Smallest `http.max_header_bytes`: hyper's HTTP/1 read buffer, which
/// bounds the request head, refuses to be smaller (it panics).
pub const MIN_HEADER_BYTES: u64 = 8192;

/// Upper bound of the count budgets: far above any real deployment, low
/// enough that a typo cannot ask for more memory than a machine has.
const MAX_BUDGET: u64 = 100_000_000;

fn invalid(key: &str, message: String) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.into(),
        message,
    }
}

/// `min..=max`, or an error naming `key`.
fn in_range(key: &str, v: u64, min: u64, max: u64) -> Result<(), ConfigError> {
    if (min..=max).contains(&v) {
        Ok(())
    } else {
        Err(invalid(key, format!("{v} is not within {min}..={max}")))
    }
}

impl Config {
    /// Cross-field and range checks; each error names its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_listeners()?;
        self.validate_issuance()?;
        validate_auth(&self.auth)?;
        if warrant_store::Durability::parse(&self.durability).is_none() {
            return Err(invalid(
                "durability",
                format!("`{}`: expected durable or buffered", self.durability),
            ));
        }
        validate_record_buffer(&self.record_buffer)?;
        validate_engine(&self.engine)?;
        validate_http(&self.http)?;
        validate_ocsp(&self.ocsp)?;
        validate_token(&self.token)?;
        validate_storage(&self.storage, &self.retention)?;
        let every = self.audit.checkpoint_interval;
        if every.0 < Duration::from_millis(100) || every.0 > Duration::from_secs(3600) {
            return Err(invalid(
                "audit.checkpoint_interval",
                format!("{every} is not within 100ms..=1h"),
            ));
        }
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

    /// The listeners, TLS and the log format.
    fn validate_listeners(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    fn validate_issuance(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }
}

fn validate_auth(auth: &AuthConfig) -> Result<(), ConfigError> {
    if auth.token_expiry == 0 {
        return Err(invalid("auth.token_expiry", "must be positive".into()));
    }
    if auth.token_expiry > auth.token_max_lifetime {
        return Err(invalid(
            "auth.token_expiry",
            format!(
                "{} s exceeds auth.token_max_lifetime ({} s)",
                auth.token_expiry, auth.token_max_lifetime
            ),
        ));
    }
    // i64 Unix seconds must hold `now + lifetime`.
    if auth.token_max_lifetime > 100 * 366 * 86_400 {
        return Err(invalid(
            "auth.token_max_lifetime",
            "must be at most 100 years".into(),
        ));
    }
    let prune = auth.token_prune_interval.0;
    if prune < Duration::from_millis(10) || prune > Duration::from_secs(86_400) {
        return Err(invalid(
            "auth.token_prune_interval",
            format!("{} is not within 10ms..=24h", auth.token_prune_interval),
        ));
    }
    let sync = auth.sync_interval.0;
    // The feed is what bounds how long a change on one node takes to
    // reach the others (2 s): a slower poll could not keep that.
    if sync < Duration::from_millis(10) || sync > Duration::from_secs(1) {
        return Err(invalid(
            "auth.sync_interval",
            format!("{} is not within 10ms..=1s", auth.sync_interval),
        ));
    }
    if auth.max_login_failures == 0 {
        return Err(invalid(
            "auth.max_login_failures",
            "must be positive".into(),
        ));
    }
    if auth.max_concurrent_logins > MAX_CONCURRENT_LOGINS {
        return Err(invalid(
            "auth.max_concurrent_logins",
            format!("must be at most {MAX_CONCURRENT_LOGINS} (0: twice the CPU cores)"),
        ));
    }
    if !(1..=MAX_BUDGET).contains(&auth.max_lock_entries) {
        return Err(invalid(
            "auth.max_lock_entries",
            format!("must be within 1..={MAX_BUDGET}"),
        ));
    }
    Ok(())
}

fn validate_record_buffer(rb: &RecordBufferConfig) -> Result<(), ConfigError> {
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
    Ok(())
}

fn validate_engine(en: &EngineConfig) -> Result<(), ConfigError> {
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
    Ok(())
}

fn validate_ocsp(ocsp: &OcspConfig) -> Result<(), ConfigError> {
    let base = ocsp.base_url.trim();
    if !base.is_empty()
        && !((base.starts_with("http://") || base.starts_with("https://"))
            && base.len() > "https://".len()
            && !base.contains(char::is_whitespace))
    {
        return Err(invalid(
            "ocsp.base_url",
            format!("{base:?} is not an http:// or https:// URL"),
        ));
    }
    let validity = ocsp.response_validity.0;
    if validity < Duration::from_secs(60) || validity > Duration::from_secs(7 * 86_400) {
        return Err(invalid(
            "ocsp.response_validity",
            format!("{} is not within 1m..=7d", ocsp.response_validity),
        ));
    }
    let lifetime = ocsp.responder_lifetime.0;
    if lifetime > Duration::from_secs(30 * 86_400) || lifetime < 2 * validity {
        return Err(invalid(
            "ocsp.responder_lifetime",
            format!(
                "{} must be at least twice ocsp.response_validity ({}) and at most 30d: \
                 a response must not outlive the responder that signed it",
                ocsp.responder_lifetime, ocsp.response_validity
            ),
        ));
    }
    Ok(())
}

fn validate_token(token: &TokenConfig) -> Result<(), ConfigError> {
    let issuer = token.issuer.trim();
    if issuer.len() > 512 || issuer.contains(char::is_whitespace) {
        return Err(invalid(
            "token.issuer",
            "must be at most 512 characters without whitespace".into(),
        ));
    }
    let lifetime = token.max_lifetime.0;
    if lifetime < Duration::from_secs(1)
        || lifetime > Duration::from_secs(warrant_ca::MAX_TOKEN_LIFETIME_SECS as u64)
    {
        return Err(invalid(
            "token.max_lifetime",
            format!(
                "{} is not within 1s..=24h (draft-wei-aic-jwt-02's limit)",
                token.max_lifetime
            ),
        ));
    }
    if warrant_ca::TokenAlgorithm::from_name(&token.algorithm).is_none() {
        return Err(invalid(
            "token.algorithm",
            format!("{:?}: expected ES256 or ES384", token.algorithm),
        ));
    }
    if token.default_audience.len() > 8
        || token
            .default_audience
            .iter()
            .any(|a| a.is_empty() || a.len() > 512 || a.contains(char::is_whitespace))
    {
        return Err(invalid(
            "token.default_audience",
            "at most 8 non-empty values of at most 512 characters without whitespace".into(),
        ));
    }
    for (key, d, max) in [
        ("token.dpop_max_age", token.dpop_max_age, 600),
        ("token.jwks_max_age", token.jwks_max_age, 86_400),
        ("token.key_reload_interval", token.key_reload_interval, 3600),
    ] {
        if d.0 < Duration::from_millis(10) || d.0 > Duration::from_secs(max) {
            return Err(invalid(key, format!("{d} is not within 10ms..={max}s")));
        }
    }
    Ok(())
}

fn validate_storage(
    storage: &StorageConfig,
    retention: &RetentionConfig,
) -> Result<(), ConfigError> {
    if !matches!(storage.agent_cert_der.as_str(), "keep" | "drop") {
        return Err(invalid(
            "storage.agent_cert_der",
            format!("{:?}: expected keep or drop", storage.agent_cert_der),
        ));
    }
    if !matches!(retention.archive.as_str(), "none" | "file") {
        return Err(invalid(
            "retention.archive",
            format!("{:?}: expected none or file", retention.archive),
        ));
    }
    let grace = retention.expired_grace.0;
    if grace > Duration::from_secs(10 * 366 * 86_400) {
        return Err(invalid(
            "retention.expired_grace",
            format!("{} is longer than 10 years", retention.expired_grace),
        ));
    }
    let keep = retention.audit_keep.0;
    if keep < Duration::from_secs(1) || keep > Duration::from_secs(100 * 366 * 86_400) {
        return Err(invalid(
            "retention.audit_keep",
            format!("{} is not within 1s..=100 years", retention.audit_keep),
        ));
    }
    let every = retention.interval.0;
    if every < Duration::from_millis(100) || every > Duration::from_secs(86_400) {
        return Err(invalid(
            "retention.interval",
            format!("{} is not within 100ms..=24h", retention.interval),
        ));
    }
    if !(1..=100_000).contains(&retention.batch_size) {
        return Err(invalid(
            "retention.batch_size",
            format!("{} is not within 1..=100000", retention.batch_size),
        ));
    }
    Ok(())
}

fn validate_http(http: &HttpConfig) -> Result<(), ConfigError> {
    for (key, d) in [
        ("http.header_read_timeout", http.header_read_timeout),
        ("http.body_read_timeout", http.body_read_timeout),
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
    )
}

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

#[cfg(test)]
mod tests {
    use crate::config::test_support::{env, invalid_key, load};
    use crate::config::{ConfigError, LoadedConfig};
    use std::path::Path;

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
                None,
                &[("WARRANT_OCSP_BASE_URL", "ftp://ca.example")],
                "ocsp.base_url",
            ),
            (
                None,
                &[("WARRANT_OCSP_RESPONSE_VALIDITY", "10s")],
                "ocsp.response_validity",
            ),
            (
                None,
                &[("WARRANT_TOKEN_MAX_LIFETIME", "25h")],
                "token.max_lifetime",
            ),
            (
                None,
                &[("WARRANT_TOKEN_ALGORITHM", "HS256")],
                "token.algorithm",
            ),
            (
                Some("[token]\ndefault_audience = [\"\"]\n"),
                &[],
                "token.default_audience",
            ),
            (
                None,
                &[("WARRANT_TOKEN_DPOP_MAX_AGE", "1h")],
                "token.dpop_max_age",
            ),
            (
                None,
                &[("WARRANT_TOKEN_KEY_RELOAD_INTERVAL", "0s")],
                "token.key_reload_interval",
            ),
            (
                Some("[token]\nissuer = \"https://ca.example/a b\"\n"),
                &[],
                "token.issuer",
            ),
            (
                None,
                &[("WARRANT_OCSP_RESPONDER_LIFETIME", "90m")],
                "ocsp.responder_lifetime",
            ),
            (
                None,
                &[("WARRANT_HTTP_BODY_READ_TIMEOUT", "5ms")],
                "http.body_read_timeout",
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
            (
                Some("[retention]\naudit_keep = \"0s\"\n"),
                &[],
                "retention.audit_keep",
            ),
        ];
        for (file, vars, key) in cases {
            let err = load(*file, vars).unwrap_err();
            assert_eq!(&invalid_key(err), key, "{file:?} {vars:?}");
        }
    }
}
