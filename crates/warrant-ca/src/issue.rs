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

/// A fresh serial, time-ordered: see [`serial_from`]. Returns the 20 raw bytes.
pub fn new_serial() -> Result<[u8; 20]> {
    let mut random = [0u8; 20];
    aws_lc_rs::rand::fill(&mut random).map_err(CaError::internal)?;
    Ok(serial_now(&random))
}

/// [`serial_from`] at the current time, for callers that bring their own
/// random bytes (the write-path benchmark).
pub fn serial_now(random: &[u8; 20]) -> [u8; 20] {
    let millis = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    serial_from(millis, random)
}

/// CSPRNG bits in every serial: at least the 64 the CA/Browser Forum asks for.
pub const SERIAL_RANDOM_BITS: u32 = 110;

/// The serial of a certificate issued at `millis` (ms since the Unix epoch):
/// bit 159 clear and bit 158 set, so the INTEGER is positive, below 2^159 and
/// always 20 octets; bits 157–110 the time (48 bits, wrapping in the year
/// 10889); the low 110 bits from `random`.
///
/// Why time first: every backend keeps certificates in a B-tree keyed by
/// (ca, serial). Random serials put each new row on a random page of that
/// index, so each small durable commit rewrote about one page per
/// certificate; time-ordered serials append at the right edge, where
/// consecutive commits share pages (the SQLite writer's CPU per row fell by
/// a fifth to a quarter, bench/README "Time-ordered serials"). Two serials are never
/// sequential: within a millisecond they differ in 110 random bits.
pub fn serial_from(millis: u64, random: &[u8; 20]) -> [u8; 20] {
    const TIME_BITS: u32 = 48;
    // The top 56 bits: 0, 1, the time, then the first 6 random bits.
    let time = millis & ((1u64 << TIME_BITS) - 1);
    let top = (1u64 << 54) | (time << 6) | u64::from(random[6] & 0x3F);
    let mut serial = *random;
    serial[..7].copy_from_slice(&top.to_be_bytes()[1..]);
    serial
}

/// Display form: 40 upper-case hex digits.
pub fn serial_hex(serial: &[u8; 20]) -> String {
    derw::hex_upper(serial)
}

/// Parses a serial in hex (1..=40 digits, any case) to its big-endian bytes.
pub fn parse_serial_hex(s: &str) -> Result<Vec<u8>> {
    if s.is_empty() || s.len() > 40 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CaError::field("serial", "must be 1..=40 hex digits"));
    }
    let padded = if s.len() % 2 == 1 {
        format!("0{s}")
    } else {
        s.to_string()
    };
    Ok((0..padded.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&padded[i..i + 2], 16).unwrap_or(0))
        .collect())
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
    let der = ca.sign_certificate(
        &serial,
        not_before,
        not_after,
        &spec.subject.to_der(),
        spec.spki_der,
        &extensions,
    )?;
    Ok(IssuedCert {
        serial_hex: serial_hex(&serial),
        pem: derw::pem("CERTIFICATE", &der)?,
        der,
        not_before,
        not_after,
    })
}

/// `TBSCertificate` from its parts. `extensions` is the concatenation of
/// `Extension` SEQUENCEs (may be empty).
#[allow(clippy::too_many_arguments)]
pub(crate) fn tbs_certificate(
    serial: &[u8],
    signature_alg_der: &[u8],
    issuer_der: &[u8],
    not_before: SystemTime,
    not_after: SystemTime,
    subject_der: &[u8],
    spki_der: &[u8],
    extensions: &[u8],
) -> Result<Vec<u8>> {
    let mut body = Vec::with_capacity(
        64 + signature_alg_der.len()
            + issuer_der.len()
            + subject_der.len()
            + spki_der.len()
            + extensions.len(),
    );
    body.extend_from_slice(&[0xA0, 3, 2, 1, 2]); // version v3
    derw::push_uint(&mut body, serial);
    body.extend_from_slice(signature_alg_der);
    body.extend_from_slice(issuer_der);
    let mut validity = Vec::with_capacity(34);
    derw::push_time(&mut validity, not_before, "validity")?;
    derw::push_time(&mut validity, not_after, "validity")?;
    derw::push_tlv(&mut body, TAG_SEQUENCE, &validity);
    body.extend_from_slice(subject_der);
    body.extend_from_slice(spki_der);
    if !extensions.is_empty() {
        derw::push_tlv(&mut body, 0xA3, &derw::tlv(TAG_SEQUENCE, extensions));
    }
    Ok(derw::tlv(TAG_SEQUENCE, &body))
}

/// `SEQUENCE { tbs, signatureAlgorithm, BIT STRING signature }`.
pub(crate) fn signed_structure(tbs: &[u8], signature_alg_der: &[u8], signature: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(tbs.len() + signature_alg_der.len() + signature.len() + 8);
    body.extend_from_slice(tbs);
    body.extend_from_slice(signature_alg_der);
    body.push(TAG_BIT_STRING);
    derw::push_len(&mut body, signature.len() + 1);
    body.push(0);
    body.extend_from_slice(signature);
    derw::tlv(TAG_SEQUENCE, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_is_159_bits_positive_nonzero() {
        for _ in 0..200 {
            let s = new_serial().unwrap();
            // Bit 159 clear, bit 158 set: 159 significant bits, 20 DER octets.
            assert_eq!(s[0] & 0xC0, 0x40);
            let hex = serial_hex(&s);
            assert_eq!(hex.len(), 40);
            assert!(
                hex.bytes()
                    .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
            );
            assert_eq!(parse_serial_hex(&hex).unwrap(), s);
        }
    }

    #[test]
    fn serials_follow_the_clock_and_keep_the_random_bits() {
        let random = [0xA5u8; 20];
        let a = serial_from(1_700_000_000_000, &random);
        let b = serial_from(1_700_000_000_001, &random);
        assert!(a < b, "a later millisecond sorts after an earlier one");
        assert!(
            serial_hex(&a) < serial_hex(&b),
            "and so does the stored hex"
        );
        // The low 110 bits are the random input's: bytes 7.. whole, 6 bits of byte 6.
        assert_eq!(a[7..], random[7..]);
        assert_eq!(a[6] & 0x3F, random[6] & 0x3F);
        let low_bits = 8 * 13 + 6;
        assert_eq!(low_bits, SERIAL_RANDOM_BITS);
        // The time field reads back.
        let top = u64::from_be_bytes([0, a[0], a[1], a[2], a[3], a[4], a[5], a[6]]);
        assert_eq!((top >> 6) & ((1 << 48) - 1), 1_700_000_000_000);
        // Whatever the time and the random bytes, bit 158 stays the top bit.
        for millis in [0, 1, u64::MAX] {
            for fill in [0x00u8, 0xFF] {
                assert_eq!(serial_from(millis, &[fill; 20])[0] & 0xC0, 0x40);
            }
        }
        // Two serials of one millisecond differ in their random bits.
        let (x, y) = (new_serial().unwrap(), new_serial().unwrap());
        assert_ne!(x[7..], y[7..]);
    }

    #[test]
    fn rejects_bad_serial_hex() {
        for bad in ["", "xyz", &"A".repeat(41)] {
            assert_eq!(
                parse_serial_hex(bad).unwrap_err().invalid_field(),
                Some("serial")
            );
        }
        assert_eq!(parse_serial_hex("abc").unwrap(), [0x0A, 0xBC]);
    }

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
