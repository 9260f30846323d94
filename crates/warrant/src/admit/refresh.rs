//! Keeping the service's state current: Warrant's CRLs polled into the
//! revocation state, the route rule file followed, and the metrics
//! recorder.
//!
//! Revocation comes from the CRLs Warrant already serves (one per issuing
//! CA, signed, built from the store on each request): nothing new on the CA
//! to keep consistent, a signature that makes plain HTTP safe, and a size
//! bounded by what is revoked and not yet expired, which agents' short
//! lives keep small. Polled every second, a revocation reaches every
//! `warrant admit` within about two.

use super::AdmitArgs;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;
use warrant_admit::live::Admission;
use warrant_admit::rules::Rules;

/// A CRL larger than this is refused (a CA's unexpired revocations fit in
/// far less).
const MAX_CRL_BYTES: usize = 64 * 1024 * 1024;

pub(crate) struct CrlFetcher {
    client: reqwest::Client,
    urls: Vec<String>,
    clock_skew_secs: i64,
}

impl CrlFetcher {
    pub(crate) fn new(args: &AdmitArgs) -> Result<CrlFetcher> {
        let mut builder = reqwest::Client::builder().timeout(Duration::from_secs(5));
        if let Some(path) = &args.crl_tls_roots {
            let pem = std::fs::read(path)
                .with_context(|| format!("--crl-tls-roots {}", path.display()))?;
            let roots = reqwest::Certificate::from_pem_bundle(&pem)
                .with_context(|| format!("--crl-tls-roots {}", path.display()))?;
            builder = builder.tls_certs_only(roots);
        }
        Ok(CrlFetcher {
            client: builder.build().context("HTTP client")?,
            urls: args.crl_urls.clone(),
            clock_skew_secs: args.clock_skew_secs as i64,
        })
    }

    pub(crate) async fn fetch(&self, url: &str) -> Result<Vec<u8>> {
        let mut resp = self
            .client
            .get(url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)?;
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await? {
            body.extend_from_slice(&chunk);
            anyhow::ensure!(
                body.len() <= MAX_CRL_BYTES,
                "larger than {MAX_CRL_BYTES} bytes"
            );
        }
        Ok(body)
    }
}

/// Fetches every CRL each `interval`. A CRL counts only when its signature
/// verifies under the bundle's CA it names; its list is complete as of its
/// thisUpdate (plus the clock skew, never later than the fetch began), so
/// a replayed old CRL does not pass for a fresh one. A failed fetch leaves
/// that source's list to age until decisions fail closed.
pub(crate) async fn poll_crls(
    admission: Admission,
    fetcher: std::sync::Arc<CrlFetcher>,
    interval: Duration,
) {
    let mut failing = vec![false; fetcher.urls.len()];
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for (i, url) in fetcher.urls.iter().enumerate() {
            let started = super::unix_now();
            let outcome = fetcher.fetch(url).await.and_then(|der| {
                admission
                    .engine
                    .trust()
                    .verify_crl(&der)
                    .map_err(anyhow::Error::from)
            });
            match outcome {
                Ok(crl) => {
                    let this_update = crl
                        .this_update
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_secs() as i64)
                        .unwrap_or(0);
                    let as_of = started.min(this_update.saturating_add(fetcher.clock_skew_secs));
                    admission.replace_revoked(url, &crl.revoked_serials, as_of);
                    metrics::gauge!("warrant_admit_revoked_serials", "crl" => url.clone())
                        .set(crl.revoked_serials.len() as f64);
                    if failing[i] {
                        eprintln!("admit: {url}: CRL fetched again");
                        failing[i] = false;
                    }
                }
                Err(e) => {
                    metrics::counter!("warrant_admit_crl_failures_total", "crl" => url.clone())
                        .increment(1);
                    if !failing[i] {
                        eprintln!("admit: {url}: {e:#}; keeping the last list until it is stale");
                        failing[i] = true;
                    }
                }
            }
        }
    }
}

/// Keeps the token issuer's JWK Set (Warrant's `/.well-known/jwks.json`,
/// or a file) in force: fetched until it first loads, then every
/// `interval`, so a new token key is admitted within that. A set that fails
/// to fetch or parse leaves the one in force.
pub(crate) async fn poll_jwks(
    admission: Admission,
    fetcher: std::sync::Arc<CrlFetcher>,
    source: String,
    retry: Duration,
    interval: Duration,
) {
    let mut loaded: Option<aic::jwt::JwkSet> = None;
    let mut failing = false;
    loop {
        let outcome = if source.starts_with("http://") || source.starts_with("https://") {
            fetcher.fetch(&source).await
        } else {
            std::fs::read(&source).map_err(anyhow::Error::from)
        }
        .and_then(|bytes| aic::jwt::JwkSet::parse(&bytes).map_err(anyhow::Error::from));
        match outcome {
            Ok(keys) => {
                if loaded.as_ref() != Some(&keys) {
                    eprintln!("admit: {source}: {} token keys in force", keys.keys.len());
                    admission.engine.set_token_keys(keys.clone());
                    loaded = Some(keys);
                }
                failing = false;
            }
            Err(e) => {
                metrics::counter!("warrant_admit_jwks_failures_total").increment(1);
                if !failing {
                    eprintln!("admit: --jwks {source}: {e:#}; keeping the keys in force");
                    failing = true;
                }
            }
        }
        let wait = if loaded.is_some() { interval } else { retry };
        tokio::time::sleep(wait).await;
    }
}

/// Follows the route rule file: a file that fails to parse is refused
/// whole, with its line, and the rules in force stay.
pub(crate) async fn follow_rules(admission: Admission, path: PathBuf) {
    let shown = path.display().to_string();
    crate::follow::follow_file(path, move |bytes| {
        let parsed = std::str::from_utf8(bytes)
            .map_err(|e| format!("not UTF-8: {e}"))
            .and_then(|text| Rules::parse(text).map_err(|e| e.to_string()));
        match parsed {
            Ok(rules) => {
                eprintln!("admit: loaded {shown} ({} rules)", rules.len());
                metrics::counter!("warrant_admit_rule_reloads_total", "result" => "loaded")
                    .increment(1);
                admission.set_rules(rules);
            }
            Err(e) => {
                eprintln!("admit: {shown}: {e}; keeping the rules in force");
                metrics::counter!("warrant_admit_rule_reloads_total", "result" => "refused")
                    .increment(1);
            }
        }
    })
    .await
}

/// The Prometheus exposition of this process's metrics (the recorder is
/// installed on first use).
pub(crate) fn metrics_text() -> String {
    static HANDLE: OnceLock<Option<metrics_exporter_prometheus::PrometheusHandle>> =
        OnceLock::new();
    HANDLE
        .get_or_init(|| {
            metrics_exporter_prometheus::PrometheusBuilder::new()
                .install_recorder()
                .map_err(|e| eprintln!("admit: metrics recorder: {e}"))
                .ok()
        })
        .as_ref()
        .map(|h| h.render())
        .unwrap_or_default()
}

/// Installs the recorder before the first decision is counted.
pub(crate) fn install_metrics() {
    let _ = metrics_text();
}
