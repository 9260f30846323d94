//! SQLite: fail-stop on storage faults.
//!
//! An fsync that fails means pages the kernel held for the file may never
//! reach the disk, and Linux reports such a writeback error once per open
//! file description: a later fsync on the same description, or on one opened
//! after the error was reported, can return success for pages that were
//! dropped. Retrying cannot make those rows durable, so, as PostgreSQL does,
//! the first failed fsync of the WAL stops the write path for good
//! ([`StorageFault::stop`]): every later `submit` is refused at once,
//! requests that were waiting on a sync are failed, `Issuance::healthy`
//! turns false, and nothing but a restart (which replays the WAL from the
//! disk) sets it back.
//!
//! The fsyncs that acknowledge rows go through a [`SyncedFile`], whose
//! descriptor is opened when the store opens and kept until it closes, so it
//! was open before any row it syncs was written and sees every writeback
//! error reported after that.
//!
//! SQLite's own checkpoints fsync the WAL and the database file inside the
//! write connection; a failure there leaves the checkpoint unfinished, so
//! the WAL keeps the frames (already synced by us) and the next checkpoint
//! copies them again. No acknowledged row depends on such an fsync.
//!
//! A failed *write* is not a fault here: it fails its transaction, which
//! SQLite rolls back, nothing is acknowledged, and a later write may succeed
//! (a full disk that gets space back).

use std::fmt::Display;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{StoreError, WriteError};
use crate::faults::{self, Op};

/// Why every write is refused once the latch is set.
pub(crate) const STOPPED: &str =
    "write path stopped after a storage fault (a failed fsync); restart the server";

/// The latch shared by everything on the SQLite write path. Once set it is
/// never cleared: a later successful commit or fsync proves nothing about the
/// rows of the failed one.
#[derive(Debug, Default)]
pub(crate) struct StorageFault {
    stopped: AtomicBool,
}

impl StorageFault {
    /// Whether a storage fault has stopped the write path.
    #[inline]
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Stops the write path: `what` failed with `error`. Only the first call
    /// logs, so a stopped server logs one line, not one per request.
    pub(crate) fn stop(&self, what: &str, error: &dyn Display) {
        if !self.stopped.swap(true, Ordering::AcqRel) {
            tracing::error!(
                error = %error,
                "storage fault: {what} failed; the write path is stopped until restart \
                 (no issuance is acknowledged, /readyz answers 503)"
            );
        }
    }

    /// `Ok` while the write path runs; the refusal afterwards.
    #[inline]
    pub(crate) fn check(&self) -> Result<(), StoreError> {
        if self.is_stopped() {
            Err(stopped())
        } else {
            Ok(())
        }
    }
}

/// What [`SyncedFile`] syncs, in messages.
const WAL_FSYNC: &str = "fsync of the SQLite WAL";

/// The store error of a refusal after the write path stopped.
pub(crate) fn stopped() -> StoreError {
    StoreError::Unavailable(STOPPED.into())
}

/// The write error of a refusal after the write path stopped.
pub(crate) fn write_stopped() -> WriteError {
    WriteError::Unavailable(STOPPED.into())
}

/// A file fsynced through one descriptor held for the life of the write
/// path (see the module comment for why it is never reopened).
#[derive(Debug)]
pub(crate) struct SyncedFile {
    file: File,
    path: PathBuf,
    /// (device, inode) at open: the path must still name this file.
    id: (u64, u64),
}

impl SyncedFile {
    pub(crate) fn open(path: &Path) -> Result<SyncedFile, StoreError> {
        let opened = File::open(path).and_then(|file| {
            let id = file_id(&file.metadata()?);
            Ok((file, id))
        });
        let (file, id) = opened.map_err(|e| {
            StoreError::Database(format!("opening {} for fsync: {e}", path.display()))
        })?;
        Ok(SyncedFile {
            file,
            path: path.to_path_buf(),
            id,
        })
    }

    /// Makes everything written to the file so far durable, or stops the
    /// write path. Also refuses once the path no longer names the file the
    /// descriptor holds (removed or replaced): syncing an orphan is not
    /// durability. Fails at once when the write path is already stopped,
    /// and after the sync when another thread stopped it meanwhile, so no
    /// caller acknowledges a row after the first fault.
    pub(crate) fn sync(&self, fault: &StorageFault) -> Result<(), StoreError> {
        fault.check()?;
        if let Err(e) = self.sync_and_verify() {
            fault.stop(WAL_FSYNC, &e);
            return Err(StoreError::Unavailable(format!("{WAL_FSYNC} failed: {e}")));
        }
        fault.check()
    }

    fn sync_and_verify(&self) -> std::io::Result<()> {
        if faults::injected(&self.path, Op::SlowWalFsync).is_some() {
            std::thread::sleep(faults::SLOW_FSYNC);
        }
        if let Some(e) = faults::injected(&self.path, Op::WalFsync) {
            return Err(e);
        }
        self.file.sync_data()?;
        // The path must still name the descriptor's file (see `sync`).
        let now = std::fs::metadata(&self.path)?;
        if file_id(&now) != self.id {
            return Err(std::io::Error::other(format!(
                "{} was replaced or removed while open",
                self.path.display()
            )));
        }
        Ok(())
    }
}

#[cfg(unix)]
fn file_id(m: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}

#[cfg(not(unix))]
fn file_id(_: &std::fs::Metadata) -> (u64, u64) {
    (0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latch_never_clears_and_refuses_after_it_is_set() {
        let f = StorageFault::default();
        assert!(f.check().is_ok());
        f.stop("test", &"boom");
        f.stop("test again", &"boom");
        assert!(f.is_stopped());
        assert!(matches!(f.check(), Err(StoreError::Unavailable(m)) if m == STOPPED));
    }

    #[test]
    fn a_removed_file_fails_its_sync_and_stops_the_write_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x-wal");
        std::fs::write(&path, b"frames").expect("write");
        let f = SyncedFile::open(&path).expect("open");
        let fault = StorageFault::default();
        f.sync(&fault).expect("first sync");
        std::fs::remove_file(&path).expect("remove");
        // Recreated under the same name: still not the file SQLite writes.
        std::fs::write(&path, b"other").expect("recreate");
        let err = f.sync(&fault).expect_err("orphan synced");
        assert!(err.to_string().contains("fsync"), "{err}");
        assert!(fault.is_stopped());
    }
}
