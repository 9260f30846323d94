//! The recent-certificates window: an explicit memory budget
//! (`engine.max_certs`) on the certificates a node has issued and not yet
//! seen expire.
//!
//! When the budget is reached, certificates expired for longer than `grace`
//! are evicted first (oldest expiry first, counted in
//! `warrant_cert_window_evictions_total`); if that frees nothing, the
//! issuance is refused with 503 instead of letting memory grow.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The window is at its budget with live (or in-grace) certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("recent-certificates window full ({budget} certificates)")]
pub struct WindowFull {
    pub budget: usize,
}

struct Inner {
    /// `ca/serial` → time after which the entry may be evicted.
    entries: HashMap<Arc<str>, i64>,
    /// Min-heap by evictable-after time; entries removed from `entries` are
    /// skipped lazily when they surface.
    by_expiry: BinaryHeap<Reverse<(i64, Arc<str>)>>,
}

pub(crate) struct CertWindow {
    inner: Mutex<Inner>,
    budget: usize,
    grace: i64,
    evictions: AtomicU64,
}

fn key(ca: &str, serial: &str) -> Arc<str> {
    format!("{ca}/{serial}").into()
}

impl CertWindow {
    pub fn new(budget: usize, grace_secs: i64) -> Self {
        CertWindow {
            inner: Mutex::new(Inner {
                entries: HashMap::new(),
                by_expiry: BinaryHeap::new(),
            }),
            budget: budget.max(1),
            grace: grace_secs.max(0),
            evictions: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds an issued certificate, evicting long-expired ones if the budget
    /// is reached.
    pub fn admit(
        &self,
        ca: &str,
        serial: &str,
        not_after: i64,
        now: i64,
    ) -> Result<(), WindowFull> {
        let mut inner = self.lock();
        if inner.entries.len() >= self.budget {
            let evicted = Self::evict_expired(&mut inner, now);
            if evicted > 0 {
                self.evictions.fetch_add(evicted, Ordering::Relaxed);
                metrics::counter!(crate::metric_names::WINDOW_EVICTIONS).increment(evicted);
            }
            if inner.entries.len() >= self.budget {
                return Err(WindowFull {
                    budget: self.budget,
                });
            }
        }
        let k = key(ca, serial);
        let evictable_after = not_after.saturating_add(self.grace);
        if inner.entries.insert(k.clone(), evictable_after).is_none() {
            inner.by_expiry.push(Reverse((evictable_after, k)));
        }
        // Forgotten entries linger in the heap; rebuild when they dominate.
        if inner.by_expiry.len() > 2 * inner.entries.len() + 1024 {
            let Inner { entries, by_expiry } = &mut *inner;
            by_expiry.retain(|Reverse((t, k))| entries.get(k) == Some(t));
        }
        metrics::gauge!(crate::metric_names::WINDOW_SIZE).set(inner.entries.len() as f64);
        Ok(())
    }

    /// Removes a certificate whose issuance did not complete.
    pub fn forget(&self, ca: &str, serial: &str) {
        let mut inner = self.lock();
        inner.entries.remove(&*key(ca, serial));
    }

    #[cfg(test)]
    pub fn contains(&self, ca: &str, serial: &str) -> bool {
        self.lock().entries.contains_key(&*key(ca, serial))
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Certificates evicted because the budget was reached.
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    fn evict_expired(inner: &mut Inner, now: i64) -> u64 {
        let mut n = 0;
        while let Some(Reverse((t, _))) = inner.by_expiry.peek() {
            if *t >= now {
                break;
            }
            let Some(Reverse((t, k))) = inner.by_expiry.pop() else {
                break;
            };
            if inner.entries.get(&k) == Some(&t) {
                inner.entries.remove(&k);
                n += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_window_refuses_while_everything_is_live() {
        let w = CertWindow::new(2, 60);
        w.admit("ca", "01", 1000, 0).unwrap();
        w.admit("ca", "02", 1000, 0).unwrap();
        assert_eq!(
            w.admit("ca", "03", 1000, 500),
            Err(WindowFull { budget: 2 })
        );
        assert_eq!(w.evictions(), 0);
    }

    #[test]
    fn certificates_within_grace_are_not_evicted() {
        let w = CertWindow::new(1, 60);
        w.admit("ca", "01", 1000, 0).unwrap();
        // expired at 1000, but the grace lasts until 1060
        assert!(w.admit("ca", "02", 2000, 1050).is_err());
        assert!(w.contains("ca", "01"));
    }

    #[test]
    fn full_window_evicts_expired_plus_grace_oldest_first_and_counts() {
        let w = CertWindow::new(3, 10);
        w.admit("ca", "old1", 100, 0).unwrap();
        w.admit("ca", "old2", 200, 0).unwrap();
        w.admit("ca", "live", 5000, 0).unwrap();
        w.admit("ca", "new", 6000, 300).unwrap();
        assert_eq!(w.evictions(), 2);
        assert!(!w.contains("ca", "old1") && !w.contains("ca", "old2"));
        assert!(w.contains("ca", "live") && w.contains("ca", "new"));
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn forgotten_certificate_frees_its_slot() {
        let w = CertWindow::new(1, 0);
        w.admit("ca", "01", 1000, 0).unwrap();
        w.forget("ca", "01");
        w.admit("ca", "02", 1000, 0).unwrap();
        assert_eq!(w.len(), 1);
        assert_eq!(w.evictions(), 0);
    }
}
