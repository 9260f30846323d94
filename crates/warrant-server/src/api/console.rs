//! `/ui/`: the delegations console, a static page embedded at build time
//! (`build.rs` copies `ui/` and, with npm, the uPlot chart library into
//! OUT_DIR).
//!
//! The page holds no secret and no data: it reads everything through the
//! same API as any client, authenticated by the `pki_token` session cookie
//! that `POST /api/v1/users/login` sets, so the CSRF rules of `crate::csrf`
//! apply to its changes like to any other cookie caller. Every answer here
//! carries a Content-Security-Policy that allows scripts, styles and
//! connections from this origin only (no inline script, no `eval`) and
//! forbids framing, so an injected string can neither run nor be clickjacked.

use crate::error::{ApiError, ErrorKey};
use axum::extract::Path;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

macro_rules! embed {
    ($name:literal) => {
        include_bytes!(concat!(env!("OUT_DIR"), "/ui/", $name)).as_slice()
    };
}

/// `'self'` only; `img-src data:` for nothing but the browser's own form
/// icons. uPlot styles its elements through the CSSOM (`element.style`),
/// which `style-src 'self'` does not block.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// One embedded file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asset {
    pub body: &'static [u8],
    pub content_type: &'static str,
    pub cache_control: &'static str,
}

/// The hand-written files change with the binary under the same name:
/// revalidate every time. The library's file is pinned by the lock file.
const REVALIDATE: &str = "no-cache";
const VENDOR_CACHE: &str = "public, max-age=86400";
const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// The file named `name` (`index.html` for `/ui/`); `None` for anything
/// else, so no path reaches the file system. Built without npm, the two
/// library files are empty (`WARRANT_CONSOLE_BUILT=0`): the page then
/// shows the rates as figures instead of a chart.
pub fn asset(name: &str) -> Option<Asset> {
    let (body, content_type, cache_control) = match name {
        "index.html" => (embed!("index.html"), HTML, REVALIDATE),
        "app.js" => (embed!("app.js"), JS, REVALIDATE),
        "style.css" => (embed!("style.css"), CSS, REVALIDATE),
        "uPlot.iife.min.js" => (embed!("assets/uPlot.iife.min.js"), JS, VENDOR_CACHE),
        "uPlot.min.css" => (embed!("assets/uPlot.min.css"), CSS, VENDOR_CACHE),
        _ => return None,
    };
    Some(Asset {
        body,
        content_type,
        cache_control,
    })
}

/// Headers every console answer carries, found or not.
fn security_headers() -> [(HeaderName, HeaderValue); 5] {
    [
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (
            HeaderName::from_static("cross-origin-opener-policy"),
            HeaderValue::from_static("same-origin"),
        ),
    ]
}

fn serve(name: &str) -> Response {
    let Some(a) = asset(name) else {
        return (
            security_headers(),
            ApiError::detail(ErrorKey::NotFound, "no such console file"),
        )
            .into_response();
    };
    (
        security_headers(),
        [
            (header::CONTENT_TYPE, a.content_type),
            (header::CACHE_CONTROL, a.cache_control),
        ],
        a.body,
    )
        .into_response()
}

/// `/ui`: the page's relative links need the trailing slash.
pub(super) async fn redirect() -> Response {
    (
        StatusCode::PERMANENT_REDIRECT,
        security_headers(),
        [(header::LOCATION, "/ui/")],
    )
        .into_response()
}

/// `/ui/`.
pub(super) async fn index() -> Response {
    serve("index.html")
}

/// `/ui/{file}`. `index.html` is reachable only as `/ui/`, so the page has
/// one URL.
pub(super) async fn file(Path(name): Path<String>) -> Response {
    if name == "index.html" {
        return serve("");
    }
    serve(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_and_library_have_their_content_types() {
        assert_eq!(asset("index.html").unwrap().content_type, HTML);
        assert_eq!(asset("app.js").unwrap().content_type, JS);
        assert_eq!(asset("style.css").unwrap().content_type, CSS);
        assert_eq!(asset("uPlot.iife.min.js").unwrap().content_type, JS);
        assert_eq!(asset("uPlot.min.css").unwrap().content_type, CSS);
        assert_eq!(asset("app.js").unwrap().cache_control, REVALIDATE);
        assert!(!asset("app.js").unwrap().body.is_empty());
    }

    #[test]
    fn rejects_names_outside_the_embedded_set() {
        for name in [
            "",
            "../Cargo.toml",
            "..%2fCargo.toml",
            "APP.JS",
            "app.js/",
            "package.json",
            "package-lock.json",
            "e2e.cjs",
            "node_modules/uplot/dist/uPlot.iife.min.js",
        ] {
            assert!(asset(name).is_none(), "{name}");
        }
    }

    #[test]
    fn policy_allows_no_inline_script_nor_framing() {
        assert!(CONTENT_SECURITY_POLICY.starts_with("default-src 'self'"));
        assert!(CONTENT_SECURITY_POLICY.contains("frame-ancestors 'none'"));
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-inline"));
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-eval"));
    }
}
