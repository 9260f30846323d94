//! A JSON extractor whose failures are API errors naming the field.
//!
//! axum's own `Json` answers with plain-text 422s; varwof-core clients expect
//! `{"code","message","detail"}` with 400/413, so the body is read here and
//! decoded with a path-tracking deserializer.

use crate::error::{ApiError, ErrorKey};
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

/// Largest accepted request body (ca.md §3: 1 MiB → 413 above it).
pub const MAX_BODY_BYTES: usize = 1 << 20;

pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
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
        })?;
        decode_json(&bytes).map(ApiJson)
    }
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
