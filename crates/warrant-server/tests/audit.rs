//! The audit log through the API, on each backend: a scripted session
//! leaves every event it should, each a leaf of the transparency log with
//! an inclusion proof, checkpoints and consistency proofs verify with the
//! log's key, only `log:read` reads events and inclusion proofs; and person
//! renewal over mTLS (same key, new key, the line's total lifetime, a
//! revoked certificate refused and logged).

mod common;

use common::*;
use serde_json::{Value, json};
use warrant_server::ErrorKey;

backend_matrix!(
    a_scripted_session_leaves_every_audit_row,
    rejects_audit_reads_without_log_read,
    rejects_a_malformed_audit_filter_naming_the_field,
    a_person_renews_with_the_same_key_over_mtls,
    a_person_rotates_its_key_and_the_old_certificate_is_superseded,
    rejects_a_renewal_past_the_lines_total_lifetime,
    rejects_renewal_without_the_certificate_over_mtls,
    rejects_a_renewal_with_a_revoked_certificate_and_logs_it,
    an_issuer_token_asks_for_agent_certificates_only,
    checkpoints_and_proofs_verify_with_the_log_key,
    rejects_inclusion_proofs_without_log_read,
);

const TLS: &str = "[tls]\nlisten = \"127.0.0.1:0\"\nclient_auth = \"optional\"\n";

async fn audit(srv: &TestServer, query: &str) -> Vec<Value> {
    let (s, b) = srv.get(&format!("/api/v1/audit?limit=1000{query}")).await;
    assert_eq!(s, 200, "{b}");
    b["events"].as_array().unwrap().clone()
}

fn events(rows: &[Value]) -> Vec<String> {
    let mut e: Vec<String> = rows
        .iter()
        .map(|r| r["event"].as_str().unwrap().to_string())
        .collect();
    e.sort();
    e
}

async fn a_scripted_session_leaves_every_audit_row(b: Backend) {
    let srv = TestServer::on(b).await;
    // A failed login, a token, a user and its change.
    let (s, _) = srv
        .post(
            "/api/v1/users/login",
            &json!({"username": "admin", "password": "wrong password"}),
        )
        .await;
    assert_eq!(s, 401);
    let (s, tok) = srv
        .post("/api/v1/tokens", &json!({"name": "ci", "expires_in": 600}))
        .await;
    assert_eq!(s, 200, "{tok}");
    let (s, user) = srv
        .post(
            "/api/v1/users",
            &json!({"username": "olga", "password": "long enough pw", "role": "operator"}),
        )
        .await;
    assert_eq!(s, 200, "{user}");
    let uid = user["id"].as_i64().unwrap();
    let resp = srv
        .http
        .patch(srv.url(&format!("/api/v1/users/{uid}")))
        .bearer_auth(&srv.token)
        .json(&json!({"role": "auditor"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // A person, an agent, a refused replay of the same DA.
    let alice = srv.person("alice", grants(&[("db", "read")], 3, 0)).await;
    let da = Da::new(&alice, "bot", &[("db", "read")]);
    let (s, agent) = srv.post("/api/v1/certs", &da.body(&alice)).await;
    assert_eq!(s, 200, "{agent}");
    let replay = srv.post("/api/v1/certs", &da.body(&alice)).await;
    assert_error(&replay, ErrorKey::DaNonceReplayed);
    // Revoke the person, with the cascade to the agent; delete the token.
    let (s, rev) = srv
        .post(
            &format!("/api/v1/cert/people/{}/revoke", alice.serial),
            &json!({"reason": "keyCompromise"}),
        )
        .await;
    assert_eq!((s, rev["cascade_count"].as_u64()), (200, Some(1)), "{rev}");
    let resp = srv
        .http
        .delete(srv.url(&format!("/api/v1/tokens/{}", tok["id"])))
        .bearer_auth(&srv.token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);

    // The refusal is queued without waiting: give it a moment.
    let mut rows = Vec::new();
    for _ in 0..50 {
        rows = audit(&srv, "").await;
        if rows.iter().any(|r| r["event"] == "refuse") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        events(&rows),
        [
            "issue",
            "issue",
            "login",
            "login_failed",
            "refuse",
            "revoke",
            "token_create",
            "token_delete",
            "user_create",
            "user_update",
        ],
        "{rows:#?}"
    );
    let agent_issue = rows
        .iter()
        .find(|r| r["event"] == "issue" && r["agent_id"] == "bot")
        .unwrap();
    assert_eq!(agent_issue["principal_uid"], alice.uid.as_str());
    assert_eq!(agent_issue["serial"], agent["serial_number"]);
    assert_eq!(agent_issue["actor"], "admin");
    assert_eq!(agent_issue["detail"]["profile"], "agent-proxy");
    let refusal = rows.iter().find(|r| r["event"] == "refuse").unwrap();
    assert_eq!(refusal["detail"]["error"], "api.da_nonce_replayed");
    assert_eq!(refusal["agent_id"], "bot");
    let revoke = rows.iter().find(|r| r["event"] == "revoke").unwrap();
    assert_eq!(revoke["detail"]["cascade_count"], 1);
    assert_eq!(revoke["serial"], alice.serial.as_str());

    // Filters.
    let by_agent = audit(&srv, "&agent=bot").await;
    assert_eq!(events(&by_agent), ["issue", "refuse"]);
    let refusals = audit(
        &srv,
        &format!("&event=refuse&principal={}", urlencode(&alice.uid)),
    )
    .await;
    assert_eq!(refusals.len(), 1);
    // Every event is a leaf: a tree, an index, and an inclusion proof to a
    // checkpoint signed by the log's key.
    let listing = checkpoints(&srv).await;
    let key = warrant_tlog::NoteVerifier::parse(listing["key"].as_str().unwrap()).unwrap();
    for r in &rows {
        let q = format!("tree={}&index={}", r["tree"].as_str().unwrap(), r["index"]);
        check_inclusion(&srv, &key, &q).await;
    }
    let by_serial = format!("serial={}", agent["serial_number"].as_str().unwrap());
    let proof = check_inclusion(&srv, &key, &by_serial).await;
    assert_eq!(proof["entry"]["kind"], "cert");
    assert_eq!(proof["entry"]["agent_id"], "bot");
    srv.stop().await;
}

async fn checkpoints(srv: &TestServer) -> Value {
    let (s, body) = srv.get_as("", "/api/v1/audit/checkpoint?fresh=true").await;
    assert_eq!(s, 200, "{body}");
    body
}

/// Fetches an inclusion proof and checks it with the RFC 9162 algorithm
/// against the checkpoint that came with it, opened with the log's key.
async fn check_inclusion(srv: &TestServer, key: &warrant_tlog::NoteVerifier, query: &str) -> Value {
    let (s, p) = srv
        .get(&format!("/api/v1/audit/proof/inclusion?{query}"))
        .await;
    assert_eq!(s, 200, "{query}: {p}");
    let cp = warrant_tlog::Checkpoint::open(p["checkpoint"].as_str().unwrap(), key).unwrap();
    assert_eq!(cp.size, p["size"].as_u64().unwrap());
    assert_eq!(cp.origin, p["origin"].as_str().unwrap());
    let leaf = b64(&p["leaf"]);
    let proof: Vec<[u8; 32]> = p["proof"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| b64(h).try_into().unwrap())
        .collect();
    warrant_tlog::verify_inclusion(
        p["index"].as_u64().unwrap(),
        cp.size,
        &warrant_tlog::leaf_hash(&leaf),
        &proof,
        &cp.root,
    )
    .unwrap_or_else(|e| panic!("{query}: {e:?}"));
    p
}

fn b64(v: &Value) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(v.as_str().unwrap())
        .unwrap()
}

async fn checkpoints_and_proofs_verify_with_the_log_key(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 10, 0)).await;
    let first = checkpoints(&srv).await;
    let key = warrant_tlog::NoteVerifier::parse(first["key"].as_str().unwrap()).unwrap();
    // Every checkpoint listed is signed by the key and names its tree.
    let list = first["checkpoints"].as_array().unwrap();
    assert!(!list.is_empty(), "{first}");
    for c in list {
        let cp = warrant_tlog::Checkpoint::open(c["checkpoint"].as_str().unwrap(), &key).unwrap();
        assert_eq!(
            cp.origin,
            format!(
                "{}/{}",
                first["log"].as_str().unwrap(),
                c["tree"].as_str().unwrap()
            )
        );
        assert_eq!(cp.size, c["size"].as_u64().unwrap());
        // One tree, as the signed note itself.
        let (s, text) = srv
            .get_text(&format!(
                "/api/v1/audit/checkpoint?tree={}",
                c["tree"].as_str().unwrap()
            ))
            .await;
        assert_eq!((s, text.as_str()), (200, c["checkpoint"].as_str().unwrap()));
    }
    let proof = check_inclusion(&srv, &key, &format!("serial={}", alice.serial)).await;
    let tree = proof["tree"].as_str().unwrap().to_string();
    let before: Vec<(String, u64, [u8; 32])> = checkpoints(&srv).await["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let cp =
                warrant_tlog::Checkpoint::open(c["checkpoint"].as_str().unwrap(), &key).unwrap();
            (c["tree"].as_str().unwrap().to_string(), cp.size, cp.root)
        })
        .collect();
    // More leaves (on the server databases, perhaps in several trees), then
    // a consistency proof from each tree's old size to its new one.
    for i in 0..6 {
        let (s, a) = srv
            .post(
                "/api/v1/certs",
                &Da::new(&alice, &format!("bot-{i}"), &[("db", "read")]).body(&alice),
            )
            .await;
        assert_eq!(s, 200, "{a}");
    }
    let mut grew = 0;
    for (t, size, root) in before.iter().filter(|(_, size, _)| *size > 0) {
        let (s, c) = srv
            .get_as(
                "",
                &format!("/api/v1/audit/proof/consistency?tree={t}&from={size}"),
            )
            .await;
        assert_eq!(s, 200, "{c}");
        let new = warrant_tlog::Checkpoint::open(c["checkpoint"].as_str().unwrap(), &key).unwrap();
        let hashes: Vec<[u8; 32]> = c["proof"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| b64(h).try_into().unwrap())
            .collect();
        warrant_tlog::verify_consistency(*size, new.size, root, &new.root, &hashes).unwrap();
        if new.size > *size {
            grew += 1;
        }
    }
    assert!(grew > 0, "no tree grew");
    // Bad requests name their field.
    let got = srv
        .get(&format!(
            "/api/v1/audit/proof/consistency?tree={tree}&from=0"
        ))
        .await;
    assert_eq!(got.0, 400, "{}", got.1);
    let got = srv.get("/api/v1/audit/proof/inclusion?serial=00FF").await;
    assert_error(&got, ErrorKey::NotFound);
    let got = srv
        .get(&format!(
            "/api/v1/audit/proof/inclusion?tree={tree}&index=x"
        ))
        .await;
    assert_eq!(got.0, 400, "{}", got.1);
    srv.stop().await;
}

async fn rejects_inclusion_proofs_without_log_read(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 3, 0)).await;
    let operator = srv.user_token("op", "operator").await;
    let q = format!("/api/v1/audit/proof/inclusion?serial={}", alice.serial);
    let got = srv.get_as(&operator, &q).await;
    assert_error(&got, ErrorKey::Forbidden);
    let got = srv.get_as("", &q).await;
    assert_error(&got, ErrorKey::Unauthorized);
    let auditor = srv.user_token("aud", "auditor").await;
    let (s, body) = srv.get_as(&auditor, &q).await;
    assert_eq!(s, 200, "{body}");
    srv.stop().await;
}

async fn rejects_audit_reads_without_log_read(b: Backend) {
    let srv = TestServer::on(b).await;
    let operator = srv.user_token("op", "operator").await;
    // An auditor may read the log but not issue: that refusal is in the log.
    let auditor = srv.user_token("aud", "auditor").await;
    let got = srv
        .post_as(&auditor, "/api/v1/certs", &json!({"cn": "x"}))
        .await;
    assert_error(&got, ErrorKey::Forbidden);
    let mut refused = Vec::new();
    for _ in 0..50 {
        refused = audit(&srv, "&event=refuse").await;
        if !refused.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["actor"], "aud");
    assert_eq!(refused[0]["detail"]["error"], "api.forbidden");
    let (s, body) = srv.get_as(&operator, "/api/v1/audit").await;
    assert_error(&(s, body), ErrorKey::Forbidden);
    let (s, body) = srv.get_as(&auditor, "/api/v1/audit").await;
    assert_eq!(s, 200, "{body}");
    let (s, body) = srv.get_as("", "/api/v1/audit").await;
    assert_error(&(s, body), ErrorKey::Unauthorized);
    srv.stop().await;
}

async fn rejects_a_malformed_audit_filter_naming_the_field(b: Backend) {
    let srv = TestServer::on(b).await;
    for (q, field) in [
        ("since=yesterday", "since"),
        ("until=2026-13-01T00:00:00Z", "until"),
        ("event=coffee", "event"),
        ("limit=-1", "limit"),
    ] {
        let got = srv.get(&format!("/api/v1/audit?{q}")).await;
        assert_error(&got, ErrorKey::InvalidField);
        assert!(
            got.1["detail"].as_str().unwrap().starts_with(field),
            "{q}: {}",
            got.1
        );
    }
    srv.stop().await;
}

/// A client presenting `cert`/`key` over the TLS listener, and its base URL.
fn over_tls(srv: &TestServer, cert_pem: &str, key_pem: &str) -> (reqwest::Client, String) {
    let tls = srv.server.as_ref().unwrap().tls_addr.unwrap();
    (
        mtls_client(srv, cert_pem, key_pem),
        format!("https://localhost:{}", tls.port()),
    )
}

async fn renew(client: &reqwest::Client, base: &str, body: &Value) -> (u16, Value) {
    decode(
        client
            .post(format!("{base}/api/v1/certs/renew"))
            .json(body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

async fn a_person_renews_with_the_same_key_over_mtls(b: Backend) {
    let srv = TestServer::on_with(b, TLS).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 3, 0)).await;
    let (client, base) = over_tls(&srv, &alice.cert_pem, &alice.key_pem);
    let (s, renewed) = renew(&client, &base, &json!({})).await;
    assert_eq!(s, 200, "{renewed}");
    assert!(
        renewed.get("key_pem").is_none(),
        "the key never left the person"
    );
    assert_eq!(
        renewed["principal_uid"],
        alice.uid.as_str(),
        "same key, same UID"
    );
    assert_ne!(renewed["serial_number"], alice.serial.as_str());
    let new_pem = renewed["cert_pem"].as_str().unwrap();
    openssl_verify(&srv, new_pem, "renewed");
    assert_eq!(spki_of_cert_pem(new_pem), spki_of_cert_pem(&alice.cert_pem));
    // Same subject and PA, byte for byte.
    let subject = |pem: &str| {
        let d = srv.dir.path().join("s.pem");
        std::fs::write(&d, pem).unwrap();
        run(std::process::Command::new("openssl")
            .args([
                "x509",
                "-noout",
                "-subject",
                "-ext",
                "1.3.6.1.4.1.66257.1.2",
                "-in",
            ])
            .arg(&d))
        .1
    };
    assert_eq!(subject(new_pem), subject(&alice.cert_pem));
    // The old certificate stays valid (nothing was superseded)...
    let (s, old) = srv
        .get(&format!("/api/v1/cert/people/{}", alice.serial))
        .await;
    assert_eq!((s, old["status"].as_str()), (200, Some("V")), "{old}");
    // ...and the renewed one delegates: an agent with a DA of the same key.
    let renewed_person = Person {
        cert_pem: new_pem.to_string(),
        serial: renewed["serial_number"].as_str().unwrap().to_string(),
        ..alice.clone()
    };
    let (s, agent) = srv
        .post(
            "/api/v1/certs",
            &Da::new(&renewed_person, "bot", &[("db", "read")]).body(&renewed_person),
        )
        .await;
    assert_eq!(s, 200, "{agent}");
    let rows = audit(&srv, "&event=renew").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["detail"]["rotated"], false);
    assert_eq!(rows[0]["detail"]["previous_serial"], alice.serial.as_str());
    srv.stop().await;
}

async fn a_person_rotates_its_key_and_the_old_certificate_is_superseded(b: Backend) {
    let srv = TestServer::on_with(b, TLS).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 3, 0)).await;
    let (client, base) = over_tls(&srv, &alice.cert_pem, &alice.key_pem);
    let (new_key, csr) = openssl_csr(srv.dir.path(), "alice-next");
    let (s, renewed) = renew(&client, &base, &json!({"csr_pem": csr})).await;
    assert_eq!(s, 200, "{renewed}");
    let new_pem = renewed["cert_pem"].as_str().unwrap();
    openssl_verify(&srv, new_pem, "rotated");
    let new_uid = renewed["principal_uid"].as_str().unwrap();
    assert_ne!(new_uid, alice.uid, "a new key, a new key hash");
    assert_eq!(
        new_uid.rsplit_once(':').unwrap().0,
        alice.uid.rsplit_once(':').unwrap().0,
        "same realm and identifier"
    );
    // The old certificate is on the CRL as superseded.
    let (s, old) = srv
        .get(&format!("/api/v1/cert/people/{}", alice.serial))
        .await;
    assert_eq!(s, 200);
    assert_eq!(old["status"], "R");
    assert_eq!(old["revocation_reason"], "superseded");
    let crl = srv.people_crl_text().await;
    assert!(crl.contains(&alice.serial), "{crl}");
    assert!(crl.contains("Superseded"), "{crl}");
    // The old certificate no longer opens a session; the new one does.
    let (s, _) = renew(&client, &base, &json!({})).await;
    assert_eq!(s, 401);
    let (client2, _) = over_tls(&srv, new_pem, &new_key);
    let (s, info) = decode(
        client2
            .get(format!("{base}/api/v1/users/info"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((s, info["role"].as_str()), (200, Some("certificate")));
    let rows = audit(&srv, "&event=renew").await;
    assert_eq!(rows[0]["detail"]["rotated"], true);
    srv.stop().await;
}

async fn rejects_a_renewal_past_the_lines_total_lifetime(b: Backend) {
    // A line may last 1 day; alice's first certificate asks for 2.
    let srv =
        TestServer::on_with(b, &format!("{TLS}[issuance]\nrenewal_max_total_days = 1\n")).await;
    let (s, body) = srv
        .post(
            "/api/v1/certs",
            &json!({"cn": "alice", "validity": 2, "principal_authorization": grants(&[("db", "read")], 3, 0)}),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    let alice = Person::from_response(&body);
    let (client, base) = over_tls(&srv, &alice.cert_pem, &alice.key_pem);
    let (s, renewed) = renew(&client, &base, &json!({})).await;
    assert_eq!(s, 200, "{renewed}");
    // Capped at the line's end: one day after alice's first certificate.
    let not_after = renewed["not_after"].as_str().unwrap();
    let line_end = aic::time::parse_rfc3339(body["not_before"].as_str().unwrap()).unwrap() + 86_400;
    assert_eq!(aic::time::parse_rfc3339(not_after).unwrap(), line_end);
    // Renewing the renewal keeps the line's start: still capped at the same end.
    let (client2, _) = over_tls(&srv, renewed["cert_pem"].as_str().unwrap(), &alice.key_pem);
    let (s, again) = renew(&client2, &base, &json!({})).await;
    assert_eq!(s, 200, "{again}");
    assert_eq!(
        aic::time::parse_rfc3339(again["not_after"].as_str().unwrap()).unwrap(),
        line_end
    );
    srv.stop().await;
}

async fn rejects_renewal_without_the_certificate_over_mtls(b: Backend) {
    let srv = TestServer::on_with(b, TLS).await;
    // A token is not a certificate.
    let got = srv.post("/api/v1/certs/renew", &json!({})).await;
    assert_error(&got, ErrorKey::Forbidden);
    // An agent certificate renews with a new DA, not here.
    let alice = srv.person("alice", grants(&[("db", "read")], 3, 0)).await;
    let (s, agent) = srv
        .post(
            "/api/v1/certs",
            &Da::new(&alice, "bot", &[("db", "read")]).body(&alice),
        )
        .await;
    assert_eq!(s, 200, "{agent}");
    let (client, base) = over_tls(
        &srv,
        agent["cert_pem"].as_str().unwrap(),
        agent["key_pem"].as_str().unwrap(),
    );
    let got = renew(&client, &base, &json!({})).await;
    assert_error(&got, ErrorKey::Forbidden);
    // Unknown fields are refused, naming the field.
    let (client, base) = over_tls(&srv, &alice.cert_pem, &alice.key_pem);
    let got = renew(&client, &base, &json!({"validity": 900})).await;
    assert_eq!(got.0, 400, "{}", got.1);
    srv.stop().await;
}

async fn rejects_a_renewal_with_a_revoked_certificate_and_logs_it(b: Backend) {
    let srv = TestServer::on_with(b, TLS).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 3, 0)).await;
    let (s, rev) = srv
        .post(
            &format!("/api/v1/cert/people/{}/revoke", alice.serial),
            &json!({"reason": "keyCompromise"}),
        )
        .await;
    assert_eq!(s, 200, "{rev}");
    let (client, base) = over_tls(&srv, &alice.cert_pem, &alice.key_pem);
    let got = renew(&client, &base, &json!({})).await;
    assert_error(&got, ErrorKey::Unauthorized);
    let mut refused = Vec::new();
    for _ in 0..50 {
        refused = audit(&srv, "&event=refuse").await;
        if !refused.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert_eq!(refused[0]["actor"], format!("certificate:{}", alice.serial));
    assert_eq!(refused[0]["detail"]["error"], "api.unauthorized");
    assert_eq!(refused[0]["detail"]["profile"], "renew");
    srv.stop().await;
}

async fn an_issuer_token_asks_for_agent_certificates_only(b: Backend) {
    let srv = TestServer::on(b).await;
    let issuer = srv.user_token("fleet", "issuer").await;
    let alice = srv.person("alice", grants(&[("db", "read")], 3, 0)).await;
    let (s, agent) = srv
        .post_as(
            &issuer,
            "/api/v1/certs",
            &Da::new(&alice, "bot", &[("db", "read")]).body(&alice),
        )
        .await;
    assert_eq!(s, 200, "{agent}");
    let got = srv
        .post_as(&issuer, "/api/v1/certs", &json!({"cn": "mallory"}))
        .await;
    assert_error(&got, ErrorKey::Forbidden);
    let got = srv.get_as(&issuer, "/api/v1/certs").await;
    assert_error(&got, ErrorKey::Forbidden);
    let got = srv
        .post_as(
            &issuer,
            &format!("/api/v1/cert/people/{}/revoke", alice.serial),
            &json!({"reason": "keyCompromise"}),
        )
        .await;
    assert_error(&got, ErrorKey::Forbidden);
    srv.stop().await;
}
