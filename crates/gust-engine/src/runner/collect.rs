//! Result collection: the aggregator thread merges worker ticks into live events and,
//! once every worker is done, into the run's [`Report`].

use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::metrics::steps::{IterationSummary, StepReport, StepStats};
use crate::metrics::{
    Aggregator, ErrorClass, LatencySummary, PhaseStats, RunEvent, encode_histogram, error_rate,
    lag_summary,
};
use crate::report::{Histograms, Report};
use crate::runner::shared::{Shared, WorkerMsg};
use crate::spec::LoadModel;

/// The aggregator thread's body: forwards ticks and whole seconds as they complete,
/// joins the workers, and builds the report from the same merged histograms.
pub(super) fn aggregate(
    shared: Arc<Shared>,
    rx: mpsc::Receiver<WorkerMsg>,
    events: tokio::sync::mpsc::UnboundedSender<RunEvent>,
    threads: Vec<JoinHandle<()>>,
) -> Report {
    let cpu_start = thread_cpu();
    let cfg = &shared.cfg;
    let mut agg = Aggregator::new(shared.workers, cfg.tick);
    if !cfg.segment.is_whole() {
        agg.second_histograms = Some(Vec::new());
    }
    agg.tick_histograms = cfg.live_histograms;
    let mut cpu = Duration::ZERO;
    let mut phases = PhaseStats::new();
    if let Some(lookup) = cfg.target.resolve_time {
        phases
            .dns
            .saturating_record((lookup.as_micros() as u64).max(1));
    }
    let mut done = 0;
    while done < shared.workers {
        let Ok(msg) = rx.recv() else { break };
        let in_flight = shared.in_flight.load(Ordering::Relaxed);
        let emitted = match msg {
            WorkerMsg::Tick {
                worker,
                index,
                stats,
            } => agg.add(worker, index, &stats, in_flight),
            WorkerMsg::Done {
                worker,
                cpu: c,
                phases: p,
            } => {
                done += 1;
                cpu += c;
                phases.merge(&p);
                agg.worker_done(worker, in_flight)
            }
        };
        for t in emitted.ticks {
            let _ = events.send(RunEvent::Tick(t));
        }
        for (sample, latency) in emitted.seconds {
            let _ = events.send(RunEvent::Second { sample, latency });
        }
    }
    for t in threads {
        let _ = t.join();
    }
    let elapsed = shared.start.elapsed();
    cpu += thread_cpu().saturating_sub(cpu_start);
    let total = &agg.total;
    // A time-bound run sends over its whole duration, even when its last request
    // (due just before the end) finished early; a stopped run, or one that reached
    // its iteration count first, sent for less.
    let ended_early = shared.stopped.load(Ordering::Relaxed) || cfg.iterations.is_some();
    let sending = match cfg.duration {
        Some(d) if ended_early => d.min(elapsed),
        Some(d) => d,
        None => elapsed,
    };
    let responses = total.responses();
    let steps: Vec<StepReport> = match &cfg.scenario {
        Some(sc) => sc
            .steps
            .iter()
            .enumerate()
            .map(|(i, step)| {
                let empty = StepStats::default();
                StepReport::of(&step.name, total.scenario.steps.get(i).unwrap_or(&empty))
            })
            .collect(),
        None => Vec::new(),
    };
    let histograms = agg.second_histograms.take().map(|seconds| Histograms {
        latency: encode_histogram(&total.latency),
        service: encode_histogram(&total.service),
        dns: encode_histogram(&phases.dns),
        connect: encode_histogram(&phases.connect),
        tls: encode_histogram(&phases.tls),
        ttfb: encode_histogram(&phases.ttfb),
        steps: steps
            .iter()
            .map(|s| encode_histogram(&s.latency_histogram))
            .collect(),
        seconds,
    });
    Report {
        url: cfg.target.url_with_path(&cfg.target.path),
        model: match cfg.model {
            LoadModel::Closed { .. } => "closed",
            LoadModel::Open { .. } => "open",
        }
        .to_string(),
        workers: shared.workers,
        connections: cfg.connections,
        segment: (!cfg.segment.is_whole()).then(|| cfg.segment.to_string()),
        started_at_ms: shared
            .start_wall
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        start_late_ms: shared.start_late.map(|d| d.as_millis() as u64),
        duration_s: cfg.duration.map(|d| d.as_secs_f64()),
        elapsed_s: elapsed.as_secs_f64(),
        sent: total.sent,
        responses,
        successes: total.successes,
        failures: total.failures,
        dropped: total.dropped,
        cancelled: total.error_count(ErrorClass::Cancelled),
        error_rate: error_rate(total.failures, total.successes),
        rps: if sending.is_zero() {
            0.0
        } else {
            responses as f64 / sending.as_secs_f64()
        },
        latency: LatencySummary::of(&total.latency),
        service: LatencySummary::of(&total.service),
        latency_corrected: matches!(cfg.model, LoadModel::Open { .. }),
        status: total.status_map(),
        errors: total.error_map(),
        bytes_in: total.bytes_in,
        bytes_out: total.bytes_out,
        connections_opened: total.connections_opened,
        phases: phases.summary(),
        peak_in_flight: shared.peak_in_flight.load(Ordering::Relaxed),
        generator_lag: lag_summary(total),
        last_send_offset_us: total.last_send_us,
        client_cpu_s: cpu.as_secs_f64(),
        stopped: shared.stopped.load(Ordering::Relaxed),
        series: std::mem::take(&mut agg.series),
        steps,
        iterations: cfg
            .scenario
            .as_ref()
            .map(|_| IterationSummary::of(&total.scenario)),
        monitor: Default::default(),
        histograms,
        latency_histogram: total.latency.clone(),
        service_histogram: total.service.clone(),
    }
}

/// CPU time of the calling thread (user + system). Workers and the aggregating
/// thread each take their own delta, so the sum is the engine's own CPU and not
/// that of the process embedding it (a server under test in the same process).
pub(super) fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}
