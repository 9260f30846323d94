//! AIC-JWTs at admission, over real keys and certificates: a person
//! certificate from a `warrant-ca` hierarchy signs a DA JWT, an issuer key
//! published in a JWK Set wraps it, and the agent presents it as `Bearer`
//! or, bound to its key, as `DPoP` with a proof for the request.

mod common;

use common::*;

use aic::jwt::dpop::sign_dpop_proof_for_token;
use aic::jwt::{
    CapabilityClaim, DaJwtRequest, JwkSet, JwsAlgorithm, JwsSigningKey, KeyHashAlg,
    OuterTokenRequest, ReasonClaim, issue_da_jwt, issue_outer_token, jwk_thumbprint, public_jwk,
};
use aic::model::{DelegationMode, PrincipalUid};
use warrant_admit::engine::{
    AdmissionRequest, Credential, Decision, Engine, EngineConfig, Principals,
};
use warrant_admit::forwarded::TokenCredential;
use warrant_admit::reason::Reason;
use warrant_admit::revocation::RevocationState;
use warrant_admit::rules::Rules;

const ISSUER: &str = "https://warrant.test";
const URL: &str = "https://api.test/v1/rows/1";

fn signing_key(pkcs8: &[u8], kid: Option<&str>) -> JwsSigningKey {
    JwsSigningKey {
        alg: JwsAlgorithm::ES256,
        pkcs8_der: pkcs8.to_vec(),
        kid: kid.map(str::to_owned),
    }
}

struct Agent {
    key: JwsSigningKey,
    spki: Vec<u8>,
}

struct Fixture {
    _ca: Ca,
    alice: Person,
    issuer: JwsSigningKey,
    engine: Engine,
    rules: Rules,
    revocation: RevocationState,
    agent: Agent,
}

struct TokenSpec {
    mode: DelegationMode,
    bound: bool,
    lifetime: i64,
    iat_offset: i64,
    constraints: Vec<CapabilityClaim>,
}

impl Default for TokenSpec {
    fn default() -> Self {
        TokenSpec {
            mode: DelegationMode::Authorized,
            bound: true,
            lifetime: 300,
            iat_offset: 0,
            constraints: vec![],
        }
    }
}

impl Fixture {
    fn new(config: EngineConfig, with_directory: bool) -> Fixture {
        Fixture::with_allowed_mode(config, with_directory, 1)
    }

    fn with_allowed_mode(config: EngineConfig, with_directory: bool, allowed_mode: i64) -> Fixture {
        let ca = Ca::new();
        let alice = person(&ca, pa(allowed_mode, vec![]));
        let mut principals = Principals::new();
        if with_directory {
            principals.insert_der(alice.cert.der.clone()).unwrap();
        }
        let engine = Engine::new(ca.bundle(), principals, config);
        let (issuer_pkcs8, issuer_spki) = key();
        let jwks = serde_json::json!({
            "keys": [public_jwk(&issuer_spki, Some("k1"), Some("ES256"), Some("sig")).unwrap()]
        });
        engine.set_token_keys(JwkSet::parse(jwks.to_string().as_bytes()).unwrap());
        let mut revocation = RevocationState::new();
        revocation.replace("people", Vec::<String>::new(), unix(now()));
        let (agent_pkcs8, agent_spki) = key();
        Fixture {
            _ca: ca,
            alice,
            issuer: signing_key(&issuer_pkcs8, Some("k1")),
            engine,
            rules: Rules::parse(RULES).unwrap(),
            revocation,
            agent: Agent {
                key: signing_key(&agent_pkcs8, None),
                spki: agent_spki,
            },
        }
    }

    fn token(&self, spec: TokenSpec) -> String {
        let t = unix(now()) + spec.iat_offset;
        let key_hash = aic::crypto::sha256(&self.alice.spki);
        let uid = PrincipalUid::parse(&format!(
            "corp:alice:{}",
            base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, key_hash)
        ))
        .unwrap();
        let da = DaJwtRequest {
            principal: uid,
            principal_spki_der: self.alice.spki.clone(),
            key_hash_alg: KeyHashAlg::Sha256,
            agent_id: "agent:db-reader".into(),
            audience: vec![ISSUER.into()],
            reason: ReasonClaim {
                code: "TEST".into(),
                desc: "admission tests".into(),
            },
            capabilities: vec![CapabilityClaim {
                scheme: "database".into(),
                id: "query:SELECT".into(),
                params: Some(serde_json::json!({"max_rows": 100})),
            }],
            delegation_mode: spec.mode,
            constraints: spec.constraints,
            requested_lifetime: 3600,
            ts: t,
            nonce: rand_nonce(),
            agent_spki_der: None,
        };
        let da_jwt = issue_da_jwt(&da, &signing_key(&self.alice.pkcs8, None)).unwrap();
        let outer = OuterTokenRequest {
            issuer: ISSUER.into(),
            audience: vec![],
            iat: t,
            lifetime: spec.lifetime,
            cnf_jkt: spec
                .bound
                .then(|| jwk_thumbprint(&self.agent.spki).unwrap()),
            chain_depth: 0,
            max_depth: None,
            added_constraints: vec![],
        };
        issue_outer_token(&outer, &da_jwt, &self.issuer).unwrap()
    }

    fn proof(&self, method: &str, url: &str, jti: &str, token: &str) -> String {
        sign_dpop_proof_for_token(
            &self.agent.key,
            &self.agent.spki,
            method,
            url,
            unix(now()),
            jti,
            token,
        )
        .unwrap()
    }

    fn decide(&self, method: &str, uri: &str, credential: Credential<'_>) -> Decision {
        self.engine.decide(
            &AdmissionRequest {
                method,
                uri,
                client_ip: Some("127.0.0.1".parse().unwrap()),
                credential,
                now: now(),
                current_concurrency: None,
            },
            &self.rules,
            &self.revocation,
        )
    }

    fn dpop(&self, method: &str, uri: &str, token: &str, proof: &str) -> Decision {
        self.decide(
            method,
            uri,
            Credential::Token {
                token: TokenCredential::Dpop(token),
                dpop_proof: Some(proof),
            },
        )
    }

    fn bearer(&self, uri: &str, token: &str) -> Decision {
        self.decide(
            "GET",
            uri,
            Credential::Token {
                token: TokenCredential::Bearer(token),
                dpop_proof: None,
            },
        )
    }
}

fn rand_nonce() -> [u8; 32] {
    let (_, spki) = key();
    aic::crypto::sha256(&spki)
}

fn refused(d: Decision) -> Reason {
    d.expect_err("refused").reason
}

#[test]
fn admits_a_dpop_token_for_its_request_with_the_identity() {
    let fx = Fixture::new(EngineConfig::default(), true);
    let token = fx.token(TokenSpec::default());
    let proof = fx.proof("GET", URL, "p1", &token);
    let ok = fx.dpop("GET", URL, &token, &proof).unwrap();
    let id = ok.identity.unwrap();
    assert_eq!(id.agent_id, "agent:db-reader");
    assert_eq!(id.principal, "corp:alice");
    assert_eq!(id.serial_hex, None);
    assert!(id.token_id.is_some());
    assert_eq!(id.capabilities.len(), 1);
}

#[test]
fn rejects_a_replayed_dpop_proof() {
    let fx = Fixture::new(EngineConfig::default(), true);
    let token = fx.token(TokenSpec::default());
    let proof = fx.proof("GET", URL, "once", &token);
    fx.dpop("GET", URL, &token, &proof).unwrap();
    assert_eq!(
        refused(fx.dpop("GET", URL, &token, &proof)),
        Reason::DpopReplayed
    );
    // A new proof for the same request is a new request.
    let again = fx.proof("GET", URL, "twice", &token);
    fx.dpop("GET", URL, &token, &again).unwrap();
}

#[test]
fn rejects_a_proof_made_for_another_uri_or_method() {
    let fx = Fixture::new(EngineConfig::default(), true);
    let token = fx.token(TokenSpec::default());
    let other = fx.proof("GET", "https://api.test/v1/rows/2", "a", &token);
    assert_eq!(
        refused(fx.dpop("GET", URL, &token, &other)),
        Reason::DpopProofInvalid
    );
    let post = fx.proof("POST", URL, "b", &token);
    assert_eq!(
        refused(fx.dpop("GET", URL, &token, &post)),
        Reason::DpopProofInvalid
    );
}

#[test]
fn rejects_a_proof_for_another_token_or_without_a_proof_or_an_absolute_uri() {
    let fx = Fixture::new(EngineConfig::default(), true);
    let token = fx.token(TokenSpec::default());
    let other_token = fx.token(TokenSpec::default());
    let proof = fx.proof("GET", URL, "c", &other_token);
    assert_eq!(
        refused(fx.dpop("GET", URL, &token, &proof)),
        Reason::DpopProofInvalid
    );
    let none = fx.decide(
        "GET",
        URL,
        Credential::Token {
            token: TokenCredential::Dpop(&token),
            dpop_proof: None,
        },
    );
    assert_eq!(refused(none), Reason::DpopProofInvalid);
    let proof = fx.proof("GET", URL, "d", &token);
    assert_eq!(
        refused(fx.dpop("GET", "/v1/rows/1", &token, &proof)),
        Reason::DpopProofInvalid
    );
}

#[test]
fn rejects_a_bound_token_as_bearer_and_an_unbound_one_as_dpop() {
    let fx = Fixture::new(EngineConfig::default(), true);
    let bound = fx.token(TokenSpec::default());
    assert_eq!(
        refused(fx.bearer(URL, &bound)),
        Reason::TokenBindingMismatch
    );
    let unbound = fx.token(TokenSpec {
        bound: false,
        ..TokenSpec::default()
    });
    fx.bearer(URL, &unbound).unwrap();
    let proof = fx.proof("GET", URL, "e", &unbound);
    assert_eq!(
        refused(fx.dpop("GET", URL, &unbound, &proof)),
        Reason::TokenBindingMismatch
    );
}

#[test]
fn rejects_a_token_bound_to_another_key() {
    let fx = Fixture::new(EngineConfig::default(), true);
    let token = fx.token(TokenSpec::default());
    let (pkcs8, spki) = key();
    let proof = sign_dpop_proof_for_token(
        &signing_key(&pkcs8, None),
        &spki,
        "GET",
        URL,
        unix(now()),
        "f",
        &token,
    )
    .unwrap();
    assert_eq!(
        refused(fx.dpop("GET", URL, &token, &proof)),
        Reason::TokenBindingMismatch
    );
}

#[test]
fn rejects_an_expired_token_and_one_from_an_unknown_issuer_key() {
    let fx = Fixture::new(EngineConfig::default(), true);
    let old = fx.token(TokenSpec {
        bound: false,
        lifetime: 60,
        iat_offset: -600,
        ..TokenSpec::default()
    });
    assert_eq!(refused(fx.bearer(URL, &old)), Reason::Expired);
    let mut stranger = Fixture::new(EngineConfig::default(), true);
    stranger.issuer.kid = Some("k1".into());
    let foreign = stranger.token(TokenSpec {
        bound: false,
        ..TokenSpec::default()
    });
    // Same kid, another key: the signature fails.
    assert_eq!(refused(fx.bearer(URL, &foreign)), Reason::Untrusted);
}

#[test]
fn rejects_an_unknown_principal_and_a_revoked_one() {
    let fx = Fixture::new(EngineConfig::default(), false);
    let token = fx.token(TokenSpec {
        bound: false,
        ..TokenSpec::default()
    });
    assert_eq!(refused(fx.bearer(URL, &token)), Reason::PrincipalUnknown);

    let mut fx = Fixture::new(EngineConfig::default(), true);
    let token = fx.token(TokenSpec {
        bound: false,
        ..TokenSpec::default()
    });
    fx.bearer(URL, &token).unwrap();
    fx.revocation
        .replace("people", [fx.alice.cert.serial_hex.clone()], unix(now()));
    assert_eq!(refused(fx.bearer(URL, &token)), Reason::PrincipalRevoked);
}

#[test]
fn rejects_a_token_on_another_route_or_one_that_names_roles() {
    let fx = Fixture::new(EngineConfig::default(), true);
    let token = fx.token(TokenSpec {
        bound: false,
        ..TokenSpec::default()
    });
    assert_eq!(
        refused(fx.bearer("https://api.test/v1/rows", &token)),
        Reason::NoRoute
    );
    assert_eq!(
        refused(fx.bearer("https://api.test/v1/admin/x", &token)),
        Reason::RoleMissing
    );
}

#[test]
fn rejects_a_token_outside_its_allowed_cidr() {
    let fx = Fixture::new(EngineConfig::default(), true);
    let cidr = |c: &str| CapabilityClaim {
        scheme: aic::jwt::policy::CONSTRAINT_SCHEME.into(),
        id: "allowed-cidr".into(),
        params: Some(serde_json::json!([c])),
    };
    let inside = fx.token(TokenSpec {
        bound: false,
        constraints: vec![cidr("127.0.0.0/8")],
        ..TokenSpec::default()
    });
    fx.bearer(URL, &inside).unwrap();
    let outside = fx.token(TokenSpec {
        bound: false,
        constraints: vec![cidr("10.0.0.0/8")],
        ..TokenSpec::default()
    });
    assert_eq!(refused(fx.bearer(URL, &outside)), Reason::ConstraintDenied);
}

#[test]
fn rejects_a_token_from_an_issuer_other_than_the_configured_one() {
    let fx = Fixture::new(
        EngineConfig {
            token_issuer: Some("https://other.test".into()),
            ..EngineConfig::default()
        },
        true,
    );
    let token = fx.token(TokenSpec {
        bound: false,
        ..TokenSpec::default()
    });
    assert_eq!(refused(fx.bearer(URL, &token)), Reason::Untrusted);
}

#[test]
fn admits_representative_mode_only_with_the_pas_allowed_mode() {
    let fx = Fixture::new(EngineConfig::default(), true);
    let token = fx.token(TokenSpec {
        bound: false,
        mode: DelegationMode::Representative,
        ..TokenSpec::default()
    });
    let ok = fx.bearer(URL, &token).unwrap();
    assert_eq!(ok.identity.unwrap().mode, DelegationMode::Representative);

    let fx = Fixture::with_allowed_mode(EngineConfig::default(), true, 0);
    let token = fx.token(TokenSpec {
        bound: false,
        mode: DelegationMode::Representative,
        ..TokenSpec::default()
    });
    assert_eq!(
        refused(fx.bearer(URL, &token)),
        Reason::RepresentativeDenied
    );
}

#[test]
fn rejects_a_token_without_the_configured_audience_or_when_no_issuer_keys_are_in_force() {
    let fx = Fixture::new(
        EngineConfig {
            token_audience: Some("https://api.test".into()),
            ..EngineConfig::default()
        },
        true,
    );
    let token = fx.token(TokenSpec {
        bound: false,
        ..TokenSpec::default()
    });
    assert_eq!(refused(fx.bearer(URL, &token)), Reason::Untrusted);

    let ca = Ca::new();
    let engine = Engine::new(ca.bundle(), Principals::new(), EngineConfig::default());
    let mut revocation = RevocationState::new();
    revocation.replace("people", Vec::<String>::new(), unix(now()));
    let d = engine.decide(
        &AdmissionRequest {
            method: "GET",
            uri: URL,
            client_ip: None,
            credential: Credential::Token {
                token: TokenCredential::Bearer(&token),
                dpop_proof: None,
            },
            now: now(),
            current_concurrency: None,
        },
        &fx.rules,
        &revocation,
    );
    assert_eq!(refused(d), Reason::Untrusted);
}
