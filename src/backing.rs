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

/// The rows of a `u8` or `bytes` column that refer to a [`Backing`] instead
/// of holding their bytes. Each row either refers to one span of the file
/// — a `u8` row's elements, or a `bytes` row's one byte string — or is
/// owned (its elements in the column's `values`, at `owned_ends`).
#[derive(Clone)]
pub(crate) struct FileRows {
    backing: Backing,
    /// Per committed row: (offset, len) of its bytes in the file; `None`
    /// for an owned row.
    spans: Vec<Option<(usize, usize)>>,
    /// Per committed row: where its owned elements end in `values`.
    owned_ends: Vec<usize>,
    /// Per committed row: the check due when its span is copied out.
    checks: Vec<Option<DueCheck>>,
    /// Bytes of the committed rows that refer to the file.
    span_bytes: usize,
    /// The uncommitted row's span: (offset, len).
    pending: Option<(usize, usize)>,
    /// The uncommitted row's due check (set just before it is committed).
    pending_check: Option<DueCheck>,
}

impl FileRows {
    /// The most memory one row costs: its span, owned end and due check
    /// (the check counted at its size for a TFRecord CRC, with its `Arc`).
    pub(crate) const ROW_BYTES: usize = std::mem::size_of::<Option<(usize, usize)>>()
        + std::mem::size_of::<usize>()
        + std::mem::size_of::<Option<DueCheck>>()
        + 128;

    /// The most memory the rows of one column cost beside their rows: this
    /// struct and the open file (its path counted at `PATH_MAX`, 4,096).
    pub(crate) const FIXED_BYTES: usize =
        std::mem::size_of::<Self>() + std::mem::size_of::<InputFile>() + 16 + 4096;

    /// Start referring rows of a column that has `ends` (all owned so far).
    pub(crate) fn new(backing: Backing, ends: &[usize]) -> Self {
        FileRows {
            backing,
            spans: vec![None; ends.len()],
            owned_ends: ends.to_vec(),
            checks: vec![None; ends.len()],
            span_bytes: 0,
            pending: None,
            pending_check: None,
        }
    }

    /// The file.
    pub(crate) fn backing(&self) -> &Backing {
        &self.backing
    }

    /// Committed row `i` if it refers to the file, with its due check.
    #[inline]
    pub(crate) fn row(&self, i: usize) -> Option<FileRow<'_>> {
        let (off, len) = self.spans[i]?;
        Some(FileRow {
            backing: &self.backing,
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

    /// Committed row `i`'s span and due check, if it refers to the file.
    pub(crate) fn span(&self, i: usize) -> Option<(usize, usize, Option<DueCheck>)> {
        let (off, len) = self.spans[i]?;
        Some((off, len, self.checks[i].clone()))
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

    /// The uncommitted row's span, if any.
    #[inline]
    pub(crate) fn pending(&self) -> Option<(usize, usize)> {
        self.pending
    }

    /// Make the uncommitted row refer to `len` bytes at `off`.
    pub(crate) fn set_pending(&mut self, off: usize, len: usize) {
        self.pending = Some((off, len));
        self.pending_check = None;
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
            Some((off, len)) => {
                self.spans.push(Some((off, len)));
                self.checks
                    .push(check.or_else(|| self.pending_check.take()));
                self.span_bytes += len;
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
            self.span_bytes -= s.1;
        }
        self.checks.truncate(rows);
        self.owned_ends.truncate(rows);
    }

    /// Bytes of the rows that refer to the file, the uncommitted one included.
    #[inline]
    pub(crate) fn span_bytes(&self) -> usize {
        self.span_bytes + self.pending.map_or(0, |p| p.1)
    }

    /// Heap memory held: this struct, its vectors' capacity, the due checks
    /// and the open file (each counted in full, though shared).
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.backing.memory_bytes()
            + self.spans.capacity() * std::mem::size_of::<Option<(usize, usize)>>()
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
            .field("file", &self.backing.path())
            .field("spans", &self.spans)
            .field("owned_ends", &self.owned_ends)
            .field("checks", &self.checks)
            .field("pending", &self.pending)
            .finish()
    }
}
