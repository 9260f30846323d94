//! JSON mapping helpers for the DER model (used by the `warrant aic` tools).
//!
//! Bytes are hex; timestamps RFC 3339; capability parameters are `{"utf8": …}`
//! when they are valid UTF-8 (the JSON-in-practice case stays readable) and
//! `{"hex": …}` otherwise (binary or control characters), so JSON → DER → JSON is byte-exact either way.

use serde::{Deserialize, Deserializer, Serialize, Serializer, de::Error as _};

use crate::der::Oid;

impl Serialize for Oid {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_dotted())
    }
}

impl<'de> Deserialize<'de> for Oid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Oid::parse(&s).ok_or_else(|| D::Error::custom(format!("invalid OID {s:?}")))
    }
}

pub mod hex {
    use super::*;

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::hex::encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        crate::hex::decode(&s).ok_or_else(|| D::Error::custom("invalid hex"))
    }
}

pub mod opt_hex {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => s.serialize_some(&crate::hex::encode(b)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        s.map(|s| crate::hex::decode(&s).ok_or_else(|| D::Error::custom("invalid hex")))
            .transpose()
    }
}

pub mod rfc3339 {
    use super::*;

    pub fn serialize<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::time::format_rfc3339(*v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let s = String::deserialize(d)?;
        crate::time::parse_rfc3339(&s).ok_or_else(|| {
            D::Error::custom(format!("timestamp must be YYYY-MM-DDTHH:MM:SSZ, got {s:?}"))
        })
    }
}

pub mod params {
    use super::*;

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case", deny_unknown_fields)]
    enum Params {
        Utf8(String),
        Hex(String),
        /// Input convenience: serialized compactly, read back as `utf8`.
        Json(serde_json::Value),
    }

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            None => s.serialize_none(),
            Some(b) => match std::str::from_utf8(b) {
                Ok(text)
                    if !text
                        .chars()
                        .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r')) =>
                {
                    s.serialize_some(&Params::Utf8(text.to_owned()))
                }
                _ => s.serialize_some(&Params::Hex(crate::hex::encode(b))),
            },
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Ok(match Option::<Params>::deserialize(d)? {
            None => None,
            Some(Params::Utf8(s)) => Some(s.into_bytes()),
            Some(Params::Hex(h)) => {
                Some(crate::hex::decode(&h).ok_or_else(|| D::Error::custom("invalid hex"))?)
            }
            Some(Params::Json(v)) => Some(serde_json::to_vec(&v).map_err(D::Error::custom)?),
        })
    }
}
