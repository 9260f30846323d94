//! Certificates for the admission tests: a `warrant-ca` hierarchy, a person
//! certificate with a PA, and agent certificates carrying a DA she signed.
#![allow(dead_code)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aic::model::{
    Capability, DelegationMode, DelegationPolicy, PrincipalAuthorization, PrincipalUid,
    Reason as DaReason,
};
use aic::{DaSigningAlgorithm, DelegationRequest};
use warrant_ca::{
    ExtraExtension, Hierarchy, InitOptions, IssuedCert, LeafSpec, Profile, Subject, TrustBundle,
    issue_leaf, oids,
};

pub const HOUR: Duration = Duration::from_secs(3600);

pub const RULES: &str = "\
# test routes
GET        /healthz             public
GET,HEAD   /v1/rows/*           database:query:SELECT   max_rows=50
POST       /v1/rows             database:insert
GET        /v1/admin/**         admin:read              roles=admin
";

pub struct Ca {
    pub _dir: tempfile::TempDir,
    pub hierarchy: Hierarchy,
}

impl Ca {
    pub fn new() -> Ca {
        let dir = tempfile::tempdir().unwrap();
        let hierarchy = Hierarchy::init_with(dir.path(), None, &InitOptions::default()).unwrap();
        Ca {
            _dir: dir,
            hierarchy,
        }
    }

    pub fn bundle(&self) -> TrustBundle {
        TrustBundle::from_pem(self.hierarchy.ca("people").unwrap().chain_pem()).unwrap()
    }

    pub fn leaf(
        &self,
        profile: Profile,
        subject: &str,
        spki: &[u8],
        validity: (SystemTime, SystemTime),
        extensions: &[ExtraExtension],
    ) -> IssuedCert {
        issue_leaf(
            self.hierarchy.ca("people").unwrap(),
            &LeafSpec {
                profile,
                subject: &Subject::parse(subject).unwrap(),
                san: &[],
                spki_der: spki,
                not_before: validity.0,
                not_after: validity.1,
                extensions,
                urls: None,
            },
        )
        .unwrap()
    }
}

pub fn now() -> SystemTime {
    // Whole seconds: certificates and DAs carry no fractions.
    UNIX_EPOCH
        + Duration::from_secs(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs(),
        )
}

pub fn unix(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

pub fn key() -> (Vec<u8>, Vec<u8>) {
    let pkcs8 = aic::generate_signing_key(DaSigningAlgorithm::EcdsaP256Sha256).unwrap();
    let spki = aic::spki_from_pkcs8(&pkcs8).unwrap();
    (pkcs8, spki)
}

pub struct Person {
    pub pkcs8: Vec<u8>,
    pub spki: Vec<u8>,
    pub cert: IssuedCert,
    pub pa: PrincipalAuthorization,
}

pub fn pa(allowed_mode: i64, constraints: Vec<Capability>) -> PrincipalAuthorization {
    PrincipalAuthorization {
        version: 1,
        grants: vec![
            Capability::new("database", "query:*", Some(br#"{"max_rows":100}"#)),
            Capability::new("admin", "read", None),
        ],
        constraints,
        delegation_policy: Some(DelegationPolicy {
            version: 1,
            max_agents: 5,
            allowed_mode,
            max_session_hours: None,
        }),
        extensions: vec![],
    }
}

pub fn person(ca: &Ca, pa: PrincipalAuthorization) -> Person {
    let (pkcs8, spki) = key();
    let t = now();
    let cert = ca.leaf(
        Profile::TlsClient,
        "/O=Warrant/CN=alice",
        &spki,
        (t - HOUR, t + 24 * HOUR),
        &[ExtraExtension::non_critical(
            oids::PA_EXTENSION,
            pa.to_der(),
        )],
    );
    Person {
        pkcs8,
        spki,
        cert,
        pa,
    }
}

pub struct AgentSpec {
    pub mode: DelegationMode,
    pub capabilities: Vec<Capability>,
    pub constraints: Vec<Capability>,
    pub nonce: Vec<u8>,
    pub ou: &'static str,
    pub validity: Option<(SystemTime, SystemTime)>,
}

impl Default for AgentSpec {
    fn default() -> Self {
        AgentSpec {
            mode: DelegationMode::Authorized,
            capabilities: vec![Capability::new(
                "database",
                "query:SELECT",
                Some(br#"{"max_rows":100}"#),
            )],
            constraints: vec![],
            nonce: vec![7; 32],
            ou: "gateway:reader",
            validity: None,
        }
    }
}

/// An agent certificate whose AIC carries a DA `p` signed for its key.
pub fn agent(ca: &Ca, p: &Person, spec: AgentSpec) -> IssuedCert {
    let (_, agent_spki) = key();
    agent_for_key(ca, p, &spec, &agent_spki, &agent_spki)
}

/// As [`agent`], with the DA bound to `signed_for` and the certificate
/// issued for `cert_key` (equal unless a test grafts a DA).
pub fn agent_for_key(
    ca: &Ca,
    p: &Person,
    spec: &AgentSpec,
    signed_for: &[u8],
    cert_key: &[u8],
) -> IssuedCert {
    let t = now();
    let key_hash = aic::crypto::sha256(&p.spki);
    let uid = PrincipalUid::parse(&format!(
        "corp:alice:{}",
        base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, key_hash)
    ))
    .unwrap();
    let request = DelegationRequest {
        agent_id: "agent:db-reader".into(),
        principal_uid: uid,
        reason: DaReason::new("TEST", "admission tests"),
        capabilities: spec.capabilities.clone(),
        delegation_mode: spec.mode,
        constraints: spec.constraints.clone(),
        requested_lifetime: 3600,
        timestamp: unix(t),
        nonce: [7; 32],
        agent_spki_der: Some(signed_for.to_vec()),
    };
    let mut tbs = request.tbs().unwrap();
    // Any nonce the test asks for (the codec keeps it; the rule refuses it).
    tbs.nonce = spec.nonce.clone();
    let (alg, sig) =
        aic::sign_delegation(&tbs.to_der(), &p.pkcs8, DaSigningAlgorithm::EcdsaP256Sha256).unwrap();
    let aic = tbs.into_aic(alg, sig, vec![]);
    ca.leaf(
        Profile::AgentProxy,
        &format!("/O=Warrant/OU={}/CN=agent:db-reader", spec.ou),
        cert_key,
        spec.validity
            .unwrap_or((t - Duration::from_secs(60), t + HOUR)),
        &[
            ExtraExtension::non_critical(oids::AIC_EXTENSION, aic.to_der()),
            ExtraExtension::non_critical(oids::PA_EXTENSION, p.pa.to_der()),
        ],
    )
}
