//! The AIC-JWT issuer over HTTP: `POST /oauth/token` (RFC 7523 JWT-bearer
//! grant, RFC 6749 §5 answers) and `GET /.well-known/jwks.json` (RFC 7517),
//! both public like the CRL and OCSP: the grant's assertion is its own
//! credential (see `crate::token`).

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::clock::unix_now;
use crate::conn::OverTls;
use crate::extract::{read_body, require_content_type};
use crate::state::SharedState;
use crate::token::{GrantError, TokenGrant, redeem};

const FORM: &str = "application/x-www-form-urlencoded";

pub(super) async fn token(State(state): State<SharedState>, req: Request) -> Response {
    match token_inner(&state, req).await {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

async fn token_inner(state: &SharedState, req: Request) -> Result<Response, GrantError> {
    let _in_flight = state.limits.admit_issuance()?;
    let headers = req.headers();
    require_content_type(headers, FORM)?;
    let dpop = dpop_header(headers)?;
    let endpoint = endpoint_url(state, &req);
    let body = read_body(req, state).await?;
    let grant = TokenGrant::parse(&body, dpop, endpoint)?;
    let answer = redeem(state, grant).await?;
    let mut resp = axum::Json(answer).into_response();
    // RFC 6749 §5.1: a token answer is never cached.
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    Ok(resp)
}

/// The one `DPoP` header (RFC 9449 §4.3 step 1: more than one is refused).
fn dpop_header(headers: &HeaderMap) -> Result<Option<String>, GrantError> {
    let mut values = headers.get_all("dpop").iter();
    let (first, second) = (values.next(), values.next());
    if second.is_some() {
        return Err(GrantError::from(crate::error::ApiError::field(
            "DPoP",
            "more than one DPoP header",
        )));
    }
    first
        .map(|v| {
            v.to_str()
                .map(str::to_string)
                .map_err(|_| crate::error::ApiError::field("DPoP", "not ASCII").into())
        })
        .transpose()
}

/// The URL a DPoP proof must name: under the configured public base URL
/// (`ocsp.base_url`) when there is one, else as this request reached us.
fn endpoint_url(state: &SharedState, req: &Request) -> String {
    let base = state
        .config
        .config
        .ocsp
        .base_url
        .trim()
        .trim_end_matches('/');
    if !base.is_empty() {
        return format!("{base}/oauth/token");
    }
    let scheme = if req.extensions().get::<OverTls>().is_some() {
        "https"
    } else {
        "http"
    };
    let host = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| {
            req.headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_string)
        })
        .unwrap_or_default();
    format!("{scheme}://{host}/oauth/token")
}

/// The token keys published now. Relying parties may cache the set for
/// `token.jwks_max_age`; a rotated key is published at least twice that
/// long before it signs.
pub(super) async fn jwks(State(state): State<SharedState>) -> Response {
    match state.tokens.jwks(unix_now()) {
        Ok(set) => {
            let mut resp = axum::Json(set).into_response();
            let max_age = state.config.config.token.jwks_max_age.0.as_secs();
            if let Ok(v) = HeaderValue::from_str(&format!("public, max-age={max_age}")) {
                resp.headers_mut().insert(header::CACHE_CONTROL, v);
            }
            resp
        }
        Err(e) => e.into_response(),
    }
}
