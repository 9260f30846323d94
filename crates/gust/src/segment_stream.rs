//! The segment's side of a run that meets on a daemon (`gust run SPEC --segment i/n
//! --start-at T --daemon URL --run NAME`): join the run, generate this segment's
//! load here, stream its ticks (with their histograms) to the daemon a second's
//! worth at a time, then hand it the report. The daemon's side is `daemon::meeting`.
//!
//! Ticks are best effort: a tick the daemon does not take is lost to the live view
//! only. The report is what the merged run is made of, so its delivery is retried
//! and its failure is the process's (exit 2).

use std::process::ExitCode;
use std::time::Duration;

use gust_engine::RunEvent;
use serde_json::Value;

use crate::client::{RunArgs, await_verdict, print_local};
use crate::daemon::meeting::{Joined, SegmentTicks};
use crate::daemon_client::DaemonClient;
use crate::spec_file::RunRequest;

/// A tick the daemon has not answered in this long is given up (the live view
/// misses it; the run goes on).
const TICK_TIMEOUT: Duration = Duration::from_secs(5);
const REPORT_ATTEMPTS: u32 = 5;

pub async fn run(args: &RunArgs, base: &str, req: &RunRequest) -> Result<ExitCode, String> {
    let segment = req
        .spec
        .segment
        .ok_or("--run needs --segment: the daemon meets the segments of a run")?;
    let mut cfg = req.spec.validate().map_err(|e| e.to_string())?;
    cfg.live_histograms = true;
    let tick = cfg.tick;
    let daemon = DaemonClient::new(base, args.token.clone());
    let body = serde_json::to_value(req).map_err(|e| e.to_string())?;
    let joined: Joined = serde_json::from_value(
        daemon
            .post("/segments", Some(&body))
            .await
            .map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("daemon's answer to the join: {e}"))?;
    let (run_id, member) = (joined.run_id, joined.member);
    eprintln!(
        "gust run: segment {segment} joined run {run_id} ({}) on {}",
        req.name.as_deref().unwrap_or(""),
        daemon.base()
    );
    let mut handle = gust_engine::start(cfg).map_err(|e| e.to_string())?;
    let late = handle.start_late().unwrap_or_default();
    // A late segment's tick 0 covers the run's tick `offset`.
    let offset = ((late.as_nanos() + tick.as_nanos() / 2) / tick.as_nanos().max(1)) as u64;
    let stop = handle.stop_handle();
    let events = handle.take_events();
    let report = tokio::task::spawn_blocking(move || handle.wait());
    let ticks_path = format!("/runs/{run_id}/segments/{member}/ticks");
    let mut unsent = 0u64;
    let mut batch = Vec::new();
    if let Some(mut rx) = events {
        loop {
            let ev = rx.recv().await;
            match ev {
                Some(RunEvent::Tick(mut t)) => {
                    t.index += offset;
                    t.elapsed_s = (t.index + 1) as f64 * tick.as_secs_f64();
                    batch.push(t);
                    continue;
                }
                // A whole second's ticks go in one request.
                Some(RunEvent::Second { .. }) | None if !batch.is_empty() => {}
                Some(RunEvent::Second { .. }) => continue,
                None => break,
            }
            let body = SegmentTicks {
                start_late_ms: late.as_millis() as u64,
                ticks: std::mem::take(&mut batch),
            };
            let request = daemon
                .request(reqwest::Method::POST, &ticks_path)
                .timeout(TICK_TIMEOUT)
                .json(&body);
            match daemon.json(request).await {
                Ok(answer) => {
                    if answer["stop"].as_bool() == Some(true) {
                        stop.stop();
                    }
                }
                Err(e) => {
                    if unsent == 0 {
                        eprintln!(
                            "gust run: the daemon did not take this segment's ticks ({e}); the run goes on"
                        );
                    }
                    unsent += body.ticks.len() as u64;
                }
            }
            if ev.is_none() {
                break;
            }
        }
    }
    let report = report.await.map_err(|e| e.to_string())?;
    if unsent > 0 {
        eprintln!("gust run: {unsent} tick(s) did not reach the daemon");
    }
    let report_json = serde_json::to_value(&report).map_err(|e| e.to_string())?;
    deliver(&daemon, run_id, member, &report_json).await?;
    if args.wait {
        return await_verdict(args, &daemon, run_id, req).await;
    }
    print_local(args, req, &report)?;
    Ok(ExitCode::SUCCESS)
}

/// Posts the segment's report, retrying what may pass on a second try (no answer,
/// or a 5xx); a refusal is final.
async fn deliver(
    daemon: &DaemonClient,
    run_id: i64,
    member: usize,
    report: &Value,
) -> Result<(), String> {
    let path = format!("/runs/{run_id}/segments/{member}/report");
    let mut last = String::new();
    for attempt in 0..REPORT_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(1 << attempt.min(3))).await;
        }
        match daemon.post(&path, Some(report)).await {
            Ok(_) => return Ok(()),
            Err(e @ crate::daemon_client::DaemonError::Refused { status, .. })
                if status.is_client_error() =>
            {
                return Err(format!("the daemon refused this segment's report: {e}"));
            }
            Err(e) => last = e.to_string(),
        }
    }
    Err(format!(
        "could not hand this segment's report to the daemon after {REPORT_ATTEMPTS} tries: {last}"
    ))
}
