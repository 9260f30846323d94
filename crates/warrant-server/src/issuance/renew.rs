//! Person certificate renewal (`POST /api/v1/certs/renew`): a person
//! presents their current certificate over mTLS and gets a new one with the
//! same subject and PA.
//!
//! ```text
//! caller (mTLS person certificate, unexpired, unrevoked) ─Renewal::check→
//!     Renewal ─sign→ Signed ─commit (+ audit `renew`)→ supersede the old
//!     one when the key changed → IssueResponse
//! ```
//!
//! Without a CSR the certificate's own key is certified again (the TLS
//! handshake proved the caller holds it); a CSR with another key is a
//! rotation, and the old certificate is then revoked as `superseded`, after
//! the new one is stored. Only that certificate: the agents its key
//! delegated keep their (short) lives. The principal UID keeps its realm and
//! identifier and takes the new key's hash. The new certificate lives as
//! long as the old one did, within `issuance.max_validity_days`, the CA's
//! NotAfter and, when set, `issuance.renewal_max_total_days` counted from
//! the first certificate of the line (`lineage_start` in its row).

use super::key::KeySource;
use super::leaf::{Issuer, RecordNames, StoredDer, Unsigned};
use super::response::IssueResponse;
use crate::audit::{Entry, EventKind};
use crate::auth::{AuthMethod, Caller, Role};
use crate::clock;
use crate::error::{ApiError, ErrorKey, principal_untrusted as untrusted};
use crate::state::{AppState, CaSet};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use warrant_ca::{ExtraExtension, Profile, Subject};
use warrant_store::{CertRecord, CertStatus, IssuanceRecord};

/// The body of `POST /api/v1/certs/renew` (may be empty: `{}`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenewRequest {
    /// A CSR for a new key (rotation); absent: the same key.
    #[serde(default)]
    pub csr_pem: Option<String>,
}

/// The validity of a renewed certificate: `[now, not_after]`, or the reason
/// there is none. Pure.
pub fn renewed_not_after(
    now: i64,
    old_lifetime: i64,
    max_validity_days: u32,
    ca_not_after: i64,
    lineage_start: i64,
    max_total_days: u32,
) -> Result<i64, ApiError> {
    let day = 86_400i64;
    let mut not_after = now
        .saturating_add(old_lifetime.clamp(1, i64::from(max_validity_days) * day))
        .min(ca_not_after);
    if max_total_days > 0 {
        let line_end = lineage_start.saturating_add(i64::from(max_total_days) * day);
        if now >= line_end {
            return Err(ApiError::detail(
                ErrorKey::RenewalLimitReached,
                format!(
                    "this certificate's line started {}; issuance.renewal_max_total_days ({max_total_days}) has passed",
                    clock::rfc3339(lineage_start)
                ),
            ));
        }
        not_after = not_after.min(line_end);
    }
    if not_after <= now {
        return Err(ApiError::detail(
            ErrorKey::Forbidden,
            "the issuing CA expires now: nothing left to renew into",
        ));
    }
    Ok(not_after)
}

/// Entry point of `POST /api/v1/certs/renew`.
pub async fn renew<'a>(
    state: &'a AppState,
    cas: &'a CaSet,
    caller: &Caller,
    req: RenewRequest,
) -> Result<IssueResponse<'a>, ApiError> {
    let result = renew_inner(state, cas, caller, req).await;
    if let Err(e) = &result {
        crate::audit::refused(
            state,
            crate::audit::actor(caller),
            e,
            crate::audit::Claimed {
                profile: Some("renew".into()),
                ..Default::default()
            },
        );
    }
    result
}

async fn renew_inner<'a>(
    state: &'a AppState,
    cas: &'a CaSet,
    caller: &Caller,
    req: RenewRequest,
) -> Result<IssueResponse<'a>, ApiError> {
    let der = match (&caller.method, caller.role, &caller.client_cert_der) {
        (AuthMethod::ClientCert, Role::CertificateHolder, Some(der)) => der,
        (AuthMethod::ClientCert, _, Some(_)) => {
            return Err(ApiError::detail(
                ErrorKey::Forbidden,
                "an operator certificate is renewed by an admin (POST /api/v1/users/{id}/operator-cert)",
            ));
        }
        _ => {
            return Err(ApiError::detail(
                ErrorKey::Forbidden,
                "renewal needs the current person certificate, presented over mTLS",
            ));
        }
    };
    let now_time = clock::system_now();
    let now = clock::unix(now_time);
    let cert = warrant_ca::verify_principal_cert(der, &cas.hierarchy, now_time)?;
    if cert.is_agent() {
        return Err(ApiError::detail(
            ErrorKey::Forbidden,
            "an agent certificate is renewed with a new DA (POST /api/v1/certs)",
        ));
    }
    let old = state
        .store
        .certs()
        .get_cert(&cert.issuing_ca, &cert.serial_hex)
        .await?
        .ok_or_else(|| untrusted("the certificate has no record in this CA's store"))?;
    if old.status == CertStatus::Revoked {
        return Err(untrusted("the certificate is revoked"));
    }
    let old_uid = match (&old.principal_uid, old.profile.as_str()) {
        (Some(uid), "tls-client") => aic::PrincipalUid::parse(uid)
            .map_err(|e| untrusted(format!("recorded principal_uid is unreadable: {e}")))?,
        _ => {
            return Err(ApiError::detail(
                ErrorKey::Forbidden,
                "only person (tls-client) certificates are renewed here",
            ));
        }
    };
    let key = match req.csr_pem.as_deref().filter(|s| !s.trim().is_empty()) {
        Some(csr) => KeySource::parse(Some(csr), None)?,
        None => KeySource::Csr {
            spki_der: cert.spki_der.clone(),
        },
    };
    let rotated = key.csr_spki() != Some(cert.spki_der.as_slice());

    // From the old certificate's family, at its generation in force: a
    // renewal after a rotation moves to the new CA.
    let issuer = Issuer::resolve(cas, Some(&old.ca), now)?;
    let iss = &state.config.config.issuance;
    let lineage_start = old.lineage_start.unwrap_or(old.not_before);
    let not_after = renewed_not_after(
        now,
        old.not_after - old.not_before,
        iss.max_validity_days,
        issuer.not_after(),
        lineage_start,
        iss.renewal_max_total_days,
    )?;
    let subject = Subject::from_der(&cert.subject_der)?;
    // The PA, and the SAN when the certificate had one, byte for byte.
    let extensions: Vec<ExtraExtension> = cert
        .extensions
        .iter()
        .filter(|e| {
            e.oid == warrant_ca::oids::PA_EXTENSION
                || e.oid == warrant_ca::oids::EXT_SUBJECT_ALT_NAME
        })
        .map(|e| ExtraExtension {
            oid: e.oid,
            critical: e.critical,
            value_der: e.value.clone(),
        })
        .collect();
    let leaf = Unsigned {
        issuer,
        profile: Profile::TlsClient,
        subject,
        san: Vec::new(),
        extensions,
        not_before: now,
        not_after,
        names: RecordNames::plain(&old.common_name),
    };
    let key = key.into_key(state).await?;
    let mut leaf = leaf;
    leaf.names.principal_uid = Some(format!(
        "{}:{}:{}",
        old_uid.realm,
        old_uid.identifier,
        URL_SAFE_NO_PAD.encode(key.key_hash)
    ));
    let signed = leaf.sign(key)?;
    let (mut record, pending) = signed.into_parts(StoredDer::Keep);
    record.lineage_start = Some(lineage_start);
    let entry = renew_entry(caller, &old, &record, rotated);
    state
        .store
        .issuance()
        .submit(IssuanceRecord::with_cert(record, None).with_audit(entry))
        .await?;
    if rotated {
        state
            .store
            .certs()
            .supersede_cert(&old.ca, &old.serial, clock::unix_now())
            .await?;
        cas.ocsp.invalidate();
    }
    Ok(pending.committed())
}

fn renew_entry(
    caller: &Caller,
    old: &CertRecord,
    new: &CertRecord,
    rotated: bool,
) -> warrant_store::AuditEvent {
    Entry::by(EventKind::Renew, caller)
        .of_record(new)
        .detail("previous_serial", old.serial.as_str())
        .detail(
            "previous_principal_uid",
            old.principal_uid.as_deref().unwrap_or(""),
        )
        .detail("rotated", rotated)
        .detail("profile", new.profile.as_str())
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400;

    #[test]
    fn a_renewal_lives_as_long_as_the_old_certificate_within_the_caps() {
        let now = 1_000 * DAY;
        // Same lifetime as before.
        assert_eq!(
            renewed_not_after(now, 30 * DAY, 825, i64::MAX, now - 10 * DAY, 0).unwrap(),
            now + 30 * DAY
        );
        // Capped by max_validity_days and by the CA.
        assert_eq!(
            renewed_not_after(now, 900 * DAY, 825, i64::MAX, now, 0).unwrap(),
            now + 825 * DAY
        );
        assert_eq!(
            renewed_not_after(now, 30 * DAY, 825, now + DAY, now, 0).unwrap(),
            now + DAY
        );
        // The line's total lifetime: 40 days from its start.
        assert_eq!(
            renewed_not_after(now, 30 * DAY, 825, i64::MAX, now - 20 * DAY, 40).unwrap(),
            now + 20 * DAY
        );
    }

    #[test]
    fn rejects_a_renewal_past_the_lines_total_lifetime() {
        let now = 1_000 * DAY;
        let e = renewed_not_after(now, 30 * DAY, 825, i64::MAX, now - 40 * DAY, 40).unwrap_err();
        assert_eq!(e.key, ErrorKey::RenewalLimitReached);
    }

    #[test]
    fn rejects_a_renewal_when_the_ca_has_no_time_left() {
        let now = 1_000 * DAY;
        let e = renewed_not_after(now, 30 * DAY, 825, now, now, 0).unwrap_err();
        assert_eq!(e.key, ErrorKey::Forbidden);
    }
}
