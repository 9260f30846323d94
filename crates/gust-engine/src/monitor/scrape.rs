//! One scrape: `GET` a Prometheus endpoint over a fresh connection (plain or rustls).
//!
//! A fresh connection per scrape costs one handshake a second and survives a target
//! that closes idle or over-cap connections, which a target under load may well do.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::spec::Target;
use crate::transport::Stream;

/// A scrape page larger than this is refused rather than held in memory.
pub const MAX_PAGE_BYTES: usize = 16 * 1024 * 1024;

/// Why a scrape produced no page.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScrapeError {
    #[error("connect: {0}")]
    Connect(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("HTTP: {0}")]
    Http(String),
    #[error("status {0}")]
    Status(u16),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("page larger than {MAX_PAGE_BYTES} bytes")]
    TooLarge,
    #[error("page is not UTF-8")]
    NotUtf8,
}

/// A resolved endpoint and, for https, its TLS connector.
pub struct Endpoint {
    pub url: String,
    pub target: Target,
    pub tls: Option<(TlsConnector, ServerName<'static>)>,
}

/// Fetches the page, bounded by `timeout` as a whole.
pub async fn fetch(endpoint: Arc<Endpoint>, timeout: Duration) -> Result<String, ScrapeError> {
    match tokio::time::timeout(timeout, fetch_inner(&endpoint)).await {
        Ok(result) => result,
        Err(_) => Err(ScrapeError::Timeout(timeout)),
    }
}

async fn connect(endpoint: &Endpoint) -> Result<Stream, ScrapeError> {
    let mut last = ScrapeError::Connect("no address".into());
    for addr in &endpoint.target.addrs {
        match connect_addr(endpoint, *addr).await {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

async fn connect_addr(endpoint: &Endpoint, addr: SocketAddr) -> Result<Stream, ScrapeError> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| ScrapeError::Connect(format!("{addr}: {e}")))?;
    let _ = tcp.set_nodelay(true);
    match &endpoint.tls {
        None => Ok(Stream::Plain(tcp)),
        Some((connector, name)) => connector
            .connect(name.clone(), tcp)
            .await
            .map(|s| Stream::Tls(Box::new(s)))
            .map_err(|e| ScrapeError::Tls(e.to_string())),
    }
}

async fn fetch_inner(endpoint: &Endpoint) -> Result<String, ScrapeError> {
    let stream = connect(endpoint).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| ScrapeError::Http(e.to_string()))?;
    // Aborted when this future ends or is dropped (a timed-out scrape), so a target
    // that never answers does not keep one connection a second open.
    let driver = AbortOnDrop(tokio::spawn(conn));
    let request = http::Request::get(endpoint.target.path.as_str())
        .header(http::header::HOST, endpoint.target.authority())
        .header(
            http::header::ACCEPT,
            "text/plain;version=0.0.4;q=1,*/*;q=0.1",
        )
        .header(http::header::USER_AGENT, "gust-monitor")
        .body(Empty::<Bytes>::new())
        .map_err(|e| ScrapeError::Http(e.to_string()))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| ScrapeError::Http(e.to_string()))?;
    let status = response.status().as_u16();
    if !(200..300).contains(&status) {
        return Err(ScrapeError::Status(status));
    }
    let mut body = response.into_body();
    let mut page = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ScrapeError::Http(e.to_string()))?;
        if let Some(data) = frame.data_ref() {
            if page.len() + data.len() > MAX_PAGE_BYTES {
                return Err(ScrapeError::TooLarge);
            }
            page.extend_from_slice(data);
        }
    }
    drop(driver);
    String::from_utf8(page).map_err(|_| ScrapeError::NotUtf8)
}

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
