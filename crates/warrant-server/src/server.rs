//! Listeners: plain HTTP (default `127.0.0.1:8443`) and the optional TLS
//! listener whose client certificates (chaining to the Root) identify callers.
//! Both serve their connections through [`crate::conn`], under one set of
//! `http.*` limits and one connection cap.

use crate::api;
use crate::config::LoadedConfig;
use crate::conn::{ConnGate, Serving, Transport};
use crate::state::{AppState, InitReport, SharedState, StartError};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A started server. Dropping it does not stop it; call [`shutdown`](Self::shutdown).
pub struct RunningServer {
    pub http_addr: SocketAddr,
    pub tls_addr: Option<SocketAddr>,
    pub state: SharedState,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    connections: ConnGate,
}

impl RunningServer {
    /// Stops accepting, lets in-flight requests finish (every connection
    /// closes gracefully), then drains the store's write path.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        self.connections.drained().await;
        self.state.store.shutdown().await;
    }

    /// Waits until a shutdown is requested by `signal`, then shuts down.
    pub async fn run_until(self, signal: impl std::future::Future<Output = ()>) {
        signal.await;
        tracing::info!("shutting down");
        self.shutdown().await;
    }
}

/// Runs `init` when the data dir has no CA yet (first `serve` on an empty dir).
pub async fn init_if_needed(
    data_dir: &Path,
    admin_password: Option<String>,
) -> Result<Option<InitReport>, StartError> {
    if warrant_ca::Hierarchy::exists(data_dir) {
        return Ok(None);
    }
    crate::state::init_data_dir(data_dir, admin_password)
        .await
        .map(Some)
}

/// Loads the data dir and starts the listeners.
pub async fn start(config: LoadedConfig) -> Result<RunningServer, StartError> {
    let state = Arc::new(AppState::load(config).await?);
    start_with_state(state).await
}

pub async fn start_with_state(state: SharedState) -> Result<RunningServer, StartError> {
    let _ = crate::metrics::handle();
    let cfg = state.config.config.clone();
    let serving = Arc::new(Serving::new(api::router(state.clone()), &cfg.http));
    let (stop, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    tasks.push(crate::state::spawn_auth_sync(
        state.clone(),
        stop_rx.clone(),
    ));
    tasks.push(
        state
            .tokens
            .clone()
            .spawn_reloader(cfg.token.key_reload_interval.0, stop_rx.clone()),
    );
    tasks.push(
        state
            .clone()
            .spawn_ca_reloader(cfg.keys.ca_reload_interval.0, stop_rx.clone()),
    );
    let archive = crate::retention::open_archive(&state.config.data_dir, &cfg.retention).map_err(
        |source| StartError::Io {
            context: format!(
                "opening the retention archive in {}",
                state.config.data_dir.display()
            ),
            source,
        },
    )?;
    tasks.push(crate::retention::spawn(
        state.store.clone(),
        archive,
        &cfg.retention,
        stop_rx.clone(),
    ));
    if cfg.audit.log {
        // Trees that grew after their last checkpoint (a previous run that
        // stopped) are signed now, then every interval.
        if let Err(error) =
            crate::transparency::checkpoint_trees(&state.store, &state.log_signer).await
        {
            tracing::warn!(%error, "could not sign the log's checkpoints at start");
        }
        tasks.push(crate::transparency::spawn_checkpointer(
            state.store.clone(),
            state.log_signer.clone(),
            cfg.audit.checkpoint_interval.0,
            stop_rx.clone(),
        ));
    }

    let listener = TcpListener::bind(cfg.listen_addr())
        .await
        .map_err(|source| StartError::Io {
            context: format!("binding listen {}", cfg.listen),
            source,
        })?;
    let http_addr = listener.local_addr().map_err(|source| StartError::Io {
        context: "listen address".into(),
        source,
    })?;
    tasks.push(tokio::spawn(crate::conn::accept_loop(
        listener,
        Transport::Plain,
        serving.clone(),
        stop_rx.clone(),
    )));

    let mut tls_addr = None;
    if !cfg.tls.listen.is_empty() {
        let server_config = tls_server_config(&state)?;
        let addr: SocketAddr = cfg
            .tls
            .listen
            .parse()
            .map_err(|e| StartError::Other(format!("tls.listen: {e}")))?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Io {
                context: format!("binding tls.listen {addr}"),
                source,
            })?;
        tls_addr = Some(listener.local_addr().map_err(|source| StartError::Io {
            context: "tls address".into(),
            source,
        })?);
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
        tasks.push(tokio::spawn(crate::conn::accept_loop(
            listener,
            Transport::Tls(acceptor),
            serving.clone(),
            stop_rx.clone(),
        )));
    }
    tracing::info!(%http_addr, ?tls_addr, "warrant serving");
    Ok(RunningServer {
        http_addr,
        tls_addr,
        state,
        stop,
        tasks,
        connections: serving.gate().clone(),
    })
}

fn tls_server_config(state: &AppState) -> Result<rustls::ServerConfig, StartError> {
    let cfg = &state.config.config.tls;
    let (chain, key) = if cfg.cert_file.is_empty() {
        self_issued_server_cert(state)?
    } else {
        let chain = CertificateDer::pem_file_iter(&cfg.cert_file)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| StartError::Other(format!("tls.cert_file {}: {e}", cfg.cert_file)))?;
        let key = PrivateKeyDer::from_pem_file(&cfg.key_file)
            .map_err(|e| StartError::Other(format!("tls.key_file {}: {e}", cfg.key_file)))?;
        (chain, key)
    };
    let builder = rustls::ServerConfig::builder();
    let builder = if cfg.client_auth == "none" {
        builder.with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from(
                state.cas().hierarchy.root_cert_der().to_vec(),
            ))
            .map_err(|e| StartError::Other(format!("root certificate: {e}")))?;
        let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots));
        let verifier = if cfg.client_auth == "optional" {
            verifier.allow_unauthenticated()
        } else {
            verifier
        }
        .build()
        .map_err(|e| StartError::Other(format!("tls.client_auth: {e}")))?;
        builder.with_client_cert_verifier(verifier)
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| StartError::Other(format!("TLS certificate: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Without a configured certificate the People CA issues the listener a
/// short-lived `tls-server` certificate at start-up (not stored: it is the
/// server's own, regenerated at each start).
fn self_issued_server_cert(
    state: &AppState,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), StartError> {
    let cfg = &state.config.config;
    let cas = state.cas();
    let ca = cas
        .hierarchy
        .issuing_ca_at(None, crate::clock::unix_now())
        .ok_or_else(|| StartError::Other("no issuing CA".into()))?;
    let key = warrant_ca::generate_key(warrant_ca::KeyType::EcdsaP256)?;
    let name = &cfg.tls.server_name;
    let subject = warrant_ca::Subject::for_request(
        None,
        name,
        &cfg.issuance.default_org,
        &cfg.issuance.default_country,
    )?;
    let mut san = warrant_ca::parse_san(&format!("DNS:{name}"))?;
    san.extend(warrant_ca::parse_san("IP:127.0.0.1,IP:::1")?);
    let now = crate::clock::system_now();
    let issued = warrant_ca::issue_leaf(
        ca,
        &warrant_ca::LeafSpec {
            profile: warrant_ca::Profile::TlsServer,
            subject: &subject,
            san: &san,
            spki_der: &key.spki_der,
            not_before: now,
            not_after: now + std::time::Duration::from_secs(30 * 86400),
            extensions: &[],
            urls: None,
        },
    )?;
    let chain = vec![
        CertificateDer::from(issued.der),
        CertificateDer::from(ca.cert_der().to_vec()),
    ];
    let key = PrivateKeyDer::from_pem_slice(key.pkcs8_pem.as_bytes())
        .map_err(|e| StartError::Other(format!("server key: {e}")))?;
    Ok((chain, key))
}
