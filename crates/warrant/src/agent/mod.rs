//! `warrant agent`: keeps an agent-proxy certificate (and optionally an
//! AIC-JWT) fresh, like `step ca renew --daemon`. Each renewal asks the
//! person's signer (`warrant delegate serve`) for a DA bound to the agent's
//! key, posts it with the CSR to the CA, writes the files atomically, and
//! runs the hook. Transient failures back off; a final refusal stops the
//! agent with a non-zero exit and a one-line reason.

pub mod client;
pub mod files;
pub mod schedule;

use crate::delegate::protocol::{DaKind, DaRequest};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use client::{Ca, Issued, RenewError, SignerAddr};
use files::{CERT, CHAIN, KEY, State};
use schedule::Disposition;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// A local problem (arguments, files) or `--once` out of retries.
pub const EXIT_ERROR: u8 = 1;
/// The CA refused for good: revoked or untrusted principal, bad token, a
/// request the CA will never accept.
pub const EXIT_CA_REFUSED: u8 = 2;
/// The signer refused for good: no grant (unknown or withdrawn agent), a
/// capability or lifetime outside it, its window ended, key mismatch.
pub const EXIT_SIGNER_REFUSED: u8 = 3;

/// Longest backoff between attempts.
const BACKOFF_CAP: Duration = Duration::from_secs(60);
/// With `--once`: transient failures retried before giving up.
const ONCE_ATTEMPTS: u32 = 6;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct AgentCommand {
    #[command(subcommand)]
    pub command: Option<AgentSub>,
    #[command(flatten)]
    pub run: Option<AgentArgs>,
}

#[derive(Subcommand)]
pub enum AgentSub {
    /// Print the agent's expiry, capabilities, last renewal and last error.
    Status {
        /// The agent's directory.
        #[arg(long)]
        dir: PathBuf,
    },
}

#[derive(Args)]
pub struct AgentArgs {
    /// The CA's base URL, e.g. http://127.0.0.1:8443.
    #[arg(long)]
    pub ca_url: String,
    /// The person's signer: `unix:PATH`, or `https://HOST:PORT` (mTLS with
    /// the agent's current certificate, so only for renewals).
    #[arg(long)]
    pub signer: String,
    /// A file holding a bearer token with `cert:issue`.
    #[arg(long)]
    pub token_file: PathBuf,
    #[arg(long)]
    pub agent_id: String,
    /// Where the key, certificate, chain and state live (created 0700).
    #[arg(long)]
    pub dir: PathBuf,
    /// Requested certificate lifetime, seconds (absent: the grant's max_da_lifetime).
    #[arg(long)]
    pub lifetime: Option<i64>,
    /// `scheme:id`, repeatable (absent: every granted capability).
    #[arg(long = "capability")]
    pub capabilities: Vec<String>,
    /// Run after each renewal, with `sh -c`.
    #[arg(long)]
    pub exec: Option<String>,
    /// Signal a process after each renewal: `PID:HUP` (HUP, USR1, USR2, TERM).
    #[arg(long)]
    pub signal: Option<String>,
    /// Also keep an AIC-JWT (from `POST /oauth/token`) in this file.
    #[arg(long)]
    pub jwt_out: Option<PathBuf>,
    /// With --jwt-out: the token issuer the DA JWT is addressed to (`aud`).
    #[arg(long, requires = "jwt_out")]
    pub audience: Option<String>,
    /// One issuance, then exit.
    #[arg(long)]
    pub once: bool,
}

pub fn run(cmd: AgentCommand) -> ExitCode {
    match (cmd.command, cmd.run) {
        (Some(AgentSub::Status { dir }), _) => crate::server_cli::report(status(&dir)),
        (None, Some(args)) => match Agent::new(args) {
            Ok(agent) => agent.run(),
            Err(e) => {
                eprintln!("warrant agent: {e:#}");
                ExitCode::from(EXIT_ERROR)
            }
        },
        (None, None) => {
            eprintln!("warrant agent: expected --ca-url … or the status subcommand");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

fn status(dir: &Path) -> Result<()> {
    match State::load(dir)? {
        Some(s) => {
            print!("{}", s.render());
            Ok(())
        }
        None => anyhow::bail!(
            "{}: no state.json (the agent has not run here)",
            dir.display()
        ),
    }
}

struct Agent {
    args: AgentArgs,
    signer: SignerAddr,
    signal: Option<schedule::SignalTarget>,
    ca: Ca,
    key: rcgen::KeyPair,
    state: State,
}

fn now() -> i64 {
    warrant_server::clock::unix_now()
}

fn jitter() -> f64 {
    let mut b = [0u8; 4];
    let _ = aws_lc_rs::rand::fill(&mut b);
    f64::from(u32::from_le_bytes(b)) / f64::from(u32::MAX) * 2.0 - 1.0
}

/// Loads the agent key, or makes one (P-256, written 0600) if it is missing.
fn load_or_create_key(dir: &Path) -> Result<rcgen::KeyPair> {
    let path = dir.join(KEY);
    match std::fs::read_to_string(&path) {
        Ok(pem) => rcgen::KeyPair::from_pem(&pem).with_context(|| format!("{}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
                .context("generating the agent key")?;
            files::write_atomic(dir, KEY, key.serialize_pem().as_bytes(), 0o600)?;
            Ok(key)
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

impl Agent {
    fn new(args: AgentArgs) -> Result<Agent> {
        let signer = SignerAddr::parse(&args.signer).map_err(anyhow::Error::msg)?;
        let signal = args
            .signal
            .as_deref()
            .map(schedule::parse_signal)
            .transpose()
            .map_err(anyhow::Error::msg)?;
        for c in &args.capabilities {
            crate::delegate::da::Cap::parse(c)
                .with_context(|| format!("--capability {c:?}: expected scheme:id"))?;
        }
        let token = std::fs::read_to_string(&args.token_file)
            .with_context(|| format!("reading {}", args.token_file.display()))?
            .trim()
            .to_string();
        anyhow::ensure!(!token.is_empty(), "{}: empty", args.token_file.display());
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&args.dir)
                .with_context(|| format!("creating {}", args.dir.display()))?;
        }
        let key = load_or_create_key(&args.dir)?;
        // An unreadable state.json only costs the schedule: renew now.
        let state = match State::load(&args.dir) {
            Ok(s) => s.unwrap_or_default(),
            Err(e) => {
                eprintln!("warrant agent: {e:#}; starting from a fresh state");
                State::default()
            }
        };
        Ok(Agent {
            ca: Ca::new(&args.ca_url, token)?,
            signer,
            signal,
            key,
            state,
            args,
        })
    }

    fn csr(&self) -> Result<String> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, self.args.agent_id.clone());
        Ok(params.serialize_request(&self.key)?.pem()?)
    }

    fn da_request(&self, kind: DaKind) -> Result<DaRequest> {
        Ok(DaRequest {
            agent_id: self.args.agent_id.clone(),
            csr_pem: self.csr()?,
            capabilities: self.args.capabilities.clone(),
            lifetime: self.args.lifetime,
            kind,
            audience: self.args.audience.clone(),
        })
    }

    /// One renewal: DA, certificate, chain, files. Returns when to renew next.
    async fn renew(&mut self) -> Result<i64, RenewError> {
        let asked_at = now();
        let da = client::request_da(
            &self.signer,
            &self.args.dir,
            &self.da_request(DaKind::Certificate)?,
        )
        .await?;
        let body = da
            .cert_request
            .ok_or_else(|| anyhow::anyhow!("the signer's answer has no cert_request"))?;
        let capabilities: Vec<String> = body["capabilities"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|c| {
                        format!(
                            "{}:{}",
                            c["scheme_id"].as_str().unwrap_or_default(),
                            c["capability_id"].as_str().unwrap_or_default()
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let issued: Issued = self.ca.issue(&body).await?;
        let chain = format!(
            "{}{}",
            self.ca.ca_pem(&issued.ca).await?,
            self.ca.ca_pem("root").await?
        );
        let not_before = aic::time::parse_rfc3339(&issued.not_before)
            .ok_or_else(|| anyhow::anyhow!("not_before {:?}", issued.not_before))?;
        let not_after = aic::time::parse_rfc3339(&issued.not_after)
            .ok_or_else(|| anyhow::anyhow!("not_after {:?}", issued.not_after))?;
        // The chain first, then the certificate: a reader that sees the new
        // certificate also sees a chain for it (and the key never changes).
        files::write_atomic(&self.args.dir, CHAIN, chain.as_bytes(), 0o644)?;
        files::write_atomic(&self.args.dir, CERT, issued.cert_pem.as_bytes(), 0o644)?;
        let mut next = schedule::renew_at(not_before.max(asked_at), not_after, jitter());
        if let Some(out) = self.args.jwt_out.clone() {
            let jwt_expiry = self.refresh_jwt(&out).await?;
            next = next.min(schedule::renew_at(asked_at, jwt_expiry, jitter()));
            self.state.jwt_expires = Some(aic::time::format_rfc3339(jwt_expiry));
        }
        self.state.serial = Some(issued.serial_number);
        self.state.ca = Some(issued.ca);
        self.state.not_before = Some(issued.not_before);
        self.state.not_after = Some(issued.not_after);
        self.state.capabilities = capabilities;
        self.state.last_renewal = Some(aic::time::format_rfc3339(now()));
        self.state.next_renewal = Some(aic::time::format_rfc3339(next));
        self.state.last_error = None;
        self.state.last_error_time = None;
        self.state.save(&self.args.dir)?;
        Ok(next)
    }

    /// A fresh DA JWT from the signer, traded at `/oauth/token`; returns the
    /// token's expiry.
    async fn refresh_jwt(&self, out: &Path) -> Result<i64, RenewError> {
        let asked_at = now();
        let da = client::request_da(&self.signer, &self.args.dir, &self.da_request(DaKind::Jwt)?)
            .await?;
        let da_jwt = da
            .da_jwt
            .ok_or_else(|| anyhow::anyhow!("the signer's answer has no da_jwt"))?;
        let answer = self.ca.aic_jwt(&da_jwt).await?;
        let dir = out
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = out
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| anyhow::anyhow!("--jwt-out {}: not a file name", out.display()))?;
        files::write_atomic(dir, name, answer.access_token.as_bytes(), 0o600)?;
        Ok(asked_at + answer.expires_in.unwrap_or(da.lifetime))
    }

    /// `--exec` and `--signal`, after each renewal. A failing hook is logged,
    /// not fatal: the certificate on disk is good either way.
    async fn run_hooks(&self) {
        if let Some(cmd) = &self.args.exec {
            match tokio::process::Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .status()
                .await
            {
                Ok(s) if s.success() => {}
                Ok(s) => eprintln!("warrant agent: --exec {cmd:?} exited with {s}"),
                Err(e) => eprintln!("warrant agent: --exec {cmd:?}: {e}"),
            }
        }
        if let Some(t) = self.signal {
            // SAFETY: kill(2) with a pid and signal number; no memory involved.
            if unsafe { libc::kill(t.pid, t.signal) } != 0 {
                eprintln!(
                    "warrant agent: --signal {}: {}",
                    t.pid,
                    std::io::Error::last_os_error()
                );
            }
        }
    }

    fn record_error(&mut self, e: &RenewError) {
        self.state.last_error = Some(e.to_string());
        self.state.last_error_time = Some(aic::time::format_rfc3339(now()));
        if let Err(e) = self.state.save(&self.args.dir) {
            eprintln!("warrant agent: {e:#}");
        }
    }

    /// When the certificate on disk (if any) is due for renewal.
    fn due_from_state(&self) -> Option<i64> {
        let nb = aic::time::parse_rfc3339(self.state.not_before.as_deref()?)?;
        let na = aic::time::parse_rfc3339(self.state.not_after.as_deref()?)?;
        let jwt_ok = self.args.jwt_out.is_none() || self.state.jwt_expires.is_some();
        (self.args.dir.join(CERT).exists() && jwt_ok).then(|| schedule::renew_at(nb, na, jitter()))
    }

    fn run(mut self) -> ExitCode {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("warrant agent: starting the runtime: {e}");
                return ExitCode::from(EXIT_ERROR);
            }
        };
        rt.block_on(async move {
            let stop = crate::server_cli::shutdown_signal();
            tokio::pin!(stop);
            let mut due = if self.args.once {
                None
            } else {
                self.due_from_state()
            };
            let mut attempt = 0u32;
            loop {
                if let Some(at) = due {
                    let wait = Duration::from_secs(u64::try_from(at - now()).unwrap_or(0));
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = &mut stop => return ExitCode::SUCCESS,
                    }
                }
                let result = tokio::select! {
                    r = self.renew() => r,
                    _ = &mut stop => return ExitCode::SUCCESS,
                };
                match result {
                    Ok(next) => {
                        attempt = 0;
                        println!(
                            "warrant agent: renewed {} (serial {}, expires {}); next renewal {}",
                            self.args.agent_id,
                            self.state.serial.as_deref().unwrap_or("-"),
                            self.state.not_after.as_deref().unwrap_or("-"),
                            aic::time::format_rfc3339(next)
                        );
                        self.run_hooks().await;
                        if self.args.once {
                            return ExitCode::SUCCESS;
                        }
                        due = Some(next);
                    }
                    Err(e) => {
                        self.record_error(&e);
                        if e.disposition() == Disposition::Stop {
                            eprintln!("warrant agent: stopped: {e}");
                            return ExitCode::from(e.exit_code());
                        }
                        if self.args.once && attempt + 1 >= ONCE_ATTEMPTS {
                            eprintln!(
                                "warrant agent: giving up after {ONCE_ATTEMPTS} attempts: {e}"
                            );
                            return ExitCode::from(EXIT_ERROR);
                        }
                        let wait = schedule::backoff(attempt, BACKOFF_CAP, e.retry_after());
                        attempt = attempt.saturating_add(1);
                        eprintln!("warrant agent: {e}; retrying in {}s", wait.as_secs());
                        due = Some(now() + i64::try_from(wait.as_secs()).unwrap_or(i64::MAX / 2));
                    }
                }
            }
        })
    }
}
