//! SQLite: the group-commit batch written by one dedicated thread.
//!
//! Through sqlx a batch was five round trips to SQLite's worker thread
//! (BEGIN, the nonces, the landed-nonce check, the certificates, COMMIT),
//! each a hand-off and a wake-up on both sides. `write_bench` put the fixed
//! cost of a commit at about 0.45 ms, most of it those hand-offs, so a
//! durable commit of ~20 rows cost 55 µs per row against 33 µs in a buffered
//! 1000-row one. Here the batch travels to the thread once, is written with
//! cached prepared statements, and one answer comes back.
//!
//! Semantics are those of the generic path in `sql.rs`: one `BEGIN
//! IMMEDIATE` transaction; nonces first, sorted, each `INSERT OR IGNORE`d,
//! and a nonce that did not land refuses its record (SQLite has one writer
//! at a time, so "did not land" means "already consumed"); then the
//! certificates of the accepted records (all of them under
//! [`ReplayPolicy::KeepCert`]); COMMIT. Durability is still the WAL fsync of
//! the syncer in `writer.rs`: this thread runs with `synchronous=NORMAL`.
//! Administrative writes keep using the sqlx write pool; both connections
//! wait for each other through `busy_timeout`.
//!
//! The thread also watches for commits made by any other connection (the
//! sqlx pool's administrative writes, another process on the same file):
//! `PRAGMA data_version` on this connection changes only then. Each change
//! bumps [`SqliteBatchWriter::foreign_writes`], read inside every batch and,
//! when no batch comes, every [`FOREIGN_WRITE_PROBE`]. The server keeps
//! in-memory upper bounds of per-principal counts that are only valid while
//! every certificate row came through this thread (`Store::foreign_write_epoch`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};
use tokio::sync::oneshot;

use crate::error::StoreError;
use crate::sql::ReplayPolicy;
use crate::types::{CertRecord, NonceRow};

/// Name of the writer thread, so that a benchmark embedding the server can
/// count its CPU time with the server's.
pub const SQLITE_WRITER_THREAD: &str = "sqlite-writer";

/// How long an idle writer waits before it looks for other connections'
/// commits; under load every batch looks.
pub(crate) const FOREIGN_WRITE_PROBE: Duration = Duration::from_millis(100);

/// One batch as the thread needs it: owned, since it crosses threads.
pub(crate) struct Batch {
    pub(crate) certs: Vec<CertRecord>,
    /// `(record index, nonce)`, sorted by nonce, in-batch duplicates removed.
    pub(crate) nonces: Vec<(usize, NonceRow)>,
    /// Per record; `false` on entry for in-batch duplicate nonces.
    pub(crate) accepted: Vec<bool>,
    pub(crate) batch_id: i64,
    pub(crate) policy: ReplayPolicy,
}

struct Job {
    batch: Batch,
    reply: oneshot::Sender<Result<Vec<bool>, StoreError>>,
}

/// Handle to the writer thread; dropping it (or [`SqliteBatchWriter::close`])
/// ends the thread once the queued batches are written.
pub(crate) struct SqliteBatchWriter {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    foreign_writes: Arc<AtomicU64>,
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

    /// Between batches (outside a transaction). A failed reading counts as a
    /// change: the bounds built on this watch must not outlive a doubt.
    fn probe(&mut self, conn: &Connection) {
        match data_version(conn) {
            Ok(v) => self.observe(v),
            Err(_) => {
                self.seen.fetch_add(1, Ordering::AcqRel);
            }
        }
    }
}

fn data_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("PRAGMA data_version")?
        .query_row((), |r| r.get(0))
}

impl SqliteBatchWriter {
    /// Opens the connection on the calling thread (so that a bad path fails
    /// `open`, not the first batch) and starts the thread.
    pub(crate) fn start(path: PathBuf, busy_timeout: Duration) -> Result<Self, StoreError> {
        let mut conn = open(&path, busy_timeout)?;
        let foreign_writes = Arc::new(AtomicU64::new(0));
        // The baseline, read before anyone can ask for the epoch: a commit
        // by another connection after this point is a change.
        let mut watch = ForeignWriteWatch {
            last: data_version(&conn).map_err(classify)?,
            seen: foreign_writes.clone(),
        };
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name(SQLITE_WRITER_THREAD.into())
            .spawn(move || {
                loop {
                    match rx.recv_timeout(FOREIGN_WRITE_PROBE) {
                        Ok(job) => {
                            let out = write_batch(&mut conn, job.batch, &mut watch);
                            // The committer may have given up (statement
                            // timeout): the outcome is then decided by the
                            // next read, as with any database that commits
                            // after the client left.
                            let _ = job.reply.send(out);
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => watch.probe(&conn),
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
            })
            .map_err(|e| StoreError::Database(format!("starting the SQLite writer: {e}")))?;
        Ok(SqliteBatchWriter {
            tx: Mutex::new(Some(tx)),
            foreign_writes,
        })
    }

    /// Commits by other connections seen so far (see the module doc).
    pub(crate) fn foreign_writes(&self) -> u64 {
        self.foreign_writes.load(Ordering::Acquire)
    }

    pub(crate) async fn commit(&self, batch: Batch) -> Result<Vec<bool>, StoreError> {
        let (reply, rx) = oneshot::channel();
        {
            let guard = self.tx.lock().unwrap_or_else(|p| p.into_inner());
            let Some(tx) = guard.as_ref() else {
                return Err(StoreError::Unavailable("SQLite writer closed".into()));
            };
            tx.send(Job { batch, reply })
                .map_err(|_| StoreError::Unavailable("SQLite writer stopped".into()))?;
        }
        rx.await
            .map_err(|_| StoreError::Unavailable("SQLite writer stopped".into()))?
    }

    /// Lets the thread finish the queued batches and exit.
    pub(crate) fn close(&self) {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

fn open(path: &std::path::Path, busy_timeout: Duration) -> Result<Connection, StoreError> {
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
    conn.execute_batch(&pragmas).map_err(classify)?;
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

fn write_batch(
    conn: &mut Connection,
    batch: Batch,
    watch: &mut ForeignWriteWatch,
) -> Result<Vec<bool>, StoreError> {
    let Batch {
        certs,
        nonces,
        mut accepted,
        batch_id,
        policy,
    } = batch;
    let mut run = || -> rusqlite::Result<()> {
        // IMMEDIATE: take the write lock now (waiting through busy_timeout
        // for an administrative write), not at the first INSERT. Dropped
        // uncommitted (an error below), the transaction rolls back.
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
            for (c, ok) in certs.iter().zip(&accepted) {
                if !*ok && policy == ReplayPolicy::DropCert {
                    continue;
                }
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
    let out = run();
    // A failed COMMIT can leave the transaction open; the next batch must
    // start clean.
    if out.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    out.map(|()| accepted).map_err(classify)
}

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
    use crate::types::CertStatus;

    fn cert(serial: &str) -> CertRecord {
        CertRecord {
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
        }
    }

    fn nonce(b: u8) -> NonceRow {
        NonceRow {
            nonce: [b; 32],
            expires_at: 10,
            principal_uid: "p".into(),
        }
    }

    fn setup() -> (tempfile::TempDir, SqliteBatchWriter, PathBuf) {
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
        let w = SqliteBatchWriter::start(path.clone(), Duration::from_secs(1)).expect("writer");
        (dir, w, path)
    }

    fn count(path: &std::path::Path, table: &str) -> i64 {
        Connection::open(path)
            .expect("open")
            .query_row(&format!("SELECT COUNT(*) FROM {table}"), (), |r| r.get(0))
            .expect("count")
    }

    fn batch(serials: &[&str], nonces: &[(usize, u8)], policy: ReplayPolicy) -> Batch {
        Batch {
            certs: serials.iter().map(|s| cert(s)).collect(),
            nonces: nonces.iter().map(|(i, b)| (*i, nonce(*b))).collect(),
            accepted: vec![true; serials.len()],
            batch_id: 7,
            policy,
        }
    }

    #[test]
    fn the_writer_connection_has_the_writer_settings() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("s.db");
        drop(Connection::open(&path).expect("create")); // `open` does not create
        let conn = open(&path, Duration::from_secs(1)).expect("open");
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

    #[tokio::test]
    async fn a_consumed_nonce_refuses_only_its_record() {
        let (_d, w, path) = setup();
        let first = w
            .commit(batch(&["01"], &[(0, 1)], ReplayPolicy::DropCert))
            .await
            .expect("commit");
        assert_eq!(first, vec![true]);
        let second = w
            .commit(batch(
                &["02", "03", "04"],
                &[(0, 1), (1, 2)],
                ReplayPolicy::DropCert,
            ))
            .await
            .expect("commit");
        // 02 replays nonce 1; 03 has a fresh nonce; 04 has none.
        assert_eq!(second, vec![false, true, true]);
        assert_eq!(count(&path, "warrant_certs"), 3);
        assert_eq!(count(&path, "warrant_da_nonces"), 2);
    }

    #[tokio::test]
    async fn buffered_keeps_the_certificate_of_a_replay() {
        let (_d, w, path) = setup();
        w.commit(batch(&["01"], &[(0, 1)], ReplayPolicy::KeepCert))
            .await
            .expect("commit");
        let out = w
            .commit(batch(&["02"], &[(0, 1)], ReplayPolicy::KeepCert))
            .await
            .expect("commit");
        assert_eq!(out, vec![false]);
        assert_eq!(count(&path, "warrant_certs"), 2);
    }

    #[tokio::test]
    async fn other_connections_commits_are_seen_and_its_own_are_not() {
        let (_d, w, path) = setup();
        for serial in ["01", "02"] {
            w.commit(batch(&[serial], &[], ReplayPolicy::DropCert))
                .await
                .expect("commit");
        }
        assert_eq!(w.foreign_writes(), 0, "the writer's own commits");
        Connection::open(&path)
            .expect("open")
            .execute(
                "UPDATE warrant_certs SET status = 'R' WHERE serial = '01'",
                (),
            )
            .expect("foreign write");
        // The next batch looks under the write lock, whatever the timing.
        w.commit(batch(&["03"], &[], ReplayPolicy::DropCert))
            .await
            .expect("commit");
        assert_eq!(w.foreign_writes(), 1);
        // Idle: the periodic probe sees the next one without a batch.
        Connection::open(&path)
            .expect("open")
            .execute(
                "UPDATE warrant_certs SET status = 'R' WHERE serial = '02'",
                (),
            )
            .expect("foreign write");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while w.foreign_writes() < 2 && std::time::Instant::now() < deadline {
            tokio::time::sleep(FOREIGN_WRITE_PROBE / 4).await;
        }
        assert_eq!(w.foreign_writes(), 2, "seen by the idle probe");
    }

    #[tokio::test]
    async fn a_failed_batch_writes_nothing_and_the_next_one_works() {
        let (_d, w, path) = setup();
        w.commit(batch(&["01"], &[], ReplayPolicy::DropCert))
            .await
            .expect("commit");
        // A duplicate serial fails the whole batch, its nonce included.
        let err = w
            .commit(batch(&["02", "01"], &[(0, 5)], ReplayPolicy::DropCert))
            .await
            .expect_err("duplicate serial");
        assert!(matches!(err, StoreError::Conflict("row")), "{err:?}");
        assert_eq!(count(&path, "warrant_certs"), 1);
        assert_eq!(count(&path, "warrant_da_nonces"), 0);
        let ok = w
            .commit(batch(&["02"], &[(0, 5)], ReplayPolicy::DropCert))
            .await
            .expect("commit after a failure");
        assert_eq!(ok, vec![true]);
        w.close();
        assert!(matches!(
            w.commit(batch(&["03"], &[], ReplayPolicy::DropCert)).await,
            Err(StoreError::Unavailable(_))
        ));
    }
}
