//! Fail-stop on storage faults (SQLite): after the first failed fsync of the
//! WAL no submit is acknowledged again, even once the disk works again, and
//! `Issuance::healthy` stays false until the store is reopened. Faults are
//! injected through `warrant_store::faults`, keyed by each test's own
//! temporary directory.

mod common;

use std::path::{Path, PathBuf};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_every_submit_after_a_failed_wal_fsync() {
    let db = TestDb::sqlite();
    let dir = dir_of(&db);
    let store = db.open().await;
    assert_eq!(store.issuance().submit(issuance()).await, Ok(()));
    assert!(store.issuance().healthy());

    faults::inject(&dir, faults::Op::WalFsync);
    // Requests waiting on the failed sync all fail.
    let waiting: Vec<_> = (0..16)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.issuance().submit(issuance()).await })
        })
        .collect();
    for w in waiting {
        let r = w.await.expect("task");
        assert!(
            stopped_or_failed(&r),
            "acknowledged during the fault: {r:?}"
        );
    }
    assert!(!store.issuance().healthy());

    // The disk works again: still nothing is acknowledged, and no later
    // success sets the write path healthy again.
    faults::clear(&dir);
    for _ in 0..5 {
        let r = store.issuance().submit(issuance()).await;
        assert!(
            matches!(&r, Err(WriteError::Unavailable(m)) if m.contains("restart")),
            "acknowledged after a failed fsync: {r:?}"
        );
    }
    assert!(!store.issuance().healthy());
    store.shutdown().await;

    // A restart replays the WAL from the disk and writes again.
    let store = db.open().await;
    assert!(store.issuance().healthy());
    assert_eq!(store.issuance().submit(issuance()).await, Ok(()));
    store.shutdown().await;
}

/// SQLite checkpoints on its own, inside the write connection: with one
/// every few WAL pages the WAL file is reused instead of growing, and every
/// acknowledged row is still there after the store is reopened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_rows_survive_sqlites_own_checkpoints() {
    let db = TestDb::sqlite();
    let opts = StoreOptions {
        wal_checkpoint_pages: 4,
        ..StoreOptions::default()
    };
    let store = db.open_with(opts.clone()).await;
    let mut serials = Vec::new();
    for _ in 0..200 {
        let rec = issuance();
        serials.push(rec.cert.serial.clone());
        assert_eq!(store.issuance().submit(rec).await, Ok(()));
    }
    let wal = format!("{}-wal", db.dsn);
    let wal_len = std::fs::metadata(&wal).expect("WAL file").len();
    // 200 commits of at least two 4 KiB pages each, were the WAL never reused.
    assert!(
        wal_len < 1 << 20,
        "WAL grew to {wal_len} bytes: no checkpoint ran"
    );
    store.shutdown().await;
    drop(store);
    let store = db.open_with(opts).await;
    for serial in &serials {
        assert!(
            store
                .certs()
                .get_cert("people", serial)
                .await
                .expect("read")
                .is_some(),
            "acknowledged row {serial} lost"
        );
    }
    store.shutdown().await;
}
