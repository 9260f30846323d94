//! The issuance sink: the in-memory nonce ledger (the fast reject before
//! signing), the recent-certificates window (a memory budget), and the
//! durable group-commit write path (`writer`), whose commit is the authority
//! on nonces.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{StoreError, WriteError};
use crate::nonce::{NonceError, NonceLedger, NonceReservation};
use crate::options::StoreOptions;
use crate::sql::SqlCore;
use crate::time::now_unix;
use crate::types::IssuanceRecord;
use crate::window::CertWindow;
use crate::writer::{WritePipeline, WriteStatsSnapshot};

/// Where issued certificates go (see the module comment).
pub struct Issuance {
    core: Arc<SqlCore>,
    writer: WritePipeline,
    ledger: Arc<NonceLedger>,
    window: CertWindow,
    pruner: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// How much of the in-memory budgets is in use, for metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryUse {
    /// Nonces held by the ledger (consumed or reserved, not yet expired).
    pub nonces: usize,
    /// The ledger's budget (`engine.max_da_nonces`, rounded up to shards).
    pub nonce_capacity: usize,
    /// Certificates in the recent-certificates window.
    pub recent_certs: usize,
    /// Certificates evicted from the window to make room, since open.
    pub window_evictions: u64,
}

impl Issuance {
    /// Warms the ledger with recent nonces from the database, starts the
    /// write path and the background pruning. Inside a Tokio runtime.
    pub(crate) async fn start(core: Arc<SqlCore>, opts: &StoreOptions) -> Issuance {
        let ledger = Arc::new(NonceLedger::new(opts.max_da_nonces));
        // At most half the budget, so a large table cannot fill it; the
        // database stays the authority.
        let now = now_unix();
        match core.load_nonces(now, opts.max_da_nonces / 2).await {
            Ok(rows) => {
                for (n, exp) in rows {
                    let _ = ledger.try_consume(&n, exp, now);
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not preload nonces"),
        }
        let writer = WritePipeline::start(core.clone(), opts, ledger.clone());
        let pruner = spawn_pruner(core.clone(), ledger.clone(), opts.nonce_prune_interval);
        Issuance {
            core,
            writer,
            ledger,
            window: CertWindow::new(opts.max_certs, opts.cert_grace.as_secs() as i64),
            pruner: std::sync::Mutex::new(Some(pruner)),
        }
    }

    /// Consumes a DA nonce in the in-memory ledger for one issuance, before
    /// signing; the reservation releases it when dropped unless handed over
    /// with the record to [`submit`](Self::submit).
    pub fn reserve_nonce(
        &self,
        nonce: &[u8; 32],
        expires_at: i64,
        now: i64,
    ) -> Result<NonceReservation<'_>, NonceError> {
        self.ledger.reserve(nonce, expires_at, now)
    }

    /// Whether the in-memory ledger holds this nonce now (consumed or
    /// reserved, unexpired at `now`).
    pub fn nonce_held(&self, nonce: &[u8; 32], now: i64) -> bool {
        self.ledger.contains(nonce, now)
    }

    /// Persists an issuance: a certificate with or without its DA nonce, or
    /// a nonce alone ([`IssuanceRecord::nonce_only`]). Durable mode: returns
    /// after the commit that holds it is on disk. Fails at once with
    /// [`WriteError::EmptyRecord`] for a record that carries neither; with
    /// [`WriteError::Overloaded`] when `max_pending` records are pending or
    /// the recent-certificates window is full (only records with a
    /// certificate take room there); with [`WriteError::NonceReplayed`] if
    /// the database already holds the nonce, consumed by a certificate or a
    /// nonce-only record (the certificate is then **not** stored and must
    /// not be returned, nor whatever a nonce-only record redeems the DA for);
    /// with [`WriteError::Unavailable`] if its batch could not be committed.
    /// On every failure but a replay the nonce is released from the ledger,
    /// also when the returned future is dropped before it completes.
    pub async fn submit(&self, record: IssuanceRecord) -> Result<(), WriteError> {
        if record.is_empty() {
            metrics::counter!(crate::metric_names::WRITE_REJECTED, "reason" => "empty_record")
                .increment(1);
            return Err(WriteError::EmptyRecord);
        }
        // The window budgets certificates; a nonce-only record holds none.
        let windowed = record.cert.as_ref().map(|c| c.not_after);
        if let Some(not_after) = windowed
            && self.window.admit(not_after, now_unix()).is_err()
        {
            if let Some(n) = &record.nonce {
                self.ledger.release(&n.nonce);
            }
            metrics::counter!(crate::metric_names::WRITE_REJECTED, "reason" => "window_full")
                .increment(1);
            return Err(WriteError::Overloaded {
                retry_after: Duration::from_secs(1),
            });
        }
        let r = self.writer.submit(record).await;
        if let (Err(_), Some(not_after)) = (&r, windowed) {
            self.window.forget(not_after);
        }
        r
    }

    /// The write path is accepting and its last commit succeeded.
    pub fn healthy(&self) -> bool {
        self.writer.healthy()
    }

    /// Totals of the write path since open.
    pub fn stats(&self) -> WriteStatsSnapshot {
        self.writer.stats()
    }

    /// The in-memory budgets' use.
    pub fn memory_use(&self) -> MemoryUse {
        MemoryUse {
            nonces: self.ledger.len(),
            nonce_capacity: self.ledger.capacity(),
            recent_certs: self.window.len(),
            window_evictions: self.window.evictions(),
        }
    }

    /// A number that changes whenever the database was written other than
    /// through [`submit`](Self::submit) (an administrative write, another
    /// process on the same SQLite file): per-principal counts kept in
    /// memory from `submit`s and one exact read stay valid while it holds.
    /// SQLite sees another process's commit within about 100 ms. `None`
    /// where nothing can tell (a server database that several nodes share):
    /// every count must then be read.
    pub fn foreign_write_epoch(&self) -> Option<u64> {
        self.core.foreign_write_epoch()
    }

    /// Whether the database holds this nonce (unexpired or not yet pruned).
    pub async fn nonce_consumed(&self, nonce: &[u8; 32]) -> Result<bool, StoreError> {
        self.core.nonce_consumed(nonce).await
    }

    /// Deletes nonce rows with `expires_at < now` (also done in background).
    pub async fn prune_expired_nonces(&self, now: i64) -> Result<u64, StoreError> {
        self.core.prune_nonces(now).await
    }

    /// Stops accepting records, commits everything queued, stops pruning.
    pub(crate) async fn shutdown(&self) {
        self.writer.shutdown().await;
        self.stop_pruner();
    }

    fn stop_pruner(&self) {
        if let Some(h) = self.pruner.lock().unwrap_or_else(|p| p.into_inner()).take() {
            h.abort();
        }
    }
}

impl Drop for Issuance {
    /// Dropped without `shutdown`: stop the pruner (the committers stop on
    /// their own once the queue's sender is gone, after draining it).
    fn drop(&mut self) {
        self.stop_pruner();
    }
}

/// Prunes the ledger every few seconds and the nonce table every
/// `db_interval`.
fn spawn_pruner(
    core: Arc<SqlCore>,
    ledger: Arc<NonceLedger>,
    db_interval: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mem_interval = Duration::from_secs(5).min(db_interval.max(Duration::from_millis(100)));
        let mut tick = tokio::time::interval(mem_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_db = tokio::time::Instant::now();
        loop {
            tick.tick().await;
            let now = now_unix();
            ledger.prune(now);
            if last_db.elapsed() >= db_interval {
                last_db = tokio::time::Instant::now();
                match core.prune_nonces(now).await {
                    Ok(n) if n > 0 => tracing::debug!(pruned = n, "pruned expired nonce rows"),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "nonce pruning failed"),
                }
            }
        }
    })
}
