//! `warrant bench` and `warrant bench suite`: the reference-compatible CA
//! benchmark (spec `bench.md`), driven by the Gust engine.
//!
//! The `warrant` binary flattens [`BenchArgs`] into its `bench` subcommand,
//! passes its argv through [`normalize_argv`] and calls [`run`]; it parses
//! nothing else itself. `--server-process` runs the server under test as
//! `<current exe> serve`, so the library expects to run inside `warrant`.
//!
//! The flow of one run ([`run_bench`]): start (or reach) the server under
//! test, set up a bench operator and the people whose certificates sign
//! delegations, pre-build whatever the client must not pay for inside the
//! measured window (CSRs), run one Gust load model with a bench request
//! source, then measure the server's CPU (per group of threads), memory and
//! DB rows, and the crypto floor on the same machine.

mod args;
mod argv;
mod burst;
mod chart;
mod db;
mod dbadmin;
mod floor;
pub mod heapprof;
mod host;
mod http;
mod load;
mod procstat;
mod profile;
mod report;
mod run;
mod scenario;
mod server;
mod setup;
mod soak;
mod suite;
mod threads;

use clap::{Args, Subcommand};
use std::process::ExitCode;

pub use args::{Keys, Mode, RunArgs, Scenario};
pub use argv::normalize_argv;
pub use burst::BurstArgs;
pub use floor::Floor;
pub use host::HostFacts;
pub use report::{BenchReport, Totals};
pub use run::run_bench;
pub use soak::SoakArgs;
pub use suite::SuiteArgs;

// `warrant bench [FLAGS]` (one run) or `warrant bench suite [FLAGS]`. (A doc
// comment here would become the subcommand's help text.)
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
    Suite(SuiteArgs),
    /// The fleet day compressed: agent issuances at a constant rate with
    /// short-lived certificates and retention; samples every 10 s, chart,
    /// pass/fail (exit 0 pass, 1 fail, 2 could not run).
    Soak(SoakArgs),
    /// The wake-up burst: N agents, one connection each, one issuance each,
    /// all released at once; time until all are served.
    Burst(BurstArgs),
}

/// Runs what the command line asked for; errors are printed to stderr.
pub fn run(args: BenchArgs) -> ExitCode {
    let result = match args.command {
        // These two decide their own exit codes (pass/fail/could not run).
        Some(BenchCommand::Soak(s)) => return soak::run_soak(s),
        Some(BenchCommand::Burst(b)) => return burst::run_burst(b),
        Some(BenchCommand::Suite(s)) => suite::run_suite(s),
        None => run::run_single(args.run),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
