//! The NPY header: the magic and format version (1.0, 2.0, 3.0), the
//! header length, and the header text — a Python-literal dict read by a
//! small parser of its own — giving the element [`Kind`] (from `descr`),
//! the byte order, C or Fortran order and the shape, with the sizes of a
//! row and of the data ([`Header`]); read from a file by position or from
//! a stream.

use std::io::Read;

use crate::error::Result;
use crate::input::InputFile;
use crate::schema::DType;

/// The NPY magic string.
const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// Element kind of an array, as in the `descr` string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
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

    pub(super) fn size(self) -> usize {
        match self {
            Kind::B1 | Kind::I1 | Kind::U1 => 1,
            Kind::I2 | Kind::U2 | Kind::F2 => 2,
            Kind::I4 | Kind::U4 | Kind::F4 => 4,
            Kind::I8 | Kind::U8 | Kind::F8 => 8,
        }
    }

    /// The dtype a record holds for this kind.
    pub(super) fn dtype(self) -> DType {
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
pub(super) struct Header {
    pub(super) descr: String,
    pub(super) kind: Kind,
    /// The file's bytes are little-endian (irrelevant for 1-byte kinds).
    pub(super) little: bool,
    pub(super) fortran: bool,
    pub(super) shape: Vec<usize>,
    /// Bytes from the start of the file (entry) to the array data.
    pub(super) data_offset: usize,
    pub(super) rows: u64,
    pub(super) row_elems: usize,
    pub(super) row_bytes: usize,
    pub(super) data_bytes: u64,
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
pub(super) fn header_from_file(
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
pub(super) fn header_from_stream(
    r: &mut dyn Read,
    max: u64,
) -> std::result::Result<Header, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
