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
    /// A deadlock or serialization failure: the same transaction may simply
    /// be run again.
    #[error("transaction conflict, retryable: {0}")]
    Retryable(String),
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
    /// The record carries neither a certificate nor a nonce: a caller's bug,
    /// refused before anything is queued (answer 500).
    #[error("issuance record carries neither a certificate nor a nonce")]
    EmptyRecord,
}

pub(crate) fn classify(err: sqlx::Error) -> StoreError {
    match &err {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => StoreError::Unavailable(err.to_string()),
        sqlx::Error::Database(db) if db.code().is_some_and(|c| is_unavailable_state(&c)) => {
            StoreError::Unavailable(err.to_string())
        }
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

/// SQLSTATEs that mean the database went away or refuses connections for
/// now, not that the statement was wrong: class 08 (connection exception,
/// e.g. MariaDB's "server shutdown in progress"), PostgreSQL's 57P01-57P03
/// (terminated by an administrator's or a crash shutdown, starting up) and
/// 53300 (too many connections), MariaDB's 70100 (connection killed). A
/// `pg_ctl stop -m fast` mid-query must be a 503, not a 500.
fn is_unavailable_state(sqlstate: &str) -> bool {
    sqlstate.starts_with("08")
        || matches!(sqlstate, "57P01" | "57P02" | "57P03" | "53300" | "70100")
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        classify(err)
    }
}

#[cfg(test)]
mod tests {
    use super::is_unavailable_state;

    #[test]
    fn shutdown_and_connection_states_are_unavailable() {
        for s in [
            "57P01", "57P02", "57P03", "08006", "08S01", "08004", "53300", "70100",
        ] {
            assert!(is_unavailable_state(s), "{s}");
        }
        // Unique violation, syntax error, deadlock: the statement's fault.
        for s in ["23505", "23000", "42601", "40P01", "40001"] {
            assert!(!is_unavailable_state(s), "{s}");
        }
    }
}
