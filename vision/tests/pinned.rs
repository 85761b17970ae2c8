//! Literal expected outputs, computed outside this crate, so that a change
//! of a constant fails a test (a test comparing the constant with itself
//! cannot): ImageNet normalisation of a fixed crop of a fixture, against
//! PIL + numpy.
//!
//! The numbers were made with Pillow 13.0.0 and numpy 2.4.6:
//!
//! ```python
//! from PIL import Image
//! import numpy as np
//! img = Image.open("tests/fixtures/pil_420.jpg").convert("RGB")
//! a = np.asarray(img.crop((30, 20, 110, 80)).resize((4, 3), Image.BILINEAR))
//! x = a.astype(np.float32) / np.float32(255)
//! mean = np.array([0.485, 0.456, 0.406], np.float32)
//! std = np.array([0.229, 0.224, 0.225], np.float32)
//! print(((x - mean) / std).transpose(2, 0, 1))  # CHW, as torchvision's Normalize
//! ```
//!
//! (torchvision's `resized_crop` on a PIL image and `Normalize` compute the
//! same: PIL's antialiased bilinear resize, then float32 arithmetic.)
//!
//! Mutations this test catches (each tried, one line): ImageNet's G mean
//! 0.456 → 0.466 and R std 0.229 → 0.228 in `Normalize::IMAGENET`
//! (`src/output.rs`); `v as f32 / 255.0` → `/ 256.0` in the f32 table.

mod common;

use feedline_vision::{
    crop_resize_into, CropBox, CropResize, Decoder, KernelSource, Layout, Normalize, OutputFormat,
    Plan, ReducedWork,
};

use common::fixture;

/// PIL's values (see the module documentation), CHW, each the shortest
/// decimal of its f32 (`numpy.format_float_positional(v, unique=True)`).
const PIL: [[[f32; 4]; 3]; 3] = [
    [
        [-0.14855729, 0.022690238, -0.18280679, -0.4054286],
        [0.03981499, 0.5364329, -0.13143253, -0.6622999],
        [0.5364329, 0.878928, -0.25130582, -0.8506721],
    ],
    [
        [0.030112052, 0.9229692, 1.1155462, 1.0805323],
        [-0.495098, 0.5903362, 0.45028022, 0.9229692],
        [-0.33753496, 0.29271722, -0.30252096, 0.5903362],
    ],
    [
        [0.2696297, 0.8622224, 1.3850982, 1.1236603],
        [0.13019615, 0.6007845, 0.827364, 0.827364],
        [0.33934647, 0.51363856, -0.34039208, 0.6007845],
    ],
];

#[test]
fn imagenet_normalisation_of_a_fixed_crop_equals_pil_and_numpy() {
    let bytes = fixture("pil_420.jpg");
    let crop = CropBox {
        top: 20,
        left: 30,
        height: 60,
        width: 80,
    };
    let format = OutputFormat {
        normalize: Some(Normalize::IMAGENET),
        layout: Layout::Chw,
    };
    let mut out = vec![0f32; 3 * 3 * 4];
    // Whole-scale decoding (no DCT scaling): PIL decodes at full scale.
    crop_resize_into(
        &mut Decoder::new(),
        KernelSource::Bytes(&bytes),
        &mut |_, _| Ok(CropResize::resized_crop(crop, 3, 4, false)),
        &format,
        ReducedWork::NONE,
        &mut out,
    )
    .unwrap();
    let want: Vec<f32> = PIL.iter().flatten().flatten().copied().collect();
    assert_eq!(out, want, "ours (left) against PIL's (right)");
    // The spec's `normalize(imagenet)` is the same constants.
    let plan = Plan::parse("decode,center-crop(60x80),normalize(imagenet),chw").unwrap();
    let OutputFormat { normalize, .. } = *plan.format();
    assert_eq!(normalize, Some(Normalize::IMAGENET));
    assert_eq!(Normalize::IMAGENET.mean, [0.485, 0.456, 0.406]);
    assert_eq!(Normalize::IMAGENET.std, [0.229, 0.224, 0.225]);
}
