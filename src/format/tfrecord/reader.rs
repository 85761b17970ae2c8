//! The reader ([`TfRecordReader`]): its input (bytes in memory, a regular
//! file read by position, a stream), skipping to `start_record`, frames and
//! records one at a time, and [`RecordReader::read_chunk`] decoding frames
//! straight into a chunk (rows left in the file, CRCs deferred, large
//! records read from their ends).

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::cursor::{Cursor, Failure};
use super::decompress::Decompress;
use super::deferred::{decode_deferred, sparse_record, SPARSE_MIN_BYTES};
use super::frame::{FOOTER_BYTES, HEADER_BYTES};
use super::frames::{frame_at, skip_frame, stream_frame, FileFrames};
use super::lost::records_after_break;
use crate::backing::{Backed, Backing};
use crate::chunk::Chunk;
use crate::error::Result;
use crate::format::example::{self, ExampleDecoder};
use crate::format::{check_chunk_budget, source_id, Compression, OpenOptions, RecordReader};
use crate::input::{open_input, Opened, RangeReader, Window};
use crate::provenance::{Location, SourceId};
use crate::record::Record;

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
    /// stay in it, see the [module docs](super)); a compressed file, and
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

impl RecordReader for TfRecordReader {
    /// An uncompressed regular file: the cursor moves to `offset`, and the
    /// window reads `offset..end` at most at a time from now on; with
    /// checksums deferred, a span of 64 KiB or more is framed from its
    /// ends alone (see the module docs). Bytes in memory
    /// ([`from_bytes`](TfRecordReader::from_bytes), uncompressed): the
    /// cursor moves to `offset` of them (`end` past them is an error).
    fn seek_indexed(&mut self, record: u64, offset: u64, end: u64) -> Result<bool> {
        match &mut self.input {
            Input::File { window, .. } => {
                window.set_block(end.saturating_sub(offset).min(WINDOW_BYTES as u64) as usize)
            }
            Input::Memory(data) => {
                if end > (**data).as_ref().len() as u64 {
                    return Err(crate::Error::BadFile {
                        path: self.cur.path.clone(),
                        what: format!(
                            "bytes {offset}..{end} asked of {} bytes in memory (its record index does not match it)",
                            (**data).as_ref().len()
                        ),
                    });
                }
            }
            Input::Stream { .. } => return Ok(false),
        }
        let memory = matches!(self.input, Input::Memory(_));
        let cur = &mut self.cur;
        cur.pos = offset;
        cur.index = record;
        cur.skip_to = record;
        cur.failed = None;
        cur.can_continue = false;
        // A large record (its span from the index) is framed from its ends
        // alone, as after a large record read in order.
        cur.sparse = !memory && cur.defer && end.saturating_sub(offset) >= SPARSE_MIN_BYTES as u64;
        Ok(true)
    }

    fn hold_span(&mut self, offset: u64, end: u64) -> Result<bool> {
        let Input::File { file, window } = &mut self.input else {
            return Ok(false);
        };
        if end < offset || end > file.len() {
            return Err(crate::Error::BadFile {
                path: self.cur.path.clone(),
                what: format!(
                    "bytes {offset}..{end} asked of a file of {} bytes (its record index does not match it)",
                    file.len()
                ),
            });
        }
        // Exactly the range: what lies past it is read when asked for.
        window.set_block((end - offset) as usize);
        window.get(file, offset, (end - offset) as usize)?;
        Ok(true)
    }

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

#[cfg(test)]
mod tests {
    //! Rows that refer to their file: the same chunks, rows, batches and
    //! errors as the copying path, however the rows mix.

    use super::super::frame::frame_into;
    use super::*;
    use crate::chunk::RowRef;
    use crate::collate::{collate, collate_rows};
    use crate::error::Error;
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

    /// `hold_span`: a range of records read at once and then read by
    /// `seek_indexed` in any order without another read (the file zeroed
    /// on disk under the reader gives the records held); a record outside
    /// it is read from the file; a range past the end is refused naming it.
    #[cfg(unix)]
    #[test]
    fn a_held_span_serves_its_records_in_any_order_without_another_read() {
        use crate::format::tfrecord::TfRecordWriter;
        use crate::{Location, Record, Tensor};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("held.tfrecord");
        let mut w = TfRecordWriter::create(&path, Compression::None).unwrap();
        for id in 0..20i64 {
            let rec = Record {
                fields: vec![(
                    "id".into(),
                    Tensor {
                        values: Values::I64(vec![id]),
                        shape: vec![],
                    },
                )],
                location: Location::new(source_id(&path), id as u64, None),
            };
            w.write_example(&rec).unwrap();
        }
        w.finish().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        // Frame offsets, from the frames' lengths.
        let mut offsets = vec![0u64];
        while (*offsets.last().unwrap() as usize) < bytes.len() {
            let at = *offsets.last().unwrap() as usize;
            let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
            offsets.push(at as u64 + 16 + len);
        }
        let id_of = |r: &mut TfRecordReader, i: usize| -> Result<i64> {
            assert!(r.seek_indexed(i as u64, offsets[i], offsets[i + 1])?);
            let rec = r.next_record()?.expect("a record");
            match &rec.fields[0].1.values {
                Values::I64(v) => Ok(v[0]),
                v => panic!("{v:?}"),
            }
        };
        let mut r = TfRecordReader::open(&path, &OpenOptions::default()).unwrap();
        assert!(r.hold_span(offsets[4], offsets[15]).unwrap());
        // Zeroed in place: the held records still read as written.
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &vec![0u8; bytes.len()], 0).unwrap();
        for i in [14usize, 4, 9, 10, 5, 13] {
            assert_eq!(id_of(&mut r, i).unwrap(), i as i64);
        }
        // Outside the span: read from the (zeroed) file, and refused.
        assert!(id_of(&mut r, 17).is_err());
        let e = r
            .hold_span(0, bytes.len() as u64 + 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("held.tfrecord") && e.contains("record index"),
            "{e}"
        );
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
        // Rows mapped from another file, to append to.
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
                // Appended to rows of another file, the row keeps its own
                // file and its check: the way out of that chunk checks it.
                let mut into = other.clone();
                let first = bad.saturating_sub(1);
                into.extend_rows(c, first, bad + 1).unwrap();
                let moved = other.len() + (bad - first);
                assert_eq!(into.row(moved).unwrap_err().to_string(), e);
                let err = collate(&schema, (0..into.len()).map(|i| (&into, i))).unwrap_err();
                assert_eq!(err.to_string(), e);
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
