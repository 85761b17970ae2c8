//! Arrow columns as feedline fields: the mapping the formats read through
//! arrow-rs share (Parquet, Arrow IPC).
//!
//! This module owns which Arrow types a column may have and what each
//! becomes ([`layout`]), the schema an Arrow schema implies
//! ([`schema_of_arrow`]), a decoder's panic on damaged data turned into an
//! error ([`contain_panic`]), a record batch with its dictionaries resolved
//! ([`OpenBatch`]) and one of its rows as a [`Record`] ([`OpenBatch::row`]).
//!
//! | Arrow type | value |
//! | --- | --- |
//! | `bool` | bool |
//! | `int8`, `int16`, `int32`, `uint16` | i32 |
//! | `uint8` | u8 |
//! | `int64`, `uint32`, `uint64` (up to `i64::MAX`) | i64 |
//! | `float16`, `float32` | f32 |
//! | `float64` | f64 |
//! | string, binary (any offset size, views, fixed-size binary) | bytes |
//! | struct `{bytes: binary, path: string}` (Hugging Face's `Image` and `Audio`) | bytes (its `bytes`) |
//! | dictionary of any of these | its values |
//! | `list`, `large_list`, `fixed_size_list` of any of these, nested | a tensor: one dimension per list level |
//!
//! A scalar column gives a scalar (shape `[]`); a list gives shape `[n]`, a
//! list of fixed-size lists `[n, m]`; a list whose inner lists are
//! variable (a list of lists) is a flat ragged field, its values flat in
//! row order, shape `[n * m]` (the inner lists of one row must be of one
//! length). Any other type (another struct, map, timestamp, decimal…) is an
//! error naming the column and its Arrow type. A null — a whole value or
//! an element of a list — is an error naming the row and the column.

use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float16Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type,
    UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Fields};

use crate::error::{Error, Result};
use crate::provenance::{Location, SourceId};
use crate::record::Record;
use crate::schema::{DType, Dim, Field, Ragged, Schema};
use crate::values::{Tensor, Values};

/// The schema Arrow fields imply: a scalar column is a scalar field, a
/// fixed-size list a fixed dimension, a variable list a ragged leading
/// dimension (a list nested in a variable list: a flat ragged field). A
/// column of a type feedline cannot read is an error naming it and the
/// file at `path`.
pub(crate) fn schema_of_arrow(path: &Path, fields: &Fields) -> Result<Schema> {
    let mut out = Vec::new();
    for f in fields {
        let (dtype, dims) = layout(f.data_type()).map_err(|t| unsupported(path, f.name(), &t))?;
        let shape = if dims.iter().skip(1).any(Option::is_none) {
            vec![Dim::Var]
        } else {
            dims.iter()
                .map(|d| d.map_or(Dim::Var, Dim::Fixed))
                .collect()
        };
        out.push(Field {
            name: f.name().clone(),
            dtype,
            shape,
            ragged: Ragged::Offsets,
        });
    }
    Schema::new(out)
}

/// A column type's element dtype and its list levels (`None`: variable);
/// `Err` with the type's text if feedline does not read it.
pub(crate) fn layout(t: &DataType) -> std::result::Result<(DType, Vec<Option<usize>>), String> {
    let mut dims = Vec::new();
    let mut t = t;
    loop {
        match t {
            DataType::List(f) | DataType::LargeList(f) => {
                dims.push(None);
                t = f.data_type();
            }
            DataType::FixedSizeList(f, n) => {
                dims.push(Some(*n as usize));
                t = f.data_type();
            }
            DataType::Dictionary(_, v) if dims.is_empty() => t = v,
            DataType::Struct(fields) if encoded_bytes(fields).is_some() => {
                return Ok((DType::Bytes, dims))
            }
            other => {
                return leaf_dtype(other)
                    .map(|d| (d, dims))
                    .ok_or_else(|| format!("{other}"))
            }
        }
    }
}

/// The index of the `bytes` child of a struct of exactly `bytes` (binary)
/// and `path` (string): how Hugging Face `datasets` stores an encoded image
/// or sound.
fn encoded_bytes(fields: &Fields) -> Option<usize> {
    if fields.len() != 2 {
        return None;
    }
    let (i, bytes) = fields.find("bytes")?;
    let (_, path) = fields.find("path")?;
    let binary = matches!(
        bytes.data_type(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView
    );
    let text = matches!(
        path.data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    );
    (binary && text).then_some(i)
}

fn leaf_dtype(t: &DataType) -> Option<DType> {
    use DataType as D;
    Some(match t {
        D::Boolean => DType::Bool,
        D::Int8 | D::Int16 | D::Int32 | D::UInt16 => DType::I32,
        D::UInt8 => DType::U8,
        D::Int64 | D::UInt32 | D::UInt64 => DType::I64,
        D::Float16 | D::Float32 => DType::F32,
        D::Float64 => DType::F64,
        D::Utf8
        | D::LargeUtf8
        | D::Utf8View
        | D::Binary
        | D::LargeBinary
        | D::BinaryView
        | D::FixedSizeBinary(_) => DType::Bytes,
        _ => return None,
    })
}

/// The error for column `column` of the file at `path`, of Arrow type `t`.
pub(crate) fn unsupported(path: &Path, column: &str, t: &str) -> Error {
    Error::BadFile {
        path: path.to_path_buf(),
        what: format!(
            "column `{column}`: Arrow type {t} is not supported (numeric, bool, string, \
             binary, dictionary, list and fixed-size-list columns are)"
        ),
    }
}

/// Run `f`, turning a panic into an error: arrow-rs's decoders (the
/// `parquet` crate, `arrow-ipc`) assert on some damaged data (e.g. a bit
/// width beyond its type) instead of returning an error, and a damaged
/// file must be an error naming it.
pub(crate) fn contain_panic<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        let what = crate::panic::panic_message(&*p);
        log::debug!("an arrow-rs decoder panicked: {what}");
        format!("the decoder failed on damaged data ({what})")
    })
}

/// A decoded record batch: its columns (dictionaries resolved), their
/// names and element dtypes.
pub(crate) struct OpenBatch {
    /// Name, element dtype, values, and whether the column is a flat
    /// ragged field (a list level below the first is variable: its values
    /// are given flat, shape `[n]`, as [`schema_of_arrow`] declares it).
    columns: Vec<(String, DType, ArrayRef, bool)>,
    /// Its rows.
    pub(crate) rows: usize,
}

impl OpenBatch {
    /// `b`'s columns, each checked to be of a type feedline reads (else
    /// an error naming the file at `path` and the column), dictionaries
    /// resolved (a bad one: an error at `location`).
    pub(crate) fn new(path: &Path, b: &RecordBatch, location: Location) -> Result<Self> {
        let rows = b.num_rows();
        let mut columns = Vec::with_capacity(b.num_columns());
        for (f, col) in b.schema().fields().iter().zip(b.columns()) {
            let (dtype, dims) =
                layout(f.data_type()).map_err(|t| unsupported(path, f.name(), &t))?;
            let flat = dims.iter().skip(1).any(Option::is_none);
            let col = match col.as_any_dictionary_opt() {
                Some(d) => {
                    arrow_select::take::take(d.values().as_ref(), d.keys(), None).map_err(|e| {
                        Error::corrupt(
                            location.clone(),
                            format!("column `{}`: bad dictionary: {e}", f.name()),
                        )
                    })?
                }
                None => col.clone(),
            };
            columns.push((f.name().clone(), dtype, col, flat));
        }
        Ok(OpenBatch { columns, rows })
    }

    /// Row `at` of the batch as record `record` of `source`.
    pub(crate) fn row(&self, at: usize, source: SourceId, record: u64) -> Result<Record> {
        let mut fields = Vec::with_capacity(self.columns.len());
        for (name, dtype, col, flat) in &self.columns {
            let mut values = Values::new(*dtype);
            let mut shape = Vec::new();
            gather(col.as_ref(), at, at + 1, 0, &mut shape, &mut values).map_err(|actual| {
                Error::Field {
                    location: Location::new(source, record, None),
                    field: name.clone(),
                    expected: "a value (feedline's fields have no nulls)".into(),
                    actual,
                }
            })?;
            if *flat {
                shape = vec![values.len()];
            }
            fields.push((name.clone(), Tensor { values, shape }));
        }
        Ok(Record {
            fields,
            location: Location::new(source, record, None),
        })
    }
}

/// Append the elements of `arr[start..end]` to `out` (its leaf dtype), and
/// record the lengths of the list levels below `level` in `shape`. An
/// error (the text of what the row holds instead of a value) for a null,
/// lists of unequal lengths within one row, or a u64 beyond `i64::MAX`.
fn gather(
    arr: &dyn Array,
    start: usize,
    end: usize,
    level: usize,
    shape: &mut Vec<usize>,
    out: &mut Values,
) -> std::result::Result<(), String> {
    if arr.null_count() > 0 {
        if let Some(i) = (start..end).find(|&i| arr.is_null(i)) {
            return Err(if level == 0 {
                "null".into()
            } else {
                format!("a null element (at {} of the flattened list)", i - start)
            });
        }
    }
    fn level_len(
        shape: &mut Vec<usize>,
        level: usize,
        n: usize,
    ) -> std::result::Result<(), String> {
        match shape.get(level) {
            None => shape.push(n),
            Some(&m) if m == n => {}
            Some(&m) => {
                return Err(format!(
                    "nested lists of unequal lengths ({m} and {n}) at depth {level}"
                ))
            }
        }
        Ok(())
    }
    macro_rules! prim {
        ($t:ty, $variant:ident, $conv:expr) => {{
            let a = arr.as_primitive::<$t>();
            let Values::$variant(v) = out else {
                unreachable!("the leaf dtype fixes the values' kind")
            };
            v.extend(a.values()[start..end].iter().map($conv));
        }};
    }
    match arr.data_type() {
        DataType::List(_) => {
            let l = arr.as_list::<i32>();
            for i in start..end {
                let o = l.value_offsets();
                let (s, e) = (o[i] as usize, o[i + 1] as usize);
                level_len(shape, level, e - s)?;
                gather(l.values().as_ref(), s, e, level + 1, shape, out)?;
            }
        }
        DataType::LargeList(_) => {
            let l = arr.as_list::<i64>();
            for i in start..end {
                let o = l.value_offsets();
                let (s, e) = (o[i] as usize, o[i + 1] as usize);
                level_len(shape, level, e - s)?;
                gather(l.values().as_ref(), s, e, level + 1, shape, out)?;
            }
        }
        DataType::FixedSizeList(_, n) => {
            let l = arr.as_fixed_size_list();
            let n = *n as usize;
            for i in start..end {
                let s = l.value_offset(i) as usize;
                level_len(shape, level, n)?;
                gather(l.values().as_ref(), s, s + n, level + 1, shape, out)?;
            }
        }
        DataType::Struct(fields) if encoded_bytes(fields).is_some() => {
            let i = encoded_bytes(fields).expect("checked by the guard");
            let bytes = arr.as_struct().column(i);
            gather(bytes.as_ref(), start, end, level, shape, out)
                .map_err(|what| format!("`bytes`: {what}"))?;
        }
        DataType::Boolean => {
            let a = arr.as_boolean();
            let Values::Bool(v) = out else {
                unreachable!("the leaf dtype fixes the values' kind")
            };
            v.extend((start..end).map(|i| a.value(i)));
        }
        DataType::Int8 => prim!(Int8Type, I32, |&x| x as i32),
        DataType::Int16 => prim!(Int16Type, I32, |&x| x as i32),
        DataType::Int32 => prim!(Int32Type, I32, |&x| x),
        DataType::UInt16 => prim!(UInt16Type, I32, |&x| x as i32),
        DataType::UInt8 => prim!(UInt8Type, U8, |&x| x),
        DataType::Int64 => prim!(Int64Type, I64, |&x| x),
        DataType::UInt32 => prim!(UInt32Type, I64, |&x| x as i64),
        DataType::UInt64 => {
            let a = arr.as_primitive::<UInt64Type>();
            let Values::I64(v) = out else {
                unreachable!("the leaf dtype fixes the values' kind")
            };
            for &x in &a.values()[start..end] {
                let x = i64::try_from(x)
                    .map_err(|_| format!("uint64 value {x}, beyond the largest i64"))?;
                v.push(x);
            }
        }
        DataType::Float16 => prim!(Float16Type, F32, |&x| x.to_f32()),
        DataType::Float32 => prim!(Float32Type, F32, |&x| x),
        DataType::Float64 => prim!(Float64Type, F64, |&x| x),
        DataType::Utf8 => push_bytes(out, (start..end).map(|i| arr.as_string::<i32>().value(i))),
        DataType::LargeUtf8 => {
            push_bytes(out, (start..end).map(|i| arr.as_string::<i64>().value(i)))
        }
        DataType::Utf8View => push_bytes(out, (start..end).map(|i| arr.as_string_view().value(i))),
        DataType::Binary => push_bytes(out, (start..end).map(|i| arr.as_binary::<i32>().value(i))),
        DataType::LargeBinary => {
            push_bytes(out, (start..end).map(|i| arr.as_binary::<i64>().value(i)))
        }
        DataType::BinaryView => {
            push_bytes(out, (start..end).map(|i| arr.as_binary_view().value(i)))
        }
        DataType::FixedSizeBinary(_) => push_bytes(
            out,
            (start..end).map(|i| arr.as_fixed_size_binary().value(i)),
        ),
        other => return Err(format!("a value of unsupported Arrow type {other}")),
    }
    Ok(())
}

fn push_bytes<'a, S: AsRef<[u8]> + ?Sized + 'a>(
    out: &mut Values,
    items: impl Iterator<Item = &'a S>,
) {
    let Values::Bytes(b) = out else {
        unreachable!("the leaf dtype fixes the values' kind")
    };
    for s in items {
        b.push(s.as_ref());
    }
}

/// A reader of Arrow record batches that decodes only the columns it is
/// asked for (Parquet's and Arrow IPC's): its `RecordReader` reads are
/// these two steps, shared.
pub(crate) trait ProjectedRows {
    /// Decode only the columns `names` from here on (`None`: every column).
    fn project(&mut self, names: Option<Vec<String>>) -> Result<()>;
    /// The next row, of the columns projected.
    fn next_row(&mut self) -> Result<Option<Record>>;
}

/// `RecordReader::next_record` of a [`ProjectedRows`]: every column.
pub(crate) fn next_record_projected(r: &mut impl ProjectedRows) -> Result<Option<Record>> {
    r.project(None)?;
    r.next_row()
}

/// `RecordReader::read_chunk` of a [`ProjectedRows`]: the chunk's columns
/// only, within its budget.
pub(crate) fn read_chunk_projected(
    r: &mut impl ProjectedRows,
    chunk: &mut crate::chunk::Chunk,
    max_records: usize,
    max_bytes: usize,
) -> Result<usize> {
    super::check_chunk_budget(max_records, max_bytes)?;
    let names: Vec<String> = (chunk.schema().fields().iter())
        .map(|f| f.name.clone())
        .collect();
    r.project(Some(names))?;
    super::fill_chunk(chunk, max_records, max_bytes, || r.next_row())
}
