//! Corrupt and truncated JPEG and PNG bytes are errors that say what is
//! wrong, never a panic and never wrong pixels: every fixture, truncated at
//! many lengths and with bytes flipped at many positions, through the whole
//! decode, the header read, the region decode and the fused training plan.

mod common;

use common::{fixture, image_names};
use feedline_vision::{Decoder, JpegRegion, Plan, ReducedWork, VisionError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn positions(len: usize, count: usize) -> Vec<usize> {
    let step = (len / count).max(1);
    let mut out: Vec<usize> = (0..len).step_by(step).collect();
    out.extend(len.saturating_sub(24)..len); // every byte of the tail
    out.sort_unstable();
    out.dedup();
    out
}

fn plan_output(
    plan: &Plan,
    decoder: &mut Decoder,
    bytes: &[u8],
    seed: u64,
) -> Result<Vec<f32>, VisionError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    plan.run(decoder, bytes, &mut rng).map(|a| match a {
        feedline_vision::ImageArray::F32(a) => a.into_raw_vec_and_offset().0,
        other => panic!("{other:?}"),
    })
}

fn assert_explains(err: &VisionError, name: &str, what: &str) {
    let text = err.to_string();
    assert!(text.len() > 12, "{name} {what}: terse error {text:?}");
}

#[test]
fn truncated_files_are_errors_or_the_same_pixels() {
    let plan = Plan::parse("imagenet-train").unwrap();
    let mut decoder = Decoder::new();
    let mut errors = 0;
    for name in image_names() {
        let bytes = fixture(&name);
        let intact = decoder.decode(&bytes).unwrap();
        let intact_plan: Vec<Vec<f32>> = (0..3)
            .map(|s| plan_output(&plan, &mut decoder, &bytes, s).unwrap())
            .collect();
        for cut in positions(bytes.len(), 150) {
            let short = &bytes[..cut];
            match decoder.decode(short) {
                Ok(image) => assert!(
                    name.ends_with(".png") && image == intact,
                    "{name} cut at {cut} of {}: decoded without an error{}",
                    bytes.len(),
                    if image == intact {
                        ""
                    } else {
                        " and with other pixels"
                    }
                ),
                Err(err) => {
                    assert_explains(&err, &name, "truncated");
                    errors += 1;
                }
            }
            // The training plan stops after the crop's last row: a cut below
            // it may go unseen, but the pixels it returns are the intact ones.
            for (seed, expected) in intact_plan.iter().enumerate() {
                match plan_output(&plan, &mut decoder, short, seed as u64) {
                    Ok(out) => assert!(
                        &out == expected,
                        "{name} cut at {cut}: the plan's pixels differ from the intact file's"
                    ),
                    Err(err) => assert_explains(&err, &name, "truncated plan"),
                }
            }
            let _ = decoder.info(short);
        }
    }
    assert!(errors > 3000, "{errors}");
}

#[test]
fn every_jpeg_truncation_is_an_error_for_the_whole_decode() {
    let mut decoder = Decoder::new();
    for name in image_names().into_iter().filter(|n| n.ends_with(".jpg")) {
        let bytes = fixture(&name);
        for cut in positions(bytes.len(), 400) {
            let err = decoder
                .decode(&bytes[..cut])
                .expect_err(&format!("{name} cut at {cut}"));
            match &err {
                VisionError::Jpeg { offset, len, .. } => {
                    assert_eq!(*len, cut);
                    assert!(offset <= len);
                }
                VisionError::UnknownFormat { .. } => assert!(cut < 3),
                other => panic!("{name} cut at {cut}: {other:?}"),
            }
        }
    }
}

#[test]
fn flipped_bytes_never_panic_and_png_damage_is_caught() {
    let plan = Plan::parse("imagenet-train").unwrap();
    let region_plan = Plan::parse("decode,center-crop(40),resize(17x23),to-f32,chw").unwrap();
    let mut decoder = Decoder::with_max_pixels(1 << 24);
    let mut rng = ChaCha8Rng::seed_from_u64(0xf11b);
    let (mut jpeg_errors, mut png_errors) = (0, 0);
    for name in image_names() {
        let bytes = fixture(&name);
        let intact = decoder.decode(&bytes).unwrap();
        for at in positions(bytes.len(), 300) {
            let mut bad = bytes.clone();
            bad[at] ^= [0xff, 0x01, 0x80, rng.gen_range(1..=255u8)][at % 4];
            let whole = decoder.decode(&bad);
            if name.ends_with(".png") {
                // Chunk CRCs and the Adler-32: damage to the image data or
                // the header is an error; past the last IDAT it does not
                // change the pixels.
                match &whole {
                    Ok(image) => assert!(
                        image == &intact,
                        "{name}: byte {at} flipped gave other pixels without an error"
                    ),
                    Err(err) => {
                        assert_explains(err, &name, "flipped");
                        png_errors += 1;
                    }
                }
            } else if let Err(err) = &whole {
                assert_explains(err, &name, "flipped");
                jpeg_errors += 1;
            }
            let _ = decoder.info(&bad);
            let _ = plan_output(&plan, &mut decoder, &bad, at as u64);
            let _ = region_plan.run(&mut decoder, &bad, &mut rng);
            let _ = decoder.decode_jpeg_region(
                &bad,
                JpegRegion {
                    scale_denom: 2,
                    x: 3,
                    y: 5,
                    width: 20,
                    height: 9,
                },
                ReducedWork::ALL,
            );
        }
    }
    assert!(
        jpeg_errors > 100 && png_errors > 500,
        "jpeg {jpeg_errors}, png {png_errors}"
    );
}

#[test]
fn hostile_headers_are_clear_errors() {
    let mut decoder = Decoder::new();
    let err = decoder.decode(b"").unwrap_err();
    assert!(err.to_string().contains("nothing (0 bytes)"), "{err}");
    let err = decoder.decode(b"GIF89a....").unwrap_err();
    assert!(err.to_string().contains("47 49 46 38 39 61"), "{err}");
    let err = decoder.decode(&[0xff, 0xd8, 0xff]).unwrap_err();
    assert!(matches!(err, VisionError::Jpeg { .. }), "{err}");
    let err = decoder
        .decode(&[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a])
        .unwrap_err();
    assert!(matches!(err, VisionError::Png { .. }), "{err}");

    // A JPEG whose SOF0 claims 65500 x 65500 pixels.
    let mut jpeg = fixture("pil_420.jpg");
    let sof = jpeg
        .windows(2)
        .position(|w| w == [0xff, 0xc0])
        .expect("SOF0");
    jpeg[sof + 5..sof + 9].copy_from_slice(&[0xff, 0xdc, 0xff, 0xdc]);
    let err = decoder.decode(&jpeg).unwrap_err();
    assert!(
        matches!(
            err,
            VisionError::TooLarge {
                width: 65500,
                height: 65500,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("65500x65500"), "{err}");

    // The limit is the decoder's: a small one refuses a small image.
    let mut small = Decoder::with_max_pixels(100);
    for name in ["pil_420.jpg", "pil_rgb.png"] {
        let err = small.decode(&fixture(name)).unwrap_err();
        assert!(
            matches!(err, VisionError::TooLarge { limit: 100, .. }),
            "{name}: {err}"
        );
    }
}

#[test]
fn the_error_names_the_damage() {
    let mut decoder = Decoder::new();
    let bytes = fixture("pil_420.jpg");
    let err = decoder.decode(&bytes[..bytes.len() / 2]).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("Premature end of JPEG file")
            && text.contains(&format!("of {}", bytes.len() / 2)),
        "{text}"
    );
    let png = fixture("pil_rgb.png");
    let mut bad = png.clone();
    bad[png.len() / 2] ^= 0x55;
    let err = decoder.decode(&bad).unwrap_err();
    let text = err.to_string().to_lowercase();
    assert!(text.contains("crc") || text.contains("checksum"), "{err}");
}

/// The offset of each marker segment (`ff xx` + length) of a JPEG's header,
/// up to and including the first SOS.
fn segments(jpeg: &[u8]) -> Vec<(u8, usize)> {
    let mut out = Vec::new();
    let mut at = 2;
    while at + 4 <= jpeg.len() && jpeg[at] == 0xff {
        let marker = jpeg[at + 1];
        out.push((marker, at));
        if marker == 0xda {
            break;
        }
        at += 2 + usize::from(u16::from_be_bytes([jpeg[at + 2], jpeg[at + 3]]));
    }
    out
}

fn segment(jpeg: &[u8], marker: u8) -> usize {
    segments(jpeg)
        .into_iter()
        .find(|(m, _)| *m == marker)
        .unwrap_or_else(|| panic!("no marker {marker:x}"))
        .1
}

#[test]
fn unsupported_kinds_are_named() {
    let mut decoder = Decoder::new();
    let base = fixture("pil_444.jpg");
    let sof = segment(&base, 0xc0);

    // 12-bit samples (libjpeg-turbo 2 decodes 8-bit only).
    let mut twelve = base.clone();
    twelve[sof + 4] = 12;
    let err = decoder.decode(&twelve).unwrap_err();
    assert!(err.to_string().contains("precision 12"), "{err}");

    // Lossless (SOF3) and hierarchical (SOF5) processes.
    for (marker, what) in [(0xc3u8, "SOF type 0xc3"), (0xc5, "SOF type 0xc5")] {
        let mut other = base.clone();
        other[sof + 1] = marker;
        let err = decoder.decode(&other).unwrap_err();
        assert!(err.to_string().contains(what), "{marker:x}: {err}");
    }

    // Two components (no colour model PIL or this crate converts): SOF0
    // and SOS rewritten to list the first two components only.
    let sos = segment(&base, 0xda);
    let mut two = base[..sof].to_vec();
    two.extend_from_slice(&[0xff, 0xc0, 0, 14]);
    two.extend_from_slice(&base[sof + 4..sof + 10]); // precision, height, width
    two[sof + 9] = 2;
    two.extend_from_slice(&base[sof + 10..sof + 16]); // components 1 and 2
    two.extend_from_slice(&base[sof + 19..sos]);
    two.extend_from_slice(&[0xff, 0xda, 0, 10, 2]);
    two.extend_from_slice(&base[sos + 5..sos + 9]); // components 1 and 2 of the scan
    two.extend_from_slice(&base[sos + 11..]);
    let err = decoder.decode(&two).unwrap_err();
    assert!(
        matches!(err, VisionError::UnsupportedJpeg { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("2 components"), "{err}");
    // The header alone reads.
    assert!(
        matches!(decoder.info(&two).unwrap(), feedline_vision::ImageInfo::Jpeg(i) if i.color == feedline_vision::JpegColor::Other(2, 0))
    );
}
