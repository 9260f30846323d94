//! Fault injection for tests: makes the SQLite write path's fsyncs or WAL
//! writes fail for the databases under a directory, to prove that a failed
//! fsync stops the write path (`storage_fault`) and that a failed, short or
//! interrupted WAL write or checkpoint loses no acknowledged row
//! (`wal_vfs`).
//!
//! Compiled in only with the `fault-injection` cargo feature, which only
//! test builds enable (the server's dev-dependencies); without it
//! [`injected`] is an inline `None` and nothing here exists at run time.
//! Faults are keyed by directory so that tests running in parallel in one
//! process, each with its own temporary data directory, do not see each
//! other's.

/// An operation that can be made to fail.
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// An fsync of the WAL: the store's own after a batch or an
    /// administrative write (`SqlCore::sync_wal`), and SQLite's during a
    /// checkpoint (through `wal_vfs`).
    WalFsync,
    /// A gathered write of the WAL (`wal_vfs`) fails with EIO before any of
    /// it reaches the file.
    WalWrite,
    /// A gathered write of the WAL stops inside the commit frame's page:
    /// the frames before it and a part of it reach the file, then the write
    /// fails as the default VFS reports a write that stops short (disk
    /// full).
    ShortWalWrite,
    /// A gathered write of the WAL puts every frame before the commit frame
    /// in the file and then fails: what a crash between two frames leaves
    /// on disk.
    CrashBeforeWalCommitFrame,
    /// A write of the database file fails with EIO before any of it
    /// reaches the file (in WAL mode only checkpoints write it).
    DbWrite,
    /// A write of the database file puts half its page in the file, then
    /// fails as a full disk does.
    ShortDbWrite,
    /// Every other write of the database file fails: a checkpoint's first
    /// page reaches the file and its second does not, as a crash between
    /// the two would leave it.
    CrashInsideCheckpoint,
    /// An fsync of the database file (a checkpoint's, after it copied the
    /// WAL) fails.
    DbFsync,
    /// The store's own fsync of the WAL takes [`SLOW_FSYNC`] longer (a slow
    /// disk), then proceeds (or fails, with [`Op::WalFsync`] injected too):
    /// time for records to arrive while it is in flight.
    SlowWalFsync,
}

/// How much longer an fsync takes with [`Op::SlowWalFsync`] injected.
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
pub const SLOW_FSYNC: std::time::Duration = std::time::Duration::from_millis(400);

#[cfg(feature = "fault-injection")]
mod imp {
    use super::Op;
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    static FAULTS: Mutex<Vec<(PathBuf, Op)>> = Mutex::new(Vec::new());
    /// Whether `FAULTS` holds anything: the common case takes no lock.
    static ANY: AtomicBool = AtomicBool::new(false);

    /// From now on, `op` fails with EIO on every file under `dir`.
    pub fn inject(dir: &Path, op: Op) {
        let mut f = FAULTS.lock().unwrap_or_else(|p| p.into_inner());
        f.push((dir.to_path_buf(), op));
        ANY.store(true, Ordering::Release);
    }

    /// Makes the WAL fsyncs under `dir` fail.
    pub fn fail_fsyncs(dir: &Path) {
        inject(dir, Op::WalFsync);
    }

    /// Removes every fault injected under `dir`.
    pub fn clear(dir: &Path) {
        let mut f = FAULTS.lock().unwrap_or_else(|p| p.into_inner());
        f.retain(|(d, _)| d != dir);
        ANY.store(!f.is_empty(), Ordering::Release);
    }

    pub(crate) fn injected(path: &Path, op: Op) -> Option<std::io::Error> {
        if !ANY.load(Ordering::Acquire) {
            return None;
        }
        let f = FAULTS.lock().unwrap_or_else(|p| p.into_inner());
        f.iter()
            .any(|(dir, o)| *o == op && path.starts_with(dir))
            .then(|| std::io::Error::from_raw_os_error(5)) // EIO
    }
}

#[cfg(feature = "fault-injection")]
pub use imp::{clear, fail_fsyncs, inject};

#[cfg(feature = "fault-injection")]
pub(crate) use imp::injected;

/// The injected failure of `op` on the file at `path`, if any.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn injected(_path: &std::path::Path, _op: Op) -> Option<std::io::Error> {
    None
}
