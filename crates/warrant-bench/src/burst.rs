//! `warrant bench burst`: the wake-up burst. N agents, each on its own TCP
//! connection, each sending one agent issuance at the same instant (agents
//! waking together after an outage or at the start of a shift), and how long
//! the CA takes until every one of them holds a certificate.
//!
//! Everything that is not the burst happens before t = 0: the people and
//! their certificates, one signed DA per agent, and the N connections. Then
//! one release lets every agent write its request. A 503 or 429 that carries
//! `Retry-After` is what a well-behaved agent retries (after the delay, with
//! jitter, with a fresh DA); those are counted apart from errors.
//!
//! The request writer and the response reader are minimal HTTP/1.1 on a
//! tokio `TcpStream`: one request per connection at a time, to a loopback
//! server this bench started. Parsing is pure and tested.

use crate::args::Scenario;
use crate::scenario::aic_body;
use crate::server::{ExtraConfig, ServerUnderTest};
use crate::setup::{self, Principal};
use crate::{host, procstat, soak};
use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The reference's estimate for 500k agents waking at once:
/// 500,000 / 6,100 certs/s (its agent ceiling on 18 cores).
pub const REFERENCE_500K_S: f64 = 500_000.0 / 6_100.0;
pub const FLEET: f64 = 500_000.0;
/// Lifetime the burst's DAs ask for: long enough that setup and retries
/// never outlive it.
const DA_LIFETIME: i64 = 3600;
/// File descriptors beyond the connections: the DB, the data dir, the
/// listener, the runtime, /proc reads.
const FD_SLACK: u64 = 256;
/// Connections opened at once during setup (the listener's backlog is
/// finite; a SYN flood would only measure the kernel's SYN retries).
const CONNECT_PARALLEL: usize = 256;

#[derive(Args, Debug, Clone, Serialize)]
pub struct BurstArgs {
    /// Agents waking at once, each on its own connection.
    #[arg(long, default_value_t = 20_000)]
    pub agents: usize,
    /// People whose certificates sign the DAs (default agents / 10, the reference mix).
    #[arg(long)]
    pub users: Option<usize>,
    /// SQLite path or postgres:// / mysql:// / mariadb:// URL (default: temp SQLite).
    #[arg(long)]
    pub db: Option<String>,
    /// record_buffer.max_pending of the server under test.
    #[arg(long)]
    pub maxpending: Option<usize>,
    /// Run the server as a child process (its RSS alone; each process then
    /// needs one descriptor per connection instead of two in one).
    #[arg(long)]
    pub server_process: bool,
    /// An agent still unserved this long after the release gives up (an error).
    #[arg(long, default_value = "300s", value_parser = crate::args::parse_duration)]
    #[serde(serialize_with = "secs")]
    pub max_wait: Duration,
    /// Write the JSON report to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Setup progress and the effective server config.
    #[arg(short = 'v', long = "v")]
    pub verbose: bool,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// The status line and the headers that decide what an agent does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    /// Bytes up to and including the blank line.
    pub len: usize,
    pub content_length: Option<usize>,
    pub chunked: bool,
    pub retry_after_s: Option<u64>,
    /// The server will close the connection after this response.
    pub close: bool,
}

/// Parses a response head once it is complete: Ok(None) while more bytes
/// are needed, Err on a malformed head.
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut headers);
    let len = match r
        .parse(buf)
        .map_err(|e| anyhow!("bad response head: {e}"))?
    {
        httparse::Status::Partial => return Ok(None),
        httparse::Status::Complete(n) => n,
    };
    let status = r.code.ok_or_else(|| anyhow!("response without a status"))?;
    let mut head = Head {
        status,
        len,
        content_length: None,
        chunked: false,
        retry_after_s: None,
        close: r.version == Some(0),
    };
    for h in r.headers.iter() {
        let value = std::str::from_utf8(h.value).unwrap_or("").trim();
        if h.name.eq_ignore_ascii_case("content-length") {
            head.content_length = Some(
                value
                    .parse()
                    .map_err(|_| anyhow!("bad Content-Length {value:?}"))?,
            );
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            head.chunked = value.to_ascii_lowercase().contains("chunked");
        } else if h.name.eq_ignore_ascii_case("retry-after") {
            // Delta-seconds only: the server never sends an HTTP date.
            head.retry_after_s = value.parse().ok();
        } else if h.name.eq_ignore_ascii_case("connection") {
            head.close = value.eq_ignore_ascii_case("close");
        }
    }
    Ok(Some(head))
}

/// Whether `body` (the bytes after the head) holds the whole body.
pub fn body_complete(head: &Head, body: &[u8]) -> bool {
    if head.chunked {
        // The last chunk and an empty trailer end a chunked body.
        body.ends_with(b"0\r\n\r\n")
    } else {
        body.len() >= head.content_length.unwrap_or(0)
    }
}

/// The wait before a retry: the server's `Retry-After`, plus a jitter drawn
/// uniformly from [0, Retry-After) (`u01` in [0, 1)), so the agents told to
/// come back in one second do not all come back in the same millisecond.
pub fn retry_delay(retry_after_s: u64, u01: f64) -> Duration {
    let base = retry_after_s.max(1) as f64;
    Duration::from_secs_f64(base + base * u01.clamp(0.0, 1.0))
}

/// A response an agent answers by waiting and trying again.
pub fn is_retryable(head: &Head) -> bool {
    matches!(head.status, 503 | 429) && head.retry_after_s.is_some()
}

/// Descriptors N connections need in the process with the most: the
/// embedded server holds both ends of each (client and server socket) in
/// one process; a child server holds one end in each process.
pub fn fds_needed(agents: usize, embedded: bool) -> u64 {
    agents as u64 * if embedded { 2 } else { 1 } + FD_SLACK
}

/// Established TCP sockets whose local port is `port` in the text of
/// `/proc/net/tcp` or `/proc/net/tcp6`: the server's side of its
/// connections (the clients' sockets have the port as the remote one).
pub fn count_server_sockets(proc_net_tcp: &str, port: u16) -> u64 {
    let port_hex = format!("{port:04X}");
    proc_net_tcp
        .lines()
        .skip(1)
        .filter(|l| {
            let mut f = l.split_whitespace();
            let local = f.nth(1);
            let state = f.nth(1);
            state == Some("01")
                && local
                    .and_then(|a| a.rsplit_once(':'))
                    .is_some_and(|(_, p)| p.eq_ignore_ascii_case(&port_hex))
        })
        .count() as u64
}

fn server_sockets(port: u16) -> Option<u64> {
    let mut n = None;
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(text) = std::fs::read_to_string(f) {
            *n.get_or_insert(0) += count_server_sockets(&text, port);
        }
    }
    n
}

/// The file-descriptor limits met at start.
#[derive(Debug, Clone, Serialize)]
pub struct NofileLimit {
    pub soft_before: u64,
    pub hard: u64,
    pub soft_after: u64,
    pub needed: u64,
}

/// Raises RLIMIT_NOFILE's soft limit to the hard one (through the `rlimit`
/// crate) and checks that N connections fit.
fn raise_nofile(agents: usize, embedded: bool) -> Result<NofileLimit> {
    let (soft_before, hard) =
        rlimit::getrlimit(rlimit::Resource::NOFILE).context("reading RLIMIT_NOFILE")?;
    let soft_after = rlimit::increase_nofile_limit(hard).context("raising RLIMIT_NOFILE")?;
    let limit = NofileLimit {
        soft_before,
        hard,
        soft_after,
        needed: fds_needed(agents, embedded),
    };
    println!(
        "file descriptors: soft limit {} -> {} (hard {}); {} agents need {}{}",
        limit.soft_before,
        limit.soft_after,
        limit.hard,
        agents,
        limit.needed,
        if embedded {
            " (2 per connection: client and embedded server in one process)"
        } else {
            " (1 per connection in each process)"
        }
    );
    if limit.soft_after < limit.needed {
        bail!(
            "RLIMIT_NOFILE {} (hard limit; see `ulimit -n` / `ulimit -Hn`) is below the {} \
             descriptors {agents} connections need: raise the hard limit, or use fewer --agents{}",
            limit.soft_after,
            limit.needed,
            if embedded {
                " or --server-process (1 per connection per process)"
            } else {
                ""
            }
        );
    }
    Ok(limit)
}

/// How one agent's burst ended.
#[derive(Debug, Clone, Default)]
struct AgentResult {
    /// From its first send to its 200.
    served_after: Option<Duration>,
    /// From the release to its 200.
    served_at: Option<Duration>,
    /// The final failure: HTTP status, or 0 for none (transport, gave up).
    error: Option<u16>,
    retried: BTreeMap<u16, u64>,
    /// Requests resent on a new connection after the old one gave nothing back.
    reconnects: u64,
    /// What broke, for a final error without a response.
    transport_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BurstReport {
    pub agents: usize,
    pub users: usize,
    pub server: String,
    pub host: host::HostFacts,
    pub nofile: NofileLimit,
    /// Setup: opening the N connections (before t = 0).
    pub connect_s: f64,
    pub served: u64,
    /// From the release to the last 200; None unless every agent was served.
    pub time_all_served_s: Option<f64>,
    pub served_per_s: Option<f64>,
    /// Retried answers (503/429 with Retry-After), by code.
    pub retried_by_code: BTreeMap<String, u64>,
    /// Final failures other than retried ones: HTTP status, 0 = no response.
    pub errors_by_code: BTreeMap<String, u64>,
    /// Requests resent once on a new connection after the old one returned
    /// nothing (a server closing idle connections shows up here).
    pub reconnects: u64,
    /// Up to five distinct causes of code-0 errors.
    pub transport_errors: Vec<String>,
    pub latency_p50_ms: Option<f64>,
    pub latency_p99_ms: Option<f64>,
    pub latency_max_ms: Option<f64>,
    /// Most server-side established connections seen (sampled every 100 ms
    /// from /proc/net/tcp{,6}, local port = the server's).
    pub peak_server_connections: Option<u64>,
    /// Most server RSS seen during the burst (embedded: the whole process).
    pub peak_rss_bytes: Option<u64>,
    /// 500,000 / served_per_s.
    pub extrapolated_500k_s: Option<f64>,
    pub reference_500k_s: f64,
    pub pass: bool,
}

/// The figures of a finished burst.
#[derive(Debug, Clone, PartialEq)]
struct Summary {
    served: u64,
    /// Release to the last 200, when every agent was served.
    all_served_s: Option<f64>,
    retried: BTreeMap<String, u64>,
    errors: BTreeMap<String, u64>,
    reconnects: u64,
    /// The first few distinct transport failures (code 0), for diagnosis.
    transport_errors: Vec<String>,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    max_ms: Option<f64>,
}

/// The figures of a finished burst (pure: the IO is done).
fn summarize(results: &[AgentResult], release_to_all: Option<Duration>) -> Summary {
    let mut lat: Vec<u64> = results
        .iter()
        .filter_map(|r| r.served_after.map(|d| d.as_micros() as u64))
        .collect();
    lat.sort_unstable();
    let served = lat.len() as u64;
    let mut retried = BTreeMap::new();
    let mut errors = BTreeMap::new();
    let mut transport_errors: Vec<String> = Vec::new();
    for r in results {
        if let Some(t) = &r.transport_error
            && transport_errors.len() < 5
            && !transport_errors.contains(t)
        {
            transport_errors.push(t.clone());
        }
        for (code, n) in &r.retried {
            *retried.entry(code.to_string()).or_insert(0) += n;
        }
        if let Some(e) = r.error {
            *errors.entry(e.to_string()).or_insert(0) += 1;
        }
    }
    let ms = |us: u64| us as f64 / 1000.0;
    let pct = |q: f64| (!lat.is_empty()).then(|| ms(host::percentile(&lat, q)));
    let all = (served as usize == results.len())
        .then_some(release_to_all)
        .flatten()
        .map(|d| d.as_secs_f64());
    Summary {
        served,
        all_served_s: all,
        retried,
        errors,
        reconnects: results.iter().map(|r| r.reconnects).sum(),
        transport_errors,
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        max_ms: lat.last().map(|u| ms(*u)),
    }
}

/// Linear extrapolation to the fleet: 500,000 agents at the measured rate.
pub fn extrapolate(served: u64, seconds: f64) -> Option<(f64, f64)> {
    (served > 0 && seconds > 0.0).then(|| {
        let per_s = served as f64 / seconds;
        (per_s, FLEET / per_s)
    })
}

/// The server settings burst adds. The connections are opened before the
/// release and sit idle until it: the default header (10 s) and idle (30 s)
/// timeouts would close the first ones while the last are still being
/// opened (20k take ~30 s on 2 cores), and the burst would start with
/// reconnects.
pub fn extra_config() -> ExtraConfig {
    ExtraConfig {
        http: "header_read_timeout = \"600s\"\nidle_timeout = \"600s\"\n".into(),
        tables: String::new(),
    }
}

/// `warrant bench burst`: 0 all served without errors, 1 not, 2 could not run.
pub(crate) fn run_burst(args: BurstArgs) -> ExitCode {
    match burst(&args) {
        Ok(r) if r.pass => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn burst(args: &BurstArgs) -> Result<BurstReport> {
    if args.agents == 0 || args.users == Some(0) {
        bail!("agents/users: must be at least 1");
    }
    let users = args.users.unwrap_or((args.agents / 10).max(1));
    let nofile = raise_nofile(args.agents, !args.server_process)?;
    let mut run = soak::base_run_args()?;
    run.scenario = Scenario::Aic;
    run.agents = args.agents;
    run.users = Some(users);
    run.db = args.db.clone();
    run.maxpending = args.maxpending;
    run.server_process = args.server_process;
    run.verbose = args.verbose;
    // A missing MySQL/PostgreSQL database is created (or named, with the
    // admin SQL), as for a single run.
    if let Some(db) = &args.db {
        crate::dbadmin::ensure_database(db)?;
    }
    let sut = ServerUnderTest::start_with(&run, &extra_config())
        .context("starting the server under test")?;
    let result = burst_with(args, users, &run, &sut, nofile);
    sut.shutdown();
    result
}

struct Shared {
    addr: SocketAddr,
    host_header: String,
    path: String,
    auth: String,
    principals: Vec<Principal>,
    rng: aws_lc_rs::rand::SystemRandom,
    max_wait: Duration,
}

impl Shared {
    fn request(&self, agent: u64) -> Option<Vec<u8>> {
        let users = self.principals.len().max(1) as u64;
        let user = self.principals.get((agent % users) as usize)?;
        let body = aic_body(
            agent,
            user,
            None,
            &self.rng,
            warrant_server::clock::unix_now(),
            DA_LIFETIME,
        )?;
        let mut req = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.path,
            self.host_header,
            self.auth,
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body.as_bytes());
        Some(req)
    }
}

/// Sends `req` on `conn` and reads one response head (and body).
async fn exchange(conn: &mut TcpStream, req: &[u8], buf: &mut Vec<u8>) -> Result<Head> {
    conn.write_all(req).await?;
    buf.clear();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(head) = parse_head(buf)?
            && body_complete(&head, &buf[head.len..])
        {
            return Ok(head);
        }
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            bail!("connection closed mid-response");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// One agent after the release: send, and on a retryable answer wait and
/// send again (a fresh DA; a new connection if the server closed this one)
/// until a 200, a final error or `max_wait`.
async fn agent(
    id: u64,
    first_conn: TcpStream,
    first: Vec<u8>,
    shared: Arc<Shared>,
    release: Instant,
) -> AgentResult {
    let mut out = AgentResult::default();
    let started = Instant::now();
    let mut req = first;
    let mut buf = Vec::with_capacity(8192);
    let mut conn = Some(first_conn);
    let mut resent = false;
    loop {
        if conn.is_none() {
            match TcpStream::connect(shared.addr).await {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    out.error = Some(0);
                    out.transport_error = Some(format!("connect: {e}"));
                    return out;
                }
            }
        }
        let Some(c) = conn.as_mut() else {
            out.error = Some(0);
            return out;
        };
        let head = match exchange(c, &req, &mut buf).await {
            Ok(h) => h,
            // Nothing came back on a connection that sat idle: the server
            // may have closed it just as this request left (the keep-alive
            // race every HTTP client handles). Once per request, reconnect
            // and resend; the reconnect is counted, not hidden.
            Err(_) if buf.is_empty() && !resent => {
                resent = true;
                out.reconnects += 1;
                conn = None;
                continue;
            }
            Err(e) => {
                out.error = Some(0);
                out.transport_error = Some(format!("{e:#}"));
                return out;
            }
        };
        resent = false;
        if head.status == 200 {
            out.served_after = Some(started.elapsed());
            out.served_at = Some(release.elapsed());
            return out;
        }
        if !is_retryable(&head) {
            out.error = Some(head.status);
            return out;
        }
        *out.retried.entry(head.status).or_insert(0) += 1;
        let u01 = {
            let mut b = [0u8; 8];
            let _ = aws_lc_rs::rand::SecureRandom::fill(&shared.rng, &mut b);
            (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
        };
        let delay = retry_delay(head.retry_after_s.unwrap_or(1), u01);
        if started.elapsed() + delay > shared.max_wait {
            out.error = Some(head.status);
            return out;
        }
        if head.close {
            // The server closes this one; the retry opens a new connection.
            conn = None;
        }
        tokio::time::sleep(delay).await;
        // A fresh DA: the refused one's nonce may already be spent.
        match shared.request(id) {
            Some(r) => req = r,
            None => {
                out.error = Some(0);
                return out;
            }
        }
    }
}

fn burst_with(
    args: &BurstArgs,
    users: usize,
    run: &crate::args::RunArgs,
    sut: &ServerUnderTest,
    nofile: NofileLimit,
) -> Result<BurstReport> {
    let host = host::collect(&sut.data_dir.clone().unwrap_or_else(std::env::temp_dir));
    println!("{}", sut.describe());
    print!("{}", host.text());
    let token = setup::operator_token(sut, run)?;
    let principals = setup::create_principals(sut, &token, users, Scenario::Aic, true)?;
    let shared = Arc::new(Shared {
        addr: sut.addr,
        host_header: sut.addr.to_string(),
        path: format!("{}/api/v1/certs", sut.base_path),
        auth: format!("Bearer {token}"),
        principals,
        rng: aws_lc_rs::rand::SystemRandom::new(),
        max_wait: args.max_wait,
    });
    let t = Instant::now();
    let requests: Vec<Vec<u8>> = (0..args.agents as u64)
        .map(|i| {
            shared
                .request(i)
                .ok_or_else(|| anyhow!("signing the DA of agent {i}"))
        })
        .collect::<Result<_>>()?;
    println!(
        "setup: {} signed DAs in {:.1} s",
        requests.len(),
        t.elapsed().as_secs_f64()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name(format!("{}burst", crate::threads::BENCH_THREAD_PREFIX))
        .build()
        .context("starting the client runtime")?;
    // The sampler: server-side connections and RSS, until the burst is over.
    let done = Arc::new(AtomicBool::new(false));
    let peak_conns = Arc::new(AtomicU64::new(0));
    let peak_rss = Arc::new(AtomicU64::new(0));
    let port = sut.addr.port();
    let rss_pid = sut.server_pid();
    let sampler = {
        let (done, peak_conns, peak_rss) = (done.clone(), peak_conns.clone(), peak_rss.clone());
        std::thread::Builder::new()
            .name(format!("{}sampler", crate::threads::BENCH_THREAD_PREFIX))
            .spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    if let Some(n) = server_sockets(port) {
                        peak_conns.fetch_max(n, Ordering::Relaxed);
                    }
                    if let Some(r) = rss_pid.and_then(|p| procstat::status_bytes(p, "VmRSS:")) {
                        peak_rss.fetch_max(r, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
            .context("starting the sampler")?
    };
    let outcome = rt.block_on(burst_phase(shared.clone(), requests));
    done.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let (connect_s, results, release_to_all) = outcome?;
    let sum = summarize(&results, release_to_all);
    let ex = sum.all_served_s.and_then(|s| extrapolate(sum.served, s));
    let load = |a: &AtomicU64| Some(a.load(Ordering::Relaxed)).filter(|n| *n > 0);
    let r = BurstReport {
        agents: args.agents,
        users,
        server: sut.describe(),
        host,
        nofile,
        connect_s,
        served: sum.served,
        time_all_served_s: sum.all_served_s,
        served_per_s: ex.map(|e| e.0),
        pass: sum.all_served_s.is_some() && sum.errors.is_empty(),
        retried_by_code: sum.retried,
        errors_by_code: sum.errors,
        reconnects: sum.reconnects,
        transport_errors: sum.transport_errors,
        latency_p50_ms: sum.p50_ms,
        latency_p99_ms: sum.p99_ms,
        latency_max_ms: sum.max_ms,
        peak_server_connections: load(&peak_conns),
        peak_rss_bytes: load(&peak_rss),
        extrapolated_500k_s: ex.map(|e| e.1),
        reference_500k_s: REFERENCE_500K_S,
    };
    print!("{}", text(&r));
    if let Some(path) = &args.out {
        std::fs::write(path, format!("{}\n", serde_json::to_string_pretty(&r)?))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(r)
}

/// Opens every connection, then releases every agent at once.
async fn burst_phase(
    shared: Arc<Shared>,
    requests: Vec<Vec<u8>>,
) -> Result<(f64, Vec<AgentResult>, Option<Duration>)> {
    let t = Instant::now();
    let limit = Arc::new(tokio::sync::Semaphore::new(CONNECT_PARALLEL));
    let mut connecting = tokio::task::JoinSet::new();
    for i in 0..requests.len() {
        let (limit, addr) = (limit.clone(), shared.addr);
        connecting.spawn(async move {
            let _permit = limit.acquire().await;
            (i, TcpStream::connect(addr).await)
        });
    }
    let mut conns: Vec<Option<TcpStream>> = (0..requests.len()).map(|_| None).collect();
    while let Some(r) = connecting.join_next().await {
        let (i, c) = r.map_err(|e| anyhow!("connect task: {e}"))?;
        let c = c.with_context(|| format!("opening connection {i} (of {})", requests.len()))?;
        let _ = c.set_nodelay(true);
        conns[i] = Some(c);
    }
    let connect_s = t.elapsed().as_secs_f64();
    println!(
        "setup: {} connections open in {connect_s:.1} s; releasing every agent",
        conns.len()
    );
    let (go, _) = tokio::sync::watch::channel(None::<Instant>);
    let mut agents = tokio::task::JoinSet::new();
    for (i, (c, req)) in conns.into_iter().zip(requests).enumerate() {
        let Some(c) = c else { continue };
        let mut rx = go.subscribe();
        let shared = shared.clone();
        agents.spawn(async move {
            // The barrier: every agent waits here until the release.
            let release = match rx.wait_for(Option::is_some).await {
                Ok(v) => v.unwrap_or_else(Instant::now),
                Err(_) => Instant::now(),
            };
            agent(i as u64, c, req, shared, release).await
        });
    }
    // Let every task reach the barrier before the release.
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let release = Instant::now();
    let _ = go.send(Some(release));
    let mut results = Vec::with_capacity(agents.len());
    while let Some(r) = agents.join_next().await {
        results.push(r.unwrap_or_else(|_| AgentResult {
            error: Some(0),
            ..AgentResult::default()
        }));
    }
    let last = results.iter().filter_map(|r| r.served_at).max();
    Ok((connect_s, results, last))
}

fn text(r: &BurstReport) -> String {
    let f = |v: Option<f64>, unit: &str| v.map_or("n/a".into(), |v| format!("{v:.2} {unit}"));
    let mut t = format!(
        "burst: {} agents ({} people), one connection each, released together\n\
         served {} of {}; all served after {}; {} certs/s\n\
         retried (Retry-After): {:?}; errors: {:?}; reconnects: {}\n\
         latency per agent (first send to 200): p50 {} p99 {} max {}\n\
         peak server connections {} · peak RSS {}\n",
        r.agents,
        r.users,
        r.served,
        r.agents,
        f(r.time_all_served_s, "s"),
        r.served_per_s.map_or("n/a".into(), |v| format!("{v:.0}")),
        r.retried_by_code,
        r.errors_by_code,
        r.reconnects,
        f(r.latency_p50_ms, "ms"),
        f(r.latency_p99_ms, "ms"),
        f(r.latency_max_ms, "ms"),
        r.peak_server_connections
            .map_or("n/a".into(), |n| n.to_string()),
        r.peak_rss_bytes
            .map_or("n/a".into(), |b| format!("{} MiB", b >> 20)),
    );
    t.push_str(&format!(
        "500,000 agents (linear): {} · reference estimate {:.0} s (500,000 / 6,100 certs/s on 18 cores)\n",
        f(r.extrapolated_500k_s, "s"),
        r.reference_500k_s
    ));
    for e in &r.transport_errors {
        t.push_str(&format!("no response: {e}\n"));
    }
    t.push_str(if r.pass {
        "PASS: every agent served, no errors\n"
    } else {
        "FAIL: not every agent was served without error\n"
    });
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_parsed_once_complete() {
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Le").unwrap(), None);
        let raw =
            b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 2\r\ncontent-length: 5\r\n\r\nbusy!";
        let h = parse_head(raw).unwrap().unwrap();
        assert_eq!(
            (h.status, h.retry_after_s, h.content_length, h.close),
            (503, Some(2), Some(5), false)
        );
        assert!(body_complete(&h, &raw[h.len..]));
        assert!(!body_complete(&h, b"bus"));
        assert!(is_retryable(&h));
        let h = parse_head(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert!(h.chunked && h.close && !is_retryable(&h));
        assert!(!body_complete(&h, b"2\r\n{}\r\n"));
        assert!(body_complete(&h, b"2\r\n{}\r\n0\r\n\r\n"));
        // No Retry-After: a 503 is a final error, not a retry.
        let h = parse_head(b"HTTP/1.1 503 X\r\nContent-Length: 0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!is_retryable(&h) && body_complete(&h, b""));
        assert!(parse_head(b"HTTP/1.1 20x OK\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n").is_err());
    }

    #[test]
    fn retries_wait_retry_after_plus_up_to_as_much_again() {
        assert_eq!(retry_delay(1, 0.0), Duration::from_secs(1));
        assert_eq!(retry_delay(2, 0.5), Duration::from_secs(3));
        assert!(retry_delay(1, 0.999) < Duration::from_secs(2));
        // Retry-After: 0 still waits a second; out-of-range jitter is clamped.
        assert_eq!(retry_delay(0, 0.0), Duration::from_secs(1));
        assert_eq!(retry_delay(1, 7.0), Duration::from_secs(2));
    }

    #[test]
    fn the_server_keeps_idle_connections_and_admits_every_agent() {
        let text = crate::server::bench_config_toml_with(
            "sqlite://b.db",
            "",
            None,
            warrant_store::Durability::Durable,
            20_000,
            &extra_config(),
        );
        let c = warrant_server::LoadedConfig::from_parts(
            std::path::Path::new("."),
            Some(&text),
            &Default::default(),
        )
        .expect("burst config resolves");
        assert_eq!(c.config.http.max_connections, 20_064);
        assert_eq!(
            c.config.http.header_read_timeout.0,
            Duration::from_secs(600)
        );
        assert_eq!(c.config.http.idle_timeout.0, Duration::from_secs(600));
    }

    #[test]
    fn descriptors_needed_depend_on_who_holds_both_ends() {
        assert_eq!(fds_needed(20_000, true), 40_256);
        assert_eq!(fds_needed(20_000, false), 20_256);
    }

    #[test]
    fn server_sockets_are_the_established_ones_on_its_port() {
        // Port 8080 = 1F90. Rows: server side established, client side
        // (remote 1F90), the listener (state 0A), another server's socket.
        let text = "  sl  local_address rem_address   st tx_queue rx_queue\n\
           0: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000 0 0 1\n\
           1: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000 0 0 2\n\
           2: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 3\n\
           3: 0100007F:1F91 0100007F:D432 01 00000000:00000000 00:00000000 00000000 0 0 4\n\
           4: 0100007F:1f90 0100007F:D433 01 00000000:00000000 00:00000000 00000000 0 0 5\n";
        assert_eq!(count_server_sockets(text, 8080), 2);
        assert_eq!(count_server_sockets("", 8080), 0);
    }

    #[test]
    fn the_summary_counts_served_retried_and_errors() {
        let ok = |ms: u64, at: u64, retried: &[(u16, u64)]| AgentResult {
            served_after: Some(Duration::from_millis(ms)),
            served_at: Some(Duration::from_millis(at)),
            error: None,
            retried: retried.iter().copied().collect(),
            reconnects: 1,
            transport_error: None,
        };
        let all = vec![
            ok(10, 10, &[]),
            ok(30, 40, &[(503, 2)]),
            ok(20, 25, &[(503, 1), (429, 1)]),
        ];
        let s = summarize(&all, Some(Duration::from_millis(40)));
        assert_eq!((s.served, s.all_served_s), (3, Some(0.04)));
        assert_eq!(s.retried.get("503"), Some(&3));
        assert_eq!(s.retried.get("429"), Some(&1));
        assert!(s.errors.is_empty() && s.transport_errors.is_empty());
        assert_eq!(s.reconnects, 3);
        assert_eq!(
            (s.p50_ms, s.p99_ms, s.max_ms),
            (Some(20.0), Some(30.0), Some(30.0))
        );
        let mut some_failed = all.clone();
        some_failed.push(AgentResult {
            error: Some(500),
            ..AgentResult::default()
        });
        for _ in 0..2 {
            some_failed.push(AgentResult {
                error: Some(0),
                transport_error: Some("connection closed mid-response".into()),
                ..AgentResult::default()
            });
        }
        let s = summarize(&some_failed, Some(Duration::from_millis(40)));
        assert_eq!(
            (s.served, s.all_served_s),
            (3, None),
            "not all served: no completion time"
        );
        assert_eq!(s.errors.get("500"), Some(&1));
        assert_eq!(s.errors.get("0"), Some(&2));
        assert_eq!(s.transport_errors, ["connection closed mid-response"]);
    }

    #[test]
    fn extrapolation_is_linear_to_half_a_million() {
        let (per_s, t) = extrapolate(20_000, 10.0).unwrap();
        assert_eq!(per_s, 2000.0);
        assert_eq!(t, 250.0);
        assert!(extrapolate(0, 1.0).is_none() && extrapolate(5, 0.0).is_none());
        assert!((REFERENCE_500K_S - 81.97).abs() < 0.01);
    }
}
