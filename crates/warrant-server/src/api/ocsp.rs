//! OCSP over HTTP (RFC 6960 Appendix A, RFC 5019 §5): `POST /ocsp` with a
//! DER request, `GET /ocsp/{base64 of the DER request}`. Public, like the
//! CRL. Every answer is a DER `OCSPResponse` with status 200, failures
//! included (`malformedRequest`, `tryLater`, …), except a body that does
//! not arrive in time (408, as every endpoint).

use axum::extract::{Path, Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use warrant_ca::OcspFailure;

use crate::error::ErrorKey;
use crate::extract::read_body;
use crate::ocsp::OcspAnswer;
use crate::state::SharedState;

const RESPONSE_TYPE: &str = "application/ocsp-response";

/// Standard base64, with or without padding (clients differ).
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

pub(super) async fn post(State(state): State<SharedState>, req: Request) -> Response {
    let body = match read_body(req, &state).await {
        Ok(b) => b,
        Err(e) if e.key == ErrorKey::RequestTimeout => return e.into_response(),
        Err(_) => return der(OcspAnswer::failure(OcspFailure::MalformedRequest), false),
    };
    der(state.cas().ocsp.answer(&state.store, &body).await, false)
}

pub(super) async fn get(State(state): State<SharedState>, Path(encoded): Path<String>) -> Response {
    let Ok(request) = BASE64.decode(encoded.trim_start_matches('/')) else {
        return der(OcspAnswer::failure(OcspFailure::MalformedRequest), false);
    };
    der(state.cas().ocsp.answer(&state.store, &request).await, true)
}

/// The answer as sent; a GET answer that succeeded may be cached until its
/// `nextUpdate` (RFC 5019 §6.2).
fn der(answer: OcspAnswer, cacheable: bool) -> Response {
    let mut resp = ([(header::CONTENT_TYPE, RESPONSE_TYPE)], answer.der).into_response();
    let cache = match (cacheable, answer.max_age) {
        (true, Some(secs)) => format!("max-age={secs}, public, no-transform, must-revalidate"),
        _ => "no-store".to_string(),
    };
    if let Ok(v) = header::HeaderValue::from_str(&cache) {
        resp.headers_mut().insert(header::CACHE_CONTROL, v);
    }
    resp
}
