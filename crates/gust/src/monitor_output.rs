//! Rendering of the target-monitoring series: a min/mean/max line per series in the
//! text summary, and a long-format CSV (`--monitor-csv`).
//!
//! Long format (one row per point) rather than extra columns of the per-second CSV:
//! the set of series is only known once the target answered, rate and gauge points
//! are stamped differently (interval start vs scrape time), and a spreadsheet or
//! pandas pivots long data in one step.

use std::fmt::Write as _;

use gust_engine::{MonitorReport, MonitorSeries, SeriesKind};

/// `name{a="1",b="2"}`: the series as Prometheus would name it.
pub fn series_label(s: &MonitorSeries) -> String {
    if s.labels.is_empty() {
        return s.name.clone();
    }
    let labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{}{{{}}}", s.name, labels.join(","))
}

/// Min, mean and max of a series' values; `None` without points.
pub fn summary(s: &MonitorSeries) -> Option<(f64, f64, f64)> {
    let values = s.points.iter().map(|p| p[1]);
    let n = s.points.len();
    if n == 0 {
        return None;
    }
    let min = values.clone().fold(f64::INFINITY, f64::min);
    let max = values.clone().fold(f64::NEG_INFINITY, f64::max);
    let mean = values.sum::<f64>() / n as f64;
    Some((min, mean, max))
}

fn fmt_value(v: f64, unit: Option<&str>) -> String {
    if unit == Some("bytes") {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut x = v;
        let mut i = 0;
        while x.abs() >= 1024.0 && i < UNITS.len() - 1 {
            x /= 1024.0;
            i += 1;
        }
        return format!("{x:.1}{}", UNITS[i]);
    }
    if v != 0.0 && (v.abs() >= 1e7 || v.abs() < 1e-3) {
        format!("{v:.3e}")
    } else {
        format!("{v:.2}")
    }
}

/// The text block; empty when no monitor ran.
pub fn text(m: &MonitorReport) -> String {
    let mut out = String::new();
    if m.monitor.is_empty() && m.monitor_sources.is_empty() {
        return out;
    }
    let _ = writeln!(out, "Target monitoring ({} series)", m.monitor.len());
    for src in &m.monitor_sources {
        let _ = write!(
            out,
            "  {}: {} readings, {} failed",
            src.source, src.attempts, src.errors
        );
        if src.malformed_lines > 0 {
            let _ = write!(out, ", {} malformed lines", src.malformed_lines);
        }
        if src.series_dropped > 0 {
            let _ = write!(out, ", {} series over the cap", src.series_dropped);
        }
        if let Some(e) = &src.last_error {
            let _ = write!(out, " (last: {e})");
        }
        out.push('\n');
    }
    let width = m
        .monitor
        .iter()
        .map(|s| series_label(s).chars().count())
        .max()
        .unwrap_or(0)
        .min(72);
    for s in &m.monitor {
        let label = series_label(s);
        let unit = s.unit.as_deref();
        let kind = match s.kind {
            SeriesKind::Rate => "rate",
            SeriesKind::Gauge => "gauge",
        };
        match summary(s) {
            Some((min, mean, max)) => {
                let _ = writeln!(
                    out,
                    "  {label:<width$}  {kind:<5}  min {:>10}  mean {:>10}  max {:>10}  {}",
                    fmt_value(min, unit),
                    fmt_value(mean, unit),
                    fmt_value(max, unit),
                    if unit == Some("bytes") {
                        ""
                    } else {
                        unit.unwrap_or("")
                    }
                );
            }
            None => {
                let _ = writeln!(out, "  {label:<width$}  {kind:<5}  no points");
            }
        }
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// One row per point: `t_s,source,series,name,kind,unit,value`.
pub fn csv(m: &MonitorReport) -> String {
    let mut out = String::from("t_s,source,series,name,kind,unit,value\n");
    for s in &m.monitor {
        let series = csv_field(&series_label(s));
        let source = csv_field(&s.source);
        let kind = match s.kind {
            SeriesKind::Rate => "rate",
            SeriesKind::Gauge => "gauge",
        };
        let unit = csv_field(s.unit.as_deref().unwrap_or(""));
        for [t, v] in &s.points {
            let _ = writeln!(out, "{t:.3},{source},{series},{},{kind},{unit},{v}", s.name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn series() -> MonitorSeries {
        MonitorSeries {
            name: "reqs_total".into(),
            labels: BTreeMap::from([
                ("route".to_string(), "/a,b".to_string()),
                ("code".to_string(), "200".to_string()),
            ]),
            source: "http://127.0.0.1:9/metrics".into(),
            kind: SeriesKind::Rate,
            unit: Some("/s".into()),
            points: vec![[0.0, 10.0], [1.0, 30.0], [2.0, 20.0]],
        }
    }

    #[test]
    fn summarises_min_mean_max() {
        assert_eq!(summary(&series()), Some((10.0, 20.0, 30.0)));
        let mut empty = series();
        empty.points.clear();
        assert_eq!(summary(&empty), None);
        let m = MonitorReport {
            monitor: vec![series()],
            monitor_sources: vec![],
        };
        let text = text(&m);
        assert!(
            text.contains(r#"reqs_total{code="200",route="/a,b"}"#),
            "{text}"
        );
        assert!(text.contains("mean      20.00"), "{text}");
        assert_eq!(super::text(&MonitorReport::default()), "");
    }

    #[test]
    fn writes_long_csv_with_quoted_fields() {
        let m = MonitorReport {
            monitor: vec![series()],
            monitor_sources: vec![],
        };
        let csv = csv(&m);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(
            lines[1],
            r#"0.000,http://127.0.0.1:9/metrics,"reqs_total{code=""200"",route=""/a,b""}",reqs_total,rate,/s,10"#
        );
    }
}
