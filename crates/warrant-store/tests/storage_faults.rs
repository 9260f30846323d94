//! Fail-stop on storage faults (SQLite): after the first failed fsync of the
//! WAL no submit is acknowledged again, even once the disk works again, and
//! `Issuance::healthy` stays false until the store is reopened. Faults are
//! injected through `warrant_store::faults`, keyed by each test's own
//! temporary directory.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

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

async fn has_cert(store: &Store, serial: &str) -> bool {
    store
        .certs()
        .get_cert("people", serial)
        .await
        .expect("read")
        .is_some()
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

type Submitted = Vec<(String, tokio::task::JoinHandle<Result<(), WriteError>>)>;

/// Submits `n` records one after another, `gap` apart, each on its own task.
async fn submit_spaced(store: &std::sync::Arc<Store>, n: usize, gap: Duration) -> Submitted {
    let mut out = Vec::new();
    for _ in 0..n {
        let rec = issuance();
        let serial = rec.cert_row().serial.clone();
        let store = store.clone();
        out.push((
            serial,
            tokio::spawn(async move { store.issuance().submit(rec).await }),
        ));
        tokio::time::sleep(gap).await;
    }
    out
}

/// After one record written normally, injects `faults` on top of a slow
/// WAL fsync (`SLOW_FSYNC` longer), submits one record, then five more 20
/// ms apart while its fsync is in flight. Returns the store, its commits
/// before the six, and the six submissions, first one first.
async fn five_arrive_during_a_slow_fsync(
    db: &TestDb,
    faults: &[faults::Op],
) -> (std::sync::Arc<Store>, u64, Submitted) {
    let dir = dir_of(db);
    let store = db.open().await;
    assert_eq!(store.issuance().submit(issuance()).await, Ok(()));
    faults::inject(&dir, faults::Op::SlowWalFsync);
    for op in faults {
        faults::inject(&dir, *op);
    }
    let before = store.issuance().stats().commits;
    let mut submitted = submit_spaced(&store, 1, Duration::from_millis(50)).await;
    submitted.extend(submit_spaced(&store, 5, Duration::from_millis(20)).await);
    (store, before, submitted)
}

/// A batch below GATHER_BELOW waits for the WAL fsync in flight, taking the
/// records that arrive meanwhile: records submitted one by one while a slow
/// fsync runs share one commit (each committed alone, they would make five).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_arriving_during_a_wal_fsync_share_the_next_commit() {
    let db = TestDb::sqlite();
    let (store, before, submitted) = five_arrive_during_a_slow_fsync(&db, &[]).await;
    for (serial, task) in submitted {
        assert_eq!(task.await.expect("task"), Ok(()));
        assert!(
            has_cert(&store, &serial).await,
            "{serial} acknowledged, not stored"
        );
    }
    assert_eq!(
        store.issuance().stats().commits - before,
        2,
        "the first record's commit, then one for the five that waited"
    );
    faults::clear(&dir_of(&db));
    store.shutdown().await;
}

/// When the fsync that records wait for fails, they are failed too, not
/// committed after it: nothing is written after a storage fault, and none
/// of them is in the database after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_records_waiting_for_a_wal_fsync_that_fails() {
    let db = TestDb::sqlite();
    let (store, before, submitted) =
        five_arrive_during_a_slow_fsync(&db, &[faults::Op::WalFsync]).await;
    let mut serials = Vec::new();
    for (serial, task) in submitted {
        let r = task.await.expect("task");
        assert!(
            stopped_or_failed(&r),
            "acknowledged during the fault: {r:?}"
        );
        serials.push(serial);
    }
    let commits = store.issuance().stats().commits - before;
    faults::clear(&dir_of(&db));
    store.shutdown().await;
    // Only the first record's commit ran; its fsync failed.
    assert_eq!(commits, 1, "records were committed after the failed fsync");
    let store = db.open().await;
    for serial in &serials[1..] {
        assert!(
            !has_cert(&store, serial).await,
            "{serial} written after the fault"
        );
    }
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
        serials.push(rec.cert_row().serial.clone());
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
            has_cert(&store, serial).await,
            "acknowledged row {serial} lost"
        );
    }
    store.shutdown().await;
}

/// The files of a SQLite store as a crash right now would leave them: the
/// database and its WAL copied into a fresh directory (the shared-memory
/// index is not copied; SQLite rebuilds it from the WAL, as after a reboot).
fn crash_image(db: &TestDb) -> TestDb {
    let image = TestDb::sqlite();
    std::fs::copy(&db.dsn, &image.dsn).expect("copy the database file");
    std::fs::copy(format!("{}-wal", db.dsn), format!("{}-wal", image.dsn)).expect("copy the WAL");
    image
}

fn wal_len(db: &TestDb) -> u64 {
    std::fs::metadata(format!("{}-wal", db.dsn))
        .expect("WAL file")
        .len()
}

/// Every acknowledged record's certificate is in `store` and its nonce
/// consumed.
async fn assert_has_all(store: &Store, acknowledged: &[IssuanceRecord]) {
    for rec in acknowledged {
        let serial = &rec.cert_row().serial;
        assert!(
            has_cert(store, serial).await,
            "acknowledged row {serial} lost"
        );
        let nonce = rec.nonce.as_ref().expect("agent issuance").nonce;
        assert!(store.issuance().nonce_consumed(&nonce).await.expect("read"));
    }
}

/// SQLite finds the (closed) database of `db` intact.
async fn assert_integrity_ok(db: &TestDb) {
    let pool = sqlx::SqlitePool::connect(&format!("sqlite:{}", db.dsn))
        .await
        .expect("open for the integrity check");
    let check: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&pool)
        .await
        .expect("integrity check");
    assert_eq!(check, "ok");
    pool.close().await;
}

/// Opens `image` and checks that every acknowledged record is there with
/// its nonce consumed, that `lost` is not, and that SQLite finds the
/// database intact.
async fn assert_recovered(image: &TestDb, acknowledged: &[IssuanceRecord], lost: &IssuanceRecord) {
    let store = image.open().await;
    assert_has_all(&store, acknowledged).await;
    assert!(
        !has_cert(&store, &lost.cert_row().serial).await,
        "a failed commit's row is in the database"
    );
    let lost_nonce = lost.nonce.as_ref().expect("agent issuance").nonce;
    assert!(
        !store
            .issuance()
            .nonce_consumed(&lost_nonce)
            .await
            .expect("read")
    );
    // A new commit lands over the frames the failed one left.
    assert_eq!(store.issuance().submit(issuance()).await, Ok(()));
    store.shutdown().await;
    drop(store);
    assert_integrity_ok(image).await;
}

/// Runs `fault` on one commit of a live store after a few acknowledged
/// ones: that commit's submit fails, the write path stays healthy (a failed
/// write is not a failed fsync) and the next submit is acknowledged. Then
/// both the live store, reopened, and a crash image taken right after the
/// failure hold every acknowledged row and not the failed one. Returns how
/// many WAL bytes the failed commit left in the file.
async fn failed_commit_loses_nothing(fault: faults::Op) -> u64 {
    let db = TestDb::sqlite();
    let dir = dir_of(&db);
    let store = db.open().await;
    let mut acknowledged = Vec::new();
    for _ in 0..20 {
        let rec = issuance();
        assert_eq!(store.issuance().submit(rec.clone()).await, Ok(()));
        acknowledged.push(rec);
    }
    let before = wal_len(&db);
    faults::inject(&dir, fault);
    let lost = issuance();
    let r = store.issuance().submit(lost.clone()).await;
    assert!(
        matches!(r, Err(WriteError::Unavailable(_))),
        "{fault:?}: a commit whose WAL write failed was acknowledged: {r:?}"
    );
    let image = crash_image(&db);
    let left = wal_len(&db) - before;
    faults::clear(&dir);
    assert!(
        store.issuance().healthy(),
        "{fault:?} stopped the write path"
    );
    let after = issuance();
    assert_eq!(store.issuance().submit(after.clone()).await, Ok(()));
    store.shutdown().await;
    drop(store);

    assert_recovered(&image, &acknowledged, &lost).await;
    acknowledged.push(after);
    assert_recovered(&db, &acknowledged, &lost).await;
    left
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_a_commit_whose_wal_write_fails_and_loses_nothing() {
    let left = failed_commit_loses_nothing(faults::Op::WalWrite).await;
    assert_eq!(left, 0, "a failed write reached the file");
}

/// The commit frame is torn: its header and part of its page reach the
/// file. Recovery must not take it for a commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_a_commit_whose_wal_write_stops_short_and_loses_nothing() {
    let left = failed_commit_loses_nothing(faults::Op::ShortWalWrite).await;
    assert!(
        left > 24,
        "the torn commit frame did not reach the file ({left} bytes)"
    );
    assert_ne!(
        left % (24 + 4096),
        0,
        "the write stopped at a frame boundary"
    );
}

/// Every frame of the commit but the commit frame reaches the file, as a
/// crash between two frames would leave it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_a_commit_cut_between_wal_frames_and_loses_nothing() {
    let left = failed_commit_loses_nothing(faults::Op::CrashBeforeWalCommitFrame).await;
    assert!(
        left >= 24 + 4096,
        "no frame of the cut commit reached the file"
    );
    assert_eq!(left % (24 + 4096), 0, "the cut fell inside a frame");
}

/// A nonce-only record (a DA redeemed for a token) whose commit's WAL write
/// fails is not acknowledged and gives its nonce back: the ledger no longer
/// holds it, a crash image taken then does not have it, and once the disk
/// works the same DA is redeemed, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_a_nonce_only_record_whose_commit_fails_and_releases_its_nonce() {
    let db = TestDb::sqlite();
    let dir = dir_of(&db);
    let store = db.open().await;
    assert_eq!(store.issuance().submit(issuance()).await, Ok(()));
    let nonce = unique_bytes32();
    let record = nonce_only_issuance("corp:alice", nonce);
    let expires_at = record.nonce.as_ref().expect("a nonce").expires_at;

    faults::inject(&dir, faults::Op::WalWrite);
    // As the server does: reserve before the work, hand over to `submit`.
    store
        .issuance()
        .reserve_nonce(&nonce, expires_at, now_unix())
        .expect("a fresh nonce")
        .hand_over();
    let r = store.issuance().submit(record.clone()).await;
    assert!(
        matches!(r, Err(WriteError::Unavailable(_))),
        "a nonce-only commit whose WAL write failed was acknowledged: {r:?}"
    );
    let image = crash_image(&db);
    faults::clear(&dir);
    assert!(
        !store.issuance().nonce_held(&nonce, now_unix()),
        "the failed record's nonce is still held"
    );
    assert!(store.issuance().healthy());

    store
        .issuance()
        .reserve_nonce(&nonce, expires_at, now_unix())
        .expect("the released nonce")
        .hand_over();
    assert_eq!(store.issuance().submit(record.clone()).await, Ok(()));
    assert!(store.issuance().nonce_consumed(&nonce).await.expect("read"));
    store.shutdown().await;
    drop(store);

    let crashed = image.open().await;
    assert!(
        !crashed
            .issuance()
            .nonce_consumed(&nonce)
            .await
            .expect("read"),
        "the failed commit's nonce is in the database"
    );
    crashed.shutdown().await;
    drop(crashed);
    let store = db.open().await;
    assert_eq!(
        store.issuance().submit(record).await,
        Err(WriteError::NonceReplayed)
    );
    store.shutdown().await;
}

/// Runs `fault` on a pass of the nonce pruner over more expired rows than
/// one of its statements deletes: the pass fails, and neither the live
/// store nor a crash image taken then loses a live nonce or its integrity;
/// once the disk works the next pass deletes every expired row.
async fn failed_nonce_prune_keeps_every_live_nonce(fault: faults::Op) {
    let db = TestDb::sqlite();
    let dir = dir_of(&db);
    let store = std::sync::Arc::new(db.open().await);
    let now = now_unix();
    let mut tasks = Vec::new();
    let (mut live, mut expired) = (Vec::new(), Vec::new());
    for i in 0..3000 {
        let mut rec = issuance();
        if i % 100 == 0 {
            live.push(rec.clone());
        } else {
            // Its whole expiry minute has ended: the pruner deletes it.
            rec.nonce.as_mut().expect("a nonce").expires_at = now - 120;
            expired.push(rec.nonce.as_ref().expect("a nonce").nonce);
        }
        let store = store.clone();
        tasks.push(tokio::spawn(
            async move { store.issuance().submit(rec).await },
        ));
    }
    for t in tasks {
        assert_eq!(t.await.expect("submit task"), Ok(()));
    }

    faults::inject(&dir, fault);
    let r = store.issuance().prune_expired_nonces(now).await;
    assert!(
        r.is_err(),
        "{fault:?}: a pass whose WAL write failed: {r:?}"
    );
    let image = crash_image(&db);
    faults::clear(&dir);
    assert_has_all(&store, &live).await;

    let pruned = store
        .issuance()
        .prune_expired_nonces(now)
        .await
        .expect("prune");
    assert_eq!(pruned, expired.len() as u64, "{fault:?}");
    for nonce in expired.iter().step_by(97) {
        assert!(!store.issuance().nonce_consumed(nonce).await.expect("read"));
    }
    assert_has_all(&store, &live).await;
    store.shutdown().await;
    drop(store);
    assert_integrity_ok(&db).await;

    let crashed = image.open().await;
    assert_has_all(&crashed, &live).await;
    crashed.shutdown().await;
    drop(crashed);
    assert_integrity_ok(&image).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_a_nonce_prune_whose_wal_write_fails_and_keeps_every_live_nonce() {
    failed_nonce_prune_keeps_every_live_nonce(faults::Op::WalWrite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_a_nonce_prune_whose_wal_write_stops_short_and_keeps_every_live_nonce() {
    failed_nonce_prune_keeps_every_live_nonce(faults::Op::ShortWalWrite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_a_nonce_prune_cut_between_wal_frames_and_keeps_every_live_nonce() {
    failed_nonce_prune_keeps_every_live_nonce(faults::Op::CrashBeforeWalCommitFrame).await;
}

/// A store that checkpoints every few WAL frames.
fn checkpointing_often() -> StoreOptions {
    StoreOptions {
        wal_checkpoint_pages: 8,
        ..StoreOptions::default()
    }
}

/// Opens `image`, checks that every acknowledged record is there with its
/// nonce consumed and that SQLite finds the database intact.
async fn assert_all_there(image: &TestDb, acknowledged: &[IssuanceRecord]) {
    let store = image.open().await;
    assert_has_all(&store, acknowledged).await;
    store.shutdown().await;
    drop(store);
    assert_integrity_ok(image).await;
}

/// Runs `fault` on the database file while commits go on and SQLite's
/// checkpoints keep failing: every commit is still acknowledged (a
/// checkpoint only moves frames that are already durable in the WAL, and
/// its failure does not fail the commit it follows), the write path stays
/// healthy, and a crash image taken during the fault, the live store once
/// the disk works, and the store reopened all hold every acknowledged row.
async fn failed_checkpoints_lose_nothing(fault: faults::Op) {
    let db = TestDb::sqlite();
    let dir = dir_of(&db);
    let store = db.open_with(checkpointing_often()).await;
    let mut acknowledged = Vec::new();
    for _ in 0..20 {
        let rec = issuance();
        assert_eq!(store.issuance().submit(rec.clone()).await, Ok(()));
        acknowledged.push(rec);
    }
    faults::inject(&dir, fault);
    let before = wal_len(&db);
    for _ in 0..60 {
        let rec = issuance();
        assert_eq!(
            store.issuance().submit(rec.clone()).await,
            Ok(()),
            "{fault:?}: a commit failed"
        );
        acknowledged.push(rec);
    }
    assert!(
        store.issuance().healthy(),
        "{fault:?} stopped the write path"
    );
    // No checkpoint got through, so the WAL could not start over.
    assert!(
        wal_len(&db) > before,
        "{fault:?}: the WAL was reused, so no checkpoint failed"
    );
    let image = crash_image(&db);
    faults::clear(&dir);
    for _ in 0..20 {
        let rec = issuance();
        assert_eq!(store.issuance().submit(rec.clone()).await, Ok(()));
        acknowledged.push(rec);
    }
    assert_has_all(&store, &acknowledged).await;
    store.shutdown().await;
    drop(store);
    assert_all_there(&image, &acknowledged[..80]).await;
    assert_all_there(&db, &acknowledged).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_whose_database_write_fails_loses_nothing() {
    failed_checkpoints_lose_nothing(faults::Op::DbWrite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_whose_database_write_stops_short_loses_nothing() {
    failed_checkpoints_lose_nothing(faults::Op::ShortDbWrite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_cut_between_pages_loses_nothing() {
    failed_checkpoints_lose_nothing(faults::Op::CrashInsideCheckpoint).await;
}

/// A failed fsync of the database file in a checkpoint leaves the
/// checkpoint unfinished: the frames stay in the WAL (already fsynced by the
/// store), the next checkpoint copies every one of them again, and only a
/// checkpoint whose fsync succeeds lets the WAL start over. So commits go
/// on, and nothing acknowledged is lost, live, in a crash image, or after
/// the disk works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_whose_database_fsync_fails_loses_nothing() {
    failed_checkpoints_lose_nothing(faults::Op::DbFsync).await;
}
