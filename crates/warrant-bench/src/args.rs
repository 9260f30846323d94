//! The flags of one benchmark run. Names follow the reference tool
//! (`-mode`, `-agents`, …); see [`crate::normalize_argv`] for the single dash.

use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;
use warrant_store::Durability;

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
    pub durability: Durability,
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
    /// Reference flag (its in-memory engine). Accepted; changes nothing: Warrant
    /// always keeps the nonce ledger and recent certificates in memory with a
    /// durable group commit. The report says so.
    #[arg(long)]
    pub engine: bool,
    /// Reference flag: answer only after the commit. Means --durability durable
    /// (Warrant's default); refused together with --durability buffered.
    #[arg(long)]
    pub sync: bool,
    /// Listen port of the embedded or child server (0 or absent: a free one).
    #[arg(long)]
    pub port: Option<u16>,
    /// Write a pprof CPU profile of this process over the measured window.
    #[arg(long)]
    pub cpuprofile: Option<PathBuf>,
    /// Write a pprof heap profile (sampled allocations) of this process.
    #[arg(long)]
    pub memprofile: Option<PathBuf>,
}

pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    gust_engine::parse_duration(s)
}

fn parse_durability(s: &str) -> Result<Durability, String> {
    Durability::parse(s).ok_or_else(|| format!("`{s}`: expected durable or buffered"))
}

#[cfg(test)]
pub(crate) fn default_run_args() -> RunArgs {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }
    Cli::parse_from(["bench"]).run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_reference_tool() {
        let a = default_run_args();
        assert_eq!(
            (a.mode, a.scenario, a.keys),
            (Mode::Stress, Scenario::Regular, Keys::Server)
        );
        assert_eq!(a.duration, Duration::from_secs(300));
        assert_eq!(a.interval, Duration::from_secs(600));
        assert_eq!((a.agents, a.users, a.csr_pool), (100, None, 2048));
        assert_eq!(a.durability, Durability::Durable);
    }

    #[test]
    fn bad_durations_and_durabilities_name_the_value() {
        assert!(parse_duration("soon").is_err());
        let e = parse_durability("eventually").unwrap_err();
        assert!(e.contains("eventually"), "{e}");
    }
}
