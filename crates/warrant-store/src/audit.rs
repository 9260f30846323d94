//! The audit log: one hash-chained table of what happened (issuances,
//! refusals, revocations, renewals, logins, token and user changes).
//!
//! **Chains.** Every committer of the group-commit write path appends to
//! its own chain (`<node>.<run>.<committer>`, `run` new at each open), so a
//! chain has one writer and its rows get consecutive `seq` numbers without
//! any lock shared between committers, processes or nodes. Each row carries `prev_hash` and
//! `hash = SHA-256(prev_hash ‖ canonical row)` ([`canonical_row`]); the
//! first row of a chain has 32 zero bytes as `prev_hash`.
//!
//! **Atomicity.** An audit row is written in the same transaction as what
//! it records (an issuance's certificate and nonce), so an acknowledged
//! issuance always has its row; the committer advances its chain head only
//! once that transaction committed, and reloads it from the table after any
//! failed commit (whose outcome may be unknown).
//!
//! **Verification** ([`ChainVerifier`]) reads each chain in `seq` order and
//! names the first row whose hash, link or number is wrong. Retention
//! deletes a chain's oldest rows: the first row left is then the chain's
//! anchor, taken as given (its `prev_hash` is the hash of the last pruned
//! row, which the archive holds).

use sha2::{Digest, Sha256};

/// `prev_hash` of a chain's first row.
pub const GENESIS_HASH: [u8; 32] = [0; 32];

/// Tags the canonical encoding, so a later format cannot collide with it.
const CANONICAL_TAG: &[u8] = b"warrant-audit-v1";

/// What happened, before it is placed in a chain. Every text field is
/// empty when it does not apply. The store treats `event` and `detail` as
/// opaque (the server defines the event names and the detail's JSON).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuditEvent {
    /// Unix milliseconds.
    pub at_ms: i64,
    pub event: String,
    /// Who acted: a username, `certificate:<serial>` for a certificate
    /// holder, or empty.
    pub actor: String,
    pub principal_uid: String,
    pub agent_id: String,
    pub ca: String,
    pub serial: String,
    /// A JSON object (text), or empty.
    pub detail: String,
}

/// A row of the audit table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    pub chain: String,
    pub seq: i64,
    pub event: AuditEvent,
    pub prev_hash: [u8; 32],
    pub hash: [u8; 32],
}

/// The bytes a row's hash covers besides `prev_hash`: a tag, then every
/// field as a 4-byte big-endian length and its UTF-8 bytes, numbers in
/// decimal. Lengths make the encoding unambiguous: no two rows share it.
pub fn canonical_row(chain: &str, seq: i64, e: &AuditEvent) -> Vec<u8> {
    let seq = seq.to_string();
    let at = e.at_ms.to_string();
    let fields: [&[u8]; 10] = [
        chain.as_bytes(),
        seq.as_bytes(),
        at.as_bytes(),
        e.event.as_bytes(),
        e.actor.as_bytes(),
        e.principal_uid.as_bytes(),
        e.agent_id.as_bytes(),
        e.ca.as_bytes(),
        e.serial.as_bytes(),
        e.detail.as_bytes(),
    ];
    let mut out =
        Vec::with_capacity(CANONICAL_TAG.len() + fields.iter().map(|f| f.len() + 4).sum::<usize>());
    out.extend_from_slice(CANONICAL_TAG);
    for f in fields {
        out.extend_from_slice(&(f.len() as u32).to_be_bytes());
        out.extend_from_slice(f);
    }
    out
}

/// `SHA-256(prev_hash ‖ canonical_row)`.
pub fn row_hash(prev_hash: &[u8; 32], chain: &str, seq: i64, e: &AuditEvent) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(prev_hash);
    h.update(canonical_row(chain, seq, e));
    h.finalize().into()
}

/// The end of one chain: its last row's number (0: no row yet) and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainHead {
    pub chain: String,
    pub seq: i64,
    pub hash: [u8; 32],
}

impl ChainHead {
    /// A chain without rows.
    pub fn empty(chain: impl Into<String>) -> ChainHead {
        ChainHead {
            chain: chain.into(),
            seq: 0,
            hash: GENESIS_HASH,
        }
    }

    /// Places `event` after the head and moves the head to it.
    pub fn append(&mut self, event: &AuditEvent) -> AuditRow {
        let seq = self.seq + 1;
        let hash = row_hash(&self.hash, &self.chain, seq, event);
        let row = AuditRow {
            chain: self.chain.clone(),
            seq,
            event: event.clone(),
            prev_hash: self.hash,
            hash,
        };
        self.seq = seq;
        self.hash = hash;
        row
    }
}

/// The first thing wrong in a chain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainBreak {
    #[error("chain {chain} row {seq}: its hash does not match its contents")]
    HashMismatch { chain: String, seq: i64 },
    #[error("chain {chain} row {seq}: prev_hash is not the hash of row {}", seq - 1)]
    LinkMismatch { chain: String, seq: i64 },
    #[error("chain {chain} row {seq}: expected row {expected} (rows missing)")]
    Gap {
        chain: String,
        seq: i64,
        expected: i64,
    },
    #[error("chain {chain} row 1: prev_hash is not the genesis value")]
    BadGenesis { chain: String },
}

impl ChainBreak {
    /// The chain and row number the break names.
    pub fn row(&self) -> (&str, i64) {
        match self {
            ChainBreak::HashMismatch { chain, seq }
            | ChainBreak::LinkMismatch { chain, seq }
            | ChainBreak::Gap { chain, seq, .. } => (chain, *seq),
            ChainBreak::BadGenesis { chain } => (chain, 1),
        }
    }
}

/// What a verified chain looked like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainSummary {
    pub chain: String,
    /// The first row present: 1, or later when retention pruned the start
    /// (that row is then the anchor, taken as given).
    pub first_seq: i64,
    pub last_seq: i64,
    pub rows: u64,
}

/// Checks one chain's rows, fed in `seq` order.
#[derive(Debug)]
pub struct ChainVerifier {
    summary: Option<ChainSummary>,
    last_hash: [u8; 32],
}

impl Default for ChainVerifier {
    fn default() -> Self {
        Self::new()
    }
}

impl ChainVerifier {
    pub fn new() -> ChainVerifier {
        ChainVerifier {
            summary: None,
            last_hash: GENESIS_HASH,
        }
    }

    /// Checks the next row of the chain.
    pub fn push(&mut self, row: &AuditRow) -> Result<(), ChainBreak> {
        let chain = || row.chain.clone();
        if row_hash(&row.prev_hash, &row.chain, row.seq, &row.event) != row.hash {
            return Err(ChainBreak::HashMismatch {
                chain: chain(),
                seq: row.seq,
            });
        }
        match &mut self.summary {
            None => {
                if row.seq == 1 && row.prev_hash != GENESIS_HASH {
                    return Err(ChainBreak::BadGenesis { chain: chain() });
                }
                self.summary = Some(ChainSummary {
                    chain: chain(),
                    first_seq: row.seq,
                    last_seq: row.seq,
                    rows: 1,
                });
            }
            Some(s) => {
                if row.seq != s.last_seq + 1 {
                    return Err(ChainBreak::Gap {
                        chain: chain(),
                        seq: row.seq,
                        expected: s.last_seq + 1,
                    });
                }
                if row.prev_hash != self.last_hash {
                    return Err(ChainBreak::LinkMismatch {
                        chain: chain(),
                        seq: row.seq,
                    });
                }
                s.last_seq = row.seq;
                s.rows += 1;
            }
        }
        self.last_hash = row.hash;
        Ok(())
    }

    /// What was checked; `None` for a chain without rows.
    pub fn finish(self) -> Option<ChainSummary> {
        self.summary
    }
}

/// A node name for an open that was given none: 16 random hex digits
/// (seeded from the OS's random source through `std`'s hasher keys).
pub fn random_node_name() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// Which rows [`Audit::query`](crate::Audit::query) returns: every given
/// field must match; newest first.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub principal_uid: Option<String>,
    pub agent_id: Option<String>,
    pub event: Option<String>,
    /// Unix milliseconds, inclusive.
    pub since_ms: Option<i64>,
    /// Unix milliseconds, exclusive.
    pub until_ms: Option<i64>,
    pub limit: u32,
    pub offset: u64,
}

/// One event as the audit API lists it: a leaf of the transparency log
/// (`tree`, `index`, its leaf hash), or a row of the hash-chained table the
/// log replaced (`legacy`: its chain's `prev_hash` and `hash`; `tree` and
/// `index` are then its chain and `seq`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    pub tree: String,
    pub index: u64,
    pub event: AuditEvent,
    pub leaf_hash: [u8; 32],
    pub legacy: Option<([u8; 32], [u8; 32])>,
}

impl AuditEntry {
    /// A certificate row's leaf as an `issue` event: its creation second,
    /// the user who asked (by name; empty when none is recorded or the user
    /// is gone), its principal, agent, serial, and profile in `detail`.
    pub(crate) fn of_cert(
        tree: String,
        index: u64,
        leaf: crate::log::LeafEntry,
        issuer: Option<String>,
    ) -> AuditEntry {
        let leaf_hash = leaf.hash();
        let event = match leaf {
            crate::log::LeafEntry::Cert(c) => {
                let mut detail = serde_json::Map::new();
                detail.insert("profile".into(), c.profile.clone().into());
                if !c.capabilities.is_empty() {
                    detail.insert("capabilities".into(), c.capabilities.clone().into());
                }
                AuditEvent {
                    at_ms: c.created_at.saturating_mul(1000),
                    event: "issue".into(),
                    actor: issuer.unwrap_or_default(),
                    principal_uid: c.principal_uid,
                    agent_id: c.agent_id,
                    ca: c.ca,
                    serial: c.serial,
                    detail: serde_json::Value::Object(detail).to_string(),
                }
            }
            crate::log::LeafEntry::Event(e) => e,
        };
        AuditEntry {
            tree,
            index,
            event,
            leaf_hash,
            legacy: None,
        }
    }

    pub(crate) fn of_event(tree: String, index: u64, event: AuditEvent) -> AuditEntry {
        let leaf_hash = crate::log::LeafEntry::Event(event.clone()).hash();
        AuditEntry {
            tree,
            index,
            event,
            leaf_hash,
            legacy: None,
        }
    }

    pub(crate) fn legacy(r: AuditRow) -> AuditEntry {
        AuditEntry {
            tree: r.chain,
            index: r.seq.max(0) as u64,
            event: r.event,
            leaf_hash: r.hash,
            legacy: Some((r.prev_hash, r.hash)),
        }
    }
}

/// The audit log's reads (appends go through
/// [`Issuance::submit`](crate::Issuance::submit), with the records they
/// describe or [`IssuanceRecord::audit_only`](crate::IssuanceRecord::audit_only)).
#[derive(Clone)]
pub struct Audit {
    pub(crate) core: std::sync::Arc<crate::sql::SqlCore>,
}

/// Why verification stopped.
#[derive(Debug, thiserror::Error)]
pub enum AuditVerifyError {
    #[error(transparent)]
    Store(#[from] crate::StoreError),
    #[error(transparent)]
    Broken(#[from] ChainBreak),
}

/// Rows read per query while verifying.
const VERIFY_PAGE: usize = 5_000;

impl Audit {
    /// Events matching `filter`, newest first: the log's leaves, and the
    /// rows of the hash-chained table it replaced until retention removes
    /// them.
    pub async fn query(&self, filter: &AuditFilter) -> Result<Vec<AuditEntry>, crate::StoreError> {
        self.core.log_query(filter).await
    }

    /// Checks every chain from its first row present to its last, and
    /// names the first row that is wrong.
    pub async fn verify(&self) -> Result<Vec<ChainSummary>, AuditVerifyError> {
        let mut out = Vec::new();
        for chain in self.core.audit_chains().await? {
            let mut verifier = ChainVerifier::new();
            let mut after = 0;
            loop {
                let rows = self
                    .core
                    .audit_chain_rows(&chain, after, VERIFY_PAGE)
                    .await?;
                for row in &rows {
                    verifier.push(row)?;
                }
                match rows.last() {
                    Some(last) if rows.len() == VERIFY_PAGE => after = last.seq,
                    _ => break,
                }
            }
            out.extend(verifier.finish());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(n: i64) -> AuditEvent {
        AuditEvent {
            at_ms: 1_700_000_000_000 + n,
            event: "issue".into(),
            actor: "admin".into(),
            principal_uid: "corp:alice:abc".into(),
            agent_id: "bot".into(),
            ca: "people".into(),
            serial: format!("{n:040X}"),
            detail: "{}".into(),
        }
    }

    fn chain(n: i64) -> Vec<AuditRow> {
        let mut head = ChainHead::empty("node.0");
        (1..=n).map(|i| head.append(&event(i))).collect()
    }

    fn verify(rows: &[AuditRow]) -> Result<Option<ChainSummary>, ChainBreak> {
        let mut v = ChainVerifier::new();
        for r in rows {
            v.push(r)?;
        }
        Ok(v.finish())
    }

    #[test]
    fn canonical_rows_are_unambiguous() {
        let mut a = event(1);
        let mut b = event(1);
        a.actor = "ad".into();
        a.principal_uid = "min".into();
        b.actor = "admin".into();
        b.principal_uid = String::new();
        assert_ne!(canonical_row("c", 1, &a), canonical_row("c", 1, &b));
        assert_ne!(canonical_row("c", 12, &a), canonical_row("c1", 2, &a));
    }

    #[test]
    fn an_appended_chain_verifies() {
        let rows = chain(5);
        assert_eq!(rows[0].prev_hash, GENESIS_HASH);
        assert_eq!(rows[1].prev_hash, rows[0].hash);
        let s = verify(&rows).unwrap().unwrap();
        assert_eq!((s.first_seq, s.last_seq, s.rows), (1, 5, 5));
        // A chain whose start was pruned verifies from its anchor.
        let s = verify(&rows[2..]).unwrap().unwrap();
        assert_eq!((s.first_seq, s.rows), (3, 3));
    }

    #[test]
    fn rejects_a_row_whose_contents_changed() {
        let mut rows = chain(5);
        rows[2].event.agent_id = "mallory".into();
        assert_eq!(
            verify(&rows).unwrap_err(),
            ChainBreak::HashMismatch {
                chain: "node.0".into(),
                seq: 3
            }
        );
    }

    #[test]
    fn rejects_a_rehashed_row_that_breaks_the_link() {
        let mut rows = chain(5);
        // An attacker who recomputes row 3's hash breaks row 4's link.
        rows[2].event.detail = "{\"forged\":true}".into();
        rows[2].hash = row_hash(&rows[2].prev_hash, "node.0", 3, &rows[2].event);
        assert_eq!(
            verify(&rows).unwrap_err(),
            ChainBreak::LinkMismatch {
                chain: "node.0".into(),
                seq: 4
            }
        );
    }

    #[test]
    fn rejects_a_deleted_row() {
        let mut rows = chain(5);
        rows.remove(1);
        assert_eq!(verify(&rows).unwrap_err().row(), ("node.0", 3));
    }

    #[test]
    fn rejects_a_first_row_without_the_genesis_link() {
        let mut rows = chain(2);
        rows[0].prev_hash = [1; 32];
        rows[0].hash = row_hash(&rows[0].prev_hash, "node.0", 1, &rows[0].event);
        assert_eq!(
            verify(&rows).unwrap_err(),
            ChainBreak::BadGenesis {
                chain: "node.0".into()
            }
        );
    }
}
