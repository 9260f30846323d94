//! Where requests come from.
//!
//! A [`RequestSource`] is shared by the run; it hands each worker thread its own
//! [`WorkerSource`], so per-request generation is a plain synchronous `&mut self` call
//! with no lock, no allocation forced by the engine and no `async`. The CA benchmark
//! (`warrant bench`) implements it to sign a fresh delegation per request and to check
//! each issued certificate in [`WorkerSource::on_response`].

use bytes::Bytes;
use http::HeaderMap;

use crate::error::ConfigError;
use crate::metrics::ErrorClass;

/// One request as a source describes it. The engine adds `Host`, `Content-Length`
/// and (HTTP/1.1) `User-Agent` unless given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: http::Method,
    /// Path and query, starting with `/`.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

/// How much of each response a source wants to see. The engine skips header
/// collection and body buffering unless asked, which keeps the static path copy-free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseInterest {
    /// No hook calls.
    Nothing,
    /// Status and headers.
    Head,
    /// Status, headers and the full body (capped by `max_body`).
    Body,
}

/// A completed response as passed to [`WorkerSource::on_response`].
#[derive(Debug)]
pub struct ResponseView<'a> {
    pub status: u16,
    pub headers: &'a HeaderMap,
    /// Empty unless the source asked for [`ResponseInterest::Body`].
    pub body: &'a [u8],
}

/// A per-worker request generator. Owned by exactly one worker thread.
pub trait WorkerSource {
    /// The request with global sequence number `seq` (unique across workers).
    fn next_request(&mut self, seq: u64) -> Request;

    fn interest(&self) -> ResponseInterest {
        ResponseInterest::Nothing
    }

    /// Called for every response received (any status).
    fn on_response(&mut self, _seq: u64, _response: &ResponseView<'_>) {}

    /// Called when a request ended without a response.
    fn on_failure(&mut self, _seq: u64, _class: ErrorClass) {}
}

/// A run-wide factory of per-worker sources.
pub trait RequestSource: Send + Sync + 'static {
    /// Called once per worker thread, on that thread, before the run starts.
    fn for_worker(&self, worker: usize) -> Box<dyn WorkerSource>;

    /// A source that always sends the same request returns it here, letting the
    /// engine encode the bytes once and skip per-request calls.
    fn as_static(&self) -> Option<&Request> {
        None
    }
}

/// The same request every time (the `gust URL` case).
#[derive(Debug, Clone)]
pub struct StaticRequest {
    request: Request,
}

impl StaticRequest {
    pub fn new(
        method: &str,
        path: &str,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> Result<Self, ConfigError> {
        let method = http::Method::from_bytes(method.as_bytes())
            .map_err(|_| ConfigError::new("method", format!("{method:?} is not an HTTP method")))?;
        for (name, value) in &headers {
            http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                ConfigError::new("headers", format!("{name:?} is not a header name"))
            })?;
            http::HeaderValue::from_str(value).map_err(|_| {
                ConfigError::new(
                    "headers",
                    format!("value of {name:?} has control characters"),
                )
            })?;
        }
        Ok(Self {
            request: Request {
                method,
                path: path.to_string(),
                headers,
                body: Bytes::from(body),
            },
        })
    }

    pub fn request(&self) -> &Request {
        &self.request
    }
}

struct StaticWorker(Request);

impl WorkerSource for StaticWorker {
    fn next_request(&mut self, _seq: u64) -> Request {
        self.0.clone()
    }
}

impl RequestSource for StaticRequest {
    fn for_worker(&self, _worker: usize) -> Box<dyn WorkerSource> {
        Box::new(StaticWorker(self.request.clone()))
    }

    fn as_static(&self) -> Option<&Request> {
        Some(&self.request)
    }
}
