//! What every issuance path shares once its own checks passed: the issuing
//! CA, the certificate to sign ([`Unsigned`]), the signed certificate
//! ([`Signed`]), and the one place its database row and its answer are
//! built ([`Signed::into_parts`]).
//!
//! ```text
//! Unsigned ─sign(key)→ Signed ─into_parts→ (CertRecord, Pending)
//!     … the path stores the row …  Pending::committed → IssueResponse
//! ```
//!
//! An [`IssueResponse`] exists only through [`Pending::committed`], which a
//! path calls once the store accepted the row.

use super::key::SubjectKey;
use super::response::IssueResponse;
use crate::clock::{from_unix, rfc3339, unix};
use crate::error::{ApiError, ErrorKey, internal};
use crate::state::{CaServing, CaSet};
use std::sync::Arc;
use warrant_ca::{ExtraExtension, IssuedCert, IssuingCa, Profile, SanEntry, Subject};
use warrant_store::{CertRecord, CertStatus};

/// An issuing CA with what the server encoded for it at start-up. Resolved
/// before anything is stored, so nothing about the CA can fail after the
/// commit.
#[derive(Clone, Copy)]
pub(super) struct Issuer<'a> {
    /// The CAs in force when the request began.
    pub cas: &'a CaSet,
    pub ca: &'a Arc<IssuingCa>,
    serving: &'a CaServing,
}

impl<'a> Issuer<'a> {
    /// The CA that issues at `now` for the CA `name` names (trimmed; empty
    /// or absent: the default CA): the family's generation in force, so
    /// new issuance moves to a rotated CA at its activation, whichever of
    /// the family's names the request gives.
    pub fn resolve(cas: &'a CaSet, name: Option<&str>, now: i64) -> Result<Self, ApiError> {
        let name = name.map(str::trim).filter(|s| !s.is_empty());
        let ca = match name {
            Some(n) if cas.hierarchy.ca(n).is_none() => None,
            n => cas.hierarchy.issuing_ca_at(n, now),
        }
        .ok_or_else(|| {
            ApiError::detail(
                ErrorKey::CaNotFound,
                format!("ca: {:?} is not an issuing CA", name.unwrap_or("")),
            )
        })?;
        let serving = cas
            .per_ca
            .get(ca.name())
            .ok_or_else(|| internal(format!("no chain loaded for issuing CA {}", ca.name())))?;
        Ok(Issuer { cas, ca, serving })
    }

    /// The CA's own NotAfter, Unix seconds.
    pub fn not_after(&self) -> i64 {
        unix(self.ca.not_after())
    }

    /// A person or operator leaf's lifetime in seconds: the requested days
    /// (or the configured default) within `issuance.max_validity_days` and
    /// this CA's own NotAfter.
    pub fn leaf_validity_secs(
        &self,
        iss: &crate::config::IssuanceConfig,
        requested_days: Option<u32>,
        now: i64,
    ) -> Result<u64, ApiError> {
        Ok(crate::policy::leaf_validity_secs(
            now,
            requested_days,
            iss.default_validity_days,
            iss.max_validity_days,
            self.not_after(),
        )?)
    }
}

/// The names a certificate's row and answer carry besides its subject.
pub(super) struct RecordNames {
    pub common_name: String,
    /// Person certificates: their canonical UID; agents: their principal's.
    pub principal_uid: Option<String>,
    pub agent_id: Option<String>,
    pub spiffe_id: Option<String>,
    /// Agents: their capabilities, as the row keeps them for audits
    /// ([`agent_capabilities`]).
    pub capabilities: Option<String>,
}

/// The capabilities column of an agent's row: the capabilities its
/// certificate carries, in their order, as a compact JSON array of
/// `[scheme_id, capability_id]` or `[scheme_id, capability_id, hex
/// parameters]`, so an audit of a day needs neither the DER nor the
/// archive's certificate to answer which agent held what. Compact because
/// it is in every agent row: half the bytes of the objects the API shows.
pub(super) fn agent_capabilities(caps: &[aic::Capability]) -> Option<String> {
    let rows: Vec<Vec<String>> = caps
        .iter()
        .map(|c| {
            let mut row = vec![c.scheme_id.clone(), c.capability_id.clone()];
            if let Some(p) = &c.parameters {
                row.push(aic::hex::encode(p));
            }
            row
        })
        .collect();
    serde_json::to_string(&rows).ok()
}

/// The capabilities column read back ([`agent_capabilities`]); `None` for a
/// value it did not write.
pub fn stored_capabilities(text: &str) -> Option<Vec<aic::Capability>> {
    let rows: Vec<Vec<String>> = serde_json::from_str(text).ok()?;
    rows.into_iter()
        .map(|row| match row.as_slice() {
            [scheme, id] => Some(aic::Capability::new(scheme, id, None)),
            [scheme, id, params] => {
                let bytes = aic::hex::decode(params)?;
                Some(aic::Capability::new(scheme, id, Some(&bytes)))
            }
            _ => None,
        })
        .collect()
}

/// Whether an agent's row keeps its DER (`storage.agent_cert_der`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StoredDer {
    Keep,
    /// Keep only what revocation, cascades, `max_agents`, audit and the
    /// certificate's metadata need; the export answers 410.
    Drop,
}

impl RecordNames {
    /// A certificate that names no principal, agent or SPIFFE ID.
    pub fn plain(common_name: &str) -> Self {
        RecordNames {
            common_name: common_name.to_string(),
            principal_uid: None,
            agent_id: None,
            spiffe_id: None,
            capabilities: None,
        }
    }
}

/// A certificate every check allowed, not signed yet. Its key is made
/// separately (`KeySource::into_key`), as the last step before signing.
pub(super) struct Unsigned<'a> {
    pub issuer: Issuer<'a>,
    pub profile: Profile,
    pub subject: Subject,
    pub san: Vec<SanEntry>,
    pub extensions: Vec<ExtraExtension>,
    /// Now, Unix seconds: the certificate's start and its row's creation.
    pub not_before: i64,
    /// Unix seconds.
    pub not_after: i64,
    pub names: RecordNames,
}

impl<'a> Unsigned<'a> {
    /// Signs with the issuing CA over `key`.
    pub fn sign(self, key: SubjectKey) -> Result<Signed<'a>, ApiError> {
        let urls = Some(&self.issuer.serving.urls).filter(|u| !u.is_empty());
        let cert = warrant_ca::issue_leaf(
            self.issuer.ca,
            &warrant_ca::LeafSpec {
                profile: self.profile,
                subject: &self.subject,
                san: &self.san,
                spki_der: &key.spki_der,
                not_before: from_unix(self.not_before),
                not_after: from_unix(self.not_after),
                extensions: &self.extensions,
                urls,
            },
        )?;
        Ok(Signed {
            issuer: self.issuer,
            profile: self.profile,
            names: self.names,
            cert,
            key,
            created_at: self.not_before,
        })
    }
}

/// A signed certificate, not stored yet.
pub(super) struct Signed<'a> {
    issuer: Issuer<'a>,
    profile: Profile,
    names: RecordNames,
    cert: IssuedCert,
    key: SubjectKey,
    created_at: i64,
}

/// The answer to a certificate whose row is on its way to the store.
pub(super) struct Pending<'a>(IssueResponse<'a>);

impl<'a> Pending<'a> {
    /// The row was stored: counts the certificate and gives the answer.
    pub fn committed(self) -> IssueResponse<'a> {
        crate::metrics::cert_issued(self.0.ca, self.0.profile);
        self.0
    }
}

impl<'a> Signed<'a> {
    /// The row to store and the answer to give once it is stored: each
    /// built here, and only here, for every profile.
    pub fn into_parts(self, der: StoredDer) -> (CertRecord, Pending<'a>) {
        let Signed {
            issuer,
            profile,
            names,
            cert,
            key,
            created_at,
        } = self;
        let not_before = unix(cert.not_before);
        let not_after = unix(cert.not_after);
        let record = CertRecord {
            ca: issuer.ca.name().to_string(),
            serial: cert.serial_hex.clone(),
            common_name: names.common_name.clone(),
            profile: profile.as_str().to_string(),
            status: CertStatus::Valid,
            not_before,
            not_after,
            der: match der {
                StoredDer::Keep => cert.der,
                StoredDer::Drop => Vec::new(),
            },
            principal_uid: names.principal_uid.clone(),
            agent_id: names.agent_id,
            key_hash: key.key_hash.to_vec(),
            created_at,
            revoked_at: None,
            revocation_reason: None,
            capabilities: names.capabilities,
            lineage_start: None,
        };
        let answer = IssueResponse {
            serial_number: cert.serial_hex,
            common_name: names.common_name,
            cert_pem: cert.pem,
            key_pem: key.key_pem,
            chain_pem: &issuer.serving.chain_json,
            ca: issuer.ca.name(),
            spiffe_id: names.spiffe_id,
            principal_uid: names.principal_uid,
            profile: profile.as_str(),
            not_before: rfc3339(not_before),
            not_after: rfc3339(not_after),
        };
        (record, Pending(answer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_capabilities_column_round_trips_compactly() {
        let caps = vec![
            aic::Capability::new("varwof-gateway-v1", "gateway:read", None),
            aic::Capability::new("db", "write", Some(&[0x7b, 0x00, 0xff])),
        ];
        let text = agent_capabilities(&caps).unwrap();
        assert_eq!(
            text,
            r#"[["varwof-gateway-v1","gateway:read"],["db","write","7b00ff"]]"#
        );
        assert_eq!(stored_capabilities(&text), Some(caps));
        assert_eq!(stored_capabilities("[[\"only-one\"]]"), None);
        assert_eq!(stored_capabilities("not json"), None);
    }
}
