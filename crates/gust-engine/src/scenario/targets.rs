//! Targets files in vegeta's format, for plain replays of a list of requests:
//!
//! ```text
//! GET http://127.0.0.1:8080/a
//! X-Account: 7
//!
//! POST http://127.0.0.1:8080/b
//! Content-Type: application/json
//! @bodies/b.json
//! ```
//!
//! A target is a `METHOD URL` line, then any `Name: value` header lines, then an
//! optional `@path` body file; a blank line ends it. Lines starting with `#` are
//! comments. URLs must share the run's origin (or be a bare `/path`). Requests cycle
//! through the targets in file order.

use std::sync::Arc;

use bytes::Bytes;

use crate::scenario::same_origin_path;
use crate::source::{Request, RequestSource, WorkerSource};
use crate::spec::Target;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct TargetsError {
    pub line: usize,
    pub reason: String,
}

fn err(line: usize, reason: impl Into<String>) -> TargetsError {
    TargetsError {
        line,
        reason: reason.into(),
    }
}

/// Parse a targets file. `load_body` reads an `@path` body.
pub fn parse_targets(
    text: &str,
    target: &Target,
    load_body: &dyn Fn(&str) -> Result<Vec<u8>, String>,
) -> Result<Vec<Request>, TargetsError> {
    let mut out: Vec<Request> = Vec::new();
    // The target being read and whether its body was given (nothing may follow it).
    let mut current: Option<(Request, bool)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = raw.trim();
        if line.starts_with('#') {
            continue;
        }
        if line.is_empty() {
            if let Some((req, _)) = current.take() {
                out.push(req);
            }
            continue;
        }
        let Some((req, has_body)) = current.as_mut() else {
            let (method, url) = line
                .split_once(char::is_whitespace)
                .ok_or_else(|| err(line_no, format!("expected 'METHOD URL', got {line:?}")))?;
            let method = http::Method::from_bytes(method.as_bytes())
                .map_err(|_| err(line_no, format!("{method:?} is not an HTTP method")))?;
            let url = url.trim();
            let path = if url.starts_with('/') {
                url.to_string()
            } else {
                same_origin_path(url, target).map_err(|r| err(line_no, r))?
            };
            if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
                return Err(err(line_no, "URL contains spaces or control characters"));
            }
            current = Some((
                Request {
                    method,
                    path,
                    headers: Vec::new(),
                    body: Bytes::new(),
                },
                false,
            ));
            continue;
        };
        if *has_body {
            return Err(err(
                line_no,
                "nothing may follow the @body line; end the target with a blank line",
            ));
        }
        if let Some(path) = line.strip_prefix('@') {
            req.body = Bytes::from(load_body(path).map_err(|r| err(line_no, r))?);
            *has_body = true;
            continue;
        }
        let (name, value) = line.split_once(':').ok_or_else(|| {
            err(
                line_no,
                format!("expected 'Name: value' or '@file', got {line:?}"),
            )
        })?;
        let name = name.trim();
        let value = value.trim();
        http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| err(line_no, format!("{name:?} is not a header name")))?;
        http::HeaderValue::from_str(value)
            .map_err(|_| err(line_no, format!("value of {name:?} is not a header value")))?;
        req.headers.push((name.to_string(), value.to_string()));
    }
    if let Some((req, _)) = current {
        out.push(req);
    }
    if out.is_empty() {
        return Err(err(1, "the file holds no target"));
    }
    Ok(out)
}

/// A source that cycles through a list of requests.
#[derive(Debug, Clone)]
pub struct TargetsSource {
    targets: Arc<[Request]>,
}

impl TargetsSource {
    /// `targets` must not be empty (as [`parse_targets`] guarantees).
    pub fn new(targets: Vec<Request>) -> Self {
        Self {
            targets: targets.into(),
        }
    }
}

struct TargetsWorker {
    targets: Arc<[Request]>,
    next: usize,
}

impl WorkerSource for TargetsWorker {
    fn next_request(&mut self, _seq: u64) -> Request {
        // Each worker walks the list from a different offset, so a short run
        // still covers every target.
        let i = self.next % self.targets.len().max(1);
        self.next = self.next.wrapping_add(1);
        self.targets.get(i).cloned().unwrap_or(Request {
            method: http::Method::GET,
            path: "/".into(),
            headers: Vec::new(),
            body: Bytes::new(),
        })
    }
}

impl RequestSource for TargetsSource {
    fn for_worker(&self, worker: usize) -> Box<dyn WorkerSource> {
        Box::new(TargetsWorker {
            targets: Arc::clone(&self.targets),
            next: worker,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse_url;

    fn target() -> Target {
        parse_url("http://127.0.0.1:8080/").unwrap()
    }

    fn bodies(path: &str) -> Result<Vec<u8>, String> {
        match path {
            "b.json" => Ok(b"{\"x\":1}".to_vec()),
            other => Err(format!("cannot read {other}")),
        }
    }

    #[test]
    fn parses_methods_headers_and_bodies() {
        let text = "# replay\nGET http://127.0.0.1:8080/a?x=1\nX-Account: 7\nAccept: */*\n\n\nPOST /b\nContent-Type: application/json\n@b.json\n\nDELETE http://127.0.0.1:8080\n";
        let t = parse_targets(text, &target(), &bodies).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t[0].path, "/a?x=1");
        assert_eq!(t[0].headers.len(), 2);
        assert_eq!(t[1].method, http::Method::POST);
        assert_eq!(&t[1].body[..], b"{\"x\":1}");
        assert_eq!(t[2].path, "/");
    }

    #[test]
    fn workers_cycle_through_targets() {
        let t = parse_targets("GET /a\n\nGET /b\n", &target(), &bodies).unwrap();
        let src = TargetsSource::new(t);
        let mut w = src.for_worker(0);
        let paths: Vec<_> = (0..3).map(|i| w.next_request(i).path).collect();
        assert_eq!(paths, vec!["/a", "/b", "/a"]);
        assert_eq!(src.for_worker(1).next_request(0).path, "/b");
    }

    #[test]
    fn rejects_other_origin() {
        let e = parse_targets("GET http://example.com/\n", &target(), &bodies).unwrap_err();
        assert_eq!(e.line, 1);
    }

    #[test]
    fn rejects_bad_method_header_and_missing_body_file() {
        assert!(parse_targets("G@T /\n", &target(), &bodies).is_err());
        let e = parse_targets("GET /\nno colon here\n", &target(), &bodies).unwrap_err();
        assert_eq!(e.line, 2);
        let e = parse_targets("GET /\n@missing\n", &target(), &bodies).unwrap_err();
        assert!(e.reason.contains("missing"), "{e}");
    }

    #[test]
    fn rejects_lines_after_the_body_and_empty_files() {
        let e = parse_targets("POST /\n@b.json\nX: 1\n", &target(), &bodies).unwrap_err();
        assert_eq!(e.line, 3);
        assert!(parse_targets("# nothing\n\n", &target(), &bodies).is_err());
        assert!(parse_targets("GET\n", &target(), &bodies).is_err());
    }
}
