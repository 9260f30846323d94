//! Storage for Warrant: one [`Store`] trait over SQLite (embedded default,
//! WAL), PostgreSQL and MariaDB/MySQL, with the durable group-commit write
//! path ([`Store::submit`]) and the in-memory nonce ledger.
//!
//! Open with [`open`]; the schema is migrated at open. See the crate README
//! for the contract the server relies on.

mod checkpointer;
mod dsn;
mod error;
#[cfg(feature = "fault-injection")]
pub mod faults;
#[cfg(not(feature = "fault-injection"))]
mod faults;
mod inline_read;
pub mod metric_names;
mod migrations;
mod nonce;
mod options;
mod sql;
mod sqlite_writer;
mod storage_fault;
mod types;
mod wal_vfs;
mod window;
mod writer;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

pub use checkpointer::SQLITE_CHECKPOINTER_THREAD;
pub use error::{StoreError, WriteError};
pub use nonce::{NonceError, NonceLedger, NonceReservation};
pub use options::{Durability, StoreOptions};
pub use sqlite_writer::SQLITE_WRITER_THREAD;
pub use types::*;
pub use window::{CertWindow, WindowFull};
pub use writer::SQLITE_SYNCER_THREAD;
pub use writer::WriteStatsSnapshot;

pub use dsn::{Dsn, parse_dsn};

use sql::{SqlCore, now_unix};
use writer::WritePipeline;

/// Everything the server asks of storage.
///
/// Reads and administrative writes go straight to the database, bounded by
/// the configured timeouts (a dead database yields [`StoreError::Unavailable`],
/// never a hang). Issuance goes through [`Store::submit`].
#[async_trait]
pub trait Store: Send + Sync {
    fn backend(&self) -> BackendKind;
    /// A round trip to the database (for `/readyz`).
    async fn ping(&self) -> Result<(), StoreError>;
    /// The write path is accepting and its last commit succeeded.
    fn write_path_healthy(&self) -> bool;
    fn write_stats(&self) -> WriteStatsSnapshot;

    // users
    /// Returns the new user's id; [`StoreError::Conflict`] if the name is taken.
    async fn create_user(&self, user: &NewUser) -> Result<i64, StoreError>;
    async fn get_user(&self, id: i64) -> Result<Option<UserRow>, StoreError>;
    async fn get_user_by_name(&self, username: &str) -> Result<Option<UserRow>, StoreError>;
    async fn list_users(&self) -> Result<Vec<UserRow>, StoreError>;
    /// Deletes the user and its tokens; `false` if there was no such user.
    async fn delete_user(&self, id: i64) -> Result<bool, StoreError>;
    /// Changes a user's role and/or password hash (a new password deletes
    /// the user's tokens); `false` if there is no such user.
    async fn update_user(&self, id: i64, update: &UserUpdate) -> Result<bool, StoreError>;
    /// Persists the login-failure counter and lock; `false` if no such user.
    async fn set_login_state(
        &self,
        id: i64,
        failed_logins: i64,
        locked_until: Option<i64>,
    ) -> Result<bool, StoreError>;

    // API tokens
    /// Returns the new token's id; [`StoreError::MissingReference`] for an
    /// unknown user.
    async fn create_token(&self, token: &NewApiToken) -> Result<i64, StoreError>;
    async fn get_token(&self, id: i64) -> Result<Option<ApiTokenRow>, StoreError>;
    /// Tokens of one user, or of everyone with `None`.
    async fn list_tokens(&self, user_id: Option<i64>) -> Result<Vec<ApiTokenRow>, StoreError>;
    /// `true` only for the caller whose delete removed the row: of two
    /// nodes spending one one-time token, exactly one gets `true`.
    async fn delete_token(&self, id: i64) -> Result<bool, StoreError>;
    /// Every token with `expires_at > now`, for the server's in-memory index.
    async fn load_unexpired_tokens(&self, now: i64) -> Result<Vec<ApiTokenRow>, StoreError>;
    /// The token whose SHA-256 is `hash` (expired or not).
    async fn token_by_hash(&self, hash: &[u8; 32]) -> Result<Option<ApiTokenRow>, StoreError>;
    /// Deletes at most `limit` tokens with `expires_at <= now`; returns how many.
    async fn prune_expired_tokens(&self, now: i64, limit: u32) -> Result<u64, StoreError>;

    // auth change feed: every user or token insert, update and delete
    // appends an [`AuthChange`] in its own transaction.
    /// The number of the last change taken (0 before the first).
    async fn auth_change_head(&self) -> Result<i64, StoreError>;
    /// Changes with `seq > after`, oldest first, at most `limit`. Numbers
    /// become visible in order, so a reader that remembers the last `seq` it
    /// applied misses none (as long as it reads before they are pruned).
    async fn auth_changes_since(
        &self,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AuthChange>, StoreError>;
    /// Deletes change rows written before `before` (Unix seconds).
    async fn prune_auth_changes(&self, before: i64) -> Result<u64, StoreError>;

    // certificates
    async fn get_cert(&self, ca: &str, serial: &str) -> Result<Option<CertRecord>, StoreError>;
    /// Newest first; `limit` capped at [`MAX_LIST_LIMIT`].
    async fn list_certs(&self, filter: &CertFilter) -> Result<Vec<CertRecord>, StoreError>;
    /// Status and principal of a certificate; `None` if it is unknown. The
    /// issuance path and mTLS ask this on every request, so on SQLite it
    /// runs on the caller's thread (see `inline_read`).
    async fn cert_status(&self, ca: &str, serial: &str)
    -> Result<Option<CertStanding>, StoreError>;
    /// Persists a client certificate issued *for* user `user_id` (an
    /// operator certificate) with that binding, durably, outside the
    /// issuance write path: it is the only way a certificate acts as a user.
    async fn insert_bound_cert(&self, cert: &CertRecord, user_id: i64) -> Result<(), StoreError>;
    /// Revokes one certificate; revoking a person (principal) certificate
    /// also revokes that principal's valid agent certificates, in the same
    /// transaction. `None` if the certificate is unknown.
    async fn revoke_cert(
        &self,
        ca: &str,
        serial: &str,
        reason: &str,
        at: i64,
    ) -> Result<Option<RevokeOutcome>, StoreError>;
    /// Revokes every valid certificate (person and agent) of a principal;
    /// returns how many.
    async fn revoke_by_principal(
        &self,
        principal_uid: &str,
        reason: &str,
        at: i64,
    ) -> Result<u64, StoreError>;
    /// Revoked certificates of `ca` with `not_after >= not_after_from`
    /// (pass 0 for all), ordered by serial: the CRL's entries.
    async fn list_revoked(
        &self,
        ca: &str,
        not_after_from: i64,
    ) -> Result<Vec<RevokedEntry>, StoreError>;
    /// Valid, unexpired agent certificates delegated by `principal_uid`
    /// (committed ones: records still in the write queue are not counted).
    async fn count_active_agents(&self, principal_uid: &str, now: i64) -> Result<u64, StoreError>;
    /// A number that changes whenever a connection other than this store's
    /// issuance write path has committed to the database: counts kept in
    /// memory from `submit`s and one exact read stay valid while it holds.
    /// SQLite notices such a commit at its next batch, or within 100 ms when
    /// idle. `None` where nothing can tell (a server database that several
    /// nodes share): every count must then be read.
    fn foreign_write_epoch(&self) -> Option<u64> {
        None
    }

    // issuance
    /// Persists an issuance. Durable mode: returns after the commit that
    /// holds it. Fails at once with [`WriteError::Overloaded`] when
    /// `max_pending` records are pending; with [`WriteError::NonceReplayed`]
    /// if the database already holds the nonce (the certificate is then
    /// **not** stored and must not be returned); with
    /// [`WriteError::Unavailable`] if its batch could not be committed.
    /// On every failure but a replay the nonce is released from the ledger,
    /// also when the returned future is dropped before it completes.
    async fn submit(&self, record: IssuanceRecord) -> Result<(), WriteError>;
    /// The in-memory nonce set: call [`NonceLedger::try_consume`] before
    /// signing (fast reject); the commit is the authority.
    fn nonce_ledger(&self) -> &NonceLedger;
    /// Consumes a DA nonce in the in-memory ledger for one issuance; the
    /// reservation releases it when dropped unless handed over with the
    /// record to [`submit`](Self::submit).
    fn reserve_nonce(
        &self,
        nonce: &[u8; 32],
        expires_at: i64,
        now: i64,
    ) -> Result<NonceReservation<'_>, NonceError> {
        self.nonce_ledger().reserve(nonce, expires_at, now)
    }
    /// The recent-certificates window (`engine.max_certs` + `grace`);
    /// `submit` admits into it and answers `Overloaded` when it is full.
    fn cert_window(&self) -> &CertWindow;
    /// Whether the database holds this nonce (unexpired or not yet pruned).
    async fn nonce_consumed(&self, nonce: &[u8; 32]) -> Result<bool, StoreError>;
    /// Deletes nonce rows with `expires_at < now` (also done in background).
    async fn prune_expired_nonces(&self, now: i64) -> Result<u64, StoreError>;

    /// Stops accepting writes, commits everything queued, stops background
    /// tasks. Later `submit`s get [`WriteError::ShuttingDown`].
    async fn shutdown(&self);
}

/// Opens (and migrates) the database named by `dsn`: `postgres://…`,
/// `mysql://…`, `mariadb://…`, `sqlite://path`, `sqlite:path` or a path.
/// Must be called inside a Tokio runtime (it spawns the committers).
pub async fn open(dsn: &str, opts: StoreOptions) -> Result<Arc<dyn Store>, StoreError> {
    Ok(Arc::new(SqlStore::open(dsn, opts).await?))
}

/// The SQL implementation of [`Store`] for all three backends.
pub struct SqlStore {
    core: Arc<SqlCore>,
    writer: WritePipeline,
    ledger: Arc<NonceLedger>,
    window: CertWindow,
    background: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl SqlStore {
    pub async fn open(dsn: &str, opts: StoreOptions) -> Result<SqlStore, StoreError> {
        let parsed = dsn::parse_dsn(dsn)?;
        let core = Arc::new(SqlCore::connect(&parsed, &opts).await?);
        let ledger = Arc::new(NonceLedger::new(opts.max_da_nonces));
        // Warm the fast-reject set with recent nonces (at most half the budget,
        // so a large table cannot fill it); the DB stays the authority.
        let now = now_unix();
        match core.load_nonces(now, opts.max_da_nonces / 2).await {
            Ok(rows) => {
                for (n, exp) in rows {
                    let _ = ledger.try_consume(&n, exp, now);
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not preload nonces"),
        }
        let writer = WritePipeline::start(
            core.clone(),
            core.take_sqlite_writer(),
            &opts,
            ledger.clone(),
        )?;
        let background = vec![spawn_pruner(
            core.clone(),
            ledger.clone(),
            opts.nonce_prune_interval,
        )];
        let window = CertWindow::new(opts.max_certs, opts.cert_grace.as_secs() as i64);
        Ok(SqlStore {
            core,
            writer,
            ledger,
            window,
            background: std::sync::Mutex::new(background),
        })
    }
}

impl Drop for SqlStore {
    /// Dropped without `shutdown`: stop the pruner (the committers stop on
    /// their own once the queue's sender is gone, after draining it).
    fn drop(&mut self) {
        for h in std::mem::take(&mut *self.background.lock().unwrap_or_else(|p| p.into_inner())) {
            h.abort();
        }
    }
}

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

#[async_trait]
impl Store for SqlStore {
    fn backend(&self) -> BackendKind {
        self.core.kind
    }
    async fn ping(&self) -> Result<(), StoreError> {
        self.core.ping().await
    }
    fn write_path_healthy(&self) -> bool {
        self.writer.healthy()
    }
    fn write_stats(&self) -> WriteStatsSnapshot {
        self.writer.stats()
    }
    fn foreign_write_epoch(&self) -> Option<u64> {
        self.core.foreign_write_epoch()
    }

    async fn create_user(&self, user: &NewUser) -> Result<i64, StoreError> {
        self.core.create_user(user).await
    }
    async fn get_user(&self, id: i64) -> Result<Option<UserRow>, StoreError> {
        self.core.get_user(id).await
    }
    async fn get_user_by_name(&self, username: &str) -> Result<Option<UserRow>, StoreError> {
        self.core.get_user_by_name(username).await
    }
    async fn list_users(&self) -> Result<Vec<UserRow>, StoreError> {
        self.core.list_users().await
    }
    async fn delete_user(&self, id: i64) -> Result<bool, StoreError> {
        self.core.delete_user(id).await
    }
    async fn update_user(&self, id: i64, update: &UserUpdate) -> Result<bool, StoreError> {
        self.core.update_user(id, update).await
    }
    async fn set_login_state(
        &self,
        id: i64,
        failed_logins: i64,
        locked_until: Option<i64>,
    ) -> Result<bool, StoreError> {
        self.core
            .set_login_state(id, failed_logins, locked_until)
            .await
    }

    async fn create_token(&self, token: &NewApiToken) -> Result<i64, StoreError> {
        self.core.create_token(token).await
    }
    async fn get_token(&self, id: i64) -> Result<Option<ApiTokenRow>, StoreError> {
        Ok(self
            .core
            .fetch_tokens("WHERE id = ?", Some(id))
            .await?
            .into_iter()
            .next())
    }
    async fn list_tokens(&self, user_id: Option<i64>) -> Result<Vec<ApiTokenRow>, StoreError> {
        match user_id {
            Some(u) => self.core.fetch_tokens("WHERE user_id = ?", Some(u)).await,
            None => self.core.fetch_tokens("", None).await,
        }
    }
    async fn delete_token(&self, id: i64) -> Result<bool, StoreError> {
        self.core.delete_token(id).await
    }
    async fn load_unexpired_tokens(&self, now: i64) -> Result<Vec<ApiTokenRow>, StoreError> {
        self.core
            .fetch_tokens("WHERE expires_at > ?", Some(now))
            .await
    }
    async fn token_by_hash(&self, hash: &[u8; 32]) -> Result<Option<ApiTokenRow>, StoreError> {
        self.core.token_by_hash(hash).await
    }
    async fn prune_expired_tokens(&self, now: i64, limit: u32) -> Result<u64, StoreError> {
        self.core.prune_expired_tokens(now, limit).await
    }
    async fn auth_change_head(&self) -> Result<i64, StoreError> {
        self.core.auth_change_head().await
    }
    async fn auth_changes_since(
        &self,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AuthChange>, StoreError> {
        self.core.auth_changes_since(after, limit).await
    }
    async fn prune_auth_changes(&self, before: i64) -> Result<u64, StoreError> {
        self.core.prune_auth_changes(before).await
    }

    async fn get_cert(&self, ca: &str, serial: &str) -> Result<Option<CertRecord>, StoreError> {
        self.core.get_cert(ca, serial).await
    }
    async fn list_certs(&self, filter: &CertFilter) -> Result<Vec<CertRecord>, StoreError> {
        self.core.list_certs(filter).await
    }
    async fn cert_status(
        &self,
        ca: &str,
        serial: &str,
    ) -> Result<Option<CertStanding>, StoreError> {
        self.core.cert_status(ca, serial).await
    }
    async fn insert_bound_cert(&self, cert: &CertRecord, user_id: i64) -> Result<(), StoreError> {
        self.core.insert_bound_cert(cert, user_id).await
    }
    async fn revoke_cert(
        &self,
        ca: &str,
        serial: &str,
        reason: &str,
        at: i64,
    ) -> Result<Option<RevokeOutcome>, StoreError> {
        self.core.revoke_cert(ca, serial, reason, at).await
    }
    async fn revoke_by_principal(
        &self,
        principal_uid: &str,
        reason: &str,
        at: i64,
    ) -> Result<u64, StoreError> {
        self.core
            .revoke_by_principal(principal_uid, reason, at)
            .await
    }
    async fn list_revoked(
        &self,
        ca: &str,
        not_after_from: i64,
    ) -> Result<Vec<RevokedEntry>, StoreError> {
        self.core.list_revoked(ca, not_after_from).await
    }
    async fn count_active_agents(&self, principal_uid: &str, now: i64) -> Result<u64, StoreError> {
        self.core.count_active_agents(principal_uid, now).await
    }

    async fn submit(&self, record: IssuanceRecord) -> Result<(), WriteError> {
        let (ca, serial) = (record.cert.ca.clone(), record.cert.serial.clone());
        if self
            .window
            .admit(&ca, &serial, record.cert.not_after, now_unix())
            .is_err()
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
        if r.is_err() {
            self.window.forget(&ca, &serial);
        }
        r
    }
    fn cert_window(&self) -> &CertWindow {
        &self.window
    }
    fn nonce_ledger(&self) -> &NonceLedger {
        &self.ledger
    }
    async fn nonce_consumed(&self, nonce: &[u8; 32]) -> Result<bool, StoreError> {
        self.core.nonce_consumed(nonce).await
    }
    async fn prune_expired_nonces(&self, now: i64) -> Result<u64, StoreError> {
        self.core.prune_nonces(now).await
    }

    async fn shutdown(&self) {
        self.writer.shutdown().await;
        for h in std::mem::take(&mut *self.background.lock().unwrap_or_else(|p| p.into_inner())) {
            h.abort();
        }
        match &self.core.pools {
            sql::Pools::Sqlite {
                read,
                write,
                inline,
                ..
            } => {
                inline.close();
                read.close().await;
                write.close().await;
            }
            sql::Pools::Postgres(p) => p.close().await,
            sql::Pools::MySql(p) => p.close().await,
        }
    }
}

/// Current time in Unix seconds, the unit of every timestamp in the store.
pub fn unix_now() -> i64 {
    now_unix()
}
