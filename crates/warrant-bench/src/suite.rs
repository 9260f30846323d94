//! `warrant bench suite`: the reference's T1–T5 (bench.md) in one command,
//! each on a fresh server, with a summary table and one JSON per test.

use crate::args::{Keys, Mode, RunArgs, Scenario, parse_duration};
use crate::dbadmin;
use crate::report::{BenchReport, Totals};
use crate::run::run_bench;
use anyhow::{Context, Result, bail};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug, Clone)]
pub struct SuiteArgs {
    /// Run only these tests (t1..t6, comma-separated; t6 is the soak).
    #[arg(long)]
    pub only: Option<String>,
    /// Multiplies agents and users (and so the T3 rate); durations are kept.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// SQLite path or postgres:// / mysql:// / mariadb:// URL (default: temp SQLite per test),
    /// recreated empty before each test.
    #[arg(long, env = "MYSQL_URL")]
    pub db: Option<String>,
    /// Admin URL of the --db server, used to drop and create the bench database
    /// (and create its user if missing) before each test; default: --db's own user.
    #[arg(long, env = "MYSQL_ADMIN")]
    pub admin: Option<String>,
    /// Where results/<timestamp>/ is created.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Wall limit of the load phase of each test, e.g. 300 or 5m (default: its
    /// duration + 60 s); a test past it is marked TIMEOUT and the suite goes on.
    #[arg(long, env = "RUN_TIMEOUT", value_parser = parse_duration)]
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

/// T6: `warrant bench soak`, the fleet day compressed (4,167/s × scale for
/// its default 10 minutes, or `RUN_TIMEOUT` when shorter).
pub const SOAK_TEST: &str = "t6";

/// The tests `--only` names: some of T1–T5 and whether T6 runs.
pub struct Selection {
    pub tests: Vec<&'static TestDef>,
    pub soak: bool,
}

pub fn selected(only: Option<&str>) -> Result<Selection> {
    let Some(only) = only else {
        return Ok(Selection {
            tests: TESTS.iter().collect(),
            soak: true,
        });
    };
    let mut out = Selection {
        tests: Vec::new(),
        soak: false,
    };
    for name in only
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
    {
        if name == SOAK_TEST {
            out.soak = true;
            continue;
        }
        match TESTS.iter().find(|t| t.name == name) {
            Some(t) => out.tests.push(t),
            None => bail!("only: unknown test {name:?} (t1..t6)"),
        }
    }
    if out.tests.is_empty() && !out.soak {
        bail!("only: no test named");
    }
    Ok(out)
}

/// T6's soak flags: the defaults scaled like the other tests (rate, agents
/// and people), on the suite's database and server mode.
pub fn soak_args(s: &SuiteArgs, dir: &std::path::Path) -> crate::soak::SoakArgs {
    let mut a = crate::soak::SoakArgs::defaults();
    a.rate *= s.scale;
    a.agents = scaled(a.agents, s.scale);
    a.users = scaled(a.users, s.scale);
    a.db = s.db.clone();
    a.server_process = s.server_process;
    a.workers = s.workers;
    a.verbose = s.verbose;
    if let Some(limit) = s.test_timeout {
        a.duration = a.duration.min(limit);
        // The checks need samples after the warm-up.
        a.warmup = a.warmup.min(a.duration / 3);
    }
    a.out_dir = Some(dir.join("t6-fleet-day"));
    a
}

/// T6's SUMMARY.md row, `.metrics` and log text.
fn soak_outputs(
    r: Option<&crate::soak::SoakReport>,
    error: Option<String>,
) -> (String, String, String) {
    let Some(r) = r else {
        let e = error.unwrap_or_default();
        return (
            "| T6 | ERROR | - | - | - | - | - | - | - | - | - |\n".into(),
            format!("test={SOAK_TEST}\nstatus=ERROR\n"),
            format!("ERROR {e}\n"),
        );
    };
    let status = if r.pass { "PASS" } else { "FAIL" };
    let secs = r.config.duration.as_secs_f64().max(1.0);
    let n503 = r.errors_by_code.get("503").copied().unwrap_or(0);
    let p99 = r
        .p99_after_warmup_ms
        .map_or("-".into(), |v| format!("{v:.1}"));
    let row = format!(
        "| T6 | {status} | {} | {:.0} | {n503} | - | {p99} | - | {:.2} | - | - |\n",
        r.total_certs,
        r.total_certs as f64 / secs,
        100.0 * r.total_failures as f64 / (r.total_certs + r.total_failures).max(1) as f64,
    );
    let mut metrics = format!(
        "test={SOAK_TEST}\nstatus={status}\nsuccess={}\nfailures={}\nnot_sent={}\np99_ms={p99}\npruned_rows={}\n",
        r.total_certs,
        r.total_failures,
        r.dropped,
        r.pruned_rows.map_or("-".into(), |p| p.to_string()),
    );
    let mut log = String::new();
    for c in &r.checks {
        metrics.push_str(&format!(
            "check_{}={}\n",
            c.name,
            if c.pass { "pass" } else { "fail" }
        ));
        log.push_str(&format!(
            "{} {:<8} {}\n",
            if c.pass { "PASS" } else { "FAIL" },
            c.name,
            c.detail
        ));
    }
    (row, metrics, log)
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
        engine: false,
        sync: false,
        port: None,
        cpuprofile: None,
        memprofile: None,
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

/// The stem of a test's `.log` and `.metrics` files, as the reference's script
/// names them: `tN-<what it measures>`.
pub fn file_stem(t: &TestDef) -> String {
    let what = match t.name {
        "t1" => "regular-ceiling",
        "t2" => "agent-ceiling",
        "t3" => "steady-state",
        "t4" => "burst-3000",
        "t5" => "burst-5000",
        _ => "test",
    };
    format!("{}-{what}", t.name)
}

fn err_pct(x: &Totals) -> f64 {
    if x.total_requests > 0 {
        100.0 * x.failures as f64 / x.total_requests as f64
    } else {
        0.0
    }
}

/// A test's `.metrics` file: one `key=value` per line, for scripts that
/// compare runs (the SUMMARY.md figures, unrounded, and a few more).
pub fn metrics_text(t: &TestDef, status: &str, r: Option<&BenchReport>) -> String {
    let mut kv: Vec<(&str, String)> = vec![("test", t.name.into()), ("status", status.into())];
    if let Some(r) = r {
        let x = &r.totals;
        let opt = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.3}"));
        let code = |c: &str| x.error_codes.get(c).copied().unwrap_or(0).to_string();
        kv.extend([
            ("agents", r.agents.to_string()),
            ("users", r.users.to_string()),
            ("total", x.total_requests.to_string()),
            ("success", x.success.to_string()),
            ("failures", x.failures.to_string()),
            ("req_per_s", format!("{:.3}", x.requests_per_sec)),
            ("certs_per_s", format!("{:.3}", x.issued_per_sec)),
            ("503", code("503")),
            ("429", code("429")),
            ("transport_errors", code("0")),
            ("p50_ms", format!("{:.3}", x.latency_p50_ms)),
            ("p95_ms", format!("{:.3}", x.latency_p95_ms)),
            ("p99_ms", format!("{:.3}", x.latency_p99_ms)),
            ("p999_ms", format!("{:.3}", x.latency_p999_ms)),
            ("max_ms", format!("{:.3}", x.latency_max_ms)),
            ("err_pct", format!("{:.3}", err_pct(x))),
            (
                "certificate_rows",
                x.certificate_rows
                    .map_or_else(|| "n/a".into(), |n| n.to_string()),
            ),
            ("server_cpu_us_per_cert", opt(x.cpu_us_per_cert)),
            ("efficiency", opt(x.efficiency)),
            ("elapsed_s", format!("{:.3}", x.elapsed)),
        ]);
    }
    kv.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}

fn row(t: &TestDef, status: &str, r: Option<&BenchReport>) -> String {
    let Some(r) = r else {
        return format!(
            "| {} | {status} | | | | | | | | | |\n",
            t.name.to_uppercase()
        );
    };
    let x = &r.totals;
    let err_pct = err_pct(x);
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
    let selection = selected(s.only.as_deref())?;
    let tests = selection.tests.iter().copied();
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
    let host = crate::host::collect(&dir);
    let host_lines: String = host
        .text()
        .lines()
        .map(|l| format!("{l}  \n"))
        .chain(
            host.warnings()
                .iter()
                .map(|w| format!("**warning:** {w}  \n")),
        )
        .collect();
    let mut summary = format!(
        "# warrant bench suite {stamp}\n\n{host_lines}\nscale {} (agents and users × scale; durations unchanged) · keys {:?} · db {} · server {}\n\n\
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
        let header = format!(
            "{}: {:?} {:?} {}s agents {} users {} ({})",
            t.name.to_uppercase(),
            t.mode,
            t.scenario,
            t.duration_s,
            args.agents,
            args.users.unwrap_or(0),
            t.purpose
        );
        eprintln!("{header}");
        let mut log = format!("{header}\n");
        // Each test starts on an empty database, as the reference's script
        // drops and creates it before each one.
        let result = match &s.db {
            Some(db) => dbadmin::recreate_database(db, s.admin.as_deref()),
            None => Ok(()),
        }
        .and_then(|()| run_bench(&args, Some(limit)));
        let (status, report) = match result {
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
                log.push_str(&format!("{}\n{}", r.server_config, r.text()));
                eprint!("{}", r.text());
                summary.push_str(&row(t, status, Some(&r)));
                (status, Some(r))
            }
            Err(e) => {
                eprintln!("{}: ERROR {e:#}", t.name.to_uppercase());
                log.push_str(&format!("ERROR {e:#}\n"));
                notes.push_str(&format!("- {}: {e:#}\n", t.name.to_uppercase()));
                summary.push_str(&row(t, "ERROR", None));
                ("ERROR", None)
            }
        };
        let stem = file_stem(t);
        for (ext, text) in [
            ("log", log),
            ("metrics", metrics_text(t, status, report.as_ref())),
        ] {
            let path = dir.join(format!("{stem}.{ext}"));
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    if selection.soak {
        let a = soak_args(&s, &dir);
        let header = format!(
            "T6: soak {:.0}/s for {}s, {} agents, {} people (the fleet day compressed)",
            a.rate,
            a.duration.as_secs(),
            a.agents,
            a.users
        );
        eprintln!("{header}");
        let result = match &s.db {
            Some(db) => dbadmin::recreate_database(db, s.admin.as_deref()),
            None => Ok(()),
        }
        .and_then(|()| crate::soak::soak(&a));
        let (row, metrics, log) = match &result {
            Ok(r) => soak_outputs(Some(r), None),
            Err(e) => {
                notes.push_str(&format!("- T6: {e:#}\n"));
                soak_outputs(None, Some(format!("{e:#}")))
            }
        };
        summary.push_str(&row);
        for (ext, text) in [("log", format!("{header}\n{log}")), ("metrics", metrics)] {
            let path = dir.join(format!("t6-fleet-day.{ext}"));
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
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
    fn each_test_has_its_log_and_metrics_stem() {
        let stems: Vec<String> = TESTS.iter().map(file_stem).collect();
        assert_eq!(
            stems,
            [
                "t1-regular-ceiling",
                "t2-agent-ceiling",
                "t3-steady-state",
                "t4-burst-3000",
                "t5-burst-5000"
            ]
        );
        // A test that never produced a report still says why.
        assert_eq!(
            metrics_text(&TESTS[2], "ERROR", None),
            "test=t3\nstatus=ERROR\n"
        );
    }

    #[test]
    fn only_selects_named_tests_and_rejects_unknown_ones() {
        assert_eq!(selected(Some("t3")).unwrap().tests[0].name, "t3");
        assert_eq!(selected(Some("T1,t5")).unwrap().tests.len(), 2);
        assert!(selected(Some("t9")).is_err());
        let all = selected(None).unwrap();
        assert_eq!((all.tests.len(), all.soak), (5, true));
        let t6 = selected(Some("t6")).unwrap();
        assert_eq!((t6.tests.len(), t6.soak), (0, true));
        assert!(!selected(Some("t3")).unwrap().soak);
    }

    #[test]
    fn t6_is_the_soak_scaled_like_the_others() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            s: SuiteArgs,
        }
        let s = Cli::parse_from(["suite", "--scale", "0.1", "--test-timeout", "90s"]).s;
        let a = soak_args(&s, std::path::Path::new("/r"));
        assert!((a.rate - 416.7).abs() < 1e-6, "{}", a.rate);
        assert_eq!((a.agents, a.users), (1000, 100));
        assert_eq!(
            a.duration,
            Duration::from_secs(90),
            "RUN_TIMEOUT shortens it"
        );
        assert_eq!(
            a.out_dir.as_deref(),
            Some(std::path::Path::new("/r/t6-fleet-day"))
        );
    }
}
