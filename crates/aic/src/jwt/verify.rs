//! The verification pipeline, in the order draft-wei-aic-jwt-02 gives:
//! outer signature/header → DA signature → key_hash → time → issuer/audience →
//! cnf → constraints → capability → representative mode.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use serde::Serialize;

use super::claims::*;
use super::jws;
use super::policy::{self, ConstraintContext};
use super::{DA_TYP, KeyHashAlg, OUTER_TYP, key_hash};
use crate::model::{DelegationMode, PrincipalAuthorization, bounds};

/// The pipeline steps; a denial names the first one that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Outer token format, header (`typ`, `kid`, `alg`) and issuer signature.
    OuterSignature,
    /// DA JWT header and principal signature, and its consistency with the outer token.
    DaSignature,
    /// `principal.key_hash` names the principal key.
    KeyHash,
    /// `nbf` / `iat` / `exp` and lifetime limits.
    Time,
    /// Expected `iss` and `aud`.
    IssuerAudience,
    /// `cnf.jkt` (and a v3 agent key binding) against the presenter key.
    Cnf,
    /// Authorization constraints (token and PA), ANDed, and chain_depth ≤ max_depth.
    Constraints,
    /// The requested capability is granted.
    Capability,
    /// Representative mode: PA allows it and capabilities ⊆ grants.
    Representative,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::OuterSignature => "outer_signature",
            Step::DaSignature => "da_signature",
            Step::KeyHash => "key_hash",
            Step::Time => "time",
            Step::IssuerAudience => "issuer_audience",
            Step::Cnf => "cnf",
            Step::Constraints => "constraints",
            Step::Capability => "capability",
            Step::Representative => "representative",
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything the verifier needs from its caller. The library has no clock
/// and no network: time, source address and concurrency are inputs.
#[derive(Debug, Clone)]
pub struct VerifyOptions<'a> {
    pub issuer_spki_der: &'a [u8],
    pub principal_spki_der: &'a [u8],
    pub now: i64,
    /// Allowed clock skew in seconds for `nbf`/`iat`/`exp`.
    pub skew_secs: i64,
    pub expected_issuer: Option<&'a str>,
    pub expected_audience: Option<&'a str>,
    pub presenter_spki_der: Option<&'a [u8]>,
    pub source_ip: Option<std::net::IpAddr>,
    pub current_concurrency: Option<u64>,
    pub allow_unknown_constraints: bool,
    pub requested_capability: Option<CapabilityClaim>,
    pub principal_authorization: Option<&'a PrincipalAuthorization>,
}

impl<'a> VerifyOptions<'a> {
    pub const DEFAULT_SKEW_SECS: i64 = 60;

    pub fn new(issuer_spki_der: &'a [u8], principal_spki_der: &'a [u8], now: i64) -> Self {
        VerifyOptions {
            issuer_spki_der,
            principal_spki_der,
            now,
            skew_secs: Self::DEFAULT_SKEW_SECS,
            expected_issuer: None,
            expected_audience: None,
            presenter_spki_der: None,
            source_ip: None,
            current_concurrency: None,
            allow_unknown_constraints: false,
            requested_capability: None,
            principal_authorization: None,
        }
    }
}

/// Who is acting, as far as the token was read before a decision.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Parties {
    /// The identity the action is attributed to: the outer `sub` (the agent in
    /// authorized mode, the principal in representative mode).
    pub actor: Option<String>,
    /// The agent that executes (`agent_id`).
    pub executor: Option<String>,
    /// `realm:id` of the delegating principal.
    pub principal: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedAicJwt {
    pub parties: Parties,
    pub outer: OuterClaims,
    pub da: DaClaims,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{step}: {reason}")]
pub struct Denied {
    pub step: Step,
    pub reason: String,
    pub parties: Parties,
}

/// The result in the shape `warrant aic-jwt verify` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub permit: bool,
    pub actor: Option<String>,
    pub executor: Option<String>,
    pub principal: Option<String>,
    pub failed_step: Option<Step>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl From<&Result<VerifiedAicJwt, Denied>> for Decision {
    fn from(r: &Result<VerifiedAicJwt, Denied>) -> Self {
        match r {
            Ok(v) => Decision {
                permit: true,
                actor: v.parties.actor.clone(),
                executor: v.parties.executor.clone(),
                principal: v.parties.principal.clone(),
                failed_step: None,
                reason: None,
            },
            Err(d) => Decision {
                permit: false,
                actor: d.parties.actor.clone(),
                executor: d.parties.executor.clone(),
                principal: d.parties.principal.clone(),
                failed_step: Some(d.step),
                reason: Some(d.reason.clone()),
            },
        }
    }
}

struct Pipeline {
    parties: Parties,
}

impl Pipeline {
    fn deny(&self, step: Step, reason: impl Into<String>) -> Denied {
        Denied {
            step,
            reason: reason.into(),
            parties: self.parties.clone(),
        }
    }

    fn check(&self, step: Step, ok: bool, reason: impl FnOnce() -> String) -> Result<(), Denied> {
        if ok {
            Ok(())
        } else {
            Err(self.deny(step, reason()))
        }
    }
}

/// Verifies an AIC-JWT. Every step runs in the spec's order; the first failure
/// is returned with its step and the parties read so far.
pub fn verify_aic_jwt(token: &str, opts: &VerifyOptions<'_>) -> Result<VerifiedAicJwt, Denied> {
    let verified = verify_aic_jwt_credential(token, opts)?;
    authorize_verified(verified, opts)
}

/// Steps 1 to 6 alone (signatures, key hash, time, issuer and audience,
/// `cnf`): whether the token is an authentic credential of its presenter.
/// What it may do (steps 7 to 9) is left to the caller, which may run its
/// own checks in between (admission checks revocation first).
pub fn verify_aic_jwt_credential(
    token: &str,
    opts: &VerifyOptions<'_>,
) -> Result<VerifiedAicJwt, Denied> {
    let mut p = Pipeline {
        parties: Parties::default(),
    };

    // 1. Outer signature and header.
    let outer_jws = jws::parse(token, OUTER_TYP, true)
        .map_err(|e| p.deny(Step::OuterSignature, e.to_string()))?;
    outer_jws
        .verify(opts.issuer_spki_der)
        .map_err(|e| p.deny(Step::OuterSignature, format!("issuer: {e}")))?;
    let outer: OuterClaims = serde_json::from_slice(&outer_jws.payload)
        .map_err(|e| p.deny(Step::OuterSignature, format!("claims: {e}")))?;
    p.parties.actor = Some(outer.sub.clone());
    p.parties.principal = Some(outer.aic.principal.realm_and_id());

    // 2. DA signature with the principal key, and what the DA must agree on with the outer token.
    let da_jws = jws::parse(&outer.da, DA_TYP, false)
        .map_err(|e| p.deny(Step::DaSignature, e.to_string()))?;
    da_jws
        .verify(opts.principal_spki_der)
        .map_err(|e| p.deny(Step::DaSignature, format!("principal: {e}")))?;
    let da: DaClaims = serde_json::from_slice(&da_jws.payload)
        .map_err(|e| p.deny(Step::DaSignature, format!("DA claims: {e}")))?;
    p.parties.executor = Some(da.agent_id.clone());
    check_da_consistency(&p, &outer, &da)?;

    // 3. key_hash binds the principal claim to the principal key.
    for (which, claim) in [
        ("aic.principal", &outer.aic.principal),
        ("da.principal", &da.principal),
    ] {
        let alg = KeyHashAlg::from_name(&claim.hash_alg).ok_or_else(|| {
            p.deny(
                Step::KeyHash,
                format!("{which}.hash_alg {:?} unsupported", claim.hash_alg),
            )
        })?;
        let expected = key_hash(opts.principal_spki_der, alg)
            .map_err(|e| p.deny(Step::KeyHash, e.to_string()))?;
        p.check(Step::KeyHash, expected == claim.key_hash, || {
            format!("{which}.key_hash does not match the principal key")
        })?;
    }

    // 4. Time.
    let (now, skew) = (opts.now, opts.skew_secs);
    p.check(Step::Time, now + skew >= outer.iat, || {
        format!("iat {} is in the future", outer.iat)
    })?;
    if let Some(nbf) = outer.nbf {
        p.check(Step::Time, now + skew >= nbf, || {
            format!("not before {nbf}")
        })?;
    }
    p.check(Step::Time, now < outer.exp + skew, || {
        format!("expired at {}", outer.exp)
    })?;
    p.check(Step::Time, now < da.exp + skew, || {
        format!("delegation expired at {}", da.exp)
    })?;
    p.check(Step::Time, outer.exp > outer.iat, || {
        "exp must follow iat".into()
    })?;
    p.check(
        Step::Time,
        outer.exp - outer.iat <= da.requested_lifetime,
        || {
            format!(
                "token lifetime {} exceeds requested_lifetime {}",
                outer.exp - outer.iat,
                da.requested_lifetime
            )
        },
    )?;
    p.check(Step::Time, outer.exp <= da.exp, || {
        "token outlives its delegation".into()
    })?;

    // 5. Issuer / audience.
    if let Some(iss) = opts.expected_issuer {
        p.check(Step::IssuerAudience, outer.iss == iss, || {
            format!("iss {:?} is not {iss:?}", outer.iss)
        })?;
        p.check(
            Step::IssuerAudience,
            da.aud.as_ref().is_none_or(|a| a.contains(iss)),
            || format!("the delegation is not addressed to {iss:?}"),
        )?;
    }
    if let Some(aud) = opts.expected_audience {
        p.check(
            Step::IssuerAudience,
            outer.aud.as_ref().is_some_and(|a| a.contains(aud)),
            || format!("aud does not include {aud:?}"),
        )?;
    }

    // 6. cnf.jkt (and a v3 agent key binding) against the presenter's key.
    if let Some(presenter) = opts.presenter_spki_der {
        let jkt = super::jwk::jwk_thumbprint(presenter)
            .map_err(|e| p.deny(Step::Cnf, format!("presenter key: {e}")))?;
        let cnf = outer
            .cnf
            .as_ref()
            .ok_or_else(|| p.deny(Step::Cnf, "token has no cnf.jkt"))?;
        p.check(Step::Cnf, cnf.jkt == jkt, || {
            "cnf.jkt does not match the presenter key".into()
        })?;
        if let Some(binding) = &da.agent_key_binding {
            let alg = KeyHashAlg::from_name(&binding.hash_alg).ok_or_else(|| {
                p.deny(
                    Step::Cnf,
                    format!("agent_key_binding.hash_alg {:?}", binding.hash_alg),
                )
            })?;
            let h = key_hash(presenter, alg).map_err(|e| p.deny(Step::Cnf, e.to_string()))?;
            p.check(Step::Cnf, h == binding.key_hash, || {
                "agent_key_binding does not match the presenter key".into()
            })?;
        }
    }

    Ok(VerifiedAicJwt {
        parties: p.parties,
        outer,
        da,
    })
}

/// Steps 7 to 9 on a token that passed [`verify_aic_jwt_credential`].
fn authorize_verified(
    verified: VerifiedAicJwt,
    opts: &VerifyOptions<'_>,
) -> Result<VerifiedAicJwt, Denied> {
    let p = Pipeline {
        parties: verified.parties.clone(),
    };
    let outer = &verified.outer;
    let now = opts.now;
    // 7. Constraints: the token's and the PA's, ANDed.
    let ctx = ConstraintContext {
        now,
        source_ip: opts.source_ip,
        current_concurrency: opts.current_concurrency,
        allow_unknown: opts.allow_unknown_constraints,
    };
    let pa_constraints: Vec<CapabilityClaim> = opts
        .principal_authorization
        .map(|pa| {
            pa.constraints
                .iter()
                .map(CapabilityClaim::from_capability)
                .collect()
        })
        .unwrap_or_default();
    if let Some(max) = outer.aic.max_depth {
        p.check(
            Step::Constraints,
            (0..=max).contains(&outer.aic.chain_depth),
            || format!("chain_depth {} outside 0..={max}", outer.aic.chain_depth),
        )?;
    }
    for c in outer.aic.constraints.iter().chain(&pa_constraints) {
        policy::evaluate_constraint(c, &ctx).map_err(|e| p.deny(Step::Constraints, e))?;
    }

    // 8. The requested capability.
    if let Some(req) = &opts.requested_capability {
        p.check(
            Step::Capability,
            outer
                .aic
                .capabilities
                .iter()
                .any(|g| policy::capability_covers(g, req)),
            || format!("{}:{} is not granted", req.scheme, req.id),
        )?;
    }

    // 9. Representative mode needs the principal's permission.
    if outer.aic.delegation_mode == DelegationMode::Representative {
        let pa = opts.principal_authorization.ok_or_else(|| {
            p.deny(
                Step::Representative,
                "representative mode needs the principal's PA",
            )
        })?;
        p.check(
            Step::Representative,
            pa.delegation_policy
                .as_ref()
                .is_some_and(|d| d.representative_allowed()),
            || "PA delegationPolicy.allowedMode does not allow representative mode".into(),
        )?;
        let grants: Vec<CapabilityClaim> = pa
            .grants
            .iter()
            .map(CapabilityClaim::from_capability)
            .collect();
        for cap in &outer.aic.capabilities {
            p.check(
                Step::Representative,
                grants.iter().any(|g| policy::capability_covers(g, cap)),
                || format!("{}:{} exceeds the principal's grants", cap.scheme, cap.id),
            )?;
        }
    }

    Ok(verified)
}

/// The rules a DA JWT's claims must keep on their own (draft-wei-aic-jwt-02,
/// `aic.md` §3 and its size bounds): `ver` and the key binding agree, `iss`
/// is the principal, `sub` is the agent (authorized) or the principal
/// (representative; the agent then named by `agent_id` alone; a DA naming
/// the agent there, as Warrant emitted before, is read too), `jti` is the
/// 32-byte nonce, `iat = ts`, `exp = ts + requested_lifetime` within
/// 1..=86400. Returns the nonce; `Err` says which rule failed.
pub fn check_da_claims(da: &DaClaims) -> Result<[u8; 32], String> {
    let check = |ok: bool, why: &dyn Fn() -> String| if ok { Ok(()) } else { Err(why()) };
    check(matches!(da.ver, 2 | 3), &|| {
        format!("DA ver {} unsupported", da.ver)
    })?;
    check((da.ver == 3) == da.agent_key_binding.is_some(), &|| {
        "DA ver 3 requires agent_key_binding, ver 2 forbids it".into()
    })?;
    check(da.iss == da.principal.realm_and_id(), &|| {
        "DA iss is not the principal".into()
    })?;
    let within = |s: &str, (lo, hi): (usize, usize)| (lo..=hi).contains(&s.chars().count());
    check(within(&da.agent_id, bounds::AGENT_ID), &|| {
        format!(
            "DA agent_id must be {}..={} characters",
            bounds::AGENT_ID.0,
            bounds::AGENT_ID.1
        )
    })?;
    check(
        within(&da.principal.realm, bounds::REALM) && within(&da.principal.id, bounds::IDENTIFIER),
        &|| "DA principal realm or id is empty or too long".into(),
    )?;
    check(da.capabilities.len() <= bounds::MAX_CAPABILITIES, &|| {
        format!("DA has more than {} capabilities", bounds::MAX_CAPABILITIES)
    })?;
    check(da.constraints.len() <= bounds::MAX_CONSTRAINTS, &|| {
        format!("DA has more than {} constraints", bounds::MAX_CONSTRAINTS)
    })?;
    match da.delegation_mode {
        DelegationMode::Authorized => {
            check(da.sub == da.agent_id, &|| "DA sub is not agent_id".into())?;
        }
        DelegationMode::Representative => {
            check(
                da.sub == da.principal.realm_and_id() || da.sub == da.agent_id,
                &|| "DA sub is neither the principal nor agent_id".into(),
            )?;
        }
    }
    let nonce = URL_SAFE_NO_PAD
        .decode(&da.nonce)
        .map_err(|_| "DA nonce is not base64url".to_string())?;
    let nonce: [u8; 32] = nonce
        .as_slice()
        .try_into()
        .map_err(|_| format!("DA nonce is {} bytes, not 32", nonce.len()))?;
    check(da.jti == da.nonce, &|| "DA jti is not the nonce".into())?;
    check(da.iat == da.ts, &|| "DA iat is not ts".into())?;
    check(
        (1..=bounds::MAX_REQUESTED_LIFETIME).contains(&da.requested_lifetime),
        &|| {
            format!(
                "DA requested_lifetime {} outside 1..=86400",
                da.requested_lifetime
            )
        },
    )?;
    check(da.exp == da.ts + da.requested_lifetime, &|| {
        "DA exp is not ts + requested_lifetime".into()
    })?;
    Ok(nonce)
}

fn check_da_consistency(p: &Pipeline, outer: &OuterClaims, da: &DaClaims) -> Result<(), Denied> {
    let s = Step::DaSignature;
    check_da_claims(da).map_err(|reason| p.deny(s, reason))?;
    p.check(s, outer.jti == da.jti, || {
        "token jti is not the DA nonce".into()
    })?;
    p.check(s, outer.aic.principal == da.principal, || {
        "token principal differs from the DA".into()
    })?;
    p.check(s, outer.aic.delegation_mode == da.delegation_mode, || {
        "token delegation_mode differs from the DA".into()
    })?;
    match da.delegation_mode {
        DelegationMode::Authorized => {
            p.check(s, outer.sub == da.agent_id, || {
                "sub is not the delegated agent".into()
            })?;
        }
        DelegationMode::Representative => {
            p.check(s, outer.sub == da.principal.realm_and_id(), || {
                "sub is not the principal".into()
            })?;
            p.check(
                s,
                outer.act.as_ref().is_some_and(|a| a.sub == da.agent_id),
                || "act.sub is not the delegated agent".into(),
            )?;
        }
    }
    // The issuer may narrow what the principal delegated, never widen it.
    for c in &outer.aic.capabilities {
        p.check(s, da.capabilities.contains(c), || {
            format!("capability {}:{} is not in the DA", c.scheme, c.id)
        })?;
    }
    for c in &da.constraints {
        p.check(s, outer.aic.constraints.contains(c), || {
            format!("token drops DA constraint {}:{}", c.scheme, c.id)
        })?;
    }
    Ok(())
}
