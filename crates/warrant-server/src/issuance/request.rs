//! The request bodies of issuance and the parsing every path shares: field
//! bounds, capability lists and the principal authorization (PA) in their
//! JSON form. Pure: no state, no IO.

use crate::error::ApiError;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use warrant_ca::Profile;

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

/// The body of `POST /api/v1/users/{id}/operator-cert`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct OperatorCertRequest {
    pub csr_pem: Option<String>,
    pub key_type: Option<String>,
    /// Days.
    pub validity: Option<u32>,
}

/// The requested profile; empty or absent is the CA's default.
pub(super) fn profile_of(req: &IssueRequest) -> Result<Profile, ApiError> {
    Ok(req.profile.as_deref().unwrap_or("").parse()?)
}

pub(super) fn check_len(field: &str, value: &str, max: usize) -> Result<(), ApiError> {
    if value.len() > max {
        return Err(ApiError::field(field, format!("longer than {max} bytes")));
    }
    Ok(())
}

/// The bounds of the name fields every profile reads.
pub(super) fn common_bounds(req: &IssueRequest) -> Result<(), ApiError> {
    if let Some(cn) = &req.cn
        && cn.chars().count() > limits::CN
    {
        return Err(ApiError::field(
            "cn",
            format!("longer than {} characters", limits::CN),
        ));
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

/// A decoded, bounded capability list.
pub(super) fn parse_caps(
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
        .map(|(i, c)| parse_cap(&format!("{field}[{i}]"), c))
        .collect()
}

/// One capability; `at` names it in errors (`capabilities[2]`).
fn parse_cap(at: &str, c: &CapabilityJson) -> Result<aic::Capability, ApiError> {
    let f = |sub: &str| format!("{at}.{sub}");
    if c.scheme_id.is_empty() || c.scheme_id.len() > 128 {
        return Err(ApiError::field(&f("scheme_id"), "must be 1..128 bytes"));
    }
    if c.capability_id.is_empty() || c.capability_id.len() > 256 {
        return Err(ApiError::field(&f("capability_id"), "must be 1..256 bytes"));
    }
    let parameters = match c.parameters.as_deref() {
        None | Some("") => None,
        Some(p) => {
            let field = f("parameters");
            check_len(&field, p, limits::PARAMETERS * 2)?;
            let bytes = STANDARD
                .decode(p)
                .map_err(|_| ApiError::field(&field, "not standard base64"))?;
            check_len_bytes(&field, &bytes, limits::PARAMETERS)?;
            Some(bytes)
        }
    };
    Ok(aic::Capability {
        scheme_id: c.scheme_id.clone(),
        capability_id: c.capability_id.clone(),
        parameters,
    })
}

fn check_len_bytes(field: &str, value: &[u8], max: usize) -> Result<(), ApiError> {
    if value.len() > max {
        return Err(ApiError::field(field, format!("longer than {max} bytes")));
    }
    Ok(())
}

/// Builds the PA from its JSON form (person certificates and body PAs).
pub(super) fn parse_pa(
    pa: &PrincipalAuthorizationJson,
) -> Result<aic::PrincipalAuthorization, ApiError> {
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
    Ok(aic::PrincipalAuthorization {
        version: 1,
        grants,
        constraints,
        delegation_policy: pa
            .delegation_policy
            .as_ref()
            .map(parse_policy)
            .transpose()?,
        extensions: Vec::new(),
    })
}

/// A PA's DelegationPolicy, each field within the range the PA allows.
fn parse_policy(p: &PolicyJson) -> Result<aic::DelegationPolicy, ApiError> {
    let field = |name: &str| format!("principal_authorization.delegation_policy.{name}");
    let allowed_mode = p.allowed_mode.unwrap_or(0);
    if !(0..=1).contains(&allowed_mode) {
        return Err(ApiError::field(&field("allowed_mode"), "must be 0 or 1"));
    }
    let max_agents = p.max_agents.unwrap_or(1);
    if !(0..=1_000_000).contains(&max_agents) {
        return Err(ApiError::field(&field("max_agents"), "must be 0..1000000"));
    }
    if let Some(h) = p.max_session_hours
        && !(1..=24 * 366).contains(&h)
    {
        return Err(ApiError::field(
            &field("max_session_hours"),
            "must be 1..8784",
        ));
    }
    Ok(aic::DelegationPolicy {
        version: 1,
        max_agents,
        allowed_mode,
        max_session_hours: p.max_session_hours,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn rejects_a_policy_field_out_of_range_naming_it() {
        let pa = PrincipalAuthorizationJson {
            delegation_policy: Some(PolicyJson {
                max_session_hours: Some(0),
                ..Default::default()
            }),
            ..Default::default()
        };
        let e = parse_pa(&pa).unwrap_err();
        assert_eq!(
            e.detail.as_deref(),
            Some("principal_authorization.delegation_policy.max_session_hours: must be 1..8784")
        );
    }
}
