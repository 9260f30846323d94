//! What the server writes to the audit log (`warrant_store::audit`), and
//! how.
//!
//! - An **issuance** is its certificate's row: the group commit that
//!   writes it makes it a leaf of the log ([`issued`] records who asked),
//!   so an acknowledged certificate is always in the log.
//! - A **refusal** of an issuance (a 4xx other than 429) is queued without
//!   waiting ([`refused`]): the answer is not held up, and a refusal flood
//!   costs commits, never latency. Overload answers (429, 503) are not
//!   refusals of the request's content and are counted by metrics only.
//! - **Administrative** events (revocation, login, token and user changes)
//!   are appended after the change and before the answer ([`record`]), so an
//!   acknowledged change has its row; a crash between the change and its row
//!   can lose the row of a change nobody was told about.
//!
//! Fields that come from a refused request are unverified by definition;
//! such rows say so (`detail.claimed = true`), and every text is cut to its
//! column's size.

use crate::auth::{AuthMethod, Caller, Role};
use crate::error::ApiError;
use crate::state::AppState;
use serde_json::{Map, Value, json};
use warrant_store::{AuditEvent, CertRecord, IssuanceRecord};

/// The events the log records. Their names are the API's `event` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Issue,
    Refuse,
    Revoke,
    Renew,
    Login,
    LoginFailed,
    Logout,
    TokenCreate,
    TokenDelete,
    UserCreate,
    UserUpdate,
    UserDelete,
    /// An AIC-JWT issued for a DA (`/oauth/token`).
    Jwt,
}

impl EventKind {
    pub const ALL: [EventKind; 13] = [
        EventKind::Issue,
        EventKind::Refuse,
        EventKind::Revoke,
        EventKind::Renew,
        EventKind::Login,
        EventKind::LoginFailed,
        EventKind::Logout,
        EventKind::TokenCreate,
        EventKind::TokenDelete,
        EventKind::UserCreate,
        EventKind::UserUpdate,
        EventKind::UserDelete,
        EventKind::Jwt,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Issue => "issue",
            EventKind::Refuse => "refuse",
            EventKind::Revoke => "revoke",
            EventKind::Renew => "renew",
            EventKind::Login => "login",
            EventKind::LoginFailed => "login_failed",
            EventKind::Logout => "logout",
            EventKind::TokenCreate => "token_create",
            EventKind::TokenDelete => "token_delete",
            EventKind::UserCreate => "user_create",
            EventKind::UserUpdate => "user_update",
            EventKind::UserDelete => "user_delete",
            EventKind::Jwt => "jwt",
        }
    }

    pub fn parse(s: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Column sizes of `warrant_audit` (migration 7): longer values are cut.
mod width {
    pub const ACTOR: usize = 255;
    pub const PRINCIPAL_UID: usize = 512;
    pub const AGENT_ID: usize = 1024;
    pub const CA: usize = 64;
    pub const SERIAL: usize = 40;
}

/// `s` cut to at most `max` bytes, on a character boundary.
fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Who acted, as the log names them: the username, or
/// `certificate:<serial>` for a person presenting their certificate.
pub fn actor(caller: &Caller) -> String {
    match (&caller.method, caller.role) {
        (AuthMethod::ClientCert, Role::CertificateHolder) => {
            cut(&format!("certificate:{}", caller.username), width::ACTOR)
        }
        _ => cut(&caller.username, width::ACTOR),
    }
}

/// An event being described; [`Entry::build`] makes the store's row.
#[derive(Debug, Clone)]
pub struct Entry {
    kind: EventKind,
    actor: String,
    principal_uid: String,
    agent_id: String,
    ca: String,
    serial: String,
    detail: Map<String, Value>,
}

impl Entry {
    pub fn new(kind: EventKind, actor: impl Into<String>) -> Entry {
        Entry {
            kind,
            actor: cut(&actor.into(), width::ACTOR),
            principal_uid: String::new(),
            agent_id: String::new(),
            ca: String::new(),
            serial: String::new(),
            detail: Map::new(),
        }
    }

    pub fn by(kind: EventKind, caller: &Caller) -> Entry {
        Entry::new(kind, actor(caller))
    }

    pub fn principal(mut self, uid: &str) -> Entry {
        self.principal_uid = cut(uid, width::PRINCIPAL_UID);
        self
    }

    pub fn agent(mut self, id: &str) -> Entry {
        self.agent_id = cut(id, width::AGENT_ID);
        self
    }

    pub fn cert(mut self, ca: &str, serial: &str) -> Entry {
        self.ca = cut(ca, width::CA);
        self.serial = cut(serial, width::SERIAL);
        self
    }

    /// The principal, agent and certificate a row of the store names.
    pub fn of_record(self, r: &CertRecord) -> Entry {
        let e = self.cert(&r.ca, &r.serial);
        let e = match &r.principal_uid {
            Some(p) => e.principal(p),
            None => e,
        };
        match &r.agent_id {
            Some(a) => e.agent(a),
            None => e,
        }
    }

    pub fn detail(mut self, key: &str, value: impl Into<Value>) -> Entry {
        self.detail.insert(key.to_string(), value.into());
        self
    }

    /// The store's row, stamped now.
    pub fn build(self) -> AuditEvent {
        AuditEvent {
            at_ms: now_ms(),
            event: self.kind.as_str().to_string(),
            actor: self.actor,
            principal_uid: self.principal_uid,
            agent_id: self.agent_id,
            ca: self.ca,
            serial: self.serial,
            detail: if self.detail.is_empty() {
                String::new()
            } else {
                Value::Object(self.detail).to_string()
            },
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// An issuance's record. Its certificate row is its own leaf of the log
/// (`warrant_store::log::leaf`), which records the user who asked for it.
pub fn issued(record: IssuanceRecord, caller: &Caller) -> IssuanceRecord {
    record.issued_by(user_id(caller))
}

/// The user a caller acts as (`None` for a certificate holder).
pub fn user_id(caller: &Caller) -> Option<i64> {
    match (&caller.method, caller.role) {
        (AuthMethod::ClientCert, Role::CertificateHolder) => None,
        _ => caller.user_id.parse().ok(),
    }
}

/// Appends `entry` and waits for its commit. A failure is logged and
/// counted, not returned: the change it records has already been made.
pub async fn record(state: &AppState, entry: Entry) {
    let kind = entry.kind;
    if let Err(error) = state
        .store
        .issuance()
        .submit(IssuanceRecord::audit_only(entry.build()))
        .await
    {
        crate::metrics::audit_failed();
        tracing::error!(%error, event = kind.as_str(), "audit row not written");
    }
}

/// Queues the `refuse` row of a refused issuance without waiting for it.
/// `actor`: who asked ([`actor`] of the caller, or the certificate a
/// request presented when it was refused before it had a caller);
/// `claimed`: the principal and agent the request named (unverified).
pub fn refused(state: &AppState, actor: String, err: &ApiError, claimed: Claimed) {
    if matches!(err.key.status().as_u16(), 429 | 503) || err.key.status().is_server_error() {
        return;
    }
    let mut entry = Entry::new(EventKind::Refuse, actor)
        .detail("error", err.key.as_str())
        .detail("status", err.key.status().as_u16());
    if let Some(d) = &err.detail {
        entry = entry.detail("reason", cut(d, 512));
    }
    if let Some(p) = &claimed.principal_uid {
        entry = entry.principal(p);
    }
    if let Some(a) = &claimed.agent_id {
        entry = entry.agent(a);
    }
    if claimed.principal_uid.is_some() || claimed.agent_id.is_some() {
        entry = entry.detail("claimed", true);
    }
    if let Some(p) = claimed.profile {
        entry = entry.detail("profile", p);
    }
    let event = entry.build();
    let store = state.store.clone();
    tokio::spawn(async move {
        if let Err(error) = store
            .issuance()
            .submit(IssuanceRecord::audit_only(event))
            .await
        {
            crate::metrics::audit_failed();
            tracing::warn!(%error, "refusal's audit row not written");
        }
    });
}

/// What a refused request said about itself.
#[derive(Debug, Default, Clone)]
pub struct Claimed {
    pub principal_uid: Option<String>,
    pub agent_id: Option<String>,
    pub profile: Option<String>,
}

/// The `detail` of a row as JSON (empty text: an empty object).
pub fn detail_json(text: &str) -> Value {
    if text.is_empty() {
        return json!({});
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_round_trip() {
        for k in EventKind::ALL {
            assert_eq!(EventKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(EventKind::parse("nope"), None);
    }

    #[test]
    fn long_values_are_cut_on_a_character_boundary() {
        let s = "é".repeat(300);
        let c = cut(&s, 255);
        assert!(c.len() <= 255 && c.is_char_boundary(c.len()));
        assert_eq!(cut("abc", 255), "abc");
        let e = Entry::new(EventKind::Refuse, "x".repeat(1000))
            .principal(&"p".repeat(2000))
            .cert(&"c".repeat(100), &"s".repeat(100))
            .build();
        assert_eq!(e.actor.len(), width::ACTOR);
        assert_eq!(e.principal_uid.len(), width::PRINCIPAL_UID);
        assert_eq!((e.ca.len(), e.serial.len()), (width::CA, width::SERIAL));
    }

    #[test]
    fn details_are_a_json_object_or_empty() {
        let e = Entry::new(EventKind::Revoke, "admin")
            .detail("cascade_count", 3)
            .build();
        assert_eq!(detail_json(&e.detail), json!({"cascade_count": 3}));
        assert_eq!(Entry::new(EventKind::Login, "a").build().detail, "");
        assert_eq!(detail_json(""), json!({}));
    }
}
