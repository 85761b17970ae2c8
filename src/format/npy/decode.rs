//! Element decoding: whole elements of an array's [`Kind`], in either byte
//! order, appended to a column of the kind's dtype (half floats converted
//! by hand, `u8` values above `i64::MAX` refused).

use super::header::Kind;
use crate::values::Values;

macro_rules! extend_num {
    ($v:expr, $src:expr, $t:ty, $little:expr, $map:expr) => {{
        const N: usize = std::mem::size_of::<$t>();
        let src: &[u8] = $src;
        #[allow(clippy::redundant_closure_call)]
        let f = $map;
        $v.reserve(src.len() / N);
        if $little {
            $v.extend(src.chunks_exact(N).map(|c| {
                f(<$t>::from_le_bytes(
                    c.try_into().expect("chunks_exact yields N bytes"),
                ))
            }))
        } else {
            $v.extend(src.chunks_exact(N).map(|c| {
                f(<$t>::from_be_bytes(
                    c.try_into().expect("chunks_exact yields N bytes"),
                ))
            }))
        }
    }};
}

/// Decode IEEE 754 half-precision bits to f32 (exact: every half is an f32).
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let mant = (h & 0x3ff) as u32;
    let bits = match (exp, mant) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: m × 2^-24; normalize into an f32.
            let shift = m.leading_zeros() - 21; // bring the top bit to bit 10
            let m = (m << shift) & 0x3ff;
            let e = 113 - shift; // 127 - 14 - shift
            sign | (e << 23) | (m << 13)
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13) | 0x0040_0000,
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// Append the elements in `src` (whole elements of `kind`) to `out`, which
/// has the kind's dtype. `Err(i)`: element `i` is a u8 that does not fit i64.
pub(super) fn decode(
    kind: Kind,
    little: bool,
    src: &[u8],
    out: &mut Values,
) -> std::result::Result<(), usize> {
    match (kind, out) {
        (Kind::B1, Values::Bool(v)) => v.extend(src.iter().map(|&b| b != 0)),
        (Kind::I1, Values::I32(v)) => v.extend(src.iter().map(|&b| b as i8 as i32)),
        (Kind::I2, Values::I32(v)) => extend_num!(v, src, i16, little, |x: i16| x as i32),
        (Kind::I4, Values::I32(v)) => extend_num!(v, src, i32, little, |x: i32| x),
        (Kind::I8, Values::I64(v)) => extend_num!(v, src, i64, little, |x: i64| x),
        (Kind::U1, Values::U8(v)) => v.extend_from_slice(src),
        (Kind::U2, Values::I64(v)) => extend_num!(v, src, u16, little, |x: u16| x as i64),
        (Kind::U4, Values::I64(v)) => extend_num!(v, src, u32, little, |x: u32| x as i64),
        (Kind::U8, Values::I64(v)) => {
            let before = v.len();
            extend_num!(v, src, u64, little, |x: u64| x as i64);
            if let Some(i) = v[before..].iter().position(|&x| x < 0) {
                v.truncate(before);
                return Err(i);
            }
        }
        (Kind::F2, Values::F32(v)) => extend_num!(v, src, u16, little, f16_to_f32),
        (Kind::F4, Values::F32(v)) => extend_num!(v, src, f32, little, |x: f32| x),
        (Kind::F8, Values::F64(v)) => extend_num!(v, src, f64, little, |x: f64| x),
        (k, out) => unreachable!("decode: {k:?} into a {} column", out.dtype()),
    }
    Ok(())
}

/// The u8 element `i` of `src` (for messages).
pub(super) fn u8_value(src: &[u8], i: usize, little: bool) -> u64 {
    let b: [u8; 8] = src[i * 8..i * 8 + 8].try_into().expect("8 bytes");
    if little {
        u64::from_le_bytes(b)
    } else {
        u64::from_be_bytes(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference half decoding, straight from the definition.
    fn f16_reference(h: u16) -> f64 {
        let s = if h >> 15 == 1 { -1.0 } else { 1.0 };
        let e = ((h >> 10) & 0x1f) as i32;
        let m = (h & 0x3ff) as f64;
        match e {
            0 => s * m * 2f64.powi(-24),
            31 if m == 0.0 => s * f64::INFINITY,
            31 => f64::NAN,
            _ => s * (1.0 + m / 1024.0) * 2f64.powi(e - 15),
        }
    }

    #[test]
    fn half_matches_the_definition_for_all_bit_patterns() {
        for h in 0..=u16::MAX {
            let got = f16_to_f32(h) as f64;
            let want = f16_reference(h);
            if want.is_nan() {
                assert!(got.is_nan(), "{h:#06x}");
            } else {
                assert_eq!(got, want, "{h:#06x}");
                assert_eq!(got.is_sign_negative(), want.is_sign_negative(), "{h:#06x}");
            }
        }
    }
}
