//! Instances and where they came from: typed value vectors ([`Values`]),
//! schema-free records as formats read them ([`Record`]), schema-conformed
//! single instances ([`Instance`]), and the columnar [`Chunk`] of many
//! instances that the hot path moves between stages.
//!
//! A [`Chunk`] stores each field of many instances in one vector, so decoders
//! write straight into it and collation copies each instance's values once.

use std::collections::HashMap;
use std::fmt;
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

/// One field of a [`Chunk`]: the values of all its instances and where each ends.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    /// All instances' elements, concatenated.
    pub values: Values,
    /// `ends[i]` is the element index where instance `i` ends.
    pub ends: Vec<usize>,
}

impl Column {
    /// Element range of instance `i`.
    pub fn range(&self, i: usize) -> std::ops::Range<usize> {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        start..self.ends[i]
    }

    fn committed(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
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
            .map(|f| Column {
                values: Values::with_capacity(f.dtype, f.fixed_elements().unwrap_or(1) * rows),
                ends: Vec::with_capacity(rows),
            })
            .collect();
        Chunk {
            schema: schema.clone(),
            columns,
            origins: Vec::with_capacity(rows),
        }
    }

    /// An empty chunk with room for what a reader puts in one: `max_rows`
    /// instances or `max_bytes` of payload, whichever comes first (a
    /// 150 KB-record schema gets room for a few rows, not `max_rows`).
    pub fn with_budget(schema: &Schema, max_rows: usize, max_bytes: usize) -> Self {
        let row: usize = schema
            .fields()
            .iter()
            .map(|f| f.fixed_elements().unwrap_or(0) * f.dtype.size())
            .sum();
        let rows = max_bytes
            .checked_div(row)
            .map_or(max_rows, |r| max_rows.min(r + 1));
        Self::with_capacity(schema, rows.min(1 << 16))
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

    /// Payload bytes held.
    pub fn payload_bytes(&self) -> usize {
        self.columns.iter().map(|c| c.values.payload_bytes()).sum()
    }

    /// Approximate memory held, payload plus bookkeeping.
    pub fn memory_bytes(&self) -> usize {
        self.payload_bytes()
            + self.columns.iter().map(|c| c.ends.len() * 8).sum::<usize>()
            + self.origins.len() * std::mem::size_of::<Origin>()
    }

    /// Remove all instances, keeping the allocations.
    pub fn clear(&mut self) {
        for c in &mut self.columns {
            c.values.clear();
            c.ends.clear();
        }
        self.origins.clear();
    }

    /// Append an instance of the same schema.
    pub fn push_instance(&mut self, inst: &Instance) {
        for (c, v) in self.columns.iter_mut().zip(inst.values()) {
            c.values.extend_range(v, 0, v.len());
            c.ends.push(c.values.len());
        }
        self.origins.push(inst.origin());
    }

    /// Conform `record` to the schema and append it; on error nothing is appended.
    pub fn push_record(&mut self, record: &Record) -> Result<()> {
        for i in 0..self.columns.len() {
            let f = &self.schema.fields()[i];
            if let Err(e) = conform_field(record, f, &mut self.columns[i].values) {
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
    pub fn values_mut(&mut self, i: usize) -> &mut Values {
        &mut self.columns[i].values
    }

    /// Close the row written through [`values_mut`](Self::values_mut): check
    /// each field's element count against the schema. On a mismatch the row
    /// is rolled back and `(field index, description)` returned.
    pub fn commit_row(&mut self, origin: Origin) -> std::result::Result<(), (usize, String)> {
        let mut bad = None;
        for (i, (c, f)) in self.columns.iter().zip(self.schema.fields()).enumerate() {
            let n = c.values.len() - c.committed();
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
            let end = c.values.len();
            c.ends.push(end);
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
        let mut bad = None;
        for (i, (c, f)) in self.columns.iter().zip(self.schema.fields()).enumerate() {
            let pending = c.values.len() - c.committed();
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
            c.ends.extend((1..=n).map(|j| start + j * per));
        }
        self.origins
            .extend((0..n as u64).map(|j| Origin::new(source, first_record + j)));
        Ok(())
    }

    /// Drop whatever was written for the current, uncommitted row.
    pub fn rollback_row(&mut self) {
        for c in &mut self.columns {
            let n = c.committed();
            c.values.truncate(n);
        }
    }

    /// Instance `i` as an owned [`Instance`].
    pub fn row(&self, i: usize) -> Instance {
        let values = self
            .columns
            .iter()
            .map(|c| {
                let r = c.range(i);
                let mut v = Values::with_capacity(c.values.dtype(), r.len());
                v.extend_range(&c.values, r.start, r.end);
                v
            })
            .collect();
        Instance {
            schema: self.schema.clone(),
            values,
            origin: self.origins[i],
        }
    }

    /// All instances as owned [`Instance`]s.
    pub fn rows(&self) -> impl ExactSizeIterator<Item = Instance> + '_ {
        (0..self.len()).map(move |i| self.row(i))
    }

    /// Append rows `start..end` of `other` (same schema).
    pub fn extend_rows(&mut self, other: &Chunk, start: usize, end: usize) {
        for (c, o) in self.columns.iter_mut().zip(&other.columns) {
            for i in start..end {
                let r = o.range(i);
                c.values.extend_range(&o.values, r.start, r.end);
                c.ends.push(c.values.len());
            }
        }
        self.origins.extend_from_slice(&other.origins[start..end]);
    }
}
