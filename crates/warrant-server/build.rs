//! Builds the delegations console's third-party asset (uPlot) with npm and copies it,
//! with the hand-written page, into OUT_DIR for `include_bytes!` (`src/api/console.rs`).
//!
//! The same scheme as `crates/gust/build.rs`: npm runs in a copy of `ui/` inside
//! OUT_DIR, so the source tree never gets a `node_modules/` and cargo's cache decides
//! when to rerun (only when the page or package files change). If npm is missing or
//! fails (offline machine), the build still succeeds with a warning; the console then
//! works without its rate chart and says how to get it.

use std::path::{Path, PathBuf};
use std::process::Command;

const PAGES: [&str; 3] = ["index.html", "app.js", "style.css"];
const VENDOR: [(&str, &str); 2] = [
    (
        "node_modules/uplot/dist/uPlot.iife.min.js",
        "uPlot.iife.min.js",
    ),
    ("node_modules/uplot/dist/uPlot.min.css", "uPlot.min.css"),
];

fn main() {
    let src = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("ui");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("ui");
    let files = ["package.json", "package-lock.json"]
        .iter()
        .chain(PAGES.iter());
    for f in files.clone() {
        println!("cargo:rerun-if-changed=ui/{f}");
    }
    std::fs::create_dir_all(&out).unwrap();
    for f in files {
        std::fs::copy(src.join(f), out.join(f)).unwrap();
    }
    let built = VENDOR.iter().all(|(from, _)| out.join(from).exists()) || npm_ci(&out);
    let assets = out.join("assets");
    std::fs::create_dir_all(&assets).unwrap();
    for (from, to) in VENDOR {
        let content = if built {
            std::fs::read(out.join(from)).unwrap_or_default()
        } else {
            Vec::new()
        };
        std::fs::write(assets.join(to), content).unwrap();
    }
    println!(
        "cargo:rustc-env=WARRANT_CONSOLE_BUILT={}",
        if built { "1" } else { "0" }
    );
}

fn npm_ci(dir: &Path) -> bool {
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"])
        .current_dir(dir)
        .status();
    match status {
        Ok(s) if s.success() => true,
        Ok(s) => {
            println!(
                "cargo:warning=npm ci for the warrant console failed ({s}); /ui/ will work without its rate chart"
            );
            false
        }
        Err(e) => {
            println!(
                "cargo:warning=npm not found ({e}); the warrant console is built without uPlot, /ui/ will work without its rate chart"
            );
            false
        }
    }
}
