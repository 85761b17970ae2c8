//! JSON Lines (`.jsonl`, `.ndjson`): one JSON object per line, one record per
//! object, its fields in the object's order.
//!
//! This module owns the line reader (bounded by `max_record_bytes`, blank
//! lines skipped, `.gz`/`.zz` through [`open_stream`]), the conversion of
//! JSON values to [`Tensor`]s and the typed path [`read_typed`].
//!
//! Values: a number is a scalar (an integer literal → i64, any other → f64);
//! an array of numbers is f64 if any is not an integer literal, else i64
//! (nested arrays flatten in C order and keep their shape; ragged nesting is
//! an error); a bool or array of bools → bool; a string or array of strings
//! → bytes (UTF-8). An empty array is an i64 value of shape `[0]`. `null`, a
//! nested object or a duplicate key is an error naming the file, record,
//! byte offset of the line and field.
//!
//! ```
//! use feedline::format::{jsonl::JsonlFormat, Format, OpenOptions};
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("r.jsonl");
//! std::fs::write(&path, "{\"x\": [[1, 2], [3, 4.5]], \"tag\": \"a\"}\n\n{\"x\": 1}\n").unwrap();
//! let mut r = JsonlFormat.open(&path, &OpenOptions::default()).unwrap();
//! let rec = r.next_record().unwrap().unwrap();
//! assert_eq!(rec.fields[0].0, "x");
//! assert_eq!(rec.fields[0].1.shape, vec![2, 2]);
//! assert_eq!(rec.to_json(), serde_json::json!({"x": [1.0, 2.0, 3.0, 4.5], "tag": ["YQ=="]}));
//! let rec = r.next_record().unwrap().unwrap();
//! assert_eq!(rec.location.record, 1);
//! assert!(r.next_record().unwrap().is_none());
//! ```

use std::fmt;
use std::io::{self, BufRead, BufReader, Read};
use std::marker::PhantomData;
use std::path::Path;

use serde::de::{self, DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use super::{
    open_stream, source_id, Compression, Format, OpenOptions, RecordReader,
    DEFAULT_MAX_RECORD_BYTES,
};
use crate::error::{Error, Result};
use crate::provenance::{Location, SourceId};
use crate::record::Record;
use crate::values::{BytesList, Tensor, Values};

/// The JSON Lines format.
#[derive(Clone, Copy, Debug, Default)]
pub struct JsonlFormat;

impl Format for JsonlFormat {
    fn name(&self) -> &str {
        "jsonl"
    }

    fn extensions(&self) -> &[&str] {
        &["jsonl", "ndjson"]
    }

    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        opts.validate()?;
        let compression = opts
            .compression
            .unwrap_or_else(|| Compression::from_path(path));
        let mut r = JsonlReader {
            source: source_id(path),
            file: (compression == Compression::None && path.is_file())
                .then(|| std::fs::File::open(path).map(std::sync::Arc::new))
                .transpose()
                .map_err(|e| Error::io(path, e))?,
            lines: Lines::open(path, compression, opts.max_record_bytes)?,
            buf: Vec::new(),
            next: 0,
            dead: false,
        };
        while r.next < opts.start_record {
            match r.lines.read(&mut r.buf).map_err(|e| r.io_error(e))? {
                None => break,
                Some((_, Line::Blank)) => {}
                Some(_) => r.next += 1,
            }
        }
        Ok(Box::new(r))
    }
}

// ---------------------------------------------------------------------------
// Lines
// ---------------------------------------------------------------------------

/// What a line holds.
enum Line {
    /// Only whitespace.
    Blank,
    /// Content, in the caller's buffer (without the line end).
    Text,
    /// Longer than the limit (skipped; its length).
    TooLong(u64),
}

/// Reads lines of a (decompressed) stream, none longer than a limit.
struct Lines {
    r: BufReader<Box<dyn Read + Send>>,
    /// Byte offset of the next line.
    offset: u64,
    max: u64,
}

impl Lines {
    fn open(path: &Path, compression: Compression, max: u64) -> Result<Self> {
        Ok(Lines {
            r: BufReader::with_capacity(1 << 16, open_stream(path, compression)?),
            offset: 0,
            max,
        })
    }

    /// The next line into `buf`: its offset and kind, `None` at the end.
    fn read(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<(u64, Line)>> {
        buf.clear();
        let start = self.offset;
        let n = (&mut self.r).take(self.max + 1).read_until(b'\n', buf)?;
        if n == 0 {
            return Ok(None);
        }
        self.offset += n as u64;
        if buf.last() != Some(&b'\n') && n as u64 > self.max {
            // Skip the rest of the line without keeping it.
            let mut len = n as u64;
            loop {
                let chunk = self.r.fill_buf()?;
                if chunk.is_empty() {
                    break;
                }
                match chunk.iter().position(|&b| b == b'\n') {
                    Some(p) => {
                        self.r.consume(p + 1);
                        self.offset += p as u64 + 1;
                        len += p as u64;
                        break;
                    }
                    None => {
                        let l = chunk.len();
                        self.r.consume(l);
                        self.offset += l as u64;
                        len += l as u64;
                    }
                }
            }
            buf.clear();
            return Ok(Some((start, Line::TooLong(len))));
        }
        while matches!(buf.last(), Some(b'\n' | b'\r')) {
            buf.pop();
        }
        if start == 0 && buf.starts_with(b"\xef\xbb\xbf") {
            // A UTF-8 byte order mark at the start of the file.
            buf.drain(..3);
        }
        if buf.iter().all(|b| b.is_ascii_whitespace()) {
            return Ok(Some((start, Line::Blank)));
        }
        Ok(Some((start, Line::Text)))
    }
}

// ---------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------

struct JsonlReader {
    source: SourceId,
    /// An uncompressed regular file, for reads by position.
    file: Option<std::sync::Arc<std::fs::File>>,
    lines: Lines,
    buf: Vec<u8>,
    /// Index of the next record.
    next: u64,
    /// The stream failed: nothing more can be read.
    dead: bool,
}

impl JsonlReader {
    fn io_error(&mut self, e: io::Error) -> Error {
        self.dead = true;
        Error::corrupt(
            Location::new(self.source, self.next, Some(self.lines.offset)),
            format!("reading the stream: {e}"),
        )
    }
}

impl RecordReader for JsonlReader {
    fn next_record(&mut self) -> Result<Option<Record>> {
        if self.dead {
            return Err(Error::corrupt(
                Location::new(self.source, self.next, Some(self.lines.offset)),
                "the file cannot be read past an earlier error",
            ));
        }
        loop {
            let (offset, line) = match self.lines.read(&mut self.buf) {
                Ok(None) => return Ok(None),
                Ok(Some(x)) => x,
                Err(e) => return Err(self.io_error(e)),
            };
            let location = Location::new(self.source, self.next, Some(offset));
            match line {
                Line::Blank => continue,
                Line::TooLong(len) => {
                    self.next += 1;
                    return Err(Error::corrupt(
                        location,
                        format!(
                            "line of {len} bytes is longer than max_record_bytes ({})",
                            self.lines.max
                        ),
                    ));
                }
                Line::Text => {
                    self.next += 1;
                    let fields =
                        parse_record(&self.buf).map_err(|e| json_error(location.clone(), e))?;
                    return Ok(Some(Record { fields, location }));
                }
            }
        }
    }

    fn next_index(&self) -> u64 {
        self.next
    }

    /// An uncompressed regular file: read on from `offset`, with a buffer
    /// the size of `offset..end` (at least 256 bytes, at most 64 KiB).
    fn seek_indexed(&mut self, record: u64, offset: u64, end: u64) -> Result<bool> {
        let Some(file) = &self.file else {
            return Ok(false);
        };
        let cap = end.saturating_sub(offset).clamp(256, 64 << 10) as usize;
        let stream: Box<dyn Read + Send> = Box::new(Pread {
            file: file.clone(),
            pos: offset,
        });
        self.lines.r = BufReader::with_capacity(cap, stream);
        self.lines.offset = offset;
        self.next = record;
        self.dead = false;
        Ok(true)
    }

    fn can_continue(&self) -> bool {
        !self.dead
    }
}

/// A file read from a position on by `pread`, so that a seek costs no system call.
struct Pread {
    file: std::sync::Arc<std::fs::File>,
    pos: u64,
}

impl Read for Pread {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

fn json_error(location: Location, e: serde_json::Error) -> Error {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax | Category::Eof => Error::corrupt(location, format!("invalid JSON: {e}")),
        _ => Error::corrupt(location, e.to_string()),
    }
}

/// Parse one line into a record's fields, in the object's order.
fn parse_record(line: &[u8]) -> serde_json::Result<Vec<(String, Tensor)>> {
    let mut de = serde_json::Deserializer::from_slice(line);
    let fields = RecordSeed.deserialize(&mut de)?;
    de.end()?;
    Ok(fields)
}

struct RecordSeed;

impl<'de> DeserializeSeed<'de> for RecordSeed {
    type Value = Vec<(String, Tensor)>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RecordSeed {
    type Value = Vec<(String, Tensor)>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut fields: Vec<(String, Tensor)> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if fields.iter().any(|(n, _)| *n == key) {
                return Err(de::Error::custom(format!("field `{key}` appears twice")));
            }
            let t = map.next_value_seed(ValueSeed { field: &key })?;
            fields.push((key, t));
        }
        Ok(fields)
    }
}

/// Elements gathered from a (nested) array.
enum Acc {
    None,
    Int(Vec<i64>),
    Float(Vec<f64>),
    Bool(Vec<bool>),
    Str(BytesList),
}

impl Acc {
    fn kind(&self) -> &'static str {
        match self {
            Acc::None => "nothing",
            Acc::Int(_) | Acc::Float(_) => "numbers",
            Acc::Bool(_) => "booleans",
            Acc::Str(_) => "strings",
        }
    }

    fn into_values(self) -> Values {
        match self {
            Acc::None => Values::I64(Vec::new()),
            Acc::Int(v) => Values::I64(v),
            Acc::Float(v) => Values::F64(v),
            Acc::Bool(v) => Values::Bool(v),
            Acc::Str(b) => Values::Bytes(b),
        }
    }
}

/// One field's value.
struct ValueSeed<'a> {
    field: &'a str,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Tensor;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<Tensor, D::Error> {
        let mut acc = Acc::None;
        let shape = d.deserialize_any(ElemVisitor {
            field: self.field,
            acc: &mut acc,
        })?;
        Ok(Tensor {
            values: acc.into_values(),
            shape,
        })
    }
}

/// Visits a value or a nested array, appending elements to `acc`; returns its shape.
struct ElemVisitor<'a, 'f> {
    field: &'f str,
    acc: &'a mut Acc,
}

impl<'de> DeserializeSeed<'de> for ElemVisitor<'_, '_> {
    type Value = Vec<usize>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Vec<usize>, D::Error> {
        d.deserialize_any(self)
    }
}

impl ElemVisitor<'_, '_> {
    fn mixed<E: de::Error>(&self, what: &str) -> E {
        E::custom(format!(
            "field `{}`: an array mixes {} and {what}",
            self.field,
            self.acc.kind()
        ))
    }

    fn int<E: de::Error>(self, v: i64) -> std::result::Result<Vec<usize>, E> {
        match self.acc {
            Acc::None => *self.acc = Acc::Int(vec![v]),
            Acc::Int(x) => x.push(v),
            Acc::Float(x) => x.push(v as f64),
            _ => return Err(self.mixed("numbers")),
        }
        Ok(vec![])
    }
}

impl<'de> Visitor<'de> for ElemVisitor<'_, '_> {
    type Value = Vec<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "a number, bool, string or array of them for field `{}`",
            self.field
        )
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Vec<usize>, E> {
        match self.acc {
            Acc::None => *self.acc = Acc::Bool(vec![v]),
            Acc::Bool(x) => x.push(v),
            _ => return Err(self.mixed("booleans")),
        }
        Ok(vec![])
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Vec<usize>, E> {
        self.int(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Vec<usize>, E> {
        let v = i64::try_from(v).map_err(|_| {
            E::custom(format!(
                "field `{}`: integer {v} does not fit i64",
                self.field
            ))
        })?;
        self.int(v)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Vec<usize>, E> {
        match self.acc {
            Acc::None => *self.acc = Acc::Float(vec![v]),
            Acc::Float(x) => x.push(v),
            Acc::Int(x) => {
                let mut f: Vec<f64> = x.iter().map(|&i| i as f64).collect();
                f.push(v);
                *self.acc = Acc::Float(f);
            }
            _ => return Err(self.mixed("numbers")),
        }
        Ok(vec![])
    }

    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Vec<usize>, E> {
        match self.acc {
            Acc::None => {
                let mut b = BytesList::new();
                b.push(v.as_bytes());
                *self.acc = Acc::Str(b);
            }
            Acc::Str(b) => b.push(v.as_bytes()),
            _ => return Err(self.mixed("strings")),
        }
        Ok(vec![])
    }

    fn visit_unit<E: de::Error>(self) -> std::result::Result<Vec<usize>, E> {
        Err(E::custom(format!(
            "field `{}`: null is not a value (leave the field out or give a value)",
            self.field
        )))
    }

    fn visit_none<E: de::Error>(self) -> std::result::Result<Vec<usize>, E> {
        self.visit_unit()
    }

    fn visit_map<A: MapAccess<'de>>(self, _map: A) -> std::result::Result<Vec<usize>, A::Error> {
        Err(de::Error::custom(format!(
            "field `{}`: nested objects are not supported",
            self.field
        )))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Vec<usize>, A::Error> {
        let field = self.field;
        let acc = self.acc;
        let mut first: Option<Vec<usize>> = None;
        let mut len = 0usize;
        while let Some(shape) = seq.next_element_seed(ElemVisitor {
            field,
            acc: &mut *acc,
        })? {
            match &first {
                None => first = Some(shape),
                Some(f) if *f == shape => {}
                Some(f) => {
                    return Err(de::Error::custom(format!(
                        "field `{field}`: ragged nested array: element {len} has shape {shape:?}, element 0 has {f:?}"
                    )))
                }
            }
            len += 1;
        }
        let mut shape = vec![len];
        shape.extend(first.unwrap_or_default());
        Ok(shape)
    }
}

// ---------------------------------------------------------------------------
// Typed path
// ---------------------------------------------------------------------------

/// Read a JSON Lines file as values of `T` (blank lines skipped). Each item
/// is one line's value or an error naming the file, record and byte offset;
/// after a read error (e.g. a corrupt gzip stream) the iterator ends.
///
/// What it is for: one file's records as your own serde types, in file
/// order — inspecting data, preprocessing, tests. It has none of the
/// loader's work (no shuffle, batching, passes, sharding, parallel readers,
/// error policy); to train, read the file with the `Loader` and take typed
/// views of its batches ([`Batch::view`](crate::Batch::view)), or each
/// batch's rows as your type ([`Batch::rows`](crate::Batch::rows)).
///
/// ```
/// use feedline::format::{jsonl, Compression};
/// #[derive(serde::Deserialize, Debug)]
/// struct Row { x: Vec<f32>, y: i64 }
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("r.jsonl");
/// std::fs::write(&path, "{\"x\": [1.0], \"y\": 3}\n{\"x\": [], \"y\": \"bad\"}\n").unwrap();
/// let rows: Vec<_> = jsonl::read_typed::<Row>(&path, Compression::None).unwrap().collect();
/// assert_eq!(rows[0].as_ref().unwrap().y, 3);
/// assert!(rows[1].as_ref().unwrap_err().to_string().contains("record 1, offset 21"));
/// ```
pub fn read_typed<T: DeserializeOwned>(
    path: impl AsRef<Path>,
    compression: Compression,
) -> Result<impl Iterator<Item = Result<T>>> {
    let path = path.as_ref();
    Ok(Typed::<T> {
        source: source_id(path),
        lines: Lines::open(path, compression, DEFAULT_MAX_RECORD_BYTES)?,
        buf: Vec::new(),
        next: 0,
        done: false,
        _t: PhantomData,
    })
}

struct Typed<T> {
    source: SourceId,
    lines: Lines,
    buf: Vec<u8>,
    next: u64,
    done: bool,
    _t: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> Iterator for Typed<T> {
    type Item = Result<T>;

    fn next(&mut self) -> Option<Result<T>> {
        if self.done {
            return None;
        }
        loop {
            let (offset, line) = match self.lines.read(&mut self.buf) {
                Ok(None) => {
                    self.done = true;
                    return None;
                }
                Ok(Some(x)) => x,
                Err(e) => {
                    self.done = true;
                    return Some(Err(Error::corrupt(
                        Location::new(self.source, self.next, Some(self.lines.offset)),
                        format!("reading the stream: {e}"),
                    )));
                }
            };
            let location = Location::new(self.source, self.next, Some(offset));
            match line {
                Line::Blank => continue,
                Line::TooLong(len) => {
                    self.next += 1;
                    return Some(Err(Error::corrupt(
                        location,
                        format!(
                            "line of {len} bytes is longer than max_record_bytes ({})",
                            self.lines.max
                        ),
                    )));
                }
                Line::Text => {
                    self.next += 1;
                    return Some(
                        serde_json::from_slice(&self.buf).map_err(|e| json_error(location, e)),
                    );
                }
            }
        }
    }
}
