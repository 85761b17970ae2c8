//! The records lost after a broken frame of a file or a buffer: the frames
//! found after it by their CRCs (see the module docs of `tfrecord`).

use super::frame::{masked_crc32c, parse_header, FOOTER_BYTES, HEADER_BYTES};
use crate::backing::Backing;
use crate::input::InputFile;

/// Positioned reads of a file or buffer, for counting frames after a break.
pub(super) trait ReadAt {
    fn total(&self) -> u64;
    /// Bytes `pos..pos + buf.len()` into `buf` (the caller keeps within `len`).
    fn fetch(&self, pos: u64, buf: &mut [u8]) -> Option<()>;
}

impl ReadAt for &[u8] {
    fn total(&self) -> u64 {
        <[u8]>::len(self) as u64
    }
    fn fetch(&self, pos: u64, buf: &mut [u8]) -> Option<()> {
        let at = usize::try_from(pos).ok()?;
        buf.copy_from_slice(self.get(at..at.checked_add(buf.len())?)?);
        Some(())
    }
}

impl ReadAt for Backing {
    fn total(&self) -> u64 {
        InputFile::len(self)
    }
    fn fetch(&self, pos: u64, buf: &mut [u8]) -> Option<()> {
        self.read_at_init(pos, buf).ok()
    }
}

/// The payload length of a well-formed frame at `pos` (its length CRC
/// matches, it fits `max` and the bytes left), else `None`.
fn frame_fits(src: &dyn ReadAt, pos: u64, max: u64) -> Option<u64> {
    let mut h = [0u8; HEADER_BYTES];
    src.fetch(pos, &mut h)?;
    let len = parse_header(&h, max).ok()?;
    let end = pos
        .checked_add(HEADER_BYTES as u64 + FOOTER_BYTES as u64)?
        .checked_add(len)?;
    (end <= src.total()).then_some(len)
}

/// Whether the frame at `pos` (well formed, payload `len` bytes) has the
/// payload CRC it stores: a frame found by scanning must match both CRCs.
fn payload_matches(src: &dyn ReadAt, pos: u64, len: u64) -> bool {
    let Ok(n) = usize::try_from(len) else {
        return false;
    };
    let mut payload = vec![0u8; n + FOOTER_BYTES];
    if src.fetch(pos + HEADER_BYTES as u64, &mut payload).is_none() {
        return false;
    }
    let stored = u32::from_le_bytes(payload[n..].try_into().expect("4 bytes"));
    stored == masked_crc32c(&payload[..n])
}

/// The records lost when the frame at `broken` cannot be read: it, and
/// the frames after it (see the module docs). `None` if no frame can be
/// found within `max` bytes past a break before the end (then how many
/// records the rest held is not known).
pub(super) fn records_after_break(src: &dyn ReadAt, broken: u64, max: u64) -> Option<u64> {
    let end = src.total();
    // A header whose length CRC matches frames its record even when the
    // record is cut short or over the bound: the next frame is after it.
    let mut pos = match frame_fits(src, broken, u64::MAX) {
        Some(len) => broken + (HEADER_BYTES + FOOTER_BYTES) as u64 + len,
        None => scan_for_frame(src, broken + 1, max)?,
    };
    let mut lost = 1u64;
    while pos < end {
        match frame_fits(src, pos, max) {
            Some(len) => {
                lost += 1;
                pos += (HEADER_BYTES + FOOTER_BYTES) as u64 + len;
            }
            None => {
                // Another break: one more record lost there.
                lost += 1;
                pos = scan_for_frame(src, pos + 1, max)?;
            }
        }
    }
    Some(lost)
}

/// The first offset at or after `from` where a frame with both CRCs
/// matching begins, looking at most `max` bytes on; the end of the file
/// when none is left to find there (only bytes too few for a frame).
fn scan_for_frame(src: &dyn ReadAt, from: u64, max: u64) -> Option<u64> {
    const BLOCK: usize = 1 << 20;
    let end = src.total();
    let limit = from
        .saturating_add(max)
        .saturating_add((HEADER_BYTES + FOOTER_BYTES) as u64)
        .min(end);
    let mut block = vec![0u8; BLOCK + HEADER_BYTES];
    let mut at = from;
    while at < limit {
        // Headers starting in `at..at + BLOCK` (their 12 bytes in the block).
        let n = (end - at).min((BLOCK + HEADER_BYTES) as u64) as usize;
        if n < HEADER_BYTES + FOOTER_BYTES {
            return Some(end);
        }
        src.fetch(at, &mut block[..n])?;
        for i in 0..=(n - HEADER_BYTES).min(BLOCK - 1) {
            let p = at + i as u64;
            if p >= limit {
                break;
            }
            let h: &[u8; HEADER_BYTES] = block[i..i + HEADER_BYTES].try_into().expect("12 bytes");
            let Ok(len) = parse_header(h, max) else {
                continue;
            };
            if frame_fits(src, p, max) == Some(len) && payload_matches(src, p, len) {
                return Some(p);
            }
        }
        at += BLOCK as u64;
    }
    // Nothing to the end: the rest is the broken record's.
    (limit == end).then_some(end)
}
