//! Authentication and authorisation.
//!
//! Passwords are Argon2id and checked only at login: Argon2 is deliberately
//! slow, so running it per request would cap the issuance rate. API tokens are
//! 32 random bytes; only their SHA-256 is kept (in the database and in the
//! in-memory map every request is resolved from), so neither a DB dump nor a
//! heap dump yields a usable token.
//!
//! Several nodes share one database, so the map is a cache of the tables:
//! a token it does not hold is looked up by hash ([`Resolution::Unknown`],
//! read-through), and every node applies the change feed
//! (`warrant_auth_changes`, `state::spawn_auth_sync`) to learn what other
//! nodes created, changed or deleted.

use crate::error::{ApiError, ErrorKey, internal};
use aic::crypto::sha256;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Admin,
    Operator,
    Auditor,
    /// Issues agent certificates only: the role of the token a
    /// `warrant agent` posts its DAs with. Every DA still needs the
    /// person's signature, so a stolen issuer token issues nothing alone.
    Issuer,
    /// Not a user role: the identity of a caller who presents a person
    /// certificate over mTLS without a matching user. It may only ask for
    /// agent certificates delegated by that very certificate.
    CertificateHolder,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Permission {
    CertIssue,
    CertRevoke,
    CertRead,
    UserAdmin,
    /// Manage one's own API tokens.
    TokenSelf,
    /// Read the audit log.
    LogRead,
}

impl Role {
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "admin" => Some(Role::Admin),
            "operator" => Some(Role::Operator),
            "auditor" => Some(Role::Auditor),
            "issuer" => Some(Role::Issuer),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Auditor => "auditor",
            Role::Issuer => "issuer",
            Role::CertificateHolder => "certificate",
        }
    }

    /// The permission table. Auditors read certificates and the audit log;
    /// operators issue and revoke; issuers only ask for agent certificates;
    /// admins do everything.
    pub fn allows(self, p: Permission) -> bool {
        use Permission::*;
        match self {
            Role::Admin => true,
            Role::Operator => matches!(p, CertIssue | CertRevoke | CertRead | TokenSelf),
            Role::Auditor => matches!(p, CertRead | TokenSelf | LogRead),
            Role::Issuer => matches!(p, CertIssue | TokenSelf),
            Role::CertificateHolder => matches!(p, CertIssue),
        }
    }
}

/// How the caller proved who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthMethod {
    Token { token_id: String },
    ClientCert,
}

/// The authenticated caller, attached to each request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub user_id: String,
    pub username: String,
    pub role: Role,
    pub method: AuthMethod,
    /// The caller's mTLS leaf, when it came over the TLS listener with one.
    pub client_cert_der: Option<Vec<u8>>,
}

impl Caller {
    pub fn require(&self, p: Permission) -> Result<(), ApiError> {
        if self.role.allows(p) {
            Ok(())
        } else {
            Err(ApiError::detail(
                ErrorKey::Forbidden,
                format!("role {} lacks {}", self.role.as_str(), permission_name(p)),
            ))
        }
    }
}

pub fn permission_name(p: Permission) -> &'static str {
    match p {
        Permission::CertIssue => "cert:issue",
        Permission::CertRevoke => "cert:revoke",
        Permission::CertRead => "cert:read",
        Permission::UserAdmin => "user:admin",
        Permission::TokenSelf => "token:self",
        Permission::LogRead => "log:read",
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserEntry {
    pub id: String,
    pub username: String,
    pub role: Role,
    /// PHC string (`$argon2id$…`).
    pub password_hash: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenEntry {
    pub id: String,
    pub user_id: String,
    pub name: String,
    pub hash: [u8; 32],
    /// Unix seconds.
    pub expires_at: i64,
    /// Spent by its first request (the bootstrap token): the database delete
    /// decides which request that is.
    pub one_time: bool,
}

/// What a presented token resolves to from memory.
#[derive(Debug)]
pub enum Resolution {
    /// A valid token.
    Caller(Caller),
    /// A valid one-time token: the caller may proceed only if its delete of
    /// the row removes it.
    OneTime { caller: Caller, token_id: String },
    /// Well-formed but not in memory: it may have been created on another
    /// node; look it up by hash.
    Unknown { hash: [u8; 32] },
    /// Not a token, expired, its user gone, or recently looked up and absent.
    Refused,
}

/// How long a hash looked up and not found is answered 401 without asking
/// the database again. Below the 2 s within which a token created on any
/// node must work everywhere; and a token this node learns of (from the
/// change feed or by minting it) clears its entry at once.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(1);
/// Most hashes remembered as absent; when full of live entries, new misses
/// are not remembered (they still cost one bounded lookup each).
pub const NEGATIVE_MAX: usize = 4096;
/// Most database lookups of unknown tokens in flight per node: a flood of
/// random tokens takes at most this many connections; beyond it the
/// request is answered 503 at once.
pub const MAX_TOKEN_LOOKUPS: usize = 4;

/// Unknown hashes recently looked up, with when each entry lapses.
#[derive(Default)]
struct NegativeCache {
    until: HashMap<[u8; 32], Instant>,
}

impl NegativeCache {
    fn contains(&self, hash: &[u8; 32], now: Instant) -> bool {
        self.until.get(hash).is_some_and(|t| *t > now)
    }

    fn insert(&mut self, hash: [u8; 32], now: Instant) {
        if self.until.len() >= NEGATIVE_MAX {
            self.until.retain(|_, t| *t > now);
            if self.until.len() >= NEGATIVE_MAX {
                return;
            }
        }
        self.until.insert(hash, now + NEGATIVE_TTL);
    }
}

/// Holds one of the [`MAX_TOKEN_LOOKUPS`] lookup slots.
pub struct LookupSlot<'a>(&'a AtomicUsize);

impl Drop for LookupSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Default)]
struct Inner {
    users: HashMap<String, UserEntry>,
    user_ids_by_name: HashMap<String, String>,
    tokens: HashMap<[u8; 32], TokenEntry>,
}

/// The in-memory view of users and tokens; the store is written first and
/// this map second, so a request never sees a token the DB does not have.
#[derive(Default)]
pub struct AuthIndex {
    inner: RwLock<Inner>,
    negative: Mutex<NegativeCache>,
    /// Bumped (under the write lock) by every change but a read-through
    /// insert. A read-through result is cached only if no change was applied
    /// since its lookup began: otherwise a row read before a delete could be
    /// cached after the delete was applied, and outlive it.
    epoch: AtomicU64,
    lookups: AtomicUsize,
    /// The last change-feed number applied.
    feed_seq: AtomicI64,
}

impl AuthIndex {
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The write lock, counted as a change (see `epoch`).
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        let g = self.inner.write().unwrap_or_else(|e| e.into_inner());
        self.epoch.fetch_add(1, Ordering::AcqRel);
        g
    }

    fn negative(&self) -> std::sync::MutexGuard<'_, NegativeCache> {
        self.negative.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn upsert_user(&self, user: UserEntry) {
        upsert_user_in(&mut self.write(), user);
    }

    pub fn remove_user(&self, id: &str) {
        remove_user_in(&mut self.write(), id);
    }

    /// Applies a user row as the database has it now: `None` (deleted)
    /// drops the user and its tokens; otherwise the user and exactly
    /// `tokens` (its unexpired tokens) replace what was held.
    pub fn apply_user(&self, id: &str, row: Option<(UserEntry, Vec<TokenEntry>)>) {
        let mut g = self.write();
        match row {
            None => remove_user_in(&mut g, id),
            Some((user, tokens)) => {
                if let Some(old) = g.users.get(id).map(|u| u.username.clone())
                    && old != user.username
                {
                    g.user_ids_by_name.remove(&old);
                }
                upsert_user_in(&mut g, user);
                g.tokens.retain(|_, t| t.user_id != id);
                let mut neg = self.negative();
                for t in tokens {
                    neg.until.remove(&t.hash);
                    g.tokens.insert(t.hash, t);
                }
            }
        }
    }

    /// Applies a token row as the database has it now (`None`: deleted or
    /// expired).
    pub fn apply_token(&self, id: &str, row: Option<TokenEntry>) {
        match row {
            Some(t) => self.insert_token(t),
            None => {
                self.remove_token(id);
            }
        }
    }

    /// Replaces everything with a full load of the tables.
    pub fn replace_all(&self, users: Vec<UserEntry>, tokens: Vec<TokenEntry>) {
        let mut g = self.write();
        g.users.clear();
        g.user_ids_by_name.clear();
        g.tokens.clear();
        for u in users {
            upsert_user_in(&mut g, u);
        }
        for t in tokens {
            g.tokens.insert(t.hash, t);
        }
        self.negative().until.clear();
    }

    /// Drops tokens with `expires_at <= now` and lapsed negative entries;
    /// returns how many tokens were dropped.
    pub fn prune_expired(&self, now: i64) -> usize {
        let before = self.read().tokens.len();
        let dropped = {
            let mut g = self.write();
            g.tokens.retain(|_, t| t.expires_at > now);
            before.saturating_sub(g.tokens.len())
        };
        let at = Instant::now();
        self.negative().until.retain(|_, t| *t > at);
        dropped
    }

    /// The change counter a read-through lookup starts from.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Caches a token found by a read-through lookup (and its user, unless
    /// one is held already) if nothing changed since `epoch`; `false` if it
    /// was not cached.
    pub fn cache_if_unchanged(&self, epoch: u64, token: TokenEntry, user: UserEntry) -> bool {
        let mut g = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if self.epoch.load(Ordering::Acquire) != epoch {
            return false;
        }
        if !g.users.contains_key(&user.id) {
            upsert_user_in(&mut g, user);
        }
        g.tokens.insert(token.hash, token);
        true
    }

    /// Remembers a hash the database does not hold (see [`NEGATIVE_TTL`]).
    pub fn remember_missing(&self, hash: [u8; 32]) {
        self.negative().insert(hash, Instant::now());
    }

    /// One of the [`MAX_TOKEN_LOOKUPS`] slots, or `None` when all are taken.
    pub fn lookup_slot(&self) -> Option<LookupSlot<'_>> {
        let prev = self.lookups.fetch_add(1, Ordering::AcqRel);
        let slot = LookupSlot(&self.lookups);
        (prev < MAX_TOKEN_LOOKUPS).then_some(slot)
    }

    pub fn feed_seq(&self) -> i64 {
        self.feed_seq.load(Ordering::Acquire)
    }

    pub fn set_feed_seq(&self, seq: i64) {
        self.feed_seq.store(seq, Ordering::Release);
    }

    pub fn user(&self, id: &str) -> Option<UserEntry> {
        self.read().users.get(id).cloned()
    }

    pub fn user_by_name(&self, name: &str) -> Option<UserEntry> {
        let g = self.read();
        g.user_ids_by_name
            .get(name)
            .and_then(|id| g.users.get(id))
            .cloned()
    }

    pub fn users(&self) -> Vec<UserEntry> {
        let mut v: Vec<_> = self.read().users.values().cloned().collect();
        v.sort_by(|a, b| a.username.cmp(&b.username));
        v
    }

    pub fn insert_token(&self, token: TokenEntry) {
        // A negative entry must not hide a token this node knows of.
        self.negative().until.remove(&token.hash);
        self.write().tokens.insert(token.hash, token);
    }

    pub fn remove_token(&self, id: &str) -> Option<TokenEntry> {
        let mut g = self.write();
        let hash = g.tokens.values().find(|t| t.id == id).map(|t| t.hash)?;
        g.tokens.remove(&hash)
    }

    pub fn token_by_id(&self, id: &str) -> Option<TokenEntry> {
        self.read().tokens.values().find(|t| t.id == id).cloned()
    }

    pub fn tokens_of(&self, user_id: Option<&str>) -> Vec<TokenEntry> {
        let mut v: Vec<_> = self
            .read()
            .tokens
            .values()
            .filter(|t| user_id.is_none_or(|u| t.user_id == u))
            .cloned()
            .collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }

    /// Resolves a presented token from memory. No allocation beyond the
    /// caller's fields on a hit; a miss never takes the write lock.
    pub fn resolve_token(&self, presented: &str, now: i64) -> Resolution {
        let Some(hash) = hash_token(presented.trim()) else {
            return Resolution::Refused;
        };
        let g = self.read();
        let Some(token) = g.tokens.get(&hash) else {
            drop(g);
            return if self.negative().contains(&hash, Instant::now()) {
                Resolution::Refused
            } else {
                Resolution::Unknown { hash }
            };
        };
        // The map lookup already matched; the explicit constant-time compare
        // keeps the decision itself free of data-dependent early exits.
        if !bool::from(token.hash.ct_eq(&hash)) || token.expires_at <= now {
            return Resolution::Refused;
        }
        let Some(user) = g.users.get(&token.user_id) else {
            return Resolution::Refused;
        };
        let caller = caller_for(user, token);
        if token.one_time {
            Resolution::OneTime {
                caller,
                token_id: token.id.clone(),
            }
        } else {
            Resolution::Caller(caller)
        }
    }
}

fn upsert_user_in(g: &mut Inner, user: UserEntry) {
    g.user_ids_by_name
        .insert(user.username.clone(), user.id.clone());
    g.users.insert(user.id.clone(), user);
}

fn remove_user_in(g: &mut Inner, id: &str) {
    if let Some(u) = g.users.remove(id) {
        g.user_ids_by_name.remove(&u.username);
    }
    g.tokens.retain(|_, t| t.user_id != id);
}

/// The caller a valid token of `user` authenticates.
pub fn caller_for(user: &UserEntry, token: &TokenEntry) -> Caller {
    Caller {
        user_id: user.id.clone(),
        username: user.username.clone(),
        role: user.role,
        method: AuthMethod::Token {
            token_id: token.id.clone(),
        },
        client_cert_der: None,
    }
}

/// The lifetime of a new token, seconds: `requested` (`expires_in`) or
/// `default`, never above `max` (`auth.token_max_lifetime`). A request above
/// the cap is refused rather than silently shortened, so a client never holds
/// a token that dies earlier than it asked for without knowing.
pub fn token_ttl(requested: Option<u64>, default: u64, max: u64) -> Result<u64, ApiError> {
    match requested {
        None => Ok(default.min(max)),
        Some(0) => Err(ApiError::field("expires_in", "must be positive")),
        Some(s) if s > max => Err(ApiError::field(
            "expires_in",
            format!("{s} s exceeds auth.token_max_lifetime ({max} s)"),
        )),
        Some(s) => Ok(s),
    }
}

/// A fresh token: 32 CSPRNG bytes as 64 lower-case hex digits, plus its hash.
pub fn new_token() -> Result<(String, [u8; 32]), ApiError> {
    let mut raw = [0u8; 32];
    aws_lc_rs::rand::fill(&mut raw).map_err(|_| internal("CSPRNG failure"))?;
    let text = hex::encode(raw);
    let hash = sha256(text.as_bytes());
    Ok((text, hash))
}

/// SHA-256 of the token text as presented; `None` for text that cannot be a
/// token, so garbage never reaches the map.
pub fn hash_token(presented: &str) -> Option<[u8; 32]> {
    if presented.len() != 64 || !presented.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(sha256(presented.to_ascii_lowercase().as_bytes()))
}

/// The Argon2id cost of every password hashed from now on: OWASP's minimum
/// for Argon2id (m = 19 MiB, t = 2, p = 1), written out rather than taken
/// from the crate's defaults so that a dependency update cannot weaken it.
/// Each hash or verification holds `m` of memory for about as long as it
/// runs, which is why logins go through a bounded verifier pool
/// ([`crate::login::LoginGate`]). Stored hashes carry their own parameters
/// in the PHC string and keep verifying with those if these change.
pub const ARGON2_M_COST_KIB: u32 = 19 * 1024;
pub const ARGON2_T_COST: u32 = 2;
pub const ARGON2_P_COST: u32 = 1;

fn argon2_hasher() -> Result<argon2::Argon2<'static>, ApiError> {
    let params = argon2::Params::new(ARGON2_M_COST_KIB, ARGON2_T_COST, ARGON2_P_COST, None)
        .map_err(|e| internal(format!("argon2 parameters: {e}")))?;
    Ok(argon2::Argon2::new(
        argon2::Algorithm::Argon2id,
        argon2::Version::V0x13,
        params,
    ))
}

/// Argon2id PHC string with a random salt. CPU-heavy: call off the runtime.
pub fn hash_password(password: &str) -> Result<String, ApiError> {
    use argon2::password_hash::PasswordHasher;
    argon2_hasher()?
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| internal(format!("argon2: {e}")))
}

/// Verifies against a PHC string, with the algorithm, version and costs the
/// string names (not [`ARGON2_M_COST_KIB`] …). CPU-heavy: call off the
/// runtime, through the verifier pool.
pub fn verify_password(password: &str, phc: &str) -> bool {
    use argon2::password_hash::PasswordVerifier;
    use argon2::password_hash::phc::PasswordHash;
    match PasswordHash::new(phc) {
        Ok(parsed) => argon2::Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    }
}

/// A fixed PHC string verified for unknown users, so the response time does
/// not reveal whether a username exists.
pub fn decoy_password_hash() -> &'static str {
    static DECOY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DECOY.get_or_init(|| hash_password("warrant-decoy-password").unwrap_or_default())
}

/// A random password for `warrant init` when none is given: 24 chars base64url.
pub fn generate_password() -> Result<String, ApiError> {
    use base64::Engine;
    let mut raw = [0u8; 18];
    aws_lc_rs::rand::fill(&mut raw).map_err(|_| internal("CSPRNG failure"))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw))
}

/// Where a presented token came from. Only the cookie is attached by a
/// browser on its own, so only it is subject to the CSRF origin check
/// ([`crate::csrf`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    /// `Authorization: Bearer …`
    Bearer,
    /// `X-Auth-Token: …`
    Header,
    /// The `pki_token` cookie that login sets.
    Cookie,
}

/// The name of the session cookie login sets and logout clears.
pub const SESSION_COOKIE: &str = "pki_token";

/// Picks the token from `Authorization: Bearer`, `X-Auth-Token` or the
/// `pki_token` cookie, in that order, borrowed from the headers.
pub fn presented_token(headers: &axum::http::HeaderMap) -> Option<(&str, TokenSource)> {
    use axum::http::header;
    if let Some(v) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let v = v.trim();
        if v.len() > 7 && v[..7].eq_ignore_ascii_case("bearer ") {
            return Some((v[7..].trim(), TokenSource::Bearer));
        }
    }
    if let Some(v) = headers.get("x-auth-token").and_then(|v| v.to_str().ok()) {
        return Some((v.trim(), TokenSource::Header));
    }
    for cookie in headers.get_all(header::COOKIE) {
        let Ok(s) = cookie.to_str() else { continue };
        for pair in s.split(';') {
            if let Some((k, v)) = pair.trim().split_once('=')
                && k == SESSION_COOKIE
            {
                return Some((v.trim(), TokenSource::Cookie));
            }
        }
    }
    None
}

/// `Set-Cookie` for a session: readable by no script (`HttpOnly`), sent on
/// no cross-site request (`SameSite=Strict`), and over TLS only when it was
/// set over TLS (`Secure`). `max_age` 0 clears it.
pub fn session_cookie(token: &str, max_age: u64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{SESSION_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auditor_cannot_issue_or_admin() {
        assert!(Role::Auditor.allows(Permission::CertRead));
        assert!(!Role::Auditor.allows(Permission::CertIssue));
        assert!(!Role::Operator.allows(Permission::UserAdmin));
        assert!(Role::Admin.allows(Permission::UserAdmin));
        assert!(!Role::CertificateHolder.allows(Permission::CertRead));
    }

    #[test]
    fn token_resolves_until_expiry() {
        let idx = AuthIndex::new();
        idx.upsert_user(UserEntry {
            id: "1".into(),
            username: "admin".into(),
            role: Role::Admin,
            password_hash: String::new(),
        });
        let (text, hash) = new_token().unwrap();
        assert_eq!(text.len(), 64);
        idx.insert_token(TokenEntry {
            id: "t1".into(),
            user_id: "1".into(),
            name: "x".into(),
            hash,
            expires_at: 1000,
            one_time: false,
        });
        assert!(
            matches!(idx.resolve_token(&text, 999), Resolution::Caller(c) if c.role == Role::Admin)
        );
        assert!(matches!(
            idx.resolve_token(&text, 1000),
            Resolution::Refused
        ));
        assert!(matches!(
            idx.resolve_token("nothex", 0),
            Resolution::Refused
        ));
        assert!(matches!(
            idx.resolve_token(&"0".repeat(64), 0),
            Resolution::Unknown { .. }
        ));
    }

    fn admin() -> UserEntry {
        UserEntry {
            id: "1".into(),
            username: "admin".into(),
            role: Role::Admin,
            password_hash: String::new(),
        }
    }

    fn token(id: &str, hash: [u8; 32], expires_at: i64) -> TokenEntry {
        TokenEntry {
            id: id.into(),
            user_id: "1".into(),
            name: "x".into(),
            hash,
            expires_at,
            one_time: false,
        }
    }

    #[test]
    fn a_one_time_token_must_be_consumed() {
        let idx = AuthIndex::new();
        idx.upsert_user(admin());
        let (text, hash) = new_token().unwrap();
        idx.insert_token(TokenEntry {
            one_time: true,
            ..token("b", hash, i64::MAX)
        });
        assert!(
            matches!(idx.resolve_token(&text, 0), Resolution::OneTime { token_id, .. } if token_id == "b")
        );
    }

    #[test]
    fn a_missing_hash_is_refused_until_its_negative_entry_lapses_or_the_token_arrives() {
        let idx = AuthIndex::new();
        idx.upsert_user(admin());
        let (text, hash) = new_token().unwrap();
        assert!(matches!(
            idx.resolve_token(&text, 0),
            Resolution::Unknown { .. }
        ));
        idx.remember_missing(hash);
        assert!(matches!(idx.resolve_token(&text, 0), Resolution::Refused));
        // Learned from the feed: the negative entry no longer hides it.
        idx.apply_token("t", Some(token("t", hash, 10)));
        assert!(matches!(idx.resolve_token(&text, 0), Resolution::Caller(_)));
        idx.apply_token("t", None);
        assert!(matches!(
            idx.resolve_token(&text, 0),
            Resolution::Unknown { .. }
        ));
    }

    #[test]
    fn the_negative_cache_is_bounded_and_lapses() {
        let mut n = NegativeCache::default();
        let t0 = Instant::now();
        for i in 0..NEGATIVE_MAX + 10 {
            let mut h = [0u8; 32];
            h[..8].copy_from_slice(&(i as u64).to_le_bytes());
            n.insert(h, t0);
        }
        assert_eq!(n.until.len(), NEGATIVE_MAX);
        assert!(n.contains(&[0; 32], t0));
        assert!(!n.contains(&[0; 32], t0 + NEGATIVE_TTL));
        // Once the old entries lapsed, a new one evicts them.
        n.insert([0xff; 32], t0 + NEGATIVE_TTL);
        assert_eq!(n.until.len(), 1);
    }

    #[test]
    fn a_read_through_result_is_not_cached_after_a_concurrent_change() {
        let idx = AuthIndex::new();
        let (_, hash) = new_token().unwrap();
        let epoch = idx.epoch();
        // The feed applies a delete of that user while the lookup runs.
        idx.apply_user("1", None);
        assert!(!idx.cache_if_unchanged(epoch, token("t", hash, 10), admin()));
        assert!(idx.token_by_id("t").is_none());
        let epoch = idx.epoch();
        assert!(idx.cache_if_unchanged(epoch, token("t", hash, 10), admin()));
        assert_eq!(idx.user("1").unwrap().role, Role::Admin);
    }

    #[test]
    fn applying_a_user_replaces_its_tokens_and_role() {
        let idx = AuthIndex::new();
        idx.upsert_user(admin());
        idx.insert_token(token("a", [1; 32], 10));
        idx.insert_token(token("b", [2; 32], 10));
        let auditor = UserEntry {
            role: Role::Auditor,
            ..admin()
        };
        idx.apply_user("1", Some((auditor, vec![token("b", [2; 32], 10)])));
        assert_eq!(idx.user("1").unwrap().role, Role::Auditor);
        assert!(idx.token_by_id("a").is_none());
        assert!(idx.token_by_id("b").is_some());
        idx.apply_user("1", None);
        assert!(idx.user_by_name("admin").is_none());
        assert!(idx.tokens_of(None).is_empty());
    }

    #[test]
    fn expired_tokens_are_pruned_from_memory() {
        let idx = AuthIndex::new();
        idx.upsert_user(admin());
        idx.insert_token(token("a", [1; 32], 10));
        idx.insert_token(token("b", [2; 32], 11));
        assert_eq!(idx.prune_expired(10), 1);
        assert_eq!(idx.tokens_of(None).len(), 1);
    }

    #[test]
    fn lookups_are_bounded() {
        let idx = AuthIndex::new();
        let slots: Vec<_> = (0..MAX_TOKEN_LOOKUPS)
            .map(|_| idx.lookup_slot().unwrap())
            .collect();
        assert!(idx.lookup_slot().is_none());
        drop(slots);
        assert!(idx.lookup_slot().is_some());
    }

    #[test]
    fn token_lifetime_is_capped() {
        assert_eq!(token_ttl(None, 100, 50).unwrap(), 50);
        assert_eq!(token_ttl(None, 100, 500).unwrap(), 100);
        assert_eq!(token_ttl(Some(500), 100, 500).unwrap(), 500);
        let e = token_ttl(Some(501), 100, 500).unwrap_err();
        assert_eq!(e.key, ErrorKey::InvalidField);
        let d = e.detail.unwrap_or_default();
        assert!(d.contains("expires_in") && d.contains("500"), "{d}");
        assert!(token_ttl(Some(0), 100, 500).is_err());
    }

    #[test]
    fn password_round_trip() {
        let phc = hash_password("s3cret").unwrap();
        assert!(phc.starts_with("$argon2id$"));
        assert!(verify_password("s3cret", &phc));
        assert!(!verify_password("wrong", &phc));
        assert!(!verify_password("s3cret", "not-a-phc"));
        let want =
            format!("$argon2id$v=19$m={ARGON2_M_COST_KIB},t={ARGON2_T_COST},p={ARGON2_P_COST}$");
        assert!(phc.starts_with(&want), "{phc}");
    }

    #[test]
    fn hashes_made_with_other_parameters_keep_verifying() {
        use argon2::password_hash::PasswordHasher;
        let weak = argon2::Argon2::new(
            argon2::Algorithm::Argon2id,
            argon2::Version::V0x13,
            argon2::Params::new(8 * 1024, 1, 1, None).unwrap(),
        );
        let phc = weak.hash_password(b"old-password").unwrap().to_string();
        assert!(phc.contains("m=8192,t=1,p=1"), "{phc}");
        assert!(verify_password("old-password", &phc));
        assert!(!verify_password("other", &phc));
    }

    #[test]
    fn token_sources_in_order() {
        let mut h = axum::http::HeaderMap::new();
        h.insert("cookie", "a=b; pki_token=ccc".parse().unwrap());
        assert_eq!(presented_token(&h), Some(("ccc", TokenSource::Cookie)));
        h.insert("x-auth-token", "xxx".parse().unwrap());
        assert_eq!(presented_token(&h), Some(("xxx", TokenSource::Header)));
        h.insert("authorization", "Bearer bbb".parse().unwrap());
        assert_eq!(presented_token(&h), Some(("bbb", TokenSource::Bearer)));
    }

    #[test]
    fn session_cookie_is_httponly_samesite_strict() {
        assert_eq!(
            session_cookie("t", 60, false),
            "pki_token=t; Path=/; HttpOnly; SameSite=Strict; Max-Age=60"
        );
        assert!(session_cookie("", 0, true).ends_with("; Max-Age=0; Secure"));
    }
}
