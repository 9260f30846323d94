//! The two layers every API request passes: the per-client rate limit and
//! the request metrics.
//!
//! They are tower layers rather than `axum::middleware::from_fn`, which
//! clones and boxes the inner service and boxes the future of every
//! request: these do the same work without the boxing, since they sit on
//! the path of every request. Both wrap an axum `Route`, whose future is a
//! boxed future and so `Unpin`.

use crate::error::{ApiError, ErrorKey};
use crate::state::SharedState;
use axum::extract::{ConnectInfo, MatchedPath, Request};
use axum::response::{IntoResponse, Response};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Instant;
use tower::{Layer, Service};

/// Counts every answer by route and status; error keys feed the rejection
/// counter.
#[derive(Clone, Copy, Debug, Default)]
pub struct ObserveLayer;

impl<S> Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe { inner }
    }
}

#[derive(Clone, Debug)]
pub struct Observe<S> {
    inner: S,
}

impl<S> Service<Request> for Observe<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
    S::Future: Unpin,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Observed<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let start = Instant::now();
        // A clone of the matched route shares its string.
        let route = req.extensions().get::<MatchedPath>().cloned();
        Observed {
            inner: self.inner.call(req),
            route,
            start,
        }
    }
}

pub struct Observed<F> {
    inner: F,
    route: Option<MatchedPath>,
    start: Instant,
}

impl<F> Future for Observed<F>
where
    F: Future<Output = Result<Response, Infallible>> + Unpin,
{
    type Output = Result<Response, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let Ok(resp) = ready!(Pin::new(&mut this.inner).poll(cx));
        crate::metrics::http_request(
            this.route.as_ref().map_or("unmatched", MatchedPath::as_str),
            resp.status().as_u16(),
            this.start.elapsed().as_secs_f64(),
        );
        if let Some(key) = resp.extensions().get::<ErrorKey>() {
            crate::metrics::rejected(*key);
        }
        Poll::Ready(Ok(resp))
    }
}

/// `rate_limit`: keyed by the TCP peer (both listeners record it), or by
/// `X-Forwarded-For` when `rate_limit.trust_forwarded_for` says so.
#[derive(Clone)]
pub struct RateLimitLayer {
    state: SharedState,
}

impl RateLimitLayer {
    pub fn new(state: SharedState) -> Self {
        RateLimitLayer { state }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            state: self.state.clone(),
        }
    }
}

#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    state: SharedState,
}

impl<S> Service<Request> for RateLimit<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
    S::Future: Unpin,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Limited<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let peer = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip());
        match self.state.limits.check_client(peer, req.headers()) {
            Ok(()) => Limited::Admitted(self.inner.call(req)),
            Err(e) => Limited::Refused(Some(e.into_response())),
        }
    }
}

pub enum Limited<F> {
    Admitted(F),
    /// The refusal, taken when polled.
    Refused(Option<Response>),
}

impl<F> Future for Limited<F>
where
    F: Future<Output = Result<Response, Infallible>> + Unpin,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Limited::Admitted(inner) => Pin::new(inner).poll(cx),
            Limited::Refused(refusal) => Poll::Ready(Ok(refusal
                .take()
                .unwrap_or_else(|| ApiError::new(ErrorKey::Internal).into_response()))),
        }
    }
}
