//! Storage for Warrant over SQLite (embedded default, WAL), PostgreSQL and
//! MariaDB/MySQL, all through sqlx and one set of queries (SQLite's issuance
//! batch through rusqlite on sqlx's locked write connection: `sql::sqlite_batch`).
//!
//! [`Store::open`] connects and migrates the schema. A [`Store`] has one
//! part per concern:
//!
//! - [`Accounts`]: users, API tokens, login state and the auth change feed;
//! - [`Certificates`]: certificate reads, revocation and the CRL's entries;
//! - [`Issuance`]: the nonce ledger and the durable group-commit write path
//!   that every issued certificate and every redeemed DA nonce goes through.
//!
//! See the crate README for the contract the server relies on.

// Only `wal_vfs` (a VFS is C callbacks) and `sql::sqlite_batch` (rusqlite
// on sqlx's locked write handle, one call) may use `unsafe`; see their tests.
#![deny(unsafe_code)]

mod accounts;
pub mod archive;
pub mod audit;
mod certs;
mod dsn;
mod error;
#[cfg(feature = "fault-injection")]
pub mod faults;
#[cfg(not(feature = "fault-injection"))]
mod faults;
mod issuance;
pub mod log;
pub mod metric_names;
mod migrations;
mod nonce;
mod options;
mod retention;
mod sql;
mod standing;
mod storage_fault;
mod time;
mod types;
#[allow(unsafe_code)]
mod wal_vfs;
mod window;
mod writer;

use std::sync::Arc;

pub use accounts::Accounts;
pub use archive::{Archive, ArchivedAudit, ArchivedCert, ArchivedLeaf};
pub use audit::{
    Audit, AuditEntry, AuditEvent, AuditFilter, AuditRow, AuditVerifyError, ChainBreak, ChainHead,
    ChainSummary,
};
pub use certs::Certificates;
pub use dsn::{Dsn, parse_dsn};
pub use error::{StoreError, WriteError};
pub use issuance::{Issuance, MemoryUse};
pub use log::{
    CertLeaf, ConsistencyProof, InclusionProof, LeafEntry, LeafError, Log, LogBreak, LogError,
    LogRecord, TreeReport, TreeRow,
};
pub use nonce::{NonceError, NonceReservation};
pub use options::{Durability, EXPIRY_BUCKETS_AHEAD, StoreOptions, expiry_bucket};
pub use retention::{PruneOutcome, Retention, RetentionError};
pub use time::now_unix;
pub use types::*;
pub use window::WindowFull;
pub use writer::WriteStatsSnapshot;

use sql::{Pools, SqlCore};

/// An open database (see the crate comment).
pub struct Store {
    core: Arc<SqlCore>,
    accounts: Accounts,
    certs: Certificates,
    issuance: Issuance,
    retention: Retention,
    audit: Audit,
    log: Log,
}

impl Store {
    /// Opens (and migrates) the database named by `dsn`: `postgres://…`,
    /// `mysql://…`, `mariadb://…`, `sqlite://path`, `sqlite:path` or a path.
    /// Must be called inside a Tokio runtime (it spawns the committers).
    pub async fn open(dsn: &str, opts: StoreOptions) -> Result<Store, StoreError> {
        let parsed = dsn::parse_dsn(dsn)?;
        let core = Arc::new(SqlCore::connect(&parsed, &opts).await?);
        Ok(Store {
            accounts: Accounts { core: core.clone() },
            certs: Certificates {
                core: core.clone(),
                standings: Default::default(),
            },
            issuance: Issuance::start(core.clone(), &opts).await,
            retention: Retention {
                core: core.clone(),
                windows: Default::default(),
            },
            audit: Audit { core: core.clone() },
            log: Log { core: core.clone() },
            core,
        })
    }

    /// Test hook: creates the schema as release `version` of the
    /// migrations left it, and closes; a later [`open`](Self::open)
    /// migrates it the rest of the way.
    #[cfg(feature = "fault-injection")]
    pub async fn create_schema_version(dsn: &str, version: i64) -> Result<(), StoreError> {
        let parsed = dsn::parse_dsn(dsn)?;
        let core = SqlCore::connect_up_to(&parsed, &StoreOptions::default(), version).await?;
        match &core.pools {
            Pools::Sqlite { read, write } => {
                read.close().await;
                write.close().await;
            }
            Pools::Postgres(p) => p.close().await,
            Pools::MySql(p) => p.close().await,
        }
        Ok(())
    }

    pub fn backend(&self) -> BackendKind {
        self.core.kind
    }

    /// A round trip to the database (for `/readyz`).
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.core.ping().await
    }

    pub fn accounts(&self) -> &Accounts {
        &self.accounts
    }

    pub fn certs(&self) -> &Certificates {
        &self.certs
    }

    pub fn issuance(&self) -> &Issuance {
        &self.issuance
    }

    pub fn retention(&self) -> &Retention {
        &self.retention
    }

    pub fn audit(&self) -> &Audit {
        &self.audit
    }

    /// The transparency log: trees, proofs, verification.
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// Stops accepting writes, commits everything queued, stops background
    /// tasks and closes the pools. Later `submit`s get
    /// [`WriteError::ShuttingDown`].
    pub async fn shutdown(&self) {
        self.issuance.shutdown().await;
        match &self.core.pools {
            Pools::Sqlite { read, write } => {
                read.close().await;
                write.close().await;
            }
            Pools::Postgres(p) => p.close().await,
            Pools::MySql(p) => p.close().await,
        }
    }
}
