//! Retention by expiry: certificates whose `notAfter` is older than the
//! grace leave the hot table, in bounded batches, optionally appended to the
//! [`Archive`] first. A revoked certificate is kept until then like any
//! other (the CRL lists only unexpired serials). Nonce rows have their own
//! expiry (`Issuance::prune_expired_nonces`).
//!
//! - **PostgreSQL**: `warrant_certs` is partitioned by expiry window
//!   (`expiry_bucket`, migration 6). A window whose end is past the cutoff is
//!   dropped whole (`DROP TABLE` of the partition: no row-by-row delete, no
//!   bloat); windows are created ahead of need. Long-lived rows (and any row
//!   whose window had no partition yet, in the default partition) are
//!   deleted in batches. A short-lived row therefore leaves up to one window
//!   width after its grace.
//! - **MariaDB**: batched deletes. Its partitioning needs every unique key to
//!   contain the partition column, so `(ca, serial)` would no longer be
//!   unique by itself, and the nonce ledger's table cannot be partitioned by
//!   certificate expiry at all.
//! - **SQLite**: batched deletes; the file runs `auto_vacuum = INCREMENTAL`
//!   and each pass hands freed pages back beyond a reserve kept for the next
//!   inserts, so the file stops growing.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use sqlx::{Executor, Row};

use crate::archive::Archive;
use crate::error::StoreError;
use crate::options::EXPIRY_BUCKETS_AHEAD;
use crate::sql::decode::{CERT_COLS, decode_cert, get_col, get_req_str};
use crate::sql::{Pools, SqlCore, on_pool};
use crate::types::{BackendKind, CertRecord};

/// Rows per DELETE statement (each `serial IN (…)` list).
const KEYS_PER_DELETE: usize = 500;
/// SQLite: most pages one pass hands back (16 MiB at 4 KiB pages), so one
/// `incremental_vacuum` never holds the write connection for long.
const MAX_VACUUM_PAGES_PER_PASS: u64 = 4096;
/// PostgreSQL: how long partition DDL waits for its lock before it gives up
/// until the next pass, so it never queues issuance behind a long query.
const PARTITION_LOCK_TIMEOUT: &str = "1s";

/// What one pass removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PruneOutcome {
    /// Certificate rows that left the database (deleted, or in a dropped
    /// partition).
    pub rows: u64,
    /// PostgreSQL: expiry partitions dropped.
    pub partitions_dropped: u64,
    /// Rows appended to the archive.
    pub archived: u64,
    /// SQLite: pages handed back to the file system.
    pub vacuumed_pages: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum RetentionError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The archive could not be written: nothing was deleted.
    #[error("retention archive: {0}")]
    Archive(#[from] std::io::Error),
}

/// Retention of expired certificate rows (see the module comment).
#[derive(Clone)]
pub struct Retention {
    pub(crate) core: Arc<SqlCore>,
    /// PostgreSQL: expiry windows whose partition this process made or saw.
    pub(crate) windows: Arc<Mutex<BTreeSet<i64>>>,
}

impl Retention {
    /// One pass: every certificate with `not_after < now - grace_secs`
    /// leaves, `batch` rows at a time (PostgreSQL: whole partitions too).
    /// With an archive, rows are appended (and synced) before they are
    /// deleted; a failed append deletes nothing.
    pub async fn prune(
        &self,
        now: i64,
        grace_secs: i64,
        batch: usize,
        archive: Option<&Arc<Archive>>,
    ) -> Result<PruneOutcome, RetentionError> {
        let cutoff = now.saturating_sub(grace_secs);
        let batch = batch.max(1);
        let mut out = PruneOutcome::default();
        match self.core.kind {
            BackendKind::Postgres => {
                self.ensure_partitions(now).await?;
                self.drop_expired_partitions(cutoff, batch, archive, &mut out)
                    .await?;
                for table in ["warrant_certs_long", "warrant_certs_default"] {
                    self.delete_expired(table, cutoff, batch, archive, &mut out)
                        .await?;
                }
            }
            BackendKind::MySql => {
                self.delete_expired("warrant_certs", cutoff, batch, archive, &mut out)
                    .await?;
            }
            BackendKind::Sqlite => {
                self.delete_expired("warrant_certs", cutoff, batch, archive, &mut out)
                    .await?;
                out.vacuumed_pages = self.release_free_pages().await?;
            }
        }
        Ok(out)
    }

    /// Event leaves of the log older than `before_ms` (Unix milliseconds)
    /// leave, oldest first, `batch` at a time, with the bookkeeping that
    /// keeps the proofs of the leaves left (`log::prune`); with an archive
    /// they are appended (and synced) first. Returns `(deleted, archived)`.
    pub async fn prune_log_events(
        &self,
        before_ms: i64,
        batch: usize,
        archive: Option<&Arc<Archive>>,
    ) -> Result<(u64, u64), RetentionError> {
        let batch = batch.max(1);
        let log = crate::log::Log {
            core: self.core.clone(),
        };
        let (mut deleted, mut archived) = (0, 0);
        loop {
            let rows = self.core.log_events_before(before_ms, batch).await?;
            if rows.is_empty() {
                return Ok((deleted, archived));
            }
            let full = rows.len() == batch;
            let keys: Vec<(i64, u64)> = rows.iter().map(|(t, i, _)| (*t, *i)).collect();
            let leaves = rows
                .into_iter()
                .map(|(t, i, e)| (t, i, crate::log::LeafEntry::Event(e)))
                .collect::<Vec<_>>();
            if archive.is_some() {
                archived += leaves.len() as u64;
            }
            let pruned = log.prepare_prune(leaves, archive).await?;
            deleted += self.core.log_delete_events(&keys).await?;
            log.after_prune(&pruned).await?;
            if !full {
                return Ok((deleted, archived));
            }
        }
    }

    /// Rows of the hash-chained table that the Merkle log replaced
    /// (migration 7) older than `before_ms` (Unix milliseconds) leave,
    /// oldest first, `batch` at a time; with an archive they are appended
    /// (and synced) first. Returns `(deleted, archived)`.
    pub async fn prune_audit(
        &self,
        before_ms: i64,
        batch: usize,
        archive: Option<&Arc<Archive>>,
    ) -> Result<(u64, u64), RetentionError> {
        let batch = batch.max(1);
        let (mut deleted, mut archived) = (0, 0);
        loop {
            let rows = self.core.audit_rows_before(before_ms, batch).await?;
            if rows.is_empty() {
                return Ok((deleted, archived));
            }
            let keys: Vec<(String, i64)> = rows.iter().map(|r| (r.chain.clone(), r.seq)).collect();
            let full = rows.len() == batch;
            if let Some(a) = archive {
                let a = a.clone();
                archived += tokio::task::spawn_blocking(move || a.append_audit(&rows))
                    .await
                    .map_err(|e| RetentionError::Archive(std::io::Error::other(e)))?
                    .map_err(RetentionError::Archive)?;
            }
            deleted += self.core.audit_delete(&keys).await?;
            if !full {
                return Ok((deleted, archived));
            }
        }
    }

    /// Unexpired certificate rows (`not_after > now`), for reports.
    pub async fn live_rows(&self, now: i64) -> Result<u64, StoreError> {
        let sql = self
            .core
            .sql("SELECT COUNT(*) FROM warrant_certs WHERE not_after > ?");
        self.core
            .timed(async {
                on_pool!(&self.core.pools, read, |p| {
                    let row = sqlx::query(&sql).bind(now).fetch_one(p).await?;
                    Ok(get_col!(row, "warrant_certs", 0, i64)?.max(0) as u64)
                })
            })
            .await
    }

    /// Deletes the rows of `table` expired before `cutoff`, oldest first.
    async fn delete_expired(
        &self,
        table: &str,
        cutoff: i64,
        batch: usize,
        archive: Option<&Arc<Archive>>,
        out: &mut PruneOutcome,
    ) -> Result<(), RetentionError> {
        loop {
            let keys = match archive {
                Some(a) => {
                    let rows = self.expired_rows(table, cutoff, batch).await?;
                    let keys = rows
                        .iter()
                        .map(|r| (r.ca.clone(), r.serial.clone()))
                        .collect();
                    out.archived += append(a, rows).await?;
                    keys
                }
                None => self.expired_keys(table, cutoff, batch).await?,
            };
            if keys.is_empty() {
                return Ok(());
            }
            let log = crate::log::Log {
                core: self.core.clone(),
            };
            let leaves = self.core.log_cert_leaves(table, &keys).await?;
            let pruned = log.prepare_prune(leaves, archive).await?;
            out.rows += self.delete_keys(table, &keys).await?;
            log.after_prune(&pruned).await?;
            if keys.len() < batch {
                return Ok(());
            }
            // Let the group commit take the write connection between batches.
            tokio::task::yield_now().await;
        }
    }

    async fn expired_rows(
        &self,
        table: &str,
        cutoff: i64,
        batch: usize,
    ) -> Result<Vec<CertRecord>, StoreError> {
        let sql = self
            .core
            .sql(&format!(
                "SELECT {CERT_COLS} FROM {table} WHERE not_after < ? ORDER BY not_after LIMIT ?"
            ))
            .into_owned();
        self.core
            .timed(async {
                on_pool!(&self.core.pools, read, |p| {
                    let rows = sqlx::query(&sql)
                        .bind(cutoff)
                        .bind(batch as i64)
                        .fetch_all(p)
                        .await?;
                    rows.iter().map(|r| decode_cert!(r)).collect()
                })
            })
            .await
    }

    async fn expired_keys(
        &self,
        table: &str,
        cutoff: i64,
        batch: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let sql = self
            .core
            .sql(&format!(
                "SELECT ca, serial FROM {table} WHERE not_after < ? ORDER BY not_after LIMIT ?"
            ))
            .into_owned();
        self.core
            .timed(async {
                on_pool!(&self.core.pools, read, |p| {
                    let rows = sqlx::query(&sql)
                        .bind(cutoff)
                        .bind(batch as i64)
                        .fetch_all(p)
                        .await?;
                    rows.iter()
                        .map(|r| {
                            Ok((
                                get_req_str!(r, "warrant_certs", "ca")?,
                                get_req_str!(r, "warrant_certs", "serial")?,
                            ))
                        })
                        .collect()
                })
            })
            .await
    }

    /// `DELETE … WHERE ca = ? AND serial IN (…)` per CA: a key lookup on
    /// every backend (MariaDB does not use an index for a row-value `IN`).
    async fn delete_keys(&self, table: &str, keys: &[(String, String)]) -> Result<u64, StoreError> {
        let mut by_ca: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
        for (ca, serial) in keys {
            by_ca.entry(ca).or_default().push(serial);
        }
        let mut deleted = 0;
        for (ca, serials) in by_ca {
            for chunk in serials.chunks(KEYS_PER_DELETE) {
                let placeholders = vec!["?"; chunk.len()].join(", ");
                let sql = self
                    .core
                    .sql(&format!(
                        "DELETE FROM {table} WHERE ca = ? AND serial IN ({placeholders})"
                    ))
                    .into_owned();
                deleted += self
                    .core
                    .timed_housekeeping(async {
                        on_pool!(&self.core.pools, write, |p| {
                            let mut q = sqlx::query(&sql).persistent(false).bind(ca);
                            for s in chunk {
                                q = q.bind(*s);
                            }
                            Ok(q.execute(p).await?.rows_affected())
                        })
                    })
                    .await?;
            }
        }
        Ok(deleted)
    }

    /// SQLite: hands free pages back beyond a reserve (see
    /// [`pages_to_release`]).
    async fn release_free_pages(&self) -> Result<u64, StoreError> {
        let Pools::Sqlite { write, .. } = &self.core.pools else {
            return Ok(0);
        };
        self.core
            .timed_housekeeping(async {
                let mut conn = write.acquire().await?;
                let pages: i64 = sqlx::query_scalar("PRAGMA page_count")
                    .fetch_one(&mut *conn)
                    .await?;
                let free: i64 = sqlx::query_scalar("PRAGMA freelist_count")
                    .fetch_one(&mut *conn)
                    .await?;
                let n = pages_to_release(pages.max(0) as u64, free.max(0) as u64);
                if n > 0 {
                    conn.execute(format!("PRAGMA incremental_vacuum({n})").as_str())
                        .await?;
                }
                Ok(n)
            })
            .await
    }

    /// PostgreSQL: makes sure the expiry windows from the previous one to
    /// [`EXPIRY_BUCKETS_AHEAD`] + 1 ahead have their partition. A window
    /// that cannot get one (rows for it already in the default partition,
    /// or an overlapping window of another width after a config change)
    /// keeps using the default partition, which retention also prunes.
    async fn ensure_partitions(&self, now: i64) -> Result<(), StoreError> {
        let Pools::Postgres(pool) = &self.core.pools else {
            return Ok(());
        };
        let width = self.core.expiry_bucket_secs;
        let current = now - now.rem_euclid(width);
        for k in -1..=EXPIRY_BUCKETS_AHEAD + 1 {
            let from = current + k * width;
            if from < 1 || self.known_window(from) {
                continue;
            }
            let ddl = format!(
                "CREATE TABLE IF NOT EXISTS {} PARTITION OF warrant_certs FOR VALUES FROM ({from}) TO ({})",
                partition_name(from),
                from + width
            );
            match self
                .core
                .timed_housekeeping(with_lock_timeout(pool, ddl))
                .await
            {
                Ok(()) => {
                    if let Ok(mut w) = self.windows.lock() {
                        w.insert(from);
                    }
                }
                Err(e) => {
                    tracing::debug!(window = from, error = %e, "expiry partition not created; its rows use the default partition")
                }
            }
        }
        Ok(())
    }

    fn known_window(&self, from: i64) -> bool {
        self.windows
            .lock()
            .map(|w| w.contains(&from))
            .unwrap_or(false)
    }

    /// PostgreSQL: drops every expiry partition whose window ended at or
    /// before `cutoff`, archiving its rows first when asked.
    async fn drop_expired_partitions(
        &self,
        cutoff: i64,
        batch: usize,
        archive: Option<&Arc<Archive>>,
        out: &mut PruneOutcome,
    ) -> Result<(), RetentionError> {
        let Pools::Postgres(pool) = &self.core.pools else {
            return Ok(());
        };
        let listed: Vec<(String, String)> = self
            .core
            .timed(async {
                let rows = sqlx::query(
                    "SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid) \
                     FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
                     WHERE i.inhparent = 'warrant_certs'::regclass",
                )
                .fetch_all(pool)
                .await?;
                rows.iter()
                    .map(|r| {
                        Ok((
                            get_req_str!(r, "pg_class", 0)?,
                            get_req_str!(r, "pg_class", 1)?,
                        ))
                    })
                    .collect()
            })
            .await?;
        for (name, bound) in listed {
            let Some((from, to)) = parse_range_bound(&bound) else {
                continue; // the long-lived and default partitions
            };
            if from < 1 || to > cutoff {
                continue;
            }
            let rows = match archive {
                Some(a) => self.archive_partition(&name, batch, a).await?,
                None => self.count_rows(&name).await?,
            };
            let pruned = self.prepare_partition_leaves(&name, batch, archive).await?;
            if archive.is_some() {
                out.archived += rows;
            }
            let ddl = format!("DROP TABLE IF EXISTS {name}");
            match self
                .core
                .timed_housekeeping(with_lock_timeout(pool, ddl))
                .await
            {
                Ok(()) => {
                    crate::log::Log {
                        core: self.core.clone(),
                    }
                    .after_prune(&pruned)
                    .await?;
                    out.rows += rows;
                    out.partitions_dropped += 1;
                    if let Ok(mut w) = self.windows.lock() {
                        w.remove(&from);
                    }
                }
                // Its rows stay (and are archived again next pass:
                // the archive is at-least-once).
                Err(e) => {
                    tracing::debug!(partition = %name, error = %e, "expiry partition not dropped this pass")
                }
            }
        }
        Ok(())
    }

    /// PostgreSQL: the log's bookkeeping (and archive) for every leaf of a
    /// partition about to be dropped, a page at a time.
    async fn prepare_partition_leaves(
        &self,
        table: &str,
        batch: usize,
        archive: Option<&Arc<Archive>>,
    ) -> Result<Vec<crate::log::PrunedLeaf>, RetentionError> {
        let log = crate::log::Log {
            core: self.core.clone(),
        };
        let mut after = (i64::MIN, i64::MIN);
        let mut all = Vec::new();
        loop {
            let page = self.core.log_table_leaves(table, after, batch).await?;
            let Some((tree, index, _)) = page.last() else {
                return Ok(all);
            };
            after = (*tree, *index as i64);
            let full = page.len() == batch;
            all.extend(log.prepare_prune(page, archive).await?);
            if !full {
                return Ok(all);
            }
        }
    }

    async fn count_rows(&self, table: &str) -> Result<u64, StoreError> {
        let Pools::Postgres(pool) = &self.core.pools else {
            return Ok(0);
        };
        let sql = format!("SELECT COUNT(*) FROM {table}");
        self.core
            .timed(async {
                let n: i64 = sqlx::query_scalar(&sql).fetch_one(pool).await?;
                Ok(n.max(0) as u64)
            })
            .await
    }

    /// Appends every row of one partition to the archive, in key order.
    async fn archive_partition(
        &self,
        table: &str,
        batch: usize,
        archive: &Arc<Archive>,
    ) -> Result<u64, RetentionError> {
        let Pools::Postgres(pool) = &self.core.pools else {
            return Ok(0);
        };
        let sql = format!(
            "SELECT {CERT_COLS} FROM {table} WHERE (ca, serial) > ($1, $2) ORDER BY ca, serial LIMIT $3"
        );
        let mut after = (String::new(), String::new());
        let mut total = 0;
        loop {
            let rows: Vec<CertRecord> = self
                .core
                .timed(async {
                    let rows = sqlx::query(&sql)
                        .bind(&after.0)
                        .bind(&after.1)
                        .bind(batch as i64)
                        .fetch_all(pool)
                        .await?;
                    rows.iter().map(|r| decode_cert!(r)).collect()
                })
                .await?;
            let Some(last) = rows.last() else {
                return Ok(total);
            };
            after = (last.ca.clone(), last.serial.clone());
            let n = rows.len();
            total += append(archive, rows).await?;
            if n < batch {
                return Ok(total);
            }
        }
    }
}

/// Appends off the async workers (file IO and zstd).
async fn append(archive: &Arc<Archive>, rows: Vec<CertRecord>) -> Result<u64, RetentionError> {
    if rows.is_empty() {
        return Ok(0);
    }
    let a = archive.clone();
    tokio::task::spawn_blocking(move || a.append(&rows))
        .await
        .map_err(|e| RetentionError::Archive(std::io::Error::other(e)))?
        .map_err(RetentionError::Archive)
}

/// Runs one DDL statement with a lock timeout, in its own transaction.
async fn with_lock_timeout(pool: &sqlx::PgPool, ddl: String) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    tx.execute(format!("SET LOCAL lock_timeout = '{PARTITION_LOCK_TIMEOUT}'").as_str())
        .await?;
    tx.execute(ddl.as_str()).await?;
    tx.commit().await?;
    Ok(())
}

/// The partition of the expiry window starting at `from`.
pub(crate) fn partition_name(from: i64) -> String {
    format!("warrant_certs_w{from}")
}

/// `FOR VALUES FROM ('a') TO ('b')` → `(a, b)`; `None` for `MINVALUE`
/// bounds and `DEFAULT`.
pub(crate) fn parse_range_bound(bound: &str) -> Option<(i64, i64)> {
    let rest = bound.trim().strip_prefix("FOR VALUES FROM (")?;
    let (from, rest) = rest.split_once(") TO (")?;
    let to = rest.strip_suffix(')')?;
    let num = |s: &str| s.trim().trim_matches('\'').parse::<i64>().ok();
    Some((num(from)?, num(to)?))
}

/// SQLite: how many free pages to hand back. A reserve of one eighth of the
/// file stays free for the inserts until the next pass (handing every page
/// back would only make the file grow again at once); at most
/// [`MAX_VACUUM_PAGES_PER_PASS`] go per pass.
pub(crate) fn pages_to_release(page_count: u64, freelist_count: u64) -> u64 {
    let reserve = page_count / 8;
    freelist_count
        .saturating_sub(reserve)
        .min(MAX_VACUUM_PAGES_PER_PASS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_bounds_parse_and_others_do_not() {
        assert_eq!(
            parse_range_bound("FOR VALUES FROM ('1796385600') TO ('1796472000')"),
            Some((1_796_385_600, 1_796_472_000))
        );
        assert_eq!(
            parse_range_bound("FOR VALUES FROM (60) TO (120)"),
            Some((60, 120))
        );
        assert_eq!(
            parse_range_bound("FOR VALUES FROM (MINVALUE) TO ('1')"),
            None
        );
        assert_eq!(parse_range_bound("DEFAULT"), None);
    }

    #[test]
    fn free_pages_are_released_beyond_an_eighth_and_at_most_a_pass_worth() {
        assert_eq!(pages_to_release(8000, 500), 0);
        assert_eq!(pages_to_release(8000, 1500), 500);
        assert_eq!(
            pages_to_release(1_000_000, 900_000),
            MAX_VACUUM_PAGES_PER_PASS
        );
        assert_eq!(pages_to_release(0, 0), 0);
    }

    #[test]
    fn partition_names_carry_the_window_start() {
        assert_eq!(partition_name(120), "warrant_certs_w120");
    }
}
