//! Gust's load engine: a library first, so the `gust` CLI, the `gust serve` daemon and
//! `warrant bench` drive the same code and read the same numbers.
//!
//! Data flow: a [`RunSpec`] is validated once into a [`RunConfig`]; [`start`] spawns
//! thread-per-core workers (each a current-thread tokio runtime owning its
//! connections) that pace requests from a [`RequestSource`] and record into per-worker
//! HDR histograms; an aggregator thread merges them into [`LiveTick`]s, whole-second
//! [`SecondSample`]s and the final [`Report`]. The live stream and the report come from
//! the same merged histograms, so they can never disagree.
//!
//! ```no_run
//! use std::time::Duration;
//! use gust_engine::{LoadModel, RunSpec};
//! let mut spec = RunSpec::new("http://127.0.0.1:8080/", LoadModel::Open { rate: 1000.0, stages: vec![] });
//! spec.duration = Some(Duration::from_secs(10));
//! let report = gust_engine::run(spec.validate()?)?;
//! println!("p99 {} µs", report.latency.p99_us);
//! # Ok::<(), gust_engine::ConfigError>(())
//! ```

pub mod capacity;
pub mod config;
mod error;
pub mod http1;
pub mod merge;
pub mod metrics;
pub mod monitor;
mod pacer;
pub mod report;
mod runner;
pub mod scenario;
pub mod schedule;
pub mod source;
pub mod spec;
pub mod target;
pub mod threshold;
pub mod transport;

pub use config::RunConfig;
pub use error::ConfigError;
pub use metrics::{
    ConnectTiming, ErrorClass, LatencySummary, LiveTick, PhaseReport, PhaseStats, QuickPercentiles,
    RunEvent, SecondSample, Totals,
};
pub use monitor::{MonitorReport, MonitorSeries, SeriesKind};
pub use report::Report;
pub use runner::{RunHandle, StopHandle, run, start};
pub use source::{
    Request, RequestSource, ResponseInterest, ResponseView, StaticRequest, WorkerSource,
};
pub use spec::{
    LoadModel, RunSpec, Stage, SuccessStatus, ThinkTime, TlsOptions, parse_duration, parse_stages,
};
pub use target::{Stall, TargetConfig, TargetServer};
