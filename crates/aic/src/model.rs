//! The AIC data model and its DER codec.
//!
//! Encoding follows the Go reference byte for byte: DEFAULT integers are written
//! explicitly, empty constraint/extension lists are omitted, empty capability
//! lists are written as `30 00`. Decoding accepts both the explicit and the
//! omitted form of DEFAULT integers and is otherwise strict DER.

use crate::der::{Oid, Reader, TAG_INTEGER, TAG_SEQUENCE, Writer, ctx};
use crate::error::{DecodeError, DecodeErrorKind as K};
use crate::oid;
use serde::{Deserialize, Serialize};

/// SIZE bounds from the ASN.1 module (byte lengths of the encoded strings).
///
/// Decoding enforces only the upper bounds (and the exact nonce size): the
/// lower bounds are what Warrant emits and what issuance requires, while the Go
/// reference can write its zero values (`""`, an empty keyHash), which a
/// decoder must keep (aic.md rule 6). `validate` checks both ends.
pub mod bounds {
    pub const AGENT_ID: (usize, usize) = (1, 256);
    pub const REALM: (usize, usize) = (1, 128);
    pub const IDENTIFIER: (usize, usize) = (1, 256);
    pub const KEY_HASH: (usize, usize) = (1, 64);
    pub const SCHEME_ID: (usize, usize) = (1, 128);
    pub const CAPABILITY_ID: (usize, usize) = (1, 256);
    pub const REASON_CODE: (usize, usize) = (1, 64);
    pub const REASON_DESCRIPTION: (usize, usize) = (1, 512);
    pub const MAX_CAPABILITIES: usize = 256;
    pub const MAX_CONSTRAINTS: usize = 32;
    pub const MAX_EXTENSIONS: usize = 32;
    pub const NONCE_LEN: usize = 32;
    pub const MAX_REQUESTED_LIFETIME: i64 = 86_400;
}

/// Lifetime the reference substitutes when `requestedLifetime` is encoded as 0.
pub const DEFAULT_REQUESTED_LIFETIME: i64 = 3600;

pub(crate) fn check_size(
    field: &'static str,
    len: usize,
    (min, max): (usize, usize),
) -> Result<(), DecodeError> {
    if len < min || len > max {
        return Err(DecodeError::new(
            field,
            K::SizeOutOfRange {
                min,
                max,
                actual: len,
            },
        ));
    }
    Ok(())
}

/// Decode-time form of [`check_size`]: only the upper bound is enforced (the
/// lower one is reported in the error for context).
pub(crate) fn check_max_size(
    field: &'static str,
    len: usize,
    (min, max): (usize, usize),
) -> Result<(), DecodeError> {
    if len > max {
        return Err(DecodeError::new(
            field,
            K::SizeOutOfRange {
                min,
                max,
                actual: len,
            },
        ));
    }
    Ok(())
}

pub(crate) fn check_count(field: &'static str, len: usize, max: usize) -> Result<(), DecodeError> {
    if len > max {
        return Err(DecodeError::new(
            field,
            K::TooManyElements { max, actual: len },
        ));
    }
    Ok(())
}

pub(crate) fn check_range(
    field: &'static str,
    v: i64,
    min: i64,
    max: i64,
) -> Result<(), DecodeError> {
    if v < min || v > max {
        return Err(DecodeError::new(
            field,
            K::ValueOutOfRange {
                min,
                max,
                actual: v,
            },
        ));
    }
    Ok(())
}

/// A UTF8String bounded above; `""` (Go's zero value) is accepted and kept.
fn read_string(
    r: &mut Reader<'_>,
    field: &'static str,
    b: (usize, usize),
) -> Result<String, DecodeError> {
    let s = r.read_utf8(field)?;
    check_max_size(field, s.len(), b)?;
    Ok(s)
}

/// The `version` INTEGERs: the model's versions, or 0, Go's zero value, which
/// the reference writes when a struct's version was never set (aic.md rule 6).
/// 0 has the semantics of version 1 and is kept so that re-encoding is exact.
fn check_version(field: &'static str, v: i64, max: i64) -> Result<(), DecodeError> {
    check_range(field, v, 0, max)
}

/// Decodes a whole buffer with `f`, rejecting trailing bytes.
fn decode_all<T>(
    der: &[u8],
    field: &'static str,
    f: impl FnOnce(&mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    let mut r = Reader::new(der);
    let v = f(&mut r)?;
    r.finish(field)?;
    Ok(v)
}

// ---------------------------------------------------------------------------

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
        let mut w = Writer::new();
        self.encode(&mut w);
        w.into_bytes()
    }

    pub fn from_der(der: &[u8]) -> Result<Self, DecodeError> {
        decode_all(der, "AlgorithmIdentifier", |r| {
            Self::decode(r, "AlgorithmIdentifier")
        })
    }
}

// ---------------------------------------------------------------------------

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

fn one() -> i64 {
    1
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
        let hash_algo = match s.read_optional(ctx(0), "PrincipalUid.hashAlgo")? {
            Some(inner) => Some(decode_all(inner, "PrincipalUid.hashAlgo", |r| {
                AlgorithmIdentifier::decode(r, "PrincipalUid.hashAlgo")
            })?),
            None => None,
        };
        s.finish("PrincipalUid")?;
        Ok(PrincipalUid {
            version,
            realm,
            identifier,
            key_hash,
            hash_algo,
        })
    }

    pub fn to_der(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.encode(&mut w);
        w.into_bytes()
    }

    pub fn from_der(der: &[u8]) -> Result<Self, DecodeError> {
        decode_all(der, "PrincipalUid", Self::decode)
    }

    /// Checks what Warrant emits and issuance requires of a UID it builds:
    /// everything decoding checks, plus version 1 and the lower SIZE bounds
    /// (non-empty realm, identifier and keyHash) that decoding leaves to the
    /// caller so as to keep the reference's Go zero values.
    pub fn validate(&self) -> Result<(), DecodeError> {
        PrincipalUid::from_der(&self.to_der())?;
        check_range("PrincipalUid.version", self.version, 1, 1)?;
        check_size("PrincipalUid.realm", self.realm.len(), bounds::REALM)?;
        check_size(
            "PrincipalUid.identifier",
            self.identifier.len(),
            bounds::IDENTIFIER,
        )?;
        check_size(
            "PrincipalUid.keyHash",
            self.key_hash.len(),
            bounds::KEY_HASH,
        )
    }
}

// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capability {
    pub scheme_id: String,
    pub capability_id: String,
    /// Opaque bytes; JSON in practice.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::serde_helpers::params"
    )]
    pub parameters: Option<Vec<u8>>,
}

impl Capability {
    pub fn new(scheme_id: &str, capability_id: &str, parameters: Option<&[u8]>) -> Self {
        Capability {
            scheme_id: scheme_id.to_owned(),
            capability_id: capability_id.to_owned(),
            parameters: parameters.map(<[u8]>::to_vec),
        }
    }

    pub fn encode(&self, w: &mut Writer) {
        w.sequence(|w| {
            w.utf8(&self.scheme_id);
            w.utf8(&self.capability_id);
            if let Some(p) = &self.parameters {
                w.nested(ctx(0), |w| w.octets(p));
            }
        });
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut s = r.read_nested(TAG_SEQUENCE, "Capability")?;
        let scheme_id = read_string(&mut s, "Capability.schemeId", bounds::SCHEME_ID)?;
        let capability_id = read_string(&mut s, "Capability.capabilityId", bounds::CAPABILITY_ID)?;
        let parameters = match s.read_optional(ctx(0), "Capability.parameters")? {
            Some(inner) => Some(decode_all(inner, "Capability.parameters", |r| {
                r.read_octets("Capability.parameters").map(<[u8]>::to_vec)
            })?),
            None => None,
        };
        s.finish("Capability")?;
        Ok(Capability {
            scheme_id,
            capability_id,
            parameters,
        })
    }

    pub fn to_der(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.encode(&mut w);
        w.into_bytes()
    }

    pub fn from_der(der: &[u8]) -> Result<Self, DecodeError> {
        decode_all(der, "Capability", Self::decode)
    }

    /// The lower SIZE bounds decoding does not enforce (non-empty ids).
    fn validate_emitted(&self) -> Result<(), DecodeError> {
        check_size(
            "Capability.schemeId",
            self.scheme_id.len(),
            bounds::SCHEME_ID,
        )?;
        check_size(
            "Capability.capabilityId",
            self.capability_id.len(),
            bounds::CAPABILITY_ID,
        )
    }
}

fn encode_caps(w: &mut Writer, caps: &[Capability]) {
    w.sequence(|w| caps.iter().for_each(|c| c.encode(w)));
}

fn decode_caps(
    r: &mut Reader<'_>,
    field: &'static str,
    max: usize,
) -> Result<Vec<Capability>, DecodeError> {
    let mut s = r.read_nested(TAG_SEQUENCE, field)?;
    let mut out = Vec::new();
    while !s.is_empty() {
        if out.len() == max {
            return Err(DecodeError::new(
                field,
                K::TooManyElements {
                    max,
                    actual: max + 1,
                },
            ));
        }
        out.push(Capability::decode(&mut s)?);
    }
    Ok(out)
}

/// `[n] EXPLICIT SEQUENCE OF Capability OPTIONAL`, omitted when empty.
///
/// The model keeps no "present but empty" state, so decoding refuses `[n] { 30 00 }`
/// rather than silently re-encoding different bytes (which would break a
/// signature over them). Neither Warrant nor the reference emits it (rule 4).
fn encode_tagged_caps(w: &mut Writer, tag: u8, caps: &[Capability]) {
    if !caps.is_empty() {
        w.nested(tag, |w| encode_caps(w, caps));
    }
}

fn decode_tagged_caps(
    r: &mut Reader<'_>,
    tag: u8,
    field: &'static str,
    max: usize,
) -> Result<Vec<Capability>, DecodeError> {
    match r.read_optional(tag, field)? {
        Some(inner) => {
            let caps = decode_all(inner, field, |r| decode_caps(r, field, max))?;
            if caps.is_empty() {
                return Err(present_but_empty(field));
            }
            Ok(caps)
        }
        None => Ok(Vec::new()),
    }
}

// ---------------------------------------------------------------------------

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

fn read_mode(r: &mut Reader<'_>, field: &'static str) -> Result<DelegationMode, DecodeError> {
    let v = r.read_integer_default(field, 0)?;
    DelegationMode::from_i64(v, field)
}

// ---------------------------------------------------------------------------

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

fn present_but_empty(field: &'static str) -> DecodeError {
    DecodeError::new(
        field,
        K::Inconsistent("present but empty: an empty list is encoded by omitting it"),
    )
}

fn read_lifetime(r: &mut Reader<'_>, field: &'static str) -> Result<i64, DecodeError> {
    let v = r.read_integer(field)?;
    // 0 is tolerated on the wire (it means 3600); see `effective_lifetime`.
    check_range(field, v, 0, bounds::MAX_REQUESTED_LIFETIME)?;
    Ok(v)
}

fn read_nonce(r: &mut Reader<'_>, field: &'static str) -> Result<[u8; 32], DecodeError> {
    let n = r.read_octets(field)?;
    n.try_into()
        .map_err(|_| DecodeError::new(field, K::NonceLength { actual: n.len() }))
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
    #[serde(with = "crate::serde_helpers::hex32")]
    pub nonce: [u8; 32],
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

    pub fn to_der(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.encode(&mut w);
        w.into_bytes()
    }

    pub fn from_der(der: &[u8]) -> Result<Self, DecodeError> {
        decode_all(der, "DelegationAuthorization", Self::decode)
    }
}

// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtField {
    pub extn_id: Oid,
    #[serde(default)]
    pub critical: bool,
    #[serde(with = "crate::serde_helpers::hex")]
    pub extn_value: Vec<u8>,
}

/// Extensions this library understands; an unknown one marked critical makes
/// the whole structure invalid (X.509 semantics).
fn is_known_extension(oid: &Oid) -> bool {
    *oid == oid::delegation_depth_control()
}

impl ExtField {
    fn encode(&self, w: &mut Writer) {
        w.sequence(|w| {
            w.oid(&self.extn_id);
            // BOOLEAN DEFAULT FALSE: DER omits the default, like Go's pkix.Extension.
            if self.critical {
                w.boolean(true);
            }
            w.octets(&self.extn_value);
        });
    }

    fn decode(r: &mut Reader<'_>, field: &'static str) -> Result<Self, DecodeError> {
        let mut s = r.read_nested(TAG_SEQUENCE, field)?;
        let extn_id = s.read_oid("ExtField.extnID")?;
        let critical = s.read_bool_default_false("ExtField.critical")?;
        let extn_value = s.read_octets("ExtField.extnValue")?.to_vec();
        s.finish(field)?;
        if critical && !is_known_extension(&extn_id) {
            return Err(DecodeError::new(
                field,
                K::UnknownCriticalExtension {
                    oid: extn_id.to_dotted(),
                },
            ));
        }
        Ok(ExtField {
            extn_id,
            critical,
            extn_value,
        })
    }
}

fn encode_tagged_exts(w: &mut Writer, tag: u8, exts: &[ExtField]) {
    if !exts.is_empty() {
        w.nested(tag, |w| {
            w.sequence(|w| exts.iter().for_each(|e| e.encode(w)))
        });
    }
}

fn decode_tagged_exts(
    r: &mut Reader<'_>,
    tag: u8,
    field: &'static str,
) -> Result<Vec<ExtField>, DecodeError> {
    let Some(inner) = r.read_optional(tag, field)? else {
        return Ok(Vec::new());
    };
    decode_all(inner, field, |r| {
        let mut s = r.read_nested(TAG_SEQUENCE, field)?;
        let mut out = Vec::new();
        while !s.is_empty() {
            check_count(field, out.len() + 1, bounds::MAX_EXTENSIONS)?;
            out.push(ExtField::decode(&mut s, field)?);
        }
        if out.is_empty() {
            return Err(present_but_empty(field));
        }
        Ok(out)
    })
}

/// `DelegationDepthControl ::= SEQUENCE { chainDepth INTEGER, maxDepth INTEGER }`,
/// carried as an ExtField (OID `.1.1.4`) inside the AIC extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelegationDepthControl {
    pub chain_depth: i64,
    pub max_depth: i64,
}

impl DelegationDepthControl {
    pub fn to_der(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.sequence(|w| {
            w.integer(self.chain_depth);
            w.integer(self.max_depth);
        });
        w.into_bytes()
    }

    pub fn from_der(der: &[u8]) -> Result<Self, DecodeError> {
        decode_all(der, "DelegationDepthControl", |r| {
            let mut s = r.read_nested(TAG_SEQUENCE, "DelegationDepthControl")?;
            let chain_depth = s.read_integer("DelegationDepthControl.chainDepth")?;
            let max_depth = s.read_integer("DelegationDepthControl.maxDepth")?;
            check_range(
                "DelegationDepthControl.chainDepth",
                chain_depth,
                0,
                i64::from(u16::MAX),
            )?;
            check_range(
                "DelegationDepthControl.maxDepth",
                max_depth,
                0,
                i64::from(u16::MAX),
            )?;
            s.finish("DelegationDepthControl")?;
            Ok(DelegationDepthControl {
                chain_depth,
                max_depth,
            })
        })
    }

    pub fn to_ext_field(&self) -> ExtField {
        ExtField {
            extn_id: oid::delegation_depth_control(),
            critical: false,
            extn_value: self.to_der(),
        }
    }
}

// ---------------------------------------------------------------------------

/// The AIC X.509 extension value (OID 1.3.6.1.4.1.66257.1.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Aic {
    /// 1, or 2 when the DA was signed over an agentKeyBinding.
    #[serde(default = "one")]
    pub version: i64,
    pub agent_id: String,
    pub principal_uid: PrincipalUid,
    pub capabilities: Vec<Capability>,
    #[serde(default)]
    pub delegation_mode: DelegationMode,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<Capability>,
    /// Required to validate, optional to parse (the reference emits AICs
    /// without one, e.g. the `AIC_SIMPLE` vector).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation_authorization: Option<DelegationAuthorization>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<ExtField>,
}

impl Aic {
    pub fn encode(&self, w: &mut Writer) {
        w.sequence(|w| {
            w.integer(self.version);
            w.utf8(&self.agent_id);
            self.principal_uid.encode(w);
            encode_caps(w, &self.capabilities);
            w.integer(self.delegation_mode.as_i64());
            encode_tagged_caps(w, ctx(0), &self.constraints);
            if let Some(da) = &self.delegation_authorization {
                da.encode(w);
            }
            encode_tagged_exts(w, ctx(1), &self.extensions);
        });
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut s = r.read_nested(TAG_SEQUENCE, "AIC")?;
        let version = s.read_integer_default("AIC.version", 1)?;
        check_version("AIC.version", version, 2)?;
        let agent_id = read_string(&mut s, "AIC.agentId", bounds::AGENT_ID)?;
        let principal_uid = PrincipalUid::decode(&mut s)?;
        let capabilities = decode_caps(&mut s, "AIC.capabilities", bounds::MAX_CAPABILITIES)?;
        let delegation_mode = read_mode(&mut s, "AIC.delegationMode")?;
        let constraints = decode_tagged_caps(
            &mut s,
            ctx(0),
            "AIC.authorizationConstraints",
            bounds::MAX_CONSTRAINTS,
        )?;
        let delegation_authorization = if s.peek_tag() == Some(TAG_SEQUENCE) {
            Some(DelegationAuthorization::decode(&mut s)?)
        } else {
            None
        };
        let extensions = decode_tagged_exts(&mut s, ctx(1), "AIC.extensions")?;
        s.finish("AIC")?;
        Ok(Aic {
            version,
            agent_id,
            principal_uid,
            capabilities,
            delegation_mode,
            constraints,
            delegation_authorization,
            extensions,
        })
    }

    pub fn to_der(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.encode(&mut w);
        w.into_bytes()
    }

    pub fn from_der(der: &[u8]) -> Result<Self, DecodeError> {
        decode_all(der, "AIC", Self::decode)
    }

    /// The DelegationDepthControl extension, if present.
    pub fn depth_control(&self) -> Result<Option<DelegationDepthControl>, DecodeError> {
        self.extensions
            .iter()
            .find(|e| e.extn_id == oid::delegation_depth_control())
            .map(|e| DelegationDepthControl::from_der(&e.extn_value))
            .transpose()
    }
}

// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelegationPolicy {
    #[serde(default = "one")]
    pub version: i64,
    #[serde(default = "one")]
    pub max_agents: i64,
    /// 0 authorizedOnly, 1 representativeAllowed.
    pub allowed_mode: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_session_hours: Option<i64>,
}

impl DelegationPolicy {
    pub fn representative_allowed(&self) -> bool {
        self.allowed_mode == 1
    }

    pub fn encode(&self, w: &mut Writer) {
        w.sequence(|w| {
            w.integer(self.version);
            w.integer(self.max_agents);
            w.integer(self.allowed_mode);
            if let Some(h) = self.max_session_hours {
                w.nested(ctx(0), |w| w.integer(h));
            }
        });
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut s = r.read_nested(TAG_SEQUENCE, "DelegationPolicy")?;
        let version = s.read_integer("DelegationPolicy.version")?;
        check_version("DelegationPolicy.version", version, 1)?;
        // maxAgents has a DEFAULT; allowedMode does not, so two INTEGERs in a row
        // mean both are present and a single one is allowedMode.
        let first = s.read_integer("DelegationPolicy.allowedMode")?;
        let (max_agents, allowed_mode) = if s.peek_tag() == Some(TAG_INTEGER) {
            (first, s.read_integer("DelegationPolicy.allowedMode")?)
        } else {
            (1, first)
        };
        check_range(
            "DelegationPolicy.maxAgents",
            max_agents,
            0,
            i64::from(u32::MAX),
        )?;
        check_range("DelegationPolicy.allowedMode", allowed_mode, 0, 1)?;
        let max_session_hours = match s.read_optional(ctx(0), "DelegationPolicy.maxSessionHours")? {
            Some(inner) => Some(decode_all(
                inner,
                "DelegationPolicy.maxSessionHours",
                |r| r.read_integer("DelegationPolicy.maxSessionHours"),
            )?),
            None => None,
        };
        if let Some(h) = max_session_hours {
            check_range(
                "DelegationPolicy.maxSessionHours",
                h,
                0,
                i64::from(u32::MAX),
            )?;
        }
        s.finish("DelegationPolicy")?;
        Ok(DelegationPolicy {
            version,
            max_agents,
            allowed_mode,
            max_session_hours,
        })
    }

    pub fn to_der(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.encode(&mut w);
        w.into_bytes()
    }

    pub fn from_der(der: &[u8]) -> Result<Self, DecodeError> {
        decode_all(der, "DelegationPolicy", Self::decode)
    }
}

/// PrincipalAuthorization (OID 1.3.6.1.4.1.66257.1.2): what a principal may
/// delegate. Lives in the principal's certificate and is copied into agent certs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalAuthorization {
    #[serde(default = "one")]
    pub version: i64,
    pub grants: Vec<Capability>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<Capability>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation_policy: Option<DelegationPolicy>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<ExtField>,
}

impl PrincipalAuthorization {
    pub fn encode(&self, w: &mut Writer) {
        w.sequence(|w| {
            w.integer(self.version);
            encode_caps(w, &self.grants);
            encode_tagged_caps(w, ctx(0), &self.constraints);
            if let Some(p) = &self.delegation_policy {
                w.nested(ctx(1), |w| p.encode(w));
            }
            encode_tagged_exts(w, ctx(2), &self.extensions);
        });
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut s = r.read_nested(TAG_SEQUENCE, "PrincipalAuthorization")?;
        let version = s.read_integer("PrincipalAuthorization.version")?;
        check_version("PrincipalAuthorization.version", version, 1)?;
        let grants = decode_caps(
            &mut s,
            "PrincipalAuthorization.grants",
            bounds::MAX_CAPABILITIES,
        )?;
        let constraints = decode_tagged_caps(
            &mut s,
            ctx(0),
            "PrincipalAuthorization.authorizationConstraints",
            bounds::MAX_CONSTRAINTS,
        )?;
        let delegation_policy =
            match s.read_optional(ctx(1), "PrincipalAuthorization.delegationPolicy")? {
                Some(inner) => Some(decode_all(
                    inner,
                    "PrincipalAuthorization.delegationPolicy",
                    DelegationPolicy::decode,
                )?),
                None => None,
            };
        let extensions = decode_tagged_exts(&mut s, ctx(2), "PrincipalAuthorization.extensions")?;
        s.finish("PrincipalAuthorization")?;
        Ok(PrincipalAuthorization {
            version,
            grants,
            constraints,
            delegation_policy,
            extensions,
        })
    }

    pub fn to_der(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.encode(&mut w);
        w.into_bytes()
    }

    pub fn from_der(der: &[u8]) -> Result<Self, DecodeError> {
        decode_all(der, "PrincipalAuthorization", Self::decode)
    }
}

// ---------------------------------------------------------------------------

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
    /// SHA-256 of the agent's DER SubjectPublicKeyInfo.
    pub fn for_spki(agent_spki_der: &[u8]) -> Self {
        AgentKeyBinding {
            key_hash: crate::crypto::sha256(agent_spki_der).to_vec(),
            hash_algo: AlgorithmIdentifier::sha256(),
        }
    }

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
    #[serde(with = "crate::serde_helpers::hex32")]
    pub nonce: [u8; 32],
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
        let agent_key_binding =
            match s.read_optional(ctx(1), "DelegationAuthTBS.agentKeyBinding")? {
                Some(inner) => Some(decode_all(
                    inner,
                    "DelegationAuthTBS.agentKeyBinding",
                    AgentKeyBinding::decode,
                )?),
                None => None,
            };
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

    pub fn to_der(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.encode(&mut w);
        w.into_bytes()
    }

    pub fn from_der(der: &[u8]) -> Result<Self, DecodeError> {
        decode_all(der, "DelegationAuthTBS", Self::decode)
    }

    /// Checks a TBS built from request fields against what Warrant emits and
    /// issuance requires: everything decoding checks, plus version 1 or 2 and
    /// the lower SIZE bounds (no empty strings or keyHash) that decoding does
    /// not enforce, so as to keep the reference's Go zero values (rule 6).
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
