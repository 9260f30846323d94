//! Prometheus metrics (names from ca.md §6).
//!
//! The `metrics` facade has one global recorder per process; tests start many
//! servers in one process, so the recorder is installed once and every server
//! renders the same registry.

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;

pub const CERTS_ISSUED: &str = "warrant_certs_issued_total";
pub const HTTP_REQUESTS: &str = "warrant_http_requests_total";
pub const HTTP_DURATION: &str = "warrant_http_request_duration_seconds";
pub const REJECTED: &str = "warrant_rejected_requests_total";
pub const NONCE_SET_SIZE: &str = "warrant_nonce_set_size";

/// The process-wide handle; `None` if another recorder was installed first
/// (then `/metrics` answers with an empty body rather than failing).
pub fn handle() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full(HTTP_DURATION.to_string()),
                    &[
                        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                    ],
                )
                .ok()?;
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).ok()?;
            describe();
            Some(handle)
        })
        .clone()
}

fn describe() {
    metrics::describe_counter!(CERTS_ISSUED, "Certificates issued and durably stored");
    metrics::describe_counter!(HTTP_REQUESTS, "HTTP requests by route and status");
    metrics::describe_histogram!(
        HTTP_DURATION,
        metrics::Unit::Seconds,
        "HTTP request duration"
    );
    metrics::describe_counter!(REJECTED, "Requests refused, by error key");
}

pub fn render() -> String {
    handle().map(|h| h.render()).unwrap_or_default()
}

pub fn cert_issued(ca: &str, profile: &str) {
    metrics::counter!(CERTS_ISSUED, "ca" => ca.to_string(), "profile" => profile.to_string())
        .increment(1);
}

pub fn http_request(route: &str, status: u16, seconds: f64) {
    metrics::counter!(HTTP_REQUESTS, "route" => route.to_string(), "status" => status.to_string())
        .increment(1);
    metrics::histogram!(HTTP_DURATION, "route" => route.to_string()).record(seconds);
}

pub fn rejected(reason: &'static str) {
    metrics::counter!(REJECTED, "reason" => reason).increment(1);
}
