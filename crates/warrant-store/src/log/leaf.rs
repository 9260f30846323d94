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
            key_hash: hex::encode(&c.key_hash),
            not_before: c.not_before,
            not_after: c.not_after,
            created_at: c.created_at,
            lineage_start: c.lineage_start,
            issued_by,
        }
    }

    /// The leaf hash of `c`'s row: the hash of [`CertLeaf::of`]'s encoding,
    /// computed from the row in place. Every certificate a group commit
    /// writes goes through here, so it copies none of the row's strings.
    pub fn hash_of(c: &CertRecord, issued_by: Option<i64>) -> warrant_tlog::Hash {
        let key_hash = hex::encode(&c.key_hash);
        let fields = CertFields {
            ca: &c.ca,
            serial: &c.serial,
            profile: &c.profile,
            principal_uid: c.principal_uid.as_deref().unwrap_or_default(),
            agent_id: c.agent_id.as_deref().unwrap_or_default(),
            capabilities: c.capabilities.as_deref().unwrap_or_default(),
            key_hash: &key_hash,
            not_before: c.not_before,
            not_after: c.not_after,
            created_at: c.created_at,
            lineage_start: c.lineage_start,
            issued_by,
        };
        warrant_tlog::leaf_hash(&fields.encode())
    }

    fn fields(&self) -> CertFields<'_> {
        CertFields {
            ca: &self.ca,
            serial: &self.serial,
            profile: &self.profile,
            principal_uid: &self.principal_uid,
            agent_id: &self.agent_id,
            capabilities: &self.capabilities,
            key_hash: &self.key_hash,
            not_before: self.not_before,
            not_after: self.not_after,
            created_at: self.created_at,
            lineage_start: self.lineage_start,
            issued_by: self.issued_by,
        }
    }
}

/// A certificate leaf's fields, borrowed: the one place its bytes are laid
/// out, whether they come from a [`CertLeaf`] or straight from a row.
struct CertFields<'a> {
    ca: &'a str,
    serial: &'a str,
    profile: &'a str,
    principal_uid: &'a str,
    agent_id: &'a str,
    capabilities: &'a str,
    key_hash: &'a str,
    not_before: i64,
    not_after: i64,
    created_at: i64,
    lineage_start: Option<i64>,
    issued_by: Option<i64>,
}

impl CertFields<'_> {
    fn encode(&self) -> Vec<u8> {
        let (mut nb, mut na, mut ca) = (
            itoa::Buffer::new(),
            itoa::Buffer::new(),
            itoa::Buffer::new(),
        );
        let (mut ls, mut by) = (itoa::Buffer::new(), itoa::Buffer::new());
        let ls = opt_num(&mut ls, self.lineage_start);
        let by = opt_num(&mut by, self.issued_by);
        encode_fields(&[
            b"cert",
            self.ca.as_bytes(),
            self.serial.as_bytes(),
            self.profile.as_bytes(),
            self.principal_uid.as_bytes(),
            self.agent_id.as_bytes(),
            self.capabilities.as_bytes(),
            self.key_hash.as_bytes(),
            nb.format(self.not_before).as_bytes(),
            na.format(self.not_after).as_bytes(),
            ca.format(self.created_at).as_bytes(),
            ls,
            by,
        ])
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

/// A decimal number, or the empty field for `None`.
fn opt_num(buf: &mut itoa::Buffer, n: Option<i64>) -> &[u8] {
    match n {
        Some(n) => buf.format(n).as_bytes(),
        None => b"",
    }
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
            LeafEntry::Cert(c) => c.fields().encode(),
            LeafEntry::Event(e) => {
                let mut at = itoa::Buffer::new();
                let at = at.format(e.at_ms);
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

    #[test]
    fn a_rows_hash_is_the_hash_of_its_leaf() {
        let mut row = CertRecord {
            ca: "people".into(),
            serial: "0A".repeat(20),
            common_name: "alice".into(),
            profile: "person".into(),
            status: crate::types::CertStatus::Valid,
            not_before: -5,
            not_after: 1_900_000_000,
            der: vec![0x30, 0x00],
            principal_uid: None,
            agent_id: None,
            key_hash: (0u8..32).collect(),
            created_at: 1_800_000_000,
            revoked_at: None,
            revocation_reason: None,
            capabilities: None,
            lineage_start: None,
        };
        for by in [None, Some(0), Some(i64::MAX)] {
            let want = LeafEntry::Cert(CertLeaf::of(&row, by)).hash();
            assert_eq!(CertLeaf::hash_of(&row, by), want);
        }
        row.principal_uid = Some("corp:alice:ab".into());
        row.agent_id = Some("bot".into());
        row.capabilities = Some("[\"read\"]".into());
        row.lineage_start = Some(i64::MIN);
        let leaf = CertLeaf::of(&row, Some(7));
        assert_eq!(
            leaf.key_hash,
            "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
        );
        assert_eq!(
            CertLeaf::hash_of(&row, Some(7)),
            LeafEntry::Cert(leaf.clone()).hash()
        );
        assert_eq!(
            LeafEntry::decode(&LeafEntry::Cert(leaf.clone()).encode()),
            Ok(LeafEntry::Cert(leaf))
        );
    }
}
