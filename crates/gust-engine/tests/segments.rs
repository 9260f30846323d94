//! Execution segments against real sockets on 127.0.0.1: segments started together
//! on one instant share the run's schedule, slots, iterations and data rows exactly
//! once, and a whole run is what segments add up to.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

mod common;

use common::serial;
use gust_engine::merge::{MergeError, Part, merge};
use gust_engine::spec::segment::Segment;
use gust_engine::spec::steps::{DataMode, DataSpec, StepSpec};
use gust_engine::{Report, RunSpec, TargetConfig, TargetServer};

fn target() -> TargetServer {
    TargetServer::start("127.0.0.1:0".parse().unwrap(), TargetConfig::default()).unwrap()
}

/// `common::open` on one worker thread per segment.
fn open(url: &str, rate: f64, duration: Duration) -> RunSpec {
    let mut spec = common::open(url, rate, duration);
    spec.workers = Some(1);
    spec
}

/// `common::closed` on one worker thread per segment.
fn closed(url: &str, concurrency: usize) -> RunSpec {
    let mut spec = common::closed(url, concurrency);
    spec.workers = Some(1);
    spec
}

/// `at` in RFC 3339.
fn rfc3339(at: SystemTime) -> String {
    let unix = at.duration_since(SystemTime::UNIX_EPOCH).unwrap();
    time::OffsetDateTime::from_unix_timestamp_nanos(unix.as_nanos() as i128)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

/// `spec` as `n` segments started together on threads; their reports in order.
fn run_segments(spec: &RunSpec, n: u64) -> Vec<Report> {
    let start_at = rfc3339(SystemTime::now() + Duration::from_millis(300));
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let mut s = spec.clone();
            s.segment = Some(Segment::nth(i, n).unwrap());
            s.start_at = Some(start_at.clone());
            std::thread::spawn(move || gust_engine::run(s.validate().unwrap()).unwrap())
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn open_model_segments_send_the_whole_schedule_once() {
    let _guard = serial();
    let t = target();
    let spec = open(
        &format!("http://{}/", t.addr()),
        400.0,
        Duration::from_secs(2),
    );
    let reports = run_segments(&spec, 4);
    let sent: u64 = reports.iter().map(|r| r.sent + r.dropped).sum();
    assert_eq!(sent, 800, "400/s for 2 s, over four segments");
    for (i, r) in reports.iter().enumerate() {
        assert_eq!(
            r.sent + r.dropped,
            200,
            "segment {i} takes every 4th request"
        );
        assert_eq!(r.failures, 0);
        assert_eq!(r.segment.as_deref(), Some(format!("{i}/4").as_str()));
        assert!(r.start_late_ms.is_none(), "segment {i} started late");
    }
    // One start instant: the reports' time origins agree to well under a second.
    let origins: Vec<u64> = reports.iter().map(|r| r.started_at_ms).collect();
    let spread = origins.iter().max().unwrap() - origins.iter().min().unwrap();
    assert!(spread < 50, "time origins {origins:?}");
}

#[test]
fn iterations_and_closed_slots_are_split_exactly() {
    let _guard = serial();
    let t = target();
    let url = format!("http://{}/", t.addr());
    let mut spec = closed(&url, 10);
    spec.iterations = Some(1001);
    let reports = run_segments(&spec, 4);
    let connections: Vec<usize> = reports.iter().map(|r| r.connections).collect();
    assert_eq!(connections, [3, 3, 2, 2], "10 slots over 4 segments");
    let sent: Vec<u64> = reports.iter().map(|r| r.sent).collect();
    assert_eq!(
        sent,
        [251, 250, 250, 250],
        "1001 iterations over 4 segments"
    );

    let mut spec = open(&url, 2000.0, Duration::from_secs(5));
    spec.iterations = Some(301);
    let sent: u64 = run_segments(&spec, 3)
        .iter()
        .map(|r| r.sent + r.dropped)
        .sum();
    assert_eq!(sent, 301);
}

/// A server that answers 200 to every request and records its path.
fn recording_server() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let paths = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&paths);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let seen = Arc::clone(&seen);
            std::thread::spawn(move || serve_recording(stream, &seen));
        }
    });
    (addr, paths)
}

fn serve_recording(stream: TcpStream, seen: &Mutex<Vec<String>>) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split(' ').nth(1).unwrap_or("").to_string();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header == "\r\n" {
                break;
            }
        }
        seen.lock().unwrap().push(path);
        if writer
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .is_err()
        {
            return;
        }
    }
}

#[test]
fn unique_data_rows_are_used_once_across_segments() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rows = 37;
    let file = dir.path().join("users.csv");
    let mut csv = String::from("id\n");
    for i in 0..rows {
        csv.push_str(&format!("u{i}\n"));
    }
    std::fs::write(&file, csv).unwrap();
    let (addr, paths) = recording_server();
    let mut spec = closed(&format!("http://{addr}/"), 4);
    spec.duration = Some(Duration::from_secs(2));
    spec.steps = vec![StepSpec::new("get", "/users/{{data.id}}")];
    spec.data = Some(DataSpec {
        file,
        mode: DataMode::Unique,
    });
    let reports = run_segments(&spec, 4);
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for p in paths.lock().unwrap().iter() {
        *counts.entry(p.clone()).or_default() += 1;
    }
    assert_eq!(counts.len(), rows, "every row used: {counts:?}");
    assert!(
        counts.values().all(|c| *c == 1),
        "a row used twice: {counts:?}"
    );
    let per_segment: Vec<u64> = reports.iter().map(|r| r.sent).collect();
    assert_eq!(per_segment, [10, 9, 9, 9], "37 rows over 4 segments");
}

#[test]
fn rejects_a_segment_left_without_slots_rows_or_iterations() {
    let url = "http://127.0.0.1:1/";
    let mut spec = closed(url, 2);
    spec.duration = Some(Duration::from_secs(1));
    spec.segment = Some(Segment::nth(3, 4).unwrap());
    assert_eq!(spec.validate().unwrap_err().field, "concurrency");

    let mut spec = open(url, 10.0, Duration::from_secs(1));
    spec.iterations = Some(2);
    spec.segment = Some(Segment::nth(2, 3).unwrap());
    assert_eq!(spec.validate().unwrap_err().field, "iterations");

    let mut spec = open(url, 10.0, Duration::from_secs(1));
    spec.start_at = Some("tomorrow at noon".into());
    assert_eq!(spec.validate().unwrap_err().field, "start_at");
}

#[test]
fn a_segment_starts_on_its_instant_and_a_late_one_says_how_late() {
    let _guard = serial();
    let t = target();
    let mut spec = open(
        &format!("http://{}/", t.addr()),
        50.0,
        Duration::from_millis(500),
    );
    let at = SystemTime::now() + Duration::from_millis(700);
    let unix_ms = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    spec.start_at = Some(rfc3339(at));
    let r = gust_engine::run(spec.validate().unwrap()).unwrap();
    assert!(
        r.started_at_ms.abs_diff(unix_ms) < 20,
        "started at {} for {unix_ms}",
        r.started_at_ms
    );
    assert!(r.start_late_ms.is_none());

    spec.start_at = Some("2020-01-01T00:00:00Z".into());
    let r = gust_engine::run(spec.validate().unwrap()).unwrap();
    assert!(r.start_late_ms.is_some_and(|ms| ms > 1_000_000));
    assert_eq!(
        r.sent + r.dropped,
        25,
        "a late segment still sends its schedule"
    );
}

fn parts(reports: &[Report]) -> Vec<Part> {
    reports
        .iter()
        .enumerate()
        .map(|(i, r)| Part {
            name: format!("segment-{i}.json"),
            report: r.clone(),
        })
        .collect()
}

#[test]
fn merged_segments_add_up_exactly_to_their_measurements() {
    let _guard = serial();
    let t = TargetServer::start(
        "127.0.0.1:0".parse().unwrap(),
        TargetConfig {
            delay: Duration::from_millis(3),
            ..TargetConfig::default()
        },
    )
    .unwrap();
    let spec = open(
        &format!("http://{}/", t.addr()),
        300.0,
        Duration::from_secs(2),
    );
    let reports = run_segments(&spec, 4);
    let merged = merge(&parts(&reports), false).unwrap();
    assert_eq!(merged.sent + merged.dropped, 600);
    assert_eq!(
        merged.responses,
        reports.iter().map(|r| r.responses).sum::<u64>()
    );
    assert_eq!(merged.segment, None, "four quarters are the whole run");
    assert!(merged.histograms.is_none());
    // The merged histogram is the union of every segment's measurements.
    let mut union = reports[0].latency_histogram.clone();
    for r in &reports[1..] {
        union.add(&r.latency_histogram).unwrap();
    }
    assert_eq!(merged.latency_histogram, union);
    for q in [0.5, 0.9, 0.99, 0.999] {
        assert_eq!(
            merged.latency_histogram.value_at_quantile(q),
            union.value_at_quantile(q)
        );
    }
    assert_eq!(
        merged.latency.p99_us,
        gust_engine::LatencySummary::of(&union).p99_us
    );
    // The series is the same run, second by second.
    let by_seconds: u64 = merged.series.iter().map(|s| s.responses).sum();
    assert_eq!(by_seconds, merged.responses);
    assert!(merged.series.len() <= 3, "{} seconds", merged.series.len());

    // Through JSON, as `gust merge` reads the files: the same result.
    let from_files: Vec<Part> = parts(&reports)
        .into_iter()
        .map(|p| Part {
            report: serde_json::from_str(&serde_json::to_string(&p.report).unwrap()).unwrap(),
            ..p
        })
        .collect();
    let again = merge(&from_files, false).unwrap();
    assert_eq!(again.latency, merged.latency);
    assert_eq!(again.series, merged.series);
    assert_eq!(again.status, merged.status);
}

#[test]
fn merged_percentiles_match_one_process() {
    let _guard = serial();
    let t = TargetServer::start(
        "127.0.0.1:0".parse().unwrap(),
        TargetConfig {
            delay: Duration::from_millis(20),
            ..TargetConfig::default()
        },
    )
    .unwrap();
    let spec = open(
        &format!("http://{}/", t.addr()),
        200.0,
        Duration::from_secs(2),
    );
    let one = gust_engine::run(spec.validate().unwrap()).unwrap();
    let merged = merge(&parts(&run_segments(&spec, 4)), false).unwrap();
    assert_eq!(merged.sent + merged.dropped, one.sent + one.dropped);
    // The target's fixed 20 ms dominates; what differs is the box's own jitter.
    for (a, b) in [
        (one.latency.p50_us, merged.latency.p50_us),
        (one.latency.p90_us, merged.latency.p90_us),
    ] {
        let ratio = b as f64 / a as f64;
        assert!((0.9..1.1).contains(&ratio), "one {a} µs, merged {b} µs");
    }
}

#[test]
fn rejects_merging_overlapping_missing_or_foreign_segments() {
    let _guard = serial();
    let t = target();
    let url = format!("http://{}/", t.addr());
    let spec = open(&url, 100.0, Duration::from_millis(300));
    let halves = run_segments(&spec, 2);
    let quarters = run_segments(&spec, 4);

    // Halves beside quarters: the two split the requests differently.
    let mixed = parts(&[halves[0].clone(), quarters[1].clone()]);
    let err = merge(&mixed, false).unwrap_err();
    assert!(matches!(err, MergeError::MixedPeriods { .. }), "{err}");
    assert!(
        err.to_string().contains("segment-0.json") && err.to_string().contains("segment-1.json")
    );
    // One segment twice.
    let twice = parts(&[quarters[2].clone(), quarters[2].clone()]);
    let err = merge(&twice, false).unwrap_err();
    assert!(matches!(err, MergeError::Overlap { .. }), "{err}");

    let missing = parts(&quarters[..3]);
    let err = merge(&missing, false).unwrap_err();
    assert!(matches!(err, MergeError::Gap { .. }), "{err}");
    let partial = merge(&missing, true).unwrap();
    assert_eq!(partial.segment.as_deref(), Some("0/4,1/4,2/4"));
    assert!(
        partial.histograms.is_some(),
        "a partial merge can be merged again"
    );
    let rest = Part {
        name: "partial.json".into(),
        report: partial,
    };
    let mut all = vec![rest];
    all.extend(parts(&quarters[3..]));
    assert_eq!(
        merge(&all, false).unwrap().sent + merge(&all, false).unwrap().dropped,
        30
    );

    let mut other = open(&format!("{url}other"), 100.0, Duration::from_millis(300));
    other.workers = Some(1);
    let foreign = run_segments(&other, 2);
    let err = merge(&parts(&[halves[0].clone(), foreign[1].clone()]), false).unwrap_err();
    assert!(
        matches!(err, MergeError::Differs { what: "URLs", .. }),
        "{err}"
    );

    let whole = gust_engine::run(spec.validate().unwrap()).unwrap();
    let err = merge(&parts(&[whole]), false).unwrap_err();
    assert!(matches!(err, MergeError::NotASegment { .. }), "{err}");
}
