//! Serving accepted connections, the same way on both listeners: the
//! connection cap, the header read and idle timeouts, HTTP/1 and HTTP/2
//! limits, and graceful shutdown.
//!
//! The timeouts are kept by one watchdog per connection rather than by
//! hyper's HTTP/1 `header_read_timeout`, which (a) covers neither HTTP/2
//! nor the protocol sniffing of hyper-util's auto builder (a client that
//! sends `P` and waits stays there for ever), (b) starts its clock when a
//! keep-alive connection begins to wait, so it would also be the idle
//! timeout, and (c) arms a timer for every request. The watchdog instead
//! reads three per-connection counters that the IO wrapper and the service
//! update (a few uncontended atomics and a clock read per request) and arms
//! its timer only when the deadline it computed last time has passed.

use crate::config::HttpConfig;
use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::header::CONNECTION;
use axum::http::{HeaderName, HeaderValue, Version};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

/// The verified client certificate of an mTLS connection (leaf DER), put in
/// the extensions of every request the connection carries.
#[derive(Clone, Debug)]
pub struct ClientCert(pub Vec<u8>);

/// Put in the extensions of every request the TLS listener serves: the
/// session cookie it sets is `Secure`, and an `http://` Origin is another
/// site.
#[derive(Clone, Copy, Debug)]
pub struct OverTls;
use tower::Service;

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");

/// What one listener needs to serve its connections; shared by both.
pub struct Serving {
    app: Router,
    builder: auto::Builder<TokioExecutor>,
    limits: Limits,
    /// Put in every request's extensions, for the body extractor.
    body_read: crate::extract::BodyReadTimeout,
    gate: ConnGate,
    /// `Keep-Alive: timeout=…` on HTTP/1.1 answers: when an idle connection
    /// will be closed, so that clients retire it first.
    keep_alive: HeaderValue,
}

/// The timeouts of [`HttpConfig`], in the form the watchdog uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub header_read: Duration,
    pub idle: Duration,
}

impl Serving {
    pub fn new(app: Router, cfg: &HttpConfig) -> Self {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        // The request head must fit the read buffer (431 beyond it); hyper's
        // own header timer stays off, the watchdog keeps the time.
        builder
            .http1()
            .max_buf_size(cfg.max_header_bytes as usize)
            .header_read_timeout(None);
        builder
            .http2()
            .max_concurrent_streams(cfg.h2_max_concurrent_streams as u32)
            .max_header_list_size(cfg.max_header_bytes as u32);
        Serving {
            app,
            builder,
            limits: Limits {
                header_read: cfg.header_read_timeout.0,
                idle: cfg.idle_timeout.0,
            },
            body_read: crate::extract::BodyReadTimeout(cfg.body_read_timeout.0),
            gate: ConnGate::new(cfg.max_connections as usize),
            keep_alive: keep_alive_header(cfg.idle_timeout.0),
        }
    }

    pub fn gate(&self) -> &ConnGate {
        &self.gate
    }
}

/// The `Keep-Alive` value announcing `idle`, in whole seconds rounded down
/// (RFC 9112 leaves the header to HTTP/1.1 practice; clients read `timeout`
/// as a lower bound on how long the server keeps an idle connection).
pub fn keep_alive_header(idle: Duration) -> HeaderValue {
    HeaderValue::try_from(format!("timeout={}", idle.as_secs()))
        .unwrap_or(HeaderValue::from_static("timeout=0"))
}

/// How a listener's connections are set up before HTTP.
#[derive(Clone)]
pub enum Transport {
    Plain,
    Tls(tokio_rustls::TlsAcceptor),
}

/// The cap on open connections over both listeners (`http.max_connections`),
/// and, at shutdown, the wait until every admitted connection has closed.
#[derive(Clone)]
pub struct ConnGate {
    permits: Arc<Semaphore>,
    max: u32,
}

impl ConnGate {
    pub fn new(max: usize) -> Self {
        let max = max.clamp(1, u32::MAX as usize);
        ConnGate {
            permits: Arc::new(Semaphore::new(max)),
            max: max as u32,
        }
    }

    /// A slot for one connection, held until it closes; `None` at the cap.
    pub fn try_admit(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().ok()
    }

    /// Returns once every admitted connection has closed.
    pub async fn drained(&self) {
        let _all = self.permits.acquire_many(self.max).await;
    }
}

/// Accepts on `listener` until `stop`, serving each connection on its own
/// task. A connection over the cap is closed at once; the server goes on.
pub async fn accept_loop(
    listener: TcpListener,
    transport: Transport,
    serving: Arc<Serving>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            },
            _ = stopped(&mut stop) => return,
        };
        let Some(permit) = serving.gate.try_admit() else {
            tracing::debug!(%peer, "connection over http.max_connections closed");
            crate::metrics::connection_closed("over_cap");
            drop(tcp);
            continue;
        };
        let serving = serving.clone();
        let transport = transport.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match transport {
                Transport::Plain => serve_connection(tcp, peer, None, &serving, stop).await,
                Transport::Tls(acceptor) => {
                    if let Some((tls, cert)) =
                        tls_handshake(&acceptor, tcp, peer, serving.limits.header_read).await
                    {
                        serve_connection(tls, peer, Some(cert), &serving, stop).await;
                    }
                }
            }
        });
    }
}

/// Resolves once a stop is asked for (or the server handle is gone); the
/// borrow of the watch value is not held across an await.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// The TLS handshake, within the header read timeout; the verified client
/// certificate, if any, comes with the stream.
async fn tls_handshake(
    acceptor: &tokio_rustls::TlsAcceptor,
    tcp: TcpStream,
    peer: SocketAddr,
    limit: Duration,
) -> Option<(
    tokio_rustls::server::TlsStream<TcpStream>,
    Option<ClientCert>,
)> {
    match tokio::time::timeout(limit, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => {
            let cert = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| ClientCert(c.as_ref().to_vec()));
            Some((tls, cert))
        }
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            crate::metrics::connection_closed("tls_handshake");
            None
        }
    }
}

/// `EMFILE` and the like: wait a moment instead of spinning (the condition
/// lasts until descriptors are freed); connection-level errors are the
/// client's and are skipped.
async fn accept_error(e: std::io::Error) {
    use std::io::ErrorKind::*;
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Serves HTTP/1.1 or HTTP/2 (ALPN or prior knowledge) on one connection
/// until the client closes it, a timeout closes it, or `stop` asks for a
/// graceful shutdown (requests in flight finish). `tls` is `Some` on the
/// TLS listener, with the client certificate if one was presented.
async fn serve_connection<I>(
    io: I,
    peer: SocketAddr,
    tls: Option<Option<ClientCert>>,
    serving: &Serving,
    mut stop: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        io,
        activity: activity.clone(),
    });
    let app = serving.app.clone();
    let requests = activity.clone();
    let body_read = serving.body_read;
    let keep_alive = serving.keep_alive.clone();
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        let ext = req.extensions_mut();
        ext.insert(body_read);
        if let Some(cert) = &tls {
            ext.insert(OverTls);
            if let Some(cert) = cert {
                ext.insert(cert.clone());
            }
        }
        ext.insert(ConnectInfo(peer));
        // HTTP/2 forbids connection-specific headers; it has GOAWAY.
        let announce = (req.version() == Version::HTTP_11).then(|| keep_alive.clone());
        let busy = requests.begin();
        let answer = app.clone().call(req);
        async move {
            let mut resp = answer.await;
            drop(busy);
            if let (Some(value), Ok(resp)) = (announce, resp.as_mut()) {
                let closing = resp
                    .headers()
                    .get(CONNECTION)
                    .is_some_and(|c| c.as_bytes().eq_ignore_ascii_case(b"close"));
                if !closing {
                    resp.headers_mut().insert(KEEP_ALIVE, value);
                }
            }
            resp
        }
    });
    let conn = serving.builder.serve_connection(io, service);
    tokio::pin!(conn);
    let watchdog = watch_connection(&activity, serving.limits);
    tokio::pin!(watchdog);
    let mut stopping = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            expiry = &mut watchdog => {
                crate::metrics::connection_closed(expiry.reason());
                tracing::debug!(%peer, reason = expiry.reason(), "closing connection");
                if expiry == Expiry::Idle {
                    // Nothing in flight: a GOAWAY (HTTP/2) or a plain close,
                    // bounded in case the client keeps the connection busy.
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(serving.limits.header_read, conn.as_mut()).await;
                }
                return;
            }
            _ = stopped(&mut stop), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// Why the watchdog ends a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Bytes of a request arrived, its head did not complete in time.
    HeaderTimeout,
    /// No request in flight and none begun for `http.idle_timeout`.
    Idle,
}

impl Expiry {
    fn reason(self) -> &'static str {
        match self {
            Expiry::HeaderTimeout => "header_timeout",
            Expiry::Idle => "idle_timeout",
        }
    }
}

/// What the watchdog does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Look again after this long.
    Wait(Duration),
    Close(Expiry),
}

/// Nanoseconds since the connection was accepted; [`NOT_READING`] when no
/// request head has begun.
const NOT_READING: u64 = u64::MAX;

/// The pure rule, on a connection's counters at `now` (all nanoseconds since
/// it was accepted). A request in flight is never timed out here (the
/// handlers bound their own work); between requests, bytes that begin a
/// request must complete its head within `header_read`, and a connection
/// where nothing begins is closed `idle` after its last answer.
pub fn verdict(now: u64, in_flight: u32, idle_since: u64, head_since: u64, l: Limits) -> Verdict {
    if in_flight > 0 {
        return Verdict::Wait(l.header_read.min(l.idle));
    }
    let (since, limit, expiry) = if head_since != NOT_READING {
        (head_since, l.header_read, Expiry::HeaderTimeout)
    } else {
        (idle_since, l.idle, Expiry::Idle)
    };
    let deadline = since.saturating_add(limit.as_nanos() as u64);
    if now >= deadline {
        return Verdict::Close(expiry);
    }
    // Never wait longer than `header_read`: a head that begins during the
    // wait then has its deadline after the wake-up, which sees it and waits
    // for exactly that deadline. (The watchdog is not told when bytes
    // arrive; being told would cost a wake-up or a timer reset per request.)
    Verdict::Wait(Duration::from_nanos(deadline - now).min(l.header_read))
}

/// Resolves when the connection has overrun one of its limits.
async fn watch_connection(activity: &Activity, limits: Limits) -> Expiry {
    loop {
        let v = verdict(
            activity.now(),
            activity.in_flight.load(Relaxed),
            activity.idle_since.load(Relaxed),
            activity.head_since.load(Relaxed),
            limits,
        );
        match v {
            Verdict::Wait(d) => tokio::time::sleep(d).await,
            Verdict::Close(expiry) => return expiry,
        }
    }
}

/// Per-connection counters. Relaxed atomics: the watchdog only needs a
/// recent view, and looks again before it acts on a stale one late.
struct Activity {
    accepted: Instant,
    in_flight: AtomicU32,
    /// When `in_flight` last fell to 0 (or the connection was accepted).
    idle_since: AtomicU64,
    /// When the first byte after the last request head arrived while no
    /// request was in flight; [`NOT_READING`] otherwise.
    head_since: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            accepted: Instant::now(),
            in_flight: AtomicU32::new(0),
            idle_since: AtomicU64::new(0),
            head_since: AtomicU64::new(NOT_READING),
        }
    }

    fn now(&self) -> u64 {
        self.accepted.elapsed().as_nanos() as u64
    }

    fn bytes_read(&self) {
        if self.in_flight.load(Relaxed) == 0 && self.head_since.load(Relaxed) == NOT_READING {
            self.head_since.store(self.now(), Relaxed);
        }
    }

    /// A request head is complete and its handler starts.
    fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Relaxed);
        self.head_since.store(NOT_READING, Relaxed);
        Busy(self.clone())
    }
}

/// One request in flight; its drop (answer ready, or the request dropped)
/// ends it.
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Relaxed) == 1 {
            self.0.idle_since.store(self.0.now(), Relaxed);
        }
    }
}

/// The connection's byte stream, noting when request bytes arrive.
struct Watched<I> {
    io: I,
    activity: Arc<Activity>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.bytes_read();
        }
        r
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const L: Limits = Limits {
        header_read: Duration::from_secs(10),
        idle: Duration::from_secs(30),
    };

    #[test]
    fn a_request_in_flight_is_never_closed() {
        assert_eq!(
            verdict(1000 * S, 1, 0, NOT_READING, L),
            Verdict::Wait(Duration::from_secs(10))
        );
        assert_eq!(
            verdict(1000 * S, 3, 0, 5 * S, L),
            Verdict::Wait(Duration::from_secs(10))
        );
    }

    #[test]
    fn an_idle_wait_is_never_longer_than_the_header_timeout() {
        // 29 s of idle time left, but a head could begin any moment.
        assert_eq!(
            verdict(21 * S, 0, 20 * S, NOT_READING, L),
            Verdict::Wait(Duration::from_secs(10))
        );
    }

    #[test]
    fn keep_alive_announces_the_idle_timeout_in_whole_seconds_rounded_down() {
        assert_eq!(keep_alive_header(Duration::from_secs(30)), "timeout=30");
        assert_eq!(keep_alive_header(Duration::from_millis(1_900)), "timeout=1");
        assert_eq!(keep_alive_header(Duration::from_millis(10)), "timeout=0");
    }

    #[test]
    fn idle_connection_closes_after_idle_timeout_from_its_last_answer() {
        assert_eq!(
            verdict(40 * S, 0, 20 * S, NOT_READING, L),
            Verdict::Wait(Duration::from_secs(10))
        );
        assert_eq!(
            verdict(50 * S, 0, 20 * S, NOT_READING, L),
            Verdict::Close(Expiry::Idle)
        );
    }

    #[test]
    fn rejects_a_head_that_takes_longer_than_the_header_timeout() {
        // Bytes arrived at 25 s on a connection idle since 20 s: the header
        // deadline (35 s) rules, not the idle one (50 s).
        assert_eq!(
            verdict(30 * S, 0, 20 * S, 25 * S, L),
            Verdict::Wait(Duration::from_secs(5))
        );
        assert_eq!(
            verdict(35 * S, 0, 20 * S, 25 * S, L),
            Verdict::Close(Expiry::HeaderTimeout)
        );
        // A head begun at accept (a slow first request).
        assert_eq!(
            verdict(10 * S, 0, 0, 0, L),
            Verdict::Close(Expiry::HeaderTimeout)
        );
    }

    #[test]
    fn busy_guard_counts_requests_and_marks_idle_on_the_last() {
        let a = Arc::new(Activity::new());
        a.bytes_read();
        assert_ne!(a.head_since.load(Relaxed), NOT_READING);
        let one = a.begin();
        assert_eq!(a.head_since.load(Relaxed), NOT_READING);
        let two = a.begin();
        // Body bytes of a request in flight do not start a head.
        a.bytes_read();
        assert_eq!(a.head_since.load(Relaxed), NOT_READING);
        drop(one);
        assert_eq!(a.in_flight.load(Relaxed), 1);
        assert_eq!(a.idle_since.load(Relaxed), 0);
        std::thread::sleep(Duration::from_millis(2));
        drop(two);
        assert_eq!(a.in_flight.load(Relaxed), 0);
        assert!(a.idle_since.load(Relaxed) > 0);
    }

    #[tokio::test]
    async fn gate_admits_up_to_the_cap_and_drains() {
        let gate = ConnGate::new(2);
        let a = gate.try_admit().unwrap();
        let _b = gate.try_admit().unwrap();
        assert!(gate.try_admit().is_none());
        drop(a);
        let c = gate.try_admit().unwrap();
        let drained = tokio::time::timeout(Duration::from_millis(50), gate.drained()).await;
        assert!(drained.is_err(), "two connections are still open");
        drop((c, _b));
        tokio::time::timeout(Duration::from_secs(1), gate.drained())
            .await
            .unwrap();
    }
}
