//! The cryptographic floor: the raw aws-lc-rs work one certificate of the
//! scenario cannot avoid (key generation, signature checks, the CA
//! signature), timed single-threaded in CPU time in the same process right
//! after the run, so machine, build and clock are those of `cpu_us_per_cert`.
//!
//! It counts the operations the server really performs per request. The
//! principal certificate's chain signature is verified once per distinct
//! certificate (warrant-ca caches the verified chain; validity and revocation
//! are still checked per request), so it counts as users / certificates
//! issued — or as one per request when there are more users than the cache
//! holds and round-robin use evicts each certificate before its next turn.

use crate::args::{Keys, Scenario};
use anyhow::{Result, anyhow};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair,
    UnparsedPublicKey,
};
use std::time::Duration;

#[derive(Debug, Clone, serde::Serialize)]
pub struct Floor {
    pub keygen_us: f64,
    pub sign_us: f64,
    pub verify_us: f64,
    pub keygens: u32,
    pub signs: u32,
    /// Per certificate, fractional: the principal chain check is amortised.
    pub verifies: f64,
    pub per_cert_us: f64,
}

/// (key generations, signatures, verifications) the server performs per
/// certificate: CSR signature check (keys=csr) or key generation (keys=server),
/// the CA's signature; for aic the DA signature and the principal
/// certificate's chain signature, amortised over `certs` issued to `users`.
pub fn ops(scenario: Scenario, keys: Keys, users: usize, certs: u64) -> (u32, u32, f64) {
    let (keygen, csr_verify) = match keys {
        Keys::Server => (1, 0.0),
        Keys::Csr => (0, 1.0),
    };
    let aic_verifies = match scenario {
        Scenario::Regular => 0.0,
        Scenario::Aic => 1.0 + principal_verifies_per_cert(users, certs),
    };
    (keygen, 1, csr_verify + aic_verifies)
}

/// Full principal-chain verifications per certificate issued.
fn principal_verifies_per_cert(users: usize, certs: u64) -> f64 {
    if users > warrant_ca::PRINCIPAL_CACHE_CAPACITY || certs == 0 {
        return 1.0;
    }
    (users as f64 / certs as f64).min(1.0)
}

/// CPU time of the calling thread. The floor is timed in CPU time, like
/// `cpu_us_per_cert`: wall time on a shared machine would count other
/// processes' turns on the core as crypto work and inflate the floor.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes into the timespec we pass.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// Mean CPU µs of `op`, run at least 20 times and for at least `budget` of CPU time.
fn time_per_op(budget: Duration, mut op: impl FnMut() -> bool) -> Result<f64> {
    let start = thread_cpu_time();
    let mut n = 0u64;
    let mut spent = Duration::ZERO;
    while n < 20 || spent < budget {
        if !op() {
            return Err(anyhow!("crypto floor: operation failed"));
        }
        n += 1;
        spent = thread_cpu_time().saturating_sub(start);
    }
    if spent.is_zero() {
        return Err(anyhow!("crypto floor: no thread CPU clock"));
    }
    Ok(spent.as_secs_f64() * 1e6 / n as f64)
}

/// Times the primitives and prices one certificate of the run that issued
/// `certs` certificates to agents of `users` principals.
pub fn measure(
    scenario: Scenario,
    keys: Keys,
    users: usize,
    certs: u64,
    budget: Duration,
) -> Result<Floor> {
    let rng = SystemRandom::new();
    // A TBS-sized message (a P-256 leaf TBS is ~450–600 bytes).
    let msg = vec![0x5au8; 512];
    let keygen_us = time_per_op(budget, || {
        EcdsaKeyPair::generate(&ECDSA_P256_SHA256_ASN1_SIGNING).is_ok()
    })?;
    let key =
        EcdsaKeyPair::generate(&ECDSA_P256_SHA256_ASN1_SIGNING).map_err(|e| anyhow!("{e}"))?;
    let sign_us = time_per_op(budget, || key.sign(&rng, &msg).is_ok())?;
    let sig = key.sign(&rng, &msg).map_err(|e| anyhow!("{e}"))?;
    let public = key.public_key().as_ref().to_vec();
    let verify_us = time_per_op(budget, || {
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &public)
            .verify(&msg, sig.as_ref())
            .is_ok()
    })?;
    let (keygens, signs, verifies) = ops(scenario, keys, users, certs);
    let per_cert_us = keygens as f64 * keygen_us + signs as f64 * sign_us + verifies * verify_us;
    Ok(Floor {
        keygen_us,
        sign_us,
        verify_us,
        keygens,
        signs,
        verifies,
        per_cert_us,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_counts_the_scenarios_crypto() {
        assert_eq!(ops(Scenario::Regular, Keys::Server, 10, 1000), (1, 1, 0.0));
        assert_eq!(ops(Scenario::Regular, Keys::Csr, 10, 1000), (0, 1, 1.0));
        // DA signature every time, the principal chain once per user.
        let (k, s, v) = ops(Scenario::Aic, Keys::Server, 10, 1000);
        assert_eq!((k, s), (1, 1));
        assert!((v - 1.01).abs() < 1e-12, "{v}");
        let (k, s, v) = ops(Scenario::Aic, Keys::Csr, 10, 1000);
        assert_eq!((k, s), (0, 1));
        assert!((v - 2.01).abs() < 1e-12, "{v}");
    }

    #[test]
    fn principal_chain_counts_fully_when_the_cache_cannot_hold_the_users() {
        let too_many = warrant_ca::PRINCIPAL_CACHE_CAPACITY + 1;
        assert_eq!(ops(Scenario::Aic, Keys::Server, too_many, 1_000_000).2, 2.0);
        // Fewer certificates than users: each was a first sight.
        assert_eq!(ops(Scenario::Aic, Keys::Server, 100, 10).2, 2.0);
        assert_eq!(ops(Scenario::Aic, Keys::Server, 100, 0).2, 2.0);
    }
}
