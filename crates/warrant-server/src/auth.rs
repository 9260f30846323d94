//! Authentication and authorisation.
//!
//! Passwords are Argon2id and checked only at login: Argon2 is deliberately
//! slow, so running it per request would cap the issuance rate. API tokens are
//! 32 random bytes; only their SHA-256 is kept (in the database and in the
//! in-memory map every request is resolved from), so neither a DB dump nor a
//! heap dump yields a usable token.

use crate::error::{ApiError, ErrorKey};
use aws_lc_rs::digest;
use std::collections::HashMap;
use std::sync::RwLock;
use subtle::ConstantTimeEq;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Admin,
    Operator,
    Auditor,
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
}

impl Role {
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "admin" => Some(Role::Admin),
            "operator" => Some(Role::Operator),
            "auditor" => Some(Role::Auditor),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Auditor => "auditor",
            Role::CertificateHolder => "certificate",
        }
    }

    /// The permission table. Auditors read; operators issue and revoke;
    /// admins also manage users.
    pub fn allows(self, p: Permission) -> bool {
        use Permission::*;
        match self {
            Role::Admin => true,
            Role::Operator => matches!(p, CertIssue | CertRevoke | CertRead | TokenSelf),
            Role::Auditor => matches!(p, CertRead | TokenSelf),
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
}

/// Failed-login bookkeeping. Kept in memory only: a restart clears locks,
/// which is acceptable for a 5-minute lock and avoids a DB write per failure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockState {
    pub failures: u32,
    pub locked_until: i64,
}

impl LockState {
    /// Seconds the account stays locked at `now`, if it is.
    pub fn locked_for(&self, now: i64) -> Option<u64> {
        (self.locked_until > now).then(|| (self.locked_until - now) as u64)
    }

    /// Counts a failure; the `max`-th failure locks for `lockout` seconds and
    /// resets the count so the account gets `max` fresh tries afterwards.
    pub fn register_failure(&mut self, now: i64, max: u32, lockout: u64) {
        self.failures += 1;
        if self.failures >= max {
            self.failures = 0;
            self.locked_until = now.saturating_add(lockout as i64);
        }
    }
}

#[derive(Default)]
struct Inner {
    users: HashMap<String, UserEntry>,
    user_ids_by_name: HashMap<String, String>,
    tokens: HashMap<[u8; 32], TokenEntry>,
    locks: HashMap<String, LockState>,
}

/// The in-memory view of users and tokens; the store is written first and
/// this map second, so a request never sees a token the DB does not have.
#[derive(Default)]
pub struct AuthIndex {
    inner: RwLock<Inner>,
}

impl AuthIndex {
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn upsert_user(&self, user: UserEntry) {
        let mut g = self.write();
        g.user_ids_by_name
            .insert(user.username.clone(), user.id.clone());
        g.users.insert(user.id.clone(), user);
    }

    pub fn remove_user(&self, id: &str) {
        let mut g = self.write();
        if let Some(u) = g.users.remove(id) {
            g.user_ids_by_name.remove(&u.username);
            g.locks.remove(&u.username);
        }
        g.tokens.retain(|_, t| t.user_id != id);
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

    /// Resolves a presented token to its caller, from memory only.
    pub fn resolve_token(&self, presented: &str, now: i64) -> Option<Caller> {
        let hash = hash_token(presented.trim())?;
        let g = self.read();
        let token = g.tokens.get(&hash)?;
        // The map lookup already matched; the explicit constant-time compare
        // keeps the decision itself free of data-dependent early exits.
        if !bool::from(token.hash.ct_eq(&hash)) || token.expires_at <= now {
            return None;
        }
        let user = g.users.get(&token.user_id)?;
        Some(Caller {
            user_id: user.id.clone(),
            username: user.username.clone(),
            role: user.role,
            method: AuthMethod::Token {
                token_id: token.id.clone(),
            },
            client_cert_der: None,
        })
    }

    pub fn lock_state(&self, username: &str) -> LockState {
        self.read().locks.get(username).copied().unwrap_or_default()
    }

    pub fn record_login_failure(&self, username: &str, now: i64, max: u32, lockout: u64) {
        self.write()
            .locks
            .entry(username.to_string())
            .or_default()
            .register_failure(now, max, lockout);
    }

    pub fn record_login_success(&self, username: &str) {
        self.write().locks.remove(username);
    }
}

/// A fresh token: 32 CSPRNG bytes as 64 lower-case hex digits, plus its hash.
pub fn new_token() -> Result<(String, [u8; 32]), ApiError> {
    let mut raw = [0u8; 32];
    aws_lc_rs::rand::fill(&mut raw)
        .map_err(|_| ApiError::detail(ErrorKey::Internal, "CSPRNG failure"))?;
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

pub fn sha256(data: &[u8]) -> [u8; 32] {
    let d = digest::digest(&digest::SHA256, data);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// Argon2id PHC string with a random salt. CPU-heavy: call off the runtime.
pub fn hash_password(password: &str) -> Result<String, ApiError> {
    use argon2::password_hash::PasswordHasher;
    argon2::Argon2::default()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| ApiError::detail(ErrorKey::Internal, format!("argon2: {e}")))
}

/// Verifies against a PHC string. CPU-heavy: call off the runtime.
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
    aws_lc_rs::rand::fill(&mut raw)
        .map_err(|_| ApiError::detail(ErrorKey::Internal, "CSPRNG failure"))?;
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
            if let Some((k, v)) = pair.trim().split_once('=') {
                if k == SESSION_COOKIE {
                    return Some((v.trim(), TokenSource::Cookie));
                }
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
    fn fifth_failure_locks_for_lockout() {
        let mut s = LockState::default();
        for _ in 0..4 {
            s.register_failure(100, 5, 300);
            assert_eq!(s.locked_for(100), None);
        }
        s.register_failure(100, 5, 300);
        assert_eq!(s.locked_for(100), Some(300));
        assert_eq!(s.locked_for(400), None);
    }

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
        });
        assert_eq!(idx.resolve_token(&text, 999).unwrap().role, Role::Admin);
        assert!(idx.resolve_token(&text, 1000).is_none());
        assert!(idx.resolve_token("nothex", 0).is_none());
        assert!(idx.resolve_token(&"0".repeat(64), 0).is_none());
    }

    #[test]
    fn password_round_trip() {
        let phc = hash_password("s3cret").unwrap();
        assert!(phc.starts_with("$argon2id$"));
        assert!(verify_password("s3cret", &phc));
        assert!(!verify_password("wrong", &phc));
        assert!(!verify_password("s3cret", "not-a-phc"));
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
