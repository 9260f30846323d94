//! `gust`: the command-line front end of the Gust load engine.
//!
//! A thin binary: flags become a [`RunSpec`], the engine runs it, and this crate only
//! renders (text, JSON, CSV, HdrHistogram log, JUnit) and maps the verdict to an
//! exit code: 0 = pass, 1 = a threshold was violated, 2 = the run could not run.
#![forbid(unsafe_code)]

mod capacity_cmd;
mod client;
mod daemon;
mod daemon_client;
mod dashboard;
mod mcp;
mod merge_cmd;
mod monitor_output;
mod output;
mod segment_args;
mod segment_stream;
mod spec_file;

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use gust_engine::threshold::{self, Threshold};
use gust_engine::{
    LoadModel, RunSpec, Stall, TargetConfig, TargetServer, ThinkTime, TlsOptions, parse_duration,
    parse_stages,
};

#[derive(Parser, Debug)]
#[command(
    name = "gust",
    version,
    about = "HTTP load generator: wrk's speed, wrk2's honest latency (no coordinated omission)",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    load: LoadArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve a fixed response: a built-in target for tests and benchmarks.
    Target(TargetArgs),
    /// Run the daemon: REST API, live SSE, SQLite history and the web dashboard.
    Serve(ServeArgs),
    /// Run a TOML spec locally or on a daemon (--daemon URL --wait): the CI gate.
    Run(client::RunArgs),
    /// Find the highest open-model rate that meets an SLO (growth, then bisection).
    Capacity(capacity_cmd::CapacityArgs),
    /// Merge the JSON reports of a run's segments (--segment) into one report.
    Merge(merge_cmd::MergeArgs),
    /// MCP server on stdio for coding agents: standalone, or driving a daemon (--daemon URL).
    Mcp(mcp::McpArgs),
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// Address to listen on; a non-loopback address requires a token.
    #[arg(long, default_value = "127.0.0.1:9876")]
    listen: SocketAddr,
    /// SQLite history file.
    #[arg(long, default_value = "gust-history.db")]
    db: PathBuf,
    /// Bearer token required on every API call (default: env GUST_TOKEN).
    #[arg(long, env = "GUST_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Keep at most this many runs (baselines exempt).
    #[arg(long, default_value_t = 200)]
    retain_runs: u32,
    /// Delete runs older than this many days (baselines exempt).
    #[arg(long, default_value_t = 30)]
    retain_days: u32,
    /// Default worker threads for runs whose spec sets none (default: cores).
    #[arg(long)]
    workers: Option<usize>,
}

#[derive(Args, Debug)]
struct TargetArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Response body text.
    #[arg(long, conflicts_with = "body_size")]
    body: Option<String>,
    /// Response body of N bytes of 'x'.
    #[arg(long)]
    body_size: Option<usize>,
    /// Response status code.
    #[arg(long, default_value_t = 200)]
    status: u16,
    /// Delay before each response (e.g. 5ms).
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    delay: Duration,
    /// Stall all responses periodically: every this long ...
    #[arg(long, value_parser = parse_duration, requires = "stall_for")]
    stall_every: Option<Duration>,
    /// ... for this long (at the end of each period).
    #[arg(long, value_parser = parse_duration, requires = "stall_every")]
    stall_for: Option<Duration>,
    /// Server threads (default: available cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Serve HTTP/2 with prior knowledge (h2c) instead of HTTP/1.1.
    #[arg(long)]
    http2: bool,
}

#[derive(Args, Debug)]
struct LoadArgs {
    /// Target URL (http:// or https://).
    #[arg(required = true)]
    url: Option<String>,
    /// Closed model: concurrent requests (one connection each on HTTP/1.1).
    /// Open model: connection budget.
    #[arg(short = 'c', long = "connections")]
    connections: Option<usize>,
    /// Run duration (e.g. 10s, 1m). Default 10s unless -n or --stages is given.
    #[arg(short = 'd', long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Stop after exactly this many requests.
    #[arg(short = 'n', long = "requests")]
    requests: Option<u64>,
    /// Worker threads (default: available cores).
    #[arg(short = 't', long = "threads")]
    threads: Option<usize>,
    /// Open model: requests per second (any positive real number).
    #[arg(short = 'R', long)]
    rate: Option<f64>,
    /// Ramp: DURATION:TARGET,... (target = rate with --open, else concurrency).
    #[arg(long)]
    stages: Option<String>,
    /// Use the open model with --stages (rates rather than concurrencies).
    #[arg(long)]
    open: bool,
    /// HTTP method.
    #[arg(short = 'm', long, default_value = "GET")]
    method: String,
    /// Request header "Name: value" (repeatable).
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
    /// Request body.
    #[arg(long, conflicts_with = "body_file")]
    body: Option<String>,
    /// Request body from a file.
    #[arg(long)]
    body_file: Option<PathBuf>,
    /// Per-request timeout (connect + response).
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// Time given to in-flight requests after the deadline (default: timeout).
    #[arg(long, value_parser = parse_duration)]
    grace: Option<Duration>,
    /// Closed model: pause after each response (fixed).
    #[arg(long, value_parser = parse_duration)]
    think: Option<Duration>,
    /// Use HTTP/2 (h2c prior knowledge on http://, ALPN on https://).
    #[arg(long)]
    http2: bool,
    /// Open a new connection (and TLS session) for every request and close it after
    /// the response.
    #[arg(long)]
    no_keepalive: bool,
    /// CA certificates (PEM) to trust.
    #[arg(long)]
    cacert: Option<PathBuf>,
    /// Client certificate chain (PEM) for mTLS.
    #[arg(long, requires = "key")]
    cert: Option<PathBuf>,
    /// Client private key (PEM).
    #[arg(long, requires = "cert")]
    key: Option<PathBuf>,
    /// Accept any server certificate.
    #[arg(short = 'k', long)]
    insecure: bool,
    /// Open model: bound on outstanding requests; more are dropped and counted.
    #[arg(long)]
    max_in_flight: Option<usize>,
    /// Largest response body accepted, in bytes (bigger is an error).
    #[arg(long)]
    max_body: Option<u64>,
    /// Statuses that count as success, e.g. "2xx,3xx" (default) or "200,404".
    #[arg(long)]
    success_status: Option<String>,
    /// Live tick period (must divide 1s).
    #[arg(long, value_parser = parse_duration)]
    tick: Option<Duration>,
    /// Print the JSON report (versioned schema, see README) on stdout instead of text.
    #[arg(long)]
    json: bool,
    /// Write the per-second series as CSV.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write an HdrHistogram interval log (one corrected-latency histogram per second).
    #[arg(long)]
    hdr_log: Option<PathBuf>,
    /// Pass/fail condition, e.g. 'p99<50ms', 'errors<0.1%', 'rps>1000' (repeatable).
    #[arg(long = "threshold")]
    thresholds: Vec<String>,
    /// Write a JUnit XML report of the thresholds.
    #[arg(long)]
    junit: Option<PathBuf>,
    /// Replay a targets file in vegeta's format (METHOD URL, header lines, @body),
    /// cycling through its requests.
    #[arg(long, conflicts_with_all = ["body", "body_file"])]
    targets: Option<PathBuf>,
    /// Print the validated run configuration as JSON and exit.
    #[arg(long)]
    print_config: bool,
    #[command(flatten)]
    monitor: MonitorArgs,
    #[command(flatten)]
    segment: segment_args::SegmentArgs,
}

/// Target monitoring (README "Target monitoring").
#[derive(Args, Debug)]
struct MonitorArgs {
    /// Scrape this Prometheus endpoint every second during the run (repeatable).
    #[arg(long = "monitor", value_name = "URL")]
    monitor_urls: Vec<String>,
    /// Keep only these series of --monitor: a name or a glob like 'warrant_*'
    /// (repeatable; default: every counter and gauge, capped).
    #[arg(long = "monitor-metric", value_name = "NAME|GLOB")]
    monitor_metrics: Vec<String>,
    /// Sample this local process's CPU and RSS every second (repeatable).
    #[arg(long = "monitor-pid", value_name = "PID")]
    monitor_pids: Vec<u32>,
    /// Write the monitor series as long-format CSV (one row per point).
    #[arg(long = "monitor-csv", value_name = "FILE")]
    monitor_csv: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Target(args)) => run_target(args),
        Some(Command::Serve(args)) => run_serve(args),
        Some(Command::Run(args)) => client::run(args),
        Some(Command::Capacity(args)) => capacity_cmd::run(args),
        Some(Command::Merge(args)) => merge_cmd::run(args),
        Some(Command::Mcp(args)) => mcp::run(args),
        None => match run_load(cli.load) {
            Ok(code) => code,
            Err(message) => {
                eprintln!("gust: {message}");
                ExitCode::from(2)
            }
        },
    }
}

fn run_serve(args: ServeArgs) -> ExitCode {
    if args.retain_runs == 0 || args.retain_days == 0 {
        eprintln!("gust serve: --retain-runs and --retain-days must be at least 1");
        return ExitCode::from(2);
    }
    let opts = daemon::ServeOptions {
        listen: args.listen,
        db: args.db,
        token: args.token,
        retention: daemon::store::Retention {
            max_runs: args.retain_runs,
            max_age_days: args.retain_days,
        },
        workers: args.workers,
    };
    match daemon::serve(opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gust serve: {e}");
            ExitCode::from(2)
        }
    }
}

fn run_target(args: TargetArgs) -> ExitCode {
    let body = match (args.body, args.body_size) {
        (Some(text), _) => text.into_bytes(),
        (None, Some(n)) => vec![b'x'; n],
        (None, None) => TargetConfig::default().body,
    };
    let stall = match (args.stall_every, args.stall_for) {
        (Some(every), Some(length)) if length < every => Some(Stall { every, length }),
        (Some(_), Some(_)) => {
            eprintln!("gust target: --stall-for must be shorter than --stall-every");
            return ExitCode::from(2);
        }
        _ => None,
    };
    let cfg = TargetConfig {
        body,
        status: args.status,
        delay: args.delay,
        stall,
        threads: args
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        http2: args.http2,
    };
    match TargetServer::start(args.listen, cfg) {
        Ok(server) => {
            eprintln!("gust target listening on {}", server.url());
            server.join();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gust target: cannot listen on {}: {e}", args.listen);
            ExitCode::from(2)
        }
    }
}

fn build_spec(a: &LoadArgs) -> Result<RunSpec, String> {
    let url = a.url.clone().ok_or("a URL is required")?;
    let stages = a.stages.as_deref().map(parse_stages).transpose()?;
    let open = a.rate.is_some() || a.open;
    if a.open && a.rate.is_none() && stages.is_none() {
        return Err("--open needs --rate or --stages".into());
    }
    if a.think.is_some() && open {
        return Err("--think applies to the closed model only".into());
    }
    let model = if open {
        LoadModel::Open {
            rate: a.rate.unwrap_or(0.0),
            stages: stages.unwrap_or_default(),
        }
    } else {
        LoadModel::Closed {
            concurrency: if stages.is_some() {
                0
            } else {
                a.connections.unwrap_or(10)
            },
            stages: stages.unwrap_or_default(),
            think_time: a
                .think
                .map_or(ThinkTime::None, |time| ThinkTime::Fixed { time }),
        }
    };
    let has_stages = match &model {
        LoadModel::Open { stages, .. } | LoadModel::Closed { stages, .. } => !stages.is_empty(),
    };
    let mut headers = Vec::new();
    for h in &a.headers {
        let (name, value) = h
            .split_once(':')
            .ok_or_else(|| format!("header {h:?} must be 'Name: value'"))?;
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
    let body = match (&a.body, &a.body_file) {
        (Some(b), _) => Some(b.clone().into_bytes()),
        // Any bytes: a binary body (an OCSP request) is sent as it is.
        (None, Some(path)) => Some(
            std::fs::read(path)
                .map_err(|e| format!("cannot read --body-file {}: {e}", path.display()))?,
        ),
        (None, None) => None,
    };
    let mut spec = RunSpec::new(url, model);
    spec.method = a.method.clone();
    spec.headers = headers;
    spec.body = body;
    spec.duration = match (a.duration, a.requests, has_stages) {
        (Some(d), _, _) => Some(d),
        (None, None, false) => Some(Duration::from_secs(10)),
        _ => None,
    };
    spec.iterations = a.requests;
    spec.workers = a.threads;
    if open || a.http2 {
        spec.connections = a.connections;
    }
    spec.timeout = a.timeout;
    spec.grace = a.grace;
    spec.max_body = a.max_body;
    spec.max_in_flight = a.max_in_flight;
    spec.http2 = a.http2;
    spec.no_keepalive = a.no_keepalive;
    spec.tls = TlsOptions {
        ca_file: a.cacert.clone(),
        cert_file: a.cert.clone(),
        key_file: a.key.clone(),
        insecure: a.insecure,
    };
    spec.tick = a.tick;
    spec.success_status = a.success_status.clone();
    spec.targets = a.targets.clone();
    spec.monitor = a.monitor.monitor_urls.clone();
    spec.monitor_metric = a.monitor.monitor_metrics.clone();
    spec.monitor_pid = a.monitor.monitor_pids.clone();
    a.segment.apply(&mut spec)?;
    Ok(spec)
}

fn run_load(a: LoadArgs) -> Result<ExitCode, String> {
    let spec = build_spec(&a)?;
    let thresholds: Vec<Threshold> = a
        .thresholds
        .iter()
        .map(|t| threshold::parse(t))
        .collect::<Result<_, _>>()?;
    let steps: Vec<String> = spec.steps.iter().map(|s| s.name.clone()).collect();
    threshold::check_step_names(&thresholds, &steps)?;
    let cfg = spec.validate().map_err(|e| e.to_string())?;
    if a.print_config {
        let text = serde_json::to_string_pretty(&spec).map_err(|e| e.to_string())?;
        println!("{text}");
        return Ok(ExitCode::SUCCESS);
    }
    if !a.json {
        println!("{}", output::banner(&cfg));
    }
    let mut handle = gust_engine::start(cfg.clone()).map_err(|e| e.to_string())?;
    let events = handle.take_events();
    let progress = std::io::stderr().is_terminal();
    let consumer = output::EventConsumer::new(progress, cfg.duration, a.hdr_log.clone())
        .map_err(|e| e.to_string())?;
    let consumer_thread = events.map(|rx| std::thread::spawn(move || consumer.run(rx)));
    let report = handle.wait();
    if let Some(t) = consumer_thread {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err("progress thread failed".into()),
        }
    }
    let verdicts: Vec<_> = thresholds.iter().map(|t| t.check(&report)).collect();
    if a.json {
        println!("{}", output::json(&spec, &report, &verdicts)?);
    } else {
        print!("{}", output::text(&report, &verdicts));
    }
    if let Some(path) = &a.csv {
        output::write_csv(path, &report)?;
    }
    if let Some(path) = &a.monitor.monitor_csv {
        output::write_file(path, monitor_output::csv(&report.monitor))?;
    }
    if let Some(path) = &a.junit {
        output::write_file(path, output::junit(&report, &verdicts))?;
    }
    Ok(output::exit_code(&verdicts))
}
