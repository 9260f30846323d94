//! The engine in process: a tower layer for an axum or hyper service that
//! terminates mTLS itself (rustls with client certificates). The server puts
//! the verified peer's certificate in each request's extensions
//! ([`PeerCertificate`]) and its address ([`PeerAddr`]); the layer decides
//! on that certificate, else on an AIC-JWT in `Authorization` (a `DPoP`
//! proof names `https://<Host><path>`), and either calls the service, with the agent's [`Identity`] in the
//! extensions, or answers the refusal itself (401/403 with `x-admit-reason`
//! and `x-admit-step`). `examples/mtls_service.rs` is a whole service.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use http::{HeaderValue, Request, Response, StatusCode};

use crate::engine::{AdmissionRequest, Credential, Identity};
use crate::live::Admission;
use crate::reason::{REASON_HEADER, STEP_HEADER};

/// The client certificate (DER) the TLS layer verified for this request's
/// connection; absent when the client presented none.
#[derive(Debug, Clone)]
pub struct PeerCertificate(pub Arc<Vec<u8>>);

/// The connection's peer address (constraints such as `allowed-cidr`).
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub SocketAddr);

/// `tower::Layer` that admits or refuses each request.
#[derive(Clone)]
pub struct AdmitLayer {
    admission: Admission,
}

impl AdmitLayer {
    pub fn new(admission: Admission) -> AdmitLayer {
        AdmitLayer { admission }
    }
}

impl<S> tower::Layer<S> for AdmitLayer {
    type Service = Admit<S>;

    fn layer(&self, inner: S) -> Admit<S> {
        Admit {
            inner,
            admission: self.admission.clone(),
        }
    }
}

/// The service [`AdmitLayer`] wraps around another.
#[derive(Clone)]
pub struct Admit<S> {
    inner: S,
    admission: Admission,
}

/// The refusal answer: the reason's status, key and step; no body beyond
/// the key.
fn refusal<B: Default>(reason: crate::reason::Reason) -> Response<B> {
    let mut resp = Response::new(B::default());
    *resp.status_mut() = StatusCode::from_u16(reason.status()).unwrap_or(StatusCode::FORBIDDEN);
    let h = resp.headers_mut();
    h.insert(REASON_HEADER, HeaderValue::from_static(reason.key()));
    h.insert(
        STEP_HEADER,
        HeaderValue::from(u16::from(reason.step().number())),
    );
    resp
}

impl<S, ReqBody, ResBody> tower::Service<Request<ReqBody>> for Admit<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<ResBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ResBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        let decision = {
            let cert = req.extensions().get::<PeerCertificate>().cloned();
            let header = |name: http::header::HeaderName| {
                req.headers().get(name).and_then(|v| v.to_str().ok())
            };
            let credential = Credential::from_parts(
                cert.as_ref().map(|c| Ok(c.0.as_slice())),
                header(http::header::AUTHORIZATION),
                header(http::header::HeaderName::from_static("dpop")),
            );
            // The service terminates TLS itself: the request's absolute
            // URI (a DPoP proof's `htu`) is https on the Host it was sent to.
            let path_and_query = req
                .uri()
                .path_and_query()
                .map(|pq| pq.as_str())
                .unwrap_or("/");
            let uri = match (req.uri().authority(), header(http::header::HOST)) {
                (Some(authority), _) => format!("https://{authority}{path_and_query}"),
                (None, Some(host)) => format!("https://{host}{path_and_query}"),
                (None, None) => path_and_query.to_string(),
            };
            self.admission.decide(&AdmissionRequest {
                method: req.method().as_str(),
                uri: &uri,
                client_ip: req.extensions().get::<PeerAddr>().map(|a| a.0.ip()),
                credential,
                now: SystemTime::now(),
                current_concurrency: None,
            })
        };
        match decision {
            Ok(admitted) => {
                if let Some(identity) = admitted.identity {
                    req.extensions_mut().insert::<Identity>(identity);
                }
                // The clone that was polled ready serves this request.
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                Box::pin(async move { inner.call(req).await })
            }
            Err(refused) => {
                let resp = refusal(refused.reason);
                Box::pin(async move { Ok(resp) })
            }
        }
    }
}
