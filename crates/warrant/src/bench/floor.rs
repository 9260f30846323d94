//! The cryptographic floor: the raw aws-lc-rs work one certificate of the
//! scenario cannot avoid (key generation, signature checks, the CA
//! signature), timed single-threaded in the same process right after the run,
//! so machine and build are the same as for `cpu_us_per_cert`.

use super::{Keys, Scenario};
use anyhow::{Result, anyhow};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair,
    UnparsedPublicKey,
};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, serde::Serialize)]
pub struct Floor {
    pub keygen_us: f64,
    pub sign_us: f64,
    pub verify_us: f64,
    pub keygens: u32,
    pub signs: u32,
    pub verifies: u32,
    pub per_cert_us: f64,
}

/// (key generations, signatures, verifications) the server performs per
/// certificate: CSR signature check (keys=csr) or key generation (keys=server);
/// for aic also the principal certificate's signature and the DA signature.
pub fn ops(scenario: Scenario, keys: Keys) -> (u32, u32, u32) {
    let (keygen, csr_verify) = match keys {
        Keys::Server => (1, 0),
        Keys::Csr => (0, 1),
    };
    let aic_verifies = match scenario {
        Scenario::Regular => 0,
        Scenario::Aic => 2,
    };
    (keygen, 1, csr_verify + aic_verifies)
}

fn time_per_op(budget: Duration, mut op: impl FnMut() -> bool) -> Result<f64> {
    let start = Instant::now();
    let mut n = 0u64;
    while n < 20 || start.elapsed() < budget {
        if !op() {
            return Err(anyhow!("crypto floor: operation failed"));
        }
        n += 1;
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / n as f64)
}

pub fn measure(scenario: Scenario, keys: Keys, budget: Duration) -> Result<Floor> {
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
    let (keygens, signs, verifies) = ops(scenario, keys);
    let per_cert_us =
        keygens as f64 * keygen_us + signs as f64 * sign_us + verifies as f64 * verify_us;
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
        assert_eq!(ops(Scenario::Regular, Keys::Server), (1, 1, 0));
        assert_eq!(ops(Scenario::Regular, Keys::Csr), (0, 1, 1));
        assert_eq!(ops(Scenario::Aic, Keys::Server), (1, 1, 2));
        assert_eq!(ops(Scenario::Aic, Keys::Csr), (0, 1, 3));
    }
}
