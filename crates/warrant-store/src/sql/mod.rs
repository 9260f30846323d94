//! The SQL core shared by SQLite, PostgreSQL and MariaDB/MySQL: the pools,
//! bounded statements, migrations and SQLite's WAL fsync.
//!
//! Every query is written once with `?` placeholders (rewritten to `$n` for
//! PostgreSQL) and run through [`on_pool!`], which expands the same body once
//! per driver. That keeps one code path for the three backends without the
//! limits of sqlx's `Any` driver, and the few true dialect differences
//! (`INSERT OR IGNORE` / `ON CONFLICT DO NOTHING` / `INSERT IGNORE`, how a new
//! id comes back) are explicit `match`es.

pub(crate) mod audit;
pub(crate) mod batch;
pub(crate) mod decode;
pub(crate) mod log;
mod sqlite_batch;
mod sqlite_nonces;

use std::borrow::Cow;
use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Executor, Row};

use crate::dsn::Dsn;
use crate::error::StoreError;
use crate::migrations::{self, MIGRATIONS, MIGRATIONS_TABLE};
use crate::options::StoreOptions;
use crate::storage_fault::{StorageFault, SyncedFile};
use crate::time::now_unix;
use crate::types::*;

pub(crate) enum Pools {
    /// SQLite allows one writer at a time: every write (issuance batches and
    /// administrative writes) goes through a pool of one connection, so
    /// writers queue in the pool instead of meeting `SQLITE_BUSY`; reads use
    /// the other pool and proceed concurrently thanks to WAL.
    Sqlite {
        read: SqlitePool,
        write: SqlitePool,
    },
    Postgres(PgPool),
    MySql(MySqlPool),
}

/// Runs `$body` with `$p` bound to the right pool for each backend.
macro_rules! on_pool {
    ($pools:expr, read, |$p:ident| $body:expr) => {
        match $pools {
            $crate::sql::Pools::Sqlite { read: $p, .. } => $body,
            $crate::sql::Pools::Postgres($p) => $body,
            $crate::sql::Pools::MySql($p) => $body,
        }
    };
    ($pools:expr, write, |$p:ident| $body:expr) => {
        match $pools {
            $crate::sql::Pools::Sqlite { write: $p, .. } => $body,
            $crate::sql::Pools::Postgres($p) => $body,
            $crate::sql::Pools::MySql($p) => $body,
        }
    };
}
pub(crate) use on_pool;

/// Starts a transaction that reads before it writes, on the write pool of
/// any backend.
///
/// SQLite: the write lock is taken before the first read, by a write that
/// changes nothing (waiting under the busy timeout). A deferred transaction
/// that reads and then writes fails at once with `SQLITE_BUSY` when another
/// process on the same file wrote in between: its snapshot cannot become a
/// write transaction, and no wait would help. (Not `BEGIN IMMEDIATE`: sqlx
/// refuses a custom `BEGIN` on a connection whose failed commit left its
/// transaction depth above zero, and the write path must recover from a
/// failed commit.) A transaction whose first statement writes needs none of
/// this. PostgreSQL and MariaDB lock rows as they go: a plain `BEGIN`.
pub(crate) trait BeginWrite {
    type Db: sqlx::Database;
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, Self::Db>, sqlx::Error>;
}

impl BeginWrite for SqlitePool {
    type Db = sqlx::Sqlite;
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, sqlx::Error> {
        let mut tx = self.begin().await?;
        sqlx::query(&format!("DELETE FROM {MIGRATIONS_TABLE} WHERE 0"))
            .execute(&mut *tx)
            .await?;
        Ok(tx)
    }
}

impl BeginWrite for PgPool {
    type Db = sqlx::Postgres;
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
        self.begin().await
    }
}

impl BeginWrite for MySqlPool {
    type Db = sqlx::MySql;
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::MySql>, sqlx::Error> {
        self.begin().await
    }
}

/// SQLite settings of the write connection:
///
/// - `temp_store=MEMORY`: statement journals (a multi-row INSERT inside a
///   transaction needs one) stay in memory instead of a temp file.
/// - `cache_spill=OFF`: a transaction's pages reach the WAL only at its
///   commit, which `wal_vfs` needs (a rolled-back spill would leave frames
///   in its buffer).
/// - `wal_autocheckpoint` from [`StoreOptions::wal_checkpoint_pages`]: SQLite
///   checkpoints in the committing connection once the WAL holds that many
///   pages.
const SQLITE_WRITE_PRAGMAS: &[(&str, &str)] = &[("temp_store", "MEMORY"), ("cache_spill", "OFF")];

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
    /// `wal_synced` alone would not: the blocking fsync outlives a caller
    /// dropped while it waits, and with it that caller's hold on
    /// `wal_synced`; this lock is held by the fsync itself.
    wal: Option<Arc<std::sync::Mutex<SyncedFile>>>,
    /// SQLite: commits numbered as they return (`SqlCore::note_commit`).
    wal_commits: AtomicU64,
    /// SQLite: the highest commit number a completed WAL fsync covers. The
    /// lock keeps one fsync at a time, and a sync that finds its commit
    /// already covered by the one it waited for returns without its own.
    wal_synced: tokio::sync::Mutex<u64>,
    /// Set for good by a failed fsync (`storage_fault`); never set on
    /// PostgreSQL and MariaDB, whose commits report their own durability.
    fault: Arc<StorageFault>,
    /// SQLite only: see [`SqlCore::foreign_write_epoch`].
    foreign_writes: AtomicU64,
    /// SQLite only: the write connection's last `PRAGMA data_version`.
    data_version: AtomicI64,
    /// PostgreSQL: `StoreOptions::expiry_bucket` in seconds.
    pub(crate) expiry_bucket_secs: i64,
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

impl SqlCore {
    pub(crate) async fn connect(dsn: &Dsn, opts: &StoreOptions) -> Result<SqlCore, StoreError> {
        Self::connect_up_to(dsn, opts, migrations::latest_version()).await
    }

    /// [`connect`](Self::connect), applying migrations up to `up_to` only
    /// (tests build a database as an older release left it).
    pub(crate) async fn connect_up_to(
        dsn: &Dsn,
        opts: &StoreOptions,
        up_to: i64,
    ) -> Result<SqlCore, StoreError> {
        let (pools, wal_path) =
            tokio::time::timeout(opts.connect_timeout, connect_pools(dsn, opts))
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
            wal: wal_path
                .as_deref()
                .map(SyncedFile::open)
                .transpose()?
                .map(|f| Arc::new(std::sync::Mutex::new(f))),
            wal_path,
            wal_commits: AtomicU64::new(0),
            wal_synced: tokio::sync::Mutex::new(0),
            fault: Arc::new(StorageFault::default()),
            foreign_writes: AtomicU64::new(0),
            data_version: AtomicI64::new(0),
            expiry_bucket_secs: i64::try_from(opts.expiry_bucket.as_secs())
                .unwrap_or(i64::MAX)
                .max(1),
        };
        core.migrate(up_to).await?;
        core.sync_wal().await?;
        core.sync_wal_dir().await?;
        Ok(core)
    }

    /// A number that changes whenever the database was written other than
    /// through the issuance write path (see `Issuance::foreign_write_epoch`).
    /// SQLite: this store's administrative writes count themselves
    /// ([`SqlCore::timed_write`]), and other processes' commits show as a
    /// new `PRAGMA data_version` on the write connection
    /// ([`SqlCore::observe_data_version`]). `None` on server databases, which
    /// several nodes share and nothing here can watch.
    pub(crate) fn foreign_write_epoch(&self) -> Option<u64> {
        (self.kind == BackendKind::Sqlite).then(|| self.foreign_writes.load(Ordering::Acquire))
    }

    /// SQLite: reads the write connection's `PRAGMA data_version`, which
    /// changes only when another connection (another process) committed,
    /// and bumps the foreign-write epoch when it did. `conn` must be the
    /// write pool's connection.
    pub(crate) async fn observe_data_version(
        &self,
        conn: &mut sqlx::SqliteConnection,
    ) -> Result<(), sqlx::Error> {
        let v: i64 = sqlx::query_scalar("PRAGMA data_version")
            .fetch_one(&mut *conn)
            .await?;
        self.note_data_version(v);
        Ok(())
    }

    /// The write connection's `PRAGMA data_version` read now: a new value
    /// is another process's commit.
    pub(crate) fn note_data_version(&self, v: i64) {
        if self.data_version.swap(v, Ordering::AcqRel) != v {
            self.note_foreign_write();
        }
    }

    /// The database may have been written other than through the issuance
    /// write path (see [`SqlCore::foreign_write_epoch`]).
    pub(crate) fn note_foreign_write(&self) {
        self.foreign_writes.fetch_add(1, Ordering::AcqRel);
    }

    /// SQLite, idle: [`SqlCore::observe_data_version`] on the write
    /// connection, when it is free (a commit in progress observes it itself).
    pub(crate) async fn probe_foreign_writes(&self) {
        let Pools::Sqlite { write, .. } = &self.pools else {
            return;
        };
        let Some(mut conn) = write.try_acquire() else {
            return;
        };
        if self.observe_data_version(&mut conn).await.is_err() {
            // Unknown: assume another process wrote.
            self.note_foreign_write();
        }
    }

    /// Makes every commit so far durable (SQLite; a no-op elsewhere).
    ///
    /// SQLite runs with `synchronous=NORMAL` in WAL mode: a commit writes its
    /// frames to the WAL but does not fsync. Syncing the WAL ourselves after
    /// the commit gives the guarantee of `synchronous=FULL` (which fsyncs the
    /// WAL at the end of each commit) through a descriptor we hold, so a
    /// failed fsync stops the write path (`storage_fault`); from then on
    /// this fails at once. SQLite's own checkpoints still sync the WAL before
    /// copying it and the database file after; one that fails leaves the WAL
    /// in place (its frames are copied again by the next checkpoint), so no
    /// acknowledged row depends on it.
    pub(crate) async fn sync_wal(&self) -> Result<(), StoreError> {
        let commit = self.note_commit();
        self.sync_wal_through(commit).await
    }

    /// Numbers a commit that has just returned, for
    /// [`SqlCore::sync_wal_through`].
    pub(crate) fn note_commit(&self) -> u64 {
        self.wal_commits.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Returns once a WAL fsync that started after commit number `commit`
    /// returned has completed: its own, or one that another caller ran
    /// meanwhile (every commit numbered before an fsync starts is covered by
    /// it). Commits may sync out of order; each is answered only after an
    /// fsync that began after it.
    pub(crate) async fn sync_wal_through(&self, commit: u64) -> Result<(), StoreError> {
        let Some(wal) = self.wal.clone() else {
            return Ok(());
        };
        let mut synced = self.wal_synced.lock().await;
        self.fault.check()?;
        if *synced >= commit {
            return Ok(());
        }
        let covers = self.wal_commits.load(Ordering::Acquire);
        let fault = self.fault.clone();
        tokio::task::spawn_blocking(move || {
            wal.lock().unwrap_or_else(|p| p.into_inner()).sync(&fault)
        })
        .await
        .map_err(|e| StoreError::Database(format!("WAL sync task failed: {e}")))??;
        *synced = covers;
        Ok(())
    }

    /// The SQLite write path's fail-stop latch (`storage_fault`).
    pub(crate) fn storage_fault(&self) -> &Arc<StorageFault> {
        &self.fault
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
    /// storage fault they are refused before they write anything. Each one
    /// moves the foreign-write epoch: it did not come through the issuance
    /// write path.
    pub(crate) async fn timed_write<T>(
        &self,
        fut: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.fault.check()?;
        let r = self.timed(fut).await;
        self.note_foreign_write();
        let r = r?;
        self.sync_wal().await?;
        Ok(r)
    }

    /// [`SqlCore::timed`] for retention's deletes: refused after a storage
    /// fault like every write, but neither a foreign write (removing rows
    /// past their expiry changes no standing a request can still use: the
    /// chain check refuses an expired certificate first) nor synced before
    /// it returns (nothing was acknowledged; a delete lost in a crash is
    /// simply done again).
    pub(crate) async fn timed_housekeeping<T>(
        &self,
        fut: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.fault.check()?;
        self.timed(fut).await
    }

    async fn migrate(&self, up_to: i64) -> Result<(), StoreError> {
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
                for m in MIGRATIONS
                    .iter()
                    .filter(|m| m.version <= up_to && !applied.contains(&m.version))
                {
                    // MySQL commits DDL implicitly; the lock above is what makes
                    // this safe there. SQLite and PostgreSQL get a transaction.
                    let transactional = self.kind != BackendKind::MySql;
                    if transactional {
                        conn.execute("BEGIN").await?;
                    }
                    for stmt in m.statements_for(self.kind) {
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
                if self.kind == BackendKind::Sqlite && up_to >= 6 {
                    // A file made before retention existed has auto_vacuum
                    // NONE; the mode changes only through one VACUUM.
                    let mode: i64 = sqlx::query_scalar("PRAGMA auto_vacuum")
                        .fetch_one(&mut *conn)
                        .await?;
                    if mode != 2 {
                        tracing::info!("converting the SQLite file to incremental auto-vacuum (one VACUUM)");
                        conn.execute("PRAGMA auto_vacuum = INCREMENTAL").await?;
                        conn.execute("VACUUM").await?;
                    }
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

async fn connect_pools(
    dsn: &Dsn,
    opts: &StoreOptions,
) -> Result<(Pools, Option<std::path::PathBuf>), StoreError> {
    match dsn {
        Dsn::Sqlite { path, url } => {
            let base = match url {
                Some(u) => SqliteConnectOptions::from_str(u)
                    .map_err(|e| StoreError::InvalidDsn(e.to_string()))?,
                None => SqliteConnectOptions::new().filename(path),
            };
            // NORMAL + an explicit fsync of the WAL after each commit (see
            // `SqlCore::sync_wal`).
            let base = base
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(opts.statement_timeout)
                .foreign_keys(true)
                // Retention deletes rows; INCREMENTAL lets it hand the
                // freed pages back (`Retention::prune`) so the file stops
                // growing. Takes effect on a new file; `migrate` converts an
                // older one once.
                .auto_vacuum(sqlx::sqlite::SqliteAutoVacuum::Incremental);
            let gathering_vfs = crate::wal_vfs::register().map_err(StoreError::Database)?;
            let write_opts = SQLITE_WRITE_PRAGMAS
                .iter()
                .fold(base.clone().vfs(gathering_vfs), |o, (k, v)| {
                    o.pragma(*k, *v)
                })
                .pragma(
                    "wal_autocheckpoint",
                    opts.wal_checkpoint_pages.max(1).to_string(),
                );
            let write = SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .acquire_timeout(opts.acquire_timeout)
                .connect_with(write_opts)
                .await?;
            let mut wal = base.get_filename().to_path_buf();
            let read = SqlitePoolOptions::new()
                .max_connections(opts.max_connections.max(1))
                .acquire_timeout(opts.acquire_timeout)
                .connect_with(base)
                .await?;
            wal.as_mut_os_string().push("-wal");
            Ok((Pools::Sqlite { read, write }, Some(wal)))
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
