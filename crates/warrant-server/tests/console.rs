//! The delegations console at `/ui/` on a real server: the page and its
//! files with their content types and security headers, and what the
//! console's routes refuse. The page's behaviour is tested in a browser by
//! `ui/e2e.cjs` (CI's "warrant console browser test").

mod common;

use common::*;
use warrant_server::ErrorKey;

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn fetch(srv: &TestServer, method: reqwest::Method, path: &str) -> reqwest::Response {
    client()
        .request(method, srv.url(path))
        .send()
        .await
        .unwrap()
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> &'a str {
    r.headers()
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .to_str()
        .unwrap()
}

/// An `on…=` attribute (`onclick="…"`): inline script the CSP would block.
fn has_inline_handler(html: &str) -> bool {
    html.match_indices(" on").any(|(i, _)| {
        let rest = &html[i + 3..];
        let name_len = rest.bytes().take_while(|b| b.is_ascii_alphabetic()).count();
        name_len > 0 && rest[name_len..].starts_with('=')
    })
}

fn assert_locked_down(r: &reqwest::Response) {
    let csp = header(r, "content-security-policy");
    assert!(csp.starts_with("default-src 'self'"), "{csp}");
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(header(r, "x-frame-options"), "DENY");
    assert_eq!(header(r, "x-content-type-options"), "nosniff");
}

#[tokio::test]
async fn serves_the_console_page_with_a_strict_csp() {
    let srv = TestServer::start().await;
    let r = fetch(&srv, reqwest::Method::GET, "/ui/").await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), "text/html; charset=utf-8");
    assert_eq!(header(&r, "cache-control"), "no-cache");
    assert_locked_down(&r);
    let html = r.text().await.unwrap();
    assert!(html.contains("<script src=\"app.js\""), "{html}");
    // Every script is a file of this origin: none inline, none elsewhere.
    for tag in html.split("<script").skip(1) {
        assert!(
            tag.trim_start().starts_with("src=\""),
            "inline script: {tag}"
        );
        assert!(!tag.contains("//"), "script from another origin: {tag}");
    }
    assert!(!has_inline_handler(&html), "no inline event handlers");
    srv.stop().await;
}

#[tokio::test]
async fn serves_the_console_files_with_their_content_types() {
    let srv = TestServer::start().await;
    for (path, ty, cache) in [
        ("/ui/app.js", "text/javascript; charset=utf-8", "no-cache"),
        ("/ui/style.css", "text/css; charset=utf-8", "no-cache"),
        (
            "/ui/uPlot.iife.min.js",
            "text/javascript; charset=utf-8",
            "public, max-age=86400",
        ),
        (
            "/ui/uPlot.min.css",
            "text/css; charset=utf-8",
            "public, max-age=86400",
        ),
    ] {
        let r = fetch(&srv, reqwest::Method::GET, path).await;
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(header(&r, "content-type"), ty, "{path}");
        assert_eq!(header(&r, "cache-control"), cache, "{path}");
        assert_locked_down(&r);
    }
    let js = fetch(&srv, reqwest::Method::GET, "/ui/app.js")
        .await
        .text()
        .await
        .unwrap();
    assert!(js.contains("\"use strict\""));
    assert!(!js.contains("innerHTML"), "the page renders text only");
    srv.stop().await;
}

#[tokio::test]
async fn redirects_ui_without_slash() {
    let srv = TestServer::start().await;
    let r = fetch(&srv, reqwest::Method::GET, "/ui").await;
    assert_eq!(r.status(), 308);
    assert_eq!(header(&r, "location"), "/ui/");
    srv.stop().await;
}

#[tokio::test]
async fn rejects_unknown_console_files() {
    let srv = TestServer::start().await;
    for path in [
        "/ui/nope.js",
        "/ui/index.html", // the page has one URL, /ui/
        "/ui/package.json",
        "/ui/package-lock.json",
        "/ui/e2e.cjs",
        "/ui/APP.JS",
    ] {
        let r = fetch(&srv, reqwest::Method::GET, path).await;
        assert_locked_down(&r);
        assert_error(&decode(r).await, ErrorKey::NotFound);
    }
    srv.stop().await;
}

#[tokio::test]
async fn rejects_paths_out_of_the_console() {
    let srv = TestServer::start().await;
    for path in [
        "/ui/..%2fCargo.toml",
        "/ui/%2e%2e%2f%2e%2e%2fCargo.toml",
        "/ui/node_modules/uplot/dist/uPlot.iife.min.js",
        "/ui/app.js/",
        "/ui//etc/passwd",
    ] {
        let r = fetch(&srv, reqwest::Method::GET, path).await;
        assert_error(&decode(r).await, ErrorKey::NotFound);
    }
    srv.stop().await;
}

#[tokio::test]
async fn rejects_methods_other_than_get() {
    let srv = TestServer::start().await;
    for (method, path) in [
        (reqwest::Method::POST, "/ui/"),
        (reqwest::Method::PUT, "/ui/app.js"),
        (reqwest::Method::DELETE, "/ui/style.css"),
        (reqwest::Method::POST, "/ui"),
    ] {
        let r = fetch(&srv, method.clone(), path).await;
        assert_error(&decode(r).await, ErrorKey::MethodNotAllowed);
    }
    let head = fetch(&srv, reqwest::Method::HEAD, "/ui/").await;
    assert_eq!(head.status(), 200);
    srv.stop().await;
}

#[tokio::test]
async fn rejects_console_requests_over_the_client_rate_limit() {
    let srv = TestServer::start_with(
        None,
        "[rate_limit]\nenabled = true\nrate = 0.01\nburst = 3\n",
    )
    .await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let r = fetch(&srv, reqwest::Method::GET, "/ui/app.js").await;
        statuses.push(r.status().as_u16());
    }
    assert!(statuses.contains(&429), "{statuses:?}");
    let r = fetch(&srv, reqwest::Method::GET, "/ui/").await;
    assert_error(&decode(r).await, ErrorKey::RateLimited);
    // Probes stay outside the limit.
    let r = fetch(&srv, reqwest::Method::GET, "/healthz").await;
    assert_eq!(r.status(), 200);
    srv.stop().await;
}
