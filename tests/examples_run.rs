//! Every example runs to completion with small settings and exits 0, and
//! prints what a user reads: the tables, the bottleneck, the speed-ups.

use std::process::Command;

mod examples_common;
use examples_common::example;

fn run(name: &str, args: &[&str]) -> String {
    let out = Command::new(example(name)).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} {args:?} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn multi_gpu_runs_and_names_the_bottleneck() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("timeline.svg");
    let png = dir.path().join("timeline.png");
    let out = run(
        "multi_gpu",
        &[
            "--gen-files",
            "2",
            "--gen-records",
            "2048",
            // Steps long enough that the devices limit even on a loaded
            // machine (each pass refills the shuffle pool from scratch).
            "--step-ms",
            "25",
            "--batch",
            "64",
            "--plot",
            svg.to_str().unwrap(),
        ],
    );
    assert!(out.contains("waiting-for-data %"), "{out}");
    assert!(out.contains("bottleneck: devices"), "{out}");
    let svg_text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg_text.contains("<svg")
            && svg_text.contains("device 0")
            && svg_text.contains("time since start")
    );
    let out = run(
        "multi_gpu",
        &[
            "--gen-files",
            "2",
            "--gen-records",
            "2048",
            "--step-ms",
            "0",
            "--devices",
            "2",
            "--plot",
            png.to_str().unwrap(),
        ],
    );
    assert!(out.contains("bottleneck: "), "{out}");
    assert!(!out.contains("bottleneck: devices"), "{out}");
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
}

#[test]
fn actix_embed_runs() {
    let out = run("actix_embed", &["--passes", "1", "--step-ms", "0"]);
    assert!(out.contains("worker 0: done"), "{out}");
    assert!(out.contains("worker 1: done"), "{out}");
}

#[test]
fn scaling_runs() {
    let out = run(
        "scaling",
        &[
            "--gen-files",
            "4",
            "--gen-records",
            "512",
            "--open-ms",
            "2",
            "--mib-ms",
            "2",
            "--readers",
            "1,2",
            "--mix",
            "1:1,2:1",
            "--extra-files",
            "1",
        ],
    );
    assert!(out.contains("speed-up"), "{out}");
    let rows = |prefix: &[&str]| {
        out.lines()
            .filter(|l| prefix.iter().any(|p| l.trim_start().starts_with(p)))
            .count()
    };
    assert_eq!(rows(&["1 ", "2 "]), 2, "{out}");
    // The mixed runs: a row per reader split, all of the extra set's 512
    // records of 2,560 read.
    assert!(out.contains("two file sets mixed 3:1"), "{out}");
    assert_eq!(rows(&["1+1 ", "2+1 "]), 2, "{out}");
    assert_eq!(
        out.lines()
            .filter(|l| l.trim_end().ends_with("20.0%"))
            .count(),
        2,
        "{out}"
    );
}

#[test]
fn push_feed_runs_and_shows_both_regimes() {
    let out = run(
        "push_feed",
        &[
            "--instances",
            "640",
            // Device steps long enough that regime 1's verdict holds while
            // the other examples of this binary load the machine.
            "--slow-step-ms",
            "25",
            "--slow-make-us",
            "300",
        ],
    );
    assert!(out.contains("regime 1: the devices are slower"), "{out}");
    assert!(out.contains("regime 2: the producers are slower"), "{out}");
    assert!(out.contains("held back by a full pipeline"), "{out}");
    assert!(out.contains("waiting for data"), "{out}");
    assert!(
        out.contains("bottleneck: the devices (the producers wait for room)"),
        "{out}"
    );
    assert!(
        out.contains("bottleneck: the producers (the devices wait for data)"),
        "{out}"
    );
}

#[test]
fn imagenet_decodes_and_augments_on_the_workers() {
    let out = run(
        "imagenet",
        &[
            "--images",
            "96",
            "--shards",
            "3",
            "--batch",
            "32",
            "--step-ms",
            "1",
            "--workers",
            "2",
        ],
    );
    assert!(out.contains("generated 96 JPEGs in 3 shards"), "{out}");
    assert!(
        out.contains("transform: decode,random-resized-crop(224x224"),
        "{out}"
    );
    assert!(out.contains("96 records in 3 batches, 1 passes"), "{out}");
    assert!(out.contains("bottleneck:"), "{out}");
}

#[test]
fn text_trains_a_tokenizer_and_batches_by_the_token_budget() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        "text",
        &[
            "--docs",
            "3000",
            "--files",
            "3",
            "--passes",
            "2",
            "--max-tokens",
            "1000",
            "--readers",
            "3",
            "--dir",
            dir.path().to_str().unwrap(),
        ],
    );
    assert!(out.contains("trained a BPE of "), "{out}");
    assert!(dir.path().join("tokenizer.json").exists());
    assert!(
        out.contains("2 passes: every one of 3000 documents once per pass"),
        "{out}"
    );
    assert!(out.contains("budget 1000 (0 batches over it"), "{out}");
}

#[test]
fn numpy_loads_two_npy_files_as_columns_and_an_npz_with_labels_kept_with_their_images() {
    // --rust-writer: the same files whichever machine runs it (numpy's
    // own output is taken when python3 has numpy and the flag is left out).
    let out = run(
        "numpy",
        &[
            "--images",
            "700",
            "--batch",
            "32",
            "--passes",
            "2",
            "--rust-writer",
        ],
    );
    assert!(
        out.contains("700 images and labels written by Rust's ndarray-npy"),
        "{out}"
    );
    // 700 rows in 22 batches per pass (21 of 32 and one of 28).
    assert!(
        out.contains("images.npy + labels.npy as columns: 44 batches, 1400 rows over 2 passes"),
        "{out}"
    );
    assert!(
        out.contains("train.npz: 44 batches, 1400 rows over 2 passes"),
        "{out}"
    );
}

#[test]
fn jsonl_tokens_batches_by_a_token_budget_in_both_ragged_layouts() {
    for (flag, layout) in [
        (None, "offsets layout"),
        (Some("--padded"), "padded layout"),
    ] {
        let mut args = vec!["--lines", "600", "--max-len", "64", "--max-tokens", "512"];
        args.extend(flag);
        let out = run("jsonl_tokens", &args);
        assert!(out.contains("600 lines"), "{out}");
        assert!(out.contains("of at most 512 tokens"), "{out}");
        assert!(out.contains(layout), "{out}");
        assert!(out.contains("every line once"), "{out}");
    }
}

#[cfg(feature = "remote")]
#[test]
fn remote_trains_from_its_own_http_server_and_shows_readers_hiding_latency() {
    let out = run(
        "remote",
        &[
            "--latency-ms",
            "10",
            "--readers",
            "1,4",
            "--gen-files",
            "4",
            "--gen-records",
            "16",
            "--link-mbit",
            "2000",
        ],
    );
    assert!(
        out.contains("remote, 1 readers") && out.contains("remote, 4 readers"),
        "{out}"
    );
    assert!(
        out.contains("requests/GB") && out.contains("% link"),
        "{out}"
    );
    assert!(out.contains("exactly once in every run"), "{out}");
    assert!(
        out.contains("first batch from the cold remote dataset"),
        "{out}"
    );
}

/// The packing example on a small slice of the registry's sources: a BPE
/// trained, the table of every policy and L (each configuration checked
/// exactly once by the example itself), and the whole pipeline through the
/// loader, every document once.
#[cfg(feature = "tokenize")]
#[test]
fn packing_trains_a_bpe_packs_every_policy_and_runs_the_loader() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        "packing",
        &[
            "--max-docs",
            "150",
            "--vocab",
            "400",
            "--repeats",
            "1",
            "--dir",
            dir.path().to_str().unwrap(),
        ],
    );
    assert!(dir.path().join("tokenizer.json").exists(), "{out}");
    for policy in ["best-fit", "first-fit", "concat"] {
        assert!(out.contains(&format!("| 4,096 | {policy} |")), "{out}");
    }
    assert!(out.contains("every one of 150 documents once"), "{out}");
    assert!(out.contains("loader.stats().packing: fill"), "{out}");
}

/// The tokenizing speed example on the text fixtures: both paths, the fast
/// one taken, the same ids.
#[cfg(feature = "tokenize")]
#[test]
fn tokenize_speed_compares_both_paths() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/text");
    let out = run(
        "tokenize_speed",
        &[
            "--tokenizer",
            &format!("{fixtures}/tokenizer.json"),
            "--passes",
            "1",
            &format!("{fixtures}/docs.jsonl"),
        ],
    );
    assert!(out.contains("fast path: true"), "{out}");
    assert!(out.contains("feedline fast path pass 0"), "{out}");
    assert!(
        out.contains("the ids of every document are the same on both paths"),
        "{out}"
    );
}
