//! CSV and TSV files (the `csv` crate): the header row names the fields, each
//! later row is a record of scalar cells.
//!
//! This module owns [`CsvFormat`] (options: delimiter, header row, trimming;
//! [`CsvFormat::tsv`] for tab-separated files), the cell conversion and the
//! typed path [`read_typed`].
//!
//! A cell that parses as an integer is an i64 scalar, as a float an f64
//! scalar, `true`/`false` (also `True`/`TRUE`…) a bool, anything else one
//! byte string. An empty cell is a value of no elements (shape `[0]`), which
//! a ragged field accepts and a fixed one rejects with a shape error. Without
//! a header row, fields are named `c0`, `c1`, …. A row with the wrong number
//! of cells, or a cell that is not UTF-8, is an error naming the file, the
//! record (0-based, the header not counted) and the byte offset of the row.
//! No row may be longer than `max_record_bytes`.
//!
//! ```
//! use feedline::format::{csv::CsvFormat, Format, OpenOptions};
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("t.csv");
//! std::fs::write(&path, "a,b,c,d\n1,2.5,true,cat\n,x,,\n").unwrap();
//! let mut r = CsvFormat::default().open(&path, &OpenOptions::default()).unwrap();
//! let rec = r.next_record().unwrap().unwrap();
//! assert_eq!(rec.to_json(), serde_json::json!({"a": [1], "b": [2.5], "c": [true], "d": ["Y2F0"]}));
//! let rec = r.next_record().unwrap().unwrap();
//! assert_eq!(rec.get("a").unwrap().shape, vec![0]);
//! ```

use std::io::{self, Read};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::{
    open_stream, source_id, Compression, Format, OpenOptions, RecordReader,
    DEFAULT_MAX_RECORD_BYTES,
};
use crate::error::{Error, Result};
use crate::provenance::{Location, SourceId};
use crate::record::Record;
use crate::values::{BytesList, Tensor, Values};

/// Bytes the csv crate may have buffered beyond the current record.
const CSV_BUFFER: u64 = 64 << 10;

/// The CSV format, with its options. `CsvFormat::default()` is comma
/// separated with a header row; [`CsvFormat::tsv`] is tab separated.
#[derive(Clone, Debug)]
pub struct CsvFormat {
    name: &'static str,
    extensions: &'static [&'static str],
    delimiter: u8,
    has_header: bool,
    trim: bool,
}

impl Default for CsvFormat {
    fn default() -> Self {
        CsvFormat {
            name: "csv",
            extensions: &["csv"],
            delimiter: b',',
            has_header: true,
            trim: false,
        }
    }
}

impl CsvFormat {
    /// Tab-separated values with a header row: format name `tsv`, extensions
    /// `tsv` and `tab`.
    pub fn tsv() -> Self {
        CsvFormat {
            name: "tsv",
            extensions: &["tsv", "tab"],
            delimiter: b'\t',
            ..Self::default()
        }
    }

    /// The cell delimiter (default `,`).
    pub fn delimiter(mut self, delimiter: u8) -> Self {
        self.delimiter = delimiter;
        self
    }

    /// Whether the first row names the fields (default true); without it the
    /// fields are `c0`, `c1`, ….
    pub fn has_header(mut self, has_header: bool) -> Self {
        self.has_header = has_header;
        self
    }

    /// Whether to trim whitespace around cells and names (default false).
    pub fn trim(mut self, trim: bool) -> Self {
        self.trim = trim;
        self
    }

    /// Another format name and extensions for this variant (e.g. `psv`).
    pub fn named(mut self, name: &'static str, extensions: &'static [&'static str]) -> Self {
        self.name = name;
        self.extensions = extensions;
        self
    }

    fn builder(&self) -> ::csv::ReaderBuilder {
        let mut b = ::csv::ReaderBuilder::new();
        b.delimiter(self.delimiter)
            .has_headers(self.has_header)
            .trim(if self.trim {
                ::csv::Trim::All
            } else {
                ::csv::Trim::None
            });
        b
    }

    /// Read `path` as values of `T` with these options (see [`read_typed`]).
    pub fn read_typed_with<T: DeserializeOwned>(
        &self,
        path: impl AsRef<Path>,
        compression: Compression,
    ) -> Result<impl Iterator<Item = Result<T>>> {
        let path = path.as_ref();
        let (input, limit, quotes) =
            Limited::open(path, compression, DEFAULT_MAX_RECORD_BYTES, self.delimiter)?;
        let rdr = self.builder().from_reader(input);
        Ok(Typed {
            it: rdr.into_deserialize::<T>(),
            limit,
            quotes,
            max: DEFAULT_MAX_RECORD_BYTES,
            source: source_id(path),
            next: 0,
            done: false,
            _t: PhantomData,
        })
    }
}

impl Format for CsvFormat {
    fn name(&self) -> &str {
        self.name
    }

    fn extensions(&self) -> &[&str] {
        self.extensions
    }

    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        opts.validate()?;
        let compression = opts
            .compression
            .unwrap_or_else(|| Compression::from_path(path));
        let (input, limit, quotes) =
            Limited::open(path, compression, opts.max_record_bytes, self.delimiter)?;
        let mut rdr = self.builder().flexible(true).from_reader(input);
        let source = source_id(path);
        let mut names = Vec::new();
        if self.has_header {
            let header = rdr.byte_headers().map_err(|e| Error::BadFile {
                path: path.to_path_buf(),
                what: format!("reading the header row: {e}"),
            })?;
            for (i, cell) in header.iter().enumerate() {
                let name = std::str::from_utf8(cell).map_err(|e| Error::BadFile {
                    path: path.to_path_buf(),
                    what: format!(
                        "header row: column {i}: invalid UTF-8 at byte {} of the name",
                        e.valid_up_to()
                    ),
                })?;
                // A UTF-8 byte order mark before the first name is not part of it.
                let name = if i == 0 {
                    name.strip_prefix('\u{feff}').unwrap_or(name)
                } else {
                    name
                };
                let name = if name.is_empty() {
                    format!("c{i}")
                } else {
                    name.to_string()
                };
                if let Some(j) = names.iter().position(|n| *n == name) {
                    return Err(Error::BadFile {
                        path: path.to_path_buf(),
                        what: format!("header row: columns {j} and {i} are both named `{name}`"),
                    });
                }
                names.push(name);
            }
        }
        let mut r = CsvReader {
            path: path.to_path_buf(),
            source,
            rdr,
            limit,
            quotes,
            lost: None,
            max: opts.max_record_bytes,
            names,
            named: self.has_header,
            rec: ::csv::ByteRecord::new(),
            next: 0,
            dead: false,
        };
        r.allow_next();
        while r.next < opts.start_record {
            if !r.read_row()? {
                break;
            }
            r.next += 1;
        }
        Ok(Box::new(r))
    }
}

// ---------------------------------------------------------------------------
// Bounded input
// ---------------------------------------------------------------------------

/// A stream that refuses to hand out bytes beyond a moving limit, so that a
/// record longer than `max_record_bytes` cannot make the csv crate's record
/// buffer grow without bound, and that follows the quoting of what it hands
/// out ([`Quotes`]).
struct Limited {
    inner: Box<dyn Read + Send>,
    read: u64,
    limit: Arc<AtomicU64>,
    quotes: Arc<parking_lot::Mutex<Quotes>>,
}

impl Limited {
    fn open(
        path: &Path,
        compression: Compression,
        max: u64,
        delimiter: u8,
    ) -> Result<(Self, Arc<AtomicU64>, Arc<parking_lot::Mutex<Quotes>>)> {
        let limit = Arc::new(AtomicU64::new(max.saturating_add(CSV_BUFFER)));
        let quotes = Arc::new(parking_lot::Mutex::new(Quotes::new(delimiter)));
        Ok((
            Limited {
                inner: open_stream(path, compression)?,
                read: 0,
                limit: limit.clone(),
                quotes: quotes.clone(),
            },
            limit,
            quotes,
        ))
    }
}

impl Read for Limited {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let limit = self.limit.load(Ordering::Relaxed);
        let room = limit.saturating_sub(self.read);
        if room == 0 {
            let q = self.quotes.lock();
            return Err(io::Error::other(match q.open_at() {
                Some(at) => format!(
                    "a row is longer than max_record_bytes: the quoted field that opens at \
                     byte {at} is still open (an unterminated quote?)"
                ),
                None => "a row is longer than max_record_bytes".to_string(),
            }));
        }
        let n = buf.len().min(room.min(usize::MAX as u64) as usize);
        let got = self.inner.read(&mut buf[..n])?;
        let mut q = self.quotes.lock();
        if got == 0 && !buf.is_empty() {
            q.end();
        } else {
            q.feed(self.read, &buf[..got]);
        }
        self.read += got as u64;
        Ok(got)
    }
}

/// Where the quoting of a CSV stream stands, byte by byte as the csv crate
/// parses it (its default dialect: `"` quotes a field that starts with it,
/// `""` inside is one quote, a quote elsewhere is a plain character, CR, LF
/// or CRLF ends a record): so that a quote still open at the end of the
/// stream — which the csv crate silently closes there, making the rest of
/// the file one cell — is found, with where it opened and how many lines it
/// swallowed.
#[derive(Debug)]
pub(crate) struct Quotes {
    delimiter: u8,
    state: QuoteState,
    /// Stream offset of the quote that opened the current quoted field.
    opened: u64,
    /// Line ends inside the current quoted field (CRLF counted once).
    lines: u64,
    /// The last byte seen ends a line.
    at_line_end: bool,
    /// The last byte seen is a CR.
    after_cr: bool,
    /// The stream ended inside a quoted field: (where it opened, the lines
    /// after that line — each a record had the quote been closed).
    unterminated: Option<(u64, u64)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QuoteState {
    /// At the start of a field (or record).
    FieldStart,
    /// In a field that did not start with a quote.
    Unquoted,
    /// In a quoted field.
    Quoted,
    /// Just after a quote in a quoted field: it closes it, unless another
    /// quote follows (an escaped quote).
    QuoteInQuoted,
}

impl Quotes {
    fn new(delimiter: u8) -> Self {
        Quotes {
            delimiter,
            state: QuoteState::FieldStart,
            opened: 0,
            lines: 0,
            at_line_end: true,
            after_cr: false,
            unterminated: None,
        }
    }

    /// Follow `bytes`, which start at stream offset `at`.
    fn feed(&mut self, at: u64, bytes: &[u8]) {
        use QuoteState::*;
        for (i, &b) in bytes.iter().enumerate() {
            let end = b == b'\n' || b == b'\r';
            self.state = match self.state {
                FieldStart | Unquoted if end || b == self.delimiter => FieldStart,
                FieldStart if b == b'"' => {
                    self.opened = at + i as u64;
                    self.lines = 0;
                    Quoted
                }
                FieldStart | Unquoted => Unquoted,
                Quoted if b == b'"' => QuoteInQuoted,
                Quoted => {
                    // CRLF is one line end.
                    if b == b'\r' || (b == b'\n' && !self.after_cr) {
                        self.lines += 1;
                    }
                    Quoted
                }
                QuoteInQuoted if b == b'"' => Quoted,
                QuoteInQuoted if end || b == self.delimiter => FieldStart,
                QuoteInQuoted => Unquoted,
            };
            self.at_line_end = end;
            self.after_cr = b == b'\r';
        }
    }

    /// The stream ended.
    fn end(&mut self) {
        if self.state == QuoteState::Quoted && self.unterminated.is_none() {
            let lines = self.lines - u64::from(self.at_line_end && self.lines > 0);
            self.unterminated = Some((self.opened, lines));
        }
    }

    /// Where the quoted field being read opened, if one is.
    fn open_at(&self) -> Option<u64> {
        matches!(self.state, QuoteState::Quoted | QuoteState::QuoteInQuoted).then_some(self.opened)
    }
}

// ---------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------

struct CsvReader {
    path: PathBuf,
    source: SourceId,
    rdr: ::csv::Reader<Limited>,
    limit: Arc<AtomicU64>,
    quotes: Arc<parking_lot::Mutex<Quotes>>,
    /// After an unterminated quote: the records it swallowed.
    lost: Option<u64>,
    max: u64,
    /// Field names (from the header, or `c0…` from the first row).
    names: Vec<String>,
    /// `names` is settled.
    named: bool,
    rec: ::csv::ByteRecord,
    /// Index of the next record.
    next: u64,
    dead: bool,
}

impl CsvReader {
    /// Let the input run `max_record_bytes` past the current position.
    fn allow_next(&self) {
        let pos = self.rdr.position().byte();
        self.limit.store(
            pos.saturating_add(self.max).saturating_add(CSV_BUFFER),
            Ordering::Relaxed,
        );
    }

    fn location(&self) -> Location {
        let offset = self.rec.position().map(|p| p.byte()).unwrap_or(0);
        Location::new(self.source, self.next, Some(offset))
    }

    /// Read the next row into `self.rec`; false at the end.
    fn read_row(&mut self) -> Result<bool> {
        if self.dead {
            return Err(Error::corrupt(
                Location::new(self.source, self.next, Some(self.rdr.position().byte())),
                "the file cannot be read past an earlier error",
            ));
        }
        match self.rdr.read_byte_record(&mut self.rec) {
            Ok(more) => {
                if more {
                    self.check_quotes()?;
                }
                if more && !self.named {
                    self.names = (0..self.rec.len()).map(|i| format!("c{i}")).collect();
                    self.named = true;
                }
                let end = self.rdr.position().byte();
                if more && end - self.location().offset.unwrap_or(0) > self.max {
                    self.allow_next();
                    let location = self.location();
                    self.next += 1;
                    return Err(Error::corrupt(
                        location,
                        format!("row is longer than max_record_bytes ({})", self.max),
                    ));
                }
                self.allow_next();
                Ok(more)
            }
            Err(e) => {
                self.dead = true;
                let offset = e
                    .position()
                    .map(|p| p.byte())
                    .unwrap_or_else(|| self.rdr.position().byte());
                Err(Error::corrupt(
                    Location::new(self.source, self.next, Some(offset)),
                    format!("reading {}: {e}", self.path.display()),
                ))
            }
        }
    }
}

impl CsvReader {
    /// The record just read must not be where a quote opens that the file
    /// never closes: the csv crate ends such a field (and record) at the
    /// end of the file, so the rest of the file would be one cell. Such a
    /// record is an error at its offset, naming where the quote opens, and
    /// the rest of the file is not read (where the writer meant the quote to
    /// close cannot be known, so no line after it is trusted): the lines it
    /// swallowed are the records lost ([`RecordReader::records_lost`]).
    fn check_quotes(&mut self) -> Result<()> {
        let Some((opened, lines)) = self.quotes.lock().unterminated else {
            return Ok(());
        };
        let location = self.location();
        let end = self.rdr.position().byte();
        if opened < location.offset.unwrap_or(0) || opened >= end {
            return Ok(());
        }
        self.dead = true;
        self.lost = Some(1 + lines);
        Err(Error::corrupt(
            location,
            format!(
                "unterminated quote: the quoted field that opens at byte {opened} runs to \
                 the end of the file, so nothing after it can be read: this record and the \
                 {lines} lines after it are lost"
            ),
        ))
    }
}

/// A cell's value.
fn cell_tensor(cell: &[u8]) -> std::result::Result<Tensor, std::str::Utf8Error> {
    if cell.is_empty() {
        return Ok(Tensor {
            values: Values::I64(Vec::new()),
            shape: vec![0],
        });
    }
    let s = std::str::from_utf8(cell)?;
    let values = if let Ok(v) = s.parse::<i64>() {
        Values::I64(vec![v])
    } else if let Ok(v) = s.parse::<f64>() {
        Values::F64(vec![v])
    } else {
        match s {
            "true" | "True" | "TRUE" => Values::Bool(vec![true]),
            "false" | "False" | "FALSE" => Values::Bool(vec![false]),
            _ => {
                let mut b = BytesList::new();
                b.push(cell);
                Values::Bytes(b)
            }
        }
    };
    Ok(Tensor::scalar(values))
}

impl RecordReader for CsvReader {
    fn next_record(&mut self) -> Result<Option<Record>> {
        if !self.read_row()? {
            return Ok(None);
        }
        let location = self.location();
        self.next += 1;
        if self.rec.len() != self.names.len() {
            return Err(Error::corrupt(
                location,
                format!(
                    "expected {} cells (as in the {}), got {}",
                    self.names.len(),
                    if self.has_header_row() {
                        "header row"
                    } else {
                        "first row"
                    },
                    self.rec.len()
                ),
            ));
        }
        let mut fields = Vec::with_capacity(self.names.len());
        for (i, (name, cell)) in self.names.iter().zip(self.rec.iter()).enumerate() {
            let t = cell_tensor(cell).map_err(|e| {
                Error::corrupt(
                    location.clone(),
                    format!(
                        "field `{name}` (column {i}): invalid UTF-8 at byte {} of the cell",
                        e.valid_up_to()
                    ),
                )
            })?;
            fields.push((name.clone(), t));
        }
        Ok(Some(Record { fields, location }))
    }

    fn next_index(&self) -> u64 {
        self.next
    }

    fn can_continue(&self) -> bool {
        !self.dead
    }

    fn records_lost(&self) -> Option<u64> {
        self.lost
    }
}

impl CsvReader {
    fn has_header_row(&self) -> bool {
        self.rdr.has_headers()
    }
}

// ---------------------------------------------------------------------------
// Typed path
// ---------------------------------------------------------------------------

/// Read a CSV file (comma separated, header row) as values of `T`, by the
/// header's names. Each item is one row's value or an error naming the file,
/// record (0-based, header not counted) and byte offset; after a read error
/// the iterator ends. [`CsvFormat::read_typed_with`] takes other options.
///
/// What it is for: one file's rows as your own serde types, in file order —
/// inspecting data, preprocessing, tests. It has none of the loader's work
/// (no shuffle, batching, passes, sharding, parallel readers, error policy);
/// to train, read the file with the `Loader` and take typed views of its
/// batches ([`Batch::view`](crate::Batch::view)), or each batch's rows as
/// your type ([`Batch::rows`](crate::Batch::rows)).
///
/// ```
/// use feedline::format::{csv, Compression};
/// #[derive(serde::Deserialize, Debug)]
/// struct Row { f1: f32, label: i64 }
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("t.csv");
/// std::fs::write(&path, "f1,label\n0.5,2\n0.25,x\n").unwrap();
/// let rows: Vec<_> = csv::read_typed::<Row>(&path, Compression::None).unwrap().collect();
/// assert_eq!(rows[0].as_ref().unwrap().label, 2);
/// assert!(rows[1].as_ref().unwrap_err().to_string().contains("record 1, offset 15"));
/// ```
pub fn read_typed<T: DeserializeOwned>(
    path: impl AsRef<Path>,
    compression: Compression,
) -> Result<impl Iterator<Item = Result<T>>> {
    CsvFormat::default().read_typed_with(path, compression)
}

struct Typed<T> {
    it: ::csv::DeserializeRecordsIntoIter<Limited, T>,
    limit: Arc<AtomicU64>,
    quotes: Arc<parking_lot::Mutex<Quotes>>,
    max: u64,
    source: SourceId,
    next: u64,
    done: bool,
    _t: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> Iterator for Typed<T> {
    type Item = Result<T>;

    fn next(&mut self) -> Option<Result<T>> {
        if self.done {
            return None;
        }
        let before = self.it.reader().position().byte();
        let item = self.it.next();
        let pos = self.it.reader().position().byte();
        self.limit.store(
            pos.saturating_add(self.max).saturating_add(CSV_BUFFER),
            Ordering::Relaxed,
        );
        if let Some((opened, lines)) = self.quotes.lock().unterminated {
            if item.is_some() && opened >= before && opened < pos {
                self.done = true;
                let location = Location::new(self.source, self.next, Some(before));
                return Some(Err(Error::corrupt(
                    location,
                    format!(
                        "unterminated quote: the quoted field that opens at byte {opened} runs \
                         to the end of the file: this record and the {lines} lines after it \
                         are lost"
                    ),
                )));
            }
        }
        match item {
            None => {
                self.done = true;
                None
            }
            Some(Ok(v)) => {
                self.next += 1;
                Some(Ok(v))
            }
            Some(Err(e)) => {
                let offset = e.position().map(|p| p.byte()).unwrap_or(before);
                let location = Location::new(self.source, self.next, Some(offset));
                if e.is_io_error() {
                    self.done = true;
                } else {
                    self.next += 1;
                }
                Some(Err(Error::corrupt(location, typed_message(&e))))
            }
        }
    }
}

/// The csv error's message without its own position prefix.
fn typed_message(e: &::csv::Error) -> String {
    match e.kind() {
        ::csv::ErrorKind::Deserialize { err, .. } => match err.field() {
            Some(f) => format!("column {f}: {}", err.kind()),
            None => err.kind().to_string(),
        },
        ::csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!("expected {expected_len} cells, got {len}"),
        _ => e.to_string(),
    }
}
