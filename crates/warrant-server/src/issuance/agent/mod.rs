//! Agent (`agent-proxy`) issuance as typed stages, in the order of ca.md §4.
//!
//! Each stage is a value made only by the previous one, so a later check
//! cannot run before an earlier one passed:
//!
//! ```text
//! ParsedAgentRequest ─verify_principal→ VerifiedPrincipal ─verify_delegation→
//! VerifiedDelegation ─authorize→ Authorized ─sign→ SignedAgent ─commit→ IssueResponse
//! ```
//!
//! Everything that costs little and needs no secret runs first: parsing,
//! the principal's chain and record, the DA signature, freshness and policy.
//! Only then is the nonce reserved and, last, a key generated and a
//! certificate signed, so an invalid request never costs a key generation
//! and never burns a nonce. The DA signature is verified once, and freshness
//! is checked before the nonce is consumed, so a stale DA cannot burn a nonce
//! its author may still legitimately use. The nonce's [`NonceReservation`]
//! releases it on every path that does not reach the commit, a dropped
//! request included.

mod delegation;
mod names;

pub use delegation::parse_signature_algorithm;
pub use names::{AgentNames, NamePolicy, agent_names};

use super::key::KeySource;
use super::leaf::{Issuer, RecordNames, Signed, StoredDer, Unsigned, agent_capabilities};
use super::request::{IssueRequest, check_len, common_bounds};
use super::response::IssueResponse;
use crate::auth::{Caller, Role};
use crate::clock;
use crate::error::{ApiError, ErrorKey, principal_untrusted as untrusted};
use crate::limits::{AgentTurn, PrincipalKey};
use crate::policy::{self, PolicyView, cap_refs};
use crate::state::{AppState, CaSet};
use delegation::{ParsedDelegation, parse_delegation};
use std::time::SystemTime;
use warrant_ca::{ExtraExtension, PrincipalCert, Profile};
use warrant_store::{CertStatus, IssuanceRecord, NonceReservation, NonceRow};

/// Entry point for `profile = agent-proxy`.
pub(super) async fn issue_agent<'a>(
    state: &'a AppState,
    cas: &'a CaSet,
    caller: &Caller,
    req: IssueRequest,
) -> Result<IssueResponse<'a>, ApiError> {
    let parsed = ParsedAgentRequest::parse(state, cas, caller, &req)?;
    let now_time = clock::system_now();
    let now = clock::unix(now_time);
    let principal = parsed.verify_principal(state, caller, now_time).await?;
    let delegation = principal.verify_delegation(state, now)?;
    let authorized = delegation.authorize(state, now).await?;
    let signed = authorized.sign(state, now).await?;
    signed.commit(state, caller).await
}

/// Whether a certificate (DER) carries the AIC extension.
pub fn cert_has_aic(der: &[u8]) -> bool {
    warrant_ca::certificate_extensions(der)
        .map(|exts| {
            exts.iter()
                .any(|e| e.oid == warrant_ca::oids::AIC_EXTENSION)
        })
        .unwrap_or(false)
}

/// Steps 1–2: the caller may delegate at all, and every field is parsed and
/// bounded. No IO.
struct ParsedAgentRequest<'a> {
    da: ParsedDelegation,
    issuer: Issuer<'a>,
    names: AgentNames,
    key: KeySource,
    principal_pem: Vec<u8>,
}

impl<'a> ParsedAgentRequest<'a> {
    fn parse(
        state: &'a AppState,
        cas: &'a CaSet,
        caller: &Caller,
        req: &IssueRequest,
    ) -> Result<Self, ApiError> {
        if caller.client_cert_der.as_deref().is_some_and(cert_has_aic) {
            return Err(ApiError::detail(
                ErrorKey::Forbidden,
                "an agent certificate cannot delegate to another agent",
            ));
        }
        common_bounds(req)?;
        let da = parse_delegation(req)?;
        let issuer = Issuer::resolve(cas, req.ca.as_deref(), clock::unix_now())?;
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
        if da.key_binding && key.csr_spki().is_none() {
            return Err(ApiError::field(
                "agent_key_binding",
                "a v2 DA binds the agent's own key: send it as csr_pem",
            ));
        }
        Ok(ParsedAgentRequest {
            da,
            issuer,
            names,
            key,
            principal_pem: principal_cert(req, caller)?,
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
        let cert = warrant_ca::verify_principal_cert(
            &self.principal_pem,
            &self.issuer.cas.hierarchy,
            now,
        )?;
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
        let canonical = recorded_principal_uid(state, &cert).await?;
        check_principal_uid(&self.da.principal_uid, &canonical, &cert.spki_der)?;
        let cert_pa = certificate_pa(&cert)?;
        Ok(VerifiedPrincipal {
            request: self,
            spki_der: cert.spki_der,
            canonical,
            cert_pa,
        })
    }
}

/// The principal certificate: `user_cert_pem`, else the one presented over
/// mTLS.
fn principal_cert(req: &IssueRequest, caller: &Caller) -> Result<Vec<u8>, ApiError> {
    match req
        .user_cert_pem
        .as_deref()
        .filter(|s| !s.trim().is_empty())
    {
        Some(p) => {
            check_len("user_cert_pem", p, warrant_ca::MAX_PRINCIPAL_CERT_LEN)?;
            Ok(p.as_bytes().to_vec())
        }
        None => caller.client_cert_der.clone().ok_or_else(|| {
            ApiError::detail(
                ErrorKey::AicRequiresAuth,
                "user_cert_pem: required (or present the principal certificate over mTLS)",
            )
        }),
    }
}

/// The canonical principal UID the certificate's record holds; a
/// certificate without a record, revoked, or not a person certificate is
/// refused.
pub(crate) async fn recorded_principal_uid(
    state: &AppState,
    cert: &PrincipalCert,
) -> Result<String, ApiError> {
    let row = state
        .store
        .certs()
        .cert_status(&cert.issuing_ca, &cert.serial_hex)
        .await?
        .ok_or_else(|| untrusted("principal certificate has no record in this CA's store"))?;
    if row.status == CertStatus::Revoked {
        return Err(untrusted("principal certificate is revoked"));
    }
    row.principal_uid
        .ok_or_else(|| untrusted("the certificate is not a person (principal) certificate"))
}

/// The DA's principal UID is the recorded one (realm, identifier and key
/// hash), and its key hash is the certificate's key's.
fn check_principal_uid(
    uid: &aic::PrincipalUid,
    canonical: &str,
    spki_der: &[u8],
) -> Result<(), ApiError> {
    let recorded = aic::PrincipalUid::parse(canonical)
        .map_err(|e| untrusted(format!("recorded principal_uid is unreadable: {e}")))?;
    if uid.realm != recorded.realm
        || uid.identifier != recorded.identifier
        || uid.key_hash != recorded.key_hash
    {
        return Err(untrusted(format!(
            "principal_uid does not match the principal certificate's ({canonical})"
        )));
    }
    if !aic::key_hash_matches(uid, spki_der) {
        return Err(untrusted(
            "principal_uid keyHash does not match the principal certificate's key",
        ));
    }
    Ok(())
}

/// The principal certificate's PA, if it carries one.
pub(crate) fn certificate_pa(
    cert: &PrincipalCert,
) -> Result<Option<aic::PrincipalAuthorization>, ApiError> {
    cert.extension_value(&warrant_ca::oids::PA_EXTENSION)
        .map(|der| {
            aic::PrincipalAuthorization::from_der(der).map_err(|e| {
                untrusted(format!(
                    "principal certificate's PA extension is malformed: {e}"
                ))
            })
        })
        .transpose()
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
        let agent_spki = self
            .request
            .key
            .csr_spki()
            .filter(|_| da.key_binding)
            .map(<[u8]>::to_vec);
        let tbs = aic::DelegationRequest {
            agent_id: da.agent_id.clone(),
            principal_uid: da.principal_uid.clone(),
            reason: aic::Reason::new(&da.reason_code, &da.reason_description),
            capabilities: da.capabilities.clone(),
            delegation_mode: aic::DelegationMode::from_i64(da.mode, "delegation_mode")?,
            constraints: da.constraints.clone(),
            requested_lifetime: da.lifetime,
            timestamp: da.timestamp,
            nonce: da.nonce,
            agent_spki_der: agent_spki,
        }
        .tbs()?;
        aic::verify_delegation(
            &tbs.to_der(),
            &da.signature_algorithm,
            &da.signature,
            &self.spki_der,
        )?;
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
            p.request.issuer.not_after(),
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
        let reservation = state
            .store
            .issuance()
            .reserve_nonce(&da.nonce, nonce_expires, now)?;
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
    let epoch = state.store.issuance().foreign_write_epoch();
    let active = match turn.active_agents_below(policy.agents_allowed(), epoch) {
        Some(bound) => bound,
        None => {
            let exact = state
                .store
                .certs()
                .count_active_agents(principal, now)
                .await?;
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
    /// Step 8, first half: the key (generated only now, after every check
    /// passed) and the certificate, carrying the AIC and the agent's PA.
    async fn sign(self, state: &AppState, now: i64) -> Result<SignedAgent<'a>, ApiError> {
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
            issuer,
            names,
            key,
            ..
        } = request;
        let nonce = NonceRow {
            nonce: da.nonce,
            expires_at: nonce_expires,
            principal_uid: canonical.clone(),
        };
        let leaf = Unsigned {
            issuer,
            profile: Profile::AgentProxy,
            subject: names.subject,
            san: names.san,
            extensions: agent_extensions(tbs, &da, agent_pa.as_ref()),
            not_before: now,
            not_after: not_after.max(now),
            names: RecordNames {
                common_name: da.agent_id.clone(),
                principal_uid: Some(canonical),
                capabilities: agent_capabilities(&da.capabilities),
                agent_id: Some(da.agent_id),
                spiffe_id: names.spiffe_id,
            },
        };
        let key = key.into_key(state).await?;
        Ok(SignedAgent {
            signed: leaf.sign(key)?,
            turn,
            reservation,
            nonce,
        })
    }
}

/// The AIC (the verified DA, depth-limited to this agent) and the agent's
/// PA, as certificate extensions.
fn agent_extensions(
    tbs: aic::DelegationAuthTbs,
    da: &ParsedDelegation,
    agent_pa: Option<&aic::PrincipalAuthorization>,
) -> Vec<ExtraExtension> {
    let depth = aic::DelegationDepthControl {
        chain_depth: 0,
        max_depth: 1,
    };
    let aic_der = tbs
        .into_aic(
            da.signature_algorithm.clone(),
            da.signature.clone(),
            vec![depth.to_ext_field()],
        )
        .to_der();
    let mut extensions = vec![ExtraExtension::non_critical(
        warrant_ca::oids::AIC_EXTENSION,
        aic_der,
    )];
    if let Some(pa) = agent_pa {
        extensions.push(ExtraExtension::non_critical(
            warrant_ca::oids::PA_EXTENSION,
            pa.to_der(),
        ));
    }
    extensions
}

/// A signed agent certificate, with the principal's turn and the nonce
/// reservation still held.
struct SignedAgent<'a> {
    signed: Signed<'a>,
    turn: AgentTurn<'a>,
    reservation: NonceReservation<'a>,
    nonce: NonceRow,
}

impl<'a> SignedAgent<'a> {
    /// Step 8, second half: the durable commit of the certificate's row with
    /// the nonce's, then the answer.
    async fn commit(
        self,
        state: &AppState,
        caller: &Caller,
    ) -> Result<IssueResponse<'a>, ApiError> {
        let SignedAgent {
            signed,
            turn,
            reservation,
            nonce,
        } = self;
        let der = if state.config.config.storage.keeps_agent_der() {
            StoredDer::Keep
        } else {
            StoredDer::Drop
        };
        let (record, pending) = signed.into_parts(der);
        let submitted =
            crate::audit::issued(IssuanceRecord::with_cert(record, Some(nonce)), caller);
        // The record carries the nonce on: `submit` keeps it consumed once
        // the database holds it and releases it on any other outcome,
        // including this future being dropped. No await lies between the
        // hand-over and the submit's first poll.
        reservation.hand_over();
        state
            .store
            .issuance()
            .submit(submitted)
            .await
            .inspect(|()| turn.committed())
            .inspect_err(|_| turn.outcome_unknown())?;
        Ok(pending.committed())
    }
}

#[cfg(test)]
mod tests {
    /// `warrant-ca` keeps its own typed copies of the AIC OIDs so it does not
    /// depend on `aic`; this is where the two are held to one value.
    #[test]
    fn ca_and_aic_agree_on_the_extension_oids() {
        assert_eq!(
            warrant_ca::oids::AIC_EXTENSION.to_string(),
            aic::oid::AIC_EXTENSION
        );
        assert_eq!(
            warrant_ca::oids::PA_EXTENSION.to_string(),
            aic::oid::PRINCIPAL_AUTHORIZATION_EXTENSION
        );
    }
}
