//! Leaf issuance: the hot path. A certificate is assembled from bytes the
//! issuing CA pre-encoded once (signature AlgorithmIdentifier, issuer name,
//! AKI, per-profile KU/EKU/basicConstraints) plus the per-leaf fields, then
//! signed once with aws-lc-rs. Nothing is re-parsed per issuance except the
//! subject's SPKI, which must be checked anyway.

use std::str::FromStr;
use std::sync::LazyLock;
use std::time::SystemTime;

use const_oid::ObjectIdentifier;
use der::Decode;

use crate::derw::{self, TAG_BIT_STRING, TAG_OCTET_STRING, TAG_SEQUENCE};
use crate::error::{CaError, Result};
use crate::hierarchy::IssuingCa;
use crate::keys::{self, PublicKeyKind};
use crate::names::{self, DnAttribute, SanEntry, Subject};
use crate::oids;
use crate::serial::{new_serial, serial_hex};
use crate::tbs::CertFields;

/// Certificate profile (spec §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Profile {
    #[default]
    TlsClient,
    TlsServer,
    AgentProxy,
}

impl Profile {
    pub const ALL: [Profile; 3] = [Profile::TlsClient, Profile::TlsServer, Profile::AgentProxy];

    pub fn as_str(self) -> &'static str {
        match self {
            Profile::TlsClient => "tls-client",
            Profile::TlsServer => "tls-server",
            Profile::AgentProxy => "agent-proxy",
        }
    }
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Profile {
    type Err = CaError;

    /// API strings; empty means `tls-client`.
    fn from_str(s: &str) -> Result<Self> {
        if s.is_empty() {
            return Ok(Profile::default());
        }
        Profile::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                CaError::field(
                    "profile",
                    format!("unknown profile {s:?} (tls-client, tls-server, agent-proxy)"),
                )
            })
    }
}

/// An extension the caller supplies already DER-encoded (the AIC and PA
/// values from the `aic` crate). Warrant only checks that the value is one
/// well-formed DER element and that it does not override a standard extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraExtension {
    pub oid: ObjectIdentifier,
    pub critical: bool,
    pub value_der: Vec<u8>,
}

impl ExtraExtension {
    /// A non-critical extension, which is what AIC and PA are.
    pub fn non_critical(oid: ObjectIdentifier, value_der: Vec<u8>) -> Self {
        Self {
            oid,
            critical: false,
            value_der,
        }
    }
}

/// CRL distribution point and AIA URLs, validated and encoded once (they come
/// from configuration and are the same for every leaf of a CA).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeafUrls {
    encoded: Vec<u8>,
}

impl LeafUrls {
    /// Fields named in errors: `crl_url`, `ca_issuers_url`, `ocsp_url`.
    pub fn new(
        crl_url: Option<&str>,
        ca_issuers_url: Option<&str>,
        ocsp_url: Option<&str>,
    ) -> Result<Self> {
        let mut encoded = Vec::new();
        if let Some(url) = crl_url {
            let uri = uri_general_name(url, "crl_url")?;
            // DistributionPoint { distributionPoint [0] { fullName [0] GeneralNames } }
            let dp = derw::tlv(TAG_SEQUENCE, &derw::tlv(0xA0, &derw::tlv(0xA0, &uri)));
            let value = derw::tlv(TAG_SEQUENCE, &dp);
            encoded.extend(derw::extension(
                &oids::EXT_CRL_DISTRIBUTION_POINTS,
                false,
                &value,
            ));
        }
        let mut access = Vec::new();
        if let Some(url) = ocsp_url {
            let mut ad = derw::oid_tlv(&oids::AD_OCSP);
            ad.extend(uri_general_name(url, "ocsp_url")?);
            derw::push_tlv(&mut access, TAG_SEQUENCE, &ad);
        }
        if let Some(url) = ca_issuers_url {
            let mut ad = derw::oid_tlv(&oids::AD_CA_ISSUERS);
            ad.extend(uri_general_name(url, "ca_issuers_url")?);
            derw::push_tlv(&mut access, TAG_SEQUENCE, &ad);
        }
        if !access.is_empty() {
            encoded.extend(derw::extension(
                &oids::EXT_AUTHORITY_INFO_ACCESS,
                false,
                &derw::tlv(TAG_SEQUENCE, &access),
            ));
        }
        Ok(Self { encoded })
    }

    pub fn is_empty(&self) -> bool {
        self.encoded.is_empty()
    }
}

fn uri_general_name(url: &str, field: &'static str) -> Result<Vec<u8>> {
    names::check_uri(url).map_err(|r| CaError::field(field, format!("{url:?}: {r}")))?;
    Ok(derw::tlv(0x86, url.as_bytes()))
}

/// The spec's hard cap on an agent certificate's lifetime. The server applies
/// the tighter configured/DA/PA limits; this cap holds even if it does not.
pub const AGENT_PROXY_MAX_VALIDITY: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// What to certify. Borrowed so building one per request costs nothing.
#[derive(Debug, Clone)]
pub struct LeafSpec<'a> {
    pub profile: Profile,
    pub subject: &'a Subject,
    pub san: &'a [SanEntry],
    /// DER SubjectPublicKeyInfo of the subject's key (server-generated or from a CSR).
    pub spki_der: &'a [u8],
    /// Truncated to whole seconds; raised to the CA's NotBefore if earlier.
    pub not_before: SystemTime,
    /// Truncated to whole seconds; capped by the CA's NotAfter (and for
    /// `agent-proxy` by NotBefore + [`AGENT_PROXY_MAX_VALIDITY`]).
    pub not_after: SystemTime,
    /// AIC / PA and any other opaque extensions, appended in order.
    pub extensions: &'a [ExtraExtension],
    pub urls: Option<&'a LeafUrls>,
}

/// An issued certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedCert {
    /// 40 upper-case hex digits.
    pub serial_hex: String,
    pub der: Vec<u8>,
    pub pem: String,
    /// The validity actually written (after capping), whole seconds.
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

const KU_DIGITAL_SIGNATURE: [u8; 4] = [TAG_BIT_STRING, 2, 7, 0x80];
const KU_DIGITAL_SIGNATURE_KEY_ENCIPHERMENT: [u8; 4] = [TAG_BIT_STRING, 2, 5, 0xA0];

/// basicConstraints CA:FALSE (critical) + KU (critical) + EKU, per profile and
/// key kind. Encoded once per process.
static PROFILE_EXTENSIONS: LazyLock<[Vec<u8>; 3]> = LazyLock::new(|| {
    let bc = derw::extension(&oids::EXT_BASIC_CONSTRAINTS, true, &[TAG_SEQUENCE, 0]);
    let eku = |kp: &ObjectIdentifier| {
        derw::extension(
            &oids::EXT_EXTENDED_KEY_USAGE,
            false,
            &derw::tlv(TAG_SEQUENCE, &derw::oid_tlv(kp)),
        )
    };
    let build = |ku: &[u8], kp: &ObjectIdentifier| {
        let mut v = bc.clone();
        v.extend(derw::extension(&oids::EXT_KEY_USAGE, true, ku));
        v.extend(eku(kp));
        v
    };
    [
        build(&KU_DIGITAL_SIGNATURE, &oids::KP_CLIENT_AUTH),
        build(&KU_DIGITAL_SIGNATURE, &oids::KP_SERVER_AUTH),
        build(
            &KU_DIGITAL_SIGNATURE_KEY_ENCIPHERMENT,
            &oids::KP_SERVER_AUTH,
        ),
    ]
});

fn profile_extensions(profile: Profile, key: PublicKeyKind) -> &'static [u8] {
    let all = &*PROFILE_EXTENSIONS;
    match profile {
        Profile::TlsClient | Profile::AgentProxy => &all[0],
        Profile::TlsServer if key.is_rsa() => &all[2],
        Profile::TlsServer => &all[1],
    }
}

/// Extensions a caller may not supply: Warrant writes them itself.
const RESERVED_EXTENSIONS: [ObjectIdentifier; 8] = [
    oids::EXT_SUBJECT_KEY_ID,
    oids::EXT_AUTHORITY_KEY_ID,
    oids::EXT_KEY_USAGE,
    oids::EXT_EXTENDED_KEY_USAGE,
    oids::EXT_BASIC_CONSTRAINTS,
    oids::EXT_SUBJECT_ALT_NAME,
    oids::EXT_CRL_DISTRIBUTION_POINTS,
    oids::EXT_AUTHORITY_INFO_ACCESS,
];

/// Profile rules on the subject: an agent certificate names its gateway role in
/// at least one OU, and a wildcard role would grant every role.
pub fn check_profile_subject(profile: Profile, subject: &Subject) -> Result<()> {
    if profile != Profile::AgentProxy {
        return Ok(());
    }
    let mut ous = subject.values(DnAttribute::OrganizationalUnit).peekable();
    if ous.peek().is_none() {
        return Err(CaError::field(
            "subject",
            "agent-proxy needs at least one OU (the gateway role, e.g. OU=gateway:reader)",
        ));
    }
    if let Some(bad) = ous.find(|ou| ou.contains('*')) {
        return Err(CaError::field(
            "subject",
            format!("wildcard OU {bad:?} is not allowed for agent-proxy"),
        ));
    }
    Ok(())
}

/// Issues one leaf certificate signed by `ca`.
pub fn issue_leaf(ca: &IssuingCa, spec: &LeafSpec<'_>) -> Result<IssuedCert> {
    check_profile_subject(spec.profile, spec.subject)?;
    let spki = keys::parse_spki(spec.spki_der, "public_key")?;

    let not_before = derw::whole_seconds(spec.not_before.max(ca.not_before()));
    let mut not_after = spec.not_after.min(ca.not_after());
    if spec.profile == Profile::AgentProxy {
        not_after = not_after.min(not_before + AGENT_PROXY_MAX_VALIDITY);
    }
    let not_after = derw::whole_seconds(not_after);
    if not_after <= not_before {
        return Err(CaError::field(
            "validity",
            "the certificate would not be valid for any time (NotAfter ≤ NotBefore after capping by the CA's validity)",
        ));
    }

    let mut extensions = Vec::with_capacity(512);
    extensions.extend_from_slice(profile_extensions(spec.profile, spki.kind));
    let mut ski = [0u8; 22];
    ski[0] = TAG_OCTET_STRING;
    ski[1] = 20;
    ski[2..].copy_from_slice(&keys::key_identifier(spki.key_bits));
    derw::push_extension(&mut extensions, &oids::EXT_SUBJECT_KEY_ID, false, &ski);
    extensions.extend_from_slice(ca.aki_extension());

    // tls-server without SANs: relying parties ignore the CN, so a CN that is
    // a host name is also written as a DNS SAN.
    let implied_san;
    let san: &[SanEntry] = match (
        spec.profile,
        spec.san.is_empty(),
        spec.subject.common_name(),
    ) {
        (Profile::TlsServer, true, Some(cn)) if names::check_dns_name(cn, true).is_ok() => {
            implied_san = [SanEntry::Dns(cn.to_string())];
            &implied_san
        }
        _ => spec.san,
    };
    if !san.is_empty() {
        derw::push_extension(
            &mut extensions,
            &oids::EXT_SUBJECT_ALT_NAME,
            false,
            &names::general_names_der(san),
        );
    }
    if let Some(urls) = spec.urls {
        extensions.extend_from_slice(&urls.encoded);
    }
    for (i, extra) in spec.extensions.iter().enumerate() {
        if RESERVED_EXTENSIONS.contains(&extra.oid) {
            return Err(CaError::field(
                "extensions",
                format!("{} is written by the CA itself", extra.oid),
            ));
        }
        if spec.extensions[..i].iter().any(|e| e.oid == extra.oid) {
            return Err(CaError::field(
                "extensions",
                format!("{} appears twice", extra.oid),
            ));
        }
        if der::AnyRef::from_der(&extra.value_der).is_err() {
            return Err(CaError::field(
                "extensions",
                format!("value of {} is not one DER element", extra.oid),
            ));
        }
        extensions.extend(derw::extension(
            &extra.oid,
            extra.critical,
            &extra.value_der,
        ));
    }

    let serial = new_serial()?;
    let der = ca.sign_certificate(&CertFields {
        serial: &serial,
        not_before,
        not_after,
        subject_der: &spec.subject.to_der(),
        spki_der: spec.spki_der,
        extensions: &extensions,
    })?;
    Ok(IssuedCert {
        serial_hex: serial_hex(&serial),
        pem: derw::pem("CERTIFICATE", &der)?,
        der,
        not_before,
        not_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_parses_api_strings() {
        for p in Profile::ALL {
            assert_eq!(p.as_str().parse::<Profile>().unwrap(), p);
        }
        assert_eq!("".parse::<Profile>().unwrap(), Profile::TlsClient);
        assert_eq!(
            "x".parse::<Profile>().unwrap_err().invalid_field(),
            Some("profile")
        );
    }

    #[test]
    fn rejects_agent_subject_without_ou() {
        let s = Subject::parse("/O=X/CN=a").unwrap();
        let e = check_profile_subject(Profile::AgentProxy, &s).unwrap_err();
        assert_eq!(e.invalid_field(), Some("subject"));
        assert!(check_profile_subject(Profile::TlsClient, &s).is_ok());
    }

    #[test]
    fn rejects_agent_wildcard_ou() {
        for ou in ["*", "gateway:*"] {
            let s = Subject::parse(&format!("/OU=gateway:reader/OU={ou}/CN=a")).unwrap();
            let e = check_profile_subject(Profile::AgentProxy, &s).unwrap_err();
            assert_eq!(e.invalid_field(), Some("subject"));
        }
        let ok = Subject::parse("/OU=gateway:reader/CN=a").unwrap();
        assert!(check_profile_subject(Profile::AgentProxy, &ok).is_ok());
    }

    #[test]
    fn rejects_bad_urls() {
        assert_eq!(
            LeafUrls::new(Some("not a url"), None, None)
                .unwrap_err()
                .invalid_field(),
            Some("crl_url")
        );
        assert_eq!(
            LeafUrls::new(None, None, Some("/x"))
                .unwrap_err()
                .invalid_field(),
            Some("ocsp_url")
        );
        assert!(LeafUrls::new(None, None, None).unwrap().is_empty());
    }
}
