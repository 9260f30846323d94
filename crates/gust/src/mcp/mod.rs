//! `gust mcp`: a Model Context Protocol server on stdio, so a coding agent can start,
//! follow, stop, read and compare load runs and capacity searches.
//!
//! One code path for both modes: every tool is a call to a `gust serve` daemon's REST
//! API through [`DaemonClient`]. With `--daemon URL` that is a running daemon;
//! without it, the same daemon is started in this process on an ephemeral loopback
//! port (its dashboard is there too). Stdout carries only the protocol; logs go to
//! stderr.

mod tools;
mod views;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};

use crate::daemon;
use crate::daemon_client::{DaemonClient, DaemonError};
use tools::{ArgError, CapacityArgs, SpecSource, ToolCall};

#[derive(clap::Args, Debug)]
pub struct McpArgs {
    /// Drive a running `gust serve` at this URL (e.g. http://127.0.0.1:9876) instead
    /// of starting one in this process.
    #[arg(long, conflicts_with = "db")]
    pub daemon: Option<String>,
    /// Bearer token for --daemon (default: env GUST_TOKEN; unused without --daemon).
    #[arg(long, env = "GUST_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// SQLite history of the in-process daemon (without --daemon). Default:
    /// $XDG_DATA_HOME/gust/gust-history.db, else ~/.local/share/gust/gust-history.db.
    #[arg(long)]
    pub db: Option<PathBuf>,
}

pub fn run(args: McpArgs) -> ExitCode {
    match run_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("gust mcp: {message}");
            ExitCode::from(2)
        }
    }
}

fn run_inner(args: McpArgs) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let client = match &args.daemon {
            Some(url) => {
                eprintln!("gust mcp: driving the daemon at {url}");
                DaemonClient::new(url, args.token.clone())
            }
            None => {
                let db = match args.db {
                    Some(db) => db,
                    None => {
                        let db = default_db(
                            std::env::var_os("XDG_DATA_HOME").map(PathBuf::from),
                            std::env::var_os("HOME").map(PathBuf::from),
                        );
                        if let Some(dir) = db.parent().filter(|d| !d.as_os_str().is_empty()) {
                            std::fs::create_dir_all(dir)
                                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                        }
                        db
                    }
                };
                start_in_process(db)?
            }
        };
        let server = GustMcp {
            daemon: Arc::new(client),
        };
        let running = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| format!("MCP session failed to start: {e}"))?;
        running
            .waiting()
            .await
            .map_err(|e| format!("MCP session ended abnormally: {e}"))?;
        Ok(())
    })
}

/// Where the standalone history lives without `--db`: a per-user data directory,
/// not the working directory, which an MCP client may set to `/` or anywhere.
/// Relative or empty variables are ignored, as the XDG spec asks.
fn default_db(xdg_data_home: Option<PathBuf>, home: Option<PathBuf>) -> PathBuf {
    let absolute = |p: Option<PathBuf>| p.filter(|p| p.is_absolute());
    let data =
        absolute(xdg_data_home).or_else(|| absolute(home).map(|h| h.join(".local").join("share")));
    match data {
        Some(dir) => dir.join("gust").join("gust-history.db"),
        None => PathBuf::from("gust-history.db"),
    }
}

/// Starts the daemon on 127.0.0.1:0 inside this process (on the current runtime),
/// guarded by a fresh random token so other local processes cannot drive it.
fn start_in_process(db: PathBuf) -> Result<DaemonClient, String> {
    let token = uuid::Uuid::new_v4().simple().to_string();
    let opts = daemon::ServeOptions {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        db,
        token: Some(token.clone()),
        retention: daemon::store::Retention::default(),
        workers: None,
    };
    let manager = daemon::open_manager(&opts)?;
    let listener = std::net::TcpListener::bind(opts.listen)
        .map_err(|e| format!("cannot listen on {}: {e}", opts.listen))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
    eprintln!(
        "gust mcp: daemon in process, history {}, dashboard http://{addr}/#token={token}",
        opts.db.display()
    );
    tokio::spawn(async move {
        if let Err(e) = daemon::serve_on(listener, manager, opts.token).await {
            eprintln!("gust mcp: the in-process daemon stopped: {e}");
        }
    });
    Ok(DaemonClient::new(&format!("http://{addr}"), Some(token)))
}

/// A tool call that did not succeed: its message is what the agent reads, in a tool
/// result with `isError: true`.
#[derive(Debug)]
enum ToolError {
    Args(ArgError),
    Daemon(DaemonError),
    /// The spec text or file (the named argument) could not be read or parsed.
    Spec {
        field: &'static str,
        reason: String,
    },
    /// `compare_runs` without `baseline_id`, and no run is marked as baseline.
    NoBaseline {
        run_id: i64,
    },
    /// A run without a load report (a capacity search) in `compare_runs`.
    NotComparable {
        run_id: Value,
    },
    /// The daemon's answer lacked a field this tool needs.
    BadAnswer(String),
    /// `POST /capacity` is not an endpoint of this daemon (an older gust).
    NoCapacitySearch {
        base: String,
    },
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Args(e) => e.fmt(f),
            Self::Daemon(e) => e.fmt(f),
            Self::Spec { field, reason } => write!(f, "invalid argument `{field}`: {reason}"),
            Self::NoBaseline { run_id } => write!(
                f,
                "run {run_id} has no baseline: pass `baseline_id`, or mark a finished run \
                 of the same URL as baseline (PUT /runs/ID/baseline or the dashboard)"
            ),
            Self::NotComparable { run_id } => write!(
                f,
                "run {run_id} has no load report to compare (a capacity search?)"
            ),
            Self::BadAnswer(what) => write!(f, "unexpected daemon answer: {what}"),
            Self::NoCapacitySearch { base } => write!(
                f,
                "the daemon at {base} has no capacity search (POST /capacity: not_found); \
                 it runs an older gust"
            ),
        }
    }
}

impl From<DaemonError> for ToolError {
    fn from(e: DaemonError) -> Self {
        Self::Daemon(e)
    }
}

#[derive(Clone)]
struct GustMcp {
    daemon: Arc<DaemonClient>,
}

fn tool_list() -> Vec<Tool> {
    tools::definitions()
        .into_iter()
        .map(|d| {
            let schema = match d.input_schema {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            Tool::new(d.name, d.description, Arc::new(schema))
        })
        .collect()
}

impl ServerHandler for GustMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("gust", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Gust is an HTTP load generator. start_run starts a load test and returns \
                 its id; poll run_status until status is no longer `running`; get_report \
                 reads the result (summary: true for headline numbers); compare_runs \
                 compares with a baseline run; capacity searches the highest rate that \
                 meets an SLO. One run at a time. Load only services you own.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tool_list()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tool_list().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = request.arguments.unwrap_or_default();
        let call = match tools::parse(&request.name, &args) {
            Ok(call) => call,
            // Naming a tool that does not exist is a protocol error (MCP spec);
            // everything else is the tool's answer, for the agent to read.
            Err(e @ ArgError::UnknownTool(_)) => {
                return Err(McpError::invalid_params(e.to_string(), None));
            }
            Err(e) => return Ok(tool_error(&ToolError::Args(e))),
        };
        Ok(match execute(&self.daemon, call).await {
            Ok(value) => CallToolResult::structured(value).into(),
            Err(e) => tool_error(&e),
        })
    }
}

fn tool_error(e: &ToolError) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(e.to_string())]).into()
}

/// Carries a parsed call out against the daemon API.
async fn execute(d: &DaemonClient, call: ToolCall) -> Result<Value, ToolError> {
    match call {
        ToolCall::StartRun(source) => {
            let body = spec_body(source)?;
            let answer = d.post("/runs", Some(&Value::Object(body))).await?;
            let run_id = answer_id(&answer)?;
            Ok(json!({"run_id": run_id, "status": "running"}))
        }
        ToolCall::RunStatus { run_id } => {
            let row = d.get(&format!("/runs/{run_id}")).await?;
            let series = d.get(&format!("/runs/{run_id}/series")).await?;
            let seconds = series["series"].as_array().map_or(&[][..], Vec::as_slice);
            Ok(views::run_status(&row, seconds, daemon::store::now_s()))
        }
        ToolCall::StopRun { run_id } => Ok(d.post(&format!("/runs/{run_id}/stop"), None).await?),
        ToolCall::ListRuns { limit, status } => {
            let mut path = format!("/runs?limit={limit}");
            if let Some(s) = status {
                path.push_str(&format!("&status={s}"));
            }
            let answer = d.get(&path).await?;
            let runs: Vec<Value> = answer["runs"]
                .as_array()
                .ok_or_else(|| ToolError::BadAnswer("GET /runs has no `runs` list".into()))?
                .iter()
                .map(views::run_brief)
                .collect();
            Ok(json!({"runs": runs}))
        }
        ToolCall::GetReport { run_id, summary } => {
            let answer = d.get(&format!("/runs/{run_id}/report")).await?;
            Ok(if summary {
                views::report_summary(&answer)
            } else {
                answer
            })
        }
        ToolCall::CompareRuns {
            run_id,
            baseline_id,
        } => {
            let baseline_id = match baseline_id {
                Some(id) => id,
                None => d.get(&format!("/runs/{run_id}")).await?["baseline_id"]
                    .as_i64()
                    .ok_or(ToolError::NoBaseline { run_id })?,
            };
            let run = d.get(&format!("/runs/{run_id}/report")).await?;
            let baseline = d.get(&format!("/runs/{baseline_id}/report")).await?;
            views::compare(&run, &baseline)
                .map_err(|e| ToolError::NotComparable { run_id: e.run_id })
        }
        ToolCall::Capacity(args) => {
            let body = capacity_body(args)?;
            let answer = match d.post("/capacity", Some(&Value::Object(body))).await {
                Err(e) if e.code() == Some("not_found") => {
                    return Err(ToolError::NoCapacitySearch {
                        base: d.base().to_string(),
                    });
                }
                other => other?,
            };
            let run_id = answer_id(&answer)?;
            Ok(json!({"run_id": run_id, "kind": "capacity", "status": "running"}))
        }
    }
}

/// The new run's id: `{"run_id": N}` (POST /runs) or `{"id": N}` (POST /capacity).
fn answer_id(answer: &Value) -> Result<i64, ToolError> {
    answer["run_id"]
        .as_i64()
        .or_else(|| answer["id"].as_i64())
        .ok_or_else(|| ToolError::BadAnswer(format!("no run id in {answer}")))
}

/// The JSON body for the daemon from where the spec comes. TOML is converted as it
/// is, not checked here: the daemon validates, so whatever it accepts (a scenario
/// included) works the same from here as from `POST /runs`.
fn spec_body(source: SpecSource) -> Result<Map<String, Value>, ToolError> {
    let from_toml = |field: &'static str, text: &str| {
        let table: toml::Table = toml::from_str(text).map_err(|e| ToolError::Spec {
            field,
            reason: format!("not valid TOML: {e}"),
        })?;
        match serde_json::to_value(table) {
            Ok(Value::Object(m)) => Ok(m),
            Ok(_) => Err(ToolError::Spec {
                field,
                reason: "not a TOML table".into(),
            }),
            Err(e) => Err(ToolError::Spec {
                field,
                reason: e.to_string(),
            }),
        }
    };
    match source {
        SpecSource::Json(map) => Ok(map),
        SpecSource::Toml(text) => from_toml("toml", &text),
        SpecSource::Path(path) => {
            let text = std::fs::read_to_string(&path).map_err(|e| ToolError::Spec {
                field: "path",
                reason: format!("cannot read {path}: {e}"),
            })?;
            from_toml("path", &text)
        }
        SpecSource::Url(url) => Ok(Map::from_iter([("url".to_string(), json!(url))])),
    }
}

/// `POST /capacity`'s body: the run-spec fields plus the search settings.
fn capacity_body(args: CapacityArgs) -> Result<Map<String, Value>, ToolError> {
    let mut body = spec_body(args.source)?;
    body.insert("slo".into(), json!(args.slo));
    let settings = [
        ("start", args.start.map(|v| json!(v))),
        ("max", args.max.map(|v| json!(v))),
        ("step_duration", args.step_duration.map(|v| json!(v))),
        ("precision", args.precision.map(|v| json!(v))),
    ];
    for (key, value) in settings {
        if let Some(v) = value {
            body.insert(key.into(), v);
        }
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_spec_becomes_the_json_body() {
        let body = spec_body(SpecSource::Toml(
            "url = \"http://127.0.0.1:1/\"\nmode = \"closed\"\nconcurrency = 2\nduration = \"2s\"\nthresholds = [\"p99<1s\"]\n".into(),
        ))
        .unwrap();
        assert_eq!(
            Value::Object(body),
            json!({"url": "http://127.0.0.1:1/", "mode": "closed", "concurrency": 2,
                   "duration": "2s", "thresholds": ["p99<1s"]})
        );
    }

    #[test]
    fn rejects_toml_that_does_not_parse_naming_the_argument() {
        let e = spec_body(SpecSource::Toml("url = ".into())).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid argument `toml`: not valid TOML"),
            "{e}"
        );
    }

    #[test]
    fn rejects_unreadable_spec_path() {
        let e = spec_body(SpecSource::Path("/nonexistent/gust-spec.toml".into())).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid argument `path`: cannot read /nonexistent/gust-spec.toml"),
            "{e}"
        );
    }

    #[test]
    fn capacity_body_has_spec_fields_and_set_search_settings_only() {
        let body = capacity_body(CapacityArgs {
            source: SpecSource::Url("http://127.0.0.1:8080/".into()),
            slo: "errors<1%".into(),
            start: Some(100.0),
            max: None,
            step_duration: Some("5s".into()),
            precision: None,
        })
        .unwrap();
        assert_eq!(
            Value::Object(body),
            json!({"url": "http://127.0.0.1:8080/", "slo": "errors<1%", "start": 100.0,
                   "step_duration": "5s"})
        );
    }

    #[test]
    fn default_history_is_in_the_user_data_dir() {
        assert_eq!(
            default_db(Some("/x/data".into()), Some("/home/u".into())),
            PathBuf::from("/x/data/gust/gust-history.db")
        );
        assert_eq!(
            default_db(None, Some("/home/u".into())),
            PathBuf::from("/home/u/.local/share/gust/gust-history.db")
        );
        // A relative XDG_DATA_HOME is invalid and ignored.
        assert_eq!(
            default_db(Some("rel".into()), Some("/home/u".into())),
            PathBuf::from("/home/u/.local/share/gust/gust-history.db")
        );
        assert_eq!(default_db(None, None), PathBuf::from("gust-history.db"));
    }

    #[test]
    fn answer_id_reads_either_key() {
        assert_eq!(answer_id(&json!({"run_id": 3})).unwrap(), 3);
        assert_eq!(answer_id(&json!({"id": 4})).unwrap(), 4);
        assert!(matches!(
            answer_id(&json!({})),
            Err(ToolError::BadAnswer(_))
        ));
    }

    #[test]
    fn no_baseline_message_says_how_to_fix_it() {
        let e = ToolError::NoBaseline { run_id: 7 }.to_string();
        assert!(e.contains("baseline_id"), "{e}");
    }
}
