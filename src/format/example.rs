//! `tf.train.Example`: decoding (a generic prost path and a schema-driven
//! fast path) and deterministic encoding.
//!
//! This module owns everything about the protobuf payload of a TFRecord
//! record (the framing is in [`super::tfrecord`]):
//!
//! - [`proto`]: the messages of `tensorflow/core/example/{example,feature}.proto`,
//!   derived with `prost` by hand (no `protoc`).
//! - [`decode_record`]: the generic path — payload → [`Record`] (features
//!   sorted by name; `bytes_list` → [`Values::Bytes`], `float_list` →
//!   [`Values::F32`], `int64_list` → [`Values::I64`], each a tensor of shape
//!   `[len]`). Used by `cat`, `inspect` and schema inference.
//! - [`ExampleDecoder`]: the hot path — walks the protobuf wire format against
//!   a [`Schema`] and writes values straight into a [`Chunk`]'s columns, with
//!   no allocation per record. It gives exactly what [`decode_record`] followed
//!   by [`Chunk::push_record`] gives: on anything unusual (a malformed
//!   message, a missing feature, a kind or shape mismatch, an out-of-range
//!   value, protobuf groups, a map entry with repeated key or value fields) it
//!   rolls the row back and lets the generic path decide, so errors are the
//!   generic path's errors, word for word. Reading a regular file, it does
//!   not copy a `u8` or `bytes` field that is one byte string of at least
//!   32 KiB: the row refers to those bytes in the file
//!   ([`crate::Column::file_row`]).
//! - [`encode_example`], [`encode_instance`], [`encode_features_into`]:
//!   deterministic serialization (keys sorted, numeric lists packed — what
//!   TensorFlow's deterministic serialization writes).
//!
//! A `Feature` with no kind set (an empty `Feature` message) is treated as
//! absent, as TensorFlow's parser does: it is left out of the [`Record`].

use std::collections::HashMap;

use prost::Message;

use crate::backing::{Backed, FILE_ROW_MIN_BYTES};
use crate::chunk::Chunk;
use crate::error::{Error, Result};
use crate::provenance::{Location, Origin};
use crate::record::{Instance, Record};
use crate::schema::{DType, Schema};
use crate::values::{BytesList, Tensor, Values};

/// The `tf.train.Example` protobuf messages, as `prost` structs.
pub mod proto {
    use std::collections::HashMap;

    /// `tf.train.Example`: a map of named features.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Example {
        /// The features (field 1).
        #[prost(message, optional, tag = "1")]
        pub features: Option<Features>,
    }

    /// `tf.train.Features`: `map<string, Feature> feature = 1`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Features {
        /// Feature name → feature.
        #[prost(map = "string, message", tag = "1")]
        pub feature: HashMap<String, Feature>,
    }

    /// `tf.train.Feature`: one list of bytes, floats or int64s.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Feature {
        /// The list; `None` when no kind is set.
        #[prost(oneof = "feature::Kind", tags = "1, 2, 3")]
        pub kind: Option<feature::Kind>,
    }

    /// The `oneof kind` of [`Feature`].
    pub mod feature {
        /// Which list a [`Feature`](super::Feature) holds.
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum Kind {
            /// `bytes_list = 1`.
            #[prost(message, tag = "1")]
            BytesList(super::BytesList),
            /// `float_list = 2`.
            #[prost(message, tag = "2")]
            FloatList(super::FloatList),
            /// `int64_list = 3`.
            #[prost(message, tag = "3")]
            Int64List(super::Int64List),
        }
    }

    /// `tf.train.BytesList`: `repeated bytes value = 1`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct BytesList {
        /// The byte strings.
        #[prost(bytes = "vec", repeated, tag = "1")]
        pub value: Vec<Vec<u8>>,
    }

    /// `tf.train.FloatList`: `repeated float value = 1 [packed = true]`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct FloatList {
        /// The floats.
        #[prost(float, repeated, packed = "true", tag = "1")]
        pub value: Vec<f32>,
    }

    /// `tf.train.Int64List`: `repeated int64 value = 1 [packed = true]`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Int64List {
        /// The integers.
        #[prost(int64, repeated, packed = "true", tag = "1")]
        pub value: Vec<i64>,
    }
}

// ---------------------------------------------------------------------------
// Generic path
// ---------------------------------------------------------------------------

/// Decode a payload into the prost [`proto::Example`].
pub fn decode_example(payload: &[u8]) -> std::result::Result<proto::Example, prost::DecodeError> {
    proto::Example::decode(payload)
}

/// Decode a `tf.train.Example` payload into a schema-free [`Record`] at
/// `location` (the generic path). Features are sorted by name; a feature with
/// no kind set is left out.
///
/// An undecodable payload is an [`Error::Corrupt`] whose text starts with
/// `undecodable tf.train.Example:`.
///
/// ```
/// use feedline::format::example::{decode_record, encode_example};
/// use feedline::{Location, Record, SourceId, Tensor, Values};
/// let loc = Location::new(SourceId::intern("mem"), 0, None);
/// let rec = Record {
///     fields: vec![("x".into(), Tensor::vector(Values::F32(vec![1.0, 2.0])))],
///     location: loc.clone(),
/// };
/// let back = decode_record(&encode_example(&rec), loc).unwrap();
/// assert_eq!(back, rec);
/// ```
pub fn decode_record(payload: &[u8], location: Location) -> Result<Record> {
    let example = decode_example(payload).map_err(|e| {
        Error::corrupt(
            location.clone(),
            format!("undecodable tf.train.Example: {e}"),
        )
    })?;
    Ok(example_to_record(example, location))
}

/// Turn a decoded [`proto::Example`] into a [`Record`] (features sorted by
/// name, kind-less features left out).
pub fn example_to_record(example: proto::Example, location: Location) -> Record {
    use proto::feature::Kind;
    let mut fields: Vec<(String, Tensor)> = example
        .features
        .map(|f| f.feature)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(name, feature)| {
            let values = match feature.kind? {
                Kind::BytesList(b) => Values::Bytes(b.value.iter().map(|v| v.as_slice()).collect()),
                Kind::FloatList(f) => Values::F32(f.value),
                Kind::Int64List(i) => Values::I64(i.value),
            };
            Some((name, Tensor::vector(values)))
        })
        .collect();
    fields.sort_by(|a, b| a.0.cmp(&b.0));
    Record { fields, location }
}

// ---------------------------------------------------------------------------
// Fast path
// ---------------------------------------------------------------------------

/// The fast path gave up on a record: the generic path decides.
struct Bail;

type Fast<T> = std::result::Result<T, Bail>;

const WT_VARINT: u8 = 0;
const WT_I64: u8 = 1;
const WT_LEN: u8 = 2;
const WT_I32: u8 = 5;

/// A cursor over protobuf wire bytes. Every malformation is a [`Bail`].
struct Wire<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Wire<'a> {
    #[inline(always)]
    fn new(buf: &'a [u8]) -> Self {
        Wire { buf, pos: 0 }
    }

    #[inline(always)]
    fn more(&self) -> bool {
        self.pos < self.buf.len()
    }

    /// A varint, with prost's rules (at most 10 bytes, no u64 overflow).
    #[inline(always)]
    fn varint(&mut self) -> Fast<u64> {
        match self.buf.get(self.pos..self.pos + 2) {
            Some(&[b, _]) if b < 0x80 => {
                self.pos += 1;
                Ok(b as u64)
            }
            Some(&[b0, b1]) if b1 < 0x80 => {
                self.pos += 2;
                Ok((b0 & 0x7f) as u64 | (b1 as u64) << 7)
            }
            _ => self.varint_slow(),
        }
    }

    #[inline(never)]
    fn varint_slow(&mut self) -> Fast<u64> {
        let mut value = 0u64;
        for i in 0..10 {
            let b = *self.buf.get(self.pos + i).ok_or(Bail)?;
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                if i == 9 && b >= 2 {
                    return Err(Bail);
                }
                self.pos += i + 1;
                return Ok(value);
            }
        }
        Err(Bail)
    }

    /// A field key: (tag, wire type), with prost's validity rules.
    #[inline(always)]
    fn key(&mut self) -> Fast<(u32, u8)> {
        let k = self.varint()?;
        if k > u64::from(u32::MAX) {
            return Err(Bail);
        }
        let wt = (k & 7) as u8;
        let tag = (k >> 3) as u32;
        if tag == 0 || wt > 5 {
            return Err(Bail);
        }
        Ok((tag, wt))
    }

    /// A length-delimited body.
    #[inline(always)]
    fn bytes(&mut self) -> Fast<&'a [u8]> {
        let len = self.varint()?;
        let left = (self.buf.len() - self.pos) as u64;
        if len > left {
            return Err(Bail);
        }
        let start = self.pos;
        self.pos += len as usize;
        Ok(&self.buf[start..self.pos])
    }

    #[inline(always)]
    fn fixed<const N: usize>(&mut self) -> Fast<[u8; N]> {
        let end = self.pos.checked_add(N).ok_or(Bail)?;
        let b: [u8; N] = self
            .buf
            .get(self.pos..end)
            .ok_or(Bail)?
            .try_into()
            .map_err(|_| Bail)?;
        self.pos = end;
        Ok(b)
    }

    /// Skip an unknown field (groups are left to the generic path).
    fn skip(&mut self, wt: u8) -> Fast<()> {
        match wt {
            WT_VARINT => self.varint().map(drop),
            WT_I64 => self.fixed::<8>().map(drop),
            WT_LEN => self.bytes().map(drop),
            WT_I32 => self.fixed::<4>().map(drop),
            _ => Err(Bail),
        }
    }
}

/// The three kinds of a `tf.train.Feature`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Bytes = 0,
    Float = 1,
    Int64 = 2,
}

impl Kind {
    fn from_tag(tag: u32) -> Option<Kind> {
        match tag {
            1 => Some(Kind::Bytes),
            2 => Some(Kind::Float),
            3 => Some(Kind::Int64),
            _ => None,
        }
    }
}

/// Feature name → schema field index, without allocating per lookup.
enum Lookup {
    /// Few fields: compare names in turn.
    Linear(Vec<(Box<[u8]>, usize)>),
    /// Many fields: hash.
    Map(HashMap<Box<[u8]>, usize>),
}

impl Lookup {
    fn new(schema: &Schema) -> Self {
        let names = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name.as_bytes().to_vec().into_boxed_slice(), i));
        if schema.len() <= 8 {
            Lookup::Linear(names.collect())
        } else {
            Lookup::Map(names.collect())
        }
    }

    #[inline(always)]
    fn get(&self, key: &[u8]) -> Option<usize> {
        match self {
            // Names are short: a byte loop beats a call to memcmp.
            Lookup::Linear(v) => v
                .iter()
                .find(|(n, _)| n.len() == key.len() && n.iter().zip(key).all(|(a, b)| a == b))
                .map(|(_, i)| *i),
            Lookup::Map(m) => m.get(key).copied(),
        }
    }
}

/// The field's feature was not seen (or had no kind).
const ABSENT: u8 = 0;
/// The field's feature was decoded into the column.
const PRESENT: u8 = 1;
/// The field's (last) feature cannot fill it: a kind that does not convert,
/// or a value out of range. The generic path reports it.
const UNUSABLE: u8 = 2;

/// Decodes `tf.train.Example` payloads against a schema straight into a
/// [`Chunk`] (the hot path), falling back to the generic path for anything
/// unusual so that results and errors are the same as
/// [`decode_record`] + [`Chunk::push_record`].
///
/// ```
/// use feedline::format::example::{encode_example, ExampleDecoder};
/// use feedline::{Chunk, DType, Location, Record, Schema, SourceId, Tensor, Values};
/// let schema = Schema::builder().field("x", DType::F32, [2]).build().unwrap();
/// let loc = Location::new(SourceId::intern("mem"), 0, None);
/// let rec = Record {
///     fields: vec![("x".into(), Tensor::vector(Values::F32(vec![1.0, 2.0])))],
///     location: loc.clone(),
/// };
/// let payload = encode_example(&rec);
/// let mut dec = ExampleDecoder::new(&schema);
/// let mut chunk = Chunk::new(&schema);
/// dec.decode_into(&payload, &mut chunk, &loc).unwrap();
/// assert_eq!(chunk.columns()[0].values, Values::F32(vec![1.0, 2.0]));
/// assert_eq!(dec.fallbacks(), 0);
/// ```
pub struct ExampleDecoder {
    schema: Schema,
    lookup: Lookup,
    dtypes: Vec<DType>,
    ragged: Vec<bool>,
    /// `u8` and `bytes` fields: a large single-value `bytes_list` may be
    /// left in its file instead of copied.
    in_file: Vec<bool>,
    /// `accepts[i][kind]`: may a feature of that kind fill field `i`?
    accepts: Vec<[bool; 3]>,
    /// Per record: [`ABSENT`], [`PRESENT`] or [`UNUSABLE`] for each field.
    state: Vec<u8>,
    /// Per record: where the row starts in each column's own values.
    row_start: Vec<usize>,
    fallbacks: u64,
}

impl std::fmt::Debug for ExampleDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExampleDecoder")
            .field("schema", &self.schema.to_string())
            .field("fallbacks", &self.fallbacks)
            .finish()
    }
}

impl ExampleDecoder {
    /// A decoder for `schema` (precomputes the name lookup and conversions).
    pub fn new(schema: &Schema) -> Self {
        let fields = schema.fields();
        let accepts = fields
            .iter()
            .map(|f| {
                [DType::Bytes, DType::F32, DType::I64]
                    .map(|k| Values::new(k).convertible_to(f.dtype))
            })
            .collect();
        ExampleDecoder {
            schema: schema.clone(),
            lookup: Lookup::new(schema),
            dtypes: fields.iter().map(|f| f.dtype).collect(),
            ragged: fields.iter().map(|f| f.is_ragged()).collect(),
            in_file: fields
                .iter()
                .map(|f| matches!(f.dtype, DType::U8 | DType::Bytes))
                .collect(),
            accepts,
            state: vec![ABSENT; fields.len()],
            row_start: vec![0; fields.len()],
            fallbacks: 0,
        }
    }

    /// The schema it decodes for.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// How many records the fast path handed to the generic path so far
    /// (malformed or non-conforming ones, or unusual encodings).
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks
    }

    /// Decode one payload and append it as a row of `chunk` (whose schema must
    /// be this decoder's), with origin `location`'s source and record.
    /// On `Err` nothing is appended; the error is exactly the one
    /// [`decode_record`] + [`Chunk::push_record`] would give.
    ///
    /// # Panics
    /// If `chunk`'s schema has a different number of fields.
    #[inline]
    pub fn decode_into(
        &mut self,
        payload: &[u8],
        chunk: &mut Chunk,
        location: &Location,
    ) -> Result<()> {
        self.decode_into_backed(payload, chunk, location, None)
    }

    /// [`decode_into`](Self::decode_into) of a payload read from a file
    /// ([`Backed`] says where it is): a `u8` or `bytes` field filled by one
    /// byte string of at least [`FILE_ROW_MIN_BYTES`] refers to those bytes
    /// of the file instead of copying them (the chunk keeps the file open).
    /// Results and errors are the same.
    #[inline]
    pub(crate) fn decode_into_backed(
        &mut self,
        payload: &[u8],
        chunk: &mut Chunk,
        location: &Location,
        backing: Option<Backed<'_>>,
    ) -> Result<()> {
        assert_eq!(
            chunk.schema().len(),
            self.schema.len(),
            "ExampleDecoder used with a chunk of another schema"
        );
        let origin = Origin::new(location.source, location.record);
        if self.write_row(payload, chunk, backing) && chunk.commit_row(origin).is_ok() {
            return Ok(());
        }
        chunk.rollback_row();
        self.fallback(payload, chunk, location)
    }

    /// The fast walk alone: true if it wrote the whole row (left
    /// uncommitted, for [`Chunk::commit_row`]); false leaves a partial row
    /// to roll back and decode with [`fallback`](Self::fallback).
    #[inline]
    pub(crate) fn write_row(
        &mut self,
        payload: &[u8],
        chunk: &mut Chunk,
        backing: Option<Backed<'_>>,
    ) -> bool {
        self.fast(payload, chunk, backing).is_ok()
    }

    /// The generic decode, for a payload the fast walk gave up on (the row
    /// rolled back): the row, or the error that names what is wrong.
    #[cold]
    pub(crate) fn fallback(
        &mut self,
        payload: &[u8],
        chunk: &mut Chunk,
        location: &Location,
    ) -> Result<()> {
        self.fallbacks += 1;
        let record = decode_record(payload, location.clone())?;
        chunk.push_record(&record)
    }

    /// The fast walk: writes the row's values; `Err(Bail)` leaves a partial
    /// row for the caller to roll back.
    #[inline]
    fn fast(&mut self, payload: &[u8], chunk: &mut Chunk, backing: Option<Backed<'_>>) -> Fast<()> {
        for i in 0..self.dtypes.len() {
            chunk.rollback_field(i);
            self.row_start[i] = chunk.committed_len(i);
            self.state[i] = ABSENT;
        }
        let mut w = Wire::new(payload);
        while w.more() {
            match w.key()? {
                (1, WT_LEN) => self.features(w.bytes()?, chunk, backing)?,
                (1, _) => return Err(Bail),
                (_, wt) => w.skip(wt)?,
            }
        }
        for i in 0..self.dtypes.len() {
            match self.state[i] {
                PRESENT => {}
                ABSENT if self.ragged[i] => {}
                _ => return Err(Bail),
            }
        }
        Ok(())
    }

    #[inline]
    fn features(&mut self, buf: &[u8], chunk: &mut Chunk, backing: Option<Backed<'_>>) -> Fast<()> {
        let mut w = Wire::new(buf);
        while w.more() {
            match w.key()? {
                (1, WT_LEN) => self.entry(w.bytes()?, chunk, backing)?,
                (1, _) => return Err(Bail),
                (_, wt) => w.skip(wt)?,
            }
        }
        Ok(())
    }

    /// One map entry `{key = 1: string, value = 2: Feature}`.
    #[inline]
    fn entry(&mut self, buf: &[u8], chunk: &mut Chunk, backing: Option<Backed<'_>>) -> Fast<()> {
        let mut w = Wire::new(buf);
        let mut key: Option<&[u8]> = None;
        let mut value: Option<&[u8]> = None;
        while w.more() {
            match w.key()? {
                (1, WT_LEN) if key.is_none() => key = Some(w.bytes()?),
                (2, WT_LEN) if value.is_none() => value = Some(w.bytes()?),
                // Repeated key/value fields in one entry (merge rules) or a
                // wrong wire type: the generic path decides.
                (1 | 2, _) => return Err(Bail),
                (_, wt) => w.skip(wt)?,
            }
        }
        let key = key.unwrap_or(b"");
        let value = value.unwrap_or(b"");
        match self.lookup.get(key) {
            Some(i) => self.feature(i, value, chunk, backing),
            None => {
                // Not in the schema: still validate it as prost would.
                if std::str::from_utf8(key).is_err() {
                    return Err(Bail);
                }
                validate_feature(value)
            }
        }
    }

    /// A `Feature` for field `i`: a later entry for the same key replaces an
    /// earlier one; within one `Feature`, a later list of another kind
    /// replaces, one of the same kind appends (protobuf merge rules).
    #[inline]
    fn feature(
        &mut self,
        i: usize,
        buf: &[u8],
        chunk: &mut Chunk,
        backing: Option<Backed<'_>>,
    ) -> Fast<()> {
        match backing {
            Some(b) if self.in_file[i] => self.feature_backed(i, buf, chunk, b),
            _ => self.feature_owned(i, buf, chunk),
        }
    }

    /// [`feature`](Self::feature) into the column's own values.
    #[inline]
    fn feature_owned(&mut self, i: usize, buf: &[u8], chunk: &mut Chunk) -> Fast<()> {
        let start = self.row_start[i];
        let values = chunk.values_mut(i);
        values.truncate(start);
        self.state[i] = walk_feature(buf, &self.accepts[i], |kind, list, replace| {
            if replace {
                values.truncate(start);
            }
            append_list(kind, list, values)
        })?;
        Ok(())
    }

    /// [`feature`](Self::feature) of a `u8` or `bytes` field from a payload
    /// in `backing`: one large byte string is referred to, not copied.
    #[inline(never)]
    fn feature_backed(
        &mut self,
        i: usize,
        buf: &[u8],
        chunk: &mut Chunk,
        backed: Backed<'_>,
    ) -> Fast<()> {
        chunk.rollback_field(i);
        // The row's bytes and where they are in the file, while the field
        // is one large byte string there.
        let mut span: Option<(usize, &[u8])> = None;
        let state = walk_feature(buf, &self.accepts[i], |kind, list, replace| {
            if replace {
                chunk.rollback_field(i);
                span = None;
            }
            if kind == Kind::Bytes {
                if span.is_none() && chunk.committed_len(i) == chunk.columns()[i].values.len() {
                    if let Some(s) = single_value_span(list, backed) {
                        span = Some(s);
                        return Ok(true);
                    }
                }
                if let Some((_, first)) = span.take() {
                    // A second list appends to the first: copy both.
                    match chunk.values_mut(i) {
                        Values::U8(v) => v.extend_from_slice(first),
                        Values::Bytes(v) => v.push(first),
                        _ => return Err(Bail),
                    }
                }
            }
            append_list(kind, list, chunk.values_mut(i))
        })?;
        if let (Some((off, bytes)), PRESENT) = (span, state) {
            chunk.set_file_row(i, backed.backing, off, bytes);
        }
        self.state[i] = state;
        Ok(())
    }
}

/// Walk one `Feature` message's typed lists in order — what the owned and
/// the backed decoding of a field share. A list of another kind than the
/// one before replaces it: `append` is told so (`replace`) with that kind's
/// first accepted list. A kind the field cannot take, or an `Int64` list
/// out of range (`append` gives `Ok(false)`), makes the field unusable
/// unless a later kind replaces it; its lists are only validated. Returns
/// the field's state: [`ABSENT`], [`PRESENT`] or [`UNUSABLE`].
#[inline(always)]
fn walk_feature<'a>(
    buf: &'a [u8],
    accepts: &[bool; 3],
    mut append: impl FnMut(Kind, &'a [u8], bool) -> Fast<bool>,
) -> Fast<u8> {
    let mut current: Option<Kind> = None;
    let mut poisoned = false;
    let mut replace = false;
    let mut w = Wire::new(buf);
    while w.more() {
        let (tag, wt) = w.key()?;
        let Some(kind) = Kind::from_tag(tag) else {
            w.skip(wt)?;
            continue;
        };
        if wt != WT_LEN {
            return Err(Bail);
        }
        let list = w.bytes()?;
        if current != Some(kind) {
            replace = current.is_some();
            current = Some(kind);
            poisoned = !accepts[kind as usize];
        }
        if poisoned {
            validate_list(kind, list)?;
            continue;
        }
        if !append(kind, list, std::mem::take(&mut replace))? {
            validate_list(kind, list)?;
            poisoned = true;
        }
    }
    Ok(match current {
        None => ABSENT,
        Some(_) if poisoned => UNUSABLE,
        Some(_) => PRESENT,
    })
}

/// Append one typed list's values; `Ok(false)` if an `Int64` value is out
/// of the field's range.
#[inline(always)]
fn append_list(kind: Kind, list: &[u8], values: &mut Values) -> Fast<bool> {
    match kind {
        Kind::Bytes => append_bytes(list, values).map(|()| true),
        Kind::Float => append_floats(list, values).map(|()| true),
        Kind::Int64 => append_ints(list, values),
    }
}

/// If a `BytesList` body is exactly one value of at least
/// [`FILE_ROW_MIN_BYTES`]: its offset in the file, and its bytes.
/// Anything else (several values, other fields, malformed) is `None`, for
/// [`append_bytes`] to handle as usual.
#[inline]
fn single_value_span<'a>(list: &'a [u8], backed: Backed<'_>) -> Option<(usize, &'a [u8])> {
    let mut w = Wire::new(list);
    let Ok((1, WT_LEN)) = w.key() else {
        return None;
    };
    let value = w.bytes().ok()?;
    if w.more() || value.len() < FILE_ROW_MIN_BYTES {
        return None;
    }
    backed.span_of(value).map(|(off, _)| (off, value))
}

/// Check that an (unused) `Feature` message decodes: the walk of a field
/// that accepts no kind, which only validates its lists.
fn validate_feature(buf: &[u8]) -> Fast<()> {
    walk_feature(buf, &[false; 3], |_, _, _| Ok(false)).map(|_| ())
}

/// Check that an (unused) list message of `kind` decodes.
fn validate_list(kind: Kind, list: &[u8]) -> Fast<()> {
    let mut l = Wire::new(list);
    while l.more() {
        match (kind, l.key()?) {
            (Kind::Bytes, (1, WT_LEN)) => l.bytes().map(drop)?,
            (Kind::Float, (1, WT_LEN)) => {
                if l.bytes()?.len() % 4 != 0 {
                    return Err(Bail);
                }
            }
            (Kind::Float, (1, WT_I32)) => l.fixed::<4>().map(drop)?,
            (Kind::Int64, (1, WT_LEN)) => {
                let mut p = Wire::new(l.bytes()?);
                while p.more() {
                    p.varint()?;
                }
            }
            (Kind::Int64, (1, WT_VARINT)) => l.varint().map(drop)?,
            (_, (1, _)) => return Err(Bail),
            (_, (_, wt)) => l.skip(wt)?,
        }
    }
    Ok(())
}

/// Append a `BytesList` body to a Bytes or U8 column.
#[inline]
fn append_bytes(list: &[u8], values: &mut Values) -> Fast<()> {
    let mut w = Wire::new(list);
    while w.more() {
        match w.key()? {
            (1, WT_LEN) => {
                let b = w.bytes()?;
                match values {
                    Values::Bytes(out) => out.push(b),
                    Values::U8(out) => out.extend_from_slice(b),
                    _ => return Err(Bail),
                }
            }
            (1, _) => return Err(Bail),
            (_, wt) => w.skip(wt)?,
        }
    }
    Ok(())
}

/// Append a `FloatList` body (packed or not) to an F32 or F64 column.
#[inline]
fn append_floats(list: &[u8], values: &mut Values) -> Fast<()> {
    let mut w = Wire::new(list);
    while w.more() {
        match w.key()? {
            (1, WT_LEN) => {
                let packed = w.bytes()?;
                if packed.len() % 4 != 0 {
                    return Err(Bail);
                }
                let floats = packed
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
                match values {
                    Values::F32(out) => extend_f32_le(out, packed),
                    Values::F64(out) => out.extend(floats.map(f64::from)),
                    _ => return Err(Bail),
                }
            }
            (1, WT_I32) => {
                let x = f32::from_le_bytes(w.fixed::<4>()?);
                match values {
                    Values::F32(out) => out.push(x),
                    Values::F64(out) => out.push(f64::from(x)),
                    _ => return Err(Bail),
                }
            }
            (1, _) => return Err(Bail),
            (_, wt) => w.skip(wt)?,
        }
    }
    Ok(())
}

/// Append little-endian f32s (`bytes.len()` is a multiple of 4).
#[inline(always)]
fn extend_f32_le(out: &mut Vec<f32>, bytes: &[u8]) {
    let n = bytes.len() / 4;
    debug_assert_eq!(bytes.len(), 4 * n);
    #[cfg(target_endian = "little")]
    {
        out.reserve(n);
        // SAFETY: `reserve` made room for `n` more f32s past `len`; every
        // bit pattern is a valid f32, and on a little-endian target the
        // wire bytes are the in-memory representation; the source (a byte
        // slice of the payload) cannot overlap the vector's spare capacity.
        unsafe {
            let len = out.len();
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                out.as_mut_ptr().add(len).cast::<u8>(),
                4 * n,
            );
            out.set_len(len + n);
        }
    }
    #[cfg(not(target_endian = "little"))]
    out.extend(
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
    );
}

/// Push one int64 into a column of any dtype an int64 converts to; false if
/// the value does not fit.
#[inline(always)]
fn push_int(x: i64, values: &mut Values) -> bool {
    match values {
        Values::I64(out) => out.push(x),
        Values::I32(out) => match i32::try_from(x) {
            Ok(v) => out.push(v),
            Err(_) => return false,
        },
        Values::F32(out) => out.push(x as f32),
        Values::F64(out) => out.push(x as f64),
        Values::U8(out) => match u8::try_from(x) {
            Ok(v) => out.push(v),
            Err(_) => return false,
        },
        Values::Bool(out) => match x {
            0 => out.push(false),
            1 => out.push(true),
            _ => return false,
        },
        Values::Bytes(_) => return false,
    }
    true
}

/// Append an `Int64List` body (packed or not). `Ok(false)`: a value did not
/// fit the column's dtype (the list is then only partly appended).
#[inline]
fn append_ints(list: &[u8], values: &mut Values) -> Fast<bool> {
    let mut w = Wire::new(list);
    while w.more() {
        match w.key()? {
            (1, WT_LEN) => {
                let mut p = Wire::new(w.bytes()?);
                if let Values::I64(out) = values {
                    while p.more() {
                        out.push(p.varint()? as i64);
                    }
                } else {
                    while p.more() {
                        if !push_int(p.varint()? as i64, values) {
                            return Ok(false);
                        }
                    }
                }
            }
            (1, WT_VARINT) => {
                if !push_int(w.varint()? as i64, values) {
                    return Ok(false);
                }
            }
            (1, _) => return Err(Bail),
            (_, wt) => w.skip(wt)?,
        }
    }
    Ok(true)
}

// ---------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------

/// One feature's values, borrowed, for [`encode_features_into`]: how each
/// becomes a `tf.train.Feature` list.
#[derive(Clone, Copy, Debug)]
pub enum FeatureRef<'a> {
    /// A `bytes_list` of these strings.
    Bytes(&'a BytesList),
    /// A `bytes_list` of one value: these bytes (how `u8` tensors are written).
    OneBytes(&'a [u8]),
    /// A `float_list`.
    F32(&'a [f32]),
    /// A `float_list` (narrowed to f32: the Example format has no doubles).
    F64(&'a [f64]),
    /// An `int64_list`.
    I64(&'a [i64]),
    /// An `int64_list`.
    I32(&'a [i32]),
    /// An `int64_list` of 0 and 1.
    Bool(&'a [bool]),
}

impl<'a> FeatureRef<'a> {
    /// How values are written: bytes as a `bytes_list`, `u8` as ONE bytes
    /// value, floats as a `float_list`, integers and bools as an `int64_list`.
    pub fn from_values(values: &'a Values) -> Self {
        match values {
            Values::Bytes(b) => FeatureRef::Bytes(b),
            Values::U8(v) => FeatureRef::OneBytes(v),
            Values::F32(v) => FeatureRef::F32(v),
            Values::F64(v) => FeatureRef::F64(v),
            Values::I64(v) => FeatureRef::I64(v),
            Values::I32(v) => FeatureRef::I32(v),
            Values::Bool(v) => FeatureRef::Bool(v),
        }
    }

    /// (tag of the kind in `Feature`, encoded length of the list message).
    fn list_len(&self) -> (u8, usize) {
        fn packed(n: usize) -> usize {
            if n == 0 {
                0
            } else {
                1 + varint_len(n as u64) + n
            }
        }
        match *self {
            FeatureRef::Bytes(b) => (1, b.iter().map(|s| field_len(s.len())).sum()),
            FeatureRef::OneBytes(s) => (1, field_len(s.len())),
            FeatureRef::F32(v) => (2, packed(4 * v.len())),
            FeatureRef::F64(v) => (2, packed(4 * v.len())),
            FeatureRef::I64(v) => (3, packed(v.iter().map(|&x| varint_len(x as u64)).sum())),
            FeatureRef::I32(v) => (
                3,
                packed(v.iter().map(|&x| varint_len(x as i64 as u64)).sum()),
            ),
            FeatureRef::Bool(v) => (3, packed(v.len())),
        }
    }

    fn write_list(&self, out: &mut Vec<u8>) {
        fn packed_header(out: &mut Vec<u8>, n: usize) -> bool {
            if n == 0 {
                return false;
            }
            out.push(0x0a);
            put_varint(out, n as u64);
            true
        }
        match *self {
            FeatureRef::Bytes(b) => {
                for s in b.iter() {
                    put_bytes_field(out, 0x0a, s);
                }
            }
            FeatureRef::OneBytes(s) => put_bytes_field(out, 0x0a, s),
            FeatureRef::F32(v) => {
                if packed_header(out, 4 * v.len()) {
                    for &x in v {
                        out.extend_from_slice(&x.to_le_bytes());
                    }
                }
            }
            FeatureRef::F64(v) => {
                if packed_header(out, 4 * v.len()) {
                    for &x in v {
                        out.extend_from_slice(&(x as f32).to_le_bytes());
                    }
                }
            }
            FeatureRef::I64(v) => {
                let n = v.iter().map(|&x| varint_len(x as u64)).sum();
                if packed_header(out, n) {
                    for &x in v {
                        put_varint(out, x as u64);
                    }
                }
            }
            FeatureRef::I32(v) => {
                let n = v.iter().map(|&x| varint_len(x as i64 as u64)).sum();
                if packed_header(out, n) {
                    for &x in v {
                        put_varint(out, x as i64 as u64);
                    }
                }
            }
            FeatureRef::Bool(v) => {
                if packed_header(out, v.len()) {
                    out.extend(v.iter().map(|&b| b as u8));
                }
            }
        }
    }
}

fn varint_len(x: u64) -> usize {
    // 1 byte per 7 bits, at least one.
    (64 - (x | 1).leading_zeros() as usize).div_ceil(7)
}

fn put_varint(out: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        out.push((x as u8) | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

/// Length of a length-delimited field with a one-byte key and `n` bytes of body.
fn field_len(n: usize) -> usize {
    1 + varint_len(n as u64) + n
}

fn put_bytes_field(out: &mut Vec<u8>, key: u8, body: &[u8]) {
    out.push(key);
    put_varint(out, body.len() as u64);
    out.extend_from_slice(body);
}

/// Append the deterministic serialization of a `tf.train.Example` holding
/// these features to `out` (no allocation beyond `out`'s growth). Features are
/// sorted by name first; numeric lists are packed, empty ones omitted — the
/// bytes TensorFlow's deterministic serialization gives for the same Example.
pub fn encode_features_into(features: &mut [(&str, FeatureRef<'_>)], out: &mut Vec<u8>) {
    features.sort_by(|a, b| a.0.cmp(b.0));
    // Sizes bottom-up: list → Feature → entry → Features.
    let entry_len = |name: &str, f: &FeatureRef<'_>| {
        let (_, list) = f.list_len();
        let feature = field_len(list);
        field_len(name.len()) + field_len(feature)
    };
    let features_len: usize = features
        .iter()
        .map(|(n, f)| field_len(entry_len(n, f)))
        .sum();
    out.reserve(field_len(features_len));
    out.push(0x0a);
    put_varint(out, features_len as u64);
    for (name, f) in features.iter() {
        let (tag, list) = f.list_len();
        let feature = field_len(list);
        out.push(0x0a);
        put_varint(out, entry_len(name, f) as u64);
        put_bytes_field(out, 0x0a, name.as_bytes());
        out.push(0x12);
        put_varint(out, feature as u64);
        out.push(tag << 3 | 2);
        put_varint(out, list as u64);
        let before = out.len();
        f.write_list(out);
        debug_assert_eq!(out.len() - before, list);
    }
}

/// The deterministic `tf.train.Example` serialization of a record: keys
/// sorted, numeric lists packed. Bytes become a `bytes_list`, `u8` values ONE
/// bytes value, f32/f64 a `float_list` (f64 narrowed), i64/i32/bool an
/// `int64_list`. Shapes are not stored (an Example is flat).
pub fn encode_example(record: &Record) -> Vec<u8> {
    let mut out = Vec::new();
    encode_example_into(record, &mut out);
    out
}

/// [`encode_example`] appending to `out`.
pub fn encode_example_into(record: &Record, out: &mut Vec<u8>) {
    let mut features: Vec<(&str, FeatureRef<'_>)> = record
        .fields
        .iter()
        .map(|(n, t)| (n.as_str(), FeatureRef::from_values(&t.values)))
        .collect();
    encode_features_into(&mut features, out);
}

/// The deterministic `tf.train.Example` serialization of an instance, with the
/// same mapping as [`encode_example`] (so a `u8` field such as an image is one
/// bytes value, which reads back into a `u8` field).
pub fn encode_instance(instance: &Instance) -> Vec<u8> {
    let mut out = Vec::new();
    encode_instance_into(instance, &mut out);
    out
}

/// [`encode_instance`] appending to `out`.
pub fn encode_instance_into(instance: &Instance, out: &mut Vec<u8>) {
    let mut features: Vec<(&str, FeatureRef<'_>)> = instance
        .schema()
        .fields()
        .iter()
        .zip(instance.values())
        .map(|(f, v)| (f.name.as_str(), FeatureRef::from_values(v)))
        .collect();
    encode_features_into(&mut features, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_len_matches_put_varint() {
        for x in [
            0u64,
            1,
            127,
            128,
            16383,
            16384,
            u32::MAX as u64,
            u64::MAX,
            (-1i64) as u64,
        ] {
            let mut v = Vec::new();
            put_varint(&mut v, x);
            assert_eq!(v.len(), varint_len(x), "{x}");
            let mut w = Wire::new(&v);
            assert_eq!(w.varint().ok(), Some(x));
        }
    }

    #[test]
    fn encoding_matches_prost() {
        use proto::*;
        let bl = BytesList {
            value: vec![b"ab".to_vec(), vec![]],
        };
        let mut bytes = crate::values::BytesList::new();
        bytes.push(b"ab");
        bytes.push(b"");
        let mut fs: Vec<(&str, FeatureRef<'_>)> = vec![
            ("z", FeatureRef::I64(&[1, -5, 300])),
            ("a", FeatureRef::F32(&[0.5, -1.0])),
            ("m", FeatureRef::Bytes(&bytes)),
            ("e", FeatureRef::I64(&[])),
        ];
        let mut ours = Vec::new();
        encode_features_into(&mut fs, &mut ours);
        let decoded = Example::decode(ours.as_slice()).unwrap();
        let map = &decoded.features.as_ref().unwrap().feature;
        assert_eq!(map.len(), 4);
        assert_eq!(
            map["z"].kind,
            Some(feature::Kind::Int64List(Int64List {
                value: vec![1, -5, 300]
            }))
        );
        assert_eq!(map["m"].kind, Some(feature::Kind::BytesList(bl)));
        assert_eq!(
            map["e"].kind,
            Some(feature::Kind::Int64List(Int64List { value: vec![] }))
        );
        // With one feature prost's encoding is deterministic: same bytes.
        for (name, f) in fs.iter() {
            let mut ours = Vec::new();
            encode_features_into(&mut [(name, *f)], &mut ours);
            let one = Example::decode(ours.as_slice()).unwrap();
            assert_eq!(one.encode_to_vec(), ours, "{name}");
        }
    }
}
