//! `feedline bench`: passes of the loader into a consumer that touches every
//! batch; records/s, payload bytes/s, CPU seconds, peak RSS, start-up and
//! first-batch latency and per-stage busy time.
//!
//! Three ways to run a pass:
//! - default: a fresh [`Loader`] per pass (start-up, all threads and the
//!   pass's teardown included), as the peers build a fresh pipeline
//!   iterator per epoch;
//! - `--multi-pass`: one loader for all passes, each pass timed from the end
//!   of the previous one to its end-of-pass marker (the next pass is read
//!   ahead while the previous one drains, as in a training run);
//! - `--single-thread`: the core crate's single-thread path
//!   ([`feedline::reader::batches`]) with the same settings, the baseline the
//!   actor pipeline is measured against.
//!
//! With `--peers-dataset A|B` it joins the table of the peers' harness
//! (`/work/shared/peers`): the files and the expected checksums come from
//! the `manifest.json` that `gen_data.py` writes, and every pass prints one
//! `RESULT {json}` line as `common.py`'s `run_passes` does, with the
//! exactly-once `check` (record count, sum of labels, probe sum).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use feedline::plan::{expand_inputs, PassPlan};
use feedline::reader::{batches, BatchesConfig};
use feedline::shuffle::ShuffleConfig;
use feedline::{Array, Batch, Schema};
use feedline_actors::{Loader, PipelineConfig, Popped, StatsSnapshot};
use serde_json::{json, Map, Value};

use crate::files::AnyResult;
use crate::run::PipelineArgs;

#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pipeline: PipelineArgs,
    /// Print one JSON object per pass.
    #[arg(long)]
    json: bool,
    /// Untimed passes first.
    #[arg(long, default_value_t = 0)]
    warmup: usize,
    /// Timed passes.
    #[arg(long, default_value_t = 1)]
    repeats: usize,
    /// One loader for all passes (default: a fresh loader per pass).
    #[arg(long, conflicts_with = "single_thread")]
    multi_pass: bool,
    /// Time the core crate's single-thread path (`feedline::reader::batches`)
    /// with the same shuffle, batch and chunk settings instead of the actors.
    #[arg(long)]
    single_thread: bool,
    /// Sleep this long per batch in the consumer (a slow trainer).
    #[arg(long, default_value_t = 0.0)]
    consumer_sleep_ms: f64,
    /// Join the peers' harness: read dataset A (small) or B (large) of
    /// gen_data.py (files from its manifest.json, no file arguments), check
    /// every pass against the manifest and print `RESULT {json}` lines.
    #[arg(long, value_parser = ["A", "B"])]
    peers_dataset: Option<String>,
    /// Directory of the peers' data (default: $PEERS_DATA or /tmp/peers/data).
    #[arg(long)]
    peers_data: Option<PathBuf>,
    /// Variant name in the RESULT lines (default: from the settings).
    #[arg(long)]
    variant: Option<String>,
}

/// CPU seconds (user + system) of this process so far.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the struct we pass; RUSAGE_SELF is valid.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return f64::NAN;
    }
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// A `/proc/self/status` value in kB, as bytes.
fn status_bytes(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status_value(&status, key)
}

/// The value of `key` (e.g. `"VmRSS:"`, in kB) in the text of a status file, as bytes.
fn status_value(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Peak resident set size of the process so far (VmHWM), bytes.
fn peak_rss_bytes() -> Option<u64> {
    status_bytes("VmHWM:")
}

/// Resident set size now (VmRSS), bytes.
fn rss_bytes() -> Option<u64> {
    status_bytes("VmRSS:")
}

/// Samples `/proc/self/status` every 10 ms on a thread of its own: the
/// largest resident set, and its anonymous and file-backed parts, seen
/// during a pass (mapped input files count in RSS as file pages). VmHWM is
/// not reset per pass (that would also reset the `ru_maxrss` that the
/// harness's `/usr/bin/time -v` reports).
struct RssSampler {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<[u64; 3]>>,
}

impl RssSampler {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("bench-rss".into())
            .spawn(move || {
                let mut peak = [0u64; 3];
                loop {
                    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
                    for (p, key) in peak.iter_mut().zip(["VmRSS:", "RssAnon:", "RssFile:"]) {
                        *p = (*p).max(status_value(&status, key).unwrap_or(0));
                    }
                    if flag.load(Ordering::Relaxed) {
                        return peak;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
            .ok();
        RssSampler { stop, handle }
    }

    /// Peak (total, anonymous, file) RSS in bytes while it ran.
    fn finish(mut self) -> (Option<u64>, Option<u64>, Option<u64>) {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take().map(|h| h.join()) {
            Some(Ok([t, a, f])) => (Some(t), Some(a), Some(f)),
            _ => (None, None, None),
        }
    }
}

/// Touch a batch as a consumer would: read one value of every instance of
/// every field (an order-independent checksum, so the work cannot be skipped).
fn touch(batch: &Batch) -> u64 {
    let mut sum = 0u64;
    for f in batch.fields() {
        let n = batch.len().max(1);
        sum = sum.wrapping_add(match &f.data {
            Array::F32(a) => a.as_slice().map_or(0, |s| {
                s.iter()
                    .step_by((s.len() / n).max(1))
                    .map(|x| x.to_bits() as u64)
                    .sum()
            }),
            Array::F64(a) => a.as_slice().map_or(0, |s| {
                s.iter()
                    .step_by((s.len() / n).max(1))
                    .map(|x| x.to_bits())
                    .sum()
            }),
            Array::I64(a) => a.as_slice().map_or(0, |s| {
                s.iter()
                    .step_by((s.len() / n).max(1))
                    .map(|&x| x as u64)
                    .sum()
            }),
            Array::I32(a) => a.as_slice().map_or(0, |s| {
                s.iter()
                    .step_by((s.len() / n).max(1))
                    .map(|&x| x as u64)
                    .sum()
            }),
            Array::U8(a) => a.as_slice().map_or(0, |s| {
                s.iter()
                    .step_by((s.len() / n).max(1))
                    .map(|&x| x as u64)
                    .sum()
            }),
            Array::Bool(a) => a.iter().filter(|&&b| b).count() as u64,
            Array::Bytes(b) => b.data().len() as u64,
        });
    }
    sum
}

/// The peers' datasets (gen_data.py).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PeersDataset {
    /// 1,048,576 × {x: 64 f32, y: i64}.
    A,
    /// 8,192 × {image: 224×224×3 u8, label: i64}.
    B,
}

impl PeersDataset {
    fn parse(s: &str) -> AnyResult<Self> {
        match s {
            "A" => Ok(PeersDataset::A),
            "B" => Ok(PeersDataset::B),
            other => Err(format!("--peers-dataset {other}: expected A or B").into()),
        }
    }

    fn name(self) -> &'static str {
        match self {
            PeersDataset::A => "A",
            PeersDataset::B => "B",
        }
    }

    /// The same schema as `feedline gen`'s presets (same field names).
    fn schema(self) -> Schema {
        feedline::gen::preset_schema(match self {
            PeersDataset::A => feedline::gen::Preset::Small,
            PeersDataset::B => feedline::gen::Preset::Large,
        })
    }

    /// The reference settings of the harness (common.py): shuffle, batch.
    fn reference(self) -> (usize, usize) {
        match self {
            PeersDataset::A => (10_000, 256),
            PeersDataset::B => (1_000, 32),
        }
    }
}

/// The order-independent sums a pass must reproduce (manifest `expected`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Sums {
    records: u64,
    label_sum: i128,
    probe_sum: u128,
}

/// What `manifest.json` says about one dataset.
#[derive(Debug)]
struct Manifest {
    files: Vec<String>,
    expected: Sums,
    payload_bytes_per_record: u64,
}

impl Manifest {
    fn load(dir: &Path, ds: PeersDataset) -> AnyResult<Self> {
        let path = dir.join("manifest.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("{}: {e} (run gen_data.py first)", path.display()))?;
        Self::parse(&text, dir, ds).map_err(|e| format!("{}: {e}", path.display()).into())
    }

    fn parse(text: &str, dir: &Path, ds: PeersDataset) -> Result<Self, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let m = v
            .get(ds.name())
            .ok_or_else(|| format!("no dataset {}", ds.name()))?;
        let files = m
            .get("files")
            .and_then(Value::as_array)
            .ok_or("no `files` list")?
            .iter()
            .map(|f| {
                f.as_str()
                    .map(|s| dir.join(s).to_string_lossy().into_owned())
                    .ok_or_else(|| format!("a file name that is not a string: {f}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if files.is_empty() {
            return Err("the manifest lists no files".into());
        }
        let e = m.get("expected").ok_or("no `expected` sums")?;
        let int = |k: &str| -> Result<i128, String> {
            let x = e.get(k).ok_or_else(|| format!("no expected `{k}`"))?;
            x.as_i64()
                .map(i128::from)
                .or_else(|| x.as_u64().map(i128::from))
                .ok_or_else(|| format!("expected `{k}` is not an integer: {x}"))
        };
        let records = u64::try_from(int("records")?).map_err(|e| e.to_string())?;
        let probe_sum = u128::try_from(int("probe_sum")?).map_err(|e| e.to_string())?;
        let payload_bytes_per_record = m
            .get("payload_bytes_per_record")
            .and_then(Value::as_u64)
            .ok_or("no `payload_bytes_per_record`")?;
        Ok(Manifest {
            files,
            expected: Sums {
                records,
                label_sum: int("label_sum")?,
                probe_sum,
            },
            payload_bytes_per_record,
        })
    }
}

/// Accumulates the peers' checksums over the batches of a pass (common.py's
/// `Checker`): records, the sum of the labels, and the probe — A: the u32 bit
/// pattern of `x[:, 0]`; B: pixels `[0,0,0]` and `[223,223,2]` of each image.
#[derive(Debug)]
struct Checker {
    ds: PeersDataset,
    sums: Sums,
    error: Option<String>,
}

impl Checker {
    fn new(ds: PeersDataset) -> Self {
        Checker {
            ds,
            sums: Sums::default(),
            error: None,
        }
    }

    fn update(&mut self, batch: &Batch) {
        if let Err(e) = self.try_update(batch) {
            self.error.get_or_insert(e);
        }
    }

    fn try_update(&mut self, batch: &Batch) -> Result<(), String> {
        let n = batch.len();
        let (feature, label) = match self.ds {
            PeersDataset::A => ("x", "y"),
            PeersDataset::B => ("image", "label"),
        };
        let labels = batch.i64(label).map_err(|e| e.to_string())?;
        let labels = labels.as_slice().ok_or("labels not contiguous")?;
        if labels.len() != n {
            return Err(format!("{} labels for {n} records", labels.len()));
        }
        self.sums.label_sum += labels.iter().map(|&l| l as i128).sum::<i128>();
        self.sums.records += n as u64;
        match self.ds {
            PeersDataset::A => {
                let x = batch.f32(feature).map_err(|e| e.to_string())?;
                let x = x.as_slice().ok_or("x not contiguous")?;
                if x.len() != n * 64 {
                    return Err(format!("x has {} values for {n} records", x.len()));
                }
                self.sums.probe_sum += x
                    .iter()
                    .step_by(64)
                    .map(|v| v.to_bits() as u128)
                    .sum::<u128>();
            }
            PeersDataset::B => {
                let img = batch.u8(feature).map_err(|e| e.to_string())?;
                let img = img.as_slice().ok_or("image not contiguous")?;
                let per = feedline::gen::LARGE_IMAGE_BYTES;
                if img.len() != n * per {
                    return Err(format!("image has {} bytes for {n} records", img.len()));
                }
                // [0,0,0] is byte 0 of an image, [223,223,2] its last byte.
                self.sums.probe_sum += img
                    .chunks_exact(per)
                    .map(|im| im[0] as u128 + im[per - 1] as u128)
                    .sum::<u128>();
            }
        }
        Ok(())
    }

    /// "ok", or "FAIL k=got!=expected …" as common.py says it.
    fn verdict(&self, expected: &Sums) -> String {
        if let Some(e) = &self.error {
            return format!("FAIL {e}");
        }
        let mut bad = Vec::new();
        if self.sums.records != expected.records {
            bad.push(format!(
                "records={}!={}",
                self.sums.records, expected.records
            ));
        }
        if self.sums.label_sum != expected.label_sum {
            bad.push(format!(
                "label_sum={}!={}",
                self.sums.label_sum, expected.label_sum
            ));
        }
        if self.sums.probe_sum != expected.probe_sum {
            bad.push(format!(
                "probe_sum={}!={}",
                self.sums.probe_sum, expected.probe_sum
            ));
        }
        if bad.is_empty() {
            "ok".into()
        } else {
            format!("FAIL {}", bad.join(" "))
        }
    }
}

/// How the consumer treats each batch.
struct Consumer {
    checker: Option<Checker>,
    touch: u64,
    sleep: Option<Duration>,
}

impl Consumer {
    fn batch(&mut self, b: &Batch) {
        match &mut self.checker {
            Some(c) => c.update(b),
            None => self.touch = self.touch.wrapping_add(touch(b)),
        }
        if let Some(d) = self.sleep {
            std::thread::sleep(d);
        }
    }
}

/// What one pass measured.
#[derive(Debug, Default)]
struct PassResult {
    records: u64,
    batches: u64,
    payload: u64,
    seconds: f64,
    startup: Option<f64>,
    first_batch: Option<f64>,
    cpu: f64,
    teardown: f64,
    peak_rss: Option<u64>,
    process_peak: Option<u64>,
    peak_anon: Option<u64>,
    peak_file: Option<u64>,
    rss_before: Option<u64>,
    stats: Option<StatsSnapshot>,
    touch: u64,
    check: Option<String>,
}

impl PassResult {
    fn add(&mut self, b: &Batch, t0: Instant) {
        if self.first_batch.is_none() {
            self.first_batch = Some(t0.elapsed().as_secs_f64());
        }
        self.records += b.len() as u64;
        self.payload += b.payload_bytes() as u64;
        self.batches += 1;
    }
}

/// The whole benchmark's settings, resolved.
struct Plan {
    config: PipelineConfig,
    schema: Option<Schema>,
    peers: Option<(PeersDataset, Manifest)>,
    mode: &'static str,
    variant: String,
}

/// Bytes as MiB, one decimal.
fn to_mib(bytes: u64) -> f64 {
    round(bytes as f64 / (1u64 << 20) as f64, 1)
}

fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

pub fn bench(args: BenchArgs) -> AnyResult<ExitCode> {
    let plan = resolve(&args)?;
    if args.repeats == 0 {
        return Err("--repeats must be at least 1".into());
    }
    let total = args.warmup + args.repeats;
    let sleep = (args.consumer_sleep_ms > 0.0)
        .then(|| Duration::from_secs_f64(args.consumer_sleep_ms / 1000.0));
    let consumer = || Consumer {
        checker: plan.peers.as_ref().map(|(ds, _)| Checker::new(*ds)),
        touch: 0,
        sleep,
    };
    let results: Vec<PassResult> = if args.multi_pass {
        multi_pass(&plan, total, consumer)?
    } else {
        let mut out = Vec::with_capacity(total);
        for i in 0..total {
            let mut c = consumer();
            let mut r = if args.single_thread {
                single_thread_pass(&plan, i as u64, &mut c)?
            } else {
                fresh_loader_pass(&plan, i as u64, &mut c)?
            };
            finish_check(&plan, &mut r, &c);
            report(&args, &plan, i, &r)?;
            out.push(r);
        }
        out
    };
    if args.multi_pass {
        for (i, r) in results.iter().enumerate() {
            report(&args, &plan, i, r)?;
        }
    }
    let failed = results
        .iter()
        .any(|r| r.check.as_deref().is_some_and(|c| c != "ok"));
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Settle the files, schema, settings and names.
fn resolve(args: &BenchArgs) -> AnyResult<Plan> {
    let mut config = args.pipeline.config(1)?;
    let peers = match &args.peers_dataset {
        Some(ds) => {
            let ds = PeersDataset::parse(ds)?;
            let dir = args.peers_data.clone().unwrap_or_else(|| {
                PathBuf::from(
                    std::env::var("PEERS_DATA").unwrap_or_else(|_| "/tmp/peers/data".into()),
                )
            });
            let m = Manifest::load(&dir, ds)?;
            if !config.files.is_empty() {
                return Err(
                    "--peers-dataset takes its files from the manifest: give no files".into(),
                );
            }
            config.files = m.files.clone();
            if config.schema.is_none() {
                config.schema = Some(ds.schema());
            }
            let (shuffle, batch) = ds.reference();
            let batch_now = match &config.batch {
                feedline::batcher::BatchPolicy::Fixed(n) => Some(*n),
                _ => None,
            };
            if config.shuffle != shuffle || batch_now != Some(batch) {
                eprintln!(
                    "[feedline] note: dataset {} reference settings are shuffle {shuffle} / batch {batch}; this run uses shuffle {} / batch {:?}",
                    ds.name(),
                    config.shuffle,
                    batch_now
                );
            }
            Some((ds, m))
        }
        None => {
            if config.files.is_empty() && config.sets.is_empty() {
                return Err(
                    "no input files (give files, globs or @list, or --peers-dataset)".into(),
                );
            }
            None
        }
    };
    config.passes = if args.multi_pass {
        (args.warmup + args.repeats) as u64
    } else {
        1
    };
    let mode = if args.single_thread {
        "single-thread"
    } else if args.multi_pass {
        "multi-pass"
    } else {
        "fresh-loader"
    };
    let schema = if args.single_thread {
        if !config.sets.is_empty() {
            return Err(
                "--single-thread reads one list of files; --set is not supported there".into(),
            );
        }
        if config.format.is_some() {
            return Err("--single-thread reads files by their extension or FORMAT: prefix; --format is not supported there".into());
        }
        let files = expand_inputs(&config.files)?;
        config.files = files;
        Some(match &config.schema {
            Some(s) => s.clone(),
            None => config
                .registry
                .infer_schema(&config.files[0], config.format.as_deref(), 64)?,
        })
    } else {
        if config.schema.is_none() && config.sets.is_empty() {
            // Once, before the timed passes, as for the single-thread path:
            // a fresh pipeline per pass would otherwise infer it every pass.
            let files = expand_inputs(&config.files)?;
            let first = files.first().ok_or("no input files")?;
            let schema = config
                .registry
                .infer_schema(first, config.format.as_deref(), 64)?;
            eprintln!("[feedline] schema inferred from {first} (before timing): {schema}");
            config.schema = Some(schema);
        }
        None
    };
    let variant = args.variant.clone().unwrap_or_else(|| {
        let mut v = if args.single_thread {
            "single_thread".to_string()
        } else {
            format!("r{}", config.readers)
        };
        v.push_str(&format!("_s{}_b{}", config.shuffle, batch_size(&config)));
        if config.deterministic {
            v.push_str("_det");
        }
        if config.chunk_records != PipelineConfig::default().chunk_records {
            v.push_str(&format!("_cr{}", config.chunk_records));
        }
        if let Some(m) = config.min_pool {
            v.push_str(&format!("_minpool{m}"));
        }
        if config.capacity != PipelineConfig::default().capacity {
            v.push_str(&format!("_cap{}", config.capacity));
        }
        if args.multi_pass {
            v.push_str("_multipass");
        }
        if !config.open.verify_checksums {
            v.push_str("_nocrc");
        } else if !config.open.defer_checksums {
            v.push_str("_crc_on_read");
        }
        if args.consumer_sleep_ms > 0.0 {
            v.push_str(&format!("_sleep{}ms", args.consumer_sleep_ms));
        }
        v
    });
    Ok(Plan {
        config,
        schema,
        peers,
        mode,
        variant,
    })
}

fn batch_size(config: &PipelineConfig) -> String {
    match &config.batch {
        feedline::batcher::BatchPolicy::Fixed(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

/// One pass through a loader built for it (start-up and teardown included).
fn fresh_loader_pass(plan: &Plan, pass: u64, c: &mut Consumer) -> AnyResult<PassResult> {
    let mut config = plan.config.clone();
    // A new pipeline per epoch, as the peers do; a new shuffle each time.
    config.seed = plan.config.seed.wrapping_add(pass);
    let mut r = PassResult {
        rss_before: rss_bytes(),
        ..PassResult::default()
    };
    let sampler = RssSampler::start();
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let loader = Loader::builder().config(config).build()?;
    r.startup = Some(t0.elapsed().as_secs_f64());
    let mut it = loader.into_iter();
    for d in &mut it {
        let d = d?;
        r.add(&d.batch, t0);
        c.batch(&d.batch);
    }
    r.seconds = t0.elapsed().as_secs_f64();
    r.stats = Some(it.stats());
    let t1 = Instant::now();
    drop(it);
    r.teardown = t1.elapsed().as_secs_f64();
    r.cpu = cpu_seconds() - cpu0;
    (r.peak_rss, r.peak_anon, r.peak_file) = sampler.finish();
    r.process_peak = peak_rss_bytes();
    Ok(r)
}

/// One pass of the core crate's single-thread path with the same settings.
fn single_thread_pass(plan: &Plan, pass: u64, c: &mut Consumer) -> AnyResult<PassResult> {
    let cfg = &plan.config;
    let schema = plan.schema.clone().expect("resolved for single-thread");
    let mut r = PassResult {
        rss_before: rss_bytes(),
        ..PassResult::default()
    };
    let sampler = RssSampler::start();
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let seed = cfg.seed.wrapping_add(pass);
    let files = PassPlan::new(cfg.files.clone())
        .seed(seed)
        .shuffle_files(cfg.shuffle_files)
        .shard(cfg.shard)
        .shard_by(cfg.shard_by);
    let reader = batches(
        cfg.registry.clone(),
        files,
        schema,
        cfg.open.clone(),
        BatchesConfig {
            shuffle: ShuffleConfig {
                pool_size: cfg.shuffle,
                min_pool_size: cfg.min_pool,
                max_bytes: cfg.shuffle_bytes,
                seed,
            },
            policy: cfg.batch.clone(),
            drop_last: cfg.drop_last,
            chunk_rows: cfg.chunk_records,
            chunk_bytes: cfg.chunk_bytes,
        },
    )?;
    r.startup = Some(t0.elapsed().as_secs_f64());
    for b in reader.read_pass(0) {
        let b = b?;
        r.add(&b, t0);
        c.batch(&b);
    }
    r.seconds = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    drop(reader);
    r.teardown = t1.elapsed().as_secs_f64();
    r.cpu = cpu_seconds() - cpu0;
    (r.peak_rss, r.peak_anon, r.peak_file) = sampler.finish();
    r.process_peak = peak_rss_bytes();
    Ok(r)
}

/// All passes through one loader; pass `k` ends at its end-of-pass marker.
fn multi_pass(
    plan: &Plan,
    total: usize,
    consumer: impl Fn() -> Consumer,
) -> AnyResult<Vec<PassResult>> {
    let mut out = Vec::with_capacity(total);
    let mut sampler = RssSampler::start();
    let mut cpu0 = cpu_seconds();
    let t_start = Instant::now();
    let loader = Loader::builder().config(plan.config.clone()).build()?;
    let startup = t_start.elapsed().as_secs_f64();
    let mut events = loader.device_iter(0);
    let mut t0 = t_start;
    let mut r = PassResult {
        startup: Some(startup),
        rss_before: rss_bytes(),
        ..PassResult::default()
    };
    let mut c = consumer();
    loop {
        match events.next_event()? {
            Popped::Batch(d) => {
                r.add(&d.batch, t0);
                c.batch(&d.batch);
            }
            Popped::EndOfPass(_) => {
                let now = Instant::now();
                r.seconds = (now - t0).as_secs_f64();
                r.cpu = cpu_seconds() - cpu0;
                r.process_peak = peak_rss_bytes();
                r.stats = Some(loader.stats());
                (r.peak_rss, r.peak_anon, r.peak_file) =
                    std::mem::replace(&mut sampler, RssSampler::start()).finish();
                finish_check(plan, &mut r, &c);
                out.push(std::mem::take(&mut r));
                r.rss_before = rss_bytes();
                c = consumer();
                cpu0 = cpu_seconds();
                t0 = now;
            }
            Popped::EndOfData => break,
        }
    }
    let _ = sampler.finish();
    let t1 = Instant::now();
    drop(events);
    drop(loader);
    if let Some(last) = out.last_mut() {
        last.teardown = t1.elapsed().as_secs_f64();
    }
    if out.len() != total {
        return Err(format!("{} passes delivered, {total} expected", out.len()).into());
    }
    Ok(out)
}

fn finish_check(plan: &Plan, r: &mut PassResult, c: &Consumer) {
    r.touch = c.touch;
    if let (Some((_, m)), Some(ch)) = (&plan.peers, &c.checker) {
        r.check = Some(ch.verdict(&m.expected));
    }
}

/// Bytes one record holds in flight: payload, one end offset per field, origin.
fn record_memory_bytes(plan: &Plan, r: &PassResult) -> usize {
    let payload = match &plan.peers {
        Some((_, m)) => m.payload_bytes_per_record as usize,
        None => (r.payload / r.records.max(1)) as usize,
    };
    let fields = plan
        .config
        .schema
        .as_ref()
        .or(plan.schema.as_ref())
        .map_or(1, |s| s.len());
    payload + 8 * fields + std::mem::size_of::<feedline::Origin>()
}

fn report(args: &BenchArgs, plan: &Plan, i: usize, r: &PassResult) -> AnyResult<()> {
    let phase = if i < args.warmup { "warmup" } else { "timed" };
    let run = if i < args.warmup { i } else { i - args.warmup };
    let mib = (1u64 << 20) as f64;
    let rec_bytes = record_memory_bytes(plan, r);
    let bound = plan.config.in_flight_bound_bytes(rec_bytes);
    let mut m = Map::new();
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    if let Some((ds, man)) = &plan.peers {
        put("loader", json!("feedline"));
        put("variant", json!(plan.variant));
        put("dataset", json!(ds.name()));
        put("phase", json!(phase));
        put("run", json!(run));
        put("records", json!(r.records));
        put("batches", json!(r.batches));
        put("seconds", json!(round(r.seconds, 4)));
        put(
            "records_per_s",
            json!(round(r.records as f64 / r.seconds, 1)),
        );
        put(
            "payload_mb_per_s",
            json!(round(
                (r.records * man.payload_bytes_per_record) as f64 / r.seconds / 1e6,
                2
            )),
        );
        put("cpu_seconds", json!(round(r.cpu, 2)));
        put("teardown_seconds", json!(round(r.teardown, 3)));
        put(
            "first_batch_seconds",
            json!(round(r.first_batch.unwrap_or(0.0), 3)),
        );
        put(
            "tree_rss_peak_mb",
            json!(round(r.peak_rss.unwrap_or(0) as f64 / mib, 1)),
        );
        put("check", json!(r.check.clone().unwrap_or_default()));
        put("version", json!(env!("CARGO_PKG_VERSION")));
    } else {
        put("phase", json!(phase));
        put("run", json!(run));
        put("records", json!(r.records));
        put("batches", json!(r.batches));
        put("seconds", json!(r.seconds));
        put("records_per_s", json!(r.records as f64 / r.seconds));
        put("payload_bytes", json!(r.payload));
        put("payload_bytes_per_s", json!(r.payload as f64 / r.seconds));
        put("cpu_seconds", json!(r.cpu));
        put("peak_rss_bytes", json!(r.peak_rss));
        put("process_peak_rss_bytes", json!(r.process_peak));
        put("first_batch_s", json!(r.first_batch));
        put("teardown_s", json!(r.teardown));
        put("checksum", json!(r.touch));
    }
    // Extras (summarize.py ignores them).
    put("mode", json!(plan.mode));
    put("startup_seconds", json!(r.startup.map(|s| round(s, 4))));
    put(
        "first_batch_ms",
        json!(r.first_batch.map(|s| round(s * 1e3, 2))),
    );
    put("readers", json!(plan.config.readers));
    put("shuffle", json!(plan.config.shuffle));
    put("batch", json!(batch_size(&plan.config)));
    put("capacity", json!(plan.config.capacity));
    put("deterministic", json!(plan.config.deterministic));
    put("verify_checksums", json!(plan.config.open.verify_checksums));
    put("defer_checksums", json!(plan.config.open.defer_checksums));
    put("consumer_sleep_ms", json!(args.consumer_sleep_ms));
    put("rss_before_mb", json!(r.rss_before.map(to_mib)));
    put("peak_rss_mb", json!(r.peak_rss.map(to_mib)));
    put("process_peak_rss_mb", json!(r.process_peak.map(to_mib)));
    put("peak_rss_anon_mb", json!(r.peak_anon.map(to_mib)));
    put("peak_rss_file_mb", json!(r.peak_file.map(to_mib)));
    put("in_flight_bound_mb", json!(round(bound as f64 / mib, 1)));
    put(
        "rss_within_bound_plus_64mib",
        json!(r.peak_rss.map(|p| p <= bound as u64 + (64 << 20))),
    );
    put(
        "anon_rss_within_bound_plus_64mib",
        json!(r.peak_anon.map(|p| p <= bound as u64 + (64 << 20))),
    );
    if let Some(s) = &r.stats {
        put("readers_busy", json!(round(s.readers.busy, 3)));
        put(
            "shuffle_collate_busy",
            json!(round(s.shuffle_batch.busy, 3)),
        );
        put(
            "shuffle_collate_blocked",
            json!(round(s.shuffle_batch.blocked, 3)),
        );
        put(
            "feed_queue_mean_depth",
            json!(round(s.feed_queue_mean_depth, 2)),
        );
        put("bottleneck", json!(s.bottleneck));
    }
    let obj = Value::Object(m);
    if let Some((ds, man)) = &plan.peers {
        println!("RESULT {}", python_json(&obj));
        eprintln!(
            "[feedline/{}/{}] {phase} {run}: {:.2}s {:.0} rec/s {:.1} MB/s cpu {:.1}s start-up {:.1}ms first-batch {:.1}ms teardown {:.2}s peak RSS {:.0} MiB (anon {:.0}, file {:.0}; bound+64 {:.0}) {}",
            plan.variant,
            ds.name(),
            r.seconds,
            r.records as f64 / r.seconds,
            (r.records * man.payload_bytes_per_record) as f64 / r.seconds / 1e6,
            r.cpu,
            r.startup.unwrap_or(0.0) * 1e3,
            r.first_batch.unwrap_or(0.0) * 1e3,
            r.teardown,
            r.peak_rss.unwrap_or(0) as f64 / mib,
            r.peak_anon.unwrap_or(0) as f64 / mib,
            r.peak_file.unwrap_or(0) as f64 / mib,
            bound as f64 / mib + 64.0,
            r.check.as_deref().unwrap_or("")
        );
    } else if args.json {
        println!("{obj}");
    } else {
        println!(
            "[{phase} {run}] {} records, {} batches in {:.3} s: {:.0} records/s, {:.1} MB/s payload",
            r.records,
            r.batches,
            r.seconds,
            r.records as f64 / r.seconds,
            r.payload as f64 / r.seconds / 1e6
        );
        println!(
            "cpu {:.2} s ({:.0}% of one core), peak RSS {:.1} MiB (in-flight bound {:.1} MiB), start-up {:.1} ms, first batch {:.1} ms",
            r.cpu,
            100.0 * r.cpu / r.seconds,
            r.peak_rss.unwrap_or(0) as f64 / mib,
            bound as f64 / mib,
            r.startup.unwrap_or(f64::NAN) * 1e3,
            r.first_batch.unwrap_or(f64::NAN) * 1e3
        );
        if let Some(s) = &r.stats {
            println!(
                "readers busy {:.0}% each, shuffle/collate busy {:.0}% (blocked on the queue {:.0}%), bottleneck: {}",
                100.0 * s.readers.busy,
                100.0 * s.shuffle_batch.busy,
                100.0 * s.shuffle_batch.blocked,
                s.bottleneck
            );
        }
    }
    Ok(())
}

/// JSON as Python's `json.dumps(obj, sort_keys=True)` writes it: keys
/// sorted, `", "` and `": "` separators (scalars and flat objects).
fn python_json(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}: {}", Value::String(k.clone()), python_json(&m[k])))
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(python_json).collect::<Vec<_>>().join(", ")
        ),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use feedline::{collate, Chunk, Instance, Origin, SourceId, Values};

    fn batch_a(rows: &[(Vec<f32>, i64)]) -> Batch {
        let schema = PeersDataset::A.schema();
        let mut chunk = Chunk::new(&schema);
        for (i, (x, y)) in rows.iter().enumerate() {
            let o = Origin::new(SourceId::intern("mem-a"), i as u64);
            let inst = Instance::new(
                &schema,
                vec![Values::F32(x.clone()), Values::I64(vec![*y])],
                o,
            )
            .unwrap();
            chunk.push_instance(&inst);
        }
        collate(&schema, (0..rows.len()).map(|i| (&chunk, i))).unwrap()
    }

    #[test]
    fn checker_a_sums_labels_and_the_bits_of_the_first_x() {
        let mut x0 = vec![0.0f32; 64];
        x0[0] = 1.5;
        x0[1] = 99.0; // not the probe
        let mut x1 = vec![0.0f32; 64];
        x1[0] = -2.0;
        let b = batch_a(&[(x0, 7), (x1, 993)]);
        let mut c = Checker::new(PeersDataset::A);
        c.update(&b);
        c.update(&b);
        let probe = 2 * (1.5f32.to_bits() as u128 + (-2.0f32).to_bits() as u128);
        let want = Sums {
            records: 4,
            label_sum: 2 * (7 + 993),
            probe_sum: probe,
        };
        assert_eq!(c.sums, want);
        assert_eq!(c.verdict(&want), "ok");
        let wrong = Sums { records: 5, ..want };
        assert_eq!(c.verdict(&wrong), "FAIL records=4!=5");
    }

    #[test]
    fn checker_b_probes_first_and_last_byte_of_each_image() {
        let schema = PeersDataset::B.schema();
        let per = feedline::gen::LARGE_IMAGE_BYTES;
        let mut chunk = Chunk::new(&schema);
        for (i, (first, last, label)) in [(3u8, 250u8, 5i64), (200, 1, 10)].iter().enumerate() {
            let mut img = vec![77u8; per];
            img[0] = *first;
            img[per - 1] = *last;
            let o = Origin::new(SourceId::intern("mem-b"), i as u64);
            let inst = Instance::new(&schema, vec![Values::U8(img), Values::I64(vec![*label])], o)
                .unwrap();
            chunk.push_instance(&inst);
        }
        let b = collate(&schema, (0..2).map(|i| (&chunk, i))).unwrap();
        let mut c = Checker::new(PeersDataset::B);
        c.update(&b);
        assert_eq!(
            c.sums,
            Sums {
                records: 2,
                label_sum: 15,
                probe_sum: 3 + 250 + 200 + 1
            }
        );
    }

    #[test]
    fn checker_reports_a_batch_of_the_wrong_schema() {
        let b = batch_a(&[(vec![0.0; 64], 1)]);
        let mut c = Checker::new(PeersDataset::B);
        c.update(&b);
        let v = c.verdict(&Sums::default());
        assert!(v.starts_with("FAIL ") && v.contains("label"), "{v}");
    }

    #[test]
    fn manifest_gives_paths_sums_and_payload() {
        let text = r#"{"seed": 1, "A": {"files": ["small-00000.tfrecord", "small-00001.tfrecord"],
            "expected": {"records": 10, "label_sum": 4500, "probe_sum": 18446744073709551615},
            "payload_bytes_per_record": 264}}"#;
        let m = Manifest::parse(text, Path::new("/d"), PeersDataset::A).unwrap();
        assert_eq!(
            m.files,
            ["/d/small-00000.tfrecord", "/d/small-00001.tfrecord"]
        );
        assert_eq!(m.expected.records, 10);
        assert_eq!(m.expected.label_sum, 4500);
        assert_eq!(m.expected.probe_sum, u64::MAX as u128);
        assert_eq!(m.payload_bytes_per_record, 264);
        let e = Manifest::parse(text, Path::new("/d"), PeersDataset::B).unwrap_err();
        assert!(e.contains("no dataset B"), "{e}");
        let e = Manifest::parse(r#"{"A": {"files": []}}"#, Path::new("/d"), PeersDataset::A)
            .unwrap_err();
        assert!(e.contains("no files"), "{e}");
    }

    #[test]
    fn status_values_are_read_in_bytes() {
        let status = "Name:\tfeedline\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nRssAnon:\t 512 kB\n";
        assert_eq!(status_value(status, "VmRSS:"), Some(1 << 20));
        assert_eq!(status_value(status, "RssAnon:"), Some(512 << 10));
        assert_eq!(status_value(status, "RssFile:"), None);
        assert!(
            rss_bytes().is_some_and(|b| b > 0),
            "this process has an RSS"
        );
    }

    #[test]
    fn python_json_sorts_keys_and_spaces_separators() {
        let v = json!({"b": 1.5, "a": "x", "c": null, "d": true});
        assert_eq!(
            python_json(&v),
            r#"{"a": "x", "b": 1.5, "c": null, "d": true}"#
        );
    }
}
