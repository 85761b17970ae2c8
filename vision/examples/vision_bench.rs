//! Single-core throughput of feedline-vision on workload C's JPEGs (the
//! peers' ImageNet-style images), images held in memory:
//!
//! * decode only, per candidate decoder: libjpeg-turbo (this crate),
//!   zune-jpeg, jpeg-decoder;
//! * decode + RandomResizedCrop 224 + flip + normalise to f32 CHW, unfused
//!   (step by step) and fused, with each reduced-work trick added in turn;
//! * the same through the `imagenet-train` plan.
//!
//! ```sh
//! SKIP_SETUP=1 ONLY='probe_jpeg' bash ../shared/peers/run_peers.sh   # makes /tmp/peers/data/jpeg-*.tar
//! taskset -c 1 cargo run --release -p feedline-vision --example vision_bench -- \
//!     --data /tmp/peers/data --limit 2000 --repeats 3
//! ```
//!
//! Prints one line per variant: the median over the repeats (each a pass
//! over the images) of images per second of the process's CPU time (what
//! one core does; steady when other processes share the machine), ms per
//! image, and the median wall-clock rate beside it. `--only WORD` runs the
//! variants whose name contains WORD.

use std::path::{Path, PathBuf};
use std::time::Instant;

use feedline_vision::{
    crop_resize_into, flip_horizontal, resized_crop, to_array, CropResize, Decoder, KernelSource,
    Layout, Normalize, OutputFormat, Plan, RandomResizedCrop, ReducedWork,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

struct Args {
    data: PathBuf,
    limit: usize,
    repeats: usize,
    only: Option<String>,
}

fn parse_args() -> Args {
    let mut args = Args {
        data: PathBuf::from("/tmp/peers/data"),
        limit: 2000,
        repeats: 3,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--data" => args.data = PathBuf::from(value()),
            "--limit" => args.limit = value().parse().expect("--limit N"),
            "--repeats" => args.repeats = value().parse().expect("--repeats N"),
            "--only" => args.only = Some(value()),
            other => {
                panic!("unknown flag {other} (--data DIR, --limit N, --repeats N, --only WORD)")
            }
        }
    }
    args
}

/// The `.jpg` members of the WebDataset tar shards in `dir`, in name order.
fn read_jpegs(dir: &Path, limit: usize) -> Vec<Vec<u8>> {
    let mut shards: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e} (make workload C first)", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with("jpeg-") && name.ends_with(".tar")
        })
        .collect();
    shards.sort();
    let mut images = Vec::new();
    for shard in shards {
        let bytes = std::fs::read(&shard).expect("read shard");
        let mut at = 0;
        while at + 512 <= bytes.len() && images.len() < limit {
            let header = &bytes[at..at + 512];
            if header.iter().all(|&b| b == 0) {
                break;
            }
            let name_end = header[..100].iter().position(|&b| b == 0).unwrap_or(100);
            let name = std::str::from_utf8(&header[..name_end]).expect("tar name");
            let size_field = std::str::from_utf8(&header[124..136]).expect("tar size");
            let size =
                usize::from_str_radix(size_field.trim_matches(|c: char| c == '\0' || c == ' '), 8)
                    .expect("octal size");
            let data = &bytes[at + 512..at + 512 + size];
            if name.ends_with(".jpg") {
                images.push(data.to_vec());
            }
            at += 512 + size.div_ceil(512) * 512;
        }
        if images.len() >= limit {
            break;
        }
    }
    assert!(!images.is_empty(), "no JPEG in {}", dir.display());
    images
}

/// The CPU time of this process (every thread: jpeg-decoder uses a worker thread), in seconds.
fn cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to write.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Times `pass` (one pass over every image) `repeats` times; prints the
/// median images/s per CPU second and per wall second.
fn measure(name: &str, args: &Args, n: usize, mut pass: impl FnMut() -> u64) {
    if let Some(only) = &args.only {
        if !name.contains(only.as_str()) {
            return;
        }
    }
    let mut checksum = pass(); // warm-up
    let (mut cpu_rates, mut wall_rates) = (Vec::new(), Vec::new());
    for _ in 0..args.repeats {
        let (wall, cpu) = (Instant::now(), cpu_seconds());
        checksum = checksum.wrapping_add(pass());
        cpu_rates.push(n as f64 / (cpu_seconds() - cpu));
        wall_rates.push(n as f64 / wall.elapsed().as_secs_f64());
    }
    let (lo, hi) = (
        cpu_rates.iter().copied().fold(f64::INFINITY, f64::min),
        cpu_rates.iter().copied().fold(0.0, f64::max),
    );
    let cpu = median(cpu_rates);
    println!(
        "{name:<46} {cpu:>7.1} images/s per CPU-s  {:>6.3} ms/image  (min {lo:.1}, max {hi:.1}; wall {:.1}/s; checksum {checksum:x})",
        1000.0 / cpu,
        median(wall_rates)
    );
}

fn rng_for(index: usize) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(0x5eed_0000 + index as u64)
}

fn main() {
    let args = parse_args();
    let images = read_jpegs(&args.data, args.limit);
    let n = images.len();
    let mb: usize = images.iter().map(Vec::len).sum();
    println!(
        "{n} JPEGs from {} ({:.1} MB, mean {:.1} kB), {} repeats, one thread",
        args.data.display(),
        mb as f64 / 1e6,
        mb as f64 / n as f64 / 1e3,
        args.repeats
    );
    let rrc = RandomResizedCrop::default();
    let format = OutputFormat {
        normalize: Some(Normalize::IMAGENET),
        layout: Layout::Chw,
    };

    // Decode only.
    let mut decoder = Decoder::new();
    measure("decode libjpeg-turbo 2.1.5 (this crate)", &args, n, || {
        images
            .iter()
            .map(|b| u64::from(decoder.decode(b).expect("decode").pixels()[0]))
            .sum()
    });
    measure("decode zune-jpeg 0.5", &args, n, || {
        images
            .iter()
            .map(|b| {
                let options = zune_core::options::DecoderOptions::default()
                    .jpeg_set_out_colorspace(zune_core::colorspace::ColorSpace::RGB);
                let mut d = zune_jpeg::JpegDecoder::new_with_options(
                    zune_core::bytestream::ZCursor::new(b.as_slice()),
                    options,
                );
                u64::from(d.decode().expect("zune decode")[0])
            })
            .sum()
    });
    measure("decode jpeg-decoder 0.3", &args, n, || {
        images
            .iter()
            .map(|b| {
                let mut d = jpeg_decoder::Decoder::new(b.as_slice());
                u64::from(d.decode().expect("jpeg-decoder decode")[0])
            })
            .sum()
    });

    // Decode + RRC 224 + flip + normalise, unfused: every step its own image.
    measure(
        "train unfused (decode, crop, resize, flip, norm)",
        &args,
        n,
        || {
            let mut sum = 0u64;
            for (i, b) in images.iter().enumerate() {
                let mut rng = rng_for(i);
                let image = decoder.decode(b).expect("decode");
                let crop = rrc
                    .sample(&mut rng, image.width(), image.height())
                    .expect("rrc");
                let mut resized = resized_crop(&image, crop, 224, 224).expect("resize");
                if rng.gen::<f64>() < 0.5 {
                    resized = flip_horizontal(&resized);
                }
                let out = to_array::<f32>(&resized, &format).expect("normalise");
                sum += out[[0, 0, 0]].to_bits() as u64;
            }
            sum
        },
    );

    let mut out = vec![0f32; 3 * 224 * 224];
    let variants: [(&str, ReducedWork); 5] = [
        ("train fused, full decode", ReducedWork::NONE),
        (
            "train fused + skip rows above",
            ReducedWork {
                skip_rows: true,
                ..ReducedWork::NONE
            },
        ),
        (
            "train fused + skip + stop after crop",
            ReducedWork {
                skip_rows: true,
                stop_early: true,
                ..ReducedWork::NONE
            },
        ),
        (
            "train fused + skip + stop + crop columns",
            ReducedWork {
                dct_scaling: false,
                ..ReducedWork::ALL
            },
        ),
        (
            "train fused + skip + stop + cols + DCT scale",
            ReducedWork::ALL,
        ),
    ];
    for (name, work) in variants {
        let mut scaled = 0usize;
        measure(name, &args, n, || {
            let mut sum = 0u64;
            scaled = 0;
            for (i, b) in images.iter().enumerate() {
                let mut rng = rng_for(i);
                let report = crop_resize_into(
                    &mut decoder,
                    KernelSource::Bytes(b),
                    &mut |w, h| {
                        let crop = rrc.sample(&mut rng, w, h)?;
                        let flip = rng.gen::<f64>() < 0.5;
                        Ok(CropResize::resized_crop(crop, 224, 224, flip))
                    },
                    &format,
                    work,
                    &mut out,
                )
                .expect("fused");
                scaled += usize::from(report.scale_denom > 1);
                sum += out[0].to_bits() as u64;
            }
            sum
        });
        if work.dct_scaling && args.only.as_deref().is_none_or(|o| name.contains(o)) {
            println!("    ({scaled} of {n} images decoded at a reduced DCT scale)");
        }
    }

    let plan = Plan::parse("imagenet-train").expect("preset");
    measure("train plan imagenet-train (run_into)", &args, n, || {
        let mut sum = 0u64;
        for (i, b) in images.iter().enumerate() {
            let mut rng = rng_for(i);
            plan.run_into(&mut decoder, b, &mut rng, &mut out)
                .expect("plan");
            sum += out[0].to_bits() as u64;
        }
        sum
    });
}
