//! Shared by the vision tests: the committed fixtures (`tests/fixtures/`),
//! their manifest, PIL's pixels, and pixel comparisons.
#![allow(dead_code)]

use std::path::PathBuf;

use feedline_vision::RgbImage;
use ndarray::Array3;
use ndarray_npy::ReadNpyExt;
use serde_json::Value;

pub fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub fn fixture(name: &str) -> Vec<u8> {
    let path = fixture_dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn manifest() -> Value {
    serde_json::from_slice(&fixture("fixtures.json")).expect("fixtures.json parses")
}

/// Every fixture entry of the manifest.
pub fn entries() -> Vec<Value> {
    manifest()["files"].as_array().expect("files").clone()
}

/// The names of every image fixture (JPEG and PNG).
pub fn image_names() -> Vec<String> {
    entries()
        .iter()
        .map(|e| e["file"].as_str().expect("file").to_string())
        .collect()
}

/// The names of the JPEG fixtures.
pub fn jpeg_names() -> Vec<String> {
    image_names()
        .into_iter()
        .filter(|n| n.ends_with(".jpg"))
        .collect()
}

/// A `.npy` array of u8 `[H, W, 3]` (PIL's pixels) as an image.
pub fn npy_image(name: &str) -> RgbImage {
    let bytes = fixture(name);
    let array = Array3::<u8>::read_npy(&bytes[..]).unwrap_or_else(|e| panic!("{name}: {e}"));
    let (h, w, c) = array.dim();
    assert_eq!(c, 3, "{name}: {c} channels");
    RgbImage::from_pixels(w, h, array.as_standard_layout().iter().copied().collect())
        .expect("npy image")
}

/// How two u8 images differ: (values differing by more than `tolerance`,
/// largest difference, values).
pub fn difference(a: &[u8], b: &[u8], tolerance: u8) -> (usize, u8, usize) {
    assert_eq!(a.len(), b.len(), "lengths differ");
    let mut over = 0;
    let mut max = 0;
    for (&x, &y) in a.iter().zip(b) {
        let d = x.abs_diff(y);
        max = max.max(d);
        if d > tolerance {
            over += 1;
        }
    }
    (over, max, a.len())
}
