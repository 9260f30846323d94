//! Cross-site request forgery: the checks in front of authentication.
//!
//! A browser attaches the `pki_token` cookie to requests that another site's
//! page makes. Two rules keep such a request from acting:
//!
//! 1. A request that sends a body must send JSON
//!    ([`crate::extract::require_json_content_type`]): a cross-site form or
//!    `text/plain` `fetch` is the only body a page can send without a CORS
//!    preflight, and this server answers no preflight.
//! 2. A state-changing request (any method but `GET`, `HEAD`, `OPTIONS`)
//!    authenticated by the cookie must come from this server's own origin:
//!    `Sec-Fetch-Site: same-origin`, or an `Origin` whose host and port are
//!    the request's `Host`.
//!
//! Bearer, `X-Auth-Token` and mTLS callers are not subject to rule 2: a
//! browser never adds those credentials to a cross-site request by itself.

use crate::error::{ApiError, ErrorKey};
use axum::http::{HeaderMap, Method, header};

/// Rule 2, for a cookie-authenticated request. `authority` is the request
/// URI's authority (HTTP/2 carries `:authority` instead of `Host`); `tls`
/// says whether the request came over the TLS listener.
pub fn require_same_origin(
    method: &Method,
    headers: &HeaderMap,
    authority: Option<&str>,
    tls: bool,
) -> Result<(), ApiError> {
    if is_safe_method(method) {
        return Ok(());
    }
    let fetch_site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    if fetch_site.is_some_and(|s| s.eq_ignore_ascii_case("same-origin")) {
        return Ok(());
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or(authority);
    let refuse = |why: &str| {
        Err(ApiError::detail(
            ErrorKey::Forbidden,
            format!(
                "cookie authentication: {why}; a state-changing request authenticated by the \
                 pki_token cookie needs a same-origin Origin or Sec-Fetch-Site: same-origin \
                 (other clients send Authorization: Bearer)"
            ),
        ))
    };
    match headers.get(header::ORIGIN).map(|v| v.to_str()) {
        None => refuse("no Origin header"),
        Some(Err(_)) => refuse("Origin is not ASCII"),
        Some(Ok(origin)) => match host {
            None => refuse("no Host header to compare the Origin with"),
            Some(host) if same_origin(origin, host, tls) => Ok(()),
            Some(_) => refuse("Origin is another site"),
        },
    }
}

/// Methods that must not change state (RFC 9110 §9.2.1).
pub fn is_safe_method(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether `origin` (`scheme://host[:port]`) names the server the request
/// was sent to: the same host (case-insensitive) and the same port, where a
/// missing port is the scheme's default (`Host` without a port: the default
/// port of the Origin's scheme, as for a page served through a reverse
/// proxy on 443). A request over the TLS listener needs an `https` origin.
/// `null` and anything unparsable are not the same origin.
pub fn same_origin(origin: &str, host: &str, tls: bool) -> bool {
    let Some((scheme, rest)) = origin.trim().split_once("://") else {
        return false;
    };
    let default_port = if scheme.eq_ignore_ascii_case("https") {
        443
    } else if scheme.eq_ignore_ascii_case("http") {
        if tls {
            return false;
        }
        80
    } else {
        return false;
    };
    let Some((origin_host, origin_port)) = split_host_port(rest) else {
        return false;
    };
    let Some((req_host, req_port)) = split_host_port(host.trim()) else {
        return false;
    };
    origin_host.eq_ignore_ascii_case(req_host)
        && origin_port.unwrap_or(default_port) == req_port.unwrap_or(default_port)
}

/// `host[:port]` or `[v6][:port]` → (host, port). `None` for a path, user
/// info, an empty host or a bad port.
fn split_host_port(s: &str) -> Option<(&str, Option<u16>)> {
    if s.is_empty() || s.contains(['/', '@', '?', '#', ' ']) {
        return None;
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        match after {
            "" => (v6, None),
            p => (v6, Some(p.strip_prefix(':')?)),
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        None => None,
        Some(p) => Some(p.parse::<u16>().ok()?),
    };
    Some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn same_origin_compares_host_and_effective_port() {
        assert!(same_origin(
            "http://127.0.0.1:8443",
            "127.0.0.1:8443",
            false
        ));
        assert!(same_origin(
            "http://LocalHost:8443",
            "localhost:8443",
            false
        ));
        assert!(same_origin("https://ca.example", "ca.example", false));
        assert!(same_origin("https://ca.example", "ca.example:443", true));
        assert!(same_origin("https://ca.example:443", "ca.example", true));
        assert!(same_origin("http://[::1]:8443", "[::1]:8443", false));
        assert!(same_origin("http://ca.example", "ca.example", false));
    }

    #[test]
    fn rejects_foreign_or_malformed_origins() {
        assert!(!same_origin(
            "https://evil.example",
            "127.0.0.1:8443",
            false
        ));
        assert!(!same_origin(
            "http://127.0.0.1:9999",
            "127.0.0.1:8443",
            false
        ));
        assert!(!same_origin("http://ca.example:8080", "ca.example", false));
        assert!(!same_origin(
            "https://ca.example.evil.example",
            "ca.example",
            false
        ));
        assert!(!same_origin("null", "ca.example", false));
        assert!(!same_origin("ca.example", "ca.example", false));
        assert!(!same_origin("ftp://ca.example", "ca.example", false));
        assert!(!same_origin("http://user@ca.example", "ca.example", false));
        assert!(!same_origin("http://ca.example/path", "ca.example", false));
        assert!(!same_origin(
            "http://ca.example:99999",
            "ca.example:99999",
            false
        ));
        // Over TLS, a page served over plain HTTP is another origin.
        assert!(!same_origin(
            "http://ca.example:8444",
            "ca.example:8444",
            true
        ));
    }

    #[test]
    fn rejects_cookie_post_without_same_origin_proof() {
        let post = Method::POST;
        let err =
            require_same_origin(&post, &headers(&[("host", "a:1")]), None, false).unwrap_err();
        assert_eq!(err.key, ErrorKey::Forbidden);
        assert!(err.detail.unwrap().contains("no Origin"));
        let foreign = headers(&[("host", "a:1"), ("origin", "https://evil.example")]);
        let err = require_same_origin(&post, &foreign, None, false).unwrap_err();
        assert!(err.detail.unwrap().contains("another site"));
        let cross = headers(&[("host", "a:1"), ("sec-fetch-site", "cross-site")]);
        assert!(require_same_origin(&Method::DELETE, &cross, None, false).is_err());
    }

    #[test]
    fn same_origin_proofs_and_safe_methods_pass() {
        let post = Method::POST;
        let same = headers(&[("host", "a:1"), ("origin", "http://a:1")]);
        assert!(require_same_origin(&post, &same, None, false).is_ok());
        let fetch = headers(&[("sec-fetch-site", "same-origin")]);
        assert!(require_same_origin(&post, &fetch, None, false).is_ok());
        // HTTP/2: no Host header, the authority comes from the URI.
        let h2 = headers(&[("origin", "https://a:1")]);
        assert!(require_same_origin(&post, &h2, Some("a:1"), true).is_ok());
        for safe in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert!(require_same_origin(&safe, &HeaderMap::new(), None, false).is_ok());
        }
    }
}
