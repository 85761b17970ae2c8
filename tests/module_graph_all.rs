//! No crate of the workspace has an import circle among its files: in the
//! core (`src/`), the actor pipeline (`actors/src/`, its command in `bin/`
//! left out), the image operations (`vision/src/`) and the Python package
//! (`python/src/`), each file can be read knowing only the files below it.
//!
//! The graph is read from the sources. Each file is a node (`a/b.rs`,
//! `a/b/mod.rs` and, beside an `a/` folder, `a.rs`); a module written inline
//! (`mod ffi { … }`) belongs to its file. A file depends on another when its
//! code names something the other defines: through a `use` item (brace
//! lists expanded), or a path in the code (`crate::a::B`, `super::x`,
//! `self::y`, `child::z`, or `m::C` after `use crate::m`). A path is followed
//! through the modules it names and then through re-exports (`pub use`, and
//! imports as in Rust, globs too) to the file that defines its item, so
//! `crate::Schema` is `schema.rs`, not `lib.rs`. A `pub use` whose name the
//! file does not use itself only re-exports it and is no dependency; `mod`
//! declarations neither. Comments, strings and `#[cfg(test)]` items are left
//! out. Paths into other crates are not followed (crates cannot import
//! each other in a circle).
//!
//! Circles are looked for folder by folder, as farm-studio draws them: in
//! each folder (the crate root, `reader/`) the members are its files and
//! its sub-folders, each sub-folder taken whole, and an import between the
//! files of two members is an arrow between them. The folder's own file
//! (`lib.rs`, `mod.rs`, `a.rs` beside `a/`) is no member: it and its members
//! may use each other (a trait there, its adapters beside it). So two files
//! of one folder that import each other fail the test, and so do a file and
//! a folder beside it (`reader/` and `transform/`), each circle shown with
//! the imports that close it.
//!
//! `actors/tests/module_graph.rs` checks the actor crate's stages on top;
//! `tests/core_modules.rs` reads the core crate's modules alone, without
//! following re-exports.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::Path;

/// The crates: where their sources are (from the workspace root), and the
/// folders under it that are not the library (a binary's own files).
const CRATES: [(&str, &[&str]); 4] = [
    ("src", &[]),
    ("actors/src", &["bin"]),
    ("vision/src", &[]),
    ("python/src", &[]),
];

/// Circles known and left for now: each the import (file → file) that
/// closes it, left out of the check. An entry that no longer closes a
/// circle fails the test: remove it then. (None: every crate is free of
/// circles.)
const KNOWN_CIRCLES: &[(&str, &str)] = &[];

/// A module path: `["format", "npy"]`; the crate root is empty.
type ModPath = Vec<String>;

/// Files (named from the workspace root) → the files they depend on.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// One `use` item's path, expanded out of its brace lists.
#[derive(Debug)]
struct Use {
    /// The path as written, without the `*` of a glob.
    path: Vec<String>,
    /// The name it brings in (the last segment, or its `as` name); `None`
    /// for a glob.
    name: Option<String>,
    /// `pub` in any form: a re-export as well as an import.
    public: bool,
}

/// A module as this reader sees it.
#[derive(Debug)]
struct Module {
    /// The file it is written in.
    file: String,
    /// Its code, without comments, strings, `#[cfg(test)]` items and the
    /// modules written inline in it.
    code: String,
    /// Its `use` items and where they are in `code`.
    uses: Vec<(Use, Range<usize>)>,
    /// The names its own items define (`fn`, `struct`, `mod` …).
    defines: BTreeSet<String>,
}

/// Where a path leads: the module it ends in, or the module that defines
/// the item it names (the rest of the path being members of that item).
#[derive(Debug, Clone, PartialEq)]
struct Target {
    module: ModPath,
    is_module: bool,
}

/// A crate's modules, files and inline ones.
struct Crate {
    /// The source folder, from the workspace root (`actors/src`).
    dir: String,
    modules: BTreeMap<ModPath, Module>,
    /// Each file → the module it is.
    files: BTreeMap<String, ModPath>,
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `text` without comments, string and char literals (each string becomes
/// `""`, raw and byte strings too), keeping lifetimes.
fn strip_comments_and_strings(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let prev_is_ident = i > 0 && is_ident(chars[i - 1]);
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if !prev_is_ident && (c == 'r' || (c == 'b' && next == Some('r'))) && {
            let at = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = chars[at..].iter().take_while(|&&h| h == '#').count();
            chars.get(at + hashes) == Some(&'"')
        } {
            // A raw string: r"…", r#"…"#, br"…".
            let at = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = chars[at..].iter().take_while(|&&h| h == '#').count();
            i = at + hashes + 1;
            while i < chars.len() {
                if chars[i] == '"' && chars[i + 1..].iter().take(hashes).all(|&h| h == '#') {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{1F600}', '"'), not a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Where the item that starts at `at` ends: after its `;`, or after the
/// braced block that closes it, whichever comes first.
fn item_end(code: &str, at: usize) -> usize {
    let mut depth = 0i32;
    for (i, c) in code[at..].char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ';' if depth == 0 => return at + i + 1,
            '{' if depth == 0 => return block_end(code, at + i),
            _ => {}
        }
    }
    code.len()
}

/// The end of the braced block that opens at `open`.
fn block_end(code: &str, open: usize) -> usize {
    let mut depth = 0;
    for (i, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + i + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// `code` without its `#[cfg(test)]` items.
fn without_tests(mut code: String) -> String {
    while let Some(at) = code.find("#[cfg(test)]") {
        let end = item_end(&code, at + "#[cfg(test)]".len());
        code.replace_range(at..end, "");
    }
    code
}

/// The word that starts at `at` in `code` (empty if none).
fn word_at(code: &str, at: usize) -> &str {
    let rest = &code[at..];
    let n = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
    &rest[..n]
}

/// Where the whole word `word` stands in `code`.
fn word_positions<'a>(code: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    code.match_indices(word).map(|(i, _)| i).filter(move |&i| {
        let before = code[..i].chars().next_back();
        let after = code[i + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// The modules written inline in `code` (`mod name { … }`): each one's
/// name and code, and `code` with them blanked out.
fn split_inline_modules(code: &str) -> (String, Vec<(String, String)>) {
    let mut outer = code.to_string();
    let mut inline = Vec::new();
    let mut from = 0;
    while let Some(at) = word_positions(&code[from..], "mod")
        .next()
        .map(|i| from + i)
    {
        let after = code[at + 3..].trim_start();
        let name = word_at(after, 0);
        let rest = after[name.len()..].trim_start();
        if name.is_empty() || !rest.starts_with('{') {
            from = at + 3;
            continue;
        }
        let open = code.len() - rest.len();
        let end = block_end(code, open);
        inline.push((name.to_string(), code[open + 1..end - 1].to_string()));
        outer.replace_range(open + 1..end - 1, &" ".repeat(end - 1 - (open + 1)));
        from = end;
    }
    (outer, inline)
}

/// `a::{b, c::{d, e as f}, g::*}` → (`a::b`, b), (`a::c::d`, d), (`a::c::e`,
/// f), (`a::g`, glob); `a::{self}` is `a`.
fn expand_use(tree: &str, public: bool, out: &mut Vec<Use>) {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let tree = tree.trim().trim_start_matches("::");
    if let Some(open) = tree.find('{') {
        let prefix = &tree[..open];
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let (mut depth, mut start) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_use(&format!("{prefix}{}", &inner[start..i]), public, out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        if !inner[start..].trim().is_empty() {
            expand_use(&format!("{prefix}{}", &inner[start..]), public, out);
        }
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((p, a)) => (p.trim(), Some(a.trim().to_string())),
        None => (tree, None),
    };
    let mut segs: Vec<String> = path.split("::").map(|s| s.trim().to_string()).collect();
    if segs.last().is_some_and(|s| s == "self") {
        segs.pop();
    }
    if segs.is_empty() || segs.iter().any(|s| s.is_empty()) {
        return;
    }
    let name = if segs.last().is_some_and(|s| s == "*") {
        segs.pop();
        None
    } else {
        Some(alias.unwrap_or_else(|| segs.last().unwrap().clone()))
    };
    if name.as_deref() == Some("_") && public {
        return;
    }
    out.push(Use {
        path: segs,
        name,
        public,
    });
}

/// The `use` items of `code`, each with the span of its item.
fn uses_of(code: &str) -> Vec<(Use, Range<usize>)> {
    let mut out = Vec::new();
    for at in word_positions(code, "use") {
        let end = code[at..].find(';').map_or(code.len(), |e| at + e);
        // `pub`, `pub(crate)`, `pub(super)`, `pub(in …)` before it, perhaps
        // after attributes.
        let item_start = code[..at].rfind(['\n', ';', '{', '}']).map_or(0, |n| n + 1);
        let public = word_positions(&code[item_start..at], "pub")
            .next()
            .is_some();
        let mut expanded = Vec::new();
        expand_use(&code[at + 3..end], public, &mut expanded);
        out.extend(expanded.into_iter().map(|u| (u, at..end + 1)));
    }
    out
}

/// The names the items of `code` define.
fn definitions(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for keyword in [
        "fn",
        "struct",
        "enum",
        "union",
        "trait",
        "type",
        "const",
        "static",
        "mod",
        "macro_rules!",
    ] {
        let positions: Vec<usize> = if keyword.ends_with('!') {
            code.match_indices(keyword).map(|(i, _)| i).collect()
        } else {
            word_positions(code, keyword).collect()
        };
        for at in positions {
            if code[..at].ends_with('\'') {
                continue; // `'static`, a lifetime
            }
            let name = word_at(code[at + keyword.len()..].trim_start(), 0);
            if !name.is_empty() {
                out.insert(name.to_string());
            }
        }
    }
    out
}

/// Every `a::b::c` path in `code` (segments), with where it starts.
fn paths(code: &str) -> Vec<(usize, Vec<String>)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts =
            is_ident(b[i] as char) && (i == 0 || !(is_ident(b[i - 1] as char) || b[i - 1] == b':'));
        if !starts {
            i += 1;
            continue;
        }
        let start = i;
        let mut segs = Vec::new();
        loop {
            let s = i;
            while i < b.len() && is_ident(b[i] as char) {
                i += 1;
            }
            segs.push(code[s..i].to_string());
            if code[i..].starts_with("::") && code[i + 2..].starts_with(is_ident) {
                i += 2;
            } else {
                break;
            }
        }
        if segs.len() > 1 {
            out.push((start, segs));
        }
    }
    out
}

impl Crate {
    /// Reads a crate from its files: paths under its source folder
    /// (`lib.rs`, `a/b.rs`) with their text, each file named `prefix/path`.
    fn read(prefix: &str, files: &[(String, String)]) -> Crate {
        let mut modules = BTreeMap::new();
        let mut file_modules = BTreeMap::new();
        for (rel, text) in files {
            let mut parts: Vec<String> = rel
                .trim_end_matches(".rs")
                .split('/')
                .map(String::from)
                .collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            let code = without_tests(strip_comments_and_strings(text));
            let file = format!("{prefix}/{rel}");
            file_modules.insert(file.clone(), parts.clone());
            Self::add(&mut modules, parts, file, &code);
        }
        Crate {
            dir: prefix.to_string(),
            modules,
            files: file_modules,
        }
    }

    fn add(modules: &mut BTreeMap<ModPath, Module>, me: ModPath, file: String, code: &str) {
        let (outer, inline) = split_inline_modules(code);
        for (name, inner) in inline {
            let child = [me.clone(), vec![name]].concat();
            Self::add(modules, child, file.clone(), &inner);
        }
        let module = Module {
            file,
            uses: uses_of(&outer),
            defines: definitions(&outer),
            code: outer,
        };
        modules.insert(me, module);
    }

    fn is_child(&self, of: &[String], name: &str) -> bool {
        let mut child = of.to_vec();
        child.push(name.to_string());
        self.modules.contains_key(&child)
    }

    /// Where `segs`, written in module `from`, leads.
    fn locate(&self, from: &[String], segs: &[String], depth: usize) -> Option<Target> {
        if depth > 32 || segs.is_empty() {
            return None;
        }
        let (start, rest): (ModPath, &[String]) = match segs[0].as_str() {
            "crate" | "$crate" => (Vec::new(), &segs[1..]),
            "self" => (from.to_vec(), &segs[1..]),
            "super" => {
                let ups = segs.iter().take_while(|s| *s == "super").count();
                (from[..from.len().checked_sub(ups)?].to_vec(), &segs[ups..])
            }
            first if self.is_child(from, first) => (from.to_vec(), segs),
            first => {
                // A name brought into `from` by a `use` (or defined there).
                let t = self.name_in(from, first, depth + 1)?;
                if !t.is_module {
                    return Some(t);
                }
                (t.module, &segs[1..])
            }
        };
        self.walk(start, rest, depth)
    }

    /// Follows `rest` down from module `cur`.
    fn walk(&self, mut cur: ModPath, rest: &[String], depth: usize) -> Option<Target> {
        for seg in rest {
            if self.is_child(&cur, seg) {
                cur.push(seg.clone());
                continue;
            }
            let t = self.name_in(&cur, seg, depth + 1).unwrap_or(Target {
                module: cur.clone(),
                is_module: false,
            });
            if t.is_module {
                cur = t.module;
                continue;
            }
            return Some(t);
        }
        Some(Target {
            module: cur,
            is_module: true,
        })
    }

    /// What `name` is in module `m`: its own item, or what a `use` of it
    /// (or a glob) brings in.
    fn name_in(&self, m: &[String], name: &str, depth: usize) -> Option<Target> {
        if depth > 32 {
            return None;
        }
        let module = self.modules.get(m)?;
        if module.defines.contains(name) {
            return Some(Target {
                module: m.to_vec(),
                is_module: false,
            });
        }
        if let Some((u, _)) = module
            .uses
            .iter()
            .find(|(u, _)| u.name.as_deref() == Some(name))
        {
            return self.locate(m, &u.path, depth + 1);
        }
        for (glob, _) in module.uses.iter().filter(|(u, _)| u.name.is_none()) {
            if let Some(g) = self
                .locate(m, &glob.path, depth + 1)
                .filter(|g| g.is_module && g.module != m)
            {
                if self.is_child(&g.module, name) {
                    return Some(Target {
                        module: [g.module, vec![name.to_string()]].concat(),
                        is_module: true,
                    });
                }
                if let Some(t) = self.name_in(&g.module, name, depth + 1) {
                    return Some(t);
                }
            }
        }
        None
    }

    /// Each file → the files it depends on.
    fn graph(&self) -> Graph {
        let mut graph = Graph::new();
        for (me, module) in &self.modules {
            let code = &module.code;
            let mut targets = Vec::new();
            let in_use_item = |at: usize| module.uses.iter().any(|(_, s)| s.contains(&at));
            let used_here = |name: &str| word_positions(code, name).any(|at| !in_use_item(at));
            for (u, _) in &module.uses {
                match &u.name {
                    // A `pub use` the file does not use itself is a re-export.
                    Some(name) if u.public && !used_here(name) => {}
                    Some(_) => targets.extend(self.locate(me, &u.path, 0)),
                    // A glob: each of its names the code uses.
                    None => {
                        let Some(g) = self.locate(me, &u.path, 0).filter(|g| g.is_module) else {
                            continue;
                        };
                        let there = &self.modules[&g.module];
                        let names = there
                            .defines
                            .iter()
                            .chain(there.uses.iter().filter_map(|(u, _)| u.name.as_ref()));
                        for name in names.filter(|n| used_here(n)) {
                            targets.extend(self.name_in(&g.module, name, 0));
                        }
                    }
                }
            }
            for (at, segs) in paths(code) {
                if in_use_item(at) {
                    continue;
                }
                targets.extend(self.locate(me, &segs, 0));
            }
            let edges = graph.entry(module.file.clone()).or_default();
            for t in targets {
                let file = &self.modules[&t.module].file;
                if *file != module.file {
                    edges.insert(file.clone());
                }
            }
        }
        graph
    }
}

/// The files of the crate whose sources are in `dir` (relative to the
/// workspace root), `left_out` folders aside: paths under `dir`, and text.
fn crate_files(root: &Path, dir: &str, left_out: &[&str]) -> Vec<(String, String)> {
    fn walk(base: &Path, dir: &Path, left_out: &[&str], out: &mut Vec<(String, String)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p
                .strip_prefix(base)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            if p.is_dir() {
                if !left_out.contains(&rel.as_str()) {
                    walk(base, &p, left_out, out);
                }
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push((rel, std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    let base = root.join(dir);
    let mut out = Vec::new();
    walk(&base, &base, left_out, &mut out);
    out.sort();
    out
}

/// The graph's circles: each strongly connected set of two files or more
/// (Tarjan's algorithm), sorted.
fn strongly_connected(graph: &Graph) -> Vec<BTreeSet<String>> {
    struct State<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<BTreeSet<String>>,
    }
    fn visit<'g>(v: &'g str, s: &mut State<'g>) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(w, s);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut set = BTreeSet::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack.remove(w);
                set.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
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
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(v, &mut s);
        }
    }
    s.found.sort();
    s.found
}

/// One loop through the files of `circle`, from its first file back to it.
fn a_loop(graph: &Graph, circle: &BTreeSet<String>) -> Vec<String> {
    // Breadth first from the first file, inside the circle, back to it.
    let first = circle.first().unwrap();
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([first.as_str()]);
    while let Some(v) = queue.pop_front() {
        for w in graph.get(v).into_iter().flatten() {
            if !circle.contains(w) {
                continue;
            }
            if w == first {
                let mut path = vec![first.clone()];
                let mut at = v;
                while at != first {
                    path.push(at.to_string());
                    at = came_from[at];
                }
                path.push(first.clone());
                path.reverse();
                return path;
            }
            if !came_from.contains_key(w.as_str()) {
                came_from.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    unreachable!("a strongly connected set has a loop")
}

/// A circle among the members of one folder: each member a file, or a
/// folder with everything in it.
#[derive(Debug)]
struct Circle {
    /// The folder, e.g. `src/reader/` (`src/` for the crate root).
    folder: String,
    /// Its members: the files and folders in it that reach each other.
    members: BTreeSet<String>,
    /// One loop through the members, back to the first.
    path: Vec<String>,
    /// The imports that make its arrows: file → file.
    imports: Vec<(String, String)>,
}

impl std::fmt::Display for Circle {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        if self.members.len() > 2 {
            let members: Vec<&str> = self.members.iter().map(String::as_str).collect();
            writeln!(
                f,
                "in {}, {} in a circle: {}",
                self.folder,
                members.len(),
                members.join(", ")
            )?;
            write!(f, "  one loop: ")?;
        } else {
            write!(f, "in {}: ", self.folder)?;
        }
        writeln!(f, "{}", self.path.join(" -> "))?;
        for (from, to) in &self.imports {
            writeln!(f, "    {from} -> {to}")?;
        }
        Ok(())
    }
}

impl Crate {
    /// The circles of `graph` (this crate's, perhaps with arrows left out),
    /// folder by folder. In each folder (a module with submodules: the
    /// crate root, `reader/`) the members are its submodules, a submodule
    /// with submodules of its own taken whole; an import between two files
    /// in different members is an arrow between the members. The folder's
    /// own file (`lib.rs`, `mod.rs`, `a.rs` beside `a/`) is no member: it
    /// and its members may use each other (a trait there, its adapters in
    /// the members), as the arrows between its members, and those out of
    /// it, are checked on their own.
    fn circles(&self, graph: &Graph) -> Vec<Circle> {
        let folders: BTreeSet<ModPath> = self
            .files
            .values()
            .flat_map(|m| (0..m.len()).map(|k| m[..k].to_vec()))
            .collect();
        let mut found = Vec::new();
        for folder in folders {
            let member = |file: &str| -> Option<String> {
                let m = &self.files[file];
                (m.len() > folder.len() && m.starts_with(&folder)).then(|| m[folder.len()].clone())
            };
            let folder_name = format!(
                "{}/",
                [vec![self.dir.clone()], folder.clone()].concat().join("/")
            );
            // A member is shown as its file, or as its folder.
            let shown = |name: &str| -> String {
                let mut m = folder.clone();
                m.push(name.to_string());
                let has_folder = self
                    .files
                    .values()
                    .any(|f| f.len() > m.len() && f.starts_with(&m));
                match self.files.iter().find(|(_, f)| **f == m) {
                    Some((file, _)) if !has_folder => file.clone(),
                    _ => format!("{folder_name}{name}/"),
                }
            };
            let mut level = Graph::new();
            let mut imports: BTreeMap<(String, String), Vec<(String, String)>> = BTreeMap::new();
            for (from, tos) in graph {
                for to in tos {
                    if let (Some(a), Some(b)) = (member(from), member(to)) {
                        if a != b {
                            let (a, b) = (shown(&a), shown(&b));
                            level.entry(a.clone()).or_default().insert(b.clone());
                            imports
                                .entry((a, b))
                                .or_default()
                                .push((from.clone(), to.clone()));
                        }
                    }
                }
            }
            for set in strongly_connected(&level) {
                let path = a_loop(&level, &set);
                let imports = path
                    .windows(2)
                    .flat_map(|w| imports[&(w[0].clone(), w[1].clone())].clone())
                    .collect();
                found.push(Circle {
                    folder: folder_name.clone(),
                    members: set,
                    path,
                    imports,
                });
            }
        }
        found
    }
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn no_crate_has_an_import_circle_among_its_files() {
    let mut found = Vec::new();
    let mut stale = Vec::new();
    for (dir, left_out) in CRATES {
        let krate = Crate::read(dir, &crate_files(root(), dir, left_out));
        let graph = krate.graph();
        assert!(graph.len() > 5, "{dir}: only {} files read", graph.len());
        let without = |left: &[(&str, &str)]| -> Graph {
            let mut g = graph.clone();
            for (from, to) in left {
                if let Some(tos) = g.get_mut(*from) {
                    tos.remove(*to);
                }
            }
            g
        };
        found.extend(krate.circles(&without(KNOWN_CIRCLES)));
        // Each exception still closes a circle: without the others there is one.
        let in_this_crate = |(from, _): &&(&str, &str)| from.starts_with(&format!("{dir}/"));
        for known in KNOWN_CIRCLES.iter().filter(in_this_crate) {
            let others: Vec<(&str, &str)> = KNOWN_CIRCLES
                .iter()
                .copied()
                .filter(|k| k != known)
                .collect();
            if krate.circles(&without(&others)).is_empty() {
                stale.push(known);
            }
        }
    }
    assert!(
        found.is_empty(),
        "import circles (an arrow: the first names something the second defines):\n{}",
        found.iter().map(|c| c.to_string()).collect::<String>(),
    );
    assert!(
        stale.is_empty(),
        "no longer a circle, remove from KNOWN_CIRCLES: {stale:?}"
    );
}

/// A small crate in files, read like the real ones.
fn sample_crate(files: &[(&str, &str)]) -> Crate {
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect();
    Crate::read("src", &files)
}

fn edges(graph: &Graph, file: &str) -> Vec<String> {
    graph[&format!("src/{file}")]
        .iter()
        .map(|f| f.trim_start_matches("src/").to_string())
        .collect()
}

#[test]
fn the_reader_follows_each_kind_of_path_to_the_file_that_defines_it() {
    let krate = sample_crate(&[
        (
            "lib.rs",
            "mod error; pub mod format; mod schema; mod batch; mod panic;\n\
             pub use error::{Error, Result};\n\
             pub use schema::{Schema as Layout, Field};\n",
        ),
        (
            "error.rs",
            "//! uses crate::schema in a comment only\n\
             pub enum Error { Io(String) }\n\
             const S: &str = \"crate::batch::Batch\";\n\
             #[cfg(test)]\nmod tests { use crate::schema::Field; }\n",
        ),
        ("schema.rs", "pub struct Schema; pub struct Field;\n"),
        (
            "batch.rs",
            "pub(crate) mod aligned { use super::super::Layout; pub struct Vec; }\n\
             fn f() -> crate::Result<()> { let _ = crate::Layout::new(); Ok(()) }\n",
        ),
        ("panic.rs", "pub fn panic_message() {}\n"),
        (
            "format/mod.rs",
            "mod npy; pub mod csv;\npub use npy::Npy;\npub use csv::Csv;\n\
             pub(crate) use crate::panic::panic_message;\n\
             fn open() -> Csv { npy::helper(); Csv }\n",
        ),
        (
            "format/npy.rs",
            "use super::*;\nuse crate::{batch::aligned::Vec as V, format};\n\
             pub struct Npy; fn g() { panic_message(); format::Csv; }\n",
        ),
        (
            "format/csv.rs",
            "pub struct Csv;\nfn h() { let _: crate::Error; super::super::schema::Field; }\n",
        ),
    ]);
    let graph = krate.graph();
    // Comments, strings and `#[cfg(test)]` items are no dependencies.
    assert_eq!(edges(&graph, "error.rs"), Vec::<String>::new());
    // `crate::Result` and a renamed re-export lead to the defining files;
    // `super` inside an inline module is the file's module.
    assert_eq!(edges(&graph, "batch.rs"), ["error.rs", "schema.rs"]);
    // Pure re-exports are no dependencies; a `pub(crate) use` is followed
    // from the file that imports it; a child path and a re-export the file
    // uses itself are.
    assert_eq!(
        edges(&graph, "format/mod.rs"),
        ["format/csv.rs", "format/npy.rs"]
    );
    // A glob of the parent, a name through an inline module, a `use` of a
    // module then a path through it.
    assert_eq!(
        edges(&graph, "format/npy.rs"),
        ["batch.rs", "format/csv.rs", "format/mod.rs", "panic.rs"]
    );
    assert_eq!(edges(&graph, "format/csv.rs"), ["error.rs", "schema.rs"]);
    assert_eq!(edges(&graph, "lib.rs"), Vec::<String>::new());
    // A folder's own file and its members may use each other.
    assert!(krate.circles(&graph).is_empty());
}

#[test]
fn circles_are_found_between_files_and_between_folders() {
    let krate = sample_crate(&[
        ("lib.rs", "mod a; mod b; mod c;\n"),
        ("a.rs", "use crate::b::B; pub struct A;\n"),
        ("b/mod.rs", "mod x; mod y; pub use x::B; pub use y::Y;\n"),
        ("b/x.rs", "pub struct B; fn f() -> super::Y { todo!() }\n"),
        ("b/y.rs", "pub struct Y;\n"),
        ("c.rs", "pub struct C;\n"),
    ]);
    let mut graph = krate.graph();
    assert!(krate.circles(&graph).is_empty());
    // A member of b/ names a.rs: a circle between a file and a folder.
    graph
        .get_mut("src/b/y.rs")
        .unwrap()
        .insert("src/a.rs".into());
    // y.rs names x.rs, which names y.rs: a circle inside b/.
    graph
        .get_mut("src/b/y.rs")
        .unwrap()
        .insert("src/b/x.rs".into());
    let shown: Vec<String> = krate
        .circles(&graph)
        .iter()
        .map(|c| c.to_string())
        .collect();
    assert_eq!(
        shown,
        [
            "in src/: src/a.rs -> src/b/ -> src/a.rs\n    \
             src/a.rs -> src/b/x.rs\n    src/b/y.rs -> src/a.rs\n",
            "in src/b/: src/b/x.rs -> src/b/y.rs -> src/b/x.rs\n    \
             src/b/x.rs -> src/b/y.rs\n    src/b/y.rs -> src/b/x.rs\n",
        ]
    );
}

#[test]
fn a_circle_is_found_with_a_loop_through_it_and_a_chain_is_none() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g = Graph::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    assert!(strongly_connected(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
    let g = graph(&[("a", "b"), ("b", "c"), ("c", "d"), ("d", "b"), ("d", "e")]);
    let found = strongly_connected(&g);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0], BTreeSet::from(["b", "c", "d"].map(String::from)));
    assert_eq!(a_loop(&g, &found[0]), ["b", "c", "d", "b"]);
}

#[test]
fn comments_strings_and_test_items_are_no_code() {
    let text = "let a = r#\"crate::x \"quoted\"\"#; // crate::y\n\
                let c = '\"'; let l: &'static str = \"crate::z\";\n\
                /* crate::w /* nested */ */ crate::v::f();\n\
                #[cfg(test)]\nmod tests;\nfn kept() {}\n";
    let code = without_tests(strip_comments_and_strings(text));
    let found: Vec<Vec<String>> = paths(&code).into_iter().map(|(_, p)| p).collect();
    assert_eq!(found, [vec!["crate", "v", "f"]]);
    assert!(code.contains("&'static str") && code.contains("fn kept"));
    let mut uses = Vec::new();
    expand_use(
        "crate::a::{b, c::{\n d, e  as f}, g::*, self}",
        false,
        &mut uses,
    );
    let shown: Vec<(String, Option<String>)> = uses
        .into_iter()
        .map(|u| (u.path.join("::"), u.name))
        .collect();
    let expected = [
        ("crate::a::b", Some("b")),
        ("crate::a::c::d", Some("d")),
        ("crate::a::c::e", Some("f")),
        ("crate::a::g", None),
        ("crate::a", Some("a")),
    ];
    let expected: Vec<(String, Option<String>)> = expected
        .iter()
        .map(|(p, n)| (p.to_string(), n.map(String::from)))
        .collect();
    assert_eq!(shown, expected);
}
