//! `gust run SPEC.toml [--daemon URL] [--wait] [--json] [--junit FILE]`: the CI gate.
//!
//! Exit codes as for a flag-driven run: 0 every threshold passed, 1 one was violated,
//! 2 the run could not run (bad spec, daemon unreachable or busy, run failed).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use gust_engine::threshold::Verdict;
use serde_json::{Value, json};

use crate::daemon_client::{DaemonClient, DaemonError};
use crate::output;
use crate::spec_file::RunRequest;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Run spec (TOML): the engine's RunSpec keys plus `name` and `thresholds`.
    pub spec: PathBuf,
    /// Daemon base URL (e.g. http://127.0.0.1:9876); without it the run is local.
    #[arg(long)]
    pub daemon: Option<String>,
    /// Bearer token for the daemon (default: env GUST_TOKEN).
    #[arg(long, env = "GUST_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Wait for the daemon run to finish, stream progress, exit with the verdict.
    /// (A local run always waits.)
    #[arg(long)]
    pub wait: bool,
    /// Print the JSON result on stdout.
    #[arg(long)]
    pub json: bool,
    /// Write a JUnit XML report of the thresholds.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Local runs: write the per-second series as CSV, and for a scenario the
    /// per-step results to FILE's name with `.steps.csv`.
    #[arg(long, conflicts_with = "daemon")]
    pub csv: Option<PathBuf>,
    #[command(flatten)]
    pub segment: crate::segment_args::SegmentArgs,
    /// Run this segment here and stream it to the daemon, which shows the segments
    /// that share NAME and --start-at live as one run and keeps their merged
    /// report. Needs --daemon, --segment and --start-at. Exits 0 once the daemon
    /// has the report (with --wait: with the merged run's verdict).
    #[arg(long, value_name = "NAME", requires = "daemon")]
    pub run: Option<String>,
}

pub fn run(args: RunArgs) -> ExitCode {
    match run_inner(&args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("gust run: {message}");
            ExitCode::from(2)
        }
    }
}

fn run_inner(args: &RunArgs) -> Result<ExitCode, String> {
    let text = std::fs::read_to_string(&args.spec)
        .map_err(|e| format!("cannot read {}: {e}", args.spec.display()))?;
    let mut req = RunRequest::from_toml(&text)
        .map_err(|e| format!("invalid spec {}: {e}", args.spec.display()))?;
    if let Some(dir) = args.spec.parent() {
        req.resolve_paths(dir);
    }
    args.segment.apply(&mut req.spec)?;
    // Checked before anything runs or reaches a daemon.
    req.parse_thresholds()?;
    match &args.daemon {
        None => {
            let cfg = req.spec.validate().map_err(|e| e.to_string())?;
            let report = gust_engine::run(cfg).map_err(|e| e.to_string())?;
            let verdicts = print_local(args, &req, &report)?;
            Ok(output::exit_code(&verdicts))
        }
        Some(base) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            match &args.run {
                Some(name) => {
                    req.name = Some(name.clone());
                    rt.block_on(crate::segment_stream::run(args, base, &req))
                }
                None => rt.block_on(remote(args, base.trim_end_matches('/'), &req)),
            }
        }
    }
}

/// A run's own result, as a local run prints and writes it; returns its verdicts.
pub fn print_local(
    args: &RunArgs,
    req: &RunRequest,
    report: &gust_engine::Report,
) -> Result<Vec<Verdict>, String> {
    let thresholds = req.parse_thresholds()?;
    let verdicts: Vec<_> = thresholds.iter().map(|t| t.check(report)).collect();
    if args.json {
        println!("{}", output::json(&req.spec, report, &verdicts)?);
    } else {
        print!("{}", output::text(report, &verdicts));
    }
    write_junit(args, &output::junit(report, &verdicts))?;
    if let Some(path) = &args.csv {
        output::write_csv(path, report)?;
    }
    Ok(verdicts)
}

fn write_junit(args: &RunArgs, xml: &str) -> Result<(), String> {
    match &args.junit {
        Some(path) => output::write_file(path, xml),
        None => Ok(()),
    }
}

async fn remote(args: &RunArgs, base: &str, req: &RunRequest) -> Result<ExitCode, String> {
    let daemon = DaemonClient::new(base, args.token.clone());
    let body = serde_json::to_value(req).map_err(|e| e.to_string())?;
    let body = daemon
        .post("/runs", Some(&body))
        .await
        .map_err(|e| e.to_string())?;
    let run_id = body["run_id"].as_i64().ok_or("daemon returned no run_id")?;
    eprintln!("gust run: run {run_id} started on {base}");
    if !args.wait {
        if args.json {
            println!("{}", json!({"run_id": run_id}));
        }
        return Ok(ExitCode::SUCCESS);
    }
    await_verdict(args, &daemon, run_id, req).await
}

/// Follows a daemon run to its end, prints its result and returns the exit code of
/// its verdict.
pub async fn await_verdict(
    args: &RunArgs,
    daemon: &DaemonClient,
    run_id: i64,
    req: &RunRequest,
) -> Result<ExitCode, String> {
    let complete = follow(daemon, run_id).await?;
    let status = complete["status"].as_str().unwrap_or("failed");
    if status == "failed" {
        return Err(format!(
            "run {run_id} failed: {}",
            complete["reason"].as_str().unwrap_or("no reason given")
        ));
    }
    let verdicts: Vec<Verdict> =
        serde_json::from_value(complete["verdicts"].clone()).map_err(|e| e.to_string())?;
    let report = &complete["report"];
    if args.json {
        let out = json!({
            "schema": "gust.report", "version": output::JSON_SCHEMA_VERSION,
            "run_id": run_id, "status": status, "config": req, "report": report,
            "thresholds": verdicts, "passed": verdicts.iter().all(|v| v.passed),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "run {run_id} {status}: {} responses, {:.1} req/s, p99 {}, errors {:.4}%",
            report["responses"],
            report["rps"].as_f64().unwrap_or(0.0),
            output::fmt_us(
                report
                    .pointer("/latency/p99_us")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0)
            ),
            report["error_rate"].as_f64().unwrap_or(0.0) * 100.0
        );
        for v in &verdicts {
            println!(
                "  {} {} (actual {:.4})",
                if v.passed { "PASS" } else { "FAIL" },
                v.expr,
                v.actual
            );
        }
    }
    write_junit(
        args,
        &output::junit_of(
            report["url"].as_str().unwrap_or(""),
            report["elapsed_s"].as_f64().unwrap_or(0.0),
            &verdicts,
        ),
    )?;
    Ok(output::exit_code(&verdicts))
}

/// Follows the SSE stream to its `complete` event, reconnecting with `Last-Event-ID`
/// if the connection drops. Progress goes to stderr, one line per finished second.
async fn follow(daemon: &DaemonClient, run_id: i64) -> Result<Value, String> {
    let tty = std::io::stderr().is_terminal();
    let mut last_id = String::new();
    for _attempt in 0..10 {
        let mut request = daemon.request(reqwest::Method::GET, &format!("/runs/{run_id}/live"));
        if !last_id.is_empty() {
            request = request.header("Last-Event-ID", &last_id);
        }
        let Ok(mut resp) = request.send().await else {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            continue;
        };
        if !resp.status().is_success() {
            let status = resp.status();
            let body: Value = resp.json().await.unwrap_or(Value::Null);
            return Err(DaemonError::refused(status, &body).to_string());
        }
        let mut parser = SseParser::default();
        while let Ok(Some(chunk)) = resp.chunk().await {
            for ev in parser.feed(&chunk) {
                if let Some(id) = &ev.id {
                    last_id.clone_from(id);
                }
                match ev.event.as_str() {
                    "complete" => {
                        return serde_json::from_str(&ev.data).map_err(|e| e.to_string());
                    }
                    "second" => {
                        if let Ok(s) = serde_json::from_str::<Value>(&ev.data) {
                            let line = format!(
                                "second {:>4}: {} responses, p99 {}, {} failures",
                                s["second"],
                                s["responses"],
                                output::fmt_us(
                                    s.pointer("/latency/p99_us")
                                        .and_then(Value::as_f64)
                                        .unwrap_or(0.0)
                                ),
                                s["failures"]
                            );
                            if tty {
                                eprint!("\r{line}");
                            } else {
                                eprintln!("{line}");
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    Err(format!("lost the live stream of run {run_id}"))
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: String,
    pub data: String,
}

/// Incremental `text/event-stream` parser (the subset axum emits: `id`, `event`,
/// `data`, comments), fed arbitrary chunk boundaries.
#[derive(Default)]
pub struct SseParser {
    buf: Vec<u8>,
    current: SseEvent,
}

impl SseParser {
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=nl).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !self.current.event.is_empty() || !self.current.data.is_empty() {
                    let mut ev = std::mem::take(&mut self.current);
                    if ev.event.is_empty() {
                        ev.event = "message".into();
                    }
                    out.push(ev);
                }
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "id" => self.current.id = Some(value.to_string()),
                "event" => self.current.event = value.to_string(),
                "data" => {
                    if !self.current.data.is_empty() {
                        self.current.data.push('\n');
                    }
                    self.current.data.push_str(value);
                }
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_parser_handles_split_chunks_and_multiline_data() {
        let mut p = SseParser::default();
        let mut evs = p.feed(b"id: 1\nevent: tick\nda");
        assert!(evs.is_empty());
        evs.extend(p.feed(
            b"ta: {\"a\":1}\n\n: keep-alive\n\nid: 2\nevent: complete\ndata: x\ndata: y\n\n",
        ));
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[0].id.as_deref(), Some("1"));
        assert_eq!(evs[0].event, "tick");
        assert_eq!(evs[0].data, "{\"a\":1}");
        assert_eq!(evs[1].data, "x\ny");
    }
}
