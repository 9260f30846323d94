//! The HTTP/1.1 keep-alive fast path.
//!
//! Requests are encoded into bytes once (static sources) or into a reused buffer;
//! responses are parsed in place in the connection's read buffer with `httparse`, and
//! bodies are counted and skipped without copying unless a source asked to see them.
//! No allocation happens per request on the static path.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::Instant;

use crate::metrics::ErrorClass;
use crate::source::Request;

/// Size of each connection's read buffer; a response head must fit in it.
pub const READ_BUFFER: usize = 16 * 1024;
const MAX_HEADERS: usize = 64;
const MAX_CHUNK_LINE: usize = 4096;

/// Append the wire form of `req` to `out`.
pub fn encode_request(req: &Request, authority: &str, out: &mut Vec<u8>) {
    let has = |name: &str| {
        req.headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
    };
    out.extend_from_slice(req.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(req.path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if !has("host") {
        out.extend_from_slice(b"Host: ");
        out.extend_from_slice(authority.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !has("user-agent") {
        out.extend_from_slice(b"User-Agent: gust/");
        out.extend_from_slice(env!("CARGO_PKG_VERSION").as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    for (name, value) in &req.headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let needs_length = !req.body.is_empty()
        || matches!(
            req.method,
            http::Method::POST | http::Method::PUT | http::Method::PATCH
        );
    if needs_length && !has("content-length") {
        out.extend_from_slice(b"Content-Length: ");
        out.extend_from_slice(req.body.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&req.body);
}

/// What the caller wants kept from the response.
pub enum Capture<'a> {
    Nothing,
    Head(&'a mut HeaderMap),
    Body(&'a mut HeaderMap, &'a mut Vec<u8>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub status: u16,
    /// When the first byte of the response was read (time to first byte).
    pub first_byte: Instant,
    pub bytes_in: u64,
    /// Whether the connection may carry another request.
    pub reusable: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    Empty,
    Length(u64),
    Chunked,
    UntilClose,
}

/// Map an IO error during an exchange to its class.
pub fn io_class(e: &io::Error) -> ErrorClass {
    if e.get_ref()
        .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
    {
        return ErrorClass::Tls;
    }
    match e.kind() {
        io::ErrorKind::TimedOut => ErrorClass::Timeout,
        io::ErrorKind::InvalidData => ErrorClass::Protocol,
        _ => ErrorClass::Reset,
    }
}

/// An HTTP/1.1 connection with its read buffer.
pub struct H1Conn<S> {
    io: S,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    bytes_read: u64,
    /// When the last response began to arrive: how long the connection has
    /// been idle, for [`H1Conn::peer_closed`].
    last_answer: Instant,
}

impl<S: AsyncRead + AsyncWrite + Unpin> H1Conn<S> {
    pub fn new(io: S) -> Self {
        Self {
            io,
            buf: vec![0; READ_BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
            bytes_read: 0,
            last_answer: Instant::now(),
        }
    }

    /// Whether the peer closed this idle connection (or sent something unasked,
    /// such as a 408 before closing) while it sat in the pool; such a connection
    /// must not carry the next request. One non-blocking read: a connection
    /// with nothing to read answers `Pending`. Checked only on connections idle
    /// for at least `after` (a server closes idle connections after its idle
    /// timeout, seconds), so the hot keep-alive path makes no extra syscall.
    pub fn peer_closed(&mut self, now: Instant, after: Duration) -> bool {
        if now.saturating_duration_since(self.last_answer) < after {
            return false;
        }
        if self.start != self.end {
            return true;
        }
        self.start = 0;
        self.end = 0;
        let mut cx = Context::from_waker(Waker::noop());
        let mut probe = ReadBuf::new(&mut self.buf[self.end..]);
        // End of stream, an error, or bytes no request asked for.
        !matches!(
            Pin::new(&mut self.io).poll_read(&mut cx, &mut probe),
            Poll::Pending
        )
    }

    /// Read more bytes; `Ok(0)` is end of stream.
    async fn fill(&mut self) -> Result<usize, ErrorClass> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            if self.start == 0 {
                return Err(ErrorClass::Protocol);
            }
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let n = self
            .io
            .read(&mut self.buf[self.end..])
            .await
            .map_err(|e| io_class(&e))?;
        self.end += n;
        self.bytes_read += n as u64;
        Ok(n)
    }

    /// Fill, treating end of stream as a reset (the response is incomplete).
    async fn fill_more(&mut self) -> Result<(), ErrorClass> {
        match self.fill().await? {
            0 => Err(ErrorClass::Reset),
            _ => Ok(()),
        }
    }

    /// Send `request` and read one full response.
    pub async fn exchange(
        &mut self,
        request: &[u8],
        is_head: bool,
        max_body: u64,
        mut capture: Capture<'_>,
    ) -> Result<Outcome, ErrorClass> {
        self.io.write_all(request).await.map_err(|e| io_class(&e))?;
        self.io.flush().await.map_err(|e| io_class(&e))?;
        self.bytes_read = (self.end - self.start) as u64;
        if self.start == self.end {
            self.fill_more().await?;
        }
        let first_byte = Instant::now();
        self.last_answer = first_byte;

        let (status, kind, mut reusable) = loop {
            let parsed = loop {
                let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                let mut resp = httparse::Response::new(&mut headers);
                match resp.parse(&self.buf[self.start..self.end]) {
                    Ok(httparse::Status::Complete(len)) => {
                        let head = interpret_head(&resp, is_head)?;
                        if let Capture::Head(map) | Capture::Body(map, _) = &mut capture {
                            map.clear();
                            for h in resp.headers.iter() {
                                if let (Ok(n), Ok(v)) = (
                                    HeaderName::from_bytes(h.name.as_bytes()),
                                    HeaderValue::from_bytes(h.value),
                                ) {
                                    map.append(n, v);
                                }
                            }
                        }
                        break (len, head);
                    }
                    Ok(httparse::Status::Partial) => {}
                    Err(_) => return Err(ErrorClass::Protocol),
                }
                // A close before a complete head (even before its first byte, as
                // on a dead keep-alive connection) is a reset, not bad HTTP.
                self.fill_more().await?;
            };
            let (len, (status, kind, reusable)) = parsed;
            self.start += len;
            if (100..200).contains(&status) {
                if status == 101 {
                    return Err(ErrorClass::Protocol);
                }
                continue;
            }
            break (status, kind, reusable);
        };

        let body = match &mut capture {
            Capture::Body(_, body) => {
                body.clear();
                Some(&mut **body)
            }
            _ => None,
        };
        match kind {
            BodyKind::Empty => {}
            BodyKind::Length(n) => {
                if n > max_body {
                    return Err(ErrorClass::BodyTooLarge);
                }
                self.skip(n, body).await?;
            }
            BodyKind::Chunked => self.read_chunked(max_body, body).await?,
            BodyKind::UntilClose => {
                reusable = false;
                let mut body = body;
                let mut total = 0u64;
                loop {
                    let avail = (self.end - self.start) as u64;
                    total += avail;
                    if total > max_body {
                        return Err(ErrorClass::BodyTooLarge);
                    }
                    if let Some(b) = body.as_deref_mut() {
                        b.extend_from_slice(&self.buf[self.start..self.end]);
                    }
                    self.start = self.end;
                    if self.fill().await? == 0 {
                        break;
                    }
                }
            }
        }
        Ok(Outcome {
            status,
            first_byte,
            bytes_in: self.bytes_read - (self.end - self.start) as u64,
            reusable,
        })
    }

    async fn skip(
        &mut self,
        mut remaining: u64,
        mut body: Option<&mut Vec<u8>>,
    ) -> Result<(), ErrorClass> {
        while remaining > 0 {
            if self.start == self.end {
                self.fill_more().await?;
            }
            let take = remaining.min((self.end - self.start) as u64) as usize;
            if let Some(b) = body.as_deref_mut() {
                b.extend_from_slice(&self.buf[self.start..self.start + take]);
            }
            self.start += take;
            remaining -= take as u64;
        }
        Ok(())
    }

    /// Read one CRLF-terminated line; returns its length without the terminator and
    /// advances past it.
    async fn line(&mut self) -> Result<(usize, usize), ErrorClass> {
        loop {
            if let Some(pos) = self.buf[self.start..self.end]
                .iter()
                .position(|&b| b == b'\n')
            {
                let line_start = self.start;
                let mut len = pos;
                if len > 0 && self.buf[line_start + len - 1] == b'\r' {
                    len -= 1;
                }
                self.start += pos + 1;
                return Ok((line_start, len));
            }
            if self.end - self.start > MAX_CHUNK_LINE {
                return Err(ErrorClass::Protocol);
            }
            self.fill_more().await?;
        }
    }

    async fn read_chunked(
        &mut self,
        max_body: u64,
        mut body: Option<&mut Vec<u8>>,
    ) -> Result<(), ErrorClass> {
        let mut total = 0u64;
        loop {
            let (at, len) = self.line().await?;
            // `line` may have compacted the buffer before returning, but `at` is taken
            // after the last fill, so it is valid until the next read.
            let size = parse_chunk_size(&self.buf[at..at + len])?;
            if size == 0 {
                // Trailers until an empty line.
                loop {
                    let (_, len) = self.line().await?;
                    if len == 0 {
                        return Ok(());
                    }
                }
            }
            total = total.saturating_add(size);
            if total > max_body {
                return Err(ErrorClass::BodyTooLarge);
            }
            self.skip(size, body.as_deref_mut()).await?;
            let (_, len) = self.line().await?;
            if len != 0 {
                return Err(ErrorClass::Protocol);
            }
        }
    }
}

fn parse_chunk_size(line: &[u8]) -> Result<u64, ErrorClass> {
    let digits = line.split(|&b| b == b';').next().unwrap_or(&[]);
    let digits = digits.trim_ascii();
    if digits.is_empty() || digits.len() > 15 {
        return Err(ErrorClass::Protocol);
    }
    let mut size = 0u64;
    for &d in digits {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => return Err(ErrorClass::Protocol),
        };
        size = size * 16 + u64::from(v);
    }
    Ok(size)
}

/// Status, body framing and keep-alive from a parsed head (RFC 9112 §6.3).
fn interpret_head(
    resp: &httparse::Response<'_, '_>,
    is_head: bool,
) -> Result<(u16, BodyKind, bool), ErrorClass> {
    let status = resp.code.ok_or(ErrorClass::Protocol)?;
    let http10 = resp.version == Some(0);
    let mut reusable = !http10;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(h.value)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or(ErrorClass::Protocol)?;
            if length.is_some_and(|l| l != v) {
                return Err(ErrorClass::Protocol);
            }
            length = Some(v);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = h
                .value
                .rsplit(|&b| b == b',')
                .next()
                .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    reusable = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && http10 {
                    reusable = true;
                }
            }
        }
    }
    let kind = if is_head || status == 204 || status == 304 || (100..200).contains(&status) {
        BodyKind::Empty
    } else if chunked {
        BodyKind::Chunked
    } else if let Some(n) = length {
        BodyKind::Length(n)
    } else {
        BodyKind::UntilClose
    };
    Ok((status, kind, reusable))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use tokio::io::AsyncWriteExt;

    async fn exchange_with(
        response: &[u8],
        max_body: u64,
        capture_body: bool,
    ) -> (Result<Outcome, ErrorClass>, Vec<u8>) {
        let (client, mut server) = tokio::io::duplex(64);
        let response = response.to_vec();
        let writer = tokio::spawn(async move {
            let mut req = [0u8; 5];
            let _ = server.read_exact(&mut req).await;
            // Dribble the response in small pieces to exercise partial parsing.
            for chunk in response.chunks(7) {
                if server.write_all(chunk).await.is_err() {
                    return;
                }
            }
            let _ = server.shutdown().await;
        });
        let mut conn = H1Conn::new(client);
        let mut headers = HeaderMap::new();
        let mut body = Vec::new();
        let capture = if capture_body {
            Capture::Body(&mut headers, &mut body)
        } else {
            Capture::Nothing
        };
        let out = conn.exchange(b"GET /", false, max_body, capture).await;
        drop(conn);
        let _ = writer.await;
        (out, body)
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn reads_content_length_body() {
        rt().block_on(async {
            let (out, body) = exchange_with(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
                100,
                true,
            )
            .await;
            let out = out.unwrap();
            assert_eq!((out.status, out.reusable), (200, true));
            assert_eq!(body, b"hello");
            assert_eq!(out.bytes_in, 43);
        });
    }

    #[test]
    fn reads_chunked_body_with_extensions_and_trailers() {
        rt().block_on(async {
            let resp = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n";
            let (out, body) = exchange_with(resp, 100, true).await;
            assert_eq!(out.unwrap().status, 200);
            assert_eq!(body, b"hello world");
        });
    }

    #[test]
    fn rejects_body_over_max_body() {
        rt().block_on(async {
            let (out, _) = exchange_with(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world", 10, false).await;
            assert_eq!(out, Err(ErrorClass::BodyTooLarge));
            let resp = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n";
            let (out, _) = exchange_with(resp, 10, false).await;
            assert_eq!(out, Err(ErrorClass::BodyTooLarge));
            let (out, _) = exchange_with(b"HTTP/1.0 200 OK\r\n\r\nhello world", 10, false).await;
            assert_eq!(out, Err(ErrorClass::BodyTooLarge));
        });
    }

    #[test]
    fn rejects_garbage_status_line() {
        rt().block_on(async {
            let (out, _) = exchange_with(b"HTTP/1.1 OK 200\r\n\r\n", 10, false).await;
            assert_eq!(out, Err(ErrorClass::Protocol));
            let (out, _) = exchange_with(b"\x00\x01garbage\r\n\r\n", 10, false).await;
            assert_eq!(out, Err(ErrorClass::Protocol));
        });
    }

    #[test]
    fn rejects_conflicting_content_lengths() {
        rt().block_on(async {
            let (out, _) = exchange_with(
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
                10,
                false,
            )
            .await;
            assert_eq!(out, Err(ErrorClass::Protocol));
        });
    }

    #[test]
    fn truncated_response_is_a_reset() {
        rt().block_on(async {
            let (out, _) = exchange_with(
                b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhel",
                100,
                false,
            )
            .await;
            assert_eq!(out, Err(ErrorClass::Reset));
            let (out, _) = exchange_with(b"", 100, false).await;
            assert_eq!(out, Err(ErrorClass::Reset));
        });
    }

    #[test]
    fn skips_interim_responses_and_honours_connection_close() {
        rt().block_on(async {
            let resp = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n";
            let out = exchange_with(resp, 10, false).await.0.unwrap();
            assert_eq!((out.status, out.reusable), (204, false));
        });
    }

    #[test]
    fn encodes_host_length_and_body() {
        let req = Request {
            method: http::Method::POST,
            path: "/x?y".into(),
            headers: vec![("X-A".into(), "1".into())],
            body: Bytes::from_static(b"abc"),
        };
        let mut out = Vec::new();
        encode_request(&req, "h:8", &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("POST /x?y HTTP/1.1\r\nHost: h:8\r\n"));
        assert!(text.contains("X-A: 1\r\nContent-Length: 3\r\n\r\nabc"));
    }

    #[test]
    fn parses_chunk_sizes() {
        assert_eq!(parse_chunk_size(b"1aF"), Ok(0x1af));
        assert_eq!(parse_chunk_size(b"0;ext"), Ok(0));
        assert_eq!(parse_chunk_size(b"xyz"), Err(ErrorClass::Protocol));
        assert_eq!(parse_chunk_size(b""), Err(ErrorClass::Protocol));
    }
}
