//! Acceptance tests against real sockets on 127.0.0.1: the built-in target and small
//! misbehaving servers. All tests take one lock so timing-sensitive runs never share
//! the (2-core) machine with each other.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

mod common;

use common::{closed, open, serial};
use gust_engine::{
    ErrorClass, LoadModel, Report, RunSpec, Stall, TargetConfig, TargetServer, ThinkTime,
};

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn target(cfg: TargetConfig) -> TargetServer {
    TargetServer::start(loopback(), cfg).unwrap()
}

fn run(spec: &RunSpec) -> Report {
    gust_engine::run(spec.validate().unwrap()).unwrap()
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

#[test]
fn open_model_rate_fidelity_at_50_1500_and_20000_per_second() {
    let _serial = serial();
    let server = target(TargetConfig {
        threads: 1,
        ..TargetConfig::default()
    });
    for rate in [50.0, 1_500.0, 20_000.0] {
        let duration = 5.0;
        let mut spec = open(&server.url(), rate, secs(duration));
        spec.workers = Some(2);
        spec.connections = Some(128);
        let r = run(&spec);
        let expected = rate * duration;
        let delivered = (r.sent + r.dropped) as f64;
        println!(
            "rate {rate}: sent {} dropped {} responses {} lag mean {:.0} µs max {} µs last send at {} µs",
            r.sent,
            r.dropped,
            r.responses,
            r.generator_lag.mean_us,
            r.generator_lag.max_us,
            r.last_send_offset_us
        );
        assert!(
            (delivered - expected).abs() <= expected * 0.005,
            "rate {rate}: sent + dropped = {delivered}, expected {expected} ± 0.5 %"
        );
        assert!(
            r.last_send_offset_us < (duration * 1e6) as u64,
            "rate {rate}: a request was sent {} µs after start, past the {duration} s deadline",
            r.last_send_offset_us
        );
        assert_eq!(
            r.sent,
            r.successes + r.failures,
            "every sent request is accounted for"
        );
        // Requests still queued for a connection at the deadline are cancelled, not
        // sent late; anything else would be a transport problem.
        assert!(
            r.errors.keys().all(|k| k == ErrorClass::Cancelled.as_str()),
            "rate {rate}: errors {:?}",
            r.errors
        );
    }
}

/// A target that stalls every response for 1 s out of every 5 s, driven in the open
/// model at 200 req/s through only 4 connections (it otherwise answers in well
/// under a millisecond).
///
/// Expectation, derived: the run covers exactly two 5 s periods, so a fraction
/// f = 1 s / 5 s = 0.2 of the schedule comes due inside a stall. A request due at
/// `u` seconds into a stall completes when the stall ends (plus a drain of a few
/// ms): its latency from the intended send time is `1 − u`, with `u` uniform on
/// [0, 1). Requests outside stalls take ≈ 0. So for x in [0, 1):
///   P(latency > x) = f · (1 − x).
/// The p99 is the x with P(latency > x) = 0.01: 0.2 · (1 − x) = 0.01 → x = 0.95 s.
/// Gust's corrected p99 must be ≥ 500 ms and within 20 % of 950 ms.
///
/// The uncorrected (service-time) view shows what coordinated omission hides: only
/// the 4 requests on the wire when a stall begins see it; the rest wait for a
/// connection and are then served fast, so service p99 stays small.
#[test]
fn coordinated_omission_corrected_p99_shows_the_stall() {
    let _serial = serial();
    let server = target(TargetConfig {
        stall: Some(Stall {
            every: secs(5.0),
            length: secs(1.0),
        }),
        threads: 1,
        ..TargetConfig::default()
    });
    let target_started = Instant::now();
    let mut spec = open(&server.url(), 200.0, secs(10.0));
    spec.workers = Some(1);
    spec.connections = Some(4);
    let cfg = spec.validate().unwrap();
    // Phase the run to cover [0.5 s, 10.5 s) of the target's clock: both stalls
    // ([4, 5) and [9, 10)) fall fully inside, and the backlog of the second drains
    // before the deadline instead of being cancelled by it.
    std::thread::sleep(secs(0.5).saturating_sub(target_started.elapsed()));
    let r = gust_engine::run(cfg).unwrap();
    let expected_p99_us = 950_000.0;
    println!(
        "corrected p50 {} p99 {} max {} µs | service p50 {} p99 {} max {} µs | sent {} dropped {}",
        r.latency.p50_us,
        r.latency.p99_us,
        r.latency.max_us,
        r.service.p50_us,
        r.service.p99_us,
        r.service.max_us,
        r.sent,
        r.dropped
    );
    assert!(r.latency_corrected);
    assert_eq!(r.errors.len(), 0, "{:?}", r.errors);
    assert!(
        r.latency.p99_us >= 500_000,
        "corrected p99 {} µs hides the stall",
        r.latency.p99_us
    );
    let ratio = r.latency.p99_us as f64 / expected_p99_us;
    assert!(
        (0.8..=1.2).contains(&ratio),
        "corrected p99 {} µs is not within 20 % of the analytical {expected_p99_us} µs",
        r.latency.p99_us
    );
    assert!(
        r.service.p99_us < r.latency.p99_us / 2,
        "service p99 {} µs should be far below corrected p99 {} µs",
        r.service.p99_us,
        r.latency.p99_us
    );
}

#[test]
fn closed_model_keeps_exactly_n_in_flight() {
    let _serial = serial();
    let server = target(TargetConfig {
        delay: Duration::from_millis(20),
        threads: 1,
        ..TargetConfig::default()
    });
    let mut spec = closed(&server.url(), 8);
    spec.duration = Some(secs(1.0));
    spec.workers = Some(2);
    let r = run(&spec);
    assert_eq!(r.peak_in_flight, 8);
    assert_eq!(r.connections_opened, 8);
    assert!(r.responses > 8 * 10, "only {} responses", r.responses);
    assert_eq!(r.errors.len(), 0, "{:?}", r.errors);
}

#[test]
fn closed_model_iterations_send_exactly_m() {
    let _serial = serial();
    let server = target(TargetConfig::default());
    let mut spec = closed(&server.url(), 7);
    spec.iterations = Some(1_001);
    spec.workers = Some(2);
    let r = run(&spec);
    assert_eq!(r.sent, 1_001);
    assert_eq!(r.responses, 1_001);
    assert_eq!(r.successes, 1_001);
    assert!(r.peak_in_flight <= 7);
}

#[test]
fn open_model_iterations_stop_at_m() {
    let _serial = serial();
    let server = target(TargetConfig::default());
    let mut spec = RunSpec::new(
        server.url(),
        LoadModel::Open {
            rate: 2_000.0,
            stages: vec![],
        },
    );
    spec.iterations = Some(300);
    let r = run(&spec);
    assert_eq!(r.sent + r.dropped, 300);
}

#[test]
fn per_second_series_and_ticks_come_from_the_same_numbers() {
    let _serial = serial();
    let server = target(TargetConfig::default());
    let mut spec = open(&server.url(), 400.0, secs(2.0));
    spec.workers = Some(2);
    let mut handle = gust_engine::start(spec.validate().unwrap()).unwrap();
    let mut events = handle.take_events().unwrap();
    let report = handle.wait();
    let (mut tick_total, mut second_total, mut last_tick) = (0, 0, None);
    while let Ok(e) = events.try_recv() {
        match e {
            gust_engine::RunEvent::Tick(t) => {
                tick_total += t.responses;
                last_tick = Some(t);
            }
            gust_engine::RunEvent::Second { sample, latency } => {
                assert_eq!(latency.len(), sample.responses);
                second_total += sample.responses;
            }
        }
    }
    assert_eq!(tick_total, report.responses);
    assert_eq!(second_total, report.responses);
    assert_eq!(last_tick.unwrap().totals.responses, report.responses);
    assert_eq!(
        report.series.iter().map(|s| s.responses).sum::<u64>(),
        report.responses
    );
    assert!(report.series.len() >= 2);
}

fn fault_server(handler: fn(TcpStream)) -> SocketAddr {
    let listener = TcpListener::bind(loopback()).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || handler(stream));
        }
    });
    addr
}

fn read_request(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    let mut seen = Vec::new();
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    true
}

fn fault_run(addr: SocketAddr, duration: f64) -> (Report, Duration) {
    let mut spec = closed(&format!("http://{addr}/"), 2);
    spec.duration = Some(secs(duration));
    spec.workers = Some(1);
    spec.timeout = Some(secs(5.0));
    spec.grace = Some(secs(0.5));
    spec.max_body = Some(1_000);
    let started = Instant::now();
    let r = run(&spec);
    let took = started.elapsed();
    assert_eq!(
        r.sent,
        r.successes + r.failures,
        "every sent request is accounted for"
    );
    assert!(
        took < secs(duration + 0.5 + 1.5),
        "run took {took:?}, past duration + grace"
    );
    (r, took)
}

fn only_error(r: &Report, class: ErrorClass) {
    assert!(r.error_count(class) > 0, "no {class:?} in {:?}", r.errors);
    assert_eq!(
        r.errors.len(),
        1,
        "expected only {class:?}, got {:?}",
        r.errors
    );
    assert_eq!(r.successes, 0);
}

#[test]
fn classifies_connection_refused() {
    let _serial = serial();
    let addr = TcpListener::bind(loopback()).unwrap().local_addr().unwrap(); // closed at once
    let (r, _) = fault_run(addr, 0.3);
    only_error(&r, ErrorClass::ConnectRefused);
}

#[test]
fn classifies_reset_mid_response() {
    let _serial = serial();
    let addr = fault_server(|mut s| {
        if read_request(&mut s) {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial");
            let _ = s.flush();
            std::thread::sleep(Duration::from_millis(5));
            // SO_LINGER 0 makes close send an RST.
            let sock = socket2_free_linger(s);
            drop(sock);
        }
    });
    let (r, _) = fault_run(addr, 0.3);
    only_error(&r, ErrorClass::Reset);
}

/// Set SO_LINGER to zero through tokio's std conversion, without an extra crate.
fn socket2_free_linger(s: TcpStream) -> TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    s.set_nonblocking(true).unwrap();
    let t = tokio::net::TcpStream::from_std(s).unwrap();
    #[allow(deprecated)]
    t.set_linger(Some(Duration::ZERO)).unwrap();
    t.into_std().unwrap()
}

/// A server that closes keep-alive connections idle for 200 ms, and agents that
/// think 600 ms between requests: each request after the first finds its
/// pooled connection closed by the server. Gust must notice before sending and
/// open a new one, not fail a request the server never saw.
#[test]
fn a_connection_the_server_closed_while_idle_is_not_reused() {
    let _serial = serial();
    let addr = fault_server(|mut s| {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        while read_request(&mut s) {
            if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .is_err()
            {
                return;
            }
        }
    });
    let mut spec = RunSpec::new(
        format!("http://{addr}/"),
        LoadModel::Closed {
            concurrency: 1,
            stages: vec![],
            think_time: ThinkTime::Fixed {
                time: Duration::from_millis(600),
            },
        },
    );
    spec.iterations = Some(4);
    spec.workers = Some(1);
    spec.timeout = Some(secs(5.0));
    let r = run(&spec);
    assert_eq!(r.failures, 0, "{:?}", r.errors);
    assert_eq!(r.successes, 4);
}

#[test]
fn classifies_garbage_status_line() {
    let _serial = serial();
    let addr = fault_server(|mut s| {
        while read_request(&mut s) {
            if s.write_all(b"HTTP/1.1 twohundred OK\r\n\r\n").is_err() {
                return;
            }
        }
    });
    let (r, _) = fault_run(addr, 0.3);
    only_error(&r, ErrorClass::Protocol);
}

#[test]
fn classifies_body_over_max_body() {
    let _serial = serial();
    let server = target(TargetConfig {
        body: vec![b'x'; 5_000],
        ..TargetConfig::default()
    });
    let addr = server.addr();
    let (r, _) = fault_run(addr, 0.3);
    only_error(&r, ErrorClass::BodyTooLarge);
}

#[test]
fn never_answering_target_is_cancelled_after_grace() {
    let _serial = serial();
    let addr = fault_server(|mut s| {
        let _ = read_request(&mut s);
        std::thread::sleep(Duration::from_secs(30));
    });
    let (r, took) = fault_run(addr, 0.5);
    only_error(&r, ErrorClass::Cancelled);
    assert_eq!(r.cancelled, 2, "both slots were in flight at the deadline");
    assert!(took >= secs(1.0), "grace was not honoured: {took:?}");
}

#[test]
fn never_answering_target_times_out_within_the_run() {
    let _serial = serial();
    let addr = fault_server(|mut s| {
        let _ = read_request(&mut s);
        std::thread::sleep(Duration::from_secs(30));
    });
    let mut spec = closed(&format!("http://{addr}/"), 1);
    spec.duration = Some(secs(0.6));
    spec.timeout = Some(secs(0.2));
    spec.workers = Some(1);
    let started = Instant::now();
    let r = run(&spec);
    assert!(started.elapsed() < secs(0.6 + 0.2 + 1.5));
    assert!(r.error_count(ErrorClass::Timeout) >= 2, "{:?}", r.errors);
}

#[test]
fn open_model_drops_at_max_in_flight_and_counts_them() {
    let _serial = serial();
    let server = target(TargetConfig {
        delay: Duration::from_millis(200),
        ..TargetConfig::default()
    });
    let mut spec = open(&server.url(), 500.0, secs(1.0));
    spec.max_in_flight = Some(10);
    spec.connections = Some(10);
    spec.workers = Some(1);
    let r = run(&spec);
    assert_eq!(r.sent + r.dropped, 500);
    assert!(r.dropped > 400, "dropped {}", r.dropped);
    assert_eq!(r.peak_in_flight, 10);
}

#[test]
fn http2_closed_and_open_models_complete_against_h2c_target() {
    let _serial = serial();
    let server = target(TargetConfig {
        http2: true,
        ..TargetConfig::default()
    });
    let mut spec = closed(&server.url(), 16);
    spec.http2 = true;
    spec.iterations = Some(500);
    spec.connections = Some(2);
    spec.workers = Some(2);
    let r = run(&spec);
    assert_eq!((r.sent, r.successes), (500, 500), "{:?}", r.errors);
    assert_eq!(r.connections_opened, 2);
    assert!(r.bytes_in > 0);

    let mut spec = open(&server.url(), 300.0, secs(1.0));
    spec.http2 = true;
    let r = run(&spec);
    assert_eq!(r.sent + r.dropped, 300);
    assert_eq!(r.successes, r.sent, "{:?}", r.errors);
}

/// A dynamic source: distinct paths per request, and a hook that sees every response.
#[test]
fn request_source_builds_each_request_and_sees_each_response() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use gust_engine::{Request, RequestSource, ResponseInterest, ResponseView, WorkerSource};

    struct Counting {
        bodies: Arc<AtomicU64>,
    }
    struct PerWorker {
        bodies: Arc<AtomicU64>,
    }
    impl RequestSource for Counting {
        fn for_worker(&self, _worker: usize) -> Box<dyn WorkerSource> {
            Box::new(PerWorker {
                bodies: Arc::clone(&self.bodies),
            })
        }
    }
    impl WorkerSource for PerWorker {
        fn next_request(&mut self, seq: u64) -> Request {
            Request {
                method: http::Method::POST,
                path: format!("/item/{seq}"),
                headers: vec![("X-Seq".into(), seq.to_string())],
                body: bytes::Bytes::from(format!("payload {seq}")),
            }
        }
        fn interest(&self) -> ResponseInterest {
            ResponseInterest::Body
        }
        fn on_response(&mut self, _seq: u64, response: &ResponseView<'_>) {
            assert_eq!(response.status, 200);
            assert!(response.headers.contains_key("content-length"));
            self.bodies
                .fetch_add(response.body.len() as u64, Ordering::Relaxed);
        }
    }

    let _serial = serial();
    let server = target(TargetConfig::default());
    let bodies = Arc::new(AtomicU64::new(0));
    let mut spec = closed(&server.url(), 4);
    spec.iterations = Some(200);
    let cfg = spec
        .validate_with_source(Some(Arc::new(Counting {
            bodies: Arc::clone(&bodies),
        })))
        .unwrap();
    let r = gust_engine::run(cfg).unwrap();
    assert_eq!(r.successes, 200);
    let body_len = TargetConfig::default().body.len() as u64;
    assert_eq!(bodies.load(Ordering::Relaxed), 200 * body_len);
}

mod tls {
    use super::*;
    use std::sync::Arc;

    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct Fixture {
        dir: std::path::PathBuf,
        addr: SocketAddr,
    }

    /// A TLS server on 127.0.0.1 whose certificate is issued by a fresh CA; it answers
    /// 200 to clients presenting a certificate from that CA and 403 to the others.
    fn tls_server() -> Fixture {
        let dir = std::env::temp_dir().join(format!("gust-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let server_key = KeyPair::generate().unwrap();
        let server_cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&server_key, &issuer)
            .unwrap();
        let client_key = KeyPair::generate().unwrap();
        let client_cert = CertificateParams::new(vec!["client.test".to_string()])
            .unwrap()
            .signed_by(&client_key, &issuer)
            .unwrap();
        std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
        std::fs::write(dir.join("client.pem"), client_cert.pem()).unwrap();
        std::fs::write(dir.join("client.key"), client_key.serialize_pem()).unwrap();

        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca_cert.der().clone()).unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()
        .unwrap();
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                vec![CertificateDer::from(server_cert.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der())),
            )
            .unwrap();
        // Both protocols, so the same fixture checks HTTP/2 negotiated by ALPN.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind(loopback()).unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                while let Ok((sock, _)) = listener.accept().await {
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        let Ok(mut tls) = acceptor.accept(sock).await else {
                            return;
                        };
                        let authenticated = tls.get_ref().1.peer_certificates().is_some();
                        if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                            serve_h2(tls, authenticated).await;
                            return;
                        }
                        let resp: &[u8] = if authenticated {
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                        } else {
                            b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n"
                        };
                        let mut buf = vec![0u8; 4096];
                        let mut seen = Vec::new();
                        loop {
                            match tls.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => seen.extend_from_slice(&buf[..n]),
                            }
                            while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                                seen.drain(..end + 4);
                                if tls.write_all(resp).await.is_err() {
                                    return;
                                }
                            }
                        }
                    });
                }
            });
        });
        Fixture { dir, addr }
    }

    /// HTTP/2 over the TLS stream, with the same 200/403 rule as HTTP/1.1.
    async fn serve_h2(
        tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
        authenticated: bool,
    ) {
        let service = hyper::service::service_fn(move |_req| async move {
            let status = if authenticated { 200 } else { 403 };
            http::Response::builder()
                .status(status)
                .body(http_body_util::Full::new(bytes::Bytes::from_static(b"ok")))
        });
        let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
            .await;
    }

    #[test]
    fn http2_over_tls_negotiated_by_alpn_with_client_certificate() {
        let _serial = serial();
        let f = tls_server();
        let mut s = spec(&f);
        s.http2 = true;
        s.tls.ca_file = Some(f.dir.join("ca.pem"));
        let r = run(&s);
        assert_eq!(r.status.get("403"), Some(&50), "{:?}", r.errors);

        s.tls.cert_file = Some(f.dir.join("client.pem"));
        s.tls.key_file = Some(f.dir.join("client.key"));
        let r = run(&s);
        assert_eq!(r.successes, 50, "{:?} {:?}", r.status, r.errors);
        assert_eq!(r.error_count(ErrorClass::Tls), 0);
    }

    #[test]
    fn no_keepalive_over_tls_handshakes_once_per_request_and_times_each_phase() {
        let _serial = serial();
        let f = tls_server();
        for http2 in [false, true] {
            let mut s = spec(&f);
            s.http2 = http2;
            s.no_keepalive = true;
            s.tls.ca_file = Some(f.dir.join("ca.pem"));
            s.tls.cert_file = Some(f.dir.join("client.pem"));
            s.tls.key_file = Some(f.dir.join("client.key"));
            let r = run(&s);
            assert_eq!(
                r.successes, 50,
                "http2 {http2}: {:?} {:?}",
                r.status, r.errors
            );
            assert_eq!(r.connections_opened, r.responses, "http2 {http2}");
            assert_eq!(r.phases.connect.count, 50);
            assert_eq!(r.phases.tls.count, 50, "every request paid a handshake");
            assert_eq!(r.phases.ttfb.count, 50);
            // An IP literal is not looked up.
            assert_eq!(r.phases.dns.count, 0);
            assert!(r.phases.tls.p50_us > 0);
        }
    }

    fn spec(f: &Fixture) -> RunSpec {
        let mut spec = closed(&format!("https://{}/", f.addr), 2);
        spec.iterations = Some(50);
        spec.workers = Some(1);
        spec
    }

    #[test]
    fn tls_custom_ca_client_certificate_and_insecure() {
        let _serial = serial();
        let f = tls_server();

        // Custom CA, no client certificate: the handshake works, the server says 403.
        let mut s = spec(&f);
        s.tls.ca_file = Some(f.dir.join("ca.pem"));
        let r = run(&s);
        assert_eq!(
            r.status.get("403"),
            Some(&50),
            "{:?} {:?}",
            r.status,
            r.errors
        );

        // mTLS: with the client certificate the server answers 200.
        s.tls.cert_file = Some(f.dir.join("client.pem"));
        s.tls.key_file = Some(f.dir.join("client.key"));
        let r = run(&s);
        assert_eq!(r.successes, 50, "{:?} {:?}", r.status, r.errors);
        assert_eq!(r.connections_opened, 2);

        // Default web PKI roots do not trust the test CA: a TLS error, not a crash.
        let mut s = spec(&f);
        s.iterations = Some(4);
        let r = run(&s);
        assert_eq!(r.error_count(ErrorClass::Tls), 4, "{:?}", r.errors);

        // --insecure accepts it.
        let mut s = spec(&f);
        s.tls.insecure = true;
        let r = run(&s);
        assert_eq!(r.status.get("403"), Some(&50), "{:?}", r.errors);

        // Unreadable CA file: a configuration error naming the field.
        let mut s = spec(&f);
        s.tls.ca_file = Some(f.dir.join("missing.pem"));
        let err = gust_engine::start(s.validate().unwrap()).err().unwrap();
        assert_eq!(err.field, "tls");
    }
}

#[test]
fn stop_handle_ends_a_run_early_and_reports_it() {
    let _serial = serial();
    let server = target(TargetConfig::default());
    // The last: agents that think longer than the run is allowed to last
    // are woken by the stop, not left to the grace period.
    let thinking = |think_time| {
        let mut s = closed(&server.url(), 4);
        s.model = LoadModel::Closed {
            concurrency: 4,
            stages: vec![],
            think_time,
        };
        s.duration = Some(secs(30.0));
        s
    };
    for spec in [
        open(&server.url(), 500.0, secs(30.0)),
        thinking(ThinkTime::None),
        thinking(ThinkTime::Fixed { time: secs(20.0) }),
    ] {
        let started = Instant::now();
        let handle = gust_engine::start(spec.validate().unwrap()).unwrap();
        let stop = handle.stop_handle();
        std::thread::sleep(Duration::from_millis(300));
        stop.stop();
        let r = handle.wait();
        assert!(
            started.elapsed() < secs(5.0),
            "stop took {:?}",
            started.elapsed()
        );
        assert!(r.sent > 0);
        assert_eq!(r.sent, r.successes + r.failures);
        assert!(r.elapsed_s < 5.0);
        assert!(r.stopped);
    }
}

#[test]
fn open_stages_deliver_the_integral_of_the_rate_ramp() {
    let _serial = serial();
    let server = target(TargetConfig::default());
    // 0 → 400/s over 0.5 s (100), hold 0.5 s (200), 400 → 0 over 0.5 s (100).
    let mut spec = RunSpec::new(
        server.url(),
        LoadModel::Open {
            rate: 0.0,
            stages: gust_engine::parse_stages("0.5s:400,0.5s:400,0.5s:0").unwrap(),
        },
    );
    spec.workers = Some(2);
    let r = run(&spec);
    assert_eq!(r.sent + r.dropped, 400);
    assert!(r.last_send_offset_us < 1_500_000);
}

#[test]
fn closed_stages_ramp_the_number_of_slots() {
    let _serial = serial();
    let server = target(TargetConfig {
        delay: Duration::from_millis(10),
        ..TargetConfig::default()
    });
    // Jump to 2 slots for 0.5 s, then to 6 for 0.5 s, then ramp down to 0.
    let mut spec = closed(&server.url(), 0);
    spec.model = LoadModel::Closed {
        concurrency: 0,
        stages: gust_engine::parse_stages("0s:2,0.5s:2,0s:6,0.5s:6,0.3s:0").unwrap(),
        think_time: ThinkTime::None,
    };
    spec.workers = Some(2);
    let r = run(&spec);
    assert_eq!(r.peak_in_flight, 6);
    assert_eq!(r.connections_opened, 6);
    let first = &r.series[0];
    // During the first half second only 2 slots run: ≤ 2 × 50 responses (10 ms each).
    assert!(
        first.responses > 0 && first.responses <= 2 * 50 + 6 * 50,
        "{first:?}"
    );
    assert!(r.errors.is_empty(), "{:?}", r.errors);
}

#[test]
fn a_panicking_source_does_not_hang_the_run() {
    use gust_engine::{Request, RequestSource, WorkerSource};

    struct Broken;
    struct Fine;
    impl RequestSource for Broken {
        fn for_worker(&self, worker: usize) -> Box<dyn WorkerSource> {
            assert!(
                worker != 0,
                "worker 0 cannot be built (deliberate test panic)"
            );
            Box::new(Fine)
        }
    }
    impl WorkerSource for Fine {
        fn next_request(&mut self, _seq: u64) -> Request {
            Request {
                method: http::Method::GET,
                path: "/".into(),
                headers: vec![],
                body: bytes::Bytes::new(),
            }
        }
    }

    let _serial = serial();
    let server = target(TargetConfig::default());
    let mut spec = closed(&server.url(), 2);
    spec.workers = Some(2);
    spec.iterations = Some(100);
    let cfg = spec
        .validate_with_source(Some(std::sync::Arc::new(Broken)))
        .unwrap();
    let r = gust_engine::run(cfg).unwrap();
    assert_eq!(r.sent, 100, "the surviving worker finishes the iterations");
}

#[test]
fn no_keepalive_opens_one_connection_per_response_in_both_models() {
    let _serial = serial();
    let server = target(TargetConfig::default());
    let mut spec = closed(&server.url(), 4);
    spec.iterations = Some(300);
    spec.workers = Some(2);
    spec.no_keepalive = true;
    let r = run(&spec);
    assert_eq!(r.successes, 300, "{:?}", r.errors);
    assert_eq!(r.connections_opened, r.responses);
    assert_eq!(r.phases.connect.count, 300);
    assert_eq!(r.phases.tls.count, 0, "plain HTTP has no TLS phase");

    let mut spec = open(&server.url(), 200.0, secs(1.0));
    spec.workers = Some(2);
    spec.no_keepalive = true;
    let r = run(&spec);
    assert!(r.responses > 100, "{:?}", r.errors);
    assert_eq!(r.failures, 0, "{:?}", r.errors);
    assert_eq!(r.connections_opened, r.responses);

    // With keep-alive, the same run reuses its connections.
    spec.no_keepalive = false;
    let r = run(&spec);
    assert!(
        r.connections_opened < r.responses / 2,
        "{}",
        r.connections_opened
    );
}

#[test]
fn phases_time_connections_and_every_response_and_dns_once() {
    let _serial = serial();
    let server = target(TargetConfig {
        delay: Duration::from_millis(20),
        ..TargetConfig::default()
    });
    let mut spec = closed(&server.url(), 2);
    spec.iterations = Some(20);
    spec.workers = Some(1);
    let r = run(&spec);
    assert_eq!(r.successes, 20, "{:?}", r.errors);
    assert_eq!(r.phases.dns.count, 0, "an IP literal is not looked up");
    assert_eq!(r.phases.connect.count, r.connections_opened);
    assert_eq!(r.phases.ttfb.count, 20);
    // The target waits 20 ms before answering: the first byte cannot come sooner,
    // and the whole exchange is no shorter than the time to its first byte.
    assert!(r.phases.ttfb.min_us >= 20_000, "{:?}", r.phases.ttfb);
    assert!(r.latency.p50_us >= r.phases.ttfb.p50_us);

    // A name is resolved once, before the run. (Only the count is checked: where
    // localhost also resolves to ::1, half the connections are refused.)
    let mut spec = closed(&server.url().replace("127.0.0.1", "localhost"), 1);
    spec.iterations = Some(2);
    spec.workers = Some(1);
    let r = run(&spec);
    assert_eq!(r.phases.dns.count, 1);
}

#[test]
fn rps_of_a_time_bound_open_run_is_over_its_whole_duration() {
    let _serial = serial();
    let server = target(TargetConfig::default());
    // 20 requests due at 0, 50 ms, …, 950 ms: all done well before the second ends.
    let mut spec = open(&server.url(), 20.0, secs(1.0));
    spec.workers = Some(1);
    let r = run(&spec);
    assert_eq!(r.responses, 20, "{:?}", r.errors);
    assert!((r.rps - 20.0).abs() < 1e-9, "rps {}", r.rps);
}
