//! AIC-JWTs (draft-wei-aic-jwt-02): the token-signing keys this server
//! holds, the JWK Set that publishes them, and the JWT-bearer grant of
//! `POST /oauth/token` (`grant`).
//!
//! The keys live in `ca/tokens/` (see [`warrant_ca::TokenKeyRing`]). The
//! server re-reads that directory every `token.key_reload_interval`, so a
//! key added by `warrant token-key rotate` is published and, once its
//! activation time comes, signs, without a restart.

mod grant;

pub use grant::{GrantError, OAuthErrorCode, TokenGrant, TokenResponse, redeem};

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use serde_json::Value;
use warrant_ca::{Hierarchy, TokenAlgorithm, TokenKey, TokenKeyRing};

use crate::clock::unix_now;
use crate::config::Config;
use crate::error::{ApiError, internal};
use crate::state::StartError;

/// The issuer's key set and identity.
pub struct TokenService {
    ring: RwLock<Arc<TokenKeyRing>>,
    data_dir: PathBuf,
    passphrase: Option<String>,
    /// The PIN and library for keys kept in a PKCS#11 token.
    pkcs11: warrant_ca::Pkcs11Access,
    /// `iss` of every token.
    issuer: String,
}

impl TokenService {
    /// Loads the token keys; a data dir without any (one made before token
    /// keys existed) gets its first key now, as `warrant init` would make it.
    pub fn load(
        data_dir: PathBuf,
        passphrase: Option<String>,
        cfg: &Config,
        hierarchy: &Hierarchy,
    ) -> Result<TokenService, StartError> {
        let pkcs11 = crate::state::pkcs11_access(cfg)?;
        let mut ring = TokenKeyRing::load_with(&data_dir, passphrase.as_deref(), &pkcs11)?;
        if ring.is_empty() {
            let key = create_first_key(&data_dir, passphrase.as_deref(), cfg, None)?;
            tracing::info!(kid = key.kid(), "created the first token-signing key");
            ring = ring.reload_with(&data_dir, passphrase.as_deref(), &pkcs11)?;
        }
        Ok(TokenService {
            ring: RwLock::new(Arc::new(ring)),
            data_dir,
            passphrase,
            pkcs11,
            issuer: issuer(cfg, hierarchy),
        })
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The keys in use now, as last (re)loaded.
    pub fn ring(&self) -> Arc<TokenKeyRing> {
        Arc::clone(&self.ring.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// The key that signs now.
    pub fn signing_key(&self, now: i64) -> Result<Arc<TokenKey>, ApiError> {
        self.ring()
            .current(now)
            .cloned()
            .ok_or_else(|| internal("no token-signing key is active"))
    }

    /// Checks each published key a PKCS#11 token holds by signing with it
    /// (readiness); keys in memory always pass.
    pub fn check_keys(&self) -> Result<(), warrant_ca::CaError> {
        let ring = self.ring();
        for key in ring.published(unix_now()) {
            if key.key_uri().is_some() {
                key.sign(b"warrant key check")?;
            }
        }
        Ok(())
    }

    /// Re-reads `ca/tokens/`, reading only key files it does not hold yet.
    /// On failure the keys already held stay in use.
    pub fn reload(&self) -> Result<(), warrant_ca::CaError> {
        let ring =
            self.ring()
                .reload_with(&self.data_dir, self.passphrase.as_deref(), &self.pkcs11)?;
        if ring.is_empty() {
            return Ok(());
        }
        *self.ring.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(ring);
        Ok(())
    }

    /// The JWK Set published at `now` (`GET /.well-known/jwks.json`).
    pub fn jwks(&self, now: i64) -> Result<Value, ApiError> {
        let ring = self.ring();
        let keys = ring
            .published(now)
            .into_iter()
            .map(|k| {
                aic::jwt::public_jwk(
                    k.spki_der(),
                    Some(k.kid()),
                    Some(k.alg().name()),
                    Some("sig"),
                )
                .map(Value::Object)
                .map_err(|e| internal(format!("token key {}: {e}", k.kid())))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(serde_json::json!({ "keys": keys }))
    }

    /// Re-reads the keys every `token.key_reload_interval` until `stop`.
    pub fn spawn_reloader(
        self: Arc<Self>,
        every: std::time::Duration,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        crate::periodic::every(every, stop, move || {
            let svc = Arc::clone(&self);
            async move {
                let reloaded = tokio::task::spawn_blocking(move || svc.reload())
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()));
                if let Err(error) = reloaded {
                    tracing::warn!(%error, "re-reading the token keys failed");
                }
            }
        })
    }
}

/// The data dir's first token-signing key (`token.algorithm`), signing
/// from now: made by `warrant init` (in a PKCS#11 token when `in_token`
/// names one, or the key it names), or by `serve` on a data dir made before
/// token keys existed.
pub fn create_first_key(
    data_dir: &std::path::Path,
    passphrase: Option<&str>,
    cfg: &Config,
    in_token: Option<(&warrant_ca::Pkcs11Uri, &warrant_ca::Pkcs11Access)>,
) -> Result<Arc<TokenKey>, StartError> {
    // Validated at load: an unknown name cannot reach here.
    let alg = TokenAlgorithm::from_name(&cfg.token.algorithm).unwrap_or_default();
    Ok(match in_token {
        Some((uri, access)) => {
            TokenKeyRing::create_key_in_token(data_dir, uri, access, alg, unix_now())?
        }
        None => TokenKeyRing::create_key(data_dir, passphrase, alg, unix_now())?,
    })
}

/// `token.issuer`; else the public base URL (`ocsp.base_url`); else a name
/// of this hierarchy that no other hierarchy shares: its root key's id.
fn issuer(cfg: &Config, hierarchy: &Hierarchy) -> String {
    let configured = cfg.token.issuer.trim();
    if !configured.is_empty() {
        return configured.to_string();
    }
    let base = cfg.ocsp.base_url.trim().trim_end_matches('/');
    if !base.is_empty() {
        return base.to_string();
    }
    format!("urn:warrant:{}", hex::encode(hierarchy.root().ski()))
}
