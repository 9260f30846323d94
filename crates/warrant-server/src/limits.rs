//! Request limits (ca.md §5): the per-client-IP rate limit on `/api/…`
//! routes, the per-principal issuance limit, and the cap on issuance requests
//! in flight (`engine.write_max_pending`), and one agent issuance at a time
//! per principal between its `max_agents` count and its commit.
//!
//! The two rate limits are GCRA token buckets (`governor`) keyed in a
//! concurrent map. A key whose bucket is full again carries no information,
//! so [`Limits::prune`] drops those keys every [`PRUNE_INTERVAL`]: memory is
//! bounded by the number of distinct clients (principals) active within one
//! `burst / rate` period, not by everything ever seen.

use crate::auth::Caller;
use crate::config::Config;
use crate::error::{ApiError, ErrorKey, retry_after_secs};
use axum::http::HeaderMap;
use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};
use std::collections::HashMap;
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How often idle keys are dropped from the rate limiters.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(10);

/// One keyed token bucket per `rate` (per second) and `burst`.
pub struct KeyedLimit<K: Hash + Eq + Clone, C: Clock = DefaultClock> {
    limiter: RateLimiter<K, DashMapStateStore<K>, C, NoOpMiddleware<C::Instant>>,
}

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimit<K, C> {
    /// `rate` and `burst` were range-checked by [`Config::validate`]; values
    /// that still do not make a quota fall back to one request per second.
    pub fn new(rate: f64, burst: u32, clock: C) -> Self {
        let period = Duration::from_secs_f64(1.0 / rate.max(1e-9));
        let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::with_period(period)
            .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
            .allow_burst(burst);
        Self {
            limiter: RateLimiter::new(quota, DashMapStateStore::default(), clock),
        }
    }

    /// `Err(wait)` when `key` has no token left: how long until it has one.
    pub fn check(&self, key: &K) -> Result<(), Duration> {
        self.limiter
            .check_key(key)
            .map_err(|not_until| not_until.wait_time_from(self.limiter.clock().now()))
    }

    /// Forgets keys whose bucket is full again, and returns the memory.
    pub fn prune(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }

    /// Keys currently tracked.
    pub fn len(&self) -> usize {
        self.limiter.len()
    }

    pub fn is_empty(&self) -> bool {
        self.limiter.is_empty()
    }
}

/// Whom an issuance counts against for `issuance.per_principal`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PrincipalKey {
    /// Agent certificates: the delegating principal (its certificate's
    /// `principal_uid`), whoever the API caller is.
    Delegator(String),
    /// Every other certificate: the authenticated user.
    User(String),
}

impl PrincipalKey {
    /// The caller of a non-agent issuance. Certificate holders have no user
    /// id; they are keyed by their certificate's name.
    pub fn for_caller(caller: &Caller) -> Self {
        if caller.user_id.is_empty() {
            PrincipalKey::User(format!("cert:{}", caller.username))
        } else {
            PrincipalKey::User(caller.user_id.clone())
        }
    }
}

/// The bucket of a client: its address, with IPv4-mapped IPv6 folded to
/// IPv4 and IPv6 cut to its /64 (one host usually owns a whole /64, so
/// counting addresses would let it mint fresh buckets at will).
/// With `trust_forwarded_for`, the last `X-Forwarded-For` entry (the one
/// the nearest proxy, ours, appended) replaces the peer when it parses.
pub fn client_key(peer: IpAddr, forwarded_for: Option<&str>, trust_forwarded_for: bool) -> IpAddr {
    let ip = if trust_forwarded_for {
        forwarded_for
            .and_then(|v| v.rsplit(',').next())
            .and_then(|last| last.trim().parse::<IpAddr>().ok())
            .unwrap_or(peer)
    } else {
        peer
    };
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(Ipv6Addr::from(prefix))
            }
        },
    }
}

/// The per-process limit state, built once from the config.
pub struct Limits {
    client_ip: Option<KeyedLimit<IpAddr>>,
    trust_forwarded_for: bool,
    principal: Option<KeyedLimit<PrincipalKey>>,
    in_flight: Arc<Semaphore>,
    in_flight_max: usize,
    agent_turns: AgentTurns,
}

impl Limits {
    pub fn new(cfg: &Config) -> Self {
        let rl = &cfg.rate_limit;
        let pp = &cfg.issuance.per_principal;
        let in_flight_max = usize::try_from(cfg.engine.write_max_pending)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        Self {
            client_ip: rl
                .enabled
                .then(|| KeyedLimit::new(rl.rate, rl.burst, DefaultClock::default())),
            trust_forwarded_for: rl.trust_forwarded_for,
            principal: pp
                .enabled
                .then(|| KeyedLimit::new(pp.rate, pp.burst, DefaultClock::default())),
            in_flight: Arc::new(Semaphore::new(in_flight_max)),
            in_flight_max,
            agent_turns: AgentTurns::default(),
        }
    }

    /// Waits for `principal`'s turn to count and commit one agent, held until
    /// the request is answered. See [`AgentTurns`].
    pub async fn agent_turn(&self, principal: &str) -> AgentTurn<'_> {
        self.agent_turns.take(principal).await
    }

    /// `rate_limit`: 429 `api.rate_limited` once the client's burst is spent.
    /// `peer` is `None` only for requests that did not come through a
    /// listener (they share one bucket).
    pub fn check_client(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(limit) = &self.client_ip else {
            return Ok(());
        };
        let forwarded = headers.get("x-forwarded-for").and_then(|v| v.to_str().ok());
        let peer = peer.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let key = client_key(peer, forwarded, self.trust_forwarded_for);
        limit.check(&key).map_err(|wait| {
            ApiError::detail(ErrorKey::RateLimited, "too many requests from this client")
                .with_retry_after(retry_after_secs(wait))
        })
    }

    /// `issuance.per_principal`: 429 `api.principal_rate_limited`.
    pub fn check_principal(&self, key: PrincipalKey) -> Result<(), ApiError> {
        let Some(limit) = &self.principal else {
            return Ok(());
        };
        limit.check(&key).map_err(|wait| {
            ApiError::detail(
                ErrorKey::PrincipalRateLimited,
                "too many issuances for this principal",
            )
            .with_retry_after(retry_after_secs(wait))
        })
    }

    /// `engine.write_max_pending`: a slot for one issuance, held until it is
    /// answered; none left → 503 `api.too_many_requests` at once.
    pub fn admit_issuance(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        self.in_flight.clone().try_acquire_owned().map_err(|_| {
            ApiError::detail(ErrorKey::Overloaded, "too many issuances in flight")
                .with_retry_after(1)
        })
    }

    /// Issuance requests admitted and not yet answered.
    pub fn issuances_in_flight(&self) -> usize {
        self.in_flight_max
            .saturating_sub(self.in_flight.available_permits())
    }

    /// Keys tracked by the client-IP and the per-principal limiter.
    pub fn tracked_keys(&self) -> (usize, usize) {
        (
            self.client_ip.as_ref().map_or(0, KeyedLimit::len),
            self.principal.as_ref().map_or(0, KeyedLimit::len),
        )
    }

    pub fn prune(&self) {
        if let Some(l) = &self.client_ip {
            l.prune();
        }
        if let Some(l) = &self.principal {
            l.prune();
        }
    }

    /// Prunes every [`PRUNE_INTERVAL`] until the limits are dropped (the
    /// task holds only a weak reference). Needs a Tokio runtime.
    pub fn spawn_pruner(self: &Arc<Self>) {
        if self.client_ip.is_none() && self.principal.is_none() {
            return;
        }
        let weak: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PRUNE_INTERVAL);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(limits) = weak.upgrade() else {
                    return;
                };
                limits.prune();
                let (clients, principals) = limits.tracked_keys();
                crate::metrics::limiter_keys(clients, principals);
            }
        });
    }
}

/// Most principals whose agent bound is kept; past it the bounds are
/// dropped and rebuilt from exact counts (about 100 bytes each).
const MAX_AGENT_BOUNDS: usize = 65_536;

/// Upper bounds on principals' valid, unexpired agent certificates, so that
/// an agent issuance can skip the `max_agents` count while the bound is below
/// the limit. The count reads every active agent of the principal, work that
/// grows with the principal's agents and competes with the writer for the
/// same pages; the bound spares it whenever it cannot change the answer.
///
/// A bound is one exact count plus the agents this process committed for the
/// principal since. Expiry and revocation only lower the truth, so it stays
/// an upper bound as long as no other connection added certificates; the
/// store's `foreign_write_epoch` tells, and a bound taken under another epoch
/// is not used. A bound at or above the limit is never used either: every
/// refusal comes from an exact count, so the bound never refuses an agent the
/// database would admit. Every call happens under the principal's
/// [`AgentTurn`], so none of its agents commits between a count and the bound
/// built on it.
#[derive(Default)]
struct ActiveAgentBounds {
    by_principal: HashMap<String, AgentBound>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AgentBound {
    agents: u64,
    epoch: u64,
}

impl ActiveAgentBounds {
    fn below(&self, principal: &str, max: u64, epoch: Option<u64>) -> Option<u64> {
        let epoch = epoch?;
        self.by_principal
            .get(principal)
            .filter(|b| b.epoch == epoch && b.agents < max)
            .map(|b| b.agents)
    }

    /// `epoch` must have been read before the count.
    fn counted(&mut self, principal: &str, agents: u64, epoch: Option<u64>) {
        let Some(epoch) = epoch else {
            return;
        };
        if self.by_principal.len() >= MAX_AGENT_BOUNDS && !self.by_principal.contains_key(principal)
        {
            self.by_principal.clear();
        }
        self.by_principal
            .insert(principal.to_string(), AgentBound { agents, epoch });
    }

    fn committed(&mut self, principal: &str) {
        if let Some(b) = self.by_principal.get_mut(principal) {
            b.agents = b.agents.saturating_add(1);
        }
    }

    fn forget(&mut self, principal: &str) {
        self.by_principal.remove(principal);
    }
}

/// One agent issuance at a time per principal, from its `max_agents` count
/// to its commit. The count reads committed rows only, so two concurrent
/// requests of one principal could otherwise both see room for the last agent;
/// counting the other in-flight requests instead would refuse too many, since
/// a row becomes visible before its request is answered (SQLite answers after
/// the WAL fsync). A principal's agents are then issued at one commit latency
/// each; other principals are not affected. Across nodes sharing a database
/// the count-then-insert race remains.
#[derive(Default)]
pub struct AgentTurns {
    by_principal: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    bounds: Mutex<ActiveAgentBounds>,
}

impl AgentTurns {
    async fn take(&self, principal: &str) -> AgentTurn<'_> {
        let lock = self
            .by_principal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(principal.to_string())
            .or_default()
            .clone();
        let guard = lock.lock_owned().await;
        AgentTurn {
            owner: self,
            principal: principal.to_string(),
            guard: Some(guard),
        }
    }

    /// Principals with a turn taken or awaited (others are dropped from the map).
    pub fn principals(&self) -> usize {
        self.by_principal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

/// A principal's turn to count and commit one agent; ends when dropped.
pub struct AgentTurn<'a> {
    owner: &'a AgentTurns,
    principal: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

/// The principal's agent bound (see [`ActiveAgentBounds`]), only reachable
/// during its turn.
impl AgentTurn<'_> {
    fn bounds(&self) -> std::sync::MutexGuard<'_, ActiveAgentBounds> {
        self.owner
            .bounds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An upper bound on the principal's active agents when one is known and
    /// below `max`; `None`: count them. `epoch` is the store's
    /// `foreign_write_epoch` now.
    pub fn active_agents_below(&self, max: u64, epoch: Option<u64>) -> Option<u64> {
        self.bounds().below(&self.principal, max, epoch)
    }

    /// An exact count, read after `epoch` was.
    pub fn counted(&self, agents: u64, epoch: Option<u64>) {
        self.bounds().counted(&self.principal, agents, epoch);
    }

    /// This turn's agent was stored.
    pub fn committed(&self) {
        self.bounds().committed(&self.principal);
    }

    /// Its fate is unknown (a failed or timed-out commit): count next time.
    pub fn outcome_unknown(&self) {
        self.bounds().forget(&self.principal);
    }
}

impl Drop for AgentTurn<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut map = self
            .owner
            .by_principal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Only the map's own handle left: nobody holds or awaits this turn.
        if map
            .get(&self.principal)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            map.remove(&self.principal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    fn limit(
        rate: f64,
        burst: u32,
    ) -> (
        KeyedLimit<&'static str, FakeRelativeClock>,
        FakeRelativeClock,
    ) {
        let clock = FakeRelativeClock::default();
        (KeyedLimit::new(rate, burst, clock.clone()), clock)
    }

    #[test]
    fn burst_then_refusal_with_the_wait_until_the_next_token() {
        let (l, clock) = limit(0.5, 3);
        for _ in 0..3 {
            assert_eq!(l.check(&"a"), Ok(()));
        }
        let wait = l.check(&"a").unwrap_err();
        assert_eq!(wait, Duration::from_secs(2));
        assert_eq!(retry_after_secs(wait), 2);
        // Another key has its own bucket.
        assert_eq!(l.check(&"b"), Ok(()));
        clock.advance(Duration::from_secs(2));
        assert_eq!(l.check(&"a"), Ok(()));
        assert!(l.check(&"a").is_err());
    }

    #[test]
    fn prune_forgets_only_refilled_keys() {
        let (l, clock) = limit(1.0, 2);
        assert_eq!(l.check(&"idle"), Ok(()));
        clock.advance(Duration::from_secs(5));
        assert_eq!(l.check(&"busy"), Ok(()));
        assert_eq!(l.check(&"busy"), Ok(()));
        assert_eq!(l.len(), 2);
        l.prune();
        assert_eq!(l.len(), 1);
        // The busy key kept its state: still limited.
        assert!(l.check(&"busy").is_err());
    }

    #[test]
    fn client_key_uses_the_peer_unless_forwarded_for_is_trusted() {
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        let xff = Some("203.0.113.9, 198.51.100.7");
        assert_eq!(client_key(peer, xff, false), peer);
        assert_eq!(
            client_key(peer, xff, true),
            "198.51.100.7".parse::<IpAddr>().unwrap()
        );
        assert_eq!(client_key(peer, Some("garbage"), true), peer);
        assert_eq!(client_key(peer, None, true), peer);
    }

    #[test]
    fn client_key_folds_ipv6_to_its_64_and_mapped_v4_to_v4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_key(a, None, false), client_key(b, None, false));
        assert_ne!(client_key(a, None, false), client_key(other, None, false));
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(
            client_key(mapped, None, false),
            "192.0.2.1".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn principal_key_of_a_caller() {
        let mut caller = Caller {
            user_id: "7".into(),
            username: "alice".into(),
            role: crate::auth::Role::Operator,
            method: crate::auth::AuthMethod::Token {
                token_id: "t".into(),
            },
            client_cert_der: None,
        };
        assert_eq!(
            PrincipalKey::for_caller(&caller),
            PrincipalKey::User("7".into())
        );
        caller.user_id.clear();
        assert_eq!(
            PrincipalKey::for_caller(&caller),
            PrincipalKey::User("cert:alice".into())
        );
    }

    #[test]
    fn disabled_limits_admit_everything_and_in_flight_is_bounded() {
        let mut cfg = Config::default();
        cfg.engine.write_max_pending = 2;
        let limits = Limits::new(&cfg);
        for _ in 0..100 {
            limits.check_client(None, &HeaderMap::new()).unwrap();
            limits
                .check_principal(PrincipalKey::User("u".into()))
                .unwrap();
        }
        let a = limits.admit_issuance().unwrap();
        let _b = limits.admit_issuance().unwrap();
        assert_eq!(limits.issuances_in_flight(), 2);
        let refused = limits.admit_issuance().unwrap_err();
        assert_eq!(refused.key, ErrorKey::Overloaded);
        assert_eq!(refused.retry_after, Some(1));
        drop(a);
        assert!(limits.admit_issuance().is_ok());
    }

    #[test]
    fn enabled_limits_answer_their_own_keys() {
        let mut cfg = Config::default();
        cfg.rate_limit.enabled = true;
        cfg.rate_limit.rate = 0.01;
        cfg.rate_limit.burst = 1;
        cfg.issuance.per_principal.enabled = true;
        cfg.issuance.per_principal.rate = 0.01;
        cfg.issuance.per_principal.burst = 1;
        let limits = Limits::new(&cfg);
        let peer = Some("192.0.2.1".parse().unwrap());
        limits.check_client(peer, &HeaderMap::new()).unwrap();
        let e = limits.check_client(peer, &HeaderMap::new()).unwrap_err();
        assert_eq!(e.key, ErrorKey::RateLimited);
        assert!(e.retry_after.unwrap() >= 99, "{:?}", e.retry_after);
        let other = Some("192.0.2.2".parse().unwrap());
        limits.check_client(other, &HeaderMap::new()).unwrap();

        let p = PrincipalKey::Delegator("realm:alice:xyz".into());
        limits.check_principal(p.clone()).unwrap();
        let e = limits.check_principal(p).unwrap_err();
        assert_eq!(e.key, ErrorKey::PrincipalRateLimited);
        limits
            .check_principal(PrincipalKey::Delegator("realm:bob:xyz".into()))
            .unwrap();
        assert_eq!(limits.tracked_keys(), (2, 2));
    }

    #[test]
    fn agent_bounds_are_used_only_below_the_limit_and_in_their_epoch() {
        let mut b = ActiveAgentBounds::default();
        assert_eq!(b.below("p", 10, Some(0)), None, "unknown principal");
        b.counted("p", 3, Some(0));
        assert_eq!(b.below("p", 10, Some(0)), Some(3));
        assert_eq!(b.below("q", 10, Some(0)), None, "per principal");
        assert_eq!(b.below("p", 10, Some(1)), None, "another connection wrote");
        assert_eq!(b.below("p", 10, None), None, "a backend that cannot tell");
        b.committed("p");
        b.committed("p");
        assert_eq!(b.below("p", 10, Some(0)), Some(5));
        // At the limit the bound is no answer: a refusal needs a count.
        assert_eq!(b.below("p", 5, Some(0)), None);
        assert_eq!(b.below("p", 6, Some(0)), Some(5));
        b.committed("q");
        assert_eq!(b.below("q", 10, Some(0)), None, "no count, no bound");
        b.forget("p");
        assert_eq!(b.below("p", 10, Some(0)), None);
        b.counted("p", 1, None);
        assert_eq!(
            b.below("p", 10, None),
            None,
            "nothing kept without an epoch"
        );
        assert!(b.by_principal.is_empty());
    }

    #[test]
    fn agent_bounds_stay_within_their_budget() {
        let mut b = ActiveAgentBounds::default();
        for i in 0..MAX_AGENT_BOUNDS {
            b.counted(&format!("p{i}"), 1, Some(0));
        }
        assert_eq!(b.by_principal.len(), MAX_AGENT_BOUNDS);
        b.counted("p0", 2, Some(0));
        assert_eq!(
            b.by_principal.len(),
            MAX_AGENT_BOUNDS,
            "an update adds none"
        );
        b.counted("new", 1, Some(0));
        assert_eq!(b.by_principal.len(), 1, "dropped, to be recounted");
        assert_eq!(b.below("new", 10, Some(0)), Some(1));
    }

    #[tokio::test]
    async fn agent_turns_are_exclusive_per_principal_and_leave_nothing_behind() {
        let turns = AgentTurns::default();
        let first = turns.take("p1").await;
        // Another principal is not held up.
        let other = turns.take("p2").await;
        // The same principal waits until the first turn ends.
        let mut second = Box::pin(turns.take("p1"));
        assert!(poll_once(second.as_mut()).is_none());
        drop(first);
        let second = second.await;
        drop(second);
        drop(other);
        assert_eq!(turns.principals(), 0);
    }

    /// Polls a future once without a runtime waker.
    fn poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> Option<F::Output> {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match f.poll(&mut cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        }
    }
}
