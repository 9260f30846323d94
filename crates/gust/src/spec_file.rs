//! The run description shared by `gust run SPEC.toml` (local or `--daemon`), the
//! daemon's `POST /runs` body and the dashboard: an engine [`RunSpec`] plus a name and
//! thresholds. One format, so a spec that runs locally runs the same on a daemon.

use gust_engine::RunSpec;
use gust_engine::threshold::{self, Threshold};
use serde::{Deserialize, Serialize};

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
    pub fn parse_thresholds(&self) -> Result<Vec<Threshold>, String> {
        self.thresholds
            .iter()
            .map(|t| threshold::parse(t).map_err(|e| format!("invalid threshold {t:?}: {e}")))
            .collect()
    }

    pub fn from_toml(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
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
    fn rejects_unknown_mode() {
        let e =
            serde_json::from_str::<RunRequest>(r#"{"url":"http://127.0.0.1:1/","mode":"burst"}"#)
                .unwrap_err();
        assert!(e.to_string().contains("burst"), "{e}");
    }
}
