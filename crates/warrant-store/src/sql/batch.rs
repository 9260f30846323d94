//! A group-commit batch in one transaction, the same semantics on every
//! backend: nonces first (conflict-ignoring, in a global order), then the
//! certificates of the records whose nonce landed. A nonce-only record
//! (`cert: None`) takes part in the first step only.

use std::collections::HashSet;

use sqlx::Row;
use sqlx::postgres::PgPool;

use super::{Pools, SqlCore, on_pool, sqlite_nonces};
use crate::audit::AuditEvent;
use crate::error::{StoreError, classify};
use crate::log::{Appended, CertLeaf, LeafEntry, TreeHead};
use crate::options::expiry_bucket;
use crate::sql::decode::{CERT_COL_COUNT, CERT_COLS, bind_cert, get_col};
use crate::sql::log::{EVENT_COL_COUNT, EVENT_COLS, bind_event};
use crate::types::*;

/// Most rows per multi-row INSERT: well under every backend's bind-parameter
/// limit (SQLite 32766, PostgreSQL and MySQL 65535) and MySQL's default
/// packet size.
const CERT_ROWS_PER_STATEMENT: usize = 256;
const NONCE_ROWS_PER_STATEMENT: usize = 512;
/// Expired nonce rows read per pruning batch (see `SqlCore::prune_nonces`).
const NONCE_PRUNE_BATCH: usize = 2048;

/// Splits `n` rows into power-of-two chunks of at most `max` (a power of
/// two), largest first. Multi-row INSERTs then come in a handful of shapes
/// per table, which stay prepared in each connection's statement cache
/// instead of being parsed and planned for every batch.
fn pow2_chunks(mut n: usize, max: usize) -> Vec<usize> {
    let mut out = Vec::new();
    while n > 0 {
        let c = if n >= max {
            max
        } else {
            1 << (usize::BITS - 1 - n.leading_zeros())
        };
        out.push(c);
        n -= c;
    }
    out
}

/// `items` cut into the chunks of [`pow2_chunks`].
fn split_pow2<T>(items: &[T], max: usize) -> Vec<&[T]> {
    let mut rest = items;
    pow2_chunks(items.len(), max)
        .into_iter()
        .map(|c| {
            let (head, tail) = rest.split_at(c);
            rest = tail;
            head
        })
        .collect()
}

/// How a commit treats nonces that another request already consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplayPolicy {
    /// Durable mode: the request fails and its certificate (if any) is not
    /// written.
    DropCert,
    /// Buffered mode: the certificate was already handed out, so it is
    /// written anyway (and the replay logged).
    KeepCert,
}

/// A batch's nonces in the order every backend inserts them: sorted, so
/// that concurrent batches on several nodes lock them in the same order,
/// each with its record's index. A nonce repeated within the batch refuses
/// every record after the first that carries it (`accepted[i] == false`).
pub(crate) fn nonce_order<'a>(
    records: &[&'a IssuanceRecord],
) -> (Vec<bool>, Vec<(usize, &'a NonceRow)>) {
    let mut accepted = vec![true; records.len()];
    let mut seen: HashSet<&[u8; 32]> = HashSet::new();
    let mut nonces: Vec<(usize, &NonceRow)> = Vec::new();
    for (i, r) in records.iter().enumerate() {
        if let Some(n) = &r.nonce {
            if seen.insert(&n.nonce) {
                nonces.push((i, n));
            } else {
                accepted[i] = false;
            }
        }
    }
    nonces.sort_by_key(|(_, n)| n.nonce);
    (accepted, nonces)
}

/// The principal a nonce row records: only a nonce consumed without a
/// certificate (a DA redeemed for a token) needs it, since an agent
/// certificate's row already names its principal; the empty string spares
/// every agent issuance a second copy of the UID (its longest column).
pub(super) fn stored_nonce_principal<'a>(r: &'a IssuanceRecord, n: &'a NonceRow) -> &'a str {
    if r.cert.is_some() {
        ""
    } else {
        &n.principal_uid
    }
}

/// Event rows per multi-row INSERT (10 columns each).
const EVENT_ROWS_PER_STATEMENT: usize = 256;
/// Node rows per multi-row INSERT.
const NODE_ROWS_PER_STATEMENT: usize = 256;

/// Where a batch's leaves go: the tree position of each record's
/// certificate, the event rows, and the tree's new head with the nodes the
/// batch completed.
pub(crate) struct LeafPlan<'a> {
    pub tree: i64,
    /// Per record (same index): its certificate's leaf index.
    pub cert_index: Vec<Option<i64>>,
    pub events: Vec<(i64, &'a AuditEvent)>,
    pub appended: Appended,
}

/// The leaves of the records a batch writes (accepted ones; every one in
/// buffered mode, which acknowledged them all), in record order: a
/// certificate, then the record's event. `None` when the log is off.
pub(crate) fn plan_leaves<'a>(
    records: &[&'a IssuanceRecord],
    accepted: &[bool],
    policy: ReplayPolicy,
    head: Option<&TreeHead>,
) -> Option<LeafPlan<'a>> {
    let head = head?;
    let mut next = head.frontier.size() as i64;
    let mut hashes = Vec::new();
    let mut cert_index = vec![None; records.len()];
    let mut events = Vec::new();
    for (i, (r, ok)) in records.iter().zip(accepted).enumerate() {
        if !*ok && policy != ReplayPolicy::KeepCert {
            continue;
        }
        if let Some(c) = &r.cert {
            hashes.push(CertLeaf::hash_of(c, r.issued_by));
            cert_index[i] = Some(next);
            next += 1;
        }
        if let Some(e) = &r.audit {
            hashes.push(LeafEntry::Event(e.clone()).hash());
            events.push((next, e));
            next += 1;
        }
    }
    Some(LeafPlan {
        tree: head.id,
        cert_index,
        events,
        appended: crate::log::append(head, &hashes),
    })
}

/// The certificate rows a batch inserts, in record order: those of accepted
/// records (every one in buffered mode), each with its leaf index in the
/// log (`None` when the log is off) and its issuer.
pub(super) fn certs_to_write<'a>(
    records: &[&'a IssuanceRecord],
    accepted: &[bool],
    policy: ReplayPolicy,
    plan: Option<&LeafPlan<'_>>,
) -> Vec<(&'a CertRecord, Option<i64>, Option<i64>)> {
    records
        .iter()
        .zip(accepted)
        .enumerate()
        .filter(|(_, (_, ok))| **ok || policy == ReplayPolicy::KeepCert)
        .filter_map(|(i, (r, _))| {
            let index = plan.and_then(|p| p.cert_index[i]);
            r.cert.as_ref().map(|c| (c, index, r.issued_by))
        })
        .collect()
}

/// A deadlock or serialization failure: the transaction may simply be retried.
fn is_retryable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => {
            matches!(
                db.code().as_deref(),
                Some("40P01") | Some("40001") | Some("1213") | Some("1205")
            ) || db.message().contains("Deadlock")
        }
        _ => false,
    }
}

impl SqlCore {
    /// Writes a batch in one transaction and reports, per record, whether it
    /// was accepted (`false`: its nonce was already consumed).
    ///
    /// Nonces go first with a conflict-ignoring multi-row insert, sorted so
    /// that concurrent batches on several nodes lock them in the same order
    /// (no deadlocks between overlapping batches). If fewer rows landed than
    /// were sent, the ones that are ours are found by this batch's unique
    /// `batch_id`: a row another transaction inserted carries its own id, and
    /// the unique index makes us wait for that transaction's outcome before
    /// deciding. Then the certificates of the accepted records go in.
    /// PostgreSQL sends the batch as one statement (`commit_batch_pg`);
    /// SQLite runs the same steps on its one write connection in one
    /// hand-off (`commit_batch_sqlite`); MariaDB sends them one by one
    /// (`commit_batch_mysql`).
    ///
    /// The records written become leaves of the log after `head` (`None`:
    /// the log is off), in the same transaction; the tree's new head is
    /// returned with the outcome (the caller adopts it only then).
    pub(crate) async fn commit_batch(
        &self,
        records: &[&crate::types::IssuanceRecord],
        policy: ReplayPolicy,
        head: Option<&TreeHead>,
    ) -> Result<(Vec<bool>, Option<TreeHead>), StoreError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let r = self
                .timed(self.commit_batch_once(records, policy, head))
                .await;
            match r {
                Err(StoreError::Retryable(_)) if attempt < 4 => {
                    tracing::debug!(
                        attempt,
                        "retrying batch after deadlock/serialization failure"
                    );
                    continue;
                }
                other => return other,
            }
        }
    }

    async fn commit_batch_once(
        &self,
        records: &[&crate::types::IssuanceRecord],
        policy: ReplayPolicy,
        head: Option<&TreeHead>,
    ) -> Result<(Vec<bool>, Option<TreeHead>), StoreError> {
        let (accepted, nonces) = nonce_order(records);
        match &self.pools {
            Pools::Postgres(pool) => {
                commit_batch_pg(
                    pool,
                    records,
                    policy,
                    accepted,
                    self.expiry_bucket_secs,
                    head,
                )
                .await
            }
            Pools::Sqlite { write, .. } => {
                self.commit_batch_sqlite(write, records, policy, head, accepted, &nonces)
                    .await
            }
            Pools::MySql(pool) => {
                self.commit_batch_mysql(pool, records, policy, head, accepted, &nonces)
                    .await
            }
        }
    }

    /// MariaDB's `commit_batch`: `accepted` and `nonces` as `nonce_order`
    /// made them; the statements go one round trip each, multi-row.
    async fn commit_batch_mysql(
        &self,
        p: &sqlx::MySqlPool,
        records: &[&crate::types::IssuanceRecord],
        policy: ReplayPolicy,
        head: Option<&TreeHead>,
        mut accepted: Vec<bool>,
        nonces: &[(usize, &NonceRow)],
    ) -> Result<(Vec<bool>, Option<TreeHead>), StoreError> {
        let batch_id = self.next_batch_id();
        let map_err = |e: sqlx::Error| -> StoreError {
            if is_retryable(&e) {
                StoreError::Retryable(e.to_string())
            } else {
                classify(e)
            }
        };
        let mut tx = p.begin().await.map_err(map_err)?;
        let mut landed_count = 0u64;
        for chunk in split_pow2(nonces, NONCE_ROWS_PER_STATEMENT) {
            let sql = multi_row(
                "INSERT IGNORE INTO warrant_da_nonces (nonce, expires_at, principal_uid, batch_id) VALUES ",
                4,
                chunk.len(),
                "",
            );
            let mut q = sqlx::query(&sql);
            for (i, n) in chunk {
                q = q
                    .bind(&n.nonce[..])
                    .bind(n.expires_at)
                    .bind(stored_nonce_principal(records[*i], n))
                    .bind(batch_id);
            }
            landed_count += q.execute(&mut *tx).await.map_err(map_err)?.rows_affected();
        }
        if (landed_count as usize) < nonces.len() {
            let mut ours: HashSet<Vec<u8>> = HashSet::new();
            for chunk in nonces.chunks(NONCE_ROWS_PER_STATEMENT) {
                let placeholders = vec!["?"; chunk.len()].join(", ");
                let sql = format!(
                    "SELECT nonce FROM warrant_da_nonces WHERE batch_id = ? AND nonce IN ({placeholders})"
                );
                let mut q = sqlx::query(&sql).persistent(false).bind(batch_id);
                for (_, n) in chunk {
                    q = q.bind(&n.nonce[..]);
                }
                for row in q.fetch_all(&mut *tx).await.map_err(map_err)? {
                    ours.insert(get_col!(row, "warrant_da_nonces", 0, Vec<u8>)?);
                }
            }
            for (i, n) in nonces {
                if !ours.contains(&n.nonce[..]) {
                    accepted[*i] = false;
                }
            }
        }
        let plan = plan_leaves(records, &accepted, policy, head);
        let to_write = certs_to_write(records, &accepted, policy, plan.as_ref());
        let tree = plan.as_ref().map(|p| p.tree);
        for chunk in split_pow2(&to_write, CERT_ROWS_PER_STATEMENT) {
            let sql = multi_row(
                &format!(
                    "INSERT INTO warrant_certs ({CERT_COLS}, log_tree, log_index, issued_by) VALUES "
                ),
                CERT_COL_COUNT + 3,
                chunk.len(),
                "",
            );
            let mut q = sqlx::query(&sql);
            for (c, index, by) in chunk {
                q = bind_cert!(q, *c)
                    .bind(index.and(tree))
                    .bind(*index)
                    .bind(*by);
            }
            q.execute(&mut *tx).await.map_err(map_err)?;
        }
        if let Some(plan) = &plan {
            for chunk in split_pow2(&plan.events, EVENT_ROWS_PER_STATEMENT) {
                let sql = multi_row(
                    &format!("INSERT INTO warrant_log_events ({EVENT_COLS}) VALUES "),
                    EVENT_COL_COUNT,
                    chunk.len(),
                    "",
                );
                let mut q = sqlx::query(&sql);
                for (idx, e) in chunk {
                    q = bind_event!(q, plan.tree, *idx, *e);
                }
                q.execute(&mut *tx).await.map_err(map_err)?;
            }
            for chunk in split_pow2(&plan.appended.nodes, NODE_ROWS_PER_STATEMENT) {
                let sql = multi_row(
                    "INSERT INTO warrant_log_nodes (tree, lvl, idx, hash) VALUES ",
                    4,
                    chunk.len(),
                    "",
                );
                let mut q = sqlx::query(&sql);
                for (id, h) in chunk {
                    q = q
                        .bind(plan.tree)
                        .bind(i32::from(id.level))
                        .bind(id.index as i64)
                        .bind(&h[..]);
                }
                q.execute(&mut *tx).await.map_err(map_err)?;
            }
            let f = &plan.appended.next.frontier;
            if f.size() != head.map(|h| h.frontier.size()).unwrap_or(0) {
                let sql = "UPDATE warrant_log_trees SET size = ?, frontier = ?, updated_at = ? WHERE id = ?";
                sqlx::query(sql)
                    .bind(f.size() as i64)
                    .bind(f.encode())
                    .bind(crate::time::now_unix_ms())
                    .bind(plan.tree)
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
            }
        }
        let next = plan.map(|p| p.appended.next);
        tx.commit().await.map_err(map_err)?;
        Ok((accepted, next))
    }
}

/// PostgreSQL: the whole batch in ONE statement (one round trip, atomic as
/// any single statement): the records travel as arrays, the nonces are
/// inserted with `ON CONFLICT DO NOTHING` in a data-modifying CTE, and only
/// the certificates whose nonce landed (or that have none) are inserted by
/// the main statement. A nonce-only record's row carries NULL in every
/// certificate column (`ca IS NULL` marks it) and the certificate INSERT
/// skips it. `accepted` arrives with in-batch duplicate nonces already
/// marked `false` (first occurrence wins).
///
/// Correct across nodes for the same reason as MariaDB's path: a nonce
/// inserted by a concurrent, uncommitted transaction makes ours wait on the
/// unique index and then skip it (other committed) or insert it (other
/// rolled back). Rows are fed in nonce order so overlapping batches lock
/// nonces in the same order.
///
/// The leaves are placed before the statement runs, so they assume
/// every nonce lands. In durable mode the statement fails (a division by
/// zero, [`NOT_ALL_LANDED`]) when one did not; the nonces the table already
/// holds are then read, their records dropped, and the batch sent again
/// (another node's replay of a DA: rare).
async fn commit_batch_pg(
    pool: &PgPool,
    records: &[&crate::types::IssuanceRecord],
    policy: ReplayPolicy,
    mut accepted: Vec<bool>,
    bucket_secs: i64,
    head: Option<&TreeHead>,
) -> Result<(Vec<bool>, Option<TreeHead>), StoreError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match commit_batch_pg_once(pool, records, policy, &accepted, bucket_secs, head).await {
            Err(StoreError::Retryable(e)) if e == NOT_ALL_LANDED && attempt < 4 => {
                let sent: Vec<Vec<u8>> = records
                    .iter()
                    .zip(&accepted)
                    .filter(|(_, ok)| **ok)
                    .filter_map(|(r, _)| r.nonce.as_ref().map(|n| n.nonce.to_vec()))
                    .collect();
                let rows = sqlx::query("SELECT nonce FROM warrant_da_nonces WHERE nonce = ANY($1)")
                    .bind(&sent)
                    .fetch_all(pool)
                    .await
                    .map_err(classify)?;
                let mut held: HashSet<Vec<u8>> = HashSet::with_capacity(rows.len());
                for row in rows {
                    held.insert(get_col!(row, "warrant_da_nonces", 0, Vec<u8>)?);
                }
                for (i, r) in records.iter().enumerate() {
                    if let Some(n) = &r.nonce
                        && held.contains(&n.nonce[..])
                    {
                        accepted[i] = false;
                    }
                }
            }
            other => return other,
        }
    }
}

/// The marker of a PostgreSQL batch whose nonces did not all land.
const NOT_ALL_LANDED: &str = "not every nonce of the batch landed";

async fn commit_batch_pg_once(
    pool: &PgPool,
    records: &[&crate::types::IssuanceRecord],
    policy: ReplayPolicy,
    accepted: &[bool],
    bucket_secs: i64,
    head: Option<&TreeHead>,
) -> Result<(Vec<bool>, Option<TreeHead>), StoreError> {
    const SQL: &str = "WITH input AS ( \
        SELECT * FROM UNNEST($1::bytea[], $2::bigint[], $3::text[], $4::text[], $5::text[], \
            $6::text[], $7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::bytea[], \
            $12::text[], $13::text[], $14::bytea[], $15::bigint[], $16::bigint[], $17::text[], \
            $20::text[], $21::bigint[], $22::bigint[], $23::bigint[], $24::bigint[], $25::bigint[]) \
        AS i(nonce, n_expires, n_principal, ca, serial, common_name, profile, status, \
            not_before, not_after, der, principal_uid, agent_id, key_hash, created_at, \
            revoked_at, revocation_reason, capabilities, expiry_bucket, lineage_start, \
            log_tree, log_index, issued_by) \
    ), landed AS ( \
        INSERT INTO warrant_da_nonces (nonce, expires_at, principal_uid, batch_id) \
        SELECT nonce, n_expires, n_principal, $18 FROM input WHERE nonce IS NOT NULL \
        ORDER BY nonce ON CONFLICT DO NOTHING RETURNING nonce \
    ), certs AS ( \
        INSERT INTO warrant_certs (ca, serial, common_name, profile, status, not_before, \
            not_after, der, principal_uid, agent_id, key_hash, created_at, revoked_at, \
            revocation_reason, capabilities, expiry_bucket, lineage_start, log_tree, log_index, \
            issued_by) \
        SELECT ca, serial, common_name, profile, status, not_before, not_after, der, \
            principal_uid, agent_id, key_hash, created_at, revoked_at, revocation_reason, \
            capabilities, expiry_bucket, lineage_start, log_tree, log_index, issued_by \
        FROM input WHERE ca IS NOT NULL \
            AND ($19 OR nonce IS NULL OR nonce IN (SELECT nonce FROM landed)) \
        RETURNING 1 \
    ), events AS ( \
        INSERT INTO warrant_log_events (tree, idx, at, event, actor, principal_uid, agent_id, \
            ca, serial, detail) \
        SELECT * FROM UNNEST($26::bigint[], $27::bigint[], $28::bigint[], $29::text[], \
            $30::text[], $31::text[], $32::text[], $33::text[], $34::text[], $35::text[]) \
        RETURNING 1 \
    ), nodes AS ( \
        INSERT INTO warrant_log_nodes (tree, lvl, idx, hash) \
        SELECT * FROM UNNEST($36::bigint[], $37::int[], $38::bigint[], $39::bytea[]) \
        RETURNING 1 \
    ), head AS ( \
        UPDATE warrant_log_trees SET size = $40, frontier = $41, updated_at = $42 \
        WHERE id = $43 RETURNING 1 \
    ) SELECT ARRAY(SELECT nonce FROM landed) AS landed, \
        1 / (CASE WHEN $44 < 0 OR (SELECT count(*) FROM landed) = $44 THEN 1 ELSE 0 END) AS guard";

    let keep = policy == ReplayPolicy::KeepCert;
    let plan = plan_leaves(records, accepted, policy, head);
    let tree = plan.as_ref().map(|p| p.tree);
    let mut nonce = Vec::new();
    let mut n_expires = Vec::new();
    let mut n_principal = Vec::new();
    let (mut ca, mut serial, mut cn, mut profile, mut status) =
        (vec![], vec![], vec![], vec![], vec![]);
    let (mut nb, mut na, mut der, mut uid, mut agent) = (vec![], vec![], vec![], vec![], vec![]);
    let (mut kh, mut created, mut revoked, mut reason) = (vec![], vec![], vec![], vec![]);
    let (mut caps, mut bucket, mut lineage) = (vec![], vec![], vec![]);
    let (mut log_tree, mut log_index, mut issued_by) = (vec![], vec![], vec![]);
    let mut sent_nonces: Vec<(usize, [u8; 32])> = Vec::new();
    for (i, r) in records.iter().enumerate() {
        let dup = !accepted[i];
        if dup && (!keep || r.cert.is_none()) {
            // A repeated nonce in this batch: its certificate is dropped (or
            // it has none), so the row would carry nothing.
            continue;
        }
        match (&r.nonce, dup) {
            (Some(n), false) => {
                nonce.push(Some(n.nonce.to_vec()));
                n_expires.push(Some(n.expires_at));
                n_principal.push(Some(stored_nonce_principal(r, n).to_string()));
                sent_nonces.push((i, n.nonce));
            }
            _ => {
                nonce.push(None);
                n_expires.push(None);
                n_principal.push(None);
            }
        }
        let c = r.cert.as_ref();
        ca.push(c.map(|c| c.ca.clone()));
        serial.push(c.map(|c| c.serial.clone()));
        cn.push(c.map(|c| c.common_name.clone()));
        profile.push(c.map(|c| c.profile.clone()));
        status.push(c.map(|c| c.status.as_str()));
        nb.push(c.map(|c| c.not_before));
        na.push(c.map(|c| c.not_after));
        der.push(c.map(|c| c.der.clone()));
        uid.push(c.and_then(|c| c.principal_uid.clone()));
        agent.push(c.and_then(|c| c.agent_id.clone()));
        kh.push(c.map(|c| c.key_hash.clone()));
        created.push(c.map(|c| c.created_at));
        revoked.push(c.and_then(|c| c.revoked_at));
        reason.push(c.and_then(|c| c.revocation_reason.clone()));
        caps.push(c.and_then(|c| c.capabilities.clone()));
        bucket.push(c.map(|c| expiry_bucket(c.not_after, c.created_at, bucket_secs)));
        lineage.push(c.and_then(|c| c.lineage_start));
        let index = plan.as_ref().and_then(|p| p.cert_index[i]);
        log_tree.push(index.and(tree));
        log_index.push(index);
        issued_by.push(c.and(r.issued_by));
    }
    let map_err = |e: sqlx::Error| -> StoreError {
        let not_all_landed =
            matches!(&e, sqlx::Error::Database(db) if db.code().as_deref() == Some("22012"));
        if not_all_landed {
            StoreError::Retryable(NOT_ALL_LANDED.to_string())
        } else if is_retryable(&e) {
            StoreError::Retryable(e.to_string())
        } else {
            classify(e)
        }
    };
    let expected_landed: i64 = if keep { -1 } else { sent_nonces.len() as i64 };
    let no_events: Vec<(i64, &AuditEvent)> = Vec::new();
    let events = plan.as_ref().map(|p| &p.events).unwrap_or(&no_events);
    let ev =
        |f: fn(&AuditEvent) -> String| events.iter().map(|(_, e)| f(e)).collect::<Vec<String>>();
    let no_nodes = Vec::new();
    let nodes = plan
        .as_ref()
        .map(|p| &p.appended.nodes)
        .unwrap_or(&no_nodes);
    let (size, frontier) = match &plan {
        Some(p) => (
            p.appended.next.frontier.size() as i64,
            p.appended.next.frontier.encode(),
        ),
        None => (0, Vec::new()),
    };
    let row = sqlx::query(SQL)
        .bind(nonce)
        .bind(n_expires)
        .bind(n_principal)
        .bind(ca)
        .bind(serial)
        .bind(cn)
        .bind(profile)
        .bind(status)
        .bind(nb)
        .bind(na)
        .bind(der)
        .bind(uid)
        .bind(agent)
        .bind(kh)
        .bind(created)
        .bind(revoked)
        .bind(reason)
        .bind(0i64)
        .bind(keep)
        .bind(caps)
        .bind(bucket)
        .bind(lineage)
        .bind(log_tree)
        .bind(log_index)
        .bind(issued_by)
        .bind(
            events
                .iter()
                .map(|_| tree.unwrap_or(-1))
                .collect::<Vec<i64>>(),
        )
        .bind(events.iter().map(|(i, _)| *i).collect::<Vec<i64>>())
        .bind(events.iter().map(|(_, e)| e.at_ms).collect::<Vec<i64>>())
        .bind(ev(|e| e.event.clone()))
        .bind(ev(|e| e.actor.clone()))
        .bind(ev(|e| e.principal_uid.clone()))
        .bind(ev(|e| e.agent_id.clone()))
        .bind(ev(|e| e.ca.clone()))
        .bind(ev(|e| e.serial.clone()))
        .bind(ev(|e| e.detail.clone()))
        .bind(
            nodes
                .iter()
                .map(|_| tree.unwrap_or(-1))
                .collect::<Vec<i64>>(),
        )
        .bind(
            nodes
                .iter()
                .map(|(id, _)| i32::from(id.level))
                .collect::<Vec<i32>>(),
        )
        .bind(
            nodes
                .iter()
                .map(|(id, _)| id.index as i64)
                .collect::<Vec<i64>>(),
        )
        .bind(
            nodes
                .iter()
                .map(|(_, h)| h.to_vec())
                .collect::<Vec<Vec<u8>>>(),
        )
        .bind(size)
        .bind(frontier)
        .bind(crate::time::now_unix_ms())
        .bind(tree.unwrap_or(-1))
        .bind(expected_landed)
        .fetch_one(pool)
        .await
        .map_err(map_err)?;
    let landed: Vec<Vec<u8>> = get_col!(row, "warrant_da_nonces", 0, Vec<Vec<u8>>)?;
    let landed: HashSet<Vec<u8>> = landed.into_iter().collect();
    let mut accepted = accepted.to_vec();
    for (i, n) in sent_nonces {
        if !landed.contains(&n[..]) {
            accepted[i] = false;
        }
    }
    Ok((accepted, plan.map(|p| p.appended.next)))
}

/// `head (?, ?, …), (?, ?, …) tail` for `rows` rows of `cols` columns.
pub(crate) fn multi_row(head: &str, cols: usize, rows: usize, tail: &str) -> String {
    let mut group = String::with_capacity(cols * 3 + 2);
    group.push('(');
    for c in 0..cols {
        if c > 0 {
            group.push_str(", ");
        }
        group.push('?');
    }
    group.push(')');
    let mut s = String::with_capacity(head.len() + rows * (group.len() + 2) + tail.len());
    s.push_str(head);
    for r in 0..rows {
        if r > 0 {
            s.push_str(", ");
        }
        s.push_str(&group);
    }
    s.push_str(tail);
    s
}

/// The nonce table outside a batch: lookups, pruning and the warm-up read.
impl SqlCore {
    pub(crate) async fn nonce_consumed(&self, nonce: &[u8; 32]) -> Result<bool, StoreError> {
        if let Pools::Sqlite { read, .. } = &self.pools {
            return self
                .timed(async { Ok(sqlite_nonces::consumed(read, nonce).await?) })
                .await;
        }
        let sql = self.sql("SELECT 1 FROM warrant_da_nonces WHERE nonce = ?");
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                Ok(sqlx::query(&sql)
                    .bind(&nonce[..])
                    .fetch_optional(p)
                    .await?
                    .is_some())
            })
        })
        .await
    }

    /// Deletes the nonce rows expired before `now`, [`NONCE_PRUNE_BATCH`]
    /// at a time: a minute of expired nonces at 4,167/s is 250k rows, and
    /// one statement deleting them all would hold SQLite's one write
    /// connection, and with it every commit, for seconds. SQLite deletes
    /// whole expiry minutes instead (`sqlite_nonces`): a row goes with its
    /// minute, within a minute of its expiry.
    pub(crate) async fn prune_nonces(&self, now: i64) -> Result<u64, StoreError> {
        if let Pools::Sqlite { write, .. } = &self.pools {
            return self.prune_sqlite_nonces(write, now).await;
        }
        let select = self
            .sql("SELECT nonce FROM warrant_da_nonces WHERE expires_at < ? ORDER BY expires_at LIMIT ?")
            .into_owned();
        let mut total = 0;
        loop {
            let keys: Vec<Vec<u8>> = self
                .timed(async {
                    on_pool!(&self.pools, read, |p| {
                        let rows = sqlx::query(&select)
                            .bind(now)
                            .bind(NONCE_PRUNE_BATCH as i64)
                            .fetch_all(p)
                            .await?;
                        rows.iter()
                            .map(|r| get_col!(r, "warrant_da_nonces", 0, Vec<u8>))
                            .collect()
                    })
                })
                .await?;
            for chunk in keys.chunks(NONCE_ROWS_PER_STATEMENT) {
                let placeholders = vec!["?"; chunk.len()].join(", ");
                let delete = self
                    .sql(&format!(
                        "DELETE FROM warrant_da_nonces WHERE nonce IN ({placeholders})"
                    ))
                    .into_owned();
                total += self
                    .timed(async {
                        on_pool!(&self.pools, write, |p| {
                            let mut q = sqlx::query(&delete).persistent(false);
                            for k in chunk {
                                q = q.bind(k.as_slice());
                            }
                            Ok(q.execute(p).await?.rows_affected())
                        })
                    })
                    .await?;
            }
            if keys.len() < NONCE_PRUNE_BATCH {
                return Ok(total);
            }
            // Let the group commit take the write connection between batches.
            tokio::task::yield_now().await;
        }
    }

    /// SQLite's `prune_nonces`: the ended buckets, oldest first, in runs
    /// of [`NONCE_PRUNE_BATCH`] contiguous keys.
    async fn prune_sqlite_nonces(
        &self,
        write: &sqlx::SqlitePool,
        now: i64,
    ) -> Result<u64, StoreError> {
        let mut total = 0;
        while let Some(bucket) = self
            .timed(async { Ok(sqlite_nonces::oldest_ended_bucket(write, now).await?) })
            .await?
        {
            loop {
                let deleted = self
                    .timed(async {
                        Ok(
                            sqlite_nonces::delete_from_bucket(write, bucket, NONCE_PRUNE_BATCH)
                                .await?,
                        )
                    })
                    .await?;
                total += deleted;
                // Let the group commit take the write connection between runs.
                tokio::task::yield_now().await;
                if deleted == 0 {
                    // Emptied by another writer meanwhile: the next pass
                    // goes on, this one does not spin on it.
                    return Ok(total);
                }
                if deleted < NONCE_PRUNE_BATCH as u64 {
                    break;
                }
            }
        }
        Ok(total)
    }

    pub(crate) async fn load_nonces(
        &self,
        now: i64,
        limit: usize,
    ) -> Result<Vec<([u8; 32], i64)>, StoreError> {
        if let Pools::Sqlite { read, .. } = &self.pools {
            let rows = self
                .timed(async { Ok(sqlite_nonces::load(read, now, limit).await?) })
                .await?;
            return Ok(rows
                .into_iter()
                .filter_map(|(n, e)| Some((<[u8; 32]>::try_from(n).ok()?, e)))
                .collect());
        }
        let sql = self.sql("SELECT nonce, expires_at FROM warrant_da_nonces WHERE expires_at >= ? ORDER BY expires_at DESC LIMIT ?");
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let rows = sqlx::query(&sql)
                    .bind(now)
                    .bind(limit as i64)
                    .fetch_all(p)
                    .await?;
                let mut out = Vec::with_capacity(rows.len());
                for r in &rows {
                    let n: Vec<u8> = get_col!(r, "warrant_da_nonces", "nonce", Vec<u8>)?;
                    let e: i64 = get_col!(r, "warrant_da_nonces", "expires_at", i64)?;
                    if let Ok(n) = <[u8; 32]>::try_from(n) {
                        out.push((n, e));
                    }
                }
                Ok(out)
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pow2_chunks_cover_all_rows_in_few_shapes() {
        assert_eq!(pow2_chunks(0, 256), Vec::<usize>::new());
        assert_eq!(pow2_chunks(1, 256), vec![1]);
        assert_eq!(pow2_chunks(300, 256), vec![256, 32, 8, 4]);
        assert_eq!(pow2_chunks(600, 256), vec![256, 256, 64, 16, 8]);
        for n in 0..2000 {
            let c = pow2_chunks(n, 256);
            assert_eq!(c.iter().sum::<usize>(), n);
            assert!(c.iter().all(|x| x.is_power_of_two() && *x <= 256));
        }
        let items: Vec<u32> = (0..300).collect();
        let parts = split_pow2(&items, 256);
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            vec![256, 32, 8, 4]
        );
        assert_eq!(parts.concat(), items);
    }

    #[test]
    fn multi_row_builds_groups() {
        assert_eq!(
            multi_row("INSERT INTO t (a, b) VALUES ", 2, 2, " X"),
            "INSERT INTO t (a, b) VALUES (?, ?), (?, ?) X"
        );
    }
}
