//! SQLite run history: one row per run (config snapshot, status, final report) and one
//! row per finished second of its series.
//!
//! Seconds are written as the engine emits them, so a run cut short by a crash keeps
//! the series it had; the report is written once, from the engine's final `Report`
//! (the same merged histograms the live stream came from).

use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use serde_json::Value;

/// Why a run left `running` without finishing: written by crash reconciliation.
pub const CRASH_REASON: &str =
    "the daemon stopped while this run was running (crash or kill); its series is partial";

pub struct Store {
    conn: Mutex<Connection>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunRow {
    pub id: i64,
    pub name: Option<String>,
    pub status: String,
    pub reason: Option<String>,
    pub verdict: Option<String>,
    pub baseline: bool,
    /// "run" (a load run) or "capacity" (a capacity search).
    pub kind: String,
    pub created_at: i64,
    pub finished_at: Option<i64>,
    pub spec: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<Value>,
    pub verdicts: Value,
}

/// Filters and page for `GET /runs`, newest first.
#[derive(Debug, Default, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub limit: Option<u32>,
    /// Only runs with an id below this (the previous page's `next_before`).
    pub before: Option<i64>,
    pub status: Option<String>,
    pub baseline: Option<bool>,
    pub url: Option<String>,
    /// Accepted (and checked by the auth layer) so `?token=` is not an unknown filter.
    #[allow(dead_code)]
    pub token: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    pub max_runs: u32,
    pub max_age_days: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            max_runs: 200,
            max_age_days: 30,
        }
    }
}

pub fn now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

type Result<T> = std::result::Result<T, rusqlite::Error>;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT,
  status TEXT NOT NULL,
  reason TEXT,
  verdict TEXT,
  baseline INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL,
  finished_at INTEGER,
  url TEXT NOT NULL,
  spec TEXT NOT NULL,
  report TEXT,
  verdicts TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS series (
  run_id INTEGER NOT NULL,
  second INTEGER NOT NULL,
  sample TEXT NOT NULL,
  PRIMARY KEY (run_id, second)
);
";

impl Store {
    pub fn open(path: &Path) -> Result<Self> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.execute_batch(SCHEMA)?;
        add_kind_column(&conn)?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent (every
        // statement is atomic), so a poisoned lock is still usable.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks runs a previous daemon left `running` as failed; returns how many.
    pub fn reconcile_crashed(&self) -> Result<usize> {
        self.conn().execute(
            "UPDATE runs SET status = 'failed', reason = ?1, finished_at = ?2 WHERE status = 'running'",
            params![CRASH_REASON, now_s()],
        )
    }

    /// A new row, `running`, of `kind` ("run" or "capacity").
    pub fn insert_run_of_kind(
        &self,
        kind: &str,
        name: Option<&str>,
        url: &str,
        spec: &Value,
    ) -> Result<i64> {
        let conn = self.conn();
        conn.execute(
            "INSERT INTO runs (name, status, created_at, url, spec, kind) VALUES (?1, 'running', ?2, ?3, ?4, ?5)",
            params![name, now_s(), url, spec.to_string(), kind],
        )?;
        Ok(conn.last_insert_rowid())
    }

    pub fn insert_second(&self, run_id: i64, second: u64, sample: &Value) -> Result<()> {
        self.conn().execute(
            "INSERT OR REPLACE INTO series (run_id, second, sample) VALUES (?1, ?2, ?3)",
            params![run_id, second as i64, sample.to_string()],
        )?;
        Ok(())
    }

    pub fn finish_run(
        &self,
        run_id: i64,
        status: &str,
        reason: Option<&str>,
        verdict: Option<&str>,
        report: Option<&Value>,
        verdicts: &Value,
    ) -> Result<()> {
        self.conn().execute(
            "UPDATE runs SET status = ?2, reason = ?3, verdict = ?4, report = ?5, verdicts = ?6, finished_at = ?7 WHERE id = ?1",
            params![
                run_id,
                status,
                reason,
                verdict,
                report.map(Value::to_string),
                verdicts.to_string(),
                now_s()
            ],
        )?;
        Ok(())
    }

    fn row(r: &rusqlite::Row<'_>, with_report: bool) -> Result<RunRow> {
        let parse = |s: Option<String>| s.and_then(|s| serde_json::from_str::<Value>(&s).ok());
        Ok(RunRow {
            id: r.get("id")?,
            name: r.get("name")?,
            status: r.get("status")?,
            reason: r.get("reason")?,
            verdict: r.get("verdict")?,
            baseline: r.get::<_, i64>("baseline")? != 0,
            kind: r.get("kind")?,
            created_at: r.get("created_at")?,
            finished_at: r.get("finished_at")?,
            spec: parse(r.get("spec")?).unwrap_or(Value::Null),
            report: if with_report {
                parse(r.get("report")?)
            } else {
                None
            },
            verdicts: parse(r.get("verdicts")?).unwrap_or(Value::Array(vec![])),
        })
    }

    pub fn get(&self, run_id: i64) -> Result<Option<RunRow>> {
        self.conn()
            .query_row("SELECT * FROM runs WHERE id = ?1", params![run_id], |r| {
                Self::row(r, true)
            })
            .optional()
    }

    /// Newest first; the summary row carries the report's headline figures only.
    pub fn list(&self, q: &ListQuery) -> Result<Vec<RunRow>> {
        let limit = q.limit.unwrap_or(50).clamp(1, 500);
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT * FROM runs WHERE (?1 IS NULL OR id < ?1) AND (?2 IS NULL OR status = ?2)
             AND (?3 IS NULL OR baseline = ?3) AND (?4 IS NULL OR url = ?4)
             ORDER BY id DESC LIMIT ?5",
        )?;
        let rows = stmt.query_map(
            params![
                q.before,
                q.status,
                q.baseline.map(i64::from),
                q.url,
                limit as i64
            ],
            |r| {
                let mut row = Self::row(r, true)?;
                row.report = row.report.map(|rep| headline(&rep));
                Ok(row)
            },
        )?;
        rows.collect()
    }

    pub fn series(&self, run_id: i64) -> Result<Vec<Value>> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare("SELECT sample FROM series WHERE run_id = ?1 ORDER BY second")?;
        let rows = stmt.query_map(params![run_id], |r| r.get::<_, String>(0))?;
        rows.map(|s| s.map(|s| serde_json::from_str(&s).unwrap_or(Value::Null)))
            .collect()
    }

    pub fn set_baseline(&self, run_id: i64, baseline: bool) -> Result<usize> {
        self.conn().execute(
            "UPDATE runs SET baseline = ?2 WHERE id = ?1",
            params![run_id, i64::from(baseline)],
        )
    }

    /// The newest baseline for the same URL, else the newest baseline at all.
    pub fn baseline_for(&self, run_id: i64) -> Result<Option<i64>> {
        self.conn()
            .query_row(
                "SELECT b.id FROM runs b, runs r WHERE r.id = ?1 AND b.baseline = 1 AND b.id != r.id
                 ORDER BY (b.url = r.url) DESC, b.id DESC LIMIT 1",
                params![run_id],
                |r| r.get(0),
            )
            .optional()
    }

    pub fn delete(&self, run_id: i64) -> Result<usize> {
        let conn = self.conn();
        conn.execute("DELETE FROM series WHERE run_id = ?1", params![run_id])?;
        conn.execute("DELETE FROM runs WHERE id = ?1", params![run_id])
    }

    /// Deletes finished, non-baseline runs beyond the newest `max_runs` or older than
    /// `max_age_days`. Returns the deleted ids.
    pub fn prune(&self, retention: Retention) -> Result<Vec<i64>> {
        let cutoff = now_s() - i64::from(retention.max_age_days) * 86_400;
        let conn = self.conn();
        let ids: Vec<i64> = {
            let mut stmt = conn.prepare(
                "SELECT id FROM runs WHERE baseline = 0 AND status != 'running' AND (created_at < ?1
                 OR id NOT IN (SELECT id FROM runs WHERE baseline = 0 ORDER BY id DESC LIMIT ?2))",
            )?;
            let rows =
                stmt.query_map(params![cutoff, i64::from(retention.max_runs)], |r| r.get(0))?;
            rows.collect::<Result<_>>()?
        };
        for id in &ids {
            conn.execute("DELETE FROM series WHERE run_id = ?1", params![id])?;
            conn.execute("DELETE FROM runs WHERE id = ?1", params![id])?;
        }
        Ok(ids)
    }
}

/// Migration: the `kind` column ("run" or "capacity"). A history written before it
/// existed holds only load runs, which the column's default names.
fn add_kind_column(conn: &Connection) -> Result<()> {
    let has_kind = conn
        .prepare("SELECT 1 FROM pragma_table_info('runs') WHERE name = 'kind'")?
        .exists([])?;
    if !has_kind {
        conn.execute_batch("ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT 'run'")?;
    }
    Ok(())
}

/// The figures a history list shows, so listing 500 runs does not ship 500 reports.
fn headline(report: &Value) -> Value {
    let pick = |k: &str| report.get(k).cloned().unwrap_or(Value::Null);
    if report.get("best_rate").is_some() {
        // A capacity search's report.
        return serde_json::json!({
            "url": pick("url"),
            "best_rate": pick("best_rate"),
            "stop_reason": pick("stop_reason"),
            "steps": report.get("steps").and_then(Value::as_array).map_or(0, Vec::len),
        });
    }
    serde_json::json!({
        "url": pick("url"),
        "model": pick("model"),
        "responses": pick("responses"),
        "rps": pick("rps"),
        "error_rate": pick("error_rate"),
        "p99_us": report.pointer("/latency/p99_us").cloned().unwrap_or(Value::Null),
        "stopped": pick("stopped"),
    })
}
