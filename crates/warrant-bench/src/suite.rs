//! `warrant bench suite`: the reference's T1–T5 (bench.md) in one command,
//! each on a fresh server, with a summary table and one JSON per test.

use crate::args::{Keys, Mode, RunArgs, Scenario, parse_duration};
use crate::report::BenchReport;
use crate::run::run_bench;
use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug, Clone)]
pub struct SuiteArgs {
    /// Run only these tests (t1..t5, comma-separated).
    #[arg(long)]
    pub only: Option<String>,
    /// Multiplies agents and users (and so the T3 rate); durations are kept.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// SQLite path or postgres:// / mysql:// / mariadb:// URL (default: temp SQLite per test).
    #[arg(long)]
    pub db: Option<String>,
    /// Where results/<timestamp>/ is created.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Wall limit of the load phase of each test (default: its duration + 60 s).
    #[arg(long, value_parser = parse_duration)]
    pub test_timeout: Option<Duration>,
    /// Run each server as a separate process (server-only CPU and RSS).
    #[arg(long)]
    pub server_process: bool,
    #[arg(long, value_enum, default_value = "server")]
    pub keys: Keys,
    #[arg(long)]
    pub workers: Option<usize>,
    #[arg(short = 'v', long = "v")]
    pub verbose: bool,
}

pub struct TestDef {
    pub name: &'static str,
    pub mode: Mode,
    pub scenario: Scenario,
    pub duration_s: u64,
    pub agents: usize,
    pub users: usize,
    pub interval_ms: u64,
    pub maxpending: Option<usize>,
    pub purpose: &'static str,
}

pub const TESTS: [TestDef; 5] = [
    TestDef {
        name: "t1",
        mode: Mode::Random,
        scenario: Scenario::Regular,
        duration_s: 15,
        agents: 2500,
        users: 2500,
        interval_ms: 100,
        maxpending: Some(1_000_000),
        purpose: "regular ceiling without backpressure",
    },
    TestDef {
        name: "t2",
        mode: Mode::Random,
        scenario: Scenario::Aic,
        duration_s: 15,
        agents: 2500,
        users: 2500,
        interval_ms: 100,
        maxpending: Some(1_000_000),
        purpose: "agent ceiling",
    },
    TestDef {
        name: "t3",
        mode: Mode::Random,
        scenario: Scenario::Aic,
        duration_s: 120,
        agents: 5000,
        users: 5000,
        interval_ms: 6000,
        maxpending: Some(500_000),
        purpose: "enterprise steady state",
    },
    TestDef {
        name: "t4",
        mode: Mode::Stress,
        scenario: Scenario::Aic,
        duration_s: 30,
        agents: 3000,
        users: 5000,
        interval_ms: 600_000,
        maxpending: None,
        purpose: "burst (everyone wakes at once)",
    },
    TestDef {
        name: "t5",
        mode: Mode::Stress,
        scenario: Scenario::Aic,
        duration_s: 30,
        agents: 5000,
        users: 5000,
        interval_ms: 600_000,
        maxpending: None,
        purpose: "burst throughput independent of concurrency",
    },
];

pub fn scaled(n: usize, scale: f64) -> usize {
    ((n as f64 * scale).round() as usize).max(1)
}

pub fn selected(only: Option<&str>) -> Result<Vec<&'static TestDef>> {
    let Some(only) = only else {
        return Ok(TESTS.iter().collect());
    };
    let mut out = Vec::new();
    for name in only
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
    {
        match TESTS.iter().find(|t| t.name == name) {
            Some(t) => out.push(t),
            None => bail!("only: unknown test {name:?} (t1..t5)"),
        }
    }
    if out.is_empty() {
        bail!("only: no test named");
    }
    Ok(out)
}

fn run_args(t: &TestDef, s: &SuiteArgs) -> RunArgs {
    RunArgs {
        mode: t.mode,
        scenario: t.scenario,
        duration: Duration::from_secs(t.duration_s),
        agents: scaled(t.agents, s.scale),
        users: Some(scaled(t.users, s.scale)),
        qps: 0.0,
        interval: Duration::from_millis(t.interval_ms),
        db: s.db.clone(),
        maxpending: t.maxpending,
        profile: String::new(),
        durability: warrant_store::Durability::Durable,
        keys: s.keys,
        target: None,
        token: None,
        server_process: s.server_process,
        json: false,
        out: None,
        verbose: s.verbose,
        workers: s.workers,
        csr_pool: 2048,
    }
}

/// `--db` as the summary shows it: a SQLite file by its name, a server
/// database only as `external` (its DSN may hold a password).
fn db_label(db: &str) -> &str {
    match warrant_store::parse_dsn(db) {
        Ok(warrant_store::Dsn::Sqlite { .. }) => db,
        _ => "external",
    }
}

fn row(t: &TestDef, status: &str, r: Option<&BenchReport>) -> String {
    let Some(r) = r else {
        return format!(
            "| {} | {status} | | | | | | | | | |\n",
            t.name.to_uppercase()
        );
    };
    let x = &r.totals;
    let err_pct = if x.total_requests > 0 {
        100.0 * x.failures as f64 / x.total_requests as f64
    } else {
        0.0
    };
    format!(
        "| {} | {status} | {} | {:.0} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} |\n",
        t.name.to_uppercase(),
        x.success,
        x.requests_per_sec,
        x.error_codes.get("503").copied().unwrap_or(0),
        x.latency_p50_ms,
        x.latency_p99_ms,
        x.latency_p999_ms,
        err_pct,
        x.cpu_us_per_cert
            .map(|c| format!("{c:.0} µs"))
            .unwrap_or_else(|| "n/a".into()),
        x.efficiency
            .map(|e| format!("{e:.2}"))
            .unwrap_or_else(|| "n/a".into()),
    )
}

pub fn run_suite(s: SuiteArgs) -> Result<()> {
    if !(s.scale > 0.0 && s.scale.is_finite()) {
        bail!("scale: must be a positive number");
    }
    let tests = selected(s.only.as_deref())?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let stamp: String = aic::time::format_rfc3339(now)
        .chars()
        .filter(|c| *c != '-' && *c != ':')
        .collect();
    let dir = s.results.join(&stamp);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut summary = format!(
        "# warrant bench suite {stamp}\n\nscale {} (agents and users × scale; durations unchanged) · keys {:?} · db {} · server {}\n\n\
         | test | status | success | req/s | 503 | p50 ms | p99 ms | p999 ms | err % | server CPU/cert | efficiency |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
        s.scale,
        s.keys,
        s.db.as_deref().map_or("temp SQLite", db_label),
        if s.server_process {
            "child process"
        } else {
            "embedded"
        },
    );
    let mut notes = String::new();
    for t in tests {
        let args = run_args(t, &s);
        let limit = s
            .test_timeout
            .unwrap_or(args.duration + Duration::from_secs(60));
        eprintln!(
            "{}: {:?} {:?} {}s agents {} users {} ({})",
            t.name.to_uppercase(),
            t.mode,
            t.scenario,
            t.duration_s,
            args.agents,
            args.users.unwrap_or(0),
            t.purpose
        );
        match run_bench(&args, Some(limit)) {
            Ok(r) => {
                let status = if r.timed_out {
                    "TIMEOUT"
                } else if r.rows_match == Some(false) {
                    "ROWS MISMATCH"
                } else {
                    "OK"
                };
                let path = dir.join(format!("{}.json", t.name));
                std::fs::write(&path, format!("{}\n", serde_json::to_string_pretty(&r)?))
                    .with_context(|| format!("writing {}", path.display()))?;
                eprint!("{}", r.text());
                summary.push_str(&row(t, status, Some(&r)));
            }
            Err(e) => {
                eprintln!("{}: ERROR {e:#}", t.name.to_uppercase());
                notes.push_str(&format!("- {}: {e:#}\n", t.name.to_uppercase()));
                summary.push_str(&row(t, "ERROR", None));
            }
        }
    }
    if !notes.is_empty() {
        summary.push_str(&format!("\nErrors:\n{notes}"));
    }
    summary.push_str(
        "\nLatencies are service latencies (send → answer); corrected ones are in each JSON. \
         Server CPU/cert = server CPU seconds / successes; efficiency = crypto floor / CPU per cert.\n",
    );
    let path = dir.join("SUMMARY.md");
    std::fs::write(&path, &summary).with_context(|| format!("writing {}", path.display()))?;
    print!("{summary}");
    println!("\nresults: {}", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_multiplies_agents_and_keeps_at_least_one() {
        assert_eq!(scaled(5000, 0.05), 250);
        assert_eq!(scaled(3, 0.01), 1);
    }

    #[test]
    fn the_summary_never_shows_a_server_dsn() {
        assert_eq!(db_label("/tmp/b.db"), "/tmp/b.db");
        assert_eq!(db_label("sqlite:///tmp/b.db"), "sqlite:///tmp/b.db");
        assert_eq!(db_label("postgres://u:pw@h/db"), "external");
        assert_eq!(db_label("mariadb://h/db"), "external");
    }

    #[test]
    fn only_selects_named_tests_and_rejects_unknown_ones() {
        assert_eq!(selected(Some("t3")).unwrap()[0].name, "t3");
        assert_eq!(selected(Some("T1,t5")).unwrap().len(), 2);
        assert!(selected(Some("t9")).is_err());
        assert_eq!(selected(None).unwrap().len(), 5);
    }
}
