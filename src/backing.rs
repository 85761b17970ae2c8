//! Rows that refer to their input file instead of holding a copy: the
//! [`Backing`] such rows share (the file, read by position), where a payload
//! being decoded lies in it ([`Backed`]), a column's rows that refer to it
//! ([`FileRows`]) and one such row as collation copies it ([`FileRow`]),
//! with the check still due on its bytes ([`RowCheck`]).
//!
//! A large `u8` row or byte string ([`FILE_ROW_MIN_BYTES`] or more) read
//! from a regular file is not copied into its chunk: the row keeps where it
//! is in the file, and whatever takes it out of the chunk (collation, above
//! all) reads it from the file straight into its destination — one copy by
//! the kernel, page cache → batch. Such a row costs its chunk a few words,
//! and no page of the file is ever mapped: a file shortened under such rows
//! is an [`Error::Io`](crate::Error::Io) naming it when one is read.

use std::fmt;
use std::mem::MaybeUninit;
use std::sync::Arc;

use crate::error::Result;
use crate::input::InputFile;

/// The file rows of a chunk refer to, shared by every chunk that has a row
/// in it.
pub(crate) type Backing = Arc<InputFile>;

/// Rows of a `u8` column (or byte strings of a `bytes` column) read from a
/// regular file that are at least this long refer to the file and are read
/// from it when copied out; shorter ones are copied into the column (a
/// positioned read per row would cost more than the copy).
pub(crate) const FILE_ROW_MIN_BYTES: usize = 32 << 10;

/// A payload being decoded and where it lies in its file: the payload is a
/// copy of the file's bytes from some offset on (read into a buffer), so
/// that a row can refer to the file by offset.
#[derive(Clone, Copy)]
pub(crate) struct Backed<'a> {
    pub(crate) backing: &'a Backing,
    /// Offset in the file minus address in the payload (wrapping).
    delta: usize,
}

impl<'a> Backed<'a> {
    /// `payload` holds the file's bytes from offset `off` on.
    pub(crate) fn new(backing: &'a Backing, payload: &[u8], off: u64) -> Self {
        Backed {
            backing,
            delta: (off as usize).wrapping_sub(payload.as_ptr() as usize),
        }
    }

    /// Where `s`, a slice of the payload, is in the file: (offset, len).
    pub(crate) fn span_of(&self, s: &[u8]) -> Option<(usize, usize)> {
        let off = (s.as_ptr() as usize).wrapping_add(self.delta);
        (off.checked_add(s.len())? as u64 <= self.backing.len()).then_some((off, s.len()))
    }
}

/// A check left to be made on a row's bytes when they are copied out of
/// the chunk instead of when the record was read — a format's checksum
/// (TFRecord's payload CRC-32C), so that a large row's bytes are read from
/// memory once: copied, then checked on the copy while it is in cache.
pub(crate) trait RowCheck: Send + Sync + fmt::Debug {
    /// Check the row, given a copy of its bytes: `Err` is the error reading
    /// the record with the check would have given.
    fn verify(&self, row: &[u8]) -> Result<()>;
}

/// A [`RowCheck`] due on a row, shared by every chunk the row is moved to.
pub(crate) type DueCheck = Arc<dyn RowCheck>;

/// A row that refers to its file, as collation copies it: where its bytes
/// are and the check still due on them (if any).
pub(crate) struct FileRow<'a> {
    backing: &'a Backing,
    /// Where the row's bytes start in the file.
    off: usize,
    /// The row's length in bytes.
    pub(crate) len: usize,
    check: Option<&'a DueCheck>,
}

impl FileRow<'_> {
    /// Read the row into all of `dst` (its exact length), then make the
    /// check due on the copy (while it is in cache).
    ///
    /// # Panics
    ///
    /// If `dst` is not as long as the row.
    #[inline]
    pub(crate) fn copy_to(&self, dst: &mut [MaybeUninit<u8>]) -> Result<()> {
        assert_eq!(
            dst.len(),
            self.len,
            "a row of the wrong length in a checked chunk"
        );
        self.backing.read_at(self.off as u64, dst)?;
        // SAFETY: all of `dst` was written just above (or an error returned).
        let copy = unsafe { std::slice::from_raw_parts(dst.as_ptr().cast::<u8>(), self.len) };
        match self.check {
            None => Ok(()),
            Some(c) => c.verify(copy),
        }
    }

    /// The row's bytes, read and checked.
    pub(crate) fn to_vec(&self) -> Result<Vec<u8>> {
        let mut v = Vec::with_capacity(self.len);
        self.copy_to(&mut v.spare_capacity_mut()[..self.len])?;
        // SAFETY: `copy_to` wrote all `len` bytes (or returned an error).
        unsafe { v.set_len(self.len) };
        Ok(v)
    }
}

/// The files one column's rows may refer to at most: a chunk read from
/// more (rows by position from many files, in `global` shuffle mode)
/// copies the rest of its large rows in.
pub(crate) const MAX_FILES_PER_COLUMN: usize = 64;

/// Where a row's bytes are: which of the column's files, and the span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    /// Index into [`FileRows::backings`].
    file: u32,
    off: usize,
    len: usize,
}

/// The rows of a `u8` or `bytes` column that refer to a [`Backing`] instead
/// of holding their bytes. Each row either refers to one span of a file —
/// a `u8` row's elements, or a `bytes` row's one byte string — or is owned
/// (its elements in the column's `values`, at `owned_ends`). The rows of
/// one column may refer to several files (at most
/// [`MAX_FILES_PER_COLUMN`]): a chunk of records read by position from
/// many files keeps each large row in its own.
#[derive(Clone)]
pub(crate) struct FileRows {
    /// The files, distinct, in the order rows first referred to them.
    backings: Vec<Backing>,
    /// Per committed row: which file and the span of its bytes there;
    /// `None` for an owned row.
    spans: Vec<Option<Span>>,
    /// Per committed row: where its owned elements end in `values`.
    owned_ends: Vec<usize>,
    /// Per committed row: the check due when its span is copied out.
    checks: Vec<Option<DueCheck>>,
    /// Bytes of the committed rows that refer to the file.
    span_bytes: usize,
    /// The uncommitted row's span.
    pending: Option<Span>,
    /// The uncommitted row's due check (set just before it is committed).
    pending_check: Option<DueCheck>,
}

impl FileRows {
    /// The most memory one row costs: its span, owned end and due check
    /// (the check counted at its size for a TFRecord CRC, with its `Arc`).
    pub(crate) const ROW_BYTES: usize = std::mem::size_of::<Option<Span>>()
        + std::mem::size_of::<usize>()
        + std::mem::size_of::<Option<DueCheck>>()
        + 128;

    /// The most memory the rows of one column cost beside their rows: this
    /// struct and the open file (its path counted at `PATH_MAX`, 4,096).
    /// Each further file a column's rows refer to costs as much again,
    /// [`FILE_BYTES`](Self::FILE_BYTES).
    pub(crate) const FIXED_BYTES: usize = std::mem::size_of::<Self>() + Self::FILE_BYTES;

    /// The most memory one file the rows refer to costs: the open file,
    /// its path counted at `PATH_MAX`, and its place in the list.
    pub(crate) const FILE_BYTES: usize =
        std::mem::size_of::<InputFile>() + 16 + 4096 + 2 * std::mem::size_of::<Backing>();

    /// Start referring rows of a column that has `ends` (all owned so far)
    /// to files, `backing` the first.
    pub(crate) fn new(backing: Backing, ends: &[usize]) -> Self {
        FileRows {
            backings: vec![backing],
            spans: vec![None; ends.len()],
            owned_ends: ends.to_vec(),
            checks: vec![None; ends.len()],
            span_bytes: 0,
            pending: None,
            pending_check: None,
        }
    }

    /// The index of `backing` among the files rows refer to, added if new;
    /// `None` when the column already refers to [`MAX_FILES_PER_COLUMN`]
    /// others.
    fn file_index(&mut self, backing: &Backing) -> Option<u32> {
        // The last file first: rows of one file come in runs.
        if let Some(i) = self.backings.iter().rposition(|b| Arc::ptr_eq(b, backing)) {
            return Some(i as u32);
        }
        if self.backings.len() >= MAX_FILES_PER_COLUMN {
            return None;
        }
        self.backings.push(backing.clone());
        Some((self.backings.len() - 1) as u32)
    }

    /// Committed row `i` if it refers to a file, with its due check.
    #[inline]
    pub(crate) fn row(&self, i: usize) -> Option<FileRow<'_>> {
        let Span { file, off, len } = self.spans[i]?;
        Some(FileRow {
            backing: &self.backings[file as usize],
            off,
            len,
            check: self.checks[i].as_ref(),
        })
    }

    /// True if committed row `i` refers to the file.
    #[inline]
    pub(crate) fn is_file_row(&self, i: usize) -> bool {
        self.spans[i].is_some()
    }

    /// Committed row `i`'s file, span and due check, if it refers to a file.
    pub(crate) fn span(&self, i: usize) -> Option<(&Backing, usize, usize, Option<DueCheck>)> {
        let Span { file, off, len } = self.spans[i]?;
        Some((
            &self.backings[file as usize],
            off,
            len,
            self.checks[i].clone(),
        ))
    }

    /// Where committed row `i`'s owned elements end in the column's values.
    #[inline]
    pub(crate) fn owned_end(&self, i: usize) -> usize {
        self.owned_ends[i]
    }

    /// Where the owned elements of the committed rows end.
    #[inline]
    pub(crate) fn owned_len(&self) -> usize {
        self.owned_ends.last().copied().unwrap_or(0)
    }

    /// The uncommitted row's span (offset, len in its file), if any.
    #[inline]
    pub(crate) fn pending(&self) -> Option<(usize, usize)> {
        self.pending.map(|p| (p.off, p.len))
    }

    /// Make the uncommitted row refer to `len` bytes of `backing` at `off`.
    /// False (nothing changed) when the column's rows already refer to
    /// [`MAX_FILES_PER_COLUMN`] other files.
    pub(crate) fn set_pending(&mut self, backing: &Backing, off: usize, len: usize) -> bool {
        let Some(file) = self.file_index(backing) else {
            return false;
        };
        self.pending = Some(Span { file, off, len });
        self.pending_check = None;
        true
    }

    /// Leave `check` to be made when the uncommitted row's span is copied
    /// out. False (nothing kept) if the row has no span.
    pub(crate) fn set_pending_check(&mut self, check: DueCheck) -> bool {
        if self.pending.is_none() {
            return false;
        }
        self.pending_check = Some(check);
        true
    }

    /// Forget the uncommitted row's span and check.
    pub(crate) fn rollback(&mut self) {
        self.pending = None;
        self.pending_check = None;
    }

    /// Commit the uncommitted row: its span (if any) with its check (`check`
    /// if given, else the one set), its owned elements ending at `owned_end`.
    pub(crate) fn commit(&mut self, owned_end: usize, check: Option<DueCheck>) {
        match self.pending.take() {
            Some(span) => {
                self.spans.push(Some(span));
                self.checks
                    .push(check.or_else(|| self.pending_check.take()));
                self.span_bytes += span.len;
            }
            None => {
                self.spans.push(None);
                self.checks.push(None);
            }
        }
        self.pending_check = None;
        self.owned_ends.push(owned_end);
    }

    /// Commit `n` owned rows whose elements end at `owned_ends`.
    pub(crate) fn commit_owned(&mut self, owned_ends: impl ExactSizeIterator<Item = usize>) {
        let n = owned_ends.len();
        self.spans.extend(std::iter::repeat_n(None, n));
        self.checks.extend(std::iter::repeat_n(None, n));
        self.owned_ends.extend(owned_ends);
    }

    /// Keep the first `rows` committed rows.
    pub(crate) fn truncate(&mut self, rows: usize) {
        for s in self.spans.drain(rows..).flatten() {
            self.span_bytes -= s.len;
        }
        self.checks.truncate(rows);
        self.owned_ends.truncate(rows);
    }

    /// Bytes of the rows that refer to the file, the uncommitted one included.
    #[inline]
    pub(crate) fn span_bytes(&self) -> usize {
        self.span_bytes + self.pending.map_or(0, |p| p.len)
    }

    /// Heap memory held: this struct, its vectors' capacity, the due checks
    /// and the open files (each counted in full, though shared).
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self
                .backings
                .iter()
                .map(|b| b.memory_bytes())
                .sum::<usize>()
            + self.backings.capacity() * std::mem::size_of::<Backing>()
            + self.spans.capacity() * std::mem::size_of::<Option<Span>>()
            + self.owned_ends.capacity() * std::mem::size_of::<usize>()
            + self.checks.capacity() * std::mem::size_of::<Option<DueCheck>>()
            + self
                .checks
                .iter()
                .flatten()
                .map(|c| std::mem::size_of_val(&**c) + 2 * std::mem::size_of::<usize>())
                .sum::<usize>()
    }
}

impl fmt::Debug for FileRows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileRows")
            .field(
                "files",
                &self.backings.iter().map(|b| b.path()).collect::<Vec<_>>(),
            )
            .field("spans", &self.spans)
            .field("owned_ends", &self.owned_ends)
            .field("checks", &self.checks)
            .field("pending", &self.pending)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    //! One column's rows referring to many files: each row its own bytes,
    //! up to [`MAX_FILES_PER_COLUMN`] files, the rows of further files
    //! copied in; moved to another chunk, each row keeps its file.

    use super::*;
    use crate::chunk::Chunk;
    use crate::input::{open_input, Opened};
    use crate::provenance::{Origin, SourceId};
    use crate::schema::{DType, Schema};

    #[test]
    fn a_column_refers_to_many_files_and_copies_the_rows_of_more() {
        let dir = tempfile::tempdir().unwrap();
        let n = MAX_FILES_PER_COLUMN + 3;
        // File k holds 100 bytes of value k; its row is bytes 10..60.
        let backings: Vec<Backing> = (0..n)
            .map(|k| {
                let path = dir.path().join(format!("f{k}"));
                std::fs::write(&path, vec![k as u8; 100]).unwrap();
                match open_input(&path).unwrap() {
                    Opened::Regular(f) => f,
                    Opened::Stream(_) => panic!("a regular file"),
                }
            })
            .collect();
        let schema = Schema::builder()
            .field("b", DType::Bytes, [])
            .build()
            .unwrap();
        let mut chunk = Chunk::new(&schema);
        let source = SourceId::intern("rows");
        for (k, b) in backings.iter().enumerate() {
            chunk.set_file_row(0, b, 10, &[k as u8; 50]);
            chunk.commit_row(Origin::new(source, k as u64)).unwrap();
        }
        let column = &chunk.columns()[0];
        for k in 0..n {
            let left_in_file = column.file_row(k).unwrap();
            assert_eq!(left_in_file.is_some(), k < MAX_FILES_PER_COLUMN, "row {k}");
            assert_eq!(column.row_values(k).unwrap(), chunk_value(k), "row {k}");
        }
        // Moved into a chunk whose column refers to other files, each row
        // still reads its own file.
        let mut other = Chunk::new(&schema);
        other.set_file_row(0, &backings[n - 1], 0, &[(n - 1) as u8; 100]);
        other.commit_row(Origin::new(source, 999)).unwrap();
        other.extend_rows(&chunk, 0, n).unwrap();
        for k in 0..n {
            assert_eq!(
                other.columns()[0].row_values(k + 1).unwrap(),
                chunk_value(k)
            );
        }
    }

    fn chunk_value(k: usize) -> crate::values::Values {
        crate::values::Values::Bytes(crate::values::BytesList::from_iter([&[k as u8; 50][..]]))
    }
}
