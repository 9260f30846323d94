//! The SQL implementation shared by SQLite, PostgreSQL and MariaDB/MySQL.
//!
//! Every query is written once with `?` placeholders (rewritten to `$n` for
//! PostgreSQL) and run through [`on_pool!`], which expands the same body once
//! per driver. That keeps one code path for the three backends without the
//! limits of sqlx's `Any` driver, and the few true dialect differences
//! (`INSERT OR IGNORE` / `ON CONFLICT DO NOTHING` / `INSERT IGNORE`, how a new
//! id comes back) are explicit `match`es.

use std::borrow::Cow;
use std::collections::HashSet;
use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Executor, Row};

use crate::dsn::Dsn;
use crate::error::{StoreError, classify};
use crate::migrations::{self, MIGRATIONS, MIGRATIONS_TABLE};
use crate::options::StoreOptions;
use crate::storage_fault::{FileKind, StorageFault, SyncedFile};
use crate::types::*;

pub(crate) enum Pools {
    /// SQLite allows one writer at a time: all writes go through a pool of
    /// one connection (no `SQLITE_BUSY` storms), reads use the other pool
    /// and proceed concurrently thanks to WAL.
    Sqlite {
        read: SqlitePool,
        write: SqlitePool,
        /// The issuance path's point reads, run on the caller's thread.
        inline: crate::inline_read::InlineReaders,
        /// The group-commit batches' connection, until the write path's
        /// writer thread takes it (`SqlCore::take_sqlite_writer`).
        writer: std::sync::Mutex<Option<Box<crate::sqlite_writer::WriterConnection>>>,
        /// Other connections' commits seen by the writer connection.
        foreign_writes: std::sync::Arc<AtomicU64>,
    },
    Postgres(PgPool),
    MySql(MySqlPool),
}

/// Runs `$body` with `$p` bound to the right pool for each backend.
macro_rules! on_pool {
    ($pools:expr, read, |$p:ident| $body:expr) => {
        match $pools {
            Pools::Sqlite { read: $p, .. } => $body,
            Pools::Postgres($p) => $body,
            Pools::MySql($p) => $body,
        }
    };
    ($pools:expr, write, |$p:ident| $body:expr) => {
        match $pools {
            Pools::Sqlite { write: $p, .. } => $body,
            Pools::Postgres($p) => $body,
            Pools::MySql($p) => $body,
        }
    };
}

/// Reads a text column. MariaDB flags `utf8mb4_bin` columns as BINARY, which
/// sqlx refuses to decode as `String`, so fall back to bytes + UTF-8.
macro_rules! get_str {
    ($row:expr, $table:expr, $col:expr) => {{
        match $row.try_get::<Option<String>, _>($col) {
            Ok(v) => Ok(v),
            Err(_) => match $row.try_get::<Option<Vec<u8>>, _>($col) {
                Ok(Some(b)) => String::from_utf8(b)
                    .map(Some)
                    .map_err(|e| StoreError::Corrupt {
                        table: $table,
                        detail: format!("{}: {e}", $col),
                    }),
                Ok(None) => Ok(None),
                Err(e) => Err(StoreError::Corrupt {
                    table: $table,
                    detail: format!("{}: {e}", $col),
                }),
            },
        }
    }};
}

macro_rules! get_req_str {
    ($row:expr, $table:expr, $col:expr) => {{
        get_str!($row, $table, $col)?.ok_or_else(|| StoreError::Corrupt {
            table: $table,
            detail: format!("{} is NULL", $col),
        })
    }};
}

macro_rules! get_col {
    ($row:expr, $table:expr, $col:expr, $ty:ty) => {{
        $row.try_get::<$ty, _>($col)
            .map_err(|e| StoreError::Corrupt {
                table: $table,
                detail: format!("{}: {e}", $col),
            })
    }};
}

macro_rules! decode_user {
    ($row:expr) => {{
        let row = &$row;
        let role_s: String = get_req_str!(row, "warrant_users", "role")?;
        Ok::<UserRow, StoreError>(UserRow {
            id: get_col!(row, "warrant_users", "id", i64)?,
            username: get_req_str!(row, "warrant_users", "username")?,
            password_hash: get_req_str!(row, "warrant_users", "password_hash")?,
            role: role_s
                .parse()
                .map_err(|e: UnknownRole| StoreError::Corrupt {
                    table: "warrant_users",
                    detail: e.to_string(),
                })?,
            created_at: get_col!(row, "warrant_users", "created_at", i64)?,
            failed_logins: get_col!(row, "warrant_users", "failed_logins", i64)?,
            locked_until: get_col!(row, "warrant_users", "locked_until", Option<i64>)?,
        })
    }};
}

macro_rules! decode_token {
    ($row:expr) => {{
        let row = &$row;
        let hash: Vec<u8> = get_col!(row, "warrant_api_tokens", "token_hash", Vec<u8>)?;
        Ok::<ApiTokenRow, StoreError>(ApiTokenRow {
            id: get_col!(row, "warrant_api_tokens", "id", i64)?,
            token_hash: hash.try_into().map_err(|_| StoreError::Corrupt {
                table: "warrant_api_tokens",
                detail: "token_hash is not 32 bytes".into(),
            })?,
            user_id: get_col!(row, "warrant_api_tokens", "user_id", i64)?,
            name: get_req_str!(row, "warrant_api_tokens", "name")?,
            created_at: get_col!(row, "warrant_api_tokens", "created_at", i64)?,
            expires_at: get_col!(row, "warrant_api_tokens", "expires_at", i64)?,
            one_time: get_col!(row, "warrant_api_tokens", "one_time", bool)?,
        })
    }};
}

/// Takes the next auth change number inside transaction `$tx`. It must be
/// the transaction's first statement: the counter row's lock is then held
/// from the start to the commit, so every transaction that writes users or
/// tokens runs one after the other (no lock-order deadlocks among them), and
/// change numbers become visible in the order they were taken.
macro_rules! next_auth_seq {
    ($tx:expr) => {{
        sqlx::query("UPDATE warrant_auth_seq SET n = n + 1 WHERE id = 1")
            .execute(&mut *$tx)
            .await?;
        let row = sqlx::query("SELECT n FROM warrant_auth_seq WHERE id = 1")
            .fetch_one(&mut *$tx)
            .await?;
        get_col!(row, "warrant_auth_seq", "n", i64)?
    }};
}

/// Appends change `$seq` for `$entity` row `$id` inside `$tx`.
macro_rules! record_auth_change {
    ($core:expr, $tx:expr, $seq:expr, $entity:expr, $id:expr) => {{
        let sql = $core.sql(
            "INSERT INTO warrant_auth_changes (seq, entity, entity_id, created_at) VALUES (?, ?, ?, ?)",
        );
        sqlx::query(&sql)
            .bind($seq)
            .bind($entity.as_str())
            .bind($id)
            .bind(now_unix())
            .execute(&mut *$tx)
            .await?;
    }};
}

macro_rules! decode_cert {
    ($row:expr) => {{
        let row = &$row;
        const T: &str = "warrant_certs";
        let status_s: String = get_req_str!(row, T, "status")?;
        Ok::<CertRecord, StoreError>(CertRecord {
            ca: get_req_str!(row, T, "ca")?,
            serial: get_req_str!(row, T, "serial")?,
            common_name: get_req_str!(row, T, "common_name")?,
            profile: get_req_str!(row, T, "profile")?,
            status: status_s
                .parse()
                .map_err(|e: UnknownStatus| StoreError::Corrupt {
                    table: T,
                    detail: e.to_string(),
                })?,
            not_before: get_col!(row, T, "not_before", i64)?,
            not_after: get_col!(row, T, "not_after", i64)?,
            der: get_col!(row, T, "der", Vec<u8>)?,
            principal_uid: get_str!(row, T, "principal_uid")?,
            agent_id: get_str!(row, T, "agent_id")?,
            key_hash: get_col!(row, T, "key_hash", Vec<u8>)?,
            created_at: get_col!(row, T, "created_at", i64)?,
            revoked_at: get_col!(row, T, "revoked_at", Option<i64>)?,
            revocation_reason: get_str!(row, T, "revocation_reason")?,
        })
    }};
}

const USER_COLS: &str =
    "id, username, password_hash, role, created_at, failed_logins, locked_until";
const TOKEN_COLS: &str = "id, token_hash, user_id, name, created_at, expires_at, one_time";
pub(crate) const CERT_COLS: &str = "ca, serial, common_name, profile, status, not_before, not_after, der, \
     principal_uid, agent_id, key_hash, created_at, revoked_at, revocation_reason";
pub(crate) const CERT_COL_COUNT: usize = 14;

/// The status and principal of one certificate (`cert_status`), shared by
/// the sqlx path and SQLite's inline readers.
pub(crate) const SELECT_CERT_STANDING: &str =
    "SELECT status, principal_uid, bound_user_id FROM warrant_certs WHERE ca = ? AND serial = ?";

/// Settings of the two SQLite connections that write (the batch writer
/// thread and the sqlx pool for administrative writes), measured with
/// `write_bench` and profiles of the commit path:
///
/// - `temp_store=MEMORY`: statement journals (a multi-row INSERT inside a
///   transaction needs one) stay in memory instead of a temp file.
/// - A small page cache (2 MiB) that may grow to 8000 dirty pages before it
///   spills: SQLite scans the whole page cache at the end of every write
///   transaction once a B-tree page split has renumbered a page (always, in
///   a database under 1 GiB), so a 32 MiB cache cost ~20 % of the writer
///   thread at small durable batches; the spill threshold keeps a 1000-row
///   buffered batch from being written to the WAL mid-transaction. (The
///   batch writer thread turns spilling off: `sqlite_writer::NO_SPILL`.)
/// - A checkpoint every 16 000 WAL pages (about 64 MiB of WAL) instead of
///   every 4000: each hot page is copied to the database once per more
///   batches, and the checkpoint's two fsyncs come less often. 64 000 pages
///   gained another ~10 % in `write_bench`, but left a 256 MiB WAL file
///   beside a small database and stopped the writer for 75–140 ms per
///   checkpoint (T3's p99.9). On the batch writer's connection a WAL hook
///   replaces this setting with the same threshold (`checkpointer`: the
///   `sqlite-checkpt` thread copies the pages back); it stays in force for
///   the sqlx write pool's administrative writes.
pub(crate) const SQLITE_WRITER_PRAGMAS: &[(&str, &str)] = &[
    ("temp_store", "MEMORY"),
    ("cache_size", "-2000"),
    // Not a multiple of 256: SQLite reads the value as a boolean too, through
    // a u8, and 8192 would turn spilling off altogether.
    ("cache_spill", "8000"),
    ("wal_autocheckpoint", "16000"),
];

/// A principal's valid, unexpired agent certificates (`max_agents`), shared
/// like [`SELECT_CERT_STANDING`].
pub(crate) const COUNT_ACTIVE_AGENTS: &str = "SELECT COUNT(*) FROM warrant_certs WHERE principal_uid = ? AND status = 'V' AND agent_id IS NOT NULL AND not_after > ?";

/// Most rows per multi-row INSERT: well under every backend's bind-parameter
/// limit (SQLite 32766, PostgreSQL and MySQL 65535) and MySQL's default
/// packet size.
const CERT_ROWS_PER_STATEMENT: usize = 256;
const NONCE_ROWS_PER_STATEMENT: usize = 512;

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

pub(crate) struct SqlCore {
    pub(crate) kind: BackendKind,
    pub(crate) pools: Pools,
    statement_timeout: Duration,
    batch_seq: AtomicU64,
    batch_prefix: u64,
    /// SQLite only: the WAL file that [`SqlCore::sync_wal`] makes durable.
    wal_path: Option<std::path::PathBuf>,
    /// SQLite only: the descriptor [`SqlCore::sync_wal`] fsyncs, opened
    /// before the first write and kept (`storage_fault`). The lock keeps one
    /// sync at a time on it, so that a second one cannot return success for
    /// an error the first just consumed before it stopped the write path.
    admin_wal: Option<Arc<std::sync::Mutex<SyncedFile>>>,
    /// Set for good by a failed fsync (`storage_fault`); never set on
    /// PostgreSQL and MariaDB, whose commits report their own durability.
    fault: Arc<StorageFault>,
}

/// How a commit treats nonces that another request already consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplayPolicy {
    /// Durable mode: the request fails and its certificate is not written.
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

pub(crate) fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// A deadlock or serialization failure: the transaction may simply be retried.
fn is_retryable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => {
            matches!(
                db.code().as_deref(),
                Some("40P01") | Some("40001") | Some("1213") | Some("1205")
            ) || db.message().contains("Deadlock")
                || db.message().contains("database is locked")
        }
        _ => false,
    }
}

impl SqlCore {
    pub(crate) async fn connect(dsn: &Dsn, opts: &StoreOptions) -> Result<SqlCore, StoreError> {
        let fault = Arc::new(StorageFault::default());
        let (pools, wal_path) =
            tokio::time::timeout(opts.connect_timeout, connect_pools(dsn, opts, &fault))
                .await
                .map_err(|_| {
                    StoreError::Unavailable(format!(
                        "no connection within {:?}",
                        opts.connect_timeout
                    ))
                })??;
        let core = SqlCore {
            kind: dsn.kind(),
            pools,
            statement_timeout: opts.statement_timeout,
            batch_seq: AtomicU64::new(0),
            batch_prefix: random_u64() & 0x7fff_ffff_0000_0000,
            admin_wal: wal_path
                .as_deref()
                .map(|p| SyncedFile::open(p, FileKind::Wal))
                .transpose()?
                .map(|f| Arc::new(std::sync::Mutex::new(f))),
            wal_path,
            fault,
        };
        core.migrate().await?;
        core.sync_wal().await?;
        core.sync_wal_dir().await?;
        Ok(core)
    }

    /// See `Store::foreign_write_epoch`: the SQLite batch writer's count of
    /// other connections' commits; server databases cannot tell.
    pub(crate) fn foreign_write_epoch(&self) -> Option<u64> {
        match &self.pools {
            Pools::Sqlite { foreign_writes, .. } => Some(foreign_writes.load(Ordering::Acquire)),
            Pools::Postgres(_) | Pools::MySql(_) => None,
        }
    }

    /// Makes every commit so far durable (SQLite; a no-op elsewhere).
    ///
    /// SQLite runs with `synchronous=NORMAL` in WAL mode: a commit writes its
    /// frames to the WAL but does not fsync. Syncing the WAL ourselves after
    /// the commit gives exactly the guarantee of `synchronous=FULL` (which
    /// fsyncs the WAL at the end of each commit), but lets the writer thread
    /// write the next batch while the previous one is being synced, and one
    /// fsync covers every commit written before it.
    ///
    /// A failed fsync stops the write path (`storage_fault`); from then on
    /// this fails at once.
    pub(crate) async fn sync_wal(&self) -> Result<(), StoreError> {
        let Some(wal) = self.admin_wal.clone() else {
            return Ok(());
        };
        self.fault.check()?;
        let fault = self.fault.clone();
        tokio::task::spawn_blocking(move || {
            wal.lock().unwrap_or_else(|p| p.into_inner()).sync(&fault)
        })
        .await
        .map_err(|e| StoreError::Database(format!("WAL sync task failed: {e}")))?
    }

    /// The SQLite write path's fail-stop latch (`storage_fault`).
    pub(crate) fn storage_fault(&self) -> &Arc<StorageFault> {
        &self.fault
    }

    /// SQLite: the WAL file [`SqlCore::sync_wal`] and the syncers fsync.
    pub(crate) fn wal_path(&self) -> Option<&std::path::Path> {
        self.wal_path.as_deref()
    }

    /// SQLite: hands the batch writer's connection to the write path, once.
    pub(crate) fn take_sqlite_writer(&self) -> Option<crate::sqlite_writer::WriterConnection> {
        match &self.pools {
            Pools::Sqlite { writer, .. } => writer
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .map(|w| *w),
            Pools::Postgres(_) | Pools::MySql(_) => None,
        }
    }

    /// A `batch_id` no other batch of any node uses (see
    /// [`SqlCore::commit_batch`]).
    pub(crate) fn next_batch_id(&self) -> i64 {
        (self.batch_prefix | (self.batch_seq.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff)) as i64
    }

    /// SQLite: makes the WAL file's directory entry durable, once at open.
    /// SQLite would sync the directory at the WAL's first sync of its own,
    /// but with `synchronous=NORMAL` that is the first checkpoint; until then
    /// a power loss could drop the file that our fsyncs made durable.
    async fn sync_wal_dir(&self) -> Result<(), StoreError> {
        let Some(dir) = self.wal_path.as_ref().and_then(|p| p.parent()) else {
            return Ok(());
        };
        let dir = if dir.as_os_str().is_empty() {
            std::path::PathBuf::from(".")
        } else {
            dir.to_path_buf()
        };
        tokio::task::spawn_blocking(move || std::fs::File::open(&dir).and_then(|d| d.sync_all()))
            .await
            .map_err(|e| StoreError::Database(format!("directory sync task failed: {e}")))?
            .map_err(|e| {
                StoreError::Unavailable(format!("fsync of the SQLite directory failed: {e}"))
            })
    }

    /// Rewrites `?` placeholders into `$1, $2…` for PostgreSQL.
    pub(crate) fn sql<'a>(&self, s: &'a str) -> Cow<'a, str> {
        if self.kind != BackendKind::Postgres || !s.contains('?') {
            return Cow::Borrowed(s);
        }
        let mut out = String::with_capacity(s.len() + 16);
        let mut n = 0;
        for c in s.chars() {
            if c == '?' {
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            } else {
                out.push(c);
            }
        }
        Cow::Owned(out)
    }

    /// Bounds one database operation: a dead or wedged database turns into
    /// `Unavailable` after `statement_timeout` instead of a hang.
    pub(crate) async fn timed<T>(
        &self,
        fut: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.statement_timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Unavailable(format!(
                "no answer within {:?}",
                self.statement_timeout
            ))),
        }
    }

    /// [`SqlCore::timed`] for administrative writes, which must be durable
    /// before they are acknowledged too (SQLite: sync the WAL). After a
    /// storage fault they are refused before they write anything.
    pub(crate) async fn timed_write<T>(
        &self,
        fut: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.fault.check()?;
        let r = self.timed(fut).await?;
        self.sync_wal().await?;
        Ok(r)
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let create = migrations::create_migrations_table(self.kind);
        on_pool!(&self.pools, write, |p| {
            let mut conn = p.acquire().await?;
            // Serialise concurrent migrators (several nodes starting at once).
            match self.kind {
                BackendKind::Postgres => {
                    conn.execute("SELECT pg_advisory_lock(727274001)").await?;
                }
                BackendKind::MySql => {
                    conn.execute("SELECT GET_LOCK('warrant_migrate', 60)")
                        .await?;
                }
                BackendKind::Sqlite => {}
            }
            let result: Result<(), StoreError> = async {
                conn.execute(create.as_str()).await?;
                let applied: Vec<i64> = sqlx::query(&format!("SELECT version FROM {MIGRATIONS_TABLE}"))
                    .fetch_all(&mut *conn)
                    .await?
                    .iter()
                    .map(|r| r.try_get::<i64, _>(0))
                    .collect::<Result<_, _>>()?;
                let latest = migrations::latest_version();
                if let Some(&found) = applied.iter().max()
                    && found > latest
                {
                    return Err(StoreError::SchemaTooNew { found, supported: latest });
                }
                for m in MIGRATIONS.iter().filter(|m| !applied.contains(&m.version)) {
                    // MySQL commits DDL implicitly; the lock above is what makes
                    // this safe there. SQLite and PostgreSQL get a transaction.
                    let transactional = self.kind != BackendKind::MySql;
                    if transactional {
                        conn.execute("BEGIN").await?;
                    }
                    for stmt in m.statements {
                        let sql = migrations::render(self.kind, stmt);
                        if let Err(e) = conn.execute(sql.as_str()).await {
                            if !transactional && ddl_already_applied(&e) {
                                // An earlier start ran this statement and
                                // stopped before the migration's row.
                                tracing::warn!(
                                    version = m.version,
                                    statement = %sql,
                                    error = %e,
                                    "migration statement already applied; continuing"
                                );
                                continue;
                            }
                            if transactional {
                                let _ = conn.execute("ROLLBACK").await;
                            }
                            return Err(StoreError::Database(format!(
                                "migration {} ({}) failed: {e}",
                                m.version, m.name
                            )));
                        }
                    }
                    let ins = self.sql(
                        "INSERT INTO warrant_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    );
                    sqlx::query(&ins)
                        .bind(m.version)
                        .bind(m.name)
                        .bind(now_unix())
                        .execute(&mut *conn)
                        .await?;
                    if transactional {
                        conn.execute("COMMIT").await?;
                    }
                    tracing::info!(version = m.version, name = m.name, "applied migration");
                }
                Ok(())
            }
            .await;
            match self.kind {
                BackendKind::Postgres => {
                    let _ = conn.execute("SELECT pg_advisory_unlock(727274001)").await;
                }
                BackendKind::MySql => {
                    let _ = conn.execute("SELECT RELEASE_LOCK('warrant_migrate')").await;
                }
                BackendKind::Sqlite => {}
            }
            result
        })
    }

    pub(crate) async fn ping(&self) -> Result<(), StoreError> {
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                sqlx::query("SELECT 1").execute(p).await?;
            });
            Ok(())
        })
        .await
    }

    // ----- users -----

    pub(crate) async fn create_user(&self, user: &NewUser) -> Result<i64, StoreError> {
        let ins = self.sql(
            "INSERT INTO warrant_users (username, password_hash, role, created_at) VALUES (?, ?, ?, ?)",
        );
        // One way to learn the new id on every backend (no RETURNING on MySQL).
        let get = self.sql("SELECT id FROM warrant_users WHERE username = ?");
        self.timed_write(async {
            on_pool!(&self.pools, write, |p| {
                let mut tx = p.begin().await?;
                let seq = next_auth_seq!(tx);
                sqlx::query(&ins)
                    .bind(&user.username)
                    .bind(&user.password_hash)
                    .bind(user.role.as_str())
                    .bind(user.created_at)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| match classify(e) {
                        StoreError::Conflict(_) => StoreError::Conflict("username"),
                        other => other,
                    })?;
                let row = sqlx::query(&get)
                    .bind(&user.username)
                    .fetch_one(&mut *tx)
                    .await?;
                let id = get_col!(row, "warrant_users", "id", i64)?;
                record_auth_change!(self, tx, seq, AuthEntity::User, id);
                tx.commit().await?;
                Ok(id)
            })
        })
        .await
    }

    async fn fetch_users(
        &self,
        where_clause: &str,
        arg: Option<UserKey<'_>>,
    ) -> Result<Vec<UserRow>, StoreError> {
        let sql = self
            .sql(&format!(
                "SELECT {USER_COLS} FROM warrant_users {where_clause} ORDER BY id"
            ))
            .into_owned();
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let mut q = sqlx::query(&sql);
                match arg {
                    Some(UserKey::Id(id)) => q = q.bind(id),
                    Some(UserKey::Name(n)) => q = q.bind(n),
                    None => {}
                }
                let rows = q.fetch_all(p).await?;
                rows.iter().map(|r| decode_user!(r)).collect()
            })
        })
        .await
    }

    pub(crate) async fn get_user(&self, id: i64) -> Result<Option<UserRow>, StoreError> {
        Ok(self
            .fetch_users("WHERE id = ?", Some(UserKey::Id(id)))
            .await?
            .into_iter()
            .next())
    }

    pub(crate) async fn get_user_by_name(&self, name: &str) -> Result<Option<UserRow>, StoreError> {
        Ok(self
            .fetch_users("WHERE username = ?", Some(UserKey::Name(name)))
            .await?
            .into_iter()
            .next())
    }

    pub(crate) async fn list_users(&self) -> Result<Vec<UserRow>, StoreError> {
        self.fetch_users("", None).await
    }

    pub(crate) async fn delete_user(&self, id: i64) -> Result<bool, StoreError> {
        let del_tokens = self.sql("DELETE FROM warrant_api_tokens WHERE user_id = ?");
        let del_user = self.sql("DELETE FROM warrant_users WHERE id = ?");
        self.timed_write(async {
            on_pool!(&self.pools, write, |p| {
                let mut tx = p.begin().await?;
                let seq = next_auth_seq!(tx);
                sqlx::query(&del_tokens).bind(id).execute(&mut *tx).await?;
                let n = sqlx::query(&del_user)
                    .bind(id)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if n == 0 {
                    // Dropping the transaction rolls the counter back too.
                    return Ok(false);
                }
                // One user change: readers drop the user and all its tokens.
                record_auth_change!(self, tx, seq, AuthEntity::User, id);
                tx.commit().await?;
                Ok(true)
            })
        })
        .await
    }

    /// Changes a user's role and/or password hash; a new password deletes
    /// the user's tokens. `false` if there is no such user.
    pub(crate) async fn update_user(&self, id: i64, up: &UserUpdate) -> Result<bool, StoreError> {
        let exists = self.sql("SELECT id FROM warrant_users WHERE id = ?");
        let set_role = self.sql("UPDATE warrant_users SET role = ? WHERE id = ?");
        let set_hash = self.sql("UPDATE warrant_users SET password_hash = ? WHERE id = ?");
        let del_tokens = self.sql("DELETE FROM warrant_api_tokens WHERE user_id = ?");
        self.timed_write(async {
            on_pool!(&self.pools, write, |p| {
                let mut tx = p.begin().await?;
                let seq = next_auth_seq!(tx);
                // Existence, not rows_affected: MySQL counts an UPDATE that
                // sets the value a row already has as zero rows.
                if sqlx::query(&exists)
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?
                    .is_none()
                {
                    return Ok(false);
                }
                if let Some(role) = up.role {
                    sqlx::query(&set_role)
                        .bind(role.as_str())
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                }
                if let Some(hash) = &up.password_hash {
                    sqlx::query(&set_hash)
                        .bind(hash)
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(&del_tokens).bind(id).execute(&mut *tx).await?;
                }
                record_auth_change!(self, tx, seq, AuthEntity::User, id);
                tx.commit().await?;
                Ok(true)
            })
        })
        .await
    }

    pub(crate) async fn set_login_state(
        &self,
        id: i64,
        failed_logins: i64,
        locked_until: Option<i64>,
    ) -> Result<bool, StoreError> {
        let sql =
            self.sql("UPDATE warrant_users SET failed_logins = ?, locked_until = ? WHERE id = ?");
        self.timed_write(async {
            on_pool!(&self.pools, write, |p| {
                let n = sqlx::query(&sql)
                    .bind(failed_logins)
                    .bind(locked_until)
                    .bind(id)
                    .execute(p)
                    .await?
                    .rows_affected();
                Ok(n > 0)
            })
        })
        .await
    }

    // ----- tokens -----

    pub(crate) async fn create_token(&self, t: &NewApiToken) -> Result<i64, StoreError> {
        let ins = self.sql(
            "INSERT INTO warrant_api_tokens (token_hash, user_id, name, created_at, expires_at, one_time) VALUES (?, ?, ?, ?, ?, ?)",
        );
        let get = self.sql("SELECT id FROM warrant_api_tokens WHERE token_hash = ?");
        let hash: &[u8] = &t.token_hash;
        self.timed_write(async {
            on_pool!(&self.pools, write, |p| {
                let mut tx = p.begin().await?;
                let seq = next_auth_seq!(tx);
                sqlx::query(&ins)
                    .bind(hash)
                    .bind(t.user_id)
                    .bind(&t.name)
                    .bind(t.created_at)
                    .bind(t.expires_at)
                    .bind(t.one_time)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| match classify(e) {
                        StoreError::Conflict(_) => StoreError::Conflict("token"),
                        StoreError::MissingReference(_) => StoreError::MissingReference("user"),
                        other => other,
                    })?;
                let row = sqlx::query(&get).bind(hash).fetch_one(&mut *tx).await?;
                let id = get_col!(row, "warrant_api_tokens", "id", i64)?;
                record_auth_change!(self, tx, seq, AuthEntity::Token, id);
                tx.commit().await?;
                Ok(id)
            })
        })
        .await
    }

    pub(crate) async fn fetch_tokens(
        &self,
        where_clause: &str,
        arg: Option<i64>,
    ) -> Result<Vec<ApiTokenRow>, StoreError> {
        let sql = self
            .sql(&format!(
                "SELECT {TOKEN_COLS} FROM warrant_api_tokens {where_clause} ORDER BY id"
            ))
            .into_owned();
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let mut q = sqlx::query(&sql);
                if let Some(a) = arg {
                    q = q.bind(a);
                }
                let rows = q.fetch_all(p).await?;
                rows.iter().map(|r| decode_token!(r)).collect()
            })
        })
        .await
    }

    pub(crate) async fn token_by_hash(
        &self,
        hash: &[u8; 32],
    ) -> Result<Option<ApiTokenRow>, StoreError> {
        let sql = self
            .sql(&format!(
                "SELECT {TOKEN_COLS} FROM warrant_api_tokens WHERE token_hash = ?"
            ))
            .into_owned();
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let row = sqlx::query(&sql).bind(&hash[..]).fetch_optional(p).await?;
                row.map(|r| decode_token!(r)).transpose()
            })
        })
        .await
    }

    pub(crate) async fn delete_token(&self, id: i64) -> Result<bool, StoreError> {
        let sql = self.sql("DELETE FROM warrant_api_tokens WHERE id = ?");
        self.timed_write(async {
            on_pool!(&self.pools, write, |p| {
                let mut tx = p.begin().await?;
                let seq = next_auth_seq!(tx);
                let n = sqlx::query(&sql)
                    .bind(id)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if n == 0 {
                    return Ok(false);
                }
                record_auth_change!(self, tx, seq, AuthEntity::Token, id);
                tx.commit().await?;
                Ok(true)
            })
        })
        .await
    }

    /// Deletes at most `limit` tokens with `expires_at <= now`. No change
    /// rows: an expired token is refused everywhere already, and every node
    /// prunes its own memory.
    pub(crate) async fn prune_expired_tokens(
        &self,
        now: i64,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let sql = match self.kind {
            // MySQL allows no LIMIT in an IN subquery, but a LIMIT on DELETE.
            BackendKind::MySql => Cow::Borrowed(
                "DELETE FROM warrant_api_tokens WHERE expires_at <= ? ORDER BY expires_at LIMIT ?",
            ),
            BackendKind::Sqlite | BackendKind::Postgres => self.sql(
                "DELETE FROM warrant_api_tokens WHERE id IN (SELECT id FROM warrant_api_tokens WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)",
            ),
        };
        self.timed_write(async {
            on_pool!(&self.pools, write, |p| {
                Ok(sqlx::query(&sql)
                    .bind(now)
                    .bind(i64::from(limit))
                    .execute(p)
                    .await?
                    .rows_affected())
            })
        })
        .await
    }

    // ----- auth change feed -----

    /// The last change number taken (0 before the first change).
    pub(crate) async fn auth_change_head(&self) -> Result<i64, StoreError> {
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let row = sqlx::query("SELECT n FROM warrant_auth_seq WHERE id = 1")
                    .fetch_optional(p)
                    .await?;
                match row {
                    Some(r) => get_col!(r, "warrant_auth_seq", "n", i64),
                    None => Ok(0),
                }
            })
        })
        .await
    }

    pub(crate) async fn auth_changes_since(
        &self,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AuthChange>, StoreError> {
        let sql = self.sql(
            "SELECT seq, entity, entity_id FROM warrant_auth_changes WHERE seq > ? ORDER BY seq LIMIT ?",
        );
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let rows = sqlx::query(&sql)
                    .bind(after)
                    .bind(i64::from(limit))
                    .fetch_all(p)
                    .await?;
                let mut out = Vec::with_capacity(rows.len());
                for r in &rows {
                    let entity: String = get_req_str!(r, "warrant_auth_changes", "entity")?;
                    out.push(AuthChange {
                        seq: get_col!(r, "warrant_auth_changes", "seq", i64)?,
                        entity: entity
                            .parse()
                            .map_err(|e: UnknownEntity| StoreError::Corrupt {
                                table: "warrant_auth_changes",
                                detail: e.to_string(),
                            })?,
                        entity_id: get_col!(r, "warrant_auth_changes", "entity_id", i64)?,
                    });
                }
                Ok(out)
            })
        })
        .await
    }

    /// Deletes change rows written before `before` (Unix seconds).
    pub(crate) async fn prune_auth_changes(&self, before: i64) -> Result<u64, StoreError> {
        let sql = self.sql("DELETE FROM warrant_auth_changes WHERE created_at < ?");
        self.timed_write(async {
            on_pool!(&self.pools, write, |p| {
                Ok(sqlx::query(&sql)
                    .bind(before)
                    .execute(p)
                    .await?
                    .rows_affected())
            })
        })
        .await
    }

    // ----- certificates -----

    pub(crate) async fn get_cert(
        &self,
        ca: &str,
        serial: &str,
    ) -> Result<Option<CertRecord>, StoreError> {
        let sql = self
            .sql(&format!(
                "SELECT {CERT_COLS} FROM warrant_certs WHERE ca = ? AND serial = ?"
            ))
            .into_owned();
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let row = sqlx::query(&sql)
                    .bind(ca)
                    .bind(serial)
                    .fetch_optional(p)
                    .await?;
                row.map(|r| decode_cert!(r)).transpose()
            })
        })
        .await
    }

    pub(crate) async fn list_certs(&self, f: &CertFilter) -> Result<Vec<CertRecord>, StoreError> {
        let mut clauses = Vec::new();
        if f.ca.is_some() {
            clauses.push("ca = ?");
        }
        if f.status.is_some() {
            clauses.push("status = ?");
        }
        if f.common_name.is_some() {
            clauses.push("common_name = ?");
        }
        if f.principal_uid.is_some() {
            clauses.push("principal_uid = ?");
        }
        let where_clause = if clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", clauses.join(" AND "))
        };
        let limit = f.limit.min(MAX_LIST_LIMIT) as i64;
        let offset = i64::try_from(f.offset).unwrap_or(i64::MAX);
        let sql = self
            .sql(&format!(
                "SELECT {CERT_COLS} FROM warrant_certs {where_clause} ORDER BY created_at DESC, ca, serial LIMIT ? OFFSET ?"
            ))
            .into_owned();
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let mut q = sqlx::query(&sql);
                if let Some(v) = &f.ca {
                    q = q.bind(v.as_str());
                }
                if let Some(v) = f.status {
                    q = q.bind(v.as_str());
                }
                if let Some(v) = &f.common_name {
                    q = q.bind(v.as_str());
                }
                if let Some(v) = &f.principal_uid {
                    q = q.bind(v.as_str());
                }
                let rows = q.bind(limit).bind(offset).fetch_all(p).await?;
                rows.iter().map(|r| decode_cert!(r)).collect()
            })
        })
        .await
    }

    pub(crate) async fn cert_status(
        &self,
        ca: &str,
        serial: &str,
    ) -> Result<Option<CertStanding>, StoreError> {
        let standing =
            |status: String, principal_uid: Option<String>, bound_user_id: Option<i64>| {
                let status = status
                    .parse()
                    .map_err(|e: UnknownStatus| StoreError::Corrupt {
                        table: "warrant_certs",
                        detail: e.to_string(),
                    })?;
                Ok(CertStanding {
                    status,
                    principal_uid,
                    bound_user_id,
                })
            };
        if let Pools::Sqlite { inline, .. } = &self.pools {
            return inline
                .cert_status(ca, serial)?
                .map(|(s, p, u)| standing(s, p, u))
                .transpose();
        }
        let sql = self.sql(SELECT_CERT_STANDING);
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let row = sqlx::query(&sql)
                    .bind(ca)
                    .bind(serial)
                    .fetch_optional(p)
                    .await?;
                match row {
                    None => Ok(None),
                    Some(r) => standing(
                        get_req_str!(r, "warrant_certs", "status")?,
                        get_str!(r, "warrant_certs", "principal_uid")?,
                        get_col!(r, "warrant_certs", "bound_user_id", Option<i64>)?,
                    )
                    .map(Some),
                }
            })
        })
        .await
    }

    pub(crate) async fn count_active_agents(
        &self,
        principal_uid: &str,
        now: i64,
    ) -> Result<u64, StoreError> {
        if let Pools::Sqlite { inline, .. } = &self.pools {
            return Ok(inline.count_active_agents(principal_uid, now)?.max(0) as u64);
        }
        let sql = self.sql(COUNT_ACTIVE_AGENTS);
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let row = sqlx::query(&sql)
                    .bind(principal_uid)
                    .bind(now)
                    .fetch_one(p)
                    .await?;
                Ok(get_col!(row, "warrant_certs", 0, i64)?.max(0) as u64)
            })
        })
        .await
    }

    pub(crate) async fn list_revoked(
        &self,
        ca: &str,
        not_after_from: i64,
    ) -> Result<Vec<RevokedEntry>, StoreError> {
        let sql = self.sql(
            "SELECT serial, revoked_at, revocation_reason, not_after FROM warrant_certs WHERE ca = ? AND status = 'R' AND not_after >= ? ORDER BY serial",
        );
        self.timed(async {
            on_pool!(&self.pools, read, |p| {
                let rows = sqlx::query(&sql)
                    .bind(ca)
                    .bind(not_after_from)
                    .fetch_all(p)
                    .await?;
                rows.iter()
                    .map(|r| {
                        Ok(RevokedEntry {
                            serial: get_req_str!(r, "warrant_certs", "serial")?,
                            revoked_at: get_col!(r, "warrant_certs", "revoked_at", Option<i64>)?
                                .unwrap_or(0),
                            reason: get_str!(r, "warrant_certs", "revocation_reason")?,
                            not_after: get_col!(r, "warrant_certs", "not_after", i64)?,
                        })
                    })
                    .collect()
            })
        })
        .await
    }

    /// Revokes one certificate and, for a person certificate, the active
    /// agent certificates of its principal, in one transaction.
    pub(crate) async fn revoke_cert(
        &self,
        ca: &str,
        serial: &str,
        reason: &str,
        at: i64,
    ) -> Result<Option<RevokeOutcome>, StoreError> {
        let lock_suffix = if self.kind == BackendKind::Sqlite {
            ""
        } else {
            " FOR UPDATE"
        };
        let select = self
            .sql(&format!(
                "SELECT status, agent_id, principal_uid FROM warrant_certs WHERE ca = ? AND serial = ?{lock_suffix}"
            ))
            .into_owned();
        let update = self.sql(
            "UPDATE warrant_certs SET status = 'R', revoked_at = ?, revocation_reason = ? WHERE ca = ? AND serial = ?",
        );
        let cascade = self.sql(
            "UPDATE warrant_certs SET status = 'R', revoked_at = ?, revocation_reason = ? WHERE principal_uid = ? AND status = 'V' AND agent_id IS NOT NULL",
        );
        self.timed_write(async {
            on_pool!(&self.pools, write, |p| {
                let mut tx = p.begin().await?;
                let Some(row) = sqlx::query(&select)
                    .bind(ca)
                    .bind(serial)
                    .fetch_optional(&mut *tx)
                    .await?
                else {
                    return Ok(None);
                };
                let status: String = get_req_str!(row, "warrant_certs", "status")?;
                let agent_id = get_str!(row, "warrant_certs", "agent_id")?;
                let principal = get_str!(row, "warrant_certs", "principal_uid")?;
                let was_principal = agent_id.is_none() && principal.is_some();
                if status == "R" {
                    return Ok(Some(RevokeOutcome {
                        already_revoked: true,
                        was_principal,
                        cascade_count: 0,
                    }));
                }
                sqlx::query(&update)
                    .bind(at)
                    .bind(reason)
                    .bind(ca)
                    .bind(serial)
                    .execute(&mut *tx)
                    .await?;
                let mut cascade_count = 0;
                if let (true, Some(uid)) = (was_principal, principal.as_deref()) {
                    cascade_count = sqlx::query(&cascade)
                        .bind(at)
                        .bind(reason)
                        .bind(uid)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                }
                tx.commit().await?;
                Ok(Some(RevokeOutcome {
                    already_revoked: false,
                    was_principal,
                    cascade_count,
                }))
            })
        })
        .await
    }

    pub(crate) async fn revoke_by_principal(
        &self,
        principal_uid: &str,
        reason: &str,
        at: i64,
    ) -> Result<u64, StoreError> {
        let sql = self.sql(
            "UPDATE warrant_certs SET status = 'R', revoked_at = ?, revocation_reason = ? WHERE principal_uid = ? AND status = 'V'",
        );
        self.timed_write(async {
            on_pool!(&self.pools, write, |p| {
                Ok(sqlx::query(&sql)
                    .bind(at)
                    .bind(reason)
                    .bind(principal_uid)
                    .execute(p)
                    .await?
                    .rows_affected())
            })
        })
        .await
    }

    pub(crate) async fn insert_bound_cert(
        &self,
        c: &CertRecord,
        user_id: i64,
    ) -> Result<(), StoreError> {
        let sql = self
            .sql(&format!(
                "INSERT INTO warrant_certs ({CERT_COLS}, bound_user_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ))
            .into_owned();
        self.timed_write(async {
            on_pool!(&self.pools, write, |p| {
                sqlx::query(&sql)
                    .bind(c.ca.as_str())
                    .bind(c.serial.as_str())
                    .bind(c.common_name.as_str())
                    .bind(c.profile.as_str())
                    .bind(c.status.as_str())
                    .bind(c.not_before)
                    .bind(c.not_after)
                    .bind(c.der.as_slice())
                    .bind(c.principal_uid.as_deref())
                    .bind(c.agent_id.as_deref())
                    .bind(c.key_hash.as_slice())
                    .bind(c.created_at)
                    .bind(c.revoked_at)
                    .bind(c.revocation_reason.as_deref())
                    .bind(user_id)
                    .execute(p)
                    .await?;
                Ok(())
            })
        })
        .await
    }

    // ----- nonces -----

    pub(crate) async fn nonce_consumed(&self, nonce: &[u8; 32]) -> Result<bool, StoreError> {
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

    pub(crate) async fn prune_nonces(&self, now: i64) -> Result<u64, StoreError> {
        let sql = self.sql("DELETE FROM warrant_da_nonces WHERE expires_at < ?");
        self.timed(async {
            on_pool!(&self.pools, write, |p| {
                Ok(sqlx::query(&sql)
                    .bind(now)
                    .execute(p)
                    .await?
                    .rows_affected())
            })
        })
        .await
    }

    pub(crate) async fn load_nonces(
        &self,
        now: i64,
        limit: usize,
    ) -> Result<Vec<([u8; 32], i64)>, StoreError> {
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

    // ----- the write path -----

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
    /// PostgreSQL sends the batch as one statement (`commit_batch_pg`),
    /// MariaDB runs the statements below. SQLite batches do not come here:
    /// the write path's writer thread writes them through its own connection
    /// (`sqlite_writer`), with these semantics.
    pub(crate) async fn commit_batch(
        &self,
        records: &[&crate::types::IssuanceRecord],
        policy: ReplayPolicy,
    ) -> Result<Vec<bool>, StoreError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let r = self.timed(self.commit_batch_once(records, policy)).await;
            match r {
                Err(StoreError::Database(ref msg)) if attempt < 4 && msg.starts_with(RETRYABLE) => {
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
    ) -> Result<Vec<bool>, StoreError> {
        let (mut accepted, nonces) = nonce_order(records);
        if let Pools::Postgres(pool) = &self.pools {
            return commit_batch_pg(pool, records, policy, accepted).await;
        }
        let batch_id = self.next_batch_id();

        let insert_nonce_head = match self.kind {
            BackendKind::Sqlite => "INSERT OR IGNORE INTO",
            BackendKind::Postgres => "INSERT INTO",
            BackendKind::MySql => "INSERT IGNORE INTO",
        };
        let insert_nonce_tail = if self.kind == BackendKind::Postgres {
            " ON CONFLICT DO NOTHING"
        } else {
            ""
        };

        let map_err = |e: sqlx::Error| -> StoreError {
            if is_retryable(&e) {
                StoreError::Database(format!("{RETRYABLE}{e}"))
            } else {
                classify(e)
            }
        };

        on_pool!(&self.pools, write, |p| {
            let mut tx = p.begin().await.map_err(map_err)?;
            let mut landed_count = 0u64;
            for chunk in split_pow2(&nonces, NONCE_ROWS_PER_STATEMENT) {
                let sql = self.sql(&multi_row(
                    &format!("{insert_nonce_head} warrant_da_nonces (nonce, expires_at, principal_uid, batch_id) VALUES "),
                    4,
                    chunk.len(),
                    insert_nonce_tail,
                ))
                .into_owned();
                let mut q = sqlx::query(&sql);
                for (_, n) in chunk {
                    q = q
                        .bind(&n.nonce[..])
                        .bind(n.expires_at)
                        .bind(n.principal_uid.as_str())
                        .bind(batch_id);
                }
                landed_count += q.execute(&mut *tx).await.map_err(map_err)?.rows_affected();
            }
            if (landed_count as usize) < nonces.len() {
                let mut ours: HashSet<Vec<u8>> = HashSet::new();
                for chunk in nonces.chunks(NONCE_ROWS_PER_STATEMENT) {
                    let placeholders = vec!["?"; chunk.len()].join(", ");
                    let sql = self
                        .sql(&format!(
                            "SELECT nonce FROM warrant_da_nonces WHERE batch_id = ? AND nonce IN ({placeholders})"
                        ))
                        .into_owned();
                    let mut q = sqlx::query(&sql).persistent(false).bind(batch_id);
                    for (_, n) in chunk {
                        q = q.bind(&n.nonce[..]);
                    }
                    for row in q.fetch_all(&mut *tx).await.map_err(map_err)? {
                        ours.insert(get_col!(row, "warrant_da_nonces", 0, Vec<u8>)?);
                    }
                }
                for (i, n) in &nonces {
                    if !ours.contains(&n.nonce[..]) {
                        accepted[*i] = false;
                    }
                }
            }
            let to_write: Vec<&CertRecord> = records
                .iter()
                .zip(&accepted)
                .filter(|(_, ok)| **ok || policy == ReplayPolicy::KeepCert)
                .map(|(r, _)| &r.cert)
                .collect();
            for chunk in split_pow2(&to_write, CERT_ROWS_PER_STATEMENT) {
                let sql = self
                    .sql(&multi_row(
                        &format!("INSERT INTO warrant_certs ({CERT_COLS}) VALUES "),
                        CERT_COL_COUNT,
                        chunk.len(),
                        "",
                    ))
                    .into_owned();
                let mut q = sqlx::query(&sql);
                for c in chunk {
                    q = q
                        .bind(c.ca.as_str())
                        .bind(c.serial.as_str())
                        .bind(c.common_name.as_str())
                        .bind(c.profile.as_str())
                        .bind(c.status.as_str())
                        .bind(c.not_before)
                        .bind(c.not_after)
                        .bind(c.der.as_slice())
                        .bind(c.principal_uid.as_deref())
                        .bind(c.agent_id.as_deref())
                        .bind(c.key_hash.as_slice())
                        .bind(c.created_at)
                        .bind(c.revoked_at)
                        .bind(c.revocation_reason.as_deref());
                }
                q.execute(&mut *tx).await.map_err(map_err)?;
            }
            tx.commit().await.map_err(map_err)?;
            Ok(accepted)
        })
    }
}

/// MySQL / MariaDB: whether a migration statement failed only because its
/// effect is already there: the index name exists (1061), the index to drop
/// is gone (1091). MySQL commits each DDL statement on its own, so a process
/// stopped inside a migration leaves some of its statements applied and no
/// row in the migrations table; the next start runs the migration again and
/// must step over them (under the migration lock, nobody else is migrating).
/// Other backends run a migration in one transaction and never see this.
///
/// "Table exists" (1050) is not stepped over: only migration 1 creates
/// tables, on a database that held none of ours, and an existing table of
/// that name may as well belong to something else; that start keeps failing
/// with the error, and a half-created fresh database can simply be dropped.
fn ddl_already_applied(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .is_some_and(|m| matches!(m.number(), 1060 | 1061 | 1091))
}

/// PostgreSQL: the whole batch in ONE statement (one round trip, atomic as
/// any single statement): the records travel as arrays, the nonces are
/// inserted with `ON CONFLICT DO NOTHING` in a data-modifying CTE, and only
/// the certificates whose nonce landed (or that have none) are inserted by
/// the main statement. `accepted` arrives with in-batch duplicate nonces
/// already marked `false` (first occurrence wins).
///
/// Correct across nodes for the same reason as the generic path: a nonce
/// inserted by a concurrent, uncommitted transaction makes ours wait on the
/// unique index and then skip it (other committed) or insert it (other
/// rolled back). Rows are fed in nonce order so overlapping batches lock
/// nonces in the same order.
async fn commit_batch_pg(
    pool: &PgPool,
    records: &[&crate::types::IssuanceRecord],
    policy: ReplayPolicy,
    mut accepted: Vec<bool>,
) -> Result<Vec<bool>, StoreError> {
    const SQL: &str = "WITH input AS ( \
        SELECT * FROM UNNEST($1::bytea[], $2::bigint[], $3::text[], $4::text[], $5::text[], \
            $6::text[], $7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::bytea[], \
            $12::text[], $13::text[], $14::bytea[], $15::bigint[], $16::bigint[], $17::text[]) \
        AS i(nonce, n_expires, n_principal, ca, serial, common_name, profile, status, \
            not_before, not_after, der, principal_uid, agent_id, key_hash, created_at, \
            revoked_at, revocation_reason) \
    ), landed AS ( \
        INSERT INTO warrant_da_nonces (nonce, expires_at, principal_uid, batch_id) \
        SELECT nonce, n_expires, n_principal, $18 FROM input WHERE nonce IS NOT NULL \
        ORDER BY nonce ON CONFLICT DO NOTHING RETURNING nonce \
    ), certs AS ( \
        INSERT INTO warrant_certs (ca, serial, common_name, profile, status, not_before, \
            not_after, der, principal_uid, agent_id, key_hash, created_at, revoked_at, \
            revocation_reason) \
        SELECT ca, serial, common_name, profile, status, not_before, not_after, der, \
            principal_uid, agent_id, key_hash, created_at, revoked_at, revocation_reason \
        FROM input WHERE $19 OR nonce IS NULL OR nonce IN (SELECT nonce FROM landed) \
        RETURNING 1 \
    ) SELECT nonce FROM landed";

    let keep = policy == ReplayPolicy::KeepCert;
    let mut nonce = Vec::new();
    let mut n_expires = Vec::new();
    let mut n_principal = Vec::new();
    let (mut ca, mut serial, mut cn, mut profile, mut status) =
        (vec![], vec![], vec![], vec![], vec![]);
    let (mut nb, mut na, mut der, mut uid, mut agent) = (vec![], vec![], vec![], vec![], vec![]);
    let (mut kh, mut created, mut revoked, mut reason) = (vec![], vec![], vec![], vec![]);
    let mut sent_nonces: Vec<(usize, [u8; 32])> = Vec::new();
    for (i, r) in records.iter().enumerate() {
        let dup = !accepted[i];
        if dup && !keep {
            continue; // a repeated nonce in this batch: its certificate is dropped
        }
        match (&r.nonce, dup) {
            (Some(n), false) => {
                nonce.push(Some(n.nonce.to_vec()));
                n_expires.push(Some(n.expires_at));
                n_principal.push(Some(n.principal_uid.clone()));
                sent_nonces.push((i, n.nonce));
            }
            _ => {
                nonce.push(None);
                n_expires.push(None);
                n_principal.push(None);
            }
        }
        let c = &r.cert;
        ca.push(c.ca.clone());
        serial.push(c.serial.clone());
        cn.push(c.common_name.clone());
        profile.push(c.profile.clone());
        status.push(c.status.as_str());
        nb.push(c.not_before);
        na.push(c.not_after);
        der.push(c.der.clone());
        uid.push(c.principal_uid.clone());
        agent.push(c.agent_id.clone());
        kh.push(c.key_hash.clone());
        created.push(c.created_at);
        revoked.push(c.revoked_at);
        reason.push(c.revocation_reason.clone());
    }
    let map_err = |e: sqlx::Error| -> StoreError {
        if is_retryable(&e) {
            StoreError::Database(format!("{RETRYABLE}{e}"))
        } else {
            classify(e)
        }
    };
    let rows = sqlx::query(SQL)
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
        .fetch_all(pool)
        .await
        .map_err(map_err)?;
    let mut landed: HashSet<Vec<u8>> = HashSet::with_capacity(rows.len());
    for row in rows {
        landed.insert(get_col!(row, "warrant_da_nonces", 0, Vec<u8>)?);
    }
    for (i, n) in sent_nonces {
        if !landed.contains(&n[..]) {
            accepted[i] = false;
        }
    }
    Ok(accepted)
}

/// Marks a `StoreError::Database` message as a retryable conflict.
const RETRYABLE: &str = "retryable: ";

enum UserKey<'a> {
    Id(i64),
    Name(&'a str),
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

async fn connect_pools(
    dsn: &Dsn,
    opts: &StoreOptions,
    fault: &Arc<StorageFault>,
) -> Result<(Pools, Option<std::path::PathBuf>), StoreError> {
    match dsn {
        Dsn::Sqlite { path, url } => {
            let base = match url {
                Some(u) => SqliteConnectOptions::from_str(u)
                    .map_err(|e| StoreError::InvalidDsn(e.to_string()))?,
                None => SqliteConnectOptions::new().filename(path),
            };
            // NORMAL + an explicit fsync of the WAL after each commit (see
            // `SqlCore::sync_wal`): as durable as FULL, but pipelined.
            let base = base
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(opts.statement_timeout)
                .foreign_keys(true);
            let write = SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .acquire_timeout(opts.acquire_timeout)
                .connect_with(
                    SQLITE_WRITER_PRAGMAS
                        .iter()
                        .fold(base.clone(), |o, (k, v)| o.pragma(*k, *v)),
                )
                .await?;
            let read_opts_path = base.get_filename().to_path_buf();
            let read = SqlitePoolOptions::new()
                .max_connections(opts.max_connections.max(1))
                .acquire_timeout(opts.acquire_timeout)
                .connect_with(base)
                .await?;
            let mut wal = base_file(&read_opts_path);
            wal.as_mut_os_string().push("-wal");
            let foreign_writes = std::sync::Arc::new(AtomicU64::new(0));
            let writer = crate::sqlite_writer::WriterConnection::open(
                &read_opts_path,
                opts.statement_timeout,
                foreign_writes.clone(),
                crate::sqlite_writer::writer_cache_kib(opts.durability, opts.threshold),
                crate::checkpointer::CheckpointLimits::from_pages(opts.wal_checkpoint_pages),
                fault.clone(),
            )?;
            let inline =
                crate::inline_read::InlineReaders::new(read_opts_path, opts.statement_timeout);
            Ok((
                Pools::Sqlite {
                    read,
                    write,
                    inline,
                    writer: std::sync::Mutex::new(Some(Box::new(writer))),
                    foreign_writes,
                },
                Some(wal),
            ))
        }
        Dsn::Postgres { url } => {
            let co = PgConnectOptions::from_str(url)
                .map_err(|e| StoreError::InvalidDsn(e.to_string()))?
                .options([(
                    "statement_timeout",
                    opts.statement_timeout.as_millis().to_string(),
                )]);
            // No ping before each acquire: it is one more round trip per
            // commit; a broken connection fails its statement and is dropped.
            let pool = PgPoolOptions::new()
                .max_connections(opts.max_connections.max(2))
                .test_before_acquire(false)
                .acquire_timeout(opts.acquire_timeout)
                .connect_with(co)
                .await?;
            Ok((Pools::Postgres(pool), None))
        }
        Dsn::MySql { url } => {
            let co = MySqlConnectOptions::from_str(url)
                .map_err(|e| StoreError::InvalidDsn(e.to_string()))?;
            let lock_wait = opts.statement_timeout.as_secs().max(1);
            let pool = MySqlPoolOptions::new()
                .max_connections(opts.max_connections.max(2))
                .test_before_acquire(false)
                .acquire_timeout(opts.acquire_timeout)
                .after_connect(move |conn, _| {
                    Box::pin(async move {
                        conn.execute(
                            format!("SET SESSION innodb_lock_wait_timeout = {lock_wait}").as_str(),
                        )
                        .await?;
                        Ok(())
                    })
                })
                .connect_with(co)
                .await?;
            Ok((Pools::MySql(pool), None))
        }
    }
}

fn base_file(p: &std::path::Path) -> std::path::PathBuf {
    p.to_path_buf()
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
