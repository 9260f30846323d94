//! Direct DB reads after a run: the certificate row count (the durability
//! check: every 200 must be a row) and the DB size. Read straight from the DB,
//! not through the server, so a server that lies about durability is caught.

use anyhow::{Context, Result};

fn rt() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a runtime for the DB check")
}

fn sqlite_path(dsn: &str) -> Option<&str> {
    dsn.strip_prefix("sqlite://")
        .or_else(|| dsn.strip_prefix("sqlite:"))
        .or_else(|| (!dsn.contains("://")).then_some(dsn))
}

fn mysql_dsn(dsn: &str) -> String {
    match dsn.strip_prefix("mariadb://") {
        Some(rest) => format!("mysql://{rest}"),
        None => dsn.to_string(),
    }
}

pub fn count_cert_rows(dsn: &str) -> Result<u64> {
    const Q: &str = "SELECT COUNT(*) FROM warrant_certs";
    rt()?
        .block_on(async {
            let n: i64 = if let Some(path) = sqlite_path(dsn) {
                let opts = sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(path)
                    .read_only(true);
                let pool = sqlx::sqlite::SqlitePoolOptions::new()
                    .max_connections(1)
                    .connect_with(opts)
                    .await?;
                let n = sqlx::query_scalar(Q).fetch_one(&pool).await?;
                pool.close().await;
                n
            } else if dsn.starts_with("postgres") {
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .connect(dsn)
                    .await?;
                let n = sqlx::query_scalar(Q).fetch_one(&pool).await?;
                pool.close().await;
                n
            } else {
                let pool = sqlx::mysql::MySqlPoolOptions::new()
                    .max_connections(1)
                    .connect(&mysql_dsn(dsn))
                    .await?;
                let n = sqlx::query_scalar(Q).fetch_one(&pool).await?;
                pool.close().await;
                n
            };
            Ok::<u64, sqlx::Error>(n.max(0) as u64)
        })
        .with_context(|| "counting certificate rows")
}

/// SQLite: the DB file plus its WAL; PostgreSQL/MariaDB: the database's size.
pub fn db_size_bytes(dsn: &str) -> Result<u64> {
    if let Some(path) = sqlite_path(dsn) {
        let size = |p: String| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        return Ok(size(path.to_string()) + size(format!("{path}-wal")));
    }
    rt()?.block_on(async {
        let n: i64 = if dsn.starts_with("postgres") {
            let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(dsn).await?;
            let n = sqlx::query_scalar("SELECT pg_database_size(current_database())::BIGINT")
                .fetch_one(&pool)
                .await?;
            pool.close().await;
            n
        } else {
            let pool = sqlx::mysql::MySqlPoolOptions::new().max_connections(1).connect(&mysql_dsn(dsn)).await?;
            let n: i64 = sqlx::query_scalar(
                "SELECT CAST(COALESCE(SUM(data_length + index_length), 0) AS SIGNED) FROM information_schema.tables WHERE table_schema = DATABASE()",
            )
            .fetch_one(&pool)
            .await?;
            pool.close().await;
            n
        };
        Ok::<u64, sqlx::Error>(n.max(0) as u64)
    })
    .context("measuring the DB size")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_dsn_forms_map_to_a_path() {
        assert_eq!(sqlite_path("sqlite:///tmp/a.db"), Some("/tmp/a.db"));
        assert_eq!(sqlite_path("/tmp/a.db"), Some("/tmp/a.db"));
        assert_eq!(sqlite_path("postgres://u@h/db"), None);
        assert_eq!(mysql_dsn("mariadb://root@h/t"), "mysql://root@h/t");
    }
}
