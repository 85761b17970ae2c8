//! Timing passes of the loader into a consumer, for `feedline bench` and
//! the peers harness adapter (`benches/peers.rs`, which includes this
//! file): records, payload bytes, seconds, CPU seconds, peak RSS (sampled),
//! start-up, first-batch and teardown times, and the pipeline's own
//! per-stage statistics. What the consumer does with each batch and how a
//! pass is reported are the caller's.
//!
//! Three ways to run a pass:
//! - default: a fresh [`Loader`] per pass (start-up, all threads and the
//!   pass's teardown included), as a training script that builds a fresh
//!   pipeline iterator per epoch;
//! - `--multi-pass`: one loader for all passes, each pass timed from the end
//!   of the previous one to its end-of-pass marker (the next pass is read
//!   ahead while the previous one drains, as in a training run);
//! - `--single-thread`: the core crate's single-thread path
//!   ([`feedline::reader::batches`]) with the same settings, the baseline the
//!   actor pipeline is measured against.

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

use crate::error::{CliError, CliResult};
use crate::output::Stderr;
use crate::pipeline_args::{count, millis, OnError, PipelineArgs};

/// How passes are timed.
#[derive(Args, Clone, Debug)]
pub struct MeasureArgs {
    /// Untimed passes first, 0..=10000.
    #[arg(long, default_value_t = 0, value_parser = count(0, 10_000))]
    pub warmup: usize,
    /// Timed passes, 1..=10000.
    #[arg(long, default_value_t = 1, value_parser = count(1, 10_000))]
    pub repeats: usize,
    /// One loader for all passes (default: a fresh loader per pass).
    #[arg(long, conflicts_with = "single_thread")]
    pub multi_pass: bool,
    /// Time the core crate's single-thread path (`feedline::reader::batches`)
    /// with the same shuffle, batch and chunk settings instead of the actors
    /// (no readers, feed queue, devices or file sets there).
    #[arg(long, conflicts_with_all = ["readers", "sets", "format", "capacity", "deterministic"])]
    pub single_thread: bool,
    /// Pause this long per batch in the consumer (a slow trainer), milliseconds.
    #[arg(long, value_parser = millis, allow_negative_numbers = true)]
    pub consumer_sleep_ms: Option<Duration>,
}

/// What the consumer does with each batch of a pass.
pub trait Consume {
    /// Take one batch.
    fn batch(&mut self, batch: &Batch);
    /// The loader the batches come from, before the first.
    fn loader(&mut self, _loader: &Loader) {}
    /// Batch `d` was taken (after [`batch`](Self::batch)): its pass and place.
    fn delivered(&mut self, _d: &feedline_actors::Delivered) {}
}

/// Touch a batch as a consumer would: read one value of every instance of
/// every field (an order-independent checksum, so the work cannot be skipped).
pub fn touch(batch: &Batch) -> u64 {
    fn strided<T: Copy>(s: Option<&[T]>, n: usize, f: impl Fn(T) -> u64) -> u64 {
        s.map_or(0, |s| {
            s.iter()
                .step_by((s.len() / n).max(1))
                .map(|&x| f(x))
                .fold(0u64, u64::wrapping_add)
        })
    }
    let n = batch.len().max(1);
    let mut sum = 0u64;
    for f in batch.fields() {
        sum = sum.wrapping_add(match &f.data {
            Array::F32(a) => strided(a.as_slice(), n, |x| x.to_bits() as u64),
            Array::F64(a) => strided(a.as_slice(), n, |x| x.to_bits()),
            Array::I64(a) => strided(a.as_slice(), n, |x| x as u64),
            Array::I32(a) => strided(a.as_slice(), n, |x| x as u64),
            Array::U8(a) => strided(a.as_slice(), n, |x| x as u64),
            Array::Bool(a) => a.iter().filter(|&&b| b).count() as u64,
            Array::Bytes(b) => b.data().len() as u64,
        });
    }
    sum
}

/// CPU seconds (user + system) of this process so far (NaN: unknown).
fn cpu_seconds() -> f64 {
    feedline_actors::autotune::process_cpu_seconds().unwrap_or(f64::NAN)
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
pub(crate) fn peak_rss_bytes() -> Option<u64> {
    status_bytes("VmHWM:")
}

/// Resident set size now (VmRSS), bytes.
fn rss_bytes() -> Option<u64> {
    status_bytes("VmRSS:")
}

/// Samples `/proc/self/status` every 10 ms on a thread of its own: the
/// largest resident set, and its anonymous and file-backed parts, seen
/// during a pass. VmHWM is not reset per pass (that would also reset the
/// `ru_maxrss` that the harness's `/usr/bin/time -v` reports).
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

/// What one pass measured.
#[derive(Debug, Default)]
pub struct PassResult {
    /// Records delivered.
    pub records: u64,
    /// Batches delivered.
    pub batches: u64,
    /// Payload bytes delivered.
    pub payload: u64,
    /// Wall-clock seconds of the pass.
    pub seconds: f64,
    /// Seconds to build the loader.
    pub startup: Option<f64>,
    /// Seconds to the first batch.
    pub first_batch: Option<f64>,
    /// CPU seconds of the pass.
    pub cpu: f64,
    /// Seconds to drop the loader.
    pub teardown: f64,
    /// Peak RSS sampled during the pass (total, anonymous, file-backed).
    pub peak_rss: Option<u64>,
    /// Anonymous part of the peak.
    pub peak_anon: Option<u64>,
    /// File-backed part of the peak.
    pub peak_file: Option<u64>,
    /// The process's peak RSS so far (VmHWM).
    pub process_peak: Option<u64>,
    /// RSS before the pass.
    pub rss_before: Option<u64>,
    /// The pipeline's statistics at the end of the pass (not single-thread).
    pub stats: Option<StatsSnapshot>,
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

    /// Records per second.
    pub fn records_per_s(&self) -> f64 {
        self.records as f64 / self.seconds
    }
}

/// The clocks of one pass: wall time from its start, CPU time, and the
/// RSS sampler; they fill in its [`PassResult`].
struct PassClock {
    r: PassResult,
    sampler: RssSampler,
    cpu0: f64,
    t0: Instant,
}

impl PassClock {
    /// Start the pass's clocks.
    fn start() -> Self {
        PassClock {
            r: PassResult {
                rss_before: rss_bytes(),
                ..PassResult::default()
            },
            sampler: RssSampler::start(),
            cpu0: cpu_seconds(),
            t0: Instant::now(),
        }
    }

    /// The loader is built: start-up time.
    fn started(&mut self) {
        self.r.startup = Some(self.t0.elapsed().as_secs_f64());
    }

    /// A batch arrived: count it, and hand it to the consumer.
    fn batch(&mut self, b: &Batch, c: &mut impl Consume) {
        self.r.add(b, self.t0);
        c.batch(b);
    }

    /// The last batch is in: the pass's time.
    fn stop(&mut self) {
        self.r.seconds = self.t0.elapsed().as_secs_f64();
    }

    /// Time `teardown`, then the CPU and memory of the whole pass.
    fn finish(mut self, teardown: impl FnOnce()) -> PassResult {
        let t1 = Instant::now();
        teardown();
        self.r.teardown = t1.elapsed().as_secs_f64();
        self.r.cpu = cpu_seconds() - self.cpu0;
        (self.r.peak_rss, self.r.peak_anon, self.r.peak_file) = self.sampler.finish();
        self.r.process_peak = peak_rss_bytes();
        self.r
    }
}

/// The whole benchmark's settings, resolved.
pub struct Plan {
    /// The pipeline's settings (inputs expanded, schema settled).
    pub config: PipelineConfig,
    /// `fresh-loader`, `multi-pass` or `single-thread`.
    pub mode: &'static str,
    /// How passes are timed.
    pub measure: MeasureArgs,
    /// Told which loader runs which passes (`bench`'s progress line).
    pub watch: Option<Box<dyn Watch>>,
}

/// Told which loader runs which passes, for a live display.
pub trait Watch {
    /// `loader` runs the plan's passes from `first` on, of `passes` in all.
    fn loader(&self, loader: &Loader, first: u64, passes: u64);
}

impl<T: Watch> Watch for Arc<T> {
    fn loader(&self, loader: &Loader, first: u64, passes: u64) {
        (**self).loader(loader, first, passes)
    }
}

impl Plan {
    /// Settle the files, schema and settings of a benchmark. `files` replaces
    /// the flags' input files (the harness adapter reads them from its
    /// manifest); `schema` is used when no --schema was given.
    pub fn resolve(
        pipeline: &PipelineArgs,
        measure: &MeasureArgs,
        files: Option<Vec<String>>,
        schema: Option<Schema>,
    ) -> CliResult<Plan> {
        let mut args = pipeline.clone();
        if let Some(files) = files {
            args.files = files;
        }
        let mut config = args.config()?;
        if config.inputs.schema.is_none() {
            config.inputs.schema = schema;
        }
        let total = measure.warmup + measure.repeats;
        config.order.passes = if measure.multi_pass { total as u64 } else { 1 };
        let mode = if measure.single_thread {
            if pipeline.on_error == OnError::Skip {
                return Err(CliError::usage(
                    "--on-error skip is not supported by --single-thread (its first bad record ends the pass): drop one of them",
                ));
            }
            if config.batching.equalize != feedline::plan::Equalize::Off {
                return Err(CliError::usage(
                    "--equalize is not supported by --single-thread: drop one of them",
                ));
            }
            if config.monitoring.metrics_addr.is_some() {
                return Err(CliError::usage(
                    "--metrics-addr is not supported by --single-thread (it runs no pipeline to serve the metrics of): drop one of them",
                ));
            }
            "single-thread"
        } else if measure.multi_pass {
            "multi-pass"
        } else {
            "fresh-loader"
        };
        if config.inputs.schema.is_none() && config.inputs.sets.is_empty() {
            // Once, before the timed passes: a fresh pipeline per pass
            // would otherwise infer it every pass.
            let files = expand_inputs(&config.inputs.files)?;
            let first = files
                .first()
                .ok_or_else(|| CliError::usage("the inputs name no files"))?;
            let schema = config.inputs.registry.infer_schema(
                first,
                config.inputs.format.as_deref(),
                feedline_actors::SCHEMA_SAMPLE_RECORDS,
            )?;
            writeln!(
                Stderr,
                "[feedline] schema inferred from {first} (before timing): {schema}"
            )?;
            config.inputs.schema = Some(schema);
        }
        if measure.single_thread {
            config.inputs.files = expand_inputs(&config.inputs.files)?;
        }
        Ok(Plan {
            config,
            mode,
            measure: measure.clone(),
            watch: None,
        })
    }

    /// Passes in all (warm-up and timed).
    pub fn passes(&self) -> usize {
        self.measure.warmup + self.measure.repeats
    }

    /// `warmup` or `timed`, and the pass's number within its phase.
    pub fn phase(&self, pass: usize) -> (&'static str, usize) {
        if pass < self.measure.warmup {
            ("warmup", pass)
        } else {
            ("timed", pass - self.measure.warmup)
        }
    }

    /// The batch setting, as text.
    pub fn batch_size(&self) -> String {
        match &self.config.batching.batch {
            feedline::batch_policy::BatchPolicy::Fixed(n) => n.to_string(),
            other => format!("{other:?}"),
        }
    }

    /// Run every pass, each into a fresh consumer from `consumer`, and hand
    /// each pass's result and consumer to `report` (after each pass; with
    /// `--multi-pass`, after the last, so that reporting does not take
    /// from the next pass's time).
    pub fn run<C: Consume>(
        &self,
        consumer: impl Fn() -> C,
        mut report: impl FnMut(usize, &PassResult, &C) -> CliResult<()>,
    ) -> CliResult<()> {
        let sleep = self.measure.consumer_sleep_ms.filter(|d| !d.is_zero());
        let consumer = || Pausing {
            inner: consumer(),
            sleep,
        };
        if self.measure.multi_pass {
            for (i, (r, c)) in self.multi_pass(consumer)?.iter().enumerate() {
                report(i, r, &c.inner)?;
            }
            return Ok(());
        }
        // A fresh loader per pass: one metrics server for them all, whose
        // counters go on from pass to pass.
        let metrics = match (
            &self.config.monitoring.metrics_addr,
            self.measure.single_thread,
        ) {
            (Some(addr), false) => Some(feedline_actors::MetricsServer::bind(addr)?),
            _ => None,
        };
        for i in 0..self.passes() {
            let mut c = consumer();
            let r = if self.measure.single_thread {
                self.single_thread_pass(i as u64, &mut c)?
            } else {
                self.fresh_loader_pass(i as u64, &mut c, metrics.as_ref())?
            };
            report(i, &r, &c.inner)?;
        }
        Ok(())
    }

    /// One pass through a loader built for it (start-up and teardown included).
    fn fresh_loader_pass(
        &self,
        pass: u64,
        c: &mut impl Consume,
        metrics: Option<&feedline_actors::MetricsServer>,
    ) -> CliResult<PassResult> {
        let mut config = self.config.clone();
        // A new pipeline per epoch, a new shuffle each time.
        config.order.seed = self.config.order.seed.wrapping_add(pass);
        let mut clock = PassClock::start();
        let mut builder = Loader::builder().config(config);
        if let Some(server) = metrics {
            builder = builder.metrics_server(server.clone());
        }
        let loader = builder.build()?;
        if let Some(w) = &self.watch {
            w.loader(&loader, pass, self.passes() as u64);
        }
        c.loader(&loader);
        clock.started();
        let mut it = loader.into_iter();
        for d in &mut it {
            let d = d?;
            clock.batch(&d.batch, c);
            c.delivered(&d);
        }
        clock.stop();
        clock.r.stats = Some(it.stats());
        Ok(clock.finish(|| drop(it)))
    }

    /// One pass of the core crate's single-thread path with the same settings.
    fn single_thread_pass(&self, pass: u64, c: &mut impl Consume) -> CliResult<PassResult> {
        let cfg = &self.config;
        let schema = cfg
            .inputs
            .schema
            .clone()
            .ok_or_else(|| CliError::usage("the single-thread path needs a schema"))?;
        let mut clock = PassClock::start();
        let seed = cfg.order.seed.wrapping_add(pass);
        let files = PassPlan::new(cfg.inputs.files.clone())
            .seed(seed)
            .shuffle_files(cfg.order.shuffle_files)
            .shard(cfg.inputs.shard)
            .shard_by(cfg.inputs.shard_by);
        let reader = batches(
            cfg.inputs.registry.clone(),
            files,
            schema,
            cfg.reading.open.clone(),
            BatchesConfig {
                shuffle: ShuffleConfig {
                    pool_size: cfg.order.shuffle,
                    min_pool_size: cfg.order.min_pool,
                    max_bytes: cfg.order.shuffle_bytes,
                    seed,
                },
                policy: cfg.batching.batch.clone(),
                drop_last: cfg.batching.drop_last,
                chunk_rows: cfg.reading.chunk_records,
                chunk_bytes: cfg.reading.chunk_bytes,
            },
        )?;
        clock.started();
        for b in reader.read_pass(0) {
            clock.batch(&b?, c);
        }
        clock.stop();
        Ok(clock.finish(|| drop(reader)))
    }

    /// All passes through one loader; pass `k` ends at its end-of-pass marker.
    fn multi_pass<C: Consume>(&self, consumer: impl Fn() -> C) -> CliResult<Vec<(PassResult, C)>> {
        let total = self.passes();
        let mut out = Vec::with_capacity(total);
        let mut sampler = RssSampler::start();
        let mut cpu0 = cpu_seconds();
        let t_start = Instant::now();
        let loader = Loader::builder().config(self.config.clone()).build()?;
        if let Some(w) = &self.watch {
            w.loader(&loader, 0, total as u64);
        }
        let startup = t_start.elapsed().as_secs_f64();
        let mut events = loader.device_iter(0);
        let mut t0 = t_start;
        let mut r = PassResult {
            startup: Some(startup),
            rss_before: rss_bytes(),
            ..PassResult::default()
        };
        let mut c = consumer();
        c.loader(&loader);
        loop {
            match events.next_event()? {
                Popped::Batch(d) => {
                    r.add(&d.batch, t0);
                    c.batch(&d.batch);
                    c.delivered(&d);
                }
                Popped::EndOfPass(_) => {
                    let now = Instant::now();
                    r.seconds = (now - t0).as_secs_f64();
                    r.cpu = cpu_seconds() - cpu0;
                    r.process_peak = peak_rss_bytes();
                    r.stats = Some(loader.stats());
                    (r.peak_rss, r.peak_anon, r.peak_file) =
                        std::mem::replace(&mut sampler, RssSampler::start()).finish();
                    let done = std::mem::take(&mut r);
                    out.push((done, std::mem::replace(&mut c, consumer())));
                    c.loader(&loader);
                    r.rss_before = rss_bytes();
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
        if let Some((last, _)) = out.last_mut() {
            last.teardown = t1.elapsed().as_secs_f64();
        }
        if out.len() != total {
            return Err(CliError::usage(format!(
                "{} passes delivered, {total} expected",
                out.len()
            )));
        }
        Ok(out)
    }

    /// Bytes one record holds in flight: payload, one end offset per field, origin.
    fn record_memory_bytes(&self, r: &PassResult) -> usize {
        let payload = (r.payload / r.records.max(1)) as usize;
        let fields = self.config.inputs.schema.as_ref().map_or(1, |s| s.len());
        payload + 8 * fields + std::mem::size_of::<feedline::Origin>()
    }

    /// The settings in force at the pass's end: with autotuning, the
    /// tuner's values in them.
    fn config_in_force(&self, r: &PassResult) -> std::borrow::Cow<'_, PipelineConfig> {
        match r.stats.as_ref().and_then(|s| s.autotune.as_ref()) {
            Some(a) => std::borrow::Cow::Owned(a.applied(&self.config)),
            None => std::borrow::Cow::Borrowed(&self.config),
        }
    }

    /// The in-flight memory bound of the settings in force for the pass's
    /// records, bytes.
    pub fn in_flight_bound(&self, r: &PassResult) -> usize {
        self.config_in_force(r)
            .in_flight_bound_bytes(self.record_memory_bytes(r))
    }

    /// The settings and the details of a pass, as JSON keys (beside the
    /// caller's own): mode, start-up, settings, memory and stage statistics.
    pub fn details(&self, r: &PassResult) -> Map<String, Value> {
        let mib = (1u64 << 20) as f64;
        let bound = self.in_flight_bound(r);
        let mut m = Map::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        put("mode", json!(self.mode));
        put("startup_seconds", json!(r.startup.map(|s| round(s, 4))));
        put(
            "first_batch_ms",
            json!(r.first_batch.map(|s| round(s * 1e3, 2))),
        );
        let config = self.config_in_force(r);
        put("readers", json!(config.reading.readers));
        put("shuffle", json!(self.config.order.shuffle));
        put("batch", json!(self.batch_size()));
        put("capacity", json!(self.config.feeding.capacity));
        put("deterministic", json!(self.config.order.deterministic));
        put(
            "verify_checksums",
            json!(self.config.reading.open.verify_checksums),
        );
        put(
            "defer_checksums",
            json!(self.config.reading.open.defer_checksums),
        );
        put(
            "consumer_sleep_ms",
            json!(self
                .measure
                .consumer_sleep_ms
                .map_or(0.0, |d| d.as_nanos() as f64 / 1e6)),
        );
        put("rss_before_mb", json!(r.rss_before.map(to_mib)));
        put("peak_rss_mb", json!(r.peak_rss.map(to_mib)));
        put("process_peak_rss_mb", json!(r.process_peak.map(to_mib)));
        put("peak_rss_anon_mb", json!(r.peak_anon.map(to_mib)));
        put("peak_rss_file_mb", json!(r.peak_file.map(to_mib)));
        put("in_flight_bound_mb", json!(round(bound as f64 / mib, 1)));
        put("in_flight_bound_bytes", json!(bound));
        // Part of the bound: the transform workers' working memory (each
        // worker's, as the transform states it, times the workers).
        put(
            "transform_workers_bytes",
            json!(config.transform_workers_bytes()),
        );
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
            put("shuffle_busy", json!(round(s.shuffle_batch.busy, 3)));
            put("batch_maker_busy", json!(round(s.batch_maker.busy, 3)));
            put(
                "batch_maker_blocked",
                json!(round(s.batch_maker.blocked, 3)),
            );
            put(
                "feed_queue_mean_depth",
                json!(round(s.feed_queue_mean_depth, 2)),
            );
            put("bottleneck", json!(s.bottleneck));
            if let Some(a) = &s.autotune {
                put("autotune", json!(a));
            }
        }
        m
    }
}

/// A consumer that pauses after each batch (`--consumer-sleep-ms`).
struct Pausing<C> {
    inner: C,
    sleep: Option<Duration>,
}

impl<C: Consume> Consume for Pausing<C> {
    fn batch(&mut self, batch: &Batch) {
        self.inner.batch(batch);
        if let Some(d) = self.sleep {
            std::thread::sleep(d);
        }
    }

    fn loader(&mut self, loader: &Loader) {
        self.inner.loader(loader);
    }

    fn delivered(&mut self, d: &feedline_actors::Delivered) {
        self.inner.delivered(d);
    }
}

/// Bytes as MiB, one decimal.
pub fn to_mib(bytes: u64) -> f64 {
    round(bytes as f64 / (1u64 << 20) as f64, 1)
}

/// `x` rounded to `digits` decimals.
pub fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
