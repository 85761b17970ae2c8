//! `feedline run`: the actor pipeline with simulated devices, a summary, and
//! an optional provenance trace of every delivered batch.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use feedline::batcher::BatchPolicy;
use feedline::plan::Shard;
use feedline::Schema;
use feedline_actors::{
    Delivered, ErrorPolicy, FeedMode, FileSet, Pipeline, PipelineConfig, SimulatedDevice,
    StatsSnapshot, TrainStep,
};

use crate::files::{AnyResult, FormatArgs};

/// The pipeline's knobs, shared by `run` and `bench`.
#[derive(Args, Clone)]
pub struct PipelineArgs {
    /// Input files, glob patterns or list files (@train.list); FORMAT: prefixes allowed.
    pub files: Vec<String>,
    #[command(flatten)]
    pub format: FormatArgs,
    /// Schema file (JSON or TOML); default: inferred from the first file.
    #[arg(long)]
    pub schema: Option<PathBuf>,
    /// Prefetch readers.
    #[arg(long, default_value_t = 2)]
    pub readers: usize,
    /// A file set mixed with the others by weight, with its own readers, as
    /// NAME,WEIGHT,READERS,FILE[,FILE…] (files: paths, globs, @lists);
    /// repeat for each set, instead of FILES and --readers.
    #[arg(long = "set", value_name = "NAME,WEIGHT,READERS,FILES")]
    pub sets: Vec<String>,
    /// Batch size.
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Shuffle pool in instances (0: no shuffle).
    #[arg(long, default_value_t = 10_000)]
    pub shuffle: usize,
    /// Instances held before the shuffle draws start (default: the pool size).
    #[arg(long)]
    pub min_pool: Option<usize>,
    /// Byte bound of the shuffle pool, MiB.
    #[arg(long, default_value_t = 256)]
    pub shuffle_mib: usize,
    /// Passes (epochs).
    #[arg(long, default_value_t = 1)]
    pub passes: u64,
    /// Seed of file order and shuffle.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Same batches on every run whatever the reader count and timing.
    #[arg(long)]
    pub deterministic: bool,
    /// Feed batch k to device k mod D (default: a shared queue).
    #[arg(long)]
    pub round_robin: bool,
    /// Feed-queue capacity in batches.
    #[arg(long, default_value_t = 4)]
    pub capacity: usize,
    /// Drop each pass's last partial batch.
    #[arg(long)]
    pub drop_last: bool,
    /// Instances per chunk.
    #[arg(long, default_value_t = 1024)]
    pub chunk_records: usize,
    /// Byte bound of a chunk, MiB (a chunk ends at whichever bound it reaches first)
    #[arg(long, default_value_t = 1)]
    pub chunk_mib: usize,
    /// Data-parallel rank (default: $RANK or 0).
    #[arg(long)]
    pub rank: Option<usize>,
    /// Data-parallel world size (default: $WORLD_SIZE or 1).
    #[arg(long)]
    pub world_size: Option<usize>,
    /// What to do with a bad record: fail or skip.
    #[arg(long, default_value = "fail")]
    pub on_error: String,
    /// With --on-error skip: fail once more than N records were skipped.
    #[arg(long)]
    pub max_bad: Option<u64>,
    /// Same batch count on every rank: off, drop or pad.
    #[arg(long, default_value = "off")]
    pub equalize: String,
    /// Skip CRC checks (says so in the output).
    #[arg(long)]
    pub no_checksums: bool,
    /// Check each TFRecord CRC as the record is read (default: a record whose
    /// large bytes stay in the mapped file is checked as those bytes are
    /// copied into its batch, so they are read from memory once; with
    /// `--on-error skip` the readers always check as they read).
    #[arg(long)]
    pub crc_on_read: bool,
}

impl PipelineArgs {
    pub fn config(&self, devices: usize) -> AnyResult<PipelineConfig> {
        let mut shard = Shard::from_env()?;
        if let Some(r) = self.rank {
            shard.rank = r;
        }
        if let Some(w) = self.world_size {
            shard.world_size = w;
        }
        if shard.rank >= shard.world_size {
            return Err(format!(
                "rank {} must be below world size {}",
                shard.rank, shard.world_size
            )
            .into());
        }
        let error_policy = match self.on_error.as_str() {
            "fail" => ErrorPolicy::Fail,
            "skip" => ErrorPolicy::Skip {
                max_bad: self.max_bad,
                max_bad_fraction: None,
            },
            other => return Err(format!("--on-error {other}: expected fail or skip").into()),
        };
        let equalize = match self.equalize.as_str() {
            "off" => feedline::plan::Equalize::Off,
            "drop" => feedline::plan::Equalize::Drop,
            "pad" => feedline::plan::Equalize::Pad,
            other => return Err(format!("--equalize {other}: expected off, drop or pad").into()),
        };
        if self.chunk_mib == 0 {
            return Err("--chunk-mib must be at least 1".into());
        }
        let mut open = self.format.open_options()?;
        open.verify_checksums = !self.no_checksums;
        open.defer_checksums = !self.crc_on_read;
        let sets = self
            .sets
            .iter()
            .map(|s| parse_set(s))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PipelineConfig {
            files: self.files.clone(),
            sets,
            format: self.format.format.clone(),
            open,
            schema: self.schema.as_ref().map(Schema::from_file).transpose()?,
            readers: self.readers,
            chunk_records: self.chunk_records,
            chunk_bytes: self.chunk_mib << 20,
            shuffle: self.shuffle,
            min_pool: self.min_pool,
            shuffle_bytes: self.shuffle_mib << 20,
            batch: BatchPolicy::Fixed(self.batch),
            drop_last: self.drop_last,
            passes: self.passes,
            seed: self.seed,
            deterministic: self.deterministic,
            devices,
            feed: if self.round_robin {
                FeedMode::RoundRobin
            } else {
                FeedMode::Shared
            },
            capacity: self.capacity,
            error_policy,
            shard,
            equalize,
            ..PipelineConfig::default()
        })
    }
}

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    pipeline: PipelineArgs,
    /// Simulated devices.
    #[arg(long, default_value_t = 1)]
    devices: usize,
    /// Milliseconds per batch on each simulated device.
    #[arg(long, default_value_t = 0.0)]
    step_ms: f64,
    /// Write one JSON line per delivered batch: pass, device, seq and the
    /// (path, record) of every instance.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

type Trace = Arc<Mutex<BufWriter<File>>>;

struct TracingDevice {
    sim: SimulatedDevice,
    trace: Option<Trace>,
}

impl TrainStep for TracingDevice {
    fn step(&mut self, device: usize, d: &Delivered) -> Result<(), String> {
        if let Some(t) = &self.trace {
            let records: Vec<(std::sync::Arc<str>, u64)> = d
                .batch
                .origins()
                .iter()
                .map(|o| (o.source.name(), o.record))
                .collect();
            let line = serde_json::json!({"pass": d.pass, "device": device, "seq": d.seq, "records": records});
            let mut w = t.lock().map_err(|_| "trace writer poisoned".to_string())?;
            serde_json::to_writer(&mut *w, &line).map_err(|e| e.to_string())?;
            w.write_all(b"\n").map_err(|e| e.to_string())?;
        }
        self.sim.step(device, d)
    }
}

/// `NAME,WEIGHT,READERS,FILE[,FILE…]` of `--set`.
fn parse_set(spec: &str) -> Result<FileSet, String> {
    let bad = |what: &str| format!("--set {spec:?}: {what} (expected NAME,WEIGHT,READERS,FILES)");
    let mut parts = spec.split(',');
    let name = parts
        .next()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| bad("no name"))?;
    let weight: f64 = parts
        .next()
        .and_then(|w| w.trim().parse().ok())
        .ok_or_else(|| bad("WEIGHT is not a number"))?;
    let readers: usize = parts
        .next()
        .and_then(|r| r.trim().parse().ok())
        .ok_or_else(|| bad("READERS is not a whole number"))?;
    let files: Vec<String> = parts.filter(|f| !f.is_empty()).map(String::from).collect();
    if files.is_empty() {
        return Err(bad("no files"));
    }
    Ok(FileSet::new(name, files).readers(readers).weight(weight))
}

pub fn run(args: RunArgs) -> AnyResult<ExitCode> {
    if args.pipeline.files.is_empty() && args.pipeline.sets.is_empty() {
        return Err("no input files (give files, globs or @list)".into());
    }
    let config = args.pipeline.config(args.devices)?;
    let trace: Option<Trace> = match &args.trace {
        Some(p) => Some(Arc::new(Mutex::new(BufWriter::new(
            File::create(p).map_err(|e| feedline::Error::io(p, e))?,
        )))),
        None => None,
    };
    let step_time = Duration::from_secs_f64(args.step_ms.max(0.0) / 1000.0);
    let steps: Vec<TracingDevice> = (0..args.devices.max(1))
        .map(|_| TracingDevice {
            sim: SimulatedDevice { step_time },
            trace: trace.clone(),
        })
        .collect();
    let (result, snap) = run_pipeline(config, steps)?;
    if let Some(t) = &trace {
        t.lock().map_err(|_| "trace writer poisoned")?.flush()?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&snap)?);
    } else {
        print_summary(&snap);
    }
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("feedline: error: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Run the pipeline with these trainers to the end; the outcome and the stats.
pub fn run_pipeline<S: TrainStep>(
    config: PipelineConfig,
    steps: Vec<S>,
) -> AnyResult<(Result<(), feedline_actors::PipelineError>, StatsSnapshot)> {
    let sys = actix::System::new();
    let out = sys.block_on(async move {
        let mut p = Pipeline::start_with_trainers(config, steps)?;
        let r = p.finished().await;
        let snap = p.stats().snapshot();
        p.join();
        Ok::<_, feedline_actors::PipelineError>((r, snap))
    })?;
    Ok(out)
}

pub fn print_summary(s: &StatsSnapshot) {
    println!(
        "{} records, {} batches, {} passes in {:.3} s: {:.0} records/s",
        s.readers.records, s.batches, s.passes_done, s.elapsed_s, s.readers.records_per_s
    );
    println!("device  batches  records   busy%  waiting%");
    for d in &s.devices {
        let total = (d.busy_s + d.waiting_s).max(1e-12);
        println!(
            "{:>6} {:>8} {:>8} {:>7.1} {:>9.1}",
            d.device,
            d.batches,
            d.records,
            100.0 * d.busy_s / total,
            100.0 * d.waiting_s / total
        );
    }
    if s.bad_records > 0 {
        println!("skipped bad records: {}", s.bad_records);
    }
    if s.equalize_dropped + s.equalize_padded > 0 {
        println!(
            "ranks equalized: {} instances dropped, {} repeated as padding",
            s.equalize_dropped, s.equalize_padded
        );
    }
    if s.reader_restarts > 0 {
        println!("readers replaced: {}", s.reader_restarts);
    }
    println!("{}", s.summary_line());
}
