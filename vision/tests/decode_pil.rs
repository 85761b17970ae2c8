//! Decoding equals PIL's (`Image.open(f).convert("RGB")`, Pillow 13.0.0)
//! within ±2 per channel for all but 0.1 % of values, on every committed
//! fixture written by PIL and by TensorFlow; resampling equals PIL's.

mod common;

use common::{difference, entries, fixture, npy_image};
use feedline_vision::{
    center_crop, decode, resize, resize_box, resized_crop, CropBox, Decoder, ImageInfo, JpegColor,
    ResizeTo, SourceBox,
};

#[test]
fn decode_matches_pil_on_every_fixture() {
    let mut checked = Vec::new();
    for entry in entries() {
        if entry["no_pixels"].as_bool() == Some(true) {
            continue;
        }
        let name = entry["file"].as_str().unwrap();
        let ours = decode(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let pil = npy_image(&format!("{name}.npy"));
        assert_eq!(
            (ours.width(), ours.height()),
            (pil.width(), pil.height()),
            "{name}: size"
        );
        let (over, max, n) = difference(ours.pixels(), pil.pixels(), 2);
        println!(
            "{name:<28} {:<12} max |diff| {max:>3}, {over} of {n} values off by more than 2",
            entry["pil_mode"]
        );
        assert!(
            over * 1000 <= n,
            "{name}: {over} of {n} values differ from PIL's by more than 2 (max {max})"
        );
        checked.push(name.to_string());
    }
    // Every kind the brief lists, from both writers.
    for expected in [
        "pil_420.jpg",
        "pil_444.jpg",
        "pil_progressive.jpg",
        "pil_grey.jpg",
        "pil_cmyk.jpg",
        "ycck.jpg",
        "pil_rgb.png",
        "pil_rgba.png",
        "pil_grey.png",
        "pil_palette.png",
        "pil_grey16.png",
        "tf_420.jpg",
        "tf_444.jpg",
        "tf_progressive.jpg",
        "tf_grey.jpg",
        "tf_rgb.png",
        "tf_rgba.png",
        "tf_grey.png",
        "tf_rgb16.png",
        "tf_grey16.png",
    ] {
        assert!(
            checked.iter().any(|c| c == expected),
            "{expected} not checked"
        );
    }
}

#[test]
fn jpeg_headers_name_their_colour_model() {
    let mut decoder = Decoder::new();
    let cases = [
        ("pil_420.jpg", JpegColor::YCbCr, false, (2, 2)),
        ("pil_444.jpg", JpegColor::YCbCr, false, (1, 1)),
        ("pil_422.jpg", JpegColor::YCbCr, false, (2, 1)),
        ("pil_progressive.jpg", JpegColor::YCbCr, true, (2, 2)),
        ("pil_grey.jpg", JpegColor::Grayscale, false, (1, 1)),
        ("pil_cmyk.jpg", JpegColor::Cmyk, false, (1, 1)),
        ("ycck.jpg", JpegColor::Ycck, false, (2, 2)),
        ("tf_progressive.jpg", JpegColor::YCbCr, true, (2, 2)),
        ("tf_grey.jpg", JpegColor::Grayscale, false, (1, 1)),
    ];
    for (name, color, progressive, sampling) in cases {
        match decoder.info(&fixture(name)).unwrap() {
            ImageInfo::Jpeg(info) => {
                assert_eq!(info.color, color, "{name}");
                assert_eq!(info.progressive, progressive, "{name}");
                assert_eq!(info.sampling[0], sampling, "{name}");
                assert_eq!(info.precision, 8, "{name}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

/// A JSON array of whole numbers.
fn numbers(value: &serde_json::Value) -> Vec<usize> {
    let array = value.as_array().expect("an array");
    array
        .iter()
        .map(|v| v.as_u64().expect("a whole number") as usize)
        .collect()
}

/// PIL's resampling of PIL's decoded pixels, against ours on the same
/// pixels: exact (the same fixed-point arithmetic).
#[test]
fn resampling_equals_pil() {
    let mut cases = 0;
    for entry in entries() {
        let Some(resamples) = entry["resample"].as_array() else {
            continue;
        };
        let name = entry["file"].as_str().unwrap();
        let image = npy_image(&format!("{name}.npy"));
        for case in resamples {
            let file = case["file"].as_str().unwrap();
            let expected = npy_image(file);
            let ours = if let Some(crop) = case["crop"].as_array() {
                let c: Vec<usize> = crop.iter().map(|v| v.as_u64().unwrap() as usize).collect();
                let out = numbers(&case["out"]);
                let crop = CropBox {
                    top: c[0],
                    left: c[1],
                    height: c[2],
                    width: c[3],
                };
                resized_crop(&image, crop, out[0], out[1]).unwrap()
            } else if let Some(short) = case["shorter"].as_u64() {
                let cc = numbers(&case["center_crop"]);
                let resized = resize(&image, ResizeTo::Shorter(short as usize)).unwrap();
                center_crop(&resized, cc[0], cc[1]).unwrap()
            } else {
                let b: Vec<f64> = case["box"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap())
                    .collect();
                let out = numbers(&case["out"]);
                let source = SourceBox {
                    x0: b[0],
                    y0: b[1],
                    x1: b[2],
                    y1: b[3],
                };
                resize_box(&image.view(), source, out[1], out[0]).unwrap()
            };
            assert_eq!(
                (ours.width(), ours.height()),
                (expected.width(), expected.height()),
                "{file}: size"
            );
            let (over, max, n) = difference(ours.pixels(), expected.pixels(), 0);
            assert_eq!(
                over, 0,
                "{file}: {over} of {n} values differ from PIL's (max {max})"
            );
            cases += 1;
        }
    }
    assert_eq!(cases, 8);
}
