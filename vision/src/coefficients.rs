//! The weights of one resampling direction, PIL's way (`precompute_coeffs`
//! and `normalize_coeffs_8bpc` in `Resample.c`): a triangle filter whose
//! support grows with the downscale factor, normalised per output pixel and
//! rounded to 22-bit fixed point. The resize (`resize.rs`) makes them for
//! its source box and its inner loops (`kernels.rs`) apply them: both read
//! them from here, and neither knows the other's insides.

use crate::error::{Result, VisionError};

/// PIL's `PRECISION_BITS` for 8-bit images.
pub(crate) const PRECISION_BITS: u32 = 32 - 8 - 2;

/// The fixed-point weights of one resampling direction: output pixel `i`
/// reads `lens[i]` input pixels from `starts[i]` with the weights
/// `weights[i * taps ..][.. lens[i]]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Coefficients {
    pub(crate) starts: Vec<usize>,
    pub(crate) lens: Vec<usize>,
    pub(crate) taps: usize,
    pub(crate) weights: Vec<i32>,
}

fn triangle(x: f64) -> f64 {
    let x = x.abs();
    if x < 1.0 {
        1.0 - x
    } else {
        0.0
    }
}

impl Coefficients {
    /// PIL's `precompute_coeffs` + `normalize_coeffs_8bpc` for `out_size`
    /// pixels from the input interval `[in0, in1)` of an input `in_size`
    /// pixels long.
    pub(crate) fn new(in_size: usize, in0: f64, in1: f64, out_size: usize) -> Result<Self> {
        let valid = in1 > in0 && in0 >= 0.0 && in1 <= in_size as f64;
        if out_size == 0 || !valid {
            return Err(VisionError::invalid(
                "resize",
                format!(
                    "cannot resample [{in0}, {in1}) of {in_size} input pixels to {out_size} pixels"
                ),
            ));
        }
        let scale = (in1 - in0) / out_size as f64;
        let filterscale = scale.max(1.0);
        let support = filterscale; // the triangle's support is 1
        let taps = support.ceil() as usize * 2 + 1;
        let mut starts = Vec::with_capacity(out_size);
        let mut lens = Vec::with_capacity(out_size);
        let mut weights = vec![0i32; out_size * taps];
        let mut k = vec![0f64; taps];
        for xx in 0..out_size {
            let center = in0 + (xx as f64 + 0.5) * scale;
            let ss = 1.0 / filterscale;
            // C's (int) truncation, then clamping, as PIL.
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
            let len = xmax.saturating_sub(xmin).min(taps);
            let mut ww = 0.0;
            for (x, kx) in k.iter_mut().enumerate().take(len) {
                let w = triangle((x as f64 + xmin as f64 - center + 0.5) * ss);
                *kx = w;
                ww += w;
            }
            let row = &mut weights[xx * taps..(xx + 1) * taps];
            for (x, wx) in row.iter_mut().enumerate().take(len) {
                let w = if ww != 0.0 { k[x] / ww } else { k[x] };
                *wx = if w < 0.0 {
                    (-0.5 + w * f64::from(1u32 << PRECISION_BITS)) as i32
                } else {
                    (0.5 + w * f64::from(1u32 << PRECISION_BITS)) as i32
                };
            }
            starts.push(xmin);
            lens.push(len);
        }
        Ok(Coefficients {
            starts,
            lens,
            taps,
            weights,
        })
    }

    pub(crate) fn out_size(&self) -> usize {
        self.starts.len()
    }

    /// The input pixels any output pixel reads: `[first, end)`.
    pub(crate) fn input_span(&self) -> (usize, usize) {
        let first = self.starts.iter().copied().min().unwrap_or(0);
        let end = self
            .starts
            .iter()
            .zip(&self.lens)
            .map(|(s, l)| s + l)
            .max()
            .unwrap_or(0);
        (first, end)
    }

    /// The same weights with every start moved `offset` pixels down.
    pub(crate) fn shifted(mut self, offset: usize) -> Self {
        for s in &mut self.starts {
            *s -= offset;
        }
        self
    }

    pub(crate) fn weights_of(&self, i: usize) -> &[i32] {
        &self.weights[i * self.taps..i * self.taps + self.lens[i]]
    }
}
