//! [`LoaderBuilder`]: every setting of a [`Loader`], with
//! defaults, and the generator and push sources.

use std::sync::Arc;

use feedline::batch_policy::BatchPolicy;
use feedline::feed_queue::FeedMode;
use feedline::format::generator::{GeneratorFormat, GeneratorSource, IntoSample};
use feedline::format::{OpenOptions, Registry};
use feedline::plan::{Equalize, Shard, ShardBy};
use feedline::transform::{map_fn, BoxError, InstanceMap, TransformCtx};
use feedline::{Batch, Instance, Schema};

use super::Loader;
use crate::checkpoint::Checkpoint;
use crate::config::{ErrorPolicy, FileSet, PipelineConfig, ShuffleMode, StallPolicy};
use crate::error::PipelineError;
use crate::guard::FaultPlan;
use crate::paths::IntoPaths;
use crate::pipeline::StartOptions;
use crate::push::FeedHandle;
use crate::resume_plan::ResumePlan;

/// Builds a [`Loader`]. Every setting has a default but the files.
#[derive(Clone, Debug, Default)]
pub struct LoaderBuilder {
    config: PipelineConfig,
    generators: Vec<GeneratorSource>,
    /// `.shard()` (or `.config()`) was called: the environment is not read.
    shard_given: bool,
    /// `.shard_from_env(false)`: never read `RANK`/`WORLD_SIZE`.
    ignore_env_shard: bool,
    /// Go on from these checkpoints (one, or every rank's of a job).
    resume: Vec<Checkpoint>,
    /// Panics to inject (tests of the failure paths).
    faults: FaultPlan,
    /// Serve the metrics on this server instead of binding the address.
    metrics_server: Option<crate::metrics::MetricsServer>,
}

macro_rules! setter {
    ($(#[$doc:meta] $name:ident: $t:ty => $($field:ident).+;)*) => {$(
        #[$doc]
        pub fn $name(mut self, v: $t) -> Self {
            self.config.$($field).+ = v;
            self
        }
    )*};
}

impl LoaderBuilder {
    /// Input files: one or many ([`IntoPaths`]) paths, glob patterns,
    /// list files (`@train.list`); a `FORMAT:` prefix picks a file's format.
    /// Calls add up.
    ///
    /// ```no_run
    /// use feedline_actors::Loader;
    /// let one = Loader::builder().files("data/train.npz");
    /// let many = Loader::builder().files(["data/a-*.tfrecord", "npy:data/b.bin"]);
    /// ```
    pub fn files(mut self, files: impl IntoPaths) -> Self {
        self.config.inputs.files.extend(files.into_paths());
        self
    }

    /// Add a file set with its own readers, mixed with the other sets by
    /// weight (instead of [`files`](Self::files) and [`readers`](Self::readers);
    /// see [`FileSet`]).
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
    pub fn file_set(mut self, set: FileSet) -> Self {
        self.config.inputs.sets.push(set);
        self
    }

    /// Keep remote inputs (`s3://`, `gs://`, `http(s)://`) in the local
    /// directory `dir` after their first whole read, at most `max_bytes`
    /// of them (least recently used evicted first): later passes, and later
    /// runs, read the local copy once a HEAD request shows the object
    /// unchanged (same size and ETag). Several processes may share `dir`.
    /// See [`feedline::remote::cache`] for the rules. Default: none, or the
    /// one of `FEEDLINE_REMOTE_CACHE_DIR` / `FEEDLINE_REMOTE_CACHE_MAX_BYTES`.
    ///
    /// ```no_run
    /// use feedline_actors::Loader;
    /// let loader = Loader::builder()
    ///     .files(["s3://bucket/train/shard-{000000..000099}.tar"])
    ///     .remote_cache("/mnt/nvme/feedline-cache", 200 << 30)
    ///     .passes(10)
    ///     .build()?;
    /// # Ok::<(), feedline_actors::PipelineError>(())
    /// ```
    pub fn remote_cache(mut self, dir: impl Into<std::path::PathBuf>, max_bytes: u64) -> Self {
        self.config.reading.remote_cache =
            Some(feedline::remote::cache::RemoteCache::new(dir, max_bytes));
        self
    }

    /// The schema (default: inferred from the first file).
    pub fn schema(mut self, schema: Schema) -> Self {
        self.config.inputs.schema = Some(schema);
        self
    }

    /// Fixed batch size.
    pub fn batch(mut self, n: usize) -> Self {
        self.config.batching.batch = BatchPolicy::Fixed(n);
        self
    }

    /// Shard for data-parallel rank `rank` of `world_size` (checked at
    /// [`build`](Self::build): `rank < world_size`). Without it the shard
    /// comes from the environment variables `RANK` and `WORLD_SIZE` (as
    /// `torchrun` sets them), when set — see [`shard_from_env`](Self::shard_from_env).
    pub fn shard(mut self, rank: usize, world_size: usize) -> Self {
        self.config.inputs.shard = Shard { rank, world_size };
        self.shard_given = true;
        self
    }

    /// Read the shard from `RANK`/`WORLD_SIZE` when [`shard`](Self::shard)
    /// is not called (true, the default), or never (false: one process
    /// reads all the data whatever the environment says). Invalid values
    /// are an error at [`build`](Self::build) naming the variable.
    pub fn shard_from_env(mut self, yes: bool) -> Self {
        self.ignore_env_shard = !yes;
        self
    }

    /// Batch `k` to device `k mod D` (true) or a shared queue (false, default).
    pub fn round_robin(mut self, yes: bool) -> Self {
        self.config.feeding.feed = if yes {
            FeedMode::RoundRobin
        } else {
            FeedMode::Shared
        };
        self
    }

    setter! {
        /// How files are opened (compression, checksums, record size cap; the default: `Reading::open`).
        open_options: OpenOptions => reading.open;
        /// The formats known (add your own).
        registry: Registry => inputs.registry;
        /// Shuffle pool in instances (default 10,000; 0 = no shuffle).
        shuffle: usize => order.shuffle;
        /// Batching by a cost budget, or fixed.
        batch_policy: BatchPolicy => batching.batch;
        /// Drop each pass's last partial batch.
        drop_last: bool => batching.drop_last;
        /// Passes (default 1).
        passes: u64 => order.passes;
        /// Start at this pass (default 0; below `passes`): passes `first_pass..passes` run as a run from pass 0 runs them (the same order; in deterministic mode the same batches); not with [`resume`](Self::resume).
        first_pass: u64 => resume.first_pass;
        /// Seed (default 0).
        seed: u64 => order.seed;
        /// Reshuffle file order each pass (default true).
        shuffle_files: bool => order.shuffle_files;
        /// Identical batches across runs, reader counts and timings.
        deterministic: bool => order.deterministic;
        /// How records are shuffled (default [`ShuffleMode::Buffer`]; [`ShuffleMode::Global`]: an exact permutation of each pass, read by position; [`ShuffleMode::Block`]: permuted within blocks of about `shuffle` records, each a slice of every file of a group of 16).
        shuffle_mode: ShuffleMode => order.shuffle_mode;
        /// Devices (default 1).
        devices: usize => feeding.devices;
        /// Feed-queue capacity in batches (default 4).
        capacity: usize => feeding.capacity;
        /// Bad-record policy (default: fail).
        error_policy: ErrorPolicy => faults.error_policy;
        /// Shard by file or by record.
        shard_by: ShardBy => inputs.shard_by;
        /// Same batch count on every rank: drop or pad (default off); with packing, in packed rows.
        equalize: Equalize => batching.equalize;
        /// Instances per chunk (default 1024).
        chunk_records: usize => reading.chunk_records;
        /// Payload bytes per chunk (default 1 MiB).
        chunk_bytes: usize => reading.chunk_bytes;
        /// Out-of-order bytes held in deterministic mode (default 64 MiB).
        reorder_window: usize => order.reorder_window;
        /// Deterministic mode: snapshot the draw for checkpoints before every n-th batch (default [`SNAPSHOT_EVERY`](crate::SNAPSHOT_EVERY); 0 = never).
        snapshot_every: u64 => resume.snapshot_every;
        /// What to do with a stuck reader (default: retry its file on a fresh reader).
        on_stall: StallPolicy => faults.on_stall;
        /// Readers that may fail on one file before the pass fails (default 3).
        max_attempts: u32 => faults.max_attempts;
    }

    /// Batches the batch maker holds at most — being made side by side on
    /// the transform workers, or made and not yet in the feed queue
    /// (default: [`PipelineConfig::in_flight_batches`] decides); the batches
    /// do not depend on it.
    pub fn batches_in_flight(mut self, n: usize) -> Self {
        self.config.batching.batches_in_flight = Some(n);
        self
    }

    /// Where `global` and `block` shuffle modes keep their record indexes (default:
    /// [`feedline::record_index::default_index_dir`]).
    pub fn index_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.config.reading.index_dir = Some(dir.into());
        self
    }

    /// A format for every file (a name of the [registry](Self::registry):
    /// `"npy"`, `"jsonl"`, …), instead of choosing by extension or prefix.
    pub fn format(mut self, name: impl Into<String>) -> Self {
        self.config.inputs.format = Some(name.into());
        self
    }

    /// Instances held before draws start (default: the pool size).
    pub fn min_pool(mut self, n: usize) -> Self {
        self.config.order.min_pool = Some(n);
        self
    }

    /// A reader inside one open/read longer than this is stuck (default
    /// 60 s; [`no_stall_timeout`](Self::no_stall_timeout): never).
    pub fn stall_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.config.faults.stall_timeout = Some(timeout);
        self
    }

    /// Never take a reader for stuck, however long one open/read lasts.
    pub fn no_stall_timeout(mut self) -> Self {
        self.config.faults.stall_timeout = None;
        self
    }

    /// A per-instance map after the shuffle draw, on the transform
    /// [`workers`](Self::workers): `f(instance, ctx)` returns the instance's
    /// new fields (bytes in, `f32 [3, 224, 224]` out, …), with `ctx.rng()`
    /// seeded from (seed, pass, source name, record) so that augmentations
    /// do not depend on scheduling. The output schema is
    /// [declared](Self::output_schema) or inferred from the first instance,
    /// then checked on every one; an error or a panic in `f` is a bad record
    /// under the [error policy](Self::error_policy) (see
    /// [`feedline::transform`]).
    ///
    /// ```no_run
    /// use feedline_actors::Loader;
    /// use feedline::format::generator::Sample;
    /// use feedline::Values;
    /// use rand::Rng;
    /// let loader = Loader::builder()
    ///     .files(["data/*.jsonl"])
    ///     .map(|inst, ctx| {
    ///         let x = inst.get("x")?.as_f32().ok_or("x is not f32")?;
    ///         let noisy: Vec<f32> = x.iter().map(|v| v + ctx.rng().gen::<f32>()).collect();
    ///         Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
    ///             Sample::new().with("x", Values::F32(noisy.clone()), [noisy.len()]),
    ///         )
    ///     })
    ///     .workers(4)
    ///     .build()?;
    /// # Ok::<(), feedline_actors::PipelineError>(())
    /// ```
    pub fn map<F, E>(mut self, f: F) -> Self
    where
        F: Fn(Instance, &mut TransformCtx) -> Result<feedline::format::generator::Sample, E>
            + Send
            + Sync
            + 'static,
        E: Into<BoxError> + 'static,
    {
        self.config.transforms.instance = Some(Arc::new(map_fn(f)));
        self.config.given.map = true;
        self
    }

    /// A per-instance map of your own type (such as `feedline_vision`'s
    /// `ImageTransform`, which writes straight into the batch): see [`map`](Self::map).
    pub fn transform(mut self, map: Arc<dyn InstanceMap>) -> Self {
        self.config.transforms.instance = Some(map);
        self.config.given.transform = true;
        self
    }

    /// Tokenize the text field `text_field` with `tokenizer` into a ragged
    /// `i32` field `input_ids` (one document per instance), on the
    /// transform workers (see [`feedline::tokenize`]); instead of a
    /// [`transform`](Self::transform).
    ///
    /// ```no_run
    /// use feedline_actors::{Loader, Pack, Tokenizer};
    /// let loader = Loader::builder()
    ///     .files(["docs.jsonl"])
    ///     .batch(8)
    ///     .tokenize(Tokenizer::from_file("tokenizer.json").unwrap(), "text")
    ///     .pack(Pack::best_fit(4096).window(1000))
    ///     .build()
    ///     .unwrap();
    /// ```
    #[cfg(feature = "tokenize")]
    pub fn tokenize(self, tokenizer: feedline::tokenize::Tokenizer, text_field: &str) -> Self {
        self.tokenize_with(feedline::tokenize::Tokenize::new(tokenizer, text_field))
    }

    /// Tokenize as `stage` says (BOS/EOS per document: [`feedline::tokenize::Tokenize`]).
    #[cfg(feature = "tokenize")]
    pub fn tokenize_with(mut self, stage: feedline::tokenize::Tokenize) -> Self {
        self.config.transforms.instance = Some(Arc::new(stage));
        self.config.given.tokenizer = true;
        self
    }

    /// Pack each pass's documents into batches of [`batch`](Self::batch)
    /// rows of `pack.length` tokens (see [`feedline::pack`]): best-fit,
    /// first-fit or concatenate-then-split, after the draw, in the batch
    /// maker. Each batch has `input_ids`, `segment_ids`, `position_ids`,
    /// `cu_seqlens` and `max_seqlen`, and [`Batch::segments`](feedline::Batch::segments)
    /// says where every piece came from.
    pub fn pack(mut self, pack: feedline::pack::Pack) -> Self {
        self.config.batching.pack = Some(pack);
        self
    }

    /// Transform workers: threads of their own, apart from the readers
    /// (default 2; given, the [autotuner](Self::autotune) leaves them).
    pub fn workers(mut self, n: usize) -> Self {
        self.config.transforms.workers = n;
        self.config.tuning.fixed.workers = true;
        self
    }

    /// Prefetch readers (default 2; given, the [autotuner](Self::autotune)
    /// leaves them).
    pub fn readers(mut self, n: usize) -> Self {
        self.config.reading.readers = n;
        self.config.tuning.fixed.readers = true;
        self
    }

    /// Byte bound of the shuffle pool (default 256 MiB; given, the
    /// [autotuner](Self::autotune) leaves it, else it is at most a quarter
    /// of the memory budget).
    pub fn shuffle_bytes(mut self, n: usize) -> Self {
        self.config.order.shuffle_bytes = n;
        self.config.tuning.fixed.shuffle_bytes = true;
        self
    }

    /// Unacknowledged chunks per reader (default 2; given, the
    /// [autotuner](Self::autotune) leaves them).
    pub fn chunks_in_flight(mut self, n: usize) -> Self {
        self.config.reading.chunks_in_flight = n;
        self.config.tuning.fixed.chunks_in_flight = true;
        self
    }

    /// Tune, while the pipeline runs, the transform workers, batches in
    /// flight and chunks in flight not given — and choose the readers not
    /// given when it starts — within `budgets`' CPUs (readers and workers
    /// together) and memory (the stated in-flight bound); what it chose is
    /// [`StatsSnapshot::autotune`](crate::StatsSnapshot::autotune). See
    /// [`crate::autotune`] and docs/autotune.md.
    ///
    /// ```no_run
    /// use feedline_actors::{Autotune, Loader};
    /// let loader = Loader::builder()
    ///     .files(["data/*.tfrecord"])
    ///     .autotune(Autotune { cpus: Some(8), ..Autotune::default() })
    ///     .build()?;
    /// # Ok::<(), feedline_actors::PipelineError>(())
    /// ```
    pub fn autotune(mut self, budgets: crate::autotune::Autotune) -> Self {
        self.config.tuning.autotune = Some(budgets);
        self
    }

    /// The autotuner's measurement interval (default
    /// [`INTERVAL`](crate::autotune::INTERVAL)); tests shorten it.
    #[doc(hidden)]
    pub fn autotune_interval(mut self, every: std::time::Duration) -> Self {
        self.config.tuning.interval = Some(every);
        self
    }

    /// Declare the instance map's output schema (else inferred from the
    /// first transformed instance).
    pub fn output_schema(mut self, schema: Schema) -> Self {
        self.config.transforms.output_schema = Some(schema);
        self
    }

    /// Keep only the records for which `keep` is true, on the readers,
    /// before the shuffle (after any earlier filter; filters run before
    /// the record maps). An error or a panic is a bad record.
    pub fn filter_records<F, E>(mut self, keep: F) -> Self
    where
        F: Fn(&Instance) -> Result<bool, E> + Send + Sync + 'static,
        E: Into<BoxError>,
    {
        let stage = self.config.transforms.records.take().unwrap_or_default();
        self.config.transforms.records = Some(stage.filter(keep));
        self
    }

    /// Map each record to another instance of the same schema, on the
    /// readers, before the shuffle (after the filters and any earlier map).
    pub fn map_records<F, E>(mut self, f: F) -> Self
    where
        F: Fn(Instance) -> Result<Instance, E> + Send + Sync + 'static,
        E: Into<BoxError>,
    {
        let stage = self.config.transforms.records.take().unwrap_or_default();
        self.config.transforms.records = Some(stage.map(f));
        self
    }

    /// The version of your transform code — the record filters and maps,
    /// the instance map, the batch map — as checkpoints record it.
    /// Checkpoints fingerprint what can be compared (the record stage's
    /// kind, the instance map's [`name`](InstanceMap::name) and
    /// [`version`](InstanceMap::version), the output schema), but not what
    /// a closure computes: keep this version to say "the same transforms"
    /// on a resume, change it when their outputs change — a checkpoint
    /// taken under another version is then refused, naming it.
    pub fn transform_version(mut self, version: &str) -> Self {
        self.config.transforms.version = Some(version.to_string());
        self
    }

    /// A map of each collated batch (after the instance map, if any).
    pub fn map_batches<F, E>(mut self, f: F) -> Self
    where
        F: Fn(Batch) -> Result<Batch, E> + Send + Sync + 'static,
        E: Into<BoxError>,
    {
        self.config.transforms.batch = Some(Arc::new(move |b| f(b).map_err(Into::into)));
        self
    }

    /// Go on from `checkpoint` (taken by [`Loader::checkpoint`], or by
    /// `feedline run --checkpoint`): the pass it stopped in continues —
    /// nothing consumed before comes again, nothing is left out — and
    /// later passes run as usual. The inputs and the settings that fix the
    /// order must be the checkpoint's (else [`build`](Self::build) says
    /// what changed); readers and devices may differ. In deterministic mode
    /// on the same shard the batches are those the uninterrupted run gives
    /// after the same point, with the same numbers. Call it once per rank
    /// of an old job for an elastic resume under this builder's shard (see
    /// [`ResumeFrom`]).
    pub fn resume(mut self, checkpoint: Checkpoint) -> Self {
        self.resume.push(checkpoint);
        self
    }

    /// Serve Prometheus metrics (OpenMetrics text) at
    /// `http://HOST:PORT/metrics` while the loader runs (feature
    /// `metrics`; default: none, no port opened). `addr` is `HOST:PORT`
    /// (port 0: a free one, [`Loader::metrics_server`] says which),
    /// checked by [`build`](Self::build) with every setting; a port in use
    /// is [`PipelineError::Metrics`] naming it. The server stops, its port
    /// freed, when the loader stops. The families: docs/metrics.md.
    ///
    /// ```no_run
    /// use feedline_actors::Loader;
    /// let loader = Loader::builder()
    ///     .files(["data/*.tfrecord"])
    ///     .metrics_addr("127.0.0.1:9464")
    ///     .build()?;
    /// # Ok::<(), feedline_actors::PipelineError>(())
    /// ```
    pub fn metrics_addr(mut self, addr: impl Into<String>) -> Self {
        self.config.monitoring.metrics_addr = Some(addr.into());
        self
    }

    /// Serve the metrics on `server` (bound before, serving an earlier
    /// loader, say: the counters go on from its totals) instead of binding
    /// [`metrics_addr`](Self::metrics_addr).
    pub fn metrics_server(mut self, server: crate::metrics::MetricsServer) -> Self {
        self.metrics_server = Some(server);
        self
    }

    /// Panics to inject into the stages' handlers (tests of the failure paths).
    #[doc(hidden)]
    pub fn inject_faults(mut self, faults: FaultPlan) -> Self {
        self.faults = faults;
        self
    }

    /// Replace every setting (the shard included: the environment is not read).
    pub fn config(mut self, config: PipelineConfig) -> Self {
        self.config = config;
        self.shard_given = true;
        self
    }

    /// What a face was given that the settings' values cannot tell (the
    /// command's flags, Python's keywords: see [`Given`](crate::Given)),
    /// judged with every other setting; it replaces what the builder's own
    /// methods noted (which instance transform was given).
    pub fn given(mut self, given: crate::config::Given) -> Self {
        self.config.given = given;
        self
    }

    /// The settings so far.
    pub fn settings(&self) -> &PipelineConfig {
        &self.config
    }

    /// Start the pipeline on threads of its own.
    pub fn build(self) -> Result<Loader, PipelineError> {
        if self.config.inputs.push.is_some() {
            return Err(PipelineError::config(
                "push mode: build it with build_with_feed() to get the FeedHandle",
            ));
        }
        let (config, options) = self.finish()?;
        Loader::start(config, options)
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
        self.config.inputs.files.push(source.spec());
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
        self.config.inputs.push = Some(name.into());
        self
    }

    /// Start a push-mode pipeline: it reads no files; its data is what is
    /// pushed through the returned [`FeedHandle`] until the stream is closed.
    /// It needs a [`schema`](Self::schema).
    pub fn build_with_feed(mut self) -> Result<(Loader, FeedHandle), PipelineError> {
        self.config
            .inputs
            .push
            .get_or_insert_with(|| "push".to_string());
        let (config, options) = self.finish()?;
        let (loader, feed) = Loader::start_full(config, options)?;
        let feed = feed.ok_or_else(|| PipelineError::config("no push source started"))?;
        Ok((loader, feed))
    }

    /// The settings with the shard from the environment (unless given or
    /// opted out of) and the generator sources registered, and what the
    /// pipeline starts with (the resume made of the checkpoints given).
    fn finish(self) -> Result<(PipelineConfig, StartOptions), PipelineError> {
        let mut config = self.config;
        if !self.shard_given && !self.ignore_env_shard {
            // The one rule of the shard, nothing given: the environment's.
            let from_env = crate::config::shard_given(None, None).map_err(|e| {
                PipelineError::Config(
                    e.text("; LoaderBuilder::shard_from_env(false) ignores the environment"),
                )
            })?;
            if let Some(shard) = from_env {
                config.inputs.shard = shard;
                log::info!(
                    "data-parallel shard from the environment: rank {} of {} (RANK, WORLD_SIZE; .shard() or .shard_from_env(false) overrides)",
                    shard.rank,
                    shard.world_size,
                );
            }
        }
        if !self.generators.is_empty() {
            Self::register_generators(&mut config, self.generators)?;
        }
        let resume = match self.resume.is_empty() {
            true => None,
            false => Some(Arc::new(ResumePlan::new(&self.resume, &config)?)),
        };
        let options = StartOptions {
            resume,
            faults: self.faults,
            metrics: self.metrics_server,
            ..StartOptions::default()
        };
        Ok((config, options))
    }

    fn register_generators(
        config: &mut PipelineConfig,
        generators: Vec<GeneratorSource>,
    ) -> Result<(), PipelineError> {
        if let Some(f) = &config.inputs.format {
            return Err(PipelineError::config(format!(
                "format `{f}` is set for every input, generator sources included: \
                 give the files a FORMAT: prefix instead"
            )));
        }
        let mut gens = GeneratorFormat::new();
        for g in generators {
            gens.add(g)?;
        }
        gens.register(&mut config.inputs.registry);
        Ok(())
    }
}
