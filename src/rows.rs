//! Batch rows as the user's own types: [`Batch::rows`] and [`Batch::row`]
//! read each row of a batch into any `T: serde::Deserialize` — a struct
//! whose fields are matched to the batch's fields by name — for code that
//! wants records, not columns (evaluation, logging, a small model's
//! features).
//!
//! This module owns the serde deserializer over one row of a [`Batch`]
//! (a map of the batch's fields, each shaped as its schema says) and the
//! error it gives ([`Error::Row`]: the row, where its instance came from,
//! the type asked for, the field, what was expected and what the row
//! holds).

use ndarray::{ArrayD, CowArray, IxDyn};
use serde::de::{self, DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use crate::batch::{Array, Batch, BatchField};
use crate::error::{Error, Result};
use crate::schema::Field;
use crate::values::BytesList;

impl Batch {
    /// Every row of this batch as a `T`, in batch order: a struct (or a
    /// map) whose fields are matched to the batch's by name, through serde.
    /// For code that wants records rather than columns (evaluation,
    /// logging, a small model's features); the columns themselves are
    /// [`view`](Self::view)s, without a copy.
    ///
    /// Each field is read as its schema shape says:
    ///
    /// | field | read as |
    /// | --- | --- |
    /// | scalar `[]` | one number, bool or byte string |
    /// | fixed `[n]`, `[n, m]`, … | a sequence of `n` (of sequences of `m`, …): `Vec<f32>`, `[f32; n]`, `Vec<Vec<u8>>` |
    /// | ragged `[?, …]` (offsets or padded) | a sequence of this row's own length (no padding) |
    /// | bytes | a `String` (if UTF-8), a `Vec<u8>` or a `serde_bytes::ByteBuf`; a string (if UTF-8) to a type that takes anything (`serde_json::Value`) |
    /// | `u8` `[n]` | also bytes (`ByteBuf`) |
    ///
    /// Numbers convert as serde's primitives do (an i64 into an `i32` or
    /// `u8` when in range, any number into `f32`/`f64`); an `Option<X>`
    /// field is always `Some`. Fields of the batch that `T` does not name
    /// are skipped; a field `T` names that the batch lacks is an error
    /// (unless `T` gives it a `#[serde(default)]` or makes it an
    /// `Option`). Padding rows of `Equalize::Pad` are rows too: see
    /// [`mask`](Self::mask).
    ///
    /// The first row that does not fit `T` is an [`Error::Row`] naming the
    /// row, its instance's file and record, the type, the field (with its
    /// schema shape), and what was expected and found.
    ///
    /// ```
    /// use feedline::{collate, Chunk, DType, Instance, Origin, Ragged, Schema, SourceId, Values};
    /// use serde::Deserialize;
    ///
    /// #[derive(Deserialize, Debug, PartialEq)]
    /// struct Example {
    ///     label: i64,
    ///     tokens: Vec<i32>,    // ragged: this row's own length
    ///     name: String,        // a bytes field
    ///     xy: [f32; 2],
    /// }
    ///
    /// let schema = Schema::builder()
    ///     .field("label", DType::I64, [])
    ///     .ragged("tokens", DType::I64, Ragged::Offsets)
    ///     .field("name", DType::Bytes, [])
    ///     .field("xy", DType::F32, [2])
    ///     .build()?;
    /// let mut chunk = Chunk::new(&schema);
    /// for i in 0..3i64 {
    ///     let values = vec![
    ///         Values::I64(vec![i]),
    ///         Values::I64((0..i).collect()),
    ///         Values::Bytes([format!("row {i}").as_bytes()].into_iter().collect()),
    ///         Values::F32(vec![i as f32, 0.5]),
    ///     ];
    ///     let origin = Origin::new(SourceId::intern("train.jsonl"), i as u64);
    ///     chunk.push_instance(&Instance::new(&schema, values, origin)?);
    /// }
    /// let batch = collate(&schema, (0..3).map(|i| (&chunk, i)))?;
    ///
    /// let rows: Vec<Example> = batch.rows()?;
    /// assert_eq!(rows[2], Example { label: 2, tokens: vec![0, 1], name: "row 2".into(), xy: [2.0, 0.5] });
    /// assert_eq!(rows[0].tokens, Vec::<i32>::new());
    ///
    /// // What does not fit is named: row, file and record, field, expected and found.
    /// #[derive(Deserialize, Debug)]
    /// struct Wrong { xy: [f32; 3] }
    /// let e = batch.rows::<Wrong>().unwrap_err().to_string();
    /// assert!(e.starts_with("batch row 0 (train.jsonl: record 0) as `"), "{e}");
    /// assert!(
    ///     e.ends_with("Wrong`: field `xy` ([2] f32): invalid length 2, expected an array of length 3"),
    ///     "{e}"
    /// );
    /// #[derive(Deserialize, Debug)]
    /// struct Missing { label: i64, weight: f32 }
    /// let e = batch.rows::<Missing>().unwrap_err().to_string();
    /// assert!(e.ends_with("missing field `weight` (the batch's fields: label, tokens, name, xy)"), "{e}");
    /// # Ok::<(), feedline::Error>(())
    /// ```
    pub fn rows<T: DeserializeOwned>(&self) -> Result<Vec<T>> {
        let fields = self.row_fields();
        (0..self.len()).map(|k| self.row_as(&fields, k)).collect()
    }

    /// Row `k` of this batch as a `T` (see [`rows`](Self::rows)); an error
    /// if there is no row `k`.
    pub fn row<T: DeserializeOwned>(&self, k: usize) -> Result<T> {
        if k >= self.len() {
            return Err(Error::Config(format!(
                "row {k} of a batch of {} rows",
                self.len()
            )));
        }
        self.row_as(&self.row_fields(), k)
    }

    /// Each field's data in logical (row-major) order, once per call.
    fn row_fields(&self) -> Vec<Flat<'_>> {
        self.schema
            .fields()
            .iter()
            .zip(&self.fields)
            .map(|(f, bf)| Flat::new(f, bf))
            .collect()
    }

    fn row_as<T: DeserializeOwned>(&self, fields: &[Flat<'_>], k: usize) -> Result<T> {
        T::deserialize(RowDe { fields, k }).map_err(|e| Error::Row {
            row: k,
            origin: self.origins[k].location(),
            asked: std::any::type_name::<T>().to_string(),
            field: e.field.map(|i| {
                let f = &self.schema.fields()[i];
                format!("field `{}` ({}): ", f.name, f.describe())
            }),
            what: match e.missing {
                true => format!(
                    "{} (the batch's fields: {})",
                    e.msg,
                    self.schema.field_names()
                ),
                false => e.msg,
            },
        })
    }
}

/// The elements of a field's data, flat in logical order.
enum Elems<'a> {
    F32(CowArray<'a, f32, IxDyn>),
    F64(CowArray<'a, f64, IxDyn>),
    I64(CowArray<'a, i64, IxDyn>),
    I32(CowArray<'a, i32, IxDyn>),
    U8(CowArray<'a, u8, IxDyn>),
    Bool(CowArray<'a, bool, IxDyn>),
    Bytes(&'a BytesList),
}

impl Elems<'_> {
    /// Elements in all (byte strings for bytes).
    fn len(&self) -> usize {
        match self {
            Elems::F32(a) => a.len(),
            Elems::F64(a) => a.len(),
            Elems::I64(a) => a.len(),
            Elems::I32(a) => a.len(),
            Elems::U8(a) => a.len(),
            Elems::Bool(a) => a.len(),
            Elems::Bytes(b) => b.len(),
        }
    }
}

/// One field of a batch, ready to be cut into rows.
struct Flat<'a> {
    field: &'a Field,
    data: Elems<'a>,
    offsets: Option<&'a [usize]>,
    lengths: Option<&'a [usize]>,
}

impl<'a> Flat<'a> {
    fn new(field: &'a Field, bf: &'a BatchField) -> Self {
        fn standard<T: Clone>(a: &ArrayD<T>) -> CowArray<'_, T, IxDyn> {
            a.as_standard_layout()
        }
        let data = match &bf.data {
            Array::F32(a) => Elems::F32(standard(a)),
            Array::F64(a) => Elems::F64(standard(a)),
            Array::I64(a) => Elems::I64(standard(a)),
            Array::I32(a) => Elems::I32(standard(a)),
            Array::U8(a) => Elems::U8(standard(a)),
            Array::Bool(a) => Elems::Bool(standard(a)),
            Array::Bytes(b) => Elems::Bytes(b),
        };
        Flat {
            field,
            data,
            offsets: bf.offsets.as_deref(),
            lengths: bf.lengths.as_deref(),
        }
    }

    /// Row `k`: where its elements start in the flat data, and its shape
    /// (a ragged row's own length first).
    fn row(&self, k: usize) -> Result<(usize, Vec<usize>), RowError> {
        let dims = self.field.fixed_dims();
        let unit = self.field.unit_elements();
        // Byte strings are counted one by one in a ragged bytes field's
        // offsets and lengths; numbers by units of the trailing dims.
        let per = if matches!(self.data, Elems::Bytes(_)) {
            1
        } else {
            unit
        };
        if !self.field.is_ragged() {
            return self.within(k * unit, dims);
        }
        // Offsets and lengths count units of the trailing dims (numbers) or
        // byte strings; a padded row's slot is the longest row's.
        let (start, units) = match (self.offsets, self.lengths) {
            (Some(o), _) => {
                let units = o[k + 1].checked_sub(o[k]).ok_or_else(|| {
                    de::Error::custom(format!(
                        "the field's offsets go back ({} then {})",
                        o[k],
                        o[k + 1]
                    ))
                })?;
                (o[k] * per, units)
            }
            (None, Some(l)) => {
                let max = l.iter().copied().max().unwrap_or(0);
                (k * max * per, l[k])
            }
            (None, None) => return Err(de::Error::custom(NO_LAYOUT)),
        };
        let mut shape = vec![units * per / unit.max(1)];
        shape.extend(dims);
        self.within(start, shape)
    }

    /// `(start, shape)`, if the field's data holds those elements.
    fn within(&self, start: usize, shape: Vec<usize>) -> Result<(usize, Vec<usize>), RowError> {
        let end = start + shape.iter().product::<usize>();
        if end > self.data.len() {
            return Err(de::Error::custom(format!(
                "the row's elements {start}..{end} are beyond the field's {} (its offsets or \
                 lengths do not match its data)",
                self.data.len()
            )));
        }
        Ok((start, shape))
    }
}

const NO_LAYOUT: &str =
    "the field is ragged, but the batch has neither its offsets nor its lengths";

/// Why a row did not fit: serde's message, and the field it was about.
#[derive(Debug)]
struct RowError {
    field: Option<usize>,
    msg: String,
    /// A field `T` names that the batch lacks.
    missing: bool,
}

impl std::fmt::Display for RowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for RowError {}

impl de::Error for RowError {
    fn custom<M: std::fmt::Display>(msg: M) -> Self {
        RowError {
            field: None,
            msg: msg.to_string(),
            missing: false,
        }
    }

    fn missing_field(field: &'static str) -> Self {
        RowError {
            field: None,
            msg: format!("missing field `{field}`"),
            missing: true,
        }
    }
}

/// One row: a map of the batch's fields.
struct RowDe<'b, 'a> {
    fields: &'b [Flat<'a>],
    k: usize,
}

impl<'de> de::Deserializer<'de> for RowDe<'_, '_> {
    type Error = RowError;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, RowError> {
        v.visit_map(RowMap {
            fields: self.fields,
            k: self.k,
            next: 0,
        })
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, RowError> {
        v.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, RowError> {
        v.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

struct RowMap<'b, 'a> {
    fields: &'b [Flat<'a>],
    k: usize,
    next: usize,
}

impl<'de> MapAccess<'de> for RowMap<'_, '_> {
    type Error = RowError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, RowError> {
        let Some(f) = self.fields.get(self.next) else {
            return Ok(None);
        };
        seed.deserialize(de::IntoDeserializer::<RowError>::into_deserializer(
            f.field.name.as_str(),
        ))
        .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, RowError> {
        let i = self.next;
        self.next += 1;
        let flat = &self.fields[i];
        flat.row(self.k)
            .and_then(|(start, shape)| {
                seed.deserialize(Cell {
                    data: &flat.data,
                    start,
                    shape: &shape,
                })
            })
            .map_err(|mut e| {
                e.field.get_or_insert(i);
                e
            })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.fields.len() - self.next)
    }
}

/// Part of a row's field: the elements from `start` on, shaped `shape`
/// (`[]`: one element).
#[derive(Clone, Copy)]
struct Cell<'c, 'a> {
    data: &'c Elems<'a>,
    start: usize,
    shape: &'c [usize],
}

impl Cell<'_, '_> {
    fn len(&self) -> usize {
        self.shape.iter().product()
    }

    fn bytes(&self) -> Option<&[u8]> {
        match (self.data, self.shape) {
            (Elems::Bytes(b), []) => Some(b.get(self.start)),
            (Elems::U8(a), [_]) => a
                .as_slice()
                .map(|s| &s[self.start..self.start + self.len()]),
            _ => None,
        }
    }
}

macro_rules! one {
    ($a:expr, $at:expr) => {
        $a.as_slice().expect("standard layout")[$at]
    };
}

impl<'de> de::Deserializer<'de> for Cell<'_, '_> {
    type Error = RowError;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, RowError> {
        if let Some(&n) = self.shape.first() {
            let mut items = Items {
                cell: self,
                next: 0,
            };
            let value = v.visit_seq(&mut items)?;
            // A fixed-size `T` (an array, a tuple) takes what it needs:
            // more items than that is a length that does not fit, too.
            if items.next < n {
                return Err(de::Error::invalid_length(n, &ItemsTaken(items.next)));
            }
            return Ok(value);
        }
        let i = self.start;
        match self.data {
            Elems::F32(a) => v.visit_f32(one!(a, i)),
            Elems::F64(a) => v.visit_f64(one!(a, i)),
            Elems::I64(a) => v.visit_i64(one!(a, i)),
            Elems::I32(a) => v.visit_i32(one!(a, i)),
            Elems::U8(a) => v.visit_u8(one!(a, i)),
            Elems::Bool(a) => v.visit_bool(one!(a, i)),
            // A type that reads whatever is there (serde_json::Value):
            // text where it is UTF-8.
            Elems::Bytes(b) => match std::str::from_utf8(b.get(i)) {
                Ok(s) => v.visit_str(s),
                Err(_) => v.visit_bytes(b.get(i)),
            },
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, v: V) -> Result<V::Value, RowError> {
        match (self.data, self.shape) {
            (Elems::Bytes(b), []) => match std::str::from_utf8(b.get(self.start)) {
                Ok(s) => v.visit_str(s),
                Err(e) => Err(de::Error::custom(format!(
                    "a string was expected, but the bytes are not UTF-8 ({e}); read them as \
                     Vec<u8> or serde_bytes::ByteBuf"
                ))),
            },
            _ => self.deserialize_any(v),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> Result<V::Value, RowError> {
        self.deserialize_str(v)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, v: V) -> Result<V::Value, RowError> {
        match self.bytes() {
            Some(b) => v.visit_bytes(b),
            None => self.deserialize_any(v),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, v: V) -> Result<V::Value, RowError> {
        self.deserialize_bytes(v)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, RowError> {
        // A byte string read as a sequence (`Vec<u8>`): its bytes.
        match (self.data, self.shape) {
            (Elems::Bytes(b), []) => v.visit_seq(de::value::SeqDeserializer::new(
                b.get(self.start).iter().copied(),
            )),
            _ => self.deserialize_any(v),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _len: usize, v: V) -> Result<V::Value, RowError> {
        self.deserialize_seq(v)
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, RowError> {
        v.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, RowError> {
        v.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, RowError> {
        v.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char
        unit unit_struct tuple_struct map struct enum identifier
    }
}

/// How many items a sequence's reader took (for its length error).
struct ItemsTaken(usize);

impl de::Expected for ItemsTaken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} items", self.0)
    }
}

/// The items of a cell's first dimension.
struct Items<'c, 'a> {
    cell: Cell<'c, 'a>,
    next: usize,
}

impl<'de> SeqAccess<'de> for Items<'_, '_> {
    type Error = RowError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, RowError> {
        let (n, inner) = (self.cell.shape[0], &self.cell.shape[1..]);
        if self.next >= n {
            return Ok(None);
        }
        let step: usize = inner.iter().product();
        let item = Cell {
            data: self.cell.data,
            start: self.cell.start + self.next * step,
            shape: inner,
        };
        self.next += 1;
        seed.deserialize(item).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.cell.shape[0] - self.next)
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use crate::batch::Batch;
    use crate::chunk::Chunk;
    use crate::collate::collate;
    use crate::error::Error;
    use crate::provenance::{Origin, SourceId};
    use crate::record::Instance;
    use crate::schema::{DType, Ragged, Schema};
    use crate::values::{BytesList, Values};

    /// Rows `0..n` of a schema with every kind of field: row `i` has label
    /// `i`, `i % 4` tokens `10 i + j`, an image `[2, 3]` of `i + pixel`,
    /// a name `"row i"`, `i % 3` tags, a flag, and raw bytes `[i, 255]`.
    fn batch(n: usize, ragged: Ragged) -> Batch {
        let schema = Schema::builder()
            .field("label", DType::I32, [])
            .ragged("tokens", DType::I64, ragged)
            .field("image", DType::U8, [2, 3])
            .field("name", DType::Bytes, [])
            .ragged("tags", DType::Bytes, ragged)
            .field("flag", DType::Bool, [])
            .field("raw", DType::Bytes, [])
            .field("score", DType::F64, [2])
            .build()
            .unwrap();
        let mut chunk = Chunk::new(&schema);
        for i in 0..n {
            let tags: BytesList = (0..i % 3)
                .map(|t| format!("t{i}.{t}"))
                .collect::<Vec<_>>()
                .iter()
                .map(|s| s.as_bytes())
                .collect();
            let values = vec![
                Values::I32(vec![i as i32]),
                Values::I64((0..i % 4).map(|j| (10 * i + j) as i64).collect()),
                Values::U8((0..6).map(|p| (i + p) as u8).collect()),
                Values::Bytes([format!("row {i}").as_bytes()].into_iter().collect()),
                Values::Bytes(tags),
                Values::Bool(vec![i % 2 == 0]),
                Values::Bytes([&[i as u8, 255u8][..]].into_iter().collect()),
                Values::F64(vec![i as f64 / 2.0, -(i as f64)]),
            ];
            let origin = Origin::new(SourceId::intern("rows-test.jsonl"), 100 + i as u64);
            chunk.push_instance(&Instance::new(&schema, values, origin).unwrap());
        }
        // Rows out of file order, as a shuffled batch has them.
        collate(&schema, (0..n).rev().map(|i| (&chunk, i))).unwrap()
    }

    #[derive(Deserialize, Debug, PartialEq)]
    struct Row {
        label: u8,
        tokens: Vec<i64>,
        image: Vec<Vec<u8>>,
        name: String,
        tags: Vec<String>,
        flag: bool,
        raw: Vec<u8>,
        score: (f32, f64),
    }

    fn expected(i: usize) -> Row {
        Row {
            label: i as u8,
            tokens: (0..i % 4).map(|j| (10 * i + j) as i64).collect(),
            image: (0..2)
                .map(|y| (0..3).map(|x| (i + 3 * y + x) as u8).collect())
                .collect(),
            name: format!("row {i}"),
            tags: (0..i % 3).map(|t| format!("t{i}.{t}")).collect(),
            flag: i % 2 == 0,
            raw: vec![i as u8, 255],
            score: (i as f32 / 2.0, -(i as f64)),
        }
    }

    #[test]
    fn every_row_is_its_own_instance_in_both_ragged_layouts() {
        for ragged in [Ragged::Offsets, Ragged::Padded] {
            let b = batch(7, ragged);
            let rows: Vec<Row> = b.rows().unwrap();
            assert_eq!(rows.len(), 7);
            for (row, origin) in rows.iter().zip(b.origins()) {
                let i = (origin.record - 100) as usize;
                assert_eq!(*row, expected(i), "{ragged:?}, record {}", origin.record);
            }
            let third: Row = b.row(2).unwrap();
            assert_eq!(third, expected(4));
            assert!(b.row::<Row>(7).is_err());
        }
    }

    #[test]
    fn a_subset_of_fields_options_newtypes_and_maps_read_too() {
        #[derive(Deserialize, Debug, PartialEq)]
        struct Label(i64);
        #[derive(Deserialize, Debug, PartialEq)]
        struct Few {
            label: Label,
            name: Option<serde_json::Value>,
            #[serde(default)]
            absent: u32,
        }
        let b = batch(3, Ragged::Offsets);
        let rows: Vec<Few> = b.rows().unwrap();
        let labels: Vec<i64> = rows.iter().map(|r| r.label.0).collect();
        assert_eq!(labels, [2, 1, 0]);
        assert!(rows.iter().all(|r| r.absent == 0 && r.name.is_some()));
        // Types that take whatever is there, as serde_json sees the row.
        #[derive(Deserialize)]
        struct Any {
            tokens: serde_json::Value,
            image: serde_json::Value,
            flag: serde_json::Value,
            name: serde_json::Value,
        }
        let any: Vec<Any> = b.rows().unwrap();
        assert_eq!(any[0].tokens, serde_json::json!([20, 21]));
        assert_eq!(any[0].image, serde_json::json!([[2, 3, 4], [5, 6, 7]]));
        assert_eq!(any[2].flag, serde_json::json!(true));
        assert_eq!(any[1].name, serde_json::json!("row 1"));
        // A map of every field: `raw` is not UTF-8, which a JSON value
        // cannot hold.
        type Map = std::collections::BTreeMap<String, serde_json::Value>;
        let e = b.rows::<Map>().unwrap_err().to_string();
        assert!(
            e.contains("field `raw` ([] bytes): invalid type: byte array"),
            "{e}"
        );
    }

    /// The error of reading `b` as `T`, which must be an `Error::Row`.
    fn row_error<T: serde::de::DeserializeOwned + std::fmt::Debug>(b: &Batch) -> (String, Error) {
        let e = b.rows::<T>().unwrap_err();
        assert!(matches!(e, Error::Row { .. }), "{e:?}");
        (e.to_string(), e)
    }

    #[test]
    fn what_does_not_fit_is_named_by_row_record_field_expected_and_found() {
        let b = batch(6, Ragged::Offsets);
        // A value out of the asked type's range: label 5 fits u8, but not
        // a bool; the first row (record 105) is the one named.
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct BoolLabel {
            label: bool,
        }
        let (msg, e) = row_error::<BoolLabel>(&b);
        assert!(
            msg.starts_with("batch row 0 (rows-test.jsonl: record 105) as `"),
            "{msg}"
        );
        assert!(
            msg.ends_with(
                "BoolLabel`: field `label` ([] i32): invalid type: integer `5`, expected a boolean"
            ),
            "{msg}"
        );
        assert_eq!(e.location().map(|l| l.record), Some(105));
        // A fixed shape into a shorter array.
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct Short {
            image: [[u8; 2]; 2],
        }
        let (msg, _) = row_error::<Short>(&b);
        assert!(
            msg.ends_with("field `image` ([2, 3] u8): invalid length 3, expected 2 items"),
            "{msg}"
        );
        // A ragged field whose rows differ: the first that does not fit.
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct Pair {
            tokens: [i64; 2],
        }
        let (msg, _) = row_error::<Pair>(&b);
        assert!(
            msg.starts_with("batch row 0 (rows-test.jsonl: record 105)"),
            "{msg}"
        );
        assert!(
            msg.ends_with(
                "field `tokens` ([?] i64): invalid length 1, expected an array of length 2"
            ),
            "{msg}"
        );
        // An integer out of range: label 300 does not fit a u8.
        let mut big = batch(1, Ragged::Offsets);
        if let crate::batch::Array::I32(a) = &mut big.fields[0].data {
            a[[0]] = 300;
        }
        let (msg, _) = row_error::<Row>(&big);
        assert!(
            msg.ends_with("field `label` ([] i32): invalid value: integer `300`, expected u8"),
            "{msg}"
        );
        // A field the batch lacks, with the fields it has.
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct Missing {
            label: i64,
            weight: f32,
        }
        let (msg, _) = row_error::<Missing>(&b);
        assert!(
            msg.ends_with(
                "missing field `weight` (the batch's fields: label, tokens, image, name, tags, \
                 flag, raw, score)"
            ),
            "{msg}"
        );
        // Bytes that are not UTF-8, asked for as a string.
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct RawText {
            raw: String,
        }
        let (msg, _) = row_error::<RawText>(&b);
        assert!(
            msg.contains(
                "field `raw` ([] bytes): a string was expected, but the bytes are not UTF-8"
            ),
            "{msg}"
        );
    }

    #[test]
    fn offsets_that_do_not_match_the_data_are_an_error_not_a_panic() {
        for (k, bad) in [(1, vec![0, 3, 1, 4]), (2, vec![0, 1, 2, 99])] {
            let mut b = batch(3, Ragged::Offsets);
            b.fields[1].offsets = Some(bad);
            #[derive(Deserialize, Debug)]
            #[allow(dead_code)]
            struct Tokens {
                tokens: Vec<i64>,
            }
            let e = b.rows::<Tokens>().unwrap_err().to_string();
            assert!(e.starts_with(&format!("batch row {k} ")), "{e}");
            assert!(e.contains("field `tokens` ([?] i64): the "), "{e}");
        }
    }

    #[test]
    fn a_u8_vector_reads_as_bytes() {
        let schema = Schema::builder()
            .field("px", DType::U8, [4])
            .build()
            .unwrap();
        let mut chunk = Chunk::new(&schema);
        for i in 0..3u8 {
            let origin = Origin::new(SourceId::intern("rows-test.npy"), i as u64);
            let values = vec![Values::U8(vec![i, i + 1, i + 2, i + 3])];
            chunk.push_instance(&Instance::new(&schema, values, origin).unwrap());
        }
        let b = collate(&schema, (0..3).map(|i| (&chunk, i))).unwrap();
        #[derive(Deserialize)]
        struct Px {
            px: serde_json::Value,
        }
        #[derive(Deserialize)]
        struct Buf {
            #[serde(deserialize_with = "as_bytes")]
            px: Vec<u8>,
        }
        fn as_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
            struct V;
            impl serde::de::Visitor<'_> for V {
                type Value = Vec<u8>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("bytes")
                }
                fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                    Ok(v.to_vec())
                }
            }
            d.deserialize_bytes(V)
        }
        let px: Vec<Px> = b.rows().unwrap();
        assert_eq!(px[2].px, serde_json::json!([2, 3, 4, 5]));
        let maps: Vec<std::collections::BTreeMap<String, serde_json::Value>> = b.rows().unwrap();
        assert_eq!(maps[1]["px"], serde_json::json!([1, 2, 3, 4]));
        let bufs: Vec<Buf> = b.rows().unwrap();
        assert_eq!(bufs[1].px, [1, 2, 3, 4]);
    }
}
