//! Users, API tokens, login state and the auth change feed: the accounts
//! the server authenticates against. Every insert, update and delete of a
//! user or token appends an [`AuthChange`] in its own transaction, so other
//! nodes can follow (see [`Accounts::auth_changes_since`]).

use std::borrow::Cow;
use std::sync::Arc;

use sqlx::Row;

use crate::error::{StoreError, classify};
use crate::sql::decode::{decode_token, decode_user, get_col, get_req_str};
use crate::sql::{BeginWrite, SqlCore, on_pool};
use crate::time::now_unix;
use crate::types::*;

/// Users, tokens and the auth change feed (see the module comment).
/// Reads and writes go straight to the database, bounded by the store's
/// statement timeout; writes are durable before they return.
#[derive(Clone)]
pub struct Accounts {
    pub(crate) core: Arc<SqlCore>,
}

/// Takes the next auth change number inside transaction `$tx`. It must be
/// the transaction's first statement: the counter row's lock is then held
/// from the start to the commit, so every transaction that writes users or
/// tokens runs one after the other (no lock-order deadlocks among them), and
/// change numbers become visible in the order they were taken.
macro_rules! next_auth_seq {
    ($tx:expr) => {{
        sqlx::query("UPDATE warrant_auth_seq SET n = n + 1 WHERE id = 1")
            .execute(&mut *$tx)
            .await?;
        let row = sqlx::query("SELECT n FROM warrant_auth_seq WHERE id = 1")
            .fetch_one(&mut *$tx)
            .await?;
        get_col!(row, "warrant_auth_seq", "n", i64)?
    }};
}

/// Appends change `$seq` for `$entity` row `$id` inside `$tx`.
macro_rules! record_auth_change {
    ($core:expr, $tx:expr, $seq:expr, $entity:expr, $id:expr) => {{
        let sql = $core.sql(
            "INSERT INTO warrant_auth_changes (seq, entity, entity_id, created_at) VALUES (?, ?, ?, ?)",
        );
        sqlx::query(&sql)
            .bind($seq)
            .bind($entity.as_str())
            .bind($id)
            .bind(now_unix())
            .execute(&mut *$tx)
            .await?;
    }};
}

const USER_COLS: &str =
    "id, username, password_hash, role, created_at, failed_logins, locked_until";
const TOKEN_COLS: &str = "id, token_hash, user_id, name, created_at, expires_at, one_time";

enum UserKey<'a> {
    Id(i64),
    Name(&'a str),
}

impl Accounts {
    /// Returns the new user's id; [`StoreError::Conflict`] if the name is taken.
    pub async fn create_user(&self, user: &NewUser) -> Result<i64, StoreError> {
        let ins = self.core.sql(
            "INSERT INTO warrant_users (username, password_hash, role, created_at) VALUES (?, ?, ?, ?)",
        );
        // One way to learn the new id on every backend (no RETURNING on MySQL).
        let get = self
            .core
            .sql("SELECT id FROM warrant_users WHERE username = ?");
        self.core
            .timed_write(async {
                on_pool!(&self.core.pools, write, |p| {
                    let mut tx = p.begin_write().await?;
                    let seq = next_auth_seq!(tx);
                    sqlx::query(&ins)
                        .bind(&user.username)
                        .bind(&user.password_hash)
                        .bind(user.role.as_str())
                        .bind(user.created_at)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| match classify(e) {
                            StoreError::Conflict(_) => StoreError::Conflict("username"),
                            other => other,
                        })?;
                    let row = sqlx::query(&get)
                        .bind(&user.username)
                        .fetch_one(&mut *tx)
                        .await?;
                    let id = get_col!(row, "warrant_users", "id", i64)?;
                    record_auth_change!(self.core, tx, seq, AuthEntity::User, id);
                    tx.commit().await?;
                    Ok(id)
                })
            })
            .await
    }

    async fn fetch_users(
        &self,
        where_clause: &str,
        arg: Option<UserKey<'_>>,
    ) -> Result<Vec<UserRow>, StoreError> {
        let sql = self
            .core
            .sql(&format!(
                "SELECT {USER_COLS} FROM warrant_users {where_clause} ORDER BY id"
            ))
            .into_owned();
        self.core
            .timed(async {
                on_pool!(&self.core.pools, read, |p| {
                    let mut q = sqlx::query(&sql);
                    match arg {
                        Some(UserKey::Id(id)) => q = q.bind(id),
                        Some(UserKey::Name(n)) => q = q.bind(n),
                        None => {}
                    }
                    let rows = q.fetch_all(p).await?;
                    rows.iter().map(|r| decode_user!(r)).collect()
                })
            })
            .await
    }

    pub async fn get_user(&self, id: i64) -> Result<Option<UserRow>, StoreError> {
        Ok(self
            .fetch_users("WHERE id = ?", Some(UserKey::Id(id)))
            .await?
            .into_iter()
            .next())
    }

    pub async fn get_user_by_name(&self, name: &str) -> Result<Option<UserRow>, StoreError> {
        Ok(self
            .fetch_users("WHERE username = ?", Some(UserKey::Name(name)))
            .await?
            .into_iter()
            .next())
    }

    pub async fn list_users(&self) -> Result<Vec<UserRow>, StoreError> {
        self.fetch_users("", None).await
    }

    /// Deletes the user and its tokens; `false` if there was no such user.
    pub async fn delete_user(&self, id: i64) -> Result<bool, StoreError> {
        let del_tokens = self
            .core
            .sql("DELETE FROM warrant_api_tokens WHERE user_id = ?");
        let del_user = self.core.sql("DELETE FROM warrant_users WHERE id = ?");
        self.core
            .timed_write(async {
                on_pool!(&self.core.pools, write, |p| {
                    let mut tx = p.begin_write().await?;
                    let seq = next_auth_seq!(tx);
                    sqlx::query(&del_tokens).bind(id).execute(&mut *tx).await?;
                    let n = sqlx::query(&del_user)
                        .bind(id)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    if n == 0 {
                        // Dropping the transaction rolls the counter back too.
                        return Ok(false);
                    }
                    // One user change: readers drop the user and all its tokens.
                    record_auth_change!(self.core, tx, seq, AuthEntity::User, id);
                    tx.commit().await?;
                    Ok(true)
                })
            })
            .await
    }

    /// Changes a user's role and/or password hash; a new password deletes
    /// the user's tokens. `false` if there is no such user.
    pub async fn update_user(&self, id: i64, up: &UserUpdate) -> Result<bool, StoreError> {
        let exists = self.core.sql("SELECT id FROM warrant_users WHERE id = ?");
        let set_role = self
            .core
            .sql("UPDATE warrant_users SET role = ? WHERE id = ?");
        let set_hash = self
            .core
            .sql("UPDATE warrant_users SET password_hash = ? WHERE id = ?");
        let del_tokens = self
            .core
            .sql("DELETE FROM warrant_api_tokens WHERE user_id = ?");
        self.core
            .timed_write(async {
                on_pool!(&self.core.pools, write, |p| {
                    let mut tx = p.begin_write().await?;
                    let seq = next_auth_seq!(tx);
                    // Existence, not rows_affected: MySQL counts an UPDATE that
                    // sets the value a row already has as zero rows.
                    if sqlx::query(&exists)
                        .bind(id)
                        .fetch_optional(&mut *tx)
                        .await?
                        .is_none()
                    {
                        return Ok(false);
                    }
                    if let Some(role) = up.role {
                        sqlx::query(&set_role)
                            .bind(role.as_str())
                            .bind(id)
                            .execute(&mut *tx)
                            .await?;
                    }
                    if let Some(hash) = &up.password_hash {
                        sqlx::query(&set_hash)
                            .bind(hash)
                            .bind(id)
                            .execute(&mut *tx)
                            .await?;
                        sqlx::query(&del_tokens).bind(id).execute(&mut *tx).await?;
                    }
                    record_auth_change!(self.core, tx, seq, AuthEntity::User, id);
                    tx.commit().await?;
                    Ok(true)
                })
            })
            .await
    }

    /// Persists the login-failure counter and lock; `false` if no such user.
    pub async fn set_login_state(
        &self,
        id: i64,
        failed_logins: i64,
        locked_until: Option<i64>,
    ) -> Result<bool, StoreError> {
        let sql = self
            .core
            .sql("UPDATE warrant_users SET failed_logins = ?, locked_until = ? WHERE id = ?");
        self.core
            .timed_write(async {
                on_pool!(&self.core.pools, write, |p| {
                    let n = sqlx::query(&sql)
                        .bind(failed_logins)
                        .bind(locked_until)
                        .bind(id)
                        .execute(p)
                        .await?
                        .rows_affected();
                    Ok(n > 0)
                })
            })
            .await
    }

    /// Returns the new token's id; [`StoreError::MissingReference`] for an
    /// unknown user.
    pub async fn create_token(&self, t: &NewApiToken) -> Result<i64, StoreError> {
        let ins = self.core.sql(
            "INSERT INTO warrant_api_tokens (token_hash, user_id, name, created_at, expires_at, one_time) VALUES (?, ?, ?, ?, ?, ?)",
        );
        let get = self
            .core
            .sql("SELECT id FROM warrant_api_tokens WHERE token_hash = ?");
        let hash: &[u8] = &t.token_hash;
        self.core
            .timed_write(async {
                on_pool!(&self.core.pools, write, |p| {
                    let mut tx = p.begin_write().await?;
                    let seq = next_auth_seq!(tx);
                    sqlx::query(&ins)
                        .bind(hash)
                        .bind(t.user_id)
                        .bind(&t.name)
                        .bind(t.created_at)
                        .bind(t.expires_at)
                        .bind(t.one_time)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| match classify(e) {
                            StoreError::Conflict(_) => StoreError::Conflict("token"),
                            StoreError::MissingReference(_) => StoreError::MissingReference("user"),
                            other => other,
                        })?;
                    let row = sqlx::query(&get).bind(hash).fetch_one(&mut *tx).await?;
                    let id = get_col!(row, "warrant_api_tokens", "id", i64)?;
                    record_auth_change!(self.core, tx, seq, AuthEntity::Token, id);
                    tx.commit().await?;
                    Ok(id)
                })
            })
            .await
    }

    pub async fn get_token(&self, id: i64) -> Result<Option<ApiTokenRow>, StoreError> {
        Ok(self
            .fetch_tokens("WHERE id = ?", Some(id))
            .await?
            .into_iter()
            .next())
    }

    /// Tokens of one user, or of everyone with `None`.
    pub async fn list_tokens(&self, user_id: Option<i64>) -> Result<Vec<ApiTokenRow>, StoreError> {
        match user_id {
            Some(u) => self.fetch_tokens("WHERE user_id = ?", Some(u)).await,
            None => self.fetch_tokens("", None).await,
        }
    }

    /// Every token with `expires_at > now`, for the server's in-memory index.
    pub async fn load_unexpired_tokens(&self, now: i64) -> Result<Vec<ApiTokenRow>, StoreError> {
        self.fetch_tokens("WHERE expires_at > ?", Some(now)).await
    }

    async fn fetch_tokens(
        &self,
        where_clause: &str,
        arg: Option<i64>,
    ) -> Result<Vec<ApiTokenRow>, StoreError> {
        let sql = self
            .core
            .sql(&format!(
                "SELECT {TOKEN_COLS} FROM warrant_api_tokens {where_clause} ORDER BY id"
            ))
            .into_owned();
        self.core
            .timed(async {
                on_pool!(&self.core.pools, read, |p| {
                    let mut q = sqlx::query(&sql);
                    if let Some(a) = arg {
                        q = q.bind(a);
                    }
                    let rows = q.fetch_all(p).await?;
                    rows.iter().map(|r| decode_token!(r)).collect()
                })
            })
            .await
    }

    /// The token whose SHA-256 is `hash` (expired or not).
    pub async fn token_by_hash(&self, hash: &[u8; 32]) -> Result<Option<ApiTokenRow>, StoreError> {
        let sql = self
            .core
            .sql(&format!(
                "SELECT {TOKEN_COLS} FROM warrant_api_tokens WHERE token_hash = ?"
            ))
            .into_owned();
        self.core
            .timed(async {
                on_pool!(&self.core.pools, read, |p| {
                    let row = sqlx::query(&sql).bind(&hash[..]).fetch_optional(p).await?;
                    row.map(|r| decode_token!(r)).transpose()
                })
            })
            .await
    }

    /// `true` only for the caller whose delete removed the row: of two
    /// nodes spending one one-time token, exactly one gets `true`.
    pub async fn delete_token(&self, id: i64) -> Result<bool, StoreError> {
        let sql = self.core.sql("DELETE FROM warrant_api_tokens WHERE id = ?");
        self.core
            .timed_write(async {
                on_pool!(&self.core.pools, write, |p| {
                    let mut tx = p.begin_write().await?;
                    let seq = next_auth_seq!(tx);
                    let n = sqlx::query(&sql)
                        .bind(id)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    if n == 0 {
                        return Ok(false);
                    }
                    record_auth_change!(self.core, tx, seq, AuthEntity::Token, id);
                    tx.commit().await?;
                    Ok(true)
                })
            })
            .await
    }

    /// Deletes at most `limit` tokens with `expires_at <= now`. No change
    /// rows: an expired token is refused everywhere already, and every node
    /// prunes its own memory.
    pub async fn prune_expired_tokens(&self, now: i64, limit: u32) -> Result<u64, StoreError> {
        let sql = match self.core.kind {
            // MySQL allows no LIMIT in an IN subquery, but a LIMIT on DELETE.
            BackendKind::MySql => Cow::Borrowed(
                "DELETE FROM warrant_api_tokens WHERE expires_at <= ? ORDER BY expires_at LIMIT ?",
            ),
            BackendKind::Sqlite | BackendKind::Postgres => self.core.sql(
                "DELETE FROM warrant_api_tokens WHERE id IN (SELECT id FROM warrant_api_tokens WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)",
            ),
        };
        self.core
            .timed_write(async {
                on_pool!(&self.core.pools, write, |p| {
                    Ok(sqlx::query(&sql)
                        .bind(now)
                        .bind(i64::from(limit))
                        .execute(p)
                        .await?
                        .rows_affected())
                })
            })
            .await
    }

    /// The last change number taken (0 before the first change).
    pub async fn auth_change_head(&self) -> Result<i64, StoreError> {
        self.core
            .timed(async {
                on_pool!(&self.core.pools, read, |p| {
                    let row = sqlx::query("SELECT n FROM warrant_auth_seq WHERE id = 1")
                        .fetch_optional(p)
                        .await?;
                    match row {
                        Some(r) => get_col!(r, "warrant_auth_seq", "n", i64),
                        None => Ok(0),
                    }
                })
            })
            .await
    }

    /// Changes with `seq > after`, oldest first, at most `limit`. Numbers
    /// become visible in order, so a reader that remembers the last `seq` it
    /// applied misses none (as long as it reads before they are pruned).
    pub async fn auth_changes_since(
        &self,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AuthChange>, StoreError> {
        let sql = self.core.sql(
            "SELECT seq, entity, entity_id FROM warrant_auth_changes WHERE seq > ? ORDER BY seq LIMIT ?",
        );
        self.core
            .timed(async {
                on_pool!(&self.core.pools, read, |p| {
                    let rows = sqlx::query(&sql)
                        .bind(after)
                        .bind(i64::from(limit))
                        .fetch_all(p)
                        .await?;
                    let mut out = Vec::with_capacity(rows.len());
                    for r in &rows {
                        let entity: String = get_req_str!(r, "warrant_auth_changes", "entity")?;
                        out.push(AuthChange {
                            seq: get_col!(r, "warrant_auth_changes", "seq", i64)?,
                            entity: entity.parse().map_err(|e: UnknownEntity| {
                                StoreError::Corrupt {
                                    table: "warrant_auth_changes",
                                    detail: e.to_string(),
                                }
                            })?,
                            entity_id: get_col!(r, "warrant_auth_changes", "entity_id", i64)?,
                        });
                    }
                    Ok(out)
                })
            })
            .await
    }

    /// Deletes change rows written before `before` (Unix seconds).
    pub async fn prune_auth_changes(&self, before: i64) -> Result<u64, StoreError> {
        let sql = self
            .core
            .sql("DELETE FROM warrant_auth_changes WHERE created_at < ?");
        self.core
            .timed_write(async {
                on_pool!(&self.core.pools, write, |p| {
                    Ok(sqlx::query(&sql)
                        .bind(before)
                        .execute(p)
                        .await?
                        .rows_affected())
                })
            })
            .await
    }
}
