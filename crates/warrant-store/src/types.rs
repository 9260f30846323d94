//! Record types shared by every backend.
//!
//! Times are Unix seconds (`i64`): the one representation that the three SQL
//! dialects store, index and compare identically, so the schema stays the same
//! everywhere and no backend needs a date-time codec.

use std::fmt;
use std::str::FromStr;

/// Role of a user; permissions per route are the server's business.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Admin,
    Operator,
    Auditor,
    /// Issues agent certificates only (the `warrant agent` client's token).
    Issuer,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Auditor => "auditor",
            Role::Issuer => "issuer",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The unknown role name, returned when parsing fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown role {0:?} (expected admin, operator, auditor or issuer)")]
pub struct UnknownRole(pub String);

impl FromStr for Role {
    type Err = UnknownRole;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "admin" => Ok(Role::Admin),
            "operator" => Ok(Role::Operator),
            "auditor" => Ok(Role::Auditor),
            "issuer" => Ok(Role::Issuer),
            other => Err(UnknownRole(other.to_string())),
        }
    }
}

/// A user to create. The password hash is an Argon2id PHC string made by the
/// server; the store never sees a password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewUser {
    pub username: String,
    pub password_hash: String,
    pub role: Role,
    pub created_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRow {
    pub id: i64,
    pub username: String,
    pub password_hash: String,
    pub role: Role,
    pub created_at: i64,
    /// Consecutive failed logins since the last success.
    pub failed_logins: i64,
    /// Login refused until this time (Unix seconds), if locked.
    pub locked_until: Option<i64>,
}

/// An API token to store. Only the SHA-256 of the token is ever stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewApiToken {
    pub token_hash: [u8; 32],
    pub user_id: i64,
    pub name: String,
    pub created_at: i64,
    pub expires_at: i64,
    /// Valid for one request: the server deletes the row on first use, and
    /// only the caller whose delete removed it proceeds (`warrant init`'s
    /// bootstrap token).
    pub one_time: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiTokenRow {
    pub id: i64,
    pub token_hash: [u8; 32],
    pub user_id: i64,
    pub name: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub one_time: bool,
}

/// What an administrator changes of a user; `None` keeps the value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserUpdate {
    pub role: Option<Role>,
    /// A new Argon2id PHC string. Setting it deletes the user's tokens.
    pub password_hash: Option<String>,
}

/// Which kind of row an auth change names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuthEntity {
    User,
    Token,
}

impl AuthEntity {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthEntity::User => "user",
            AuthEntity::Token => "token",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown auth entity {0:?} (expected user or token)")]
pub struct UnknownEntity(pub String);

impl FromStr for AuthEntity {
    type Err = UnknownEntity;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "user" => Ok(AuthEntity::User),
            "token" => Ok(AuthEntity::Token),
            other => Err(UnknownEntity(other.to_string())),
        }
    }
}

/// One entry of the auth change feed (`warrant_auth_changes`): a user or
/// token row was inserted, updated or deleted. It names the row only; a
/// reader reloads it (absent: deleted). `seq` numbers are dense and become
/// visible in order: every writer takes the next one under a row lock held
/// to its commit, so `seq > last_seen` never skips a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthChange {
    pub seq: i64,
    pub entity: AuthEntity,
    pub entity_id: i64,
}

/// Certificate status, stored as the single letters of varwof-core (`V`, `R`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CertStatus {
    Valid,
    Revoked,
}

impl CertStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CertStatus::Valid => "V",
            CertStatus::Revoked => "R",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown certificate status {0:?} (expected V or R)")]
pub struct UnknownStatus(pub String);

impl FromStr for CertStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "V" => Ok(CertStatus::Valid),
            "R" => Ok(CertStatus::Revoked),
            other => Err(UnknownStatus(other.to_string())),
        }
    }
}

/// One issued certificate.
///
/// `agent_id` is what makes a row an *agent* certificate: agent rows carry the
/// delegating principal in `principal_uid`; person rows carry the principal
/// they represent in `principal_uid` and have no `agent_id`. Revoking a person
/// row therefore cascades to the agent rows with the same `principal_uid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertRecord {
    pub ca: String,
    /// 40 upper-case hex digits.
    pub serial: String,
    pub common_name: String,
    pub profile: String,
    pub status: CertStatus,
    pub not_before: i64,
    pub not_after: i64,
    pub der: Vec<u8>,
    pub principal_uid: Option<String>,
    pub agent_id: Option<String>,
    /// SHA-256 of the certificate's SubjectPublicKeyInfo.
    pub key_hash: Vec<u8>,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
    pub revocation_reason: Option<String>,
    /// An agent certificate's capabilities, as the server encodes them for
    /// audits (a compact JSON array, in the certificate's order); `None`
    /// for other profiles. Opaque to the store.
    pub capabilities: Option<String>,
    /// A renewed certificate: the issue time (Unix seconds) of the first
    /// certificate of its line; `None` for every other certificate.
    pub lineage_start: Option<i64>,
}

/// What the per-request checks need of a certificate's row: whether it is
/// revoked, and the principal it names (for a person certificate, the
/// canonical principal its agents are counted under).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertStanding {
    pub status: CertStatus,
    pub principal_uid: Option<String>,
    /// The user this certificate was issued for (an operator certificate,
    /// [`Certificates::insert_bound_cert`](crate::Certificates::insert_bound_cert)); `None`
    /// for every other certificate.
    pub bound_user_id: Option<i64>,
}

impl CertRecord {
    pub fn is_agent(&self) -> bool {
        self.agent_id.is_some()
    }

    /// The row was stored without its DER (`agent_cert_der = drop`). A
    /// certificate's DER is never empty, so an empty one marks the drop
    /// on every backend without a schema change to a NOT NULL column.
    pub fn der_dropped(&self) -> bool {
        self.der.is_empty()
    }
}

/// A consumed delegation-authorization nonce. Stored until `expires_at`
/// (timestamp + skew + buffer, computed by the server), after which it could
/// no longer pass the freshness check and may be forgotten. Its row keeps
/// `principal_uid` only when the record carries no certificate (whose row
/// names the principal already).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonceRow {
    pub nonce: [u8; 32],
    pub expires_at: i64,
    pub principal_uid: String,
}

/// What one submit persists through the group commit: a certificate, a
/// consumed DA nonce, or both; what it carries lands in one transaction or
/// none of it does. Build it with [`with_cert`](Self::with_cert) or
/// [`nonce_only`](Self::nonce_only): a record with neither is refused by
/// [`Issuance::submit`](crate::Issuance::submit) with
/// [`WriteError::EmptyRecord`](crate::WriteError::EmptyRecord).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuanceRecord {
    /// `None`: a nonce-only record.
    pub cert: Option<CertRecord>,
    pub nonce: Option<NonceRow>,
    /// An event leaf of the log for this record, written in the same
    /// transaction when the record is (not for a replayed nonce). A
    /// certificate is a leaf by itself.
    pub audit: Option<crate::audit::AuditEvent>,
    /// The user who asked for the certificate (its leaf records it).
    pub issued_by: Option<i64>,
}

impl IssuanceRecord {
    /// An issued certificate: a person certificate (`nonce: None`) or an
    /// agent certificate with the DA nonce its issuance consumed. A replayed
    /// nonce keeps the certificate out of the database.
    pub fn with_cert(cert: CertRecord, nonce: Option<NonceRow>) -> IssuanceRecord {
        IssuanceRecord {
            cert: Some(cert),
            nonce,
            audit: None,
            issued_by: None,
        }
    }

    /// A DA redeemed for something other than a certificate (an OAuth
    /// token): its nonce is consumed in the same ledger and table as an
    /// agent issuance's, so a DA redeemed either way cannot be redeemed the
    /// other way, on any node sharing the database.
    pub fn nonce_only(nonce: NonceRow) -> IssuanceRecord {
        IssuanceRecord {
            cert: None,
            nonce: Some(nonce),
            audit: None,
            issued_by: None,
        }
    }

    /// An audit row alone (a refusal, a revocation, a login…), appended
    /// through the same group commit as issuances.
    pub fn audit_only(event: crate::audit::AuditEvent) -> IssuanceRecord {
        IssuanceRecord {
            cert: None,
            nonce: None,
            audit: Some(event),
            issued_by: None,
        }
    }

    /// This record with an event leaf.
    pub fn with_audit(mut self, event: crate::audit::AuditEvent) -> IssuanceRecord {
        self.audit = Some(event);
        self
    }

    /// This record's certificate as asked for by user `user`.
    pub fn issued_by(mut self, user: Option<i64>) -> IssuanceRecord {
        self.issued_by = user;
        self
    }

    /// Carries nothing to persist.
    pub(crate) fn is_empty(&self) -> bool {
        self.cert.is_none() && self.nonce.is_none() && self.audit.is_none()
    }
}

/// Filters for listing certificates; `None` means "any".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CertFilter {
    pub ca: Option<String>,
    pub status: Option<CertStatus>,
    pub common_name: Option<String>,
    pub principal_uid: Option<String>,
    /// `tls-client`, `tls-server`, `agent-proxy`, …
    pub profile: Option<String>,
    /// At most this many rows (the store caps it at [`MAX_LIST_LIMIT`]).
    pub limit: u32,
    pub offset: u64,
}

/// Upper bound on one list page, so that one request cannot pull the table.
pub const MAX_LIST_LIMIT: u32 = 10_000;

/// Result of revoking one certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RevokeOutcome {
    /// The certificate was already revoked; nothing changed (no cascade).
    pub already_revoked: bool,
    /// The certificate is a person (principal) certificate.
    pub was_principal: bool,
    /// Agent certificates of that principal revoked along with it.
    pub cascade_count: u64,
}

/// One entry of a CRL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevokedEntry {
    pub serial: String,
    pub revoked_at: i64,
    pub reason: Option<String>,
    pub not_after: i64,
}

/// Which SQL engine a store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    Sqlite,
    Postgres,
    MySql,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Sqlite => "sqlite",
            BackendKind::Postgres => "postgres",
            BackendKind::MySql => "mysql",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_round_trips_and_rejects_unknown() {
        for r in [Role::Admin, Role::Operator, Role::Auditor] {
            assert_eq!(r.as_str().parse::<Role>(), Ok(r));
        }
        assert_eq!("root".parse::<Role>(), Err(UnknownRole("root".into())));
    }

    #[test]
    fn status_round_trips_and_rejects_unknown() {
        assert_eq!("V".parse::<CertStatus>(), Ok(CertStatus::Valid));
        assert_eq!("R".parse::<CertStatus>(), Ok(CertStatus::Revoked));
        assert!("v".parse::<CertStatus>().is_err());
    }
}
