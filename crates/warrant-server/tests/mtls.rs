//! An issued agent certificate completes a real rustls mTLS handshake as a
//! client certificate against a server that trusts only the Root; callers
//! of the TLS listener are identified by their certificates. On each backend.

mod common;

use common::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::json;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn chain(leaf_pem: &str, srv: &TestServer) -> Vec<CertificateDer<'static>> {
    vec![
        CertificateDer::from_pem_slice(leaf_pem.as_bytes()).unwrap(),
        CertificateDer::from_pem_slice(srv.people_pem().as_bytes()).unwrap(),
    ]
}

async fn agent_cert_completes_rustls_mtls_handshake_against_root_trusting_server(b: Backend) {
    let srv = TestServer::on(b).await;
    let (s, server_cert) = srv
        .post(
            "/api/v1/certs",
            &json!({"cn": "localhost", "profile": "tls-server", "san": "DNS:localhost"}),
        )
        .await;
    assert_eq!(s, 200, "{server_cert}");
    let alice = srv
        .person(
            "alice",
            json!({"grants": [{"scheme_id": "db", "capability_id": "read"}], "delegation_policy": {"max_agents": 2}}),
        )
        .await;
    let (s, agent) = srv
        .post(
            "/api/v1/certs",
            &Da::new(&alice, "bot", &[("db", "read")]).body(&alice),
        )
        .await;
    assert_eq!(s, 200, "{agent}");

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(srv.root_pem().as_bytes()).unwrap())
        .unwrap();
    let roots = Arc::new(roots);

    let verifier = rustls::server::WebPkiClientVerifier::builder(roots.clone())
        .build()
        .unwrap();
    let server_config = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            chain(server_cert["cert_pem"].as_str().unwrap(), &srv),
            PrivateKeyDer::from_pem_slice(server_cert["key_pem"].as_str().unwrap().as_bytes())
                .unwrap(),
        )
        .unwrap();
    let client_config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            chain(agent["cert_pem"].as_str().unwrap(), &srv),
            PrivateKeyDer::from_pem_slice(agent["key_pem"].as_str().unwrap().as_bytes()).unwrap(),
        )
        .unwrap();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut tls = acceptor.accept(tcp).await.unwrap();
        let peer = tls.get_ref().1.peer_certificates().unwrap()[0]
            .as_ref()
            .to_vec();
        let mut buf = [0u8; 5];
        tls.read_exact(&mut buf).await.unwrap();
        tls.write_all(b"world").await.unwrap();
        tls.shutdown().await.ok();
        peer
    });
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    tls.write_all(b"hello").await.unwrap();
    let mut buf = [0u8; 5];
    tls.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"world");
    let peer = server.await.unwrap();
    let agent_der =
        aic::cert::pem_decode(agent["cert_pem"].as_str().unwrap(), "CERTIFICATE").unwrap();
    assert_eq!(peer, agent_der, "the server saw the agent certificate");
    srv.stop().await;
}

async fn mtls_callers_are_identified_by_their_certificate(b: Backend) {
    let srv = TestServer::on_with(
        b,
        "[tls]\nlisten = \"127.0.0.1:0\"\nclient_auth = \"optional\"\n",
    )
    .await;
    let tls = srv.server.as_ref().unwrap().tls_addr.unwrap();
    let base = format!("https://localhost:{}", tls.port());
    let alice = srv
        .person("alice", json!({"grants": [{"scheme_id": "db", "capability_id": "read"}], "delegation_policy": {"max_agents": 3}}))
        .await;

    // A person certificate without a matching user: a certificate holder.
    let client = mtls_client(&srv, &alice.cert_pem, &alice.key_pem);
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
    // It may delegate to an agent with its own certificate (no user_cert_pem needed)...
    let mut body = Da::new(&alice, "bot", &[("db", "read")]).body(&alice);
    body.as_object_mut().unwrap().remove("user_cert_pem");
    let (s, agent) = decode(
        client
            .post(format!("{base}/api/v1/certs"))
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 200, "{agent}");
    // ...but not issue person certificates or read the inventory.
    let r = decode(
        client
            .post(format!("{base}/api/v1/certs"))
            .json(&json!({"cn": "x"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_error(&r, warrant_server::ErrorKey::Forbidden);

    // An agent certificate may not delegate further.
    let agent_client = mtls_client(
        &srv,
        agent["cert_pem"].as_str().unwrap(),
        agent["key_pem"].as_str().unwrap(),
    );
    let body = Da::new(&alice, "bot-2", &[("db", "read")]).body(&alice);
    let r = decode(
        agent_client
            .post(format!("{base}/api/v1/certs"))
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_error(&r, warrant_server::ErrorKey::Forbidden);

    // Without a client certificate the TLS listener still needs a token.
    let anon = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(srv.root_pem().as_bytes()).unwrap()])
        .build()
        .unwrap();
    let r = decode(
        anon.get(format!("{base}/api/v1/users/info"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_error(&r, warrant_server::ErrorKey::Unauthorized);
    srv.stop().await;
}

backend_matrix!(
    agent_cert_completes_rustls_mtls_handshake_against_root_trusting_server,
    mtls_callers_are_identified_by_their_certificate,
);
