//! Test databases: SQLite in a temp dir always; PostgreSQL and MariaDB when
//! `WARRANT_TEST_POSTGRES_URL` / `WARRANT_TEST_MYSQL_URL` are set, each test
//! in a fresh schema / database so parallel tests and reruns never collide.
#![allow(dead_code)]

use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::Executor;
use warrant_store::*;

pub enum Admin {
    None(tempfile::TempDir),
    Postgres { base: String, schema: String },
    MySql { base: String, db: String },
}

pub struct TestDb {
    pub dsn: String,
    pub kind: BackendKind,
    admin: Admin,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

pub fn unique_hex(len: usize) -> String {
    let mut out = String::new();
    while out.len() < len {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos(),
        );
        out.push_str(&format!("{:016X}", h.finish()));
    }
    out.truncate(len);
    out
}

pub fn unique_bytes32() -> [u8; 32] {
    let hex = unique_hex(64);
    let mut b = [0u8; 32];
    for (i, chunk) in hex.as_bytes().chunks(2).enumerate() {
        b[i] = u8::from_str_radix(std::str::from_utf8(chunk).unwrap(), 16).unwrap();
    }
    b
}

/// The env var's value; `None` (with a note) if unset outside CI, a test
/// failure if unset in CI: a database test never skips silently there.
fn env_or_skip(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            if std::env::var_os("CI").is_some() {
                panic!("{var} is not set but CI is: database tests must run in CI");
            }
            eprintln!("skipping: {var} not set");
            None
        }
    }
}

impl TestDb {
    pub fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("warrant.db");
        TestDb {
            dsn: path.to_string_lossy().into_owned(),
            kind: BackendKind::Sqlite,
            admin: Admin::None(dir),
        }
    }

    pub async fn postgres() -> Option<TestDb> {
        let base = env_or_skip("WARRANT_TEST_POSTGRES_URL")?;
        let schema = format!("warrant_t_{}", unique_hex(12).to_lowercase());
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&base)
            .await
            .unwrap();
        conn.execute(format!("CREATE SCHEMA {schema}").as_str())
            .await
            .unwrap();
        let sep = if base.contains('?') { '&' } else { '?' };
        let dsn = format!("{base}{sep}options=-c%20search_path%3D{schema}");
        Some(TestDb {
            dsn,
            kind: BackendKind::Postgres,
            admin: Admin::Postgres { base, schema },
        })
    }

    pub async fn mysql() -> Option<TestDb> {
        let base = env_or_skip("WARRANT_TEST_MYSQL_URL")?;
        let db = format!("warrant_t_{}", unique_hex(12).to_lowercase());
        let mut conn = <sqlx::MySqlConnection as sqlx::Connection>::connect(&base)
            .await
            .unwrap();
        conn.execute(format!("CREATE DATABASE {db}").as_str())
            .await
            .unwrap();
        let (head, query) = match base.split_once('?') {
            Some((h, q)) => (h.to_string(), format!("?{q}")),
            None => (base.clone(), String::new()),
        };
        let root = head
            .rsplit_once('/')
            .map(|(r, _)| r.to_string())
            .unwrap_or(head);
        let dsn = format!("{root}/{db}{query}");
        Some(TestDb {
            dsn,
            kind: BackendKind::MySql,
            admin: Admin::MySql { base, db },
        })
    }

    pub async fn open(&self) -> std::sync::Arc<Store> {
        self.open_with(StoreOptions::default()).await
    }

    pub async fn open_with(&self, opts: StoreOptions) -> std::sync::Arc<Store> {
        std::sync::Arc::new(Store::open(&self.dsn, opts).await.unwrap())
    }

    pub async fn cleanup(self) {
        match self.admin {
            Admin::None(_) => {}
            Admin::Postgres { base, schema } => {
                let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&base)
                    .await
                    .unwrap();
                conn.execute(format!("DROP SCHEMA {schema} CASCADE").as_str())
                    .await
                    .unwrap();
            }
            Admin::MySql { base, db } => {
                let mut conn = <sqlx::MySqlConnection as sqlx::Connection>::connect(&base)
                    .await
                    .unwrap();
                conn.execute(format!("DROP DATABASE {db}").as_str())
                    .await
                    .unwrap();
            }
        }
    }
}

/// A user with a fixed (well-formed, never checked) password hash.
pub fn new_user(name: &str, role: Role) -> NewUser {
    NewUser {
        username: name.into(),
        password_hash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA".into(),
        role,
        created_at: 1_700_000_000,
    }
}

pub fn person_cert(ca: &str, principal_uid: &str) -> CertRecord {
    let now = now_unix();
    CertRecord {
        ca: ca.into(),
        serial: unique_hex(40),
        common_name: "alice".into(),
        profile: "tls-client".into(),
        status: CertStatus::Valid,
        not_before: now - 60,
        not_after: now + 86_400,
        der: vec![0x30, 0x82, 0x01, 0x00, 0xAB],
        principal_uid: Some(principal_uid.into()),
        agent_id: None,
        key_hash: vec![7u8; 32],
        created_at: now,
        revoked_at: None,
        revocation_reason: None,
        capabilities: None,
        lineage_start: None,
    }
}

pub fn agent_cert(ca: &str, principal_uid: &str, agent_id: &str) -> CertRecord {
    CertRecord {
        common_name: format!("agent-{agent_id}"),
        profile: "agent-proxy".into(),
        agent_id: Some(agent_id.into()),
        not_after: now_unix() + 3600,
        ..person_cert(ca, principal_uid)
    }
}

/// A consumed-nonce row for `principal_uid`, expiring in five minutes.
pub fn nonce_row(principal_uid: &str, nonce: [u8; 32]) -> NonceRow {
    NonceRow {
        nonce,
        expires_at: now_unix() + 300,
        principal_uid: principal_uid.into(),
    }
}

pub fn agent_issuance(ca: &str, principal_uid: &str, nonce: [u8; 32]) -> IssuanceRecord {
    IssuanceRecord::with_cert(
        agent_cert(ca, principal_uid, &unique_hex(8)),
        Some(nonce_row(principal_uid, nonce)),
    )
}

pub fn person_issuance(ca: &str, principal_uid: &str) -> IssuanceRecord {
    IssuanceRecord::with_cert(person_cert(ca, principal_uid), None)
}

/// A DA redeemed without a certificate (the token endpoint's record).
pub fn nonce_only_issuance(principal_uid: &str, nonce: [u8; 32]) -> IssuanceRecord {
    IssuanceRecord::nonce_only(nonce_row(principal_uid, nonce))
}

/// The certificate of a record built by `agent_issuance` or
/// `person_issuance`, which always carry one.
pub trait CertOf {
    fn cert_row(&self) -> &CertRecord;
    fn cert_row_mut(&mut self) -> &mut CertRecord;
}

impl CertOf for IssuanceRecord {
    fn cert_row(&self) -> &CertRecord {
        self.cert.as_ref().expect("a record with a certificate")
    }

    fn cert_row_mut(&mut self) -> &mut CertRecord {
        self.cert.as_mut().expect("a record with a certificate")
    }
}

/// One `#[tokio::test]` per backend for each scenario in `scenarios`, on a
/// two-worker runtime. `matrix!(server_databases_single_threaded: …)` runs
/// them on PostgreSQL and MariaDB only, on a current-thread runtime, for
/// scenarios about the committer tasks whose task order must be exact
/// (SQLite's write path is a thread of its own: `writer.rs` tests it).
#[macro_export]
macro_rules! matrix {
    (server_databases_single_threaded: $($name:ident),* $(,)?) => {
        $crate::matrix!(@server () postgres_1t mysql_1t; $($name),*);
    };
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = $crate::common::TestDb::sqlite();
                    $crate::scenarios::$name(&db).await;
                    db.cleanup().await;
                }
            )*
        }
        $crate::matrix!(@server (flavor = "multi_thread", worker_threads = 2) postgres mysql; $($name),*);
    };
    (@server $flavor:tt $postgres:ident $mysql:ident; $($name:ident),*) => {
        mod $postgres {
            $(
                #[tokio::test $flavor]
                async fn $name() {
                    let Some(db) = $crate::common::TestDb::postgres().await else { return };
                    $crate::scenarios::$name(&db).await;
                    db.cleanup().await;
                }
            )*
        }
        mod $mysql {
            $(
                #[tokio::test $flavor]
                async fn $name() {
                    let Some(db) = $crate::common::TestDb::mysql().await else { return };
                    $crate::scenarios::$name(&db).await;
                    db.cleanup().await;
                }
            )*
        }
    };
}

/// Whether the store holds the `people` CA's certificate `serial`.
pub async fn is_stored(s: &Store, serial: &str) -> bool {
    s.certs()
        .get_cert("people", serial)
        .await
        .unwrap()
        .is_some()
}
