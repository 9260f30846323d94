//! The delegation: its mode and reason, the `DelegationAuthorization` an AIC
//! carries, and the `DelegationAuthTBS` the principal signs (with the v2
//! `agentKeyBinding`).

use serde::{Deserialize, Serialize};

use crate::der::{Reader, TAG_SEQUENCE, Writer, ctx};
use crate::error::{DecodeError, DecodeErrorKind as K};
use crate::model::bounds;
use crate::model::capability::{
    Capability, decode_caps, decode_tagged_caps, encode_caps, encode_tagged_caps,
};
use crate::model::codec::{
    check_max_size, check_range, check_size, check_version, decode_all, decode_explicit_optional,
    read_string, whole_der,
};
use crate::model::uid::{AlgorithmIdentifier, PrincipalUid};

/// Lifetime the reference substitutes when `requestedLifetime` is encoded as 0.
pub const DEFAULT_REQUESTED_LIFETIME: i64 = 3600;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum DelegationMode {
    /// The agent acts under its own name with delegated rights.
    #[default]
    Authorized,
    /// The agent acts as the principal (`sub` = principal, `act.sub` = agent).
    Representative,
}

impl DelegationMode {
    pub fn as_i64(self) -> i64 {
        match self {
            DelegationMode::Authorized => 0,
            DelegationMode::Representative => 1,
        }
    }

    pub fn from_i64(v: i64, field: &'static str) -> Result<Self, DecodeError> {
        match v {
            0 => Ok(DelegationMode::Authorized),
            1 => Ok(DelegationMode::Representative),
            _ => Err(DecodeError::new(
                field,
                K::ValueOutOfRange {
                    min: 0,
                    max: 1,
                    actual: v,
                },
            )),
        }
    }

    /// The JWT spelling (`"authorized"` / `"representative"`).
    pub fn as_str(self) -> &'static str {
        match self {
            DelegationMode::Authorized => "authorized",
            DelegationMode::Representative => "representative",
        }
    }
}

/// `delegationMode INTEGER DEFAULT 0`.
pub(super) fn read_mode(
    r: &mut Reader<'_>,
    field: &'static str,
) -> Result<DelegationMode, DecodeError> {
    let v = r.read_integer_default(field, 0)?;
    DelegationMode::from_i64(v, field)
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reason {
    pub code: String,
    pub description: String,
}

impl Reason {
    pub fn new(code: &str, description: &str) -> Self {
        Reason {
            code: code.to_owned(),
            description: description.to_owned(),
        }
    }

    fn encode(&self, w: &mut Writer) {
        w.sequence(|w| {
            w.utf8(&self.code);
            w.utf8(&self.description);
        });
    }

    fn decode(r: &mut Reader<'_>, field: &'static str) -> Result<Self, DecodeError> {
        let mut s = r.read_nested(TAG_SEQUENCE, field)?;
        let code = read_string(&mut s, "reason.reasonCode", bounds::REASON_CODE)?;
        let description = read_string(&mut s, "reason.description", bounds::REASON_DESCRIPTION)?;
        s.finish(field)?;
        Ok(Reason { code, description })
    }

    fn validate_emitted(&self) -> Result<(), DecodeError> {
        check_size("reason.reasonCode", self.code.len(), bounds::REASON_CODE)?;
        check_size(
            "reason.description",
            self.description.len(),
            bounds::REASON_DESCRIPTION,
        )
    }
}

fn read_lifetime(r: &mut Reader<'_>, field: &'static str) -> Result<i64, DecodeError> {
    let v = r.read_integer(field)?;
    // 0 is tolerated on the wire (it means 3600); see `effective_lifetime`.
    check_range(field, v, 0, bounds::MAX_REQUESTED_LIFETIME)?;
    Ok(v)
}

/// The nonce as written, of any length (rule 6: the reference's own TBS_V2
/// vector carries 16 bytes); [`check_nonce`] is the 32-byte rule.
fn read_nonce(r: &mut Reader<'_>, field: &'static str) -> Result<Vec<u8>, DecodeError> {
    Ok(r.read_octets(field)?.to_vec())
}

/// The rule issuance and the verifier hold a DA's nonce to: exactly
/// [`bounds::NONCE_LEN`] bytes (32 CSPRNG bytes, the replay key the CA
/// consumes once). The codec does not apply it, so that decode → encode
/// stays byte-exact for what the reference emits.
pub fn check_nonce(field: &'static str, nonce: &[u8]) -> Result<(), DecodeError> {
    if nonce.len() == bounds::NONCE_LEN {
        Ok(())
    } else {
        Err(DecodeError::new(
            field,
            K::NonceLength {
                actual: nonce.len(),
            },
        ))
    }
}

/// Lifetime in seconds with the reference's rule that 0 means 3600.
pub fn effective_lifetime(requested: i64) -> i64 {
    if requested == 0 {
        DEFAULT_REQUESTED_LIFETIME
    } else {
        requested
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelegationAuthorization {
    pub reason: Reason,
    pub requested_lifetime: i64,
    /// Unix seconds, UTC.
    #[serde(with = "crate::serde_helpers::rfc3339")]
    pub timestamp: i64,
    /// Any length as decoded; [`check_nonce`] holds it to 32 bytes.
    #[serde(with = "crate::serde_helpers::hex")]
    pub nonce: Vec<u8>,
    pub signature_algorithm: AlgorithmIdentifier,
    #[serde(with = "crate::serde_helpers::hex")]
    pub signature_value: Vec<u8>,
}

impl DelegationAuthorization {
    pub fn encode(&self, w: &mut Writer) {
        w.sequence(|w| {
            self.reason.encode(w);
            w.integer(self.requested_lifetime);
            w.generalized_time(self.timestamp);
            w.octets(&self.nonce);
            self.signature_algorithm.encode(w);
            w.octets(&self.signature_value);
        });
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut s = r.read_nested(TAG_SEQUENCE, "DelegationAuthorization")?;
        let reason = Reason::decode(&mut s, "DelegationAuthorization.reason")?;
        let requested_lifetime =
            read_lifetime(&mut s, "DelegationAuthorization.requestedLifetime")?;
        let timestamp = s.read_generalized_time("DelegationAuthorization.timestamp")?;
        let nonce = read_nonce(&mut s, "DelegationAuthorization.nonce")?;
        let signature_algorithm =
            AlgorithmIdentifier::decode(&mut s, "DelegationAuthorization.signatureAlgorithm")?;
        let signature_value = s
            .read_octets("DelegationAuthorization.signatureValue")?
            .to_vec();
        s.finish("DelegationAuthorization")?;
        Ok(DelegationAuthorization {
            reason,
            requested_lifetime,
            timestamp,
            nonce,
            signature_algorithm,
            signature_value,
        })
    }
}

whole_der!(DelegationAuthorization, "DelegationAuthorization");

/// `agentKeyBinding`: the hash of the agent's SPKI, signed into a v2 TBS so a
/// valid DA cannot be grafted onto a different key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentKeyBinding {
    #[serde(with = "crate::serde_helpers::hex")]
    pub key_hash: Vec<u8>,
    pub hash_algo: AlgorithmIdentifier,
}

impl AgentKeyBinding {
    fn encode(&self, w: &mut Writer) {
        w.sequence(|w| {
            w.octets(&self.key_hash);
            w.nested(ctx(0), |w| self.hash_algo.encode(w));
        });
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut s = r.read_nested(TAG_SEQUENCE, "DelegationAuthTBS.agentKeyBinding")?;
        let key_hash = s
            .read_octets("DelegationAuthTBS.agentKeyBinding.keyHash")?
            .to_vec();
        check_max_size(
            "DelegationAuthTBS.agentKeyBinding.keyHash",
            key_hash.len(),
            bounds::KEY_HASH,
        )?;
        let inner = s.read(ctx(0), "DelegationAuthTBS.agentKeyBinding.hashAlgo")?;
        let hash_algo = decode_all(inner, "DelegationAuthTBS.agentKeyBinding.hashAlgo", |r| {
            AlgorithmIdentifier::decode(r, "DelegationAuthTBS.agentKeyBinding.hashAlgo")
        })?;
        s.finish("DelegationAuthTBS.agentKeyBinding")?;
        Ok(AgentKeyBinding {
            key_hash,
            hash_algo,
        })
    }
}

/// What the principal signs. Built from an AIC (to verify a certificate) or
/// from request fields (to issue one); the two must give the same bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelegationAuthTbs {
    /// 1, or 2 with `agent_key_binding`.
    pub version: i64,
    pub agent_id: String,
    pub principal_uid: PrincipalUid,
    pub reason: Reason,
    pub capabilities: Vec<Capability>,
    #[serde(default)]
    pub delegation_mode: DelegationMode,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<Capability>,
    pub requested_lifetime: i64,
    #[serde(with = "crate::serde_helpers::rfc3339")]
    pub timestamp: i64,
    /// Any length as decoded; [`check_nonce`] holds it to 32 bytes.
    #[serde(with = "crate::serde_helpers::hex")]
    pub nonce: Vec<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_key_binding: Option<AgentKeyBinding>,
}

impl DelegationAuthTbs {
    pub fn encode(&self, w: &mut Writer) {
        w.sequence(|w| {
            w.integer(self.version);
            w.utf8(&self.agent_id);
            self.principal_uid.encode(w);
            self.reason.encode(w);
            encode_caps(w, &self.capabilities);
            w.integer(self.delegation_mode.as_i64());
            encode_tagged_caps(w, ctx(0), &self.constraints);
            w.integer(self.requested_lifetime);
            w.generalized_time(self.timestamp);
            w.octets(&self.nonce);
            if let Some(b) = &self.agent_key_binding {
                w.nested(ctx(1), |w| b.encode(w));
            }
        });
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut s = r.read_nested(TAG_SEQUENCE, "DelegationAuthTBS")?;
        let version = s.read_integer("DelegationAuthTBS.version")?;
        check_version("DelegationAuthTBS.version", version, 2)?;
        let agent_id = read_string(&mut s, "DelegationAuthTBS.agentId", bounds::AGENT_ID)?;
        let principal_uid = PrincipalUid::decode(&mut s)?;
        let reason = Reason::decode(&mut s, "DelegationAuthTBS.reason")?;
        let capabilities = decode_caps(
            &mut s,
            "DelegationAuthTBS.capabilities",
            bounds::MAX_CAPABILITIES,
        )?;
        let delegation_mode = read_mode(&mut s, "DelegationAuthTBS.delegationMode")?;
        let constraints = decode_tagged_caps(
            &mut s,
            ctx(0),
            "DelegationAuthTBS.authorizationConstraints",
            bounds::MAX_CONSTRAINTS,
        )?;
        let requested_lifetime = read_lifetime(&mut s, "DelegationAuthTBS.requestedLifetime")?;
        let timestamp = s.read_generalized_time("DelegationAuthTBS.timestamp")?;
        let nonce = read_nonce(&mut s, "DelegationAuthTBS.nonce")?;
        let agent_key_binding = decode_explicit_optional(
            &mut s,
            ctx(1),
            "DelegationAuthTBS.agentKeyBinding",
            AgentKeyBinding::decode,
        )?;
        s.finish("DelegationAuthTBS")?;
        match (version, &agent_key_binding) {
            (0 | 1, Some(_)) => {
                return Err(DecodeError::new(
                    "DelegationAuthTBS.agentKeyBinding",
                    K::Inconsistent("a version 1 (or 0) TBS must not carry agentKeyBinding"),
                ));
            }
            (2, None) => {
                return Err(DecodeError::new(
                    "DelegationAuthTBS.agentKeyBinding",
                    K::Inconsistent("a version 2 TBS requires agentKeyBinding"),
                ));
            }
            _ => {}
        }
        Ok(DelegationAuthTbs {
            version,
            agent_id,
            principal_uid,
            reason,
            capabilities,
            delegation_mode,
            constraints,
            requested_lifetime,
            timestamp,
            nonce,
            agent_key_binding,
        })
    }

    /// Checks a TBS built from request fields against what Warrant emits and
    /// issuance requires: everything decoding checks, plus version 1 or 2 and
    /// the lower SIZE bounds (no empty strings or keyHash) and the 32-byte
    /// nonce that decoding does not enforce, so as to keep what the reference
    /// emits, its Go zero values included (rule 6).
    pub fn validate(&self) -> Result<(), DecodeError> {
        Self::from_der(&self.to_der())?;
        check_range("DelegationAuthTBS.version", self.version, 1, 2)?;
        check_size(
            "DelegationAuthTBS.agentId",
            self.agent_id.len(),
            bounds::AGENT_ID,
        )?;
        self.principal_uid.validate()?;
        self.reason.validate_emitted()?;
        check_nonce("DelegationAuthTBS.nonce", &self.nonce)?;
        for c in self.capabilities.iter().chain(&self.constraints) {
            c.validate_emitted()?;
        }
        if let Some(b) = &self.agent_key_binding {
            check_size(
                "DelegationAuthTBS.agentKeyBinding.keyHash",
                b.key_hash.len(),
                bounds::KEY_HASH,
            )?;
        }
        Ok(())
    }
}

whole_der!(DelegationAuthTbs, "DelegationAuthTBS");
