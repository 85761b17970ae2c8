//! A new user's crate, built and run as a user would: the crate
//! in `tests/new_user/` depends on `feedline-actors` alone, by path (and on
//! serde, for the derive of its own row type), and
//! uses only `feedline_actors::prelude::*`, `feedline_actors::ndarray` and
//! the re-exported core; every ```rust block of the README and of the
//! guides (`docs/*.md`) becomes one of
//! its binaries, run on data the crate generates. The crate in
//! `tests/new_user_lean/` asks for `default-features = false`:
//! TFRecord works, Parquet and URLs are refused naming their feature. Each
//! runs in the feature set it asks for, whose dependencies are compiled.
//!
//! The crate is copied to a fresh folder with the path pointed at this
//! checkout and the workspace's `Cargo.lock`, and built with cargo into
//! this workspace's target folder (`CARGO_TARGET_DIR`) in the same profile,
//! so the dependencies already compiled for these tests are reused: only
//! the new crate's own code is compiled.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The README's ```rust blocks, as rustdoc would compile them: hidden
/// lines (`# …`) shown, and wrapped in a `main` unless they have one.
fn readme_programs(readme: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut block: Option<Vec<&str>> = None;
    for line in readme.lines() {
        let fence = line.trim_start();
        match &mut block {
            None if fence.starts_with("```rust") => block = Some(Vec::new()),
            Some(lines) if fence.starts_with("```") => {
                let code: Vec<&str> = lines
                    .iter()
                    .map(|l| match l.trim_start() {
                        "#" => "",
                        t if t.starts_with("# ") => &t[2..],
                        _ => l,
                    })
                    .collect();
                let code = code.join("\n");
                out.push(if code.contains("fn main") {
                    code
                } else {
                    format!("fn main() -> Result<(), Box<dyn std::error::Error>> {{\n{code}\nOk(())\n}}")
                });
                block = None;
            }
            Some(lines) => lines.push(line),
            None => {}
        }
    }
    assert!(block.is_none(), "an unclosed ```rust block in the README");
    out
}

/// The README's and then each guide's (`docs/*.md`, by name) Rust blocks,
/// each with where it comes from.
#[cfg(all(feature = "parquet", feature = "remote"))]
fn documented_programs(root: &Path) -> Vec<(String, String)> {
    let mut files = vec![root.join("README.md")];
    let mut guides: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    guides.sort();
    files.extend(guides);
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(root).unwrap().display().to_string();
        for (i, program) in readme_programs(&text).into_iter().enumerate() {
            out.push((format!("{name}, Rust block {i}"), program));
        }
    }
    out
}

/// The target folder this test was built into (…/target/release/deps/new_user-…).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).unwrap().to_path_buf()
}

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_readme_blocks_are_found_and_wrapped_as_rustdoc_does() {
    let md = "text\n```rust\nlet a = 1;\n# let b = 2;\n```\n```toml\n[x]\n```\n```rust,no_run\n# fn main() {\nf();\n# }\n```\n";
    let p = readme_programs(md);
    assert_eq!(p.len(), 2);
    assert!(
        p[0].starts_with("fn main()") && p[0].contains("let a = 1;\nlet b = 2;"),
        "{}",
        p[0]
    );
    assert_eq!(p[1], "fn main() {\nf();\n}");
}

/// Copy the crate `tests/FIXTURE` to `dir/FIXTURE` with its path
/// dependency pointed at this checkout and the workspace's `Cargo.lock`,
/// add `bins` (name, source) as binaries, and build it in release into
/// this workspace's target folder (so that the dependencies compiled for
/// these tests are reused). Returns the folder its binaries are in.
fn build_user_crate(fixture: &str, dir: &Path, bins: &[(String, String)]) -> PathBuf {
    let actors = Path::new(env!("CARGO_MANIFEST_DIR"));
    let from = actors.join("tests").join(fixture);
    let krate = dir.join(fixture);
    std::fs::create_dir_all(krate.join("src/bin")).unwrap();
    let manifest = std::fs::read_to_string(from.join("Cargo.toml")).unwrap();
    let pointed = manifest.replace(
        "path = \"../..\"",
        &format!("path = {:?}", actors.to_str().unwrap()),
    );
    assert_ne!(
        pointed, manifest,
        "the path dependency was pointed at this checkout"
    );
    std::fs::write(krate.join("Cargo.toml"), pointed).unwrap();
    std::fs::copy(from.join("src/main.rs"), krate.join("src/main.rs")).unwrap();
    std::fs::copy(actors.join("../Cargo.lock"), krate.join("Cargo.lock")).unwrap();
    for (name, source) in bins {
        std::fs::write(krate.join(format!("src/bin/{name}.rs")), source).unwrap();
    }
    let target = target_dir();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run(
        Command::new(cargo)
            .args([
                "build",
                "--release",
                "--offline",
                "--bins",
                "--manifest-path",
            ])
            .arg(krate.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", &target),
        &format!("cargo build of {fixture}"),
    );
    target.join("release")
}

/// The default features (Parquet, remote sources), as the README's
/// dependency line gives them: run in the build that has them compiled.
#[cfg(all(feature = "parquet", feature = "remote"))]
#[test]
fn a_new_crate_that_depends_on_feedline_actors_alone_builds_and_runs() {
    let actors = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let programs = documented_programs(&actors.join(".."));
    assert!(
        programs.len() >= 4,
        "the README's and the guides' Rust blocks: {}",
        programs.len()
    );
    let bins: Vec<(String, String)> = (programs.iter().enumerate())
        .map(|(i, (_, p))| (format!("readme_{i}"), p.clone()))
        .collect();
    let bin = build_user_crate("new_user", dir.path(), &bins);

    let work = dir.path().join("work");
    let out = run(Command::new(bin.join("new-user")).arg(&work), "new-user");
    // 2 files × 500 records, 2 passes; 300 images; 200 lines of 1..=37 tokens.
    let tokens: u64 = (0..200u64).map(|l| 1 + l % 37).sum();
    for line in [
        "quick start: 2000 rows in".to_string(),
        "npy columns: 300 images with their labels".to_string(),
        "npz: 300 images with their labels".to_string(),
        format!("jsonl: 200 lines, {tokens} tokens, batches of at most 256 tokens"),
        "rows: 200 lines as Line, each with its own tokens".to_string(),
    ] {
        assert!(out.contains(&line), "`{line}` not in:\n{out}");
    }

    // Each block, run where the new crate wrote its data (`data/…`).
    for (i, (place, program)) in programs.iter().enumerate() {
        run(
            Command::new(bin.join(format!("readme_{i}"))).current_dir(&work),
            &format!("{place}:\n{program}\n"),
        );
    }
}

/// `default-features = false`: the light formats only. A TFRecord loop
/// runs; a Parquet path, a `parquet:` prefix and an `s3://` URL are refused
/// naming the feature. Run in the build without the features
/// (`cargo test -p feedline-actors --no-default-features`), whose compiled
/// dependencies it reuses.
#[cfg(not(any(feature = "parquet", feature = "remote")))]
#[test]
fn a_new_crate_without_the_default_features_reads_tfrecord_and_names_the_missing_feature() {
    let dir = tempfile::tempdir().unwrap();
    let bin = build_user_crate("new_user_lean", dir.path(), &[]);
    let out = run(
        Command::new(bin.join("new-user-lean")).arg(dir.path().join("work")),
        "new-user-lean",
    );
    for line in [
        "tfrecord: 2000 rows in",
        "parquet path: refused naming the feature",
        "parquet prefix: refused naming the feature",
        "s3 url: refused naming the feature",
    ] {
        assert!(out.contains(line), "`{line}` not in:\n{out}");
    }
}
