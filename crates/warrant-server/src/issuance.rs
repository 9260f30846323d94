//! Certificate issuance: the request model of `POST /api/v1/certs` and the
//! orchestration of person and agent issuance.
//!
//! Agent issuance runs the checks of ca.md §4 in order; each step is a call
//! into `warrant_ca` (chain, CSR, signing), `aic` (TBS, DA signature),
//! [`crate::policy`] (pure decisions) or the store (revocation, nonce,
//! persistence). The order matters: the DA signature is verified once, and
//! freshness is checked before the nonce is consumed so a stale DA cannot burn
//! a nonce its author may still legitimately use.

use crate::auth::{Caller, Role, sha256};
use crate::error::{ApiError, ErrorKey};
use crate::policy::{self, CapRef, PolicyView};
use crate::state::AppState;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use warrant_ca::{Profile, SanEntry, Subject};
use warrant_store::{CertRecord, CertStatus, IssuanceRecord, NonceRow, WriteError};

/// Field bounds not already enforced by the CA or AIC crates.
pub mod limits {
    pub const CN: usize = 64;
    pub const SUBJECT: usize = 1024;
    pub const SAN: usize = 8192;
    pub const NAME: usize = 128;
    pub const PEM: usize = 64 * 1024;
    pub const SIGNATURE_B64: usize = 4096;
    pub const PARAMETERS: usize = 4096;
    pub const CAPABILITIES: usize = 256;
    pub const CONSTRAINTS: usize = 32;
    pub const AGENT_ID: usize = 256;
    pub const PRINCIPAL_UID: usize = 512;
    pub const REASON_CODE: usize = 64;
    pub const REASON_DESCRIPTION: usize = 512;
    pub const MAX_LIFETIME: i64 = 86_400;
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct CapabilityJson {
    pub scheme_id: String,
    pub capability_id: String,
    /// Standard base64 of opaque bytes (JSON in practice).
    #[serde(default)]
    pub parameters: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct PolicyJson {
    #[serde(default)]
    pub allowed_mode: Option<i64>,
    #[serde(default)]
    pub max_agents: Option<i64>,
    #[serde(default)]
    pub max_session_hours: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct PrincipalAuthorizationJson {
    #[serde(default)]
    pub grants: Option<Vec<CapabilityJson>>,
    #[serde(default)]
    pub authorization_constraints: Option<Vec<CapabilityJson>>,
    #[serde(default)]
    pub delegation_policy: Option<PolicyJson>,
}

/// `POST /api/v1/certs`. Unknown fields are ignored (varwof-core clients send
/// fields Warrant does not use).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct IssueRequest {
    pub ca: Option<String>,
    pub cn: Option<String>,
    pub san: Option<String>,
    pub subject: Option<String>,
    pub profile: Option<String>,
    pub key_type: Option<String>,
    pub validity: Option<u32>,
    pub csr_pem: Option<String>,
    pub agent_id: Option<String>,
    pub principal_uid: Option<String>,
    pub hash_algo: Option<String>,
    pub delegation_mode: Option<i64>,
    pub capabilities: Option<Vec<CapabilityJson>>,
    pub authorization_constraints: Option<Vec<CapabilityJson>>,
    pub principal_authorization: Option<PrincipalAuthorizationJson>,
    pub user_auth_signature: Option<String>,
    pub user_auth_signature_algo: Option<String>,
    pub user_auth_nonce: Option<String>,
    pub user_auth_lifetime: Option<i64>,
    pub user_auth_timestamp: Option<String>,
    pub user_auth_reason_code: Option<String>,
    pub user_auth_reason_description: Option<String>,
    pub user_cert_pem: Option<String>,
    pub agent_key_binding: Option<bool>,
    pub is_spiffe: Option<bool>,
    pub spiffe_trust_domain: Option<String>,
}

/// The answer to `POST /api/v1/certs`. It borrows the issuing CA's name and
/// pre-encoded chain from the server state, so it is turned into a
/// [`Response`] before the handler returns.
#[derive(Debug, Serialize)]
pub struct IssueResponse<'a> {
    pub serial_number: String,
    pub common_name: String,
    pub cert_pem: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_pem: Option<String>,
    pub chain_pem: &'a RawValue,
    pub ca: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spiffe_id: Option<String>,
    /// Warrant addition: the principal this certificate names (person
    /// certificates: the UID an agent DA must use; agents: their delegator).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal_uid: Option<String>,
    pub profile: &'static str,
    pub not_before: String,
    pub not_after: String,
}

impl IssueResponse<'_> {
    /// An upper bound of the encoded size in practice, so the body is written
    /// into one allocation: axum's `Json` starts at 128 bytes and grows the
    /// ~3.5 KB answer five times. PEM text escapes only its newlines (one
    /// extra byte per 64-character line); the rest is field names and the
    /// short fields.
    fn encoded_len_hint(&self) -> usize {
        let pem = |s: &str| s.len() + s.len() / 32;
        let short = [
            &self.serial_number,
            &self.common_name,
            &self.not_before,
            &self.not_after,
        ]
        .iter()
        .map(|s| s.len())
        .sum::<usize>()
            + self.spiffe_id.as_deref().map_or(0, str::len)
            + self.principal_uid.as_deref().map_or(0, str::len)
            + self.ca.len()
            + self.profile.len();
        256 + pem(&self.cert_pem)
            + self.key_pem.as_deref().map_or(0, pem)
            + self.chain_pem.get().len()
            + 2 * short
    }
}

impl IntoResponse for IssueResponse<'_> {
    fn into_response(self) -> Response {
        let mut body = Vec::with_capacity(self.encoded_len_hint());
        match serde_json::to_writer(&mut body, &self) {
            Ok(()) => (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response(),
            Err(e) => ApiError::detail(ErrorKey::Internal, e.to_string()).into_response(),
        }
    }
}

/// The issuing CA's chain as encoded once at start-up.
fn chain_json<'a>(
    state: &'a AppState,
    ca: &warrant_ca::IssuingCa,
) -> Result<&'a RawValue, ApiError> {
    state
        .per_ca
        .get(ca.name())
        .map(|p| &*p.chain_json)
        .ok_or_else(|| {
            ApiError::detail(
                ErrorKey::Internal,
                format!("no chain loaded for issuing CA {}", ca.name()),
            )
        })
}

pub fn unix(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

pub fn from_unix(secs: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs as u64)
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
    }
}

pub fn rfc3339(secs: i64) -> String {
    aic::time::format_rfc3339(secs)
}

fn check_len(field: &str, value: &str, max: usize) -> Result<(), ApiError> {
    if value.len() > max {
        return Err(ApiError::field(field, format!("longer than {max} bytes")));
    }
    Ok(())
}

/// Maps a `warrant_ca` error: client faults name their field, the rest are 500s.
pub fn ca_error(e: warrant_ca::CaError) -> ApiError {
    match e.invalid_field() {
        Some(field) => ApiError::field(field, e.to_string()),
        None => ApiError::detail(ErrorKey::Internal, e.to_string()),
    }
}

fn store_error(e: warrant_store::StoreError) -> ApiError {
    crate::state::store_error(e)
}

fn write_error(e: WriteError) -> ApiError {
    match e {
        WriteError::Overloaded { retry_after } => {
            ApiError::detail(ErrorKey::Overloaded, "write pipeline full")
                .with_retry_after(crate::limits::retry_after_secs(retry_after))
        }
        WriteError::NonceReplayed => ApiError::detail(
            ErrorKey::DaNonceReplayed,
            "user_auth_nonce: already consumed",
        ),
        WriteError::Unavailable(d) => {
            ApiError::detail(ErrorKey::Unavailable, format!("database: {d}")).with_retry_after(1)
        }
        WriteError::ShuttingDown => {
            ApiError::detail(ErrorKey::Unavailable, "server is shutting down").with_retry_after(1)
        }
    }
}

/// A decoded, bounded capability list.
fn parse_caps(
    field: &str,
    caps: Option<&Vec<CapabilityJson>>,
    max: usize,
) -> Result<Vec<aic::Capability>, ApiError> {
    let caps = match caps {
        None => return Ok(Vec::new()),
        Some(c) => c,
    };
    if caps.len() > max {
        return Err(ApiError::field(field, format!("more than {max} entries")));
    }
    caps.iter()
        .enumerate()
        .map(|(i, c)| {
            let f = |sub: &str| format!("{field}[{i}].{sub}");
            if c.scheme_id.is_empty() || c.scheme_id.len() > 128 {
                return Err(ApiError::field(&f("scheme_id"), "must be 1..128 bytes"));
            }
            if c.capability_id.is_empty() || c.capability_id.len() > 256 {
                return Err(ApiError::field(&f("capability_id"), "must be 1..256 bytes"));
            }
            let parameters = match &c.parameters {
                None => None,
                Some(p) if p.is_empty() => None,
                Some(p) => {
                    check_len(&f("parameters"), p, limits::PARAMETERS * 2)?;
                    let bytes = STANDARD
                        .decode(p)
                        .map_err(|_| ApiError::field(&f("parameters"), "not standard base64"))?;
                    if bytes.len() > limits::PARAMETERS {
                        return Err(ApiError::field(
                            &f("parameters"),
                            format!("longer than {} bytes", limits::PARAMETERS),
                        ));
                    }
                    Some(bytes)
                }
            };
            Ok(aic::Capability {
                scheme_id: c.scheme_id.clone(),
                capability_id: c.capability_id.clone(),
                parameters,
            })
        })
        .collect()
}

fn cap_refs(caps: &[aic::Capability]) -> Vec<CapRef<'_>> {
    caps.iter()
        .map(|c| CapRef {
            scheme_id: &c.scheme_id,
            capability_id: &c.capability_id,
            parameters: c.parameters.as_deref(),
        })
        .collect()
}

fn policy_view(p: Option<&aic::DelegationPolicy>) -> PolicyView {
    match p {
        Some(p) => PolicyView {
            allowed_mode: p.allowed_mode,
            max_agents: p.max_agents,
            max_session_hours: p.max_session_hours,
        },
        None => PolicyView::default(),
    }
}

/// Builds the PA from its JSON form (person certificates and body PAs).
fn parse_pa(pa: &PrincipalAuthorizationJson) -> Result<aic::PrincipalAuthorization, ApiError> {
    let grants = parse_caps(
        "principal_authorization.grants",
        pa.grants.as_ref(),
        limits::CAPABILITIES,
    )?;
    let constraints = parse_caps(
        "principal_authorization.authorization_constraints",
        pa.authorization_constraints.as_ref(),
        limits::CONSTRAINTS,
    )?;
    let delegation_policy = match &pa.delegation_policy {
        None => None,
        Some(p) => {
            let allowed_mode = p.allowed_mode.unwrap_or(0);
            if !(0..=1).contains(&allowed_mode) {
                return Err(ApiError::field(
                    "principal_authorization.delegation_policy.allowed_mode",
                    "must be 0 or 1",
                ));
            }
            let max_agents = p.max_agents.unwrap_or(1);
            if !(0..=1_000_000).contains(&max_agents) {
                return Err(ApiError::field(
                    "principal_authorization.delegation_policy.max_agents",
                    "must be 0..1000000",
                ));
            }
            if let Some(h) = p.max_session_hours {
                if !(1..=24 * 366).contains(&h) {
                    return Err(ApiError::field(
                        "principal_authorization.delegation_policy.max_session_hours",
                        "must be 1..8784",
                    ));
                }
            }
            Some(aic::DelegationPolicy {
                version: 1,
                max_agents,
                allowed_mode,
                max_session_hours: p.max_session_hours,
            })
        }
    };
    Ok(aic::PrincipalAuthorization {
        version: 1,
        grants,
        constraints,
        delegation_policy,
        extensions: Vec::new(),
    })
}

/// `user_auth_signature_algo` → AlgorithmIdentifier (names or a dotted OID).
pub fn parse_signature_algorithm(name: Option<&str>) -> Result<aic::AlgorithmIdentifier, ApiError> {
    let field = "user_auth_signature_algo";
    let name = name
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or("ECDSA-SHA256");
    let null = Some(vec![0x05, 0x00]);
    let (dotted, parameters): (&str, Option<Vec<u8>>) = match name.to_ascii_uppercase().as_str() {
        "ECDSA-SHA256" | "ES256" => (aic::oid::ECDSA_WITH_SHA256, None),
        "ECDSA-SHA384" | "ES384" => (aic::oid::ECDSA_WITH_SHA384, None),
        "RSA-SHA256" | "RS256" => (aic::oid::SHA256_WITH_RSA, null),
        "RSA-PSS-SHA256" | "PS256" => (aic::oid::RSASSA_PSS, None),
        "ED25519" | "EDDSA" => (aic::oid::ED25519, None),
        _ => {
            let oid = aic::Oid::parse(name)
                .ok_or_else(|| ApiError::field(field, format!("unknown algorithm {name:?}")))?;
            return Ok(aic::AlgorithmIdentifier::new(oid));
        }
    };
    let oid = aic::Oid::parse(dotted)
        .ok_or_else(|| ApiError::detail(ErrorKey::Internal, "bad built-in OID"))?;
    Ok(aic::AlgorithmIdentifier { oid, parameters })
}

/// Maps an AIC decode error (ASN.1 field path) to the API field it came from.
fn aic_field_error(e: &aic::DecodeError) -> ApiError {
    let f = e.field;
    let api = if f.contains("agentId") {
        "agent_id"
    } else if f.contains("reasonCode") {
        "user_auth_reason_code"
    } else if f.contains("description") || f.contains("reason") {
        "user_auth_reason_description"
    } else if f.contains("onstraint") {
        "authorization_constraints"
    } else if f.contains("apabilit") {
        "capabilities"
    } else if f.contains("Lifetime") {
        "user_auth_lifetime"
    } else if f.contains("rincipal") {
        "principal_uid"
    } else if f.contains("nonce") {
        "user_auth_nonce"
    } else if f.contains("Mode") {
        "delegation_mode"
    } else {
        "delegation"
    };
    ApiError::field(api, e.to_string())
}

/// The agent's public key: server-generated (returned once) or from a CSR.
struct SubjectKey {
    spki_der: Vec<u8>,
    key_pem: Option<String>,
}

async fn subject_key(req: &IssueRequest) -> Result<SubjectKey, ApiError> {
    if let Some(csr) = req.csr_pem.as_deref().filter(|s| !s.trim().is_empty()) {
        check_len("csr_pem", csr, warrant_ca::MAX_CSR_PEM_LEN)?;
        let info = warrant_ca::verify_csr(csr).map_err(ca_error)?;
        return Ok(SubjectKey {
            spki_der: info.spki_der,
            key_pem: None,
        });
    }
    let kt: warrant_ca::KeyType = req
        .key_type
        .as_deref()
        .unwrap_or("")
        .parse()
        .map_err(ca_error)?;
    let key = if matches!(
        kt,
        warrant_ca::KeyType::Rsa2048 | warrant_ca::KeyType::Rsa4096
    ) {
        tokio::task::spawn_blocking(move || warrant_ca::generate_key(kt))
            .await
            .map_err(|e| ApiError::detail(ErrorKey::Internal, e.to_string()))?
    } else {
        warrant_ca::generate_key(kt)
    }
    .map_err(ca_error)?;
    Ok(SubjectKey {
        spki_der: key.spki_der.clone(),
        key_pem: Some(key.pkcs8_pem.to_string()),
    })
}

fn profile_of(req: &IssueRequest) -> Result<Profile, ApiError> {
    req.profile
        .as_deref()
        .unwrap_or("")
        .parse()
        .map_err(ca_error)
}

/// Entry point of `POST /api/v1/certs`.
pub async fn issue<'a>(
    state: &'a AppState,
    caller: &Caller,
    req: IssueRequest,
) -> Result<IssueResponse<'a>, ApiError> {
    caller.require(crate::auth::Permission::CertIssue)?;
    let profile = profile_of(&req)?;
    if profile == Profile::AgentProxy {
        issue_agent(state, caller, req).await
    } else {
        if caller.role == Role::CertificateHolder {
            return Err(ApiError::detail(
                ErrorKey::Forbidden,
                "a certificate holder may only request agent-proxy certificates",
            ));
        }
        let principal = crate::limits::PrincipalKey::for_caller(caller);
        state.limits.check_principal(principal)?;
        issue_person(state, req, profile).await
    }
}

fn common_bounds(req: &IssueRequest) -> Result<(), ApiError> {
    if let Some(cn) = &req.cn {
        if cn.chars().count() > limits::CN {
            return Err(ApiError::field(
                "cn",
                format!("longer than {} characters", limits::CN),
            ));
        }
    }
    if let Some(s) = &req.subject {
        check_len("subject", s, limits::SUBJECT)?;
    }
    if let Some(s) = &req.san {
        check_len("san", s, limits::SAN)?;
    }
    if let Some(s) = &req.ca {
        check_len("ca", s, limits::NAME)?;
    }
    Ok(())
}

fn issuing_ca<'a>(
    state: &'a AppState,
    name: Option<&str>,
) -> Result<&'a std::sync::Arc<warrant_ca::IssuingCa>, ApiError> {
    let name = name.map(str::trim).filter(|s| !s.is_empty());
    match name {
        None => state.hierarchy.default_ca(),
        Some(n) => state.hierarchy.ca(n),
    }
    .ok_or_else(|| {
        ApiError::detail(
            ErrorKey::CaNotFound,
            format!("ca: {:?} is not an issuing CA", name.unwrap_or("")),
        )
    })
}

async fn issue_person(
    state: &AppState,
    req: IssueRequest,
    profile: Profile,
) -> Result<IssueResponse<'_>, ApiError> {
    common_bounds(&req)?;
    let cn = req.cn.as_deref().map(str::trim).unwrap_or("");
    if cn.is_empty() {
        return Err(ApiError::detail(ErrorKey::CnRequired, "cn: required"));
    }
    let ca = issuing_ca(state, req.ca.as_deref())?;
    // Looked up before anything is stored: no failure after the commit.
    let chain_pem = chain_json(state, ca)?;
    let iss = &state.config.config.issuance;
    let subject = Subject::for_request(
        req.subject.as_deref(),
        cn,
        &iss.default_org,
        &iss.default_country,
    )
    .map_err(ca_error)?;
    let san = warrant_ca::parse_san(req.san.as_deref().unwrap_or("")).map_err(ca_error)?;
    let now = unix(SystemTime::now());
    let secs = policy::leaf_validity_secs(
        now,
        req.validity,
        iss.default_validity_days,
        iss.max_validity_days,
        unix(ca.not_after()),
    )?;
    let mut extensions = Vec::new();
    if let Some(pa_json) = &req.principal_authorization {
        if profile != Profile::TlsClient {
            return Err(ApiError::field(
                "principal_authorization",
                "only tls-client (person) certificates carry a PA",
            ));
        }
        let pa = parse_pa(pa_json)?;
        extensions.push(warrant_ca::ExtraExtension::non_critical(
            warrant_ca::oids::PA_EXTENSION,
            pa.to_der(),
        ));
    }
    let key = subject_key(&req).await?;
    let key_hash = sha256(&key.spki_der);
    // A person certificate names the principal an agent DA must cite: the
    // realm/identifier of the request's principal_uid (default `warrant:<cn>`)
    // with the certificate's own key hash.
    let principal_uid = if profile == Profile::TlsClient {
        let (realm, identifier) = match req.principal_uid.as_deref().filter(|s| !s.is_empty()) {
            Some(s) => {
                check_len("principal_uid", s, limits::PRINCIPAL_UID)?;
                let uid = aic::PrincipalUid::parse(s).map_err(|e| {
                    ApiError::detail(ErrorKey::InvalidPrincipalUid, format!("principal_uid: {e}"))
                })?;
                (uid.realm, uid.identifier)
            }
            None => ("warrant".to_string(), cn.to_string()),
        };
        Some(format!(
            "{realm}:{identifier}:{}",
            URL_SAFE_NO_PAD.encode(key_hash)
        ))
    } else {
        None
    };
    let issued = sign(
        state,
        ca,
        profile,
        &subject,
        &san,
        &key.spki_der,
        now,
        secs,
        &extensions,
    )?;
    let record = CertRecord {
        ca: ca.name().to_string(),
        serial: issued.serial_hex.clone(),
        common_name: cn.to_string(),
        profile: profile.as_str().to_string(),
        status: CertStatus::Valid,
        not_before: unix(issued.not_before),
        not_after: unix(issued.not_after),
        der: issued.der.clone(),
        principal_uid: principal_uid.clone(),
        agent_id: None,
        key_hash: key_hash.to_vec(),
        created_at: now,
        revoked_at: None,
        revocation_reason: None,
    };
    state
        .store
        .submit(IssuanceRecord {
            cert: record,
            nonce: None,
        })
        .await
        .map_err(write_error)?;
    crate::metrics::cert_issued(ca.name(), profile.as_str());
    Ok(IssueResponse {
        serial_number: issued.serial_hex,
        common_name: cn.to_string(),
        cert_pem: issued.pem,
        key_pem: key.key_pem,
        chain_pem,
        ca: ca.name(),
        spiffe_id: None,
        principal_uid,
        profile: profile.as_str(),
        not_before: rfc3339(unix(issued.not_before)),
        not_after: rfc3339(unix(issued.not_after)),
    })
}

#[allow(clippy::too_many_arguments)]
fn sign(
    state: &AppState,
    ca: &warrant_ca::IssuingCa,
    profile: Profile,
    subject: &Subject,
    san: &[SanEntry],
    spki_der: &[u8],
    now: i64,
    secs: u64,
    extensions: &[warrant_ca::ExtraExtension],
) -> Result<warrant_ca::IssuedCert, ApiError> {
    let urls = state.per_ca.get(ca.name()).map(|p| &p.urls);
    warrant_ca::issue_leaf(
        ca,
        &warrant_ca::LeafSpec {
            profile,
            subject,
            san,
            spki_der,
            not_before: from_unix(now),
            not_after: from_unix(now.saturating_add(secs as i64)),
            extensions,
            urls: urls.filter(|u| !u.is_empty()),
        },
    )
    .map_err(ca_error)
}

/// Step 2 of §4: every DA field parsed and bounded.
struct ParsedDelegation {
    agent_id: String,
    principal_uid: aic::PrincipalUid,
    principal_uid_text: String,
    mode: i64,
    capabilities: Vec<aic::Capability>,
    constraints: Vec<aic::Capability>,
    signature: Vec<u8>,
    signature_algorithm: aic::AlgorithmIdentifier,
    nonce: [u8; 32],
    lifetime: i64,
    timestamp: i64,
    reason_code: String,
    reason_description: String,
    key_binding: bool,
    body_pa: Option<aic::PrincipalAuthorization>,
}

fn require<'a>(field: &str, v: Option<&'a String>) -> Result<&'a str, ApiError> {
    match v.map(|s| s.as_str()).filter(|s| !s.is_empty()) {
        Some(s) => Ok(s),
        None => Err(ApiError::detail(
            ErrorKey::AicRequiresAuth,
            format!("{field}: required for agent-proxy"),
        )),
    }
}

fn parse_delegation(req: &IssueRequest) -> Result<ParsedDelegation, ApiError> {
    let agent_id = req
        .agent_id
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::field("agent_id", "required for agent-proxy"))?
        .to_string();
    if agent_id.len() > limits::AGENT_ID {
        return Err(ApiError::field(
            "agent_id",
            format!("longer than {} bytes", limits::AGENT_ID),
        ));
    }
    let uid_text = req
        .principal_uid
        .as_deref()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            ApiError::detail(ErrorKey::InvalidPrincipalUid, "principal_uid: required")
        })?;
    if uid_text.len() > limits::PRINCIPAL_UID {
        return Err(ApiError::detail(
            ErrorKey::InvalidPrincipalUid,
            format!("principal_uid: longer than {} bytes", limits::PRINCIPAL_UID),
        ));
    }
    let principal_uid = aic::PrincipalUid::parse(uid_text).map_err(|e| {
        ApiError::detail(ErrorKey::InvalidPrincipalUid, format!("principal_uid: {e}"))
    })?;
    if let Some(h) = req.hash_algo.as_deref().filter(|s| !s.is_empty()) {
        if !matches!(h.to_ascii_lowercase().replace('-', "").as_str(), "sha256") {
            return Err(ApiError::field(
                "hash_algo",
                format!("{h:?}: only sha256 is supported"),
            ));
        }
    }
    let mode = req.delegation_mode.unwrap_or(0);
    if !(0..=1).contains(&mode) {
        return Err(ApiError::field(
            "delegation_mode",
            "must be 0 (authorized) or 1 (representative)",
        ));
    }
    let capabilities = parse_caps(
        "capabilities",
        req.capabilities.as_ref(),
        limits::CAPABILITIES,
    )?;
    let constraints = parse_caps(
        "authorization_constraints",
        req.authorization_constraints.as_ref(),
        limits::CONSTRAINTS,
    )?;

    let sig_b64 = require("user_auth_signature", req.user_auth_signature.as_ref())?;
    check_len("user_auth_signature", sig_b64, limits::SIGNATURE_B64)?;
    let signature = STANDARD
        .decode(sig_b64.trim())
        .map_err(|_| ApiError::field("user_auth_signature", "not standard base64"))?;
    let signature_algorithm = parse_signature_algorithm(req.user_auth_signature_algo.as_deref())?;
    let nonce_b64 = require("user_auth_nonce", req.user_auth_nonce.as_ref())?;
    check_len("user_auth_nonce", nonce_b64, 128)?;
    let nonce_bytes = STANDARD
        .decode(nonce_b64.trim())
        .map_err(|_| ApiError::field("user_auth_nonce", "not standard base64"))?;
    let nonce: [u8; 32] = nonce_bytes.as_slice().try_into().map_err(|_| {
        ApiError::field(
            "user_auth_nonce",
            format!("must be 32 bytes, got {}", nonce_bytes.len()),
        )
    })?;
    let ts_text = require("user_auth_timestamp", req.user_auth_timestamp.as_ref())?;
    let timestamp = aic::time::parse_rfc3339(ts_text.trim()).ok_or_else(|| {
        ApiError::field(
            "user_auth_timestamp",
            "must be RFC 3339 UTC with whole seconds (2026-01-02T03:04:05Z)",
        )
    })?;
    let lifetime = req.user_auth_lifetime.unwrap_or(0);
    if !(0..=limits::MAX_LIFETIME).contains(&lifetime) {
        return Err(ApiError::field(
            "user_auth_lifetime",
            "must be 0..86400 seconds",
        ));
    }
    let reason_code = req
        .user_auth_reason_code
        .clone()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            ApiError::detail(ErrorKey::ReasonRequired, "user_auth_reason_code: required")
        })?;
    check_len("user_auth_reason_code", &reason_code, limits::REASON_CODE)?;
    let reason_description = req.user_auth_reason_description.clone().unwrap_or_default();
    check_len(
        "user_auth_reason_description",
        &reason_description,
        limits::REASON_DESCRIPTION,
    )?;
    let body_pa = req
        .principal_authorization
        .as_ref()
        .map(parse_pa)
        .transpose()?;
    Ok(ParsedDelegation {
        agent_id,
        principal_uid,
        principal_uid_text: uid_text.to_string(),
        mode,
        capabilities,
        constraints,
        signature,
        signature_algorithm,
        nonce,
        lifetime,
        timestamp,
        reason_code,
        reason_description,
        key_binding: req.agent_key_binding.unwrap_or(false),
        body_pa,
    })
}

fn untrusted(detail: impl Into<String>) -> ApiError {
    ApiError::detail(ErrorKey::PrincipalCertUntrusted, detail)
}

async fn issue_agent<'a>(
    state: &'a AppState,
    caller: &Caller,
    req: IssueRequest,
) -> Result<IssueResponse<'a>, ApiError> {
    // 1. No agent→agent delegation.
    if let Some(der) = &caller.client_cert_der {
        if cert_has_aic(der) {
            return Err(ApiError::detail(
                ErrorKey::Forbidden,
                "an agent certificate cannot delegate to another agent",
            ));
        }
    }
    // 2. Parse and bound every field.
    common_bounds(&req)?;
    let da = parse_delegation(&req)?;
    let ca = issuing_ca(state, req.ca.as_deref())?;
    // Looked up before anything is stored: no failure after the commit.
    let chain_pem = chain_json(state, ca)?;
    let iss = &state.config.config.issuance;
    let cn = req
        .cn
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or(&da.agent_id)
        .to_string();
    if cn.chars().count() > limits::CN {
        return Err(ApiError::field(
            "cn",
            format!("longer than {} characters", limits::CN),
        ));
    }
    let subject = Subject::for_request(
        req.subject.as_deref(),
        &cn,
        &iss.default_org,
        &iss.default_country,
    )
    .map_err(ca_error)?;
    warrant_ca::check_profile_subject(Profile::AgentProxy, &subject).map_err(ca_error)?;
    let mut san = warrant_ca::parse_san(req.san.as_deref().unwrap_or("")).map_err(ca_error)?;
    let spiffe = if req.is_spiffe.unwrap_or(false) {
        let td = req
            .spiffe_trust_domain
            .as_deref()
            .filter(|s| !s.is_empty())
            .unwrap_or(&iss.spiffe_trust_domain);
        if td.is_empty() {
            return Err(ApiError::field(
                "spiffe_trust_domain",
                "required with is_spiffe",
            ));
        }
        let id = warrant_ca::spiffe_id(td, &da.agent_id).map_err(ca_error)?;
        san.push(SanEntry::Uri(id.clone()));
        Some(id)
    } else {
        None
    };
    if da.key_binding && req.csr_pem.as_deref().is_none_or(|s| s.trim().is_empty()) {
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
        None => match &caller.client_cert_der {
            Some(der) => der.clone(),
            None => {
                return Err(ApiError::detail(
                    ErrorKey::AicRequiresAuth,
                    "user_cert_pem: required (or present the principal certificate over mTLS)",
                ));
            }
        },
    };
    let key = subject_key(&req).await?;

    // 3. The principal certificate: chain, validity, revocation, keyHash.
    let now_time = SystemTime::now();
    let now = unix(now_time);
    let principal = warrant_ca::verify_principal_cert(&principal_pem, &state.hierarchy, now_time)
        .map_err(|e| untrusted(e.to_string()))?;
    if principal.is_agent() {
        return Err(untrusted("an agent certificate cannot be a principal"));
    }
    if caller.role == Role::CertificateHolder
        && caller.client_cert_der.as_deref() != Some(principal.der.as_slice())
    {
        return Err(ApiError::detail(
            ErrorKey::Forbidden,
            "a certificate holder may only delegate with its own certificate",
        ));
    }
    let principal_row = state
        .store
        .cert_status(&principal.issuing_ca, &principal.serial_hex)
        .await
        .map_err(store_error)?;
    if principal_row
        .as_ref()
        .is_some_and(|r| r.status == CertStatus::Revoked)
    {
        return Err(untrusted("principal certificate is revoked"));
    }
    if !aic::key_hash_matches(&da.principal_uid, &principal.spki_der) {
        return Err(untrusted(
            "principal_uid keyHash does not match the principal certificate's key",
        ));
    }

    // 4. Rebuild the TBS and verify the DA signature, once.
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
        agent_spki_der: da.key_binding.then(|| key.spki_der.clone()),
    }
    .tbs()
    .map_err(|e| aic_field_error(&e))?;
    let tbs_der = tbs.to_der();
    aic::verify_delegation(
        &tbs_der,
        &da.signature_algorithm,
        &da.signature,
        &principal.spki_der,
    )
    .map_err(|e| {
        ApiError::detail(
            ErrorKey::DelegationSignatureInvalid,
            format!("user_auth_signature: {e}"),
        )
    })?;

    // 5. Freshness, before the nonce is touched.
    policy::check_freshness(now, da.timestamp, iss.da_max_timestamp_skew)?;

    // Agents are counted under the principal certificate's own UID (its row),
    // so the revocation cascade, the per-principal limit and max_agents see
    // the same principal however the DA spelled realm and identifier.
    let canonical_principal = principal_row
        .as_ref()
        .and_then(|r| r.principal_uid.clone())
        .unwrap_or_else(|| da.principal_uid_text.clone());
    // Per-principal limit: only a proven DA counts, and a refusal leaves
    // the nonce unused.
    state
        .limits
        .check_principal(crate::limits::PrincipalKey::Delegator(
            canonical_principal.clone(),
        ))?;

    // 6. Consume the nonce (fast in-memory reject; the commit is the authority).
    let nonce_expires = policy::nonce_expiry(
        da.timestamp,
        iss.da_max_timestamp_skew,
        iss.nonce_retention_buffer,
        policy::effective_da_lifetime(da.lifetime as u64),
    );
    match state
        .store
        .nonce_ledger()
        .try_consume(&da.nonce, nonce_expires, now)
    {
        Ok(()) => {}
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
    }
    // From here on, a server-side failure must give the nonce back.
    // A dead database (503) is such a failure too: the client is told to
    // retry the same DA, so its nonce must not stay burnt in memory.
    let release = |e: ApiError| {
        if matches!(e.key, ErrorKey::Internal | ErrorKey::Unavailable) {
            state.store.nonce_ledger().release(&da.nonce);
        }
        e
    };

    // 7. Policy: grants and policy come from the principal certificate's PA.
    let cert_pa = match principal.extension_value(&warrant_ca::oids::PA_EXTENSION) {
        Some(der) => Some(aic::PrincipalAuthorization::from_der(der).map_err(|e| {
            untrusted(format!(
                "principal certificate's PA extension is malformed: {e}"
            ))
        })?),
        None => None,
    };
    let cert_grants = cert_pa
        .as_ref()
        .map(|p| p.grants.clone())
        .unwrap_or_default();
    let cert_policy = policy_view(cert_pa.as_ref().and_then(|p| p.delegation_policy.as_ref()));
    let (grants, effective_policy, pa_for_agent) = match &da.body_pa {
        Some(body) => {
            policy::check_grants_narrow(&cap_refs(&body.grants), &cap_refs(&cert_grants))?;
            let body_policy = match &body.delegation_policy {
                Some(p) => policy_view(Some(p)),
                None => cert_policy,
            };
            let eff = policy::narrow_policy(&cert_policy, &body_policy)?;
            (body.grants.clone(), eff, Some(body.clone()))
        }
        None => (cert_grants, cert_policy, cert_pa.clone()),
    };
    policy::check_delegation_mode(da.mode, &effective_policy)?;
    policy::check_capabilities_granted(&cap_refs(&da.capabilities), &cap_refs(&grants))?;
    // Held until this request is answered: the next agent of the same
    // principal is counted only once this one is committed or refused.
    let turn = state.limits.agent_turn(&canonical_principal).await;
    // Read before the count, so that a bound never predates a foreign write.
    let epoch = state.store.foreign_write_epoch();
    let active = match turn.active_agents_below(effective_policy.agents_allowed(), epoch) {
        Some(bound) => bound,
        None => {
            let exact = state
                .store
                .count_active_agents(&canonical_principal, now)
                .await
                .map_err(|e| release(store_error(e)))?;
            turn.counted(exact, epoch);
            exact
        }
    };
    policy::check_max_agents(active, &effective_policy)?;

    // 8. Sign, persist durably, answer.
    let validity = policy::agent_validity_secs(
        now,
        iss.agent_proxy_max_validity,
        da.lifetime as u64,
        effective_policy.max_session_hours,
        unix(ca.not_after()),
    )
    .map_err(release)?;
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
    let mut extensions = vec![warrant_ca::ExtraExtension::non_critical(
        warrant_ca::oids::AIC_EXTENSION,
        aic_der,
    )];
    if let Some(pa) = &pa_for_agent {
        extensions.push(warrant_ca::ExtraExtension::non_critical(
            warrant_ca::oids::PA_EXTENSION,
            pa.to_der(),
        ));
    }
    let issued = sign(
        state,
        ca,
        Profile::AgentProxy,
        &subject,
        &san,
        &key.spki_der,
        now,
        validity,
        &extensions,
    )
    .inspect_err(|_| state.store.nonce_ledger().release(&da.nonce))?;
    let record = CertRecord {
        ca: ca.name().to_string(),
        serial: issued.serial_hex.clone(),
        common_name: cn.clone(),
        profile: Profile::AgentProxy.as_str().to_string(),
        status: CertStatus::Valid,
        not_before: unix(issued.not_before),
        not_after: unix(issued.not_after),
        der: issued.der.clone(),
        principal_uid: Some(canonical_principal.clone()),
        agent_id: Some(da.agent_id.clone()),
        key_hash: sha256(&key.spki_der).to_vec(),
        created_at: now,
        revoked_at: None,
        revocation_reason: None,
    };
    state
        .store
        .submit(IssuanceRecord {
            cert: record,
            nonce: Some(NonceRow {
                nonce: da.nonce,
                expires_at: nonce_expires,
                principal_uid: canonical_principal.clone(),
            }),
        })
        .await
        .inspect(|()| turn.committed())
        .inspect_err(|_| turn.outcome_unknown())
        .map_err(write_error)?;
    crate::metrics::cert_issued(ca.name(), Profile::AgentProxy.as_str());
    Ok(IssueResponse {
        serial_number: issued.serial_hex,
        common_name: cn,
        cert_pem: issued.pem,
        key_pem: key.key_pem,
        chain_pem,
        ca: ca.name(),
        spiffe_id: spiffe,
        principal_uid: Some(canonical_principal),
        profile: Profile::AgentProxy.as_str(),
        not_before: rfc3339(unix(issued.not_before)),
        not_after: rfc3339(unix(issued.not_after)),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn signature_algorithm_names_map_to_oids() {
        let a = parse_signature_algorithm(Some("ECDSA-SHA256")).unwrap();
        assert_eq!(a.oid.to_string(), aic::oid::ECDSA_WITH_SHA256);
        let a = parse_signature_algorithm(None).unwrap();
        assert_eq!(a.oid.to_string(), aic::oid::ECDSA_WITH_SHA256);
        let a = parse_signature_algorithm(Some("1.3.101.112")).unwrap();
        assert_eq!(a.oid.to_string(), aic::oid::ED25519);
        assert_eq!(
            parse_signature_algorithm(Some("HS256")).unwrap_err().key,
            ErrorKey::InvalidField
        );
    }

    #[test]
    fn rejects_capability_with_bad_base64_parameters() {
        let caps = vec![CapabilityJson {
            scheme_id: "db".into(),
            capability_id: "q".into(),
            parameters: Some("!!".into()),
        }];
        let e = parse_caps("capabilities", Some(&caps), 8).unwrap_err();
        assert!(e.detail.unwrap().starts_with("capabilities[0].parameters"));
    }

    #[test]
    fn rejects_short_nonce_naming_field() {
        let req = IssueRequest {
            agent_id: Some("a".into()),
            principal_uid: Some("corp:alice:AzI5g3OUET8jssmYEYgla0j6so9XAqNe9YxTubyiXAE".into()),
            user_auth_signature: Some("AAAA".into()),
            user_auth_nonce: Some(STANDARD.encode([0u8; 16])),
            user_auth_timestamp: Some("2026-01-01T00:00:00Z".into()),
            user_auth_reason_code: Some("r".into()),
            ..Default::default()
        };
        let e = parse_delegation(&req).err().unwrap();
        assert_eq!(e.key, ErrorKey::InvalidField);
        assert!(e.detail.unwrap().starts_with("user_auth_nonce"));
    }

    #[test]
    fn missing_signature_is_aic_requires_auth() {
        let req = IssueRequest {
            agent_id: Some("a".into()),
            principal_uid: Some("corp:alice:AzI5g3OUET8jssmYEYgla0j6so9XAqNe9YxTubyiXAE".into()),
            ..Default::default()
        };
        assert_eq!(
            parse_delegation(&req).err().unwrap().key,
            ErrorKey::AicRequiresAuth
        );
    }
}
