//! The decision (admit.md §2): one function of the request, the route rules,
//! the revocation state and the engine's trust, which runs the checks in the
//! spec's order and names the first that refuses.
//!
//! What depends only on a certificate's bytes and the trust (its chain, its
//! AIC and PA, the delegation's signature under the principal's certificate)
//! is computed once per certificate and kept in a bounded cache keyed by the
//! SHA-256 of its DER. What can change between two requests is checked every
//! time: validity against the clock, revocation, roles, constraints (the
//! client address, the time of day), the route. A new trust bundle or
//! principal directory means a new [`Engine`], so nothing cached under the
//! old trust survives it.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aic::jwt::policy::{ConstraintContext, capability_covers, evaluate_constraint};
use aic::jwt::{CapabilityClaim, JwkSet};
use aic::model::{Aic, DelegationMode, PrincipalAuthorization};
use warrant_ca::{PrincipalCertError, TrustBundle, VerifiedPrincipal, oids};

use crate::forwarded::{ForwardedError, TokenCredential};
use crate::reason::Reason;
use crate::revocation::RevocationState;
use crate::rules::{Requirement, Rule, Rules, request_path};
use crate::token::ReplayCache;

/// How the engine decides where the spec leaves a choice.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Clock difference tolerated against certificates' validity.
    pub clock_skew: Duration,
    /// Step 6: verify each delegation's signature under its principal's
    /// certificate (from [`Principals`]). Off, a certificate the CA issued
    /// is taken to carry a delegation the CA checked.
    pub verify_delegation: bool,
    /// Step 7: admit past constraints this engine does not know (default:
    /// refuse them).
    pub allow_unknown_constraints: bool,
    /// Step 3: the oldest revocation state decisions may rely on.
    pub max_revocation_staleness: Duration,
    /// Certificates whose verified facts are kept.
    pub cache_capacity: usize,
    /// A token's `iss` must be this (Warrant's `token.issuer`); none: any
    /// issuer whose key is in the JWK Set.
    pub token_issuer: Option<String>,
    /// A token's `aud` must include this; none: not checked.
    pub token_audience: Option<String>,
    /// How old a DPoP proof's `iat` may be (and so how long its `jti` is
    /// remembered), besides the clock skew.
    pub dpop_max_age: Duration,
    /// DPoP proofs remembered within their window; past it, proofs are
    /// refused until old ones expire (fail closed).
    pub dpop_replay_capacity: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            clock_skew: Duration::from_secs(60),
            verify_delegation: true,
            allow_unknown_constraints: false,
            max_revocation_staleness: Duration::from_secs(30),
            cache_capacity: 100_000,
            token_issuer: None,
            token_audience: None,
            dpop_max_age: Duration::from_secs(60),
            dpop_replay_capacity: 1_000_000,
        }
    }
}

/// Principals' certificates by the SHA-256 of their SubjectPublicKeyInfo,
/// the key hash an AIC's `principalUid` carries: how step 6 finds the key a
/// delegation must verify under.
#[derive(Debug, Clone, Default)]
pub struct Principals {
    by_key_hash: HashMap<[u8; 32], Vec<u8>>,
    /// RFC 7638 thumbprints to SPKI hashes: a token's `key_hash` may be
    /// either (`hash_alg` `jkt` or `sha-256`).
    jkt_to_key_hash: HashMap<String, [u8; 32]>,
}

impl Principals {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a principal's certificate (DER). Whether it is trusted is
    /// checked when a delegation cites it, against the engine's bundle.
    pub fn insert_der(&mut self, cert_der: Vec<u8>) -> Result<(), aic::DecodeError> {
        let view = aic::cert::CertificateView::from_der(&cert_der)?;
        let key_hash = aic::crypto::sha256(&view.subject_spki_der);
        // A key type JWK cannot name is found by its SPKI hash alone.
        if let Ok(jkt) = aic::jwt::jwk_thumbprint(&view.subject_spki_der) {
            self.jkt_to_key_hash.insert(jkt, key_hash);
        }
        self.by_key_hash.insert(key_hash, cert_der);
        Ok(())
    }

    /// The SPKI hash a token's principal claim names by `key_hash`
    /// (`sha-256`: base64url of it; `jkt`: the key's thumbprint).
    pub(crate) fn key_hash_of_token_claim(
        &self,
        alg: aic::jwt::KeyHashAlg,
        key_hash: &str,
    ) -> Option<[u8; 32]> {
        match alg {
            aic::jwt::KeyHashAlg::Sha256 => {
                use base64::Engine as _;
                let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(key_hash)
                    .ok()?;
                raw.try_into().ok()
            }
            aic::jwt::KeyHashAlg::Jkt => self.jkt_to_key_hash.get(key_hash).copied(),
        }
    }

    pub fn len(&self) -> usize {
        self.by_key_hash.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key_hash.is_empty()
    }
}

/// The credential as it arrived.
#[derive(Debug, Clone, Copy)]
pub enum Credential<'a> {
    /// None was presented.
    Absent,
    /// One was presented and could not be read (e.g. a mangled header).
    Unreadable,
    /// A client certificate, DER.
    Certificate(&'a [u8]),
    /// An AIC-JWT from `Authorization`, with the request's `DPoP` proof
    /// when it carried one. A `DPoP` token needs the request's `uri` in
    /// absolute form: the proof's `htu` is checked against it.
    Token {
        token: TokenCredential<'a>,
        dpop_proof: Option<&'a str>,
    },
}

impl<'a> Credential<'a> {
    /// The credential a request presents: its client certificate (as the
    /// proxy forwarded it, or the TLS peer's), else an AIC-JWT in
    /// `Authorization` with the `DPoP` header's proof. A certificate wins
    /// over a token; an `Authorization` of another scheme is no credential
    /// of ours.
    pub fn from_parts(
        certificate: Option<Result<&'a [u8], ForwardedError>>,
        authorization: Option<&'a str>,
        dpop_proof: Option<&'a str>,
    ) -> Credential<'a> {
        match certificate {
            Some(Ok(der)) => return Credential::Certificate(der),
            None | Some(Err(ForwardedError::Absent)) => {}
            Some(Err(_)) => return Credential::Unreadable,
        }
        match authorization.map(crate::forwarded::authorization_token) {
            None | Some(Err(ForwardedError::Absent | ForwardedError::UnsupportedScheme)) => {
                Credential::Absent
            }
            Some(Ok(token)) => Credential::Token { token, dpop_proof },
            Some(Err(_)) => Credential::Unreadable,
        }
    }
}

/// One request to decide.
#[derive(Debug, Clone, Copy)]
pub struct AdmissionRequest<'a> {
    pub method: &'a str,
    /// The original request URI (origin-form, or absolute-form).
    pub uri: &'a str,
    /// The client's address as the proxy reports it (`allowed-cidr`).
    pub client_ip: Option<IpAddr>,
    pub credential: Credential<'a>,
    pub now: SystemTime,
    /// This agent's sessions already in flight (`max-concurrent`); unknown
    /// refuses a delegation that carries that constraint.
    pub current_concurrency: Option<u64>,
}

/// Who is acting, for the upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    pub agent_id: String,
    /// `realm:identifier` of the delegating principal.
    pub principal: String,
    pub mode: DelegationMode,
    /// The capabilities the agent holds here: the AIC's in authorized
    /// mode, those the principal's grants also cover in representative mode.
    pub capabilities: Vec<CapabilityClaim>,
    /// The agent certificate's serial, upper-case hex (a certificate).
    pub serial_hex: Option<String>,
    /// The token's `jti`, the delegation's nonce (an AIC-JWT).
    pub token_id: Option<String>,
}

/// An admitted request.
#[derive(Debug, Clone, PartialEq)]
pub struct Admitted {
    /// The line of the rule that admitted it.
    pub rule_line: usize,
    /// `None` on a `public` route, which needs no credential.
    pub identity: Option<Identity>,
}

/// A refused request: the reason (its key, step and status) and a detail
/// for logs, which never holds credential material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} (step {step}): {detail}", step = reason.step().number())]
pub struct Refused {
    pub reason: Reason,
    pub detail: String,
    /// The agent, once its AIC was read.
    pub agent_id: Option<String>,
}

pub type Decision = Result<Admitted, Refused>;

pub(crate) fn refuse(reason: Reason, detail: impl Into<String>) -> Refused {
    Refused {
        reason,
        detail: detail.into(),
        agent_id: None,
    }
}

/// Steps 5 and 6 of one credential, when they passed: who delegated what
/// to whom.
#[derive(Debug)]
pub(crate) struct Delegation {
    pub agent_id: String,
    pub mode: DelegationMode,
    pub principal: String,
    /// The principal's certificate, when step 6 ran.
    pub principal_cert: Option<Arc<VerifiedPrincipal>>,
    /// The principal's PA allows representative mode (`allowedMode = 1`).
    pub representative_allowed: bool,
    pub capabilities: Vec<CapabilityClaim>,
    pub grants: Vec<CapabilityClaim>,
    /// The PA's constraints, then the AIC's (step 7's order).
    pub constraints: Vec<CapabilityClaim>,
}

impl Delegation {
    /// `own` (a credential's delegation, its own constraints only) under
    /// the principal's PA: the PA's grants, whether it allows
    /// representative mode, and its constraints before the credential's
    /// (step 7's order).
    pub(crate) fn bounded_by(pa: Option<&PrincipalAuthorization>, own: Delegation) -> Delegation {
        let Some(pa) = pa else {
            return own;
        };
        let mut constraints = claims(&pa.constraints);
        constraints.extend(own.constraints);
        Delegation {
            grants: claims(&pa.grants),
            representative_allowed: representative_allowed(Some(pa)),
            constraints,
            ..own
        }
    }
}

/// The PA a certificate carries, if any.
pub(crate) fn certificate_pa(
    cert: &warrant_ca::PrincipalCert,
) -> Result<Option<PrincipalAuthorization>, aic::DecodeError> {
    cert.extension_value(&oids::PA_EXTENSION)
        .map(PrincipalAuthorization::from_der)
        .transpose()
}

/// What one certificate's bytes decide under this engine's trust.
#[derive(Debug)]
struct Facts {
    /// Its serial and usable window; the rest of the certificate is
    /// dropped once read ([`slim`]): a cache of 100k entries holds no DER.
    chain: VerifiedPrincipal,
    organizational_units: Vec<String>,
    delegation: Result<Delegation, Refused>,
}

struct CacheInner {
    entries: HashMap<[u8; 32], Arc<Facts>>,
    order: VecDeque<[u8; 32]>,
}

/// Bounded, first in first out: a flood of distinct certificates costs
/// their verification, never unbounded memory.
struct FactsCache {
    capacity: usize,
    inner: Mutex<CacheInner>,
}

impl FactsCache {
    fn get(&self, key: &[u8; 32]) -> Option<Arc<Facts>> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.entries.get(key).cloned()
    }

    fn insert(&self, key: [u8; 32], facts: Arc<Facts>) {
        if self.capacity == 0 {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.entries.insert(key, facts).is_some() {
            return;
        }
        inner.order.push_back(key);
        while inner.entries.len() > self.capacity {
            match inner.order.pop_front() {
                Some(old) => {
                    inner.entries.remove(&old);
                }
                None => break,
            }
        }
    }

    fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entries
            .len()
    }
}

/// The decision engine: a trust bundle, the principals' certificates, the
/// configuration, and the cache of what each certificate's bytes decide.
pub struct Engine {
    trust: TrustBundle,
    principals: Principals,
    config: EngineConfig,
    cache: FactsCache,
    /// Each directory principal's certificate checked against the trust
    /// once (a pure function of both): cold decisions verify one chain
    /// fewer. Its validity window is still checked per request.
    principal_verdicts: HashMap<[u8; 32], Result<Arc<VerifiedPrincipal>, Refused>>,
    /// The token issuer's keys (Warrant's JWKS); none: tokens are refused.
    token_keys: RwLock<Option<Arc<JwkSet>>>,
    replay: ReplayCache,
}

pub(crate) fn unix_secs(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

fn chain_refusal(e: &PrincipalCertError) -> Refused {
    match e {
        PrincipalCertError::Expired => refuse(Reason::Expired, "certificate expired"),
        PrincipalCertError::NotYetValid => refuse(Reason::NotYetValid, "certificate not yet valid"),
        PrincipalCertError::Malformed(why) => {
            refuse(Reason::CredentialMalformed, format!("certificate: {why}"))
        }
        other => refuse(Reason::Untrusted, other.to_string()),
    }
}

impl Engine {
    pub fn new(trust: TrustBundle, principals: Principals, config: EngineConfig) -> Engine {
        let cache = FactsCache {
            capacity: config.cache_capacity,
            inner: Mutex::new(CacheInner {
                entries: HashMap::new(),
                order: VecDeque::new(),
            }),
        };
        let replay = ReplayCache::new(config.dpop_replay_capacity);
        let principal_verdicts = principals
            .by_key_hash
            .iter()
            .map(|(key_hash, der)| (*key_hash, verify_principal(&trust, der).map(Arc::new)))
            .collect();
        Engine {
            trust,
            principals,
            config,
            cache,
            principal_verdicts,
            token_keys: RwLock::new(None),
            replay,
        }
    }

    /// Puts the token issuer's key set in force (Warrant's
    /// `/.well-known/jwks.json`); certificates' cached facts do not depend
    /// on it and stay.
    pub fn set_token_keys(&self, keys: JwkSet) {
        *self.token_keys.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(keys));
    }

    pub(crate) fn token_keys(&self) -> Option<Arc<JwkSet>> {
        self.token_keys
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn principals(&self) -> &Principals {
        &self.principals
    }

    /// The directory's principal with this SPKI hash, verified.
    pub(crate) fn directory_principal(
        &self,
        key_hash: &[u8],
        name: &dyn std::fmt::Display,
    ) -> Result<Arc<VerifiedPrincipal>, Refused> {
        let verdict = <&[u8; 32]>::try_from(key_hash)
            .ok()
            .and_then(|k| self.principal_verdicts.get(k));
        match verdict {
            Some(v) => v.clone(),
            None => Err(refuse(
                Reason::PrincipalUnknown,
                format!("no certificate known for principal {name}"),
            )),
        }
    }

    pub(crate) fn replay_cache(&self) -> &ReplayCache {
        &self.replay
    }

    /// The bundle the engine trusts (e.g. to verify CRLs with).
    pub fn trust(&self) -> &TrustBundle {
        &self.trust
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Certificates whose facts are cached now.
    pub fn cached_certificates(&self) -> usize {
        self.cache.len()
    }

    /// Decides one request: the checks of admit.md §2 in order; the first
    /// that refuses is the answer.
    pub fn decide(
        &self,
        req: &AdmissionRequest<'_>,
        rules: &Rules,
        revocation: &RevocationState,
    ) -> Decision {
        let path =
            request_path(req.uri).map_err(|e| refuse(Reason::PathInvalid, format!("path: {e}")))?;
        let rule = rules.first_match(req.method, path);
        if let Some(rule) = rule
            && matches!(rule.requirement, Requirement::Public)
        {
            return Ok(Admitted {
                rule_line: rule.line,
                identity: None,
            });
        }
        // 1. A credential.
        let der = match req.credential {
            Credential::Absent => {
                return Err(refuse(Reason::NoCredential, "no client certificate"));
            }
            Credential::Unreadable => {
                return Err(refuse(
                    Reason::CredentialMalformed,
                    "the client certificate could not be read",
                ));
            }
            Credential::Certificate(der) => der,
            Credential::Token { token, dpop_proof } => {
                return self.decide_token(req, rule, path, revocation, token, dpop_proof);
            }
        };
        // 2. The chain (cached), then the validity window (every time).
        let facts = self.facts(der)?;
        let agent_id = facts.delegation.as_ref().ok().map(|d| d.agent_id.clone());
        let with_agent = |mut r: Refused| {
            r.agent_id.clone_from(&agent_id);
            r
        };
        facts
            .chain
            .check_validity_with_skew(req.now, self.config.clock_skew)
            .map_err(|e| with_agent(chain_refusal(&e)))?;
        let now = unix_secs(req.now);
        // 3. Revocation: fresh enough, the certificate, its principal's.
        self.revocation_fresh(revocation, now).map_err(with_agent)?;
        if revocation.is_revoked(&facts.chain.cert.serial_hex) {
            return Err(with_agent(refuse(
                Reason::Revoked,
                format!("serial {} revoked", facts.chain.cert.serial_hex),
            )));
        }
        if let Ok(Delegation {
            principal_cert: Some(p),
            ..
        }) = &facts.delegation
            && revocation.is_revoked(&p.cert.serial_hex)
        {
            return Err(with_agent(refuse(
                Reason::PrincipalRevoked,
                format!("principal serial {} revoked", p.cert.serial_hex),
            )));
        }
        // 4. Roles, when the route names them.
        if let Some(rule) = rule {
            check_roles(rule, &facts.organizational_units).map_err(with_agent)?;
        }
        // 5 and 6 (cached): the AIC and the delegation.
        let delegation = facts.delegation.as_ref().map_err(|r| r.clone())?;
        let serial = Some(facts.chain.cert.serial_hex.clone());
        self.authorize(req, rule, path, delegation, serial, None)
    }

    /// Step 3's first half: a revocation state fresh enough to rely on.
    pub(crate) fn revocation_fresh(
        &self,
        revocation: &RevocationState,
        now: i64,
    ) -> Result<(), Refused> {
        revocation
            .check_fresh(now, self.config.max_revocation_staleness.as_secs() as i64)
            .map_err(|reason| {
                refuse(
                    reason,
                    format!(
                        "revocation state last complete at {:?}",
                        revocation.complete_as_of()
                    ),
                )
            })
    }

    /// Steps 6 (the principal's validity) to 9 for a credential whose
    /// delegation was read and verified, and the identity it admits with.
    pub(crate) fn authorize(
        &self,
        req: &AdmissionRequest<'_>,
        rule: Option<&Rule>,
        path: &str,
        delegation: &Delegation,
        serial_hex: Option<String>,
        token_id: Option<String>,
    ) -> Decision {
        let with_agent = |mut r: Refused| {
            r.agent_id = Some(delegation.agent_id.clone());
            r
        };
        if let Some(p) = &delegation.principal_cert {
            p.check_validity_with_skew(req.now, self.config.clock_skew)
                .map_err(|e| {
                    with_agent(refuse(
                        Reason::PrincipalUntrusted,
                        format!("principal certificate: {e}"),
                    ))
                })?;
        }
        // 7. Constraints: the PA's, then the AIC's.
        let ctx = ConstraintContext {
            now: unix_secs(req.now),
            source_ip: req.client_ip,
            current_concurrency: req.current_concurrency,
            allow_unknown: self.config.allow_unknown_constraints,
        };
        for c in &delegation.constraints {
            evaluate_constraint(c, &ctx)
                .map_err(|why| with_agent(refuse(Reason::ConstraintDenied, why)))?;
        }
        // 8. The mode and the effective capabilities.
        let capabilities = effective_capabilities(delegation).map_err(with_agent)?;
        // 9. The route's capability.
        let Some(rule) = rule else {
            return Err(with_agent(refuse(
                Reason::NoRoute,
                format!("no rule for {} {path}", req.method),
            )));
        };
        check_route(rule, &capabilities).map_err(with_agent)?;
        Ok(Admitted {
            rule_line: rule.line,
            identity: Some(Identity {
                agent_id: delegation.agent_id.clone(),
                principal: delegation.principal.clone(),
                mode: delegation.mode,
                capabilities,
                serial_hex,
                token_id,
            }),
        })
    }

    /// The cached facts of a certificate, computed on a miss. A chain that
    /// fails is not cached; nor is a delegation whose principal is unknown,
    /// since the directory may learn it.
    fn facts(&self, der: &[u8]) -> Result<Arc<Facts>, Refused> {
        let key = aic::crypto::sha256(der);
        if let Some(f) = self.cache.get(&key) {
            return Ok(f);
        }
        let chain = self
            .trust
            .verify_client_cert(der)
            .map_err(|e| chain_refusal(&e))?;
        let organizational_units = chain.cert.organizational_units();
        let delegation = self.delegation(&chain);
        let chain = slim(chain);
        let cacheable = !matches!(&delegation, Err(r) if r.reason == Reason::PrincipalUnknown);
        let facts = Arc::new(Facts {
            chain,
            organizational_units,
            delegation,
        });
        if cacheable {
            self.cache.insert(key, Arc::clone(&facts));
        }
        Ok(facts)
    }

    /// Steps 5 and 6 for a chain-verified certificate.
    fn delegation(&self, chain: &VerifiedPrincipal) -> Result<Delegation, Refused> {
        let aic_der = chain
            .cert
            .extension_value(&oids::AIC_EXTENSION)
            .ok_or_else(|| refuse(Reason::NotAnAgent, "the certificate carries no AIC"))?;
        let aic =
            Aic::from_der(aic_der).map_err(|e| refuse(Reason::AicInvalid, format!("AIC: {e}")))?;
        let with_agent = |mut r: Refused| {
            r.agent_id = Some(aic.agent_id.clone());
            r
        };
        let pa = certificate_pa(&chain.cert)
            .map_err(|e| with_agent(refuse(Reason::AicInvalid, format!("PA: {e}"))))?;
        let principal_cert = if self.config.verify_delegation {
            Some(
                self.verify_delegation(&aic, &chain.cert.spki_der)
                    .map_err(with_agent)?,
            )
        } else {
            None
        };
        Ok(Delegation::bounded_by(
            pa.as_ref(),
            Delegation {
                principal: aic.principal_uid.realm_and_identifier(),
                capabilities: claims(&aic.capabilities),
                constraints: claims(&aic.constraints),
                principal_cert,
                mode: aic.delegation_mode,
                agent_id: aic.agent_id,
                grants: Vec::new(),
                representative_allowed: false,
            },
        ))
    }

    /// Step 6: the DA's nonce, the principal's certificate (known, trusted,
    /// not an agent's), and the signature over the TBS rebuilt from the AIC
    /// and the presented agent key.
    fn verify_delegation(
        &self,
        aic: &Aic,
        agent_spki: &[u8],
    ) -> Result<Arc<VerifiedPrincipal>, Refused> {
        let da = aic
            .delegation_authorization
            .as_ref()
            .ok_or_else(|| refuse(Reason::DelegationInvalid, "the AIC carries no delegation"))?;
        aic::model::check_nonce("delegationAuthorization.nonce", &da.nonce)
            .map_err(|e| refuse(Reason::DaNonceInvalid, e.to_string()))?;
        let principal =
            self.directory_principal(&aic.principal_uid.key_hash, &aic.principal_uid)?;
        aic::verify_aic_delegation(aic, &principal.cert.spki_der, Some(agent_spki)).map_err(
            |e| match e {
                aic::DaError::NonceLength { .. } => refuse(Reason::DaNonceInvalid, e.to_string()),
                other => refuse(Reason::DelegationInvalid, other.to_string()),
            },
        )?;
        Ok(principal)
    }
}

/// The verified certificate without what the cached facts no longer need
/// (its DER, key, subject and extensions, read into the facts already):
/// its serial and usable window stay.
fn slim(mut chain: VerifiedPrincipal) -> VerifiedPrincipal {
    let cert = &mut chain.cert;
    for bytes in [&mut cert.der, &mut cert.spki_der, &mut cert.subject_der] {
        *bytes = Vec::new();
    }
    cert.extensions = Vec::new();
    chain
}

/// A principal's certificate (DER) checked against the trust: chained to a
/// CA of the bundle, and a person's, not an agent's.
pub(crate) fn verify_principal(
    trust: &TrustBundle,
    der: &[u8],
) -> Result<VerifiedPrincipal, Refused> {
    let principal = trust.verify_client_cert(der).map_err(|e| {
        refuse(
            Reason::PrincipalUntrusted,
            format!("principal certificate: {e}"),
        )
    })?;
    if principal.cert.is_agent() {
        return Err(refuse(
            Reason::PrincipalUntrusted,
            "the principal's certificate is an agent's",
        ));
    }
    Ok(principal)
}

/// Step 4: a route that names roles needs one of them among the
/// certificate's OUs, as `role` or as the gateway role `gateway:role`.
pub(crate) fn check_roles(rule: &Rule, ous: &[String]) -> Result<(), Refused> {
    if rule.roles.is_empty() {
        return Ok(());
    }
    let held = ous.iter().any(|ou| {
        rule.roles
            .iter()
            .any(|r| ou == r || ou.strip_prefix("gateway:") == Some(r.as_str()))
    });
    if held {
        Ok(())
    } else {
        Err(refuse(
            Reason::RoleMissing,
            format!(
                "line {}: needs one of the roles {}",
                rule.line,
                rule.roles.join(",")
            ),
        ))
    }
}

/// Capability claims of the model's capabilities.
fn claims(caps: &[aic::model::Capability]) -> Vec<CapabilityClaim> {
    caps.iter().map(CapabilityClaim::from_capability).collect()
}

/// Whether a PA allows representative mode (`allowedMode = 1`).
fn representative_allowed(pa: Option<&PrincipalAuthorization>) -> bool {
    pa.and_then(|pa| pa.delegation_policy.as_ref())
        .is_some_and(|p| p.representative_allowed())
}

/// Step 8: representative mode needs the PA's `allowedMode = 1` and acts
/// with P ∩ C (the AIC's capabilities the principal's grants cover);
/// authorized mode acts with the AIC's capabilities as issued.
fn effective_capabilities(d: &Delegation) -> Result<Vec<CapabilityClaim>, Refused> {
    match d.mode {
        DelegationMode::Authorized => Ok(d.capabilities.clone()),
        DelegationMode::Representative => {
            if !d.representative_allowed {
                return Err(refuse(
                    Reason::RepresentativeDenied,
                    "representative mode without PA allowedMode = 1",
                ));
            }
            Ok(d.capabilities
                .iter()
                .filter(|c| d.grants.iter().any(|g| capability_covers(g, c)))
                .cloned()
                .collect())
        }
    }
}

/// Step 9: the route's capability (with its parameter bounds) is covered
/// by one of the effective capabilities.
fn check_route(rule: &Rule, capabilities: &[CapabilityClaim]) -> Result<(), Refused> {
    let Requirement::Capability { scheme, id } = &rule.requirement else {
        return Ok(());
    };
    let wanted = CapabilityClaim {
        scheme: scheme.clone(),
        id: id.clone(),
        params: (!rule.params.is_empty()).then(|| serde_json::Value::Object(rule.params.clone())),
    };
    if capabilities.iter().any(|c| capability_covers(c, &wanted)) {
        Ok(())
    } else {
        Err(refuse(
            Reason::CapabilityNotGranted,
            format!("line {}: needs {scheme}:{id}", rule.line),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JWS: &str = "eyJhbGciOiJFUzI1NiJ9.e30.c2ln";

    #[test]
    fn a_certificate_wins_over_a_token_and_other_schemes_are_no_credential() {
        let der = [0x30u8, 0x00];
        let (dpop, bearer) = (format!("DPoP {JWS}"), format!("Bearer {JWS}"));
        let both = Credential::from_parts(Some(Ok(&der)), Some(&dpop), None);
        assert!(matches!(both, Credential::Certificate(_)));
        let token = Credential::from_parts(None, Some(&bearer), None);
        assert!(matches!(
            token,
            Credential::Token {
                token: TokenCredential::Bearer(_),
                dpop_proof: None
            }
        ));
        let basic = Credential::from_parts(None, Some("Basic dXNlcjpwYXNz"), None);
        assert!(matches!(basic, Credential::Absent));
        let empty_cert = Credential::from_parts(Some(Err(ForwardedError::Absent)), None, None);
        assert!(matches!(empty_cert, Credential::Absent));
    }

    #[test]
    fn rejects_a_mangled_certificate_header_or_token_as_unreadable() {
        let bearer = format!("Bearer {JWS}");
        let bad_cert = Credential::from_parts(
            Some(Err(ForwardedError::Malformed("x"))),
            Some(&bearer),
            None,
        );
        assert!(matches!(bad_cert, Credential::Unreadable));
        let bad_token = Credential::from_parts(None, Some("Bearer  two.spaces.here"), None);
        assert!(matches!(bad_token, Credential::Unreadable));
    }
}
