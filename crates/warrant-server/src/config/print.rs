//! What configuration looks like as text: `--print-config` (every value
//! with its source), the starter file `warrant init` writes, and the
//! redaction of secrets in both.

use super::load::{LoadedConfig, Source, flatten, to_table};
use super::schema::Config;

impl LoadedConfig {
    /// `key = value  # source` lines, one per key, sorted, with secrets
    /// redacted ([`redact_value`]): the output is meant to be pasted into
    /// tickets and logs.
    pub fn render(&self) -> String {
        let flat = match to_table(&self.config) {
            Ok(t) => flatten(&t),
            Err(e) => return format!("# {e}\n"),
        };
        let mut out = String::new();
        for (key, value) in flat {
            let source = self.sources.get(&key).cloned().unwrap_or(Source::Default);
            let value = redact_value(&key, value);
            out.push_str(&format!("{key} = {value}  # {source}\n"));
        }
        out
    }

    /// [`database_url`](Self::database_url) with its password redacted, for
    /// logs and messages.
    pub fn database_url_redacted(&self) -> String {
        redact_dsn(&self.database_url())
    }
}

impl Config {
    /// The TOML written by `warrant init`: every key with its default, so an
    /// operator sees what can be changed.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    /// The file `warrant init` writes: every key with its default, commented
    /// out. Written as live values, every key would count as set in the file,
    /// and a `device_profile` chosen later could fill none of them.
    pub fn starter_toml() -> String {
        let mut out = String::from(
            "# Warrant configuration. Every key is listed with its default, commented out:\n\
             # uncomment a line to set it. `warrant serve --print-config` shows each\n\
             # effective value and where it came from (default, device_profile, this\n\
             # file or a WARRANT_... environment variable).\n\n",
        );
        for line in Config::default().to_toml().lines() {
            if !line.is_empty() && !line.starts_with('[') {
                out.push_str("# ");
            }
            out.push_str(line);
            out.push('\n');
        }
        out
    }
}

/// What replaces a secret in printed configuration.
pub const REDACTED: &str = "***";

/// A config value as it may be printed: `database.url` with its password
/// redacted ([`redact_dsn`]); any non-empty key named `…password`,
/// `…secret` or `…passphrase` replaced whole. (`keys.passphrase_env` and
/// `keys.passphrase_file` name where the passphrase is, not the passphrase,
/// and are printed.)
pub fn redact_value(key: &str, value: toml::Value) -> toml::Value {
    let last = key.rsplit('.').next().unwrap_or(key);
    match value {
        toml::Value::String(s) if key == "database.url" => toml::Value::String(redact_dsn(&s)),
        toml::Value::String(s)
            if !s.is_empty()
                && ["password", "secret", "passphrase"]
                    .iter()
                    .any(|w| last.ends_with(w)) =>
        {
            toml::Value::String(REDACTED.into())
        }
        other => other,
    }
}

/// Query parameters of a DSN that carry a secret (compared case-insensitively).
const SECRET_DSN_PARAMS: &[&str] = &["password", "pass", "pwd", "sslpassword"];

/// A DSN with its secrets replaced by [`REDACTED`]: the password of the
/// userinfo (`postgres://user:***@host/db`) and secret query parameters
/// (`?password=***`). A SQLite path has none and is returned as it is.
pub fn redact_dsn(dsn: &str) -> String {
    let Some(scheme_end) = dsn.find("://").map(|i| i + 3) else {
        return dsn.to_string();
    };
    let (head, rest) = dsn.split_at(scheme_end);
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let mut out = String::with_capacity(dsn.len());
    out.push_str(head);
    // The host follows the *last* `@`: a password may itself contain `@`.
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            match userinfo.split_once(':') {
                Some((user, _password)) => {
                    out.push_str(user);
                    out.push(':');
                    out.push_str(REDACTED);
                }
                None => out.push_str(userinfo),
            }
            out.push('@');
            out.push_str(host);
        }
        None => out.push_str(authority),
    }
    let (path, query) = match tail.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (tail, None),
    };
    out.push_str(path);
    if let Some(query) = query {
        let (query, fragment) = match query.split_once('#') {
            Some((q, f)) => (q, Some(f)),
            None => (query, None),
        };
        out.push('?');
        for (i, pair) in query.split('&').enumerate() {
            if i > 0 {
                out.push('&');
            }
            match pair.split_once('=') {
                Some((name, _))
                    if SECRET_DSN_PARAMS
                        .iter()
                        .any(|p| p.eq_ignore_ascii_case(name)) =>
                {
                    out.push_str(name);
                    out.push('=');
                    out.push_str(REDACTED);
                }
                _ => out.push_str(pair),
            }
        }
        if let Some(f) = fragment {
            out.push('#');
            out.push_str(f);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::{env, load};
    use std::path::Path;

    #[test]
    fn render_names_every_key_with_its_source() {
        let c = load(
            Some("device_profile = \"high_throughput\"\n[rate_limit]\nenabled = true\n"),
            &[("WARRANT_ENGINE_MAX_CERTS", "1234")],
        )
        .unwrap();
        let text = c.render();
        let defaults = flatten(&to_table(&Config::default()).unwrap());
        assert_eq!(text.lines().count(), defaults.len(), "{text}");
        for line in [
            "device_profile = \"high_throughput\"  # warrant.toml",
            "rate_limit.enabled = true  # warrant.toml",
            "engine.max_certs = 1234  # env WARRANT_ENGINE_MAX_CERTS",
            "record_buffer.max_pending = 100000  # profile:high_throughput",
            "record_buffer.threshold = 1000  # default",
            "durability = \"durable\"  # default",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn starter_file_sets_nothing_so_a_profile_chosen_later_applies() {
        let text = Config::starter_toml();
        let c = LoadedConfig::from_parts(Path::new("/d"), Some(&text), &env(&[])).unwrap();
        assert_eq!(c.config, Config::default());
        assert!(c.sources.values().all(|s| *s == Source::Default));

        let chosen = text.replace("# device_profile = \"\"", "device_profile = \"low_mem\"");
        assert_ne!(chosen, text, "the starter file lists device_profile");
        let c = LoadedConfig::from_parts(Path::new("/d"), Some(&chosen), &env(&[])).unwrap();
        assert_eq!(c.config.record_buffer.max_pending, 5_000);
        assert_eq!(c.config.engine.max_certs, 50_000);
        assert_eq!(
            c.sources.get("record_buffer.max_pending"),
            Some(&Source::Profile("low_mem".into()))
        );
    }

    #[test]
    fn dsn_secrets_are_redacted() {
        for (dsn, shown) in [
            (
                "postgres://warrant:hunter2@db.example:5432/ca",
                "postgres://warrant:***@db.example:5432/ca",
            ),
            (
                "mysql://root:p@ss:w@rd@127.0.0.1/test?ssl-mode=required",
                "mysql://root:***@127.0.0.1/test?ssl-mode=required",
            ),
            (
                "postgresql://u@h/db?sslmode=require&password=s3cret&application_name=w",
                "postgresql://u@h/db?sslmode=require&password=***&application_name=w",
            ),
            (
                "mariadb://admin:x@h?PWD=y#frag",
                "mariadb://admin:***@h?PWD=***#frag",
            ),
            ("postgres://h/db", "postgres://h/db"),
            (
                "sqlite:///var/lib/warrant/warrant.db",
                "sqlite:///var/lib/warrant/warrant.db",
            ),
            ("/var/lib/warrant/warrant.db", "/var/lib/warrant/warrant.db"),
        ] {
            assert_eq!(redact_dsn(dsn), shown, "{dsn}");
        }
    }

    #[test]
    fn print_config_redacts_the_database_password() {
        let file = "[database]\nurl = \"postgres://w:file-secret@h/db\"\n";
        let c = load(Some(file), &[]).unwrap();
        let text = c.render();
        assert!(!text.contains("file-secret"), "{text}");
        assert!(
            text.lines()
                .any(|l| l == "database.url = \"postgres://w:***@h/db\"  # warrant.toml"),
            "{text}"
        );
        let c = load(None, &[("DATABASE_URL", "mysql://root:env-secret@h/db")]).unwrap();
        assert!(!c.render().contains("env-secret"));
        assert_eq!(c.database_url_redacted(), "mysql://root:***@h/db");
        // The server still gets the real DSN.
        assert_eq!(c.database_url(), "mysql://root:env-secret@h/db");
    }

    #[test]
    fn secret_named_keys_are_redacted_whole() {
        let v = |s: &str| toml::Value::String(s.into());
        assert_eq!(redact_value("x.admin_password", v("p")), v(REDACTED));
        assert_eq!(redact_value("x.token_secret", v("p")), v(REDACTED));
        assert_eq!(redact_value("x.admin_password", v("")), v(""));
        assert_eq!(
            redact_value("keys.passphrase_env", v("WARRANT_PASS")),
            v("WARRANT_PASS")
        );
    }

    #[test]
    fn init_toml_round_trips() {
        let text = Config::default().to_toml();
        let c = LoadedConfig::from_parts(Path::new("/d"), Some(&text), &env(&[])).unwrap();
        assert_eq!(c.config, Config::default());
    }
}
