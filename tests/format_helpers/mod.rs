//! Helpers shared by the format test suites: read every record, the text of
//! an error, and the generic chunk path that fast paths are compared with.
#![allow(dead_code)]

use feedline::format::RecordReader;
use feedline::{Chunk, Record, Schema};

pub fn all_records(r: &mut dyn RecordReader) -> Vec<Record> {
    let mut v = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        v.push(rec);
    }
    v
}

pub fn err_string<T>(r: feedline::Result<T>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

pub fn assert_contains(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "`{msg}` does not contain `{p}`");
    }
}

/// The generic path exactly as `RecordReader::read_chunk`'s default.
pub fn generic_read_chunk(
    r: &mut dyn RecordReader,
    chunk: &mut Chunk,
    max_records: usize,
    max_bytes: usize,
) -> feedline::Result<usize> {
    feedline::format::check_chunk_budget(max_records, max_bytes)?;
    let mut n = 0;
    while n < max_records && (n == 0 || chunk.payload_bytes() < max_bytes) {
        match r.next_record()? {
            Some(rec) => {
                chunk.push_record(&rec)?;
                n += 1;
            }
            None => break,
        }
    }
    Ok(n)
}

/// What reading a file to the end in chunks of `(max_records, max_bytes)`
/// gives, call by call — the result (errors as text), the chunk and the
/// reader's next index — through the format's `read_chunk` (`fast`) or the
/// generic path, continuing after errors while the reader can.
pub type ChunkLog = Vec<(Result<usize, String>, Chunk, u64)>;

pub fn chunk_log(
    mut r: Box<dyn RecordReader>,
    schema: &Schema,
    max_records: usize,
    max_bytes: usize,
    fast: bool,
) -> ChunkLog {
    let mut log = Vec::new();
    for _ in 0..1000 {
        let mut chunk = Chunk::new(schema);
        let res = if fast {
            r.read_chunk(&mut chunk, max_records, max_bytes)
        } else {
            generic_read_chunk(&mut *r, &mut chunk, max_records, max_bytes)
        };
        let stop = match &res {
            Ok(0) => true,
            Ok(_) => false,
            Err(_) => !r.can_continue(),
        };
        log.push((res.map_err(|e| e.to_string()), chunk, r.next_index()));
        if stop {
            break;
        }
    }
    log
}

/// A format that reads another one's files but returns short chunks: at
/// most `pattern[k % pattern.len()]` records on its `k`-th `read_chunk`
/// call (each at least 1), as block or row-group readers do. Only `0` ends
/// a file, so a reader of it must deliver every record.
pub struct ShortChunks {
    pub name: &'static str,
    pub inner: std::sync::Arc<dyn feedline::format::Format>,
    pub pattern: Vec<usize>,
}

struct ShortReader {
    inner: Box<dyn RecordReader>,
    pattern: Vec<usize>,
    calls: usize,
}

impl feedline::format::Format for ShortChunks {
    fn name(&self) -> &str {
        self.name
    }

    fn extensions(&self) -> &[&str] {
        &[]
    }

    fn open(
        &self,
        path: &std::path::Path,
        opts: &feedline::format::OpenOptions,
    ) -> feedline::Result<Box<dyn RecordReader>> {
        assert!(self.pattern.iter().all(|&k| k > 0));
        Ok(Box::new(ShortReader {
            inner: self.inner.open(path, opts)?,
            pattern: self.pattern.clone(),
            calls: 0,
        }))
    }
}

impl RecordReader for ShortReader {
    fn next_record(&mut self) -> feedline::Result<Option<Record>> {
        self.inner.next_record()
    }

    fn read_chunk(
        &mut self,
        chunk: &mut Chunk,
        max_records: usize,
        max_bytes: usize,
    ) -> feedline::Result<usize> {
        let k = self.pattern[self.calls % self.pattern.len()];
        self.calls += 1;
        self.inner.read_chunk(chunk, max_records.min(k), max_bytes)
    }

    fn next_index(&self) -> u64 {
        self.inner.next_index()
    }

    fn can_continue(&self) -> bool {
        self.inner.can_continue()
    }
}
