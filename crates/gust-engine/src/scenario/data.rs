//! Scenario data files: CSV (first line = column names) or JSON Lines (one object per
//! line), loaded once before the run, and how an iteration picks its row.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::schedule::Rng;
use crate::spec::segment::Segment;
use crate::spec::steps::DataMode;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DataError {
    #[error("line {line}: {reason}")]
    Line { line: usize, reason: String },
    #[error("the file has no rows")]
    Empty,
    #[error("unknown data file type (use .csv or .jsonl)")]
    UnknownType,
}

/// A loaded data file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataSet {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
    pub mode: DataMode,
}

impl DataSet {
    /// Parse by file name: `.csv` or `.jsonl`/`.ndjson`.
    pub fn parse(name: &str, text: &str, mode: DataMode) -> Result<Self, DataError> {
        let lower = name.to_ascii_lowercase();
        let (columns, rows) = if lower.ends_with(".csv") {
            parse_csv(text)?
        } else if lower.ends_with(".jsonl") || lower.ends_with(".ndjson") {
            parse_jsonl(text)?
        } else {
            return Err(DataError::UnknownType);
        };
        if rows.is_empty() {
            return Err(DataError::Empty);
        }
        Ok(Self {
            columns,
            rows,
            mode,
        })
    }

    /// The row for the next iteration. `cursor` is the process's shared cursor;
    /// `segment` its share of the run: in sequential and unique modes it takes only
    /// its own rows (its share of them, spread through the file), so segments on
    /// several machines never use one unique row twice.
    pub fn pick(&self, cursor: &AtomicU64, rng: &mut Rng, segment: &Segment) -> Option<usize> {
        let n = self.rows.len() as u64;
        let share = segment.count_below(n);
        match self.mode {
            DataMode::Random => Some((rng.next_u64() % n) as usize),
            _ if share == 0 => None,
            DataMode::Sequential => {
                let i = cursor.fetch_add(1, Ordering::Relaxed) % share;
                Some(segment.global(i) as usize)
            }
            DataMode::Unique => {
                let i = cursor.fetch_add(1, Ordering::Relaxed);
                (i < share).then(|| segment.global(i) as usize)
            }
        }
    }
}

/// RFC 4180 fields: commas, `"quoted, fields"`, `""` for a quote inside quotes; CRLF or
/// LF line ends; newlines inside quotes are kept.
fn csv_records(text: &str) -> Result<Vec<(usize, Vec<String>)>, DataError> {
    let mut records = Vec::new();
    let mut field = String::new();
    let mut record = Vec::new();
    let mut in_quotes = false;
    let mut line = 1;
    let mut record_line = 1;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if in_quotes {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => in_quotes = false,
                '\n' => {
                    line += 1;
                    field.push(c);
                }
                _ => field.push(c),
            }
            continue;
        }
        match c {
            '"' if field.is_empty() => in_quotes = true,
            '"' => {
                return Err(DataError::Line {
                    line,
                    reason: "quote inside an unquoted field".into(),
                });
            }
            ',' => record.push(std::mem::take(&mut field)),
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => {
                record.push(std::mem::take(&mut field));
                if !(record.len() == 1 && record[0].is_empty()) {
                    records.push((record_line, std::mem::take(&mut record)));
                }
                record.clear();
                line += 1;
                record_line = line;
            }
            _ => field.push(c),
        }
    }
    if in_quotes {
        return Err(DataError::Line {
            line: record_line,
            reason: "unterminated quoted field".into(),
        });
    }
    if !field.is_empty() || !record.is_empty() {
        record.push(field);
        records.push((record_line, record));
    }
    Ok(records)
}

fn parse_csv(text: &str) -> Result<(Vec<String>, Vec<Vec<String>>), DataError> {
    let mut records = csv_records(text)?.into_iter();
    let Some((_, header)) = records.next() else {
        return Err(DataError::Empty);
    };
    let columns: Vec<String> = header.into_iter().map(|c| c.trim().to_string()).collect();
    for (i, c) in columns.iter().enumerate() {
        if c.is_empty() {
            return Err(DataError::Line {
                line: 1,
                reason: format!("column {} has no name", i + 1),
            });
        }
        if columns[..i].contains(c) {
            return Err(DataError::Line {
                line: 1,
                reason: format!("column {c:?} appears twice"),
            });
        }
    }
    let mut rows = Vec::new();
    for (line, record) in records {
        if record.len() != columns.len() {
            return Err(DataError::Line {
                line,
                reason: format!(
                    "{} fields where the header has {}",
                    record.len(),
                    columns.len()
                ),
            });
        }
        rows.push(record);
    }
    Ok((columns, rows))
}

fn parse_jsonl(text: &str) -> Result<(Vec<String>, Vec<Vec<String>>), DataError> {
    let mut columns: Vec<String> = Vec::new();
    let mut objects = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(line).map_err(|e| DataError::Line {
            line: i + 1,
            reason: e.to_string(),
        })?;
        let serde_json::Value::Object(map) = value else {
            return Err(DataError::Line {
                line: i + 1,
                reason: "not a JSON object".into(),
            });
        };
        for k in map.keys() {
            if !columns.contains(k) {
                columns.push(k.clone());
            }
        }
        objects.push(map);
    }
    let rows = objects
        .into_iter()
        .map(|map| {
            columns
                .iter()
                .map(|c| match map.get(c) {
                    None | Some(serde_json::Value::Null) => String::new(),
                    Some(serde_json::Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                })
                .collect()
        })
        .collect();
    Ok((columns, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_with_quotes_and_crlf() {
        let d = DataSet::parse(
            "users.csv",
            "user,pw\r\nalice,\"a,b\"\r\n\"bob \"\"b\"\"\",x\n",
            DataMode::Sequential,
        )
        .unwrap();
        assert_eq!(d.columns, vec!["user", "pw"]);
        assert_eq!(d.rows[0], vec!["alice", "a,b"]);
        assert_eq!(d.rows[1], vec!["bob \"b\"", "x"]);
    }

    #[test]
    fn jsonl_columns_are_the_union_of_keys() {
        let d = DataSet::parse(
            "u.jsonl",
            "{\"user\":\"a\",\"n\":1}\n\n{\"user\":\"b\",\"extra\":true}\n",
            DataMode::Random,
        )
        .unwrap();
        assert_eq!(d.columns, vec!["n", "user", "extra"]);
        assert_eq!(d.rows[0], vec!["1", "a", ""]);
        assert_eq!(d.rows[1], vec!["", "b", "true"]);
    }

    #[test]
    fn sequential_wraps_and_unique_runs_out() {
        let mut d = DataSet::parse("d.csv", "x\n1\n2\n", DataMode::Sequential).unwrap();
        let cursor = AtomicU64::new(0);
        let mut rng = Rng::new(1);
        let picks: Vec<_> = (0..5)
            .map(|_| d.pick(&cursor, &mut rng, &Segment::default()))
            .collect();
        assert_eq!(picks, vec![Some(0), Some(1), Some(0), Some(1), Some(0)]);
        d.mode = DataMode::Unique;
        let cursor = AtomicU64::new(0);
        let picks: Vec<_> = (0..3)
            .map(|_| d.pick(&cursor, &mut rng, &Segment::default()))
            .collect();
        assert_eq!(picks, vec![Some(0), Some(1), None]);
    }

    #[test]
    fn random_picks_every_row_eventually() {
        let d = DataSet::parse("d.csv", "x\n1\n2\n3\n", DataMode::Random).unwrap();
        let cursor = AtomicU64::new(0);
        let mut rng = Rng::new(3);
        let mut seen = [false; 3];
        for _ in 0..100 {
            seen[d.pick(&cursor, &mut rng, &Segment::default()).unwrap()] = true;
        }
        assert_eq!(seen, [true; 3]);
    }

    #[test]
    fn rejects_ragged_csv_rows() {
        let e = DataSet::parse("d.csv", "a,b\n1,2\n3\n", DataMode::Sequential).unwrap_err();
        assert!(matches!(e, DataError::Line { line: 3, .. }), "{e}");
    }

    #[test]
    fn rejects_duplicate_and_empty_column_names() {
        assert!(DataSet::parse("d.csv", "a,a\n1,2\n", DataMode::Sequential).is_err());
        assert!(DataSet::parse("d.csv", "a,\n1,2\n", DataMode::Sequential).is_err());
    }

    #[test]
    fn rejects_unterminated_quote() {
        let e = DataSet::parse("d.csv", "a\n\"x\n", DataMode::Sequential).unwrap_err();
        assert!(matches!(e, DataError::Line { .. }), "{e}");
    }

    #[test]
    fn rejects_empty_file_unknown_type_and_non_object_lines() {
        assert_eq!(
            DataSet::parse("d.csv", "a,b\n", DataMode::Sequential),
            Err(DataError::Empty)
        );
        assert_eq!(
            DataSet::parse("d.txt", "a\n1\n", DataMode::Sequential),
            Err(DataError::UnknownType)
        );
        assert!(matches!(
            DataSet::parse("d.jsonl", "[1,2]\n", DataMode::Sequential),
            Err(DataError::Line { line: 1, .. })
        ));
    }
}
