//! The last step of every path: RGB `u8` rows turned into the output's
//! element type (`u8`, or `f32` scaled to [0, 1] and optionally normalised
//! with a per-channel mean and std, through a 256-entry table per channel),
//! mirrored when flipped, and laid out HWC or CHW. The fused kernel and the
//! unfused [`to_array`] both write through `RowWriter`, so they agree to
//! the bit.

use ndarray::Array3;

use crate::error::{Result, VisionError};
use crate::image::RgbImage;

/// Memory layout of an output image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Layout {
    /// `[H, W, 3]`: pixels, then channels (PIL, TensorFlow).
    #[default]
    Hwc,
    /// `[3, H, W]`: channel planes (PyTorch).
    Chw,
}

impl Layout {
    /// The array shape of a `width` x `height` RGB image.
    pub fn shape(self, height: usize, width: usize) -> [usize; 3] {
        match self {
            Layout::Hwc => [height, width, 3],
            Layout::Chw => [3, height, width],
        }
    }
}

/// Per-channel normalisation of values in [0, 1]: `(v - mean) / std`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Normalize {
    /// Mean per channel (R, G, B).
    pub mean: [f32; 3],
    /// Standard deviation per channel (R, G, B), each > 0.
    pub std: [f32; 3],
}

impl Normalize {
    /// ImageNet's mean (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225).
    pub const IMAGENET: Normalize = Normalize {
        mean: [0.485, 0.456, 0.406],
        std: [0.229, 0.224, 0.225],
    };

    /// Checks that every std is finite and > 0 and every mean finite.
    pub fn new(mean: [f32; 3], std: [f32; 3]) -> Result<Self> {
        for (c, (&m, &s)) in mean.iter().zip(&std).enumerate() {
            if !m.is_finite() || !s.is_finite() || s <= 0.0 {
                return Err(VisionError::invalid(
                    "normalize",
                    format!("channel {c}: mean {m} and std {s} (std must be finite and > 0)"),
                ));
            }
        }
        Ok(Normalize { mean, std })
    }
}

/// The element type of an output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// `u8`, the decoded values.
    U8,
    /// `f32`, the values / 255, then normalised if asked.
    F32,
}

impl Dtype {
    /// The name the spec and the errors use.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::U8 => "u8",
            Dtype::F32 => "f32",
        }
    }
}

/// An output element type: `u8` or `f32`.
pub trait Element: Copy + Default + Send + Sync + 'static {
    /// Which one it is.
    const DTYPE: Dtype;
    /// The value of each byte in each channel.
    fn table(normalize: Option<&Normalize>) -> Result<[[Self; 256]; 3]>;

    /// Writes the first pixels of one CHW row through `table` by a faster
    /// path than the scalar loop, if the type and CPU have one; returns how
    /// many output pixels it wrote (the rest are the caller's).
    #[doc(hidden)]
    fn write_planes_fast(
        _row: &[u8],
        _table: &[[Self; 256]; 3],
        _planes: [&mut [Self]; 3],
        _flip: bool,
    ) -> usize {
        0
    }
}

impl Element for u8 {
    const DTYPE: Dtype = Dtype::U8;
    fn table(normalize: Option<&Normalize>) -> Result<[[u8; 256]; 3]> {
        if normalize.is_some() {
            return Err(VisionError::invalid(
                "normalize",
                "normalised values are f32: a u8 output cannot be normalised",
            ));
        }
        let mut table = [[0u8; 256]; 3];
        for channel in &mut table {
            for (v, t) in channel.iter_mut().enumerate() {
                *t = v as u8;
            }
        }
        Ok(table)
    }
}

impl Element for f32 {
    const DTYPE: Dtype = Dtype::F32;
    fn table(normalize: Option<&Normalize>) -> Result<[[f32; 256]; 3]> {
        let mut table = [[0f32; 256]; 3];
        for (c, channel) in table.iter_mut().enumerate() {
            for (v, t) in channel.iter_mut().enumerate() {
                let unit = v as f32 / 255.0;
                *t = match normalize {
                    Some(n) => (unit - n.mean[c]) / n.std[c],
                    None => unit,
                };
            }
        }
        Ok(table)
    }

    fn write_planes_fast(
        row: &[u8],
        table: &[[f32; 256]; 3],
        planes: [&mut [f32]; 3],
        flip: bool,
    ) -> usize {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2.
                return unsafe { planes_f32_avx2(row, table, planes, flip) };
            }
        }
        let _ = (row, table, planes, flip);
        0
    }
}

/// Eight pixels at a time: 24 bytes split into R, G and B indices, mirrored
/// when flipped, and each index looked up in its channel's table by one
/// gather (the very values of the scalar loop). Returns the pixels written.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn planes_f32_avx2(
    row: &[u8],
    table: &[[f32; 256]; 3],
    planes: [&mut [f32]; 3],
    flip: bool,
) -> usize {
    use std::arch::x86_64::*;
    let width = row.len() / 3;
    let [r, g, b] = planes;
    assert!(
        r.len() >= width && g.len() >= width && b.len() >= width,
        "planes shorter than the row"
    );
    const Z: i8 = -128;
    // Bytes 0..16 hold pixels 0..5 and the R of pixel 5; bytes 16..24 the rest.
    let picks: [(__m128i, __m128i); 3] = [
        (
            _mm_setr_epi8(0, 3, 6, 9, 12, 15, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z),
            _mm_setr_epi8(Z, Z, Z, Z, Z, Z, 2, 5, Z, Z, Z, Z, Z, Z, Z, Z),
        ),
        (
            _mm_setr_epi8(1, 4, 7, 10, 13, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z),
            _mm_setr_epi8(Z, Z, Z, Z, Z, 0, 3, 6, Z, Z, Z, Z, Z, Z, Z, Z),
        ),
        (
            _mm_setr_epi8(2, 5, 8, 11, 14, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z),
            _mm_setr_epi8(Z, Z, Z, Z, Z, 1, 4, 7, Z, Z, Z, Z, Z, Z, Z, Z),
        ),
    ];
    let reverse = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    let outs = [r.as_mut_ptr(), g.as_mut_ptr(), b.as_mut_ptr()];
    let mut x = 0;
    while x + 8 <= width {
        // Output pixels x..x+8 come from source pixels s..s+8 (reversed when flipped).
        let s = if flip { width - 8 - x } else { x };
        // SAFETY: bytes 3s .. 3s + 24 are inside the row (s + 8 <= width).
        let lo = _mm_loadu_si128(row.as_ptr().add(3 * s) as *const __m128i);
        let hi = _mm_loadl_epi64(row.as_ptr().add(3 * s + 16) as *const __m128i);
        for c in 0..3 {
            let (pick_lo, pick_hi) = picks[c];
            let bytes = _mm_or_si128(_mm_shuffle_epi8(lo, pick_lo), _mm_shuffle_epi8(hi, pick_hi));
            let mut index = _mm256_cvtepu8_epi32(bytes);
            if flip {
                index = _mm256_permutevar8x32_epi32(index, reverse);
            }
            // SAFETY: every index is a byte (< 256) into a 256-entry table;
            // x + 8 <= width <= the plane's length.
            let values = _mm256_i32gather_ps::<4>(table[c].as_ptr(), index);
            _mm256_storeu_ps(outs[c].add(x), values);
        }
        x += 8;
    }
    x
}

/// How values are written: element type (by `T`), normalisation and layout.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct OutputFormat {
    /// Normalisation (f32 only).
    pub normalize: Option<Normalize>,
    /// HWC or CHW.
    pub layout: Layout,
}

/// Checks that a buffer of `len` elements holds an output of `shape`.
pub(crate) fn check_output_len(len: usize, shape: [usize; 3]) -> Result<()> {
    let expected = shape.iter().product::<usize>();
    if len != expected {
        return Err(VisionError::OutputLength {
            expected,
            actual: len,
            shape,
        });
    }
    Ok(())
}

/// Writes RGB `u8` rows into an output image of `height` x `width`.
pub(crate) struct RowWriter<'a, T: Element> {
    out: &'a mut [T],
    width: usize,
    height: usize,
    layout: Layout,
    flip: bool,
    table: [[T; 256]; 3],
}

impl<'a, T: Element> RowWriter<'a, T> {
    pub(crate) fn new(
        out: &'a mut [T],
        width: usize,
        height: usize,
        format: &OutputFormat,
        flip: bool,
    ) -> Result<Self> {
        check_output_len(out.len(), format.layout.shape(height, width))?;
        Ok(RowWriter {
            out,
            width,
            height,
            layout: format.layout,
            flip,
            table: T::table(format.normalize.as_ref())?,
        })
    }

    /// Writes output row `y` from `row` (`width * 3` bytes, RGB).
    #[inline]
    pub(crate) fn write_row(&mut self, y: usize, row: &[u8]) {
        let width = self.width;
        debug_assert!(y < self.height && row.len() == width * 3);
        let [t0, t1, t2] = &self.table;
        match self.layout {
            Layout::Hwc => {
                let out = &mut self.out[y * width * 3..(y + 1) * width * 3];
                if self.flip {
                    for (o, p) in out.chunks_exact_mut(3).zip(row.chunks_exact(3).rev()) {
                        o[0] = t0[p[0] as usize];
                        o[1] = t1[p[1] as usize];
                        o[2] = t2[p[2] as usize];
                    }
                } else {
                    for (o, p) in out.chunks_exact_mut(3).zip(row.chunks_exact(3)) {
                        o[0] = t0[p[0] as usize];
                        o[1] = t1[p[1] as usize];
                        o[2] = t2[p[2] as usize];
                    }
                }
            }
            Layout::Chw => {
                let plane = width * self.height;
                let (r_plane, rest) = self.out.split_at_mut(plane);
                let (g_plane, b_plane) = rest.split_at_mut(plane);
                let (r, g, b) = (
                    &mut r_plane[y * width..(y + 1) * width],
                    &mut g_plane[y * width..(y + 1) * width],
                    &mut b_plane[y * width..(y + 1) * width],
                );
                let done =
                    T::write_planes_fast(row, &self.table, [&mut *r, &mut *g, &mut *b], self.flip);
                let planes = r[done..].iter_mut().zip(&mut g[done..]).zip(&mut b[done..]);
                if self.flip {
                    let rest = row.len() / 3 - done;
                    for (((r, g), b), p) in planes.zip(row[..rest * 3].chunks_exact(3).rev()) {
                        *r = t0[p[0] as usize];
                        *g = t1[p[1] as usize];
                        *b = t2[p[2] as usize];
                    }
                } else {
                    for (((r, g), b), p) in planes.zip(row[done * 3..].chunks_exact(3)) {
                        *r = t0[p[0] as usize];
                        *g = t1[p[1] as usize];
                        *b = t2[p[2] as usize];
                    }
                }
            }
        }
    }
}

/// An image converted to `T` with `format` (torchvision's `ToDtype(float32,
/// scale=True)` then `Normalize(mean, std)`, and the layout), into `out`.
pub fn write_image<T: Element>(
    image: &RgbImage,
    format: &OutputFormat,
    out: &mut [T],
) -> Result<()> {
    let mut writer = RowWriter::new(out, image.width(), image.height(), format, false)?;
    for y in 0..image.height() {
        writer.write_row(y, image.row(y));
    }
    Ok(())
}

/// `u8` RGB pixels (`[height, width, 3]`, row by row) converted to `T` with
/// `format`, into `out` (`[H, W, 3]` or `[3, H, W]`): the output steps of a
/// plan applied apart from its pixel steps (see [`Plan::pixels`](crate::Plan::pixels)), to the
/// bit what the whole plan writes. An error if either length does not fit
/// the size, or `format` normalises a `u8` output.
///
/// ```
/// use feedline_vision::{write_pixels, Layout, Normalize, OutputFormat};
/// let pixels = [0u8, 128, 255, 10, 20, 30]; // 1 x 2 RGB
/// let format = OutputFormat { normalize: Some(Normalize::IMAGENET), layout: Layout::Chw };
/// let mut out = [0f32; 6];
/// write_pixels(&pixels, 1, 2, &format, &mut out).unwrap();
/// assert_eq!(out[0], (0.0 / 255.0 - 0.485) / 0.229); // R of the first pixel
/// assert_eq!(out[1], (10.0 / 255.0 - 0.485) / 0.229); // R of the second
/// assert!(write_pixels(&pixels[..5], 1, 2, &format, &mut out).is_err());
/// ```
pub fn write_pixels<T: Element>(
    pixels: &[u8],
    height: usize,
    width: usize,
    format: &OutputFormat,
    out: &mut [T],
) -> Result<()> {
    check_output_len(pixels.len(), [height, width, 3])?;
    let mut writer = RowWriter::new(out, width, height, format, false)?;
    if width > 0 {
        for (y, row) in pixels.chunks_exact(width * 3).enumerate() {
            writer.write_row(y, row);
        }
    }
    Ok(())
}

/// An image converted to `T` with `format`, as an owned array (shape
/// `[H, W, 3]` or `[3, H, W]`).
pub fn to_array<T: Element>(image: &RgbImage, format: &OutputFormat) -> Result<Array3<T>> {
    let shape = format.layout.shape(image.height(), image.width());
    let mut out = vec![T::default(); image.width() * image.height() * 3];
    write_image(image, format, &mut out)?;
    Ok(Array3::from_shape_vec((shape[0], shape[1], shape[2]), out)
        .expect("write_image fills height * width * 3 elements"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The CHW writer (fast path and tail) against the table looked up
    /// pixel by pixel, every width from 1 to 70, flipped or not.
    #[test]
    fn chw_rows_are_the_table_values() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let format = OutputFormat {
            normalize: Some(Normalize::new([0.1, 0.7, 0.3], [0.2, 0.9, 0.05]).unwrap()),
            layout: Layout::Chw,
        };
        let table = f32::table(format.normalize.as_ref()).unwrap();
        for width in 1..=70usize {
            for flip in [false, true] {
                let height = 2;
                let rows: Vec<u8> = (0..width * height * 3).map(|_| rng.gen()).collect();
                let mut out = vec![0f32; width * height * 3];
                let mut writer = RowWriter::new(&mut out, width, height, &format, flip).unwrap();
                for y in 0..height {
                    writer.write_row(y, &rows[y * width * 3..(y + 1) * width * 3]);
                }
                for y in 0..height {
                    for x in 0..width {
                        let sx = if flip { width - 1 - x } else { x };
                        for c in 0..3 {
                            let v = rows[(y * width + sx) * 3 + c];
                            let got = out[c * width * height + y * width + x];
                            assert_eq!(
                                got.to_bits(),
                                table[c][v as usize].to_bits(),
                                "width {width} flip {flip} y {y} x {x} c {c}"
                            );
                        }
                    }
                }
            }
        }
    }
}
