//! Instances and where they came from: typed value vectors ([`Values`]),
//! schema-free records as formats read them ([`Record`]), schema-conformed
//! single instances ([`Instance`]), and the columnar [`Chunk`] of many
//! instances that the hot path moves between stages.
//!
//! A [`Chunk`] stores each field of many instances in one vector, so decoders
//! write straight into it and collation copies each instance's values once.
//! Large `u8` / `bytes` rows read from a memory-mapped file are not even
//! copied into the chunk: they refer to the map ([`Column::mapped_row`]),
//! and cost (in [`Chunk::payload_bytes`]) what a copy would. Such a row may
//! carry its record's payload CRC, checked when its bytes are copied out
//! rather than when the record was read (see
//! [`OpenOptions::defer_checksums`](crate::format::OpenOptions::defer_checksums)):
//! every way out of the chunk ([`Column::mapped_row`], [`Chunk::row`],
//! [`Chunk::extend_rows`], collation) checks it first.

use std::collections::HashMap;
use std::fmt;
use std::mem::MaybeUninit;
use std::sync::{Arc, OnceLock, RwLock};

use crate::error::{Error, Location, Result};
use crate::schema::{check_elements, DType, Field, Schema};

/// An interned source name (a file path or a generator's name): a small
/// `Copy` id, so provenance costs 16 bytes per instance.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceId(u32);

struct Interner {
    names: Vec<Arc<str>>,
    ids: HashMap<Arc<str>, u32>,
}

fn interner() -> &'static RwLock<Interner> {
    static I: OnceLock<RwLock<Interner>> = OnceLock::new();
    I.get_or_init(|| {
        RwLock::new(Interner {
            names: Vec::new(),
            ids: HashMap::new(),
        })
    })
}

impl SourceId {
    /// The id of `name`, interning it on first use.
    pub fn intern(name: &str) -> SourceId {
        if let Some(&id) = interner().read().expect("interner lock").ids.get(name) {
            return SourceId(id);
        }
        let mut w = interner().write().expect("interner lock");
        if let Some(&id) = w.ids.get(name) {
            return SourceId(id);
        }
        let id = w.names.len() as u32;
        let name: Arc<str> = Arc::from(name);
        w.names.push(name.clone());
        w.ids.insert(name, id);
        SourceId(id)
    }

    /// The source's name.
    pub fn name(self) -> Arc<str> {
        interner().read().expect("interner lock").names[self.0 as usize].clone()
    }
}

impl fmt::Debug for SourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.name())
    }
}

impl fmt::Display for SourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// Provenance of an instance: its source and 0-based record index there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Origin {
    /// File path or generator name.
    pub source: SourceId,
    /// 0-based index of the record in its source.
    pub record: u64,
}

impl Origin {
    /// The origin of record `record` of `source`.
    pub fn new(source: SourceId, record: u64) -> Self {
        Origin { source, record }
    }

    /// As a [`Location`] without byte offset.
    pub fn location(self) -> Location {
        Location::new(self.source, self.record, None)
    }
}

/// A list of byte strings stored contiguously.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BytesList {
    data: Vec<u8>,
    ends: Vec<usize>,
}

impl BytesList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append one byte string.
    pub fn push(&mut self, bytes: &[u8]) {
        self.data.extend_from_slice(bytes);
        self.ends.push(self.data.len());
    }

    /// Number of byte strings.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`-th byte string.
    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.data[start..self.ends[i]]
    }

    /// Iterate over the byte strings.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }

    /// All bytes, concatenated.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// End offset (into [`data`](Self::data)) of each byte string.
    pub fn ends(&self) -> &[usize] {
        &self.ends
    }

    /// A list from its parts: all bytes, and the end offset of each string
    /// (non-decreasing, the last one `data.len()`; checked by the caller).
    pub(crate) fn from_parts(data: Vec<u8>, ends: Vec<usize>) -> Self {
        debug_assert!(ends.windows(2).all(|w| w[0] <= w[1]));
        debug_assert_eq!(ends.last().copied().unwrap_or(0), data.len());
        BytesList { data, ends }
    }

    /// The parts: all bytes, and the end offset of each string.
    pub(crate) fn into_parts(self) -> (Vec<u8>, Vec<usize>) {
        (self.data, self.ends)
    }

    /// Bytes of strings `start..end`.
    pub(crate) fn bytes_of(&self, start: usize, end: usize) -> &[u8] {
        if start == end {
            return &[];
        }
        let b0 = if start == 0 { 0 } else { self.ends[start - 1] };
        &self.data[b0..self.ends[end - 1]]
    }

    /// Append strings `start..end` of `other`.
    pub fn extend_range(&mut self, other: &BytesList, start: usize, end: usize) {
        if start == end {
            return;
        }
        let b0 = if start == 0 { 0 } else { other.ends[start - 1] };
        let b1 = other.ends[end - 1];
        let shift = self.data.len() as isize - b0 as isize;
        self.data.extend_from_slice(&other.data[b0..b1]);
        self.ends.extend(
            other.ends[start..end]
                .iter()
                .map(|&e| (e as isize + shift) as usize),
        );
    }

    fn truncate(&mut self, n: usize) {
        self.ends.truncate(n);
        self.data.truncate(self.ends.last().copied().unwrap_or(0));
    }

    fn clear(&mut self) {
        self.data.clear();
        self.ends.clear();
    }
}

impl<'a> FromIterator<&'a [u8]> for BytesList {
    fn from_iter<I: IntoIterator<Item = &'a [u8]>>(iter: I) -> Self {
        let mut b = BytesList::new();
        for s in iter {
            b.push(s);
        }
        b
    }
}

/// A vector of elements of one [`DType`].
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    /// f32 elements.
    F32(Vec<f32>),
    /// f64 elements.
    F64(Vec<f64>),
    /// i64 elements.
    I64(Vec<i64>),
    /// i32 elements.
    I32(Vec<i32>),
    /// u8 elements.
    U8(Vec<u8>),
    /// bool elements.
    Bool(Vec<bool>),
    /// Byte-string elements.
    Bytes(BytesList),
}

macro_rules! each_values {
    ($v:expr, $x:ident => $body:expr, $b:ident => $bytes:expr) => {
        match $v {
            Values::F32($x) => $body,
            Values::F64($x) => $body,
            Values::I64($x) => $body,
            Values::I32($x) => $body,
            Values::U8($x) => $body,
            Values::Bool($x) => $body,
            Values::Bytes($b) => $bytes,
        }
    };
}

impl Values {
    /// An empty vector of `dtype`.
    pub fn new(dtype: DType) -> Self {
        Self::with_capacity(dtype, 0)
    }

    /// An empty vector of `dtype` with room for `n` elements.
    pub fn with_capacity(dtype: DType, n: usize) -> Self {
        match dtype {
            DType::F32 => Values::F32(Vec::with_capacity(n)),
            DType::F64 => Values::F64(Vec::with_capacity(n)),
            DType::I64 => Values::I64(Vec::with_capacity(n)),
            DType::I32 => Values::I32(Vec::with_capacity(n)),
            DType::U8 => Values::U8(Vec::with_capacity(n)),
            DType::Bool => Values::Bool(Vec::with_capacity(n)),
            DType::Bytes => Values::Bytes(BytesList::new()),
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            Values::F32(_) => DType::F32,
            Values::F64(_) => DType::F64,
            Values::I64(_) => DType::I64,
            Values::I32(_) => DType::I32,
            Values::U8(_) => DType::U8,
            Values::Bool(_) => DType::Bool,
            Values::Bytes(_) => DType::Bytes,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        each_values!(self, v => v.len(), b => b.len())
    }

    /// True if there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of payload held (elements; for byte strings, their bytes).
    pub fn payload_bytes(&self) -> usize {
        match self {
            Values::Bytes(b) => b.data.len(),
            v => v.len() * v.dtype().size(),
        }
    }

    /// Remove all elements, keeping the allocation.
    pub fn clear(&mut self) {
        each_values!(self, v => v.clear(), b => b.clear())
    }

    /// Keep the first `n` elements.
    pub fn truncate(&mut self, n: usize) {
        each_values!(self, v => v.truncate(n), b => b.truncate(n))
    }

    /// Append elements `start..end` of `other`, which has the same dtype.
    ///
    /// # Panics
    /// If the dtypes differ (an internal invariant: columns keep their dtype).
    pub fn extend_range(&mut self, other: &Values, start: usize, end: usize) {
        match (self, other) {
            (Values::F32(a), Values::F32(b)) => a.extend_from_slice(&b[start..end]),
            (Values::F64(a), Values::F64(b)) => a.extend_from_slice(&b[start..end]),
            (Values::I64(a), Values::I64(b)) => a.extend_from_slice(&b[start..end]),
            (Values::I32(a), Values::I32(b)) => a.extend_from_slice(&b[start..end]),
            (Values::U8(a), Values::U8(b)) => a.extend_from_slice(&b[start..end]),
            (Values::Bool(a), Values::Bool(b)) => a.extend_from_slice(&b[start..end]),
            (Values::Bytes(a), Values::Bytes(b)) => a.extend_range(b, start, end),
            (a, b) => panic!(
                "extend_range: {} column given {} values",
                a.dtype(),
                b.dtype()
            ),
        }
    }

    /// True if values of this kind can be stored in a field of `dtype`
    /// (exactly, or by a conversion checked per element).
    pub fn convertible_to(&self, dtype: DType) -> bool {
        use DType as D;
        matches!(
            (self.dtype(), dtype),
            (a, b) if a == b
        ) || matches!(
            (self.dtype(), dtype),
            (D::F32, D::F64)
                | (D::F64, D::F32)
                | (D::I64 | D::I32, D::F32 | D::F64)
                | (D::I64, D::I32)
                | (D::I32, D::I64)
                | (D::I64 | D::I32, D::U8)
                | (D::U8, D::I64 | D::I32 | D::F32 | D::F64)
                | (D::Bool, D::I64 | D::I32 | D::U8)
                | (D::I64 | D::I32, D::Bool)
                | (D::Bytes, D::U8)
        )
    }

    /// Number of elements these values become in a field of `dtype` (byte
    /// strings decoded into `u8` count their bytes).
    pub fn converted_len(&self, dtype: DType) -> usize {
        match (self, dtype) {
            (Values::Bytes(b), DType::U8) => b.data.len(),
            (v, _) => v.len(),
        }
    }

    /// Append these values, converted, to `out`. An element that does not fit
    /// (e.g. 300 into u8) gives a description of it.
    pub fn append_converted(&self, out: &mut Values) -> std::result::Result<(), String> {
        fn ints<T: Copy + TryFrom<i64>>(
            src: impl Iterator<Item = i64>,
            dst: &mut Vec<T>,
            name: &str,
        ) -> std::result::Result<(), String> {
            for x in src {
                dst.push(T::try_from(x).map_err(|_| format!("value {x} out of range for {name}"))?);
            }
            Ok(())
        }
        match (self, out) {
            (Values::F32(s), Values::F32(d)) => d.extend_from_slice(s),
            (Values::F64(s), Values::F64(d)) => d.extend_from_slice(s),
            (Values::I64(s), Values::I64(d)) => d.extend_from_slice(s),
            (Values::I32(s), Values::I32(d)) => d.extend_from_slice(s),
            (Values::U8(s), Values::U8(d)) => d.extend_from_slice(s),
            (Values::Bool(s), Values::Bool(d)) => d.extend_from_slice(s),
            (Values::Bytes(s), Values::Bytes(d)) => d.extend_range(s, 0, s.len()),
            (Values::Bytes(s), Values::U8(d)) => d.extend_from_slice(&s.data),
            (Values::F32(s), Values::F64(d)) => d.extend(s.iter().map(|&x| x as f64)),
            (Values::F64(s), Values::F32(d)) => d.extend(s.iter().map(|&x| x as f32)),
            (Values::I64(s), Values::F32(d)) => d.extend(s.iter().map(|&x| x as f32)),
            (Values::I64(s), Values::F64(d)) => d.extend(s.iter().map(|&x| x as f64)),
            (Values::I32(s), Values::F32(d)) => d.extend(s.iter().map(|&x| x as f32)),
            (Values::I32(s), Values::F64(d)) => d.extend(s.iter().map(|&x| x as f64)),
            (Values::U8(s), Values::F32(d)) => d.extend(s.iter().map(|&x| x as f32)),
            (Values::U8(s), Values::F64(d)) => d.extend(s.iter().map(|&x| x as f64)),
            (Values::U8(s), Values::I64(d)) => d.extend(s.iter().map(|&x| x as i64)),
            (Values::U8(s), Values::I32(d)) => d.extend(s.iter().map(|&x| x as i32)),
            (Values::I32(s), Values::I64(d)) => d.extend(s.iter().map(|&x| x as i64)),
            (Values::I64(s), Values::I32(d)) => ints(s.iter().copied(), d, "i32")?,
            (Values::I64(s), Values::U8(d)) => ints(s.iter().copied(), d, "u8")?,
            (Values::I32(s), Values::U8(d)) => ints(s.iter().map(|&x| x as i64), d, "u8")?,
            (Values::Bool(s), Values::I64(d)) => d.extend(s.iter().map(|&x| x as i64)),
            (Values::Bool(s), Values::I32(d)) => d.extend(s.iter().map(|&x| x as i32)),
            (Values::Bool(s), Values::U8(d)) => d.extend(s.iter().map(|&x| x as u8)),
            (Values::I64(s), Values::Bool(d)) => {
                for &x in s {
                    match x {
                        0 => d.push(false),
                        1 => d.push(true),
                        _ => return Err(format!("value {x} is not a bool (0 or 1)")),
                    }
                }
            }
            (Values::I32(s), Values::Bool(d)) => {
                for &x in s {
                    match x {
                        0 => d.push(false),
                        1 => d.push(true),
                        _ => return Err(format!("value {x} is not a bool (0 or 1)")),
                    }
                }
            }
            (s, d) => {
                return Err(format!(
                    "{} values, which cannot become {}",
                    s.dtype(),
                    d.dtype()
                ))
            }
        }
        Ok(())
    }

    /// The f32 elements, if that is the dtype.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match self {
            Values::F32(v) => Some(v),
            _ => None,
        }
    }

    /// The i64 elements, if that is the dtype.
    pub fn as_i64(&self) -> Option<&[i64]> {
        match self {
            Values::I64(v) => Some(v),
            _ => None,
        }
    }

    /// The u8 elements, if that is the dtype.
    pub fn as_u8(&self) -> Option<&[u8]> {
        match self {
            Values::U8(v) => Some(v),
            _ => None,
        }
    }

    /// The byte strings, if that is the dtype.
    pub fn as_bytes(&self) -> Option<&BytesList> {
        match self {
            Values::Bytes(v) => Some(v),
            _ => None,
        }
    }

    /// Elements as JSON values: numbers, `true`/`false`, base64 strings for bytes.
    pub fn to_json(&self) -> Vec<serde_json::Value> {
        use base64::Engine;
        use serde_json::Value as J;
        fn num(x: f64) -> J {
            serde_json::Number::from_f64(x)
                .map(J::Number)
                .unwrap_or_else(|| {
                    J::String(if x.is_nan() {
                        "NaN".into()
                    } else if x > 0.0 {
                        "Infinity".into()
                    } else {
                        "-Infinity".into()
                    })
                })
        }
        match self {
            Values::F32(v) => v.iter().map(|&x| num(x as f64)).collect(),
            Values::F64(v) => v.iter().map(|&x| num(x)).collect(),
            Values::I64(v) => v.iter().map(|&x| J::from(x)).collect(),
            Values::I32(v) => v.iter().map(|&x| J::from(x)).collect(),
            Values::U8(v) => v.iter().map(|&x| J::from(x)).collect(),
            Values::Bool(v) => v.iter().map(|&x| J::Bool(x)).collect(),
            Values::Bytes(b) => b
                .iter()
                .map(|s| J::String(base64::engine::general_purpose::STANDARD.encode(s)))
                .collect(),
        }
    }
}

/// A value with its shape, as a format reads it (before any schema).
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// The elements, flattened in C order.
    pub values: Values,
    /// The shape; `[]` for a scalar.
    pub shape: Vec<usize>,
}

impl Tensor {
    /// A 1-D tensor of these values.
    pub fn vector(values: Values) -> Self {
        let n = values.len();
        Tensor {
            values,
            shape: vec![n],
        }
    }

    /// A scalar.
    pub fn scalar(values: Values) -> Self {
        Tensor {
            values,
            shape: vec![],
        }
    }
}

/// One record as a format reads it: named values in the file's own kinds.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Fields in the format's order (sort them for a stable view).
    pub fields: Vec<(String, Tensor)>,
    /// Where the record is.
    pub location: Location,
}

impl Record {
    /// The field named `name`.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// The record as one JSON object, keys sorted, every value an array.
    pub fn to_json(&self) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        let mut fields: Vec<&(String, Tensor)> = self.fields.iter().collect();
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, t) in fields {
            map.insert(name.clone(), serde_json::Value::Array(t.values.to_json()));
        }
        serde_json::Value::Object(map)
    }
}

/// One instance conformed to a schema: a [`Values`] per field, in schema order.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    schema: Schema,
    values: Vec<Values>,
    origin: Origin,
}

impl Instance {
    /// An instance from values in schema order, checked against the schema.
    pub fn new(schema: &Schema, values: Vec<Values>, origin: Origin) -> Result<Self> {
        if values.len() != schema.len() {
            return Err(Error::Schema(format!(
                "{}: {} values given for a schema of {} fields",
                origin.location(),
                values.len(),
                schema.len()
            )));
        }
        for (f, v) in schema.fields().iter().zip(&values) {
            if v.dtype() != f.dtype {
                return Err(field_error(
                    origin.location(),
                    f,
                    format!("{} elements of {}", v.len(), v.dtype()),
                ));
            }
            check_elements(f, v.len()).map_err(|actual| {
                field_error(origin.location(), f, format!("{actual} of {}", v.dtype()))
            })?;
        }
        Ok(Instance {
            schema: schema.clone(),
            values,
            origin,
        })
    }

    /// Conform a record to `schema`: every field must be present (ragged ones
    /// may be missing: empty), convertible and of the declared shape.
    pub fn from_record(record: &Record, schema: &Schema) -> Result<Self> {
        let mut values = Vec::with_capacity(schema.len());
        for f in schema.fields() {
            let mut out = Values::new(f.dtype);
            conform_field(record, f, &mut out)?;
            values.push(out);
        }
        Ok(Instance {
            schema: schema.clone(),
            values,
            origin: Origin::new(record.location.source, record.location.record),
        })
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Values in schema order.
    pub fn values(&self) -> &[Values] {
        &self.values
    }

    /// The values of field `name`.
    pub fn get(&self, name: &str) -> Result<&Values> {
        let i = self
            .schema
            .index_of(name)
            .ok_or_else(|| self.schema.no_such_field(name))?;
        Ok(&self.values[i])
    }

    /// Where the instance came from.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// Payload bytes.
    pub fn payload_bytes(&self) -> usize {
        self.values.iter().map(Values::payload_bytes).sum()
    }

    /// Take the values out.
    pub fn into_values(self) -> Vec<Values> {
        self.values
    }

    /// As a JSON object (keys sorted, values arrays), like `feedline cat`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        let mut order: Vec<usize> = (0..self.schema.len()).collect();
        order.sort_by(|&a, &b| {
            self.schema.fields()[a]
                .name
                .cmp(&self.schema.fields()[b].name)
        });
        for i in order {
            map.insert(
                self.schema.fields()[i].name.clone(),
                serde_json::Value::Array(self.values[i].to_json()),
            );
        }
        serde_json::Value::Object(map)
    }
}

pub(crate) fn field_error(location: Location, f: &Field, actual: String) -> Error {
    Error::Field {
        location,
        field: f.name.clone(),
        expected: f.describe(),
        actual,
    }
}

/// Append record's field `f`, converted, to `out`; check its shape.
fn conform_field(record: &Record, f: &Field, out: &mut Values) -> Result<()> {
    let before = out.len();
    match record.get(&f.name) {
        None => {
            if f.is_ragged() {
                return Ok(());
            }
            return Err(field_error(
                record.location.clone(),
                f,
                "no such field in the record".into(),
            ));
        }
        Some(t) if t.values.is_empty() => {
            // Nothing to convert: an empty value fits any dtype; only its
            // element count (0) is checked.
            check_elements(f, 0).map_err(|actual| {
                field_error(
                    record.location.clone(),
                    f,
                    format!("{actual} (shape {:?}) of {}", t.shape, t.values.dtype()),
                )
            })?;
        }
        Some(t) => {
            if !t.values.convertible_to(f.dtype) {
                return Err(field_error(
                    record.location.clone(),
                    f,
                    format!(
                        "{} {}",
                        crate::schema::shape_string(
                            &t.shape
                                .iter()
                                .map(|&d| crate::schema::Dim::Fixed(d))
                                .collect::<Vec<_>>()
                        ),
                        t.values.dtype()
                    ),
                ));
            }
            let n = t.values.converted_len(f.dtype);
            check_elements(f, n).map_err(|actual| {
                field_error(
                    record.location.clone(),
                    f,
                    format!("{actual} (shape {:?}) of {}", t.shape, t.values.dtype()),
                )
            })?;
            t.values.append_converted(out).map_err(|e| {
                out.truncate(before);
                field_error(record.location.clone(), f, e)
            })?;
        }
    }
    Ok(())
}

/// A reference to one instance of a shared [`Chunk`]: what the shuffle buffer
/// holds and hands to batching; the chunk is freed when its last row is used.
#[derive(Clone, Debug)]
pub struct RowRef {
    /// The chunk.
    pub chunk: Arc<Chunk>,
    /// The row within it.
    pub index: usize,
}

impl RowRef {
    /// Row `index` of `chunk`.
    pub fn new(chunk: Arc<Chunk>, index: usize) -> Self {
        RowRef { chunk, index }
    }

    /// The instance's origin.
    pub fn origin(&self) -> Origin {
        self.chunk.origins()[self.index]
    }
}

/// Bytes that rows of a [`Chunk`] may refer to instead of holding a copy: a
/// memory-mapped input file, shared by every chunk that has a row in it (the
/// map is unmapped when the last of them is dropped).
pub(crate) trait BackingBytes: Send + Sync {
    /// All the bytes.
    fn bytes(&self) -> &[u8];
    /// No row refers to `range` any more: its pages may leave the process's
    /// resident set (they are read again, e.g. from the page cache, if
    /// anything touches them later).
    fn release(&self, range: std::ops::Range<usize>) {
        let _ = range;
    }
    /// Copy the bytes at `off` into all of `dst` without touching them in
    /// [`bytes`](Self::bytes) — for a mapped file, by reading the file, so
    /// that its pages are never mapped into the process — or `None` if this
    /// backing cannot (the caller copies from `bytes`).
    fn read_into(&self, off: usize, dst: &mut [MaybeUninit<u8>]) -> Option<Result<()>> {
        let _ = (off, dst);
        None
    }
}

/// A shared [`BackingBytes`].
pub(crate) type Backing = Arc<dyn BackingBytes>;

/// A payload being decoded and where it lies in a [`Backing`]: either the
/// backing's own bytes or a copy of some of them (read from its file), so
/// that rows can refer to the backing by offset either way.
#[derive(Clone, Copy)]
pub(crate) struct Backed<'a> {
    pub(crate) backing: &'a Backing,
    /// Offset in the backing minus address in the payload (wrapping).
    delta: usize,
}

impl<'a> Backed<'a> {
    /// `payload` holds the backing's bytes from offset `off` on.
    pub(crate) fn new(backing: &'a Backing, payload: &[u8], off: usize) -> Self {
        Backed {
            backing,
            delta: off.wrapping_sub(payload.as_ptr() as usize),
        }
    }

    /// `payload` is a slice of the backing's own bytes.
    pub(crate) fn in_place(backing: &'a Backing, payload: &[u8]) -> Self {
        let off = payload.as_ptr() as usize - backing.bytes().as_ptr() as usize;
        Self::new(backing, payload, off)
    }

    /// Where `s`, a slice of the payload, is in the backing: (offset, len).
    pub(crate) fn span_of(&self, s: &[u8]) -> Option<(usize, usize)> {
        let off = (s.as_ptr() as usize).wrapping_add(self.delta);
        (off.checked_add(s.len())? <= self.backing.bytes().len()).then_some((off, s.len()))
    }
}

/// Rows of a `u8` column (or byte strings of a `bytes` column) that are at
/// least this long are referred to in a memory-mapped input (one copy, map →
/// batch, instead of two); shorter ones are copied into the column.
pub(crate) const MAPPED_MIN_BYTES: usize = 4096;

/// Mapped rows at least this long are copied out with
/// [`BackingBytes::read_into`] (one copy by the kernel, page cache → batch,
/// with no page of the file mapped, faulted in or released) instead of from
/// the map.
pub(crate) const READ_MIN_BYTES: usize = 32 << 10;

/// Span offset of a row whose elements are held in the column's `values`.
const OWNED: usize = usize::MAX;

/// A record's payload CRC-32C, checked when its one mapped span is copied
/// out instead of when the record was read, so that its bytes are read from
/// memory once (copy, then CRC of the copy while it is in cache). The
/// payload is `prefix ++ span ++ suffix`: the CRC state after the prefix and
/// the suffix (its bytes when short, else its CRC and length) are kept, so
/// nothing in the backing is read again but the span.
#[derive(Clone, Debug)]
pub(crate) struct DeferredCrc {
    /// CRC-32C state after the payload bytes before the span.
    prefix: u32,
    /// The payload bytes after the span.
    suffix: Suffix,
    /// The masked CRC stored in the frame.
    stored: u32,
    /// The record, for the error.
    location: Location,
}

/// Suffixes up to this long are kept as bytes (appended to the CRC, which
/// is cheap); longer ones as a CRC to combine (`crc32c_combine` costs
/// microseconds).
const INLINE_SUFFIX: usize = 40;

/// The payload bytes after a deferred span.
#[derive(Clone, Debug)]
enum Suffix {
    Bytes { bytes: [u8; INLINE_SUFFIX], len: u8 },
    Crc { crc: u32, len: usize },
}

impl DeferredCrc {
    /// A check of a payload whose bytes before the span have CRC-32C
    /// (running state) `prefix`, whose bytes after it are `suffix`, and
    /// whose frame stores the masked CRC `stored`.
    pub(crate) fn new(prefix: u32, suffix: &[u8], stored: u32, location: Location) -> Self {
        let suffix = match <u8>::try_from(suffix.len()) {
            Ok(len) if suffix.len() <= INLINE_SUFFIX => {
                let mut bytes = [0; INLINE_SUFFIX];
                bytes[..suffix.len()].copy_from_slice(suffix);
                Suffix::Bytes { bytes, len }
            }
            _ => Suffix::Crc {
                crc: crc32c::crc32c(suffix),
                len: suffix.len(),
            },
        };
        DeferredCrc {
            prefix,
            suffix,
            stored,
            location,
        }
    }

    /// Check the payload, given the span's bytes (in the map or a copy of
    /// them): the error is word for word the one reading would have given.
    pub(crate) fn verify(&self, span: &[u8]) -> Result<()> {
        let crc = crc32c::crc32c_append(self.prefix, span);
        let crc = match &self.suffix {
            Suffix::Bytes { bytes, len } => crc32c::crc32c_append(crc, &bytes[..*len as usize]),
            Suffix::Crc { crc: suffix, len } => crc32c::crc32c_combine(crc, *suffix, *len),
        };
        crate::format::tfrecord::check_payload_crc(&self.location, self.stored, crc)
    }
}

/// A row that refers to a backing, as collation copies it: its bytes and
/// the CRC check still due on them (if any).
pub(crate) struct MappedRow<'a> {
    /// The row's bytes in the backing.
    pub(crate) bytes: &'a [u8],
    backing: &'a Backing,
    /// Where `bytes` start in the backing.
    off: usize,
    check: Option<&'a DeferredCrc>,
}

impl MappedRow<'_> {
    /// Check the record's CRC on `copy`, a copy of [`bytes`](Self::bytes)
    /// (read while it is still in cache); `Ok` if no check is due.
    #[inline]
    pub(crate) fn verify_copy(&self, copy: &[u8]) -> Result<()> {
        match self.check {
            None => Ok(()),
            Some(c) => c.verify(copy),
        }
    }

    /// Copy the row into all of `dst` (its exact length), then check any
    /// CRC due on the copy. A row of at least [`READ_MIN_BYTES`] is read
    /// from the file where the backing can ([`BackingBytes::read_into`]),
    /// else copied from the map.
    ///
    /// # Panics
    ///
    /// If `dst` is not as long as the row.
    #[inline]
    pub(crate) fn copy_to(&self, dst: &mut [MaybeUninit<u8>]) -> Result<()> {
        let len = self.bytes.len();
        assert_eq!(
            dst.len(),
            len,
            "a row of the wrong length in a checked chunk"
        );
        let read = if len >= READ_MIN_BYTES {
            self.backing.read_into(self.off, dst)
        } else {
            None
        };
        match read {
            Some(r) => r?,
            // SAFETY: same lengths (asserted); `dst` is spare capacity of a
            // batch's vector, which no backing's bytes can overlap.
            None => unsafe {
                std::ptr::copy_nonoverlapping(self.bytes.as_ptr(), dst.as_mut_ptr().cast(), len)
            },
        }
        // SAFETY: all of `dst` was written just above (or an error returned).
        let copy = unsafe { std::slice::from_raw_parts(dst.as_ptr().cast::<u8>(), len) };
        self.verify_copy(copy)
    }
}

/// The rows of a `u8` or `bytes` column that refer to a [`Backing`] instead
/// of holding their bytes. Each row is either mapped — one span of the
/// backing: a `u8` row's elements, or a `bytes` row's one byte string — or
/// owned (its elements in the column's `values`, at `owned_ends`).
#[derive(Clone)]
struct MappedRows {
    backing: Backing,
    /// Per committed row: (offset, len) of its bytes in the backing; offset
    /// [`OWNED`] for an owned row.
    spans: Vec<(usize, usize)>,
    /// Per committed row: where its owned elements end in `values`.
    owned_ends: Vec<usize>,
    /// Per committed row: the CRC check due when its span is copied out.
    checks: Vec<Option<DeferredCrc>>,
    /// Bytes of the committed mapped rows.
    mapped_bytes: usize,
    /// The span of the backing the mapped rows cover (lowest start, highest end).
    lo: usize,
    hi: usize,
    /// The uncommitted row's span: (offset, len).
    pending: Option<(usize, usize)>,
    /// The uncommitted row's due check (set just before it is committed).
    pending_check: Option<DeferredCrc>,
}

impl MappedRows {
    /// Start mapping rows of a column that has `ends` (all owned so far).
    fn new(backing: Backing, ends: &[usize]) -> Self {
        MappedRows {
            backing,
            spans: vec![(OWNED, 0); ends.len()],
            owned_ends: ends.to_vec(),
            checks: vec![None; ends.len()],
            mapped_bytes: 0,
            lo: usize::MAX,
            hi: 0,
            pending: None,
            pending_check: None,
        }
    }

    fn bytes(&self, off: usize, len: usize) -> &[u8] {
        &self.backing.bytes()[off..off + len]
    }

    /// Committed row `i` if it is mapped, with its due check.
    #[inline]
    fn row(&self, i: usize) -> Option<MappedRow<'_>> {
        match self.spans[i] {
            (OWNED, _) => None,
            (off, len) => Some(MappedRow {
                bytes: self.bytes(off, len),
                backing: &self.backing,
                off,
                check: self.checks[i].as_ref(),
            }),
        }
    }
}

impl Drop for MappedRows {
    /// The rows are gone: let the pages they covered leave the resident set,
    /// so that what a chunk holds is what it costs (see [`Chunk::memory_bytes`]).
    fn drop(&mut self) {
        if self.lo < self.hi {
            self.backing.release(self.lo..self.hi);
        }
    }
}

impl fmt::Debug for MappedRows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedRows")
            .field("spans", &self.spans)
            .field("owned_ends", &self.owned_ends)
            .field("checks", &self.checks)
            .field("mapped_bytes", &self.mapped_bytes)
            .field("pending", &self.pending)
            .finish()
    }
}

/// One field of a [`Chunk`]: the values of all its instances and where each ends.
///
/// A `u8` column read from a memory-mapped file may refer to the mapped bytes
/// of its large rows instead of holding a copy ([`mapped_row`](Self::mapped_row));
/// `values` then holds only the other rows' elements, at
/// [`owned_range`](Self::owned_range). [`Chunk::row`] and collation see both
/// kinds alike.
#[derive(Clone, Debug)]
pub struct Column {
    /// The elements of all instances that are not mapped (all of them, unless
    /// [`is_mapped`](Self::is_mapped)), concatenated.
    pub values: Values,
    /// `ends[i]` is the element index where instance `i` ends, counting the
    /// elements of every instance, mapped or not.
    pub ends: Vec<usize>,
    mapped: Option<Box<MappedRows>>,
    /// Elements to reserve in `values` on the first write through
    /// [`Chunk::values_mut`] (a mapped column never needs them).
    reserve: usize,
}

impl PartialEq for Column {
    /// Same instances, element for element (wherever they are held).
    fn eq(&self, other: &Column) -> bool {
        if self.mapped.is_none() && other.mapped.is_none() {
            return self.values == other.values && self.ends == other.ends;
        }
        self.ends == other.ends
            && self.values.dtype() == other.values.dtype()
            && (0..self.ends.len())
                .all(|i| self.row_values(i, false).ok() == other.row_values(i, false).ok())
    }
}

impl Column {
    fn with_capacity(dtype: DType, elements: usize, rows: usize) -> Self {
        Column {
            values: Values::with_capacity(dtype, elements),
            ends: Vec::with_capacity(rows),
            mapped: None,
            reserve: 0,
        }
    }

    /// Element range of instance `i` (in the count of all instances' elements:
    /// its length is the instance's element count).
    #[inline]
    pub fn range(&self, i: usize) -> std::ops::Range<usize> {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        start..self.ends[i]
    }

    /// True if some rows refer to a memory-mapped input instead of being in
    /// [`values`](Self::values).
    #[inline]
    pub fn is_mapped(&self) -> bool {
        self.mapped.is_some()
    }

    /// The bytes of instance `i` if it refers to a memory-mapped input —
    /// the elements of a `u8` row, the one byte string of a `bytes` row
    /// (`Ok(None)`: its elements are `values[owned_range(i)]`).
    ///
    /// # Errors
    ///
    /// The record's payload CRC, if it was left to be checked here (see
    /// [`OpenOptions::defer_checksums`](crate::format::OpenOptions::defer_checksums)),
    /// does not match: [`Error::Corrupt`] naming the file, record and offset.
    #[inline]
    pub fn mapped_row(&self, i: usize) -> Result<Option<&[u8]>> {
        match self.mapped_row_unchecked(i) {
            None => Ok(None),
            Some(r) => {
                r.verify_copy(r.bytes)?;
                Ok(Some(r.bytes))
            }
        }
    }

    /// Instance `i`'s mapped bytes and the CRC check still due on them,
    /// for a caller that copies them and checks the copy.
    #[inline]
    pub(crate) fn mapped_row_unchecked(&self, i: usize) -> Option<MappedRow<'_>> {
        self.mapped.as_deref()?.row(i)
    }

    /// Elements a mapped span of `len` bytes stands for.
    fn span_elements(&self, len: usize) -> usize {
        match self.values {
            Values::Bytes(_) => 1,
            _ => len,
        }
    }

    /// Where instance `i`'s elements are in [`values`](Self::values) (empty for
    /// a mapped row; the same as [`range`](Self::range) when the column is not
    /// mapped).
    #[inline]
    pub fn owned_range(&self, i: usize) -> std::ops::Range<usize> {
        match self.mapped.as_deref() {
            None => self.range(i),
            Some(m) if m.spans[i].0 != OWNED => {
                let e = m.owned_ends[i];
                e..e
            }
            Some(m) => {
                let start = if i == 0 { 0 } else { m.owned_ends[i - 1] };
                start..m.owned_ends[i]
            }
        }
    }

    /// Instance `i`'s elements as owned values (a due CRC checked first if
    /// `check`).
    fn row_values(&self, i: usize, check: bool) -> Result<Values> {
        if let Some(r) = self.mapped_row_unchecked(i) {
            if check {
                r.verify_copy(r.bytes)?;
            }
            let b = r.bytes;
            return Ok(match self.values {
                Values::Bytes(_) => Values::Bytes(BytesList::from_iter([b])),
                _ => Values::U8(b.to_vec()),
            });
        }
        let r = self.owned_range(i);
        let mut v = Values::with_capacity(self.values.dtype(), r.len());
        v.extend_range(&self.values, r.start, r.end);
        Ok(v)
    }

    /// Check now every CRC due on rows `start..end`.
    fn verify_rows(&self, start: usize, end: usize) -> Result<()> {
        for i in start..end {
            self.mapped_row(i)?;
        }
        Ok(())
    }

    /// True if rows of `other` (mapped) would stay mapped when appended here.
    fn keeps_spans_of(&self, other: &Column) -> bool {
        match (self.mapped.as_deref(), other.mapped.as_deref()) {
            (_, None) => true,
            (Some(m), Some(o)) => Arc::ptr_eq(&m.backing, &o.backing),
            (None, Some(_)) => matches!(self.values.dtype(), DType::U8 | DType::Bytes),
        }
    }

    /// Elements of the committed rows in `values`.
    #[inline(always)]
    fn committed(&self) -> usize {
        match self.mapped.as_deref() {
            None => self.ends.last().copied().unwrap_or(0),
            Some(m) => m.owned_ends.last().copied().unwrap_or(0),
        }
    }

    /// Elements written for the uncommitted row.
    #[inline(always)]
    fn pending(&self) -> usize {
        match self.mapped.as_deref() {
            None => self.values.len() - self.ends.last().copied().unwrap_or(0),
            Some(m) => self.pending_mapped(m),
        }
    }

    #[cold]
    fn pending_mapped(&self, m: &MappedRows) -> usize {
        self.values.len() - m.owned_ends.last().copied().unwrap_or(0)
            + m.pending.map_or(0, |(_, len)| self.span_elements(len))
    }

    /// Close the row being written (its count already checked).
    #[inline(always)]
    fn commit(&mut self) {
        if self.mapped.is_none() {
            // Not mapped: logical and physical ends are the same.
            self.ends.push(self.values.len());
            return;
        }
        self.commit_mapped();
    }

    fn commit_mapped(&mut self) {
        self.commit_mapped_with(None);
    }

    /// Commit the row; `check` goes with its mapped span (dropped if the
    /// row is not mapped — the caller makes sure it is).
    fn commit_mapped_with(&mut self, check: Option<DeferredCrc>) {
        let end = self.ends.last().copied().unwrap_or(0) + self.pending();
        self.ends.push(end);
        if let Some(m) = self.mapped.as_deref_mut() {
            let check = check.or_else(|| m.pending_check.take());
            match m.pending.take() {
                Some((off, len)) => {
                    m.spans.push((off, len));
                    m.checks.push(check);
                    m.mapped_bytes += len;
                    m.lo = m.lo.min(off);
                    m.hi = m.hi.max(off + len);
                }
                None => {
                    m.spans.push((OWNED, 0));
                    m.checks.push(None);
                }
            }
            m.owned_ends.push(self.values.len());
        }
    }

    /// Drop what was written for the uncommitted row.
    #[inline(always)]
    fn rollback(&mut self) {
        let n = self.committed();
        if self.values.len() != n {
            self.values.truncate(n);
        }
        if let Some(m) = self.mapped.as_deref_mut() {
            m.pending = None;
            m.pending_check = None;
        }
    }

    /// Copy the uncommitted row's mapped span (if any) into `values`.
    #[cold]
    fn materialize_pending(&mut self) {
        let Column { values, mapped, .. } = self;
        if let Some(m) = mapped.as_deref_mut() {
            debug_assert!(
                m.pending_check.is_none(),
                "a due CRC is set just before the row is committed"
            );
            if let Some((off, len)) = m.pending.take() {
                match values {
                    Values::U8(v) => v.extend_from_slice(m.bytes(off, len)),
                    Values::Bytes(v) => v.push(m.bytes(off, len)),
                    other => unreachable!("a mapped {} column", other.dtype()),
                }
            }
        }
    }

    /// The owned values, for writing the uncommitted row (any mapped span of
    /// it copied in first; the deferred reservation made).
    #[inline(always)]
    fn owned_mut(&mut self) -> &mut Values {
        if self.mapped.is_none() && self.reserve == 0 {
            return &mut self.values;
        }
        self.owned_mut_slow()
    }

    #[cold]
    fn owned_mut_slow(&mut self) -> &mut Values {
        self.materialize_pending();
        if self.reserve > 0 {
            let n = std::mem::take(&mut self.reserve);
            if self.values.is_empty() {
                self.values = Values::with_capacity(self.values.dtype(), n);
            }
        }
        &mut self.values
    }

    /// Append row `i` of `other` (same dtype) as a committed row: a mapped
    /// row stays mapped (with its due check) when both refer to the same
    /// backing; otherwise it is copied, unchecked — the caller has checked
    /// it ([`verify_rows`](Self::verify_rows)).
    fn push_row_of(&mut self, other: &Column, i: usize) {
        self.rollback();
        if let Some(om) = other.mapped.as_deref() {
            let (off, len) = om.spans[i];
            if off != OWNED && self.set_pending_mapped(&om.backing, off, len) {
                self.commit_mapped_with(om.checks[i].clone());
                return;
            }
        }
        let v = self.owned_mut();
        match other.mapped_row_unchecked(i).map(|r| r.bytes) {
            Some(b) => match v {
                Values::U8(v) => v.extend_from_slice(b),
                Values::Bytes(v) => v.push(b),
                other => unreachable!("mapped rows in a {} column", other.dtype()),
            },
            None => {
                let r = other.owned_range(i);
                v.extend_range(&other.values, r.start, r.end);
            }
        }
        self.commit();
    }

    /// Make the uncommitted row (which has no owned elements) refer to
    /// `len` bytes of `backing` at `off` (a `u8` row's elements, or a
    /// `bytes` row's one byte string). False (nothing changed) if the column
    /// is of another dtype, the row has owned elements, or the column already
    /// refers to another backing.
    fn set_pending_mapped(&mut self, backing: &Backing, off: usize, len: usize) -> bool {
        if !matches!(self.values.dtype(), DType::U8 | DType::Bytes)
            || self.values.len() != self.committed()
        {
            return false;
        }
        match self.mapped.as_deref_mut() {
            Some(m) if Arc::ptr_eq(&m.backing, backing) => {
                m.pending = Some((off, len));
                true
            }
            Some(_) => false,
            None => {
                let mut m = MappedRows::new(backing.clone(), &self.ends);
                m.pending = Some((off, len));
                self.mapped = Some(Box::new(m));
                true
            }
        }
    }

    #[inline(always)]
    fn mapped_bytes(&self) -> usize {
        self.mapped
            .as_deref()
            .map_or(0, |m| m.mapped_bytes + m.pending.map_or(0, |p| p.1))
    }
}

/// Many instances of one schema stored column by column: the unit that
/// readers send on, and that the shuffle buffer and collation take rows from.
#[derive(Clone, Debug, PartialEq)]
pub struct Chunk {
    schema: Schema,
    columns: Vec<Column>,
    origins: Vec<Origin>,
}

impl Chunk {
    /// An empty chunk.
    pub fn new(schema: &Schema) -> Self {
        Self::with_capacity(schema, 0)
    }

    /// An empty chunk with room for `rows` instances.
    pub fn with_capacity(schema: &Schema, rows: usize) -> Self {
        let columns = schema
            .fields()
            .iter()
            .map(|f| Column::with_capacity(f.dtype, f.fixed_elements().unwrap_or(1) * rows, rows))
            .collect();
        Chunk {
            schema: schema.clone(),
            columns,
            origins: Vec::with_capacity(rows),
        }
    }

    /// An empty chunk with room for what a reader puts in one: `max_rows`
    /// instances or `max_bytes` of payload, whichever comes first (a
    /// 150 KB-record schema gets room for a few rows, not `max_rows`). The
    /// room of `u8` fields whose rows are large enough to be referred to in a
    /// memory-mapped input is reserved on their first write only.
    pub fn with_budget(schema: &Schema, max_rows: usize, max_bytes: usize) -> Self {
        let row: usize = schema
            .fields()
            .iter()
            .map(|f| f.fixed_elements().unwrap_or(0) * f.dtype.size())
            .sum();
        let rows = max_bytes
            .checked_div(row)
            .map_or(max_rows, |r| max_rows.min(r + 1))
            .min(1 << 16);
        let columns = schema
            .fields()
            .iter()
            .map(|f| {
                let n = f.fixed_elements().unwrap_or(1) * rows;
                if f.dtype == DType::U8 && f.fixed_elements().unwrap_or(0) >= MAPPED_MIN_BYTES {
                    let mut c = Column::with_capacity(f.dtype, 0, rows);
                    c.reserve = n;
                    c
                } else {
                    Column::with_capacity(f.dtype, n, rows)
                }
            })
            .collect();
        Chunk {
            schema: schema.clone(),
            columns,
            origins: Vec::with_capacity(rows),
        }
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Number of instances.
    pub fn len(&self) -> usize {
        self.origins.len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.origins.is_empty()
    }

    /// The columns, in schema order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// Origins of the instances.
    pub fn origins(&self) -> &[Origin] {
        &self.origins
    }

    /// Payload bytes held. A row that refers to a memory-mapped input counts
    /// its bytes as if it held a copy: the chunk keeps those pages of the map
    /// resident (they are released when the chunk is dropped), so they are
    /// what the row costs.
    #[inline]
    pub fn payload_bytes(&self) -> usize {
        self.columns
            .iter()
            .map(|c| c.values.payload_bytes() + c.mapped_bytes())
            .sum()
    }

    /// Approximate memory held, payload (mapped rows included, see
    /// [`payload_bytes`](Self::payload_bytes)) plus bookkeeping.
    pub fn memory_bytes(&self) -> usize {
        self.payload_bytes()
            + self
                .columns
                .iter()
                .map(|c| {
                    c.ends.len() * 8
                        + c.mapped.as_deref().map_or(0, |m| {
                            m.spans.len() * (24 + std::mem::size_of::<Option<DeferredCrc>>())
                        })
                })
                .sum::<usize>()
            + self.origins.len() * std::mem::size_of::<Origin>()
    }

    /// Remove all instances, keeping the allocations (mapped rows are let go).
    pub fn clear(&mut self) {
        for c in &mut self.columns {
            c.values.clear();
            c.ends.clear();
            c.mapped = None;
        }
        self.origins.clear();
    }

    /// Append an instance of the same schema.
    pub fn push_instance(&mut self, inst: &Instance) {
        for (c, v) in self.columns.iter_mut().zip(inst.values()) {
            c.rollback();
            c.owned_mut().extend_range(v, 0, v.len());
            c.commit();
        }
        self.origins.push(inst.origin());
    }

    /// Conform `record` to the schema and append it; on error nothing is appended.
    pub fn push_record(&mut self, record: &Record) -> Result<()> {
        for i in 0..self.columns.len() {
            let f = &self.schema.fields()[i];
            if let Err(e) = conform_field(record, f, self.columns[i].owned_mut()) {
                self.rollback_row();
                return Err(e);
            }
        }
        self.commit_row(Origin::new(record.location.source, record.location.record))
            .map_err(|(i, actual)| {
                field_error(record.location.clone(), &self.schema.fields()[i], actual)
            })
    }

    /// Mutable access to column `i`'s values, for decoders that write the
    /// next row straight into the chunk; finish with [`commit_row`](Self::commit_row)
    /// or undo with [`rollback_row`](Self::rollback_row).
    #[inline]
    pub fn values_mut(&mut self, i: usize) -> &mut Values {
        self.columns[i].owned_mut()
    }

    /// Elements of column `i` in its values before the uncommitted row.
    #[inline]
    pub(crate) fn committed_len(&self, i: usize) -> usize {
        self.columns[i].committed()
    }

    /// Drop what was written for the uncommitted row in column `i` only.
    #[inline]
    pub(crate) fn rollback_field(&mut self, i: usize) {
        self.columns[i].rollback();
    }

    /// Make the uncommitted row's field `i` (a `u8` or `bytes` field with
    /// nothing written for this row yet) refer to `len` bytes of `backing` at
    /// `off` instead of holding them: a `u8` row's elements, a `bytes` row's
    /// one byte string. If the column cannot (it refers to another backing),
    /// the bytes are copied in. Finish with [`commit_row`](Self::commit_row).
    pub(crate) fn set_mapped(&mut self, i: usize, backing: &Backing, off: usize, len: usize) {
        let c = &mut self.columns[i];
        if !c.set_pending_mapped(backing, off, len) {
            let bytes = &backing.bytes()[off..off + len];
            match c.owned_mut() {
                Values::U8(v) => v.extend_from_slice(bytes),
                Values::Bytes(v) => v.push(bytes),
                other => unreachable!("set_mapped on a {} field", other.dtype()),
            }
        }
    }

    /// The uncommitted row's one mapped span, as `(field, offset, len)` in
    /// its backing — `None` if no field or more than one field of the row is
    /// mapped.
    pub(crate) fn pending_mapped_span(&self) -> Option<(usize, usize, usize)> {
        let mut found = None;
        for (i, c) in self.columns.iter().enumerate() {
            if let Some((off, len)) = c.mapped.as_deref().and_then(|m| m.pending) {
                if found.is_some() {
                    return None;
                }
                found = Some((i, off, len));
            }
        }
        found
    }

    /// Leave the uncommitted row's payload CRC to be checked when field
    /// `i`'s mapped span (see [`pending_mapped_span`](Self::pending_mapped_span))
    /// is copied out. Call right before [`commit_row`](Self::commit_row).
    pub(crate) fn defer_crc(&mut self, i: usize, check: DeferredCrc) {
        let m = self.columns[i]
            .mapped
            .as_deref_mut()
            .filter(|m| m.pending.is_some())
            .expect("defer_crc on a field whose row is mapped");
        m.pending_check = Some(check);
    }

    /// Close the row written through [`values_mut`](Self::values_mut): check
    /// each field's element count against the schema. On a mismatch the row
    /// is rolled back and `(field index, description)` returned.
    #[inline]
    pub fn commit_row(&mut self, origin: Origin) -> std::result::Result<(), (usize, String)> {
        let mut bad = None;
        for (i, (c, f)) in self.columns.iter().zip(self.schema.fields()).enumerate() {
            let n = c.pending();
            if let Err(actual) = check_elements(f, n) {
                bad = Some((i, format!("{actual} of {}", f.dtype)));
                break;
            }
        }
        if let Some(bad) = bad {
            self.rollback_row();
            return Err(bad);
        }
        for c in &mut self.columns {
            c.commit();
        }
        self.origins.push(origin);
        Ok(())
    }

    /// Close `n` rows written at once through [`values_mut`](Self::values_mut),
    /// records `first_record..first_record + n` of `source`: each column's
    /// uncommitted elements are split evenly among the rows, and each row's
    /// count is checked against the schema as [`commit_row`](Self::commit_row)
    /// does. On a mismatch nothing is committed, the rows are rolled back and
    /// `(field index, description)` returned.
    pub fn commit_rows(
        &mut self,
        source: SourceId,
        first_record: u64,
        n: usize,
    ) -> std::result::Result<(), (usize, String)> {
        for c in &mut self.columns {
            c.materialize_pending();
        }
        let mut bad = None;
        for (i, (c, f)) in self.columns.iter().zip(self.schema.fields()).enumerate() {
            let pending = c.pending();
            if n == 0 {
                if pending != 0 {
                    bad = Some((i, format!("{pending} elements of {} for no rows", f.dtype)));
                    break;
                }
                continue;
            }
            if pending % n != 0 {
                bad = Some((i, format!("{pending} elements of {} for {n} rows", f.dtype)));
                break;
            }
            if let Err(actual) = check_elements(f, pending / n) {
                bad = Some((i, format!("{actual} of {}", f.dtype)));
                break;
            }
        }
        if let Some(bad) = bad {
            self.rollback_row();
            return Err(bad);
        }
        if n == 0 {
            return Ok(());
        }
        for c in &mut self.columns {
            let start = c.committed();
            let per = (c.values.len() - start) / n;
            let logical = c.ends.last().copied().unwrap_or(0);
            c.ends.extend((1..=n).map(|j| logical + j * per));
            if let Some(m) = c.mapped.as_deref_mut() {
                m.spans.extend(std::iter::repeat_n((OWNED, 0), n));
                m.checks.extend(std::iter::repeat_n(None, n));
                m.owned_ends.extend((1..=n).map(|j| start + j * per));
            }
        }
        self.origins
            .extend((0..n as u64).map(|j| Origin::new(source, first_record + j)));
        Ok(())
    }

    /// Drop whatever was written for the current, uncommitted row.
    pub fn rollback_row(&mut self) {
        for c in &mut self.columns {
            c.rollback();
        }
    }

    /// Instance `i` as an owned [`Instance`].
    ///
    /// # Errors
    ///
    /// A payload CRC left to be checked when the row is copied out (see
    /// [`Column::mapped_row`]) does not match.
    pub fn row(&self, i: usize) -> Result<Instance> {
        let values = self
            .columns
            .iter()
            .map(|c| c.row_values(i, true))
            .collect::<Result<_>>()?;
        Ok(Instance {
            schema: self.schema.clone(),
            values,
            origin: self.origins[i],
        })
    }

    /// All instances as owned [`Instance`]s (each as [`row`](Self::row) gives it).
    pub fn rows(&self) -> impl ExactSizeIterator<Item = Result<Instance>> + '_ {
        (0..self.len()).map(move |i| self.row(i))
    }

    /// A new chunk of rows `keep` of this one (in that order). Mapped rows
    /// stay mapped, with their due checks: a new column takes the one
    /// backing of each of this chunk's columns, so nothing is copied
    /// unchecked and nothing can fail.
    pub(crate) fn select_rows(&self, keep: &[usize]) -> Chunk {
        let mut out = Chunk::with_capacity(&self.schema, keep.len());
        for (c, o) in out.columns.iter_mut().zip(&self.columns) {
            for &i in keep {
                c.push_row_of(o, i);
            }
        }
        out.origins.extend(keep.iter().map(|&i| self.origins[i]));
        out
    }

    /// Append rows `start..end` of `other` (same schema). Rows of `other`
    /// that refer to a memory-mapped input keep referring to it (and keep
    /// any CRC check due on them).
    ///
    /// # Errors
    ///
    /// A row that has to be copied here has a due payload CRC that does not
    /// match (see [`Column::mapped_row`]); nothing is appended then.
    pub fn extend_rows(&mut self, other: &Chunk, start: usize, end: usize) -> Result<()> {
        for (c, o) in self.columns.iter().zip(&other.columns) {
            if !c.keeps_spans_of(o) {
                o.verify_rows(start, end)?;
            }
        }
        for (c, o) in self.columns.iter_mut().zip(&other.columns) {
            if c.mapped.is_none() && o.mapped.is_none() {
                c.rollback();
                for i in start..end {
                    let r = o.range(i);
                    c.values.extend_range(&o.values, r.start, r.end);
                    c.ends.push(c.values.len());
                }
            } else {
                for i in start..end {
                    c.push_row_of(o, i);
                }
            }
        }
        self.origins.extend_from_slice(&other.origins[start..end]);
        Ok(())
    }
}
