//! The dashboard's files, embedded at build time by `build.rs` (see the README).

macro_rules! embed {
    ($name:literal) => {
        include_bytes!(concat!(env!("OUT_DIR"), "/dashboard/", $name)).as_slice()
    };
}

const FALLBACK: &str = "<!doctype html><title>gust dashboard</title><h1>Dashboard assets missing</h1>\
<p>This gust binary was built without npm, so the chart library (uPlot) is not embedded.\
 Install Node.js/npm and rebuild (<code>cargo build -p gust</code>); the API works regardless.</p>";

/// The file and its content type; `None` for an unknown name.
pub fn file(name: &str) -> Option<(&'static [u8], &'static str)> {
    let built = env!("GUST_DASHBOARD_BUILT") == "1";
    Some(match name {
        "index.html" if !built => (FALLBACK.as_bytes(), "text/html; charset=utf-8"),
        "index.html" => (embed!("index.html"), "text/html; charset=utf-8"),
        "app.js" => (embed!("app.js"), "text/javascript; charset=utf-8"),
        "capacity.js" => (embed!("capacity.js"), "text/javascript; charset=utf-8"),
        "style.css" => (embed!("style.css"), "text/css; charset=utf-8"),
        "uPlot.iife.min.js" => (
            embed!("assets/uPlot.iife.min.js"),
            "text/javascript; charset=utf-8",
        ),
        "uPlot.min.css" => (embed!("assets/uPlot.min.css"), "text/css; charset=utf-8"),
        _ => return None,
    })
}
