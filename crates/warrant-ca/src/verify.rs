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

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use const_oid::ObjectIdentifier;
use der::Decode;

use crate::cert::{self, CertExtension};
use crate::csr;
use crate::error::PrincipalCertError;
use crate::hierarchy::Hierarchy;
use crate::oids;

/// Upper bound on a principal certificate (PEM or DER); real ones are ~1–3 KiB.
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

/// A principal certificate that chained to the trust anchor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrincipalCert {
    pub der: Vec<u8>,
    /// DER SubjectPublicKeyInfo: what `principal_uid`'s keyHash must hash to
    /// and what verifies the DA signature.
    pub spki_der: Vec<u8>,
    /// 40 upper-case hex digits (the store's key together with `issuing_ca`).
    pub serial_hex: String,
    /// Name of the issuing CA of this hierarchy that signed it.
    pub issuing_ca: String,
    pub subject_der: Vec<u8>,
    pub common_name: Option<String>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    pub extensions: Vec<CertExtension>,
}

impl PrincipalCert {
    /// The DER value of an extension, e.g. `oids::PA_EXTENSION`.
    pub fn extension_value(&self, oid: &ObjectIdentifier) -> Option<&[u8]> {
        cert::find_extension(&self.extensions, oid).map(|e| e.value.as_slice())
    }

    /// Whether it carries an AIC, i.e. it is an agent's certificate (agents
    /// may not delegate further).
    pub fn is_agent(&self) -> bool {
        self.extension_value(&oids::AIC_EXTENSION).is_some()
    }
}

/// Decodes PEM (the first CERTIFICATE block; a chain may follow) or DER.
pub fn certificate_der(input: &[u8]) -> Result<Vec<u8>, PrincipalCertError> {
    if input.len() > MAX_PRINCIPAL_CERT_LEN {
        return Err(PrincipalCertError::Malformed(format!(
            "longer than {MAX_PRINCIPAL_CERT_LEN} bytes"
        )));
    }
    // Only text is trimmed: DER is binary, and its last byte (the end of a
    // random signature) is an ASCII space or newline in about 2 % of
    // certificates, so trimming it would corrupt them.
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

/// How many verified principal certificates a hierarchy remembers (about
/// 2 KiB each). Beyond it the oldest entries are forgotten and verified again
/// when next presented.
pub const PRINCIPAL_CACHE_CAPACITY: usize = 8192;

/// A chain-verified principal certificate and the validity window it is
/// usable in (its own, narrowed by its issuing CA's).
struct VerifiedPrincipal {
    cert: PrincipalCert,
    usable_from: SystemTime,
    usable_until: SystemTime,
}

impl VerifiedPrincipal {
    /// The time-dependent check, the same on a cache hit as on a miss.
    fn check_validity(&self, now: SystemTime) -> Result<(), PrincipalCertError> {
        if now < self.usable_from {
            return Err(PrincipalCertError::NotYetValid);
        }
        if now > self.usable_until {
            return Err(PrincipalCertError::Expired);
        }
        Ok(())
    }
}

type DerDigest = [u8; 32];

struct CacheInner {
    entries: HashMap<DerDigest, Arc<VerifiedPrincipal>>,
    /// Insertion order, for first-in first-out eviction.
    order: VecDeque<DerDigest>,
}

/// Principal certificates a [`Hierarchy`] has chain-verified, keyed by the
/// SHA-256 of their DER (so a different byte anywhere is a different key and
/// gets the full validation). Only successes are cached.
pub(crate) struct PrincipalCertCache {
    capacity: usize,
    inner: RwLock<CacheInner>,
}

impl Default for PrincipalCertCache {
    fn default() -> Self {
        Self::with_capacity(PRINCIPAL_CACHE_CAPACITY)
    }
}

impl PrincipalCertCache {
    fn with_capacity(capacity: usize) -> Self {
        Self {
            capacity,
            inner: RwLock::new(CacheInner {
                entries: HashMap::new(),
                order: VecDeque::new(),
            }),
        }
    }

    fn get(&self, digest: &DerDigest) -> Option<Arc<VerifiedPrincipal>> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.entries.get(digest).cloned()
    }

    fn insert(&self, digest: DerDigest, entry: Arc<VerifiedPrincipal>) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if inner.entries.insert(digest, entry).is_some() {
            return;
        }
        inner.order.push_back(digest);
        while inner.entries.len() > self.capacity {
            match inner.order.pop_front() {
                Some(old) => {
                    inner.entries.remove(&old);
                }
                None => break,
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.entries.len()
    }
}

fn der_digest(der: &[u8]) -> DerDigest {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, der);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
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
            let v = Arc::new(verify_chain(der, hierarchy)?);
            cache.insert(digest, Arc::clone(&v));
            v
        }
    };
    verified.check_validity(now)?;
    Ok(verified.cert.clone())
}

/// Everything about a principal certificate that does not depend on the time.
fn verify_chain(
    der: Vec<u8>,
    hierarchy: &Hierarchy,
) -> Result<VerifiedPrincipal, PrincipalCertError> {
    let raw = cert::parse_cert(&der).map_err(|e| PrincipalCertError::Malformed(e.to_string()))?;
    if raw.tbs_algorithm != raw.signed.algorithm {
        return Err(PrincipalCertError::Malformed(
            "inner and outer signature algorithms differ".into(),
        ));
    }
    let mut candidates = hierarchy
        .issuing_cas()
        .filter(|ca| ca.subject_der() == raw.issuer)
        .peekable();
    if candidates.peek().is_none() {
        return Err(PrincipalCertError::Untrusted(
            "not issued by a CA of this hierarchy".into(),
        ));
    }
    let issuer = candidates
        .find(|ca| {
            crate::keys::verify_signature(
                ca.spki_der(),
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
        issuing_ca: issuer.name().to_string(),
        subject_der: raw.subject.to_vec(),
        common_name: csr::common_name(raw.subject),
        not_before: raw.not_before,
        not_after: raw.not_after,
        extensions: raw.extensions.clone(),
        der: der.clone(),
    };
    Ok(VerifiedPrincipal {
        usable_from: raw.not_before.max(issuer.not_before()),
        usable_until: raw.not_after.min(issuer.not_after()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn entry(serial: &str) -> Arc<VerifiedPrincipal> {
        let t = SystemTime::UNIX_EPOCH;
        Arc::new(VerifiedPrincipal {
            cert: PrincipalCert {
                der: Vec::new(),
                spki_der: Vec::new(),
                serial_hex: serial.to_string(),
                issuing_ca: "people".into(),
                subject_der: Vec::new(),
                common_name: None,
                not_before: t,
                not_after: t,
                extensions: Vec::new(),
            },
            usable_from: t + Duration::from_secs(100),
            usable_until: t + Duration::from_secs(200),
        })
    }

    #[test]
    fn cache_is_bounded_and_forgets_the_oldest_first() {
        let cache = PrincipalCertCache::with_capacity(3);
        for i in 0..5u8 {
            cache.insert([i; 32], entry(&i.to_string()));
        }
        assert_eq!(cache.len(), 3);
        assert!(cache.get(&[0; 32]).is_none());
        assert!(cache.get(&[1; 32]).is_none());
        assert_eq!(cache.get(&[4; 32]).unwrap().cert.serial_hex, "4");
        // Re-inserting a present key neither grows nor reorders the cache.
        cache.insert([2; 32], entry("2"));
        assert_eq!(cache.len(), 3);
    }

    #[test]
    fn a_cached_entry_still_answers_for_its_validity_window() {
        let e = entry("1");
        let at = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        assert_eq!(
            e.check_validity(at(99)),
            Err(PrincipalCertError::NotYetValid)
        );
        assert_eq!(e.check_validity(at(100)), Ok(()));
        assert_eq!(e.check_validity(at(200)), Ok(()));
        assert_eq!(e.check_validity(at(201)), Err(PrincipalCertError::Expired));
    }
}
