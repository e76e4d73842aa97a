//! The crate's layout holds: no import cycle between files (one found fails here, naming
//! the files and the imports that close it), and no import running up a layer: the
//! storage engine uses only itself and the small foundation files (`error`, `duration`,
//! `timefmt`), and neither replication nor the shared wire format reaches into the server.
//! Imports are read from the text, as a reader of the code sees them, leaving out test
//! modules: `use` lines (`use crate::…`, `use super::…`, `use self::…`, with their `{…}`
//! lists) and every path named inline (`crate::a::B` in a signature, `super::b::f(…)` in
//! a call), which import as surely as a `use` line does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file (`storage/bucket/mod.rs` → `storage::bucket`).
fn module_of(file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(SRC).expect("under src");
    let mut parts: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The text of a file without comments and without its test module.
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module paths a file imports: each `use` path, and each item of a `{…}` list
/// joined to it (one level of nesting is enough for this crate's imports).
fn imports(file: &Path, code: &str) -> Vec<Vec<String>> {
    let own = module_of(file);
    let mut out = Vec::new();
    for statement in code.split(';') {
        let Some(at) = statement.find("use ") else {
            continue;
        };
        let before = &statement[..at];
        if !before.trim().is_empty()
            && !before.trim_end().ends_with("pub")
            && !before.contains("pub(")
        {
            continue;
        }
        let path: String = statement[at + 4..].split_whitespace().collect();
        let (head, list) = match path.split_once("::{") {
            Some((head, list)) => (
                head.to_string(),
                Some(list.trim_end_matches('}').to_string()),
            ),
            None => (path.clone(), None),
        };
        let mut parts: Vec<String> = head.split("::").map(String::from).collect();
        let base = match parts.first().map(String::as_str) {
            Some("crate") => parts.split_off(1),
            Some("super") => above(&own, parts),
            Some("self") => {
                let mut here = own.clone();
                here.extend(parts.into_iter().skip(1));
                here
            }
            _ => continue,
        };
        out.push(base.clone());
        for item in list.iter().flat_map(|l| split_top(l)) {
            let item = item.split(" as ").next().unwrap_or_default();
            let item = item.split("::{").next().unwrap_or_default();
            if item.is_empty() || item == "self" {
                continue;
            }
            let mut path = base.clone();
            path.extend(item.split("::").filter(|s| !s.is_empty()).map(String::from));
            out.push(path);
        }
    }
    out
}

/// The module path `super::…::rest` names from module `own`: each `super` is one
/// module up from it.
fn above(own: &[String], parts: Vec<String>) -> Vec<String> {
    let mut up = own.to_vec();
    let mut rest = parts.into_iter().peekable();
    while rest.peek().is_some_and(|p| p == "super") {
        rest.next();
        up.pop();
    }
    up.extend(rest);
    up
}

/// The module paths named inline: every `crate::…` and `super::…` path in the code
/// (those of `use` lines too, which [`imports`] reads with their lists).
fn inline_paths(file: &Path, code: &str) -> Vec<Vec<String>> {
    let own = module_of(file);
    let bytes = code.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    for start in ["crate::", "super::"]
        .iter()
        .flat_map(|token| code.match_indices(token).map(|(at, _)| at))
    {
        if start > 0 && (is_ident(bytes[start - 1]) || bytes[start - 1] == b':') {
            continue;
        }
        let end = code[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .map_or(code.len(), |n| start + n);
        let mut parts: Vec<String> = code[start..end]
            .split("::")
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect();
        let path = if parts.first().is_some_and(|p| p == "crate") {
            parts.split_off(1)
        } else {
            above(&own, parts)
        };
        out.push(path);
    }
    out
}

/// The items of a `{…}` list, split at its top-level commas.
fn split_top(list: &str) -> Vec<String> {
    let (mut items, mut depth, mut current) = (Vec::new(), 0, String::new());
    for c in list.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    items.push(current);
    items
}

/// The import graph between files: file → files it imports from.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(Path::new(SRC), &mut files);
    let by_module: BTreeMap<Vec<String>, String> =
        files.iter().map(|f| (module_of(f), rel(f))).collect();
    let mut graph = BTreeMap::new();
    for file in &files {
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("a readable source");
        let mut targets = BTreeSet::new();
        let code = code_of(&text);
        let named = imports(file, &code)
            .into_iter()
            .chain(inline_paths(file, &code));
        for path in named {
            // The file holding the longest prefix of the path that is a module.
            let target = (1..=path.len())
                .rev()
                .find_map(|n| by_module.get(&path[..n]));
            if let Some(target) = target
                && *target != rel(file)
            {
                targets.insert(target.clone());
            }
        }
        graph.insert(rel(file), targets);
    }
    graph
}

fn rel(file: &Path) -> String {
    file.strip_prefix(SRC)
        .expect("under src")
        .to_string_lossy()
        .into_owned()
}

/// The strongly connected sets of two or more files (Tarjan's algorithm, iterative
/// enough for a crate's depth).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, node: &'a str) {
        let n = s.index.len();
        s.index.insert(node, n);
        s.low.insert(node, n);
        s.stack.push(node);
        s.on_stack.insert(node);
        for next in s.graph.get(node).into_iter().flatten() {
            let next = next.as_str();
            if !s.index.contains_key(next) {
                visit(s, next);
                let low = s.low[node].min(s.low[next]);
                s.low.insert(node, low);
            } else if s.on_stack.contains(next) {
                let low = s.low[node].min(s.index[next]);
                s.low.insert(node, low);
            }
        }
        if s.low[node] == s.index[node] {
            let mut set = Vec::new();
            while let Some(top) = s.stack.pop() {
                s.on_stack.remove(top);
                set.push(top.to_string());
                if top == node {
                    break;
                }
            }
            if set.len() > 1 {
                set.sort();
                s.found.push(set);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !s.index.contains_key(node.as_str()) {
            visit(&mut s, node);
        }
    }
    s.found
}

#[test]
fn no_import_cycle_between_files() {
    let graph = graph();
    assert!(graph.len() > 100, "{} files read", graph.len());
    let found = cycles(&graph);
    let described: Vec<String> = found
        .iter()
        .map(|set| {
            let arrows: Vec<String> = set
                .iter()
                .flat_map(|from| {
                    graph[from]
                        .iter()
                        .filter(|to| set.contains(to))
                        .map(move |to| format!("{from} -> {to}"))
                })
                .collect();
            format!("{set:?}: {}", arrows.join(", "))
        })
        .collect();
    assert!(found.is_empty(), "import cycles:\n{}", described.join("\n"));
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let mut graph = BTreeMap::new();
    graph.insert("a.rs".to_string(), BTreeSet::from(["b.rs".to_string()]));
    graph.insert("b.rs".to_string(), BTreeSet::from(["c.rs".to_string()]));
    graph.insert("c.rs".to_string(), BTreeSet::from(["a.rs".to_string()]));
    graph.insert("d.rs".to_string(), BTreeSet::from(["a.rs".to_string()]));
    assert_eq!(cycles(&graph), vec![vec!["a.rs", "b.rs", "c.rs"]]);
}

#[test]
fn inline_paths_import_as_use_lines_do() {
    let file = Path::new(SRC).join("lifecycle/events.rs");
    let code = "pub thinning: Option<crate::lifecycle::thinning::ThinningProgress>,\n\
                let x = super::meter::RunMeter::default(); // crate::not::this\n\
                let y = my_crate::other::Thing;";
    let found = inline_paths(&file, &code_of(code));
    assert_eq!(
        found,
        vec![
            vec!["lifecycle", "thinning", "ThinningProgress"],
            vec!["lifecycle", "meter", "RunMeter", "default"],
        ]
    );
}

#[test]
fn no_import_runs_up_a_layer() {
    let graph = graph();
    let rules: [(&str, &[&str]); 3] = [
        // The engine: itself and the foundation files.
        (
            "storage/",
            &["storage/", "error.rs", "duration.rs", "timefmt.rs"],
        ),
        // Replication: the engine, the shared wire format, itself.
        (
            "replication/",
            &[
                "replication/",
                "storage/",
                "wire/",
                "error.rs",
                "duration.rs",
                "timefmt.rs",
            ],
        ),
        ("wire/", &["wire/", "storage/", "error.rs"]),
    ];
    let mut wrong = up_a_layer(&graph, &rules);
    // The server's inner order: `api/` (the handlers and the router) is on top; the
    // layers below it (transport, codecs, state, auth, metrics, the trail, queries) never
    // reach up into it, and only the server's root (its start) may know the router.
    for (from, targets) in &graph {
        if !from.starts_with("server/") || from.starts_with("server/api/") {
            continue;
        }
        for to in targets.iter().filter(|to| to.starts_with("server/api/")) {
            if from != "server/mod.rs" {
                wrong.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports running up a layer:\n{}",
        wrong.join("\n")
    );
}

/// The arrows of `graph` that leave a layer for a file it may not use: `rules` pairs a
/// layer (a path prefix) with the prefixes it may import.
fn up_a_layer(
    graph: &BTreeMap<String, BTreeSet<String>>,
    rules: &[(&str, &[&str])],
) -> Vec<String> {
    let mut wrong = Vec::new();
    for (from, targets) in graph {
        for (layer, allowed) in rules {
            if !from.starts_with(layer) {
                continue;
            }
            for to in targets {
                if !allowed.iter().any(|a| to.starts_with(a)) {
                    wrong.push(format!("{from} -> {to}"));
                }
            }
        }
    }
    wrong
}

#[test]
fn the_layer_check_finds_an_arrow_up() {
    let mut graph = BTreeMap::new();
    graph.insert(
        "storage/a.rs".to_string(),
        BTreeSet::from(["error.rs".to_string(), "server/b.rs".to_string()]),
    );
    let rules: [(&str, &[&str]); 1] = [("storage/", &["storage/", "error.rs"])];
    assert_eq!(
        up_a_layer(&graph, &rules),
        vec!["storage/a.rs -> server/b.rs"]
    );
}
