//! The MCP tools: their names, descriptions and input schemas, and the parsing of a
//! call's arguments into a typed [`ToolCall`]. Pure: no IO, so every refusal has a
//! unit test; [`super::exec`] carries a parsed call out against the daemon API.

use std::fmt;

use serde_json::{Map, Value, json};

/// One tool as listed by `tools/list`.
pub struct ToolDef {
    pub name: &'static str,
    pub description: &'static str,
    pub input_schema: Value,
}

/// Where a run description comes from: exactly one of these per call.
#[derive(Debug, Clone, PartialEq)]
pub enum SpecSource {
    /// A run spec as a JSON object (the keys of a spec TOML).
    Json(Map<String, Value>),
    /// A spec or scenario file's TOML text.
    Toml(String),
    /// A spec or scenario TOML file on the machine running `gust mcp`.
    Path(String),
    /// Only a URL (capacity search): the daemon fills in the rest.
    Url(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct CapacityArgs {
    pub source: SpecSource,
    pub slo: String,
    pub start: Option<f64>,
    pub max: Option<f64>,
    pub step_duration: Option<String>,
    pub precision: Option<f64>,
}

/// A tool call with its arguments checked.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolCall {
    StartRun(SpecSource),
    RunStatus {
        run_id: i64,
    },
    StopRun {
        run_id: i64,
    },
    ListRuns {
        limit: u32,
        status: Option<String>,
    },
    GetReport {
        run_id: i64,
        summary: bool,
    },
    CompareRuns {
        run_id: i64,
        baseline_id: Option<i64>,
    },
    Capacity(CapacityArgs),
}

/// A refused tool call: reported to the agent as a tool result with `isError`, so
/// it can correct the call.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgError {
    UnknownTool(String),
    /// An argument is missing, has the wrong type or an out-of-range value.
    Invalid {
        field: String,
        reason: String,
    },
    /// More than one, or none, of a group of alternative arguments was given.
    ExactlyOne {
        fields: &'static [&'static str],
    },
    UnknownArgument(String),
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownTool(name) => write!(f, "unknown tool {name:?}"),
            Self::Invalid { field, reason } => write!(f, "invalid argument `{field}`: {reason}"),
            Self::ExactlyOne { fields } => {
                let names: Vec<String> = fields.iter().map(|f| format!("`{f}`")).collect();
                write!(f, "give exactly one of {}", names.join(", "))
            }
            Self::UnknownArgument(name) => write!(f, "unknown argument `{name}`"),
        }
    }
}

impl std::error::Error for ArgError {}

pub const LIST_DEFAULT_LIMIT: u32 = 20;
pub const LIST_MAX_LIMIT: u32 = 500;

const SPEC_DESCRIPTION: &str = "Run spec as a JSON object, the same keys as a gust spec TOML \
    (and the daemon's POST /runs body). Required: `url`, `mode` (\"closed\" or \"open\"). \
    Closed: `concurrency` (in-flight requests), optional `think_time`. Open: `rate` (req/s). \
    Length: `duration` (\"30s\") or `iterations` (request count) or `stages` \
    ([{\"duration\":\"10s\",\"target\":100}]). Optional: `name`, `thresholds` \
    ([\"p99<50ms\",\"errors<1%\"]), `method`, `headers` ([[\"Name\",\"value\"]]), `body`, \
    `timeout`, `workers`, `connections`, `max_in_flight`, `http2`, `success_status`. \
    Example: {\"url\":\"http://127.0.0.1:8080/\",\"mode\":\"closed\",\"concurrency\":10,\
    \"duration\":\"10s\"}.";

fn run_id_schema(description: &str) -> Value {
    json!({"type": "integer", "minimum": 1, "description": description})
}

/// Every tool, in the order `tools/list` gives them.
pub fn definitions() -> Vec<ToolDef> {
    vec![
        ToolDef {
            name: "start_run",
            description: "Start an HTTP load test and return its run id at once (the run goes \
                on in the background; follow it with run_status, read it with get_report). \
                Give exactly one of `spec` (JSON object), `toml` (spec or scenario TOML text) \
                or `path` (a TOML file). One run at a time: starting while another runs is \
                refused. Send load only to services you own.",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "spec": {"type": "object", "description": SPEC_DESCRIPTION},
                    "toml": {"type": "string", "description": "A spec or scenario file's TOML text (the format of `gust run SPEC.toml`)."},
                    "path": {"type": "string", "description": "Path of a spec or scenario TOML file on the machine running gust mcp."}
                },
                "additionalProperties": false
            }),
        },
        ToolDef {
            name: "run_status",
            description: "Status of a run (running, completed, stopped, failed), its kind, \
                progress (0..1, when the run has a known length) and live headline numbers \
                from its last finished second: req/s, p50/p99 latency in ms, error rate. A \
                capacity search shows its status and elapsed time; its steps are in its \
                report once it ends.",
            input_schema: json!({
                "type": "object",
                "properties": {"run_id": run_id_schema("The run's id (from start_run, capacity or list_runs).")},
                "required": ["run_id"],
                "additionalProperties": false
            }),
        },
        ToolDef {
            name: "stop_run",
            description: "Stop a running run early. It keeps the report of what it did, \
                with status `stopped`. Refused when the run is not running.",
            input_schema: json!({
                "type": "object",
                "properties": {"run_id": run_id_schema("The running run's id.")},
                "required": ["run_id"],
                "additionalProperties": false
            }),
        },
        ToolDef {
            name: "list_runs",
            description: "Recent runs, newest first: id, name, kind, status, verdict, \
                baseline flag, URL, created_at (Unix seconds).",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "limit": {"type": "integer", "minimum": 1, "maximum": LIST_MAX_LIMIT, "description": "How many runs (default 20)."},
                    "status": {"type": "string", "enum": ["running", "completed", "stopped", "failed"], "description": "Only runs with this status."}
                },
                "additionalProperties": false
            }),
        },
        ToolDef {
            name: "get_report",
            description: "The final report of a finished run: the full gust JSON report \
                (latency percentiles in µs, counts, status codes, error classes, thresholds \
                and verdict), or with `summary: true` a compact set of headline numbers \
                (req/s, p50/p99/p99.9 in ms, error rate, counts, verdict). For a capacity \
                search: its report; with `summary: true` the highest rate that met the SLO \
                (best_rate), why it stopped, and one line per step (rate, achieved req/s, \
                p50/p99 ms, error rate, dropped, passed).",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "run_id": run_id_schema("The finished run's id."),
                    "summary": {"type": "boolean", "description": "Headline numbers only (default false)."}
                },
                "required": ["run_id"],
                "additionalProperties": false
            }),
        },
        ToolDef {
            name: "compare_runs",
            description: "Compare a finished run with a baseline run: req/s, p50, p99, p99.9 \
                latency and error rate of both, with the difference (run − baseline) and the \
                ratio (run / baseline). Without `baseline_id`, the baseline is the newest run \
                marked as baseline (dashboard or PUT /runs/{id}/baseline), preferring one \
                of the same URL.",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "run_id": run_id_schema("The run to judge."),
                    "baseline_id": run_id_schema("The run to compare against (default: the marked baseline, same URL first).")
                },
                "required": ["run_id"],
                "additionalProperties": false
            }),
        },
        ToolDef {
            name: "capacity",
            description: "Start a capacity search: open-model steps at growing rates, then \
                bisection, to find the highest rate (req/s) that meets the SLO. Returns the \
                search's run id at once; follow it with run_status and read the result \
                (highest passing rate, every step, why it stopped) with get_report. Give \
                exactly one of `url`, `spec`, `toml` or `path` for what to load.",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "url": {"type": "string", "description": "Target URL (GET), e.g. http://127.0.0.1:8080/."},
                    "spec": {"type": "object", "description": "A run spec object (as for start_run) for the request(s) to send; its load model and length are set by the search."},
                    "toml": {"type": "string", "description": "A spec or scenario TOML text."},
                    "path": {"type": "string", "description": "Path of a spec or scenario TOML file on the machine running gust mcp."},
                    "slo": {"type": "string", "description": "Conditions every step must meet, comma-separated, e.g. \"p99<50ms,errors<1%\"."},
                    "start": {"type": "number", "exclusiveMinimum": 0, "description": "First rate tried, req/s."},
                    "max": {"type": "number", "exclusiveMinimum": 0, "description": "Highest rate tried, req/s."},
                    "step_duration": {"type": "string", "description": "Length of each step, e.g. \"10s\"."},
                    "precision": {"type": "number", "exclusiveMinimum": 0, "description": "Bisection stops when the bracket is this narrow (fraction of the rate, e.g. 0.05)."}
                },
                "required": ["slo"],
                "additionalProperties": false
            }),
        },
    ]
}

/// Parses a call's arguments (absent = `{}`) for the named tool.
pub fn parse(name: &str, args: &Map<String, Value>) -> Result<ToolCall, ArgError> {
    let allowed: &[&str] = match name {
        "start_run" => &["spec", "toml", "path"],
        "run_status" | "stop_run" => &["run_id"],
        "list_runs" => &["limit", "status"],
        "get_report" => &["run_id", "summary"],
        "compare_runs" => &["run_id", "baseline_id"],
        "capacity" => &[
            "url",
            "spec",
            "toml",
            "path",
            "slo",
            "start",
            "max",
            "step_duration",
            "precision",
        ],
        other => return Err(ArgError::UnknownTool(other.to_string())),
    };
    if let Some(unknown) = args.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(ArgError::UnknownArgument(unknown.clone()));
    }
    let a = Args(args);
    Ok(match name {
        "start_run" => ToolCall::StartRun(spec_source(&a, false)?),
        "run_status" => ToolCall::RunStatus {
            run_id: a.run_id("run_id")?,
        },
        "stop_run" => ToolCall::StopRun {
            run_id: a.run_id("run_id")?,
        },
        "list_runs" => {
            let limit = match a.get("limit") {
                None => LIST_DEFAULT_LIMIT,
                Some(_) => {
                    let n = a.integer("limit")?;
                    if !(1..=i64::from(LIST_MAX_LIMIT)).contains(&n) {
                        return Err(a.invalid("limit", format!("must be 1..={LIST_MAX_LIMIT}")));
                    }
                    n as u32
                }
            };
            let status = a.opt_string("status")?;
            if let Some(s) = &status
                && !matches!(s.as_str(), "running" | "completed" | "stopped" | "failed")
            {
                return Err(a.invalid(
                    "status",
                    "must be running, completed, stopped or failed".into(),
                ));
            }
            ToolCall::ListRuns { limit, status }
        }
        "get_report" => ToolCall::GetReport {
            run_id: a.run_id("run_id")?,
            summary: a.opt_bool("summary")?.unwrap_or(false),
        },
        "compare_runs" => ToolCall::CompareRuns {
            run_id: a.run_id("run_id")?,
            baseline_id: match a.get("baseline_id") {
                None => None,
                Some(_) => Some(a.run_id("baseline_id")?),
            },
        },
        _ => ToolCall::Capacity(CapacityArgs {
            source: spec_source(&a, true)?,
            slo: a
                .opt_string("slo")?
                .filter(|s| !s.trim().is_empty())
                .ok_or_else(|| a.invalid("slo", "required, e.g. \"p99<50ms,errors<1%\"".into()))?,
            start: a.opt_positive("start")?,
            max: a.opt_positive("max")?,
            step_duration: a.opt_string("step_duration")?,
            precision: a.opt_positive("precision")?,
        }),
    })
}

fn spec_source(a: &Args<'_>, url_allowed: bool) -> Result<SpecSource, ArgError> {
    const WITH_URL: &[&str] = &["url", "spec", "toml", "path"];
    const WITHOUT_URL: &[&str] = &["spec", "toml", "path"];
    let fields = if url_allowed { WITH_URL } else { WITHOUT_URL };
    let given: Vec<&str> = fields
        .iter()
        .copied()
        .filter(|f| a.get(f).is_some())
        .collect();
    let [field] = given.as_slice() else {
        return Err(ArgError::ExactlyOne { fields });
    };
    match *field {
        "spec" => match a.get("spec") {
            Some(Value::Object(map)) => Ok(SpecSource::Json(map.clone())),
            _ => Err(a.invalid("spec", "must be a JSON object".into())),
        },
        "toml" => Ok(SpecSource::Toml(a.nonempty_string("toml")?)),
        "path" => Ok(SpecSource::Path(a.nonempty_string("path")?)),
        _ => Ok(SpecSource::Url(a.nonempty_string("url")?)),
    }
}

/// Typed access to a call's arguments, each refusal naming its field.
struct Args<'a>(&'a Map<String, Value>);

impl Args<'_> {
    fn get(&self, field: &str) -> Option<&Value> {
        self.0.get(field).filter(|v| !v.is_null())
    }

    fn invalid(&self, field: &str, reason: String) -> ArgError {
        ArgError::Invalid {
            field: field.to_string(),
            reason,
        }
    }

    fn integer(&self, field: &str) -> Result<i64, ArgError> {
        let value = self
            .get(field)
            .ok_or_else(|| self.invalid(field, "required".into()))?;
        // Some clients send whole numbers as floats (3.0); accept those.
        value
            .as_i64()
            .or_else(|| {
                value
                    .as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
                    .map(|f| f as i64)
            })
            .ok_or_else(|| self.invalid(field, format!("must be an integer, got {value}")))
    }

    fn run_id(&self, field: &str) -> Result<i64, ArgError> {
        let id = self.integer(field)?;
        if id < 1 {
            return Err(self.invalid(field, format!("must be a run id (1 or more), got {id}")));
        }
        Ok(id)
    }

    fn opt_string(&self, field: &str) -> Result<Option<String>, ArgError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.invalid(field, format!("must be a string, got {other}"))),
        }
    }

    fn nonempty_string(&self, field: &str) -> Result<String, ArgError> {
        match self.opt_string(field)? {
            Some(s) if !s.trim().is_empty() => Ok(s),
            _ => Err(self.invalid(field, "must not be empty".into())),
        }
    }

    fn opt_bool(&self, field: &str) -> Result<Option<bool>, ArgError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.invalid(field, format!("must be true or false, got {other}"))),
        }
    }

    fn opt_positive(&self, field: &str) -> Result<Option<f64>, ArgError> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() && x > 0.0 => Ok(Some(x)),
                _ => Err(self.invalid(field, format!("must be a number above 0, got {v}"))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    fn refusal(name: &str, v: Value) -> String {
        parse(name, &args(v)).unwrap_err().to_string()
    }

    #[test]
    fn lists_the_seven_tools_with_object_schemas() {
        let defs = definitions();
        let names: Vec<_> = defs.iter().map(|d| d.name).collect();
        assert_eq!(
            names,
            [
                "start_run",
                "run_status",
                "stop_run",
                "list_runs",
                "get_report",
                "compare_runs",
                "capacity"
            ]
        );
        for d in &defs {
            assert_eq!(d.input_schema["type"], "object", "{}", d.name);
            assert!(!d.description.is_empty());
            // Every required argument is a declared property.
            for r in d.input_schema["required"].as_array().into_iter().flatten() {
                let r = r.as_str().unwrap();
                assert!(d.input_schema["properties"].get(r).is_some(), "{}", d.name);
            }
        }
    }

    #[test]
    fn every_schema_property_is_accepted_by_the_parser() {
        for d in definitions() {
            for key in d.input_schema["properties"].as_object().unwrap().keys() {
                let e = parse(d.name, &args(json!({key.as_str(): null})));
                assert!(
                    !matches!(e, Err(ArgError::UnknownArgument(_))),
                    "{}: {key}",
                    d.name
                );
            }
        }
    }

    #[test]
    fn start_run_takes_a_spec_object_toml_or_path() {
        let spec = json!({"url": "http://127.0.0.1:1/", "mode": "closed", "concurrency": 1});
        assert_eq!(
            parse("start_run", &args(json!({"spec": spec.clone()}))).unwrap(),
            ToolCall::StartRun(SpecSource::Json(args(spec)))
        );
        assert_eq!(
            parse("start_run", &args(json!({"toml": "url = 'x'"}))).unwrap(),
            ToolCall::StartRun(SpecSource::Toml("url = 'x'".into()))
        );
        assert_eq!(
            parse("start_run", &args(json!({"path": "/tmp/s.toml"}))).unwrap(),
            ToolCall::StartRun(SpecSource::Path("/tmp/s.toml".into()))
        );
    }

    #[test]
    fn rejects_start_run_with_two_sources_or_none() {
        let e = refusal("start_run", json!({"spec": {}, "toml": "x = 1"}));
        assert_eq!(e, "give exactly one of `spec`, `toml`, `path`");
        let e = refusal("start_run", json!({}));
        assert_eq!(e, "give exactly one of `spec`, `toml`, `path`");
    }

    #[test]
    fn rejects_start_run_spec_that_is_not_an_object() {
        let e = refusal("start_run", json!({"spec": "url = 'x'"}));
        assert_eq!(e, "invalid argument `spec`: must be a JSON object");
    }

    #[test]
    fn rejects_start_run_with_a_url_only() {
        let e = refusal("start_run", json!({"url": "http://127.0.0.1:1/"}));
        assert_eq!(e, "unknown argument `url`");
    }

    #[test]
    fn rejects_empty_toml_text() {
        let e = refusal("start_run", json!({"toml": "  "}));
        assert_eq!(e, "invalid argument `toml`: must not be empty");
    }

    #[test]
    fn rejects_unknown_tool_and_unknown_argument() {
        assert_eq!(refusal("explode", json!({})), "unknown tool \"explode\"");
        assert_eq!(
            refusal("run_status", json!({"run_id": 1, "verbose": true})),
            "unknown argument `verbose`"
        );
    }

    #[test]
    fn run_id_accepts_whole_floats() {
        assert_eq!(
            parse("run_status", &args(json!({"run_id": 3.0}))).unwrap(),
            ToolCall::RunStatus { run_id: 3 }
        );
    }

    #[test]
    fn rejects_missing_fractional_or_non_positive_run_id() {
        assert_eq!(
            refusal("run_status", json!({})),
            "invalid argument `run_id`: required"
        );
        assert_eq!(
            refusal("stop_run", json!({"run_id": 1.5})),
            "invalid argument `run_id`: must be an integer, got 1.5"
        );
        assert_eq!(
            refusal("get_report", json!({"run_id": "7"})),
            "invalid argument `run_id`: must be an integer, got \"7\""
        );
        assert_eq!(
            refusal("compare_runs", json!({"run_id": 2, "baseline_id": 0})),
            "invalid argument `baseline_id`: must be a run id (1 or more), got 0"
        );
    }

    #[test]
    fn list_runs_defaults_and_bounds() {
        assert_eq!(
            parse("list_runs", &Map::new()).unwrap(),
            ToolCall::ListRuns {
                limit: LIST_DEFAULT_LIMIT,
                status: None
            }
        );
        assert_eq!(
            parse("list_runs", &args(json!({"limit": 5, "status": "failed"}))).unwrap(),
            ToolCall::ListRuns {
                limit: 5,
                status: Some("failed".into())
            }
        );
    }

    #[test]
    fn rejects_list_runs_limit_out_of_range_and_unknown_status() {
        assert_eq!(
            refusal("list_runs", json!({"limit": 0})),
            "invalid argument `limit`: must be 1..=500"
        );
        assert_eq!(
            refusal("list_runs", json!({"limit": 501})),
            "invalid argument `limit`: must be 1..=500"
        );
        assert_eq!(
            refusal("list_runs", json!({"status": "done"})),
            "invalid argument `status`: must be running, completed, stopped or failed"
        );
    }

    #[test]
    fn get_report_summary_defaults_to_false() {
        assert_eq!(
            parse("get_report", &args(json!({"run_id": 4}))).unwrap(),
            ToolCall::GetReport {
                run_id: 4,
                summary: false
            }
        );
    }

    #[test]
    fn rejects_non_boolean_summary() {
        assert_eq!(
            refusal("get_report", json!({"run_id": 4, "summary": "yes"})),
            "invalid argument `summary`: must be true or false, got \"yes\""
        );
    }

    #[test]
    fn capacity_with_url_and_search_settings() {
        let call = parse(
            "capacity",
            &args(
                json!({"url": "http://127.0.0.1:8080/", "slo": "p99<50ms,errors<1%",
                         "start": 100, "max": 5000, "step_duration": "5s", "precision": 0.05}),
            ),
        )
        .unwrap();
        assert_eq!(
            call,
            ToolCall::Capacity(CapacityArgs {
                source: SpecSource::Url("http://127.0.0.1:8080/".into()),
                slo: "p99<50ms,errors<1%".into(),
                start: Some(100.0),
                max: Some(5000.0),
                step_duration: Some("5s".into()),
                precision: Some(0.05),
            })
        );
    }

    #[test]
    fn rejects_capacity_without_slo_or_target() {
        assert_eq!(
            refusal("capacity", json!({"url": "http://127.0.0.1:1/"})),
            "invalid argument `slo`: required, e.g. \"p99<50ms,errors<1%\""
        );
        assert_eq!(
            refusal("capacity", json!({"slo": "p99<50ms"})),
            "give exactly one of `url`, `spec`, `toml`, `path`"
        );
    }

    #[test]
    fn rejects_capacity_non_positive_rates() {
        assert_eq!(
            refusal(
                "capacity",
                json!({"url": "http://127.0.0.1:1/", "slo": "p99<1s", "max": -5})
            ),
            "invalid argument `max`: must be a number above 0, got -5"
        );
        assert_eq!(
            refusal(
                "capacity",
                json!({"url": "http://127.0.0.1:1/", "slo": "p99<1s", "start": "fast"})
            ),
            "invalid argument `start`: must be a number above 0, got \"fast\""
        );
    }
}
