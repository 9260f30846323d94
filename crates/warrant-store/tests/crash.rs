//! Crash safety: a child process submits issuances concurrently and prints
//! each one the store acknowledged; the parent `kill -9`s it mid-load,
//! reopens the database, and checks that every acknowledged certificate is
//! there and every acknowledged nonce is refused as a replay. Five trials per
//! backend.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;

use common::*;
use warrant_store::*;

const CHILD_ENV: &str = "WARRANT_CRASH_CHILD_DSN";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex32(s: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

/// Not a test of its own: the workload of the child process, which the
/// crash tests start by running this test binary filtered to this name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child_workload() {
    let Ok(dsn) = std::env::var(CHILD_ENV) else {
        eprintln!("crash_child_workload: only runs as the child of a crash test");
        return;
    };
    let store = Arc::new(Store::open(&dsn, StoreOptions::default()).await.unwrap());
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let rec = agent_issuance("people", "corp:crash:K", unique_bytes32());
                let (serial, nonce) = (
                    rec.cert_row().serial.clone(),
                    rec.nonce.as_ref().unwrap().nonce,
                );
                if store.issuance().submit(rec).await.is_ok() {
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ACK {serial} {}", hex(&nonce)).unwrap();
                    out.flush().unwrap();
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

fn run_trials(db: &TestDb, trials: usize) {
    let exe = std::env::current_exe().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for trial in 0..trials {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash_child_workload",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &db.dsn)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut acked: Vec<(String, [u8; 32])> = Vec::new();
        let kill_after = 150 + 100 * trial;
        let mut lines = BufReader::new(stdout).lines();
        while let Some(Ok(line)) = lines.next() {
            if let Some(rest) = line.strip_prefix("ACK ") {
                let (serial, nonce) = rest.split_once(' ').unwrap();
                acked.push((serial.to_string(), unhex32(nonce)));
                if acked.len() == kill_after {
                    child.kill().unwrap(); // SIGKILL
                }
            }
        }
        child.wait().unwrap();
        assert!(
            acked.len() >= kill_after,
            "child died early after {} acks",
            acked.len()
        );

        rt.block_on(async {
            let store = db.open().await;
            for (serial, _) in &acked {
                assert!(
                    store
                        .certs()
                        .get_cert("people", serial)
                        .await
                        .unwrap()
                        .is_some(),
                    "trial {trial}: acknowledged certificate {serial} lost"
                );
            }
            let mut replays = Vec::new();
            for (_, nonce) in &acked {
                let s: Arc<Store> = store.clone();
                let nonce = *nonce;
                replays.push(tokio::spawn(async move {
                    s.issuance()
                        .submit(agent_issuance("people", "corp:crash:K", nonce))
                        .await
                }));
            }
            for r in replays {
                assert_eq!(
                    r.await.unwrap(),
                    Err(WriteError::NonceReplayed),
                    "trial {trial}: nonce accepted twice"
                );
            }
            store.shutdown().await;
        });
        eprintln!(
            "trial {trial}: {} acknowledged before kill -9, none lost",
            acked.len()
        );
    }
}

#[test]
fn sqlite_kill9_loses_no_acknowledged_issuance() {
    let db = TestDb::sqlite();
    run_trials(&db, 5);
}

#[test]
fn postgres_kill9_loses_no_acknowledged_issuance() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(db) = rt.block_on(TestDb::postgres()) else {
        return;
    };
    run_trials(&db, 5);
    rt.block_on(db.cleanup());
}

#[test]
fn mysql_kill9_loses_no_acknowledged_issuance() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(db) = rt.block_on(TestDb::mysql()) else {
        return;
    };
    run_trials(&db, 5);
    rt.block_on(db.cleanup());
}
