//! The group-commit write path.
//!
//! `submit` takes a permit from a semaphore of `max_pending` permits (none
//! left: `Overloaded` at once, never a wait), queues the record and, in
//! durable mode, waits for its batch's commit. Committer tasks take whatever
//! is queued (up to `threshold`), write it in one transaction and answer each
//! waiter. The permit is only returned when the record's fate is known, so
//! `max_pending` bounds queued *and* in-flight records, hence memory.
//!
//! While one commit runs the next batch accumulates, so batches grow with
//! load. A committer that took only a few records also yields to the tasks
//! that are ready to run, for as long as that brings records and at most
//! `max_gather` ([`keep_gathering`]): on a server whose cores are busy
//! checking and signing requests, those are records about to be submitted,
//! and every commit has a fixed cost (transaction, WAL frames, fsync,
//! hand-offs) that a batch of a few records pays per record. No timer waits:
//! on an idle runtime the pass ends at once, so a lone request pays one
//! commit.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::error::{StoreError, WriteError};
use crate::nonce::NonceLedger;
use crate::options::{Durability, StoreOptions};
use crate::sql::{ReplayPolicy, SqlCore};
use crate::types::IssuanceRecord;

/// Counters of the committers, also exported as metrics; kept here so tests
/// and the benchmark can read them without a metrics recorder.
#[derive(Default)]
struct WriteStats {
    commits: std::sync::atomic::AtomicU64,
    rows: std::sync::atomic::AtomicU64,
    /// Time spent in successful batch commits (SQLite: before the fsync).
    commit_nanos: std::sync::atomic::AtomicU64,
}

/// Totals since the store was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteStatsSnapshot {
    /// Transactions committed by the write path.
    pub commits: u64,
    /// Certificate rows those transactions wrote.
    pub rows: u64,
    /// Records queued or being committed now.
    pub pending: usize,
    /// Total time the `commits` took (the transaction; SQLite's WAL fsync
    /// runs beside the next commit and is not counted). Divided by
    /// `commits`, it tells whether a single committer is the bottleneck.
    pub commit_time: Duration,
}

/// A batch this large when the committer takes it shows records piling up
/// while the previous commit ran: the committer is the bottleneck, so
/// gathering would leave it idle, and the commit's fixed cost (transaction,
/// WAL frames, fsync, hand-offs: 150–200 µs of CPU on the 2-core dev box)
/// is already spread thin.
pub(crate) const GATHER_BELOW: usize = 16;

/// SQLite, durable: a batch of at least this many records is committed as
/// two transactions, so that the WAL fsync of the first half runs while the
/// writer inserts the second. One transaction for everyone leaves the
/// writer idle during the fsync, since every waiting issuer is in that batch
/// and nothing new can arrive before it is answered.
pub(crate) const SPLIT_FROM: usize = 32;

/// Where a batch is split into two commits ([`SPLIT_FROM`]): the length of
/// the first part, or `None` to commit it whole (buffered mode answers
/// before the commit and gains nothing; PostgreSQL and MariaDB commits
/// include their own flush, so a split would only serialize two flushes on
/// one connection).
pub(crate) fn split_at(len: usize, durability: Durability, fsync_beside: bool) -> Option<usize> {
    (durability == Durability::Durable && fsync_beside && len >= SPLIT_FROM).then_some(len / 2)
}

/// Whether a committer lets the tasks that are ready to run (requests being
/// checked and signed, clients woken by earlier commits) reach the queue
/// once more before it commits. Only when the batch it took was small
/// (`taken` < [`GATHER_BELOW`]), the batch has room, the previous pass
/// brought records (or none has run yet), and `budget` is not spent. A lone
/// request costs one pass that finds nothing; an idle runtime runs that
/// pass at once.
pub(crate) fn keep_gathering(
    taken: usize,
    batch_len: usize,
    threshold: usize,
    last_pass_gained: bool,
    elapsed: Duration,
    budget: Duration,
) -> bool {
    taken < GATHER_BELOW && batch_len < threshold && last_pass_gained && elapsed < budget
}

struct Job {
    record: IssuanceRecord,
    reply: Option<oneshot::Sender<Result<(), WriteError>>>,
    _permit: OwnedSemaphorePermit,
}

pub(crate) struct WritePipeline {
    tx: std::sync::Mutex<Option<mpsc::UnboundedSender<Job>>>,
    permits: Arc<Semaphore>,
    max_pending: usize,
    durability: Durability,
    closed: Arc<AtomicBool>,
    stats: Arc<WriteStats>,
    committers: std::sync::Mutex<Vec<JoinHandle<()>>>,
    ledger: Arc<NonceLedger>,
    healthy: Arc<AtomicBool>,
}

/// `Retry-After` suggested when the queue is full: about the time a full
/// queue needs to drain at a modest commit rate; whole seconds for HTTP.
fn retry_after(max_pending: usize) -> Duration {
    Duration::from_secs((max_pending as u64 / 20_000).clamp(1, 5))
}

impl WritePipeline {
    pub(crate) fn start(core: Arc<SqlCore>, opts: &StoreOptions, ledger: Arc<NonceLedger>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(Mutex::new(rx));
        let max_pending = opts.max_pending.max(1);
        let permits = Arc::new(Semaphore::new(max_pending));
        let healthy = Arc::new(AtomicBool::new(true));
        let closed = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(WriteStats::default());
        // SQLite has one writer; the server databases overlap commits of
        // consecutive batches (one fills while others are in flight).
        let n = match core.kind {
            crate::types::BackendKind::Sqlite => 1,
            _ => opts.committers.max(1),
        };
        let (sync_tx, syncer) = if core.needs_wal_sync() {
            let (t, r) = mpsc::unbounded_channel();
            let me = t.downgrade();
            (
                Some(t),
                Some(tokio::spawn(run_syncer(
                    core.clone(),
                    r,
                    me,
                    healthy.clone(),
                ))),
            )
        } else {
            (None, None)
        };
        let mut committers: Vec<JoinHandle<()>> = (0..n)
            .map(|_| {
                let c = Committer {
                    core: core.clone(),
                    rx: rx.clone(),
                    threshold: opts.threshold.max(1),
                    durability: opts.durability,
                    retry_pause: opts.max_latency.max(Duration::from_millis(10)),
                    healthy: healthy.clone(),
                    closed: closed.clone(),
                    stats: stats.clone(),
                    syncer: sync_tx.clone(),
                    permits: permits.clone(),
                    max_pending,
                    max_gather: opts.max_gather,
                };
                tokio::spawn(c.run())
            })
            .collect();
        drop(sync_tx);
        // Last, so that shutdown awaits it after the committers closed its queue.
        committers.extend(syncer);
        WritePipeline {
            tx: std::sync::Mutex::new(Some(tx)),
            permits,
            max_pending,
            durability: opts.durability,
            closed,
            stats,
            committers: std::sync::Mutex::new(committers),
            ledger,
            healthy,
        }
    }

    pub(crate) fn pending(&self) -> usize {
        self.max_pending - self.permits.available_permits()
    }

    pub(crate) fn stats(&self) -> WriteStatsSnapshot {
        WriteStatsSnapshot {
            commits: self.stats.commits.load(Ordering::Relaxed),
            rows: self.stats.rows.load(Ordering::Relaxed),
            pending: self.pending(),
            commit_time: Duration::from_nanos(self.stats.commit_nanos.load(Ordering::Relaxed)),
        }
    }

    pub(crate) fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed) && !self.closed.load(Ordering::Relaxed)
    }

    pub(crate) async fn submit(&self, record: IssuanceRecord) -> Result<(), WriteError> {
        let nonce = record.nonce.as_ref().map(|n| n.nonce);
        let result = self.enqueue_and_wait(record).await;
        if let (
            Err(
                WriteError::Overloaded { .. }
                | WriteError::Unavailable(_)
                | WriteError::ShuttingDown,
            ),
            Some(n),
        ) = (&result, nonce)
        {
            // The issuance did not happen: let the client retry its DA.
            self.ledger.release(&n);
        }
        if let Err(e) = &result {
            metrics::counter!(crate::metric_names::WRITE_REJECTED, "reason" => reason(e))
                .increment(1);
        }
        result
    }

    async fn enqueue_and_wait(&self, record: IssuanceRecord) -> Result<(), WriteError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(WriteError::ShuttingDown);
        }
        let permit =
            self.permits
                .clone()
                .try_acquire_owned()
                .map_err(|_| WriteError::Overloaded {
                    retry_after: retry_after(self.max_pending),
                })?;
        let (reply, rx) = match self.durability {
            Durability::Durable => {
                let (t, r) = oneshot::channel();
                (Some(t), Some(r))
            }
            Durability::Buffered => (None, None),
        };
        {
            let guard = self.tx.lock().unwrap_or_else(|p| p.into_inner());
            let Some(tx) = guard.as_ref() else {
                return Err(WriteError::ShuttingDown);
            };
            tx.send(Job {
                record,
                reply,
                _permit: permit,
            })
            .map_err(|_| WriteError::ShuttingDown)?;
        }
        metrics::gauge!(crate::metric_names::WRITE_QUEUE_DEPTH).set(self.pending() as f64);
        match rx {
            None => Ok(()),
            Some(rx) => rx
                .await
                .unwrap_or_else(|_| Err(WriteError::Unavailable("write pipeline stopped".into()))),
        }
    }

    /// Stops accepting records, then waits until every queued record was
    /// committed (or failed) and the committers exited.
    pub(crate) async fn shutdown(&self) {
        self.closed.store(true, Ordering::Release);
        drop(self.tx.lock().unwrap_or_else(|p| p.into_inner()).take());
        let handles: Vec<_> =
            std::mem::take(&mut *self.committers.lock().unwrap_or_else(|p| p.into_inner()));
        for h in handles {
            let _ = h.await;
        }
    }
}

fn reason(e: &WriteError) -> &'static str {
    match e {
        WriteError::Overloaded { .. } => "overloaded",
        WriteError::NonceReplayed => "nonce_replayed",
        WriteError::Unavailable(_) => "unavailable",
        WriteError::ShuttingDown => "shutting_down",
    }
}

struct Committer {
    core: Arc<SqlCore>,
    rx: Arc<Mutex<mpsc::UnboundedReceiver<Job>>>,
    threshold: usize,
    durability: Durability,
    retry_pause: Duration,
    healthy: Arc<AtomicBool>,
    closed: Arc<AtomicBool>,
    permits: Arc<Semaphore>,
    max_pending: usize,
    stats: Arc<WriteStats>,
    /// SQLite: committed batches wait here for the WAL fsync.
    syncer: Option<mpsc::UnboundedSender<SyncMsg>>,
    max_gather: Duration,
}

/// A committed (SQLite: not yet synced) batch and its per-record outcome.
struct Committed {
    jobs: Vec<Job>,
    accepted: Vec<bool>,
}

/// What the SQLite syncer hears: a batch committed by the committer, or the
/// end of one of its own fsyncs.
enum SyncMsg {
    Committed(Committed),
    /// An fsync finished; it covers every batch numbered below `covers`
    /// (all of them were committed before it started).
    Synced {
        covers: u64,
        result: Result<(), StoreError>,
    },
}

/// Most WAL fsyncs in flight at once. A commit that lands while an fsync
/// runs starts its own at once instead of waiting for the running one to end
/// (one and a half fsync latencies on average) and then for its own.
const MAX_FSYNCS_IN_FLIGHT: usize = 4;

/// Which waiting batches a finished fsync makes durable: the leading ones
/// numbered below `covers` (batches are queued in commit order).
fn covered_prefix(waiting: &std::collections::VecDeque<(u64, Committed)>, covers: u64) -> usize {
    waiting.iter().take_while(|(seq, _)| *seq < covers).count()
}

/// SQLite: makes committed batches durable by fsyncing the WAL, then answers
/// their waiters. Runs beside the committer, so the next batch is written
/// while earlier ones are synced; one fsync covers every batch committed
/// before it started, and up to [`MAX_FSYNCS_IN_FLIGHT`] run at once.
async fn run_syncer(
    core: Arc<SqlCore>,
    mut rx: mpsc::UnboundedReceiver<SyncMsg>,
    me: mpsc::WeakUnboundedSender<SyncMsg>,
    healthy: Arc<AtomicBool>,
) {
    let mut waiting: std::collections::VecDeque<(u64, Committed)> = Default::default();
    let mut next_seq = 0u64; // number of the next committed batch
    let mut started_cover = 0u64; // batches below this have an fsync started
    let mut in_flight = 0usize;
    let mut msgs = Vec::new();
    loop {
        // Ends (0) only once the committers are gone and no fsync is running,
        // since each running fsync holds a sender.
        let open = rx.recv_many(&mut msgs, 4096).await > 0;
        for m in msgs.drain(..) {
            match m {
                SyncMsg::Committed(c) => {
                    waiting.push_back((next_seq, c));
                    next_seq += 1;
                }
                SyncMsg::Synced { covers, result } => {
                    in_flight -= 1;
                    if let Err(e) = &result {
                        healthy.store(false, Ordering::Relaxed);
                        tracing::error!(error = %e, "WAL fsync failed; failing the affected requests");
                    }
                    for (_, g) in waiting.drain(..covered_prefix(&waiting, covers)) {
                        answer(g.jobs, g.accepted, result.as_ref().err());
                    }
                }
            }
        }
        if started_cover == next_seq {
            if open {
                continue;
            }
            return;
        }
        match me.upgrade() {
            Some(tx) if open && in_flight < MAX_FSYNCS_IN_FLIGHT => {
                in_flight += 1;
                let covers = next_seq;
                started_cover = covers;
                let core = core.clone();
                tokio::spawn(async move {
                    let result = core.sync_wal().await;
                    let _ = tx.send(SyncMsg::Synced { covers, result });
                });
            }
            Some(_) => {} // enough fsyncs running: one that ends starts the next
            None => {
                // Committers gone and no fsync running: sync the rest here.
                let result = core.sync_wal().await;
                for (_, g) in waiting.drain(..) {
                    answer(g.jobs, g.accepted, result.as_ref().err());
                }
                return;
            }
        }
    }
}

/// Sends each waiter its outcome (`accepted[i]`: its nonce landed), or
/// `Unavailable` for all if the commit could not be made durable.
fn answer(jobs: Vec<Job>, accepted: Vec<bool>, failure: Option<&StoreError>) {
    for (job, ok) in jobs.into_iter().zip(accepted) {
        let result = match (failure, ok) {
            (Some(e), _) => Err(WriteError::Unavailable(e.to_string())),
            (None, true) => Ok(()),
            (None, false) => Err(WriteError::NonceReplayed),
        };
        if let Some(r) = job.reply {
            let _ = r.send(result);
        }
    }
}

impl Committer {
    async fn run(self) {
        let mut batch: Vec<Job> = Vec::with_capacity(self.threshold);
        loop {
            {
                let mut rx = self.rx.lock().await;
                if rx.recv_many(&mut batch, self.threshold).await == 0 {
                    return; // sender dropped and queue drained: shut down
                }
                // Let the tasks that are ready to run reach the queue before
                // committing, while each pass brings records (`keep_gathering`).
                let taken = batch.len();
                let started = Instant::now();
                let mut gained = true;
                while keep_gathering(
                    taken,
                    batch.len(),
                    self.threshold,
                    gained,
                    started.elapsed(),
                    self.max_gather,
                ) {
                    tokio::task::yield_now().await;
                    let before = batch.len();
                    while batch.len() < self.threshold {
                        match rx.try_recv() {
                            Ok(job) => batch.push(job),
                            Err(_) => break,
                        }
                    }
                    gained = batch.len() > before;
                }
            }
            let second = split_at(batch.len(), self.durability, self.syncer.is_some())
                .map(|mid| batch.split_off(mid));
            match second {
                // Both halves queue at the writer at once; each is handed to
                // the syncer as soon as it is committed.
                Some(mut second) => {
                    tokio::join!(self.commit(&mut batch), self.commit(&mut second));
                }
                None => self.commit(&mut batch).await,
            }
            batch.clear();
            metrics::gauge!(crate::metric_names::WRITE_QUEUE_DEPTH)
                .set((self.max_pending - self.permits.available_permits()) as f64);
        }
    }

    async fn commit(&self, batch: &mut Vec<Job>) {
        match self.durability {
            Durability::Durable => {
                let outcome = self.write(batch, ReplayPolicy::DropCert).await;
                match outcome {
                    Ok(accepted) => {
                        // SQLite: not durable until the WAL fsync, which
                        // `finish` awaits (in the syncer) before answering.
                        self.finish(std::mem::take(batch), accepted).await;
                    }
                    Err(e) if batch.len() > 1 && !matches!(e, StoreError::Unavailable(_)) => {
                        // One bad row must not fail its neighbours: retry
                        // each record alone so only the culprit fails.
                        tracing::warn!(error = %e, size = batch.len(), "batch commit failed; retrying row by row");
                        let jobs: Vec<Job> = std::mem::take(batch);
                        let mut accepted = Vec::with_capacity(jobs.len());
                        let mut failed = Vec::new();
                        for job in jobs {
                            let one = [&job.record];
                            match self.core.commit_batch(&one, ReplayPolicy::DropCert).await {
                                Ok(v) => {
                                    if v.first() == Some(&true) {
                                        metrics::counter!(crate::metric_names::COMMITTED_ROWS)
                                            .increment(1);
                                        self.stats.commits.fetch_add(1, Ordering::Relaxed);
                                        self.stats.rows.fetch_add(1, Ordering::Relaxed);
                                    }
                                    accepted.push((job, v.first() == Some(&true)));
                                }
                                Err(e) => failed.push((job, e)),
                            }
                        }
                        for (job, e) in failed {
                            answer(vec![job], vec![false], Some(&e));
                        }
                        let (jobs, oks) = accepted.into_iter().unzip();
                        self.finish(jobs, oks).await;
                    }
                    Err(e) => {
                        let msg = e.to_string();
                        for job in batch.drain(..) {
                            if let Some(r) = job.reply {
                                let _ = r.send(Err(WriteError::Unavailable(msg.clone())));
                            }
                        }
                    }
                }
            }
            Durability::Buffered => {
                // Already acknowledged: keep retrying (holding the permits,
                // so the queue fills and callers get Overloaded) until the
                // database is back. At shutdown, give up after a few tries.
                let mut attempts = 0u32;
                loop {
                    match self.write(batch, ReplayPolicy::KeepCert).await {
                        Ok(accepted) => {
                            let replays = accepted.iter().filter(|ok| !**ok).count();
                            if replays > 0 {
                                tracing::warn!(
                                    replays,
                                    "buffered mode: certificates stored despite replayed nonces"
                                );
                            }
                            // Already acknowledged; the WAL fsync (SQLite)
                            // runs in the background as in durable mode.
                            let n = accepted.len();
                            self.finish(std::mem::take(batch), vec![true; n]).await;
                            break;
                        }
                        Err(e) => {
                            attempts += 1;
                            let closing = self.closed.load(Ordering::Acquire);
                            if closing && attempts >= 5 {
                                tracing::error!(error = %e, lost = batch.len(), "buffered mode: acknowledged records lost at shutdown");
                                break;
                            }
                            tracing::warn!(error = %e, attempts, "buffered commit failed; retrying");
                            tokio::time::sleep(self.retry_pause.min(Duration::from_secs(1))).await;
                        }
                    }
                }
                batch.clear();
            }
        }
    }

    /// Answers a committed batch: at once, or after the WAL fsync (SQLite).
    async fn finish(&self, jobs: Vec<Job>, accepted: Vec<bool>) {
        match &self.syncer {
            Some(s) => {
                if let Err(mpsc::error::SendError(SyncMsg::Committed(c))) =
                    s.send(SyncMsg::Committed(Committed { jobs, accepted }))
                {
                    // Syncer gone (cannot happen before the committers end):
                    // sync inline rather than acknowledge unsynced rows.
                    let r = self.core.sync_wal().await;
                    answer(c.jobs, c.accepted, r.as_ref().err());
                }
            }
            None => answer(jobs, accepted, None),
        }
    }

    async fn write(&self, batch: &[Job], policy: ReplayPolicy) -> Result<Vec<bool>, StoreError> {
        let records: Vec<&IssuanceRecord> = batch.iter().map(|j| &j.record).collect();
        let started = Instant::now();
        let r = self.core.commit_batch(&records, policy).await;
        let took = started.elapsed();
        metrics::histogram!(crate::metric_names::COMMIT_DURATION).record(took.as_secs_f64());
        match &r {
            Ok(accepted) => {
                self.stats
                    .commit_nanos
                    .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
                self.healthy.store(true, Ordering::Relaxed);
                metrics::histogram!(crate::metric_names::COMMIT_BATCH_SIZE)
                    .record(records.len() as f64);
                let written = match policy {
                    ReplayPolicy::DropCert => accepted.iter().filter(|ok| **ok).count(),
                    ReplayPolicy::KeepCert => accepted.len(),
                };
                metrics::counter!(crate::metric_names::COMMITTED_ROWS).increment(written as u64);
                metrics::counter!(crate::metric_names::COMMITS).increment(1);
                self.stats.commits.fetch_add(1, Ordering::Relaxed);
                self.stats.rows.fetch_add(written as u64, Ordering::Relaxed);
            }
            Err(e) => {
                if matches!(e, StoreError::Unavailable(_)) {
                    self.healthy.store(false, Ordering::Relaxed);
                }
                metrics::counter!(crate::metric_names::COMMIT_FAILURES).increment(1);
                tracing::warn!(error = %e, size = records.len(), "commit failed");
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{CertRecord, CertStatus, NonceRow};

    fn committed(n: usize) -> Committed {
        Committed {
            jobs: Vec::new(),
            accepted: vec![true; n],
        }
    }

    #[test]
    fn a_committer_gathers_only_small_batches_while_passes_bring_records() {
        let ms = Duration::from_millis;
        let budget = ms(2);
        // A small batch, room left, the last pass brought records: gather.
        assert!(keep_gathering(3, 5, 1000, true, ms(1), budget));
        // A batch that piled up while the previous commit ran: commit now,
        // however much it grew since.
        assert!(!keep_gathering(
            GATHER_BELOW,
            GATHER_BELOW,
            1000,
            true,
            ms(0),
            budget
        ));
        // A pass that brought nothing, a full batch, a spent budget, or a
        // zero budget: commit now.
        assert!(!keep_gathering(3, 5, 1000, false, ms(1), budget));
        assert!(!keep_gathering(3, 1000, 1000, true, ms(1), budget));
        assert!(!keep_gathering(3, 5, 1000, true, ms(2), budget));
        assert!(!keep_gathering(1, 1, 1000, true, ms(0), Duration::ZERO));
        // A lone record gets its one pass.
        assert!(keep_gathering(1, 1, 1000, true, ms(0), budget));
    }

    #[test]
    fn only_large_durable_sqlite_batches_are_split() {
        let durable = Durability::Durable;
        assert_eq!(split_at(SPLIT_FROM, durable, true), Some(SPLIT_FROM / 2));
        assert_eq!(split_at(64, durable, true), Some(32));
        assert_eq!(split_at(65, durable, true), Some(32));
        assert_eq!(split_at(SPLIT_FROM - 1, durable, true), None);
        assert_eq!(split_at(1, durable, true), None);
        // Buffered answers before the commit; server databases flush in it.
        assert_eq!(split_at(64, Durability::Buffered, true), None);
        assert_eq!(split_at(64, durable, false), None);
    }

    #[test]
    fn an_fsync_covers_exactly_the_batches_committed_before_it_started() {
        let waiting: std::collections::VecDeque<(u64, Committed)> =
            (3..7).map(|seq| (seq, committed(1))).collect();
        assert_eq!(covered_prefix(&waiting, 3), 0);
        assert_eq!(covered_prefix(&waiting, 5), 2);
        assert_eq!(covered_prefix(&waiting, 7), 4);
        assert_eq!(covered_prefix(&waiting, 100), 4);
        assert_eq!(covered_prefix(&Default::default(), 9), 0);
    }

    fn issuance(tag: u8) -> IssuanceRecord {
        let now = crate::unix_now();
        IssuanceRecord {
            cert: CertRecord {
                ca: "people".into(),
                serial: format!("{tag:040X}"),
                common_name: "agent".into(),
                profile: "agent-proxy".into(),
                status: CertStatus::Valid,
                not_before: now,
                not_after: now + 3600,
                der: vec![0x30, tag],
                principal_uid: Some("corp:alice".into()),
                agent_id: Some("a".into()),
                key_hash: vec![tag; 32],
                created_at: now,
                revoked_at: None,
                revocation_reason: None,
            },
            nonce: Some(NonceRow {
                nonce: [tag; 32],
                expires_at: now + 300,
                principal_uid: "corp:alice".into(),
            }),
        }
    }

    /// Durable SQLite answers only after the WAL fsync: with the WAL file
    /// taken away the commit itself still succeeds (SQLite keeps its file
    /// open) but the fsync cannot happen, so the request must fail rather
    /// than be acknowledged unsynced.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn durable_sqlite_acknowledges_only_after_the_wal_fsync() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("w.db");
        let store = crate::open(db.to_str().unwrap(), StoreOptions::default())
            .await
            .unwrap();
        assert_eq!(store.submit(issuance(1)).await, Ok(()));
        let mut wal = db.clone().into_os_string();
        wal.push("-wal");
        std::fs::remove_file(&wal).unwrap();
        let r = store.submit(issuance(2)).await;
        assert!(
            matches!(r, Err(WriteError::Unavailable(ref m)) if m.contains("fsync")),
            "an unsynced commit was answered {r:?}"
        );
        assert!(!store.write_path_healthy());
        store.shutdown().await;
    }
}
