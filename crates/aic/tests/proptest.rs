//! Property tests: valid structures round-trip through DER (and JSON);
//! arbitrary or mutated bytes never panic any decoder or the JWT parser.

use aic::jwt::{VerifyOptions, verify_aic_jwt};
use aic::*;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

fn text(max_chars: usize) -> impl Strategy<Value = String> {
    // Mix ASCII and multi-byte characters; byte length stays within every bound used below.
    prop_oneof![
        proptest::string::string_regex(&format!("[a-zA-Z0-9:/_.*-]{{1,{max_chars}}}")).unwrap(),
        proptest::string::string_regex(&format!("[a-zé中🔑]{{1,{}}}", max_chars / 4)).unwrap(),
    ]
}

fn alg_id() -> impl Strategy<Value = AlgorithmIdentifier> {
    prop_oneof![
        Just(AlgorithmIdentifier::sha256()),
        Just(AlgorithmIdentifier::new(
            Oid::parse(oid::ECDSA_WITH_SHA256).unwrap()
        )),
        Just(AlgorithmIdentifier {
            oid: Oid::parse(oid::SHA256_WITH_RSA).unwrap(),
            parameters: Some(vec![5, 0])
        }),
    ]
}

fn capability() -> impl Strategy<Value = Capability> {
    (text(100), text(200), option::of(vec(any::<u8>(), 0..64))).prop_map(|(s, c, p)| Capability {
        scheme_id: s,
        capability_id: c,
        parameters: p,
    })
}

fn principal_uid() -> impl Strategy<Value = PrincipalUid> {
    (
        text(100),
        text(200),
        vec(any::<u8>(), 1..=64),
        option::of(alg_id()),
    )
        .prop_map(|(r, i, k, h)| PrincipalUid {
            version: 1,
            realm: r,
            identifier: i,
            key_hash: k,
            hash_algo: h,
        })
}

fn reason() -> impl Strategy<Value = Reason> {
    (text(60), text(400)).prop_map(|(code, description)| Reason { code, description })
}

fn mode() -> impl Strategy<Value = DelegationMode> {
    prop_oneof![
        Just(DelegationMode::Authorized),
        Just(DelegationMode::Representative)
    ]
}

const MAX_TIME: i64 = 253_402_300_799; // 9999-12-31T23:59:59Z

fn da() -> impl Strategy<Value = DelegationAuthorization> {
    (
        reason(),
        0..=86_400i64,
        0..=MAX_TIME,
        // Any length round-trips (aic.md rule 6); 32 is what Warrant emits.
        vec(any::<u8>(), 0..80),
        alg_id(),
        vec(any::<u8>(), 0..128),
    )
        .prop_map(
            |(
                reason,
                requested_lifetime,
                timestamp,
                nonce,
                signature_algorithm,
                signature_value,
            )| {
                DelegationAuthorization {
                    reason,
                    requested_lifetime,
                    timestamp,
                    nonce,
                    signature_algorithm,
                    signature_value,
                }
            },
        )
}

fn ext_field() -> impl Strategy<Value = ExtField> {
    prop_oneof![
        (any::<u32>(), vec(any::<u8>(), 0..16)).prop_map(|(arc, v)| ExtField {
            extn_id: Oid::parse(&format!("1.2.3.{arc}")).unwrap(),
            critical: false,
            extn_value: v,
        }),
        (0..8i64, 0..8i64, any::<bool>()).prop_map(|(c, m, critical)| {
            let mut e = DelegationDepthControl {
                chain_depth: c,
                max_depth: m,
            }
            .to_ext_field();
            e.critical = critical;
            e
        }),
    ]
}

fn aic_strategy() -> impl Strategy<Value = Aic> {
    (
        1..=2i64,
        text(200),
        principal_uid(),
        vec(capability(), 0..6),
        mode(),
        vec(capability(), 0..4),
        option::of(da()),
        vec(ext_field(), 0..4),
    )
        .prop_map(
            |(
                version,
                agent_id,
                principal_uid,
                capabilities,
                delegation_mode,
                constraints,
                da,
                extensions,
            )| {
                Aic {
                    version,
                    agent_id,
                    principal_uid,
                    capabilities,
                    delegation_mode,
                    constraints,
                    delegation_authorization: da,
                    extensions,
                }
            },
        )
}

fn dpol() -> impl Strategy<Value = DelegationPolicy> {
    (0..1000i64, 0..=1i64, option::of(0..10_000i64)).prop_map(|(max_agents, allowed_mode, h)| {
        DelegationPolicy {
            version: 1,
            max_agents,
            allowed_mode,
            max_session_hours: h,
        }
    })
}

fn pa() -> impl Strategy<Value = PrincipalAuthorization> {
    (
        vec(capability(), 0..6),
        vec(capability(), 0..4),
        option::of(dpol()),
        vec(ext_field(), 0..3),
    )
        .prop_map(|(grants, constraints, delegation_policy, extensions)| {
            PrincipalAuthorization {
                version: 1,
                grants,
                constraints,
                delegation_policy,
                extensions,
            }
        })
}

fn tbs() -> impl Strategy<Value = DelegationAuthTbs> {
    (
        text(200),
        principal_uid(),
        reason(),
        vec(capability(), 0..6),
        mode(),
        vec(capability(), 0..4),
        0..=86_400i64,
        0..=MAX_TIME,
        // Any length round-trips (aic.md rule 6); 32 is what Warrant emits.
        vec(any::<u8>(), 0..80),
        option::of(vec(any::<u8>(), 1..200)),
    )
        .prop_map(
            |(agent_id, pu, reason, caps, mode, cons, lifetime, ts, nonce, agent_spki)| {
                DelegationAuthTbs {
                    version: if agent_spki.is_some() { 2 } else { 1 },
                    agent_id,
                    principal_uid: pu,
                    reason,
                    capabilities: caps,
                    delegation_mode: mode,
                    constraints: cons,
                    requested_lifetime: lifetime,
                    timestamp: ts,
                    nonce,
                    agent_key_binding: agent_spki.as_deref().map(AgentKeyBinding::for_spki),
                }
            },
        )
}

fn all_decoders(bytes: &[u8]) {
    let _ = Aic::from_der(bytes);
    let _ = DelegationAuthTbs::from_der(bytes);
    let _ = PrincipalAuthorization::from_der(bytes);
    let _ = Capability::from_der(bytes);
    let _ = PrincipalUid::from_der(bytes);
    let _ = DelegationPolicy::from_der(bytes);
    let _ = DelegationAuthorization::from_der(bytes);
    let _ = DelegationDepthControl::from_der(bytes);
    let _ = AlgorithmIdentifier::from_der(bytes);
    let _ = PublicKey::from_spki(bytes);
    let _ = cert::CertificateView::from_der(bytes);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn valid_aic_round_trips(a in aic_strategy()) {
        let der = a.to_der();
        let back = Aic::from_der(&der).unwrap();
        prop_assert_eq!(&back, &a);
        prop_assert_eq!(back.to_der(), der);
        let json = serde_json::to_string(&a).unwrap();
        prop_assert_eq!(serde_json::from_str::<Aic>(&json).unwrap(), a);
    }

    #[test]
    fn valid_tbs_round_trips(t in tbs()) {
        let der = t.to_der();
        prop_assert_eq!(DelegationAuthTbs::from_der(&der).unwrap(), t);
    }

    #[test]
    fn valid_pa_round_trips(p in pa()) {
        let der = p.to_der();
        prop_assert_eq!(&PrincipalAuthorization::from_der(&der).unwrap(), &p);
        let json = serde_json::to_string(&p).unwrap();
        prop_assert_eq!(serde_json::from_str::<PrincipalAuthorization>(&json).unwrap(), p);
    }

    #[test]
    fn valid_small_structures_round_trip(c in capability(), u in principal_uid(), d in da(), pol in dpol()) {
        prop_assert_eq!(Capability::from_der(&c.to_der()).unwrap(), c);
        prop_assert_eq!(PrincipalUid::from_der(&u.to_der()).unwrap(), u);
        prop_assert_eq!(DelegationAuthorization::from_der(&d.to_der()).unwrap(), d);
        prop_assert_eq!(DelegationPolicy::from_der(&pol.to_der()).unwrap(), pol);
    }

    #[test]
    fn principal_uid_string_form_round_trips(u in principal_uid()) {
        prop_assume!(!u.realm.contains(':'));
        let s = u.to_string();
        let parsed = PrincipalUid::parse(&s).unwrap();
        prop_assert_eq!(&parsed.realm, &u.realm);
        prop_assert_eq!(&parsed.identifier, &u.identifier);
        prop_assert_eq!(&parsed.key_hash, &u.key_hash);
        prop_assert_eq!(parsed.to_string(), s);
    }

    #[test]
    fn arbitrary_bytes_never_panic_decoders(bytes in vec(any::<u8>(), 0..512)) {
        all_decoders(&bytes);
    }

    #[test]
    fn mutated_valid_encodings_never_panic_decoders(a in aic_strategy(), flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4)) {
        let mut der = a.to_der();
        for (i, b) in flips {
            let at = i.index(der.len());
            der[at] ^= b;
        }
        all_decoders(&der);
    }

    #[test]
    fn arbitrary_text_never_panics_jwt_verifier(token in ".{0,300}", parts in vec("[A-Za-z0-9_-]{0,80}", 0..5)) {
        let spki = [0u8; 4];
        let opts = VerifyOptions::new(&spki, &spki, 0);
        prop_assert!(verify_aic_jwt(&token, &opts).is_err());
        prop_assert!(verify_aic_jwt(&parts.join("."), &opts).is_err());
    }
}
