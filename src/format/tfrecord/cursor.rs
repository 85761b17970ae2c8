//! A reader's position and error state ([`Cursor`]): where the next frame
//! is, which record it is, what to check, and the fatal error that later
//! calls repeat.

use std::io;
use std::path::PathBuf;

use super::frame::{check_payload_crc, parse_header, FOOTER_BYTES, HEADER_BYTES};
use crate::error::{Error, Result};
use crate::provenance::{Location, SourceId};

/// A fatal error, kept to be repeated by later calls.
#[derive(Clone)]
pub(super) enum Failure {
    Corrupt(Location, String),
    Io(io::ErrorKind, String),
}

/// Position and error state of a reader (separate from the input so that a
/// payload borrowed from the input can be decoded while the cursor moves).
pub(super) struct Cursor {
    pub(super) source: SourceId,
    pub(super) path: PathBuf,
    /// Offset of the next frame in the decompressed stream.
    pub(super) pos: u64,
    /// Index of the next frame.
    pub(super) index: u64,
    /// Frames still to skip (start_record).
    pub(super) skip_to: u64,
    pub(super) verify: bool,
    /// Leave the payload CRC of a record with one span in the file to be checked
    /// when the span is copied out (`OpenOptions::defer_checksums`).
    pub(super) defer: bool,
    /// The last record framed was large: try framing the next one sparsely
    /// (see [`SPARSE_MIN_BYTES`](super::deferred::SPARSE_MIN_BYTES)).
    pub(super) sparse: bool,
    /// Records decoded from their first and last bytes (tests read it).
    pub(super) sparse_records: u64,
    pub(super) max_record_bytes: u64,
    pub(super) can_continue: bool,
    pub(super) failed: Option<Failure>,
}

impl Cursor {
    pub(super) fn location(&self) -> Location {
        Location::new(self.source, self.index, Some(self.pos))
    }

    pub(super) fn failure_error(&self, f: &Failure) -> Error {
        match f {
            Failure::Corrupt(loc, what) => Error::corrupt(loc.clone(), what.clone()),
            Failure::Io(kind, msg) => Error::io(&self.path, io::Error::new(*kind, msg.clone())),
        }
    }

    /// The frame at the cursor is broken: nothing after it can be read.
    #[cold]
    pub(super) fn fatal(&mut self, what: String) -> Error {
        let f = Failure::Corrupt(self.location(), what);
        let e = self.failure_error(&f);
        self.failed = Some(f);
        self.can_continue = false;
        e
    }

    /// Reading the stream failed: corrupt compressed data is a corrupt
    /// record here; any other I/O error is an I/O error on the file.
    #[cold]
    pub(super) fn io_fatal(&mut self, e: io::Error) -> Error {
        match e.kind() {
            io::ErrorKind::InvalidData
            | io::ErrorKind::InvalidInput
            | io::ErrorKind::UnexpectedEof => self.fatal(format!("corrupt compressed stream: {e}")),
            kind => {
                let f = Failure::Io(kind, e.to_string());
                self.failed = Some(f);
                self.can_continue = false;
                Error::io(&self.path, e)
            }
        }
    }

    /// Reading the file by position failed (it was shortened, say): an
    /// I/O error naming it, and nothing after it can be read.
    #[cold]
    pub(super) fn file_fatal(&mut self, e: Error) -> Error {
        if let Error::Io { source, .. } = &e {
            self.failed = Some(Failure::Io(source.kind(), source.to_string()));
        } else {
            self.failed = Some(Failure::Io(io::ErrorKind::Other, e.to_string()));
        }
        self.can_continue = false;
        e
    }

    /// Check a frame header; returns the payload length.
    #[inline(always)]
    pub(super) fn header(&mut self, h: &[u8; HEADER_BYTES]) -> Result<u64> {
        parse_header(h, self.max_record_bytes).map_err(|what| self.fatal(what))
    }

    /// Move past a frame whose payload has `len` bytes; returns its location.
    #[inline(always)]
    pub(super) fn advance(&mut self, len: usize) -> Location {
        let loc = self.location();
        self.pos += (HEADER_BYTES + len + FOOTER_BYTES) as u64;
        self.index += 1;
        loc
    }

    /// Check the payload CRC (if asked) and move past the frame. A bad CRC
    /// skips the record: the next call reads the next one.
    #[inline(always)]
    pub(super) fn finish(
        &mut self,
        payload: &[u8],
        footer: [u8; 4],
        check: bool,
    ) -> Result<Location> {
        let loc = self.advance(payload.len());
        if check && self.verify {
            let stored = u32::from_le_bytes(footer);
            if let Err(e) = check_payload_crc(&loc, stored, crc32c::crc32c(payload)) {
                self.can_continue = true;
                return Err(e);
            }
        }
        Ok(loc)
    }
}
