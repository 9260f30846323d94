//! Crash safety of the whole server (issue 4): `warrant serve` under
//! concurrent agent and regular issuances is killed with SIGKILL mid-load and
//! restarted on the same data dir and database. Every certificate that got a
//! 200 must be there with its audit row, and every acknowledged DA must be
//! refused as a replay.
//! Five trials per backend; the restart of one trial serves the next.

#[path = "../../warrant-server/tests/common/mod.rs"]
mod common;
mod support;

use common::{Backend, TestDb};
use std::time::{Duration, Instant};
use support::*;

const TRIALS: usize = 5;
const CLIENTS: usize = 32;

async fn kill9_loses_nothing(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let data = DataDir::init(&db);
    let mut node = data.serve("node-0");
    let api = Api::login(&node).await;
    let mut all_acked: Vec<Acked> = Vec::new();
    for trial in 0..TRIALS {
        let people = vec![
            api.person(&node, &format!("alice-{trial}")).await,
            api.person(&node, &format!("bob-{trial}")).await,
        ];
        let load = Load::start(&api, &node.base, &people, CLIENTS);
        // Kill at a different point of the load in each trial, once at
        // least one issuance was acknowledged.
        let kill_after = Duration::from_millis(500 + 600 * trial as u64);
        let started = Instant::now();
        while started.elapsed() < kill_after || acked_count(&load.seen) == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "{backend:?} trial {trial}: no issuance acknowledged in 120 s: {}",
                node.stderr_log()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let log = node.stderr_log();
        tokio::task::block_in_place(|| node.kill9());
        let seen = load.finish().await;
        assert!(
            seen.statuses.is_empty(),
            "{backend:?} trial {trial}: unexpected answers under load: {}\n{log}",
            seen.non_200()
        );
        node = data.serve(&format!("node-{}", trial + 1));
        assert_nothing_lost(
            &api,
            &node,
            &seen.acked,
            &format!("{backend:?} trial {trial}"),
        )
        .await;
        let agents = seen.acked.iter().filter(|a| a.da_body.is_some()).count();
        eprintln!(
            "{backend:?} trial {trial}: {} acknowledged ({agents} agents) before kill -9, none lost",
            seen.acked.len()
        );
        all_acked.extend(seen.acked);
    }
    // Later crashes did not lose what earlier trials committed.
    let certs_only: Vec<Acked> = all_acked
        .into_iter()
        .map(|a| Acked { da_body: None, ..a })
        .collect();
    assert_nothing_lost(&api, &node, &certs_only, &format!("{backend:?} all trials")).await;
    tokio::task::block_in_place(|| node.stop());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_kill9_under_load_loses_no_acknowledged_issuance() {
    kill9_loses_nothing(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_kill9_under_load_loses_no_acknowledged_issuance() {
    kill9_loses_nothing(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_kill9_under_load_loses_no_acknowledged_issuance() {
    kill9_loses_nothing(Backend::MySql).await;
}
