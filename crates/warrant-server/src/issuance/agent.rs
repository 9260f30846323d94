//! Agent (`agent-proxy`) issuance as typed stages, in the order of ca.md §4.
//!
//! Each stage is a value made only by the previous one, so a later check
//! cannot run before an earlier one passed:
//!
//! ```text
//! ParsedAgentRequest ─verify_principal→ VerifiedPrincipal ─verify_delegation→
//! VerifiedDelegation ─authorize→ Authorized ─sign_and_commit→ answer
//! ```
//!
//! Everything that costs little and needs no secret runs first: parsing,
//! the principal's chain and record, the DA signature, freshness and policy.
//! Only then is the nonce reserved and, last, a key generated and a
//! certificate signed, so an invalid request never costs a key generation
//! and never burns a nonce. The nonce's [`NonceReservation`] releases it on
//! every path that does not reach the commit, a dropped request included.

use super::{
    IssueRequest, IssueResponse, KeySource, ParsedDelegation, SubjectKey, aic_field_error,
    ca_error, chain_json, check_len, common_bounds, issuing_ca, parse_delegation, rfc3339, sign,
    unix, write_error,
};
use crate::auth::sha256;
use crate::auth::{Caller, Role};
use crate::error::{ApiError, ErrorKey};
use crate::limits::{AgentTurn, PrincipalKey};
use crate::policy::{self, PolicyView, cap_refs};
use crate::state::{AppState, store_error};
use serde_json::value::RawValue;
use std::sync::Arc;
use std::time::SystemTime;
use warrant_ca::{DnAttribute, IssuingCa, Profile, SanEntry, Subject};
use warrant_store::{CertRecord, CertStatus, IssuanceRecord, NonceReservation, NonceRow};

/// Entry point for `profile = agent-proxy`.
pub(super) async fn issue_agent<'a>(
    state: &'a AppState,
    caller: &Caller,
    req: IssueRequest,
) -> Result<IssueResponse<'a>, ApiError> {
    let parsed = ParsedAgentRequest::parse(state, caller, &req)?;
    let now_time = SystemTime::now();
    let now = unix(now_time);
    let principal = parsed.verify_principal(state, caller, now_time).await?;
    let delegation = principal.verify_delegation(state, now)?;
    let authorized = delegation.authorize(state, now).await?;
    authorized.sign_and_commit(state, now).await
}

/// The names an agent certificate carries. None is free text from the
/// request: the CN is the DA's agent id, O and C come from the server's
/// configuration, the OUs (gateway roles) are picked among the configured
/// ones, and the only SAN is the SPIFFE ID the server builds in its own
/// trust domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentNames {
    pub subject: Subject,
    pub san: Vec<SanEntry>,
    pub spiffe_id: Option<String>,
}

/// What the server configures about agent names.
#[derive(Debug, Clone, Copy)]
pub struct NamePolicy<'a> {
    pub default_org: &'a str,
    pub default_country: &'a str,
    pub gateway_roles: &'a [String],
    pub spiffe_trust_domain: &'a str,
}

/// Derives an agent's names (pure). `req.subject` may only pick gateway
/// roles (its OUs) among `policy.gateway_roles` and repeat what the server
/// sets anyway (CN = agent id, O, C); `req.cn` may only repeat the agent id;
/// `req.san` must be empty; `req.spiffe_trust_domain` may only repeat the
/// configured one. Anything else is refused naming the field.
pub fn agent_names(
    req: &IssueRequest,
    agent_id: &str,
    policy: &NamePolicy<'_>,
) -> Result<AgentNames, ApiError> {
    if let Some(cn) = req.cn.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        if cn != agent_id {
            return Err(ApiError::field(
                "cn",
                "an agent's CN is its agent_id (from the signed delegation); omit cn or repeat agent_id",
            ));
        }
    }
    let mut roles: Vec<&str> = Vec::new();
    if let Some(text) = req
        .subject
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let requested = Subject::parse(text).map_err(ca_error)?;
        for (attr, value) in requested.attributes() {
            let expected = match attr {
                DnAttribute::OrganizationalUnit => {
                    let role = policy
                        .gateway_roles
                        .iter()
                        .find(|r| *r == value)
                        .ok_or_else(|| {
                            ApiError::field(
                                "subject",
                                format!(
                                    "OU {value:?} is not a gateway role this CA grants (issuance.agent_gateway_roles: {})",
                                    policy.gateway_roles.join(", ")
                                ),
                            )
                        })?;
                    if !roles.contains(&role.as_str()) {
                        roles.push(role);
                    }
                    continue;
                }
                DnAttribute::CommonName => agent_id,
                DnAttribute::Organization => policy.default_org,
                DnAttribute::Country => policy.default_country,
                DnAttribute::State | DnAttribute::Locality => "",
            };
            if value != expected {
                return Err(ApiError::field(
                    "subject",
                    format!(
                        "{}={value:?}: an agent's {} is set by the CA{}",
                        attr.key(),
                        attr.key(),
                        if expected.is_empty() {
                            String::new()
                        } else {
                            format!(" ({expected:?})")
                        }
                    ),
                ));
            }
        }
    }
    if roles.is_empty() {
        let default = policy.gateway_roles.first().ok_or_else(|| {
            ApiError::detail(ErrorKey::Internal, "issuance.agent_gateway_roles is empty")
        })?;
        roles.push(default);
    }
    if req.san.as_deref().is_some_and(|s| !s.trim().is_empty()) {
        return Err(ApiError::field(
            "san",
            "agent certificates carry no requested SANs (set is_spiffe for a SPIFFE ID)",
        ));
    }
    let requested_td = req
        .spiffe_trust_domain
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    if let Some(td) = requested_td {
        if td != policy.spiffe_trust_domain {
            return Err(ApiError::field(
                "spiffe_trust_domain",
                "the trust domain is the CA's (issuance.spiffe_trust_domain), not the request's",
            ));
        }
    }
    let mut san = Vec::new();
    let spiffe_id = if req.is_spiffe.unwrap_or(false) {
        if policy.spiffe_trust_domain.is_empty() {
            return Err(ApiError::field(
                "is_spiffe",
                "this CA has no SPIFFE trust domain (issuance.spiffe_trust_domain)",
            ));
        }
        let id = warrant_ca::spiffe_id(policy.spiffe_trust_domain, agent_id).map_err(ca_error)?;
        san.push(SanEntry::Uri(id.clone()));
        Some(id)
    } else {
        None
    };
    let subject = Subject::for_agent(agent_id, &roles, policy.default_org, policy.default_country)
        .map_err(ca_error)?;
    warrant_ca::check_profile_subject(Profile::AgentProxy, &subject).map_err(ca_error)?;
    Ok(AgentNames {
        subject,
        san,
        spiffe_id,
    })
}

/// Steps 1–2: the caller may delegate at all, and every field is parsed and
/// bounded. No IO.
struct ParsedAgentRequest<'a> {
    da: ParsedDelegation,
    ca: &'a Arc<IssuingCa>,
    chain_pem: &'a RawValue,
    names: AgentNames,
    key: KeySource,
    principal_pem: Vec<u8>,
}

impl<'a> ParsedAgentRequest<'a> {
    fn parse(state: &'a AppState, caller: &Caller, req: &IssueRequest) -> Result<Self, ApiError> {
        if let Some(der) = &caller.client_cert_der {
            if super::cert_has_aic(der) {
                return Err(ApiError::detail(
                    ErrorKey::Forbidden,
                    "an agent certificate cannot delegate to another agent",
                ));
            }
        }
        common_bounds(req)?;
        let da = parse_delegation(req)?;
        let ca = issuing_ca(state, req.ca.as_deref())?;
        // Looked up before anything is stored: no failure after the commit.
        let chain_pem = chain_json(state, ca)?;
        let iss = &state.config.config.issuance;
        let names = agent_names(
            req,
            &da.agent_id,
            &NamePolicy {
                default_org: &iss.default_org,
                default_country: &iss.default_country,
                gateway_roles: &iss.agent_gateway_roles,
                spiffe_trust_domain: &iss.spiffe_trust_domain,
            },
        )?;
        let key = KeySource::parse(req.csr_pem.as_deref(), req.key_type.as_deref())?;
        if da.key_binding && !matches!(key, KeySource::Csr { .. }) {
            return Err(ApiError::field(
                "agent_key_binding",
                "a v2 DA binds the agent's own key: send it as csr_pem",
            ));
        }
        let principal_pem = match req
            .user_cert_pem
            .as_deref()
            .filter(|s| !s.trim().is_empty())
        {
            Some(p) => {
                check_len("user_cert_pem", p, warrant_ca::MAX_PRINCIPAL_CERT_LEN)?;
                p.as_bytes().to_vec()
            }
            None => caller.client_cert_der.clone().ok_or_else(|| {
                ApiError::detail(
                    ErrorKey::AicRequiresAuth,
                    "user_cert_pem: required (or present the principal certificate over mTLS)",
                )
            })?,
        };
        Ok(ParsedAgentRequest {
            da,
            ca,
            chain_pem,
            names,
            key,
            principal_pem,
        })
    }

    /// Step 3: the principal certificate chains to the root, is valid now,
    /// has a record (no record: refused) that is not revoked, and the DA's
    /// principal UID is that record's canonical UID: realm, identifier and
    /// key hash.
    async fn verify_principal(
        self,
        state: &AppState,
        caller: &Caller,
        now: SystemTime,
    ) -> Result<VerifiedPrincipal<'a>, ApiError> {
        let cert = warrant_ca::verify_principal_cert(&self.principal_pem, &state.hierarchy, now)
            .map_err(|e| untrusted(e.to_string()))?;
        if cert.is_agent() {
            return Err(untrusted("an agent certificate cannot be a principal"));
        }
        if caller.role == Role::CertificateHolder
            && caller.client_cert_der.as_deref() != Some(cert.der.as_slice())
        {
            return Err(ApiError::detail(
                ErrorKey::Forbidden,
                "a certificate holder may only delegate with its own certificate",
            ));
        }
        let row = state
            .store
            .cert_status(&cert.issuing_ca, &cert.serial_hex)
            .await
            .map_err(store_error)?
            .ok_or_else(|| untrusted("principal certificate has no record in this CA's store"))?;
        if row.status == CertStatus::Revoked {
            return Err(untrusted("principal certificate is revoked"));
        }
        let canonical = row
            .principal_uid
            .ok_or_else(|| untrusted("the certificate is not a person (principal) certificate"))?;
        let recorded = aic::PrincipalUid::parse(&canonical)
            .map_err(|e| untrusted(format!("recorded principal_uid is unreadable: {e}")))?;
        let uid = &self.da.principal_uid;
        if uid.realm != recorded.realm
            || uid.identifier != recorded.identifier
            || uid.key_hash != recorded.key_hash
        {
            return Err(untrusted(format!(
                "principal_uid does not match the principal certificate's ({canonical})"
            )));
        }
        if !aic::key_hash_matches(uid, &cert.spki_der) {
            return Err(untrusted(
                "principal_uid keyHash does not match the principal certificate's key",
            ));
        }
        let cert_pa = match cert.extension_value(&warrant_ca::oids::PA_EXTENSION) {
            Some(der) => Some(aic::PrincipalAuthorization::from_der(der).map_err(|e| {
                untrusted(format!(
                    "principal certificate's PA extension is malformed: {e}"
                ))
            })?),
            None => None,
        };
        Ok(VerifiedPrincipal {
            request: self,
            spki_der: cert.spki_der,
            canonical,
            cert_pa,
        })
    }
}

/// A principal certificate that passed step 3.
struct VerifiedPrincipal<'a> {
    request: ParsedAgentRequest<'a>,
    spki_der: Vec<u8>,
    /// The principal's canonical UID (its certificate's record): agents are
    /// counted, limited and revoked under it.
    canonical: String,
    cert_pa: Option<aic::PrincipalAuthorization>,
}

impl<'a> VerifiedPrincipal<'a> {
    /// Steps 4–5: the TBS rebuilt exactly as the reference does, the DA
    /// signature verified once, then freshness and the delegation's end.
    fn verify_delegation(
        self,
        state: &AppState,
        now: i64,
    ) -> Result<VerifiedDelegation<'a>, ApiError> {
        let da = &self.request.da;
        let agent_spki = match (&self.request.key, da.key_binding) {
            (KeySource::Csr { spki_der }, true) => Some(spki_der.clone()),
            _ => None,
        };
        let tbs = aic::DelegationRequest {
            agent_id: da.agent_id.clone(),
            principal_uid: da.principal_uid.clone(),
            reason: aic::Reason::new(&da.reason_code, &da.reason_description),
            capabilities: da.capabilities.clone(),
            delegation_mode: aic::DelegationMode::from_i64(da.mode, "delegation_mode")
                .map_err(|e| aic_field_error(&e))?,
            constraints: da.constraints.clone(),
            requested_lifetime: da.lifetime,
            timestamp: da.timestamp,
            nonce: da.nonce,
            agent_spki_der: agent_spki,
        }
        .tbs()
        .map_err(|e| aic_field_error(&e))?;
        aic::verify_delegation(
            &tbs.to_der(),
            &da.signature_algorithm,
            &da.signature,
            &self.spki_der,
        )
        .map_err(|e| {
            ApiError::detail(
                ErrorKey::DelegationSignatureInvalid,
                format!("user_auth_signature: {e}"),
            )
        })?;
        let skew = state.config.config.issuance.da_max_timestamp_skew;
        policy::check_freshness(now, da.timestamp, skew, da.lifetime as u64)?;
        Ok(VerifiedDelegation {
            principal: self,
            tbs,
        })
    }
}

/// A DA whose signature, freshness and end passed steps 4–5.
struct VerifiedDelegation<'a> {
    principal: VerifiedPrincipal<'a>,
    tbs: aic::DelegationAuthTbs,
}

impl<'a> VerifiedDelegation<'a> {
    /// Steps 6–7: policy from the principal certificate's PA (a body PA only
    /// narrows), the per-principal limit, `max_agents`, then the nonce.
    async fn authorize(self, state: &'a AppState, now: i64) -> Result<Authorized<'a>, ApiError> {
        let p = &self.principal;
        let da = &p.request.da;
        let iss = &state.config.config.issuance;
        let (agent_pa, effective) = policy::narrow_pa(p.cert_pa.as_ref(), da.body_pa.as_ref())?;
        let grants: &[aic::Capability] = agent_pa.as_ref().map_or(&[], |pa| &pa.grants);
        policy::check_delegation_mode(da.mode, &effective)?;
        policy::check_capabilities_granted(&cap_refs(&da.capabilities), &cap_refs(grants))?;
        let not_after = policy::agent_not_after(
            now,
            iss.agent_proxy_max_validity,
            da.timestamp,
            da.lifetime as u64,
            effective.max_session_hours,
            unix(p.request.ca.not_after()),
        )?;
        // Only a proven DA counts against the principal's rate.
        state
            .limits
            .check_principal(PrincipalKey::Delegator(p.canonical.clone()))?;
        let turn = count_agents(state, &p.canonical, &effective, now).await?;
        let nonce_expires = policy::nonce_expiry(
            da.timestamp,
            iss.da_max_timestamp_skew,
            iss.nonce_retention_buffer,
            policy::effective_da_lifetime(da.lifetime as u64),
        );
        let reservation = match state.store.reserve_nonce(&da.nonce, nonce_expires, now) {
            Ok(r) => r,
            Err(warrant_store::NonceError::Replayed) => {
                return Err(ApiError::detail(
                    ErrorKey::DaNonceReplayed,
                    "user_auth_nonce: already consumed",
                ));
            }
            Err(warrant_store::NonceError::Full) => {
                return Err(
                    ApiError::detail(ErrorKey::Overloaded, "nonce ledger full").with_retry_after(1)
                );
            }
        };
        Ok(Authorized {
            delegation: self,
            agent_pa,
            not_after,
            turn,
            reservation,
            nonce_expires,
        })
    }
}

/// Step 6's `max_agents`: the principal's turn, held until this request is
/// answered, so the next agent of the same principal is counted only once
/// this one is committed or refused.
async fn count_agents<'s>(
    state: &'s AppState,
    principal: &str,
    policy: &PolicyView,
    now: i64,
) -> Result<AgentTurn<'s>, ApiError> {
    let turn = state.limits.agent_turn(principal).await;
    // Read before the count, so that a bound never predates a foreign write.
    let epoch = state.store.foreign_write_epoch();
    let active = match turn.active_agents_below(policy.agents_allowed(), epoch) {
        Some(bound) => bound,
        None => {
            let exact = state
                .store
                .count_active_agents(principal, now)
                .await
                .map_err(store_error)?;
            turn.counted(exact, epoch);
            exact
        }
    };
    policy::check_max_agents(active, policy)?;
    Ok(turn)
}

/// Every check passed and the nonce is reserved.
struct Authorized<'a> {
    delegation: VerifiedDelegation<'a>,
    agent_pa: Option<aic::PrincipalAuthorization>,
    not_after: i64,
    turn: AgentTurn<'a>,
    reservation: NonceReservation<'a>,
    nonce_expires: i64,
}

impl<'a> Authorized<'a> {
    /// Step 8: the key (generated only now), the certificate, the durable
    /// commit of its row with the nonce's, then the answer.
    async fn sign_and_commit(
        self,
        state: &'a AppState,
        now: i64,
    ) -> Result<IssueResponse<'a>, ApiError> {
        let Authorized {
            delegation,
            agent_pa,
            not_after,
            turn,
            reservation,
            nonce_expires,
        } = self;
        let VerifiedDelegation { principal, tbs } = delegation;
        let VerifiedPrincipal {
            request, canonical, ..
        } = principal;
        let ParsedAgentRequest {
            da,
            ca,
            chain_pem,
            names,
            key,
            ..
        } = request;
        // Generated only now, after every check passed.
        let SubjectKey { spki_der, key_pem } = key.into_key(state).await?;
        let depth = aic::DelegationDepthControl {
            chain_depth: 0,
            max_depth: 1,
        };
        let aic_der = tbs
            .into_aic(
                da.signature_algorithm.clone(),
                da.signature,
                vec![depth.to_ext_field()],
            )
            .to_der();
        let mut extensions = vec![warrant_ca::ExtraExtension::non_critical(
            warrant_ca::oids::AIC_EXTENSION,
            aic_der,
        )];
        if let Some(pa) = &agent_pa {
            extensions.push(warrant_ca::ExtraExtension::non_critical(
                warrant_ca::oids::PA_EXTENSION,
                pa.to_der(),
            ));
        }
        let issued = sign(
            state,
            ca,
            Profile::AgentProxy,
            &names.subject,
            &names.san,
            &spki_der,
            now,
            not_after.saturating_sub(now).max(0) as u64,
            &extensions,
        )?;
        let record = CertRecord {
            ca: ca.name().to_string(),
            serial: issued.serial_hex.clone(),
            common_name: da.agent_id.clone(),
            profile: Profile::AgentProxy.as_str().to_string(),
            status: CertStatus::Valid,
            not_before: unix(issued.not_before),
            not_after: unix(issued.not_after),
            der: issued.der,
            principal_uid: Some(canonical.clone()),
            agent_id: Some(da.agent_id.clone()),
            key_hash: sha256(&spki_der).to_vec(),
            created_at: now,
            revoked_at: None,
            revocation_reason: None,
        };
        let submitted = IssuanceRecord {
            cert: record,
            nonce: Some(NonceRow {
                nonce: da.nonce,
                expires_at: nonce_expires,
                principal_uid: canonical.clone(),
            }),
        };
        // The record carries the nonce on: `submit` keeps it consumed once
        // the database holds it and releases it on any other outcome,
        // including this future being dropped. No await lies between the
        // hand-over and the submit's first poll.
        reservation.hand_over();
        state
            .store
            .submit(submitted)
            .await
            .inspect(|()| turn.committed())
            .inspect_err(|_| turn.outcome_unknown())
            .map_err(write_error)?;
        crate::metrics::cert_issued(ca.name(), Profile::AgentProxy.as_str());
        Ok(IssueResponse {
            serial_number: issued.serial_hex,
            common_name: da.agent_id,
            cert_pem: issued.pem,
            key_pem,
            chain_pem,
            ca: ca.name(),
            spiffe_id: names.spiffe_id,
            principal_uid: Some(canonical),
            profile: Profile::AgentProxy.as_str(),
            not_before: rfc3339(unix(issued.not_before)),
            not_after: rfc3339(unix(issued.not_after)),
        })
    }
}

fn untrusted(detail: impl Into<String>) -> ApiError {
    ApiError::detail(ErrorKey::PrincipalCertUntrusted, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles() -> Vec<String> {
        vec!["gateway:reader".into(), "gateway:writer".into()]
    }

    fn names(req: IssueRequest, td: &str) -> Result<AgentNames, ApiError> {
        let roles = roles();
        agent_names(
            &req,
            "report-bot",
            &NamePolicy {
                default_org: "Example",
                default_country: "US",
                gateway_roles: &roles,
                spiffe_trust_domain: td,
            },
        )
    }

    fn subject(s: &str) -> IssueRequest {
        IssueRequest {
            subject: Some(s.into()),
            ..Default::default()
        }
    }

    fn detail(e: ApiError) -> String {
        assert_eq!(e.key, ErrorKey::InvalidField);
        e.detail.unwrap_or_default()
    }

    #[test]
    fn agent_subject_is_built_by_the_ca() {
        let n = names(IssueRequest::default(), "").unwrap();
        assert_eq!(
            n.subject,
            Subject::parse("/C=US/O=Example/OU=gateway:reader/CN=report-bot").unwrap()
        );
        assert!(n.san.is_empty() && n.spiffe_id.is_none());
        let n = names(
            subject("/O=Example/OU=gateway:writer/OU=gateway:reader/CN=report-bot"),
            "",
        )
        .unwrap();
        let ous: Vec<_> = n.subject.values(DnAttribute::OrganizationalUnit).collect();
        assert_eq!(ous, ["gateway:writer", "gateway:reader"]);
    }

    #[test]
    fn rejects_a_gateway_role_the_ca_does_not_grant() {
        let d = detail(names(subject("/OU=gateway:admin/CN=report-bot"), "").unwrap_err());
        assert!(d.starts_with("subject: OU \"gateway:admin\""), "{d}");
    }

    #[test]
    fn rejects_subject_attributes_other_than_the_cas() {
        for s in [
            "/CN=ceo/OU=gateway:reader",
            "/O=Other/OU=gateway:reader",
            "/C=FR/OU=gateway:reader",
            "/L=Paris/OU=gateway:reader",
        ] {
            let d = detail(names(subject(s), "").unwrap_err());
            assert!(d.starts_with("subject:"), "{s}: {d}");
        }
    }

    #[test]
    fn rejects_a_cn_other_than_the_agent_id() {
        let req = IssueRequest {
            cn: Some("admin".into()),
            ..Default::default()
        };
        assert!(detail(names(req, "").unwrap_err()).starts_with("cn:"));
        let same = IssueRequest {
            cn: Some("report-bot".into()),
            ..Default::default()
        };
        assert!(names(same, "").is_ok());
    }

    #[test]
    fn rejects_requested_sans() {
        let req = IssueRequest {
            san: Some("DNS:bank.example".into()),
            ..Default::default()
        };
        assert!(detail(names(req, "").unwrap_err()).starts_with("san:"));
    }

    #[test]
    fn spiffe_id_is_in_the_configured_trust_domain_only() {
        let req = IssueRequest {
            is_spiffe: Some(true),
            ..Default::default()
        };
        let n = names(req.clone(), "corp.example").unwrap();
        assert_eq!(
            n.spiffe_id.as_deref(),
            Some("spiffe://corp.example/agent/report-bot")
        );
        assert_eq!(
            n.san,
            [SanEntry::Uri(
                "spiffe://corp.example/agent/report-bot".into()
            )]
        );
        let other = IssueRequest {
            spiffe_trust_domain: Some("bank.example".into()),
            ..req.clone()
        };
        assert!(
            detail(names(other, "corp.example").unwrap_err()).starts_with("spiffe_trust_domain:")
        );
        assert!(detail(names(req, "").unwrap_err()).starts_with("is_spiffe:"));
    }
}
