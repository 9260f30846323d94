//! Which scraped samples become series, what kind of series, and how a counter
//! becomes a per-second rate. Pure functions over parsed samples.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::prom::{MetricType, is_metric_name};

/// A `monitor_metric` pattern: `*` matches any run of characters, `?` one. It is
/// matched against the sample name (`http_requests_total`) and, for histograms and
/// summaries, the family name too (`http_request_duration_seconds` picks its
/// `_count` and `_sum`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob(String);

impl Glob {
    /// A pattern is a metric name in which `*` and `?` may stand for characters.
    pub fn parse(pattern: &str) -> Result<Self, String> {
        if pattern.is_empty() {
            return Err("empty metric pattern".into());
        }
        // Substitute a name character for each wildcard and check what is left.
        let probe: String = pattern
            .chars()
            .map(|c| if c == '*' || c == '?' { 'a' } else { c })
            .collect();
        if !is_metric_name(&probe) {
            return Err(format!(
                "{pattern:?} is not a metric name or glob ([a-zA-Z_:][a-zA-Z0-9_:]*, with * and ?)"
            ));
        }
        Ok(Self(pattern.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn matches(&self, name: &str) -> bool {
        glob_match(self.0.as_bytes(), name.as_bytes())
    }
}

/// Iterative wildcard match: on a mismatch, retry from the last `*` one character
/// further on (linear in practice, no recursion).
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// How a series is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SeriesKind {
    /// Per-second rate of a monotonic counter over each scrape interval.
    Rate,
    /// The value as scraped.
    Gauge,
}

/// What a sample is, from its family's `# TYPE` (or its name when untyped).
/// `None`: not charted (histogram buckets, summary quantiles, `_created`).
///
/// Histograms and summaries contribute their `_count` and `_sum` as rates (events
/// per second and, for a `_seconds` family, busy seconds per second); buckets and
/// quantiles are skipped: a per-bucket line per second is noise on a chart, and a
/// summary's quantiles are over the exporter's own window, not the run's.
pub fn classify<'a>(
    name: &'a str,
    types: &HashMap<String, MetricType>,
) -> Option<(SeriesKind, &'a str)> {
    if let Some(t) = types.get(name) {
        return match t {
            MetricType::Counter => Some((SeriesKind::Rate, name)),
            MetricType::Gauge => Some((SeriesKind::Gauge, name)),
            MetricType::Untyped if name.ends_with("_total") => Some((SeriesKind::Rate, name)),
            MetricType::Untyped => Some((SeriesKind::Gauge, name)),
            MetricType::Histogram | MetricType::Summary => None,
        };
    }
    for suffix in ["_total", "_count", "_sum", "_bucket", "_created"] {
        let Some(family) = name.strip_suffix(suffix) else {
            continue;
        };
        let Some(t) = types.get(family) else {
            continue;
        };
        return match (t, suffix) {
            (_, "_created") => None,
            (MetricType::Counter | MetricType::Untyped, "_total") => {
                Some((SeriesKind::Rate, family))
            }
            (MetricType::Histogram | MetricType::Summary, "_count" | "_sum") => {
                Some((SeriesKind::Rate, family))
            }
            (MetricType::Histogram | MetricType::Summary, _) => None,
            // A gauge family, or a counter sample with an unexpected suffix.
            (_, _) => Some((SeriesKind::Gauge, family)),
        };
    }
    if name.ends_with("_created") {
        return None;
    }
    if name.ends_with("_total") {
        Some((SeriesKind::Rate, name))
    } else {
        Some((SeriesKind::Gauge, name))
    }
}

/// The unit a chart axis shows: from an OpenMetrics `# UNIT`, else the Prometheus
/// naming convention's base-unit suffix; rates get "/s" appended.
pub fn unit_of(
    name: &str,
    family: &str,
    kind: SeriesKind,
    units: &HashMap<String, String>,
) -> Option<String> {
    let stem = name
        .strip_suffix("_total")
        .or_else(|| name.strip_suffix("_sum"))
        .unwrap_or(name);
    let counts_events = name.ends_with("_count");
    let base = if counts_events {
        None
    } else {
        units.get(family).map(String::as_str).or_else(|| {
            [
                ("_seconds", "s"),
                ("_bytes", "bytes"),
                ("_ratio", "ratio"),
                ("_percent", "%"),
                ("_celsius", "°C"),
            ]
            .iter()
            .find(|(suffix, _)| stem.ends_with(suffix))
            .map(|(_, unit)| *unit)
        })
    };
    match (kind, base) {
        (SeriesKind::Rate, Some(b)) => Some(format!("{b}/s")),
        (SeriesKind::Rate, None) => Some("/s".to_string()),
        (SeriesKind::Gauge, b) => b.map(str::to_string),
    }
}

/// The sample-name patterns of a run; none given means every chartable series.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    pub patterns: Vec<Glob>,
}

impl Selector {
    pub fn selects(&self, name: &str, family: &str) -> bool {
        self.patterns.is_empty()
            || self
                .patterns
                .iter()
                .any(|g| g.matches(name) || g.matches(family))
    }
}

/// One reading of a cumulative value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// Seconds since the run start, when the scrape was sent.
    pub t_s: f64,
    pub value: f64,
    /// The exporter's own timestamp (ms), preferred for the interval when present.
    pub timestamp_ms: Option<i64>,
}

/// The per-second rate between two readings of a counter, or `None` when the
/// interval is empty (an exporter that caches its page repeats its timestamp).
/// A decrease is a counter reset: the increase is the new value (Prometheus' rule).
pub fn counter_rate(prev: Reading, now: Reading) -> Option<f64> {
    let dt = match (prev.timestamp_ms, now.timestamp_ms) {
        (Some(a), Some(b)) => (b - a) as f64 / 1e3,
        _ => now.t_s - prev.t_s,
    };
    if dt.is_nan() || dt <= 0.0 || !prev.value.is_finite() || !now.value.is_finite() {
        return None;
    }
    let increase = if now.value >= prev.value {
        now.value - prev.value
    } else {
        now.value
    };
    Some(increase / dt)
}

/// A monitored series as reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MonitorSeries {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// The scraped URL, or `pid:N` for a sampled process.
    pub source: String,
    pub kind: SeriesKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// `[t_s, value]`, t in seconds since the run start (the axis of the report's
    /// per-second `series`). A rate point is stamped with the start of the interval
    /// it covers, as `series[].second` is; a gauge point with its scrape time.
    pub points: Vec<[f64; 2]>,
}

/// All series of a run, bounded by `cap`.
#[derive(Debug)]
pub struct SeriesSet {
    cap: usize,
    index: HashMap<(String, String), usize>,
    pub series: Vec<MonitorSeries>,
    last: Vec<Option<Reading>>,
    /// Distinct series seen but not kept because `cap` was reached.
    dropped: HashSet<(String, String)>,
}

/// One observation handed to [`SeriesSet::observe`].
#[derive(Debug, Clone)]
pub struct Observation<'a> {
    pub source: &'a str,
    pub name: &'a str,
    pub labels: &'a [(String, String)],
    pub kind: SeriesKind,
    pub unit: Option<String>,
    pub reading: Reading,
}

impl SeriesSet {
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            index: HashMap::new(),
            series: Vec::new(),
            last: Vec::new(),
            dropped: HashSet::new(),
        }
    }

    /// Series of `source` not kept because the cap was reached.
    pub fn dropped_from(&self, source: &str) -> u64 {
        self.dropped.iter().filter(|(s, _)| s == source).count() as u64
    }

    /// Records one reading. Non-finite gauge values are skipped (JSON has no NaN);
    /// a counter's first reading only sets the base of its first rate.
    pub fn observe(&mut self, o: Observation<'_>) {
        let key = (
            o.source.to_string(),
            super::prom::series_key(o.name, o.labels),
        );
        let i = match self.index.get(&key) {
            Some(&i) => i,
            None => {
                if self.series.len() >= self.cap {
                    self.dropped.insert(key);
                    return;
                }
                let i = self.series.len();
                self.series.push(MonitorSeries {
                    name: o.name.to_string(),
                    labels: o.labels.iter().cloned().collect(),
                    source: o.source.to_string(),
                    kind: o.kind,
                    unit: o.unit,
                    points: Vec::new(),
                });
                self.last.push(None);
                self.index.insert(key, i);
                i
            }
        };
        let now = o.reading;
        match self.series[i].kind {
            SeriesKind::Gauge => {
                if now.value.is_finite() {
                    self.series[i].points.push([now.t_s, now.value]);
                }
            }
            SeriesKind::Rate => {
                if let Some(prev) = self.last[i] {
                    match counter_rate(prev, now) {
                        Some(rate) => self.series[i].points.push([prev.t_s, rate]),
                        // Same exporter timestamp: keep the older base.
                        None if now.value.is_finite() => return,
                        None => {}
                    }
                }
                if now.value.is_finite() {
                    self.last[i] = Some(now);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(pairs: &[(&str, MetricType)]) -> HashMap<String, MetricType> {
        pairs.iter().map(|(n, t)| (n.to_string(), *t)).collect()
    }

    #[test]
    fn globs_match_names() {
        let g = Glob::parse("warrant_*").unwrap();
        assert!(g.matches("warrant_http_requests_total"));
        assert!(g.matches("warrant_"));
        assert!(!g.matches("process_cpu_seconds_total"));
        let g = Glob::parse("*_total").unwrap();
        assert!(g.matches("a_total") && !g.matches("a_total_x"));
        let g = Glob::parse("a?c*d").unwrap();
        assert!(g.matches("abcd") && g.matches("axcxxd") && !g.matches("acd"));
        let g = Glob::parse("exact").unwrap();
        assert!(g.matches("exact") && !g.matches("exactly"));
        assert!(Glob::parse("*").unwrap().matches("anything"));
        assert!(Glob::parse("*a*a*a").unwrap().matches("aaaa"));
        assert!(!Glob::parse("*a*a*b").unwrap().matches("aaaa"));
    }

    #[test]
    fn rejects_bad_globs() {
        assert!(Glob::parse("").is_err());
        assert!(Glob::parse("warrant-*").is_err());
        assert!(Glob::parse("a{b=\"c\"}").is_err());
        assert!(Glob::parse("9lives").is_err());
        assert!(Glob::parse("[ab]").is_err());
    }

    #[test]
    fn classifies_by_type_then_by_name() {
        let t = types(&[
            ("reqs_total", MetricType::Counter),
            ("om", MetricType::Counter),
            ("temp", MetricType::Gauge),
            ("dur_seconds", MetricType::Histogram),
            ("rpc", MetricType::Summary),
        ]);
        assert_eq!(
            classify("reqs_total", &t),
            Some((SeriesKind::Rate, "reqs_total"))
        );
        assert_eq!(classify("om_total", &t), Some((SeriesKind::Rate, "om")));
        assert_eq!(classify("om_created", &t), None);
        assert_eq!(classify("temp", &t), Some((SeriesKind::Gauge, "temp")));
        assert_eq!(
            classify("dur_seconds_count", &t),
            Some((SeriesKind::Rate, "dur_seconds"))
        );
        assert_eq!(
            classify("dur_seconds_sum", &t),
            Some((SeriesKind::Rate, "dur_seconds"))
        );
        assert_eq!(classify("dur_seconds_bucket", &t), None);
        assert_eq!(classify("rpc", &t), None, "summary quantiles are skipped");
        assert_eq!(classify("rpc_count", &t), Some((SeriesKind::Rate, "rpc")));
        // Untyped: the name decides.
        assert_eq!(classify("x_total", &t), Some((SeriesKind::Rate, "x_total")));
        assert_eq!(classify("x", &t), Some((SeriesKind::Gauge, "x")));
        assert_eq!(classify("x_created", &t), None);
    }

    #[test]
    fn units_follow_the_naming_convention() {
        let none = HashMap::new();
        assert_eq!(
            unit_of("a_total", "a_total", SeriesKind::Rate, &none).as_deref(),
            Some("/s")
        );
        assert_eq!(
            unit_of(
                "cpu_seconds_total",
                "cpu_seconds_total",
                SeriesKind::Rate,
                &none
            )
            .as_deref(),
            Some("s/s")
        );
        assert_eq!(
            unit_of("d_seconds_count", "d_seconds", SeriesKind::Rate, &none).as_deref(),
            Some("/s")
        );
        assert_eq!(
            unit_of("rss_bytes", "rss_bytes", SeriesKind::Gauge, &none).as_deref(),
            Some("bytes")
        );
        assert_eq!(unit_of("queue", "queue", SeriesKind::Gauge, &none), None);
        let declared: HashMap<String, String> = [("q".to_string(), "items".to_string())].into();
        assert_eq!(
            unit_of("q", "q", SeriesKind::Gauge, &declared).as_deref(),
            Some("items")
        );
    }

    #[test]
    fn a_selector_matches_sample_or_family_and_defaults_to_all() {
        let all = Selector::default();
        assert!(all.selects("anything", "anything"));
        let s = Selector {
            patterns: vec![Glob::parse("dur_seconds").unwrap()],
        };
        assert!(s.selects("dur_seconds_count", "dur_seconds"));
        assert!(!s.selects("other_total", "other_total"));
    }

    fn r(t_s: f64, value: f64) -> Reading {
        Reading {
            t_s,
            value,
            timestamp_ms: None,
        }
    }

    #[test]
    fn counter_rates_use_the_interval_and_survive_resets() {
        assert_eq!(counter_rate(r(0.0, 10.0), r(2.0, 30.0)), Some(10.0));
        assert_eq!(counter_rate(r(0.0, 10.0), r(1.0, 4.0)), Some(4.0), "reset");
        assert_eq!(
            counter_rate(r(1.0, 1.0), r(1.0, 2.0)),
            None,
            "empty interval"
        );
        assert_eq!(counter_rate(r(0.0, f64::NAN), r(1.0, 2.0)), None);
        let a = Reading {
            t_s: 0.0,
            value: 0.0,
            timestamp_ms: Some(1_000),
        };
        let b = Reading {
            t_s: 3.0,
            value: 5.0,
            timestamp_ms: Some(1_500),
        };
        assert_eq!(counter_rate(a, b), Some(10.0), "exporter time wins");
    }

    fn obs<'a>(name: &'a str, kind: SeriesKind, t_s: f64, value: f64) -> Observation<'a> {
        Observation {
            source: "http://x/metrics",
            name,
            labels: &[],
            kind,
            unit: None,
            reading: r(t_s, value),
        }
    }

    #[test]
    fn a_series_set_turns_counters_into_rates_and_keeps_gauges() {
        let mut set = SeriesSet::new(10);
        for (t, v) in [(0.0, 100.0), (1.0, 150.0), (2.0, 250.0)] {
            set.observe(obs("c_total", SeriesKind::Rate, t, v));
            set.observe(obs("g", SeriesKind::Gauge, t, v));
        }
        set.observe(obs("g", SeriesKind::Gauge, 3.0, f64::NAN));
        assert_eq!(set.series[0].points, vec![[0.0, 50.0], [1.0, 100.0]]);
        assert_eq!(
            set.series[1].points,
            vec![[0.0, 100.0], [1.0, 150.0], [2.0, 250.0]]
        );
    }

    #[test]
    fn a_repeated_exporter_timestamp_keeps_the_older_base() {
        let mut set = SeriesSet::new(10);
        let mut at = |t_s: f64, value: f64, ts: i64| {
            let mut o = obs("c_total", SeriesKind::Rate, t_s, value);
            o.reading.timestamp_ms = Some(ts);
            set.observe(o);
        };
        at(0.0, 0.0, 0);
        at(1.0, 0.0, 0);
        at(2.0, 20.0, 2_000);
        assert_eq!(set.series[0].points, vec![[0.0, 10.0]]);
    }

    #[test]
    fn the_cap_bounds_series_and_counts_the_rest() {
        let mut set = SeriesSet::new(2);
        for t in 0..3 {
            for name in ["a", "b", "c", "d"] {
                set.observe(obs(name, SeriesKind::Gauge, f64::from(t), 1.0));
            }
        }
        assert_eq!(set.series.len(), 2);
        assert_eq!(set.dropped_from("http://x/metrics"), 2);
        assert_eq!(set.dropped_from("pid:1"), 0);
    }
}
