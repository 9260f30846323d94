//! SQLite: WAL checkpoints copied back on their own thread, off the writer's.
//!
//! SQLite's automatic checkpoint runs inside the commit that leaves the WAL
//! past `wal_autocheckpoint` pages: the `sqlite-writer` thread copied every
//! page of the WAL back into the database file and fsynced both before it
//! could write the next batch, and in durable mode every waiting request
//! waited with it (the durable p99 of `warrant bench`, 64 agents: 31–37 ms
//! against 19–22 ms buffered). Now a checkpoint has two parts:
//!
//! 1. **The copy.** The commit that crosses [`CheckpointLimits::wake_at`]
//!    wakes the `sqlite-checkpt` thread, which runs a PASSIVE checkpoint on
//!    a connection of its own. A PASSIVE checkpoint never takes the write
//!    lock, so batches go on being written meanwhile; their frames land
//!    after the ones being copied.
//! 2. **The rest.** The writer's first commit after the copy runs a PASSIVE
//!    checkpoint itself. It copies only the frames written during the copy,
//!    and leaves the WAL fully copied back, so the writer's next
//!    transaction starts the WAL over from its beginning. Without this step
//!    the thread would chase the writer: the WAL is only started over by a
//!    transaction that begins with nothing left to copy, which a writer that
//!    never pauses does not see, and each chasing checkpoint costs two more
//!    fsyncs beside the syncers' (in `write_bench` that cost durable SQLite
//!    a quarter of its rate at 64 issuers).
//!
//! SQLite fsyncs the database file only at the end of a checkpoint that
//! copied the whole WAL, which the thread's copy never is while batches
//! keep coming: its tens of MiB of copied pages stayed dirty in the page
//! cache until the writer's finishing step fsynced them, and that fsync
//! (8–14 ms on a fast disk) stopped every durable commit behind it. So the
//! thread fsyncs the database file itself after its copy, copies again what
//! came meanwhile and fsyncs again ([`COPY_ROUNDS`]), and the writer's fsync
//! finds only the few pages it copied.
//!
//! Durability does not move: a checkpoint fsyncs the WAL before it copies
//! and the database file after, with `synchronous=NORMAL` as on every
//! connection here, and the syncer threads still fsync the WAL after each
//! commit before its waiters are answered. The thread's own fsync only
//! flushes earlier what the writer's would have.
//!
//! Should the thread fall behind, or be gone, the writer checkpoints inline
//! once the WAL holds [`CheckpointLimits::writer_at`] pages, as SQLite would
//! have, so the WAL stays bounded.
//!
//! A failed fsync in either part (SQLite's own of the WAL or the database
//! file, or the thread's of the database file) stops the write path
//! (`storage_fault`): a checkpoint whose copy is not durable must not let
//! the WAL start over. Once stopped, no checkpoint runs any more: pages the
//! kernel dropped may no longer read back as they were written, and copying
//! them into the database file could only spread the damage. The WAL stays
//! as it is on the disk for the restart to replay.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use rusqlite::{Connection, ffi};

use crate::storage_fault::{StorageFault, SyncedFile, is_fsync_failure};

/// Name of the checkpointer thread, so that a benchmark embedding the server
/// can count its CPU time with the server's (at most 15 bytes: Linux cuts
/// thread names there, and the count matches them whole).
pub const SQLITE_CHECKPOINTER_THREAD: &str = "sqlite-checkpt";

/// When the WAL is copied back into the database, in WAL pages after a
/// commit of the writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CheckpointLimits {
    /// The checkpointer is woken: the former `wal_autocheckpoint` of the
    /// writer (see `sql::SQLITE_WRITER_PRAGMAS` for why 16 000).
    pub(crate) wake_at: c_int,
    /// The writer checkpoints itself: the checkpointer is behind by three
    /// times its own interval.
    pub(crate) writer_at: c_int,
}

impl CheckpointLimits {
    #[cfg(test)]
    pub(crate) const DEFAULT: CheckpointLimits = CheckpointLimits {
        wake_at: 16_000,
        writer_at: 64_000,
    };

    /// The thread at `pages` (`StoreOptions::wal_checkpoint_pages`), the
    /// writer at four times as many.
    pub(crate) fn from_pages(pages: u32) -> CheckpointLimits {
        let wake_at = c_int::try_from(pages.max(1)).unwrap_or(c_int::MAX / 4);
        CheckpointLimits {
            wake_at,
            writer_at: wake_at.saturating_mul(4),
        }
    }
}

/// Where the current checkpoint stands; the hook (writer thread) and the
/// checkpointer thread share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Phase {
    /// Nothing to do until the WAL reaches `wake_at`.
    Idle = 0,
    /// The thread was woken and copies the WAL back. Only the thread moves
    /// the phase on from here.
    Copying = 1,
    /// The thread is done; the writer's next commit finishes.
    Copied = 2,
}

impl Phase {
    fn from_u8(v: u8) -> Phase {
        match v {
            1 => Phase::Copying,
            2 => Phase::Copied,
            _ => Phase::Idle,
        }
    }
}

/// What the writer does after a commit that left `pages` in the WAL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterCommit {
    Nothing,
    WakeCheckpointer,
    /// Copy what the thread's copy left (small).
    FinishInline,
    /// The thread is far behind: copy everything, as SQLite would.
    CheckpointInline,
}

/// The writer's decision after a commit, and the phase it leaves.
pub(crate) fn after_commit(
    pages: c_int,
    phase: Phase,
    limits: CheckpointLimits,
) -> (AfterCommit, Phase) {
    if pages >= limits.writer_at {
        // The thread's copy, if one runs, finds less to do.
        let next = if phase == Phase::Copying {
            Phase::Copying
        } else {
            Phase::Idle
        };
        return (AfterCommit::CheckpointInline, next);
    }
    match phase {
        // A WAL started over since the copy (no pages reached `wake_at`)
        // needs no finishing.
        Phase::Copied if pages < limits.wake_at => (AfterCommit::Nothing, Phase::Idle),
        Phase::Copied => (AfterCommit::FinishInline, Phase::Idle),
        Phase::Copying => (AfterCommit::Nothing, Phase::Copying),
        Phase::Idle if pages >= limits.wake_at => (AfterCommit::WakeCheckpointer, Phase::Copying),
        Phase::Idle => (AfterCommit::Nothing, Phase::Idle),
    }
}

/// What the WAL hook reads; owned by the hook through a strong count of its
/// `Arc` for as long as the hook is registered.
struct HookState {
    limits: CheckpointLimits,
    /// A [`Phase`]: the hook moves it from `Idle` and `Copied`, the thread
    /// from `Copying`, so neither overwrites the other's move.
    phase: Arc<AtomicU8>,
    wake: SyncSender<()>,
    /// Checkpoints the writer ran itself.
    inline: Arc<AtomicU64>,
    fault: Arc<StorageFault>,
}

/// The checkpointer thread and the WAL hook on the writer's connection that
/// wakes it. Dropping it does not unregister the hook: call
/// [`Checkpointer::stop`] with the connection it was started on.
pub(crate) struct Checkpointer {
    hook: *const HookState,
    thread: Option<JoinHandle<()>>,
    /// Checkpoints the thread completed.
    completed: Arc<AtomicU64>,
    /// Checkpoints the writer ran itself (shared with the hook).
    inline: Arc<AtomicU64>,
}

// SAFETY: `hook` points into an `Arc<HookState>` (whose contents are Send
// and Sync) that stays alive until `stop` unregisters the hook and releases
// it; it is only dereferenced by the hook, on the thread that uses the
// writer connection, and by `stop`.
unsafe impl Send for Checkpointer {}

impl Checkpointer {
    /// Starts the thread on `own` (a connection to the same database, not
    /// `writer`) and `db_file` (the database file, which it fsyncs after a
    /// copy), and registers the hook on `writer`, replacing its automatic
    /// checkpoint. A failed checkpoint fsync sets `fault`.
    pub(crate) fn start(
        writer: &Connection,
        own: Connection,
        db_file: SyncedFile,
        limits: CheckpointLimits,
        fault: Arc<StorageFault>,
    ) -> std::io::Result<Checkpointer> {
        let (wake, woken) = sync_channel(1);
        let completed = Arc::new(AtomicU64::new(0));
        let phase = Arc::new(AtomicU8::new(Phase::Idle as u8));
        let (done, thread_phase, thread_fault) = (completed.clone(), phase.clone(), fault.clone());
        let thread = std::thread::Builder::new()
            .name(SQLITE_CHECKPOINTER_THREAD.into())
            .spawn(move || run(own, &db_file, woken, thread_phase, done, &thread_fault))?;
        let inline = Arc::new(AtomicU64::new(0));
        let hook = Arc::into_raw(Arc::new(HookState {
            limits,
            phase,
            wake,
            inline: inline.clone(),
            fault,
        }));
        // SAFETY: the handle is the live connection's; `hook` stays valid
        // until `stop` unregisters the hook (see `Checkpointer`).
        unsafe {
            ffi::sqlite3_wal_hook(writer.handle(), Some(on_commit), hook as *mut c_void);
        }
        Ok(Checkpointer {
            hook,
            thread: Some(thread),
            completed,
            inline,
        })
    }

    /// Checkpoints the thread has completed and the writer ran itself.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.completed.load(Ordering::Acquire),
            self.inline.load(Ordering::Acquire),
        )
    }

    /// Unregisters the hook from `writer` (the connection `start` was given),
    /// then lets the thread finish the checkpoint it may be running and end.
    pub(crate) fn stop(mut self, writer: &Connection) {
        // SAFETY: after this call SQLite no longer holds the pointer, so
        // the hook's strong count can be released.
        unsafe {
            ffi::sqlite3_wal_hook(writer.handle(), None, std::ptr::null_mut());
            drop(Arc::from_raw(self.hook));
        }
        // The hook's state held the only sender: the thread's receive ends.
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let (completed, inline) = self.counts();
        tracing::debug!(completed, inline, "WAL checkpointer stopped");
    }
}

unsafe extern "C" fn on_commit(
    arg: *mut c_void,
    db: *mut ffi::sqlite3,
    name: *const c_char,
    pages: c_int,
) -> c_int {
    // SAFETY: `arg` is the `HookState` registered by `Checkpointer::start`,
    // alive while the hook is registered.
    let state = unsafe { &*(arg as *const HookState) };
    if state.fault.is_stopped() {
        return ffi::SQLITE_OK;
    }
    let phase = Phase::from_u8(state.phase.load(Ordering::Acquire));
    let (action, next) = after_commit(pages, phase, state.limits);
    if next != phase {
        state.phase.store(next as u8, Ordering::Release);
    }
    match action {
        AfterCommit::Nothing => {}
        AfterCommit::WakeCheckpointer => {
            // Capacity one and one wake-up per copy: it cannot be full. If
            // the thread is gone the phase stays `Copying`, and the inline
            // checkpoint at `writer_at` keeps the WAL bounded.
            let _ = state.wake.try_send(());
        }
        AfterCommit::FinishInline | AfterCommit::CheckpointInline => {
            // What SQLite's own automatic checkpoint does at this point. Its
            // result does not change the commit's, which has happened.
            // SAFETY: `db` and `name` are the ones SQLite passed in.
            let rc = unsafe {
                ffi::sqlite3_wal_checkpoint_v2(
                    db,
                    name,
                    ffi::SQLITE_CHECKPOINT_PASSIVE,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
            if rc == ffi::SQLITE_OK {
                state.inline.fetch_add(1, Ordering::AcqRel);
            } else if is_fsync_failure(rc) {
                // SAFETY: `db` is SQLite's live connection; the message is
                // read before anything else can change it.
                let msg = unsafe { std::ffi::CStr::from_ptr(ffi::sqlite3_errmsg(db)) };
                let error = format!("{} (SQLite code {rc})", msg.to_string_lossy());
                state
                    .fault
                    .stop("a WAL checkpoint by the writer (fsync)", &error);
            }
            if action == AfterCommit::CheckpointInline {
                // Rare by design: worth a line in the log.
                tracing::warn!(
                    pages,
                    rc,
                    "the WAL checkpointer fell behind; the writer checkpointed the WAL itself"
                );
            }
        }
    }
    ffi::SQLITE_OK
}

/// Copy-and-fsync rounds the thread runs per wake-up. The second copies
/// what the writer wrote during the first round (a few hundred pages
/// against tens of thousands), so that the writer's finishing step copies
/// and fsyncs only what came during the second: with one round its fsync
/// still took 2–5 ms, with the thread's first fsync 9–15 ms.
const COPY_ROUNDS: usize = 2;

/// Why a copy round failed.
#[derive(Debug)]
enum RoundError {
    /// The checkpoint failed otherwise (an I/O error reading the WAL or
    /// writing the database file): nothing was made durable or reset, and a
    /// later checkpoint copies the same frames again.
    Sqlite(rusqlite::Error),
    /// An fsync failed: the write path is stopped (logged there).
    Stopped,
}

/// One PASSIVE checkpoint then an fsync of the database file: `Ok(None)`
/// when another connection was checkpointing, else the WAL's frames and
/// how many of them are copied back.
fn copy_round(
    conn: &Connection,
    db_file: &SyncedFile,
    fault: &StorageFault,
) -> Result<Option<(i64, i64)>, RoundError> {
    if fault.is_stopped() {
        return Err(RoundError::Stopped);
    }
    let checkpoint = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", (), |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
        ))
    });
    let (busy, log, copied) = match checkpoint {
        Ok(row) => row,
        Err(e) => {
            if e.sqlite_error()
                .is_some_and(|c| is_fsync_failure(c.extended_code))
            {
                fault.stop("a WAL checkpoint (fsync)", &e);
                return Err(RoundError::Stopped);
            }
            return Err(RoundError::Sqlite(e));
        }
    };
    if busy != 0 {
        return Ok(None);
    }
    // Flushes early what the writer's finishing checkpoint would; a failure
    // is as fatal as one of SQLite's own.
    db_file.sync(fault).map_err(|_| RoundError::Stopped)?;
    Ok(Some((log, copied)))
}

fn run(
    conn: Connection,
    db_file: &SyncedFile,
    woken: Receiver<()>,
    phase: Arc<AtomicU8>,
    completed: Arc<AtomicU64>,
    fault: &StorageFault,
) {
    while woken.recv().is_ok() {
        let mut result = Ok(None);
        for _ in 0..COPY_ROUNDS {
            result = copy_round(&conn, db_file, fault);
            if !matches!(result, Ok(Some(_))) {
                break;
            }
        }
        let next = match result {
            Ok(Some((log, copied))) => {
                completed.fetch_add(1, Ordering::AcqRel);
                tracing::debug!(log, copied, "WAL copied back");
                Phase::Copied
            }
            // Another connection is checkpointing: the next commit past
            // `wake_at` wakes this thread again.
            Ok(None) => {
                tracing::debug!("WAL checkpoint busy");
                Phase::Idle
            }
            Err(RoundError::Sqlite(e)) => {
                tracing::warn!(error = %e, "WAL checkpoint failed");
                Phase::Idle
            }
            // Left in `Copying`: the writer never finishes a copy that did
            // not happen, nor wakes this thread again.
            Err(RoundError::Stopped) => Phase::Copying,
        };
        phase.store(next as u8, Ordering::Release);
    }
    if fault.is_stopped() {
        no_checkpoint_on_close(&conn);
    }
}

/// After a storage fault: closing the last connection must not checkpoint
/// (see the module comment).
pub(crate) fn no_checkpoint_on_close(conn: &Connection) {
    if let Err(e) = conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    ) {
        tracing::warn!(error = %e, "could not turn off the checkpoint at close");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_thread_names_survive_the_kernel_limit() {
        // /proc shows at most 15 bytes of a thread's name; a longer one
        // would go uncounted by `warrant bench` and `write_bench`.
        for name in [
            SQLITE_CHECKPOINTER_THREAD,
            crate::SQLITE_WRITER_THREAD,
            crate::SQLITE_SYNCER_THREAD,
        ] {
            assert!(name.len() <= 15, "{name}");
        }
    }

    #[test]
    fn one_copy_by_the_thread_then_the_writer_finishes() {
        use AfterCommit::*;
        use Phase::*;
        let l = CheckpointLimits::DEFAULT;
        assert_eq!(after_commit(0, Idle, l), (Nothing, Idle));
        assert_eq!(after_commit(15_999, Idle, l), (Nothing, Idle));
        assert_eq!(after_commit(16_000, Idle, l), (WakeCheckpointer, Copying));
        // No second wake-up while the thread copies.
        assert_eq!(after_commit(20_000, Copying, l), (Nothing, Copying));
        assert_eq!(after_commit(20_000, Copied, l), (FinishInline, Idle));
        // Started over meanwhile: nothing left to finish.
        assert_eq!(after_commit(30, Copied, l), (Nothing, Idle));
    }

    #[test]
    fn far_behind_the_writer_copies_everything_itself() {
        use AfterCommit::*;
        use Phase::*;
        let l = CheckpointLimits::DEFAULT;
        assert_eq!(
            after_commit(64_000, Copying, l),
            (CheckpointInline, Copying)
        );
        assert_eq!(after_commit(64_000, Idle, l), (CheckpointInline, Idle));
        assert_eq!(
            after_commit(c_int::MAX, Copied, l),
            (CheckpointInline, Idle)
        );
    }

    #[test]
    fn the_default_limits_are_those_of_the_default_options() {
        let pages = crate::StoreOptions::default().wal_checkpoint_pages;
        assert_eq!(
            CheckpointLimits::from_pages(pages),
            CheckpointLimits::DEFAULT
        );
        assert_eq!(
            CheckpointLimits::from_pages(8),
            CheckpointLimits {
                wake_at: 8,
                writer_at: 32
            }
        );
    }

    #[test]
    fn a_phase_survives_its_round_trip_through_the_atomic() {
        for p in [Phase::Idle, Phase::Copying, Phase::Copied] {
            assert_eq!(Phase::from_u8(p as u8), p);
        }
    }
}
