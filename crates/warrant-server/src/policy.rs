//! Pure decisions of agent issuance (ca.md §4 steps 5–7 and the validity
//! rule of §2). No IO, no clock: the caller passes `now`, so every rule is
//! unit-tested exhaustively here and the orchestration stays a sequence of calls.
//!
//! A refusal is a [`PolicyError`] naming the rule and the request field it
//! concerns; the HTTP edge maps it to its error key.

use std::fmt;

/// Why a policy rule refused a request. Each message starts with the request
/// field it concerns, as API error details do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// Step 7b: a requested capability no grant covers.
    #[error("capabilities: {0} is not granted to the principal")]
    CapabilityNotGranted(CapName),
    /// A body PA grant the principal certificate's grants do not cover.
    #[error("principal_authorization.grants: {0} is not in the principal certificate's grants")]
    GrantNotInCertificate(CapName),
    /// Step 7a: representative mode under a policy that allows authorized
    /// mode only.
    #[error("delegation_mode: the principal's policy allows authorized mode only")]
    RepresentativeModeDenied,
    /// A delegation mode that is neither authorized (0) nor representative (1).
    #[error("delegation_mode: {0} is not 0 or 1")]
    UnknownDelegationMode(i64),
    /// Step 7c: the principal already has `max` active agents.
    #[error("principal has {active} active agent certificates; policy allows {max}")]
    MaxAgentsExceeded { active: u64, max: u64 },
    /// A body PA policy looser than the principal certificate's.
    #[error(
        "principal_authorization.delegation_policy.{0}: wider than the principal certificate's"
    )]
    PolicyWiderThanCertificate(PolicyField),
    /// Step 5: the DA's timestamp is outside the allowed skew.
    #[error("user_auth_timestamp: {delta} s {side}; allowed skew is {skew} s")]
    TimestampOutsideSkew {
        delta: u64,
        side: SkewSide,
        skew: u64,
    },
    /// Step 5: the delegation's own lifetime is over.
    #[error(
        "user_auth_timestamp: the delegation ended {ago} s ago (timestamp + user_auth_lifetime)"
    )]
    DelegationEnded { ago: i64 },
    /// The delegation ends before a certificate could start.
    #[error("user_auth_timestamp: the delegation ends before a certificate could start")]
    DelegationEndsBeforeStart,
    /// A requested validity of zero days.
    #[error("validity: must be at least 1 day")]
    ZeroValidity,
    /// The issuing CA's own validity is over: nothing can be issued.
    #[error("issuing CA has expired")]
    IssuerExpired,
}

/// A capability as a refusal names it: `scheme:id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapName(pub String);

impl CapName {
    fn of(cap: &CapRef<'_>) -> Self {
        CapName(format!("{}:{}", cap.scheme_id, cap.capability_id))
    }
}

impl fmt::Display for CapName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The DelegationPolicy field a body PA may not widen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyField {
    AllowedMode,
    MaxAgents,
    MaxSessionHours,
}

impl fmt::Display for PolicyField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PolicyField::AllowedMode => "allowed_mode",
            PolicyField::MaxAgents => "max_agents",
            PolicyField::MaxSessionHours => "max_session_hours",
        })
    }
}

/// On which side of `now` a timestamp outside the skew lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkewSide {
    Past,
    Future,
}

impl fmt::Display for SkewSide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SkewSide::Past => "old",
            SkewSide::Future => "in the future",
        })
    }
}

/// One capability as the policy sees it: a borrowed view, so the same rules
/// serve AIC structures and request fields without conversions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapRef<'a> {
    pub scheme_id: &'a str,
    pub capability_id: &'a str,
    pub parameters: Option<&'a [u8]>,
}

/// The delegation policy in force (DelegationPolicy, with its DEFAULTs applied
/// when the principal's PA has none: one agent, authorized mode only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyView {
    pub allowed_mode: i64,
    pub max_agents: i64,
    pub max_session_hours: Option<i64>,
}

impl Default for PolicyView {
    fn default() -> Self {
        Self {
            allowed_mode: 0,
            max_agents: 1,
            max_session_hours: None,
        }
    }
}

impl PolicyView {
    /// `max_agents` as a count; a negative value (never valid in a PA)
    /// allows none.
    pub fn agents_allowed(&self) -> u64 {
        u64::try_from(self.max_agents).unwrap_or(0)
    }
}

pub const MODE_AUTHORIZED: i64 = 0;
pub const MODE_REPRESENTATIVE: i64 = 1;

/// A grant covers a request when scheme and id match and the grant either
/// leaves parameters open or fixes exactly the requested ones.
pub fn grant_covers(grant: &CapRef<'_>, requested: &CapRef<'_>) -> bool {
    grant.scheme_id == requested.scheme_id
        && grant.capability_id == requested.capability_id
        && match grant.parameters {
            None => true,
            Some(g) => requested.parameters == Some(g),
        }
}

/// Step 7b: every requested capability must be covered by a grant.
pub fn check_capabilities_granted(
    requested: &[CapRef<'_>],
    grants: &[CapRef<'_>],
) -> Result<(), PolicyError> {
    for cap in requested {
        if !grants.iter().any(|g| grant_covers(g, cap)) {
            return Err(PolicyError::CapabilityNotGranted(CapName::of(cap)));
        }
    }
    Ok(())
}

/// Step 7a: representative mode needs `allowed_mode = 1`.
pub fn check_delegation_mode(mode: i64, policy: &PolicyView) -> Result<(), PolicyError> {
    match mode {
        MODE_AUTHORIZED => Ok(()),
        MODE_REPRESENTATIVE if policy.allowed_mode == MODE_REPRESENTATIVE => Ok(()),
        MODE_REPRESENTATIVE => Err(PolicyError::RepresentativeModeDenied),
        other => Err(PolicyError::UnknownDelegationMode(other)),
    }
}

/// Step 7c: the new certificate would be agent number `active + 1`.
pub fn check_max_agents(active: u64, policy: &PolicyView) -> Result<(), PolicyError> {
    let max = policy.agents_allowed();
    if active >= max {
        return Err(PolicyError::MaxAgentsExceeded { active, max });
    }
    Ok(())
}

/// A body PA may only narrow the certificate's PA: its grants must be covered
/// by the certificate's grants and its policy may not be looser. The result is
/// the policy to enforce (the narrower one).
pub fn narrow_policy(cert: &PolicyView, body: &PolicyView) -> Result<PolicyView, PolicyError> {
    let wider = PolicyError::PolicyWiderThanCertificate;
    if body.allowed_mode > cert.allowed_mode {
        return Err(wider(PolicyField::AllowedMode));
    }
    if body.max_agents > cert.max_agents {
        return Err(wider(PolicyField::MaxAgents));
    }
    let max_session_hours = match (cert.max_session_hours, body.max_session_hours) {
        (Some(c), Some(b)) if b > c => return Err(wider(PolicyField::MaxSessionHours)),
        (Some(c), Some(b)) => Some(c.min(b)),
        (c, b) => c.or(b),
    };
    Ok(PolicyView {
        allowed_mode: body.allowed_mode,
        max_agents: body.max_agents,
        max_session_hours,
    })
}

/// Body grants must be covered by the certificate grants (then they replace them).
pub fn check_grants_narrow(
    body_grants: &[CapRef<'_>],
    cert_grants: &[CapRef<'_>],
) -> Result<(), PolicyError> {
    for g in body_grants {
        if !cert_grants.iter().any(|c| grant_covers(c, g)) {
            return Err(PolicyError::GrantNotInCertificate(CapName::of(g)));
        }
    }
    Ok(())
}

/// Step 5: `|now − timestamp| ≤ skew` (`skew = 0` disables this window
/// only) and, whatever the skew, the delegation has not ended:
/// `now ≤ timestamp + requestedLifetime + skew`. A captured DA is worthless
/// once its own lifetime is over.
pub fn check_freshness(
    now: i64,
    timestamp: i64,
    skew: u64,
    da_lifetime: u64,
) -> Result<(), PolicyError> {
    if skew != 0 {
        let delta = now.abs_diff(timestamp);
        if delta > skew {
            let side = if timestamp > now {
                SkewSide::Future
            } else {
                SkewSide::Past
            };
            return Err(PolicyError::TimestampOutsideSkew { delta, side, skew });
        }
    }
    let ends = delegation_end(timestamp, da_lifetime);
    if now > ends.saturating_add(skew as i64) {
        return Err(PolicyError::DelegationEnded {
            ago: now.saturating_sub(ends),
        });
    }
    Ok(())
}

/// When a delegation ends: `timestamp + requestedLifetime` (0 means 3600).
pub fn delegation_end(timestamp: i64, da_lifetime: u64) -> i64 {
    timestamp.saturating_add(effective_da_lifetime(da_lifetime) as i64)
}

/// Step 6: how long a nonce must be remembered — as long as a request carrying
/// it could still pass step 5, plus a buffer for clock drift between nodes.
/// With the freshness check disabled the DA's own lifetime bounds it.
pub fn nonce_expiry(timestamp: i64, skew: u64, buffer: u64, da_lifetime: u64) -> i64 {
    let window = if skew == 0 { da_lifetime.max(1) } else { skew };
    timestamp
        .saturating_add(window as i64)
        .saturating_add(buffer as i64)
}

/// An encoded requestedLifetime of 0 means 3600 (aic.md §1).
pub fn effective_da_lifetime(requested: u64) -> u64 {
    if requested == 0 { 3600 } else { requested }
}

/// Agent certificate validity (ca.md §2):
/// `min(agent_proxy_max_validity, DA requestedLifetime, PA max_session_hours)`,
/// and never past the issuing CA's own NotAfter. Returns seconds from `now`.
pub fn agent_validity_secs(
    now: i64,
    config_max: u64,
    da_lifetime: u64,
    max_session_hours: Option<i64>,
    issuer_not_after: i64,
) -> Result<u64, PolicyError> {
    let secs = config_max
        .min(crate::config::AGENT_PROXY_HARD_CAP_SECS)
        .min(effective_da_lifetime(da_lifetime));
    Ok(within_session(secs, max_session_hours).min(issuer_time_left(now, issuer_not_after)?))
}

/// `secs`, no longer than the PA's `max_session_hours` when it sets one
/// (0 or absent: no limit).
pub fn within_session(secs: u64, max_session_hours: Option<i64>) -> u64 {
    match max_session_hours.filter(|h| *h > 0) {
        Some(h) => secs.min((h as u64).saturating_mul(3600)),
        None => secs,
    }
}

/// The longest `exp − iat` of an AIC-JWT: `token.max_lifetime`, within the
/// draft's 24 h and the PA's `max_session_hours` (the DA's own lifetime and
/// end are applied where the claims are built). At least one second.
pub fn token_lifetime_secs(config_max: u64, max_session_hours: Option<i64>) -> i64 {
    let secs = config_max.min(warrant_ca::MAX_TOKEN_LIFETIME_SECS as u64);
    within_session(secs, max_session_hours).max(1) as i64
}

/// The agent certificate's NotAfter (Unix seconds): `now` plus
/// [`agent_validity_secs`], and never past the end of the delegation it
/// carries, so a certificate cannot outlive its DA. A delegation that ends
/// before a certificate could start is stale.
pub fn agent_not_after(
    now: i64,
    config_max: u64,
    da_timestamp: i64,
    da_lifetime: u64,
    max_session_hours: Option<i64>,
    issuer_not_after: i64,
) -> Result<i64, PolicyError> {
    let secs = agent_validity_secs(
        now,
        config_max,
        da_lifetime,
        max_session_hours,
        issuer_not_after,
    )?;
    let not_after = now
        .saturating_add(secs as i64)
        .min(delegation_end(da_timestamp, da_lifetime));
    if not_after <= now {
        return Err(PolicyError::DelegationEndsBeforeStart);
    }
    Ok(not_after)
}

/// The PA an agent certificate carries and the policy in force. The agent's
/// PA keeps every constraint and extension of the principal certificate's
/// PA; a body PA may only narrow it: its grants replace the certificate's
/// only when each is covered by one of them, its constraints are added, and
/// its policy may not be looser.
pub fn narrow_pa(
    cert: Option<&aic::PrincipalAuthorization>,
    body: Option<&aic::PrincipalAuthorization>,
) -> Result<(Option<aic::PrincipalAuthorization>, PolicyView), PolicyError> {
    let cert_policy = policy_view(cert.and_then(|p| p.delegation_policy.as_ref()));
    let Some(body) = body else {
        return Ok((cert.cloned(), cert_policy));
    };
    let cert_grants: &[aic::Capability] = cert.map_or(&[], |p| &p.grants);
    check_grants_narrow(&cap_refs(&body.grants), &cap_refs(cert_grants))?;
    let body_policy = match &body.delegation_policy {
        Some(p) => policy_view(Some(p)),
        None => cert_policy,
    };
    let policy = narrow_policy(&cert_policy, &body_policy)?;
    let mut constraints = cert.map(|p| p.constraints.clone()).unwrap_or_default();
    for c in &body.constraints {
        if !constraints.contains(c) {
            constraints.push(c.clone());
        }
    }
    let has_policy =
        body.delegation_policy.is_some() || cert.is_some_and(|p| p.delegation_policy.is_some());
    let pa = aic::PrincipalAuthorization {
        version: 1,
        grants: body.grants.clone(),
        constraints,
        delegation_policy: has_policy.then_some(aic::DelegationPolicy {
            version: 1,
            max_agents: policy.max_agents,
            allowed_mode: policy.allowed_mode,
            max_session_hours: policy.max_session_hours,
        }),
        extensions: cert.map(|p| p.extensions.clone()).unwrap_or_default(),
    };
    Ok((Some(pa), policy))
}

/// Borrowed views of AIC capabilities for the rules above.
pub fn cap_refs(caps: &[aic::Capability]) -> Vec<CapRef<'_>> {
    caps.iter()
        .map(|c| CapRef {
            scheme_id: &c.scheme_id,
            capability_id: &c.capability_id,
            parameters: c.parameters.as_deref(),
        })
        .collect()
}

/// A PA's delegation policy with the DEFAULTs applied when it has none.
pub fn policy_view(p: Option<&aic::DelegationPolicy>) -> PolicyView {
    match p {
        Some(p) => PolicyView {
            allowed_mode: p.allowed_mode,
            max_agents: p.max_agents,
            max_session_hours: p.max_session_hours,
        },
        None => PolicyView::default(),
    }
}

/// Person / server certificate validity in seconds: requested days (or the
/// default), capped by config and by the CA's NotAfter.
pub fn leaf_validity_secs(
    now: i64,
    requested_days: Option<u32>,
    default_days: u32,
    max_days: u32,
    issuer_not_after: i64,
) -> Result<u64, PolicyError> {
    let days = match requested_days {
        Some(0) => return Err(PolicyError::ZeroValidity),
        Some(d) => d.min(max_days),
        None => default_days.min(max_days),
    };
    Ok((u64::from(days) * 86400).min(issuer_time_left(now, issuer_not_after)?))
}

/// Seconds the issuing CA is still valid at `now`; none left is a refusal.
fn issuer_time_left(now: i64, issuer_not_after: i64) -> Result<u64, PolicyError> {
    match issuer_not_after.saturating_sub(now) {
        left if left > 0 => Ok(left as u64),
        _ => Err(PolicyError::IssuerExpired),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap<'a>(s: &'a str, i: &'a str) -> CapRef<'a> {
        CapRef {
            scheme_id: s,
            capability_id: i,
            parameters: None,
        }
    }

    #[test]
    fn capabilities_subset_of_grants_pass() {
        let grants = [cap("db", "read"), cap("db", "write")];
        assert!(check_capabilities_granted(&[cap("db", "read")], &grants).is_ok());
        assert!(check_capabilities_granted(&[], &grants).is_ok());
    }

    #[test]
    fn rejects_capability_not_granted() {
        let e = check_capabilities_granted(&[cap("db", "drop")], &[cap("db", "read")]).unwrap_err();
        assert_eq!(
            e,
            PolicyError::CapabilityNotGranted(CapName("db:drop".into()))
        );
        assert_eq!(
            e.to_string(),
            "capabilities: db:drop is not granted to the principal"
        );
        let e = check_capabilities_granted(&[cap("db", "read")], &[]).unwrap_err();
        assert!(matches!(e, PolicyError::CapabilityNotGranted(_)));
    }

    #[test]
    fn grant_with_parameters_only_covers_same_parameters() {
        let g = CapRef {
            parameters: Some(b"{\"max\":1}"),
            ..cap("db", "q")
        };
        let same = CapRef {
            parameters: Some(b"{\"max\":1}"),
            ..cap("db", "q")
        };
        let other = CapRef {
            parameters: Some(b"{\"max\":9}"),
            ..cap("db", "q")
        };
        assert!(grant_covers(&g, &same));
        assert!(!grant_covers(&g, &other));
        assert!(!grant_covers(&g, &cap("db", "q")));
        assert!(grant_covers(&cap("db", "q"), &other));
    }

    #[test]
    fn rejects_representative_without_policy() {
        let p = PolicyView::default();
        assert_eq!(
            check_delegation_mode(1, &p).unwrap_err(),
            PolicyError::RepresentativeModeDenied
        );
        assert!(check_delegation_mode(0, &p).is_ok());
        let rep = PolicyView {
            allowed_mode: 1,
            ..p
        };
        assert!(check_delegation_mode(1, &rep).is_ok());
        assert_eq!(
            check_delegation_mode(2, &rep).unwrap_err(),
            PolicyError::UnknownDelegationMode(2)
        );
    }

    #[test]
    fn rejects_max_agents_exceeded() {
        let p = PolicyView {
            max_agents: 2,
            ..Default::default()
        };
        assert!(check_max_agents(1, &p).is_ok());
        assert_eq!(
            check_max_agents(2, &p).unwrap_err(),
            PolicyError::MaxAgentsExceeded { active: 2, max: 2 }
        );
        let zero = PolicyView {
            max_agents: 0,
            ..Default::default()
        };
        assert!(check_max_agents(0, &zero).is_err());
    }

    #[test]
    fn body_policy_may_only_narrow() {
        let cert = PolicyView {
            allowed_mode: 1,
            max_agents: 5,
            max_session_hours: Some(8),
        };
        let narrow = PolicyView {
            allowed_mode: 0,
            max_agents: 2,
            max_session_hours: Some(1),
        };
        assert_eq!(narrow_policy(&cert, &narrow).unwrap(), narrow);
        let wide_mode = PolicyView {
            allowed_mode: 1,
            ..narrow
        };
        assert_eq!(
            narrow_policy(&narrow, &wide_mode).unwrap_err(),
            PolicyError::PolicyWiderThanCertificate(PolicyField::AllowedMode)
        );
        let wide_agents = PolicyView {
            max_agents: 6,
            ..cert
        };
        assert_eq!(
            narrow_policy(&cert, &wide_agents).unwrap_err(),
            PolicyError::PolicyWiderThanCertificate(PolicyField::MaxAgents)
        );
        let wide_hours = PolicyView {
            max_session_hours: Some(9),
            ..cert
        };
        assert_eq!(
            narrow_policy(&cert, &wide_hours).unwrap_err(),
            PolicyError::PolicyWiderThanCertificate(PolicyField::MaxSessionHours)
        );
        let unset_hours = PolicyView {
            max_session_hours: None,
            ..cert
        };
        assert_eq!(
            narrow_policy(&cert, &unset_hours)
                .unwrap()
                .max_session_hours,
            Some(8)
        );
    }

    #[test]
    fn body_grants_must_be_in_certificate() {
        let cert = [cap("db", "read")];
        assert!(check_grants_narrow(&[cap("db", "read")], &cert).is_ok());
        assert_eq!(
            check_grants_narrow(&[cap("db", "write")], &cert).unwrap_err(),
            PolicyError::GrantNotInCertificate(CapName("db:write".into()))
        );
    }

    #[test]
    fn rejects_stale_and_future_timestamps() {
        assert!(check_freshness(1000, 940, 60, 3600).is_ok());
        assert!(check_freshness(1000, 1060, 60, 3600).is_ok());
        let old = check_freshness(1000, 939, 60, 3600).unwrap_err();
        assert_eq!(
            old.to_string(),
            "user_auth_timestamp: 61 s old; allowed skew is 60 s"
        );
        assert_eq!(
            check_freshness(1000, 1061, 60, 3600).unwrap_err(),
            PolicyError::TimestampOutsideSkew {
                delta: 61,
                side: SkewSide::Future,
                skew: 60
            }
        );
        assert!(
            check_freshness(1000, 0, 0, 3600).is_ok(),
            "skew 0 disables the window, and the DA has not ended"
        );
    }

    #[test]
    fn rejects_an_ended_delegation_whatever_the_skew() {
        // Ended 2 h ago, window check disabled: still refused.
        let e = check_freshness(10_000, 10_000 - 7200 - 600, 0, 600).unwrap_err();
        assert_eq!(e, PolicyError::DelegationEnded { ago: 7200 });
        // Skew 0: the last second of the delegation passes, the next does not.
        assert!(check_freshness(1600, 1000, 0, 600).is_ok());
        assert!(check_freshness(1601, 1000, 0, 600).is_err());
        // With a window, the window ends first: timestamp + skew.
        assert!(check_freshness(1060, 1000, 60, 30).is_ok());
        assert!(check_freshness(1061, 1000, 60, 30).is_err());
        // Lifetime 0 means one hour.
        assert!(check_freshness(1000 + 3600, 1000, 0, 0).is_ok());
        assert!(check_freshness(1000 + 3601, 1000, 0, 0).is_err());
    }

    #[test]
    fn agent_not_after_never_passes_the_delegation_end() {
        let far = 10_000_000;
        // DA made 100 s ago for 600 s: the certificate ends with it.
        assert_eq!(
            agent_not_after(1100, 3600, 1000, 600, None, far).unwrap(),
            1600
        );
        // A fresh DA: the usual minimum.
        assert_eq!(
            agent_not_after(1000, 300, 1000, 600, None, far).unwrap(),
            1300
        );
        // Accepted within the skew after the end: nothing left to issue.
        assert_eq!(
            agent_not_after(1620, 3600, 1000, 600, None, far).unwrap_err(),
            PolicyError::DelegationEndsBeforeStart
        );
    }

    fn pa(
        grants: &[(&str, &str)],
        constraints: &[(&str, &str)],
        policy: Option<(i64, i64)>,
    ) -> aic::PrincipalAuthorization {
        let caps = |v: &[(&str, &str)]| {
            v.iter()
                .map(|(s, i)| aic::Capability {
                    scheme_id: s.to_string(),
                    capability_id: i.to_string(),
                    parameters: None,
                })
                .collect()
        };
        aic::PrincipalAuthorization {
            version: 1,
            grants: caps(grants),
            constraints: caps(constraints),
            delegation_policy: policy.map(|(mode, max)| aic::DelegationPolicy {
                version: 1,
                max_agents: max,
                allowed_mode: mode,
                max_session_hours: None,
            }),
            extensions: Vec::new(),
        }
    }

    #[test]
    fn body_pa_keeps_every_constraint_of_the_certificate() {
        let cert = pa(
            &[("db", "read"), ("db", "write")],
            &[("net", "vpn-only")],
            Some((1, 5)),
        );
        let body = pa(&[("db", "read")], &[("time", "office-hours")], Some((0, 2)));
        let (agent, policy) = narrow_pa(Some(&cert), Some(&body)).unwrap();
        let agent = agent.unwrap();
        assert_eq!(agent.grants, body.grants, "grants narrowed");
        assert_eq!(
            agent.constraints,
            [cert.constraints.clone(), body.constraints.clone()].concat(),
            "the certificate's constraints kept, the body's added"
        );
        assert_eq!((policy.allowed_mode, policy.max_agents), (0, 2));
        // A body without constraints or policy drops nothing.
        let bare = pa(&[("db", "read")], &[], None);
        let (agent, policy) = narrow_pa(Some(&cert), Some(&bare)).unwrap();
        let agent = agent.unwrap();
        assert_eq!(agent.constraints, cert.constraints);
        assert_eq!(agent.delegation_policy, cert.delegation_policy);
        assert_eq!((policy.allowed_mode, policy.max_agents), (1, 5));
    }

    #[test]
    fn rejects_a_body_pa_that_widens() {
        let cert = pa(&[("db", "read")], &[], Some((0, 1)));
        let more_grants = pa(&[("db", "read"), ("db", "drop")], &[], None);
        assert_eq!(
            narrow_pa(Some(&cert), Some(&more_grants)).unwrap_err(),
            PolicyError::GrantNotInCertificate(CapName("db:drop".into()))
        );
        let more_agents = pa(&[("db", "read")], &[], Some((0, 9)));
        assert_eq!(
            narrow_pa(Some(&cert), Some(&more_agents)).unwrap_err(),
            PolicyError::PolicyWiderThanCertificate(PolicyField::MaxAgents)
        );
        let representative = pa(&[("db", "read")], &[], Some((1, 1)));
        assert_eq!(
            narrow_pa(Some(&cert), Some(&representative)).unwrap_err(),
            PolicyError::PolicyWiderThanCertificate(PolicyField::AllowedMode)
        );
        // No PA on the certificate: nothing to narrow into.
        assert_eq!(
            narrow_pa(None, Some(&pa(&[("db", "read")], &[], None))).unwrap_err(),
            PolicyError::GrantNotInCertificate(CapName("db:read".into()))
        );
    }

    #[test]
    fn without_a_body_pa_the_certificate_pa_is_the_agents() {
        let cert = pa(&[("db", "read")], &[("net", "vpn-only")], Some((1, 3)));
        let (agent, policy) = narrow_pa(Some(&cert), None).unwrap();
        assert_eq!(agent.as_ref(), Some(&cert));
        assert_eq!(policy.max_agents, 3);
        let (agent, policy) = narrow_pa(None, None).unwrap();
        assert!(agent.is_none());
        assert_eq!(policy, PolicyView::default());
    }

    #[test]
    fn nonce_kept_while_it_could_pass_freshness() {
        assert_eq!(nonce_expiry(1000, 60, 180, 3600), 1240);
        assert_eq!(nonce_expiry(1000, 0, 180, 600), 1780);
    }

    #[test]
    fn the_token_lifetime_keeps_within_the_session_limit() {
        assert_eq!(token_lifetime_secs(3600, None), 3600);
        assert_eq!(token_lifetime_secs(3 * 3600, Some(2)), 2 * 3600);
        assert_eq!(token_lifetime_secs(3600, Some(0)), 3600);
        assert_eq!(token_lifetime_secs(999_999, None), 86_400);
    }

    #[test]
    fn agent_validity_is_the_minimum() {
        let far = 10_000_000;
        assert_eq!(agent_validity_secs(0, 3600, 600, None, far).unwrap(), 600);
        assert_eq!(
            agent_validity_secs(0, 3600, 0, None, far).unwrap(),
            3600,
            "0 means 3600"
        );
        assert_eq!(
            agent_validity_secs(0, 86400, 86400, Some(2), far).unwrap(),
            7200
        );
        assert_eq!(
            agent_validity_secs(0, 999_999, 86400, None, far).unwrap(),
            86400,
            "hard cap"
        );
        assert_eq!(
            agent_validity_secs(0, 3600, 3600, None, 100).unwrap(),
            100,
            "CA NotAfter"
        );
        assert_eq!(
            agent_validity_secs(200, 3600, 3600, None, 100).unwrap_err(),
            PolicyError::IssuerExpired
        );
    }

    #[test]
    fn leaf_validity_caps() {
        let far = 1_000_000_000;
        assert_eq!(
            leaf_validity_secs(0, None, 365, 825, far).unwrap(),
            365 * 86400
        );
        assert_eq!(
            leaf_validity_secs(0, Some(1000), 365, 825, far).unwrap(),
            825 * 86400
        );
        assert_eq!(leaf_validity_secs(0, Some(10), 365, 825, 5).unwrap(), 5);
        assert_eq!(
            leaf_validity_secs(0, Some(0), 365, 825, far).unwrap_err(),
            PolicyError::ZeroValidity
        );
    }
}
