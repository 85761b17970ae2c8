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
                let planes = r_plane[y * width..(y + 1) * width]
                    .iter_mut()
                    .zip(&mut g_plane[y * width..(y + 1) * width])
                    .zip(&mut b_plane[y * width..(y + 1) * width]);
                if self.flip {
                    for (((r, g), b), p) in planes.zip(row.chunks_exact(3).rev()) {
                        *r = t0[p[0] as usize];
                        *g = t1[p[1] as usize];
                        *b = t2[p[2] as usize];
                    }
                } else {
                    for (((r, g), b), p) in planes.zip(row.chunks_exact(3)) {
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

/// An image converted to `T` with `format`, as an owned array (shape
/// `[H, W, 3]` or `[3, H, W]`).
pub fn to_array<T: Element>(image: &RgbImage, format: &OutputFormat) -> Result<Array3<T>> {
    let shape = format.layout.shape(image.height(), image.width());
    let mut out = vec![T::default(); image.width() * image.height() * 3];
    write_image(image, format, &mut out)?;
    Ok(Array3::from_shape_vec((shape[0], shape[1], shape[2]), out)
        .expect("write_image fills height * width * 3 elements"))
}
