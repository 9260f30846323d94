//! SQLite: a VFS that gathers the WAL writes of one commit into a few
//! large writes.
//!
//! SQLite appends a WAL frame as two writes, its 24-byte header and then
//! the page, so a commit of `n` frames costs `2n` system calls, and each
//! 4 KiB frame straddles two file pages, which the kernel's write path
//! walks three times. This VFS wraps the default one and changes only the
//! WAL file of the connections that open with it (the store's one write
//! connection): an append that continues the previous one is kept in a
//! buffer, and the buffer goes to the file in writes of up to [`MAX_WRITE`]
//! bytes
//!
//! - right after the page of a **commit frame** (a frame header whose
//!   "database size after commit" field is not zero, in the documented WAL
//!   file format). SQLite publishes a commit to other connections by
//!   updating the WAL index in shared memory, with no call on the WAL file
//!   in between, so every frame must be in the file when the commit frame's
//!   write returns; the commit frame is the last one a commit writes;
//! - before any other operation on the file (read, sync, size, truncate,
//!   lock, file control) and before a write that does not continue the
//!   buffer;
//! - when it holds [`BUFFER_LIMIT`] bytes.
//!
//! The connection must not spill pages to the WAL before `COMMIT`
//! (`cache_spill = OFF`, set by `sql::connect_pools`): then the only WAL
//! writes are those of a commit, the buffer is empty whenever the
//! connection does not hold the WAL write lock, and what a failed commit
//! leaves is dropped. A spilled transaction that rolled back would leave
//! frames in the buffer after the lock is released, and writing them out
//! later could overwrite frames another process committed meanwhile.
//!
//! So no connection, and no call of this one, sees the file without a
//! frame that SQLite believes written. Durability is unchanged: the frames
//! are in the page cache before the commit returns, as without this VFS,
//! and the store's own WAL fsync (`SqlCore::sync_wal`) runs after that. A
//! failed buffered write fails the call that flushed it, as a failed write
//! would have failed itself; SQLite then rolls the transaction back, and the
//! frames that did reach the file follow the last valid commit, where
//! recovery ignores them (their checksums chain from a commit that is not
//! there). The fault-injection tests (`tests/storage_faults.rs`) fail a
//! write, stop one inside the commit frame, and stop one between frames,
//! and reopen a copy of the files as a crash would leave them.
//!
//! The database file, journals and temporary files are opened by the
//! default VFS itself and never pass through here, except in builds with
//! the `fault-injection` feature, where the database file passes through
//! [`fault_db`] so that tests can fail the writes and fsyncs of a
//! checkpoint.

use libsqlite3_sys as ffi;
#[cfg(test)]
use std::cell::Cell;
use std::ffi::{CStr, c_int, c_void};
use std::sync::OnceLock;

/// The name connections pass to open with this VFS.
pub(crate) const NAME: &CStr = c"warrant-wal-gather";

/// Most bytes held before they are written: a 1000-row buffered commit
/// (~10 MiB of frames) goes out in 1 MiB writes.
const BUFFER_LIMIT: usize = 1 << 20;

/// Most bytes handed to the default VFS in one write: the unix VFS takes
/// at most 128 KiB − 1 per call (SQLite itself never writes more than a
/// page or a frame at once).
const MAX_WRITE: usize = 124 * 1024;

/// Where the default VFS's file lives inside ours: after [`GatheringFile`],
/// aligned for any C type.
const INNER_OFFSET: usize = std::mem::size_of::<GatheringFile>().next_multiple_of(16);

/// Registers the VFS once per process; later calls return the first outcome.
pub(crate) fn register() -> Result<&'static str, String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            // SAFETY: `sqlite3_vfs_find` initialises SQLite if needed and
            // returns the default VFS, which lives as long as the process.
            let inner = unsafe { ffi::sqlite3_vfs_find(std::ptr::null()) };
            if inner.is_null() {
                return Err("SQLite has no default VFS".into());
            }
            let _ = DEFAULT_VFS.set(VfsPtr(inner));
            // SAFETY: `inner` is a valid VFS. Ours copies it (the methods
            // other than xOpen are the default VFS's own, called with the
            // same pAppData and mxPathname they expect), is leaked so it
            // outlives every connection, and is registered once.
            unsafe {
                let mut vfs: ffi::sqlite3_vfs = *inner;
                vfs.szOsFile = c_int::try_from(INNER_OFFSET)
                    .map_err(|e| e.to_string())?
                    .checked_add((*inner).szOsFile)
                    .ok_or("file size overflow")?;
                vfs.pNext = std::ptr::null_mut();
                vfs.zName = NAME.as_ptr();
                vfs.xOpen = Some(gathering_open);
                let rc = ffi::sqlite3_vfs_register(Box::into_raw(Box::new(vfs)), 0);
                if rc != ffi::SQLITE_OK {
                    return Err(format!("sqlite3_vfs_register failed ({rc})"));
                }
            }
            Ok(())
        })
        .clone()
        .map(|()| NAME.to_str().unwrap_or("warrant-wal-gather"))
}

struct VfsPtr(*mut ffi::sqlite3_vfs);
// SAFETY: the default VFS is a process-wide object that SQLite itself
// shares between threads; we only read through the pointer.
unsafe impl Send for VfsPtr {}
unsafe impl Sync for VfsPtr {}
static DEFAULT_VFS: OnceLock<VfsPtr> = OnceLock::new();

/// What a WAL write means for the buffer (see the module comment).
#[derive(Debug, PartialEq, Eq)]
enum FrameEnd {
    /// Not the end of a commit.
    No,
    /// The header of a commit frame: write out after its page.
    AfterNextWrite,
    /// A whole commit frame (header and page in one write): write out now.
    Now,
}

/// Classifies one write to the WAL. A frame header is 24 bytes; bytes 4..8
/// hold the database size in pages after a commit, zero in other frames.
/// The WAL header is 32 bytes and pages are powers of two, so neither is
/// taken for a frame header.
fn frame_end(write: &[u8]) -> FrameEnd {
    const HEADER: usize = 24;
    let commit = || write[4..8] != [0, 0, 0, 0];
    let page = write.len().wrapping_sub(HEADER);
    if write.len() == HEADER && commit() {
        FrameEnd::AfterNextWrite
    } else if write.len() > HEADER
        && page.is_power_of_two()
        && (512..=65536).contains(&page)
        && commit()
    {
        FrameEnd::Now
    } else {
        FrameEnd::No
    }
}

#[cfg(test)]
thread_local! {
    /// Writes SQLite made to gathered WAL files on this thread, and writes
    /// that reached the default VFS.
    static WRITES_IN: Cell<u64> = const { Cell::new(0) };
    static WRITES_OUT: Cell<u64> = const { Cell::new(0) };
}

/// (writes SQLite made, writes the file got) on gathered WAL files by this
/// thread so far.
#[cfg(test)]
pub(crate) fn thread_write_counts() -> (u64, u64) {
    (WRITES_IN.get(), WRITES_OUT.get())
}

/// Our `sqlite3_file`: SQLite allocates `szOsFile` bytes for it, and the
/// default VFS's file follows at [`INNER_OFFSET`].
#[repr(C)]
struct GatheringFile {
    base: ffi::sqlite3_file,
    inner: *mut ffi::sqlite3_file,
    pending: *mut Pending,
}

struct Pending {
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    offset: i64,
    /// The last write was a commit frame's header: the next one (its page)
    /// ends the commit. Kept across a flush, since a flush at the size limit
    /// can fall between the header and the page.
    flush_after_next_write: bool,
    /// Where in `buf` the last commit frame's header starts, if `buf` holds
    /// one; for the injected faults that cut a commit short.
    #[cfg(feature = "fault-injection")]
    commit_header_at: Option<usize>,
    /// Database files (`fault_db`): writes so far, for the fault that
    /// fails every other one.
    #[cfg(feature = "fault-injection")]
    db_writes: u32,
    /// The WAL's path, where tests inject faults (`crate::faults`).
    #[cfg(feature = "fault-injection")]
    path: std::path::PathBuf,
}

impl Pending {
    /// Whether a write at `offset` may join the buffer.
    fn continues_at(&self, offset: i64) -> bool {
        self.buf.is_empty() || self.offset.checked_add(self.buf.len() as i64) == Some(offset)
    }

    /// Adds a write that [`continues_at`](Self::continues_at) the buffer;
    /// true when the buffer must go to the file now.
    fn append(&mut self, offset: i64, write: &[u8]) -> bool {
        if self.buf.is_empty() {
            self.offset = offset;
        }
        let page_of_commit_frame = std::mem::take(&mut self.flush_after_next_write);
        let end = frame_end(write);
        #[cfg(feature = "fault-injection")]
        if end != FrameEnd::No {
            self.commit_header_at = Some(self.buf.len());
        }
        self.buf.extend_from_slice(write);
        self.flush_after_next_write = end == FrameEnd::AfterNextWrite;
        page_of_commit_frame || end == FrameEnd::Now || self.buf.len() >= BUFFER_LIMIT
    }

    /// The buffer went to the file (or failed to: the transaction fails).
    /// A pending commit-frame mark stays.
    fn written(&mut self) {
        self.buf.clear();
        #[cfg(feature = "fault-injection")]
        {
            self.commit_header_at = None;
        }
    }

    /// An injected fault for the buffer about to be written: how many of
    /// its bytes reach the file, and the error the write then returns.
    #[cfg(feature = "fault-injection")]
    fn injected_fault(&self) -> Option<(usize, c_int)> {
        use crate::faults::{Op, injected};
        if injected(&self.path, Op::WalWrite).is_some() {
            return Some((0, ffi::SQLITE_IOERR_WRITE));
        }
        let at = self.commit_header_at?;
        if injected(&self.path, Op::CrashBeforeWalCommitFrame).is_some() {
            return Some((at, ffi::SQLITE_IOERR_WRITE));
        }
        if injected(&self.path, Op::ShortWalWrite).is_some() {
            // The header and part of the page: a torn commit frame.
            return Some(((at + 24 + 100).min(self.buf.len()), ffi::SQLITE_FULL));
        }
        None
    }
}

unsafe extern "C" fn gathering_open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let Some(inner_vfs) = DEFAULT_VFS.get().map(|p| p.0) else {
        return ffi::SQLITE_ERROR;
    };
    // SAFETY: SQLite passes a file of our `szOsFile` bytes, aligned for any
    // type, and the arguments of its xOpen.
    unsafe {
        #[cfg(feature = "fault-injection")]
        if flags & ffi::SQLITE_OPEN_MAIN_DB != 0 {
            return open_inside(
                inner_vfs,
                name,
                file,
                flags,
                out_flags,
                &fault_db::DB_METHODS,
            );
        }
        if flags & ffi::SQLITE_OPEN_WAL == 0 {
            // Not a WAL: the default VFS's file, used directly.
            return match (*inner_vfs).xOpen {
                Some(open) => open(inner_vfs, name, file, flags, out_flags),
                None => ffi::SQLITE_ERROR,
            };
        }
        open_inside(inner_vfs, name, file, flags, out_flags, &GATHERING_METHODS)
    }
}

/// Opens the default VFS's file inside ours (at [`INNER_OFFSET`]), with an
/// empty [`Pending`], and gives ours `methods`.
///
/// # Safety
/// `file` has our `szOsFile` bytes, aligned for any type; the other
/// arguments are those SQLite passed to xOpen.
unsafe fn open_inside(
    inner_vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
    methods: &'static ffi::sqlite3_io_methods,
) -> c_int {
    // SAFETY: per the contract; the default VFS's xOpen is called on the
    // part reserved for it.
    unsafe {
        let Some(open) = (*inner_vfs).xOpen else {
            return ffi::SQLITE_ERROR;
        };
        let ours = file.cast::<GatheringFile>();
        let inner = file
            .cast::<u8>()
            .add(INNER_OFFSET)
            .cast::<ffi::sqlite3_file>();
        (*ours).base.pMethods = std::ptr::null();
        (*inner).pMethods = std::ptr::null();
        let rc = open(inner_vfs, name, inner, flags, out_flags);
        if rc != ffi::SQLITE_OK {
            if let Some(close) = (*inner).pMethods.as_ref().and_then(|m| m.xClose) {
                close(inner);
            }
            return rc;
        }
        (*ours).inner = inner;
        (*ours).pending = Box::into_raw(Box::new(Pending {
            buf: Vec::new(),
            offset: 0,
            flush_after_next_write: false,
            #[cfg(feature = "fault-injection")]
            commit_header_at: None,
            #[cfg(feature = "fault-injection")]
            db_writes: 0,
            // SQLite passes the file's full path, valid until xClose.
            #[cfg(feature = "fault-injection")]
            path: if name.is_null() {
                std::path::PathBuf::new()
            } else {
                std::path::PathBuf::from(CStr::from_ptr(name).to_string_lossy().into_owned())
            },
        }));
        (*ours).base.pMethods = methods;
        ffi::SQLITE_OK
    }
}

/// The default VFS's methods for the file inside ours.
///
/// # Safety
/// `file` is a `GatheringFile` opened by [`gathering_open`].
unsafe fn inner(
    file: *mut ffi::sqlite3_file,
) -> (*mut ffi::sqlite3_file, &'static ffi::sqlite3_io_methods) {
    // SAFETY: per the contract, `inner` was opened and has methods that
    // live as long as the default VFS.
    unsafe {
        let inner = (*file.cast::<GatheringFile>()).inner;
        (inner, &*(*inner).pMethods)
    }
}

/// Writes out what is buffered.
///
/// # Safety
/// As [`inner`].
unsafe fn flush(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: per the contract; `pending` is ours until xClose.
    unsafe {
        let pending = &mut *(*file.cast::<GatheringFile>()).pending;
        if pending.buf.is_empty() {
            return ffi::SQLITE_OK;
        }
        let (f, m) = inner(file);
        let Some(write) = m.xWrite else {
            return ffi::SQLITE_IOERR_WRITE;
        };
        #[cfg(not(feature = "fault-injection"))]
        let (keep, failure) = (pending.buf.len(), ffi::SQLITE_OK);
        #[cfg(feature = "fault-injection")]
        let (keep, failure) = pending
            .injected_fault()
            .unwrap_or((pending.buf.len(), ffi::SQLITE_OK));
        let mut rc = ffi::SQLITE_OK;
        let mut offset = pending.offset;
        for chunk in pending.buf[..keep].chunks(MAX_WRITE) {
            #[cfg(test)]
            WRITES_OUT.set(WRITES_OUT.get() + 1);
            // `chunk.len()` ≤ MAX_WRITE fits a c_int.
            rc = write(f, chunk.as_ptr().cast(), chunk.len() as c_int, offset);
            if rc != ffi::SQLITE_OK {
                break;
            }
            offset += chunk.len() as i64;
        }
        pending.written();
        if rc == ffi::SQLITE_OK { failure } else { rc }
    }
}

unsafe extern "C" fn gathering_write(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    #[cfg(test)]
    WRITES_IN.set(WRITES_IN.get() + 1);
    // SAFETY: SQLite passes our file and `amount` readable bytes at `data`.
    unsafe {
        let Ok(len) = usize::try_from(amount) else {
            return ffi::SQLITE_IOERR_WRITE;
        };
        let write = std::slice::from_raw_parts(data.cast::<u8>(), len);
        let pending = &mut *(*file.cast::<GatheringFile>()).pending;
        if !pending.continues_at(offset) {
            let rc = flush(file);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
        }
        if pending.append(offset, write) {
            return flush(file);
        }
        ffi::SQLITE_OK
    }
}

/// Drops what is buffered instead of writing it: a commit is written out by
/// its own last write, so anything left belongs to a transaction that did
/// not commit, and the connection no longer holds the WAL write lock.
unsafe extern "C" fn gathering_close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite closes each file once; `pending` is freed here only.
    unsafe {
        let (f, m) = inner(file);
        let closed = m.xClose.map_or(ffi::SQLITE_OK, |close| close(f));
        let ours = file.cast::<GatheringFile>();
        drop(Box::from_raw((*ours).pending));
        (*ours).pending = std::ptr::null_mut();
        (*ours).base.pMethods = std::ptr::null();
        closed
    }
}

/// Methods that must see the file as SQLite believes it: flush, then pass
/// the call on to the default VFS.
macro_rules! flush_then {
    ($name:ident, $method:ident, ($($arg:ident: $ty:ty),*)) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file, $($arg: $ty),*) -> c_int {
            // SAFETY: SQLite passes our open file and the method's arguments.
            unsafe {
                let rc = flush(file);
                if rc != ffi::SQLITE_OK {
                    return rc;
                }
                let (f, m) = inner(file);
                match m.$method {
                    Some(call) => call(f, $($arg),*),
                    None => ffi::SQLITE_IOERR,
                }
            }
        }
    };
}

/// Methods that do not look at the file's contents.
macro_rules! pass_on {
    ($name:ident, $method:ident, ($($arg:ident: $ty:ty),*), $missing:expr) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file, $($arg: $ty),*) -> c_int {
            // SAFETY: SQLite passes our open file and the method's arguments.
            unsafe {
                let (f, m) = inner(file);
                match m.$method {
                    Some(call) => call(f, $($arg),*),
                    None => $missing,
                }
            }
        }
    };
}

flush_then!(gathering_read, xRead, (data: *mut c_void, amount: c_int, offset: ffi::sqlite3_int64));
flush_then!(gathering_truncate, xTruncate, (size: ffi::sqlite3_int64));
/// The WAL's fsync, in a checkpoint of the writer's connection (it runs
/// with `synchronous=NORMAL`, so commits do not sync).
unsafe extern "C" fn gathering_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    // SAFETY: SQLite passes our open file.
    unsafe {
        let rc = flush(file);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        #[cfg(feature = "fault-injection")]
        {
            let pending = &*(*file.cast::<GatheringFile>()).pending;
            if crate::faults::injected(&pending.path, crate::faults::Op::WalFsync).is_some() {
                return ffi::SQLITE_IOERR_FSYNC;
            }
        }
        let (f, m) = inner(file);
        match m.xSync {
            Some(call) => call(f, flags),
            None => ffi::SQLITE_IOERR,
        }
    }
}
flush_then!(gathering_file_size, xFileSize, (size: *mut ffi::sqlite3_int64));
flush_then!(gathering_lock, xLock, (level: c_int));
flush_then!(gathering_unlock, xUnlock, (level: c_int));
flush_then!(gathering_check_reserved_lock, xCheckReservedLock, (out: *mut c_int));
flush_then!(gathering_file_control, xFileControl, (op: c_int, arg: *mut c_void));
flush_then!(gathering_shm_map, xShmMap, (page: c_int, size: c_int, extend: c_int, out: *mut *mut c_void));
flush_then!(gathering_shm_lock, xShmLock, (offset: c_int, n: c_int, flags: c_int));
flush_then!(gathering_shm_unmap, xShmUnmap, (delete: c_int));
flush_then!(gathering_fetch, xFetch, (offset: ffi::sqlite3_int64, amount: c_int, out: *mut *mut c_void));
pass_on!(gathering_unfetch, xUnfetch, (offset: ffi::sqlite3_int64, p: *mut c_void), ffi::SQLITE_OK);
pass_on!(gathering_sector_size, xSectorSize, (), 4096);
pass_on!(
    gathering_device_characteristics,
    xDeviceCharacteristics,
    (),
    0
);

unsafe extern "C" fn gathering_shm_barrier(file: *mut ffi::sqlite3_file) {
    // SAFETY: SQLite passes our open file.
    unsafe {
        let _ = flush(file);
        let (f, m) = inner(file);
        if let Some(barrier) = m.xShmBarrier {
            barrier(f);
        }
    }
}

static GATHERING_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(gathering_close),
    xRead: Some(gathering_read),
    xWrite: Some(gathering_write),
    xTruncate: Some(gathering_truncate),
    xSync: Some(gathering_sync),
    xFileSize: Some(gathering_file_size),
    xLock: Some(gathering_lock),
    xUnlock: Some(gathering_unlock),
    xCheckReservedLock: Some(gathering_check_reserved_lock),
    xFileControl: Some(gathering_file_control),
    xSectorSize: Some(gathering_sector_size),
    xDeviceCharacteristics: Some(gathering_device_characteristics),
    xShmMap: Some(gathering_shm_map),
    xShmLock: Some(gathering_shm_lock),
    xShmBarrier: Some(gathering_shm_barrier),
    xShmUnmap: Some(gathering_shm_unmap),
    xFetch: Some(gathering_fetch),
    xUnfetch: Some(gathering_unfetch),
};

/// Test builds only: the database file of a connection opened with this
/// VFS, passed through to the default VFS's except where a fault is
/// injected (`crate::faults`). Only checkpoints write or fsync it: in WAL
/// mode a commit writes the WAL alone. Its other calls are the gathering
/// file's: they flush a buffer that only `gathering_write` fills, so for
/// this file they pass straight on, and its xClose frees the `Pending`
/// that carries the path.
#[cfg(feature = "fault-injection")]
mod fault_db {
    use super::*;
    use crate::faults::{Op, injected};

    /// # Safety
    /// `file` was opened by [`open_inside`] with [`DB_METHODS`].
    unsafe fn path<'a>(file: *mut ffi::sqlite3_file) -> &'a std::path::Path {
        // SAFETY: per the contract; `pending` lives until xClose.
        unsafe { &(*(*file.cast::<GatheringFile>()).pending).path }
    }

    unsafe extern "C" fn db_write(
        file: *mut ffi::sqlite3_file,
        data: *const c_void,
        amount: c_int,
        offset: ffi::sqlite3_int64,
    ) -> c_int {
        // SAFETY: SQLite passes our file and `amount` readable bytes.
        unsafe {
            let (f, m) = inner(file);
            let Some(write) = m.xWrite else {
                return ffi::SQLITE_IOERR_WRITE;
            };
            let path = path(file);
            if injected(path, Op::DbWrite).is_some() {
                return ffi::SQLITE_IOERR_WRITE;
            }
            if injected(path, Op::ShortDbWrite).is_some() {
                // Half the page reaches the file: a torn page.
                let rc = write(f, data, amount / 2, offset);
                return if rc == ffi::SQLITE_OK {
                    ffi::SQLITE_FULL
                } else {
                    rc
                };
            }
            if injected(path, Op::CrashInsideCheckpoint).is_some() {
                // Every other write: a checkpoint's first page reaches the
                // file and its second fails, as a crash between them would
                // leave the file.
                let pending = &mut *(*file.cast::<GatheringFile>()).pending;
                pending.db_writes += 1;
                if pending.db_writes % 2 == 0 {
                    return ffi::SQLITE_IOERR_WRITE;
                }
            }
            write(f, data, amount, offset)
        }
    }

    unsafe extern "C" fn db_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
        // SAFETY: SQLite passes our file.
        unsafe {
            if injected(path(file), Op::DbFsync).is_some() {
                return ffi::SQLITE_IOERR_FSYNC;
            }
            let (f, m) = inner(file);
            match m.xSync {
                Some(call) => call(f, flags),
                None => ffi::SQLITE_IOERR,
            }
        }
    }

    pub(super) static DB_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
        xWrite: Some(db_write),
        xSync: Some(db_sync),
        ..GATHERING_METHODS
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(db_pages_after_commit: u32) -> Vec<u8> {
        let mut h = vec![0u8; 24];
        h[0..4].copy_from_slice(&7u32.to_be_bytes());
        h[4..8].copy_from_slice(&db_pages_after_commit.to_be_bytes());
        h[8..24].fill(0xab);
        h
    }

    #[test]
    fn only_commit_frames_end_a_gathered_write() {
        assert_eq!(frame_end(&header(0)), FrameEnd::No);
        assert_eq!(frame_end(&header(12)), FrameEnd::AfterNextWrite);
        assert_eq!(frame_end(&[0xffu8; 4096]), FrameEnd::No, "a page");
        assert_eq!(frame_end(&[0xffu8; 32]), FrameEnd::No, "the WAL header");
        let mut whole = header(12);
        whole.extend_from_slice(&[0u8; 4096]);
        assert_eq!(frame_end(&whole), FrameEnd::Now);
        let mut not_commit = header(0);
        not_commit.extend_from_slice(&[0u8; 4096]);
        assert_eq!(frame_end(&not_commit), FrameEnd::No);
    }

    /// A flush at the size limit between a commit frame's header and its
    /// page must not lose the header's mark: the page still ends the commit.
    #[test]
    fn the_page_of_a_commit_frame_flushes_after_a_flush_at_the_limit() {
        let mut p = Pending {
            buf: vec![0u8; BUFFER_LIMIT - 10],
            offset: 0,
            flush_after_next_write: false,
            #[cfg(feature = "fault-injection")]
            commit_header_at: None,
            #[cfg(feature = "fault-injection")]
            db_writes: 0,
            #[cfg(feature = "fault-injection")]
            path: std::path::PathBuf::new(),
        };
        let end = p.buf.len() as i64;
        assert!(p.append(end, &header(12)), "at the limit");
        p.written();
        let page = [7u8; 4096];
        assert!(p.continues_at(end + 24));
        assert!(p.append(end + 24, &page), "the commit's page");
        assert!(
            !p.append(end + 24 + 4096, &header(0)),
            "the next frame waits"
        );
    }

    /// A bare connection, so that this test's SQLite calls run on its own
    /// thread (the write counts are per thread).
    struct Db(*mut ffi::sqlite3);

    impl Db {
        fn open(path: &std::path::Path, vfs: Option<&CStr>) -> Db {
            let name = std::ffi::CString::new(path.to_str().expect("utf-8 path")).expect("path");
            let mut db = std::ptr::null_mut();
            // SAFETY: valid C strings; SQLite writes the handle to `db`.
            let rc = unsafe {
                ffi::sqlite3_open_v2(
                    name.as_ptr(),
                    &mut db,
                    ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_CREATE,
                    vfs.map_or(std::ptr::null(), CStr::as_ptr),
                )
            };
            assert_eq!(rc, ffi::SQLITE_OK, "open {path:?}");
            Db(db)
        }

        fn exec(&self, sql: &str) {
            let sql = std::ffi::CString::new(sql).expect("sql");
            // SAFETY: an open handle and a C string; no callback.
            let rc = unsafe {
                ffi::sqlite3_exec(
                    self.0,
                    sql.as_ptr(),
                    None,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
            assert_eq!(rc, ffi::SQLITE_OK, "{sql:?}");
        }

        /// The first column of the first row, as an integer or as text.
        fn query(&self, sql: &str) -> String {
            let sql = std::ffi::CString::new(sql).expect("sql");
            let mut stmt = std::ptr::null_mut();
            // SAFETY: an open handle; the statement is finalized below and
            // the text is copied before that.
            unsafe {
                let rc = ffi::sqlite3_prepare_v2(
                    self.0,
                    sql.as_ptr(),
                    -1,
                    &mut stmt,
                    std::ptr::null_mut(),
                );
                assert_eq!(rc, ffi::SQLITE_OK, "prepare {sql:?}");
                assert_eq!(ffi::sqlite3_step(stmt), ffi::SQLITE_ROW, "{sql:?}");
                let text = ffi::sqlite3_column_text(stmt, 0);
                let out = CStr::from_ptr(text.cast()).to_string_lossy().into_owned();
                ffi::sqlite3_finalize(stmt);
                out
            }
        }
    }

    impl Drop for Db {
        fn drop(&mut self) {
            // SAFETY: opened above, closed once.
            unsafe { ffi::sqlite3_close(self.0) };
        }
    }

    /// Every commit is visible, whole, to a connection of the default VFS
    /// right after it returns, through small commits, a commit larger than
    /// the buffer (written out in several chunks) and WAL restarts after
    /// checkpoints; and a commit's frames reach the file in one write.
    #[test]
    fn commits_are_whole_for_other_connections_and_written_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("g.db");
        register().expect("register");
        let w = Db::open(&path, Some(NAME));
        w.exec(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;
             PRAGMA cache_size = -2000; PRAGMA cache_spill = OFF;
             PRAGMA wal_autocheckpoint = 64;
             CREATE TABLE t (k BLOB PRIMARY KEY, v BLOB NOT NULL)",
        );
        let r = Db::open(&path, None);
        let mut rows = 0usize;
        for round in 0..300 {
            let n = if round == 150 { 3000 } else { 1 + round % 40 };
            let (in_before, out_before) = thread_write_counts();
            w.exec(&format!(
                "BEGIN; WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {n})
                 INSERT INTO t SELECT randomblob(8), randomblob(700) FROM c; COMMIT"
            ));
            let (in_after, out_after) = thread_write_counts();
            rows += n;
            let seen = r.query("SELECT COUNT(*) FROM t");
            assert_eq!(
                seen,
                rows.to_string(),
                "round {round}: a commit not whole for a reader"
            );
            if n >= 20 && round != 150 {
                let (made, got) = (in_after - in_before, out_after - out_before);
                assert!(made >= 6, "round {round}: {made} writes for {n} rows");
                // One write per commit, one more where a checkpoint made
                // the commit restart the WAL or rewrite a frame.
                assert!(got <= 3, "round {round}: {got} writes reached the file");
            }
        }
        drop(w);
        assert_eq!(r.query("PRAGMA integrity_check"), "ok");
    }
}
