//! `warrant token-key`: the AIC-JWT signing keys in `ca/tokens/`.
//!
//! A rotation adds a key that starts signing later (by default twice the
//! JWKS cache lifetime), so every relying party's cached key set holds it
//! before the first token it signs arrives. A running server picks the new
//! file up within `token.key_reload_interval`; several nodes need the file
//! copied to each before it activates.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use warrant_ca::{TokenAlgorithm, TokenKeyRing};
use warrant_server::LoadedConfig;
use warrant_server::config::ConfigDuration;

use crate::server_cli::report;

#[derive(Subcommand)]
pub enum TokenKeyCommand {
    /// Add a token-signing key; it is published now and signs from --activate-in on.
    Rotate(RotateArgs),
    /// List the token keys: kid, algorithm, activation, and whether each signs or is published.
    List(ListArgs),
}

#[derive(Args)]
pub struct RotateArgs {
    #[arg(long, env = "WARRANT_DATA_DIR", default_value = "warrant-data")]
    pub data_dir: PathBuf,
    /// When the new key starts signing, from now (e.g. `10m`, `0s`).
    /// Default: twice `token.jwks_max_age`.
    #[arg(long)]
    pub activate_in: Option<String>,
    /// ES256 or ES384. Default: `token.algorithm`.
    #[arg(long)]
    pub algorithm: Option<String>,
    /// Also delete the files of keys that are no longer published.
    #[arg(long)]
    pub prune: bool,
    /// Make the key in this PKCS#11 token (RFC 7512 URI; labelled
    /// `warrant-jwt-<activation time>`), or use the existing key the URI
    /// names with `object=` or `id=`. The PIN comes from
    /// `keys.pkcs11_pin_env` or `keys.pkcs11_pin_file`.
    #[arg(long, value_name = "URI")]
    pub pkcs11: Option<String>,
}

#[derive(Args)]
pub struct ListArgs {
    #[arg(long, env = "WARRANT_DATA_DIR", default_value = "warrant-data")]
    pub data_dir: PathBuf,
}

pub fn run(cmd: TokenKeyCommand) -> ExitCode {
    report(match cmd {
        TokenKeyCommand::Rotate(args) => rotate(args),
        TokenKeyCommand::List(args) => list(&args.data_dir),
    })
}

fn now() -> i64 {
    warrant_server::clock::unix_now()
}

fn load(
    data_dir: &std::path::Path,
) -> Result<(LoadedConfig, Option<String>, warrant_ca::Pkcs11Access)> {
    if !warrant_ca::Hierarchy::exists(data_dir) {
        bail!(
            "{} holds no CA (run `warrant init` first)",
            data_dir.display()
        );
    }
    let loaded = LoadedConfig::load(data_dir)?;
    let pass = warrant_server::state::passphrase(&loaded.config)?;
    let pkcs11 = warrant_server::state::pkcs11_access(&loaded.config)?;
    Ok((loaded, pass, pkcs11))
}

fn rotate(args: RotateArgs) -> Result<()> {
    let (loaded, pass, pkcs11) = load(&args.data_dir)?;
    let token = &loaded.config.token;
    let delay = match &args.activate_in {
        Some(text) => {
            ConfigDuration::parse(text)
                .map_err(|e| anyhow::anyhow!("--activate-in: {e}"))?
                .0
        }
        None => token.jwks_max_age.0 * 2,
    };
    let alg_name = args.algorithm.as_deref().unwrap_or(&token.algorithm);
    let alg = TokenAlgorithm::from_name(alg_name)
        .with_context(|| format!("--algorithm {alg_name:?}: expected ES256 or ES384"))?;
    let activates_at = now() + i64::try_from(delay.as_secs()).context("--activate-in")?;
    let key = match &args.pkcs11 {
        Some(uri) => {
            let uri = warrant_ca::Pkcs11Uri::parse(uri).context("--pkcs11")?;
            TokenKeyRing::create_key_in_token(&args.data_dir, &uri, &pkcs11, alg, activates_at)?
        }
        None => TokenKeyRing::create_key(&args.data_dir, pass.as_deref(), alg, activates_at)?,
    };
    println!(
        "added token key {} ({}), signing from {} (in {}s)",
        key.kid(),
        alg.name(),
        activates_at,
        delay.as_secs()
    );
    if args.prune {
        let ring = TokenKeyRing::load_with(&args.data_dir, pass.as_deref(), &pkcs11)?;
        let removed = ring.prune_files(&args.data_dir, now())?;
        println!("removed {removed} key file(s) no longer published");
    }
    Ok(())
}

fn list(data_dir: &std::path::Path) -> Result<()> {
    let (_, pass, pkcs11) = load(data_dir)?;
    let ring = TokenKeyRing::load_with(data_dir, pass.as_deref(), &pkcs11)?;
    let now = now();
    let signing = ring.current(now).map(|k| k.activates_at());
    let published: Vec<i64> = ring
        .published(now)
        .iter()
        .map(|k| k.activates_at())
        .collect();
    println!("{:<44} {:<6} {:>12}  state", "kid", "alg", "activates_at");
    for k in ring.keys().iter().rev() {
        let state = if Some(k.activates_at()) == signing {
            "signing"
        } else if k.activates_at() > now {
            "published, not yet signing"
        } else if published.contains(&k.activates_at()) {
            "published, superseded"
        } else {
            "retired"
        };
        println!(
            "{:<44} {:<6} {:>12}  {state}",
            k.kid(),
            k.alg().name(),
            k.activates_at()
        );
    }
    Ok(())
}
