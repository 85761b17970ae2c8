//! Running a plan equals running its steps one by one with the same RNG
//! (exactly for the training chain and wherever the composition is exact,
//! within ±1 where a flip or a centre crop is folded into a resize's box),
//! deterministically for a seed; output buffers are checked.

mod common;

use common::{difference, fixture, image_names};
use feedline_vision::{
    center_crop, decode, flip_horizontal, resize, resized_crop, to_array, Decoder, ImageArray,
    Layout, Normalize, OutputFormat, Plan, RandomResizedCrop, ReducedWork, ResizeTo, RgbImage,
    VisionError,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Exact comparisons decode at full scale (DCT scaling trades exactness
/// for speed; `tests/fused.rs` bounds what it changes).
fn exact(spec: &str) -> Plan {
    Plan::parse(spec).unwrap().with_reduced_work(ReducedWork {
        dct_scaling: false,
        ..ReducedWork::ALL
    })
}

fn run(plan: &Plan, bytes: &[u8], seed: u64) -> ImageArray {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    plan.run(&mut Decoder::new(), bytes, &mut rng).unwrap()
}

fn run_u8(plan: &Plan, bytes: &[u8], seed: u64) -> Vec<u8> {
    let ImageArray::U8(a) = run(plan, bytes, seed) else {
        panic!("not u8")
    };
    a.into_raw_vec_and_offset().0
}

fn run_f32(plan: &Plan, bytes: &[u8], seed: u64) -> Vec<f32> {
    let ImageArray::F32(a) = run(plan, bytes, seed) else {
        panic!("not f32")
    };
    a.into_raw_vec_and_offset().0
}

fn imagenet_chw() -> OutputFormat {
    OutputFormat {
        normalize: Some(Normalize::IMAGENET),
        layout: Layout::Chw,
    }
}

#[test]
fn imagenet_train_equals_the_literal_chain() {
    let plan = exact("imagenet-train");
    let rrc = RandomResizedCrop::default();
    for name in image_names() {
        let bytes = fixture(&name);
        let image = decode(&bytes).unwrap();
        for seed in 0..20 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let crop = rrc.sample(&mut rng, image.width(), image.height()).unwrap();
            let mut x = resized_crop(&image, crop, 224, 224).unwrap();
            if rng.gen::<f64>() < 0.5 {
                x = flip_horizontal(&x);
            }
            let expected = to_array::<f32>(&x, &imagenet_chw()).unwrap();
            let out = run_f32(&plan, &bytes, seed);
            assert!(
                out.iter()
                    .zip(expected.iter())
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{name} seed {seed}"
            );
        }
    }
}

#[test]
fn same_seed_same_output_and_seeds_differ() {
    let plan = Plan::parse("imagenet-train").unwrap();
    let bytes = fixture("big_420.jpg");
    let a = run_f32(&plan, &bytes, 5);
    assert_eq!(a, run_f32(&plan, &bytes, 5));
    assert_ne!(a, run_f32(&plan, &bytes, 6));
    // One decoder reused over images and seeds gives the same as fresh ones.
    let mut decoder = Decoder::new();
    let mut out = vec![0f32; 3 * 224 * 224];
    for seed in [5, 9, 5] {
        for name in ["pil_420.jpg", "pil_rgb.png", "big_420.jpg"] {
            plan.run_into(
                &mut decoder,
                &fixture(name),
                &mut ChaCha8Rng::seed_from_u64(seed),
                &mut out,
            )
            .unwrap();
            assert_eq!(out, run_f32(&plan, &fixture(name), seed), "{name} {seed}");
        }
    }
}

#[test]
fn decode_preset_is_the_decoded_image() {
    let plan = Plan::parse("decode").unwrap();
    for name in image_names() {
        let bytes = fixture(&name);
        let image = decode(&bytes).unwrap();
        let out = plan
            .run(
                &mut Decoder::new(),
                &bytes,
                &mut ChaCha8Rng::seed_from_u64(0),
            )
            .unwrap();
        assert_eq!(out.shape(), [image.height(), image.width(), 3], "{name}");
        assert_eq!(out, ImageArray::U8(image.into_array()), "{name}");
    }
}

/// Chains whose composition is exact: crops narrow the region, a
/// resize after a resize materialises the first, padding happens on
/// decoded pixels.
#[test]
fn composed_chains_equal_their_steps() {
    type Literal = fn(&RgbImage, &mut ChaCha8Rng) -> RgbImage;
    let cases: [(&str, Literal); 4] = [
        ("decode,center-crop(60x90),resize(40x50)", |im, _| {
            resize(
                &center_crop(im, 60, 90).unwrap(),
                ResizeTo::Exact {
                    height: 40,
                    width: 50,
                },
            )
            .unwrap()
        }),
        ("decode,resize(100),rrc(50),flip(0.5)", |im, rng| {
            let r = resize(im, ResizeTo::Shorter(100)).unwrap();
            let b = RandomResizedCrop::default()
                .sample(rng, r.width(), r.height())
                .unwrap();
            let x = resized_crop(&r, b, 50, 50).unwrap();
            if rng.gen::<f64>() < 0.5 {
                flip_horizontal(&x)
            } else {
                x
            }
        }),
        ("decode,center-crop(300x310)", |im, _| {
            center_crop(im, 300, 310).unwrap()
        }),
        (
            "decode,resize(50),center-crop(60x80),resize(20)",
            |im, _| {
                let r = resize(im, ResizeTo::Shorter(50)).unwrap();
                resize(&center_crop(&r, 60, 80).unwrap(), ResizeTo::Shorter(20)).unwrap()
            },
        ),
    ];
    for (spec, literal) in cases {
        let plan = exact(spec);
        for name in [
            "pil_420.jpg",
            "tf_rgb.png",
            "pil_cmyk.jpg",
            "big_progressive.jpg",
        ] {
            let bytes = fixture(name);
            let image = decode(&bytes).unwrap();
            for seed in 0..4 {
                let expected = literal(&image, &mut ChaCha8Rng::seed_from_u64(seed));
                let out = run_u8(&plan, &bytes, seed);
                let (off, max, n) = difference(&out, expected.pixels(), 0);
                assert!(
                    off == 0,
                    "{spec} on {name}, seed {seed}: {off} of {n} values differ, max {max}"
                );
            }
        }
    }
}

/// Chains where a flip or a centre crop is folded into a resize's box:
/// equal to the literal steps within ±1, in at most 0.5 % of values.
#[test]
fn folded_chains_are_within_one() {
    type Literal = fn(&RgbImage, &mut ChaCha8Rng) -> RgbImage;
    let cases: [(&str, Literal); 3] = [
        ("decode,resize(256),center-crop(224)", |im, _| {
            center_crop(&resize(im, ResizeTo::Shorter(256)).unwrap(), 224, 224).unwrap()
        }),
        ("decode,flip(0.5),rrc(64x48)", |im, rng| {
            let f = if rng.gen::<f64>() < 0.5 {
                flip_horizontal(im)
            } else {
                im.clone()
            };
            let b = RandomResizedCrop::default()
                .sample(rng, f.width(), f.height())
                .unwrap();
            resized_crop(&f, b, 64, 48).unwrap()
        }),
        ("decode,flip(1),resize(77x55),center-crop(40)", |im, _| {
            let r = resize(
                &flip_horizontal(im),
                ResizeTo::Exact {
                    height: 77,
                    width: 55,
                },
            )
            .unwrap();
            center_crop(&r, 40, 40).unwrap()
        }),
    ];
    for (spec, literal) in cases {
        let plan = exact(spec);
        for name in image_names() {
            let bytes = fixture(&name);
            let image = decode(&bytes).unwrap();
            for seed in 0..3 {
                let expected = literal(&image, &mut ChaCha8Rng::seed_from_u64(seed));
                let out = run_u8(&plan, &bytes, seed);
                let (over, max, n) = difference(&out, expected.pixels(), 1);
                let (off, _, _) = difference(&out, expected.pixels(), 0);
                assert!(
                    over == 0 && off * 200 <= n,
                    "{spec} on {name} seed {seed}: {off} of {n} values differ, max {max}"
                );
            }
        }
    }
}

#[test]
fn output_buffers_are_checked() {
    let bytes = fixture("pil_420.jpg"); // 163 x 121
    let mut decoder = Decoder::new();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let train = Plan::parse("imagenet-train").unwrap();
    let err = train
        .run_into(
            &mut decoder,
            &bytes,
            &mut rng,
            &mut vec![0u8; 3 * 224 * 224],
        )
        .unwrap_err();
    assert_eq!(
        err,
        VisionError::OutputDtype {
            plan: "f32",
            buffer: "u8"
        }
    );
    let err = train
        .run_into(&mut decoder, &bytes, &mut rng, &mut [0f32; 10])
        .unwrap_err();
    assert_eq!(
        err,
        VisionError::OutputLength {
            expected: 3 * 224 * 224,
            actual: 10,
            shape: [3, 224, 224]
        }
    );
    assert!(err.to_string().contains("[3, 224, 224]"), "{err}");
    // A variable shape is checked against the image's.
    let decode_plan = Plan::parse("decode,chw").unwrap();
    let mut out = vec![0u8; 3 * 121 * 163];
    assert_eq!(
        decode_plan
            .run_into(&mut decoder, &bytes, &mut rng, &mut out)
            .unwrap(),
        [3, 121, 163]
    );
    assert_eq!(
        &out[..],
        to_array::<u8>(
            &decode(&bytes).unwrap(),
            &OutputFormat {
                normalize: None,
                layout: Layout::Chw
            }
        )
        .unwrap()
        .as_slice()
        .unwrap()
    );
    let err = decode_plan
        .run_into(&mut decoder, &bytes, &mut rng, &mut [0u8; 5])
        .unwrap_err();
    assert!(
        matches!(
            err,
            VisionError::OutputLength {
                shape: [3, 121, 163],
                ..
            }
        ),
        "{err}"
    );
    // A bad image is an error from the plan too.
    let err = train
        .run(&mut decoder, b"\xff\xd8\xff\xe0junk", &mut rng)
        .unwrap_err();
    assert!(matches!(err, VisionError::Jpeg { .. }), "{err}");
}

#[test]
fn an_output_too_large_for_memory_is_an_error() {
    // 65535 x 65535 f32 CHW is 51 GB: over the pixel limit, refused
    // before anything is allocated.
    let plan = Plan::parse("decode,resize(65535x65535),to-f32").unwrap();
    let err = plan
        .run(
            &mut Decoder::new(),
            &fixture("pil_420.jpg"),
            &mut ChaCha8Rng::seed_from_u64(0),
        )
        .unwrap_err();
    assert!(matches!(err, VisionError::OutputTooLarge { .. }), "{err}");
    // With no pixel limit, the allocation fails: refused, not an abort.
    let err = plan
        .run(
            &mut Decoder::with_max_pixels(u64::MAX),
            &fixture("pil_420.jpg"),
            &mut ChaCha8Rng::seed_from_u64(0),
        )
        .unwrap_err();
    assert!(matches!(err, VisionError::OutOfMemory { .. }), "{err}");
}

/// A plan's pixels with its output steps applied apart (`Plan::pixels` then
/// `write_pixels`) are, to the bit, the plan's output: for every chain
/// shape with output steps, the default reduced work (what a pipeline
/// runs), every fixture image and many seeds.
#[test]
fn pixels_then_output_steps_equal_the_plan() {
    use feedline_vision::{write_pixels, Dtype};
    let specs = [
        "imagenet-train",
        "imagenet-eval",
        "decode,random-resized-crop(64),flip(0.5),to-f32",
        "decode,resize(40),center-crop(32),flip(1),chw",
        "decode,resize(48),normalize(mean=0.5:0.4:0.3,std=0.2:0.3:0.4),hwc",
    ];
    for spec in specs {
        let plan = Plan::parse(spec).unwrap();
        assert!(plan.has_output_steps(), "{spec}");
        let pixels = plan.pixels();
        assert_eq!(pixels.dtype(), Dtype::U8);
        assert_eq!(Plan::parse(&pixels.to_string()).unwrap(), pixels, "{spec}");
        for name in image_names() {
            let bytes = fixture(&name);
            for seed in 0..12 {
                let shape = run(&pixels, &bytes, seed).shape();
                let (h, w) = (shape[0], shape[1]);
                let raw = run_u8(&pixels, &bytes, seed);
                match run(&plan, &bytes, seed) {
                    ImageArray::F32(want) => {
                        let mut got = vec![0f32; want.len()];
                        write_pixels(&raw, h, w, plan.format(), &mut got).unwrap();
                        let want = want.into_raw_vec_and_offset().0;
                        assert!(
                            got.iter()
                                .zip(&want)
                                .all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{spec} {name} seed {seed}"
                        );
                    }
                    ImageArray::U8(want) => {
                        let mut got = vec![0u8; want.len()];
                        write_pixels(&raw, h, w, plan.format(), &mut got).unwrap();
                        assert_eq!(
                            got,
                            want.into_raw_vec_and_offset().0,
                            "{spec} {name} seed {seed}"
                        );
                    }
                }
            }
        }
    }
    let plain = Plan::parse("decode,resize(32)").unwrap();
    assert!(!plain.has_output_steps());
    assert_eq!(plain.pixels(), plain);
}

#[test]
fn write_pixels_checks_its_lengths() {
    use feedline_vision::write_pixels;
    let format = imagenet_chw();
    let mut out = vec![0f32; 2 * 3 * 3];
    assert!(matches!(
        write_pixels(&[0u8; 17], 2, 3, &format, &mut out),
        Err(VisionError::OutputLength { .. })
    ));
    assert!(matches!(
        write_pixels(&[0u8; 18], 2, 3, &format, &mut out[..17]),
        Err(VisionError::OutputLength { .. })
    ));
    let mut bytes = vec![0u8; 18];
    assert!(
        write_pixels(&[0u8; 18], 2, 3, &format, &mut bytes).is_err(),
        "a u8 output cannot be normalised"
    );
    write_pixels(&[7u8; 18], 2, 3, &format, &mut out).unwrap();
    assert_eq!(out[0], (7.0 / 255.0 - 0.485) / 0.229);
}
