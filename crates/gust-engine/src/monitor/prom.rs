//! The Prometheus text exposition format (version 0.0.4, and the OpenMetrics lines a
//! scrape may carry), parsed as pure functions.
//!
//! A malformed line is skipped and counted, never a panic and never a failed scrape:
//! one exporter bug must not hide every other series of the target.

use std::collections::HashMap;

/// What a `# TYPE` line says about a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
    Summary,
    Untyped,
}

impl MetricType {
    fn parse(text: &str) -> Option<Self> {
        match text {
            "counter" => Some(Self::Counter),
            "gauge" => Some(Self::Gauge),
            "histogram" | "gaugehistogram" => Some(Self::Histogram),
            "summary" => Some(Self::Summary),
            "untyped" | "unknown" => Some(Self::Untyped),
            _ => None,
        }
    }
}

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    /// In the order written; [`series_key`] sorts them.
    pub labels: Vec<(String, String)>,
    pub value: f64,
    /// Milliseconds since the Unix epoch, when the exporter gave one.
    pub timestamp_ms: Option<i64>,
}

/// A parsed scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    pub samples: Vec<Sample>,
    /// Family name → declared type.
    pub types: HashMap<String, MetricType>,
    /// Family name → `# UNIT` (OpenMetrics).
    pub units: HashMap<String, String>,
    /// Lines that could not be parsed (skipped).
    pub malformed: u64,
}

/// Why a sample line was refused (only counted by [`parse`]; the variants keep the
/// unit tests precise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineError {
    BadName,
    UnterminatedLabels,
    BadLabel,
    BadEscape,
    MissingValue,
    BadValue,
    BadTimestamp,
    TrailingGarbage,
}

/// Parses a whole exposition. Never fails: bad lines are counted in `malformed`.
pub fn parse(text: &str) -> Exposition {
    let mut out = Exposition::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            parse_comment(comment.trim_start(), &mut out);
            continue;
        }
        match parse_sample(line) {
            Ok(sample) => out.samples.push(sample),
            Err(_) => out.malformed += 1,
        }
    }
    out
}

fn parse_comment(comment: &str, out: &mut Exposition) {
    let mut words = comment.splitn(3, char::is_whitespace);
    match (words.next(), words.next(), words.next()) {
        (Some("TYPE"), Some(name), Some(kind)) => match MetricType::parse(kind.trim()) {
            Some(t) if is_metric_name(name) => {
                out.types.insert(name.to_string(), t);
            }
            _ => out.malformed += 1,
        },
        (Some("UNIT"), Some(name), Some(unit)) if is_metric_name(name) => {
            out.units.insert(name.to_string(), unit.trim().to_string());
        }
        // HELP, EOF and free-form comments carry nothing a chart needs.
        _ => {}
    }
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

pub fn is_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(is_name_start) && chars.all(is_name_char)
}

/// Parses `name{label="value",...} value [timestamp]`.
pub fn parse_sample(line: &str) -> Result<Sample, LineError> {
    let name_end = line.find(|c: char| !is_name_char(c)).unwrap_or(line.len());
    let name = &line[..name_end];
    if !is_metric_name(name) {
        return Err(LineError::BadName);
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = parse_labels(after, &mut labels)?;
    }
    let mut fields = rest.split_whitespace();
    let value = parse_value(fields.next().ok_or(LineError::MissingValue)?)?;
    let timestamp_ms = match fields.next() {
        None => None,
        // An OpenMetrics exemplar follows the value after " # ".
        Some("#") => None,
        Some(t) => Some(parse_timestamp(t)?),
    };
    match fields.next() {
        None | Some("#") => {}
        Some(_) if timestamp_ms.is_none() => {}
        Some(_) => return Err(LineError::TrailingGarbage),
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
        timestamp_ms,
    })
}

/// Parses the label list after `{`; returns what follows the closing `}`.
fn parse_labels<'a>(
    mut s: &'a str,
    labels: &mut Vec<(String, String)>,
) -> Result<&'a str, LineError> {
    loop {
        s = s.trim_start();
        if let Some(after) = s.strip_prefix('}') {
            return Ok(after);
        }
        if s.is_empty() {
            return Err(LineError::UnterminatedLabels);
        }
        let name_end = s.find(|c: char| !is_name_char(c)).unwrap_or(s.len());
        let name = &s[..name_end];
        if name.is_empty() || !name.starts_with(is_name_start) {
            return Err(LineError::BadLabel);
        }
        s = s[name_end..].trim_start();
        s = s.strip_prefix('=').ok_or(LineError::BadLabel)?.trim_start();
        s = s.strip_prefix('"').ok_or(LineError::BadLabel)?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err(LineError::UnterminatedLabels),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    _ => return Err(LineError::BadEscape),
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.push((name.to_string(), value));
        s = s[end + 1..].trim_start();
        if let Some(after) = s.strip_prefix(',') {
            s = after;
        } else if s.is_empty() {
            return Err(LineError::UnterminatedLabels);
        } else if !s.starts_with('}') {
            return Err(LineError::BadLabel);
        }
    }
}

fn parse_value(text: &str) -> Result<f64, LineError> {
    match text {
        "NaN" => Ok(f64::NAN),
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        // Rust's parser also takes "inf"/"infinity"/"nan" in any case; the format
        // spells them one way only.
        t if t
            .bytes()
            .any(|b| b.is_ascii_alphabetic() && b != b'e' && b != b'E') =>
        {
            Err(LineError::BadValue)
        }
        t => t.parse().map_err(|_| LineError::BadValue),
    }
}

fn parse_timestamp(text: &str) -> Result<i64, LineError> {
    // OpenMetrics writes seconds with a fraction; the 0.0.4 format integer ms.
    if text.contains('.') {
        let secs: f64 = text.parse().map_err(|_| LineError::BadTimestamp)?;
        if !secs.is_finite() {
            return Err(LineError::BadTimestamp);
        }
        return Ok((secs * 1e3).round() as i64);
    }
    text.parse().map_err(|_| LineError::BadTimestamp)
}

/// `name{a="1",b="2"}` with the labels sorted, so one series has one key whatever
/// order the exporter writes them in.
pub fn series_key(name: &str, labels: &[(String, String)]) -> String {
    if labels.is_empty() {
        return name.to_string();
    }
    let mut sorted: Vec<&(String, String)> = labels.iter().collect();
    sorted.sort();
    let body: Vec<String> = sorted
        .iter()
        .map(|(k, v)| {
            let escaped = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{k}=\"{escaped}\"")
        })
        .collect();
    format!("{name}{{{}}}", body.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
# HELP http_requests_total The total number of HTTP requests.
# TYPE http_requests_total counter
http_requests_total{method="post",code="200"} 1027 1395066363000
http_requests_total{method="post",code="400"}    3 1395066363000

# Escaping in label values:
msdos_file_access_time_seconds{path="C:\\DIR\\FILE.TXT",error="Cannot find file:\n\"FILE.TXT\""} 1.458255915e9

# Minimalistic line:
metric_without_timestamp_and_labels 12.47

# A weird metric from before the epoch:
something_weird{problem="division by zero"} +Inf -3982045

# TYPE rpc_duration_seconds summary
rpc_duration_seconds{quantile="0.5"} NaN
rpc_duration_seconds_sum 1.7560473e+07
rpc_duration_seconds_count 2693
"#;

    #[test]
    fn parses_the_reference_example() {
        let e = parse(EXAMPLE);
        assert_eq!(e.malformed, 0);
        assert_eq!(e.samples.len(), 8);
        assert_eq!(e.types["http_requests_total"], MetricType::Counter);
        assert_eq!(e.types["rpc_duration_seconds"], MetricType::Summary);
        let first = &e.samples[0];
        assert_eq!(first.name, "http_requests_total");
        assert_eq!(first.value, 1027.0);
        assert_eq!(first.timestamp_ms, Some(1_395_066_363_000));
        assert_eq!(
            first.labels,
            vec![
                ("method".to_string(), "post".to_string()),
                ("code".to_string(), "200".to_string())
            ]
        );
        let weird = e
            .samples
            .iter()
            .find(|s| s.name == "something_weird")
            .unwrap();
        assert_eq!(weird.value, f64::INFINITY);
        assert_eq!(weird.timestamp_ms, Some(-3_982_045));
        let nan = e
            .samples
            .iter()
            .find(|s| s.name == "rpc_duration_seconds")
            .unwrap();
        assert!(nan.value.is_nan());
    }

    #[test]
    fn unescapes_label_values() {
        let e = parse(EXAMPLE);
        let s = e
            .samples
            .iter()
            .find(|s| s.name == "msdos_file_access_time_seconds")
            .unwrap();
        assert_eq!(s.labels[0].1, "C:\\DIR\\FILE.TXT");
        assert_eq!(s.labels[1].1, "Cannot find file:\n\"FILE.TXT\"");
        assert_eq!(s.value, 1.458255915e9);
    }

    #[test]
    fn a_quoted_brace_or_comma_stays_in_the_label_value() {
        let s = parse_sample(r#"x{a="}, {",b="q\"r"} -Inf"#).unwrap();
        assert_eq!(s.labels[0].1, "}, {");
        assert_eq!(s.labels[1].1, "q\"r");
        assert_eq!(s.value, f64::NEG_INFINITY);
    }

    #[test]
    fn accepts_a_trailing_comma_and_spaces_in_labels() {
        let s = parse_sample(r#"x{ a = "1" , } 2"#).unwrap();
        assert_eq!(s.labels, vec![("a".to_string(), "1".to_string())]);
        assert_eq!(s.value, 2.0);
        assert!(parse_sample("x{} 2").unwrap().labels.is_empty());
    }

    #[test]
    fn reads_openmetrics_timestamps_units_and_exemplars() {
        let e = parse(
            "# TYPE a counter\n# UNIT a_seconds seconds\na_total 5 1700000000.250\n\
             b_total 3 # {trace_id=\"x\"} 1\n# EOF\n",
        );
        assert_eq!(e.malformed, 0);
        assert_eq!(e.samples[0].timestamp_ms, Some(1_700_000_000_250));
        assert_eq!(e.samples[1].value, 3.0);
        assert_eq!(e.units["a_seconds"], "seconds");
    }

    #[test]
    fn counts_malformed_lines_and_keeps_the_rest() {
        let text = "good 1\n\
                    9starts_with_digit 1\n\
                    no_value\n\
                    bad_value abc\n\
                    lower_nan nan\n\
                    unterminated{a=\"1\" 2\n\
                    unquoted{a=1} 2\n\
                    bad_escape{a=\"\\x\"} 2\n\
                    bad_ts 1 12x\n\
                    extra 1 2 3\n\
                    # TYPE good bogus_type\n\
                    also_good{a=\"b\"} 2.5e-3\n";
        let e = parse(text);
        assert_eq!(e.samples.len(), 2, "{:?}", e.samples);
        assert_eq!(e.malformed, 10);
    }

    #[test]
    fn names_each_line_error() {
        assert_eq!(parse_sample("1x 1"), Err(LineError::BadName));
        assert_eq!(
            parse_sample("x{a=\"1\""),
            Err(LineError::UnterminatedLabels)
        );
        assert_eq!(parse_sample("x{=\"1\"} 1"), Err(LineError::BadLabel));
        assert_eq!(parse_sample("x{a=\"\\t\"} 1"), Err(LineError::BadEscape));
        assert_eq!(parse_sample("x"), Err(LineError::MissingValue));
        assert_eq!(parse_sample("x 1.2.3"), Err(LineError::BadValue));
        assert_eq!(parse_sample("x 1 now"), Err(LineError::BadTimestamp));
        assert_eq!(parse_sample("x 1 2 3"), Err(LineError::TrailingGarbage));
    }

    #[test]
    fn series_keys_ignore_label_order_and_escape_values() {
        let a = parse_sample(r#"m{b="2",a="x\"y"} 1"#).unwrap();
        let b = parse_sample(r#"m{a="x\"y",b="2"} 1"#).unwrap();
        assert_eq!(series_key(&a.name, &a.labels), r#"m{a="x\"y",b="2"}"#);
        assert_eq!(
            series_key(&a.name, &a.labels),
            series_key(&b.name, &b.labels)
        );
        assert_eq!(series_key("m", &[]), "m");
    }
}
