//! Scaling the transform workers to many cores, shown by simulation.
//!
//! Each instance's transform *waits* W µs (a sleep, as a worker with a core
//! of its own would be busy decoding) and writes a small output row; one
//! reader generates the instances, the shuffle pool holds 1,000, batches
//! are 64 rows. A machine of 2 cores runs 64 such workers as it would run
//! 64 busy cores: what is measured is whether the pipeline keeps every
//! worker busy — the batch maker making several batches side by side, a
//! worker done with one batch's rows taking the next's — or lets them idle
//! at each batch's slowest instance.
//!
//! `ideal_per_s` is N × 10⁶ / the mean time the waits actually took (the
//! sleep overshoots its request a little; that is not the pipeline's
//! doing), and `efficiency` = instances_per_s / ideal_per_s, measured from
//! the first batch to the last (the start-up of N threads is not the
//! steady state). With `--skew lognormal` each instance's wait is drawn
//! from a lognormal of mean W and σ = 1 (from the instance's own RNG:
//! the same waits on every run), as JPEG decode times are skewed by image
//! size: the longest of a batch's 64 waits is then ~6× the mean.
//!
//! ```text
//! cargo run --release --example worker_scaling                     # table, N = 1 … 64
//! cargo run --release --example worker_scaling -- --workers 64 --wait-us 2000 --json
//! cargo run --release --example worker_scaling -- --workers 64 --wait-us 2000 --skew lognormal --json
//! ```
//!
//! `--json` prints one JSON object on the last line of standard output.
//! With `--autotune --cpus N` instead of `--workers N` the autotuner
//! chooses the workers within N cores of CPU time, at most N workers (the
//! simulated waits use none, so the pool can reach N);
//! `workers_max` is the most workers that ran at once, `workers` those at
//! the end (`ideal_per_s` is of those), `autotune` the tuner's values and
//! the changes it kept (`null` without tuning), and
//! `instances_per_s_after_3s` the rate from 3 s after the first batch on
//! (`null` for a shorter run):
//!
//! ```text
//! cargo run --release --example worker_scaling -- --autotune --cpus 32 --wait-us 2000 --skew lognormal --json
//! ```

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use feedline::format::generator::Sample;
use feedline::transform::TransformCtx;
use feedline::{DType, Instance, Schema, Values};
use feedline_actors::autotune::available_cpus;
use feedline_actors::{Autotune, Loader};
use rand::Rng;

/// How the per-instance waits are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Skew {
    /// Every wait is W.
    None,
    /// Lognormal of mean W, σ = 1.
    Lognormal,
}

/// Transform workers scaled to 64, each instance's transform waiting W µs.
#[derive(Parser, Debug)]
#[command(name = "worker_scaling")]
struct Args {
    /// Transform workers (default: a table for 1, 2, 4, …, 64).
    #[arg(long)]
    workers: Option<usize>,
    /// Mean wait per instance, µs.
    #[arg(long, default_value_t = 2000)]
    wait_us: u64,
    /// How the waits are drawn.
    #[arg(long, value_enum, default_value_t = Skew::None)]
    skew: Skew,
    /// Instances per run (default: 65,536, or enough for ~3 s at the ideal rate).
    #[arg(long)]
    instances: Option<u64>,
    /// Rows per batch.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Batches in flight in the batch maker (default: the library's).
    #[arg(long)]
    batches_in_flight: Option<usize>,
    /// Print one JSON object on the last line.
    #[arg(long)]
    json: bool,
    /// Let the autotuner choose the workers (instead of --workers), within
    /// --cpus cores of CPU time, at most --cpus workers.
    #[arg(long, conflicts_with = "workers")]
    autotune: bool,
    /// The autotuner's CPU budget (default: the cores this process may use).
    #[arg(long, requires = "autotune")]
    cpus: Option<usize>,
}

/// The waits as they were: their count and their total time.
#[derive(Default)]
struct Waits {
    count: AtomicU64,
    total_ns: AtomicU64,
}

/// One run's figures.
#[derive(Debug)]
struct Run {
    /// The workers at the end (the tuner's, with --autotune).
    workers: usize,
    /// The most workers that ran at once.
    workers_max: usize,
    instances: u64,
    instances_per_s: f64,
    mean_wait_us: f64,
    ideal_per_s: f64,
    efficiency: f64,
    batches_in_flight: usize,
    /// Instances per second from 3 s after the first batch to the last
    /// (`None` when the run ended sooner): the rate once a tuner has had
    /// 3 s.
    instances_per_s_after_3s: Option<f64>,
    /// The autotuner's values and the changes it kept (JSON), if tuning.
    tuned: Option<serde_json::Value>,
}

/// A wait of mean `mean_us` drawn from a lognormal with σ = 1 (Box–Muller
/// on the instance's RNG): μ = ln(mean) − σ²/2.
fn lognormal_us(rng: &mut impl Rng, mean_us: f64) -> f64 {
    let (u1, u2): (f64, f64) = (rng.gen_range(f64::EPSILON..1.0), rng.gen());
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    (mean_us.ln() - 0.5 + z).exp()
}

/// A run with `workers` transform workers (`None`: the autotuner's).
fn run(args: &Args, workers: Option<usize>) -> Result<Run, Box<dyn std::error::Error>> {
    let most = workers.unwrap_or_else(|| args.cpus.unwrap_or_else(available_cpus));
    let ideal_guess = most as f64 * 1e6 / args.wait_us.max(1) as f64;
    let instances = args
        .instances
        .unwrap_or_else(|| 65_536u64.max((ideal_guess * 3.0) as u64))
        .max(args.batch as u64);
    let waits = Arc::new(Waits::default());
    let (mean_us, skew) = (args.wait_us as f64, args.skew);
    let w = waits.clone();
    let output = Schema::builder()
        .field("id", DType::I64, [])
        .field("y", DType::F32, [4])
        .build()?;
    let mut builder = Loader::builder()
        .generator("synthetic", move || {
            (0..instances as i64).map(|i| {
                Sample::new().with("id", Values::I64(vec![i]), []).with(
                    "x",
                    Values::F32(vec![i as f32; 4]),
                    [4],
                )
            })
        })
        .readers(1)
        .shuffle(1_000)
        .batch(args.batch)
        .seed(7)
        .map(move |inst: Instance, ctx: &mut TransformCtx| {
            let wait_us = match skew {
                Skew::None => mean_us,
                Skew::Lognormal => lognormal_us(ctx.rng(), mean_us),
            };
            let t0 = Instant::now();
            std::thread::sleep(Duration::from_nanos((wait_us * 1e3) as u64));
            w.total_ns
                .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
            w.count.fetch_add(1, Relaxed);
            let x = inst.get("x")?.as_f32().ok_or("x is not f32")?;
            let id = inst.get("id")?.as_i64().ok_or("id is not i64")?[0];
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
                Sample::new().with("id", Values::I64(vec![id]), []).with(
                    "y",
                    Values::F32(x.iter().map(|v| v * 0.5).collect()),
                    [4],
                ),
            )
        })
        .output_schema(output);
    builder = match workers {
        Some(n) => builder.workers(n),
        None => builder.autotune(Autotune {
            cpus: args.cpus,
            memory_budget: None,
        }),
    };
    if let Some(k) = args.batches_in_flight {
        builder = builder.batches_in_flight(k);
    }
    let batches_in_flight = builder.settings().in_flight_batches();
    let loader = builder.build()?;
    let stats = loader.stats_handle();
    let (mut first, mut rows, mut rows_after_first) = (None, 0u64, 0u64);
    // Rows delivered from 3 s after the first batch on, and when that began.
    let (mut rows_after_3s, mut at_3s) = (0u64, None);
    let mut last = Instant::now();
    for delivered in loader {
        let n = delivered?.batch.len() as u64;
        rows += n;
        last = Instant::now();
        match first {
            None => first = Some(last),
            Some(f) => {
                rows_after_first += n;
                if last - f >= Duration::from_secs(3) {
                    match at_3s {
                        None => at_3s = Some(last),
                        Some(_) => rows_after_3s += n,
                    }
                }
            }
        }
    }
    let instances_per_s_after_3s = at_3s
        .filter(|&t| last > t)
        .map(|t| rows_after_3s as f64 / (last - t).as_secs_f64());
    if rows != instances {
        return Err(format!("{rows} instances delivered, {instances} expected").into());
    }
    let elapsed = first.map_or(0.0, |f| (last - f).as_secs_f64()).max(1e-9);
    let instances_per_s = rows_after_first as f64 / elapsed;
    let count = waits.count.load(Relaxed).max(1);
    let mean_wait_us = waits.total_ns.load(Relaxed) as f64 / count as f64 / 1e3;
    let tuned = stats.snapshot().autotune;
    let (workers, workers_max, batches_in_flight) = match (workers, &tuned) {
        (Some(n), _) => (n, n, batches_in_flight),
        (None, Some(a)) => (a.values.workers, a.workers_max, a.values.batches_in_flight),
        (None, None) => return Err("autotuning on, but no autotune statistics".into()),
    };
    let tuned = tuned.map(serde_json::to_value).transpose()?;
    let ideal_per_s = workers as f64 * 1e6 / mean_wait_us;
    Ok(Run {
        workers,
        workers_max,
        instances,
        instances_per_s,
        mean_wait_us,
        ideal_per_s,
        efficiency: instances_per_s / ideal_per_s,
        batches_in_flight,
        instances_per_s_after_3s,
        tuned,
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    let counts: Vec<Option<usize>> = match args.workers {
        Some(0) => {
            eprintln!("--workers must be at least 1");
            return ExitCode::from(2);
        }
        _ if args.autotune => vec![None],
        Some(n) => vec![Some(n)],
        None => [1, 2, 4, 8, 16, 32, 64].map(Some).to_vec(),
    };
    if !args.json {
        println!(
            "wait {} µs per instance ({:?}), batch {}, 1 reader, shuffle 1,000",
            args.wait_us, args.skew, args.batch
        );
        println!(
            "{:>8} {:>10} {:>12} {:>14} {:>12} {:>11}",
            "workers", "instances", "inst/s", "mean wait µs", "ideal/s", "efficiency"
        );
    }
    let mut runs = Vec::new();
    for n in counts {
        match run(&args, n) {
            Ok(r) => {
                if !args.json {
                    println!(
                        "{:>8} {:>10} {:>12.0} {:>14.1} {:>12.0} {:>10.1}%",
                        r.workers,
                        r.instances,
                        r.instances_per_s,
                        r.mean_wait_us,
                        r.ideal_per_s,
                        100.0 * r.efficiency
                    );
                }
                runs.push(r);
            }
            Err(e) => {
                let n = n.map_or("autotuned".to_string(), |n| n.to_string());
                eprintln!("workers {n}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if args.json {
        let r = runs.last().expect("one run at least");
        let json = serde_json::json!({
            "workers": r.workers,
            "workers_max": r.workers_max,
            "autotune": r.tuned,
            "instances_per_s_after_3s": r.instances_per_s_after_3s,
            "wait_us": args.wait_us,
            "skew": format!("{:?}", args.skew).to_lowercase(),
            "batch": args.batch,
            "batches_in_flight": r.batches_in_flight,
            "instances": r.instances,
            "instances_per_s": r.instances_per_s,
            "mean_wait_us": r.mean_wait_us,
            "ideal_per_s": r.ideal_per_s,
            "efficiency": r.efficiency,
        });
        println!("{json}");
    }
    ExitCode::SUCCESS
}
