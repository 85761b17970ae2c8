//! [`Loader`]: the blocking handle for plain Rust training loops. It runs
//! the actix `System` and the pipeline on threads of its own; iterating pops
//! batches; dropping it (or breaking out of `for batch in loader`) stops and
//! joins every thread.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use std::time::Instant;

use actix::prelude::*;
use feedline::batcher::BatchPolicy;
use feedline::format::{OpenOptions, Registry};
use feedline::plan::{Equalize, Shard, ShardBy};
use feedline::Schema;

use crate::config::{ErrorPolicy, FeedMode, PipelineConfig, StallPolicy};
use crate::error::PipelineError;
use crate::feed_queue::{FeedLanes, FeedQueue};
use crate::messages::{Delivered, Popped, Shutdown};
use crate::pipeline::Pipeline;
use crate::push::FeedHandle;
use crate::stats::{ns, Stats, StatsSnapshot};
use crate::supervisor::{Arbiters, Supervisor};
use feedline::format::generator::{GeneratorFormat, GeneratorSource, IntoSample};

/// Builds a [`Loader`]. Every setting has a default but the files.
#[derive(Clone, Debug, Default)]
pub struct LoaderBuilder {
    config: PipelineConfig,
    generators: Vec<GeneratorSource>,
}

macro_rules! setter {
    ($(#[$doc:meta] $name:ident: $t:ty => $field:ident;)*) => {$(
        #[$doc]
        pub fn $name(mut self, v: $t) -> Self {
            self.config.$field = v;
            self
        }
    )*};
}

impl LoaderBuilder {
    /// Input files: paths, glob patterns, list files (`@train.list`);
    /// a `FORMAT:` prefix picks a file's format.
    pub fn files<I, S>(mut self, files: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.files.extend(files.into_iter().map(Into::into));
        self
    }

    /// Add a file set with its own readers, mixed with the other sets by
    /// weight (instead of [`files`](Self::files) and [`readers`](Self::readers);
    /// see [`FileSet`](crate::FileSet)).
    ///
    /// ```no_run
    /// use feedline_actors::{FileSet, Loader};
    /// let loader = Loader::builder()
    ///     .file_set(FileSet::new("train", ["data/train-*.tfrecord"]).readers(2).weight(4.0))
    ///     .file_set(FileSet::new("web", ["s3-mirror/web-*.tfrecord"]).readers(8).weight(1.0))
    ///     .batch(256)
    ///     .build()?;
    /// # Ok::<(), feedline_actors::PipelineError>(())
    /// ```
    pub fn file_set(mut self, set: crate::FileSet) -> Self {
        self.config.sets.push(set);
        self
    }

    /// The schema (default: inferred from the first file).
    pub fn schema(mut self, schema: Schema) -> Self {
        self.config.schema = Some(schema);
        self
    }

    /// Fixed batch size.
    pub fn batch(mut self, n: usize) -> Self {
        self.config.batch = BatchPolicy::Fixed(n);
        self
    }

    /// Shard for data-parallel rank `rank` of `world_size`.
    pub fn shard(mut self, rank: usize, world_size: usize) -> Self {
        self.config.shard = Shard { rank, world_size };
        self
    }

    /// Batch `k` to device `k mod D` (true) or a shared queue (false, default).
    pub fn round_robin(mut self, yes: bool) -> Self {
        self.config.feed = if yes {
            FeedMode::RoundRobin
        } else {
            FeedMode::Shared
        };
        self
    }

    setter! {
        /// A format for every file.
        format: Option<String> => format;
        /// How files are opened (compression, checksums, record size cap; the default: `PipelineConfig::open`).
        open_options: OpenOptions => open;
        /// The formats known (add your own).
        registry: Registry => registry;
        /// Prefetch readers (default 2).
        readers: usize => readers;
        /// Shuffle pool in instances (default 10,000; 0 = no shuffle).
        shuffle: usize => shuffle;
        /// Instances held before draws start (default: the pool size).
        min_pool: Option<usize> => min_pool;
        /// Byte bound of the shuffle pool (default 256 MiB).
        shuffle_bytes: usize => shuffle_bytes;
        /// Batching by a cost budget, or fixed.
        batch_policy: BatchPolicy => batch;
        /// Drop each pass's last partial batch.
        drop_last: bool => drop_last;
        /// Passes (default 1).
        passes: u64 => passes;
        /// Seed (default 0).
        seed: u64 => seed;
        /// Reshuffle file order each pass (default true).
        shuffle_files: bool => shuffle_files;
        /// Identical batches across runs, reader counts and timings.
        deterministic: bool => deterministic;
        /// Devices (default 1).
        devices: usize => devices;
        /// Feed-queue capacity in batches (default 4).
        capacity: usize => capacity;
        /// Bad-record policy (default: fail).
        error_policy: ErrorPolicy => error_policy;
        /// Shard by file or by record.
        shard_by: ShardBy => shard_by;
        /// Same batch count on every rank: drop or pad (default off).
        equalize: Equalize => equalize;
        /// Instances per chunk (default 1024).
        chunk_records: usize => chunk_records;
        /// Payload bytes per chunk (default 1 MiB).
        chunk_bytes: usize => chunk_bytes;
        /// Unacknowledged chunks per reader (default 2).
        chunks_in_flight: usize => chunks_in_flight;
        /// Out-of-order bytes held in deterministic mode (default 64 MiB).
        reorder_window: usize => reorder_window;
        /// A reader inside one open/read longer than this is stuck (default 60 s; `None`: never).
        stall_timeout: Option<std::time::Duration> => stall_timeout;
        /// What to do with a stuck reader (default: retry its file on a fresh reader).
        on_stall: StallPolicy => on_stall;
        /// Readers that may fail on one file before the pass fails (default 3).
        max_attempts: u32 => max_attempts;
    }

    /// Replace every setting.
    pub fn config(mut self, config: PipelineConfig) -> Self {
        self.config = config;
        self
    }

    /// The settings so far.
    pub fn settings(&self) -> &PipelineConfig {
        &self.config
    }

    /// Start the pipeline on threads of its own.
    pub fn build(self) -> Result<Loader, PipelineError> {
        if self.config.push.is_some() {
            return Err(PipelineError::Config(
                "push mode: build it with build_with_feed() to get the FeedHandle".into(),
            ));
        }
        Loader::start(self.finish()?)
    }

    /// A generator source (Paddle's reader creator): `creator` returns a
    /// fresh iterator of instances ([`Sample`](feedline::format::generator::Sample)s,
    /// or `Result`s of them: an `Err` is a bad record) at the start of every
    /// pass. It is read like a file — the input `gen:NAME` among
    /// [`files`](Self::files) — by one reader at a time, shuffled, batched,
    /// sharded by record when there are fewer inputs than ranks, and its
    /// instances are located as `gen:NAME: record i`. Without a schema the
    /// creator is also called once to infer one. A creator should yield the
    /// same sequence on every call: a reader that resumes the source after a
    /// failure skips the items already delivered.
    pub fn generator<F, I>(mut self, name: impl Into<String>, creator: F) -> Self
    where
        F: Fn() -> I + Send + Sync + 'static,
        I: IntoIterator,
        I::IntoIter: Send + 'static,
        I::Item: IntoSample + 'static,
    {
        let source = GeneratorSource::new(name, creator);
        self.config.files.push(source.spec());
        self.generators.push(source);
        self
    }

    /// `shards` generator sources `NAME/0` … `NAME/{shards-1}`, shard `k`
    /// made by `creator(k)`: several readers generate in parallel, and ranks
    /// can shard them by file like files.
    pub fn generator_shards<F, I>(mut self, name: &str, shards: usize, creator: F) -> Self
    where
        F: Fn(usize) -> I + Send + Sync + 'static,
        I: IntoIterator,
        I::IntoIter: Send + 'static,
        I::Item: IntoSample + 'static,
    {
        let creator = Arc::new(creator);
        for k in 0..shards {
            let c = creator.clone();
            self = self.generator(format!("{name}/{k}"), move || c(k));
        }
        self
    }

    /// Push mode with this source name (default `"push"`); see
    /// [`build_with_feed`](Self::build_with_feed).
    pub fn push_source(mut self, name: impl Into<String>) -> Self {
        self.config.push = Some(name.into());
        self
    }

    /// Start a push-mode pipeline: it reads no files; its data is what is
    /// pushed through the returned [`FeedHandle`] until the stream is closed.
    /// It needs a [`schema`](Self::schema).
    pub fn build_with_feed(mut self) -> Result<(Loader, FeedHandle), PipelineError> {
        self.config.push.get_or_insert_with(|| "push".to_string());
        let (loader, feed) = Loader::start_full(self.finish()?)?;
        let feed = feed.ok_or_else(|| PipelineError::Config("no push source started".into()))?;
        Ok((loader, feed))
    }

    /// The settings with the generator sources registered.
    fn finish(self) -> Result<PipelineConfig, PipelineError> {
        let mut config = self.config;
        if self.generators.is_empty() {
            return Ok(config);
        }
        if let Some(f) = &config.format {
            return Err(PipelineError::Config(format!(
                "format `{f}` is set for every input, generator sources included: \
                 give the files a FORMAT: prefix instead"
            )));
        }
        let mut gens = GeneratorFormat::new();
        for g in self.generators {
            gens.add(g)?;
        }
        gens.register(&mut config.registry);
        Ok(config)
    }
}

/// A running loader for plain (non-actor) code.
///
/// ```no_run
/// use feedline_actors::Loader;
/// let loader = Loader::builder()
///     .files(["data/train-*.tfrecord"])
///     .batch(256)
///     .shuffle(10_000)
///     .passes(2)
///     .seed(7)
///     .build()
///     .unwrap();
/// for batch in loader {
///     let batch = batch.unwrap();
///     let x = batch.batch.f32("x").unwrap();
///     assert_eq!(x.shape()[1], 64);
/// }
/// ```
pub struct Loader {
    /// Keeps the feed queue's actor alive (when it goes, its lanes fail).
    _feed: Addr<FeedQueue>,
    /// The feed queue's lanes, popped directly.
    lanes: Arc<FeedLanes>,
    supervisor: Addr<Supervisor>,
    stats: Stats,
    schema: Schema,
    config: Arc<PipelineConfig>,
    arbiters: Arbiters,
    system: Option<System>,
    thread: Option<JoinHandle<()>>,
    merged: MergedState,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("schema", &self.schema)
            .finish()
    }
}

impl Loader {
    /// Start building.
    pub fn builder() -> LoaderBuilder {
        LoaderBuilder::default()
    }

    fn start(config: PipelineConfig) -> Result<Loader, PipelineError> {
        Self::start_full(config).map(|(loader, _)| loader)
    }

    fn start_full(config: PipelineConfig) -> Result<(Loader, Option<FeedHandle>), PipelineError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("feedline-system".into())
            .spawn(move || {
                let sys = System::new();
                let started = sys.block_on(async move { Pipeline::start_for_loader(config) });
                let arbiters = match started {
                    Ok(mut p) => {
                        let parts = p.parts();
                        let arbiters = parts.4.clone();
                        let push = p.take_feed_handle();
                        let _ = tx.send(Ok((parts, System::current(), push)));
                        Some(arbiters)
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        None
                    }
                };
                if let Some(arbiters) = arbiters {
                    let _ = sys.run();
                    arbiters.stop_and_join();
                }
            })
            .map_err(|e| PipelineError::Config(format!("cannot start a thread: {e}")))?;
        let received = rx.recv().map_err(|_| PipelineError::Stopped);
        let ((feed, supervisor, stats, schema, arbiters, config), system, push) = match received {
            Ok(Ok(x)) => x,
            Ok(Err(e)) | Err(e) => {
                let _ = thread.join();
                return Err(e);
            }
        };
        let Some(lanes) = stats.feed_lanes() else {
            system.stop();
            let _ = thread.join();
            arbiters.stop_and_join();
            return Err(PipelineError::Stopped);
        };
        let devices = config.devices;
        let loader = Loader {
            merged: MergedState::new(&lanes, devices, config.feed == FeedMode::RoundRobin),
            _feed: feed,
            lanes,
            supervisor,
            stats,
            schema,
            config,
            arbiters,
            system: Some(system),
            thread: Some(thread),
        };
        Ok((loader, push))
    }

    /// The schema of the batches.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The settings in force (inputs expanded).
    pub fn config(&self) -> &PipelineConfig {
        &self.config
    }

    /// The statistics as they stand.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// The live statistics handle.
    pub fn stats_handle(&self) -> Stats {
        self.stats.clone()
    }

    /// Iterate over all batches, all passes, in order.
    pub fn iter(&mut self) -> Iter<'_> {
        Iter { loader: self }
    }

    /// An iterator for device `device` (`0..devices`), to move to a thread
    /// of its own. In round-robin mode it gets batches `k` with
    /// `k mod devices == device`; in shared mode whatever is next.
    pub fn device_iter(&self, device: usize) -> DeviceIter {
        DeviceIter {
            popper: Popper::new(self.lanes.clone(), device),
            stats: self.stats.clone(),
            ended: false,
        }
    }

    /// The next batch, waiting at most `timeout`. On a timeout the error
    /// says which stage is stuck (see [`Stats::diagnose`]); iteration can go on.
    pub fn next_timeout(&mut self, timeout: Duration) -> Option<Result<Delivered, PipelineError>> {
        self.merged.timeout = Some(timeout);
        let r = self.next_merged();
        self.merged.timeout = None;
        r
    }

    /// Stop everything and wait for every thread. Also what `drop` does.
    pub fn shutdown(&mut self) {
        // Iterators on other threads get `Stopped` now, whatever the actors do.
        self.lanes.fail(PipelineError::Stopped);
        if let Some(system) = self.system.take() {
            self.supervisor.do_send(Shutdown);
            system.stop();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.arbiters.stop_and_join();
    }

    fn pop(&mut self, consumer: usize) -> Result<Popped, PipelineError> {
        let popper = &mut self.merged.poppers[consumer % self.merged.lanes];
        popper.pop(&self.stats, self.merged.timeout)
    }

    fn next_merged(&mut self) -> Option<Result<Delivered, PipelineError>> {
        loop {
            if self.merged.ended {
                return None;
            }
            let consumer = self.merged.lane;
            match self.pop(consumer) {
                Ok(Popped::Batch(d)) => {
                    if self.merged.round_robin {
                        self.merged.lane = (self.merged.lane + 1) % self.merged.lanes;
                    }
                    return Some(Ok(d));
                }
                Ok(Popped::EndOfPass(_)) => {
                    if self.merged.round_robin {
                        // Every other lane holds this pass's marker next: take them.
                        for other in (0..self.merged.lanes).filter(|&l| l != consumer) {
                            match self.pop(other) {
                                Ok(Popped::EndOfPass(_)) => {}
                                Ok(Popped::EndOfData) => {}
                                Ok(Popped::Batch(d)) => {
                                    log::error!("lane {other} had a batch after its pass ended");
                                    return Some(Ok(d));
                                }
                                Err(e) => {
                                    self.merged.ended = true;
                                    return Some(Err(e));
                                }
                            }
                        }
                        self.merged.lane = 0;
                    }
                }
                Ok(Popped::EndOfData) => {
                    self.merged.ended = true;
                    return None;
                }
                Err(e @ PipelineError::Timeout { .. }) => return Some(Err(e)),
                Err(e) => {
                    self.merged.ended = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// Pops for one consumer from a plain thread, straight from the feed
/// queue's lanes: the batch is taken in the same critical section that
/// returns it, so a time-out or a dropped iterator loses nothing (there is
/// no request in flight), and the queue itself is the prefetch buffer.
struct Popper {
    lanes: Arc<FeedLanes>,
    consumer: usize,
    /// When the caller last got an item: the time until it asks again is work.
    last_return: Option<Instant>,
}

impl Popper {
    fn new(lanes: Arc<FeedLanes>, consumer: usize) -> Self {
        Popper {
            lanes,
            consumer,
            last_return: None,
        }
    }

    /// The next item, waiting at most `timeout`.
    fn pop(&mut self, stats: &Stats, timeout: Option<Duration>) -> Result<Popped, PipelineError> {
        let asked = Instant::now();
        let counters = stats.device(self.consumer);
        if let (Some(t), Some(c)) = (self.last_return.take(), counters) {
            c.busy_ns.fetch_add(ns(asked - t), Relaxed);
        }
        let popped = match self.lanes.pop(self.consumer, timeout.map(|t| asked + t)) {
            Some(r) => r,
            None => Err(PipelineError::Timeout {
                waited: timeout.unwrap_or_default(),
                why: stats.diagnose(),
            }),
        };
        let now = Instant::now();
        if let Some(c) = counters {
            // The wait before the first batch is start-up, not a stall.
            if c.batches.load(Relaxed) > 0 {
                c.wait_ns.fetch_add(ns(now - asked), Relaxed);
            }
            if let Ok(Popped::Batch(d)) = &popped {
                c.batches.fetch_add(1, Relaxed);
                c.records.fetch_add(d.batch.len() as u64, Relaxed);
            }
        }
        self.last_return = Some(now);
        popped
    }
}

struct MergedState {
    /// One per consumer the merged iterator takes from (lane `k` in
    /// round-robin mode; consumer 0 alone in shared mode).
    poppers: Vec<Popper>,
    lanes: usize,
    lane: usize,
    round_robin: bool,
    ended: bool,
    timeout: Option<Duration>,
}

impl MergedState {
    fn new(feed: &Arc<FeedLanes>, lanes: usize, round_robin: bool) -> Self {
        let lanes = if round_robin { lanes.max(1) } else { 1 };
        MergedState {
            poppers: (0..lanes).map(|c| Popper::new(feed.clone(), c)).collect(),
            lanes,
            lane: 0,
            round_robin,
            ended: false,
            timeout: None,
        }
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Borrowing iterator over every batch ([`Loader::iter`]).
pub struct Iter<'a> {
    loader: &'a mut Loader,
}

impl Iterator for Iter<'_> {
    type Item = Result<Delivered, PipelineError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.loader.next_merged()
    }
}

/// Owning iterator: dropping it (an early `break`) stops the loader.
pub struct IntoIter {
    loader: Loader,
}

impl IntoIter {
    /// The loader's statistics.
    pub fn stats(&self) -> StatsSnapshot {
        self.loader.stats()
    }
}

impl Iterator for IntoIter {
    type Item = Result<Delivered, PipelineError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.loader.next_merged()
    }
}

impl IntoIterator for Loader {
    type Item = Result<Delivered, PipelineError>;
    type IntoIter = IntoIter;
    fn into_iter(self) -> IntoIter {
        IntoIter { loader: self }
    }
}

/// One device's iterator ([`Loader::device_iter`]); `Send`.
pub struct DeviceIter {
    popper: Popper,
    stats: Stats,
    ended: bool,
}

impl DeviceIter {
    /// The next item including end-of-pass markers.
    pub fn next_event(&mut self) -> Result<Popped, PipelineError> {
        self.popper.pop(&self.stats, None)
    }

    /// The next item, waiting at most `timeout`; a time-out says which stage is stuck.
    pub fn next_event_timeout(&mut self, timeout: Duration) -> Result<Popped, PipelineError> {
        self.popper.pop(&self.stats, Some(timeout))
    }
}

impl Iterator for DeviceIter {
    type Item = Result<Delivered, PipelineError>;
    fn next(&mut self) -> Option<Self::Item> {
        while !self.ended {
            match self.next_event() {
                Ok(Popped::Batch(d)) => return Some(Ok(d)),
                Ok(Popped::EndOfPass(_)) => continue,
                Ok(Popped::EndOfData) => self.ended = true,
                Err(e) => {
                    self.ended = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}
