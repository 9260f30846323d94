//! What may be delegated: `Capability` and its lists, `DelegationPolicy`, and
//! the `PrincipalAuthorization` extension that carries both.

use serde::{Deserialize, Serialize};

use crate::der::{Reader, TAG_INTEGER, TAG_SEQUENCE, Writer, ctx};
use crate::error::{DecodeError, DecodeErrorKind as K};
use crate::model::bounds;
use crate::model::codec::{
    check_range, check_size, check_version, decode_explicit_optional, one, present_but_empty,
    read_string, whole_der,
};
use crate::model::ext_field::{ExtField, decode_tagged_exts, encode_tagged_exts};

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
        let parameters = decode_explicit_optional(&mut s, ctx(0), "Capability.parameters", |r| {
            r.read_octets("Capability.parameters").map(<[u8]>::to_vec)
        })?;
        s.finish("Capability")?;
        Ok(Capability {
            scheme_id,
            capability_id,
            parameters,
        })
    }

    /// The lower SIZE bounds decoding does not enforce (non-empty ids).
    pub(super) fn validate_emitted(&self) -> Result<(), DecodeError> {
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

whole_der!(Capability, "Capability");

/// `SEQUENCE OF Capability`, written as `30 00` when empty.
pub(super) fn encode_caps(w: &mut Writer, caps: &[Capability]) {
    w.sequence(|w| caps.iter().for_each(|c| c.encode(w)));
}

pub(super) fn decode_caps(
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
pub(super) fn encode_tagged_caps(w: &mut Writer, tag: u8, caps: &[Capability]) {
    if !caps.is_empty() {
        w.nested(tag, |w| encode_caps(w, caps));
    }
}

pub(super) fn decode_tagged_caps(
    r: &mut Reader<'_>,
    tag: u8,
    field: &'static str,
    max: usize,
) -> Result<Vec<Capability>, DecodeError> {
    match decode_explicit_optional(r, tag, field, |r| decode_caps(r, field, max))? {
        Some(caps) if caps.is_empty() => Err(present_but_empty(field)),
        caps => Ok(caps.unwrap_or_default()),
    }
}

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
        let max_session_hours =
            decode_explicit_optional(&mut s, ctx(0), "DelegationPolicy.maxSessionHours", |r| {
                r.read_integer("DelegationPolicy.maxSessionHours")
            })?;
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
}

whole_der!(DelegationPolicy, "DelegationPolicy");

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
        let delegation_policy = decode_explicit_optional(
            &mut s,
            ctx(1),
            "PrincipalAuthorization.delegationPolicy",
            DelegationPolicy::decode,
        )?;
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
}

whole_der!(PrincipalAuthorization, "PrincipalAuthorization");
