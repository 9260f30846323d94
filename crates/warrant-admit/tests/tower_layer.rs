//! The tower layer in `examples/mtls_service.rs`, over real mTLS: rustls
//! terminates TLS with client certificates, the layer admits or refuses
//! before the axum routes run.

mod common;
#[path = "../examples/mtls_service.rs"]
#[allow(dead_code)]
mod example;

use common::*;
use std::time::Duration;
use warrant_admit::engine::{Engine, EngineConfig, Principals};
use warrant_admit::live::Admission;
use warrant_admit::revocation::RevocationState;
use warrant_admit::rules::Rules;
use warrant_ca::{KeyType, Profile, generate_key};

struct Service {
    base: String,
    admission: Admission,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Service {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start(ca: &Ca, alice: &Person) -> Service {
    let server_key = generate_key(KeyType::EcdsaP256).unwrap();
    let t = now();
    let server = ca.leaf(
        Profile::TlsServer,
        "/O=Warrant/CN=localhost",
        &server_key.spki_der,
        (t - Duration::from_secs(60), t + HOUR),
        &[],
    );
    let trust = format!(
        "{}{}",
        ca.hierarchy.ca("people").unwrap().cert_pem(),
        ca.hierarchy.root().cert_pem()
    );
    let tls = example::tls_config(
        server.pem.as_bytes(),
        server_key.pkcs8_pem.as_bytes(),
        trust.as_bytes(),
    )
    .unwrap();
    let mut principals = Principals::new();
    principals.insert_der(alice.cert.der.clone()).unwrap();
    let engine = Engine::new(ca.bundle(), principals, EngineConfig::default());
    let mut revocation = RevocationState::new();
    revocation.replace("people", Vec::<String>::new(), unix(now()));
    let rules =
        Rules::parse("GET /healthz public\nGET /v1/rows/* database:query:SELECT\n").unwrap();
    let admission = Admission::new(engine, rules, revocation);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!(
        "https://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    let task = tokio::spawn(example::serve(listener, tls, admission.clone()));
    Service {
        base,
        admission,
        task,
    }
}

/// A client presenting `identity` (certificate and key PEM), or none; the
/// server's certificate is the test CA's, not checked here.
fn client(identity: Option<String>) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .tls_danger_accept_invalid_certs(true);
    if let Some(pem) = identity {
        b = b.identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap());
    }
    b.build().unwrap()
}

async fn get(c: &reqwest::Client, url: String) -> (u16, String, String) {
    let resp = c.get(url).send().await.unwrap();
    let reason = resp
        .headers()
        .get("x-admit-reason")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (resp.status().as_u16(), reason, resp.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_admits_an_agent_over_mtls_and_refuses_the_rest() {
    let ca = Ca::new();
    let alice = person(&ca, pa(1, vec![]));
    let svc = start(&ca, &alice).await;
    let agent_key = generate_key(KeyType::EcdsaP256).unwrap();
    let cert = agent_for_key(
        &ca,
        &alice,
        &AgentSpec::default(),
        &agent_key.spki_der,
        &agent_key.spki_der,
    );
    let agent = client(Some(format!(
        "{}{}",
        agent_key.pkcs8_pem.as_str(),
        cert.pem
    )));

    // Admitted: the route runs with the agent's identity.
    let (status, _, body) = get(&agent, format!("{}/v1/rows/1", svc.base)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "rows for agent:db-reader on behalf of corp:alice\n");

    // No certificate: 401; a public route needs none.
    let anonymous = client(None);
    let (status, reason, _) = get(&anonymous, format!("{}/v1/rows/1", svc.base)).await;
    assert_eq!((status, reason.as_str()), (401, "admit.no_credential"));
    assert_eq!(
        get(&anonymous, format!("{}/healthz", svc.base)).await.0,
        200
    );

    // No rule for it: 403 before the router's own 404.
    let (status, reason, _) = get(&agent, format!("{}/v1/other", svc.base)).await;
    assert_eq!((status, reason.as_str()), (403, "admit.no_route"));

    // Revoked, through the shared state a CRL poller would update.
    svc.admission.replace_revoked(
        "people",
        std::slice::from_ref(&cert.serial_hex),
        unix(now()),
    );
    let (status, reason, _) = get(&agent, format!("{}/v1/rows/1", svc.base)).await;
    assert_eq!((status, reason.as_str()), (403, "admit.revoked"));
}
