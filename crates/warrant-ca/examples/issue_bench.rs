//! Leaf issuance rate next to the raw ECDSA P-256 signing rate, in one run.
//!
//! `cargo run --release -p warrant-ca --example issue_bench [seconds] [threads]`
//! (`seconds` is the total run time, split into alternating rounds)
//!
//! The ratio issuance/sign shows what certificate building costs on top of the
//! one signature each certificate needs. Threads share one `Arc<IssuingCa>`
//! (no lock), so the multi-thread figure shows the signing key scales.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair};
use warrant_ca::*;

fn rate(seconds: f64, threads: usize, work: impl Fn() + Sync) -> f64 {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let total: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0u64;
                    while Instant::now() < deadline {
                        for _ in 0..64 {
                            work();
                        }
                        n += 64;
                    }
                    n
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    total as f64 / start.elapsed().as_secs_f64()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let seconds: f64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(3.0);
    let threads: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(1);

    let dir = tempfile::tempdir()?;
    let hierarchy = Hierarchy::init(dir.path(), None)?;
    let ca: Arc<IssuingCa> = Arc::clone(hierarchy.ca("people").ok_or("no people CA")?);
    let leaf_key = generate_key(KeyType::EcdsaP256)?;
    let subject = Subject::parse("/C=US/O=Warrant/OU=gateway:reader/CN=agent-109")?;
    let san = parse_san("URI:spiffe://corp.example/agent/agent-109")?;
    let aic = vec![0x30, 0x03, 0x02, 0x01, 0x01];
    let extensions = [ExtraExtension::non_critical(oids::AIC_EXTENSION, aic)];

    let issue = || {
        let now = SystemTime::now();
        let cert = issue_leaf(
            &ca,
            &LeafSpec {
                profile: Profile::AgentProxy,
                subject: &subject,
                san: &san,
                spki_der: &leaf_key.spki_der,
                not_before: now,
                not_after: now + Duration::from_secs(3600),
                extensions: &extensions,
                urls: None,
            },
        )
        .expect("issue");
        std::hint::black_box(cert);
    };
    issue();
    let sample = {
        let now = SystemTime::now();
        issue_leaf(
            &ca,
            &LeafSpec {
                profile: Profile::AgentProxy,
                subject: &subject,
                san: &san,
                spki_der: &leaf_key.spki_der,
                not_before: now,
                not_after: now + Duration::from_secs(3600),
                extensions: &extensions,
                urls: None,
            },
        )?
    };

    let raw_key = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_ASN1_SIGNING)?;
    let rng = SystemRandom::new();
    let message = vec![0x5Au8; sample.der.len() - 80]; // about a TBS's size
    let sign = || {
        std::hint::black_box(raw_key.sign(&rng, &message).expect("sign"));
    };

    println!("certificate size: {} bytes DER", sample.der.len());
    // Alternate short rounds of each and report medians: on a shared, noisy
    // machine this keeps both figures exposed to the same conditions.
    const ROUNDS: usize = 7;
    let round = seconds / (2 * ROUNDS) as f64;
    for t in [1, threads]
        .into_iter()
        .collect::<std::collections::BTreeSet<_>>()
    {
        let (mut signs, mut issues) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            signs.push(rate(round, t, sign));
            issues.push(rate(round, t, issue));
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (signs, issues) = (median(&mut signs), median(&mut issues));
        println!(
            "threads {t}: raw P-256 sign {signs:>9.0}/s   leaf issuance {issues:>9.0}/s   ratio {:.2}",
            issues / signs
        );
    }
    Ok(())
}
