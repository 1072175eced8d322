//! The module graph has no cycles: read from the `crate::` paths in the code (not in comments)
//! of each top-level module of `src/`, as docs/ARCHITECTURE.md describes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The top-level modules of `src/` (a file `x.rs` or a folder `x/`), but the crate roots.
fn modules(src: &Path) -> BTreeSet<String> {
    fs_err::read_dir(src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_owned();
            if p.is_dir() { Some(name) } else { name.strip_suffix(".rs").map(str::to_owned) }
        })
        .filter(|m| m != "lib" && m != "main")
        .collect()
}

/// The modules that `code` names after `crate::`, outside comments.
fn named(code: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for (at, _) in line.match_indices("crate::") {
            let rest = &line[at + "crate::".len()..];
            let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
            if known.contains(&rest[..end]) {
                found.insert(rest[..end].to_owned());
            }
        }
    }
    found
}

fn graph(src: &Path) -> Graph {
    let known = modules(src);
    let mut graph = Graph::new();
    for entry in walkdir::WalkDir::new(src) {
        let entry = entry.unwrap();
        let relative = entry.path().strip_prefix(src).unwrap();
        let top = relative.components().next().and_then(|c| c.as_os_str().to_str()).unwrap_or_default();
        let top = top.strip_suffix(".rs").unwrap_or(top).to_owned();
        if !known.contains(&top) || entry.path().extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let code = fs_err::read_to_string(entry.path()).unwrap();
        let edges = graph.entry(top.clone()).or_default();
        edges.extend(named(&code, &known).into_iter().filter(|m| *m != top));
    }
    graph
}

/// A cycle through `graph`, as the modules on it, if there is one.
fn cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_owned());
            return Some(found);
        }
        if !done.insert(node.to_owned()) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_top_level_modules_import_each_other_without_cycles() {
    let graph = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(graph.len() > 10 && graph["pipeline"].contains("filter"), "the graph was read: {graph:?}");
    if let Some(found) = cycle(&graph) {
        panic!("the modules import each other in a cycle: {}", found.join(" → "));
    }
}

#[test]
fn a_cycle_is_found() {
    let edges = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")];
    let mut graph = Graph::new();
    for (from, to) in edges {
        graph.entry(from.to_owned()).or_default().insert(to.to_owned());
    }
    assert_eq!(cycle(&graph).unwrap(), ["a", "b", "c", "a"]);
    graph.get_mut("c").unwrap().remove("a");
    assert_eq!(cycle(&graph), None);
}
