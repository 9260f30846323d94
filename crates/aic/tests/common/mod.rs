//! Shared test helpers: locating the conformance vectors produced by the Go reference.
#![allow(dead_code)]

use std::path::PathBuf;

/// `shared/conformance/` sits beside the repository checkout. `AIC_CONFORMANCE_DIR`
/// overrides it. A missing directory fails loudly: these vectors are the
/// acceptance criterion, so silently skipping would hide an interop break.
pub fn conformance_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("AIC_CONFORMANCE_DIR") {
        return PathBuf::from(dir);
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let candidates = [
        manifest.join("../../../shared/conformance"),
        manifest.join("../../shared/conformance"),
        manifest.join("../../../../shared/conformance"),
    ];
    for c in &candidates {
        if c.join("aic-der-vectors.json").is_file() {
            return c.clone();
        }
    }
    panic!(
        "conformance vectors not found; looked in {:?}. Set AIC_CONFORMANCE_DIR to the folder holding aic-der-vectors.json",
        candidates
    );
}

pub fn load_json(name: &str) -> serde_json::Value {
    let path = conformance_dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

pub fn der_vector(name: &str) -> Vec<u8> {
    let v = load_json("aic-der-vectors.json");
    let hex = v[name]
        .as_str()
        .unwrap_or_else(|| panic!("vector {name} missing"));
    aic::hex::decode(hex).unwrap()
}

pub fn jwt_vectors() -> serde_json::Value {
    load_json("aic-jwt-vectors.json")
}
