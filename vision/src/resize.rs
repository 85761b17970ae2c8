//! Antialiased bilinear resampling, PIL's algorithm (`Resample.c`, which
//! torchvision's `antialias=True` reproduces): a triangle filter whose
//! support grows with the downscale factor, weights normalised per output
//! pixel and rounded to 22-bit fixed point, a horizontal pass to `u8` then a
//! vertical pass to `u8`, both rounded. A source box with fractional edges
//! is supported (PIL's `resize(size, box=...)`). The vertical pass hands
//! each finished output row to a sink, so the fused kernel can convert,
//! flip and lay it out without another pass over an intermediate image.
//!
//! This file prepares and runs a resize; the weights are computed in
//! `coefficients.rs` and the passes' inner loops are `kernels.rs`.

use crate::coefficients::Coefficients;
use crate::error::{Result, VisionError};
use crate::image::{RgbImage, RgbView};
use crate::kernels::{horizontal_row, vertical_row, HorizontalTaps};
use crate::limits::grown;

/// Where the pixels of a resize come from: the `box` `[x0, y0, x1, y1)` (in
/// pixels, fractional allowed) of a source of `width` x `height` pixels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SourceBox {
    /// Left edge.
    pub x0: f64,
    /// Top edge.
    pub y0: f64,
    /// Right edge (exclusive).
    pub x1: f64,
    /// Bottom edge (exclusive).
    pub y1: f64,
}

impl SourceBox {
    /// The whole of a `width` x `height` source.
    pub fn whole(width: usize, height: usize) -> Self {
        SourceBox {
            x0: 0.0,
            y0: 0.0,
            x1: width as f64,
            y1: height as f64,
        }
    }

    /// Width of the box.
    pub fn width(&self) -> f64 {
        self.x1 - self.x0
    }

    /// Height of the box.
    pub fn height(&self) -> f64 {
        self.y1 - self.y0
    }
}

/// A resize prepared for one source size: the weights of both directions,
/// relative to the first source column and row they read.
pub(crate) struct ResizePlan {
    horizontal: Option<HorizontalTaps>,
    vertical: Option<Coefficients>,
    /// Source columns read: `[first, end)`.
    pub(crate) cols: (usize, usize),
    /// Source rows read: `[first, end)`.
    pub(crate) rows: (usize, usize),
    out_width: usize,
}

impl ResizePlan {
    /// PIL's `ImagingResampleInner`: a direction whose size and box are the
    /// source's is not resampled (a copy).
    pub(crate) fn new(
        src_width: usize,
        src_height: usize,
        source: SourceBox,
        out_width: usize,
        out_height: usize,
    ) -> Result<Self> {
        let need_horizontal =
            out_width != src_width || source.x0 != 0.0 || source.x1 != out_width as f64;
        let need_vertical =
            out_height != src_height || source.y0 != 0.0 || source.y1 != out_height as f64;
        let (horizontal, cols) = if need_horizontal {
            let c = Coefficients::new(src_width, source.x0, source.x1, out_width)?;
            let cols = c.input_span();
            let taps = HorizontalTaps::new(&c.shifted(cols.0), cols.1 - cols.0);
            (Some(taps), cols)
        } else {
            (None, (0, src_width))
        };
        let (vertical, rows) = if need_vertical {
            let c = Coefficients::new(src_height, source.y0, source.y1, out_height)?;
            let rows = c.input_span();
            (Some(c.shifted(rows.0)), rows)
        } else {
            (None, (0, src_height))
        };
        Ok(ResizePlan {
            horizontal,
            vertical,
            cols,
            rows,
            out_width,
        })
    }

    /// The rows buffer [`run`](Self::run) needs, (columns, rows): the
    /// horizontal pass's rows and one output row, one row, or nothing.
    pub(crate) fn rows_buffer_size(&self) -> (usize, usize) {
        match (&self.vertical, &self.horizontal) {
            (Some(_), _) => (self.out_width, self.rows.1 - self.rows.0 + 1),
            (None, Some(_)) => (self.out_width, 1),
            (None, None) => (0, 0),
        }
    }

    /// Runs the resize on `src`, whose first column and row are source
    /// column `cols.0` and row `rows.0` (the rest of the source need not be
    /// there); `rows_buf` is scratch for the horizontal pass. Each output
    /// row goes to `sink(y, row)`.
    pub(crate) fn run(
        &self,
        src: &RgbView<'_>,
        rows_buf: &mut Vec<u8>,
        mut sink: impl FnMut(usize, &[u8]),
    ) -> Result<()> {
        let out_of_memory = |_| VisionError::OutOfMemory {
            what: format!("the rows of a resize to width {}", self.out_width),
        };
        let n_rows = self.rows.1 - self.rows.0;
        let row_len = self.out_width * 3;
        let Some(vertical) = &self.vertical else {
            // Rows map one to one: resample each (or copy it) straight to the sink.
            match &self.horizontal {
                Some(h) => {
                    let row = grown(rows_buf, row_len).map_err(out_of_memory)?;
                    for y in 0..n_rows {
                        horizontal_row(src.row(y), h, row);
                        sink(y, row);
                    }
                }
                None => {
                    for y in 0..n_rows {
                        sink(y, src.row(y));
                    }
                }
            }
            return Ok(());
        };
        // The horizontal pass (or a copy of the rows read) into rows_buf,
        // then the vertical pass one output row at a time.
        let buf = grown(rows_buf, n_rows * row_len + row_len).map_err(out_of_memory)?;
        let (intermediate, out) = buf.split_at_mut(n_rows * row_len);
        for (y, dst) in intermediate.chunks_exact_mut(row_len).enumerate() {
            match &self.horizontal {
                Some(h) => horizontal_row(src.row(y), h, dst),
                None => dst.copy_from_slice(src.row(y)),
            }
        }
        for y in 0..vertical.out_size() {
            vertical_row(
                intermediate,
                vertical.starts[y],
                vertical.weights_of(y),
                out,
            );
            sink(y, out);
        }
        Ok(())
    }
}

/// Resizes the `source` box of `src` to `out_width` x `out_height` (PIL's
/// `Image.resize((w, h), Image.BILINEAR, box=...)`; torchvision's
/// `resize(..., antialias=True)` on a PIL image).
pub fn resize_box(
    src: &RgbView<'_>,
    source: SourceBox,
    out_width: usize,
    out_height: usize,
) -> Result<RgbImage> {
    let plan = ResizePlan::new(src.width(), src.height(), source, out_width, out_height)?;
    let needed = src.sub(
        plan.cols.0,
        plan.rows.0,
        plan.cols.1 - plan.cols.0,
        plan.rows.1 - plan.rows.0,
    )?;
    let mut out = RgbImage::zeroed(out_width, out_height)?;
    let mut rows = Vec::new();
    let row_len = out_width * 3;
    let pixels = out.pixels_mut();
    plan.run(&needed, &mut rows, |y, row| {
        pixels[y * row_len..(y + 1) * row_len].copy_from_slice(row)
    })?;
    Ok(out)
}
