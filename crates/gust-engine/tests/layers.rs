//! The engine's modules form layers: no module reads, through any chain of others,
//! a module that reads it. The run spec (`spec`) is plain data at the bottom;
//! scenario, monitor and transport read it and never feed back into it.
//!
//! The graph comes from the source text: every `crate::a::b` and `super::a` path
//! outside `#[cfg(test)]` code is an edge from the file's module to the longest
//! module that path names. A module reading its own ancestor (a child using its
//! parent's types) is not an edge: the two are one unit.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/runner/mod.rs` → `runner`, `src/spec/steps.rs` → `spec::steps`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file
        .strip_prefix(src)
        .expect("under src")
        .with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts.join("::")
}

/// The text of a file without comments and without its `#[cfg(test)]` items.
fn code_of(text: &str) -> String {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    match code.find("#[cfg(test)]") {
        Some(i) => code[..i].to_string(),
        None => code,
    }
}

/// Every `prefix` path in `code`, as its `::`-separated identifiers.
fn paths_after<'a>(code: &'a str, prefix: &'a str) -> impl Iterator<Item = Vec<&'a str>> + 'a {
    code.match_indices(prefix).filter_map(move |(i, _)| {
        let before = code[..i].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            return None;
        }
        let rest = &code[i + prefix.len()..];
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        let segs: Vec<&str> = rest[..end].split("::").filter(|s| !s.is_empty()).collect();
        (!segs.is_empty()).then_some(segs)
    })
}

fn longest_module(modules: &BTreeSet<String>, segs: &[&str]) -> Option<String> {
    (1..=segs.len())
        .rev()
        .map(|n| segs[..n].join("::"))
        .find(|m| modules.contains(m))
}

fn is_ancestor(ancestor: &str, of: &str) -> bool {
    ancestor.is_empty() || of.starts_with(&format!("{ancestor}::"))
}

fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let sources: Vec<(String, String)> = files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).expect("read source");
            (module_of(&src, f), code_of(&text))
        })
        .collect();
    let modules: BTreeSet<String> = sources.iter().map(|(m, _)| m.clone()).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, code) in &sources {
        let parent = module.rsplit_once("::").map_or("", |(p, _)| p).to_string();
        let mut targets: Vec<String> = paths_after(code, "crate::")
            .filter_map(|segs| longest_module(&modules, &segs))
            .collect();
        for segs in paths_after(code, "super::") {
            let mut full: Vec<&str> = parent.split("::").filter(|s| !s.is_empty()).collect();
            full.extend(segs);
            targets.extend(longest_module(&modules, &full));
        }
        let edges = graph.entry(module.clone()).or_default();
        for t in targets {
            if t != *module && !is_ancestor(&t, module) {
                edges.insert(t);
            }
        }
    }
    graph
}

/// A cycle through `start`, if there is one: the modules in order.
fn cycle_through(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_string(), vec![start.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((node, path)) = stack.pop() {
        for next in graph.get(&node).into_iter().flatten() {
            if next == start {
                return Some(path);
            }
            if seen.insert(next.clone()) {
                let mut p = path.clone();
                p.push(next.clone());
                stack.push((next.clone(), p));
            }
        }
    }
    None
}

#[test]
fn the_engine_has_no_import_cycle() {
    let graph = import_graph();
    assert!(graph.len() > 20, "found too few modules: {graph:?}");
    let cycles: Vec<String> = graph
        .keys()
        .filter_map(|m| cycle_through(&graph, m))
        .map(|c| c.join(" → "))
        .collect();
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_run_spec_reads_nothing_of_the_engine_but_its_error() {
    let graph = import_graph();
    for (module, edges) in &graph {
        if module == "spec" || module.starts_with("spec::") {
            let outside: Vec<&String> = edges
                .iter()
                .filter(|t| *t != "error" && !t.starts_with("spec"))
                .collect();
            assert!(outside.is_empty(), "{module} reads {outside:?}");
        }
    }
}

#[test]
fn scenario_monitor_and_transport_never_read_the_validated_config() {
    let graph = import_graph();
    for (module, edges) in &graph {
        let layer = module.split("::").next().unwrap_or("");
        if [
            "scenario",
            "monitor",
            "transport",
            "metrics",
            "source",
            "schedule",
        ]
        .contains(&layer)
        {
            assert!(
                !edges.iter().any(|t| t == "config" || t == "runner"),
                "{module} reads {edges:?}"
            );
        }
    }
}

#[test]
fn the_graph_sees_a_cycle_when_there_is_one() {
    // The check itself must be able to fail.
    let mut graph = import_graph();
    graph
        .entry("spec".to_string())
        .or_default()
        .insert("config".to_string());
    assert!(cycle_through(&graph, "spec").is_some());
}
