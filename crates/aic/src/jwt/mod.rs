//! AIC-JWT (draft-wei-aic-jwt-02): issuing the DA JWT and the outer token, and
//! verifying them in the spec's order, each failure naming its step.

pub mod claims;
pub mod dpop;
pub mod jwk;
pub mod jws;
pub mod policy;
mod verify;

pub use claims::*;
pub use jwk::{JwkSet, jwk_thumbprint, public_jwk, spki_from_jwk};
pub use jws::{JwsAlgorithm, JwsError, JwsHeader, JwsSigningKey};
pub use policy::ConstraintContext;
pub use verify::*;

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};

use crate::model::{DelegationMode, PrincipalUid};

pub const OUTER_TYP: &str = "aic+jwt";
pub const DA_TYP: &str = "aic+da+jwt";

/// How `key_hash` names a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyHashAlg {
    /// `base64url(SHA-256(SPKI DER))`, `hash_alg: "sha-256"`.
    Sha256,
    /// RFC 7638 thumbprint, `hash_alg: "jkt"`.
    Jkt,
}

impl KeyHashAlg {
    pub fn name(self) -> &'static str {
        match self {
            KeyHashAlg::Sha256 => "sha-256",
            KeyHashAlg::Jkt => "jkt",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "sha-256" => Some(KeyHashAlg::Sha256),
            "jkt" => Some(KeyHashAlg::Jkt),
            _ => None,
        }
    }
}

/// `key_hash` of a DER SPKI under `alg`.
pub fn key_hash(spki_der: &[u8], alg: KeyHashAlg) -> Result<String, JwsError> {
    match alg {
        KeyHashAlg::Sha256 => Ok(URL_SAFE_NO_PAD.encode(crate::crypto::sha256(spki_der))),
        KeyHashAlg::Jkt => jwk_thumbprint(spki_der),
    }
}

/// What a DA JWT states; signed by the principal.
#[derive(Debug, Clone)]
pub struct DaJwtRequest {
    pub principal: PrincipalUid,
    pub principal_spki_der: Vec<u8>,
    pub key_hash_alg: KeyHashAlg,
    pub agent_id: String,
    /// The CA the DA is addressed to (`aud`).
    pub audience: Vec<String>,
    pub reason: ReasonClaim,
    pub capabilities: Vec<CapabilityClaim>,
    pub delegation_mode: DelegationMode,
    pub constraints: Vec<CapabilityClaim>,
    pub requested_lifetime: i64,
    pub ts: i64,
    pub nonce: [u8; 32],
    /// Some: `ver: 3` with `agent_key_binding` (SHA-256 of the agent SPKI).
    pub agent_spki_der: Option<Vec<u8>>,
}

impl DaJwtRequest {
    pub fn claims(&self) -> Result<DaClaims, JwsError> {
        let nonce = URL_SAFE_NO_PAD.encode(self.nonce);
        Ok(DaClaims {
            ver: if self.agent_spki_der.is_some() { 3 } else { 2 },
            iss: self.principal.realm_and_identifier(),
            // The draft's form: the agent in authorized mode, the principal
            // (`realm:id`) in representative mode, where `agent_id` names the agent.
            sub: match self.delegation_mode {
                DelegationMode::Authorized => self.agent_id.clone(),
                DelegationMode::Representative => self.principal.realm_and_identifier(),
            },
            aud: (!self.audience.is_empty()).then(|| Audience::Many(self.audience.clone())),
            exp: self.ts + self.requested_lifetime,
            iat: self.ts,
            jti: nonce.clone(),
            agent_id: self.agent_id.clone(),
            principal: PrincipalClaim {
                realm: self.principal.realm.clone(),
                id: self.principal.identifier.clone(),
                key_hash: key_hash(&self.principal_spki_der, self.key_hash_alg)?,
                hash_alg: self.key_hash_alg.name().into(),
            },
            reason: self.reason.clone(),
            capabilities: self.capabilities.clone(),
            delegation_mode: self.delegation_mode,
            constraints: self.constraints.clone(),
            requested_lifetime: self.requested_lifetime,
            ts: self.ts,
            nonce,
            agent_key_binding: self.agent_spki_der.as_deref().map(|spki| KeyBindingClaim {
                key_hash: URL_SAFE_NO_PAD.encode(crate::crypto::sha256(spki)),
                hash_alg: KeyHashAlg::Sha256.name().into(),
            }),
        })
    }
}

/// Signs a DA JWT (`typ=aic+da+jwt`) with the principal's key.
pub fn issue_da_jwt(req: &DaJwtRequest, principal_key: &JwsSigningKey) -> Result<String, JwsError> {
    let claims =
        serde_json::to_value(req.claims()?).map_err(|e| JwsError::Signing(e.to_string()))?;
    jws::sign(&claims, DA_TYP, principal_key)
}

/// What the issuer adds around a DA JWT.
#[derive(Debug, Clone)]
pub struct OuterTokenRequest {
    pub issuer: String,
    /// `aud`; empty: the token names no audience.
    pub audience: Vec<String>,
    pub iat: i64,
    /// `exp - iat`; capped by the DA's requested lifetime and its `exp`.
    pub lifetime: i64,
    /// `cnf.jkt`: the RFC 7638 thumbprint of the presenter's key.
    pub cnf_jkt: Option<String>,
    pub chain_depth: i64,
    pub max_depth: Option<i64>,
    /// Constraints the issuer adds to the DA's (the principal's standing
    /// constraints, say); the DA's own are always kept.
    pub added_constraints: Vec<CapabilityClaim>,
}

impl OuterClaims {
    /// The outer claims around a DA JWT whose claims are `d`. The DA's
    /// claims are copied, not trusted: the caller must have verified its
    /// signature with the principal key.
    pub fn wrap(req: &OuterTokenRequest, da_jwt: &str, d: &DaClaims) -> OuterClaims {
        let exp = (req.iat + req.lifetime.min(d.requested_lifetime)).min(d.exp);
        let (sub, act) = match d.delegation_mode {
            DelegationMode::Authorized => (d.agent_id.clone(), None),
            DelegationMode::Representative => (
                d.principal.realm_and_id(),
                Some(Act {
                    sub: d.agent_id.clone(),
                }),
            ),
        };
        let mut constraints = d.constraints.clone();
        for c in &req.added_constraints {
            if !constraints.contains(c) {
                constraints.push(c.clone());
            }
        }
        OuterClaims {
            iss: req.issuer.clone(),
            sub,
            aud: (!req.audience.is_empty()).then(|| Audience::Many(req.audience.clone())),
            iat: req.iat,
            exp,
            nbf: None,
            jti: d.jti.clone(),
            cnf: req.cnf_jkt.clone().map(|jkt| Cnf { jkt }),
            act,
            aic: AicClaim {
                ver: 1,
                principal: d.principal.clone(),
                delegation_mode: d.delegation_mode,
                capabilities: d.capabilities.clone(),
                constraints,
                chain_depth: req.chain_depth,
                max_depth: req.max_depth,
                extensions: None,
            },
            da: da_jwt.to_owned(),
        }
    }
}

/// Wraps a principal-signed DA JWT into the outer AIC-JWT signed by the issuer.
/// The DA's signature is not checked here: the caller must have verified it
/// with the principal key.
pub fn issue_outer_token(
    req: &OuterTokenRequest,
    da_jwt: &str,
    issuer_key: &JwsSigningKey,
) -> Result<String, JwsError> {
    let da = jws::parse(da_jwt, DA_TYP, false)?;
    let d: DaClaims = serde_json::from_slice(&da.payload)
        .map_err(|e| JwsError::Json("DA payload", e.to_string()))?;
    let claims = OuterClaims::wrap(req, da_jwt, &d);
    let value = serde_json::to_value(claims).map_err(|e| JwsError::Signing(e.to_string()))?;
    jws::sign(&value, OUTER_TYP, issuer_key)
}
