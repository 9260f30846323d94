//! Fail-stop on storage faults (SQLite): after the first failed fsync of the
//! WAL or of the database file no submit is acknowledged again, even once
//! the disk works again, and `write_path_healthy` stays false until the
//! store is reopened. A failed write fails its request without stopping the
//! write path. Faults are injected through `warrant_store::faults`, keyed by
//! each test's own temporary directory.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use warrant_store::*;

fn stopped_or_failed(r: &Result<(), WriteError>) -> bool {
    matches!(r, Err(WriteError::Unavailable(_)))
}

/// The directory of a SQLite DSN from `TestDb::sqlite`.
fn dir_of(db: &TestDb) -> PathBuf {
    Path::new(&db.dsn).parent().expect("data dir").to_path_buf()
}

fn issuance() -> IssuanceRecord {
    agent_issuance("people", "corp:alice", unique_bytes32())
}

/// Submits until one is refused (the fault reached the write path), at most
/// until `deadline`; returns the refusal.
async fn submit_until_refused(store: &dyn Store, deadline: Duration) -> WriteError {
    let until = Instant::now() + deadline;
    loop {
        match store.submit(issuance()).await {
            Ok(()) => assert!(Instant::now() < until, "never refused"),
            Err(e) => return e,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_every_submit_after_a_failed_wal_fsync() {
    let db = TestDb::sqlite();
    let dir = dir_of(&db);
    let store = db.open().await;
    assert_eq!(store.submit(issuance()).await, Ok(()));
    assert!(store.write_path_healthy());

    faults::inject(&dir, faults::Op::WalFsync);
    // Requests waiting on the failed sync all fail.
    let waiting: Vec<_> = (0..16)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.submit(issuance()).await })
        })
        .collect();
    for w in waiting {
        let r = w.await.expect("task");
        assert!(
            stopped_or_failed(&r),
            "acknowledged during the fault: {r:?}"
        );
    }
    assert!(!store.write_path_healthy());

    // The disk works again: still nothing is acknowledged, and no later
    // success sets the write path healthy again.
    faults::clear(&dir);
    for _ in 0..5 {
        let r = store.submit(issuance()).await;
        assert!(
            matches!(&r, Err(WriteError::Unavailable(m)) if m.contains("restart")),
            "acknowledged after a failed fsync: {r:?}"
        );
    }
    assert!(!store.write_path_healthy());
    store.shutdown().await;

    // A restart replays the WAL from the disk and writes again.
    let store = db.open().await;
    assert!(store.write_path_healthy());
    assert_eq!(store.submit(issuance()).await, Ok(()));
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_every_submit_after_a_failed_checkpoint_fsync() {
    let db = TestDb::sqlite();
    let dir = dir_of(&db);
    // A checkpoint every few pages: the first submits wake the thread.
    let store = db
        .open_with(StoreOptions {
            wal_checkpoint_pages: 4,
            ..StoreOptions::default()
        })
        .await;
    assert_eq!(store.submit(issuance()).await, Ok(()));
    // Only the database file's fsync fails: the WAL's still succeed, so
    // nothing but the checkpoint can stop the write path.
    faults::inject(&dir, faults::Op::DbFsync);
    let refused = submit_until_refused(&*store, Duration::from_secs(60)).await;
    assert!(
        matches!(&refused, WriteError::Unavailable(m) if m.contains("restart")),
        "{refused:?}"
    );
    assert!(!store.write_path_healthy());
    faults::clear(&dir);
    for _ in 0..5 {
        let r = store.submit(issuance()).await;
        assert!(
            stopped_or_failed(&r),
            "acknowledged after a failed checkpoint: {r:?}"
        );
    }
    assert!(!store.write_path_healthy());
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_wal_write_fails_its_request_and_is_not_stored() {
    let db = TestDb::sqlite();
    let dir = dir_of(&db);
    let store = db.open().await;
    assert_eq!(store.submit(issuance()).await, Ok(()));

    faults::inject(&dir, faults::Op::WalWrite);
    let lost = issuance();
    let serial = lost.cert.serial.clone();
    let r = store.submit(lost).await;
    assert!(
        stopped_or_failed(&r),
        "an unwritten record was acknowledged: {r:?}"
    );
    faults::clear(&dir);

    // Nothing of it was committed, and the write path goes on: a write error
    // loses nothing that was acknowledged (the transaction rolled back).
    assert!(
        store
            .get_cert("people", &serial)
            .await
            .expect("read")
            .is_none()
    );
    assert_eq!(store.submit(issuance()).await, Ok(()));
    assert!(store.write_path_healthy());
    store.shutdown().await;
}
