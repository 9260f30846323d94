//! Principal-certificate validation (spec §4 step 3): the person certificate
//! presented for agent issuance must chain to this hierarchy's root through one
//! of its issuing CAs, be within validity, and be a client (end-entity)
//! certificate. Revocation is checked by the server against its store, and the
//! keyHash comparison with `principal_uid` needs the AIC model, so both stay
//! outside this crate.
//!
//! A person delegates to many agents with the same certificate, so the
//! time-independent part of the validation (parsing, the issuing CA's
//! signature, CA flag, critical extensions, EKU) is done once per distinct
//! certificate and remembered in a bounded cache keyed by the SHA-256 of its
//! DER. What can change between two requests is checked every time: the
//! validity window against `now` here, revocation by the caller.

use std::sync::Arc;
use std::time::SystemTime;

use const_oid::ObjectIdentifier;
use der::Decode;

use crate::cert::{self, CertExtension};
use crate::csr;
use crate::error::PrincipalCertError;
use crate::hierarchy::Hierarchy;
use crate::oids;
use crate::principal::{PrincipalCert, VerifiedPrincipal, der_digest};

/// Upper bound on a principal certificate (PEM or DER): room for a chain and
/// long AIC/PA extensions, while an oversized upload is refused before parsing.
pub const MAX_PRINCIPAL_CERT_LEN: usize = 64 * 1024;

const ANY_EXTENDED_KEY_USAGE: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.37.0");

/// Critical extensions this validator understands; any other critical
/// extension makes the certificate unusable (RFC 5280 §4.2).
const UNDERSTOOD_CRITICAL: [ObjectIdentifier; 4] = [
    oids::EXT_BASIC_CONSTRAINTS,
    oids::EXT_KEY_USAGE,
    oids::EXT_EXTENDED_KEY_USAGE,
    oids::EXT_SUBJECT_ALT_NAME,
];

/// Decodes PEM (the first CERTIFICATE block; a chain may follow) or DER.
pub fn certificate_der(input: &[u8]) -> Result<Vec<u8>, PrincipalCertError> {
    if input.len() > MAX_PRINCIPAL_CERT_LEN {
        return Err(PrincipalCertError::Malformed(format!(
            "longer than {MAX_PRINCIPAL_CERT_LEN} bytes"
        )));
    }
    // Only text is trimmed: DER is binary, and its last byte (the end of a
    // random signature) is ASCII whitespace for 5 of the 256 byte values, so
    // trimming it would corrupt those certificates.
    let trimmed = input.trim_ascii();
    if !trimmed.starts_with(b"-----BEGIN") {
        return Ok(input.to_vec());
    }
    const END: &[u8] = b"-----END CERTIFICATE-----";
    let end = trimmed
        .windows(END.len())
        .position(|w| w == END)
        .ok_or_else(|| PrincipalCertError::Malformed("no END CERTIFICATE line".into()))?;
    let (label, der) = der::pem::decode_vec(&trimmed[..end + END.len()])
        .map_err(|e| PrincipalCertError::Malformed(format!("bad PEM: {e}")))?;
    if label != "CERTIFICATE" {
        return Err(PrincipalCertError::Malformed(format!(
            "PEM label {label:?}, expected CERTIFICATE"
        )));
    }
    Ok(der)
}

/// Validates a principal certificate (PEM or DER) against `hierarchy` at `now`.
/// The chain is verified once per distinct certificate (see the module
/// documentation); validity is checked against `now` on every call.
pub fn verify_principal_cert(
    input: &[u8],
    hierarchy: &Hierarchy,
    now: SystemTime,
) -> Result<PrincipalCert, PrincipalCertError> {
    let der = certificate_der(input)?;
    let digest = der_digest(&der);
    let cache = hierarchy.principal_cache();
    let verified = match cache.get(&digest) {
        Some(v) => v,
        None => {
            let v = Arc::new(verify_chain(der, hierarchy_issuers(hierarchy))?);
            cache.insert(digest, Arc::clone(&v));
            v
        }
    };
    verified.check_validity(now)?;
    Ok(verified.cert.clone())
}

/// An issuing CA as chain validation needs it: a CA of this process's
/// [`Hierarchy`], or one from a [`crate::TrustBundle`] (public certificates
/// only, e.g. in admission).
pub(crate) struct IssuerRef<'a> {
    pub name: &'a str,
    pub subject_der: &'a [u8],
    pub spki_der: &'a [u8],
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

fn hierarchy_issuers(hierarchy: &Hierarchy) -> impl Iterator<Item = IssuerRef<'_>> {
    hierarchy.issuing_cas().map(|ca| IssuerRef {
        name: ca.name(),
        subject_der: ca.subject_der(),
        spki_der: ca.spki_der(),
        not_before: ca.not_before(),
        not_after: ca.not_after(),
    })
}

/// Everything about an end-entity client certificate that does not depend on
/// the time: issued by one of `issuers` (its signature verifies), not a CA,
/// no unknown critical extension, client authentication allowed.
pub(crate) fn verify_chain<'a>(
    der: Vec<u8>,
    issuers: impl Iterator<Item = IssuerRef<'a>>,
) -> Result<VerifiedPrincipal, PrincipalCertError> {
    let raw = cert::parse_cert(&der).map_err(|e| PrincipalCertError::Malformed(e.to_string()))?;
    if raw.tbs_algorithm != raw.signed.algorithm {
        return Err(PrincipalCertError::Malformed(
            "inner and outer signature algorithms differ".into(),
        ));
    }
    let mut candidates = issuers.filter(|ca| ca.subject_der == raw.issuer).peekable();
    if candidates.peek().is_none() {
        return Err(PrincipalCertError::Untrusted(
            "not issued by a CA of this hierarchy".into(),
        ));
    }
    let issuer = candidates
        .find(|ca| {
            crate::keys::verify_signature(
                ca.spki_der,
                &raw.signed.algorithm,
                raw.signed.tbs,
                &raw.signed.signature,
            )
            .is_ok()
        })
        .ok_or_else(|| {
            PrincipalCertError::Untrusted(
                "signature does not verify against the issuing CA named in it".into(),
            )
        })?;
    if raw.is_ca() {
        return Err(PrincipalCertError::Untrusted(
            "a CA certificate cannot be a principal".into(),
        ));
    }
    if let Some(ext) = raw
        .extensions
        .iter()
        .find(|e| e.critical && !UNDERSTOOD_CRITICAL.contains(&e.oid))
    {
        return Err(PrincipalCertError::Untrusted(format!(
            "unknown critical extension {}",
            ext.oid
        )));
    }
    if let Some(eku) = raw.extension(&oids::EXT_EXTENDED_KEY_USAGE) {
        let purposes = Vec::<ObjectIdentifier>::from_der(&eku.value)
            .map_err(|e| PrincipalCertError::Malformed(format!("extendedKeyUsage: {e}")))?;
        if !purposes
            .iter()
            .any(|p| *p == oids::KP_CLIENT_AUTH || *p == ANY_EXTENDED_KEY_USAGE)
        {
            return Err(PrincipalCertError::Untrusted(
                "not a client-authentication certificate".into(),
            ));
        }
    }
    let cert = PrincipalCert {
        spki_der: raw.spki.to_vec(),
        serial_hex: raw.serial_hex(),
        issuing_ca: issuer.name.to_string(),
        subject_der: raw.subject.to_vec(),
        common_name: csr::common_name(raw.subject),
        not_before: raw.not_before,
        not_after: raw.not_after,
        extensions: raw.extensions.clone(),
        der: der.clone(),
    };
    Ok(VerifiedPrincipal {
        usable_from: raw.not_before.max(issuer.not_before),
        usable_until: raw.not_after.min(issuer.not_after),
        cert,
    })
}

/// The extensions of any certificate (PEM or DER), without validating it; for
/// looking at a caller's mTLS certificate (e.g. "does it carry an AIC?") after
/// the TLS layer has already verified it.
pub fn certificate_extensions(input: &[u8]) -> Result<Vec<CertExtension>, PrincipalCertError> {
    let der = certificate_der(input)?;
    let raw = cert::parse_cert(&der).map_err(|e| PrincipalCertError::Malformed(e.to_string()))?;
    Ok(raw.extensions)
}
