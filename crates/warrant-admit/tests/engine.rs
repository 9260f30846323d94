//! The decision engine over real certificates: a hierarchy made by
//! `warrant-ca`, a person certificate with a PA, a DA the person signed, and
//! agent certificates carrying it, each outcome of admit.md §2 named.

mod common;

use common::*;
use std::net::IpAddr;

use aic::model::{Capability, DelegationMode, PrincipalAuthorization};
use warrant_admit::engine::{
    AdmissionRequest, Credential, Decision, Engine, EngineConfig, Principals,
};
use warrant_admit::reason::Reason;
use warrant_admit::revocation::RevocationState;
use warrant_admit::rules::Rules;

struct Fixture {
    ca: Ca,
    alice: Person,
    engine: Engine,
    rules: Rules,
    revocation: RevocationState,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture::with(pa(1, vec![]), EngineConfig::default())
    }

    fn with(pa: PrincipalAuthorization, config: EngineConfig) -> Fixture {
        let ca = Ca::new();
        let alice = person(&ca, pa);
        let mut principals = Principals::new();
        principals.insert_der(alice.cert.der.clone()).unwrap();
        let engine = Engine::new(ca.bundle(), principals, config);
        let mut revocation = RevocationState::new();
        revocation.replace("people", Vec::<String>::new(), unix(now()));
        Fixture {
            ca,
            alice,
            engine,
            rules: Rules::parse(RULES).unwrap(),
            revocation,
        }
    }

    fn decide(&self, method: &str, uri: &str, credential: Credential<'_>) -> Decision {
        self.decide_from(method, uri, credential, None)
    }

    fn decide_from(
        &self,
        method: &str,
        uri: &str,
        credential: Credential<'_>,
        client_ip: Option<IpAddr>,
    ) -> Decision {
        self.engine.decide(
            &AdmissionRequest {
                method,
                uri,
                client_ip,
                credential,
                now: now(),
                current_concurrency: None,
            },
            &self.rules,
            &self.revocation,
        )
    }
}

fn refused(d: Decision) -> Reason {
    d.expect_err("refused").reason
}

#[test]
fn admits_a_granted_capability_on_its_route_with_the_identity() {
    let fx = Fixture::new();
    let cert = agent(&fx.ca, &fx.alice, AgentSpec::default());
    let ok = fx
        .decide(
            "GET",
            "/v1/rows/7?limit=5",
            Credential::Certificate(&cert.der),
        )
        .unwrap();
    assert_eq!(ok.rule_line, 3);
    let id = ok.identity.unwrap();
    assert_eq!(id.agent_id, "agent:db-reader");
    assert_eq!(id.principal, "corp:alice");
    assert_eq!(id.mode, DelegationMode::Authorized);
    assert_eq!(id.serial_hex.as_deref(), Some(cert.serial_hex.as_str()));
    assert_eq!(id.token_id, None);
    assert_eq!(id.capabilities.len(), 1);
    assert_eq!(id.capabilities[0].id, "query:SELECT");
    // Decided again from the cache: the same answer.
    assert_eq!(fx.engine.cached_certificates(), 1);
    assert!(
        fx.decide("HEAD", "/v1/rows/8", Credential::Certificate(&cert.der))
            .is_ok()
    );
    assert_eq!(fx.engine.cached_certificates(), 1);
}

#[test]
fn admits_a_public_route_without_a_credential() {
    let fx = Fixture::new();
    let ok = fx.decide("GET", "/healthz", Credential::Absent).unwrap();
    assert_eq!(ok.identity, None);
}

#[test]
fn rejects_a_missing_or_unreadable_credential_with_401() {
    let fx = Fixture::new();
    let r = refused(fx.decide("GET", "/v1/rows/1", Credential::Absent));
    assert_eq!((r, r.status()), (Reason::NoCredential, 401));
    let r = refused(fx.decide("GET", "/v1/rows/1", Credential::Unreadable));
    assert_eq!((r, r.status()), (Reason::CredentialMalformed, 401));
    let r = refused(fx.decide("GET", "/v1/rows/1", Credential::Certificate(b"not DER")));
    assert_eq!(r.status(), 401, "{r}");
}

#[test]
fn rejects_another_route_or_method() {
    let fx = Fixture::new();
    let cert = agent(&fx.ca, &fx.alice, AgentSpec::default());
    let c = Credential::Certificate(&cert.der);
    assert_eq!(
        refused(fx.decide("POST", "/v1/rows", c)),
        Reason::CapabilityNotGranted
    );
    assert_eq!(
        refused(fx.decide("DELETE", "/v1/rows/1", c)),
        Reason::NoRoute
    );
    assert_eq!(refused(fx.decide("GET", "/v1/other", c)), Reason::NoRoute);
    assert_eq!(
        refused(fx.decide("GET", "/v1/rows/../admin/x", c)),
        Reason::PathInvalid
    );
}

#[test]
fn rejects_a_route_whose_parameter_bound_the_grant_does_not_cover() {
    let fx = Fixture::new();
    let cert = agent(
        &fx.ca,
        &fx.alice,
        AgentSpec {
            capabilities: vec![Capability::new(
                "database",
                "query:SELECT",
                Some(br#"{"max_rows":10}"#),
            )],
            ..AgentSpec::default()
        },
    );
    // The route needs max_rows 50; the grant allows 10.
    let r = refused(fx.decide("GET", "/v1/rows/1", Credential::Certificate(&cert.der)));
    assert_eq!(r, Reason::CapabilityNotGranted);
}

#[test]
fn rejects_a_revoked_agent_and_an_agent_of_a_revoked_person() {
    let mut fx = Fixture::new();
    let cert = agent(&fx.ca, &fx.alice, AgentSpec::default());
    let c = Credential::Certificate(&cert.der);
    assert!(fx.decide("GET", "/v1/rows/1", c).is_ok());
    fx.revocation
        .replace("people", [cert.serial_hex.as_str()], unix(now()));
    assert_eq!(refused(fx.decide("GET", "/v1/rows/1", c)), Reason::Revoked);

    let other = agent(&fx.ca, &fx.alice, AgentSpec::default());
    let c = Credential::Certificate(&other.der);
    assert!(fx.decide("GET", "/v1/rows/1", c).is_ok());
    fx.revocation.replace(
        "people",
        [
            cert.serial_hex.clone(),
            fx.alice.cert.serial_hex.to_lowercase(),
        ],
        unix(now()),
    );
    assert_eq!(
        refused(fx.decide("GET", "/v1/rows/1", c)),
        Reason::PrincipalRevoked
    );
}

#[test]
fn rejects_everything_but_public_routes_when_revocation_is_stale() {
    let mut fx = Fixture::new();
    let cert = agent(&fx.ca, &fx.alice, AgentSpec::default());
    fx.revocation = RevocationState::new();
    fx.revocation
        .replace("people", Vec::<String>::new(), unix(now()) - 31);
    let r = refused(fx.decide("GET", "/v1/rows/1", Credential::Certificate(&cert.der)));
    assert_eq!(r, Reason::RevocationStale);
    assert!(fx.decide("GET", "/healthz", Credential::Absent).is_ok());
}

#[test]
fn rejects_an_expired_and_a_not_yet_valid_agent() {
    let mut fx = Fixture::new();
    let t = now();
    let cert = agent(&fx.ca, &fx.alice, AgentSpec::default());
    // Two hours on (and the revocation state still fresh then): expired,
    // past the 60 s skew.
    let later = t + 2 * HOUR;
    fx.revocation
        .replace("people", Vec::<String>::new(), unix(later));
    let decided = fx.engine.decide(
        &AdmissionRequest {
            method: "GET",
            uri: "/v1/rows/1",
            client_ip: None,
            credential: Credential::Certificate(&cert.der),
            now: later,
            current_concurrency: None,
        },
        &fx.rules,
        &fx.revocation,
    );
    assert_eq!(refused(decided), Reason::Expired);
    let early = agent(
        &fx.ca,
        &fx.alice,
        AgentSpec {
            validity: Some((t + HOUR, t + 2 * HOUR)),
            ..AgentSpec::default()
        },
    );
    let r = refused(fx.decide("GET", "/v1/rows/1", Credential::Certificate(&early.der)));
    assert_eq!(r, Reason::NotYetValid);
}

#[test]
fn rejects_an_agent_of_a_foreign_ca() {
    let fx = Fixture::new();
    let foreign = Ca::new();
    let mallory = person(&foreign, pa(1, vec![]));
    let cert = agent(&foreign, &mallory, AgentSpec::default());
    let r = refused(fx.decide("GET", "/v1/rows/1", Credential::Certificate(&cert.der)));
    assert_eq!(r, Reason::Untrusted);
}

#[test]
fn rejects_a_person_certificate_as_an_agent() {
    let fx = Fixture::new();
    let r = refused(fx.decide(
        "GET",
        "/v1/rows/1",
        Credential::Certificate(&fx.alice.cert.der),
    ));
    assert_eq!(r, Reason::NotAnAgent);
}

#[test]
fn representative_mode_needs_the_pas_allowed_mode() {
    let spec = || AgentSpec {
        mode: DelegationMode::Representative,
        ..AgentSpec::default()
    };
    let fx = Fixture::new();
    let cert = agent(&fx.ca, &fx.alice, spec());
    let id = fx
        .decide("GET", "/v1/rows/1", Credential::Certificate(&cert.der))
        .unwrap()
        .identity
        .unwrap();
    assert_eq!(id.mode, DelegationMode::Representative);

    let fx = Fixture::with(pa(0, vec![]), EngineConfig::default());
    let cert = agent(&fx.ca, &fx.alice, spec());
    let r = refused(fx.decide("GET", "/v1/rows/1", Credential::Certificate(&cert.der)));
    assert_eq!(r, Reason::RepresentativeDenied);
}

#[test]
fn representative_mode_acts_only_with_what_the_principal_was_granted() {
    let fx = Fixture::new();
    // `database:insert` is in the AIC but not among the PA's grants.
    let cert = agent(
        &fx.ca,
        &fx.alice,
        AgentSpec {
            mode: DelegationMode::Representative,
            capabilities: vec![
                Capability::new("database", "query:SELECT", Some(br#"{"max_rows":100}"#)),
                Capability::new("database", "insert", None),
            ],
            ..AgentSpec::default()
        },
    );
    let c = Credential::Certificate(&cert.der);
    let id = fx.decide("GET", "/v1/rows/1", c).unwrap().identity.unwrap();
    assert_eq!(id.capabilities.len(), 1);
    assert_eq!(
        refused(fx.decide("POST", "/v1/rows", c)),
        Reason::CapabilityNotGranted
    );
}

#[test]
fn an_allowed_cidr_constraint_checks_the_reported_client_address() {
    let cidr = || {
        Capability::new(
            "varwof/constraint-v1",
            "allowed-cidr",
            Some(br#"["10.0.0.0/8"]"#),
        )
    };
    // On the AIC.
    let fx = Fixture::new();
    let cert = agent(
        &fx.ca,
        &fx.alice,
        AgentSpec {
            constraints: vec![cidr()],
            ..AgentSpec::default()
        },
    );
    let c = Credential::Certificate(&cert.der);
    assert!(
        fx.decide_from("GET", "/v1/rows/1", c, Some("10.1.2.3".parse().unwrap()))
            .is_ok()
    );
    let r = refused(fx.decide_from("GET", "/v1/rows/1", c, Some("192.0.2.1".parse().unwrap())));
    assert_eq!(r, Reason::ConstraintDenied);
    assert_eq!(
        refused(fx.decide("GET", "/v1/rows/1", c)),
        Reason::ConstraintDenied
    );
    // On the PA, which the agent's certificate carries.
    let fx = Fixture::with(pa(1, vec![cidr()]), EngineConfig::default());
    let cert = agent(&fx.ca, &fx.alice, AgentSpec::default());
    let c = Credential::Certificate(&cert.der);
    let r = refused(fx.decide_from("GET", "/v1/rows/1", c, Some("192.0.2.1".parse().unwrap())));
    assert_eq!(r, Reason::ConstraintDenied);
}

#[test]
fn rejects_an_unknown_constraint_unless_configured() {
    let spec = || AgentSpec {
        constraints: vec![Capability::new("example/other", "mystery", None)],
        ..AgentSpec::default()
    };
    let fx = Fixture::new();
    let cert = agent(&fx.ca, &fx.alice, spec());
    let r = refused(fx.decide("GET", "/v1/rows/1", Credential::Certificate(&cert.der)));
    assert_eq!(r, Reason::ConstraintDenied);
    let fx = Fixture::with(
        pa(1, vec![]),
        EngineConfig {
            allow_unknown_constraints: true,
            ..EngineConfig::default()
        },
    );
    let cert = agent(&fx.ca, &fx.alice, spec());
    assert!(
        fx.decide("GET", "/v1/rows/1", Credential::Certificate(&cert.der))
            .is_ok()
    );
}

#[test]
fn rejects_a_route_whose_roles_the_certificate_lacks() {
    let fx = Fixture::new();
    let reader = agent(&fx.ca, &fx.alice, AgentSpec::default());
    let r = refused(fx.decide("GET", "/v1/admin/x", Credential::Certificate(&reader.der)));
    assert_eq!(r, Reason::RoleMissing);
    let admin = agent(
        &fx.ca,
        &fx.alice,
        AgentSpec {
            ou: "gateway:admin",
            capabilities: vec![Capability::new("admin", "read", None)],
            ..AgentSpec::default()
        },
    );
    assert!(
        fx.decide("GET", "/v1/admin/x/y", Credential::Certificate(&admin.der))
            .is_ok()
    );
}

#[test]
fn rejects_a_da_whose_nonce_is_not_32_bytes() {
    let fx = Fixture::new();
    let cert = agent(
        &fx.ca,
        &fx.alice,
        AgentSpec {
            nonce: vec![7; 16],
            ..AgentSpec::default()
        },
    );
    let r = refused(fx.decide("GET", "/v1/rows/1", Credential::Certificate(&cert.der)));
    assert_eq!(r, Reason::DaNonceInvalid);
}

#[test]
fn rejects_a_da_grafted_onto_another_agent_key() {
    let fx = Fixture::new();
    let (_, victim) = key();
    let (_, thief) = key();
    let cert = agent_for_key(&fx.ca, &fx.alice, &AgentSpec::default(), &victim, &thief);
    let r = refused(fx.decide("GET", "/v1/rows/1", Credential::Certificate(&cert.der)));
    assert_eq!(r, Reason::DelegationInvalid);
}

#[test]
fn rejects_a_delegation_from_an_unknown_principal_and_skips_the_check_when_off() {
    let ca = Ca::new();
    let alice = person(&ca, pa(1, vec![]));
    let mut revocation = RevocationState::new();
    revocation.replace("people", Vec::<String>::new(), unix(now()));
    let rules = Rules::parse(RULES).unwrap();
    let cert = agent(&ca, &alice, AgentSpec::default());
    let request = AdmissionRequest {
        method: "GET",
        uri: "/v1/rows/1",
        client_ip: None,
        credential: Credential::Certificate(&cert.der),
        now: now(),
        current_concurrency: None,
    };
    let engine = Engine::new(ca.bundle(), Principals::new(), EngineConfig::default());
    let r = engine.decide(&request, &rules, &revocation).unwrap_err();
    assert_eq!(r.reason, Reason::PrincipalUnknown);
    assert_eq!(r.agent_id.as_deref(), Some("agent:db-reader"));
    assert_eq!(
        engine.cached_certificates(),
        0,
        "a principal may be learned later"
    );
    let engine = Engine::new(
        ca.bundle(),
        Principals::new(),
        EngineConfig {
            verify_delegation: false,
            ..EngineConfig::default()
        },
    );
    assert!(engine.decide(&request, &rules, &revocation).is_ok());
}

#[test]
fn the_cache_holds_at_most_its_capacity() {
    let fx = Fixture::with(
        pa(1, vec![]),
        EngineConfig {
            cache_capacity: 2,
            ..EngineConfig::default()
        },
    );
    for _ in 0..4 {
        let cert = agent(&fx.ca, &fx.alice, AgentSpec::default());
        assert!(
            fx.decide("GET", "/v1/rows/1", Credential::Certificate(&cert.der))
                .is_ok()
        );
    }
    assert_eq!(fx.engine.cached_certificates(), 2);
}

#[test]
fn refusals_never_carry_the_credential() {
    let fx = Fixture::new();
    let cert = agent(&fx.ca, &fx.alice, AgentSpec::default());
    let r = fx
        .decide("POST", "/v1/rows", Credential::Certificate(&cert.der))
        .unwrap_err();
    let text = format!("{r} {r:?}");
    let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &cert.der);
    assert!(!text.contains(&b64[..40]));
    assert!(!text.contains("BEGIN CERTIFICATE"));
}
