//! `gust target`: a small HTTP/1.1 keep-alive server with a fixed body, an optional
//! delay and an optional periodic stall, so tests and benchmarks need nothing
//! external. It parses pipelined requests in place and pre-encodes its response.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

/// A periodic stall: during the last `length` of every `every`, responses are held
/// until the stall ends (like a stop-the-world pause).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    pub every: Duration,
    pub length: Duration,
}

impl Stall {
    /// If `since_start` falls in a stall window, how long until it ends.
    pub fn remaining(&self, since_start: Duration) -> Option<Duration> {
        let every = self.every.as_nanos();
        if every == 0 {
            return None;
        }
        let phase = since_start.as_nanos() % every;
        let stall_from = every.saturating_sub(self.length.as_nanos());
        (phase >= stall_from).then(|| Duration::from_nanos((every - phase) as u64))
    }
}

#[derive(Debug, Clone)]
pub struct TargetConfig {
    pub body: Vec<u8>,
    pub status: u16,
    pub delay: Duration,
    pub stall: Option<Stall>,
    /// Server threads.
    pub threads: usize,
    /// Speak HTTP/2 (prior knowledge, h2c) instead of HTTP/1.1.
    pub http2: bool,
}

impl Default for TargetConfig {
    fn default() -> Self {
        Self {
            body: b"hello from gust target\n".to_vec(),
            status: 200,
            delay: Duration::ZERO,
            stall: None,
            threads: 1,
            http2: false,
        }
    }
}

/// A running target; stops when dropped.
pub struct TargetServer {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
}

impl TargetServer {
    /// Bind `addr` (port 0 for an ephemeral port) and serve on background threads.
    pub fn start(addr: SocketAddr, cfg: TargetConfig) -> io::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cfg.threads.max(1))
            .thread_name("gust-target")
            .enable_all()
            .build()?;
        let listener = rt.block_on(async { TcpListener::bind(addr).await })?;
        let addr = listener.local_addr()?;
        let (stop, stop_rx) = watch::channel(false);
        let thread = std::thread::Builder::new()
            .name("gust-target-main".into())
            .spawn(move || {
                rt.block_on(serve(listener, cfg, stop_rx));
                rt.shutdown_background();
            })?;
        Ok(Self {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Block until the server stops (for `gust target`).
    pub fn join(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for TargetServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

async fn serve(listener: TcpListener, cfg: TargetConfig, stop: watch::Receiver<bool>) {
    let mut response = format!(
        "HTTP/1.1 {} {}\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n",
        cfg.status,
        reason(cfg.status),
        cfg.body.len()
    )
    .into_bytes();
    response.extend_from_slice(&cfg.body);
    let response: Arc<[u8]> = response.into();
    let start = Instant::now();
    let mut stopped = stop.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((sock, _)) = accepted {
                    let _ = sock.set_nodelay(true);
                    let response = Arc::clone(&response);
                    let stop = stop.clone();
                    let (delay, stall) = (cfg.delay, cfg.stall);
                    if cfg.http2 {
                        let body = bytes::Bytes::from(cfg.body.clone());
                        let status = cfg.status;
                        tokio::spawn(h2_connection(sock, body, status, delay, stall, start));
                    } else {
                        tokio::spawn(async move {
                            let _ = connection(sock, response, delay, stall, start, stop).await;
                        });
                    }
                }
            }
            _ = stopped.wait_for(|s| *s) => return,
        }
    }
}

async fn connection(
    mut sock: TcpStream,
    response: Arc<[u8]>,
    delay: Duration,
    stall: Option<Stall>,
    start: Instant,
    mut stop: watch::Receiver<bool>,
) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    let mut out: Vec<u8> = Vec::with_capacity(response.len() * 4);
    let (mut begin, mut end) = (0usize, 0usize);
    loop {
        // Answer every complete request in the buffer (pipelining), then write once.
        let mut answered = 0usize;
        let mut close = false;
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut headers);
            let (head_len, body_len) = match req.parse(&buf[begin..end]) {
                Ok(httparse::Status::Complete(n)) => {
                    let mut body_len = 0usize;
                    for h in req.headers.iter() {
                        if h.name.eq_ignore_ascii_case("content-length") {
                            body_len = std::str::from_utf8(h.value)
                                .ok()
                                .and_then(|v| v.trim().parse().ok())
                                .unwrap_or(0);
                        } else if h.name.eq_ignore_ascii_case("connection")
                            && h.value.eq_ignore_ascii_case(b"close")
                        {
                            close = true;
                        }
                    }
                    if req.version == Some(0) {
                        close = true;
                    }
                    (n, body_len)
                }
                Ok(httparse::Status::Partial) => break,
                Err(_) => return Ok(()),
            };
            if end - begin < head_len + body_len {
                if head_len + body_len > buf.len() {
                    return Ok(()); // request larger than the buffer: not our use case
                }
                break;
            }
            begin += head_len + body_len;
            answered += 1;
            if close {
                break;
            }
        }
        if answered > 0 {
            pause(delay, stall, start).await;
            out.clear();
            for _ in 0..answered {
                out.extend_from_slice(&response);
            }
            sock.write_all(&out).await?;
            if close {
                return Ok(());
            }
        }
        if begin == end {
            begin = 0;
            end = 0;
        } else if end == buf.len() {
            buf.copy_within(begin..end, 0);
            end -= begin;
            begin = 0;
        }
        let n = tokio::select! {
            n = sock.read(&mut buf[end..]) => n?,
            _ = stop.wait_for(|s| *s) => return Ok(()),
        };
        if n == 0 {
            return Ok(());
        }
        end += n;
    }
}

async fn pause(delay: Duration, stall: Option<Stall>, start: Instant) {
    if let Some(s) = stall
        && let Some(wait) = s.remaining(start.elapsed())
    {
        tokio::time::sleep(wait).await;
    }
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}

async fn h2_connection(
    sock: TcpStream,
    body: bytes::Bytes,
    status: u16,
    delay: Duration,
    stall: Option<Stall>,
    start: Instant,
) {
    let service = hyper::service::service_fn(move |_req: http::Request<hyper::body::Incoming>| {
        let body = body.clone();
        async move {
            pause(delay, stall, start).await;
            let mut resp = http::Response::new(http_body_util::Full::new(body));
            *resp.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
            Ok::<_, std::convert::Infallible>(resp)
        }
    });
    let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .serve_connection(hyper_util::rt::TokioIo::new(sock), service)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stall_window_is_the_end_of_each_period() {
        let s = Stall {
            every: Duration::from_secs(5),
            length: Duration::from_secs(1),
        };
        assert_eq!(s.remaining(Duration::from_millis(3_999)), None);
        assert_eq!(
            s.remaining(Duration::from_millis(4_000)),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            s.remaining(Duration::from_millis(4_750)),
            Some(Duration::from_millis(250))
        );
        assert_eq!(s.remaining(Duration::from_millis(5_000)), None);
        assert_eq!(
            s.remaining(Duration::from_millis(9_500)),
            Some(Duration::from_millis(500))
        );
    }
}
