//! The writer ([`TfRecordWriter`]): records framed with their CRCs, the
//! stream optionally GZIP or ZLIB compressed.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use flate2::write::{GzEncoder, ZlibEncoder};

use super::frame::{masked_crc32c, HEADER_BYTES};
use crate::error::{Error, Result};
use crate::format::example;
use crate::format::Compression;
use crate::record::{Instance, Record};

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
