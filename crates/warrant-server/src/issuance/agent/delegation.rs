//! Step 2 of ca.md §4: the delegation authorization (DA) fields of an agent
//! request, parsed and bounded. Pure.

use crate::error::{ApiError, ErrorKey, internal};
use crate::issuance::request::{IssueRequest, check_len, limits, parse_caps, parse_pa};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// Every DA field parsed and bounded.
pub(super) struct ParsedDelegation {
    pub agent_id: String,
    pub principal_uid: aic::PrincipalUid,
    pub mode: i64,
    pub capabilities: Vec<aic::Capability>,
    pub constraints: Vec<aic::Capability>,
    pub signature: Vec<u8>,
    pub signature_algorithm: aic::AlgorithmIdentifier,
    pub nonce: [u8; 32],
    pub lifetime: i64,
    pub timestamp: i64,
    pub reason_code: String,
    pub reason_description: String,
    pub key_binding: bool,
    pub body_pa: Option<aic::PrincipalAuthorization>,
}

/// The delegated grant: who, for whom, in which mode, with what.
struct Grant {
    agent_id: String,
    principal_uid: aic::PrincipalUid,
    mode: i64,
    capabilities: Vec<aic::Capability>,
    constraints: Vec<aic::Capability>,
}

/// The principal's signature over the DA and what makes it single-use.
struct SignedFields {
    signature: Vec<u8>,
    signature_algorithm: aic::AlgorithmIdentifier,
    nonce: [u8; 32],
    lifetime: i64,
    timestamp: i64,
}

pub(super) fn parse_delegation(req: &IssueRequest) -> Result<ParsedDelegation, ApiError> {
    let grant = parse_grant(req)?;
    let signed = parse_signed_fields(req)?;
    let (reason_code, reason_description) = parse_reason(req)?;
    let body_pa = req
        .principal_authorization
        .as_ref()
        .map(parse_pa)
        .transpose()?;
    Ok(ParsedDelegation {
        agent_id: grant.agent_id,
        principal_uid: grant.principal_uid,
        mode: grant.mode,
        capabilities: grant.capabilities,
        constraints: grant.constraints,
        signature: signed.signature,
        signature_algorithm: signed.signature_algorithm,
        nonce: signed.nonce,
        lifetime: signed.lifetime,
        timestamp: signed.timestamp,
        reason_code,
        reason_description,
        key_binding: req.agent_key_binding.unwrap_or(false),
        body_pa,
    })
}

fn parse_grant(req: &IssueRequest) -> Result<Grant, ApiError> {
    let agent_id = req
        .agent_id
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::field("agent_id", "required for agent-proxy"))?
        .to_string();
    check_len("agent_id", &agent_id, limits::AGENT_ID)?;
    let principal_uid = parse_principal_uid(req.principal_uid.as_deref())?;
    if let Some(h) = req.hash_algo.as_deref().filter(|s| !s.is_empty())
        && h.to_ascii_lowercase().replace('-', "") != "sha256"
    {
        return Err(ApiError::field(
            "hash_algo",
            format!("{h:?}: only sha256 is supported"),
        ));
    }
    let mode = req.delegation_mode.unwrap_or(0);
    if !(0..=1).contains(&mode) {
        return Err(ApiError::field(
            "delegation_mode",
            "must be 0 (authorized) or 1 (representative)",
        ));
    }
    Ok(Grant {
        agent_id,
        principal_uid,
        mode,
        capabilities: parse_caps(
            "capabilities",
            req.capabilities.as_ref(),
            limits::CAPABILITIES,
        )?,
        constraints: parse_caps(
            "authorization_constraints",
            req.authorization_constraints.as_ref(),
            limits::CONSTRAINTS,
        )?,
    })
}

fn parse_principal_uid(text: Option<&str>) -> Result<aic::PrincipalUid, ApiError> {
    let text = text.filter(|s| !s.is_empty()).ok_or_else(|| {
        ApiError::detail(ErrorKey::InvalidPrincipalUid, "principal_uid: required")
    })?;
    if text.len() > limits::PRINCIPAL_UID {
        return Err(ApiError::detail(
            ErrorKey::InvalidPrincipalUid,
            format!("principal_uid: longer than {} bytes", limits::PRINCIPAL_UID),
        ));
    }
    Ok(aic::PrincipalUid::parse(text)?)
}

fn parse_signed_fields(req: &IssueRequest) -> Result<SignedFields, ApiError> {
    let sig_b64 = require("user_auth_signature", req.user_auth_signature.as_ref())?;
    check_len("user_auth_signature", sig_b64, limits::SIGNATURE_B64)?;
    let signature = STANDARD
        .decode(sig_b64.trim())
        .map_err(|_| ApiError::field("user_auth_signature", "not standard base64"))?;
    let signature_algorithm = parse_signature_algorithm(req.user_auth_signature_algo.as_deref())?;
    let nonce = parse_nonce(req)?;
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
    Ok(SignedFields {
        signature,
        signature_algorithm,
        nonce,
        lifetime,
        timestamp,
    })
}

fn parse_nonce(req: &IssueRequest) -> Result<[u8; 32], ApiError> {
    let nonce_b64 = require("user_auth_nonce", req.user_auth_nonce.as_ref())?;
    check_len("user_auth_nonce", nonce_b64, 128)?;
    let bytes = STANDARD
        .decode(nonce_b64.trim())
        .map_err(|_| ApiError::field("user_auth_nonce", "not standard base64"))?;
    // aic.md rule 6: the 32-byte rule is issuance's, with its own key.
    bytes.as_slice().try_into().map_err(|_| {
        ApiError::detail(
            ErrorKey::InvalidDaNonce,
            format!("user_auth_nonce: must be 32 bytes, got {}", bytes.len()),
        )
    })
}

fn parse_reason(req: &IssueRequest) -> Result<(String, String), ApiError> {
    let code = req
        .user_auth_reason_code
        .clone()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            ApiError::detail(ErrorKey::ReasonRequired, "user_auth_reason_code: required")
        })?;
    check_len("user_auth_reason_code", &code, limits::REASON_CODE)?;
    let description = req.user_auth_reason_description.clone().unwrap_or_default();
    check_len(
        "user_auth_reason_description",
        &description,
        limits::REASON_DESCRIPTION,
    )?;
    Ok((code, description))
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
    let oid = aic::Oid::parse(dotted).ok_or_else(|| internal("bad built-in OID"))?;
    Ok(aic::AlgorithmIdentifier { oid, parameters })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn rejects_short_nonce_with_its_own_key_naming_field() {
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
        assert_eq!(e.key, ErrorKey::InvalidDaNonce);
        assert_eq!(
            e.detail.unwrap(),
            "user_auth_nonce: must be 32 bytes, got 16"
        );
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
