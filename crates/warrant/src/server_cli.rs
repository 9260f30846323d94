//! `warrant init`, `warrant serve` and `warrant delegate`.

use anyhow::{Context, Result, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use warrant_server::LoadedConfig;

#[derive(Args)]
pub struct InitArgs {
    /// Data directory (created if absent).
    #[arg(long, env = "WARRANT_DATA_DIR", default_value = "warrant-data")]
    pub data_dir: PathBuf,
    /// Password of the `admin` user; generated and printed once if absent.
    #[arg(long, env = "WARRANT_ADMIN_PASSWORD", hide_env_values = true)]
    pub admin_password: Option<String>,
}

#[derive(Args)]
pub struct ServeArgs {
    /// Data directory; an empty or missing one is initialised first.
    #[arg(long, env = "WARRANT_DATA_DIR", default_value = "warrant-data")]
    pub data_dir: PathBuf,
    /// Admin password used if this run initialises the data dir.
    #[arg(long, env = "WARRANT_ADMIN_PASSWORD", hide_env_values = true)]
    pub admin_password: Option<String>,
    /// Print the effective configuration (value and source of every key) and exit.
    #[arg(long)]
    pub print_config: bool,
}

#[derive(Args)]
pub struct DelegateArgs {
    /// The principal's private key (PKCS#8 PEM, e.g. the `key_pem` of a person certificate).
    #[arg(long)]
    pub principal_key: PathBuf,
    /// The principal's certificate (PEM); copied into `user_cert_pem`.
    #[arg(long)]
    pub principal_cert: PathBuf,
    /// `realm:identifier:base64url(sha256(SPKI))`, as returned when the person cert was issued.
    #[arg(long)]
    pub principal_uid: String,
    #[arg(long)]
    pub agent_id: String,
    /// Agent certificate subject; agent-proxy needs an OU (the gateway role).
    #[arg(long, default_value = "")]
    pub subject: String,
    /// `scheme:capability`, repeatable.
    #[arg(long = "capability")]
    pub capabilities: Vec<String>,
    /// 0 authorized, 1 representative.
    #[arg(long, default_value_t = 0)]
    pub mode: i64,
    #[arg(long, default_value = "delegation")]
    pub reason_code: String,
    #[arg(long, default_value = "delegated with warrant delegate")]
    pub reason_description: String,
    /// Requested lifetime of the delegation, seconds.
    #[arg(long, default_value_t = 3600)]
    pub lifetime: i64,
    /// The agent's CSR (PEM): makes a v2 DA bound to the agent's key, and is
    /// sent as `csr_pem`. Without it the server generates the agent key.
    #[arg(long)]
    pub csr: Option<PathBuf>,
    /// Signature algorithm of the principal key: ecdsa-p256, rsa, rsa-pss, ed25519.
    #[arg(long, default_value = "ecdsa-p256")]
    pub algo: String,
    /// Print a DA JWT (`typ aic+da+jwt`, the principal certificate as `x5c`)
    /// for `POST /oauth/token` instead of a certificate request. With --csr
    /// it binds the agent key by its RFC 7638 thumbprint (`ver` 3), so the
    /// token is bound to that key without a DPoP proof.
    #[arg(long)]
    pub jwt: bool,
    /// With --jwt: the token issuer the DA is addressed to (`aud`).
    #[arg(long, requires = "jwt")]
    pub audience: Option<String>,
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn init_logging(cfg: &warrant_server::Config) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_env("RUST_LOG").unwrap_or_else(|_| EnvFilter::new(&cfg.log_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if cfg.log_format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

pub(crate) fn report(r: Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

pub fn run_init(args: InitArgs) -> ExitCode {
    report((|| {
        if warrant_ca::Hierarchy::exists(&args.data_dir) {
            bail!("{} is already initialised", args.data_dir.display());
        }
        let rt = runtime()?;
        let r = rt.block_on(warrant_server::init_data_dir(
            &args.data_dir,
            args.admin_password,
        ))?;
        r.print();
        Ok(())
    })())
}

pub fn run_serve(args: ServeArgs) -> ExitCode {
    report((|| {
        if args.print_config {
            let loaded = LoadedConfig::load(&args.data_dir)?;
            print!("{}", loaded.render());
            return Ok(());
        }
        let rt = runtime()?;
        rt.block_on(async {
            if let Some(r) =
                warrant_server::init_if_needed(&args.data_dir, args.admin_password).await?
            {
                r.print();
            }
            let loaded = LoadedConfig::load(&args.data_dir)?;
            init_logging(&loaded.config);
            let server = warrant_server::start(loaded).await?;
            println!("listening on http://{}", server.http_addr);
            if let Some(a) = server.tls_addr {
                println!("listening on https://{a}");
            }
            server.run_until(shutdown_signal()).await;
            Ok(())
        })
    })())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Builds and signs a DA and prints the whole `POST /api/v1/certs` body, so a
/// person can delegate with nothing but this binary and curl.
/// The DA as a JWT (draft-wei-aic-jwt-02) with the principal certificate as
/// `x5c`; an agent key binds by its thumbprint.
fn da_jwt(
    args: &DelegateArgs,
    key_der: &[u8],
    cert_pem: &str,
    principal: aic::PrincipalUid,
    agent_spki: Option<Vec<u8>>,
    ts: i64,
    nonce: [u8; 32],
) -> Result<String> {
    use aic::jwt::{CapabilityClaim, JwsAlgorithm, JwsHeader, JwsSigningKey, KeyHashAlg};
    let alg = match args.algo.as_str() {
        "ecdsa-p256" => JwsAlgorithm::ES256,
        "rsa" => JwsAlgorithm::RS256,
        "rsa-pss" => JwsAlgorithm::PS256,
        "ed25519" => JwsAlgorithm::EdDSA,
        other => bail!("--algo {other:?}: expected ecdsa-p256, rsa, rsa-pss or ed25519"),
    };
    let cert_der = aic::cert::pem_decode(cert_pem, "CERTIFICATE").context("--principal-cert")?;
    let spki = aic::cert::CertificateView::from_der(&cert_der)
        .context("--principal-cert")?
        .subject_spki_der;
    let request = aic::jwt::DaJwtRequest {
        principal,
        principal_spki_der: spki,
        key_hash_alg: KeyHashAlg::Sha256,
        agent_id: args.agent_id.clone(),
        audience: args.audience.clone().into_iter().collect(),
        reason: aic::jwt::ReasonClaim {
            code: args.reason_code.clone(),
            desc: args.reason_description.clone(),
        },
        capabilities: args
            .capabilities
            .iter()
            .filter_map(|c| c.split_once(':'))
            .map(|(scheme, id)| CapabilityClaim {
                scheme: scheme.into(),
                id: id.into(),
                params: None,
            })
            .collect(),
        delegation_mode: aic::DelegationMode::from_i64(args.mode, "mode")?,
        constraints: Vec::new(),
        requested_lifetime: args.lifetime,
        ts,
        nonce,
        agent_spki_der: agent_spki.clone(),
    };
    let mut claims = request.claims()?;
    if let (Some(binding), Some(spki)) = (claims.agent_key_binding.as_mut(), &agent_spki) {
        binding.key_hash = aic::jwt::jwk_thumbprint(spki)?;
        binding.hash_alg = KeyHashAlg::Jkt.name().into();
    }
    let header = JwsHeader {
        alg: alg.name().into(),
        kid: None,
        typ: Some(aic::jwt::DA_TYP.into()),
        crit: None,
        x5c: Some(vec![STANDARD.encode(&cert_der)]),
        jwk: None,
    };
    let signer = JwsSigningKey {
        alg,
        pkcs8_der: key_der.to_vec(),
        kid: None,
    };
    Ok(aic::jwt::jws::sign_with(
        &header,
        &serde_json::to_value(claims)?,
        |input| signer.sign_input(input),
    )?)
}

pub fn run_delegate(args: DelegateArgs) -> ExitCode {
    report((|| {
        let key_pem = std::fs::read_to_string(&args.principal_key)
            .with_context(|| format!("reading {}", args.principal_key.display()))?;
        let key_der = aic::cert::pem_decode(&key_pem, "PRIVATE KEY")
            .context("--principal-key: expected a PKCS#8 PEM (BEGIN PRIVATE KEY)")?;
        let cert_pem = std::fs::read_to_string(&args.principal_cert)
            .with_context(|| format!("reading {}", args.principal_cert.display()))?;
        let principal_uid =
            aic::PrincipalUid::parse(&args.principal_uid).context("--principal-uid")?;
        let mut capabilities = Vec::new();
        let mut caps_json = Vec::new();
        for c in &args.capabilities {
            let (scheme, id) = c
                .split_once(':')
                .context("--capability: expected scheme:capability")?;
            capabilities.push(aic::Capability::new(scheme, id, None));
            caps_json.push(serde_json::json!({"scheme_id": scheme, "capability_id": id}));
        }
        let csr_pem = match &args.csr {
            Some(p) => Some(
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
            ),
            None => None,
        };
        let agent_spki = match &csr_pem {
            Some(pem) => Some(warrant_ca::verify_csr(pem).context("--csr")?.spki_der),
            None => None,
        };
        let (alg, alg_name) = match args.algo.as_str() {
            "ecdsa-p256" => (aic::DaSigningAlgorithm::EcdsaP256Sha256, "ECDSA-SHA256"),
            "rsa" => (aic::DaSigningAlgorithm::RsaPkcs1Sha256, "RSA-SHA256"),
            "rsa-pss" => (aic::DaSigningAlgorithm::RsaPssSha256, "RSA-PSS-SHA256"),
            "ed25519" => (aic::DaSigningAlgorithm::Ed25519, "ED25519"),
            other => bail!("--algo {other:?}: expected ecdsa-p256, rsa, rsa-pss or ed25519"),
        };
        let mut nonce = [0u8; 32];
        aws_lc_rs::rand::fill(&mut nonce).map_err(|_| anyhow::anyhow!("CSPRNG failure"))?;
        let timestamp = warrant_server::clock::unix_now();
        if args.jwt {
            let token = da_jwt(
                &args,
                &key_der,
                &cert_pem,
                principal_uid,
                agent_spki,
                timestamp,
                nonce,
            )?;
            println!("{token}");
            return Ok(());
        }
        let tbs = aic::DelegationRequest {
            agent_id: args.agent_id.clone(),
            principal_uid,
            reason: aic::Reason::new(&args.reason_code, &args.reason_description),
            capabilities,
            delegation_mode: aic::DelegationMode::from_i64(args.mode, "mode")?,
            constraints: Vec::new(),
            requested_lifetime: args.lifetime,
            timestamp,
            nonce,
            agent_spki_der: agent_spki,
        }
        .tbs()?;
        let (_, signature) = aic::sign_delegation(&tbs.to_der(), &key_der, alg)?;
        let mut body = serde_json::json!({
            "profile": "agent-proxy",
            "cn": args.agent_id,
            "agent_id": args.agent_id,
            "principal_uid": args.principal_uid,
            "delegation_mode": args.mode,
            "capabilities": caps_json,
            "user_auth_signature": STANDARD.encode(signature),
            "user_auth_signature_algo": alg_name,
            "user_auth_nonce": STANDARD.encode(nonce),
            "user_auth_lifetime": args.lifetime,
            "user_auth_timestamp": aic::time::format_rfc3339(timestamp),
            "user_auth_reason_code": args.reason_code,
            "user_auth_reason_description": args.reason_description,
            "user_cert_pem": cert_pem,
            "agent_key_binding": csr_pem.is_some(),
        });
        if !args.subject.is_empty() {
            body["subject"] = serde_json::Value::String(args.subject.clone());
        }
        if let Some(csr) = csr_pem {
            body["csr_pem"] = serde_json::Value::String(csr);
        }
        println!("{}", serde_json::to_string_pretty(&body)?);
        Ok(())
    })())
}
