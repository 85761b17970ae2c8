//! ImageNet-style training input: TFRecord shards of `tf.train.Example`
//! with `image/encoded` (JPEG bytes) and `image/class/label` (int64), as the
//! standard ImageNet TFRecords are laid out, decoded and augmented on the
//! pipeline's transform workers (`imagenet-train`: decode, RandomResizedCrop
//! 224, random horizontal flip, ImageNet mean/std to `f32 [3, 224, 224]`),
//! batched and fed to simulated devices; then where the time went.
//!
//! The dataset is generated here: real-looking pictures (smooth lighting,
//! overlapping shapes, texture and sensor noise) at ImageNet's typical sizes,
//! encoded as 4:2:0 JPEGs of quality 90 by the `jpeg-encoder` crate.
//!
//! ```text
//! cargo run --release --example imagenet
//! cargo run --release --example imagenet -- --images 2000 --workers 2 --step-ms 0
//! cargo run --release --example imagenet -- --files 'imagenet/train-*' --transform imagenet-train
//! ```

#[path = "common/report.rs"]
mod report;

use feedline_actors::{Batching, Inputs, Order, Reading};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use feedline::batch_policy::BatchPolicy;
use feedline::format::tfrecord::TfRecordWriter;
use feedline::format::Compression;
use feedline::transform::Transforms;
use feedline::{BytesList, Location, Record, SourceId, Tensor, Values};
use feedline_actors::{Pipeline, PipelineConfig, SimulatedDevice};
use feedline_vision::{ImageFields, ImageTransform, Plan};
use rand::{Rng, SeedableRng};

/// ImageNet-style input through feedline's transform workers, fed to
/// simulated devices (a JPEG dataset is generated without --files).
#[derive(Parser)]
#[command(name = "imagenet")]
struct Args {
    /// TFRecord files or globs with `image/encoded` and `image/class/label`
    /// (default: a generated dataset).
    #[arg(long, num_args = 1..)]
    files: Vec<String>,
    /// Images of the generated dataset.
    #[arg(long, default_value_t = 512)]
    images: usize,
    /// Shards of the generated dataset.
    #[arg(long, default_value_t = 4)]
    shards: usize,
    /// Where to write the generated dataset (default: a temporary directory).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The transform (a preset or a chain; see `feedline run --help`).
    #[arg(long, default_value = "imagenet-train")]
    transform: String,
    /// Transform workers.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Prefetch readers.
    #[arg(long, default_value_t = 1)]
    readers: usize,
    /// Simulated devices.
    #[arg(long, default_value_t = 2)]
    devices: usize,
    /// Milliseconds per batch on each device.
    #[arg(long, default_value_t = 20.0)]
    step_ms: f64,
    /// Batch size.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Shuffle pool (instances).
    #[arg(long, default_value_t = 1000)]
    shuffle: usize,
    /// Passes.
    #[arg(long, default_value_t = 1)]
    passes: u64,
    /// Seed of the file order, the shuffle and the augmentations.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// A real-looking picture: a lit backdrop, overlapping shaded ellipses, a
/// woven texture and sensor noise.
fn picture(rng: &mut impl Rng, width: usize, height: usize) -> Vec<u8> {
    let base: [f32; 3] = [
        rng.gen_range(40.0..200.0),
        rng.gen_range(40.0..200.0),
        rng.gen_range(40.0..200.0),
    ];
    let light = (
        rng.gen_range(0.0..width as f32),
        rng.gen_range(0.0..height as f32),
    );
    let shapes: Vec<(f32, f32, f32, f32, [f32; 3])> = (0..rng.gen_range(3..9))
        .map(|_| {
            (
                rng.gen_range(0.0..width as f32),
                rng.gen_range(0.0..height as f32),
                rng.gen_range(20.0..width as f32 / 2.0),
                rng.gen_range(20.0..height as f32 / 2.0),
                [
                    rng.gen_range(0.0..255.0),
                    rng.gen_range(0.0..255.0),
                    rng.gen_range(0.0..255.0),
                ],
            )
        })
        .collect();
    let (fx, fy) = (rng.gen_range(0.02..0.3f32), rng.gen_range(0.02..0.3f32));
    let diag = ((width * width + height * height) as f32).sqrt();
    let mut px = vec![0u8; width * height * 3];
    for y in 0..height {
        for x in 0..width {
            let (xf, yf) = (x as f32, y as f32);
            let d = ((xf - light.0).powi(2) + (yf - light.1).powi(2)).sqrt() / diag;
            let shade = 1.2 - 0.8 * d;
            let mut c = base;
            for &(cx, cy, rx, ry, col) in &shapes {
                let r = ((xf - cx) / rx).powi(2) + ((yf - cy) / ry).powi(2);
                if r < 1.0 {
                    let edge = (1.0 - r).sqrt();
                    for k in 0..3 {
                        c[k] = col[k] * (0.6 + 0.4 * edge);
                    }
                }
            }
            let texture = 12.0 * (xf * fx).sin() * (yf * fy).cos();
            for k in 0..3 {
                let noise: f32 = rng.gen_range(-6.0..6.0);
                px[(y * width + x) * 3 + k] =
                    (c[k] * shade + texture + noise).clamp(0.0, 255.0) as u8;
            }
        }
    }
    px
}

/// `images` JPEGs in `shards` TFRecord files under `dir`; their paths.
fn generate(
    dir: &Path,
    images: usize,
    shards: usize,
    seed: u64,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut paths = Vec::new();
    let source = SourceId::intern("generated");
    for s in 0..shards {
        let path = dir.join(format!("train-{s:05}-of-{shards:05}.tfrecord"));
        let mut w = TfRecordWriter::new(
            std::io::BufWriter::new(std::fs::File::create(&path)?),
            Compression::None,
        );
        for i in (s..images).step_by(shards) {
            // ImageNet's typical sizes: about 500 × 375, either way round.
            let (mut width, mut height) =
                (rng.gen_range(350..=500usize), rng.gen_range(260..=375usize));
            if rng.gen_bool(0.3) {
                std::mem::swap(&mut width, &mut height);
            }
            let pixels = picture(&mut rng, width, height);
            let mut jpeg = Vec::new();
            let mut enc = jpeg_encoder::Encoder::new(&mut jpeg, 90);
            enc.set_sampling_factor(jpeg_encoder::SamplingFactor::R_4_2_0);
            enc.encode(
                &pixels,
                width as u16,
                height as u16,
                jpeg_encoder::ColorType::Rgb,
            )?;
            let label = rng.gen_range(0..1000i64);
            w.write_example(&Record {
                fields: vec![
                    (
                        "image/encoded".into(),
                        Tensor::vector(Values::Bytes(BytesList::from_iter([&jpeg[..]]))),
                    ),
                    (
                        "image/class/label".into(),
                        Tensor::vector(Values::I64(vec![label])),
                    ),
                ],
                location: Location::new(source, i as u64, None),
            })?;
        }
        w.finish()?;
        paths.push(path.to_string_lossy().into_owned());
    }
    Ok(paths)
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("imagenet: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    if !(args.step_ms.is_finite() && (0.0..=3_600_000.0).contains(&args.step_ms)) {
        return Err(format!(
            "--step-ms {} is not in 0..=3600000 (milliseconds)",
            args.step_ms
        )
        .into());
    }
    let plan = Plan::parse(&args.transform)?;
    let temp;
    let files = if args.files.is_empty() {
        let dir = match &args.out {
            Some(d) => d.clone(),
            None => {
                temp = tempfile::tempdir()?;
                temp.path().to_path_buf()
            }
        };
        let t0 = Instant::now();
        let files = generate(&dir, args.images, args.shards.max(1), args.seed)?;
        let bytes: u64 = files
            .iter()
            .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
            .sum();
        println!(
            "generated {} JPEGs in {} shards ({:.1} MB) in {:.1} s",
            args.images,
            files.len(),
            bytes as f64 / 1e6,
            t0.elapsed().as_secs_f64()
        );
        files
    } else {
        args.files.clone()
    };
    println!("transform: {plan}");
    let config = PipelineConfig {
        inputs: Inputs {
            files,
            ..Default::default()
        },
        reading: Reading {
            readers: args.readers,
            ..Default::default()
        },
        order: Order {
            shuffle: args.shuffle,
            passes: args.passes,
            seed: args.seed,
            ..Default::default()
        },
        batching: Batching {
            batch: BatchPolicy::Fixed(args.batch),
            ..Default::default()
        },
        transforms: Transforms {
            instance: Some(Arc::new(ImageTransform::new(
                plan,
                ImageFields::Named(vec!["image/encoded".into()]),
            ))),
            workers: args.workers,
            ..Transforms::default()
        },
        ..PipelineConfig::default()
    };
    let step = Duration::from_secs_f64(args.step_ms / 1000.0);
    let devices: Vec<SimulatedDevice> = (0..args.devices)
        .map(|_| SimulatedDevice { step_time: step })
        .collect();
    let sys = actix::System::new();
    let (result, snap) = sys.block_on(async move {
        let mut p = Pipeline::start_with_trainers(config, devices)?;
        let r = p.finished().await;
        let snap = p.stats().snapshot();
        p.join();
        Ok::<_, feedline_actors::PipelineError>((r, snap))
    })?;
    result?;
    report::print_report(&snap, &vec![step; args.devices]);
    println!(
        "(the transform workers are the batch maker's: its busy % per worker is decoding and augmenting; {} workers, {:.0} images/s)",
        args.workers,
        snap.readers.records as f64 / snap.elapsed_s.max(1e-9)
    );
    Ok(())
}
