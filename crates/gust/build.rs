//! Builds the dashboard's third-party assets (uPlot) with npm and copies them, with the
//! hand-written page, into OUT_DIR for `include_bytes!`.
//!
//! npm runs in a copy of `dashboard/` inside OUT_DIR, so the source tree never gets a
//! `node_modules/` and cargo's cache decides when to rerun (only when the package files
//! change). If npm is missing or fails (offline machine), the build still succeeds with
//! a warning and the daemon serves a page explaining how to get the assets: one crate
//! that cannot reach a registry should not break the whole workspace's build.

use std::path::{Path, PathBuf};
use std::process::Command;

const PAGES: [&str; 4] = ["index.html", "app.js", "style.css", "capacity.js"];
const VENDOR: [(&str, &str); 2] = [
    (
        "node_modules/uplot/dist/uPlot.iife.min.js",
        "uPlot.iife.min.js",
    ),
    ("node_modules/uplot/dist/uPlot.min.css", "uPlot.min.css"),
];

fn main() {
    let src = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("dashboard");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("dashboard");
    for f in ["package.json", "package-lock.json"]
        .iter()
        .chain(PAGES.iter())
    {
        println!("cargo:rerun-if-changed=dashboard/{f}");
    }
    std::fs::create_dir_all(&out).unwrap();
    for f in ["package.json", "package-lock.json"]
        .iter()
        .chain(PAGES.iter())
    {
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
        "cargo:rustc-env=GUST_DASHBOARD_BUILT={}",
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
                "cargo:warning=npm ci for the gust dashboard failed ({s}); the daemon will serve a page explaining how to build the assets"
            );
            false
        }
        Err(e) => {
            println!(
                "cargo:warning=npm not found ({e}); the gust dashboard is built without uPlot, the daemon will serve a page explaining how to build the assets"
            );
            false
        }
    }
}
