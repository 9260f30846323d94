//! The `warrant` binary: a thin shell over the library crates.
//!
//! Each subcommand lives in its own module (the benchmark in its own crate,
//! `warrant-bench`) so the CA server, the AIC tools and the benchmark can
//! evolve without touching each other.

mod admit;
mod agent;
mod aic_cli;
mod audit_cli;
mod ca_cli;
mod delegate;
mod follow;
mod server_cli;
mod token_key_cli;

use clap::{Parser, Subcommand};

/// mimalloc instead of glibc malloc: the issuance path allocates many small,
/// short-lived buffers (DER, JSON, SQL rows) across tokio threads, and glibc
/// malloc was 16 % of those threads' CPU under `warrant bench -scenario aic`.
/// Wrapped by the bench's heap sampler, which only forwards (one relaxed
/// atomic load per call) unless `warrant bench -memprofile` turns it on.
#[global_allocator]
static GLOBAL: warrant_bench::heapprof::SamplingAllocator<mimalloc::MiMalloc> =
    warrant_bench::heapprof::SamplingAllocator::new(mimalloc::MiMalloc);

#[derive(Parser)]
#[command(
    name = "warrant",
    version,
    about = "Certificate authority for people and their AI agents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a data dir: config, Root and People CAs, admin user, bootstrap token.
    Init(server_cli::InitArgs),
    /// Run the CA server (initialises an empty data dir first).
    Serve(server_cli::ServeArgs),
    /// Sign a delegation (DA) with a person's key and print the agent-proxy
    /// request body; `delegate serve` runs the person's DA signer for agents.
    Delegate(delegate::DelegateCommand),
    /// Keep an agent certificate renewed through the person's DA signer.
    Agent(agent::AgentCommand),
    /// Admit or refuse agents' requests for nginx (`auth_request`) and Envoy
    /// (`ext_authz`): docs/admission.md.
    Admit(admit::AdmitArgs),
    /// Issuing CAs under a root that signs elsewhere, and the offline
    /// root's steps (`csr`, `install`, `sign`, `root-crl`): docs/keys.md.
    #[command(subcommand)]
    Ca(ca_cli::CaCommand),
    /// Manage the AIC-JWT signing keys (rotate, list).
    #[command(name = "token-key", subcommand)]
    TokenKey(token_key_cli::TokenKeyCommand),
    /// Encode and decode AIC structures (DER <-> JSON), and inspect certificates.
    #[command(subcommand)]
    Aic(aic_cli::AicCommand),
    /// Verify AIC-JWT tokens (draft-wei-aic-jwt-02).
    #[command(name = "aic-jwt", subcommand)]
    AicJwt(aic_cli::AicJwtCommand),
    /// Verify the transparency log (`warrant audit verify`), or witness one (`warrant audit witness`).
    #[command(subcommand)]
    Audit(audit_cli::AuditCommand),
    /// Benchmark the CA (reference-compatible flags; `-flag` and `--flag` both work).
    Bench(warrant_bench::BenchArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse_from(warrant_bench::normalize_argv(std::env::args_os().collect()));
    match cli.command {
        Command::Init(args) => server_cli::run_init(args),
        Command::Serve(args) => server_cli::run_serve(args),
        Command::Delegate(cmd) => delegate::run(cmd),
        Command::Agent(cmd) => agent::run(cmd),
        Command::Admit(args) => admit::run(args),
        Command::Ca(cmd) => ca_cli::run(cmd),
        Command::TokenKey(cmd) => token_key_cli::run(cmd),
        Command::Aic(cmd) => aic_cli::run_aic(cmd),
        Command::AicJwt(cmd) => aic_cli::run_aic_jwt(cmd),
        Command::Audit(cmd) => audit_cli::run(cmd),
        Command::Bench(args) => warrant_bench::run(args),
    }
}
