//! `feedline inspect` prints, per file, the schema the `Loader` infers from
//! it (the same inference, so an npz image is `[3, 32, 32]`, its label
//! `[]`), reports every file whatever the others hold (an unreadable one
//! gets its own error), says when a later record does not fit the inferred
//! schema, and exits non-zero when any file failed.

mod cli_common;

use std::path::Path;

use cli_common::*;
use feedline_actors::Loader;

/// The schema a Loader reading only `path` uses.
fn loader_schema(path: &Path) -> feedline::Schema {
    let loader = Loader::builder()
        .files([path.to_str().unwrap()])
        .build()
        .unwrap();
    loader.schema().clone()
}

#[test]
fn inspect_prints_the_schema_the_loader_infers() {
    let dir = tempfile::tempdir().unwrap();
    let (x, y) = image_arrays(20);
    let npz = dir.path().join("img.npz");
    write_npz(&npz, &[("x", &x), ("y", &y)]);
    let npy = dir.path().join("images.npy");
    std::fs::write(&npy, &x).unwrap();
    let tf = small_files(&dir.path().join("tf"), 1, 10);
    let paths = [npz.clone(), npy.clone(), tf[0].clone().into()];
    let args: Vec<&str> = std::iter::once("inspect")
        .chain(paths.iter().map(|p| p.to_str().unwrap()))
        .collect();
    let o = feedline(&args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("  x: [3, 32, 32] f32\n"), "{text}");
    assert!(text.contains("  y: [] i64\n"), "{text}");
    for p in &paths {
        for f in loader_schema(p).fields() {
            let line = format!("  {}: {}\n", f.name, f.describe());
            assert!(
                text.contains(&line),
                "{}: `{line}` not in\n{text}",
                p.display()
            );
        }
    }
    // The JSON report holds the same schema, in the schema-file format.
    let mut json_args = args.clone();
    json_args.push("--json");
    let o = feedline(&json_args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for (i, p) in paths.iter().enumerate() {
        let got = &v["files"][i]["schema"];
        let want = serde_json::to_value(loader_schema(p)).unwrap();
        assert_eq!(got, &want, "{}", p.display());
        assert_eq!(v["files"][i]["records"], if i < 2 { 20 } else { 10 });
    }
}

#[test]
fn a_parquet_list_column_is_ragged_in_inspect_and_the_loader_whatever_its_first_rows() {
    // `tokens` (list<int64>) has 3 values in rows 0..80, 5 in row 80 and 1
    // in row 99; `pairs` (list of 2-lists) 2 pairs but 4 in row 90; `xy` is
    // a fixed-size list (make_parquet_ragged.py). The Parquet schema, not
    // the first 64 rows, says which are ragged.
    let pq = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/pq_ragged.parquet");
    let pq = pq.to_str().unwrap();
    let o = feedline(&["inspect", pq]);
    let text = stdout(&o);
    assert_eq!(code(&o), 0, "{text}{}", stderr(&o));
    for line in [
        "  tokens: [?] i64 (ragged: 1..=5 values per record)\n",
        "  pairs: [?, 2] i32 (ragged: 4..=8 values per record)\n",
        "  xy: [2] f32\n",
        "  id: [] i64\n",
        "  (the schema this file declares, which a loader uses as it is)\n",
        "  every record read, every checksum held\n",
    ] {
        assert!(text.contains(line), "`{line}` not in\n{text}");
    }
    assert!(!text.contains("DOES NOT FIT"), "{text}");
    let schema = loader_schema(Path::new(pq));
    for f in schema.fields() {
        let line = format!("  {}: {}", f.name, f.describe());
        assert!(text.contains(&line), "`{line}` not in\n{text}");
    }
    let o = feedline(&["inspect", pq, "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["files"][0]["schema"],
        serde_json::to_value(&schema).unwrap()
    );
    assert_eq!(v["files"][0]["schema_declared"], true);
    assert_eq!(v["files"][0]["records"], 100);
    // The loader delivers every row, at its own length.
    let loader = Loader::builder()
        .files(pq)
        .batch(16)
        .shuffle(0)
        .build()
        .unwrap();
    let mut seen = std::collections::BTreeMap::new();
    for d in loader {
        let b = d.unwrap().batch;
        let tokens = b.i64("tokens").unwrap();
        let offsets = b.offsets("tokens").unwrap().expect("ragged: offsets");
        for (k, origin) in b.origins().iter().enumerate() {
            let row: Vec<i64> = (offsets[k]..offsets[k + 1]).map(|j| tokens[[j]]).collect();
            assert!(
                seen.insert(origin.record, row).is_none(),
                "{origin:?} twice"
            );
        }
    }
    assert_eq!(seen.len(), 100);
    for (&i, row) in &seen {
        let n = match i {
            80 => 5,
            99 => 1,
            _ => 3,
        };
        assert_eq!(
            *row,
            (i as i64..(i + n) as i64).collect::<Vec<_>>(),
            "row {i}"
        );
    }
}

#[test]
fn every_file_is_reported_whatever_the_others_hold() {
    let dir = tempfile::tempdir().unwrap();
    let good = small_files(&dir.path().join("tf"), 2, 10);
    let missing = dir.path().join("missing.tfrecord");
    let unknown = dir.path().join("notes.xyz");
    std::fs::write(&unknown, b"hello").unwrap();
    let corrupt =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/corrupt_record3.tfrecord");
    let paths = [
        good[0].clone(),
        missing.to_string_lossy().into_owned(),
        corrupt.to_string_lossy().into_owned(),
        unknown.to_string_lossy().into_owned(),
        good[1].clone(),
    ];
    let mut args = vec!["inspect"];
    args.extend(paths.iter().map(String::as_str));
    let o = feedline(&args);
    assert_no_panic(&o);
    assert_eq!(code(&o), 1, "a failed file fails the command");
    let text = stdout(&o);
    // Each file has its own report, in order.
    let heads: Vec<&str> = text.lines().filter(|l| !l.starts_with("  ")).collect();
    assert_eq!(heads.len(), 5, "{text}");
    for (head, p) in heads.iter().zip(&paths) {
        assert!(head.starts_with(p.as_str()), "{head} is not {p}'s");
    }
    assert_eq!(
        text.matches("every record read, every checksum held")
            .count(),
        2,
        "{text}"
    );
    assert!(
        text.contains("BAD: ") && text.contains("No such file"),
        "{text}"
    );
    assert!(text.contains("record 3, offset 277"), "{text}");
    assert!(text.contains("notes.xyz"), "{text}");
    // The JSON report too.
    args.push("--json");
    let o = feedline(&args);
    assert_eq!(code(&o), 1);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let errors: Vec<bool> = (0..5).map(|i| !v["files"][i]["error"].is_null()).collect();
    assert_eq!(errors, [false, true, true, true, false]);
    assert_eq!(v["files"][2]["records"], 3);
}

#[test]
fn a_record_that_does_not_fit_the_inferred_schema_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("tokens.jsonl");
    // 64 records of two tokens (the sample the schema is inferred from),
    // then one of three.
    let mut text: String = (0..64).map(|i| format!("{{\"t\": [{i}, 1]}}\n")).collect();
    text.push_str("{\"t\": [7, 8, 9]}\n");
    std::fs::write(&jsonl, text).unwrap();
    let o = feedline(&["inspect", jsonl.to_str().unwrap()]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    let out = stdout(&o);
    assert!(out.contains("  t: [2] i64"), "{out}");
    assert!(
        out.contains("DOES NOT FIT") && out.contains("record 64"),
        "{out}"
    );
    assert!(out.contains("65 records"), "{out}");
}

#[test]
fn a_stream_is_read_once_and_reported_whole() {
    use std::io::Write;
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let file = &small_files(dir.path(), 1, 300)[0];
    let bytes = std::fs::read(file).unwrap();
    let mut child = command(&["inspect", "/dev/stdin", "--format", "tfrecord", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&bytes));
    let o = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let f = &v["files"][0];
    assert_eq!(f["records"], 300, "{f}");
    assert!(f["bytes"].is_null(), "a stream has no size: {f}");
    let want = serde_json::to_value(loader_schema(Path::new(file))).unwrap();
    assert_eq!(f["schema"], want);
}
