//! `RandomResizedCrop`'s box sampling, torchvision's `get_params`: up to 10
//! tries of an area fraction uniform in `scale` and an aspect ratio
//! log-uniform in `ratio`, sides rounded half to even (Python's `round`),
//! kept if the box fits, its position uniform; else the centre-crop
//! fallback (the whole image, or the largest centred box of the nearest
//! allowed ratio). Randomness comes from the caller's RNG.

use rand::Rng;

use crate::error::{Result, VisionError};
use crate::ops::CropBox;

/// The box-sampling parameters of `RandomResizedCrop`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RandomResizedCrop {
    /// Range of the box's area as a fraction of the image's: (0.08, 1.0) by default.
    pub scale: (f64, f64),
    /// Range of the box's width / height: (3/4, 4/3) by default.
    pub ratio: (f64, f64),
}

impl Default for RandomResizedCrop {
    fn default() -> Self {
        RandomResizedCrop {
            scale: (0.08, 1.0),
            ratio: (3.0 / 4.0, 4.0 / 3.0),
        }
    }
}

/// How many boxes are drawn before the fallback (torchvision: 10).
pub const ATTEMPTS: usize = 10;

/// `lo + (hi - lo) * U[0, 1)`, torch's `uniform_`.
fn uniform<R: Rng + ?Sized>(rng: &mut R, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * rng.gen::<f64>()
}

impl RandomResizedCrop {
    /// Checks the ranges: `0 < scale.0 <= scale.1`, `0 < ratio.0 <= ratio.1`, all finite.
    pub fn new(scale: (f64, f64), ratio: (f64, f64)) -> Result<Self> {
        let ok = |(lo, hi): (f64, f64)| lo.is_finite() && hi.is_finite() && lo > 0.0 && lo <= hi;
        if !ok(scale) {
            return Err(VisionError::invalid(
                "random-resized-crop",
                format!(
                    "scale {}:{} must be finite with 0 < min <= max",
                    scale.0, scale.1
                ),
            ));
        }
        if !ok(ratio) {
            return Err(VisionError::invalid(
                "random-resized-crop",
                format!(
                    "ratio {}:{} must be finite with 0 < min <= max",
                    ratio.0, ratio.1
                ),
            ));
        }
        Ok(RandomResizedCrop { scale, ratio })
    }

    /// Draws a box for a `width` x `height` image (torchvision's
    /// `RandomResizedCrop.get_params`). The RNG is used the same number of
    /// times for the same draws, so a seeded RNG gives the same box.
    pub fn sample<R: Rng + ?Sized>(
        &self,
        rng: &mut R,
        width: usize,
        height: usize,
    ) -> Result<CropBox> {
        if width == 0 || height == 0 {
            return Err(VisionError::invalid(
                "random-resized-crop",
                format!("cannot crop an empty {width}x{height} image"),
            ));
        }
        let area = (width * height) as f64;
        let (log_lo, log_hi) = (self.ratio.0.ln(), self.ratio.1.ln());
        for _ in 0..ATTEMPTS {
            let target_area = area * uniform(rng, self.scale.0, self.scale.1);
            let aspect = uniform(rng, log_lo, log_hi).exp();
            let w = (target_area * aspect).sqrt().round_ties_even();
            let h = (target_area / aspect).sqrt().round_ties_even();
            if w > 0.0 && w <= width as f64 && h > 0.0 && h <= height as f64 {
                let (w, h) = (w as usize, h as usize);
                let top = rng.gen_range(0..=height - h);
                let left = rng.gen_range(0..=width - w);
                return Ok(CropBox {
                    top,
                    left,
                    height: h,
                    width: w,
                });
            }
        }
        Ok(self.fallback(width, height))
    }

    /// The centre crop torchvision falls back to after [`ATTEMPTS`] misses.
    pub fn fallback(&self, width: usize, height: usize) -> CropBox {
        let in_ratio = width as f64 / height as f64;
        let (w, h) = if in_ratio < self.ratio.0 {
            let h = (width as f64 / self.ratio.0).round_ties_even() as usize;
            (width, h.clamp(1, height))
        } else if in_ratio > self.ratio.1 {
            let w = (height as f64 * self.ratio.1).round_ties_even() as usize;
            (w.clamp(1, width), height)
        } else {
            (width, height)
        };
        CropBox {
            top: (height - h) / 2,
            left: (width - w) / 2,
            height: h,
            width: w,
        }
    }
}
