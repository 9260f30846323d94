//! aic.md rule 6: the Go reference writes a struct's zero values as they are
//! (INTEGER 0, UTF8String "", an empty OCTET STRING). Decoding accepts and keeps
//! them, so decode → encode is byte-exact and a signature over such a TBS
//! verifies; `validate` (what issuance requires) still refuses them. Optional
//! fields round-trip both absent and present. What the model cannot keep is
//! refused rather than silently re-encoded differently.
//!
//! Every INTEGER, string, OCTET STRING and OPTIONAL field of the model has a
//! row below.

mod common;

use aic::der::{Reader, Writer};
use aic::*;
use common::der_vector;
use std::fmt::Debug;

trait Der: Sized + PartialEq + Debug + Clone {
    fn enc(&self) -> Vec<u8>;
    fn dec(der: &[u8]) -> Result<Self, DecodeError>;
}

macro_rules! der_impl {
    ($($t:ty),*) => {$(
        impl Der for $t {
            fn enc(&self) -> Vec<u8> { self.to_der() }
            fn dec(der: &[u8]) -> Result<Self, DecodeError> { <$t>::from_der(der) }
        }
    )*};
}
der_impl!(
    Aic,
    PrincipalUid,
    Capability,
    DelegationAuthorization,
    DelegationAuthTbs,
    DelegationPolicy,
    DelegationDepthControl,
    PrincipalAuthorization,
    AlgorithmIdentifier
);

/// Decodes `v`'s encoding, checks the value is kept, and that re-encoding is byte-exact.
fn assert_kept<T: Der>(case: &str, v: &T) {
    let der = v.enc();
    let back = T::dec(&der).unwrap_or_else(|e| panic!("{case}: refused: {e}"));
    assert_eq!(&back, v, "{case}: value not kept");
    assert_eq!(back.enc(), der, "{case}: re-encoding differs");
}

/// For each row: the Go zero-value form and the ordinary form both decode and
/// re-encode byte for byte.
/// One table row: the field's name and how to set it to the other form.
type Row<T> = (&'static str, fn(&mut T));

fn check_rows<T: Der>(base: &T, rows: &[Row<T>]) {
    assert_kept("base", base);
    for (case, zero) in rows {
        let mut v = base.clone();
        zero(&mut v);
        assert_ne!(&v, base, "{case}: the row changes nothing");
        assert_kept(case, &v);
    }
}

fn aic_full() -> Aic {
    Aic::from_der(&der_vector("AIC_FULL")).unwrap()
}

fn tbs_v1() -> DelegationAuthTbs {
    DelegationAuthTbs::from_der(&der_vector("TBS")).unwrap()
}

fn tbs_v2() -> DelegationAuthTbs {
    let mut t = tbs_v1();
    t.version = 2;
    t.agent_key_binding = Some(AgentKeyBinding::for_spki(b"agent spki"));
    t
}

/// `0001-01-01T00:00:00Z`, Go's zero `time.Time`.
const GO_ZERO_TIME: i64 = -62_135_596_800;

#[test]
fn accepts_go_zero_principal_uid_fields() {
    let base = PrincipalUid::from_der(&der_vector("PU_FULL")).unwrap();
    check_rows(
        &base,
        &[
            ("version 0", |p| p.version = 0),
            ("realm \"\"", |p| p.realm.clear()),
            ("identifier \"\"", |p| p.identifier.clear()),
            ("keyHash empty", |p| p.key_hash.clear()),
            ("hashAlgo absent", |p| p.hash_algo = None),
        ],
    );
    // Exactly the bytes the reference writes for the zero-valued UID fields.
    let mut p = base.clone();
    p.version = 0;
    p.key_hash.clear();
    let der = p.to_der();
    assert_eq!(
        &der[2..5],
        &[0x02, 0x01, 0x00],
        "version 0 written explicitly"
    );
    assert!(
        der.windows(4).any(|w| w == [0x04, 0x00, 0xa0, 0x0d]),
        "empty keyHash OCTET STRING before hashAlgo"
    );
    // The string form (what Warrant builds) stays strict.
    assert!(PrincipalUid::parse("corp.com:zhangsan:").is_err());
    assert!(PrincipalUid::parse(":zhangsan:AAAA").is_err());
}

#[test]
fn accepts_go_zero_capability_fields() {
    let base = Capability::from_der(&der_vector("CAP")).unwrap();
    check_rows(
        &base,
        &[
            ("schemeId \"\"", |c| c.scheme_id.clear()),
            ("capabilityId \"\"", |c| c.capability_id.clear()),
            ("parameters present, empty", |c| c.parameters = Some(vec![])),
            ("parameters absent", |c| c.parameters = None),
        ],
    );
    assert_eq!(
        Capability::new("", "", Some(&[])).to_der(),
        hex::decode("30080c000c00a0020400").unwrap()
    );
}

#[test]
fn accepts_go_zero_delegation_authorization_fields() {
    let base = DelegationAuthorization::from_der(&der_vector("DA_RAW")).unwrap();
    check_rows(
        &base,
        &[
            ("reason.reasonCode \"\"", |d| d.reason.code.clear()),
            ("reason.description \"\"", |d| d.reason.description.clear()),
            ("requestedLifetime 0", |d| d.requested_lifetime = 0),
            ("timestamp 0001-01-01", |d| d.timestamp = GO_ZERO_TIME),
            ("signatureAlgorithm parameters NULL", |d| {
                d.signature_algorithm.parameters = Some(vec![0x05, 0x00])
            }),
            ("signatureValue empty", |d| d.signature_value.clear()),
        ],
    );
    let mut d = base.clone();
    d.timestamp = GO_ZERO_TIME;
    assert!(
        d.to_der()
            .windows(17)
            .any(|w| w == b"\x18\x0f00010101000000Z"),
        "Go's zero time as GeneralizedTime"
    );
}

#[test]
fn keeps_go_zero_nonce_and_the_rule_rejects_it() {
    // Decoding keeps an empty nonce (rule 6); the nonce is the replay key the
    // CA consumes once (ca.md §4), so issuance and the verifier refuse it
    // through `check_nonce`.
    let mut w = Writer::new();
    w.octets(&[]);
    let empty = w.into_bytes();
    let da = der_vector("DA_RAW");
    let nonce_tlv: Vec<u8> = [&[0x04, 0x20][..], &[0u8; 32]].concat();
    let mut els = elements(&da);
    let i = els
        .iter()
        .position(|e| e.len() == nonce_tlv.len() && e[..2] == nonce_tlv[..2])
        .unwrap();
    els[i] = empty;
    let der = sequence(&els);
    let decoded = DelegationAuthorization::from_der(&der).unwrap();
    assert!(decoded.nonce.is_empty());
    assert_eq!(decoded.to_der(), der);
    let err = aic::model::check_nonce("DelegationAuthorization.nonce", &decoded.nonce).unwrap_err();
    assert_eq!(err.field, "DelegationAuthorization.nonce");
    assert_eq!(err.kind, DecodeErrorKind::NonceLength { actual: 0 });
}

#[test]
fn accepts_go_zero_aic_fields() {
    check_rows(
        &aic_full(),
        &[
            ("version 0", |a| a.version = 0),
            ("agentId \"\"", |a| a.agent_id.clear()),
            ("principalUid zero", |a| {
                a.principal_uid.version = 0;
                a.principal_uid.key_hash.clear();
            }),
            ("capabilities empty (30 00)", |a| a.capabilities.clear()),
            ("delegationMode 1", |a| {
                a.delegation_mode = DelegationMode::Representative
            }),
            ("constraints absent", |a| a.constraints.clear()),
            ("delegationAuthorization absent", |a| {
                a.delegation_authorization = None
            }),
            ("extensions present", |a| {
                a.extensions = vec![
                    DelegationDepthControl {
                        chain_depth: 0,
                        max_depth: 0,
                    }
                    .to_ext_field(),
                ]
            }),
            ("extension with empty extnValue", |a| {
                a.extensions = vec![ExtField {
                    extn_id: Oid::parse("1.2.3.4").unwrap(),
                    critical: false,
                    extn_value: vec![],
                }]
            }),
        ],
    );
}

#[test]
fn accepts_go_zero_delegation_depth_control_fields() {
    check_rows(
        &DelegationDepthControl {
            chain_depth: 1,
            max_depth: 2,
        },
        &[
            ("chainDepth 0", |d| d.chain_depth = 0),
            ("maxDepth 0", |d| d.max_depth = 0),
        ],
    );
}

#[test]
fn accepts_go_zero_delegation_policy_fields() {
    check_rows(
        &DelegationPolicy::from_der(&der_vector("DPOL")).unwrap(),
        &[
            ("version 0", |d| d.version = 0),
            ("maxAgents 0", |d| d.max_agents = 0),
            ("allowedMode 0", |d| d.allowed_mode = 0),
            ("maxSessionHours present, 0", |d| {
                d.max_session_hours = Some(0)
            }),
            ("maxSessionHours present, 8", |d| {
                d.max_session_hours = Some(8)
            }),
        ],
    );
}

#[test]
fn accepts_go_zero_principal_authorization_fields() {
    check_rows(
        &PrincipalAuthorization::from_der(&der_vector("PA")).unwrap(),
        &[
            ("version 0", |p| p.version = 0),
            ("grants empty (30 00)", |p| p.grants.clear()),
            ("constraints absent", |p| p.constraints.clear()),
            ("delegationPolicy absent", |p| p.delegation_policy = None),
            ("extensions present", |p| {
                p.extensions = vec![ExtField {
                    extn_id: Oid::parse("1.2.3.4").unwrap(),
                    critical: false,
                    extn_value: vec![],
                }]
            }),
        ],
    );
}

#[test]
fn accepts_go_zero_tbs_fields() {
    for base in [tbs_v1(), tbs_v2()] {
        check_rows(
            &base,
            &[
                ("agentId \"\"", |t| t.agent_id.clear()),
                ("principalUid.version 0", |t| t.principal_uid.version = 0),
                ("principalUid.realm \"\"", |t| t.principal_uid.realm.clear()),
                ("principalUid.identifier \"\"", |t| {
                    t.principal_uid.identifier.clear()
                }),
                ("principalUid.keyHash empty", |t| {
                    t.principal_uid.key_hash.clear()
                }),
                ("principalUid.hashAlgo absent", |t| {
                    t.principal_uid.hash_algo = None
                }),
                ("reason.reasonCode \"\"", |t| t.reason.code.clear()),
                ("reason.description \"\"", |t| t.reason.description.clear()),
                ("capabilities empty", |t| t.capabilities.clear()),
                ("capability ids \"\"", |t| {
                    t.capabilities[0].scheme_id.clear();
                    t.capabilities[0].capability_id.clear();
                }),
                ("delegationMode 1", |t| {
                    t.delegation_mode = DelegationMode::Representative
                }),
                ("constraints absent", |t| t.constraints.clear()),
                ("requestedLifetime 0", |t| t.requested_lifetime = 0),
                ("timestamp 0001-01-01", |t| t.timestamp = GO_ZERO_TIME),
            ],
        );
    }
    // version 0 has version 1's shape (no binding); agentKeyBinding.keyHash may be empty.
    let mut t = tbs_v1();
    t.version = 0;
    assert_kept("version 0", &t);
    let mut t = tbs_v2();
    t.agent_key_binding.as_mut().unwrap().key_hash.clear();
    assert_kept("agentKeyBinding.keyHash empty", &t);
    let mut t = tbs_v2();
    t.version = 0;
    assert_eq!(
        DelegationAuthTbs::from_der(&t.to_der()).unwrap_err().field,
        "DelegationAuthTBS.agentKeyBinding"
    );
}

#[test]
fn accepts_go_zero_algorithm_identifier_parameters() {
    let base = AlgorithmIdentifier::sha256();
    check_rows(
        &base,
        &[("parameters NULL", |a| a.parameters = Some(vec![0x05, 0x00]))],
    );
}

/// The shape the issue reports `warrant aic decode --type tbs` refusing: a v2
/// TBS with `PrincipalUid.version 0` and an empty keyHash, the agent bound
/// through agentKeyBinding. It decodes, re-encodes exactly, and the principal's
/// signature over it verifies; issuance (`validate`) still refuses such a UID.
#[test]
fn accepts_go_zero_principal_uid_in_v2_tbs_and_its_signature_verifies() {
    let pkcs8 = generate_signing_key(DaSigningAlgorithm::EcdsaP256Sha256).unwrap();
    let spki = spki_from_pkcs8(&pkcs8).unwrap();
    let agent =
        spki_from_pkcs8(&generate_signing_key(DaSigningAlgorithm::EcdsaP256Sha256).unwrap())
            .unwrap();
    let mut t = tbs_v2();
    t.principal_uid.version = 0;
    t.principal_uid.key_hash.clear();
    t.agent_key_binding = Some(AgentKeyBinding::for_spki(&agent));
    let go_bytes = t.to_der();
    let (alg, sig) =
        sign_delegation(&go_bytes, &pkcs8, DaSigningAlgorithm::EcdsaP256Sha256).unwrap();

    let decoded = DelegationAuthTbs::from_der(&go_bytes).unwrap();
    assert_eq!(decoded.principal_uid.version, 0);
    assert!(decoded.principal_uid.key_hash.is_empty());
    assert!(decoded.agent_key_binding_matches(&agent));
    let reencoded = decoded.to_der();
    assert_eq!(reencoded, go_bytes);
    verify_delegation(&reencoded, &alg, &sig, &spki).unwrap();

    // Through the JSON form `warrant aic decode/encode` uses, too.
    let json = serde_json::to_string(&decoded).unwrap();
    let back: DelegationAuthTbs = serde_json::from_str(&json).unwrap();
    assert_eq!(back.to_der(), go_bytes);

    let err = decoded.validate().unwrap_err();
    assert_eq!(err.field, "PrincipalUid.version");
}

#[test]
fn rejects_go_zero_values_in_what_warrant_builds() {
    let cases: [Row<DelegationAuthTbs>; 9] = [
        ("DelegationAuthTBS.version", |t| {
            t.version = 0;
            t.agent_key_binding = None;
        }),
        ("DelegationAuthTBS.agentId", |t| t.agent_id.clear()),
        ("PrincipalUid.version", |t| t.principal_uid.version = 0),
        ("PrincipalUid.realm", |t| t.principal_uid.realm.clear()),
        ("PrincipalUid.identifier", |t| {
            t.principal_uid.identifier.clear()
        }),
        ("PrincipalUid.keyHash", |t| t.principal_uid.key_hash.clear()),
        ("reason.reasonCode", |t| t.reason.code.clear()),
        ("Capability.schemeId", |t| {
            t.capabilities[0].scheme_id.clear()
        }),
        ("DelegationAuthTBS.agentKeyBinding.keyHash", |t| {
            t.agent_key_binding.as_mut().unwrap().key_hash.clear()
        }),
    ];
    tbs_v2().validate().unwrap();
    for (field, zero) in cases {
        let mut t = tbs_v2();
        zero(&mut t);
        DelegationAuthTbs::from_der(&t.to_der()).unwrap_or_else(|e| panic!("{field}: {e}"));
        assert_eq!(t.validate().unwrap_err().field, field);
    }
}

// --- present but empty: the model cannot keep it, so it is refused ---------

fn elements(der: &[u8]) -> Vec<Vec<u8>> {
    let mut r = Reader::new(der);
    let mut s = r.read_nested(0x30, "test").unwrap();
    let mut out = Vec::new();
    while !s.is_empty() {
        out.push(s.read_any_raw("test").unwrap().to_vec());
    }
    out
}

fn sequence(els: &[Vec<u8>]) -> Vec<u8> {
    let mut w = Writer::new();
    w.sequence(|w| els.iter().for_each(|e| w.raw(e)));
    w.into_bytes()
}

fn with_inserted(der: &[u8], at: usize, tlv: &[u8]) -> Vec<u8> {
    let mut els = elements(der);
    els.insert(at, tlv.to_vec());
    sequence(&els)
}

#[test]
fn rejects_present_but_empty_constraints_and_extensions() {
    let present_empty = |tag: u8| vec![tag, 0x02, 0x30, 0x00];
    let simple = der_vector("AIC_SIMPLE");
    // Sanity: the helpers rebuild the vector exactly.
    assert_eq!(sequence(&elements(&simple)), simple);

    let err = Aic::from_der(&with_inserted(&simple, 5, &present_empty(0xa0))).unwrap_err();
    assert_eq!(err.field, "AIC.authorizationConstraints");
    let err = Aic::from_der(&with_inserted(&simple, 5, &present_empty(0xa1))).unwrap_err();
    assert_eq!(err.field, "AIC.extensions");

    let mut tbs = tbs_v1();
    tbs.constraints.clear();
    let err = DelegationAuthTbs::from_der(&with_inserted(&tbs.to_der(), 6, &present_empty(0xa0)))
        .unwrap_err();
    assert_eq!(err.field, "DelegationAuthTBS.authorizationConstraints");

    let mut pa = PrincipalAuthorization::from_der(&der_vector("PA")).unwrap();
    pa.constraints.clear();
    pa.delegation_policy = None;
    let err =
        PrincipalAuthorization::from_der(&with_inserted(&pa.to_der(), 2, &present_empty(0xa0)))
            .unwrap_err();
    assert_eq!(err.field, "PrincipalAuthorization.authorizationConstraints");
    let err =
        PrincipalAuthorization::from_der(&with_inserted(&pa.to_der(), 2, &present_empty(0xa2)))
            .unwrap_err();
    assert_eq!(err.field, "PrincipalAuthorization.extensions");
}

#[test]
fn rejects_out_of_range_values_that_are_not_go_zero_values() {
    // Relaxing the lower bounds keeps the upper ones (bounded sizes) and the ranges.
    let mut p = PrincipalUid::from_der(&der_vector("PU_FULL")).unwrap();
    p.version = 2;
    assert!(PrincipalUid::from_der(&p.to_der()).is_err());
    p.version = -1;
    assert!(PrincipalUid::from_der(&p.to_der()).is_err());
    let mut p = PrincipalUid::from_der(&der_vector("PU_FULL")).unwrap();
    p.key_hash = vec![0; 65];
    assert_eq!(
        PrincipalUid::from_der(&p.to_der()).unwrap_err().kind,
        DecodeErrorKind::SizeOutOfRange {
            min: 1,
            max: 64,
            actual: 65
        }
    );
    let mut t = tbs_v1();
    t.version = 3;
    assert!(DelegationAuthTbs::from_der(&t.to_der()).is_err());
}
