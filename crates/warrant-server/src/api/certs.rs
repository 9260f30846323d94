//! `/api/v1/certs…` and `/api/v1/cert/…`: issuing, listing, reading and
//! revoking certificates.

use crate::audit::{Entry, EventKind};
use crate::auth::{Caller, Permission};
use crate::clock::{rfc3339, unix_now};
use crate::error::{ApiError, ErrorKey};
use crate::extract::ApiJson;
use crate::issuance::{self, IssueRequest};
use crate::state::{AppState, SharedState};
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use warrant_store::{CertFilter, CertRecord, CertStatus};

pub(super) async fn issue_cert(
    State(state): State<SharedState>,
    caller: Caller,
    ApiJson(req): ApiJson<IssueRequest>,
) -> Result<Response, ApiError> {
    let _in_flight = state.limits.admit_issuance()?;
    let cas = state.cas();
    issuance::issue(&state, &cas, &caller, req)
        .await
        .map(IntoResponse::into_response)
}

/// `POST /api/v1/certs/renew`: see `issuance::renew`.
pub(super) async fn renew_cert(
    State(state): State<SharedState>,
    presented: Option<axum::Extension<crate::conn::ClientCert>>,
    caller: Result<Caller, ApiError>,
    ApiJson(req): ApiJson<issuance::RenewRequest>,
) -> Result<Response, ApiError> {
    // A renewal refused at authentication (a revoked, unknown or untrusted
    // certificate) is a refusal of the renewal, and the log records it.
    let caller = caller.inspect_err(|e| {
        let actor = match &presented {
            Some(axum::Extension(c)) => {
                match warrant_ca::verify_principal_cert(
                    &c.0,
                    &state.cas().hierarchy,
                    crate::clock::system_now(),
                ) {
                    Ok(cert) => format!("certificate:{}", cert.serial_hex),
                    Err(_) => "certificate:untrusted".to_string(),
                }
            }
            None => String::new(),
        };
        crate::audit::refused(
            &state,
            actor,
            e,
            crate::audit::Claimed {
                profile: Some("renew".into()),
                ..Default::default()
            },
        );
    })?;
    let _in_flight = state.limits.admit_issuance()?;
    let cas = state.cas();
    issuance::renew(&state, &cas, &caller, req)
        .await
        .map(IntoResponse::into_response)
}

#[derive(Serialize)]
struct CertJson {
    serial_number: String,
    ca: String,
    common_name: String,
    profile: String,
    status: &'static str,
    not_before: String,
    not_after: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    principal_uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    revoked_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    revocation_reason: Option<String>,
    /// Agents: the capabilities the certificate carries (a JSON array).
    #[serde(skip_serializing_if = "Option::is_none")]
    capabilities: Option<serde_json::Value>,
    /// Absent when the row kept no DER (`der_dropped`).
    #[serde(skip_serializing_if = "Option::is_none")]
    cert_pem: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    der_dropped: bool,
}

fn cert_json(r: &CertRecord) -> CertJson {
    CertJson {
        serial_number: r.serial.clone(),
        ca: r.ca.clone(),
        common_name: r.common_name.clone(),
        profile: r.profile.clone(),
        status: r.status.as_str(),
        not_before: rfc3339(r.not_before),
        not_after: rfc3339(r.not_after),
        principal_uid: r.principal_uid.clone(),
        agent_id: r.agent_id.clone(),
        revoked_at: r.revoked_at.map(rfc3339),
        revocation_reason: r.revocation_reason.clone(),
        capabilities: r
            .capabilities
            .as_deref()
            .and_then(crate::issuance::stored_capabilities)
            .and_then(|caps| serde_json::to_value(caps).ok()),
        cert_pem: (!r.der_dropped()).then(|| pem("CERTIFICATE", &r.der)),
        der_dropped: r.der_dropped(),
    }
}

pub fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[derive(Deserialize)]
pub(super) struct ListQuery {
    ca: Option<String>,
    status: Option<String>,
    cn: Option<String>,
    principal_uid: Option<String>,
    profile: Option<String>,
    limit: Option<String>,
    offset: Option<String>,
}

impl ListQuery {
    /// The store's filter; empty parameters are absent ones.
    fn filter(self) -> Result<CertFilter, ApiError> {
        let status = given(self.status)
            .map(|s| {
                s.parse::<CertStatus>()
                    .map_err(|_| ApiError::field("status", "expected V or R"))
            })
            .transpose()?;
        let limit: u32 = count("limit", self.limit)?.unwrap_or(100);
        Ok(CertFilter {
            ca: given(self.ca),
            status,
            common_name: given(self.cn),
            principal_uid: given(self.principal_uid),
            profile: given(self.profile),
            limit: limit.min(warrant_store::MAX_LIST_LIMIT),
            offset: count("offset", self.offset)?.unwrap_or(0),
        })
    }
}

/// A query parameter, absent when empty.
fn given(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
}

/// A non-negative integer query parameter.
fn count<T: std::str::FromStr>(field: &str, v: Option<String>) -> Result<Option<T>, ApiError> {
    given(v)
        .map(|s| {
            s.parse()
                .map_err(|_| ApiError::field(field, "not a non-negative integer"))
        })
        .transpose()
}

pub(super) async fn list_certs(
    State(state): State<SharedState>,
    caller: Caller,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Permission::CertRead)?;
    let Query(q) = query.map_err(|e| ApiError::field("query", e.body_text()))?;
    let filter = q.filter()?;
    let rows = state.store.certs().list_certs(&filter).await?;
    let certs: Vec<CertJson> = rows.iter().map(cert_json).collect();
    Ok(Json(
        json!({"certificates": certs, "count": certs.len(), "limit": filter.limit, "offset": filter.offset}),
    ))
}

fn cert_not_found() -> ApiError {
    ApiError::detail(ErrorKey::NotFound, "certificate not found")
}

async fn find_cert(state: &AppState, ca: &str, serial: &str) -> Result<CertRecord, ApiError> {
    if state.cas().hierarchy.ca(ca).is_none() {
        return Err(ApiError::detail(
            ErrorKey::CaNotFound,
            format!("ca: {ca:?}"),
        ));
    }
    let serial = serial.to_ascii_uppercase();
    if serial.is_empty() || serial.len() > 64 || !serial.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::field("serial", "must be hexadecimal"));
    }
    state
        .store
        .certs()
        .get_cert(ca, &serial)
        .await?
        .ok_or_else(cert_not_found)
}

pub(super) async fn get_cert(
    State(state): State<SharedState>,
    caller: Caller,
    Path((ca, serial)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    caller.require(Permission::CertRead)?;
    let rec = find_cert(&state, &ca, &serial).await?;
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let wants_der =
        accept.contains("application/pkix-cert") || accept.contains("application/octet-stream");
    let wants_pem = accept.contains("pem") || accept.starts_with("text/plain");
    if (wants_der || wants_pem) && rec.der_dropped() {
        return Err(ApiError::detail(
            ErrorKey::CertDerDropped,
            "this agent certificate was stored without its DER (storage.agent_cert_der = \"drop\"); its metadata is at the same URL as JSON",
        ));
    }
    if wants_der {
        return Ok(([(header::CONTENT_TYPE, "application/pkix-cert")], rec.der).into_response());
    }
    if wants_pem {
        return Ok((
            [(header::CONTENT_TYPE, "application/x-pem-file")],
            pem("CERTIFICATE", &rec.der),
        )
            .into_response());
    }
    Ok(Json(cert_json(&rec)).into_response())
}

#[derive(Deserialize, Default)]
pub(super) struct RevokeRequest {
    #[serde(default)]
    reason: Option<String>,
}

/// RFC 5280 reason names, accepted as `keyCompromise`, `key_compromise` or `KEY-COMPROMISE`.
fn parse_reason(s: Option<&str>) -> Result<warrant_ca::RevocationReason, ApiError> {
    let s = s
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::detail(ErrorKey::ReasonRequired, "reason: required"))?;
    let norm = |x: &str| {
        x.chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase()
    };
    let wanted = norm(s);
    warrant_ca::RevocationReason::ALL
        .into_iter()
        .find(|r| norm(r.as_str()) == wanted)
        .ok_or_else(|| ApiError::field("reason", format!("{s:?} is not an RFC 5280 reason")))
}

pub(super) async fn revoke_cert(
    State(state): State<SharedState>,
    caller: Caller,
    Path((ca, serial)): Path<(String, String)>,
    ApiJson(req): ApiJson<RevokeRequest>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Permission::CertRevoke)?;
    let reason = parse_reason(req.reason.as_deref())?;
    let rec = find_cert(&state, &ca, &serial).await?;
    let outcome = state
        .store
        .certs()
        .revoke_cert(&rec.ca, &rec.serial, reason.as_str(), unix_now())
        .await?
        .ok_or_else(cert_not_found)?;
    state.cas().ocsp.invalidate();
    if !outcome.already_revoked {
        crate::audit::record(
            &state,
            Entry::by(EventKind::Revoke, &caller)
                .of_record(&rec)
                .detail("reason", reason.as_str())
                .detail("cascade_count", outcome.cascade_count),
        )
        .await;
    }
    Ok(Json(json!({
        "serial_number": rec.serial,
        "ca": rec.ca,
        "status": "R",
        "reason": reason.as_str(),
        "already_revoked": outcome.already_revoked,
        "cascade_count": outcome.cascade_count,
    })))
}

#[derive(Deserialize)]
pub(super) struct RevokeByPrincipalRequest {
    principal_uid: String,
    #[serde(default)]
    reason: Option<String>,
}

pub(super) async fn revoke_by_principal(
    State(state): State<SharedState>,
    caller: Caller,
    ApiJson(req): ApiJson<RevokeByPrincipalRequest>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Permission::CertRevoke)?;
    let uid = req.principal_uid.trim();
    if uid.is_empty() || uid.len() > issuance::limits::PRINCIPAL_UID {
        return Err(ApiError::detail(
            ErrorKey::InvalidPrincipalUid,
            "principal_uid: required, at most 512 bytes",
        ));
    }
    aic::PrincipalUid::parse(uid)?;
    let reason = match req.reason.as_deref() {
        None => warrant_ca::RevocationReason::CessationOfOperation,
        Some(r) => parse_reason(Some(r))?,
    };
    let n = state
        .store
        .certs()
        .revoke_by_principal(uid, reason.as_str(), unix_now())
        .await?;
    state.cas().ocsp.invalidate();
    crate::audit::record(
        &state,
        Entry::by(EventKind::Revoke, &caller)
            .principal(uid)
            .detail("reason", reason.as_str())
            .detail("cascade_count", n)
            .detail("by_principal", true),
    )
    .await;
    Ok(Json(
        json!({"principal_uid": uid, "revoked_count": n, "reason": reason.as_str()}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revocation_reasons_accept_common_spellings() {
        assert_eq!(
            parse_reason(Some("keyCompromise")).unwrap().as_str(),
            "keyCompromise"
        );
        assert_eq!(
            parse_reason(Some("key_compromise")).unwrap().as_str(),
            "keyCompromise"
        );
        assert_eq!(
            parse_reason(None).unwrap_err().key,
            ErrorKey::ReasonRequired
        );
        assert_eq!(
            parse_reason(Some("bored")).unwrap_err().key,
            ErrorKey::InvalidField
        );
    }
}
