//! Engine settings a daemon applies to every run (the Vayu engine's knobs): worker
//! threads, a per-host connection limit, the live tick and the largest response body.
//! A run's own spec wins for workers, tick and max body; the connection limit is a
//! ceiling no spec can pass, so one run cannot exhaust the machine's sockets.

use std::time::Duration;

use gust_engine::config::MAX_CONNECTIONS;
use gust_engine::spec::opt_duration_serde;
use gust_engine::{RunConfig, RunSpec};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineLimits {
    /// Most connections one run may open to its target; null = the engine's own cap.
    #[serde(default)]
    pub max_connections_per_host: Option<usize>,
    /// Live tick for runs whose spec sets none; must divide one second.
    #[serde(default, with = "opt_duration_serde")]
    pub tick: Option<Duration>,
    /// Largest response body for runs whose spec sets none, in bytes.
    #[serde(default)]
    pub max_body: Option<u64>,
}

/// Why a setting was refused; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidSetting(pub String);

impl EngineLimits {
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if let Some(c) = self.max_connections_per_host
            && !(1..=MAX_CONNECTIONS).contains(&c)
        {
            return Err(InvalidSetting(format!(
                "invalid max_connections_per_host: must be 1..={MAX_CONNECTIONS}"
            )));
        }
        if let Some(t) = self.tick
            && (t.is_zero()
                || !Duration::from_secs(1)
                    .as_nanos()
                    .is_multiple_of(t.as_nanos()))
        {
            return Err(InvalidSetting(
                "invalid tick: must be positive and divide one second (e.g. 100ms, 250ms, 1s)"
                    .into(),
            ));
        }
        if self.max_body == Some(0) {
            return Err(InvalidSetting(
                "invalid max_body: must be at least 1 byte".into(),
            ));
        }
        Ok(())
    }

    /// Fill what the spec leaves to the daemon.
    pub fn apply_defaults(&self, spec: &mut RunSpec) {
        if spec.tick.is_none() {
            spec.tick = self.tick;
        }
        if spec.max_body.is_none() {
            spec.max_body = self.max_body;
        }
    }

    /// Refuse a validated run that would open more connections than allowed.
    pub fn check(&self, cfg: &RunConfig) -> Result<(), InvalidSetting> {
        match self.max_connections_per_host {
            Some(limit) if cfg.connections > limit => Err(InvalidSetting(format!(
                "connections: the run needs {} connections, over this daemon's \
                 max_connections_per_host of {limit}",
                cfg.connections
            ))),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gust_engine::LoadModel;

    fn closed(concurrency: usize) -> RunSpec {
        let mut spec = RunSpec::new("http://127.0.0.1:1/", LoadModel::closed(concurrency));
        spec.duration = Some(Duration::from_secs(1));
        spec
    }

    #[test]
    fn rejects_a_tick_that_does_not_divide_a_second() {
        let l = EngineLimits {
            tick: Some(Duration::from_millis(300)),
            ..EngineLimits::default()
        };
        assert!(l.validate().unwrap_err().0.contains("tick"));
    }

    #[test]
    fn rejects_zero_limits() {
        let l = EngineLimits {
            max_connections_per_host: Some(0),
            ..EngineLimits::default()
        };
        assert!(
            l.validate()
                .unwrap_err()
                .0
                .contains("max_connections_per_host")
        );
        let l = EngineLimits {
            max_body: Some(0),
            ..EngineLimits::default()
        };
        assert!(l.validate().unwrap_err().0.contains("max_body"));
    }

    #[test]
    fn rejects_a_run_over_the_connection_limit_and_fills_defaults() {
        let l = EngineLimits {
            max_connections_per_host: Some(8),
            tick: Some(Duration::from_millis(100)),
            max_body: Some(1024),
        };
        assert_eq!(l.validate(), Ok(()));
        let mut spec = closed(16);
        l.apply_defaults(&mut spec);
        assert_eq!(spec.tick, Some(Duration::from_millis(100)));
        assert_eq!(spec.max_body, Some(1024));
        let cfg = spec.validate().unwrap();
        assert!(l.check(&cfg).unwrap_err().0.starts_with("connections"));
        let cfg = closed(8).validate().unwrap();
        assert_eq!(l.check(&cfg), Ok(()));
        // A spec's own values win.
        let mut spec = closed(1);
        spec.tick = Some(Duration::from_secs(1));
        l.apply_defaults(&mut spec);
        assert_eq!(spec.tick, Some(Duration::from_secs(1)));
    }
}
