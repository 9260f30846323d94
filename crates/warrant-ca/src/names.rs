//! Subject DN and SubjectAltName parsing: the request's `subject` and `san`
//! strings become validated values that encode straight to DER.

use std::net::IpAddr;

use const_oid::ObjectIdentifier;

use crate::derw::{self, TAG_SEQUENCE, TAG_SET};
use crate::error::{CaError, Result};
use crate::oids;

/// A DN attribute Warrant accepts in `subject`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DnAttribute {
    Country,
    State,
    Locality,
    Organization,
    OrganizationalUnit,
    CommonName,
}

impl DnAttribute {
    fn from_key(key: &str) -> Option<Self> {
        Some(match key {
            "C" => DnAttribute::Country,
            "ST" => DnAttribute::State,
            "L" => DnAttribute::Locality,
            "O" => DnAttribute::Organization,
            "OU" => DnAttribute::OrganizationalUnit,
            "CN" => DnAttribute::CommonName,
            _ => return None,
        })
    }

    pub fn key(self) -> &'static str {
        match self {
            DnAttribute::Country => "C",
            DnAttribute::State => "ST",
            DnAttribute::Locality => "L",
            DnAttribute::Organization => "O",
            DnAttribute::OrganizationalUnit => "OU",
            DnAttribute::CommonName => "CN",
        }
    }

    fn oid(self) -> ObjectIdentifier {
        match self {
            DnAttribute::Country => oids::AT_COUNTRY,
            DnAttribute::State => oids::AT_STATE,
            DnAttribute::Locality => oids::AT_LOCALITY,
            DnAttribute::Organization => oids::AT_ORGANIZATION,
            DnAttribute::OrganizationalUnit => oids::AT_ORG_UNIT,
            DnAttribute::CommonName => oids::AT_COMMON_NAME,
        }
    }

    /// RFC 5280 Appendix A upper bounds.
    fn max_len(self) -> usize {
        match self {
            DnAttribute::Country => 2,
            DnAttribute::State | DnAttribute::Locality => 128,
            DnAttribute::Organization
            | DnAttribute::OrganizationalUnit
            | DnAttribute::CommonName => 64,
        }
    }
}

/// A subject DN: attributes in encoding order, one attribute per RDN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    attributes: Vec<(DnAttribute, String)>,
}

const MAX_SUBJECT_ATTRIBUTES: usize = 32;

impl Subject {
    /// The subject for a request: the `subject` string when given (a CN from
    /// `cn` is appended if it lacks one), otherwise `CN=<cn>, O=<org>, C=<country>`
    /// (encoded C, O, CN; empty org/country are left out).
    pub fn for_request(
        subject: Option<&str>,
        cn: &str,
        default_org: &str,
        default_country: &str,
    ) -> Result<Self> {
        match subject.map(str::trim).filter(|s| !s.is_empty()) {
            Some(s) => {
                let mut parsed = Subject::parse(s)?;
                if parsed.common_name().is_none() && !cn.is_empty() {
                    parsed.push(DnAttribute::CommonName, cn, "cn")?;
                }
                Ok(parsed)
            }
            None => {
                let mut out = Subject {
                    attributes: Vec::new(),
                };
                if !default_country.is_empty() {
                    out.push(DnAttribute::Country, default_country, "default_country")?;
                }
                if !default_org.is_empty() {
                    out.push(DnAttribute::Organization, default_org, "default_org")?;
                }
                out.push(DnAttribute::CommonName, cn, "cn")?;
                Ok(out)
            }
        }
    }

    /// An agent's subject, built by the CA rather than taken from a request:
    /// `C=<country>, O=<org>, OU=<role>…, CN=<agent id>` (empty org/country
    /// are left out). `roles` are the gateway roles, at least one.
    pub fn for_agent(agent_id: &str, roles: &[&str], org: &str, country: &str) -> Result<Self> {
        let mut out = Subject {
            attributes: Vec::with_capacity(3 + roles.len()),
        };
        if !country.is_empty() {
            out.push(DnAttribute::Country, country, "default_country")?;
        }
        if !org.is_empty() {
            out.push(DnAttribute::Organization, org, "default_org")?;
        }
        for role in roles {
            out.push(DnAttribute::OrganizationalUnit, role, "subject")?;
        }
        out.push(DnAttribute::CommonName, agent_id, "agent_id")?;
        Ok(out)
    }

    /// Parses `/C=US/O=Acme/OU=a/OU=b/CN=name`. `\/` and `\\` escape a slash or
    /// a backslash inside a value. Attributes keep their order.
    pub fn parse(s: &str) -> Result<Self> {
        let Some(rest) = s.strip_prefix('/') else {
            return Err(CaError::field(
                "subject",
                "must look like /C=US/O=Org/OU=Unit/CN=name",
            ));
        };
        let mut parts = Vec::new();
        let mut current = String::new();
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some(n @ ('/' | '\\')) => current.push(n),
                    _ => return Err(CaError::field("subject", "bad escape (use \\/ or \\\\)")),
                },
                '/' => parts.push(std::mem::take(&mut current)),
                c => current.push(c),
            }
        }
        parts.push(current);
        let mut out = Subject {
            attributes: Vec::new(),
        };
        for part in parts {
            let Some((key, value)) = part.split_once('=') else {
                return Err(CaError::field(
                    "subject",
                    format!("{part:?} is not KEY=value"),
                ));
            };
            let attr = DnAttribute::from_key(key.trim()).ok_or_else(|| {
                CaError::field(
                    "subject",
                    format!("unsupported attribute {key:?} (C, ST, L, O, OU, CN)"),
                )
            })?;
            out.push(attr, value.trim(), "subject")?;
        }
        Ok(out)
    }

    fn push(&mut self, attr: DnAttribute, value: &str, field: &'static str) -> Result<()> {
        if value.is_empty() {
            return Err(CaError::field(field, format!("empty {}", attr.key())));
        }
        if value.chars().count() > attr.max_len() {
            return Err(CaError::field(
                field,
                format!("{} longer than {} characters", attr.key(), attr.max_len()),
            ));
        }
        if value.chars().any(char::is_control) {
            return Err(CaError::field(
                field,
                format!("control character in {}", attr.key()),
            ));
        }
        if attr == DnAttribute::Country
            && !(value.len() == 2 && value.bytes().all(|b| b.is_ascii_uppercase()))
        {
            return Err(CaError::field(
                field,
                "C must be a two-letter upper-case country code",
            ));
        }
        if self.attributes.len() >= MAX_SUBJECT_ATTRIBUTES {
            return Err(CaError::field(field, "too many attributes"));
        }
        self.attributes.push((attr, value.to_string()));
        Ok(())
    }

    /// A DER `Name` as Warrant writes one (the attributes above, string
    /// values, one per RDN): a certificate's subject read back, e.g. to
    /// renew it with the same subject.
    pub fn from_der(der: &[u8]) -> Result<Self> {
        use der::Decode;
        let field = "subject";
        let name = x509_cert::name::Name::from_der(der)
            .map_err(|e| CaError::field(field, format!("not a DER Name: {e}")))?;
        let mut out = Subject {
            attributes: Vec::new(),
        };
        for rdn in name.0.iter() {
            for atv in rdn.0.iter() {
                let attr = [
                    DnAttribute::Country,
                    DnAttribute::State,
                    DnAttribute::Locality,
                    DnAttribute::Organization,
                    DnAttribute::OrganizationalUnit,
                    DnAttribute::CommonName,
                ]
                .into_iter()
                .find(|a| a.oid() == atv.oid)
                .ok_or_else(|| {
                    CaError::field(field, format!("attribute {} not supported", atv.oid))
                })?;
                let value = std::str::from_utf8(atv.value.value())
                    .map_err(|_| CaError::field(field, "a value is not UTF-8"))?;
                out.push(attr, value, field)?;
            }
        }
        Ok(out)
    }

    pub fn attributes(&self) -> &[(DnAttribute, String)] {
        &self.attributes
    }

    /// The last CN (the most specific one), if any.
    pub fn common_name(&self) -> Option<&str> {
        self.values(DnAttribute::CommonName).last()
    }

    pub fn values(&self, attr: DnAttribute) -> impl DoubleEndedIterator<Item = &str> {
        self.attributes
            .iter()
            .filter(move |(a, _)| *a == attr)
            .map(|(_, v)| v.as_str())
    }

    /// DER `Name`. C is a PrintableString, everything else UTF8String.
    pub fn to_der(&self) -> Vec<u8> {
        let mut rdns = Vec::with_capacity(32 * self.attributes.len());
        for (attr, value) in &self.attributes {
            let mut atv = derw::oid_tlv(&attr.oid());
            let tag = if *attr == DnAttribute::Country {
                0x13
            } else {
                0x0C
            };
            derw::push_tlv(&mut atv, tag, value.as_bytes());
            let atv = derw::tlv(TAG_SEQUENCE, &atv);
            derw::push_tlv(&mut rdns, TAG_SET, &atv);
        }
        derw::tlv(TAG_SEQUENCE, &rdns)
    }
}

impl std::fmt::Display for Subject {
    /// The `/K=v/...` form `parse` accepts.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (attr, value) in &self.attributes {
            write!(
                f,
                "/{}={}",
                attr.key(),
                value.replace('\\', "\\\\").replace('/', "\\/")
            )?;
        }
        Ok(())
    }
}

/// One SubjectAltName entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SanEntry {
    Dns(String),
    Ip(IpAddr),
    Uri(String),
    Email(String),
}

const MAX_SAN_ENTRIES: usize = 100;

impl SanEntry {
    fn push_der(&self, out: &mut Vec<u8>) {
        match self {
            SanEntry::Email(v) => derw::push_tlv(out, 0x81, v.as_bytes()),
            SanEntry::Dns(v) => derw::push_tlv(out, 0x82, v.as_bytes()),
            SanEntry::Uri(v) => derw::push_tlv(out, 0x86, v.as_bytes()),
            SanEntry::Ip(IpAddr::V4(a)) => derw::push_tlv(out, 0x87, &a.octets()),
            SanEntry::Ip(IpAddr::V6(a)) => derw::push_tlv(out, 0x87, &a.octets()),
        }
    }
}

/// Parses `DNS:x,IP:y,URI:z,email:w` (prefixes case-insensitive, blanks around
/// entries ignored, empty string → no entries).
pub fn parse_san(s: &str) -> Result<Vec<SanEntry>> {
    let mut out = Vec::new();
    for raw in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (kind, value) = raw
            .split_once(':')
            .ok_or_else(|| CaError::field("san", format!("{raw:?} lacks a TYPE: prefix")))?;
        let value = value.trim();
        let entry = match kind.trim().to_ascii_lowercase().as_str() {
            "dns" => {
                check_dns_name(value, true)
                    .map_err(|r| CaError::field("san", format!("DNS:{value}: {r}")))?;
                SanEntry::Dns(value.to_string())
            }
            "ip" => {
                SanEntry::Ip(value.parse().map_err(|_| {
                    CaError::field("san", format!("IP:{value} is not an IP address"))
                })?)
            }
            "uri" => {
                check_uri(value).map_err(|r| CaError::field("san", format!("URI:{value}: {r}")))?;
                SanEntry::Uri(value.to_string())
            }
            "email" => {
                check_email(value)
                    .map_err(|r| CaError::field("san", format!("email:{value}: {r}")))?;
                SanEntry::Email(value.to_string())
            }
            other => {
                return Err(CaError::field(
                    "san",
                    format!("unknown type {other:?} (DNS, IP, URI, email)"),
                ));
            }
        };
        if out.len() >= MAX_SAN_ENTRIES {
            return Err(CaError::field(
                "san",
                format!("more than {MAX_SAN_ENTRIES} entries"),
            ));
        }
        out.push(entry);
    }
    Ok(out)
}

/// DER `GeneralNames`.
pub(crate) fn general_names_der(entries: &[SanEntry]) -> Vec<u8> {
    let mut body = Vec::with_capacity(entries.len() * 24);
    for e in entries {
        e.push_der(&mut body);
    }
    derw::tlv(TAG_SEQUENCE, &body)
}

/// Preferred name syntax (RFC 1034/5280) with an optional leading `*.` label.
pub(crate) fn check_dns_name(
    name: &str,
    allow_wildcard: bool,
) -> std::result::Result<(), &'static str> {
    if name.is_empty() || name.len() > 253 {
        return Err("length must be 1..=253");
    }
    let body = match name.strip_prefix("*.") {
        Some(rest) if allow_wildcard => rest,
        Some(_) => return Err("wildcard not allowed"),
        None => name,
    };
    for label in body.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err("each label must be 1..=63 characters");
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err("labels may hold letters, digits and '-' only");
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("a label may not start or end with '-'");
        }
    }
    Ok(())
}

pub(crate) fn check_uri(uri: &str) -> std::result::Result<(), &'static str> {
    if uri.len() > 2048 {
        return Err("longer than 2048 characters");
    }
    if !uri.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("only printable ASCII without spaces");
    }
    let (scheme, rest) = uri.split_once(':').ok_or("no scheme")?;
    let mut sb = scheme.bytes();
    let scheme_ok = sb.next().is_some_and(|b| b.is_ascii_alphabetic())
        && sb.all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'-' || b == b'.');
    if !scheme_ok || rest.is_empty() {
        return Err("not an absolute URI");
    }
    Ok(())
}

fn check_email(addr: &str) -> std::result::Result<(), &'static str> {
    let (local, domain) = addr.rsplit_once('@').ok_or("no '@'")?;
    if local.is_empty() || local.len() > 64 {
        return Err("local part must be 1..=64 characters");
    }
    if !local
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'@' && b != b'"' && b != b'\\')
    {
        return Err("local part must be plain ASCII");
    }
    check_dns_name(domain, false)
}

/// The SPIFFE ID Warrant puts in an agent certificate's URI SAN:
/// `spiffe://<trust_domain>/agent/<agent_id>`. Both parts must already be
/// valid SPIFFE characters; nothing is escaped, so the ID a relying party
/// sees is exactly the one the caller asked for.
pub fn spiffe_id(trust_domain: &str, agent_id: &str) -> Result<String> {
    if trust_domain.is_empty()
        || trust_domain.len() > 255
        || !trust_domain
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._".contains(&b))
    {
        return Err(CaError::field(
            "spiffe_trust_domain",
            "must be 1..=255 of a-z 0-9 - . _",
        ));
    }
    if agent_id.is_empty()
        || agent_id == "."
        || agent_id == ".."
        || !agent_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
    {
        return Err(CaError::field(
            "agent_id",
            "a SPIFFE path segment allows only A-Z a-z 0-9 - . _",
        ));
    }
    Ok(format!("spiffe://{trust_domain}/agent/{agent_id}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(r: Result<impl std::fmt::Debug>) -> &'static str {
        r.unwrap_err().invalid_field().unwrap()
    }

    #[test]
    fn parses_slash_subject_with_repeated_ou_in_order() {
        let s = Subject::parse("/C=US/O=Acme Inc/OU=gateway:reader/OU=team a/CN=alice").unwrap();
        assert_eq!(
            s.to_string(),
            "/C=US/O=Acme Inc/OU=gateway:reader/OU=team a/CN=alice"
        );
        assert_eq!(
            s.values(DnAttribute::OrganizationalUnit)
                .collect::<Vec<_>>(),
            ["gateway:reader", "team a"]
        );
        assert_eq!(s.common_name(), Some("alice"));
    }

    #[test]
    fn subject_escapes_slash() {
        let s = Subject::parse(r"/O=a\/b/CN=x").unwrap();
        assert_eq!(s.values(DnAttribute::Organization).next(), Some("a/b"));
    }

    #[test]
    fn default_subject_is_c_o_cn() {
        let s = Subject::for_request(None, "bob", "Warrant", "US").unwrap();
        assert_eq!(s.to_string(), "/C=US/O=Warrant/CN=bob");
        let s = Subject::for_request(Some("  "), "bob", "", "").unwrap();
        assert_eq!(s.to_string(), "/CN=bob");
    }

    #[test]
    fn subject_without_cn_gets_request_cn() {
        let s = Subject::for_request(Some("/O=X/OU=gateway:r"), "bob", "W", "US").unwrap();
        assert_eq!(s.to_string(), "/O=X/OU=gateway:r/CN=bob");
    }

    #[test]
    fn rejects_subject_without_leading_slash() {
        assert_eq!(field_of(Subject::parse("CN=x")), "subject");
    }

    #[test]
    fn rejects_subject_unknown_attribute() {
        assert_eq!(field_of(Subject::parse("/XX=1/CN=x")), "subject");
    }

    #[test]
    fn rejects_subject_part_without_equals() {
        assert_eq!(field_of(Subject::parse("/CN")), "subject");
    }

    #[test]
    fn rejects_subject_empty_value() {
        assert_eq!(field_of(Subject::parse("/O=/CN=x")), "subject");
    }

    #[test]
    fn rejects_subject_overlong_cn() {
        let long = format!("/CN={}", "a".repeat(65));
        assert_eq!(field_of(Subject::parse(&long)), "subject");
    }

    #[test]
    fn rejects_subject_bad_country() {
        assert_eq!(field_of(Subject::parse("/C=usa/CN=x")), "subject");
        assert_eq!(field_of(Subject::parse("/C=us/CN=x")), "subject");
    }

    #[test]
    fn rejects_subject_control_characters() {
        assert_eq!(field_of(Subject::parse("/CN=a\nb")), "subject");
    }

    #[test]
    fn rejects_overlong_cn_from_request() {
        let long = "a".repeat(65);
        assert_eq!(field_of(Subject::for_request(None, &long, "W", "US")), "cn");
    }

    #[test]
    fn name_der_uses_printable_country_and_utf8_others() {
        let der = Subject::parse("/C=US/CN=é").unwrap().to_der();
        let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "301a310b3009060355040613025553310b300906035504030c02c3a9"
        );
    }

    #[test]
    fn parses_all_san_kinds() {
        let v = parse_san("DNS:a.example.com, IP:10.0.0.1,IP:::1,URI:spiffe://x/agent/a,email:a@b.example,dns:*.w.example").unwrap();
        assert_eq!(
            v,
            [
                SanEntry::Dns("a.example.com".into()),
                SanEntry::Ip("10.0.0.1".parse().unwrap()),
                SanEntry::Ip("::1".parse().unwrap()),
                SanEntry::Uri("spiffe://x/agent/a".into()),
                SanEntry::Email("a@b.example".into()),
                SanEntry::Dns("*.w.example".into()),
            ]
        );
        assert!(parse_san("").unwrap().is_empty());
        assert!(parse_san(" , ").unwrap().is_empty());
    }

    #[test]
    fn rejects_san_without_type() {
        assert_eq!(field_of(parse_san("example.com")), "san");
    }

    #[test]
    fn rejects_san_unknown_type() {
        assert_eq!(field_of(parse_san("RID:1.2.3")), "san");
    }

    #[test]
    fn rejects_san_bad_dns() {
        assert_eq!(field_of(parse_san("DNS:-bad.example")), "san");
        assert_eq!(field_of(parse_san("DNS:a..b")), "san");
        assert_eq!(field_of(parse_san("DNS:a_b.example")), "san");
        assert_eq!(field_of(parse_san("DNS:a.*.example")), "san");
    }

    #[test]
    fn rejects_san_bad_ip() {
        assert_eq!(field_of(parse_san("IP:300.1.1.1")), "san");
    }

    #[test]
    fn rejects_san_bad_uri() {
        assert_eq!(field_of(parse_san("URI:no scheme")), "san");
        assert_eq!(field_of(parse_san("URI:/relative")), "san");
    }

    #[test]
    fn rejects_san_bad_email() {
        assert_eq!(field_of(parse_san("email:nobody")), "san");
        assert_eq!(field_of(parse_san("email:a@-x")), "san");
    }

    #[test]
    fn rejects_too_many_san_entries() {
        let many = vec!["DNS:a.example"; MAX_SAN_ENTRIES + 1].join(",");
        assert_eq!(field_of(parse_san(&many)), "san");
    }

    #[test]
    fn spiffe_id_format_and_rejections() {
        assert_eq!(
            spiffe_id("corp.example", "agent-109").unwrap(),
            "spiffe://corp.example/agent/agent-109"
        );
        assert_eq!(field_of(spiffe_id("Corp", "a")), "spiffe_trust_domain");
        assert_eq!(field_of(spiffe_id("corp", "a/b")), "agent_id");
        assert_eq!(field_of(spiffe_id("corp", "..")), "agent_id");
    }
}
