//! A JSON extractor whose failures are API errors naming the field.
//!
//! axum's own `Json` answers with plain-text 422s; varwof-core clients expect
//! `{"code","message","detail"}` with 400/413, so the body is read here and
//! decoded with a path-tracking deserializer.

use crate::error::{ApiError, ErrorKey};
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;
use std::time::Duration;

/// Largest accepted request body (ca.md §3: 1 MiB → 413 above it).
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// `http.body_read_timeout`, which the connection puts in each request's
/// extensions: the longest a body may take once the head is in. Without it
/// a client that sends a head and then trickles the body would hold its
/// connection and a request task for as long as it liked, since the
/// header timeout ends with the head and the idle timeout waits while a
/// request is in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyReadTimeout(pub Duration);

impl Default for BodyReadTimeout {
    fn default() -> Self {
        BodyReadTimeout(Duration::from_secs(10))
    }
}

pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        require_json_content_type(req.headers())?;
        let bytes = read_body(req, state).await?;
        decode_json(&bytes).map(ApiJson)
    }
}

/// The whole request body, within `MAX_BODY_BYTES` (413) and the
/// connection's [`BodyReadTimeout`] (408). Every handler that reads a body
/// reads it through here.
pub async fn read_body<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    let limit = req
        .extensions()
        .get::<BodyReadTimeout>()
        .copied()
        .unwrap_or_default()
        .0;
    let read = tokio::time::timeout(limit, Bytes::from_request(req, state))
        .await
        .map_err(|_| {
            ApiError::detail(
                ErrorKey::RequestTimeout,
                format!("body: not received within {limit:?}"),
            )
        })?;
    read.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::detail(
                ErrorKey::PayloadTooLarge,
                format!("body: larger than {MAX_BODY_BYTES} bytes"),
            )
        } else {
            ApiError::detail(
                ErrorKey::InvalidJson,
                format!("body: {}", rejection.body_text()),
            )
        }
    })
}

/// 415 `api.unsupported_media_type` unless `Content-Type` is
/// `application/json` (parameters such as `charset` allowed, any case).
///
/// A browser sends a cross-site `POST` without a CORS preflight only as
/// `text/plain`, `application/x-www-form-urlencoded` or `multipart/form-data`,
/// so a JSON-only API never acts on a request another site's page forged.
/// A missing header is refused too: whatever the client meant, it did not
/// say JSON.
pub fn require_json_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    require_content_type(headers, "application/json")
}

/// The request's `Content-Type` is `expected` (415 `api.unsupported_media_type`
/// otherwise), with or without parameters.
pub fn require_content_type(headers: &HeaderMap, expected: &str) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Err(ApiError::detail(
            ErrorKey::UnsupportedMediaType,
            format!("content-type: missing; send {expected}"),
        ));
    };
    match value.to_str() {
        Ok(text) if is_media_type(text, expected) => Ok(()),
        Ok(text) => Err(ApiError::detail(
            ErrorKey::UnsupportedMediaType,
            format!(
                "content-type: {:?} is not {expected}",
                text.chars().take(64).collect::<String>()
            ),
        )),
        Err(_) => Err(ApiError::detail(
            ErrorKey::UnsupportedMediaType,
            format!("content-type: not ASCII; send {expected}"),
        )),
    }
}

/// `value` names the media type `expected`, optionally followed by `;` and
/// parameters, case-insensitively (RFC 9110 §8.3.1).
pub fn is_media_type(value: &str, expected: &str) -> bool {
    let essence = value.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case(expected)
}

/// Whether a request announces a body: a `Content-Length` other than 0, or
/// any `Transfer-Encoding` (chunked). An HTTP/2 request without
/// `content-length` that still sends DATA frames is caught by [`ApiJson`].
pub fn declares_body(headers: &HeaderMap) -> bool {
    if headers.contains_key(header::TRANSFER_ENCODING) {
        return true;
    }
    headers
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() != b"0")
}

/// Syntax errors are `api.invalid_json`; a well-formed document with a wrong
/// type or value is `api.invalid_field` naming the JSON path.
///
/// Nearly every request is valid, so it is decoded without the path
/// tracking that `serde_path_to_error` adds to every field (a few percent of
/// an agent issuance's CPU); only a failed document is decoded again, with
/// it, to name the field. Both passes stop after the first value, as the
/// decoder always has.
pub fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    T::deserialize(&mut serde_json::Deserializer::from_slice(bytes)).map_err(|first| {
        decode_json_error::<T>(bytes).unwrap_or_else(|| {
            ApiError::detail(ErrorKey::InvalidJson, strip_position(&first.to_string()))
        })
    })
}

/// The error of the path-tracking pass; `None` if it unexpectedly decodes.
fn decode_json_error<T: DeserializeOwned>(bytes: &[u8]) -> Option<ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let err = serde_path_to_error::deserialize::<_, T>(de).err()?;
    let top_level = err
        .path()
        .iter()
        .all(|s| matches!(s, serde_path_to_error::Segment::Unknown));
    let path = err.path().to_string();
    let inner = err.into_inner();
    use serde_json::error::Category;
    Some(match inner.classify() {
        Category::Data if !top_level => ApiError::field(&path, strip_position(&inner.to_string())),
        Category::Data => {
            ApiError::detail(ErrorKey::InvalidJson, strip_position(&inner.to_string()))
        }
        _ => ApiError::detail(ErrorKey::InvalidJson, inner.to_string()),
    })
}

fn strip_position(msg: &str) -> String {
    match msg.find(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Req {
        cn: Option<String>,
        validity: Option<u32>,
        nested: Option<Inner>,
    }
    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Inner {
        max_agents: u32,
    }

    #[test]
    fn json_media_type_allows_parameters_and_any_case() {
        for ok in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON;charset=UTF-8",
            " application/json ",
        ] {
            assert!(is_media_type(ok, "application/json"), "{ok}");
        }
        for bad in [
            "text/plain",
            "text/plain; charset=application/json",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
            "application/json-seq",
            "",
        ] {
            assert!(!is_media_type(bad, "application/json"), "{bad}");
        }
    }

    #[test]
    fn rejects_missing_or_foreign_content_type_with_415() {
        let mut h = HeaderMap::new();
        let e = require_json_content_type(&h).unwrap_err();
        assert_eq!(e.key, ErrorKey::UnsupportedMediaType);
        assert_eq!(e.key.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        h.insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
        let e = require_json_content_type(&h).unwrap_err();
        assert!(e.detail.unwrap().starts_with("content-type:"));
        h.insert(
            header::CONTENT_TYPE,
            "application/json; charset=utf-8".parse().unwrap(),
        );
        assert!(require_json_content_type(&h).is_ok());
    }

    #[test]
    fn body_is_declared_by_length_or_transfer_encoding() {
        let mut h = HeaderMap::new();
        assert!(!declares_body(&h));
        h.insert(header::CONTENT_LENGTH, "0".parse().unwrap());
        assert!(!declares_body(&h));
        h.insert(header::CONTENT_LENGTH, "12".parse().unwrap());
        assert!(declares_body(&h));
        let mut h = HeaderMap::new();
        h.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        assert!(declares_body(&h));
    }

    #[test]
    fn malformed_json_is_invalid_json() {
        let e = decode_json::<Req>(b"{\"cn\":").unwrap_err();
        assert_eq!(e.key, ErrorKey::InvalidJson);
    }

    #[test]
    fn wrong_type_names_field() {
        let e = decode_json::<Req>(br#"{"validity":"ten"}"#).unwrap_err();
        assert_eq!(e.key, ErrorKey::InvalidField);
        assert!(e.detail.unwrap().starts_with("validity:"));
    }

    #[test]
    fn nested_wrong_type_names_path() {
        let e = decode_json::<Req>(br#"{"nested":{"max_agents":-1}}"#).unwrap_err();
        assert_eq!(e.key, ErrorKey::InvalidField);
        assert!(e.detail.unwrap().starts_with("nested.max_agents:"));
    }

    #[test]
    fn non_object_is_invalid_json() {
        let e = decode_json::<Req>(b"\"hello\"").unwrap_err();
        assert_eq!(e.key, ErrorKey::InvalidJson, "{e}");
    }
}
