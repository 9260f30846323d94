//! What a leaf of the log says, and its bytes.
//!
//! A leaf is the tag `warrant-log-v1` followed by fields, each a 4-byte
//! big-endian length and that many UTF-8 bytes. The first field is the kind:
//!
//! - `cert`: a certificate row is its own leaf (the issuance record):
//!   `ca, serial, profile, principal_uid, agent_id, capabilities, key_hash`
//!   (lower-case hex of the SPKI's SHA-256), `not_before, not_after,
//!   created_at` (decimal Unix seconds), `lineage_start, issued_by`
//!   (decimal, or empty). Every field is one the row keeps and never
//!   changes, so the leaf is recomputed from the row and stored once.
//! - `event`: any other event, whose row is the leaf: `at_ms, event, actor,
//!   principal_uid, agent_id, ca, serial, detail`.
//!
//! Lengths make the encoding unambiguous, and a reader in any language
//! needs only a loop to parse it (`crates/warrant/tests/independent/`).

use crate::audit::AuditEvent;
use crate::types::CertRecord;

pub const LEAF_TAG: &[u8] = b"warrant-log-v1";

/// A certificate row's leaf fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertLeaf {
    pub ca: String,
    pub serial: String,
    pub profile: String,
    pub principal_uid: String,
    pub agent_id: String,
    pub capabilities: String,
    /// Lower-case hex of the SubjectPublicKeyInfo's SHA-256.
    pub key_hash: String,
    pub not_before: i64,
    pub not_after: i64,
    pub created_at: i64,
    pub lineage_start: Option<i64>,
    /// The user who asked for the certificate.
    pub issued_by: Option<i64>,
}

impl CertLeaf {
    pub fn of(c: &CertRecord, issued_by: Option<i64>) -> CertLeaf {
        CertLeaf {
            ca: c.ca.clone(),
            serial: c.serial.clone(),
            profile: c.profile.clone(),
            principal_uid: c.principal_uid.clone().unwrap_or_default(),
            agent_id: c.agent_id.clone().unwrap_or_default(),
            capabilities: c.capabilities.clone().unwrap_or_default(),
            key_hash: hex(&c.key_hash),
            not_before: c.not_before,
            not_after: c.not_after,
            created_at: c.created_at,
            lineage_start: c.lineage_start,
            issued_by,
        }
    }
}

/// One leaf of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeafEntry {
    Cert(CertLeaf),
    Event(AuditEvent),
}

/// Why bytes are not a leaf.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeafError {
    #[error("leaf: does not start with the tag warrant-log-v1")]
    Tag,
    #[error("leaf: field {0} is cut short")]
    Truncated(usize),
    #[error("leaf: field {0} is not UTF-8")]
    NotUtf8(usize),
    #[error("leaf: unknown kind {0:?}")]
    Kind(String),
    #[error("leaf: {kind} has {got} fields, expected {expected}")]
    FieldCount {
        kind: &'static str,
        got: usize,
        expected: usize,
    },
    #[error("leaf: field {0} is not a decimal number")]
    Number(&'static str),
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn opt_num(n: Option<i64>) -> String {
    n.map(|n| n.to_string()).unwrap_or_default()
}

fn encode_fields(fields: &[&[u8]]) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(LEAF_TAG.len() + fields.iter().map(|f| f.len() + 4).sum::<usize>());
    out.extend_from_slice(LEAF_TAG);
    for f in fields {
        out.extend_from_slice(&(f.len() as u32).to_be_bytes());
        out.extend_from_slice(f);
    }
    out
}

impl LeafEntry {
    pub fn kind(&self) -> &'static str {
        match self {
            LeafEntry::Cert(_) => "cert",
            LeafEntry::Event(_) => "event",
        }
    }

    /// The leaf's bytes (what its hash covers).
    pub fn encode(&self) -> Vec<u8> {
        match self {
            LeafEntry::Cert(c) => {
                let (nb, na, ca) = (
                    c.not_before.to_string(),
                    c.not_after.to_string(),
                    c.created_at.to_string(),
                );
                let (ls, by) = (opt_num(c.lineage_start), opt_num(c.issued_by));
                encode_fields(&[
                    b"cert",
                    c.ca.as_bytes(),
                    c.serial.as_bytes(),
                    c.profile.as_bytes(),
                    c.principal_uid.as_bytes(),
                    c.agent_id.as_bytes(),
                    c.capabilities.as_bytes(),
                    c.key_hash.as_bytes(),
                    nb.as_bytes(),
                    na.as_bytes(),
                    ca.as_bytes(),
                    ls.as_bytes(),
                    by.as_bytes(),
                ])
            }
            LeafEntry::Event(e) => {
                let at = e.at_ms.to_string();
                encode_fields(&[
                    b"event",
                    at.as_bytes(),
                    e.event.as_bytes(),
                    e.actor.as_bytes(),
                    e.principal_uid.as_bytes(),
                    e.agent_id.as_bytes(),
                    e.ca.as_bytes(),
                    e.serial.as_bytes(),
                    e.detail.as_bytes(),
                ])
            }
        }
    }

    /// RFC 9162 leaf hash of [`encode`](Self::encode).
    pub fn hash(&self) -> warrant_tlog::Hash {
        warrant_tlog::leaf_hash(&self.encode())
    }

    /// Parses leaf bytes strictly.
    pub fn decode(bytes: &[u8]) -> Result<LeafEntry, LeafError> {
        let mut rest = bytes.strip_prefix(LEAF_TAG).ok_or(LeafError::Tag)?;
        let mut fields: Vec<String> = Vec::with_capacity(13);
        while !rest.is_empty() {
            let i = fields.len();
            if rest.len() < 4 {
                return Err(LeafError::Truncated(i));
            }
            let (len, tail) = rest.split_at(4);
            let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
            if tail.len() < len {
                return Err(LeafError::Truncated(i));
            }
            let (f, tail) = tail.split_at(len);
            fields.push(String::from_utf8(f.to_vec()).map_err(|_| LeafError::NotUtf8(i))?);
            rest = tail;
        }
        let count = |kind: &'static str, expected: usize| {
            if fields.len() == expected {
                Ok(())
            } else {
                Err(LeafError::FieldCount {
                    kind,
                    got: fields.len(),
                    expected,
                })
            }
        };
        let num =
            |s: &str, name: &'static str| s.parse::<i64>().map_err(|_| LeafError::Number(name));
        let opt = |s: &str, name: &'static str| {
            if s.is_empty() {
                Ok(None)
            } else {
                num(s, name).map(Some)
            }
        };
        match fields.first().map(String::as_str) {
            Some("cert") => {
                count("cert", 13)?;
                Ok(LeafEntry::Cert(CertLeaf {
                    ca: fields[1].clone(),
                    serial: fields[2].clone(),
                    profile: fields[3].clone(),
                    principal_uid: fields[4].clone(),
                    agent_id: fields[5].clone(),
                    capabilities: fields[6].clone(),
                    key_hash: fields[7].clone(),
                    not_before: num(&fields[8], "not_before")?,
                    not_after: num(&fields[9], "not_after")?,
                    created_at: num(&fields[10], "created_at")?,
                    lineage_start: opt(&fields[11], "lineage_start")?,
                    issued_by: opt(&fields[12], "issued_by")?,
                }))
            }
            Some("event") => {
                count("event", 9)?;
                Ok(LeafEntry::Event(AuditEvent {
                    at_ms: num(&fields[1], "at_ms")?,
                    event: fields[2].clone(),
                    actor: fields[3].clone(),
                    principal_uid: fields[4].clone(),
                    agent_id: fields[5].clone(),
                    ca: fields[6].clone(),
                    serial: fields[7].clone(),
                    detail: fields[8].clone(),
                }))
            }
            other => Err(LeafError::Kind(other.unwrap_or_default().to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert() -> CertLeaf {
        CertLeaf {
            ca: "people".into(),
            serial: "0A".repeat(20),
            profile: "agent-proxy".into(),
            principal_uid: "corp:alice:ab".into(),
            agent_id: "bot".into(),
            capabilities: "[\"read\"]".into(),
            key_hash: "00ff".into(),
            not_before: 1,
            not_after: 2,
            created_at: 1,
            lineage_start: None,
            issued_by: Some(7),
        }
    }

    #[test]
    fn leaves_round_trip() {
        let c = LeafEntry::Cert(cert());
        assert_eq!(LeafEntry::decode(&c.encode()).unwrap(), c);
        let e = LeafEntry::Event(AuditEvent {
            at_ms: 5,
            event: "login".into(),
            actor: "admin".into(),
            ..Default::default()
        });
        assert_eq!(LeafEntry::decode(&e.encode()).unwrap(), e);
        assert_ne!(c.hash(), e.hash());
    }

    #[test]
    fn rejects_malformed_leaves() {
        let good = LeafEntry::Cert(cert()).encode();
        assert_eq!(LeafEntry::decode(b"nope"), Err(LeafError::Tag));
        assert!(matches!(
            LeafEntry::decode(&good[..good.len() - 1]),
            Err(LeafError::Truncated(_))
        ));
        let mut extra = good.clone();
        extra.extend_from_slice(&[0, 0, 0, 0]);
        assert!(matches!(
            LeafEntry::decode(&extra),
            Err(LeafError::FieldCount { .. })
        ));
        let other = encode_fields(&[b"tree"]);
        assert_eq!(
            LeafEntry::decode(&other),
            Err(LeafError::Kind("tree".into()))
        );
    }

    #[test]
    fn fields_cannot_slide_into_each_other() {
        let mut a = cert();
        let mut b = cert();
        a.agent_id = "ab".into();
        a.capabilities = "c".into();
        b.agent_id = "a".into();
        b.capabilities = "bc".into();
        assert_ne!(LeafEntry::Cert(a).encode(), LeafEntry::Cert(b).encode());
    }
}
