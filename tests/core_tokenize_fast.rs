//! The tokenizing stage's fast path (src/tokenize/fast.rs) gives the ids of
//! the `tokenizers` crate's `encode_fast` for every text: generated texts of
//! letters, digits, marks, apostrophes, whitespace runs (tabs, newlines,
//! U+00A0, U+3000, ...), emoji, CJK, added tokens, long words (every
//! Unicode scalar value is split as the crate's regex splits it: the unit
//! tests of src/tokenize/fast.rs); and (ignored by default, `--ignored`) the `.rs` files of the local cargo
//! registry — a few hundred of them run by default. Byte-level BPEs of the
//! shapes it covers have it (`add_prefix_space` either way, added tokens
//! normalized or not, `ignore_merges`, a template post-processor); other
//! shapes fall back to the crate's path silently, same ids.
#![cfg(feature = "tokenize")]

use std::path::{Path, PathBuf};

use feedline::tokenize::Tokenizer;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{
    AddedToken, DecoderWrapper, NormalizerWrapper, PostProcessorWrapper, PreTokenizerWrapper,
    TokenizerBuilder, TokenizerImpl,
};

type Bpe = TokenizerImpl<
    BPE,
    NormalizerWrapper,
    PreTokenizerWrapper,
    PostProcessorWrapper,
    DecoderWrapper,
>;

/// Pieces texts are made of: what GPT-2's pattern tells apart.
const PIECES: &[&str] = &[
    "a",
    "b",
    "ab",
    "the",
    "The",
    "fn",
    "x",
    "Z",
    "é",
    "e\u{301}",
    "ß",
    "ǅ",
    "ʰ",
    "Ω",
    "ж",
    "漢",
    "字",
    "の",
    "한",
    "ا",
    "1",
    "0",
    "42",
    "١٢",
    "Ⅻ",
    "½",
    "²",
    "'",
    "'s",
    "'t",
    "'re",
    "'ve",
    "'m",
    "'ll",
    "'d",
    "'S",
    "'x",
    " ",
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\n\n",
    "\r\n",
    "\u{a0}",
    "\u{3000}",
    "\u{2028}",
    "\u{85}",
    "\u{1f}",
    "\u{b}",
    "\u{c}",
    "\u{200b}",
    "\u{feff}",
    "\u{180e}",
    "\u{0}",
    "\u{7f}",
    "😀",
    "🦀",
    "👍🏽",
    "❤\u{fe0f}",
    "!",
    "?",
    "_",
    "-",
    "::",
    "{",
    "}",
    "(",
    ")",
    ";",
    "\"",
    "\\",
    "/*",
    "<",
    ">",
    "|",
    "<|endoftext|>",
    "<|end",
    "oftext|>",
    "\u{301}",
    "\u{308}",
    "\u{10ffff}",
    "\u{e000}",
];

fn piece_text(rng: &mut ChaCha8Rng, max_pieces: usize) -> String {
    let n = rng.gen_range(0..=max_pieces);
    let mut s = String::new();
    for _ in 0..n {
        match rng.gen_range(0..40) {
            // A long word: letters, digits, spaces or others, past the
            // scanning merge's limit.
            0 => {
                let alphabet: &[&str] = match rng.gen_range(0..5) {
                    0 => &["a", "b"],
                    1 => &["1", "2", "3"],
                    2 => &[" ", "\t", "\n"],
                    3 => &["!", "-", "=", "'"],
                    _ => &["é", "漢", "a"],
                };
                for _ in 0..rng.gen_range(30..400) {
                    s.push_str(alphabet[rng.gen_range(0..alphabet.len())]);
                }
            }
            _ => s.push_str(PIECES[rng.gen_range(0..PIECES.len())]),
        }
    }
    s
}

/// A byte-level BPE trained on generated text (merges across multi-byte
/// characters, whitespace and apostrophes), saved as a tokenizer.json.
fn trained() -> Value {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let texts: Vec<String> = (0..3000).map(|_| piece_text(&mut rng, 30)).collect();
    let mut tokenizer: Bpe = TokenizerBuilder::default()
        .with_model(BPE::default())
        .with_pre_tokenizer(Some(PreTokenizerWrapper::ByteLevel(
            ByteLevel::default().add_prefix_space(false),
        )))
        .with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevel::default())))
        .with_post_processor(Some(PostProcessorWrapper::ByteLevel(
            ByteLevel::default().trim_offsets(false),
        )))
        .build()
        .unwrap();
    let mut trainer = BpeTrainerBuilder::new()
        .vocab_size(1500)
        .min_frequency(2)
        .show_progress(false)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .special_tokens(vec![AddedToken::from("<|endoftext|>", true)])
        .build();
    tokenizer.train(&mut trainer, texts.iter()).unwrap();
    serde_json::from_str(&tokenizer.to_string(false).unwrap()).unwrap()
}

fn load(dir: &Path, name: &str, json: &Value) -> Tokenizer {
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_vec(json).unwrap()).unwrap();
    Tokenizer::from_file(&path).unwrap()
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/text/tokenizer.json")
}

/// The variants of `base` the fast path covers, by name.
fn covered(base: &Value) -> Vec<(&'static str, Value)> {
    let vocab = base["model"]["vocab"].as_object().unwrap().len() as u64;
    let mut out = vec![("trained", base.clone())];
    let mut v = base.clone();
    v["pre_tokenizer"]["add_prefix_space"] = json!(true);
    out.push(("add_prefix_space", v));
    let mut v = base.clone();
    v["post_processor"] = Value::Null;
    v["model"]["ignore_merges"] = json!(true);
    out.push(("ignore_merges", v));
    let mut v = base.clone();
    v["model"]["dropout"] = json!(0.0);
    out.push(("dropout 0", v));
    // Added tokens that match ordinary text, overlapping, normalized or
    // not, one of them already in the vocabulary.
    let mut v = base.clone();
    v["pre_tokenizer"]["add_prefix_space"] = json!(true);
    let in_vocab = base["model"]["vocab"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| k.chars().count() == 3)
        .map(|(k, id)| (k.clone(), id.clone()))
        .unwrap();
    let added = v["added_tokens"].as_array_mut().unwrap();
    let token = |id: Value, content: &str, normalized: bool, special: bool| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false,
               "rstrip": false, "normalized": normalized, "special": special})
    };
    added.push(token(json!(vocab), "ab", true, false));
    added.push(token(json!(vocab + 1), "<|end", false, false));
    added.push(token(json!(vocab + 2), " the", true, false));
    added.push(token(json!(vocab + 3), "\n\n", false, true));
    added.push(token(json!(vocab + 4), "é漢", true, true));
    added.push(token(in_vocab.1, &in_vocab.0, false, false));
    out.push(("added tokens", v));
    let mut v = base.clone();
    let eos = json!({"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}});
    let a = json!({"Sequence": {"id": "A", "type_id": 0}});
    let b = json!({"Sequence": {"id": "B", "type_id": 1}});
    v["post_processor"] = json!({
        "type": "TemplateProcessing",
        "single": [eos, a, eos, a],
        "pair": [a, eos, b],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [0], "tokens": ["<|endoftext|>"]}}
    });
    out.push(("template", v));
    out
}

fn assert_same(tok: &Tokenizer, name: &str, text: &str) {
    let fast = tok.encode(text).unwrap();
    let full = tok.encode_crate(text).unwrap();
    assert_eq!(fast, full, "{name}: {text:?}");
}

#[test]
fn the_fixture_tokenizer_takes_the_fast_path() {
    // tests/core_tokenize.rs compares its ids with Python's.
    assert!(Tokenizer::from_file(fixture()).unwrap().has_fast_path());
}

#[test]
fn generated_texts_give_the_crates_ids_on_every_covered_shape() {
    let dir = tempfile::tempdir().unwrap();
    let mut variants = covered(&trained());
    let fixture: Value = serde_json::from_slice(&std::fs::read(fixture()).unwrap()).unwrap();
    variants.extend(
        covered(&fixture)
            .into_iter()
            .map(|(n, v)| (if n == "trained" { "fixture" } else { n }, v)),
    );
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let texts: Vec<String> = (0..3000)
        .map(|_| piece_text(&mut rng, 60))
        .chain(["", " ", "  ", "\n", "'", "<|endoftext|>", "a<|endoftext|>b"].map(String::from))
        .collect();
    for (name, json) in &variants {
        let tok = load(dir.path(), name, json);
        assert!(tok.has_fast_path(), "{name}");
        for t in &texts {
            assert_same(&tok, name, t);
        }
    }
}

/// The `.rs` files of the local cargo registry, sorted (none if it is not
/// there).
fn registry_files() -> Vec<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(root) = home.map(|h| h.join("registry/src")) else {
        return vec![];
    };
    let mut out = vec![];
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(t) if t.is_file() && p.extension().is_some_and(|x| x == "rs") => out.push(p),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

/// The tokenizer for the registry comparison: `FEEDLINE_TOKENIZER`, else
/// one trained on generated text.
fn registry_tokenizer(dir: &Path) -> Tokenizer {
    match std::env::var_os("FEEDLINE_TOKENIZER") {
        Some(p) => Tokenizer::from_file(p).unwrap(),
        None => load(dir, "trained", &trained()),
    }
}

fn compare_registry(every: usize) -> (usize, usize) {
    let dir = tempfile::tempdir().unwrap();
    let tok = registry_tokenizer(dir.path());
    assert!(tok.has_fast_path());
    let (mut files, mut tokens) = (0, 0);
    for p in registry_files().iter().step_by(every) {
        let Ok(bytes) = std::fs::read(p) else {
            continue;
        };
        let Ok(text) = String::from_utf8(bytes) else {
            continue;
        };
        let fast = tok.encode(&text).unwrap();
        assert_eq!(fast, tok.encode_crate(&text).unwrap(), "{}", p.display());
        files += 1;
        tokens += fast.len();
    }
    (files, tokens)
}

#[test]
fn a_few_hundred_registry_sources_give_the_crates_ids() {
    let all = registry_files().len();
    let (files, tokens) = compare_registry((all / 300).max(1));
    eprintln!("{files} registry files of {all}, {tokens} tokens: the same ids");
}

/// Every `.rs` file of the registry (minutes):
/// `cargo test --release --features tokenize --test core_tokenize_fast -- --ignored --nocapture`.
#[test]
#[ignore]
fn every_registry_source_gives_the_crates_ids() {
    let (files, tokens) = compare_registry(1);
    eprintln!("{files} registry files, {tokens} tokens: the same ids");
}

#[test]
fn other_shapes_fall_back_to_the_crate_with_the_same_ids() {
    let dir = tempfile::tempdir().unwrap();
    let base = trained();
    let mut declined: Vec<(&str, Value)> = vec![];
    let mut v = base.clone();
    v["normalizer"] = json!({"type": "NFC"});
    declined.push(("normalizer", v));
    let mut v = base.clone();
    v["pre_tokenizer"]["use_regex"] = json!(false);
    declined.push(("no regex", v));
    let mut v = base.clone();
    v["pre_tokenizer"] = json!({"type": "Sequence", "pretokenizers": [base["pre_tokenizer"]]});
    declined.push(("sequence", v));
    let mut v = base.clone();
    v["added_tokens"][0]["lstrip"] = json!(true);
    declined.push(("lstrip", v));
    let mut v = base.clone();
    v["added_tokens"][0]["single_word"] = json!(true);
    declined.push(("single_word", v));
    let mut v = base.clone();
    v["truncation"] =
        json!({"direction": "Right", "max_length": 7, "strategy": "LongestFirst", "stride": 0});
    declined.push(("truncation", v));
    let mut v = base.clone();
    v["post_processor"] = json!({"type": "RobertaProcessing", "sep": ["<|endoftext|>", 0],
        "cls": ["<|endoftext|>", 0], "trim_offsets": true, "add_prefix_space": false});
    declined.push(("roberta", v));
    // A byte-level character in no merge out of the vocabulary: the crate
    // drops that byte.
    let mut v = base.clone();
    let merges = base["model"]["merges"].as_array().unwrap();
    let unused = ByteLevel::alphabet()
        .into_iter()
        .find(|c| {
            let c = c.to_string();
            !merges.iter().any(|m| m.to_string().contains(&c))
        })
        .unwrap()
        .to_string();
    let vocab = v["model"]["vocab"].as_object_mut().unwrap();
    assert!(vocab.remove(&unused).is_some());
    declined.push(("a byte missing", v));
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let texts: Vec<String> = (0..300).map(|_| piece_text(&mut rng, 40)).collect();
    for (name, json) in &declined {
        let tok = load(dir.path(), name, json);
        assert!(!tok.has_fast_path(), "{name}");
        for t in &texts {
            assert_same(&tok, name, t);
        }
    }
    let mut v = base.clone();
    v["model"]["dropout"] = json!(0.5);
    assert!(!load(dir.path(), "dropout", &v).has_fast_path());
}

mod any_text {
    use super::*;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    /// The trained tokenizer with added tokens and a prefix space, and
    /// without (loaded once).
    fn tokenizers() -> &'static [Tokenizer] {
        static TOKS: OnceLock<(tempfile::TempDir, Vec<Tokenizer>)> = OnceLock::new();
        &TOKS
            .get_or_init(|| {
                let dir = tempfile::tempdir().unwrap();
                let toks = covered(&trained())
                    .iter()
                    .filter(|(n, _)| matches!(*n, "trained" | "added tokens"))
                    .map(|(n, v)| load(dir.path(), n, v))
                    .collect();
                (dir, toks)
            })
            .1
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]
        /// Any string: arbitrary Unicode, and mixes of the pieces above.
        #[test]
        fn any_string_gives_the_crates_ids(
            text in "(.|\\s|'(s|t|re|ve|m|ll|d)|<\\|endoftext\\|>|ab| the){0,40}",
        ) {
            for tok in tokenizers() {
                prop_assert_eq!(tok.encode(&text).unwrap(), tok.encode_crate(&text).unwrap());
            }
        }
    }
}
