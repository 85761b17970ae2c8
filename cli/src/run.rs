//! `feedline run`: the actor pipeline with simulated devices, a summary, and
//! an optional provenance trace of every delivered batch — written a whole
//! line at a time, never over one of the run's inputs. SIGINT and SIGTERM
//! stop the run cleanly: the pipeline is stopped, the trace finished, the
//! summary printed with what was done, and the exit code is 130 or 143.
//!
//! Checkpoints (`--checkpoint PATH`): after every `--checkpoint-every`
//! delivered batches and at the end, the run's position is saved
//! atomically; each batch is traced and counted under one lock, and the
//! trace is flushed before a checkpoint is written, so a checkpoint's
//! `batches` are exactly the first that many lines of the trace whenever
//! the process dies. `--stop-after N` delivers N batches, saves and exits 0;
//! `--resume PATH` (once per rank of an old job) goes on from checkpoints.

use feedline_actors::{Feeding, Order};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use clap::Args;
use feedline_actors::checkpoint::{
    check_save_path, save_atomic_sparing, CheckpointError, CheckpointResult, InputFiles, PathKind,
};
use feedline_actors::{
    input_files, Checkpoint, CheckpointBase, Delivered, FeedMode, Pipeline, PipelineConfig,
    PipelineError, Progress, ResumePlan, StartOptions, StatsSnapshot, TrainStep,
};
use futures::channel::oneshot;
use futures::future::{select, Either};
use parking_lot::Mutex;

use crate::error::{CliError, CliResult};
use crate::output::{Stderr, Stdout};
use crate::pipeline_args::{count, millis, PipelineArgs, MAX_DEVICES};
use crate::signals::{self, Interrupt};

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    pipeline: PipelineArgs,
    /// Passes (epochs), 1..=1000000000.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    passes: u64,
    /// Feed batch k to device k mod D (default: a shared queue).
    #[arg(long)]
    round_robin: bool,
    /// Simulated devices, 1..=256 (one thread each).
    #[arg(long, default_value_t = 1, value_parser = count(1, MAX_DEVICES))]
    devices: usize,
    /// Milliseconds per batch on each simulated device, 0..=3600000.
    #[arg(long, default_value = "0", value_parser = millis, allow_negative_numbers = true)]
    step_ms: Duration,
    /// Write one JSON line per delivered batch: pass, device, seq and the
    /// (path, record) of every instance. Never one of the inputs.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// No progress line on standard error (it is drawn only when standard
    /// error is a terminal).
    #[arg(long, short)]
    quiet: bool,
    /// Save the run's position (JSON) to PATH after every --checkpoint-every
    /// delivered batches and at the end, atomically. Never one of the inputs.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Delivered batches between two checkpoints, 1..=1000000000. When
    /// they come faster than the disk syncs files, the writer rests 49× each
    /// write's time (at most 100 ms) between writes: the file on disk is then
    /// the newest every-N checkpoint made after the rest.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    checkpoint_every: u64,
    /// Deliver this many batches, save the checkpoint and exit 0, 1..=10^18.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000_000_000_000))]
    stop_after: Option<u64>,
    /// Go on from this checkpoint; repeat it with every rank's checkpoint of
    /// an old job to resume it under the new --rank/--world-size.
    #[arg(long)]
    resume: Vec<PathBuf>,
}

/// The trace file: one whole JSON line per delivered batch, flushed as written.
struct Trace {
    path: PathBuf,
    out: Mutex<BufWriter<File>>,
}

impl Trace {
    fn create(path: &Path) -> CliResult<Trace> {
        let file = File::create(path).map_err(|source| CliError::File {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Trace {
            path: path.to_path_buf(),
            out: Mutex::new(BufWriter::new(file)),
        })
    }

    /// Append the line of batch `d` on `device`: `records`, one (path,
    /// record) per row; a packed batch's `segments` too, every document
    /// piece of every row as `[row, path, record, start, length,
    /// doc_tokens]` (as Python's `batch.segments`), since a row's
    /// `records` entry names only its first piece.
    fn write(&self, device: usize, d: &Delivered) -> std::io::Result<()> {
        // In global shuffle mode an origin is a position of the pass's
        // order: the trace names the file and record it stands for.
        let real = |o: feedline::Origin| feedline_actors::real_origin(d.pass, o);
        let records: Vec<(Arc<str>, u64)> =
            (feedline_actors::real_origins(d.pass, d.batch.origins()).iter())
                .map(|o| (o.source.name(), o.record))
                .collect();
        let mut value =
            serde_json::json!({"pass": d.pass, "device": device, "seq": d.seq, "records": records});
        if let (Some(segments), Some(map)) = (d.batch.segments(), value.as_object_mut()) {
            let pieces: Vec<serde_json::Value> = (segments.iter())
                .map(|s| {
                    let origin = real(s.origin);
                    serde_json::json!([
                        s.row,
                        origin.source.name(),
                        origin.record,
                        s.start,
                        s.len,
                        s.doc_tokens
                    ])
                })
                .collect();
            map.insert("segments".into(), pieces.into());
        }
        let mut line = value.to_string();
        line.push('\n');
        let mut out = self.out.lock();
        out.write_all(line.as_bytes())?;
        out.flush()
    }

    fn finish(&self) -> CliResult<()> {
        self.out.lock().flush().map_err(|source| CliError::File {
            path: self.path.clone(),
            source,
        })
    }
}

/// Where and how often checkpoints are saved.
struct Saving {
    path: PathBuf,
    every: u64,
    base: CheckpointBase,
    /// The run's inputs, which no checkpoint is saved over.
    inputs: Arc<InputFiles>,
    /// Writes the checkpoints made during the run, off the devices' path.
    writer: Option<Writer>,
}

impl Saving {
    /// Whether a checkpoint is to be made now (when one is due): the writer
    /// takes one (see [`Writer`]'s pace), or has stopped on an error that
    /// the next hand-over reports.
    fn writer_ready(&self) -> bool {
        self.writer.as_ref().is_none_or(Writer::ready)
    }
}

/// A thread that writes checkpoints atomically, in the order made (only
/// the newest of those waiting: an older one would be overwritten at once).
///
/// Paced, for batches that come faster than a disk syncs files (16 k
/// batches/s at `--checkpoint-every 100` asks for 160 fsynced files a
/// second): after a write that took `t`, no checkpoint is made for
/// `WRITE_REST × t`, at most [`MAX_REST`]. Writing then takes at most a
/// `1 / (1 + WRITE_REST)` share of the time when writes are quick (under
/// 2 ms), and checkpoints due a few times a second are never skipped. The
/// file on disk is always one of the every-N checkpoints, at most about
/// `MAX_REST` plus a write behind the newest one due.
struct Writer {
    tx: mpsc::Sender<Checkpoint>,
    thread: JoinHandle<CheckpointResult<()>>,
    pace: Arc<Pace>,
}

/// The writer's rest after a write, in multiples of the write's time.
const WRITE_REST: u32 = 49;
/// The longest rest after a write.
const MAX_REST: Duration = Duration::from_millis(100);

/// When the writer takes the next checkpoint.
struct Pace {
    /// Where `ready_at_ns` counts from.
    epoch: Instant,
    /// A checkpoint was handed over and is not written yet.
    in_hand: AtomicBool,
    /// Nanoseconds after `epoch` before which no checkpoint is made.
    ready_at_ns: AtomicU64,
}

impl Pace {
    fn ready(&self) -> bool {
        !self.in_hand.load(Ordering::Acquire)
            && self.epoch.elapsed().as_nanos() as u64 >= self.ready_at_ns.load(Ordering::Acquire)
    }

    /// A write of `took` has just ended.
    fn rest_after(&self, took: Duration) {
        let until = self.epoch.elapsed() + (took * WRITE_REST).min(MAX_REST);
        self.ready_at_ns
            .store(until.as_nanos() as u64, Ordering::Release);
        self.in_hand.store(false, Ordering::Release);
    }
}

impl Writer {
    fn start(path: PathBuf, inputs: Arc<InputFiles>) -> CliResult<Writer> {
        let (tx, rx) = mpsc::channel::<Checkpoint>();
        let pace = Arc::new(Pace {
            epoch: Instant::now(),
            in_hand: AtomicBool::new(false),
            ready_at_ns: AtomicU64::new(0),
        });
        let paced = pace.clone();
        let thread = std::thread::Builder::new()
            .name("feedline-checkpoint".into())
            .spawn(move || {
                while let Ok(mut next) = rx.recv() {
                    while let Ok(newer) = rx.try_recv() {
                        next = newer;
                    }
                    let t0 = Instant::now();
                    let json = next.to_json();
                    save_atomic_sparing(&path, json.as_bytes(), &inputs)?;
                    let took = t0.elapsed();
                    paced.rest_after(took);
                    log::debug!(
                        "checkpoint {}: {} batches, {} bytes, written in {:.3} ms",
                        path.display(),
                        next.batches,
                        json.len(),
                        took.as_secs_f64() * 1e3
                    );
                }
                Ok(())
            })
            .map_err(|e| CliError::usage(format!("cannot start a thread: {e}")))?;
        Ok(Writer { tx, thread, pace })
    }

    /// Whether a checkpoint made now would be written at once (none is in
    /// hand and the rest after the last write is over) — or the thread has
    /// stopped on an error, which the next [`send`](Self::send) reports.
    fn ready(&self) -> bool {
        self.thread.is_finished() || self.pace.ready()
    }

    /// Hand `cp` to the thread; false if it stopped (on an error).
    fn send(&self, cp: Checkpoint) -> bool {
        self.pace.in_hand.store(true, Ordering::Release);
        self.tx.send(cp).is_ok()
    }

    /// Wait for every checkpoint sent; the first failure to write one.
    fn finish(self) -> CheckpointResult<()> {
        drop(self.tx);
        self.thread.join().unwrap_or(Ok(()))
    }
}

/// The checkpoint of what was delivered (the trace is flushed line by
/// line, so it already holds every line it covers).
fn make(progress: &mut Progress, s: &Saving) -> Checkpoint {
    let t0 = Instant::now();
    let cp = progress.checkpoint(&s.base);
    log::debug!(
        "checkpoint of {} batches (pass {}) made in {:.3} ms",
        cp.batches,
        cp.pass,
        t0.elapsed().as_secs_f64() * 1e3
    );
    cp
}

fn checkpoint_error(e: CheckpointError) -> CliError {
    CliError::Pipeline(PipelineError::Checkpoint(Arc::new(e)))
}

/// What the devices share: the trace, what was delivered, the checkpoints.
/// One lock: a batch is traced and counted together, so a checkpoint covers
/// exactly the trace's first `batches` lines.
struct Delivery {
    trace: Option<Arc<Trace>>,
    progress: Progress,
    saving: Option<Saving>,
    stop_after: Option<u64>,
    /// Fired once `stop_after` batches are delivered.
    stop: Option<oneshot::Sender<()>>,
    /// Time the devices spent on keeping the progress and making checkpoints.
    spent: Duration,
}

impl Delivery {
    /// Trace and count batch `d` of `device`; false if it is past
    /// `--stop-after` (then it is not delivered: a resume gives it again).
    fn deliver(&mut self, device: usize, d: &Delivered) -> Result<bool, String> {
        if self.stopping() {
            return Ok(false);
        }
        if let Some(t) = &self.trace {
            t.write(device, d)
                .map_err(|e| format!("trace {}: {e}", t.path.display()))?;
        }
        let t0 = Instant::now();
        self.progress.take(d);
        let n = self.progress.batches();
        if (self.saving.as_ref()).is_some_and(|s| n % s.every == 0 && s.writer_ready()) {
            self.save_later().map_err(|e| e.to_string())?;
        }
        self.spent += t0.elapsed();
        if self.stop_after == Some(n) {
            if let Some(stop) = self.stop.take() {
                let _ = stop.send(());
            }
        }
        Ok(true)
    }

    /// True once `--stop-after` batches are delivered: the batches devices
    /// take after it are not delivered, and no pass is complete any more.
    fn stopping(&self) -> bool {
        self.stop_after
            .is_some_and(|n| self.progress.batches() >= n)
    }

    /// Device `device` has had every batch of `pass`.
    fn pass_ended(&mut self, pass: u64) {
        if !self.stopping() {
            self.progress.pass_ended(pass);
        }
    }

    /// Make the checkpoint now, and hand it to the writer.
    fn save_later(&mut self) -> CliResult<()> {
        let Some(s) = &self.saving else {
            return Ok(());
        };
        let cp = make(&mut self.progress, s);
        let Some(w) = &s.writer else {
            return Ok(());
        };
        if !w.send(cp) {
            // The writer stopped on an error: that error.
            let w = self.saving.as_mut().and_then(|s| s.writer.take());
            if let Some(w) = w {
                w.finish().map_err(checkpoint_error)?;
            }
        }
        Ok(())
    }

    /// The last checkpoint: wait for the writer, then write it here.
    fn save_last(&mut self) -> CliResult<()> {
        let Some(s) = &mut self.saving else {
            return Ok(());
        };
        if let Some(w) = s.writer.take() {
            w.finish().map_err(checkpoint_error)?;
        }
        log::debug!(
            "progress and checkpoints took the devices {:.3} ms over {} batches",
            self.spent.as_secs_f64() * 1e3,
            self.progress.batches()
        );
        let s = self.saving.as_ref().expect("saving");
        (make(&mut self.progress, s).save_atomic_sparing(&s.path, &s.inputs))
            .map_err(checkpoint_error)
    }
}

/// A simulated device: traces each batch, then takes `step_time` over it (a
/// wait that a signal cuts short).
struct Device {
    step_time: Duration,
    delivery: Arc<Mutex<Delivery>>,
    interrupt: Arc<Interrupt>,
}

impl TrainStep for Device {
    fn step(&mut self, device: usize, d: &Delivered) -> Result<(), String> {
        if !self.delivery.lock().deliver(device, d)? {
            return Ok(());
        }
        // Touch the batch as a device copy would.
        std::hint::black_box(d.batch.payload_bytes());
        if !self.step_time.is_zero() {
            self.interrupt.wait(self.step_time);
        }
        Ok(())
    }

    fn end_of_pass(&mut self, _device: usize, pass: u64) {
        self.delivery.lock().pass_ended(pass);
    }
}

/// How a run ended.
enum Outcome {
    /// To the end, or with the pipeline's error.
    Finished(Result<(), PipelineError>),
    /// Stopped by this signal.
    Interrupted(i32),
    /// `--stop-after` batches were delivered.
    Stopped,
}

pub fn run(args: RunArgs) -> CliResult<ExitCode> {
    // First: every thread started from here on inherits the blocked signals.
    let signals = signals::handle().map_err(CliError::Signals)?;
    let config = {
        let base = args.pipeline.config()?;
        PipelineConfig {
            order: Order {
                passes: args.passes,
                ..base.order
            },
            feeding: Feeding {
                devices: args.devices,
                feed: if args.round_robin {
                    FeedMode::RoundRobin
                } else {
                    FeedMode::Shared
                },
                ..base.feeding
            },
            ..base
        }
    };
    // The devices keep the progress, with the trace (`Delivery`).
    let mut options = StartOptions {
        track_progress: false,
        ..StartOptions::default()
    };
    if args.stop_after.is_some() && args.checkpoint.is_none() {
        return Err(CliError::usage(
            "--stop-after needs --checkpoint PATH: the checkpoint is what a later --resume goes on from",
        ));
    }
    if !args.resume.is_empty() {
        let checkpoints = (args.resume.iter())
            .map(|p| Checkpoint::load(p))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| PipelineError::Checkpoint(Arc::new(e)))?;
        options.resume = Some(Arc::new(ResumePlan::new(&checkpoints, &config)?));
    }
    let inputs = match (&args.trace, &args.checkpoint) {
        (None, None) => Arc::new(InputFiles::new()),
        _ => {
            let mut files = input_files(&config)?;
            if let Some(schema) = &args.pipeline.schema {
                files.add(schema);
            }
            Arc::new(files)
        }
    };
    refuse_output_paths(args.trace.as_deref(), args.checkpoint.as_deref(), &inputs)?;
    let trace = match &args.trace {
        Some(path) => Some(Arc::new(Trace::create(path)?)),
        None => None,
    };
    let saving = match &args.checkpoint {
        Some(path) => Some(Saving {
            path: path.clone(),
            every: args.checkpoint_every,
            base: CheckpointBase::of(&config)?,
            inputs: inputs.clone(),
            writer: Some(Writer::start(path.clone(), inputs.clone())?),
        }),
        None => None,
    };
    let progress = match &options.resume {
        Some(r) => r.progress(args.devices),
        None => Progress::new(args.devices),
    }
    .with_snapshots(options.snapshots.clone());
    let (stop_tx, stop_rx) = oneshot::channel();
    let delivery = Arc::new(Mutex::new(Delivery {
        trace: trace.clone(),
        progress,
        saving,
        stop_after: args.stop_after,
        stop: Some(stop_tx),
        spent: Duration::ZERO,
    }));
    let steps: Vec<Device> = (0..args.devices)
        .map(|_| Device {
            step_time: args.step_ms,
            delivery: delivery.clone(),
            interrupt: signals.interrupt.clone(),
        })
        .collect();
    // The memory bound is stated after the run, from the records' sizes.
    let memory_config = config.clone();
    let progress = crate::progress::ProgressLine::start(args.quiet);
    let (outcome, snap) = run_pipeline(
        config,
        options,
        steps,
        signals.first,
        stop_rx,
        progress.as_ref(),
    )?;
    // Cleared before anything else is printed.
    drop(progress);
    let memory = Memory::of(&memory_config, &snap);
    if let Some(t) = &trace {
        t.finish()?;
    }
    // The last checkpoint: what was delivered, however the run ended.
    delivery.lock().save_last()?;
    let mut out = Stdout::new();
    if args.json {
        let mut value = serde_json::to_value(&snap).unwrap_or_default();
        if let Some(map) = value.as_object_mut() {
            memory.put(map);
        }
        let text = serde_json::to_string_pretty(&value).unwrap_or_default();
        writeln!(out, "{text}")?;
    } else {
        print_summary(&snap, &mut out)?;
        memory.print(&mut out)?;
    }
    out.finish()?;
    match outcome {
        Outcome::Finished(Ok(())) | Outcome::Stopped => Ok(ExitCode::SUCCESS),
        Outcome::Finished(Err(e)) => Err(e.into()),
        Outcome::Interrupted(sig) => {
            let delivered: u64 = snap.devices.iter().map(|d| d.batches).sum();
            writeln!(
                Stderr,
                "feedline: interrupted by {}: stopped after {delivered} batches delivered to the devices{}",
                signals::name(sig),
                if trace.is_some() {
                    "; the trace has a whole line for each of them"
                } else {
                    ""
                }
            )?;
            Ok(ExitCode::from(signals::exit_code(sig)))
        }
    }
}

/// Run the pipeline with these devices until it ends or a signal arrives;
/// how it ended and its statistics.
fn run_pipeline(
    config: PipelineConfig,
    options: StartOptions,
    steps: Vec<Device>,
    signal: oneshot::Receiver<i32>,
    stop_after: oneshot::Receiver<()>,
    progress: Option<&crate::progress::ProgressLine>,
) -> CliResult<(Outcome, StatsSnapshot)> {
    let sys = actix::System::new();
    let out = sys.block_on(async move {
        let mut p = Pipeline::start_with(config, options, steps)?;
        if let Some(line) = progress {
            let config = Arc::new(p.config().clone());
            line.watch(crate::progress::Watched {
                stats: p.stats().clone(),
                counts: Some(feedline_actors::counting::RecordCounts::new(config.clone())),
                offset: config.resume.first_pass,
                passes: config.order.passes,
                config,
            });
        }
        // `--stop-after` reached; never fires when its sender is dropped.
        let stop_after = async {
            match stop_after.await {
                Ok(()) => (),
                Err(_) => futures::future::pending().await,
            }
        };
        let stopping = select(signal, Box::pin(stop_after));
        let outcome = match select(Box::pin(p.finished()), stopping).await {
            Either::Left((r, _)) => Outcome::Finished(r),
            Either::Right((Either::Left((Ok(sig), _)), _)) => {
                p.stop();
                Outcome::Interrupted(sig)
            }
            Either::Right((Either::Right(((), _)), _)) => {
                p.stop();
                Outcome::Stopped
            }
            // The signal thread is gone (it never ends): wait for the run.
            Either::Right((Either::Left((Err(_), _)), finished)) => {
                Outcome::Finished(finished.await)
            }
        };
        // After the join: every batch a device took (and traced) is counted.
        let stats = p.stats().clone();
        p.join();
        Ok::<_, PipelineError>((outcome, stats.snapshot()))
    })?;
    Ok(out)
}

/// Refuse output paths that would destroy something or each other, before
/// either is opened (exit code 2, nothing written):
///
/// - `--checkpoint`: the rule every face of the library applies before a
///   save ([`check_save_path`]): a path that exists and is not a regular
///   file (a device such as `/dev/full`, a FIFO, a directory: the checkpoint
///   is renamed over its path), one of the run's inputs (a data file, a list
///   file, the schema file: by device and inode, or canonical path), one in
///   a missing directory — the library's sentence after the flag;
/// - `--trace` (truncated, then written line by line): one of the inputs,
///   or a path that exists and is not a regular file — save a FIFO, written
///   line by line to whoever reads it;
/// - `--trace` and `--checkpoint` naming one file (through a link or
///   another spelling too: the checkpoint would replace the trace).
fn refuse_output_paths(
    trace: Option<&Path>,
    checkpoint: Option<&Path>,
    inputs: &InputFiles,
) -> CliResult<()> {
    if let Some(path) = trace {
        if let Some(input) = inputs.find(path) {
            return Err(CliError::usage(format!(
                "--trace {}: that is the input {}; writing it would destroy it: give another path",
                path.display(),
                input.display()
            )));
        }
        // A trace may go to a FIFO (a reader of it, `>(gzip > t.gz)`):
        // written line by line, nothing is replaced.
        let kind = std::fs::metadata(path)
            .ok()
            .and_then(|m| PathKind::of(&m))
            .filter(|&k| k != PathKind::Fifo);
        if let Some(kind) = kind {
            return Err(CliError::usage(format!(
                "--trace {}: that is {kind}, not a regular file; writing it would not keep a \
                 trace: give the path of a regular file",
                path.display(),
            )));
        }
    }
    if let Some(path) = checkpoint {
        check_save_path(path, inputs).map_err(|e| CliError::usage(format!("--checkpoint {e}")))?;
    }
    if let (Some(t), Some(c)) = (trace, checkpoint) {
        let same_inode = match (std::fs::metadata(t), std::fs::metadata(c)) {
            (Ok(a), Ok(b)) => same_file(&a, &b),
            _ => false,
        };
        if same_inode || resolved_output(t) == resolved_output(c) {
            return Err(CliError::usage(format!(
                "--trace {} and --checkpoint {} are the same file: each checkpoint would replace \
                 the trace; give two paths",
                t.display(),
                c.display()
            )));
        }
    }
    Ok(())
}

/// The file an output path would write: its symbolic links followed (a
/// dangling one too: writing creates its target), its folder
/// canonicalized.
fn resolved_output(path: &Path) -> PathBuf {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::read_link(&p) {
            Ok(to) => p = p.parent().map_or(to.clone(), |d| d.join(&to)),
            Err(_) => break,
        }
    }
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    match (std::fs::canonicalize(&dir), p.file_name()) {
        (Ok(d), Some(name)) => d.join(name),
        _ => p,
    }
}

/// Whether two files' metadata are of the same file (device and inode).
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

/// What the run held against its stated bound: the in-flight bound of the
/// settings for the records read (the larger of a record read and a record
/// made), the transform workers' part of it, and the process's peak RSS.
struct Memory {
    bound: usize,
    transform_workers: usize,
    workers: usize,
    peak_rss: Option<u64>,
}

impl Memory {
    fn of(config: &PipelineConfig, s: &StatsSnapshot) -> Memory {
        // With autotuning: the bound of the values it ended with.
        let tuned = s.autotune.as_ref().map(|a| a.applied(config));
        let config = tuned.as_ref().unwrap_or(config);
        let per = |stage: &feedline_actors::StageSnapshot| {
            (stage.payload_bytes / stage.records.max(1)) as usize
        };
        let payload = per(&s.readers).max(per(&s.batch_maker));
        let fields = config.inputs.schema.as_ref().map_or(1, |s| s.len());
        let record_bytes = payload + 8 * fields + std::mem::size_of::<feedline::Origin>();
        Memory {
            bound: config.in_flight_bound_bytes(record_bytes),
            transform_workers: config.transform_workers_bytes(),
            workers: if config.transforms.instance.is_some() {
                config.transforms.workers
            } else {
                0
            },
            peak_rss: crate::measure::peak_rss_bytes(),
        }
    }

    fn put(&self, map: &mut serde_json::Map<String, serde_json::Value>) {
        map.insert("in_flight_bound_bytes".into(), self.bound.into());
        map.insert(
            "transform_workers_bytes".into(),
            self.transform_workers.into(),
        );
        map.insert("peak_rss_bytes".into(), self.peak_rss.into());
    }

    fn print(&self, out: &mut Stdout) -> CliResult<()> {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let rss = match self.peak_rss {
            Some(b) => format!("peak RSS {:.1} MiB, ", mib(b)),
            None => String::new(),
        };
        let workers = if self.workers > 0 {
            format!(
                " (transform workers {} x {:.1} MiB)",
                self.workers,
                mib((self.transform_workers / self.workers) as u64)
            )
        } else {
            String::new()
        };
        writeln!(
            out,
            "memory: {rss}in-flight bound {:.1} MiB{workers}",
            mib(self.bound as u64)
        )
    }
}

fn print_summary(s: &StatsSnapshot, out: &mut Stdout) -> CliResult<()> {
    // With packing the devices get packed batches of rows; the documents
    // packed into them are said beside them.
    let (batches, rows) = match &s.packing {
        Some(p) => (
            format!(
                "{} packed batches ({} documents in {} rows of {} tokens)",
                s.batches, p.counts.documents, p.counts.rows, p.length
            ),
            "   rows",
        ),
        None => (format!("{} batches", s.batches), "records"),
    };
    writeln!(
        out,
        "{} records, {batches}, {} passes in {:.3} s: {:.0} records/s",
        s.readers.records, s.passes_done, s.elapsed_s, s.readers.records_per_s
    )?;
    writeln!(out, "device  batches  {rows}   busy%  waiting%")?;
    for d in &s.devices {
        let total = (d.busy_s + d.waiting_s).max(1e-12);
        writeln!(
            out,
            "{:>6} {:>8} {:>8} {:>7.1} {:>9.1}",
            d.device,
            d.batches,
            d.records,
            100.0 * d.busy_s / total,
            100.0 * d.waiting_s / total
        )?;
    }
    if s.bad_records > 0 {
        writeln!(out, "skipped bad records: {}", s.bad_records)?;
    }
    if s.equalize_dropped + s.equalize_padded > 0 {
        writeln!(
            out,
            "ranks equalized: {} instances dropped, {} repeated as padding",
            s.equalize_dropped, s.equalize_padded
        )?;
    }
    if s.reader_restarts > 0 {
        writeln!(out, "readers replaced: {}", s.reader_restarts)?;
    }
    if let Some(p) = &s.packing {
        let c = &p.counts;
        writeln!(
            out,
            "packing (L = {}): fill {:.2}% ({} tokens in {} rows, {} padding tokens), {} documents, {} of at most L cut, {} longer split, {} truncated, {} dropped",
            p.length,
            100.0 * p.fill,
            c.tokens,
            c.rows,
            c.padding_tokens,
            c.documents,
            c.documents_cut,
            c.long_split,
            c.long_truncated,
            c.long_dropped
        )?;
        if c.equalize_padding_rows + c.equalize_dropped_rows > 0 {
            writeln!(
                out,
                "packed rows equalized: {} padding rows added, {} rows dropped ({} tokens)",
                c.equalize_padding_rows, c.equalize_dropped_rows, c.equalize_dropped_tokens
            )?;
        }
    }
    if let Some(a) = &s.autotune {
        writeln!(out, "{}", a.summary_line())?;
    }
    writeln!(out, "{}", s.summary_line())
}
