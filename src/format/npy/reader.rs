//! The reader of one or more equally long arrays ([`NpReader`]: a `.npy`,
//! an `.npz` or a column group): records one row at a time, and the fast
//! path of [`RecordReader::read_chunk`] that decodes whole blocks of rows
//! into the chunk's columns (falling back to the record path, which names
//! the exact error, for a block with anything wrong in it).

use std::path::{Path, PathBuf};

use super::array::{Array, Data, RowsError, BLOCK_BYTES};
use super::crc::EntryCheck;
use super::decode::{decode, u8_value};
use crate::chunk::Chunk;
use crate::error::{Error, Result};
use crate::format::{check_chunk_budget, source_id, OpenOptions, RecordReader};
use crate::provenance::{Location, SourceId};
use crate::record::Record;
use crate::schema::{check_elements, check_shape, DType};
use crate::values::{Tensor, Values};

pub(super) fn bad(path: &Path, what: impl Into<String>) -> Error {
    Error::BadFile {
        path: path.to_path_buf(),
        what: what.into(),
    }
}

fn check_row_size(path: &Path, arrays: &[Array], max: u64) -> Result<()> {
    let total: u64 = arrays.iter().map(|a| a.h.row_bytes as u64).sum();
    if total > max {
        return Err(bad(
            path,
            format!("one row is {total} bytes, more than max_record_bytes ({max})"),
        ));
    }
    Ok(())
}

/// How one schema field is filled in the fast path.
enum ColPlan {
    /// From array `.0`; `.1`: the array's dtype is the field's.
    Array(usize, bool),
    /// A ragged field absent from the file: nothing per row.
    Empty,
}

/// Reads the rows of one or more equally long arrays (a .npy or an .npz).
pub(super) struct NpReader {
    source: SourceId,
    pub(super) arrays: Vec<Array>,
    rows: u64,
    next: u64,
    /// A .npy (record offsets are byte offsets in the file).
    single: bool,
    /// The rest of the file cannot be read.
    dead: bool,
    /// The row that could not be read (when `dead`): later errors name it,
    /// not a row past it that may lie beyond the end of the file.
    dead_row: u64,
    path: PathBuf,
    /// Entries whose CRC-32 is still to be checked, before any row is read.
    unchecked: Vec<EntryCheck>,
    /// Why an entry failed its check (repeated by every later call).
    bad_entry: Option<String>,
}

impl NpReader {
    pub(super) fn new(
        path: &Path,
        arrays: Vec<Array>,
        opts: &OpenOptions,
        single: bool,
        unchecked: Vec<EntryCheck>,
    ) -> Result<Self> {
        check_row_size(path, &arrays, opts.max_record_bytes)?;
        let rows = arrays[0].h.rows;
        let mut r = NpReader {
            source: source_id(path),
            arrays,
            rows,
            next: opts.start_record.min(rows),
            single,
            dead: false,
            dead_row: 0,
            path: path.to_path_buf(),
            unchecked,
            bad_entry: None,
        };
        // Position streams now, so that a truncated stream shows at once.
        let next = r.next;
        for a in &mut r.arrays {
            if let Data::Stream(s) = &mut a.data {
                if let Err(f) = s.skip_to(next, a.h.row_bytes) {
                    s.failure = Some(f);
                }
            }
        }
        Ok(r)
    }

    fn location(&self, record: u64) -> Location {
        let offset = self.single.then(|| self.arrays[0].row_offset(record));
        Location::new(self.source, record, offset)
    }

    fn fatal(&mut self, ai: usize, failure: RowsError, at: u64) -> Error {
        self.dead = true;
        match failure {
            RowsError::Row(row, what) => {
                self.dead_row = row;
                let label = self.arrays[ai].label.clone();
                Error::corrupt(self.location(row), format!("{label}{what}"))
            }
            RowsError::Io(e) => {
                self.dead_row = at;
                e
            }
        }
    }

    /// Before any row is read: check every entry's CRC-32 (once). A
    /// corrupt entry is a [`Error::BadFile`] naming it, repeated by every
    /// later call: none of its rows — none of the file's — is delivered.
    fn check_entries(&mut self) -> Result<()> {
        if let Some(what) = &self.bad_entry {
            return Err(bad(&self.path, what.clone()));
        }
        while let Some(c) = self.unchecked.pop() {
            let failed = match c.verify() {
                Ok(None) => continue,
                Ok(Some(what)) => format!(
                    "{}{what}: the whole entry is corrupt, so none of its {} rows is read \
                     (records {}..{} of the file are lost)",
                    c.label, self.rows, self.next, self.rows
                ),
                Err(e) => format!("{}checking its CRC-32: {e}", c.label),
            };
            self.dead = true;
            self.dead_row = self.next;
            self.bad_entry = Some(failed.clone());
            return Err(bad(&self.path, failed));
        }
        Ok(())
    }

    fn u8_error(&self, ai: usize, record: u64, elem: usize, src: &[u8]) -> Error {
        let a = &self.arrays[ai];
        let v = u8_value(src, elem, a.h.little);
        Error::corrupt(
            self.location(record),
            format!(
                "{}field `{}`: u8 value {v} (element {elem} of the row) does not fit i64",
                a.label, a.name
            ),
        )
    }

    fn dead_error(&self) -> Error {
        if let Some(what) = &self.bad_entry {
            return bad(&self.path, what.clone());
        }
        Error::corrupt(
            self.location(self.dead_row),
            "the file cannot be read past an earlier error",
        )
    }

    /// How the fast path fills each field of `chunk`'s schema, or `None`
    /// when the generic path must (it then gives the exact error).
    fn plan(&self, chunk: &Chunk) -> Option<Vec<ColPlan>> {
        let mut plan = Vec::with_capacity(chunk.schema().len());
        for f in chunk.schema().fields() {
            match self.arrays.iter().position(|a| a.name == f.name) {
                None if f.is_ragged() => plan.push(ColPlan::Empty),
                None => return None,
                Some(ai) => {
                    let a = &self.arrays[ai];
                    let natural = a.h.kind.dtype();
                    let probe = Values::new(natural);
                    if !probe.convertible_to(f.dtype)
                        || check_elements(f, a.h.row_elems).is_err()
                        || (a.h.row_elems > 0 && check_shape(f, &a.h.shape[1..], natural).is_err())
                    {
                        return None;
                    }
                    // Empty rows are conformed specially by the generic path.
                    if a.h.row_elems == 0 && natural != f.dtype {
                        return None;
                    }
                    plan.push(ColPlan::Array(ai, natural == f.dtype));
                }
            }
        }
        Some(plan)
    }

    /// Decode rows `i..i + k` of every planned field into `chunk`
    /// (uncommitted). `false` if something went wrong (the caller rolls back
    /// and lets the generic path find the exact error).
    fn decode_block(&mut self, chunk: &mut Chunk, plan: &[ColPlan], i: u64, k: usize) -> bool {
        for (ci, p) in plan.iter().enumerate() {
            let ColPlan::Array(ai, direct) = *p else {
                continue;
            };
            let a = &mut self.arrays[ai];
            let (kind, little) = (a.h.kind, a.h.little);
            let mut conv = std::mem::replace(&mut a.conv, Values::new(DType::U8));
            let ok = match a.rows_bytes(i, k) {
                Err(_) => false,
                Ok(src) => {
                    if direct {
                        decode(kind, little, src, chunk.values_mut(ci)).is_ok()
                    } else {
                        conv.clear();
                        decode(kind, little, src, &mut conv).is_ok()
                            && conv.append_converted(chunk.values_mut(ci)).is_ok()
                    }
                }
            };
            self.arrays[ai].conv = conv;
            if !ok {
                return false;
            }
        }
        true
    }

    /// The generic path for up to `k` records: returns how many were appended.
    fn generic(&mut self, chunk: &mut Chunk, k: usize) -> Result<usize> {
        let mut n = 0;
        while n < k {
            match self.next_record()? {
                Some(rec) => {
                    chunk.push_record(&rec)?;
                    n += 1;
                }
                None => break,
            }
        }
        Ok(n)
    }
}

impl RecordReader for NpReader {
    fn next_record(&mut self) -> Result<Option<Record>> {
        if self.dead {
            return Err(self.dead_error());
        }
        self.check_entries()?;
        if self.next >= self.rows {
            return Ok(None);
        }
        let i = self.next;
        let mut fields = Vec::with_capacity(self.arrays.len());
        for ai in 0..self.arrays.len() {
            let a = &mut self.arrays[ai];
            let (kind, little) = (a.h.kind, a.h.little);
            let shape = a.h.shape[1..].to_vec();
            let name = a.name.clone();
            // Sized by the row's bytes once they were read, not by the
            // header's shape: a stream may end long before the row does.
            let res = match a.rows_bytes(i, 1) {
                Err(f) => return Err(self.fatal(ai, f, i)),
                Ok(src) => {
                    let mut values = Values::with_capacity(kind.dtype(), src.len() / kind.size());
                    match decode(kind, little, src, &mut values) {
                        Ok(()) => Ok(values),
                        Err(e) => Err((e, src.to_vec())),
                    }
                }
            };
            let values = match res {
                Ok(values) => values,
                Err((elem, src)) => {
                    self.next += 1;
                    return Err(self.u8_error(ai, i, elem, &src));
                }
            };
            fields.push((name, Tensor { values, shape }));
        }
        self.next += 1;
        Ok(Some(Record {
            fields,
            location: self.location(i),
        }))
    }

    fn read_chunk(
        &mut self,
        chunk: &mut Chunk,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<usize> {
        check_chunk_budget(max_records, max_bytes)?;
        if self.dead {
            return Err(self.dead_error());
        }
        self.check_entries()?;
        let Some(plan) = self.plan(chunk) else {
            return self.generic(chunk, max_records);
        };
        // Payload each row adds, as `Chunk::payload_bytes` counts it.
        let row_payload: usize = chunk
            .schema()
            .fields()
            .iter()
            .zip(&plan)
            .map(|(f, p)| match p {
                ColPlan::Array(ai, _) => self.arrays[*ai].h.row_elems * f.dtype.size(),
                ColPlan::Empty => 0,
            })
            .sum();
        let block_rows = (BLOCK_BYTES
            / self
                .arrays
                .iter()
                .map(|a| a.h.row_bytes)
                .max()
                .unwrap_or(1)
                .max(1))
        .max(1);
        let mut n = 0;
        while n < max_records {
            if self.dead {
                if n == 0 {
                    return Err(self.dead_error());
                }
                break;
            }
            let payload = chunk.payload_bytes();
            if (n > 0 && payload >= max_bytes) || self.next >= self.rows {
                break;
            }
            let by_bytes = if row_payload == 0 {
                usize::MAX
            } else {
                max_bytes
                    .saturating_sub(payload)
                    .div_ceil(row_payload)
                    .max(1)
            };
            let k = (max_records - n)
                .min(by_bytes)
                .min(block_rows)
                .min((self.rows - self.next).min(usize::MAX as u64) as usize);
            let i = self.next;
            if self.decode_block(chunk, &plan, i, k) {
                if chunk.commit_rows(self.source, i, k).is_ok() {
                    self.next += k as u64;
                    n += k;
                    continue;
                }
            } else {
                chunk.rollback_row();
            }
            // Something in this block is bad: the generic path reads it
            // record by record and reports the exact error.
            n += self.generic(chunk, k)?;
        }
        Ok(n)
    }

    fn next_index(&self) -> u64 {
        self.next
    }

    fn can_continue(&self) -> bool {
        !self.dead
    }

    fn len_hint(&self) -> Option<u64> {
        Some(self.rows)
    }
}
