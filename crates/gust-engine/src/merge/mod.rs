//! Merging the reports of a run's segments into the report one process would
//! have written for the whole run (`gust merge`).
//!
//! Counts are summed. Every percentile comes from the segments' histograms added
//! together (never from averaging their percentiles), so it is the run's own: the
//! corrected latency stays corrected, because each segment measured its requests
//! from their intended send times on the one schedule. The per-second series are
//! merged by wall-clock second: each segment's report says when its second 0
//! began (`started_at_ms`).
//!
//! Refused: reports that are not segments, segments of different runs (URL, model,
//! duration, steps), segments of different periods (which split the run two ways),
//! overlapping segments, and (unless partial merges are asked for) segments that
//! leave part of the run out.

pub mod live;

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

use crate::metrics::steps::{IterationSummary, StepReport};
use crate::metrics::{
    IntervalHistograms, LagSummary, LatencySummary, PhaseReport, QuickPercentiles,
    SecondHistograms, SecondSample, decode_histogram, encode_histogram, error_rate, new_histogram,
};
use crate::monitor::{MonitorReport, SourceStats};
use crate::report::{Histograms, Report};
use crate::spec::segment::Segment;

/// One segment's report and the file it came from (named in every refusal).
#[derive(Debug, Clone)]
pub struct Part {
    pub name: String,
    pub report: Report,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    #[error("nothing to merge")]
    Empty,
    #[error("{file}: not a segment's report (it has no \"segment\": run it with --segment)")]
    NotASegment { file: String },
    #[error("{file}: segment {segment:?}: {reason}")]
    BadSegment {
        file: String,
        segment: String,
        reason: String,
    },
    #[error("{file}: the report has no histograms to merge")]
    NoHistograms { file: String },
    #[error("{file}: {what} is not an encoded histogram")]
    BadHistogram { file: String, what: String },
    #[error("{first} and {second} are segments of different runs: their {what} differ")]
    Differs {
        first: String,
        second: String,
        what: &'static str,
    },
    #[error(
        "{first} and {second} split the run two ways: segments {a} and {b} have different periods (use one n, or one denominator, for every segment)"
    )]
    MixedPeriods {
        first: String,
        second: String,
        a: String,
        b: String,
    },
    #[error("{first} and {second} overlap: segments {a} and {b} share requests")]
    Overlap {
        first: String,
        second: String,
        a: String,
        b: String,
    },
    #[error(
        "the segments ({covered}) leave part of the run out; merge them all, or allow a partial merge"
    )]
    Gap { covered: String },
}

/// A part with its segment and decoded histograms.
struct Decoded<'a> {
    part: &'a Part,
    /// One segment, or those a partial merge held (`"0/4,1/4"`).
    segments: Vec<Segment>,
    /// Whole seconds between the run's earliest origin and this part's.
    offset_s: u64,
    latency: Histogram<u64>,
    service: Histogram<u64>,
    phases: [Histogram<u64>; 4],
    steps: Vec<Histogram<u64>>,
    seconds: BTreeMap<u64, (Histogram<u64>, Histogram<u64>)>,
}

fn decode<'a>(part: &'a Part, origin_ms: u64) -> Result<Decoded<'a>, MergeError> {
    let file = &part.name;
    let r = &part.report;
    let text = r
        .segment
        .as_deref()
        .ok_or_else(|| MergeError::NotASegment { file: file.clone() })?;
    let segments = text
        .split(',')
        .map(|s| {
            Segment::parse(s).map_err(|e| MergeError::BadSegment {
                file: file.clone(),
                segment: text.to_string(),
                reason: e.reason,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let h = r
        .histograms
        .as_ref()
        .ok_or_else(|| MergeError::NoHistograms { file: file.clone() })?;
    let one = |what: &str, text: &str| {
        decode_histogram(text).ok_or_else(|| MergeError::BadHistogram {
            file: file.clone(),
            what: what.to_string(),
        })
    };
    let mut seconds = BTreeMap::new();
    for s in &h.seconds {
        let what = format!("second {}", s.second);
        seconds.insert(
            s.second,
            (
                one(&what, &s.histograms.latency)?,
                one(&what, &s.histograms.service)?,
            ),
        );
    }
    Ok(Decoded {
        part,
        segments,
        offset_s: (r.started_at_ms.saturating_sub(origin_ms) + 500) / 1000,
        latency: one("latency", &h.latency)?,
        service: one("service", &h.service)?,
        phases: [
            one("dns", &h.dns)?,
            one("connect", &h.connect)?,
            one("tls", &h.tls)?,
            one("ttfb", &h.ttfb)?,
        ],
        steps: h
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| one(&format!("step {i}"), s))
            .collect::<Result<_, _>>()?,
        seconds,
    })
}

/// The run's report from its segments' reports. `allow_partial`: merge segments
/// that do not cover the whole run (the result names the segments it holds).
pub fn merge(parts: &[Part], allow_partial: bool) -> Result<Report, MergeError> {
    let first = parts.first().ok_or(MergeError::Empty)?;
    let origin_ms = parts
        .iter()
        .map(|p| p.report.started_at_ms)
        .min()
        .unwrap_or(0);
    let decoded: Vec<Decoded> = parts
        .iter()
        .map(|p| decode(p, origin_ms))
        .collect::<Result<_, _>>()?;
    check_same_run(parts)?;
    let held: Vec<(&Decoded, Segment)> = decoded
        .iter()
        .flat_map(|d| d.segments.iter().map(move |s| (d, *s)))
        .collect();
    for (i, (da, a)) in held.iter().enumerate() {
        for (db, b) in &held[i + 1..] {
            if a.period() != b.period() {
                return Err(MergeError::MixedPeriods {
                    first: da.part.name.clone(),
                    second: db.part.name.clone(),
                    a: a.to_string(),
                    b: b.to_string(),
                });
            }
            if a.overlaps(b) {
                return Err(MergeError::Overlap {
                    first: da.part.name.clone(),
                    second: db.part.name.clone(),
                    a: a.to_string(),
                    b: b.to_string(),
                });
            }
        }
    }
    let mut segments: Vec<Segment> = held.iter().map(|(_, s)| *s).collect();
    segments.sort_by(|a, b| a.bounds_cmp(b));
    let whole = Segment::tile_whole(&segments);
    let covered = segments
        .iter()
        .map(Segment::to_string)
        .collect::<Vec<_>>()
        .join(",");
    if !whole && !allow_partial {
        return Err(MergeError::Gap { covered });
    }

    let sum = |f: fn(&Report) -> u64| parts.iter().map(|p| f(&p.report)).sum::<u64>();
    let latency = add_all(decoded.iter().map(|d| &d.latency));
    let service = add_all(decoded.iter().map(|d| &d.service));
    let phase = |i: usize| add_all(decoded.iter().map(|d| &d.phases[i]));
    let phases = [phase(0), phase(1), phase(2), phase(3)];
    let step_histograms: Vec<Histogram<u64>> = (0..first.report.steps.len())
        .map(|i| add_all(decoded.iter().filter_map(|d| d.steps.get(i))))
        .collect();
    let (series, second_histograms) = merge_series(&decoded);
    let responses = sum(|r| r.responses);
    let successes = sum(|r| r.successes);
    let failures = sum(|r| r.failures);
    let sent = sum(|r| r.sent);
    // Each segment's own sending time, placed on the run's time axis.
    let sending_s = decoded
        .iter()
        .map(|d| {
            let r = &d.part.report;
            let own = if r.rps > 0.0 {
                r.responses as f64 / r.rps
            } else {
                0.0
            };
            d.offset_s as f64 + own
        })
        .fold(0.0, f64::max);
    let lag_weight = sent.max(1) as f64;
    Ok(Report {
        url: first.report.url.clone(),
        model: first.report.model.clone(),
        workers: parts.iter().map(|p| p.report.workers).sum(),
        connections: parts.iter().map(|p| p.report.connections).sum(),
        segment: (!whole).then_some(covered),
        started_at_ms: origin_ms,
        start_late_ms: parts.iter().filter_map(|p| p.report.start_late_ms).max(),
        duration_s: first.report.duration_s,
        elapsed_s: decoded
            .iter()
            .map(|d| d.offset_s as f64 + d.part.report.elapsed_s)
            .fold(0.0, f64::max),
        sent,
        responses,
        successes,
        failures,
        dropped: sum(|r| r.dropped),
        cancelled: sum(|r| r.cancelled),
        error_rate: error_rate(failures, successes),
        rps: if sending_s > 0.0 {
            responses as f64 / sending_s
        } else {
            0.0
        },
        latency: LatencySummary::of(&latency),
        service: LatencySummary::of(&service),
        latency_corrected: first.report.latency_corrected,
        status: add_maps(parts.iter().map(|p| &p.report.status)),
        errors: add_maps(parts.iter().map(|p| &p.report.errors)),
        bytes_in: sum(|r| r.bytes_in),
        bytes_out: sum(|r| r.bytes_out),
        connections_opened: sum(|r| r.connections_opened),
        phases: PhaseReport {
            dns: LatencySummary::of(&phases[0]),
            connect: LatencySummary::of(&phases[1]),
            tls: LatencySummary::of(&phases[2]),
            ttfb: LatencySummary::of(&phases[3]),
        },
        // The segments' peaks need not coincide: their sum bounds the run's peak.
        peak_in_flight: sum(|r| r.peak_in_flight),
        generator_lag: LagSummary {
            mean_us: parts
                .iter()
                .map(|p| p.report.generator_lag.mean_us * p.report.sent as f64)
                .sum::<f64>()
                / lag_weight,
            max_us: parts
                .iter()
                .map(|p| p.report.generator_lag.max_us)
                .max()
                .unwrap_or(0),
        },
        last_send_offset_us: decoded
            .iter()
            .map(|d| d.offset_s * 1_000_000 + d.part.report.last_send_offset_us)
            .max()
            .unwrap_or(0),
        client_cpu_s: parts.iter().map(|p| p.report.client_cpu_s).sum(),
        stopped: parts.iter().any(|p| p.report.stopped),
        series,
        steps: merge_steps(parts, &step_histograms),
        iterations: merge_iterations(parts),
        monitor: merge_monitor(&decoded),
        histograms: (!whole).then(|| Histograms {
            latency: encode_histogram(&latency),
            service: encode_histogram(&service),
            dns: encode_histogram(&phases[0]),
            connect: encode_histogram(&phases[1]),
            tls: encode_histogram(&phases[2]),
            ttfb: encode_histogram(&phases[3]),
            steps: step_histograms.iter().map(encode_histogram).collect(),
            seconds: second_histograms,
        }),
        latency_histogram: latency,
        service_histogram: service,
    })
}

fn check_same_run(parts: &[Part]) -> Result<(), MergeError> {
    let Some(first) = parts.first() else {
        return Ok(());
    };
    let a = &first.report;
    let step_names = |r: &Report| r.steps.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
    for p in &parts[1..] {
        let b = &p.report;
        let what = if a.url != b.url {
            Some("URLs")
        } else if a.model != b.model {
            Some("load models")
        } else if a.duration_s != b.duration_s {
            Some("durations")
        } else if a.latency_corrected != b.latency_corrected {
            Some("latency corrections")
        } else if step_names(a) != step_names(b) {
            Some("scenario steps")
        } else {
            None
        };
        if let Some(what) = what {
            return Err(MergeError::Differs {
                first: first.name.clone(),
                second: p.name.clone(),
                what,
            });
        }
    }
    Ok(())
}

fn add_all<'a>(hs: impl Iterator<Item = &'a Histogram<u64>>) -> Histogram<u64> {
    let mut out = new_histogram();
    for h in hs {
        // Decoded histograms share the run's bounds, so adding cannot fail.
        let _ = out.add(h);
    }
    out
}

fn add_maps<'a>(maps: impl Iterator<Item = &'a BTreeMap<String, u64>>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for m in maps {
        for (k, v) in m {
            *out.entry(k.clone()).or_insert(0) += v;
        }
    }
    out
}

/// The per-second series by wall-clock second, each second's percentiles from its
/// histograms added over the segments.
fn merge_series(decoded: &[Decoded]) -> (Vec<SecondSample>, Vec<SecondHistograms>) {
    let mut by_second: BTreeMap<u64, Vec<(&SecondSample, &Decoded)>> = BTreeMap::new();
    for d in decoded {
        for s in &d.part.report.series {
            by_second
                .entry(d.offset_s + s.second)
                .or_default()
                .push((s, d));
        }
    }
    let mut series = Vec::with_capacity(by_second.len());
    let mut histograms = Vec::with_capacity(by_second.len());
    for (second, samples) in by_second {
        let latency = add_all(
            samples
                .iter()
                .filter_map(|(s, d)| d.seconds.get(&s.second).map(|h| &h.0)),
        );
        let service = add_all(
            samples
                .iter()
                .filter_map(|(s, d)| d.seconds.get(&s.second).map(|h| &h.1)),
        );
        let sum = |f: fn(&SecondSample) -> u64| samples.iter().map(|(s, _)| f(s)).sum::<u64>();
        let (successes, failures) = (sum(|s| s.successes), sum(|s| s.failures));
        series.push(SecondSample {
            second,
            sent: sum(|s| s.sent),
            responses: sum(|s| s.responses),
            successes,
            failures,
            dropped: sum(|s| s.dropped),
            error_rate: error_rate(failures, successes),
            bytes_in: sum(|s| s.bytes_in),
            latency: QuickPercentiles::of(&latency),
            service: QuickPercentiles::of(&service),
            errors: add_maps(samples.iter().map(|(s, _)| &s.errors)),
        });
        histograms.push(SecondHistograms {
            second,
            histograms: IntervalHistograms::of(&latency, &service),
        });
    }
    (series, histograms)
}

fn merge_steps(parts: &[Part], histograms: &[Histogram<u64>]) -> Vec<StepReport> {
    let Some(first) = parts.first() else {
        return Vec::new();
    };
    first
        .report
        .steps
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let all: Vec<&StepReport> =
                parts.iter().filter_map(|p| p.report.steps.get(i)).collect();
            let sum = |f: fn(&StepReport) -> u64| all.iter().map(|s| f(s)).sum::<u64>();
            let latency = histograms.get(i).cloned().unwrap_or_else(new_histogram);
            let (successes, failures) = (sum(|s| s.successes), sum(|s| s.failures));
            StepReport {
                name: step.name.clone(),
                sent: sum(|s| s.sent),
                responses: sum(|s| s.responses),
                successes,
                failures,
                check_failures: sum(|s| s.check_failures),
                skipped: sum(|s| s.skipped),
                error_rate: error_rate(failures, successes),
                status: add_maps(all.iter().map(|s| &s.status)),
                errors: add_maps(all.iter().map(|s| &s.errors)),
                latency: LatencySummary::of(&latency),
                latency_histogram: latency,
            }
        })
        .collect()
}

fn merge_iterations(parts: &[Part]) -> Option<IterationSummary> {
    let all: Vec<&IterationSummary> = parts
        .iter()
        .filter_map(|p| p.report.iterations.as_ref())
        .collect();
    (!all.is_empty()).then(|| IterationSummary {
        started: all.iter().map(|i| i.started).sum(),
        completed: all.iter().map(|i| i.completed).sum(),
        failed: all.iter().map(|i| i.failed).sum(),
        data_exhausted: all.iter().map(|i| i.data_exhausted).sum(),
    })
}

/// Every segment's monitor series on the run's time axis. Segments that watched the
/// same series of the same source (one target's `/metrics`, scraped by each) saw
/// one thing: it is kept once, from the first segment that has it.
fn merge_monitor(decoded: &[Decoded]) -> MonitorReport {
    let mut out = MonitorReport::default();
    let mut seen = std::collections::BTreeSet::new();
    for d in decoded {
        let m = &d.part.report.monitor;
        for series in &m.monitor {
            let key = (
                series.source.clone(),
                series.name.clone(),
                series.labels.clone(),
            );
            if seen.insert(key) {
                let mut s = series.clone();
                for p in &mut s.points {
                    p[0] += d.offset_s as f64;
                }
                out.monitor.push(s);
            }
        }
        for source in &m.monitor_sources {
            match out
                .monitor_sources
                .iter_mut()
                .find(|s| s.source == source.source)
            {
                Some(s) => add_source(s, source),
                None => out.monitor_sources.push(source.clone()),
            }
        }
    }
    out
}

fn add_source(into: &mut SourceStats, from: &SourceStats) {
    into.attempts += from.attempts;
    into.errors += from.errors;
    into.malformed_lines += from.malformed_lines;
    into.series_dropped += from.series_dropped;
    if into.last_error.is_none() {
        into.last_error.clone_from(&from.last_error);
    }
}
