//! The HTTP API against a real server on 127.0.0.1: happy paths verified
//! with the openssl binary, every §4 rejection, input errors and
//! authorisation. Every case runs on SQLite, PostgreSQL and MariaDB, each on
//! a fresh database (`backend_matrix!` at the end).

mod common;

use common::*;
use serde_json::json;
use std::process::Command;
use warrant_server::ErrorKey;

async fn issues_person_cert_with_server_key_that_openssl_verifies(b: Backend) {
    let srv = TestServer::on(b).await;
    let (s, b) = srv
        .post(
            "/api/v1/certs",
            &json!({"cn": "alice", "san": "email:alice@example.com"}),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["serial_number"].as_str().unwrap().len(), 40);
    assert!(b["key_pem"].as_str().unwrap().contains("PRIVATE KEY"));
    assert_eq!(b["ca"], "people");
    openssl_verify(&srv, b["cert_pem"].as_str().unwrap(), "alice");
    srv.stop().await;
}

async fn issues_person_cert_from_csr_without_key_pem(b: Backend) {
    let srv = TestServer::on(b).await;
    let (_key, csr) = openssl_csr(srv.dir.path(), "bob");
    let (s, b) = srv
        .post("/api/v1/certs", &json!({"cn": "bob", "csr_pem": csr}))
        .await;
    assert_eq!(s, 200, "{b}");
    assert!(b.get("key_pem").is_none(), "no key_pem with a CSR");
    openssl_verify(&srv, b["cert_pem"].as_str().unwrap(), "bob");
    srv.stop().await;
}

async fn issues_agent_cert_with_da_v1_that_openssl_verifies(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let da = Da::new(&alice, "bot-1", &[("db", "read")]);
    let (s, b) = srv.post("/api/v1/certs", &da.body(&alice)).await;
    assert_eq!(s, 200, "{b}");
    let pem = b["cert_pem"].as_str().unwrap();
    openssl_verify(&srv, pem, "agent-v1");
    // The AIC extension round-trips and its DA verifies against the principal.
    let der = aic::cert::pem_decode(pem, "CERTIFICATE").unwrap();
    let view = aic::cert::CertificateView::from_der(&der).unwrap();
    let aic_ext = view.aic().unwrap().unwrap();
    assert_eq!(aic_ext.agent_id, "bot-1");
    aic::verify_aic_delegation(
        &aic_ext,
        &spki_of_cert_pem(&alice.cert_pem),
        Some(&view.subject_spki_der),
    )
    .unwrap();
    assert!(
        view.principal_authorization().is_some(),
        "PA copied into the agent cert"
    );
    srv.stop().await;
}

async fn issues_agent_cert_with_da_v2_bound_to_csr_key(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let (_k, csr) = openssl_csr(srv.dir.path(), "bot-2");
    let spki = warrant_ca::verify_csr(&csr).unwrap().spki_der;
    let mut da = Da::new(&alice, "bot-2", &[("db", "read")]);
    da.agent_spki = Some(spki.clone());
    let mut body = da.body(&alice);
    body["csr_pem"] = json!(csr);
    let (s, b) = srv.post("/api/v1/certs", &body).await;
    assert_eq!(s, 200, "{b}");
    assert!(b.get("key_pem").is_none());
    openssl_verify(&srv, b["cert_pem"].as_str().unwrap(), "agent-v2");

    // The same v2 DA grafted onto another key is refused.
    let (_k2, other_csr) = openssl_csr(srv.dir.path(), "bot-2b");
    let mut da2 = da.clone();
    da2.nonce = random_nonce();
    let mut body = da2.body(&alice);
    body["csr_pem"] = json!(other_csr);
    assert_error(
        &srv.post("/api/v1/certs", &body).await,
        ErrorKey::DelegationSignatureInvalid,
    );
    srv.stop().await;
}

async fn rejects_bad_da_signature(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let mallory_key = aic::generate_signing_key(aic::DaSigningAlgorithm::EcdsaP256Sha256).unwrap();
    let da = Da::new(&alice, "bot", &[("db", "read")]);
    let body = da.body_signed_by(&alice, &mallory_key);
    assert_error(
        &srv.post("/api/v1/certs", &body).await,
        ErrorKey::DelegationSignatureInvalid,
    );
    srv.stop().await;
}

async fn rejects_wrong_key_hash_in_principal_uid(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let bob = srv.person("bob", grants(&[("db", "read")], 5, 0)).await;
    let mut da = Da::new(&alice, "bot", &[("db", "read")]);
    da.uid = bob.uid.clone(); // bob's key hash, alice's certificate
    assert_error(
        &srv.post("/api/v1/certs", &da.body(&alice)).await,
        ErrorKey::PrincipalCertUntrusted,
    );
    srv.stop().await;
}

async fn rejects_principal_cert_from_foreign_ca(b: Backend) {
    let srv = TestServer::on(b).await;
    let foreign = tempfile::tempdir().unwrap();
    let h = warrant_ca::Hierarchy::init(foreign.path(), None).unwrap();
    let key = warrant_ca::generate_key(warrant_ca::KeyType::EcdsaP256).unwrap();
    let subject = warrant_ca::Subject::for_request(None, "alice", "Evil", "US").unwrap();
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
            extensions: &[],
            urls: None,
        },
    )
    .unwrap();
    let person = Person {
        cert_pem: cert.pem.clone(),
        key_pem: key.pkcs8_pem.to_string(),
        key_der: aic::cert::pem_decode(&key.pkcs8_pem, "PRIVATE KEY").unwrap(),
        uid: uid_for_spki("corp:alice", &key.spki_der),
        serial: cert.serial_hex.clone(),
    };
    let da = Da::new(&person, "bot", &[]);
    assert_error(
        &srv.post("/api/v1/certs", &da.body(&person)).await,
        ErrorKey::PrincipalCertUntrusted,
    );
    srv.stop().await;
}

async fn rejects_stale_and_future_da_timestamps(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let mut da = Da::new(&alice, "bot", &[("db", "read")]);
    da.timestamp = now() - 3600;
    assert_error(
        &srv.post("/api/v1/certs", &da.body(&alice)).await,
        ErrorKey::DaTimestampStale,
    );
    da.timestamp = now() + 3600;
    da.nonce = random_nonce();
    assert_error(
        &srv.post("/api/v1/certs", &da.body(&alice)).await,
        ErrorKey::DaTimestampStale,
    );
    srv.stop().await;
}

async fn rejects_replayed_nonce(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let body = Da::new(&alice, "bot", &[("db", "read")]).body(&alice);
    let first = srv.post("/api/v1/certs", &body).await;
    assert_eq!(first.0, 200, "{}", first.1);
    assert_error(
        &srv.post("/api/v1/certs", &body).await,
        ErrorKey::DaNonceReplayed,
    );
    srv.stop().await;
}

async fn stale_da_does_not_burn_its_nonce(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let mut da = Da::new(&alice, "bot", &[("db", "read")]);
    da.timestamp = now() - 3600;
    assert_error(
        &srv.post("/api/v1/certs", &da.body(&alice)).await,
        ErrorKey::DaTimestampStale,
    );
    da.timestamp = now();
    let (s, b) = srv.post("/api/v1/certs", &da.body(&alice)).await;
    assert_eq!(s, 200, "the same nonce in a fresh DA must still work: {b}");
    srv.stop().await;
}

async fn rejects_representative_mode_without_policy(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let mut da = Da::new(&alice, "bot", &[("db", "read")]);
    da.mode = 1;
    assert_error(
        &srv.post("/api/v1/certs", &da.body(&alice)).await,
        ErrorKey::RepresentativePolicyDenied,
    );

    let carol = srv.person("carol", grants(&[("db", "read")], 5, 1)).await;
    let mut da = Da::new(&carol, "bot", &[("db", "read")]);
    da.mode = 1;
    let (s, b) = srv.post("/api/v1/certs", &da.body(&carol)).await;
    assert_eq!(s, 200, "allowed_mode = 1 permits representative mode: {b}");
    srv.stop().await;
}

async fn rejects_capability_not_granted(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let da = Da::new(&alice, "bot", &[("db", "drop")]);
    assert_error(
        &srv.post("/api/v1/certs", &da.body(&alice)).await,
        ErrorKey::CapabilityNotGranted,
    );
    srv.stop().await;
}

async fn grants_come_from_the_certificate_not_the_body(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let da = Da::new(&alice, "bot", &[("db", "drop")]);
    let mut body = da.body(&alice);
    body["principal_authorization"] = grants(&[("db", "read"), ("db", "drop")], 5, 0);
    assert_error(
        &srv.post("/api/v1/certs", &body).await,
        ErrorKey::CapabilityNotGranted,
    );
    srv.stop().await;
}

async fn rejects_max_agents_exceeded(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 1, 0)).await;
    let first = srv
        .post("/api/v1/certs", &Da::new(&alice, "bot-a", &[]).body(&alice))
        .await;
    assert_eq!(first.0, 200, "{}", first.1);
    let second = srv
        .post("/api/v1/certs", &Da::new(&alice, "bot-b", &[]).body(&alice))
        .await;
    assert_error(&second, ErrorKey::MaxAgentsExceeded);
    srv.stop().await;
}

/// `max_agents` counts committed rows; requests racing for the last places
/// must still not get more than the policy allows.
async fn max_agents_holds_under_concurrent_requests(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 3, 0)).await;
    let tasks: Vec<_> = (0..24)
        .map(|i| {
            let req = srv
                .http
                .post(srv.url("/api/v1/certs"))
                .bearer_auth(&srv.token)
                .json(&Da::new(&alice, &format!("bot-{i}"), &[]).body(&alice));
            tokio::spawn(async move { common::decode(req.send().await.unwrap()).await })
        })
        .collect();
    let mut issued = 0;
    for t in tasks {
        let got = t.await.unwrap();
        if got.0 == 200 {
            issued += 1;
        } else {
            assert_error(&got, ErrorKey::MaxAgentsExceeded);
        }
    }
    assert_eq!(issued, 3, "max_agents = 3 under 24 concurrent requests");
    srv.stop().await;
}

/// Two servers on one database, as two nodes of a deployment: neither
/// admits an agent past `max_agents` by missing the other's. A SQLite node
/// skips the count while it knows a bound below the limit; it learns of the
/// other node's commits at its own next write (here a person certificate),
/// or within 100 ms when idle, and counts again.
async fn max_agents_holds_across_two_servers_on_one_database(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 3, 0)).await;
    let (node_b, base_b) = srv.second_node().await;
    let on_b = |agent_id: &str| {
        let req = srv
            .http
            .post(format!("{base_b}/api/v1/certs"))
            .bearer_auth(&srv.token)
            .json(&Da::new(&alice, agent_id, &[]).body(&alice));
        async move { common::decode(req.send().await.unwrap()).await }
    };
    let on_a = |agent_id: &str| {
        let body = Da::new(&alice, agent_id, &[]).body(&alice);
        let srv = &srv;
        async move { srv.post("/api/v1/certs", &body).await }
    };

    let first = on_a("bot-1").await;
    assert_eq!(first.0, 200, "{}", first.1);
    for id in ["bot-2", "bot-3"] {
        let got = on_b(id).await;
        assert_eq!(got.0, 200, "{}", got.1);
    }
    srv.person("bob", grants(&[], 1, 0)).await;
    assert_error(&on_a("bot-4").await, ErrorKey::MaxAgentsExceeded);
    assert_error(&on_b("bot-4").await, ErrorKey::MaxAgentsExceeded);

    // A revocation through the other node frees a place on this one.
    let (s, r) = srv
        .post(
            &format!(
                "/api/v1/cert/{}/{}/revoke",
                first.1["ca"].as_str().unwrap(),
                first.1["serial_number"].as_str().unwrap()
            ),
            &json!({"reason": "superseded"}),
        )
        .await;
    assert_eq!(s, 200, "{r}");
    let got = on_b("bot-4").await;
    assert_eq!(got.0, 200, "{}", got.1);
    assert_error(&on_a("bot-5").await, ErrorKey::MaxAgentsExceeded);
    node_b.shutdown().await;
    srv.stop().await;
}

async fn agent_validity_is_capped_by_da_lifetime(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[], 5, 0)).await;
    let mut da = Da::new(&alice, "bot", &[]);
    da.lifetime = 120;
    let (s, b) = srv.post("/api/v1/certs", &da.body(&alice)).await;
    assert_eq!(s, 200, "{b}");
    let nb = aic::time::parse_rfc3339(b["not_before"].as_str().unwrap()).unwrap();
    let na = aic::time::parse_rfc3339(b["not_after"].as_str().unwrap()).unwrap();
    assert_eq!(na - nb, 120);
    srv.stop().await;
}

async fn malformed_json_wrong_types_and_oversize_fields_name_the_field(b: Backend) {
    let srv = TestServer::on(b).await;
    assert_error(
        &srv.post_raw("/api/v1/certs", b"{\"cn\":".to_vec()).await,
        ErrorKey::InvalidJson,
    );
    let wrong = srv
        .post("/api/v1/certs", &json!({"cn": "x", "validity": "ten"}))
        .await;
    assert_error(&wrong, ErrorKey::InvalidField);
    assert!(
        wrong.1["detail"].as_str().unwrap().starts_with("validity"),
        "{}",
        wrong.1
    );
    let neg = srv
        .post("/api/v1/certs", &json!({"cn": "x", "validity": -1}))
        .await;
    assert_error(&neg, ErrorKey::InvalidField);
    let long_cn = srv
        .post("/api/v1/certs", &json!({"cn": "x".repeat(100)}))
        .await;
    assert_error(&long_cn, ErrorKey::InvalidField);
    assert!(
        long_cn.1["detail"].as_str().unwrap().starts_with("cn"),
        "{}",
        long_cn.1
    );
    let bad_kt = srv
        .post("/api/v1/certs", &json!({"cn": "x", "key_type": "dsa"}))
        .await;
    assert_error(&bad_kt, ErrorKey::InvalidField);
    assert!(
        bad_kt.1["detail"].as_str().unwrap().contains("key_type"),
        "{}",
        bad_kt.1
    );
    assert_error(
        &srv.post("/api/v1/certs", &json!({"san": "DNS:x"})).await,
        ErrorKey::CnRequired,
    );
    assert_error(
        &srv.post("/api/v1/certs", &json!({"cn": "x", "ca": "nope"}))
            .await,
        ErrorKey::CaNotFound,
    );
    let mut big = b"{\"cn\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'a', 1 << 20));
    big.extend(b"\"}");
    assert_error(
        &srv.post_raw("/api/v1/certs", big).await,
        ErrorKey::PayloadTooLarge,
    );
    srv.stop().await;
}

async fn agent_request_input_errors_name_the_field(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let base = Da::new(&alice, "bot", &[("db", "read")]).body(&alice);

    let mut b = base.clone();
    b["user_auth_nonce"] = json!("AAAA");
    let r = srv.post("/api/v1/certs", &b).await;
    assert_error(&r, ErrorKey::InvalidDaNonce);
    assert!(
        r.1["detail"]
            .as_str()
            .unwrap()
            .starts_with("user_auth_nonce")
    );

    let mut b = base.clone();
    b["principal_uid"] = json!("not-a-uid");
    assert_error(
        &srv.post("/api/v1/certs", &b).await,
        ErrorKey::InvalidPrincipalUid,
    );

    let mut b = base.clone();
    b.as_object_mut().unwrap().remove("user_auth_signature");
    assert_error(
        &srv.post("/api/v1/certs", &b).await,
        ErrorKey::AicRequiresAuth,
    );

    let mut b = base.clone();
    b["user_auth_timestamp"] = json!("yesterday");
    let r = srv.post("/api/v1/certs", &b).await;
    assert_error(&r, ErrorKey::InvalidField);
    assert!(
        r.1["detail"]
            .as_str()
            .unwrap()
            .starts_with("user_auth_timestamp")
    );

    let mut b = base.clone();
    b["capabilities"] = json!([{"scheme_id": 5}]);
    let r = srv.post("/api/v1/certs", &b).await;
    assert_error(&r, ErrorKey::InvalidField);
    assert!(
        r.1["detail"]
            .as_str()
            .unwrap()
            .starts_with("capabilities[0]"),
        "{}",
        r.1
    );

    let mut b = base.clone();
    b["subject"] = json!("/O=Example/OU=*/CN=bot");
    assert_error(&srv.post("/api/v1/certs", &b).await, ErrorKey::InvalidField);
    srv.stop().await;
}

async fn unauthenticated_and_underprivileged_calls_are_refused(b: Backend) {
    let srv = TestServer::on(b).await;
    let no_auth = srv.http.get(srv.url("/api/v1/certs")).send().await.unwrap();
    assert_error(&decode(no_auth).await, ErrorKey::Unauthorized);
    let bad = srv
        .http
        .get(srv.url("/api/v1/certs"))
        .bearer_auth("0".repeat(64))
        .send()
        .await
        .unwrap();
    assert_error(&decode(bad).await, ErrorKey::Unauthorized);

    let auditor = srv.user_token("audrey", "auditor").await;
    assert_error(
        &srv.post_as(&auditor, "/api/v1/certs", &json!({"cn": "x"}))
            .await,
        ErrorKey::Forbidden,
    );
    let list = srv
        .http
        .get(srv.url("/api/v1/certs"))
        .bearer_auth(&auditor)
        .send()
        .await
        .unwrap();
    assert_eq!(list.status().as_u16(), 200);

    let operator = srv.user_token("olga", "operator").await;
    let users = srv
        .http
        .get(srv.url("/api/v1/users"))
        .bearer_auth(&operator)
        .send()
        .await
        .unwrap();
    assert_error(&decode(users).await, ErrorKey::Forbidden);
    let (s, b) = srv
        .post_as(&operator, "/api/v1/certs", &json!({"cn": "y"}))
        .await;
    assert_eq!(s, 200, "{b}");

    // X-Auth-Token and the pki_token cookie work like Bearer.
    let x = srv
        .http
        .get(srv.url("/api/v1/users/info"))
        .header("X-Auth-Token", &operator)
        .send()
        .await
        .unwrap();
    assert_eq!(decode(x).await.1["role"], "operator");
    let c = srv
        .http
        .get(srv.url("/api/v1/users/info"))
        .header("Cookie", format!("pki_token={operator}"))
        .send()
        .await
        .unwrap();
    assert_eq!(decode(c).await.1["username"], "olga");

    // Logout revokes the token.
    let (s, _) = srv
        .post_as(&operator, "/api/v1/users/logout", &json!({}))
        .await;
    assert_eq!(s, 200);
    let after = srv
        .http
        .get(srv.url("/api/v1/users/info"))
        .bearer_auth(&operator)
        .send()
        .await
        .unwrap();
    assert_error(&decode(after).await, ErrorKey::Unauthorized);
    srv.stop().await;
}

async fn login_locks_account_after_five_failures(b: Backend) {
    let srv = TestServer::on(b).await;
    for _ in 0..5 {
        let r = srv
            .post_as(
                "",
                "/api/v1/users/login",
                &json!({"username": "admin", "password": "wrong"}),
            )
            .await;
        assert_error(&r, ErrorKey::LoginFailed);
    }
    let locked = srv
        .post_as(
            "",
            "/api/v1/users/login",
            &json!({"username": "admin", "password": srv.admin_password}),
        )
        .await;
    assert_error(&locked, ErrorKey::AccountLocked);
    srv.stop().await;
}

async fn revoking_a_person_cascades_to_agents_and_lands_on_the_crl(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let (s, agent) = srv
        .post(
            "/api/v1/certs",
            &Da::new(&alice, "bot", &[("db", "read")]).body(&alice),
        )
        .await;
    assert_eq!(s, 200, "{agent}");
    let agent_serial = agent["serial_number"].as_str().unwrap().to_string();

    assert_error(
        &srv.post(
            &format!("/api/v1/cert/people/{}/revoke", alice.serial),
            &json!({}),
        )
        .await,
        ErrorKey::ReasonRequired,
    );
    let (s, r) = srv
        .post(
            &format!("/api/v1/cert/people/{}/revoke", alice.serial),
            &json!({"reason": "keyCompromise"}),
        )
        .await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["cascade_count"], 1);
    let (_, got) = srv
        .get(&format!("/api/v1/cert/people/{agent_serial}"))
        .await;
    assert_eq!(got["status"], "R");

    // A revoked principal can no longer delegate.
    let da = Da::new(&alice, "bot-2", &[("db", "read")]);
    assert_error(
        &srv.post("/api/v1/certs", &da.body(&alice)).await,
        ErrorKey::PrincipalCertUntrusted,
    );

    let text = srv.people_crl_text().await;
    assert!(
        text.contains("verify OK") || text.contains("verify ok"),
        "{text}"
    );
    assert!(
        text.contains(&alice.serial) && text.contains(&agent_serial),
        "{text}"
    );
    srv.stop().await;
}

async fn revoke_by_principal_and_list_filters(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[], 5, 0)).await;
    for id in ["a1", "a2"] {
        let (s, b) = srv
            .post("/api/v1/certs", &Da::new(&alice, id, &[]).body(&alice))
            .await;
        assert_eq!(s, 200, "{b}");
    }
    let uid = alice.uid.clone();
    let (s, l) = srv
        .get(&format!(
            "/api/v1/certs?principal_uid={}&status=V",
            urlencode(&uid)
        ))
        .await;
    assert_eq!(s, 200, "{l}");
    assert_eq!(l["count"], 3, "{l}");
    let (s, r) = srv
        .post(
            "/api/v1/certs/revoke-by-principal",
            &json!({"principal_uid": uid}),
        )
        .await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["revoked_count"], 3);
    let (_, l) = srv.get("/api/v1/certs?status=R").await;
    assert_eq!(l["count"], 3);
    assert_error(
        &srv.get("/api/v1/certs?limit=abc").await,
        ErrorKey::InvalidField,
    );
    srv.stop().await;
}

async fn get_cert_as_json_pem_and_der(b: Backend) {
    let srv = TestServer::on(b).await;
    let (_, b) = srv.post("/api/v1/certs", &json!({"cn": "alice"})).await;
    let serial = b["serial_number"].as_str().unwrap();
    let path = srv.url(&format!("/api/v1/cert/people/{serial}"));
    let pem = srv
        .http
        .get(&path)
        .bearer_auth(&srv.token)
        .header("Accept", "application/x-pem-file")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(pem, b["cert_pem"].as_str().unwrap());
    let der = srv
        .http
        .get(&path)
        .bearer_auth(&srv.token)
        .header("Accept", "application/pkix-cert")
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(
        der.to_vec(),
        aic::cert::pem_decode(&pem, "CERTIFICATE").unwrap()
    );
    let (s, j) = srv.get(&format!("/api/v1/cert/people/{serial}")).await;
    assert_eq!((s, j["status"].as_str()), (200, Some("V")));
    assert_error(
        &srv.get("/api/v1/cert/people/ABCDEF").await,
        ErrorKey::NotFound,
    );
    assert_error(
        &srv.get(&format!("/api/v1/cert/nope/{serial}")).await,
        ErrorKey::CaNotFound,
    );
    srv.stop().await;
}

async fn health_version_and_metrics_are_public(b: Backend) {
    let srv = TestServer::on(b).await;
    for p in ["/healthz", "/readyz", "/api/v1/version"] {
        let r = srv.http.get(srv.url(p)).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200, "{p}");
    }
    let _ = srv.post("/api/v1/certs", &json!({"cn": "m"})).await;
    let text = srv.metrics_text().await;
    assert!(text.contains("warrant_certs_issued_total"), "{text}");
    assert!(text.contains("warrant_http_requests_total"), "{text}");
    srv.stop().await;
}

/// Every CA's remaining life is a gauge, the token key in use has its age,
/// and `/readyz` warns (still 200) once a CA is within
/// `keys.ca_expiry_warning_days` of its end.
#[tokio::test]
async fn key_lifetimes_are_gauges_and_a_ca_near_its_end_is_a_readyz_warning() {
    let srv = TestServer::start().await;
    let (s, ready) = srv.get("/readyz").await;
    assert_eq!(s, 200, "{ready}");
    assert_eq!(ready["warnings"], json!([]), "{ready}");
    let text = srv.metrics_text().await;
    let gauge = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series} in {text}"))
    };
    // init makes a 10-year People CA under a 20-year root.
    let people = gauge(r#"warrant_ca_remaining_seconds{ca="people"}"#);
    let root = gauge(r#"warrant_ca_remaining_seconds{ca="root"}"#);
    let year = 365.0 * 86_400.0;
    assert!((9.9 * year..10.1 * year).contains(&people), "{people}");
    assert!((19.9 * year..20.1 * year).contains(&root), "{root}");
    assert!(
        text.contains("warrant_token_key_signing_age_seconds{kid="),
        "{text}"
    );
    srv.stop().await;

    // Warned 11 years ahead: the People CA, not the root.
    let srv = TestServer::start_with(None, "[keys]\nca_expiry_warning_days = 4017\n").await;
    let (s, ready) = srv.get("/readyz").await;
    assert_eq!(s, 200, "{ready}");
    let warnings = ready["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{ready}");
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .starts_with("issuing CA people ends in 36"),
        "{ready}"
    );
    srv.stop().await;
}

async fn pkilint_reports_no_errors_for_issued_person_and_agent_certs(b: Backend) {
    let available = Command::new("lint_pkix_cert")
        .arg("--help")
        .output()
        .is_ok_and(|o| o.status.success());
    if !available {
        assert!(
            std::env::var_os("CI").is_none(),
            "lint_pkix_cert (pip install pkilint) missing and CI is set"
        );
        eprintln!("skipping: lint_pkix_cert not found (pip install pkilint)");
        return;
    }
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let (s, agent) = srv
        .post(
            "/api/v1/certs",
            &Da::new(&alice, "bot", &[("db", "read")]).body(&alice),
        )
        .await;
    assert_eq!(s, 200, "{agent}");
    for (name, pem) in [
        ("person", alice.cert_pem.as_str()),
        ("agent", agent["cert_pem"].as_str().unwrap()),
    ] {
        let path = write(srv.dir.path(), &format!("lint-{name}.pem"), pem);
        let (_, out) = run(Command::new("lint_pkix_cert")
            .args(["lint", "-s", "ERROR"])
            .arg(&path));
        assert!(
            out.trim().is_empty(),
            "pkilint errors for the {name} cert:\n{out}"
        );
    }
    srv.stop().await;
}

backend_matrix!(
    issues_person_cert_with_server_key_that_openssl_verifies,
    issues_person_cert_from_csr_without_key_pem,
    issues_agent_cert_with_da_v1_that_openssl_verifies,
    issues_agent_cert_with_da_v2_bound_to_csr_key,
    rejects_bad_da_signature,
    rejects_wrong_key_hash_in_principal_uid,
    rejects_principal_cert_from_foreign_ca,
    rejects_stale_and_future_da_timestamps,
    rejects_replayed_nonce,
    stale_da_does_not_burn_its_nonce,
    rejects_representative_mode_without_policy,
    rejects_capability_not_granted,
    grants_come_from_the_certificate_not_the_body,
    rejects_max_agents_exceeded,
    max_agents_holds_under_concurrent_requests,
    max_agents_holds_across_two_servers_on_one_database,
    agent_validity_is_capped_by_da_lifetime,
    malformed_json_wrong_types_and_oversize_fields_name_the_field,
    agent_request_input_errors_name_the_field,
    unauthenticated_and_underprivileged_calls_are_refused,
    login_locks_account_after_five_failures,
    revoking_a_person_cascades_to_agents_and_lands_on_the_crl,
    revoke_by_principal_and_list_filters,
    get_cert_as_json_pem_and_der,
    health_version_and_metrics_are_public,
    pkilint_reports_no_errors_for_issued_person_and_agent_certs,
);
