//! SQLite: the standings (status, principal, bound user) of certificates
//! read recently, kept while the foreign-write epoch holds.
//!
//! A certificate's standing changes only through an administrative write
//! (revocation) or another process; both move the epoch
//! (`SqlCore::foreign_write_epoch`), and a new epoch empties the cache. The
//! issuance write path only inserts rows, so it cannot change a standing
//! that was read; an unknown certificate is never cached, since a batch may
//! insert it next. A revocation is therefore seen by every read that starts
//! after the revocation returned.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::types::CertStanding;

/// Entries held at most; a full cache is emptied (the next reads refill it).
const CAPACITY: usize = 65_536;

#[derive(Default)]
pub(crate) struct StandingCache {
    inner: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    epoch: u64,
    by_cert: HashMap<(String, String), CertStanding>,
}

impl StandingCache {
    /// The standing cached for `ca`/`serial` under `epoch`.
    pub(crate) fn get(&self, epoch: u64, ca: &str, serial: &str) -> Option<CertStanding> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.epoch != epoch {
            return None;
        }
        inner
            .by_cert
            .get(&(ca.to_owned(), serial.to_owned()))
            .cloned()
    }

    /// Keeps a standing read from the database. `epoch` must have been read
    /// before the read started: a standing read under an older epoch than
    /// the cache's is dropped, and a newer epoch empties the cache first.
    pub(crate) fn put(&self, epoch: u64, ca: &str, serial: &str, standing: &CertStanding) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if epoch < inner.epoch {
            return;
        }
        if epoch > inner.epoch || inner.by_cert.len() >= CAPACITY {
            inner.by_cert.clear();
            inner.epoch = epoch;
        }
        inner
            .by_cert
            .insert((ca.to_owned(), serial.to_owned()), standing.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::CertStatus;

    fn valid() -> CertStanding {
        CertStanding {
            status: CertStatus::Valid,
            principal_uid: Some("corp:alice".into()),
            bound_user_id: None,
        }
    }

    #[test]
    fn a_standing_is_served_only_under_the_epoch_it_was_read_in() {
        let c = StandingCache::default();
        c.put(3, "people", "01", &valid());
        assert_eq!(c.get(3, "people", "01"), Some(valid()));
        assert_eq!(c.get(4, "people", "01"), None, "a foreign write happened");
        assert_eq!(c.get(3, "people", "02"), None);
    }

    #[test]
    fn a_read_from_before_the_last_foreign_write_is_not_kept() {
        let c = StandingCache::default();
        c.put(5, "people", "01", &valid());
        c.put(4, "people", "02", &valid());
        assert_eq!(c.get(5, "people", "02"), None);
        // A newer epoch empties the cache before keeping its own reads.
        c.put(6, "people", "03", &valid());
        assert_eq!(c.get(6, "people", "01"), None);
        assert_eq!(c.get(6, "people", "03"), Some(valid()));
    }
}
