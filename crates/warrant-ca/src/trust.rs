//! A trust bundle: the public certificates of a hierarchy (its root and the
//! issuing CAs in force), for verifying client certificates where the CA's
//! keys are not, e.g. in admission. A bundle is only as good as its anchor,
//! so every issuing CA in it must be signed by a self-signed root in the same
//! bundle; an issuing CA that chains to none refuses the whole bundle rather
//! than being trusted on its own say-so.

use std::time::SystemTime;

use crate::cert;
use crate::csr;
use crate::error::PrincipalCertError;
use crate::principal::{VerifiedPrincipal, der_digest};
use crate::verify::{IssuerRef, certificate_der, verify_chain};

/// An issuing CA of a [`TrustBundle`].
#[derive(Debug, Clone)]
struct TrustedIssuer {
    name: String,
    subject_der: Vec<u8>,
    spki_der: Vec<u8>,
    not_before: SystemTime,
    not_after: SystemTime,
}

/// The CAs a verifier trusts to have issued client certificates.
#[derive(Debug, Clone)]
pub struct TrustBundle {
    issuers: Vec<TrustedIssuer>,
    /// SHA-256 over the bundle's certificates in order: changes whenever the
    /// bundle does, so results cached under one bundle can be dropped.
    fingerprint: [u8; 32],
}

/// A CRL whose signature verified under an issuing CA of a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedCrl {
    /// The issuing CA's name (its subject CN), as [`TrustBundle::issuer_names`].
    pub issuer: String,
    pub this_update: SystemTime,
    pub next_update: Option<SystemTime>,
    /// The revoked serials, as [`crate::PrincipalCert::serial_hex`] writes them.
    pub revoked_serials: Vec<String>,
}

/// Why a CRL was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrlError {
    #[error("malformed CRL: {0}")]
    Malformed(String),
    #[error("the CRL's issuer is not an issuing CA of the bundle")]
    UnknownIssuer,
    #[error("the CRL's signature does not verify under its issuing CA")]
    BadSignature,
}

/// Why a bundle was refused; `index` counts certificates from 0 in file order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustBundleError {
    #[error("the bundle holds no certificate")]
    Empty,
    #[error("certificate {index} of the bundle: {reason}")]
    Malformed { index: usize, reason: String },
    #[error("certificate {index} of the bundle is not a CA certificate")]
    NotCa { index: usize },
    #[error("the bundle holds no self-signed root CA")]
    NoRoot,
    #[error(
        "certificate {index} of the bundle ({name}) is a CA that chains to no root in the bundle"
    )]
    Unanchored { index: usize, name: String },
    #[error("the bundle holds a root but no issuing CA")]
    NoIssuer,
}

const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
const END: &str = "-----END CERTIFICATE-----";

/// The DER of every CERTIFICATE block of `text`, in order.
fn pem_certificates(text: &str) -> Result<Vec<Vec<u8>>, TrustBundleError> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        let index = out.len();
        let Some(len) = rest[start..].find(END) else {
            return Err(TrustBundleError::Malformed {
                index,
                reason: "no END CERTIFICATE line".into(),
            });
        };
        let block = &rest[start..start + len + END.len()];
        let (_, der) =
            der::pem::decode_vec(block.as_bytes()).map_err(|e| TrustBundleError::Malformed {
                index,
                reason: format!("bad PEM: {e}"),
            })?;
        out.push(der);
        rest = &rest[start + len + END.len()..];
    }
    Ok(out)
}

impl TrustBundle {
    /// Reads a PEM bundle: one or more self-signed roots and the issuing CAs
    /// they signed, in any order. Every certificate must be a CA, every
    /// non-root must verify under a root of the bundle.
    pub fn from_pem(text: &str) -> Result<TrustBundle, TrustBundleError> {
        let ders = pem_certificates(text)?;
        if ders.is_empty() {
            return Err(TrustBundleError::Empty);
        }
        let mut parsed = Vec::with_capacity(ders.len());
        for (index, der) in ders.iter().enumerate() {
            let raw = cert::parse_cert(der).map_err(|e| TrustBundleError::Malformed {
                index,
                reason: e.to_string(),
            })?;
            if !raw.is_ca() {
                return Err(TrustBundleError::NotCa { index });
            }
            parsed.push(raw);
        }
        let verifies = |signer_spki: &[u8], c: &cert::RawCert<'_>| {
            crate::keys::verify_signature(
                signer_spki,
                &c.signed.algorithm,
                c.signed.tbs,
                &c.signed.signature,
            )
            .is_ok()
        };
        let is_root = |c: &cert::RawCert<'_>| c.subject == c.issuer && verifies(c.spki, c);
        let roots: Vec<&cert::RawCert<'_>> = parsed.iter().filter(|c| is_root(c)).collect();
        if roots.is_empty() {
            return Err(TrustBundleError::NoRoot);
        }
        let mut issuers = Vec::new();
        for (index, c) in parsed.iter().enumerate() {
            if is_root(c) {
                continue;
            }
            let name = csr::common_name(c.subject).unwrap_or_default();
            let anchored = roots
                .iter()
                .any(|r| r.subject == c.issuer && verifies(r.spki, c));
            if !anchored {
                return Err(TrustBundleError::Unanchored { index, name });
            }
            issuers.push(TrustedIssuer {
                name,
                subject_der: c.subject.to_vec(),
                spki_der: c.spki.to_vec(),
                not_before: c.not_before,
                not_after: c.not_after,
            });
        }
        if issuers.is_empty() {
            return Err(TrustBundleError::NoIssuer);
        }
        Ok(TrustBundle {
            issuers,
            fingerprint: der_digest(&ders.concat()),
        })
    }

    /// The issuing CAs' names (their subject CNs), in bundle order.
    pub fn issuer_names(&self) -> impl Iterator<Item = &str> {
        self.issuers.iter().map(|i| i.name.as_str())
    }

    /// Changes whenever the bundle's certificates do.
    pub fn fingerprint(&self) -> [u8; 32] {
        self.fingerprint
    }

    /// Verifies a DER CRL's signature under the bundle's issuing CA that
    /// the CRL names, and reads its revoked serials.
    pub fn verify_crl(&self, der: &[u8]) -> Result<VerifiedCrl, CrlError> {
        use der::{Decode, Encode};
        let signed = cert::parse_signed(der).map_err(|e| CrlError::Malformed(e.to_string()))?;
        let tbs = x509_cert::crl::TbsCertList::from_der(signed.tbs)
            .map_err(|e| CrlError::Malformed(e.to_string()))?;
        let issuer_der = tbs
            .issuer
            .to_der()
            .map_err(|e| CrlError::Malformed(e.to_string()))?;
        let issuer = self
            .issuers
            .iter()
            .find(|i| i.subject_der == issuer_der)
            .ok_or(CrlError::UnknownIssuer)?;
        crate::keys::verify_signature(
            &issuer.spki_der,
            &signed.algorithm,
            signed.tbs,
            &signed.signature,
        )
        .map_err(|_| CrlError::BadSignature)?;
        let revoked_serials = tbs
            .revoked_certificates
            .iter()
            .flatten()
            .map(|r| cert::serial_hex(r.serial_number.as_bytes()))
            .collect();
        Ok(VerifiedCrl {
            issuer: issuer.name.clone(),
            this_update: tbs.this_update.to_system_time(),
            next_update: tbs.next_update.map(|t| t.to_system_time()),
            revoked_serials,
        })
    }

    /// Validates a client certificate (PEM or DER) against this bundle: the
    /// time-independent checks of [`crate::verify_principal_cert`] (issued and
    /// signed by an issuing CA of the bundle, not a CA, no unknown critical
    /// extension, client authentication). The caller checks the time with
    /// [`VerifiedPrincipal::check_validity_with_skew`], and revocation.
    pub fn verify_client_cert(
        &self,
        input: &[u8],
    ) -> Result<VerifiedPrincipal, PrincipalCertError> {
        let der = certificate_der(input)?;
        verify_chain(
            der,
            self.issuers.iter().map(|i| IssuerRef {
                name: &i.name,
                subject_der: &i.subject_der,
                spki_der: &i.spki_der,
                not_before: i.not_before,
                not_after: i.not_after,
            }),
        )
    }
}
