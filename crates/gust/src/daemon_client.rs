//! The HTTP client of a `gust serve` daemon's REST API, shared by `gust run --daemon`
//! and `gust mcp`: one place that knows the base URL, the bearer token and the
//! `{"error":{"code","message"}}` error body.

use std::fmt;

use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde_json::Value;

pub struct DaemonClient {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

/// Why a daemon call did not give an answer to use.
#[derive(Debug, Clone, PartialEq)]
pub enum DaemonError {
    /// No HTTP answer at all (refused connection, reset, DNS).
    Unreachable { base: String, detail: String },
    /// The API answered with a non-success status; `code` and `message` come from
    /// its error body when it had one.
    Refused {
        status: StatusCode,
        code: Option<String>,
        message: Option<String>,
    },
}

impl DaemonError {
    /// The API's stable machine code (`not_found`, `invalid_spec`, `run_active`, ...).
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Refused { code, .. } => code.as_deref(),
            Self::Unreachable { .. } => None,
        }
    }

    pub fn refused(status: StatusCode, body: &Value) -> Self {
        let text = |p: &str| body.pointer(p).and_then(Value::as_str).map(str::to_string);
        Self::Refused {
            status,
            code: text("/error/code"),
            message: text("/error/message"),
        }
    }
}

impl fmt::Display for DaemonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreachable { base, detail } => write!(f, "cannot reach daemon {base}: {detail}"),
            Self::Refused {
                status,
                code,
                message: Some(message),
            } => write!(
                f,
                "daemon refused ({status}, {}): {message}",
                code.as_deref().unwrap_or("?")
            ),
            Self::Refused { status, .. } => write!(f, "daemon answered {status}"),
        }
    }
}

impl std::error::Error for DaemonError {}

impl DaemonClient {
    /// `base` is the daemon's URL (`http://127.0.0.1:9876`); a trailing `/` is ignored.
    pub fn new(base: &str, token: Option<String>) -> Self {
        Self {
            http: reqwest::Client::new(),
            base: base.trim_end_matches('/').to_string(),
            token: token.filter(|t| !t.is_empty()),
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// A request to `path` (starting with `/`) carrying the token, if any.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let builder = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => builder.bearer_auth(t),
            None => builder,
        }
    }

    /// Sends a request; only a missing answer is an error here.
    pub async fn send(&self, request: RequestBuilder) -> Result<Response, DaemonError> {
        request.send().await.map_err(|e| DaemonError::Unreachable {
            base: self.base.clone(),
            detail: e.to_string(),
        })
    }

    /// Sends a request and returns its JSON body (null when empty) if the status
    /// is a success, else the API's error.
    pub async fn json(&self, request: RequestBuilder) -> Result<Value, DaemonError> {
        let resp = self.send(request).await?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            Ok(body)
        } else {
            Err(DaemonError::refused(status, &body))
        }
    }

    pub async fn get(&self, path: &str) -> Result<Value, DaemonError> {
        self.json(self.request(Method::GET, path)).await
    }

    /// POST with a JSON body, or none.
    pub async fn post(&self, path: &str, body: Option<&Value>) -> Result<Value, DaemonError> {
        let request = self.request(Method::POST, path);
        let request = match body {
            Some(b) => request.json(b),
            None => request,
        };
        self.json(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn refused_error_names_the_api_code_and_message() {
        let e = DaemonError::refused(
            StatusCode::BAD_REQUEST,
            &json!({"error": {"code": "invalid_spec", "message": "unknown field `bogus`"}}),
        );
        assert_eq!(e.code(), Some("invalid_spec"));
        assert_eq!(
            e.to_string(),
            "daemon refused (400 Bad Request, invalid_spec): unknown field `bogus`"
        );
    }

    #[test]
    fn refused_error_without_a_body_gives_the_status() {
        let e = DaemonError::refused(StatusCode::BAD_GATEWAY, &Value::Null);
        assert_eq!(e.code(), None);
        assert_eq!(e.to_string(), "daemon answered 502 Bad Gateway");
    }

    #[test]
    fn base_url_loses_its_trailing_slash_and_empty_token_is_none() {
        let c = DaemonClient::new("http://127.0.0.1:9876/", Some(String::new()));
        assert_eq!(c.base(), "http://127.0.0.1:9876");
        assert!(c.token.is_none());
    }
}
