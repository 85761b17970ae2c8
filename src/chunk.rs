//! The columnar [`Chunk`] of many instances that the hot path moves between
//! stages, its [`Column`]s, and the [`RowRef`] by which the shuffle buffer
//! and batching hold one row of a shared chunk.
//!
//! A [`Chunk`] stores each field of many instances in one vector, so decoders
//! write straight into it and collation copies each instance's values once.
//! Large `u8` / `bytes` rows read from a regular file are not even copied
//! into the chunk: they stay in the file ([`Column::file_row`], see
//! [`crate::format`]'s readers) and are read from it straight into the
//! batch, and cost (in [`Chunk::payload_bytes`]) what a copy would. Such a
//! row may carry its record's payload CRC, checked when its bytes are
//! copied out rather than when the record was read (see
//! [`OpenOptions::defer_checksums`](crate::format::OpenOptions::defer_checksums)):
//! every way out of the chunk ([`Column::file_row`], [`Chunk::row`],
//! [`Chunk::extend_rows`], collation) checks it first.
//!
//! What a chunk holds in memory is [`Chunk::memory_bytes`]: the capacity of
//! its vectors, not their length — a chunk made for 1,024 rows that holds
//! one costs what was allocated, until [`Chunk::shrink_to_fit`].

use std::sync::Arc;

use crate::backing::{
    Backing, DueCheck, FileRow, FileRows, FILE_ROW_MIN_BYTES, MAX_FILES_PER_COLUMN,
};
use crate::error::Result;
use crate::provenance::{Origin, SourceId};
use crate::record::{conform_field, field_error, Instance, Record};
use crate::schema::{check_elements, DType, Schema};
use crate::values::{BytesList, Values};

/// A reference to one instance of a shared [`Chunk`]: what the shuffle buffer
/// holds and hands to batching; the chunk is freed when its last row is used.
#[derive(Clone, Debug)]
pub struct RowRef {
    /// The chunk.
    pub chunk: Arc<Chunk>,
    /// The row within it.
    pub index: usize,
}

impl RowRef {
    /// Row `index` of `chunk`.
    pub fn new(chunk: Arc<Chunk>, index: usize) -> Self {
        RowRef { chunk, index }
    }

    /// The instance's origin.
    pub fn origin(&self) -> Origin {
        self.chunk.origins()[self.index]
    }
}

/// One field of a [`Chunk`]: the values of all its instances and where each ends.
///
/// A `u8` or `bytes` column read from a regular file may leave the bytes of
/// its large rows in the file instead of holding a copy
/// ([`file_row`](Self::file_row)); `values` then holds only the other rows'
/// elements, at [`owned_range`](Self::owned_range). [`Chunk::row`] and
/// collation see both kinds alike.
#[derive(Clone, Debug)]
pub struct Column {
    /// The elements of all instances that do not refer to their file (all
    /// of them, unless [`has_file_rows`](Self::has_file_rows)), concatenated.
    pub values: Values,
    /// `ends[i]` is the element index where instance `i` ends, counting the
    /// elements of every instance, in the file or not.
    pub ends: Vec<usize>,
    files: Option<Box<FileRows>>,
    /// Elements to reserve in `values` on the first write through
    /// [`Chunk::values_mut`] (a column of file rows never needs them).
    reserve: usize,
}

impl PartialEq for Column {
    /// Same instances, element for element (wherever they are held).
    fn eq(&self, other: &Column) -> bool {
        if self.files.is_none() && other.files.is_none() {
            return self.values == other.values && self.ends == other.ends;
        }
        self.ends == other.ends
            && self.values.dtype() == other.values.dtype()
            && (0..self.ends.len()).all(|i| match (self.row_values(i), other.row_values(i)) {
                (Ok(a), Ok(b)) => a == b,
                _ => false,
            })
    }
}

impl Column {
    fn with_capacity(dtype: DType, elements: usize, rows: usize) -> Self {
        Column {
            values: Values::with_capacity(dtype, elements),
            ends: Vec::with_capacity(rows),
            files: None,
            reserve: 0,
        }
    }

    /// Element range of instance `i` (in the count of all instances' elements:
    /// its length is the instance's element count).
    #[inline]
    pub fn range(&self, i: usize) -> std::ops::Range<usize> {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        start..self.ends[i]
    }

    /// True if some rows are left in their file instead of being in
    /// [`values`](Self::values).
    #[inline]
    pub fn has_file_rows(&self) -> bool {
        self.files.is_some()
    }

    /// The bytes of instance `i` if it is left in its file — the elements
    /// of a `u8` row, the one byte string of a `bytes` row — read from the
    /// file (`Ok(None)`: its elements are `values[owned_range(i)]`).
    ///
    /// # Errors
    ///
    /// The file cannot be read there any more (it was shortened):
    /// [`Error::Io`](crate::Error::Io) naming it. The record's payload CRC,
    /// if it was left to be checked here (see
    /// [`OpenOptions::defer_checksums`](crate::format::OpenOptions::defer_checksums)),
    /// does not match: [`Error::Corrupt`](crate::Error::Corrupt) naming the
    /// file, record and offset.
    pub fn file_row(&self, i: usize) -> Result<Option<Vec<u8>>> {
        self.file_row_unchecked(i).map(|r| r.to_vec()).transpose()
    }

    /// Instance `i`'s place in its file and the check still due on it, for
    /// a caller that copies it and checks the copy.
    #[inline]
    pub(crate) fn file_row_unchecked(&self, i: usize) -> Option<FileRow<'_>> {
        self.files.as_deref()?.row(i)
    }

    /// Elements a span of `len` bytes in the file stands for.
    fn span_elements(&self, len: usize) -> usize {
        match self.values {
            Values::Bytes(_) => 1,
            _ => len,
        }
    }

    /// Where instance `i`'s elements are in [`values`](Self::values) (empty for
    /// a row left in its file; the same as [`range`](Self::range) when the
    /// column has no such rows).
    #[inline]
    pub fn owned_range(&self, i: usize) -> std::ops::Range<usize> {
        match self.files.as_deref() {
            None => self.range(i),
            Some(m) => {
                let end = m.owned_end(i);
                if m.is_file_row(i) {
                    return end..end;
                }
                let start = if i == 0 { 0 } else { m.owned_end(i - 1) };
                start..end
            }
        }
    }

    /// Instance `i`'s elements as owned values (a row left in its file read
    /// and its due check made).
    pub(crate) fn row_values(&self, i: usize) -> Result<Values> {
        if let Some(r) = self.file_row_unchecked(i) {
            let b = r.to_vec()?;
            return Ok(match self.values {
                Values::Bytes(_) => Values::Bytes(BytesList::from_iter([&b[..]])),
                _ => Values::U8(b),
            });
        }
        let r = self.owned_range(i);
        let mut v = Values::with_capacity(self.values.dtype(), r.len());
        v.extend_range(&self.values, r.start, r.end);
        Ok(v)
    }

    /// Elements of the committed rows in `values`.
    #[inline(always)]
    fn committed(&self) -> usize {
        match self.files.as_deref() {
            None => self.ends.last().copied().unwrap_or(0),
            Some(m) => m.owned_len(),
        }
    }

    /// Elements written for the uncommitted row.
    #[inline(always)]
    fn pending(&self) -> usize {
        match self.files.as_deref() {
            None => self.values.len() - self.ends.last().copied().unwrap_or(0),
            Some(m) => self.pending_with_files(m),
        }
    }

    #[cold]
    fn pending_with_files(&self, m: &FileRows) -> usize {
        self.values.len() - m.owned_len()
            + m.pending().map_or(0, |(_, len)| self.span_elements(len))
    }

    /// Close the row being written (its count already checked).
    #[inline(always)]
    fn commit(&mut self) {
        if self.files.is_none() {
            // No file rows: logical and physical ends are the same.
            self.ends.push(self.values.len());
            return;
        }
        self.commit_with(None);
    }

    /// Commit the row; `check` goes with its span in the file (the one set
    /// with [`Chunk::defer_check`] if `None`).
    #[cold]
    fn commit_with(&mut self, check: Option<DueCheck>) {
        let end = self.ends.last().copied().unwrap_or(0) + self.pending();
        self.ends.push(end);
        let owned_end = self.values.len();
        if let Some(m) = self.files.as_deref_mut() {
            m.commit(owned_end, check);
        }
    }

    /// Drop what was written for the uncommitted row.
    #[inline(always)]
    fn rollback(&mut self) {
        let n = self.committed();
        if self.values.len() != n {
            self.values.truncate(n);
        }
        if let Some(m) = self.files.as_deref_mut() {
            m.rollback();
        }
    }

    /// The owned values, for writing the uncommitted row (the deferred
    /// reservation made). Writing owned values replaces a span in the file
    /// set for the row: a row's field is either one span or owned values.
    #[inline(always)]
    fn owned_mut(&mut self) -> &mut Values {
        if self.files.is_none() && self.reserve == 0 {
            return &mut self.values;
        }
        self.owned_mut_slow()
    }

    #[cold]
    fn owned_mut_slow(&mut self) -> &mut Values {
        if let Some(m) = self.files.as_deref_mut() {
            m.rollback();
        }
        if self.reserve > 0 {
            let n = std::mem::take(&mut self.reserve);
            if self.values.is_empty() {
                self.values = Values::with_capacity(self.values.dtype(), n);
            }
        }
        &mut self.values
    }

    /// A new column of rows `keep` of this one (in that order): rows left in
    /// the file stay so, with their due checks.
    fn select(&self, keep: &[usize]) -> Column {
        let mut c = Column::with_capacity(self.values.dtype(), 0, keep.len());
        for &i in keep {
            match self.files.as_deref().and_then(|m| m.span(i)) {
                Some((backing, off, len, check)) => {
                    // A selection refers to no more files than its source.
                    let kept = c.set_pending_file(backing, off, len);
                    debug_assert!(kept, "a selected row's file");
                    c.commit_with(check);
                }
                None => {
                    let r = self.owned_range(i);
                    c.values.extend_range(&self.values, r.start, r.end);
                    c.commit();
                }
            }
        }
        c
    }

    /// Append row `i` of `other` (same dtype) as a committed row: a row left
    /// in its file stays so (with its due check) when both columns refer to
    /// the same file; otherwise it is read and checked now.
    fn push_row_of(&mut self, other: &Column, i: usize) -> Result<()> {
        self.rollback();
        if let Some(om) = other.files.as_deref() {
            if let Some((backing, off, len, check)) = om.span(i) {
                if self.set_pending_file(backing, off, len) {
                    self.commit_with(check);
                    return Ok(());
                }
            }
        }
        let copy = match other.file_row_unchecked(i) {
            Some(r) => Some(r.to_vec()?),
            None => None,
        };
        let v = self.owned_mut();
        match copy {
            Some(b) => match v {
                Values::U8(v) => v.extend_from_slice(&b),
                Values::Bytes(v) => v.push(&b),
                other => unreachable!("file rows in a {} column", other.dtype()),
            },
            None => {
                let r = other.owned_range(i);
                v.extend_range(&other.values, r.start, r.end);
            }
        }
        self.commit();
        Ok(())
    }

    /// Make the uncommitted row (which has no owned elements) refer to
    /// `len` bytes of `backing` at `off` (a `u8` row's elements, or a
    /// `bytes` row's one byte string). False (nothing changed) if the column
    /// is of another dtype, the row has owned elements, or the column's rows
    /// already refer to as many other files as a column may
    /// ([`MAX_FILES_PER_COLUMN`](crate::backing::MAX_FILES_PER_COLUMN)).
    fn set_pending_file(&mut self, backing: &Backing, off: usize, len: usize) -> bool {
        if !matches!(self.values.dtype(), DType::U8 | DType::Bytes)
            || self.values.len() != self.committed()
        {
            return false;
        }
        match self.files.as_deref_mut() {
            Some(m) => m.set_pending(backing, off, len),
            None => {
                let mut m = FileRows::new(backing.clone(), &self.ends);
                let kept = m.set_pending(backing, off, len);
                debug_assert!(kept, "a column's first file");
                self.files = Some(Box::new(m));
                true
            }
        }
    }

    /// Bytes of the rows left in the file (the uncommitted one included).
    #[inline(always)]
    fn file_bytes(&self) -> usize {
        self.files.as_deref().map_or(0, FileRows::span_bytes)
    }

    /// Keep the first `rows` committed rows (the uncommitted one dropped).
    fn truncate_rows(&mut self, rows: usize) {
        self.rollback();
        if rows >= self.ends.len() {
            return;
        }
        self.ends.truncate(rows);
        let owned = match self.files.as_deref_mut() {
            None => self.ends.last().copied().unwrap_or(0),
            Some(m) => {
                m.truncate(rows);
                m.owned_len()
            }
        };
        self.values.truncate(owned);
    }

    /// Heap memory held: the capacity of every vector (not their length),
    /// and the bookkeeping of the rows left in the file.
    fn memory_bytes(&self) -> usize {
        self.values.capacity_bytes()
            + self.ends.capacity() * std::mem::size_of::<usize>()
            + self.files.as_deref().map_or(0, FileRows::memory_bytes)
    }
}

/// Many instances of one schema stored column by column: the unit that
/// readers send on, and that the shuffle buffer and collation take rows from.
#[derive(Clone, Debug, PartialEq)]
pub struct Chunk {
    schema: Schema,
    columns: Vec<Column>,
    origins: Vec<Origin>,
}

impl Chunk {
    /// An empty chunk.
    pub fn new(schema: &Schema) -> Self {
        Self::with_capacity(schema, 0)
    }

    /// An empty chunk with room for `rows` instances.
    pub fn with_capacity(schema: &Schema, rows: usize) -> Self {
        let columns = schema
            .fields()
            .iter()
            .map(|f| Column::with_capacity(f.dtype, f.fixed_elements().unwrap_or(1) * rows, rows))
            .collect();
        Chunk {
            schema: schema.clone(),
            columns,
            origins: Vec::with_capacity(rows),
        }
    }

    /// An empty chunk with room for what a reader puts in one: `max_rows`
    /// instances or `max_bytes` of payload, whichever comes first (a
    /// 150 KB-record schema gets room for a few rows, not `max_rows`). The
    /// room of `u8` fields whose rows are large enough to stay in their
    /// file is reserved on their first write only. This only reserves: a
    /// budget of 0 reserves nothing ([`RecordReader::read_chunk`](crate::format::RecordReader::read_chunk)
    /// refuses a budget of 0 with an error).
    pub fn with_budget(schema: &Schema, max_rows: usize, max_bytes: usize) -> Self {
        let rows = budget_rows(schema, max_rows, max_bytes);
        let columns = schema
            .fields()
            .iter()
            .map(|f| {
                let n = f.fixed_elements().unwrap_or(1) * rows;
                if f.dtype == DType::U8 && f.fixed_elements().unwrap_or(0) >= FILE_ROW_MIN_BYTES {
                    let mut c = Column::with_capacity(f.dtype, 0, rows);
                    c.reserve = n;
                    c
                } else {
                    Column::with_capacity(f.dtype, n, rows)
                }
            })
            .collect();
        Chunk {
            schema: schema.clone(),
            columns,
            origins: Vec::with_capacity(rows),
        }
    }

    /// The most memory ([`memory_bytes`](Self::memory_bytes)) a chunk of
    /// `schema` can hold when made by [`with_budget`](Self::with_budget)`(max_rows,
    /// max_bytes)` and filled by [`RecordReader::read_chunk`](crate::format::RecordReader::read_chunk)
    /// with the same budget, from records of at most `record_bytes` of
    /// payload each: what [`with_budget`](Self::with_budget) reserves (or
    /// twice `max_rows` rows, if it reserved fewer and the vectors double),
    /// twice the variable-size payload a chunk can take (`max_bytes` and one
    /// record more; vectors double as they grow), and per row its end in
    /// every column, its origin and, for `u8`/`bytes` fields, the
    /// bookkeeping of a row left in its file. Byte strings are counted as
    /// at least one byte each. This is what a loader states as the memory
    /// of a chunk in flight; a chunk in a [`ShuffleBuffer`](crate::shuffle::ShuffleBuffer)
    /// is counted by what it really holds.
    pub fn memory_bound(
        schema: &Schema,
        max_rows: usize,
        max_bytes: usize,
        record_bytes: usize,
    ) -> usize {
        let reserved = budget_rows(schema, max_rows, max_bytes);
        let rows = if max_rows <= reserved {
            reserved
        } else {
            max_rows.saturating_mul(2)
        };
        let fields = schema.fields();
        let fixed: usize = fields
            .iter()
            .map(|f| f.fixed_elements().unwrap_or(0) * f.dtype.size())
            .sum();
        let variable = fields
            .iter()
            .any(|f| f.is_ragged() || f.dtype == DType::Bytes);
        let payload = max_bytes.saturating_add(record_bytes).saturating_mul(2);
        // A byte string's end is 8 bytes, for a string of at least 1 byte.
        let strings = if fields.iter().any(|f| f.dtype == DType::Bytes) {
            payload.saturating_mul(8)
        } else {
            0
        };
        let files = fields
            .iter()
            .filter(|f| matches!(f.dtype, DType::U8 | DType::Bytes))
            .count();
        let per_row = fields.len() * std::mem::size_of::<usize>()
            + std::mem::size_of::<Origin>()
            + files * FileRows::ROW_BYTES;
        std::mem::size_of::<Chunk>()
            + 2 * std::mem::size_of::<usize>()
            + fields.len() * std::mem::size_of::<Column>()
            + files * FileRows::FIXED_BYTES
            + files * rows.min(MAX_FILES_PER_COLUMN).saturating_sub(1) * FileRows::FILE_BYTES
            + rows.saturating_mul(fixed.saturating_add(per_row))
            + if variable {
                payload.saturating_add(strings)
            } else {
                0
            }
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Number of instances.
    pub fn len(&self) -> usize {
        self.origins.len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.origins.is_empty()
    }

    /// The columns, in schema order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// Origins of the instances.
    pub fn origins(&self) -> &[Origin] {
        &self.origins
    }

    /// Instances the chunk has room for without allocating.
    pub fn capacity(&self) -> usize {
        self.origins.capacity()
    }

    /// Payload bytes: the instances' elements (for byte strings, their
    /// bytes), what a batch of them holds. A row left in its file counts its
    /// bytes as if it held a copy. This is what a reader's chunk budget
    /// counts; what the chunk costs in memory is
    /// [`memory_bytes`](Self::memory_bytes).
    #[inline]
    pub fn payload_bytes(&self) -> usize {
        self.columns
            .iter()
            .map(|c| c.values.payload_bytes() + c.file_bytes())
            .sum()
    }

    /// Heap memory this chunk holds, as allocated: the chunk itself (as an
    /// `Arc` would hold it), and the capacity — not the length — of every
    /// vector of its columns and origins, so a chunk made for many rows
    /// that holds few costs what was allocated (see
    /// [`shrink_to_fit`](Self::shrink_to_fit)). Rows left in their file
    /// cost their bookkeeping only (their bytes are not in memory). The
    /// schema, shared by every chunk, is not counted.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Chunk>()
            + 2 * std::mem::size_of::<usize>()
            + self.columns.capacity() * std::mem::size_of::<Column>()
            + self.columns.iter().map(Column::memory_bytes).sum::<usize>()
            + self.origins.capacity() * std::mem::size_of::<Origin>()
    }

    /// Give back the capacity the rows do not use, so that
    /// [`memory_bytes`](Self::memory_bytes) is what the rows need: for a
    /// chunk that ended short of its budget, such as the only chunk of a
    /// small file. The rows are copied into allocations of their size and
    /// the old ones freed whole — shrinking a large block in place would
    /// leave the rest of it as a hole just too small for the next chunk's
    /// block, and many small files would grow the heap by a chunk each.
    pub fn shrink_to_fit(&mut self) {
        // A clone's vectors are allocated at their length.
        let mut compact = self.clone();
        for c in &mut compact.columns {
            c.reserve = 0;
        }
        *self = compact;
    }

    /// Remove all instances, keeping the allocations (rows left in their
    /// file are let go).
    pub fn clear(&mut self) {
        for c in &mut self.columns {
            c.values.clear();
            c.ends.clear();
            c.files = None;
        }
        self.origins.clear();
    }

    /// Append an instance of the same schema.
    pub fn push_instance(&mut self, inst: &Instance) {
        for (c, v) in self.columns.iter_mut().zip(inst.values()) {
            c.rollback();
            c.owned_mut().extend_range(v, 0, v.len());
            c.commit();
        }
        self.origins.push(inst.origin());
    }

    /// Conform `record` to the schema and append it; on error nothing is appended.
    pub fn push_record(&mut self, record: &Record) -> Result<()> {
        for i in 0..self.columns.len() {
            let f = &self.schema.fields()[i];
            if let Err(e) = conform_field(record, f, self.columns[i].owned_mut()) {
                self.rollback_row();
                return Err(e);
            }
        }
        self.commit_row(Origin::new(record.location.source, record.location.record))
            .map_err(|(i, actual)| {
                field_error(record.location.clone(), &self.schema.fields()[i], actual)
            })
    }

    /// Mutable access to column `i`'s values, for decoders that write the
    /// next row straight into the chunk; finish with [`commit_row`](Self::commit_row)
    /// or undo with [`rollback_row`](Self::rollback_row).
    #[inline]
    pub fn values_mut(&mut self, i: usize) -> &mut Values {
        self.columns[i].owned_mut()
    }

    /// Elements of column `i` in its values before the uncommitted row.
    #[inline]
    pub(crate) fn committed_len(&self, i: usize) -> usize {
        self.columns[i].committed()
    }

    /// Drop what was written for the uncommitted row in column `i` only.
    #[inline]
    pub(crate) fn rollback_field(&mut self, i: usize) {
        self.columns[i].rollback();
    }

    /// Make the uncommitted row's field `i` (a `u8` or `bytes` field with
    /// nothing written for this row yet) refer to `bytes`, which are the
    /// file's at `off` (read into a buffer), instead of holding them: a `u8`
    /// row's elements, a `bytes` row's one byte string. If the column cannot
    /// (its rows refer to as many other files as a column may), `bytes` are
    /// copied in. Finish with
    /// [`commit_row`](Self::commit_row).
    pub(crate) fn set_file_row(&mut self, i: usize, backing: &Backing, off: usize, bytes: &[u8]) {
        let c = &mut self.columns[i];
        if !c.set_pending_file(backing, off, bytes.len()) {
            match c.owned_mut() {
                Values::U8(v) => v.extend_from_slice(bytes),
                Values::Bytes(v) => v.push(bytes),
                other => unreachable!("set_file_row on a {} field", other.dtype()),
            }
        }
    }

    /// The uncommitted row's one span in its file, as `(field, offset, len)`
    /// — `None` if no field or more than one field of the row has one.
    pub(crate) fn pending_file_span(&self) -> Option<(usize, usize, usize)> {
        let mut found = None;
        for (i, c) in self.columns.iter().enumerate() {
            if let Some((off, len)) = c.files.as_deref().and_then(FileRows::pending) {
                if found.is_some() {
                    return None;
                }
                found = Some((i, off, len));
            }
        }
        found
    }

    /// Leave `check` (the uncommitted row's payload checksum) to be made
    /// when field `i`'s span in its file (see
    /// [`pending_file_span`](Self::pending_file_span)) is copied out. Call
    /// right before [`commit_row`](Self::commit_row). False (nothing left)
    /// if field `i` of the row has no span.
    pub(crate) fn defer_check(&mut self, i: usize, check: DueCheck) -> bool {
        self.columns[i]
            .files
            .as_deref_mut()
            .is_some_and(|m| m.set_pending_check(check))
    }

    /// Close the row written through [`values_mut`](Self::values_mut): check
    /// each field's element count against the schema. On a mismatch the row
    /// is rolled back and `(field index, description)` returned.
    #[inline]
    pub fn commit_row(&mut self, origin: Origin) -> std::result::Result<(), (usize, String)> {
        let mut bad = None;
        for (i, (c, f)) in self.columns.iter().zip(self.schema.fields()).enumerate() {
            let n = c.pending();
            if let Err(actual) = check_elements(f, n) {
                bad = Some((i, format!("{actual} of {}", f.dtype)));
                break;
            }
        }
        if let Some(bad) = bad {
            self.rollback_row();
            return Err(bad);
        }
        for c in &mut self.columns {
            c.commit();
        }
        self.origins.push(origin);
        Ok(())
    }

    /// Close `n` rows written at once through [`values_mut`](Self::values_mut),
    /// records `first_record..first_record + n` of `source`: each column's
    /// uncommitted elements are split evenly among the rows, and each row's
    /// count is checked against the schema as [`commit_row`](Self::commit_row)
    /// does. On a mismatch nothing is committed, the rows are rolled back and
    /// `(field index, description)` returned.
    pub fn commit_rows(
        &mut self,
        source: SourceId,
        first_record: u64,
        n: usize,
    ) -> std::result::Result<(), (usize, String)> {
        let mut bad = None;
        for (i, (c, f)) in self.columns.iter().zip(self.schema.fields()).enumerate() {
            let pending = c.pending();
            if c.files.as_deref().and_then(FileRows::pending).is_some() {
                bad = Some((i, "a span in the file among rows written at once".into()));
                break;
            }
            if n == 0 {
                if pending != 0 {
                    bad = Some((i, format!("{pending} elements of {} for no rows", f.dtype)));
                    break;
                }
                continue;
            }
            if pending % n != 0 {
                bad = Some((i, format!("{pending} elements of {} for {n} rows", f.dtype)));
                break;
            }
            if let Err(actual) = check_elements(f, pending / n) {
                bad = Some((i, format!("{actual} of {}", f.dtype)));
                break;
            }
        }
        if let Some(bad) = bad {
            self.rollback_row();
            return Err(bad);
        }
        if n == 0 {
            return Ok(());
        }
        for c in &mut self.columns {
            let start = c.committed();
            let per = (c.values.len() - start) / n;
            let logical = c.ends.last().copied().unwrap_or(0);
            c.ends.extend((1..=n).map(|j| logical + j * per));
            if let Some(m) = c.files.as_deref_mut() {
                m.commit_owned((1..n + 1).map(|j| start + j * per));
            }
        }
        self.origins
            .extend((0..n as u64).map(|j| Origin::new(source, first_record + j)));
        Ok(())
    }

    /// Drop whatever was written for the current, uncommitted row.
    pub fn rollback_row(&mut self) {
        for c in &mut self.columns {
            c.rollback();
        }
    }

    /// Instance `i` as an owned [`Instance`].
    ///
    /// # Errors
    ///
    /// A row left in its file cannot be read, or a payload CRC left to be
    /// checked when it is copied out does not match (see
    /// [`Column::file_row`]).
    pub fn row(&self, i: usize) -> Result<Instance> {
        let values = self
            .columns
            .iter()
            .map(|c| c.row_values(i))
            .collect::<Result<_>>()?;
        Ok(Instance::from_checked(
            &self.schema,
            values,
            self.origins[i],
        ))
    }

    /// All instances as owned [`Instance`]s (each as [`row`](Self::row) gives it).
    pub fn rows(&self) -> impl ExactSizeIterator<Item = Result<Instance>> + '_ {
        (0..self.len()).map(move |i| self.row(i))
    }

    /// The rows whose origin `keep` accepts, in order (the chunk itself when
    /// it keeps all); nothing is read, nothing can fail.
    pub fn retain_origins(self, mut keep: impl FnMut(&Origin) -> bool) -> Chunk {
        let rows: Vec<usize> = (0..self.len())
            .filter(|&i| keep(&self.origins[i]))
            .collect();
        if rows.len() == self.len() {
            return self;
        }
        self.select_rows(&rows)
    }

    /// Name row `row` by `origin` (a reader that reads a record under one
    /// name and hands it on under another: a run of a `global` shuffle's
    /// order names each row by its position).
    ///
    /// # Panics
    ///
    /// If `row` is out of range.
    pub fn rename_row(&mut self, row: usize, origin: Origin) {
        self.origins[row] = origin;
    }

    /// A new chunk of rows `keep` of this one (in that order). Rows left in
    /// their file stay so, with their due checks (each new column refers to
    /// the one file of this chunk's), so nothing is read and nothing can fail.
    pub(crate) fn select_rows(&self, keep: &[usize]) -> Chunk {
        Chunk {
            schema: self.schema.clone(),
            columns: self.columns.iter().map(|c| c.select(keep)).collect(),
            origins: keep.iter().map(|&i| self.origins[i]).collect(),
        }
    }

    /// Append rows `start..end` of `other` (same schema). Rows of `other`
    /// left in their file stay so (with any CRC check due on them), unless
    /// this chunk's column already refers to as many other files as a
    /// column may: those are read and checked now.
    ///
    /// # Errors
    ///
    /// A row that has to be read here cannot be, or its due payload CRC
    /// does not match (see [`Column::file_row`]); nothing is appended then.
    pub fn extend_rows(&mut self, other: &Chunk, start: usize, end: usize) -> Result<()> {
        let before = self.len();
        for ci in 0..self.columns.len() {
            let (c, o) = (&mut self.columns[ci], &other.columns[ci]);
            if c.files.is_none() && o.files.is_none() {
                c.rollback();
                for i in start..end {
                    let r = o.range(i);
                    c.values.extend_range(&o.values, r.start, r.end);
                    c.ends.push(c.values.len());
                }
                continue;
            }
            for i in start..end {
                if let Err(e) = c.push_row_of(o, i) {
                    for c in &mut self.columns[..=ci] {
                        c.truncate_rows(before);
                    }
                    return Err(e);
                }
            }
        }
        self.origins.extend_from_slice(&other.origins[start..end]);
        Ok(())
    }
}

/// The rows [`Chunk::with_budget`] makes room for: `max_rows`, or as many
/// as `max_bytes` of the schema's fixed-size fields hold (and one more),
/// whichever is fewer, at most 65,536.
fn budget_rows(schema: &Schema, max_rows: usize, max_bytes: usize) -> usize {
    let row: usize = schema
        .fields()
        .iter()
        .map(|f| f.fixed_elements().unwrap_or(0) * f.dtype.size())
        .sum();
    max_bytes
        .checked_div(row)
        .map_or(max_rows, |r| max_rows.min(r.saturating_add(1)))
        .min(1 << 16)
}
