//! PKCS#10 certificate requests: the `csr_pem` path of the issue API. Only the
//! public key is taken from a CSR (after its self-signature proves possession
//! of the private key); subject, SANs and extensions come from the API request,
//! so a CSR cannot smuggle in anything the caller was not allowed to ask for.

use const_oid::ObjectIdentifier;
use der::{Decode, Reader, SliceReader};

use crate::cert;
use crate::error::{CaError, Result};
use crate::keys::{self, PublicKeyKind};
use crate::oids;

/// Upper bound for a CSR in PEM; RSA-8192 CSRs with many attributes stay well below.
pub const MAX_CSR_PEM_LEN: usize = 64 * 1024;

/// A CSR whose signature verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsrInfo {
    /// DER SubjectPublicKeyInfo to certify.
    pub spki_der: Vec<u8>,
    pub key_kind: PublicKeyKind,
    /// DER Name of the requested subject (informational).
    pub subject_der: Vec<u8>,
    /// The requested CN, when it is a UTF8String or PrintableString.
    pub common_name: Option<String>,
}

/// Parses a PEM CSR and verifies its self-signature with aws-lc-rs
/// (ECDSA P-256/P-384, RSA PKCS#1 v1.5 and PSS, Ed25519). Every failure is
/// `InvalidField { field: "csr_pem" }`.
pub fn verify_csr(pem: &str) -> Result<CsrInfo> {
    let bad = |reason: String| CaError::field("csr_pem", reason);
    if pem.len() > MAX_CSR_PEM_LEN {
        return Err(bad(format!("longer than {MAX_CSR_PEM_LEN} bytes")));
    }
    let (label, der) = der::pem::decode_vec(pem.trim().as_bytes())
        .map_err(|e| bad(format!("not a PEM block: {e}")))?;
    if label != "CERTIFICATE REQUEST" && label != "NEW CERTIFICATE REQUEST" {
        return Err(bad(format!(
            "PEM label {label:?}, expected CERTIFICATE REQUEST"
        )));
    }
    verify_csr_der(&der)
}

/// [`verify_csr`] for DER input.
pub fn verify_csr_der(der: &[u8]) -> Result<CsrInfo> {
    let bad = |reason: String| CaError::field("csr_pem", reason);
    let signed = cert::parse_signed(der).map_err(|e| bad(format!("not a PKCS#10 request: {e}")))?;
    let mut reader = SliceReader::new(signed.tbs).map_err(|e| bad(e.to_string()))?;
    let (version, subject, spki) = reader
        .sequence(|r| {
            let version = u8::decode(r)?;
            let subject = r.tlv_bytes()?;
            let spki = r.tlv_bytes()?;
            // attributes [0] IMPLICIT SET OF Attribute: not used.
            r.tlv_bytes()?;
            Ok((version, subject, spki))
        })
        .and_then(|v| reader.finish(v))
        .map_err(|e| bad(format!("malformed CertificationRequestInfo: {e}")))?;
    if version != 0 {
        return Err(bad(format!("unsupported version {version}")));
    }
    let parsed = keys::parse_spki(spki, "csr_pem")?;
    keys::verify_signature(spki, &signed.algorithm, signed.tbs, &signed.signature)
        .map_err(|e| bad(format!("CSR signature: {e}")))?;
    Ok(CsrInfo {
        spki_der: spki.to_vec(),
        key_kind: parsed.kind,
        subject_der: subject.to_vec(),
        common_name: common_name(subject),
    })
}

/// A PKCS#10 request (DER) for `key`'s public key under `subject_der`, no
/// attributes, signed by `key`: what an issuing CA whose root is elsewhere
/// sends to be signed.
pub(crate) fn build_csr(key: &keys::CaSigningKey, subject_der: &[u8]) -> Result<Vec<u8>> {
    let mut info = Vec::with_capacity(subject_der.len() + key.spki_der.len() + 8);
    info.extend_from_slice(&[crate::derw::TAG_INTEGER, 1, 0]);
    info.extend_from_slice(subject_der);
    info.extend_from_slice(&key.spki_der);
    info.extend_from_slice(&[0xA0, 0x00]);
    let tbs = crate::derw::tlv(crate::derw::TAG_SEQUENCE, &info);
    key.sign_structure(&tbs)
}

/// The last CN of a DER Name, if it is a UTF8String or PrintableString.
pub(crate) fn common_name(name_der: &[u8]) -> Option<String> {
    name_attributes(name_der, &oids::AT_COMMON_NAME).pop()
}

/// Every value of one attribute type in a DER Name, in order, that is a
/// UTF8String or PrintableString (an unparseable Name has none).
pub(crate) fn name_attributes(name_der: &[u8], attribute: &ObjectIdentifier) -> Vec<String> {
    let Ok(name) = x509_cert::name::Name::from_der(name_der) else {
        return Vec::new();
    };
    name.0
        .iter()
        .flat_map(|rdn| rdn.0.iter())
        .filter(|atv| atv.oid == *attribute)
        .filter_map(|atv| {
            atv.value
                .decode_as::<der::asn1::Utf8StringRef<'_>>()
                .map(|s| s.as_str().to_string())
                .or_else(|_| {
                    atv.value
                        .decode_as::<der::asn1::PrintableStringRef<'_>>()
                        .map(|s| s.as_str().to_string())
                })
                .ok()
        })
        .collect()
}
