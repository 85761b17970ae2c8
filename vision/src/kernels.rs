//! The inner loops of the resampling, one output row at a time, with the
//! same integer arithmetic on every path: AVX2 when the CPU has it
//! (detected at run time), portable scalar code otherwise. Each output value
//! is `clamp((2^21 + sum(pixel * weight)) >> 22, 0, 255)` with PIL's 22-bit
//! weights, so every path gives the same bytes (tested against each other
//! in this module's tests and against PIL in `tests/decode_pil.rs`).

use crate::coefficients::{Coefficients, PRECISION_BITS};

const HALF: i32 = 1 << (PRECISION_BITS - 1);

#[inline]
fn clip8(acc: i32) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Horizontal weights with one tap count for every output pixel: each
/// window `[starts[i], starts[i] + taps)` lies inside the input row, and
/// the weights outside PIL's own window are zero (so the sums are PIL's).
#[derive(Clone, Debug)]
pub(crate) struct HorizontalTaps {
    taps: usize,
    starts: Vec<usize>,
    weights: Vec<i32>,
    /// Groups of 4 taps per output pixel (`ceil(taps / 4)`).
    groups: usize,
    /// Per output pixel and group of 4 taps, each weight over the lanes
    /// R, G, B of its tap and 0 over the fourth: `[w0, w0, w0, 0, w1, ...]`,
    /// 16 values per group, zero past `taps`.
    lane_weights: Vec<i32>,
}

impl HorizontalTaps {
    /// From PIL's coefficients over an input row of `in_size` pixels.
    pub(crate) fn new(c: &Coefficients, in_size: usize) -> Self {
        let taps = c
            .lens
            .iter()
            .copied()
            .max()
            .unwrap_or(1)
            .clamp(1, in_size.max(1));
        let out = c.starts.len();
        let mut starts = Vec::with_capacity(out);
        let mut weights = vec![0i32; out * taps];
        for i in 0..out {
            let (start, len) = (c.starts[i], c.lens[i]);
            let fixed = start.min(in_size.saturating_sub(taps));
            let offset = start - fixed;
            weights[i * taps + offset..i * taps + offset + len]
                .copy_from_slice(&c.weights[i * c.taps..i * c.taps + len]);
            starts.push(fixed);
        }
        let groups = taps.div_ceil(4);
        let mut lane_weights = vec![0i32; out * groups * 16];
        for i in 0..out {
            for k in 0..taps {
                let at = i * groups * 16 + k * 4;
                lane_weights[at..at + 3].fill(weights[i * taps + k]);
            }
        }
        HorizontalTaps {
            taps,
            starts,
            weights,
            groups,
            lane_weights,
        }
    }

    fn out_size(&self) -> usize {
        self.starts.len()
    }
}

/// One output row of the horizontal pass: `row` is an input row of RGB
/// pixels, `out` gets `taps.out_size()` RGB pixels.
pub(crate) fn horizontal_row(row: &[u8], taps: &HorizontalTaps, out: &mut [u8]) {
    debug_assert_eq!(out.len(), taps.out_size() * 3);
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            unsafe { horizontal_row_avx2(row, taps, out) };
            return;
        }
    }
    horizontal_pixels(row, taps, out, 0);
}

/// The scalar horizontal pass from output pixel `first` on.
fn horizontal_pixels(row: &[u8], taps: &HorizontalTaps, out: &mut [u8], first: usize) {
    let t = taps.taps;
    for i in first..taps.out_size() {
        let start = taps.starts[i] * 3;
        let weights = &taps.weights[i * t..(i + 1) * t];
        let input = &row[start..start + t * 3];
        let (mut r, mut g, mut b) = (HALF, HALF, HALF);
        for (w, p) in weights.iter().zip(input.chunks_exact(3)) {
            r += i32::from(p[0]) * w;
            g += i32::from(p[1]) * w;
            b += i32::from(p[2]) * w;
        }
        out[i * 3] = clip8(r);
        out[i * 3 + 1] = clip8(g);
        out[i * 3 + 2] = clip8(b);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn horizontal_row_avx2(row: &[u8], taps: &HorizontalTaps, out: &mut [u8]) {
    match taps.groups {
        1 => horizontal_groups_avx2::<1>(row, taps, out),
        2 => horizontal_groups_avx2::<2>(row, taps, out),
        3 => horizontal_groups_avx2::<3>(row, taps, out),
        _ => horizontal_pixels(row, taps, out, 0),
    }
}

/// `G` groups of 4 taps per output pixel: each group is one 16-byte load
/// (pixels `4g .. 4g + 4` of the window and a byte or four past them, whose
/// weights are zero), spread to R, G, B, 0 lanes, multiplied by the lane
/// weights and summed. A pixel whose loads would pass the row's end, and
/// the pixels after it, are left to the scalar loop.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn horizontal_groups_avx2<const G: usize>(
    row: &[u8],
    taps: &HorizontalTaps,
    out: &mut [u8],
) {
    use std::arch::x86_64::*;
    debug_assert_eq!(taps.groups, G);
    let n = taps.out_size();
    let spread = _mm_setr_epi8(0, 1, 2, -128, 3, 4, 5, -128, 6, 7, 8, -128, 9, 10, 11, -128);
    let half = _mm_set1_epi32(HALF);
    let base = row.as_ptr();
    let weights = taps.lane_weights.as_ptr();
    let mut done = n;
    for i in 0..n {
        let s = taps.starts[i] * 3;
        if s + 12 * (G - 1) + 16 > row.len() {
            done = i;
            break;
        }
        let mut acc = _mm256_setzero_si256();
        for g in 0..G {
            // SAFETY: s + 12g + 16 <= row.len() (checked above); lane_weights
            // holds n * G * 16 values.
            let px = _mm_shuffle_epi8(
                _mm_loadu_si128(base.add(s + 12 * g) as *const __m128i),
                spread,
            );
            let w = weights.add((i * G + g) * 16);
            let w01 = _mm256_loadu_si256(w as *const __m256i);
            let w23 = _mm256_loadu_si256(w.add(8) as *const __m256i);
            acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(px), w01));
            acc = _mm256_add_epi32(
                acc,
                _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(px, 8)), w23),
            );
        }
        let sum = _mm_add_epi32(
            _mm_add_epi32(
                _mm256_castsi256_si128(acc),
                _mm256_extracti128_si256(acc, 1),
            ),
            half,
        );
        let v = _mm_srai_epi32(sum, PRECISION_BITS as i32);
        let bytes = _mm_packus_epi16(_mm_packs_epi32(v, v), _mm_setzero_si128());
        let rgbx = (_mm_cvtsi128_si32(bytes) as u32).to_le_bytes();
        out[i * 3..i * 3 + 3].copy_from_slice(&rgbx[..3]);
    }
    horizontal_pixels(row, taps, out, done);
}

/// One output row of the vertical pass: the sum over `weights` of the rows
/// `first_row + k` of `src` (rows of `out.len()` bytes).
pub(crate) fn vertical_row(src: &[u8], first_row: usize, weights: &[i32], out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            unsafe { vertical_row_avx2(src, first_row, weights, out) };
            return;
        }
    }
    vertical_bytes(src, first_row, weights, out, 0);
}

/// The scalar vertical pass from byte `first` of the row on.
fn vertical_bytes(src: &[u8], first_row: usize, weights: &[i32], out: &mut [u8], first: usize) {
    let row_len = out.len();
    for (x, o) in out.iter_mut().enumerate().skip(first) {
        let mut acc = HALF;
        for (k, &w) in weights.iter().enumerate() {
            acc += i32::from(src[(first_row + k) * row_len + x]) * w;
        }
        *o = clip8(acc);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn vertical_row_avx2(src: &[u8], first_row: usize, weights: &[i32], out: &mut [u8]) {
    use std::arch::x86_64::*;
    let row_len = out.len();
    assert!(
        src.len() >= (first_row + weights.len()) * row_len,
        "vertical pass reads past its input"
    );
    let half = _mm256_set1_epi32(HALF);
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let mut x = 0;
    while x + 32 <= row_len {
        let (mut a0, mut a1, mut a2, mut a3) = (half, half, half, half);
        for (k, &w) in weights.iter().enumerate() {
            // SAFETY: the assert above keeps rows first_row..first_row+len inside src.
            let v = _mm256_loadu_si256(
                src.as_ptr().add((first_row + k) * row_len + x) as *const __m256i
            );
            let wv = _mm256_set1_epi32(w);
            let lo = _mm256_castsi256_si128(v);
            let hi = _mm256_extracti128_si256(v, 1);
            a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(lo), wv));
            a1 = _mm256_add_epi32(
                a1,
                _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)), wv),
            );
            a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(hi), wv));
            a3 = _mm256_add_epi32(
                a3,
                _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)), wv),
            );
        }
        const S: i32 = PRECISION_BITS as i32;
        let p01 = _mm256_packs_epi32(_mm256_srai_epi32(a0, S), _mm256_srai_epi32(a1, S));
        let p23 = _mm256_packs_epi32(_mm256_srai_epi32(a2, S), _mm256_srai_epi32(a3, S));
        let bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p01, p23), order);
        // SAFETY: x + 32 <= out.len().
        _mm256_storeu_si256(out.as_mut_ptr().add(x) as *mut __m256i, bytes);
        x += 32;
    }
    vertical_bytes(src, first_row, weights, out, x);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// PIL's sum over its own window, the definition both paths must meet.
    fn reference_horizontal(row: &[u8], c: &Coefficients) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..c.starts.len() {
            for ch in 0..3 {
                let mut acc = HALF;
                for k in 0..c.lens[i] {
                    acc += i32::from(row[(c.starts[i] + k) * 3 + ch]) * c.weights[i * c.taps + k];
                }
                out.push(clip8(acc));
            }
        }
        out
    }

    #[test]
    fn every_path_gives_pils_sums() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut groups_seen = [0usize; 8];
        for case in 0..400 {
            // Every downscale factor from 1 to 7 (1 to 4 groups of 4 taps),
            // then random sizes and boxes.
            let (in_size, out_size) = if case < 100 {
                let out = rng.gen_range(1..120);
                (
                    ((out as f64) * (1.0 + case as f64 * 0.06)) as usize + 1,
                    out,
                )
            } else {
                (rng.gen_range(1..400), rng.gen_range(1..300))
            };
            let x0 = rng.gen_range(0.0..in_size as f64 * 0.5);
            let x1 = rng.gen_range(x0 + 0.01..=in_size as f64);
            let c = Coefficients::new(in_size, x0, x1, out_size).unwrap();
            let row: Vec<u8> = (0..in_size * 3).map(|_| rng.gen()).collect();
            let expected = reference_horizontal(&row, &c);
            let taps = HorizontalTaps::new(&c, in_size);
            groups_seen[taps.groups.min(7)] += 1;
            let mut scalar = vec![0u8; out_size * 3];
            horizontal_pixels(&row, &taps, &mut scalar, 0);
            assert_eq!(
                scalar, expected,
                "scalar, {in_size} -> {out_size} over [{x0}, {x1})"
            );
            let mut dispatched = vec![0u8; out_size * 3];
            horizontal_row(&row, &taps, &mut dispatched);
            assert_eq!(dispatched, expected, "dispatched, {in_size} -> {out_size}");

            let row_len = rng.gen_range(1..200);
            let rows = rng.gen_range(1..6);
            let src: Vec<u8> = (0..row_len * (rows + 2)).map(|_| rng.gen()).collect();
            let weights: Vec<i32> = (0..rows)
                .map(|_| rng.gen_range(-(1 << 20)..(1 << 20)))
                .collect();
            let mut a = vec![0u8; row_len];
            let mut b = vec![0u8; row_len];
            vertical_bytes(&src, 1, &weights, &mut a, 0);
            vertical_row(&src, 1, &weights, &mut b);
            assert_eq!(a, b, "vertical, {row_len} bytes, {rows} taps");
        }
        assert!(groups_seen[1..=4].iter().all(|&n| n > 0), "{groups_seen:?}");
    }
}
