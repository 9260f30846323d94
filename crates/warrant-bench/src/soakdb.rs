//! The live (unexpired) certificate rows, read straight from the DB during
//! a soak: what retention must hold steady. Kept apart from `db.rs` (the
//! single run's after-the-run reads) so the two evolve independently.

use anyhow::{Context, Result, anyhow};
use warrant_store::{Dsn, parse_dsn};

/// `SELECT COUNT(*) FROM warrant_certs WHERE not_after > now` on one
/// short-lived connection (SQLite read-only, so the reader never takes the
/// server's write lock). `now` is a number this process made, written into
/// the statement, so the one SQL text works on every backend.
pub fn live_rows(dsn: &str, now: i64) -> Result<u64> {
    let dsn = parse_dsn(dsn).map_err(|e| anyhow!("{e}"))?;
    let sql = live_rows_sql(now);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a runtime for the live-row count")?;
    let n: i64 = rt
        .block_on(async {
            match &dsn {
                Dsn::Sqlite { path, .. } => {
                    let opts = sqlx::sqlite::SqliteConnectOptions::new()
                        .filename(path)
                        .read_only(true);
                    let pool = sqlx::sqlite::SqlitePoolOptions::new()
                        .max_connections(1)
                        .connect_with(opts)
                        .await?;
                    let n = sqlx::query_scalar(&sql).fetch_one(&pool).await;
                    pool.close().await;
                    n
                }
                Dsn::Postgres { url } => {
                    let pool = sqlx::postgres::PgPoolOptions::new()
                        .max_connections(1)
                        .connect(url)
                        .await?;
                    let n = sqlx::query_scalar(&sql).fetch_one(&pool).await;
                    pool.close().await;
                    n
                }
                Dsn::MySql { url } => {
                    let pool = sqlx::mysql::MySqlPoolOptions::new()
                        .max_connections(1)
                        .connect(url)
                        .await?;
                    let n = sqlx::query_scalar(&sql).fetch_one(&pool).await;
                    pool.close().await;
                    n
                }
            }
        })
        .context("counting live certificate rows")?;
    Ok(n.max(0) as u64)
}

pub fn live_rows_sql(now: i64) -> String {
    format!("SELECT COUNT(*) FROM warrant_certs WHERE not_after > {now}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unexpired_rows_are_live() {
        let dir = std::env::temp_dir().join(format!("warrant-soakdb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("live.db");
        let url = format!("sqlite://{}?mode=rwc", path.display());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            use sqlx::Connection;
            let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
            sqlx::query("CREATE TABLE warrant_certs (serial TEXT, not_after BIGINT)")
                .execute(&mut c)
                .await
                .unwrap();
            for (s, t) in [("a", 90), ("b", 100), ("c", 101), ("d", 500)] {
                sqlx::query("INSERT INTO warrant_certs VALUES (?, ?)")
                    .bind(s)
                    .bind(t)
                    .execute(&mut c)
                    .await
                    .unwrap();
            }
            c.close().await.unwrap();
        });
        assert_eq!(live_rows(&path.display().to_string(), 100).unwrap(), 2);
        assert_eq!(live_rows(&url, 0).unwrap(), 4);
        assert!(live_rows("redis://h/0", 0).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
