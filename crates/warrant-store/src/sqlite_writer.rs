//! SQLite: the connection that writes the group-commit batches.
//!
//! Through sqlx a batch was five round trips to SQLite's worker thread
//! (BEGIN, the nonces, the landed-nonce check, the certificates, COMMIT),
//! each a hand-off and a wake-up on both sides. `write_bench` put the fixed
//! cost of a commit at about 0.45 ms, most of it those hand-offs, so a
//! durable commit of ~20 rows cost 55 µs per row against 33 µs in a buffered
//! 1000-row one. This connection belongs to the write path's writer thread
//! (`writer::SqliteWriter`), which takes the queued records itself and
//! writes them with cached prepared statements.
//!
//! Semantics are those of the generic path in `sql.rs`: one `BEGIN
//! IMMEDIATE` transaction; nonces first, sorted, each `INSERT OR IGNORE`d,
//! and a nonce that did not land refuses its record (SQLite has one writer
//! at a time, so "did not land" means "already consumed"); then the
//! certificates of the accepted records (all of them under
//! [`ReplayPolicy::KeepCert`]); COMMIT. Durability is still the WAL fsync of
//! the syncer threads in `writer.rs`: this connection runs with
//! `synchronous=NORMAL`. Administrative writes keep using the sqlx write
//! pool; both connections wait for each other through `busy_timeout`.
//!
//! The connection also watches for commits made by any other connection
//! (the sqlx pool's administrative writes, another process on the same
//! file): `PRAGMA data_version` on this connection changes only then. Each
//! change bumps the shared foreign-write count, read inside every batch and,
//! when no batch comes, every [`FOREIGN_WRITE_PROBE`]. The server keeps
//! in-memory upper bounds of per-principal counts that are only valid while
//! every certificate row came through this connection
//! (`Store::foreign_write_epoch`).

use std::path::Path;
use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};

use crate::checkpointer::{CheckpointLimits, Checkpointer};
use crate::error::StoreError;
use crate::options::Durability;
use crate::sql::{ReplayPolicy, nonce_order};
use crate::storage_fault::{FileKind, StorageFault, SyncedFile};
use crate::types::IssuanceRecord;

/// Name of the writer thread, so that a benchmark embedding the server can
/// count its CPU time with the server's.
pub const SQLITE_WRITER_THREAD: &str = "sqlite-writer";

/// How long an idle writer waits before it looks for other connections'
/// commits; under load every batch looks.
pub(crate) const FOREIGN_WRITE_PROBE: Duration = Duration::from_millis(100);

/// The batch writer's connection, its watch on other connections and the
/// thread that checkpoints its WAL (`checkpointer`).
pub(crate) struct WriterConnection {
    conn: Connection,
    watch: ForeignWriteWatch,
    /// Always `Some` until `drop`, which stops it with the connection.
    checkpointer: Option<Checkpointer>,
    fault: Arc<StorageFault>,
}

impl Drop for WriterConnection {
    fn drop(&mut self) {
        if let Some(c) = self.checkpointer.take() {
            c.stop(&self.conn);
        }
        if self.fault.is_stopped() {
            crate::checkpointer::no_checkpoint_on_close(&self.conn);
        }
    }
}

/// Turns this connection's `PRAGMA data_version` readings into a count of
/// the times another connection was seen to have committed.
struct ForeignWriteWatch {
    last: i64,
    seen: Arc<AtomicU64>,
}

impl ForeignWriteWatch {
    fn observe(&mut self, data_version: i64) {
        if data_version != self.last {
            self.last = data_version;
            self.seen.fetch_add(1, Ordering::AcqRel);
        }
    }
}

fn data_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("PRAGMA data_version")?
        .query_row((), |r| r.get(0))
}

impl WriterConnection {
    /// Opens the connection (so that a bad path fails `open`, not the first
    /// batch) and reads the baseline of the watch: a commit by another
    /// connection after this point counts in `seen`.
    /// `cache_kib`: its page cache ([`writer_cache_kib`]); `limits`: when
    /// the WAL is checkpointed; `fault`: the write path's latch, which a
    /// failed checkpoint fsync sets.
    pub(crate) fn open(
        path: &Path,
        busy_timeout: Duration,
        seen: Arc<AtomicU64>,
        cache_kib: i64,
        limits: CheckpointLimits,
        fault: Arc<StorageFault>,
    ) -> Result<Self, StoreError> {
        let conn = open(path, busy_timeout, cache_kib)?;
        let last = data_version(&conn).map_err(classify)?;
        let own = open_for_checkpoints(path)?;
        // Opened now and kept by the checkpointer thread: see `storage_fault`.
        let db_file = SyncedFile::open(path, FileKind::Database)?;
        // Last, after everything that can fail: from here on the hook is
        // registered, and only `drop` unregisters it.
        let checkpointer = Checkpointer::start(&conn, own, db_file, limits, fault.clone())
            .map_err(|e| StoreError::Database(format!("starting the checkpointer thread: {e}")))?;
        Ok(WriterConnection {
            conn,
            watch: ForeignWriteWatch { last, seen },
            checkpointer: Some(checkpointer),
            fault,
        })
    }

    /// Checkpoints run by the checkpointer thread and by the writer itself.
    #[cfg(test)]
    pub(crate) fn checkpoint_counts(&self) -> (u64, u64) {
        self.checkpointer
            .as_ref()
            .map_or((0, 0), Checkpointer::counts)
    }

    /// Between batches (outside a transaction). A failed reading counts as a
    /// change: the bounds built on this watch must not outlive a doubt.
    pub(crate) fn probe(&mut self) {
        match data_version(&self.conn) {
            Ok(v) => self.watch.observe(v),
            Err(_) => {
                self.watch.seen.fetch_add(1, Ordering::AcqRel);
            }
        }
    }

    /// Writes `records` in one transaction; per record, whether it was
    /// accepted (`false`: its nonce was already consumed, or repeats an
    /// earlier one of the batch).
    pub(crate) fn write_batch(
        &mut self,
        records: &[&IssuanceRecord],
        policy: ReplayPolicy,
        batch_id: i64,
    ) -> Result<Vec<bool>, StoreError> {
        let (mut accepted, nonces) = nonce_order(records);
        let watch = &mut self.watch;
        let mut run = |conn: &mut Connection| -> rusqlite::Result<()> {
            // IMMEDIATE: take the write lock now (waiting through
            // busy_timeout for an administrative write), not at the first
            // INSERT. Dropped uncommitted (an error below), the transaction
            // rolls back.
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            // Under the write lock the snapshot is the newest: any other
            // connection's commit up to now shows here.
            watch.observe(data_version(&tx)?);
            {
                let mut ins = tx.prepare_cached(INSERT_NONCE)?;
                for (i, n) in &nonces {
                    let landed = ins.execute((
                        &n.nonce[..],
                        n.expires_at,
                        n.principal_uid.as_str(),
                        batch_id,
                    ))?;
                    if landed == 0 {
                        accepted[*i] = false;
                    }
                }
                let mut ins = tx.prepare_cached(&INSERT_CERT)?;
                for (r, ok) in records.iter().zip(&accepted) {
                    if !*ok && policy == ReplayPolicy::DropCert {
                        continue;
                    }
                    let c = &r.cert;
                    ins.execute(rusqlite::params![
                        c.ca,
                        c.serial,
                        c.common_name,
                        c.profile,
                        c.status.as_str(),
                        c.not_before,
                        c.not_after,
                        c.der,
                        c.principal_uid,
                        c.agent_id,
                        c.key_hash,
                        c.created_at,
                        c.revoked_at,
                        c.revocation_reason,
                    ])?;
                }
            }
            tx.commit()
        };
        let out = run(&mut self.conn);
        // A failed COMMIT can leave the transaction open; the next batch
        // must start clean.
        if out.is_err() && !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        out.map(|()| accepted).map_err(classify)
    }
}

/// The batch connection's page cache, in KiB. It never spills
/// ([`NO_SPILL`]), so every page a transaction dirties stays in the cache
/// until COMMIT, about 14 KiB per certificate. Past the cache's size each
/// further page is allocated for that transaction and freed after it: in
/// `write_bench` a buffered 1000-row commit paid 2 µs per row for that with
/// the 2 MiB of [`crate::sql::SQLITE_WRITER_PRAGMAS`] (since each connection
/// has a cache of its own, `.cargo/config.toml`), and ran 15 % faster with
/// 16 MiB. A durable commit holds a few dozen records and stays with 2 MiB,
/// because a bigger cache costs a small commit more: SQLite scans the whole
/// cache at the end of a transaction whose B-tree split moved a page.
pub(crate) fn writer_cache_kib(durability: Durability, threshold: usize) -> i64 {
    const SMALL: i64 = 2000;
    const PER_RECORD: i64 = 16;
    match durability {
        Durability::Durable => SMALL,
        Durability::Buffered => SMALL.max(threshold as i64 * PER_RECORD),
    }
}

fn open(
    path: &std::path::Path,
    busy_timeout: Duration,
    cache_kib: i64,
) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    // The WAL writes of each commit are gathered into a few large ones
    // (`wal_vfs`).
    let vfs = crate::wal_vfs::register().map_err(StoreError::Database)?;
    let conn = Connection::open_with_flags_and_vfs(path, flags, vfs).map_err(classify)?;
    conn.busy_timeout(busy_timeout).map_err(classify)?;
    // The same settings as the sqlx write connection (see `connect_pools`):
    // WAL with an explicit fsync by the syncer, then the writer settings.
    let mut pragmas = String::from(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = NORMAL;
         PRAGMA foreign_keys = ON;",
    );
    for (k, v) in crate::sql::SQLITE_WRITER_PRAGMAS {
        pragmas.push_str(&format!(" PRAGMA {k} = {v};"));
    }
    pragmas.push_str(NO_SPILL);
    pragmas.push_str(&format!(" PRAGMA cache_size = -{cache_kib};"));
    conn.execute_batch(&pragmas).map_err(classify)?;
    Ok(conn)
}

/// The checkpointer thread's connection: the default VFS (it never writes
/// the WAL, only reads it and writes the database file) and the writers'
/// `synchronous=NORMAL`, under which a checkpoint fsyncs the WAL before it
/// copies and the database file after.
fn open_for_checkpoints(path: &std::path::Path) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(classify)?;
    conn.execute_batch("PRAGMA synchronous = NORMAL;")
        .map_err(classify)?;
    Ok(conn)
}

/// Overrides `cache_spill` of [`crate::sql::SQLITE_WRITER_PRAGMAS`]: this
/// connection never writes pages to the WAL before `COMMIT`, so every
/// sequence of WAL writes that `wal_vfs` gathers ends with a commit frame,
/// which writes it out. With spilling, a transaction that wrote frames early
/// and then rolled back would leave them in the buffer after the write lock
/// was released, where a later flush could overwrite another connection's
/// frames. The cost: the page cache holds every page a batch dirties, about
/// 14 KiB per certificate (~14 MiB at the default `threshold` of 1000).
const NO_SPILL: &str = " PRAGMA cache_spill = OFF;";

const INSERT_NONCE: &str = "INSERT OR IGNORE INTO warrant_da_nonces \
     (nonce, expires_at, principal_uid, batch_id) VALUES (?1, ?2, ?3, ?4)";
/// `INSERT` of one certificate row, with the column list `sql.rs` uses.
static INSERT_CERT: LazyLock<String> = LazyLock::new(|| {
    crate::sql::multi_row(
        &format!(
            "INSERT INTO warrant_certs ({}) VALUES ",
            crate::sql::CERT_COLS
        ),
        crate::sql::CERT_COL_COUNT,
        1,
        "",
    )
});

/// Busy, locked, full or unreadable: the database is unavailable for now
/// (503 upstream). A constraint (a duplicate serial) is a conflict; anything
/// else a database error.
fn classify(e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(
            ErrorCode::DatabaseBusy
            | ErrorCode::DatabaseLocked
            | ErrorCode::CannotOpen
            | ErrorCode::DiskFull
            | ErrorCode::SystemIoFailure
            | ErrorCode::ReadOnly,
        ) => StoreError::Unavailable(format!("SQLite write: {e}")),
        Some(ErrorCode::ConstraintViolation) => StoreError::Conflict("row"),
        _ => StoreError::Database(format!("SQLite write: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{CertRecord, CertStatus, NonceRow};

    fn record(serial: &str, nonce: Option<u8>) -> IssuanceRecord {
        IssuanceRecord {
            cert: CertRecord {
                ca: "agents".into(),
                serial: serial.into(),
                common_name: "a".into(),
                profile: "agent-proxy".into(),
                status: CertStatus::Valid,
                not_before: 1,
                not_after: 2,
                der: vec![1, 2, 3],
                principal_uid: Some("p".into()),
                agent_id: Some("x".into()),
                key_hash: vec![9; 32],
                created_at: 1,
                revoked_at: None,
                revocation_reason: None,
            },
            nonce: nonce.map(|b| NonceRow {
                nonce: [b; 32],
                expires_at: 10,
                principal_uid: "p".into(),
            }),
        }
    }

    fn setup() -> (
        tempfile::TempDir,
        WriterConnection,
        std::path::PathBuf,
        Arc<AtomicU64>,
    ) {
        setup_with(CheckpointLimits::DEFAULT)
    }

    fn setup_with(
        limits: CheckpointLimits,
    ) -> (
        tempfile::TempDir,
        WriterConnection,
        std::path::PathBuf,
        Arc<AtomicU64>,
    ) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("w.db");
        let c = Connection::open(&path).expect("open");
        c.execute_batch(
            "CREATE TABLE warrant_certs (ca TEXT, serial TEXT, common_name TEXT, profile TEXT,
                 status TEXT, not_before INTEGER, not_after INTEGER, der BLOB, principal_uid TEXT,
                 agent_id TEXT, key_hash BLOB, created_at INTEGER, revoked_at INTEGER,
                 revocation_reason TEXT, PRIMARY KEY (ca, serial));
             CREATE TABLE warrant_da_nonces (nonce BLOB PRIMARY KEY, expires_at INTEGER,
                 principal_uid TEXT, batch_id INTEGER);",
        )
        .expect("schema");
        let seen = Arc::new(AtomicU64::new(0));
        let w = WriterConnection::open(
            &path,
            Duration::from_secs(1),
            seen.clone(),
            writer_cache_kib(Durability::Durable, 1000),
            limits,
            Arc::new(StorageFault::default()),
        )
        .expect("writer");
        (dir, w, path, seen)
    }

    /// `n` records of 4 KB certificates from serial `from`: about a WAL
    /// page each.
    fn big_records(from: usize, n: usize) -> Vec<IssuanceRecord> {
        (from..from + n)
            .map(|i| {
                let mut r = record(&format!("{i:05}"), None);
                r.cert.der = vec![7; 4000];
                r
            })
            .collect()
    }

    /// Only checkpoints grow the database file itself: until one, every
    /// committed page is in the WAL.
    fn db_file_len(path: &std::path::Path) -> u64 {
        std::fs::metadata(path).expect("db file").len()
    }

    fn count(path: &std::path::Path, table: &str) -> i64 {
        Connection::open(path)
            .expect("open")
            .query_row(&format!("SELECT COUNT(*) FROM {table}"), (), |r| r.get(0))
            .expect("count")
    }

    fn write(
        w: &mut WriterConnection,
        records: &[IssuanceRecord],
        policy: ReplayPolicy,
    ) -> Result<Vec<bool>, StoreError> {
        let refs: Vec<&IssuanceRecord> = records.iter().collect();
        w.write_batch(&refs, policy, 7)
    }

    #[test]
    fn the_bundled_sqlite_gives_each_connection_its_own_page_cache() {
        // Set by `.cargo/config.toml` (LIBSQLITE3_FLAGS): without it every
        // connection of the process shares one page cache behind one
        // mutex, and each allocation takes a second global mutex.
        let conn = Connection::open_in_memory().expect("open");
        let mut stmt = conn.prepare("PRAGMA compile_options").expect("pragma");
        let options: Vec<String> = stmt
            .query_map((), |r| r.get(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert!(
            !options.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"),
            "{options:?}"
        );
        assert!(
            options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
            "{options:?}"
        );
    }

    #[test]
    fn a_buffered_writer_caches_what_a_full_batch_dirties() {
        assert_eq!(writer_cache_kib(Durability::Durable, 1000), 2000);
        assert_eq!(writer_cache_kib(Durability::Durable, 100_000), 2000);
        assert_eq!(writer_cache_kib(Durability::Buffered, 1000), 16_000);
        assert_eq!(writer_cache_kib(Durability::Buffered, 10), 2000);
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("c.db");
        drop(Connection::open(&path).expect("create"));
        let conn = open(&path, Duration::from_secs(1), 16_000).expect("open");
        let size: i64 = conn
            .query_row("PRAGMA cache_size", (), |r| r.get(0))
            .expect("pragma");
        assert_eq!(size, -16_000);
    }

    #[test]
    fn the_writer_connection_has_the_writer_settings() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("s.db");
        drop(Connection::open(&path).expect("create")); // `open` does not create
        let conn = open(
            &path,
            Duration::from_secs(1),
            writer_cache_kib(Durability::Durable, 1000),
        )
        .expect("open");
        let get = |name: &str| -> String {
            conn.query_row(&format!("PRAGMA {name}"), (), |r| {
                r.get::<_, rusqlite::types::Value>(0)
            })
            .map(|v| match v {
                rusqlite::types::Value::Integer(i) => i.to_string(),
                rusqlite::types::Value::Text(t) => t,
                other => format!("{other:?}"),
            })
            .expect("pragma")
        };
        assert_eq!(get("journal_mode"), "wal");
        assert_eq!(get("synchronous"), "1", "NORMAL: the syncer fsyncs the WAL");
        // temp_store reads back as a number (MEMORY = 2).
        let expected = |v: &str| {
            if v == "MEMORY" {
                "2".to_string()
            } else {
                v.to_string()
            }
        };
        for (name, value) in crate::sql::SQLITE_WRITER_PRAGMAS {
            if *name == "cache_spill" {
                assert_eq!(get(name), "0", "no spilling here (NO_SPILL)");
                continue;
            }
            assert_eq!(get(name), expected(value), "PRAGMA {name}");
        }
    }

    #[test]
    fn the_checkpointer_thread_copies_the_wal_back_and_the_writer_finishes() {
        let (_d, mut w, path, _) = setup_with(CheckpointLimits {
            wake_at: 8,
            writer_at: 1_000_000,
        });
        let before = db_file_len(&path);
        // About 10 pages: the commit wakes the thread.
        write(&mut w, &big_records(0, 10), ReplayPolicy::DropCert).expect("commit");
        // The thread runs on its own: wait for it, not for a duration.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while w.checkpoint_counts().0 == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "no checkpoint by the thread"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(w.checkpoint_counts(), (1, 0), "the writer did not copy");
        let copied = db_file_len(&path);
        assert!(copied >= before + 10 * 4096, "{before} → {copied}");
        // The next commit finishes: it copies what came since, inline.
        write(&mut w, &big_records(10, 10), ReplayPolicy::DropCert).expect("commit");
        assert_eq!(w.checkpoint_counts(), (1, 1));
        // So the transaction after it starts the WAL over instead of
        // growing it.
        let wal = path.with_extension("db-wal");
        let wal_len = std::fs::metadata(&wal).expect("WAL").len();
        write(&mut w, &big_records(20, 10), ReplayPolicy::DropCert).expect("commit");
        assert_eq!(std::fs::metadata(&wal).expect("WAL").len(), wal_len);
        assert_eq!(count(&path, "warrant_certs"), 30);
    }

    #[test]
    fn the_writer_checkpoints_itself_when_the_wal_gets_too_long() {
        let (_d, mut w, path, _) = setup_with(CheckpointLimits {
            wake_at: 1_000_000,
            writer_at: 8,
        });
        let before = db_file_len(&path);
        write(&mut w, &big_records(0, 10), ReplayPolicy::DropCert).expect("commit");
        // Inline: done when the commit returns.
        assert_eq!(w.checkpoint_counts(), (0, 1));
        assert!(db_file_len(&path) >= before + 10 * 4096);
        assert_eq!(count(&path, "warrant_certs"), 10);
    }

    #[test]
    fn a_consumed_nonce_refuses_only_its_record() {
        let (_d, mut w, path, _) = setup();
        let first = write(&mut w, &[record("01", Some(1))], ReplayPolicy::DropCert);
        assert_eq!(first.expect("commit"), vec![true]);
        // 02 replays nonce 1; 03 has a fresh nonce; 04 has none; 05 repeats
        // 03's nonce within the batch.
        let second = write(
            &mut w,
            &[
                record("02", Some(1)),
                record("03", Some(2)),
                record("04", None),
                record("05", Some(2)),
            ],
            ReplayPolicy::DropCert,
        );
        assert_eq!(second.expect("commit"), vec![false, true, true, false]);
        assert_eq!(count(&path, "warrant_certs"), 3);
        assert_eq!(count(&path, "warrant_da_nonces"), 2);
    }

    #[test]
    fn buffered_keeps_the_certificate_of_a_replay() {
        let (_d, mut w, path, _) = setup();
        write(&mut w, &[record("01", Some(1))], ReplayPolicy::KeepCert).expect("commit");
        let out = write(&mut w, &[record("02", Some(1))], ReplayPolicy::KeepCert);
        assert_eq!(out.expect("commit"), vec![false]);
        assert_eq!(count(&path, "warrant_certs"), 2);
    }

    #[test]
    fn other_connections_commits_are_seen_and_its_own_are_not() {
        let (_d, mut w, path, seen) = setup();
        for serial in ["01", "02"] {
            write(&mut w, &[record(serial, None)], ReplayPolicy::DropCert).expect("commit");
        }
        w.probe();
        assert_eq!(seen.load(Ordering::Acquire), 0, "the writer's own commits");
        let foreign = |serial: &str| {
            Connection::open(&path)
                .expect("open")
                .execute(
                    "UPDATE warrant_certs SET status = 'R' WHERE serial = ?1",
                    [serial],
                )
                .expect("foreign write");
        };
        foreign("01");
        // The next batch looks under the write lock.
        write(&mut w, &[record("03", None)], ReplayPolicy::DropCert).expect("commit");
        assert_eq!(seen.load(Ordering::Acquire), 1);
        // Idle: the probe sees the next one without a batch.
        foreign("02");
        w.probe();
        assert_eq!(seen.load(Ordering::Acquire), 2, "seen by the probe");
        w.probe();
        assert_eq!(seen.load(Ordering::Acquire), 2, "counted once");
    }

    #[test]
    fn a_failed_batch_writes_nothing_and_the_next_one_works() {
        let (_d, mut w, path, _) = setup();
        write(&mut w, &[record("01", None)], ReplayPolicy::DropCert).expect("commit");
        // A duplicate serial fails the whole batch, its nonce included.
        let err = write(
            &mut w,
            &[record("02", Some(5)), record("01", None)],
            ReplayPolicy::DropCert,
        )
        .expect_err("duplicate serial");
        assert!(matches!(err, StoreError::Conflict("row")), "{err:?}");
        assert_eq!(count(&path, "warrant_certs"), 1);
        assert_eq!(count(&path, "warrant_da_nonces"), 0);
        let ok = write(&mut w, &[record("02", Some(5))], ReplayPolicy::DropCert);
        assert_eq!(ok.expect("commit after a failure"), vec![true]);
    }
}
