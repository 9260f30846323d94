//! The reference CA's published bench commands, run verbatim as
//! `warrant bench <the same flags>` against MariaDB (only `-duration`
//! shortened), with the `bench` user they name; a missing database is
//! created, and a user that may not create one gets the SQL an admin must
//! run. Also: `-cpuprofile` and `-memprofile` write profiles that decode as
//! pprof `Profile` protobufs, and `bench suite` honours the reference
//! script's `MYSQL_URL`, `MYSQL_ADMIN` and `RUN_TIMEOUT`.
//!
//! The tests take turns ([`ONE_AT_A_TIME`]): each is a load run, and two at
//! once on a small machine would measure each other.

use pprof::protos::{Message, Profile};
use sqlx::Connection;
use std::process::{Command, Output};
use std::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The MariaDB admin URL (`WARRANT_TEST_MYSQL_URL`), or `None` to skip. As
/// in the server's test support: a missing URL fails under CI, which never
/// skips a database silently.
fn mysql_admin_url() -> Option<String> {
    let var = "WARRANT_TEST_MYSQL_URL";
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            if std::env::var_os("CI").is_some() {
                panic!("{var} is not set but CI is: MariaDB tests must run in CI");
            }
            eprintln!("skipping MariaDB test: {var} not set");
            None
        }
    }
}

/// Runs statements as the admin, on the server (no database selected).
fn admin_sql(admin: &str, statements: &[&str]) {
    let url = url_without_db(admin);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let mut c = sqlx::MySqlConnection::connect(&url).await.unwrap();
            for s in statements {
                sqlx::raw_sql(s)
                    .execute(&mut c)
                    .await
                    .unwrap_or_else(|e| panic!("{s}: {e}"));
            }
            c.close().await.unwrap();
        });
}

fn database_exists(admin: &str, name: &str) -> bool {
    count(
        admin,
        "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?",
        name,
    ) == 1
}

fn table_exists(admin: &str, db: &str, table: &str) -> bool {
    count(
        admin,
        &format!(
            "SELECT COUNT(*) FROM information_schema.tables \
             WHERE table_schema = '{db}' AND table_name = ?"
        ),
        table,
    ) == 1
}

/// One `COUNT(*)` as the admin, with one bound string.
fn count(admin: &str, sql: &str, arg: &str) -> i64 {
    let url = url_without_db(admin);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let mut c = sqlx::MySqlConnection::connect(&url).await.unwrap();
            let n: i64 = sqlx::query_scalar(sql)
                .bind(arg)
                .fetch_one(&mut c)
                .await
                .unwrap();
            c.close().await.unwrap();
            n
        })
}

/// `mysql://user@host:port/db?x` → `mysql://user@host:port?x`.
fn url_without_db(url: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let server = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    if query.is_empty() {
        server.to_string()
    } else {
        format!("{server}?{query}")
    }
}

fn warrant(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_warrant"))
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Each published command line, split as a shell would, `-duration` shortened.
fn reference_commands(duration: &str) -> Vec<Vec<String>> {
    let db = "mysql://bench:bench@127.0.0.1:3306/bench_mysql";
    [
        "-mode random -scenario regular -duration 15s -agents 2500 -users 2500 -interval 100ms -engine -maxpending 1000000",
        "-mode random -scenario aic -duration 15s -agents 2500 -users 2500 -interval 100ms -engine -maxpending 1000000",
        "-mode random -scenario aic -duration 120s -agents 5000 -users 5000 -interval 6s -engine -maxpending 500000",
        "-mode stress -scenario aic -duration 30s -agents 3000 -users 5000 -engine -maxpending 500000",
    ]
    .iter()
    .map(|line| {
        let mut args: Vec<String> = vec!["bench".into()];
        let mut words = line.split_whitespace().peekable();
        while let Some(w) = words.next() {
            args.push(w.into());
            if w == "-duration" {
                words.next();
                args.push(duration.into());
            }
        }
        args.extend(["-db".into(), db.into()]);
        args
    })
    .collect()
}

#[test]
fn the_reference_commands_run_verbatim_against_mariadb() {
    let _turn = one_at_a_time();
    let Some(admin) = mysql_admin_url() else {
        return;
    };
    // The user the published commands log in as, with rights on its
    // database only; the database itself does not exist yet.
    let drop_all = [
        "DROP DATABASE IF EXISTS bench_mysql",
        "DROP DATABASE IF EXISTS bench_noddl_db",
        "DROP USER IF EXISTS 'bench'@'%'",
        "DROP USER IF EXISTS 'bench_noddl'@'%'",
    ];
    admin_sql(&admin, &drop_all);
    admin_sql(
        &admin,
        &[
            "CREATE USER 'bench'@'%' IDENTIFIED BY 'bench'",
            "GRANT ALL PRIVILEGES ON `bench_mysql`.* TO 'bench'@'%'",
            // USAGE only: may log in, may not create a database.
            "CREATE USER 'bench_noddl'@'%' IDENTIFIED BY 'noddl'",
        ],
    );

    for (i, args) in reference_commands("2s").iter().enumerate() {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = warrant(&args);
        let t = text(&out);
        assert!(out.status.success(), "{args:?}: {t}");
        if i == 0 {
            assert!(
                t.contains("db: created database \"bench_mysql\""),
                "the missing database is created: {t}"
            );
        }
        assert!(t.contains("every success is a row"), "{args:?}: {t}");
        assert!(
            t.contains("note: -engine:") && t.contains("changes nothing"),
            "{args:?}: the report says what -engine means: {t}"
        );
        let agents = &args[args.iter().position(|a| *a == "-agents").unwrap() + 1];
        assert!(t.contains(&format!(" agents={agents} ")), "{t}");
    }
    assert!(database_exists(&admin, "bench_mysql"));

    // A user without the right to create its database is told which one
    // and what an admin must run.
    let out = warrant(&[
        "bench",
        "-duration",
        "1s",
        "-agents",
        "1",
        "-db",
        "mysql://bench_noddl:noddl@127.0.0.1:3306/bench_noddl_db",
    ]);
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    for expected in [
        "database \"bench_noddl_db\" does not exist",
        "CREATE DATABASE `bench_noddl_db`;",
        "CREATE USER 'bench_noddl'@'%' IDENTIFIED BY",
        "GRANT ALL PRIVILEGES ON `bench_noddl_db`.* TO 'bench_noddl'@'%';",
    ] {
        assert!(t.contains(expected), "missing {expected:?} in {t}");
    }
    assert!(!t.contains("noddl@"), "the password is not echoed: {t}");
    assert!(!database_exists(&admin, "bench_noddl_db"));

    admin_sql(&admin, &drop_all);
}

fn decode_profile(path: &std::path::Path) -> Profile {
    let bytes = std::fs::read(path).unwrap();
    assert!(!bytes.is_empty(), "{} is empty", path.display());
    Profile::decode(bytes.as_slice()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn cpu_and_heap_profiles_are_pprof_profiles_with_samples() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let cpu = dir.path().join("cpu.pb");
    let mem = dir.path().join("mem.pb");
    let out = Command::new(env!("CARGO_BIN_EXE_warrant"))
        .args([
            "bench",
            "-scenario",
            "aic",
            "-duration",
            "2s",
            "-agents",
            "4",
            "-json",
        ])
        .arg("-cpuprofile")
        .arg(&cpu)
        .arg("-memprofile")
        .arg(&mem)
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let notes = report["notes"].to_string();
    assert!(
        notes.contains("-cpuprofile") && notes.contains("-memprofile"),
        "{notes}"
    );

    let names = |p: &Profile| -> Vec<String> {
        p.sample_type
            .iter()
            .map(|v| p.string_table[v.ty as usize].clone())
            .collect()
    };
    let c = decode_profile(&cpu);
    assert!(!c.sample.is_empty(), "no CPU sample");
    assert!(names(&c).iter().any(|n| n == "cpu"), "{:?}", names(&c));

    let m = decode_profile(&mem);
    assert_eq!(
        names(&m),
        [
            "alloc_objects",
            "alloc_space",
            "inuse_objects",
            "inuse_space"
        ]
    );
    assert!(!m.sample.is_empty(), "no heap sample");
    let allocated: i64 = m.sample.iter().map(|s| s.value[1]).sum();
    assert!(allocated > 0, "alloc_space {allocated}");
    // Stacks are symbolised: some frame is the server's or the bench's code.
    assert!(
        m.string_table
            .iter()
            .any(|s| s.contains("warrant_server") || s.contains("warrant_bench")),
        "no warrant function in the heap profile"
    );
}

#[test]
fn suite_honours_mysql_url_mysql_admin_and_run_timeout() {
    let _turn = one_at_a_time();
    let Some(admin) = mysql_admin_url() else {
        return;
    };
    // A database left from an earlier run, with a table the suite must not
    // keep; its user does not exist yet (MYSQL_ADMIN creates it).
    admin_sql(
        &admin,
        &[
            "DROP USER IF EXISTS 'bench_suite'@'%'",
            "DROP DATABASE IF EXISTS bench_suite_t",
            "CREATE DATABASE bench_suite_t",
            "CREATE TABLE bench_suite_t.left_over (x INT)",
        ],
    );
    let results = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_warrant"))
        .args([
            "bench",
            "suite",
            "--only",
            "t3",
            "--scale",
            "0.01",
            "--results",
        ])
        .arg(results.path())
        .env(
            "MYSQL_URL",
            "mysql://bench_suite:bench_suite@127.0.0.1:3306/bench_suite_t",
        )
        .env("MYSQL_ADMIN", &admin)
        // T3's window is 120 s: the limit cuts it, and the suite says so.
        .env("RUN_TIMEOUT", "4")
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let run_dir = std::fs::read_dir(results.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let read = |name: &str| {
        std::fs::read_to_string(run_dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}; {t}"))
    };
    let summary = read("SUMMARY.md");
    assert!(summary.contains("| T3 | TIMEOUT |"), "{summary}");
    assert!(
        summary.contains("db external"),
        "no DSN in the summary: {summary}"
    );
    let log = read("t3-steady-state.log");
    assert!(
        log.starts_with("T3: Random Aic 120s agents 50 users 50"),
        "{log}"
    );
    assert!(
        log.contains("TIMEOUT: the wall limit stopped the run early"),
        "{log}"
    );
    let metrics = read("t3-steady-state.metrics");
    for key in [
        "test=t3\n",
        "status=TIMEOUT\n",
        "success=",
        "req_per_s=",
        "503=",
        "p50_ms=",
        "p99_ms=",
        "p999_ms=",
        "err_pct=",
    ] {
        assert!(metrics.contains(key), "missing {key:?} in {metrics}");
    }
    let success: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("success="))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(success > 0, "{metrics}");
    let report: serde_json::Value = serde_json::from_str(&read("t3.json")).unwrap();
    assert_eq!(report["timed_out"], true);
    // The limit ends the load at once: agents in their think time are woken.
    let elapsed = report["totals"]["elapsed"].as_f64().unwrap();
    assert!(
        elapsed < 15.0,
        "a 4 s limit ended the load after {elapsed} s"
    );
    // Recreated: the old table is gone, the server's tables are there.
    assert!(!table_exists(&admin, "bench_suite_t", "left_over"));
    assert!(table_exists(&admin, "bench_suite_t", "warrant_certs"));

    admin_sql(
        &admin,
        &[
            "DROP DATABASE IF EXISTS bench_suite_t",
            "DROP USER IF EXISTS 'bench_suite'@'%'",
        ],
    );
}

/// `WARRANT_TEST_POSTGRES_URL`, or `None` to skip (a failure under CI).
fn postgres_admin_url() -> Option<String> {
    let var = "WARRANT_TEST_POSTGRES_URL";
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            if std::env::var_os("CI").is_some() {
                panic!("{var} is not set but CI is: PostgreSQL tests must run in CI");
            }
            eprintln!("skipping PostgreSQL test: {var} not set");
            None
        }
    }
}

fn pg_sql(admin: &str, statements: &[&str]) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let mut c = sqlx::PgConnection::connect(admin).await.unwrap();
            for s in statements {
                sqlx::raw_sql(s)
                    .execute(&mut c)
                    .await
                    .unwrap_or_else(|e| panic!("{s}: {e}"));
            }
            c.close().await.unwrap();
        });
}

#[test]
fn a_missing_postgres_database_is_created_by_db() {
    let _turn = one_at_a_time();
    let Some(admin) = postgres_admin_url() else {
        return;
    };
    let drop = "DROP DATABASE IF EXISTS bench_pg_created WITH (FORCE)";
    pg_sql(&admin, &[drop]);
    let url = format!("{}/bench_pg_created", url_without_db(&admin));
    let out = warrant(&[
        "bench",
        "-scenario",
        "aic",
        "-duration",
        "1s",
        "-agents",
        "2",
        "-db",
        &url,
    ]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("db: created database \"bench_pg_created\""),
        "{t}"
    );
    assert!(t.contains("every success is a row"), "{t}");
    pg_sql(&admin, &[drop]);
}

#[test]
fn port_is_the_embedded_servers_listen_port() {
    let _turn = one_at_a_time();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_warrant"))
        .args(["bench", "-duration", "3s", "-agents", "1", "-port"])
        .arg(port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let mut reached = false;
    while !reached && started.elapsed() < std::time::Duration::from_secs(30) {
        reached = std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(reached, "nothing listened on port {port} during the run");
}
