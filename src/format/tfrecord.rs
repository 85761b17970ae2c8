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
//! rows refer to it) gives an [`Error::Io`](crate::Error::Io) naming it ("it was shortened
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
//! Errors are [`Error::Corrupt`](crate::Error::Corrupt) with the record index and the byte offset of
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
//!
//! Its files: `frame.rs` (the framing and its CRCs), `cursor.rs` (a
//! reader's position and error state), `frames.rs` (reading frames by
//! position or from a stream), `decompress.rs`, `deferred.rs` (deferred
//! CRCs, large records read from their ends), `lost.rs` (the records lost
//! after a broken frame), `reader.rs` and `writer.rs`.

use std::path::Path;

use super::{Format, OpenOptions, RecordReader};
use crate::error::Result;
use crate::schema::{DType, Dim, Schema};

mod cursor;
mod decompress;
mod deferred;
mod frame;
mod frames;
mod lost;
mod reader;
mod writer;

pub use frame::{frame_into, mask_crc, masked_crc32c, FOOTER_BYTES, HEADER_BYTES};
pub use reader::TfRecordReader;
pub use writer::TfRecordWriter;

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
