//! Reading rows: the column macros every query module uses (sqlx's row
//! types differ per driver, so these expand once per backend inside
//! `on_pool!`), and the certificate columns shared by the reads and the
//! batch insert.

/// Reads a text column. MariaDB flags `utf8mb4_bin` columns as BINARY, which
/// sqlx refuses to decode as `String`, so fall back to bytes + UTF-8.
macro_rules! get_str {
    ($row:expr, $table:expr, $col:expr) => {{
        match $row.try_get::<Option<String>, _>($col) {
            Ok(v) => Ok(v),
            Err(_) => match $row.try_get::<Option<Vec<u8>>, _>($col) {
                Ok(Some(b)) => {
                    String::from_utf8(b)
                        .map(Some)
                        .map_err(|e| $crate::StoreError::Corrupt {
                            table: $table,
                            detail: format!("{}: {e}", $col),
                        })
                }
                Ok(None) => Ok(None),
                Err(e) => Err($crate::StoreError::Corrupt {
                    table: $table,
                    detail: format!("{}: {e}", $col),
                }),
            },
        }
    }};
}

macro_rules! get_req_str {
    ($row:expr, $table:expr, $col:expr) => {{
        $crate::sql::decode::get_str!($row, $table, $col)?.ok_or_else(|| {
            $crate::StoreError::Corrupt {
                table: $table,
                detail: format!("{} is NULL", $col),
            }
        })
    }};
}

macro_rules! get_col {
    ($row:expr, $table:expr, $col:expr, $ty:ty) => {{
        $row.try_get::<$ty, _>($col)
            .map_err(|e| $crate::StoreError::Corrupt {
                table: $table,
                detail: format!("{}: {e}", $col),
            })
    }};
}

macro_rules! decode_user {
    ($row:expr) => {{
        let row = &$row;
        let role_s: String = $crate::sql::decode::get_req_str!(row, "warrant_users", "role")?;
        Ok::<$crate::UserRow, $crate::StoreError>($crate::UserRow {
            id: $crate::sql::decode::get_col!(row, "warrant_users", "id", i64)?,
            username: $crate::sql::decode::get_req_str!(row, "warrant_users", "username")?,
            password_hash: $crate::sql::decode::get_req_str!(
                row,
                "warrant_users",
                "password_hash"
            )?,
            role: role_s
                .parse()
                .map_err(|e: $crate::UnknownRole| $crate::StoreError::Corrupt {
                    table: "warrant_users",
                    detail: e.to_string(),
                })?,
            created_at: $crate::sql::decode::get_col!(row, "warrant_users", "created_at", i64)?,
            failed_logins: $crate::sql::decode::get_col!(
                row,
                "warrant_users",
                "failed_logins",
                i64
            )?,
            locked_until: $crate::sql::decode::get_col!(
                row,
                "warrant_users",
                "locked_until",
                Option<i64>
            )?,
        })
    }};
}

macro_rules! decode_token {
    ($row:expr) => {{
        let row = &$row;
        let hash: Vec<u8> =
            $crate::sql::decode::get_col!(row, "warrant_api_tokens", "token_hash", Vec<u8>)?;
        Ok::<$crate::ApiTokenRow, $crate::StoreError>($crate::ApiTokenRow {
            id: $crate::sql::decode::get_col!(row, "warrant_api_tokens", "id", i64)?,
            token_hash: hash.try_into().map_err(|_| $crate::StoreError::Corrupt {
                table: "warrant_api_tokens",
                detail: "token_hash is not 32 bytes".into(),
            })?,
            user_id: $crate::sql::decode::get_col!(row, "warrant_api_tokens", "user_id", i64)?,
            name: $crate::sql::decode::get_req_str!(row, "warrant_api_tokens", "name")?,
            created_at: $crate::sql::decode::get_col!(
                row,
                "warrant_api_tokens",
                "created_at",
                i64
            )?,
            expires_at: $crate::sql::decode::get_col!(
                row,
                "warrant_api_tokens",
                "expires_at",
                i64
            )?,
            one_time: $crate::sql::decode::get_col!(row, "warrant_api_tokens", "one_time", bool)?,
        })
    }};
}

macro_rules! decode_cert {
    ($row:expr) => {{
        let row = &$row;
        const T: &str = "warrant_certs";
        let status_s: String = $crate::sql::decode::get_req_str!(row, T, "status")?;
        Ok::<$crate::CertRecord, $crate::StoreError>($crate::CertRecord {
            ca: $crate::sql::decode::get_req_str!(row, T, "ca")?,
            serial: $crate::sql::decode::get_req_str!(row, T, "serial")?,
            common_name: $crate::sql::decode::get_req_str!(row, T, "common_name")?,
            profile: $crate::sql::decode::get_req_str!(row, T, "profile")?,
            status: status_s.parse().map_err(|e: $crate::UnknownStatus| {
                $crate::StoreError::Corrupt {
                    table: T,
                    detail: e.to_string(),
                }
            })?,
            not_before: $crate::sql::decode::get_col!(row, T, "not_before", i64)?,
            not_after: $crate::sql::decode::get_col!(row, T, "not_after", i64)?,
            der: $crate::sql::decode::get_col!(row, T, "der", Vec<u8>)?,
            principal_uid: $crate::sql::decode::get_str!(row, T, "principal_uid")?,
            agent_id: $crate::sql::decode::get_str!(row, T, "agent_id")?,
            key_hash: $crate::sql::decode::get_col!(row, T, "key_hash", Vec<u8>)?,
            created_at: $crate::sql::decode::get_col!(row, T, "created_at", i64)?,
            revoked_at: $crate::sql::decode::get_col!(row, T, "revoked_at", Option<i64>)?,
            revocation_reason: $crate::sql::decode::get_str!(row, T, "revocation_reason")?,
            capabilities: $crate::sql::decode::get_str!(row, T, "capabilities")?,
            lineage_start: $crate::sql::decode::get_col!(row, T, "lineage_start", Option<i64>)?,
        })
    }};
}

pub(crate) const CERT_COLS: &str = "ca, serial, common_name, profile, status, not_before, not_after, der, \
     principal_uid, agent_id, key_hash, created_at, revoked_at, revocation_reason, capabilities, lineage_start";
pub(crate) const CERT_COL_COUNT: usize = 16;

/// Binds the [`CERT_COLS`] of certificate `$c` to query `$q`, in order.
macro_rules! bind_cert {
    ($q:expr, $c:expr) => {{
        let c = $c;
        $q.bind(c.ca.as_str())
            .bind(c.serial.as_str())
            .bind(c.common_name.as_str())
            .bind(c.profile.as_str())
            .bind(c.status.as_str())
            .bind(c.not_before)
            .bind(c.not_after)
            .bind(c.der.as_slice())
            .bind(c.principal_uid.as_deref())
            .bind(c.agent_id.as_deref())
            .bind(c.key_hash.as_slice())
            .bind(c.created_at)
            .bind(c.revoked_at)
            .bind(c.revocation_reason.as_deref())
            .bind(c.capabilities.as_deref())
            .bind(c.lineage_start)
    }};
}

pub(crate) use {bind_cert, decode_cert, decode_token, decode_user, get_col, get_req_str, get_str};
