//! DA verification cost: rebuilding + encoding the TBS and verifying the
//! principal's ECDSA P-256 signature, next to the raw aws-lc-rs ECDSA verify
//! of the same bytes, in the same run. The difference is what the AIC layer
//! costs on top of the unavoidable signature check (goal: < 10 %).
//!
//! Run: `cargo bench -p aic --bench da_verify`

use aws_lc_rs::signature::{self, UnparsedPublicKey};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;

use aic::*;

struct Fixture {
    aic: Aic,
    aic_der: Vec<u8>,
    tbs_der: Vec<u8>,
    principal_spki: Vec<u8>,
    principal_point: Vec<u8>,
    agent_spki: Vec<u8>,
    sig_alg: AlgorithmIdentifier,
    signature: Vec<u8>,
}

fn fixture() -> Fixture {
    let pkcs8 = generate_signing_key(DaSigningAlgorithm::EcdsaP256Sha256).unwrap();
    let principal_spki = spki_from_pkcs8(&pkcs8).unwrap();
    let agent_spki =
        spki_from_pkcs8(&generate_signing_key(DaSigningAlgorithm::EcdsaP256Sha256).unwrap())
            .unwrap();
    let PublicKey::EcP256(principal_point) = PublicKey::from_spki(&principal_spki).unwrap() else {
        unreachable!()
    };
    let key_hash = crypto::sha256(&principal_spki);
    let principal_uid = PrincipalUid {
        version: 1,
        realm: "corp.com".into(),
        identifier: "zhangsan".into(),
        key_hash: key_hash.to_vec(),
        hash_algo: Some(AlgorithmIdentifier::sha256()),
    };
    let req = DelegationRequest {
        agent_id: "agent:db-analyst-01".into(),
        principal_uid,
        reason: Reason::new("DATA_ANALYSIS", "Scheduled production data analysis window"),
        capabilities: vec![
            Capability::new("database", "query:SELECT", Some(br#"{"max_rows":100}"#)),
            Capability::new("http", "GET:/api/v1/reports/*", None),
        ],
        delegation_mode: DelegationMode::Authorized,
        constraints: vec![Capability::new(
            "varwof/constraint-v1",
            "allowed-cidr",
            Some(br#"["10.0.0.0/8"]"#),
        )],
        requested_lifetime: 3600,
        timestamp: 1_755_500_000,
        nonce: [0x5a; 32],
        agent_spki_der: Some(agent_spki.clone()),
    };
    let tbs = req.tbs().unwrap();
    let tbs_der = tbs.to_der();
    let (sig_alg, signature) =
        sign_delegation(&tbs_der, &pkcs8, DaSigningAlgorithm::EcdsaP256Sha256).unwrap();
    let aic = tbs.into_aic(sig_alg.clone(), signature.clone(), vec![]);
    let aic_der = aic.to_der();
    Fixture {
        aic,
        aic_der,
        tbs_der,
        principal_spki,
        principal_point,
        agent_spki,
        sig_alg,
        signature,
    }
}

fn bench(c: &mut Criterion) {
    let f = fixture();
    let mut g = c.benchmark_group("da_verify");
    g.throughput(Throughput::Elements(1));

    g.bench_function("raw_ecdsa_p256_verify", |b| {
        b.iter(|| {
            UnparsedPublicKey::new(
                &signature::ECDSA_P256_SHA256_ASN1,
                black_box(&f.principal_point),
            )
            .verify(black_box(&f.tbs_der), black_box(&f.signature))
            .unwrap()
        })
    });

    g.bench_function("tbs_encode_and_verify", |b| {
        b.iter(|| {
            let tbs =
                DelegationAuthTbs::from_aic(black_box(&f.aic), Some(black_box(&f.agent_spki)))
                    .unwrap();
            let der = tbs.to_der();
            verify_delegation(&der, &f.sig_alg, &f.signature, black_box(&f.principal_spki)).unwrap()
        })
    });

    g.bench_function("aic_decode_and_full_verify", |b| {
        b.iter(|| {
            let aic = Aic::from_der(black_box(&f.aic_der)).unwrap();
            verify_aic_delegation(
                &aic,
                black_box(&f.principal_spki),
                Some(black_box(&f.agent_spki)),
            )
            .unwrap()
        })
    });

    g.bench_function("tbs_encode_only", |b| {
        b.iter(|| {
            DelegationAuthTbs::from_aic(black_box(&f.aic), Some(black_box(&f.agent_spki)))
                .unwrap()
                .to_der()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
