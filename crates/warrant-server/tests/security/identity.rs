//! What a certificate says, and who it acts as: an operator cannot become
//! admin through a certificate's CN, a person-certificate holder cannot name
//! another principal, pick a gateway role, a SAN or a trust domain, widen its
//! PA or outlive its delegation; a certificate without a record is refused;
//! a refused request generates no key and burns no nonce.

use crate::common::*;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use warrant_server::ErrorKey;

fn pa(caps: &[(&str, &str)], max_agents: i64) -> Value {
    grants(caps, max_agents, 0)
}

const TLS: &str = "[tls]\nlisten = \"127.0.0.1:0\"\nclient_auth = \"optional\"\n";

fn tls_base(srv: &TestServer) -> String {
    let tls = srv.server.as_ref().unwrap().tls_addr.unwrap();
    format!("https://localhost:{}", tls.port())
}

fn keys_generated(srv: &TestServer) -> u64 {
    srv.server
        .as_ref()
        .unwrap()
        .state
        .keys_generated
        .load(Ordering::Relaxed)
}

/// Attack 1: an operator issues itself a `tls-client` certificate with
/// `cn: "admin"` and calls the TLS listener with it. It must act as a mere
/// certificate holder, not as the admin user.
#[tokio::test]
async fn rejects_a_cn_named_after_a_user_as_that_user() {
    let srv = TestServer::start_with(None, TLS).await;
    let operator = srv.user_token("mallory", "operator").await;
    let (s, cert) = srv
        .post_as(&operator, "/api/v1/certs", &json!({"cn": "admin"}))
        .await;
    assert_eq!(s, 200, "{cert}");
    let client = mtls_client(
        &srv,
        cert["cert_pem"].as_str().unwrap(),
        cert["key_pem"].as_str().unwrap(),
    );
    let base = tls_base(&srv);
    let (s, info) = decode(
        client
            .get(format!("{base}/api/v1/users/info"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (s, info["role"].as_str()),
        (200, Some("certificate")),
        "{info}"
    );
    let r = decode(
        client
            .post(format!("{base}/api/v1/users"))
            .json(&json!({"username": "mallory2", "password": "password-123", "role": "admin"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_error(&r, ErrorKey::Forbidden);
    let (_, users) = srv.get("/api/v1/users").await;
    assert!(
        !users.to_string().contains("mallory2"),
        "no user was created: {users}"
    );
    srv.stop().await;
}

/// A certificate issued *for* a user through the admin-only endpoint acts
/// as that user, with the user's role, until the user is gone.
#[tokio::test]
async fn operator_certificate_acts_as_its_user_only() {
    let srv = TestServer::start_with(None, TLS).await;
    let operator = srv.user_token("olga", "operator").await;
    let (_, info) = srv.get("/api/v1/users").await;
    let olga_id = info["users"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["username"] == "olga")
        .unwrap()["id"]
        .as_i64()
        .unwrap();
    let path = format!("/api/v1/users/{olga_id}/operator-cert");
    // Only an admin may issue one.
    assert_error(
        &srv.post_as(&operator, &path, &json!({})).await,
        ErrorKey::Forbidden,
    );
    assert_error(
        &srv.post("/api/v1/users/999999/operator-cert", &json!({}))
            .await,
        ErrorKey::NotFound,
    );
    for (body, field) in [
        (json!({"key_type": "dsa-512"}), "key_type"),
        (json!({"validity": 0}), "validity"),
        (json!({"csr_pem": "not a csr"}), "csr_pem"),
    ] {
        let r = srv.post(&path, &body).await;
        assert_error(&r, ErrorKey::InvalidField);
        let detail = r.1["detail"].as_str().unwrap_or_default();
        assert!(detail.starts_with(field), "{body}: {detail}");
    }
    assert_error(
        &srv.post("/api/v1/users/olga/operator-cert", &json!({}))
            .await,
        ErrorKey::InvalidField,
    );
    let (s, cert) = srv.post(&path, &json!({})).await;
    assert_eq!(s, 200, "{cert}");
    assert!(
        cert["principal_uid"].is_null(),
        "it cannot delegate: {cert}"
    );
    let client = mtls_client(
        &srv,
        cert["cert_pem"].as_str().unwrap(),
        cert["key_pem"].as_str().unwrap(),
    );
    let base = tls_base(&srv);
    let (s, me) = decode(
        client
            .get(format!("{base}/api/v1/users/info"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 200, "{me}");
    assert_eq!(
        (me["username"].as_str(), me["role"].as_str()),
        (Some("olga"), Some("operator"))
    );
    // An operator reads the inventory but does not manage users.
    let (s, _) = decode(
        client
            .get(format!("{base}/api/v1/certs"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 200);
    let r = decode(
        client
            .post(format!("{base}/api/v1/users"))
            .json(&json!({"username": "x1", "password": "password-123"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_error(&r, ErrorKey::Forbidden);
    // Once the user is deleted, the certificate authenticates nobody.
    let http = reqwest::Client::new();
    let del = decode(
        http.delete(srv.url(&format!("/api/v1/users/{olga_id}")))
            .bearer_auth(&srv.token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(del.0, 200, "{}", del.1);
    let r = decode(
        client
            .get(format!("{base}/api/v1/users/info"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_error(&r, ErrorKey::Unauthorized);
    srv.stop().await;
}

/// Attack 3: Alice's key and certificate, but a DA whose principal UID says
/// `<realm>:ceo:<alice key hash>`. Only the key hash used to be compared.
#[tokio::test]
async fn rejects_a_da_naming_another_principal_with_the_same_key() {
    let srv = TestServer::start().await;
    let alice = srv.person("alice", pa(&[("db", "read")], 5)).await;
    let hash = alice.uid.rsplit_once(':').unwrap().1;
    for forged in [format!("warrant:ceo:{hash}"), format!("corp:alice:{hash}")] {
        let mut da = Da::new(&alice, "bot", &[("db", "read")]);
        da.uid = forged.clone();
        assert_error(
            &srv.post("/api/v1/certs", &da.body(&alice)).await,
            ErrorKey::PrincipalCertUntrusted,
        );
    }
    // The canonical UID still works.
    let da = Da::new(&alice, "bot", &[("db", "read")]);
    let (s, b) = srv.post("/api/v1/certs", &da.body(&alice)).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["principal_uid"].as_str(), Some(alice.uid.as_str()));
    srv.stop().await;
}

/// Subject OU, SANs, CN and the SPIFFE trust domain never come from the
/// request body.
#[tokio::test]
async fn rejects_agent_identity_fields_from_the_request_body() {
    let srv =
        TestServer::start_with(None, "[issuance]\nspiffe_trust_domain = \"corp.example\"\n").await;
    let alice = srv.person("alice", pa(&[("db", "read")], 10)).await;
    let cases: &[(&str, Value, &str)] = &[
        ("subject", json!("/OU=gateway:admin/CN=bot"), "subject"),
        (
            "subject",
            json!("/O=Bank/OU=gateway:reader/CN=bot"),
            "subject",
        ),
        ("subject", json!("/OU=gateway:reader/CN=ceo"), "subject"),
        ("cn", json!("admin"), "cn"),
        (
            "san",
            json!("DNS:bank.example,email:ceo@corp.example"),
            "san",
        ),
        (
            "spiffe_trust_domain",
            json!("bank.example"),
            "spiffe_trust_domain",
        ),
    ];
    for (key, value, field) in cases {
        let mut body = Da::new(&alice, "bot", &[("db", "read")]).body(&alice);
        body[*key] = value.clone();
        body["is_spiffe"] = json!(true);
        let r = srv.post("/api/v1/certs", &body).await;
        assert_error(&r, ErrorKey::InvalidField);
        let detail = r.1["detail"].as_str().unwrap_or_default();
        assert!(detail.starts_with(&format!("{field}:")), "{key}: {detail}");
    }
    // What the CA builds instead: CN = agent id, O/C from config, the
    // configured role, the SPIFFE ID in the configured trust domain.
    let mut body = Da::new(&alice, "bot", &[("db", "read")]).body(&alice);
    body["is_spiffe"] = json!(true);
    let (s, b) = srv.post("/api/v1/certs", &body).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["spiffe_id"], "spiffe://corp.example/agent/bot");
    let der = aic::cert::pem_decode(b["cert_pem"].as_str().unwrap(), "CERTIFICATE").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "agent.pem", b["cert_pem"].as_str().unwrap());
    let (ok, text) = run(std::process::Command::new("openssl")
        .args([
            "x509",
            "-noout",
            "-subject",
            "-ext",
            "subjectAltName",
            "-nameopt",
            "RFC2253",
            "-in",
        ])
        .arg(&path));
    assert!(ok, "{text}");
    assert!(
        text.contains("CN=bot,OU=gateway:reader,O=Warrant,C=US"),
        "{text}"
    );
    assert!(
        text.contains("URI:spiffe://corp.example/agent/bot"),
        "{text}"
    );
    assert!(!text.contains("DNS:"), "{text}");
    assert!(!der.is_empty());
    srv.stop().await;
}

fn cert_pa(cert_pem: &str) -> aic::PrincipalAuthorization {
    let der = aic::cert::pem_decode(cert_pem, "CERTIFICATE").unwrap();
    let ext = warrant_ca::certificate_extensions(&der)
        .unwrap()
        .into_iter()
        .find(|e| e.oid == warrant_ca::oids::PA_EXTENSION)
        .expect("a PA extension");
    aic::PrincipalAuthorization::from_der(&ext.value).unwrap()
}

/// The body PA used to replace the certificate's PA outright, dropping its
/// constraints. The agent's PA keeps them; a body PA can only narrow.
#[tokio::test]
async fn rejects_a_body_pa_that_drops_the_certificates_constraints() {
    let srv = TestServer::start().await;
    let person_pa = json!({
        "grants": [{"scheme_id": "db", "capability_id": "read"}, {"scheme_id": "db", "capability_id": "write"}],
        "authorization_constraints": [{"scheme_id": "net", "capability_id": "vpn-only"}],
        "delegation_policy": {"allowed_mode": 0, "max_agents": 5}
    });
    let alice = srv.person("alice", person_pa).await;
    let mut body = Da::new(&alice, "bot", &[("db", "read")]).body(&alice);
    body["principal_authorization"] = json!({
        "grants": [{"scheme_id": "db", "capability_id": "read"}],
        "delegation_policy": {"allowed_mode": 0, "max_agents": 2}
    });
    let (s, b) = srv.post("/api/v1/certs", &body).await;
    assert_eq!(s, 200, "{b}");
    let agent_pa = cert_pa(b["cert_pem"].as_str().unwrap());
    assert_eq!(agent_pa.grants.len(), 1, "grants narrowed");
    assert_eq!(
        agent_pa
            .constraints
            .iter()
            .map(|c| c.capability_id.as_str())
            .collect::<Vec<_>>(),
        ["vpn-only"],
        "the certificate's constraint is kept"
    );
    assert_eq!(agent_pa.delegation_policy.unwrap().max_agents, 2);
    // Widening is refused.
    let mut body = Da::new(&alice, "bot2", &[("db", "read")]).body(&alice);
    body["principal_authorization"] = json!({
        "grants": [{"scheme_id": "db", "capability_id": "drop"}]
    });
    assert_error(
        &srv.post("/api/v1/certs", &body).await,
        ErrorKey::CapabilityNotGranted,
    );
    srv.stop().await;
}

/// Attack 5: with the freshness window disabled, a DA whose
/// `timestamp + lifetime` ended two hours ago used to mint certificates.
#[tokio::test]
async fn rejects_an_ended_delegation_with_the_window_disabled() {
    let srv = TestServer::start_with(None, "[issuance]\nda_max_timestamp_skew = 0\n").await;
    let alice = srv.person("alice", pa(&[("db", "read")], 5)).await;
    let mut da = Da::new(&alice, "bot", &[("db", "read")]);
    da.lifetime = 600;
    da.timestamp = now() - 2 * 3600 - 600;
    assert_error(
        &srv.post("/api/v1/certs", &da.body(&alice)).await,
        ErrorKey::DaTimestampStale,
    );
    srv.stop().await;
}

/// The certificate ends with the delegation it carries, not `lifetime`
/// after the request.
#[tokio::test]
async fn agent_certificate_ends_with_its_delegation() {
    let srv = TestServer::start_with(None, "[issuance]\nda_max_timestamp_skew = 0\n").await;
    let alice = srv.person("alice", pa(&[("db", "read")], 5)).await;
    let mut da = Da::new(&alice, "bot", &[("db", "read")]);
    da.lifetime = 600;
    da.timestamp = now() - 400;
    let (s, b) = srv.post("/api/v1/certs", &da.body(&alice)).await;
    assert_eq!(s, 200, "{b}");
    let not_after = aic::time::parse_rfc3339(b["not_after"].as_str().unwrap()).unwrap();
    assert!(
        not_after <= da.timestamp + 600,
        "notAfter {not_after} past the delegation's end {}",
        da.timestamp + 600
    );
    srv.stop().await;
}

/// A certificate that chains to our root but has no record (never issued
/// through the store) is refused as a principal and as an mTLS caller.
#[tokio::test]
async fn rejects_a_principal_certificate_without_a_record() {
    let srv = TestServer::start_with(None, TLS).await;
    let h = warrant_ca::Hierarchy::load(srv.dir.path(), None).unwrap();
    let key = warrant_ca::generate_key(warrant_ca::KeyType::EcdsaP256).unwrap();
    let subject = warrant_ca::Subject::for_request(None, "ghost", "Warrant", "US").unwrap();
    let pa_der = aic::PrincipalAuthorization {
        version: 1,
        grants: vec![aic::Capability::new("db", "read", None)],
        constraints: vec![],
        delegation_policy: None,
        extensions: vec![],
    }
    .to_der();
    let now = std::time::SystemTime::now();
    let cert = warrant_ca::issue_leaf(
        h.default_ca().unwrap(),
        &warrant_ca::LeafSpec {
            profile: warrant_ca::Profile::TlsClient,
            subject: &subject,
            san: &[],
            spki_der: &key.spki_der,
            not_before: now,
            not_after: now + std::time::Duration::from_secs(86400),
            extensions: &[warrant_ca::ExtraExtension::non_critical(
                warrant_ca::oids::PA_EXTENSION,
                pa_der,
            )],
            urls: None,
        },
    )
    .unwrap();
    let ghost = Person {
        cert_pem: cert.pem.clone(),
        key_pem: key.pkcs8_pem.to_string(),
        key_der: aic::cert::pem_decode(&key.pkcs8_pem, "PRIVATE KEY").unwrap(),
        uid: uid_for_spki("warrant:ghost", &key.spki_der),
        serial: cert.serial_hex.clone(),
    };
    let da = Da::new(&ghost, "bot", &[("db", "read")]);
    assert_error(
        &srv.post("/api/v1/certs", &da.body(&ghost)).await,
        ErrorKey::PrincipalCertUntrusted,
    );
    let client = mtls_client(&srv, &ghost.cert_pem, &ghost.key_pem);
    let r = decode(
        client
            .get(format!("{}/api/v1/users/info", tls_base(&srv)))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_error(&r, ErrorKey::Unauthorized);
    srv.stop().await;
}

/// Principal chain, DA signature, freshness and policy are checked before
/// any key is generated: refused requests asking for a server-side RSA key
/// generate none.
#[tokio::test]
async fn rejects_invalid_delegations_before_generating_a_key() {
    let srv = TestServer::start().await;
    let alice = srv.person("alice", pa(&[("db", "read")], 1)).await;
    let mallory = srv.person("mallory", pa(&[("db", "read")], 1)).await;
    let before = keys_generated(&srv);
    let mut refused = Vec::new();
    // Another principal's UID.
    let mut da = Da::new(&alice, "bot", &[("db", "read")]);
    da.uid = mallory.uid.clone();
    refused.push((da.body(&alice), ErrorKey::PrincipalCertUntrusted));
    // A signature by the wrong key.
    let da = Da::new(&alice, "bot", &[("db", "read")]);
    refused.push((
        da.body_signed_by(&alice, &mallory.key_der),
        ErrorKey::DelegationSignatureInvalid,
    ));
    // Stale.
    let mut da = Da::new(&alice, "bot", &[("db", "read")]);
    da.timestamp = now() - 3600;
    refused.push((da.body(&alice), ErrorKey::DaTimestampStale));
    // Policy.
    let da = Da::new(&alice, "bot", &[("db", "write")]);
    refused.push((da.body(&alice), ErrorKey::CapabilityNotGranted));
    for (mut body, key) in refused {
        body["key_type"] = json!("rsa-4096");
        assert_error(&srv.post("/api/v1/certs", &body).await, key);
    }
    assert_eq!(
        keys_generated(&srv),
        before,
        "a refused request generated a key"
    );
    let (s, b) = srv
        .post(
            "/api/v1/certs",
            &Da::new(&alice, "bot", &[("db", "read")]).body(&alice),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(keys_generated(&srv), before + 1);
    srv.stop().await;
}

/// The nonce is consumed only after policy passed: a DA refused by policy
/// (`max_agents`) can be used once the policy allows it.
#[tokio::test]
async fn rejects_burning_a_nonce_on_a_policy_refusal() {
    let srv = TestServer::start().await;
    let alice = srv.person("alice", pa(&[("db", "read")], 1)).await;
    let (s, first) = srv
        .post(
            "/api/v1/certs",
            &Da::new(&alice, "bot-1", &[("db", "read")]).body(&alice),
        )
        .await;
    assert_eq!(s, 200, "{first}");
    let second = Da::new(&alice, "bot-2", &[("db", "read")]).body(&alice);
    assert_error(
        &srv.post("/api/v1/certs", &second).await,
        ErrorKey::MaxAgentsExceeded,
    );
    let serial = first["serial_number"].as_str().unwrap();
    let (s, b) = srv
        .post(
            &format!("/api/v1/cert/people/{serial}/revoke"),
            &json!({"reason": "superseded"}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = srv.post("/api/v1/certs", &second).await;
    assert_eq!(s, 200, "the refused DA's nonce was left unused: {b}");
    srv.stop().await;
}

/// One principal sending valid but refused DAs used to fill the nonce
/// ledger until everyone got 503.
#[tokio::test]
async fn rejects_filling_the_nonce_ledger_with_refused_delegations() {
    let srv = TestServer::start_with(None, "[engine]\nmax_da_nonces = 64\n").await;
    let alice = srv.person("alice", pa(&[("db", "read")], 1000)).await;
    let bob = srv.person("bob", pa(&[("db", "read")], 5)).await;
    for i in 0..300 {
        let da = Da::new(&alice, &format!("bot-{i}"), &[("db", "write")]);
        assert_error(
            &srv.post("/api/v1/certs", &da.body(&alice)).await,
            ErrorKey::CapabilityNotGranted,
        );
    }
    let (s, b) = srv
        .post(
            "/api/v1/certs",
            &Da::new(&bob, "bot", &[("db", "read")]).body(&bob),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    srv.stop().await;
}

/// A client that disconnects while its request waits (here on an RSA-4096
/// key) drops the request: the nonce reservation gives the nonce back, so
/// the same DA can be sent again.
#[tokio::test]
async fn dropped_request_releases_its_nonce() {
    let srv = TestServer::start().await;
    let alice = srv.person("alice", pa(&[("db", "read")], 5)).await;
    let mut body = Da::new(&alice, "bot", &[("db", "read")]).body(&alice);
    body["key_type"] = json!("rsa-4096");
    let raw = serde_json::to_vec(&body).unwrap();
    let addr = srv.base.trim_start_matches("http://").to_string();
    let generated = keys_generated(&srv);
    {
        use tokio::io::AsyncWriteExt;
        let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "POST /api/v1/certs HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            srv.token,
            raw.len()
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        tcp.write_all(&raw).await.unwrap();
        // Wait until the request is past every check and generating its key.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while keys_generated(&srv) == generated {
            assert!(
                std::time::Instant::now() < deadline,
                "the request never got to its key"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    } // the connection closes here, mid-request
    // hyper notices the closed connection at its next read and drops the
    // request; the same DA then goes through (not a replay).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let mut fresh = body.clone();
        fresh["key_type"] = json!("ecdsa-p256");
        let (s, b) = srv.post("/api/v1/certs", &fresh).await;
        if s == 200 {
            break;
        }
        assert_error(&(s, b.clone()), ErrorKey::DaNonceReplayed);
        assert!(
            std::time::Instant::now() < deadline,
            "the nonce stayed consumed: {b}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    srv.stop().await;
}

/// An agent certificate is never a principal: its holder cannot delegate.
#[tokio::test]
async fn rejects_an_agent_certificate_as_principal() {
    let srv = TestServer::start().await;
    let alice = srv.person("alice", pa(&[("db", "read")], 5)).await;
    let (s, agent) = srv
        .post(
            "/api/v1/certs",
            &Da::new(&alice, "bot", &[("db", "read")]).body(&alice),
        )
        .await;
    assert_eq!(s, 200, "{agent}");
    let key_pem = agent["key_pem"].as_str().unwrap().to_string();
    let cert_pem = agent["cert_pem"].as_str().unwrap().to_string();
    let as_person = Person {
        uid: uid_for_spki("warrant:bot", &spki_of_cert_pem(&cert_pem)),
        key_der: aic::cert::pem_decode(&key_pem, "PRIVATE KEY").unwrap(),
        key_pem,
        cert_pem,
        serial: agent["serial_number"].as_str().unwrap().to_string(),
    };
    let da = Da::new(&as_person, "sub-bot", &[("db", "read")]);
    assert_error(
        &srv.post("/api/v1/certs", &da.body(&as_person)).await,
        ErrorKey::PrincipalCertUntrusted,
    );
    srv.stop().await;
}
