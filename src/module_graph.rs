//! Layering checks over the source tree (`docs/engine.md`, "Module map"):
//! no two modules depend on each other, directly or through others, and
//! the engine depends on neither adapter (the filesystem, the command line)
//! nor on FUSE.
//!
//! The adapters reach the engine only through its public surface: the
//! names `session` re-exports and its public modules (`docs/engine.md`,
//! "Public surface"); the command line reaches the filesystem the same way.
//!
//! A dependency is a `crate::…` or `super::…` path in code (comments and
//! `#[cfg(test)] mod tests` blocks do not count). A module and its own
//! parent (`mod.rs` declaring and re-exporting it) are not a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`session::manager`) → source text without comments and tests.
fn sources() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("src is readable") {
            let path = entry.expect("src entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(&root).expect("under src");
            let mut parts: Vec<String> = rel
                .with_extension("")
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            if parts == ["lib"] || parts == ["main"] {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("source is UTF-8");
            let text = match text.find("#[cfg(test)]\nmod tests") {
                Some(i) => &text[..i],
                None => &text[..],
            };
            let code: Vec<&str> = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect();
            out.insert(parts.join("::"), code.join("\n"));
        }
    }
    out
}

/// The identifier path that starts at `text` (`a::b::{c, d::e}` gives
/// `a::b::c` and `a::b::d::e`, one level of braces).
fn paths_at(text: &str) -> Vec<Vec<String>> {
    let ident = |s: &str| -> usize {
        s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len())
    };
    let mut prefix = Vec::new();
    let mut rest = text;
    loop {
        let n = ident(rest);
        if n == 0 {
            break;
        }
        prefix.push(rest[..n].to_string());
        rest = &rest[n..];
        let Some(after) = rest.strip_prefix("::") else {
            break;
        };
        rest = after;
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            return group[..end]
                .split(',')
                .map(|item| {
                    let mut p = prefix.clone();
                    p.extend(
                        item.trim()
                            .split("::")
                            .map(|s| s[..ident(s)].to_string())
                            .filter(|s| !s.is_empty()),
                    );
                    p
                })
                .collect();
        }
    }
    vec![prefix]
}

/// Module → the modules its code names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let sources = sources();
    let modules: BTreeSet<&String> = sources.keys().collect();
    let mut deps = BTreeMap::new();
    for (name, code) in &sources {
        let mut mine = BTreeSet::new();
        let parent: Vec<&str> = name.split("::").collect();
        let parent = parent[..parent.len() - 1].join("::");
        for (marker, base) in [("crate::", String::new()), ("super::", parent)] {
            for (at, _) in code.match_indices(marker) {
                // `foo_crate::` is not `crate::`.
                let before = code[..at].chars().last();
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                    continue;
                }
                for path in paths_at(&code[at + marker.len()..]) {
                    let mut full: Vec<String> = base
                        .split("::")
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect();
                    full.extend(path);
                    // The longest prefix that is a module.
                    let target = (1..=full.len())
                        .rev()
                        .map(|k| full[..k].join("::"))
                        .find(|m| modules.contains(m));
                    if let Some(t) = target {
                        let related = t == *name
                            || name.starts_with(&format!("{t}::"))
                            || t.starts_with(&format!("{name}::"));
                        if !related {
                            mine.insert(t);
                        }
                    }
                }
            }
        }
        deps.insert(name.clone(), mine);
    }
    deps
}

/// Strongly connected components with more than one module (Tarjan).
fn cycles(deps: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        deps: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        let deps = s.deps;
        for w in deps.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.stack.contains(&w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        deps,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in deps.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn no_module_cycles() {
    let deps = graph();
    assert!(deps.contains_key("session::manager"), "{:?}", deps.keys());
    assert_eq!(cycles(&deps), Vec::<Vec<String>>::new());
}

#[test]
fn the_engine_uses_no_adapter() {
    for (module, code) in sources() {
        if !module.starts_with("session") {
            continue;
        }
        for banned in ["crate::fs", "crate::cli", "fuser::"] {
            assert!(!code.contains(banned), "{module} uses {banned}");
        }
    }
}

/// The submodules of `layer` (`session`, `fs`) that its `mod.rs` declares
/// `pub`.
fn public_modules(sources: &BTreeMap<String, String>, layer: &str) -> BTreeSet<String> {
    sources[layer]
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';').to_string())
        .collect()
}

/// Paths of `module`'s code into `layer` that name one of its private
/// submodules (`crate::session::manager::Session`).
fn private_paths(sources: &BTreeMap<String, String>, module: &str, layer: &str) -> Vec<String> {
    let public = public_modules(sources, layer);
    let marker = format!("crate::{layer}::");
    let code = &sources[module];
    let mut out = Vec::new();
    for (at, _) in code.match_indices(&marker) {
        let before = code[..at].chars().last();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        for path in paths_at(&code[at + "crate::".len()..]) {
            let Some(sub) = path.get(1) else { continue };
            let private = sources.contains_key(&format!("{layer}::{sub}")) && !public.contains(sub);
            if private && path.len() > 2 {
                out.push(path.join("::"));
            }
        }
    }
    out
}

#[test]
fn the_adapters_use_the_public_surface() {
    let sources = sources();
    assert!(public_modules(&sources, "session").contains("gc"));
    let mut found = Vec::new();
    // (This file's own examples do not count.)
    for module in sources.keys().filter(|m| *m != "module_graph") {
        if !module.starts_with("session") {
            found.extend(private_paths(&sources, module, "session"));
        }
        if module.starts_with("cli") {
            found.extend(private_paths(&sources, module, "fs"));
        }
    }
    assert_eq!(found, Vec::<String>::new());
}

#[test]
fn the_surface_check_sees_a_private_path() {
    let mut sources = BTreeMap::new();
    sources.insert(
        "session".to_string(),
        "pub mod gc;\nmod manager;".to_string(),
    );
    sources.insert("session::gc".to_string(), String::new());
    sources.insert("session::manager".to_string(), String::new());
    sources.insert(
        "fs::x".to_string(),
        "use crate::session::{gc::plan, Session};\nlet s = crate::session::manager::Session::new();"
            .to_string(),
    );
    assert_eq!(
        private_paths(&sources, "fs::x", "session"),
        vec!["session::manager::Session::new"]
    );
}

#[test]
fn the_checker_sees_a_cycle() {
    let mut deps = BTreeMap::new();
    deps.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    deps.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    deps.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    deps.insert("d".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(cycles(&deps), vec![vec!["a", "b", "c"]]);
    assert_eq!(
        paths_at("session::{a::B, c}; x"),
        vec![vec!["session", "a", "B"], vec!["session", "c"]]
    );
}
