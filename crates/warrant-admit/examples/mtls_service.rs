//! A service that admits agents in process: rustls terminates mTLS (client
//! certificates optional at the handshake, so that a request without one
//! gets admission's 401), each connection's verified peer certificate and
//! address go into its requests' extensions, and `AdmitLayer` decides
//! before the axum router sees the request. `tests/tower_layer.rs` runs it.
//!
//!     cargo run -p warrant-admit --example mtls_service -- \
//!         SERVER_CERT.pem SERVER_KEY.pem TRUST.pem RULES.txt
//!
//! (Revocation is left empty here and confirmed as fresh once a second; a
//! real service polls Warrant's CRLs as `warrant admit` does.)

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::Extension;
use axum::routing::get;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tower::ServiceExt;
use warrant_admit::engine::Identity;
use warrant_admit::layer::{AdmitLayer, PeerAddr, PeerCertificate};
use warrant_admit::live::Admission;

/// The protected routes: they only run for admitted agents.
fn app(admission: Admission) -> Router {
    Router::new()
        .route(
            "/v1/rows/{id}",
            get(|Extension(agent): Extension<Identity>| async move {
                format!(
                    "rows for {} on behalf of {}\n",
                    agent.agent_id, agent.principal
                )
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .layer(AdmitLayer::new(admission))
}

/// rustls: the server's certificate; client certificates verified against
/// the trust bundle when presented.
pub fn tls_config(
    cert_pem: &[u8],
    key_pem: &[u8],
    trust_pem: &[u8],
) -> Result<rustls::ServerConfig, Box<dyn std::error::Error + Send + Sync>> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let chain = CertificateDer::pem_slice_iter(cert_pem).collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(key_pem)?;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(trust_pem) {
        roots.add(c?)?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
        .allow_unauthenticated()
        .build()?;
    Ok(rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)?)
}

/// Serves `app(admission)` over mTLS on `listener` until the task ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: rustls::ServerConfig,
    admission: Admission,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let app = app(admission);
    loop {
        let Ok((tcp, peer)) = listener.accept().await else {
            continue;
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let cert = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| PeerCertificate(Arc::new(c.to_vec())));
            let service = hyper::service::service_fn(
                move |mut req: hyper::Request<hyper::body::Incoming>| {
                    if let Some(c) = &cert {
                        req.extensions_mut().insert(c.clone());
                    }
                    req.extensions_mut().insert(PeerAddr(peer));
                    app.clone().oneshot(req.map(axum::body::Body::new))
                },
            );
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [cert, key, trust, rules] = args.as_slice() else {
        return Err("usage: mtls_service SERVER_CERT KEY TRUST RULES".into());
    };
    let trust_pem = std::fs::read(trust)?;
    let engine = warrant_admit::engine::Engine::new(
        warrant_ca::TrustBundle::from_pem(std::str::from_utf8(&trust_pem)?)?,
        warrant_admit::engine::Principals::new(),
        warrant_admit::engine::EngineConfig::default(),
    );
    let rules = warrant_admit::rules::Rules::parse(&std::fs::read_to_string(rules)?)?;
    let admission = Admission::new(
        engine,
        rules,
        warrant_admit::revocation::RevocationState::new(),
    );
    let fresh = admission.clone();
    tokio::spawn(async move {
        loop {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0);
            fresh.replace_revoked("example", &[], now);
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    });
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 8444))).await?;
    println!("listening on https://{}", listener.local_addr()?);
    serve(
        listener,
        tls_config(&std::fs::read(cert)?, &std::fs::read(key)?, &trust_pem)?,
        admission,
    )
    .await;
    Ok(())
}
