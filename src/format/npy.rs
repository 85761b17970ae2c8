//! NumPy `.npy` and `.npz` files: row `i` of each array is instance `i`.
//!
//! This module owns the NPY header parser (format versions 1.0, 2.0 and 3.0,
//! the Python-literal dict header), the element decoders (every byte order,
//! C and Fortran order, half floats converted by hand), the [`NpyFormat`]
//! (one array, its field named after the file stem) and the [`NpzFormat`]
//! (a zip of `.npy` entries, stored or deflated, one field per entry) and
//! the [`NpyColumnsFormat`] (several `.npy` files as the columns of the
//! same rows: `npy-columns:images.npy,labels.npy`).
//!
//! Element types become these [`DType`](crate::DType)s: `b1` → bool, `i1`/`i2`/`i4` → i32,
//! `i8` → i64, `u1` → u8, `u2`/`u4` → i64, `u8` → i64 (a value above
//! `i64::MAX` is an error naming the record and field), `f2`/`f4` → f32,
//! `f8` → f64. A record's [`Tensor`](crate::Tensor) has the row's shape (`shape[1..]`, `[]`
//! for a 1-D array).
//!
//! Uncompressed `.npy` files and stored npz entries are read by position
//! (`pread`, never a memory map: a file shortened while it is read is an
//! [`Error::Io`](crate::Error::Io) naming it, not a `SIGBUS`), a block of rows at a time into
//! a reused page-aligned window (a Fortran-order array by one read per
//! element of a row); [`RecordReader::read_chunk`] decodes whole blocks
//! into the chunk's columns. Compressed `.npy.gz` files, `.npy` that are
//! not regular files (a FIFO, a pipe) and deflated npz entries are read as
//! streams through a bounded buffer (a Fortran-order array in a stream is
//! loaded whole, up to `max_record_bytes`). An `.npz` must be a regular
//! file (its directory is at its end).
//!
//! With `verify_checksums`, every npz entry's CRC-32 is checked over the
//! whole entry before any row of the file is read (a deflated entry is
//! decompressed twice: once for the check, in bounded memory, once for the
//! rows): a CRC covers its entry as a whole, so a corrupt entry is an
//! [`Error::BadFile`](crate::Error::BadFile) naming it, and none of its rows — neither the bad one
//! nor any other — is delivered.
//!
//! ```
//! use feedline::format::{npy::NpyFormat, Format, OpenOptions};
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("v.npy");
//! let mut file = b"\x93NUMPY\x01\x00".to_vec();
//! let header = "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }";
//! let header = format!("{header:<117}\n");
//! file.extend_from_slice(&(header.len() as u16).to_le_bytes());
//! file.extend_from_slice(header.as_bytes());
//! for v in [7i32, 8, 9] {
//!     file.extend_from_slice(&v.to_le_bytes());
//! }
//! std::fs::write(&path, &file).unwrap();
//! let mut r = NpyFormat.open(&path, &OpenOptions::default()).unwrap();
//! assert_eq!(r.len_hint(), Some(3));
//! let rec = r.next_record().unwrap().unwrap();
//! assert_eq!(rec.to_json(), serde_json::json!({"v": [7]}));
//! ```

//!
//! Its files: `header.rs` (the NPY header parser), `decode.rs` (element
//! decoding), `array.rs` (an array's rows, in a file, in memory or in a
//! stream), `reader.rs` (the reader and its block fast path), `file.rs`
//! (opening a `.npy`), `npz.rs` and `crc.rs` (opening an `.npz`, its
//! entries' CRC-32 checks), `columns.rs` (column groups).

use std::path::Path;

use super::{Format, OpenOptions, RecordReader};
use crate::error::Result;

mod array;
mod columns;
mod crc;
mod decode;
mod file;
mod header;
mod npz;
mod reader;

pub use columns::{columns_spec, NpyColumnsFormat, NPY_COLUMNS};
use file::open_npy;
use npz::open_npz;

/// The `.npy` format: one array per file, its field named after the file stem.
#[derive(Clone, Copy, Debug, Default)]
pub struct NpyFormat;

/// The `.npz` format: a zip of `.npy` entries, one field per entry (named
/// after the entry, minus `.npy`); all arrays must have the same number of rows.
#[derive(Clone, Copy, Debug, Default)]
pub struct NpzFormat;

impl Format for NpyFormat {
    fn name(&self) -> &str {
        "npy"
    }

    fn extensions(&self) -> &[&str] {
        &["npy"]
    }

    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        Ok(Box::new(open_npy(path, opts)?))
    }
}

impl Format for NpzFormat {
    fn name(&self) -> &str {
        "npz"
    }

    fn extensions(&self) -> &[&str] {
        &["npz"]
    }

    fn open(&self, path: &Path, opts: &OpenOptions) -> Result<Box<dyn RecordReader>> {
        Ok(Box::new(open_npz(path, opts)?))
    }
}
