//! Identifiers: `AlgorithmIdentifier` and the principal's `PrincipalUid`.

use serde::{Deserialize, Serialize};

use crate::der::{Oid, Reader, TAG_SEQUENCE, Writer, ctx};
use crate::error::DecodeError;
use crate::model::bounds;
use crate::model::codec::{
    check_max_size, check_range, check_size, check_version, decode_all, decode_explicit_optional,
    encode_to_vec, one, read_string, whole_der,
};
use crate::oid;

/// `AlgorithmIdentifier`, with parameters kept as raw DER so that
/// "absent" and "NULL" stay distinct (the reference's hashAlgo has no NULL,
/// RSA signature algorithms conventionally do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlgorithmIdentifier {
    pub oid: Oid,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::serde_helpers::opt_hex"
    )]
    pub parameters: Option<Vec<u8>>,
}

impl AlgorithmIdentifier {
    pub fn new(oid: Oid) -> Self {
        AlgorithmIdentifier {
            oid,
            parameters: None,
        }
    }

    /// `{ sha256 }` with no parameters, as the reference writes hashAlgo.
    pub fn sha256() -> Self {
        Self::new(oid::sha256())
    }

    pub fn encode(&self, w: &mut Writer) {
        w.sequence(|w| {
            w.oid(&self.oid);
            if let Some(p) = &self.parameters {
                w.raw(p);
            }
        });
    }

    pub fn decode(r: &mut Reader<'_>, field: &'static str) -> Result<Self, DecodeError> {
        let mut s = r.read_nested(TAG_SEQUENCE, field)?;
        let oid = s.read_oid(field)?;
        let parameters = if s.is_empty() {
            None
        } else {
            let p = s.read_any_raw(field)?;
            s.finish(field)?;
            Some(p.to_vec())
        };
        Ok(AlgorithmIdentifier { oid, parameters })
    }

    pub fn to_der(&self) -> Vec<u8> {
        encode_to_vec(|w| self.encode(w))
    }

    pub fn from_der(der: &[u8]) -> Result<Self, DecodeError> {
        decode_all(der, "AlgorithmIdentifier", |r| {
            Self::decode(r, "AlgorithmIdentifier")
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalUid {
    #[serde(default = "one")]
    pub version: i64,
    pub realm: String,
    pub identifier: String,
    #[serde(with = "crate::serde_helpers::hex")]
    pub key_hash: Vec<u8>,
    /// Absent means SHA-256. The string form always sets it explicitly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_algo: Option<AlgorithmIdentifier>,
}

impl PrincipalUid {
    pub fn encode(&self, w: &mut Writer) {
        w.sequence(|w| {
            w.integer(self.version);
            w.utf8(&self.realm);
            w.utf8(&self.identifier);
            w.octets(&self.key_hash);
            if let Some(h) = &self.hash_algo {
                w.nested(ctx(0), |w| h.encode(w));
            }
        });
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut s = r.read_nested(TAG_SEQUENCE, "PrincipalUid")?;
        let version = s.read_integer_default("PrincipalUid.version", 1)?;
        check_version("PrincipalUid.version", version, 1)?;
        let realm = read_string(&mut s, "PrincipalUid.realm", bounds::REALM)?;
        let identifier = read_string(&mut s, "PrincipalUid.identifier", bounds::IDENTIFIER)?;
        let key_hash = s.read_octets("PrincipalUid.keyHash")?.to_vec();
        check_max_size("PrincipalUid.keyHash", key_hash.len(), bounds::KEY_HASH)?;
        let hash_algo = decode_explicit_optional(&mut s, ctx(0), "PrincipalUid.hashAlgo", |r| {
            AlgorithmIdentifier::decode(r, "PrincipalUid.hashAlgo")
        })?;
        s.finish("PrincipalUid")?;
        Ok(PrincipalUid {
            version,
            realm,
            identifier,
            key_hash,
            hash_algo,
        })
    }

    /// Checks what Warrant emits and issuance requires of a UID it builds:
    /// everything decoding checks, plus version 1 and the lower SIZE bounds
    /// (non-empty realm, identifier and keyHash) that decoding leaves to the
    /// caller so as to keep the reference's Go zero values.
    pub fn validate(&self) -> Result<(), DecodeError> {
        PrincipalUid::from_der(&self.to_der())?;
        check_range("PrincipalUid.version", self.version, 1, 1)?;
        Self::check_emitted_sizes(&self.realm, &self.identifier, &self.key_hash)
    }

    /// Both SIZE bounds of the three fields a UID is named by, in field order.
    pub(crate) fn check_emitted_sizes(
        realm: &str,
        identifier: &str,
        key_hash: &[u8],
    ) -> Result<(), DecodeError> {
        check_size("PrincipalUid.realm", realm.len(), bounds::REALM)?;
        check_size(
            "PrincipalUid.identifier",
            identifier.len(),
            bounds::IDENTIFIER,
        )?;
        check_size("PrincipalUid.keyHash", key_hash.len(), bounds::KEY_HASH)
    }
}

whole_der!(PrincipalUid, "PrincipalUid");
