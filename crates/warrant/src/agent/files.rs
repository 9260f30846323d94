//! The agent's files in `--dir`: every write is atomic (temp file, fsync,
//! rename, fsync of the directory), so a reader never sees half a file.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

pub const KEY: &str = "key.pem";
pub const CERT: &str = "cert.pem";
pub const CHAIN: &str = "chain.pem";
pub const STATE: &str = "state.json";

/// Writes `dir/name` atomically with `mode`.
pub fn write_atomic(dir: &Path, name: &str, data: &[u8], mode: u32) -> Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let target = dir.join(name);
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(data)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    drop(f);
    std::fs::rename(&tmp, &target).with_context(|| format!("renaming to {}", target.display()))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))?;
    Ok(())
}

/// `state.json`: what `warrant agent status` prints.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct State {
    /// The current certificate's serial and CA.
    pub serial: Option<String>,
    pub ca: Option<String>,
    /// RFC 3339.
    pub not_before: Option<String>,
    pub not_after: Option<String>,
    /// `scheme:id`.
    pub capabilities: Vec<String>,
    /// RFC 3339.
    pub last_renewal: Option<String>,
    /// When the next renewal is due, RFC 3339.
    pub next_renewal: Option<String>,
    /// The AIC-JWT's expiry, with `--jwt-out`.
    pub jwt_expires: Option<String>,
    /// The last failure, cleared by a success.
    pub last_error: Option<String>,
    /// RFC 3339.
    pub last_error_time: Option<String>,
}

impl State {
    pub fn load(dir: &Path) -> Result<Option<State>> {
        let path = dir.join(STATE);
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(
                serde_json::from_slice(&b)
                    .with_context(|| format!("parsing {}", path.display()))?,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    pub fn save(&self, dir: &Path) -> Result<()> {
        write_atomic(dir, STATE, &serde_json::to_vec_pretty(self)?, 0o644)
    }

    /// The lines `warrant agent status` prints.
    pub fn render(&self) -> String {
        let or_none = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        let caps = if self.capabilities.is_empty() {
            "-".to_string()
        } else {
            self.capabilities.join(", ")
        };
        let mut out = format!(
            "serial:        {}\nexpires:       {}\ncapabilities:  {caps}\nlast renewal:  {}\nnext renewal:  {}\n",
            or_none(&self.serial),
            or_none(&self.not_after),
            or_none(&self.last_renewal),
            or_none(&self.next_renewal),
        );
        if self.jwt_expires.is_some() {
            out.push_str(&format!("jwt expires:   {}\n", or_none(&self.jwt_expires)));
        }
        match (&self.last_error, &self.last_error_time) {
            (Some(e), Some(t)) => out.push_str(&format!("last error:    {t} {e}\n")),
            (Some(e), None) => out.push_str(&format!("last error:    {e}\n")),
            _ => out.push_str("last error:    -\n"),
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn writes_atomically_with_the_mode() {
        let dir = tempfile::tempdir().unwrap();
        write_atomic(dir.path(), "key.pem", b"one", 0o600).unwrap();
        write_atomic(dir.path(), "key.pem", b"two", 0o600).unwrap();
        let p = dir.path().join("key.pem");
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(!dir.path().join(".key.pem.tmp").exists());
    }

    #[test]
    fn state_round_trips_and_renders() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(State::load(dir.path()).unwrap(), None);
        let s = State {
            not_after: Some("2026-01-01T00:00:00Z".into()),
            capabilities: vec!["db:read".into()],
            last_error: Some("boom".into()),
            ..State::default()
        };
        s.save(dir.path()).unwrap();
        let back = State::load(dir.path()).unwrap().unwrap();
        assert_eq!(back, s);
        let text = back.render();
        assert!(
            text.contains("expires:       2026-01-01T00:00:00Z"),
            "{text}"
        );
        assert!(text.contains("db:read") && text.contains("boom"), "{text}");
    }
}
