//! The crate's layout holds: no import cycle between files (one found fails here, naming
//! the files and the imports that close it), none between folders, and no import running
//! up a layer: the storage engine uses only itself and the small foundation files
//! (`error`, `duration`, `timefmt`), neither replication nor the shared wire format
//! reaches into the server, and inside the server and the engine each has its order.
//! Imports are read from the text, as a reader of the code sees them, leaving out test
//! modules: `use` lines (`use crate::…`, `use super::…`, `use self::…`, with their `{…}`
//! lists) and every path named inline (`crate::a::B` in a signature, `super::b::f(…)` in
//! a call), which import as surely as a `use` line does. A file naming the modules it
//! declares itself (`mod x;` then `use x::…` or `pub use x::…`) is its folder's outline,
//! not an import. The binary (`src/bin/halflife/`) is a crate of its own, read apart.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The library's root folder; `src/bin/` below it holds the binary, a crate of its own.
const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
/// The binary's root folder: its files import the library as `halflife::`, and each
/// other as `crate::`.
const BIN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/bin/halflife");

/// Every `.rs` file under `dir`, leaving out the binaries' folder of the library.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("a directory entry").path();
        if path == Path::new(SRC).join("bin") {
            continue;
        }
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file of the crate rooted at `root` (`storage/bucket/mod.rs` →
/// `storage::bucket`).
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).expect("under the crate's root");
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
fn imports(root: &Path, file: &Path, code: &str) -> Vec<Vec<String>> {
    let own = module_of(root, file);
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

/// The module paths named inline: every `crate::…` and `super::…` path in the code (those of `use` lines too, which [`imports`] reads with their lists).
fn inline_paths(root: &Path, file: &Path, code: &str) -> Vec<Vec<String>> {
    let own = module_of(root, file);
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

/// The import graph between the library's files: file → files it imports from.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    graph_of(Path::new(SRC))
}

/// The import graph between the files of the crate rooted at `root`.
fn graph_of(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(root, &mut files);
    let rel = |file: &Path| {
        file.strip_prefix(root)
            .expect("under the crate's root")
            .to_string_lossy()
            .into_owned()
    };
    let by_module: BTreeMap<Vec<String>, String> =
        files.iter().map(|f| (module_of(root, f), rel(f))).collect();
    let mut graph = BTreeMap::new();
    for file in &files {
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("a readable source");
        let mut targets = BTreeSet::new();
        let code = code_of(&text);
        let named = imports(root, file, &code)
            .into_iter()
            .chain(inline_paths(root, file, &code));
        for path in named {
            // The file holding the longest prefix of the path that is a module (the
            // crate root for an item it holds or re-exports).
            let target = (0..=path.len())
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
    assert_no_cycle(&graph);
}

#[test]
fn no_import_cycle_between_the_binarys_files() {
    let graph = graph_of(Path::new(BIN));
    assert!(graph.contains_key("main.rs"), "{graph:?}");
    assert!(graph["serve.rs"].contains("main.rs"), "{graph:?}");
    assert_no_cycle(&graph);
}

fn assert_no_cycle(graph: &BTreeMap<String, BTreeSet<String>>) {
    let found = cycles(graph);
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

/// The import graph between folders: a folder → the folders its files import from,
/// leaving out a folder and the folders inside it (a folder's root declares its children;
/// a child may use its parent's shared items). A cycle here ties folders together that a
/// file-level check lets through (`a/x.rs → b/y.rs → a/z.rs`): the folders could not
/// become crates of their own.
fn folder_graph(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let folder = folder_of;
    let mut folders: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, targets) in graph {
        let a = folder(from);
        folders.entry(a.clone()).or_default();
        for to in targets {
            let b = folder(to);
            if !a.starts_with(&b) && !b.starts_with(&a) {
                folders.entry(a.clone()).or_default().insert(b.clone());
                folders.entry(b).or_default();
            }
        }
    }
    folders
}

#[test]
fn no_import_cycle_between_folders() {
    let folders = folder_graph(&graph());
    assert!(folders.contains_key("storage/entry/"), "{folders:?}");
    let found = cycles(&folders);
    let described: Vec<String> = found
        .iter()
        .map(|set| {
            // The file imports behind each arrow of the cycle.
            let files = graph();
            let arrows: Vec<String> = files
                .iter()
                .flat_map(|(from, targets)| targets.iter().map(move |to| (from, to)))
                .filter(|(from, to)| {
                    let (a, b) = (folder_of(from), folder_of(to));
                    a != b && set.contains(&a) && set.contains(&b)
                })
                .map(|(from, to)| format!("{from} -> {to}"))
                .collect();
            format!("{set:?}: {}", arrows.join(", "))
        })
        .collect();
    assert!(
        found.is_empty(),
        "import cycles between folders:\n{}",
        described.join("\n")
    );
}

/// The folder of a file, `""` for the crate's root.
fn folder_of(file: &str) -> String {
    file.rfind('/')
        .map_or(String::new(), |at| file[..=at].to_string())
}

#[test]
fn the_folder_check_finds_a_cycle_no_file_closes() {
    let files: BTreeMap<String, BTreeSet<String>> = [
        // a/ → b/ → c/ → a/, through different files: no file cycle.
        ("a/x.rs", vec!["b/y.rs"]),
        ("b/y.rs", vec!["c/z.rs"]),
        ("c/z.rs", vec!["a/w.rs"]),
        ("a/w.rs", vec![]),
        // A folder and the folder inside it may use each other.
        ("d/mod.rs", vec!["d/e/f.rs"]),
        ("d/e/f.rs", vec![]),
        ("d/e/g.rs", vec!["d/h.rs"]),
        ("d/h.rs", vec![]),
        ("g.rs", vec!["d/mod.rs"]),
    ]
    .into_iter()
    .map(|(f, to)| (f.to_string(), to.into_iter().map(String::from).collect()))
    .collect();
    assert!(cycles(&files).is_empty());
    let folders = folder_graph(&files);
    assert_eq!(cycles(&folders), vec![vec!["a/", "b/", "c/"]]);
    assert_eq!(folders["d/"], BTreeSet::new());
    // The crate's root holds every folder: its files' imports are the layers' to judge.
    assert_eq!(folders[""], BTreeSet::new());
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
    let found = inline_paths(Path::new(SRC), &file, &code_of(code));
    assert_eq!(
        found,
        vec![
            vec!["lifecycle", "thinning", "ThinningProgress"],
            vec!["lifecycle", "meter", "RunMeter", "default"],
        ]
    );
}

/// The library's layers, top first: a file may import files of its own layer and of the
/// layers below it, never above. ARCHITECTURE.md gives the same order.
const CRATE_LAYERS: &[&[&str]] = &[
    &["lib.rs"],
    // The operator's tools the binary drives.
    &["demo.rs", "check.rs", "maintenance.rs"],
    &["server/"],
    &["report/"],
    &["lifecycle/"],
    &["replication/"],
    &["ros/"],
    &["wire/"],
    &["fixtures.rs", "fixtures/"],
    &["storage/"],
    &["duration.rs", "timefmt.rs"],
    &["error.rs"],
];

/// The server's inner layers, top first: its start, the handlers and their router, what
/// the handlers share, the codecs and the records kept of requests, the transport, and
/// who is calling. A file under `server/` in none of them fails the check.
const SERVER_LAYERS: &[&[&str]] = &[
    &["server/mod.rs"],
    &["server/api/"],
    &[
        "server/state.rs",
        "server/follower.rs",
        "server/bucket_rename.rs",
        "server/provision/mod.rs",
        "server/provision/replications.rs",
        "server/unsupported.rs",
        "server/console.rs",
        "server/browser_guard.rs",
        "server/cors.rs",
        "server/links.rs",
    ],
    &[
        "server/metrics/",
        "server/trail/",
        "server/queries.rs",
        "server/protocol/",
    ],
    &["server/http/"],
    // The variables' grouping is shared by every provisioned family, tokens included;
    // the lease of a PRIMARY or SECONDARY (the binary drives it) needs only the engine.
    &["server/auth/", "server/env_groups.rs", "server/ha/"],
];

/// The storage engine's inner layers, top first: its outline, what works on the whole
/// store, the store, a bucket, what runs over a bucket's entries, one entry, what an entry
/// hands work to (the object-store tier, the caches, the background threads), the file
/// formats, durability, and the small leaves everything uses. A file imports only its own
/// layer and those below: the object-store layer knows no bucket, compression no bucket,
/// the formats nothing of durability's callers. Inside the engine the re-exports of
/// `storage/mod.rs` are for callers outside it; a file in it imports the file that holds
/// the item (the outline is the top layer, so naming it fails here).
const STORAGE_LAYERS: &[&[&str]] = &[
    &["storage/mod.rs"],
    &[
        "storage/system.rs",
        "storage/replica.rs",
        "storage/remote_collector.rs",
    ],
    &["storage/store.rs"],
    &["storage/marker.rs", "storage/config.rs"],
    &["storage/bucket/"],
    &["storage/compress/", "storage/query.rs"],
    &["storage/merge.rs"],
    &["storage/entry/"],
    &[
        "storage/remote/",
        "storage/cache",
        "storage/sealer.rs",
        "storage/observer.rs",
        "storage/fan_out.rs",
    ],
    &["storage/format/"],
    &["storage/sync/"],
    &[
        "storage/condition/",
        "storage/names.rs",
        "storage/pattern.rs",
        "storage/attachments.rs",
        "storage/settings.rs",
        "storage/record.rs",
        "storage/priority.rs",
        "storage/storage_cap.rs",
        "storage/fence.rs",
    ],
];

#[test]
fn no_import_runs_up_a_layer() {
    let graph = graph();
    let mut wrong = against_the_order(&graph, "", CRATE_LAYERS);
    wrong.extend(against_the_order(&graph, "server/", SERVER_LAYERS));
    wrong.extend(against_the_order(&graph, "storage/", STORAGE_LAYERS));
    assert!(
        wrong.is_empty(),
        "imports running up a layer (or files in no layer):\n{}",
        wrong.join("\n")
    );
}

/// The arrows of `graph` between files under `scope` that run from a layer to one above
/// it (`layers` top first, each a list of path prefixes), and the files under `scope` that
/// no layer holds.
fn against_the_order(
    graph: &BTreeMap<String, BTreeSet<String>>,
    scope: &str,
    layers: &[&[&str]],
) -> Vec<String> {
    let layer_of = |file: &str| {
        layers
            .iter()
            .position(|prefixes| prefixes.iter().any(|p| file.starts_with(p)))
    };
    let mut wrong = Vec::new();
    for (from, targets) in graph.iter().filter(|(f, _)| f.starts_with(scope)) {
        let Some(level) = layer_of(from) else {
            wrong.push(format!("{from} is in no layer"));
            continue;
        };
        for to in targets.iter().filter(|t| t.starts_with(scope)) {
            if layer_of(to).is_some_and(|above| above < level) {
                wrong.push(format!("{from} -> {to}"));
            }
        }
    }
    wrong
}

#[test]
fn the_layer_check_finds_an_arrow_up_and_a_file_in_no_layer() {
    let mut graph = BTreeMap::new();
    graph.insert(
        "storage/a.rs".to_string(),
        BTreeSet::from(["error.rs".to_string(), "server/b.rs".to_string()]),
    );
    graph.insert("server/b.rs".to_string(), BTreeSet::new());
    graph.insert("stray.rs".to_string(), BTreeSet::new());
    let layers: &[&[&str]] = &[&["server/"], &["storage/"], &["error.rs"]];
    assert_eq!(
        against_the_order(&graph, "", layers),
        vec!["storage/a.rs -> server/b.rs", "stray.rs is in no layer"]
    );
    let inner: &[&[&str]] = &[&["server/api/"], &["server/b.rs"]];
    graph.insert(
        "server/b.rs".to_string(),
        BTreeSet::from(["server/api/c.rs".to_string()]),
    );
    graph.insert("server/api/c.rs".to_string(), BTreeSet::new());
    assert_eq!(
        against_the_order(&graph, "server/", inner),
        vec!["server/b.rs -> server/api/c.rs"]
    );
}
