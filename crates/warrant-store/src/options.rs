use std::time::Duration;

/// When [`crate::Store::submit`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// After the transaction holding the record committed (the default).
    #[default]
    Durable,
    /// As soon as the record is queued; it is written within about
    /// `max_latency`. **Lossy**: a crash loses acknowledged records, and a
    /// nonce replayed across nodes is only logged, not refused. Exists to
    /// compare with varwof-core's record buffer.
    Buffered,
}

impl Durability {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "durable" => Some(Durability::Durable),
            "buffered" => Some(Durability::Buffered),
            _ => None,
        }
    }

    /// The configuration spelling, the inverse of [`parse`](Self::parse).
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Durable => "durable",
            Durability::Buffered => "buffered",
        }
    }
}

/// How many expiry partitions ahead of now exist (PostgreSQL): a certificate
/// living at most this many bucket widths is short-lived.
pub const EXPIRY_BUCKETS_AHEAD: i64 = 4;

/// The expiry partition (its start, Unix seconds) a certificate's row goes
/// to on PostgreSQL: the window of `bucket_secs` its `not_after` falls in
/// when it lives at most [`EXPIRY_BUCKETS_AHEAD`] windows, else 0 (the
/// long-lived partition). Never 0 for a short-lived one.
pub fn expiry_bucket(not_after: i64, created_at: i64, bucket_secs: i64) -> i64 {
    let width = bucket_secs.max(1);
    if not_after.saturating_sub(created_at) > width.saturating_mul(EXPIRY_BUCKETS_AHEAD) {
        return 0;
    }
    (not_after - not_after.rem_euclid(width)).max(1)
}

/// Tunables of the store; defaults follow the spec (`record_buffer.*`,
/// `engine.*`).
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub durability: Durability,
    /// Most records in one commit (`record_buffer.threshold`).
    pub threshold: usize,
    /// Longest a queued record waits before its batch is written
    /// (`record_buffer.max_latency`). A committer waits for more records
    /// only as `max_gather` allows; this bounds the wait in buffered
    /// mode and is the retry pace after a failed buffered commit.
    pub max_latency: Duration,
    /// Longest a committer that took only a few records yields to the
    /// tasks ready to run before it commits, collecting what they submit
    /// (`record_buffer.max_gather`; zero: commit at once). Every commit has
    /// a fixed cost (transaction, WAL frames, fsync, hand-offs) that a batch
    /// of a few records pays per record; on a server busy signing, the
    /// records of the requests in progress arrive within one pass of the
    /// scheduler. Gathering stops once the batch holds 16 records, or at
    /// the first pass that brings nothing, so an idle runtime adds no wait.
    pub max_gather: Duration,
    /// Records queued or being committed at most (`record_buffer.max_pending`);
    /// beyond it `submit` answers [`crate::WriteError::Overloaded`] at once.
    pub max_pending: usize,
    /// Budget of the in-memory nonce set (`engine.max_da_nonces`).
    pub max_da_nonces: usize,
    /// Budget of the recent-certificates window (`engine.max_certs`).
    pub max_certs: usize,
    /// How long past `not_after` a certificate stays in the window.
    pub cert_grace: Duration,
    /// Concurrent committer tasks on PostgreSQL/MySQL (SQLite always has
    /// one): while one batch commits the next one can already be written.
    pub committers: usize,
    /// Connections in the pool (SQLite: readers; it has one writer).
    pub max_connections: u32,
    /// Establishing a connection.
    pub connect_timeout: Duration,
    /// Waiting for a pooled connection.
    pub acquire_timeout: Duration,
    /// Any one statement or commit; past it the caller gets `Unavailable`.
    pub statement_timeout: Duration,
    /// How often expired nonce rows are deleted from the database.
    pub nonce_prune_interval: Duration,
    /// SQLite: WAL pages after which the committing connection copies the
    /// WAL back into the database file (SQLite's `wal_autocheckpoint`).
    pub wal_checkpoint_pages: u32,
    /// PostgreSQL: the width of one expiry partition of `warrant_certs`. A
    /// certificate that expires within [`EXPIRY_BUCKETS_AHEAD`] widths of its
    /// creation lands in the partition of its expiry window, which retention
    /// drops whole; longer-lived ones share one partition pruned by deletes.
    pub expiry_bucket: Duration,
    /// This node's name in the audit log: committer `i` of an open appends
    /// to chain `<audit_node>.<run>.<i>` (`run` random per open, so even two
    /// processes given one name never share a chain). The server keeps one
    /// per data dir; `None`: a random one.
    pub audit_node: Option<String>,
    /// Whether issuances and events become leaves of the transparency log
    /// (`log`). Off only to measure its cost side by side.
    pub log: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            durability: Durability::Durable,
            threshold: 1000,
            max_latency: Duration::from_millis(100),
            max_gather: Duration::from_millis(2),
            max_pending: 20_000,
            max_da_nonces: 1_000_000,
            max_certs: 1_000_000,
            cert_grace: Duration::from_secs(300),
            committers: 4,
            max_connections: 16,
            connect_timeout: Duration::from_secs(5),
            acquire_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(10),
            nonce_prune_interval: Duration::from_secs(60),
            wal_checkpoint_pages: 16_000,
            expiry_bucket: Duration::from_secs(86_400),
            audit_node: None,
            log: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_lived_rows_go_to_their_expiry_window_and_long_lived_to_zero() {
        // One day wide: an agent certificate of one hour expiring at
        // 2026-12-04T12:00Z lands in that day's window.
        let day = 86_400;
        let noon = 1_796_385_600;
        assert_eq!(expiry_bucket(noon, noon - 3600, day), noon - noon % day);
        // Exactly four windows of life is still short-lived; a second more is not.
        assert_ne!(expiry_bucket(noon, noon - 4 * day, day), 0);
        assert_eq!(expiry_bucket(noon, noon - 4 * day - 1, day), 0);
        // Sixty seconds wide, as a compressed soak runs it.
        assert_eq!(expiry_bucket(125, 65, 60), 120);
        // Never 0 (the long-lived partition) for a short-lived row.
        assert_eq!(expiry_bucket(10, 0, 60), 1);
        assert_eq!(expiry_bucket(noon, noon, 0), noon);
    }
}
