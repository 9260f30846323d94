//! `warrant init` and `warrant serve`.

use anyhow::{Context, Result, bail};
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
    /// Keep the CA and token-signing keys in this PKCS#11 token (an RFC 7512
    /// URI naming the token and, with `module-path`, its library). Keys
    /// labelled `warrant-root`, `warrant-people` and `warrant-jwt-<time>`
    /// are created there, or used if present. The PIN comes from
    /// `keys.pkcs11_pin_env` (default `WARRANT_PKCS11_PIN`) or
    /// `keys.pkcs11_pin_file`, never from the URI.
    #[arg(long, value_name = "URI")]
    pub pkcs11: Option<String>,
    /// Use an existing key of the token for one purpose instead:
    /// `root=URI`, `people=URI` or `jwt=URI`. Repeatable.
    #[arg(long = "pkcs11-key", value_name = "NAME=URI", requires = "pkcs11")]
    pub pkcs11_keys: Vec<String>,
    /// Keep the root offline: its key is written only to DIR (encrypted with
    /// the passphrase in --root-passphrase-env), for the operator to move
    /// away; the data dir keeps the root's certificate only.
    #[arg(long, value_name = "DIR", conflicts_with = "root_cert")]
    pub root_offline: Option<PathBuf>,
    /// Env var holding the passphrase of the offline root's export.
    #[arg(long, default_value = "WARRANT_ROOT_PASSPHRASE")]
    pub root_passphrase_env: String,
    /// File holding that passphrase (when the env var is unset).
    #[arg(long)]
    pub root_passphrase_file: Option<PathBuf>,
    /// Use this root (PEM, self-signed), whose key is elsewhere: no issuing
    /// CA is made; add one with `warrant ca csr` and `warrant ca install`.
    #[arg(long, value_name = "FILE")]
    pub root_cert: Option<PathBuf>,
}

impl InitArgs {
    fn keys(&self) -> Result<warrant_server::InitKeys> {
        let mut keys = warrant_server::InitKeys {
            pkcs11_token: self
                .pkcs11
                .as_deref()
                .map(warrant_ca::Pkcs11Uri::parse)
                .transpose()
                .context("--pkcs11")?,
            ..Default::default()
        };
        if let Some(dir) = &self.root_offline {
            let passphrase = crate::ca_cli::passphrase_from(
                &self.root_passphrase_env,
                self.root_passphrase_file.as_deref(),
            )?
            .with_context(|| {
                format!(
                    "--root-offline: the export is encrypted; set {} or --root-passphrase-file",
                    self.root_passphrase_env
                )
            })?;
            keys.root_export = Some(warrant_ca::RootExport {
                dir: dir.clone(),
                passphrase,
            });
        }
        if let Some(path) = &self.root_cert {
            keys.external_root_pem = Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("--root-cert {}", path.display()))?,
            );
        }
        for spec in &self.pkcs11_keys {
            let (name, uri) = spec
                .split_once('=')
                .filter(|(n, _)| warrant_server::INIT_KEY_NAMES.contains(n))
                .with_context(|| {
                    format!("--pkcs11-key {spec:?}: expected root=URI, people=URI or jwt=URI")
                })?;
            let uri = warrant_ca::Pkcs11Uri::parse(uri)
                .with_context(|| format!("--pkcs11-key {name}"))?;
            if keys.pkcs11_keys.insert(name.to_string(), uri).is_some() {
                bail!("--pkcs11-key {name} is given twice");
            }
        }
        Ok(keys)
    }
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
        let keys = args.keys()?;
        let rt = runtime()?;
        let r = rt.block_on(warrant_server::init_data_dir_with(
            &args.data_dir,
            args.admin_password,
            &keys,
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

pub(crate) async fn shutdown_signal() {
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
