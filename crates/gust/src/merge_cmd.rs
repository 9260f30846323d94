//! `gust merge FILES…`: the JSON reports of a run's segments (`--segment … --json`)
//! merged into one report in the single-run schema (merge logic:
//! `gust_engine::merge`), with the thresholds evaluated on the merged result.
//!
//! Exit codes as for a run: 0 every threshold passed, 1 one was violated, 2 the
//! files could not be merged (unreadable, not segments, of different runs,
//! overlapping, or leaving part of the run out without `--partial`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use gust_engine::merge::{Part, merge};
use gust_engine::threshold::{self, Threshold, Verdict};
use gust_engine::{Report, RunSpec};
use serde::Deserialize;

use crate::output;

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The segments' JSON reports (`gust … --segment i/n --json > FILE`).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Print the merged JSON report on stdout instead of the text summary.
    #[arg(long)]
    pub json: bool,
    /// Also write the merged JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Pass/fail condition on the merged result (repeatable); the thresholds the
    /// segments were run with are evaluated as well.
    #[arg(long = "threshold")]
    pub thresholds: Vec<String>,
    /// Write a JUnit XML report of the thresholds.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Write the merged per-second series as CSV.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Merge segments that leave part of the run out (the report names the ones it
    /// holds, and can be merged again with the rest).
    #[arg(long)]
    pub partial: bool,
}

/// What `gust --json` writes; the parts `merge` reads.
#[derive(Deserialize)]
struct SegmentFile {
    schema: String,
    config: RunSpec,
    report: Report,
    #[serde(default)]
    thresholds: Vec<RecordedVerdict>,
}

#[derive(Deserialize)]
struct RecordedVerdict {
    expr: String,
}

pub fn run(args: MergeArgs) -> ExitCode {
    match run_inner(&args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("gust merge: {message}");
            ExitCode::from(2)
        }
    }
}

fn read(path: &PathBuf) -> Result<SegmentFile, String> {
    let name = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    let file: SegmentFile =
        serde_json::from_str(&text).map_err(|e| format!("{name}: not a gust JSON report: {e}"))?;
    if file.schema != "gust.report" {
        return Err(format!("{name}: schema {:?}, not gust.report", file.schema));
    }
    Ok(file)
}

/// The spec with what differs between segments of one run taken out.
fn run_identity(spec: &RunSpec) -> RunSpec {
    let mut s = spec.clone();
    s.segment = None;
    s.start_at = None;
    // Each process may have its own thread count and its own monitored pids.
    s.workers = None;
    s.monitor_pid.clear();
    s
}

fn run_inner(args: &MergeArgs) -> Result<ExitCode, String> {
    let files: Vec<SegmentFile> = args.files.iter().map(read).collect::<Result<_, _>>()?;
    let names: Vec<String> = args.files.iter().map(|p| p.display().to_string()).collect();
    let first = run_identity(&files[0].config);
    for (file, name) in files.iter().zip(&names).skip(1) {
        if run_identity(&file.config) != first {
            return Err(format!(
                "{} and {name} are segments of different runs: their run specs differ",
                names[0]
            ));
        }
    }
    let mut exprs: Vec<String> = args.thresholds.clone();
    for file in &files {
        for v in &file.thresholds {
            if !exprs.contains(&v.expr) {
                exprs.push(v.expr.clone());
            }
        }
    }
    let thresholds: Vec<Threshold> = exprs
        .iter()
        .map(|t| threshold::parse(t))
        .collect::<Result<_, _>>()?;
    let steps: Vec<String> = first.steps.iter().map(|s| s.name.clone()).collect();
    threshold::check_step_names(&thresholds, &steps)?;

    let parts: Vec<Part> = files
        .into_iter()
        .zip(&names)
        .map(|(f, name)| Part {
            name: name.clone(),
            report: f.report,
        })
        .collect();
    let report = merge(&parts, args.partial).map_err(|e| e.to_string())?;
    let verdicts: Vec<Verdict> = thresholds.iter().map(|t| t.check(&report)).collect();
    let json = output::json(&first, &report, &verdicts)?;
    if args.json {
        println!("{json}");
    } else {
        print!("{}", output::text(&report, &verdicts));
    }
    if let Some(path) = &args.out {
        output::write_file(path, &json)?;
    }
    if let Some(path) = &args.csv {
        output::write_csv(path, &report)?;
    }
    if let Some(path) = &args.junit {
        output::write_file(path, output::junit(&report, &verdicts))?;
    }
    Ok(output::exit_code(&verdicts))
}
