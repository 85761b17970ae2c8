//! An array's rows, wherever its data lives ([`Data`]): read by position
//! from a regular file through a reused window (a Fortran-order array
//! gathered element by element into C order), loaded whole (a
//! Fortran-order array from a stream), or read forward from a stream
//! through a bounded buffer ([`StreamRows`]). An [`Array`] is one field of
//! a reader: its name, header and data.

use std::io::{self, Read};
use std::sync::Arc;

use super::header::Header;
use crate::error::{Error, Result};
use crate::input::{InputFile, Window};
use crate::values::Values;

/// Rows per block when a block has to be copied (stream buffer, Fortran gather).
pub(super) const BLOCK_BYTES: usize = 1 << 20;

/// Bytes read past an array's data, at most, to reach the end of a stream.
const MAX_TRAILING: u64 = 1 << 20;

/// C-order rows read in order from a stream, through a bounded buffer.
pub(super) struct StreamRows {
    src: Box<dyn Read + Send>,
    buf: Vec<u8>,
    /// Row index of `buf[0]`.
    first: u64,
    /// Rows held in `buf`.
    held: usize,
    /// The first row that cannot be read, and why (sticky).
    pub(super) failure: Option<(u64, String)>,
    /// The stream was read to its end after the last row.
    finished: bool,
}

/// Where an array's data lives.
pub(super) enum Data {
    /// In a regular file, from byte `start`, read by position through
    /// `window` (C order) or gathered column by column (Fortran order).
    File {
        file: Arc<InputFile>,
        start: u64,
        window: Window,
    },
    /// Loaded whole (a Fortran-order array from a stream).
    Owned(Vec<u8>),
    /// A stream of C-order rows.
    Stream(Box<StreamRows>),
}

/// Why rows cannot be read.
pub(super) enum RowsError {
    /// Row `.0` is bad or missing: `.1` says how.
    Row(u64, String),
    /// The file cannot be read there (it was shortened): an I/O error.
    Io(Error),
}

impl From<(u64, String)> for RowsError {
    fn from((row, what): (u64, String)) -> Self {
        RowsError::Row(row, what)
    }
}

/// One array of a file: its field name, header and data.
pub(super) struct Array {
    /// Field name.
    pub(super) name: String,
    /// `entry `x.npy`: ` for npz entries, empty for a .npy file (for messages).
    pub(super) label: String,
    pub(super) h: Header,
    pub(super) data: Data,
    /// Scratch for gathered Fortran rows.
    scratch: Vec<u8>,
    /// Scratch for one column of a Fortran-order block read from a file.
    column: Vec<u8>,
    /// Scratch for decoding before a conversion.
    pub(super) conv: Values,
}

impl Array {
    pub(super) fn new(name: String, label: String, h: Header, data: Data) -> Self {
        let conv = Values::new(h.kind.dtype());
        Array {
            name,
            label,
            h,
            data,
            scratch: Vec::new(),
            column: Vec::new(),
            conv,
        }
    }

    /// Bytes of rows `i..i + k` in C order, or why the first of them that
    /// cannot be read cannot.
    pub(super) fn rows_bytes(&mut self, i: u64, k: usize) -> std::result::Result<&[u8], RowsError> {
        let h = &self.h;
        let rb = h.row_bytes;
        match &mut self.data {
            Data::Stream(s) => Ok(s.rows(i, k, rb, h.rows)?),
            Data::File {
                file,
                start,
                window,
            } if !h.fortran => window
                .get(file, *start + i * rb as u64, k * rb)
                .map_err(RowsError::Io),
            Data::File { file, start, .. } => {
                gather_fortran_file(file, *start, h, i, k, &mut self.scratch, &mut self.column)
                    .map_err(RowsError::Io)?;
                Ok(&self.scratch)
            }
            Data::Owned(data) => {
                gather_fortran(data, &h.shape, h.kind.size(), i, k, &mut self.scratch);
                Ok(&self.scratch)
            }
        }
    }

    /// File (stream) offset of row `i`'s first byte.
    pub(super) fn row_offset(&self, i: u64) -> u64 {
        let step = if self.h.fortran {
            self.h.kind.size() as u64
        } else {
            self.h.row_bytes as u64
        };
        self.h.data_offset as u64 + i * step
    }
}

/// Gather rows `i..i + k` of a Fortran-order array whose data starts at
/// byte `start` of `file` into `out`, in C order: one positioned read per
/// element of a row (the block's values of that element lie together).
fn gather_fortran_file(
    file: &InputFile,
    start: u64,
    h: &Header,
    i: u64,
    k: usize,
    out: &mut Vec<u8>,
    column: &mut Vec<u8>,
) -> Result<()> {
    out.clear();
    let dims = &h.shape[1..];
    let (rows, size) = (h.rows, h.kind.size());
    if h.row_elems == 0 || k == 0 {
        return Ok(());
    }
    out.resize(k * h.row_bytes, 0);
    column.resize(k * size, 0);
    // The element's index over the row dims, first fastest (Fortran order),
    // and its place in a C-order row.
    let mut idx = vec![0usize; dims.len()];
    for c in 0..h.row_elems as u64 {
        let mut p = 0;
        for (d, &x) in dims.iter().zip(&idx) {
            p = p * d + x;
        }
        file.read_at_init(start + (c * rows + i) * size as u64, column)?;
        for (r, v) in column.chunks_exact(size).enumerate() {
            let at = (r * h.row_elems + p) * size;
            out[at..at + size].copy_from_slice(v);
        }
        for (x, &d) in idx.iter_mut().zip(dims) {
            *x += 1;
            if *x < d {
                break;
            }
            *x = 0;
        }
    }
    Ok(())
}

/// Gather rows `i..i + k` of a Fortran-order array into `out`, in C order.
fn gather_fortran(data: &[u8], shape: &[usize], size: usize, i: u64, k: usize, out: &mut Vec<u8>) {
    out.clear();
    let dims = &shape[1..];
    let row_elems: usize = dims.iter().product();
    if row_elems == 0 || k == 0 {
        return;
    }
    // Element strides of the row dims: stride[d] = shape[0] * … * shape[d].
    let mut strides = Vec::with_capacity(dims.len());
    let mut s = shape[0];
    for &d in dims {
        strides.push(s);
        s *= d;
    }
    out.reserve(k * row_elems * size);
    let mut idx = vec![0usize; dims.len()];
    for r in i as usize..i as usize + k {
        idx.iter_mut().for_each(|x| *x = 0);
        let mut off = r;
        for _ in 0..row_elems {
            out.extend_from_slice(&data[off * size..off * size + size]);
            // Odometer over the row dims, last fastest (C order).
            for d in (0..dims.len()).rev() {
                idx[d] += 1;
                off += strides[d];
                if idx[d] < dims[d] {
                    break;
                }
                off -= strides[d] * dims[d];
                idx[d] = 0;
            }
        }
    }
}

impl StreamRows {
    pub(super) fn new(src: Box<dyn Read + Send>) -> Self {
        StreamRows {
            src,
            buf: Vec::new(),
            first: 0,
            held: 0,
            failure: None,
            finished: false,
        }
    }

    /// Make row `i` come next from the buffer or the stream (forward only):
    /// rows between the buffer's end and `i` are read and discarded.
    pub(super) fn skip_to(&mut self, i: u64, rb: usize) -> std::result::Result<(), (u64, String)> {
        let next = self.first + self.held as u64;
        if i < self.first {
            return Err((
                i,
                format!(
                    "cannot go back to row {i} in a compressed stream (at row {})",
                    self.first
                ),
            ));
        }
        if i <= next {
            return Ok(());
        }
        self.buf.clear();
        self.held = 0;
        self.first = next;
        let want = (i - next) * rb as u64;
        let got = io::copy(&mut (&mut self.src).take(want), &mut io::sink());
        match got {
            Ok(n) if n == want => {
                self.first = i;
                Ok(())
            }
            Ok(n) => {
                let bad = next + n / rb.max(1) as u64;
                self.first = bad;
                Err((bad, format!("stream ends inside row {bad} (truncated)")))
            }
            Err(e) => Err((next, format!("reading row {next}: {e}"))),
        }
    }

    /// Rows `i..i + k` (forward only); reads ahead up to a block.
    fn rows(
        &mut self,
        i: u64,
        k: usize,
        rb: usize,
        total: u64,
    ) -> std::result::Result<&[u8], (u64, String)> {
        if let Some((bad, what)) = &self.failure {
            if i + k as u64 > *bad {
                return Err((*bad, what.clone()));
            }
        }
        if let Err(f) = self.skip_to(i, rb) {
            self.failure = Some(f.clone());
            return Err(f);
        }
        if self.first + (self.held as u64) < i + k as u64 {
            // Drop the rows before `i` (once per refill), then read ahead.
            let drop = (i - self.first) as usize;
            self.buf.drain(..drop * rb);
            self.held -= drop;
            self.first = i;
            let ahead = (BLOCK_BYTES / rb.max(1)).max(k) as u64;
            let target = ahead.min(total - self.first) as usize;
            self.fill(target, rb, total);
        }
        if let Some((bad, what)) = &self.failure {
            if i + k as u64 > *bad {
                return Err((*bad, what.clone()));
            }
        }
        if self.first + (self.held as u64) < i + k as u64 {
            let next = self.first + self.held as u64;
            return Err((next, format!("row {next} is not available")));
        }
        let off = (i - self.first) as usize * rb;
        Ok(&self.buf[off..off + k * rb])
    }

    /// Read rows until `target` are held, or the stream fails.
    fn fill(&mut self, target: usize, rb: usize, total: u64) {
        if rb == 0 {
            self.held = target;
        } else {
            let want = (target - self.held) * rb;
            let before = self.buf.len();
            let res = (&mut self.src).take(want as u64).read_to_end(&mut self.buf);
            let got = self.buf.len() - before;
            self.buf.truncate(before + got / rb * rb);
            self.held += got / rb;
            let next = self.first + self.held as u64;
            match res {
                Err(e) => {
                    self.failure = Some((next, format!("reading row {next}: {e}")));
                    return;
                }
                Ok(_) if got < want => {
                    self.failure = Some((
                        next,
                        format!(
                            "stream ends inside row {next} of {total} (truncated: {} of {rb} bytes)",
                            got % rb
                        ),
                    ));
                    return;
                }
                Ok(_) => {}
            }
        }
        if self.first + self.held as u64 == total && !self.finished {
            self.finished = true;
            self.finish(total);
        }
    }

    /// After the last row: read to the end of the stream (which checks a
    /// gzip trailer).
    fn finish(&mut self, total: u64) {
        let last = total.saturating_sub(1);
        match io::copy(&mut (&mut self.src).take(MAX_TRAILING + 1), &mut io::sink()) {
            Err(e) => self.failure = Some((last, format!("after the last row: {e}"))),
            Ok(n) if n > MAX_TRAILING => {
                log::warn!("more than {MAX_TRAILING} bytes follow the array data; not checked")
            }
            Ok(_) => {}
        }
    }
}

/// Load a whole Fortran-order array from a stream.
pub(super) fn load_whole(
    src: &mut dyn Read,
    h: &Header,
    max: u64,
) -> std::result::Result<Vec<u8>, String> {
    if h.data_bytes > max {
        return Err(format!(
            "a Fortran-order array in a compressed stream is read whole; its {} bytes exceed max_record_bytes ({max})",
            h.data_bytes
        ));
    }
    let mut v = Vec::with_capacity((h.data_bytes as usize).min(BLOCK_BYTES));
    src.take(h.data_bytes)
        .read_to_end(&mut v)
        .map_err(|e| format!("reading the array data: {e}"))?;
    if (v.len() as u64) < h.data_bytes {
        return Err(format!(
            "offset {}: data ends after {} of {} bytes (truncated)",
            h.data_offset + v.len(),
            v.len(),
            h.data_bytes
        ));
    }
    Ok(v)
}
