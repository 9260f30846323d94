//! Direct DB reads after a run: the certificate row count (the durability
//! check: every 200 must be a row) and the DB size. Read straight from the DB,
//! not through the server, so a server that lies about durability is caught.
//! The DSN is resolved by the store's own parser, as the server resolves it.

use anyhow::{Context, Result, anyhow};
use warrant_store::{Dsn, parse_dsn};

fn rt() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a runtime for the DB check")
}

fn parse(dsn: &str) -> Result<Dsn> {
    parse_dsn(dsn).map_err(|e| anyhow!("{e}"))
}

/// One `i64` from one query on a single short-lived connection (SQLite
/// opened read-only).
async fn query_i64(dsn: &Dsn, sql: &str) -> Result<i64, sqlx::Error> {
    match dsn {
        Dsn::Sqlite { path, .. } => {
            let opts = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(path)
                .read_only(true);
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(1)
                .connect_with(opts)
                .await?;
            let n = sqlx::query_scalar(sql).fetch_one(&pool).await;
            pool.close().await;
            n
        }
        Dsn::Postgres { url } => {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect(url)
                .await?;
            let n = sqlx::query_scalar(sql).fetch_one(&pool).await;
            pool.close().await;
            n
        }
        Dsn::MySql { url } => {
            let pool = sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(1)
                .connect(url)
                .await?;
            let n = sqlx::query_scalar(sql).fetch_one(&pool).await;
            pool.close().await;
            n
        }
    }
}

pub fn count_cert_rows(dsn: &str) -> Result<u64> {
    let dsn = parse(dsn)?;
    let n = rt()?
        .block_on(query_i64(&dsn, "SELECT COUNT(*) FROM warrant_certs"))
        .context("counting certificate rows")?;
    Ok(n.max(0) as u64)
}

/// Unexpired certificate rows (`not_after > now`), read during a soak: what
/// retention must hold steady. `now` is a number this process made, written
/// into the statement, so the one SQL text works on every backend.
pub fn live_cert_rows(dsn: &str, now: i64) -> Result<u64> {
    let dsn = parse(dsn)?;
    let sql = format!("SELECT COUNT(*) FROM warrant_certs WHERE not_after > {now}");
    let n = rt()?
        .block_on(query_i64(&dsn, &sql))
        .context("counting live certificate rows")?;
    Ok(n.max(0) as u64)
}

/// SQLite: the DB file plus its WAL; PostgreSQL/MariaDB: the database's size.
pub fn db_size_bytes(dsn: &str) -> Result<u64> {
    let dsn = parse(dsn)?;
    let sql = match &dsn {
        Dsn::Sqlite { path, .. } => {
            let size = |p: &str| std::fs::metadata(p).map_or(0, |m| m.len());
            return Ok(size(path) + size(&format!("{path}-wal")));
        }
        Dsn::Postgres { .. } => "SELECT pg_database_size(current_database())::BIGINT",
        Dsn::MySql { .. } => {
            "SELECT CAST(COALESCE(SUM(data_length + index_length), 0) AS SIGNED) \
             FROM information_schema.tables WHERE table_schema = DATABASE()"
        }
    };
    let n = rt()?
        .block_on(query_i64(&dsn, sql))
        .context("measuring the DB size")?;
    Ok(n.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sqlite_file_is_counted_and_sized_through_the_stores_parser() {
        let dir = std::env::temp_dir().join(format!("warrant-bench-db-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rows.db");
        let url = format!("sqlite://{}?mode=rwc", path.display());
        rt().unwrap().block_on(async {
            use sqlx::Connection;
            let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
            sqlx::query("CREATE TABLE warrant_certs (serial TEXT, not_after BIGINT)")
                .execute(&mut c)
                .await
                .unwrap();
            for (s, t) in [("a", 90), ("b", 100), ("c", 101)] {
                sqlx::query("INSERT INTO warrant_certs VALUES (?, ?)")
                    .bind(s)
                    .bind(t)
                    .execute(&mut c)
                    .await
                    .unwrap();
            }
            c.close().await.unwrap();
        });
        // A plain path, a URL and a URL with driver parameters name one file.
        for dsn in [
            path.display().to_string(),
            format!("sqlite://{}", path.display()),
            url.clone(),
        ] {
            assert_eq!(count_cert_rows(&dsn).unwrap(), 3, "{dsn}");
            assert!(db_size_bytes(&dsn).unwrap() > 0, "{dsn}");
        }
        assert!(count_cert_rows("redis://h/0").is_err());
        // Only unexpired rows are live.
        assert_eq!(live_cert_rows(&url, 100).unwrap(), 1);
        assert_eq!(live_cert_rows(&path.display().to_string(), 0).unwrap(), 3);
        assert!(live_cert_rows("redis://h/0", 0).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
