use std::time::Duration;

/// Failure of a read or an administrative write.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The DSN could not be understood; names what was wrong.
    #[error("invalid database DSN: {0}")]
    InvalidDsn(String),
    /// A unique constraint refused the row (e.g. a duplicate username);
    /// the string names the constraint's subject.
    #[error("{0} already exists")]
    Conflict(&'static str),
    /// A foreign key is missing (e.g. a token for an unknown user).
    #[error("{0} does not exist")]
    MissingReference(&'static str),
    /// The database could not be reached or did not answer in time.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// A stored value could not be decoded (e.g. an unknown role); points at
    /// a corrupt row or a schema mismatch, never at client input.
    #[error("corrupt row in {table}: {detail}")]
    Corrupt { table: &'static str, detail: String },
    /// The schema in the database is newer than this build understands.
    #[error("database schema version {found} is newer than this build ({supported})")]
    SchemaTooNew { found: i64, supported: i64 },
    #[error("database error: {0}")]
    Database(String),
}

/// Failure of [`crate::Store::submit`]; each variant maps to one HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// The write queue is full (`max_pending`): answer 503 with `Retry-After`.
    #[error("write pipeline full, retry after {retry_after:?}")]
    Overloaded { retry_after: Duration },
    /// The nonce was already consumed (in memory, or by the DB's unique
    /// constraint at commit time). The certificate was not stored and must
    /// not be returned: answer 403 `api.da_nonce_replayed`.
    #[error("delegation nonce already consumed")]
    NonceReplayed,
    /// The batch holding this record could not be committed: answer 503.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The store is shutting down and accepts no new records.
    #[error("store is shutting down")]
    ShuttingDown,
}

pub(crate) fn classify(err: sqlx::Error) -> StoreError {
    match &err {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => StoreError::Unavailable(err.to_string()),
        sqlx::Error::Database(db) => {
            if db.is_unique_violation() {
                StoreError::Conflict("row")
            } else if db.is_foreign_key_violation() {
                StoreError::MissingReference("referenced row")
            } else {
                StoreError::Database(err.to_string())
            }
        }
        _ => StoreError::Database(err.to_string()),
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        classify(err)
    }
}
