//! The bench database on a PostgreSQL or MariaDB/MySQL server: created when
//! `-db` names one that does not exist yet (if the user may), recreated before
//! each suite test (`MYSQL_ADMIN`). What to run and how to quote it is decided
//! by plain functions; the connections are at the end of the file. The DSN is
//! read by the store's own parser (`warrant_store::parse_dsn`).

use anyhow::{Context, Result, anyhow, bail};
use sqlx::Connection;
use std::path::PathBuf;
use url::Url;
use warrant_store::{Dsn, parse_dsn};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    MySql,
    Postgres,
}

/// A database on a server, as a `-db` URL names it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerDb {
    pub engine: Engine,
    /// The URL as given (a `mariadb://` one spelled `mysql://`).
    pub url: String,
    pub database: String,
    pub user: String,
    password: String,
}

/// Where a DSN's database lives: a SQLite file, or a database on a server.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    Sqlite(PathBuf),
    Server(ServerDb),
}

fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// Reads a DSN through the store's parser.
pub fn target(dsn: &str) -> Result<Target> {
    match parse_dsn(dsn).map_err(|e| anyhow!("db: {e}"))? {
        Dsn::Sqlite { path, .. } => Ok(Target::Sqlite(PathBuf::from(path))),
        Dsn::MySql { url } => server_db(Engine::MySql, &url).map(Target::Server),
        Dsn::Postgres { url } => server_db(Engine::Postgres, &url).map(Target::Server),
    }
}

fn server_db(engine: Engine, url: &str) -> Result<ServerDb> {
    let u = Url::parse(url).map_err(|e| anyhow!("db: not a URL: {e}"))?;
    let database = decode(u.path().trim_start_matches('/'));
    if database.is_empty() {
        bail!("db: the URL names no database (…/DBNAME)");
    }
    Ok(ServerDb {
        engine,
        url: url.to_string(),
        database,
        user: decode(u.username()),
        password: u.password().map(decode).unwrap_or_default(),
    })
}

/// A URL of the same server without the database (MySQL) or on the
/// `postgres` maintenance database, to create or drop the bench database.
pub fn server_url(engine: Engine, url: &str) -> Result<String> {
    let mut u = Url::parse(url).map_err(|e| anyhow!("not a URL: {e}"))?;
    match engine {
        Engine::MySql => u.set_path(""),
        Engine::Postgres => u.set_path("/postgres"),
    }
    Ok(u.to_string())
}

/// MySQL identifier: backquoted, a backquote doubled.
pub fn mysql_ident(s: &str) -> String {
    format!("`{}`", s.replace('`', "``"))
}

/// PostgreSQL identifier: double-quoted, a double quote doubled.
pub fn pg_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// A string literal both servers read alike: quotes doubled and (for MySQL,
/// which treats it as an escape) backslashes doubled.
pub fn sql_string(engine: Engine, s: &str) -> String {
    let s = s.replace('\'', "''");
    match engine {
        Engine::MySql => format!("'{}'", s.replace('\\', "\\\\")),
        Engine::Postgres => format!("'{s}'"),
    }
}

impl ServerDb {
    fn ident(&self) -> String {
        match self.engine {
            Engine::MySql => mysql_ident(&self.database),
            Engine::Postgres => pg_ident(&self.database),
        }
    }

    /// MySQL's account name `'user'@'%'`.
    fn mysql_account(&self) -> String {
        format!("{}@'%'", sql_string(Engine::MySql, &self.user))
    }

    pub fn create_sql(&self) -> String {
        format!("CREATE DATABASE {}", self.ident())
    }

    pub fn drop_sql(&self) -> String {
        match self.engine {
            Engine::MySql => format!("DROP DATABASE IF EXISTS {}", self.ident()),
            // Sessions a killed run left open must not keep it alive.
            Engine::Postgres => format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.ident()),
        }
    }

    /// What an administrator runs so that this URL works: the database, the
    /// user (the password is left for the admin to fill in: it is not
    /// echoed), its rights.
    pub fn admin_sql(&self) -> String {
        let pw = "'<password from -db>'";
        match self.engine {
            Engine::MySql => format!(
                "CREATE DATABASE {db}; CREATE USER {acct} IDENTIFIED BY {pw}; \
                 GRANT ALL PRIVILEGES ON {db}.* TO {acct};",
                db = self.ident(),
                acct = self.mysql_account(),
            ),
            Engine::Postgres => format!(
                "CREATE USER {u} WITH PASSWORD {pw}; CREATE DATABASE {db} OWNER {u};",
                u = pg_ident(&self.user),
                db = self.ident(),
            ),
        }
    }

    /// Statements that give this URL's user the database, run by an admin
    /// after [`Self::create_sql`] (the user is created if missing).
    pub fn grant_sql(&self) -> Vec<String> {
        match self.engine {
            Engine::MySql => vec![
                format!(
                    "CREATE USER IF NOT EXISTS {} IDENTIFIED BY {}",
                    self.mysql_account(),
                    sql_string(Engine::MySql, &self.password)
                ),
                format!(
                    "GRANT ALL PRIVILEGES ON {}.* TO {}",
                    self.ident(),
                    self.mysql_account()
                ),
            ],
            Engine::Postgres => vec![
                format!(
                    "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = {name}) \
                 THEN CREATE ROLE {u} LOGIN PASSWORD {pw}; END IF; END $$",
                    name = sql_string(Engine::Postgres, &self.user),
                    u = pg_ident(&self.user),
                    pw = sql_string(Engine::Postgres, &self.password),
                ),
                format!(
                    "ALTER DATABASE {} OWNER TO {}",
                    self.ident(),
                    pg_ident(&self.user)
                ),
            ],
        }
    }
}

/// Whether a failed connection says the database is missing, or (MySQL, which
/// does not tell a user whether a database it may not see exists) that the
/// user has no rights on it.
pub fn missing_database(engine: Engine, mysql_number: Option<u16>, sqlstate: Option<&str>) -> bool {
    match engine {
        // ER_BAD_DB_ERROR, ER_DBACCESS_DENIED_ERROR
        Engine::MySql => matches!(mysql_number, Some(1049 | 1044)),
        Engine::Postgres => sqlstate == Some("3D000"),
    }
}

// ---- connections ----------------------------------------------------------

fn rt() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a runtime for the database setup")
}

fn error_codes(e: &sqlx::Error) -> (Option<u16>, Option<String>) {
    match e {
        sqlx::Error::Database(d) => (
            d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .map(|m| m.number()),
            d.code().map(|c| c.into_owned()),
        ),
        _ => (None, None),
    }
}

/// Runs `statements` in order on one connection to `url`.
async fn run_sql(engine: Engine, url: &str, statements: &[String]) -> Result<(), sqlx::Error> {
    match engine {
        Engine::MySql => {
            let mut c = sqlx::MySqlConnection::connect(url).await?;
            for s in statements {
                sqlx::raw_sql(s).execute(&mut c).await?;
            }
            c.close().await
        }
        Engine::Postgres => {
            let mut c = sqlx::PgConnection::connect(url).await?;
            for s in statements {
                sqlx::raw_sql(s).execute(&mut c).await?;
            }
            c.close().await
        }
    }
}

/// `-db`: makes sure the database exists. A missing one is created with the
/// URL's own user if it may; otherwise the error names the database and the
/// SQL an administrator must run. SQLite files are created by the store.
pub fn ensure_database(dsn: &str) -> Result<()> {
    let Target::Server(db) = target(dsn)? else {
        return Ok(());
    };
    let rt = rt()?;
    let first = match rt.block_on(run_sql(db.engine, &db.url, &[])) {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    let (number, state) = error_codes(&first);
    if !missing_database(db.engine, number, state.as_deref()) {
        return Err(anyhow!(
            "db: connecting to database {:?}: {first}",
            db.database
        ));
    }
    let server = server_url(db.engine, &db.url)?;
    rt.block_on(run_sql(db.engine, &server, &[db.create_sql()]))
        .map_err(|e| {
            anyhow!(
                "db: database {:?} does not exist (or user {:?} has no rights on it: {first}), \
                 and user {:?} cannot create it ({e}). An administrator must run:\n  {}",
                db.database,
                db.user,
                db.user,
                db.admin_sql()
            )
        })?;
    eprintln!("db: created database {:?}", db.database);
    Ok(())
}

/// The suite's fresh database before each test: a SQLite file removed (with
/// its WAL), or the server database dropped and created again through
/// `admin` (an admin URL; default: the DSN's own user), the DSN's user
/// created and granted it when an admin URL is given.
pub fn recreate_database(dsn: &str, admin: Option<&str>) -> Result<()> {
    let db = match target(dsn)? {
        Target::Sqlite(path) => {
            for suffix in ["", "-wal", "-shm"] {
                let mut name = path.clone().into_os_string();
                name.push(suffix);
                let p = PathBuf::from(name);
                match std::fs::remove_file(&p) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(e).with_context(|| format!("removing {}", p.display()));
                    }
                }
            }
            return Ok(());
        }
        Target::Server(db) => db,
    };
    let admin_server = match admin {
        Some(a) => {
            let engine = match parse_dsn(a).map_err(|e| anyhow!("MYSQL_ADMIN: {e}"))? {
                Dsn::MySql { url } => (Engine::MySql, url),
                Dsn::Postgres { url } => (Engine::Postgres, url),
                Dsn::Sqlite { .. } => bail!("MYSQL_ADMIN: must be a server URL, not SQLite"),
            };
            if engine.0 != db.engine {
                bail!("MYSQL_ADMIN: not the same kind of server as the bench database");
            }
            server_url(engine.0, &engine.1).context("MYSQL_ADMIN")?
        }
        None => server_url(db.engine, &db.url)?,
    };
    let mut statements = vec![db.drop_sql(), db.create_sql()];
    if admin.is_some() {
        statements.extend(db.grant_sql());
    }
    rt()?
        .block_on(run_sql(db.engine, &admin_server, &statements))
        .map_err(|e| {
            anyhow!(
                "recreating database {:?}{}: {e}",
                db.database,
                if admin.is_some() {
                    " through MYSQL_ADMIN"
                } else {
                    " (no MYSQL_ADMIN: with the bench URL's own user)"
                }
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(dsn: &str) -> ServerDb {
        match target(dsn).unwrap() {
            Target::Server(s) => s,
            t => panic!("{t:?}"),
        }
    }

    #[test]
    fn a_url_names_its_database_and_user() {
        let s = server("mysql://bench:bench@127.0.0.1:3306/bench_mysql");
        assert_eq!(
            (s.engine, s.database.as_str(), s.user.as_str()),
            (Engine::MySql, "bench_mysql", "bench")
        );
        let s = server("mariadb://b%40x:p@h/my%20db?ssl-mode=disabled");
        assert_eq!((s.database.as_str(), s.user.as_str()), ("my db", "b@x"));
        assert_eq!(server("postgres://u@h/pg").engine, Engine::Postgres);
        assert_eq!(
            target("/tmp/b.db").unwrap(),
            Target::Sqlite(PathBuf::from("/tmp/b.db"))
        );
        let e = target("mysql://u@h:3306").unwrap_err().to_string();
        assert!(e.contains("names no database"), "{e}");
    }

    #[test]
    fn the_server_url_drops_or_replaces_the_database() {
        assert_eq!(
            server_url(
                Engine::MySql,
                "mysql://bench:bench@127.0.0.1:3306/bench_mysql"
            )
            .unwrap(),
            "mysql://bench:bench@127.0.0.1:3306"
        );
        assert_eq!(
            server_url(Engine::Postgres, "postgres://u:p@h:5432/b?sslmode=disable").unwrap(),
            "postgres://u:p@h:5432/postgres?sslmode=disable"
        );
    }

    #[test]
    fn identifiers_and_strings_are_quoted() {
        assert_eq!(mysql_ident("a`b"), "`a``b`");
        assert_eq!(pg_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(sql_string(Engine::MySql, r"it's\"), r"'it''s\\'");
        assert_eq!(sql_string(Engine::Postgres, r"it's\"), r"'it''s\'");
    }

    #[test]
    fn the_admin_sql_names_database_user_and_grant() {
        let s = server("mysql://bench:secret@127.0.0.1:3306/bench_mysql");
        let sql = s.admin_sql();
        assert_eq!(
            sql,
            "CREATE DATABASE `bench_mysql`; CREATE USER 'bench'@'%' IDENTIFIED BY \
             '<password from -db>'; GRANT ALL PRIVILEGES ON `bench_mysql`.* TO 'bench'@'%';"
        );
        assert!(!sql.contains("secret"));
        assert_eq!(s.create_sql(), "CREATE DATABASE `bench_mysql`");
        assert_eq!(s.drop_sql(), "DROP DATABASE IF EXISTS `bench_mysql`");
        assert_eq!(
            s.grant_sql()[0],
            "CREATE USER IF NOT EXISTS 'bench'@'%' IDENTIFIED BY 'secret'"
        );
        let p = server("postgres://bench:x@h/bench_pg");
        assert_eq!(
            p.admin_sql(),
            "CREATE USER \"bench\" WITH PASSWORD '<password from -db>'; \
             CREATE DATABASE \"bench_pg\" OWNER \"bench\";"
        );
        assert!(p.drop_sql().ends_with("WITH (FORCE)"));
    }

    #[test]
    fn a_sqlite_bench_database_is_recreated_by_removing_its_files() {
        let dir =
            std::env::temp_dir().join(format!("warrant-bench-recreate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("b.db");
        for name in ["b.db", "b.db-wal", "b.db-shm", "other.db"] {
            std::fs::write(dir.join(name), b"x").unwrap();
        }
        recreate_database(&db.display().to_string(), None).unwrap();
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, ["other.db"]);
        // Nothing to remove is fine too.
        recreate_database(&db.display().to_string(), None).unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn missing_or_unreadable_databases_are_told_from_other_errors() {
        assert!(missing_database(Engine::MySql, Some(1049), Some("42000")));
        assert!(missing_database(Engine::MySql, Some(1044), Some("42000")));
        // Wrong password: creating would not help.
        assert!(!missing_database(Engine::MySql, Some(1045), Some("28000")));
        assert!(missing_database(Engine::Postgres, None, Some("3D000")));
        assert!(!missing_database(Engine::Postgres, None, Some("28P01")));
    }
}
