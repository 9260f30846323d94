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
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aic::jwt::CapabilityClaim;
use aic::jwt::policy::{ConstraintContext, capability_covers, evaluate_constraint};
use aic::model::{Aic, DelegationMode, PrincipalAuthorization};
use warrant_ca::{PrincipalCertError, TrustBundle, VerifiedPrincipal, oids};

use crate::reason::Reason;
use crate::revocation::RevocationState;
use crate::rules::{Requirement, Rule, Rules, request_path};

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
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            clock_skew: Duration::from_secs(60),
            verify_delegation: true,
            allow_unknown_constraints: false,
            max_revocation_staleness: Duration::from_secs(30),
            cache_capacity: 100_000,
        }
    }
}

/// Principals' certificates by the SHA-256 of their SubjectPublicKeyInfo,
/// the key hash an AIC's `principalUid` carries: how step 6 finds the key a
/// delegation must verify under.
#[derive(Debug, Clone, Default)]
pub struct Principals {
    by_key_hash: HashMap<[u8; 32], Vec<u8>>,
}

impl Principals {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a principal's certificate (DER). Whether it is trusted is
    /// checked when a delegation cites it, against the engine's bundle.
    pub fn insert_der(&mut self, cert_der: Vec<u8>) -> Result<(), aic::DecodeError> {
        let view = aic::cert::CertificateView::from_der(&cert_der)?;
        self.by_key_hash
            .insert(aic::crypto::sha256(&view.subject_spki_der), cert_der);
        Ok(())
    }

    fn get(&self, key_hash: &[u8]) -> Option<&[u8]> {
        let key: &[u8; 32] = key_hash.try_into().ok()?;
        self.by_key_hash.get(key).map(Vec::as_slice)
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
    /// The agent certificate's serial, upper-case hex.
    pub serial_hex: String,
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

fn refuse(reason: Reason, detail: impl Into<String>) -> Refused {
    Refused {
        reason,
        detail: detail.into(),
        agent_id: None,
    }
}

/// Steps 5 and 6 of one certificate, when they passed.
#[derive(Debug)]
struct Delegation {
    aic: Aic,
    principal: String,
    /// The principal's certificate, when step 6 ran.
    principal_cert: Option<VerifiedPrincipal>,
    pa: Option<PrincipalAuthorization>,
    capabilities: Vec<CapabilityClaim>,
    grants: Vec<CapabilityClaim>,
    /// The PA's constraints, then the AIC's (step 7's order).
    constraints: Vec<CapabilityClaim>,
}

/// What one certificate's bytes decide under this engine's trust.
#[derive(Debug)]
struct Facts {
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
}

fn unix_secs(t: SystemTime) -> i64 {
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
        Engine {
            trust,
            principals,
            config,
            cache,
        }
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
        };
        // 2. The chain (cached), then the validity window (every time).
        let facts = self.facts(der)?;
        let skew = self.config.clock_skew;
        facts
            .chain
            .check_validity_with_skew(req.now, skew)
            .map_err(|e| chain_refusal(&e))?;
        let now = unix_secs(req.now);
        let agent_id = facts
            .delegation
            .as_ref()
            .ok()
            .map(|d| d.aic.agent_id.clone());
        let with_agent = |mut r: Refused| {
            r.agent_id.clone_from(&agent_id);
            r
        };
        // 3. Revocation: fresh enough, the certificate, its principal's.
        revocation
            .check_fresh(now, self.config.max_revocation_staleness.as_secs() as i64)
            .map_err(|reason| {
                with_agent(refuse(
                    reason,
                    format!(
                        "revocation state last complete at {:?}",
                        revocation.complete_as_of()
                    ),
                ))
            })?;
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
        if let Some(p) = &delegation.principal_cert {
            p.check_validity_with_skew(req.now, skew).map_err(|e| {
                with_agent(refuse(
                    Reason::PrincipalUntrusted,
                    format!("principal certificate: {e}"),
                ))
            })?;
        }
        // 7. Constraints: the PA's, then the AIC's.
        let ctx = ConstraintContext {
            now,
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
                agent_id: delegation.aic.agent_id.clone(),
                principal: delegation.principal.clone(),
                mode: delegation.aic.delegation_mode,
                capabilities,
                serial_hex: facts.chain.cert.serial_hex.clone(),
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
        let pa = chain
            .cert
            .extension_value(&oids::PA_EXTENSION)
            .map(PrincipalAuthorization::from_der)
            .transpose()
            .map_err(|e| with_agent(refuse(Reason::AicInvalid, format!("PA: {e}"))))?;
        let principal_cert = if self.config.verify_delegation {
            Some(
                self.verify_delegation(&aic, &chain.cert.spki_der)
                    .map_err(with_agent)?,
            )
        } else {
            None
        };
        let claims = |caps: &[aic::model::Capability]| {
            caps.iter()
                .map(CapabilityClaim::from_capability)
                .collect::<Vec<_>>()
        };
        let mut constraints = pa
            .as_ref()
            .map(|p| claims(&p.constraints))
            .unwrap_or_default();
        constraints.extend(claims(&aic.constraints));
        Ok(Delegation {
            principal: aic.principal_uid.realm_and_identifier(),
            capabilities: claims(&aic.capabilities),
            grants: pa.as_ref().map(|p| claims(&p.grants)).unwrap_or_default(),
            constraints,
            principal_cert,
            pa,
            aic,
        })
    }

    /// Step 6: the DA's nonce, the principal's certificate (known, trusted,
    /// not an agent's), and the signature over the TBS rebuilt from the AIC
    /// and the presented agent key.
    fn verify_delegation(
        &self,
        aic: &Aic,
        agent_spki: &[u8],
    ) -> Result<VerifiedPrincipal, Refused> {
        let da = aic
            .delegation_authorization
            .as_ref()
            .ok_or_else(|| refuse(Reason::DelegationInvalid, "the AIC carries no delegation"))?;
        aic::model::check_nonce("delegationAuthorization.nonce", &da.nonce)
            .map_err(|e| refuse(Reason::DaNonceInvalid, e.to_string()))?;
        let principal_der = self
            .principals
            .get(&aic.principal_uid.key_hash)
            .ok_or_else(|| {
                refuse(
                    Reason::PrincipalUnknown,
                    format!("no certificate known for principal {}", aic.principal_uid),
                )
            })?;
        let principal = self.trust.verify_client_cert(principal_der).map_err(|e| {
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
        aic::verify_aic_delegation(aic, &principal.cert.spki_der, Some(agent_spki)).map_err(
            |e| match e {
                aic::DaError::NonceLength { .. } => refuse(Reason::DaNonceInvalid, e.to_string()),
                other => refuse(Reason::DelegationInvalid, other.to_string()),
            },
        )?;
        Ok(principal)
    }
}

/// Step 4: a route that names roles needs one of them among the
/// certificate's OUs, as `role` or as the gateway role `gateway:role`.
fn check_roles(rule: &Rule, ous: &[String]) -> Result<(), Refused> {
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

/// Step 8: representative mode needs the PA's `allowedMode = 1` and acts
/// with P ∩ C (the AIC's capabilities the principal's grants cover);
/// authorized mode acts with the AIC's capabilities as issued.
fn effective_capabilities(d: &Delegation) -> Result<Vec<CapabilityClaim>, Refused> {
    match d.aic.delegation_mode {
        DelegationMode::Authorized => Ok(d.capabilities.clone()),
        DelegationMode::Representative => {
            let allowed =
                d.pa.as_ref()
                    .and_then(|pa| pa.delegation_policy.as_ref())
                    .is_some_and(|p| p.representative_allowed());
            if !allowed {
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
