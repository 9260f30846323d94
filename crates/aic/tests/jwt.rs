//! AIC-JWT: the Go-signed vector, issuance round trips, and each pipeline step's rejection.

mod common;

use aic::jwt::*;
use aic::*;
use base64::{Engine, engine::general_purpose::STANDARD, engine::general_purpose::URL_SAFE_NO_PAD};
use serde_json::{Value, json};

struct GoVector {
    token: String,
    issuer_spki: Vec<u8>,
    principal_spki: Vec<u8>,
    iat: i64,
    validate_at: i64,
    issuer: String,
    audience: String,
    v: Value,
}

fn go_vector() -> GoVector {
    let v = common::jwt_vectors();
    GoVector {
        token: v["authorized_token"].as_str().unwrap().into(),
        issuer_spki: STANDARD
            .decode(v["issuer_spki_b64"].as_str().unwrap())
            .unwrap(),
        principal_spki: STANDARD
            .decode(v["principal_spki_b64"].as_str().unwrap())
            .unwrap(),
        iat: v["iat"].as_i64().unwrap(),
        validate_at: v["validate_at"].as_i64().unwrap(),
        issuer: v["expected_issuer"].as_str().unwrap().into(),
        audience: v["expected_audience"][0].as_str().unwrap().into(),
        v,
    }
}

fn select_50() -> CapabilityClaim {
    CapabilityClaim {
        scheme: "database".into(),
        id: "query:SELECT".into(),
        params: Some(json!({"max_rows": 50})),
    }
}

fn go_opts<'a>(g: &'a GoVector, now: i64, ip: &str) -> VerifyOptions<'a> {
    let mut o = VerifyOptions::new(&g.issuer_spki, &g.principal_spki, now);
    o.expected_issuer = Some(&g.issuer);
    o.expected_audience = Some(&g.audience);
    o.source_ip = Some(ip.parse().unwrap());
    o.requested_capability = Some(select_50());
    o
}

#[test]
fn go_vector_is_permitted_at_validate_at_from_allowed_cidr() {
    let g = go_vector();
    let r = verify_aic_jwt(&g.token, &go_opts(&g, g.validate_at, "10.1.2.3")).unwrap();
    assert_eq!(r.parties.actor.as_deref(), Some("agent:db-analyst-01"));
    assert_eq!(r.parties.executor.as_deref(), Some("agent:db-analyst-01"));
    assert_eq!(r.parties.principal.as_deref(), Some("corp.com:zhangsan"));
}

#[test]
fn go_vector_is_denied_on_time_after_expiry() {
    let g = go_vector();
    let d = verify_aic_jwt(&g.token, &go_opts(&g, g.iat + 4000, "10.1.2.3")).unwrap_err();
    assert_eq!(d.step, Step::Time, "{d}");
}

#[test]
fn go_vector_is_denied_on_constraints_from_outside_cidr() {
    let g = go_vector();
    let d = verify_aic_jwt(&g.token, &go_opts(&g, g.validate_at, "192.168.9.9")).unwrap_err();
    assert_eq!(d.step, Step::Constraints, "{d}");
    assert_eq!(d.parties.actor.as_deref(), Some("agent:db-analyst-01"));
}

#[test]
fn go_vector_key_hash_and_jwk_thumbprint_are_reproduced() {
    let g = go_vector();
    assert_eq!(
        key_hash(&g.principal_spki, KeyHashAlg::Sha256).unwrap(),
        g.v["expected_key_hash_sha256_b64url"]
    );
    assert_eq!(
        jwk_thumbprint(&g.principal_spki).unwrap(),
        g.v["expected_jkt"]
    );
}

#[test]
fn go_vector_presenter_key_matches_cnf_jkt() {
    let g = go_vector();
    let mut o = go_opts(&g, g.validate_at, "10.1.2.3");
    o.presenter_spki_der = Some(&g.principal_spki);
    assert!(verify_aic_jwt(&g.token, &o).is_ok());
    o.presenter_spki_der = Some(&g.issuer_spki);
    assert_eq!(verify_aic_jwt(&g.token, &o).unwrap_err().step, Step::Cnf);
}

#[test]
fn go_vector_rejects_capability_beyond_grant() {
    let g = go_vector();
    let mut o = go_opts(&g, g.validate_at, "10.1.2.3");
    o.requested_capability = Some(CapabilityClaim {
        params: Some(json!({"max_rows": 5000})),
        ..select_50()
    });
    assert_eq!(
        verify_aic_jwt(&g.token, &o).unwrap_err().step,
        Step::Capability
    );
    o.requested_capability = Some(CapabilityClaim {
        id: "query:DELETE".into(),
        ..select_50()
    });
    assert_eq!(
        verify_aic_jwt(&g.token, &o).unwrap_err().step,
        Step::Capability
    );
}

#[test]
fn go_vector_rejects_wrong_issuer_or_audience() {
    let g = go_vector();
    let mut o = go_opts(&g, g.validate_at, "10.1.2.3");
    o.expected_issuer = Some("https://evil.example.com");
    assert_eq!(
        verify_aic_jwt(&g.token, &o).unwrap_err().step,
        Step::IssuerAudience
    );
    let mut o = go_opts(&g, g.validate_at, "10.1.2.3");
    o.expected_audience = Some("https://other.example.com");
    assert_eq!(
        verify_aic_jwt(&g.token, &o).unwrap_err().step,
        Step::IssuerAudience
    );
}

#[test]
fn go_vector_rejects_swapped_keys() {
    let g = go_vector();
    let mut o = go_opts(&g, g.validate_at, "10.1.2.3");
    o.issuer_spki_der = &g.principal_spki;
    assert_eq!(
        verify_aic_jwt(&g.token, &o).unwrap_err().step,
        Step::OuterSignature
    );
    let mut o = go_opts(&g, g.validate_at, "10.1.2.3");
    o.principal_spki_der = &g.issuer_spki;
    assert_eq!(
        verify_aic_jwt(&g.token, &o).unwrap_err().step,
        Step::DaSignature
    );
}

fn resign_header(token: &str, header: &str) -> String {
    let mut parts: Vec<&str> = token.split('.').collect();
    let h = URL_SAFE_NO_PAD.encode(header);
    parts[0] = &h;
    parts.join(".")
}

#[test]
fn rejects_alg_none_and_hmac() {
    let g = go_vector();
    for header in [
        r#"{"alg":"none","kid":"ca-2026-01","typ":"aic+jwt"}"#,
        r#"{"alg":"HS256","kid":"ca-2026-01","typ":"aic+jwt"}"#,
        r#"{"alg":"HS512","kid":"ca-2026-01","typ":"aic+jwt"}"#,
    ] {
        let forged = resign_header(&g.token, header);
        let d = verify_aic_jwt(&forged, &go_opts(&g, g.validate_at, "10.1.2.3")).unwrap_err();
        assert_eq!(d.step, Step::OuterSignature);
        assert!(d.reason.contains("not allowed"), "{d}");
    }
    let mut unsigned = g.token.rsplit_once('.').unwrap().0.to_owned();
    unsigned.push('.');
    let forged = resign_header(&unsigned, r#"{"alg":"none","kid":"k","typ":"aic+jwt"}"#);
    assert_eq!(
        verify_aic_jwt(&forged, &go_opts(&g, g.validate_at, "10.1.2.3"))
            .unwrap_err()
            .step,
        Step::OuterSignature
    );
}

#[test]
fn rejects_wrong_typ_missing_kid_and_crit() {
    let g = go_vector();
    for header in [
        r#"{"alg":"ES256","kid":"ca-2026-01","typ":"JWT"}"#,
        r#"{"alg":"ES256","typ":"aic+jwt"}"#,
        r#"{"alg":"ES256","kid":"ca-2026-01","typ":"aic+jwt","crit":["exp"]}"#,
    ] {
        let d = verify_aic_jwt(
            &resign_header(&g.token, header),
            &go_opts(&g, g.validate_at, "10.1.2.3"),
        )
        .unwrap_err();
        assert_eq!(d.step, Step::OuterSignature, "{header}");
    }
}

#[test]
fn rejects_tampered_outer_payload() {
    let g = go_vector();
    let parts: Vec<&str> = g.token.split('.').collect();
    let mut claims: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
    claims["exp"] = json!(g.iat + 86_400);
    let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap());
    let forged = format!("{}.{}.{}", parts[0], body, parts[2]);
    assert_eq!(
        verify_aic_jwt(&forged, &go_opts(&g, g.validate_at, "10.1.2.3"))
            .unwrap_err()
            .step,
        Step::OuterSignature
    );
}

#[test]
fn rejects_padded_or_malformed_segments() {
    let g = go_vector();
    let padded = format!("{}=", g.token);
    assert_eq!(
        verify_aic_jwt(&padded, &go_opts(&g, g.validate_at, "10.1.2.3"))
            .unwrap_err()
            .step,
        Step::OuterSignature
    );
    for bad in ["", "a.b", "a.b.c.d", "....", "e30.e30.e30"] {
        assert_eq!(
            verify_aic_jwt(bad, &go_opts(&g, g.validate_at, "10.1.2.3"))
                .unwrap_err()
                .step,
            Step::OuterSignature
        );
    }
}

// --- Issuance round trips with fresh keys ---------------------------------

struct Keys {
    issuer: JwsSigningKey,
    issuer_spki: Vec<u8>,
    principal: JwsSigningKey,
    principal_spki: Vec<u8>,
    agent_spki: Vec<u8>,
}

fn keys() -> Keys {
    let ipk = generate_signing_key(DaSigningAlgorithm::EcdsaP256Sha256).unwrap();
    let ppk = generate_signing_key(DaSigningAlgorithm::Ed25519).unwrap();
    let apk = generate_signing_key(DaSigningAlgorithm::EcdsaP256Sha256).unwrap();
    Keys {
        issuer_spki: spki_from_pkcs8(&ipk).unwrap(),
        issuer: JwsSigningKey {
            alg: JwsAlgorithm::ES256,
            pkcs8_der: ipk,
            kid: Some("ca-1".into()),
        },
        principal_spki: spki_from_pkcs8(&ppk).unwrap(),
        principal: JwsSigningKey {
            alg: JwsAlgorithm::EdDSA,
            pkcs8_der: ppk,
            kid: Some("p-1".into()),
        },
        agent_spki: spki_from_pkcs8(&apk).unwrap(),
    }
}

const TS: i64 = 1_800_000_000;

fn issue(
    k: &Keys,
    mode: DelegationMode,
    key_hash_alg: KeyHashAlg,
    constraints: Vec<CapabilityClaim>,
) -> String {
    let da_req = DaJwtRequest {
        principal: PrincipalUid::parse("corp.com:zhangsan:AAAA").unwrap(),
        principal_spki_der: k.principal_spki.clone(),
        key_hash_alg,
        agent_id: "agent:report-bot".into(),
        audience: vec!["https://ca.example.com/aic".into()],
        reason: ReasonClaim {
            code: "REPORTS".into(),
            desc: "Weekly reports".into(),
        },
        capabilities: vec![CapabilityClaim {
            scheme: "http".into(),
            id: "GET:/reports/*".into(),
            params: None,
        }],
        delegation_mode: mode,
        constraints,
        requested_lifetime: 1800,
        ts: TS,
        nonce: [9u8; 32],
        agent_spki_der: Some(k.agent_spki.clone()),
    };
    let da = issue_da_jwt(&da_req, &k.principal).unwrap();
    let outer = OuterTokenRequest {
        issuer: "https://ca.example.com/aic".into(),
        audience: vec!["https://gw.example.com".into()],
        iat: TS,
        lifetime: 3600,
        cnf_jkt: Some(jwk_thumbprint(&k.agent_spki).unwrap()),
        added_constraints: vec![],
        chain_depth: 0,
        max_depth: Some(1),
    };
    issue_outer_token(&outer, &da, &k.issuer).unwrap()
}

fn opts(k: &Keys) -> VerifyOptions<'_> {
    let mut o = VerifyOptions::new(&k.issuer_spki, &k.principal_spki, TS + 10);
    o.expected_issuer = Some("https://ca.example.com/aic");
    o.expected_audience = Some("https://gw.example.com");
    o.presenter_spki_der = Some(&k.agent_spki);
    o.requested_capability = Some(CapabilityClaim {
        scheme: "http".into(),
        id: "GET:/reports/weekly".into(),
        params: None,
    });
    o
}

#[test]
fn issued_token_verifies_with_both_key_hash_forms() {
    let k = keys();
    for alg in [KeyHashAlg::Sha256, KeyHashAlg::Jkt] {
        let t = issue(&k, DelegationMode::Authorized, alg, vec![]);
        let v = verify_aic_jwt(&t, &opts(&k)).unwrap_or_else(|d| panic!("{alg:?}: {d}"));
        assert_eq!(v.parties.actor.as_deref(), Some("agent:report-bot"));
        assert_eq!(v.outer.exp, TS + 1800, "exp capped by requested_lifetime");
        assert_eq!(v.da.ver, 3);
    }
}

#[test]
fn rejects_da_signed_by_another_principal_key() {
    let k = keys();
    let other = keys();
    let t = issue(&k, DelegationMode::Authorized, KeyHashAlg::Sha256, vec![]);
    let mut o = opts(&k);
    o.principal_spki_der = &other.principal_spki;
    assert_eq!(verify_aic_jwt(&t, &o).unwrap_err().step, Step::DaSignature);
}

#[test]
fn rejects_token_presented_by_another_agent_key() {
    let k = keys();
    let other = keys();
    let t = issue(&k, DelegationMode::Authorized, KeyHashAlg::Sha256, vec![]);
    let mut o = opts(&k);
    o.presenter_spki_der = Some(&other.agent_spki);
    assert_eq!(verify_aic_jwt(&t, &o).unwrap_err().step, Step::Cnf);
}

#[test]
fn representative_mode_needs_pa_allowing_it_and_grants_covering_capabilities() {
    let k = keys();
    let t = issue(
        &k,
        DelegationMode::Representative,
        KeyHashAlg::Sha256,
        vec![],
    );
    let o = opts(&k);
    let d = verify_aic_jwt(&t, &o).unwrap_err();
    assert_eq!(d.step, Step::Representative);
    assert_eq!(d.parties.actor.as_deref(), Some("corp.com:zhangsan"));
    assert_eq!(d.parties.executor.as_deref(), Some("agent:report-bot"));

    let pa = |allowed_mode: i64, grant: &str| PrincipalAuthorization {
        version: 1,
        grants: vec![Capability::new("http", grant, None)],
        constraints: vec![],
        delegation_policy: Some(DelegationPolicy {
            version: 1,
            max_agents: 4,
            allowed_mode,
            max_session_hours: None,
        }),
        extensions: vec![],
    };
    let allowing = pa(1, "GET:*");
    let mut o = opts(&k);
    o.principal_authorization = Some(&allowing);
    assert!(verify_aic_jwt(&t, &o).is_ok());

    let authorized_only = pa(0, "GET:*");
    o.principal_authorization = Some(&authorized_only);
    assert_eq!(
        verify_aic_jwt(&t, &o).unwrap_err().step,
        Step::Representative
    );

    let narrow = pa(1, "GET:/public/*");
    o.principal_authorization = Some(&narrow);
    assert_eq!(
        verify_aic_jwt(&t, &o).unwrap_err().step,
        Step::Representative
    );
}

#[test]
fn constraints_are_anded_including_the_pa() {
    let k = keys();
    let window = CapabilityClaim {
        scheme: "varwof/constraint-v1".into(),
        id: "time-window".into(),
        params: Some(json!({"start": "22:00", "end": "06:00"})),
    };
    let conc = CapabilityClaim {
        scheme: "varwof/constraint-v1".into(),
        id: "max-concurrent".into(),
        params: Some(json!({"max": 3})),
    };
    let t = issue(
        &k,
        DelegationMode::Authorized,
        KeyHashAlg::Sha256,
        vec![window.clone(), conc.clone()],
    );
    // TS = 1_800_000_000 is 08:00 UTC, outside 22:00-06:00.
    let mut o = opts(&k);
    o.current_concurrency = Some(0);
    assert_eq!(verify_aic_jwt(&t, &o).unwrap_err().step, Step::Constraints);
    let mut pa_o = o.clone();
    let pa = PrincipalAuthorization {
        version: 1,
        grants: vec![],
        constraints: vec![Capability::new(
            "varwof/constraint-v1",
            "allowed-cidr",
            Some(br#"["10.0.0.0/8"]"#),
        )],
        delegation_policy: None,
        extensions: vec![],
    };
    pa_o.principal_authorization = Some(&pa);
    pa_o.source_ip = Some("192.168.1.1".parse().unwrap());
    assert_eq!(
        verify_aic_jwt(&t, &pa_o).unwrap_err().step,
        Step::Constraints
    );

    // A window that contains 08:00 UTC permits, as long as the concurrency count is known and below max.
    let day = CapabilityClaim {
        params: Some(json!({"start": "07:00", "end": "09:00"})),
        ..window
    };
    let t = issue(
        &k,
        DelegationMode::Authorized,
        KeyHashAlg::Sha256,
        vec![day, conc],
    );
    assert!(verify_aic_jwt(&t, &o).is_ok());
    o.current_concurrency = Some(3);
    assert_eq!(verify_aic_jwt(&t, &o).unwrap_err().step, Step::Constraints);
    o.current_concurrency = None;
    assert_eq!(verify_aic_jwt(&t, &o).unwrap_err().step, Step::Constraints);
}

#[test]
fn rejects_token_lifetime_beyond_delegation() {
    let k = keys();
    let t = issue(&k, DelegationMode::Authorized, KeyHashAlg::Sha256, vec![]);
    let mut o = opts(&k);
    o.now = TS + 1800 + 61;
    assert_eq!(verify_aic_jwt(&t, &o).unwrap_err().step, Step::Time);
    o.now = TS - 120;
    assert_eq!(verify_aic_jwt(&t, &o).unwrap_err().step, Step::Time);
}

#[test]
fn decision_serializes_in_cli_shape() {
    let g = go_vector();
    let r = verify_aic_jwt(&g.token, &go_opts(&g, g.iat + 4000, "10.1.2.3"));
    let d = serde_json::to_value(Decision::from(&r)).unwrap();
    assert_eq!(d["permit"], false);
    assert_eq!(d["failed_step"], "time");
    assert_eq!(d["actor"], "agent:db-analyst-01");
    assert_eq!(d["principal"], "corp.com:zhangsan");
}

#[test]
fn rejects_chain_depth_beyond_max_depth() {
    let k = keys();
    let t = issue(&k, DelegationMode::Authorized, KeyHashAlg::Sha256, vec![]);
    // Re-wrap the same DA with a deeper chain.
    let parts: Vec<&str> = t.split('.').collect();
    let claims: OuterClaims =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
    let outer = OuterTokenRequest {
        issuer: claims.iss.clone(),
        audience: vec!["https://gw.example.com".into()],
        iat: TS,
        lifetime: 600,
        cnf_jkt: Some(jwk_thumbprint(&k.agent_spki).unwrap()),
        added_constraints: vec![],
        chain_depth: 2,
        max_depth: Some(1),
    };
    let deep = issue_outer_token(&outer, &claims.da, &k.issuer).unwrap();
    let d = verify_aic_jwt(&deep, &opts(&k)).unwrap_err();
    assert_eq!(d.step, Step::Constraints);
    assert!(d.reason.contains("chain_depth"), "{d}");
}

// --- representative mode in the draft's (and the Go reference's) layout ----

fn pa_allowing_representative() -> PrincipalAuthorization {
    PrincipalAuthorization {
        version: 1,
        grants: vec![Capability::new("http", "GET:*", None)],
        constraints: vec![],
        delegation_policy: Some(DelegationPolicy {
            version: 1,
            max_agents: 4,
            allowed_mode: 1,
            max_session_hours: None,
        }),
        extensions: vec![],
    }
}

/// A token with the claim layout a Go-signed one has, built claim by claim and
/// signed with the test keys (not through `issue_da_jwt`, so it pins the
/// layout rather than our emitter). Representative mode: outer `sub` = the
/// principal's `realm:id`, `act.sub` = the agent; the DA's `sub` is `da_sub`
/// (the principal in the draft's form), the agent named by `agent_id`.
fn go_layout_token(k: &Keys, mode: &str, da_sub: &str) -> String {
    let nonce = URL_SAFE_NO_PAD.encode([7u8; 32]);
    let principal = json!({
        "realm": "corp.com",
        "id": "zhangsan",
        "key_hash": key_hash(&k.principal_spki, KeyHashAlg::Sha256).unwrap(),
        "hash_alg": "sha-256",
    });
    let caps = json!([{"scheme": "http", "id": "GET:/reports/*"}]);
    let da = json!({
        "ver": 3,
        "iss": "corp.com:zhangsan",
        "sub": da_sub,
        "aud": ["https://ca.example.com/aic"],
        "iat": TS,
        "exp": TS + 1800,
        "jti": nonce,
        "agent_id": "agent:report-bot",
        "principal": principal,
        "reason": {"code": "REPORTS", "desc": "Weekly reports"},
        "capabilities": caps,
        "delegation_mode": mode,
        "requested_lifetime": 1800,
        "ts": TS,
        "nonce": nonce,
        "agent_key_binding": {
            "key_hash": URL_SAFE_NO_PAD.encode(aic::crypto::sha256(&k.agent_spki)),
            "hash_alg": "sha-256",
        },
    });
    let da_jwt = jws::sign(&da, DA_TYP, &k.principal).unwrap();
    let mut outer = json!({
        "iss": "https://ca.example.com/aic",
        "sub": "agent:report-bot",
        "aud": ["https://gw.example.com"],
        "iat": TS,
        "exp": TS + 1800,
        "jti": nonce,
        "cnf": {"jkt": jwk_thumbprint(&k.agent_spki).unwrap()},
        "aic": {
            "ver": 1,
            "principal": principal,
            "delegation_mode": mode,
            "capabilities": caps,
            "chain_depth": 0,
            "max_depth": 1,
        },
        "da": da_jwt,
    });
    if mode == "representative" {
        outer["sub"] = json!("corp.com:zhangsan");
        outer["act"] = json!({"sub": "agent:report-bot"});
    }
    jws::sign(&outer, OUTER_TYP, &k.issuer).unwrap()
}

#[test]
fn accepts_go_representative_mode_token_with_principal_as_da_sub() {
    let k = keys();
    let t = go_layout_token(&k, "representative", "corp.com:zhangsan");
    let pa = pa_allowing_representative();
    let mut o = opts(&k);
    o.principal_authorization = Some(&pa);
    let v = verify_aic_jwt(&t, &o).unwrap_or_else(|d| panic!("{d}"));
    assert_eq!(v.parties.actor.as_deref(), Some("corp.com:zhangsan"));
    assert_eq!(v.parties.executor.as_deref(), Some("agent:report-bot"));
    assert_eq!(v.parties.principal.as_deref(), Some("corp.com:zhangsan"));
    assert_eq!(v.da.sub, "corp.com:zhangsan");
    assert_eq!(v.outer.act.as_ref().unwrap().sub, "agent:report-bot");
}

#[test]
fn accepts_representative_da_naming_the_agent_as_sub() {
    // What Warrant's DA JWTs carried before they followed the draft.
    let k = keys();
    let t = go_layout_token(&k, "representative", "agent:report-bot");
    let pa = pa_allowing_representative();
    let mut o = opts(&k);
    o.principal_authorization = Some(&pa);
    let v = verify_aic_jwt(&t, &o).unwrap_or_else(|d| panic!("{d}"));
    assert_eq!(v.parties.actor.as_deref(), Some("corp.com:zhangsan"));
    assert_eq!(v.parties.executor.as_deref(), Some("agent:report-bot"));
}

#[test]
fn rejects_representative_da_whose_sub_is_neither_principal_nor_agent() {
    let k = keys();
    let pa = pa_allowing_representative();
    let mut o = opts(&k);
    o.principal_authorization = Some(&pa);
    for sub in ["corp.com:someone-else", "agent:other-bot", "corp.com"] {
        let d = verify_aic_jwt(&go_layout_token(&k, "representative", sub), &o).unwrap_err();
        assert_eq!(d.step, Step::DaSignature, "{sub}");
        assert_eq!(
            d.reason, "DA sub is neither the principal nor agent_id",
            "{sub}"
        );
    }
}

#[test]
fn rejects_authorized_da_whose_sub_is_the_principal() {
    // Authorized mode is unchanged: the DA names the agent.
    let k = keys();
    let ok = go_layout_token(&k, "authorized", "agent:report-bot");
    let v = verify_aic_jwt(&ok, &opts(&k)).unwrap_or_else(|d| panic!("{d}"));
    assert_eq!(v.parties.actor.as_deref(), Some("agent:report-bot"));
    assert_eq!(v.parties.executor.as_deref(), Some("agent:report-bot"));
    for sub in ["corp.com:zhangsan", "agent:other-bot"] {
        let d = verify_aic_jwt(&go_layout_token(&k, "authorized", sub), &opts(&k)).unwrap_err();
        assert_eq!(d.step, Step::DaSignature, "{sub}");
        assert_eq!(d.reason, "DA sub is not agent_id", "{sub}");
    }
}

#[test]
fn issued_representative_da_names_the_principal_as_sub() {
    let k = keys();
    let t = issue(
        &k,
        DelegationMode::Representative,
        KeyHashAlg::Sha256,
        vec![],
    );
    let pa = pa_allowing_representative();
    let mut o = opts(&k);
    o.principal_authorization = Some(&pa);
    let v = verify_aic_jwt(&t, &o).unwrap_or_else(|d| panic!("{d}"));
    assert_eq!(v.da.sub, "corp.com:zhangsan");
    assert_eq!(v.da.agent_id, "agent:report-bot");
    let t = issue(&k, DelegationMode::Authorized, KeyHashAlg::Sha256, vec![]);
    assert_eq!(
        verify_aic_jwt(&t, &opts(&k)).unwrap().da.sub,
        "agent:report-bot"
    );
}
