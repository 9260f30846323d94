//! Prometheus metrics (names from ca.md §6).
//!
//! The `metrics` facade has one global recorder per process; tests start many
//! servers in one process, so the recorder is installed once and every server
//! renders the same registry.
//!
//! The write-path series (`WRITE_QUEUE_DEPTH` … `WINDOW_EVICTIONS`) are
//! recorded by `warrant-store`; this module installs the recorder that
//! exports them, gives them histogram buckets and help texts, and refreshes
//! the gauges at each scrape from a [`Gauges`] sample the caller takes.
//!
//! A leaf: it knows metric names and error keys, not the server state, so
//! every other module may record through it.

use crate::error::ErrorKey;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::OnceLock;

pub const CERTS_ISSUED: &str = "warrant_certs_issued_total";
/// AIC-JWTs issued by `POST /oauth/token`, by `token_type`.
pub const TOKENS_ISSUED: &str = "warrant_aic_tokens_issued_total";
pub const HTTP_REQUESTS: &str = "warrant_http_requests_total";
pub const HTTP_DURATION: &str = "warrant_http_request_duration_seconds";
/// Every error answer, by `reason` ([`rejection_reason`]).
pub const REJECTED: &str = "warrant_rejected_requests_total";
/// Keys held by the rate limiters, by `limit` (`client_ip`, `principal`).
pub const LIMITER_KEYS: &str = "warrant_rate_limiter_keys";
/// Seconds until each CA's NotAfter, by `ca` (`root` and the issuing CAs).
pub const CA_REMAINING: &str = "warrant_ca_remaining_seconds";
/// Seconds until a token-signing key stops being published, by `kid`, for
/// keys a later key supersedes (or will).
pub const TOKEN_KEY_REMAINING: &str = "warrant_token_key_remaining_seconds";
/// Seconds since the token-signing key in use started signing, by `kid`.
pub const TOKEN_KEY_SIGNING_AGE: &str = "warrant_token_key_signing_age_seconds";
/// Issuance requests admitted and not yet answered (`engine.write_max_pending`).
pub const ISSUANCE_IN_FLIGHT: &str = "warrant_issuance_in_flight";
/// Private keys this server generated for its answers.
pub const KEYS_GENERATED: &str = "warrant_keys_generated_total";
/// Connections the server closed on its own, by `reason` (`over_cap`,
/// `header_timeout`, `idle_timeout`, `tls_handshake`).
pub const CONNECTIONS_CLOSED: &str = "warrant_http_connections_closed_total";
/// Certificate rows retention removed (deleted or in a dropped partition).
pub const RETENTION_PRUNED: &str = "warrant_retention_pruned_total";
/// Rows appended to the retention archive before they were removed.
pub const RETENTION_ARCHIVED: &str = "warrant_retention_archived_total";
/// PostgreSQL expiry partitions dropped.
pub const RETENTION_PARTITIONS_DROPPED: &str = "warrant_retention_partitions_dropped_total";
/// SQLite pages handed back to the file system.
pub const RETENTION_VACUUMED_PAGES: &str = "warrant_retention_vacuumed_pages_total";
/// Retention passes that failed (the next pass tries again).
pub const RETENTION_FAILURES: &str = "warrant_retention_failures_total";
pub const AUDIT_FAILURES: &str = "warrant_audit_failures_total";
pub const AUDIT_PRUNED: &str = "warrant_audit_pruned_total";

// Recorded by warrant-store, under its names.
pub use warrant_store::metric_names::{
    COMMIT_BATCH_SIZE, COMMIT_DURATION, COMMIT_FAILURES, COMMITS, COMMITTED_ROWS, DURABLE_WAIT,
    NONCE_SET_SIZE, WINDOW_EVICTIONS, WINDOW_SIZE, WRITE_QUEUE_DEPTH, WRITE_REJECTED,
};

const SECONDS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
const BATCH_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
];

/// The process-wide handle; `None` if another recorder was installed first
/// (then `/metrics` answers with an empty body rather than failing).
pub fn handle() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(HTTP_DURATION.to_string()), SECONDS_BUCKETS)
                .ok()?
                .set_buckets_for_metric(Matcher::Full(COMMIT_DURATION.to_string()), SECONDS_BUCKETS)
                .ok()?
                .set_buckets_for_metric(Matcher::Full(DURABLE_WAIT.to_string()), SECONDS_BUCKETS)
                .ok()?
                .set_buckets_for_metric(Matcher::Full(COMMIT_BATCH_SIZE.to_string()), BATCH_BUCKETS)
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
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(CERTS_ISSUED, "Certificates issued and durably stored");
    describe_counter!(
        TOKENS_ISSUED,
        "AIC-JWTs issued, their DA nonce durably consumed"
    );
    describe_counter!(HTTP_REQUESTS, "HTTP requests by route and status");
    describe_histogram!(HTTP_DURATION, Unit::Seconds, "HTTP request duration");
    describe_counter!(REJECTED, "Requests refused, by reason");
    describe_gauge!(LIMITER_KEYS, "Keys held by the rate limiters, by limit");
    describe_gauge!(
        CA_REMAINING,
        Unit::Seconds,
        "Seconds until each CA certificate ends, by ca"
    );
    describe_gauge!(
        TOKEN_KEY_REMAINING,
        Unit::Seconds,
        "Seconds until a superseded token-signing key stops being published, by kid"
    );
    describe_gauge!(
        TOKEN_KEY_SIGNING_AGE,
        Unit::Seconds,
        "Seconds since the token-signing key in use started signing, by kid"
    );
    describe_gauge!(
        ISSUANCE_IN_FLIGHT,
        "Issuance requests admitted, not yet answered"
    );
    describe_counter!(
        KEYS_GENERATED,
        "Private keys generated for issuance answers"
    );
    describe_counter!(
        CONNECTIONS_CLOSED,
        "Connections the server closed on its own, by reason"
    );
    describe_counter!(
        RETENTION_PRUNED,
        "Expired certificate rows removed by retention"
    );
    describe_counter!(
        RETENTION_ARCHIVED,
        "Certificate rows archived before retention removed them"
    );
    describe_counter!(
        RETENTION_PARTITIONS_DROPPED,
        "Expiry partitions dropped (PostgreSQL)"
    );
    describe_counter!(
        RETENTION_VACUUMED_PAGES,
        "Free pages handed back to the file system (SQLite)"
    );
    describe_counter!(RETENTION_FAILURES, "Retention passes that failed");
    describe_counter!(
        AUDIT_FAILURES,
        "Audit rows of refusals or administrative changes that could not be written"
    );
    describe_counter!(AUDIT_PRUNED, "Audit rows removed by retention");
    describe_gauge!(WRITE_QUEUE_DEPTH, "Records queued or being committed");
    describe_histogram!(COMMIT_BATCH_SIZE, "Records per committed transaction");
    describe_histogram!(
        COMMIT_DURATION,
        Unit::Seconds,
        "Duration of one batch commit"
    );
    describe_histogram!(
        DURABLE_WAIT,
        Unit::Seconds,
        "Time a durable issuance waited for its commit and WAL fsync"
    );
    describe_counter!(
        COMMITTED_ROWS,
        "Certificate rows committed (rate() gives rows/s)"
    );
    describe_counter!(COMMITS, "Batch transactions committed");
    describe_counter!(COMMIT_FAILURES, "Batch commits that failed");
    describe_counter!(WRITE_REJECTED, "Records the write path refused, by reason");
    describe_gauge!(NONCE_SET_SIZE, "DA nonces held in memory");
    describe_gauge!(
        WINDOW_SIZE,
        "Certificates in the recent-certificates window"
    );
    describe_counter!(
        WINDOW_EVICTIONS,
        "Certificates evicted from the recent window"
    );
}

pub fn render() -> String {
    handle().map(|h| h.render()).unwrap_or_default()
}

/// One route's series, as handles: recording through the `counter!` and
/// `histogram!` macros would build the label strings and look the key up in
/// the registry on every call, on the path of every request.
struct RouteSeries {
    duration: metrics::Histogram,
    by_status: Vec<(u16, metrics::Counter)>,
}

thread_local! {
    /// This thread's handles, by route. Label values come from small sets
    /// (matched routes, HTTP statuses, configured CAs, profiles), so the maps
    /// stay small.
    static ROUTE_SERIES: RefCell<HashMap<String, RouteSeries>> = RefCell::new(HashMap::new());
    static ISSUED_SERIES: RefCell<HashMap<String, Vec<(String, metrics::Counter)>>> =
        RefCell::new(HashMap::new());
}

/// Handles are kept only once this module's recorder is the global one: a
/// handle taken from the no-op recorder would stay a no-op.
fn handles_are_live() -> bool {
    handle().is_some()
}

/// Increments the counter whose label `is_label` picks, adding it (made by
/// `add`) the first time that label value is seen.
fn increment_or_add<L>(
    counters: &mut Vec<(L, metrics::Counter)>,
    is_label: impl Fn(&L) -> bool,
    add: impl FnOnce() -> (L, metrics::Counter),
) {
    match counters.iter().find(|(l, _)| is_label(l)) {
        Some((_, c)) => c.increment(1),
        None => {
            let (label, c) = add();
            c.increment(1);
            counters.push((label, c));
        }
    }
}

pub fn retention_pass(o: &warrant_store::PruneOutcome) {
    metrics::counter!(RETENTION_PRUNED).increment(o.rows);
    metrics::counter!(RETENTION_ARCHIVED).increment(o.archived);
    metrics::counter!(RETENTION_PARTITIONS_DROPPED).increment(o.partitions_dropped);
    metrics::counter!(RETENTION_VACUUMED_PAGES).increment(o.vacuumed_pages);
}

pub fn audit_failed() {
    metrics::counter!(AUDIT_FAILURES).increment(1);
}

pub fn audit_pruned(rows: u64) {
    metrics::counter!(AUDIT_PRUNED).increment(rows);
}

pub fn retention_failed() {
    metrics::counter!(RETENTION_FAILURES).increment(1);
}

pub fn token_issued(token_type: &'static str) {
    metrics::counter!(TOKENS_ISSUED, "token_type" => token_type).increment(1);
}

pub fn cert_issued(ca: &str, profile: &str) {
    let counter = || {
        let (ca, profile) = (ca.to_string(), profile.to_string());
        metrics::counter!(CERTS_ISSUED, "ca" => ca, "profile" => profile)
    };
    if !handles_are_live() {
        counter().increment(1);
        return;
    }
    ISSUED_SERIES.with_borrow_mut(|map| {
        let by_profile = match map.get_mut(ca) {
            Some(v) => v,
            None => map.entry(ca.to_string()).or_default(),
        };
        increment_or_add(
            by_profile,
            |p| p == profile,
            || (profile.to_string(), counter()),
        );
    });
}

pub fn http_request(route: &str, status: u16, seconds: f64) {
    let counter = || {
        let (route, status) = (route.to_string(), status.to_string());
        metrics::counter!(HTTP_REQUESTS, "route" => route, "status" => status)
    };
    let histogram = || metrics::histogram!(HTTP_DURATION, "route" => route.to_string());
    if !handles_are_live() {
        counter().increment(1);
        histogram().record(seconds);
        return;
    }
    ROUTE_SERIES.with_borrow_mut(|map| {
        let series = match map.get_mut(route) {
            Some(s) => s,
            None => map.entry(route.to_string()).or_insert_with(|| RouteSeries {
                duration: histogram(),
                by_status: Vec::new(),
            }),
        };
        series.duration.record(seconds);
        increment_or_add(
            &mut series.by_status,
            |s| *s == status,
            || (status, counter()),
        );
    });
}

/// The `reason` label of a refusal: the error key without its `api.` prefix
/// (`rate_limited`, `principal_rate_limited`, `da_nonce_replayed`,
/// `unavailable`, …), except the full write path, whose wire key
/// (`api.too_many_requests`, kept for varwof-core clients) would read like
/// a rate limit: it is `overloaded`.
pub fn rejection_reason(key: ErrorKey) -> &'static str {
    match key {
        ErrorKey::Overloaded => "overloaded",
        other => other
            .as_str()
            .strip_prefix("api.")
            .unwrap_or(other.as_str()),
    }
}

pub fn rejected(key: ErrorKey) {
    metrics::counter!(REJECTED, "reason" => rejection_reason(key)).increment(1);
}

/// A connection closed by the server: `reason` is one of
/// [`CONNECTIONS_CLOSED`]'s.
pub fn connection_closed(reason: &'static str) {
    metrics::counter!(CONNECTIONS_CLOSED, "reason" => reason).increment(1);
}

pub fn limiter_keys(client_ip: usize, principal: usize) {
    metrics::gauge!(LIMITER_KEYS, "limit" => "client_ip").set(client_ip as f64);
    metrics::gauge!(LIMITER_KEYS, "limit" => "principal").set(principal as f64);
}

/// The values behind the gauges (and the keys-generated counter), sampled
/// from the server state at scrape time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gauges {
    pub nonce_set_size: usize,
    pub write_queue_depth: usize,
    pub issuances_in_flight: usize,
    pub keys_generated: u64,
    pub limiter_keys_client_ip: usize,
    pub limiter_keys_principal: usize,
}

/// Sets the gauges from a sample taken at scrape time, so `/metrics` is
/// current even when idle; the write-path counters are registered (at zero)
/// so that every series exists from the first scrape, before the event it
/// counts ever happened.
pub fn refresh_gauges(g: &Gauges) {
    for counter in [COMMITTED_ROWS, COMMITS, COMMIT_FAILURES, WINDOW_EVICTIONS] {
        metrics::counter!(counter).increment(0);
    }
    metrics::gauge!(NONCE_SET_SIZE).set(g.nonce_set_size as f64);
    metrics::gauge!(WRITE_QUEUE_DEPTH).set(g.write_queue_depth as f64);
    metrics::gauge!(ISSUANCE_IN_FLIGHT).set(g.issuances_in_flight as f64);
    metrics::counter!(KEYS_GENERATED).absolute(g.keys_generated);
    limiter_keys(g.limiter_keys_client_ip, g.limiter_keys_principal);
}

/// Sets the key-lifetime gauges at `now`.
pub fn key_lives(
    cas: &[crate::key_life::CaEnd],
    tokens: &[crate::key_life::TokenKeyLife],
    now: i64,
) {
    for ca in cas {
        metrics::gauge!(CA_REMAINING, "ca" => ca.name.clone()).set((ca.not_after - now) as f64);
    }
    let signing = tokens
        .iter()
        .filter(|k| k.activates_at <= now)
        .max_by_key(|k| k.activates_at);
    for k in tokens {
        if let Some(end) = k.retires_at {
            metrics::gauge!(TOKEN_KEY_REMAINING, "kid" => k.kid.clone()).set((end - now) as f64);
        }
    }
    if let Some(k) = signing {
        metrics::gauge!(TOKEN_KEY_SIGNING_AGE, "kid" => k.kid.clone())
            .set((now - k.activates_at) as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series_value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
    }

    /// The per-thread handles add up to what the macros would record, across
    /// threads and for label values first seen at any point.
    #[test]
    fn cached_handles_count_every_call_on_every_thread() {
        assert!(handles_are_live());
        let record = || {
            for _ in 0..3 {
                http_request("/test/cached", 201, 0.001);
            }
            http_request("/test/cached", 503, 0.002);
            cert_issued("test-cached-ca", "tls-client");
            cert_issued("test-cached-ca", "agent-proxy");
        };
        record();
        std::thread::spawn(record).join().unwrap();
        record();
        let text = render();
        let value = |series: &str| series_value(&text, series);
        assert_eq!(
            value(r#"warrant_http_requests_total{route="/test/cached",status="201"}"#),
            Some(9.0),
            "{text}"
        );
        assert_eq!(
            value(r#"warrant_http_requests_total{route="/test/cached",status="503"}"#),
            Some(3.0)
        );
        assert_eq!(
            value(r#"warrant_http_request_duration_seconds_count{route="/test/cached"}"#),
            Some(12.0)
        );
        for profile in ["tls-client", "agent-proxy"] {
            let series =
                format!(r#"warrant_certs_issued_total{{ca="test-cached-ca",profile="{profile}"}}"#);
            assert_eq!(value(&series), Some(3.0), "{series}");
        }
    }

    #[test]
    fn rejection_reasons_tell_overload_from_rate_limits() {
        assert_eq!(rejection_reason(ErrorKey::Overloaded), "overloaded");
        assert_eq!(rejection_reason(ErrorKey::RateLimited), "rate_limited");
        assert_eq!(
            rejection_reason(ErrorKey::PrincipalRateLimited),
            "principal_rate_limited"
        );
        assert_eq!(
            rejection_reason(ErrorKey::DaNonceReplayed),
            "da_nonce_replayed"
        );
        assert_eq!(rejection_reason(ErrorKey::Unavailable), "unavailable");
    }
}
