//! WebDataset tar shards (`.tar`, `.tar.gz`, `wds:` prefix): one record per
//! sample, as the `webdataset` package groups a shard's files.
//!
//! This module owns the streaming tar reader (512-byte headers decoded by
//! the `tar` crate, checksums checked, PAX and GNU long names, members read
//! one after another from a forward-only stream, so a `.tar.gz` or a pipe
//! reads as well as a file) and WebDataset's rules:
//!
//! - Only regular files count; `__…__` metadata members are skipped.
//! - A member's name splits at the first dot of its last path component:
//!   before it the sample key (with any directories), after it the
//!   extension, lower-cased (`a/b/x.seg.png` → key `a/b/x`, field
//!   `seg.png`). A name with no dot in its last component is skipped.
//! - Consecutive members with one key make one sample; a sample holding an
//!   extension twice is a bad record.
//! - Every field is its member's bytes (a scalar byte string), except that
//!   a field whose last extension is `cls`, `cls2`, `class`, `count`,
//!   `index`, `inx` or `id` is the integer its text holds (webdataset's
//!   `basichandlers`; surrounding whitespace allowed) — text that is no
//!   integer is a bad record naming the field. The key is field `__key__`.
//!
//! A sample missing a field the schema declares is a bad record (as for
//! every format: [`Instance::from_record`](crate::Instance::from_record)).
//! An inferred schema holds only the fields every sample read to infer it
//! has ([`Format::infer_from_records`]), so a later sample missing one of
//! them is a bad record too — never delivered without it. Errors about a
//! sample name its `__key__`, and a member's errors the member's name and
//! offset in the tar.
//! Record `N` is the `N`th sample (0-based); its offset is that of its first
//! member's header in the (decompressed) stream. A damaged header or a
//! stream that ends inside a member ends the file.
//!
//! ```
//! use feedline::format::{Format, OpenOptions, wds::WdsFormat};
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("shard.tar");
//! # let mut b = tar::Builder::new(std::fs::File::create(&path).unwrap());
//! # for (name, data) in [("k0.cls", &b"3"[..]), ("k0.jpg", b"\xff\xd8"), ("k1.cls", b"4"), ("k1.jpg", b"")] {
//! #     let mut h = tar::Header::new_ustar();
//! #     h.set_size(data.len() as u64);
//! #     h.set_cksum();
//! #     b.append_data(&mut h, name, data).unwrap();
//! # }
//! # b.finish().unwrap();
//! # drop(b);
//! let mut r = WdsFormat.open(&path, &OpenOptions::default()).unwrap();
//! let rec = r.next_record().unwrap().unwrap();
//! assert_eq!(rec.to_json(), serde_json::json!({"__key__": ["azA="], "cls": [3], "jpg": ["/9g="]}));
//! assert_eq!(r.next_record().unwrap().unwrap().location.record, 1);
//! assert!(r.next_record().unwrap().is_none());
//! ```

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::Path;

use super::{
    check_chunk_budget, open_stream, source_id, Compression, Format, OpenOptions, RecordReader,
};
use crate::chunk::Chunk;
use crate::error::{Error, Result};
use crate::provenance::{Location, SourceId};
use crate::record::Record;
use crate::schema::Schema;
use crate::values::{BytesList, Tensor, Values};

/// Extensions whose text webdataset decodes as an integer.
pub const INTEGER_EXTENSIONS: [&str; 7] = ["cls", "cls2", "class", "count", "index", "inx", "id"];

/// The WebDataset tar format.
#[derive(Clone, Copy, Debug, Default)]
pub struct WdsFormat;

impl Format for WdsFormat {
    fn name(&self) -> &str {
        "wds"
    }

    fn extensions(&self) -> &[&str] {
        &["tar"]
    }

    /// The fields every sample record has, as [`Schema::infer`] infers
    /// them: a field some samples lack is left out (with a warning naming
    /// it and how many had it), so that a later sample missing a field of
    /// the schema is a bad record, as with a schema given.
    fn infer_from_records(&self, records: &[Record]) -> Result<Schema> {
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for r in records {
            for (name, _) in &r.fields {
                *seen.entry(name.as_str()).or_default() += 1;
            }
        }
        let partial: Vec<String> = (seen.iter())
            .filter(|(_, &n)| n < records.len())
            .map(|(name, n)| format!("`{name}` (in {n} of {})", records.len()))
            .collect();
        if partial.is_empty() {
            return Schema::infer(records);
        }
        log::warn!(
            "{}: {} left out of the inferred schema: a field is in it only if every sample \
             read to infer it has it (give a schema to read {})",
            records[0].location.source.name(),
            partial.join(", "),
            if partial.len() == 1 { "it" } else { "them" }
        );
        let everywhere: Vec<Record> = (records.iter())
            .map(|r| Record {
                fields: (r.fields.iter())
                    .filter(|(name, _)| seen[name.as_str()] == records.len())
                    .cloned()
                    .collect(),
                location: r.location.clone(),
            })
            .collect();
        Schema::infer(&everywhere)
    }

    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        opts.validate()?;
        let compression = opts
            .compression
            .unwrap_or_else(|| Compression::from_path(path));
        let mut r = WdsReader {
            source: source_id(path),
            members: Members {
                stream: open_stream(path, compression)?,
                offset: 0,
                max: opts.max_record_bytes,
            },
            pending: None,
            next: 0,
            dead: false,
            ended: false,
            last_key: None,
        };
        while r.next < opts.start_record {
            match r.next_record() {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) if r.can_continue() => log::debug!("skipped before start: {e}"),
                Err(e) => return Err(e),
            }
        }
        Ok(Box::new(r))
    }
}

/// One regular file of the shard, split into key and extension.
struct Member {
    /// Its name in the tar.
    name: String,
    key: String,
    ext: String,
    data: Vec<u8>,
    /// Offset of its first header block.
    offset: u64,
}

/// A member of the stream that is a WebDataset file.
enum Item {
    /// Read whole.
    File(Member),
    /// Over `max_record_bytes`: skipped, its sample is a bad record.
    TooBig {
        key: String,
        what: String,
        offset: u64,
    },
}

/// The shard cannot be read on (damaged header, truncated): why.
struct Dead(String);

/// Reads a tar stream's members in order.
struct Members {
    stream: Box<dyn Read + Send>,
    /// Bytes consumed so far.
    offset: u64,
    /// Largest member read.
    max: u64,
}

impl Members {
    /// Fill `buf` whole; `Ok(false)` if the stream ended before its first byte.
    fn fill(&mut self, buf: &mut [u8]) -> std::result::Result<bool, Dead> {
        let mut got = 0;
        while got < buf.len() {
            match self.stream.read(&mut buf[got..]) {
                Ok(0) if got == 0 => return Ok(false),
                Ok(0) => {
                    return Err(Dead(format!(
                        "the stream ends inside a tar block ({got} of {} bytes)",
                        buf.len()
                    )))
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Dead(format!("reading the stream: {e}"))),
            }
        }
        self.offset += buf.len() as u64;
        Ok(true)
    }

    /// Read a member's `size` bytes and the padding to the next block.
    fn data(&mut self, size: u64) -> std::result::Result<Vec<u8>, Dead> {
        let mut data = vec![0u8; size as usize];
        if size > 0 && !self.fill(&mut data)? {
            return Err(Dead(format!(
                "the stream ends before a member's {size} bytes"
            )));
        }
        self.skip(padding(size))?;
        Ok(data)
    }

    fn skip(&mut self, mut n: u64) -> std::result::Result<(), Dead> {
        let mut buf = [0u8; 4096];
        while n > 0 {
            let k = n.min(buf.len() as u64) as usize;
            if !self.fill(&mut buf[..k])? {
                return Err(Dead("the stream ends inside a member".into()));
            }
            n -= k as u64;
        }
        Ok(())
    }

    /// The next regular file with a WebDataset name, `None` at the end.
    fn next(&mut self) -> std::result::Result<Option<Item>, Dead> {
        let mut long_name: Option<Vec<u8>> = None;
        loop {
            let start = self.offset;
            let mut block = [0u8; 512];
            if !self.fill(&mut block)? || block.iter().all(|&b| b == 0) {
                return Ok(None);
            }
            let header = tar::Header::from_byte_slice(&block);
            let size = check_sum(&block).and_then(|()| {
                header
                    .entry_size()
                    .map_err(|e| format!("bad size field: {e}"))
            });
            let size = match size {
                Ok(size) => size,
                Err(what) => {
                    // The error is at the header.
                    self.offset = start;
                    return Err(Dead(format!(
                        "tar header: {what} (not a tar file, or damaged)"
                    )));
                }
            };
            let kind = header.entry_type();
            if kind.is_pax_local_extensions() || kind.is_gnu_longname() {
                if size > self.max {
                    return Err(Dead(format!(
                        "tar extended header at offset {start} of {size} bytes, over max_record_bytes {}",
                        self.max
                    )));
                }
                let data = self.data(size)?;
                if kind.is_gnu_longname() {
                    let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
                    long_name = Some(data[..end].to_vec());
                } else {
                    for ext in tar::PaxExtensions::new(&data) {
                        let ext =
                            ext.map_err(|e| Dead(format!("PAX header at offset {start}: {e}")))?;
                        if ext.key_bytes() == b"path" {
                            long_name = Some(ext.value_bytes().to_vec());
                        }
                    }
                }
                continue;
            }
            if !kind.is_file() {
                self.skip(size + padding(size))?;
                long_name = None;
                continue;
            }
            let name = long_name
                .take()
                .unwrap_or_else(|| header.path_bytes().into_owned());
            let name = String::from_utf8_lossy(&name).into_owned();
            let named = if is_meta(&name) {
                None
            } else {
                split_name(&name)
            };
            let Some((key, ext)) = named else {
                self.skip(size + padding(size))?;
                continue;
            };
            if size > self.max {
                self.skip(size + padding(size))?;
                return Ok(Some(Item::TooBig {
                    key: key.to_string(),
                    what: format!(
                        "member `{name}` at offset {start} of the tar: {size} bytes, over \
                         max_record_bytes {}",
                        self.max
                    ),
                    offset: start,
                }));
            }
            let data = self.data(size)?;
            return Ok(Some(Item::File(Member {
                name: name.clone(),
                key: key.to_string(),
                ext: ext.to_lowercase(),
                data,
                offset: start,
            })));
        }
    }
}

fn padding(size: u64) -> u64 {
    (512 - size % 512) % 512
}

/// A header's checksum: the sum of its bytes, the checksum field as spaces.
fn check_sum(block: &[u8; 512]) -> std::result::Result<(), String> {
    let stored = tar::Header::from_byte_slice(block)
        .cksum()
        .map_err(|e| format!("bad checksum field: {e}"))?;
    let computed: u32 = block
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                32
            } else {
                b as u32
            }
        })
        .sum();
    if stored != computed {
        return Err(format!(
            "bad header checksum (stored {stored}, computed {computed})"
        ));
    }
    Ok(())
}

/// webdataset's metadata members: `__…__` at the top, or a `__…__/` directory.
fn is_meta(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("__") else {
        return false;
    };
    let first = rest.split('/').next().unwrap_or("");
    let top = !name.contains('/') && name.len() >= 4 && name.ends_with("__");
    top || (first.len() >= 2 && first.ends_with("__"))
}

/// webdataset's `base_plus_ext`, the regular expression
/// `^((?:.*/|)[^.]+)[.]([^/]*)$`: the key ends at the first dot after the
/// last directory that leaves a non-empty stem, and the extension (after
/// that dot) holds no `/`; `None` if no split fits (no dot in the last
/// component). `a/b/x.seg.png` → (`a/b/x`, `seg.png`).
pub fn split_name(name: &str) -> Option<(&str, &str)> {
    // The directory part `(?:.*/|)` is greedy: the longest one first.
    let starts = name
        .char_indices()
        .rev()
        .filter(|&(_, c)| c == '/')
        .map(|(i, _)| i + 1)
        .chain(std::iter::once(0));
    for p in starts {
        let rest = &name[p..];
        if let Some(d) = rest.find('.') {
            if d > 0 && !rest[d + 1..].contains('/') {
                return Some((&name[..p + d], &rest[d + 1..]));
            }
        }
    }
    None
}

/// True if webdataset decodes this field's text as an integer.
pub fn is_integer_field(ext: &str) -> bool {
    let last = ext.rsplit('.').next().unwrap_or(ext);
    INTEGER_EXTENSIONS.contains(&last)
}

/// Reads one shard's samples in order.
struct WdsReader {
    source: SourceId,
    members: Members,
    /// The first member of the next sample, read ahead.
    pending: Option<Item>,
    next: u64,
    dead: bool,
    ended: bool,
    /// The key of the last sample read (named by an error after it).
    last_key: Option<String>,
}

impl Item {
    fn key(&self) -> &str {
        match self {
            Item::File(m) => &m.key,
            Item::TooBig { key, .. } => key,
        }
    }

    fn offset(&self) -> u64 {
        match self {
            Item::File(m) => m.offset,
            Item::TooBig { offset, .. } => *offset,
        }
    }
}

impl WdsReader {
    fn location(&self, offset: u64) -> Location {
        Location::new(self.source, self.next, Some(offset))
    }

    /// The next member; a damaged stream ends the shard (an error at the
    /// current sample).
    fn item(&mut self) -> Result<Option<Item>> {
        if let Some(m) = self.pending.take() {
            return Ok(Some(m));
        }
        if self.ended {
            return Ok(None);
        }
        match self.members.next() {
            Ok(None) => {
                self.ended = true;
                Ok(None)
            }
            Ok(Some(m)) => Ok(Some(m)),
            Err(Dead(what)) => {
                self.dead = true;
                let after = match &self.last_key {
                    Some(k) => format!(" (after sample `__key__` {k:?})"),
                    None => String::new(),
                };
                Err(Error::corrupt(
                    self.location(self.members.offset),
                    format!("{what}{after}"),
                ))
            }
        }
    }

    /// A sample's members into a record, or the sample's first problem.
    fn sample(&self, key: &str, offset: u64, items: Vec<Item>) -> Result<Record> {
        let location = self.location(offset);
        let mut fields: Vec<(String, Tensor)> = Vec::with_capacity(items.len() + 1);
        let mut key_bytes = BytesList::new();
        key_bytes.push(key.as_bytes());
        fields.push(("__key__".into(), Tensor::scalar(Values::Bytes(key_bytes))));
        for item in items {
            let m = match item {
                Item::File(m) => m,
                Item::TooBig { what, offset, .. } => {
                    return Err(Error::corrupt(
                        self.location(offset),
                        format!("sample `__key__` {key:?}: {what}"),
                    ))
                }
            };
            let member = format!(
                "member `{}` at offset {} of the tar, sample `__key__` {key:?}",
                m.name, m.offset
            );
            if fields.iter().any(|(n, _)| *n == m.ext) {
                return Err(Error::Field {
                    location,
                    field: m.ext,
                    expected: "one file per extension in a sample".into(),
                    actual: format!("a second file for sample `{key}` ({member})"),
                });
            }
            let value = if is_integer_field(&m.ext) {
                let text = std::str::from_utf8(&m.data).ok().map(str::trim);
                match text.and_then(|t| t.parse::<i64>().ok()) {
                    Some(v) => Values::I64(vec![v]),
                    None => {
                        return Err(Error::Field {
                            location,
                            field: m.ext,
                            expected:
                                "an integer in text (webdataset decodes this extension as int)"
                                    .into(),
                            actual: format!("{:?} ({member})", String::from_utf8_lossy(&m.data)),
                        })
                    }
                }
            } else {
                let mut b = BytesList::new();
                b.push(&m.data);
                Values::Bytes(b)
            };
            fields.push((m.ext, Tensor::scalar(value)));
        }
        Ok(Record { fields, location })
    }
}

/// `e`, an error about the sample `rec`, naming the sample's `__key__`
/// and where it starts in the tar.
fn name_sample(e: Error, rec: &Record) -> Error {
    let key = match rec.get("__key__").map(|t| &t.values) {
        Some(Values::Bytes(b)) if b.len() == 1 => String::from_utf8_lossy(b.get(0)).into_owned(),
        _ => return e,
    };
    let sample = match rec.location.offset {
        Some(o) => format!("sample `__key__` {key:?}, its first member at offset {o} of the tar"),
        None => format!("sample `__key__` {key:?}"),
    };
    with_sample(e, &sample)
}

/// `e`, an error about a row whose `__key__` field (a WebDataset sample's
/// key) is `key`, naming it: a transform's error on a sample then says
/// which sample, not only its record number.
pub(crate) fn name_key(e: Error, key: &[u8]) -> Error {
    let key = String::from_utf8_lossy(key);
    with_sample(e, &format!("sample `__key__` {key:?}"))
}

/// `e` with `sample` (its text) added.
fn with_sample(e: Error, sample: &str) -> Error {
    match e {
        Error::Field {
            location,
            field,
            expected,
            actual,
        } => Error::Field {
            location,
            field,
            expected,
            actual: format!("{actual} ({sample})"),
        },
        Error::Corrupt { location, what } => Error::Corrupt {
            location,
            what: format!("{sample}: {what}"),
        },
        Error::Transform {
            location,
            transform,
            what,
        } => Error::Transform {
            location,
            transform,
            what: format!("{what} ({sample})"),
        },
        other => other,
    }
}

impl RecordReader for WdsReader {
    fn next_record(&mut self) -> Result<Option<Record>> {
        if self.dead {
            return Err(Error::corrupt(
                self.location(self.members.offset),
                "the shard cannot be read past an earlier error",
            ));
        }
        let Some(first) = self.item()? else {
            return Ok(None);
        };
        let key = first.key().to_string();
        let offset = first.offset();
        let mut items = vec![first];
        loop {
            match self.item()? {
                Some(m) if m.key() == key => items.push(m),
                Some(m) => {
                    self.pending = Some(m);
                    break;
                }
                None => break,
            }
        }
        let rec = self.sample(&key, offset, items);
        self.next += 1;
        self.last_key = Some(key);
        rec.map(Some)
    }

    /// Samples as records into `chunk` (as the default does); a sample that
    /// does not fit the chunk's schema (a field missing, of another type or
    /// shape) is an error naming its `__key__` too.
    fn read_chunk(
        &mut self,
        chunk: &mut Chunk,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<usize> {
        check_chunk_budget(max_records, max_bytes)?;
        let mut n = 0;
        while n < max_records && (n == 0 || chunk.payload_bytes() < max_bytes) {
            let Some(rec) = self.next_record()? else {
                break;
            };
            if let Err(e) = chunk.push_record(&rec) {
                return Err(name_sample(e, &rec));
            }
            n += 1;
        }
        Ok(n)
    }

    fn next_index(&self) -> u64 {
        self.next
    }

    fn can_continue(&self) -> bool {
        !self.dead
    }
}
