//! Sequence packing: documents of tokens (a ragged token field, one
//! document per instance) packed into rows of exactly `L` tokens, `B` rows
//! a batch — several documents per row, with segment ids, positions that
//! restart per document and `cu_seqlens` for variable-length attention.
//!
//! It owns the packing policies ([`PackPolicy`]), what is done with a
//! document longer than a row ([`LongDocs`]), the [`Packer`] (a bounded
//! window of open rows, deterministic: the same documents in the same
//! order give the same rows), the packed batch's layout
//! ([`PackedRows::into_batch`]) and the per-segment provenance
//! ([`Segment`]) a checkpoint counts documents by.
//!
//! | policy | a document of ≤ `L` tokens | fill |
//! |---|---|---|
//! | [`PackPolicy::BestFit`] | never cut: it goes into the open row it fills most tightly | high with a large window |
//! | [`PackPolicy::FirstFit`] | never cut: it goes into the oldest open row it fits | a little lower |
//! | [`PackPolicy::Concat`] | cut where a row ends (concatenate, then split) | 100 % but the last row |
//!
//! A document longer than `L` is, by [`LongDocs`], cut into consecutive
//! pieces of `L` tokens (the last piece shorter, packed as any document),
//! truncated to its first `L` tokens, or dropped — each counted in
//! [`PackStats`].
//!
//! A document goes in whole ([`Packer::push`]: all its rows made at once)
//! or lazily ([`Packer::start`], then [`Packer::next_batch`] per batch:
//! only the pieces each batch needs placed, so a document of any length
//! holds at most a batch of made rows and takes `O(n)` in all), the same
//! rows either way. Its ids ([`Tokens`]) are `i32`, or `i64` that must each
//! fit `i32` ([`BadToken`] names the one that does not).
//!
//! ```
//! use feedline::pack::{Pack, Packer};
//! use feedline::{Origin, SourceId};
//!
//! let mut packer = Packer::new(Pack::best_fit(8).window(100), 2).unwrap();
//! let src = SourceId::intern("docs.jsonl");
//! for (record, len) in [5, 3, 6, 2].into_iter().enumerate() {
//!     let tokens: Vec<i32> = (0..len).collect();
//!     packer.push(Origin::new(src, record as u64), &tokens, None);
//! }
//! let batches = packer.finish();
//! assert_eq!(batches.len(), 1);
//! let batch = batches.into_iter().next().unwrap().into_batch(8).unwrap();
//! let segments = batch.view::<i32, ndarray::Ix2>("segment_ids").unwrap();
//! // 5 + 3 fill row 0; 6 + 2 fill row 1.
//! assert_eq!(segments.row(0).to_vec(), [1, 1, 1, 1, 1, 2, 2, 2]);
//! assert_eq!(segments.row(1).to_vec(), [1, 1, 1, 1, 1, 1, 2, 2]);
//! ```

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::batch::{Batch, BatchField};
use crate::checkpoint::RecordRanges;
use crate::error::{Error, Result};
use crate::plan::Equalize;
pub use crate::provenance::Segment;
use crate::provenance::{Origin, SourceId};
use crate::schema::{DType, Ragged, Schema};

/// The default window of best-fit and first-fit: documents held in open rows.
pub const DEFAULT_PACK_WINDOW: usize = 1000;

/// Rows of room at least that equalize `Pad` leaves the largest rank
/// ([`Pack::equalized_rows`]): one placement changes the rows a pass
/// surely needs by at most 2.
const PAD_SLACK_ROWS: u64 = 2;

/// The longest row this build packs (tokens).
pub const MAX_PACK_LENGTH: usize = 1 << 24;

/// How documents are put into rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PackPolicy {
    /// Into the open row with the least room that still holds the document.
    BestFit,
    /// Into the oldest open row that holds the document.
    FirstFit,
    /// One row at a time, documents concatenated and cut where rows end.
    Concat,
}

impl PackPolicy {
    /// The names the command and Python take.
    pub const NAMES: [&'static str; 3] = ["best-fit", "first-fit", "concat"];
}

impl fmt::Display for PackPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PackPolicy::BestFit => "best-fit",
            PackPolicy::FirstFit => "first-fit",
            PackPolicy::Concat => "concat",
        })
    }
}

impl FromStr for PackPolicy {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "best-fit" | "best_fit" => Ok(PackPolicy::BestFit),
            "first-fit" | "first_fit" => Ok(PackPolicy::FirstFit),
            "concat" => Ok(PackPolicy::Concat),
            _ => Err(format!(
                "unknown packing policy {s:?}: expected one of {}",
                PackPolicy::NAMES.join(", ")
            )),
        }
    }
}

/// What best-fit and first-fit do with a document longer than a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LongDocs {
    /// Consecutive pieces of `L` tokens, each a full row; the rest (if
    /// any) packed as a document.
    Split,
    /// Its first `L` tokens, a full row; the rest is left out (counted).
    Truncate,
    /// Left out (counted).
    Drop,
}

impl LongDocs {
    /// The names the command and Python take.
    pub const NAMES: [&'static str; 3] = ["split", "truncate", "drop"];
}

impl fmt::Display for LongDocs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LongDocs::Split => "split",
            LongDocs::Truncate => "truncate",
            LongDocs::Drop => "drop",
        })
    }
}

impl FromStr for LongDocs {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "split" => Ok(LongDocs::Split),
            "truncate" => Ok(LongDocs::Truncate),
            "drop" => Ok(LongDocs::Drop),
            _ => Err(format!(
                "unknown long-document policy {s:?}: expected one of {}",
                LongDocs::NAMES.join(", ")
            )),
        }
    }
}

/// The packing settings: row length, policy, window, long documents, and
/// the token field packed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pack {
    /// Tokens per row (`L`).
    pub length: usize,
    /// Documents held in open rows at most (best-fit, first-fit).
    pub window: usize,
    /// How documents are put into rows.
    pub policy: PackPolicy,
    /// What is done with a document longer than `length`.
    pub long_docs: LongDocs,
    /// The ragged integer field holding each document's tokens.
    pub field: String,
}

impl Pack {
    fn with(policy: PackPolicy, length: usize) -> Self {
        Pack {
            length,
            window: DEFAULT_PACK_WINDOW,
            policy,
            long_docs: LongDocs::Split,
            field: "input_ids".to_string(),
        }
    }

    /// Best-fit packing into rows of `length` tokens.
    pub fn best_fit(length: usize) -> Self {
        Pack::with(PackPolicy::BestFit, length)
    }

    /// First-fit packing into rows of `length` tokens.
    pub fn first_fit(length: usize) -> Self {
        Pack::with(PackPolicy::FirstFit, length)
    }

    /// Concatenate-then-split into rows of `length` tokens.
    pub fn concat(length: usize) -> Self {
        Pack::with(PackPolicy::Concat, length)
    }

    /// `policy` packing into rows of `length` tokens.
    pub fn new(policy: PackPolicy, length: usize) -> Self {
        Pack::with(policy, length)
    }

    /// Hold at most `documents` documents in open rows (default
    /// [`DEFAULT_PACK_WINDOW`]).
    pub fn window(mut self, documents: usize) -> Self {
        self.window = documents;
        self
    }

    /// What to do with a document longer than a row (default `Split`).
    pub fn long_docs(mut self, long: LongDocs) -> Self {
        self.long_docs = long;
        self
    }

    /// Pack the tokens of `field` (default `input_ids`).
    pub fn field(mut self, field: &str) -> Self {
        self.field = field.to_string();
        self
    }

    /// Every setting in range, or what is not.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.length == 0 || self.length > MAX_PACK_LENGTH {
            return Err(format!(
                "pack length must be in 1..={MAX_PACK_LENGTH} tokens, got {}",
                self.length
            ));
        }
        if self.window == 0 {
            return Err("pack window must be >= 1 document".into());
        }
        if self.field.is_empty() {
            return Err("pack field must be named".into());
        }
        Ok(())
    }

    /// The tokens a document of `n` tokens puts into rows: all of them
    /// (concat, or split), at most `L` (truncate), or none when longer than
    /// `L` (drop).
    pub fn packed_tokens(&self, n: usize) -> usize {
        if self.policy == PackPolicy::Concat || n <= self.length {
            return n;
        }
        match self.long_docs {
            LongDocs::Split => n,
            LongDocs::Truncate => self.length,
            LongDocs::Drop => 0,
        }
    }

    /// The packed rows every rank delivers in a pass when ranks are
    /// equalized (`how`), from the tokens each rank's documents put into
    /// rows ([`packed_tokens`](Self::packed_tokens), summed):
    /// - `Drop`: the fewest any rank surely makes, `min ⌈T / L⌉` — no rank
    ///   makes fewer rows than its tokens fill; the rows past it are left out;
    /// - `Pad`: `m + max(2, ⌈m / 100⌉)` for the largest `m = max ⌈T / L⌉`:
    ///   room for best-fit and first-fit to keep documents whole at 99 %
    ///   fill; a rank that would need more rows fills its open rows in
    ///   order from then on (cutting documents, as concat does), and every
    ///   rank is padded to it with padding rows.
    ///
    /// `None` without equalizing.
    pub fn equalized_rows(&self, tokens_per_rank: &[u64], how: Equalize) -> Option<u64> {
        let l = self.length.max(1) as u64;
        let rows = tokens_per_rank.iter().map(|t| t.div_ceil(l));
        match how {
            Equalize::Off => None,
            Equalize::Drop => Some(rows.min().unwrap_or(0)),
            Equalize::Pad => {
                let m = rows.max().unwrap_or(0);
                Some(m + (m.div_ceil(100)).max(PAD_SLACK_ROWS))
            }
        }
    }

    /// The schema of a packed batch: `input_ids`, `segment_ids`,
    /// `position_ids` (`i32 [L]`), `cu_seqlens` (ragged `i32`, see
    /// [`PackedRows::into_batch`]) and `max_seqlen` (`i32 []`).
    pub fn output_schema(&self) -> Schema {
        packed_schema(self.length)
    }
}

fn packed_schema(length: usize) -> Schema {
    Schema::builder()
        .field("input_ids", DType::I32, [length])
        .field("segment_ids", DType::I32, [length])
        .field("position_ids", DType::I32, [length])
        .ragged("cu_seqlens", DType::I32, Ragged::Offsets)
        .field("max_seqlen", DType::I32, [])
        .build()
        .expect("the packed schema is valid")
}

/// What a packer did, summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PackStats {
    /// Documents taken (pieces of a resumed document count once).
    pub documents: u64,
    /// Real tokens in the rows.
    pub tokens: u64,
    /// Rows made (padding rows of a pass's last batch included).
    pub rows: u64,
    /// Padding tokens (room left in rows, and padding rows).
    pub padding_tokens: u64,
    /// Documents of at most `L` tokens cut between rows (`concat` only).
    pub documents_cut: u64,
    /// Documents longer than `L` split into pieces.
    pub long_split: u64,
    /// Documents longer than `L` truncated.
    pub long_truncated: u64,
    /// Documents longer than `L` dropped.
    pub long_dropped: u64,
    /// Tokens left out by truncating or dropping.
    pub tokens_left_out: u64,
    /// Documents with no token (nothing to pack).
    pub empty_documents: u64,
    /// Padding rows added to equalize ranks (`Pad`; in `rows`).
    #[serde(default)]
    pub equalize_padding_rows: u64,
    /// Rows left out to equalize ranks (`Drop`; not in `rows`).
    #[serde(default)]
    pub equalize_dropped_rows: u64,
    /// The tokens of those rows (not in `tokens`).
    #[serde(default)]
    pub equalize_dropped_tokens: u64,
}

impl PackStats {
    /// Real tokens / (rows × `length`): 1.0 is no padding at all.
    pub fn fill(&self, length: usize) -> f64 {
        let room = self.rows * length as u64;
        if room == 0 {
            0.0
        } else {
            self.tokens as f64 / room as f64
        }
    }

    /// Both, summed.
    pub fn add(&mut self, o: &PackStats) {
        self.documents += o.documents;
        self.tokens += o.tokens;
        self.rows += o.rows;
        self.padding_tokens += o.padding_tokens;
        self.documents_cut += o.documents_cut;
        self.long_split += o.long_split;
        self.long_truncated += o.long_truncated;
        self.long_dropped += o.long_dropped;
        self.tokens_left_out += o.tokens_left_out;
        self.empty_documents += o.empty_documents;
        self.equalize_padding_rows += o.equalize_padding_rows;
        self.equalize_dropped_rows += o.equalize_dropped_rows;
        self.equalize_dropped_tokens += o.equalize_dropped_tokens;
    }
}

/// A row being filled or made: its tokens and its segments (`row` unset).
#[derive(Debug, Default)]
pub struct PackedRow {
    tokens: Vec<i32>,
    segments: Vec<Segment>,
}

impl PackedRow {
    /// Its real tokens.
    pub fn tokens(&self) -> &[i32] {
        &self.tokens
    }
}

/// `B` rows for one batch (a pass's last batches may hold padding rows).
#[derive(Debug)]
pub struct PackedRows {
    rows: Vec<PackedRow>,
    /// Rows added as padding (no token), the last ones.
    pub padding_rows: usize,
    /// The origin padding rows are named by when no row before them in
    /// the batch holds a document.
    origin_hint: Option<Origin>,
}

impl PackedRows {
    /// The rows.
    pub fn rows(&self) -> &[PackedRow] {
        &self.rows
    }

    /// The packed batch, `B` rows of `length` tokens:
    /// - `input_ids`, `segment_ids`, `position_ids`: `i32 [B, L]`; segment
    ///   ids number a row's documents 1, 2, … and are 0 on padding;
    ///   positions restart at 0 per document (0 on padding);
    /// - `cu_seqlens` (ragged `i32`, values concatenated): the offsets of
    ///   every segment in the flattened `[B × L]` tokens, starting with 0
    ///   and ending with `B × L` — a row's padding tail is a segment of its
    ///   own, so the offsets cover every position, as flash-attention's
    ///   varlen kernels take them; row 0 holds the leading 0 and each row
    ///   the ends of its segments;
    /// - `max_seqlen` (`i32 []`, every row the same): the longest segment;
    /// - [`Batch::segments`]: the provenance of every document piece;
    /// - [`Batch::padded_rows`]: the padding rows (segment ids 0), the last.
    pub fn into_batch(self, length: usize) -> Result<Batch> {
        let b = self.rows.len();
        let mut input_ids = vec![0i32; b * length];
        let mut segment_ids = vec![0i32; b * length];
        let mut position_ids = vec![0i32; b * length];
        let mut cu = Vec::with_capacity(b * 4 + 1);
        let mut cu_offsets = Vec::with_capacity(b + 1);
        let mut segments = Vec::new();
        let mut origins = Vec::with_capacity(b);
        let mut max_seqlen = 0usize;
        cu_offsets.push(0);
        cu.push(0i32);
        let padding_rows = self.padding_rows;
        let mut last_origin = self
            .rows
            .iter()
            .find_map(|r| r.segments.first().map(|s| s.origin))
            .or(self.origin_hint);
        for (i, row) in self.rows.into_iter().enumerate() {
            let base = i * length;
            input_ids[base..base + row.tokens.len()].copy_from_slice(&row.tokens);
            let mut at = 0usize;
            for (k, seg) in row.segments.iter().enumerate() {
                let n = seg.len as usize;
                segment_ids[base + at..base + at + n].fill(k as i32 + 1);
                for (p, slot) in position_ids[base + at..base + at + n]
                    .iter_mut()
                    .enumerate()
                {
                    *slot = p as i32;
                }
                at += n;
                max_seqlen = max_seqlen.max(n);
                cu.push(i32::try_from(base + at).map_err(|_| too_large(b, length))?);
                segments.push(Segment {
                    row: i as u32,
                    ..*seg
                });
            }
            if at < length {
                max_seqlen = max_seqlen.max(length - at);
                cu.push(i32::try_from(base + length).map_err(|_| too_large(b, length))?);
            }
            cu_offsets.push(cu.len());
            if let Some(s) = row.segments.first() {
                last_origin = Some(s.origin);
            }
            // A padding row names the last document before it (rows need an
            // origin each; its segments say it holds none), or `<padding>`
            // when the rank had none.
            origins.push(
                last_origin.unwrap_or_else(|| Origin::new(SourceId::intern(PADDING_SOURCE), 0)),
            );
        }
        let shape = [b, length];
        let field = |v: Vec<i32>, shape: &[usize]| -> Result<BatchField> {
            Ok(BatchField {
                data: <i32 as crate::batch::Element>::aligned_copy(&v, shape)
                    .map_err(|e| Error::Schema(e.to_string()))?,
                offsets: None,
                lengths: None,
            })
        };
        let total = cu.len();
        let fields = vec![
            field(input_ids, &shape)?,
            field(segment_ids, &shape)?,
            field(position_ids, &shape)?,
            BatchField {
                offsets: Some(cu_offsets),
                ..field(cu, &[total])?
            },
            field(vec![max_seqlen as i32; b], &[b])?,
        ];
        let batch = Batch::from_parts(&packed_schema(length), fields, origins)?;
        batch.with_segments(segments).with_padded_rows(padding_rows)
    }
}

/// The source padding rows are named by when their rank had no document.
pub const PADDING_SOURCE: &str = "<padding>";

fn too_large(b: usize, length: usize) -> Error {
    Error::Schema(format!(
        "a packed batch of {b} rows × {length} tokens has more positions than i32 counts"
    ))
}

/// This rank's packed rows in a pass when ranks are equalized
/// ([`Pack::equalized_rows`]): exactly `rows` rows are delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowQuota {
    /// The rows every rank delivers in the pass.
    pub rows: u64,
    /// The tokens this rank's documents put into rows in the pass, as
    /// counted before it ([`Pack::packed_tokens`], summed).
    pub tokens: u64,
    /// `Drop`: the rows past `rows` are left out; `Pad`: the rows are
    /// budgeted to fit in `rows` and padding rows added up to it.
    pub how: Equalize,
}

/// Equalized rows that cannot be delivered: the tokens packed in the pass
/// are not the tokens counted before it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    /// More rows than every rank delivers (`Pad`).
    #[error("equalize pad: this rank's documents need more than the {rows} packed rows every rank delivers: {counted} tokens were counted before the pass, {packed} packed so far — each document's tokens must be the same in the count and in the pass (a transform whose output length changes with the pass?)")]
    Over {
        /// The equalized rows.
        rows: u64,
        /// The tokens counted.
        counted: u64,
        /// The tokens packed.
        packed: u64,
    },
    /// Other tokens than counted.
    #[error("equalized packed rows: this rank's documents held {packed} tokens in the pass, {counted} were counted before it — each document's tokens must be the same in the count and in the pass (a transform whose output length changes with the pass?)")]
    Tokens {
        /// The tokens counted.
        counted: u64,
        /// The tokens packed.
        packed: u64,
    },
    /// Fewer rows than every rank delivers (`Drop`).
    #[error("equalize drop: this rank's documents made {made} packed rows, fewer than the {rows} every rank delivers: {counted} tokens were counted before the pass, {packed} packed — each document's tokens must be the same in the count and in the pass (a transform whose output length changes with the pass?)")]
    Under {
        /// The equalized rows.
        rows: u64,
        /// The rows made.
        made: u64,
        /// The tokens counted.
        counted: u64,
        /// The tokens packed.
        packed: u64,
    },
}

/// One document's token ids as its field holds them: `i32`, or `i64` ids
/// each of which must fit `i32` (a packed row holds `i32`).
#[derive(Clone, Copy, Debug)]
pub enum Tokens<'a> {
    /// `i32` ids.
    I32(&'a [i32]),
    /// `i64` ids, each to fit `i32`.
    I64(&'a [i64]),
}

impl<'a> From<&'a [i32]> for Tokens<'a> {
    fn from(t: &'a [i32]) -> Self {
        Tokens::I32(t)
    }
}

impl<'a> Tokens<'a> {
    /// Its tokens.
    pub fn len(&self) -> usize {
        match self {
            Tokens::I32(t) => t.len(),
            Tokens::I64(t) => t.len(),
        }
    }

    /// No token.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every id fits `i32`, or the first that does not.
    pub fn check(&self) -> std::result::Result<(), BadToken> {
        self.check_range(0, self.len())
    }

    fn check_range(&self, s: usize, e: usize) -> std::result::Result<(), BadToken> {
        let Tokens::I64(t) = self else {
            return Ok(());
        };
        match t[s..e].iter().position(|&v| i32::try_from(v).is_err()) {
            Some(i) => Err(BadToken {
                index: s + i,
                tokens: t.len(),
                value: t[s + i],
            }),
            None => Ok(()),
        }
    }

    /// Tokens `[s, e)` as `i32`: a slice of its own, or converted into `buf`.
    fn piece<'s>(
        &self,
        s: usize,
        e: usize,
        buf: &'s mut Vec<i32>,
    ) -> std::result::Result<&'s [i32], BadToken>
    where
        'a: 's,
    {
        match *self {
            Tokens::I32(t) => Ok(&t[s..e]),
            Tokens::I64(t) => {
                self.check_range(s, e)?;
                buf.clear();
                // Each id fits (checked just above).
                buf.extend(t[s..e].iter().map(|&v| v as i32));
                Ok(&buf[..])
            }
        }
    }
}

/// A token id that does not fit `i32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("token {index} of {tokens} is {value}, outside i32 (-2147483648..=2147483647)")]
pub struct BadToken {
    /// Its index in the document.
    pub index: usize,
    /// The document's tokens.
    pub tokens: usize,
    /// The id.
    pub value: i64,
}

/// What [`Packer::start`] and [`Packer::next_batch`] refuse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PackError {
    /// A token id of the document being placed does not fit `i32` (its
    /// pieces not placed yet are left out).
    #[error(transparent)]
    BadToken(#[from] BadToken),
    /// A document was started while another is still being placed.
    #[error("packing: record {record} of {file} is still being placed: another document cannot be started before its pieces are")]
    Busy {
        /// The document being placed: its file (source).
        file: String,
        /// Its record.
        record: u64,
    },
    /// The tokens given are not the document's being placed.
    #[error(
        "packing: the document being placed has {expected} tokens, the tokens given have {actual}"
    )]
    Tokens {
        /// The document's tokens, as started.
        expected: usize,
        /// The tokens given.
        actual: usize,
    },
}

/// An open row of best-fit or first-fit.
struct Open {
    row: PackedRow,
    room: usize,
}

/// A document taken and not all placed yet: the token ranges left.
#[derive(Debug)]
struct Placing {
    origin: Origin,
    /// Its tokens (as given).
    len: usize,
    /// Its tokens as packed ([`Pack::packed_tokens`]).
    doc_tokens: usize,
    /// Nothing of it was delivered before a resume.
    whole: bool,
    /// Placing tokens `[at, end)`, then the ranges of `rest` (popped from
    /// its back).
    at: usize,
    end: usize,
    rest: Vec<(usize, usize)>,
    /// Concat (or filling in order): the range's tokens are counted in
    /// `placed`, and whether a row ended within it.
    counted: bool,
    cut: bool,
}

/// Packs documents into rows, `rows_per_batch` rows a batch. Deterministic:
/// the same documents pushed in the same order give the same batches.
///
/// Two ways in, both giving the same rows: [`push`](Self::push) places a
/// whole document at once (its rows wait in the packer until
/// [`pop`](Self::pop)ped); [`start`](Self::start) takes a document whose
/// pieces [`next_batch`](Self::next_batch) places only as batches are
/// taken — at most a batch of rows (and the window's open rows) made at a
/// time, whatever the document's length, each piece placed once.
pub struct Packer {
    pack: Pack,
    rows_per_batch: usize,
    /// Open rows by id (ids grow: oldest first).
    open: BTreeMap<u64, Open>,
    /// Best-fit's index: (room, id) of every open row.
    by_room: BTreeSet<(usize, u64)>,
    next_id: u64,
    /// Document pieces in open rows.
    held: usize,
    /// Rows made, waiting for a batch.
    made: VecDeque<PackedRow>,
    /// Concat's row being filled (and, filling in order, the open row
    /// being filled).
    filling: PackedRow,
    stats: PackStats,
    /// Equalized ranks: the rows this pass delivers.
    quota: Option<RowQuota>,
    /// Tokens put into rows (for the quota's budget).
    placed: u64,
    /// Room left in the open rows (best-fit, first-fit).
    open_room: u64,
    /// Rows made within the quota (all rows without one).
    kept_rows: u64,
    /// The quota's budget ran short: the open rows are filled in order,
    /// documents cut where rows end (as concat does).
    in_order: bool,
    /// The open rows to fill in order after `filling`.
    fill_queue: VecDeque<PackedRow>,
    quota_error: Option<QuotaError>,
    /// The last document taken (what padding rows are named by).
    last_origin: Option<Origin>,
    /// The document [`start`](Self::start)ed and not all placed.
    placing: Option<Placing>,
    /// `i64` ids of a piece converted to `i32`.
    scratch: Vec<i32>,
}

impl fmt::Debug for Packer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Packer")
            .field("pack", &self.pack)
            .field("rows_per_batch", &self.rows_per_batch)
            .field("open_rows", &self.open.len())
            .field("held", &self.held)
            .field("made", &self.made.len())
            .field("placing", &self.placing)
            .finish()
    }
}

impl Packer {
    /// A packer of `pack`'s rows, `rows_per_batch` (`B`) to a batch.
    pub fn new(pack: Pack, rows_per_batch: usize) -> std::result::Result<Self, String> {
        pack.check()?;
        if rows_per_batch == 0 {
            return Err("packing needs at least 1 row per batch".into());
        }
        Ok(Packer {
            pack,
            rows_per_batch,
            open: BTreeMap::new(),
            by_room: BTreeSet::new(),
            next_id: 0,
            held: 0,
            made: VecDeque::new(),
            filling: PackedRow::default(),
            stats: PackStats::default(),
            quota: None,
            placed: 0,
            open_room: 0,
            kept_rows: 0,
            in_order: false,
            fill_queue: VecDeque::new(),
            quota_error: None,
            last_origin: None,
            placing: None,
            scratch: Vec::new(),
        })
    }

    /// Deliver exactly `quota.rows` rows (equalized ranks); set before the
    /// first document. With `Pad`, best-fit and first-fit keep documents
    /// whole while the rows left can surely hold the tokens still to come,
    /// and fill their open rows in order from then on.
    pub fn set_quota(&mut self, quota: Option<RowQuota>) {
        self.quota = quota.filter(|q| q.how != Equalize::Off);
    }

    /// The quota could not be kept (see [`QuotaError`]).
    pub fn check_quota(&self) -> std::result::Result<(), QuotaError> {
        match &self.quota_error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// The settings.
    pub fn pack(&self) -> &Pack {
        &self.pack
    }

    /// What it did so far.
    pub fn stats(&self) -> PackStats {
        self.stats
    }

    /// Document pieces waiting in open rows.
    pub fn held(&self) -> usize {
        self.held + self.filling.segments.len()
    }

    /// Rows made and not yet in a batch taken.
    pub fn made_rows(&self) -> usize {
        self.made.len()
    }

    /// A document [`start`](Self::start)ed is not all placed yet.
    pub fn placing(&self) -> bool {
        self.placing.is_some()
    }

    /// Take the document `origin` of `tokens` and place it whole: its rows
    /// wait for [`pop`](Self::pop). `delivered`: its token ranges already
    /// delivered before a resume (left out).
    pub fn push(&mut self, origin: Origin, tokens: &[i32], delivered: Option<&RecordRanges>) {
        let Some(mut p) = self.begin(origin, tokens.len(), delivered) else {
            return;
        };
        let tokens = Tokens::I32(tokens);
        // `i32` ids always fit: a step fails only on an `i64` id.
        while let Ok(false) = self.step(&mut p, &tokens) {}
    }

    /// Take the document `origin` of `len` tokens, to be placed piece by
    /// piece by [`next_batch`](Self::next_batch) as batches are taken.
    /// `delivered`: its token ranges already delivered before a resume
    /// (left out). Refused while a document started before is not all
    /// placed.
    pub fn start(
        &mut self,
        origin: Origin,
        len: usize,
        delivered: Option<&RecordRanges>,
    ) -> std::result::Result<(), PackError> {
        if let Some(p) = &self.placing {
            return Err(PackError::Busy {
                file: p.origin.source.name().to_string(),
                record: p.origin.record,
            });
        }
        self.placing = self.begin(origin, len, delivered);
        Ok(())
    }

    /// The next batch of `B` rows: the rows made first, then pieces of the
    /// document [`start`](Self::start)ed (`tokens`: its tokens) placed one
    /// at a time until `B` rows are made. `None`: fewer than `B` rows are
    /// made and the document is all placed (start the next). Each call
    /// places at most what one batch needs, so a document of `n` tokens
    /// takes `O(n)` in all however long it is.
    pub fn next_batch(
        &mut self,
        tokens: Tokens<'_>,
    ) -> std::result::Result<Option<PackedRows>, PackError> {
        if let Some(p) = self.placing.as_ref().filter(|p| p.len != tokens.len()) {
            return Err(PackError::Tokens {
                expected: p.len,
                actual: tokens.len(),
            });
        }
        while self.made.len() < self.rows_per_batch {
            let Some(mut p) = self.placing.take() else {
                break;
            };
            if !self.step(&mut p, &tokens)? {
                self.placing = Some(p);
            }
        }
        Ok(self.pop())
    }

    /// Count the document `origin` of `n` tokens in; what of it is to be
    /// placed, if anything.
    fn begin(
        &mut self,
        origin: Origin,
        n: usize,
        delivered: Option<&RecordRanges>,
    ) -> Option<Placing> {
        let length = self.pack.length;
        if n == 0 {
            self.stats.empty_documents += 1;
            return None;
        }
        self.last_origin = Some(origin);
        let concat = self.pack.policy == PackPolicy::Concat;
        let doc_tokens = self.pack.packed_tokens(n);
        let whole = delivered.is_none_or(|d| d.ranges().is_empty());
        if whole {
            self.stats.documents += 1;
            if !concat && n > length {
                match self.pack.long_docs {
                    LongDocs::Split => self.stats.long_split += 1,
                    LongDocs::Truncate => {
                        self.stats.long_truncated += 1;
                        self.stats.tokens_left_out += (n - length) as u64;
                    }
                    LongDocs::Drop => {
                        self.stats.long_dropped += 1;
                        self.stats.tokens_left_out += n as u64;
                    }
                }
            }
        }
        if doc_tokens == 0 {
            return None;
        }
        let placing = |at, end, rest| Placing {
            origin,
            len: n,
            doc_tokens,
            whole,
            at,
            end,
            rest,
            counted: false,
            cut: false,
        };
        // The ranges still to deliver: the whole document but on a resume
        // (no allocation per document on the common path).
        let Some(d) = delivered.filter(|d| !d.ranges().is_empty()) else {
            return Some(placing(0, doc_tokens, Vec::new()));
        };
        let mut left = Vec::new();
        let mut at = 0;
        for &[s, e] in d.ranges().iter() {
            let (s, e) = ((s as usize).min(doc_tokens), (e as usize).min(doc_tokens));
            if s > at {
                left.push((at, s));
            }
            at = at.max(e);
        }
        if at < doc_tokens {
            left.push((at, doc_tokens));
        }
        left.reverse();
        let (at, end) = left.pop()?;
        Some(placing(at, end, left))
    }

    /// Place the next piece of `p` (of `tokens`): at most a row's tokens —
    /// up to the next multiple of `L` from the document's start (best-fit,
    /// first-fit: the cut points do not depend on what was delivered), or
    /// up to where the row being filled ends (concat, or filling in
    /// order). True once all of `p` is placed.
    fn step(
        &mut self,
        p: &mut Placing,
        tokens: &Tokens<'_>,
    ) -> std::result::Result<bool, BadToken> {
        let length = self.pack.length;
        let (at, e) = (p.at, p.end);
        let mut buf = std::mem::take(&mut self.scratch);
        if self.pack.policy == PackPolicy::Concat || self.fills_in_order() {
            let n = (length - self.filling.tokens.len()).min(e - at);
            let piece = tokens.piece(at, at + n, &mut buf)?;
            if !p.counted {
                self.placed += (e - at) as u64;
                p.counted = true;
            }
            self.filling.tokens.extend_from_slice(piece);
            self.filling.segments.push(Segment {
                row: 0,
                origin: p.origin,
                start: at as u64,
                len: n as u32,
                doc_tokens: p.doc_tokens as u64,
            });
            p.at += n;
            if self.filling.tokens.len() == length {
                let next = self.fill_queue.pop_front().unwrap_or_default();
                let row = std::mem::replace(&mut self.filling, next);
                self.emit(row);
                p.cut |= p.at < e;
            }
            if p.at == e && p.cut && p.whole && p.doc_tokens <= length {
                self.stats.documents_cut += 1;
            }
        } else {
            let piece_end = ((at / length + 1) * length).min(e);
            let piece = tokens.piece(at, piece_end, &mut buf)?;
            self.placed += (piece_end - at) as u64;
            let seg = Segment {
                row: 0,
                origin: p.origin,
                start: at as u64,
                len: (piece_end - at) as u32,
                doc_tokens: p.doc_tokens as u64,
            };
            self.place(seg, piece);
            p.at = piece_end;
        }
        self.scratch = buf;
        if p.at < p.end {
            return Ok(false);
        }
        match p.rest.pop() {
            Some((s, e)) => {
                (p.at, p.end, p.counted, p.cut) = (s, e, false, false);
                Ok(false)
            }
            None => Ok(true),
        }
    }

    /// Equalize `Pad`: true once best-fit or first-fit must fill their
    /// open rows in order to stay within the quota. The rows the pass
    /// surely needs from here — rows made, open rows, and new rows for
    /// the tokens to come (the piece about to be placed among them)
    /// beyond the open rows' room — change by at most
    /// [`PAD_SLACK_ROWS`] with one piece placed (a new row, and one closed
    /// to keep the window), so packing whole goes on while that much is
    /// left; filling in order then makes exactly that many.
    fn fills_in_order(&mut self) -> bool {
        if self.in_order {
            return true;
        }
        let Some(q) = self.quota.filter(|q| q.how == Equalize::Pad) else {
            return false;
        };
        let to_come = q.tokens.saturating_sub(self.placed);
        let needed = self.kept_rows
            + self.open.len() as u64
            + to_come
                .saturating_sub(self.open_room)
                .div_ceil(self.pack.length as u64);
        if needed + PAD_SLACK_ROWS <= q.rows {
            return false;
        }
        log::debug!(
            "equalize pad: {} rows of {} made or open and {to_come} tokens to come: the open rows are filled in order from here",
            self.kept_rows + self.open.len() as u64,
            q.rows
        );
        let mut rows: VecDeque<PackedRow> = std::mem::take(&mut self.open)
            .into_values()
            .map(|o| o.row)
            .collect();
        self.by_room.clear();
        self.held = 0;
        self.open_room = 0;
        self.filling = rows.pop_front().unwrap_or_default();
        self.fill_queue = rows;
        self.in_order = true;
        true
    }

    /// Best-fit / first-fit: put one piece (at most a row) into a row.
    fn place(&mut self, seg: Segment, tokens: &[i32]) {
        let length = self.pack.length;
        let n = tokens.len();
        if n == length {
            self.emit(PackedRow {
                tokens: tokens.to_vec(),
                segments: vec![seg],
            });
            return;
        }
        let target = match self.pack.policy {
            PackPolicy::BestFit => self.by_room.range((n, 0)..).next().map(|&(_, id)| id),
            _ => self
                .open
                .iter()
                .find(|(_, o)| o.room >= n)
                .map(|(&id, _)| id),
        };
        let id = match target {
            Some(id) => id,
            None => {
                let id = self.next_id;
                self.next_id += 1;
                self.open.insert(
                    id,
                    Open {
                        row: PackedRow {
                            tokens: Vec::with_capacity(length),
                            segments: Vec::new(),
                        },
                        room: length,
                    },
                );
                self.by_room.insert((length, id));
                self.open_room += length as u64;
                id
            }
        };
        let open = self.open.get_mut(&id).expect("an open row");
        self.by_room.remove(&(open.room, id));
        open.row.tokens.extend_from_slice(tokens);
        open.row.segments.push(seg);
        open.room -= n;
        self.open_room -= n as u64;
        self.held += 1;
        if open.room == 0 {
            self.close(id);
        } else {
            self.by_room.insert((open.room, id));
        }
        // The window is full: the fullest rows go (the oldest first among equals).
        while self.held > self.pack.window {
            let Some(&(_, id)) = self.by_room.iter().next() else {
                break;
            };
            self.close(id);
        }
    }

    /// Open row `id` is made.
    fn close(&mut self, id: u64) {
        let open = self.open.remove(&id).expect("an open row");
        self.by_room.remove(&(open.room, id));
        self.open_room -= open.room as u64;
        self.held -= open.row.segments.len();
        self.emit(open.row);
    }

    fn emit(&mut self, row: PackedRow) {
        let n = row.tokens.len();
        if let Some(q) = self.quota.filter(|q| self.kept_rows >= q.rows) {
            if q.how == Equalize::Drop {
                self.stats.equalize_dropped_rows += 1;
                self.stats.equalize_dropped_tokens += n as u64;
                return;
            }
            self.quota_error.get_or_insert(QuotaError::Over {
                rows: q.rows,
                counted: q.tokens,
                packed: self.placed,
            });
        }
        self.kept_rows += 1;
        self.stats.rows += 1;
        self.stats.tokens += n as u64;
        self.stats.padding_tokens += (self.pack.length - n) as u64;
        self.made.push_back(row);
    }

    /// The next batch of `B` made rows, if there are that many.
    pub fn pop(&mut self) -> Option<PackedRows> {
        if self.made.len() < self.rows_per_batch {
            return None;
        }
        let rows: Vec<PackedRow> = self.made.drain(..self.rows_per_batch).collect();
        Some(self.batch_of(rows))
    }

    /// `rows` as a batch: its padding rows (the last ones) counted.
    fn batch_of(&self, rows: Vec<PackedRow>) -> PackedRows {
        let padding_rows = rows.iter().filter(|r| r.segments.is_empty()).count();
        PackedRows {
            rows,
            padding_rows,
            origin_hint: self.last_origin,
        }
    }

    /// A padding row (no token) into the made rows.
    fn pad_row(&mut self) {
        self.stats.rows += 1;
        self.stats.padding_tokens += self.pack.length as u64;
        self.made.push_back(PackedRow::default());
    }

    /// The end of a pass: every open row made (oldest first), padding
    /// rows up to a `Pad` quota, and the made rows filled up with padding
    /// rows to a multiple of `B` — its batches to [`pop`](Self::pop), the
    /// last one holding the padding rows. The packer is empty of open
    /// rows after, its quota unset (its error, if any, kept). A document
    /// [`start`](Self::start)ed and not all placed stays (logged): its
    /// rest is placed by the next [`next_batch`](Self::next_batch) calls.
    pub fn end_pass(&mut self) {
        if let Some(p) = &self.placing {
            log::warn!(
                "packing: a pass ends while document {} of {} is being placed: its rest goes on after",
                p.origin.record,
                p.origin.source.name()
            );
        }
        let ids: Vec<u64> = self.open.keys().copied().collect();
        for id in ids {
            self.close(id);
        }
        if !self.filling.tokens.is_empty() {
            let row = std::mem::take(&mut self.filling);
            self.emit(row);
        }
        while let Some(row) = self.fill_queue.pop_front() {
            self.emit(row);
        }
        if let Some(q) = self.quota.filter(|q| q.tokens != self.placed) {
            self.quota_error.get_or_insert(QuotaError::Tokens {
                counted: q.tokens,
                packed: self.placed,
            });
        }
        if let Some(q) = self.quota.filter(|q| self.kept_rows < q.rows) {
            if q.how == Equalize::Pad {
                for _ in self.kept_rows..q.rows {
                    self.stats.equalize_padding_rows += 1;
                    self.pad_row();
                }
                self.kept_rows = q.rows;
            } else {
                self.quota_error.get_or_insert(QuotaError::Under {
                    rows: q.rows,
                    made: self.kept_rows,
                    counted: q.tokens,
                    packed: self.placed,
                });
            }
        }
        let last = self.made.len() % self.rows_per_batch;
        if last > 0 {
            for _ in last..self.rows_per_batch {
                self.pad_row();
            }
        }
        self.quota = None;
        self.placed = 0;
        self.kept_rows = 0;
        self.in_order = false;
    }

    /// The end of a pass ([`end_pass`](Self::end_pass)) and the batches of
    /// every made row, the last one filled up with padding rows to `B`.
    pub fn finish(&mut self) -> Vec<PackedRows> {
        self.end_pass();
        let mut out = Vec::new();
        while let Some(b) = self.pop() {
            out.push(b);
        }
        out
    }
}

/// The token ranges delivered of each partly delivered document, shared
/// with a resumed packer.
pub type Delivered = Arc<BTreeMap<Origin, RecordRanges>>;

#[cfg(test)]
mod tests;
