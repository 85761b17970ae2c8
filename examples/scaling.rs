//! Scaling reader workers per file set when storage is slow.
//!
//! The same files are read through a storage wrapper that adds latency per
//! file open and per MiB read (as object storage would), with 1, 2, 4, 8 and
//! 16 readers; the example prints records/s and the speed-up per reader
//! count. Readers are OS threads that mostly wait on storage, so they scale
//! past the core count.
//!
//! Then two file sets are mixed by weight, each with its own reader count: the
//! training files and a second source on slower storage, weighted 3 : 1. The
//! mix is exact, so the set that cannot keep up with its share limits the
//! whole stream — giving it more readers (not the other set) is what helps.
//!
//! ```text
//! cargo run --release --example scaling
//! cargo run --release --example scaling -- --open-ms 20 --mib-ms 20 --readers 1,2,4,8,16 --plot scaling.svg
//! cargo run --release --example scaling -- --mix 4:1,4:3,8:2,8:6 --extra-weight 1 --train-weight 3
//! ```

#[path = "common/plot.rs"]
mod plot;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use feedline::format::{Format, OpenOptions, RecordReader, Registry};
use feedline::synthetic::{generate, GenOptions, Preset};
use feedline::{Chunk, Record, SourceId};
use feedline_actors::{FileSet, Loader};

/// Scale feedline's readers on slow storage: records/s with 1 to 16 readers
/// through a wrapper that adds latency per file open and per MiB, then two
/// file sets mixed 3 : 1, each with its own readers.
#[derive(Parser)]
#[command(name = "scaling")]
struct Args {
    /// Input files (default: a generated small-preset set in a temporary directory).
    #[arg(long, num_args = 1..)]
    files: Vec<String>,
    /// Files to generate.
    #[arg(long, default_value_t = 32)]
    gen_files: usize,
    /// Records per generated file.
    #[arg(long, default_value_t = 4096)]
    gen_records: usize,
    /// Latency per file open, milliseconds.
    #[arg(long, default_value_t = 20.0)]
    open_ms: f64,
    /// Latency per MiB read, milliseconds.
    #[arg(long, default_value_t = 20.0)]
    mib_ms: f64,
    /// Reader counts to try.
    #[arg(long, default_value = "1,2,4,8,16", value_delimiter = ',')]
    readers: Vec<usize>,
    /// Mixed runs: readers of the training set and of the extra set, as
    /// `TRAIN:EXTRA` (empty: no mixed runs).
    #[arg(long, default_value = "4:1,4:3,8:2,8:6", value_delimiter = ',')]
    mix: Vec<String>,
    /// Weight of the training set in the mix.
    #[arg(long, default_value_t = 3.0)]
    train_weight: f64,
    /// Weight of the extra set in the mix.
    #[arg(long, default_value_t = 1.0)]
    extra_weight: f64,
    /// Extra-set files to generate (records per file as --gen-records).
    #[arg(long, default_value_t = 10)]
    extra_files: usize,
    /// How much slower the extra set's storage is (times the latencies).
    #[arg(long, default_value_t = 2.0)]
    extra_slowdown: f64,
    /// Draw records/s against readers (.svg or .png).
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// Slow storage: wraps a format, sleeping per open and per MiB of records read.
struct SlowStorage {
    name: String,
    inner: Arc<dyn Format>,
    open: Duration,
    per_mib: Duration,
}

impl Format for SlowStorage {
    fn name(&self) -> &str {
        &self.name
    }
    fn extensions(&self) -> &[&str] {
        &[]
    }
    fn open(&self, path: &Path, opts: &OpenOptions) -> feedline::Result<Box<dyn RecordReader>> {
        std::thread::sleep(self.open);
        Ok(Box::new(SlowReader {
            inner: self.inner.open(path, opts)?,
            per_mib: self.per_mib,
        }))
    }
}

struct SlowReader {
    inner: Box<dyn RecordReader>,
    per_mib: Duration,
}

impl SlowReader {
    fn pay(&self, bytes: usize) {
        std::thread::sleep(self.per_mib.mul_f64(bytes as f64 / (1u64 << 20) as f64));
    }
}

impl RecordReader for SlowReader {
    fn next_record(&mut self) -> feedline::Result<Option<Record>> {
        let r = self.inner.next_record()?;
        if let Some(rec) = &r {
            self.pay(
                rec.fields
                    .iter()
                    .map(|(_, t)| t.values.payload_bytes())
                    .sum(),
            );
        }
        Ok(r)
    }
    fn read_chunk(
        &mut self,
        chunk: &mut Chunk,
        max_records: usize,
        max_bytes: usize,
    ) -> feedline::Result<usize> {
        let before = chunk.payload_bytes();
        let r = self.inner.read_chunk(chunk, max_records, max_bytes);
        self.pay(chunk.payload_bytes() - before);
        r
    }
    fn next_index(&self) -> u64 {
        self.inner.next_index()
    }
    fn can_continue(&self) -> bool {
        self.inner.can_continue()
    }
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scaling: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let gen = |dir: &Path, files: usize| -> Result<Vec<String>, Box<dyn std::error::Error>> {
        std::fs::create_dir_all(dir)?;
        let mut opts = GenOptions::new(Preset::Small, dir);
        opts.files = Some(files);
        opts.records = Some(args.gen_records);
        Ok(generate(&opts)?
            .into_iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect())
    };
    let files: Vec<String> = if args.files.is_empty() {
        gen(&tmp.path().join("train"), args.gen_files)?
    } else {
        feedline::plan::expand_inputs(&args.files)?
    };
    let mut registry = Registry::with_builtin();
    let inner = registry.resolve(&files[0], None)?.0;
    let ms = |v: f64| Duration::from_secs_f64(v / 1e3);
    registry.register(Arc::new(SlowStorage {
        name: "slow".into(),
        inner: inner.clone(),
        open: ms(args.open_ms),
        per_mib: ms(args.mib_ms),
    }));
    let slow: Vec<String> = files.iter().map(|f| format!("slow:{f}")).collect();
    println!(
        "{} files behind storage with {} ms per open and {} ms per MiB; one pass per reader count",
        files.len(),
        args.open_ms,
        args.mib_ms
    );
    println!("readers   records/s   speed-up   per reader");
    let mut points = Vec::new();
    let mut base = None;
    for &readers in &args.readers {
        let loader = Loader::builder()
            .registry(registry.clone())
            .files(slow.clone())
            .readers(readers)
            .batch(256)
            .shuffle(10_000)
            .chunks_in_flight(2)
            .build()?;
        let t0 = Instant::now();
        let mut records = 0u64;
        for d in loader {
            records += d?.batch.len() as u64;
        }
        let rate = records as f64 / t0.elapsed().as_secs_f64();
        // Speed-up over the first reader count; "per reader": the speed-up
        // divided by the ideal (linear) one.
        let (r0, rate0) = *base.get_or_insert((readers, rate));
        let speedup = rate / rate0;
        println!(
            "{readers:>7} {rate:>11.0} {speedup:>9.2}× {:>11.2}",
            speedup / (readers as f64 / r0 as f64)
        );
        points.push((readers, rate));
    }
    let mut series = vec![("train".to_string(), points, true)];
    if !args.mix.is_empty() {
        let mixed = mix(&args, &tmp, &gen, &mut registry, inner, &slow)?;
        series.push((
            format!(
                "train + extra mixed {}:{} (x: all readers)",
                args.train_weight, args.extra_weight
            ),
            mixed,
            false,
        ));
    }
    if let Some(path) = &args.plot {
        plot::scaling(
            path,
            &series,
            &format!(
                "records/s by readers ({} ms/open, {} ms/MiB)",
                args.open_ms, args.mib_ms
            ),
        )?;
        println!("plot written to {}", path.display());
    }
    Ok(())
}

type Gen<'a> = dyn Fn(&Path, usize) -> Result<Vec<String>, Box<dyn std::error::Error>> + 'a;

/// The mixed runs: the training files and an extra set on slower storage,
/// each set with its own readers. Returns (all readers, records/s) per run.
fn mix(
    args: &Args,
    tmp: &tempfile::TempDir,
    gen: &Gen,
    registry: &mut Registry,
    inner: Arc<dyn Format>,
    train: &[String],
) -> Result<Vec<(usize, f64)>, Box<dyn std::error::Error>> {
    let runs: Vec<(usize, usize)> = args
        .mix
        .iter()
        .map(|m| {
            let parsed = m
                .split_once(':')
                .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)));
            match parsed {
                Some((a, b)) if a > 0 && b > 0 => Ok((a, b)),
                _ => Err(format!(
                    "--mix {m:?}: expected TRAIN:EXTRA reader counts, both at least 1"
                )),
            }
        })
        .collect::<Result<_, _>>()?;
    let extra_dir = tmp.path().join("extra");
    let extra = gen(&extra_dir, args.extra_files)?;
    let k = args.extra_slowdown;
    registry.register(Arc::new(SlowStorage {
        name: "slower".into(),
        inner,
        open: Duration::from_secs_f64(args.open_ms * k / 1e3),
        per_mib: Duration::from_secs_f64(args.mib_ms * k / 1e3),
    }));
    let extra_paths = extra.clone();
    let extra: Vec<String> = extra.iter().map(|f| format!("slower:{f}")).collect();
    let want = args.extra_weight / (args.extra_weight + args.train_weight);
    println!();
    println!(
        "two file sets mixed {}:{} — train ({} files) and extra ({} files, storage {k}× slower); one pass per reader split",
        args.train_weight,
        args.extra_weight,
        train.len(),
        extra.len()
    );
    println!(
        "readers (train+extra)   records/s   extra share, first half (want {:.1}%)   extra share of the pass",
        100.0 * want
    );
    let mut points = Vec::new();
    for (tr, er) in runs {
        let loader = Loader::builder()
            .registry(registry.clone())
            .file_set(
                FileSet::new("train", train.to_vec())
                    .readers(tr)
                    .weight(args.train_weight),
            )
            .file_set(
                FileSet::new("extra", extra.clone())
                    .readers(er)
                    .weight(args.extra_weight),
            )
            .batch(256)
            .shuffle(10_000)
            .chunks_in_flight(2)
            .build()?;
        // Which set each source belongs to, found once per file.
        let mut set_of: HashMap<SourceId, bool> = HashMap::new();
        let t0 = Instant::now();
        let (mut records, mut from_extra) = (0u64, 0u64);
        // Running totals after each batch, for the share over the first half.
        let mut running = Vec::new();
        for d in loader {
            let d = d?;
            let n = d.batch.len() as u64;
            let e = d
                .batch
                .origins()
                .iter()
                .filter(|o| {
                    *set_of.entry(o.source).or_insert_with(|| {
                        extra_paths
                            .iter()
                            .any(|p| o.source.name().ends_with(p.as_str()))
                    })
                })
                .count() as u64;
            records += n;
            from_extra += e;
            running.push((records, from_extra));
        }
        let rate = records as f64 / t0.elapsed().as_secs_f64();
        let half = running
            .iter()
            .find(|(r, _)| 2 * r >= records)
            .copied()
            .unwrap_or_default();
        println!(
            "{:>21} {rate:>11.0} {:>33.1}% {:>21.1}%",
            format!("{tr}+{er}"),
            100.0 * half.1 as f64 / half.0.max(1) as f64,
            100.0 * from_extra as f64 / records.max(1) as f64,
        );
        points.push((tr + er, rate));
    }
    Ok(points)
}
