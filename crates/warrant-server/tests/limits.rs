//! Limits and backpressure on a real server (issue 4): the per-client-IP
//! rate limit, the per-principal issuance limit, the bounded write queue
//! (503 with `Retry-After`, nothing acknowledged lost, queue depth never
//! above `record_buffer.max_pending`), the in-flight issuance cap, and the
//! write-path metrics.
//!
//! Rates are set so low (one token per 100 s) that no refill can happen
//! during a test: the assertions do not depend on timing.

mod common;

use common::*;
use serde_json::{Value, json};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use warrant_server::ErrorKey;

fn pa(caps: &[(&str, &str)], max_agents: i64) -> Value {
    grants(caps, max_agents, 0)
}

/// Status, `Retry-After` (seconds) and body of one answer.
async fn send(req: reqwest::RequestBuilder) -> (u16, Option<u64>, Value) {
    let resp = req.send().await.unwrap();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
    let (status, body) = decode(resp).await;
    (status, retry_after, body)
}

fn assert_limited(got: &(u16, Option<u64>, Value), key: ErrorKey) {
    assert_error(&(got.0, got.2.clone()), key);
    let secs = got
        .1
        .unwrap_or_else(|| panic!("no Retry-After on {}", got.2));
    assert!(secs >= 1, "Retry-After {secs}");
}

#[tokio::test]
async fn rate_limit_answers_429_per_client_ip_and_spares_probes_and_other_clients() {
    let srv = TestServer::start_with(
        None,
        "[rate_limit]\nenabled = true\nrate = 0.01\nburst = 4\n",
    )
    .await;
    // The harness's admin login spent the first of the 4.
    let version = || srv.http.get(srv.url("/api/v1/version"));
    for i in 0..3 {
        let (s, _, b) = send(version()).await;
        assert_eq!(s, 200, "request {i} within the burst: {b}");
    }
    let limited = send(version()).await;
    assert_limited(&limited, ErrorKey::RateLimited);
    assert!(
        limited.1.unwrap() >= 90,
        "one token per 100 s: {:?}",
        limited.1
    );
    // Authenticated routes share the client's bucket.
    let r = send(
        srv.http
            .get(srv.url("/api/v1/certs"))
            .bearer_auth(&srv.token),
    )
    .await;
    assert_limited(&r, ErrorKey::RateLimited);
    // Unknown paths and methods spend the same budget: probing for routes
    // is not a way around the limit.
    let r = send(srv.http.get(srv.url("/api/v1/no-such-route"))).await;
    assert_limited(&r, ErrorKey::RateLimited);
    let r = send(srv.http.get(srv.url("/no-such-page"))).await;
    assert_limited(&r, ErrorKey::RateLimited);
    let r = send(srv.http.delete(srv.url("/api/v1/version"))).await;
    assert_limited(&r, ErrorKey::RateLimited);
    // X-Forwarded-For is not trusted by default: it cannot buy a new bucket.
    let r = send(version().header("x-forwarded-for", "198.51.100.1")).await;
    assert_limited(&r, ErrorKey::RateLimited);
    // Probes and scrapes are exempt.
    for p in ["/healthz", "/readyz", "/metrics"] {
        let r = srv.http.get(srv.url(p)).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200, "{p}");
    }
    // Another client address (all of 127/8 is loopback) has its own bucket.
    let other = reqwest::Client::builder()
        .local_address(IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    for _ in 0..3 {
        let (s, _, b) = send(other.get(srv.url("/api/v1/version"))).await;
        assert_eq!(s, 200, "{b}");
    }
    let text = srv.metrics_text().await;
    assert!(
        text.contains("warrant_rejected_requests_total{reason=\"rate_limited\"}"),
        "{text}"
    );
    srv.stop().await;
}

#[tokio::test]
async fn forwarded_for_keys_the_limit_only_when_trusted() {
    let srv = TestServer::start_with(
        None,
        "[rate_limit]\nenabled = true\nrate = 0.01\nburst = 1\ntrust_forwarded_for = true\n",
    )
    .await;
    let from = |ip: &str| {
        srv.http
            .get(srv.url("/api/v1/version"))
            .header("x-forwarded-for", format!("203.0.113.50, {ip}"))
    };
    assert_eq!(send(from("198.51.100.1")).await.0, 200);
    assert_limited(&send(from("198.51.100.1")).await, ErrorKey::RateLimited);
    assert_eq!(send(from("198.51.100.2")).await.0, 200);
    srv.stop().await;
}

#[tokio::test]
async fn per_principal_limit_answers_429_and_spares_other_principals() {
    let srv = TestServer::start_with(
        None,
        "[issuance.per_principal]\nenabled = true\nrate = 0.01\nburst = 2\n",
    )
    .await;
    // Person certificates count against the issuing user (admin): two fit.
    let alice = srv.person("alice", pa(&[("db", "read")], 10)).await;
    let bob = srv.person("bob", pa(&[("db", "read")], 10)).await;
    let third = srv.post("/api/v1/certs", &json!({"cn": "carol"})).await;
    assert_error(&third, ErrorKey::PrincipalRateLimited);
    // Another user has its own allowance.
    let operator = srv.user_token("op", "operator").await;
    let (s, b) = srv
        .post_as(&operator, "/api/v1/certs", &json!({"cn": "dave"}))
        .await;
    assert_eq!(s, 200, "{b}");

    // Agent certificates count against the delegating principal, whoever
    // calls: the admin's spent allowance does not matter here.
    for i in 0..2 {
        let da = Da::new(&alice, &format!("bot-{i}"), &[("db", "read")]);
        let (s, b) = srv.post("/api/v1/certs", &da.body(&alice)).await;
        assert_eq!(s, 200, "alice agent {i}: {b}");
    }
    let da = Da::new(&alice, "bot-2", &[("db", "read")]);
    let limited = send(
        srv.http
            .post(srv.url("/api/v1/certs"))
            .bearer_auth(&srv.token)
            .json(&da.body(&alice)),
    )
    .await;
    assert_limited(&limited, ErrorKey::PrincipalRateLimited);
    let (s, b) = srv
        .post(
            "/api/v1/certs",
            &Da::new(&bob, "bob-bot", &[("db", "read")]).body(&bob),
        )
        .await;
    assert_eq!(s, 200, "bob is another principal: {b}");
    // The refused DA did not consume its nonce.
    assert!(
        !srv.server
            .as_ref()
            .unwrap()
            .state
            .store
            .issuance()
            .nonce_held(&da.nonce, now()),
        "a limited request must leave its nonce unused"
    );
    let text = srv.metrics_text().await;
    assert!(
        text.contains("warrant_rejected_requests_total{reason=\"principal_rate_limited\"}"),
        "{text}"
    );
    srv.stop().await;
}

/// Fires `rounds` × `concurrency` person issuances at once and returns the
/// 200 answers and the 503 ones; any other status fails the test.
async fn flood(srv: &TestServer, rounds: usize, concurrency: usize) -> (Vec<Value>, Vec<String>) {
    let mut ok = Vec::new();
    let mut overloaded = Vec::new();
    for round in 0..rounds {
        let tasks: Vec<_> = (0..concurrency)
            .map(|i| {
                let req = srv
                    .http
                    .post(srv.url("/api/v1/certs"))
                    .bearer_auth(&srv.token)
                    .json(&json!({"cn": format!("load-{round}-{i}")}));
                tokio::spawn(send(req))
            })
            .collect();
        for t in tasks {
            let got = t.await.unwrap();
            match got.0 {
                200 => ok.push(got.2),
                503 => {
                    assert_limited(&got, ErrorKey::Overloaded);
                    overloaded.push(got.2["detail"].as_str().unwrap_or("").to_string());
                }
                other => panic!("unexpected {other}: {}", got.2),
            }
        }
        if !overloaded.is_empty() && !ok.is_empty() {
            break;
        }
    }
    (ok, overloaded)
}

/// Every acknowledged serial is in the database.
async fn assert_all_stored(srv: &TestServer, ok: &[Value]) {
    let store = &srv.server.as_ref().unwrap().state.store;
    for b in ok {
        let (ca, serial) = (
            b["ca"].as_str().unwrap(),
            b["serial_number"].as_str().unwrap(),
        );
        let row = store.certs().get_cert(ca, serial).await.unwrap();
        assert!(row.is_some(), "acknowledged {ca}/{serial} is not stored");
    }
}

async fn backpressure_gives_503_with_retry_after_and_loses_nothing(b: Backend) {
    const MAX_PENDING: usize = 2;
    let srv = TestServer::on_with(
        b,
        &format!("[record_buffer]\nmax_pending = {MAX_PENDING}\n"),
    )
    .await;
    let store = srv.server.as_ref().unwrap().state.store.clone();
    // Sample the queue depth (what `warrant_write_queue_depth` reports)
    // while the flood runs.
    let stop = Arc::new(AtomicBool::new(false));
    let deepest = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (stop, deepest, store) = (stop.clone(), deepest.clone(), store.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                deepest.fetch_max(store.issuance().stats().pending, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        })
    };
    let (ok, overloaded) = flood(&srv, 10, 64).await;
    stop.store(true, Ordering::Relaxed);
    sampler.await.unwrap();
    assert!(!ok.is_empty(), "no issuance succeeded");
    assert!(
        !overloaded.is_empty(),
        "{} issuances, none refused with max_pending = {MAX_PENDING}",
        ok.len()
    );
    assert!(
        overloaded.iter().all(|d| d.contains("write pipeline full")),
        "{overloaded:?}"
    );
    let deepest = deepest.load(Ordering::Relaxed);
    eprintln!(
        "{b:?}: {} acknowledged, {} refused with 503, deepest queue {deepest}",
        ok.len(),
        overloaded.len()
    );
    assert!(deepest <= MAX_PENDING, "queue depth reached {deepest}");
    assert_all_stored(&srv, &ok).await;
    // Every acknowledged issuance waited for its commit, and said how long.
    let waits = store.issuance().stats().durable_waits;
    assert!(
        waits >= ok.len() as u64,
        "{waits} durable waits counted for {} acknowledged issuances",
        ok.len()
    );

    let text = srv.metrics_text().await;
    for series in [
        "warrant_write_queue_depth",
        "warrant_commit_batch_size_bucket",
        "warrant_commit_duration_seconds_bucket",
        "warrant_durable_wait_seconds_bucket",
        "warrant_committed_rows_total",
        "warrant_commits_total",
        "warrant_da_nonce_set_size",
        "warrant_cert_window_evictions_total",
        "warrant_issuance_in_flight",
        "warrant_rejected_requests_total{reason=\"overloaded\"}",
        "warrant_write_rejected_total{reason=\"overloaded\"}",
    ] {
        assert!(text.contains(series), "{series} missing from\n{text}");
    }
    srv.stop().await;
}

async fn in_flight_cap_answers_503_before_any_work(b: Backend) {
    let srv = TestServer::on_with(b, "[engine]\nwrite_max_pending = 1\n").await;
    let (ok, overloaded) = flood(&srv, 10, 32).await;
    assert!(!ok.is_empty(), "no issuance succeeded");
    assert!(
        !overloaded.is_empty(),
        "no issuance refused at one in flight"
    );
    assert!(
        overloaded.iter().all(|d| d.contains("in flight")),
        "{overloaded:?}"
    );
    assert_all_stored(&srv, &ok).await;
    srv.stop().await;
}

backend_matrix!(
    backpressure_gives_503_with_retry_after_and_loses_nothing,
    in_flight_cap_answers_503_before_any_work,
);

#[test]
fn print_config_names_profile_and_explicit_sources() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("warrant.toml"),
        "device_profile = \"low_mem\"\n[record_buffer]\nthreshold = 50\n",
    )
    .unwrap();
    let text = std::fs::read_to_string(dir.path().join("warrant.toml")).unwrap();
    let env = [("WARRANT_ENGINE_MAX_CERTS".to_string(), "777".to_string())]
        .into_iter()
        .collect();
    let loaded = warrant_server::LoadedConfig::from_parts(dir.path(), Some(&text), &env).unwrap();
    let rendered = loaded.render();
    for line in [
        "device_profile = \"low_mem\"  # warrant.toml",
        "record_buffer.threshold = 50  # warrant.toml",
        "record_buffer.max_pending = 5000  # profile:low_mem",
        "engine.max_certs = 777  # env WARRANT_ENGINE_MAX_CERTS",
        "engine.max_nonces = 50000  # profile:low_mem",
        "record_buffer.max_latency = \"100ms\"  # default",
    ] {
        assert!(
            rendered.lines().any(|l| l == line),
            "{line:?} not in\n{rendered}"
        );
    }
    let opts = warrant_server::state::store_options(&loaded.config);
    assert_eq!(
        (opts.threshold, opts.max_pending, opts.max_certs),
        (50, 5000, 777)
    );
}
