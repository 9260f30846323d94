//! The keys that sign AIC-JWTs, kept beside the CA keys and stored like them
//! (PKCS#8 PEM, mode 0600, encrypted with the CA passphrase when one is set).
//!
//! ```text
//! ca/tokens/<activates_at>.key.pem
//! ca/tokens/<activates_at>.key.uri   (a key in a PKCS#11 token: its URI)
//! ```
//!
//! A key's file name is the Unix time from which it signs. At any moment
//! the signing key is the one with the latest activation time not in the
//! future. A rotation adds a key that activates later, so relying parties
//! can fetch it from the JWKS before the first token it signs reaches them;
//! a key stays published until every token it can have signed has expired.
//! Keys are never rewritten: the directory is the whole state, and nodes
//! that share it (or a copy of it) agree on which key signs when.

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self, EcdsaKeyPair, KeyPair};
use zeroize::Zeroizing;

use crate::error::{CaError, Result};
use crate::hierarchy::{passphrase_of, read_pkcs8, write_key, write_new};
use crate::keys::PublicKeyKind;
use crate::pkcs11::{Pkcs11Access, Pkcs11Key, Pkcs11Uri};

/// The longest an AIC-JWT may live (draft-wei-aic-jwt-02: `exp − iat ≤
/// requested_lifetime ≤ 86400`), so how long a superseded key must stay
/// published, whatever the configuration was when it signed.
pub const MAX_TOKEN_LIFETIME_SECS: i64 = 86_400;

/// JWS algorithms a token key may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenAlgorithm {
    #[default]
    Es256,
    Es384,
}

impl TokenAlgorithm {
    /// The JWS `alg` name.
    pub fn name(self) -> &'static str {
        match self {
            TokenAlgorithm::Es256 => "ES256",
            TokenAlgorithm::Es384 => "ES384",
        }
    }

    pub fn from_name(name: &str) -> Option<TokenAlgorithm> {
        match name {
            "ES256" => Some(TokenAlgorithm::Es256),
            "ES384" => Some(TokenAlgorithm::Es384),
            _ => None,
        }
    }

    /// JWS signatures are the fixed-size `r ‖ s`, not DER.
    fn signing(self) -> &'static signature::EcdsaSigningAlgorithm {
        match self {
            TokenAlgorithm::Es256 => &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            TokenAlgorithm::Es384 => &signature::ECDSA_P384_SHA384_FIXED_SIGNING,
        }
    }
}

/// One token-signing key, parsed once and shared by every request thread.
pub struct TokenKey {
    alg: TokenAlgorithm,
    key: SigningKey,
    spki_der: Vec<u8>,
    kid: String,
    activates_at: i64,
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenKey")
            .field("alg", &self.alg)
            .field("kid", &self.kid)
            .field("activates_at", &self.activates_at)
            .finish_non_exhaustive()
    }
}

enum SigningKey {
    Memory(EcdsaKeyPair, SystemRandom),
    Token(Box<Pkcs11Key>),
}

impl TokenKey {
    fn from_token(key: Pkcs11Key, activates_at: i64) -> std::result::Result<TokenKey, String> {
        let alg = match key.kind() {
            PublicKeyKind::EcdsaP256 => TokenAlgorithm::Es256,
            PublicKeyKind::EcdsaP384 => TokenAlgorithm::Es384,
            other => return Err(format!("a token key is P-256 or P-384, not {other:?}")),
        };
        let spki_der = key.spki_der().to_vec();
        Ok(TokenKey {
            alg,
            key: SigningKey::Token(Box::new(key)),
            kid: key_id(&spki_der),
            spki_der,
            activates_at,
        })
    }

    /// The PKCS#11 URI of the key, when a token holds it.
    pub fn key_uri(&self) -> Option<String> {
        match &self.key {
            SigningKey::Memory(..) => None,
            SigningKey::Token(k) => Some(k.uri().to_string()),
        }
    }

    fn from_pkcs8(pkcs8: &[u8], activates_at: i64) -> std::result::Result<TokenKey, String> {
        for alg in [TokenAlgorithm::Es256, TokenAlgorithm::Es384] {
            if let Ok(key) = EcdsaKeyPair::from_pkcs8(alg.signing(), pkcs8) {
                let spki_der = key
                    .public_key()
                    .as_der()
                    .map_err(|e| e.to_string())?
                    .as_ref()
                    .to_vec();
                return Ok(TokenKey {
                    alg,
                    key: SigningKey::Memory(key, SystemRandom::new()),
                    kid: key_id(&spki_der),
                    spki_der,
                    activates_at,
                });
            }
        }
        Err("not an ECDSA P-256 or P-384 PKCS#8 key".into())
    }

    pub fn alg(&self) -> TokenAlgorithm {
        self.alg
    }

    /// `base64url(SHA-256(SPKI DER))`.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    pub fn spki_der(&self) -> &[u8] {
        &self.spki_der
    }

    /// Unix time from which this key signs.
    pub fn activates_at(&self) -> i64 {
        self.activates_at
    }

    /// The JWS signature over `signing_input`.
    pub fn sign(&self, signing_input: &[u8]) -> Result<Vec<u8>> {
        match &self.key {
            SigningKey::Memory(key, rng) => key
                .sign(rng, signing_input)
                .map(|s| s.as_ref().to_vec())
                .map_err(CaError::internal),
            SigningKey::Token(k) => k.sign_fixed(signing_input),
        }
    }
}

/// `base64url(SHA-256(SPKI DER))`, unpadded.
pub fn key_id(spki_der: &[u8]) -> String {
    use base64::Engine;
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, spki_der);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest.as_ref())
}

/// Every token key in a data dir, oldest activation first.
#[derive(Debug, Clone, Default)]
pub struct TokenKeyRing {
    keys: Vec<Arc<TokenKey>>,
}

fn token_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("ca").join("tokens")
}

fn key_file(data_dir: &Path, activates_at: i64) -> PathBuf {
    token_dir(data_dir).join(format!("{activates_at}.key.pem"))
}

fn key_uri_file(data_dir: &Path, activates_at: i64) -> PathBuf {
    token_dir(data_dir).join(format!("{activates_at}.key.uri"))
}

/// The label of a JWT key generated in a PKCS#11 token.
fn token_label(activates_at: i64) -> String {
    format!("warrant-jwt-{activates_at}")
}

impl TokenKeyRing {
    /// Reads every key under `ca/tokens/`. A missing directory is an empty
    /// ring; an unreadable key is an error (never skipped: a node that
    /// silently lacked a key would sign with an older one).
    pub fn load(data_dir: &Path, passphrase: Option<&str>) -> Result<TokenKeyRing> {
        TokenKeyRing::default().reload(data_dir, passphrase)
    }

    /// `load`, with the PIN and module for keys kept in a PKCS#11 token.
    pub fn load_with(
        data_dir: &Path,
        passphrase: Option<&str>,
        pkcs11: &Pkcs11Access,
    ) -> Result<TokenKeyRing> {
        TokenKeyRing::default().reload_with(data_dir, passphrase, pkcs11)
    }

    /// The ring as `ca/tokens/` holds it now. Key files are never rewritten,
    /// so a key this ring already holds (same activation time) is kept as it
    /// is and only new files are read and decrypted: with a passphrase, each
    /// read costs a PBKDF2 derivation, which a periodic re-read must not pay
    /// for every key every time.
    pub fn reload(&self, data_dir: &Path, passphrase: Option<&str>) -> Result<TokenKeyRing> {
        self.reload_with(data_dir, passphrase, &Pkcs11Access::default())
    }

    /// `reload`, with the PIN and module for keys kept in a PKCS#11 token.
    pub fn reload_with(
        &self,
        data_dir: &Path,
        passphrase: Option<&str>,
        pkcs11: &Pkcs11Access,
    ) -> Result<TokenKeyRing> {
        let dir = token_dir(data_dir);
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(TokenKeyRing::default());
            }
            Err(e) => return Err(CaError::io(&dir, e)),
        };
        let mut keys = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| CaError::io(&dir, e))?;
            let name = entry.file_name();
            let Some((stem, in_token)) = name.to_str().and_then(|n| {
                n.strip_suffix(".key.pem")
                    .map(|s| (s, false))
                    .or_else(|| n.strip_suffix(".key.uri").map(|s| (s, true)))
            }) else {
                continue;
            };
            let Ok(activates_at) = stem.parse::<i64>() else {
                continue;
            };
            if let Some(held) = self.keys.iter().find(|k| k.activates_at == activates_at) {
                keys.push(Arc::clone(held));
                continue;
            }
            let path = entry.path();
            let key = if in_token {
                let text = fs::read_to_string(&path).map_err(|e| CaError::io(&path, e))?;
                let uri = Pkcs11Uri::parse(text.trim()).map_err(|e| CaError::BadKeyFile {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
                TokenKey::from_token(Pkcs11Key::open(&uri, pkcs11)?, activates_at)
            } else {
                let pkcs8 = read_pkcs8(&path, passphrase_of(passphrase))?;
                TokenKey::from_pkcs8(&pkcs8, activates_at)
            }
            .map_err(|reason| CaError::BadKeyFile { path, reason })?;
            if keys
                .iter()
                .any(|k: &Arc<TokenKey>| k.activates_at == activates_at)
            {
                return Err(CaError::BadKeyFile {
                    path: entry.path(),
                    reason: format!("two token keys activate at {activates_at}"),
                });
            }
            keys.push(Arc::new(key));
        }
        keys.sort_by_key(|k| k.activates_at);
        Ok(TokenKeyRing { keys })
    }

    /// Generates a key that signs from `activates_at` and writes it to the
    /// data dir. Two keys cannot share an activation time.
    pub fn create_key(
        data_dir: &Path,
        passphrase: Option<&str>,
        alg: TokenAlgorithm,
        activates_at: i64,
    ) -> Result<Arc<TokenKey>> {
        let dir = token_dir(data_dir);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| CaError::io(&dir, e))?;
        check_free(data_dir, activates_at)?;
        let kp = EcdsaKeyPair::generate(alg.signing()).map_err(CaError::internal)?;
        let pkcs8 = Zeroizing::new(
            kp.to_pkcs8v1()
                .map_err(CaError::internal)?
                .as_ref()
                .to_vec(),
        );
        let path = key_file(data_dir, activates_at);
        write_key(&path, &pkcs8, passphrase_of(passphrase))?;
        let key = TokenKey::from_pkcs8(&pkcs8, activates_at)
            .map_err(|reason| CaError::BadKeyFile { path, reason })?;
        Ok(Arc::new(key))
    }

    /// Like `create_key`, with the key in the PKCS#11 token `token`
    /// names (labelled `warrant-jwt-<activates_at>`), or the existing key
    /// `token` names when it names one. The data dir records its URI.
    pub fn create_key_in_token(
        data_dir: &Path,
        token: &Pkcs11Uri,
        access: &Pkcs11Access,
        alg: TokenAlgorithm,
        activates_at: i64,
    ) -> Result<Arc<TokenKey>> {
        let dir = token_dir(data_dir);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| CaError::io(&dir, e))?;
        check_free(data_dir, activates_at)?;
        let kind = match alg {
            TokenAlgorithm::Es256 => PublicKeyKind::EcdsaP256,
            TokenAlgorithm::Es384 => PublicKeyKind::EcdsaP384,
        };
        let (key, uri) = if token.names_object() {
            (Pkcs11Key::open(token, access)?, token.clone())
        } else {
            Pkcs11Key::generate(token, &token_label(activates_at), kind, access)?
        };
        if key.kind() != kind {
            return Err(CaError::KeyUnavailable {
                key: uri.to_string(),
                reason: format!("{} needs a {kind:?} key, not {:?}", alg.name(), key.kind()),
            });
        }
        let path = key_uri_file(data_dir, activates_at);
        write_new(&path, format!("{uri}\n").as_bytes(), 0o600)?;
        let key = TokenKey::from_token(key, activates_at)
            .map_err(|reason| CaError::BadKeyFile { path, reason })?;
        Ok(Arc::new(key))
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn keys(&self) -> &[Arc<TokenKey>] {
        &self.keys
    }

    /// The key that signs at `now`: the latest activated one.
    pub fn current(&self, now: i64) -> Option<&Arc<TokenKey>> {
        self.keys.iter().rev().find(|k| k.activates_at <= now)
    }

    /// The keys a JWKS publishes at `now`: those not yet active (so relying
    /// parties learn them before they sign), the current one, and those
    /// superseded less than [`MAX_TOKEN_LIFETIME_SECS`] ago (tokens they
    /// signed may still be live).
    pub fn published(&self, now: i64) -> Vec<&Arc<TokenKey>> {
        self.keys
            .iter()
            .enumerate()
            .filter(|(i, _)| match self.keys.get(i + 1) {
                // Superseded when the next key activated.
                Some(next) if next.activates_at <= now => {
                    now < next.activates_at + MAX_TOKEN_LIFETIME_SECS
                }
                _ => true,
            })
            .map(|(_, k)| k)
            .rev()
            .collect()
    }

    /// When the key activating at `activates_at` stops being published:
    /// [`MAX_TOKEN_LIFETIME_SECS`] after the next key activates. `None` for
    /// the newest key (nothing supersedes it yet) or an unknown one.
    pub fn retires_at(&self, activates_at: i64) -> Option<i64> {
        let i = self
            .keys
            .iter()
            .position(|k| k.activates_at == activates_at)?;
        self.keys
            .get(i + 1)
            .map(|next| next.activates_at + MAX_TOKEN_LIFETIME_SECS)
    }

    /// Deletes the files of keys no longer published at `now`; returns how
    /// many. Never deletes the current key or a later one.
    pub fn prune_files(&self, data_dir: &Path, now: i64) -> Result<usize> {
        let published: Vec<i64> = self.published(now).iter().map(|k| k.activates_at).collect();
        let mut removed = 0;
        for k in &self.keys {
            if !published.contains(&k.activates_at) {
                // A key in a token stays there: only its URI file goes.
                // Destroying the object is the token operator's decision.
                let path = if k.key_uri().is_some() {
                    key_uri_file(data_dir, k.activates_at)
                } else {
                    key_file(data_dir, k.activates_at)
                };
                fs::remove_file(&path).map_err(|e| CaError::io(&path, e))?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// Two keys cannot share an activation time.
fn check_free(data_dir: &Path, activates_at: i64) -> Result<()> {
    if key_file(data_dir, activates_at).exists() || key_uri_file(data_dir, activates_at).exists() {
        return Err(CaError::field(
            "activates_at",
            format!("a token key activating at {activates_at} already exists"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring_at(times: &[i64]) -> (tempfile::TempDir, TokenKeyRing) {
        let dir = tempfile::tempdir().unwrap();
        for t in times {
            TokenKeyRing::create_key(dir.path(), None, TokenAlgorithm::Es256, *t).unwrap();
        }
        let ring = TokenKeyRing::load(dir.path(), None).unwrap();
        (dir, ring)
    }

    #[test]
    fn the_latest_activated_key_signs() {
        let (_d, ring) = ring_at(&[100, 200, 300]);
        assert_eq!(ring.current(99).map(|k| k.activates_at()), None);
        assert_eq!(ring.current(100).unwrap().activates_at(), 100);
        assert_eq!(ring.current(299).unwrap().activates_at(), 200);
        assert_eq!(ring.current(10_000).unwrap().activates_at(), 300);
    }

    #[test]
    fn superseded_keys_stay_published_for_the_longest_token_lifetime() {
        let (_d, ring) = ring_at(&[100, 200, 300]);
        let at = |now: i64| -> Vec<i64> {
            ring.published(now)
                .iter()
                .map(|k| k.activates_at())
                .collect()
        };
        // Before 200 activates, 200 and 300 are already published.
        assert_eq!(at(150), vec![300, 200, 100]);
        assert_eq!(at(250), vec![300, 200, 100]);
        // 100 was superseded at 200: gone once a day has passed since.
        assert_eq!(at(200 + MAX_TOKEN_LIFETIME_SECS - 1), vec![300, 200, 100]);
        assert_eq!(at(200 + MAX_TOKEN_LIFETIME_SECS), vec![300, 200]);
        assert_eq!(at(300 + MAX_TOKEN_LIFETIME_SECS), vec![300]);
    }

    #[test]
    fn a_key_signs_verifiably_and_its_kid_names_its_spki() {
        let (_d, ring) = ring_at(&[1]);
        let k = ring.current(1).unwrap();
        let sig = k.sign(b"input").unwrap();
        assert_eq!(sig.len(), 64);
        let spki = spki::SubjectPublicKeyInfoRef::try_from(k.spki_der()).unwrap();
        signature::UnparsedPublicKey::new(
            &signature::ECDSA_P256_SHA256_FIXED,
            spki.subject_public_key.raw_bytes(),
        )
        .verify(b"input", &sig)
        .unwrap();
        assert_eq!(k.kid(), key_id(k.spki_der()));
        assert_eq!(k.kid().len(), 43);
    }

    #[test]
    fn pruning_removes_only_unpublished_key_files() {
        let (d, ring) = ring_at(&[100, 200]);
        assert_eq!(ring.prune_files(d.path(), 150).unwrap(), 0);
        assert_eq!(
            ring.prune_files(d.path(), 200 + MAX_TOKEN_LIFETIME_SECS)
                .unwrap(),
            1
        );
        let left = TokenKeyRing::load(d.path(), None).unwrap();
        assert_eq!(left.keys().len(), 1);
        assert_eq!(left.keys()[0].activates_at(), 200);
    }

    #[test]
    fn encrypted_keys_need_the_passphrase() {
        let dir = tempfile::tempdir().unwrap();
        TokenKeyRing::create_key(dir.path(), Some("pw"), TokenAlgorithm::Es384, 5).unwrap();
        assert!(matches!(
            TokenKeyRing::load(dir.path(), None),
            Err(CaError::PassphraseRequired(_))
        ));
        let ring = TokenKeyRing::load(dir.path(), Some("pw")).unwrap();
        assert_eq!(ring.current(5).unwrap().alg(), TokenAlgorithm::Es384);
    }

    #[test]
    fn a_reload_keeps_the_keys_it_holds_and_reads_new_and_removed_files() {
        let (d, ring) = ring_at(&[100, 200]);
        TokenKeyRing::create_key(d.path(), None, TokenAlgorithm::Es256, 300).unwrap();
        std::fs::remove_file(key_file(d.path(), 100)).unwrap();
        let again = ring.reload(d.path(), None).unwrap();
        let times: Vec<i64> = again.keys().iter().map(|k| k.activates_at()).collect();
        assert_eq!(times, vec![200, 300]);
        // The held key is the same parsed key, not a second read of its file.
        assert!(Arc::ptr_eq(&again.keys()[0], &ring.keys()[1]));
    }

    #[test]
    fn rejects_a_second_key_with_the_same_activation_time() {
        let (d, _) = ring_at(&[100]);
        let err = TokenKeyRing::create_key(d.path(), None, TokenAlgorithm::Es256, 100).unwrap_err();
        assert_eq!(err.invalid_field(), Some("activates_at"));
    }
}
