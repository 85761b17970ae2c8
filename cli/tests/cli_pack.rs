//! `--tokenizer` and `--pack` on the command: `run` tokenizes the text
//! field on its workers and packs each pass into rows of L tokens, saying
//! the fill, the tokens and the documents cut; the JSON summary carries the
//! same counts; every flag that needs another is refused naming it; a
//! missing tokenizer.json is refused naming the file. `cat --tokenizer`
//! prints the ids `run` packs; concat refuses the settings it would ignore;
//! the packed batches the summary counts are those the devices got and the
//! trace has, and the trace names every piece of every document.

mod cli_common;

use std::path::PathBuf;

use cli_common::{assert_no_panic, code, feedline, stderr, stdout};

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/text")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

/// The tokens Python's tokenizers gives the fixture's documents, EOS included.
fn python_tokens() -> u64 {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("docs.ids.json")).unwrap()).unwrap();
    v["ids_with_eos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_array().unwrap().len() as u64)
        .sum()
}

#[test]
fn run_packs_the_tokenized_documents_and_says_the_fill() {
    let (docs, tok) = (fixture("docs.jsonl"), fixture("tokenizer.json"));
    for policy in ["best-fit", "first-fit", "concat"] {
        let mut args = vec![
            "run",
            &docs,
            "--tokenizer",
            &tok,
            "--text-field",
            "text",
            "--add-eos",
            "--pack",
            "128",
            "--pack-policy",
            policy,
            "--batch",
            "2",
            "--json",
        ];
        // concat holds no window (refused with it: see below).
        if policy != "concat" {
            args.extend(["--pack-window", "16"]);
        }
        let o = feedline(&args);
        assert_no_panic(&o);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let out = stdout(&o);
        let summary: serde_json::Value = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("{e}: not the JSON summary: {out}"));
        let p = &summary["packing"];
        assert_eq!(p["length"], 128, "{summary}");
        assert_eq!(p["tokens"].as_u64(), Some(python_tokens()), "{policy}: {p}");
        let rows = p["rows"].as_u64().unwrap();
        let fill = p["fill"].as_f64().unwrap();
        assert!((fill - python_tokens() as f64 / (rows * 128) as f64).abs() < 1e-9);
        if policy != "concat" {
            assert_eq!(p["documents_cut"], 0, "{policy}: {p}");
        }
    }
    let o = feedline(&[
        "run",
        &docs,
        "--tokenizer",
        &tok,
        "--add-eos",
        "--pack",
        "128",
        "--batch",
        "2",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let tokens = python_tokens();
    assert!(
        out.contains("packing (L = 128): fill") && out.contains(&format!("({tokens} tokens in")),
        "{out}"
    );
}

#[test]
fn equalized_ranks_get_as_many_packed_rows_and_pad_delivers_every_token_once() {
    let (docs, tok) = (fixture("docs.jsonl"), fixture("tokenizer.json"));
    for how in ["pad", "drop"] {
        let ranks: Vec<serde_json::Value> = (0..2)
            .map(|rank| {
                let rank = rank.to_string();
                let o = feedline(&[
                    "run",
                    &docs,
                    "--tokenizer",
                    &tok,
                    "--add-eos",
                    "--pack",
                    "64",
                    "--batch",
                    "2",
                    "--equalize",
                    how,
                    "--world-size",
                    "2",
                    "--rank",
                    &rank,
                    "--json",
                ]);
                assert_no_panic(&o);
                assert_eq!(code(&o), 0, "{how} rank {rank}: {}", stderr(&o));
                let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
                v["packing"].clone()
            })
            .collect();
        assert_eq!(ranks[0]["rows"], ranks[1]["rows"], "{how}: {ranks:?}");
        let tokens: u64 = ranks.iter().map(|p| p["tokens"].as_u64().unwrap()).sum();
        let dropped: u64 = ranks
            .iter()
            .map(|p| p["equalize_dropped_tokens"].as_u64().unwrap())
            .sum();
        assert_eq!(tokens + dropped, python_tokens(), "{how}: {ranks:?}");
        if how == "pad" {
            assert_eq!(dropped, 0);
        }
    }
}

#[test]
fn flags_that_need_another_are_refused_naming_it() {
    let (docs, tok) = (fixture("docs.jsonl"), fixture("tokenizer.json"));
    for (args, says) in [
        (
            vec!["--pack-window", "5"],
            "--pack-window applies only with --pack",
        ),
        (
            vec!["--long-docs", "drop"],
            "--long-docs applies only with --pack",
        ),
        (vec!["--add-eos"], "--add-eos applies only with --tokenizer"),
        (
            vec!["--text-field", "body"],
            "--text-field applies only with --tokenizer",
        ),
        (vec!["--pack", "0"], "--pack"),
        (
            vec!["--pack", "64", "--pack-policy", "tightest"],
            "tightest",
        ),
        (
            vec!["--tokenizer", "/no/such/tok.json"],
            "/no/such/tok.json",
        ),
        (
            vec!["--tokenizer", &tok, "--text-field", "body", "--pack", "64"],
            "body",
        ),
        (vec!["--pack", "64"], "no field `input_ids` to pack"),
    ] {
        let mut a = vec!["run", docs.as_str()];
        a.extend(args.iter().copied());
        let o = feedline(&a);
        assert_no_panic(&o);
        assert_ne!(code(&o), 0, "{args:?} accepted");
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

/// Issue 39: a token id that does not fit i32 is a bad record under
/// `--pack` like any other: `--on-error skip` skips it (counted, named by
/// file and record) and packs every other document; the default fails
/// naming the file, the record and the id.
#[test]
fn a_token_id_beyond_i32_is_skipped_and_named_or_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("ids.jsonl");
    let mut text = String::new();
    let mut good = 0u64;
    for k in 0..20u64 {
        let mut ids: Vec<i64> = (0..(k + 3) as i64).collect();
        if k == 6 {
            ids[4] = 5_000_000_000;
        } else {
            good += ids.len() as u64;
        }
        text.push_str(&format!("{{\"input_ids\": {ids:?}}}\n"));
    }
    std::fs::write(&docs, text).unwrap();
    let schema = dir.path().join("schema.json");
    std::fs::write(
        &schema,
        r#"{"fields": [{"name": "input_ids", "dtype": "i64", "shape": [-1]}]}"#,
    )
    .unwrap();
    let (docs, schema) = (docs.to_str().unwrap(), schema.to_str().unwrap());
    let base = [
        "run", docs, "--schema", schema, "--pack", "16", "--batch", "2",
    ];
    let mut args = base.to_vec();
    args.extend(["--on-error", "skip", "--json"]);
    let o = feedline(&args);
    assert_no_panic(&o);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let summary: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(summary["bad_records"], 1, "{summary}");
    assert_eq!(
        summary["packing"]["tokens"].as_u64(),
        Some(good),
        "{summary}"
    );
    assert_eq!(summary["packing"]["documents"], 19, "{summary}");
    let err = stderr(&o);
    assert!(
        err.contains(&format!("skipping {docs}: record 6")) && err.contains("5000000000"),
        "{err}"
    );
    let o = feedline(&base);
    assert_no_panic(&o);
    assert_ne!(code(&o), 0, "a token id beyond i32 accepted");
    let err = stderr(&o);
    assert!(
        err.contains(docs)
            && err.contains("record 6")
            && err.contains("input_ids")
            && err.contains("token 4 of 9 is 5000000000"),
        "{err}"
    );
}

/// The fixture's documents' ids as Python's tokenizers gives them, EOS
/// included, in file order.
fn python_ids() -> Vec<Vec<i64>> {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("docs.ids.json")).unwrap()).unwrap();
    (v["ids_with_eos"].as_array().unwrap().iter())
        .map(|d| {
            (d.as_array().unwrap().iter())
                .map(|t| t.as_i64().unwrap())
                .collect()
        })
        .collect()
}

/// `cat`'s `input_ids`, one list per line.
fn cat_ids(args: &[&str]) -> Vec<Vec<i64>> {
    let o = feedline(args);
    assert_no_panic(&o);
    assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
    (stdout(&o).lines())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let ids = v["input_ids"].as_array().unwrap_or_else(|| panic!("{l}"));
            ids.iter().map(|t| t.as_i64().unwrap()).collect()
        })
        .collect()
}

#[test]
fn cat_tokenizes_as_run_does_and_refuses_a_missing_tokenizer() {
    let (docs, tok) = (fixture("docs.jsonl"), fixture("tokenizer.json"));
    let expect = python_ids();
    let with_eos = cat_ids(&["cat", &docs, "--tokenizer", &tok, "--add-eos"]);
    assert_eq!(
        with_eos, expect,
        "cat --tokenizer --add-eos: not Python's ids"
    );
    let plain = cat_ids(&["cat", &docs, "--tokenizer", &tok, "--text-field", "text"]);
    let without: Vec<Vec<i64>> = (expect.iter()).map(|d| d[..d.len() - 1].to_vec()).collect();
    assert_eq!(
        plain, without,
        "cat --tokenizer: not Python's ids without EOS"
    );
    let first = cat_ids(&["cat", &docs, "--tokenizer", &tok, "--limit", "2"]);
    assert_eq!(first, without[..2]);
    for (args, says) in [
        (
            vec!["--tokenizer", "/no/such/tok.json"],
            "/no/such/tok.json",
        ),
        (vec!["--tokenizer", &tok, "--text-field", "body"], "body"),
        (vec!["--add-eos"], "--add-eos applies only with --tokenizer"),
    ] {
        let mut a = vec!["cat", docs.as_str()];
        a.extend(args.iter().copied());
        let o = feedline(&a);
        assert_no_panic(&o);
        assert_ne!(code(&o), 0, "{args:?} accepted: {}", stdout(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn concat_refuses_the_packing_settings_it_would_ignore_naming_both() {
    let (docs, tok) = (fixture("docs.jsonl"), fixture("tokenizer.json"));
    let base = [
        "run",
        &docs,
        "--tokenizer",
        &tok,
        "--pack",
        "64",
        "--batch",
        "2",
    ];
    for (extra, flag) in [
        (["--pack-window", "16"], "--pack-window 16"),
        // The default value given is given: it is ignored all the same.
        (["--pack-window", "1000"], "--pack-window 1000"),
        (["--long-docs", "truncate"], "--long-docs truncate"),
        (["--long-docs", "drop"], "--long-docs drop"),
        (["--long-docs", "split"], "--long-docs split"),
    ] {
        let mut a = base.to_vec();
        a.extend(["--pack-policy", "concat"]);
        a.extend(extra);
        let o = feedline(&a);
        assert_no_panic(&o);
        assert_eq!(code(&o), 2, "{extra:?} with concat: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains(flag) && err.contains("--pack-policy concat"),
            "{extra:?}: {err}"
        );
        // The same settings with best-fit are used: accepted.
        let mut a = base.to_vec();
        a.extend(["--pack-policy", "best-fit"]);
        a.extend(extra);
        let o = feedline(&a);
        assert_eq!(code(&o), 0, "{extra:?} with best-fit: {}", stderr(&o));
    }
}

/// Every piece of one trace line's `segments`: (row, file, record, start,
/// length, doc_tokens).
type Piece = (u64, String, u64, u64, u64, u64);

/// The pieces named of each (pass, record): (start, length, doc_tokens).
type Covered = std::collections::BTreeMap<(u64, u64), Vec<(u64, u64, u64)>>;

#[test]
fn packed_batches_agree_across_summary_devices_and_trace_which_names_every_document() {
    let (docs, tok) = (fixture("docs.jsonl"), fixture("tokenizer.json"));
    let expect = python_ids();
    let dir = tempfile::tempdir().unwrap();
    for policy in ["best-fit", "concat"] {
        let trace = dir.path().join(format!("{policy}.trace"));
        let run = |json: bool| {
            let mut a = vec![
                "run",
                &docs,
                "--tokenizer",
                &tok,
                "--add-eos",
                "--pack",
                "128",
                "--pack-policy",
                policy,
                "--batch",
                "2",
                "--devices",
                "2",
                "--passes",
                "2",
                "--trace",
                trace.to_str().unwrap(),
            ];
            if json {
                a.push("--json");
            }
            let o = feedline(&a);
            assert_no_panic(&o);
            assert_eq!(code(&o), 0, "{policy}: {}", stderr(&o));
            stdout(&o)
        };
        let summary: serde_json::Value = serde_json::from_str(&run(true)).unwrap();
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&trace)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let devices: u64 = (summary["devices"].as_array().unwrap().iter())
            .map(|d| d["batches"].as_u64().unwrap())
            .sum();
        let p = &summary["packing"];
        let rows = p["rows"].as_u64().unwrap();
        assert_eq!(
            summary["batches"].as_u64(),
            Some(devices),
            "{policy}: {summary}"
        );
        assert_eq!(lines.len() as u64, devices, "{policy}: trace lines");
        assert_eq!(rows, 2 * devices, "{policy}: rows of 2-row batches");
        assert_eq!(p["documents"].as_u64(), Some(2 * expect.len() as u64));
        // The text summary says the same packed batches and the documents.
        let text = run(false);
        let says = format!(
            "60 records, {devices} packed batches (60 documents in {rows} rows of 128 tokens)"
        );
        assert!(text.contains(&says), "{policy}: {text}");
        // Every piece of every row, once: each document's pieces cover its
        // tokens [0, doc_tokens) in each pass, and there are no others.
        let mut covered: Covered = Default::default();
        for l in &lines {
            let records = l["records"].as_array().unwrap();
            assert_eq!(records.len(), 2, "records: one per row: {l}");
            let pieces: Vec<Piece> = (l["segments"].as_array())
                .unwrap_or_else(|| panic!("no segments: {l}"))
                .iter()
                .map(|s| serde_json::from_value(s.clone()).unwrap())
                .collect();
            let mut row_tokens = [0u64; 2];
            for (row, file, record, start, len, doc_tokens) in pieces {
                assert!(file.ends_with("docs.jsonl"), "{file}");
                row_tokens[row as usize] += len;
                let pass = l["pass"].as_u64().unwrap();
                covered
                    .entry((pass, record))
                    .or_default()
                    .push((start, len, doc_tokens));
            }
            assert!(row_tokens.iter().all(|&t| t <= 128), "{l}");
        }
        for pass in 0..2 {
            for (record, ids) in expect.iter().enumerate() {
                let mut pieces = covered.remove(&(pass, record as u64)).unwrap_or_else(|| {
                    panic!("{policy}: pass {pass}: record {record} never named")
                });
                pieces.sort();
                let mut at = 0;
                for (start, len, doc_tokens) in pieces {
                    assert_eq!(doc_tokens, ids.len() as u64, "record {record}");
                    assert_eq!(
                        start, at,
                        "{policy}: record {record}: a piece twice or a gap"
                    );
                    at += len;
                }
                assert_eq!(
                    at,
                    ids.len() as u64,
                    "{policy}: record {record}: tokens missing"
                );
            }
        }
        assert!(
            covered.is_empty(),
            "{policy}: pieces of no document: {covered:?}"
        );
    }
}
