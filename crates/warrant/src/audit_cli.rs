//! `warrant audit`: checks the hash chains of the audit log.

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use warrant_server::LoadedConfig;
use warrant_store::{AuditVerifyError, Store};

#[derive(Subcommand)]
pub enum AuditCommand {
    /// Check every chain of the audit log; name the first broken row.
    Verify(VerifyArgs),
}

#[derive(Args)]
pub struct VerifyArgs {
    /// The server's data dir (its `warrant.toml` names the database).
    #[arg(long, env = "WARRANT_DATA_DIR", default_value = "warrant-data")]
    pub data_dir: PathBuf,
}

/// Exit status: 0 every chain verifies, 1 a row is broken, 2 the check
/// could not run.
pub fn run(cmd: AuditCommand) -> ExitCode {
    match cmd {
        AuditCommand::Verify(args) => match verify(&args) {
            Ok(Ok(())) => ExitCode::SUCCESS,
            Ok(Err(broken)) => {
                println!("audit log BROKEN: {broken}");
                ExitCode::from(1)
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(2)
            }
        },
    }
}

fn verify(args: &VerifyArgs) -> Result<Result<(), warrant_store::ChainBreak>> {
    // Fail closed: a mistyped data dir must not open (and create) an empty
    // database whose zero chains would "verify".
    if !warrant_ca::Hierarchy::exists(&args.data_dir) {
        anyhow::bail!(
            "{} is not an initialised data dir (no CA in it)",
            args.data_dir.display()
        );
    }
    let loaded = LoadedConfig::load(&args.data_dir)
        .with_context(|| format!("loading {}", args.data_dir.display()))?;
    let rt = crate::server_cli::runtime()?;
    rt.block_on(async {
        let store = Store::open(
            &loaded.database_url(),
            warrant_server::state::store_options(&loaded.config),
        )
        .await
        .context("opening the database")?;
        let outcome = store.audit().verify().await;
        store.shutdown().await;
        match outcome {
            Ok(chains) => {
                let rows: u64 = chains.iter().map(|c| c.rows).sum();
                for c in &chains {
                    let anchor = if c.first_seq > 1 {
                        " (earlier rows pruned; first row taken as the anchor)"
                    } else {
                        ""
                    };
                    println!(
                        "chain {}: rows {}..={} ({} rows) ok{anchor}",
                        c.chain, c.first_seq, c.last_seq, c.rows
                    );
                }
                println!("audit log verified: {} chains, {rows} rows", chains.len());
                Ok(Ok(()))
            }
            Err(AuditVerifyError::Broken(b)) => Ok(Err(b)),
            Err(AuditVerifyError::Store(e)) => Err(e).context("reading the audit log"),
        }
    })
}
