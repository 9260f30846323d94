//! `warrant ca`: an issuing CA whose root signs elsewhere (`csr`, then
//! `install`), and the offline root's own steps on its offline machine
//! (`sign`, `root-crl`). The ceremony, step by step: docs/keys.md.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};
use warrant_ca::{Hierarchy, InitOptions, KeyPlacement, OfflineRoot, TokenPlacement};
use warrant_server::LoadedConfig;
use zeroize::Zeroizing;

use crate::server_cli::report;

#[derive(Subcommand)]
pub enum CaCommand {
    /// Make a new issuing CA's key and print its certificate request, for
    /// the root to sign (on the offline machine: `warrant ca sign`).
    Csr(CsrArgs),
    /// Install an issuing CA from its certificate, signed by this data
    /// dir's root over the key `warrant ca csr` made.
    Install(InstallArgs),
    /// Make the next generation of an issuing CA under the same root (the
    /// root's key must be here; with an offline root use `csr`, `sign` and
    /// `install --rotates`). New issuance moves to it at its activation, on
    /// every node that has its files; the old CA keeps its CRL and OCSP.
    Rotate(RotateArgs),
    /// On the offline machine: sign an issuing CA's request with the
    /// exported root key.
    Sign(SignArgs),
    /// On the offline machine: sign the root's CRL (the issuing CAs it
    /// revokes, none by default) with the exported root key.
    RootCrl(RootCrlArgs),
}

#[derive(Args)]
pub struct CsrArgs {
    #[arg(long, env = "WARRANT_DATA_DIR", default_value = "warrant-data")]
    pub data_dir: PathBuf,
    /// The issuing CA's name.
    #[arg(long, default_value = "people")]
    pub name: String,
    /// Make the key in this PKCS#11 token (labelled `warrant-<name>`, or the
    /// one already there), not in a key file.
    #[arg(long, value_name = "URI")]
    pub pkcs11: Option<String>,
    /// Write the request here (PEM) instead of to stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Args)]
pub struct InstallArgs {
    #[arg(long, env = "WARRANT_DATA_DIR", default_value = "warrant-data")]
    pub data_dir: PathBuf,
    #[arg(long, default_value = "people")]
    pub name: String,
    /// The issuing CA's certificate (PEM), signed by the root.
    #[arg(long)]
    pub cert: PathBuf,
    /// Install it as the next generation of this issuing CA, taking over
    /// its new issuance at the activation time.
    #[arg(long, value_name = "CA")]
    pub rotates: Option<String>,
    #[command(flatten)]
    pub activation: Activation,
}

/// When a rotated CA starts issuing.
#[derive(Args)]
pub struct Activation {
    /// When the new CA starts issuing: RFC 3339 (`2027-01-01T00:00:00Z`) or
    /// Unix seconds.
    #[arg(long, conflicts_with = "activate_in")]
    pub activate_at: Option<String>,
    /// When the new CA starts issuing, from now (`30s`, `10m`, `0s`).
    /// Default: twice `keys.ca_reload_interval`, so every node has loaded it.
    #[arg(long)]
    pub activate_in: Option<String>,
}

impl Activation {
    fn unix(&self, cfg: &warrant_server::Config) -> Result<i64> {
        let now = warrant_server::clock::unix_now();
        if let Some(at) = &self.activate_at {
            if let Ok(secs) = at.parse::<i64>() {
                return Ok(secs);
            }
            return aic::time::parse_rfc3339(at)
                .with_context(|| format!("--activate-at {at:?}: RFC 3339 or Unix seconds"));
        }
        let delay = match &self.activate_in {
            Some(text) => {
                warrant_server::config::ConfigDuration::parse(text)
                    .map_err(|e| anyhow::anyhow!("--activate-in: {e}"))?
                    .0
            }
            None => cfg.keys.ca_reload_interval.0 * 2,
        };
        Ok(now + i64::try_from(delay.as_secs()).context("--activate-in")?)
    }
}

#[derive(Args)]
pub struct RotateArgs {
    #[arg(long, env = "WARRANT_DATA_DIR", default_value = "warrant-data")]
    pub data_dir: PathBuf,
    /// The issuing CA to rotate (its first name, e.g. `people`).
    #[arg(default_value = "people")]
    pub ca: String,
    #[command(flatten)]
    pub activation: Activation,
    /// Make the new CA's key in this PKCS#11 token (labelled
    /// `warrant-<name>`), not in a key file.
    #[arg(long, value_name = "URI")]
    pub pkcs11: Option<String>,
}

/// The exported root: its certificate, its encrypted key, the passphrase.
#[derive(Args)]
pub struct RootKeyArgs {
    /// `root.cert.pem` of the export `warrant init --root-offline` wrote.
    #[arg(long)]
    pub root_cert: PathBuf,
    /// `root.key.pem` of that export (encrypted).
    #[arg(long)]
    pub root_key: PathBuf,
    /// Env var holding the export's passphrase.
    #[arg(long, default_value = "WARRANT_ROOT_PASSPHRASE")]
    pub root_passphrase_env: String,
    /// File holding the export's passphrase (when the env var is unset).
    #[arg(long)]
    pub root_passphrase_file: Option<PathBuf>,
}

#[derive(Args)]
pub struct SignArgs {
    #[command(flatten)]
    pub root: RootKeyArgs,
    /// The request `warrant ca csr` printed (PEM).
    #[arg(long)]
    pub csr: PathBuf,
    /// Days the issuing CA is valid (never past the root's end).
    #[arg(long, default_value_t = 3652)]
    pub days: u64,
    /// Write the certificate here (PEM) instead of to stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Args)]
pub struct RootCrlArgs {
    #[command(flatten)]
    pub root: RootKeyArgs,
    /// An issuing CA the root revokes: its serial in hex, with an optional
    /// reason (`SERIAL:keyCompromise`). Repeatable.
    #[arg(long = "revoke", value_name = "SERIAL[:REASON]")]
    pub revoked: Vec<String>,
    /// Days until the CRL's nextUpdate: sign and publish a new one before.
    #[arg(long, default_value_t = 30)]
    pub days: u64,
    /// Write the DER CRL here (copy it to each node's `ca/root.crl`).
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(cmd: CaCommand) -> ExitCode {
    report(match cmd {
        CaCommand::Csr(args) => csr(args),
        CaCommand::Install(args) => install(args),
        CaCommand::Rotate(args) => rotate(args),
        CaCommand::Sign(args) => sign(args),
        CaCommand::RootCrl(args) => root_crl(args),
    })
}

/// The passphrase in env var `env`, else in `file`.
pub fn passphrase_from(env: &str, file: Option<&Path>) -> Result<Option<Zeroizing<String>>> {
    if let Ok(v) = std::env::var(env)
        && !v.is_empty()
    {
        return Ok(Some(Zeroizing::new(v)));
    }
    match file {
        Some(path) => {
            let text = Zeroizing::new(
                std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?,
            );
            Ok(Some(Zeroizing::new(
                text.trim_end_matches(['\r', '\n']).to_string(),
            )))
        }
        None => Ok(None),
    }
}

fn write_or_print(out: Option<&Path>, text: &str) -> Result<()> {
    match out {
        Some(p) => std::fs::write(p, text).with_context(|| format!("writing {}", p.display())),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

/// Where a new CA's key goes: a key file, or the token `pkcs11` names.
fn placement(pkcs11: Option<&str>, cfg: &warrant_server::Config) -> Result<KeyPlacement> {
    Ok(match pkcs11 {
        None => KeyPlacement::Files,
        Some(uri) => KeyPlacement::Token(Box::new(TokenPlacement {
            token: warrant_ca::Pkcs11Uri::parse(uri).context("--pkcs11")?,
            keys: Default::default(),
            access: warrant_server::state::pkcs11_access(cfg)?,
        })),
    })
}

fn rotate(args: RotateArgs) -> Result<()> {
    let loaded = LoadedConfig::load(&args.data_dir)?;
    let cfg = &loaded.config;
    let pass = warrant_server::state::passphrase(cfg)?;
    let pkcs11 = warrant_server::state::pkcs11_access(cfg)?;
    let activates_at = args.activation.unix(cfg)?;
    let mut hierarchy = Hierarchy::load_with(&args.data_dir, pass.as_deref(), &pkcs11)?;
    let ca = hierarchy.rotate(
        &args.data_dir,
        &args.ca,
        pass.as_deref(),
        &InitOptions {
            keys: placement(args.pkcs11.as_deref(), cfg)?,
            ..Default::default()
        },
        activates_at,
    )?;
    println!(
        "made issuing CA {:?}, the next generation of {:?}; it issues from {} (Unix {activates_at}). Nodes with their own data dir need ca/{}.* and ca/{}.rotations copied before then.",
        ca.name(),
        args.ca,
        warrant_server::clock::rfc3339(activates_at),
        ca.name(),
        args.ca
    );
    Ok(())
}

fn csr(args: CsrArgs) -> Result<()> {
    let loaded = LoadedConfig::load(&args.data_dir)?;
    let pass = warrant_server::state::passphrase(&loaded.config)?;
    let keys = placement(args.pkcs11.as_deref(), &loaded.config)?;
    let pem = Hierarchy::issuing_ca_csr(
        &args.data_dir,
        &args.name,
        pass.as_deref(),
        &InitOptions {
            keys,
            ..Default::default()
        },
    )?;
    write_or_print(args.out.as_deref(), &pem)?;
    eprintln!(
        "the key of CA {:?} waits in ca/pending/; have the root sign this request, then `warrant ca install --name {} --cert FILE`",
        args.name, args.name
    );
    Ok(())
}

fn install(args: InstallArgs) -> Result<()> {
    let loaded = LoadedConfig::load(&args.data_dir)?;
    let pass = warrant_server::state::passphrase(&loaded.config)?;
    let pkcs11 = warrant_server::state::pkcs11_access(&loaded.config)?;
    let pem = std::fs::read_to_string(&args.cert)
        .with_context(|| format!("--cert {}", args.cert.display()))?;
    Hierarchy::install_issuing_ca(&args.data_dir, &args.name, &pem, pass.as_deref(), &pkcs11)?;
    if let Some(family) = &args.rotates {
        let at = args.activation.unix(&loaded.config)?;
        Hierarchy::schedule_rotation(&args.data_dir, family, &args.name, at)?;
        println!(
            "{:?} takes over {family:?}'s issuance from {}",
            args.name,
            warrant_server::clock::rfc3339(at)
        );
    }
    // What `serve` will load: the whole hierarchy, the new CA with its key.
    Hierarchy::load_with(&args.data_dir, pass.as_deref(), &pkcs11)
        .context("the data dir after the install")?;
    println!("installed issuing CA {:?}", args.name);
    Ok(())
}

fn offline_root(args: &RootKeyArgs) -> Result<OfflineRoot> {
    let pass = passphrase_from(
        &args.root_passphrase_env,
        args.root_passphrase_file.as_deref(),
    )?;
    if pass.is_none() {
        bail!(
            "the root key's passphrase: set {} or --root-passphrase-file",
            args.root_passphrase_env
        );
    }
    Ok(OfflineRoot::load(
        &args.root_cert,
        &args.root_key,
        pass.as_deref().map(String::as_str),
    )?)
}

fn sign(args: SignArgs) -> Result<()> {
    let root = offline_root(&args.root)?;
    let csr = std::fs::read_to_string(&args.csr)
        .with_context(|| format!("--csr {}", args.csr.display()))?;
    let days = Duration::from_secs(args.days.saturating_mul(86_400));
    let pem = root.sign_issuing_ca(&csr, days)?;
    write_or_print(args.out.as_deref(), &pem)
}

fn root_crl(args: RootCrlArgs) -> Result<()> {
    let root = offline_root(&args.root)?;
    let now = SystemTime::now();
    let mut revoked = Vec::new();
    for spec in &args.revoked {
        let (serial, reason) = match spec.split_once(':') {
            Some((s, r)) => (
                s,
                r.parse()
                    .map_err(|e| anyhow::anyhow!("--revoke {spec}: {e}"))?,
            ),
            None => (spec.as_str(), warrant_ca::RevocationReason::Unspecified),
        };
        warrant_ca::parse_serial_hex(serial).with_context(|| format!("--revoke {spec}"))?;
        revoked.push((serial.to_string(), reason));
    }
    let entries: Vec<warrant_ca::RevokedEntry<'_>> = revoked
        .iter()
        .map(|(serial, reason)| warrant_ca::RevokedEntry {
            serial_hex: serial,
            revoked_at: now,
            reason: *reason,
        })
        .collect();
    let number = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let der = warrant_ca::build_crl(
        root.ca(),
        &entries,
        now,
        now + Duration::from_secs(args.days.max(1).saturating_mul(86_400)),
        number,
    )?;
    std::fs::write(&args.out, der).with_context(|| format!("writing {}", args.out.display()))?;
    println!(
        "root CRL #{number} with {} entr{} written to {}; copy it to each node's ca/root.crl",
        entries.len(),
        if entries.len() == 1 { "y" } else { "ies" },
        args.out.display()
    );
    Ok(())
}
