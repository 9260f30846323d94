//! The server under test: embedded in this process, a child `warrant serve`
//! process, or a remote target. Each way says how its CPU and memory are
//! measured, because that decides what `cpu_us_per_cert` means.

use crate::args::{Keys, RunArgs};
use crate::threads::{self, ServerThreads};
use crate::{db, http, procstat};
use anyhow::{Context, Result, anyhow, bail};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warrant_server::{LoadedConfig, RunningServer};
use warrant_store::Durability;

pub const OPERATOR_NAME: &str = "bench-operator";

/// The server's CPU at one moment, as finely as it can be read.
pub enum CpuSnapshot {
    /// The embedded server's threads, each with its group.
    Threads(ServerThreads),
    /// A child process: its user + system seconds.
    Total(f64),
    /// A remote server, or `/proc` could not be read.
    Unknown,
}

/// The server's CPU seconds between two snapshots: the total and, where the
/// threads can be told apart, its parts by group (which add up to it).
pub fn cpu_between(
    before: &CpuSnapshot,
    after: &CpuSnapshot,
) -> (Option<f64>, Option<BTreeMap<String, f64>>) {
    match (before, after) {
        (CpuSnapshot::Threads(a), CpuSnapshot::Threads(b)) => {
            let parts = b.cpu_since(a);
            (Some(parts.values().sum()), Some(parts))
        }
        (CpuSnapshot::Total(a), CpuSnapshot::Total(b)) => (Some((b - a).max(0.0)), None),
        _ => (None, None),
    }
}

pub enum Sut {
    Embedded {
        rt: tokio::runtime::Runtime,
        server: Option<RunningServer>,
    },
    Process {
        child: Child,
    },
    Remote,
}

pub struct ServerUnderTest {
    pub kind: Sut,
    pub addr: SocketAddr,
    pub base_path: String,
    pub dsn: Option<String>,
    /// Only for a data dir this run created (removed at the end).
    pub data_dir: Option<PathBuf>,
    pub operator_password: Option<String>,
    pub effective: String,
    /// What the server under test was configured with; `None` for a
    /// `--target` server, whose configuration the bench cannot see.
    pub durability: Option<Durability>,
}

/// Server-side counts taken before and after the load.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerCounters {
    pub cert_rows: Option<u64>,
    /// The durable-wait histogram (seconds per waiting issuance).
    pub durable_wait: Option<HistogramTotals>,
    /// The commit-batch-size histogram (records per commit).
    pub commit_batch: Option<HistogramTotals>,
}

/// Sum and count of one of the server's histograms.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HistogramTotals {
    pub sum: f64,
    pub count: u64,
}

impl HistogramTotals {
    /// Mean of the observations recorded since `before` (`None`: the
    /// histogram did not exist yet), or `None` if there were none.
    pub fn mean_since(self, before: Option<HistogramTotals>) -> Option<f64> {
        let before = before.unwrap_or_default();
        let count = self.count.checked_sub(before.count).filter(|n| *n > 0)?;
        Some((self.sum - before.sum) / count as f64)
    }
}

/// The `_sum` and `_count` of histogram `name` in a Prometheus text
/// exposition; `None` when either is missing (a buffered server never
/// records a durable wait).
pub fn parse_histogram_totals(text: &str, name: &str) -> Option<HistogramTotals> {
    let value = |suffix: &str| {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(suffix)?;
            rest.strip_prefix(' ')?.trim().parse::<f64>().ok()
        })
    };
    Some(HistogramTotals {
        sum: value("_sum")?,
        count: value("_count")? as u64,
    })
}

/// The `warrant.toml` of a bench data dir. Only what the run chooses is
/// written, so the server resolves `device_profile` and `maxpending` by its own
/// rules (a profile fills only what is not set, spec §5), the same way in the
/// embedded and the child-process server. `WARRANT_*` variables in the
/// environment still override it, as they would for `warrant serve`.
pub fn bench_config_toml(
    dsn: &str,
    profile: &str,
    maxpending: Option<usize>,
    durability: Durability,
    agents: usize,
) -> String {
    bench_config_toml_with(
        dsn,
        profile,
        maxpending,
        durability,
        agents,
        &ExtraConfig::default(),
    )
}

/// Server settings a bench command adds to the single run's (`soak`:
/// retention and storage; `burst`: a longer header timeout). Kept as TOML
/// text so the server's own parser and validation judge it.
#[derive(Debug, Clone, Default)]
pub struct ExtraConfig {
    /// `key = value` lines for the `[http]` table (which the bench already
    /// writes, and TOML forbids opening twice).
    pub http: String,
    /// Whole tables (`[retention]`, `[storage]`…) appended at the end.
    pub tables: String,
}

/// [`bench_config_toml`] plus `extra`.
pub fn bench_config_toml_with(
    dsn: &str,
    profile: &str,
    maxpending: Option<usize>,
    durability: Durability,
    agents: usize,
    extra: &ExtraConfig,
) -> String {
    let quoted = |s: &str| toml::Value::String(s.to_string()).to_string();
    let mut text = format!(
        "listen = \"127.0.0.1:0\"\nlog_level = \"warn\"\ndevice_profile = {}\ndurability = {}\n",
        quoted(profile),
        quoted(durability.as_str())
    );
    // The reference's agents ask for the `gateway:admin` role; this CA grants
    // an agent only the roles its configuration lists.
    text.push_str("[issuance]\nagent_gateway_roles = [\"gateway:admin\"]\n");
    // Every agent holds a connection of its own: the server's cap on
    // connections must not refuse the load generator's.
    let connections = (agents + 64).max(1024);
    text.push_str(&format!("[http]\nmax_connections = {connections}\n"));
    text.push_str(&extra.http);
    if let Some(m) = maxpending {
        text.push_str(&format!("[record_buffer]\nmax_pending = {m}\n"));
    }
    text.push_str(&format!("[database]\nurl = {}\n", quoted(dsn)));
    text.push_str(&extra.tables);
    text
}

/// The listen address for `-port`: that port on 127.0.0.1, or (0 or absent)
/// one the kernel picks.
pub fn listen_addr(port: Option<u16>) -> String {
    format!("127.0.0.1:{}", port.unwrap_or(0))
}

/// [`bench_config_toml`]'s text listening on [`listen_addr`]`(port)`.
fn with_port(config_toml: &str, port: Option<u16>) -> String {
    config_toml.replacen(
        "listen = \"127.0.0.1:0\"",
        &format!("listen = \"{}\"", listen_addr(port)),
        1,
    )
}

/// Checks `profile` and `maxpending` with the server's own config rules, so a
/// bad value fails before any setup, under the bench's flag names.
pub fn check_server_config(profile: &str, maxpending: Option<usize>) -> Result<()> {
    if maxpending == Some(0) {
        bail!("maxpending: must be at least 1");
    }
    let text = bench_config_toml(
        "sqlite://bench.db",
        profile,
        maxpending,
        Durability::Durable,
        0,
    );
    LoadedConfig::from_parts(Path::new("."), Some(&text), &Default::default())
        .map(|_| ())
        .map_err(|e| anyhow!("profile/maxpending: {e}"))
}

fn temp_data_dir() -> Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("warrant-bench-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// The DSN of the server under test: `--db` as given (a plain SQLite path
/// written as a `sqlite://` URL), or a SQLite file in the data dir.
fn dsn_for(db: Option<&str>, data_dir: &Path) -> Result<String> {
    let Some(db) = db else {
        return Ok(format!(
            "sqlite://{}",
            data_dir.join("warrant.db").display()
        ));
    };
    match warrant_store::parse_dsn(db).map_err(|e| anyhow!("db: {e}"))? {
        warrant_store::Dsn::Sqlite { path, url: None } => Ok(format!("sqlite://{path}")),
        _ => Ok(db.to_string()),
    }
}

/// Worker threads of the embedded server's runtime: `worker_threads`, else what
/// tokio would choose (`TOKIO_WORKER_THREADS`, else one per core). Set
/// explicitly because [`threads::worker_thread_name`] must know it.
fn worker_count(worker_threads: Option<usize>) -> usize {
    worker_threads
        .or_else(|| {
            std::env::var("TOKIO_WORKER_THREADS")
                .ok()?
                .trim()
                .parse()
                .ok()
                .filter(|n| *n > 0)
        })
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The embedded server's runtime. Its threads are named so their CPU can be
/// told apart from the client's and grouped ([`threads`]); idle blocking
/// threads are kept for the whole run, because a thread that exits takes
/// its CPU time out of `/proc` before the run's last reading.
fn runtime(worker_threads: Option<usize>) -> Result<tokio::runtime::Runtime> {
    let workers = worker_count(worker_threads);
    let named = std::sync::atomic::AtomicUsize::new(0);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(workers)
        .thread_name_fn(move || {
            let n = named.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            threads::worker_thread_name(n, workers)
        })
        .thread_keep_alive(Duration::from_secs(24 * 3600))
        .build()
        .context("starting the server runtime")
}

/// Creates a data dir the server can start from: config (listen on an
/// ephemeral port, the DB), the hierarchy, and a bench operator with a random
/// password (a unique name, so a shared PostgreSQL/MariaDB DB can be reused).
fn prepare_data_dir(dir: &Path, config_toml: &str) -> Result<(String, String)> {
    std::fs::write(dir.join(warrant_server::config::CONFIG_FILE), config_toml)
        .context("writing warrant.toml")?;
    let loaded = LoadedConfig::load(dir).map_err(|e| anyhow!("{e}"))?;
    let opts = warrant_server::state::store_options(&loaded.config);
    let dsn = loaded.database_url();
    warrant_ca::Hierarchy::init(dir, None).context("creating the CA hierarchy")?;
    let password = warrant_server::auth::generate_password().map_err(|e| anyhow!("{e}"))?;
    let username = format!("{OPERATOR_NAME}-{}", std::process::id());
    let rt = runtime(Some(1))?;
    let pw = password.clone();
    let name = username.clone();
    rt.block_on(async move {
        let store = warrant_store::Store::open(&dsn, opts)
            .await
            .context("opening the database")?;
        let hash = warrant_server::auth::hash_password(&pw).map_err(|e| anyhow!("{e}"))?;
        let now = warrant_store::now_unix();
        let r = store
            .accounts()
            .create_user(&warrant_store::NewUser {
                username: name.clone(),
                password_hash: hash,
                role: warrant_store::Role::Operator,
                created_at: now,
            })
            .await;
        store.shutdown().await;
        match r {
            Ok(_) => Ok(()),
            Err(warrant_store::StoreError::Conflict(_)) => {
                bail!("a user {name:?} already exists in this database; use a fresh database")
            }
            Err(e) => Err(anyhow!("creating the bench operator: {e}")),
        }
    })?;
    Ok((username, password))
}

impl ServerUnderTest {
    pub fn start(args: &RunArgs) -> Result<Self> {
        Self::start_with(args, &ExtraConfig::default())
    }

    /// [`Self::start`] with `extra` server settings (ignored for `--target`).
    pub fn start_with(args: &RunArgs, extra: &ExtraConfig) -> Result<Self> {
        if let Some(url) = &args.target {
            let t = gust_engine::spec::parse_url(url).map_err(|e| anyhow!("target: {e}"))?;
            if t.tls {
                bail!("target: only http:// targets are supported by the bench's setup client");
            }
            let addr = match t.addrs.first() {
                Some(a) => *a,
                None => {
                    use std::net::ToSocketAddrs;
                    (t.host.as_str(), t.port)
                        .to_socket_addrs()
                        .with_context(|| format!("target: resolving {}", t.host))?
                        .next()
                        .ok_or_else(|| anyhow!("target: {} has no address", t.host))?
                }
            };
            let base_path = t.path.trim_end_matches('/').to_string();
            return Ok(Self {
                kind: Sut::Remote,
                addr,
                base_path,
                dsn: args.db.clone(),
                data_dir: None,
                operator_password: None,
                effective: format!("target {url} (remote; its CPU and memory are not measured)"),
                durability: None,
            });
        }
        let dir = temp_data_dir()?;
        let dsn = dsn_for(args.db.as_deref(), &dir)?;
        let config_toml = bench_config_toml_with(
            &dsn,
            &args.profile,
            args.maxpending,
            args.durability,
            args.agents,
            extra,
        );
        let config_toml = with_port(&config_toml, args.port);
        let (username, password) = prepare_data_dir(&dir, &config_toml)?;
        let loaded = LoadedConfig::load(&dir).map_err(|e| anyhow!("{e}"))?;
        let durability = warrant_server::state::store_options(&loaded.config).durability;
        let effective = format!(
            "server: {} · data dir {} · db {} · max_pending {} · device_profile {:?} · durability {} · keys {}",
            if args.server_process {
                "child process"
            } else {
                "embedded"
            },
            dir.display(),
            warrant_server::config::redact_dsn(&dsn),
            loaded.config.record_buffer.max_pending,
            loaded.config.device_profile,
            durability.as_str(),
            if args.keys == Keys::Csr {
                "csr"
            } else {
                "server"
            },
        );
        let mut sut = if args.server_process {
            Self::spawn(&dir, args.port)?
        } else {
            Self::embedded(loaded)?
        };
        sut.dsn = Some(dsn);
        sut.data_dir = Some(dir);
        sut.operator_password = Some(format!("{username}\n{password}"));
        sut.effective = effective;
        sut.durability = Some(durability);
        Ok(sut)
    }

    fn embedded(loaded: LoadedConfig) -> Result<Self> {
        let rt = runtime(None)?;
        let opts = warrant_server::state::store_options(&loaded.config);
        let server = rt.block_on(async move {
            let hierarchy = warrant_ca::Hierarchy::load(&loaded.data_dir, None)?;
            let store = Arc::new(warrant_store::Store::open(&loaded.database_url(), opts).await?);
            let state = warrant_server::AppState::with_parts(loaded, hierarchy, store)
                .await
                .map_err(|e| anyhow!("{e}"))?;
            warrant_server::server::start_with_state(Arc::new(state))
                .await
                .map_err(|e| anyhow!("{e}"))
        })?;
        Ok(Self {
            addr: server.http_addr,
            kind: Sut::Embedded {
                rt,
                server: Some(server),
            },
            base_path: String::new(),
            dsn: None,
            data_dir: None,
            operator_password: None,
            effective: String::new(),
            durability: None,
        })
    }

    /// `warrant serve` on the prepared dir; its `warrant.toml` carries the
    /// run's `device_profile` and `record_buffer.max_pending`.
    fn spawn(dir: &Path, port: Option<u16>) -> Result<Self> {
        let exe = std::env::current_exe().context("locating the warrant binary")?;
        let mut cmd = Command::new(exe);
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(dir)
            .env("WARRANT_LISTEN", listen_addr(port))
            .env_remove("DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().context("spawning `warrant serve`")?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("no stdout from the server"))?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if !sent && let Some(a) = line.strip_prefix("listening on http://") {
                    sent = tx.send(a.trim().to_string()).is_ok();
                }
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("the server process did not report its address within 60 s");
            }
        };
        let addr: SocketAddr = addr
            .parse()
            .with_context(|| format!("server address {addr:?}"))?;
        Ok(Self {
            kind: Sut::Process { child },
            addr,
            base_path: String::new(),
            dsn: None,
            data_dir: None,
            operator_password: None,
            effective: String::new(),
            durability: None,
        })
    }

    pub fn describe(&self) -> String {
        self.effective.clone()
    }

    pub fn url(&self) -> String {
        format!("http://{}{}", self.addr, self.base_path)
    }

    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            Sut::Embedded { .. } => "embedded",
            Sut::Process { .. } => "process",
            Sut::Remote => "target",
        }
    }

    /// The server's CPU so far: the embedded server's threads by group
    /// (see [`threads`]), or the child's user + system time (its threads are
    /// not told apart); nothing for a remote server.
    pub fn cpu_snapshot(&self) -> CpuSnapshot {
        let snapshot = match &self.kind {
            Sut::Process { child } => {
                procstat::process_cpu_seconds(child.id()).map(CpuSnapshot::Total)
            }
            Sut::Embedded { .. } => ServerThreads::of_this_process().map(CpuSnapshot::Threads),
            Sut::Remote => None,
        };
        snapshot.unwrap_or(CpuSnapshot::Unknown)
    }

    /// Peak RSS: the child's VmHWM; embedded, the whole process's (client included).
    pub fn peak_rss(&self) -> Option<u64> {
        match &self.kind {
            Sut::Process { child } => procstat::status_bytes(child.id(), "VmHWM:"),
            Sut::Embedded { .. } => procstat::status_bytes(std::process::id(), "VmHWM:"),
            Sut::Remote => None,
        }
    }

    /// The process whose memory is the server's: the child, or this
    /// process when embedded (client included); none for a remote server.
    pub fn server_pid(&self) -> Option<u32> {
        match &self.kind {
            Sut::Process { child } => Some(child.id()),
            Sut::Embedded { .. } => Some(std::process::id()),
            Sut::Remote => None,
        }
    }

    pub fn rss_now(&self) -> Option<u64> {
        match &self.kind {
            Sut::Process { child } => procstat::status_bytes(child.id(), "VmRSS:"),
            Sut::Embedded { .. } => procstat::status_bytes(std::process::id(), "VmRSS:"),
            Sut::Remote => None,
        }
    }

    /// Certificate rows in the DB (None when the DB is not reachable from here).
    fn count_rows(&self) -> Result<Option<u64>> {
        match &self.dsn {
            Some(dsn) => db::count_cert_rows(dsn).map(Some),
            None => Ok(None),
        }
    }

    /// What the report compares before and after the load.
    pub fn counters(&self) -> Result<ServerCounters> {
        Ok(ServerCounters {
            cert_rows: self.count_rows()?,
            ..self.write_path_totals()
        })
    }

    /// The server's own account of its durable waits and commit batches,
    /// scraped from `/metrics` (so a `--target` server reports them too).
    /// Each is `None` when the scrape fails or nothing was recorded yet.
    fn write_path_totals(&self) -> ServerCounters {
        let Some(text) = http::request(self.addr, "GET", "/metrics", None, "")
            .ok()
            .filter(|r| r.status == 200)
            .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        else {
            return ServerCounters::default();
        };
        use warrant_store::metric_names::{COMMIT_BATCH_SIZE, DURABLE_WAIT};
        ServerCounters {
            cert_rows: None,
            durable_wait: parse_histogram_totals(&text, DURABLE_WAIT),
            commit_batch: parse_histogram_totals(&text, COMMIT_BATCH_SIZE),
        }
    }

    pub fn db_size(&self) -> Option<u64> {
        self.dsn.as_deref().and_then(|d| db::db_size_bytes(d).ok())
    }

    /// Stops the server (draining its write path) and removes a temp data dir.
    pub fn shutdown(mut self) {
        match &mut self.kind {
            Sut::Embedded { rt, server } => {
                if let Some(s) = server.take() {
                    rt.block_on(s.shutdown());
                }
            }
            Sut::Process { child } => {
                // SIGTERM lets `serve` drain; fall back to a kill.
                // SAFETY: kill(2) on our own child's pid with a valid signal.
                unsafe {
                    libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
                }
                let start = Instant::now();
                loop {
                    match child.try_wait() {
                        Ok(Some(_)) => break,
                        Ok(None) if start.elapsed() < Duration::from_secs(30) => {
                            std::thread::sleep(Duration::from_millis(50))
                        }
                        _ => {
                            let _ = child.kill();
                            let _ = child.wait();
                            break;
                        }
                    }
                }
            }
            Sut::Remote => {}
        }
        if let Some(dir) = self.data_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(profile: &str, maxpending: Option<usize>, dsn: &str) -> LoadedConfig {
        let text = bench_config_toml(dsn, profile, maxpending, Durability::Durable, 64);
        LoadedConfig::from_parts(Path::new("."), Some(&text), &Default::default())
            .expect("bench config resolves")
    }

    #[test]
    fn profile_fills_what_maxpending_leaves_unset() {
        let c = resolve("low_mem", None, "sqlite://b.db");
        assert_eq!(c.config.record_buffer.max_pending, 5_000);
        assert_eq!(c.config.engine.max_certs, 50_000);

        let c = resolve("low_mem", Some(7), "sqlite://b.db");
        assert_eq!(c.config.record_buffer.max_pending, 7);
        assert_eq!(c.config.engine.max_da_nonces, 50_000);

        let c = resolve("", None, "sqlite://b.db");
        assert_eq!(c.config.record_buffer.max_pending, 20_000);
    }

    #[test]
    fn the_chosen_durability_reaches_the_server_config() {
        for d in [Durability::Durable, Durability::Buffered] {
            let text = bench_config_toml("sqlite://b.db", "", None, d, 64);
            let c = LoadedConfig::from_parts(Path::new("."), Some(&text), &Default::default())
                .expect("bench config resolves");
            assert_eq!(Durability::parse(&c.config.durability), Some(d));
        }
    }

    /// Each agent holds a connection: the server's cap admits them all.
    #[test]
    fn the_server_admits_a_connection_per_agent() {
        for (agents, cap) in [(64, 1024), (5000, 5064)] {
            let text = bench_config_toml("sqlite://b.db", "", None, Durability::Durable, agents);
            let c = LoadedConfig::from_parts(Path::new("."), Some(&text), &Default::default())
                .expect("bench config resolves");
            assert_eq!(c.config.http.max_connections, cap);
        }
    }

    #[test]
    fn db_flag_becomes_the_servers_dsn() {
        let dir = Path::new("/tmp/d");
        assert_eq!(dsn_for(None, dir).unwrap(), "sqlite:///tmp/d/warrant.db");
        assert_eq!(dsn_for(Some("b.db"), dir).unwrap(), "sqlite://b.db");
        for kept in [
            "sqlite:b.db?mode=rwc",
            "postgres://u:p@h/db",
            "mariadb://h/db",
        ] {
            assert_eq!(dsn_for(Some(kept), dir).unwrap(), kept);
        }
        let e = dsn_for(Some("redis://h"), dir).unwrap_err().to_string();
        assert!(e.starts_with("db:") && e.contains("redis"), "{e}");
    }

    #[test]
    fn port_sets_the_listen_address_and_zero_picks_a_free_one() {
        let text = bench_config_toml("sqlite://b.db", "", None, Durability::Durable, 64);
        for (port, listen) in [
            (None, "127.0.0.1:0"),
            (Some(0), "127.0.0.1:0"),
            (Some(18443), "127.0.0.1:18443"),
        ] {
            let text = with_port(&text, port);
            let c = LoadedConfig::from_parts(Path::new("."), Some(&text), &Default::default())
                .expect("bench config resolves");
            assert_eq!(c.config.listen, listen);
        }
    }

    #[test]
    fn the_database_url_survives_quoting() {
        let dsn = r#"postgres://u:p"w\d@127.0.0.1:5432/db"#;
        assert_eq!(resolve("", None, dsn).database_url(), dsn);
    }

    #[test]
    fn bad_profile_or_maxpending_is_refused_under_the_flag_names() {
        let e = check_server_config("fast", None).unwrap_err().to_string();
        assert!(e.contains("profile") && e.contains("device_profile"), "{e}");
        let e = check_server_config("", Some(0)).unwrap_err().to_string();
        assert!(e.starts_with("maxpending:"), "{e}");
        assert!(check_server_config("high_throughput", Some(10)).is_ok());
    }

    #[test]
    fn histogram_totals_are_read_from_the_metrics_text() {
        let text = "# HELP warrant_durable_wait_seconds Time ...\n\
            # TYPE warrant_durable_wait_seconds histogram\n\
            warrant_durable_wait_seconds_bucket{le=\"0.001\"} 3\n\
            warrant_durable_wait_seconds_sum 0.012\n\
            warrant_durable_wait_seconds_count 8\n\
            warrant_durable_wait_seconds_total_bogus 1\n\
            warrant_commit_batch_size_sum 30\n\
            warrant_commit_batch_size_count 4\n";
        let wait = |t| parse_histogram_totals(t, "warrant_durable_wait_seconds");
        let after = wait(text).unwrap();
        assert_eq!(
            after,
            HistogramTotals {
                sum: 0.012,
                count: 8
            }
        );
        let before = HistogramTotals {
            sum: 0.004,
            count: 4,
        };
        let mean = after.mean_since(Some(before)).unwrap();
        assert!((mean - 0.002).abs() < 1e-12, "{mean}");
        assert!((after.mean_since(None).unwrap() - 0.0015).abs() < 1e-12);
        // No durable request answered in between, or none ever.
        assert_eq!(after.mean_since(Some(after)), None);
        assert_eq!(wait("warrant_commits_total 3\n"), None);
        let batches = parse_histogram_totals(text, "warrant_commit_batch_size").unwrap();
        assert_eq!(batches.mean_since(None), Some(7.5));
    }
}
