//! Certificates: reads, revocation (with the cascade from a person to its
//! agents), the CRL's entries, the `max_agents` count, and operator
//! certificates bound to a user. Issued certificates are written by the
//! issuance write path (`Issuance::submit`), not here.

use std::sync::Arc;

use sqlx::Row;

use crate::error::StoreError;
use crate::sql::decode::{
    CERT_COL_COUNT, CERT_COLS, bind_cert, decode_cert, get_col, get_req_str, get_str,
};
use crate::sql::{BeginWrite, SqlCore, on_pool};
use crate::standing::StandingCache;
use crate::types::*;

/// The status, principal and bound user of one certificate.
const SELECT_CERT_STANDING: &str =
    "SELECT status, principal_uid, bound_user_id FROM warrant_certs WHERE ca = ? AND serial = ?";
/// A principal's valid, unexpired agent certificates (`max_agents`).
const COUNT_ACTIVE_AGENTS: &str = "SELECT COUNT(*) FROM warrant_certs WHERE principal_uid = ? AND status = 'V' AND agent_id IS NOT NULL AND not_after > ?";

/// Certificate reads and administrative writes (see the module comment).
#[derive(Clone)]
pub struct Certificates {
    pub(crate) core: Arc<SqlCore>,
    /// SQLite: standings kept while the foreign-write epoch holds.
    pub(crate) standings: Arc<StandingCache>,
}

impl Certificates {
    pub async fn get_cert(&self, ca: &str, serial: &str) -> Result<Option<CertRecord>, StoreError> {
        let sql = self
            .core
            .sql(&format!(
                "SELECT {CERT_COLS} FROM warrant_certs WHERE ca = ? AND serial = ?"
            ))
            .into_owned();
        self.core
            .timed(async {
                on_pool!(&self.core.pools, read, |p| {
                    let row = sqlx::query(&sql)
                        .bind(ca)
                        .bind(serial)
                        .fetch_optional(p)
                        .await?;
                    row.map(|r| decode_cert!(r)).transpose()
                })
            })
            .await
    }

    /// Newest first; `limit` capped at [`MAX_LIST_LIMIT`].
    pub async fn list_certs(&self, f: &CertFilter) -> Result<Vec<CertRecord>, StoreError> {
        let mut clauses = Vec::new();
        if f.ca.is_some() {
            clauses.push("ca = ?");
        }
        if f.status.is_some() {
            clauses.push("status = ?");
        }
        if f.common_name.is_some() {
            clauses.push("common_name = ?");
        }
        if f.principal_uid.is_some() {
            clauses.push("principal_uid = ?");
        }
        if f.profile.is_some() {
            clauses.push("profile = ?");
        }
        let where_clause = if clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", clauses.join(" AND "))
        };
        let limit = f.limit.min(MAX_LIST_LIMIT) as i64;
        let offset = i64::try_from(f.offset).unwrap_or(i64::MAX);
        let sql = self.core
            .sql(&format!(
                "SELECT {CERT_COLS} FROM warrant_certs {where_clause} ORDER BY created_at DESC, ca, serial LIMIT ? OFFSET ?"
            ))
            .into_owned();
        self.core
            .timed(async {
                on_pool!(&self.core.pools, read, |p| {
                    let mut q = sqlx::query(&sql);
                    if let Some(v) = &f.ca {
                        q = q.bind(v.as_str());
                    }
                    if let Some(v) = f.status {
                        q = q.bind(v.as_str());
                    }
                    if let Some(v) = &f.common_name {
                        q = q.bind(v.as_str());
                    }
                    if let Some(v) = &f.principal_uid {
                        q = q.bind(v.as_str());
                    }
                    if let Some(v) = &f.profile {
                        q = q.bind(v.as_str());
                    }
                    let rows = q.bind(limit).bind(offset).fetch_all(p).await?;
                    rows.iter().map(|r| decode_cert!(r)).collect()
                })
            })
            .await
    }

    /// Status and principal of a certificate; `None` if it is unknown. The
    /// issuance path and mTLS ask this on every request; on SQLite a
    /// standing read earlier is served from memory while no write outside
    /// the issuance path has happened since (`standing`).
    pub async fn cert_status(
        &self,
        ca: &str,
        serial: &str,
    ) -> Result<Option<CertStanding>, StoreError> {
        let epoch = self.core.foreign_write_epoch();
        if let Some(epoch) = epoch
            && let Some(hit) = self.standings.get(epoch, ca, serial)
        {
            return Ok(Some(hit));
        }
        let read = self.read_cert_status(ca, serial).await?;
        if let (Some(epoch), Some(standing)) = (epoch, &read) {
            self.standings.put(epoch, ca, serial, standing);
        }
        Ok(read)
    }

    async fn read_cert_status(
        &self,
        ca: &str,
        serial: &str,
    ) -> Result<Option<CertStanding>, StoreError> {
        let standing =
            |status: String, principal_uid: Option<String>, bound_user_id: Option<i64>| {
                let status = status
                    .parse()
                    .map_err(|e: UnknownStatus| StoreError::Corrupt {
                        table: "warrant_certs",
                        detail: e.to_string(),
                    })?;
                Ok(CertStanding {
                    status,
                    principal_uid,
                    bound_user_id,
                })
            };
        let sql = self.core.sql(SELECT_CERT_STANDING);
        self.core
            .timed(async {
                on_pool!(&self.core.pools, read, |p| {
                    let row = sqlx::query(&sql)
                        .bind(ca)
                        .bind(serial)
                        .fetch_optional(p)
                        .await?;
                    match row {
                        None => Ok(None),
                        Some(r) => standing(
                            get_req_str!(r, "warrant_certs", "status")?,
                            get_str!(r, "warrant_certs", "principal_uid")?,
                            get_col!(r, "warrant_certs", "bound_user_id", Option<i64>)?,
                        )
                        .map(Some),
                    }
                })
            })
            .await
    }

    /// Valid, unexpired agent certificates delegated by `principal_uid`
    /// (committed ones: records still in the write queue are not counted).
    pub async fn count_active_agents(
        &self,
        principal_uid: &str,
        now: i64,
    ) -> Result<u64, StoreError> {
        let sql = self.core.sql(COUNT_ACTIVE_AGENTS);
        self.core
            .timed(async {
                on_pool!(&self.core.pools, read, |p| {
                    let row = sqlx::query(&sql)
                        .bind(principal_uid)
                        .bind(now)
                        .fetch_one(p)
                        .await?;
                    Ok(get_col!(row, "warrant_certs", 0, i64)?.max(0) as u64)
                })
            })
            .await
    }

    /// Revoked certificates of `ca` with `not_after >= not_after_from`
    /// (pass 0 for all), ordered by serial: the CRL's entries.
    pub async fn list_revoked(
        &self,
        ca: &str,
        not_after_from: i64,
    ) -> Result<Vec<RevokedEntry>, StoreError> {
        let sql = self.core.sql(
            "SELECT serial, revoked_at, revocation_reason, not_after FROM warrant_certs WHERE ca = ? AND status = 'R' AND not_after >= ? ORDER BY serial",
        );
        self.core
            .timed(async {
                on_pool!(&self.core.pools, read, |p| {
                    let rows = sqlx::query(&sql)
                        .bind(ca)
                        .bind(not_after_from)
                        .fetch_all(p)
                        .await?;
                    rows.iter()
                        .map(|r| {
                            Ok(RevokedEntry {
                                serial: get_req_str!(r, "warrant_certs", "serial")?,
                                revoked_at: get_col!(
                                    r,
                                    "warrant_certs",
                                    "revoked_at",
                                    Option<i64>
                                )?
                                .unwrap_or(0),
                                reason: get_str!(r, "warrant_certs", "revocation_reason")?,
                                not_after: get_col!(r, "warrant_certs", "not_after", i64)?,
                            })
                        })
                        .collect()
                })
            })
            .await
    }

    /// Revokes one certificate and, for a person certificate, the active
    /// agent certificates of its principal, in one transaction.
    pub async fn revoke_cert(
        &self,
        ca: &str,
        serial: &str,
        reason: &str,
        at: i64,
    ) -> Result<Option<RevokeOutcome>, StoreError> {
        let lock_suffix = if self.core.kind == BackendKind::Sqlite {
            ""
        } else {
            " FOR UPDATE"
        };
        let select = self.core
            .sql(&format!(
                "SELECT status, agent_id, principal_uid FROM warrant_certs WHERE ca = ? AND serial = ?{lock_suffix}"
            ))
            .into_owned();
        let update = self.core.sql(
            "UPDATE warrant_certs SET status = 'R', revoked_at = ?, revocation_reason = ? WHERE ca = ? AND serial = ?",
        );
        let cascade = self.core.sql(
            "UPDATE warrant_certs SET status = 'R', revoked_at = ?, revocation_reason = ? WHERE principal_uid = ? AND status = 'V' AND agent_id IS NOT NULL",
        );
        self.core
            .timed_write(async {
                on_pool!(&self.core.pools, write, |p| {
                    let mut tx = p.begin_write().await?;
                    let Some(row) = sqlx::query(&select)
                        .bind(ca)
                        .bind(serial)
                        .fetch_optional(&mut *tx)
                        .await?
                    else {
                        return Ok(None);
                    };
                    let status: String = get_req_str!(row, "warrant_certs", "status")?;
                    let agent_id = get_str!(row, "warrant_certs", "agent_id")?;
                    let principal = get_str!(row, "warrant_certs", "principal_uid")?;
                    let was_principal = agent_id.is_none() && principal.is_some();
                    if status == "R" {
                        return Ok(Some(RevokeOutcome {
                            already_revoked: true,
                            was_principal,
                            cascade_count: 0,
                        }));
                    }
                    sqlx::query(&update)
                        .bind(at)
                        .bind(reason)
                        .bind(ca)
                        .bind(serial)
                        .execute(&mut *tx)
                        .await?;
                    let mut cascade_count = 0;
                    if let (true, Some(uid)) = (was_principal, principal.as_deref()) {
                        cascade_count = sqlx::query(&cascade)
                            .bind(at)
                            .bind(reason)
                            .bind(uid)
                            .execute(&mut *tx)
                            .await?
                            .rows_affected();
                    }
                    tx.commit().await?;
                    Ok(Some(RevokeOutcome {
                        already_revoked: false,
                        was_principal,
                        cascade_count,
                    }))
                })
            })
            .await
    }

    /// Revokes one valid certificate with reason `superseded`, and only it
    /// (no cascade: a person certificate replaced by a renewal with a new
    /// key leaves the agents it delegated to their short lives). Returns
    /// whether it was valid.
    pub async fn supersede_cert(
        &self,
        ca: &str,
        serial: &str,
        at: i64,
    ) -> Result<bool, StoreError> {
        let sql = self.core.sql(
            "UPDATE warrant_certs SET status = 'R', revoked_at = ?, revocation_reason = 'superseded' WHERE ca = ? AND serial = ? AND status = 'V'",
        );
        self.core
            .timed_write(async {
                on_pool!(&self.core.pools, write, |p| {
                    Ok(sqlx::query(&sql)
                        .bind(at)
                        .bind(ca)
                        .bind(serial)
                        .execute(p)
                        .await?
                        .rows_affected()
                        == 1)
                })
            })
            .await
    }

    /// Revokes every valid certificate (person and agent) of a principal;
    /// returns how many.
    pub async fn revoke_by_principal(
        &self,
        principal_uid: &str,
        reason: &str,
        at: i64,
    ) -> Result<u64, StoreError> {
        let sql = self.core.sql(
            "UPDATE warrant_certs SET status = 'R', revoked_at = ?, revocation_reason = ? WHERE principal_uid = ? AND status = 'V'",
        );
        self.core
            .timed_write(async {
                on_pool!(&self.core.pools, write, |p| {
                    Ok(sqlx::query(&sql)
                        .bind(at)
                        .bind(reason)
                        .bind(principal_uid)
                        .execute(p)
                        .await?
                        .rows_affected())
                })
            })
            .await
    }

    /// Persists a client certificate issued *for* user `user_id` (an
    /// operator certificate) with that binding, durably, outside the
    /// issuance write path: it is the only way a certificate acts as a user.
    pub async fn insert_bound_cert(&self, c: &CertRecord, user_id: i64) -> Result<(), StoreError> {
        let sql = self
            .core
            .sql(&crate::sql::batch::multi_row(
                &format!("INSERT INTO warrant_certs ({CERT_COLS}, bound_user_id) VALUES "),
                CERT_COL_COUNT + 1,
                1,
                "",
            ))
            .into_owned();
        self.core
            .timed_write(async {
                on_pool!(&self.core.pools, write, |p| {
                    bind_cert!(sqlx::query(&sql), c)
                        .bind(user_id)
                        .execute(p)
                        .await?;
                    Ok(())
                })
            })
            .await
    }
}
