//! TFRecord: the framing, a reader (the [`TfRecordFormat`] of the registry)
//! and a writer.
//!
//! A TFRecord file is a sequence of frames:
//!
//! ```text
//! u64 LE  length
//! u32 LE  masked CRC-32C of the 8 length bytes
//! [u8]    payload (here: a serialized tf.train.Example)
//! u32 LE  masked CRC-32C of the payload
//! ```
//!
//! with `mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8`. Files may be GZIP
//! or ZLIB compressed as a whole.
//!
//! The reader reads an uncompressed regular file by position (`pread`)
//! into a reused, page-aligned window of 256 KiB and parses frames in it; a
//! compressed file, and anything that is not a regular file (a FIFO, a pipe
//! such as `<(cat x.tfrecord)`, a device), is read as a stream into one
//! reused buffer. Payloads are decoded by [`super::example`]: the generic
//! path for [`RecordReader::next_record`], the schema-driven fast path for
//! [`RecordReader::read_chunk`]. From a regular file, a `u8` or `bytes`
//! field filled by one byte string of 32 KiB or more (an image, say) is not
//! copied into the chunk: the row refers to those bytes of the file
//! ([`crate::Column::file_row`]), and collation reads them once, straight
//! into the batch (the kernel copies from the page cache). The chunk keeps
//! the file open and counts those bytes as payload.
//!
//! Nothing is memory-mapped: a file shortened while it is read (or while
//! rows refer to it) gives an [`Error::Io`] naming it ("it was shortened
//! while being read") where a map would kill the process with `SIGBUS`.
//!
//! # Large records
//!
//! With the payload CRC deferred ([`OpenOptions::defer_checksums`]), once a
//! record of 64 KiB or more has been read, the next ones are framed from
//! their first and last 4 KiB alone: when the decoded row's one span in the
//! file covers every byte in between (an image, say), the decoder never
//! needed those bytes, the row refers to them, and its CRC is checked on
//! the batch's copy. Any other record (a smaller one, a large byte string
//! that starts or ends elsewhere, two of them, anything the fast decoder
//! gives up on, any framing error) is read whole, with the same rows and
//! errors. So the big bytes are read from memory once, by the kernel's copy
//! into the batch.
//!
//! Errors are [`Error::Corrupt`] with the record index and the byte offset of
//! the frame in the decompressed stream. After a bad payload CRC or an
//! undecodable / non-conforming payload the framing is intact and
//! [`RecordReader::can_continue`] is true; after a bad length CRC, a
//! truncation, an oversized length or a decompression error it is false and
//! every later call repeats the error. `verify_checksums = false` skips the
//! payload CRC only: the 4-byte length CRC is always checked, because it is
//! what guards the framing.
//!
//! After such a broken frame, an uncompressed regular file (or a buffer)
//! tells how many records its rest held ([`RecordReader::records_lost`]):
//! the broken frame, and the frames found after it — the first byte from
//! which a frame whose length CRC and payload CRC both match begins (the
//! scan reaches at most `max_record_bytes` past the break, the most a
//! record can hold), then frame after frame by their length CRCs, again
//! past any other break. What a stream's rest held is not known.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use flate2::write::{GzEncoder, ZlibEncoder};

use super::example::{self, ExampleDecoder};
use super::{check_chunk_budget, source_id, Compression, Format, OpenOptions, RecordReader};
use crate::backing::{Backed, Backing, RowCheck};
use crate::chunk::Chunk;
use crate::error::{Error, Result};
use crate::input::{open_input, InputFile, Opened, RangeReader, Window};
use crate::provenance::{Location, Origin, SourceId};
use crate::record::{Instance, Record};
use crate::schema::{DType, Dim, Schema};

/// Bytes before the payload: length and its CRC.
pub const HEADER_BYTES: usize = 12;
/// Bytes after the payload: its CRC.
pub const FOOTER_BYTES: usize = 4;

/// A regular file's records whose payload is at least this long (once one
/// such record has been seen) are framed by reading only their first
/// [`SPARSE_HEAD`] and last [`SPARSE_TAIL`] bytes from the file, when the
/// decoded row's one span in the file covers everything in between: that
/// span is then read straight into the batch (see `crate::backing`).
const SPARSE_MIN_BYTES: usize = 64 << 10;
/// Payload bytes read at the start of a large record.
const SPARSE_HEAD: usize = 4096;
/// Payload bytes read at the end of a large record (then its footer).
const SPARSE_TAIL: usize = 4096;

/// The TFRecord CRC mask: `((c >> 15) | (c << 17)) + 0xa282ead8`.
#[inline]
pub fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// The masked CRC-32C of `data`, as stored in TFRecord frames.
///
/// ```
/// // The frame header of an empty record: length 0, then its masked CRC.
/// assert_eq!(feedline::format::tfrecord::masked_crc32c(&0u64.to_le_bytes()), 0x0798_0329);
/// ```
#[inline]
pub fn masked_crc32c(data: &[u8]) -> u32 {
    mask_crc(crc32c::crc32c(data))
}

/// Append one framed record to `out`.
pub fn frame_into(payload: &[u8], out: &mut Vec<u8>) {
    let len = (payload.len() as u64).to_le_bytes();
    out.reserve(HEADER_BYTES + payload.len() + FOOTER_BYTES);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(&masked_crc32c(payload).to_le_bytes());
}

/// The TFRecord format (`tf.train.Example` payloads): name `tfrecord`,
/// extensions `tfrecord`, `tfrecords`, `tfr`.
#[derive(Clone, Copy, Debug, Default)]
pub struct TfRecordFormat;

impl Format for TfRecordFormat {
    fn name(&self) -> &str {
        "tfrecord"
    }

    fn extensions(&self) -> &[&str] {
        &["tfrecord", "tfrecords", "tfr"]
    }

    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        Ok(Box::new(TfRecordReader::open(path, opts)?))
    }

    /// A feature is a list; one that holds exactly one number in every
    /// sample record is taken for a scalar (`y: i64 []`, batched `[batch]`),
    /// as users mean it. Byte strings keep their shape.
    fn infer_from_records(&self, records: &[crate::record::Record]) -> Result<Schema> {
        let schema = Schema::infer(records)?;
        let fields = schema
            .fields()
            .iter()
            .map(|f| {
                let mut f = f.clone();
                let numeric = !matches!(f.dtype, DType::Bytes | DType::U8);
                if numeric && f.shape == [Dim::Fixed(1)] {
                    f.shape.clear();
                }
                f
            })
            .collect();
        Schema::new(fields)
    }
}

/// Where frames come from.
enum Input {
    /// The whole (uncompressed) stream in memory, as bytes.
    Memory(Box<dyn AsRef<[u8]> + Send + Sync>),
    /// A regular, uncompressed file, read by position through a window:
    /// chunks may refer to its bytes instead of copying them.
    File { file: Backing, window: Window },
    /// A byte stream (decompressing, or not a regular file), read frame by
    /// frame into `buf`.
    Stream {
        reader: Box<dyn Read + Send>,
        buf: Vec<u8>,
    },
}

/// Bytes of a file read into the window at a time (at least): a block of
/// small records stays in the level-2 cache while it is decoded.
const WINDOW_BYTES: usize = 256 << 10;

/// A decompressing reader that, like [`TfRecordReader::open`] and
/// [`TfRecordReader::from_bytes`], takes an empty input for an empty stream
/// (a decoder alone would call it truncated): the decoder is made on the
/// first read, once there is a byte to decode.
enum Decompress<R: io::BufRead> {
    Pending(R, Compression),
    Empty,
    Decoding(Box<dyn Read + Send>),
}

impl<R: io::BufRead + Send + 'static> Read for Decompress<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Decompress::Pending(r, _) = self {
            if r.fill_buf()?.is_empty() {
                *self = Decompress::Empty;
            } else {
                let Decompress::Pending(r, c) = std::mem::replace(self, Decompress::Empty) else {
                    unreachable!("matched above")
                };
                *self = Decompress::Decoding(match c {
                    Compression::Zlib => Box::new(flate2::bufread::ZlibDecoder::new(r)),
                    _ => Box::new(flate2::bufread::MultiGzDecoder::new(r)),
                });
            }
        }
        match self {
            Decompress::Decoding(d) => d.read(buf),
            _ => Ok(0),
        }
    }
}

/// A fatal error, kept to be repeated by later calls.
#[derive(Clone)]
enum Failure {
    Corrupt(Location, String),
    Io(io::ErrorKind, String),
}

/// Position and error state of a reader (separate from the input so that a
/// payload borrowed from the input can be decoded while the cursor moves).
struct Cursor {
    source: SourceId,
    path: PathBuf,
    /// Offset of the next frame in the decompressed stream.
    pos: u64,
    /// Index of the next frame.
    index: u64,
    /// Frames still to skip (start_record).
    skip_to: u64,
    verify: bool,
    /// Leave the payload CRC of a record with one span in the file to be checked
    /// when the span is copied out (`OpenOptions::defer_checksums`).
    defer: bool,
    /// The last record framed was large: try framing the next one sparsely
    /// (see [`SPARSE_MIN_BYTES`]).
    sparse: bool,
    /// Records decoded from their first and last bytes (tests read it).
    sparse_records: u64,
    max_record_bytes: u64,
    can_continue: bool,
    failed: Option<Failure>,
}

impl Cursor {
    fn location(&self) -> Location {
        Location::new(self.source, self.index, Some(self.pos))
    }

    fn failure_error(&self, f: &Failure) -> Error {
        match f {
            Failure::Corrupt(loc, what) => Error::corrupt(loc.clone(), what.clone()),
            Failure::Io(kind, msg) => Error::io(&self.path, io::Error::new(*kind, msg.clone())),
        }
    }

    /// The frame at the cursor is broken: nothing after it can be read.
    #[cold]
    fn fatal(&mut self, what: String) -> Error {
        let f = Failure::Corrupt(self.location(), what);
        let e = self.failure_error(&f);
        self.failed = Some(f);
        self.can_continue = false;
        e
    }

    /// Reading the stream failed: corrupt compressed data is a corrupt
    /// record here; any other I/O error is an I/O error on the file.
    #[cold]
    fn io_fatal(&mut self, e: io::Error) -> Error {
        match e.kind() {
            io::ErrorKind::InvalidData
            | io::ErrorKind::InvalidInput
            | io::ErrorKind::UnexpectedEof => self.fatal(format!("corrupt compressed stream: {e}")),
            kind => {
                let f = Failure::Io(kind, e.to_string());
                self.failed = Some(f);
                self.can_continue = false;
                Error::io(&self.path, e)
            }
        }
    }

    /// Reading the file by position failed (it was shortened, say): an
    /// I/O error naming it, and nothing after it can be read.
    #[cold]
    fn file_fatal(&mut self, e: Error) -> Error {
        if let Error::Io { source, .. } = &e {
            self.failed = Some(Failure::Io(source.kind(), source.to_string()));
        } else {
            self.failed = Some(Failure::Io(io::ErrorKind::Other, e.to_string()));
        }
        self.can_continue = false;
        e
    }

    /// Check a frame header; returns the payload length.
    #[inline(always)]
    fn header(&mut self, h: &[u8; HEADER_BYTES]) -> Result<u64> {
        parse_header(h, self.max_record_bytes).map_err(|what| self.fatal(what))
    }

    /// Move past a frame whose payload has `len` bytes; returns its location.
    #[inline(always)]
    fn advance(&mut self, len: usize) -> Location {
        let loc = self.location();
        self.pos += (HEADER_BYTES + len + FOOTER_BYTES) as u64;
        self.index += 1;
        loc
    }

    /// Check the payload CRC (if asked) and move past the frame. A bad CRC
    /// skips the record: the next call reads the next one.
    #[inline(always)]
    fn finish(&mut self, payload: &[u8], footer: [u8; 4], check: bool) -> Result<Location> {
        let loc = self.advance(payload.len());
        if check && self.verify {
            let stored = u32::from_le_bytes(footer);
            if let Err(e) = check_payload_crc(&loc, stored, crc32c::crc32c(payload)) {
                self.can_continue = true;
                return Err(e);
            }
        }
        Ok(loc)
    }
}

/// A frame header's payload length, or what is wrong with it.
#[inline(always)]
fn parse_header(h: &[u8; HEADER_BYTES], max_record_bytes: u64) -> std::result::Result<u64, String> {
    let len_bytes: [u8; 8] = h[..8].try_into().expect("8 bytes");
    let stored = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
    let computed = masked_crc32c(&len_bytes);
    if stored != computed {
        return Err(format!(
            "bad length CRC: stored 0x{stored:08x}, computed 0x{computed:08x}"
        ));
    }
    let len = u64::from_le_bytes(len_bytes);
    if len > max_record_bytes {
        return Err(format!(
            "record length {len} exceeds max_record_bytes {max_record_bytes}"
        ));
    }
    Ok(len)
}

/// `Ok` if a payload whose CRC-32C is `crc` matches the masked CRC `stored`
/// in its frame; else the error for the record at `loc`.
#[inline]
pub(crate) fn check_payload_crc(loc: &Location, stored: u32, crc: u32) -> Result<()> {
    let computed = mask_crc(crc);
    if stored == computed {
        return Ok(());
    }
    Err(Error::corrupt(
        loc.clone(),
        format!("bad payload CRC: stored 0x{stored:08x}, computed 0x{computed:08x}"),
    ))
}

/// A record's payload CRC-32C, checked when its one span in the file is copied
/// out instead of when the record was read, so that its bytes are read from
/// memory once (copy, then CRC of the copy while it is in cache). The
/// payload is `prefix ++ span ++ suffix`: the CRC state after the prefix and
/// the suffix (its bytes when short, else its CRC and length) are kept, so
/// nothing in the backing is read again but the span.
#[derive(Clone, Debug)]
struct DeferredCrc {
    /// CRC-32C state after the payload bytes before the span.
    prefix: u32,
    /// The payload bytes after the span.
    suffix: Suffix,
    /// The masked CRC stored in the frame.
    stored: u32,
    /// The record, for the error.
    location: Location,
}

/// Suffixes up to this long are kept as bytes (appended to the CRC, which
/// is cheap); longer ones as a CRC to combine (`crc32c_combine` costs
/// microseconds).
const INLINE_SUFFIX: usize = 40;

/// The payload bytes after a deferred span.
#[derive(Clone, Debug)]
enum Suffix {
    Bytes { bytes: [u8; INLINE_SUFFIX], len: u8 },
    Crc { crc: u32, len: usize },
}

impl DeferredCrc {
    /// A check of a payload whose bytes before the span have CRC-32C
    /// (running state) `prefix`, whose bytes after it are `suffix`, and
    /// whose frame stores the masked CRC `stored`.
    fn new(prefix: u32, suffix: &[u8], stored: u32, location: Location) -> Self {
        let suffix = match <u8>::try_from(suffix.len()) {
            Ok(len) if suffix.len() <= INLINE_SUFFIX => {
                let mut bytes = [0; INLINE_SUFFIX];
                bytes[..suffix.len()].copy_from_slice(suffix);
                Suffix::Bytes { bytes, len }
            }
            _ => Suffix::Crc {
                crc: crc32c::crc32c(suffix),
                len: suffix.len(),
            },
        };
        DeferredCrc {
            prefix,
            suffix,
            stored,
            location,
        }
    }
}

impl RowCheck for DeferredCrc {
    /// Check the payload, given the span's bytes (in the file or a copy of
    /// them): the error is word for word the one reading would have given.
    fn verify(&self, span: &[u8]) -> Result<()> {
        let crc = crc32c::crc32c_append(self.prefix, span);
        let crc = match &self.suffix {
            Suffix::Bytes { bytes, len } => crc32c::crc32c_append(crc, &bytes[..*len as usize]),
            Suffix::Crc { crc: suffix, len } => crc32c::crc32c_combine(crc, *suffix, *len),
        };
        check_payload_crc(&self.location, self.stored, crc)
    }
}

/// Bytes that frames are read from by position: a stream in memory, or a
/// regular file through a window.
trait Frames<'a> {
    /// Bytes from `pos` to the end.
    fn left(&self, pos: u64) -> u64;
    /// The 12 bytes at `pos` (at most [`left`](Self::left)).
    fn header(&mut self, pos: u64) -> Result<[u8; HEADER_BYTES]>;
    /// Bytes `pos..pos + n` (`n` at most [`left`](Self::left)).
    fn take(self, pos: u64, n: usize) -> Result<&'a [u8]>;
}

impl<'a> Frames<'a> for &'a [u8] {
    #[inline(always)]
    fn left(&self, pos: u64) -> u64 {
        (self.len() as u64).saturating_sub(pos)
    }

    #[inline(always)]
    fn header(&mut self, pos: u64) -> Result<[u8; HEADER_BYTES]> {
        Ok(self[pos as usize..pos as usize + HEADER_BYTES]
            .try_into()
            .expect("12 bytes"))
    }

    #[inline(always)]
    fn take(self, pos: u64, n: usize) -> Result<&'a [u8]> {
        Ok(&self[pos as usize..pos as usize + n])
    }
}

/// A regular file read through a window.
struct FileFrames<'a> {
    file: &'a Backing,
    window: &'a mut Window,
}

impl<'a> Frames<'a> for FileFrames<'a> {
    #[inline(always)]
    fn left(&self, pos: u64) -> u64 {
        self.file.len().saturating_sub(pos)
    }

    #[inline(always)]
    fn header(&mut self, pos: u64) -> Result<[u8; HEADER_BYTES]> {
        let h = self.window.get(self.file, pos, HEADER_BYTES)?;
        Ok(h.try_into().expect("12 bytes"))
    }

    #[inline(always)]
    fn take(self, pos: u64, n: usize) -> Result<&'a [u8]> {
        self.window.get(self.file, pos, n)
    }
}

/// A frame read by position.
struct Frame<'a> {
    payload: &'a [u8],
    /// The masked payload CRC stored after it.
    stored: u32,
    /// Offset of the payload in the stream.
    at: u64,
    loc: Location,
}

/// Check the header of the frame at the cursor against the bytes left:
/// its payload length, or the fatal error.
#[inline(always)]
fn frame_len<'a, F: Frames<'a>>(src: &mut F, cur: &mut Cursor) -> Result<Option<u64>> {
    let left = src.left(cur.pos);
    if left == 0 {
        return Ok(None);
    }
    if left < HEADER_BYTES as u64 {
        return Err(cur.fatal(format!("truncated header: {left} of {HEADER_BYTES} bytes")));
    }
    let header = match src.header(cur.pos) {
        Ok(h) => h,
        Err(e) => return Err(cur.file_fatal(e)),
    };
    let len = cur.header(&header)?;
    let avail = left - HEADER_BYTES as u64;
    if len > avail {
        return Err(cur.fatal(format!(
            "truncated payload: header says {len} bytes, {avail} left"
        )));
    }
    if avail - len < FOOTER_BYTES as u64 {
        return Err(cur.fatal(format!(
            "truncated record: payload CRC has {} of {FOOTER_BYTES} bytes",
            avail - len
        )));
    }
    Ok(Some(len))
}

/// The next frame at the cursor (its payload CRC checked if `check` and
/// the reader verifies), the cursor moved past it.
#[inline(always)]
fn frame_at<'a, F: Frames<'a>>(
    mut src: F,
    cur: &mut Cursor,
    check: bool,
) -> Result<Option<Frame<'a>>> {
    let Some(len) = frame_len(&mut src, cur)? else {
        return Ok(None);
    };
    let len = len as usize;
    let pos = cur.pos;
    let frame = match src.take(pos, HEADER_BYTES + len + FOOTER_BYTES) {
        Ok(f) => f,
        Err(e) => return Err(cur.file_fatal(e)),
    };
    let payload = &frame[HEADER_BYTES..HEADER_BYTES + len];
    let footer: [u8; 4] = frame[HEADER_BYTES + len..].try_into().expect("4 bytes");
    let loc = cur.finish(payload, footer, check)?;
    Ok(Some(Frame {
        payload,
        stored: u32::from_le_bytes(footer),
        at: pos + HEADER_BYTES as u64,
        loc,
    }))
}

/// Move past the frame at the cursor, reading its header only. False at
/// the end.
fn skip_frame<'a, F: Frames<'a>>(mut src: F, cur: &mut Cursor) -> Result<bool> {
    let Some(len) = frame_len(&mut src, cur)? else {
        return Ok(false);
    };
    cur.advance(len as usize);
    Ok(true)
}

/// Read until `buf` is full or the stream ends; returns the bytes read.
fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The next frame of a byte stream, read into `buf` (reused; it grows only
/// with bytes actually read, never to a size a length field claims).
fn stream_frame<'a>(
    reader: &mut dyn Read,
    buf: &'a mut Vec<u8>,
    cur: &mut Cursor,
    check: bool,
) -> Result<Option<(&'a [u8], Location)>> {
    let mut header = [0u8; HEADER_BYTES];
    let got = read_full(reader, &mut header).map_err(|e| cur.io_fatal(e))?;
    if got == 0 {
        return Ok(None);
    }
    if got < HEADER_BYTES {
        return Err(cur.fatal(format!("truncated header: {got} of {HEADER_BYTES} bytes")));
    }
    let len = cur.header(&header)?;
    let want = len.saturating_add(FOOTER_BYTES as u64);
    buf.clear();
    let got = reader
        .take(want)
        .read_to_end(buf)
        .map_err(|e| cur.io_fatal(e))? as u64;
    if got < len {
        return Err(cur.fatal(format!(
            "truncated payload: header says {len} bytes, {got} left"
        )));
    }
    if got < want {
        return Err(cur.fatal(format!(
            "truncated record: payload CRC has {} of {FOOTER_BYTES} bytes",
            got - len
        )));
    }
    let len = len as usize;
    let (payload, footer) = buf.split_at(len);
    let footer: [u8; 4] = footer.try_into().expect("4 bytes");
    let loc = cur.finish(payload, footer, check)?;
    Ok(Some((payload, loc)))
}

/// Reads the records of one TFRecord file (or stream, or buffer).
///
/// ```
/// use feedline::format::tfrecord::{TfRecordReader, TfRecordWriter};
/// use feedline::format::{Compression, OpenOptions, RecordReader};
/// use feedline::SourceId;
/// let mut w = TfRecordWriter::new(Vec::new(), Compression::None);
/// w.write_record(b"hello").unwrap();
/// w.write_record(b"world").unwrap();
/// let bytes = w.finish().unwrap();
/// let mut r = TfRecordReader::from_bytes(bytes, SourceId::intern("mem"), &OpenOptions::default());
/// assert_eq!(r.next_payload().unwrap(), Some(&b"hello"[..]));
/// assert_eq!(r.next_payload().unwrap(), Some(&b"world"[..]));
/// assert_eq!(r.next_payload().unwrap(), None);
/// assert_eq!(r.next_index(), 2);
/// ```
pub struct TfRecordReader {
    input: Input,
    cur: Cursor,
    decoder: Option<ExampleDecoder>,
    /// A large record's first and last bytes, read sparsely.
    scratch: Vec<u8>,
}

impl std::fmt::Debug for TfRecordReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TfRecordReader")
            .field("source", &self.cur.source)
            .field("record", &self.cur.index)
            .field("offset", &self.cur.pos)
            .finish()
    }
}

impl TfRecordReader {
    /// Open a file. Compression: `opts.compression`, else from the extension.
    /// An uncompressed regular file is read by position (its large rows may
    /// stay in it, see the [module docs](self)); a compressed file, and
    /// anything that is not a regular file (a FIFO, a pipe, a device), is
    /// read as a stream. A missing file is an [`Error::Io`] naming the
    /// path; an empty regular file has no records.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<Self> {
        opts.validate()?;
        let compression = opts
            .compression
            .unwrap_or_else(|| Compression::from_path(path));
        let source = source_id(path);
        let input = match (open_input(path)?, compression) {
            (Opened::Regular(file), Compression::None) => {
                if file.len() == 0 {
                    Input::Memory(Box::new(Vec::<u8>::new()))
                } else {
                    Input::File {
                        file,
                        window: Window::new(WINDOW_BYTES),
                    }
                }
            }
            (Opened::Regular(file), c) => {
                let len = file.len();
                Self::stream_input(Self::decompressing(RangeReader::new(file, 0, len), c))
            }
            (Opened::Stream(f), c) => Self::stream_input(Self::decompressing(f, c)),
        };
        Ok(Self::with_input(input, source, path.to_path_buf(), opts))
    }

    /// `reader`, buffered and decompressed as `compression` says (an empty
    /// stream is empty, whatever its compression).
    fn decompressing(
        reader: impl Read + Send + 'static,
        compression: Compression,
    ) -> Box<dyn Read + Send> {
        let reader = io::BufReader::with_capacity(1 << 20, reader);
        match compression {
            Compression::None => Box::new(reader),
            c => Box::new(Decompress::Pending(reader, c)),
        }
    }

    /// Read from bytes in memory; `opts.compression` says whether they are
    /// compressed (`None` means not).
    pub fn from_bytes(
        bytes: impl AsRef<[u8]> + Send + Sync + 'static,
        source: SourceId,
        opts: &OpenOptions,
    ) -> Self {
        match opts.compression.unwrap_or(Compression::None) {
            // An empty buffer is an empty stream, whatever its compression.
            _ if bytes.as_ref().is_empty() => Self::with_input(
                Input::Memory(Box::new(Vec::<u8>::new())),
                source,
                PathBuf::from(&*source.name()),
                opts,
            ),
            Compression::None => Self::with_input(
                Input::Memory(Box::new(bytes)),
                source,
                PathBuf::from(&*source.name()),
                opts,
            ),
            _ => Self::from_stream(io::Cursor::new(bytes), source, opts),
        }
    }

    /// Read from a byte stream, decompressing it as `opts.compression` says
    /// (`None` means not compressed).
    pub fn from_stream(
        reader: impl Read + Send + 'static,
        source: SourceId,
        opts: &OpenOptions,
    ) -> Self {
        let c = opts.compression.unwrap_or(Compression::None);
        Self::with_input(
            Self::stream_input(Self::decompressing(reader, c)),
            source,
            PathBuf::from(&*source.name()),
            opts,
        )
    }

    fn stream_input(reader: Box<dyn Read + Send>) -> Input {
        // Frame headers are 12-byte reads: buffer the decompressed side too.
        Input::Stream {
            reader: Box::new(io::BufReader::with_capacity(1 << 18, reader)),
            buf: Vec::new(),
        }
    }

    fn with_input(input: Input, source: SourceId, path: PathBuf, opts: &OpenOptions) -> Self {
        TfRecordReader {
            input,
            cur: Cursor {
                source,
                path,
                pos: 0,
                index: 0,
                skip_to: opts.start_record,
                verify: opts.verify_checksums,
                defer: opts.verify_checksums && opts.defer_checksums,
                sparse: false,
                sparse_records: 0,
                max_record_bytes: opts.max_record_bytes,
                can_continue: false,
                failed: None,
            },
            decoder: None,
            scratch: Vec::new(),
        }
    }

    /// The source records are attributed to.
    pub fn source(&self) -> SourceId {
        self.cur.source
    }

    /// Byte offset of the next frame in the (decompressed) stream.
    pub fn offset(&self) -> u64 {
        self.cur.pos
    }

    /// Before reading: repeat an earlier fatal error, and skip to
    /// `start_record` (frame headers only: no payload CRC, no decoding).
    #[inline(always)]
    fn prepare(&mut self) -> Result<()> {
        if let Some(f) = &self.cur.failed {
            return Err(self.cur.failure_error(f));
        }
        self.cur.can_continue = false;
        while self.cur.index < self.cur.skip_to {
            let got = match &mut self.input {
                Input::Memory(data) => skip_frame((**data).as_ref(), &mut self.cur)?,
                Input::File { file, window } => {
                    skip_frame(FileFrames { file, window }, &mut self.cur)?
                }
                Input::Stream { reader, buf } => {
                    stream_frame(reader.as_mut(), buf, &mut self.cur, false)?.is_some()
                }
            };
            if !got {
                log::debug!(
                    "{}: start_record {} is past the end ({} records)",
                    self.cur.source,
                    self.cur.skip_to,
                    self.cur.index
                );
                self.cur.skip_to = self.cur.index;
            }
        }
        Ok(())
    }

    /// The next record's raw payload (CRC-checked unless disabled), or `None`
    /// at the end.
    pub fn next_payload(&mut self) -> Result<Option<&[u8]>> {
        self.next_frame().map(|f| f.map(|(p, _)| p))
    }

    /// The next record's payload and location.
    pub fn next_frame(&mut self) -> Result<Option<(&[u8], Location)>> {
        self.prepare()?;
        let frame = match &mut self.input {
            Input::Memory(data) => {
                frame_at((**data).as_ref(), &mut self.cur, true)?.map(|f| (f.payload, f.loc))
            }
            Input::File { file, window } => {
                frame_at(FileFrames { file, window }, &mut self.cur, true)?
                    .map(|f| (f.payload, f.loc))
            }
            Input::Stream { reader, buf } => {
                stream_frame(reader.as_mut(), buf, &mut self.cur, true)?
            }
        };
        Ok(frame)
    }

    /// An upper bound on the records left, from the bytes left (a frame
    /// takes at least 16), for a regular file or a buffer.
    fn records_left_bound(&self) -> Option<u64> {
        let left = match &self.input {
            Input::Memory(data) => ((**data).as_ref().len() as u64).saturating_sub(self.cur.pos),
            Input::File { file, .. } => file.len().saturating_sub(self.cur.pos),
            Input::Stream { .. } => return None,
        };
        Some(left.div_ceil((HEADER_BYTES + FOOTER_BYTES) as u64))
    }
}

/// Positioned reads of a file or buffer, for counting frames after a break.
trait ReadAt {
    fn total(&self) -> u64;
    /// Bytes `pos..pos + buf.len()` into `buf` (the caller keeps within `len`).
    fn fetch(&self, pos: u64, buf: &mut [u8]) -> Option<()>;
}

impl ReadAt for &[u8] {
    fn total(&self) -> u64 {
        <[u8]>::len(self) as u64
    }
    fn fetch(&self, pos: u64, buf: &mut [u8]) -> Option<()> {
        let at = usize::try_from(pos).ok()?;
        buf.copy_from_slice(self.get(at..at.checked_add(buf.len())?)?);
        Some(())
    }
}

impl ReadAt for Backing {
    fn total(&self) -> u64 {
        InputFile::len(self)
    }
    fn fetch(&self, pos: u64, buf: &mut [u8]) -> Option<()> {
        self.read_at_init(pos, buf).ok()
    }
}

/// The payload length of a well-formed frame at `pos` (its length CRC
/// matches, it fits `max` and the bytes left), else `None`.
fn frame_fits(src: &dyn ReadAt, pos: u64, max: u64) -> Option<u64> {
    let mut h = [0u8; HEADER_BYTES];
    src.fetch(pos, &mut h)?;
    let len = parse_header(&h, max).ok()?;
    let end = pos
        .checked_add(HEADER_BYTES as u64 + FOOTER_BYTES as u64)?
        .checked_add(len)?;
    (end <= src.total()).then_some(len)
}

/// Whether the frame at `pos` (well formed, payload `len` bytes) has the
/// payload CRC it stores: a frame found by scanning must match both CRCs.
fn payload_matches(src: &dyn ReadAt, pos: u64, len: u64) -> bool {
    let Ok(n) = usize::try_from(len) else {
        return false;
    };
    let mut payload = vec![0u8; n + FOOTER_BYTES];
    if src.fetch(pos + HEADER_BYTES as u64, &mut payload).is_none() {
        return false;
    }
    let stored = u32::from_le_bytes(payload[n..].try_into().expect("4 bytes"));
    stored == masked_crc32c(&payload[..n])
}

/// The records lost when the frame at `broken` cannot be read: it, and
/// the frames after it (see the module docs). `None` if no frame can be
/// found within `max` bytes past a break before the end (then how many
/// records the rest held is not known).
fn records_after_break(src: &dyn ReadAt, broken: u64, max: u64) -> Option<u64> {
    let end = src.total();
    // A header whose length CRC matches frames its record even when the
    // record is cut short or over the bound: the next frame is after it.
    let mut pos = match frame_fits(src, broken, u64::MAX) {
        Some(len) => broken + (HEADER_BYTES + FOOTER_BYTES) as u64 + len,
        None => scan_for_frame(src, broken + 1, max)?,
    };
    let mut lost = 1u64;
    while pos < end {
        match frame_fits(src, pos, max) {
            Some(len) => {
                lost += 1;
                pos += (HEADER_BYTES + FOOTER_BYTES) as u64 + len;
            }
            None => {
                // Another break: one more record lost there.
                lost += 1;
                pos = scan_for_frame(src, pos + 1, max)?;
            }
        }
    }
    Some(lost)
}

/// The first offset at or after `from` where a frame with both CRCs
/// matching begins, looking at most `max` bytes on; the end of the file
/// when none is left to find there (only bytes too few for a frame).
fn scan_for_frame(src: &dyn ReadAt, from: u64, max: u64) -> Option<u64> {
    const BLOCK: usize = 1 << 20;
    let end = src.total();
    let limit = from
        .saturating_add(max)
        .saturating_add((HEADER_BYTES + FOOTER_BYTES) as u64)
        .min(end);
    let mut block = vec![0u8; BLOCK + HEADER_BYTES];
    let mut at = from;
    while at < limit {
        // Headers starting in `at..at + BLOCK` (their 12 bytes in the block).
        let n = (end - at).min((BLOCK + HEADER_BYTES) as u64) as usize;
        if n < HEADER_BYTES + FOOTER_BYTES {
            return Some(end);
        }
        src.fetch(at, &mut block[..n])?;
        for i in 0..=(n - HEADER_BYTES).min(BLOCK - 1) {
            let p = at + i as u64;
            if p >= limit {
                break;
            }
            let h: &[u8; HEADER_BYTES] = block[i..i + HEADER_BYTES].try_into().expect("12 bytes");
            let Ok(len) = parse_header(h, max) else {
                continue;
            };
            if frame_fits(src, p, max) == Some(len) && payload_matches(src, p, len) {
                return Some(p);
            }
        }
        at += BLOCK as u64;
    }
    // Nothing to the end: the rest is the broken record's.
    (limit == end).then_some(end)
}

impl RecordReader for TfRecordReader {
    fn next_record(&mut self) -> Result<Option<Record>> {
        let Some((payload, loc)) = self.next_frame()? else {
            return Ok(None);
        };
        let r = example::decode_record(payload, loc);
        if r.is_err() {
            self.cur.can_continue = true;
        }
        r.map(Some)
    }

    fn read_chunk(
        &mut self,
        chunk: &mut Chunk,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<usize> {
        check_chunk_budget(max_records, max_bytes)?;
        self.prepare()?;
        let Self {
            input,
            cur,
            decoder,
            scratch,
        } = self;
        if !decoder
            .as_ref()
            .is_some_and(|d| d.schema().same(chunk.schema()))
        {
            *decoder = Some(ExampleDecoder::new(chunk.schema()));
        }
        let decoder = decoder.as_mut().expect("just set");
        let mut n = 0;
        while n < max_records && (n == 0 || chunk.payload_bytes() < max_bytes) {
            match input {
                Input::File { file, window } if cur.defer => {
                    if cur.sparse && sparse_record(decoder, file, cur, chunk, scratch)? {
                        n += 1;
                        continue;
                    }
                    let Some(frame) = frame_at(FileFrames { file, window }, cur, false)? else {
                        break;
                    };
                    cur.sparse = frame.payload.len() >= SPARSE_MIN_BYTES;
                    if let Err(e) = decode_deferred(decoder, &frame, chunk, file) {
                        cur.can_continue = true;
                        return Err(e);
                    }
                }
                Input::File { file, window } => {
                    let Some(f) = frame_at(FileFrames { file, window }, cur, true)? else {
                        break;
                    };
                    let backed = Backed::new(file, f.payload, f.at);
                    if let Err(e) =
                        decoder.decode_into_backed(f.payload, chunk, &f.loc, Some(backed))
                    {
                        cur.can_continue = true;
                        return Err(e);
                    }
                }
                Input::Memory(data) => {
                    let Some(f) = frame_at((**data).as_ref(), cur, true)? else {
                        break;
                    };
                    if let Err(e) = decoder.decode_into_backed(f.payload, chunk, &f.loc, None) {
                        cur.can_continue = true;
                        return Err(e);
                    }
                }
                Input::Stream { reader, buf } => {
                    let Some((payload, loc)) = stream_frame(reader.as_mut(), buf, cur, true)?
                    else {
                        break;
                    };
                    if let Err(e) = decoder.decode_into_backed(payload, chunk, &loc, None) {
                        cur.can_continue = true;
                        return Err(e);
                    }
                }
            }
            n += 1;
        }
        Ok(n)
    }

    fn next_index(&self) -> u64 {
        self.cur.index.max(self.cur.skip_to)
    }

    /// Frame headers only, as `start_record` does.
    fn skip_to(&mut self, record: u64) -> Result<()> {
        self.cur.skip_to = self.cur.skip_to.max(record);
        Ok(())
    }

    fn can_continue(&self) -> bool {
        self.cur.can_continue
    }

    fn max_records_left(&self) -> Option<u64> {
        self.records_left_bound()
    }

    /// After a broken frame of an uncompressed file or a buffer: it and
    /// the frames found after it (see the module docs).
    fn records_lost(&self) -> Option<u64> {
        if !matches!(self.cur.failed, Some(Failure::Corrupt(..))) {
            return None;
        }
        let (pos, max) = (self.cur.pos, self.cur.max_record_bytes);
        match &self.input {
            Input::Memory(data) => records_after_break(&(**data).as_ref(), pos, max),
            Input::File { file, .. } => records_after_break(file, pos, max),
            Input::Stream { .. } => None,
        }
    }
}

/// Decode `frame`, a payload of `file` whose CRC is not checked yet, into
/// `chunk`. A row with exactly one span left in the file takes its CRC
/// check along (made when the span is copied out: the big bytes are read
/// once); any other row is checked here, before it is committed; a payload
/// the fast walk gives up on is checked before the generic decode names
/// what is wrong — so every error is the one checking first would give.
fn decode_deferred(
    decoder: &mut ExampleDecoder,
    frame: &Frame<'_>,
    chunk: &mut Chunk,
    file: &Backing,
) -> Result<()> {
    let Frame {
        payload,
        stored,
        at,
        loc,
    } = frame;
    let start = *at as usize;
    let end = start + payload.len();
    let origin = Origin::new(loc.source, loc.record);
    if decoder.write_row(payload, chunk, Some(Backed::new(file, payload, *at))) {
        match chunk.pending_file_span() {
            Some((field, off, len)) if off >= start && off + len <= end => {
                let (a, b) = (off - start, off - start + len);
                let prefix = crc32c::crc32c(&payload[..a]);
                let check = DeferredCrc::new(prefix, &payload[b..], *stored, loc.clone());
                chunk.defer_check(field, Arc::new(check));
            }
            _ => {
                if let Err(e) = check_payload_crc(loc, *stored, crc32c::crc32c(payload)) {
                    chunk.rollback_row();
                    return Err(e);
                }
            }
        }
        if chunk.commit_row(origin).is_ok() {
            return Ok(());
        }
    }
    chunk.rollback_row();
    check_payload_crc(loc, *stored, crc32c::crc32c(payload))?;
    decoder.fallback(payload, chunk, loc)
}

/// Frame and decode the large record at the cursor from its first and last
/// bytes, read from the file (see [`SPARSE_MIN_BYTES`]): when the row's one
/// span in the file covers all the bytes between (which the decode
/// therefore never looked at), the row refers to it and carries the
/// payload's CRC, to be checked on the copy. True if it did (the row
/// committed, the cursor past the record); false leaves the cursor and the
/// chunk as they were, for the record to be read whole (which also names
/// anything wrong with it).
fn sparse_record(
    decoder: &mut ExampleDecoder,
    file: &Backing,
    cur: &mut Cursor,
    chunk: &mut Chunk,
    scratch: &mut Vec<u8>,
) -> Result<bool> {
    let pos = cur.pos;
    let left = file.len().saturating_sub(pos);
    if left < (HEADER_BYTES + SPARSE_MIN_BYTES + FOOTER_BYTES) as u64 {
        return Ok(false);
    }
    let head = HEADER_BYTES + SPARSE_HEAD;
    if scratch.len() < head {
        scratch.resize(head, 0);
    }
    if file.read_at_init(pos, &mut scratch[..head]).is_err() {
        return Ok(false);
    }
    let h = scratch.first_chunk::<HEADER_BYTES>().expect("read above");
    let len = match parse_header(h, cur.max_record_bytes) {
        Ok(len) if len <= left - (HEADER_BYTES + FOOTER_BYTES) as u64 => len as usize,
        _ => return Ok(false),
    };
    if len < SPARSE_MIN_BYTES {
        return Ok(false);
    }
    let total = HEADER_BYTES + len + FOOTER_BYTES;
    if scratch.len() < total {
        scratch.resize(total, 0);
    }
    let tail = HEADER_BYTES + len - SPARSE_TAIL;
    if file
        .read_at_init(pos + tail as u64, &mut scratch[tail..total])
        .is_err()
    {
        return Ok(false);
    }
    // In tests the hole holds its real bytes, so that a decode reading them
    // would succeed: the count of sparse records then shows exactly which
    // rows the checks below let through (outside tests it holds stale bytes).
    #[cfg(test)]
    file.read_at_init(pos + head as u64, &mut scratch[head..tail])?;
    let at = pos + HEADER_BYTES as u64;
    let payload = &scratch[HEADER_BYTES..HEADER_BYTES + len];
    let stored = u32::from_le_bytes(
        scratch[HEADER_BYTES + len..total]
            .try_into()
            .expect("4 bytes"),
    );
    if decoder.write_row(payload, chunk, Some(Backed::new(file, payload, at))) {
        // The decode read nothing of the hole [SPARSE_HEAD, len - SPARSE_TAIL)
        // (stale bytes) if the one span in the file covers it: nothing inside
        // a byte string is read, and nothing else overlaps it.
        if let Some((field, off, span)) = chunk.pending_file_span() {
            let a = (off as u64).wrapping_sub(at) as usize;
            let b = a.wrapping_add(span);
            if off as u64 >= at && a <= SPARSE_HEAD && b >= len - SPARSE_TAIL && b <= len {
                let loc = cur.location();
                let prefix = crc32c::crc32c(&payload[..a]);
                let check = DeferredCrc::new(prefix, &payload[b..], stored, loc.clone());
                chunk.defer_check(field, Arc::new(check));
                if chunk
                    .commit_row(Origin::new(loc.source, loc.record))
                    .is_ok()
                {
                    cur.advance(len);
                    cur.sparse_records += 1;
                    return Ok(true);
                }
            }
        }
    }
    chunk.rollback_row();
    Ok(false)
}

enum Sink<W: Write> {
    Plain(W),
    Gzip(GzEncoder<W>),
    Zlib(ZlibEncoder<W>),
}

/// Writes TFRecord files: framing with CRCs, optionally GZIP or ZLIB
/// compressed. Call [`finish`](Self::finish) at the end (it completes the
/// compressed stream and flushes).
///
/// ```
/// use feedline::format::tfrecord::TfRecordWriter;
/// use feedline::format::Compression;
/// let mut w = TfRecordWriter::new(Vec::new(), Compression::None);
/// w.write_record(b"").unwrap();
/// let bytes = w.finish().unwrap();
/// assert_eq!(bytes.len(), 16);
/// ```
pub struct TfRecordWriter<W: Write> {
    sink: Sink<W>,
    payload: Vec<u8>,
    records: u64,
}

impl<W: Write> std::fmt::Debug for TfRecordWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TfRecordWriter")
            .field("records", &self.records)
            .finish()
    }
}

impl TfRecordWriter<BufWriter<File>> {
    /// Create (truncate) `path` and write to it with a 1 MiB buffer.
    pub fn create(path: impl AsRef<Path>, compression: Compression) -> Result<Self> {
        let path = path.as_ref();
        let file = File::create(path).map_err(|e| Error::io(path, e))?;
        Ok(Self::new(
            BufWriter::with_capacity(1 << 20, file),
            compression,
        ))
    }
}

impl<W: Write> TfRecordWriter<W> {
    /// Write to `w`, compressed as asked (default compression level).
    pub fn new(w: W, compression: Compression) -> Self {
        let sink = match compression {
            Compression::None => Sink::Plain(w),
            Compression::Gzip => Sink::Gzip(GzEncoder::new(w, flate2::Compression::default())),
            Compression::Zlib => Sink::Zlib(ZlibEncoder::new(w, flate2::Compression::default())),
        };
        TfRecordWriter {
            sink,
            payload: Vec::new(),
            records: 0,
        }
    }

    fn out(&mut self) -> &mut dyn Write {
        match &mut self.sink {
            Sink::Plain(w) => w,
            Sink::Gzip(w) => w,
            Sink::Zlib(w) => w,
        }
    }

    /// Write one record with this payload.
    pub fn write_record(&mut self, payload: &[u8]) -> io::Result<()> {
        let len = (payload.len() as u64).to_le_bytes();
        let mut header = [0u8; HEADER_BYTES];
        header[..8].copy_from_slice(&len);
        header[8..].copy_from_slice(&masked_crc32c(&len).to_le_bytes());
        let footer = masked_crc32c(payload).to_le_bytes();
        let out = self.out();
        out.write_all(&header)?;
        out.write_all(payload)?;
        out.write_all(&footer)?;
        self.records += 1;
        Ok(())
    }

    /// Write a record as a `tf.train.Example` ([`example::encode_example`]).
    pub fn write_example(&mut self, record: &Record) -> io::Result<()> {
        let mut payload = std::mem::take(&mut self.payload);
        payload.clear();
        example::encode_example_into(record, &mut payload);
        let r = self.write_record(&payload);
        self.payload = payload;
        r
    }

    /// Write an instance as a `tf.train.Example` ([`example::encode_instance`]).
    pub fn write_instance(&mut self, instance: &Instance) -> io::Result<()> {
        let mut payload = std::mem::take(&mut self.payload);
        payload.clear();
        example::encode_instance_into(instance, &mut payload);
        let r = self.write_record(&payload);
        self.payload = payload;
        r
    }

    /// Number of records written.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Finish the compressed stream, flush, and give back the writer.
    pub fn finish(self) -> io::Result<W> {
        let mut w = match self.sink {
            Sink::Plain(w) => w,
            Sink::Gzip(g) => g.finish()?,
            Sink::Zlib(z) => z.finish()?,
        };
        w.flush()?;
        Ok(w)
    }
}

#[cfg(test)]
mod tests {
    //! Rows that refer to their file: the same chunks, rows, batches and
    //! errors as the copying path, however the rows mix.

    use super::*;
    use crate::chunk::RowRef;
    use crate::collate::{collate, collate_rows};
    use crate::format::example::{encode_features_into, FeatureRef};
    use crate::schema::{DType, Ragged, Schema};
    use crate::values::{BytesList, Values};
    use std::sync::Arc;

    /// An image large enough to stay in the file (see `FILE_ROW_MIN_BYTES`),
    /// too small for its record to be read sparsely.
    const IMG: usize = 32_800;

    fn schema(layout: Ragged) -> Schema {
        schema_with(IMG, layout)
    }

    fn schema_with(img: usize, layout: Ragged) -> Schema {
        Schema::builder()
            .field("img", DType::U8, [img])
            .ragged("blob", DType::Bytes, layout)
            .field("label", DType::I64, [1])
            .build()
            .unwrap()
    }

    fn bytes(seed: usize, n: usize) -> Vec<u8> {
        (0..n).map(|j| (seed * 31 + j * 7) as u8).collect()
    }

    /// Record `i`: the image as one byte string (mapped), or as two (copied)
    /// for `i % 5 == 3`, or twice under the same key (the later one wins)
    /// for `i % 5 == 4`; the blob as one large string (mapped), two strings,
    /// one small string, or absent.
    fn payload(i: usize, img_len: usize) -> Vec<u8> {
        let img = bytes(i, img_len);
        let half = img_len / 2;
        let two_img: BytesList = [&img[..half], &img[half..]].into_iter().collect();
        let big = bytes(i + 100, 33_000);
        let small = bytes(i + 200, 10);
        let two_blob: BytesList = [&big[..100], &small[..]].into_iter().collect();
        let label = [i as i64];
        let wrong = bytes(i + 300, img_len);
        let mut f: Vec<(&str, FeatureRef<'_>)> = Vec::new();
        if !falls_back(i) {
            f.push(("label", FeatureRef::I64(&label)));
        }
        match i % 5 {
            3 => f.push(("img", FeatureRef::Bytes(&two_img))),
            4 => {
                f.push(("img", FeatureRef::OneBytes(&wrong)));
                f.push(("img", FeatureRef::OneBytes(&img)));
            }
            _ => f.push(("img", FeatureRef::OneBytes(&img))),
        }
        match i % 4 {
            0 => f.push(("blob", FeatureRef::OneBytes(&big))),
            1 => f.push(("blob", FeatureRef::Bytes(&two_blob))),
            2 => f.push(("blob", FeatureRef::OneBytes(&small))),
            _ => {}
        }
        let mut out = Vec::new();
        encode_features_into(&mut f, &mut out);
        if falls_back(i) {
            // The label in a second `features` (merged into the first) whose
            // entry names its key twice: the fast decoder leaves such a
            // record to the generic path.
            let list = [&[0x08u8][..], &[i as u8]].concat(); // int64_list { value: i } unpacked
            let feature = [&[0x1a, list.len() as u8][..], &list].concat();
            let entry = [
                &[0x0a, 5][..],
                b"label",
                &[0x0a, 5],
                b"label",
                &[0x12, feature.len() as u8],
                &feature,
            ]
            .concat();
            let features = [&[0x0a, entry.len() as u8][..], &entry].concat();
            out.extend_from_slice(&[0x0a, features.len() as u8]);
            out.extend_from_slice(&features);
        }
        out
    }

    /// Records the fast decoder hands to the generic path.
    fn falls_back(i: usize) -> bool {
        i % 7 == 6
    }

    fn file_bytes(n: usize, bad: Option<usize>) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n {
            let len = if Some(i) == bad { IMG + 1 } else { IMG };
            frame_into(&payload(i, len), &mut out);
        }
        out
    }

    /// The same bytes read from a mapped file and from memory, as chunks of
    /// at most `per` records (and the first error, as text).
    fn both(bytes: Vec<u8>, schema: &Schema, per: usize) -> [(Vec<Chunk>, Option<String>); 2] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mapped.tfrecord");
        std::fs::write(&path, &bytes).unwrap();
        let mapped = TfRecordReader::open(&path, &OpenOptions::default()).unwrap();
        assert!(matches!(mapped.input, Input::File { .. }));
        let copied = TfRecordReader::from_bytes(bytes, source_id(&path), &OpenOptions::default());
        [mapped, copied].map(|mut r| {
            let mut chunks = Vec::new();
            loop {
                let mut c = Chunk::with_budget(schema, per, usize::MAX);
                match r.read_chunk(&mut c, per, usize::MAX) {
                    Ok(0) => return (chunks, None),
                    Ok(_) => chunks.push(c),
                    Err(e) => {
                        chunks.push(c);
                        return (chunks, Some(e.to_string()));
                    }
                }
            }
        })
    }

    #[test]
    fn file_rows_read_collate_and_copy_like_owned_ones() {
        for layout in [Ragged::Offsets, Ragged::Padded] {
            let schema = schema(layout);
            let [(mapped, e1), (copied, e2)] = both(file_bytes(23, None), &schema, 6);
            assert_eq!((e1, e2), (None, None));
            assert_eq!(mapped.len(), 4);
            assert_eq!(mapped, copied);
            for (m, c) in mapped.iter().zip(&copied) {
                assert_eq!(m.payload_bytes(), c.payload_bytes());
                assert!(m.columns()[0].has_file_rows() && m.columns()[1].has_file_rows());
                assert!(!c.columns()[0].has_file_rows() && !c.columns()[2].has_file_rows());
                for i in 0..m.len() {
                    let record = m.origins()[i].record as usize;
                    // Mapped: one large string; copied: the rest.
                    let img = m.columns()[0].file_row(i).unwrap();
                    let one_string = record % 5 != 3 && !falls_back(record);
                    assert_eq!(img.is_some(), one_string, "record {record}");
                    if let Some(img) = img {
                        assert_eq!(img, bytes(record, IMG));
                        assert!(m.columns()[0].owned_range(i).is_empty());
                    }
                    let blob = m.columns()[1].file_row(i).unwrap();
                    let one_string = record % 4 == 0 && !falls_back(record);
                    assert_eq!(blob.is_some(), one_string, "record {record}");
                    assert_eq!(m.row(i).unwrap(), c.row(i).unwrap());
                    let label = m.row(i).unwrap().get("label").unwrap().clone();
                    assert_eq!(label, Values::I64(vec![record as i64]));
                }
                assert_eq!(
                    collate(&schema, (0..m.len()).map(|i| (m, i))).unwrap(),
                    collate(&schema, (0..c.len()).map(|i| (c, i))).unwrap()
                );
            }
            // Rows drawn across chunks, as a shuffle buffer hands them out.
            let refs = |cs: &[Chunk]| -> Vec<RowRef> {
                let cs: Vec<Arc<Chunk>> = cs.iter().cloned().map(Arc::new).collect();
                (0..23)
                    .map(|k| {
                        let j = (k * 7) % 23;
                        RowRef::new(cs[j / 6].clone(), j % 6)
                    })
                    .collect()
            };
            assert_eq!(
                collate_rows(&schema, &refs(&mapped)).unwrap(),
                collate_rows(&schema, &refs(&copied)).unwrap()
            );
        }
    }

    #[test]
    fn file_rows_move_between_chunks_and_mix_with_owned_rows() {
        let schema = schema(Ragged::Offsets);
        let [(mapped, _), (copied, _)] = both(file_bytes(12, None), &schema, 12);
        let (m, c) = (&mapped[0], &copied[0]);
        // Every other row into a new chunk: mapped rows stay mapped.
        let mut picked = Chunk::new(&schema);
        let mut owned = Chunk::new(&schema);
        for i in (0..12).step_by(2) {
            picked.extend_rows(m, i, i + 1).unwrap();
            owned.extend_rows(c, i, i + 1).unwrap();
        }
        assert!(picked.columns()[0].has_file_rows());
        assert!(picked.columns()[0].file_row(0).unwrap().is_some());
        assert_eq!(picked, owned);
        // Rows of mapped chunks appended to an owned one are copied.
        let mut mixed = owned.clone();
        mixed.extend_rows(m, 1, 3).unwrap();
        let mut expect = owned.clone();
        expect.extend_rows(c, 1, 3).unwrap();
        assert_eq!(mixed, expect);
        assert_eq!(mixed.payload_bytes(), expect.payload_bytes());
        // Instances and whole rows written through values_mut go on a mapped chunk.
        let inst = c.row(5).unwrap();
        picked.push_instance(&inst);
        owned.push_instance(&inst);
        for (i, v) in inst.values().iter().enumerate() {
            picked.values_mut(i).extend_range(v, 0, v.len());
            owned.values_mut(i).extend_range(v, 0, v.len());
        }
        picked.commit_rows(inst.origin().source, 99, 1).unwrap();
        owned.commit_rows(inst.origin().source, 99, 1).unwrap();
        assert_eq!(picked, owned);
        assert_eq!(picked.row(7).unwrap(), owned.row(7).unwrap());
        assert!(picked.columns()[0].file_row(7).unwrap().is_none());
        assert_eq!(
            collate_rows(
                &schema,
                &(0..8)
                    .map(|i| RowRef::new(Arc::new(picked.clone()), i))
                    .collect::<Vec<_>>()
            )
            .unwrap(),
            collate_rows(
                &schema,
                &(0..8)
                    .map(|i| RowRef::new(Arc::new(owned.clone()), i))
                    .collect::<Vec<_>>()
            )
            .unwrap()
        );
        picked.clear();
        assert!(picked.is_empty() && !picked.columns()[0].has_file_rows());
    }

    #[test]
    fn a_bad_file_row_is_the_same_error_and_leaves_the_chunk_as_the_copying_path() {
        let schema = schema(Ragged::Offsets);
        for bad in [0, 4, 7] {
            let [(mapped, e1), (copied, e2)] = both(file_bytes(10, Some(bad)), &schema, 10);
            let e1 = e1.expect("an error");
            assert_eq!(Some(e1.clone()), e2);
            assert!(
                e1.contains(&format!("record {bad}")) && e1.contains("img"),
                "{e1}"
            );
            assert_eq!(mapped, copied);
            assert_eq!(mapped[0].len(), bad);
        }
    }

    /// Every chunk of the file at `path` (and the first error, as text).
    fn read_all(path: &Path, opts: &OpenOptions, schema: &Schema) -> (Vec<Chunk>, Option<String>) {
        let r = TfRecordReader::open(path, opts).unwrap();
        assert!(matches!(r.input, Input::File { .. }));
        read_chunks(r, schema)
    }

    fn read_chunks(mut r: TfRecordReader, schema: &Schema) -> (Vec<Chunk>, Option<String>) {
        let mut chunks = Vec::new();
        loop {
            let mut c = Chunk::with_budget(schema, 100, usize::MAX);
            match r.read_chunk(&mut c, 100, usize::MAX) {
                Ok(0) => return (chunks, None),
                Ok(_) => chunks.push(c),
                Err(e) => {
                    chunks.push(c);
                    return (chunks, Some(e.to_string()));
                }
            }
        }
    }

    /// Where each record's payload is in the file.
    fn payload_spans(file: &[u8]) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < file.len() {
            let len = u64::from_le_bytes(file[pos..pos + 8].try_into().unwrap()) as usize;
            out.push((pos + HEADER_BYTES, pos + HEADER_BYTES + len));
            pos += HEADER_BYTES + len + FOOTER_BYTES;
        }
        out
    }

    /// Corrupt one byte at a time — near the start of record `bad`'s
    /// payload, early in its `marker` (a byte string it holds), in the middle
    /// of it, at the payload's end — for each of `cases`, and check that
    /// reading with the CRC deferred gives the error reading with the check
    /// gives, either as it reads or from every way out of the chunk, with
    /// the other rows the clean file's. Returns the (record, offset in its
    /// payload) whose check was deferred, and how many records the clean
    /// file read sparsely.
    fn deferred_errors_match_eager(
        schema: &Schema,
        clean: &[u8],
        cases: &[usize],
        marker: impl Fn(usize) -> Vec<u8>,
    ) -> (Vec<(usize, usize)>, u64) {
        let schema = schema.clone();
        let clean = clean.to_vec();
        let spans = payload_spans(&clean);
        let n = spans.len();
        let dir = tempfile::tempdir().unwrap();
        let clean_path = dir.path().join("clean.tfrecord");
        std::fs::write(&clean_path, &clean).unwrap();
        let copying = TfRecordReader::from_bytes(
            clean.clone(),
            source_id(&clean_path),
            &OpenOptions::default(),
        );
        let owned = read_chunks(copying, &schema).0;
        let owned = &owned[0];
        // Rows mapped from another file: appending to them copies.
        let other = read_all(&clean_path, &OpenOptions::default(), &schema).0;
        let other = &other[0];
        assert!(other.columns().iter().any(|c| c.has_file_rows()));
        let defer = OpenOptions {
            defer_checksums: true,
            ..OpenOptions::default()
        };
        // A clean file reads the same either way.
        let mut r = TfRecordReader::open(&clean_path, &defer).unwrap();
        let mut all = Chunk::new(&schema);
        while r.read_chunk(&mut all, n, usize::MAX).unwrap() > 0 {}
        assert!(all == *owned);
        let sparse = r.cur.sparse_records;
        let rows = collate(&schema, (0..n).map(|i| (&all, i))).unwrap();
        let owned_rows = collate(&schema, (0..n).map(|i| (owned, i))).unwrap();
        assert!(rows.fields == owned_rows.fields);
        let mut deferred = Vec::new();
        for &bad in cases {
            let (start, end) = spans[bad];
            let img = marker(bad);
            let img_at = clean[start..end]
                .windows(100)
                .position(|w| w == &img[..100])
                .expect("the marker's first bytes are in the payload");
            for at in [
                start + 1,
                start + img_at + 50,
                start + img_at + img.len() / 2,
                end - 1,
            ] {
                let mut file = clean.clone();
                file[at] ^= 0x40;
                let path = dir.path().join(format!("bad-{bad}-{at}.tfrecord"));
                std::fs::write(&path, &file).unwrap();
                let (eager, e) = read_all(&path, &OpenOptions::default(), &schema);
                let e = e.expect("reading checks every CRC");
                assert!(
                    e.contains(&format!("record {bad}, offset {}", start - HEADER_BYTES))
                        && e.contains("bad payload CRC"),
                    "{e}"
                );
                let (late, late_e) = read_all(&path, &defer, &schema);
                if let Some(late_e) = late_e {
                    // Checked as it was read: the same error, the same rows.
                    assert_eq!(late_e, e);
                    assert!(late == eager);
                    continue;
                }
                deferred.push((bad, at - start));
                let c = &late[0];
                assert_eq!(c.len(), n);
                // Every way out of the chunk checks the row first.
                let all = collate(&schema, (0..n).map(|i| (c, i)));
                assert_eq!(all.unwrap_err().to_string(), e);
                assert_eq!(c.row(bad).unwrap_err().to_string(), e);
                let field = (0..schema.len())
                    .find(|&f| c.columns()[f].file_row(bad).is_err())
                    .expect("the row's mapped field fails its check");
                assert_eq!(c.columns()[field].file_row(bad).unwrap_err().to_string(), e);
                let mut into = other.clone();
                assert_eq!(
                    into.extend_rows(c, bad.saturating_sub(1), bad + 1)
                        .unwrap_err()
                        .to_string(),
                    e
                );
                assert!(into == *other, "nothing appended");
                // Kept by a stride, the row keeps its check.
                let stride = crate::plan::RecordStride {
                    offset: bad as u64 % 3,
                    step: 3,
                };
                let kept = stride.filter(c.clone());
                let err = collate(&schema, (0..kept.len()).map(|i| (&kept, i))).unwrap_err();
                assert_eq!(err.to_string(), e);
                // The other rows are the clean file's, checked and collated.
                let good: Vec<usize> = (0..n).filter(|&i| i != bad).collect();
                let good_rows = collate(&schema, good.iter().map(|&i| (c, i))).unwrap();
                let clean_rows = collate(&schema, good.iter().map(|&i| (owned, i))).unwrap();
                assert!(good_rows.fields == clean_rows.fields);
                let mut moved = Chunk::new(&schema);
                moved.extend_rows(c, 0, bad).unwrap();
                assert_eq!(moved.rows().count(), bad);
                assert!(moved.rows().all(|r| r.is_ok()));
            }
        }
        (deferred, sparse)
    }

    #[test]
    fn a_deferred_crc_is_checked_on_the_copy_and_gives_the_error_reading_would() {
        let schema = schema(Ragged::Offsets);
        let n = 12;
        let clean = file_bytes(n, None);
        // Records 1 and 2 map only the image, 8 only the blob; 0 and 4 map
        // both, 3 neither; 6 goes to the generic decoder.
        let (deferred, sparse) =
            deferred_errors_match_eager(&schema, &clean, &[0, 1, 2, 3, 4, 6, 8], |i| bytes(i, IMG));
        assert_eq!(sparse, 0, "no record is large enough to be read sparsely");
        // The image in records 1 and 2 and anything in record 8 is checked
        // late (the rest as it is read).
        for bad in [1, 2, 8] {
            assert!(
                deferred.iter().any(|&(b, _)| b == bad),
                "record {bad} was checked as it was read: {deferred:?}"
            );
        }
        assert!(
            deferred.iter().all(|&(b, _)| [1, 2, 8].contains(&b)),
            "{deferred:?}"
        );
    }

    /// An image large enough for its record to be read sparsely.
    const LARGE: usize = 70_000;

    /// Large record `i`, by `i % 6` (features are written sorted by name:
    /// blob, img, label): the image and label; a small unused feature
    /// before them; an unused 6,000-byte feature before them (the image
    /// starts past the first 4 KiB); a second large mapped field (the blob);
    /// a small blob; an unused 5,000-byte feature after them (the image ends
    /// before the last 4 KiB).
    fn large_payload(i: usize) -> Vec<u8> {
        let img = bytes(i, LARGE);
        let label = [i as i64];
        let pad = bytes(i + 500, [0, 100, 6000, 0, 0, 5000][i % 6]);
        let blob = bytes(i + 100, if i % 6 == 3 { LARGE } else { 10 });
        let mut f: Vec<(&str, FeatureRef<'_>)> = vec![
            ("img", FeatureRef::OneBytes(&img)),
            ("label", FeatureRef::I64(&label)),
        ];
        match i % 6 {
            1 | 2 => f.push(("a_pad", FeatureRef::OneBytes(&pad))),
            3 | 4 => f.push(("blob", FeatureRef::OneBytes(&blob))),
            5 => f.push(("z_pad", FeatureRef::OneBytes(&pad))),
            _ => {}
        }
        let mut out = Vec::new();
        encode_features_into(&mut f, &mut out);
        out
    }

    #[test]
    fn large_records_read_from_their_ends_give_the_same_rows_and_errors() {
        let schema = schema_with(LARGE, Ragged::Offsets);
        let n = 12;
        let mut clean = Vec::new();
        for i in 0..n {
            frame_into(&large_payload(i), &mut clean);
        }
        let (deferred, sparse) =
            deferred_errors_match_eager(&schema, &clean, &(0..6).collect::<Vec<_>>(), |i| {
                bytes(i, LARGE)
            });
        // Record 0 is framed in the map (no large record seen yet); after
        // it, those whose image covers all but the first and last 4 KiB.
        assert_eq!(sparse, 5, "records 1, 4, 6, 7 and 10");
        // A bad byte in the middle of any image with one mapped span is
        // found on the copy; with two (record 3), as it is read.
        for bad in [0, 1, 2, 4, 5] {
            assert!(
                deferred.iter().any(|&(b, _)| b == bad),
                "record {bad} was checked as it was read: {deferred:?}"
            );
        }
        assert!(deferred.iter().all(|&(b, _)| b != 3), "{deferred:?}");
    }

    #[test]
    fn large_and_small_records_mixed_read_the_same_sparsely() {
        let schema = Schema::builder()
            .ragged("blob", DType::Bytes, Ragged::Offsets)
            .field("label", DType::I64, [1])
            .build()
            .unwrap();
        let sizes = [10, 70_000, 200_000, 100, 66_000, 5000, 131_072];
        let blob = |i: usize| bytes(i, sizes[i % sizes.len()]);
        let mut clean = Vec::new();
        for i in 0..2 * sizes.len() {
            let (b, label) = (blob(i), [i as i64]);
            let mut f = vec![
                ("blob", FeatureRef::OneBytes(&b)),
                ("label", FeatureRef::I64(&label)),
            ];
            let mut out = Vec::new();
            encode_features_into(&mut f, &mut out);
            frame_into(&out, &mut clean);
        }
        let (deferred, sparse) =
            deferred_errors_match_eager(&schema, &clean, &[1, 2, 3, 8, 9, 12], blob);
        // A large record right after another large one is read sparsely.
        assert_eq!(sparse, 2, "records 2 and 9");
        assert!(deferred.iter().any(|&(b, _)| b == 9), "{deferred:?}");
    }

    #[test]
    fn a_deferred_crc_costs_no_more_than_the_chunk_bound_allows_a_file_row() {
        use crate::backing::{DueCheck, FileRows};
        let row = std::mem::size_of::<Option<(usize, usize)>>()
            + std::mem::size_of::<usize>()
            + std::mem::size_of::<Option<DueCheck>>()
            + std::mem::size_of::<DeferredCrc>()
            + 2 * std::mem::size_of::<usize>();
        assert!(
            row <= FileRows::ROW_BYTES,
            "{row} > {}",
            FileRows::ROW_BYTES
        );
    }

    #[test]
    fn a_file_shortened_under_file_rows_is_an_error_naming_it_not_a_fault() {
        let schema = schema_with(LARGE, Ragged::Offsets);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shrinks.tfrecord");
        let mut bytes = Vec::new();
        for i in 0..6 {
            frame_into(&large_payload(i * 6), &mut bytes);
        }
        std::fs::write(&path, &bytes).unwrap();
        let defer = OpenOptions {
            defer_checksums: true,
            ..OpenOptions::default()
        };
        let mut r = TfRecordReader::open(&path, &defer).unwrap();
        let mut c = Chunk::new(&schema);
        while r.read_chunk(&mut c, 100, usize::MAX).unwrap() > 0 {}
        assert_eq!((c.len(), r.cur.sparse_records), (6, 5));
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(bytes.len() as u64 / 2)
            .unwrap();
        // The rows before the cut still collate; the first after it fails.
        let cut = bytes.len() / 2 / (bytes.len() / 6);
        assert!(collate(&schema, (0..cut).map(|i| (&c, i))).is_ok());
        let e = collate(&schema, (0..6).map(|i| (&c, i))).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e:?}");
        let e = e.to_string();
        assert!(
            e.contains("shrinks.tfrecord") && e.contains("shortened"),
            "{e}"
        );
    }
}
