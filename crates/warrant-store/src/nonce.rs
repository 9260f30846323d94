//! In-memory ledger of consumed delegation nonces: the fast reject before
//! signing. The database's unique constraint stays the authority (restarts,
//! several nodes); this set only saves the signing work for obvious replays.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

const SHARDS: usize = 32;

/// Why a nonce could not be consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NonceError {
    /// Seen before and still within its lifetime.
    #[error("delegation nonce already consumed")]
    Replayed,
    /// The budget (`engine.max_da_nonces`) is spent on unexpired nonces;
    /// the server answers 503 rather than forgetting a live nonce.
    #[error("nonce ledger full")]
    Full,
}

struct Shard {
    map: HashMap<[u8; 32], i64>,
    /// Smallest expiry in `map` (a lower bound): pruning a full shard is
    /// skipped while nothing can have expired, so a shard filled with live
    /// nonces costs O(1) per refused request, not a scan.
    min_expiry: i64,
}

/// A sharded TTL set of nonces with a total budget.
///
/// Shards are picked with a per-process random hash, so clients (who choose
/// nonces) cannot pile theirs into one shard.
pub(crate) struct NonceLedger {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    per_shard_budget: usize,
    len: AtomicUsize,
}

impl NonceLedger {
    pub fn new(max_nonces: usize) -> Self {
        let per_shard_budget = max_nonces.div_ceil(SHARDS).max(1);
        let shards = (0..SHARDS)
            .map(|_| {
                Mutex::new(Shard {
                    map: HashMap::new(),
                    min_expiry: i64::MAX,
                })
            })
            .collect();
        NonceLedger {
            shards,
            hasher: RandomState::new(),
            per_shard_budget,
            len: AtomicUsize::new(0),
        }
    }

    fn shard(&self, nonce: &[u8; 32]) -> &Mutex<Shard> {
        let i = (self.hasher.hash_one(nonce) as usize) % SHARDS;
        &self.shards[i]
    }

    fn lock<'a>(m: &'a Mutex<Shard>) -> std::sync::MutexGuard<'a, Shard> {
        // A panic while holding the lock leaves a valid map; keep using it.
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Consumes `nonce` until `expires_at` (Unix seconds).
    pub fn try_consume(
        &self,
        nonce: &[u8; 32],
        expires_at: i64,
        now: i64,
    ) -> Result<(), NonceError> {
        let mut s = Self::lock(self.shard(nonce));
        if let Some(&exp) = s.map.get(nonce)
            && exp >= now
        {
            return Err(NonceError::Replayed);
        }
        if s.map.len() >= self.per_shard_budget && !s.map.contains_key(nonce) {
            if s.min_expiry < now {
                let before = s.map.len();
                Self::prune_shard(&mut s, now);
                self.len.fetch_sub(before - s.map.len(), Ordering::Relaxed);
            }
            if s.map.len() >= self.per_shard_budget {
                return Err(NonceError::Full);
            }
        }
        if s.map.insert(*nonce, expires_at).is_none() {
            self.len.fetch_add(1, Ordering::Relaxed);
        }
        s.min_expiry = s.min_expiry.min(expires_at);
        Ok(())
    }

    /// Consumes `nonce` like [`try_consume`](Self::try_consume) and returns
    /// the reservation that gives it back when dropped, unless
    /// [`NonceReservation::keep`] was called: every path that does not end
    /// in a commit (a refusal, an error, a request dropped on a client's
    /// disconnect) releases it without code of its own.
    pub fn reserve(
        &self,
        nonce: &[u8; 32],
        expires_at: i64,
        now: i64,
    ) -> Result<NonceReservation<'_>, NonceError> {
        self.try_consume(nonce, expires_at, now)?;
        Ok(NonceReservation {
            ledger: self,
            nonce: *nonce,
            kept: false,
        })
    }

    /// Forgets a nonce whose issuance did not happen (the write failed), so
    /// the client may retry with the same delegation.
    pub fn release(&self, nonce: &[u8; 32]) {
        let mut s = Self::lock(self.shard(nonce));
        if s.map.remove(nonce).is_some() {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
    }

    pub fn contains(&self, nonce: &[u8; 32], now: i64) -> bool {
        let s = Self::lock(self.shard(nonce));
        s.map.get(nonce).is_some_and(|&e| e >= now)
    }

    /// Drops expired nonces everywhere; returns how many.
    pub fn prune(&self, now: i64) -> usize {
        let mut removed = 0;
        for m in self.shards.iter() {
            let mut s = Self::lock(m);
            if s.min_expiry < now {
                let before = s.map.len();
                Self::prune_shard(&mut s, now);
                removed += before - s.map.len();
            }
        }
        self.len.fetch_sub(removed, Ordering::Relaxed);
        metrics::gauge!(crate::metric_names::NONCE_SET_SIZE).set(self.len() as f64);
        removed
    }

    fn prune_shard(s: &mut Shard, now: i64) {
        s.map.retain(|_, e| *e >= now);
        s.min_expiry = s.map.values().copied().min().unwrap_or(i64::MAX);
    }

    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.per_shard_budget * SHARDS
    }
}

/// A nonce taken from the ledger for one issuance. Dropping it releases the
/// nonce; [`hand_over`](Self::hand_over) ends the reservation without
/// releasing: the issuance's record now carries the nonce to
/// [`Issuance::submit`](crate::Issuance::submit), which keeps it consumed once the
/// database holds it and releases it on any other outcome, a dropped request
/// included.
#[must_use = "dropping a reservation releases the nonce at once"]
pub struct NonceReservation<'a> {
    ledger: &'a NonceLedger,
    nonce: [u8; 32],
    kept: bool,
}

impl NonceReservation<'_> {
    pub fn nonce(&self) -> &[u8; 32] {
        &self.nonce
    }

    /// A reservation for a nonce already consumed in `ledger`.
    pub(crate) fn adopt(ledger: &NonceLedger, nonce: [u8; 32]) -> NonceReservation<'_> {
        NonceReservation {
            ledger,
            nonce,
            kept: false,
        }
    }

    /// Ends the reservation and leaves the nonce consumed.
    pub fn hand_over(mut self) {
        self.kept = true;
    }
}

impl Drop for NonceReservation<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.ledger.release(&self.nonce);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(i: u32) -> [u8; 32] {
        let mut a = [0u8; 32];
        a[..4].copy_from_slice(&i.to_be_bytes());
        a
    }

    #[test]
    fn refuses_a_live_nonce_twice() {
        let l = NonceLedger::new(100);
        assert_eq!(l.try_consume(&n(1), 200, 100), Ok(()));
        assert_eq!(l.try_consume(&n(1), 200, 150), Err(NonceError::Replayed));
        assert_eq!(l.len(), 1);
    }

    #[test]
    fn accepts_a_nonce_again_after_it_expired() {
        let l = NonceLedger::new(100);
        l.try_consume(&n(1), 200, 100).unwrap();
        assert_eq!(l.try_consume(&n(1), 400, 201), Ok(()));
        assert_eq!(l.len(), 1);
    }

    #[test]
    fn released_nonce_can_be_consumed_again() {
        let l = NonceLedger::new(100);
        l.try_consume(&n(1), 200, 100).unwrap();
        l.release(&n(1));
        assert!(l.is_empty());
        assert_eq!(l.try_consume(&n(1), 200, 100), Ok(()));
    }

    #[test]
    fn a_dropped_reservation_releases_its_nonce() {
        let l = NonceLedger::new(100);
        {
            let r = l.reserve(&n(1), 200, 100).unwrap();
            assert_eq!(r.nonce(), &n(1));
            assert_eq!(l.try_consume(&n(1), 200, 100), Err(NonceError::Replayed));
        }
        assert!(l.is_empty());
        assert!(l.reserve(&n(1), 200, 100).is_ok_and(|r| {
            r.hand_over();
            true
        }));
        assert_eq!(l.len(), 1);
        assert!(l.contains(&n(1), 150));
    }

    #[test]
    fn rejects_reserving_a_live_nonce_twice() {
        let l = NonceLedger::new(100);
        let first = l.reserve(&n(1), 200, 100).unwrap();
        assert!(matches!(
            l.reserve(&n(1), 200, 100),
            Err(NonceError::Replayed)
        ));
        first.hand_over();
        assert!(l.contains(&n(1), 150));
    }

    #[test]
    fn full_budget_of_live_nonces_refuses_new_ones() {
        let l = NonceLedger::new(SHARDS); // one per shard
        let mut full = 0;
        for i in 0..10_000 {
            if l.try_consume(&n(i), 1_000, 0) == Err(NonceError::Full) {
                full += 1;
            }
        }
        assert_eq!(l.len(), SHARDS);
        assert_eq!(full, 10_000 - SHARDS);
    }

    #[test]
    fn full_budget_makes_room_by_pruning_expired() {
        let l = NonceLedger::new(SHARDS);
        for i in 0..10_000 {
            let _ = l.try_consume(&n(i), 10, 0);
        }
        assert_eq!(l.len(), SHARDS);
        // At t=11 everything has expired: a new nonce evicts the dead ones.
        assert_eq!(l.try_consume(&n(20_000), 100, 11), Ok(()));
        assert_eq!(l.prune(11), SHARDS - 1);
        assert_eq!(l.len(), 1);
    }
}
