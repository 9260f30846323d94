//! Login throttling: the failed-login table and the Argon2 verifier pool.
//!
//! Two budgets keep password guessing and login floods bounded:
//!
//! - **The lock table** ([`LockTable`]): each attempt is counted as a
//!   failure *before* the password is verified, under one mutex, and a
//!   success clears the count afterwards. Parallel guesses therefore cannot
//!   all pass a "not locked yet" check: with `auth.max_login_failures = 5`
//!   at most 5 verifications run per lockout window, whatever the
//!   concurrency. Unknown usernames are counted like known ones (the answer
//!   must not reveal which users exist), so the table is capped at
//!   `auth.max_lock_entries`: stale entries are evicted first, and when every
//!   entry is still live a *new* username is refused with 503 and
//!   `Retry-After` until the oldest entry expires. Refusing is the fail-safe
//!   choice: evicting a live entry instead would let a flood of random
//!   usernames reset a victim's failure count and buy more guesses.
//! - **The verifier pool** ([`LoginGate::admit`]): at most
//!   `auth.max_concurrent_logins` Argon2 verifications run at once (each
//!   holds about 19 MiB); when all slots are busy the login is answered 503
//!   with `Retry-After` at once, never queued.
//!
//! Kept in memory only: a restart clears locks, which is acceptable for a
//! lockout of minutes and avoids a database write per failed login.

use crate::config::AuthConfig;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Failed-login bookkeeping of one username.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockState {
    /// Attempts counted since the last lock, success or expiry.
    pub failures: u32,
    /// Unix seconds; the account is locked while `now < locked_until`.
    pub locked_until: i64,
    /// Unix seconds of the last counted attempt.
    pub last_failure: i64,
}

impl LockState {
    /// Seconds the account stays locked at `now`, if it is.
    pub fn locked_for(&self, now: i64) -> Option<u64> {
        (self.locked_until > now).then(|| (self.locked_until - now) as u64)
    }

    /// When this entry carries no information any more: it is not locked and
    /// its last failure is a whole lockout period old.
    pub fn expires_at(&self, lockout: u64) -> i64 {
        self.locked_until
            .max(self.last_failure.saturating_add(lockout as i64))
    }

    /// Counts a failure; the `max`-th failure locks for `lockout` seconds and
    /// resets the count so the account gets `max` fresh tries afterwards.
    pub fn register_failure(&mut self, now: i64, max: u32, lockout: u64) {
        self.failures += 1;
        self.last_failure = now;
        if self.failures >= max {
            self.failures = 0;
            self.locked_until = now.saturating_add(lockout as i64);
        }
    }
}

/// Why an attempt may not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The account is locked for this many more seconds (429).
    Locked { retry_after: u64 },
    /// The table is full of live entries and this username has none (503).
    TableFull { retry_after: u64 },
    /// Every verifier slot is taken (503); the attempt was not counted.
    VerifiersBusy,
}

/// The bounded table of failed logins. Pure: every decision takes `now`
/// (Unix seconds) from the caller, so the tests drive it on a fake clock.
#[derive(Debug)]
pub struct LockTable {
    entries: HashMap<String, LockState>,
    max_failures: u32,
    lockout: u64,
    capacity: usize,
    /// No entry expires before this instant, so a full table is swept only
    /// when a sweep can free something (not on every refused attempt).
    next_expiry: i64,
}

impl LockTable {
    /// `max_failures` and `capacity` are at least 1 (validated config).
    pub fn new(max_failures: u32, lockout: u64, capacity: usize) -> Self {
        Self {
            entries: HashMap::new(),
            max_failures: max_failures.max(1),
            lockout,
            capacity: capacity.max(1),
            next_expiry: i64::MIN,
        }
    }

    /// Counts one attempt for `username` as a failure before it is verified,
    /// or refuses it. A later [`succeed`](Self::succeed) clears the count.
    pub fn reserve(&mut self, username: &str, now: i64) -> Result<(), Refusal> {
        let (max, lockout) = (self.max_failures, self.lockout);
        if let Some(state) = self.entries.get_mut(username) {
            if let Some(retry_after) = state.locked_for(now) {
                return Err(Refusal::Locked { retry_after });
            }
            if state.expires_at(lockout) <= now {
                *state = LockState::default();
            }
            state.register_failure(now, max, lockout);
            return Ok(());
        }
        if self.entries.len() >= self.capacity {
            self.evict_expired(now);
            if self.entries.len() >= self.capacity {
                let retry_after = u64::try_from(self.next_expiry.saturating_sub(now))
                    .unwrap_or(0)
                    .max(1);
                return Err(Refusal::TableFull { retry_after });
            }
        }
        let mut state = LockState::default();
        state.register_failure(now, max, lockout);
        self.next_expiry = self.next_expiry.min(state.expires_at(lockout));
        self.entries.insert(username.to_string(), state);
        Ok(())
    }

    /// The password was right: forget the username's failures.
    pub fn succeed(&mut self, username: &str) {
        self.entries.remove(username);
    }

    /// The state of `username` (default when untracked).
    pub fn state(&self, username: &str) -> LockState {
        self.entries.get(username).copied().unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drops every entry that expired by `now`, and recomputes the earliest
    /// expiry of those left. Skipped while nothing can have expired.
    fn evict_expired(&mut self, now: i64) {
        if now < self.next_expiry {
            return;
        }
        let lockout = self.lockout;
        self.entries.retain(|_, s| s.expires_at(lockout) > now);
        self.next_expiry = self
            .entries
            .values()
            .map(|s| s.expires_at(lockout))
            .min()
            .unwrap_or(i64::MAX);
    }
}

/// The login budgets of one server: the lock table and the verifier pool.
pub struct LoginGate {
    locks: Mutex<LockTable>,
    verifiers: Arc<Semaphore>,
}

/// A slot in the verifier pool, held while one Argon2 verification runs.
pub struct VerifierSlot(#[allow(dead_code)] OwnedSemaphorePermit);

impl LoginGate {
    pub fn new(cfg: &AuthConfig) -> Self {
        let capacity = usize::try_from(cfg.max_lock_entries).unwrap_or(usize::MAX);
        Self {
            locks: Mutex::new(LockTable::new(
                cfg.max_login_failures,
                cfg.lockout,
                capacity,
            )),
            verifiers: Arc::new(Semaphore::new(verifier_slots(cfg.max_concurrent_logins))),
        }
    }

    /// Admits one login attempt for `username` at `now`: a free verifier slot
    /// (503 when none), then the attempt counted against the username (429
    /// when locked, 503 when the table is full). The slot must be moved into
    /// the verification itself, so it stays taken until Argon2 returns even
    /// if the client goes away first.
    pub fn admit(&self, username: &str, now: i64) -> Result<VerifierSlot, Refusal> {
        let permit = self
            .verifiers
            .clone()
            .try_acquire_owned()
            .map_err(|_| Refusal::VerifiersBusy)?;
        self.table().reserve(username, now)?;
        Ok(VerifierSlot(permit))
    }

    /// The password was right: clears the username's failure count.
    pub fn succeed(&self, username: &str) {
        self.table().succeed(username);
    }

    /// Usernames tracked by the lock table.
    pub fn tracked(&self) -> usize {
        self.table().len()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, LockTable> {
        // The table holds counters only; a panic elsewhere cannot leave it
        // half-updated in a way that matters, so a poisoned lock is reused.
        self.locks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `auth.max_concurrent_logins`, where 0 means twice the CPU cores.
pub fn verifier_slots(configured: u64) -> usize {
    match configured {
        0 => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .saturating_mul(2),
        n => usize::try_from(n).unwrap_or(Semaphore::MAX_PERMITS),
    }
    .clamp(1, Semaphore::MAX_PERMITS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifth_failure_locks_for_lockout() {
        let mut s = LockState::default();
        for _ in 0..4 {
            s.register_failure(100, 5, 300);
            assert_eq!(s.locked_for(100), None);
        }
        s.register_failure(100, 5, 300);
        assert_eq!(s.locked_for(100), Some(300));
        assert_eq!(s.locked_for(400), None);
    }

    #[test]
    fn reservations_lock_before_any_result_is_known() {
        // Forty attempts that all start before the first one finishes: only
        // the first five run.
        let mut t = LockTable::new(5, 300, 100);
        let admitted = (0..40).filter(|_| t.reserve("alice", 1000).is_ok()).count();
        assert_eq!(admitted, 5);
        assert_eq!(
            t.reserve("alice", 1000),
            Err(Refusal::Locked { retry_after: 300 })
        );
        assert_eq!(
            t.reserve("alice", 1299),
            Err(Refusal::Locked { retry_after: 1 })
        );
        // After the lockout: five fresh tries.
        let admitted = (0..10).filter(|_| t.reserve("alice", 1300).is_ok()).count();
        assert_eq!(admitted, 5);
    }

    #[test]
    fn success_clears_the_count() {
        let mut t = LockTable::new(3, 300, 100);
        assert!(t.reserve("bob", 10).is_ok());
        assert!(t.reserve("bob", 10).is_ok());
        t.succeed("bob");
        assert!(t.is_empty());
        assert!(t.reserve("bob", 10).is_ok());
        assert!(t.reserve("bob", 10).is_ok());
        assert_eq!(t.state("bob").failures, 2);
    }

    #[test]
    fn failures_older_than_the_lockout_are_forgotten() {
        let mut t = LockTable::new(3, 300, 100);
        assert!(t.reserve("carol", 0).is_ok());
        assert!(t.reserve("carol", 0).is_ok());
        // 300 s later the two old failures no longer count.
        assert!(t.reserve("carol", 300).is_ok());
        assert_eq!(t.state("carol").failures, 1);
        assert!(t.reserve("carol", 300).is_ok());
        assert!(t.reserve("carol", 300).is_ok());
        assert!(t.state("carol").locked_for(300).is_some());
    }

    #[test]
    fn a_full_table_refuses_new_names_until_the_oldest_expires() {
        let mut t = LockTable::new(5, 60, 3);
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            assert!(t.reserve(name, 100 + i as i64).is_ok());
        }
        assert_eq!(
            t.reserve("d", 110),
            Err(Refusal::TableFull { retry_after: 50 })
        );
        assert_eq!(t.len(), 3);
        // Names already tracked keep being counted (and can lock).
        assert!(t.reserve("b", 110).is_ok());
        // "a" expires at 160: it makes room, "b" (renewed) and "c" stay.
        assert!(t.reserve("d", 160).is_ok());
        assert_eq!(t.len(), 3);
        assert_eq!(t.state("a"), LockState::default());
        assert_eq!(t.state("b").failures, 2);
    }

    #[test]
    fn a_locked_entry_is_never_evicted_while_locked() {
        let mut t = LockTable::new(1, 60, 1);
        assert!(t.reserve("victim", 0).is_ok());
        assert!(t.state("victim").locked_for(0).is_some());
        assert!(matches!(
            t.reserve("random", 59),
            Err(Refusal::TableFull { .. })
        ));
        assert_eq!(
            t.reserve("victim", 59),
            Err(Refusal::Locked { retry_after: 1 })
        );
        assert!(t.reserve("random", 60).is_ok());
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn the_table_never_grows_past_its_capacity() {
        let mut t = LockTable::new(5, 300, 16);
        for i in 0..10_000i64 {
            let _ = t.reserve(&format!("user-{i}"), i / 100);
            assert!(t.len() <= 16);
        }
    }

    #[test]
    fn zero_concurrent_logins_means_twice_the_cores() {
        assert!(verifier_slots(0) >= 2);
        assert_eq!(verifier_slots(3), 3);
    }

    #[test]
    fn a_full_pool_answers_503_at_once() {
        let cfg = AuthConfig {
            max_concurrent_logins: 1,
            ..AuthConfig::default()
        };
        let gate = LoginGate::new(&cfg);
        let slot = gate.admit("x", 0).unwrap();
        let err = crate::error::ApiError::from(gate.admit("y", 0).err().unwrap());
        assert_eq!(err.key, crate::error::ErrorKey::Overloaded);
        assert_eq!(err.retry_after, Some(1));
        // The refused attempt was not counted against "y".
        assert_eq!(gate.tracked(), 1);
        drop(slot);
        assert!(gate.admit("y", 0).is_ok());
    }
}
