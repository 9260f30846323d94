//! The signer's append-only DA log (JSON Lines, one fsync per entry). Read
//! back at start, it is also the signer's memory: each grant window's start
//! and each agent's DAs of the last hour, so a restart resets neither.

use super::grants::{History, Mode};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

/// One signed DA.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Entry {
    /// RFC 3339, UTC.
    pub time: String,
    pub unix: i64,
    pub agent_id: String,
    /// Hex.
    pub nonce: String,
    /// `scheme:id`.
    pub capabilities: Vec<String>,
    pub mode: Mode,
    /// Seconds.
    pub lifetime: i64,
    /// Hex SHA-256 of the agent's SubjectPublicKeyInfo DER.
    pub agent_key_sha256: String,
    /// The grant entry's fingerprint (see `grants::AgentGrant`).
    pub grant: String,
    /// `certificate` or `jwt`: what the DA was for.
    pub kind: String,
}

/// The open log and what it remembers.
pub struct DaLog {
    file: File,
    /// (agent id, grant fingerprint) → first DA's time.
    window_starts: HashMap<(String, String), i64>,
    /// Agent id → times of its DAs (pruned to the last hour on append).
    recent: HashMap<String, Vec<i64>>,
}

impl DaLog {
    /// Opens (creating) the log and replays it. A torn last line (a crash
    /// mid-append) is skipped; any other unreadable line is an error.
    pub fn open(path: &Path) -> std::io::Result<DaLog> {
        let mut log = DaLog {
            file: OpenOptions::new().create(true).append(true).open(path)?,
            window_starts: HashMap::new(),
            recent: HashMap::new(),
        };
        let lines: Vec<String> = BufReader::new(File::open(path)?)
            .lines()
            .collect::<Result<_, _>>()?;
        let last = lines.len().saturating_sub(1);
        for (i, line) in lines.iter().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Entry>(line) {
                Ok(e) => log.remember(&e),
                Err(_) if i == last => {}
                Err(e) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{} line {}: {e}", path.display(), i + 1),
                    ));
                }
            }
        }
        Ok(log)
    }

    fn remember(&mut self, e: &Entry) {
        self.window_starts
            .entry((e.agent_id.clone(), e.grant.clone()))
            .and_modify(|t| *t = (*t).min(e.unix))
            .or_insert(e.unix);
        let recent = self.recent.entry(e.agent_id.clone()).or_default();
        recent.push(e.unix);
        recent.retain(|&t| t > e.unix - 3600);
    }

    /// What was signed for `agent` under grant entry `grant`.
    pub fn history(&self, agent: &str, grant: &str) -> History {
        History {
            window_start: self
                .window_starts
                .get(&(agent.to_string(), grant.to_string()))
                .copied(),
            recent: self.recent.get(agent).cloned().unwrap_or_default(),
        }
    }

    /// Appends and fsyncs one entry; only then is the DA handed out.
    pub fn append(&mut self, e: &Entry) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(e).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.file.sync_data()?;
        self.remember(e);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(agent: &str, grant: &str, unix: i64) -> Entry {
        Entry {
            time: aic::time::format_rfc3339(unix),
            unix,
            agent_id: agent.into(),
            nonce: "00".into(),
            capabilities: vec!["db:read".into()],
            mode: Mode::Authorized,
            lifetime: 60,
            agent_key_sha256: "11".into(),
            grant: grant.into(),
            kind: "certificate".into(),
        }
    }

    #[test]
    fn a_reopened_log_remembers_windows_and_rates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("da.log");
        {
            let mut log = DaLog::open(&path).unwrap();
            log.append(&entry("bot", "g1", 100)).unwrap();
            log.append(&entry("bot", "g1", 200)).unwrap();
            log.append(&entry("bot", "g2", 300)).unwrap();
        }
        let log = DaLog::open(&path).unwrap();
        assert_eq!(log.history("bot", "g1").window_start, Some(100));
        assert_eq!(log.history("bot", "g2").window_start, Some(300));
        assert_eq!(log.history("bot", "g1").recent, vec![100, 200, 300]);
        assert_eq!(log.history("other", "g1"), History::default());
    }

    #[test]
    fn skips_a_torn_last_line_but_not_a_corrupt_middle() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("da.log");
        let good = serde_json::to_string(&entry("bot", "g", 5)).unwrap();
        std::fs::write(&path, format!("{good}\n{{\"time\":")).unwrap();
        assert_eq!(
            DaLog::open(&path).unwrap().history("bot", "g").window_start,
            Some(5)
        );
        std::fs::write(&path, format!("garbage\n{good}\n")).unwrap();
        assert!(DaLog::open(&path).is_err());
    }
}
