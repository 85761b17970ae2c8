//! Parquet (`.parquet`, `parquet:` prefix), read through arrow-rs's
//! `parquet` crate: one record per row, one field per top-level column.
//!
//! This module owns the Parquet reader: row groups as the unit of reading
//! (opening at `start_record` skips whole row groups by their row counts in
//! the footer, then rows inside the first group kept), the projection of
//! the columns a chunk's schema names (no other column is decoded), and
//! the damaged pages and row groups.
//!
//! Columns become fields as in every format read through arrow-rs (the
//! table is in docs/formats.md): numbers, bool, strings, binary,
//! dictionaries, lists as tensors; any other type (a struct, map,
//! timestamp, decimal…) is an error naming the column and its type, when
//! the schema is inferred or the column is read.
//!
//! feedline's fields have no nulls: a null — a whole value or an element of
//! a list — is a bad record naming the file, the 0-based row (`record N`)
//! and the column, whatever Arrow's `nullable` flag says (pyarrow marks
//! every column nullable). The reader goes on with the next row.
//!
//! Page checksums (CRC-32 in the page header, as pyarrow writes with
//! `write_page_checksum=True`) are verified when present. A page that does
//! not match its checksum, or does not decompress, is one bad record for
//! the rows of its row group not read yet, naming the file, the row group,
//! its rows and the column; reading goes on with the next row group
//! ([`RecordReader::records_skipped`] says how many rows were lost). Data
//! that cannot be decoded otherwise ends the file (`can_continue` is
//! false).
//!
//! ```
//! use feedline::format::{Format, OpenOptions, parquet::ParquetFormat};
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("t.parquet");
//! # feedline::format::parquet::write_example(&path).unwrap();
//! let mut r = ParquetFormat.open(&path, &OpenOptions::default()).unwrap();
//! let rec = r.next_record().unwrap().unwrap();
//! assert_eq!(rec.to_json(), serde_json::json!({"id": [0], "x": [0.5, 1.5]}));
//! assert_eq!(r.len_hint(), Some(3));
//! ```

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use parquet::arrow::arrow_reader::{
    ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder, RowSelection, RowSelector,
};
use parquet::arrow::ProjectionMask;

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

/// Rows decoded at a time (an Arrow record batch).
const BATCH_ROWS: usize = 1024;

/// The Parquet format.
#[derive(Clone, Copy, Debug, Default)]
pub struct ParquetFormat;

impl Format for ParquetFormat {
    fn name(&self) -> &str {
        "parquet"
    }

    fn extensions(&self) -> &[&str] {
        &["parquet", "pq"]
    }

    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        opts.validate()?;
        match opts.compression {
            None | Some(Compression::None) => {}
            Some(c) => {
                return Err(Error::BadFile {
                    path: path.to_path_buf(),
                    what: format!(
                        "a Parquet file is compressed inside (per column chunk); \
                         stream compression {c:?} is not supported"
                    ),
                })
            }
        }
        let builder = open_builder(path)?;
        let row_groups: Vec<u64> = builder
            .metadata()
            .row_groups()
            .iter()
            .map(|g| g.num_rows().max(0) as u64)
            .collect();
        let total = row_groups.iter().sum::<u64>();
        Ok(Box::new(ParquetReader {
            path: path.to_path_buf(),
            source: source_id(path),
            row_groups,
            total,
            next: opts.start_record.min(total),
            projection: None,
            batches: None,
            batch: None,
            dead: false,
            bad_ahead: None,
            skipped: 1,
        }))
    }

    fn infer_schema(&self, path: &Path) -> Option<Result<Schema>> {
        Some(schema_of(path))
    }
}

/// Where a Parquet file's bytes come from: a local file, or a remote
/// object read by ranged GETs (the footer, then each column chunk the
/// projection needs; see [`crate::remote`]).
enum Source {
    Local(File),
    #[cfg(feature = "remote")]
    Remote {
        url: String,
        /// The version read (every range is pinned to it).
        info: crate::remote::ObjectInfo,
    },
}

impl parquet::file::reader::Length for Source {
    fn len(&self) -> u64 {
        match self {
            Source::Local(f) => parquet::file::reader::Length::len(f),
            #[cfg(feature = "remote")]
            Source::Remote { info, .. } => info.size,
        }
    }
}

impl parquet::file::reader::ChunkReader for Source {
    type T = Box<dyn std::io::Read + Send>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        match self {
            Source::Local(f) => Ok(Box::new(f.get_read(start)?)),
            #[cfg(feature = "remote")]
            Source::Remote { url, info } => crate::remote::RemoteObject::open_at(url, info, start)
                .map(|r| Box::new(r) as Self::T)
                .map_err(|e| parquet::errors::ParquetError::External(Box::new(e))),
        }
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        match self {
            Source::Local(f) => f.get_bytes(start, length),
            #[cfg(feature = "remote")]
            Source::Remote { url, info } => {
                crate::remote::read_range(url, info, start, length as u64)
                    .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
            }
        }
    }
}

fn open_builder(path: &Path) -> Result<ParquetRecordBatchReaderBuilder<Source>> {
    let file = open_source(path)?;
    let bad = |what: String| Error::BadFile {
        path: path.to_path_buf(),
        what: format!("not a readable Parquet file: {what}"),
    };
    contain_panic(|| ParquetRecordBatchReaderBuilder::try_new(file))
        .map_err(bad)?
        .map_err(|e| bad(e.to_string()))
}

/// The bytes of the Parquet file at `path` (a local file or a URL).
fn open_source(path: &Path) -> Result<Source> {
    Ok(match crate::input::remote_url(path) {
        #[cfg(feature = "remote")]
        Some(url) => {
            let info = crate::remote::head(url).map_err(|e| Error::io(path, e.into_io()))?;
            Source::Remote {
                url: url.to_string(),
                info,
            }
        }
        #[cfg(not(feature = "remote"))]
        Some(url) => return Err(Error::not_compiled_in(url, crate::Feature::Remote)),
        None => Source::Local(File::open(path).map_err(|e| Error::io(path, e))?),
    })
}

/// The first page of row groups `groups` (in order; only the root columns
/// in `projection`, all if `None`) that cannot be read: its row group,
/// column and what is wrong (a page CRC that does not match, a page that
/// does not decompress…). `None` if every page reads.
fn first_bad_page(
    path: &Path,
    groups: std::ops::Range<usize>,
    projection: Option<&[String]>,
) -> Option<(usize, String, String)> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let found = contain_panic(|| {
        let reader = SerializedFileReader::new(open_source(path).ok()?).ok()?;
        for g in groups {
            let group = reader.get_row_group(g).ok()?;
            let meta = reader.metadata().row_group(g);
            for (i, col) in meta.columns().iter().enumerate() {
                let name = col.column_path().parts()[0].clone();
                if projection.is_some_and(|p| !p.contains(&name)) {
                    continue;
                }
                let column = col.column_path().string();
                let mut pages = match group.get_column_page_reader(i) {
                    Ok(p) => p,
                    Err(e) => return Some((g, column, e.to_string())),
                };
                loop {
                    match pages.get_next_page() {
                        Ok(Some(_)) => {}
                        Ok(None) => break,
                        Err(e) => return Some((g, column, e.to_string())),
                    }
                }
            }
        }
        None
    });
    found.unwrap_or_else(|what| {
        log::debug!("{}: looking for the bad page: {what}", path.display());
        None
    })
}

/// The schema a Parquet file's columns imply ([`schema_of_arrow`]).
fn schema_of(path: &Path) -> Result<Schema> {
    let builder = open_builder(path)?;
    schema_of_arrow(path, builder.schema().fields())
}

/// Reads one Parquet file's rows in order.
struct ParquetReader {
    path: PathBuf,
    source: SourceId,
    /// Rows of each row group, in file order.
    row_groups: Vec<u64>,
    total: u64,
    /// Index of the next row.
    next: u64,
    /// The root columns decoded (`None`: all), for the open batch reader.
    projection: Option<Vec<String>>,
    /// The batch reader, positioned at the end of `batch`.
    batches: Option<ParquetRecordBatchReader>,
    /// The current batch (columns, dtypes, names) and the next row in it.
    batch: Option<(OpenBatch, usize)>,
    /// A page could not be decoded: nothing more can be read.
    dead: bool,
    /// A row group found unreadable (a page CRC that does not match, a
    /// page that does not decompress) at or after `next`: the batch reader
    /// stops before it, and reaching it is one error for its rows.
    bad_ahead: Option<BadGroup>,
    /// Records the last error skipped (one, or a bad row group's rest).
    skipped: u64,
}

/// A row group with an unreadable page.
#[derive(Clone, Debug, PartialEq)]
struct BadGroup {
    group: usize,
    /// Its rows.
    rows: std::ops::Range<u64>,
    /// The column (its path) whose page is bad.
    column: String,
    what: String,
}

impl ParquetReader {
    fn location(&self, row: u64) -> Location {
        Location::new(self.source, row, None)
    }

    /// A batch reader from row `self.next` on, decoding the root columns
    /// named in `projection` (all if `None`): whole row groups before it are
    /// skipped by their footer counts, then rows in the first group kept.
    fn start(&mut self, projection: Option<Vec<String>>) -> Result<()> {
        let builder = open_builder(&self.path)?;
        let file_schema = builder.schema().clone();
        let mut roots = Vec::new();
        for (i, f) in file_schema.fields().iter().enumerate() {
            let wanted = projection
                .as_ref()
                .is_none_or(|p| p.iter().any(|n| n == f.name()));
            if wanted {
                layout(f.data_type()).map_err(|t| unsupported(&self.path, f.name(), &t))?;
                roots.push(i);
            }
        }
        let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
        let mut first_row = 0u64;
        let mut groups = Vec::new();
        let mut skip_in_first = 0u64;
        // Up to a bad row group (reaching it is an error of its own).
        let before = self.bad_ahead.as_ref().map_or(usize::MAX, |b| b.group);
        for (g, &rows) in self.row_groups.iter().enumerate().take(before) {
            if first_row + rows > self.next {
                if groups.is_empty() {
                    skip_in_first = self.next - first_row;
                }
                groups.push(g);
            }
            first_row += rows;
        }
        let mut builder = builder
            .with_projection(mask)
            .with_row_groups(groups.clone())
            .with_batch_size(BATCH_ROWS);
        if skip_in_first > 0 {
            let kept: u64 = groups.iter().map(|&g| self.row_groups[g]).sum();
            builder = builder.with_row_selection(RowSelection::from(vec![
                RowSelector::skip(skip_in_first as usize),
                RowSelector::select((kept - skip_in_first) as usize),
            ]));
        }
        let reader = builder.build().map_err(|e| Error::BadFile {
            path: self.path.clone(),
            what: format!("cannot read the Parquet file: {e}"),
        })?;
        self.batches = Some(reader);
        self.batch = None;
        self.projection = projection;
        Ok(())
    }

    /// Make sure the batch reader decodes exactly `projection`.
    fn project(&mut self, projection: Option<Vec<String>>) -> Result<()> {
        if self.batches.is_none() || self.projection != projection {
            self.start(projection)?;
        }
        Ok(())
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
        if self
            .bad_ahead
            .as_ref()
            .is_some_and(|b| self.next >= b.rows.start)
        {
            return Err(self.skip_bad_group());
        }
        if self.next >= self.total {
            return Ok(None);
        }
        if self.batch.as_ref().is_none_or(|(b, i)| *i >= b.rows) {
            let next = match self.batches.as_mut() {
                Some(r) => contain_panic(|| r.next())
                    .unwrap_or_else(|what| Some(Err(arrow_schema::ArrowError::ParquetError(what)))),
                None => None,
            };
            match next {
                None => {
                    self.dead = true;
                    return Err(Error::corrupt(
                        self.location(self.next),
                        format!(
                            "the row groups ended at row {} but the footer counts {} rows",
                            self.next, self.total
                        ),
                    ));
                }
                Some(Err(e)) => {
                    // A bad page costs its row group, not the rest of the
                    // file: find it, read up to it, skip it.
                    if let Some(bad) = self.find_bad_group() {
                        if self.bad_ahead.as_ref() != Some(&bad) {
                            self.bad_ahead = Some(bad);
                            self.start(self.projection.clone())?;
                            return self.next_row();
                        }
                    }
                    self.dead = true;
                    return Err(Error::corrupt(
                        self.location(self.next),
                        format!("cannot decode the Parquet data: {e}"),
                    ));
                }
                Some(Ok(b)) => {
                    let open = self.open_batch(b)?;
                    self.batch = Some((open, 0));
                }
            }
        }
        let row = self.next;
        let (batch, i) = self.batch.as_mut().expect("a batch is open");
        let at = *i;
        *i += 1;
        self.next += 1;
        batch.row(at, self.source, row).map(Some)
    }

    /// The row group of row `row`, and the first row of the next.
    fn group_of(&self, row: u64) -> (usize, u64) {
        let mut end = 0;
        for (g, &rows) in self.row_groups.iter().enumerate() {
            end += rows;
            if row < end {
                return (g, end);
            }
        }
        (self.row_groups.len(), end)
    }

    /// The first row group with an unreadable page among those the batch
    /// that failed could span (from `next` on, `BATCH_ROWS` rows).
    fn find_bad_group(&self) -> Option<BadGroup> {
        let (first, _) = self.group_of(self.next);
        let last_row = (self.next + BATCH_ROWS as u64).min(self.total).max(1) - 1;
        let (last, _) = self.group_of(last_row);
        let (group, column, what) = first_bad_page(
            &self.path,
            first..(last + 1).min(self.row_groups.len()),
            self.projection.as_deref(),
        )?;
        let start: u64 = self.row_groups[..group].iter().sum();
        Some(BadGroup {
            group,
            rows: start..start + self.row_groups[group],
            column,
            what,
        })
    }

    /// At the bad row group: the error for its rows (those from `next` on),
    /// reading to go on after it.
    fn skip_bad_group(&mut self) -> Error {
        let b = self.bad_ahead.take().expect("a bad row group ahead");
        let from = self.next;
        self.next = b.rows.end;
        self.skipped = (b.rows.end - from).max(1);
        self.batches = None;
        self.batch = None;
        Error::corrupt(
            self.location(from),
            format!(
                "row group {} (rows {}..{}), column `{}`: {}: rows {from}..{} cannot be read \
                 (reading goes on at row {})",
                b.group, b.rows.start, b.rows.end, b.column, b.what, b.rows.end, b.rows.end
            ),
        )
    }

    fn open_batch(&mut self, b: RecordBatch) -> Result<OpenBatch> {
        OpenBatch::new(&self.path, &b, self.location(self.next)).inspect_err(|e| {
            if matches!(e, Error::Corrupt { .. }) {
                self.dead = true;
            }
        })
    }
}

impl ProjectedRows for ParquetReader {
    fn project(&mut self, names: Option<Vec<String>>) -> Result<()> {
        ParquetReader::project(self, names)
    }

    fn next_row(&mut self) -> Result<Option<Record>> {
        ParquetReader::next_row(self)
    }
}

impl RecordReader for ParquetReader {
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

/// Write the small Parquet file of the module example: columns `id`
/// (int64) and `x` (list of float64), 3 rows in 2 row groups.
#[doc(hidden)]
pub fn write_example(path: &Path) -> Result<()> {
    use arrow_array::builder::{Float64Builder, ListBuilder};
    use arrow_array::Int64Array;
    let ids: ArrayRef = Arc::new(Int64Array::from(vec![0, 1, 2]));
    let mut xs = ListBuilder::new(Float64Builder::new());
    for i in 0..3 {
        xs.values().append_slice(&[i as f64 + 0.5, i as f64 + 1.5]);
        xs.append(true);
    }
    let xs: ArrayRef = Arc::new(xs.finish());
    let batch =
        RecordBatch::try_from_iter([("id", ids), ("x", xs)]).map_err(|e| Error::BadFile {
            path: path.to_path_buf(),
            what: e.to_string(),
        })?;
    let file = File::create(path).map_err(|e| Error::io(path, e))?;
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(2))
        .build();
    let bad = |e: parquet::errors::ParquetError| Error::BadFile {
        path: path.to_path_buf(),
        what: e.to_string(),
    };
    let mut w =
        parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props)).map_err(bad)?;
    w.write(&batch).map_err(bad)?;
    w.close().map_err(bad)?;
    Ok(())
}
