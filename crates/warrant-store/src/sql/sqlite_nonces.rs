//! SQLite's nonce table, keyed by (expiry minute, nonce).
//!
//! Why: keyed by the nonce alone, every row sits at a random place in the
//! index, so deleting a minute of expired nonces (250k rows at the fleet
//! rate) rewrote nearly every page of it, 512 keys per statement, and held
//! the one write lock that every commit needs. Keyed by their expiry minute
//! first, a minute's rows are contiguous: the pruner deletes whole minutes,
//! page after page.
//!
//! Invariant: a nonce is consumed while any bucket from the current minute
//! on holds it, whatever expiry the new request carries (ca.md §4 step 7:
//! "consumed exactly once"). The commit checks those buckets and inserts in
//! one statement, inside the batch's write transaction, so no other writer,
//! in this process or another, can slip in between. Buckets before the
//! current minute hold only expired nonces, which step 5 already refuses.

use std::fmt::Write as _;

use sqlx::SqlitePool;

/// The width of an expiry bucket. Stored keys depend on it (migration 9
/// computes the same buckets): changing it needs a migration.
pub(crate) const NONCE_BUCKET_SECS: i64 = 60;

/// The start of the expiry bucket `expires_at` falls in.
pub(crate) fn expiry_bucket(expires_at: i64) -> i64 {
    expires_at - expires_at.rem_euclid(NONCE_BUCKET_SECS)
}

/// The buckets the table holds from `?1` on, smallest first: one key seek
/// per bucket, however many rows each holds.
const BUCKETS_FROM: &str = "WITH RECURSIVE b(x) AS ( \
     SELECT (SELECT min(expiry_bucket) FROM warrant_da_nonces WHERE expiry_bucket >= ?1) \
     UNION ALL \
     SELECT (SELECT min(expiry_bucket) FROM warrant_da_nonces WHERE expiry_bucket > x) FROM b WHERE x IS NOT NULL \
     ) SELECT x FROM b WHERE x IS NOT NULL";

/// The buckets that may hold a live nonce at `now`.
pub(super) fn live_buckets(db: &rusqlite::Connection, now: i64) -> rusqlite::Result<Vec<i64>> {
    let mut stmt = db.prepare(BUCKETS_FROM)?;
    let rows = stmt.query_map([expiry_bucket(now)], |r| r.get(0))?;
    rows.collect()
}

/// The statement that consumes one nonce, binding (bucket, nonce,
/// expires_at, principal, batch id): it inserts the row unless one of
/// `buckets` holds the nonce, so it changes no row for a replay. The
/// buckets are integers the table returned, written into the text so the
/// lookup is one key seek per bucket.
pub(super) fn consume_sql(buckets: &[i64]) -> String {
    let mut sql = String::from(
        "INSERT OR IGNORE INTO warrant_da_nonces \
         (expiry_bucket, nonce, expires_at, principal_uid, batch_id) SELECT ?1, ?2, ?3, ?4, ?5",
    );
    if let Some((first, rest)) = buckets.split_first() {
        let _ = write!(
            sql,
            " WHERE NOT EXISTS (SELECT 1 FROM warrant_da_nonces WHERE expiry_bucket IN ({first}"
        );
        for b in rest {
            let _ = write!(sql, ", {b}");
        }
        sql.push_str(") AND nonce = ?2)");
    }
    sql
}

/// Whether any bucket holds `nonce` (expired rows not yet pruned included).
pub(super) async fn consumed(pool: &SqlitePool, nonce: &[u8; 32]) -> Result<bool, sqlx::Error> {
    let sql = format!(
        "SELECT 1 FROM warrant_da_nonces WHERE expiry_bucket IN ({BUCKETS_FROM}) AND nonce = ?2"
    );
    Ok(sqlx::query(&sql)
        .bind(i64::MIN)
        .bind(&nonce[..])
        .fetch_optional(pool)
        .await?
        .is_some())
}

/// The oldest bucket that ended before `now`'s began, if any.
pub(super) async fn oldest_ended_bucket(
    pool: &SqlitePool,
    now: i64,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar("SELECT min(expiry_bucket) FROM warrant_da_nonces WHERE expiry_bucket < ?")
        .bind(expiry_bucket(now))
        .fetch_one(pool)
        .await
}

/// Deletes at most `limit` rows of `bucket`, the lowest nonces first: a
/// contiguous run of the key, so a short transaction. The rows deleted.
pub(super) async fn delete_from_bucket(
    pool: &SqlitePool,
    bucket: i64,
    limit: usize,
) -> Result<u64, sqlx::Error> {
    let last: Option<Vec<u8>> = sqlx::query_scalar(
        "SELECT nonce FROM warrant_da_nonces WHERE expiry_bucket = ? ORDER BY nonce LIMIT 1 OFFSET ?",
    )
    .bind(bucket)
    .bind(limit.saturating_sub(1) as i64)
    .fetch_optional(pool)
    .await?;
    let deleted = match last {
        Some(last) => {
            sqlx::query("DELETE FROM warrant_da_nonces WHERE expiry_bucket = ? AND nonce <= ?")
                .bind(bucket)
                .bind(last)
                .execute(pool)
                .await?
        }
        None => {
            sqlx::query("DELETE FROM warrant_da_nonces WHERE expiry_bucket = ?")
                .bind(bucket)
                .execute(pool)
                .await?
        }
    };
    Ok(deleted.rows_affected())
}

/// Up to `limit` unexpired nonces with their expiries, the latest buckets
/// first: the ledger's warm-up read.
pub(super) async fn load(
    pool: &SqlitePool,
    now: i64,
    limit: usize,
) -> Result<Vec<(Vec<u8>, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT nonce, expires_at FROM warrant_da_nonces WHERE expiry_bucket >= ? AND expires_at >= ? \
         ORDER BY expiry_bucket DESC LIMIT ?",
    )
    .bind(expiry_bucket(now))
    .bind(now)
    .bind(limit as i64)
    .fetch_all(pool)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrations::{MIGRATIONS, create_migrations_table, render};
    use crate::types::BackendKind;

    #[test]
    fn buckets_round_down_to_the_minute_negative_times_included() {
        assert_eq!(expiry_bucket(0), 0);
        assert_eq!(expiry_bucket(59), 0);
        assert_eq!(expiry_bucket(60), 60);
        assert_eq!(
            expiry_bucket(1_765_000_001),
            1_765_000_000 - 1_765_000_000 % 60
        );
        assert_eq!(expiry_bucket(-1), -60);
        assert_eq!(expiry_bucket(-60), -60);
        assert_eq!(expiry_bucket(-61), -120);
    }

    /// A v8 nonce table, every later migration applied: what a store that
    /// upgrades sees.
    fn migrated_db(rows: &[(u8, i64)]) -> rusqlite::Connection {
        let db = rusqlite::Connection::open_in_memory().expect("open");
        db.execute_batch(&create_migrations_table(BackendKind::Sqlite))
            .expect("migrations table");
        for m in MIGRATIONS.iter().filter(|m| m.version <= 8) {
            for s in m.statements_for(BackendKind::Sqlite) {
                db.execute_batch(&render(BackendKind::Sqlite, s))
                    .expect("v8 schema");
            }
        }
        for (n, e) in rows {
            db.execute(
                "INSERT INTO warrant_da_nonces (nonce, expires_at, principal_uid, batch_id) VALUES (?, ?, 'p', 0)",
                rusqlite::params![[*n; 32], e],
            )
            .expect("v8 row");
        }
        for m in MIGRATIONS.iter().filter(|m| m.version > 8) {
            for s in m.statements_for(BackendKind::Sqlite) {
                db.execute_batch(&render(BackendKind::Sqlite, s))
                    .expect("later migration");
            }
        }
        db
    }

    #[test]
    fn the_migration_files_existing_rows_under_the_buckets_the_code_computes() {
        let expiries = [-61, -1, 0, 59, 60, 1_765_000_001, 1_765_000_059];
        let rows: Vec<(u8, i64)> = expiries
            .iter()
            .enumerate()
            .map(|(i, e)| (i as u8, *e))
            .collect();
        let db = migrated_db(&rows);
        let mut stmt = db
            .prepare("SELECT expiry_bucket, expires_at FROM warrant_da_nonces")
            .expect("prepare");
        let stored: Vec<(i64, i64)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(stored.len(), expiries.len());
        for (bucket, expires_at) in stored {
            assert_eq!(bucket, expiry_bucket(expires_at), "expires_at {expires_at}");
        }
    }

    #[test]
    fn live_buckets_are_those_from_the_current_minute_on() {
        let now = 1_765_000_030;
        let db = migrated_db(&[]);
        for (n, e) in [
            (1u8, now - 200),
            (2, now - 5),
            (3, now + 100),
            (4, now + 101),
            (5, now + 4000),
        ] {
            db.execute(
                "INSERT INTO warrant_da_nonces (expiry_bucket, nonce, expires_at, principal_uid, batch_id) \
                 VALUES (?, ?, ?, 'p', 0)",
                rusqlite::params![expiry_bucket(e), [n; 32], e],
            )
            .expect("row");
        }
        assert_eq!(
            live_buckets(&db, now).expect("buckets"),
            vec![
                expiry_bucket(now - 5),
                expiry_bucket(now + 100),
                expiry_bucket(now + 4000)
            ]
        );
    }

    #[test]
    fn consume_refuses_a_nonce_any_live_bucket_holds_and_only_then() {
        let db = migrated_db(&[]);
        let consume = |buckets: &[i64], nonce: u8, expires_at: i64| -> usize {
            db.execute(
                &consume_sql(buckets),
                rusqlite::params![expiry_bucket(expires_at), [nonce; 32], expires_at, "p", 0],
            )
            .expect("consume")
        };
        assert_eq!(consume(&[], 1, 600), 1);
        assert_eq!(consume(&[600], 1, 600), 0, "the same bucket");
        assert_eq!(consume(&[600], 1, 6000), 0, "another expiry, same nonce");
        assert_eq!(consume(&[600, 6000], 2, 6000), 1);
        assert_eq!(
            consume(&[6000], 1, 9000),
            1,
            "a bucket not looked at does not count"
        );
    }

    /// The replay check must stay one key seek per bucket: a plan that
    /// scans the table would cost every commit a pass over a million rows.
    #[test]
    fn the_replay_check_seeks_the_key_of_each_bucket() {
        let db = migrated_db(&[]);
        let plan: Vec<String> = db
            .prepare(&format!(
                "EXPLAIN QUERY PLAN {}",
                consume_sql(&[60, 120, 180])
            ))
            .expect("prepare")
            .query_map(rusqlite::params![0, [0u8; 32], 0, "p", 0], |r| {
                r.get::<_, String>(3)
            })
            .expect("plan")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert!(
            plan.iter()
                .any(|step| step.contains("USING PRIMARY KEY (expiry_bucket=? AND nonce=?)")),
            "{plan:?}"
        );
        assert!(
            !plan
                .iter()
                .any(|step| step.starts_with("SCAN warrant_da_nonces")),
            "{plan:?}"
        );
    }
}
