//! The retention task (`[retention]`): every `retention.interval`, the
//! certificates whose `notAfter` is older than `retention.expired_grace`
//! leave the database (`warrant_store::Retention`), appended first to the
//! data dir's `archive/` when `retention.archive = "file"`; so do audit rows
//! older than `retention.audit_keep`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use warrant_store::{Archive, Store};

use crate::config::RetentionConfig;

/// The archive directory inside a data dir.
pub const ARCHIVE_DIR: &str = "archive";

/// PostgreSQL's expiry partition width for a grace: one day in production;
/// a compressed run (a grace under a day) gets windows as wide as the grace
/// (at least a second), so its partitions are dropped within the run too.
pub fn expiry_bucket_for(grace: Duration) -> Duration {
    grace.clamp(Duration::from_secs(1), Duration::from_secs(86_400))
}

/// Opens the archive when the config asks for one.
pub fn open_archive(
    data_dir: &Path,
    cfg: &RetentionConfig,
) -> std::io::Result<Option<Arc<Archive>>> {
    if cfg.archive != "file" {
        return Ok(None);
    }
    Archive::open(&data_dir.join(ARCHIVE_DIR)).map(|a| Some(Arc::new(a)))
}

/// Starts the pass loop until `stop`.
pub fn spawn(
    store: Arc<Store>,
    archive: Option<Arc<Archive>>,
    cfg: &RetentionConfig,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let grace = i64::try_from(cfg.expired_grace.0.as_secs()).unwrap_or(i64::MAX);
    let batch = usize::try_from(cfg.batch_size).unwrap_or(usize::MAX);
    let audit_keep = i64::try_from(cfg.audit_keep.0.as_secs()).unwrap_or(i64::MAX);
    crate::periodic::every(cfg.interval.0, stop, move || {
        let store = store.clone();
        let archive = archive.clone();
        async move {
            let now = crate::clock::unix_now();
            match store
                .retention()
                .prune(now, grace, batch, archive.as_ref())
                .await
            {
                Ok(outcome) => {
                    crate::metrics::retention_pass(&outcome);
                    if outcome.rows > 0 {
                        tracing::debug!(?outcome, "retention pass");
                    }
                }
                Err(error) => {
                    crate::metrics::retention_failed();
                    tracing::warn!(%error, "retention pass failed; the next pass tries again");
                }
            }
            let before_ms = now.saturating_sub(audit_keep).saturating_mul(1000);
            match store
                .retention()
                .prune_log_events(before_ms, batch, archive.as_ref())
                .await
            {
                Ok((deleted, _archived)) => crate::metrics::audit_pruned(deleted),
                Err(error) => {
                    crate::metrics::retention_failed();
                    tracing::warn!(%error, "log retention pass failed; the next pass tries again");
                }
            }
            match store
                .retention()
                .prune_audit(before_ms, batch, archive.as_ref())
                .await
            {
                Ok((deleted, _archived)) => crate::metrics::audit_pruned(deleted),
                Err(error) => {
                    crate::metrics::retention_failed();
                    tracing::warn!(%error, "audit retention pass failed; the next pass tries again");
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_a_day_wide_unless_the_grace_is_shorter() {
        let s = Duration::from_secs;
        assert_eq!(expiry_bucket_for(s(86_400)), s(86_400));
        assert_eq!(expiry_bucket_for(s(30 * 86_400)), s(86_400));
        assert_eq!(expiry_bucket_for(s(600)), s(600));
        assert_eq!(expiry_bucket_for(s(30)), s(30));
        assert_eq!(expiry_bucket_for(s(0)), s(1));
    }
}
