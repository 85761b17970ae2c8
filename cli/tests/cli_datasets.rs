//! `feedline cat`, `inspect`, `run --trace` and `bench` on the datasets
//! other tools write, given as their directories: a Hugging Face
//! `save_to_disk` directory and Mosaic Streaming MDS directories (the
//! repository's fixtures, made by tests/fixtures/arrow/make.py and
//! tests/fixtures/mds/make.py): every record once with the writer's
//! values; a `DatasetDict`, a `pkl` column and a truncated shard refused
//! naming what is wrong.

mod cli_common;
use cli_common::{assert_no_panic, feedline, stderr, stdout};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}

fn arg(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn expected(kind: &str, name: &str) -> Vec<serde_json::Value> {
    let all: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture(kind).join("expected.json")).unwrap(),
    )
    .unwrap();
    all[name].as_array().unwrap().clone()
}

/// `got` equals `want`, a `pil` value (a PNG) decoded to PIL's pixels.
fn assert_samples(got: &[serde_json::Value], want: &[serde_json::Value]) {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (mut g, mut w) = (g.clone(), w.clone());
        if let Some(pil) = w.as_object_mut().unwrap().remove("pil") {
            let png = b64.decode(g["pil"][0].as_str().unwrap()).unwrap();
            let img = feedline_vision::decode(&png).unwrap();
            let rgb = b64.decode(pil["rgb"].as_str().unwrap()).unwrap();
            assert_eq!(img.pixels(), &rgb[..], "sample {i}: pil");
            g.as_object_mut().unwrap().remove("pil");
        }
        assert_eq!(g, w, "sample {i}");
    }
}

#[test]
fn cat_prints_every_record_of_a_save_to_disk_directory() {
    let out = feedline(&["cat", &arg(&fixture("arrow/hf"))]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json_lines(&stdout(&out)), expected("arrow", "hf"));
    let out = feedline(&["cat", &format!("arrow:{}", arg(&fixture("arrow/hf")))]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json_lines(&stdout(&out)), expected("arrow", "hf"));
}

#[test]
fn cat_prints_every_sample_of_mds_directories() {
    for name in ["plain", "zstd", "merged", "nested"] {
        let out = feedline(&["cat", &arg(&fixture("mds").join(name))]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        assert_samples(&json_lines(&stdout(&out)), &expected("mds", name));
    }
    let out = feedline(&["cat", &format!("mds:{}", arg(&fixture("mds/nested")))]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_samples(&json_lines(&stdout(&out)), &expected("mds", "nested"));
}

#[test]
fn inspect_shows_the_schemas() {
    let out = feedline(&["inspect", &arg(&fixture("arrow/hf"))]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for part in [
        "(arrow): 4 records",
        "(arrow): 3 records",
        "tokens: [?] i32",
        "vec: [3] f32",
        "image: [] bytes",
        "text: [] bytes",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
    let out = feedline(&["inspect", &arg(&fixture("mds/nested"))]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for part in [
        "(mds): 3 records",
        "u8: [] u8",
        "arr_ts: [2, 3] f32",
        "jpg: [] bytes",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
}

/// The (file, record) pairs of a `run --trace`, per pass.
fn traced(trace: &Path) -> BTreeMap<u64, Vec<(String, u64)>> {
    let mut out: BTreeMap<u64, Vec<(String, u64)>> = BTreeMap::new();
    for l in std::fs::read_to_string(trace).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let recs = v["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r[0].as_str().unwrap().to_string(), r[1].as_u64().unwrap()));
        out.entry(v["pass"].as_u64().unwrap())
            .or_default()
            .extend(recs);
    }
    out
}

#[test]
fn run_reads_every_record_once_per_pass() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    let hf = fixture("arrow/hf");
    let nested = fixture("mds/nested");
    let cases: [(PathBuf, Vec<(PathBuf, u64)>); 2] = [
        (
            hf.clone(),
            vec![
                (hf.join("data-00000-of-00002.arrow"), 4),
                (hf.join("data-00001-of-00002.arrow"), 3),
            ],
        ),
        (
            nested.clone(),
            vec![
                (nested.join("s0/shard.00000.mds"), 3),
                (nested.join("s1/shard.00000.mds"), 3),
            ],
        ),
    ];
    for (input, files) in cases {
        for readers in ["1", "3"] {
            let out = feedline(&[
                "run",
                &arg(&input),
                "--readers",
                readers,
                "--passes",
                "2",
                "--batch",
                "2",
                "--shuffle",
                "5",
                "--trace",
                &arg(&trace),
            ]);
            assert!(
                out.status.success(),
                "{}: {}",
                input.display(),
                stderr(&out)
            );
            let mut want: Vec<(String, u64)> = files
                .iter()
                .flat_map(|(f, n)| (0..*n).map(move |i| (arg(f), i)))
                .collect();
            want.sort();
            let passes = traced(&trace);
            assert_eq!(passes.len(), 2);
            for (p, mut got) in passes {
                got.sort();
                assert_eq!(got, want, "{} pass {p}", input.display());
            }
        }
    }
}

#[test]
fn bench_reads_both() {
    for input in [fixture("arrow/hf"), fixture("mds/nested")] {
        let out = feedline(&["bench", &arg(&input), "--batch", "2", "--json"]);
        assert!(
            out.status.success(),
            "{}: {}",
            input.display(),
            stderr(&out)
        );
        assert!(!stdout(&out).trim().is_empty());
    }
}

#[test]
fn a_dataset_dict_a_pickle_and_a_truncated_shard_are_refused() {
    let out = feedline(&["cat", &arg(&fixture("arrow/dict"))]);
    assert_no_panic(&out);
    assert!(!out.status.success());
    let err = stderr(&out);
    for part in ["DatasetDict", "train", "test"] {
        assert!(err.contains(part), "{err}");
    }
    let out = feedline(&["run", &arg(&fixture("mds/pkl")), "--batch", "1"]);
    assert_no_panic(&out);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("column `obj`") && err.contains("pkl"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(fixture("mds/nested/s0")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
    }
    let shard = dir.path().join("shard.00000.mds");
    let bytes = std::fs::read(&shard).unwrap();
    std::fs::write(&shard, &bytes[..bytes.len() / 2]).unwrap();
    let out = feedline(&["cat", &arg(dir.path())]);
    assert_no_panic(&out);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(&arg(&shard)) && err.contains("where the index says"),
        "{err}"
    );
}
