//! The retention archive (`retention.archive = "file"`): certificate rows
//! that retention removes are first appended, as JSON Lines, to one
//! zstd-compressed file per expiry day (`certs-YYYY-MM-DD.jsonl.zst`, UTC),
//! so an audit of day X reads that day's file instead of the hot table.
//!
//! Each append is one zstd frame (a file of concatenated frames is one
//! valid zstd stream: `zstdcat` reads it whole). A frame is written, the file
//! fsynced, and only then is its new length recorded in the file's
//! `.committed` sidecar (written to a temporary name, fsynced, renamed). The
//! first append of a process to a file cuts it back to the recorded length,
//! so a frame torn by a crash never stays in front of later ones. Rows are
//! deleted from the database only after their append returned, so a crash
//! between the two archives those rows again on the next pass: the archive
//! is at-least-once, and a reader keeps the first line per `(ca, serial)`.
//! Audit rows leave the same way into `audit-YYYY-MM-DD.jsonl.zst` (by the
//! event's UTC day; a reader keeps the first line per `(chain, seq)`).

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::audit::AuditRow;
use crate::types::CertRecord;

/// zstd level 3: the library's default; a day of agent rows compresses
/// about tenfold and the pruner stays far off the write path's CPU.
const ZSTD_LEVEL: i32 = 3;

/// The archive directory of one data dir.
pub struct Archive {
    dir: PathBuf,
    /// Files whose tail this process has already checked against their
    /// sidecar (only the first append per file needs it).
    checked: Mutex<HashSet<PathBuf>>,
}

/// One line of the archive. Field names are the API's where it has one.
#[derive(Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ArchivedCert {
    pub ca: String,
    pub serial: String,
    pub profile: String,
    pub common_name: String,
    pub status: String,
    pub not_before: i64,
    pub not_after: i64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub principal_uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub agent_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub capabilities: Option<String>,
    /// SHA-256 of the SubjectPublicKeyInfo, hex.
    pub spki_sha256: String,
    pub created_at: i64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub revoked_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub revocation_reason: Option<String>,
    /// The certificate, base64 DER, when the row kept it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub der: Option<String>,
}

/// One leaf of the transparency log as the archive keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedLeaf {
    pub tree: String,
    pub index: u64,
    /// The leaf's bytes, base64.
    pub leaf: String,
}

impl ArchivedLeaf {
    pub fn new(tree: &str, index: u64, leaf: &[u8]) -> ArchivedLeaf {
        ArchivedLeaf {
            tree: tree.to_string(),
            index,
            leaf: base64::engine::general_purpose::STANDARD.encode(leaf),
        }
    }

    /// The leaf's bytes (`None`: not base64).
    pub fn bytes(&self) -> Option<Vec<u8>> {
        base64::engine::general_purpose::STANDARD
            .decode(&self.leaf)
            .ok()
    }
}

/// One audit row as the archive keeps it (hashes in hex).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedAudit {
    pub chain: String,
    pub seq: i64,
    pub at_ms: i64,
    pub event: String,
    pub actor: String,
    pub principal_uid: String,
    pub agent_id: String,
    pub ca: String,
    pub serial: String,
    pub detail: String,
    pub prev_hash: String,
    pub hash: String,
}

impl ArchivedAudit {
    pub fn from_row(r: &AuditRow) -> ArchivedAudit {
        let hex = |h: &[u8; 32]| h.iter().map(|b| format!("{b:02x}")).collect::<String>();
        ArchivedAudit {
            chain: r.chain.clone(),
            seq: r.seq,
            at_ms: r.event.at_ms,
            event: r.event.event.clone(),
            actor: r.event.actor.clone(),
            principal_uid: r.event.principal_uid.clone(),
            agent_id: r.event.agent_id.clone(),
            ca: r.event.ca.clone(),
            serial: r.event.serial.clone(),
            detail: r.event.detail.clone(),
            prev_hash: hex(&r.prev_hash),
            hash: hex(&r.hash),
        }
    }
}

impl ArchivedCert {
    pub fn from_record(r: &CertRecord) -> ArchivedCert {
        ArchivedCert {
            ca: r.ca.clone(),
            serial: r.serial.clone(),
            profile: r.profile.clone(),
            common_name: r.common_name.clone(),
            status: r.status.as_str().to_string(),
            not_before: r.not_before,
            not_after: r.not_after,
            principal_uid: r.principal_uid.clone(),
            agent_id: r.agent_id.clone(),
            capabilities: r.capabilities.clone(),
            spki_sha256: r.key_hash.iter().map(|b| format!("{b:02x}")).collect(),
            created_at: r.created_at,
            revoked_at: r.revoked_at,
            revocation_reason: r.revocation_reason.clone(),
            der: (!r.der_dropped())
                .then(|| base64::engine::general_purpose::STANDARD.encode(&r.der)),
        }
    }
}

/// `(year, month, day)` in UTC of a Unix time (the proleptic Gregorian
/// calendar, days-from-civil inverted).
pub fn utc_date(unix: i64) -> (i64, u32, u32) {
    let days = unix.div_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The file name of the archive of the certificates expiring on the UTC day
/// of `not_after`.
pub fn day_file_name(not_after: i64) -> String {
    let (y, m, d) = utc_date(not_after);
    format!("certs-{y:04}-{m:02}-{d:02}.jsonl.zst")
}

impl Archive {
    /// Creates `dir` if needed.
    pub fn open(dir: &Path) -> io::Result<Archive> {
        std::fs::create_dir_all(dir)?;
        Ok(Archive {
            dir: dir.to_path_buf(),
            checked: Mutex::new(HashSet::new()),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends `rows` (blocking IO: call it off the async workers), one
    /// frame per expiry day they touch, each durable before this returns.
    /// Returns how many rows were written.
    pub fn append(&self, rows: &[CertRecord]) -> io::Result<u64> {
        let mut by_day: std::collections::BTreeMap<String, Vec<u8>> = Default::default();
        for r in rows {
            let buf = by_day.entry(day_file_name(r.not_after)).or_default();
            serde_json::to_writer(&mut *buf, &ArchivedCert::from_record(r))?;
            buf.push(b'\n');
        }
        self.append_days(by_day)?;
        Ok(rows.len() as u64)
    }

    /// Appends audit rows as [`append`](Self::append) does certificates,
    /// into `audit-YYYY-MM-DD.jsonl.zst` by the UTC day of each event, with
    /// the hashes that let the chain be checked across the archive.
    pub fn append_audit(&self, rows: &[AuditRow]) -> io::Result<u64> {
        let mut by_day: std::collections::BTreeMap<String, Vec<u8>> = Default::default();
        for r in rows {
            let (y, m, d) = utc_date(r.event.at_ms.div_euclid(1000));
            let buf = by_day
                .entry(format!("audit-{y:04}-{m:02}-{d:02}.jsonl.zst"))
                .or_default();
            serde_json::to_writer(&mut *buf, &ArchivedAudit::from_row(r))?;
            buf.push(b'\n');
        }
        self.append_days(by_day)?;
        Ok(rows.len() as u64)
    }

    /// Appends log leaves that retention removes, into
    /// `log-YYYY-MM-DD.jsonl.zst` by the UTC day they are removed, one line
    /// `{"tree", "index", "leaf"}` each (the leaf's bytes in base64): with
    /// the stored subtrees, what lets a pruned tree be recomputed leaf by
    /// leaf (`warrant audit verify --archive`).
    pub fn append_log(&self, leaves: &[ArchivedLeaf]) -> io::Result<u64> {
        if leaves.is_empty() {
            return Ok(0);
        }
        let (y, m, d) = utc_date(crate::time::now_unix());
        let mut buf = Vec::new();
        for l in leaves {
            serde_json::to_writer(&mut buf, l)?;
            buf.push(b'\n');
        }
        let mut by_day = std::collections::BTreeMap::new();
        by_day.insert(format!("log-{y:04}-{m:02}-{d:02}.jsonl.zst"), buf);
        self.append_days(by_day)?;
        Ok(leaves.len() as u64)
    }

    /// Every archived log leaf, from every `log-*.jsonl.zst` file in
    /// day order (a leaf archived twice appears twice).
    pub fn read_log(&self) -> io::Result<Vec<ArchivedLeaf>> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)?
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with("log-") && n.ends_with(".jsonl.zst"))
            .collect();
        names.sort();
        let mut out = Vec::new();
        for name in names {
            let path = self.dir.join(&name);
            let committed = read_committed(&sidecar_path(&path))?;
            let bytes = std::fs::read(&path)?;
            let bytes = bytes.get(..committed as usize).unwrap_or(&bytes);
            let text = zstd::stream::decode_all(bytes)?;
            for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                out.push(serde_json::from_slice(line).map_err(io::Error::other)?);
            }
        }
        Ok(out)
    }

    /// One zstd frame per file, each durable before the next.
    fn append_days(&self, by_day: std::collections::BTreeMap<String, Vec<u8>>) -> io::Result<()> {
        for (name, lines) in by_day {
            let frame = zstd::bulk::compress(&lines, ZSTD_LEVEL)?;
            self.append_frame(&self.dir.join(name), &frame)?;
        }
        Ok(())
    }

    fn append_frame(&self, path: &Path, frame: &[u8]) -> io::Result<()> {
        let sidecar = sidecar_path(path);
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)?;
        let first_touch = self
            .checked
            .lock()
            .map(|mut c| c.insert(path.to_path_buf()))
            .unwrap_or(true);
        let committed = read_committed(&sidecar)?;
        if first_touch && file.metadata()?.len() != committed {
            // A frame torn by a crash (or written and never recorded):
            // its rows are still in the database and will come again.
            file.set_len(committed)?;
        }
        use std::io::Seek;
        file.seek(io::SeekFrom::Start(committed))?;
        file.write_all(frame)?;
        file.sync_data()?;
        write_committed(&sidecar, committed + frame.len() as u64)?;
        if committed == 0 {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Every line of one day's file up to its committed length (tests and
    /// audits).
    pub fn read_day(&self, file_name: &str) -> io::Result<Vec<ArchivedCert>> {
        let path = self.dir.join(file_name);
        let committed = read_committed(&sidecar_path(&path))?;
        let bytes = std::fs::read(&path)?;
        let bytes = bytes.get(..committed as usize).unwrap_or(&bytes);
        let text = zstd::stream::decode_all(bytes)?;
        text.split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).map_err(io::Error::other))
            .collect()
    }

    /// The day files present, sorted by name (and so by day).
    pub fn day_files(&self) -> io::Result<Vec<String>> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)?
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with("certs-") && n.ends_with(".jsonl.zst"))
            .collect();
        names.sort();
        Ok(names)
    }
}

fn sidecar_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(".committed");
    PathBuf::from(s)
}

fn read_committed(sidecar: &Path) -> io::Result<u64> {
    match std::fs::read_to_string(sidecar) {
        Ok(s) => s.trim().parse().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: not a length", sidecar.display()),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e),
    }
}

fn write_committed(sidecar: &Path, len: u64) -> io::Result<()> {
    let mut tmp = sidecar.as_os_str().to_os_string();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = File::create(&tmp)?;
    f.write_all(len.to_string().as_bytes())?;
    f.sync_data()?;
    std::fs::rename(&tmp, sidecar)?;
    if let Some(dir) = sidecar.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::CertStatus;

    fn row(serial: &str, not_after: i64, der: Vec<u8>) -> CertRecord {
        CertRecord {
            ca: "people".into(),
            serial: serial.into(),
            common_name: "agent-1".into(),
            profile: "agent-proxy".into(),
            status: CertStatus::Valid,
            not_before: not_after - 60,
            not_after,
            der,
            principal_uid: Some("uid".into()),
            agent_id: Some("agent-1".into()),
            key_hash: vec![0xab; 32],
            created_at: not_after - 60,
            revoked_at: None,
            revocation_reason: None,
            capabilities: Some("varwof-gateway-v1:gateway:read".into()),
            lineage_start: None,
        }
    }

    #[test]
    fn utc_dates_match_the_calendar() {
        assert_eq!(utc_date(0), (1970, 1, 1));
        assert_eq!(utc_date(951_782_400), (2000, 2, 29));
        assert_eq!(utc_date(1_796_385_600), (2026, 12, 4));
        assert_eq!(utc_date(-1), (1969, 12, 31));
        assert_eq!(day_file_name(1_796_385_600), "certs-2026-12-04.jsonl.zst");
    }

    #[test]
    fn appends_are_one_file_per_expiry_day_and_read_back_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let a = Archive::open(dir.path()).unwrap();
        let day1 = 1_796_385_600;
        let day2 = day1 + 86_400;
        a.append(&[row("01", day1, vec![]), row("02", day2, vec![1, 2, 3])])
            .unwrap();
        a.append(&[row("03", day1 + 5, vec![])]).unwrap();
        assert_eq!(
            a.day_files().unwrap(),
            vec!["certs-2026-12-04.jsonl.zst", "certs-2026-12-05.jsonl.zst"]
        );
        let d1 = a.read_day("certs-2026-12-04.jsonl.zst").unwrap();
        let serials: Vec<_> = d1.iter().map(|l| l.serial.as_str()).collect();
        assert_eq!(serials, ["01", "03"]);
        assert_eq!(d1[0].der, None, "a dropped DER is not archived");
        assert_eq!(
            d1[0].capabilities.as_deref(),
            Some("varwof-gateway-v1:gateway:read")
        );
        let d2 = a.read_day("certs-2026-12-05.jsonl.zst").unwrap();
        assert_eq!(d2[0].der.as_deref(), Some("AQID"));
        // The whole file is one zstd stream of concatenated frames.
        let raw = std::fs::read(dir.path().join("certs-2026-12-04.jsonl.zst")).unwrap();
        let text = String::from_utf8(zstd::stream::decode_all(&raw[..]).unwrap()).unwrap();
        assert_eq!(text.lines().count(), 2);
    }

    #[test]
    fn a_torn_tail_is_cut_back_before_the_next_append() {
        let dir = tempfile::tempdir().unwrap();
        let day = 1_796_385_600;
        {
            let a = Archive::open(dir.path()).unwrap();
            a.append(&[row("01", day, vec![])]).unwrap();
        }
        // A crash in the middle of the next frame leaves garbage after the
        // committed length.
        let path = dir.path().join(day_file_name(day));
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x01]).unwrap();
        drop(f);
        let a = Archive::open(dir.path()).unwrap();
        a.append(&[row("02", day, vec![])]).unwrap();
        let raw = std::fs::read(&path).unwrap();
        let text = String::from_utf8(zstd::stream::decode_all(&raw[..]).unwrap()).unwrap();
        let serials: Vec<_> = text
            .lines()
            .map(|l| serde_json::from_str::<ArchivedCert>(l).unwrap().serial)
            .collect();
        assert_eq!(serials, ["01", "02"]);
    }
}
