//! Run configuration: typed, validated once before any thread or socket exists.
//!
//! [`RunSpec::validate`] turns the plain [`RunSpec`](crate::spec::RunSpec) into a
//! [`RunConfig`] or a [`ConfigError`] naming the offending field: it compiles the
//! scenario, the monitor and the request source, and resolves the target. The engine
//! only ever sees `RunConfig`, so it never has to re-check invariants on the hot path.

use std::net::ToSocketAddrs;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub use crate::error::ConfigError;
use crate::monitor::MonitorConfig;
use crate::scenario::Scenario;
use crate::source::{RequestSource, StaticRequest};
use crate::spec::segment::Segment;
use crate::spec::steps::DataMode;
use crate::spec::{
    LoadModel, RunSpec, Stage, SuccessStatus, Target, ThinkTime, TlsOptions, parse_url,
};

/// A validated, resolved run configuration.
#[derive(Clone)]
pub struct RunConfig {
    pub target: Target,
    pub source: Arc<dyn RequestSource>,
    pub model: LoadModel,
    /// `None` only for iteration-bound runs.
    pub duration: Option<Duration>,
    pub iterations: Option<u64>,
    pub workers: usize,
    pub connections: usize,
    pub timeout: Duration,
    pub grace: Duration,
    pub max_body: u64,
    pub max_in_flight: usize,
    pub http2: bool,
    pub no_keepalive: bool,
    pub tls: TlsOptions,
    pub tick: Duration,
    pub success: SuccessStatus,
    /// A compiled scenario replaces the source's one-request-per-slot loop.
    pub scenario: Option<Arc<Scenario>>,
    pub monitor: MonitorConfig,
    /// This process's share of the run; the whole run when alone.
    pub segment: Segment,
    /// Closed model: this process's slots (its segment's share of `concurrency`).
    pub slots: usize,
    /// The wall-clock instant the run starts; `None`: at once.
    pub start_at: Option<SystemTime>,
    /// Whether each live tick carries its histograms: set by a segment that streams
    /// its ticks to a daemon, which merges them (not a spec key: how the run is
    /// watched, not what it sends).
    pub live_histograms: bool,
}

impl std::fmt::Debug for RunConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunConfig")
            .field("target", &self.target)
            .field("model", &self.model)
            .field("duration", &self.duration)
            .field("iterations", &self.iterations)
            .field("workers", &self.workers)
            .field("connections", &self.connections)
            .field("max_in_flight", &self.max_in_flight)
            .finish_non_exhaustive()
    }
}

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_MAX_BODY: u64 = 16 * 1024 * 1024;
pub const DEFAULT_MAX_IN_FLIGHT: usize = 10_000;
pub const DEFAULT_TICK: Duration = Duration::from_millis(250);
/// A safety valve against a typo creating millions of sockets.
pub const MAX_CONNECTIONS: usize = 100_000;

impl RunSpec {
    /// Validate and resolve DNS, using the spec's own method/headers/body.
    pub fn validate(&self) -> Result<RunConfig, ConfigError> {
        self.validate_with_source(None)
    }

    /// Validate and resolve DNS; `source` (if any) replaces the static request.
    pub fn validate_with_source(
        &self,
        source: Option<Arc<dyn RequestSource>>,
    ) -> Result<RunConfig, ConfigError> {
        let mut target = parse_url(&self.url)?;
        let workers = match self.workers {
            Some(0) => return Err(ConfigError::new("workers", "must be at least 1")),
            Some(w) => w,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let timeout = self.timeout.unwrap_or(DEFAULT_TIMEOUT);
        if timeout.is_zero() {
            return Err(ConfigError::new("timeout", "must be positive"));
        }
        let grace = self.grace.unwrap_or(timeout);
        let max_body = self.max_body.unwrap_or(DEFAULT_MAX_BODY);
        let tick = self.tick.unwrap_or(DEFAULT_TICK);
        if tick.is_zero()
            || !Duration::from_secs(1)
                .as_nanos()
                .is_multiple_of(tick.as_nanos())
        {
            return Err(ConfigError::new(
                "tick",
                "must divide one second evenly (e.g. 250ms)",
            ));
        }
        if let Some(0) = self.iterations {
            return Err(ConfigError::new("iterations", "must be at least 1"));
        }
        let success = match &self.success_status {
            Some(s) => SuccessStatus::parse(s)?,
            None => SuccessStatus::default(),
        };
        if self.tls.cert_file.is_some() != self.tls.key_file.is_some() {
            return Err(ConfigError::new(
                "tls",
                "client certificate and key must be given together",
            ));
        }
        if !target.tls
            && (self.tls.ca_file.is_some() || self.tls.cert_file.is_some() || self.tls.insecure)
        {
            return Err(ConfigError::new(
                "tls",
                "TLS options given for an http:// URL",
            ));
        }

        let stages_duration = |stages: &[Stage]| stages.iter().map(|s| s.duration).sum();
        let mut duration = self.duration;
        let mut model = self.model.clone();
        let mut max_in_flight = DEFAULT_MAX_IN_FLIGHT;
        match &mut model {
            LoadModel::Closed {
                concurrency,
                stages,
                think_time,
            } => {
                if self.max_in_flight.is_some() {
                    return Err(ConfigError::new(
                        "max_in_flight",
                        "only applies to the open model (closed concurrency is the bound)",
                    ));
                }
                validate_stages(stages, "stages", |t| t >= 0.0 && t.fract() == 0.0)?;
                if !stages.is_empty() {
                    *concurrency = stages.iter().map(|s| s.target as usize).max().unwrap_or(0);
                    if duration.is_some() {
                        return Err(ConfigError::new(
                            "duration",
                            "is set by the stages; give one or the other",
                        ));
                    }
                    duration = Some(stages_duration(stages));
                }
                if *concurrency == 0 {
                    return Err(ConfigError::new("concurrency", "must be at least 1"));
                }
                if *concurrency > MAX_CONNECTIONS {
                    return Err(ConfigError::new(
                        "concurrency",
                        format!("at most {MAX_CONNECTIONS}"),
                    ));
                }
                if let ThinkTime::Exponential { mean } = think_time
                    && mean.is_zero()
                {
                    return Err(ConfigError::new(
                        "think_time",
                        "exponential mean must be positive",
                    ));
                }
                max_in_flight = *concurrency;
            }
            LoadModel::Open { rate, stages } => {
                if self.iterations.is_some() && self.duration.is_none() && stages.is_empty() {
                    // Fine: the schedule is bounded by the iteration count.
                }
                validate_stages(stages, "stages", |t| t >= 0.0 && t.is_finite())?;
                if !stages.is_empty() {
                    if *rate != 0.0 {
                        return Err(ConfigError::new(
                            "rate",
                            "give either a rate or stages, not both",
                        ));
                    }
                    if duration.is_some() {
                        return Err(ConfigError::new(
                            "duration",
                            "is set by the stages; give one or the other",
                        ));
                    }
                    duration = Some(stages_duration(stages));
                    if stages.iter().all(|s| s.target == 0.0) {
                        return Err(ConfigError::new("stages", "every stage has a rate of 0"));
                    }
                } else if !(rate.is_finite() && *rate > 0.0) {
                    return Err(ConfigError::new(
                        "rate",
                        "must be a positive number of requests per second",
                    ));
                }
                if let Some(m) = self.max_in_flight {
                    if m == 0 {
                        return Err(ConfigError::new("max_in_flight", "must be at least 1"));
                    }
                    max_in_flight = m;
                }
            }
        }
        if duration.is_none() && self.iterations.is_none() {
            return Err(ConfigError::new(
                "duration",
                "a run needs a duration, stages or iterations",
            ));
        }
        if let Some(d) = duration
            && d.is_zero()
        {
            return Err(ConfigError::new("duration", "must be positive"));
        }

        let segment = self.segment.unwrap_or_default();
        let start_at = self.start_at.as_deref().map(parse_start_at).transpose()?;
        // This process's share of the closed model's slots; the model keeps the
        // run-wide count, which the staged profile activates slots against.
        let slots = match &model {
            LoadModel::Closed { concurrency, .. } => {
                let share = share_of(&segment, *concurrency, "concurrency")?;
                if !segment.is_whole() {
                    max_in_flight = share;
                }
                share
            }
            LoadModel::Open { .. } => 0,
        };
        if let Some(m) = self.iterations
            && segment.count_below(m) == 0
        {
            return Err(ConfigError::new(
                "iterations",
                format!("{m} leave segment {segment} none"),
            ));
        }

        let connections = match (&model, self.http2) {
            (LoadModel::Closed { concurrency, .. }, false) => {
                if let Some(c) = self.connections
                    && c != *concurrency
                {
                    return Err(ConfigError::new(
                        "connections",
                        "closed HTTP/1.1 uses one connection per slot; set concurrency instead",
                    ));
                }
                *concurrency
            }
            (LoadModel::Open { .. }, false) => self.connections.unwrap_or(max_in_flight.min(256)),
            (_, true) => self.connections.unwrap_or(workers),
        };
        // Budgets given for the whole run are split like the work; the HTTP/2
        // default (one connection per worker) is already per process.
        let connections = match (&model, self.http2) {
            (LoadModel::Closed { .. }, false) => slots,
            (_, true) if self.connections.is_none() => connections,
            _ => share_of(&segment, connections, "connections")?,
        };
        if let LoadModel::Open { .. } = model {
            max_in_flight = share_of(&segment, max_in_flight, "max_in_flight")?;
        }
        if connections == 0 || connections > MAX_CONNECTIONS {
            return Err(ConfigError::new(
                "connections",
                format!("must be 1..={MAX_CONNECTIONS}"),
            ));
        }

        let monitor =
            MonitorConfig::from_spec(&self.monitor, &self.monitor_metric, &self.monitor_pid)?;

        let (scenario, targets) = crate::scenario::prepare(self, &target, source.is_some())?;
        if let Some(data) = scenario.as_ref().and_then(|s| s.data.as_ref())
            && data.mode != DataMode::Random
        {
            share_of(&segment, data.rows.len(), "data")?;
        }
        let source: Arc<dyn RequestSource> = match source.or(targets) {
            Some(s) => s,
            None => Arc::new(StaticRequest::new(
                &self.method,
                &target.path,
                self.headers.clone(),
                self.body.clone().unwrap_or_default(),
            )?),
        };

        let lookup_started = std::time::Instant::now();
        target.addrs = (target.host.as_str(), target.port)
            .to_socket_addrs()
            .map_err(|e| ConfigError::new("url", format!("cannot resolve {}: {e}", target.host)))?
            .collect();
        target.resolve_time = target
            .host
            .parse::<std::net::IpAddr>()
            .is_err()
            .then(|| lookup_started.elapsed());
        if target.addrs.is_empty() {
            return Err(ConfigError::new(
                "url",
                format!("{} resolved to no address", target.host),
            ));
        }

        Ok(RunConfig {
            target,
            source,
            model,
            duration,
            iterations: self.iterations,
            workers,
            connections,
            timeout,
            grace,
            max_body,
            max_in_flight,
            http2: self.http2,
            no_keepalive: self.no_keepalive,
            tls: self.tls.clone(),
            tick,
            success,
            scenario,
            monitor,
            segment,
            slots,
            start_at,
            live_histograms: false,
        })
    }
}

/// `segment`'s share of `total` items of `field`; a segment left with none is refused.
fn share_of(segment: &Segment, total: usize, field: &'static str) -> Result<usize, ConfigError> {
    let share = segment.count_below(total as u64) as usize;
    if share == 0 {
        return Err(ConfigError::new(
            field,
            format!("{total} leave segment {segment} none"),
        ));
    }
    Ok(share)
}

/// An RFC 3339 instant, e.g. `2026-12-07T10:00:00Z`.
pub fn parse_start_at(text: &str) -> Result<SystemTime, ConfigError> {
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|e| ConfigError::new("start_at", format!("{text:?} is not RFC 3339: {e}")))?;
    Ok(SystemTime::from(at))
}

fn validate_stages(
    stages: &[Stage],
    field: &'static str,
    target_ok: impl Fn(f64) -> bool,
) -> Result<(), ConfigError> {
    for (i, s) in stages.iter().enumerate() {
        if !target_ok(s.target) {
            return Err(ConfigError::new(
                field,
                format!("stage {i}: bad target {}", s.target),
            ));
        }
    }
    if !stages.is_empty() && stages.iter().all(|s| s.duration.is_zero()) {
        return Err(ConfigError::new(field, "total stage duration is zero"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse_stages;

    #[test]
    fn rejects_max_in_flight_with_closed_model() {
        let mut spec = RunSpec::new("http://127.0.0.1:1/", LoadModel::closed(4));
        spec.duration = Some(Duration::from_secs(1));
        spec.max_in_flight = Some(3);
        assert_eq!(spec.validate().unwrap_err().field, "max_in_flight");
    }

    #[test]
    fn rejects_zero_rate_and_missing_duration() {
        let mut spec = RunSpec::new(
            "http://127.0.0.1:1/",
            LoadModel::Open {
                rate: 0.0,
                stages: vec![],
            },
        );
        spec.duration = Some(Duration::from_secs(1));
        assert_eq!(spec.validate().unwrap_err().field, "rate");
        let spec = RunSpec::new("http://127.0.0.1:1/", LoadModel::closed(1));
        assert_eq!(spec.validate().unwrap_err().field, "duration");
    }

    #[test]
    fn rejects_tick_that_does_not_divide_a_second() {
        let mut spec = RunSpec::new("http://127.0.0.1:1/", LoadModel::closed(1));
        spec.duration = Some(Duration::from_secs(1));
        spec.tick = Some(Duration::from_millis(300));
        assert_eq!(spec.validate().unwrap_err().field, "tick");
    }

    #[test]
    fn stages_set_duration_and_peak_concurrency() {
        let mut spec = RunSpec::new(
            "http://127.0.0.1:1/",
            LoadModel::Closed {
                concurrency: 0,
                stages: parse_stages("1s:4,2s:8,1s:0").unwrap(),
                think_time: ThinkTime::None,
            },
        );
        let cfg = spec.validate().unwrap();
        assert_eq!(cfg.duration, Some(Duration::from_secs(4)));
        assert_eq!(cfg.connections, 8);
        spec.duration = Some(Duration::from_secs(1));
        assert_eq!(spec.validate().unwrap_err().field, "duration");
    }
}
