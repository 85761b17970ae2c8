//! The tokenizing stage's fast path: the ids of a GPT-2-style byte-level BPE
//! tokenizer (what `tokenizers`' `ByteLevelBPETokenizer`, or
//! `pre_tokenizers.ByteLevel` with `models.BPE`, trains and saves) computed
//! without the `tokenizers` crate's general machinery, the same ids for every
//! text.
//!
//! It owns:
//! - deciding, once at load, whether a loaded `tokenizer.json` has a shape it
//!   reproduces exactly ([`FastBpe::new`] says why not otherwise, and the
//!   stage keeps the crate's `encode_fast`);
//! - the split on added tokens (two Aho-Corasick passes, leftmost-longest,
//!   as `tokenizers`' `AddedVocabulary` does: non-normalized tokens over the
//!   whole text, then normalized ones over what is left);
//! - a hand-written scanner for GPT-2's pre-tokenizer pattern
//!   `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`,
//!   with `\s`, `\p{L}` and `\p{N}` taken from `regex-syntax`'s Unicode
//!   tables (those the crate's regex engine compiles);
//! - BPE merges on the bytes of each pre-token (each byte is a token of the
//!   byte-level alphabet; no byte→unicode string is built), lowest merge
//!   rank first and leftmost first among equal ranks, as `tokenizers`' `Word`
//!   merges, with a word cache per thread.
//!
//! Shapes covered: normalizer none; pre-tokenizer `ByteLevel` with
//! `use_regex` (either `add_prefix_space`); model `BPE` without dropout,
//! `continuing_subword_prefix` or `end_of_word_suffix`, with every one of
//! the 256 byte-level characters in its vocabulary (so `unk_token`,
//! `fuse_unk` and `byte_fallback` never apply), `ignore_merges` either way;
//! post-processor none, `ByteLevel`, or `TemplateProcessing` (its single
//! template: special tokens around `$A`); no truncation or padding; added
//! tokens with neither `single_word`, `lstrip` nor `rstrip`, and
//! `encode_special_tokens` off. Anything else declines.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use regex_syntax::hir::{Class as HirClass, HirKind};
use rustc_hash::FxHashMap;
use tokenizers::models::bpe::BPE;
use tokenizers::{ModelWrapper, PostProcessorWrapper, PreTokenizerWrapper};

/// Words (pre-tokens) of fewer bytes than this are cached, as the
/// `tokenizers` BPE caches words of fewer than 256 bytes.
const CACHE_MAX_WORD: usize = 256;
/// The per-thread word cache starts over once it holds this many words.
const CACHE_WORDS: usize = 1 << 16;
/// Words of at most this many bytes are merged by scanning their pairs;
/// longer ones with a heap (no quadratic time on a long word).
const SCAN_MAX: usize = 64;

/// Why the fast path declines a tokenizer (for the log).
pub(crate) type Decline = String;

/// The class of a character in GPT-2's pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    /// `\s`: Unicode `White_Space`.
    Space,
    /// `\p{L}`.
    Letter,
    /// `\p{N}`.
    Number,
    /// Anything else (`[^\s\p{L}\p{N}]`).
    Other,
}

/// `\s`, `\p{L}` and `\p{N}` as the regex engine has them.
#[derive(Debug)]
struct Classes {
    ascii: [Class; 128],
    /// Sorted, disjoint ranges of non-ASCII code points and their class.
    ranges: Vec<(u32, u32, Class)>,
}

/// The code point ranges of a Unicode class written as a regex.
fn unicode_ranges(pattern: &str) -> Result<Vec<(u32, u32)>, Decline> {
    let hir = regex_syntax::Parser::new()
        .parse(pattern)
        .map_err(|e| format!("regex-syntax parses {pattern}: {e}"))?;
    match hir.kind() {
        HirKind::Class(HirClass::Unicode(c)) => Ok(c
            .ranges()
            .iter()
            .map(|r| (r.start() as u32, r.end() as u32))
            .collect()),
        other => Err(format!("{pattern} is not a Unicode class: {other:?}")),
    }
}

impl Classes {
    fn new() -> Result<Self, Decline> {
        let mut all = Vec::new();
        for (pattern, class) in [
            (r"\s", Class::Space),
            (r"\p{L}", Class::Letter),
            (r"\p{N}", Class::Number),
        ] {
            all.extend(
                unicode_ranges(pattern)?
                    .into_iter()
                    .map(|(lo, hi)| (lo, hi, class)),
            );
        }
        all.sort_unstable();
        if all.windows(2).any(|w| w[1].0 <= w[0].1) {
            return Err("\\s, \\p{L} and \\p{N} overlap".into());
        }
        let find = |c: u32| -> Class {
            match all.binary_search_by(|&(lo, hi, _)| {
                if hi < c {
                    std::cmp::Ordering::Less
                } else if lo > c {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            }) {
                Ok(k) => all[k].2,
                Err(_) => Class::Other,
            }
        };
        let mut ascii = [Class::Other; 128];
        for (c, slot) in ascii.iter_mut().enumerate() {
            *slot = find(c as u32);
        }
        let ranges = all
            .iter()
            .filter(|r| r.1 >= 0x80)
            .map(|&(lo, hi, k)| (lo.max(0x80), hi, k))
            .collect();
        Ok(Classes { ascii, ranges })
    }

    /// The class of a non-ASCII character.
    fn wide(&self, c: u32) -> Class {
        let k = self.ranges.partition_point(|r| r.1 < c);
        match self.ranges.get(k) {
            Some(&(lo, _, class)) if lo <= c => class,
            _ => Class::Other,
        }
    }

    /// The class and UTF-8 length of the character at byte `i` of `s` (a
    /// character boundary below `s.len()`).
    #[inline]
    fn at(&self, s: &str, i: usize) -> (Class, usize) {
        let b = s.as_bytes()[i];
        if b < 0x80 {
            return (self.ascii[b as usize], 1);
        }
        match s.get(i..).and_then(|t| t.chars().next()) {
            Some(c) => (self.wide(c as u32), c.len_utf8()),
            // Not reached: `i` is a character boundary of a str.
            None => (Class::Other, 1),
        }
    }

    /// The end of the run of characters of class `k` starting at byte `i`.
    #[inline]
    fn run(&self, s: &str, mut i: usize, k: Class) -> usize {
        let b = s.as_bytes();
        while i < b.len() {
            let x = b[i];
            if x < 0x80 {
                if self.ascii[x as usize] != k {
                    break;
                }
                i += 1;
            } else {
                let (c, n) = self.at(s, i);
                if c != k {
                    break;
                }
                i += n;
            }
        }
        i
    }

    /// The end of the pre-token that starts at byte `i` (below `s.len()`):
    /// the match of GPT-2's pattern there, alternatives tried in order.
    fn word_end(&self, s: &str, i: usize) -> usize {
        let b = s.as_bytes();
        let x = b[i];
        if x == b'\'' {
            // 's 't 're 've 'm 'll 'd
            match (b.get(i + 1), b.get(i + 2)) {
                (Some(b's' | b't' | b'm' | b'd'), _) => return i + 2,
                (Some(b'r' | b'v'), Some(b'e')) | (Some(b'l'), Some(b'l')) => return i + 3,
                // An apostrophe is of no other class: ` ?[^\s\p{L}\p{N}]+`.
                _ => return self.run(s, i + 1, Class::Other),
            }
        }
        let (k, n) = self.at(s, i);
        if k != Class::Space {
            return self.run(s, i + n, k);
        }
        // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+` after a space.
        if x == b' ' && i + 1 < b.len() {
            let (k2, n2) = self.at(s, i + 1);
            if k2 != Class::Space {
                return self.run(s, i + 1 + n2, k2);
            }
        }
        // `\s+(?!\S)`: the whitespace run, less its last character when
        // something follows; `\s+` when that leaves nothing.
        let j = self.run(s, i + n, Class::Space);
        if j == b.len() {
            return j;
        }
        let mut last = j - 1;
        while b[last] & 0xC0 == 0x80 {
            last -= 1;
        }
        if last > i {
            last
        } else {
            j
        }
    }
}

/// A part of the post-processor's single template.
#[derive(Debug, Clone)]
enum Part {
    /// The text's ids.
    Text,
    /// A special token's ids.
    Ids(Vec<u32>),
}

/// Added tokens matched in one pass: the automaton and each pattern's id.
#[derive(Debug)]
struct AddedPass {
    automaton: AhoCorasick,
    ids: Vec<u32>,
}

impl AddedPass {
    fn new(tokens: &[(String, u32)]) -> Result<Option<Self>, Decline> {
        if tokens.is_empty() {
            return Ok(None);
        }
        let automaton = AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .build(tokens.iter().map(|(content, _)| content))
            .map_err(|e| format!("added tokens: {e}"))?;
        Ok(Some(AddedPass {
            automaton,
            ids: tokens.iter().map(|&(_, id)| id).collect(),
        }))
    }
}

/// A piece of text between added tokens, or an added token.
enum Piece<'a> {
    Text(&'a str),
    Added(u32),
}

static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

/// A byte-level BPE tokenizer reproduced exactly (see the module docs).
#[derive(Debug)]
pub(crate) struct FastBpe {
    /// Which per-thread cache entries are this tokenizer's.
    owner: u64,
    add_prefix_space: bool,
    classes: Classes,
    /// The id of each byte's byte-level character.
    byte_id: [u32; 256],
    /// `(left << 32) | right` → (rank, merged id).
    merges: FxHashMap<u64, (u32, u32)>,
    /// With `ignore_merges`: every vocabulary token by its bytes.
    whole: Option<FxHashMap<Box<[u8]>, u32>>,
    /// Non-normalized added tokens (first pass), then normalized ones.
    added: [Option<AddedPass>; 2],
    template: Vec<Part>,
}

/// The GPT-2 byte → character table (`bytes_to_unicode`).
fn byte_chars() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let code = if printable {
            u32::from(b)
        } else {
            n += 1;
            255 + n
        };
        out[usize::from(b)] = char::from_u32(code).unwrap_or('\0');
    }
    out
}

fn pair(a: u32, b: u32) -> u64 {
    (u64::from(a) << 32) | u64::from(b)
}

impl FastBpe {
    /// The fast path for `tokenizer` (loaded from `json`, the file's
    /// parsed content), or why it has none.
    pub(crate) fn new(
        tokenizer: &tokenizers::Tokenizer,
        json: &serde_json::Value,
    ) -> Result<Self, Decline> {
        if tokenizer.get_normalizer().is_some() {
            return Err("it has a normalizer".into());
        }
        let add_prefix_space = match tokenizer.get_pre_tokenizer() {
            Some(PreTokenizerWrapper::ByteLevel(b)) if b.use_regex => b.add_prefix_space,
            Some(PreTokenizerWrapper::ByteLevel(_)) => {
                return Err("its ByteLevel pre-tokenizer has use_regex off".into())
            }
            other => return Err(format!("its pre-tokenizer is not ByteLevel: {other:?}")),
        };
        if tokenizer.get_truncation().is_some() || tokenizer.get_padding().is_some() {
            return Err("it truncates or pads".into());
        }
        if tokenizer.get_encode_special_tokens() {
            return Err("it encodes special tokens as text".into());
        }
        let template = match tokenizer.get_post_processor() {
            None | Some(PostProcessorWrapper::ByteLevel(_)) => vec![Part::Text],
            Some(p @ PostProcessorWrapper::Template(_)) => template(p)?,
            Some(other) => return Err(format!("its post-processor is {other:?}")),
        };
        let bpe = match tokenizer.get_model() {
            ModelWrapper::BPE(bpe) => bpe,
            _ => return Err("its model is not BPE".into()),
        };
        if bpe.dropout.is_some_and(|d| d != 0.0) {
            return Err("its BPE has dropout".into());
        }
        if bpe.continuing_subword_prefix.is_some() || bpe.end_of_word_suffix.is_some() {
            return Err("its BPE has a continuing_subword_prefix or end_of_word_suffix".into());
        }
        let (byte_id, merges, whole) = bpe_tables(bpe)?;
        let added = added_passes(tokenizer, json)?;
        Ok(FastBpe {
            owner: NEXT_OWNER.fetch_add(1, Ordering::Relaxed),
            add_prefix_space,
            classes: Classes::new()?,
            byte_id,
            merges,
            whole,
            added,
            template,
        })
    }

    /// The ids of `text`, as `encode_fast(text, true)` gives them.
    pub(crate) fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 4);
        let done = CACHE.try_with(|cell| match cell.try_borrow_mut() {
            Ok(mut cache) => self.encode_into(text, &mut cache, &mut out),
            // Not reached (nothing re-enters): a cache of its own.
            Err(_) => self.encode_into(text, &mut WordCache::default(), &mut out),
        });
        if done.is_err() {
            // The thread's cache is gone (called while the thread exits).
            self.encode_into(text, &mut WordCache::default(), &mut out);
        }
        out
    }

    fn encode_into(&self, text: &str, cache: &mut WordCache, out: &mut Vec<u32>) {
        cache.claim(self.owner);
        for part in &self.template {
            match part {
                Part::Ids(ids) => out.extend_from_slice(ids),
                Part::Text => self.pieces(text, 0, &mut |piece| match piece {
                    Piece::Added(id) => out.push(id),
                    Piece::Text(t) => self.encode_piece(t, cache, out),
                }),
            }
        }
    }

    /// Split `text` on the added tokens of pass `pass` and the ones after.
    fn pieces<'a>(&self, text: &'a str, pass: usize, f: &mut dyn FnMut(Piece<'a>)) {
        if text.is_empty() {
            return;
        }
        let Some(added) = self.added.get(pass) else {
            return f(Piece::Text(text));
        };
        let Some(added) = added else {
            return self.pieces(text, pass + 1, f);
        };
        let mut last = 0;
        for m in added.automaton.find_iter(text) {
            if m.start() > last {
                self.pieces(&text[last..m.start()], pass + 1, f);
            }
            f(Piece::Added(added.ids[m.pattern().as_usize()]));
            last = m.end();
        }
        if last < text.len() {
            self.pieces(&text[last..], pass + 1, f);
        }
    }

    /// The ids of a piece of text without added tokens (not empty).
    fn encode_piece(&self, piece: &str, cache: &mut WordCache, out: &mut Vec<u32>) {
        let prefixed;
        let s = if self.add_prefix_space && !piece.starts_with(' ') {
            prefixed = format!(" {piece}");
            prefixed.as_str()
        } else {
            piece
        };
        let mut i = 0;
        while i < s.len() {
            let j = self.classes.word_end(s, i);
            self.word(&s.as_bytes()[i..j], cache, out);
            i = j;
        }
    }

    /// The ids of one pre-token.
    fn word(&self, w: &[u8], cache: &mut WordCache, out: &mut Vec<u32>) {
        if let Some(whole) = &self.whole {
            if let Some(&id) = whole.get(w) {
                out.push(id);
                return;
            }
        }
        if let [b] = w {
            out.push(self.byte_id[usize::from(*b)]);
            return;
        }
        let cacheable = w.len() < CACHE_MAX_WORD;
        if cacheable {
            if let Some(ids) = cache.get(w) {
                out.extend_from_slice(ids);
                return;
            }
        }
        let start = out.len();
        if w.len() <= SCAN_MAX {
            self.merge_scan(w, &mut cache.scratch, out);
        } else {
            self.merge_heap(w, out);
        }
        if cacheable {
            cache.insert(w, &out[start..]);
        }
    }

    fn rank(&self, a: u32, b: u32) -> Option<(u32, u32)> {
        self.merges.get(&pair(a, b)).copied()
    }

    /// BPE on a short word: the lowest-ranked pair, leftmost among equals,
    /// merged until none is left.
    fn merge_scan(&self, w: &[u8], scratch: &mut Scratch, out: &mut Vec<u32>) {
        let Scratch { syms, ranks } = scratch;
        syms.clear();
        syms.extend(w.iter().map(|&b| self.byte_id[usize::from(b)]));
        ranks.clear();
        ranks.extend(
            syms.windows(2)
                .map(|p| self.rank(p[0], p[1]).unwrap_or((u32::MAX, 0))),
        );
        loop {
            let mut best = u32::MAX;
            let mut at = 0;
            for (k, &(r, _)) in ranks.iter().enumerate() {
                if r < best {
                    best = r;
                    at = k;
                }
            }
            if best == u32::MAX {
                break;
            }
            syms[at] = ranks[at].1;
            syms.remove(at + 1);
            ranks.remove(at);
            if at > 0 {
                ranks[at - 1] = self.rank(syms[at - 1], syms[at]).unwrap_or((u32::MAX, 0));
            }
            if at + 1 < syms.len() {
                ranks[at] = self.rank(syms[at], syms[at + 1]).unwrap_or((u32::MAX, 0));
            }
        }
        out.extend_from_slice(syms);
    }

    /// BPE on a long word, as `tokenizers`' `Word::merge_all` does it: a
    /// min-heap of (rank, position), stale entries skipped.
    fn merge_heap(&self, w: &[u8], out: &mut Vec<u32>) {
        const NONE: u32 = u32::MAX;
        let n = w.len();
        let mut id: Vec<u32> = w.iter().map(|&b| self.byte_id[usize::from(b)]).collect();
        let mut next: Vec<u32> = (1..=n as u32).collect();
        if let Some(last) = next.last_mut() {
            *last = NONE;
        }
        let mut prev: Vec<u32> = (0..n as u32).map(|k| k.wrapping_sub(1)).collect();
        let mut alive = vec![true; n];
        let mut heap = BinaryHeap::with_capacity(n);
        for k in 0..n.saturating_sub(1) {
            if let Some((r, m)) = self.rank(id[k], id[k + 1]) {
                heap.push(Reverse((r, k as u32, m)));
            }
        }
        while let Some(Reverse((_, pos, merged))) = heap.pop() {
            let p = pos as usize;
            if !alive[p] || next[p] == NONE {
                continue;
            }
            let q = next[p] as usize;
            if self.rank(id[p], id[q]).map(|x| x.1) != Some(merged) {
                continue;
            }
            id[p] = merged;
            alive[q] = false;
            next[p] = next[q];
            if next[q] != NONE {
                prev[next[q] as usize] = pos;
            }
            if prev[p] != NONE {
                let l = prev[p] as usize;
                if let Some((r, m)) = self.rank(id[l], id[p]) {
                    heap.push(Reverse((r, l as u32, m)));
                }
            }
            if next[p] != NONE {
                if let Some((r, m)) = self.rank(id[p], id[next[p] as usize]) {
                    heap.push(Reverse((r, pos, m)));
                }
            }
        }
        let mut k = 0u32;
        while k != NONE && (k as usize) < n {
            out.push(id[k as usize]);
            k = next[k as usize];
        }
    }
}

/// The byte ids, the merges and (with `ignore_merges`) the vocabulary by
/// bytes, from the loaded model.
#[allow(clippy::type_complexity)]
fn bpe_tables(
    bpe: &BPE,
) -> Result<
    (
        [u32; 256],
        FxHashMap<u64, (u32, u32)>,
        Option<FxHashMap<Box<[u8]>, u32>>,
    ),
    Decline,
> {
    let vocab = bpe.get_vocab();
    let chars = byte_chars();
    let mut byte_id = [0u32; 256];
    for (b, c) in chars.iter().enumerate() {
        byte_id[b] = *vocab
            .get(c.to_string().as_str())
            .ok_or_else(|| format!("byte {b:#04x} ({c:?}) is not in its vocabulary"))?;
    }
    // The merges in rank order, as the model serializes them (its own
    // table, whatever form the file wrote them in).
    let value =
        serde_json::to_value(bpe).map_err(|e| format!("its BPE does not serialize: {e}"))?;
    let list = value
        .get("merges")
        .and_then(|m| m.as_array())
        .ok_or("its BPE serializes without merges")?;
    let mut merges = FxHashMap::default();
    merges.reserve(list.len());
    for (rank, m) in list.iter().enumerate() {
        let (Some(a), Some(b)) = (
            m.get(0).and_then(|x| x.as_str()),
            m.get(1).and_then(|x| x.as_str()),
        ) else {
            return Err(format!("merge {rank} is not a pair: {m}"));
        };
        let id = |t: &str| {
            vocab
                .get(t)
                .copied()
                .ok_or_else(|| format!("merge {rank}: {t:?} is not in the vocabulary"))
        };
        let merged = id(&format!("{a}{b}"))?;
        let rank = u32::try_from(rank).map_err(|_| "too many merges".to_string())?;
        merges.insert(pair(id(a)?, id(b)?), (rank, merged));
    }
    let whole = if bpe.ignore_merges {
        let mut back = FxHashMap::default();
        for (b, c) in chars.iter().enumerate() {
            back.insert(*c, b as u8);
        }
        let mut whole = FxHashMap::default();
        for (token, id) in &vocab {
            let bytes: Option<Vec<u8>> = token.chars().map(|c| back.get(&c).copied()).collect();
            if let Some(bytes) = bytes {
                whole.insert(bytes.into_boxed_slice(), *id);
            }
        }
        Some(whole)
    } else {
        None
    };
    Ok((byte_id, merges, whole))
}

/// The two added-token passes, checked against the file's `added_tokens`.
fn added_passes(
    tokenizer: &tokenizers::Tokenizer,
    json: &serde_json::Value,
) -> Result<[Option<AddedPass>; 2], Decline> {
    let decoder = tokenizer.get_added_tokens_decoder();
    let listed = json
        .get("added_tokens")
        .and_then(|a| a.as_array())
        .map_or(0, |a| a.len());
    let mut contents: Vec<&str> = decoder.values().map(|t| t.content.as_str()).collect();
    contents.sort_unstable();
    contents.dedup();
    if contents.len() != decoder.len() || decoder.len() != listed {
        return Err(format!(
            "its added tokens are not one id each ({} listed, {} ids, {} contents)",
            listed,
            decoder.len(),
            contents.len()
        ));
    }
    let mut raw = Vec::new();
    let mut normalized = Vec::new();
    for (&id, t) in &decoder {
        if t.single_word || t.lstrip || t.rstrip {
            return Err(format!(
                "added token {:?} is single_word, lstrip or rstrip",
                t.content
            ));
        }
        if tokenizer.token_to_id(&t.content) != Some(id) {
            return Err(format!("added token {:?} is not id {id}", t.content));
        }
        if t.content.is_empty() {
            continue;
        }
        let entry = (t.content.clone(), id);
        if t.normalized {
            normalized.push(entry);
        } else {
            raw.push(entry);
        }
    }
    Ok([AddedPass::new(&raw)?, AddedPass::new(&normalized)?])
}

/// The single template of a `TemplateProcessing` (from its serialized
/// form): special tokens' ids around the text.
fn template(p: &PostProcessorWrapper) -> Result<Vec<Part>, Decline> {
    let v = serde_json::to_value(p).map_err(|e| format!("its post-processor: {e}"))?;
    let single = v
        .get("single")
        .and_then(|s| s.as_array())
        .ok_or("its TemplateProcessing has no single template")?;
    let specials = v.get("special_tokens");
    let mut parts = Vec::new();
    for piece in single {
        if let Some(seq) = piece.get("Sequence") {
            if seq.get("id").and_then(|i| i.as_str()) != Some("A") {
                return Err(format!("its single template has {piece}"));
            }
            parts.push(Part::Text);
        } else if let Some(name) = piece
            .get("SpecialToken")
            .and_then(|s| s.get("id"))
            .and_then(|i| i.as_str())
        {
            let ids = specials
                .and_then(|s| s.get(name))
                .and_then(|t| t.get("ids"))
                .and_then(|i| i.as_array())
                .ok_or_else(|| format!("its template's special token {name:?} has no ids"))?
                .iter()
                .map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
                .collect::<Option<Vec<u32>>>()
                .ok_or_else(|| format!("its template's special token {name:?}: ids"))?;
            parts.push(Part::Ids(ids));
        } else {
            return Err(format!("its single template has {piece}"));
        }
    }
    Ok(parts)
}

/// Reused buffers of the scanning merge.
#[derive(Default)]
struct Scratch {
    syms: Vec<u32>,
    ranks: Vec<(u32, u32)>,
}

/// Words already merged on this thread: word bytes → a range of `ids`.
#[derive(Default)]
struct WordCache {
    owner: u64,
    map: FxHashMap<Box<[u8]>, (u32, u32)>,
    ids: Vec<u32>,
    scratch: Scratch,
}

impl WordCache {
    /// Empty it if it holds another tokenizer's words.
    fn claim(&mut self, owner: u64) {
        if self.owner != owner {
            self.map.clear();
            self.ids.clear();
            self.owner = owner;
        }
    }

    fn get(&self, w: &[u8]) -> Option<&[u32]> {
        let &(at, len) = self.map.get(w)?;
        self.ids.get(at as usize..(at + len) as usize)
    }

    fn insert(&mut self, w: &[u8], ids: &[u32]) {
        if self.map.len() >= CACHE_WORDS || self.ids.len() + ids.len() > u32::MAX as usize {
            self.map.clear();
            self.ids.clear();
        }
        let at = self.ids.len() as u32;
        self.ids.extend_from_slice(ids);
        self.map.insert(w.into(), (at, ids.len() as u32));
    }
}

thread_local! {
    static CACHE: RefCell<WordCache> = RefCell::new(WordCache::default());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_table_is_gpt2s() {
        let c = byte_chars();
        assert_eq!(c[usize::from(b'!')], '!');
        assert_eq!(c[0], '\u{100}');
        assert_eq!(c[usize::from(b' ')], '\u{120}');
        assert_eq!(c[0xAD], '\u{143}');
        let mut all: Vec<char> = c.to_vec();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 256);
    }

    #[test]
    fn the_scanner_splits_as_gpt2s_pattern() {
        let classes = Classes::new().unwrap();
        let split = |s: &'static str| -> Vec<&'static str> {
            scanned(&classes, s)
                .into_iter()
                .map(|(i, j)| &s[i..j])
                .collect()
        };
        assert_eq!(
            split("Hello world's  end\n\n  x 12ab!! 'll"),
            vec![
                "Hello", " world", "'s", " ", " end", "\n\n ", " x", " 12", "ab", "!!", " '", "ll"
            ]
        );
        assert_eq!(split("a \t"), vec!["a", " \t"]);
        assert_eq!(split("\tx"), vec!["\t", "x"]);
        assert_eq!(split("é\u{3000}漢"), vec!["é", "\u{3000}", "漢"]);
    }

    /// The byte offsets of the scanner's pre-tokens of `text`.
    fn scanned(classes: &Classes, text: &str) -> Vec<(usize, usize)> {
        let mut out = vec![];
        let mut i = 0;
        while i < text.len() {
            let j = classes.word_end(text, i);
            out.push((i, j));
            i = j;
        }
        out
    }

    /// Every Unicode scalar value (every 17th in a debug build), in the
    /// contexts the pattern tells apart, splits where the `tokenizers`
    /// crate's `ByteLevel` pre-tokenizer (its regex engine) splits it.
    #[test]
    fn the_scanner_splits_every_character_as_the_crates_byte_level() {
        use std::fmt::Write;
        use tokenizers::pre_tokenizers::byte_level::ByteLevel;
        use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};
        let classes = Classes::new().unwrap();
        let byte_level = ByteLevel::new(false, false, true);
        let step = if cfg!(debug_assertions) { 17 } else { 1 };
        let chars: Vec<char> = (0..=0x10FFFFu32)
            .step_by(step)
            .filter_map(char::from_u32)
            .collect();
        for chunk in chars.chunks(2048) {
            let mut text = String::new();
            for &c in chunk {
                writeln!(text, "x{c}{c} {c}1{c}'{c}  {c}").unwrap();
            }
            let mut pre = PreTokenizedString::from(text.as_str());
            byte_level.pre_tokenize(&mut pre).unwrap();
            let want: Vec<(usize, usize)> = pre
                .get_splits(OffsetReferential::Original, OffsetType::Byte)
                .into_iter()
                .map(|(_, o, _)| o)
                .collect();
            let got = scanned(&classes, &text);
            if got != want {
                let k = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
                let at = want.get(k).or(got.get(k)).map_or(0, |o| o.0);
                panic!(
                    "split {k} differs near {:?}: scanner {:?}, crate {:?}",
                    &text[at.saturating_sub(8)..(at + 16).min(text.len())],
                    got.get(k).map(|o| &text[o.0..o.1]),
                    want.get(k).map(|o| &text[o.0..o.1]),
                );
            }
        }
    }
}
