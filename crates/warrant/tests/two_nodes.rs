//! Replay protection across nodes (issue 4): two `warrant serve` processes
//! share one PostgreSQL (or MariaDB) database and the same CA keys (the
//! second node runs on a copy of the first one's data dir). The same DA is
//! sent to both at the same moment, many times: exactly one 200 each time,
//! the other a 403 `api.da_nonce_replayed`, and the loser's certificate is
//! never stored.

#[path = "../../warrant-server/tests/common/mod.rs"]
mod common;
mod support;

use common::{Backend, Da, TestDb, assert_error, urlencode};
use support::*;
use warrant_server::ErrorKey;

const ROUNDS: usize = 50;

async fn same_da_on_two_nodes_is_issued_once(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let data_a = DataDir::init(&db);
    let data_b = data_a.copy();
    let node_a = data_a.serve("node-a");
    let node_b = data_b.serve("node-b");
    // One client per node, each with a warm connection, so that both
    // requests leave together.
    let api_a = Api::login(&node_a).await;
    let api_b = Api::login(&node_b).await;
    for (api, node) in [(&api_a, &node_a), (&api_b, &node_b)] {
        let (s, b) = api.get(&node.url("/api/v1/users/info")).await.unwrap();
        assert_eq!(s, 200, "{}: {b}", node.name);
    }
    let alice = api_a.person(&node_a, "alice").await;

    let mut wins = [0usize; 2];
    let mut serials = Vec::new();
    for round in 0..ROUNDS {
        let body = Da::new(&alice, &format!("bot-{round}"), &[]).body(&alice);
        let (url_a, url_b) = (node_a.url("/api/v1/certs"), node_b.url("/api/v1/certs"));
        let (ra, rb) = tokio::join!(api_a.post(&url_a, &body), api_b.post(&url_b, &body));
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        let (winner, loser, w) = match (ra.0, rb.0) {
            (200, _) => (ra, rb, 0),
            (_, 200) => (rb, ra, 1),
            _ => panic!("{backend:?} round {round}: no node issued: {ra:?} / {rb:?}"),
        };
        assert_error(&loser, ErrorKey::DaNonceReplayed);
        wins[w] += 1;
        serials.push(winner.1["serial_number"].as_str().unwrap().to_string());
    }

    // Each winner is visible from the other node too, and nothing else was
    // stored for alice: her person certificate plus one agent per round.
    for s in &serials {
        for (api, node) in [(&api_a, &node_a), (&api_b, &node_b)] {
            let (st, b) = api
                .get(&node.url(&format!("/api/v1/cert/people/{s}")))
                .await
                .unwrap();
            assert_eq!(st, 200, "{}: {s}: {b}", node.name);
        }
    }
    let uid = urlencode(&alice.uid);
    let (s, list) = api_b
        .get(&node_b.url(&format!("/api/v1/certs?principal_uid={uid}&limit=1000")))
        .await
        .unwrap();
    assert_eq!(s, 200, "{list}");
    assert_eq!(list["count"], ROUNDS + 1, "{list}");
    eprintln!(
        "{backend:?}: {ROUNDS} rounds, node a won {}, node b won {}",
        wins[0], wins[1]
    );
    tokio::task::block_in_place(|| {
        node_a.stop();
        node_b.stop();
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_nodes_issue_each_da_exactly_once() {
    same_da_on_two_nodes_is_issued_once(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_two_nodes_issue_each_da_exactly_once() {
    same_da_on_two_nodes_is_issued_once(Backend::MySql).await;
}
