//! The house's shape, checked from the code's own imports (`crate::` paths outside test modules):
//! folders are stages stacked in layers, and an arrow (an import) only ever points down or
//! sideways within a folder, never up; and no file imports, directly or through others, a file
//! that imports it (no import circle). A new arrow up is a design decision: move the shared piece
//! down (most often into `apis`, `kube_ext` or `runtime`) instead.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, bottom first: a module may use its own layer and those below.
const LAYERS: &[&[&str]] = &[
    &["kube_ext"],
    &["apis"],
    &["config"],
    &["runtime", "cli"],
    &["helm", "tunnel"],
    &["clusters", "deployer", "plugin"],
    &["pipeline"],
    &["mcs"],
    &["scheduler", "agent"],
    &["hub"],
    &["roles", "fuzzing", "fuzz_support", "lib", "main"],
];

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// Every `.rs` file under `dir`.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("reading src").flatten() {
        let p = entry.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs")
            // a sibling test file (`x/tests.rs` of `x.rs`) may reach anywhere, as inline tests
            && p.file_stem().is_none_or(|s| s != "tests")
        {
            out.push(p);
        }
    }
}

/// `src/a/b.rs` -> `a::b`, `src/a/mod.rs` -> `a`, `src/lib.rs` -> `lib`.
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

/// The text of a file before its first inline test module (tests may reach anywhere).
fn non_test(text: &str) -> &str {
    let mut from = 0;
    while let Some(i) = text[from..].find("#[cfg(test)]") {
        let at = from + i;
        let rest = text[at + "#[cfg(test)]".len()..].trim_start();
        let rest = rest.strip_prefix("pub(crate) ").unwrap_or(rest);
        if let Some(m) = rest.strip_prefix("mod ") {
            let name_len = m
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(m.len());
            if m[name_len..].trim_start().starts_with('{') {
                return &text[..at];
            }
        }
        from = at + 1;
    }
    text
}

/// The module paths a file names from the crate root: `crate::...` in `use` lines (groups
/// expanded one level) and inline, and `super::...` resolved against `module` (the file's own).
fn crate_paths(text: &str, module: &str) -> Vec<String> {
    let mut out = Vec::new();
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    for (needle, base) in [("crate::", String::new()), ("super::", parent(module))] {
        for (i, _) in code.match_indices(needle) {
            let preceded_by_word = code[..i]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
            let after = &code[i + needle.len()..];
            if !preceded_by_word {
                let mut base = base.clone();
                let mut after_supers = after;
                // `super::super::x`
                while let Some(more) = after_supers.strip_prefix("super::") {
                    base = parent(&base);
                    after_supers = more;
                }
                let join = |p: &str| {
                    if base.is_empty() {
                        p.to_string()
                    } else {
                        format!("{base}::{p}")
                    }
                };
                let path: String = after_supers
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                let path = path.trim_end_matches(':').to_string();
                // `crate::a::{b, c::d}`: each member of the group
                let tail = after_supers[path.len()..].trim_start_matches(':');
                if let Some(group) = tail.strip_prefix('{') {
                    let inner = &group[..group.find('}').unwrap_or(group.len())];
                    for member in inner.split(',') {
                        let m: String = member
                            .trim()
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                            .collect();
                        let full = if path.is_empty() {
                            m.clone()
                        } else if m.is_empty() || m == "self" {
                            path.clone()
                        } else {
                            format!("{path}::{m}")
                        };
                        if !full.is_empty() {
                            out.push(join(&full));
                        }
                    }
                } else if !path.is_empty() {
                    out.push(join(&path));
                }
            }
        }
    }
    out
}

/// `a::b::c` -> `a::b`; a top module's parent is the crate root, `""`.
fn parent(module: &str) -> String {
    module
        .rsplit_once("::")
        .map(|(p, _)| p.to_string())
        .unwrap_or_default()
}

/// The module (one of `modules`) a path lands in: its longest prefix that is a module.
fn target(path: &str, modules: &BTreeSet<String>) -> Option<String> {
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len())
        .rev()
        .map(|n| parts[..n].join("::"))
        .find(|m| modules.contains(m))
}

fn top(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

/// Every import arrow between two files of `src` (file module -> file module).
fn arrows() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let modules: BTreeSet<String> = all.iter().map(|f| module_of(&src, f)).collect();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &all {
        let from = module_of(&src, f);
        let text = std::fs::read_to_string(f).expect("reading a source file");
        for path in crate_paths(non_test(&text), &from) {
            if let Some(to) = target(&path, &modules)
                && to != from
            {
                out.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    out
}

/// The strongly connected groups of more than one file (Tarjan).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        if let Some(ws) = s.graph.get(v) {
            for w in ws {
                if !s.index.contains_key(w.as_str()) {
                    visit(s, w);
                    let lw = s.low[w.as_str()];
                    let lv = s.low[v];
                    s.low.insert(v, lv.min(lw));
                } else if s.on_stack.contains(w.as_str()) {
                    let iw = s.index[w.as_str()];
                    let lv = s.low[v];
                    s.low.insert(v, lv.min(iw));
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                group.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                s.out.push(group);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn no_import_circles() {
    let found = circles(&arrows());
    assert!(
        found.is_empty(),
        "files that import each other (directly or through others): {found:#?}"
    );
}

#[test]
fn arrows_point_down_the_layers() {
    let mut up = Vec::new();
    for (from, tos) in arrows() {
        for to in tos {
            let (a, b) = (top(&from), top(&to));
            match (layer(a), layer(b)) {
                (Some(la), Some(lb)) if lb > la => up.push(format!("{from} -> {to}")),
                (None, _) | (_, None) => {
                    up.push(format!("{from} -> {to}: a folder with no layer in LAYERS"))
                }
                _ => {}
            }
        }
    }
    assert!(up.is_empty(), "imports that point up the layers: {up:#?}");
}

#[test]
fn the_checker_reads_paths_as_rustc_does() {
    let text = "use crate::runtime::{self, Runtime, cache::Shared};\nfn f() { crate::hub::shadow::is_watch(x); }\n// crate::roles in a comment\nuse super::{model, rest::patch};\nlet y = super::super::lib_x;";
    assert_eq!(
        crate_paths(text, "hub::shadow::printers"),
        [
            "runtime",
            "runtime::Runtime",
            "runtime::cache::Shared",
            "hub::shadow::is_watch",
            "hub::shadow::model",
            "hub::shadow::rest::patch",
            "hub::lib_x",
        ]
    );
    let inline = "fn a() {}\n#[cfg(test)]\npub(crate) mod fuzz_support;\nfn b() {}\n#[cfg(test)]\nmod fuzz {\n use crate::x; }";
    assert_eq!(
        non_test(inline),
        "fn a() {}\n#[cfg(test)]\npub(crate) mod fuzz_support;\nfn b() {}\n"
    );
    let g = BTreeMap::from([
        ("a".to_string(), BTreeSet::from(["b".to_string()])),
        ("b".to_string(), BTreeSet::from(["c".to_string()])),
        ("c".to_string(), BTreeSet::from(["a".to_string()])),
        ("d".to_string(), BTreeSet::from(["a".to_string()])),
    ]);
    assert_eq!(circles(&g), [["a", "b", "c"]]);
}
