//! Mosaic Streaming MDS shards (`mds:` prefix, `.mds`; `.mds.zstd` through
//! a directory input), as `streaming.MDSWriter` writes them: one record
//! per sample, one field per column.
//!
//! This module owns the MDS reader: a shard read as the `index.json` that
//! lists it describes it (its columns' names, encodings and fixed sizes,
//! its sample count, its files' sizes and hashes, its compression), the
//! shard's offset table as the unit of framing (opening at `start_record`
//! and [`RecordReader::skip_to`] read no sample before the one they land
//! on, in an uncompressed shard), and the decoding of each encoding. A
//! directory with an `index.json` is an input: [`crate::plan::expand_inputs`]
//! gives its shards, in the index's order, as `mds:DIR/shard.00000.mds`
//! (or `.mds.zstd` when only the compressed file is there); the index of a
//! shard is the nearest `index.json` at or above its directory that lists
//! it (a merged index names `sub/shard.00000.mds`).
//!
//! A shard file holds `samples` (u32), `samples + 1` offsets (u32, from the
//! file's start), the writer's settings as JSON, then the samples; a
//! sample is the sizes (u32) of its variable-size columns, then each
//! column's bytes in `column_names` order. Encodings and their values:
//!
//! | encoding | value |
//! | --- | --- |
//! | `int8`, `int16`, `int32`, `uint16` | i32 |
//! | `uint8` | u8 |
//! | `int64`, `uint32`, `uint64` (up to `i64::MAX`), `int` | i64 |
//! | `float16`, `float32` | f32 |
//! | `float64` | f64 |
//! | `str_int` | i64 (its digits parsed) |
//! | `str_float` | f64 (its digits parsed) |
//! | `str`, `json` (its text, checked to be JSON), `bytes` | bytes |
//! | `ndarray`, `ndarray:DTYPE`, `ndarray:DTYPE:SHAPE` | a tensor of the element type above, of its shape |
//! | `jpeg`, `png` | bytes: the encoded image, as written |
//! | `pil` (raw pixels of mode `L`, `LA`, `RGB`, `RGBA`) | bytes: a PNG of those pixels |
//! | `list[jpeg]`, `list[png]`, `list[pil]`, `jpeg_array` | bytes `[n]`: the encoded images |
//!
//! The schema ([`Format::infer_schema`]) is the encodings' own; an
//! `ndarray` whose encoding leaves the shape open (`ndarray`,
//! `ndarray:DTYPE`) is a ragged field — the writer stores each sample's
//! shape — of the first sample's dtype and trailing dimensions.
//!
//! Images come out encoded so that the image transform decodes them as it
//! decodes a TFRecord's. `pkl` (a pickle runs code when it is loaded) and
//! `str_decimal` are refused when the shard is opened, naming the column.
//!
//! A shard that disagrees with its index — its file's size, its sample
//! count, the columns its settings name, a hash the index lists (md5, sha1, sha224/256/384/512, xxh32,
//! xxh64, xxh3_64, xxh128; checked when the shard is opened, with
//! [`OpenOptions::verify_checksums`], reading it whole), its decompressed
//! size — or whose offset table does not frame its bytes is an error naming
//! the shard when it is opened. A sample whose bytes do not hold its
//! columns is a bad record naming the shard, the sample and the column;
//! reading goes on with the next sample (the offset table frames it).
//!
//! ```
//! use feedline::format::{Format, OpenOptions, mds::MdsFormat};
//! # let dir = tempfile::tempdir().unwrap();
//! # let shard = feedline::format::mds::write_example(dir.path()).unwrap();
//! let mut r = MdsFormat.open(&shard, &OpenOptions::default()).unwrap();
//! assert_eq!(r.len_hint(), Some(3));
//! r.skip_to(2).unwrap();
//! let rec = r.next_record().unwrap().unwrap();
//! assert_eq!(rec.to_json(), serde_json::json!({"id": [2], "text": ["dHdv"]}));
//! ```

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::{source_id, Compression, Format, OpenOptions, RecordReader};
use crate::dataset_dir::{mds_shards, MDS_INDEX};
use crate::error::{Error, Result};
use crate::provenance::{Location, SourceId};
use crate::record::Record;
use crate::schema::{DType, Dim, Field, Ragged, Schema};
use crate::values::{Tensor, Values};

/// Bytes read at a time from an uncompressed shard (more for a larger sample).
const WINDOW: usize = 1 << 20;

/// How many directories above a shard's are searched for its index.
const INDEX_LEVELS: usize = 4;

/// The MDS format.
#[derive(Clone, Copy, Debug, Default)]
pub struct MdsFormat;

impl Format for MdsFormat {
    fn name(&self) -> &str {
        "mds"
    }

    fn extensions(&self) -> &[&str] {
        &["mds"]
    }

    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        opts.validate()?;
        match opts.compression {
            None | Some(Compression::None) => {}
            Some(c) => {
                return Err(Error::BadFile {
                    path: path.to_path_buf(),
                    what: format!(
                        "an MDS shard's compression is the one its index.json names; stream \
                         compression {c:?} is not supported"
                    ),
                })
            }
        }
        let shard = Shard::find(path)?;
        Ok(Box::new(MdsReader::open(path, shard, opts)?))
    }

    fn infer_schema(&self, path: &Path) -> Option<Result<Schema>> {
        let shard = match Shard::find(path) {
            Ok(s) => s,
            Err(e) => return Some(Err(e)),
        };
        // An `ndarray` whose shape the encoding leaves open stores each
        // sample's shape: its leading dimension is variable (a writer of
        // one shape says so with `ndarray:DTYPE:SHAPE`). Its dtype (when
        // open too) and its trailing dimensions are the first sample's.
        let mut first: Option<Record> = None;
        let mut fields = Vec::new();
        for c in &shard.columns {
            let (dtype, shape) = match c.encoding.declared() {
                Some(d) => d,
                None => {
                    if first.is_none() {
                        let mut r =
                            match MdsReader::open(path, shard.clone(), &OpenOptions::default()) {
                                Ok(r) => r,
                                Err(e) => return Some(Err(e)),
                            };
                        first = match r.next_record() {
                            Ok(Some(rec)) => Some(rec),
                            // No sample to learn the dimensions from.
                            Ok(None) => return None,
                            Err(e) => return Some(Err(e)),
                        };
                    }
                    let rec = first.as_ref().expect("read above");
                    let t = rec
                        .fields
                        .iter()
                        .find(|(n, _)| *n == c.name)
                        .map(|(_, t)| t)
                        .expect("a record has every column of its shard");
                    let shape = std::iter::once(Dim::Var)
                        .chain(t.shape.iter().skip(1).map(|&d| Dim::Fixed(d)))
                        .collect();
                    (t.values.dtype(), shape)
                }
            };
            fields.push(Field {
                name: c.name.clone(),
                dtype,
                shape,
                ragged: Ragged::Offsets,
            });
        }
        Some(Schema::new(fields))
    }
}

/// An element type of `ndarray` and the scalar encodings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Elem {
    U8,
    I8,
    U16,
    I16,
    F16,
    U32,
    I32,
    F32,
    U64,
    I64,
    F64,
}

impl Elem {
    fn parse(name: &str) -> Option<Elem> {
        Some(match name {
            "uint8" => Elem::U8,
            "int8" => Elem::I8,
            "uint16" => Elem::U16,
            "int16" => Elem::I16,
            "float16" => Elem::F16,
            "uint32" => Elem::U32,
            "int32" => Elem::I32,
            "float32" => Elem::F32,
            "uint64" => Elem::U64,
            "int64" => Elem::I64,
            "float64" => Elem::F64,
            _ => return None,
        })
    }

    /// The code `ndarray` writes for it when the encoding leaves it open.
    fn from_code(code: u8) -> Option<Elem> {
        Some(match code {
            8 => Elem::U8,
            9 => Elem::I8,
            16 => Elem::U16,
            17 => Elem::I16,
            18 => Elem::F16,
            32 => Elem::U32,
            33 => Elem::I32,
            34 => Elem::F32,
            64 => Elem::U64,
            65 => Elem::I64,
            66 => Elem::F64,
            _ => return None,
        })
    }

    fn size(self) -> usize {
        match self {
            Elem::U8 | Elem::I8 => 1,
            Elem::U16 | Elem::I16 | Elem::F16 => 2,
            Elem::U32 | Elem::I32 | Elem::F32 => 4,
            Elem::U64 | Elem::I64 | Elem::F64 => 8,
        }
    }

    /// The field dtype (as Arrow's integer and float types map).
    fn dtype(self) -> DType {
        match self {
            Elem::U8 => DType::U8,
            Elem::I8 | Elem::U16 | Elem::I16 | Elem::I32 => DType::I32,
            Elem::U32 | Elem::I64 | Elem::U64 => DType::I64,
            Elem::F16 | Elem::F32 => DType::F32,
            Elem::F64 => DType::F64,
        }
    }

    /// Decode `bytes` (a whole number of elements, little-endian) into
    /// `out` (of [`dtype`](Self::dtype)'s kind).
    fn decode(self, bytes: &[u8], out: &mut Values) -> std::result::Result<(), String> {
        macro_rules! each {
            ($variant:ident, $n:expr, $conv:expr) => {{
                let Values::$variant(v) = out else {
                    unreachable!("the element type fixes the values' kind")
                };
                for c in bytes.chunks_exact($n) {
                    v.push($conv(c.try_into().expect("chunks of the element's size")));
                }
            }};
        }
        match self {
            Elem::U8 => each!(U8, 1, |c: [u8; 1]| c[0]),
            Elem::I8 => each!(I32, 1, |c: [u8; 1]| i8::from_le_bytes(c) as i32),
            Elem::U16 => each!(I32, 2, |c| u16::from_le_bytes(c) as i32),
            Elem::I16 => each!(I32, 2, |c| i16::from_le_bytes(c) as i32),
            Elem::I32 => each!(I32, 4, i32::from_le_bytes),
            Elem::U32 => each!(I64, 4, |c| u32::from_le_bytes(c) as i64),
            Elem::I64 => each!(I64, 8, i64::from_le_bytes),
            Elem::U64 => {
                let Values::I64(v) = out else {
                    unreachable!("the element type fixes the values' kind")
                };
                for c in bytes.chunks_exact(8) {
                    let x = u64::from_le_bytes(c.try_into().expect("8 bytes"));
                    v.push(
                        i64::try_from(x)
                            .map_err(|_| format!("uint64 value {x}, beyond the largest i64"))?,
                    );
                }
            }
            Elem::F16 => each!(F32, 2, |c| f16_to_f32(u16::from_le_bytes(c))),
            Elem::F32 => each!(F32, 4, f32::from_le_bytes),
            Elem::F64 => each!(F64, 8, f64::from_le_bytes),
        }
        Ok(())
    }
}

/// An IEEE half to f32 (exact).
fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as i32;
    let frac = (h & 0x3ff) as u32;
    let bits = match exp {
        0 if frac == 0 => sign,
        0 => {
            // Subnormal: frac * 2^-24.
            let v = frac as f32 * (1.0 / (1u32 << 24) as f32);
            return if sign != 0 { -v } else { v };
        }
        31 => sign | 0x7f80_0000 | (frac << 13),
        e => sign | (((e - 15 + 127) as u32) << 23) | (frac << 13),
    };
    f32::from_bits(bits)
}

/// A column's encoding.
#[derive(Clone, Debug, PartialEq)]
enum Encoding {
    Scalar(Elem),
    /// `int`: an int64.
    Int,
    StrInt,
    StrFloat,
    Str,
    Json,
    Bytes,
    NdArray {
        elem: Option<Elem>,
        shape: Option<Vec<usize>>,
    },
    /// `jpeg`, `png`: encoded bytes as they are.
    Image,
    /// `pil`: raw pixels, re-encoded as PNG.
    Pil,
    /// `list[jpeg]`, `list[png]`; `list[pil]` (`pil` true).
    ImageList {
        pil: bool,
    },
    /// `jpeg_array`.
    JpegArray,
}

impl Encoding {
    /// Parse an encoding name; `Err` says why it is refused.
    fn parse(text: &str) -> std::result::Result<Encoding, String> {
        if let Some(e) = Elem::parse(text) {
            return Ok(Encoding::Scalar(e));
        }
        Ok(match text {
            "int" => Encoding::Int,
            "str_int" => Encoding::StrInt,
            "str_float" => Encoding::StrFloat,
            "str" => Encoding::Str,
            "json" => Encoding::Json,
            "bytes" => Encoding::Bytes,
            "jpeg" | "png" => Encoding::Image,
            "pil" => Encoding::Pil,
            "list[jpeg]" | "list[png]" => Encoding::ImageList { pil: false },
            "list[pil]" => Encoding::ImageList { pil: true },
            "jpeg_array" | "jpegarray" => Encoding::JpegArray,
            "pkl" => {
                return Err(
                    "encoding `pkl` is refused: a pickle runs code when it is loaded; \
                            write the column with a data encoding (ndarray, json, str, bytes…)"
                        .into(),
                )
            }
            "str_decimal" => {
                return Err("encoding `str_decimal` is not supported (a decimal has no \
                            feedline dtype)"
                    .into())
            }
            other => {
                let Some(config) = other.strip_prefix("ndarray") else {
                    return Err(format!("unknown encoding `{other}`"));
                };
                let bad = || format!("encoding `{other}`: expected ndarray[:DTYPE[:SHAPE]]");
                let config = match config {
                    "" => "",
                    c => c.strip_prefix(':').ok_or_else(bad)?,
                };
                let mut parts = config.split(':');
                let elem = match parts.next() {
                    None | Some("") => None,
                    Some(d) => Some(Elem::parse(d).ok_or_else(bad)?),
                };
                let shape = match parts.next() {
                    None => None,
                    Some(s) => Some(
                        s.split(',')
                            .map(|d| d.trim().parse::<usize>().ok().filter(|&d| d >= 1))
                            .collect::<Option<Vec<_>>>()
                            .ok_or_else(bad)?,
                    ),
                };
                if parts.next().is_some() || (shape.is_some() && elem.is_none()) {
                    return Err(bad());
                }
                Encoding::NdArray { elem, shape }
            }
        })
    }

    /// The fixed size MDS gives this encoding's values, if any (as
    /// `column_sizes` must say).
    fn fixed_size(&self) -> Option<usize> {
        match self {
            Encoding::Scalar(e) => Some(e.size()),
            Encoding::Int => Some(8),
            Encoding::NdArray {
                elem: Some(e),
                shape: Some(s),
            } => Some(s.iter().product::<usize>() * e.size()),
            _ => None,
        }
    }

    /// The field this encoding declares, if its dtype and number of
    /// dimensions are known without a sample.
    fn declared(&self) -> Option<(DType, Vec<Dim>)> {
        Some(match self {
            Encoding::Scalar(e) => (e.dtype(), vec![]),
            Encoding::Int | Encoding::StrInt => (DType::I64, vec![]),
            Encoding::StrFloat => (DType::F64, vec![]),
            Encoding::Str | Encoding::Json | Encoding::Bytes | Encoding::Image | Encoding::Pil => {
                (DType::Bytes, vec![])
            }
            Encoding::ImageList { .. } | Encoding::JpegArray => (DType::Bytes, vec![Dim::Var]),
            Encoding::NdArray {
                elem: Some(e),
                shape: Some(s),
            } => (e.dtype(), s.iter().map(|&d| Dim::Fixed(d)).collect()),
            Encoding::NdArray { .. } => return None,
        })
    }

    /// Decode one value.
    fn decode(&self, data: &[u8]) -> std::result::Result<Tensor, String> {
        let text = || std::str::from_utf8(data).map_err(|e| format!("not UTF-8 text: {e}"));
        let bytes = |items: Vec<Vec<u8>>, shape: Vec<usize>| {
            let mut v = Values::new(DType::Bytes);
            if let Values::Bytes(b) = &mut v {
                for i in &items {
                    b.push(i);
                }
            }
            Tensor { values: v, shape }
        };
        Ok(match self {
            Encoding::Scalar(e) => {
                if data.len() != e.size() {
                    return Err(format!("{} bytes, expected {}", data.len(), e.size()));
                }
                let mut v = Values::new(e.dtype());
                e.decode(data, &mut v)?;
                Tensor {
                    values: v,
                    shape: vec![],
                }
            }
            Encoding::Int => Encoding::Scalar(Elem::I64).decode(data)?,
            Encoding::StrInt => {
                let t = text()?;
                let x: i64 = t
                    .trim()
                    .parse()
                    .map_err(|e| format!("`{t}` is not an int64: {e}"))?;
                Tensor {
                    values: Values::I64(vec![x]),
                    shape: vec![],
                }
            }
            Encoding::StrFloat => {
                let t = text()?;
                let x: f64 = t
                    .trim()
                    .parse()
                    .map_err(|e| format!("`{t}` is not a float: {e}"))?;
                Tensor {
                    values: Values::F64(vec![x]),
                    shape: vec![],
                }
            }
            Encoding::Str => {
                text()?;
                bytes(vec![data.to_vec()], vec![])
            }
            Encoding::Json => {
                serde_json::from_str::<serde::de::IgnoredAny>(text()?)
                    .map_err(|e| format!("not JSON: {e}"))?;
                bytes(vec![data.to_vec()], vec![])
            }
            Encoding::Bytes | Encoding::Image => bytes(vec![data.to_vec()], vec![]),
            Encoding::Pil => bytes(vec![pil_to_png(data)?], vec![]),
            Encoding::ImageList { pil } => {
                // [reserved u32][n u32][n sizes u32][images]
                let body = data.get(4..).ok_or("shorter than its header")?;
                let items = sized_items(body)?;
                let items = if *pil {
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, x)| pil_to_png(x).map_err(|e| format!("image {i}: {e}")))
                        .collect::<std::result::Result<Vec<_>, _>>()?
                } else {
                    items.into_iter().map(<[u8]>::to_vec).collect()
                };
                let n = items.len();
                bytes(items, vec![n])
            }
            Encoding::JpegArray => {
                let items: Vec<Vec<u8>> =
                    sized_items(data)?.into_iter().map(<[u8]>::to_vec).collect();
                let n = items.len();
                bytes(items, vec![n])
            }
            Encoding::NdArray { elem, shape } => {
                let mut at = 0;
                let elem = match elem {
                    Some(e) => *e,
                    None => {
                        let code = *data.first().ok_or("no dtype byte")?;
                        at = 1;
                        Elem::from_code(code).ok_or(format!("unknown dtype code {code}"))?
                    }
                };
                let shape = match shape {
                    Some(s) => s.clone(),
                    None => {
                        let b = *data.get(at).ok_or("no shape byte")?;
                        at += 1;
                        let ndim = (b >> 2) as usize;
                        let width = 1usize << (b & 3);
                        let raw = data
                            .get(at..at + ndim * width)
                            .ok_or("shorter than its shape")?;
                        at += ndim * width;
                        raw.chunks_exact(width)
                            .map(|c| {
                                let mut w = [0u8; 8];
                                w[..width].copy_from_slice(c);
                                usize::try_from(u64::from_le_bytes(w)).unwrap_or(usize::MAX)
                            })
                            .collect()
                    }
                };
                let values = &data[at..];
                let n = shape
                    .iter()
                    .try_fold(1usize, |a, &d| a.checked_mul(d))
                    .and_then(|n| n.checked_mul(elem.size()));
                if n != Some(values.len()) {
                    return Err(format!(
                        "{} bytes of values for shape {shape:?} of {elem:?} ({} bytes)",
                        values.len(),
                        n.map_or("too many".to_string(), |n| n.to_string())
                    ));
                }
                let mut v = Values::new(elem.dtype());
                elem.decode(values, &mut v)?;
                Tensor { values: v, shape }
            }
        })
    }
}

/// `[n u32][n sizes u32][items]`: the items.
fn sized_items(data: &[u8]) -> std::result::Result<Vec<&[u8]>, String> {
    let word = |i: usize| -> std::result::Result<usize, String> {
        data.get(i * 4..i * 4 + 4)
            .map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes")) as usize)
            .ok_or_else(|| "shorter than its table of sizes".to_string())
    };
    let n = word(0)?;
    let mut at = 4 + 4 * n;
    let mut out = Vec::with_capacity(n.min(data.len()));
    for i in 0..n {
        let size = word(1 + i)?;
        let item = data
            .get(at..at + size)
            .ok_or_else(|| format!("item {i} of {size} bytes runs past the value"))?;
        out.push(item);
        at += size;
    }
    if at != data.len() {
        return Err(format!("{} bytes after its {n} items", data.len() - at));
    }
    Ok(out)
}

/// `pil`'s raw pixels (`[width u32][height u32][mode size u32][mode][pixels]`)
/// as a PNG.
fn pil_to_png(data: &[u8]) -> std::result::Result<Vec<u8>, String> {
    let word = |i: usize| {
        data.get(i * 4..i * 4 + 4)
            .map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes")))
            .ok_or("shorter than its header")
    };
    let (width, height, mode_len) = (word(0)?, word(1)?, word(2)? as usize);
    let mode = data
        .get(12..12 + mode_len)
        .and_then(|m| std::str::from_utf8(m).ok())
        .ok_or("a bad mode name")?;
    let (color, channels) = match mode {
        "L" => (0u8, 1usize),
        "LA" => (4, 2),
        "RGB" => (2, 3),
        "RGBA" => (6, 4),
        other => {
            return Err(format!(
                "PIL mode `{other}` (modes L, LA, RGB and RGBA are read)"
            ))
        }
    };
    let pixels = &data[12 + mode_len..];
    let row = width as usize * channels;
    if width == 0 || height == 0 || pixels.len() != row * height as usize {
        return Err(format!(
            "{} bytes of pixels for a {width}x{height} {mode} image",
            pixels.len()
        ));
    }
    let mut raw = Vec::with_capacity((row + 1) * height as usize);
    for r in pixels.chunks_exact(row) {
        raw.push(0); // filter: none
        raw.extend_from_slice(r);
    }
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut z, &raw).map_err(|e| e.to_string())?;
    let idat = z.finish().map_err(|e| e.to_string())?;
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut chunk = |kind: &[u8; 4], body: &[u8]| {
        png.extend_from_slice(&(body.len() as u32).to_be_bytes());
        let mut crc = flate2::Crc::new();
        crc.update(kind);
        crc.update(body);
        png.extend_from_slice(kind);
        png.extend_from_slice(body);
        png.extend_from_slice(&crc.sum().to_be_bytes());
    };
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, color, 0, 0, 0]);
    chunk(b"IHDR", &ihdr);
    chunk(b"IDAT", &idat);
    chunk(b"IEND", &[]);
    Ok(png)
}

/// A column of a shard.
#[derive(Clone, Debug)]
struct Column {
    name: String,
    encoding: Encoding,
    /// Its fixed size (`column_sizes`), `None` if variable.
    size: Option<usize>,
}

/// A shard file as its index describes it.
#[derive(Clone, Debug)]
struct FileInfo {
    bytes: u64,
    hashes: Vec<(String, String)>,
}

/// A shard, from its index entry.
#[derive(Clone, Debug)]
struct Shard {
    index: PathBuf,
    columns: Vec<Column>,
    samples: u64,
    raw: FileInfo,
    /// The file read: compressed with zstd (`zip_data`), or not.
    zstd: bool,
    /// `zip_data`, when the file read is the compressed one.
    zip: Option<FileInfo>,
}

/// Parsed indexes, by path (with the size and time that identify a version).
type IndexCache = HashMap<
    PathBuf,
    (
        u64,
        Option<std::time::SystemTime>,
        Arc<Vec<serde_json::Value>>,
    ),
>;

fn indexes() -> &'static Mutex<IndexCache> {
    static CACHE: OnceLock<Mutex<IndexCache>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The shards of the index at `path`, parsed once per version of it.
fn index_shards(path: &Path) -> Result<Arc<Vec<serde_json::Value>>> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    let key = (meta.len(), meta.modified().ok());
    if let Some((len, time, shards)) = indexes().lock().expect("not poisoned").get(path) {
        if (*len, *time) == key {
            return Ok(shards.clone());
        }
    }
    let shards = Arc::new(mds_shards(path)?);
    indexes()
        .lock()
        .expect("not poisoned")
        .insert(path.to_path_buf(), (key.0, key.1, shards.clone()));
    Ok(shards)
}

impl Shard {
    /// The shard at `path`, from the nearest `index.json` at or above its
    /// directory that lists it.
    fn find(path: &Path) -> Result<Shard> {
        if crate::input::remote_url(path).is_some() {
            return Err(Error::BadFile {
                path: path.to_path_buf(),
                what: "MDS shards are read from local directories only".into(),
            });
        }
        if path.is_dir() {
            return Err(Error::BadFile {
                path: path.to_path_buf(),
                what: "is a directory: give it as an input (its index.json names its shards) \
                       or give one shard"
                    .into(),
            });
        }
        let full = std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?;
        let mut looked = Vec::new();
        for dir in full
            .parent()
            .into_iter()
            .flat_map(Path::ancestors)
            .take(INDEX_LEVELS)
        {
            let index = dir.join(MDS_INDEX);
            if !index.is_file() {
                continue;
            }
            let rel = full
                .strip_prefix(dir)
                .expect("an ancestor")
                .to_string_lossy()
                .replace(std::path::MAIN_SEPARATOR, "/");
            let shards = index_shards(&index)?;
            for (i, entry) in shards.iter().enumerate() {
                let name = |k: &str| {
                    entry
                        .get(k)
                        .and_then(|d| d.get("basename"))
                        .and_then(|b| b.as_str())
                };
                let zstd = if name("raw_data") == Some(rel.as_str()) {
                    false
                } else if name("zip_data") == Some(rel.as_str()) {
                    true
                } else {
                    continue;
                };
                return Shard::from_entry(path, &index, i, entry, zstd);
            }
            looked.push(index);
        }
        Err(Error::BadFile {
            path: path.to_path_buf(),
            what: if looked.is_empty() {
                format!(
                    "no {MDS_INDEX} in its directory or the {} above it",
                    INDEX_LEVELS - 1
                )
            } else {
                format!(
                    "no shard of {} is this file",
                    looked
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
        })
    }

    fn from_entry(
        path: &Path,
        index: &Path,
        i: usize,
        e: &serde_json::Value,
        zstd: bool,
    ) -> Result<Shard> {
        let bad = |what: String| Error::BadFile {
            path: path.to_path_buf(),
            what: format!("shard {i} of {}: {what}", index.display()),
        };
        if let Some(f) = e.get("format").and_then(|f| f.as_str()) {
            if f != "mds" {
                return Err(bad(format!("format `{f}`, not mds")));
            }
        }
        let strings = |k: &str| -> Result<Vec<String>> {
            e.get(k)
                .and_then(|v| v.as_array())
                .ok_or_else(|| bad(format!("no `{k}` list")))?
                .iter()
                .map(|x| {
                    x.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| bad(format!("`{k}` holds {x}, not a string")))
                })
                .collect()
        };
        let names = strings("column_names")?;
        let encodings = strings("column_encodings")?;
        let sizes: Vec<Option<u64>> = e
            .get("column_sizes")
            .and_then(|v| v.as_array())
            .ok_or_else(|| bad("no `column_sizes` list".into()))?
            .iter()
            .map(|x| x.as_u64())
            .collect();
        if names.len() != encodings.len() || names.len() != sizes.len() {
            return Err(bad(format!(
                "{} column names, {} encodings and {} sizes",
                names.len(),
                encodings.len(),
                sizes.len()
            )));
        }
        let mut columns = Vec::with_capacity(names.len());
        for ((name, enc), size) in names.into_iter().zip(&encodings).zip(sizes) {
            let encoding =
                Encoding::parse(enc).map_err(|w| bad(format!("column `{name}`: {w}")))?;
            let size = size.map(|s| s as usize);
            if size != encoding.fixed_size() {
                return Err(bad(format!(
                    "column `{name}` ({enc}): size {} where its encoding's is {}",
                    size.map_or("null".into(), |s| s.to_string()),
                    encoding
                        .fixed_size()
                        .map_or("variable".into(), |s| s.to_string())
                )));
            }
            columns.push(Column {
                name,
                encoding,
                size,
            });
        }
        let samples = e
            .get("samples")
            .and_then(|v| v.as_u64())
            .ok_or_else(|| bad("no `samples` count".into()))?;
        let info = |k: &str| -> Result<Option<FileInfo>> {
            let Some(d) = e.get(k).filter(|d| !d.is_null()) else {
                return Ok(None);
            };
            let bytes = d
                .get("bytes")
                .and_then(|b| b.as_u64())
                .ok_or_else(|| bad(format!("`{k}` has no `bytes`")))?;
            let hashes = d
                .get("hashes")
                .and_then(|h| h.as_object())
                .map(|h| {
                    h.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_ascii_lowercase())))
                        .collect()
                })
                .unwrap_or_default();
            Ok(Some(FileInfo { bytes, hashes }))
        };
        let raw = info("raw_data")?.ok_or_else(|| bad("no `raw_data`".into()))?;
        let zip = info("zip_data")?;
        if zstd {
            let c = e.get("compression").and_then(|c| c.as_str()).unwrap_or("");
            if c != "zstd" && !c.starts_with("zstd:") {
                return Err(bad(format!("compression `{c}` (zstd and none are read)")));
            }
        }
        Ok(Shard {
            index: index.to_path_buf(),
            columns,
            samples,
            raw,
            zstd,
            zip: if zstd { zip } else { None },
        })
    }
}

/// Check the hashes `info` lists against `bytes`; `Err` names the one
/// that differs.
fn check_hashes(info: &FileInfo, bytes: &[u8]) -> std::result::Result<(), String> {
    use sha2::Digest;
    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
    for (algo, want) in &info.hashes {
        let got = match algo.as_str() {
            "md5" => hex(&md5::Md5::digest(bytes)),
            "sha1" => hex(&sha1::Sha1::digest(bytes)),
            "sha224" => hex(&sha2::Sha224::digest(bytes)),
            "sha256" => hex(&sha2::Sha256::digest(bytes)),
            "sha384" => hex(&sha2::Sha384::digest(bytes)),
            "sha512" => hex(&sha2::Sha512::digest(bytes)),
            "xxh32" => format!("{:08x}", xxhash_rust::xxh32::xxh32(bytes, 0)),
            "xxh64" => format!("{:016x}", xxhash_rust::xxh64::xxh64(bytes, 0)),
            "xxh3_64" => format!("{:016x}", xxhash_rust::xxh3::xxh3_64(bytes)),
            "xxh128" | "xxh3_128" => format!("{:032x}", xxhash_rust::xxh3::xxh3_128(bytes)),
            other => {
                log::warn!("MDS hash `{other}` is not checked (feedline does not compute it)");
                continue;
            }
        };
        if &got != want {
            return Err(format!(
                "its {algo} is {got}, where the index says {want}: the file is damaged or \
                 not the one indexed"
            ));
        }
    }
    Ok(())
}

/// Where a shard's bytes are read from.
enum Body {
    /// An uncompressed shard, read in windows.
    File {
        file: File,
        window: Vec<u8>,
        start: u64,
    },
    /// A decompressed shard.
    Mem(Vec<u8>),
}

impl Body {
    /// Bytes `begin..end` of the (decompressed) shard.
    fn get(&mut self, begin: u64, end: u64, len: u64) -> std::io::Result<&[u8]> {
        match self {
            Body::Mem(v) => Ok(&v[begin as usize..end as usize]),
            Body::File {
                file,
                window,
                start,
            } => {
                let have = *start..*start + window.len() as u64;
                if !(have.contains(&begin) && end <= have.end) {
                    let n = ((end - begin) as usize)
                        .max(WINDOW)
                        .min((len - begin) as usize);
                    window.resize(n, 0);
                    file.seek(SeekFrom::Start(begin))?;
                    file.read_exact(window)?;
                    *start = begin;
                }
                let at = (begin - *start) as usize;
                Ok(&window[at..at + (end - begin) as usize])
            }
        }
    }
}

/// Reads one shard's samples in order.
struct MdsReader {
    path: PathBuf,
    source: SourceId,
    shard: Shard,
    body: Body,
    /// The (decompressed) shard's size.
    len: u64,
    /// `samples + 1` offsets from the shard's start.
    offsets: Vec<u32>,
    next: u64,
}

impl MdsReader {
    fn open(path: &Path, shard: Shard, opts: &OpenOptions) -> Result<MdsReader> {
        let bad = |what: String| Error::BadFile {
            path: path.to_path_buf(),
            what: format!("{what} (the shard of {})", shard.index.display()),
        };
        let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
        let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let info = if shard.zstd {
            shard.zip.as_ref().unwrap_or(&shard.raw)
        } else {
            &shard.raw
        };
        if size != info.bytes {
            return Err(bad(format!(
                "{size} bytes, where the index says {}: the file is truncated or not the one \
                 indexed",
                info.bytes
            )));
        }
        let check = opts.verify_checksums && !info.hashes.is_empty();
        let mut body = if shard.zstd || check {
            let mut bytes = Vec::with_capacity(size as usize);
            file.read_to_end(&mut bytes)
                .map_err(|e| Error::io(path, e))?;
            if check {
                check_hashes(info, &bytes).map_err(bad)?;
            }
            if shard.zstd {
                let mut raw = Vec::with_capacity(shard.raw.bytes.min(1 << 30) as usize);
                zstd::stream::read::Decoder::new(&bytes[..])
                    .and_then(|d| d.take(shard.raw.bytes + 1).read_to_end(&mut raw))
                    .map_err(|e| bad(format!("does not decompress as zstd: {e}")))?;
                if raw.len() as u64 != shard.raw.bytes {
                    return Err(bad(format!(
                        "decompresses to {} bytes, where the index says {}",
                        raw.len(),
                        shard.raw.bytes
                    )));
                }
                if opts.verify_checksums {
                    check_hashes(&shard.raw, &raw).map_err(bad)?;
                }
                Body::Mem(raw)
            } else {
                Body::Mem(bytes)
            }
        } else {
            Body::File {
                file,
                window: Vec::new(),
                start: 0,
            }
        };
        let len = shard.raw.bytes;
        let n = shard.samples;
        if len < 4 {
            return Err(bad(format!("{len} bytes, too short for a shard")));
        }
        let head = body.get(0, 4, len).map_err(|e| Error::io(path, e))?;
        let count = u32::from_le_bytes(head.try_into().expect("4 bytes")) as u64;
        if count != n {
            return Err(bad(format!(
                "holds {count} samples, where the index says {n}"
            )));
        }
        let table_end = 4 + 4 * (n + 1);
        if table_end > len {
            return Err(bad(format!(
                "its offset table ({} bytes) runs past its {len} bytes",
                4 * (n + 1)
            )));
        }
        let table = body
            .get(4, table_end, len)
            .map_err(|e| Error::io(path, e))?;
        let offsets: Vec<u32> = table
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        if (offsets[0] as u64) < table_end {
            return Err(bad(format!(
                "its first sample starts at {}, inside its offset table (which ends at \
                 {table_end})",
                offsets[0]
            )));
        }
        if let Some(i) = offsets.windows(2).position(|w| w[1] < w[0]) {
            return Err(bad(format!(
                "its offset table goes back at sample {i} ({} then {})",
                offsets[i],
                offsets[i + 1]
            )));
        }
        // The writer's settings sit between the table and the first
        // sample: JSON naming the index's columns, which pins the first
        // offset.
        let config = body
            .get(table_end, offsets[0] as u64, len)
            .map_err(|e| Error::io(path, e))?;
        let config: serde_json::Value = serde_json::from_slice(config).map_err(|e| {
            bad(format!(
                "its settings (bytes {table_end}..{}) are not JSON ({e}): its offset table or \
                 its bytes are damaged",
                offsets[0]
            ))
        })?;
        let names: Vec<&str> = shard.columns.iter().map(|c| c.name.as_str()).collect();
        let theirs: Option<Vec<&str>> = config
            .get("column_names")
            .and_then(|v| v.as_array())
            .and_then(|a| a.iter().map(|x| x.as_str()).collect());
        if theirs.as_ref() != Some(&names) {
            return Err(bad(format!(
                "its settings name the columns {theirs:?}, where the index says {names:?}"
            )));
        }
        let last = *offsets.last().expect("n + 1 offsets") as u64;
        if last != len {
            return Err(bad(format!(
                "its samples end at {last}, where the shard has {len} bytes"
            )));
        }
        Ok(MdsReader {
            path: path.to_path_buf(),
            source: source_id(path),
            shard,
            body,
            len,
            offsets,
            next: opts.start_record.min(n),
        })
    }

    /// Sample `i`'s fields.
    fn sample(&mut self, i: u64) -> Result<Record> {
        let (begin, end) = (
            self.offsets[i as usize] as u64,
            self.offsets[i as usize + 1] as u64,
        );
        let location = Location::new(self.source, i, Some(begin));
        let data = self
            .body
            .get(begin, end, self.len)
            .map_err(|e| Error::io(&self.path, e))?;
        let columns = &self.shard.columns;
        let variable = columns.iter().filter(|c| c.size.is_none()).count();
        let head = 4 * variable;
        if data.len() < head {
            return Err(Error::corrupt(
                location.clone(),
                format!(
                    "{} bytes, shorter than its {variable} column sizes",
                    data.len()
                ),
            ));
        }
        let mut var_sizes = data[..head]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")) as usize);
        let mut at = head;
        let mut fields = Vec::with_capacity(columns.len());
        for c in columns {
            let size = match c.size {
                Some(s) => s,
                None => var_sizes.next().expect("one size per variable column"),
            };
            let value = data.get(at..at + size).ok_or_else(|| {
                Error::corrupt(
                    location.clone(),
                    format!(
                        "column `{}`: {size} bytes at {at} run past the sample's {} bytes",
                        c.name,
                        data.len()
                    ),
                )
            })?;
            at += size;
            let t = c.encoding.decode(value).map_err(|actual| Error::Field {
                location: location.clone(),
                field: c.name.clone(),
                expected: format!("a value of its MDS encoding ({:?})", c.encoding),
                actual,
            })?;
            fields.push((c.name.clone(), t));
        }
        if at != data.len() {
            return Err(Error::corrupt(
                location.clone(),
                format!("{} bytes after its columns' {at} bytes", data.len() - at),
            ));
        }
        Ok(Record { fields, location })
    }
}

impl RecordReader for MdsReader {
    fn next_record(&mut self) -> Result<Option<Record>> {
        if self.next >= self.shard.samples {
            return Ok(None);
        }
        let i = self.next;
        self.next += 1;
        self.sample(i).map(Some)
    }

    fn next_index(&self) -> u64 {
        self.next
    }

    /// Moves on by the offset table: no sample in between is read.
    fn skip_to(&mut self, record: u64) -> Result<()> {
        if record > self.next {
            self.next = record.min(self.shard.samples);
        }
        Ok(())
    }

    /// A bad sample is framed by the offset table: the next one reads.
    fn can_continue(&self) -> bool {
        true
    }

    fn len_hint(&self) -> Option<u64> {
        Some(self.shard.samples)
    }
}

/// Write the small MDS dataset of the module example into `dir` (columns
/// `id`, int64, and `text`, str; 3 samples in one shard, as `MDSWriter`
/// lays them out) and return its shard's path.
#[doc(hidden)]
pub fn write_example(dir: &Path) -> Result<PathBuf> {
    let samples = [(0i64, "zero"), (1, "one"), (2, "two")];
    let config = br#"{"column_encodings":["int64","str"],"column_names":["id","text"],"column_sizes":[8,null],"compression":null,"format":"mds","hashes":[],"size_limit":67108864,"version":2}"#;
    let encoded: Vec<Vec<u8>> = samples
        .iter()
        .map(|(id, text)| {
            let mut s = (text.len() as u32).to_le_bytes().to_vec();
            s.extend_from_slice(&id.to_le_bytes());
            s.extend_from_slice(text.as_bytes());
            s
        })
        .collect();
    let n = encoded.len() as u32;
    let mut offset = 4 + 4 * (n + 1) + config.len() as u32;
    let mut shard = n.to_le_bytes().to_vec();
    shard.extend_from_slice(&offset.to_le_bytes());
    for s in &encoded {
        offset += s.len() as u32;
        shard.extend_from_slice(&offset.to_le_bytes());
    }
    shard.extend_from_slice(config);
    for s in &encoded {
        shard.extend_from_slice(s);
    }
    let path = dir.join("shard.00000.mds");
    std::fs::write(&path, &shard).map_err(|e| Error::io(&path, e))?;
    let index = serde_json::json!({"version": 2, "shards": [{
        "column_encodings": ["int64", "str"], "column_names": ["id", "text"],
        "column_sizes": [8, null], "compression": null, "format": "mds", "hashes": [],
        "raw_data": {"basename": "shard.00000.mds", "bytes": shard.len(), "hashes": {}},
        "samples": n, "size_limit": 67108864, "version": 2, "zip_data": null}]});
    let ipath = dir.join(MDS_INDEX);
    std::fs::write(&ipath, index.to_string()).map_err(|e| Error::io(&ipath, e))?;
    Ok(path)
}
