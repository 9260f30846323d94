//! Operator certificates (`POST /api/v1/users/{id}/operator-cert`), as
//! typed stages:
//!
//! ```text
//! OperatorRequest::parse → OperatorRequest ─sign→ Signed ─commit→ IssueResponse
//! ```

use super::key::KeySource;
use super::leaf::{Issuer, RecordNames, Signed, StoredDer, Unsigned};
use super::request::OperatorCertRequest;
use super::response::IssueResponse;
use crate::error::ApiError;
use crate::state::{AppState, CaSet};
use warrant_ca::{Profile, Subject};

/// An operator certificate issued *for* `user`. It is a `tls-client`
/// certificate named after the user, carries no PA and no principal UID (it
/// cannot delegate to agents), and its row records the user: presented over
/// mTLS it acts as that user, with the user's current role. It is written
/// directly, not through the issuance queue, because the binding column
/// belongs to this path only.
pub async fn issue_operator_cert<'a>(
    state: &'a AppState,
    cas: &'a CaSet,
    user_id: i64,
    username: &str,
    req: OperatorCertRequest,
) -> Result<IssueResponse<'a>, ApiError> {
    let now = crate::clock::unix_now();
    let request = OperatorRequest::parse(state, cas, username, &req, now)?;
    let signed = request.sign(state).await?;
    commit(state, signed, user_id).await
}

/// Every field parsed and bounded. No IO.
struct OperatorRequest<'a> {
    leaf: Unsigned<'a>,
    key: KeySource,
}

impl<'a> OperatorRequest<'a> {
    fn parse(
        state: &'a AppState,
        cas: &'a CaSet,
        username: &str,
        req: &OperatorCertRequest,
        now: i64,
    ) -> Result<Self, ApiError> {
        let issuer = Issuer::resolve(cas, None, now)?;
        let iss = &state.config.config.issuance;
        let subject = Subject::for_request(None, username, &iss.default_org, &iss.default_country)?;
        let secs = issuer.leaf_validity_secs(iss, req.validity, now)?;
        let key = KeySource::parse(req.csr_pem.as_deref(), req.key_type.as_deref())?;
        let leaf = Unsigned {
            issuer,
            profile: Profile::TlsClient,
            subject,
            san: Vec::new(),
            extensions: Vec::new(),
            not_before: now,
            not_after: now.saturating_add(secs as i64),
            names: RecordNames::plain(username),
        };
        Ok(OperatorRequest { leaf, key })
    }

    /// The key (generated only now), then the certificate.
    async fn sign(self, state: &AppState) -> Result<Signed<'a>, ApiError> {
        let key = self.key.into_key(state).await?;
        self.leaf.sign(key)
    }
}

/// Stores the row with its user binding, then answers.
async fn commit<'a>(
    state: &AppState,
    signed: Signed<'a>,
    user_id: i64,
) -> Result<IssueResponse<'a>, ApiError> {
    let (record, pending) = signed.into_parts(StoredDer::Keep);
    state
        .store
        .certs()
        .insert_bound_cert(&record, user_id)
        .await?;
    Ok(pending.committed())
}
