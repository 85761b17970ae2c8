//! The actor crate's modules form no import circle, and no stage file
//! imports another stage: each actor can be changed alone, and only the
//! wiring site (`pipeline/builder.rs`) knows them all. One named exception:
//! the loader names the push source's `FeedHandle`, the public handle that
//! `LoaderBuilder::build_with_feed` gives back (a type it passes on, not a
//! stage it talks to).
//!
//! The graph is read from the sources: every `crate::NAME` path (in `use`
//! lines and inline, `crate::{a, b}` lists too) outside comments, from each
//! file under `actors/src` (but `lib.rs` and the command in `bin/`), is an
//! edge from the file's top-level module (`shuffle_batch/mix.rs` belongs to
//! `shuffle_batch`) to module `NAME`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The stage files: one actor (or the loader, the push source) each.
/// Stage → stage imports allowed, with why (see the module docs).
const ALLOWED: [(&str, &str); 1] = [("loader", "push")];

const STAGES: [&str; 9] = [
    "file_queue",
    "prefetch_reader",
    "shuffle_batch",
    "batch_maker",
    "feed_queue_actor",
    "trainer",
    "supervisor",
    "push",
    "loader",
];

type Graph = BTreeMap<String, BTreeSet<String>>;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "bin") {
                sources(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file under `src` belongs to.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// The modules `text` names as `crate::NAME`, outside comments.
fn references(text: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let after = &rest[i + "crate::".len()..];
            if let Some(list) = after.strip_prefix('{') {
                // `crate::{a, b::c, d}`: the first name of each item.
                let inner = list.split('}').next().unwrap_or("");
                for item in inner.split(',') {
                    let name = ident(item.trim());
                    if !name.is_empty() {
                        out.insert(name);
                    }
                }
            } else {
                let name = ident(after);
                if !name.is_empty() {
                    out.insert(name);
                }
            }
            rest = after;
        }
    }
    out
}

fn graph_of(src: &Path) -> Graph {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut graph = Graph::new();
    for f in files {
        let m = module_of(src, &f);
        if m == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let edges = graph.entry(m.clone()).or_default();
        edges.extend(references(&text).into_iter().filter(|r| *r != m));
    }
    graph
}

/// A circle of imports, if there is one.
fn cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &Graph,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(n) {
            Some(2) => return None,
            Some(1) => {
                let at = path.iter().position(|p| p == n).unwrap();
                let mut c = path[at..].to_vec();
                c.push(n.to_string());
                return Some(c);
            }
            _ => {}
        }
        state.insert(n.to_string(), 1);
        path.push(n.to_string());
        for m in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, graph, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if let Some(c) = visit(n, graph, &mut state, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_reference_scanner_sees_use_lines_lists_and_inline_paths_but_not_comments() {
    let text = "use crate::messages::{A, B};\n\
                use crate::{stats::Stats, watch};\n\
                let x = crate::panic::panic_text(p); // crate::loader\n\
                /// [`Loader`](crate::Loader) in a doc comment\n";
    let refs: Vec<String> = references(text).into_iter().collect();
    assert_eq!(refs, ["messages", "panic", "stats", "watch"]);
    let mut g = Graph::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    assert_eq!(cycle(&g), None);
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(cycle(&g).unwrap(), ["a", "b", "c", "a"]);
}

#[test]
fn no_import_circle_among_the_actor_crates_modules() {
    let graph = graph_of(&src());
    for stage in STAGES {
        assert!(graph.contains_key(stage), "no module {stage}: {graph:?}");
    }
    if let Some(c) = cycle(&graph) {
        panic!("import circle: {}\n{graph:#?}", c.join(" -> "));
    }
}

#[test]
fn no_stage_file_imports_another_stage() {
    let graph = graph_of(&src());
    for stage in STAGES {
        let imported: Vec<&String> = graph[stage]
            .iter()
            .filter(|m| STAGES.contains(&m.as_str()))
            .filter(|m| !ALLOWED.contains(&(stage, m.as_str())))
            .collect();
        assert!(
            imported.is_empty(),
            "{stage} imports the stage(s) {imported:?}"
        );
    }
    // The messages are everybody's vocabulary: they know no stage, no wiring.
    for m in [
        "messages",
        "stats",
        "recorder",
        "watch",
        "task_queue",
        "config",
        "error",
    ] {
        let bad: Vec<&String> = graph[m]
            .iter()
            .filter(|d| STAGES.contains(&d.as_str()) || *d == "pipeline")
            .collect();
        assert!(bad.is_empty(), "{m} imports {bad:?}");
    }
}

/// The text of a stage's files (its own file and its folder, if any),
/// comments left out.
fn stage_code(stage: &str) -> String {
    let mut files = vec![src().join(format!("{stage}.rs"))];
    let dir = src().join(stage);
    if dir.is_dir() {
        sources(&dir, &mut files);
    }
    files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .flat_map(|t| {
            t.lines()
                .map(|l| l.split("//").next().unwrap_or("").to_string())
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_shuffle_stage_makes_no_batch() {
    // Transforms, collation and the failed-instance policy are the batch
    // maker's: the shuffle stage draws rows and hands them over.
    let code = stage_code("shuffle_batch");
    for name in ["BatchTransformer", "collate", "transform", "BadRecords"] {
        assert!(!code.contains(name), "the shuffle stage names {name}");
    }
    let maker = stage_code("batch_maker");
    for name in ["BatchTransformer", "collate_rows", "BadRecords"] {
        assert!(maker.contains(name), "the batch maker does not name {name}");
    }
}

#[test]
fn no_actor_reads_the_pipeline_settings_whole() {
    // Each actor's constructor takes its own settings (`settings.rs`), and
    // a resume's part (`resume_plan.rs`): never the whole config.
    for stage in STAGES.iter().filter(|s| **s != "loader") {
        let code = stage_code(stage);
        assert!(
            !code.contains("PipelineConfig"),
            "{stage} names PipelineConfig"
        );
        assert!(
            !code.contains("ResumePlan"),
            "{stage} names the whole ResumePlan"
        );
    }
}
