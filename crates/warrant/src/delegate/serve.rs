//! `warrant delegate serve`: the person's DA signer, like ssh-agent for
//! delegations. It holds the principal key, answers DA requests from the
//! agents the grant file names (Unix socket, mode 0600), logs every DA it
//! signs, and follows the grant file without a restart.

use super::da::{Cap, DaParams, Principal, fresh_nonce};
use super::grants::{self, Ask, Grants, Refusal};
use super::log::{DaLog, Entry};
use super::protocol::{DaKind, DaRequest, DaResponse, PATH, SignerError};
use anyhow::{Context, Result};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use clap::Args;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

#[derive(Args)]
pub struct ServeArgs {
    /// The principal's private key (PKCS#8 PEM).
    #[arg(long)]
    pub principal_key: PathBuf,
    /// The principal's certificate (PEM).
    #[arg(long)]
    pub principal_cert: PathBuf,
    /// `realm:identifier:base64url(sha256(SPKI))`.
    #[arg(long)]
    pub principal_uid: String,
    /// Signature algorithm of the principal key: ecdsa-p256, rsa, rsa-pss, ed25519.
    #[arg(long, default_value = "ecdsa-p256")]
    pub algo: String,
    /// The grant file (TOML, `[[agent]]` entries; see docs/agents.md).
    #[arg(long)]
    pub grants: PathBuf,
    /// The DA log (JSON Lines); default: `da-log.jsonl` beside the grant file.
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// The Unix socket agents connect to (created with mode 0600).
    #[arg(long)]
    pub socket: PathBuf,
    /// Agent certificate subject to request (empty: the server's first gateway role).
    #[arg(long, default_value = "")]
    pub subject: String,
    /// Also listen for agents over mTLS on this address (e.g. 127.0.0.1:7443):
    /// an agent presents its current certificate, which must chain to
    /// `--client-ca` and carry an AIC whose agent id is the one it asks for.
    #[arg(long, requires_all = ["tls_cert", "tls_key", "client_ca"])]
    pub listen: Option<std::net::SocketAddr>,
    /// The signer's TLS certificate chain (PEM), with --listen.
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// The signer's TLS key (PEM), with --listen.
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// The Warrant root (PEM) agents' certificates must chain to, with --listen.
    #[arg(long)]
    pub client_ca: Option<PathBuf>,
}

/// An mTLS peer, from its certificate's AIC: its agent id and the principal
/// that delegated to it.
#[derive(Clone, Debug)]
struct PeerAgent {
    agent_id: String,
    /// `realm:identifier:keyhash`.
    principal: String,
}

/// Why one DA request got no DA.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("{0}")]
    Invalid(String),
    #[error("the client certificate is agent {peer:?}, not {asked:?}")]
    PeerMismatch { peer: String, asked: String },
    #[error("the client certificate is another principal's agent ({0})")]
    PeerPrincipal(String),
    #[error("{0:#}")]
    Internal(anyhow::Error),
}

impl SignError {
    fn status_and_key(&self) -> (StatusCode, &'static str) {
        match self {
            SignError::Refused(r) => (StatusCode::FORBIDDEN, r.key()),
            SignError::Invalid(_) => (StatusCode::BAD_REQUEST, "request.invalid"),
            SignError::PeerMismatch { .. } => (StatusCode::FORBIDDEN, "auth.agent_mismatch"),
            SignError::PeerPrincipal(_) => (StatusCode::FORBIDDEN, "auth.principal_mismatch"),
            SignError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "signer.internal"),
        }
    }
}

impl IntoResponse for SignError {
    fn into_response(self) -> Response {
        let (status, key) = self.status_and_key();
        let body = SignerError {
            error: key.into(),
            detail: self.to_string(),
        };
        (status, axum::Json(body)).into_response()
    }
}

/// The signer's state: the key, the current grants and the log.
pub struct Signer {
    principal: Principal,
    subject: String,
    grants: RwLock<Arc<Grants>>,
    log: Mutex<DaLog>,
}

impl Signer {
    fn grants(&self) -> Arc<Grants> {
        self.grants
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set_grants(&self, g: Grants) {
        *self
            .grants
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(g);
    }

    /// An mTLS client may only ask for itself, and only if it is this
    /// person's agent (agent ids are only unique per principal).
    fn check_peer(&self, peer: &PeerAgent, asked: &str) -> Result<(), SignError> {
        if peer.principal != self.principal.uid().to_string() {
            return Err(SignError::PeerPrincipal(peer.principal.clone()));
        }
        if peer.agent_id != asked {
            return Err(SignError::PeerMismatch {
                peer: peer.agent_id.clone(),
                asked: asked.to_string(),
            });
        }
        Ok(())
    }

    /// Checks one request against the grant, signs, logs (fsync), answers.
    pub fn sign(&self, req: DaRequest, now: i64) -> Result<DaResponse, SignError> {
        let spki = warrant_ca::verify_csr(&req.csr_pem)
            .map_err(|e| SignError::Invalid(format!("csr_pem: {e}")))?
            .spki_der;
        let mut capabilities = Vec::new();
        for c in &req.capabilities {
            capabilities.push(Cap::parse(c).ok_or_else(|| {
                SignError::Invalid(format!("capabilities: {c:?}: expected scheme:id"))
            })?);
        }
        let key_hash = aic::crypto::sha256(&spki);
        let ask = Ask {
            agent_id: req.agent_id.clone(),
            capabilities,
            lifetime: req.lifetime,
            agent_key_sha256: key_hash,
        };
        let grants = self.grants();
        let grant = grants.agents.get(&req.agent_id);
        // One lock over decide + append: two requests cannot both take the
        // last DA of the hour.
        let mut log = self
            .log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let fingerprint = grant.map(|g| g.fingerprint.clone()).unwrap_or_default();
        let history = log.history(&req.agent_id, &fingerprint);
        let approved = grants::authorize(grant, &ask, &history, now)?;
        let params = DaParams {
            agent_id: req.agent_id.clone(),
            subject: self.subject.clone(),
            capabilities: approved.capabilities.clone(),
            mode: approved.mode.as_i64(),
            reason_code: "delegation".into(),
            reason_description: "signed by warrant delegate serve".into(),
            lifetime: approved.lifetime,
            csr_pem: Some(req.csr_pem.clone()),
        };
        let nonce = fresh_nonce().map_err(SignError::Internal)?;
        let mut answer = DaResponse {
            kind: req.kind,
            lifetime: approved.lifetime,
            cert_request: None,
            da_jwt: None,
        };
        match req.kind {
            DaKind::Certificate => {
                answer.cert_request = Some(
                    self.principal
                        .cert_request(&params, now, nonce)
                        .map_err(SignError::Internal)?,
                )
            }
            DaKind::Jwt => {
                answer.da_jwt = Some(
                    self.principal
                        .da_jwt(&params, req.audience.as_deref(), now, nonce)
                        .map_err(SignError::Internal)?,
                )
            }
        }
        log.append(&Entry {
            time: aic::time::format_rfc3339(now),
            unix: now,
            agent_id: req.agent_id,
            nonce: hex::encode(nonce),
            capabilities: approved.capabilities.iter().map(Cap::to_string).collect(),
            mode: approved.mode,
            lifetime: approved.lifetime,
            agent_key_sha256: hex::encode(key_hash),
            grant: fingerprint,
            kind: req.kind.as_str().into(),
        })
        .map_err(|e| {
            SignError::Internal(anyhow::Error::new(e).context("appending to the DA log"))
        })?;
        Ok(answer)
    }
}

async fn handle(
    State(signer): State<Arc<Signer>>,
    peer: Option<axum::Extension<PeerAgent>>,
    body: Bytes,
) -> Response {
    let req: DaRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return SignError::Invalid(format!("request body: {e}")).into_response(),
    };
    if let Some(axum::Extension(peer)) = peer
        && let Err(e) = signer.check_peer(&peer, &req.agent_id)
    {
        eprintln!("delegate serve: refused: {e}");
        return e.into_response();
    }
    let agent = req.agent_id.clone();
    let s = signer.clone();
    let now = warrant_server::clock::unix_now();
    let result = tokio::task::spawn_blocking(move || s.sign(req, now))
        .await
        .unwrap_or_else(|e| Err(SignError::Internal(anyhow::anyhow!("signing task: {e}"))));
    match result {
        Ok(answer) => {
            eprintln!(
                "delegate serve: signed a {}s {} DA for {agent}",
                answer.lifetime,
                answer.kind.as_str()
            );
            axum::Json(answer).into_response()
        }
        Err(e) => {
            eprintln!("delegate serve: refused {agent}: {e}");
            e.into_response()
        }
    }
}

/// The default DA log path: beside the grant file.
fn default_log(grants: &Path) -> PathBuf {
    grants.with_file_name("da-log.jsonl")
}

/// Binds the socket so that only its owner can ever connect: created under
/// a 0177 umask, then chmod 0600 (a stale socket from an earlier run is
/// replaced; any other file there is an error).
fn bind_socket(path: &Path) -> Result<tokio::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        anyhow::ensure!(
            meta.file_type().is_socket(),
            "--socket {}: exists and is not a socket",
            path.display()
        );
        std::fs::remove_file(path).with_context(|| format!("removing {}", path.display()))?;
    }
    // SAFETY: umask(2) only swaps the process's file mode mask.
    let old = unsafe { libc::umask(0o177) };
    let bound = tokio::net::UnixListener::bind(path);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old) };
    let listener = bound.with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod 0600 {}", path.display()))?;
    Ok(listener)
}

/// Follows the grant file (`crate::follow`). A file that fails to load
/// keeps the previous grants; the error is logged.
async fn follow_grants(signer: Arc<Signer>, path: PathBuf) {
    let shown = path.display().to_string();
    crate::follow::follow_file(path, move |bytes| {
        let parsed = std::str::from_utf8(bytes)
            .map_err(|e| e.to_string())
            .and_then(|text| grants::parse(text).map_err(|e| e.to_string()));
        match parsed {
            Ok(g) => {
                eprintln!("delegate serve: loaded {shown} ({} agents)", g.agents.len());
                signer.set_grants(g);
            }
            Err(e) => eprintln!("delegate serve: {shown}: {e}; keeping the previous grants"),
        }
    })
    .await
}

/// The agent id and principal in a DER certificate's AIC extension.
fn peer_of(cert_der: &[u8]) -> Option<PeerAgent> {
    let view = aic::cert::CertificateView::from_der(cert_der).ok()?;
    let aic = view.aic()?.ok()?;
    Some(PeerAgent {
        agent_id: aic.agent_id,
        principal: aic.principal_uid.to_string(),
    })
}

/// rustls server config: the signer's certificate, and client certificates
/// required and verified against `--client-ca`.
fn tls_config(cert: &Path, key: &Path, client_ca: &Path) -> Result<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("--tls-cert {}", cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("--tls-key {}", key.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(client_ca)
        .with_context(|| format!("--client-ca {}", client_ca.display()))?
    {
        roots
            .add(c.with_context(|| format!("--client-ca {}", client_ca.display()))?)
            .context("--client-ca")?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
        .build()
        .context("--client-ca")?;
    let mut config = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .context("--tls-cert / --tls-key")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Serves `app` over mTLS: each connection's AIC agent id travels with its
/// requests; a client certificate without an AIC is dropped.
async fn serve_tls(listener: tokio::net::TcpListener, config: rustls::ServerConfig, app: Router) {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("delegate serve: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let tls =
                match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => tls,
                    _ => return,
                };
            let agent = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| peer_of(c.as_ref()));
            let Some(agent) = agent else {
                eprintln!("delegate serve: dropped a TLS client without an agent certificate");
                return;
            };
            let svc =
                hyper_util::service::TowerToHyperService::new(app.layer(axum::Extension(agent)));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                .await;
        });
    }
}

pub fn run(args: ServeArgs) -> Result<()> {
    let principal = Principal::load(
        &args.principal_key,
        &args.principal_cert,
        &args.principal_uid,
        &args.algo,
    )?;
    let grants = grants::load(&args.grants)?;
    let log_path = args
        .log
        .clone()
        .unwrap_or_else(|| default_log(&args.grants));
    let log = DaLog::open(&log_path).with_context(|| format!("opening {}", log_path.display()))?;
    let signer = Arc::new(Signer {
        principal,
        subject: args.subject.clone(),
        grants: RwLock::new(Arc::new(grants)),
        log: Mutex::new(log),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let listener = bind_socket(&args.socket)?;
        let app = Router::new()
            .route(PATH, post(handle))
            .with_state(signer.clone());
        tokio::spawn(follow_grants(signer, args.grants.clone()));
        if let (Some(addr), Some(cert), Some(key), Some(ca)) =
            (args.listen, &args.tls_cert, &args.tls_key, &args.client_ca)
        {
            let config = tls_config(cert, key, ca)?;
            let tcp = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("--listen {addr}"))?;
            println!("delegate serve: listening on https://{}", tcp.local_addr()?);
            tokio::spawn(serve_tls(tcp, config, app.clone()));
        }
        println!(
            "delegate serve: listening on unix:{}",
            args.socket.display()
        );
        let socket = args.socket.clone();
        axum::serve(listener, app)
            .with_graceful_shutdown(crate::server_cli::shutdown_signal())
            .await
            .context("serving")?;
        let _ = std::fs::remove_file(&socket);
        Ok(())
    })
}
