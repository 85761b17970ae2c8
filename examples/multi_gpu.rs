//! The main job: feed simulated GPUs and see, at a glance, whether they are fed.
//!
//! With no arguments it generates a default dataset once (the small preset,
//! 16 files × 32,768 records, cached under the target directory), then runs 2
//! passes into 4 simulated devices, with progress bars on a terminal, and
//! prints per-device and per-stage tables and the bottleneck.
//!
//! ```text
//! cargo run --release --example multi_gpu
//! cargo run --release --example multi_gpu -- --step-ms 0            # loader flat out: which stage limits?
//! cargo run --release --example multi_gpu -- --step-ms 2,2,4,8       # heterogeneous devices
//! cargo run --release --example multi_gpu -- --plot timeline.svg     # or .png
//! cargo run --release --example multi_gpu -- --files 'data/*.tfrecord' --readers 4 --batch 128
//! ```

#[path = "common/plot.rs"]
mod plot;
#[path = "common/report.rs"]
mod report;

use feedline_actors::{Batching, Feeding, Inputs, Order, Reading};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use feedline::synthetic::{generate, GenOptions, Preset};
use feedline_actors::{
    FeedMode, Pipeline, PipelineConfig, SimulatedDevice, StatsSnapshot, Timeline,
};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

/// Feed simulated GPUs from feedline and see whether they are fed: per
/// device busy and waiting-for-data %, per stage busy %, the bottleneck, and
/// a timeline plot with --plot (a dataset is generated without --files).
#[derive(Parser)]
#[command(name = "multi_gpu")]
struct Args {
    /// Input files or globs (default: a generated small-preset dataset).
    #[arg(long, num_args = 1..)]
    files: Vec<String>,
    /// Files of the generated default dataset.
    #[arg(long, default_value_t = 16)]
    gen_files: usize,
    /// Records per generated file.
    #[arg(long, default_value_t = 32_768)]
    gen_records: usize,
    /// Simulated devices.
    #[arg(long, default_value_t = 4)]
    devices: usize,
    /// Milliseconds per batch: one value for all devices, or one per device
    /// (comma-separated, e.g. 2,2,4,8).
    #[arg(long, default_value = "2", allow_negative_numbers = true)]
    step_ms: String,
    /// Prefetch readers.
    #[arg(long, default_value_t = 2)]
    readers: usize,
    /// Batch size.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// Shuffle pool (instances).
    #[arg(long, default_value_t = 10_000)]
    shuffle: usize,
    /// Passes.
    #[arg(long, default_value_t = 2)]
    passes: u64,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Identical batches on every run.
    #[arg(long)]
    deterministic: bool,
    /// Batch k to device k mod D (default: devices take batches as they are ready).
    #[arg(long)]
    round_robin: bool,
    /// Feed-queue capacity (batches).
    #[arg(long, default_value_t = 4)]
    capacity: usize,
    /// Draw device utilisation and queue depth over time (.svg or .png).
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// How often the timeline samples the pipeline's statistics.
const SAMPLE_INTERVAL: Duration = Duration::from_millis(50);

fn default_dataset(
    files: usize,
    records: usize,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    // target/<profile>/examples/multi_gpu → target/<profile>/feedline-data/…
    let exe = std::env::current_exe()?;
    let base = exe
        .parent()
        .and_then(Path::parent)
        .map(|p| p.join("feedline-data"))
        .unwrap_or_else(|| std::env::temp_dir().join("feedline-data"));
    let dir = base.join(format!("small-{files}x{records}-seed20240601"));
    let marker = dir.join("COMPLETE");
    if !marker.exists() {
        eprintln!(
            "generating the default dataset ({files} files × {records} records) in {} …",
            dir.display()
        );
        let t0 = std::time::Instant::now();
        let mut opts = GenOptions::new(Preset::Small, &dir);
        opts.files = Some(files);
        opts.records = Some(records);
        opts.seed = 20240601;
        generate(&opts)?;
        std::fs::write(&marker, b"")?;
        eprintln!(
            "… done in {:.1} s (cached for the next run)",
            t0.elapsed().as_secs_f64()
        );
    }
    let mut paths: Vec<String> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "tfrecord"))
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    paths.sort();
    Ok(paths)
}

fn step_times(spec: &str, devices: usize) -> Result<Vec<Duration>, String> {
    let parts: Vec<f64> = spec
        .split(',')
        .map(|s| {
            s.trim()
                .parse::<f64>()
                .map_err(|e| format!("--step-ms {spec}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let ms = match parts.len() {
        1 => vec![parts[0]; devices],
        n if n == devices => parts,
        n => return Err(format!("--step-ms has {n} values for {devices} devices")),
    };
    if let Some(m) = ms
        .iter()
        .find(|m| !(m.is_finite() && (0.0..=3_600_000.0).contains(*m)))
    {
        return Err(format!(
            "--step-ms {m} is not in 0..=3600000 (milliseconds)"
        ));
    }
    Ok(ms
        .into_iter()
        .map(|m| Duration::from_secs_f64(m / 1000.0))
        .collect())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("multi_gpu: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let steps = step_times(&args.step_ms, args.devices.max(1))?;
    let generated = args.files.is_empty();
    let files = if generated {
        default_dataset(args.gen_files, args.gen_records)?
    } else {
        args.files.clone()
    };
    let pass_records = generated.then(|| (args.gen_files * args.gen_records) as u64);
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
            deterministic: args.deterministic,
            ..Default::default()
        },
        batching: Batching {
            batch: feedline::batch_policy::BatchPolicy::Fixed(args.batch),
            ..Default::default()
        },
        feeding: Feeding {
            feed: if args.round_robin {
                FeedMode::RoundRobin
            } else {
                FeedMode::Shared
            },
            capacity: args.capacity,
            ..Default::default()
        },
        ..PipelineConfig::default()
    };
    let devices: Vec<SimulatedDevice> = steps
        .iter()
        .map(|&step_time| SimulatedDevice { step_time })
        .collect();
    let show_bars = std::io::stderr().is_terminal();
    let passes = args.passes;
    let plot = args.plot.clone();

    let sys = actix::System::new();
    let (result, snap, samples, pass_ends) = sys.block_on(async move {
        let mut p = Pipeline::start_with_trainers(config, devices)?;
        let bars =
            show_bars.then(|| Bars::new(p.stats().snapshot().devices.len(), pass_records, passes));
        let bars = Arc::new(Mutex::new(bars));
        let b2 = bars.clone();
        // When each pass was all batched: the first sample that counts it.
        let pass_ends = Arc::new(Mutex::new(Vec::new()));
        let ends = pass_ends.clone();
        let timeline = Timeline::start(p.stats().clone(), SAMPLE_INTERVAL, move |sample, snap| {
            let mut ends = ends.lock().unwrap();
            while (ends.len() as u64) < snap.passes_done {
                ends.push(sample.t);
            }
            if let Some(b) = b2.lock().unwrap().as_ref() {
                b.update(snap);
            }
        });
        let r = p.finished().await;
        let samples = timeline.stop();
        let pass_ends = std::mem::take(&mut *pass_ends.lock().unwrap());
        if let Some(b) = bars.lock().unwrap().take() {
            b.finish();
        }
        let snap = p.stats().snapshot();
        p.join();
        Ok::<_, feedline_actors::PipelineError>((r, snap, samples, pass_ends))
    })?;
    result?;
    report::print_report(&snap, &steps);
    if let Some(path) = plot {
        let title = format!(
            "feedline: {} devices, step {} ms, bottleneck: {}",
            snap.devices.len(),
            args.step_ms,
            snap.bottleneck
        );
        plot::timeline(
            &path,
            &plot::Timeline {
                samples: &samples,
                interval: SAMPLE_INTERVAL,
                pass_ends: &pass_ends,
                title: &title,
            },
        )?;
        println!("timeline written to {}", path.display());
    }
    Ok(())
}

/// Progress bars: one per device (batches), one for the pass (records).
struct Bars {
    _multi: MultiProgress,
    pass: ProgressBar,
    devices: Vec<ProgressBar>,
    pass_records: Option<u64>,
}

impl Bars {
    fn new(devices: usize, pass_records: Option<u64>, passes: u64) -> Self {
        let multi = MultiProgress::new();
        let pass = multi.add(match pass_records {
            Some(n) => ProgressBar::new(n * passes),
            None => ProgressBar::new_spinner(),
        });
        pass.set_style(
            ProgressStyle::with_template(
                "{prefix:>10} [{bar:40.cyan/blue}] {pos}/{len} records {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        pass.set_prefix("passes");
        let devices = (0..devices)
            .map(|d| {
                let b = multi.add(ProgressBar::new_spinner());
                b.set_style(
                    ProgressStyle::with_template("{prefix:>10} {pos} batches {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                b.set_prefix(format!("device {d}"));
                b
            })
            .collect();
        Bars {
            _multi: multi,
            pass,
            devices,
            pass_records,
        }
    }

    fn update(&self, s: &StatsSnapshot) {
        let consumed: u64 = s.devices.iter().map(|d| d.records).sum();
        self.pass.set_position(consumed);
        if let Some(n) = self.pass_records {
            self.pass.set_message(format!(
                "pass {}",
                (consumed / n.max(1)).min(s.passes_done + 1)
            ));
        }
        for (b, d) in self.devices.iter().zip(&s.devices) {
            b.set_position(d.batches);
            let total = (d.busy_s + d.waiting_s).max(1e-12);
            b.set_message(format!(
                "busy {:.0}%  waiting {:.1}%",
                100.0 * d.busy_s / total,
                100.0 * d.waiting_s / total
            ));
        }
    }

    fn finish(self) {
        self.pass.finish();
        for b in self.devices {
            b.finish();
        }
    }
}
