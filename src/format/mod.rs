//! File formats and the registry that picks one for a path.
//!
//! A [`Format`] opens a file at a starting record and gives a
//! [`RecordReader`], which yields schema-free [`Record`]s (for `cat`,
//! `inspect` and schema inference) or decodes many records at once into a
//! columnar [`Chunk`] following a schema (the hot path).
//!
//! The [`Registry`] chooses a format, in this order: an explicit name, a
//! `FORMAT:` prefix on the path (Paddle's `open_files` rule, e.g.
//! `tfrecord:shard-7.dat`), or the extension (after a compression extension
//! such as `.gz`). Users add their own with [`Registry::register`].
//!
//! ```
//! use feedline::format::Registry;
//! let reg = Registry::with_builtin();
//! let (fmt, path, _) = reg.resolve("tfrecord:shard-7.dat", None).unwrap();
//! assert_eq!(fmt.name(), "tfrecord");
//! assert_eq!(path.to_str(), Some("shard-7.dat"));
//! assert_eq!(reg.resolve("data/x.npy", None).unwrap().0.name(), "npy");
//! assert!(reg.resolve("data/x.unknown", None).is_err());
//! ```

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::instance::{Chunk, Record, SourceId};
use crate::schema::Schema;

pub mod csv;
pub mod example;
pub mod generator;
pub mod jsonl;
pub mod npy;
pub mod tfrecord;

/// Stream compression of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// Not compressed.
    None,
    /// GZIP (`.gz`).
    Gzip,
    /// ZLIB (`.zz`, `.zlib`).
    Zlib,
}

impl Compression {
    /// Parse `none`, `gzip`/`gz`, `zlib`/`zz`.
    pub fn parse(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "" | "none" => Ok(Compression::None),
            "gzip" | "gz" => Ok(Compression::Gzip),
            "zlib" | "zz" => Ok(Compression::Zlib),
            other => Err(Error::Config(format!(
                "unknown compression `{other}` (expected none, gzip or zlib)"
            ))),
        }
    }

    /// The compression a file name's extension implies.
    pub fn from_path(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("gz") => Compression::Gzip,
            Some("zz") | Some("zlib") => Compression::Zlib,
            _ => Compression::None,
        }
    }
}

/// Default cap on one record's size: 256 MiB.
pub const DEFAULT_MAX_RECORD_BYTES: u64 = 256 << 20;

/// How to open a file.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// First record to yield (0-based); earlier ones are skipped.
    pub start_record: u64,
    /// Compression; `None` means: from the extension.
    pub compression: Option<Compression>,
    /// Verify checksums where the format has them (TFRecord CRC-32C).
    pub verify_checksums: bool,
    /// Largest record accepted: a length field is never trusted beyond it
    /// (nor beyond the bytes left in an uncompressed file).
    pub max_record_bytes: u64,
    /// Check the CRC of a record whose large byte string is left in the
    /// memory-mapped file ([`Column::mapped_row`](crate::Column::mapped_row))
    /// when those bytes are copied out — fused with the copy, so they are
    /// read from memory once — instead of when the record is read
    /// ([`RecordReader::read_chunk`] of an uncompressed TFRecord file;
    /// everything else is checked as it is read). The error is the same,
    /// but it comes from collation ([`crate::collate`]) or whatever takes
    /// the row out, not from the reader, and the other rows of that batch
    /// are not delivered: use it where a bad record ends the pass (the
    /// actor pipeline turns it on unless it skips bad records). Until then
    /// the record's other fields, in the chunk's [`Column::values`](crate::Column::values),
    /// are unchecked too. It also lets records of 64 KiB or more be read
    /// from their first and last bytes, their large byte string left to be
    /// read straight into the batch (see
    /// [`tfrecord`'s large records](crate::format::tfrecord#large-records)).
    /// Default: false.
    pub defer_checksums: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            start_record: 0,
            compression: None,
            verify_checksums: true,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            defer_checksums: false,
        }
    }
}

/// Reads one file's records in order.
///
/// After an `Err`, [`can_continue`](Self::can_continue) tells whether the
/// next call reads the following record (the bad one was skipped) or the rest
/// of the file is unreadable.
pub trait RecordReader: Send {
    /// The next record in the file's own kinds, or `None` at the end.
    fn next_record(&mut self) -> Result<Option<Record>>;

    /// Decode up to `max_records` records (stopping early once the chunk holds
    /// `max_bytes` of payload) into `chunk`, following the chunk's schema.
    /// Returns how many were appended; `0` means the end. On `Err`, the
    /// records decoded before the bad one are in `chunk`.
    fn read_chunk(
        &mut self,
        chunk: &mut Chunk,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<usize> {
        let mut n = 0;
        while n < max_records && chunk.payload_bytes() < max_bytes {
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

    /// Index of the next record to be read.
    fn next_index(&self) -> u64;

    /// After an error: true if reading may go on with the next record.
    fn can_continue(&self) -> bool {
        false
    }

    /// Total number of records, if the format knows it without reading.
    fn len_hint(&self) -> Option<u64> {
        None
    }
}

/// A file format.
pub trait Format: Send + Sync + 'static {
    /// Short name, also the `FORMAT:` path prefix (e.g. `"tfrecord"`).
    fn name(&self) -> &str;
    /// File extensions it claims, without dot (e.g. `["tfrecord", "tfrecords"]`).
    fn extensions(&self) -> &[&str];
    /// Open `path` (already stripped of any prefix).
    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>>;
}

/// The formats known to a loader, and the rules that choose among them.
#[derive(Clone)]
pub struct Registry {
    formats: Vec<Arc<dyn Format>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.formats.iter().map(|x| x.name()))
            .finish()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::with_builtin()
    }
}

impl Registry {
    /// No formats at all.
    pub fn empty() -> Self {
        Registry {
            formats: Vec::new(),
        }
    }

    /// TFRecord, NPY, NPZ, JSON Lines, CSV and TSV.
    pub fn with_builtin() -> Self {
        let mut r = Self::empty();
        r.register(Arc::new(tfrecord::TfRecordFormat));
        r.register(Arc::new(npy::NpyFormat));
        r.register(Arc::new(npy::NpzFormat));
        r.register(Arc::new(jsonl::JsonlFormat));
        r.register(Arc::new(csv::CsvFormat::default()));
        r.register(Arc::new(csv::CsvFormat::tsv()));
        r
    }

    /// Add a format; a later one with the same name or extension wins.
    pub fn register(&mut self, format: Arc<dyn Format>) {
        self.formats.insert(0, format);
    }

    /// The format named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Format>> {
        self.formats.iter().find(|f| f.name() == name).cloned()
    }

    /// Names of the registered formats.
    pub fn names(&self) -> Vec<String> {
        self.formats.iter().map(|f| f.name().to_string()).collect()
    }

    /// Choose the format for `spec` (a path, maybe with a `FORMAT:` prefix):
    /// returns the format, the bare path and the compression the extension implies.
    pub fn resolve(
        &self,
        spec: &str,
        explicit: Option<&str>,
    ) -> Result<(Arc<dyn Format>, PathBuf, Compression)> {
        let unknown = |what: String| Error::UnknownFormat {
            path: spec.to_string(),
            what,
        };
        if let Some(name) = explicit {
            let f = self.get(name).ok_or_else(|| {
                unknown(format!(
                    "unknown format `{name}` (known: {})",
                    self.names().join(", ")
                ))
            })?;
            let path = PathBuf::from(spec);
            let c = Compression::from_path(&path);
            return Ok((f, path, c));
        }
        if let Some((prefix, rest)) = spec.split_once(':') {
            if let Some(f) = self.get(prefix) {
                let path = PathBuf::from(rest);
                let c = Compression::from_path(&path);
                return Ok((f, path, c));
            }
        }
        let path = PathBuf::from(spec);
        let c = Compression::from_path(&path);
        let base = if c == Compression::None {
            path.clone()
        } else {
            path.with_extension("")
        };
        let ext = base
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase())
            .ok_or_else(|| {
                unknown(
                    "no extension to choose a format by; add a FORMAT: prefix or pass --format"
                        .into(),
                )
            })?;
        let f = self
            .formats
            .iter()
            .find(|f| f.extensions().iter().any(|x| *x == ext))
            .cloned()
            .ok_or_else(|| {
                unknown(format!(
                    "no format for extension `.{ext}` (known: {}); add a FORMAT: prefix or pass --format",
                    self.names().join(", ")
                ))
            })?;
        Ok((f, path, c))
    }

    /// Resolve `spec` and open it. An explicit `opts.compression` wins over the extension.
    pub fn open(
        &self,
        spec: &str,
        explicit: Option<&str>,
        opts: &OpenOptions,
    ) -> Result<Box<dyn RecordReader>> {
        let (f, path, c) = self.resolve(spec, explicit)?;
        let mut opts = opts.clone();
        opts.compression.get_or_insert(c);
        f.open(&path, &opts)
    }

    /// Read up to `n` records of `spec` and infer a schema from them. A bad
    /// record ends the sample (the records before it are used); an error
    /// before any record is returned.
    pub fn infer_schema(&self, spec: &str, explicit: Option<&str>, n: usize) -> Result<Schema> {
        let mut r = self.open(spec, explicit, &OpenOptions::default())?;
        let mut recs = Vec::new();
        while recs.len() < n {
            match r.next_record() {
                Ok(Some(rec)) => recs.push(rec),
                Ok(None) => break,
                Err(e) if !recs.is_empty() => {
                    log::warn!(
                        "schema inferred from the {} records before: {e}",
                        recs.len()
                    );
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if recs.is_empty() {
            return Err(Error::Schema(format!(
                "{spec}: no records to infer a schema from"
            )));
        }
        Schema::infer(&recs)
    }
}

/// Open `path` as a byte stream with a 1 MiB buffer, decompressing as asked.
pub fn open_stream(path: &Path, compression: Compression) -> Result<Box<dyn Read + Send>> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let buffered = BufReader::with_capacity(1 << 20, file);
    Ok(match compression {
        Compression::None => Box::new(buffered),
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(buffered)),
        Compression::Zlib => Box::new(flate2::bufread::ZlibDecoder::new(buffered)),
    })
}

/// The interned source id of a path.
pub fn source_id(path: &Path) -> SourceId {
    SourceId::intern(&path.to_string_lossy())
}
