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

use std::io::{BufReader, Read};
use std::path::Path;

use crate::chunk::Chunk;
use crate::error::{Error, Result};
use crate::provenance::SourceId;
use crate::record::Record;

#[cfg(feature = "arrow")]
pub mod arrow;
#[cfg(any(feature = "parquet", feature = "arrow"))]
mod arrow_columns;
pub mod csv;
pub mod example;
pub mod generator;
pub mod jsonl;
#[cfg(feature = "mds")]
pub mod mds;
pub mod npy;
#[cfg(feature = "parquet")]
pub mod parquet;
mod registry;
pub mod tfrecord;
pub mod wds;

pub use registry::Registry;

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
    /// (nor beyond the bytes left in an uncompressed file). At least 1
    /// ([`validate`](Self::validate)).
    pub max_record_bytes: u64,
    /// Check the CRC of a record whose large byte string is left in its
    /// file ([`Column::file_row`](crate::Column::file_row)) when those bytes
    /// are copied out — fused with the copy, so they are
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
    /// The pass being read: for a source whose records depend on it (the
    /// runs of a `global` shuffle's order, whose record `i` is the `i`-th
    /// position of the pass's order). Files ignore it. Default: 0.
    pub pass: u64,
    /// The records of the source its reader is asked for (a rank's stride
    /// of a run of the `global` order, which then reads no other); a file
    /// reader reads every record and the pipeline keeps the stride's.
    /// Default: all.
    pub keep: crate::plan::RecordStride,
}

impl OpenOptions {
    /// Check the settings: `max_record_bytes` must be at least 1 (a cap of
    /// 0 would refuse every record of every file).
    pub fn validate(&self) -> Result<()> {
        if self.max_record_bytes == 0 {
            return Err(Error::Config(
                "max_record_bytes must be at least 1, got 0".into(),
            ));
        }
        Ok(())
    }
}

/// Check a [`RecordReader::read_chunk`] budget: at least one record and
/// one byte (a budget of 0 would read nothing, and a `0` from `read_chunk`
/// means the end of the file).
pub fn check_chunk_budget(max_records: usize, max_bytes: usize) -> Result<()> {
    if max_records == 0 || max_bytes == 0 {
        return Err(Error::Config(format!(
            "a chunk must hold at least 1 record and 1 byte, got max_records {max_records}, \
             max_bytes {max_bytes}"
        )));
    }
    Ok(())
}

/// Fill `chunk` from `next` within a [`RecordReader::read_chunk`] budget
/// (checked first): at least one record, then while under `max_bytes`, at
/// most `max_records`; stops at the first `None`. What the default
/// `read_chunk` does with `next_record`, for readers whose chunks come from
/// another record source (a projected decode).
pub fn fill_chunk(
    chunk: &mut Chunk,
    max_records: usize,
    max_bytes: usize,
    mut next: impl FnMut() -> Result<Option<Record>>,
) -> Result<usize> {
    check_chunk_budget(max_records, max_bytes)?;
    let mut n = 0;
    while n < max_records && (n == 0 || chunk.payload_bytes() < max_bytes) {
        match next()? {
            Some(rec) => {
                chunk.push_record(&rec)?;
                n += 1;
            }
            None => break,
        }
    }
    Ok(n)
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            start_record: 0,
            compression: None,
            verify_checksums: true,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            defer_checksums: false,
            pass: 0,
            keep: crate::plan::RecordStride::ALL,
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
    /// `max_bytes` of payload, but never before the first record) into
    /// `chunk`, following the chunk's schema. Returns how many were
    /// appended; only `0` means the end of the file — a reader may return
    /// fewer records than asked at any time (a block or row-group reader
    /// does), and the caller reads on. On `Err`, the records decoded before
    /// the bad one are in `chunk`. A budget of 0 records or 0 bytes is an
    /// [`Error::Config`] ([`check_chunk_budget`]).
    fn read_chunk(
        &mut self,
        chunk: &mut Chunk,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<usize> {
        fill_chunk(chunk, max_records, max_bytes, || self.next_record())
    }

    /// Index of the next record to be read.
    fn next_index(&self) -> u64;

    /// Move on to record `record` (nothing if it is not ahead), as opening
    /// at `start_record` would: the records between are not yielded. The
    /// default reads them (an error is returned as reading gives it);
    /// formats that can frame records without decoding them override it.
    fn skip_to(&mut self, record: u64) -> Result<()> {
        while self.next_index() < record {
            if self.next_record()?.is_none() {
                break;
            }
        }
        Ok(())
    }

    /// Go to record `record`, whose bytes are `offset..end` of the file (from
    /// its [record index](crate::record_index)), as if the reader had read
    /// up to it: the next record read is `record`, read without reading
    /// what lies between; a read-ahead stays within `offset..end` (the
    /// caller gives the end of the records it will read next, so that a
    /// random read costs the record, not a buffer). `Ok(false)` (the
    /// default): this reader cannot; the caller reopens the file at the
    /// record instead.
    fn seek_indexed(&mut self, _record: u64, _offset: u64, _end: u64) -> Result<bool> {
        Ok(false)
    }

    /// Read bytes `offset..end` of the file (a range of whole records, from
    /// its [record index](crate::record_index)) in one read and hold them,
    /// so that the records there are then read by
    /// [`seek_indexed`](Self::seek_indexed) in any order without another
    /// read, until a record outside them is asked for (`block` shuffle
    /// mode: a block's records of one file). `Ok(false)` (the default):
    /// this reader cannot; each record is then read apart. A range past the
    /// file's end is an error naming the file.
    fn hold_span(&mut self, _offset: u64, _end: u64) -> Result<bool> {
        Ok(false)
    }

    /// After an error: true if reading may go on with the next record.
    fn can_continue(&self) -> bool {
        false
    }

    /// After an error with [`can_continue`](Self::can_continue) true: how
    /// many records it cost — one (the default), or more when records that
    /// cannot be read apart are lost together (a Parquet row group with a
    /// damaged page: its rows from the bad one on). Reading goes on at
    /// [`next_index`](Self::next_index), past all of them.
    fn records_skipped(&self) -> u64 {
        1
    }

    /// Total number of records, if the format knows it without reading.
    fn len_hint(&self) -> Option<u64> {
        None
    }

    /// After an error with [`can_continue`](Self::can_continue) false: how
    /// many records the rest of the file held from the bad one on (the bad
    /// one included), if the format knows — what a reader that skips bad
    /// records counts as lost instead of one. Default: from
    /// [`len_hint`](Self::len_hint) and [`next_index`](Self::next_index)
    /// (which, after such an error, is the bad record's index); `None` if
    /// unknown (a TFRecord file cannot be framed past a broken frame).
    fn records_lost(&self) -> Option<u64> {
        self.len_hint().map(|n| n.saturating_sub(self.next_index()))
    }

    /// An upper bound on the records left to read, if the format knows one
    /// without reading (from [`len_hint`](Self::len_hint), or from the bytes
    /// left and the smallest record): what a reader sizes its next chunk by,
    /// so that a one-record file does not get a chunk made for a thousand.
    fn max_records_left(&self) -> Option<u64> {
        self.len_hint().map(|n| n.saturating_sub(self.next_index()))
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

    /// The schema the file declares, for a format whose files carry one
    /// (Parquet); `None` (the default): infer it from sample records.
    fn infer_schema(&self, _path: &Path) -> Option<Result<crate::schema::Schema>> {
        None
    }

    /// The schema sample records of this format imply: by default
    /// [`Schema::infer`](crate::Schema::infer); a format whose records hold
    /// lists where users mean scalars refines it (TFRecord: a feature with
    /// exactly one value in every sample record is a scalar, `[]`).
    fn infer_from_records(&self, records: &[Record]) -> Result<crate::schema::Schema> {
        crate::schema::Schema::infer(records)
    }
}

/// Open `path` (a file, or a remote URL: see [`crate::remote`]) as a byte
/// stream with a 1 MiB buffer, decompressing as asked.
pub fn open_stream(path: &Path, compression: Compression) -> Result<Box<dyn Read + Send>> {
    Ok(decompress(crate::input::open_read(path)?, compression))
}

/// `reader` with a 1 MiB buffer, decompressed as asked.
pub(crate) fn decompress(
    reader: Box<dyn Read + Send>,
    compression: Compression,
) -> Box<dyn Read + Send> {
    let buffered = BufReader::with_capacity(1 << 20, reader);
    match compression {
        Compression::None => Box::new(buffered),
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(buffered)),
        Compression::Zlib => Box::new(flate2::bufread::ZlibDecoder::new(buffered)),
    }
}

/// The interned source id of a path.
pub fn source_id(path: &Path) -> SourceId {
    SourceId::intern(&path.to_string_lossy())
}
