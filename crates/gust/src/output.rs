//! Rendering: text summary, JSON, CSV, HdrHistogram interval log, JUnit, and the
//! live progress line (a consumer of the engine's event stream, like any other UI).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use gust_engine::threshold::Verdict;
use gust_engine::{LatencySummary, LoadModel, PhaseReport, Report, RunConfig, RunEvent, RunSpec};
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;
use serde::Serialize;

/// JSON report schema version; bump on any incompatible change.
pub const JSON_SCHEMA_VERSION: u32 = 1;

pub fn fmt_us(us: f64) -> String {
    if us < 1_000.0 {
        format!("{us:.0}us")
    } else if us < 1_000_000.0 {
        format!("{:.2}ms", us / 1e3)
    } else {
        format!("{:.2}s", us / 1e6)
    }
}

fn fmt_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = b;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.2}{}", UNITS[i])
}

pub fn banner(cfg: &RunConfig) -> String {
    let length = match (cfg.duration, cfg.iterations) {
        (Some(d), Some(n)) => format!("{}s test (at most {n} requests)", d.as_secs_f64()),
        (Some(d), None) => format!("{}s test", d.as_secs_f64()),
        (None, Some(n)) => format!("{n}-request test"),
        (None, None) => "test".into(),
    };
    let model = match &cfg.model {
        LoadModel::Closed {
            concurrency,
            stages,
            ..
        } if stages.is_empty() => {
            format!("closed model, {concurrency} concurrent")
        }
        LoadModel::Closed { concurrency, .. } => {
            format!("closed model, stages up to {concurrency} concurrent")
        }
        LoadModel::Open { rate, stages } if stages.is_empty() => format!(
            "open model, {rate} req/s, {} connections, max {} in flight",
            cfg.connections, cfg.max_in_flight
        ),
        LoadModel::Open { .. } => {
            format!("open model, rate stages, {} connections", cfg.connections)
        }
    };
    let url = format!(
        "{}://{}{}",
        if cfg.target.tls { "https" } else { "http" },
        cfg.target.authority(),
        cfg.target.path
    );
    let segment = match &cfg.model {
        _ if cfg.segment.is_whole() => String::new(),
        LoadModel::Closed { concurrency, .. } => format!(
            "\n  segment {}: {} of the run's {concurrency} slots",
            cfg.segment, cfg.slots
        ),
        LoadModel::Open { .. } => format!("\n  segment {} of the run's schedule", cfg.segment),
    };
    format!(
        "Running {length} @ {url}\n  {model}, {} worker threads{}{segment}",
        cfg.workers,
        if cfg.http2 { ", HTTP/2" } else { "" }
    )
}

fn latency_block(out: &mut String, title: &str, s: &LatencySummary) {
    let _ = writeln!(
        out,
        "  {title:<22} mean {:>9}  stdev {:>9}  min {:>9}  max {:>9}",
        fmt_us(s.mean_us),
        fmt_us(s.stdev_us),
        fmt_us(s.min_us as f64),
        fmt_us(s.max_us as f64)
    );
}

/// One line per phase that happened: DNS (once, before the run), connect and TLS (per
/// new connection), time to first byte (per response).
fn phases_block(out: &mut String, p: &PhaseReport) {
    let _ = writeln!(
        out,
        "  Phases          count        p50        p99        max"
    );
    for (name, s) in p.rows() {
        if s.count == 0 {
            continue;
        }
        let _ = writeln!(
            out,
            "  {name:<10} {:>10} {:>10} {:>10} {:>10}",
            s.count,
            fmt_us(s.p50_us as f64),
            fmt_us(s.p99_us as f64),
            fmt_us(s.max_us as f64)
        );
    }
}

pub fn text(r: &Report, verdicts: &[Verdict]) -> String {
    let mut out = String::new();
    let corrected = r.latency_corrected;
    if corrected {
        latency_block(&mut out, "Latency (corrected)", &r.latency);
        latency_block(&mut out, "Service time", &r.service);
        let _ = writeln!(out, "  Latency distribution   corrected    service");
        for ((label, c), (_, s)) in r.latency.rows().iter().zip(r.service.rows().iter()) {
            let _ = writeln!(
                out,
                "  {label:>8} {:>20} {:>10}",
                fmt_us(*c as f64),
                fmt_us(*s as f64)
            );
        }
    } else {
        latency_block(&mut out, "Latency", &r.latency);
        let _ = writeln!(out, "  Latency distribution");
        for (label, v) in r.latency.rows() {
            let _ = writeln!(out, "  {label:>8} {:>20}", fmt_us(v as f64));
        }
    }
    let _ = writeln!(
        out,
        "  {} requests in {:.2}s, {} read, {} written",
        r.sent,
        r.elapsed_s,
        fmt_bytes(r.bytes_in as f64),
        fmt_bytes(r.bytes_out as f64)
    );
    let _ = writeln!(
        out,
        "  {} responses, {} ok, {} failed ({:.3}% errors), {} dropped, {} cancelled",
        r.responses,
        r.successes,
        r.failures,
        r.error_rate * 100.0,
        r.dropped,
        r.cancelled
    );
    if !r.status.is_empty() {
        let codes: Vec<String> = r.status.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let _ = writeln!(out, "  Status codes: {}", codes.join(", "));
    }
    if !r.errors.is_empty() {
        let errors: Vec<String> = r.errors.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let _ = writeln!(out, "  Errors: {}", errors.join(", "));
    }
    steps_block(&mut out, r);
    let _ = writeln!(
        out,
        "  Connections opened: {}, peak in flight: {}, generator lag mean {} max {}",
        r.connections_opened,
        r.peak_in_flight,
        fmt_us(r.generator_lag.mean_us),
        fmt_us(r.generator_lag.max_us as f64)
    );
    phases_block(&mut out, &r.phases);
    let _ = writeln!(out, "Requests/sec: {:>12.2}", r.rps);
    let secs = r.duration_s.unwrap_or(r.elapsed_s).max(1e-9);
    let _ = writeln!(
        out,
        "Transfer/sec: {:>12}",
        fmt_bytes(r.bytes_in as f64 / secs)
    );
    let per_10k = if r.sent == 0 {
        0.0
    } else {
        r.client_cpu_s * 10_000.0 / r.sent as f64
    };
    let _ = writeln!(
        out,
        "Client CPU:   {:>11.3}s ({per_10k:.3} CPU-s per 10k requests)",
        r.client_cpu_s
    );
    out.push_str(&crate::monitor_output::text(&r.monitor));
    for v in verdicts {
        let _ = writeln!(
            out,
            "Threshold {:<24} {} (actual {:.4}, limit {:.4})",
            v.expr,
            if v.passed { "PASS" } else { "FAIL" },
            v.actual,
            v.limit
        );
    }
    out
}

/// Per-step table of a scenario run (nothing for a plain run).
fn steps_block(out: &mut String, r: &Report) {
    if r.steps.is_empty() {
        return;
    }
    let width = r
        .steps
        .iter()
        .map(|s| s.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        out,
        "  {:<width$} {:>9} {:>9} {:>8} {:>7} {:>8} {:>9} {:>9} {:>9} {:>9}",
        "Step", "sent", "ok", "failed", "checks", "skipped", "p50", "p90", "p99", "max"
    );
    for s in &r.steps {
        let _ = writeln!(
            out,
            "  {:<width$} {:>9} {:>9} {:>8} {:>7} {:>8} {:>9} {:>9} {:>9} {:>9}",
            s.name,
            s.sent,
            s.successes,
            s.failures,
            s.check_failures,
            s.skipped,
            fmt_us(s.latency.p50_us as f64),
            fmt_us(s.latency.p90_us as f64),
            fmt_us(s.latency.p99_us as f64),
            fmt_us(s.latency.max_us as f64)
        );
        let mut details: Vec<String> = s.status.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        details.extend(s.errors.iter().map(|(k, v)| format!("{k}: {v}")));
        if !details.is_empty() {
            let _ = writeln!(out, "  {:<width$}   {}", "", details.join(", "));
        }
    }
    if let Some(i) = &r.iterations {
        let _ = write!(
            out,
            "  Iterations: {} started, {} completed, {} failed",
            i.started, i.completed, i.failed
        );
        if i.data_exhausted > 0 {
            let _ = write!(out, ", data exhausted: {}", i.data_exhausted);
        }
        let _ = writeln!(out);
    }
}

#[derive(Serialize)]
struct JsonOut<'a> {
    schema: &'static str,
    version: u32,
    gust_version: &'static str,
    config: &'a RunSpec,
    report: &'a Report,
    thresholds: &'a [Verdict],
    passed: bool,
}

pub fn json(spec: &RunSpec, r: &Report, verdicts: &[Verdict]) -> Result<String, String> {
    serde_json::to_string_pretty(&JsonOut {
        schema: "gust.report",
        version: JSON_SCHEMA_VERSION,
        gust_version: env!("CARGO_PKG_VERSION"),
        config: spec,
        report: r,
        thresholds: verdicts,
        passed: verdicts.iter().all(|v| v.passed),
    })
    .map_err(|e| e.to_string())
}

pub fn csv(r: &Report) -> String {
    let mut out = String::from(
        "second,sent,responses,successes,failures,dropped,error_rate,bytes_in,p50_us,p90_us,p99_us,max_us,service_p50_us,service_p99_us\n",
    );
    for s in &r.series {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{:.6},{},{},{},{},{},{},{}",
            s.second,
            s.sent,
            s.responses,
            s.successes,
            s.failures,
            s.dropped,
            s.error_rate,
            s.bytes_in,
            s.latency.p50_us,
            s.latency.p90_us,
            s.latency.p99_us,
            s.latency.max_us,
            s.service.p50_us,
            s.service.p99_us
        );
    }
    out
}

/// Per-step results as CSV, one row per step (written next to `--csv FILE` as
/// `FILE.steps.csv` for scenario runs).
pub fn steps_csv(r: &Report) -> String {
    let mut out = String::from(
        "step,sent,responses,successes,failures,check_failures,skipped,error_rate,p50_us,p90_us,p99_us,max_us,mean_us\n",
    );
    for s in &r.steps {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{:.6},{},{},{},{},{:.1}",
            s.name,
            s.sent,
            s.responses,
            s.successes,
            s.failures,
            s.check_failures,
            s.skipped,
            s.error_rate,
            s.latency.p50_us,
            s.latency.p90_us,
            s.latency.p99_us,
            s.latency.max_us,
            s.latency.mean_us
        );
    }
    out
}

/// Write the per-second series to `path` and, for a scenario run, the per-step
/// results next to it (see [`steps_csv_path`]).
/// Writes an output file; the error names it.
pub fn write_file(path: &std::path::Path, contents: impl AsRef<[u8]>) -> Result<(), String> {
    std::fs::write(path, contents).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The exit code of a run or a merge: 0 every threshold passed, 1 one was violated.
pub fn exit_code(verdicts: &[Verdict]) -> std::process::ExitCode {
    if verdicts.iter().all(|v| v.passed) {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    }
}

pub fn write_csv(path: &std::path::Path, r: &Report) -> Result<(), String> {
    write_file(path, csv(r))?;
    if !r.steps.is_empty() {
        write_file(&steps_csv_path(path), steps_csv(r))?;
    }
    Ok(())
}

/// Where the per-step CSV goes: `run.csv` → `run.steps.csv`.
pub fn steps_csv_path(csv: &std::path::Path) -> PathBuf {
    let stem = csv
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    csv.with_file_name(format!("{stem}.steps.csv"))
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub fn junit(r: &Report, verdicts: &[Verdict]) -> String {
    junit_of(&r.url, r.elapsed_s, verdicts)
}

/// JUnit from the report's URL and length: also used for a daemon run, whose report
/// arrives as JSON.
pub fn junit_of(url: &str, elapsed_s: f64, verdicts: &[Verdict]) -> String {
    let failures = verdicts.iter().filter(|v| !v.passed).count();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuite name=\"gust\" tests=\"{}\" failures=\"{failures}\" time=\"{:.3}\">",
        verdicts.len().max(1),
        elapsed_s
    );
    if verdicts.is_empty() {
        let _ = writeln!(
            out,
            "  <testcase classname=\"gust\" name=\"run {}\"/>",
            xml_escape(url)
        );
    }
    for v in verdicts {
        let _ = write!(
            out,
            "  <testcase classname=\"gust.threshold\" name=\"{}\"",
            xml_escape(&v.expr)
        );
        if v.passed {
            out.push_str("/>\n");
        } else {
            let _ = writeln!(
                out,
                "><failure message=\"actual {:.4} violates limit {:.4}\"/></testcase>",
                v.actual, v.limit
            );
        }
    }
    out.push_str("</testsuite>\n");
    out
}

/// Consumes live events: a progress line on a TTY and the HdrHistogram log.
pub struct EventConsumer {
    progress: bool,
    duration: Option<Duration>,
    hdr_log: Option<PathBuf>,
}

impl EventConsumer {
    pub fn new(
        progress: bool,
        duration: Option<Duration>,
        hdr_log: Option<PathBuf>,
    ) -> std::io::Result<Self> {
        Ok(Self {
            progress,
            duration,
            hdr_log,
        })
    }

    pub fn run(self, mut rx: tokio::sync::mpsc::UnboundedReceiver<RunEvent>) -> Result<(), String> {
        let mut file = match &self.hdr_log {
            Some(p) => Some(
                std::fs::File::create(p)
                    .map_err(|e| format!("cannot create {}: {e}", p.display()))?,
            ),
            None => None,
        };
        let mut serializer = V2DeflateSerializer::new();
        let mut writer = match file.as_mut() {
            Some(f) => Some(
                IntervalLogWriterBuilder::new()
                    .add_comment("gust corrected latency, microseconds, one histogram per second")
                    .with_start_time(SystemTime::now())
                    .with_base_time(SystemTime::now())
                    .with_max_value_divisor(1000.0)
                    .begin_log_with(f, &mut serializer)
                    .map_err(|e| e.to_string())?,
            ),
            None => None,
        };
        let mut stderr = std::io::stderr();
        while let Some(event) = rx.blocking_recv() {
            match event {
                RunEvent::Tick(t) if self.progress => {
                    let eta = self
                        .duration
                        .map(|d| format!("/{:.1}s", d.as_secs_f64()))
                        .unwrap_or_default();
                    let _ = write!(
                        stderr,
                        "\r\x1b[2K[{:>5.1}s{eta}] {:>9.0} req/s  p50 {:>8}  p99 {:>8}  errors {:.2}%  in flight {}  dropped {}",
                        t.elapsed_s,
                        t.rps,
                        fmt_us(t.latency.p50_us as f64),
                        fmt_us(t.latency.p99_us as f64),
                        t.totals.error_rate * 100.0,
                        t.in_flight,
                        t.totals.dropped
                    );
                    let _ = stderr.flush();
                }
                RunEvent::Second { sample, latency } => {
                    if let Some(w) = writer.as_mut() {
                        w.write_histogram(
                            &latency,
                            Duration::from_secs(sample.second),
                            Duration::from_secs(1),
                            None,
                        )
                        .map_err(|e| format!("cannot write HdrHistogram log: {e}"))?;
                    }
                }
                RunEvent::Tick(_) => {}
            }
        }
        if self.progress {
            let _ = write!(stderr, "\r\x1b[2K");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_latencies_in_human_units() {
        assert_eq!(fmt_us(950.0), "950us");
        assert_eq!(fmt_us(1_500.0), "1.50ms");
        assert_eq!(fmt_us(2_500_000.0), "2.50s");
    }

    #[test]
    fn junit_marks_violated_thresholds_as_failures() {
        let xml_escape_ok = xml_escape("p99<50ms");
        assert_eq!(xml_escape_ok, "p99&lt;50ms");
    }
}
