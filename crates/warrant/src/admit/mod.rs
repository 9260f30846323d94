//! `warrant admit`: the admission engine (`warrant-admit`) as a service
//! for proxies. nginx asks it with `auth_request`, Envoy with `ext_authz`
//! (HTTP); it answers 200 with the agent's identity in headers, or 401/403
//! with a reason key. It keeps its own revocation state fresh by polling
//! Warrant's CRLs, and follows its route rule file.
//!
//! The proxy is the only party that may reach it: the client certificate
//! arrives in a header the proxy sets, so the listener belongs on loopback
//! (or a socket only the proxy can reach).

mod http;
mod refresh;

use anyhow::{Context, Result};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use warrant_admit::engine::{Engine, EngineConfig, Principals};
use warrant_admit::live::Admission;
use warrant_admit::revocation::RevocationState;
use warrant_admit::rules::Rules;
use warrant_ca::TrustBundle;

#[derive(Args)]
pub struct AdmitArgs {
    /// Where nginx and Envoy reach the service. Keep it on loopback: the
    /// client certificate arrives in a header the proxy sets.
    #[arg(long, default_value = "127.0.0.1:9180")]
    pub listen: SocketAddr,
    /// The trust bundle (PEM): Warrant's root and its issuing CAs in force,
    /// e.g. `GET /api/v1/ca/people` followed by `GET /api/v1/ca/root`.
    #[arg(long)]
    pub trust: PathBuf,
    /// The route rule file (docs/admission.md), reloaded when it changes or
    /// on SIGHUP; a bad file is refused whole and the rules in force stay.
    #[arg(long)]
    pub rules: PathBuf,
    /// Warrant's CRL of an issuing CA (`…/api/v1/crl/people`); repeat for
    /// each CA. Polled every `--refresh-ms`.
    #[arg(long = "crl-url", required = true)]
    pub crl_urls: Vec<String>,
    /// How often the CRLs are fetched, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub refresh_ms: u64,
    /// Past this many seconds without a complete revocation state, every
    /// request but those to `public` routes is refused (fail closed).
    #[arg(long, default_value_t = 30)]
    pub max_staleness_secs: u64,
    /// CA certificates (PEM) to trust for an `https://` CRL URL; default:
    /// the system's roots. (CRLs are signed: plain HTTP is safe too.)
    #[arg(long)]
    pub crl_tls_roots: Option<PathBuf>,
    /// Principals' certificates (PEM, any number): with it, each agent's
    /// delegation is verified under its principal's key (admit.md §2 step
    /// 6); without it, the CA's check at issuance is relied on.
    #[arg(long)]
    pub principals: Option<PathBuf>,
    /// The token issuer's JWK Set, for AIC-JWTs in `Authorization`:
    /// Warrant's `…/.well-known/jwks.json`, or a file. Without it, tokens
    /// are refused. Fetched again every `--jwks-refresh-secs`.
    #[arg(long)]
    pub jwks: Option<String>,
    #[arg(long, default_value_t = 60)]
    pub jwks_refresh_secs: u64,
    /// A token's `iss` must be this (Warrant's `token.issuer`).
    #[arg(long)]
    pub token_issuer: Option<String>,
    /// A token's `aud` must include this (this service's name).
    #[arg(long)]
    pub token_audience: Option<String>,
    /// How old a DPoP proof may be, seconds (besides the clock skew); its
    /// `jti` is remembered that long, and a second use refused.
    #[arg(long, default_value_t = 60)]
    pub dpop_max_age_secs: u64,
    /// Clock difference tolerated against certificates' validity, seconds.
    #[arg(long, default_value_t = 60)]
    pub clock_skew_secs: u64,
    /// Admit past constraints this service does not know (default: refuse).
    #[arg(long)]
    pub allow_unknown_constraints: bool,
    /// Certificates whose verified facts are cached.
    #[arg(long, default_value_t = 100_000)]
    pub cache_capacity: usize,
    /// Append every decision as a JSON line to this file (no credential
    /// material is written).
    #[arg(long)]
    pub decision_log: Option<PathBuf>,
}

/// Unix seconds now (0 before 1970: a clock that wrong fails closed on
/// every freshness check).
pub(crate) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

pub fn run(args: AdmitArgs) -> ExitCode {
    crate::server_cli::report(serve(args))
}

/// Every PEM CERTIFICATE block of a file, DER.
fn pem_certificates(path: &std::path::Path) -> Result<Vec<Vec<u8>>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map(|v| v.into_iter().map(|c| c.to_vec()).collect())
        .with_context(|| format!("reading certificates from {}", path.display()))
}

fn engine(args: &AdmitArgs) -> Result<Engine> {
    let text = std::fs::read_to_string(&args.trust)
        .with_context(|| format!("--trust {}", args.trust.display()))?;
    let trust = TrustBundle::from_pem(&text)
        .with_context(|| format!("--trust {}", args.trust.display()))?;
    let mut principals = Principals::new();
    if let Some(path) = &args.principals {
        for der in pem_certificates(path)? {
            principals
                .insert_der(der)
                .with_context(|| format!("--principals {}", path.display()))?;
        }
    }
    Ok(Engine::new(
        trust,
        principals,
        EngineConfig {
            clock_skew: Duration::from_secs(args.clock_skew_secs),
            verify_delegation: args.principals.is_some(),
            allow_unknown_constraints: args.allow_unknown_constraints,
            max_revocation_staleness: Duration::from_secs(args.max_staleness_secs),
            cache_capacity: args.cache_capacity,
            token_issuer: args.token_issuer.clone(),
            token_audience: args.token_audience.clone(),
            dpop_max_age: Duration::from_secs(args.dpop_max_age_secs),
            ..EngineConfig::default()
        },
    ))
}

fn load_rules(path: &std::path::Path) -> Result<Rules> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("--rules {}", path.display()))?;
    Rules::parse(&text).with_context(|| format!("--rules {}", path.display()))
}

/// What the request handlers share: the engine with its live state, and
/// the decision log.
pub(crate) struct AdmitService {
    pub admission: Admission,
    pub decision_log: Option<std::sync::Mutex<std::io::LineWriter<std::fs::File>>>,
}

fn serve(args: AdmitArgs) -> Result<()> {
    let engine = engine(&args)?;
    let rules = load_rules(&args.rules)?;
    let decision_log = match &args.decision_log {
        Some(path) => Some(std::sync::Mutex::new(std::io::LineWriter::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("--decision-log {}", path.display()))?,
        ))),
        None => None,
    };
    let fetcher = Arc::new(refresh::CrlFetcher::new(&args)?);
    refresh::install_metrics();
    let service = Arc::new(AdmitService {
        admission: Admission::new(engine, rules, RevocationState::new()),
        decision_log,
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("--listen {}", args.listen))?;
        println!("admit: listening on http://{}", listener.local_addr()?);
        tokio::spawn(refresh::follow_rules(
            service.admission.clone(),
            args.rules.clone(),
        ));
        if let Some(source) = &args.jwks {
            tokio::spawn(refresh::poll_jwks(
                service.admission.clone(),
                Arc::clone(&fetcher),
                source.clone(),
                Duration::from_millis(args.refresh_ms.max(100)),
                Duration::from_secs(args.jwks_refresh_secs.max(1)),
            ));
        }
        tokio::spawn(refresh::poll_crls(
            service.admission.clone(),
            fetcher,
            Duration::from_millis(args.refresh_ms.max(100)),
        ));
        axum::serve(listener, http::router(service))
            .with_graceful_shutdown(crate::server_cli::shutdown_signal())
            .await
            .context("serving")
    })
}
