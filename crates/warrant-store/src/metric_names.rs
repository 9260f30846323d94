//! Names of the metrics the store records. The server exports them (buckets,
//! help texts, scrape-time gauges) under the same constants, so the names
//! live in one place.

pub const WRITE_QUEUE_DEPTH: &str = "warrant_write_queue_depth";
pub const COMMIT_BATCH_SIZE: &str = "warrant_commit_batch_size";
pub const COMMIT_DURATION: &str = "warrant_commit_duration_seconds";
pub const DURABLE_WAIT: &str = "warrant_durable_wait_seconds";
pub const COMMITTED_ROWS: &str = "warrant_committed_rows_total";
pub const COMMITS: &str = "warrant_commits_total";
pub const COMMIT_FAILURES: &str = "warrant_commit_failures_total";
pub const WRITE_REJECTED: &str = "warrant_write_rejected_total";
pub const NONCE_SET_SIZE: &str = "warrant_da_nonce_set_size";
pub const WINDOW_SIZE: &str = "warrant_cert_window_size";
pub const WINDOW_EVICTIONS: &str = "warrant_cert_window_evictions_total";
