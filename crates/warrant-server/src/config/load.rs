//! Loading: defaults, then `warrant.toml`, then the environment, then the
//! `device_profile` for keys still at their default; each value remembers
//! its [`Source`].

use super::defaults::PROFILES;
use super::schema::Config;
use super::{CONFIG_FILE, ConfigError};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where an effective value came from (`--print-config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    /// Filled by `device_profile` (its name).
    Profile(String),
    File,
    Env(String),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::Profile(name) => write!(f, "profile:{name}"),
            Source::File => f.write_str(CONFIG_FILE),
            Source::Env(name) => write!(f, "env {name}"),
        }
    }
}

/// The validated configuration plus the source of each value.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub config: Config,
    pub sources: BTreeMap<String, Source>,
    pub data_dir: PathBuf,
}

/// Flattened values (`section.key`) and where each came from, as the
/// layers are applied.
struct Layers {
    merged: BTreeMap<String, toml::Value>,
    sources: BTreeMap<String, Source>,
}

impl LoadedConfig {
    /// Loads `<data_dir>/warrant.toml` (absent file = defaults) and applies the
    /// process environment.
    pub fn load(data_dir: &Path) -> Result<Self, ConfigError> {
        let path = data_dir.join(CONFIG_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(ConfigError::Read { path, source }),
        };
        let env: BTreeMap<String, String> = std::env::vars().collect();
        Self::from_parts(data_dir, text.as_deref(), &env)
    }

    /// Pure core of [`load`](Self::load), so precedence is unit-testable.
    pub fn from_parts(
        data_dir: &Path,
        file_text: Option<&str>,
        env: &BTreeMap<String, String>,
    ) -> Result<Self, ConfigError> {
        let defaults = flatten(&to_table(&Config::default())?);
        let mut layers = Layers {
            merged: defaults.clone(),
            sources: defaults
                .keys()
                .map(|k| (k.clone(), Source::Default))
                .collect(),
        };
        if let Some(text) = file_text {
            apply_file(&data_dir.join(CONFIG_FILE), text, &defaults, &mut layers)?;
        }
        apply_env(env, &defaults, &mut layers)?;
        let Layers {
            mut merged,
            mut sources,
        } = layers;
        let profile = match merged.get("device_profile") {
            Some(toml::Value::String(p)) => p.clone(),
            _ => {
                return Err(ConfigError::InvalidValue {
                    key: "device_profile".into(),
                    message: "must be a string".into(),
                });
            }
        };
        apply_profile(&profile, &mut merged, &mut sources)?;
        // The path of a value that does not fit its key names that key.
        let config: Config = serde_path_to_error::deserialize(unflatten(&merged)).map_err(
            |e: serde_path_to_error::Error<toml::de::Error>| ConfigError::InvalidValue {
                key: e.path().to_string(),
                message: e.inner().message().to_string(),
            },
        )?;
        config.validate()?;
        Ok(Self {
            config,
            sources,
            data_dir: data_dir.to_path_buf(),
        })
    }

    /// The database DSN with the data-dir default applied.
    pub fn database_url(&self) -> String {
        if self.config.database.url.is_empty() {
            format!("sqlite://{}", self.data_dir.join("warrant.db").display())
        } else {
            self.config.database.url.clone()
        }
    }
}

/// The file's values over the defaults; a key the defaults do not have is
/// unknown.
fn apply_file(
    path: &Path,
    text: &str,
    defaults: &BTreeMap<String, toml::Value>,
    layers: &mut Layers,
) -> Result<(), ConfigError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Syntax {
            path: path.to_path_buf(),
            message: e.message().to_string(),
        })?;
    for (key, value) in flatten(&table) {
        if !defaults.contains_key(&key) {
            return Err(ConfigError::UnknownKey { key });
        }
        layers.merged.insert(key.clone(), value);
        layers.sources.insert(key, Source::File);
    }
    Ok(())
}

/// `WARRANT_…` variables over the file (and `DATABASE_URL` over
/// `WARRANT_DATABASE_URL`), each parsed as its key's type.
fn apply_env(
    env: &BTreeMap<String, String>,
    defaults: &BTreeMap<String, toml::Value>,
    layers: &mut Layers,
) -> Result<(), ConfigError> {
    for (key, default_value) in defaults {
        let var = env_name(key);
        let raw = if key == "database.url" {
            // The conventional name wins over ours, as ca.md §5 says.
            env.get("DATABASE_URL")
                .map(|v| ("DATABASE_URL", v))
                .or_else(|| env.get(&var).map(|v| (var.as_str(), v)))
        } else {
            env.get(&var).map(|v| (var.as_str(), v))
        };
        if let Some((name, raw)) = raw {
            let value = parse_env_value(key, raw, default_value)?;
            layers.merged.insert(key.clone(), value);
            layers
                .sources
                .insert(key.clone(), Source::Env(name.to_string()));
        }
    }
    Ok(())
}

/// Fills the values of `profile` into every key whose source is still the
/// default. Pure: the precedence explicit > profile > default lives here.
pub fn apply_profile(
    profile: &str,
    merged: &mut BTreeMap<String, toml::Value>,
    sources: &mut BTreeMap<String, Source>,
) -> Result<(), ConfigError> {
    let values = PROFILES
        .iter()
        .find(|(name, _)| *name == profile)
        .map(|(_, values)| *values)
        .ok_or_else(|| ConfigError::InvalidValue {
            key: "device_profile".into(),
            message: format!(
                "unknown profile `{profile}`: expected \"\", low_mem or high_throughput"
            ),
        })?;
    for (key, value) in values {
        if sources.get(*key) == Some(&Source::Default) {
            merged.insert(key.to_string(), toml::Value::Integer(*value));
            sources.insert(key.to_string(), Source::Profile(profile.to_string()));
        }
    }
    Ok(())
}

/// `issuance.da_max_timestamp_skew` → `WARRANT_ISSUANCE_DA_MAX_TIMESTAMP_SKEW`.
pub fn env_name(key: &str) -> String {
    format!("WARRANT_{}", key.replace('.', "_").to_uppercase())
}

pub(super) fn to_table<T: Serialize>(value: &T) -> Result<toml::Table, ConfigError> {
    toml::Table::try_from(value).map_err(|e| ConfigError::InvalidValue {
        key: "config".into(),
        message: e.to_string(),
    })
}

pub(super) fn flatten(table: &toml::Table) -> BTreeMap<String, toml::Value> {
    fn walk(prefix: &str, table: &toml::Table, out: &mut BTreeMap<String, toml::Value>) {
        for (k, v) in table {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                toml::Value::Table(t) => walk(&key, t, out),
                other => {
                    out.insert(key, other.clone());
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk("", table, &mut out);
    out
}

fn unflatten(flat: &BTreeMap<String, toml::Value>) -> toml::Value {
    let mut root = toml::Table::new();
    for (key, value) in flat {
        let mut parts: Vec<&str> = key.split('.').collect();
        let last = parts.pop().unwrap_or_default();
        let mut table = &mut root;
        for part in parts {
            let entry = table
                .entry(part.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if !entry.is_table() {
                *entry = toml::Value::Table(toml::Table::new());
            }
            match entry {
                toml::Value::Table(t) => table = t,
                _ => unreachable!("entry was just made a table"),
            }
        }
        table.insert(last.to_string(), value.clone());
    }
    toml::Value::Table(root)
}

/// Env values are strings; they take the type of the key's default.
fn parse_env_value(
    key: &str,
    raw: &str,
    default: &toml::Value,
) -> Result<toml::Value, ConfigError> {
    let invalid = |what: &str| ConfigError::InvalidValue {
        key: key.into(),
        message: format!("env value `{raw}` is not {what}"),
    };
    Ok(match default {
        toml::Value::String(_) => toml::Value::String(raw.to_string()),
        toml::Value::Integer(_) => {
            toml::Value::Integer(raw.trim().parse().map_err(|_| invalid("an integer"))?)
        }
        toml::Value::Float(_) => {
            toml::Value::Float(raw.trim().parse().map_err(|_| invalid("a number"))?)
        }
        toml::Value::Boolean(_) => toml::Value::Boolean(match raw.trim() {
            "1" | "true" | "yes" | "on" => true,
            "0" | "false" | "no" | "off" => false,
            _ => return Err(invalid("a boolean")),
        }),
        _ => {
            let wrapped = format!("v = {raw}");
            let t: toml::Table = wrapped.parse().map_err(|_| invalid("a TOML value"))?;
            t.get("v").cloned().ok_or_else(|| invalid("a TOML value"))?
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::{env, invalid_key, load};

    #[test]
    fn defaults_validate() {
        let c = LoadedConfig::from_parts(Path::new("/d"), None, &env(&[])).unwrap();
        assert_eq!(c.config, Config::default());
        assert_eq!(c.sources["listen"], Source::Default);
        assert_eq!(c.database_url(), "sqlite:///d/warrant.db");
    }

    #[test]
    fn env_overrides_file_and_file_overrides_default() {
        let file = "listen = \"127.0.0.1:9000\"\n[issuance]\nda_max_timestamp_skew = 30\n";
        let c = LoadedConfig::from_parts(
            Path::new("/d"),
            Some(file),
            &env(&[("WARRANT_ISSUANCE_DA_MAX_TIMESTAMP_SKEW", "0")]),
        )
        .unwrap();
        assert_eq!(c.config.listen, "127.0.0.1:9000");
        assert_eq!(c.sources["listen"], Source::File);
        assert_eq!(c.config.issuance.da_max_timestamp_skew, 0);
        assert_eq!(
            c.sources["issuance.da_max_timestamp_skew"],
            Source::Env("WARRANT_ISSUANCE_DA_MAX_TIMESTAMP_SKEW".into())
        );
        assert!(c.render().contains(
            "issuance.da_max_timestamp_skew = 0  # env WARRANT_ISSUANCE_DA_MAX_TIMESTAMP_SKEW"
        ));
    }

    #[test]
    fn database_url_env_wins() {
        let c = LoadedConfig::from_parts(
            Path::new("/d"),
            Some("[database]\nurl = \"sqlite:///x.db\"\n"),
            &env(&[("DATABASE_URL", "postgres://u@h/db")]),
        )
        .unwrap();
        assert_eq!(c.database_url(), "postgres://u@h/db");
    }

    #[test]
    fn rejects_unknown_key_naming_it() {
        let err =
            LoadedConfig::from_parts(Path::new("/d"), Some("[issuance]\nbogus = 1\n"), &env(&[]))
                .unwrap_err();
        assert!(
            matches!(err, ConfigError::UnknownKey { ref key } if key == "issuance.bogus"),
            "{err}"
        );
    }

    #[test]
    fn rejects_non_integer_env_value() {
        let err = LoadedConfig::from_parts(
            Path::new("/d"),
            None,
            &env(&[("WARRANT_AUTH_LOCKOUT", "soon")]),
        )
        .unwrap_err();
        assert!(matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "auth.lockout"));
    }

    #[test]
    fn env_names_are_unique() {
        let defaults = flatten(&to_table(&Config::default()).unwrap());
        let names: std::collections::BTreeSet<String> =
            defaults.keys().map(|k| env_name(k)).collect();
        assert_eq!(names.len(), defaults.len());
    }

    #[test]
    fn no_profile_gives_store_defaults() {
        let c = load(None, &[]).unwrap();
        let store = warrant_store::StoreOptions::default();
        assert_eq!(c.config.record_buffer.max_pending, 20_000);
        assert_eq!(c.config.record_buffer.threshold, store.threshold as u64);
        assert_eq!(c.config.record_buffer.max_latency.0, store.max_latency);
        assert_eq!(c.config.engine.max_certs, store.max_certs as u64);
        assert_eq!(c.config.engine.grace.0, store.cert_grace);
        assert_eq!(c.config.durability, "durable");
        assert_eq!(c.sources["record_buffer.max_pending"], Source::Default);
    }

    #[test]
    fn low_mem_profile_gives_the_documented_values() {
        let c = load(Some("device_profile = \"low_mem\"\n"), &[]).unwrap();
        let (rb, en) = (&c.config.record_buffer, &c.config.engine);
        assert_eq!(rb.threshold, 200);
        assert_eq!(rb.max_pending, 5_000);
        assert_eq!(en.max_certs, 50_000);
        assert_eq!(en.max_da_nonces, 50_000);
        assert_eq!(en.max_nonces, 50_000);
        assert_eq!(en.write_max_pending, 5_000);
        let profile = Source::Profile("low_mem".into());
        for key in [
            "record_buffer.threshold",
            "record_buffer.max_pending",
            "engine.max_certs",
            "engine.max_da_nonces",
            "engine.max_nonces",
            "engine.write_max_pending",
        ] {
            assert_eq!(c.sources[key], profile, "{key}");
        }
        // Keys the profile does not name keep their defaults.
        assert_eq!(c.sources["record_buffer.max_latency"], Source::Default);
        assert_eq!(
            c.config.record_buffer.max_latency,
            Config::default().record_buffer.max_latency
        );
        assert!(
            c.render()
                .contains("record_buffer.threshold = 200  # profile:low_mem\n")
        );
    }

    #[test]
    fn high_throughput_profile_gives_the_documented_values() {
        let c = load(None, &[("WARRANT_DEVICE_PROFILE", "high_throughput")]).unwrap();
        assert_eq!(c.config.record_buffer.max_pending, 100_000);
        assert_eq!(c.config.engine.write_max_pending, 100_000);
        assert_eq!(
            c.sources["engine.write_max_pending"],
            Source::Profile("high_throughput".into())
        );
        let d = Config::default();
        assert_eq!(c.config.record_buffer.threshold, d.record_buffer.threshold);
        assert_eq!(c.config.engine.max_certs, d.engine.max_certs);
        assert_eq!(c.config.engine.max_da_nonces, d.engine.max_da_nonces);
    }

    #[test]
    fn explicit_file_value_wins_over_profile() {
        let file = "device_profile = \"low_mem\"\n[record_buffer]\nmax_pending = 7\n[engine]\nmax_certs = 9\n";
        let c = load(Some(file), &[]).unwrap();
        assert_eq!(c.config.record_buffer.max_pending, 7);
        assert_eq!(c.sources["record_buffer.max_pending"], Source::File);
        assert_eq!(c.config.engine.max_certs, 9);
        assert_eq!(c.config.record_buffer.threshold, 200);
    }

    #[test]
    fn explicit_env_value_wins_over_profile() {
        // The env names `warrant bench --server-process` passes to its child.
        let c = load(
            None,
            &[
                ("WARRANT_DEVICE_PROFILE", "low_mem"),
                ("WARRANT_RECORD_BUFFER_MAX_PENDING", "3"),
            ],
        )
        .unwrap();
        assert_eq!(c.config.record_buffer.max_pending, 3);
        assert_eq!(
            c.sources["record_buffer.max_pending"],
            Source::Env("WARRANT_RECORD_BUFFER_MAX_PENDING".into())
        );
        assert_eq!(c.config.engine.write_max_pending, 5_000);
        assert_eq!(
            c.sources["device_profile"],
            Source::Env("WARRANT_DEVICE_PROFILE".into())
        );
    }

    #[test]
    fn unknown_profile_is_an_error_naming_device_profile() {
        let err = load(Some("device_profile = \"tiny\"\n"), &[]).unwrap_err();
        assert!(err.to_string().contains("tiny"), "{err}");
        assert_eq!(invalid_key(err), "device_profile");
    }

    #[test]
    fn every_profile_names_only_known_integer_keys() {
        let defaults = flatten(&to_table(&Config::default()).unwrap());
        for (name, values) in PROFILES {
            for (key, _) in *values {
                assert!(
                    matches!(defaults.get(*key), Some(toml::Value::Integer(_))),
                    "profile {name}: {key}"
                );
            }
        }
    }
}
