//! Claim sets of the outer AIC-JWT and of the DA JWT (draft-wei-aic-jwt-02).
//! Unknown claims are ignored (JWT convention); the ones below are typed.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{Capability, DelegationMode};

/// `aud` may be a string or an array of strings (RFC 7519 §4.1.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Audience {
    One(String),
    Many(Vec<String>),
}

impl Audience {
    pub fn contains(&self, aud: &str) -> bool {
        match self {
            Audience::One(a) => a == aud,
            Audience::Many(v) => v.iter().any(|a| a == aud),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrincipalClaim {
    pub realm: String,
    pub id: String,
    pub key_hash: String,
    /// `"sha-256"` (base64url SHA-256 of the SPKI) or `"jkt"` (RFC 7638 thumbprint).
    pub hash_alg: String,
}

impl PrincipalClaim {
    pub fn realm_and_id(&self) -> String {
        format!("{}:{}", self.realm, self.id)
    }
}

/// A capability or constraint in JSON form: `{scheme, id, params}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapabilityClaim {
    pub scheme: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

impl CapabilityClaim {
    /// From the DER model: parameters are parsed as JSON when they are JSON,
    /// otherwise carried as a JSON string of their text (or dropped if binary).
    pub fn from_capability(c: &Capability) -> CapabilityClaim {
        let params = c.parameters.as_deref().map(|b| {
            serde_json::from_slice(b)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(b).into_owned()))
        });
        CapabilityClaim {
            scheme: c.scheme_id.clone(),
            id: c.capability_id.clone(),
            params,
        }
    }

    /// To the DER model: parameters become compact JSON bytes.
    pub fn to_capability(&self) -> Capability {
        Capability {
            scheme_id: self.scheme.clone(),
            capability_id: self.id.clone(),
            parameters: self.params.as_ref().map(|v| v.to_string().into_bytes()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasonClaim {
    pub code: String,
    pub desc: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyBindingClaim {
    pub key_hash: String,
    pub hash_alg: String,
}

/// The DA JWT (`typ=aic+da+jwt`), signed by the principal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaClaims {
    /// 3 = with `agent_key_binding`, 2 = legacy.
    pub ver: i64,
    pub iss: String,
    pub sub: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aud: Option<Audience>,
    pub exp: i64,
    pub iat: i64,
    pub jti: String,
    pub agent_id: String,
    pub principal: PrincipalClaim,
    pub reason: ReasonClaim,
    #[serde(default)]
    pub capabilities: Vec<CapabilityClaim>,
    pub delegation_mode: DelegationMode,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<CapabilityClaim>,
    pub requested_lifetime: i64,
    pub ts: i64,
    pub nonce: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_key_binding: Option<KeyBindingClaim>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cnf {
    pub jkt: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Act {
    pub sub: String,
}

/// The `aic` claim of the outer token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AicClaim {
    pub ver: i64,
    pub principal: PrincipalClaim,
    pub delegation_mode: DelegationMode,
    #[serde(default)]
    pub capabilities: Vec<CapabilityClaim>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<CapabilityClaim>,
    #[serde(default)]
    pub chain_depth: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Value>,
}

/// The outer AIC-JWT (`typ=aic+jwt`), signed by the issuer (the CA).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OuterClaims {
    pub iss: String,
    pub sub: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aud: Option<Audience>,
    pub iat: i64,
    pub exp: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<i64>,
    pub jti: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cnf: Option<Cnf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub act: Option<Act>,
    pub aic: AicClaim,
    pub da: String,
}
