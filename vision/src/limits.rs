//! The limits an image is held to, as plain arithmetic that needs no other
//! part of the crate: the pixel limit's check, libjpeg's memory cap for a
//! limit, and buffers grown to exactly what is asked. The decoders
//! (`decode.rs`, `png.rs`), the resampling and the memory figure
//! (`memory.rs`) read them; this file imports only the errors.

use crate::error::{Result, VisionError};

/// JPEG's largest width or height (libjpeg-turbo's `JPEG_MAX_DIMENSION`).
const JPEG_MAX_SIDE: u64 = 65_500;

/// Bytes per image column of libjpeg's row buffers (the main controller's
/// context rows, the upsampler's and the colour converter's: about 180 for
/// 4 components of 4×4 sampling), rounded up.
const LIBJPEG_ROW_BYTES_PER_COLUMN: u64 = 256;

/// The widest JPEG a limit of `max_pixels` lets through.
pub(crate) fn jpeg_width(max_pixels: u64) -> u64 {
    max_pixels.min(JPEG_MAX_SIDE)
}

/// libjpeg's memory cap for a pixel limit (its `max_memory_to_use`): a
/// progressive file's whole-image coefficient buffers (2 bytes a pixel per
/// full-resolution component, 4 components at most, each padded by up to 32
/// pixels to whole MCUs) and the row buffers allocated before them.
pub(crate) fn libjpeg_memory_cap(max_pixels: u64) -> u64 {
    let w = jpeg_width(max_pixels);
    let padded = max_pixels.saturating_add(64 * w + 1024);
    padded
        .saturating_mul(8)
        .saturating_add(LIBJPEG_ROW_BYTES_PER_COLUMN * w)
}

/// Refuses a `width` x `height` image over the pixel limit.
pub(crate) fn too_large(width: u32, height: u32, max_pixels: u64) -> Result<()> {
    if u64::from(width) * u64::from(height) > max_pixels {
        return Err(VisionError::TooLarge {
            width: width.into(),
            height: height.into(),
            limit: max_pixels,
        });
    }
    Ok(())
}

/// The first `len` bytes of `buf`, grown (never shrunk, never cleared: the
/// caller overwrites them) to at least `len`. Growing frees the old buffer
/// first and reserves exactly `len` (no doubling, no copy), so the buffer
/// never holds more than the largest `len` asked, even for a moment.
pub(crate) fn grown(
    buf: &mut Vec<u8>,
    len: usize,
) -> std::result::Result<&mut [u8], std::collections::TryReserveError> {
    if buf.len() < len {
        if buf.capacity() < len {
            *buf = Vec::new();
            buf.try_reserve_exact(len)?;
        }
        buf.resize(len, 0);
    }
    Ok(&mut buf[..len])
}

#[cfg(test)]
mod tests {
    use super::grown;

    #[test]
    fn a_grown_buffer_holds_exactly_the_largest_length_asked() {
        // Mutation (tried): `try_reserve` (amortised: it may double) in
        // place of freeing and `try_reserve_exact` → capacity 2000.
        let mut buf = Vec::new();
        for (len, capacity) in [(1000, 1000), (500, 1000), (1500, 1500), (1200, 1500)] {
            assert_eq!(grown(&mut buf, len).unwrap().len(), len);
            assert_eq!(buf.capacity(), capacity, "after asking for {len}");
        }
    }
}
