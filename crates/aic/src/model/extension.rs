//! The AIC X.509 extension value itself.

use serde::{Deserialize, Serialize};

use crate::der::{Reader, TAG_SEQUENCE, Writer, ctx};
use crate::error::DecodeError;
use crate::model::bounds;
use crate::model::capability::{
    Capability, decode_caps, decode_tagged_caps, encode_caps, encode_tagged_caps,
};
use crate::model::codec::{check_version, one, read_string, whole_der};
use crate::model::delegation::{DelegationAuthorization, DelegationMode, read_mode};
use crate::model::ext_field::{
    DelegationDepthControl, ExtField, decode_tagged_exts, encode_tagged_exts,
};
use crate::model::uid::PrincipalUid;
use crate::oid;

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

    /// The DelegationDepthControl extension, if present.
    pub fn depth_control(&self) -> Result<Option<DelegationDepthControl>, DecodeError> {
        self.extensions
            .iter()
            .find(|e| e.extn_id == oid::delegation_depth_control())
            .map(|e| DelegationDepthControl::from_der(&e.extn_value))
            .transpose()
    }
}

whole_der!(Aic, "AIC");
