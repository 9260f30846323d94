//! The scenario's tables of a run spec: `[[steps]]` ([`StepSpec`]) and `[data]`
//! ([`DataSpec`]), as a user writes them. `scenario::Scenario::compile` validates them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Headers as a list of pairs (`[["Accept", "x"]]`, like the run spec) or a table
/// (`{Authorization = "Bearer {{token}}"}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HeaderSpec {
    List(Vec<(String, String)>),
    Map(BTreeMap<String, String>),
}

impl Default for HeaderSpec {
    fn default() -> Self {
        Self::List(Vec::new())
    }
}

impl HeaderSpec {
    pub fn pairs(&self) -> Vec<(String, String)> {
        match self {
            Self::List(l) => l.clone(),
            Self::Map(m) => m.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            Self::List(l) => l.is_empty(),
            Self::Map(m) => m.is_empty(),
        }
    }
}

/// One `[[steps]]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepSpec {
    pub name: String,
    #[serde(default = "default_method")]
    pub method: String,
    /// Absolute URL with the run's origin; the path and query may hold templates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Path and query (starting with `/`) on the run's URL. Default: the run URL's path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "HeaderSpec::is_empty")]
    pub headers: HeaderSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Run only until it has succeeded once for the VU (a login).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub once: bool,
    /// Pause after this step (e.g. "100ms").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extract: BTreeMap<String, ExtractSpec>,
    /// Statuses that pass this step; default: the run's `success_status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Vec<u16>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub json_equals: BTreeMap<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub json_exists: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_contains: Option<String>,
}

fn default_method() -> String {
    "GET".to_string()
}

impl StepSpec {
    /// A GET of `path` with nothing else set.
    pub fn new(name: impl Into<String>, path: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            method: default_method(),
            url: None,
            path: Some(path.into()),
            headers: HeaderSpec::default(),
            body: None,
            once: false,
            think: None,
            extract: BTreeMap::new(),
            status: None,
            json_equals: BTreeMap::new(),
            json_exists: Vec::new(),
            body_contains: None,
        }
    }
}

/// The `[data]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSpec {
    /// A `.csv` (header line = columns) or `.jsonl` file.
    pub file: PathBuf,
    #[serde(default)]
    pub mode: DataMode,
}

/// How iterations pick rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataMode {
    /// Each iteration takes the next row of one run-wide cursor, wrapping at the end.
    #[default]
    Sequential,
    /// Each iteration takes a uniformly random row.
    Random,
    /// Each row is used by exactly one iteration of the run; once every row is used,
    /// a virtual user that needs another stops (counted as `data_exhausted`).
    Unique,
}

/// `var = {json = "/token"} | {header = "location"} | {regex = "id=(\\d+)", group = 1}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtractSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    /// Capture group of `regex` (default 1, or 0 when the pattern has no group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<usize>,
}
