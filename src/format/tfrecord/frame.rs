//! The TFRecord framing: a frame's length and payload CRCs (CRC-32C,
//! masked), its header checked, and one record framed.

use crate::error::{Error, Result};
use crate::provenance::Location;

/// Bytes before the payload: length and its CRC.
pub const HEADER_BYTES: usize = 12;
/// Bytes after the payload: its CRC.
pub const FOOTER_BYTES: usize = 4;

/// The TFRecord CRC mask: `((c >> 15) | (c << 17)) + 0xa282ead8`.
#[inline]
pub fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// The masked CRC-32C of `data`, as stored in TFRecord frames.
///
/// ```
/// // The frame header of an empty record: length 0, then its masked CRC.
/// assert_eq!(feedline::format::tfrecord::masked_crc32c(&0u64.to_le_bytes()), 0x0798_0329);
/// ```
#[inline]
pub fn masked_crc32c(data: &[u8]) -> u32 {
    mask_crc(crc32c::crc32c(data))
}

/// Append one framed record to `out`.
pub fn frame_into(payload: &[u8], out: &mut Vec<u8>) {
    let len = (payload.len() as u64).to_le_bytes();
    out.reserve(HEADER_BYTES + payload.len() + FOOTER_BYTES);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(&masked_crc32c(payload).to_le_bytes());
}

/// A frame header's payload length, or what is wrong with it.
#[inline(always)]
pub(super) fn parse_header(
    h: &[u8; HEADER_BYTES],
    max_record_bytes: u64,
) -> std::result::Result<u64, String> {
    let len_bytes: [u8; 8] = h[..8].try_into().expect("8 bytes");
    let stored = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
    let computed = masked_crc32c(&len_bytes);
    if stored != computed {
        return Err(format!(
            "bad length CRC: stored 0x{stored:08x}, computed 0x{computed:08x}"
        ));
    }
    let len = u64::from_le_bytes(len_bytes);
    if len > max_record_bytes {
        return Err(format!(
            "record length {len} exceeds max_record_bytes {max_record_bytes}"
        ));
    }
    Ok(len)
}

/// `Ok` if a payload whose CRC-32C is `crc` matches the masked CRC `stored`
/// in its frame; else the error for the record at `loc`.
#[inline]
pub(crate) fn check_payload_crc(loc: &Location, stored: u32, crc: u32) -> Result<()> {
    let computed = mask_crc(crc);
    if stored == computed {
        return Ok(());
    }
    Err(Error::corrupt(
        loc.clone(),
        format!("bad payload CRC: stored 0x{stored:08x}, computed 0x{computed:08x}"),
    ))
}
