//! Every vector in aic-der-vectors.json, reproduced from the described inputs
//! and by decode → re-encode.

mod common;

use aic::*;
use common::der_vector;

fn key_hash() -> Vec<u8> {
    (0x00..=0x1f).collect()
}
fn nonce() -> [u8; 32] {
    core::array::from_fn(|i| 0xa0 + i as u8)
}
fn signature_value() -> Vec<u8> {
    (0x20..=0x65).collect()
}
const TIMESTAMP: i64 = 1_787_011_200; // 2026-08-18T00:00:00Z

fn pu(with_hash_algo: bool) -> PrincipalUid {
    PrincipalUid {
        version: 1,
        realm: "corp.com".into(),
        identifier: "zhangsan".into(),
        key_hash: key_hash(),
        hash_algo: with_hash_algo.then(AlgorithmIdentifier::sha256),
    }
}

fn cap_users() -> Capability {
    Capability::new("http", "GET:/api/v1/users", Some(&[1, 2]))
}

fn cidr_constraint() -> Capability {
    Capability::new(
        "varwof/constraint-v1",
        "allowed-cidr",
        Some(br#"["10.0.0.0/8"]"#),
    )
}

fn da_raw() -> DelegationAuthorization {
    DelegationAuthorization {
        reason: Reason::new("http", "Need to query users"),
        requested_lifetime: 3600,
        timestamp: TIMESTAMP,
        nonce: nonce().to_vec(),
        signature_algorithm: AlgorithmIdentifier::new(Oid::parse(oid::ECDSA_WITH_SHA256).unwrap()),
        signature_value: signature_value(),
    }
}

fn simple_aic() -> Aic {
    Aic {
        version: 1,
        agent_id: "agent-109".into(),
        principal_uid: pu(false),
        capabilities: vec![cap_users()],
        delegation_mode: DelegationMode::Authorized,
        constraints: vec![],
        delegation_authorization: None,
        extensions: vec![],
    }
}

fn full_aic() -> Aic {
    Aic {
        principal_uid: pu(true),
        capabilities: vec![cap_users(), Capability::new("db", "SELECT:*", None)],
        constraints: vec![cidr_constraint()],
        delegation_authorization: Some(da_raw()),
        ..simple_aic()
    }
}

fn pa() -> PrincipalAuthorization {
    PrincipalAuthorization {
        version: 1,
        grants: vec![
            Capability::new("database", "query:SELECT", None),
            Capability::new("http", "GET:*", None),
        ],
        constraints: vec![cidr_constraint()],
        delegation_policy: Some(dpol()),
        extensions: vec![],
    }
}

fn dpol() -> DelegationPolicy {
    DelegationPolicy {
        version: 1,
        max_agents: 8,
        allowed_mode: 1,
        max_session_hours: None,
    }
}

#[test]
fn encodes_aic_simple_vector() {
    assert_eq!(
        hex::encode(&simple_aic().to_der()),
        hex::encode(&der_vector("AIC_SIMPLE"))
    );
}

#[test]
fn encodes_aic_full_vector() {
    assert_eq!(
        hex::encode(&full_aic().to_der()),
        hex::encode(&der_vector("AIC_FULL"))
    );
}

#[test]
fn encodes_tbs_vector_from_aic() {
    let tbs = DelegationAuthTbs::from_aic(&full_aic(), None).unwrap();
    assert_eq!(hex::encode(&tbs.to_der()), hex::encode(&der_vector("TBS")));
}

#[test]
fn encodes_tbs_vector_from_request_fields() {
    let req = DelegationRequest {
        agent_id: "agent-109".into(),
        principal_uid: pu(true),
        reason: Reason::new("http", "Need to query users"),
        capabilities: vec![cap_users(), Capability::new("db", "SELECT:*", None)],
        delegation_mode: DelegationMode::Authorized,
        constraints: vec![cidr_constraint()],
        requested_lifetime: 3600,
        timestamp: TIMESTAMP,
        nonce: nonce(),
        agent_spki_der: None,
    };
    assert_eq!(
        hex::encode(&req.tbs().unwrap().to_der()),
        hex::encode(&der_vector("TBS"))
    );
}

#[test]
fn principal_uid_string_form_sets_sha256_hash_algo() {
    // The reference's string form yields the PU_FULL bytes (hashAlgo present, no NULL).
    let s = pu(false).to_string();
    assert_eq!(
        s,
        "corp.com:zhangsan:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"
    );
    let parsed = PrincipalUid::parse(&s).unwrap();
    assert_eq!(
        hex::encode(&parsed.to_der()),
        hex::encode(&der_vector("PU_FULL"))
    );
    assert_eq!(parsed.to_string(), s);
}

#[test]
fn encodes_pa_vector() {
    assert_eq!(hex::encode(&pa().to_der()), hex::encode(&der_vector("PA")));
}

#[test]
fn encodes_cap_vector() {
    assert_eq!(
        hex::encode(&cap_users().to_der()),
        hex::encode(&der_vector("CAP"))
    );
}

#[test]
fn encodes_principal_uid_vectors() {
    assert_eq!(
        hex::encode(&pu(true).to_der()),
        hex::encode(&der_vector("PU_FULL"))
    );
    assert_eq!(
        hex::encode(&pu(false).to_der()),
        hex::encode(&der_vector("PU_SIMPLE"))
    );
}

#[test]
fn encodes_dpol_vector() {
    assert_eq!(
        hex::encode(&dpol().to_der()),
        hex::encode(&der_vector("DPOL"))
    );
}

#[test]
fn encodes_da_raw_vector() {
    assert_eq!(
        hex::encode(&da_raw().to_der()),
        hex::encode(&der_vector("DA_RAW"))
    );
}

#[test]
fn decodes_every_vector_to_the_described_inputs_and_reencodes_byte_for_byte() {
    let aic_simple = der_vector("AIC_SIMPLE");
    assert_eq!(Aic::from_der(&aic_simple).unwrap(), simple_aic());
    assert_eq!(Aic::from_der(&aic_simple).unwrap().to_der(), aic_simple);

    let aic_full = der_vector("AIC_FULL");
    assert_eq!(Aic::from_der(&aic_full).unwrap(), full_aic());
    assert_eq!(Aic::from_der(&aic_full).unwrap().to_der(), aic_full);

    let tbs = der_vector("TBS");
    let decoded = DelegationAuthTbs::from_der(&tbs).unwrap();
    assert_eq!(
        decoded,
        DelegationAuthTbs::from_aic(&full_aic(), None).unwrap()
    );
    assert_eq!(decoded.to_der(), tbs);

    let pa_der = der_vector("PA");
    assert_eq!(PrincipalAuthorization::from_der(&pa_der).unwrap(), pa());
    assert_eq!(
        PrincipalAuthorization::from_der(&pa_der).unwrap().to_der(),
        pa_der
    );

    let cap = der_vector("CAP");
    assert_eq!(Capability::from_der(&cap).unwrap(), cap_users());
    assert_eq!(Capability::from_der(&cap).unwrap().to_der(), cap);

    for (name, with) in [("PU_FULL", true), ("PU_SIMPLE", false)] {
        let der = der_vector(name);
        assert_eq!(PrincipalUid::from_der(&der).unwrap(), pu(with));
        assert_eq!(PrincipalUid::from_der(&der).unwrap().to_der(), der);
    }

    let dp = der_vector("DPOL");
    assert_eq!(DelegationPolicy::from_der(&dp).unwrap(), dpol());
    assert_eq!(DelegationPolicy::from_der(&dp).unwrap().to_der(), dp);

    let da = der_vector("DA_RAW");
    assert_eq!(DelegationAuthorization::from_der(&da).unwrap(), da_raw());
    assert_eq!(DelegationAuthorization::from_der(&da).unwrap().to_der(), da);
}

#[test]
fn json_mapping_round_trips_every_vector() {
    fn check<T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug>(
        der: &[u8],
        dec: fn(&[u8]) -> Result<T, DecodeError>,
        enc: fn(&T) -> Vec<u8>,
    ) {
        let v = dec(der).unwrap();
        let json = serde_json::to_string(&v).unwrap();
        let back: T = serde_json::from_str(&json).unwrap();
        assert_eq!(back, v);
        assert_eq!(enc(&back), der);
    }
    check(&der_vector("AIC_SIMPLE"), Aic::from_der, Aic::to_der);
    check(&der_vector("AIC_FULL"), Aic::from_der, Aic::to_der);
    check(
        &der_vector("TBS"),
        DelegationAuthTbs::from_der,
        DelegationAuthTbs::to_der,
    );
    check(
        &der_vector("PA"),
        PrincipalAuthorization::from_der,
        PrincipalAuthorization::to_der,
    );
    check(&der_vector("CAP"), Capability::from_der, Capability::to_der);
    check(
        &der_vector("PU_FULL"),
        PrincipalUid::from_der,
        PrincipalUid::to_der,
    );
    check(
        &der_vector("PU_SIMPLE"),
        PrincipalUid::from_der,
        PrincipalUid::to_der,
    );
    check(
        &der_vector("DPOL"),
        DelegationPolicy::from_der,
        DelegationPolicy::to_der,
    );
    check(
        &der_vector("DA_RAW"),
        DelegationAuthorization::from_der,
        DelegationAuthorization::to_der,
    );
}
