//! The fused kernel of the training path: image bytes + crop + source box +
//! output size + flip + output format, written straight into the caller's
//! buffer. It decodes only what the resize reads — the rows and columns of
//! the crop that the filter touches, at the coarsest DCT scale (1/2, 1/4,
//! 1/8) that still leaves the box at least the output size — then runs one
//! separable resize whose vertical pass writes each finished row converted,
//! normalised, flipped and laid out: no full-size image, no float image.
//!
//! Without DCT scaling the result is bit-identical to the unfused chain
//! `decode → crop → resize → flip → to f32 → normalise → layout`
//! (`tests/fused.rs`); with it, the pixels are those of the image decoded at
//! the reduced scale (a box-filtered image, as PIL's `draft`), within the
//! tolerance `tests/fused.rs` states.

use crate::decode::{Decoder, OpenImage, Scratch};
use crate::error::{Result, VisionError};
use crate::image::{RgbImage, RgbView};
use crate::jpeg::{scaled_size, JpegRegion, ReducedWork};
use crate::limits::grown;
use crate::ops::CropBox;
use crate::output::{check_output_len, Element, OutputFormat, RowWriter};
use crate::png::decode_png_region;
use crate::resize::{ResizePlan, SourceBox};

/// The geometry of one image's crop-resize-flip.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CropResize {
    /// The pixels the resize may read (torchvision crops before it resizes:
    /// pixels outside the crop never enter the filter).
    pub crop: CropBox,
    /// The box resampled, in the crop's coordinates (the whole crop for
    /// `RandomResizedCrop`; a sub-window for resize-then-centre-crop).
    pub source: SourceBox,
    /// Output columns.
    pub out_width: usize,
    /// Output rows.
    pub out_height: usize,
    /// Mirror the output left-right.
    pub flip: bool,
}

impl CropResize {
    /// torchvision's `resized_crop(crop, (out_height, out_width))`, flipped
    /// or not: the whole crop resampled.
    pub fn resized_crop(crop: CropBox, out_height: usize, out_width: usize, flip: bool) -> Self {
        CropResize {
            crop,
            source: SourceBox::whole(crop.width, crop.height),
            out_width,
            out_height,
            flip,
        }
    }

    fn check(&self, width: usize, height: usize) -> Result<()> {
        self.crop.check_inside(width, height)?;
        let s = &self.source;
        let inside = s.x0 >= 0.0
            && s.y0 >= 0.0
            && s.x1 <= self.crop.width as f64
            && s.y1 <= self.crop.height as f64
            && s.x0 < s.x1
            && s.y0 < s.y1;
        if !inside {
            return Err(VisionError::invalid(
                "resize",
                format!(
                    "source box {s:?} is empty or not inside the {}x{} crop",
                    self.crop.width, self.crop.height
                ),
            ));
        }
        if self.out_width == 0 || self.out_height == 0 {
            return Err(VisionError::invalid(
                "resize",
                format!(
                    "output size {}x{} is empty",
                    self.out_height, self.out_width
                ),
            ));
        }
        Ok(())
    }

    /// The coarsest DCT scale denominator (8, 4, 2, else 1) at which the
    /// source box is still at least the output size in both directions.
    pub fn dct_scale_denom(&self) -> u32 {
        [8u32, 4, 2]
            .into_iter()
            .find(|&d| {
                self.source.width() / f64::from(d) >= self.out_width as f64
                    && self.source.height() / f64::from(d) >= self.out_height as f64
            })
            .unwrap_or(1)
    }
}

/// Where the kernel's pixels come from.
#[derive(Clone, Copy, Debug)]
pub enum KernelSource<'a> {
    /// Encoded JPEG or PNG bytes.
    Bytes(&'a [u8]),
    /// Pixels already decoded.
    Image(&'a RgbImage),
}

/// The crop in the coordinates of the image decoded at 1/`denom`: the
/// whole pixels that cover it, and the source box inside them.
fn scaled_crop(g: &CropResize, width: u32, height: u32, denom: u32) -> (CropBox, SourceBox) {
    if denom == 1 {
        return (g.crop, g.source);
    }
    let (sw, sh) = scaled_size(width, height, denom);
    let d = f64::from(denom);
    let left = g.crop.left as f64 + g.source.x0;
    let right = g.crop.left as f64 + g.source.x1;
    let top = g.crop.top as f64 + g.source.y0;
    let bottom = g.crop.top as f64 + g.source.y1;
    // The crop's own edges bound the filter, as at full scale.
    let x0 = g.crop.left / denom as usize;
    let y0 = g.crop.top / denom as usize;
    let x1 = ((g.crop.left + g.crop.width) as f64 / d)
        .ceil()
        .min(f64::from(sw)) as usize;
    let y1 = ((g.crop.top + g.crop.height) as f64 / d)
        .ceil()
        .min(f64::from(sh)) as usize;
    let crop = CropBox {
        top: y0,
        left: x0,
        height: y1 - y0,
        width: x1 - x0,
    };
    let clamp_x = |v: f64| v.clamp(0.0, crop.width as f64);
    let clamp_y = |v: f64| v.clamp(0.0, crop.height as f64);
    let source = SourceBox {
        x0: clamp_x(left / d - x0 as f64),
        y0: clamp_y(top / d - y0 as f64),
        x1: clamp_x(right / d - x0 as f64),
        y1: clamp_y(bottom / d - y0 as f64),
    };
    (crop, source)
}

/// What one call of the kernel did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KernelReport {
    /// The geometry, as `geometry` chose it (full-scale coordinates).
    pub geometry: CropResize,
    /// The source image's width and height.
    pub image_size: (usize, usize),
    /// The DCT scale the JPEG was decoded at (1 for PNG and decoded images).
    pub scale_denom: u32,
    /// The rectangle decoded, in pixels of that scale.
    pub decoded: CropBox,
}

/// The fused kernel. `geometry` gets the image's `(width, height)` and
/// returns the crop-resize to do (so a random crop can be drawn from the
/// header alone); the result goes into `out` as `T` in `format` (its
/// length must be `out_width * out_height * 3`).
///
/// ```
/// use feedline_vision::{crop_resize_into, CropBox, CropResize, Decoder, KernelSource,
///     Layout, Normalize, OutputFormat, ReducedWork, RgbImage};
/// # fn main() -> Result<(), feedline_vision::VisionError> {
/// let image = RgbImage::from_pixels(4, 2, (0..24).collect())?;
/// let mut out = vec![0f32; 3 * 2 * 2];
/// let format = OutputFormat { normalize: Some(Normalize::IMAGENET), layout: Layout::Chw };
/// crop_resize_into(&mut Decoder::new(), KernelSource::Image(&image),
///     &mut |_w, _h| Ok(CropResize::resized_crop(CropBox { top: 0, left: 0, height: 2, width: 4 }, 2, 2, true)),
///     &format, ReducedWork::ALL, &mut out)?;
/// # Ok(()) }
/// ```
pub fn crop_resize_into<T: Element>(
    decoder: &mut Decoder,
    source: KernelSource<'_>,
    geometry: &mut dyn FnMut(usize, usize) -> Result<CropResize>,
    format: &OutputFormat,
    work: ReducedWork,
    out: &mut [T],
) -> Result<KernelReport> {
    match source {
        KernelSource::Image(image) => {
            let (width, height) = (image.width(), image.height());
            let g = geometry(width, height)?;
            g.check(width, height)?;
            check_output_len(out.len(), format.layout.shape(g.out_height, g.out_width))?;
            let view = image.view();
            let decoded = g.crop;
            let max_pixels = decoder.max_pixels();
            run_resize(
                &view,
                &g,
                g.crop,
                g.source,
                &mut decoder.scratch,
                max_pixels,
                format,
                out,
            )?;
            Ok(KernelReport {
                geometry: g,
                image_size: (width, height),
                scale_denom: 1,
                decoded,
            })
        }
        KernelSource::Bytes(bytes) => {
            let max_pixels = decoder.max_pixels();
            let (open, scratch) = decoder.open_with_scratch(bytes)?;
            let (width, height) = (open.width() as usize, open.height() as usize);
            let g = geometry(width, height)?;
            g.check(width, height)?;
            check_output_len(out.len(), format.layout.shape(g.out_height, g.out_width))?;
            match open {
                OpenImage::Png(bytes, _) => {
                    // Only the rows and columns the resize reads are kept
                    // (the whole file is still read and checked).
                    let plan = resize_plan(g.crop, g.source, &g)?;
                    let region = CropBox {
                        top: g.crop.top + plan.rows.0,
                        left: g.crop.left + plan.cols.0,
                        height: plan.rows.1 - plan.rows.0,
                        width: plan.cols.1 - plan.cols.0,
                    };
                    let stride = region.width * 3;
                    let pixels =
                        grown(&mut scratch.region, stride * region.height).map_err(|_| {
                            VisionError::OutOfMemory {
                                what: format!(
                                    "a {}x{} decoded region",
                                    region.width, region.height
                                ),
                            }
                        })?;
                    decode_png_region(bytes, max_pixels, region, pixels, stride)?;
                    let view = RgbView::new(pixels, region.width, region.height, stride)?;
                    write_resized(&view, &plan, &g, &mut scratch.rows, max_pixels, format, out)?;
                    Ok(KernelReport {
                        geometry: g,
                        image_size: (width, height),
                        scale_denom: 1,
                        decoded: region,
                    })
                }
                OpenImage::Jpeg(open) => {
                    let denom = if work.dct_scaling {
                        g.dct_scale_denom()
                    } else {
                        1
                    };
                    let (crop, source_box) = scaled_crop(&g, width as u32, height as u32, denom);
                    let plan = resize_plan(crop, source_box, &g)?;
                    let region = JpegRegion {
                        scale_denom: denom,
                        x: (crop.left + plan.cols.0) as u32,
                        y: (crop.top + plan.rows.0) as u32,
                        width: (plan.cols.1 - plan.cols.0) as u32,
                        height: (plan.rows.1 - plan.rows.0) as u32,
                    };
                    let stride = region.width as usize * 3;
                    let len = stride * region.height as usize;
                    let pixels =
                        grown(&mut scratch.region, len).map_err(|_| VisionError::OutOfMemory {
                            what: format!("a {}x{} decoded region", region.width, region.height),
                        })?;
                    open.decode_region(region, work, pixels, stride)?;
                    let view = RgbView::new(
                        pixels,
                        region.width as usize,
                        region.height as usize,
                        stride,
                    )?;
                    write_resized(&view, &plan, &g, &mut scratch.rows, max_pixels, format, out)?;
                    Ok(KernelReport {
                        geometry: g,
                        image_size: (width, height),
                        scale_denom: denom,
                        decoded: CropBox {
                            top: region.y as usize,
                            left: region.x as usize,
                            height: region.height as usize,
                            width: region.width as usize,
                        },
                    })
                }
            }
        }
    }
}

/// The resize of `source_box` inside `crop` to `g`'s output size.
fn resize_plan(crop: CropBox, source_box: SourceBox, g: &CropResize) -> Result<ResizePlan> {
    ResizePlan::new(
        crop.width,
        crop.height,
        source_box,
        g.out_width,
        g.out_height,
    )
}

/// Resizes `source_box` of the `crop` of a fully decoded `image` into `out`.
#[allow(clippy::too_many_arguments)]
fn run_resize<T: Element>(
    image: &RgbView<'_>,
    g: &CropResize,
    crop: CropBox,
    source_box: SourceBox,
    scratch: &mut Scratch,
    max_pixels: u64,
    format: &OutputFormat,
    out: &mut [T],
) -> Result<()> {
    let plan = resize_plan(crop, source_box, g)?;
    let view = image.sub(
        crop.left + plan.cols.0,
        crop.top + plan.rows.0,
        plan.cols.1 - plan.cols.0,
        plan.rows.1 - plan.rows.0,
    )?;
    write_resized(&view, &plan, g, &mut scratch.rows, max_pixels, format, out)
}

/// Runs the resize of `view` into `out`; its rows buffer (the horizontal
/// pass's rows) may hold at most `max_pixels` pixels, else the resize is
/// refused before it is allocated.
fn write_resized<T: Element>(
    view: &RgbView<'_>,
    plan: &ResizePlan,
    g: &CropResize,
    rows: &mut Vec<u8>,
    max_pixels: u64,
    format: &OutputFormat,
    out: &mut [T],
) -> Result<()> {
    let (width, height) = plan.rows_buffer_size();
    if (width as u64).saturating_mul(height as u64) > max_pixels {
        return Err(VisionError::OutputTooLarge {
            width: width as u64,
            height: height as u64,
            limit: max_pixels,
        });
    }
    let mut writer = RowWriter::new(out, g.out_width, g.out_height, format, g.flip)?;
    plan.run(view, rows, |y, row| writer.write_row(y, row))
}
