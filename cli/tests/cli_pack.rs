//! `--tokenizer` and `--pack` on the command: `run` tokenizes the text
//! field on its workers and packs each pass into rows of L tokens, saying
//! the fill, the tokens and the documents cut; the JSON summary carries the
//! same counts; every flag that needs another is refused naming it; a
//! missing tokenizer.json is refused naming the file.

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
        let o = feedline(&[
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
            "--pack-window",
            "16",
            "--batch",
            "2",
            "--json",
        ]);
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
