//! A region decode (rows above skipped, decoding stopped after the last
//! row, columns cropped, at any DCT scale) gives exactly the pixels of the
//! same rectangle of the whole image decoded at that scale, on every JPEG
//! fixture (baseline 4:2:0/4:2:2/4:4:4, progressive, grey, CMYK, restart
//! markers) and many rectangles.

mod common;

use common::{fixture, jpeg_names};
use feedline_vision::{Decoder, JpegRegion, ReducedWork, VisionError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn all_work_variants() -> Vec<ReducedWork> {
    let mut out = Vec::new();
    for bits in 0..8u8 {
        out.push(ReducedWork {
            skip_rows: bits & 1 != 0,
            crop_cols: bits & 2 != 0,
            stop_early: bits & 4 != 0,
            dct_scaling: false,
        });
    }
    out
}

#[test]
fn region_decode_equals_the_rectangle_of_the_whole_decode() {
    let mut decoder = Decoder::new();
    let mut rng = ChaCha8Rng::seed_from_u64(16);
    let mut checked = 0;
    for name in jpeg_names() {
        let bytes = fixture(&name);
        for denom in [1u32, 2, 4, 8] {
            let (w0, h0) = {
                let info = decoder.info(&bytes).unwrap();
                (info.width(), info.height())
            };
            let (sw, sh) = (w0.div_ceil(denom), h0.div_ceil(denom));
            let whole = JpegRegion {
                scale_denom: denom,
                x: 0,
                y: 0,
                width: sw,
                height: sh,
            };
            let full = decoder
                .decode_jpeg_region(&bytes, whole, ReducedWork::NONE)
                .unwrap();
            assert_eq!(
                (full.width(), full.height()),
                (sw as usize, sh as usize),
                "{name} 1/{denom}"
            );
            // Edges, corners, single rows and columns, then random rectangles.
            let mut regions = vec![
                (0, 0, sw, sh),
                (0, 0, 1, 1),
                (sw - 1, sh - 1, 1, 1),
                (0, sh / 2, sw, 1),
                (sw / 2, 0, 1, sh),
                (sw / 3, sh / 3, sw - sw / 3, sh - sh / 3),
            ];
            for _ in 0..24 {
                let x = rng.gen_range(0..sw);
                let y = rng.gen_range(0..sh);
                let width = rng.gen_range(1..=sw - x);
                let height = rng.gen_range(1..=sh - y);
                regions.push((x, y, width, height));
            }
            for (i, &(x, y, width, height)) in regions.iter().enumerate() {
                let region = JpegRegion {
                    scale_denom: denom,
                    x,
                    y,
                    width,
                    height,
                };
                let variants = all_work_variants();
                // Every variant on the fixed regions, one per random region.
                let chosen: Vec<ReducedWork> = if i < 6 {
                    variants
                } else {
                    vec![variants[i % 8], ReducedWork::ALL]
                };
                for work in chosen {
                    let part = decoder
                        .decode_jpeg_region(&bytes, region, work)
                        .unwrap_or_else(|e| panic!("{name} {region:?} {work:?}: {e}"));
                    let expected = full
                        .view()
                        .sub(x as usize, y as usize, width as usize, height as usize)
                        .unwrap()
                        .to_image();
                    assert!(part == expected, "{name}: {region:?} with {work:?} differs from the whole decode's rectangle");
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 1000, "{checked}");
}

#[test]
fn regions_outside_the_image_are_errors() {
    let bytes = fixture("pil_420.jpg"); // 163 x 121
    let mut decoder = Decoder::new();
    for region in [
        JpegRegion {
            scale_denom: 1,
            x: 160,
            y: 0,
            width: 4,
            height: 1,
        },
        JpegRegion {
            scale_denom: 1,
            x: 0,
            y: 121,
            width: 1,
            height: 1,
        },
        JpegRegion {
            scale_denom: 2,
            x: 0,
            y: 0,
            width: 83,
            height: 1,
        },
        JpegRegion {
            scale_denom: 3,
            x: 0,
            y: 0,
            width: 1,
            height: 1,
        },
    ] {
        let err = decoder
            .decode_jpeg_region(&bytes, region, ReducedWork::ALL)
            .unwrap_err();
        assert!(
            matches!(
                err,
                VisionError::InvalidParameter { .. } | VisionError::Jpeg { .. }
            ),
            "{region:?}: {err:?}"
        );
        assert!(!err.to_string().is_empty());
    }
    // The decoder is still usable after each refusal.
    assert_eq!(decoder.decode(&bytes).unwrap().width(), 163);
    // A PNG is not a JPEG region source.
    let err = decoder
        .decode_jpeg_region(
            &fixture("pil_rgb.png"),
            JpegRegion {
                scale_denom: 1,
                x: 0,
                y: 0,
                width: 1,
                height: 1,
            },
            ReducedWork::ALL,
        )
        .unwrap_err();
    assert!(err.to_string().contains("PNG"), "{err}");
}
