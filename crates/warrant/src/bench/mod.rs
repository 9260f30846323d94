//! `warrant bench` and `warrant bench suite`: the reference-compatible CA
//! benchmark (spec `bench.md`), driven by the Gust engine.
//!
//! The flow of one run: start (or reach) the server under test, set up a
//! bench operator and the people whose certificates sign delegations, pre-build
//! whatever the client must not pay for inside the measured window (CSRs),
//! run one Gust load model with a [`scenario::BenchSource`], then measure the
//! server's CPU, memory and DB rows, and the crypto floor on the same machine.

mod db;
mod floor;
mod http;
mod procstat;
mod report;
mod scenario;
mod server;
mod setup;
mod suite;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

pub use report::BenchReport;

#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: Option<BenchCommand>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Subcommand, Debug, Clone)]
pub enum BenchCommand {
    /// Run the T1–T5 suite of `bench.md` and write results/<timestamp>/.
    Suite(suite::SuiteArgs),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Stress,
    Random,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    Regular,
    Aic,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Keys {
    Server,
    Csr,
}

/// One benchmark run. Names follow the reference tool (`-mode`, `-agents`, …).
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// stress: agents send back to back; random: each agent waits an exponential
    /// think time (mean --interval) between requests (Gust closed model with think time).
    #[arg(long, value_enum, default_value = "stress")]
    pub mode: Mode,
    /// regular (tls-client) or aic (agent-proxy with a fresh DA per request).
    #[arg(long, value_enum, default_value = "regular")]
    pub scenario: Scenario,
    /// Measured window, e.g. 20s, 5m.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub duration: Duration,
    /// Concurrent agents (virtual users).
    #[arg(long, default_value_t = 100)]
    pub agents: usize,
    /// Principals whose certificates sign the DAs (default: = agents).
    #[arg(long)]
    pub users: Option<usize>,
    /// Global target rate in stress mode (0 = unthrottled).
    #[arg(long, default_value_t = 0.0)]
    pub qps: f64,
    /// Mean think time per agent in random mode.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub interval: Duration,
    /// SQLite path or postgres:// / mysql:// / mariadb:// URL (default: temp SQLite).
    #[arg(long)]
    pub db: Option<String>,
    /// record_buffer.max_pending of the server under test.
    #[arg(long)]
    pub maxpending: Option<usize>,
    /// device_profile of the server under test: "", low_mem, high_throughput.
    #[arg(long, default_value = "")]
    pub profile: String,
    /// durability of the server under test: durable (answer after the commit)
    /// or buffered (answer on enqueue, lossy), to measure what durability costs.
    #[arg(long, default_value = "durable", value_parser = parse_durability)]
    pub durability: warrant_store::Durability,
    /// server: the server generates each key; csr: agents send (pre-generated) CSRs.
    #[arg(long, value_enum, default_value = "server")]
    pub keys: Keys,
    /// Measure an already running server (http://host:port) instead of an embedded one.
    #[arg(long)]
    pub target: Option<String>,
    /// Bearer token for --target (an operator's token).
    #[arg(long)]
    pub token: Option<String>,
    /// Run the server as a separate process so its CPU and memory are measured alone.
    #[arg(long)]
    pub server_process: bool,
    /// Print the JSON report to stdout (instead of the text report).
    #[arg(long)]
    pub json: bool,
    /// Write the JSON report to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Progress every 5 s and the effective server config.
    #[arg(short = 'v', long = "v")]
    pub verbose: bool,
    /// Gust worker threads (default: available cores).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Size of the pre-generated CSR pool for keys=csr (reused round-robin).
    #[arg(long, default_value_t = 2048)]
    pub csr_pool: usize,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    gust_engine::parse_duration(s)
}

fn parse_durability(s: &str) -> Result<warrant_store::Durability, String> {
    warrant_store::Durability::parse(s)
        .ok_or_else(|| format!("`{s}`: expected durable or buffered"))
}

/// Rewrites reference-style single-dash long flags (`-scenario aic`,
/// `-duration=20s`) to clap's `--scenario`, for the `bench` subcommand only:
/// other subcommands keep clap's normal parsing. `-v` and `-h` stay short.
pub fn normalize_argv(args: Vec<OsString>) -> Vec<OsString> {
    let is_bench = args.get(1).and_then(|a| a.to_str()) == Some("bench");
    if !is_bench {
        return args;
    }
    args.into_iter()
        .enumerate()
        .map(|(i, a)| {
            if i < 2 {
                return a;
            }
            match a.to_str() {
                Some(s) if is_single_dash_long(s) => OsString::from(format!("-{s}")),
                _ => a,
            }
        })
        .collect()
}

fn is_single_dash_long(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('-') else {
        return false;
    };
    let name = rest.split('=').next().unwrap_or("");
    name.len() >= 2
        && !rest.starts_with('-')
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

pub fn run(args: BenchArgs) -> ExitCode {
    let result = match args.command {
        Some(BenchCommand::Suite(s)) => suite::run_suite(s),
        None => run_single(args.run),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_single(args: RunArgs) -> Result<()> {
    let report = run_bench(&args, None)?;
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(path) = &args.out {
        std::fs::write(path, format!("{json}\n"))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{json}");
    } else {
        print!("{}", report.text());
    }
    if let Some(false) = report.rows_match {
        bail!(
            "certificate_rows {} != success {}: an acknowledged certificate is missing from the DB",
            report.totals.certificate_rows.unwrap_or(0),
            report.totals.success
        );
    }
    Ok(())
}

/// Validates the flags that clap cannot check alone.
fn check_args(args: &RunArgs) -> Result<()> {
    if args.agents == 0 {
        bail!("agents: must be at least 1");
    }
    if args.users == Some(0) {
        bail!("users: must be at least 1");
    }
    if args.duration.is_zero() {
        bail!("duration: must be positive");
    }
    if !(args.qps >= 0.0 && args.qps.is_finite()) {
        bail!("qps: must be a finite number >= 0");
    }
    if args.mode == Mode::Random && args.interval.is_zero() {
        bail!("interval: must be positive in random mode");
    }
    if args.target.is_some() && args.token.is_none() {
        bail!("token: required with --target");
    }
    if args.target.is_some() && args.server_process {
        bail!("server-process: cannot be combined with --target");
    }
    server::check_server_config(&args.profile, args.maxpending)?;
    if args.target.is_some() && args.durability != warrant_store::Durability::Durable {
        bail!("durability: a --target server's durability is its own configuration");
    }
    if args.keys == Keys::Csr && args.csr_pool == 0 {
        bail!("csr-pool: must be at least 1");
    }
    Ok(())
}

/// One full run; `wall_limit` stops the load early (the suite's per-test limit).
pub fn run_bench(args: &RunArgs, wall_limit: Option<Duration>) -> Result<BenchReport> {
    check_args(args)?;
    let users = args.users.unwrap_or(args.agents);
    let sut = server::ServerUnderTest::start(args).context("starting the server under test")?;
    if args.verbose {
        eprintln!("{}", sut.describe());
    }
    let token = setup::operator_token(&sut, args)?;
    let principals = setup::create_principals(&sut, &token, users, args.scenario, args.verbose)?;
    let csrs = match args.keys {
        Keys::Csr => setup::csr_pool(args.csr_pool)?,
        Keys::Server => Vec::new(),
    };
    let before = sut.counters()?;
    let source = scenario::BenchSource::new(args, &sut.base_path, &token, principals, csrs);
    let outcome = report::drive(&sut, args, source, wall_limit)?;
    let floor = floor::measure(
        args.scenario,
        args.keys,
        users,
        outcome.report.successes,
        Duration::from_millis(300),
    )?;
    let after = sut.counters()?;
    let report = BenchReport::build(args, users, &sut, outcome, floor, before, after)?;
    sut.shutdown();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn single_dash_long_flags_become_double_dash_for_bench_only() {
        let got = normalize_argv(os(&[
            "warrant",
            "bench",
            "-scenario",
            "aic",
            "-duration=20s",
            "-v",
            "--agents",
            "5",
        ]));
        assert_eq!(
            got,
            os(&[
                "warrant",
                "bench",
                "--scenario",
                "aic",
                "--duration=20s",
                "-v",
                "--agents",
                "5"
            ])
        );
        let other = os(&["warrant", "serve", "-data-dir", "x"]);
        assert_eq!(normalize_argv(other.clone()), other);
    }

    #[test]
    fn negative_numbers_and_short_flags_are_left_alone() {
        assert!(!is_single_dash_long("-5"));
        assert!(!is_single_dash_long("-v"));
        assert!(!is_single_dash_long("--agents"));
        assert!(is_single_dash_long("-server-process"));
    }
}
