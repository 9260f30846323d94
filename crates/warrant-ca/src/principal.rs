//! The outcome of principal-certificate validation, [`PrincipalCert`], and the
//! bounded cache of chain-verified ones each [`crate::Hierarchy`] keeps so that a
//! person delegating to many agents is chain-verified once.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use const_oid::ObjectIdentifier;

use crate::cert::{self, CertExtension};
use crate::error::PrincipalCertError;
use crate::oids;

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

    /// The subject's OUs, in order: an agent's gateway roles
    /// (`gateway:reader`).
    pub fn organizational_units(&self) -> Vec<String> {
        crate::csr::name_attributes(&self.subject_der, &oids::AT_ORG_UNIT)
    }

    /// Whether it carries an AIC, i.e. it is an agent's certificate (agents
    /// may not delegate further).
    pub fn is_agent(&self) -> bool {
        self.extension_value(&oids::AIC_EXTENSION).is_some()
    }
}

/// How many verified principal certificates a hierarchy remembers (each entry
/// holds one certificate's DER and its decoded fields). Beyond it the oldest
/// entries are forgotten and verified again when next presented.
pub const PRINCIPAL_CACHE_CAPACITY: usize = 8192;

/// A chain-verified client certificate (a principal's, or an agent's in
/// admission) and the validity window it is usable in (its own, narrowed by
/// its issuing CA's).
#[derive(Debug, Clone)]
pub struct VerifiedPrincipal {
    pub cert: PrincipalCert,
    pub usable_from: SystemTime,
    pub usable_until: SystemTime,
}

impl VerifiedPrincipal {
    /// The time-dependent check, the same on a cache hit as on a miss.
    pub fn check_validity(&self, now: SystemTime) -> Result<(), PrincipalCertError> {
        self.check_validity_with_skew(now, std::time::Duration::ZERO)
    }

    /// As [`Self::check_validity`], tolerating clocks `skew` apart (a
    /// verifier that is not the issuer, e.g. admission).
    pub fn check_validity_with_skew(
        &self,
        now: SystemTime,
        skew: std::time::Duration,
    ) -> Result<(), PrincipalCertError> {
        if now + skew < self.usable_from {
            return Err(PrincipalCertError::NotYetValid);
        }
        if now.checked_sub(skew).unwrap_or(SystemTime::UNIX_EPOCH) > self.usable_until {
            return Err(PrincipalCertError::Expired);
        }
        Ok(())
    }
}

/// SHA-256 of a certificate's DER: the cache key.
pub(crate) type DerDigest = [u8; 32];

struct CacheInner {
    entries: HashMap<DerDigest, Arc<VerifiedPrincipal>>,
    /// Insertion order, for first-in first-out eviction.
    order: VecDeque<DerDigest>,
}

/// Principal certificates a [`crate::Hierarchy`] has chain-verified, keyed by the
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

    pub(crate) fn get(&self, digest: &DerDigest) -> Option<Arc<VerifiedPrincipal>> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.entries.get(digest).cloned()
    }

    pub(crate) fn insert(&self, digest: DerDigest, entry: Arc<VerifiedPrincipal>) {
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

pub(crate) fn der_digest(der: &[u8]) -> DerDigest {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, der);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
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
