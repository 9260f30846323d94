//! What the engine's test binaries share: one lock so timing-sensitive runs never
//! share the (2-core) machine with each other, and the two load models' specs.
// Each test binary compiles this module and uses a part of it.
#![allow(dead_code)]

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use gust_engine::{LoadModel, RunSpec};

static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The open model at `rate` for `duration`, every other option at its default.
pub fn open(url: &str, rate: f64, duration: Duration) -> RunSpec {
    let mut spec = RunSpec::new(
        url,
        LoadModel::Open {
            rate,
            stages: vec![],
        },
    );
    spec.duration = Some(duration);
    spec
}

/// The closed model with `concurrency` slots and no think time.
pub fn closed(url: &str, concurrency: usize) -> RunSpec {
    RunSpec::new(url, LoadModel::closed(concurrency))
}
