//! RandomResizedCrop box sampling has torchvision's `get_params`
//! properties: boxes inside the image, area and aspect ratio within the
//! ranges (up to the rounding of the sides), uniform positions, the
//! centre-crop fallback after 10 misses, Python's round-half-even, and the
//! same boxes for the same RNG seed.

use feedline_vision::{CropBox, RandomResizedCrop};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Could unrounded sides `w' in [w - 0.5, w + 0.5]`, `h'` likewise, have
/// an area fraction within `scale` and a ratio within `ratio`?
fn within_bounds(b: &CropBox, width: usize, height: usize, rrc: &RandomResizedCrop) -> bool {
    let area = (width * height) as f64;
    let (w, h) = (b.width as f64, b.height as f64);
    let area_ok =
        (w - 0.5) * (h - 0.5) <= rrc.scale.1 * area && (w + 0.5) * (h + 0.5) >= rrc.scale.0 * area;
    let ratio_ok = (w - 0.5) / (h + 0.5) <= rrc.ratio.1 && (w + 0.5) / (h - 0.5) >= rrc.ratio.0;
    area_ok && ratio_ok
}

#[test]
fn boxes_are_inside_and_within_the_ranges() {
    let rrc = RandomResizedCrop::default();
    for (seed, (width, height)) in [
        (401, 349),
        (500, 260),
        (300, 440),
        (1000, 1000),
        (224, 224),
        (17, 13),
    ]
    .into_iter()
    .enumerate()
    {
        let mut rng = ChaCha8Rng::seed_from_u64(seed as u64);
        for _ in 0..5000 {
            let b = rrc.sample(&mut rng, width, height).unwrap();
            assert!(b.fits(width, height), "{b:?} outside {width}x{height}");
            if b != rrc.fallback(width, height) {
                assert!(
                    within_bounds(&b, width, height, &rrc),
                    "{b:?} of {width}x{height}"
                );
            }
        }
    }
}

/// `get_params`'s accepted draws on a square image, integrated
/// numerically (rounding and the 1e-9 chance of ten misses ignored): a draw
/// (s, r) fits when s <= m(r) = min(r, 1/r); returns E[s | fits] and
/// P(s < 0.2 | fits).
fn accepted_area_moments() -> (f64, f64) {
    let (lo, hi) = ((0.75f64).ln(), (4.0f64 / 3.0).ln());
    let steps = 100_000;
    let (mut mass, mut first, mut below) = (0.0, 0.0, 0.0);
    for i in 0..steps {
        let u = lo + (hi - lo) * (i as f64 + 0.5) / steps as f64;
        let m = (-u.abs()).exp().min(1.0);
        mass += m - 0.08;
        first += (m * m - 0.08 * 0.08) / 2.0;
        below += 0.2 - 0.08;
    }
    (first / mass, below / mass)
}

#[test]
fn distribution_matches_get_params() {
    // Area fraction and log-ratio as get_params accepts them, positions
    // uniform over the free range (mean 1/2).
    let rrc = RandomResizedCrop::default();
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let (width, height) = (2000usize, 2000usize);
    let n = 40_000;
    let (mut area, mut log_ratio, mut pos_x, mut pos_y, mut counted) = (0.0, 0.0, 0.0, 0.0, 0.0);
    let mut small = 0;
    for _ in 0..n {
        let b = rrc.sample(&mut rng, width, height).unwrap();
        let fraction = (b.width * b.height) as f64 / (width * height) as f64;
        area += fraction;
        log_ratio += (b.width as f64 / b.height as f64).ln();
        if b.width < width && b.height < height {
            pos_x += b.left as f64 / (width - b.width) as f64;
            pos_y += b.top as f64 / (height - b.height) as f64;
            counted += 1.0;
        }
        if fraction < 0.2 {
            small += 1;
        }
    }
    let n = n as f64;
    let (mean_area, p_small) = accepted_area_moments();
    assert!(
        (area / n - mean_area).abs() < 0.005,
        "mean area {} vs {mean_area}",
        area / n
    );
    // Symmetric in log(ratio): mean 0.
    assert!(
        (log_ratio / n).abs() < 0.005,
        "mean log ratio {}",
        log_ratio / n
    );
    assert!((pos_x / counted - 0.5).abs() < 0.01 && (pos_y / counted - 0.5).abs() < 0.01);
    assert!(
        (small as f64 / n - p_small).abs() < 0.006,
        "P(area < 0.2) {} vs {p_small}",
        small as f64 / n
    );
}

#[test]
fn fallback_is_torchvisions_centre_crop() {
    let rrc = RandomResizedCrop::default();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    // Too wide for any try: height kept, width = round(10 * 4/3) = 13.
    assert_eq!(
        rrc.sample(&mut rng, 1000, 10).unwrap(),
        CropBox {
            top: 0,
            left: 493,
            height: 10,
            width: 13
        }
    );
    // Too tall: width kept, height = round(10 / 0.75) = 13.
    assert_eq!(
        rrc.sample(&mut rng, 10, 1000).unwrap(),
        CropBox {
            top: 493,
            left: 0,
            height: 13,
            width: 10
        }
    );
    // An area range no box can meet, ratio within range: the whole image.
    let never = RandomResizedCrop::new((2.0, 3.0), (0.75, 4.0 / 3.0)).unwrap();
    assert_eq!(
        never.sample(&mut rng, 300, 260).unwrap(),
        CropBox {
            top: 0,
            left: 0,
            height: 260,
            width: 300
        }
    );
    // Python's round: half to even (2.5 -> 2).
    let r = RandomResizedCrop::new((2.0, 3.0), (0.5, 1.25)).unwrap();
    assert_eq!(
        r.fallback(5, 2),
        CropBox {
            top: 0,
            left: 1,
            height: 2,
            width: 2
        }
    );
    let r = RandomResizedCrop::new((2.0, 3.0), (0.8, 1.0)).unwrap();
    assert_eq!(
        r.fallback(2, 9),
        CropBox {
            top: 3,
            left: 0,
            height: 2,
            width: 2
        }
    );
}

#[test]
fn same_seed_same_boxes() {
    let rrc = RandomResizedCrop::default();
    let draw = |seed: u64| -> Vec<CropBox> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..100)
            .map(|_| rrc.sample(&mut rng, 401, 349).unwrap())
            .collect()
    };
    assert_eq!(draw(7), draw(7));
    assert_ne!(draw(7), draw(8));
}

#[test]
fn bad_parameters_are_refused() {
    for (scale, ratio) in [
        ((0.0, 1.0), (0.75, 1.33)),
        ((0.5, 0.4), (0.75, 1.33)),
        ((0.1, 1.0), (2.0, 1.0)),
        ((0.1, f64::NAN), (0.75, 1.33)),
        ((0.1, 1.0), (-1.0, 1.0)),
    ] {
        let err = RandomResizedCrop::new(scale, ratio).unwrap_err();
        assert!(err.to_string().contains("random-resized-crop"), "{err}");
    }
    let err = RandomResizedCrop::default()
        .sample(&mut ChaCha8Rng::seed_from_u64(0), 0, 5)
        .unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
}
