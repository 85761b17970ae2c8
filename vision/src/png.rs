//! PNG decoding (the pure-Rust `png` crate) to RGB, every colour type and
//! bit depth converted as PIL's `Image.open(f).convert("RGB")` does; chunk
//! CRCs and the zlib Adler-32 are checked, so a damaged file is an error
//! rather than wrong pixels.

use std::io::Cursor;

use png::{ColorType, DecodeOptions, Decoder};

use crate::error::{Result, VisionError};
use crate::ops::CropBox;

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

/// The widest PNG decoded, pixels (libpng's default user limit,
/// `PNG_USER_WIDTH_MAX`): the `png` crate's row buffers grow with the width
/// (a few rows of up to 8 bytes a pixel), so this bounds them
/// ([`crate::memory`]).
pub const PNG_MAX_WIDTH: u32 = 1_000_000;

/// Refuses a PNG wider than [`PNG_MAX_WIDTH`].
pub(crate) fn too_wide(info: &PngInfo) -> Result<()> {
    if info.width > PNG_MAX_WIDTH {
        return Err(VisionError::Png {
            message: format!(
                "a {}x{} PNG is wider than {PNG_MAX_WIDTH} pixels (libpng's default limit, \
                 which bounds the decoder's row buffers)",
                info.width, info.height
            ),
        });
    }
    Ok(())
}

/// Decodes the rectangle `region` of a PNG to RGB into `out` (`region.height`
/// rows of `region.width * 3` bytes, `stride` bytes apart), row by row: no
/// buffer of the whole image is made, only the `png` crate's few rows. The
/// whole image data is read and checked (chunk CRCs, the Adler-32) whatever
/// the region. `max_pixels` bounds width x height.
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
pub(crate) fn decode_png_region(
    bytes: &[u8],
    max_pixels: u64,
    region: CropBox,
    out: &mut [u8],
    stride: usize,
) -> Result<()> {
    let mut reader = reader(bytes)?;
    let (width, height, color, bits, interlaced, palette) = {
        let info = reader.info();
        let palette = info.palette.as_ref().map(|p| {
            let mut rgb = [0u8; 768];
            let n = p.len().min(768);
            rgb[..n].copy_from_slice(&p[..n]);
            (rgb, n)
        });
        (
            info.width,
            info.height,
            info.color_type,
            info.bit_depth as u8,
            info.interlaced,
            palette,
        )
    };
    crate::limits::too_large(width, height, max_pixels)?;
    too_wide(&PngInfo {
        width,
        height,
        color,
        bit_depth: bits,
        interlaced,
    })?;
    region.check_inside(width as usize, height as usize)?;
    let row_bytes = region.width * 3;
    if stride < row_bytes || out.len() < region.height.saturating_sub(1) * stride + row_bytes {
        return Err(VisionError::invalid(
            "png region",
            format!(
                "{}x{} region needs stride {row_bytes} and {} bytes, got stride {stride} and {}",
                region.width,
                region.height,
                region.height.saturating_sub(1) * stride + row_bytes,
                out.len()
            ),
        ));
    }
    let palette = palette.as_ref().map(|(p, n)| &p[..*n]);
    let format = RowFormat {
        color,
        bits,
        palette,
    };
    let rows = region.top..region.top + region.height;
    let cols = region.left..region.left + region.width;
    if !interlaced {
        for y in 0..height as usize {
            let row = reader
                .next_row()
                .map_err(png_error)?
                .ok_or_else(|| missing_rows(y, height))?;
            if rows.contains(&y) && !cols.is_empty() {
                let at = (y - region.top) * stride;
                format.convert(row.data(), region.left, &mut out[at..at + row_bytes])?;
            }
        }
    } else {
        // Adam7: pass p holds pixels (x0 + i·dx, y0 + l·dy); its rows come
        // pass by pass, in the order the png crate's iterator yields them.
        let mut pixel = [0u8; 3];
        let mut seen = 0u32;
        for (pass, &(x0, dx, y0, dy)) in ADAM7.iter().enumerate() {
            let samples = (width as usize).saturating_sub(x0).div_ceil(dx);
            let lines = (height as usize).saturating_sub(y0).div_ceil(dy);
            if samples == 0 {
                continue;
            }
            for line in 0..lines {
                let row = reader
                    .next_interlaced_row()
                    .map_err(png_error)?
                    .ok_or_else(|| missing_rows(seen as usize, height))?;
                seen += 1;
                let expected = png::Adam7Info::new(pass as u8 + 1, line as u32, width);
                if !matches!(row.interlace(), png::InterlaceInfo::Adam7(info) if *info == expected)
                {
                    return Err(VisionError::Png {
                        message: format!(
                            "interlaced row {seen} is not pass {} line {line}",
                            pass + 1
                        ),
                    });
                }
                let y = y0 + line * dy;
                if !rows.contains(&y) {
                    continue;
                }
                let at = (y - region.top) * stride;
                let data = row.data();
                for i in 0..samples {
                    let x = x0 + i * dx;
                    if cols.contains(&x) {
                        format.convert(data, i, &mut pixel)?;
                        let o = at + (x - region.left) * 3;
                        out[o..o + 3].copy_from_slice(&pixel);
                    }
                }
            }
        }
    }
    // The end of the image data: the rest of the IDAT stream and its Adler-32.
    if reader.next_row().map_err(png_error)?.is_some() {
        return Err(VisionError::Png {
            message: format!("more rows than the header's {height}"),
        });
    }
    Ok(())
}

/// Adam7's passes: (first column, column step, first row, row step).
const ADAM7: [(usize, usize, usize, usize); 7] = [
    (0, 8, 0, 8),
    (4, 8, 0, 8),
    (0, 4, 4, 8),
    (2, 4, 0, 4),
    (0, 2, 2, 4),
    (1, 2, 0, 2),
    (0, 1, 1, 2),
];

fn missing_rows(y: usize, height: u32) -> VisionError {
    VisionError::Png {
        message: format!("the image data ends at row {y} of {height}"),
    }
}

/// How the samples of a row become RGB.
struct RowFormat<'p> {
    color: ColorType,
    bits: u8,
    palette: Option<&'p [u8]>,
}

impl RowFormat<'_> {
    /// Converts the pixels `first..first + out.len() / 3` of `row` into `out`.
    fn convert(&self, row: &[u8], first: usize, out: &mut [u8]) -> Result<()> {
        convert_row(row, first, out, self.color, self.bits, self.palette)
    }
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

/// Converts the pixels `first..first + out.len() / 3` of the raw `row`
/// into RGB in `out`.
fn convert_row(
    row: &[u8],
    first: usize,
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
                let v = packed_sample(row, first + x, bits) * scale;
                px.fill(v);
            }
        }
        (ColorType::Grayscale, 16) => {
            let row = &row[first * 2..];
            for (px, sample) in out.chunks_exact_mut(3).zip(row.chunks_exact(2)) {
                let v = u16::from_be_bytes([sample[0], sample[1]]).min(255) as u8;
                px.fill(v);
            }
        }
        (ColorType::GrayscaleAlpha, 8 | 16) => {
            let step = 2 * (bits as usize / 8);
            let row = &row[first * step..];
            for (px, sample) in out.chunks_exact_mut(3).zip(row.chunks_exact(step)) {
                px.fill(sample[0]);
            }
        }
        (ColorType::Rgb | ColorType::Rgba, 8 | 16) => {
            let bytes = bits as usize / 8;
            let step = bytes * if color == ColorType::Rgb { 3 } else { 4 };
            let row = &row[first * step..];
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
                let index = packed_sample(row, first + x, bits) as usize;
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
