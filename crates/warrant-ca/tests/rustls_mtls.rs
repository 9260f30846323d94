//! An issued agent certificate completes a real rustls mTLS handshake as the
//! client certificate, against a rustls server that trusts only the Root and
//! presents a `tls-server` leaf from the same CA (in-memory transport).

mod common;

use std::sync::Arc;
use std::time::SystemTime;

use common::*;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};
use warrant_ca::*;

fn private_key(key: &GeneratedKey) -> PrivateKeyDer<'static> {
    let (_, der) = der_from_pem(&key.pkcs8_pem);
    PrivateKeyDer::Pkcs8(der.into())
}

fn der_from_pem(pem: &str) -> (String, Vec<u8>) {
    use base64::Engine;
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body.as_bytes())
        .unwrap();
    (body, der)
}

fn handshake(
    client_cert: &IssuedCert,
    client_key: &GeneratedKey,
    fx: &Fixture,
) -> Result<(), rustls::Error> {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from(fx.hierarchy.root_cert_der().to_vec()))
        .unwrap();
    let roots = Arc::new(roots);
    let people = CertificateDer::from(fx.people().cert_der().to_vec());

    let server_key = generate_key(KeyType::EcdsaP256).unwrap();
    let subject = Subject::parse("/CN=localhost").unwrap();
    let now = SystemTime::now();
    let server_cert = issue_leaf(
        fx.people(),
        &LeafSpec {
            profile: Profile::TlsServer,
            subject: &subject,
            san: &[],
            spki_der: &server_key.spki_der,
            not_before: now,
            not_after: now + HOUR,
            extensions: &[],
            urls: None,
        },
    )
    .unwrap();

    let verifier = WebPkiClientVerifier::builder(Arc::clone(&roots))
        .build()
        .unwrap();
    let server_config = ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![
                CertificateDer::from(server_cert.der.clone()),
                people.clone(),
            ],
            private_key(&server_key),
        )
        .unwrap();
    let client_config = ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![CertificateDer::from(client_cert.der.clone()), people],
            private_key(client_key),
        )
        .unwrap();

    let mut client = ClientConnection::new(
        Arc::new(client_config),
        ServerName::try_from("localhost").unwrap(),
    )
    .unwrap();
    let mut server = ServerConnection::new(Arc::new(server_config)).unwrap();
    for _ in 0..20 {
        let mut buf = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut buf).unwrap();
        }
        if !buf.is_empty() {
            server.read_tls(&mut buf.as_slice()).unwrap();
            server.process_new_packets()?;
        }
        let mut buf = Vec::new();
        while server.wants_write() {
            server.write_tls(&mut buf).unwrap();
        }
        if !buf.is_empty() {
            client.read_tls(&mut buf.as_slice()).unwrap();
            client.process_new_packets()?;
        }
        if !client.is_handshaking() && !server.is_handshaking() {
            let presented = server.peer_certificates().unwrap();
            assert_eq!(presented[0].as_ref(), client_cert.der.as_slice());
            return Ok(());
        }
    }
    panic!("handshake did not finish");
}

#[test]
fn agent_cert_completes_rustls_mtls_handshake() {
    let fx = Fixture::new();
    for key_type in [
        KeyType::EcdsaP256,
        KeyType::EcdsaP384,
        KeyType::Ed25519,
        KeyType::Rsa2048,
    ] {
        let key = generate_key(key_type).unwrap();
        let cert = fx.agent(&key);
        handshake(&cert, &key, &fx).unwrap_or_else(|e| panic!("{key_type}: {e}"));
    }
}

#[test]
fn person_cert_completes_rustls_mtls_handshake() {
    let fx = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    handshake(&fx.person(&key), &key, &fx).unwrap();
}

#[test]
fn rustls_rejects_client_cert_from_a_foreign_hierarchy() {
    let fx = Fixture::new();
    let foreign = Fixture::new();
    let key = generate_key(KeyType::EcdsaP256).unwrap();
    let cert = foreign.agent(&key);
    assert!(handshake(&cert, &key, &fx).is_err());
}
