//! What one call of a plan may hold at most, by the decoder's pixel limit:
//! the working memory a transform worker adds to the pipeline's memory
//! bound ([`Plan::working_memory`], [`Plan::working_memory_bytes`], which
//! [`ImageTransform`](crate::ImageTransform) reports to feedline). Every
//! term is a limit the code enforces — an image over it is refused before
//! the buffer is allocated — not an estimate of typical use. For a pixel
//! limit `P`:
//!
//! | term | bytes at most | enforced by |
//! |---|---|---|
//! | the decoded region, JPEG or PNG (kept from call to call) | `3·P` | width × height ≤ `P`, from the header |
//! | the resampling's rows (kept from call to call) | `3·P` | (rows read + 1) × output width ≤ `P`, else refused |
//! | libjpeg's own memory: a progressive file's coefficients (2 bytes a pixel per full-resolution component, 4 components at most, padded to whole MCUs) and its row buffers | `8·(P + 64·Wj + 1024) + 256·Wj`, `Wj = min(P, 65500)` | libjpeg's `max_memory_to_use` (over it: "needs more memory than…") |
//! | the shim's scanlines (16 rows of 4 components) | `64·Wj` | JPEG's largest width, 65500 |
//! | *or*, for a PNG, the `png` crate's row buffers | `PNG_ROW_BUFFERS·(8·Wp + 1) + 512 KiB`, `Wp = min(P, 1,000,000)` | [`PNG_MAX_WIDTH`](crate::png::PNG_MAX_WIDTH) |
//! | images materialised between two resamplings or for a zero-padded centre crop (0, 1 or 2 alive, by the plan) | `3·P` each | every intermediate ≤ `P` pixels, else refused |
//! | the output array of a plan of variable shape (fixed shapes are written into the batch) | `3·P` × 1 (`u8`) or 4 (`f32`) | the output ≤ `P` pixels, else refused |
//!
//! At PIL's limit ([`DEFAULT_MAX_PIXELS`](crate::DEFAULT_MAX_PIXELS)) that
//! is about 2.5 GB for `imagenet-train`: a worker may meet a progressive
//! 179-megapixel JPEG. A lower limit lowers it in proportion (16
//! megapixels: about 280 MB).

use crate::limits::{jpeg_width, libjpeg_memory_cap};
use crate::output::Dtype;
use crate::png::PNG_MAX_WIDTH;
use crate::transform_plan::{GeomOp, OutputShape, Plan};

/// The `png` crate's row buffers, in raw rows: its decompression buffer
/// holds up to four rows before it shifts back, plus the current and the
/// previous row and the inflate window, and a `Vec` may double its
/// capacity when it grows; then its scratch row and its output row.
/// Measured (`tests/limits.rs`, 16-bit RGBA rows of 1 MiB, 1 to 64 rows,
/// stored and deflated): 13.6 rows at most.
const PNG_ROW_BUFFERS: u64 = 16;

/// The `png` crate's fixed buffers (inflate state, window, chunk buffers).
const PNG_FIXED_BYTES: u64 = 512 << 10;

/// The most memory decoding one JPEG may hold besides the region: libjpeg's
/// cap and the shim's 16 scanlines of 4 components.
fn jpeg_decoder_bytes(max_pixels: u64) -> u64 {
    libjpeg_memory_cap(max_pixels).saturating_add(64 * jpeg_width(max_pixels))
}

/// The most memory decoding one PNG may hold besides the region: the `png`
/// crate's row buffers for the widest PNG the limit lets through (8 bytes a
/// pixel for 16-bit RGBA, and the filter byte).
fn png_decoder_bytes(max_pixels: u64) -> u64 {
    let width = max_pixels.min(u64::from(PNG_MAX_WIDTH));
    PNG_ROW_BUFFERS
        .saturating_mul(8 * width + 1)
        .saturating_add(PNG_FIXED_BYTES)
}

/// How many images the plan may have materialised at once (0, 1 or 2):
/// one is made when a resampling follows a resampling, or when a centre
/// crop larger than what precedes it pads with zeros; while one is made
/// from the previous one, both are alive.
fn materialized_images(plan: &Plan) -> u64 {
    // The least size the pending image is known to have, if known.
    let mut known: Option<(usize, usize)> = None;
    let mut resampled = false;
    let mut made = 0u64;
    for op in plan.geometry() {
        match *op {
            GeomOp::RandomResizedCrop { height, width, .. } => {
                if resampled {
                    made += 1;
                }
                resampled = true;
                known = Some((height, width));
            }
            GeomOp::Resize(to) => {
                if resampled {
                    made += 1;
                }
                resampled = true;
                known = match to {
                    crate::ops::ResizeTo::Exact { height, width } => Some((height, width)),
                    // The shorter side becomes n, the longer one at least n.
                    crate::ops::ResizeTo::Shorter(n) => Some((n, n)),
                };
            }
            GeomOp::CenterCrop { height, width } => {
                let pads = !matches!(known, Some((h, w)) if h >= height && w >= width);
                if pads {
                    // Materialised, then replaced by the padded crop.
                    made += 2;
                    resampled = false;
                }
                known = Some((height, width));
            }
            GeomOp::Flip { .. } => {}
        }
    }
    made.min(2)
}

/// What one call of a plan may hold at most, term by term (bytes); see
/// the [module](self) documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkingMemory {
    /// The decoded region (JPEG or PNG), kept by the decoder.
    pub region: u64,
    /// The resampling's rows, kept by the decoder.
    pub rows: u64,
    /// libjpeg's own memory (its cap) and the shim's scanlines, for a JPEG.
    pub jpeg_decoder: u64,
    /// The `png` crate's buffers, for a PNG.
    pub png_decoder: u64,
    /// Images materialised between steps (0, 1 or 2 alive).
    pub materialized: u64,
    /// The output array the call makes (a fixed shape's, or the largest a
    /// variable shape may have).
    pub output: u64,
}

impl WorkingMemory {
    /// The sum, with the larger of the two decoders (a call decodes one
    /// image, JPEG or PNG).
    pub fn total(&self) -> u64 {
        self.region
            .saturating_add(self.rows)
            .saturating_add(self.jpeg_decoder.max(self.png_decoder))
            .saturating_add(self.materialized)
            .saturating_add(self.output)
    }
}

impl Plan {
    /// The most bytes one call of this plan holds with a decoder whose
    /// pixel limit is `max_pixels`: decode buffer, resampling rows,
    /// libjpeg's or the PNG decoder's own memory, materialised
    /// intermediates and (for a variable shape) the output; see
    /// [`crate::memory`] for each term and what enforces it.
    ///
    /// ```
    /// use feedline_vision::{Plan, DEFAULT_MAX_PIXELS};
    /// let plan = Plan::parse("imagenet-train").unwrap();
    /// let per_call = plan.working_memory_bytes(DEFAULT_MAX_PIXELS);
    /// assert!(per_call > 14 * DEFAULT_MAX_PIXELS); // 3 + 3 + 8 bytes a pixel, and more
    /// assert!(plan.working_memory_bytes(16_000_000) < per_call / 8);
    /// ```
    pub fn working_memory_bytes(&self, max_pixels: u64) -> u64 {
        self.working_memory(max_pixels).total()
    }

    /// [`Plan::working_memory_bytes`] term by term.
    pub fn working_memory(&self, max_pixels: u64) -> WorkingMemory {
        working_memory(self, max_pixels)
    }
}

/// The terms for `plan` under a pixel limit of `max_pixels`.
pub(crate) fn working_memory(plan: &Plan, max_pixels: u64) -> WorkingMemory {
    let image = max_pixels.saturating_mul(3);
    let element = match plan.dtype() {
        Dtype::U8 => 1,
        Dtype::F32 => 4,
    };
    WorkingMemory {
        region: image,
        rows: image,
        jpeg_decoder: jpeg_decoder_bytes(max_pixels),
        png_decoder: png_decoder_bytes(max_pixels),
        materialized: image.saturating_mul(materialized_images(plan)),
        output: match plan.shape() {
            OutputShape::Fixed(shape) => shape.iter().product::<usize>() as u64 * element,
            OutputShape::Variable(_) => image.saturating_mul(element),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_materialize_nothing_and_chains_of_resamplings_do() {
        for (spec, made) in [
            ("imagenet-train", 0),
            ("imagenet-eval", 0),
            ("decode", 0),
            ("decode,center-crop(224)", 2),
            ("decode,resize(256),random-resized-crop(224)", 1),
            ("decode,resize(256),center-crop(300)", 2),
            ("decode,resize(64),resize(32),resize(16)", 2),
        ] {
            let plan = Plan::parse(spec).unwrap();
            assert_eq!(materialized_images(&plan), made, "{spec}");
        }
    }

    #[test]
    fn the_figure_grows_with_the_limit() {
        let plan = Plan::parse("imagenet-train").unwrap();
        let small = working_memory(&plan, 1 << 20).total();
        let large = working_memory(&plan, 1 << 24).total();
        assert!(small < large);
        // Region and rows, 3 bytes a pixel each, and libjpeg's 8 bytes a pixel.
        assert!(large >= 14 << 24, "{large}");
    }
}
