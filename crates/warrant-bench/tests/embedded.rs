//! The library end to end, without the binary: one short run against the
//! embedded server, called from a test thread (not `main`), so the split of
//! the server's CPU by thread group is checked where the caller's own
//! thread carries an arbitrary name.

use clap::Parser;
use warrant_bench::{Keys, RunArgs, Scenario, run_bench};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
}

#[test]
fn an_embedded_run_counts_every_success_and_splits_the_servers_cpu() {
    let mut args = Cli::parse_from([
        "bench",
        "--duration",
        "1s",
        "--agents",
        "2",
        "--workers",
        "1",
    ])
    .run;
    args.scenario = Scenario::Regular;
    args.keys = Keys::Server;
    let r = run_bench(&args, None).expect("the run completes");
    let t = &r.totals;
    assert!(t.success > 0, "no success: {t:?}");
    assert_eq!(t.certificate_rows, Some(t.success));
    assert_eq!(r.rows_match, Some(true));
    let total = t
        .cpu_us_per_cert
        .expect("the embedded server's CPU is measured");
    let parts = t
        .cpu_us_per_cert_by_thread
        .as_ref()
        .expect("and split by thread group");
    let sum: f64 = parts.values().sum();
    assert!(
        (sum - total).abs() <= 1e-6 * total + 1e-6,
        "{parts:?} add up to {sum}, not {total}"
    );
    assert!(
        parts.get("tokio-workers").is_some_and(|c| *c > 0.0),
        "{parts:?}"
    );
    for group in parts.keys() {
        assert!(
            [
                "tokio-workers",
                "blocking-pool",
                "sqlx-sqlite-workers",
                "other"
            ]
            .contains(&group.as_str()),
            "{group}"
        );
    }
    assert_eq!(r.server, "embedded");
}
