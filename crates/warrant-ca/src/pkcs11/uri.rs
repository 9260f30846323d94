//! PKCS#11 URIs (RFC 7512): which module, which token and which object a CA
//! key is. Pure: parsing and printing only.
//!
//! Accepted path attributes: `token`, `manufacturer`, `serial`, `model`,
//! `slot-id`, `object`, `id`, `type` (only `private`). Accepted query
//! attributes: `module-path` and `pin-source` (a file). Anything else is
//! refused rather than ignored, so a URI never matches more than its writer
//! meant. `pin-value` is refused by name: a PIN is read from an env var or a
//! file, never from configuration or from the data dir.

use std::fmt;
use std::path::PathBuf;

use crate::error::{CaError, Result};

/// The API and CLI field name URI errors carry.
pub const URI_FIELD: &str = "pkcs11_uri";

/// A parsed PKCS#11 URI. Every present attribute must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pkcs11Uri {
    pub token: Option<String>,
    pub manufacturer: Option<String>,
    pub serial: Option<String>,
    pub model: Option<String>,
    pub slot_id: Option<u64>,
    /// The object's `CKA_LABEL`.
    pub object: Option<String>,
    /// The object's `CKA_ID`.
    pub id: Option<Vec<u8>>,
    pub module_path: Option<PathBuf>,
    /// A file holding the PIN (`pin-source`).
    pub pin_source: Option<PathBuf>,
}

fn bad(reason: impl Into<String>) -> CaError {
    CaError::field(URI_FIELD, reason)
}

impl Pkcs11Uri {
    /// Parses `pkcs11:path[?query]`.
    pub fn parse(text: &str) -> Result<Pkcs11Uri> {
        let rest = text
            .strip_prefix("pkcs11:")
            .ok_or_else(|| bad(format!("{text:?} does not start with \"pkcs11:\"")))?;
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (rest, None),
        };
        let mut uri = Pkcs11Uri::default();
        for attr in path.split(';').filter(|a| !a.is_empty()) {
            let (name, raw) = attr
                .split_once('=')
                .ok_or_else(|| bad(format!("path attribute {attr:?} has no '='")))?;
            let value = percent_decode(raw, name)?;
            let text_value = || {
                String::from_utf8(value.clone())
                    .map_err(|_| bad(format!("{name} is not UTF-8 after percent-decoding")))
            };
            let slot: Option<&mut Option<String>> = match name {
                "token" => Some(&mut uri.token),
                "manufacturer" => Some(&mut uri.manufacturer),
                "serial" => Some(&mut uri.serial),
                "model" => Some(&mut uri.model),
                "object" => Some(&mut uri.object),
                _ => None,
            };
            if let Some(slot) = slot {
                if slot.is_some() {
                    return Err(bad(format!("path attribute {name} appears twice")));
                }
                *slot = Some(text_value()?);
                continue;
            }
            match name {
                "id" => {
                    if uri.id.is_some() {
                        return Err(bad("path attribute id appears twice"));
                    }
                    uri.id = Some(value);
                }
                "slot-id" => {
                    if uri.slot_id.is_some() {
                        return Err(bad("path attribute slot-id appears twice"));
                    }
                    let t = text_value()?;
                    uri.slot_id = Some(
                        t.parse()
                            .map_err(|_| bad(format!("slot-id {t:?} is not a number")))?,
                    );
                }
                "type" => {
                    let t = text_value()?;
                    if t != "private" {
                        return Err(bad(format!(
                            "type={t}: a CA key URI names a private key (type=private)"
                        )));
                    }
                }
                other => {
                    return Err(bad(format!(
                        "path attribute {other:?} is not supported (token, manufacturer, serial, model, slot-id, object, id, type)"
                    )));
                }
            }
        }
        for attr in query.into_iter().flat_map(|q| q.split('&')) {
            if attr.is_empty() {
                continue;
            }
            let (name, raw) = attr
                .split_once('=')
                .ok_or_else(|| bad(format!("query attribute {attr:?} has no '='")))?;
            match name {
                "pin-value" => {
                    return Err(bad(
                        "pin-value: a PIN is never taken from a URI; give it in an env var or a file (keys.pkcs11_pin_env, keys.pkcs11_pin_file or pin-source)",
                    ));
                }
                "module-path" | "pin-source" => {
                    let value = String::from_utf8(percent_decode(raw, name)?)
                        .map_err(|_| bad(format!("{name} is not UTF-8")))?;
                    let path = PathBuf::from(value.strip_prefix("file:").unwrap_or(&value));
                    if !path.is_absolute() {
                        return Err(bad(format!("{name} must be an absolute path")));
                    }
                    let slot = if name == "module-path" {
                        &mut uri.module_path
                    } else {
                        &mut uri.pin_source
                    };
                    if slot.is_some() {
                        return Err(bad(format!("query attribute {name} appears twice")));
                    }
                    *slot = Some(path);
                }
                other => {
                    return Err(bad(format!(
                        "query attribute {other:?} is not supported (module-path, pin-source)"
                    )));
                }
            }
        }
        Ok(uri)
    }

    /// Whether the URI names one object (by label or id), not only a token.
    pub fn names_object(&self) -> bool {
        self.object.is_some() || self.id.is_some()
    }

    /// The same token and module, naming the object `label` / `id` instead.
    pub fn with_object(&self, label: &str, id: &[u8]) -> Pkcs11Uri {
        Pkcs11Uri {
            object: Some(label.to_string()),
            id: Some(id.to_vec()),
            ..self.clone()
        }
    }
}

impl fmt::Display for Pkcs11Uri {
    /// The canonical form, with `type=private` when an object is named.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut path: Vec<String> = Vec::new();
        for (name, v) in [
            ("token", &self.token),
            ("manufacturer", &self.manufacturer),
            ("serial", &self.serial),
            ("model", &self.model),
        ] {
            if let Some(v) = v {
                path.push(format!("{name}={}", percent_encode(v.as_bytes())));
            }
        }
        if let Some(s) = self.slot_id {
            path.push(format!("slot-id={s}"));
        }
        if let Some(o) = &self.object {
            path.push(format!("object={}", percent_encode(o.as_bytes())));
        }
        if let Some(id) = &self.id {
            let hex: String = id.iter().map(|b| format!("%{b:02X}")).collect();
            path.push(format!("id={hex}"));
        }
        if self.names_object() {
            path.push("type=private".to_string());
        }
        write!(f, "pkcs11:{}", path.join(";"))?;
        let mut query: Vec<String> = Vec::new();
        for (name, v) in [
            ("module-path", &self.module_path),
            ("pin-source", &self.pin_source),
        ] {
            if let Some(p) = v {
                query.push(format!(
                    "{name}={}",
                    percent_encode(p.to_string_lossy().as_bytes())
                ));
            }
        }
        if !query.is_empty() {
            write!(f, "?{}", query.join("&"))?;
        }
        Ok(())
    }
}

/// RFC 3986 unreserved characters, plus the `/` paths need, pass through.
fn percent_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn percent_decode(raw: &str, name: &str) -> Result<Vec<u8>> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| bad(format!("{name}: bad percent-encoding")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_rfc_examples_we_accept() {
        let u = Pkcs11Uri::parse(
            "pkcs11:token=The%20Software%20PKCS%2311%20Softtoken;manufacturer=Snake%20Oil,%20Inc.;model=1.0;object=my-certificate;type=private;id=%69%95%3E%5C%F4%BD%EC%91",
        )
        .unwrap();
        assert_eq!(u.token.as_deref(), Some("The Software PKCS#11 Softtoken"));
        assert_eq!(u.manufacturer.as_deref(), Some("Snake Oil, Inc."));
        assert_eq!(u.model.as_deref(), Some("1.0"));
        assert_eq!(u.object.as_deref(), Some("my-certificate"));
        assert_eq!(
            u.id.as_deref(),
            Some(&[0x69, 0x95, 0x3e, 0x5c, 0xf4, 0xbd, 0xec, 0x91][..])
        );
        let m = Pkcs11Uri::parse(
            "pkcs11:token=w;slot-id=3?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-source=file:/etc/pin",
        )
        .unwrap();
        assert_eq!(m.slot_id, Some(3));
        assert_eq!(
            m.module_path.as_deref(),
            Some(std::path::Path::new("/usr/lib/softhsm/libsofthsm2.so"))
        );
        assert_eq!(
            m.pin_source.as_deref(),
            Some(std::path::Path::new("/etc/pin"))
        );
        assert!(!m.names_object());
    }

    #[test]
    fn printing_then_parsing_gives_the_same_uri() {
        let u = Pkcs11Uri {
            token: Some("warrant ca;1".into()),
            serial: Some("abc".into()),
            object: Some("warrant-people".into()),
            id: Some(vec![0, 255, 7]),
            module_path: Some("/usr/lib/softhsm/libsofthsm2.so".into()),
            ..Default::default()
        };
        let text = u.to_string();
        assert!(text.contains("token=warrant%20ca%3B1"), "{text}");
        assert!(text.contains("id=%00%FF%07;type=private"), "{text}");
        assert_eq!(Pkcs11Uri::parse(&text).unwrap(), u);
    }

    #[test]
    fn rejects_a_pin_in_the_uri() {
        let e = Pkcs11Uri::parse("pkcs11:token=a?pin-value=1234").unwrap_err();
        assert_eq!(e.invalid_field(), Some(URI_FIELD));
        assert!(e.to_string().contains("pin-value"), "{e}");
    }

    #[test]
    fn rejects_unknown_or_repeated_attributes_and_other_schemes() {
        for bad_uri in [
            "pkcs12:token=a",
            "pkcs11:token=a;token=b",
            "pkcs11:tokn=a",
            "pkcs11:token=a?module-name=softhsm2",
            "pkcs11:token",
            "pkcs11:id=%zz",
            "pkcs11:type=cert",
            "pkcs11:slot-id=x",
            "pkcs11:token=a?module-path=relative.so",
        ] {
            let e = Pkcs11Uri::parse(bad_uri).unwrap_err();
            assert_eq!(e.invalid_field(), Some(URI_FIELD), "{bad_uri}");
        }
    }
}
