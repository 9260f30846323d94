//! Target monitoring: while a run goes, scrape Prometheus endpoints and sample local
//! processes once a second, on the run's own time axis.
//!
//! The monitor is its own thread (a current-thread tokio runtime), so the workers'
//! hot path never sees it. Its readings become [`MonitorSeries`]: counters (by
//! `# TYPE … counter`, or a `_total` name when untyped) and histogram/summary
//! `_count`/`_sum` are per-second rates; gauges are kept as read; histogram buckets
//! and summary quantiles are skipped. A process gives `process_cpu_percent` (of one
//! core, like `top`) and `process_rss_bytes`.
//!
//! Without `monitor_metric` patterns every chartable series is kept, up to
//! [`MAX_SERIES`] for the run (first come, first kept); the rest are counted per
//! source as `series_dropped`. A failed scrape never fails the run: it is counted in
//! the source's `errors`, with the last reason.
//!
//! Parts: `prom` (the exposition format parser), `select` (patterns, kinds, rates),
//! `process` (`/proc` readings), `scrape` (one HTTP GET).

pub mod process;
pub mod prom;
pub mod scrape;
pub mod select;

use std::net::ToSocketAddrs;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustls_pki_types::ServerName;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_rustls::TlsConnector;

use crate::error::ConfigError;
use crate::spec::{Target, TlsOptions, parse_url};
pub use select::{Glob, MonitorSeries, SeriesKind};
use select::{Observation, Reading, Selector, SeriesSet, classify, unit_of};

/// How often endpoints are scraped and processes sampled.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// Bound on the series of one run (points are bounded by its duration).
pub const MAX_SERIES: usize = 256;
/// A scrape that has not answered by then is counted as an error; the next one
/// starts on time.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_millis(900);

/// Validated monitor settings of a run (empty: no monitor thread).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MonitorConfig {
    /// Prometheus endpoints, parsed and resolved.
    pub endpoints: Vec<(String, Target)>,
    pub selector: Selector,
    pub pids: Vec<u32>,
}

impl MonitorConfig {
    /// Validates `monitor`, `monitor_metric` and `monitor_pid` as a run spec gives them.
    pub fn from_spec(
        urls: &[String],
        metrics: &[String],
        pids: &[u32],
    ) -> Result<Self, ConfigError> {
        let mut endpoints = Vec::with_capacity(urls.len());
        for url in urls {
            let mut target = parse_url(url)
                .map_err(|e| ConfigError::new("monitor", format!("{url:?}: {}", e.reason)))?;
            target.addrs = (target.host.as_str(), target.port)
                .to_socket_addrs()
                .map_err(|e| {
                    ConfigError::new("monitor", format!("cannot resolve {}: {e}", target.host))
                })?
                .collect();
            if target.addrs.is_empty() {
                return Err(ConfigError::new(
                    "monitor",
                    format!("{} resolved to no address", target.host),
                ));
            }
            endpoints.push((url.clone(), target));
        }
        let patterns = metrics
            .iter()
            .map(|m| Glob::parse(m).map_err(|e| ConfigError::new("monitor_metric", e)))
            .collect::<Result<Vec<_>, _>>()?;
        if !patterns.is_empty() && endpoints.is_empty() {
            return Err(ConfigError::new(
                "monitor_metric",
                "selects series of a monitor URL; give one with monitor",
            ));
        }
        for &pid in pids {
            if pid == 0 {
                return Err(ConfigError::new("monitor_pid", "pid 0 is not a process"));
            }
            if !std::path::Path::new(&format!("/proc/{pid}/stat")).exists() {
                return Err(ConfigError::new(
                    "monitor_pid",
                    format!("no process {pid} (reading /proc/{pid}/stat; Linux only)"),
                ));
            }
        }
        Ok(Self {
            endpoints,
            selector: Selector { patterns },
            pids: pids.to_vec(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty() && self.pids.is_empty()
    }
}

/// How one source fared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceStats {
    /// The URL, or `pid:N`.
    pub source: String,
    /// Attempts (scrapes or process readings).
    pub attempts: u64,
    /// Attempts that gave nothing (refused, timed out, non-2xx, process gone).
    pub errors: u64,
    /// Exposition lines skipped as malformed, over every scrape.
    pub malformed_lines: u64,
    /// Distinct series not kept because the run reached [`MAX_SERIES`].
    pub series_dropped: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// What the monitor adds to a [`crate::Report`] (flattened into it; both fields are
/// omitted when no monitor ran).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MonitorReport {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub monitor: Vec<MonitorSeries>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub monitor_sources: Vec<SourceStats>,
}

impl MonitorReport {
    /// Failed scrapes and process readings over every source.
    pub fn errors(&self) -> u64 {
        self.monitor_sources.iter().map(|s| s.errors).sum()
    }
}

/// A running monitor thread.
pub(crate) struct MonitorHandle {
    stop: watch::Sender<bool>,
    thread: JoinHandle<MonitorReport>,
}

impl MonitorHandle {
    /// Stops the monitor (after one last reading if the previous one is more than
    /// half an interval old) and returns its series.
    pub(crate) fn finish(self) -> MonitorReport {
        let _ = self.stop.send(true);
        self.thread.join().unwrap_or_default()
    }
}

/// Starts the monitor thread if `cfg` has anything to watch. `start` is the run's
/// time zero; `tls` verifies https endpoints (the run's CA file / `insecure`).
pub(crate) fn spawn(
    cfg: &MonitorConfig,
    tls: &TlsOptions,
    start: Instant,
) -> Result<Option<MonitorHandle>, ConfigError> {
    if cfg.is_empty() {
        return Ok(None);
    }
    let mut endpoints = Vec::with_capacity(cfg.endpoints.len());
    for (url, target) in &cfg.endpoints {
        let tls = if target.tls {
            let config = crate::transport::tls_config(tls, false)?;
            let name = ServerName::try_from(target.host.clone()).map_err(|_| {
                ConfigError::new(
                    "monitor",
                    format!("{:?} is not a valid TLS server name", target.host),
                )
            })?;
            Some((TlsConnector::from(Arc::new(config)), name))
        } else {
            None
        };
        endpoints.push(Arc::new(scrape::Endpoint {
            url: url.clone(),
            target: target.clone(),
            tls,
        }));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ConfigError::new("monitor", format!("cannot start the monitor: {e}")))?;
    let (stop, stop_rx) = watch::channel(false);
    let state = Monitor::new(&endpoints, cfg.selector.clone(), &cfg.pids);
    let thread = std::thread::Builder::new()
        .name("gust-monitor".into())
        .spawn(move || runtime.block_on(state.run(endpoints, start, stop_rx)))
        .map_err(|e| {
            ConfigError::new("monitor", format!("cannot start the monitor thread: {e}"))
        })?;
    Ok(Some(MonitorHandle { stop, thread }))
}

struct Monitor {
    selector: Selector,
    pids: Vec<(u32, String)>,
    ticks_per_s: u64,
    set: SeriesSet,
    stats: Vec<SourceStats>,
}

impl Monitor {
    fn new(endpoints: &[Arc<scrape::Endpoint>], selector: Selector, pids: &[u32]) -> Self {
        let pids: Vec<(u32, String)> = pids
            .iter()
            .map(|&p| (p, process::name(p).unwrap_or_default()))
            .collect();
        let stats = endpoints
            .iter()
            .map(|e| e.url.clone())
            .chain(pids.iter().map(|(p, _)| format!("pid:{p}")))
            .map(|source| SourceStats {
                source,
                attempts: 0,
                errors: 0,
                malformed_lines: 0,
                series_dropped: 0,
                last_error: None,
            })
            .collect();
        Self {
            selector,
            pids,
            ticks_per_s: process::ticks_per_second(),
            set: SeriesSet::new(MAX_SERIES),
            stats,
        }
    }

    async fn run(
        mut self,
        endpoints: Vec<Arc<scrape::Endpoint>>,
        start: Instant,
        mut stop: watch::Receiver<bool>,
    ) -> MonitorReport {
        let start_tokio = tokio::time::Instant::from_std(start);
        let mut last: Option<Instant> = None;
        for k in 0u32.. {
            let due = start_tokio + INTERVAL * k;
            let stopped = tokio::select! {
                _ = tokio::time::sleep_until(due) => false,
                _ = stop.wait_for(|s| *s) => true,
            };
            if stopped {
                let recent = last.is_some_and(|l| l.elapsed() < INTERVAL / 2);
                if !recent {
                    self.read_all(&endpoints, start).await;
                }
                break;
            }
            last = Some(Instant::now());
            self.read_all(&endpoints, start).await;
        }
        for stat in &mut self.stats {
            stat.series_dropped = self.set.dropped_from(&stat.source);
        }
        MonitorReport {
            monitor: self.set.series,
            monitor_sources: self.stats,
        }
    }

    /// Scrapes every endpoint concurrently and reads every process, all stamped with
    /// the time the round began.
    async fn read_all(&mut self, endpoints: &[Arc<scrape::Endpoint>], start: Instant) {
        let t_s = signed_secs_since(start);
        let mut scrapes = tokio::task::JoinSet::new();
        for (i, e) in endpoints.iter().enumerate() {
            let e = Arc::clone(e);
            scrapes.spawn(async move { (i, scrape::fetch(e, SCRAPE_TIMEOUT).await) });
        }
        let mut pages: Vec<(usize, Result<String, scrape::ScrapeError>)> = Vec::new();
        while let Some(done) = scrapes.join_next().await {
            if let Ok(page) = done {
                pages.push(page);
            }
        }
        // Source order, so the series order is the same from run to run.
        pages.sort_by_key(|(i, _)| *i);
        for (i, page) in pages {
            let source = &endpoints[i].url;
            self.stats[i].attempts += 1;
            match page {
                Ok(text) => self.take_page(i, source, &text, t_s),
                Err(e) => {
                    self.stats[i].errors += 1;
                    self.stats[i].last_error = Some(e.to_string());
                }
            }
        }
        for (j, (pid, comm)) in self.pids.clone().into_iter().enumerate() {
            let i = endpoints.len() + j;
            self.stats[i].attempts += 1;
            match process::read(pid, self.ticks_per_s) {
                Ok(reading) => self.take_process(pid, &comm, &reading, t_s),
                Err(e) => {
                    self.stats[i].errors += 1;
                    self.stats[i].last_error = Some(format!("reading /proc/{pid}: {e}"));
                }
            }
        }
    }

    fn take_page(&mut self, i: usize, source: &str, text: &str, t_s: f64) {
        let page = prom::parse(text);
        self.stats[i].malformed_lines += page.malformed;
        for sample in &page.samples {
            let Some((kind, family)) = classify(&sample.name, &page.types) else {
                continue;
            };
            if !self.selector.selects(&sample.name, family) {
                continue;
            }
            self.set.observe(Observation {
                source,
                name: &sample.name,
                labels: &sample.labels,
                kind,
                unit: unit_of(&sample.name, family, kind, &page.units),
                reading: Reading {
                    t_s,
                    value: sample.value,
                    timestamp_ms: sample.timestamp_ms,
                },
            });
        }
    }

    fn take_process(&mut self, pid: u32, comm: &str, reading: &process::ProcReading, t_s: f64) {
        let source = format!("pid:{pid}");
        let labels = [
            ("comm".to_string(), comm.to_string()),
            ("pid".to_string(), pid.to_string()),
        ];
        let at = |value: f64| Reading {
            t_s,
            value,
            timestamp_ms: None,
        };
        // CPU seconds ×100 is a counter whose per-second rate is the percentage.
        self.set.observe(Observation {
            source: &source,
            name: "process_cpu_percent",
            labels: &labels,
            kind: SeriesKind::Rate,
            unit: Some("%".into()),
            reading: at(reading.cpu_s * 100.0),
        });
        self.set.observe(Observation {
            source: &source,
            name: "process_rss_bytes",
            labels: &labels,
            kind: SeriesKind::Gauge,
            unit: Some("bytes".into()),
            reading: at(reading.rss_bytes as f64),
        });
    }
}

/// Seconds since `start`, negative if it is still ahead (a reading taken during the
/// run's short start-up delay).
fn signed_secs_since(start: Instant) -> f64 {
    let now = Instant::now();
    if now >= start {
        (now - start).as_secs_f64()
    } else {
        -(start - now).as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_urls_patterns_and_this_process() {
        let cfg = MonitorConfig::from_spec(
            &["http://127.0.0.1:9100/metrics".into()],
            &["warrant_*".into(), "*_total".into()],
            &[std::process::id()],
        )
        .unwrap();
        assert_eq!(cfg.endpoints[0].1.path, "/metrics");
        assert_eq!(cfg.selector.patterns.len(), 2);
        assert!(!cfg.is_empty());
        assert!(MonitorConfig::from_spec(&[], &[], &[]).unwrap().is_empty());
    }

    #[test]
    fn rejects_a_bad_monitor_url() {
        for url in ["ftp://127.0.0.1/metrics", "127.0.0.1:9100", "http://:80/"] {
            let err = MonitorConfig::from_spec(&[url.into()], &[], &[]).unwrap_err();
            assert_eq!(err.field, "monitor", "{url}");
        }
    }

    #[test]
    fn rejects_pid_zero_and_a_missing_process() {
        let err = MonitorConfig::from_spec(&[], &[], &[0]).unwrap_err();
        assert_eq!(err.field, "monitor_pid");
        // Above the kernel's pid_max ceiling (2^22), so never a live process.
        let err = MonitorConfig::from_spec(&[], &[], &[4_194_305]).unwrap_err();
        assert_eq!(err.field, "monitor_pid");
    }

    #[test]
    fn rejects_a_bad_metric_glob() {
        let err = MonitorConfig::from_spec(
            &["http://127.0.0.1:9100/metrics".into()],
            &["bad-name*".into()],
            &[],
        )
        .unwrap_err();
        assert_eq!(err.field, "monitor_metric");
    }

    #[test]
    fn rejects_metric_patterns_without_a_url() {
        let err = MonitorConfig::from_spec(&[], &["x".into()], &[std::process::id()]).unwrap_err();
        assert_eq!(err.field, "monitor_metric");
    }

    #[test]
    fn signed_time_is_negative_before_the_start() {
        let ahead = Instant::now() + Duration::from_secs(5);
        assert!(signed_secs_since(ahead) < 0.0);
    }
}
