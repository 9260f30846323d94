//! `warrant delegate`: sign one DA with a person's key and print it, or
//! (`warrant delegate serve`) run the person's DA signer for their agents.

pub mod da;
pub mod grants;
pub mod log;
pub mod protocol;
pub mod serve;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct DelegateCommand {
    #[command(subcommand)]
    pub command: Option<DelegateSub>,
    #[command(flatten)]
    pub once: Option<DelegateArgs>,
}

#[derive(Subcommand)]
pub enum DelegateSub {
    /// Run the person's DA signer: agents named in a grant file ask it for DAs.
    Serve(serve::ServeArgs),
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

pub fn run(cmd: DelegateCommand) -> ExitCode {
    crate::server_cli::report(match (cmd.command, cmd.once) {
        (Some(DelegateSub::Serve(args)), _) => serve::run(args),
        (None, Some(args)) => run_once(args),
        (None, None) => Err(anyhow::anyhow!(
            "expected DA flags (--principal-key …) or a subcommand (serve)"
        )),
    })
}

/// Builds and signs a DA and prints the whole `POST /api/v1/certs` body (or
/// the DA JWT), so a person can delegate with nothing but this binary and curl.
fn run_once(args: DelegateArgs) -> Result<()> {
    let principal = da::Principal::load(
        &args.principal_key,
        &args.principal_cert,
        &args.principal_uid,
        &args.algo,
    )?;
    let capabilities = args
        .capabilities
        .iter()
        .map(|c| da::Cap::parse(c).context("--capability: expected scheme:capability"))
        .collect::<Result<Vec<_>>>()?;
    let csr_pem = match &args.csr {
        Some(p) => {
            Some(std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?)
        }
        None => None,
    };
    let params = da::DaParams {
        agent_id: args.agent_id,
        subject: args.subject,
        capabilities,
        mode: args.mode,
        reason_code: args.reason_code,
        reason_description: args.reason_description,
        lifetime: args.lifetime,
        csr_pem,
    };
    params.agent_spki().context("--csr")?;
    let nonce = da::fresh_nonce()?;
    let timestamp = warrant_server::clock::unix_now();
    if args.jwt {
        let token = principal.da_jwt(&params, args.audience.as_deref(), timestamp, nonce)?;
        println!("{token}");
    } else {
        let body = principal.cert_request(&params, timestamp, nonce)?;
        println!("{}", serde_json::to_string_pretty(&body)?);
    }
    Ok(())
}
