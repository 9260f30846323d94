//! Pass/fail thresholds (`p99<50ms`, `errors<0.1%`, `rps>1000`, and per scenario step
//! `step.login.p99<50ms`), evaluated against a [`Report`]. Shared by the CLI, the daemon's CI gate and `warrant bench`, so a
//! threshold means the same thing everywhere.

use serde::Serialize;

use crate::report::Report;
use crate::spec::parse_duration;

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
    /// `step.NAME.…`: the metric of that scenario step instead of the run's totals.
    pub step: Option<String>,
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
    let (step, name) = match compact[..pos].strip_prefix("step.") {
        Some(rest) => {
            let (step, metric) = rest
                .rsplit_once('.')
                .filter(|(s, _)| !s.is_empty())
                .ok_or_else(|| format!("threshold {expr:?}: expected step.NAME.METRIC"))?;
            // A percentile has a dot of its own (step.a.p99.9).
            let (step, metric) = match step.rsplit_once('.') {
                Some((s, p))
                    if metric.chars().all(|c| c.is_ascii_digit()) && p.starts_with('p') =>
                {
                    (s.to_string(), format!("{p}.{metric}"))
                }
                _ => (step.to_string(), metric.to_string()),
            };
            (Some(step), metric.to_ascii_lowercase())
        }
        None => (None, compact[..pos].to_ascii_lowercase()),
    };
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
    if step.is_some()
        && !matches!(
            metric,
            Metric::Latency(_) | Metric::MeanLatency | Metric::MaxLatency | Metric::Errors
        )
    {
        return Err(format!(
            "threshold {expr:?}: a step threshold takes pNN, mean, max or errors"
        ));
    }
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
        step,
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

/// Refuse thresholds naming a step the scenario does not have (before the run).
pub fn check_step_names(thresholds: &[Threshold], steps: &[String]) -> Result<(), String> {
    for t in thresholds {
        if let Some(step) = &t.step
            && !steps.contains(step)
        {
            return Err(if steps.is_empty() {
                format!(
                    "threshold {:?} names step {step:?} but the run has no steps",
                    t.expr
                )
            } else {
                format!(
                    "threshold {:?} names step {step:?}; the steps are {}",
                    t.expr,
                    steps.join(", ")
                )
            });
        }
    }
    Ok(())
}

impl Threshold {
    pub fn actual(&self, r: &Report) -> f64 {
        if let Some(name) = &self.step {
            // Validated before the run; a report without the step fails the check.
            let Some(s) = r.steps.iter().find(|s| &s.name == name) else {
                return f64::NAN;
            };
            return match self.metric {
                Metric::Latency(q) => quantile_of(&s.latency_histogram, q),
                Metric::MeanLatency => s.latency.mean_us,
                Metric::MaxLatency => s.latency.max_us as f64,
                Metric::Errors => s.error_rate,
                _ => f64::NAN,
            };
        }
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
    fn parses_step_thresholds() {
        let t = parse("step.issue.p99<50ms").unwrap();
        assert_eq!(t.step.as_deref(), Some("issue"));
        assert_eq!(t.metric, Metric::Latency(9900));
        let t = parse("step.log-in.p99.9 < 1s").unwrap();
        assert_eq!(t.step.as_deref(), Some("log-in"));
        assert_eq!(t.metric, Metric::Latency(9990));
        let t = parse("step.Login.errors<1%").unwrap();
        assert_eq!(t.step.as_deref(), Some("Login"));
        assert!((t.limit - 0.01).abs() < 1e-12);
        assert_eq!(parse("p99<1s").unwrap().step, None);
    }

    #[test]
    fn rejects_step_threshold_without_metric_or_with_run_only_metric() {
        assert!(parse("step.issue<5ms").is_err());
        assert!(parse("step..p99<5ms").is_err());
        assert!(parse("step.issue.rps>10").is_err());
        assert!(parse("step.issue.dropped<1%").is_err());
    }

    #[test]
    fn rejects_unknown_step_name_naming_it() {
        let t = vec![parse("step.issue.p99<5ms").unwrap()];
        let e = check_step_names(&t, &["login".to_string()]).unwrap_err();
        assert!(e.contains("\"issue\"") && e.contains("login"), "{e}");
        assert!(check_step_names(&t, &[]).is_err());
        assert!(check_step_names(&t, &["issue".to_string()]).is_ok());
    }

    #[test]
    fn rejects_unknown_metric_missing_operator_and_unitless_latency() {
        assert!(parse("latency<5ms").is_err());
        assert!(parse("p99 50ms").is_err());
        assert!(parse("p99<50").is_err());
        assert!(parse("p101<5ms").is_err());
    }
}
