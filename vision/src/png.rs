//! PNG decoding (the pure-Rust `png` crate) to RGB, every colour type and
//! bit depth converted as PIL's `Image.open(f).convert("RGB")` does; chunk
//! CRCs and the zlib Adler-32 are checked, so a damaged file is an error
//! rather than wrong pixels.

use std::io::Cursor;

use png::{ColorType, DecodeOptions, Decoder};

use crate::error::{Result, VisionError};
use crate::image::RgbImage;

/// What a PNG header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PngInfo {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// The colour type.
    pub color: ColorType,
    /// Bits per sample (per palette index for indexed images).
    pub bit_depth: u8,
    /// Adam7 interlacing.
    pub interlaced: bool,
}

fn png_error(error: png::DecodingError) -> VisionError {
    VisionError::Png {
        message: error.to_string(),
    }
}

fn reader(bytes: &[u8]) -> Result<png::Reader<Cursor<&[u8]>>> {
    let mut options = DecodeOptions::default();
    options.set_ignore_adler32(false);
    options.set_ignore_crc(false);
    options.set_ignore_text_chunk(true);
    options.set_ignore_iccp_chunk(true);
    Decoder::new_with_options(Cursor::new(bytes), options)
        .read_info()
        .map_err(png_error)
}

/// Reads the header of a PNG.
pub fn png_info(bytes: &[u8]) -> Result<PngInfo> {
    let reader = reader(bytes)?;
    let info = reader.info();
    Ok(PngInfo {
        width: info.width,
        height: info.height,
        color: info.color_type,
        bit_depth: info.bit_depth as u8,
        interlaced: info.interlaced,
    })
}

/// Decodes a PNG to RGB; `max_pixels` bounds width x height.
///
/// | PNG | becomes (as PIL's `convert("RGB")`) |
/// |---|---|
/// | grey 1, 2, 4, 8 bit | R = G = B = the grey scaled to 0..255 (x255, x85, x17, x1) |
/// | grey 16 bit | R = G = B = `min(value, 255)` (PIL opens it as `I;16` and clips) |
/// | grey + alpha 8/16 bit | the grey (high byte), alpha dropped |
/// | RGB 8/16 bit | the samples (high byte of 16-bit ones) |
/// | RGBA 8/16 bit | RGB (high byte), alpha dropped, no compositing |
/// | palette 1, 2, 4, 8 bit | the palette colour; tRNS ignored; an index past the palette is black |
///
/// `tRNS`, gamma, ICC profiles and APNG frames past the first are ignored.
pub(crate) fn decode_png(bytes: &[u8], max_pixels: u64) -> Result<RgbImage> {
    let mut reader = reader(bytes)?;
    let (width, height, color, depth, palette) = {
        let info = reader.info();
        (
            info.width as usize,
            info.height as usize,
            info.color_type,
            info.bit_depth,
            info.palette.as_ref().map(|p| p.to_vec()),
        )
    };
    let pixels = (width as u64) * (height as u64);
    if pixels > max_pixels {
        return Err(VisionError::TooLarge {
            width: width as u64,
            height: height as u64,
            limit: max_pixels,
        });
    }
    let raw_len = reader.output_buffer_size().ok_or(VisionError::TooLarge {
        width: width as u64,
        height: height as u64,
        limit: max_pixels,
    })?;
    let mut raw = Vec::new();
    raw.try_reserve_exact(raw_len)
        .map_err(|_| VisionError::OutOfMemory {
            what: format!("a {width}x{height} PNG"),
        })?;
    raw.resize(raw_len, 0);
    let frame = reader.next_frame(&mut raw).map_err(png_error)?;
    let line = frame.line_size;
    let mut image = RgbImage::zeroed(width, height)?;
    let bits = depth as u8;
    for (y, out) in image.pixels_mut().chunks_exact_mut(width * 3).enumerate() {
        let row = &raw[y * line..(y + 1) * line];
        convert_row(row, out, color, bits, palette.as_deref())?;
    }
    Ok(image)
}

/// The `index`-th sample of `bits` bits (1, 2, 4 or 8) of a packed row.
fn packed_sample(row: &[u8], index: usize, bits: u8) -> u8 {
    match bits {
        8 => row[index],
        _ => {
            let per_byte = 8 / bits as usize;
            let byte = row[index / per_byte];
            let shift = 8 - bits as usize * (index % per_byte + 1);
            (byte >> shift) & ((1u8 << bits) - 1)
        }
    }
}

fn convert_row(
    row: &[u8],
    out: &mut [u8],
    color: ColorType,
    bits: u8,
    palette: Option<&[u8]>,
) -> Result<()> {
    let width = out.len() / 3;
    match (color, bits) {
        (ColorType::Grayscale, 1 | 2 | 4 | 8) => {
            let scale = 255 / ((1u16 << bits) - 1) as u8;
            for (x, px) in out.chunks_exact_mut(3).enumerate() {
                let v = packed_sample(row, x, bits) * scale;
                px.fill(v);
            }
        }
        (ColorType::Grayscale, 16) => {
            for (px, sample) in out.chunks_exact_mut(3).zip(row.chunks_exact(2)) {
                let v = u16::from_be_bytes([sample[0], sample[1]]).min(255) as u8;
                px.fill(v);
            }
        }
        (ColorType::GrayscaleAlpha, 8 | 16) => {
            let step = 2 * (bits as usize / 8);
            for (px, sample) in out.chunks_exact_mut(3).zip(row.chunks_exact(step)) {
                px.fill(sample[0]);
            }
        }
        (ColorType::Rgb | ColorType::Rgba, 8 | 16) => {
            let bytes = bits as usize / 8;
            let step = bytes * if color == ColorType::Rgb { 3 } else { 4 };
            for (px, sample) in out.chunks_exact_mut(3).zip(row.chunks_exact(step)) {
                px[0] = sample[0];
                px[1] = sample[bytes];
                px[2] = sample[2 * bytes];
            }
        }
        (ColorType::Indexed, 1 | 2 | 4 | 8) => {
            let palette = palette.ok_or_else(|| VisionError::Png {
                message: "indexed-colour image without a PLTE chunk".into(),
            })?;
            for (x, px) in out.chunks_exact_mut(3).enumerate() {
                let index = packed_sample(row, x, bits) as usize;
                match palette.get(index * 3..index * 3 + 3) {
                    Some(rgb) => px.copy_from_slice(rgb),
                    None => px.fill(0),
                }
            }
        }
        (color, bits) => {
            return Err(VisionError::Png {
                message: format!("{color:?} with {bits}-bit samples is not a valid PNG"),
            })
        }
    }
    debug_assert_eq!(out.len(), width * 3);
    Ok(())
}
