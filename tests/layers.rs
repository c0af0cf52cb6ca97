//! The layers of docs/architecture.md, checked over the source: every module imports only
//! from its own layer and the layers below it, and no import circle exists at any level of
//! the module tree (among the top-level modules, among the children of each module, ...).
//!
//! An import is any `crate::...`, `super::...` or `self::...` path in code (comments and
//! `#[cfg(test)]` modules left out: tests may reach anywhere). It is an edge from the file's
//! module to the deepest module the path names; a module's own ancestors and descendants do
//! not count (a parent declares and re-exports its children).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, from the top (1) to the ground (5), as docs/architecture.md draws them.
const LAYERS: &[(&str, u8)] = &[
    ("tools", 1),
    ("runtime", 2),
    ("protocol", 3),
    ("compress", 3),
    ("comm", 4),
    ("compute", 4),
    ("checkpoint", 5),
    ("config", 5),
    ("data", 5),
    ("telemetry", 5),
];

type Module = Vec<String>;

/// Every module of the library (lib.rs is the root, `[]`) and its file.
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    let mut out = BTreeMap::new();
    for file in files {
        let rel = file
            .strip_prefix(src)
            .expect("under src/")
            .with_extension("");
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        match parts.last().map(String::as_str) {
            Some("main") => continue,
            Some("lib") | Some("mod") => {
                parts.pop();
            }
            _ => {}
        }
        out.insert(parts, file);
    }
    out
}

/// The source without comments, string literals and `#[cfg(test)]` modules.
fn code(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        if text[i..].starts_with("//") {
            i = text[i..].find('\n').map_or(bytes.len(), |n| i + n);
        } else if text[i..].starts_with("/*") {
            i = text[i..].find("*/").map_or(bytes.len(), |n| i + n + 2);
        } else if bytes[i] == b'"' {
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if text[i..].starts_with("#[cfg(test)]") {
            // Skip the attribute, and the item after it up to its closing brace or semicolon.
            i += "#[cfg(test)]".len();
            let mut depth = 0usize;
            while i < bytes.len() {
                match bytes[i] {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            i += 1;
                            break;
                        }
                    }
                    b';' if depth == 0 => {
                        i += 1;
                        break;
                    }
                    _ => {}
                }
                i += 1;
            }
        } else {
            let c = text[i..].chars().next().expect("a char");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The paths of one `use` tree or expression path starting at `start`, braces expanded:
/// `crate::a::{b, c::{d}}` gives `crate::a::b` and `crate::a::c::d`.
fn paths_at(code: &str, start: usize) -> Vec<Vec<String>> {
    fn tree(s: &[u8], i: &mut usize, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        loop {
            while *i < s.len() && s[*i].is_ascii_whitespace() {
                *i += 1;
            }
            if *i < s.len() && s[*i] == b'{' {
                *i += 1;
                let depth = prefix.len();
                loop {
                    tree(s, i, prefix, out);
                    prefix.truncate(depth);
                    while *i < s.len() && s[*i].is_ascii_whitespace() {
                        *i += 1;
                    }
                    match s.get(*i) {
                        Some(b',') => *i += 1,
                        Some(b'}') => {
                            *i += 1;
                            return;
                        }
                        _ => return,
                    }
                    while *i < s.len() && s[*i].is_ascii_whitespace() {
                        *i += 1;
                    }
                    if s.get(*i) == Some(&b'}') {
                        *i += 1;
                        return;
                    }
                }
            }
            let begin = *i;
            while *i < s.len() && (s[*i].is_ascii_alphanumeric() || s[*i] == b'_') {
                *i += 1;
            }
            if begin == *i {
                out.push(prefix.clone());
                return;
            }
            prefix.push(String::from_utf8_lossy(&s[begin..*i]).into_owned());
            if s[*i..].starts_with(b"::") {
                *i += 2;
            } else {
                out.push(prefix.clone());
                return;
            }
        }
    }
    let mut out = Vec::new();
    let mut i = start;
    tree(code.as_bytes(), &mut i, &mut Vec::new(), &mut out);
    out
}

/// The modules `module` imports (see the file's docs), resolved against `known`.
fn imports(module: &Module, code: &str, known: &BTreeMap<Module, PathBuf>) -> BTreeSet<Module> {
    let bytes = code.as_bytes();
    let mut out = BTreeSet::new();
    for root in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(root) {
            let boundary = at == 0 || {
                let c = bytes[at - 1];
                !(c.is_ascii_alphanumeric() || c == b'_' || c == b':')
            };
            if !boundary {
                continue;
            }
            for path in paths_at(code, at) {
                let mut resolved: Module = Vec::new();
                let mut rest = path.as_slice();
                match rest.first().map(String::as_str) {
                    Some("crate") => rest = &rest[1..],
                    Some("self") | Some("super") => {
                        resolved = module.clone();
                        while let Some(head) = rest.first() {
                            match head.as_str() {
                                "self" => {}
                                "super" => {
                                    resolved.pop();
                                }
                                _ => break,
                            }
                            rest = &rest[1..];
                        }
                    }
                    _ => continue,
                }
                for part in rest {
                    resolved.push(part.clone());
                    if !known.contains_key(&resolved) {
                        resolved.pop();
                        break;
                    }
                }
                let related = resolved.starts_with(module) || module.starts_with(&resolved);
                if !related {
                    out.insert(resolved);
                }
            }
        }
    }
    out
}

/// Every import edge between modules of the library.
fn edges() -> BTreeMap<Module, BTreeSet<Module>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let known = modules(&src);
    known
        .iter()
        .map(|(module, file)| {
            let text = std::fs::read_to_string(file).expect("a readable source file");
            (module.clone(), imports(module, &code(&text), &known))
        })
        .collect()
}

/// A circle in `graph`, as the list of its nodes, if there is one.
fn find_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            match state.get(next.as_str()) {
                Some(1) => {
                    let from = stack.iter().position(|n| n == next).unwrap_or(0);
                    let mut circle = stack[from..].to_vec();
                    circle.push(next.clone());
                    return Some(circle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(next, graph, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if !state.contains_key(node.as_str()) {
            if let Some(c) = visit(node, graph, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// Every import circle among the children of one module (edges of their descendants
/// counted as theirs), named by the parent.
fn circles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<String> {
    let mut by_parent: BTreeMap<Module, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (from, targets) in edges {
        for to in targets {
            let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            let (Some(a), Some(b)) = (from.get(common), to.get(common)) else {
                continue;
            };
            by_parent
                .entry(from[..common].to_vec())
                .or_default()
                .entry(a.clone())
                .or_default()
                .insert(b.clone());
        }
    }
    by_parent
        .iter()
        .filter_map(|(parent, graph)| {
            let circle = find_circle(graph)?;
            let at = if parent.is_empty() {
                "crate".to_string()
            } else {
                format!("crate::{}", parent.join("::"))
            };
            Some(format!("{at}: {}", circle.join(" -> ")))
        })
        .collect()
}

fn layer(module: &Module) -> u8 {
    let top = module.first().map(String::as_str).unwrap_or("");
    LAYERS
        .iter()
        .find(|(name, _)| *name == top)
        .map(|&(_, l)| l)
        .unwrap_or_else(|| panic!("top-level module {top:?} has no layer in tests/layers.rs"))
}

#[test]
fn every_top_level_module_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let tops: BTreeSet<String> = modules(&src)
        .keys()
        .filter_map(|m| m.first().cloned())
        .collect();
    for top in &tops {
        layer(&vec![top.clone()]);
    }
    let named: BTreeSet<String> = LAYERS.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(
        tops, named,
        "the layer table names modules that do not exist"
    );
}

#[test]
fn no_module_imports_from_a_higher_layer() {
    let mut upward = Vec::new();
    for (from, targets) in edges() {
        for to in targets {
            if !from.is_empty() && !to.is_empty() && layer(&to) < layer(&from) {
                upward.push(format!(
                    "crate::{} (layer {}) imports crate::{} (layer {})",
                    from.join("::"),
                    layer(&from),
                    to.join("::"),
                    layer(&to)
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports up a layer:\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_import_circle_at_any_level() {
    let found = circles(&edges());
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn the_checks_see_a_circle_and_an_upward_import() {
    // The checks themselves, on a made-up tree: a <-> b below the root, c imports tools.
    let m = |s: &str| -> Module { s.split("::").map(String::from).collect() };
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    edges
        .entry(m("compute::a::x"))
        .or_default()
        .insert(m("compute::b"));
    edges
        .entry(m("compute::b"))
        .or_default()
        .insert(m("compute::a"));
    edges
        .entry(m("config::c"))
        .or_default()
        .insert(m("tools::plan"));
    let found = circles(&edges);
    assert_eq!(found, ["crate::compute: a -> b -> a"]);
    assert!(layer(&m("tools::plan")) < layer(&m("config::c")));
    // And the parser: braces expanded, super resolved, comments and tests left out.
    let mut known = BTreeMap::new();
    for k in ["", "p", "p::q", "r", "r::s", "t"] {
        let key = if k.is_empty() { Vec::new() } else { m(k) };
        known.insert(key, PathBuf::new());
    }
    let text = "use crate::{r::{s::Thing, Other}, t};\nuse super::q::X; // crate::zzz\n\
                /// crate::t\n#[cfg(test)]\nmod tests { use crate::p; }\n";
    let found = imports(&m("p::own"), &code(text), &known);
    let found: Vec<String> = found.iter().map(|m| m.join("::")).collect();
    assert_eq!(found, ["p::q", "r", "r::s", "t"]);
}
