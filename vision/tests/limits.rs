//! The decoder's limits, and what one call of a plan holds under them.
//!
//! A counting global allocator keeps, per thread, the heap bytes allocated
//! and not freed, and their peak; each case runs on one thread, so the
//! peak over a call is what that call held at most (the Rust side: the
//! region, the resampling rows, the `png` crate's buffers, intermediates
//! and outputs; libjpeg's own memory is C's, capped by libjpeg itself).
//!
//! - The pixel limit refuses an image from its header, before any buffer:
//!   a 12000×12000 PNG of a few KB is refused naming its size and the limit
//!   and the call allocates almost nothing (mutation, tried: removing the
//!   PNG's `too_large` check from `open_image` — the fused kernel then
//!   allocates the crop's region before `decode_png_region` refuses the
//!   image: caught by the peak). A lower limit refuses a normal image.
//! - Steps that would make an image over the limit are refused: a resize
//!   up, a zero-padded centre crop, the resampling rows of a very tall
//!   image, a PNG wider than libpng's default limit.
//! - For hostile shapes at a small limit (the largest PNG the limit allows
//!   in 16-bit RGBA, the widest and the tallest, an interlaced one, a
//!   progressive JPEG) and plans with and without intermediates, the peak
//!   heap of one call stays within
//!   [`WorkingMemory`](feedline_vision::memory::WorkingMemory)'s Rust terms
//!   (this caught a zero-padded centre crop that made a padded copy of
//!   max(width) × max(height): 3 GB for a 1000000 × 1 image).
//! - The JPEG scan limit: a hand-made progressive JPEG of 896 scans is
//!   refused naming the scan reached and the limit of 500; with the limit
//!   raised it decodes (grey 128), so the file is valid and the limit is
//!   what refuses it (mutation, tried: not installing the progress monitor
//!   in `fl_create` → decoded; caught).
//! - Interlaced (Adam7) PNGs decode as their non-interlaced twins, in every
//!   pixel format, whole and by region.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use feedline_vision::{
    Decoder, ImageFields, ImageTransform, Plan, StepError, VisionError, DEFAULT_MAX_PIXELS,
    DEFAULT_MAX_SCANS,
};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use common::fixture;

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    let _ = LIVE.try_with(|l| {
        let now = l.get() + delta;
        l.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        System.dealloc(ptr, layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        System.alloc_zeroed(layout)
    }

    // A reallocation holds both blocks for a moment (counted so).
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize);
        let out = System.realloc(ptr, layout, new_size);
        count(-(layout.size() as isize));
        out
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// `f`'s result and the most heap it held above what was held before.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let out = f();
    let peak = PEAK.with(Cell::get) - base;
    (out, peak.max(0) as u64)
}

// ---- images made here --------------------------------------------------

/// A PNG from raw rows (filter byte 0 each), zlib "stored" blocks (no
/// compression: the test controls every byte), CRCs and Adler-32 right.
fn png_from_raw(
    width: u32,
    height: u32,
    depth: u8,
    color: u8,
    interlaced: bool,
    raw: &[u8],
    palette: Option<&[u8]>,
) -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let start = out.len();
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        let crc = crc32(&out[start..]);
        out.extend_from_slice(&crc.to_be_bytes());
    }
    let mut out = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[depth, color, 0, 0, u8::from(interlaced)]);
    chunk(&mut out, b"IHDR", &ihdr);
    if let Some(p) = palette {
        chunk(&mut out, b"PLTE", p);
    }
    chunk(&mut out, b"IDAT", &zlib_stored(raw));
    chunk(&mut out, b"IEND", &[]);
    out
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut c = 0xffff_ffffu32;
    for &b in bytes {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
    }
    !c
}

fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let mut blocks = data.chunks(65_535).peekable();
    if blocks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(b) = blocks.next() {
        out.push(u8::from(blocks.peek().is_none()));
        let n = b.len() as u16;
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(&(!n).to_le_bytes());
        out.extend_from_slice(b);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &x in data {
        a = (a + u32::from(x)) % 65_521;
        b = (b + a) % 65_521;
    }
    out.extend_from_slice(&((b << 16) | a).to_be_bytes());
    out
}

/// Bits per pixel of a PNG colour type and depth.
fn bits_per_pixel(color: u8, depth: u8) -> usize {
    let samples = match color {
        0 | 3 => 1,
        2 => 3,
        4 => 2,
        6 => 4,
        _ => unreachable!(),
    };
    samples * depth as usize
}

/// The raw rows (filter 0) of `pixels` (one `Vec<u16>` of samples per
/// pixel, row-major), non-interlaced or Adam7.
fn raw_rows(
    width: usize,
    height: usize,
    color: u8,
    depth: u8,
    interlaced: bool,
    sample: &dyn Fn(usize, usize, usize) -> u16,
) -> Vec<u8> {
    let bpp = bits_per_pixel(color, depth);
    let samples = bpp / depth as usize;
    let mut raw = Vec::new();
    let mut row = |xs: &mut dyn Iterator<Item = usize>, y: usize| {
        let mut bits: Vec<u8> = vec![0];
        let mut acc = 0u32;
        let mut n = 0;
        for x in xs {
            for s in 0..samples {
                let v = u32::from(sample(x, y, s));
                acc = (acc << depth) | (v & ((1 << depth) - 1));
                n += depth as usize;
                while n >= 8 {
                    bits.push((acc >> (n - 8)) as u8);
                    n -= 8;
                    acc &= (1 << n) - 1;
                }
            }
        }
        if n > 0 {
            bits.push((acc << (8 - n)) as u8);
        }
        raw.extend_from_slice(&bits);
    };
    if !interlaced {
        for y in 0..height {
            row(&mut (0..width), y);
        }
    } else {
        for (x0, dx, y0, dy) in [
            (0, 8, 0, 8),
            (4, 8, 0, 8),
            (0, 4, 4, 8),
            (2, 4, 0, 4),
            (0, 2, 2, 4),
            (1, 2, 0, 2),
            (0, 1, 1, 2),
        ] {
            if width <= x0 {
                continue;
            }
            let mut y = y0;
            while y < height {
                row(&mut (x0..width).step_by(dx), y);
                y += dy;
            }
        }
    }
    raw
}

/// A textured PNG: colour type `color`, `depth` bits.
fn textured_png(width: u32, height: u32, color: u8, depth: u8, interlaced: bool) -> Vec<u8> {
    let max = (1u32 << depth) - 1;
    let sample = move |x: usize, y: usize, s: usize| -> u16 {
        ((x * 7 + y * 13 + s * 101 + x * y % 17) as u32 % (max + 1)) as u16
    };
    let raw = raw_rows(
        width as usize,
        height as usize,
        color,
        depth,
        interlaced,
        &sample,
    );
    let palette: Vec<u8> = (0..256u32)
        .flat_map(|i| [i as u8, (i * 3) as u8, (255 - i) as u8])
        .collect();
    let palette = (color == 3).then(|| &palette[..3 * (1usize << depth)]);
    png_from_raw(width, height, depth, color, interlaced, &raw, palette)
}

/// A progressive JPEG of `width` x `height` grey (or YCbCr with 3
/// components) 128, every coefficient zero, whose scans are all the
/// progression allows: per component a DC first scan (Al = 13) and 13
/// refinements, then per AC coefficient a first scan and 13 refinements —
/// 896 scans a component. Every scan codes its blocks with one-bit DC
/// codes and end-of-band runs. Returns the bytes and the scan count.
fn scan_bomb(width: u16, height: u16, components: u8) -> (Vec<u8>, usize) {
    struct Bits {
        out: Vec<u8>,
        acc: u32,
        n: u32,
    }
    impl Bits {
        fn put(&mut self, value: u32, len: u32) {
            for i in (0..len).rev() {
                self.acc = (self.acc << 1) | ((value >> i) & 1);
                self.n += 1;
                if self.n == 8 {
                    let b = self.acc as u8;
                    self.out.push(b);
                    if b == 0xff {
                        self.out.push(0);
                    }
                    self.acc = 0;
                    self.n = 0;
                }
            }
        }
        fn finish(mut self) -> Vec<u8> {
            while self.n != 0 {
                self.put(1, 1);
            }
            self.out
        }
    }
    fn segment(out: &mut Vec<u8>, marker: u8, body: &[u8]) {
        out.extend_from_slice(&[0xff, marker]);
        out.extend_from_slice(&((body.len() + 2) as u16).to_be_bytes());
        out.extend_from_slice(body);
    }
    let blocks = (usize::from(width).div_ceil(8) * usize::from(height).div_ceil(8)) as u32;
    let mut out = vec![0xff, 0xd8];
    let mut dqt = vec![0u8];
    dqt.extend_from_slice(&[1; 64]);
    segment(&mut out, 0xdb, &dqt);
    let mut sof = vec![8];
    sof.extend_from_slice(&height.to_be_bytes());
    sof.extend_from_slice(&width.to_be_bytes());
    sof.push(components);
    for c in 1..=components {
        sof.extend_from_slice(&[c, 0x11, 0]);
    }
    segment(&mut out, 0xc2, &sof);
    // DC: one symbol (category 0), code '0'.
    let mut dht = vec![0x00, 1];
    dht.extend_from_slice(&[0; 15]);
    dht.push(0);
    segment(&mut out, 0xc4, &dht);
    // AC: the end-of-band symbols EOB0..EOB14 (0x00, 0x10, ..., 0xe0),
    // codes of 4 bits: symbol r is code r.
    let mut dht = vec![0x10, 0, 0, 0, 15];
    dht.extend_from_slice(&[0; 12]);
    dht.extend((0..15u8).map(|r| r << 4));
    segment(&mut out, 0xc4, &dht);
    let mut scans = 0;
    let mut scan = |out: &mut Vec<u8>, c: u8, ss: u8, se: u8, ah: u8, al: u8| {
        segment(out, 0xda, &[1, c, 0x00, ss, se, (ah << 4) | al]);
        let mut bits = Bits {
            out: Vec::new(),
            acc: 0,
            n: 0,
        };
        if ss == 0 {
            // DC: a '0' code (first scan) or a raw 0 bit (refinement) per block.
            for _ in 0..blocks {
                bits.put(0, 1);
            }
        } else {
            // AC: end-of-band runs covering every block.
            let mut left = blocks;
            while left > 0 {
                let run = left.min(32_767);
                let r = 31 - run.leading_zeros();
                bits.put(r, 4);
                bits.put(run - (1 << r), r);
                left -= run;
            }
        }
        out.extend_from_slice(&bits.finish());
        scans += 1;
    };
    for c in 1..=components {
        scan(&mut out, c, 0, 0, 0, 13);
        for al in (0..13).rev() {
            scan(&mut out, c, 0, 0, al + 1, al);
        }
    }
    for c in 1..=components {
        for k in 1..64 {
            scan(&mut out, c, k, k, 0, 13);
            for al in (0..13).rev() {
                scan(&mut out, c, k, k, al + 1, al);
            }
        }
    }
    out.extend_from_slice(&[0xff, 0xd9]);
    (out, scans)
}

// ---- the limits --------------------------------------------------------

#[test]
fn the_default_pixel_limit_is_pils() {
    // PIL's Image.MAX_IMAGE_PIXELS is int(1024 * 1024 * 1024 // 4 // 3) =
    // 89478485; PIL raises DecompressionBombError above twice that.
    assert_eq!(DEFAULT_MAX_PIXELS, 2 * (1024 * 1024 * 1024 / 4 / 3));
    assert_eq!(DEFAULT_MAX_PIXELS, 178_956_970);
    assert_eq!(Decoder::new().max_pixels(), DEFAULT_MAX_PIXELS);
    assert_eq!(DEFAULT_MAX_SCANS, 500);
}

#[test]
fn an_image_over_the_limit_is_refused_from_its_header_before_any_buffer() {
    // A 12000 x 12000 grey PNG whose IDAT holds one row: a few KB that
    // declare 144 megapixels (under PIL's limit, over ours here).
    let raw = vec![0u8; 12_001];
    let bomb = png_from_raw(12_000, 12_000, 8, 0, false, &raw, None);
    assert!(bomb.len() < 13_000);
    let t = ImageTransform::parse("imagenet-train", ImageFields::Detect)
        .unwrap()
        .max_pixels(100_000_000);
    let plan = t.plan().clone();
    let mut decoder = Decoder::with_max_pixels(100_000_000);
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut out = vec![0f32; 3 * 224 * 224];
    let (result, peak) = peak_of(|| plan.run_into_steps(&mut decoder, &bomb, &mut rng, &mut out));
    let err = result.unwrap_err();
    assert_eq!(err.step, "decode");
    assert!(
        matches!(
            err.error,
            VisionError::TooLarge {
                width: 12_000,
                height: 12_000,
                limit: 100_000_000
            }
        ),
        "{err}"
    );
    let text = err.to_string();
    for words in ["12000x12000", "144000000", "100000000", "--max-pixels"] {
        assert!(text.contains(words), "{words:?} not in {text}");
    }
    assert!(peak < 1 << 20, "refusing the bomb held {peak} bytes");
}

#[test]
fn a_lower_limit_refuses_a_normal_image_naming_its_size() {
    let jpeg = fixture("pil_420.jpg"); // 163 x 121 = 19723 pixels
    let png = fixture("pil_rgb.png"); // 163 x 121
    for bytes in [&jpeg, &png] {
        let t = ImageTransform::parse(
            "decode,rrc(32),flip,normalize(imagenet),chw",
            ImageFields::Detect,
        )
        .unwrap()
        .max_pixels(19_722);
        let mut decoder = Decoder::with_max_pixels(t.max_pixels_limit());
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let err = t
            .plan()
            .run_steps(&mut decoder, bytes, &mut rng)
            .unwrap_err();
        assert!(err.to_string().contains("163x121 pixels (19723)"), "{err}");
        assert!(err.to_string().contains("limit of 19722"), "{err}");
        // One pixel more and it passes.
        let mut decoder = Decoder::with_max_pixels(19_723);
        t.plan().run(&mut decoder, bytes, &mut rng).unwrap();
    }
}

#[test]
fn steps_that_would_make_an_image_over_the_limit_are_refused() {
    let png = fixture("pil_rgb.png"); // 163 x 121
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut decoder = Decoder::with_max_pixels(100_000);
    // A resize to 400 x 300 = 120000 pixels.
    let err = Plan::parse("decode,resize(300x400)")
        .unwrap()
        .run_steps(&mut decoder, &png, &mut rng)
        .unwrap_err();
    assert_eq!(err.step, "resize(300x400)");
    assert!(
        matches!(
            err.error,
            VisionError::OutputTooLarge {
                width: 400,
                height: 300,
                limit: 100_000
            }
        ),
        "{err}"
    );
    // A centre crop of 400 x 300 (zero-padded) likewise.
    let err = Plan::parse("decode,center-crop(300x400)")
        .unwrap()
        .run_steps(&mut decoder, &png, &mut rng)
        .unwrap_err();
    assert_eq!(err.step, "center-crop(300x400)");
    // The resampling rows of a 1-pixel-wide image of 90000 rows to 8 x 8:
    // (90000 + 1) rows of 8 pixels.
    let tall = textured_png(1, 90_000, 0, 8, false);
    let err = Plan::parse("decode,resize(8x8)")
        .unwrap()
        .run_steps(&mut decoder, &tall, &mut rng)
        .unwrap_err();
    assert_eq!(err.step, "resize(8x8)");
    assert!(
        matches!(
            err.error,
            VisionError::OutputTooLarge {
                width: 8,
                height: 90_001,
                ..
            }
        ),
        "{err}"
    );
    // A PNG one pixel wider than libpng's default limit (1-bit grey: a
    // row of 125 KB).
    let wide = textured_png(1_000_001, 1, 0, 1, false);
    let err = Plan::parse("decode")
        .unwrap()
        .run_steps(&mut Decoder::with_max_pixels(2_000_000), &wide, &mut rng)
        .unwrap_err();
    assert_eq!(err.step, "decode");
    assert!(err.to_string().contains("wider than 1000000"), "{err}");
    Plan::parse("decode")
        .unwrap()
        .run(
            &mut Decoder::with_max_pixels(2_000_000),
            &textured_png(1_000_000, 1, 0, 1, false),
            &mut rng,
        )
        .unwrap();
    // The shorter side of the same image to 256: 256 x 23040000.
    let err = Plan::parse("imagenet-eval")
        .unwrap()
        .run_steps(&mut decoder, &tall, &mut rng)
        .unwrap_err();
    assert_eq!(err.step, "resize(256)");
}

/// Runs `spec` on `bytes` with a fresh decoder of limit `max_pixels`:
/// the result and the peak heap of the call (decoder included).
fn measured(spec: &str, bytes: &[u8], max_pixels: u64) -> (Result<(), StepError>, u64) {
    let plan = Plan::parse(spec).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    peak_of(|| {
        let mut decoder = Decoder::with_max_pixels(max_pixels);
        plan.run_steps(&mut decoder, bytes, &mut rng).map(drop)
    })
}

#[test]
fn one_call_holds_no_more_than_the_working_memory_figure() {
    const P: u64 = 1 << 20;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "16-bit RGBA, the largest the limit allows",
            textured_png(1024, 1024, 6, 16, false),
        ),
        (
            "16-bit RGBA, interlaced",
            textured_png(1024, 1024, 6, 16, true),
        ),
        (
            "16-bit RGBA, the widest",
            textured_png(1_000_000, 1, 6, 16, false),
        ),
        (
            "8-bit grey, the tallest",
            textured_png(1, 1 << 20, 0, 8, false),
        ),
        ("a progressive 640x480 JPEG", fixture("big_progressive.jpg")),
    ];
    let specs = [
        "imagenet-train",
        "imagenet-eval",
        "decode",
        "decode,center-crop(1000x1040)",
        "decode,resize(512),random-resized-crop(64),to-f32",
    ];
    let mut decoded = 0;
    for (what, bytes) in &cases {
        for spec in specs {
            let plan = Plan::parse(spec).unwrap();
            let m = plan.working_memory(P);
            // libjpeg's memory is C's: the Rust side is the rest.
            let rust = m.region + m.rows + m.png_decoder + m.materialized + m.output;
            let (result, peak) = measured(spec, bytes, P);
            assert!(
                peak <= rust,
                "{what}, {spec}: the call held {peak} bytes, over the figure's {rust} ({m:?}); {result:?}"
            );
            match result {
                Ok(()) => decoded += 1,
                Err(e) => assert!(
                    matches!(e.error, VisionError::OutputTooLarge { .. }),
                    "{what}, {spec}: {e}"
                ),
            }
        }
    }
    assert!(decoded >= 20, "{decoded} decoded");
    // The figure is not slack by design: decoding the largest image whole
    // holds its region (3 bytes a pixel) and its u8 output.
    let (result, peak) = measured("decode", &cases[0].1, P);
    result.unwrap();
    assert!(peak >= 6 * P, "{peak}");
}

#[test]
fn the_transform_states_its_figure_and_the_bound_grows_with_the_limit() {
    use feedline::transform::InstanceMap;
    let t = ImageTransform::parse("imagenet-train", ImageFields::Detect).unwrap();
    let at_pil = t.working_memory_bytes() as u64;
    assert_eq!(at_pil, t.plan().working_memory_bytes(DEFAULT_MAX_PIXELS));
    let lower = t.max_pixels(16_000_000);
    assert_eq!(
        lower.working_memory_bytes() as u64,
        lower.plan().working_memory_bytes(16_000_000)
    );
    assert!((lower.working_memory_bytes() as u64) < at_pil / 8);
}

// ---- the scan limit ----------------------------------------------------

#[test]
fn a_jpeg_of_too_many_scans_is_refused_naming_the_scan_and_the_limit() {
    let (bomb, scans) = scan_bomb(8, 8, 1);
    assert_eq!(scans, 896);
    let mut decoder = Decoder::new();
    let err = decoder.decode(&bomb).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, VisionError::Jpeg { .. }), "{text}");
    for words in ["more than 500 scans", "scan 501", "scan limit of 500"] {
        assert!(text.contains(words), "{words:?} not in {text}");
    }
    // The same file decodes with the limit raised: grey 128 everywhere.
    decoder.set_max_scans(1000);
    let image = decoder.decode(&bomb).unwrap();
    assert_eq!((image.width(), image.height()), (8, 8));
    assert!(
        image.pixels().iter().all(|&v| v == 128),
        "{:?}",
        &image.pixels()[..12]
    );
    // And with no limit at all (0).
    decoder.set_max_scans(0);
    decoder.decode(&bomb).unwrap();
    // Three components, 2688 scans, through the transform: the error names
    // the transform as given, the field and the step.
    let (bomb, scans) = scan_bomb(64, 48, 3);
    assert_eq!(scans, 3 * 896);
    let mut decoder = Decoder::new();
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let err = Plan::parse("imagenet-train")
        .unwrap()
        .run_steps(&mut decoder, &bomb, &mut rng)
        .unwrap_err();
    assert_eq!(err.step, "decode");
    assert!(err.to_string().contains("scan 501"), "{err}");
    let mut decoder = Decoder::new();
    decoder.set_max_scans(3000);
    let image = decoder.decode(&bomb).unwrap();
    assert!(image.pixels().iter().all(|&v| v == 128));
}

#[test]
fn usual_progressive_jpegs_are_far_under_the_scan_limit() {
    let mut decoder = Decoder::new();
    decoder.set_max_scans(12);
    for name in [
        "pil_progressive.jpg",
        "tf_progressive.jpg",
        "big_progressive.jpg",
    ] {
        decoder
            .decode(&fixture(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

// ---- interlaced PNGs ---------------------------------------------------

#[test]
fn interlaced_pngs_decode_as_their_plain_twins() {
    let mut decoder = Decoder::new();
    let formats = [
        (0, 1),
        (0, 2),
        (0, 4),
        (0, 8),
        (0, 16),
        (2, 8),
        (2, 16),
        (3, 1),
        (3, 4),
        (3, 8),
        (4, 8),
        (4, 16),
        (6, 8),
        (6, 16),
    ];
    let sizes = [(1, 1), (3, 2), (5, 9), (13, 11), (16, 16), (33, 7)];
    for (color, depth) in formats {
        for (w, h) in sizes {
            let plain = decoder
                .decode(&textured_png(w, h, color, depth, false))
                .unwrap();
            let adam7 = decoder
                .decode(&textured_png(w, h, color, depth, true))
                .unwrap_or_else(|e| panic!("colour {color} depth {depth} {w}x{h}: {e}"));
            assert!(plain == adam7, "colour {color} depth {depth} {w}x{h}");
            // A region (a crop read by the fused kernel) too.
            if w >= 5 && h >= 5 {
                let spec = format!("decode,center-crop({}x{})", h - 2, w - 3);
                let plan = Plan::parse(&spec).unwrap();
                let mut rng = ChaCha8Rng::seed_from_u64(0);
                let a = plan
                    .run(
                        &mut decoder,
                        &textured_png(w, h, color, depth, false),
                        &mut rng,
                    )
                    .unwrap();
                let b = plan
                    .run(
                        &mut decoder,
                        &textured_png(w, h, color, depth, true),
                        &mut rng,
                    )
                    .unwrap();
                assert_eq!(a, b, "colour {color} depth {depth} {w}x{h} {spec}");
            }
        }
    }
}
