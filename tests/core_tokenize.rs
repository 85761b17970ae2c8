//! The tokenizing stage (feature `tokenize`): its ids are Python
//! `tokenizers`' for the same tokenizer.json (fixtures written by
//! tests/fixtures/text/make_text.py, non-ASCII text and an empty document
//! among them), through the `Loader` with packing too (every document's
//! ids once, from the packed rows' segments); and its errors name the
//! file, the setting or the record.
#![cfg(feature = "tokenize")]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use feedline::pack::Pack;
use feedline::tokenize::{Tokenize, TokenizeError, Tokenizer};
use feedline_actors::ndarray::Ix2;
use feedline_actors::Loader;

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/text")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

fn python_ids() -> Vec<Vec<i32>> {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("docs.ids.json")).unwrap()).unwrap();
    serde_json::from_value(v["ids_with_eos"].clone()).unwrap()
}

fn texts() -> Vec<String> {
    std::fs::read_to_string(fixture("docs.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["text"].as_str().unwrap().to_string()
        })
        .collect()
}

fn stage() -> Tokenize {
    Tokenize::new(
        Tokenizer::from_file(fixture("tokenizer.json")).unwrap(),
        "text",
    )
    .add_eos(true)
    .unwrap()
}

#[test]
fn the_ids_are_python_tokenizers_ids_with_eos() {
    let stage = stage();
    let expect = python_ids();
    let texts = texts();
    assert_eq!(texts.len(), expect.len());
    for (k, (t, ids)) in texts.iter().zip(&expect).enumerate() {
        assert_eq!(
            &stage.ids(t.as_bytes()).unwrap(),
            ids,
            "document {k}: {t:?}"
        );
    }
}

#[test]
fn through_the_loader_every_document_is_packed_once_as_python_tokenizes_it() {
    let expect = python_ids();
    let source = std::fs::canonicalize(fixture("docs.jsonl")).unwrap();
    for (pack, det) in [
        (Pack::best_fit(64).window(8), true),
        (Pack::concat(64), false),
    ] {
        let loader = Loader::builder()
            .files([fixture("docs.jsonl")])
            .batch(2)
            .shuffle(10)
            .seed(4)
            .deterministic(det)
            .transform(Arc::new(stage()))
            .workers(2)
            .pack(pack.clone())
            .build()
            .unwrap();
        let mut docs: BTreeMap<u64, Vec<(u64, Vec<i32>)>> = BTreeMap::new();
        for d in loader {
            let d = d.unwrap();
            let ids = d.batch.view::<i32, Ix2>("input_ids").unwrap();
            let mut at = BTreeMap::new();
            for s in d.batch.segments().unwrap() {
                assert_eq!(Path::new(&*s.origin.source.name()), source.as_path());
                let a: &mut usize = at.entry(s.row).or_default();
                let row = ids.row(s.row as usize).to_vec();
                docs.entry(s.origin.record)
                    .or_default()
                    .push((s.start, row[*a..*a + s.len as usize].to_vec()));
                *a += s.len as usize;
            }
        }
        for (k, ids) in expect.iter().enumerate() {
            let mut pieces = docs
                .remove(&(k as u64))
                .unwrap_or_else(|| panic!("{pack:?}: document {k} lost"));
            pieces.sort();
            let joined: Vec<i32> = pieces.into_iter().flat_map(|(_, t)| t).collect();
            assert_eq!(&joined, ids, "{pack:?}: document {k}");
        }
        assert!(docs.is_empty());
    }
}

#[test]
fn errors_name_the_file_the_token_or_the_text() {
    let e = Tokenizer::from_file("no/such/tokenizer.json").unwrap_err();
    assert!(
        matches!(e, TokenizeError::Load { .. }) && e.to_string().contains("no/such/tokenizer.json"),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"model\": 3}").unwrap();
    let e = Tokenizer::from_file(&bad).unwrap_err().to_string();
    assert!(
        e.contains("bad.json") && e.contains("not a tokenizer.json"),
        "{e}"
    );
    let tok = Tokenizer::from_file(fixture("tokenizer.json")).unwrap();
    let e = Tokenize::new(tok.clone(), "text")
        .add_bos(true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("BOS") && e.contains("<s>") && e.contains("tokenizer.json"),
        "{e}"
    );
    let e = Tokenize::new(tok.clone(), "text")
        .eos_token("</s>")
        .unwrap_err()
        .to_string();
    assert!(e.contains("</s>"), "{e}");
    let e = Tokenize::new(tok.clone(), "text")
        .ids(&[0x66, 0xff, 0x6e])
        .unwrap_err()
        .to_string();
    assert!(e.contains("not UTF-8") && e.contains("`text`"), "{e}");
    assert!(Tokenize::new(tok, "").check().is_err());
}
