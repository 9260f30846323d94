//! One fresh database per test, on each backend: SQLite (a file in the data
//! dir), or a new database `warrant_t_<unix secs>_<random>` created on the
//! PostgreSQL / MariaDB server named by `WARRANT_TEST_POSTGRES_URL` /
//! `WARRANT_TEST_MYSQL_URL` and dropped again when the [`TestDb`] is dropped
//! (also when the test panicked). Databases left behind by a killed test run
//! are dropped by the first test of a later run once they are an hour old.
//!
//! Also used by `crates/warrant/tests` (included there by path), so it only
//! needs crates both packages have: sqlx, tokio, aws-lc-rs.

use sqlx::{Connection, Executor};
use std::sync::atomic::{AtomicBool, Ordering};

/// The database backends the suite runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    MySql,
}

/// Prefix of every database the tests create; the stale-database sweep only
/// touches names of the exact form `warrant_t_<digits>_<hex>`.
const DB_PREFIX: &str = "warrant_t_";
/// A test database older than this is considered left behind by a killed run.
const STALE_AFTER_SECS: u64 = 3600;

impl Backend {
    /// The env var naming the admin DSN of this backend's test server.
    pub fn env_var(self) -> Option<&'static str> {
        match self {
            Backend::Sqlite => None,
            Backend::Postgres => Some("WARRANT_TEST_POSTGRES_URL"),
            Backend::MySql => Some("WARRANT_TEST_MYSQL_URL"),
        }
    }

    /// Whether this backend can be tested here. A missing database server is
    /// a skip with a printed note locally, and a test failure when `CI` is
    /// set: CI never skips a database silently.
    pub fn available(self) -> bool {
        self == Backend::Sqlite || self.admin_url().is_some()
    }

    /// The admin DSN (`None` for SQLite or when skipping; panics under CI).
    pub fn admin_url(self) -> Option<String> {
        let var = self.env_var()?;
        match std::env::var(var) {
            Ok(v) if !v.is_empty() => Some(v),
            _ => {
                if std::env::var_os("CI").is_some() {
                    panic!("{var} is not set but CI is: {self:?} tests must run in CI");
                }
                eprintln!("skipping {self:?} test: {var} not set");
                None
            }
        }
    }
}

/// A fresh, empty database for one test.
pub struct TestDb {
    pub backend: Backend,
    /// DSN of the new database; `None` for SQLite, whose default file lives
    /// in the server's own (temporary) data dir.
    pub dsn: Option<String>,
    /// (admin DSN, database name) to drop on `Drop`.
    created: Option<(String, String)>,
}

impl TestDb {
    /// `None` when the backend is not available (see [`Backend::available`]).
    pub async fn create(backend: Backend) -> Option<TestDb> {
        if backend == Backend::Sqlite {
            return Some(TestDb {
                backend,
                dsn: None,
                created: None,
            });
        }
        let admin = backend.admin_url()?;
        sweep_stale_once(backend, &admin).await;
        let name = format!("{DB_PREFIX}{}_{}", unix_secs(), random_hex(8));
        execute(backend, &admin, &format!("CREATE DATABASE {name}")).await;
        Some(TestDb {
            backend,
            dsn: Some(with_database(&admin, &name)),
            created: Some((admin, name)),
        })
    }

    /// The DSN a server should use; for SQLite a file under `dir`.
    pub fn dsn_or_sqlite_in(&self, dir: &std::path::Path) -> String {
        match &self.dsn {
            Some(d) => d.clone(),
            None => format!("sqlite://{}", dir.join("warrant.db").display()),
        }
    }
}

impl Drop for TestDb {
    /// Drops the database on its own thread and runtime: `Drop` cannot be
    /// async and may run inside (or after) the test's runtime. Errors are
    /// printed, never raised (a panic while unwinding would abort).
    fn drop(&mut self) {
        let Some((admin, name)) = self.created.take() else {
            return;
        };
        let backend = self.backend;
        let joined = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(try_execute(backend, &admin, &drop_sql(backend, &name)))
        })
        .join();
        match joined {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("warning: could not drop test database: {e}"),
            Err(_) => eprintln!("warning: dropping the test database panicked"),
        }
    }
}

fn drop_sql(backend: Backend, name: &str) -> String {
    match backend {
        // FORCE: a test that panicked may leave its server's pool connected.
        Backend::Postgres => format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        _ => format!("DROP DATABASE IF EXISTS {name}"),
    }
}

/// Once per test process: drop `warrant_t_<secs>_<hex>` databases older
/// than [`STALE_AFTER_SECS`] (left by a run that was killed).
async fn sweep_stale_once(backend: Backend, admin: &str) {
    static PG: AtomicBool = AtomicBool::new(false);
    static MY: AtomicBool = AtomicBool::new(false);
    let flag = if backend == Backend::Postgres {
        &PG
    } else {
        &MY
    };
    if flag.swap(true, Ordering::SeqCst) {
        return;
    }
    let list = match backend {
        Backend::Postgres => {
            "SELECT datname::text FROM pg_database WHERE datname LIKE 'warrant\\_t\\_%'"
        }
        _ => {
            "SELECT CAST(schema_name AS CHAR) FROM information_schema.schemata WHERE schema_name LIKE 'warrant\\_t\\_%'"
        }
    };
    let names: Vec<String> = match backend {
        Backend::Postgres => match sqlx::PgConnection::connect(admin).await {
            Ok(mut c) => sqlx::query_scalar(list)
                .fetch_all(&mut c)
                .await
                .unwrap_or_default(),
            Err(_) => return,
        },
        _ => match sqlx::MySqlConnection::connect(admin).await {
            Ok(mut c) => sqlx::query_scalar(list)
                .fetch_all(&mut c)
                .await
                .unwrap_or_default(),
            Err(_) => return,
        },
    };
    let now = unix_secs();
    for name in names.iter().filter(|n| is_stale(n, now)) {
        if let Err(e) = try_execute(backend, admin, &drop_sql(backend, name)).await {
            eprintln!("warning: could not drop stale test database {name}: {e}");
        }
    }
}

/// `warrant_t_<secs>_<hex>` created more than an hour before `now`.
fn is_stale(name: &str, now: u64) -> bool {
    let Some(rest) = name.strip_prefix(DB_PREFIX) else {
        return false;
    };
    let Some((secs, hex)) = rest.split_once('_') else {
        return false;
    };
    let well_formed = !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit());
    match secs.parse::<u64>() {
        Ok(created) if well_formed => created + STALE_AFTER_SECS < now,
        _ => false,
    }
}

async fn execute(backend: Backend, admin: &str, sql: &str) {
    if let Err(e) = try_execute(backend, admin, sql).await {
        panic!("{backend:?} at {admin}: {sql}: {e}");
    }
}

async fn try_execute(backend: Backend, admin: &str, sql: &str) -> Result<(), String> {
    match backend {
        Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(admin)
                .await
                .map_err(|e| e.to_string())?;
            c.execute(sql).await.map_err(|e| e.to_string())?;
        }
        Backend::MySql => {
            let mut c = sqlx::MySqlConnection::connect(admin)
                .await
                .map_err(|e| e.to_string())?;
            // Never wait forever on a lock held by a dying test's connection.
            c.execute("SET SESSION lock_wait_timeout = 60")
                .await
                .map_err(|e| e.to_string())?;
            c.execute(sql).await.map_err(|e| e.to_string())?;
        }
        Backend::Sqlite => {}
    }
    Ok(())
}

/// `scheme://auth@host:port/olddb?query` → the same URL naming database `db`.
pub fn with_database(url: &str, db: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, format!("?{q}")),
        None => (url, String::new()),
    };
    let after_scheme = head.find("://").map_or(0, |i| i + 3);
    let root = match head[after_scheme..].find('/') {
        Some(i) => &head[..after_scheme + i],
        None => head,
    };
    format!("{root}/{db}{query}")
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub fn random_hex(len: usize) -> String {
    let mut bytes = vec![0u8; len.div_ceil(2)];
    aws_lc_rs::rand::fill(&mut bytes).expect("CSPRNG");
    let mut s: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    s.truncate(len);
    s
}

#[test]
fn database_names_and_urls() {
    assert_eq!(
        with_database("postgres://postgres@127.0.0.1:5432/test", "x"),
        "postgres://postgres@127.0.0.1:5432/x"
    );
    assert_eq!(
        with_database("mysql://root@127.0.0.1:3306/test?ssl-mode=disabled", "x"),
        "mysql://root@127.0.0.1:3306/x?ssl-mode=disabled"
    );
    assert_eq!(with_database("postgres://u@h:1", "x"), "postgres://u@h:1/x");
    assert!(is_stale("warrant_t_100_ab12", 100 + STALE_AFTER_SECS + 1));
    assert!(!is_stale("warrant_t_100_ab12", 100 + STALE_AFTER_SECS));
    // The store tests' own databases (no timestamp) are never swept.
    assert!(!is_stale("warrant_t_0123456789ab", u64::MAX / 2));
    assert!(!is_stale("other_100_ab", u64::MAX / 2));
}
