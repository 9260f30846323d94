//! ECDSA P-256 signatures per second: a CA key in memory against the same
//! kind of key in a PKCS#11 token, one after the other in one run, on 1 and
//! N threads. What PKCS#11 and the token cost per signature.
//!
//! `SOFTHSM2_CONF=… WARRANT_PKCS11_PIN=… cargo run --release -p warrant-ca
//! --example pkcs11_sign -- 'pkcs11:token=T?module-path=…' [seconds] [threads]`
//! (the token must exist; a key labelled `pkcs11-sign-bench` is made once).

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
use warrant_ca::{Pkcs11Access, Pkcs11Key, Pkcs11Uri, PublicKeyKind};

fn rate(seconds: f64, threads: usize, work: impl Fn() + Sync) -> f64 {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let total: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0u64;
                    while Instant::now() < deadline {
                        for _ in 0..16 {
                            work();
                        }
                        n += 16;
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
    let uri = Pkcs11Uri::parse(
        &args
            .next()
            .ok_or("usage: pkcs11_sign URI [seconds] [threads]")?,
    )?;
    let seconds: f64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(3.0);
    let threads: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(2);
    let access = Pkcs11Access {
        pin: std::env::var("WARRANT_PKCS11_PIN")
            .ok()
            .map(zeroize::Zeroizing::new),
        default_module: None,
    };
    let label = "pkcs11-sign-bench";
    let key = match Pkcs11Key::find_labelled(&uri, label, &access)? {
        Some(u) => Pkcs11Key::open(&u, &access)?,
        None => Pkcs11Key::generate(&uri, label, PublicKeyKind::EcdsaP256, &access)?.0,
    };
    let key = Arc::new(key);
    let rng = SystemRandom::new();
    let memory = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING)?;
    let msg = [7u8; 300];
    for t in [1, threads] {
        let mem = rate(seconds, t, || {
            memory.sign(&rng, &msg).unwrap();
        });
        let tok = rate(seconds, t, || {
            key.sign_fixed(&msg).unwrap();
        });
        println!(
            "{t} thread(s): memory {mem:.0}/s ({:.1} µs), token {tok:.0}/s ({:.1} µs), token/memory {:.2}×",
            1e6 * t as f64 / mem,
            1e6 * t as f64 / tok,
            tok / mem
        );
    }
    Ok(())
}
