//! Person and server certificates (`tls-client`, `tls-server`, …: every
//! profile but `agent-proxy`), as typed stages:
//!
//! ```text
//! admit(caller) → AdmittedCaller ─PersonRequest::parse→ PersonRequest
//!     ─sign→ Signed ─commit→ IssueResponse
//! ```
//!
//! The caller is admitted (role, per-principal rate) before the body is
//! read; parsing is pure; the key is generated only once the request parsed.

use super::key::KeySource;
use super::leaf::{Issuer, RecordNames, Signed, StoredDer, Unsigned};
use super::request::{IssueRequest, check_len, common_bounds, limits, parse_pa};
use super::response::IssueResponse;
use crate::auth::{Caller, Role};
use crate::error::{ApiError, ErrorKey};
use crate::limits::PrincipalKey;
use crate::state::{AppState, CaSet};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use warrant_ca::{ExtraExtension, Profile, Subject};
use warrant_store::IssuanceRecord;

/// Entry point for every profile but `agent-proxy`.
pub(super) async fn issue_person<'a>(
    state: &'a AppState,
    cas: &'a CaSet,
    caller: &Caller,
    req: IssueRequest,
    profile: Profile,
) -> Result<IssueResponse<'a>, ApiError> {
    let admitted = admit(state, caller)?;
    let now = crate::clock::unix_now();
    let request = PersonRequest::parse(admitted, state, cas, &req, profile, now)?;
    let signed = request.sign(state).await?;
    commit(state, caller, signed).await
}

/// A caller allowed to request a person certificate now.
struct AdmittedCaller(());

/// Only users request person certificates (a certificate holder may only
/// delegate to agents), and each counts against its per-principal rate.
fn admit(state: &AppState, caller: &Caller) -> Result<AdmittedCaller, ApiError> {
    match caller.role {
        Role::CertificateHolder => {
            return Err(ApiError::detail(
                ErrorKey::Forbidden,
                "a certificate holder may only request agent-proxy certificates",
            ));
        }
        Role::Issuer => {
            return Err(ApiError::detail(
                ErrorKey::Forbidden,
                "role issuer may only request agent-proxy certificates",
            ));
        }
        Role::Admin | Role::Operator | Role::Auditor => {}
    }
    state
        .limits
        .check_principal(PrincipalKey::for_caller(caller))?;
    Ok(AdmittedCaller(()))
}

/// Every field parsed and bounded. No IO.
struct PersonRequest<'a> {
    leaf: Unsigned<'a>,
    key: KeySource,
    /// `tls-client` certificates name a principal (see [`PrincipalName`]).
    principal: Option<PrincipalName>,
}

impl<'a> PersonRequest<'a> {
    fn parse(
        _: AdmittedCaller,
        state: &'a AppState,
        cas: &'a CaSet,
        req: &IssueRequest,
        profile: Profile,
        now: i64,
    ) -> Result<Self, ApiError> {
        common_bounds(req)?;
        let cn = req.cn.as_deref().map(str::trim).unwrap_or("");
        if cn.is_empty() {
            return Err(ApiError::detail(ErrorKey::CnRequired, "cn: required"));
        }
        let issuer = Issuer::resolve(cas, req.ca.as_deref(), now)?;
        let iss = &state.config.config.issuance;
        let subject = Subject::for_request(
            req.subject.as_deref(),
            cn,
            &iss.default_org,
            &iss.default_country,
        )?;
        let san = warrant_ca::parse_san(req.san.as_deref().unwrap_or(""))?;
        let secs = issuer.leaf_validity_secs(iss, req.validity, now)?;
        let extensions = pa_extension(req, profile)?.into_iter().collect();
        let key = KeySource::parse(req.csr_pem.as_deref(), req.key_type.as_deref())?;
        let principal = PrincipalName::parse(req, cn, profile)?;
        let leaf = Unsigned {
            issuer,
            profile,
            subject,
            san,
            extensions,
            not_before: now,
            not_after: now.saturating_add(secs as i64),
            names: RecordNames::plain(cn),
        };
        Ok(PersonRequest {
            leaf,
            key,
            principal,
        })
    }

    /// The key (generated only now), then the certificate, which names the
    /// principal UID built on that key.
    async fn sign(self, state: &AppState) -> Result<Signed<'a>, ApiError> {
        let key = self.key.into_key(state).await?;
        let mut leaf = self.leaf;
        leaf.names.principal_uid = self.principal.map(|p| p.uid(&key.key_hash));
        leaf.sign(key)
    }
}

/// The PA a `tls-client` (person) certificate carries, when the request
/// gives one; other profiles carry none.
fn pa_extension(req: &IssueRequest, profile: Profile) -> Result<Option<ExtraExtension>, ApiError> {
    let Some(pa_json) = &req.principal_authorization else {
        return Ok(None);
    };
    if profile != Profile::TlsClient {
        return Err(ApiError::field(
            "principal_authorization",
            "only tls-client (person) certificates carry a PA",
        ));
    }
    Ok(Some(ExtraExtension::non_critical(
        warrant_ca::oids::PA_EXTENSION,
        parse_pa(pa_json)?.to_der(),
    )))
}

/// The principal a person certificate names, which an agent DA must cite:
/// the realm and identifier of the request's `principal_uid` (default
/// `warrant:<cn>`), completed by the certificate's own key hash.
struct PrincipalName {
    realm: String,
    identifier: String,
}

impl PrincipalName {
    fn parse(req: &IssueRequest, cn: &str, profile: Profile) -> Result<Option<Self>, ApiError> {
        if profile != Profile::TlsClient {
            return Ok(None);
        }
        let name = match req.principal_uid.as_deref().filter(|s| !s.is_empty()) {
            Some(s) => {
                check_len("principal_uid", s, limits::PRINCIPAL_UID)?;
                let uid = aic::PrincipalUid::parse(s)?;
                PrincipalName {
                    realm: uid.realm,
                    identifier: uid.identifier,
                }
            }
            None => PrincipalName {
                realm: "warrant".to_string(),
                identifier: cn.to_string(),
            },
        };
        Ok(Some(name))
    }

    /// The canonical UID: `realm:identifier:base64url(sha256(SPKI))`.
    fn uid(self, key_hash: &[u8; 32]) -> String {
        format!(
            "{}:{}:{}",
            self.realm,
            self.identifier,
            URL_SAFE_NO_PAD.encode(key_hash)
        )
    }
}

/// Queues the row on the issuance write path and answers once it is stored.
async fn commit<'a>(
    state: &AppState,
    caller: &Caller,
    signed: Signed<'a>,
) -> Result<IssueResponse<'a>, ApiError> {
    let (record, pending) = signed.into_parts(StoredDer::Keep);
    state
        .store
        .issuance()
        .submit(crate::audit::issued(
            IssuanceRecord::with_cert(record, None),
            caller,
        ))
        .await?;
    Ok(pending.committed())
}
