//! The JWT-bearer grant (RFC 7523 §2.1) of `POST /oauth/token`: a DA JWT
//! signed by a person becomes an AIC-JWT signed by this server.
//!
//! The checks and their order are agent-certificate issuance's (ca.md §4),
//! on the DA JWT instead of the DER DA:
//!
//! 1. the request is a form with `grant_type` and `assertion`; the DA JWT
//!    parses and keeps its own rules (`aic::jwt::check_da_claims`); a DPoP
//!    proof, when sent, is valid for this endpoint;
//! 2. the principal certificate (`x5c` in the DA header, or the
//!    `principal_cert` field) chains to the root, is valid, has a record
//!    that is not revoked, and the DA's principal is that record's UID;
//! 3. the DA signature verifies once, under that certificate's key; its
//!    `aud`, when present, names this issuer; its key binding (`ver` 3)
//!    names the key the token will be bound to;
//! 4. freshness, as for a DER DA;
//! 5. policy from the principal certificate's PA, and the per-principal
//!    rate;
//! 6. the nonce, through the same ledger and the same durable commit as
//!    certificates, so one DA buys one certificate or one token, once;
//! 7. the token is signed, its nonce committed, and only then answered.
//!
//! The assertion is the credential: RFC 7523 needs no client
//! authentication, and the person's signature over a fresh, single-use
//! delegation is a stronger one than an API token would be.

use aic::jwt::dpop::{DpopExpectation, verify_dpop_proof};
use aic::jwt::{
    CapabilityClaim, DA_TYP, DaClaims, JwsHeader, KeyHashAlg, OUTER_TYP, OuterClaims,
    OuterTokenRequest, jws, key_hash, spki_from_jwk,
};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde::Serialize;
use warrant_store::{IssuanceRecord, NonceRow};

use crate::clock;
use crate::error::{ApiError, ErrorKey, principal_untrusted as untrusted};
use crate::issuance::{certificate_pa, recorded_principal_uid};
use crate::limits::PrincipalKey;
use crate::policy::{self, cap_refs};
use crate::state::AppState;

pub const GRANT_TYPE_JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// Longest accepted DA JWT. A DA with the largest capability lists `aic.md`
/// allows stays well below it; the body limit (1 MiB) is far above.
pub const MAX_ASSERTION_LEN: usize = 64 * 1024;
/// Most `resource` parameters (RFC 8707) one request may name.
pub const MAX_RESOURCES: usize = 8;
const MAX_RESOURCE_LEN: usize = 512;
/// Future skew allowed on a DPoP proof's `iat`.
const DPOP_SKEW_SECS: i64 = 60;

/// The `error` of an RFC 6749 §5.2 answer (and RFC 9449 §5's
/// `invalid_dpop_proof`, RFC 8707's `invalid_target`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OAuthErrorCode {
    InvalidRequest,
    InvalidGrant,
    UnsupportedGrantType,
    InvalidDpopProof,
    InvalidTarget,
    /// 429 / 503: try again later (`Retry-After`).
    TemporarilyUnavailable,
    ServerError,
}

impl OAuthErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            OAuthErrorCode::InvalidRequest => "invalid_request",
            OAuthErrorCode::InvalidGrant => "invalid_grant",
            OAuthErrorCode::UnsupportedGrantType => "unsupported_grant_type",
            OAuthErrorCode::InvalidDpopProof => "invalid_dpop_proof",
            OAuthErrorCode::InvalidTarget => "invalid_target",
            OAuthErrorCode::TemporarilyUnavailable => "temporarily_unavailable",
            OAuthErrorCode::ServerError => "server_error",
        }
    }
}

/// A refused grant: its OAuth code, and the API error behind it (its key
/// feeds the rejection metrics and names the cause for the client).
#[derive(Debug, Clone)]
pub struct GrantError {
    pub code: OAuthErrorCode,
    pub api: ApiError,
}

impl GrantError {
    fn request(detail: impl Into<String>) -> GrantError {
        GrantError {
            code: OAuthErrorCode::InvalidRequest,
            api: ApiError::detail(ErrorKey::InvalidField, detail),
        }
    }

    fn grant(key: ErrorKey, detail: impl Into<String>) -> GrantError {
        GrantError {
            code: OAuthErrorCode::InvalidGrant,
            api: ApiError::detail(key, detail),
        }
    }

    fn dpop(detail: impl Into<String>) -> GrantError {
        GrantError {
            code: OAuthErrorCode::InvalidDpopProof,
            api: ApiError::detail(ErrorKey::InvalidField, detail),
        }
    }
}

/// The API errors of the shared checks, in OAuth's terms, read from the
/// status each key already has: a request that cannot be read (400, 408,
/// 413, 415) is `invalid_request`, a delegation that does not hold (403) is
/// `invalid_grant`, back-pressure (429, 503) is `temporarily_unavailable`.
impl From<ApiError> for GrantError {
    fn from(api: ApiError) -> GrantError {
        let code = match api.key.status() {
            StatusCode::BAD_REQUEST
            | StatusCode::REQUEST_TIMEOUT
            | StatusCode::PAYLOAD_TOO_LARGE
            | StatusCode::UNSUPPORTED_MEDIA_TYPE => OAuthErrorCode::InvalidRequest,
            StatusCode::FORBIDDEN => OAuthErrorCode::InvalidGrant,
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
                OAuthErrorCode::TemporarilyUnavailable
            }
            _ => OAuthErrorCode::ServerError,
        };
        GrantError { code, api }
    }
}

macro_rules! from_via_api {
    ($($t:ty),*) => {$(
        impl From<$t> for GrantError {
            fn from(e: $t) -> GrantError {
                GrantError::from(ApiError::from(e))
            }
        }
    )*};
}
from_via_api!(
    warrant_store::WriteError,
    warrant_store::NonceError,
    warrant_store::StoreError,
    warrant_ca::PrincipalCertError,
    crate::policy::PolicyError
);

/// RFC 6749 §5.2's body, with the API error key beside it.
#[derive(Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct OAuthErrorBody {
    pub error: String,
    pub error_description: String,
    /// The Warrant error key (`api.da_nonce_replayed`, …).
    pub error_key: String,
}

impl IntoResponse for GrantError {
    fn into_response(self) -> Response {
        let status = match self.code {
            OAuthErrorCode::TemporarilyUnavailable | OAuthErrorCode::ServerError => {
                self.api.key.status()
            }
            _ => StatusCode::BAD_REQUEST,
        };
        let (body, request_id) = self.api.public_body();
        let oauth = OAuthErrorBody {
            error: self.code.as_str().into(),
            error_description: if body.detail.is_empty() {
                body.message.clone()
            } else {
                body.detail
            },
            error_key: body.message,
        };
        let mut resp = (status, axum::Json(oauth)).into_response();
        resp.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        self.api.decorate(&mut resp, request_id);
        resp
    }
}

/// `token_type` of the answer: `DPoP` when the request proved possession
/// of the key with a DPoP proof (RFC 9449 §5), else `Bearer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenType {
    Bearer,
    Dpop,
}

impl TokenType {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenType::Bearer => "Bearer",
            TokenType::Dpop => "DPoP",
        }
    }
}

/// RFC 6749 §5.1's answer.
#[derive(Debug, Serialize)]
pub struct TokenResponse {
    pub access_token: String,
    pub token_type: &'static str,
    pub expires_in: i64,
}

/// Step 1's input: the form's parameters, parsed and bounded, with the
/// request's `DPoP` header and the URL a proof must name. No IO.
#[derive(Debug)]
pub struct TokenGrant {
    assertion: String,
    principal_cert: Option<String>,
    agent_jwk: Option<serde_json::Value>,
    resources: Vec<String>,
    dpop: Option<String>,
    endpoint_url: String,
}

fn set_once(slot: &mut Option<String>, name: &str, value: String) -> Result<(), GrantError> {
    if slot.replace(value).is_some() {
        return Err(GrantError::request(format!("{name}: sent more than once")));
    }
    Ok(())
}

impl TokenGrant {
    /// Reads an `application/x-www-form-urlencoded` body. Parameters this
    /// endpoint does not know are ignored (RFC 6749 §3.2); a known one sent
    /// twice is refused.
    pub fn parse(
        form: &[u8],
        dpop: Option<String>,
        endpoint_url: String,
    ) -> Result<TokenGrant, GrantError> {
        let (mut grant_type, mut assertion, mut principal_cert, mut agent_jwk) =
            (None, None, None, None);
        let mut resources = Vec::new();
        for (name, value) in form_urlencoded::parse(form) {
            let value = value.into_owned();
            match name.as_ref() {
                "grant_type" => set_once(&mut grant_type, "grant_type", value)?,
                "assertion" => set_once(&mut assertion, "assertion", value)?,
                "principal_cert" => set_once(&mut principal_cert, "principal_cert", value)?,
                "agent_jwk" => set_once(&mut agent_jwk, "agent_jwk", value)?,
                "resource" => resources.push(value),
                _ => {}
            }
        }
        match grant_type.as_deref() {
            None => return Err(GrantError::request("grant_type: required")),
            Some(GRANT_TYPE_JWT_BEARER) => {}
            Some(other) => {
                return Err(GrantError {
                    code: OAuthErrorCode::UnsupportedGrantType,
                    api: ApiError::field(
                        "grant_type",
                        format!("{other:?}: only {GRANT_TYPE_JWT_BEARER} is supported"),
                    ),
                });
            }
        }
        let assertion = assertion
            .filter(|a| !a.is_empty())
            .ok_or_else(|| GrantError::request("assertion: required (the DA JWT)"))?;
        if assertion.len() > MAX_ASSERTION_LEN {
            return Err(GrantError::request(format!(
                "assertion: longer than {MAX_ASSERTION_LEN} bytes"
            )));
        }
        if principal_cert
            .as_ref()
            .is_some_and(|p| p.len() > warrant_ca::MAX_PRINCIPAL_CERT_LEN)
        {
            return Err(GrantError::request(format!(
                "principal_cert: longer than {} bytes",
                warrant_ca::MAX_PRINCIPAL_CERT_LEN
            )));
        }
        let agent_jwk = agent_jwk
            .map(|j| {
                serde_json::from_str(&j)
                    .map_err(|e| GrantError::request(format!("agent_jwk: not JSON: {e}")))
            })
            .transpose()?;
        if agent_jwk.is_some() && dpop.is_some() {
            return Err(GrantError::request(
                "agent_jwk: not with a DPoP proof, which names the key itself",
            ));
        }
        if resources.len() > MAX_RESOURCES
            || resources.iter().any(|r| {
                r.len() > MAX_RESOURCE_LEN
                    || !r.contains("://")
                    || r.contains('#')
                    || r.contains(char::is_whitespace)
            })
        {
            return Err(GrantError {
                code: OAuthErrorCode::InvalidTarget,
                api: ApiError::field(
                    "resource",
                    format!(
                        "at most {MAX_RESOURCES} absolute URIs without fragment, \
                         of at most {MAX_RESOURCE_LEN} bytes"
                    ),
                ),
            });
        }
        Ok(TokenGrant {
            assertion,
            principal_cert,
            agent_jwk,
            resources,
            dpop,
            endpoint_url,
        })
    }

    /// The principal certificate: `x5c[0]` of the DA header, or the
    /// `principal_cert` field (PEM or base64 DER). Both may be sent only if
    /// they are the same certificate.
    fn principal_cert(&self, header: &JwsHeader) -> Result<Vec<u8>, GrantError> {
        let from_header = header
            .x5c
            .as_ref()
            .map(|chain| {
                let first = chain
                    .first()
                    .ok_or_else(|| GrantError::request("assertion: x5c is empty"))?;
                if first.len() > warrant_ca::MAX_PRINCIPAL_CERT_LEN {
                    return Err(GrantError::request("assertion: x5c[0] is too long"));
                }
                STANDARD
                    .decode(first)
                    .map_err(|_| GrantError::request("assertion: x5c[0] is not base64"))
            })
            .transpose()?;
        let from_field = self
            .principal_cert
            .as_deref()
            .map(|text| {
                let text = text.trim();
                if text.starts_with("-----BEGIN") {
                    warrant_ca::certificate_der(text.as_bytes())
                        .map_err(|e| GrantError::request(format!("principal_cert: {e}")))
                } else {
                    STANDARD.decode(text).map_err(|_| {
                        GrantError::request("principal_cert: neither PEM nor base64 DER")
                    })
                }
            })
            .transpose()?;
        match (from_header, from_field) {
            (Some(a), Some(b)) if a != b => Err(GrantError::request(
                "principal_cert: differs from the DA header's x5c[0]",
            )),
            (Some(der), _) | (None, Some(der)) => Ok(der),
            (None, None) => Err(GrantError::request(
                "principal_cert: required (or x5c in the DA header)",
            )),
        }
    }
}

/// Redeems a grant: every check of the module comment, in its order.
pub async fn redeem(state: &AppState, grant: TokenGrant) -> Result<TokenResponse, GrantError> {
    let now_time = clock::system_now();
    let now = clock::unix(now_time);
    let cfg = &state.config.config;
    let iss = &cfg.issuance;

    // 1. The DA JWT's form and its own rules; a DPoP proof for this endpoint.
    let da_jws = jws::parse(&grant.assertion, DA_TYP, false)
        .map_err(|e| GrantError::request(format!("assertion: {e}")))?;
    let da: DaClaims = serde_json::from_slice(&da_jws.payload)
        .map_err(|e| GrantError::request(format!("assertion: claims: {e}")))?;
    let nonce = aic::jwt::check_da_claims(&da)
        .map_err(|e| GrantError::grant(ErrorKey::InvalidField, format!("assertion: {e}")))?;
    let dpop = grant
        .dpop
        .as_deref()
        .map(|proof| {
            verify_dpop_proof(
                proof,
                &DpopExpectation {
                    htm: "POST",
                    htu: &grant.endpoint_url,
                    now,
                    max_age_secs: cfg.token.dpop_max_age.0.as_secs().max(1) as i64,
                    skew_secs: DPOP_SKEW_SECS,
                },
            )
            .map_err(|e| GrantError::dpop(e.to_string()))
        })
        .transpose()?;

    // 2. The principal certificate and its record.
    let der = grant.principal_cert(&da_jws.header)?;
    let cert = warrant_ca::verify_principal_cert(&der, &state.cas().hierarchy, now_time)?;
    if cert.is_agent() {
        return Err(untrusted("an agent certificate cannot be a principal").into());
    }
    let canonical = recorded_principal_uid(state, &cert).await?;
    check_principal_claim(&da.principal, &canonical, &cert.spki_der)?;
    let cert_pa = certificate_pa(&cert)?;

    // 3. The DA signature, once; its audience; the key the token binds.
    da_jws.verify(&cert.spki_der).map_err(|e| {
        GrantError::grant(
            ErrorKey::DelegationSignatureInvalid,
            format!("assertion: principal signature: {e}"),
        )
    })?;
    let issuer = state.tokens.issuer();
    if da.aud.as_ref().is_some_and(|a| !a.contains(issuer)) {
        return Err(GrantError::grant(
            ErrorKey::Forbidden,
            format!("assertion: aud does not name this issuer ({issuer})"),
        ));
    }
    let (jkt, token_type) = bound_key(&grant, &da, dpop)?;

    // 4. Freshness.
    let lifetime = da.requested_lifetime as u64;
    policy::check_freshness(now, da.ts, iss.da_max_timestamp_skew, lifetime)?;

    // 5. Policy from the principal certificate's PA; the principal's rate.
    let view = policy::policy_view(cert_pa.as_ref().and_then(|p| p.delegation_policy.as_ref()));
    let mode = match da.delegation_mode {
        aic::DelegationMode::Authorized => policy::MODE_AUTHORIZED,
        aic::DelegationMode::Representative => policy::MODE_REPRESENTATIVE,
    };
    policy::check_delegation_mode(mode, &view)?;
    check_capabilities(&da.capabilities, cert_pa.as_ref())?;
    state
        .limits
        .check_principal(PrincipalKey::Delegator(canonical.clone()))?;
    let claims = OuterClaims::wrap(
        &OuterTokenRequest {
            issuer: issuer.to_string(),
            audience: if grant.resources.is_empty() {
                cfg.token.default_audience.clone()
            } else {
                grant.resources.clone()
            },
            iat: now,
            lifetime: policy::token_lifetime_secs(
                cfg.token.max_lifetime.0.as_secs(),
                view.max_session_hours,
            ),
            cnf_jkt: Some(jkt),
            chain_depth: 0,
            max_depth: Some(1),
            added_constraints: cert_pa
                .as_ref()
                .map(|pa| {
                    pa.constraints
                        .iter()
                        .map(CapabilityClaim::from_capability)
                        .collect()
                })
                .unwrap_or_default(),
        },
        &grant.assertion,
        &da,
    );
    if claims.exp <= now {
        return Err(policy::PolicyError::DelegationEndsBeforeStart.into());
    }

    // 6. The nonce, held until the commit decides.
    let nonce_expires = policy::nonce_expiry(
        da.ts,
        iss.da_max_timestamp_skew,
        iss.nonce_retention_buffer,
        policy::effective_da_lifetime(lifetime),
    );
    let reservation = state
        .store
        .issuance()
        .reserve_nonce(&nonce, nonce_expires, now)?;

    // 7. Sign, commit the nonce durably, answer.
    let key = state.tokens.signing_key(now)?;
    let header = JwsHeader {
        alg: key.alg().name().into(),
        kid: Some(key.kid().into()),
        typ: Some(OUTER_TYP.into()),
        crit: None,
        x5c: None,
        jwk: None,
    };
    let value = serde_json::to_value(&claims)
        .map_err(|e| crate::error::internal(format!("encoding the token: {e}")))?;
    let access_token = jws::sign_with(&header, &value, |input| {
        key.sign(input)
            .map_err(|e| aic::jwt::JwsError::Signing(e.to_string()))
    })
    .map_err(|e| crate::error::internal(format!("signing the token: {e}")))?;
    // The record carries the nonce on: `submit` keeps it consumed once the
    // database holds it and releases it on any other outcome.
    reservation.hand_over();
    state
        .store
        .issuance()
        .submit(
            IssuanceRecord::nonce_only(NonceRow {
                nonce,
                expires_at: nonce_expires,
                principal_uid: canonical.clone(),
            })
            .with_audit(
                crate::audit::Entry::new(crate::audit::EventKind::Jwt, "")
                    .principal(&canonical)
                    .agent(&claims.sub)
                    .detail("token_type", token_type.as_str())
                    .detail("expires_in", claims.exp - now)
                    .build(),
            ),
        )
        .await?;
    crate::metrics::token_issued(token_type.as_str());
    Ok(TokenResponse {
        access_token,
        token_type: token_type.as_str(),
        expires_in: claims.exp - now,
    })
}

/// The DA's principal is the certificate's recorded UID (realm and id), and
/// its `key_hash` names the certificate's key, as does the record's.
fn check_principal_claim(
    claim: &aic::jwt::PrincipalClaim,
    canonical: &str,
    spki_der: &[u8],
) -> Result<(), GrantError> {
    let recorded = aic::PrincipalUid::parse(canonical)
        .map_err(|e| untrusted(format!("recorded principal_uid is unreadable: {e}")))?;
    if claim.realm != recorded.realm || claim.id != recorded.identifier {
        return Err(untrusted(format!(
            "assertion: principal {}:{} is not the principal certificate's ({canonical})",
            claim.realm, claim.id
        ))
        .into());
    }
    let alg = KeyHashAlg::from_name(&claim.hash_alg).ok_or_else(|| {
        GrantError::request(format!(
            "assertion: principal.hash_alg {:?} (expected sha-256 or jkt)",
            claim.hash_alg
        ))
    })?;
    let expected = key_hash(spki_der, alg).map_err(|e| untrusted(e.to_string()))?;
    if claim.key_hash != expected || !aic::key_hash_matches(&recorded, spki_der) {
        return Err(untrusted(
            "assertion: principal.key_hash does not match the principal certificate's key",
        )
        .into());
    }
    Ok(())
}

/// `cnf.jkt` and the token type. A DPoP proof's key, which must be the key
/// a `ver` 3 DA binds; else the binding itself: an RFC 7638 thumbprint
/// (`hash_alg: "jkt"`) as it stands, a SHA-256 of the SPKI with the key
/// sent as `agent_jwk`. A `ver` 2 DA binds nothing, so it needs a proof.
fn bound_key(
    grant: &TokenGrant,
    da: &DaClaims,
    dpop: Option<aic::jwt::dpop::DpopProof>,
) -> Result<(String, TokenType), GrantError> {
    let binding = da.agent_key_binding.as_ref();
    let binding_alg = binding
        .map(|b| {
            KeyHashAlg::from_name(&b.hash_alg).ok_or_else(|| {
                GrantError::grant(
                    ErrorKey::InvalidField,
                    format!("assertion: agent_key_binding.hash_alg {:?}", b.hash_alg),
                )
            })
        })
        .transpose()?;
    let matches_binding = |spki: &[u8]| -> Result<bool, GrantError> {
        match (binding, binding_alg) {
            (Some(b), Some(alg)) => Ok(key_hash(spki, alg)
                .map_err(|e| GrantError::request(format!("agent key: {e}")))?
                == b.key_hash),
            _ => Ok(true),
        }
    };
    if let Some(proof) = dpop {
        if !matches_binding(&proof.spki_der)? {
            return Err(GrantError::grant(
                ErrorKey::DelegationSignatureInvalid,
                "DPoP: the proof's key is not the agent key the DA binds",
            ));
        }
        return Ok((proof.jkt, TokenType::Dpop));
    }
    let (Some(b), Some(alg)) = (binding, binding_alg) else {
        return Err(GrantError::request(
            "DPoP: required: a ver 2 DA binds no agent key, so the request must prove one",
        ));
    };
    match alg {
        KeyHashAlg::Jkt => {
            let ok = URL_SAFE_NO_PAD
                .decode(&b.key_hash)
                .is_ok_and(|h| h.len() == 32);
            if !ok {
                return Err(GrantError::grant(
                    ErrorKey::InvalidField,
                    "assertion: agent_key_binding.key_hash is not a SHA-256 thumbprint",
                ));
            }
            Ok((b.key_hash.clone(), TokenType::Bearer))
        }
        KeyHashAlg::Sha256 => {
            let jwk = grant.agent_jwk.as_ref().ok_or_else(|| {
                GrantError::request(
                    "agent_jwk: required with a SHA-256 agent_key_binding and no DPoP proof \
                     (the thumbprint cannot be derived from the hash)",
                )
            })?;
            let spki =
                spki_from_jwk(jwk).map_err(|e| GrantError::request(format!("agent_jwk: {e}")))?;
            if !matches_binding(&spki)? {
                return Err(GrantError::grant(
                    ErrorKey::DelegationSignatureInvalid,
                    "agent_jwk: not the agent key the DA binds",
                ));
            }
            let jkt = aic::jwt::jwk_thumbprint(&spki)
                .map_err(|e| GrantError::request(format!("agent_jwk: {e}")))?;
            Ok((jkt, TokenType::Bearer))
        }
    }
}

/// Every delegated capability is granted by the principal certificate's PA
/// (the rule of certificates: scheme and id equal, and the grant's
/// parameters open or equal). Parameters are compared as JSON values, so
/// the DA JWT's JSON and the PA's bytes may differ in spacing and order.
fn check_capabilities(
    requested: &[CapabilityClaim],
    pa: Option<&aic::PrincipalAuthorization>,
) -> Result<(), GrantError> {
    let canonical = |c: &CapabilityClaim| c.to_capability();
    let grants: Vec<aic::Capability> = pa
        .map(|pa| {
            pa.grants
                .iter()
                .map(|g| canonical(&CapabilityClaim::from_capability(g)))
                .collect()
        })
        .unwrap_or_default();
    let requested: Vec<aic::Capability> = requested.iter().map(canonical).collect();
    policy::check_capabilities_granted(&cap_refs(&requested), &cap_refs(&grants))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> Vec<u8> {
        form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs)
            .finish()
            .into_bytes()
    }

    fn parse(pairs: &[(&str, &str)]) -> Result<TokenGrant, GrantError> {
        TokenGrant::parse(&form(pairs), None, "https://ca/oauth/token".into())
    }

    #[test]
    fn rejects_a_grant_without_grant_type_or_assertion() {
        let e = parse(&[("assertion", "a.b.c")]).unwrap_err();
        assert_eq!(e.code, OAuthErrorCode::InvalidRequest);
        let e = parse(&[("grant_type", GRANT_TYPE_JWT_BEARER)]).unwrap_err();
        assert_eq!(e.code, OAuthErrorCode::InvalidRequest);
        assert!(e.api.to_string().contains("assertion"), "{}", e.api);
    }

    #[test]
    fn rejects_another_grant_type() {
        let e = parse(&[("grant_type", "client_credentials"), ("assertion", "x")]).unwrap_err();
        assert_eq!(e.code, OAuthErrorCode::UnsupportedGrantType);
    }

    #[test]
    fn rejects_a_parameter_sent_twice() {
        let e = parse(&[
            ("grant_type", GRANT_TYPE_JWT_BEARER),
            ("assertion", "a"),
            ("assertion", "b"),
        ])
        .unwrap_err();
        assert_eq!(e.code, OAuthErrorCode::InvalidRequest);
        assert!(e.api.to_string().contains("more than once"));
    }

    #[test]
    fn rejects_a_resource_that_is_not_an_absolute_uri() {
        let e = parse(&[
            ("grant_type", GRANT_TYPE_JWT_BEARER),
            ("assertion", "a"),
            ("resource", "gateway"),
        ])
        .unwrap_err();
        assert_eq!(e.code, OAuthErrorCode::InvalidTarget);
    }

    #[test]
    fn unknown_parameters_are_ignored_and_resources_kept() {
        let g = parse(&[
            ("grant_type", GRANT_TYPE_JWT_BEARER),
            ("assertion", "a.b.c"),
            ("scope", "x"),
            ("resource", "https://gw.example/"),
            ("resource", "https://gw2.example/"),
        ])
        .unwrap();
        assert_eq!(g.resources.len(), 2);
    }
}
