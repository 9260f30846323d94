//! Versioned schema migrations.
//!
//! One logical schema for the three backends; only the spelling of types
//! differs, so each migration is written once with type placeholders that
//! [`render`] fills per dialect. Migrations are append-only: never edit a
//! released one, add the next version.

use crate::types::BackendKind;

pub(crate) struct Migration {
    pub version: i64,
    pub name: &'static str,
    /// Statements, run one by one (MySQL cannot run several per call).
    pub statements: &'static [&'static str],
    /// Run instead of `statements` on PostgreSQL, where a migration's shape
    /// differs (partitioning); `None`: `statements` everywhere.
    pub postgres: Option<&'static [&'static str]>,
    /// Run instead of `statements` on SQLite; `None`: `statements`.
    pub sqlite: Option<&'static [&'static str]>,
}

impl Migration {
    pub(crate) fn statements_for(&self, kind: BackendKind) -> &'static [&'static str] {
        match (kind, self.postgres, self.sqlite) {
            (BackendKind::Postgres, Some(pg), _) => pg,
            (BackendKind::Sqlite, _, Some(lite)) => lite,
            _ => self.statements,
        }
    }
}

/// Placeholders: `{id}` auto-increment primary key, `{bytes}` variable-length
/// bytes, `{bytes32}` a 32-byte key, `{str:N}` a bounded string usable in a
/// key, `{text}` an unbounded string, `{text_key:COL}` an unbounded string
/// column as an index key part, `{table_opts}` table options,
/// `{on_table:T}` the ` ON T` that MySQL's `DROP INDEX` needs.
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial schema",
        statements: &[
            "CREATE TABLE warrant_users (
            id {id},
            username {str:255} NOT NULL UNIQUE,
            password_hash {text} NOT NULL,
            role {str:16} NOT NULL,
            created_at BIGINT NOT NULL,
            failed_logins BIGINT NOT NULL DEFAULT 0,
            locked_until BIGINT NULL
        ){table_opts}",
            "CREATE TABLE warrant_api_tokens (
            id {id},
            token_hash {bytes32} NOT NULL UNIQUE,
            user_id BIGINT NOT NULL,
            name {str:255} NOT NULL,
            created_at BIGINT NOT NULL,
            expires_at BIGINT NOT NULL,
            FOREIGN KEY (user_id) REFERENCES warrant_users(id) ON DELETE CASCADE
        ){table_opts}",
            "CREATE INDEX warrant_api_tokens_user ON warrant_api_tokens (user_id)",
            "CREATE TABLE warrant_certs (
            ca {str:64} NOT NULL,
            serial {str:40} NOT NULL,
            common_name {text} NOT NULL,
            profile {str:32} NOT NULL,
            status {str:1} NOT NULL,
            not_before BIGINT NOT NULL,
            not_after BIGINT NOT NULL,
            der {bytes} NOT NULL,
            principal_uid {str:512} NULL,
            agent_id {text} NULL,
            key_hash {bytes} NOT NULL,
            created_at BIGINT NOT NULL,
            revoked_at BIGINT NULL,
            revocation_reason {str:64} NULL,
            PRIMARY KEY (ca, serial)
        ){table_opts}",
            "CREATE INDEX warrant_certs_principal ON warrant_certs (principal_uid, status)",
            "CREATE INDEX warrant_certs_created ON warrant_certs (created_at)",
            "CREATE TABLE warrant_da_nonces (
            nonce {bytes32} NOT NULL PRIMARY KEY,
            expires_at BIGINT NOT NULL,
            principal_uid {str:512} NOT NULL,
            batch_id BIGINT NOT NULL
        ){table_opts}",
            "CREATE INDEX warrant_da_nonces_expiry ON warrant_da_nonces (expires_at)",
        ],
        postgres: None,
        sqlite: None,
    },
    Migration {
        version: 2,
        name: "covering index for counting a principal's active agents",
        statements: &[
            // `count_active_agents` runs on every agent issuance (max_agents).
            // With only (principal_uid, status) it read one table row per valid
            // agent of the principal, expired ones included, to test agent_id
            // and not_after. Here not_after follows the equalities so expired
            // rows are skipped by the seek, and agent_id is in the key so
            // SQLite and PostgreSQL answer from the index alone.
            "CREATE INDEX warrant_certs_principal_active ON warrant_certs (principal_uid, status, not_after, {text_key:agent_id})",
        ],
        postgres: None,
        sqlite: None,
    },
    Migration {
        version: 3,
        name: "drop the index made redundant by migration 2",
        statements: &[
            // (principal_uid, status) is a prefix of migration 2's index, so
            // every query that used this one (a principal's certificates, the
            // revocation cascades, the active-agent count) seeks the same way
            // in that one; this index only cost one more insert per issued
            // certificate on the write path. MySQL commits DDL implicitly: a
            // crash between the drop and the migration's row leaves the drop
            // done, which the next start steps over (`ddl_already_applied`
            // in sql.rs), as it does migration 2's CREATE.
            "DROP INDEX warrant_certs_principal{on_table:warrant_certs}",
        ],
        postgres: None,
        sqlite: None,
    },
    Migration {
        version: 4,
        name: "the user a client certificate was issued for",
        statements: &[
            // Set only for certificates issued through the operator-certificate
            // endpoint; a client certificate acts as a user only through it.
            "ALTER TABLE warrant_certs ADD COLUMN bound_user_id BIGINT NULL",
        ],
        postgres: None,
        sqlite: None,
    },
    Migration {
        version: 5,
        name: "one-time tokens, token expiry index, auth change feed",
        statements: &[
            // The bootstrap token: deleted on first use (a typed flag, not a
            // name convention).
            "ALTER TABLE warrant_api_tokens ADD COLUMN one_time BOOLEAN NOT NULL DEFAULT FALSE",
            // The token pruner deletes expired rows in bounded batches.
            "CREATE INDEX warrant_api_tokens_expiry ON warrant_api_tokens (expires_at)",
            // One row per user or token insert, update or delete, written in
            // the same transaction; every node polls it (`seq > last_seen`)
            // and reloads the named row. `IF NOT EXISTS`: MySQL commits DDL
            // statement by statement, and a re-run must step over it.
            "CREATE TABLE IF NOT EXISTS warrant_auth_changes (
            seq BIGINT NOT NULL PRIMARY KEY,
            entity {str:8} NOT NULL,
            entity_id BIGINT NOT NULL,
            created_at BIGINT NOT NULL
        ){table_opts}",
            "CREATE INDEX warrant_auth_changes_created ON warrant_auth_changes (created_at)",
            // The feed's counter, one row (`id = 1`). Each writer bumps it
            // first in its transaction: the row lock orders writers, so
            // change numbers commit in the order they were taken.
            "CREATE TABLE IF NOT EXISTS warrant_auth_seq (
            id BIGINT NOT NULL PRIMARY KEY,
            n BIGINT NOT NULL
        ){table_opts}",
            // Seeded once; written so that a MySQL re-run inserts nothing
            // (migration 1's row always exists by now, and gives the SELECT
            // a FROM that every dialect accepts).
            "INSERT INTO warrant_auth_seq (id, n) SELECT 1, 0 FROM warrant_schema_migrations \
             WHERE version = 1 AND NOT EXISTS (SELECT 1 FROM warrant_auth_seq WHERE id = 1)",
        ],
        postgres: None,
        sqlite: None,
    },
    Migration {
        version: 6,
        name: "retention by expiry and compact agent rows",
        statements: &[
            // An agent certificate's capabilities, as text: what an audit of
            // a day asks ("which agents held which capabilities") once the
            // row no longer keeps its DER (`agent_cert_der = drop`).
            "ALTER TABLE warrant_certs ADD COLUMN capabilities {text} NULL",
            // The pruner reads expired rows in not_after order, in batches.
            "CREATE INDEX warrant_certs_expiry ON warrant_certs (not_after)",
        ],
        // PostgreSQL: the table becomes range-partitioned on `expiry_bucket`
        // (the start, in Unix seconds, of the expiry window a short-lived
        // certificate falls in; 0 for long-lived ones), so retention drops
        // whole partitions instead of deleting rows. The key must include
        // the partition column; serials stay unique by construction (110
        // CSPRNG bits). Existing rows are copied into the long-lived
        // partition, which retention prunes with batched deletes.
        postgres: Some(&[
            "ALTER TABLE warrant_certs RENAME TO warrant_certs_before_v6",
            "ALTER INDEX warrant_certs_principal_active RENAME TO warrant_certs_before_v6_principal",
            "ALTER INDEX warrant_certs_created RENAME TO warrant_certs_before_v6_created",
            "CREATE TABLE warrant_certs (
            ca VARCHAR(64) NOT NULL,
            serial VARCHAR(40) NOT NULL,
            common_name TEXT NOT NULL,
            profile VARCHAR(32) NOT NULL,
            status VARCHAR(1) NOT NULL,
            not_before BIGINT NOT NULL,
            not_after BIGINT NOT NULL,
            der BYTEA NOT NULL,
            principal_uid VARCHAR(512) NULL,
            agent_id TEXT NULL,
            key_hash BYTEA NOT NULL,
            created_at BIGINT NOT NULL,
            revoked_at BIGINT NULL,
            revocation_reason VARCHAR(64) NULL,
            bound_user_id BIGINT NULL,
            capabilities TEXT NULL,
            expiry_bucket BIGINT NOT NULL DEFAULT 0,
            PRIMARY KEY (ca, serial, expiry_bucket)
        ) PARTITION BY RANGE (expiry_bucket)",
            "CREATE TABLE warrant_certs_long PARTITION OF warrant_certs FOR VALUES FROM (MINVALUE) TO (1)",
            "CREATE TABLE warrant_certs_default PARTITION OF warrant_certs DEFAULT",
            "INSERT INTO warrant_certs (ca, serial, common_name, profile, status, not_before, not_after, der, \
             principal_uid, agent_id, key_hash, created_at, revoked_at, revocation_reason, bound_user_id) \
             SELECT ca, serial, common_name, profile, status, not_before, not_after, der, \
             principal_uid, agent_id, key_hash, created_at, revoked_at, revocation_reason, bound_user_id \
             FROM warrant_certs_before_v6",
            "DROP TABLE warrant_certs_before_v6",
            "CREATE INDEX warrant_certs_principal_active ON warrant_certs (principal_uid, status, not_after, agent_id)",
            "CREATE INDEX warrant_certs_created ON warrant_certs (created_at)",
            "CREATE INDEX warrant_certs_expiry ON warrant_certs (not_after)",
        ]),
        sqlite: None,
    },
    Migration {
        version: 7,
        name: "hash-chained audit log, renewal lineage",
        statements: &[
            // One row per audited event (`audit.rs`): each chain has one
            // writer (a committer of one node), numbered by `seq`; `at` is
            // Unix milliseconds. Text columns are empty, not NULL, when they
            // do not apply: the row's hash covers them as written.
            // `IF NOT EXISTS`: MySQL commits DDL statement by statement.
            "CREATE TABLE IF NOT EXISTS warrant_audit (
            chain {str:64} NOT NULL,
            seq BIGINT NOT NULL,
            at BIGINT NOT NULL,
            event {str:32} NOT NULL,
            actor {str:255} NOT NULL,
            principal_uid {str:512} NOT NULL,
            agent_id {text} NOT NULL,
            ca {str:64} NOT NULL,
            serial {str:40} NOT NULL,
            detail {text} NOT NULL,
            prev_hash {bytes32} NOT NULL,
            hash {bytes32} NOT NULL,
            PRIMARY KEY (chain, seq)
        ){table_opts}",
            // The log is read newest first, by time or by principal; the
            // retention pass reads it oldest first.
            "CREATE INDEX warrant_audit_at ON warrant_audit (at)",
            "CREATE INDEX warrant_audit_principal ON warrant_audit (principal_uid, at)",
            // A renewed person certificate: when the first certificate of
            // its line was issued (NULL for every other certificate), so
            // renewals stay within `issuance.renewal_max_total_days`.
            "ALTER TABLE warrant_certs ADD COLUMN lineage_start BIGINT NULL",
        ],
        postgres: None,
        sqlite: None,
    },
    Migration {
        version: 8,
        name: "transparency log: trees, event leaves, stored nodes, certificate leaf positions",
        statements: &[
            // One row per Merkle tree (one per committer per process start,
            // `log.rs`): its size, its compact range (`frontier`, the roots
            // of the perfect subtrees covering [0, size)) and the latest
            // checkpoint signed for it. Updated in every commit that appends.
            "CREATE TABLE IF NOT EXISTS warrant_log_trees (
            id {id},
            name {str:64} NOT NULL UNIQUE,
            created_at BIGINT NOT NULL,
            size BIGINT NOT NULL,
            frontier {bytes} NOT NULL,
            checkpoint {text} NULL,
            checkpoint_size BIGINT NOT NULL DEFAULT 0,
            updated_at BIGINT NOT NULL
        ){table_opts}",
            // A leaf that is not a certificate (refusals, revocations,
            // logins, token and user changes, JWTs): its content is the
            // leaf. `at` is Unix milliseconds; empty text where a field does
            // not apply, as the leaf encodes it.
            "CREATE TABLE IF NOT EXISTS warrant_log_events (
            tree BIGINT NOT NULL,
            idx BIGINT NOT NULL,
            at BIGINT NOT NULL,
            event {str:32} NOT NULL,
            actor {str:255} NOT NULL,
            principal_uid {str:512} NOT NULL,
            agent_id {text} NOT NULL,
            ca {str:64} NOT NULL,
            serial {str:40} NOT NULL,
            detail {text} NOT NULL,
            PRIMARY KEY (tree, idx)
        ){table_opts}",
            "CREATE INDEX warrant_log_events_at ON warrant_log_events (at)",
            "CREATE INDEX warrant_log_events_principal ON warrant_log_events (principal_uid, at)",
            // Hashes of perfect subtrees: every complete one at or above the
            // tile level (written as they complete), and the largest ones
            // under it whose leaves retention removed.
            "CREATE TABLE IF NOT EXISTS warrant_log_nodes (
            tree BIGINT NOT NULL,
            lvl INT NOT NULL,
            idx BIGINT NOT NULL,
            hash {bytes32} NOT NULL,
            PRIMARY KEY (tree, lvl, idx)
        ){table_opts}",
            // A certificate row is its own leaf: these place it in its tree
            // (NULL for rows written before the log, or with it off), and
            // `issued_by` is the user who asked for it (NULL: a certificate
            // holder, or nobody recorded).
            "ALTER TABLE warrant_certs ADD COLUMN log_tree BIGINT NULL",
            "ALTER TABLE warrant_certs ADD COLUMN log_index BIGINT NULL",
            "ALTER TABLE warrant_certs ADD COLUMN issued_by BIGINT NULL",
            // Appended in order: no random inserts.
            "CREATE INDEX warrant_certs_log ON warrant_certs (log_tree, log_index)",
        ],
        postgres: None,
        sqlite: None,
    },
    Migration {
        version: 9,
        name: "SQLite nonce rows clustered by expiry minute",
        // PostgreSQL and MariaDB keep the nonce as the whole key: a check
        // across several keys would not be atomic between their nodes.
        statements: &[],
        postgres: None,
        // SQLite: the rows are keyed by (the start of their expiry minute,
        // nonce), so the pruner deletes whole minutes, contiguous pages,
        // instead of random keys spread over every page of a nonce index
        // (`sql::sqlite_nonces`). The expiry index goes: pruning and the
        // warm-up read seek by the key's first column.
        sqlite: Some(&[
            "CREATE TABLE warrant_da_nonces_by_expiry (
            expiry_bucket INTEGER NOT NULL,
            nonce BLOB NOT NULL,
            expires_at INTEGER NOT NULL,
            principal_uid TEXT NOT NULL,
            batch_id INTEGER NOT NULL,
            PRIMARY KEY (expiry_bucket, nonce)
        ) WITHOUT ROWID",
            // expiry_bucket = expires_at rounded down to a multiple of 60
            // (`sqlite_nonces::NONCE_BUCKET_SECS`), negative values included.
            "INSERT INTO warrant_da_nonces_by_expiry (expiry_bucket, nonce, expires_at, principal_uid, batch_id) \
             SELECT expires_at - ((expires_at % 60) + 60) % 60, nonce, expires_at, principal_uid, batch_id \
             FROM warrant_da_nonces",
            "DROP TABLE warrant_da_nonces",
            "ALTER TABLE warrant_da_nonces_by_expiry RENAME TO warrant_da_nonces",
        ]),
    },
];

pub(crate) fn latest_version() -> i64 {
    MIGRATIONS.last().map(|m| m.version).unwrap_or(0)
}

pub(crate) const MIGRATIONS_TABLE: &str = "warrant_schema_migrations";

pub(crate) fn create_migrations_table(kind: BackendKind) -> String {
    render(
        kind,
        "CREATE TABLE IF NOT EXISTS warrant_schema_migrations (
            version BIGINT NOT NULL PRIMARY KEY,
            name {str:255} NOT NULL,
            applied_at BIGINT NOT NULL
        ){table_opts}",
    )
}

/// Fills the type placeholders for one dialect.
pub(crate) fn render(kind: BackendKind, template: &str) -> String {
    let mut out = String::with_capacity(template.len() + 64);
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let Some(len) = rest[start..].find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let key = &rest[start + 1..start + len];
        out.push_str(&placeholder(kind, key));
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
    out
}

fn placeholder(kind: BackendKind, key: &str) -> String {
    use BackendKind::*;
    if let Some(n) = key.strip_prefix("str:") {
        return format!("VARCHAR({n})");
    }
    if let Some(table) = key.strip_prefix("on_table:") {
        // MySQL index names are per table; SQLite's and PostgreSQL's are per
        // schema, and their DROP INDEX takes no table.
        return match kind {
            MySql => format!(" ON {table}"),
            Sqlite | Postgres => String::new(),
        };
    }
    if let Some(col) = key.strip_prefix("text_key:") {
        // MySQL indexes a TEXT column only by a prefix. A prefix cannot
        // cover a query there, so a short one keeps the key small.
        return match kind {
            MySql => format!("{col}(16)"),
            Sqlite | Postgres => col.to_string(),
        };
    }
    match (key, kind) {
        ("id", Sqlite) => "INTEGER PRIMARY KEY AUTOINCREMENT".into(),
        ("id", Postgres) => "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY".into(),
        ("id", MySql) => "BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY".into(),
        ("bytes", Sqlite) => "BLOB".into(),
        ("bytes", Postgres) => "BYTEA".into(),
        ("bytes", MySql) => "LONGBLOB".into(),
        ("bytes32", Sqlite) => "BLOB".into(),
        ("bytes32", Postgres) => "BYTEA".into(),
        ("bytes32", MySql) => "VARBINARY(32)".into(),
        ("text", MySql) => "TEXT".into(),
        ("text", _) => "TEXT".into(),
        // Binary collation: comparisons are exact, as on SQLite and PostgreSQL.
        ("table_opts", MySql) => {
            " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin".into()
        }
        ("table_opts", _) => String::new(),
        (other, _) => format!("{{{other}}}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_placeholder_for_every_dialect() {
        for kind in [
            BackendKind::Sqlite,
            BackendKind::Postgres,
            BackendKind::MySql,
        ] {
            for m in MIGRATIONS {
                for s in m.statements_for(kind) {
                    let sql = render(kind, s);
                    assert!(
                        !sql.contains('{'),
                        "{kind:?}: unrendered placeholder in {sql}"
                    );
                }
            }
        }
    }

    #[test]
    fn drop_index_names_the_table_only_on_mysql() {
        let t = "DROP INDEX i{on_table:t}";
        assert_eq!(render(BackendKind::MySql, t), "DROP INDEX i ON t");
        assert_eq!(render(BackendKind::Sqlite, t), "DROP INDEX i");
        assert_eq!(render(BackendKind::Postgres, t), "DROP INDEX i");
    }

    #[test]
    fn versions_are_strictly_increasing() {
        let mut last = 0;
        for m in MIGRATIONS {
            assert!(m.version > last, "migration {} out of order", m.name);
            last = m.version;
        }
    }
}
