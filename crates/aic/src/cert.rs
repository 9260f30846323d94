//! Just enough X.509 to find the AIC and PA extensions and the subject key in
//! a certificate, without a general X.509 parser: a gateway or the CA needs the
//! agent SPKI (for the v2 key binding) and the two extension values, nothing else.
//! The certificate's own signature is *not* checked here.

use crate::der::{Reader, TAG_SEQUENCE, ctx};
use crate::model::{Aic, PrincipalAuthorization};
use crate::{DecodeError, oid};

/// An extension as it appears in the certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertExtension {
    pub oid: crate::Oid,
    pub critical: bool,
    pub value: Vec<u8>,
}

/// The parts of a certificate AIC processing needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateView {
    /// DER SubjectPublicKeyInfo of the certificate's subject.
    pub subject_spki_der: Vec<u8>,
    pub extensions: Vec<CertExtension>,
}

impl CertificateView {
    pub fn from_der(cert_der: &[u8]) -> Result<CertificateView, DecodeError> {
        let mut outer = Reader::new(cert_der);
        let mut cert = outer.read_nested(TAG_SEQUENCE, "Certificate")?;
        outer.finish("Certificate")?;
        let mut tbs = cert.read_nested(TAG_SEQUENCE, "Certificate.tbsCertificate")?;
        tbs.read_optional(ctx(0), "tbsCertificate.version")?;
        for field in [
            "tbsCertificate.serialNumber",
            "tbsCertificate.signature",
            "tbsCertificate.issuer",
        ] {
            tbs.read_any_raw(field)?;
        }
        tbs.read_any_raw("tbsCertificate.validity")?;
        tbs.read_any_raw("tbsCertificate.subject")?;
        let subject_spki_der = tbs
            .read_any_raw("tbsCertificate.subjectPublicKeyInfo")?
            .to_vec();
        tbs.read_optional(0x81, "tbsCertificate.issuerUniqueID")?;
        tbs.read_optional(0x82, "tbsCertificate.subjectUniqueID")?;
        let mut extensions = Vec::new();
        if let Some(inner) = tbs.read_optional(ctx(3), "tbsCertificate.extensions")? {
            let mut wrapper = Reader::new(inner);
            let mut list = wrapper.read_nested(TAG_SEQUENCE, "tbsCertificate.extensions")?;
            wrapper.finish("tbsCertificate.extensions")?;
            while !list.is_empty() {
                let mut ext = list.read_nested(TAG_SEQUENCE, "Extension")?;
                let oid = ext.read_oid("Extension.extnID")?;
                let critical = ext.read_bool_default_false("Extension.critical")?;
                let value = ext.read_octets("Extension.extnValue")?.to_vec();
                ext.finish("Extension")?;
                extensions.push(CertExtension {
                    oid,
                    critical,
                    value,
                });
            }
        }
        tbs.finish("Certificate.tbsCertificate")?;
        Ok(CertificateView {
            subject_spki_der,
            extensions,
        })
    }

    fn extension(&self, oid_der: &[u8]) -> Option<&CertExtension> {
        self.extensions
            .iter()
            .find(|e| e.oid.as_der_content() == oid_der)
    }

    /// The decoded AIC extension, if present.
    pub fn aic(&self) -> Option<Result<Aic, DecodeError>> {
        self.extension(oid::AIC_EXTENSION_DER)
            .map(|e| Aic::from_der(&e.value))
    }

    /// The decoded PrincipalAuthorization extension, if present.
    pub fn principal_authorization(&self) -> Option<Result<PrincipalAuthorization, DecodeError>> {
        self.extension(oid::PRINCIPAL_AUTHORIZATION_EXTENSION_DER)
            .map(|e| PrincipalAuthorization::from_der(&e.value))
    }
}

/// Decodes the first `-----BEGIN <label>-----` block of PEM text.
pub fn pem_decode(text: &str, label: &str) -> Option<Vec<u8>> {
    use base64::{Engine, engine::general_purpose::STANDARD};
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text.find(&begin)? + begin.len();
    let stop = start + text[start..].find(&end)?;
    let b64: String = text[start..stop]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    STANDARD.decode(b64).ok()
}
