//! Values as formats read them, before any schema: typed element vectors
//! ([`Values`]), lists of byte strings stored contiguously ([`BytesList`])
//! and values with their shape ([`Tensor`]), with the element conversions
//! a schema may ask for.

use crate::schema::DType;

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

    /// Bytes allocated for the elements (their vectors' capacity; for byte
    /// strings, the bytes' and the end offsets' capacity).
    pub fn capacity_bytes(&self) -> usize {
        match self {
            Values::Bytes(b) => {
                b.data.capacity() + b.ends.capacity() * std::mem::size_of::<usize>()
            }
            Values::F32(v) => v.capacity() * 4,
            Values::F64(v) => v.capacity() * 8,
            Values::I64(v) => v.capacity() * 8,
            Values::I32(v) => v.capacity() * 4,
            Values::U8(v) => v.capacity(),
            Values::Bool(v) => v.capacity(),
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
    /// (e.g. 300 into u8, or 1e300 into f32, which would become infinite)
    /// gives a description of it. Floats narrowed to f32 are rounded to the
    /// nearest f32; infinities and NaNs stay what they are.
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
        fn bools(
            src: impl Iterator<Item = i64>,
            dst: &mut Vec<bool>,
        ) -> std::result::Result<(), String> {
            for x in src {
                match x {
                    0 => dst.push(false),
                    1 => dst.push(true),
                    _ => return Err(format!("value {x} is not a bool (0 or 1)")),
                }
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
            (Values::F64(s), Values::F32(d)) => {
                for &x in s {
                    let y = x as f32;
                    if y.is_infinite() && x.is_finite() {
                        return Err(format!(
                            "value {x:e} out of range for f32 (at most {:e} in magnitude; \
                             declare the field f64 to keep it)",
                            f32::MAX
                        ));
                    }
                    d.push(y);
                }
            }
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
            (Values::I64(s), Values::Bool(d)) => bools(s.iter().copied(), d)?,
            (Values::I32(s), Values::Bool(d)) => bools(s.iter().map(|&x| x as i64), d)?,
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

/// [`Values::to_json`]'s elements written by serde one at a time, with no
/// JSON tree in between: the same text, in a few bytes of memory per
/// element (`to_json` makes a 32-byte JSON value for each).
pub(crate) struct StreamedValues<'a>(pub(crate) &'a Values);

/// An `f64` as [`Values::to_json`] writes it: a number, or `"NaN"`,
/// `"Infinity"`, `"-Infinity"` for what JSON has no number for.
struct JsonNumber(f64);

impl serde::Serialize for JsonNumber {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let x = self.0;
        if x.is_finite() {
            s.serialize_f64(x)
        } else if x.is_nan() {
            s.serialize_str("NaN")
        } else if x > 0.0 {
            s.serialize_str("Infinity")
        } else {
            s.serialize_str("-Infinity")
        }
    }
}

/// A byte string as base64 (one string the size of its encoding).
struct Base64<'a>(&'a [u8]);

impl serde::Serialize for Base64<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use base64::Engine;
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(self.0))
    }
}

impl serde::Serialize for StreamedValues<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Values::F32(v) => s.collect_seq(v.iter().map(|&x| JsonNumber(f64::from(x)))),
            Values::F64(v) => s.collect_seq(v.iter().map(|&x| JsonNumber(x))),
            Values::I64(v) => s.collect_seq(v),
            Values::I32(v) => s.collect_seq(v),
            Values::U8(v) => s.collect_seq(v),
            Values::Bool(v) => s.collect_seq(v),
            Values::Bytes(b) => s.collect_seq(b.iter().map(Base64)),
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
