//! The engine's own cost, in process: cold decisions (a certificate never
//! seen, so its chain, AIC, PA and delegation are verified) and warm ones
//! (the same certificates again, from the cache), with DA verification on,
//! and the process's RSS once N distinct certificates are cached. What
//! `warrant admit` adds (HTTP, the escaped PEM header) is `bench/admit.sh`'s.
//!
//! ```text
//! cargo run --release -p warrant-admit --example decisions -- [N] [THREADS] [CACHE]
//! ```
//!
//! `CACHE` (default N) is the cache's capacity: with 0, the same run caches
//! nothing, and the difference in RSS is the cache's.
//!
//! Certificates are minted in batches of 10,000 (a hierarchy from
//! `warrant-ca`, a person with a PA, a DA she signs for each agent key) and
//! only the decisions are timed; a batch is dropped once decided, so the RSS
//! at the end is the cache's, plus one batch.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use warrant_admit::engine::{AdmissionRequest, Credential, Engine, EngineConfig, Principals};
use warrant_admit::revocation::RevocationState;
use warrant_admit::rules::Rules;

const BATCH: usize = 10_000;

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

/// Decides every certificate of `ders` once, on `threads` threads; the
/// wall time it took. Every decision must admit.
fn decide_all(
    engine: &Engine,
    rules: &Rules,
    revocation: &RevocationState,
    ders: &[Vec<u8>],
    threads: usize,
) -> Duration {
    let started = Instant::now();
    std::thread::scope(|s| {
        for part in ders.chunks(ders.len().div_ceil(threads).max(1)) {
            s.spawn(move || {
                for der in part {
                    let d = engine.decide(
                        &AdmissionRequest {
                            method: "GET",
                            uri: "/v1/rows/1",
                            client_ip: None,
                            credential: Credential::Certificate(der),
                            now: std::time::SystemTime::now(),
                            current_concurrency: None,
                        },
                        rules,
                        revocation,
                    );
                    assert!(d.is_ok(), "{d:?}");
                }
            });
        }
    });
    started.elapsed()
}

fn mint(ca: &Ca, alice: &Person, n: usize, threads: usize) -> Vec<Vec<u8>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let count = n / threads + usize::from(t < n % threads);
                s.spawn(move || {
                    (0..count)
                        .map(|_| agent(ca, alice, AgentSpec::default()).der)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let threads: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let capacity: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(n);
    let ca = Ca::new();
    let alice = person(&ca, pa(1, vec![]));
    let mut principals = Principals::new();
    principals
        .insert_der(alice.cert.der.clone())
        .expect("alice's certificate");
    let engine = Engine::new(
        ca.bundle(),
        principals,
        EngineConfig {
            cache_capacity: capacity,
            ..EngineConfig::default()
        },
    );
    let rules = Rules::parse(RULES).expect("rules");
    let mut revocation = RevocationState::new();
    revocation.replace("people", Vec::<String>::new(), unix(now()));
    let rss_before = rss_mib();

    let (mut cold, mut decided) = (Duration::ZERO, 0usize);
    let mut last = Vec::new();
    while decided < n {
        let batch = mint(&ca, &alice, BATCH.min(n - decided), threads);
        cold += decide_all(&engine, &rules, &revocation, &batch, threads);
        decided += batch.len();
        last = batch;
    }
    let rss_after = rss_mib();
    let warm_rounds = 5;
    let mut warm = Duration::ZERO;
    for _ in 0..warm_rounds {
        warm += decide_all(&engine, &rules, &revocation, &last, threads);
    }
    let warm_n = warm_rounds * last.len();
    println!("threads: {threads}; certificates: {n}; cache capacity: {capacity}");
    println!(
        "cold decisions/s: {:.0} ({:.1} us each per thread)",
        decided as f64 / cold.as_secs_f64(),
        cold.as_secs_f64() * threads as f64 / decided as f64 * 1e6
    );
    println!(
        "warm decisions/s: {:.0} ({:.2} us each per thread)",
        warm_n as f64 / warm.as_secs_f64(),
        warm.as_secs_f64() * threads as f64 / warm_n as f64 * 1e6
    );
    println!(
        "cached certificates: {}; RSS {:.1} MiB before, {:.1} MiB after ({:.0} bytes per certificate, with one batch of {BATCH} held)",
        engine.cached_certificates(),
        rss_before,
        rss_after,
        (rss_after - rss_before) * 1024.0 * 1024.0 / decided as f64
    );
}
