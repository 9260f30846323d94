//! `warrant aic …` / `warrant aic-jwt …` run as a real process against the
//! conformance vectors (read from ../shared/conformance beside the checkout).

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn conformance(name: &str) -> Value {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::var("AIC_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| manifest.join("../../../shared/conformance"));
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "conformance vectors missing at {} ({e}); set AIC_CONFORMANCE_DIR",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap()
}

fn warrant(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_warrant"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "warrant-aic-cli-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn rand_suffix() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

#[test]
fn decode_then_encode_round_trips_every_der_vector() {
    let v = conformance("aic-der-vectors.json");
    for (name, kind) in [
        ("AIC_SIMPLE", "aic"),
        ("AIC_FULL", "aic"),
        ("TBS", "tbs"),
        ("PA", "pa"),
        ("CAP", "cap"),
        ("PU_FULL", "pu"),
        ("PU_SIMPLE", "pu"),
        ("DPOL", "dpol"),
        ("DA_RAW", "da"),
    ] {
        let hex = v[name].as_str().unwrap();
        let decoded = warrant(&["aic", "decode", "--type", kind, hex]);
        assert!(
            decoded.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&decoded.stderr)
        );
        let json = stdout(&decoded);
        let encoded = warrant(&["aic", "encode", "--type", kind, &json]);
        assert!(
            encoded.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&encoded.stderr)
        );
        assert_eq!(stdout(&encoded).trim(), hex, "{name}");
        // JSON -> DER -> JSON is stable too.
        let again = warrant(&["aic", "decode", "--type", kind, stdout(&encoded).trim()]);
        assert_eq!(stdout(&again), json, "{name}");
    }
}

#[test]
fn decode_reads_hex_or_raw_der_from_file() {
    let v = conformance("aic-der-vectors.json");
    let hex = v["PA"].as_str().unwrap();
    let dir = tempdir();
    let raw = dir.join("pa.der");
    std::fs::write(&raw, aic::hex::decode(hex).unwrap()).unwrap();
    let text = dir.join("pa.hex");
    std::fs::write(&text, format!("{hex}\n")).unwrap();
    let a = warrant(&[
        "aic",
        "decode",
        "--type",
        "pa",
        &format!("@{}", raw.display()),
    ]);
    let b = warrant(&[
        "aic",
        "decode",
        "--type",
        "pa",
        &format!("@{}", text.display()),
    ]);
    assert!(a.status.success() && b.status.success());
    assert_eq!(stdout(&a), stdout(&b));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn decode_rejects_invalid_der_naming_the_field() {
    // AIC_SIMPLE with an indefinite outer length.
    let v = conformance("aic-der-vectors.json");
    let hex = v["AIC_SIMPLE"].as_str().unwrap();
    let bad = format!("3080{}0000", &hex[4..]);
    let o = warrant(&["aic", "decode", "--type", "aic", &bad]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("AIC: BER indefinite length"),
        "{:?}",
        o
    );
}

#[test]
fn encode_rejects_out_of_bounds_json() {
    let o = warrant(&[
        "aic",
        "encode",
        "--type",
        "cap",
        &format!(
            r#"{{"scheme_id":"{}","capability_id":"x"}}"#,
            "s".repeat(129)
        ),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("Capability.schemeId"));
}

/// aic.md rule 6: the reference's v2 TBS with `PrincipalUid.version 0` and an
/// empty keyHash (Go zero values) decodes, keeps them, and encodes back to the
/// same bytes; `""` strings likewise.
#[test]
fn decode_accepts_go_zero_values_and_encode_gives_the_same_bytes() {
    let v = conformance("aic-der-vectors.json");
    let mut tbs =
        aic::DelegationAuthTbs::from_der(&aic::hex::decode(v["TBS"].as_str().unwrap()).unwrap())
            .unwrap();
    tbs.version = 2;
    tbs.principal_uid.version = 0;
    tbs.principal_uid.key_hash.clear();
    tbs.agent_key_binding = Some(aic::AgentKeyBinding::for_spki(b"agent spki"));
    let hex = aic::hex::encode(&tbs.to_der());

    let o = warrant(&["aic", "decode", "--type", "tbs", &hex]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let json: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(json["principal_uid"]["version"], 0);
    assert_eq!(json["principal_uid"]["key_hash"], "");
    let o = warrant(&["aic", "encode", "--type", "tbs", &stdout(&o)]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(stdout(&o).trim(), hex);

    let o = warrant(&[
        "aic",
        "encode",
        "--type",
        "cap",
        r#"{"scheme_id":"","capability_id":""}"#,
    ]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(stdout(&o).trim(), "30040c000c00");
}

#[test]
fn rejects_usage_errors_with_exit_2() {
    assert_eq!(
        warrant(&["aic", "decode", "--type", "aic", "zz"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        warrant(&["aic", "decode", "--type", "nope", "00"])
            .status
            .code(),
        Some(2)
    );
}

struct Jwt {
    token: String,
    issuer_spki: String,
    principal_spki: String,
    validate_at: i64,
    iat: i64,
}

fn jwt() -> Jwt {
    let v = conformance("aic-jwt-vectors.json");
    Jwt {
        token: v["authorized_token"].as_str().unwrap().into(),
        issuer_spki: v["issuer_spki_b64"].as_str().unwrap().into(),
        principal_spki: v["principal_spki_b64"].as_str().unwrap().into(),
        validate_at: v["validate_at"].as_i64().unwrap(),
        iat: v["iat"].as_i64().unwrap(),
    }
}

fn verify(j: &Jwt, at: i64, ip: &str, extra: &[&str]) -> (Option<i32>, Value) {
    let at = at.to_string();
    let mut args = vec![
        "aic-jwt",
        "verify",
        "--token",
        &j.token,
        "--issuer-spki",
        &j.issuer_spki,
        "--principal-spki",
        &j.principal_spki,
        "--at",
        &at,
        "--source-ip",
        ip,
        "--capability",
        "database:query:SELECT",
        "--params",
        r#"{"max_rows":50}"#,
    ];
    args.extend_from_slice(extra);
    let o = warrant(&args);
    let out: Value = serde_json::from_str(&stdout(&o)).unwrap_or(Value::Null);
    (o.status.code(), out)
}

#[test]
fn aic_jwt_verify_permits_go_vector_at_validate_at() {
    let j = jwt();
    let (code, out) = verify(
        &j,
        j.validate_at,
        "10.1.2.3",
        &[
            "--issuer",
            "https://ca.example.com/aic",
            "--audience",
            "https://gw.example.com",
        ],
    );
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out["permit"], true);
    assert_eq!(out["actor"], "agent:db-analyst-01");
    assert_eq!(out["executor"], "agent:db-analyst-01");
    assert_eq!(out["principal"], "corp.com:zhangsan");
    assert_eq!(out["failed_step"], Value::Null);
}

#[test]
fn aic_jwt_verify_denies_on_time_step_after_expiry() {
    let j = jwt();
    let (code, out) = verify(&j, j.iat + 4000, "10.1.2.3", &[]);
    assert_eq!(code, Some(1));
    assert_eq!(out["permit"], false);
    assert_eq!(out["failed_step"], "time");
}

#[test]
fn aic_jwt_verify_denies_on_constraints_from_outside_cidr() {
    let j = jwt();
    let (code, out) = verify(&j, j.validate_at, "192.168.9.9", &[]);
    assert_eq!(code, Some(1));
    assert_eq!(out["failed_step"], "constraints");
}

#[test]
fn aic_jwt_verify_rejects_bad_key_encoding_as_usage_error() {
    let j = jwt();
    let o = warrant(&[
        "aic-jwt",
        "verify",
        "--token",
        &j.token,
        "--issuer-spki",
        "!!",
        "--principal-spki",
        "AA==",
        "--at",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(2));
}

fn pem(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        lines.join("\n")
    )
}

/// A structurally valid certificate (unsigned; inspect-cert does not check
/// signatures) carrying the AIC_FULL and PA vectors.
fn certificate_with(aic_der: &[u8], pa_der: &[u8]) -> Vec<u8> {
    use aic::der::Writer;
    let spki = aic::spki_from_pkcs8(
        &aic::generate_signing_key(aic::DaSigningAlgorithm::EcdsaP256Sha256).unwrap(),
    )
    .unwrap();
    let alg = aic::AlgorithmIdentifier::new(aic::Oid::parse(aic::oid::ECDSA_WITH_SHA256).unwrap());
    let name = |w: &mut Writer| w.sequence(|_| {});
    let mut w = Writer::new();
    w.sequence(|w| {
        w.sequence(|w| {
            w.nested(0xa0, |w| w.integer(2));
            w.integer(4242);
            alg.encode(w);
            name(w);
            w.sequence(|w| {
                w.generalized_time(1_787_011_200);
                w.generalized_time(1_787_097_600);
            });
            name(w);
            w.raw(&spki);
            w.nested(0xa3, |w| {
                w.sequence(|w| {
                    for (oid, value) in [
                        (aic::oid::AIC_EXTENSION, aic_der),
                        (aic::oid::PRINCIPAL_AUTHORIZATION_EXTENSION, pa_der),
                    ] {
                        w.sequence(|w| {
                            w.oid(&aic::Oid::parse(oid).unwrap());
                            w.octets(value);
                        });
                    }
                });
            });
        });
        alg.encode(w);
        w.tlv(0x03, &[0, 0x30, 0x00]);
    });
    w.into_bytes()
}

#[test]
fn inspect_cert_decodes_aic_and_pa_extensions() {
    let v = conformance("aic-der-vectors.json");
    let aic_der = aic::hex::decode(v["AIC_FULL"].as_str().unwrap()).unwrap();
    let pa_der = aic::hex::decode(v["PA"].as_str().unwrap()).unwrap();
    let dir = tempdir();
    let path = dir.join("agent.pem");
    std::fs::write(&path, pem(&certificate_with(&aic_der, &pa_der))).unwrap();
    let o = warrant(&["aic", "inspect-cert", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(out["aic"]["agent_id"], "agent-109");
    assert_eq!(out["aic"]["principal_uid"]["realm"], "corp.com");
    assert_eq!(
        out["principal_authorization"]["delegation_policy"]["max_agents"],
        8
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn inspect_cert_reports_invalid_aic_extension() {
    let dir = tempdir();
    let path = dir.join("bad.pem");
    std::fs::write(
        &path,
        pem(&certificate_with(&[0x30, 0x80, 0, 0], &[0x30, 0x00])),
    )
    .unwrap();
    let o = warrant(&["aic", "inspect-cert", path.to_str().unwrap()]);
    assert!(o.status.success());
    let out: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(
        out["aic"]["error"].as_str().unwrap().contains("indefinite"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A representative-mode token with the claim layout the Go reference signs:
/// outer `sub` = the principal's `realm:id`, `act.sub` = the agent, and the
/// DA's `sub` the principal too (the agent in `agent_id`).
#[test]
fn aic_jwt_verify_permits_representative_mode_with_principal_as_da_sub() {
    use aic::jwt::*;
    use base64::{
        Engine, engine::general_purpose::STANDARD, engine::general_purpose::URL_SAFE_NO_PAD,
    };
    use serde_json::json;
    let key = |alg| aic::generate_signing_key(alg).unwrap();
    let (ipk, ppk, apk) = (
        key(aic::DaSigningAlgorithm::EcdsaP256Sha256),
        key(aic::DaSigningAlgorithm::EcdsaP256Sha256),
        key(aic::DaSigningAlgorithm::EcdsaP256Sha256),
    );
    let spki = |k: &[u8]| aic::spki_from_pkcs8(k).unwrap();
    let (issuer_spki, principal_spki, agent_spki) = (spki(&ipk), spki(&ppk), spki(&apk));
    let signer = |pkcs8_der: Vec<u8>, kid: &str| JwsSigningKey {
        alg: JwsAlgorithm::ES256,
        pkcs8_der,
        kid: Some(kid.into()),
    };
    let ts: i64 = 1_800_000_000;
    let nonce = URL_SAFE_NO_PAD.encode([5u8; 32]);
    let principal = json!({
        "realm": "corp.com", "id": "zhangsan",
        "key_hash": key_hash(&principal_spki, KeyHashAlg::Sha256).unwrap(),
        "hash_alg": "sha-256",
    });
    let caps = json!([{"scheme": "http", "id": "GET:/reports/*"}]);
    let make = |da_sub: &str| {
        let da = json!({
            "ver": 2, "iss": "corp.com:zhangsan", "sub": da_sub,
            "aud": ["https://ca.example.com/aic"], "iat": ts, "exp": ts + 1800, "jti": nonce,
            "agent_id": "agent:report-bot", "principal": principal,
            "reason": {"code": "REPORTS", "desc": "Weekly reports"}, "capabilities": caps,
            "delegation_mode": "representative", "requested_lifetime": 1800, "ts": ts,
            "nonce": nonce,
        });
        let da = jws::sign(&da, DA_TYP, &signer(ppk.clone(), "p-1")).unwrap();
        let outer = json!({
            "iss": "https://ca.example.com/aic", "sub": "corp.com:zhangsan",
            "act": {"sub": "agent:report-bot"}, "aud": ["https://gw.example.com"],
            "iat": ts, "exp": ts + 1800, "jti": nonce,
            "cnf": {"jkt": jwk_thumbprint(&agent_spki).unwrap()},
            "aic": {"ver": 1, "principal": principal, "delegation_mode": "representative",
                    "capabilities": caps, "chain_depth": 0},
            "da": da,
        });
        jws::sign(&outer, OUTER_TYP, &signer(ipk.clone(), "ca-1")).unwrap()
    };
    let pa = aic::PrincipalAuthorization {
        version: 1,
        grants: vec![aic::Capability::new("http", "GET:*", None)],
        constraints: vec![],
        delegation_policy: Some(aic::DelegationPolicy {
            version: 1,
            max_agents: 1,
            allowed_mode: 1,
            max_session_hours: None,
        }),
        extensions: vec![],
    };
    let pa = serde_json::to_string(&pa).unwrap();
    let (ispki, pspki, at) = (
        STANDARD.encode(&issuer_spki),
        STANDARD.encode(&principal_spki),
        (ts + 10).to_string(),
    );
    let run = |token: &str| {
        let o = warrant(&[
            "aic-jwt",
            "verify",
            "--token",
            token,
            "--issuer-spki",
            &ispki,
            "--principal-spki",
            &pspki,
            "--at",
            &at,
            "--pa",
            &pa,
        ]);
        let out: Value = serde_json::from_str(&stdout(&o)).unwrap_or(Value::Null);
        (o.status.code(), out)
    };

    let (code, out) = run(&make("corp.com:zhangsan"));
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out["permit"], true);
    assert_eq!(out["actor"], "corp.com:zhangsan");
    assert_eq!(out["executor"], "agent:report-bot");

    let (code, out) = run(&make("corp.com:someone-else"));
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(out["failed_step"], "da_signature");
}

/// `--jwks FILE` in place of `--issuer-spki`: the key the token's `kid`
/// names verifies it; a token whose `kid` the set lacks is denied at the
/// outer signature; a set that cannot be read is a usage error.
#[test]
fn aic_jwt_verify_takes_the_issuer_key_from_a_jwk_set() {
    use aic::jwt::*;
    use base64::{Engine, engine::general_purpose::STANDARD};
    let key = |alg| aic::generate_signing_key(alg).unwrap();
    let (ipk, ppk) = (
        key(aic::DaSigningAlgorithm::EcdsaP256Sha256),
        key(aic::DaSigningAlgorithm::EcdsaP256Sha256),
    );
    let (issuer_spki, principal_spki) = (
        aic::spki_from_pkcs8(&ipk).unwrap(),
        aic::spki_from_pkcs8(&ppk).unwrap(),
    );
    let signer = |pkcs8_der: Vec<u8>, kid: Option<&str>| JwsSigningKey {
        alg: JwsAlgorithm::ES256,
        pkcs8_der,
        kid: kid.map(str::to_string),
    };
    let ts: i64 = 1_800_000_000;
    let da = issue_da_jwt(
        &DaJwtRequest {
            principal: aic::PrincipalUid::parse(&format!(
                "corp.com:alice:{}",
                key_hash(&principal_spki, KeyHashAlg::Sha256).unwrap()
            ))
            .unwrap(),
            principal_spki_der: principal_spki.clone(),
            key_hash_alg: KeyHashAlg::Sha256,
            agent_id: "agent:bot".into(),
            audience: vec![],
            reason: ReasonClaim {
                code: "r".into(),
                desc: "d".into(),
            },
            capabilities: vec![],
            delegation_mode: aic::DelegationMode::Authorized,
            constraints: vec![],
            requested_lifetime: 600,
            ts,
            nonce: [7u8; 32],
            agent_spki_der: None,
        },
        &signer(ppk.clone(), None),
    )
    .unwrap();
    let token = |kid: &str| {
        let req = OuterTokenRequest {
            issuer: "urn:warrant:test".into(),
            audience: vec![],
            iat: ts,
            lifetime: 600,
            cnf_jkt: None,
            chain_depth: 0,
            max_depth: Some(1),
            added_constraints: vec![],
        };
        issue_outer_token(&req, &da, &signer(ipk.clone(), Some(kid))).unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let set = serde_json::json!({"keys": [
        public_jwk(&issuer_spki, Some("k1"), Some("ES256"), Some("sig")).unwrap()
    ]});
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, set.to_string()).unwrap();
    let (pspki, at) = (STANDARD.encode(&principal_spki), (ts + 10).to_string());
    let run = |token: &str, jwks: &str| {
        let o = warrant(&[
            "aic-jwt",
            "verify",
            "--token",
            token,
            "--jwks",
            jwks,
            "--principal-spki",
            &pspki,
            "--at",
            &at,
        ]);
        let out: Value = serde_json::from_str(&stdout(&o)).unwrap_or(Value::Null);
        (o.status.code(), out)
    };
    let path = jwks.to_str().unwrap();
    let (code, out) = run(&token("k1"), path);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out["permit"], true);
    let (code, out) = run(&token("k2"), path);
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(out["failed_step"], "outer_signature");
    assert!(out["reason"].as_str().unwrap().contains("k2"), "{out}");
    let (code, _) = run(&token("k1"), "/nonexistent/jwks.json");
    assert_eq!(code, Some(2));
}

/// `warrant token-key rotate` adds a key that is published at once and
/// signs later; `list` says which key signs and which waits; an unknown
/// algorithm is refused.
#[test]
fn token_key_rotate_adds_a_key_that_signs_later() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let o = warrant(&["init", "--data-dir", data, "--admin-password", "pw-123456"]);
    assert!(o.status.success(), "{o:?}");
    let o = warrant(&[
        "token-key",
        "rotate",
        "--data-dir",
        data,
        "--activate-in",
        "1h",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert!(stdout(&o).contains("added token key"), "{}", stdout(&o));
    let o = warrant(&["token-key", "list", "--data-dir", data]);
    let text = stdout(&o);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        text.matches("published, not yet signing").count(),
        1,
        "{text}"
    );
    assert_eq!(text.matches("  signing").count(), 1, "{text}");
    let o = warrant(&[
        "token-key",
        "rotate",
        "--data-dir",
        data,
        "--algorithm",
        "HS256",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--algorithm"));
}
