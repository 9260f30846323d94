//! One request on the wire: the HTTP/1.1 exchange over the worker's connection or
//! the HTTP/2 exchange over one of its multiplexed connections, bounded by the
//! request timeout, and what it leaves in the worker's stats and source.

use std::cell::Cell;
use std::pin::Pin;

use http::HeaderMap;
use http_body_util::Full;
use tokio::time::Instant;

use crate::http1::{Capture, H1Conn, encode_request};
use crate::metrics::ErrorClass;
use crate::runner::worker::{Conn, Worker};
use crate::scenario::extract::Response;
use crate::scenario::{Step, StepVerdict};
use crate::source::{Request, ResponseInterest, ResponseView};
use crate::spec::LoadModel;
use crate::transport::{Stream, h2_exchange, h2_handshake};

/// A keep-alive connection idle this long is checked for a close by its peer
/// before reuse. Servers close idle connections after seconds (warrant's
/// `http.idle_timeout` is 30 s, nginx's 75 s), never sooner than this.
const PROBE_IDLE_AFTER: std::time::Duration = std::time::Duration::from_millis(500);

/// Ask the server to close after its response (`--no-keepalive`), unless the request
/// already says what to do with the connection.
pub(super) fn request_close(req: &mut Request) {
    if !req
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("connection"))
    {
        req.headers.push(("Connection".into(), "close".into()));
    }
}

/// Run `exchange` within the request timeout; `Err(())` when it ran out. `timer` is
/// the slot's reusable timeout timer (closed model): resetting it to a later deadline
/// only updates an atomic, whereas a fresh `timeout()` per request takes the timer
/// driver's lock twice (register and cancel).
pub(super) async fn within_timeout<F: std::future::Future>(
    timeout: std::time::Duration,
    timer: Option<Pin<&mut tokio::time::Sleep>>,
    exchange: F,
) -> Result<F::Output, ()> {
    match timer {
        Some(mut timer) => {
            timer.as_mut().reset(Instant::now() + timeout);
            tokio::select! {
                biased;
                r = exchange => Ok(r),
                _ = timer => Err(()),
            }
        }
        None => tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| ()),
    }
}

impl Worker {
    /// Send one request (already admitted and counted in flight) and record the result.
    /// `conn` is the HTTP/1.1 connection to use (opened if `None`, cleared if it died);
    /// `timer` as in [`within_timeout`].
    pub(super) async fn perform(
        &self,
        conn: &mut Option<Conn>,
        seq: u64,
        intended: Instant,
        wrote: &Cell<bool>,
        timer: Option<Pin<&mut tokio::time::Sleep>>,
    ) {
        let exchange = self.exchange_with(conn, seq, intended, wrote, None);
        let class = match within_timeout(self.shared.cfg.timeout, timer, exchange).await {
            Ok(Ok(())) => return,
            Ok(Err(ErrorClass::Cancelled))
                if matches!(self.shared.cfg.model, LoadModel::Closed { .. }) =>
            {
                // A closed slot that reached the deadline while connecting simply
                // stops: nothing was written, and no schedule promised this request.
                return;
            }
            Ok(Err(class)) => class,
            Err(_) => ErrorClass::Timeout,
        };
        *conn = None;
        self.record_failure(wrote.get(), class);
        if self.interest != ResponseInterest::Nothing {
            self.source.borrow_mut().on_failure(seq, class);
        }
    }

    /// One exchange; `step` (scenario runs) supplies the request and receives the
    /// response instead of the run's source.
    pub(super) async fn exchange_with(
        &self,
        conn: &mut Option<Conn>,
        seq: u64,
        intended: Instant,
        wrote: &Cell<bool>,
        mut step: Option<&mut StepCall<'_>>,
    ) -> Result<(), ErrorClass> {
        let shared = &*self.shared;
        let mut dynamic = match step.as_mut() {
            Some(call) => call.request.take(),
            None if shared.static_req.is_none() => Some(self.source.borrow_mut().next_request(seq)),
            None => None,
        };
        if shared.cfg.no_keepalive
            && !shared.cfg.http2
            && let Some(req) = dynamic.as_mut()
        {
            request_close(req);
        }
        let interest = step.as_ref().map_or(self.interest, |c| c.interest());
        if shared.cfg.http2 {
            return self
                .exchange_h2(dynamic, seq, intended, wrote, interest, step)
                .await;
        }
        // A pooled connection the server closed while it idled is dropped
        // before anything is written on it: sending on it would fail a request
        // the server never saw.
        if conn
            .as_mut()
            .is_some_and(|c| c.peer_closed(intended, PROBE_IDLE_AFTER))
        {
            *conn = None;
        }
        if conn.is_none() {
            let stream = self.open_connection().await?;
            *conn = Some(H1Conn::new(stream));
        }
        let Some(c) = conn.as_mut() else {
            return Err(ErrorClass::Connect);
        };
        let encoded;
        let (bytes, is_head): (&[u8], bool) = match (&dynamic, &shared.static_h1) {
            (Some(req), _) => {
                let mut out = Vec::with_capacity(256 + req.body.len());
                encode_request(req, &shared.cfg.target.authority(), &mut out);
                encoded = out;
                (&encoded, req.method == http::Method::HEAD)
            }
            (None, Some(b)) => (b, shared.is_head),
            (None, None) => return Err(ErrorClass::Protocol),
        };
        let sent_at = Instant::now();
        if shared.past_deadline(sent_at) {
            // Connecting took us past the deadline: nothing goes on the wire after it.
            return Err(ErrorClass::Cancelled);
        }
        self.note_send(sent_at, bytes.len(), wrote);
        let mut headers = HeaderMap::new();
        let mut body = Vec::new();
        let capture = match interest {
            ResponseInterest::Nothing => Capture::Nothing,
            ResponseInterest::Head => Capture::Head(&mut headers),
            ResponseInterest::Body => Capture::Body(&mut headers, &mut body),
        };
        let outcome = c
            .exchange(bytes, is_head, shared.cfg.max_body, capture)
            .await?;
        if !outcome.reusable || shared.cfg.no_keepalive {
            *conn = None;
        }
        self.phases
            .borrow_mut()
            .record_ttfb(outcome.first_byte.saturating_duration_since(sent_at));
        self.complete(
            seq,
            intended,
            sent_at,
            outcome.status,
            outcome.bytes_in,
            &headers,
            &body,
            step,
        );
        Ok(())
    }

    async fn exchange_h2(
        &self,
        dynamic: Option<Request>,
        seq: u64,
        intended: Instant,
        wrote: &Cell<bool>,
        interest: ResponseInterest,
        step: Option<&mut StepCall<'_>>,
    ) -> Result<(), ErrorClass> {
        let shared = &*self.shared;
        let i = self.h2_next.get();
        self.h2_next.set((i + 1) % self.h2.len().max(1));
        let mut sender = if shared.cfg.no_keepalive {
            // A connection of its own, dropped (closed) with the sender after the
            // response.
            h2_handshake(self.open_connection().await?).await?
        } else {
            let mut slot = self.h2.get(i).ok_or(ErrorClass::Connect)?.lock().await;
            match slot.as_ref() {
                Some(s) if !s.is_closed() => s.clone(),
                _ => {
                    let s = h2_handshake(self.open_connection().await?).await?;
                    *slot = Some(s.clone());
                    s
                }
            }
        };
        let req = match (&dynamic, &shared.static_req) {
            (Some(r), _) | (None, Some(r)) => r,
            (None, None) => return Err(ErrorClass::Protocol),
        };
        let uri = shared.cfg.target.url_with_path(&req.path);
        let mut builder = http::Request::builder().method(req.method.clone()).uri(uri);
        for (n, v) in &req.headers {
            builder = builder.header(n.as_str(), v.as_str());
        }
        let request = builder
            .body(Full::new(req.body.clone()))
            .map_err(|_| ErrorClass::Protocol)?;
        let sent_at = Instant::now();
        if shared.past_deadline(sent_at) {
            return Err(ErrorClass::Cancelled);
        }
        self.note_send(sent_at, req.body.len() + req.path.len() + 32, wrote);
        let mut body = Vec::new();
        let want_body = interest == ResponseInterest::Body;
        let out = h2_exchange(
            &mut sender,
            request,
            shared.cfg.max_body,
            want_body.then_some(&mut body),
        )
        .await?;
        self.phases
            .borrow_mut()
            .record_ttfb(out.first_byte.saturating_duration_since(sent_at));
        self.complete(
            seq,
            intended,
            sent_at,
            out.status,
            out.bytes_in,
            &out.headers,
            &body,
            step,
        );
        Ok(())
    }

    /// A new connection to the target, counted, with its phases recorded.
    async fn open_connection(&self) -> Result<Stream, ErrorClass> {
        let (stream, timing) = self.shared.connector.connect().await?;
        self.stats.borrow_mut().connections_opened += 1;
        self.phases.borrow_mut().record_connection(&timing);
        Ok(stream)
    }

    fn note_send(&self, at: Instant, bytes: usize, wrote: &Cell<bool>) {
        wrote.set(true);
        let mut stats = self.stats.borrow_mut();
        stats.sent += 1;
        stats.bytes_out += bytes as u64;
        stats.last_send_us = stats.last_send_us.max(self.shared.elapsed_us(at).max(1));
    }

    #[allow(clippy::too_many_arguments)]
    fn complete(
        &self,
        seq: u64,
        intended: Instant,
        sent_at: Instant,
        status: u16,
        bytes_in: u64,
        headers: &HeaderMap,
        body: &[u8],
        step: Option<&mut StepCall<'_>>,
    ) {
        let now = Instant::now();
        let latency = now.saturating_duration_since(intended).as_micros() as u64;
        let service = now.saturating_duration_since(sent_at).as_micros() as u64;
        if let Some(call) = step {
            self.stats.borrow_mut().bytes_in += bytes_in;
            call.record_response(self, status, headers, body, latency, service);
            return;
        }
        let success = self.shared.cfg.success.is_success(status);
        {
            let mut stats = self.stats.borrow_mut();
            stats.record_response(status, success, latency, service);
            stats.bytes_in += bytes_in;
        }
        if self.interest != ResponseInterest::Nothing {
            self.source.borrow_mut().on_response(
                seq,
                &ResponseView {
                    status,
                    headers,
                    body,
                },
            );
        }
    }
}

/// One step's request on its way through the exchange, and what came back.
pub(super) struct StepCall<'a> {
    pub(super) index: usize,
    pub(super) step: &'a Step,
    pub(super) request: Option<Request>,
    pub(super) vars: &'a mut [String],
    pub(super) verdict: Option<StepVerdict>,
}

impl StepCall<'_> {
    pub(super) fn interest(&self) -> ResponseInterest {
        self.step.interest
    }

    /// Judge a response against the step's checks and record it in the run's
    /// totals and the step's stats (a failed check is a failure in both).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_response(
        &mut self,
        worker: &Worker,
        status: u16,
        headers: &HeaderMap,
        body: &[u8],
        latency_us: u64,
        service_us: u64,
    ) {
        let verdict = self.step.judge(
            &Response::new(status, headers, body),
            &worker.shared.cfg.success,
            self.vars,
        );
        let passed = verdict.passed();
        let mut stats = worker.stats.borrow_mut();
        stats.record_response(status, passed, latency_us, service_us);
        if let Some(s) = stats.scenario.steps.get_mut(self.index) {
            s.sent += 1;
            s.record_response(status, passed, verdict.is_check_failure(), latency_us);
        }
        self.verdict = Some(verdict);
    }
}
