//! Certificate issuance: the request model of `POST /api/v1/certs` and the
//! orchestration of person and agent issuance.
//!
//! Agent issuance runs the checks of ca.md §4 in order; each step is a call
//! into `warrant_ca` (chain, CSR, signing), `aic` (TBS, DA signature),
//! [`crate::policy`] (pure decisions) or the store (revocation, nonce,
//! persistence). The order matters: the DA signature is verified once, and
//! freshness is checked before the nonce is consumed so a stale DA cannot burn
//! a nonce its author may still legitimately use.

mod agent;

pub use agent::{AgentNames, NamePolicy, agent_names};

use crate::auth::{Caller, Role, sha256};
use crate::error::{ApiError, ErrorKey};
use crate::policy;
use crate::state::AppState;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use warrant_ca::{Profile, SanEntry, Subject};
use warrant_store::{CertRecord, CertStatus, IssuanceRecord, WriteError};

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

/// The subject's public key: server-generated (returned once) or from a CSR.
struct SubjectKey {
    spki_der: Vec<u8>,
    key_pem: Option<String>,
}

/// Where a certificate's public key comes from: a verified CSR, or a key the
/// server generates. Parsing is cheap and done up front; the key itself is
/// generated only by [`KeySource::into_key`], after every check passed.
enum KeySource {
    Csr { spki_der: Vec<u8> },
    Generate(warrant_ca::KeyType),
}

impl KeySource {
    /// `csr_pem` wins over `key_type`; an empty `key_type` is the default.
    fn parse(csr_pem: Option<&str>, key_type: Option<&str>) -> Result<KeySource, ApiError> {
        if let Some(csr) = csr_pem.filter(|s| !s.trim().is_empty()) {
            check_len("csr_pem", csr, warrant_ca::MAX_CSR_PEM_LEN)?;
            let info = warrant_ca::verify_csr(csr).map_err(ca_error)?;
            return Ok(KeySource::Csr {
                spki_der: info.spki_der,
            });
        }
        Ok(KeySource::Generate(
            key_type.unwrap_or("").parse().map_err(ca_error)?,
        ))
    }

    async fn into_key(self, state: &AppState) -> Result<SubjectKey, ApiError> {
        Ok(match self {
            KeySource::Csr { spki_der } => SubjectKey {
                spki_der,
                key_pem: None,
            },
            KeySource::Generate(kt) => {
                let key = generate_key(state, kt).await?;
                SubjectKey {
                    spki_der: key.spki_der.clone(),
                    key_pem: Some(key.pkcs8_pem.to_string()),
                }
            }
        })
    }
}

/// A server-side key. RSA takes long enough to run on the blocking pool.
async fn generate_key(
    state: &AppState,
    kt: warrant_ca::KeyType,
) -> Result<warrant_ca::GeneratedKey, ApiError> {
    state
        .keys_generated
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if matches!(
        kt,
        warrant_ca::KeyType::Rsa2048 | warrant_ca::KeyType::Rsa4096
    ) {
        tokio::task::spawn_blocking(move || warrant_ca::generate_key(kt))
            .await
            .map_err(|e| ApiError::detail(ErrorKey::Internal, e.to_string()))?
    } else {
        warrant_ca::generate_key(kt)
    }
    .map_err(ca_error)
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
        agent::issue_agent(state, caller, req).await
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
    let key = KeySource::parse(req.csr_pem.as_deref(), req.key_type.as_deref())?
        .into_key(state)
        .await?;
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

/// `POST /api/v1/users/{id}/operator-cert`: an operator certificate issued
/// *for* `user`. It is a `tls-client` certificate named after the user,
/// carries no PA and no principal UID (it cannot delegate to agents), and
/// its row records the user: presented over mTLS it acts as that user, with
/// the user's current role. It is written directly, not through the
/// issuance queue, because the binding column belongs to this path only.
pub async fn issue_operator_cert<'a>(
    state: &'a AppState,
    user_id: i64,
    username: &str,
    req: OperatorCertRequest,
) -> Result<IssueResponse<'a>, ApiError> {
    let ca = issuing_ca(state, None)?;
    let chain_pem = chain_json(state, ca)?;
    let iss = &state.config.config.issuance;
    let subject = Subject::for_request(None, username, &iss.default_org, &iss.default_country)
        .map_err(ca_error)?;
    let now = unix(SystemTime::now());
    let secs = policy::leaf_validity_secs(
        now,
        req.validity,
        iss.default_validity_days,
        iss.max_validity_days,
        unix(ca.not_after()),
    )?;
    let key = KeySource::parse(req.csr_pem.as_deref(), req.key_type.as_deref())?
        .into_key(state)
        .await?;
    let profile = Profile::TlsClient;
    let issued = sign(
        state,
        ca,
        profile,
        &subject,
        &[],
        &key.spki_der,
        now,
        secs,
        &[],
    )?;
    let record = CertRecord {
        ca: ca.name().to_string(),
        serial: issued.serial_hex.clone(),
        common_name: username.to_string(),
        profile: profile.as_str().to_string(),
        status: CertStatus::Valid,
        not_before: unix(issued.not_before),
        not_after: unix(issued.not_after),
        der: issued.der,
        principal_uid: None,
        agent_id: None,
        key_hash: sha256(&key.spki_der).to_vec(),
        created_at: now,
        revoked_at: None,
        revocation_reason: None,
    };
    state
        .store
        .insert_bound_cert(&record, user_id)
        .await
        .map_err(store_error)?;
    crate::metrics::cert_issued(ca.name(), profile.as_str());
    Ok(IssueResponse {
        serial_number: issued.serial_hex,
        common_name: username.to_string(),
        cert_pem: issued.pem,
        key_pem: key.key_pem,
        chain_pem,
        ca: ca.name(),
        spiffe_id: None,
        principal_uid: None,
        profile: profile.as_str(),
        not_before: rfc3339(unix(issued.not_before)),
        not_after: rfc3339(unix(issued.not_after)),
    })
}

/// The body of `POST /api/v1/users/{id}/operator-cert`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct OperatorCertRequest {
    pub csr_pem: Option<String>,
    pub key_type: Option<String>,
    /// Days.
    pub validity: Option<u32>,
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
