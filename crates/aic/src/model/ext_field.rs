//! `ExtField`, the extension slot of the AIC and of PrincipalAuthorization, and
//! `DelegationDepthControl`, the one extension this library understands.

use serde::{Deserialize, Serialize};

use crate::der::{Oid, Reader, TAG_SEQUENCE, Writer};
use crate::error::{DecodeError, DecodeErrorKind as K};
use crate::model::bounds;
use crate::model::codec::{
    check_count, check_range, decode_all, decode_explicit_optional, encode_to_vec,
    present_but_empty,
};
use crate::oid;

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

/// `[n] EXPLICIT SEQUENCE OF ExtField OPTIONAL`, omitted when empty (and, like
/// the capability lists, refused when present but empty).
pub(super) fn encode_tagged_exts(w: &mut Writer, tag: u8, exts: &[ExtField]) {
    if !exts.is_empty() {
        w.nested(tag, |w| {
            w.sequence(|w| exts.iter().for_each(|e| e.encode(w)))
        });
    }
}

pub(super) fn decode_tagged_exts(
    r: &mut Reader<'_>,
    tag: u8,
    field: &'static str,
) -> Result<Vec<ExtField>, DecodeError> {
    let exts = decode_explicit_optional(r, tag, field, |r| {
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
    })?;
    Ok(exts.unwrap_or_default())
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
        encode_to_vec(|w| {
            w.sequence(|w| {
                w.integer(self.chain_depth);
                w.integer(self.max_depth);
            })
        })
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
