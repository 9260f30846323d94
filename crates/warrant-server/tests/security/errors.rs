//! See `main.rs`.
//!
//! Errors and configuration (issue 29, item 13): a 5xx answer carries a
//! request id and a generic detail, never the database driver's text; the
//! printed configuration redacts the database password. And (item 14) a
//! fixed corpus of malformed issue requests never gets a 5xx.

#[allow(unused_imports)]
use crate::common::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use warrant_server::LoadedConfig;

/// Text that only a database driver or the store writes: none of it may
/// reach a client.
const DRIVER_TEXT: &[&str] = &[
    "error returned from database",
    "no such table",
    "does not exist",
    "doesn't exist",
    "warrant_certs",
    "relation",
    "sqlx",
    "SQLSTATE",
    "database:",
    "terminating connection",
];

/// Asserts a 5xx whose detail is generic and ends with the request id that
/// the `X-Request-Id` header carries.
fn assert_scrubbed_5xx(status: u16, headers: &reqwest::header::HeaderMap, body: &Value) {
    assert!(
        (500..600).contains(&status),
        "expected a 5xx, got {status}: {body}"
    );
    let detail = body["detail"].as_str().unwrap_or_default();
    for text in DRIVER_TEXT {
        assert!(
            !detail.to_lowercase().contains(&text.to_lowercase()),
            "5xx detail leaks {text:?}: {detail}"
        );
    }
    let id = headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("5xx without X-Request-Id: {body}"));
    assert!(
        id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "request id {id:?}"
    );
    assert!(
        detail.ends_with(&format!("(request id {id})")),
        "detail without the request id: {detail}"
    );
    if status == 503 {
        assert!(
            headers.get("retry-after").is_some(),
            "503 without Retry-After"
        );
    }
}

async fn get_raw(srv: &TestServer, path: &str) -> (u16, reqwest::header::HeaderMap, Value) {
    let resp = srv
        .http
        .get(srv.url(path))
        .bearer_auth(&srv.token)
        .send()
        .await
        .unwrap();
    let headers = resp.headers().clone();
    let (status, body) = decode(resp).await;
    (status, headers, body)
}

/// Runs `sql` on the server's own database, from outside the server.
async fn sabotage(srv: &TestServer, b: Backend, sql: &str) {
    use sqlx::Connection;
    match b {
        Backend::Sqlite => {
            let path = srv.dir.path().join("warrant.db");
            let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
                .await
                .unwrap();
            sqlx::raw_sql(sql).execute(&mut c).await.unwrap();
        }
        Backend::Postgres => {
            let dsn = srv.db.as_ref().and_then(|d| d.dsn.clone()).unwrap();
            let mut c = sqlx::PgConnection::connect(&dsn).await.unwrap();
            sqlx::raw_sql(sql).execute(&mut c).await.unwrap();
        }
        Backend::MySql => {
            let dsn = srv.db.as_ref().and_then(|d| d.dsn.clone()).unwrap();
            let mut c = sqlx::MySqlConnection::connect(&dsn).await.unwrap();
            sqlx::raw_sql(sql).execute(&mut c).await.unwrap();
        }
    }
}

/// The certificates table disappears under a running server: listing
/// certificates fails in the driver (`no such table` / `relation … does not
/// exist`). The answer is a 5xx with a request id and none of that text.
async fn rejects_leaking_driver_text_in_5xx(b: Backend) {
    let srv = TestServer::on(b).await;
    let (s, _, body) = get_raw(&srv, "/api/v1/certs").await;
    assert_eq!(s, 200, "{body}");
    sabotage(
        &srv,
        b,
        "ALTER TABLE warrant_certs RENAME TO warrant_certs_gone",
    )
    .await;
    let (s, headers, body) = get_raw(&srv, "/api/v1/certs").await;
    assert_scrubbed_5xx(s, &headers, &body);
    sabotage(
        &srv,
        b,
        "ALTER TABLE warrant_certs_gone RENAME TO warrant_certs",
    )
    .await;
    srv.stop().await;
}

crate::backend_matrix!(rejects_leaking_driver_text_in_5xx);

/// The database itself goes away under a running server (PostgreSQL,
/// `DROP DATABASE … WITH (FORCE)` ends the server's connections): every
/// answer that needed it is a scrubbed 5xx (503 `api.unavailable` while the
/// driver reports a lost connection, 500 once it reports the missing
/// database).
#[tokio::test]
async fn rejects_leaking_driver_text_when_the_database_goes_away() {
    let b = Backend::Postgres;
    if !b.available() {
        return;
    }
    let srv = TestServer::on(b).await;
    let name = srv
        .db
        .as_ref()
        .and_then(|d| d.dsn.as_deref())
        .and_then(|d| d.rsplit('/').next())
        .unwrap()
        .to_string();
    let admin = b.admin_url().unwrap();
    {
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect(&admin).await.unwrap();
        sqlx::raw_sql(&format!("DROP DATABASE {name} WITH (FORCE)"))
            .execute(&mut c)
            .await
            .unwrap();
    }
    for path in ["/api/v1/certs", "/api/v1/certs?status=V"] {
        let (s, headers, body) = get_raw(&srv, path).await;
        assert_scrubbed_5xx(s, &headers, &body);
    }
    srv.stop().await;
}

/// `--print-config` (LoadedConfig::render) never prints a database
/// password, whether the DSN came from `warrant.toml`, `WARRANT_DATABASE_URL`
/// or `DATABASE_URL`; the server itself still gets the real DSN.
#[test]
fn rejects_printing_database_passwords() {
    let dir = std::path::Path::new("/srv/warrant");
    let env = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
    let cases = [
        (
            Some("[database]\nurl = \"postgres://warrant:file-s3cret@db:5432/ca\"\n"),
            BTreeMap::new(),
            "file-s3cret",
        ),
        (
            None,
            env("WARRANT_DATABASE_URL", "mysql://root:env-s3cret@db/ca"),
            "env-s3cret",
        ),
        (
            None,
            env(
                "DATABASE_URL",
                "postgresql://w@db/ca?sslmode=require&password=query-s3cret",
            ),
            "query-s3cret",
        ),
    ];
    for (file, env, secret) in cases {
        let loaded = LoadedConfig::from_parts(dir, file, &env).unwrap();
        assert!(loaded.database_url().contains(secret));
        let text = loaded.render();
        assert!(!text.contains(secret), "{text}");
        let line = text
            .lines()
            .find(|l| l.starts_with("database.url = "))
            .unwrap();
        assert!(line.contains("***"), "{line}");
        assert!(!loaded.database_url_redacted().contains(secret));
    }
}

/// Values of the wrong type or size for any field.
fn nasty_values() -> Vec<Value> {
    let mut deep = json!(1);
    for _ in 0..200 {
        deep = json!([deep]);
    }
    vec![
        Value::Null,
        json!(true),
        json!(-1),
        json!(0),
        json!(i64::MIN),
        json!(u64::MAX),
        json!(1e308),
        json!(-1e-308),
        json!(""),
        json!("\u{0}"),
        json!("\u{202e}x\u{fffd}"),
        json!("x".repeat(70_000)),
        json!("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
        json!([]),
        json!(["a", 1, null]),
        json!({}),
        json!({"scheme_id": [], "capability_id": {}}),
        deep,
    ]
}

/// The first 40 characters of a value, for a failure message.
fn short(v: &Value) -> String {
    v.to_string().chars().take(40).collect()
}

/// Raw bodies that are not a JSON object at all.
fn nasty_documents() -> Vec<Vec<u8>> {
    let mut docs: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"null".to_vec(),
        b"[]".to_vec(),
        b"\"cn\"".to_vec(),
        b"{".to_vec(),
        b"{\"cn\":".to_vec(),
        b"{\"cn\":\"a\",\"cn\":\"b\"}".to_vec(),
        b"{\"cn\":\"a\"} trailing".to_vec(),
        b"{\"cn\":1e999}".to_vec(),
        b"{\"validity\":18446744073709551616}".to_vec(),
        b"{\"validity\":-0.0}".to_vec(),
        b"{\"cn\":\"\\ud800\"}".to_vec(),
        b"\xef\xbb\xbf{\"cn\":\"bom\"}".to_vec(),
        b"{\"cn\":\"\xff\xfe\xfd\"}".to_vec(),
        vec![0xc3, 0x28, 0xa0, 0xa1],
        vec![0u8; 64],
    ];
    docs.push(format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes());
    docs.push(format!("{}{}", "{\"a\":".repeat(50_000), "}".repeat(50_000)).into_bytes());
    docs.push(format!("{{\"cn\":\"{}\"}}", "\\u0041".repeat(150_000)).into_bytes());
    docs
}

/// Every field of a valid person body and of a valid agent body replaced in
/// turn by each nasty value, then removed, plus raw bodies that are not JSON
/// objects: no answer is a 5xx (a panic would be a 500 through the panic
/// layer). CI cannot run the nightly fuzzer (`fuzz/fuzz_targets/issue_request.rs`);
/// this fixed corpus runs everywhere.
#[tokio::test]
async fn rejects_nasty_issue_bodies_without_500() {
    let srv = TestServer::start().await;
    let alice = srv
        .person(
            "alice",
            json!({
                "grants": [{"scheme_id": "db", "capability_id": "read"}],
                "delegation_policy": {"allowed_mode": 0, "max_agents": 1000}
            }),
        )
        .await;
    let person = json!({
        "cn": "nasty-person",
        "profile": "tls-client",
        "key_type": "ecdsa-p256",
        "validity": 30,
        "san": "email:nasty@example.com",
        "subject": "/O=Example/CN=nasty-person",
        "ca": "people",
        "principal_authorization": {
            "grants": [{"scheme_id": "db", "capability_id": "read"}],
            "authorization_constraints": [],
            "delegation_policy": {"allowed_mode": 0, "max_agents": 3}
        },
        "is_spiffe": false,
    });
    let mut fails = Vec::new();
    let mut check = |label: String, got: (u16, Value)| {
        if got.0 >= 500 {
            fails.push(format!("{label}: {} {}", got.0, got.1));
        }
    };
    for doc in nasty_documents() {
        let label = format!(
            "raw {:?}",
            String::from_utf8_lossy(&doc[..doc.len().min(40)])
        );
        check(label, srv.post_raw("/api/v1/certs", doc).await);
    }
    let values = nasty_values();
    // A fresh DA per agent body, so that no answer is a replay of another.
    let agent =
        |i: usize| Da::new(&alice, &format!("nasty-agent-{i}"), &[("db", "read")]).body(&alice);
    let fields: Vec<(&str, Value)> = vec![("person", person), ("agent", agent(0))];
    let mut n = 1;
    for (kind, base) in fields {
        let keys: Vec<String> = base.as_object().unwrap().keys().cloned().collect();
        for key in keys {
            for v in values.iter().chain(std::iter::once(&Value::Null)) {
                let mut body = if kind == "agent" {
                    agent(n)
                } else {
                    base.clone()
                };
                n += 1;
                body[&key] = v.clone();
                let label = format!("{kind}.{key} = {}", short(v));
                check(label, srv.post("/api/v1/certs", &body).await);
            }
            let mut body = if kind == "agent" {
                agent(n)
            } else {
                base.clone()
            };
            n += 1;
            body.as_object_mut().unwrap().remove(&key);
            check(
                format!("{kind} without {key}"),
                srv.post("/api/v1/certs", &body).await,
            );
        }
    }
    // Nested fields of the person's PA, each wrong in turn.
    for path in [
        ["principal_authorization", "grants"],
        ["principal_authorization", "authorization_constraints"],
        ["principal_authorization", "delegation_policy"],
    ] {
        for v in &values {
            let mut body = json!({"cn": "nasty-pa", "principal_authorization": {
                "grants": [{"scheme_id": "db", "capability_id": "read"}],
                "delegation_policy": {"allowed_mode": 0, "max_agents": 3}
            }});
            body[path[0]][path[1]] = v.clone();
            check(
                format!("{}.{} = {}", path[0], path[1], short(v)),
                srv.post("/api/v1/certs", &body).await,
            );
        }
    }
    assert!(
        fails.is_empty(),
        "{} 5xx answers:\n{}",
        fails.len(),
        fails.join("\n")
    );
    srv.stop().await;
}
