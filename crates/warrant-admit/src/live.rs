//! The engine with the state that changes under it: the route rules and the
//! revocation state, shared so that whoever refreshes them (a file
//! follower, a CRL poller) changes what the next decision sees. The one
//! place a request is decided against the current state, for the tower
//! layer and the `warrant admit` service alike.

use std::sync::{Arc, RwLock};

use crate::engine::{AdmissionRequest, Decision, Engine};
use crate::reason::Reason;
use crate::revocation::RevocationState;
use crate::rules::Rules;

#[derive(Clone)]
pub struct Admission {
    pub engine: Arc<Engine>,
    pub rules: Arc<RwLock<Arc<Rules>>>,
    pub revocation: Arc<RwLock<RevocationState>>,
}

impl Admission {
    pub fn new(engine: Engine, rules: Rules, revocation: RevocationState) -> Admission {
        Admission {
            engine: Arc::new(engine),
            rules: Arc::new(RwLock::new(Arc::new(rules))),
            revocation: Arc::new(RwLock::new(revocation)),
        }
    }

    /// Decides `request` against the rules and revocation state in force.
    pub fn decide(&self, request: &AdmissionRequest<'_>) -> Decision {
        let rules = self.rules.read().unwrap_or_else(|e| e.into_inner()).clone();
        let revocation = self.revocation.read().unwrap_or_else(|e| e.into_inner());
        self.engine.decide(request, &rules, &revocation)
    }

    /// Puts `rules` in force for the next decisions.
    pub fn set_rules(&self, rules: Rules) {
        *self.rules.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(rules);
    }

    /// Replaces one source's revoked serials ([`RevocationState::replace`]).
    pub fn replace_revoked(&self, source: &str, serials: &[String], complete_as_of: i64) {
        self.revocation
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .replace(source, serials, complete_as_of);
    }

    /// Whether the revocation state is fresh enough at `now` (unix
    /// seconds) under the engine's configured staleness.
    pub fn check_fresh(&self, now: i64) -> Result<(), Reason> {
        let staleness = self.engine.config().max_revocation_staleness.as_secs() as i64;
        self.revocation
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .check_fresh(now, staleness)
    }
}
