//! Shared server state and start-up: the loaded hierarchy, the store, the
//! in-memory auth index, and the first-run bootstrap (`warrant init`).

use crate::auth::{self, AuthIndex, Role, TokenEntry, UserEntry};
use crate::config::{CONFIG_FILE, Config, LoadedConfig};
use crate::error::{ApiError, ErrorKey};
use crate::limits::Limits;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use warrant_ca::{Hierarchy, LeafUrls};
use warrant_store::{Durability, NewApiToken, NewUser, Store, StoreError, StoreOptions};

/// Per issuing CA, the parts of every certificate and every issuance answer
/// that never change, encoded once at start-up instead of per request.
pub struct CaServing {
    /// CRL distribution point / AIA of the leaves.
    pub urls: LeafUrls,
    /// The chain PEM as a JSON string literal. JSON-escaping the ~1.5 KB
    /// chain in every answer was most of the answer's encoding cost.
    pub chain_json: Box<serde_json::value::RawValue>,
}

pub struct AppState {
    pub config: Arc<LoadedConfig>,
    pub hierarchy: Arc<Hierarchy>,
    pub store: Arc<dyn Store>,
    pub auth: AuthIndex,
    /// What issuance adds to each issuing CA's certificates and answers,
    /// encoded once.
    pub per_ca: HashMap<String, CaServing>,
    /// Last CRL number handed out; CRL numbers must grow (RFC 5280 §5.2.3).
    pub last_crl_number: AtomicI64,
    /// Rate limits and the in-flight issuance cap.
    pub limits: Arc<Limits>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("configuration: {0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("CA: {0}")]
    Ca(#[from] warrant_ca::CaError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
}

impl From<ApiError> for StartError {
    fn from(e: ApiError) -> Self {
        StartError::Other(e.to_string())
    }
}

pub fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::Conflict(what) => {
            ApiError::detail(ErrorKey::Conflict, format!("{what} already exists"))
        }
        StoreError::MissingReference(what) => {
            ApiError::detail(ErrorKey::NotFound, format!("{what} does not exist"))
        }
        StoreError::Unavailable(d) => {
            ApiError::detail(ErrorKey::Unavailable, format!("database: {d}")).with_retry_after(1)
        }
        other => ApiError::detail(ErrorKey::Internal, other.to_string()),
    }
}

pub fn now_unix() -> i64 {
    crate::issuance::unix(std::time::SystemTime::now())
}

/// The CA key passphrase from `keys.passphrase_env` / `keys.passphrase_file`.
pub fn passphrase(cfg: &Config) -> Result<Option<String>, StartError> {
    if !cfg.keys.passphrase_env.is_empty() {
        if let Ok(v) = std::env::var(&cfg.keys.passphrase_env) {
            if !v.is_empty() {
                return Ok(Some(v));
            }
        }
    }
    if !cfg.keys.passphrase_file.is_empty() {
        let text = std::fs::read_to_string(&cfg.keys.passphrase_file).map_err(|source| {
            StartError::Io {
                context: format!("keys.passphrase_file {}", cfg.keys.passphrase_file),
                source,
            }
        })?;
        let t = text.trim_end_matches(['\r', '\n']).to_string();
        if !t.is_empty() {
            return Ok(Some(t));
        }
    }
    Ok(None)
}

/// Store tunables from the config (`durability`, `record_buffer.*`,
/// `engine.*`, profile already applied). The store's own defaults fill the
/// rest (pools, timeouts, committers). `engine.write_max_pending` is not a
/// store option: it bounds issuance requests in flight in the server
/// ([`crate::limits::Limits::admit_issuance`]).
pub fn store_options(cfg: &Config) -> StoreOptions {
    let count = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    let defaults = StoreOptions::default();
    StoreOptions {
        // Validated at load; an unparsable value cannot reach here.
        durability: Durability::parse(&cfg.durability).unwrap_or(defaults.durability),
        threshold: count(cfg.record_buffer.threshold),
        max_latency: cfg.record_buffer.max_latency.0,
        max_gather: cfg.record_buffer.max_gather.0,
        max_pending: count(cfg.record_buffer.max_pending),
        // Validated at load: at most 1 000 000.
        wal_checkpoint_pages: u32::try_from(cfg.record_buffer.wal_checkpoint_pages)
            .unwrap_or(defaults.wal_checkpoint_pages),
        max_da_nonces: count(cfg.engine.max_da_nonces.min(cfg.engine.max_nonces)),
        max_certs: count(cfg.engine.max_certs),
        cert_grace: cfg.engine.grace.0,
        ..defaults
    }
}

/// What `warrant init` created, for printing once.
#[derive(Debug, Clone)]
pub struct InitReport {
    pub data_dir: PathBuf,
    pub admin_username: String,
    /// Set when the password was generated (it is shown once, never stored).
    pub generated_password: Option<String>,
    pub bootstrap_token: String,
}

impl InitReport {
    pub fn print(&self) {
        println!("Initialised Warrant CA in {}", self.data_dir.display());
        println!("  Root CA (ECDSA P-384) and People CA (ECDSA P-256) created");
        match &self.generated_password {
            Some(p) => println!("  admin user: {}  password: {p}", self.admin_username),
            None => println!("  admin user: {}  (password as given)", self.admin_username),
        }
        println!("  bootstrap token (shown once): {}", self.bootstrap_token);
    }
}

fn ensure_private_dir(dir: &Path) -> Result<(), StartError> {
    std::fs::create_dir_all(dir).map_err(|source| StartError::Io {
        context: format!("creating {}", dir.display()),
        source,
    })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    Ok(())
}

/// Creates a data dir: `warrant.toml` (all defaults, if absent), the CA
/// hierarchy, the database, the admin user and a bootstrap token.
pub async fn init_data_dir(
    data_dir: &Path,
    admin_password: Option<String>,
) -> Result<InitReport, StartError> {
    ensure_private_dir(data_dir)?;
    let cfg_path = data_dir.join(CONFIG_FILE);
    if !cfg_path.exists() {
        std::fs::write(&cfg_path, Config::starter_toml()).map_err(|source| StartError::Io {
            context: format!("writing {}", cfg_path.display()),
            source,
        })?;
    }
    let loaded = LoadedConfig::load(data_dir)?;
    let pass = passphrase(&loaded.config)?;
    Hierarchy::init(data_dir, pass.as_deref())?;
    let store = warrant_store::open(&loaded.database_url(), store_options(&loaded.config)).await?;
    let report = bootstrap_admin(store.as_ref(), &loaded.config, data_dir, admin_password).await;
    store.shutdown().await;
    report
}

async fn bootstrap_admin(
    store: &dyn Store,
    cfg: &Config,
    data_dir: &Path,
    admin_password: Option<String>,
) -> Result<InitReport, StartError> {
    let (password, generated) = match admin_password.filter(|p| !p.is_empty()) {
        Some(p) => (p, false),
        None => (auth::generate_password()?, true),
    };
    let hash =
        tokio::task::spawn_blocking(move || auth::hash_password(&password).map(|h| (h, password)))
            .await
            .map_err(|e| StartError::Other(e.to_string()))??;
    let now = now_unix();
    let user_id = store
        .create_user(&NewUser {
            username: "admin".into(),
            password_hash: hash.0,
            role: warrant_store::Role::Admin,
            created_at: now,
        })
        .await?;
    let (token, token_hash) = auth::new_token()?;
    store
        .create_token(&NewApiToken {
            token_hash,
            user_id,
            name: "bootstrap".into(),
            created_at: now,
            expires_at: now.saturating_add(cfg.auth.token_expiry as i64),
        })
        .await?;
    Ok(InitReport {
        data_dir: data_dir.to_path_buf(),
        admin_username: "admin".into(),
        generated_password: generated.then_some(hash.1),
        bootstrap_token: token,
    })
}

pub fn role_from_store(r: warrant_store::Role) -> Role {
    match r {
        warrant_store::Role::Admin => Role::Admin,
        warrant_store::Role::Operator => Role::Operator,
        warrant_store::Role::Auditor => Role::Auditor,
    }
}

pub fn role_to_store(r: Role) -> Option<warrant_store::Role> {
    match r {
        Role::Admin => Some(warrant_store::Role::Admin),
        Role::Operator => Some(warrant_store::Role::Operator),
        Role::Auditor => Some(warrant_store::Role::Auditor),
        Role::CertificateHolder => None,
    }
}

pub fn user_entry(u: &warrant_store::UserRow) -> UserEntry {
    UserEntry {
        id: u.id.to_string(),
        username: u.username.clone(),
        role: role_from_store(u.role),
        password_hash: u.password_hash.clone(),
    }
}

pub fn token_entry(t: &warrant_store::ApiTokenRow) -> TokenEntry {
    TokenEntry {
        id: t.id.to_string(),
        user_id: t.user_id.to_string(),
        name: t.name.clone(),
        hash: t.token_hash,
        expires_at: t.expires_at,
    }
}

fn url_for(template: &str, ca: &str) -> Option<String> {
    (!template.is_empty()).then(|| template.replace("{ca}", ca))
}

impl AppState {
    /// Loads everything a running server needs; the hierarchy must exist.
    pub async fn load(config: LoadedConfig) -> Result<AppState, StartError> {
        let pass = passphrase(&config.config)?;
        let hierarchy = Hierarchy::load(&config.data_dir, pass.as_deref())?;
        if config.config.durability == "buffered" {
            tracing::warn!(
                "durability = \"buffered\": issuance is answered before it is committed; \
                 a crash loses acknowledged certificates and nonces"
            );
        }
        let store =
            warrant_store::open(&config.database_url(), store_options(&config.config)).await?;
        Self::with_parts(config, hierarchy, store).await
    }

    pub async fn with_parts(
        config: LoadedConfig,
        hierarchy: Hierarchy,
        store: Arc<dyn Store>,
    ) -> Result<AppState, StartError> {
        let auth = AuthIndex::new();
        for u in store.list_users().await? {
            auth.upsert_user(user_entry(&u));
        }
        for t in store.load_unexpired_tokens(now_unix()).await? {
            auth.insert_token(token_entry(&t));
        }
        let iss = &config.config.issuance;
        let mut per_ca = HashMap::new();
        for ca in hierarchy.issuing_cas() {
            let crl = url_for(&iss.crl_url, ca.name());
            let aia = url_for(&iss.aia_url, ca.name());
            let urls = LeafUrls::new(crl.as_deref(), aia.as_deref(), None)?;
            let chain_json = serde_json::value::to_raw_value(ca.chain_pem()).map_err(|e| {
                StartError::Other(format!("encoding the chain of {}: {e}", ca.name()))
            })?;
            per_ca.insert(ca.name().to_string(), CaServing { urls, chain_json });
        }
        let limits = Arc::new(Limits::new(&config.config));
        limits.spawn_pruner();
        Ok(AppState {
            limits,
            config: Arc::new(config),
            hierarchy: Arc::new(hierarchy),
            store,
            auth,
            per_ca,
            last_crl_number: AtomicI64::new(0),
        })
    }

    /// A CRL number that grows across calls and restarts (seconds since the
    /// epoch, bumped when two CRLs are made within one second).
    pub fn next_crl_number(&self) -> u64 {
        use std::sync::atomic::Ordering;
        let now = now_unix();
        let mut prev = self.last_crl_number.load(Ordering::Relaxed);
        loop {
            let next = now.max(prev + 1);
            match self.last_crl_number.compare_exchange(
                prev,
                next,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return next as u64,
                Err(p) => prev = p,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn options(file: &str) -> StoreOptions {
        let loaded =
            LoadedConfig::from_parts(Path::new("/d"), Some(file), &BTreeMap::new()).unwrap();
        store_options(&loaded.config)
    }

    #[test]
    fn defaults_are_the_store_defaults() {
        let (got, want) = (options(""), StoreOptions::default());
        assert_eq!(got.durability, want.durability);
        assert_eq!(got.threshold, want.threshold);
        assert_eq!(got.max_latency, want.max_latency);
        assert_eq!(got.max_gather, want.max_gather);
        assert_eq!(got.max_pending, want.max_pending);
        assert_eq!(got.max_da_nonces, want.max_da_nonces);
        assert_eq!(got.max_certs, want.max_certs);
        assert_eq!(got.cert_grace, want.cert_grace);
    }

    #[test]
    fn config_keys_reach_the_store() {
        let o = options(
            "durability = \"buffered\"\n[record_buffer]\nthreshold = 64\nmax_latency = \"20ms\"\nmax_gather = \"5ms\"\n\
             max_pending = 4\n[engine]\nmax_certs = 10\ngrace = \"1m\"\nmax_da_nonces = 500\n\
             max_nonces = 300\n",
        );
        assert_eq!(o.durability, Durability::Buffered);
        assert_eq!(o.threshold, 64);
        assert_eq!(o.max_latency, Duration::from_millis(20));
        assert_eq!(o.max_gather, Duration::from_millis(5));
        assert_eq!(o.max_pending, 4);
        assert_eq!(o.max_certs, 10);
        assert_eq!(o.cert_grace, Duration::from_secs(60));
        // max_nonces caps every nonce set, the DA ledger included.
        assert_eq!(o.max_da_nonces, 300);
    }

    #[test]
    fn low_mem_profile_reaches_the_store() {
        let o = options("device_profile = \"low_mem\"\n");
        assert_eq!(o.threshold, 200);
        assert_eq!(o.max_pending, 5_000);
        assert_eq!(o.max_certs, 50_000);
        assert_eq!(o.max_da_nonces, 50_000);
    }
}
