//! Rows that refer to their input file instead of holding a copy: the
//! [`Backing`] such rows share (a memory-mapped input), where a payload
//! being decoded lies in it ([`Backed`]), a column's rows that refer to it
//! ([`MappedRows`]) and one such row as collation copies it ([`MappedRow`]),
//! with the check still due on its bytes ([`RowCheck`]).

use std::fmt;
use std::mem::MaybeUninit;
use std::sync::Arc;

use crate::error::Result;

/// Bytes that rows of a [`Chunk`] may refer to instead of holding a copy: a
/// memory-mapped input file, shared by every chunk that has a row in it (the
/// map is unmapped when the last of them is dropped).
pub(crate) trait BackingBytes: Send + Sync {
    /// All the bytes.
    fn bytes(&self) -> &[u8];
    /// No row refers to `range` any more: its pages may leave the process's
    /// resident set (they are read again, e.g. from the page cache, if
    /// anything touches them later).
    fn release(&self, range: std::ops::Range<usize>) {
        let _ = range;
    }
    /// Copy the bytes at `off` into all of `dst` without touching them in
    /// [`bytes`](Self::bytes) — for a mapped file, by reading the file, so
    /// that its pages are never mapped into the process — or `None` if this
    /// backing cannot (the caller copies from `bytes`).
    fn read_into(&self, off: usize, dst: &mut [MaybeUninit<u8>]) -> Option<Result<()>> {
        let _ = (off, dst);
        None
    }
}

/// A shared [`BackingBytes`].
pub(crate) type Backing = Arc<dyn BackingBytes>;

/// A payload being decoded and where it lies in a [`Backing`]: either the
/// backing's own bytes or a copy of some of them (read from its file), so
/// that rows can refer to the backing by offset either way.
#[derive(Clone, Copy)]
pub(crate) struct Backed<'a> {
    pub(crate) backing: &'a Backing,
    /// Offset in the backing minus address in the payload (wrapping).
    delta: usize,
}

impl<'a> Backed<'a> {
    /// `payload` holds the backing's bytes from offset `off` on.
    pub(crate) fn new(backing: &'a Backing, payload: &[u8], off: usize) -> Self {
        Backed {
            backing,
            delta: off.wrapping_sub(payload.as_ptr() as usize),
        }
    }

    /// `payload` is a slice of the backing's own bytes.
    pub(crate) fn in_place(backing: &'a Backing, payload: &[u8]) -> Self {
        let off = payload.as_ptr() as usize - backing.bytes().as_ptr() as usize;
        Self::new(backing, payload, off)
    }

    /// Where `s`, a slice of the payload, is in the backing: (offset, len).
    pub(crate) fn span_of(&self, s: &[u8]) -> Option<(usize, usize)> {
        let off = (s.as_ptr() as usize).wrapping_add(self.delta);
        (off.checked_add(s.len())? <= self.backing.bytes().len()).then_some((off, s.len()))
    }
}

/// Rows of a `u8` column (or byte strings of a `bytes` column) that are at
/// least this long are referred to in a memory-mapped input (one copy, map →
/// batch, instead of two); shorter ones are copied into the column.
pub(crate) const MAPPED_MIN_BYTES: usize = 4096;

/// Mapped rows at least this long are copied out with
/// [`BackingBytes::read_into`] (one copy by the kernel, page cache → batch,
/// with no page of the file mapped, faulted in or released) instead of from
/// the map.
pub(crate) const READ_MIN_BYTES: usize = 32 << 10;

/// Span offset of a row whose elements are held in the column's `values`.
pub(crate) const OWNED: usize = usize::MAX;

/// A check left to be made on a row's bytes when they are copied out of
/// the chunk instead of when the record was read — a format's checksum
/// (TFRecord's payload CRC-32C), so that a large row's bytes are read from
/// memory once: copied, then checked on the copy while it is in cache.
pub(crate) trait RowCheck: Send + Sync + fmt::Debug {
    /// Check the row, given its bytes (in the backing or a copy of them):
    /// `Err` is the error reading the record with the check would have given.
    fn verify(&self, row: &[u8]) -> Result<()>;
}

/// A [`RowCheck`] due on a row, shared by every chunk the row is moved to.
pub(crate) type DueCheck = Arc<dyn RowCheck>;

/// A row that refers to a backing, as collation copies it: its bytes and
/// the CRC check still due on them (if any).
pub(crate) struct MappedRow<'a> {
    /// The row's bytes in the backing.
    pub(crate) bytes: &'a [u8],
    backing: &'a Backing,
    /// Where `bytes` start in the backing.
    off: usize,
    check: Option<&'a DueCheck>,
}

impl MappedRow<'_> {
    /// Check the record's CRC on `copy`, a copy of [`bytes`](Self::bytes)
    /// (read while it is still in cache); `Ok` if no check is due.
    #[inline]
    pub(crate) fn verify_copy(&self, copy: &[u8]) -> Result<()> {
        match self.check {
            None => Ok(()),
            Some(c) => c.verify(copy),
        }
    }

    /// Copy the row into all of `dst` (its exact length), then check any
    /// CRC due on the copy. A row of at least [`READ_MIN_BYTES`] is read
    /// from the file where the backing can ([`BackingBytes::read_into`]),
    /// else copied from the map.
    ///
    /// # Panics
    ///
    /// If `dst` is not as long as the row.
    #[inline]
    pub(crate) fn copy_to(&self, dst: &mut [MaybeUninit<u8>]) -> Result<()> {
        let len = self.bytes.len();
        assert_eq!(
            dst.len(),
            len,
            "a row of the wrong length in a checked chunk"
        );
        let read = if len >= READ_MIN_BYTES {
            self.backing.read_into(self.off, dst)
        } else {
            None
        };
        match read {
            Some(r) => r?,
            // SAFETY: same lengths (asserted); `dst` is spare capacity of a
            // batch's vector, which no backing's bytes can overlap.
            None => unsafe {
                std::ptr::copy_nonoverlapping(self.bytes.as_ptr(), dst.as_mut_ptr().cast(), len)
            },
        }
        // SAFETY: all of `dst` was written just above (or an error returned).
        let copy = unsafe { std::slice::from_raw_parts(dst.as_ptr().cast::<u8>(), len) };
        self.verify_copy(copy)
    }
}

/// The rows of a `u8` or `bytes` column that refer to a [`Backing`] instead
/// of holding their bytes. Each row is either mapped — one span of the
/// backing: a `u8` row's elements, or a `bytes` row's one byte string — or
/// owned (its elements in the column's `values`, at `owned_ends`).
#[derive(Clone)]
pub(crate) struct MappedRows {
    pub(crate) backing: Backing,
    /// Per committed row: (offset, len) of its bytes in the backing; offset
    /// [`OWNED`] for an owned row.
    pub(crate) spans: Vec<(usize, usize)>,
    /// Per committed row: where its owned elements end in `values`.
    pub(crate) owned_ends: Vec<usize>,
    /// Per committed row: the CRC check due when its span is copied out.
    pub(crate) checks: Vec<Option<DueCheck>>,
    /// Bytes of the committed mapped rows.
    pub(crate) mapped_bytes: usize,
    /// The span of the backing the mapped rows cover (lowest start, highest end).
    pub(crate) lo: usize,
    pub(crate) hi: usize,
    /// The uncommitted row's span: (offset, len).
    pub(crate) pending: Option<(usize, usize)>,
    /// The uncommitted row's due check (set just before it is committed).
    pub(crate) pending_check: Option<DueCheck>,
}

impl MappedRows {
    /// Start mapping rows of a column that has `ends` (all owned so far).
    pub(crate) fn new(backing: Backing, ends: &[usize]) -> Self {
        MappedRows {
            backing,
            spans: vec![(OWNED, 0); ends.len()],
            owned_ends: ends.to_vec(),
            checks: vec![None; ends.len()],
            mapped_bytes: 0,
            lo: usize::MAX,
            hi: 0,
            pending: None,
            pending_check: None,
        }
    }

    pub(crate) fn bytes(&self, off: usize, len: usize) -> &[u8] {
        &self.backing.bytes()[off..off + len]
    }

    /// Committed row `i` if it is mapped, with its due check.
    #[inline]
    pub(crate) fn row(&self, i: usize) -> Option<MappedRow<'_>> {
        match self.spans[i] {
            (OWNED, _) => None,
            (off, len) => Some(MappedRow {
                bytes: self.bytes(off, len),
                backing: &self.backing,
                off,
                check: self.checks[i].as_ref(),
            }),
        }
    }
}

impl Drop for MappedRows {
    /// The rows are gone: let the pages they covered leave the resident set,
    /// so that what a chunk holds is what it costs (see [`Chunk::memory_bytes`]).
    fn drop(&mut self) {
        if self.lo < self.hi {
            self.backing.release(self.lo..self.hi);
        }
    }
}

impl fmt::Debug for MappedRows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedRows")
            .field("spans", &self.spans)
            .field("owned_ends", &self.owned_ends)
            .field("checks", &self.checks)
            .field("mapped_bytes", &self.mapped_bytes)
            .field("pending", &self.pending)
            .finish()
    }
}
