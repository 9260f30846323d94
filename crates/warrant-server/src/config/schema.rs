//! The configuration's sections and keys. Each field's doc says what it
//! means; its default is in `defaults`, its bounds in `validate`.

use super::ConfigDuration;
use serde::{Deserialize, Serialize};

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
    pub ocsp: OcspConfig,
    pub token: TokenConfig,
    pub storage: StorageConfig,
    pub retention: RetentionConfig,
    pub audit: AuditConfig,
}

/// The transparency log (`docs/audit.md`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// Whether issuances and events become leaves of the log. Off only to
    /// measure the log's cost side by side (`bench/ab.sh`): an
    /// identity system runs with it on.
    pub log: bool,
    /// How often a checkpoint is signed for each tree that grew.
    pub checkpoint_interval: ConfigDuration,
}

/// What each certificate row keeps (ca.md §5).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// `keep` or `drop`: whether an agent certificate's row keeps its DER.
    /// `drop` keeps only what revocation, cascades, `max_agents`, audit and
    /// `GET /api/v1/certs/{ca}/{serial}` need; its export answers 410
    /// `api.cert_der_dropped`. Person and operator certificates always keep
    /// their DER.
    pub agent_cert_der: String,
}

impl StorageConfig {
    /// `agent_cert_der = "keep"` (validated at load: anything else is `drop`).
    pub fn keeps_agent_der(&self) -> bool {
        self.agent_cert_der != "drop"
    }
}

/// Retention of expired certificates (ca.md §5).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// A certificate whose `notAfter` is older than this leaves the hot
    /// tables (revoked ones too: a CRL lists only unexpired serials).
    pub expired_grace: ConfigDuration,
    /// How often the pruner looks for expired rows.
    pub interval: ConfigDuration,
    /// Rows deleted per statement, so a prune never holds the write lock
    /// for long.
    pub batch_size: u64,
    /// `none` or `file`: with `file`, pruned rows are first appended to
    /// `archive/certs-YYYY-MM-DD.jsonl.zst` in the data dir (one file per
    /// expiry day).
    pub archive: String,
    /// Audit rows older than this leave the database the same way (to
    /// `archive/audit-YYYY-MM-DD.jsonl.zst` with `archive = "file"`). The
    /// default keeps them as long as the agent certificates they speak of
    /// (an hour's life plus `expired_grace`); a longer history belongs in
    /// the archive at fleet rates.
    pub audit_keep: ConfigDuration,
}

/// The AIC-JWT token endpoint (`POST /oauth/token`) and its key set
/// (`GET /.well-known/jwks.json`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TokenConfig {
    /// `iss` of every AIC-JWT; a DA JWT with an `aud` must name it. Empty:
    /// `ocsp.base_url` when set, else `urn:warrant:` and the root CA's key id.
    pub issuer: String,
    /// Longest `exp − iat` of a token (also capped by the DA's lifetime).
    pub max_lifetime: ConfigDuration,
    /// `ES256` or `ES384`: the algorithm of keys `init` and
    /// `warrant token-key rotate` create.
    pub algorithm: String,
    /// `aud` of a token whose request names no `resource`.
    pub default_audience: Vec<String>,
    /// How old a DPoP proof's `iat` may be.
    pub dpop_max_age: ConfigDuration,
    /// `Cache-Control: max-age` of the JWKS. A rotated key activates after
    /// twice this by default, so every cached key set has it by then.
    pub jwks_max_age: ConfigDuration,
    /// How often the server re-reads `ca/tokens/` for keys added by
    /// `warrant token-key rotate`.
    pub key_reload_interval: ConfigDuration,
}

/// The OCSP responder (`/ocsp`), for every issuing CA and the root.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct OcspConfig {
    /// The server's public base URL (`https://ca.example.com`). When set,
    /// every issued certificate names `{base_url}/ocsp` in its AIA
    /// extension.
    pub base_url: String,
    /// `nextUpdate − thisUpdate` of each response: how long a client may
    /// cache it (also the GET answer's `max-age`).
    pub response_validity: ConfigDuration,
    /// Lifetime of each delegated responder certificate; a new one is made
    /// once half of it has passed.
    pub responder_lifetime: ConfigDuration,
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
    /// SQLite: WAL pages after which the committing connection copies the
    /// WAL back into the database file (SQLite's `wal_autocheckpoint`).
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
    /// Longest a client may take to send a request's body once its head is
    /// in. A slower request is answered 408 and its connection closed.
    pub body_read_timeout: ConfigDuration,
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
    /// `POST /api/v1/certs/renew`: a line of renewed person certificates
    /// never reaches past this many days after its first certificate was
    /// issued. `0`: no limit (each renewal is still capped by
    /// `max_validity_days` and the CA's NotAfter).
    pub renewal_max_total_days: u32,
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

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct KeysConfig {
    /// Name of an env var holding the CA key passphrase (empty: none).
    pub passphrase_env: String,
    /// File holding the CA key passphrase (empty: none).
    pub passphrase_file: String,
    /// The PKCS#11 library for keys whose URI names no `module-path`
    /// (empty: none).
    pub pkcs11_module: String,
    /// Name of an env var holding the PKCS#11 user PIN.
    pub pkcs11_pin_env: String,
    /// File holding the PKCS#11 user PIN (empty: none); read when the env
    /// var is unset or empty.
    pub pkcs11_pin_file: String,
    /// `/readyz` warns this many days before a CA certificate ends.
    pub ca_expiry_warning_days: u64,
    /// How often `serve` re-reads `ca/` for CAs added by `warrant ca rotate`
    /// or `warrant ca install`.
    pub ca_reload_interval: ConfigDuration,
}
