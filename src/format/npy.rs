//! NumPy `.npy` and `.npz` files: row `i` of each array is instance `i`.
//!
//! This module owns the NPY header parser (format versions 1.0, 2.0 and 3.0,
//! the Python-literal dict header), the element decoders (every byte order,
//! C and Fortran order, half floats converted by hand), the [`NpyFormat`]
//! (one array, its field named after the file stem) and the [`NpzFormat`]
//! (a zip of `.npy` entries, stored or deflated, one field per entry) and
//! the [`NpyColumnsFormat`] (several `.npy` files as the columns of the
//! same rows: `npy-columns:images.npy,labels.npy`).
//!
//! Element types become these [`DType`]s: `b1` → bool, `i1`/`i2`/`i4` → i32,
//! `i8` → i64, `u1` → u8, `u2`/`u4` → i64, `u8` → i64 (a value above
//! `i64::MAX` is an error naming the record and field), `f2`/`f4` → f32,
//! `f8` → f64. A record's [`Tensor`] has the row's shape (`shape[1..]`, `[]`
//! for a 1-D array).
//!
//! Uncompressed `.npy` files and stored npz entries are read by position
//! (`pread`, never a memory map: a file shortened while it is read is an
//! [`Error::Io`] naming it, not a `SIGBUS`), a block of rows at a time into
//! a reused page-aligned window (a Fortran-order array by one read per
//! element of a row); [`RecordReader::read_chunk`] decodes whole blocks
//! into the chunk's columns. Compressed `.npy.gz` files, `.npy` that are
//! not regular files (a FIFO, a pipe) and deflated npz entries are read as
//! streams through a bounded buffer (a Fortran-order array in a stream is
//! loaded whole, up to `max_record_bytes`). An `.npz` must be a regular
//! file (its directory is at its end).
//!
//! With `verify_checksums`, every npz entry's CRC-32 is checked over the
//! whole entry before any row of the file is read (a deflated entry is
//! decompressed twice: once for the check, in bounded memory, once for the
//! rows): a CRC covers its entry as a whole, so a corrupt entry is an
//! [`Error::BadFile`] naming it, and none of its rows — neither the bad one
//! nor any other — is delivered.
//!
//! ```
//! use feedline::format::{npy::NpyFormat, Format, OpenOptions};
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("v.npy");
//! let mut file = b"\x93NUMPY\x01\x00".to_vec();
//! let header = "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }";
//! let header = format!("{header:<117}\n");
//! file.extend_from_slice(&(header.len() as u16).to_le_bytes());
//! file.extend_from_slice(header.as_bytes());
//! for v in [7i32, 8, 9] {
//!     file.extend_from_slice(&v.to_le_bytes());
//! }
//! std::fs::write(&path, &file).unwrap();
//! let mut r = NpyFormat.open(&path, &OpenOptions::default()).unwrap();
//! assert_eq!(r.len_hint(), Some(3));
//! let rec = r.next_record().unwrap().unwrap();
//! assert_eq!(rec.to_json(), serde_json::json!({"v": [7]}));
//! ```

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{
    check_chunk_budget, decompress, source_id, Compression, Format, OpenOptions, RecordReader,
};
use crate::chunk::Chunk;
use crate::error::{Error, Result};
use crate::input::{open_input, InputFile, Opened, RangeReader, Window};
use crate::provenance::{Location, SourceId};
use crate::record::Record;
use crate::schema::{check_elements, check_shape, DType};
use crate::values::{Tensor, Values};

/// The `.npy` format: one array per file, its field named after the file stem.
#[derive(Clone, Copy, Debug, Default)]
pub struct NpyFormat;

/// The `.npz` format: a zip of `.npy` entries, one field per entry (named
/// after the entry, minus `.npy`); all arrays must have the same number of rows.
#[derive(Clone, Copy, Debug, Default)]
pub struct NpzFormat;

impl Format for NpyFormat {
    fn name(&self) -> &str {
        "npy"
    }

    fn extensions(&self) -> &[&str] {
        &["npy"]
    }

    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        Ok(Box::new(open_npy(path, opts)?))
    }
}

impl Format for NpzFormat {
    fn name(&self) -> &str {
        "npz"
    }

    fn extensions(&self) -> &[&str] {
        &["npz"]
    }

    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        Ok(Box::new(open_npz(path, opts)?))
    }
}

/// A file group: several `.npy` files as the columns of the same rows —
/// numpy's common `images.npy` + `labels.npy` layout (a Paddle/MXNet
/// tuple of files). Its input spec is `npy-columns:` and the member paths,
/// comma-separated (`npy-columns:data/images.npy,data/labels.npy`; a member
/// path cannot contain a comma); [`columns_spec`] writes one. Each member
/// is one field, named after its file stem, so the stems must differ; all
/// members must have the same number of rows (checked when the group is
/// opened: an error names each member and its rows). Row `i` of the group
/// is row `i` of every member; its records are located as
/// `npy-columns:…: record i`, and a bad row names the member it is in.
///
/// ```
/// use feedline::format::{npy::columns_spec, OpenOptions, Registry};
/// # let dir = tempfile::tempdir().unwrap();
/// # let (images, labels) = (dir.path().join("images.npy"), dir.path().join("labels.npy"));
/// ndarray_npy::write_npy(&images, &ndarray::Array3::<f32>::zeros((5, 2, 2))).unwrap();
/// ndarray_npy::write_npy(&labels, &ndarray::Array1::<i64>::from(vec![0, 1, 2, 3, 4])).unwrap();
/// let spec = columns_spec([&images, &labels]);
/// let mut r = Registry::with_builtin().open(&spec, None, &OpenOptions::default()).unwrap();
/// assert_eq!(r.len_hint(), Some(5));
/// let rec = r.next_record().unwrap().unwrap();
/// assert_eq!(rec.to_json(), serde_json::json!({"images": [0.0, 0.0, 0.0, 0.0], "labels": [0]}));   // values, flat
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct NpyColumnsFormat;

/// The format name of [`NpyColumnsFormat`], the prefix of its specs.
pub const NPY_COLUMNS: &str = "npy-columns";

/// The input spec of a [`NpyColumnsFormat`] group: `npy-columns:a,b,…`.
pub fn columns_spec<P: AsRef<Path>>(members: impl IntoIterator<Item = P>) -> String {
    let members: Vec<String> = members
        .into_iter()
        .map(|p| p.as_ref().to_string_lossy().into_owned())
        .collect();
    format!("{NPY_COLUMNS}:{}", members.join(","))
}

impl Format for NpyColumnsFormat {
    fn name(&self) -> &str {
        NPY_COLUMNS
    }

    fn extensions(&self) -> &[&str] {
        &[]
    }

    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        Ok(Box::new(open_npy_columns(path, opts)?))
    }
}

/// Open a group of `.npy` files (`path` is the members, comma-separated).
fn open_npy_columns(group: &Path, opts: &OpenOptions) -> Result<NpReader> {
    opts.validate()?;
    let text = group.to_string_lossy();
    let members: Vec<&str> = text.split(',').map(str::trim).collect();
    if members.len() < 2 || members.iter().any(|m| m.is_empty()) {
        return Err(bad(
            group,
            format!(
                "a {NPY_COLUMNS} group is two or more .npy paths separated by commas \
                 (`{NPY_COLUMNS}:images.npy,labels.npy`), got {} non-empty of {}",
                members.iter().filter(|m| !m.is_empty()).count(),
                members.len()
            ),
        ));
    }
    // Each member from row 0: the group's reader positions them all.
    let member_opts = OpenOptions {
        start_record: 0,
        compression: None,
        ..opts.clone()
    };
    let mut arrays: Vec<Array> = Vec::with_capacity(members.len());
    let mut sources: Vec<(String, u64)> = Vec::with_capacity(members.len());
    for m in &members {
        let path = Path::new(m);
        let mut o = member_opts.clone();
        o.compression = Some(Compression::from_path(path));
        let mut r = open_npy(path, &o)?;
        let mut array = r.arrays.remove(0);
        if let Some(other) = arrays.iter().position(|a| a.name == array.name) {
            return Err(bad(
                group,
                format!(
                    "`{}` and `{m}` would both be field `{}` (a member's field is its file stem): \
                     rename one",
                    sources[other].0, array.name
                ),
            ));
        }
        array.label = format!("`{m}`: ");
        sources.push((m.to_string(), array.h.rows));
        arrays.push(array);
    }
    let rows = sources[0].1;
    if sources.iter().any(|(_, n)| *n != rows) {
        let list: Vec<String> = sources
            .iter()
            .map(|(m, n)| format!("`{m}` has {n}"))
            .collect();
        return Err(bad(
            group,
            format!(
                "the members of a {NPY_COLUMNS} group are columns of the same rows, but they \
                 have different numbers of rows: {}",
                list.join(", ")
            ),
        ));
    }
    NpReader::new(group, arrays, opts, false, Vec::new())
}

// ---------------------------------------------------------------------------
// Header
// ---------------------------------------------------------------------------

/// The NPY magic string.
const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// Rows per block when a block has to be copied (stream buffer, Fortran gather).
const BLOCK_BYTES: usize = 1 << 20;

/// Bytes read past an array's data, at most, to reach the end of a stream.
const MAX_TRAILING: u64 = 1 << 20;

/// Element kind of an array, as in the `descr` string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    B1,
    I1,
    I2,
    I4,
    I8,
    U1,
    U2,
    U4,
    U8,
    F2,
    F4,
    F8,
}

impl Kind {
    fn parse(kind: u8, size: &str) -> Option<Kind> {
        Some(match (kind, size) {
            (b'b', "1") => Kind::B1,
            (b'i', "1") => Kind::I1,
            (b'i', "2") => Kind::I2,
            (b'i', "4") => Kind::I4,
            (b'i', "8") => Kind::I8,
            (b'u', "1") => Kind::U1,
            (b'u', "2") => Kind::U2,
            (b'u', "4") => Kind::U4,
            (b'u', "8") => Kind::U8,
            (b'f', "2") => Kind::F2,
            (b'f', "4") => Kind::F4,
            (b'f', "8") => Kind::F8,
            _ => return None,
        })
    }

    fn size(self) -> usize {
        match self {
            Kind::B1 | Kind::I1 | Kind::U1 => 1,
            Kind::I2 | Kind::U2 | Kind::F2 => 2,
            Kind::I4 | Kind::U4 | Kind::F4 => 4,
            Kind::I8 | Kind::U8 | Kind::F8 => 8,
        }
    }

    /// The dtype a record holds for this kind.
    fn dtype(self) -> DType {
        match self {
            Kind::B1 => DType::Bool,
            Kind::I1 | Kind::I2 | Kind::I4 => DType::I32,
            Kind::I8 | Kind::U2 | Kind::U4 | Kind::U8 => DType::I64,
            Kind::U1 => DType::U8,
            Kind::F2 | Kind::F4 => DType::F32,
            Kind::F8 => DType::F64,
        }
    }
}

/// A parsed NPY header.
#[derive(Clone, Debug)]
struct Header {
    descr: String,
    kind: Kind,
    /// The file's bytes are little-endian (irrelevant for 1-byte kinds).
    little: bool,
    fortran: bool,
    shape: Vec<usize>,
    /// Bytes from the start of the file (entry) to the array data.
    data_offset: usize,
    rows: u64,
    row_elems: usize,
    row_bytes: usize,
    data_bytes: u64,
}

/// Magic, version and header length: returns (where the header text
/// starts, its length). `b` holds at least the first 12 bytes when there are.
fn parse_preamble(b: &[u8]) -> std::result::Result<(usize, usize), String> {
    if b.len() < 8 || &b[..6] != MAGIC {
        let shown: Vec<String> = b.iter().take(8).map(|x| format!("{x:02x}")).collect();
        return Err(format!(
            "not an NPY file: offset 0: expected the magic \\x93NUMPY, found bytes [{}]",
            shown.join(" ")
        ));
    }
    let (major, minor) = (b[6], b[7]);
    match major {
        1 => {
            if b.len() < 10 {
                return Err("offset 8: file ends inside the header length".into());
            }
            Ok((10, u16::from_le_bytes([b[8], b[9]]) as usize))
        }
        2 | 3 => {
            if b.len() < 12 {
                return Err("offset 8: file ends inside the header length".into());
            }
            let n = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
            Ok((
                12,
                usize::try_from(n).map_err(|_| "header too long".to_string())?,
            ))
        }
        _ => Err(format!(
            "offset 6: unsupported NPY format version {major}.{minor} (supported: 1.0, 2.0, 3.0)"
        )),
    }
}

/// A Python literal, as far as NPY headers use them.
#[derive(Debug)]
enum Py {
    Str(Vec<u8>),
    Int(i128),
    Bool(bool),
    None,
    Tuple(Vec<Py>),
    List(Vec<Py>),
    Dict(Vec<(Py, Py)>),
}

struct PyParser<'a> {
    s: &'a [u8],
    pos: usize,
    /// File offset of `s[0]`, for messages.
    base: usize,
}

impl PyParser<'_> {
    fn err(&self, what: impl std::fmt::Display) -> String {
        format!("header at offset {}: {what}", self.base + self.pos)
    }

    fn ws(&mut self) {
        while self.pos < self.s.len() && matches!(self.s[self.pos], b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.pos).copied()
    }

    fn expect(&mut self, c: u8) -> std::result::Result<(), String> {
        match self.peek() {
            Some(x) if x == c => {
                self.pos += 1;
                Ok(())
            }
            Some(x) => Err(self.err(format!("expected `{}`, found {}", c as char, show_byte(x)))),
            None => Err(self.err(format!("expected `{}`, found the end", c as char))),
        }
    }

    fn value(&mut self, depth: usize) -> std::result::Result<Py, String> {
        if depth > 32 {
            return Err(self.err("literal nested too deeply"));
        }
        match self.peek() {
            None => Err(self.err("expected a value, found the end")),
            Some(q @ (b'\'' | b'"')) => {
                self.pos += 1;
                let mut out = Vec::new();
                loop {
                    match self.s.get(self.pos) {
                        None => return Err(self.err("unterminated string")),
                        Some(&b'\\') => {
                            let c = *self
                                .s
                                .get(self.pos + 1)
                                .ok_or_else(|| self.err("unterminated string"))?;
                            out.push(c);
                            self.pos += 2;
                        }
                        Some(&c) if c == q => {
                            self.pos += 1;
                            return Ok(Py::Str(out));
                        }
                        Some(&c) => {
                            out.push(c);
                            self.pos += 1;
                        }
                    }
                }
            }
            Some(open @ (b'(' | b'[')) => {
                self.pos += 1;
                let close = if open == b'(' { b')' } else { b']' };
                let mut items = Vec::new();
                let mut comma = false;
                loop {
                    if self.peek() == Some(close) {
                        self.pos += 1;
                        break;
                    }
                    if !items.is_empty() && !comma {
                        return Err(self.err(format!("expected `,` or `{}`", close as char)));
                    }
                    items.push(self.value(depth + 1)?);
                    comma = self.peek() == Some(b',');
                    if comma {
                        self.pos += 1;
                    }
                }
                // `(x)` without a comma is a parenthesized value, not a tuple.
                if open == b'(' && items.len() == 1 && !comma {
                    return Ok(items.pop().expect("one item"));
                }
                Ok(if open == b'(' {
                    Py::Tuple(items)
                } else {
                    Py::List(items)
                })
            }
            Some(b'{') => {
                self.pos += 1;
                let mut items = Vec::new();
                loop {
                    if self.peek() == Some(b'}') {
                        self.pos += 1;
                        break;
                    }
                    let k = self.value(depth + 1)?;
                    self.expect(b':')?;
                    let v = self.value(depth + 1)?;
                    items.push((k, v));
                    match self.peek() {
                        Some(b',') => self.pos += 1,
                        Some(b'}') => {}
                        Some(x) => {
                            return Err(
                                self.err(format!("expected `,` or `}}`, found {}", show_byte(x)))
                            )
                        }
                        None => return Err(self.err("expected `}`, found the end")),
                    }
                }
                Ok(Py::Dict(items))
            }
            Some(c) if c == b'-' || c.is_ascii_digit() => {
                let neg = c == b'-';
                if neg {
                    self.pos += 1;
                }
                let start = self.pos;
                let mut v: i128 = 0;
                while let Some(d) = self.s.get(self.pos).filter(|d| d.is_ascii_digit()) {
                    v = v
                        .checked_mul(10)
                        .and_then(|v| v.checked_add((d - b'0') as i128))
                        .filter(|v| *v <= u64::MAX as i128)
                        .ok_or_else(|| self.err("integer too large"))?;
                    self.pos += 1;
                }
                if self.pos == start {
                    return Err(self.err("expected digits after `-`"));
                }
                // Python 2 long suffix, as old NumPy wrote it.
                if matches!(self.s.get(self.pos), Some(b'L' | b'l')) {
                    self.pos += 1;
                }
                Ok(Py::Int(if neg { -v } else { v }))
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let start = self.pos;
                while self
                    .s
                    .get(self.pos)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
                {
                    self.pos += 1;
                }
                match &self.s[start..self.pos] {
                    b"True" => Ok(Py::Bool(true)),
                    b"False" => Ok(Py::Bool(false)),
                    b"None" => Ok(Py::None),
                    w => {
                        self.pos = start;
                        Err(self.err(format!("unexpected word `{}`", String::from_utf8_lossy(w))))
                    }
                }
            }
            Some(c) => Err(self.err(format!("unexpected {}", show_byte(c)))),
        }
    }
}

fn show_byte(c: u8) -> String {
    if c.is_ascii_graphic() {
        format!("`{}`", c as char)
    } else {
        format!("byte 0x{c:02x}")
    }
}

/// Parse the header text (`text` starts at file offset `text_start`).
fn parse_header(text: &[u8], text_start: usize) -> std::result::Result<Header, String> {
    let mut p = PyParser {
        s: text,
        pos: 0,
        base: text_start,
    };
    let dict = p.value(0)?;
    p.ws();
    if p.pos < text.len() {
        return Err(p.err(format!(
            "unexpected {} after the header dict",
            show_byte(text[p.pos])
        )));
    }
    let items = match dict {
        Py::Dict(items) => items,
        other => {
            return Err(format!(
                "header at offset {text_start}: expected a dict, found {other:?}"
            ))
        }
    };
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    for (k, v) in items {
        match k {
            Py::Str(k) if k == b"descr" => descr = Some(v),
            Py::Str(k) if k == b"fortran_order" => fortran = Some(v),
            Py::Str(k) if k == b"shape" => shape = Some(v),
            _ => {}
        }
    }
    let missing = |k: &str| format!("header at offset {text_start}: no `{k}` key");
    let descr = match descr.ok_or_else(|| missing("descr"))? {
        Py::Str(s) => String::from_utf8_lossy(&s).into_owned(),
        Py::List(_) => {
            return Err(
                "unsupported dtype: structured arrays (a list descr) are not supported".into(),
            )
        }
        other => return Err(format!("`descr` is not a string: {other:?}")),
    };
    let fortran = match fortran.ok_or_else(|| missing("fortran_order"))? {
        Py::Bool(b) => b,
        other => return Err(format!("`fortran_order` is not True/False: {other:?}")),
    };
    let dims = match shape.ok_or_else(|| missing("shape"))? {
        Py::Tuple(d) | Py::List(d) => d,
        Py::Int(n) => vec![Py::Int(n)],
        other => return Err(format!("`shape` is not a tuple: {other:?}")),
    };
    let mut shape = Vec::with_capacity(dims.len());
    for d in dims {
        match d {
            Py::Int(n) if n >= 0 => shape
                .push(usize::try_from(n).map_err(|_| format!("shape dimension {n} is too large"))?),
            other => {
                return Err(format!(
                    "shape dimension {other:?} is not a non-negative integer"
                ))
            }
        }
    }
    let (kind, little) = parse_descr(&descr)?;
    if shape.is_empty() {
        return Err("a 0-dimensional array (shape ()) has no rows to read as records".into());
    }
    let rows = shape[0] as u64;
    let row_elems = if shape[1..].contains(&0) {
        0
    } else {
        shape[1..]
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| format!("shape {shape:?}: the element count overflows"))?
    };
    let overflow = || format!("shape {shape:?} of {descr}: the byte size overflows");
    let row_bytes = row_elems.checked_mul(kind.size()).ok_or_else(overflow)?;
    let data_bytes = (row_bytes as u64).checked_mul(rows).ok_or_else(overflow)?;
    if row_bytes == 0 && rows > u32::MAX as u64 {
        return Err(format!(
            "shape {shape:?}: {rows} empty rows is implausible (more than 2^32)"
        ));
    }
    Ok(Header {
        descr,
        kind,
        little,
        fortran,
        shape,
        data_offset: text_start + text.len(),
        rows,
        row_elems,
        row_bytes,
        data_bytes,
    })
}

/// `'<f4'` → (kind, little-endian).
fn parse_descr(descr: &str) -> std::result::Result<(Kind, bool), String> {
    let b = descr.as_bytes();
    let (order, rest) = match b.first() {
        Some(c @ (b'<' | b'>' | b'|' | b'=')) => (*c, &descr[1..]),
        _ => (b'|', descr),
    };
    let unsupported = |why: &str| format!("unsupported dtype `{descr}`: {why}");
    let (k, size) = match rest.as_bytes().first() {
        // Not `&rest[1..]`: a non-ASCII first character (or the U+FFFD of
        // invalid UTF-8) is more than one byte; it is no kind anyway.
        Some(k) => (*k, rest.get(1..).unwrap_or("")),
        None => return Err(unsupported("empty type")),
    };
    let kind = Kind::parse(k, size).ok_or_else(|| {
        unsupported(match k {
            b'c' => "complex numbers are not supported",
            b'O' => "Python objects are not supported",
            b'S' | b'a' | b'U' => "strings are not supported",
            b'V' => "void/structured types are not supported",
            b'M' | b'm' => "datetimes are not supported",
            _ => "supported: b1, i1, i2, i4, i8, u1, u2, u4, u8, f2, f4, f8",
        })
    })?;
    let little = match order {
        b'<' => true,
        b'>' => false,
        _ => cfg!(target_endian = "little"),
    };
    Ok((kind, little))
}

/// Read a header from byte `start` of `file`, where `avail` bytes are (a
/// whole file or entry): the header text is read only if it fits there.
/// Errors are messages without the file name.
fn header_from_file(
    file: &InputFile,
    start: u64,
    avail: u64,
) -> Result<std::result::Result<Header, String>> {
    let mut pre = [0u8; 12];
    let n = avail.min(12) as usize;
    file.read_at_init(start, &mut pre[..n])?;
    let (text_start, len) = match parse_preamble(&pre[..n]) {
        Ok(p) => p,
        Err(e) => return Ok(Err(e)),
    };
    if (text_start + len) as u64 > avail {
        return Ok(Err(format!(
            "offset 8: header length {len} runs past the end of the file ({avail} bytes)"
        )));
    }
    let mut text = vec![0u8; len];
    file.read_at_init(start + text_start as u64, &mut text)?;
    Ok(parse_header(&text, text_start))
}

/// Read a header from a stream; allocation grows with the bytes actually
/// read and stops at `max` bytes.
fn header_from_stream(r: &mut dyn Read, max: u64) -> std::result::Result<Header, String> {
    let mut pre = Vec::with_capacity(12);
    r.take(8)
        .read_to_end(&mut pre)
        .map_err(|e| format!("reading the header: {e}"))?;
    if pre.len() >= 8 && &pre[..6] == MAGIC && pre[6] >= 2 {
        r.take(4)
            .read_to_end(&mut pre)
            .map_err(|e| format!("reading the header: {e}"))?;
    } else if pre.len() >= 8 && &pre[..6] == MAGIC {
        r.take(2)
            .read_to_end(&mut pre)
            .map_err(|e| format!("reading the header: {e}"))?;
    }
    let (start, len) = parse_preamble(&pre)?;
    if len as u64 > max {
        return Err(format!(
            "offset 8: header length {len} exceeds max_record_bytes ({max})"
        ));
    }
    let mut text = Vec::with_capacity(len.min(4096));
    r.take(len as u64)
        .read_to_end(&mut text)
        .map_err(|e| format!("reading the header: {e}"))?;
    if text.len() < len {
        return Err(format!(
            "offset {}: stream ends inside the header ({} of {len} bytes)",
            start + text.len(),
            text.len()
        ));
    }
    parse_header(&text, start)
}

// ---------------------------------------------------------------------------
// Element decoding
// ---------------------------------------------------------------------------

macro_rules! extend_num {
    ($v:expr, $src:expr, $t:ty, $little:expr, $map:expr) => {{
        const N: usize = std::mem::size_of::<$t>();
        let src: &[u8] = $src;
        #[allow(clippy::redundant_closure_call)]
        let f = $map;
        $v.reserve(src.len() / N);
        if $little {
            $v.extend(src.chunks_exact(N).map(|c| {
                f(<$t>::from_le_bytes(
                    c.try_into().expect("chunks_exact yields N bytes"),
                ))
            }))
        } else {
            $v.extend(src.chunks_exact(N).map(|c| {
                f(<$t>::from_be_bytes(
                    c.try_into().expect("chunks_exact yields N bytes"),
                ))
            }))
        }
    }};
}

/// Decode IEEE 754 half-precision bits to f32 (exact: every half is an f32).
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let mant = (h & 0x3ff) as u32;
    let bits = match (exp, mant) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: m × 2^-24; normalize into an f32.
            let shift = m.leading_zeros() - 21; // bring the top bit to bit 10
            let m = (m << shift) & 0x3ff;
            let e = 113 - shift; // 127 - 14 - shift
            sign | (e << 23) | (m << 13)
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13) | 0x0040_0000,
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// Append the elements in `src` (whole elements of `kind`) to `out`, which
/// has the kind's dtype. `Err(i)`: element `i` is a u8 that does not fit i64.
fn decode(
    kind: Kind,
    little: bool,
    src: &[u8],
    out: &mut Values,
) -> std::result::Result<(), usize> {
    match (kind, out) {
        (Kind::B1, Values::Bool(v)) => v.extend(src.iter().map(|&b| b != 0)),
        (Kind::I1, Values::I32(v)) => v.extend(src.iter().map(|&b| b as i8 as i32)),
        (Kind::I2, Values::I32(v)) => extend_num!(v, src, i16, little, |x: i16| x as i32),
        (Kind::I4, Values::I32(v)) => extend_num!(v, src, i32, little, |x: i32| x),
        (Kind::I8, Values::I64(v)) => extend_num!(v, src, i64, little, |x: i64| x),
        (Kind::U1, Values::U8(v)) => v.extend_from_slice(src),
        (Kind::U2, Values::I64(v)) => extend_num!(v, src, u16, little, |x: u16| x as i64),
        (Kind::U4, Values::I64(v)) => extend_num!(v, src, u32, little, |x: u32| x as i64),
        (Kind::U8, Values::I64(v)) => {
            let before = v.len();
            extend_num!(v, src, u64, little, |x: u64| x as i64);
            if let Some(i) = v[before..].iter().position(|&x| x < 0) {
                v.truncate(before);
                return Err(i);
            }
        }
        (Kind::F2, Values::F32(v)) => extend_num!(v, src, u16, little, f16_to_f32),
        (Kind::F4, Values::F32(v)) => extend_num!(v, src, f32, little, |x: f32| x),
        (Kind::F8, Values::F64(v)) => extend_num!(v, src, f64, little, |x: f64| x),
        (k, out) => unreachable!("decode: {k:?} into a {} column", out.dtype()),
    }
    Ok(())
}

/// The u8 element `i` of `src` (for messages).
fn u8_value(src: &[u8], i: usize, little: bool) -> u64 {
    let b: [u8; 8] = src[i * 8..i * 8 + 8].try_into().expect("8 bytes");
    if little {
        u64::from_le_bytes(b)
    } else {
        u64::from_be_bytes(b)
    }
}

// ---------------------------------------------------------------------------
// Array data sources
// ---------------------------------------------------------------------------

/// C-order rows read in order from a stream, through a bounded buffer.
struct StreamRows {
    src: Box<dyn Read + Send>,
    buf: Vec<u8>,
    /// Row index of `buf[0]`.
    first: u64,
    /// Rows held in `buf`.
    held: usize,
    /// The first row that cannot be read, and why (sticky).
    failure: Option<(u64, String)>,
    /// The stream was read to its end after the last row.
    finished: bool,
}

/// Where an array's data lives.
enum Data {
    /// In a regular file, from byte `start`, read by position through
    /// `window` (C order) or gathered column by column (Fortran order).
    File {
        file: Arc<InputFile>,
        start: u64,
        window: Window,
    },
    /// Loaded whole (a Fortran-order array from a stream).
    Owned(Vec<u8>),
    /// A stream of C-order rows.
    Stream(Box<StreamRows>),
}

/// Why rows cannot be read.
enum RowsError {
    /// Row `.0` is bad or missing: `.1` says how.
    Row(u64, String),
    /// The file cannot be read there (it was shortened): an I/O error.
    Io(Error),
}

impl From<(u64, String)> for RowsError {
    fn from((row, what): (u64, String)) -> Self {
        RowsError::Row(row, what)
    }
}

/// One array of a file: its field name, header and data.
struct Array {
    /// Field name.
    name: String,
    /// `entry `x.npy`: ` for npz entries, empty for a .npy file (for messages).
    label: String,
    h: Header,
    data: Data,
    /// Scratch for gathered Fortran rows.
    scratch: Vec<u8>,
    /// Scratch for one column of a Fortran-order block read from a file.
    column: Vec<u8>,
    /// Scratch for decoding before a conversion.
    conv: Values,
}

impl Array {
    fn new(name: String, label: String, h: Header, data: Data) -> Self {
        let conv = Values::new(h.kind.dtype());
        Array {
            name,
            label,
            h,
            data,
            scratch: Vec::new(),
            column: Vec::new(),
            conv,
        }
    }

    /// Bytes of rows `i..i + k` in C order, or why the first of them that
    /// cannot be read cannot.
    fn rows_bytes(&mut self, i: u64, k: usize) -> std::result::Result<&[u8], RowsError> {
        let h = &self.h;
        let rb = h.row_bytes;
        match &mut self.data {
            Data::Stream(s) => Ok(s.rows(i, k, rb, h.rows)?),
            Data::File {
                file,
                start,
                window,
            } if !h.fortran => window
                .get(file, *start + i * rb as u64, k * rb)
                .map_err(RowsError::Io),
            Data::File { file, start, .. } => {
                gather_fortran_file(file, *start, h, i, k, &mut self.scratch, &mut self.column)
                    .map_err(RowsError::Io)?;
                Ok(&self.scratch)
            }
            Data::Owned(data) => {
                gather_fortran(data, &h.shape, h.kind.size(), i, k, &mut self.scratch);
                Ok(&self.scratch)
            }
        }
    }

    /// File (stream) offset of row `i`'s first byte.
    fn row_offset(&self, i: u64) -> u64 {
        let step = if self.h.fortran {
            self.h.kind.size() as u64
        } else {
            self.h.row_bytes as u64
        };
        self.h.data_offset as u64 + i * step
    }
}

/// Gather rows `i..i + k` of a Fortran-order array whose data starts at
/// byte `start` of `file` into `out`, in C order: one positioned read per
/// element of a row (the block's values of that element lie together).
fn gather_fortran_file(
    file: &InputFile,
    start: u64,
    h: &Header,
    i: u64,
    k: usize,
    out: &mut Vec<u8>,
    column: &mut Vec<u8>,
) -> Result<()> {
    out.clear();
    let dims = &h.shape[1..];
    let (rows, size) = (h.rows, h.kind.size());
    if h.row_elems == 0 || k == 0 {
        return Ok(());
    }
    out.resize(k * h.row_bytes, 0);
    column.resize(k * size, 0);
    // The element's index over the row dims, first fastest (Fortran order),
    // and its place in a C-order row.
    let mut idx = vec![0usize; dims.len()];
    for c in 0..h.row_elems as u64 {
        let mut p = 0;
        for (d, &x) in dims.iter().zip(&idx) {
            p = p * d + x;
        }
        file.read_at_init(start + (c * rows + i) * size as u64, column)?;
        for (r, v) in column.chunks_exact(size).enumerate() {
            let at = (r * h.row_elems + p) * size;
            out[at..at + size].copy_from_slice(v);
        }
        for (x, &d) in idx.iter_mut().zip(dims) {
            *x += 1;
            if *x < d {
                break;
            }
            *x = 0;
        }
    }
    Ok(())
}

/// Gather rows `i..i + k` of a Fortran-order array into `out`, in C order.
fn gather_fortran(data: &[u8], shape: &[usize], size: usize, i: u64, k: usize, out: &mut Vec<u8>) {
    out.clear();
    let dims = &shape[1..];
    let row_elems: usize = dims.iter().product();
    if row_elems == 0 || k == 0 {
        return;
    }
    // Element strides of the row dims: stride[d] = shape[0] * … * shape[d].
    let mut strides = Vec::with_capacity(dims.len());
    let mut s = shape[0];
    for &d in dims {
        strides.push(s);
        s *= d;
    }
    out.reserve(k * row_elems * size);
    let mut idx = vec![0usize; dims.len()];
    for r in i as usize..i as usize + k {
        idx.iter_mut().for_each(|x| *x = 0);
        let mut off = r;
        for _ in 0..row_elems {
            out.extend_from_slice(&data[off * size..off * size + size]);
            // Odometer over the row dims, last fastest (C order).
            for d in (0..dims.len()).rev() {
                idx[d] += 1;
                off += strides[d];
                if idx[d] < dims[d] {
                    break;
                }
                off -= strides[d] * dims[d];
                idx[d] = 0;
            }
        }
    }
}

impl StreamRows {
    fn new(src: Box<dyn Read + Send>) -> Self {
        StreamRows {
            src,
            buf: Vec::new(),
            first: 0,
            held: 0,
            failure: None,
            finished: false,
        }
    }

    /// Make row `i` come next from the buffer or the stream (forward only):
    /// rows between the buffer's end and `i` are read and discarded.
    fn skip_to(&mut self, i: u64, rb: usize) -> std::result::Result<(), (u64, String)> {
        let next = self.first + self.held as u64;
        if i < self.first {
            return Err((
                i,
                format!(
                    "cannot go back to row {i} in a compressed stream (at row {})",
                    self.first
                ),
            ));
        }
        if i <= next {
            return Ok(());
        }
        self.buf.clear();
        self.held = 0;
        self.first = next;
        let want = (i - next) * rb as u64;
        let got = io::copy(&mut (&mut self.src).take(want), &mut io::sink());
        match got {
            Ok(n) if n == want => {
                self.first = i;
                Ok(())
            }
            Ok(n) => {
                let bad = next + n / rb.max(1) as u64;
                self.first = bad;
                Err((bad, format!("stream ends inside row {bad} (truncated)")))
            }
            Err(e) => Err((next, format!("reading row {next}: {e}"))),
        }
    }

    /// Rows `i..i + k` (forward only); reads ahead up to a block.
    fn rows(
        &mut self,
        i: u64,
        k: usize,
        rb: usize,
        total: u64,
    ) -> std::result::Result<&[u8], (u64, String)> {
        if let Some((bad, what)) = &self.failure {
            if i + k as u64 > *bad {
                return Err((*bad, what.clone()));
            }
        }
        if let Err(f) = self.skip_to(i, rb) {
            self.failure = Some(f.clone());
            return Err(f);
        }
        if self.first + (self.held as u64) < i + k as u64 {
            // Drop the rows before `i` (once per refill), then read ahead.
            let drop = (i - self.first) as usize;
            self.buf.drain(..drop * rb);
            self.held -= drop;
            self.first = i;
            let ahead = (BLOCK_BYTES / rb.max(1)).max(k) as u64;
            let target = ahead.min(total - self.first) as usize;
            self.fill(target, rb, total);
        }
        if let Some((bad, what)) = &self.failure {
            if i + k as u64 > *bad {
                return Err((*bad, what.clone()));
            }
        }
        if self.first + (self.held as u64) < i + k as u64 {
            let next = self.first + self.held as u64;
            return Err((next, format!("row {next} is not available")));
        }
        let off = (i - self.first) as usize * rb;
        Ok(&self.buf[off..off + k * rb])
    }

    /// Read rows until `target` are held, or the stream fails.
    fn fill(&mut self, target: usize, rb: usize, total: u64) {
        if rb == 0 {
            self.held = target;
        } else {
            let want = (target - self.held) * rb;
            let before = self.buf.len();
            let res = (&mut self.src).take(want as u64).read_to_end(&mut self.buf);
            let got = self.buf.len() - before;
            self.buf.truncate(before + got / rb * rb);
            self.held += got / rb;
            let next = self.first + self.held as u64;
            match res {
                Err(e) => {
                    self.failure = Some((next, format!("reading row {next}: {e}")));
                    return;
                }
                Ok(_) if got < want => {
                    self.failure = Some((
                        next,
                        format!(
                            "stream ends inside row {next} of {total} (truncated: {} of {rb} bytes)",
                            got % rb
                        ),
                    ));
                    return;
                }
                Ok(_) => {}
            }
        }
        if self.first + self.held as u64 == total && !self.finished {
            self.finished = true;
            self.finish(total);
        }
    }

    /// After the last row: read to the end of the stream (which checks a
    /// gzip trailer).
    fn finish(&mut self, total: u64) {
        let last = total.saturating_sub(1);
        match io::copy(&mut (&mut self.src).take(MAX_TRAILING + 1), &mut io::sink()) {
            Err(e) => self.failure = Some((last, format!("after the last row: {e}"))),
            Ok(n) if n > MAX_TRAILING => {
                log::warn!("more than {MAX_TRAILING} bytes follow the array data; not checked")
            }
            Ok(_) => {}
        }
    }
}

// ---------------------------------------------------------------------------
// Opening
// ---------------------------------------------------------------------------

fn bad(path: &Path, what: impl Into<String>) -> Error {
    Error::BadFile {
        path: path.to_path_buf(),
        what: what.into(),
    }
}

/// The field name of a .npy path: the file name without `.npy` (and
/// without a compression extension).
fn stem(path: &Path, compression: Compression) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut name = name.as_str();
    if compression != Compression::None {
        for ext in [".gz", ".zz", ".zlib"] {
            if let Some(s) = name.strip_suffix(ext) {
                name = s;
                break;
            }
        }
    }
    Path::new(name)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| name.to_string())
}

fn check_row_size(path: &Path, arrays: &[Array], max: u64) -> Result<()> {
    let total: u64 = arrays.iter().map(|a| a.h.row_bytes as u64).sum();
    if total > max {
        return Err(bad(
            path,
            format!("one row is {total} bytes, more than max_record_bytes ({max})"),
        ));
    }
    Ok(())
}

/// Load a whole Fortran-order array from a stream.
fn load_whole(src: &mut dyn Read, h: &Header, max: u64) -> std::result::Result<Vec<u8>, String> {
    if h.data_bytes > max {
        return Err(format!(
            "a Fortran-order array in a compressed stream is read whole; its {} bytes exceed max_record_bytes ({max})",
            h.data_bytes
        ));
    }
    let mut v = Vec::with_capacity((h.data_bytes as usize).min(BLOCK_BYTES));
    src.take(h.data_bytes)
        .read_to_end(&mut v)
        .map_err(|e| format!("reading the array data: {e}"))?;
    if (v.len() as u64) < h.data_bytes {
        return Err(format!(
            "offset {}: data ends after {} of {} bytes (truncated)",
            h.data_offset + v.len(),
            v.len(),
            h.data_bytes
        ));
    }
    Ok(v)
}

fn open_npy(path: &Path, opts: &OpenOptions) -> Result<NpReader> {
    opts.validate()?;
    let compression = opts
        .compression
        .unwrap_or_else(|| Compression::from_path(path));
    let name = stem(path, compression);
    let array = match (open_input(path)?, compression) {
        (Opened::Regular(file), Compression::None) => {
            if file.len() == 0 {
                return Err(bad(path, "empty file"));
            }
            let h = header_from_file(&file, 0, file.len())?.map_err(|w| bad(path, w))?;
            let avail = file.len() - h.data_offset as u64;
            if h.data_bytes > avail {
                return Err(bad(
                    path,
                    format!(
                        "offset {}: shape {:?} of {} needs {} bytes of data, the file has {avail}",
                        h.data_offset, h.shape, h.descr, h.data_bytes
                    ),
                ));
            }
            if avail > h.data_bytes {
                log::warn!(
                    "{}: {} bytes after the array data are ignored",
                    path.display(),
                    avail - h.data_bytes
                );
            }
            let start = h.data_offset as u64;
            let data = Data::File {
                file,
                start,
                window: Window::new(BLOCK_BYTES),
            };
            Array::new(name, String::new(), h, data)
        }
        (opened, c) => {
            let raw: Box<dyn Read + Send> = match opened {
                Opened::Regular(file) => {
                    let len = file.len();
                    Box::new(RangeReader::new(file, 0, len))
                }
                Opened::Stream(f) => f,
            };
            let mut src = decompress(raw, c);
            let h =
                header_from_stream(&mut src, opts.max_record_bytes).map_err(|w| bad(path, w))?;
            let data = if h.fortran && h.shape.len() >= 2 {
                Data::Owned(
                    load_whole(&mut src, &h, opts.max_record_bytes).map_err(|w| bad(path, w))?,
                )
            } else {
                Data::Stream(Box::new(StreamRows::new(src)))
            };
            Array::new(name, String::new(), h, data)
        }
    };
    NpReader::new(path, vec![array], opts, true, Vec::new())
}

/// A zip entry's CRC-32, checked over the whole entry before any of its
/// rows is read: it covers the entry as a whole, so no row of a corrupt
/// entry can be told apart from the good ones.
struct EntryCheck {
    /// `entry `x.npy`: `, for messages.
    label: String,
    file: Arc<InputFile>,
    /// The entry's (compressed) data in the file.
    start: u64,
    end: u64,
    deflated: bool,
    /// Its uncompressed size, as the archive declares it.
    size: u64,
    /// Its CRC-32, as the archive declares it.
    expected: u32,
}

impl EntryCheck {
    /// `Ok(None)` if the entry's CRC-32 holds, `Ok(Some(what))` if it
    /// does not (or a deflated entry does not decompress to its declared
    /// size); `Err` if the file cannot be read.
    fn verify(&self) -> Result<Option<String>> {
        let computed = if self.deflated {
            let raw = io::BufReader::new(RangeReader::new(self.file.clone(), self.start, self.end));
            let mut dec = flate2::CrcReader::new(flate2::bufread::DeflateDecoder::new(raw));
            let n = match io::copy(
                &mut (&mut dec).take(self.size.saturating_add(1)),
                &mut io::sink(),
            ) {
                Ok(n) => n,
                Err(e) => return Ok(Some(format!("cannot be decompressed: {e}"))),
            };
            if n != self.size {
                return Ok(Some(format!(
                    "decompresses to {}{n} bytes, the archive declares {}",
                    if n > self.size { "more than " } else { "" },
                    self.size
                )));
            }
            dec.crc().sum()
        } else {
            let mut crc = flate2::Crc::new();
            let mut buf = vec![0u8; BLOCK_BYTES];
            let mut at = self.start;
            while at < self.end {
                let n = ((self.end - at) as usize).min(buf.len());
                self.file.read_at_init(at, &mut buf[..n])?;
                crc.update(&buf[..n]);
                at += n as u64;
            }
            crc.sum()
        };
        Ok((computed != self.expected).then(|| {
            format!(
                "CRC-32 mismatch (stored 0x{:08x}, computed 0x{computed:08x})",
                self.expected,
            )
        }))
    }
}

fn open_npz(path: &Path, opts: &OpenOptions) -> Result<NpReader> {
    opts.validate()?;
    if let Some(c) = opts.compression.filter(|c| *c != Compression::None) {
        return Err(bad(
            path,
            format!(
                "an .npz archive is not read through {c:?} compression (its entries carry \
                 their own); decompress the file first"
            ),
        ));
    }
    let file = match open_input(path)? {
        Opened::Regular(file) => file,
        Opened::Stream(_) => {
            return Err(bad(
                path,
                "not a regular file (a FIFO, a pipe, a device or a remote object): an .npz \
                 archive is read by position (its directory is at its end); copy it to a file first",
            ))
        }
    };
    if file.len() == 0 {
        return Err(bad(path, "empty file"));
    }
    let mut entries = Vec::new();
    {
        let mut zip = zip::ZipArchive::new(RangeReader::new(file.clone(), 0, file.len()))
            .map_err(|e| bad(path, format!("not a readable zip archive: {e}")))?;
        for i in 0..zip.len() {
            let f = zip
                .by_index_raw(i)
                .map_err(|e| bad(path, format!("zip entry {i}: {e}")))?;
            if f.is_dir() {
                continue;
            }
            entries.push((
                f.name().to_string(),
                f.compression(),
                f.encrypted(),
                f.data_start(),
                f.compressed_size(),
                f.size(),
                f.crc32(),
            ));
        }
    }
    let mut arrays: Vec<Array> = Vec::new();
    let mut checks = Vec::new();
    for (ename, method, encrypted, start, csize, size, crc) in entries {
        let Some(field) = ename.strip_suffix(".npy") else {
            log::warn!(
                "{}: entry `{ename}` is not a .npy array; skipped",
                path.display()
            );
            continue;
        };
        let label = format!("entry `{ename}`: ");
        let ebad = |w: String| bad(path, format!("{label}{w}"));
        if encrypted {
            return Err(ebad("encrypted entries are not supported".into()));
        }
        if arrays.iter().any(|a| a.name == field) {
            return Err(ebad(format!("a second array named `{field}`")));
        }
        let end = start
            .checked_add(csize)
            .filter(|&e| e <= file.len())
            .ok_or_else(|| {
                ebad(format!(
                    "offset {start}: {csize} bytes of entry data run past the end of the file ({} bytes)",
                    file.len()
                ))
            })?;
        let deflated = match method {
            zip::CompressionMethod::Stored => false,
            zip::CompressionMethod::Deflated => true,
            other => {
                return Err(ebad(format!(
                    "compression method {other:?} is not supported (stored or deflated only)"
                )))
            }
        };
        if opts.verify_checksums {
            checks.push(EntryCheck {
                label: label.clone(),
                file: file.clone(),
                start,
                end,
                deflated,
                size: if deflated { size } else { csize },
                expected: crc,
            });
        }
        let array = if deflated {
            let raw: Box<dyn Read + Send> = Box::new(RangeReader::new(file.clone(), start, end));
            let raw = io::BufReader::new(raw);
            let mut src: Box<dyn Read + Send> = Box::new(flate2::bufread::DeflateDecoder::new(raw));
            let h = header_from_stream(&mut src, opts.max_record_bytes).map_err(ebad)?;
            let data = if h.fortran && h.shape.len() >= 2 {
                Data::Owned(load_whole(&mut src, &h, opts.max_record_bytes).map_err(ebad)?)
            } else {
                Data::Stream(Box::new(StreamRows::new(src)))
            };
            Array::new(field.to_string(), label.clone(), h, data)
        } else {
            let h = header_from_file(&file, start, csize)?.map_err(ebad)?;
            let avail = csize - h.data_offset as u64;
            if h.data_bytes > avail {
                return Err(ebad(format!(
                    "offset {}: shape {:?} of {} needs {} bytes of data, the entry has {avail}",
                    start + h.data_offset as u64,
                    h.shape,
                    h.descr,
                    h.data_bytes
                )));
            }
            let data = Data::File {
                file: file.clone(),
                start: start + h.data_offset as u64,
                window: Window::new(BLOCK_BYTES),
            };
            Array::new(field.to_string(), label.clone(), h, data)
        };
        arrays.push(array);
    }
    if arrays.is_empty() {
        return Err(bad(path, "no .npy arrays in the archive"));
    }
    let rows = arrays[0].h.rows;
    if arrays.iter().any(|a| a.h.rows != rows) {
        let list: Vec<String> = arrays
            .iter()
            .map(|a| format!("`{}` has {}", a.name, a.h.rows))
            .collect();
        return Err(bad(
            path,
            format!(
                "the arrays have different numbers of rows: {}",
                list.join(", ")
            ),
        ));
    }
    NpReader::new(path, arrays, opts, false, checks)
}

// ---------------------------------------------------------------------------
// The reader
// ---------------------------------------------------------------------------

/// How one schema field is filled in the fast path.
enum ColPlan {
    /// From array `.0`; `.1`: the array's dtype is the field's.
    Array(usize, bool),
    /// A ragged field absent from the file: nothing per row.
    Empty,
}

/// Reads the rows of one or more equally long arrays (a .npy or an .npz).
struct NpReader {
    source: SourceId,
    arrays: Vec<Array>,
    rows: u64,
    next: u64,
    /// A .npy (record offsets are byte offsets in the file).
    single: bool,
    /// The rest of the file cannot be read.
    dead: bool,
    /// The row that could not be read (when `dead`): later errors name it,
    /// not a row past it that may lie beyond the end of the file.
    dead_row: u64,
    path: PathBuf,
    /// Entries whose CRC-32 is still to be checked, before any row is read.
    unchecked: Vec<EntryCheck>,
    /// Why an entry failed its check (repeated by every later call).
    bad_entry: Option<String>,
}

impl NpReader {
    fn new(
        path: &Path,
        arrays: Vec<Array>,
        opts: &OpenOptions,
        single: bool,
        unchecked: Vec<EntryCheck>,
    ) -> Result<Self> {
        check_row_size(path, &arrays, opts.max_record_bytes)?;
        let rows = arrays[0].h.rows;
        let mut r = NpReader {
            source: source_id(path),
            arrays,
            rows,
            next: opts.start_record.min(rows),
            single,
            dead: false,
            dead_row: 0,
            path: path.to_path_buf(),
            unchecked,
            bad_entry: None,
        };
        // Position streams now, so that a truncated stream shows at once.
        let next = r.next;
        for a in &mut r.arrays {
            if let Data::Stream(s) = &mut a.data {
                if let Err(f) = s.skip_to(next, a.h.row_bytes) {
                    s.failure = Some(f);
                }
            }
        }
        Ok(r)
    }

    fn location(&self, record: u64) -> Location {
        let offset = self.single.then(|| self.arrays[0].row_offset(record));
        Location::new(self.source, record, offset)
    }

    fn fatal(&mut self, ai: usize, failure: RowsError, at: u64) -> Error {
        self.dead = true;
        match failure {
            RowsError::Row(row, what) => {
                self.dead_row = row;
                let label = self.arrays[ai].label.clone();
                Error::corrupt(self.location(row), format!("{label}{what}"))
            }
            RowsError::Io(e) => {
                self.dead_row = at;
                e
            }
        }
    }

    /// Before any row is read: check every entry's CRC-32 (once). A
    /// corrupt entry is a [`Error::BadFile`] naming it, repeated by every
    /// later call: none of its rows — none of the file's — is delivered.
    fn check_entries(&mut self) -> Result<()> {
        if let Some(what) = &self.bad_entry {
            return Err(bad(&self.path, what.clone()));
        }
        while let Some(c) = self.unchecked.pop() {
            let failed = match c.verify() {
                Ok(None) => continue,
                Ok(Some(what)) => format!(
                    "{}{what}: the whole entry is corrupt, so none of its {} rows is read \
                     (records {}..{} of the file are lost)",
                    c.label, self.rows, self.next, self.rows
                ),
                Err(e) => format!("{}checking its CRC-32: {e}", c.label),
            };
            self.dead = true;
            self.dead_row = self.next;
            self.bad_entry = Some(failed.clone());
            return Err(bad(&self.path, failed));
        }
        Ok(())
    }

    fn u8_error(&self, ai: usize, record: u64, elem: usize, src: &[u8]) -> Error {
        let a = &self.arrays[ai];
        let v = u8_value(src, elem, a.h.little);
        Error::corrupt(
            self.location(record),
            format!(
                "{}field `{}`: u8 value {v} (element {elem} of the row) does not fit i64",
                a.label, a.name
            ),
        )
    }

    fn dead_error(&self) -> Error {
        if let Some(what) = &self.bad_entry {
            return bad(&self.path, what.clone());
        }
        Error::corrupt(
            self.location(self.dead_row),
            "the file cannot be read past an earlier error",
        )
    }

    /// How the fast path fills each field of `chunk`'s schema, or `None`
    /// when the generic path must (it then gives the exact error).
    fn plan(&self, chunk: &Chunk) -> Option<Vec<ColPlan>> {
        let mut plan = Vec::with_capacity(chunk.schema().len());
        for f in chunk.schema().fields() {
            match self.arrays.iter().position(|a| a.name == f.name) {
                None if f.is_ragged() => plan.push(ColPlan::Empty),
                None => return None,
                Some(ai) => {
                    let a = &self.arrays[ai];
                    let natural = a.h.kind.dtype();
                    let probe = Values::new(natural);
                    if !probe.convertible_to(f.dtype)
                        || check_elements(f, a.h.row_elems).is_err()
                        || (a.h.row_elems > 0 && check_shape(f, &a.h.shape[1..], natural).is_err())
                    {
                        return None;
                    }
                    // Empty rows are conformed specially by the generic path.
                    if a.h.row_elems == 0 && natural != f.dtype {
                        return None;
                    }
                    plan.push(ColPlan::Array(ai, natural == f.dtype));
                }
            }
        }
        Some(plan)
    }

    /// Decode rows `i..i + k` of every planned field into `chunk`
    /// (uncommitted). `false` if something went wrong (the caller rolls back
    /// and lets the generic path find the exact error).
    fn decode_block(&mut self, chunk: &mut Chunk, plan: &[ColPlan], i: u64, k: usize) -> bool {
        for (ci, p) in plan.iter().enumerate() {
            let ColPlan::Array(ai, direct) = *p else {
                continue;
            };
            let a = &mut self.arrays[ai];
            let (kind, little) = (a.h.kind, a.h.little);
            let mut conv = std::mem::replace(&mut a.conv, Values::new(DType::U8));
            let ok = match a.rows_bytes(i, k) {
                Err(_) => false,
                Ok(src) => {
                    if direct {
                        decode(kind, little, src, chunk.values_mut(ci)).is_ok()
                    } else {
                        conv.clear();
                        decode(kind, little, src, &mut conv).is_ok()
                            && conv.append_converted(chunk.values_mut(ci)).is_ok()
                    }
                }
            };
            self.arrays[ai].conv = conv;
            if !ok {
                return false;
            }
        }
        true
    }

    /// The generic path for up to `k` records: returns how many were appended.
    fn generic(&mut self, chunk: &mut Chunk, k: usize) -> Result<usize> {
        let mut n = 0;
        while n < k {
            match self.next_record()? {
                Some(rec) => {
                    chunk.push_record(&rec)?;
                    n += 1;
                }
                None => break,
            }
        }
        Ok(n)
    }
}

impl RecordReader for NpReader {
    fn next_record(&mut self) -> Result<Option<Record>> {
        if self.dead {
            return Err(self.dead_error());
        }
        self.check_entries()?;
        if self.next >= self.rows {
            return Ok(None);
        }
        let i = self.next;
        let mut fields = Vec::with_capacity(self.arrays.len());
        for ai in 0..self.arrays.len() {
            let a = &mut self.arrays[ai];
            let (kind, little) = (a.h.kind, a.h.little);
            let shape = a.h.shape[1..].to_vec();
            let name = a.name.clone();
            // Sized by the row's bytes once they were read, not by the
            // header's shape: a stream may end long before the row does.
            let res = match a.rows_bytes(i, 1) {
                Err(f) => return Err(self.fatal(ai, f, i)),
                Ok(src) => {
                    let mut values = Values::with_capacity(kind.dtype(), src.len() / kind.size());
                    match decode(kind, little, src, &mut values) {
                        Ok(()) => Ok(values),
                        Err(e) => Err((e, src.to_vec())),
                    }
                }
            };
            let values = match res {
                Ok(values) => values,
                Err((elem, src)) => {
                    self.next += 1;
                    return Err(self.u8_error(ai, i, elem, &src));
                }
            };
            fields.push((name, Tensor { values, shape }));
        }
        self.next += 1;
        Ok(Some(Record {
            fields,
            location: self.location(i),
        }))
    }

    fn read_chunk(
        &mut self,
        chunk: &mut Chunk,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<usize> {
        check_chunk_budget(max_records, max_bytes)?;
        if self.dead {
            return Err(self.dead_error());
        }
        self.check_entries()?;
        let Some(plan) = self.plan(chunk) else {
            return self.generic(chunk, max_records);
        };
        // Payload each row adds, as `Chunk::payload_bytes` counts it.
        let row_payload: usize = chunk
            .schema()
            .fields()
            .iter()
            .zip(&plan)
            .map(|(f, p)| match p {
                ColPlan::Array(ai, _) => self.arrays[*ai].h.row_elems * f.dtype.size(),
                ColPlan::Empty => 0,
            })
            .sum();
        let block_rows = (BLOCK_BYTES
            / self
                .arrays
                .iter()
                .map(|a| a.h.row_bytes)
                .max()
                .unwrap_or(1)
                .max(1))
        .max(1);
        let mut n = 0;
        while n < max_records {
            if self.dead {
                if n == 0 {
                    return Err(self.dead_error());
                }
                break;
            }
            let payload = chunk.payload_bytes();
            if (n > 0 && payload >= max_bytes) || self.next >= self.rows {
                break;
            }
            let by_bytes = if row_payload == 0 {
                usize::MAX
            } else {
                max_bytes
                    .saturating_sub(payload)
                    .div_ceil(row_payload)
                    .max(1)
            };
            let k = (max_records - n)
                .min(by_bytes)
                .min(block_rows)
                .min((self.rows - self.next).min(usize::MAX as u64) as usize);
            let i = self.next;
            if self.decode_block(chunk, &plan, i, k) {
                if chunk.commit_rows(self.source, i, k).is_ok() {
                    self.next += k as u64;
                    n += k;
                    continue;
                }
            } else {
                chunk.rollback_row();
            }
            // Something in this block is bad: the generic path reads it
            // record by record and reports the exact error.
            n += self.generic(chunk, k)?;
        }
        Ok(n)
    }

    fn next_index(&self) -> u64 {
        self.next
    }

    fn can_continue(&self) -> bool {
        !self.dead
    }

    fn len_hint(&self) -> Option<u64> {
        Some(self.rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference half decoding, straight from the definition.
    fn f16_reference(h: u16) -> f64 {
        let s = if h >> 15 == 1 { -1.0 } else { 1.0 };
        let e = ((h >> 10) & 0x1f) as i32;
        let m = (h & 0x3ff) as f64;
        match e {
            0 => s * m * 2f64.powi(-24),
            31 if m == 0.0 => s * f64::INFINITY,
            31 => f64::NAN,
            _ => s * (1.0 + m / 1024.0) * 2f64.powi(e - 15),
        }
    }

    #[test]
    fn half_matches_the_definition_for_all_bit_patterns() {
        for h in 0..=u16::MAX {
            let got = f16_to_f32(h) as f64;
            let want = f16_reference(h);
            if want.is_nan() {
                assert!(got.is_nan(), "{h:#06x}");
            } else {
                assert_eq!(got, want, "{h:#06x}");
                assert_eq!(got.is_sign_negative(), want.is_sign_negative(), "{h:#06x}");
            }
        }
    }

    #[test]
    fn python_literals() {
        let h = parse_header(
            b"{'descr': '>u2', 'fortran_order': True, 'shape': (3L, 0, 2), }   \n",
            10,
        )
        .unwrap();
        assert_eq!(h.kind, Kind::U2);
        assert!(!h.little && h.fortran);
        assert_eq!(h.shape, vec![3, 0, 2]);
        assert_eq!((h.rows, h.row_elems, h.data_bytes), (3, 0, 0));
        let e = parse_header(
            b"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)",
            10,
        )
        .unwrap_err();
        assert!(e.contains("offset 64"), "{e}");
        let e = parse_header(
            b"{'descr': '<c8', 'fortran_order': False, 'shape': (1,)}",
            12,
        )
        .unwrap_err();
        assert!(e.contains("complex"), "{e}");
    }
}
