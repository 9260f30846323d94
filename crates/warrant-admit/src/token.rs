//! AIC-JWTs at admission (admit.md §1–2): a token Warrant issued at
//! `/oauth/token`, presented in `Authorization` as `Bearer` or, bound to the
//! agent's key, as `DPoP` with a proof of that key for this very request.
//!
//! The steps are the certificate's, on the token:
//! 1. the token has the AIC-JWT shape; a `DPoP` one comes with a proof whose
//!    signature, `htm`, `htu`, `iat` window and `ath` fit this request, and
//!    whose `jti` was not seen within that window;
//! 2. the outer signature by a key of the issuer's JWK Set, `typ`/`alg`,
//!    time, issuer and audience, and the key binding: a bound token needs
//!    its proof, an unbound one is not presented as `DPoP`;
//! 3. the principal's certificate is not revoked (a token has no serial of
//!    its own; it lives minutes, as the delegation allows);
//! 4. a route that names roles refuses a token (it carries no OU);
//! 5. and 6. the DA JWT, its principal's signature and key hash, under a
//!    principal certificate from the DA's `x5c` or the principal directory,
//!    chained to the trust bundle;
//! 7. to 9. as for a certificate (`Engine::authorize`), with the PA of the
//!    principal's certificate.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use aic::jwt::dpop::{DpopExpectation, access_token_hash, normalize_htu, verify_dpop_proof};
use aic::jwt::{
    DA_TYP, KeyHashAlg, OUTER_TYP, OuterClaims, Step as JwtStep, VerifyOptions, jws,
    verify_aic_jwt_credential,
};
use base64::Engine as _;
use warrant_ca::VerifiedPrincipal;

use crate::engine::{
    AdmissionRequest, Decision, Delegation, Engine, Refused, certificate_pa, check_roles, refuse,
    unix_secs, verify_principal,
};
use crate::forwarded::TokenCredential;
use crate::reason::Reason;
use crate::revocation::RevocationState;
use crate::rules::Rule;

/// DPoP proofs seen within their window, keyed by the SHA-256 of the
/// proof key's thumbprint and the `jti`. Bounded: when it holds only live
/// proofs, new ones are refused rather than forgetting one that could then
/// be replayed.
pub(crate) struct ReplayCache {
    capacity: usize,
    inner: Mutex<ReplayInner>,
}

#[derive(Default)]
struct ReplayInner {
    expires_at: HashMap<[u8; 32], i64>,
    by_expiry: BTreeSet<(i64, [u8; 32])>,
}

impl ReplayCache {
    pub(crate) fn new(capacity: usize) -> ReplayCache {
        ReplayCache {
            capacity,
            inner: Mutex::new(ReplayInner::default()),
        }
    }

    /// Records a proof until `expires_at`; refuses one already recorded
    /// and not yet expired at `now`.
    pub(crate) fn record(&self, key: [u8; 32], expires_at: i64, now: i64) -> Result<(), Reason> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(&(at, old)) = inner.by_expiry.first() {
            if at >= now {
                break;
            }
            inner.by_expiry.pop_first();
            inner.expires_at.remove(&old);
        }
        if inner.expires_at.contains_key(&key) {
            return Err(Reason::DpopReplayed);
        }
        if inner.expires_at.len() >= self.capacity {
            return Err(Reason::ReplayCacheFull);
        }
        inner.expires_at.insert(key, expires_at);
        inner.by_expiry.insert((expires_at, key));
        Ok(())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .expires_at
            .len()
    }
}

fn replay_key(jkt: &str, jti: &str) -> [u8; 32] {
    let mut input = Vec::with_capacity(jkt.len() + 1 + jti.len());
    input.extend_from_slice(jkt.as_bytes());
    input.push(0);
    input.extend_from_slice(jti.as_bytes());
    aic::crypto::sha256(&input)
}

/// A proof that fits the request, and the key it proves.
struct Presenter {
    spki_der: Vec<u8>,
    jkt: String,
    jti: String,
    iat: i64,
}

impl Engine {
    /// Decides a request that presents an AIC-JWT (the module comment has
    /// the steps).
    pub(crate) fn decide_token(
        &self,
        req: &AdmissionRequest<'_>,
        rule: Option<&Rule>,
        path: &str,
        revocation: &RevocationState,
        token: TokenCredential<'_>,
        dpop_proof: Option<&str>,
    ) -> Decision {
        let now = unix_secs(req.now);
        let skew = self.config().clock_skew.as_secs() as i64;
        let raw = token.token();
        // 1. The token's shape and, for DPoP, the proof.
        let outer_jws = jws::parse(raw, OUTER_TYP, true)
            .map_err(|e| refuse(Reason::CredentialMalformed, format!("token: {e}")))?;
        let presenter = match token {
            TokenCredential::Bearer(_) => None,
            TokenCredential::Dpop(_) => Some(self.check_proof(req, raw, dpop_proof, now, skew)?),
        };
        // 2. The issuer's key, then (once the principal's key is known) the
        //    signatures, time, issuer, audience and binding.
        let keys = self.token_keys().ok_or_else(|| {
            refuse(
                Reason::Untrusted,
                "no token issuer keys are configured (--jwks)",
            )
        })?;
        let kid = outer_jws.header.kid.as_deref().unwrap_or_default();
        let issuer_spki = keys
            .spki_for_kid(kid)
            .map_err(|e| refuse(Reason::Untrusted, format!("token issuer key: {e}")))?;
        // The claims name the principal's key; they are read before they
        // are verified only to find it, as `kid` finds the issuer's.
        let unverified: OuterClaims = serde_json::from_slice(&outer_jws.payload)
            .map_err(|e| refuse(Reason::CredentialMalformed, format!("token claims: {e}")))?;
        let principal = match self.token_principal(&unverified) {
            Ok(p) => p,
            Err(refusal) => {
                // An unknown or untrusted principal is reported only for a
                // token the issuer signed; anything else is untrusted.
                outer_jws
                    .verify(&issuer_spki)
                    .map_err(|e| refuse(Reason::Untrusted, format!("token issuer: {e}")))?;
                return Err(refusal);
            }
        };
        let mut opts = VerifyOptions::new(&issuer_spki, &principal.cert.spki_der, now);
        opts.skew_secs = skew;
        opts.expected_issuer = self.config().token_issuer.as_deref();
        opts.expected_audience = self.config().token_audience.as_deref();
        opts.presenter_spki_der = presenter.as_ref().map(|p| p.spki_der.as_slice());
        let verified = verify_aic_jwt_credential(raw, &opts)
            .map_err(|d| jwt_refusal(d.step, d.reason, &unverified, now, skew))?;
        let outer = verified.outer;
        let agent_id = verified.da.agent_id;
        let with_agent = |mut r: Refused| {
            r.agent_id = Some(agent_id.clone());
            r
        };
        match (&presenter, &outer.cnf) {
            (None, Some(_)) => {
                return Err(with_agent(refuse(
                    Reason::TokenBindingMismatch,
                    "a key-bound token presented as Bearer",
                )));
            }
            (Some(_), None) => {
                return Err(with_agent(refuse(
                    Reason::TokenBindingMismatch,
                    "an unbound token presented as DPoP",
                )));
            }
            _ => {}
        }
        if let Some(p) = &presenter {
            let expires_at = p.iat + self.config().dpop_max_age.as_secs() as i64 + skew;
            self.replay_cache()
                .record(replay_key(&p.jkt, &p.jti), expires_at, now)
                .map_err(|reason| {
                    with_agent(refuse(reason, format!("DPoP proof jti {:?}", p.jti)))
                })?;
        }
        // 3. Revocation: the principal's certificate.
        self.revocation_fresh(revocation, now).map_err(with_agent)?;
        if revocation.is_revoked(&principal.cert.serial_hex) {
            return Err(with_agent(refuse(
                Reason::PrincipalRevoked,
                format!("principal serial {} revoked", principal.cert.serial_hex),
            )));
        }
        // 4. Roles: a token carries none.
        if let Some(rule) = rule {
            check_roles(rule, &[]).map_err(with_agent)?;
        }
        // 5–7. The delegation as the principal's certificate bounds it.
        let pa = certificate_pa(&principal.cert).map_err(|e| {
            with_agent(refuse(
                Reason::PrincipalUntrusted,
                format!("principal certificate PA: {e}"),
            ))
        })?;
        if let Some(max) = outer.aic.max_depth
            && !(0..=max).contains(&outer.aic.chain_depth)
        {
            return Err(with_agent(refuse(
                Reason::ConstraintDenied,
                format!("chain_depth {} outside 0..={max}", outer.aic.chain_depth),
            )));
        }
        let delegation = Delegation::bounded_by(
            pa.as_ref(),
            Delegation {
                agent_id: agent_id.clone(),
                mode: outer.aic.delegation_mode,
                principal: outer.aic.principal.realm_and_id(),
                capabilities: outer.aic.capabilities.clone(),
                constraints: outer.aic.constraints.clone(),
                principal_cert: Some(principal),
                grants: Vec::new(),
                representative_allowed: false,
            },
        );
        self.authorize(req, rule, path, &delegation, None, Some(outer.jti))
    }

    /// Step 1 for `DPoP`: a proof for this method and absolute URI, fresh,
    /// and for this token (`ath`).
    fn check_proof(
        &self,
        req: &AdmissionRequest<'_>,
        token: &str,
        proof: Option<&str>,
        now: i64,
        skew: i64,
    ) -> Result<Presenter, Refused> {
        let proof = proof.ok_or_else(|| {
            refuse(
                Reason::DpopProofInvalid,
                "a DPoP token without a DPoP header",
            )
        })?;
        if normalize_htu(req.uri).is_none() {
            return Err(refuse(
                Reason::DpopProofInvalid,
                "the request's absolute URI is unknown (the proxy must send it)",
            ));
        }
        let want = DpopExpectation {
            htm: req.method,
            htu: req.uri,
            now,
            max_age_secs: self.config().dpop_max_age.as_secs() as i64,
            skew_secs: skew,
        };
        let checked = verify_dpop_proof(proof, &want)
            .map_err(|e| refuse(Reason::DpopProofInvalid, e.to_string()))?;
        if checked.claims.ath.as_deref() != Some(access_token_hash(token).as_str()) {
            return Err(refuse(
                Reason::DpopProofInvalid,
                "DPoP proof ath is not the hash of the presented token",
            ));
        }
        Ok(Presenter {
            spki_der: checked.spki_der,
            jkt: checked.jkt,
            jti: checked.claims.jti,
            iat: checked.claims.iat,
        })
    }

    /// The principal's certificate, trusted: `x5c[0]` of the DA JWT's
    /// header, else the directory's certificate for the principal's
    /// `key_hash`. Whether it is the key that signed the DA is the
    /// verifier's step; here, that it chains to the bundle and is a
    /// person's.
    fn token_principal(&self, outer: &OuterClaims) -> Result<Arc<VerifiedPrincipal>, Refused> {
        let da = jws::parse(&outer.da, DA_TYP, false)
            .map_err(|e| refuse(Reason::DelegationInvalid, format!("DA JWT: {e}")))?;
        let from_header = match da.header.x5c.as_ref().and_then(|chain| chain.first()) {
            Some(leaf) => Some(
                base64::engine::general_purpose::STANDARD
                    .decode(leaf)
                    .map_err(|_| refuse(Reason::DelegationInvalid, "DA x5c[0] is not base64"))?,
            ),
            None => None,
        };
        let claim = &outer.aic.principal;
        match &from_header {
            Some(der) => verify_principal(self.trust(), der).map(Arc::new),
            None => {
                let key_hash = KeyHashAlg::from_name(&claim.hash_alg)
                    .and_then(|alg| {
                        self.principals()
                            .key_hash_of_token_claim(alg, &claim.key_hash)
                    })
                    .unwrap_or_default();
                self.directory_principal(&key_hash, &claim.realm_and_id())
            }
        }
    }
}

/// The admission reason of a verifier step's denial. A time denial is
/// `expired` unless the token is not valid yet.
fn jwt_refusal(step: JwtStep, why: String, outer: &OuterClaims, now: i64, skew: i64) -> Refused {
    let reason = match step {
        JwtStep::OuterSignature | JwtStep::IssuerAudience => Reason::Untrusted,
        JwtStep::DaSignature | JwtStep::KeyHash => Reason::DelegationInvalid,
        JwtStep::Time => {
            let starts = outer.nbf.unwrap_or(outer.iat).max(outer.iat);
            if now + skew < starts {
                Reason::NotYetValid
            } else {
                Reason::Expired
            }
        }
        JwtStep::Cnf => Reason::TokenBindingMismatch,
        JwtStep::Constraints => Reason::ConstraintDenied,
        JwtStep::Capability => Reason::CapabilityNotGranted,
        JwtStep::Representative => Reason::RepresentativeDenied,
    };
    refuse(reason, format!("token {step}: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_is_refused_twice_within_its_window_and_forgotten_after() {
        let cache = ReplayCache::new(10);
        let key = replay_key("thumb", "jti-1");
        assert_eq!(cache.record(key, 100, 50), Ok(()));
        assert_eq!(cache.record(key, 100, 60), Err(Reason::DpopReplayed));
        assert_eq!(cache.record(key, 100, 100), Err(Reason::DpopReplayed));
        // Expired: its iat is outside the accepted window now, so the
        // proof itself is refused as stale; the entry can go.
        assert_eq!(cache.record(replay_key("thumb", "jti-2"), 200, 101), Ok(()));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn the_same_jti_under_another_key_is_another_proof() {
        let cache = ReplayCache::new(10);
        assert_eq!(cache.record(replay_key("a", "x"), 100, 0), Ok(()));
        assert_eq!(cache.record(replay_key("b", "x"), 100, 0), Ok(()));
        assert_ne!(replay_key("ab", "c"), replay_key("a", "bc"));
    }

    #[test]
    fn rejects_new_proofs_when_full_of_live_ones() {
        let cache = ReplayCache::new(2);
        assert_eq!(cache.record(replay_key("k", "1"), 100, 0), Ok(()));
        assert_eq!(cache.record(replay_key("k", "2"), 100, 0), Ok(()));
        assert_eq!(
            cache.record(replay_key("k", "3"), 100, 0),
            Err(Reason::ReplayCacheFull)
        );
        assert_eq!(cache.record(replay_key("k", "3"), 300, 101), Ok(()));
    }
}
