//! The core crate's modules import each other without a circle.
//!
//! Each file under `src/` is a module (`src/a/b.rs` and `src/a/b/mod.rs`
//! are `a::b`, `src/lib.rs` the root). A module depends on another when its
//! code (tests left out) names it: a `use crate::…`, `use super::…` or
//! `use self::…` item, a `crate::…` or `super::…` path in the code, or — in
//! a `mod.rs`/`lib.rs` — a path through one of its own submodules
//! (`tfrecord::TfRecordFormat`). Re-exports (`pub use`) and `mod`
//! declarations are the module tree, not dependencies, and are left out.
//! A path names the longest module that prefixes it. Any cycle among those
//! dependencies fails the test and is printed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`["format", "npy"]`) → file.
fn modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            (parts, p)
        })
        .collect()
}

/// The code of a file without comments, string literals and its
/// `#[cfg(test)]` modules.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                let mut prev = ' ';
                for c in chars.by_ref() {
                    if prev == '*' && c == '/' {
                        break;
                    }
                    prev = c;
                }
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    if !escaped && c == '"' {
                        break;
                    }
                    escaped = !escaped && c == '\\';
                }
                out.push_str("\"\"");
            }
            // A char literal ('x', '\n', '"'), not a lifetime ('a).
            '\'' => {
                let rest: String = chars.clone().take(3).collect();
                let mut r = rest.chars();
                match (r.next(), r.next(), r.next()) {
                    (Some('\\'), _, _) => {
                        for c in chars.by_ref() {
                            if c == '\'' {
                                break;
                            }
                        }
                    }
                    (Some(_), Some('\''), _) => {
                        chars.next();
                        chars.next();
                    }
                    _ => out.push(c),
                }
            }
            c => out.push(c),
        }
    }
    // Drop each `#[cfg(test)]` item: the attribute and the braced block after it.
    while let Some(at) = out.find("#[cfg(test)]") {
        let Some(open) = out[at..].find('{').map(|o| at + o) else {
            break;
        };
        let mut depth = 0;
        let mut end = out.len();
        for (i, c) in out[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.replace_range(at..end, "");
    }
    out
}

/// `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`.
fn expand_use(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.split_whitespace().collect::<Vec<_>>().join(" ")];
    };
    let prefix = tree[..open].trim();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut out = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.extend(expand_use(&format!("{prefix}{}", inner[start..i].trim())));
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < inner.len() {
        out.extend(expand_use(&format!("{prefix}{}", inner[start..].trim())));
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every `a::b::c` path in `code` (as segments), with where it starts.
fn paths(code: &str) -> Vec<(usize, Vec<String>)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i] as char;
        if is_ident(c) && (i == 0 || !(is_ident(b[i - 1] as char) || b[i - 1] == b':')) {
            let start = i;
            let mut segs = Vec::new();
            loop {
                let s = i;
                while i < b.len() && is_ident(b[i] as char) {
                    i += 1;
                }
                segs.push(code[s..i].to_string());
                if code[i..].starts_with("::") && code[i + 2..].starts_with(|c: char| is_ident(c)) {
                    i += 2;
                } else {
                    break;
                }
            }
            if segs.len() > 1 {
                out.push((start, segs));
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The modules each module depends on.
fn dependencies(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mods = modules(src);
    let resolve = |segs: &[String]| -> Option<Vec<String>> {
        (1..=segs.len())
            .rev()
            .map(|k| segs[..k].to_vec())
            .find(|m| mods.contains_key(m))
    };
    let mut deps = BTreeMap::new();
    for (me, file) in &mods {
        let is_dir = matches!(
            file.file_stem().and_then(|s| s.to_str()),
            Some("mod" | "lib")
        );
        // The folder `self::`/bare child paths are relative to, and `super::`'s.
        let here: Vec<String> = if is_dir {
            me.clone()
        } else {
            me[..me.len() - 1].to_vec()
        };
        let text = code(&std::fs::read_to_string(file).unwrap());
        let children: BTreeSet<String> = mods
            .keys()
            .filter(|m| is_dir && m.len() == me.len() + 1 && m.starts_with(me))
            .map(|m| m[me.len()].clone())
            .collect();
        let absolute = |segs: &[String]| -> Option<Vec<String>> {
            match segs.first().map(String::as_str) {
                Some("crate") => Some(segs[1..].to_vec()),
                Some("self") => Some([here.clone(), segs[1..].to_vec()].concat()),
                Some("super") => {
                    let ups = segs.iter().take_while(|s| *s == "super").count();
                    // `super` of a file module is its folder's parent module.
                    let base = if is_dir { me.clone() } else { here.clone() };
                    let base = if is_dir {
                        base[..base.len().checked_sub(ups)?].to_vec()
                    } else {
                        base[..base.len().checked_sub(ups - 1)?].to_vec()
                    };
                    Some([base, segs[ups..].to_vec()].concat())
                }
                Some(first) if children.contains(first) => {
                    Some([me.clone(), segs.to_vec()].concat())
                }
                _ => None,
            }
        };
        let mut mine = BTreeSet::new();
        // Spans of re-exports and `mod` declarations, left out.
        let mut skip = Vec::new();
        let mut at = 0;
        while let Some(k) = text[at..].find("use ") {
            let s = at + k;
            let end = text[s..].find(';').map_or(text.len(), |e| s + e);
            let before = text[..s].trim_end();
            let word_start = s == 0 || !is_ident(text.as_bytes()[s - 1] as char);
            if word_start {
                let reexport = before.ends_with("pub")
                    || before.ends_with(')') && {
                        let line = &text[text[..s].rfind('\n').map_or(0, |n| n + 1)..s];
                        line.trim_start().starts_with("pub")
                    };
                if reexport {
                    skip.push(s..end);
                } else {
                    for p in expand_use(&text[s + 4..end]) {
                        let segs: Vec<String> = p
                            .split("::")
                            .map(|x| x.split(" as ").next().unwrap_or(x).trim().to_string())
                            .filter(|x| !x.is_empty() && x != "*")
                            .collect();
                        if let Some(m) = absolute(&segs).and_then(|a| resolve(&a)) {
                            mine.insert(m);
                        }
                    }
                    skip.push(s..end);
                }
            }
            at = end.max(s + 4);
        }
        for (start, segs) in paths(&text) {
            if skip.iter().any(|r| r.contains(&start)) {
                continue;
            }
            if let Some(m) = absolute(&segs).and_then(|a| resolve(&a)) {
                mine.insert(m);
            }
        }
        mine.remove(me);
        deps.insert(me.clone(), mine);
    }
    deps
}

/// One cycle of the graph, if it has any.
fn find_cycle<T: Ord + Clone>(deps: &BTreeMap<T, BTreeSet<T>>) -> Option<Vec<T>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    fn visit<T: Ord + Clone>(
        v: &T,
        deps: &BTreeMap<T, BTreeSet<T>>,
        mark: &mut BTreeMap<T, Mark>,
        stack: &mut Vec<T>,
    ) -> Option<Vec<T>> {
        mark.insert(v.clone(), Mark::Open);
        stack.push(v.clone());
        for w in deps.get(v).into_iter().flatten() {
            match mark.get(w).copied().unwrap_or(Mark::New) {
                Mark::Open => {
                    let from = stack.iter().position(|x| x == w).unwrap();
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(w.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(c) = visit(w, deps, mark, stack) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        mark.insert(v.clone(), Mark::Done);
        None
    }
    let mut mark = BTreeMap::new();
    for v in deps.keys() {
        if mark.get(v).copied().unwrap_or(Mark::New) == Mark::New {
            if let Some(c) = visit(v, deps, &mut mark, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

fn name(m: &[String]) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_import_circle_among_the_core_modules() {
    let deps = dependencies(&src());
    if let Some(cycle) = find_cycle(&deps) {
        let shown: Vec<String> = cycle.iter().map(|m| name(m)).collect();
        panic!("an import circle: {}", shown.join(" -> "));
    }
}

#[test]
fn the_dependency_reader_sees_each_kind_of_reference() {
    let deps = dependencies(&src());
    let has = |from: &str, to: &str| {
        let key = |s: &str| -> Vec<String> { s.split("::").map(String::from).collect() };
        deps.get(&key(from))
            .unwrap_or_else(|| panic!("no module {from}"))
            .contains(&key(to))
    };
    // `use crate::…` with a brace group.
    assert!(has("chunk", "backing"));
    // `use super::…` in a file module.
    assert!(has("format::tfrecord", "format"));
    // A bare path through a submodule in a mod.rs.
    assert!(has("format::registry", "format::tfrecord"));
    // Re-exports are not dependencies: the root depends on nothing.
    assert!(deps[&Vec::new()].is_empty(), "{:?}", deps[&Vec::new()]);
    // The error type depends on provenance only.
    let error: Vec<String> = deps[&vec!["error".to_string()]]
        .iter()
        .map(|m| name(m))
        .collect();
    assert_eq!(error, ["provenance"]);
}

#[test]
fn a_cycle_is_found_and_a_chain_is_not_one() {
    let graph = |edges: &[(u8, u8)]| {
        let mut g: BTreeMap<u8, BTreeSet<u8>> = BTreeMap::new();
        for &(a, b) in edges {
            g.entry(a).or_default().insert(b);
            g.entry(b).or_default();
        }
        g
    };
    assert_eq!(find_cycle(&graph(&[(1, 2), (2, 3), (1, 3)])), None);
    assert_eq!(
        find_cycle(&graph(&[(1, 2), (2, 3), (3, 4), (4, 2)])),
        Some(vec![2, 3, 4, 2])
    );
    assert_eq!(
        expand_use("crate::a::{b, c::{\n d, e  as f}}"),
        ["crate::a::b", "crate::a::c::d", "crate::a::c::e as f"]
    );
}
