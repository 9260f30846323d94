//! The transparency log's queries: trees, leaves (certificate rows and
//! event rows), stored nodes, and the rows a batch appends (inside its
//! transaction).

use sqlx::Row;
use warrant_tlog::{Frontier, Hash, NodeId};

use super::{SqlCore, on_pool};
use crate::audit::AuditEvent;
use crate::error::StoreError;
use crate::log::{CertLeaf, LeafEntry, TILE_LEVEL, TreeHead, TreeRow};
use crate::sql::decode::{get_col, get_req_str, get_str};

pub(crate) const EVENT_COLS: &str =
    "tree, idx, at, event, actor, principal_uid, agent_id, ca, serial, detail";
pub(crate) const EVENT_COL_COUNT: usize = 10;
/// A certificate row's leaf columns.
pub(crate) const CERT_LEAF_COLS: &str = "log_index, ca, serial, profile, principal_uid, agent_id, \
     capabilities, key_hash, not_before, not_after, created_at, lineage_start, issued_by";
const TREE_COLS: &str = "id, name, size, frontier, checkpoint, checkpoint_size, updated_at";

/// Binds an event leaf's columns (tree, index, then the event).
macro_rules! bind_event {
    ($q:expr, $tree:expr, $idx:expr, $e:expr) => {{
        let e: &$crate::audit::AuditEvent = $e;
        $q.bind($tree)
            .bind($idx)
            .bind(e.at_ms)
            .bind(e.event.as_str())
            .bind(e.actor.as_str())
            .bind(e.principal_uid.as_str())
            .bind(e.agent_id.as_str())
            .bind(e.ca.as_str())
            .bind(e.serial.as_str())
            .bind(e.detail.as_str())
    }};
}
pub(crate) use bind_event;

macro_rules! decode_cert_leaf {
    ($row:expr) => {{
        let row = &$row;
        const T: &str = "warrant_certs";
        let key_hash: Vec<u8> = get_col!(row, T, "key_hash", Vec<u8>)?;
        Ok::<(u64, LeafEntry), StoreError>((
            get_col!(row, T, "log_index", i64)?.max(0) as u64,
            LeafEntry::Cert(CertLeaf {
                ca: get_req_str!(row, T, "ca")?,
                serial: get_req_str!(row, T, "serial")?,
                profile: get_req_str!(row, T, "profile")?,
                principal_uid: get_str!(row, T, "principal_uid")?.unwrap_or_default(),
                agent_id: get_str!(row, T, "agent_id")?.unwrap_or_default(),
                capabilities: get_str!(row, T, "capabilities")?.unwrap_or_default(),
                key_hash: key_hash.iter().map(|b| format!("{b:02x}")).collect(),
                not_before: get_col!(row, T, "not_before", i64)?,
                not_after: get_col!(row, T, "not_after", i64)?,
                created_at: get_col!(row, T, "created_at", i64)?,
                lineage_start: get_col!(row, T, "lineage_start", Option<i64>)?,
                issued_by: get_col!(row, T, "issued_by", Option<i64>)?,
            }),
        ))
    }};
}

macro_rules! decode_event {
    ($row:expr) => {{
        let row = &$row;
        const T: &str = "warrant_log_events";
        Ok::<(i64, u64, AuditEvent), StoreError>((
            get_col!(row, T, "tree", i64)?,
            get_col!(row, T, "idx", i64)?.max(0) as u64,
            AuditEvent {
                at_ms: get_col!(row, T, "at", i64)?,
                event: get_req_str!(row, T, "event")?,
                actor: get_req_str!(row, T, "actor")?,
                principal_uid: get_req_str!(row, T, "principal_uid")?,
                agent_id: get_req_str!(row, T, "agent_id")?,
                ca: get_req_str!(row, T, "ca")?,
                serial: get_req_str!(row, T, "serial")?,
                detail: get_req_str!(row, T, "detail")?,
            },
        ))
    }};
}

#[derive(Clone, Copy)]
enum TreeKey<'a> {
    Name(&'a str),
    Id(i64),
}

fn hash32(v: Vec<u8>, table: &'static str) -> Result<Hash, StoreError> {
    v.try_into().map_err(|_| StoreError::Corrupt {
        table,
        detail: "hash is not 32 bytes".into(),
    })
}

macro_rules! decode_tree {
    ($row:expr) => {{
        let row = &$row;
        const T: &str = "warrant_log_trees";
        let size = get_col!(row, T, "size", i64)?.max(0) as u64;
        let frontier: Vec<u8> = get_col!(row, T, "frontier", Vec<u8>)?;
        let frontier = Frontier::decode(&frontier).map_err(|e| StoreError::Corrupt {
            table: T,
            detail: format!("frontier: {e}"),
        })?;
        if frontier.size() != size {
            return Err(StoreError::Corrupt {
                table: T,
                detail: "frontier and size disagree".into(),
            });
        }
        Ok::<(TreeRow, Frontier), StoreError>((
            TreeRow {
                id: get_col!(row, T, "id", i64)?,
                name: get_req_str!(row, T, "name")?,
                size,
                root: frontier.root(),
                checkpoint: get_str!(row, T, "checkpoint")?,
                checkpoint_size: get_col!(row, T, "checkpoint_size", i64)?.max(0) as u64,
                updated_at_ms: get_col!(row, T, "updated_at", i64)?,
            },
            frontier,
        ))
    }};
}

impl SqlCore {
    pub(crate) async fn log_trees(&self) -> Result<Vec<TreeRow>, StoreError> {
        let sql = format!("SELECT {TREE_COLS} FROM warrant_log_trees ORDER BY id");
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let rows = sqlx::query(&sql).fetch_all(p).await?;
                rows.iter()
                    .map(|r| decode_tree!(r).map(|(t, _)| t))
                    .collect()
            })
        })
        .await
    }

    async fn log_tree_where(
        &self,
        key: TreeKey<'_>,
    ) -> Result<Option<(TreeRow, Frontier)>, StoreError> {
        let clause = match key {
            TreeKey::Name(_) => "name = ?",
            TreeKey::Id(_) => "id = ?",
        };
        let sql = self
            .sql(&format!(
                "SELECT {TREE_COLS} FROM warrant_log_trees WHERE {clause}"
            ))
            .into_owned();
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let q = sqlx::query(&sql);
                let q = match key {
                    TreeKey::Name(s) => q.bind(s),
                    TreeKey::Id(n) => q.bind(n),
                };
                let row = q.fetch_optional(p).await?;
                row.map(|r| decode_tree!(r)).transpose()
            })
        })
        .await
    }

    pub(crate) async fn log_tree_by_name(&self, name: &str) -> Result<Option<TreeRow>, StoreError> {
        Ok(self
            .log_tree_where(TreeKey::Name(name))
            .await?
            .map(|(t, _)| t))
    }

    pub(crate) async fn log_tree_by_id(&self, id: i64) -> Result<Option<TreeRow>, StoreError> {
        Ok(self.log_tree_where(TreeKey::Id(id)).await?.map(|(t, _)| t))
    }

    /// The head of tree `name`, made (empty) when it has no row yet.
    pub(crate) async fn log_open_tree(&self, name: &str) -> Result<TreeHead, StoreError> {
        if let Some((t, frontier)) = self.log_tree_where(TreeKey::Name(name)).await? {
            return Ok(TreeHead { id: t.id, frontier });
        }
        let now = crate::time::now_unix_ms();
        let sql = self.sql(
            "INSERT INTO warrant_log_trees (name, created_at, size, frontier, checkpoint_size, updated_at) \
             VALUES (?, ?, 0, ?, 0, ?)",
        );
        let empty = Frontier::new().encode();
        self.timed_housekeeping(async {
            on_pool!(&self.pools, write, |p| {
                sqlx::query(&sql)
                    .bind(name)
                    .bind(now)
                    .bind(&empty[..])
                    .bind(now)
                    .execute(p)
                    .await?;
                Ok(())
            })
        })
        .await?;
        let (t, frontier) = self
            .log_tree_where(TreeKey::Name(name))
            .await?
            .ok_or_else(|| StoreError::Database(format!("log tree {name} not created")))?;
        Ok(TreeHead { id: t.id, frontier })
    }

    pub(crate) async fn log_save_checkpoint(
        &self,
        tree: i64,
        size: u64,
        note: &str,
    ) -> Result<(), StoreError> {
        let sql = self.sql(
            "UPDATE warrant_log_trees SET checkpoint = ?, checkpoint_size = ? \
             WHERE id = ? AND checkpoint_size <= ?",
        );
        let size = size as i64;
        self.timed_housekeeping(async {
            on_pool!(&self.pools, write, |p| {
                sqlx::query(&sql)
                    .bind(note)
                    .bind(size)
                    .bind(tree)
                    .bind(size)
                    .execute(p)
                    .await?;
                Ok(())
            })
        })
        .await
    }

    pub(crate) async fn log_node(&self, tree: i64, id: NodeId) -> Result<Option<Hash>, StoreError> {
        let sql =
            self.sql("SELECT hash FROM warrant_log_nodes WHERE tree = ? AND lvl = ? AND idx = ?");
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let row = sqlx::query(&sql)
                    .bind(tree)
                    .bind(i32::from(id.level))
                    .bind(id.index as i64)
                    .fetch_optional(p)
                    .await?;
                row.map(|r| {
                    hash32(
                        get_col!(r, "warrant_log_nodes", "hash", Vec<u8>)?,
                        "warrant_log_nodes",
                    )
                })
                .transpose()
            })
        })
        .await
    }

    /// Stored nodes at `lvl` whose index lies in `[from, to)`.
    pub(crate) async fn log_nodes_at(
        &self,
        tree: i64,
        lvl: u8,
        from: u64,
        to: u64,
    ) -> Result<Vec<(NodeId, Hash)>, StoreError> {
        let sql = self.sql(
            "SELECT idx, hash FROM warrant_log_nodes WHERE tree = ? AND lvl = ? AND idx >= ? AND idx < ? ORDER BY idx",
        );
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let rows = sqlx::query(&sql)
                    .bind(tree)
                    .bind(i32::from(lvl))
                    .bind(from as i64)
                    .bind(to as i64)
                    .fetch_all(p)
                    .await?;
                rows.iter()
                    .map(|r| {
                        Ok((
                            NodeId {
                                level: lvl,
                                index: get_col!(r, "warrant_log_nodes", "idx", i64)?.max(0) as u64,
                            },
                            hash32(
                                get_col!(r, "warrant_log_nodes", "hash", Vec<u8>)?,
                                "warrant_log_nodes",
                            )?,
                        ))
                    })
                    .collect()
            })
        })
        .await
    }

    /// Stored nodes below the tile level that lie inside leaves `[start, end)`.
    pub(crate) async fn log_low_nodes(
        &self,
        tree: i64,
        start: u64,
        end: u64,
    ) -> Result<Vec<(NodeId, Hash)>, StoreError> {
        let ranges: Vec<String> = (0..TILE_LEVEL)
            .map(|_| "(lvl = ? AND idx >= ? AND idx < ?)".to_string())
            .collect();
        let sql = self
            .sql(&format!(
                "SELECT lvl, idx, hash FROM warrant_log_nodes WHERE tree = ? AND ({})",
                ranges.join(" OR ")
            ))
            .into_owned();
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let mut q = sqlx::query(&sql).bind(tree);
                for l in 0..TILE_LEVEL {
                    q = q
                        .bind(i32::from(l))
                        .bind((start >> l) as i64)
                        .bind((end >> l) as i64);
                }
                let rows = q.fetch_all(p).await?;
                rows.iter()
                    .map(|r| {
                        let lvl: i32 = get_col!(r, "warrant_log_nodes", "lvl", i32)?;
                        Ok((
                            NodeId {
                                level: lvl.clamp(0, 63) as u8,
                                index: get_col!(r, "warrant_log_nodes", "idx", i64)?.max(0) as u64,
                            },
                            hash32(
                                get_col!(r, "warrant_log_nodes", "hash", Vec<u8>)?,
                                "warrant_log_nodes",
                            )?,
                        ))
                    })
                    .collect()
            })
        })
        .await
    }

    /// The leaves of `tree` with index in `[start, end)` that are still in
    /// the database (certificate rows and event rows), in index order.
    pub(crate) async fn log_leaves(
        &self,
        tree: i64,
        start: u64,
        end: u64,
    ) -> Result<Vec<(u64, LeafEntry)>, StoreError> {
        let certs = self
            .sql(&format!(
                "SELECT {CERT_LEAF_COLS} FROM warrant_certs WHERE log_tree = ? AND log_index >= ? AND log_index < ?"
            ))
            .into_owned();
        let events = self
            .sql(&format!(
                "SELECT {EVENT_COLS} FROM warrant_log_events WHERE tree = ? AND idx >= ? AND idx < ?"
            ))
            .into_owned();
        let mut out: Vec<(u64, LeafEntry)> = self
            .timed(async {
                on_pool!(&self.pools, read, |p| {
                    let rows = sqlx::query(&certs)
                        .bind(tree)
                        .bind(start as i64)
                        .bind(end as i64)
                        .fetch_all(p)
                        .await?;
                    let mut out =
                        rows.iter()
                            .map(|r| decode_cert_leaf!(r))
                            .collect::<Result<Vec<_>, StoreError>>()?;
                    let rows = sqlx::query(&events)
                        .bind(tree)
                        .bind(start as i64)
                        .bind(end as i64)
                        .fetch_all(p)
                        .await?;
                    for r in &rows {
                        let (_, idx, e) = decode_event!(r)?;
                        out.push((idx, LeafEntry::Event(e)));
                    }
                    Ok(out)
                })
            })
            .await?;
        out.sort_by_key(|(i, _)| *i);
        Ok(out)
    }

    /// Whether any leaf of `tree` with index in `[start, end)` is still in
    /// the database.
    pub(crate) async fn log_any_live(
        &self,
        tree: i64,
        start: u64,
        end: u64,
    ) -> Result<bool, StoreError> {
        let certs = self.sql(
            "SELECT 1 FROM warrant_certs WHERE log_tree = ? AND log_index >= ? AND log_index < ? LIMIT 1",
        );
        let events = self.sql(
            "SELECT 1 FROM warrant_log_events WHERE tree = ? AND idx >= ? AND idx < ? LIMIT 1",
        );
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                for sql in [&certs, &events] {
                    let row = sqlx::query(sql)
                        .bind(tree)
                        .bind(start as i64)
                        .bind(end as i64)
                        .fetch_optional(p)
                        .await?;
                    if row.is_some() {
                        return Ok(true);
                    }
                }
                Ok(false)
            })
        })
        .await
    }

    /// Where certificate `ca`/`serial` sits in the log (by the table's key).
    pub(crate) async fn log_cert_position(
        &self,
        ca: &str,
        serial: &str,
    ) -> Result<Option<(i64, u64)>, StoreError> {
        let sql = self.sql(
            "SELECT log_tree, log_index FROM warrant_certs WHERE ca = ? AND serial = ? AND log_tree IS NOT NULL",
        );
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let Some(row) = sqlx::query(&sql)
                    .bind(ca)
                    .bind(serial)
                    .fetch_optional(p)
                    .await?
                else {
                    return Ok(None);
                };
                Ok(Some((
                    get_col!(row, "warrant_certs", "log_tree", i64)?,
                    get_col!(row, "warrant_certs", "log_index", i64)?.max(0) as u64,
                )))
            })
        })
        .await
    }

    /// Stores node hashes (idempotent) and deletes others, in one
    /// transaction (retention's bookkeeping, `log::prune`).
    pub(crate) async fn log_replace_nodes(
        &self,
        tree: i64,
        put: &[(NodeId, Hash)],
        remove: &[NodeId],
    ) -> Result<(), StoreError> {
        if put.is_empty() && remove.is_empty() {
            return Ok(());
        }
        let del = self.sql("DELETE FROM warrant_log_nodes WHERE tree = ? AND lvl = ? AND idx = ?");
        let ins =
            self.sql("INSERT INTO warrant_log_nodes (tree, lvl, idx, hash) VALUES (?, ?, ?, ?)");
        self.timed_housekeeping(async {
            on_pool!(&self.pools, write, |p| {
                let mut tx = p.begin().await?;
                for id in remove.iter().chain(put.iter().map(|(id, _)| id)) {
                    sqlx::query(&del)
                        .bind(tree)
                        .bind(i32::from(id.level))
                        .bind(id.index as i64)
                        .execute(&mut *tx)
                        .await?;
                }
                for (id, h) in put {
                    sqlx::query(&ins)
                        .bind(tree)
                        .bind(i32::from(id.level))
                        .bind(id.index as i64)
                        .bind(&h[..])
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(())
            })
        })
        .await
    }

    /// Deletes event rows by `(tree, idx)`.
    pub(crate) async fn log_delete_events(&self, keys: &[(i64, u64)]) -> Result<u64, StoreError> {
        let mut by_tree: std::collections::BTreeMap<i64, Vec<i64>> = Default::default();
        for (t, i) in keys {
            by_tree.entry(*t).or_default().push(*i as i64);
        }
        let mut total = 0;
        for (tree, idxs) in by_tree {
            for chunk in idxs.chunks(512) {
                let placeholders = vec!["?"; chunk.len()].join(", ");
                let sql = self
                    .sql(&format!(
                        "DELETE FROM warrant_log_events WHERE tree = ? AND idx IN ({placeholders})"
                    ))
                    .into_owned();
                total += self
                    .timed_housekeeping(async {
                        on_pool!(&self.pools, write, |p| {
                            let mut q = sqlx::query(&sql).persistent(false).bind(tree);
                            for i in chunk {
                                q = q.bind(*i);
                            }
                            Ok(q.execute(p).await?.rows_affected())
                        })
                    })
                    .await?;
                tokio::task::yield_now().await;
            }
        }
        Ok(total)
    }

    /// Up to `limit` of the oldest event rows with `at < before_ms`.
    pub(crate) async fn log_events_before(
        &self,
        before_ms: i64,
        limit: usize,
    ) -> Result<Vec<(i64, u64, AuditEvent)>, StoreError> {
        let sql = self
            .sql(&format!(
                "SELECT {EVENT_COLS} FROM warrant_log_events WHERE at < ? ORDER BY at LIMIT ?"
            ))
            .into_owned();
        self.timed_housekeeping(async {
            on_pool!(&self.pools, read, |p| {
                let rows = sqlx::query(&sql)
                    .bind(before_ms)
                    .bind(limit as i64)
                    .fetch_all(p)
                    .await?;
                rows.iter().map(|r| decode_event!(r)).collect()
            })
        })
        .await
    }
}

impl SqlCore {
    /// The leaves of the certificate rows `keys` of `table` (rows placed in
    /// the log only): tree id, index, leaf.
    pub(crate) async fn log_cert_leaves(
        &self,
        table: &str,
        keys: &[(String, String)],
    ) -> Result<Vec<(i64, u64, LeafEntry)>, StoreError> {
        let mut by_ca: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
        for (ca, serial) in keys {
            by_ca.entry(ca).or_default().push(serial);
        }
        let mut out = Vec::new();
        for (ca, serials) in by_ca {
            for chunk in serials.chunks(500) {
                let placeholders = vec!["?"; chunk.len()].join(", ");
                let sql = self
                    .sql(&format!(
                        "SELECT log_tree, {CERT_LEAF_COLS} FROM {table} \
                         WHERE ca = ? AND serial IN ({placeholders}) AND log_tree IS NOT NULL"
                    ))
                    .into_owned();
                let rows: Vec<(i64, u64, LeafEntry)> = self
                    .timed_housekeeping(async {
                        on_pool!(&self.pools, read, |p| {
                            let mut q = sqlx::query(&sql).persistent(false).bind(ca);
                            for s in chunk {
                                q = q.bind(*s);
                            }
                            let rows = q.fetch_all(p).await?;
                            rows.iter()
                                .map(|r| {
                                    let tree = get_col!(r, "warrant_certs", "log_tree", i64)?;
                                    let (i, e) = decode_cert_leaf!(r)?;
                                    Ok((tree, i, e))
                                })
                                .collect::<Result<Vec<_>, StoreError>>()
                        })
                    })
                    .await?;
                out.extend(rows);
            }
        }
        Ok(out)
    }

    /// A page of the leaves of a whole table (a PostgreSQL partition about
    /// to be dropped), in `(log_tree, log_index)` order after `after`.
    pub(crate) async fn log_table_leaves(
        &self,
        table: &str,
        after: (i64, i64),
        limit: usize,
    ) -> Result<Vec<(i64, u64, LeafEntry)>, StoreError> {
        let sql = self
            .sql(&format!(
                "SELECT log_tree, {CERT_LEAF_COLS} FROM {table} \
                 WHERE log_tree IS NOT NULL AND (log_tree > ? OR (log_tree = ? AND log_index > ?)) \
                 ORDER BY log_tree, log_index LIMIT ?"
            ))
            .into_owned();
        self.timed_housekeeping(async {
            on_pool!(&self.pools, read, |p| {
                let rows = sqlx::query(&sql)
                    .bind(after.0)
                    .bind(after.0)
                    .bind(after.1)
                    .bind(limit as i64)
                    .fetch_all(p)
                    .await?;
                rows.iter()
                    .map(|r| {
                        let tree = get_col!(r, "warrant_certs", "log_tree", i64)?;
                        let (i, e) = decode_cert_leaf!(r)?;
                        Ok((tree, i, e))
                    })
                    .collect()
            })
        })
        .await
    }
}

impl SqlCore {
    /// The log's events matching `f`, newest first: issuances from the
    /// certificate rows (through their own indexes: principal, creation
    /// time), other events from `warrant_log_events`, and rows of the
    /// hash-chained table the log replaced, merged by time.
    pub(crate) async fn log_query(
        &self,
        f: &crate::audit::AuditFilter,
    ) -> Result<Vec<crate::audit::AuditEntry>, StoreError> {
        use crate::audit::AuditEntry;
        let limit = f.limit.min(crate::types::MAX_LIST_LIMIT) as usize;
        let need = (f.offset as usize).saturating_add(limit);
        let mut out: Vec<AuditEntry> = Vec::new();
        if f.event.as_deref().is_none_or(|e| e == "issue") {
            let mut certs = self.log_query_certs(f, need).await?;
            // The SQL orders by time only: a LIMIT that cuts inside one instant
            // keeps an arbitrary part of it, which need not be the part the sort
            // below puts first, so pages would skip and repeat rows. Take the
            // whole instant the cut fell in (certificates: a second).
            if let Some(cut) = cut_instant(&certs, need) {
                let tied = self
                    .log_query_certs(&within(f, cut, 1000), usize::MAX)
                    .await?;
                certs.retain(|e| e.event.at_ms != cut);
                certs.extend(tied);
            }
            out.extend(certs);
        }
        if f.event.as_deref() != Some("issue") || f.event.is_none() {
            let mut events = self.log_query_events(f, need).await?;
            if let Some(cut) = cut_instant(&events, need) {
                let tied = self
                    .log_query_events(&within(f, cut, 1), usize::MAX)
                    .await?;
                events.retain(|e| e.event.at_ms != cut);
                events.extend(tied);
            }
            out.extend(events);
        }
        let legacy = crate::audit::AuditFilter {
            limit: need.min(u32::MAX as usize) as u32,
            offset: 0,
            ..f.clone()
        };
        out.extend(
            self.audit_query(&legacy)
                .await?
                .into_iter()
                .map(AuditEntry::legacy),
        );
        out.sort_by(|a, b| {
            b.event
                .at_ms
                .cmp(&a.event.at_ms)
                .then_with(|| a.tree.cmp(&b.tree))
                .then_with(|| b.index.cmp(&a.index))
        });
        Ok(out
            .into_iter()
            .skip(f.offset as usize)
            .take(limit)
            .collect())
    }

    async fn log_query_certs(
        &self,
        f: &crate::audit::AuditFilter,
        need: usize,
    ) -> Result<Vec<crate::audit::AuditEntry>, StoreError> {
        let mut clauses = vec!["c.log_tree IS NOT NULL"];
        if f.principal_uid.is_some() {
            clauses.push("c.principal_uid = ?");
        }
        if f.agent_id.is_some() {
            clauses.push("c.agent_id = ?");
        }
        if f.since_ms.is_some() {
            clauses.push("c.created_at >= ?");
        }
        if f.until_ms.is_some() {
            clauses.push("c.created_at < ?");
        }
        let cols: Vec<String> = CERT_LEAF_COLS
            .split(',')
            .map(|c| format!("c.{}", c.trim()))
            .collect();
        let sql = self
            .sql(&format!(
                "SELECT t.name AS tree_name, u.username AS issuer_name, {} \
                 FROM warrant_certs c JOIN warrant_log_trees t ON t.id = c.log_tree \
                 LEFT JOIN warrant_users u ON u.id = c.issued_by \
                 WHERE {} ORDER BY c.created_at DESC LIMIT ?",
                cols.join(", "),
                clauses.join(" AND ")
            ))
            .into_owned();
        // `at` is the row's creation second in milliseconds.
        let secs_ceil = |ms: i64| ms.div_euclid(1000) + i64::from(ms.rem_euclid(1000) != 0);
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let mut q = sqlx::query(&sql).persistent(false);
                for v in [&f.principal_uid, &f.agent_id].into_iter().flatten() {
                    q = q.bind(v.as_str());
                }
                for v in [f.since_ms, f.until_ms].into_iter().flatten() {
                    q = q.bind(secs_ceil(v));
                }
                let rows = q
                    .bind(i64::try_from(need).unwrap_or(i64::MAX))
                    .fetch_all(p)
                    .await?;
                rows.iter()
                    .map(|r| {
                        let tree = get_req_str!(r, "warrant_log_trees", "tree_name")?;
                        let issuer = get_str!(r, "warrant_users", "issuer_name")?;
                        let (index, leaf) = decode_cert_leaf!(r)?;
                        Ok(crate::audit::AuditEntry::of_cert(tree, index, leaf, issuer))
                    })
                    .collect()
            })
        })
        .await
    }

    async fn log_query_events(
        &self,
        f: &crate::audit::AuditFilter,
        need: usize,
    ) -> Result<Vec<crate::audit::AuditEntry>, StoreError> {
        let mut clauses = vec!["1 = 1"];
        if f.principal_uid.is_some() {
            clauses.push("e.principal_uid = ?");
        }
        if f.agent_id.is_some() {
            clauses.push("e.agent_id = ?");
        }
        if f.event.is_some() {
            clauses.push("e.event = ?");
        }
        if f.since_ms.is_some() {
            clauses.push("e.at >= ?");
        }
        if f.until_ms.is_some() {
            clauses.push("e.at < ?");
        }
        let cols: Vec<String> = EVENT_COLS
            .split(',')
            .map(|c| format!("e.{}", c.trim()))
            .collect();
        let sql = self
            .sql(&format!(
                "SELECT t.name AS tree_name, {} FROM warrant_log_events e \
                 JOIN warrant_log_trees t ON t.id = e.tree \
                 WHERE {} ORDER BY e.at DESC LIMIT ?",
                cols.join(", "),
                clauses.join(" AND ")
            ))
            .into_owned();
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
                let rows = q
                    .bind(i64::try_from(need).unwrap_or(i64::MAX))
                    .fetch_all(p)
                    .await?;
                rows.iter()
                    .map(|r| {
                        let tree = get_req_str!(r, "warrant_log_trees", "tree_name")?;
                        let (_, index, event) = decode_event!(r)?;
                        Ok(crate::audit::AuditEntry::of_event(tree, index, event))
                    })
                    .collect()
            })
        })
        .await
    }
}

/// The instant (`at_ms`) a query's `LIMIT need` may have cut through: its last
/// row's, when the query returned `need` rows.
fn cut_instant(rows: &[crate::audit::AuditEntry], need: usize) -> Option<i64> {
    (rows.len() >= need)
        .then(|| rows.last().map(|e| e.event.at_ms))
        .flatten()
}

/// `f` narrowed to `[at_ms, at_ms + width_ms)`, every row of one instant.
fn within(f: &crate::audit::AuditFilter, at_ms: i64, width_ms: i64) -> crate::audit::AuditFilter {
    crate::audit::AuditFilter {
        since_ms: Some(f.since_ms.map_or(at_ms, |s| s.max(at_ms))),
        until_ms: Some(
            f.until_ms
                .map_or(at_ms + width_ms, |u| u.min(at_ms + width_ms)),
        ),
        ..f.clone()
    }
}
