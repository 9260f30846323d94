//! Strict-DER rules: each rejection names its field.

mod common;

use aic::der::Writer;
use aic::*;
use common::der_vector;

fn aic_simple() -> Aic {
    Aic::from_der(&der_vector("AIC_SIMPLE")).unwrap()
}

#[test]
fn rejects_ber_indefinite_length() {
    let mut der = der_vector("AIC_SIMPLE");
    der[1] = 0x80;
    der.extend_from_slice(&[0, 0]);
    let err = Aic::from_der(&der).unwrap_err();
    assert_eq!(err.kind, DecodeErrorKind::IndefiniteLength);
    assert_eq!(err.field, "AIC");
}

#[test]
fn rejects_ber_indefinite_length_in_nested_field() {
    // principalUid is the SEQUENCE at offset 16 of AIC_SIMPLE.
    let der = der_vector("AIC_SIMPLE");
    assert_eq!(der[16], 0x30);
    let mut bad = der.clone();
    bad[17] = 0x80;
    let err = Aic::from_der(&bad).unwrap_err();
    assert_eq!(err.kind, DecodeErrorKind::IndefiniteLength);
    assert_eq!(err.field, "PrincipalUid");
}

#[test]
fn rejects_trailing_bytes() {
    let mut der = der_vector("CAP");
    der.push(0x00);
    let err = Capability::from_der(&der).unwrap_err();
    assert_eq!(err.kind, DecodeErrorKind::TrailingBytes { count: 1 });
    assert_eq!(err.field, "Capability");
}

#[test]
fn rejects_trailing_bytes_inside_structure() {
    // Append a stray NULL inside the Capability SEQUENCE and fix the length.
    let mut der = der_vector("CAP");
    der.extend_from_slice(&[0x05, 0x00]);
    der[1] += 2;
    let err = Capability::from_der(&der).unwrap_err();
    assert!(
        matches!(err.kind, DecodeErrorKind::TrailingBytes { .. }),
        "{err}"
    );
}

#[test]
fn rejects_truncated_input() {
    let der = der_vector("AIC_FULL");
    for cut in [1, 2, 10, der.len() / 2, der.len() - 1] {
        assert!(Aic::from_der(&der[..cut]).is_err());
    }
}

#[test]
fn decodes_a_nonce_of_any_length_and_the_rule_rejects_all_but_32_bytes() {
    // aic.md rule 6: the codec keeps what the reference wrote (its TBS_V2
    // vector carries 16 bytes); the 32-byte rule is `check_nonce`'s.
    for len in [0usize, 16, 31, 32, 33, 64] {
        let mut w = Writer::new();
        w.sequence(|w| {
            w.sequence(|w| {
                w.utf8("code");
                w.utf8("desc");
            });
            w.integer(3600);
            w.generalized_time(1_787_011_200);
            w.octets(&vec![0xa0; len]);
            AlgorithmIdentifier::sha256().encode(w);
            w.octets(&[1, 2, 3]);
        });
        let der = w.into_bytes();
        let da = DelegationAuthorization::from_der(&der).unwrap();
        assert_eq!(da.nonce.len(), len);
        assert_eq!(
            da.to_der(),
            der,
            "{len}-byte nonce re-encodes byte for byte"
        );
        let rule = aic::model::check_nonce("DelegationAuthorization.nonce", &da.nonce);
        if len == 32 {
            assert!(rule.is_ok());
        } else {
            let err = rule.unwrap_err();
            assert_eq!(err.kind, DecodeErrorKind::NonceLength { actual: len });
            assert_eq!(err.field, "DelegationAuthorization.nonce");
        }
    }
}

#[test]
fn rejects_more_than_256_capabilities() {
    let mut aic = aic_simple();
    aic.capabilities = vec![Capability::new("http", "GET:*", None); 257];
    let err = Aic::from_der(&aic.to_der()).unwrap_err();
    assert_eq!(err.field, "AIC.capabilities");
    assert!(matches!(
        err.kind,
        DecodeErrorKind::TooManyElements { max: 256, .. }
    ));
    aic.capabilities.pop();
    assert!(Aic::from_der(&aic.to_der()).is_ok());
}

#[test]
fn rejects_more_than_32_constraints() {
    let mut aic = aic_simple();
    aic.constraints = vec![
        Capability::new(
            "varwof/constraint-v1",
            "max-concurrent",
            Some(b"{\"max\":1}")
        );
        33
    ];
    let err = Aic::from_der(&aic.to_der()).unwrap_err();
    assert_eq!(err.field, "AIC.authorizationConstraints");
    assert!(matches!(
        err.kind,
        DecodeErrorKind::TooManyElements { max: 32, .. }
    ));
}

#[test]
fn rejects_more_than_32_extensions() {
    let mut aic = aic_simple();
    let ext = ExtField {
        extn_id: Oid::parse("1.2.3.4").unwrap(),
        critical: false,
        extn_value: vec![5, 0],
    };
    aic.extensions = vec![ext; 33];
    let err = Aic::from_der(&aic.to_der()).unwrap_err();
    assert_eq!(err.field, "AIC.extensions");
    assert!(matches!(
        err.kind,
        DecodeErrorKind::TooManyElements { max: 32, .. }
    ));
}

#[test]
fn rejects_strings_outside_size_bounds() {
    let mut aic = aic_simple();
    aic.agent_id = "a".repeat(257);
    let err = Aic::from_der(&aic.to_der()).unwrap_err();
    assert_eq!(err.field, "AIC.agentId");
    assert_eq!(
        err.kind,
        DecodeErrorKind::SizeOutOfRange {
            min: 1,
            max: 256,
            actual: 257
        }
    );

    // An empty agentId is Go's zero value: decoding keeps it (aic.md rule 6);
    // `DelegationAuthTbs::validate` refuses it for issuance (tests/go_zero_values.rs).
    let mut aic = aic_simple();
    aic.agent_id = String::new();
    assert_eq!(Aic::from_der(&aic.to_der()).unwrap(), aic);

    let mut aic = aic_simple();
    aic.principal_uid.realm = "r".repeat(129);
    assert_eq!(
        Aic::from_der(&aic.to_der()).unwrap_err().field,
        "PrincipalUid.realm"
    );

    let mut aic = aic_simple();
    aic.principal_uid.key_hash = vec![0; 65];
    assert_eq!(
        Aic::from_der(&aic.to_der()).unwrap_err().field,
        "PrincipalUid.keyHash"
    );

    let mut aic = aic_simple();
    aic.capabilities[0].scheme_id = "s".repeat(129);
    assert_eq!(
        Aic::from_der(&aic.to_der()).unwrap_err().field,
        "Capability.schemeId"
    );
}

#[test]
fn rejects_requested_lifetime_above_one_day() {
    let mut da = DelegationAuthorization::from_der(&der_vector("DA_RAW")).unwrap();
    da.requested_lifetime = 86_401;
    let err = DelegationAuthorization::from_der(&da.to_der()).unwrap_err();
    assert_eq!(err.field, "DelegationAuthorization.requestedLifetime");
}

#[test]
fn encoded_zero_lifetime_means_3600() {
    let mut da = DelegationAuthorization::from_der(&der_vector("DA_RAW")).unwrap();
    da.requested_lifetime = 0;
    let back = DelegationAuthorization::from_der(&da.to_der()).unwrap();
    assert_eq!(back.requested_lifetime, 0);
    assert_eq!(effective_lifetime(back.requested_lifetime), 3600);
}

#[test]
fn rejects_unknown_critical_extfield() {
    let mut aic = aic_simple();
    aic.extensions = vec![ExtField {
        extn_id: Oid::parse("1.2.3.4.5").unwrap(),
        critical: true,
        extn_value: vec![0x05, 0x00],
    }];
    let err = Aic::from_der(&aic.to_der()).unwrap_err();
    assert_eq!(
        err.kind,
        DecodeErrorKind::UnknownCriticalExtension {
            oid: "1.2.3.4.5".into()
        }
    );
    assert_eq!(err.field, "AIC.extensions");

    let mut pa = PrincipalAuthorization::from_der(&der_vector("PA")).unwrap();
    pa.extensions = aic.extensions.clone();
    let err = PrincipalAuthorization::from_der(&pa.to_der()).unwrap_err();
    assert_eq!(err.field, "PrincipalAuthorization.extensions");
}

#[test]
fn accepts_unknown_noncritical_and_known_critical_extfields() {
    let mut aic = aic_simple();
    let depth = DelegationDepthControl {
        chain_depth: 0,
        max_depth: 1,
    };
    let mut known = depth.to_ext_field();
    known.critical = true;
    aic.extensions = vec![
        ExtField {
            extn_id: Oid::parse("1.2.3.4.5").unwrap(),
            critical: false,
            extn_value: vec![1],
        },
        known,
    ];
    let back = Aic::from_der(&aic.to_der()).unwrap();
    assert_eq!(back, aic);
    assert_eq!(back.depth_control().unwrap(), Some(depth));
}

#[test]
fn accepts_omitted_default_integers_and_reencodes_them_explicitly() {
    // AIC_SIMPLE without `version 1` (after the outer header) and without `delegationMode 0` (at the end).
    let der = der_vector("AIC_SIMPLE");
    let mut implicit = vec![0x30, der[1] - 6];
    implicit.extend_from_slice(&der[5..der.len() - 3]);
    let decoded = Aic::from_der(&implicit).unwrap();
    assert_eq!(decoded, aic_simple());
    assert_eq!(decoded.to_der(), der);
}

#[test]
fn accepts_omitted_max_agents_default() {
    let dpol = hex::decode("3006020101020101").unwrap();
    let d = DelegationPolicy::from_der(&dpol).unwrap();
    assert_eq!((d.max_agents, d.allowed_mode), (1, 1));
}

#[test]
fn rejects_v1_tbs_with_agent_key_binding() {
    let tbs = DelegationAuthTbs::from_der(&der_vector("TBS")).unwrap();
    let mut bad = tbs.clone();
    bad.agent_key_binding = Some(AgentKeyBinding::for_spki(b"spki"));
    let err = DelegationAuthTbs::from_der(&bad.to_der()).unwrap_err();
    assert_eq!(err.field, "DelegationAuthTBS.agentKeyBinding");
    let mut bad = tbs;
    bad.version = 2;
    assert_eq!(
        DelegationAuthTbs::from_der(&bad.to_der())
            .unwrap_err()
            .field,
        "DelegationAuthTBS.agentKeyBinding"
    );
}

#[test]
fn rejects_unknown_delegation_mode() {
    let mut der = der_vector("AIC_SIMPLE");
    let n = der.len();
    der[n - 1] = 2;
    let err = Aic::from_der(&der).unwrap_err();
    assert_eq!(err.field, "AIC.delegationMode");
}

#[test]
fn rejects_non_utc_generalized_time() {
    let der = der_vector("DA_RAW");
    let text = hex::encode(&der).replace(
        &hex::encode(b"20260818000000Z"),
        &hex::encode(b"20260818000000A"),
    );
    let err = DelegationAuthorization::from_der(&hex::decode(&text).unwrap()).unwrap_err();
    assert_eq!(err.field, "DelegationAuthorization.timestamp");
    assert_eq!(err.kind, DecodeErrorKind::InvalidTime);
}

#[test]
fn rejects_malformed_principal_uid_string() {
    assert!(PrincipalUid::parse("corp.com:zhangsan").is_err());
    assert!(PrincipalUid::parse("corp.com:zhangsan:not base64!").is_err());
    assert!(PrincipalUid::parse(":zhangsan:AAAA").is_err());
    assert!(PrincipalUid::parse("corp.com::AAAA").is_err());
    // The identifier may itself contain ':'.
    let p = PrincipalUid::parse("corp.com:user:42:AAAA").unwrap();
    assert_eq!(p.identifier, "user:42");
}
