//! Retention by expiry and compact agent rows through the HTTP API, on
//! every backend: a dropped DER answers 410 while its metadata stays; an
//! expired certificate leaves (404), lands in the archive, and a revoked
//! unexpired one stays on the CRL.

mod common;

use common::*;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use warrant_server::error::ErrorKey;

async fn get_accept(srv: &TestServer, path: &str, accept: &str) -> (u16, Value) {
    let resp = srv
        .http
        .get(srv.url(path))
        .bearer_auth(&srv.token)
        .header("accept", accept)
        .send()
        .await
        .unwrap();
    decode(resp).await
}

async fn issue_agent(srv: &TestServer, alice: &Person, agent: &str, lifetime: i64) -> String {
    let mut da = Da::new(alice, agent, &[("db", "read")]);
    da.lifetime = lifetime;
    let (s, b) = srv.post("/api/v1/certs", &da.body(alice)).await;
    assert_eq!(s, 200, "{b}");
    assert!(
        b["cert_pem"].is_string(),
        "the answer carries the certificate"
    );
    b["serial_number"].as_str().unwrap().to_string()
}

async fn dropped_der_keeps_the_metadata_and_the_export_answers_410(b: Backend) {
    let srv = TestServer::on_with(b, "[storage]\nagent_cert_der = \"drop\"\n").await;
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let serial = issue_agent(&srv, &alice, "bot-1", 600).await;
    let path = format!("/api/v1/cert/people/{serial}");

    let (s, meta) = srv.get(&path).await;
    assert_eq!(s, 200, "{meta}");
    assert_eq!(meta["der_dropped"], json!(true));
    assert!(meta.get("cert_pem").is_none(), "{meta}");
    assert_eq!(meta["agent_id"], json!("bot-1"));
    assert_eq!(meta["principal_uid"], json!(alice.uid));
    assert_eq!(
        meta["capabilities"],
        json!([{"scheme_id": "db", "capability_id": "read"}])
    );

    for accept in ["application/pkix-cert", "application/x-pem-file"] {
        assert_error(
            &get_accept(&srv, &path, accept).await,
            ErrorKey::CertDerDropped,
        );
    }
    // Person certificates keep their DER.
    let person_path = format!("/api/v1/cert/people/{}", alice.serial);
    assert_eq!(
        get_accept(&srv, &person_path, "application/x-pem-file")
            .await
            .0,
        200
    );
    let (_, person_meta) = srv.get(&person_path).await;
    assert!(person_meta["cert_pem"].is_string(), "{person_meta}");
    assert!(person_meta.get("der_dropped").is_none(), "{person_meta}");
    srv.stop().await;
}

async fn kept_der_is_exported_as_before(b: Backend) {
    let srv = TestServer::on(b).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let serial = issue_agent(&srv, &alice, "bot-1", 600).await;
    let path = format!("/api/v1/cert/people/{serial}");
    assert_eq!(
        get_accept(&srv, &path, "application/pkix-cert").await.0,
        200
    );
    let (_, meta) = srv.get(&path).await;
    assert!(meta["cert_pem"].is_string(), "{meta}");
    srv.stop().await;
}

const RETENTION: &str = "[storage]\nagent_cert_der = \"drop\"\n\
    [retention]\nexpired_grace = \"1s\"\ninterval = \"100ms\"\narchive = \"file\"\n";

async fn expired_certificates_leave_into_the_archive_and_revoked_unexpired_stay_on_the_crl(
    b: Backend,
) {
    let srv = TestServer::on_with(b, RETENTION).await;
    let alice = srv.person("alice", grants(&[("db", "read")], 5, 0)).await;
    let short = issue_agent(&srv, &alice, "bot-short", 2).await;
    let kept = issue_agent(&srv, &alice, "bot-kept", 600).await;
    let (s, body) = srv
        .post(
            &format!("/api/v1/cert/people/{kept}/revoke"),
            &json!({"reason": "keyCompromise"}),
        )
        .await;
    assert_eq!(s, 200, "{body}");

    // The short one expires in 2 s and leaves one grace later; a pruned
    // serial is unknown (404), as if never issued.
    let deadline = Instant::now() + Duration::from_secs(30);
    let short_path = format!("/api/v1/cert/people/{short}");
    loop {
        let got = srv.get(&short_path).await;
        if got.0 == 404 {
            assert_error(&got, ErrorKey::NotFound);
            break;
        }
        assert_eq!(got.0, 200, "{}", got.1);
        assert!(
            Instant::now() < deadline,
            "the expired certificate was never pruned"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(srv.get(&format!("/api/v1/cert/people/{kept}")).await.0, 200);
    assert_eq!(
        srv.get(&format!("/api/v1/cert/people/{}", alice.serial))
            .await
            .0,
        200
    );

    let metrics = srv.metrics_text().await;
    let counter = |name: &str| -> u64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(0, |v| v as u64)
    };
    assert!(counter("warrant_retention_pruned_total") >= 1, "{metrics}");
    assert!(
        counter("warrant_retention_archived_total") >= 1,
        "{metrics}"
    );

    // The archive holds the pruned row, with its capabilities, without DER.
    let archive = warrant_store::Archive::open(&srv.dir.path().join("archive")).unwrap();
    let mut lines = Vec::new();
    for file in archive.day_files().unwrap() {
        lines.extend(archive.read_day(&file).unwrap());
    }
    let line = lines
        .iter()
        .find(|l| l.serial == short)
        .unwrap_or_else(|| panic!("{short} not archived: {lines:?}"));
    assert_eq!(line.agent_id.as_deref(), Some("bot-short"));
    assert_eq!(line.principal_uid.as_deref(), Some(alice.uid.as_str()));
    assert_eq!(line.der, None);
    assert!(line.capabilities.as_deref().unwrap().contains("\"read\""));
    assert!(
        lines.iter().all(|l| l.serial != kept),
        "an unexpired row was archived"
    );

    // The revoked, unexpired certificate is still on a verified CRL.
    let text = srv.people_crl_text().await;
    assert!(text.contains(&kept), "{text}");
    srv.stop().await;
}

#[test]
fn rejects_unknown_storage_and_archive_modes() {
    let dir = tempfile::tempdir().unwrap();
    let err = warrant_server::config::LoadedConfig::from_parts(
        dir.path(),
        Some("[storage]\nagent_cert_der = \"shrink\"\n"),
        &Default::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("storage.agent_cert_der"), "{err}");
    let err = warrant_server::config::LoadedConfig::from_parts(
        dir.path(),
        Some("[retention]\narchive = \"s3\"\n"),
        &Default::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("retention.archive"), "{err}");
}

backend_matrix!(
    dropped_der_keeps_the_metadata_and_the_export_answers_410,
    kept_der_is_exported_as_before,
    expired_certificates_leave_into_the_archive_and_revoked_unexpired_stay_on_the_crl,
);
