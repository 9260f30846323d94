//! The two proxy protocols, one decision: nginx `auth_request` at
//! `/nginx` (the original method, URI, client address and escaped client
//! certificate in headers nginx sets) and Envoy's HTTP `ext_authz` at
//! `/envoy/<original path>` (the original method and path, the certificate
//! in `x-forwarded-client-cert`). Both answer 200 with the identity headers
//! for the upstream, or 401/403 with the reason's key.

use super::AdmitService;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;
use warrant_admit::engine::{AdmissionRequest, Credential, Decision, Identity};
use warrant_admit::forwarded::{self, ForwardedError};
use warrant_admit::reason::{REASON_HEADER, STEP_HEADER};

/// Headers nginx sets on the subrequest (docs/admission.md has the
/// configuration that sets them).
pub const NGINX_CERT: &str = "x-client-cert";
pub const NGINX_METHOD: &str = "x-original-method";
pub const NGINX_URI: &str = "x-original-uri";
/// Optional: `$scheme://$http_host$request_uri`, for DPoP tokens.
pub const NGINX_URL: &str = "x-original-url";
pub const NGINX_CLIENT: &str = "x-real-ip";
/// Envoy's client certificate header.
pub const ENVOY_XFCC: &str = "x-forwarded-client-cert";

/// What an admitted request carries upstream.
pub const AGENT_ID: &str = "x-agent-id";
pub const AGENT_PRINCIPAL: &str = "x-agent-principal";
pub const AGENT_MODE: &str = "x-agent-mode";
pub const AGENT_CAPABILITIES: &str = "x-agent-capabilities";
pub const AGENT_SERIAL: &str = "x-agent-serial";
pub const AGENT_TOKEN_ID: &str = "x-agent-token-id";

pub(crate) fn router(service: Arc<AdmitService>) -> Router {
    Router::new()
        .route("/nginx", any(nginx))
        .route("/envoy", any(envoy))
        .route("/envoy/{*path}", any(envoy))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
        .with_state(service)
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

async fn nginx(State(service): State<Arc<AdmitService>>, headers: HeaderMap) -> Response {
    // A subrequest without the headers nginx is configured to set is a
    // configuration error (or not nginx): refuse, never guess.
    let (Some(method), Some(uri)) = (header(&headers, NGINX_METHOD), header(&headers, NGINX_URI))
    else {
        return misconfigured(&format!("{NGINX_METHOD} and {NGINX_URI} are required"));
    };
    // The absolute form, when configured, is what a DPoP proof's `htu`
    // is checked against.
    let uri = header(&headers, NGINX_URL).unwrap_or(uri);
    let client_ip = header(&headers, NGINX_CLIENT).and_then(|v| v.trim().parse::<IpAddr>().ok());
    let cert = headers.get(NGINX_CERT).map(|v| {
        v.to_str()
            .map_err(|_| ForwardedError::Malformed("the header is not ASCII"))
            .and_then(forwarded::nginx_escaped_cert)
    });
    decide(&service, method, uri, client_ip, cert, &headers)
}

async fn envoy(State(service): State<Arc<AdmitService>>, request: Request<Body>) -> Response {
    let method = request.method().as_str().to_string();
    let uri = request.uri();
    // The check request's path is `/envoy` + the original path.
    let original = uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .unwrap_or("/")
        .strip_prefix("/envoy")
        .unwrap_or("/");
    let original = if original.is_empty() || original.starts_with('?') {
        format!("/{original}")
    } else {
        original.to_string()
    };
    let headers = request.headers();
    // Envoy keeps the original authority in the check request; the scheme
    // is the listener's (`x-forwarded-proto`, https by default: it
    // terminates mTLS). The absolute URI is what a DPoP proof names.
    let original = match header(headers, "host") {
        Some(host) if !host.is_empty() => {
            let scheme = match header(headers, "x-forwarded-proto") {
                Some("http") => "http",
                _ => "https",
            };
            format!("{scheme}://{host}{original}")
        }
        _ => original,
    };
    // Envoy (with `use_remote_address`) appends the address it saw last:
    // earlier entries are the client's own claims.
    let client_ip = header(headers, "x-envoy-external-address")
        .or_else(|| header(headers, "x-forwarded-for").and_then(|v| v.rsplit(',').next()))
        .and_then(|v| v.trim().parse::<IpAddr>().ok());
    let cert = headers.get(ENVOY_XFCC).map(|v| {
        v.to_str()
            .map_err(|_| ForwardedError::Malformed("the header is not ASCII"))
            .and_then(forwarded::xfcc_client_cert)
    });
    decide(&service, &method, &original, client_ip, cert, headers)
}

fn decide(
    service: &AdmitService,
    method: &str,
    uri: &str,
    client_ip: Option<IpAddr>,
    cert: Option<Result<Vec<u8>, ForwardedError>>,
    headers: &HeaderMap,
) -> Response {
    let credential = Credential::from_parts(
        cert.as_ref().map(|c| c.as_deref().map_err(Clone::clone)),
        header(headers, "authorization"),
        header(headers, "dpop"),
    );
    let request = AdmissionRequest {
        method,
        uri,
        client_ip,
        credential,
        now: SystemTime::now(),
        current_concurrency: None,
    };
    let started = std::time::Instant::now();
    let decision = service.admission.decide(&request);
    record(service, &request, &decision, started.elapsed());
    match decision {
        Ok(admitted) => {
            let mut response = StatusCode::OK.into_response();
            if let Some(identity) = &admitted.identity {
                identity_headers(response.headers_mut(), identity);
            }
            response
        }
        Err(refused) => {
            let status =
                StatusCode::from_u16(refused.reason.status()).unwrap_or(StatusCode::FORBIDDEN);
            let body = serde_json::json!({
                "reason": refused.reason.key(),
                "step": refused.reason.step().number(),
            });
            let mut response = (status, axum::Json(body)).into_response();
            let h = response.headers_mut();
            h.insert(
                REASON_HEADER,
                HeaderValue::from_static(refused.reason.key()),
            );
            h.insert(
                STEP_HEADER,
                HeaderValue::from(u16::from(refused.reason.step().number())),
            );
            response
        }
    }
}

/// A header value as is when it is visible ASCII, percent-encoded
/// otherwise, so an identity never breaks the answer or smuggles a header.
fn header_value(text: &str) -> HeaderValue {
    if text.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
        && let Ok(v) = HeaderValue::from_str(text)
    {
        return v;
    }
    let encoded: String =
        percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).collect();
    HeaderValue::from_str(&encoded).unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn identity_headers(h: &mut HeaderMap, identity: &Identity) {
    let caps = identity
        .capabilities
        .iter()
        .map(|c| format!("{}:{}", c.scheme, c.id))
        .collect::<Vec<_>>()
        .join(",");
    let mode = match identity.mode {
        aic::model::DelegationMode::Authorized => "authorized",
        aic::model::DelegationMode::Representative => "representative",
    };
    for (name, value) in [
        (AGENT_ID, Some(identity.agent_id.as_str())),
        (AGENT_PRINCIPAL, Some(identity.principal.as_str())),
        (AGENT_MODE, Some(mode)),
        (AGENT_CAPABILITIES, Some(caps.as_str())),
        (AGENT_SERIAL, identity.serial_hex.as_deref()),
        (AGENT_TOKEN_ID, identity.token_id.as_deref()),
    ] {
        if let Some(value) = value {
            h.insert(HeaderName::from_static(name), header_value(value));
        }
    }
}

/// Metrics and the decision log: the agent, principal, method, path (no
/// query: it may carry secrets), result and reason; never the credential.
fn record(
    service: &AdmitService,
    request: &AdmissionRequest<'_>,
    decision: &Decision,
    took: std::time::Duration,
) {
    let (result, reason) = match decision {
        Ok(_) => ("admit", "admitted"),
        Err(r) => ("refuse", r.reason.key()),
    };
    metrics::counter!("warrant_admit_decisions_total", "result" => result, "reason" => reason)
        .increment(1);
    metrics::histogram!("warrant_admit_decision_seconds").record(took.as_secs_f64());
    let Some(log) = &service.decision_log else {
        return;
    };
    let (agent, principal) = match decision {
        Ok(a) => (
            a.identity.as_ref().map(|i| i.agent_id.clone()),
            a.identity.as_ref().map(|i| i.principal.clone()),
        ),
        Err(r) => (r.agent_id.clone(), None),
    };
    // The path alone: no query (it may carry secrets), no scheme or host.
    let path = warrant_admit::rules::request_path(request.uri)
        .unwrap_or_else(|_| request.uri.split(['?', '#']).next().unwrap_or(""));
    let line = serde_json::json!({
        "time": aic::time::format_rfc3339(super::unix_now()),
        "agent": agent,
        "principal": principal,
        "method": request.method,
        "path": path,
        "rule_line": decision.as_ref().ok().map(|a| a.rule_line),
        "result": result,
        "reason": reason,
    });
    use std::io::Write;
    let mut w = log.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(e) = writeln!(w, "{line}") {
        eprintln!("admit: decision log: {e}");
    }
}

fn misconfigured(why: &str) -> Response {
    eprintln!("admit: refused a subrequest: {why}");
    let mut response = (
        StatusCode::FORBIDDEN,
        axum::Json(serde_json::json!({"reason": "admit.proxy_misconfigured", "detail": why})),
    )
        .into_response();
    response.headers_mut().insert(
        REASON_HEADER,
        HeaderValue::from_static("admit.proxy_misconfigured"),
    );
    response
}

/// Ready while the revocation state is fresh enough to admit anyone.
async fn ready(State(service): State<Arc<AdmitService>>) -> Response {
    let fresh = service.admission.check_fresh(super::unix_now());
    match fresh {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "revocation state stale\n").into_response(),
    }
}

async fn metrics() -> Response {
    super::refresh::metrics_text().into_response()
}
