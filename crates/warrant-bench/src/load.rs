//! Driving the load: the Gust model for each mode and one measured run,
//! with the server's CPU read before and after.

use crate::args::{Mode, RunArgs};
use crate::scenario::BenchSource;
use crate::server::{self, ServerUnderTest};
use crate::threads::BENCH_THREAD_PREFIX;
use anyhow::{Result, anyhow};
use gust_engine::{LoadModel, Report, RunEvent, RunSpec, Stage, ThinkTime};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Outcome {
    pub report: Report,
    pub server_cpu_s: Option<f64>,
    /// `server_cpu_s` per group of server threads (embedded server only;
    /// the parts add up to `server_cpu_s`).
    pub server_cpu_s_by_thread: Option<BTreeMap<String, f64>>,
    pub timed_out: bool,
}

/// The Gust load model for a mode.
///
/// `random` is the reference's random mode as bench.md words it: each agent
/// waits an exponential think time with mean `interval` between requests. In
/// Gust that is the closed model with [`ThinkTime::Exponential`]: `agents`
/// slots, each sending, then thinking Exp(interval), then sending again. The
/// superposition of the agents' think times is a Poisson-like arrival stream
/// at about agents / (interval + latency) per second, and at most `agents`
/// requests are ever in flight (one per agent).
///
/// A closed slot sends its first request as soon as it is active, so with all
/// slots active at t = 0 every agent would fire at once (that burst is T4's
/// subject, not a steady state). The slots therefore join on the staggered
/// schedule of [`staggered_start`]: agent k's first request comes at the k-th
/// quantile of Exp(interval), which is where a memoryless process that had
/// been running for a long time would put it, so the aggregate rate is
/// agents / interval from the first second on.
pub fn load_model(args: &RunArgs) -> (LoadModel, Option<usize>) {
    match args.mode {
        Mode::Stress if args.qps > 0.0 => (
            LoadModel::Open {
                rate: args.qps,
                stages: Vec::new(),
            },
            Some(args.agents),
        ),
        Mode::Stress => (LoadModel::closed(args.agents), None),
        Mode::Random => (
            LoadModel::Closed {
                concurrency: args.agents,
                stages: staggered_start(args.agents, args.interval, args.duration),
                think_time: ThinkTime::Exponential {
                    mean: args.interval,
                },
            },
            None,
        ),
    }
}

/// Pieces of the piecewise-linear approximation of agents · (1 − e^(−t/I)).
const STAGGER_PIECES: u32 = 16;

/// Closed-model concurrency stages over exactly `duration` under which the
/// number of active agents follows agents · (1 − e^(−t/interval)): linear
/// between the j/16 quantiles of Exp(interval), the last 1/16 joining over one
/// more mean (the exponential's mean residual life), then all agents until the
/// end. Targets are whole agents (Gust's closed stages count slots).
pub fn staggered_start(agents: usize, interval: Duration, duration: Duration) -> Vec<Stage> {
    let mean = interval.as_secs_f64();
    let end = duration.as_secs_f64();
    let n = agents as f64;
    // (time, active agents) corners of the ramp, ending with everyone active.
    let mut corners: Vec<(f64, f64)> = (1..STAGGER_PIECES)
        .map(|j| {
            let q = f64::from(j) / f64::from(STAGGER_PIECES);
            (-mean * (1.0 - q).ln(), n * q)
        })
        .collect();
    let last = corners.last().map_or(0.0, |c| c.0);
    corners.push((last + mean, n));
    let mut stages = Vec::with_capacity(corners.len() + 1);
    let (mut t0, mut v0) = (0.0, 0.0);
    for (t1, v1) in corners {
        if t0 >= end {
            break;
        }
        // A piece that crosses the end of the run is cut there.
        let (t, v) = if t1 > end {
            (end, v0 + (v1 - v0) * (end - t0) / (t1 - t0))
        } else {
            (t1, v1)
        };
        stages.push(Stage {
            duration: Duration::from_secs_f64(t - t0),
            target: v.round(),
        });
        (t0, v0) = (t, v);
    }
    if t0 < end {
        stages.push(Stage {
            duration: Duration::from_secs_f64(end - t0),
            target: n,
        });
    }
    stages
}

pub fn drive(
    sut: &ServerUnderTest,
    args: &RunArgs,
    source: BenchSource,
    wall_limit: Option<Duration>,
) -> Result<Outcome> {
    let (model, max_in_flight) = load_model(args);
    // Closed stages already span exactly `duration`; Gust takes one or the other.
    let staged = matches!(&model, LoadModel::Closed { stages, .. } if !stages.is_empty());
    let mut spec = RunSpec::new(format!("{}/", sut.url()), model);
    spec.method = "POST".into();
    spec.duration = (!staged).then_some(args.duration);
    spec.workers = args.workers;
    spec.max_in_flight = max_in_flight;
    spec.timeout = Some(Duration::from_secs(30));
    spec.grace = Some(Duration::from_secs(30));
    spec.success_status = Some("200".into());
    if let Some(m) = max_in_flight {
        spec.connections = Some(m.min(1024));
    }
    let config = spec
        .validate_with_source(Some(Arc::new(source)))
        .map_err(|e| anyhow!("load model: {e}"))?;
    let cpu_before = sut.cpu_snapshot();
    let mut run = gust_engine::start(config).map_err(|e| anyhow!("starting the load: {e}"))?;
    let events = run.take_events();
    let stop = run.stop_handle();
    let timed_out = Arc::new(std::sync::atomic::AtomicBool::new(false));
    if let Some(limit) = wall_limit {
        let stop = stop.clone();
        let flag = timed_out.clone();
        spawn_bench_thread("limit", move || {
            std::thread::sleep(limit);
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
            stop.stop();
        })?;
    }
    let tty = std::io::stderr().is_terminal();
    let verbose = args.verbose;
    let progress = events.map(|mut rx| {
        spawn_bench_thread("progress", move || {
            let mut last_verbose = Instant::now();
            while let Some(ev) = rx.blocking_recv() {
                if let RunEvent::Tick(t) = ev {
                    if tty {
                        eprint!(
                            "\r{:6.1}s  {:8.0} req/s  ok {:>9}  fail {:>7}  in-flight {:>5}  p99 {:>7.1} ms ",
                            t.elapsed_s,
                            t.rps,
                            t.totals.successes,
                            t.totals.failures,
                            t.in_flight,
                            t.service.p99_us as f64 / 1000.0
                        );
                    }
                    if verbose && last_verbose.elapsed() >= Duration::from_secs(5) {
                        last_verbose = Instant::now();
                        eprintln!(
                            "{}progress {:.0}s: ok {} fail {} dropped {} · {:.0} req/s · p50 {:.1} ms p99 {:.1} ms",
                            if tty { "\n" } else { "" },
                            t.elapsed_s,
                            t.totals.successes,
                            t.totals.failures,
                            t.totals.dropped,
                            t.rps,
                            t.service.p50_us as f64 / 1000.0,
                            t.service.p99_us as f64 / 1000.0
                        );
                    }
                }
            }
            if tty {
                eprintln!();
            }
        })
    });
    let progress = progress.transpose()?;
    let report = run.wait();
    let cpu_after = sut.cpu_snapshot();
    if let Some(p) = progress {
        let _ = p.join();
    }
    let (server_cpu_s, server_cpu_s_by_thread) = server::cpu_between(&cpu_before, &cpu_after);
    Ok(Outcome {
        report,
        server_cpu_s,
        server_cpu_s_by_thread,
        timed_out: timed_out.load(std::sync::atomic::Ordering::Relaxed),
    })
}

/// A thread of the bench's own, named so its CPU is not counted as the
/// embedded server's.
fn spawn_bench_thread<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<std::thread::JoinHandle<T>> {
    std::thread::Builder::new()
        .name(format!("{BENCH_THREAD_PREFIX}{name}"))
        .spawn(f)
        .map_err(|e| anyhow!("starting the {name} thread: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(mode: Mode, agents: usize, interval: Duration, duration: Duration) -> RunArgs {
        let mut a = crate::args::default_run_args();
        a.mode = mode;
        a.agents = agents;
        a.interval = interval;
        a.duration = duration;
        a
    }

    #[test]
    fn random_mode_is_closed_with_exponential_think_time() {
        let a = args(
            Mode::Random,
            5000,
            Duration::from_secs(6),
            Duration::from_secs(120),
        );
        let (model, max_in_flight) = load_model(&a);
        assert_eq!(max_in_flight, None, "one request per agent is the bound");
        match model {
            LoadModel::Closed {
                concurrency,
                stages,
                think_time,
            } => {
                assert_eq!(concurrency, 5000);
                assert_eq!(
                    think_time,
                    ThinkTime::Exponential {
                        mean: Duration::from_secs(6)
                    }
                );
                let total: Duration = stages.iter().map(|s| s.duration).sum();
                assert!((total.as_secs_f64() - 120.0).abs() < 1e-6, "{total:?}");
                assert_eq!(stages.last().map(|s| s.target), Some(5000.0));
            }
            other => panic!("random mode must be closed with think time, got {other:?}"),
        }
        let stress = args(Mode::Stress, 8, Duration::ZERO, Duration::from_secs(5));
        assert!(matches!(
            load_model(&stress).0,
            LoadModel::Closed {
                think_time: ThinkTime::None,
                ..
            }
        ));
    }

    /// The active agents follow agents · (1 − e^(−t/I)): agent k starts at the
    /// k-th quantile of Exp(I), so no burst at t = 0.
    #[test]
    fn staggered_start_follows_the_exponential_cdf() {
        use gust_engine::schedule::{Profile, slot_active};
        let (agents, mean) = (1000usize, 6.0);
        let stages = staggered_start(
            agents,
            Duration::from_secs_f64(mean),
            Duration::from_secs(120),
        );
        let profile = Profile::stages(&stages);
        let active = |t: f64| (0..agents).filter(|&s| slot_active(&profile, s, t)).count();
        assert!(active(0.0) <= 1, "all agents at t=0 would be a burst");
        for t in [1.0, 3.0, 6.0, 12.0, 18.0] {
            let want = agents as f64 * (1.0 - (-t / mean).exp());
            let got = active(t) as f64;
            assert!(
                (got - want).abs() <= 0.02 * agents as f64,
                "t={t}: {got} active, want {want:.0}"
            );
        }
        assert_eq!(active(60.0), agents);
        assert_eq!(active(119.9), agents);
    }

    #[test]
    fn staggered_start_is_cut_at_a_short_duration() {
        // Default flags: interval 10m, duration 5m; the ramp outlives the run.
        let stages = staggered_start(100, Duration::from_secs(600), Duration::from_secs(300));
        let total: Duration = stages.iter().map(|s| s.duration).sum();
        assert!((total.as_secs_f64() - 300.0).abs() < 1e-6);
        let last = stages.last().map(|s| s.target).unwrap_or(0.0);
        // 1 − e^(−0.5) ≈ 39 % of the agents have started by then.
        assert!((35.0..=43.0).contains(&last), "{last}");
        assert!(stages.iter().all(|s| s.target.fract() == 0.0));
    }
}
