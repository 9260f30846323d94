//! Every key's default, and the `device_profile` values that replace some
//! of them. Write-path and memory defaults are the store's own, so the two
//! cannot drift apart.

use super::ConfigDuration;
use super::schema::{
    AuditConfig, AuthConfig, Config, DatabaseConfig, EngineConfig, HttpConfig, IssuanceConfig,
    KeysConfig, OcspConfig, PrincipalLimitConfig, RateLimitConfig, RecordBufferConfig,
    RetentionConfig, StorageConfig, TlsConfig, TokenConfig,
};
use std::time::Duration;

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
            ocsp: OcspConfig::default(),
            token: TokenConfig::default(),
            storage: StorageConfig::default(),
            retention: RetentionConfig::default(),
            audit: AuditConfig::default(),
        }
    }
}

impl Default for KeysConfig {
    fn default() -> Self {
        Self {
            passphrase_env: String::new(),
            passphrase_file: String::new(),
            pkcs11_module: String::new(),
            pkcs11_pin_env: "WARRANT_PKCS11_PIN".to_string(),
            pkcs11_pin_file: String::new(),
            ca_expiry_warning_days: 90,
            ca_reload_interval: ConfigDuration(Duration::from_secs(10)),
        }
    }
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            log: true,
            checkpoint_interval: ConfigDuration(Duration::from_secs(2)),
        }
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            agent_cert_der: "keep".into(),
        }
    }
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            expired_grace: ConfigDuration(Duration::from_secs(24 * 3600)),
            interval: ConfigDuration(Duration::from_secs(10)),
            batch_size: 2000,
            archive: "none".into(),
            audit_keep: ConfigDuration(Duration::from_secs(25 * 3600)),
        }
    }
}

impl Default for TokenConfig {
    fn default() -> Self {
        Self {
            issuer: String::new(),
            max_lifetime: ConfigDuration(Duration::from_secs(3600)),
            algorithm: "ES256".into(),
            default_audience: Vec::new(),
            dpop_max_age: ConfigDuration(Duration::from_secs(60)),
            jwks_max_age: ConfigDuration(Duration::from_secs(300)),
            key_reload_interval: ConfigDuration(Duration::from_secs(10)),
        }
    }
}

impl Default for OcspConfig {
    fn default() -> Self {
        Self {
            base_url: String::new(),
            response_validity: ConfigDuration(Duration::from_secs(3600)),
            responder_lifetime: ConfigDuration(Duration::from_secs(24 * 3600)),
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
            body_read_timeout: ConfigDuration(crate::extract::BodyReadTimeout::default().0),
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
            renewal_max_total_days: 0,
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
