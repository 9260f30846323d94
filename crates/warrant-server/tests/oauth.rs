//! `POST /oauth/token` and `GET /.well-known/jwks.json` over real HTTP on a
//! real database: a DA JWT signed by a person buys one AIC-JWT, signed by
//! the server's token key and verifiable with nothing but the JWK Set (here
//! and with PyJWT); the same DA cannot be redeemed twice, nor once for a
//! certificate and once for a token; every refusal is an RFC 6749 error.

mod common;

use std::process::Command;

use aic::jwt::dpop::sign_dpop_proof;
use aic::jwt::{
    CapabilityClaim, DaJwtRequest, JwkSet, JwsAlgorithm, JwsHeader, JwsSigningKey, KeyHashAlg,
    OuterClaims, ReasonClaim, VerifyOptions, jwk_thumbprint, jws, verify_aic_jwt,
};
use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::signature::{self, KeyPair};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use common::*;
use serde_json::{Value, json};

const GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// An agent's P-256 key: its signer and SPKI.
struct AgentKey {
    signer: JwsSigningKey,
    spki: Vec<u8>,
}

fn agent_key() -> AgentKey {
    let rng = aws_lc_rs::rand::SystemRandom::new();
    let pkcs8 =
        signature::EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .unwrap();
    let kp = signature::EcdsaKeyPair::from_pkcs8(
        &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
        pkcs8.as_ref(),
    )
    .unwrap();
    AgentKey {
        spki: kp.public_key().as_der().unwrap().as_ref().to_vec(),
        signer: JwsSigningKey {
            alg: JwsAlgorithm::ES256,
            pkcs8_der: pkcs8.as_ref().to_vec(),
            kid: None,
        },
    }
}

fn person_signer(p: &Person) -> JwsSigningKey {
    JwsSigningKey {
        alg: JwsAlgorithm::ES256,
        pkcs8_der: p.key_der.clone(),
        kid: None,
    }
}

/// A DA JWT request from `person` to `agent_id` for `caps`, fresh, with a
/// random nonce; `audience` is set to the server's issuer by [`issuer`].
fn da_request(person: &Person, agent_id: &str, caps: &[(&str, &str)]) -> DaJwtRequest {
    DaJwtRequest {
        principal: aic::PrincipalUid::parse(&person.uid).unwrap(),
        principal_spki_der: spki_of_cert_pem(&person.cert_pem),
        key_hash_alg: KeyHashAlg::Sha256,
        agent_id: agent_id.into(),
        audience: vec![],
        reason: ReasonClaim {
            code: "task".into(),
            desc: "nightly report".into(),
        },
        capabilities: caps
            .iter()
            .map(|(s, i)| CapabilityClaim {
                scheme: (*s).into(),
                id: (*i).into(),
                params: None,
            })
            .collect(),
        delegation_mode: aic::DelegationMode::Authorized,
        constraints: vec![],
        requested_lifetime: 600,
        ts: now(),
        nonce: random_nonce(),
        agent_spki_der: None,
    }
}

fn sign_da(req: &DaJwtRequest, person: &Person) -> String {
    aic::jwt::issue_da_jwt(req, &person_signer(person)).unwrap()
}

/// The DA JWT with the principal certificate as `x5c` in its header.
fn sign_da_with_x5c(req: &DaJwtRequest, person: &Person) -> String {
    let der = aic::cert::pem_decode(&person.cert_pem, "CERTIFICATE").unwrap();
    let header = JwsHeader {
        alg: "ES256".into(),
        kid: None,
        typ: Some(aic::jwt::DA_TYP.into()),
        crit: None,
        x5c: Some(vec![STANDARD.encode(der)]),
        jwk: None,
    };
    let claims = serde_json::to_value(req.claims().unwrap()).unwrap();
    let signer = person_signer(person);
    jws::sign_with(&header, &claims, |i| signer.sign_input(i)).unwrap()
}

fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", urlencode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn endpoint(srv: &TestServer) -> String {
    srv.url("/oauth/token")
}

/// POSTs a grant; `dpop` is a proof header.
async fn token_request(
    srv: &TestServer,
    pairs: &[(&str, &str)],
    dpop: Option<&str>,
) -> (u16, Value) {
    let resp = post_form(&srv.http, &endpoint(srv), pairs, dpop).await;
    let status = resp.status().as_u16();
    if status == 200 {
        assert_eq!(resp.headers()["cache-control"], "no-store");
    }
    (status, resp.json().await.unwrap())
}

/// POSTs `pairs` form-encoded to the token endpoint at `url`.
async fn post_form(
    http: &reqwest::Client,
    url: &str,
    pairs: &[(&str, &str)],
    dpop: Option<&str>,
) -> reqwest::Response {
    let mut req = http
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(pairs));
    if let Some(p) = dpop {
        req = req.header("DPoP", p);
    }
    req.send().await.unwrap()
}

/// Redeems `da_jwt` with a DPoP proof made by `agent`, sending the
/// principal certificate as a form field.
async fn redeem_dpop(
    srv: &TestServer,
    person: &Person,
    da_jwt: &str,
    agent: &AgentKey,
) -> (u16, Value) {
    let proof = dpop_proof(srv, agent);
    token_request(
        srv,
        &[
            ("grant_type", GRANT),
            ("assertion", da_jwt),
            ("principal_cert", &person.cert_pem),
        ],
        Some(&proof),
    )
    .await
}

fn dpop_proof(srv: &TestServer, agent: &AgentKey) -> String {
    let jti = URL_SAFE_NO_PAD.encode(random_nonce());
    sign_dpop_proof(
        &agent.signer,
        &agent.spki,
        "POST",
        &endpoint(srv),
        now(),
        &jti,
    )
    .unwrap()
}

fn assert_oauth_error(got: &(u16, Value), error: &str, key: &str) {
    assert_eq!(got.0, 400, "{}", got.1);
    assert_eq!(got.1["error"], error, "{}", got.1);
    assert_eq!(got.1["error_key"], key, "{}", got.1);
    assert!(
        got.1["error_description"]
            .as_str()
            .is_some_and(|d| !d.is_empty())
    );
}

async fn jwks(srv: &TestServer) -> (JwkSet, String) {
    let resp = srv
        .http
        .get(srv.url("/.well-known/jwks.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let cache = resp.headers()["cache-control"]
        .to_str()
        .unwrap()
        .to_string();
    (JwkSet::parse(&resp.bytes().await.unwrap()).unwrap(), cache)
}

/// The server's `iss`: the token keys' issuer, read from a token.
fn claims_of(token: &str) -> OuterClaims {
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
}

fn kid_of(token: &str) -> String {
    jws::parse(token, aic::jwt::OUTER_TYP, true)
        .unwrap()
        .header
        .kid
        .unwrap()
}

/// Verifies a token as a relying party that knows only the JWK Set (and
/// the principal's key, which the DA names).
async fn verify_with_jwks(
    srv: &TestServer,
    token: &str,
    person: &Person,
    presenter: &[u8],
) -> aic::jwt::VerifiedAicJwt {
    let (set, _) = jwks(srv).await;
    let issuer_spki = set.spki_for_kid(&kid_of(token)).unwrap();
    let principal_spki = spki_of_cert_pem(&person.cert_pem);
    let mut opts = VerifyOptions::new(&issuer_spki, &principal_spki, now());
    opts.presenter_spki_der = Some(presenter);
    let iss = claims_of(token).iss;
    opts.expected_issuer = Some(&iss);
    verify_aic_jwt(token, &opts).unwrap()
}

async fn reader(srv: &TestServer, cn: &str) -> Person {
    srv.person(cn, grants(&[("db", "read")], 5, 1)).await
}

backend_matrix!(
    a_da_jwt_buys_one_dpop_bound_token_that_verifies_with_the_jwks,
    rejects_a_replayed_da_jwt_across_the_token_and_certificate_endpoints,
);

async fn a_da_jwt_buys_one_dpop_bound_token_that_verifies_with_the_jwks(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = reader(&srv, "alice").await;
    let agent = agent_key();
    let mut req = da_request(&alice, "agent:reporter", &[("db", "read")]);
    req.agent_spki_der = Some(agent.spki.clone());
    let da = sign_da(&req, &alice);
    let (s, body) = redeem_dpop(&srv, &alice, &da, &agent).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["token_type"], "DPoP");
    let token = body["access_token"].as_str().unwrap();
    let expires_in = body["expires_in"].as_i64().unwrap();
    assert!((1..=600).contains(&expires_in), "{expires_in}");

    let v = verify_with_jwks(&srv, token, &alice, &agent.spki).await;
    assert_eq!(v.parties.actor.as_deref(), Some("agent:reporter"));
    assert_eq!(
        v.outer.cnf.unwrap().jkt,
        jwk_thumbprint(&agent.spki).unwrap()
    );
    assert_eq!(v.outer.exp - v.outer.iat, expires_in);
    assert_eq!(v.outer.jti, URL_SAFE_NO_PAD.encode(req.nonce));
    assert_eq!(v.outer.aic.max_depth, Some(1));
    // The kid is base64url(SHA-256(SPKI)) of the key that signed.
    let (set, cache) = jwks(&srv).await;
    let spki = set.spki_for_kid(&kid_of(token)).unwrap();
    assert_eq!(
        kid_of(token),
        URL_SAFE_NO_PAD.encode(aic::crypto::sha256(&spki))
    );
    assert!(cache.starts_with("public, max-age="), "{cache}");

    // The nonce is spent: the same DA buys nothing more.
    let (_, again) = redeem_dpop(&srv, &alice, &da, &agent).await;
    assert_eq!(again["error"], "invalid_grant");
    srv.stop().await;
}

async fn rejects_a_replayed_da_jwt_across_the_token_and_certificate_endpoints(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = reader(&srv, "alice").await;
    let agent = agent_key();

    // A DER DA spent on a certificate cannot buy a token with the same nonce.
    let der_da = Da::new(&alice, "agent:one", &[("db", "read")]);
    let (s, b1) = srv.post("/api/v1/certs", &der_da.body(&alice)).await;
    assert_eq!(s, 200, "{b1}");
    let mut req = da_request(&alice, "agent:one", &[("db", "read")]);
    req.nonce = der_da.nonce;
    let got = redeem_dpop(&srv, &alice, &sign_da(&req, &alice), &agent).await;
    assert_oauth_error(&got, "invalid_grant", "api.da_nonce_replayed");

    // A DA JWT spent on a token cannot buy a certificate with the same nonce.
    let req = da_request(&alice, "agent:two", &[("db", "read")]);
    let da = sign_da(&req, &alice);
    let (s, b2) = redeem_dpop(&srv, &alice, &da, &agent).await;
    assert_eq!(s, 200, "{b2}");
    let mut der_da = Da::new(&alice, "agent:two", &[("db", "read")]);
    der_da.nonce = req.nonce;
    let got = srv.post("/api/v1/certs", &der_da.body(&alice)).await;
    assert_error(&got, warrant_server::ErrorKey::DaNonceReplayed);

    // Nor a second token, on this node or on another sharing the database.
    let got = redeem_dpop(&srv, &alice, &da, &agent).await;
    assert_oauth_error(&got, "invalid_grant", "api.da_nonce_replayed");
    let (node2, base2) = srv.second_node().await;
    let url2 = format!("{base2}/oauth/token");
    let proof = sign_dpop_proof(&agent.signer, &agent.spki, "POST", &url2, now(), "n2").unwrap();
    let resp = post_form(
        &srv.http,
        &url2,
        &[
            ("grant_type", GRANT),
            ("assertion", &da),
            ("principal_cert", &alice.cert_pem),
        ],
        Some(&proof),
    )
    .await;
    let got = (resp.status().as_u16(), resp.json::<Value>().await.unwrap());
    assert_oauth_error(&got, "invalid_grant", "api.da_nonce_replayed");
    node2.shutdown().await;
    srv.stop().await;
}

#[tokio::test]
async fn a_jkt_binding_buys_a_bearer_token_and_a_sha256_binding_takes_the_agent_jwk() {
    let srv = TestServer::start().await;
    let alice = reader(&srv, "alice").await;
    let agent = agent_key();

    // ver 3 with a thumbprint binding: the binding is cnf.jkt as it stands.
    let mut req = da_request(&alice, "agent:jkt", &[("db", "read")]);
    req.agent_spki_der = Some(agent.spki.clone());
    let mut claims = req.claims().unwrap();
    claims.agent_key_binding = Some(aic::jwt::KeyBindingClaim {
        key_hash: jwk_thumbprint(&agent.spki).unwrap(),
        hash_alg: "jkt".into(),
    });
    let signer = person_signer(&alice);
    let da = jws::sign(
        &serde_json::to_value(claims).unwrap(),
        aic::jwt::DA_TYP,
        &signer,
    )
    .unwrap();
    let (s, body) = token_request(
        &srv,
        &[
            ("grant_type", GRANT),
            ("assertion", &da),
            ("principal_cert", &alice.cert_pem),
        ],
        None,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["token_type"], "Bearer");
    verify_with_jwks(
        &srv,
        body["access_token"].as_str().unwrap(),
        &alice,
        &agent.spki,
    )
    .await;

    // ver 3 with a SHA-256 binding (and x5c): the key comes as agent_jwk.
    let mut req = da_request(&alice, "agent:sha", &[("db", "read")]);
    req.agent_spki_der = Some(agent.spki.clone());
    let da = sign_da_with_x5c(&req, &alice);
    let jwk =
        Value::Object(aic::jwt::public_jwk(&agent.spki, None, None, None).unwrap()).to_string();
    let missing = token_request(&srv, &[("grant_type", GRANT), ("assertion", &da)], None).await;
    assert_oauth_error(&missing, "invalid_request", "api.invalid_field");
    let other = agent_key();
    let wrong =
        Value::Object(aic::jwt::public_jwk(&other.spki, None, None, None).unwrap()).to_string();
    let got = token_request(
        &srv,
        &[
            ("grant_type", GRANT),
            ("assertion", &da),
            ("agent_jwk", &wrong),
        ],
        None,
    )
    .await;
    assert_oauth_error(&got, "invalid_grant", "api.delegation_signature_invalid");
    let (s, body) = token_request(
        &srv,
        &[
            ("grant_type", GRANT),
            ("assertion", &da),
            ("agent_jwk", &jwk),
        ],
        None,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["token_type"], "Bearer");
    srv.stop().await;
}

#[tokio::test]
async fn representative_mode_names_the_principal_and_needs_the_pa() {
    let srv = TestServer::start().await;
    let agent = agent_key();
    let allowed = srv.person("rep", grants(&[("db", "read")], 5, 1)).await;
    let mut req = da_request(&allowed, "agent:rep", &[("db", "read")]);
    req.delegation_mode = aic::DelegationMode::Representative;
    let (s, body) = redeem_dpop(&srv, &allowed, &sign_da(&req, &allowed), &agent).await;
    assert_eq!(s, 200, "{body}");
    let token = body["access_token"].as_str().unwrap();
    let claims = claims_of(token);
    let uid = aic::PrincipalUid::parse(&allowed.uid).unwrap();
    assert_eq!(claims.sub, uid.realm_and_identifier());
    assert_eq!(claims.act.unwrap().sub, "agent:rep");

    let denied = srv.person("norep", grants(&[("db", "read")], 5, 0)).await;
    let mut req = da_request(&denied, "agent:rep2", &[("db", "read")]);
    req.delegation_mode = aic::DelegationMode::Representative;
    let got = redeem_dpop(&srv, &denied, &sign_da(&req, &denied), &agent).await;
    assert_oauth_error(&got, "invalid_grant", "api.representative_policy_denied");
    srv.stop().await;
}

#[tokio::test]
async fn rejects_bad_grants_each_with_its_oauth_error() {
    let srv = TestServer::start().await;
    let alice = reader(&srv, "alice").await;
    let mallory = reader(&srv, "mallory").await;
    let agent = agent_key();
    let fresh = || da_request(&alice, "agent:x", &[("db", "read")]);

    // Malformed requests.
    let got = token_request(
        &srv,
        &[("grant_type", GRANT), ("assertion", "not-a-jwt")],
        None,
    )
    .await;
    assert_oauth_error(&got, "invalid_request", "api.invalid_field");
    let got = token_request(
        &srv,
        &[("grant_type", "password"), ("assertion", "x")],
        None,
    )
    .await;
    assert_oauth_error(&got, "unsupported_grant_type", "api.invalid_field");
    let da = sign_da(&fresh(), &alice);
    let got = redeem_dpop(&srv, &alice, &da, &agent).await;
    assert_eq!(got.0, 200, "{}", got.1);
    let json_body = srv
        .http
        .post(endpoint(&srv))
        .json(&json!({"grant_type": GRANT}))
        .send()
        .await
        .unwrap();
    assert_eq!(json_body.status(), 400);
    assert_eq!(
        json_body.json::<Value>().await.unwrap()["error"],
        "invalid_request"
    );

    // No principal certificate anywhere.
    let got = token_request(
        &srv,
        &[
            ("grant_type", GRANT),
            ("assertion", &sign_da(&fresh(), &alice)),
        ],
        Some(&dpop_proof(&srv, &agent)),
    )
    .await;
    assert_oauth_error(&got, "invalid_request", "api.invalid_field");

    // ver 2 without a DPoP proof binds no key.
    let got = token_request(
        &srv,
        &[
            ("grant_type", GRANT),
            ("assertion", &sign_da(&fresh(), &alice)),
            ("principal_cert", &alice.cert_pem),
        ],
        None,
    )
    .await;
    assert_oauth_error(&got, "invalid_request", "api.invalid_field");

    // A DPoP proof for another endpoint, or by another key than the DA binds.
    let wrong_htu = sign_dpop_proof(
        &agent.signer,
        &agent.spki,
        "POST",
        "http://elsewhere/oauth/token",
        now(),
        "j",
    )
    .unwrap();
    let got = token_request(
        &srv,
        &[
            ("grant_type", GRANT),
            ("assertion", &sign_da(&fresh(), &alice)),
            ("principal_cert", &alice.cert_pem),
        ],
        Some(&wrong_htu),
    )
    .await;
    assert_oauth_error(&got, "invalid_dpop_proof", "api.invalid_field");
    let mut bound = fresh();
    bound.agent_spki_der = Some(agent_key().spki);
    let got = redeem_dpop(&srv, &alice, &sign_da(&bound, &alice), &agent).await;
    assert_oauth_error(&got, "invalid_grant", "api.delegation_signature_invalid");

    // Signed by someone else than the principal it names.
    let forged = sign_da(&fresh(), &mallory);
    let got = redeem_dpop(&srv, &alice, &forged, &agent).await;
    assert_oauth_error(&got, "invalid_grant", "api.delegation_signature_invalid");
    // Naming another principal than the certificate's.
    let got = redeem_dpop(&srv, &mallory, &sign_da(&fresh(), &alice), &agent).await;
    assert_oauth_error(&got, "invalid_grant", "api.principal_cert_untrusted");

    // Stale, too wide, addressed elsewhere.
    let mut stale = fresh();
    stale.ts -= 3600;
    let got = redeem_dpop(&srv, &alice, &sign_da(&stale, &alice), &agent).await;
    assert_oauth_error(&got, "invalid_grant", "api.da_timestamp_stale");
    let wide = da_request(&alice, "agent:x", &[("db", "write")]);
    let got = redeem_dpop(&srv, &alice, &sign_da(&wide, &alice), &agent).await;
    assert_oauth_error(&got, "invalid_grant", "api.capability_not_granted");
    let mut elsewhere = fresh();
    elsewhere.audience = vec!["https://other-ca.example".into()];
    let got = redeem_dpop(&srv, &alice, &sign_da(&elsewhere, &alice), &agent).await;
    assert_oauth_error(&got, "invalid_grant", "api.forbidden");

    // A revoked principal.
    let (s, b) = srv
        .post(
            &format!("/api/v1/cert/people/{}/revoke", alice.serial),
            &json!({"reason": "keyCompromise"}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let got = redeem_dpop(&srv, &alice, &sign_da(&fresh(), &alice), &agent).await;
    assert_oauth_error(&got, "invalid_grant", "api.principal_cert_untrusted");
    srv.stop().await;
}

#[tokio::test]
async fn the_da_audience_naming_this_issuer_and_the_resource_become_the_token_claims() {
    let srv = TestServer::start_with(
        None,
        "[token]\nissuer = \"https://ca.example/aic\"\nmax_lifetime = \"2m\"\n",
    )
    .await;
    let alice = reader(&srv, "alice").await;
    let agent = agent_key();
    let mut req = da_request(&alice, "agent:aud", &[("db", "read")]);
    req.audience = vec!["https://ca.example/aic".into()];
    let proof = dpop_proof(&srv, &agent);
    let (s, body) = token_request(
        &srv,
        &[
            ("grant_type", GRANT),
            ("assertion", &sign_da(&req, &alice)),
            ("principal_cert", &alice.cert_pem),
            ("resource", "https://gw.example/"),
        ],
        Some(&proof),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["expires_in"], 120);
    let claims = claims_of(body["access_token"].as_str().unwrap());
    assert_eq!(claims.iss, "https://ca.example/aic");
    assert!(claims.aud.unwrap().contains("https://gw.example/"));
    assert_eq!(claims.exp - claims.iat, 120);
    srv.stop().await;
}

#[tokio::test]
async fn a_rotated_key_is_published_before_it_signs_and_the_old_one_stays() {
    let srv = TestServer::start_with(None, "[token]\nkey_reload_interval = \"50ms\"\n").await;
    let alice = reader(&srv, "alice").await;
    let agent = agent_key();
    let (before, _) = jwks(&srv).await;
    assert_eq!(before.keys.len(), 1);
    let old_kid = before.keys[0]["kid"].as_str().unwrap().to_string();

    let new = warrant_ca::TokenKeyRing::create_key(
        srv.dir.path(),
        None,
        warrant_ca::TokenAlgorithm::Es256,
        now() + 2,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (set, _) = jwks(&srv).await;
        if set.keys.len() == 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new key was never published"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Published, not yet signing.
    let (s, body) = redeem_dpop(
        &srv,
        &alice,
        &sign_da(&da_request(&alice, "agent:r", &[("db", "read")]), &alice),
        &agent,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    if now() < new.activates_at() {
        assert_eq!(kid_of(body["access_token"].as_str().unwrap()), old_kid);
    }
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let (s, body) = redeem_dpop(
        &srv,
        &alice,
        &sign_da(&da_request(&alice, "agent:r", &[("db", "read")]), &alice),
        &agent,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(kid_of(body["access_token"].as_str().unwrap()), new.kid());
    let (after, _) = jwks(&srv).await;
    let kids: Vec<&str> = after
        .keys
        .iter()
        .filter_map(|k| k["kid"].as_str())
        .collect();
    assert!(
        kids.contains(&old_kid.as_str()) && kids.contains(&new.kid()),
        "{kids:?}"
    );
    srv.stop().await;
}

/// PyJWT, which knows nothing of Warrant, fetches the JWK Set over HTTP,
/// picks the key by `kid` and verifies the token's signature, `iss` and
/// `aud`. A missing PyJWT fails under CI (`.ci/run` installs it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyjwt_verifies_a_token_with_only_the_jwks() {
    let probe = Command::new("python3")
        .args(["-c", "import jwt, cryptography"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        assert!(
            std::env::var_os("CI").is_none(),
            "PyJWT (pip install 'pyjwt[crypto]') is required by this test and CI is set"
        );
        eprintln!("skipping: PyJWT is not installed");
        return;
    }
    let srv = TestServer::start_with(
        None,
        "[token]\nissuer = \"https://ca.example/aic\"\ndefault_audience = [\"https://gw.example\"]\n",
    )
    .await;
    let alice = reader(&srv, "alice").await;
    let agent = agent_key();
    let da = sign_da(&da_request(&alice, "agent:py", &[("db", "read")]), &alice);
    let (s, body) = redeem_dpop(&srv, &alice, &da, &agent).await;
    assert_eq!(s, 200, "{body}");
    let token = body["access_token"].as_str().unwrap();
    let script = r#"
import json, sys, jwt
url, token = sys.argv[1], sys.argv[2]
header = jwt.get_unverified_header(token)
assert header["typ"] == "aic+jwt", header
key = jwt.PyJWKClient(url).get_signing_key_from_jwt(token)
claims = jwt.decode(token, key.key, algorithms=["ES256"],
                    issuer="https://ca.example/aic", audience="https://gw.example")
print(json.dumps({"kid": header["kid"], "sub": claims["sub"], "jkt": claims["cnf"]["jkt"]}))
"#;
    let (ok, out) = run(Command::new("python3")
        .args(["-c", script])
        .arg(srv.url("/.well-known/jwks.json"))
        .arg(token));
    assert!(ok, "PyJWT refused the token: {out}");
    let seen: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(seen["sub"], "agent:py");
    assert_eq!(seen["kid"], kid_of(token));
    assert_eq!(seen["jkt"], jwk_thumbprint(&agent.spki).unwrap());

    // A token whose signature PyJWT must refuse: one signature character changed.
    let at = token.rfind('.').unwrap() + 10;
    let mut tampered = token.as_bytes().to_vec();
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let (ok, out) = run(Command::new("python3")
        .args(["-c", script])
        .arg(srv.url("/.well-known/jwks.json"))
        .arg(&tampered));
    assert!(!ok, "PyJWT accepted a tampered token: {out}");
    srv.stop().await;
}

/// Tokens count against the principal's issuance rate like certificates
/// (429 `temporarily_unavailable` with `Retry-After`), and each issued
/// token is counted in `/metrics`.
#[tokio::test]
async fn rejects_a_principal_over_its_rate_and_counts_tokens_in_metrics() {
    let srv = TestServer::start_with(
        None,
        "[issuance.per_principal]\nenabled = true\nrate = 0.01\nburst = 1\n",
    )
    .await;
    let alice = reader(&srv, "alice").await;
    let agent = agent_key();
    let first = da_request(&alice, "agent:m", &[("db", "read")]);
    let (s, body) = redeem_dpop(&srv, &alice, &sign_da(&first, &alice), &agent).await;
    assert_eq!(s, 200, "{body}");
    let second = da_request(&alice, "agent:m", &[("db", "read")]);
    let resp = post_form(
        &srv.http,
        &endpoint(&srv),
        &[
            ("grant_type", GRANT),
            ("assertion", &sign_da(&second, &alice)),
            ("principal_cert", &alice.cert_pem),
        ],
        Some(&dpop_proof(&srv, &agent)),
    )
    .await;
    assert_eq!(resp.status(), 429);
    assert!(resp.headers().contains_key("retry-after"));
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "temporarily_unavailable");
    assert_eq!(body["error_key"], "api.principal_rate_limited");
    let metrics = srv.metrics_text().await;
    assert!(
        metrics.contains("warrant_aic_tokens_issued_total{token_type=\"DPoP\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("reason=\"principal_rate_limited\""),
        "{metrics}"
    );
    srv.stop().await;
}
