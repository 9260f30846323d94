//! `gust capacity URL|SPEC.toml --slo 'p99<50ms,errors<1%'`: the highest open-model
//! rate the target carries within the SLO (search logic: `gust_engine::capacity`).
//!
//! Exit codes: 0 a rate met the SLO, 1 none did, 2 bad input (nothing was sent).

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use gust_engine::capacity::{
    CapacityReport, CapacitySearch, CapacityStep, SearchSettings, Slo, parse_precision,
};
use gust_engine::threshold::{self, Metric, Verdict};
use gust_engine::{LoadModel, RunSpec, parse_duration};

use crate::output::fmt_us;
use crate::spec_file::RunRequest;

#[derive(Args, Debug)]
pub struct CapacityArgs {
    /// Target URL (http:// or https://), or a run spec / scenario TOML file.
    pub target: String,
    /// The SLO every step must meet, e.g. 'p99<50ms,errors<1%' (default: the spec
    /// file's thresholds).
    #[arg(long)]
    pub slo: Option<String>,
    /// First offered rate (req/s).
    #[arg(long, default_value_t = SearchSettings::default().start)]
    pub start: f64,
    /// Highest rate tried (req/s).
    #[arg(long, default_value_t = SearchSettings::default().max)]
    pub max: f64,
    /// Length of each step.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub step_duration: Duration,
    /// Stop once the failing rate is within this of the passing one (5% or 0.05).
    #[arg(long, default_value = "5%")]
    pub precision: String,
    /// At most this many steps.
    #[arg(long, default_value_t = SearchSettings::default().max_steps)]
    pub max_steps: u32,
    /// Rest between steps.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub pause: Duration,
    /// Connection budget.
    #[arg(short = 'c', long = "connections")]
    pub connections: Option<usize>,
    /// Worker threads (default: available cores).
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// HTTP method (URL form only).
    #[arg(short = 'm', long)]
    pub method: Option<String>,
    /// Request header "Name: value" (repeatable; URL form only).
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// Request body (URL form only).
    #[arg(long)]
    pub body: Option<String>,
    /// Per-request timeout.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Bound on outstanding requests; more are dropped and counted.
    #[arg(long)]
    pub max_in_flight: Option<usize>,
    /// Accept any server certificate.
    #[arg(short = 'k', long)]
    pub insecure: bool,
    /// Print the capacity report as JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: CapacityArgs) -> ExitCode {
    let search = match build(&args) {
        Ok(search) => search,
        Err(message) => {
            eprintln!("gust capacity: {message}");
            return ExitCode::from(2);
        }
    };
    if !args.json {
        println!(
            "capacity search: {} · SLO {} · start {} req/s, max {} req/s, {} steps of {}",
            args.target,
            search.slo().exprs().join(", "),
            search.settings().start,
            search.settings().max,
            search.settings().max_steps,
            fmt_duration(search.settings().step_duration),
        );
        println!("{}", table_header());
    }
    let json = args.json;
    let report = search.run(|step| {
        if !json {
            print!("{}", table_row(step));
        }
    });
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gust capacity: {e}");
            return ExitCode::from(2);
        }
    };
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("gust capacity: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print!("{}", summary(&report));
    }
    if report.best_rate.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Flags (and the spec file, if one is given) into a search; validated, DNS resolved.
fn build(a: &CapacityArgs) -> Result<CapacitySearch, String> {
    // Anything with a scheme is a URL (validation names a wrong one); else a file.
    let is_url = a.target.contains("://");
    let (mut spec, spec_thresholds) = if is_url {
        (url_spec(a)?, Vec::new())
    } else {
        if a.method.is_some() || !a.headers.is_empty() || a.body.is_some() {
            return Err("-m, -H and --body apply to a URL; set them in the spec file".into());
        }
        let req = read_spec(Path::new(&a.target))?;
        (req.spec, req.thresholds)
    };
    if a.connections.is_some() {
        spec.connections = a.connections;
    }
    if a.threads.is_some() {
        spec.workers = a.threads;
    }
    if a.timeout.is_some() {
        spec.timeout = a.timeout;
    }
    if a.max_in_flight.is_some() {
        spec.max_in_flight = a.max_in_flight;
    }
    if a.insecure {
        spec.tls.insecure = true;
    }
    let slo = match &a.slo {
        Some(text) => Slo::parse(text),
        None if !spec_thresholds.is_empty() => {
            Slo::from_exprs(spec_thresholds.iter().map(String::as_str))
        }
        None => return Err("--slo is required (e.g. --slo 'p99<50ms,errors<1%')".into()),
    }
    .map_err(|e| e.to_string())?;
    let settings = SearchSettings {
        start: a.start,
        max: a.max,
        precision: parse_precision(&a.precision).map_err(|e| e.to_string())?,
        max_steps: a.max_steps,
        step_duration: a.step_duration,
        pause: a.pause,
        ..SearchSettings::default()
    };
    let search = CapacitySearch::new(spec, slo, settings).map_err(|e| e.to_string())?;
    search.check().map_err(|e| e.to_string())?;
    Ok(search)
}

fn url_spec(a: &CapacityArgs) -> Result<RunSpec, String> {
    let mut spec = RunSpec::new(
        a.target.clone(),
        LoadModel::Open {
            rate: a.start,
            stages: Vec::new(),
        },
    );
    if let Some(m) = &a.method {
        spec.method = m.clone();
    }
    for h in &a.headers {
        let (name, value) = h
            .split_once(':')
            .ok_or_else(|| format!("header {h:?} must be 'Name: value'"))?;
        spec.headers
            .push((name.trim().to_string(), value.trim().to_string()));
    }
    spec.body = a.body.clone().map(String::into_bytes);
    Ok(spec)
}

fn read_spec(path: &Path) -> Result<RunRequest, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    RunRequest::from_toml(&text).map_err(|e| format!("invalid spec {}: {e}", path.display()))
}

fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

fn fmt_rate(r: f64) -> String {
    if r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

fn table_header() -> String {
    format!(
        "{:>4} {:>10} {:>10} {:>9} {:>9} {:>8} {:>8}  result",
        "step", "rate", "achieved", "p50", "p99", "errors", "dropped"
    )
}

/// One step as a table line, followed by one indented line per issue or violation.
fn table_row(s: &CapacityStep) -> String {
    let mut out = format!(
        "{:>4} {:>10} {:>10.1} {:>9} {:>9} {:>7.2}% {:>8}  {}\n",
        s.index,
        fmt_rate(s.rate),
        s.achieved_rps,
        fmt_us(s.p50_us as f64),
        fmt_us(s.p99_us as f64),
        s.error_rate * 100.0,
        s.dropped,
        if s.passed { "pass" } else { "FAIL" },
    );
    for v in s.verdicts.iter().filter(|v| !v.passed) {
        out.push_str(&format!(
            "       ↳ {} violated (actual {})\n",
            v.expr,
            fmt_actual(v)
        ));
    }
    for i in &s.issues {
        out.push_str(&format!("       ↳ {}\n", i.message));
    }
    out
}

/// A verdict's actual value in its metric's unit (the expression says which).
fn fmt_actual(v: &Verdict) -> String {
    match threshold::parse(&v.expr).map(|t| t.metric) {
        Ok(Metric::Errors | Metric::Dropped) => format!("{:.2}%", v.actual * 100.0),
        Ok(Metric::Rps) => format!("{:.1} req/s", v.actual),
        Ok(_) => fmt_us(v.actual),
        Err(_) => v.actual.to_string(),
    }
}

fn summary(r: &CapacityReport) -> String {
    let best = match r.best_rate {
        Some(rate) => format!("best rate: {} req/s met the SLO", fmt_rate(rate)),
        None => "best rate: none (no step met the SLO)".to_string(),
    };
    let failing = r
        .lowest_failing_rate
        .map(|f| format!("; lowest failing {} req/s", fmt_rate(f)))
        .unwrap_or_default();
    let steps = match r.steps.len() {
        1 => "1 step".to_string(),
        n => format!("{n} steps"),
    };
    format!(
        "\n{best}{failing}\nstopped: {} ({steps}, {:.1}s)\n",
        r.stop_reason, r.elapsed_s
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn violated(expr: &str, actual: f64) -> Verdict {
        Verdict {
            expr: expr.into(),
            actual,
            limit: 0.0,
            passed: false,
        }
    }

    #[test]
    fn actual_values_read_in_their_metric_unit() {
        assert_eq!(fmt_actual(&violated("errors<1%", 0.0684)), "6.84%");
        assert_eq!(fmt_actual(&violated("p99<50ms", 73_200.0)), "73.20ms");
        assert_eq!(fmt_actual(&violated("rps>1000", 950.0)), "950.0 req/s");
    }

    #[test]
    fn a_failed_step_lists_its_violations_and_issues() {
        let step = CapacityStep {
            index: 4,
            rate: 4000.0,
            achieved_rps: 3000.0,
            sent: 6000,
            responses: 6000,
            dropped: 0,
            error_rate: 0.475,
            p50_us: 117,
            p99_us: 14_100,
            passed: false,
            verdicts: vec![violated("errors<1%", 0.475)],
            issues: vec![gust_engine::capacity::StepIssue {
                kind: gust_engine::capacity::IssueKind::BelowOfferedRate,
                message: "could not keep up".into(),
            }],
            elapsed_s: 2.0,
        };
        let row = table_row(&step);
        assert!(row.contains("4000") && row.contains("FAIL"), "{row}");
        assert!(row.contains("errors<1% violated (actual 47.50%)"), "{row}");
        assert!(row.contains("↳ could not keep up"), "{row}");
    }
}
