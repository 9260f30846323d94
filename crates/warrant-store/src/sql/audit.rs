//! The hash-chained audit table's queries (migration 7, before the Merkle
//! log replaced it): reads for the API and for verification, and the
//! retention pass's batched deletes. Nothing appends to it any more.

use sqlx::Row;

use super::{SqlCore, on_pool};
use crate::audit::{AuditEvent, AuditFilter, AuditRow};
use crate::error::StoreError;
use crate::sql::decode::{get_col, get_req_str};
use crate::types::MAX_LIST_LIMIT;

pub(crate) const AUDIT_COLS: &str =
    "chain, seq, at, event, actor, principal_uid, agent_id, ca, serial, detail, prev_hash, hash";
macro_rules! decode_audit {
    ($row:expr) => {{
        let row = &$row;
        const T: &str = "warrant_audit";
        let hash32 = |v: Vec<u8>, col: &str| -> Result<[u8; 32], StoreError> {
            v.try_into().map_err(|_| StoreError::Corrupt {
                table: T,
                detail: format!("{col} is not 32 bytes"),
            })
        };
        Ok::<AuditRow, StoreError>(AuditRow {
            chain: get_req_str!(row, T, "chain")?,
            seq: get_col!(row, T, "seq", i64)?,
            event: AuditEvent {
                at_ms: get_col!(row, T, "at", i64)?,
                event: get_req_str!(row, T, "event")?,
                actor: get_req_str!(row, T, "actor")?,
                principal_uid: get_req_str!(row, T, "principal_uid")?,
                agent_id: get_req_str!(row, T, "agent_id")?,
                ca: get_req_str!(row, T, "ca")?,
                serial: get_req_str!(row, T, "serial")?,
                detail: get_req_str!(row, T, "detail")?,
            },
            prev_hash: hash32(get_col!(row, T, "prev_hash", Vec<u8>)?, "prev_hash")?,
            hash: hash32(get_col!(row, T, "hash", Vec<u8>)?, "hash")?,
        })
    }};
}

impl SqlCore {
    /// Rows matching `f`, newest first.
    pub(crate) async fn audit_query(&self, f: &AuditFilter) -> Result<Vec<AuditRow>, StoreError> {
        let mut clauses = Vec::new();
        if f.principal_uid.is_some() {
            clauses.push("principal_uid = ?");
        }
        if f.agent_id.is_some() {
            clauses.push("agent_id = ?");
        }
        if f.event.is_some() {
            clauses.push("event = ?");
        }
        if f.since_ms.is_some() {
            clauses.push("at >= ?");
        }
        if f.until_ms.is_some() {
            clauses.push("at < ?");
        }
        let where_clause = if clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", clauses.join(" AND "))
        };
        let sql = self
            .sql(&format!(
                "SELECT {AUDIT_COLS} FROM warrant_audit {where_clause} \
                 ORDER BY at DESC, chain, seq DESC LIMIT ? OFFSET ?"
            ))
            .into_owned();
        let limit = i64::from(f.limit.min(MAX_LIST_LIMIT));
        let offset = i64::try_from(f.offset).unwrap_or(i64::MAX);
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let mut q = sqlx::query(&sql).persistent(false);
                for v in [&f.principal_uid, &f.agent_id, &f.event]
                    .into_iter()
                    .flatten()
                {
                    q = q.bind(v.as_str());
                }
                for v in [f.since_ms, f.until_ms].into_iter().flatten() {
                    q = q.bind(v);
                }
                let rows = q.bind(limit).bind(offset).fetch_all(p).await?;
                rows.iter().map(|r| decode_audit!(r)).collect()
            })
        })
        .await
    }

    /// The chains that have rows.
    pub(crate) async fn audit_chains(&self) -> Result<Vec<String>, StoreError> {
        let sql = "SELECT DISTINCT chain FROM warrant_audit ORDER BY chain";
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let rows = sqlx::query(sql).fetch_all(p).await?;
                rows.iter()
                    .map(|r| get_req_str!(r, "warrant_audit", "chain"))
                    .collect()
            })
        })
        .await
    }

    /// Up to `limit` rows of `chain` after `after_seq`, in order.
    pub(crate) async fn audit_chain_rows(
        &self,
        chain: &str,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<AuditRow>, StoreError> {
        let sql = self
            .sql(&format!(
                "SELECT {AUDIT_COLS} FROM warrant_audit WHERE chain = ? AND seq > ? ORDER BY seq LIMIT ?"
            ))
            .into_owned();
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let rows = sqlx::query(&sql)
                    .bind(chain)
                    .bind(after_seq)
                    .bind(limit as i64)
                    .fetch_all(p)
                    .await?;
                rows.iter().map(|r| decode_audit!(r)).collect()
            })
        })
        .await
    }

    /// Up to `limit` of the oldest rows with `at < before_ms`.
    pub(crate) async fn audit_rows_before(
        &self,
        before_ms: i64,
        limit: usize,
    ) -> Result<Vec<AuditRow>, StoreError> {
        let sql = self
            .sql(&format!(
                "SELECT {AUDIT_COLS} FROM warrant_audit WHERE at < ? ORDER BY at LIMIT ?"
            ))
            .into_owned();
        self.timed_housekeeping(async {
            on_pool!(&self.pools, read, |p| {
                let rows = sqlx::query(&sql)
                    .bind(before_ms)
                    .bind(limit as i64)
                    .fetch_all(p)
                    .await?;
                rows.iter().map(|r| decode_audit!(r)).collect()
            })
        })
        .await
    }

    /// Deletes the rows named by `(chain, seq)`: `chain = ? AND seq IN (…)`
    /// per chain, a key lookup on every backend.
    pub(crate) async fn audit_delete(&self, keys: &[(String, i64)]) -> Result<u64, StoreError> {
        let mut by_chain: std::collections::BTreeMap<&str, Vec<i64>> = Default::default();
        for (chain, seq) in keys {
            by_chain.entry(chain).or_default().push(*seq);
        }
        let mut total = 0;
        for (chain, seqs) in by_chain {
            for chunk in seqs.chunks(512) {
                let placeholders = vec!["?"; chunk.len()].join(", ");
                let sql = self
                    .sql(&format!(
                        "DELETE FROM warrant_audit WHERE chain = ? AND seq IN ({placeholders})"
                    ))
                    .into_owned();
                total += self
                    .timed_housekeeping(async {
                        on_pool!(&self.pools, write, |p| {
                            let mut q = sqlx::query(&sql).persistent(false).bind(chain);
                            for seq in chunk {
                                q = q.bind(*seq);
                            }
                            Ok(q.execute(p).await?.rows_affected())
                        })
                    })
                    .await?;
                // Let the group commit take the write connection between batches.
                tokio::task::yield_now().await;
            }
        }
        Ok(total)
    }
}
