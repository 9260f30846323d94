//! The public CA material: CRLs and CA certificates.

use crate::clock::{from_unix, unix_now};
use crate::error::{ApiError, ErrorKey};
use crate::state::SharedState;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};

/// How long a CRL is valid: its nextUpdate is this long after thisUpdate.
const CRL_VALIDITY_SECS: i64 = 24 * 3600;

fn ca_not_found(name: &str) -> ApiError {
    ApiError::detail(ErrorKey::CaNotFound, format!("ca: {name:?}"))
}

/// CRLs are public, like the certificates they cover.
pub(super) async fn crl(
    State(state): State<SharedState>,
    Path(ca_name): Path<String>,
) -> Result<Response, ApiError> {
    let ca_name = ca_name.trim_end_matches(".crl").to_string();
    let cas = state.cas();
    if ca_name == "root" && cas.hierarchy.root_is_offline() {
        return offline_root_crl(&state).await;
    }
    let ca = cas
        .hierarchy
        .ca(&ca_name)
        .ok_or_else(|| ca_not_found(&ca_name))?
        .clone();
    let now = unix_now();
    let rows = state.store.certs().list_revoked(&ca_name, now).await?;
    let entries: Vec<warrant_ca::RevokedEntry<'_>> = rows
        .iter()
        .map(|r| warrant_ca::RevokedEntry {
            serial_hex: &r.serial,
            revoked_at: from_unix(r.revoked_at),
            reason: r
                .reason
                .as_deref()
                .and_then(|s| s.parse().ok())
                .unwrap_or(warrant_ca::RevocationReason::Unspecified),
        })
        .collect();
    let der = warrant_ca::build_crl(
        &ca,
        &entries,
        from_unix(now),
        from_unix(now + CRL_VALIDITY_SECS),
        state.next_crl_number(),
    )?;
    Ok(([(header::CONTENT_TYPE, "application/pkix-crl")], der).into_response())
}

/// An offline root's CRL: the file the offline machine signed
/// (`warrant ca root-crl`), copied to `ca/root.crl`, served as it is.
async fn offline_root_crl(state: &SharedState) -> Result<Response, ApiError> {
    let path = warrant_ca::root_crl_path(&state.config.data_dir);
    match tokio::fs::read(&path).await {
        Ok(der) => Ok(([(header::CONTENT_TYPE, "application/pkix-crl")], der).into_response()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ca_not_found("root")),
        Err(e) => Err(crate::error::internal(format!("{}: {e}", path.display()))),
    }
}

/// CA certificates (PEM): `root`, or an issuing CA's name. For the first
/// CA of a family that was rotated, the bundle of every generation, first
/// CA first: what relying parties trust for it across the rotation. A later
/// generation's name gives its certificate alone.
pub(super) async fn ca_cert(
    State(state): State<SharedState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let cas = state.cas();
    let h = &cas.hierarchy;
    let body = if name == "root" {
        h.root_cert_pem().to_string()
    } else if h.ca(&name).is_some() && h.family_of(&name) == name {
        h.family(&name).iter().map(|ca| ca.cert_pem()).collect()
    } else {
        h.ca(&name)
            .ok_or_else(|| ca_not_found(&name))?
            .cert_pem()
            .to_string()
    };
    Ok(([(header::CONTENT_TYPE, "application/x-pem-file")], body).into_response())
}
