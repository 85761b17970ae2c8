//! Scaling reader workers per file set when storage is slow.
//!
//! The same files are read through a storage wrapper that adds latency per
//! file open and per MiB read (as object storage would), with 1, 2, 4, 8 and
//! 16 readers; the example prints records/s and the speed-up per reader
//! count. Readers are OS threads that mostly wait on storage, so they scale
//! past the core count.
//!
//! ```text
//! cargo run --release --example scaling
//! cargo run --release --example scaling -- --open-ms 20 --mib-ms 20 --readers 1,2,4,8,16 --plot scaling.svg
//! ```

#[path = "common/plot.rs"]
mod plot;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use feedline::format::{Format, OpenOptions, RecordReader, Registry};
use feedline::gen::{generate, GenOptions, Preset};
use feedline::{Chunk, Record};
use feedline_actors::Loader;

/// Reader scaling on slow storage.
#[derive(Parser)]
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
    /// Draw records/s against readers (.svg or .png).
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// Slow storage: wraps a format, sleeping per open and per MiB of records read.
struct SlowStorage {
    inner: Arc<dyn Format>,
    open: Duration,
    per_mib: Duration,
}

impl Format for SlowStorage {
    fn name(&self) -> &str {
        "slow"
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
    let files: Vec<String> = if args.files.is_empty() {
        let mut opts = GenOptions::new(Preset::Small, tmp.path());
        opts.files = Some(args.gen_files);
        opts.records = Some(args.gen_records);
        generate(&opts)?
            .into_iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect()
    } else {
        feedline::plan::expand_inputs(&args.files)?
    };
    let mut registry = Registry::with_builtin();
    let inner = registry.resolve(&files[0], None)?.0;
    registry.register(Arc::new(SlowStorage {
        inner,
        open: Duration::from_secs_f64(args.open_ms / 1e3),
        per_mib: Duration::from_secs_f64(args.mib_ms / 1e3),
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
    if let Some(path) = &args.plot {
        plot::scaling(
            path,
            &[("train".to_string(), points.clone())],
            &format!(
                "records/s by readers ({} ms/open, {} ms/MiB)",
                args.open_ms, args.mib_ms
            ),
        )?;
        println!("plot written to {}", path.display());
    }
    Ok(())
}
