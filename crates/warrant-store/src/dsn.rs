//! DSN parsing: which backend a connection string names.
//!
//! Public so that tools reading the same database (the benchmark's row
//! count) resolve a DSN exactly as [`Store::open`](crate::Store::open) does.

use crate::error::StoreError;
use crate::types::BackendKind;

/// A DSN resolved to its backend; `url` is what the driver receives
/// (`mariadb://` becomes `mysql://`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dsn {
    /// A SQLite database file. `url` is set when the DSN was a `sqlite:` URL
    /// (which may carry driver parameters); otherwise `path` is a plain path.
    Sqlite {
        path: String,
        url: Option<String>,
    },
    Postgres {
        url: String,
    },
    MySql {
        url: String,
    },
}

impl Dsn {
    /// The backend this DSN names.
    pub fn kind(&self) -> BackendKind {
        match self {
            Dsn::Sqlite { .. } => BackendKind::Sqlite,
            Dsn::Postgres { .. } => BackendKind::Postgres,
            Dsn::MySql { .. } => BackendKind::MySql,
        }
    }
}

/// `postgres://` / `postgresql://`, `mysql://` / `mariadb://`, `sqlite://path`
/// / `sqlite:path`, or a plain file path. In-memory SQLite is refused: the
/// store keeps separate reader and writer connections, which would each see
/// their own empty database.
///
/// Fails with [`StoreError::InvalidDsn`] for anything else.
pub fn parse_dsn(dsn: &str) -> Result<Dsn, StoreError> {
    let dsn = dsn.trim();
    if dsn.is_empty() {
        return Err(StoreError::InvalidDsn("empty DSN".into()));
    }
    if dsn.starts_with("postgres://") || dsn.starts_with("postgresql://") {
        return Ok(Dsn::Postgres {
            url: dsn.to_string(),
        });
    }
    if dsn.starts_with("mysql://") {
        return Ok(Dsn::MySql {
            url: dsn.to_string(),
        });
    }
    if let Some(rest) = dsn.strip_prefix("mariadb://") {
        return Ok(Dsn::MySql {
            url: format!("mysql://{rest}"),
        });
    }
    let (path, url) = if let Some(rest) = dsn.strip_prefix("sqlite://") {
        (rest, Some(dsn.to_string()))
    } else if let Some(rest) = dsn.strip_prefix("sqlite:") {
        (rest, Some(dsn.to_string()))
    } else if dsn.contains("://") {
        let scheme = dsn.split("://").next().unwrap_or_default();
        return Err(StoreError::InvalidDsn(format!(
            "unsupported scheme {scheme:?} (expected postgres, mysql, mariadb or sqlite)"
        )));
    } else {
        (dsn, None)
    };
    let file = path.split('?').next().unwrap_or_default();
    if file.is_empty() || file == ":memory:" || path.contains("mode=memory") {
        return Err(StoreError::InvalidDsn(
            "SQLite needs a database file path (in-memory databases are not supported)".into(),
        ));
    }
    Ok(Dsn::Sqlite {
        path: file.to_string(),
        url,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_every_supported_scheme() {
        assert_eq!(
            parse_dsn("postgres://u@h/db").unwrap(),
            Dsn::Postgres {
                url: "postgres://u@h/db".into()
            }
        );
        assert_eq!(
            parse_dsn("postgresql://h/db").unwrap().kind(),
            BackendKind::Postgres
        );
        assert_eq!(
            parse_dsn("mariadb://root@h:3306/x").unwrap(),
            Dsn::MySql {
                url: "mysql://root@h:3306/x".into()
            }
        );
        assert_eq!(parse_dsn("mysql://h/x").unwrap().kind(), BackendKind::MySql);
        assert_eq!(
            parse_dsn("/var/lib/warrant/warrant.db").unwrap(),
            Dsn::Sqlite {
                path: "/var/lib/warrant/warrant.db".into(),
                url: None
            }
        );
        assert_eq!(
            parse_dsn("sqlite:///tmp/w.db").unwrap(),
            Dsn::Sqlite {
                path: "/tmp/w.db".into(),
                url: Some("sqlite:///tmp/w.db".into())
            }
        );
        assert_eq!(
            parse_dsn("sqlite:data/w.db?mode=rwc").unwrap(),
            Dsn::Sqlite {
                path: "data/w.db".into(),
                url: Some("sqlite:data/w.db?mode=rwc".into())
            }
        );
    }

    #[test]
    fn rejects_unknown_scheme_and_in_memory_sqlite() {
        assert!(
            matches!(parse_dsn("redis://h"), Err(StoreError::InvalidDsn(m)) if m.contains("redis"))
        );
        assert!(parse_dsn("").is_err());
        assert!(parse_dsn("sqlite::memory:").is_err());
        assert!(parse_dsn("sqlite://").is_err());
    }
}
