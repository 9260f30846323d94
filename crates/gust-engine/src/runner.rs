//! The run: worker threads, load models, deadline and cancellation.
//!
//! Each worker is an OS thread with a current-thread tokio runtime and a `LocalSet`;
//! it owns its connections and its interval stats, so the hot path takes no lock. The
//! only shared state is a handful of atomics (in-flight gauge and peak, iteration
//! tickets). Budgets are global: slots, connections and open-model sequence numbers
//! are split across workers so that the totals are exactly what was asked.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::Full;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::config::{ConfigError, LoadModel, RunConfig, ThinkTime};
use crate::http1::{Capture, H1Conn, encode_request};
use crate::metrics::{Aggregator, ErrorClass, IntervalStats, Report, RunEvent, lag_summary};
use crate::pacer::Pacer;
use crate::schedule::{OpenSchedule, Profile, Rng, slot_active};
use crate::source::{Request, ResponseInterest, ResponseView, WorkerSource};
use crate::transport::{Connector, H2Sender, Stream, h2_exchange, h2_handshake};

type Conn = H1Conn<Stream>;

enum WorkerMsg {
    Tick {
        worker: usize,
        index: u64,
        stats: Box<IntervalStats>,
    },
    Done {
        worker: usize,
        cpu: Duration,
    },
}

struct Shared {
    cfg: RunConfig,
    workers: usize,
    connector: Connector,
    start: Instant,
    deadline: Option<Instant>,
    in_flight: AtomicU64,
    peak_in_flight: AtomicU64,
    /// Closed model: next global sequence number / iteration ticket.
    tickets: AtomicU64,
    /// Static source encoded once for HTTP/1.1.
    static_h1: Option<Bytes>,
    static_req: Option<Request>,
    is_head: bool,
    stop: watch::Receiver<bool>,
    /// Mirror of `stop` for the hot path: a relaxed load instead of the watch lock.
    stopped: Arc<AtomicBool>,
    tx: mpsc::Sender<WorkerMsg>,
}

impl Shared {
    fn enter_flight(&self) {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        // Read before writing: the peak rarely changes, and a plain load keeps the
        // cache line shared between workers.
        if now > self.peak_in_flight.load(Ordering::Relaxed) {
            self.peak_in_flight.fetch_max(now, Ordering::Relaxed);
        }
    }

    /// Admit a request unless `max_in_flight` is reached.
    fn try_enter_flight(&self, max: usize) -> bool {
        let max = max as u64;
        let admitted = self
            .in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            });
        match admitted {
            Ok(prev) => {
                self.peak_in_flight.fetch_max(prev + 1, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
    }

    fn past_deadline(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| now >= d) || self.stopped.load(Ordering::Relaxed)
    }

    fn elapsed_us(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.start).as_micros() as u64
    }
}

/// Stops a running run early (same path as reaching the deadline: no new requests,
/// in-flight ones get the grace period, then are cancelled).
#[derive(Clone)]
pub struct StopHandle {
    wake: Arc<watch::Sender<bool>>,
    stopped: Arc<AtomicBool>,
}

impl StopHandle {
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        let _ = self.wake.send(true);
    }
}

/// A started run.
pub struct RunHandle {
    events: Option<tokio::sync::mpsc::UnboundedReceiver<RunEvent>>,
    stop: StopHandle,
    aggregator: JoinHandle<Report>,
}

impl RunHandle {
    /// The live event stream (ticks and whole seconds). Can be taken once; events are
    /// discarded if nobody takes it.
    pub fn take_events(&mut self) -> Option<tokio::sync::mpsc::UnboundedReceiver<RunEvent>> {
        self.events.take()
    }

    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// Block until the run is over and return its report.
    pub fn wait(self) -> Report {
        drop(self.events);
        match self.aggregator.join() {
            Ok(report) => report,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

/// Validate, start and wait: the one-call form.
pub fn run(cfg: RunConfig) -> Result<Report, ConfigError> {
    Ok(start(cfg)?.wait())
}

fn share(total: usize, parts: usize, index: usize) -> usize {
    total / parts + usize::from(index < total % parts)
}

/// Start a run on its own threads. Errors are configuration problems found while
/// preparing (TLS files); nothing has been sent when one is returned.
pub fn start(cfg: RunConfig) -> Result<RunHandle, ConfigError> {
    let connector = Connector::new(&cfg)?;
    // More workers than slots/connections would leave some idle (or, for open
    // HTTP/1.1, with no connection to use), so cap them.
    let limit = match &cfg.model {
        LoadModel::Closed { concurrency, .. } if !cfg.http2 => *concurrency,
        _ => cfg.connections,
    };
    let workers = cfg.workers.min(limit).max(1);
    let static_req = cfg.source.as_static().cloned();
    let authority = cfg.target.authority();
    let static_h1 = static_req.as_ref().map(|r| {
        let mut out = Vec::new();
        encode_request(r, &authority, &mut out);
        Bytes::from(out)
    });
    let is_head = static_req
        .as_ref()
        .is_some_and(|r| r.method == http::Method::HEAD);
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let (event_tx, event_rx) = tokio::sync::mpsc::unbounded_channel();
    let start = Instant::now() + Duration::from_millis(20);
    let shared = Arc::new(Shared {
        deadline: cfg.duration.map(|d| start + d),
        cfg,
        workers,
        connector,
        start,
        in_flight: AtomicU64::new(0),
        peak_in_flight: AtomicU64::new(0),
        tickets: AtomicU64::new(0),
        static_h1,
        static_req,
        is_head,
        stop: stop_rx,
        stopped: Arc::clone(&stopped),
        tx,
    });
    let mut threads = Vec::with_capacity(workers);
    for w in 0..workers {
        let shared = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name(format!("gust-worker-{w}"))
            .spawn(move || worker_main(shared, w));
        match spawned {
            Ok(t) => threads.push(t),
            Err(e) => {
                let _ = stop_tx.send(true);
                return Err(ConfigError {
                    field: "workers",
                    reason: format!("cannot start worker thread: {e}"),
                });
            }
        }
    }
    let aggregator = std::thread::Builder::new()
        .name("gust-aggregator".into())
        .spawn(move || aggregate(shared, rx, event_tx, threads))
        .map_err(|e| ConfigError {
            field: "workers",
            reason: format!("cannot start aggregator thread: {e}"),
        })?;
    Ok(RunHandle {
        events: Some(event_rx),
        stop: StopHandle {
            wake: Arc::new(stop_tx),
            stopped,
        },
        aggregator,
    })
}

fn aggregate(
    shared: Arc<Shared>,
    rx: mpsc::Receiver<WorkerMsg>,
    events: tokio::sync::mpsc::UnboundedSender<RunEvent>,
    threads: Vec<JoinHandle<()>>,
) -> Report {
    let cpu_start = thread_cpu();
    let cfg = &shared.cfg;
    let mut agg = Aggregator::new(shared.workers, cfg.tick);
    let mut cpu = Duration::ZERO;
    let mut done = 0;
    while done < shared.workers {
        let Ok(msg) = rx.recv() else { break };
        let in_flight = shared.in_flight.load(Ordering::Relaxed);
        let emitted = match msg {
            WorkerMsg::Tick {
                worker,
                index,
                stats,
            } => agg.add(worker, index, &stats, in_flight),
            WorkerMsg::Done { worker, cpu: c } => {
                done += 1;
                cpu += c;
                agg.worker_done(worker, in_flight)
            }
        };
        for t in emitted.ticks {
            let _ = events.send(RunEvent::Tick(t));
        }
        for (sample, latency) in emitted.seconds {
            let _ = events.send(RunEvent::Second { sample, latency });
        }
    }
    for t in threads {
        let _ = t.join();
    }
    let elapsed = shared.start.elapsed();
    cpu += thread_cpu().saturating_sub(cpu_start);
    let total = &agg.total;
    let sending = match cfg.duration {
        Some(d) => d.min(elapsed),
        None => elapsed,
    };
    let responses = total.responses();
    Report {
        url: format!(
            "{}://{}{}",
            if cfg.target.tls { "https" } else { "http" },
            cfg.target.authority(),
            cfg.target.path
        ),
        model: match cfg.model {
            LoadModel::Closed { .. } => "closed",
            LoadModel::Open { .. } => "open",
        },
        workers: shared.workers,
        connections: cfg.connections,
        duration_s: cfg.duration.map(|d| d.as_secs_f64()),
        elapsed_s: elapsed.as_secs_f64(),
        sent: total.sent,
        responses,
        successes: total.successes,
        failures: total.failures,
        dropped: total.dropped,
        cancelled: total.error_count(ErrorClass::Cancelled),
        error_rate: crate::metrics::error_rate(total.failures, total.successes),
        rps: if sending.is_zero() {
            0.0
        } else {
            responses as f64 / sending.as_secs_f64()
        },
        latency: crate::metrics::LatencySummary::of(&total.latency),
        service: crate::metrics::LatencySummary::of(&total.service),
        latency_corrected: matches!(cfg.model, LoadModel::Open { .. }),
        status: total.status_map(),
        errors: total.error_map(),
        bytes_in: total.bytes_in,
        bytes_out: total.bytes_out,
        connections_opened: total.connections_opened,
        peak_in_flight: shared.peak_in_flight.load(Ordering::Relaxed),
        generator_lag: lag_summary(total),
        last_send_offset_us: total.last_send_us,
        client_cpu_s: cpu.as_secs_f64(),
        stopped: shared.stopped.load(Ordering::Relaxed),
        series: std::mem::take(&mut agg.series),
        latency_histogram: total.latency.clone(),
        service_histogram: total.service.clone(),
    }
}

/// CPU time of the calling thread (user + system). Workers and the aggregating
/// thread each take their own delta, so the sum is the engine's own CPU and not
/// that of the process embedding it (a server under test in the same process).
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// Idle HTTP/1.1 connections of one worker (open model), with a FIFO of requests
/// waiting for one. A lease is either a reused connection or the right to open one.
struct Pool {
    idle: Vec<Conn>,
    open: usize,
    budget: usize,
    waiters: VecDeque<oneshot::Sender<Lease>>,
}

enum Lease {
    Reuse(Conn),
    Fresh,
}

struct Worker {
    shared: Arc<Shared>,
    index: usize,
    stats: RefCell<IntervalStats>,
    source: RefCell<Box<dyn WorkerSource>>,
    interest: ResponseInterest,
    pool: RefCell<Pool>,
    h2: Vec<tokio::sync::Mutex<Option<H2Sender>>>,
    h2_next: Cell<usize>,
    next_tick: Cell<u64>,
    next_seq: Cell<u64>,
    outstanding: Cell<usize>,
    idle_notify: tokio::sync::Notify,
    rng: RefCell<Rng>,
}

/// Keeps the in-flight gauge honest and reports a request as cancelled if its future
/// is dropped (grace expired) before it finished.
struct FlightGuard<'a> {
    worker: &'a Worker,
    finished: bool,
    /// Set once the request reached the wire (and was counted as sent).
    wrote: Cell<bool>,
}

impl<'a> FlightGuard<'a> {
    fn new(worker: &'a Worker) -> Self {
        Self {
            worker,
            finished: false,
            wrote: Cell::new(false),
        }
    }
}

impl Drop for FlightGuard<'_> {
    fn drop(&mut self) {
        self.worker.shared.in_flight.fetch_sub(1, Ordering::Relaxed);
        if !self.finished {
            let mut stats = self.worker.stats.borrow_mut();
            if !self.wrote.get() {
                stats.sent += 1;
            }
            stats.record_error(ErrorClass::Cancelled);
        }
    }
}

/// Sends the worker's `Done` when dropped, so the aggregator is released even if the
/// worker thread unwinds (a panicking `RequestSource`, say) instead of waiting forever.
struct DoneOnDrop {
    tx: mpsc::Sender<WorkerMsg>,
    worker: usize,
    cpu_start: Duration,
}

impl Drop for DoneOnDrop {
    fn drop(&mut self) {
        let _ = self.tx.send(WorkerMsg::Done {
            worker: self.worker,
            cpu: thread_cpu().saturating_sub(self.cpu_start),
        });
    }
}

fn worker_main(shared: Arc<Shared>, index: usize) {
    let _done = DoneOnDrop {
        tx: shared.tx.clone(),
        worker: index,
        cpu_start: thread_cpu(),
    };
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    let cfg = &shared.cfg;
    let source = cfg.source.for_worker(index);
    let interest = source.interest();
    let h2_conns = if cfg.http2 {
        share(cfg.connections, shared.workers, index).max(1)
    } else {
        0
    };
    let worker = Rc::new(Worker {
        index,
        stats: RefCell::new(IntervalStats::new()),
        source: RefCell::new(source),
        interest,
        pool: RefCell::new(Pool {
            idle: Vec::new(),
            open: 0,
            budget: share(cfg.connections, shared.workers, index),
            waiters: VecDeque::new(),
        }),
        h2: (0..h2_conns)
            .map(|_| tokio::sync::Mutex::new(None))
            .collect(),
        h2_next: Cell::new(0),
        next_tick: Cell::new(0),
        next_seq: Cell::new(0),
        outstanding: Cell::new(0),
        idle_notify: tokio::sync::Notify::new(),
        rng: RefCell::new(Rng::new(index as u64 + 1)),
        shared: Arc::clone(&shared),
    });
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, worker_run(Rc::clone(&worker)));
    // Dropping the LocalSet drops request tasks still queued or in flight; their
    // guards count them as cancelled before the final flush below.
    drop(local);
    drop(rt);
    worker.flush();
}

async fn worker_run(worker: Rc<Worker>) {
    let shared = Arc::clone(&worker.shared);
    tokio::time::sleep_until(shared.start).await;
    let ticker = tokio::task::spawn_local(ticker(Rc::clone(&worker)));
    let load = async {
        match &shared.cfg.model {
            LoadModel::Closed {
                concurrency,
                stages,
                think_time,
            } => {
                let profile = (!stages.is_empty()).then(|| Profile::stages(stages));
                let slots: Vec<_> = (worker.index..*concurrency)
                    .step_by(shared.workers)
                    .map(|slot| {
                        tokio::task::spawn_local(closed_slot(
                            Rc::clone(&worker),
                            slot,
                            profile.clone(),
                            *think_time,
                        ))
                    })
                    .collect();
                for s in slots {
                    let _ = s.await;
                }
            }
            LoadModel::Open { rate, stages } => {
                let profile = if stages.is_empty() {
                    Profile::constant(*rate, shared.cfg.duration)
                } else {
                    Profile::stages(stages)
                };
                open_generator(Rc::clone(&worker), profile).await;
            }
        }
    };
    let mut stop = shared.stop.clone();
    let hard_end = async {
        let deadline = async {
            match shared.deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = deadline => {}
            _ = stop.wait_for(|stopped| *stopped) => {}
        }
        tokio::time::sleep(shared.cfg.grace).await;
    };
    tokio::select! {
        _ = load => {}
        _ = hard_end => {}
    }
    ticker.abort();
}

async fn ticker(worker: Rc<Worker>) {
    let shared = Arc::clone(&worker.shared);
    loop {
        let n = worker.next_tick.get();
        let boundary = shared.start + shared.cfg.tick * (n as u32 + 1);
        tokio::time::sleep_until(boundary).await;
        worker.flush();
    }
}

impl Worker {
    /// Hand the current interval to the aggregator under the next tick index.
    fn flush(&self) {
        let n = self.next_tick.get();
        let snapshot = {
            let mut stats = self.stats.borrow_mut();
            let snapshot = stats.clone();
            stats.reset();
            snapshot
        };
        self.next_tick.set(n + 1);
        let _ = self.shared.tx.send(WorkerMsg::Tick {
            worker: self.index,
            index: n,
            stats: Box::new(snapshot),
        });
    }

    async fn acquire(&self) -> Lease {
        let rx = {
            let mut pool = self.pool.borrow_mut();
            if let Some(c) = pool.idle.pop() {
                return Lease::Reuse(c);
            }
            if pool.open < pool.budget {
                pool.open += 1;
                return Lease::Fresh;
            }
            let (tx, rx) = oneshot::channel();
            pool.waiters.push_back(tx);
            rx
        };
        // The pool never drops a waiter's sender without sending, except when the
        // worker is shutting down; then opening a connection is moot.
        rx.await.unwrap_or(Lease::Fresh)
    }

    fn release(&self, conn: Option<Conn>) {
        let mut pool = self.pool.borrow_mut();
        let mut lease = match conn {
            Some(c) => Lease::Reuse(c),
            None => Lease::Fresh,
        };
        while let Some(waiter) = pool.waiters.pop_front() {
            match waiter.send(lease) {
                Ok(()) => return,
                Err(back) => lease = back,
            }
        }
        match lease {
            Lease::Reuse(c) => pool.idle.push(c),
            Lease::Fresh => pool.open -= 1,
        }
    }

    /// Send one request (already admitted and counted in flight) and record the result.
    /// `conn` is the HTTP/1.1 connection to use (opened if `None`, cleared if it died).
    /// `timer` is the slot's reusable timeout timer (closed model): resetting it to a
    /// later deadline only updates an atomic, whereas a fresh `timeout()` per request
    /// takes the timer driver's lock twice (register and cancel).
    async fn perform(
        &self,
        conn: &mut Option<Conn>,
        seq: u64,
        intended: Instant,
        wrote: &Cell<bool>,
        timer: Option<Pin<&mut tokio::time::Sleep>>,
    ) {
        let timeout = self.shared.cfg.timeout;
        let exchange = self.exchange(conn, seq, intended, wrote);
        let result = match timer {
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
        };
        let class = match result {
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
        {
            let mut stats = self.stats.borrow_mut();
            // A request that failed before reaching the wire (refused, TLS, cancelled
            // while queued) still counts as sent: it was issued and it failed.
            if !wrote.get() {
                stats.sent += 1;
            }
            stats.record_error(class);
        }
        if self.interest != ResponseInterest::Nothing {
            self.source.borrow_mut().on_failure(seq, class);
        }
    }

    async fn exchange(
        &self,
        conn: &mut Option<Conn>,
        seq: u64,
        intended: Instant,
        wrote: &Cell<bool>,
    ) -> Result<(), ErrorClass> {
        let shared = &*self.shared;
        let dynamic = if shared.static_req.is_none() {
            Some(self.source.borrow_mut().next_request(seq))
        } else {
            None
        };
        if shared.cfg.http2 {
            return self.exchange_h2(dynamic, seq, intended, wrote).await;
        }
        if conn.is_none() {
            let stream = shared.connector.connect().await?;
            self.stats.borrow_mut().connections_opened += 1;
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
        let capture = match self.interest {
            ResponseInterest::Nothing => Capture::Nothing,
            ResponseInterest::Head => Capture::Head(&mut headers),
            ResponseInterest::Body => Capture::Body(&mut headers, &mut body),
        };
        let outcome = c
            .exchange(bytes, is_head, shared.cfg.max_body, capture)
            .await?;
        if !outcome.reusable {
            *conn = None;
        }
        self.complete(
            seq,
            intended,
            sent_at,
            outcome.status,
            outcome.bytes_in,
            &headers,
            &body,
        );
        Ok(())
    }

    async fn exchange_h2(
        &self,
        dynamic: Option<Request>,
        seq: u64,
        intended: Instant,
        wrote: &Cell<bool>,
    ) -> Result<(), ErrorClass> {
        let shared = &*self.shared;
        let i = self.h2_next.get();
        self.h2_next.set((i + 1) % self.h2.len().max(1));
        let mut sender = {
            let mut slot = self.h2.get(i).ok_or(ErrorClass::Connect)?.lock().await;
            match slot.as_ref() {
                Some(s) if !s.is_closed() => s.clone(),
                _ => {
                    let stream = shared.connector.connect().await?;
                    let s = h2_handshake(stream).await?;
                    self.stats.borrow_mut().connections_opened += 1;
                    *slot = Some(s.clone());
                    s
                }
            }
        };
        let req = match (&dynamic, &shared.static_req) {
            (Some(r), _) | (None, Some(r)) => r,
            (None, None) => return Err(ErrorClass::Protocol),
        };
        let target = &shared.cfg.target;
        let uri = format!(
            "{}://{}{}",
            if target.tls { "https" } else { "http" },
            target.authority(),
            req.path
        );
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
        let want_body = self.interest == ResponseInterest::Body;
        let out = h2_exchange(
            &mut sender,
            request,
            shared.cfg.max_body,
            want_body.then_some(&mut body),
        )
        .await?;
        self.complete(
            seq,
            intended,
            sent_at,
            out.status,
            out.bytes_in,
            &out.headers,
            &body,
        );
        Ok(())
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
    ) {
        let now = Instant::now();
        let latency = now.saturating_duration_since(intended).as_micros() as u64;
        let service = now.saturating_duration_since(sent_at).as_micros() as u64;
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

async fn closed_slot(worker: Rc<Worker>, slot: usize, profile: Option<Profile>, think: ThinkTime) {
    let shared = Arc::clone(&worker.shared);
    let mut conn: Option<Conn> = None;
    let timer = tokio::time::sleep(shared.cfg.timeout);
    tokio::pin!(timer);
    loop {
        let now = Instant::now();
        if shared.past_deadline(now) {
            break;
        }
        if let Some(p) = &profile {
            let t = now.saturating_duration_since(shared.start).as_secs_f64();
            if !slot_active(p, slot, t) {
                conn = None;
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        }
        // Iteration-bound runs need one global ticket counter; otherwise sequence
        // numbers are made unique per worker without touching shared memory.
        let seq = match shared.cfg.iterations {
            Some(m) => {
                let seq = shared.tickets.fetch_add(1, Ordering::Relaxed);
                if seq >= m {
                    break;
                }
                seq
            }
            None => {
                let n = worker.next_seq.get();
                worker.next_seq.set(n + 1);
                n * shared.workers as u64 + worker.index as u64
            }
        };
        shared.enter_flight();
        let mut guard = FlightGuard::new(&worker);
        worker
            .perform(&mut conn, seq, now, &guard.wrote, Some(timer.as_mut()))
            .await;
        guard.finished = true;
        drop(guard);
        let pause = match think {
            ThinkTime::None => None,
            ThinkTime::Fixed { time } => Some(time),
            ThinkTime::Exponential { mean } => Some(worker.rng.borrow_mut().exponential(mean)),
        };
        if let Some(p) = pause {
            // A think time never outlasts the run: a slot that would wake after
            // the deadline wakes at it and stops, instead of holding the run
            // open until the grace period ends.
            let wake = Instant::now() + p;
            match shared.deadline {
                Some(d) if wake > d => tokio::time::sleep_until(d).await,
                _ => tokio::time::sleep_until(wake).await,
            }
        }
    }
}

async fn open_generator(worker: Rc<Worker>, profile: Profile) {
    let shared = Arc::clone(&worker.shared);
    let cfg = &shared.cfg;
    let mut schedule = OpenSchedule::new(profile);
    let pacer = Pacer::new();
    let mut stop = shared.stop.clone();
    let mut k = worker.index as u64;
    let step = shared.workers as u64;
    loop {
        if cfg.iterations.is_some_and(|m| k >= m) {
            break;
        }
        let Some(due) = schedule.due(k) else { break };
        if cfg.duration.is_some_and(|d| due >= d) {
            break;
        }
        let due_at = shared.start + due;
        if due_at > Instant::now() {
            tokio::select! {
                _ = pacer.sleep_until(due_at) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        let now = Instant::now();
        if shared.past_deadline(now) {
            if shared.stopped.load(Ordering::Relaxed) {
                break;
            }
            // Came due before the deadline but the generator only got here after it:
            // it is not sent, and counts as dropped so sent + dropped stays exact.
            worker.stats.borrow_mut().dropped += 1;
            k += step;
            continue;
        }
        worker
            .stats
            .borrow_mut()
            .record_lag(now.saturating_duration_since(due_at).as_micros() as u64);
        if !shared.try_enter_flight(cfg.max_in_flight) {
            worker.stats.borrow_mut().dropped += 1;
        } else {
            worker.outstanding.set(worker.outstanding.get() + 1);
            tokio::task::spawn_local(open_request(Rc::clone(&worker), k, due_at));
        }
        k += step;
    }
    while worker.outstanding.get() > 0 {
        worker.idle_notify.notified().await;
    }
}

async fn open_request(worker: Rc<Worker>, seq: u64, intended: Instant) {
    let mut guard = FlightGuard::new(&worker);
    if worker.shared.cfg.http2 {
        worker
            .perform(&mut None, seq, intended, &guard.wrote, None)
            .await;
    } else {
        let mut conn = match worker.acquire().await {
            Lease::Reuse(c) => Some(c),
            Lease::Fresh => None,
        };
        worker
            .perform(&mut conn, seq, intended, &guard.wrote, None)
            .await;
        worker.release(conn);
    }
    guard.finished = true;
    drop(guard);
    worker.outstanding.set(worker.outstanding.get() - 1);
    if worker.outstanding.get() == 0 {
        worker.idle_notify.notify_waiters();
    }
}
