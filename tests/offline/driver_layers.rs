//! The live driver's shape holds (docs/src/architecture.md, "The driver's layers"): no
//! import cycle between the top-level modules of crates/kube/src, and no source file of the
//! engine, the driver or the binary (crates/*/src, src) over 800 lines but the generated ones (`// @generated` on their first line: proto/core_v1.rs
//! and proto/convert.rs, written by proto/gen_*.py). The module graph is read from the
//! source text: a file belongs to its top-level module (the first component of its path
//! under src/), and every `crate::m`, `super::m` or `crate::{.., m, ..}` naming another
//! top-level module `m` is an edge (coarse on purpose: a `super::m` that means a sibling
//! named like a top-level module counts too). Test modules count as well: a test that
//! reaches up a layer ties the layers together as much as code does.
//!

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The most lines a hand-written source file may have.
const MAX_LINES: usize = 800;

fn kube_src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/kube/src")
}

/// Every .rs file under `dir`, relative to it, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path.strip_prefix(root).expect("under root").to_path_buf());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out
}

/// The top-level module a file belongs to (None for lib.rs, the crate root).
fn top_module(file: &Path) -> Option<String> {
    let first = file.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib").then(|| name.to_string())
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'
}

/// The lowercase identifiers `text` names right after `crate::` or `super::`, and inside
/// a `crate::{...}` or `super::{...}` group.
fn named_paths(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for prefix in ["crate::", "super::"] {
        for (at, _) in text.match_indices(prefix) {
            let rest = &text[at + prefix.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                // Whole words only: `Index` is a type, not the module `ndex`.
                for word in group.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                    if !word.is_empty() && word.chars().all(is_ident_char) {
                        names.insert(word.to_string());
                    }
                }
            } else {
                let word: String = rest.chars().take_while(|c| is_ident_char(*c)).collect();
                if !word.is_empty() {
                    names.insert(word);
                }
            }
        }
    }
    names
}

/// Each top-level module of crates/kube/src and the top-level modules it names.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = kube_src();
    let files = rust_files(&src);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| top_module(f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = modules
        .iter()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    for file in &files {
        let Some(module) = top_module(file) else {
            continue;
        };
        let text = std::fs::read_to_string(src.join(file)).expect("a source file");
        for name in named_paths(&text) {
            if name != module && modules.contains(&name) {
                graph.get_mut(&module).expect("a module").insert(name);
            }
        }
    }
    graph
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            let graph = self.graph;
            for w in &graph[v] {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

#[test]
fn the_reader_finds_paths_and_groups() {
    let names = named_paths(
        "use super::index::{lock, Index};\nuse crate::{watch, dra_commit::split, Wake};\n\
         let t = crate::clock::now_ms();",
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["clock", "dra_commit", "index", "split", "watch"]
    );
}

#[test]
fn the_cycle_finder_finds_a_circle_and_nothing_else() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(m, to)| (m.into(), to.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(cycles(&graph), [vec!["a", "b", "c"]]);
}

#[test]
fn the_driver_modules_import_each_other_without_a_cycle() {
    let graph = module_graph();
    assert!(graph.contains_key("index") && graph.contains_key("driver"));
    assert!(
        graph["driver"].contains("index"),
        "the reader sees the driver's imports"
    );
    let found = cycles(&graph);
    assert!(
        found.is_empty(),
        "import cycles between crates/kube/src's modules (each a set of modules that reach \
         each other): {found:?}; move the type that ties them to the lower layer \
         (docs/src/architecture.md, \"The driver's layers\")"
    );
}

#[test]
fn no_hand_written_source_file_is_over_800_lines() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut long = Vec::new();
    for dir in ["crates/engine/src", "crates/kube/src", "src"] {
        let src = root.join(dir);
        for file in rust_files(&src) {
            let text = std::fs::read_to_string(src.join(&file)).expect("a source file");
            if text.starts_with("// @generated") {
                continue;
            }
            let lines = text.lines().count();
            if lines > MAX_LINES {
                long.push(format!("{dir}/{}: {lines} lines", file.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines (split by concern, or move the tests to a file of their \
         own):\n{}",
        long.join("\n")
    );
}
