//! Write-path benchmark: committed rows/s, durable vs buffered, at several
//! concurrency levels, on SQLite and (if `WARRANT_TEST_POSTGRES_URL` /
//! `WARRANT_TEST_MYSQL_URL` are set) PostgreSQL / MariaDB. A script, not a
//! timed test:
//!
//! ```sh
//! cargo run --release -p warrant-store --example write_bench -- \
//!     [--secs 3] [--reps 3] [--conc 1,64,512] [--backends sqlite,postgres,mysql]
//! ```
//!
//! Each run opens a fresh database (temp file / fresh schema), lets N tasks
//! submit agent issuances (cert + nonce) in a loop for `--secs`, and counts
//! rows *committed* inside the window (buffered mode: acknowledged-but-not-
//! yet-committed rows do not count). Buffered submitters that hit
//! `Overloaded` back off 5 ms and retry. Medians over `--reps` are printed
//! with the durable/buffered ratio.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sqlx::Executor;
use warrant_store::*;

struct Args {
    secs: f64,
    reps: usize,
    conc: Vec<usize>,
    backends: Vec<String>,
}

fn parse_args() -> Args {
    let mut a = Args {
        secs: 3.0,
        reps: 3,
        conc: vec![1, 64, 512],
        backends: vec!["sqlite".into(), "postgres".into(), "mysql".into()],
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < argv.len() {
        let v = &argv[i + 1];
        match argv[i].as_str() {
            "--secs" => a.secs = v.parse().expect("--secs"),
            "--reps" => a.reps = v.parse().expect("--reps"),
            "--conc" => a.conc = v.split(',').map(|x| x.parse().expect("--conc")).collect(),
            "--backends" => a.backends = v.split(',').map(String::from).collect(),
            other => panic!("unknown flag {other}"),
        }
        i += 2;
    }
    a
}

struct Db {
    dsn: String,
    cleanup: Option<(String, String)>,
    _dir: Option<tempfile::TempDir>,
}

static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn fresh_bytes() -> [u8; 32] {
    use std::hash::{BuildHasher, Hasher, RandomState};
    let s = RandomState::new();
    let mut out = [0u8; 32];
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let mut h = s.build_hasher();
        h.write_u64(SEQ.fetch_add(1, Ordering::Relaxed));
        h.write_usize(i);
        chunk.copy_from_slice(&h.finish().to_be_bytes());
    }
    out
}

fn hex_upper(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

async fn fresh_db(backend: &str) -> Option<Db> {
    match backend {
        "sqlite" => {
            let dir = tempfile::tempdir().ok()?;
            let dsn = dir.path().join("bench.db").to_string_lossy().into_owned();
            Some(Db {
                dsn,
                cleanup: None,
                _dir: Some(dir),
            })
        }
        "postgres" => {
            let base = std::env::var("WARRANT_TEST_POSTGRES_URL").ok()?;
            let schema = format!(
                "warrant_bench_{}",
                hex_upper(&fresh_bytes()[..6]).to_lowercase()
            );
            let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(&base)
                .await
                .ok()?;
            c.execute(format!("CREATE SCHEMA {schema}").as_str())
                .await
                .ok()?;
            let sep = if base.contains('?') { '&' } else { '?' };
            Some(Db {
                dsn: format!("{base}{sep}options=-c%20search_path%3D{schema}"),
                cleanup: Some((base, format!("DROP SCHEMA {schema} CASCADE"))),
                _dir: None,
            })
        }
        "mysql" => {
            let base = std::env::var("WARRANT_TEST_MYSQL_URL").ok()?;
            let db = format!(
                "warrant_bench_{}",
                hex_upper(&fresh_bytes()[..6]).to_lowercase()
            );
            let mut c = <sqlx::MySqlConnection as sqlx::Connection>::connect(&base)
                .await
                .ok()?;
            c.execute(format!("CREATE DATABASE {db}").as_str())
                .await
                .ok()?;
            let root = base.split('?').next()?.rsplit_once('/')?.0.to_string();
            Some(Db {
                dsn: format!("{root}/{db}"),
                cleanup: Some((base, format!("DROP DATABASE {db}"))),
                _dir: None,
            })
        }
        _ => None,
    }
}

async fn drop_db(db: Db) {
    if let Some((base, sql)) = db.cleanup {
        if base.starts_with("postgres") {
            if let Ok(mut c) = <sqlx::PgConnection as sqlx::Connection>::connect(&base).await {
                let _ = c.execute(sql.as_str()).await;
            }
        } else if let Ok(mut c) = <sqlx::MySqlConnection as sqlx::Connection>::connect(&base).await
        {
            let _ = c.execute(sql.as_str()).await;
        }
    }
}

fn record(now: i64) -> IssuanceRecord {
    let nonce = fresh_bytes();
    let serial = hex_upper(&fresh_bytes()[..20]);
    let uid = "corp:alice:0123456789abcdef0123456789abcdef0123456789a".to_string();
    IssuanceRecord {
        cert: CertRecord {
            ca: "people".into(),
            serial,
            common_name: "agent-4711".into(),
            profile: "agent-proxy".into(),
            status: CertStatus::Valid,
            not_before: now,
            not_after: now + 3600,
            der: vec![0x5a; 720], // a P-256 agent certificate with AIC is ~700 bytes
            principal_uid: Some(uid.clone()),
            agent_id: Some("agent-4711".into()),
            key_hash: nonce.to_vec(),
            created_at: now,
            revoked_at: None,
            revocation_reason: None,
        },
        nonce: Some(NonceRow {
            nonce,
            expires_at: now + 300,
            principal_uid: uid,
        }),
    }
}

/// Committed rows/s and mean rows per commit inside the window.
async fn run_once(
    backend: &str,
    durability: Durability,
    conc: usize,
    secs: f64,
) -> Option<(f64, f64)> {
    let db = fresh_db(backend).await?;
    let store = open(
        &db.dsn,
        StoreOptions {
            durability,
            ..Default::default()
        },
    )
    .await
    .ok()?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..conc {
        let store = store.clone();
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let now = unix_now();
            while !stop.load(Ordering::Relaxed) {
                match store.submit(record(now)).await {
                    Ok(()) => {}
                    // A real client would honour Retry-After; 5 ms keeps the
                    // queue full without the retry churn starving the committer.
                    Err(WriteError::Overloaded { .. }) => {
                        tokio::time::sleep(Duration::from_millis(5)).await
                    }
                    Err(e) => panic!("submit failed: {e}"),
                }
            }
        }));
    }
    // Warm up, then measure committed rows inside the window only.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = store.write_stats();
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let end = store.write_stats();
    let rows = end.rows - start.rows;
    let commits = (end.commits - start.commits).max(1);
    let elapsed = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    store.shutdown().await;
    drop(store);
    drop_db(db).await;
    Some((rows as f64 / elapsed, rows as f64 / commits as f64))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let args = parse_args();
    println!(
        "backend   conc  durable rows/s  buffered rows/s  durable/buffered  rows/commit (d / b)  (median of {} x {} s)",
        args.reps, args.secs
    );
    for backend in &args.backends {
        for &conc in &args.conc {
            let mut d = Vec::new();
            let mut b = Vec::new();
            let mut db_ = Vec::new();
            let mut bb = Vec::new();
            for _ in 0..args.reps {
                // Interleave modes so machine noise hits both alike.
                match run_once(backend, Durability::Durable, conc, args.secs).await {
                    Some((x, batch)) => {
                        d.push(x);
                        db_.push(batch);
                    }
                    None => break,
                }
                if let Some((x, batch)) =
                    run_once(backend, Durability::Buffered, conc, args.secs).await
                {
                    b.push(x);
                    bb.push(batch);
                }
            }
            if d.is_empty() || b.is_empty() {
                println!("{backend:<9} skipped (database not configured or unreachable)");
                break;
            }
            let (dm, bm) = (median(d), median(b));
            println!(
                "{backend:<9} {conc:>4}  {dm:>14.0}  {bm:>15.0}  {:>15.1} %  {:>7.0} / {:<7.0}",
                100.0 * dm / bm,
                median(db_),
                median(bb)
            );
        }
    }
}
