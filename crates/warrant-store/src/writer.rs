//! The group-commit write path, one for every backend.
//!
//! `submit` takes a permit from a semaphore of `max_pending` permits (none
//! left: `Overloaded` at once, never a wait), queues the record and, in
//! durable mode, waits for its batch's commit. The permit is only returned
//! when the record's fate is known, so `max_pending` bounds queued *and*
//! in-flight records, hence memory.
//!
//! [`Committer`] tasks take whatever is queued (up to `threshold`). One that
//! took only a few records first yields to the tasks that are ready to run
//! and takes what they submit, until the batch holds [`GATHER_BELOW`], a pass
//! brings nothing, or `max_gather` has passed ([`gather`]): on a server whose
//! cores are busy checking and signing requests, those are records about to
//! be submitted, and every commit has a fixed cost that a batch of a few
//! records pays per record. On an idle runtime the pass ends at once, so a
//! lone request pays one commit and no wait.
//!
//! The committer then commits the batch in one transaction
//! (`SqlCore::commit_batch`), makes it durable (SQLite: an fsync of the WAL,
//! `SqlCore::sync_wal`; the server databases flush their log inside the
//! commit) and answers the waiters. PostgreSQL and MariaDB run `committers`
//! of these side by side; SQLite, which has one writer, runs one, and the
//! records that arrive while it commits make up its next batch. Its fsync
//! runs beside the next commit, and a batch still below [`GATHER_BELOW`]
//! when one is in flight waits for it ([`gather_during_sync`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::error::{StoreError, WriteError};
use crate::log::TreeHead;
use crate::nonce::{NonceLedger, NonceReservation};
use crate::options::{Durability, StoreOptions};
use crate::sql::SqlCore;
use crate::sql::batch::ReplayPolicy;
use crate::storage_fault::{StorageFault, write_stopped};
use crate::types::{BackendKind, IssuanceRecord};

/// Counters of the committers, also exported as metrics; kept here so tests
/// and the benchmark can read them without a metrics recorder.
#[derive(Default)]
struct WriteStats {
    commits: std::sync::atomic::AtomicU64,
    rows: std::sync::atomic::AtomicU64,
    /// Time spent in successful batch commits (SQLite: before the fsync).
    commit_nanos: std::sync::atomic::AtomicU64,
    /// Durable records answered, and the time they waited in all.
    durable_waits: std::sync::atomic::AtomicU64,
    durable_wait_nanos: std::sync::atomic::AtomicU64,
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
    /// Durable records whose outcome their request has received.
    pub durable_waits: u64,
    /// The time those requests waited for it, from the queue to the answer
    /// (gathering, the transaction, the WAL fsync, the wake-up) in all:
    /// what durability adds to an issuance's latency, which buffered mode
    /// does not wait for.
    pub durable_wait_time: Duration,
}

/// A batch this large spreads a commit's fixed cost thin: gathering stops
/// there. One this large when a committer takes it shows records piling up
/// while the previous commit ran: the committer is the bottleneck, so
/// gathering would leave it idle.
pub(crate) const GATHER_BELOW: usize = 16;

/// Whether a committer lets the tasks that are ready to run (requests being
/// checked and signed, clients woken by earlier commits) reach the queue
/// once more before it commits: only while the batch is below
/// [`GATHER_BELOW`] (and `threshold`), the previous pass brought records (or
/// none has run yet), and `budget` is not spent. A lone request costs one
/// pass that finds nothing; an idle runtime runs that pass at once.
///
/// The batch, not what the committer first took, is held to
/// [`GATHER_BELOW`]: a pass over a busy runtime lasts until every ready
/// issuance has been signed, so gathering without that cap ended only when
/// the cores ran out of work, and the batch was then committed and fsynced
/// while they idled. Stopping at [`GATHER_BELOW`] hands it over while the
/// rest of the requests are still being signed, and they make up the next.
pub(crate) fn keep_gathering(
    batch_len: usize,
    threshold: usize,
    last_pass_gained: bool,
    elapsed: Duration,
    budget: Duration,
) -> bool {
    batch_len < gather_cap(threshold) && last_pass_gained && elapsed < budget
}

/// The size at which gathering hands a batch over: [`GATHER_BELOW`], or
/// `threshold` when that is smaller (a batch never exceeds it).
fn gather_cap(threshold: usize) -> usize {
    GATHER_BELOW.min(threshold)
}

/// Adds to `batch` what the tasks ready to run submit, pass after pass, as
/// long as [`keep_gathering`] says so. A record that arrives wakes the
/// committer at once, so gathering ends as the batch reaches
/// [`GATHER_BELOW`], and a timer ends it when `budget` is spent, even in the
/// middle of a pass. Returns early only when the queue is closed.
async fn gather<T>(
    rx: &mut mpsc::UnboundedReceiver<T>,
    batch: &mut Vec<T>,
    threshold: usize,
    budget: Duration,
) {
    if !keep_gathering(batch.len(), threshold, true, Duration::ZERO, budget) {
        return;
    }
    let started = Instant::now();
    let spent = tokio::time::sleep(budget);
    tokio::pin!(spent);
    let cap = gather_cap(threshold);
    let mut gained = true;
    while keep_gathering(batch.len(), threshold, gained, started.elapsed(), budget) {
        let before = batch.len();
        let mut pass = pass_over_ready_tasks();
        loop {
            let room = cap.saturating_sub(batch.len());
            if room == 0 {
                break;
            }
            tokio::select! {
                // Records first: those submitted during the pass belong to it.
                biased;
                n = rx.recv_many(batch, room) => {
                    if n == 0 {
                        return;
                    }
                }
                _ = &mut pass => break,
                _ = &mut spent => return,
            }
        }
        gained = batch.len() > before;
    }
}

/// SQLite, durable: while a WAL fsync is in flight, a batch below
/// [`GATHER_BELOW`] waits for it, taking the records that arrive meanwhile,
/// and is committed when the fsync ends or the batch reaches the cap.
///
/// Why: a record committed beside an fsync is not answered any sooner, since
/// its own fsync starts only when the one in flight ends
/// (`SqlCore::sync_wal_through` runs one at a time). Waiting costs it the
/// commit's own time at most, and at low load it lets the records of one
/// fsync's span share one transaction, one fsync and one round of
/// hand-offs instead of paying each alone. A batch that reaches the cap, as
/// at saturation, is committed beside the fsync as before, so the overlap
/// that keeps a busy write path fed stays. The wait is bounded by the fsync
/// in flight; one that fails latches the write path off, and the batch is
/// then failed, not committed (`Committer::commit`).
async fn gather_during_sync<T>(
    rx: &mut mpsc::UnboundedReceiver<T>,
    batch: &mut Vec<T>,
    threshold: usize,
    syncs: &mut tokio::task::JoinSet<()>,
) {
    while syncs.try_join_next().is_some() {}
    let cap = gather_cap(threshold);
    while !syncs.is_empty() && batch.len() < cap {
        let room = cap - batch.len();
        tokio::select! {
            biased;
            n = rx.recv_many(batch, room) => {
                if n == 0 {
                    return;
                }
            }
            _ = syncs.join_next() => return,
        }
    }
}

/// Completes once the tasks that were ready to run when it was called have
/// had their turn: a task that yields is only run again after them (Tokio
/// defers it to the scheduler's next check for I/O and timers).
fn pass_over_ready_tasks() -> oneshot::Receiver<()> {
    let (done, pass) = oneshot::channel();
    tokio::spawn(async move {
        tokio::task::yield_now().await;
        let _ = done.send(());
    });
    pass
}

struct Job {
    record: IssuanceRecord,
    reply: Option<oneshot::Sender<Result<(), WriteError>>>,
    _permit: OwnedSemaphorePermit,
}

/// SQLite: how often an idle committer looks for another process's commits
/// (`SqlCore::probe_foreign_writes`); it also looks before every batch.
const FOREIGN_WRITE_PROBE: Duration = Duration::from_millis(100);

pub(crate) struct WritePipeline {
    queue: std::sync::Mutex<Option<mpsc::UnboundedSender<Job>>>,
    permits: Arc<Semaphore>,
    max_pending: usize,
    durability: Durability,
    closed: Arc<AtomicBool>,
    stats: Arc<WriteStats>,
    committers: std::sync::Mutex<Vec<JoinHandle<()>>>,
    ledger: Arc<NonceLedger>,
    /// A transient failure (the database unreachable, a failed commit): the
    /// next successful commit sets it again.
    healthy: Arc<AtomicBool>,
    /// A storage fault: set for good (`storage_fault`).
    fault: Arc<StorageFault>,
}

/// `Retry-After` suggested when the queue is full: about the time a full
/// queue needs to drain at a modest commit rate; whole seconds for HTTP.
fn retry_after(max_pending: usize) -> Duration {
    Duration::from_secs((max_pending as u64 / 20_000).clamp(1, 5))
}

/// What every consumer of the queue shares with the pipeline.
#[derive(Clone)]
struct Shared {
    threshold: usize,
    durability: Durability,
    /// Pause between retries of a failed buffered commit.
    retry_pause: Duration,
    healthy: Arc<AtomicBool>,
    fault: Arc<StorageFault>,
    closed: Arc<AtomicBool>,
    stats: Arc<WriteStats>,
    permits: Arc<Semaphore>,
    max_pending: usize,
}

impl Shared {
    fn set_queue_depth(&self) {
        metrics::gauge!(crate::metric_names::WRITE_QUEUE_DEPTH)
            .set((self.max_pending - self.permits.available_permits()) as f64);
    }

    /// After the `attempts`-th failed commit of a buffered batch of `size`
    /// records: whether to give it up ([`give_up_buffered`]), logged either
    /// way; otherwise the caller pauses `retry_pause` and tries again.
    fn give_up_buffered_batch(&self, error: &StoreError, attempts: u32, size: usize) -> bool {
        let closing = self.closed.load(Ordering::Acquire);
        if give_up_buffered(closing, attempts) {
            tracing::error!(error = %error, lost = size, "buffered mode: acknowledged records lost at shutdown");
            return true;
        }
        tracing::warn!(error = %error, attempts, "buffered commit failed; retrying");
        false
    }

    /// Bookkeeping of one attempted commit of `records`.
    fn record_commit(
        &self,
        records: &[&IssuanceRecord],
        policy: ReplayPolicy,
        took: Duration,
        outcome: &Result<Vec<bool>, StoreError>,
    ) {
        metrics::histogram!(crate::metric_names::COMMIT_DURATION).record(took.as_secs_f64());
        match outcome {
            Ok(accepted) => {
                self.stats
                    .commit_nanos
                    .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
                self.healthy.store(true, Ordering::Relaxed);
                metrics::histogram!(crate::metric_names::COMMIT_BATCH_SIZE)
                    .record(records.len() as f64);
                let written = cert_rows_written(records, accepted, policy);
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
    }
}

/// How many certificate rows a committed batch wrote (a nonce-only record
/// writes none).
fn cert_rows_written(
    records: &[&IssuanceRecord],
    accepted: &[bool],
    policy: ReplayPolicy,
) -> usize {
    records
        .iter()
        .zip(accepted)
        .filter(|(r, ok)| r.cert.is_some() && (**ok || policy == ReplayPolicy::KeepCert))
        .count()
}

/// What to do after a durable batch failed to commit: one bad row must not
/// fail its neighbours, so a batch of several records is retried record by
/// record, unless the database itself is unavailable (then every record
/// fails).
fn retry_row_by_row(size: usize, error: &StoreError) -> bool {
    size > 1 && !matches!(error, StoreError::Unavailable(_))
}

/// Buffered mode: whether a failed commit of already acknowledged records
/// is given up (and logged as lost). Only at shutdown, after a few tries;
/// otherwise the committer retries until the database is back, holding the
/// permits, so the queue fills and callers get `Overloaded`.
fn give_up_buffered(closing: bool, attempts: u32) -> bool {
    closing && attempts >= 5
}

impl WritePipeline {
    pub(crate) fn start(core: Arc<SqlCore>, opts: &StoreOptions, ledger: Arc<NonceLedger>) -> Self {
        let max_pending = opts.max_pending.max(1);
        let permits = Arc::new(Semaphore::new(max_pending));
        let healthy = Arc::new(AtomicBool::new(true));
        let closed = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(WriteStats::default());
        let shared = Shared {
            threshold: opts.threshold.max(1),
            durability: opts.durability,
            retry_pause: opts
                .max_latency
                .clamp(Duration::from_millis(10), Duration::from_secs(1)),
            healthy: healthy.clone(),
            fault: core.storage_fault().clone(),
            closed: closed.clone(),
            stats: stats.clone(),
            permits: permits.clone(),
            max_pending,
        };
        // SQLite has one writer: a second committer would only queue for it.
        let committers = match core.kind {
            BackendKind::Sqlite => 1,
            BackendKind::Postgres | BackendKind::MySql => opts.committers.max(1),
        };
        let (queue, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(Mutex::new(rx));
        // Each open starts new trees (`<node>.<run>.<committer>`): two
        // processes never append to one tree, even when they share a node
        // name (a copied data dir), and no tree needs a lock between them.
        let node = opts
            .audit_node
            .clone()
            .unwrap_or_else(crate::audit::random_node_name);
        let run = &crate::audit::random_node_name()[..8];
        let committers = (0..committers)
            .map(|i| {
                let c = Committer {
                    core: core.clone(),
                    rx: rx.clone(),
                    shared: shared.clone(),
                    max_gather: opts.max_gather,
                    syncs: Default::default(),
                    tree_name: opts.log.then(|| format!("{node}.{run}.{i}")),
                    tree: std::sync::Mutex::new(None),
                };
                tokio::spawn(c.run())
            })
            .collect();
        WritePipeline {
            queue: std::sync::Mutex::new(Some(queue)),
            permits,
            max_pending,
            durability: opts.durability,
            closed,
            stats,
            committers: std::sync::Mutex::new(committers),
            ledger,
            healthy,
            fault: core.storage_fault().clone(),
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
            durable_waits: self.stats.durable_waits.load(Ordering::Relaxed),
            durable_wait_time: Duration::from_nanos(
                self.stats.durable_wait_nanos.load(Ordering::Relaxed),
            ),
        }
    }

    pub(crate) fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
            && !self.fault.is_stopped()
            && !self.closed.load(Ordering::Relaxed)
    }

    pub(crate) async fn submit(&self, record: IssuanceRecord) -> Result<(), WriteError> {
        // Released unless the database holds the nonce, also when this future
        // is dropped while it waits: a failed issuance lets the client retry
        // its DA.
        let reservation = record
            .nonce
            .as_ref()
            .map(|n| NonceReservation::adopt(&self.ledger, n.nonce));
        let result = self.enqueue_and_wait(record).await;
        if let (Ok(()) | Err(WriteError::NonceReplayed), Some(r)) = (&result, reservation) {
            r.hand_over();
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
        if self.fault.is_stopped() {
            return Err(write_stopped());
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
        let queued = Instant::now();
        {
            let guard = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            let Some(queue) = guard.as_ref() else {
                return Err(WriteError::ShuttingDown);
            };
            queue
                .send(Job {
                    record,
                    reply,
                    _permit: permit,
                })
                .map_err(|_| WriteError::ShuttingDown)?;
        }
        metrics::gauge!(crate::metric_names::WRITE_QUEUE_DEPTH).set(self.pending() as f64);
        let Some(rx) = rx else {
            return Ok(());
        };
        let outcome = rx
            .await
            .unwrap_or_else(|_| Err(WriteError::Unavailable("write pipeline stopped".into())));
        let waited = queued.elapsed();
        metrics::histogram!(crate::metric_names::DURABLE_WAIT).record(waited.as_secs_f64());
        self.stats.durable_waits.fetch_add(1, Ordering::Relaxed);
        self.stats
            .durable_wait_nanos
            .fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
        outcome
    }

    /// Stops accepting records, then waits until every queued record was
    /// committed (or failed) and the committers exited.
    pub(crate) async fn shutdown(&self) {
        self.closed.store(true, Ordering::Release);
        drop(self.queue.lock().unwrap_or_else(|p| p.into_inner()).take());
        let committers: Vec<_> =
            std::mem::take(&mut *self.committers.lock().unwrap_or_else(|p| p.into_inner()));
        for c in committers {
            let _ = c.await;
        }
    }
}

fn reason(e: &WriteError) -> &'static str {
    match e {
        WriteError::Overloaded { .. } => "overloaded",
        WriteError::NonceReplayed => "nonce_replayed",
        WriteError::Unavailable(_) => "unavailable",
        WriteError::ShuttingDown => "shutting_down",
        WriteError::EmptyRecord => "empty_record",
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

/// Fails every record of a batch whose commit failed.
fn fail_all(jobs: Vec<Job>, error: &StoreError) {
    let n = jobs.len();
    answer(jobs, vec![false; n], Some(error));
}

/// Buffered mode answered before the commit, so a replayed nonce's record
/// was already acknowledged: its certificate is stored anyway (a nonce-only
/// record has nothing to store).
fn log_buffered_replays(jobs: &[Job], accepted: &[bool]) {
    let replayed = || jobs.iter().zip(accepted).filter(|(_, ok)| !**ok);
    let replays = replayed().count();
    if replays > 0 {
        let certs_stored = replayed().filter(|(j, _)| j.record.cert.is_some()).count();
        tracing::warn!(
            replays,
            certs_stored,
            "buffered mode: records acknowledged despite replayed nonces"
        );
    }
}

/// A task that takes queued records, gathers more while that pays
/// ([`keep_gathering`]), commits them, makes them durable and answers
/// their waiters.
struct Committer {
    core: Arc<SqlCore>,
    rx: Arc<Mutex<mpsc::UnboundedReceiver<Job>>>,
    shared: Shared,
    max_gather: Duration,
    /// SQLite: the WAL fsyncs (and answers) of committed batches, which run
    /// beside the next commit; the committer ends after them.
    syncs: tokio::task::JoinSet<()>,
    /// This committer's tree of the log (`None`: the log is off).
    tree_name: Option<String>,
    /// Its head as of the last commit; `None` until read from the table,
    /// and again after a failed commit (whose outcome may be unknown).
    tree: std::sync::Mutex<Option<TreeHead>>,
}

impl Committer {
    async fn run(mut self) {
        let threshold = self.shared.threshold;
        let watch_foreign = self.core.kind == BackendKind::Sqlite;
        let mut batch: Vec<Job> = Vec::with_capacity(threshold);
        loop {
            {
                let mut rx = self.rx.lock().await;
                let taken = if watch_foreign {
                    match tokio::time::timeout(
                        FOREIGN_WRITE_PROBE,
                        rx.recv_many(&mut batch, threshold),
                    )
                    .await
                    {
                        Ok(n) => n,
                        Err(_idle) => {
                            drop(rx);
                            self.core.probe_foreign_writes().await;
                            continue;
                        }
                    }
                } else {
                    rx.recv_many(&mut batch, threshold).await
                };
                if taken == 0 {
                    // Sender dropped and queue drained: answer what is
                    // still syncing, then shut down.
                    drop(rx);
                    while self.syncs.join_next().await.is_some() {}
                    return;
                }
                // Let the tasks that are ready to run reach the queue before
                // committing, up to GATHER_BELOW records (`gather`).
                gather(&mut rx, &mut batch, threshold, self.max_gather).await;
                // Then, while an fsync is in flight, wait for it
                // (`gather_during_sync`).
                gather_during_sync(&mut rx, &mut batch, threshold, &mut self.syncs).await;
            }
            // Every SQLite batch first reads the write connection's data
            // version (`commit_batch_sqlite`): a count kept in memory must
            // not outlive another process's commit that the next check
            // would miss.
            let jobs = std::mem::replace(&mut batch, Vec::with_capacity(threshold));
            self.commit(jobs).await;
            self.shared.set_queue_depth();
        }
    }

    async fn commit(&mut self, jobs: Vec<Job>) {
        if self.shared.fault.is_stopped() {
            // Nothing more is written after a storage fault.
            if self.shared.durability == Durability::Buffered {
                tracing::warn!(
                    lost = jobs.len(),
                    "buffered mode: acknowledged records not written after a storage fault"
                );
            }
            fail_all(jobs, &crate::storage_fault::stopped());
            return;
        }
        match self.shared.durability {
            Durability::Durable => self.commit_durable(jobs).await,
            Durability::Buffered => self.commit_buffered(jobs).await,
        }
    }

    /// Commits, syncs, then answers: no waiter hears `Ok` before its row is
    /// on disk.
    async fn commit_durable(&mut self, jobs: Vec<Job>) {
        let (jobs, accepted) = match self.write(&jobs, ReplayPolicy::DropCert).await {
            Ok(accepted) => (jobs, accepted),
            Err(e) if retry_row_by_row(jobs.len(), &e) => {
                tracing::warn!(error = %e, size = jobs.len(), "batch commit failed; retrying row by row");
                let mut committed = Vec::with_capacity(jobs.len());
                let mut accepted = Vec::with_capacity(jobs.len());
                for job in jobs {
                    match self
                        .write(std::slice::from_ref(&job), ReplayPolicy::DropCert)
                        .await
                    {
                        Ok(ok) => {
                            accepted.push(ok.first() == Some(&true));
                            committed.push(job);
                        }
                        Err(e) => fail_all(vec![job], &e),
                    }
                }
                (committed, accepted)
            }
            Err(e) => return fail_all(jobs, &e),
        };
        if jobs.is_empty() {
            return;
        }
        if self.core.kind != BackendKind::Sqlite {
            let synced = self.core.sync_wal().await;
            return answer(jobs, accepted, synced.as_ref().err());
        }
        // SQLite: the next batch is written while this one's WAL fsync runs.
        let commit = self.core.note_commit();
        let core = self.core.clone();
        while self.syncs.try_join_next().is_some() {}
        self.syncs.spawn(async move {
            let synced = core.sync_wal_through(commit).await;
            answer(jobs, accepted, synced.as_ref().err());
        });
    }

    /// The records were acknowledged on enqueue: retry until they are
    /// written (or the store shuts down), then sync as in durable mode.
    async fn commit_buffered(&self, jobs: Vec<Job>) {
        let mut attempts = 0u32;
        loop {
            match self.write(&jobs, ReplayPolicy::KeepCert).await {
                Ok(accepted) => {
                    log_buffered_replays(&jobs, &accepted);
                    let synced = self.core.sync_wal().await;
                    if let Err(e) = &synced {
                        tracing::error!(error = %e, size = jobs.len(), "buffered mode: WAL fsync failed");
                    }
                    // Nobody waits (replies are `None`) unless a test does.
                    let n = jobs.len();
                    answer(jobs, vec![true; n], synced.as_ref().err());
                    return;
                }
                Err(e) => {
                    attempts += 1;
                    if self.shared.fault.is_stopped()
                        || self.shared.give_up_buffered_batch(&e, attempts, jobs.len())
                    {
                        return;
                    }
                    tokio::time::sleep(self.shared.retry_pause).await;
                }
            }
        }
    }

    async fn write(&self, jobs: &[Job], policy: ReplayPolicy) -> Result<Vec<bool>, StoreError> {
        let records: Vec<&IssuanceRecord> = jobs.iter().map(|j| &j.record).collect();
        let started = Instant::now();
        let head = self.tree_head().await;
        let out = match head {
            Ok(head) => {
                self.core
                    .commit_batch(&records, policy, head.as_ref())
                    .await
            }
            Err(e) => Err(e),
        };
        let out = out.map(|(accepted, next)| {
            *self.tree.lock().unwrap_or_else(|p| p.into_inner()) = next;
            accepted
        });
        if out.is_err() {
            *self.tree.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        self.shared
            .record_commit(&records, policy, started.elapsed(), &out);
        out
    }

    /// The tree's head: as the last commit left it, or read from the table
    /// (made on the first commit); `None` when the log is off.
    async fn tree_head(&self) -> Result<Option<TreeHead>, StoreError> {
        let Some(name) = &self.tree_name else {
            return Ok(None);
        };
        if let Some(head) = self.tree.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return Ok(Some(head));
        }
        self.core.log_open_tree(name).await.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{CertRecord, CertStatus, NonceRow};

    #[test]
    fn a_committer_gathers_only_small_batches_while_passes_bring_records() {
        let ms = Duration::from_millis;
        let budget = ms(2);
        // A small batch, room left, the last pass brought records: gather.
        assert!(keep_gathering(5, 1000, true, ms(1), budget));
        // A batch that piled up while the previous commit ran, or grew to
        // GATHER_BELOW while gathering: commit now.
        assert!(!keep_gathering(GATHER_BELOW, 1000, true, ms(0), budget));
        assert!(keep_gathering(GATHER_BELOW - 1, 1000, true, ms(0), budget));
        // A pass that brought nothing, a full batch, a spent budget, or a
        // zero budget: commit now.
        assert!(!keep_gathering(5, 1000, false, ms(1), budget));
        assert!(!keep_gathering(5, 5, true, ms(1), budget));
        assert!(!keep_gathering(5, 1000, true, ms(2), budget));
        assert!(!keep_gathering(1, 1000, true, ms(0), Duration::ZERO));
        // A lone record gets its one pass.
        assert!(keep_gathering(1, 1000, true, ms(0), budget));
    }

    /// `senders` tasks become ready together, each to submit one record,
    /// after the committer took a first one; returns the batch it gathered
    /// and what was left queued. A single-threaded runtime runs every ready
    /// task before the committer's pass ends.
    async fn gather_from_ready_tasks(senders: usize, budget: Duration) -> (usize, usize) {
        let (tx, mut rx) = mpsc::unbounded_channel::<usize>();
        tx.send(0).unwrap();
        let mut batch = Vec::new();
        assert_eq!(rx.recv_many(&mut batch, 1000).await, 1);
        let go = Arc::new(tokio::sync::Notify::new());
        for i in 1..=senders {
            let (tx, go) = (tx.clone(), go.clone());
            tokio::spawn(async move {
                go.notified().await;
                tx.send(i).unwrap();
            });
        }
        tokio::task::yield_now().await; // every sender waits on `go`
        go.notify_waiters();
        gather(&mut rx, &mut batch, 1000, budget).await;
        tokio::task::yield_now().await; // let any sender still ready send
        let mut left = Vec::new();
        while let Ok(r) = rx.try_recv() {
            left.push(r);
        }
        (batch.len(), left.len())
    }

    /// Gathering takes what the requests in progress submit, but stops as
    /// the batch reaches GATHER_BELOW, leaving the rest for the next batch;
    /// with no budget it takes nothing.
    #[tokio::test(flavor = "current_thread")]
    async fn gathering_takes_what_ready_tasks_submit_up_to_gather_below() {
        let budget = Duration::from_secs(30);
        assert_eq!(gather_from_ready_tasks(7, budget).await, (8, 0));
        assert_eq!(
            gather_from_ready_tasks(40, budget).await,
            (GATHER_BELOW, 41 - GATHER_BELOW)
        );
        assert_eq!(gather_from_ready_tasks(7, Duration::ZERO).await, (1, 7));
    }

    #[test]
    fn failed_commits_are_retried_row_by_row_unless_the_database_is_down() {
        let conflict = StoreError::Conflict("row");
        let down = StoreError::Unavailable("gone".into());
        assert!(retry_row_by_row(2, &conflict));
        assert!(
            !retry_row_by_row(1, &conflict),
            "a lone record failed already"
        );
        assert!(!retry_row_by_row(20, &down));
        // Acknowledged buffered records are only given up at shutdown.
        assert!(!give_up_buffered(false, 1_000));
        assert!(!give_up_buffered(true, 4));
        assert!(give_up_buffered(true, 5));
    }

    fn issuance(tag: u8) -> IssuanceRecord {
        let now = crate::time::now_unix();
        IssuanceRecord::with_cert(
            CertRecord {
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
                capabilities: None,
                lineage_start: None,
            },
            Some(nonce_row(tag)),
        )
    }

    fn nonce_row(tag: u8) -> NonceRow {
        NonceRow {
            nonce: [tag; 32],
            expires_at: crate::time::now_unix() + 300,
            principal_uid: "corp:alice".into(),
        }
    }

    /// What a committer did with records queued before it started.
    struct Prequeued {
        replies: Vec<Result<(), WriteError>>,
        commits: u64,
        rows: u64,
    }

    /// Runs a committer on a SQLite queue that already holds `records` and
    /// has no sender, so that it takes them all (up to `threshold` a batch)
    /// and then ends.
    async fn write_prequeued(
        records: Vec<IssuanceRecord>,
        durability: Durability,
        threshold: usize,
    ) -> Prequeued {
        let dir = tempfile::tempdir().unwrap();
        let dsn = crate::dsn::parse_dsn(dir.path().join("w.db").to_str().unwrap()).unwrap();
        let core = Arc::new(
            SqlCore::connect(&dsn, &StoreOptions::default())
                .await
                .unwrap(),
        );
        let n = records.len();
        let permits = Arc::new(Semaphore::new(n));
        let shared = Shared {
            threshold,
            durability,
            retry_pause: Duration::from_millis(10),
            healthy: Arc::new(AtomicBool::new(true)),
            fault: core.storage_fault().clone(),
            closed: Arc::new(AtomicBool::new(false)),
            stats: Arc::new(WriteStats::default()),
            permits: permits.clone(),
            max_pending: n,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let mut answers = Vec::new();
        for record in records {
            let (reply, answer) = oneshot::channel();
            tx.send(Job {
                record,
                reply: Some(reply),
                _permit: permits.clone().try_acquire_owned().unwrap(),
            })
            .unwrap();
            answers.push(answer);
        }
        drop(tx);
        let committer = Committer {
            core,
            rx: Arc::new(Mutex::new(rx)),
            shared: shared.clone(),
            max_gather: Duration::ZERO,
            syncs: Default::default(),
            tree_name: Some("test.0".into()),
            tree: std::sync::Mutex::new(None),
        };
        committer.run().await;
        let mut replies = Vec::new();
        for a in answers {
            replies.push(a.await.unwrap());
        }
        assert_eq!(permits.available_permits(), n, "every permit back");
        Prequeued {
            replies,
            commits: shared.stats.commits.load(Ordering::Relaxed),
            rows: shared.stats.rows.load(Ordering::Relaxed),
        }
    }

    /// (commits, rows) for `n` distinct records, all accepted.
    async fn commit_prequeued(n: u8, durability: Durability, threshold: usize) -> (u64, u64) {
        let out = write_prequeued((0..n).map(issuance).collect(), durability, threshold).await;
        assert!(out.replies.iter().all(|r| r.is_ok()), "{:?}", out.replies);
        (out.commits, out.rows)
    }

    /// A durable batch whose transaction fails on one record (a serial
    /// already taken) is retried record by record: only that record fails,
    /// and a replayed nonce is still refused as a replay.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_bad_record_fails_alone_in_its_batch() {
        let mut records: Vec<IssuanceRecord> = (0..5).map(issuance).collect();
        let taken = records[1].cert.clone().expect("a certificate").serial;
        records[3].cert.as_mut().expect("a certificate").serial = taken;
        let mut replay = issuance(9);
        replay.nonce = records[0].nonce.clone();
        records.push(replay);
        let out = write_prequeued(records, Durability::Durable, 1000).await;
        assert!(
            out.replies[..3].iter().all(|r| r.is_ok()),
            "{:?}",
            out.replies
        );
        assert!(
            matches!(out.replies[3], Err(WriteError::Unavailable(_))),
            "{:?}",
            out.replies[3]
        );
        assert_eq!(out.replies[4], Ok(()));
        assert_eq!(out.replies[5], Err(WriteError::NonceReplayed));
        // Row by row: one commit per record that went in.
        assert_eq!((out.commits, out.rows), (5, 4));
    }

    /// Nonce-only records commit in one batch with certificates and write no
    /// certificate row; a record whose nonce an earlier one of the batch
    /// carries is a replay, whichever of the two has a certificate. Buffered
    /// mode acknowledged them all and stores every certificate.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nonce_only_records_share_a_batch_and_write_no_certificate_row() {
        let records = || {
            vec![
                issuance(1),
                IssuanceRecord::nonce_only(nonce_row(2)),
                issuance(3),
                IssuanceRecord::nonce_only(nonce_row(1)),
                issuance(2),
            ]
        };
        let out = write_prequeued(records(), Durability::Durable, 1000).await;
        let replayed = Err(WriteError::NonceReplayed);
        assert_eq!(
            out.replies,
            [Ok(()), Ok(()), Ok(()), replayed.clone(), replayed]
        );
        assert_eq!((out.commits, out.rows), (1, 2));
        let out = write_prequeued(records(), Durability::Buffered, 1000).await;
        assert!(out.replies.iter().all(|r| r.is_ok()), "{:?}", out.replies);
        assert_eq!((out.commits, out.rows), (1, 3));
    }

    /// A committer takes everything queued, up to `threshold` records a
    /// transaction.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_committer_commits_what_is_queued_together() {
        let durable = Durability::Durable;
        assert_eq!(commit_prequeued(7, durable, 1000).await, (1, 7));
        assert_eq!(commit_prequeued(40, durable, 1000).await, (1, 40));
        assert_eq!(
            commit_prequeued(40, Durability::Buffered, 1000).await,
            (1, 40)
        );
        // 16 + 16 + 8.
        assert_eq!(commit_prequeued(40, durable, 16).await, (3, 40));
    }

    /// What durability adds to a request's latency is counted for durable
    /// requests only: a buffered request is answered on enqueue.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_durable_requests_count_their_wait_for_the_commit() {
        for (durability, expected) in [(Durability::Durable, 3), (Durability::Buffered, 0)] {
            let dir = tempfile::tempdir().unwrap();
            let db = dir.path().join("w.db");
            let opts = StoreOptions {
                durability,
                ..StoreOptions::default()
            };
            let store = crate::Store::open(db.to_str().unwrap(), opts)
                .await
                .unwrap();
            for tag in 1..=3 {
                assert_eq!(store.issuance().submit(issuance(tag)).await, Ok(()));
            }
            let stats = store.issuance().stats();
            assert_eq!(stats.durable_waits, expected, "{durability:?}");
            assert_eq!(
                stats.durable_wait_time > Duration::ZERO,
                expected > 0,
                "{durability:?}: {stats:?}"
            );
            store.shutdown().await;
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
        let store = crate::Store::open(db.to_str().unwrap(), StoreOptions::default())
            .await
            .unwrap();
        assert_eq!(store.issuance().submit(issuance(1)).await, Ok(()));
        let mut wal = db.clone().into_os_string();
        wal.push("-wal");
        std::fs::remove_file(&wal).unwrap();
        let r = store.issuance().submit(issuance(2)).await;
        assert!(
            matches!(r, Err(WriteError::Unavailable(ref m)) if m.contains("fsync")),
            "an unsynced commit was answered {r:?}"
        );
        assert!(!store.issuance().healthy());
        store.shutdown().await;
    }
}
