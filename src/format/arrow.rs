//! Arrow IPC (`.arrow`, `.feather`, `arrow:` prefix): the stream format
//! (what Hugging Face `datasets` writes: `data-00000-of-00001.arrow`) and
//! the file format (Feather v2, `pyarrow.feather.write_feather`), read
//! through arrow-rs's `arrow-ipc`: one record per row, one field per
//! top-level column.
//!
//! This module owns the IPC reader: the framing of a file's messages
//! (schema, dictionaries, record batches) by their headers alone — the
//! footer's blocks for the file format, one pass over the message headers,
//! seeking past every body, for a stream — so that opening at
//! `start_record` and [`RecordReader::skip_to`] read no batch before the
//! one they land in; the projection of the columns a chunk's schema names;
//! and the schema the file's Arrow schema implies
//! ([`Format::infer_schema`]). A directory that `Dataset.save_to_disk`
//! wrote is an input too: [`crate::plan::expand_inputs`] gives its files,
//! in the order its `state.json` lists them.
//!
//! Columns and their values:
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
//! The same as Parquet's: a scalar column gives a scalar (shape `[]`), a
//! list shape `[n]`, a list of fixed-size lists `[n, m]`, a list of
//! variable lists a flat ragged field (its values flat, `[n * m]`; its
//! inner lists of one row of one length). Any other type is an error naming the column and its Arrow
//! type; a null is a bad record naming the file, the row and the column
//! (reading goes on with the next row).
//!
//! A message that runs past the end of the file, a header that does not
//! parse, or a stream that ends without its end-of-stream marker (a
//! truncated file: pyarrow and arrow-rs always write it) is an error naming
//! the file and the offset when it is opened. A
//! record batch whose body does not decode is one error for its rows not
//! read yet, naming the batch and its rows; reading goes on with the next
//! batch ([`RecordReader::records_skipped`] says how many were lost).
//! Buffers compressed with LZ4 (the LZ4 frame format: pyarrow's default for
//! Feather, `feather.write_feather`) or zstd are read, through arrow-ipc's
//! pure-Rust codecs' features (`lz4_flex`; zstd). A compressed buffer that
//! does not decompress, or decompresses to another length than its header
//! states, is an error for its batch naming the file; Arrow IPC carries no
//! checksum, so damage that still decodes (an LZ4 frame without its
//! optional content checksum, pyarrow's default) cannot be told from data.
//!
//! ```
//! use feedline::format::{Format, OpenOptions, arrow::ArrowFormat};
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("t.arrow");
//! # feedline::format::arrow::write_example(&path).unwrap();
//! let mut r = ArrowFormat.open(&path, &OpenOptions::default()).unwrap();
//! assert_eq!(r.len_hint(), Some(3));
//! r.skip_to(2).unwrap();
//! let rec = r.next_record().unwrap().unwrap();
//! assert_eq!(rec.to_json(), serde_json::json!({"id": [2], "x": [2.5, 3.5]}));
//! ```

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_buffer::Buffer;
use arrow_ipc::reader::FileDecoder;
use arrow_ipc::{Block, MessageHeader, MetadataVersion};
use arrow_schema::SchemaRef;

use super::arrow_columns::{
    contain_panic, layout, next_record_projected, read_chunk_projected, schema_of_arrow,
    unsupported, OpenBatch, ProjectedRows,
};
use super::{source_id, Compression, Format, OpenOptions, RecordReader};
use crate::chunk::Chunk;
use crate::error::{Error, Result};
use crate::provenance::{Location, SourceId};
use crate::record::Record;
use crate::schema::Schema;

/// The magic at both ends of an IPC file (the file format).
const FILE_MAGIC: &[u8; 6] = b"ARROW1";
/// The marker before a message's length (since Arrow 0.15).
const CONTINUATION: u32 = 0xFFFF_FFFF;
/// The largest message header accepted (a schema of many columns is far
/// below it): a larger length field is damage, not a header.
const MAX_HEADER_BYTES: u64 = 64 << 20;

/// The Arrow IPC format.
#[derive(Clone, Copy, Debug, Default)]
pub struct ArrowFormat;

impl Format for ArrowFormat {
    fn name(&self) -> &str {
        "arrow"
    }

    fn extensions(&self) -> &[&str] {
        &["arrow", "feather"]
    }

    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        opts.validate()?;
        match opts.compression {
            None | Some(Compression::None) => {}
            Some(c) => {
                return Err(Error::BadFile {
                    path: path.to_path_buf(),
                    what: format!(
                        "an Arrow IPC file is compressed inside (per buffer); stream \
                         compression {c:?} is not supported"
                    ),
                })
            }
        }
        let (file, messages) = Messages::read(path)?;
        let total = messages.batches.iter().map(|b| b.rows).sum::<u64>();
        Ok(Box::new(ArrowReader {
            path: path.to_path_buf(),
            source: source_id(path),
            file,
            total,
            next: opts.start_record.min(total),
            messages,
            decoder: None,
            batch: None,
            dead: false,
            skipped: 1,
            max_record_bytes: opts.max_record_bytes,
        }))
    }

    fn infer_schema(&self, path: &Path) -> Option<Result<Schema>> {
        Some(Messages::read(path).and_then(|(_, m)| schema_of_arrow(path, m.schema.fields())))
    }
}

/// One message of the file: where it is (its header with the length
/// prefix, then its body).
#[derive(Clone, Copy, Debug)]
struct Frame {
    offset: u64,
    /// The header's bytes, with the prefix (continuation and length).
    header: u64,
    body: u64,
}

impl Frame {
    fn block(&self) -> Block {
        Block::new(self.offset as i64, self.header as i32, self.body as i64)
    }
}

/// A record batch: where it is, its rows, its first row in the file, and
/// how many dictionary messages come before it.
#[derive(Clone, Copy, Debug)]
struct BatchFrame {
    frame: Frame,
    rows: u64,
    first_row: u64,
    dictionaries_before: usize,
}

/// A file's messages, framed from their headers.
struct Messages {
    schema: SchemaRef,
    version: MetadataVersion,
    dictionaries: Vec<Frame>,
    batches: Vec<BatchFrame>,
}

impl Messages {
    /// Frame the IPC file or stream at `path`.
    fn read(path: &Path) -> Result<(File, Messages)> {
        if crate::input::remote_url(path).is_some() {
            return Err(Error::BadFile {
                path: path.to_path_buf(),
                what: "Arrow IPC inputs are read from local files only".into(),
            });
        }
        let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut head = [0u8; 8];
        let n = read_up_to(&mut file, &mut head).map_err(|e| Error::io(path, e))?;
        let bad = |what: String| Error::BadFile {
            path: path.to_path_buf(),
            what: format!("not a readable Arrow IPC file: {what}"),
        };
        let messages = if n >= 6 && &head[..6] == FILE_MAGIC {
            Self::of_file(&mut file, len).map_err(bad)?
        } else if n >= 4 && &head[..4] == b"FEA1" {
            return Err(bad(
                "a Feather v1 file (write it again with pyarrow's feather.write_feather, \
                 which writes v2)"
                    .into(),
            ));
        } else {
            Self::of_stream(&mut file, len).map_err(bad)?
        };
        Ok((file, messages))
    }

    /// The file format: the footer's schema and blocks; each record
    /// batch's header read for its row count.
    fn of_file(file: &mut File, len: u64) -> std::result::Result<Messages, String> {
        if len < 6 + 2 + 10 {
            return Err(format!("{len} bytes, too short for an IPC file"));
        }
        let mut tail = [0u8; 10];
        read_at(file, len - 10, &mut tail)?;
        let footer_len = arrow_ipc::reader::read_footer_length(tail)
            .map_err(|e| format!("the end of the file: {e}"))? as u64;
        if footer_len + 10 + 8 > len {
            return Err(format!(
                "the footer's length {footer_len} is beyond the file's {len} bytes"
            ));
        }
        let mut footer = vec![0u8; footer_len as usize];
        read_at(file, len - 10 - footer_len, &mut footer)?;
        let footer = arrow_ipc::root_as_footer(&footer)
            .map_err(|e| format!("the footer does not parse: {e}"))?;
        let schema = footer.schema().ok_or("the footer has no schema")?;
        let schema = Arc::new(
            contain_panic(|| arrow_ipc::convert::fb_to_schema(schema))
                .map_err(|e| format!("the footer's schema: {e}"))?,
        );
        let frame = |b: &Block, what: &str, i: usize| -> std::result::Result<Frame, String> {
            let (offset, header, body) = (b.offset(), b.metaDataLength(), b.bodyLength());
            if offset < 8 || header < 8 || body < 0 {
                return Err(format!(
                    "{what} {i}: a bad block (offset {offset}, header {header}, body {body})"
                ));
            }
            let f = Frame {
                offset: offset as u64,
                header: header as u64,
                body: body as u64,
            };
            if f.offset + f.header + f.body > len - 10 - footer_len {
                return Err(format!(
                    "{what} {i} at offset {offset} ({header} + {body} bytes) runs past the \
                     data ({} bytes before the footer)",
                    len - 10 - footer_len
                ));
            }
            Ok(f)
        };
        let mut dictionaries = Vec::new();
        for (i, b) in footer.dictionaries().iter().flatten().enumerate() {
            dictionaries.push(frame(b, "dictionary batch", i)?);
        }
        let mut batches = Vec::new();
        let mut first_row = 0;
        for (i, b) in footer.recordBatches().iter().flatten().enumerate() {
            let f = frame(b, "record batch", i)?;
            let mut header = vec![0u8; f.header as usize];
            read_at(file, f.offset, &mut header)?;
            let rows = batch_rows(&header)
                .map_err(|e| format!("record batch {i} at offset {}: {e}", f.offset))?;
            batches.push(BatchFrame {
                frame: f,
                rows,
                first_row,
                dictionaries_before: dictionaries.len(),
            });
            first_row += rows;
        }
        Ok(Messages {
            schema,
            version: footer.version(),
            dictionaries,
            batches,
        })
    }

    /// The stream format: every message's header in turn, seeking past
    /// its body, to the end-of-stream marker or the end of the file.
    fn of_stream(file: &mut File, len: u64) -> std::result::Result<Messages, String> {
        let mut at = 0u64;
        let mut schema = None;
        let mut version = MetadataVersion::V5;
        let mut dictionaries = Vec::new();
        let mut batches = Vec::new();
        let mut first_row = 0;
        let mut ended = false;
        while at < len {
            let mut word = [0u8; 4];
            read_at(file, at, &mut word).map_err(|e| format!("the message at offset {at}: {e}"))?;
            let (prefix, meta_len) = if u32::from_le_bytes(word) == CONTINUATION {
                read_at(file, at + 4, &mut word)
                    .map_err(|e| format!("the message at offset {at}: {e}"))?;
                (8, u32::from_le_bytes(word) as u64)
            } else {
                (4, u32::from_le_bytes(word) as u64)
            };
            if meta_len == 0 {
                ended = true; // the end-of-stream marker
                break;
            }
            if meta_len > MAX_HEADER_BYTES || at + prefix + meta_len > len {
                return Err(format!(
                    "the message at offset {at}: a header of {meta_len} bytes runs past the \
                     end of the file ({len} bytes)"
                ));
            }
            let mut header = vec![0u8; (prefix + meta_len) as usize];
            read_at(file, at, &mut header)?;
            let message = arrow_ipc::root_as_message(&header[prefix as usize..])
                .map_err(|e| format!("the message at offset {at} does not parse: {e}"))?;
            let body = message.bodyLength();
            let body = u64::try_from(body)
                .map_err(|_| format!("the message at offset {at}: a body of {body} bytes"))?;
            let end = at + prefix + meta_len + body;
            if end > len {
                return Err(format!(
                    "the message at offset {at}: its body of {body} bytes runs past the end of \
                     the file ({len} bytes): the file is truncated"
                ));
            }
            let frame = Frame {
                offset: at,
                header: prefix + meta_len,
                body,
            };
            match message.header_type() {
                MessageHeader::Schema => {
                    if schema.is_some() {
                        return Err(format!("a second schema at offset {at}"));
                    }
                    let fb = message
                        .header_as_schema()
                        .ok_or("a schema that does not parse")?;
                    schema = Some(Arc::new(
                        contain_panic(|| arrow_ipc::convert::fb_to_schema(fb))
                            .map_err(|e| format!("the schema: {e}"))?,
                    ));
                    version = message.version();
                }
                MessageHeader::DictionaryBatch if schema.is_some() => dictionaries.push(frame),
                MessageHeader::RecordBatch if schema.is_some() => {
                    let rows = batch_rows(&header)
                        .map_err(|e| format!("record batch at offset {at}: {e}"))?;
                    batches.push(BatchFrame {
                        frame,
                        rows,
                        first_row,
                        dictionaries_before: dictionaries.len(),
                    });
                    first_row += rows;
                }
                other => {
                    return Err(format!(
                        "a message of kind {other:?} at offset {at} (a stream starts with its \
                         schema)"
                    ))
                }
            }
            at = end;
        }
        let schema = schema.ok_or_else(|| {
            if len == 0 {
                "the file is empty".to_string()
            } else {
                "no schema message: not an Arrow IPC stream or file".to_string()
            }
        })?;
        if !ended {
            return Err(format!(
                "no end-of-stream marker after its {} record batches (at offset {at}): the \
                 file is truncated",
                batches.len()
            ));
        }
        Ok(Messages {
            schema,
            version,
            dictionaries,
            batches,
        })
    }
}

/// The row count of the record batch whose header (with its prefix) is
/// `header`.
fn batch_rows(header: &[u8]) -> std::result::Result<u64, String> {
    let skip = if header.len() >= 4 && header[..4] == CONTINUATION.to_le_bytes() {
        8
    } else {
        4
    };
    let message = arrow_ipc::root_as_message(header.get(skip..).unwrap_or_default())
        .map_err(|e| format!("its header does not parse: {e}"))?;
    let batch = message
        .header_as_record_batch()
        .ok_or("its header is not a record batch's")?;
    if let Some(c) = batch.compression() {
        let codec = c.codec();
        if codec != arrow_ipc::CompressionType::ZSTD
            && codec != arrow_ipc::CompressionType::LZ4_FRAME
        {
            return Err(format!(
                "its buffers are compressed with {codec:?}, which feedline does not read \
                 (Arrow IPC defines LZ4_FRAME and ZSTD; write with compression=\"lz4\", \
                 \"zstd\" or \"uncompressed\")"
            ));
        }
    }
    u64::try_from(batch.length()).map_err(|_| format!("a row count of {}", batch.length()))
}

fn read_at(file: &mut File, at: u64, buf: &mut [u8]) -> std::result::Result<(), String> {
    file.seek(SeekFrom::Start(at))
        .and_then(|_| file.read_exact(buf))
        .map_err(|e| format!("reading {} bytes at offset {at}: {e}", buf.len()))
}

fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// The bytes of `frame`, header and body.
fn read_frame(file: &mut File, frame: &Frame) -> std::result::Result<Buffer, String> {
    let mut buf = vec![0u8; (frame.header + frame.body) as usize];
    read_at(file, frame.offset, &mut buf)?;
    Ok(Buffer::from_vec(buf))
}

/// Check the buffers a record batch's or a dictionary batch's header lists
/// against its body (the bytes of `message` after the first `header`):
/// each inside the body, and a compressed one's stated size at most
/// `max_record_bytes` times its rows (the batch's, or the dictionary's
/// values) — the decoder allocates what a compressed buffer states, and a
/// damaged size must be an error, not an allocation of petabytes.
fn check_buffers(
    message: &[u8],
    header: usize,
    max_record_bytes: u64,
) -> std::result::Result<(), String> {
    let skip = if message[..4] == CONTINUATION.to_le_bytes() {
        8
    } else {
        4
    };
    let m = arrow_ipc::root_as_message(&message[skip..header])
        .map_err(|e| format!("its header does not parse: {e}"))?;
    let batch = match m.header_type() {
        MessageHeader::RecordBatch => m.header_as_record_batch(),
        MessageHeader::DictionaryBatch => m.header_as_dictionary_batch().and_then(|d| d.data()),
        _ => None,
    }
    .ok_or("its header is not a record batch's or a dictionary batch's")?;
    let rows = u64::try_from(batch.length()).unwrap_or(0);
    let limit = rows.max(1).saturating_mul(max_record_bytes);
    let body = &message[header..];
    let compressed = batch.compression().is_some();
    for (i, b) in batch.buffers().iter().flatten().enumerate() {
        let (offset, length) = (b.offset(), b.length());
        let end = offset.checked_add(length);
        if offset < 0 || length < 0 || end.is_none_or(|e| e as u64 > body.len() as u64) {
            return Err(format!(
                "buffer {i} (offset {offset}, {length} bytes) is not inside the body of {} bytes",
                body.len()
            ));
        }
        if compressed && length >= 8 {
            let at = offset as usize;
            let stated = i64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
            if stated != -1 && (stated < 0 || stated as u64 > limit) {
                return Err(format!(
                    "buffer {i} states {stated} bytes uncompressed, beyond the batch's limit of \
                     {limit} (its {rows} rows times the largest record)"
                ));
            }
        }
    }
    Ok(())
}

/// Reads one IPC file's rows in order.
struct ArrowReader {
    path: PathBuf,
    source: SourceId,
    file: File,
    messages: Messages,
    total: u64,
    /// Index of the next row.
    next: u64,
    /// The decoder, its projection (`None`: every column) and how many
    /// dictionary messages it has read.
    decoder: Option<(FileDecoder, Option<Vec<String>>, usize)>,
    /// The open batch: its index and its decoded columns.
    batch: Option<(usize, OpenBatch)>,
    /// A dictionary could not be read: nothing more can be.
    dead: bool,
    /// Records the last error skipped.
    skipped: u64,
    /// The largest record accepted ([`OpenOptions::max_record_bytes`]).
    max_record_bytes: u64,
}

impl ArrowReader {
    fn location(&self, row: u64) -> Location {
        Location::new(self.source, row, None)
    }

    /// Make sure the decoder decodes exactly `projection` (names of the
    /// columns; those the file lacks are left to the chunk to report).
    fn project(&mut self, projection: Option<Vec<String>>) -> Result<()> {
        if self
            .decoder
            .as_ref()
            .is_some_and(|(_, p, _)| *p == projection)
        {
            return Ok(());
        }
        let schema = self.messages.schema.clone();
        let mut decoder = FileDecoder::new(schema.clone(), self.messages.version);
        if let Some(names) = &projection {
            let mut indices = Vec::new();
            for (i, f) in schema.fields().iter().enumerate() {
                if names.iter().any(|n| n == f.name()) {
                    layout(f.data_type()).map_err(|t| unsupported(&self.path, f.name(), &t))?;
                    indices.push(i);
                }
            }
            decoder = decoder.with_projection(indices);
        }
        self.decoder = Some((decoder, projection, 0));
        self.batch = None;
        Ok(())
    }

    /// Decode record batch `b`, the dictionary messages before it first.
    /// `Err((fatal, what))`: fatal if a dictionary is bad (no later batch
    /// can be decoded).
    fn decode(&mut self, b: usize) -> std::result::Result<RecordBatch, (bool, String)> {
        let batch = self.messages.batches[b];
        let (decoder, _, read) = self.decoder.as_mut().expect("projected before decoding");
        while *read < batch.dictionaries_before {
            let frame = self.messages.dictionaries[*read];
            let buf = read_frame(&mut self.file, &frame).map_err(|e| (true, e))?;
            check_buffers(&buf, frame.header as usize, self.max_record_bytes)
                .map_err(|e| (true, format!("dictionary batch {}: {e}", *read)))?;
            let at = *read;
            contain_panic(|| decoder.read_dictionary(&frame.block(), &buf))
                .map_err(|e| (true, format!("dictionary batch {at}: {e}")))?
                .map_err(|e| (true, format!("dictionary batch {at}: {e}")))?;
            *read += 1;
        }
        let buf = read_frame(&mut self.file, &batch.frame).map_err(|e| (false, e))?;
        check_buffers(&buf, batch.frame.header as usize, self.max_record_bytes)
            .map_err(|e| (false, e))?;
        match contain_panic(|| decoder.read_record_batch(&batch.frame.block(), &buf)) {
            Ok(Ok(Some(rb))) if rb.num_rows() as u64 == batch.rows => Ok(rb),
            Ok(Ok(Some(rb))) => Err((
                false,
                format!(
                    "{} rows decoded where its header says {}",
                    rb.num_rows(),
                    batch.rows
                ),
            )),
            Ok(Ok(None)) => Err((false, "not a record batch".to_string())),
            Ok(Err(e)) => Err((false, e.to_string())),
            Err(e) => Err((false, e)),
        }
    }

    /// The record batch holding row `row`.
    fn batch_of(&self, row: u64) -> usize {
        self.messages
            .batches
            .partition_point(|b| b.first_row + b.rows <= row)
    }

    /// The next row as a record of the projected columns, `None` at the end.
    fn next_row(&mut self) -> Result<Option<Record>> {
        if self.dead {
            return Err(Error::corrupt(
                self.location(self.next),
                "the file cannot be read past an earlier error",
            ));
        }
        self.skipped = 1;
        if self.next >= self.total {
            return Ok(None);
        }
        let b = self.batch_of(self.next);
        if self.batch.as_ref().is_none_or(|(i, _)| *i != b) {
            self.batch = None;
            let frame = self.messages.batches[b];
            let rb = match self.decode(b) {
                Ok(rb) => rb,
                Err((fatal, what)) => {
                    let from = self.next;
                    let end = frame.first_row + frame.rows;
                    let what = format!(
                        "record batch {b} (rows {}..{end}, offset {}): {what}",
                        frame.first_row, frame.frame.offset
                    );
                    if fatal {
                        self.dead = true;
                        return Err(Error::corrupt(self.location(from), what));
                    }
                    self.next = end;
                    self.skipped = end - from;
                    return Err(Error::corrupt(
                        self.location(from),
                        format!("{what}: rows {from}..{end} cannot be read (reading goes on at row {end})"),
                    ));
                }
            };
            let open = OpenBatch::new(&self.path, &rb, self.location(self.next))?;
            self.batch = Some((b, open));
        }
        let row = self.next;
        let first = self.messages.batches[b].first_row;
        let (_, batch) = self.batch.as_ref().expect("a batch is open");
        self.next += 1;
        batch
            .row((row - first) as usize, self.source, row)
            .map(Some)
    }
}

impl ProjectedRows for ArrowReader {
    fn project(&mut self, names: Option<Vec<String>>) -> Result<()> {
        ArrowReader::project(self, names)
    }

    fn next_row(&mut self) -> Result<Option<Record>> {
        ArrowReader::next_row(self)
    }
}

impl RecordReader for ArrowReader {
    fn next_record(&mut self) -> Result<Option<Record>> {
        next_record_projected(self)
    }

    fn read_chunk(
        &mut self,
        chunk: &mut Chunk,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<usize> {
        read_chunk_projected(self, chunk, max_records, max_bytes)
    }

    fn next_index(&self) -> u64 {
        self.next
    }

    /// Moves on by the batches' row counts: no batch before the one
    /// `record` is in is read.
    fn skip_to(&mut self, record: u64) -> Result<()> {
        if record > self.next {
            self.next = record.min(self.total);
        }
        Ok(())
    }

    fn can_continue(&self) -> bool {
        !self.dead
    }

    fn records_skipped(&self) -> u64 {
        self.skipped
    }

    fn len_hint(&self) -> Option<u64> {
        Some(self.total)
    }
}

/// Write the small IPC stream of the module example: columns `id` (int64)
/// and `x` (list of float64), 3 rows in 2 record batches.
#[doc(hidden)]
pub fn write_example(path: &Path) -> Result<()> {
    use arrow_array::builder::{Float64Builder, ListBuilder};
    use arrow_array::{ArrayRef, Int64Array};
    let bad = |e: arrow_schema::ArrowError| Error::BadFile {
        path: path.to_path_buf(),
        what: e.to_string(),
    };
    let batch = |rows: std::ops::Range<i64>| {
        let ids: ArrayRef = Arc::new(Int64Array::from(rows.clone().collect::<Vec<_>>()));
        let mut xs = ListBuilder::new(Float64Builder::new());
        for i in rows {
            xs.values().append_slice(&[i as f64 + 0.5, i as f64 + 1.5]);
            xs.append(true);
        }
        let xs: ArrayRef = Arc::new(xs.finish());
        RecordBatch::try_from_iter([("id", ids), ("x", xs)])
    };
    let (a, b) = (batch(0..2).map_err(bad)?, batch(2..3).map_err(bad)?);
    let file = File::create(path).map_err(|e| Error::io(path, e))?;
    let mut w = arrow_ipc::writer::StreamWriter::try_new(file, &a.schema()).map_err(bad)?;
    w.write(&a).map_err(bad)?;
    w.write(&b).map_err(bad)?;
    w.finish().map_err(bad)?;
    Ok(())
}
