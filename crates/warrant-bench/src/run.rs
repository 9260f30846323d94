//! One benchmark run, start to finish, and the `warrant bench` command that
//! prints it.

use crate::args::{Keys, Mode, RunArgs};
use crate::profile::Profilers;
use crate::report::BenchReport;
use crate::scenario::BenchSource;
use crate::server::{self, ServerUnderTest};
use crate::{dbadmin, floor, load, setup};
use anyhow::{Context, Result, bail};
use std::time::Duration;
use warrant_store::Durability;

/// `warrant bench`: one run, its report on stdout (text or `--json`) and
/// in `--out`; fails when an acknowledged certificate is not in the DB.
pub(crate) fn run_single(args: RunArgs) -> Result<()> {
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
    if let Some(db) = &args.db {
        warrant_store::parse_dsn(db).map_err(|e| anyhow::anyhow!("db: {e}"))?;
    }
    if args.target.is_some() && args.durability != Durability::Durable {
        bail!("durability: a --target server's durability is its own configuration");
    }
    if args.keys == Keys::Csr && args.csr_pool == 0 {
        bail!("csr-pool: must be at least 1");
    }
    if args.sync && args.durability != Durability::Durable {
        bail!("sync: means --durability durable; it cannot be combined with --durability buffered");
    }
    if args.port.is_some() && args.target.is_some() {
        bail!("port: the port of the server the bench starts; a --target server has its own");
    }
    let profiling = args.cpuprofile.is_some() || args.memprofile.is_some();
    if profiling && (args.server_process || args.target.is_some()) {
        bail!(
            "cpuprofile/memprofile: they profile this process, which holds the server only when \
             it is embedded; drop --server-process/--target (or profile that server yourself)"
        );
    }
    Ok(())
}

/// What the reference's flags mean here, printed with the report so a
/// reader comparing the two tools knows what each run actually did.
pub(crate) fn flag_notes(args: &RunArgs) -> Vec<String> {
    let mut notes = Vec::new();
    if args.engine {
        notes.push(
            "-engine: accepted for the reference's command line and changes nothing: Warrant \
             always keeps the DA nonce ledger and the recent-certificates window in memory, \
             with a durable group commit to the database"
                .to_string(),
        );
    }
    if args.sync {
        notes.push(
            "-sync: durability durable (Warrant's default): each 200 is sent only after its \
             certificate and nonce rows are committed"
                .to_string(),
        );
    }
    if let Some(p) = &args.cpuprofile {
        notes.push(format!(
            "-cpuprofile {}: pprof CPU profile at 99 Hz of this process (load generator and \
             embedded server) over the measured window",
            p.display()
        ));
    }
    if let Some(p) = &args.memprofile {
        notes.push(format!(
            "-memprofile {}: pprof heap profile (alloc/inuse space, one sample per 512 KiB \
             allocated) of this process from the server's start to the end of the measured window",
            p.display()
        ));
    }
    notes
}

/// One full run; `wall_limit` stops the load early (the suite's per-test limit).
pub fn run_bench(args: &RunArgs, wall_limit: Option<Duration>) -> Result<BenchReport> {
    check_args(args)?;
    let users = args.users.unwrap_or(args.agents);
    if let (Some(db), None) = (&args.db, &args.target) {
        dbadmin::ensure_database(db)?;
    }
    // The heap profile starts before the server so that its live state
    // (caches, pools) is in the in-use figures.
    let heap = Profilers::start(None, args.memprofile.as_deref())?;
    let sut = ServerUnderTest::start(args).context("starting the server under test")?;
    let host = crate::host::collect(
        sut.data_dir
            .clone()
            .unwrap_or_else(std::env::temp_dir)
            .as_path(),
    );
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
    let source = BenchSource::new(args, &sut.base_path, &token, principals, csrs);
    let cpu = Profilers::start(args.cpuprofile.as_deref(), None)?;
    let outcome = load::drive(&sut, args, source, wall_limit)?;
    let profiles = [cpu.stop()?, heap.stop()?];
    let floor = floor::measure(
        args.scenario,
        args.keys,
        users,
        outcome.report.successes,
        Duration::from_millis(300),
    )?;
    let after = sut.counters()?;
    let mut report = BenchReport::build(args, users, &sut, outcome, floor, before, after)?;
    report.notes = flag_notes(args);
    report.host = Some(host);
    sut.shutdown();
    // Written once the server has drained, as the reference writes its own.
    for p in profiles {
        p.write()?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::default_run_args;

    #[test]
    fn flags_clap_cannot_check_are_refused_by_name() {
        let refused = |f: &dyn Fn(&mut RunArgs)| {
            let mut a = default_run_args();
            f(&mut a);
            check_args(&a).unwrap_err().to_string()
        };
        assert!(refused(&|a| a.agents = 0).starts_with("agents:"));
        assert!(refused(&|a| a.users = Some(0)).starts_with("users:"));
        assert!(refused(&|a| a.qps = f64::NAN).starts_with("qps:"));
        assert!(refused(&|a| a.target = Some("http://h:1".into())).starts_with("token:"));
        assert!(refused(&|a| a.db = Some("redis://h/0".into())).starts_with("db:"));
        assert!(refused(&|a| a.db = Some("sqlite::memory:".into())).starts_with("db:"));
        assert!(
            refused(&|a| {
                a.keys = Keys::Csr;
                a.csr_pool = 0;
            })
            .starts_with("csr-pool:")
        );
        assert!(
            refused(&|a| {
                a.sync = true;
                a.durability = Durability::Buffered;
            })
            .starts_with("sync:")
        );
        assert!(
            refused(&|a| {
                a.port = Some(8080);
                a.target = Some("http://h:1".into());
                a.token = Some("t".into());
            })
            .starts_with("port:")
        );
        assert!(
            refused(&|a| {
                a.cpuprofile = Some("cpu.pb".into());
                a.server_process = true;
            })
            .starts_with("cpuprofile/memprofile:")
        );
        assert!(check_args(&default_run_args()).is_ok());
    }

    #[test]
    fn the_reference_flags_say_what_they_mean_here() {
        let mut a = default_run_args();
        assert!(flag_notes(&a).is_empty());
        a.engine = true;
        a.sync = true;
        a.memprofile = Some("mem.pb".into());
        let notes = flag_notes(&a);
        assert_eq!(notes.len(), 3);
        assert!(notes[0].starts_with("-engine:") && notes[0].contains("changes nothing"));
        assert!(notes[1].starts_with("-sync:") && notes[1].contains("durable"));
        assert!(notes[2].starts_with("-memprofile mem.pb:"));
    }
}
