//! The module graph has no cycles: read from the `crate::` paths in the code (not in comments)
//! of each top-level module of `src/`, as docs/ARCHITECTURE.md describes; and likewise inside
//! every folder of `src/`, from the `super::` and `crate::<folder>::` paths of its submodules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The modules of `dir` (a file `x.rs` or a folder `x/`), but those in `roots` (the crate roots,
/// or the `mod.rs` of a folder).
fn modules(dir: &Path, roots: &[&str]) -> BTreeSet<String> {
    fs_err::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_owned();
            if p.is_dir() { Some(name) } else { name.strip_suffix(".rs").map(str::to_owned) }
        })
        .filter(|m| !roots.contains(&m.as_str()))
        .collect()
}

/// The modules that `code` names after one of `prefixes` (`crate::`), outside comments.
fn named(code: &str, prefixes: &[&str], known: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        let uses = prefixes.iter().flat_map(|p| line.match_indices(p).map(move |(at, _)| at + p.len()));
        for start in uses {
            let rest = &line[start..];
            let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
            if known.contains(&rest[..end]) {
                found.insert(rest[..end].to_owned());
            }
        }
    }
    found
}

/// The modules of `src` (but `roots`) and those each names after one of `prefixes`.
fn graph(src: &Path, roots: &[&str], prefixes: &[&str]) -> Graph {
    let known = modules(src, roots);
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
        edges.extend(named(&code, prefixes, &known).into_iter().filter(|m| *m != top));
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
    let graph = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &["lib", "main"], &["crate::"]);
    assert!(graph.len() > 10 && graph["build"].contains("filter"), "the graph was read: {graph:?}");
    if let Some(found) = cycle(&graph) {
        panic!("the modules import each other in a cycle: {}", found.join(" → "));
    }
}

#[test]
fn the_review_submodules_import_each_other_without_cycles() {
    let review = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/review");
    let graph = graph(&review, &["mod"], &["super::", "crate::review::"]);
    assert!(
        graph.len() > 8 && graph["apply"].contains("rules") && graph["decisions"].contains("rules"),
        "the graph was read: {graph:?}"
    );
    if let Some(found) = cycle(&graph) {
        panic!("the review modules import each other in a cycle: {}", found.join(" → "));
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

#[test]
fn the_submodules_of_every_folder_import_each_other_without_cycles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut folders = 0;
    for entry in
        walkdir::WalkDir::new(&src).min_depth(1).into_iter().flatten().filter(|e| e.file_type().is_dir())
    {
        let relative = entry.path().strip_prefix(&src).unwrap();
        let path =
            relative.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("::");
        let graph = graph(entry.path(), &["mod"], &["super::", &format!("crate::{path}::")]);
        folders += 1;
        if let Some(found) = cycle(&graph) {
            panic!(
                "the modules of src/{} import each other in a cycle: {}",
                relative.display(),
                found.join(" → ")
            );
        }
    }
    assert!(folders > 10, "the folders were read: {folders}");
}
