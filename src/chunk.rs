//! The columnar [`Chunk`] of many instances that the hot path moves between
//! stages, its [`Column`]s, and the [`RowRef`] by which the shuffle buffer
//! and batching hold one row of a shared chunk.
//!
//! A [`Chunk`] stores each field of many instances in one vector, so decoders
//! write straight into it and collation copies each instance's values once.
//! Large `u8` / `bytes` rows read from a memory-mapped file are not even
//! copied into the chunk: they refer to the map ([`Column::mapped_row`]),
//! and cost (in [`Chunk::payload_bytes`]) what a copy would. Such a row may
//! carry its record's payload CRC, checked when its bytes are copied out
//! rather than when the record was read (see
//! [`OpenOptions::defer_checksums`](crate::format::OpenOptions::defer_checksums)):
//! every way out of the chunk ([`Column::mapped_row`], [`Chunk::row`],
//! [`Chunk::extend_rows`], collation) checks it first.

use std::sync::Arc;

use crate::backing::{Backing, DueCheck, MappedRow, MappedRows, MAPPED_MIN_BYTES, OWNED};
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
/// A `u8` column read from a memory-mapped file may refer to the mapped bytes
/// of its large rows instead of holding a copy ([`mapped_row`](Self::mapped_row));
/// `values` then holds only the other rows' elements, at
/// [`owned_range`](Self::owned_range). [`Chunk::row`] and collation see both
/// kinds alike.
#[derive(Clone, Debug)]
pub struct Column {
    /// The elements of all instances that are not mapped (all of them, unless
    /// [`is_mapped`](Self::is_mapped)), concatenated.
    pub values: Values,
    /// `ends[i]` is the element index where instance `i` ends, counting the
    /// elements of every instance, mapped or not.
    pub ends: Vec<usize>,
    mapped: Option<Box<MappedRows>>,
    /// Elements to reserve in `values` on the first write through
    /// [`Chunk::values_mut`] (a mapped column never needs them).
    reserve: usize,
}

impl PartialEq for Column {
    /// Same instances, element for element (wherever they are held).
    fn eq(&self, other: &Column) -> bool {
        if self.mapped.is_none() && other.mapped.is_none() {
            return self.values == other.values && self.ends == other.ends;
        }
        self.ends == other.ends
            && self.values.dtype() == other.values.dtype()
            && (0..self.ends.len())
                .all(|i| self.row_values(i, false).ok() == other.row_values(i, false).ok())
    }
}

impl Column {
    fn with_capacity(dtype: DType, elements: usize, rows: usize) -> Self {
        Column {
            values: Values::with_capacity(dtype, elements),
            ends: Vec::with_capacity(rows),
            mapped: None,
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

    /// True if some rows refer to a memory-mapped input instead of being in
    /// [`values`](Self::values).
    #[inline]
    pub fn is_mapped(&self) -> bool {
        self.mapped.is_some()
    }

    /// The bytes of instance `i` if it refers to a memory-mapped input —
    /// the elements of a `u8` row, the one byte string of a `bytes` row
    /// (`Ok(None)`: its elements are `values[owned_range(i)]`).
    ///
    /// # Errors
    ///
    /// The record's payload CRC, if it was left to be checked here (see
    /// [`OpenOptions::defer_checksums`](crate::format::OpenOptions::defer_checksums)),
    /// does not match: [`Error::Corrupt`] naming the file, record and offset.
    #[inline]
    pub fn mapped_row(&self, i: usize) -> Result<Option<&[u8]>> {
        match self.mapped_row_unchecked(i) {
            None => Ok(None),
            Some(r) => {
                r.verify_copy(r.bytes)?;
                Ok(Some(r.bytes))
            }
        }
    }

    /// Instance `i`'s mapped bytes and the CRC check still due on them,
    /// for a caller that copies them and checks the copy.
    #[inline]
    pub(crate) fn mapped_row_unchecked(&self, i: usize) -> Option<MappedRow<'_>> {
        self.mapped.as_deref()?.row(i)
    }

    /// Elements a mapped span of `len` bytes stands for.
    fn span_elements(&self, len: usize) -> usize {
        match self.values {
            Values::Bytes(_) => 1,
            _ => len,
        }
    }

    /// Where instance `i`'s elements are in [`values`](Self::values) (empty for
    /// a mapped row; the same as [`range`](Self::range) when the column is not
    /// mapped).
    #[inline]
    pub fn owned_range(&self, i: usize) -> std::ops::Range<usize> {
        match self.mapped.as_deref() {
            None => self.range(i),
            Some(m) if m.spans[i].0 != OWNED => {
                let e = m.owned_ends[i];
                e..e
            }
            Some(m) => {
                let start = if i == 0 { 0 } else { m.owned_ends[i - 1] };
                start..m.owned_ends[i]
            }
        }
    }

    /// Instance `i`'s elements as owned values (a due CRC checked first if
    /// `check`).
    fn row_values(&self, i: usize, check: bool) -> Result<Values> {
        if let Some(r) = self.mapped_row_unchecked(i) {
            if check {
                r.verify_copy(r.bytes)?;
            }
            let b = r.bytes;
            return Ok(match self.values {
                Values::Bytes(_) => Values::Bytes(BytesList::from_iter([b])),
                _ => Values::U8(b.to_vec()),
            });
        }
        let r = self.owned_range(i);
        let mut v = Values::with_capacity(self.values.dtype(), r.len());
        v.extend_range(&self.values, r.start, r.end);
        Ok(v)
    }

    /// Check now every CRC due on rows `start..end`.
    fn verify_rows(&self, start: usize, end: usize) -> Result<()> {
        for i in start..end {
            self.mapped_row(i)?;
        }
        Ok(())
    }

    /// True if rows of `other` (mapped) would stay mapped when appended here.
    fn keeps_spans_of(&self, other: &Column) -> bool {
        match (self.mapped.as_deref(), other.mapped.as_deref()) {
            (_, None) => true,
            (Some(m), Some(o)) => Arc::ptr_eq(&m.backing, &o.backing),
            (None, Some(_)) => matches!(self.values.dtype(), DType::U8 | DType::Bytes),
        }
    }

    /// Elements of the committed rows in `values`.
    #[inline(always)]
    fn committed(&self) -> usize {
        match self.mapped.as_deref() {
            None => self.ends.last().copied().unwrap_or(0),
            Some(m) => m.owned_ends.last().copied().unwrap_or(0),
        }
    }

    /// Elements written for the uncommitted row.
    #[inline(always)]
    fn pending(&self) -> usize {
        match self.mapped.as_deref() {
            None => self.values.len() - self.ends.last().copied().unwrap_or(0),
            Some(m) => self.pending_mapped(m),
        }
    }

    #[cold]
    fn pending_mapped(&self, m: &MappedRows) -> usize {
        self.values.len() - m.owned_ends.last().copied().unwrap_or(0)
            + m.pending.map_or(0, |(_, len)| self.span_elements(len))
    }

    /// Close the row being written (its count already checked).
    #[inline(always)]
    fn commit(&mut self) {
        if self.mapped.is_none() {
            // Not mapped: logical and physical ends are the same.
            self.ends.push(self.values.len());
            return;
        }
        self.commit_mapped();
    }

    fn commit_mapped(&mut self) {
        self.commit_mapped_with(None);
    }

    /// Commit the row; `check` goes with its mapped span (dropped if the
    /// row is not mapped — the caller makes sure it is).
    fn commit_mapped_with(&mut self, check: Option<DueCheck>) {
        let end = self.ends.last().copied().unwrap_or(0) + self.pending();
        self.ends.push(end);
        if let Some(m) = self.mapped.as_deref_mut() {
            let check = check.or_else(|| m.pending_check.take());
            match m.pending.take() {
                Some((off, len)) => {
                    m.spans.push((off, len));
                    m.checks.push(check);
                    m.mapped_bytes += len;
                    m.lo = m.lo.min(off);
                    m.hi = m.hi.max(off + len);
                }
                None => {
                    m.spans.push((OWNED, 0));
                    m.checks.push(None);
                }
            }
            m.owned_ends.push(self.values.len());
        }
    }

    /// Drop what was written for the uncommitted row.
    #[inline(always)]
    fn rollback(&mut self) {
        let n = self.committed();
        if self.values.len() != n {
            self.values.truncate(n);
        }
        if let Some(m) = self.mapped.as_deref_mut() {
            m.pending = None;
            m.pending_check = None;
        }
    }

    /// Copy the uncommitted row's mapped span (if any) into `values`.
    #[cold]
    fn materialize_pending(&mut self) {
        let Column { values, mapped, .. } = self;
        if let Some(m) = mapped.as_deref_mut() {
            debug_assert!(
                m.pending_check.is_none(),
                "a due CRC is set just before the row is committed"
            );
            if let Some((off, len)) = m.pending.take() {
                match values {
                    Values::U8(v) => v.extend_from_slice(m.bytes(off, len)),
                    Values::Bytes(v) => v.push(m.bytes(off, len)),
                    other => unreachable!("a mapped {} column", other.dtype()),
                }
            }
        }
    }

    /// The owned values, for writing the uncommitted row (any mapped span of
    /// it copied in first; the deferred reservation made).
    #[inline(always)]
    fn owned_mut(&mut self) -> &mut Values {
        if self.mapped.is_none() && self.reserve == 0 {
            return &mut self.values;
        }
        self.owned_mut_slow()
    }

    #[cold]
    fn owned_mut_slow(&mut self) -> &mut Values {
        self.materialize_pending();
        if self.reserve > 0 {
            let n = std::mem::take(&mut self.reserve);
            if self.values.is_empty() {
                self.values = Values::with_capacity(self.values.dtype(), n);
            }
        }
        &mut self.values
    }

    /// Append row `i` of `other` (same dtype) as a committed row: a mapped
    /// row stays mapped (with its due check) when both refer to the same
    /// backing; otherwise it is copied, unchecked — the caller has checked
    /// it ([`verify_rows`](Self::verify_rows)).
    fn push_row_of(&mut self, other: &Column, i: usize) {
        self.rollback();
        if let Some(om) = other.mapped.as_deref() {
            let (off, len) = om.spans[i];
            if off != OWNED && self.set_pending_mapped(&om.backing, off, len) {
                self.commit_mapped_with(om.checks[i].clone());
                return;
            }
        }
        let v = self.owned_mut();
        match other.mapped_row_unchecked(i).map(|r| r.bytes) {
            Some(b) => match v {
                Values::U8(v) => v.extend_from_slice(b),
                Values::Bytes(v) => v.push(b),
                other => unreachable!("mapped rows in a {} column", other.dtype()),
            },
            None => {
                let r = other.owned_range(i);
                v.extend_range(&other.values, r.start, r.end);
            }
        }
        self.commit();
    }

    /// Make the uncommitted row (which has no owned elements) refer to
    /// `len` bytes of `backing` at `off` (a `u8` row's elements, or a
    /// `bytes` row's one byte string). False (nothing changed) if the column
    /// is of another dtype, the row has owned elements, or the column already
    /// refers to another backing.
    fn set_pending_mapped(&mut self, backing: &Backing, off: usize, len: usize) -> bool {
        if !matches!(self.values.dtype(), DType::U8 | DType::Bytes)
            || self.values.len() != self.committed()
        {
            return false;
        }
        match self.mapped.as_deref_mut() {
            Some(m) if Arc::ptr_eq(&m.backing, backing) => {
                m.pending = Some((off, len));
                true
            }
            Some(_) => false,
            None => {
                let mut m = MappedRows::new(backing.clone(), &self.ends);
                m.pending = Some((off, len));
                self.mapped = Some(Box::new(m));
                true
            }
        }
    }

    #[inline(always)]
    fn mapped_bytes(&self) -> usize {
        self.mapped
            .as_deref()
            .map_or(0, |m| m.mapped_bytes + m.pending.map_or(0, |p| p.1))
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
    /// room of `u8` fields whose rows are large enough to be referred to in a
    /// memory-mapped input is reserved on their first write only.
    pub fn with_budget(schema: &Schema, max_rows: usize, max_bytes: usize) -> Self {
        let row: usize = schema
            .fields()
            .iter()
            .map(|f| f.fixed_elements().unwrap_or(0) * f.dtype.size())
            .sum();
        let rows = max_bytes
            .checked_div(row)
            .map_or(max_rows, |r| max_rows.min(r + 1))
            .min(1 << 16);
        let columns = schema
            .fields()
            .iter()
            .map(|f| {
                let n = f.fixed_elements().unwrap_or(1) * rows;
                if f.dtype == DType::U8 && f.fixed_elements().unwrap_or(0) >= MAPPED_MIN_BYTES {
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

    /// Payload bytes held. A row that refers to a memory-mapped input counts
    /// its bytes as if it held a copy: the chunk keeps those pages of the map
    /// resident (they are released when the chunk is dropped), so they are
    /// what the row costs.
    #[inline]
    pub fn payload_bytes(&self) -> usize {
        self.columns
            .iter()
            .map(|c| c.values.payload_bytes() + c.mapped_bytes())
            .sum()
    }

    /// Approximate memory held, payload (mapped rows included, see
    /// [`payload_bytes`](Self::payload_bytes)) plus bookkeeping.
    pub fn memory_bytes(&self) -> usize {
        self.payload_bytes()
            + self
                .columns
                .iter()
                .map(|c| {
                    c.ends.len() * 8
                        + c.mapped.as_deref().map_or(0, |m| {
                            m.spans.len() * (24 + std::mem::size_of::<Option<DueCheck>>())
                        })
                })
                .sum::<usize>()
            + self.origins.len() * std::mem::size_of::<Origin>()
    }

    /// Remove all instances, keeping the allocations (mapped rows are let go).
    pub fn clear(&mut self) {
        for c in &mut self.columns {
            c.values.clear();
            c.ends.clear();
            c.mapped = None;
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
    /// nothing written for this row yet) refer to `len` bytes of `backing` at
    /// `off` instead of holding them: a `u8` row's elements, a `bytes` row's
    /// one byte string. If the column cannot (it refers to another backing),
    /// the bytes are copied in. Finish with [`commit_row`](Self::commit_row).
    pub(crate) fn set_mapped(&mut self, i: usize, backing: &Backing, off: usize, len: usize) {
        let c = &mut self.columns[i];
        if !c.set_pending_mapped(backing, off, len) {
            let bytes = &backing.bytes()[off..off + len];
            match c.owned_mut() {
                Values::U8(v) => v.extend_from_slice(bytes),
                Values::Bytes(v) => v.push(bytes),
                other => unreachable!("set_mapped on a {} field", other.dtype()),
            }
        }
    }

    /// The uncommitted row's one mapped span, as `(field, offset, len)` in
    /// its backing — `None` if no field or more than one field of the row is
    /// mapped.
    pub(crate) fn pending_mapped_span(&self) -> Option<(usize, usize, usize)> {
        let mut found = None;
        for (i, c) in self.columns.iter().enumerate() {
            if let Some((off, len)) = c.mapped.as_deref().and_then(|m| m.pending) {
                if found.is_some() {
                    return None;
                }
                found = Some((i, off, len));
            }
        }
        found
    }

    /// Leave `check` (the uncommitted row's payload checksum) to be made
    /// when field `i`'s mapped span (see [`pending_mapped_span`](Self::pending_mapped_span))
    /// is copied out. Call right before [`commit_row`](Self::commit_row).
    pub(crate) fn defer_check(&mut self, i: usize, check: DueCheck) {
        let m = self.columns[i]
            .mapped
            .as_deref_mut()
            .filter(|m| m.pending.is_some())
            .expect("defer_check on a field whose row is mapped");
        m.pending_check = Some(check);
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
        for c in &mut self.columns {
            c.materialize_pending();
        }
        let mut bad = None;
        for (i, (c, f)) in self.columns.iter().zip(self.schema.fields()).enumerate() {
            let pending = c.pending();
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
            if let Some(m) = c.mapped.as_deref_mut() {
                m.spans.extend(std::iter::repeat_n((OWNED, 0), n));
                m.checks.extend(std::iter::repeat_n(None, n));
                m.owned_ends.extend((1..=n).map(|j| start + j * per));
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
    /// A payload CRC left to be checked when the row is copied out (see
    /// [`Column::mapped_row`]) does not match.
    pub fn row(&self, i: usize) -> Result<Instance> {
        let values = self
            .columns
            .iter()
            .map(|c| c.row_values(i, true))
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

    /// A new chunk of rows `keep` of this one (in that order). Mapped rows
    /// stay mapped, with their due checks: a new column takes the one
    /// backing of each of this chunk's columns, so nothing is copied
    /// unchecked and nothing can fail.
    pub(crate) fn select_rows(&self, keep: &[usize]) -> Chunk {
        let mut out = Chunk::with_capacity(&self.schema, keep.len());
        for (c, o) in out.columns.iter_mut().zip(&self.columns) {
            for &i in keep {
                c.push_row_of(o, i);
            }
        }
        out.origins.extend(keep.iter().map(|&i| self.origins[i]));
        out
    }

    /// Append rows `start..end` of `other` (same schema). Rows of `other`
    /// that refer to a memory-mapped input keep referring to it (and keep
    /// any CRC check due on them).
    ///
    /// # Errors
    ///
    /// A row that has to be copied here has a due payload CRC that does not
    /// match (see [`Column::mapped_row`]); nothing is appended then.
    pub fn extend_rows(&mut self, other: &Chunk, start: usize, end: usize) -> Result<()> {
        for (c, o) in self.columns.iter().zip(&other.columns) {
            if !c.keeps_spans_of(o) {
                o.verify_rows(start, end)?;
            }
        }
        for (c, o) in self.columns.iter_mut().zip(&other.columns) {
            if c.mapped.is_none() && o.mapped.is_none() {
                c.rollback();
                for i in start..end {
                    let r = o.range(i);
                    c.values.extend_range(&o.values, r.start, r.end);
                    c.ends.push(c.values.len());
                }
            } else {
                for i in start..end {
                    c.push_row_of(o, i);
                }
            }
        }
        self.origins.extend_from_slice(&other.origins[start..end]);
        Ok(())
    }
}
