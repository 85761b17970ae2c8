//! Deferred payload CRCs and large records: a row whose one span stays in
//! the file carries its record's CRC-32C check ([`DeferredCrc`]), made on
//! the batch's copy of the span; and a large record is framed and decoded
//! from its first and last bytes alone when that span covers the rest.

use std::sync::Arc;

use super::cursor::Cursor;
use super::frame::{check_payload_crc, parse_header, FOOTER_BYTES, HEADER_BYTES};
use super::frames::Frame;
use crate::backing::{Backed, Backing, RowCheck};
use crate::chunk::Chunk;
use crate::error::Result;
use crate::format::example::ExampleDecoder;
use crate::provenance::{Location, Origin};

/// A regular file's records whose payload is at least this long (once one
/// such record has been seen) are framed by reading only their first
/// [`SPARSE_HEAD`] and last [`SPARSE_TAIL`] bytes from the file, when the
/// decoded row's one span in the file covers everything in between: that
/// span is then read straight into the batch (see `crate::backing`).
pub(super) const SPARSE_MIN_BYTES: usize = 64 << 10;
/// Payload bytes read at the start of a large record.
const SPARSE_HEAD: usize = 4096;
/// Payload bytes read at the end of a large record (then its footer).
const SPARSE_TAIL: usize = 4096;

/// A record's payload CRC-32C, checked when its one span in the file is copied
/// out instead of when the record was read, so that its bytes are read from
/// memory once (copy, then CRC of the copy while it is in cache). The
/// payload is `prefix ++ span ++ suffix`: the CRC state after the prefix and
/// the suffix (its bytes when short, else its CRC and length) are kept, so
/// nothing in the backing is read again but the span.
#[derive(Clone, Debug)]
struct DeferredCrc {
    /// CRC-32C state after the payload bytes before the span.
    prefix: u32,
    /// The payload bytes after the span.
    suffix: Suffix,
    /// The masked CRC stored in the frame.
    stored: u32,
    /// The record, for the error.
    location: Location,
}

/// Suffixes up to this long are kept as bytes (appended to the CRC, which
/// is cheap); longer ones as a CRC to combine (`crc32c_combine` costs
/// microseconds).
const INLINE_SUFFIX: usize = 40;

/// The payload bytes after a deferred span.
#[derive(Clone, Debug)]
enum Suffix {
    Bytes { bytes: [u8; INLINE_SUFFIX], len: u8 },
    Crc { crc: u32, len: usize },
}

impl DeferredCrc {
    /// A check of a payload whose bytes before the span have CRC-32C
    /// (running state) `prefix`, whose bytes after it are `suffix`, and
    /// whose frame stores the masked CRC `stored`.
    fn new(prefix: u32, suffix: &[u8], stored: u32, location: Location) -> Self {
        let suffix = match <u8>::try_from(suffix.len()) {
            Ok(len) if suffix.len() <= INLINE_SUFFIX => {
                let mut bytes = [0; INLINE_SUFFIX];
                bytes[..suffix.len()].copy_from_slice(suffix);
                Suffix::Bytes { bytes, len }
            }
            _ => Suffix::Crc {
                crc: crc32c::crc32c(suffix),
                len: suffix.len(),
            },
        };
        DeferredCrc {
            prefix,
            suffix,
            stored,
            location,
        }
    }
}

impl RowCheck for DeferredCrc {
    /// Check the payload, given the span's bytes (in the file or a copy of
    /// them): the error is word for word the one reading would have given.
    fn verify(&self, span: &[u8]) -> Result<()> {
        let crc = crc32c::crc32c_append(self.prefix, span);
        let crc = match &self.suffix {
            Suffix::Bytes { bytes, len } => crc32c::crc32c_append(crc, &bytes[..*len as usize]),
            Suffix::Crc { crc: suffix, len } => crc32c::crc32c_combine(crc, *suffix, *len),
        };
        check_payload_crc(&self.location, self.stored, crc)
    }
}

/// Decode `frame`, a payload of `file` whose CRC is not checked yet, into
/// `chunk`. A row with exactly one span left in the file takes its CRC
/// check along (made when the span is copied out: the big bytes are read
/// once); any other row is checked here, before it is committed; a payload
/// the fast walk gives up on is checked before the generic decode names
/// what is wrong — so every error is the one checking first would give.
pub(super) fn decode_deferred(
    decoder: &mut ExampleDecoder,
    frame: &Frame<'_>,
    chunk: &mut Chunk,
    file: &Backing,
) -> Result<()> {
    let Frame {
        payload,
        stored,
        at,
        loc,
    } = frame;
    let start = *at as usize;
    let end = start + payload.len();
    let origin = Origin::new(loc.source, loc.record);
    if decoder.write_row(payload, chunk, Some(Backed::new(file, payload, *at))) {
        match chunk.pending_file_span() {
            Some((field, off, len)) if off >= start && off + len <= end => {
                let (a, b) = (off - start, off - start + len);
                let prefix = crc32c::crc32c(&payload[..a]);
                let check = DeferredCrc::new(prefix, &payload[b..], *stored, loc.clone());
                chunk.defer_check(field, Arc::new(check));
            }
            _ => {
                if let Err(e) = check_payload_crc(loc, *stored, crc32c::crc32c(payload)) {
                    chunk.rollback_row();
                    return Err(e);
                }
            }
        }
        if chunk.commit_row(origin).is_ok() {
            return Ok(());
        }
    }
    chunk.rollback_row();
    check_payload_crc(loc, *stored, crc32c::crc32c(payload))?;
    decoder.fallback(payload, chunk, loc)
}

/// Frame and decode the large record at the cursor from its first and last
/// bytes, read from the file (see [`SPARSE_MIN_BYTES`]): when the row's one
/// span in the file covers all the bytes between (which the decode
/// therefore never looked at), the row refers to it and carries the
/// payload's CRC, to be checked on the copy. True if it did (the row
/// committed, the cursor past the record); false leaves the cursor and the
/// chunk as they were, for the record to be read whole (which also names
/// anything wrong with it).
pub(super) fn sparse_record(
    decoder: &mut ExampleDecoder,
    file: &Backing,
    cur: &mut Cursor,
    chunk: &mut Chunk,
    scratch: &mut Vec<u8>,
) -> Result<bool> {
    let pos = cur.pos;
    let left = file.len().saturating_sub(pos);
    if left < (HEADER_BYTES + SPARSE_MIN_BYTES + FOOTER_BYTES) as u64 {
        return Ok(false);
    }
    let head = HEADER_BYTES + SPARSE_HEAD;
    if scratch.len() < head {
        scratch.resize(head, 0);
    }
    if file.read_at_init(pos, &mut scratch[..head]).is_err() {
        return Ok(false);
    }
    let h = scratch.first_chunk::<HEADER_BYTES>().expect("read above");
    let len = match parse_header(h, cur.max_record_bytes) {
        Ok(len) if len <= left - (HEADER_BYTES + FOOTER_BYTES) as u64 => len as usize,
        _ => return Ok(false),
    };
    if len < SPARSE_MIN_BYTES {
        return Ok(false);
    }
    let total = HEADER_BYTES + len + FOOTER_BYTES;
    if scratch.len() < total {
        scratch.resize(total, 0);
    }
    let tail = HEADER_BYTES + len - SPARSE_TAIL;
    if file
        .read_at_init(pos + tail as u64, &mut scratch[tail..total])
        .is_err()
    {
        return Ok(false);
    }
    // In tests the hole holds its real bytes, so that a decode reading them
    // would succeed: the count of sparse records then shows exactly which
    // rows the checks below let through (outside tests it holds stale bytes).
    #[cfg(test)]
    file.read_at_init(pos + head as u64, &mut scratch[head..tail])?;
    let at = pos + HEADER_BYTES as u64;
    let payload = &scratch[HEADER_BYTES..HEADER_BYTES + len];
    let stored = u32::from_le_bytes(
        scratch[HEADER_BYTES + len..total]
            .try_into()
            .expect("4 bytes"),
    );
    if decoder.write_row(payload, chunk, Some(Backed::new(file, payload, at))) {
        // The decode read nothing of the hole [SPARSE_HEAD, len - SPARSE_TAIL)
        // (stale bytes) if the one span in the file covers it: nothing inside
        // a byte string is read, and nothing else overlaps it.
        if let Some((field, off, span)) = chunk.pending_file_span() {
            let a = (off as u64).wrapping_sub(at) as usize;
            let b = a.wrapping_add(span);
            if off as u64 >= at && a <= SPARSE_HEAD && b >= len - SPARSE_TAIL && b <= len {
                let loc = cur.location();
                let prefix = crc32c::crc32c(&payload[..a]);
                let check = DeferredCrc::new(prefix, &payload[b..], stored, loc.clone());
                chunk.defer_check(field, Arc::new(check));
                if chunk
                    .commit_row(Origin::new(loc.source, loc.record))
                    .is_ok()
                {
                    cur.advance(len);
                    cur.sparse_records += 1;
                    return Ok(true);
                }
            }
        }
    }
    chunk.rollback_row();
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deferred_crc_costs_no_more_than_the_chunk_bound_allows_a_file_row() {
        use crate::backing::{DueCheck, FileRows};
        let row = std::mem::size_of::<Option<(usize, usize)>>()
            + std::mem::size_of::<usize>()
            + std::mem::size_of::<Option<DueCheck>>()
            + std::mem::size_of::<DeferredCrc>()
            + 2 * std::mem::size_of::<usize>();
        assert!(
            row <= FileRows::ROW_BYTES,
            "{row} > {}",
            FileRows::ROW_BYTES
        );
    }
}
