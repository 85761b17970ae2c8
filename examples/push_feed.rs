//! Feeding from user code: producers push, devices consume.
//!
//! Two producer threads make synthetic images (`[3, 32, 32]` u8) and labels
//! and push them into a push-mode pipeline ([`Loader::builder`] …
//! `build_with_feed()`): producer 0 pushes instances one at a time (they are
//! shuffled and batched by the pipeline), producer 1 pushes whole
//! ready-made batches (they go to the devices as they are). Four simulated
//! devices consume on threads of their own.
//!
//! It runs two regimes and prints, for each, how long the producers were
//! held back by a full pipeline and how long the devices waited for data:
//!
//! 1. the devices are slower (long steps, producers flat out): the
//!    producers are held back, the devices never wait;
//! 2. the producers are slower (each image costs time to make, short
//!    steps): the devices wait, the producers are never held back.
//!
//! ```text
//! cargo run --release --example push_feed
//! cargo run --release --example push_feed -- --instances 20000 --slow-step-ms 4
//! ```

use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use feedline::format::generator::{append_sample, Sample};
use feedline::{collate_chunks, Batch, Chunk, DType, Origin, Schema, SourceId, Values};
use feedline_actors::{FeedHandle, Loader, PushError, StatsSnapshot};

/// Push images and labels from user code into a feedline pipeline while
/// simulated devices train, in two regimes (devices slower, then producers
/// slower), and see how long each side waited for the other.
#[derive(Parser)]
#[command(name = "push_feed")]
struct Args {
    /// Images each producer makes per regime.
    #[arg(long, default_value_t = 4096)]
    instances: usize,
    /// Batch size (also the size of producer 1's ready-made batches).
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Simulated devices.
    #[arg(long, default_value_t = 4)]
    devices: usize,
    /// Feed-queue capacity in batches.
    #[arg(long, default_value_t = 4)]
    capacity: usize,
    /// Shuffle pool (instances).
    #[arg(long, default_value_t = 512)]
    shuffle: usize,
    /// Regime 1 (devices slower): milliseconds per device step.
    #[arg(long, default_value_t = 8.0)]
    slow_step_ms: f64,
    /// Regime 2 (producers slower): milliseconds per device step.
    #[arg(long, default_value_t = 0.5)]
    fast_step_ms: f64,
    /// Regime 2: microseconds a producer spends making one image.
    #[arg(long, default_value_t = 150.0)]
    slow_make_us: f64,
    /// Run only this regime (1 or 2).
    #[arg(long)]
    regime: Option<u32>,
}

fn schema() -> Schema {
    Schema::builder()
        .field("image", DType::U8, [3, 32, 32])
        .field("label", DType::I64, [])
        .build()
        .expect("a valid schema")
}

/// A synthetic image and its label, a function of (producer, index).
fn make(producer: usize, i: usize) -> Sample {
    let label = ((producer * 7919 + i * 31) % 10) as i64;
    let mut x = (producer as u32).wrapping_mul(2_654_435_761) ^ i as u32;
    let image: Vec<u8> = (0..3 * 32 * 32)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8 / 4 + label as u8 * 20
        })
        .collect();
    Sample::new()
        .with("image", Values::U8(image), [3, 32, 32])
        .with("label", Values::I64(vec![label]), [])
}

/// Simulated cost of making images: sleeps in slices of at least 1 ms.
struct Cost {
    per_image: Duration,
    owed: Duration,
}

impl Cost {
    fn pay(&mut self, images: usize) {
        self.owed += self.per_image * images as u32;
        if self.owed >= Duration::from_millis(1) {
            thread::sleep(self.owed);
            self.owed = Duration::ZERO;
        }
    }
}

/// What one producer did.
struct Produced {
    what: String,
    elapsed: Duration,
    held_back: Duration,
}

/// Producer 0: instances one by one.
fn push_instances(feed: FeedHandle, n: usize, cost: Duration) -> Result<Produced, String> {
    let t0 = Instant::now();
    let mut held_back = Duration::ZERO;
    let mut cost = Cost {
        per_image: cost,
        owed: Duration::ZERO,
    };
    for i in 0..n {
        let s = make(0, i);
        cost.pay(1);
        let t = Instant::now();
        feed.push(s).map_err(|e| format!("producer 0: {e}"))?;
        held_back += t.elapsed();
    }
    Ok(Produced {
        what: format!("{n} instances"),
        elapsed: t0.elapsed(),
        held_back,
    })
}

/// Producer 1: ready-made batches of `batch`.
fn push_batches(
    feed: FeedHandle,
    n: usize,
    batch: usize,
    cost: Duration,
) -> Result<Produced, String> {
    let t0 = Instant::now();
    let schema = feed.schema().clone();
    let source = SourceId::intern("producer-1");
    let mut held_back = Duration::ZERO;
    let mut cost = Cost {
        per_image: cost,
        owed: Duration::ZERO,
    };
    let mut batches = 0;
    let mut i = 0;
    while i < n {
        let size = batch.min(n - i);
        let mut chunk = Chunk::with_capacity(&schema, size);
        for j in i..i + size {
            append_sample(&mut chunk, &make(1, j), Origin::new(source, j as u64))
                .map_err(|e| e.to_string())?;
        }
        cost.pay(size);
        let b: Batch = collate_chunks(&schema, [&chunk]).map_err(|e| e.to_string())?;
        let t = Instant::now();
        feed.push_batch(b)
            .map_err(|e: PushError<Batch>| format!("producer 1: {e}"))?;
        held_back += t.elapsed();
        batches += 1;
        i += size;
    }
    Ok(Produced {
        what: format!("{batches} batches of {batch}"),
        elapsed: t0.elapsed(),
        held_back,
    })
}

fn pct(part: Duration, whole: Duration) -> f64 {
    100.0 * part.as_secs_f64() / whole.as_secs_f64().max(1e-9)
}

fn run_regime(
    args: &Args,
    title: &str,
    step: Duration,
    cost: Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    println!("\n== {title}");
    println!(
        "   devices: {} × {:.1} ms per batch; producers: {:.0} µs per image",
        args.devices,
        step.as_secs_f64() * 1e3,
        cost.as_secs_f64() * 1e6
    );
    let (loader, feed) = Loader::builder()
        .schema(schema())
        .batch(args.batch)
        .devices(args.devices)
        .capacity(args.capacity)
        .shuffle(args.shuffle)
        .chunk_records(64)
        .build_with_feed()?;
    let devices: Vec<_> = (0..args.devices)
        .map(|d| {
            let it = loader.device_iter(d);
            thread::spawn(move || -> Result<u64, String> {
                let mut records = 0;
                for b in it {
                    let b = b.map_err(|e| format!("device {d}: {e}"))?;
                    records += b.batch.len() as u64;
                    std::hint::black_box(b.batch.u8("image").map_err(|e| e.to_string())?.sum());
                    thread::sleep(step);
                }
                Ok(records)
            })
        })
        .collect();
    let (n, batch) = (args.instances, args.batch);
    let f0 = feed.clone();
    let p0 = thread::spawn(move || push_instances(f0, n, cost));
    let p1 = thread::spawn(move || push_batches(feed, n, batch, cost));
    let produced = [
        p0.join().map_err(|_| "producer 0 panicked")??,
        p1.join().map_err(|_| "producer 1 panicked")??,
    ];
    // Both handles are gone: the stream ends after what was pushed.
    let mut records = 0;
    for d in devices {
        records += d.join().map_err(|_| "a device panicked")??;
    }
    let s: StatsSnapshot = loader.stats();
    for (k, p) in produced.iter().enumerate() {
        println!(
            "   producer {k}: {:>18} in {:.2} s, held back by a full pipeline {:.2} s ({:.0}%)",
            p.what,
            p.elapsed.as_secs_f64(),
            p.held_back.as_secs_f64(),
            pct(p.held_back, p.elapsed)
        );
    }
    for d in &s.devices {
        println!(
            "   device {}: {:>4} batches, {:>5} images, busy {:.2} s, waiting for data {:.2} s ({:.0}%)",
            d.device,
            d.batches,
            d.records,
            d.busy_s,
            d.waiting_s,
            d.waiting_fraction * 100.0
        );
    }
    let held: f64 = produced
        .iter()
        .map(|p| pct(p.held_back, p.elapsed))
        .sum::<f64>()
        / produced.len() as f64;
    let waiting: f64 = s
        .devices
        .iter()
        .map(|d| d.waiting_fraction * 100.0)
        .sum::<f64>()
        / s.devices.len().max(1) as f64;
    let want = 2 * args.instances as u64;
    if records != want {
        return Err(format!("the devices got {records} images, {want} were pushed").into());
    }
    println!(
        "   {records} images in {} batches; producers held back {held:.0}%, devices waiting {waiting:.0}%",
        s.batches
    );
    if held > waiting {
        println!("   bottleneck: the devices (the producers wait for room)");
    } else {
        println!("   bottleneck: the producers (the devices wait for data)");
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.devices == 0 || args.batch == 0 || args.instances == 0 {
        eprintln!("push_feed: --devices, --batch and --instances must be at least 1");
        return ExitCode::FAILURE;
    }
    let ms = |x: f64| Duration::from_secs_f64(x.max(0.0) / 1e3);
    let regimes = [
        (
            1,
            "regime 1: the devices are slower",
            ms(args.slow_step_ms),
            Duration::ZERO,
        ),
        (
            2,
            "regime 2: the producers are slower",
            ms(args.fast_step_ms),
            ms(args.slow_make_us / 1e3),
        ),
    ];
    for (k, title, step, cost) in regimes {
        if args.regime.is_some_and(|r| r != k) {
            continue;
        }
        if let Err(e) = run_regime(&args, title, step, cost) {
            eprintln!("push_feed: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
