//! The revocation state a decision reads (admit.md §2 step 3): per source
//! (one issuing CA's CRL, say), the serials it lists as revoked and the time
//! that list was last known complete. Whoever keeps it fresh replaces a
//! source's list after every successful refresh, with or without news; when
//! refreshes stop arriving, decisions fail closed once any source is older
//! than the configured staleness.
//!
//! A source's list is replaced, not merged: a CRL drops a serial once its
//! certificate has expired, and so does this state, which therefore stays
//! as small as the sources' lists.

use std::collections::{HashMap, HashSet};

use crate::reason::Reason;

#[derive(Debug, Clone, Default)]
struct SourceList {
    /// Upper-case hex serials, as `warrant_ca::PrincipalCert::serial_hex`
    /// writes them.
    revoked: HashSet<String>,
    /// Unix seconds at which the list was known complete.
    complete_as_of: i64,
}

#[derive(Debug, Clone, Default)]
pub struct RevocationState {
    sources: HashMap<String, SourceList>,
}

impl RevocationState {
    /// No source yet: nothing but public routes is admitted until the first
    /// list arrives.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces `source`'s list with `serials` (any case), complete at
    /// `as_of` (unix seconds). A list older than the one held is ignored, so
    /// a slow refresh cannot roll a newer one back.
    pub fn replace<I, S>(&mut self, source: &str, serials: I, as_of: i64)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        if self
            .sources
            .get(source)
            .is_some_and(|l| l.complete_as_of > as_of)
        {
            return;
        }
        let revoked = serials
            .into_iter()
            .map(|s| s.as_ref().to_ascii_uppercase())
            .collect();
        self.sources.insert(
            source.to_string(),
            SourceList {
                revoked,
                complete_as_of: as_of,
            },
        );
    }

    /// The oldest source's completeness time: what staleness is judged by.
    pub fn complete_as_of(&self) -> Option<i64> {
        self.sources.values().map(|l| l.complete_as_of).min()
    }

    /// Revoked serials over all sources.
    pub fn len(&self) -> usize {
        self.sources.values().map(|l| l.revoked.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the state may be used at `now`: at least one source, each
    /// complete at most `max_staleness_secs` ago (a time in the future, a
    /// clock stepped back, counts as fresh).
    pub fn check_fresh(&self, now: i64, max_staleness_secs: i64) -> Result<(), Reason> {
        match self.complete_as_of() {
            Some(t) if now.saturating_sub(t) <= max_staleness_secs => Ok(()),
            _ => Err(Reason::RevocationStale),
        }
    }

    /// Whether any source lists `serial_hex` (upper-case).
    pub fn is_revoked(&self, serial_hex: &str) -> bool {
        self.sources
            .values()
            .any(|l| l.revoked.contains(serial_hex))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_everything_before_the_first_list() {
        let s = RevocationState::new();
        assert_eq!(s.check_fresh(1_000, 3_600), Err(Reason::RevocationStale));
    }

    #[test]
    fn rejects_a_state_whose_oldest_source_is_stale() {
        let mut s = RevocationState::new();
        s.replace("people", ["01"], 1_000);
        assert_eq!(s.check_fresh(1_010, 10), Ok(()));
        assert_eq!(s.check_fresh(1_011, 10), Err(Reason::RevocationStale));
        s.replace("people", ["01"], 1_011);
        s.replace("robots", Vec::<String>::new(), 1_005);
        assert_eq!(s.check_fresh(1_015, 10), Ok(()));
        assert_eq!(s.check_fresh(1_016, 10), Err(Reason::RevocationStale));
    }

    #[test]
    fn a_list_replaces_the_last_one_and_an_older_list_is_ignored() {
        let mut s = RevocationState::new();
        s.replace("people", ["0a1b", "0c"], 1_000);
        assert!(s.is_revoked("0A1B"));
        s.replace("people", ["0C"], 1_001);
        assert!(!s.is_revoked("0A1B"), "expired off the CRL, gone here too");
        assert!(s.is_revoked("0C"));
        s.replace("people", ["0A1B"], 999);
        assert!(!s.is_revoked("0A1B"));
        assert_eq!(s.len(), 1);
        assert_eq!(s.complete_as_of(), Some(1_001));
    }
}
