//! SQLite's group-commit batch, written in one hand-off to the write
//! connection.
//!
//! Through sqlx, every statement is a round trip between the committer's
//! task and the connection's own thread: two thread wake-ups, and a place in
//! the runtime's queue behind the requests being signed, per statement. A
//! batch is a dozen statements (the data-version probe, `BEGIN`, the
//! inserts of four tables, the tree's head, `COMMIT`), so at everyday load,
//! where a batch holds a few records, those hand-offs were most of the
//! commit's time and of the connection thread's CPU. Here the committer
//! takes the connection's handle once (`lock_handle`: sqlx's thread waits
//! meanwhile) and runs the whole transaction on it synchronously through
//! rusqlite, with single-row statements prepared once per batch.
//!
//! The semantics are those of `SqlCore::commit_batch` on every backend
//! (nonces first, in their global order, then the certificates of the
//! records whose nonce landed, then the log's leaves and head). On the one
//! SQLite write connection no other batch inserts a nonce meanwhile, so a
//! nonce insert that changed no row is one already consumed.

use sqlx::SqlitePool;

use super::SqlCore;
use super::batch::{ReplayPolicy, certs_to_write, multi_row, plan_leaves, stored_nonce_principal};
use super::sqlite_nonces;
use crate::error::{StoreError, classify};
use crate::log::TreeHead;
use crate::sql::decode::{CERT_COL_COUNT, CERT_COLS, bind_cert};
use crate::sql::log::{EVENT_COL_COUNT, EVENT_COLS, bind_event};
use crate::types::{IssuanceRecord, NonceRow};

/// Binds values to a rusqlite statement in order, with the `.bind(v)` chain
/// that sqlx's queries use, so that the column lists and their binders
/// (`bind_cert!`, `bind_event!`) stay the one definition for every backend.
/// The first failure is kept and reported by [`Binder::finish`].
struct Binder<'s, 'c> {
    stmt: &'s mut rusqlite::Statement<'c>,
    next: usize,
    failed: Option<rusqlite::Error>,
}

impl<'s, 'c> Binder<'s, 'c> {
    fn new(stmt: &'s mut rusqlite::Statement<'c>) -> Self {
        Binder {
            stmt,
            next: 1,
            failed: None,
        }
    }

    fn bind<T: rusqlite::ToSql>(mut self, value: T) -> Self {
        if self.failed.is_none()
            && let Err(e) = self.stmt.raw_bind_parameter(self.next, value)
        {
            self.failed = Some(e);
        }
        self.next += 1;
        self
    }

    /// Runs the statement with what was bound; the rows it changed.
    fn finish(self) -> rusqlite::Result<usize> {
        match self.failed {
            Some(e) => Err(e),
            None => self.stmt.raw_execute(),
        }
    }
}

/// A rusqlite error as the store reports it: a busy database may be retried
/// (another process holds the write lock past the busy timeout), a
/// constraint names what it protects, anything else is the database's.
fn store_error(err: rusqlite::Error) -> StoreError {
    use rusqlite::ffi;
    if let rusqlite::Error::SqliteFailure(e, _) = &err {
        match e.code {
            rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked => {
                return StoreError::Retryable(err.to_string());
            }
            rusqlite::ErrorCode::ConstraintViolation => match e.extended_code {
                ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY => {
                    return StoreError::Conflict("row");
                }
                ffi::SQLITE_CONSTRAINT_FOREIGNKEY => {
                    return StoreError::MissingReference("referenced row");
                }
                _ => {}
            },
            _ => {}
        }
    }
    StoreError::Database(err.to_string())
}

impl SqlCore {
    /// SQLite's `commit_batch`: `accepted` and `nonces` as `nonce_order`
    /// made them.
    pub(crate) async fn commit_batch_sqlite(
        &self,
        pool: &SqlitePool,
        records: &[&IssuanceRecord],
        policy: ReplayPolicy,
        head: Option<&TreeHead>,
        accepted: Vec<bool>,
        nonces: &[(usize, &NonceRow)],
    ) -> Result<(Vec<bool>, Option<TreeHead>), StoreError> {
        let mut conn = pool.acquire().await.map_err(classify)?;
        let mut locked = conn.lock_handle().await.map_err(classify)?;
        let raw = locked.as_raw_handle();
        // SAFETY: `raw` is the open handle of the pool's write connection,
        // which `locked` keeps to this task: sqlx's connection thread waits
        // on that lock and runs nothing on the handle until `locked` drops.
        // The rusqlite `Connection` made from it does not own it (it never
        // closes it), lives only in this call and is dropped (its
        // statements finalized) before `locked` is, and registers no hooks
        // that would replace the connection's own.
        #[allow(unsafe_code)]
        let db = unsafe { rusqlite::Connection::from_handle(raw.as_ptr()) }.map_err(store_error)?;
        // Noted before the batch, as the idle probe does: a count kept in
        // memory is dropped as soon as another process's commit shows.
        match data_version(&db) {
            Ok(v) => self.note_data_version(v),
            // Unknown: assume another process wrote.
            Err(_) => self.note_foreign_write(),
        }
        let batch_id = self.next_batch_id();
        let written = write_batch(&db, batch_id, records, policy, head, accepted, nonces);
        if written.is_err() && !db.is_autocommit() {
            // sqlx gets the connection back as it left it, with no
            // transaction open. SQLite may have rolled back already (an I/O
            // error in COMMIT does); a failure here leaves nothing more to
            // undo.
            let _ = db.execute_batch("ROLLBACK");
        }
        drop(db);
        drop(locked);
        written
    }
}

/// The write connection's `PRAGMA data_version`, read before every batch
/// (see `SqlCore::observe_data_version`).
fn data_version(db: &rusqlite::Connection) -> rusqlite::Result<i64> {
    db.query_row("PRAGMA data_version", [], |row| row.get(0))
}

/// The batch's transaction, left open on failure for the caller to roll
/// back.
fn write_batch(
    db: &rusqlite::Connection,
    batch_id: i64,
    records: &[&IssuanceRecord],
    policy: ReplayPolicy,
    head: Option<&TreeHead>,
    mut accepted: Vec<bool>,
    nonces: &[(usize, &NonceRow)],
) -> Result<(Vec<bool>, Option<TreeHead>), StoreError> {
    // The write lock first, under the busy timeout: the inserts read before
    // they write, and a snapshot taken before another process's commit could
    // not become a write transaction.
    db.execute_batch("BEGIN IMMEDIATE").map_err(store_error)?;
    if !nonces.is_empty() {
        let live = sqlite_nonces::live_buckets(db, crate::time::now_unix()).map_err(store_error)?;
        let mut insert = db
            .prepare(&sqlite_nonces::consume_sql(&live))
            .map_err(store_error)?;
        for (i, n) in nonces {
            let landed = Binder::new(&mut insert)
                .bind(sqlite_nonces::expiry_bucket(n.expires_at))
                .bind(&n.nonce[..])
                .bind(n.expires_at)
                .bind(stored_nonce_principal(records[*i], n))
                .bind(batch_id)
                .finish()
                .map_err(store_error)?;
            if landed == 0 {
                accepted[*i] = false;
            }
        }
    }
    let plan = plan_leaves(records, &accepted, policy, head);
    let to_write = certs_to_write(records, &accepted, policy, plan.as_ref());
    if !to_write.is_empty() {
        let tree = plan.as_ref().map(|p| p.tree);
        let mut insert = db
            .prepare(&multi_row(
                &format!("INSERT INTO warrant_certs ({CERT_COLS}, log_tree, log_index, issued_by) VALUES "),
                CERT_COL_COUNT + 3,
                1,
                "",
            ))
            .map_err(store_error)?;
        for (c, index, by) in to_write {
            bind_cert!(Binder::new(&mut insert), c)
                .bind(index.and(tree))
                .bind(index)
                .bind(by)
                .finish()
                .map_err(store_error)?;
        }
    }
    if let Some(plan) = &plan {
        if !plan.events.is_empty() {
            let mut insert = db
                .prepare(&multi_row(
                    &format!("INSERT INTO warrant_log_events ({EVENT_COLS}) VALUES "),
                    EVENT_COL_COUNT,
                    1,
                    "",
                ))
                .map_err(store_error)?;
            for (idx, e) in &plan.events {
                bind_event!(Binder::new(&mut insert), plan.tree, *idx, *e)
                    .finish()
                    .map_err(store_error)?;
            }
        }
        if !plan.appended.nodes.is_empty() {
            let mut insert = db
                .prepare("INSERT INTO warrant_log_nodes (tree, lvl, idx, hash) VALUES (?, ?, ?, ?)")
                .map_err(store_error)?;
            for (id, h) in &plan.appended.nodes {
                Binder::new(&mut insert)
                    .bind(plan.tree)
                    .bind(i32::from(id.level))
                    .bind(id.index as i64)
                    .bind(&h[..])
                    .finish()
                    .map_err(store_error)?;
            }
        }
        let f = &plan.appended.next.frontier;
        if f.size() != head.map(|h| h.frontier.size()).unwrap_or(0) {
            db.execute(
                "UPDATE warrant_log_trees SET size = ?, frontier = ?, updated_at = ? WHERE id = ?",
                rusqlite::params![
                    f.size() as i64,
                    f.encode(),
                    crate::time::now_unix_ms(),
                    plan.tree
                ],
            )
            .map_err(store_error)?;
        }
    }
    db.execute_batch("COMMIT").map_err(store_error)?;
    Ok((accepted, plan.map(|p| p.appended.next)))
}
