//! The run description shared by `gust run SPEC.toml` (local or `--daemon`), the
//! daemon's `POST /runs` body and the dashboard: an engine [`RunSpec`] plus a name and
//! thresholds. One format, so a spec that runs locally runs the same on a daemon.

use gust_engine::RunSpec;
use gust_engine::threshold::{self, Threshold};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `RunSpec`'s keys at the top level, plus `name` and `thresholds`. Unknown keys are
/// rejected by the engine's strict `RunSpec` (its flattened load model denies them).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRequest {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub thresholds: Vec<String>,
    #[serde(flatten)]
    pub spec: RunSpec,
}

impl RunRequest {
    /// Parsed thresholds; a `step.NAME.…` threshold must name one of the spec's steps.
    pub fn parse_thresholds(&self) -> Result<Vec<Threshold>, String> {
        let parsed = self
            .thresholds
            .iter()
            .map(|t| threshold::parse(t).map_err(|e| format!("invalid threshold {t:?}: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        let steps: Vec<String> = self.spec.steps.iter().map(|s| s.name.clone()).collect();
        threshold::check_step_names(&parsed, &steps)?;
        Ok(parsed)
    }

    /// Make the spec's relative file paths (`[data] file`, `targets`) relative to
    /// `dir`, the directory of the spec file, so a spec runs the same from anywhere.
    pub fn resolve_paths(&mut self, dir: &Path) {
        let resolve = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        };
        if let Some(d) = &mut self.spec.data {
            resolve(&mut d.file);
        }
        if let Some(t) = &mut self.spec.targets {
            resolve(t);
        }
    }

    pub fn from_toml(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }
}

/// A `POST /runs` body: JSON, or the TOML of a spec file when the request says
/// `Content-Type: application/toml` (the dashboard posts a scenario file as text).
pub fn parse_body(headers: &axum::http::HeaderMap, body: &[u8]) -> Result<RunRequest, String> {
    let is_toml = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/toml"));
    if is_toml {
        let text =
            std::str::from_utf8(body).map_err(|_| "the TOML body is not UTF-8".to_string())?;
        RunRequest::from_toml(text)
    } else {
        serde_json::from_slice(body).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_spec_with_thresholds_parses() {
        let r = RunRequest::from_toml(
            "url = \"http://127.0.0.1:1/\"\nmode = \"closed\"\nconcurrency = 2\nduration = \"1s\"\nthresholds = [\"p99<1s\"]\n",
        )
        .unwrap();
        assert_eq!(r.thresholds, vec!["p99<1s"]);
        assert!(r.spec.validate().is_ok());
    }

    #[test]
    fn rejects_unknown_keys_next_to_name_and_thresholds() {
        let e = RunRequest::from_toml(
            "url = \"http://127.0.0.1:1/\"\nmode = \"closed\"\nconcurrency = 2\nname = \"x\"\nbogus = 1\n",
        )
        .unwrap_err();
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn scenario_spec_with_steps_data_and_step_threshold_parses() {
        let mut r = RunRequest::from_toml(
            r#"
url = "http://127.0.0.1:1/"
mode = "closed"
concurrency = 1
duration = "1s"
thresholds = ["step.list.p99<1s"]
[data]
file = "users.csv"
[[steps]]
name = "login"
method = "POST"
path = "/login"
body = '{"user":"{{data.user}}"}'
once = true
extract.token = { json = "/token" }
[[steps]]
name = "list"
path = "/certs"
headers = { Authorization = "Bearer {{token}}" }
status = [200]
"#,
        )
        .unwrap();
        assert_eq!(r.spec.steps.len(), 2);
        assert_eq!(r.parse_thresholds().unwrap().len(), 1);
        r.resolve_paths(Path::new("/specs"));
        assert_eq!(
            r.spec.data.as_ref().unwrap().file,
            PathBuf::from("/specs/users.csv")
        );
    }

    #[test]
    fn rejects_threshold_on_unknown_step() {
        let r = RunRequest::from_toml(
            "url = \"http://127.0.0.1:1/\"\nmode = \"closed\"\nconcurrency = 1\nthresholds = [\"step.nope.p99<1s\"]\n[[steps]]\nname = \"a\"\n",
        )
        .unwrap();
        let e = r.parse_thresholds().unwrap_err();
        assert!(e.contains("nope"), "{e}");
    }

    #[test]
    fn rejects_unknown_key_in_a_step() {
        let e = RunRequest::from_toml(
            "url = \"http://127.0.0.1:1/\"\nmode = \"closed\"\nconcurrency = 1\n[[steps]]\nname = \"a\"\nbogus = 1\n",
        )
        .unwrap_err();
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn rejects_unknown_mode() {
        let e =
            serde_json::from_str::<RunRequest>(r#"{"url":"http://127.0.0.1:1/","mode":"burst"}"#)
                .unwrap_err();
        assert!(e.to_string().contains("burst"), "{e}");
    }
}
