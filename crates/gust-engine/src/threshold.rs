//! Pass/fail thresholds (`p99<50ms`, `errors<0.1%`, `rps>1000`), evaluated against a
//! [`Report`]. Shared by the CLI, the daemon's CI gate and `warrant bench`, so a
//! threshold means the same thing everywhere.

use serde::Serialize;

use crate::config::parse_duration;
use crate::metrics::Report;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Metric {
    /// Latency percentile (corrected in the open model), in µs. Stored as the
    /// quantile × 10⁴ to keep the type `Eq`.
    Latency(u32),
    /// Service-time percentile (from actual send), in µs.
    Service(u32),
    MeanLatency,
    MaxLatency,
    /// Error rate as a fraction.
    Errors,
    /// Dropped requests as a fraction of sent + dropped.
    Dropped,
    Rps,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Op {
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Threshold {
    pub expr: String,
    pub metric: Metric,
    pub op: Op,
    /// In the metric's unit: µs for latencies, a fraction for rates, req/s for rps.
    pub limit: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Verdict {
    pub expr: String,
    pub actual: f64,
    pub limit: f64,
    pub passed: bool,
}

/// Parse `METRIC OP VALUE`. Metrics: `p50`…`p99.99` (also `service_p99`), `mean`,
/// `max`, `errors`, `dropped`, `rps`. Latency values take a unit (`50ms`, `2s`);
/// rates a percent (`0.1%`) or a fraction.
pub fn parse(expr: &str) -> Result<Threshold, String> {
    let compact: String = expr.chars().filter(|c| !c.is_whitespace()).collect();
    let (pos, op, len) = ["<=", ">=", "<", ">"]
        .iter()
        .find_map(|tok| compact.find(tok).map(|p| (p, *tok, tok.len())))
        .ok_or_else(|| format!("threshold {expr:?} needs <, <=, > or >="))?;
    let op = match op {
        "<=" => Op::Le,
        ">=" => Op::Ge,
        "<" => Op::Lt,
        _ => Op::Gt,
    };
    let name = compact[..pos].to_ascii_lowercase();
    let value = &compact[pos + len..];
    let percentile = |p: &str| -> Result<u32, String> {
        let q: f64 = p
            .parse()
            .map_err(|_| format!("bad percentile in {expr:?}"))?;
        if !(0.0..=100.0).contains(&q) {
            return Err(format!("percentile out of range in {expr:?}"));
        }
        Ok((q * 100.0).round() as u32)
    };
    let metric = if let Some(p) = name.strip_prefix("service_p") {
        Metric::Service(percentile(p)?)
    } else if let Some(p) = name.strip_prefix('p') {
        Metric::Latency(percentile(p)?)
    } else {
        match name.as_str() {
            "mean" => Metric::MeanLatency,
            "max" => Metric::MaxLatency,
            "errors" | "error_rate" => Metric::Errors,
            "dropped" => Metric::Dropped,
            "rps" => Metric::Rps,
            _ => return Err(format!("unknown threshold metric {name:?} in {expr:?}")),
        }
    };
    let limit = match metric {
        Metric::Latency(_) | Metric::Service(_) | Metric::MeanLatency | Metric::MaxLatency => {
            if value.chars().all(|c| c.is_ascii_digit() || c == '.') {
                return Err(format!(
                    "latency threshold {expr:?} needs a unit (e.g. 50ms)"
                ));
            }
            parse_duration(value)?.as_secs_f64() * 1e6
        }
        Metric::Errors | Metric::Dropped => match value.strip_suffix('%') {
            Some(p) => {
                p.parse::<f64>()
                    .map_err(|_| format!("bad percent in {expr:?}"))?
                    / 100.0
            }
            None => value.parse().map_err(|_| format!("bad rate in {expr:?}"))?,
        },
        Metric::Rps => value.parse().map_err(|_| format!("bad rps in {expr:?}"))?,
    };
    Ok(Threshold {
        expr: expr.to_string(),
        metric,
        op,
        limit,
    })
}

fn quantile_of(h: &hdrhistogram::Histogram<u64>, q: u32) -> f64 {
    if h.is_empty() {
        0.0
    } else {
        h.value_at_quantile(f64::from(q) / 10_000.0) as f64
    }
}

impl Threshold {
    pub fn actual(&self, r: &Report) -> f64 {
        match self.metric {
            Metric::Latency(q) => quantile_of(&r.latency_histogram, q),
            Metric::Service(q) => quantile_of(&r.service_histogram, q),
            Metric::MeanLatency => r.latency.mean_us,
            Metric::MaxLatency => r.latency.max_us as f64,
            Metric::Errors => r.error_rate,
            Metric::Dropped => {
                let total = r.sent + r.dropped;
                if total == 0 {
                    0.0
                } else {
                    r.dropped as f64 / total as f64
                }
            }
            Metric::Rps => r.rps,
        }
    }

    pub fn check(&self, r: &Report) -> Verdict {
        let actual = self.actual(r);
        let passed = match self.op {
            Op::Lt => actual < self.limit,
            Op::Le => actual <= self.limit,
            Op::Gt => actual > self.limit,
            Op::Ge => actual >= self.limit,
        };
        Verdict {
            expr: self.expr.clone(),
            actual,
            limit: self.limit,
            passed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_latency_rate_and_rps_thresholds() {
        let t = parse("p99 < 50ms").unwrap();
        assert_eq!(
            (t.metric, t.op, t.limit),
            (Metric::Latency(9900), Op::Lt, 50_000.0)
        );
        let t = parse("p99.9<=1s").unwrap();
        assert_eq!(t.metric, Metric::Latency(9990));
        let t = parse("errors<0.1%").unwrap();
        assert!((t.limit - 0.001).abs() < 1e-12);
        let t = parse("rps>1000").unwrap();
        assert_eq!((t.metric, t.op, t.limit), (Metric::Rps, Op::Gt, 1000.0));
        assert_eq!(
            parse("service_p50<2ms").unwrap().metric,
            Metric::Service(5000)
        );
    }

    #[test]
    fn rejects_unknown_metric_missing_operator_and_unitless_latency() {
        assert!(parse("latency<5ms").is_err());
        assert!(parse("p99 50ms").is_err());
        assert!(parse("p99<50").is_err());
        assert!(parse("p101<5ms").is_err());
    }
}
