//! Database outage: the server database vanishes mid-run (a TCP proxy in
//! front of it is cut), requests fail fast with `Unavailable`, nothing hangs,
//! and the store recovers by itself when the database is back.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use warrant_store::*;

use common::*;

/// Forwards 127.0.0.1:<port> to the database; `cut` closes the listener and
/// every connection (like a crashed database host), `restore` listens again
/// on the same port.
struct Proxy {
    addr: SocketAddr,
    target: SocketAddr,
    task: Option<JoinHandle<()>>,
}

impl Proxy {
    async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut p = Proxy {
            addr,
            target,
            task: None,
        };
        p.task = Some(tokio::spawn(serve(listener, target)));
        p
    }

    fn cut(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort(); // drops the listener and, via the JoinSet, every connection
        }
    }

    async fn restore(&mut self) {
        let listener = TcpListener::bind(self.addr).await.unwrap();
        self.task = Some(tokio::spawn(serve(listener, self.target)));
    }
}

async fn serve(listener: TcpListener, target: SocketAddr) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            continue;
        };
        conns.spawn(async move {
            if let Ok(mut outbound) = TcpStream::connect(target).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

fn host_port(url: &str) -> (String, SocketAddr) {
    // scheme://user@host:port/path?query → (prefix up to '@', host:port)
    let (scheme, rest) = url.split_once("://").unwrap();
    let (auth, hostpart) = match rest.split_once('@') {
        Some((a, h)) => (format!("{a}@"), h),
        None => (String::new(), rest),
    };
    let hp = hostpart.split(['/', '?']).next().unwrap();
    (format!("{scheme}://{auth}"), hp.parse().unwrap())
}

async fn outage_fails_fast_and_recovers(db: TestDb) {
    let (prefix, target) = host_port(&db.dsn);
    let mut proxy = Proxy::start(target).await;
    let path = &db.dsn[db.dsn.find(&target.to_string()).unwrap() + target.to_string().len()..];
    let via_proxy = format!("{prefix}{}{path}", proxy.addr);
    let opts = StoreOptions {
        connect_timeout: Duration::from_secs(3),
        acquire_timeout: Duration::from_secs(2),
        statement_timeout: Duration::from_secs(3),
        ..Default::default()
    };
    let store = std::sync::Arc::new(Store::open(&via_proxy, opts).await.unwrap());
    let before = person_issuance("people", "corp:outage:K");
    store.issuance().submit(before.clone()).await.unwrap();

    proxy.cut();
    // No hang: every call comes back, with Unavailable, well within a bound
    // that is only there to turn a hang into a failure.
    for _ in 0..3 {
        let nonce = unique_bytes32();
        store
            .issuance()
            .reserve_nonce(&nonce, now_unix() + 300, now_unix())
            .unwrap()
            .hand_over();
        let r = tokio::time::timeout(
            Duration::from_secs(30),
            store
                .issuance()
                .submit(agent_issuance("people", "corp:outage:K", nonce)),
        )
        .await
        .expect("submit hung during the outage");
        assert!(matches!(r, Err(WriteError::Unavailable(_))), "{r:?}");
        assert!(
            !store.issuance().nonce_held(&nonce, now_unix()),
            "failed issuance releases its nonce"
        );
    }
    let ping = tokio::time::timeout(Duration::from_secs(30), store.ping())
        .await
        .expect("ping hung");
    assert!(matches!(ping, Err(StoreError::Unavailable(_))), "{ping:?}");
    assert!(!store.issuance().healthy());

    proxy.restore().await;
    let mut recovered = false;
    for _ in 0..60 {
        if store
            .issuance()
            .submit(person_issuance("people", "corp:outage:K"))
            .await
            .is_ok()
        {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        recovered,
        "store did not recover after the database came back"
    );
    assert!(store.issuance().healthy());
    assert!(
        store
            .certs()
            .get_cert("people", &before.cert_row().serial)
            .await
            .unwrap()
            .is_some()
    );
    store.shutdown().await;
    proxy.cut();
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outage_fails_fast_with_unavailable_and_recovers() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    outage_fails_fast_and_recovers(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_outage_fails_fast_with_unavailable_and_recovers() {
    let Some(db) = TestDb::mysql().await else {
        return;
    };
    outage_fails_fast_and_recovers(db).await;
}
