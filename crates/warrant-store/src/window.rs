//! The recent-certificates window: an explicit budget
//! (`engine.max_certs`) on the certificates a node has issued and not yet
//! seen expire.
//!
//! When the budget is reached, certificates expired for longer than `grace`
//! are evicted first (oldest expiry first, counted in
//! `warrant_cert_window_evictions_total`); if that frees nothing, the
//! issuance is refused with 503.
//!
//! The window counts certificates per second of the time they become
//! evictable (`not_after + grace`) rather than keeping one entry per
//! certificate. Why: nothing asks which certificates it holds, only how many
//! and when they may go, and per-certificate entries made the budget cost
//! memory in proportion to it, and made its upkeep a pause on the issuance
//! path under the one lock (rehashing every key as the table grew, removing
//! every expired entry at once at the budget). With counts, an admission is
//! one map update and an eviction drops whole seconds.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The window is at its budget with live (or in-grace) certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("recent-certificates window full ({budget} certificates)")]
pub struct WindowFull {
    pub budget: usize,
}

/// Invariant: `len` is the sum of `by_second`'s counts, and no count is 0.
#[derive(Default)]
struct Inner {
    /// Evictable-after time (Unix seconds) → certificates admitted with it.
    by_second: BTreeMap<i64, u64>,
    len: u64,
}

pub(crate) struct CertWindow {
    inner: Mutex<Inner>,
    budget: usize,
    grace: i64,
    evictions: AtomicU64,
}

impl CertWindow {
    pub fn new(budget: usize, grace_secs: i64) -> Self {
        CertWindow {
            inner: Mutex::new(Inner::default()),
            budget: budget.max(1),
            grace: grace_secs.max(0),
            evictions: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn evictable_after(&self, not_after: i64) -> i64 {
        not_after.saturating_add(self.grace)
    }

    /// Counts an issued certificate, evicting long-expired ones if the
    /// budget is reached.
    pub fn admit(&self, not_after: i64, now: i64) -> Result<(), WindowFull> {
        let mut inner = self.lock();
        if inner.len >= self.budget as u64 {
            let evicted = Self::evict_expired(&mut inner, now);
            if evicted > 0 {
                self.evictions.fetch_add(evicted, Ordering::Relaxed);
                metrics::counter!(crate::metric_names::WINDOW_EVICTIONS).increment(evicted);
            }
            if inner.len >= self.budget as u64 {
                return Err(WindowFull {
                    budget: self.budget,
                });
            }
        }
        *inner
            .by_second
            .entry(self.evictable_after(not_after))
            .or_insert(0) += 1;
        inner.len += 1;
        metrics::gauge!(crate::metric_names::WINDOW_SIZE).set(inner.len as f64);
        Ok(())
    }

    /// Gives back the place of a certificate (admitted with `not_after`)
    /// whose issuance did not complete (nothing if its second was evicted
    /// meanwhile).
    pub fn forget(&self, not_after: i64) {
        let mut inner = self.lock();
        let second = self.evictable_after(not_after);
        let Some(count) = inner.by_second.get_mut(&second) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            inner.by_second.remove(&second);
        }
        inner.len -= 1;
    }

    pub fn len(&self) -> usize {
        self.lock().len as usize
    }

    /// Certificates evicted because the budget was reached.
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// Drops every second before `now`; returns the certificates they held.
    fn evict_expired(inner: &mut Inner, now: i64) -> u64 {
        let kept = inner.by_second.split_off(&now);
        let evicted: u64 = std::mem::replace(&mut inner.by_second, kept).values().sum();
        inner.len -= evicted;
        evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_window_refuses_while_everything_is_live() {
        let w = CertWindow::new(2, 60);
        w.admit(1000, 0).unwrap();
        w.admit(1000, 0).unwrap();
        assert_eq!(w.admit(1000, 500), Err(WindowFull { budget: 2 }));
        assert_eq!(w.evictions(), 0);
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn certificates_within_grace_are_not_evicted() {
        let w = CertWindow::new(1, 60);
        w.admit(1000, 0).unwrap();
        // expired at 1000, but the grace lasts until 1060
        assert!(w.admit(2000, 1050).is_err());
        assert_eq!(w.len(), 1);
        // from 1060 on it may go
        w.admit(2000, 1061).unwrap();
        assert_eq!((w.len(), w.evictions()), (1, 1));
    }

    #[test]
    fn full_window_evicts_expired_plus_grace_oldest_first_and_counts() {
        let w = CertWindow::new(3, 10);
        w.admit(100, 0).unwrap();
        w.admit(200, 0).unwrap();
        w.admit(5000, 0).unwrap();
        w.admit(6000, 300).unwrap();
        assert_eq!(w.evictions(), 2);
        assert_eq!(w.len(), 2);
        // Only the two live ones are left: the window is full at 3 again
        // after one more, and nothing can be evicted before 5010.
        w.admit(6000, 300).unwrap();
        assert!(w.admit(6000, 5000).is_err());
        assert_eq!(w.evictions(), 2);
    }

    #[test]
    fn eviction_at_the_budget_takes_only_the_seconds_before_now() {
        let w = CertWindow::new(10, 0);
        for not_after in [10, 10, 11, 12, 12, 12, 13, 20, 20, 30] {
            w.admit(not_after, 0).unwrap();
        }
        w.admit(40, 12).unwrap();
        // 10, 10 and 11 went (before 12); the three at 12 stay.
        assert_eq!((w.len(), w.evictions()), (8, 3));
    }

    #[test]
    fn forgotten_certificate_frees_its_slot() {
        let w = CertWindow::new(1, 0);
        w.admit(1000, 0).unwrap();
        w.forget(1000);
        w.admit(1000, 0).unwrap();
        assert_eq!(w.len(), 1);
        assert_eq!(w.evictions(), 0);
    }

    #[test]
    fn forgetting_an_evicted_certificate_changes_nothing() {
        let w = CertWindow::new(1, 0);
        w.admit(100, 0).unwrap();
        w.admit(5000, 200).unwrap();
        assert_eq!((w.len(), w.evictions()), (1, 1));
        // The first one's issuance fails only now: its second is gone.
        w.forget(100);
        assert_eq!(w.len(), 1);
        assert!(w.admit(5000, 300).is_err());
    }
}
