//! Pipeline settings: plain user data that [`LoaderBuilder`](crate::LoaderBuilder),
//! the command and the Python package fill in, checked in one place
//! ([`PipelineConfig::check`]) — every rule across settings, those of
//! settings that apply only with others too ([`Given`]: what a face was
//! given) — the defaults and limits beside them. A refusal names the
//! settings by key (`setting`), which each face spells its own way. No
//! stage reads them: the wiring site derives each stage's own settings
//! (`settings`). How batches reach the devices ([`FeedMode`]) is the core
//! feed queue's own setting.

use feedline::batch_policy::BatchPolicy;
use feedline::feed_queue::FeedMode;
use feedline::format::{OpenOptions, Registry};
use feedline::pack::{LongDocs, Pack, PackPolicy, DEFAULT_PACK_WINDOW};
use feedline::plan::{Equalize, Shard, ShardBy};
use feedline::transform::Transforms;
use feedline::Schema;

use crate::error::PipelineError;

use crate::setting::{Setting, SettingError, Value};

/// By default ([`Resume::snapshot_every`]) a snapshot of the draw
/// is taken before every batch whose number is a multiple of this
/// (deterministic mode): a resume draws at most this many batches (plus
/// those the consumers had not taken yet) before its first.
pub const SNAPSHOT_EVERY: u64 = 128;

/// Records read from the first readable input file to infer a schema when
/// none is given (`feedline inspect` prints what this infers, file by file).
pub const SCHEMA_SAMPLE_RECORDS: usize = 64;

/// The most prefetch readers a pipeline starts (all file sets together):
/// each is an OS thread, so more is refused.
pub const MAX_READERS: usize = 1024;

/// Rows each transform worker has in flight by default: the batch maker
/// holds enough batches for this many ([`PipelineConfig::in_flight_batches`]).
/// A worker done with its rows of one batch goes on with the next batches'
/// while an earlier batch waits for its slowest row: with decode times as
/// skewed as a lognormal of σ = 1, a batch's slowest row takes up to ~15×
/// the mean, and 16 rows per worker keep the workers busy through it
/// (`examples/worker_scaling.rs`).
pub const ROWS_IN_FLIGHT_PER_WORKER: usize = 16;

/// The fewest batches in flight the batch maker holds by default: one being
/// made while the one before waits for room in the feed queue.
pub const MIN_BATCHES_IN_FLIGHT: usize = 2;

/// The most batches in flight a pipeline takes (each may be a whole batch
/// of memory).
pub const MAX_BATCHES_IN_FLIGHT: usize = 1024;

/// The most devices a pipeline feeds: each has a lane in round-robin mode
/// and, driven by trainers, an OS thread, so more is refused.
pub const MAX_DEVICES: usize = 1024;

/// What to do with a bad record.
#[derive(Clone, Debug, PartialEq)]
pub enum ErrorPolicy {
    /// Stop the pipeline; every consumer gets the error (file, record, offset).
    Fail,
    /// Drop the bad record (or the unreadable rest of its file), log it,
    /// count it and record where it was; fail once the budget is exceeded.
    Skip {
        /// Fail once more than this many records were skipped.
        max_bad: Option<u64>,
        /// Fail once more than this fraction of a pass's records were
        /// skipped (bad ones included in the count; judged at the end of
        /// each pass, so the same run passes or fails whatever the reader
        /// count).
        max_bad_fraction: Option<f64>,
    },
}

impl ErrorPolicy {
    /// Skip bad records without a budget.
    pub fn skip() -> Self {
        ErrorPolicy::Skip {
            max_bad: None,
            max_bad_fraction: None,
        }
    }
}

/// What to do with a reader that makes no progress for `stall_timeout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StallPolicy {
    /// Give its file to a fresh reader, from the first record not yet sent
    /// (at most `max_attempts` times per file); the stuck thread is abandoned.
    Retry,
    /// Fail the pipeline with [`PipelineError::ReaderStuck`](crate::PipelineError::ReaderStuck).
    Fail,
}

/// A named set of input files with its own readers, mixed with the other
/// sets by weight (e.g. a training corpus and a second source mixed in).
///
/// Every pass reads every set's files exactly once. While more than one set
/// still has data in a pass, the shuffle stage takes instances from the sets
/// in proportion to their weights (a set that runs ahead waits, its chunks
/// unacknowledged, so its readers pause); once a set's pass is read, the
/// others go on alone. Give a slow source more readers rather than less
/// weight: weights say what the batches contain, readers how fast a set is read.
///
/// ```
/// use feedline_actors::FileSet;
/// let train = FileSet::new("train", ["data/train-*.tfrecord"]).readers(4).weight(3.0);
/// let extra = FileSet::new("extra", ["data/extra-*.tfrecord"]).readers(8).weight(1.0);
/// assert_eq!((train.readers, extra.weight), (4, 1.0));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct FileSet {
    /// The set's name (in logs and statistics).
    pub name: String,
    /// Its files: paths, globs, list files, `FORMAT:` prefixes.
    pub files: Vec<String>,
    /// Its prefetch readers (OS threads), at least 1.
    pub readers: usize,
    /// Its share of the instances while several sets have data (> 0; relative).
    pub weight: f64,
}

impl FileSet {
    /// A set of these files, with 2 readers and weight 1.
    pub fn new(name: impl Into<String>, files: impl crate::paths::IntoPaths) -> Self {
        FileSet {
            name: name.into(),
            files: files.into_paths(),
            readers: 2,
            weight: 1.0,
        }
    }

    /// Its prefetch readers.
    pub fn readers(mut self, n: usize) -> Self {
        self.readers = n;
        self
    }

    /// Its weight in the mix.
    pub fn weight(mut self, w: f64) -> Self {
        self.weight = w;
        self
    }
}

/// The inputs: which files (or file sets, or a push source), in which format, with which schema,
/// and this process's share of them.
#[derive(Clone, Debug)]
pub struct Inputs {
    /// Input files (paths, `FORMAT:`-prefixed paths; globs and list files are
    /// expanded by the builder).
    pub files: Vec<String>,
    /// Several file sets, each with its own readers, mixed by weight (instead
    /// of `files` and `readers`; see [`FileSet`]). When given, `files` and
    /// `readers` are filled in from them (all files; all readers).
    pub sets: Vec<FileSet>,
    /// A format for every file (default: by prefix or extension).
    pub format: Option<String>,
    /// The formats known.
    pub registry: Registry,
    /// The schema (default: inferred from the first file's first records).
    pub schema: Option<Schema>,
    /// This process's data-parallel shard.
    pub shard: Shard,
    /// Shard by file or by record.
    pub shard_by: ShardBy,
    /// Push mode: no files; the data is what a [`FeedHandle`](crate::FeedHandle)
    /// pushes, its instances named after this source (e.g. `"push"`). The
    /// stream is one pass; readers and sharding do not apply.
    pub push: Option<String>,
}

impl Default for Inputs {
    fn default() -> Self {
        Inputs {
            files: Vec::new(),
            sets: Vec::new(),
            format: None,
            registry: Registry::with_builtin(),
            schema: None,
            shard: Shard {
                rank: 0,
                world_size: 1,
            },
            shard_by: ShardBy::Auto,
            push: None,
        }
    }
}

/// How the prefetch readers read: how many, how files are opened, how records are cut into chunks,
/// how many chunks each may have in flight, and the cache of remote inputs.
#[derive(Clone, Debug)]
pub struct Reading {
    /// Prefetch readers (one OS thread each).
    pub readers: usize,
    /// How files are opened. The default checks a TFRecord record's CRC
    /// when its large mapped bytes are copied into a batch rather than when
    /// it is read ([`OpenOptions::defer_checksums`]: those bytes are read
    /// from memory once, not twice); the readers check as they read
    /// whenever [`Faults::error_policy`] skips bad records, so
    /// that they can skip them.
    pub open: OpenOptions,
    /// Instances per chunk, at most.
    pub chunk_records: usize,
    /// Payload bytes per chunk, at most (a chunk ends after the record that reaches it).
    pub chunk_bytes: usize,
    /// Chunks a reader may have sent but not had acknowledged.
    pub chunks_in_flight: usize,
    /// A local cache directory for remote inputs: each object is kept on
    /// disk after its first whole read, and later passes and runs read it
    /// from there (see [`feedline::remote::cache`]). `None` (the default):
    /// the one of the remote settings in force, if any
    /// (`FEEDLINE_REMOTE_CACHE_DIR`).
    pub remote_cache: Option<feedline::remote::cache::RemoteCache>,
    /// Where the record indexes of [`ShuffleMode::Global`] and
    /// [`ShuffleMode::Block`] are kept (built
    /// once per file, rebuilt when the file changes). `None` (the default):
    /// [`feedline::record_index::default_index_dir`], under the user's
    /// cache directory.
    pub index_dir: Option<std::path::PathBuf>,
}

impl Default for Reading {
    fn default() -> Self {
        Reading {
            readers: 2,
            open: OpenOptions {
                defer_checksums: true,
                ..OpenOptions::default()
            },
            chunk_records: 1024,
            chunk_bytes: 1 << 20,
            chunks_in_flight: 2,
            remote_cache: None,
            index_dir: None,
        }
    }
}

/// The order of records: passes, the seed, the file order, the shuffle pool and deterministic mode.
#[derive(Clone, Debug)]
pub struct Order {
    /// Passes (epochs); [`ENDLESS`] (`u64::MAX`): passes never run out —
    /// the run goes on until it is stopped (epochs by iteration, as the
    /// Python `Loader(passes=None)` runs them), and the bad-record count
    /// budget (`ErrorPolicy::Skip::max_bad`) is each pass's own.
    pub passes: u64,
    /// Seed of file order and shuffle.
    pub seed: u64,
    /// Shuffle pool size in instances (0: no shuffle).
    pub shuffle: usize,
    /// Instances held before draws start (default: the pool size).
    pub min_pool: Option<usize>,
    /// Byte bound of the shuffle pool.
    pub shuffle_bytes: usize,
    /// Reshuffle the file order every pass (else the given order).
    pub shuffle_files: bool,
    /// Same batches on every run, whatever the reader count and timing.
    pub deterministic: bool,
    /// Bytes of out-of-order chunks held in deterministic mode.
    pub reorder_window: usize,
    /// How records are shuffled: a streaming pool ([`ShuffleMode::Buffer`],
    /// the default), an exact permutation of each pass
    /// ([`ShuffleMode::Global`]) or one within blocks of about `shuffle`
    /// records ([`ShuffleMode::Block`]).
    pub shuffle_mode: ShuffleMode,
}

/// How the records of a pass are ordered.
///
/// ```
/// use feedline_actors::ShuffleMode;
/// assert_eq!("global".parse::<ShuffleMode>().unwrap(), ShuffleMode::Global);
/// assert_eq!(ShuffleMode::default().to_string(), "buffer");
/// assert!("perfect".parse::<ShuffleMode>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ShuffleMode {
    /// Files shuffled, records drawn from a bounded pool (`shuffle`
    /// records): streaming, any input.
    #[default]
    Buffer,
    /// Each pass an exact, uniformly random permutation of every record of
    /// the pass, drawn from `(seed, pass)`, read by position through a
    /// record index of every file (local, uncompressed inputs); the same
    /// batches whatever the readers and timing; checkpoints of constant size.
    Global,
    /// The pass's files in a permuted order, taken in groups of 16
    /// ([`feedline::global_order::BLOCK_FILES`]); each group cut into
    /// blocks of about `shuffle` records holding a slice of every file of
    /// the group; each block permuted. Read by position through the same
    /// record index as `Global`, a block's records of each file with one
    /// read. The same batches whatever the readers and timing; checkpoints
    /// of constant size.
    Block,
}

/// Bytes of a block's records one run reader holds, at most, in `block`
/// mode: where a block's records of a file take at most this, they are
/// read with one read and the block's records of the file then come from
/// memory; a larger range is read a record at a time. With one run being
/// read per reader, and two blocks of remote objects kept (the last one
/// entered, for the next run in it, and the next, fetched ahead), the
/// shard bytes a pipeline holds are at most this times its readers plus
/// two ([`PipelineConfig::block_bytes_held`], in the stated bound).
pub(crate) const BLOCK_BYTES_HELD: u64 = 32 << 20;

impl ShuffleMode {
    /// Whether records are read by position through a record index in an
    /// order drawn from `(seed, pass)` (`global` and `block`): the one
    /// place that says which modes do.
    pub fn reads_by_position(self) -> bool {
        matches!(self, ShuffleMode::Global | ShuffleMode::Block)
    }

    /// The mode's name (`buffer`, `global`, `block`).
    pub fn name(self) -> &'static str {
        match self {
            ShuffleMode::Buffer => "buffer",
            ShuffleMode::Global => "global",
            ShuffleMode::Block => "block",
        }
    }
}

impl std::fmt::Display for ShuffleMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ShuffleMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "buffer" => Ok(ShuffleMode::Buffer),
            "global" => Ok(ShuffleMode::Global),
            "block" => Ok(ShuffleMode::Block),
            other => Err(format!(
                "unknown shuffle mode {other:?}: buffer, global or block"
            )),
        }
    }
}

impl Default for Order {
    fn default() -> Self {
        Order {
            passes: 1,
            seed: 0,
            shuffle: 10_000,
            min_pool: None,
            shuffle_bytes: 256 << 20,
            shuffle_files: true,
            deterministic: false,
            reorder_window: 64 << 20,
            shuffle_mode: ShuffleMode::Buffer,
        }
    }
}

/// How instances become batches: the batch size or budget, the last partial batch, packing, equal
/// batch counts across ranks, and the batches held in flight.
#[derive(Clone, Debug)]
pub struct Batching {
    /// Batching: fixed size or a cost budget.
    pub batch: BatchPolicy,
    /// Drop the last partial batch of each pass.
    pub drop_last: bool,
    /// Sequence packing ([`feedline::pack`]): each pass's documents (the
    /// ragged token field `Pack::field` of the transforms' output, e.g.
    /// [`LoaderBuilder::tokenize`](crate::LoaderBuilder::tokenize)'s) packed
    /// into batches of `batch` rows of `Pack::length` tokens by the batch
    /// maker, after the draw; `None`: batches of instances.
    pub pack: Option<Pack>,
    /// Give every rank the same number of batches per pass (drop or pad),
    /// since unequal batch counts hang distributed training. Needs a fixed
    /// batch size; records are counted once at start-up — with packing,
    /// every document's tokens, and ranks get as many packed rows.
    pub equalize: Equalize,
    /// Batches the batch maker holds at most: being made (side by side on
    /// the transform workers), or made and not yet in the feed queue. More
    /// lets the workers go on past a batch's slowest instance (decode times
    /// are skewed, as image sizes are) at the cost of that many batches of
    /// memory ([`PipelineConfig::in_flight_bound_bytes`]); the
    /// batches and their order do not depend on it. `None` (the default):
    /// [`PipelineConfig::in_flight_batches`] decides from the
    /// transform workers and the batch size.
    pub batches_in_flight: Option<usize>,
}

impl Default for Batching {
    fn default() -> Self {
        Batching {
            batch: BatchPolicy::Fixed(256),
            drop_last: false,
            pack: None,
            equalize: Equalize::Off,
            batches_in_flight: None,
        }
    }
}

/// How batches reach the devices: how many devices, a shared queue or round-robin, and the feed
/// queue's capacity.
#[derive(Clone, Debug)]
pub struct Feeding {
    /// Devices (trainers, or per-device iterators).
    pub devices: usize,
    /// Shared queue or round-robin.
    pub feed: FeedMode,
    /// Feed-queue capacity in batches (per lane).
    pub capacity: usize,
}

impl Default for Feeding {
    fn default() -> Self {
        Feeding {
            devices: 1,
            feed: FeedMode::Shared,
            capacity: 4,
        }
    }
}

/// What happens when data or readers fail: the bad-record policy, readers' attempts on one file,
/// and stuck readers.
#[derive(Clone, Debug)]
pub struct Faults {
    /// Bad-record policy.
    pub error_policy: ErrorPolicy,
    /// Readers that may fail (panic, or stall) on one file before the pass fails.
    pub max_attempts: u32,
    /// A reader inside one open or read for longer than this is stuck (`None`: never).
    pub stall_timeout: Option<std::time::Duration>,
    /// What to do with a stuck reader.
    pub on_stall: StallPolicy,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            error_policy: ErrorPolicy::Fail,
            max_attempts: 3,
            stall_timeout: Some(std::time::Duration::from_secs(60)),
            on_stall: StallPolicy::Retry,
        }
    }
}

/// Where a run starts and what it keeps to go on from: the first pass and the draw's snapshots for
/// checkpoints.
#[derive(Clone, Debug)]
pub struct Resume {
    /// The pass the run starts with (default 0): passes `first_pass..passes`
    /// run, each as it would in a run started at pass 0 (the same files,
    /// the same order; in deterministic mode the same batches). A resume
    /// says where it starts itself: the two do not go together.
    pub first_pass: u64,
    /// Deterministic mode: the shuffle stage snapshots its draw before
    /// every `snapshot_every`-th batch of a pass, for checkpoints (a resume
    /// draws on from the latest snapshot before its first batch instead of
    /// from the pass's start); 0 = never. It does not change the batches.
    pub snapshot_every: u64,
}

impl Default for Resume {
    fn default() -> Self {
        Resume {
            first_pass: 0,
            snapshot_every: SNAPSHOT_EVERY,
        }
    }
}

/// What the pipeline shows outside while it runs: the address its
/// Prometheus metrics are served on (feature `metrics`; see
/// [`crate::metrics`]).
#[derive(Clone, Debug, Default)]
pub struct Monitoring {
    /// Serve the OpenMetrics text at `http://HOST:PORT/metrics` (`None`,
    /// the default: no port is opened). Checked by
    /// [`PipelineConfig::check`] (`HOST:PORT`, the `metrics` feature
    /// compiled in); a port already in use is an error naming it when the
    /// pipeline starts.
    pub metrics_addr: Option<String>,
}

/// Tuning while the pipeline runs ([`crate::autotune`]): the autotuner's
/// budgets when it is on, and which of the settings it tunes the user gave
/// (those it leaves as given).
#[derive(Clone, Debug, Default)]
pub struct Tuning {
    /// Tune readers' chunks in flight, transform workers and batches in
    /// flight while the pipeline runs, within these budgets (`None`, the
    /// default: no tuning).
    pub autotune: Option<Autotune>,
    /// The tuned settings the user gave: left as given. (Batches in flight
    /// given is [`Batching::batches_in_flight`] set.)
    pub fixed: FixedSettings,
    /// How long each of the tuner's measurement intervals lasts (`None`:
    /// [`crate::autotune::INTERVAL`]); tests shorten it.
    #[doc(hidden)]
    pub interval: Option<std::time::Duration>,
}

/// Autotuning and its budgets
/// ([`LoaderBuilder::autotune`](crate::LoaderBuilder::autotune), see
/// [`crate::autotune`]).
///
/// ```
/// use feedline_actors::Autotune;
/// let a = Autotune { cpus: Some(8), memory_budget: Some(2 << 30) };
/// assert_eq!((a.resolved_cpus(), a.resolved_memory_budget()), (8, 2 << 30));
/// assert!(Autotune::default().resolved_cpus() >= 1);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Autotune {
    /// Cores of CPU time the process may use: the tuner adds a reader or
    /// worker only while it used less, each pool at most this many threads
    /// ([`Budgets`](crate::autotune::Budgets); `None`: the cores this
    /// process may use, [`available_cpus`]).
    pub cpus: Option<usize>,
    /// Bytes the stated in-flight bound may reach (`None`: a quarter of the
    /// memory this process may use, [`available_memory`]).
    pub memory_budget: Option<u64>,
}

impl Autotune {
    /// The CPU budget in force.
    pub fn resolved_cpus(&self) -> usize {
        self.cpus.unwrap_or_else(available_cpus)
    }

    /// The memory budget in force, in bytes.
    pub fn resolved_memory_budget(&self) -> u64 {
        self.memory_budget
            .unwrap_or_else(|| available_memory().map_or(1 << 30, |m| m / 4))
    }
}

/// The cores this process may use: its CPU affinity and cgroup quota
/// ([`std::thread::available_parallelism`]); 1 when unknown.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The memory this process may use: its cgroup v2 limit (`memory.max` of
/// its cgroup, or of the root one, when a number), else the machine's
/// (`MemTotal` of `/proc/meminfo`); `None` when neither can be read.
pub fn available_memory() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("0::").map(|p| p.trim().to_string()))
        });
    let limits = own
        .map(|p| format!("/sys/fs/cgroup{p}/memory.max"))
        .into_iter()
        .chain(["/sys/fs/cgroup/memory.max".to_string()]);
    for path in limits {
        if let Some(n) = std::fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
        {
            return Some(n);
        }
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb = meminfo.lines().find_map(|l| {
        l.strip_prefix("MemTotal:")?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse::<u64>()
            .ok()
    })?;
    Some(kb * 1024)
}

/// Under autotuning, which of the tuned settings are the tuner's: not
/// given, and of this pipeline ([`PipelineConfig::tuners_settings`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TunersSettings {
    /// The readers, chosen as the pipeline starts (of files, not file
    /// sets nor a push source).
    pub readers: bool,
    /// The transform workers (with an instance map).
    pub workers: bool,
    /// The batches in flight.
    pub batches_in_flight: bool,
    /// The readers' chunks in flight (not in push mode).
    pub chunks_in_flight: bool,
    /// The shuffle pool's byte bound, sized once as the pipeline starts
    /// (with a shuffle pool).
    pub shuffle_bytes: bool,
}

/// Which of the settings the autotuner would tune were given by the user
/// (the builder's methods, the command's flags, Python's keywords note
/// them): the tuner leaves those as given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FixedSettings {
    /// Readers given.
    pub readers: bool,
    /// Transform workers given.
    pub workers: bool,
    /// Chunks in flight per reader given.
    pub chunks_in_flight: bool,
    /// The shuffle pool's byte bound given (not given, a tuned pipeline
    /// sizes it from the memory budget: [`crate::autotune::pool_bytes`]).
    pub shuffle_bytes: bool,
}

/// Every setting of a pipeline, by concern: each group is a value of its
/// own with its own defaults, and [`check`](Self::check) judges them all
/// together.
#[derive(Clone, Debug, Default)]
pub struct PipelineConfig {
    /// The inputs: which files (or file sets, or a push source), in which format, with which
    /// schema, and this process's share of them.
    pub inputs: Inputs,
    /// How the prefetch readers read: how many, how files are opened, how records are cut into
    /// chunks, how many chunks each may have in flight, and the cache of remote inputs.
    pub reading: Reading,
    /// The order of records: passes, the seed, the file order, the shuffle pool and deterministic
    /// mode.
    pub order: Order,
    /// How instances become batches: the batch size or budget, the last partial batch, packing,
    /// equal batch counts across ranks, and the batches held in flight.
    pub batching: Batching,
    /// User work in the pipeline: a record filter / map on the readers, a
    /// per-instance map on `transforms.workers` transform workers after the
    /// shuffle draw, a batch map after collation (see [`feedline::transform`]).
    pub transforms: Transforms,
    /// How batches reach the devices: how many devices, a shared queue or round-robin, and the feed
    /// queue's capacity.
    pub feeding: Feeding,
    /// What happens when data or readers fail: the bad-record policy, readers' attempts on one
    /// file, and stuck readers.
    pub faults: Faults,
    /// Where a run starts and what it keeps to go on from: the first pass and the draw's snapshots
    /// for checkpoints.
    pub resume: Resume,
    /// What the pipeline shows outside while it runs: the Prometheus metrics' address.
    pub monitoring: Monitoring,
    /// Tuning while it runs ([`crate::autotune`]): whether, within which
    /// budgets, and which of the tuned settings the user fixed.
    pub tuning: Tuning,
    /// What the face that made these settings was given, for the rules of
    /// settings that apply only with others ([`Given`]).
    pub given: Given,
}

/// [`Order::passes`] of a run whose passes never run out.
pub const ENDLESS: u64 = u64::MAX;

/// A packing setting that the packing policy does not use: concat fills one
/// row at a time, so it has no window of open rows (`pack_window`), and cuts
/// every document where a row ends whatever its length, so it has no
/// long-document policy (`long_docs`). The one judge of it:
/// [`PipelineConfig::check`] asks for the settings given ([`Given`]), or,
/// where a face did not say, for those that differ from their defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnusedPackSetting {
    /// The setting, by its key: `pack_window` or `long_docs`.
    pub setting: &'static str,
    /// Its value as given.
    pub value: String,
    /// The policy that does not use it.
    pub policy: PackPolicy,
    /// Why the policy does not use it.
    pub why: &'static str,
}

impl UnusedPackSetting {
    /// The first of the settings given (`window`, `long_docs`: `None` when
    /// not given) that `policy` would ignore.
    ///
    /// ```
    /// use feedline_actors::{LongDocs, PackPolicy, UnusedPackSetting};
    /// let u = UnusedPackSetting::of(PackPolicy::Concat, None, Some(LongDocs::Drop)).unwrap();
    /// assert_eq!((u.setting, u.value.as_str()), ("long_docs", "drop"));
    /// assert!(UnusedPackSetting::of(PackPolicy::BestFit, Some(16), Some(LongDocs::Drop)).is_none());
    /// ```
    pub fn of(
        policy: PackPolicy,
        window: Option<usize>,
        long_docs: Option<LongDocs>,
    ) -> Option<UnusedPackSetting> {
        if policy != PackPolicy::Concat {
            return None;
        }
        if let Some(w) = window {
            return Some(UnusedPackSetting {
                setting: "pack_window",
                value: w.to_string(),
                policy,
                why: "concat fills one row at a time: it holds no window of open rows",
            });
        }
        long_docs.map(|l| UnusedPackSetting {
            setting: "long_docs",
            value: l.to_string(),
            policy,
            why: "concat cuts every document where a row ends, whatever its length",
        })
    }

    /// The refusal, by key: `pack_window(16) does not apply with
    /// pack_policy("concat") (…)` as the builder spells it.
    pub fn error(&self) -> SettingError {
        let (setting, value) = match self.setting {
            "pack_window" => (Setting::PackWindow, Value::number(&self.value)),
            _ => (Setting::LongDocs, Value::text(&self.value)),
        };
        SettingError::given(setting, value)
            .text(" does not apply with ")
            .with(Setting::PackPolicy, Value::text(self.policy))
            .text(format!(" ({}): leave ", self.why))
            .named(setting)
            .text(" out, or give ")
            .named(Setting::PackPolicy)
            .text(" best-fit or first-fit")
    }
}

/// As the builder spells the settings ([`error`](UnusedPackSetting::error)).
impl std::fmt::Display for UnusedPackSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error().fmt(f)
    }
}

/// What a face was given that the settings' values cannot tell: a setting
/// that applies only with another is refused when given without it (or
/// with one that ignores it) — a value given at its default is still
/// given. The command and Python fill it in from their flags and keywords;
/// the Rust builder notes which instance transform it was given. Judged by
/// [`PipelineConfig::check`] with every other rule.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Given {
    /// Readers given (file sets give their own).
    pub readers: Option<usize>,
    /// The shuffle pool's byte bound given.
    pub shuffle_bytes: Option<usize>,
    /// A skipped-record budget given (it needs the skip policy).
    pub max_bad: Option<u64>,
    /// The packing policy given.
    pub pack_policy: Option<PackPolicy>,
    /// The packing window given.
    pub pack_window: Option<usize>,
    /// The long-document policy given.
    pub long_docs: Option<LongDocs>,
    /// The packed token field given.
    pub pack_field: bool,
    /// A tokenizer given as the instance transform.
    pub tokenizer: bool,
    /// A map of user code given as the instance transform.
    pub map: bool,
    /// A built-in image transform given as the instance transform.
    pub transform: bool,
    /// The image transform's pixel limit given.
    pub max_pixels: Option<u64>,
    /// The map's output schema given.
    pub map_schema: bool,
    /// Transform workers given.
    pub workers: Option<usize>,
    /// The tokenizer's text field given.
    pub text_field: bool,
    /// The tokenizer's EOS asked for.
    pub add_eos: bool,
    /// The tokenizer's BOS asked for.
    pub add_bos: bool,
    /// The autotuner's CPU budget given (it needs autotuning).
    pub cpus: Option<usize>,
    /// The autotuner's memory budget given (it needs autotuning).
    pub memory_budget: Option<u64>,
}

impl Given {
    /// The instance transform's settings: one of a tokenizer, a map and an
    /// image transform, and each of their settings only with its own (the
    /// command's `cat` asks this alone; [`PipelineConfig::check`] asks it
    /// with every other rule).
    pub fn check_transforms(&self) -> Result<(), SettingError> {
        use Setting as S;
        let g = self;
        // The instance transform: one of a tokenizer, a map, an image transform.
        if g.tokenizer && (g.map || g.transform) {
            return Err(SettingError::says("give ")
                .named(S::Tokenizer)
                .text(" or ")
                .named(if g.map { S::Map } else { S::Transform })
                .text(", not both (the tokenizer is the instance transform)"));
        }
        if g.map && g.transform {
            return Err(SettingError::says("give ")
                .named(S::Map)
                .text(" or ")
                .named(S::Transform)
                .text(", not both (a map after the built-in transform is not supported)"));
        }
        if !g.tokenizer {
            let given = [
                (g.text_field, S::TextField),
                (g.add_eos, S::AddEos),
                (g.add_bos, S::AddBos),
            ];
            if let Some((_, s)) = given.into_iter().find(|(given, _)| *given) {
                return Err(SettingError::name(s)
                    .text(" applies only with ")
                    .named(S::Tokenizer));
            }
        }
        if let Some(n) = g.max_pixels {
            if !g.transform {
                return Err(num(S::MaxPixels, n)
                    .text(" applies only with ")
                    .named(S::Transform)
                    .text(" (the images it decodes)"));
            }
            if n == 0 {
                return Err(SettingError::name(S::MaxPixels).text(" must be at least 1, not 0"));
            }
        }
        if g.map_schema && !g.map {
            return Err(SettingError::name(S::MapSchema)
                .text(" applies only with ")
                .named(S::Map)
                .text(": the built-in transforms know their output"));
        }
        if let (Some(n), false) = (g.workers, g.map || g.transform || g.tokenizer) {
            return Err(num(S::Workers, n)
                .text(" applies only with ")
                .named(S::Transform)
                .text(", ")
                .named(S::Tokenizer)
                .text(" or ")
                .named(S::Map)
                .text(" (the transform workers)"));
        }
        Ok(())
    }
}

/// `Err` of a [`SettingError`].
/// The data-parallel shard of a face that was given a rank, a world size,
/// both or neither: each one not given comes from `RANK` / `WORLD_SIZE`,
/// else 0 / 1 (`None`: neither was given, nor is either variable set).
/// The one rule of every face (the command's `--rank`/`--world-size`,
/// Python's `rank=`/`world_size=`, `feedline.torch.IterableDataset`); a
/// refusal names the variable and which values were given, as the face
/// spells them.
///
/// ```
/// use feedline_actors::{shard_given, Shard};
/// assert_eq!(shard_given(Some(1), Some(4)).unwrap(), Some(Shard { rank: 1, world_size: 4 }));
/// let e = shard_given(Some(3), Some(2)).unwrap_err();
/// assert_eq!(
///     e.to_string(),
///     "RANK=3 is out of range for WORLD_SIZE=2 (ranks are 0..2) \
///      (RANK from rank, WORLD_SIZE from world_size)"
/// );
/// ```
pub fn shard_given(
    rank: Option<usize>,
    world_size: Option<usize>,
) -> Result<Option<Shard>, SettingError> {
    let env = |name: &str| std::env::var(name).ok();
    let rank_text = rank.map(|r| r.to_string()).or_else(|| env("RANK"));
    let world_text = world_size
        .map(|w| w.to_string())
        .or_else(|| env("WORLD_SIZE"));
    if rank_text.is_none() && world_text.is_none() {
        return Ok(None);
    }
    Shard::from_vars(rank_text.as_deref(), world_text.as_deref())
        .map(Some)
        .map_err(|e| {
            let said = match e {
                feedline::Error::Config(s) => s,
                other => other.to_string(),
            };
            let from_face: Vec<(&str, Setting)> = [
                rank.map(|_| ("RANK", Setting::Rank)),
                world_size.map(|_| ("WORLD_SIZE", Setting::WorldSize)),
            ]
            .into_iter()
            .flatten()
            .collect();
            let mut sentence = SettingError::says(said);
            for (i, (var, setting)) in from_face.iter().enumerate() {
                let lead = if i == 0 { " (" } else { ", " };
                sentence = sentence.text(format!("{lead}{var} from ")).named(*setting);
            }
            if from_face.is_empty() {
                sentence.text(" (from the environment)")
            } else {
                sentence.text(")")
            }
        })
}

/// Check a metrics address: `HOST:PORT` (an IP address or a host name, a
/// port number), with the `metrics` feature compiled in. Nothing is
/// resolved or opened here: the pipeline binds it when it starts.
pub(crate) fn check_metrics_addr(addr: &str) -> Result<(), SettingError> {
    let given = || SettingError::given(Setting::MetricsAddr, Value::text(addr));
    if !cfg!(feature = "metrics") {
        return Err(given().text(
            ": Prometheus metrics are not compiled in: enable the `metrics` feature of feedline-actors",
        ));
    }
    if addr.parse::<std::net::SocketAddr>().is_ok() {
        return Ok(());
    }
    let well_formed = addr.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty()
            && !host.contains(['[', ']', '/', ' '])
            && !host.contains(':')
            && port.parse::<u16>().is_ok()
    });
    match well_formed {
        true => Ok(()),
        false => Err(given()
            .text(" must be HOST:PORT (such as 127.0.0.1:9464, [::1]:9464 or localhost:9464)")),
    }
}

fn refuse(e: SettingError) -> Result<(), PipelineError> {
    Err(PipelineError::Config(e))
}

/// `setting` given `n`.
fn num(setting: Setting, n: impl std::fmt::Display) -> SettingError {
    SettingError::given(setting, Value::number(n))
}

impl PipelineConfig {
    /// Whether the batches are the same whatever the readers and timing:
    /// asked for (`deterministic`), or the global order's (always).
    pub fn deterministic(&self) -> bool {
        self.order.deterministic || self.order.shuffle_mode.reads_by_position()
    }

    /// Check every setting — the one place that does — before anything
    /// starts: an error names the setting by key ([`Setting`]), its value
    /// and what it must be, and each face spells the keys its own way.
    /// `passes(0)` is refused (a pipeline of no passes would only end).
    pub fn check(&self) -> Result<(), PipelineError> {
        use Setting as S;
        self.check_given()?;
        if let Some(addr) = &self.monitoring.metrics_addr {
            check_metrics_addr(addr).map_err(PipelineError::Config)?;
        }
        let at_least_1 = [
            (S::Passes, self.order.passes),
            (S::ChunkRecords, self.reading.chunk_records as u64),
            (S::ChunkBytes, self.reading.chunk_bytes as u64),
            (S::ChunksInFlight, self.reading.chunks_in_flight as u64),
            (S::ShuffleBytes, self.order.shuffle_bytes as u64),
            (S::Capacity, self.feeding.capacity as u64),
            (
                S::BatchesInFlight,
                self.batching.batches_in_flight.unwrap_or(1) as u64,
            ),
            (S::Devices, self.feeding.devices as u64),
            (S::MaxAttempts, u64::from(self.faults.max_attempts)),
        ];
        for (setting, v) in at_least_1 {
            if v == 0 {
                return refuse(SettingError::name(setting).text(" must be at least 1, not 0"));
            }
        }
        if self.resume.first_pass >= self.order.passes {
            return refuse(
                SettingError::name(S::FirstPass)
                    .text(" must be below ")
                    .named(S::Passes)
                    .text(format!(
                        " ({}), not {}",
                        self.order.passes, self.resume.first_pass
                    )),
            );
        }
        if self.inputs.push.is_some() && self.resume.first_pass > 0 {
            return refuse(SettingError::name(S::FirstPass).text(format!(
                " must be 0 in push mode (the pushed stream is one pass), not {}",
                self.resume.first_pass
            )));
        }
        match self.order.shuffle_mode {
            mode if mode.reads_by_position() && self.inputs.push.is_some() => {
                return refuse(
                    SettingError::given(S::ShuffleMode, Value::text(mode.name()))
                        .text(" needs files to read by position, not a ")
                        .named(S::PushSource),
                );
            }
            ShuffleMode::Block if self.order.shuffle == 0 => {
                return refuse(
                    SettingError::name(S::Shuffle)
                        .text(" (the records of a block) must be at least 1 with ")
                        .with(S::ShuffleMode, Value::text("block"))
                        .text(", not 0"),
                );
            }
            _ => {}
        }
        if self.order.deterministic && self.order.reorder_window == 0 {
            return refuse(
                SettingError::name(S::ReorderWindow)
                    .text(" must be at least 1 byte in deterministic mode, not 0"),
            );
        }
        if let Some(k) = self
            .batching
            .batches_in_flight
            .filter(|&k| k > MAX_BATCHES_IN_FLIGHT)
        {
            return refuse(
                SettingError::name(S::BatchesInFlight)
                    .text(format!(" must be at most {MAX_BATCHES_IN_FLIGHT}, not {k}")),
            );
        }
        if self.feeding.devices > MAX_DEVICES {
            return refuse(SettingError::name(S::Devices).text(format!(
                " must be at most {MAX_DEVICES}, not {}",
                self.feeding.devices
            )));
        }
        if self.inputs.sets.is_empty() && self.inputs.push.is_none() {
            if self.reading.readers == 0 {
                return refuse(SettingError::name(S::Readers).text(" must be at least 1, not 0"));
            }
            if self.reading.readers > MAX_READERS {
                return refuse(SettingError::name(S::Readers).text(format!(
                    " must be at most {MAX_READERS}, not {}",
                    self.reading.readers
                )));
            }
        }
        for set in &self.inputs.sets {
            if set.readers == 0 {
                return refuse(SettingError::says(format!(
                    "file set {:?}: readers must be at least 1, not 0",
                    set.name
                )));
            }
            if !(set.weight.is_finite() && set.weight > 0.0) {
                return refuse(SettingError::says(format!(
                    "file set {:?}: weight must be a positive number, not {}",
                    set.name, set.weight
                )));
            }
        }
        if self.transforms.instance.is_some() {
            if self.transforms.workers == 0 {
                return refuse(
                    SettingError::says("transform ")
                        .named(S::Workers)
                        .text(" must be at least 1, not 0"),
                );
            }
            if self.transforms.workers > MAX_READERS {
                return refuse(
                    SettingError::says("transform ")
                        .named(S::Workers)
                        .text(format!(
                            " must be at most {MAX_READERS}, not {}",
                            self.transforms.workers
                        )),
                );
            }
        }
        let set_readers: usize = self.inputs.sets.iter().map(|s| s.readers).sum();
        if set_readers > MAX_READERS {
            return refuse(SettingError::says(format!(
                "the file sets' readers must be at most {MAX_READERS} together, not {set_readers}"
            )));
        }
        if let Some(t) = self.faults.stall_timeout {
            if t.is_zero() {
                return refuse(
                    SettingError::name(S::StallTimeout).text(" must be more than 0 (None: never)"),
                );
            }
        }
        let Shard { rank, world_size } = self.inputs.shard;
        if world_size == 0 || rank >= world_size {
            return refuse(SettingError::name(S::Shard).text(format!(
                ": rank must be below world_size, at least 1 (rank {rank} of {world_size})"
            )));
        }
        if let ErrorPolicy::Skip {
            max_bad_fraction: Some(f),
            ..
        } = self.faults.error_policy
        {
            if !(0.0..=1.0).contains(&f) {
                return refuse(
                    SettingError::name(S::MaxBadFraction)
                        .text(format!(" must be within 0..=1, not {f}")),
                );
            }
        }
        if let Some(p) = &self.batching.pack {
            p.check().map_err(|m| {
                PipelineError::Config(num(S::Pack, p.length).text(format!(": {m}")))
            })?;
            // What a face gave, else the settings that differ from their
            // defaults (the builder's `Pack` cannot say what was given).
            let window =
                (self.given.pack_window).or((p.window != DEFAULT_PACK_WINDOW).then_some(p.window));
            let long_docs =
                (self.given.long_docs).or((p.long_docs != LongDocs::Split).then_some(p.long_docs));
            if let Some(unused) = UnusedPackSetting::of(p.policy, window, long_docs) {
                return refuse(unused.error());
            }
            if !matches!(self.batching.batch, BatchPolicy::Fixed(_)) {
                return refuse(
                    SettingError::says("packing (")
                        .named(S::Pack)
                        .text(") needs a fixed batch size (")
                        .named(S::Batch)
                        .text(": the rows of a packed batch)"),
                );
            }
            if self.batching.drop_last {
                return refuse(
                    SettingError::name(S::DropLast)
                        .text(" with ")
                        .with(S::Pack, Value::number(p.length))
                        .text(": a pass's last packed batch is filled with padding rows (segment ids 0), not dropped"),
                );
            }
            if self.inputs.push.is_some() {
                return refuse(
                    SettingError::says("packing (")
                        .named(S::Pack)
                        .text(") reads files: push mode does not pack"),
                );
            }
        }
        if self.batching.equalize != Equalize::Off
            && !matches!(self.batching.batch, BatchPolicy::Fixed(_))
        {
            return refuse(
                SettingError::says("equalizing ranks (")
                    .named(S::Equalize)
                    .text(") needs a fixed batch size"),
            );
        }
        if let Some(m) = self.order.min_pool {
            if self.order.shuffle == 0 {
                return refuse(
                    num(S::MinPool, m)
                        .text(" applies only with a shuffle pool (")
                        .with(S::Shuffle, Value::number(0))
                        .text(" does not shuffle): give ")
                        .named(S::Shuffle)
                        .text(" N"),
                );
            }
            if m > self.order.shuffle {
                return refuse(
                    num(S::MinPool, m)
                        .text(" is more than the pool holds (")
                        .with(S::Shuffle, Value::number(self.order.shuffle))
                        .text(format!("): give at most {}", self.order.shuffle)),
                );
            }
        }
        self.check_inputs()?;
        self.check_tuning()?;
        self.batching.batch.validate().map_err(|e| match e {
            feedline::Error::Config(m) => PipelineError::Config(
                num(
                    S::Batch,
                    match &self.batching.batch {
                        BatchPolicy::Fixed(n) => n.to_string(),
                        _ => "budget".into(),
                    },
                )
                .text(format!(": {m}")),
            ),
            e => e.into(),
        })
    }

    /// The settings that apply only with others ([`Given`]): each given
    /// without the one it needs, or with one that excludes it, is refused.
    fn check_given(&self) -> Result<(), PipelineError> {
        use Setting as S;
        let g = &self.given;
        if let (Some(n), false) = (g.readers, self.inputs.sets.is_empty()) {
            return refuse(
                num(S::Readers, n)
                    .text(" does not apply with file sets: each set gives its own readers (")
                    .named(S::FileSet)
                    .text(")"),
            );
        }
        if let (Some(n), ErrorPolicy::Fail) = (g.max_bad, &self.faults.error_policy) {
            return refuse(
                num(S::MaxBad, n)
                    .text(" applies only with ")
                    .with(S::OnError, Value::text("skip"))
                    .text(" (with ")
                    .with(S::OnError, Value::text("fail"))
                    .text(" the first bad record stops the run): add ")
                    .with(S::OnError, Value::text("skip")),
            );
        }
        if let (Some(b), 0) = (g.shuffle_bytes, self.order.shuffle) {
            return refuse(
                num(S::ShuffleBytes, b)
                    .text(" applies only with a shuffle pool (")
                    .with(S::Shuffle, Value::number(0))
                    .text(" does not shuffle): give ")
                    .named(S::Shuffle)
                    .text(" N"),
            );
        }
        g.check_transforms().map_err(PipelineError::Config)?;
        if self.tuning.autotune.is_none() {
            let given = [
                g.cpus.map(|n| num(S::Cpus, n)),
                g.memory_budget.map(|b| num(S::MemoryBudget, b)),
            ];
            if let Some(e) = given.into_iter().flatten().next() {
                return refuse(
                    e.text(" applies only with ")
                        .named(S::Autotune)
                        .text(" (the budget it tunes within)"),
                );
            }
        }
        if self.batching.pack.is_none() {
            let given = [
                g.pack_policy.is_some().then_some(S::PackPolicy),
                g.pack_window.map(|_| S::PackWindow),
                g.long_docs.map(|_| S::LongDocs),
                g.pack_field.then_some(S::PackField),
            ];
            if let Some(s) = given.into_iter().flatten().next() {
                return refuse(
                    SettingError::name(s)
                        .text(" applies only with ")
                        .named(S::Pack)
                        .text(" (packing)"),
                );
            }
        }
        Ok(())
    }

    /// The autotuner's budgets: at least 1 CPU and 1 byte, and no less than
    /// the fewest threads and the smallest in-flight bound the pipeline
    /// can run with (the tuned settings at their least, the others as
    /// given; the bound for records of 0 bytes: what does not grow with the
    /// records — the reorder window, the transform workers' working
    /// memory, remote parts).
    fn check_tuning(&self) -> Result<(), PipelineError> {
        use Setting as S;
        let Some(tune) = &self.tuning.autotune else {
            return Ok(());
        };
        if tune.cpus == Some(0) {
            return refuse(SettingError::name(S::Cpus).text(" must be at least 1, not 0"));
        }
        if tune.memory_budget == Some(0) {
            return refuse(
                SettingError::name(S::MemoryBudget).text(" must be at least 1 byte, not 0"),
            );
        }
        let least = self.least_tuned();
        let (readers, workers) = least.threads();
        let cpus = tune.resolved_cpus();
        if readers.max(workers) > cpus {
            let why = match tune.cpus {
                Some(_) => num(S::Cpus, cpus),
                None => SettingError::says(format!("the {cpus} CPUs this process may use ("))
                    .named(S::Cpus)
                    .text(")"),
            };
            return refuse(why.text(format!(
                " is fewer than the threads the pipeline needs at least in one pool: {readers} readers and {workers} transform workers (each pool at most the CPU budget)"
            )));
        }
        let memory = tune.resolved_memory_budget();
        let bound = least.in_flight_bound_bytes(0) as u64;
        if bound > memory {
            let why = match tune.memory_budget {
                Some(_) => num(S::MemoryBudget, memory),
                None => SettingError::says(format!(
                    "a quarter of the memory this process may use ({memory} bytes, "
                ))
                .named(S::MemoryBudget)
                .text(")"),
            };
            return refuse(why.text(format!(
                " is below the least in-flight bound of these settings, {bound} bytes \
                 (the reorder window, the transform workers' working memory and remote parts, \
                 with the tuned settings at their least)"
            )));
        }
        Ok(())
    }

    /// Under autotuning, which of the tuned settings are the tuner's: those
    /// not given that this pipeline has — the one place that says it.
    pub(crate) fn tuners_settings(&self) -> TunersSettings {
        let fixed = &self.tuning.fixed;
        let files = self.inputs.push.is_none();
        TunersSettings {
            readers: !fixed.readers && files && self.inputs.sets.is_empty(),
            workers: !fixed.workers && self.transforms.instance.is_some(),
            batches_in_flight: self.batching.batches_in_flight.is_none(),
            chunks_in_flight: !fixed.chunks_in_flight && files,
            shuffle_bytes: !fixed.shuffle_bytes && self.order.shuffle > 0,
        }
    }

    /// These settings with the tuner's at their least (1 reader, 1
    /// worker, [`MIN_BATCHES_IN_FLIGHT`], 1 chunk in flight): what the
    /// budgets are held against.
    fn least_tuned(&self) -> PipelineConfig {
        let t = self.tuners_settings();
        let mut c = self.clone();
        if t.readers {
            c.reading.readers = 1;
        }
        if t.workers {
            c.transforms.workers = 1;
        }
        if t.batches_in_flight {
            c.batching.batches_in_flight = Some(MIN_BATCHES_IN_FLIGHT);
        }
        if t.chunks_in_flight {
            c.reading.chunks_in_flight = 1;
        }
        c
    }

    /// The readers (0 in push mode; the file sets' together) and the
    /// transform workers (0 without an instance map) these settings start.
    pub(crate) fn threads(&self) -> (usize, usize) {
        let readers = match (&self.inputs.push, self.inputs.sets.is_empty()) {
            (Some(_), _) => 0,
            (None, true) => self.reading.readers,
            (None, false) => self.inputs.sets.iter().map(|s| s.readers).sum(),
        };
        let workers = match self.transforms.instance {
            Some(_) => self.transforms.workers,
            None => 0,
        };
        (readers, workers)
    }

    /// The inputs: files or file sets (not both, at least one), or a push
    /// source (neither); set names unique; no equalizing with sets.
    fn check_inputs(&self) -> Result<(), PipelineError> {
        use Setting as S;
        if self.inputs.push.is_some() {
            if !self.inputs.sets.is_empty() {
                return refuse(SettingError::says("push mode reads no file sets"));
            }
            if !self.inputs.files.is_empty() {
                return refuse(SettingError::says(format!(
                    "push mode reads no files ({} given); to mix user code with files use generator sources",
                    self.inputs.files.len()
                )));
            }
            if self.inputs.schema.is_none() {
                return refuse(
                    SettingError::says("push mode needs a ")
                        .named(S::Schema)
                        .text(" (there are no files to infer it from)"),
                );
            }
            return Ok(());
        }
        if self.inputs.sets.is_empty() {
            if self.inputs.files.is_empty() {
                return refuse(
                    SettingError::says("no input files: give ")
                        .named(S::Files)
                        .text(" or ")
                        .named(S::FileSet),
                );
            }
            return Ok(());
        }
        if !self.inputs.files.is_empty() {
            return refuse(
                SettingError::says(format!(
                    "give files or file sets, not both ({} ",
                    self.inputs.files.len()
                ))
                .named(S::Files)
                .text(format!(" and {} ", self.inputs.sets.len()))
                .named(S::FileSet)
                .text("): put the files in a set of their own"),
            );
        }
        if self.batching.equalize != Equalize::Off {
            return refuse(
                SettingError::says("equalizing ranks (")
                    .named(S::Equalize)
                    .text(") is not supported with file sets"),
            );
        }
        let mut names = std::collections::HashSet::new();
        if let Some(set) = self.inputs.sets.iter().find(|s| !names.insert(&s.name)) {
            return refuse(SettingError::says(format!(
                "two file sets are named {:?}",
                set.name
            )));
        }
        Ok(())
    }
    /// Upper bound of the payload bytes the pipeline holds, for records of
    /// `record_bytes`:
    /// - chunks: each reader's unacknowledged chunks plus the one it reads;
    /// - the shuffle pool: a held row keeps its whole chunk alive, so the
    ///   pool is bounded by `shuffle_bytes` (plus one chunk of overshoot) or
    ///   by one chunk per held row, whichever is less;
    /// - the end-of-pass drain, which collates what the pool held;
    /// - batches: the queue, one being pushed, and per device one in use and
    ///   one requested ahead;
    /// - batch making ([`Batching::batches_in_flight`] `= K`):
    ///   the drawn rows of up to `2K` batches waiting to be made (handed
    ///   over, and in the order queue), and the batch maker's `K` batches
    ///   — their rows, and the batches made of them (with packing: being
    ///   made, or made and their documents being packed).
    /// - packing ([`Batching::pack`]): the window's open rows, the rows
    ///   made waiting for a batch, and the packed batches — in the queue
    ///   and up to `K` made waiting for room in it. A document is held
    ///   once, in its made batch (`record_bytes`), while its packed
    ///   batches are made one at a time, however long it is. With an instance map
    ///   ([`transforms`](Self::transforms)) the outputs are written into
    ///   the batch, so a decoded instance exists only there. The pool,
    ///   chunks and drain hold the *encoded* records; give `record_bytes`
    ///   as the larger of a record's encoded and transformed size (the
    ///   batches hold the latter).
    ///
    /// - remote inputs (`s3://`, `gs://`, `http(s)://`): each reader's
    ///   ranged-GET parts, the one being read and those requested ahead
    ///   ([`remote_read_ahead_bytes`](Self::remote_read_ahead_bytes)).
    ///
    /// - `block` shuffle mode: the block's records each reader holds
    ///   ([`block_bytes_held`](Self::block_bytes_held)).
    ///
    /// - transform workers: each worker's working memory, as the instance
    ///   map states it ([`InstanceMap::working_memory_bytes`]: for an image
    ///   transform, its decode buffer, resampling rows and the decoder's own
    ///   memory for the largest image its pixel limit lets through),
    ///   times [`transforms.workers`](feedline::transform::Transforms::workers).
    ///
    /// Not in the bound: memory-mapped input files' file-backed,
    /// reclaimable pages.
    ///
    /// [`InstanceMap::working_memory_bytes`]: feedline::transform::InstanceMap::working_memory_bytes
    pub fn in_flight_bound_bytes(&self, record_bytes: usize) -> usize {
        let chunk = (self.reading.chunk_bytes + record_bytes)
            .min(self.reading.chunk_records.max(1) * record_bytes);
        let chunks = self.reading.readers * (self.reading.chunks_in_flight + 1) * chunk;
        let pool_rows = self
            .order
            .shuffle
            .saturating_add(self.reading.chunk_records);
        let pool = (self.order.shuffle_bytes + chunk).min(pool_rows.saturating_mul(chunk));
        let drain = self
            .order
            .shuffle_bytes
            .min(pool_rows.saturating_mul(record_bytes));
        let lanes = self.feeding.feed.lanes(self.feeding.devices).count();
        let batch = match &self.batching.batch {
            BatchPolicy::Fixed(n) => *n,
            _ => self.reading.chunk_records,
        };
        let batches = lanes * self.feeding.capacity + 1 + 2 * self.feeding.devices;
        let reorder = if self.order.deterministic {
            self.order.reorder_window
        } else {
            0
        };
        let making = 4 * self.in_flight_batches() * batch * record_bytes;
        // Packing: the open rows (at most one per document held, and one
        // more) and the rows made waiting for a batch (a batch's, and the
        // two one piece may close), L i32 tokens and their segments each;
        // the packed batches in the queue and those made waiting for room
        // (at most K; 4 i32 fields of L per row). The documents being packed
        // are in their made batches, among the K of `making`: a long
        // document is held whole, once, while its packed batches are made
        // from it one at a time.
        let packing = self.batching.pack.as_ref().map_or(0, |p| {
            let row = 4 * p.length + 32;
            let packed = batches + self.in_flight_batches();
            (p.window + 1 + batch + 2) * row + packed * batch * 4 * 4 * p.length
        });
        (chunks
            + packing
            + pool
            + drain
            + batches * batch * record_bytes
            + reorder
            + making
            + self.remote_read_ahead_bytes()
            + self.block_bytes_held())
        .saturating_add(self.transform_workers_bytes())
    }

    /// The `record_bytes` of [`in_flight_bound_bytes`](Self::in_flight_bound_bytes)
    /// for the records a run has seen so far (its statistics): the larger
    /// mean payload of a record read and of a record made, with 8 bytes
    /// per field of the schema and the record's origin — the bound the
    /// command states after a run and the metrics state while it goes.
    pub fn record_bytes_of_run(&self, s: &crate::stats::StatsSnapshot) -> usize {
        let per = |stage: &crate::stats::StageSnapshot| {
            (stage.payload_bytes / stage.records.max(1)) as usize
        };
        let payload = per(&s.readers).max(per(&s.batch_maker));
        let fields = self.inputs.schema.as_ref().map_or(1, |s| s.len());
        payload + 8 * fields + std::mem::size_of::<feedline::Origin>()
    }

    /// The transform workers' working memory: each worker's, as the
    /// instance map states it, times the workers (0 without an instance
    /// map).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use feedline::format::generator::Sample;
    /// use feedline::transform::{BoxError, InstanceMap, Row, TransformCtx};
    /// use feedline_actors::PipelineConfig;
    /// struct Holds(usize);
    /// impl InstanceMap for Holds {
    ///     fn map(&self, _: &Row<'_>, _: &mut TransformCtx) -> Result<Sample, BoxError> {
    ///         Ok(Sample::new())
    ///     }
    ///     fn working_memory_bytes(&self) -> usize { self.0 }
    /// }
    /// let mut c = PipelineConfig::default();
    /// assert_eq!(c.transform_workers_bytes(), 0);
    /// c.transforms.instance = Some(Arc::new(Holds(1000)));
    /// c.transforms.workers = 3;
    /// assert_eq!(c.transform_workers_bytes(), 3000);
    /// ```
    pub fn transform_workers_bytes(&self) -> usize {
        self.transforms.instance.as_ref().map_or(0, |map| {
            map.working_memory_bytes()
                .saturating_mul(self.transforms.workers)
        })
    }

    /// The batches the batch maker holds at most, in force: the setting
    /// ([`Batching::batches_in_flight`]), or by default
    /// enough for [`ROWS_IN_FLIGHT_PER_WORKER`] rows per transform worker
    /// with an instance map — `⌈16 × workers / batch size⌉`, at least
    /// [`MIN_BATCHES_IN_FLIGHT`], at most [`MAX_BATCHES_IN_FLIGHT`] (a
    /// batch size by cost budget counts as `chunk_records` rows) — and
    /// [`MIN_BATCHES_IN_FLIGHT`] without.
    ///
    /// ```
    /// use feedline_actors::{BatchPolicy, PipelineConfig};
    /// let mut c = PipelineConfig::default();
    /// c.batching.batch = BatchPolicy::Fixed(64);
    /// assert_eq!(c.in_flight_batches(), 2); // no instance map
    /// c.batching.batches_in_flight = Some(5);
    /// assert_eq!(c.in_flight_batches(), 5);
    /// ```
    pub fn in_flight_batches(&self) -> usize {
        if let Some(k) = self.batching.batches_in_flight {
            return k;
        }
        if self.transforms.instance.is_none() {
            return MIN_BATCHES_IN_FLIGHT;
        }
        let rows = match &self.batching.batch {
            BatchPolicy::Fixed(n) => *n,
            _ => self.reading.chunk_records,
        }
        .max(1);
        (ROWS_IN_FLIGHT_PER_WORKER * self.transforms.workers)
            .div_ceil(rows)
            .clamp(MIN_BATCHES_IN_FLIGHT, MAX_BATCHES_IN_FLIGHT)
    }

    /// Bytes the readers hold in remote parts at most: when an input is a
    /// remote URL, `readers × part_bytes × (read_ahead + 1)` of the remote
    /// settings in force ([`feedline::remote::options`]: 8 MiB × 3 per reader
    /// by default), else 0. A `.parquet` column chunk is fetched whole by one
    /// request and is not in it. Inputs are judged as given: for the
    /// expanded list, ask the built pipeline's config
    /// ([`Loader::config`](crate::Loader::config)).
    pub fn remote_read_ahead_bytes(&self) -> usize {
        if !self.reads_remote() {
            return 0;
        }
        let per_reader = feedline::remote::options().unwrap_or_default().held_bytes();
        usize::try_from(per_reader)
            .unwrap_or(usize::MAX)
            .saturating_mul(self.all_readers())
    }

    /// Readers of the pipeline: `readers`, or its file sets' together.
    fn all_readers(&self) -> usize {
        (self.reading.readers).max(self.inputs.sets.iter().map(|s| s.readers).sum())
    }

    /// The bytes of blocks held in `block` shuffle mode: each reader's run
    /// reader holds at most `BLOCK_BYTES_HELD`, and two more blocks' worth
    /// are the last block of remote objects entered, kept for the next run
    /// in it, and the one after it, fetched ahead; 0 in other modes.
    pub fn block_bytes_held(&self) -> usize {
        if self.order.shuffle_mode != ShuffleMode::Block {
            return 0;
        }
        let per_reader = BLOCK_BYTES_HELD as usize;
        per_reader.saturating_mul(self.all_readers() + 2)
    }

    /// Whether any input is remote (`s3://`, `gs://`, `http(s)://`).
    fn reads_remote(&self) -> bool {
        (self.inputs.files.iter())
            .chain(self.inputs.sets.iter().flat_map(|s| &s.files))
            .any(|f| {
                let bare = match self
                    .inputs
                    .registry
                    .resolve(f, self.inputs.format.as_deref())
                {
                    Ok((_, bare, _)) => bare.to_string_lossy().into_owned(),
                    Err(_) => f.clone(),
                };
                feedline::remote::is_remote(&bare) || feedline::remote::is_remote(f)
            })
    }
}

// Without the `remote` feature a URL is refused before any reader runs.
#[cfg(all(test, feature = "remote"))]
mod tests {
    use super::*;

    #[test]
    fn remote_inputs_add_each_readers_parts_to_the_in_flight_bound() {
        let per_reader = feedline::remote::options().unwrap().held_bytes() as usize;
        assert!(per_reader > 0);
        let mut c = PipelineConfig {
            inputs: Inputs {
                files: vec!["data/a.tfrecord".into(), "data/b.tfrecord".into()],
                ..Default::default()
            },
            reading: Reading {
                readers: 4,
                ..Default::default()
            },
            ..PipelineConfig::default()
        };
        assert_eq!(c.remote_read_ahead_bytes(), 0);
        let local = c.in_flight_bound_bytes(1000);
        for url in [
            "http://127.0.0.1:9/d/c.tfrecord",
            "tfrecord:s3://bucket/c",
            "gs://bucket/d.jsonl",
        ] {
            c.inputs.files = vec!["data/a.tfrecord".into(), url.into()];
            assert_eq!(c.remote_read_ahead_bytes(), 4 * per_reader, "{url}");
            assert_eq!(
                c.in_flight_bound_bytes(1000),
                local + 4 * per_reader,
                "{url}"
            );
        }
        // File sets: every set's readers.
        c.inputs.files.clear();
        c.reading.readers = 0;
        c.inputs.sets = vec![
            FileSet::new("a", ["data/a.tfrecord"]).readers(3),
            FileSet::new("b", ["https://h/b.tfrecord"]).readers(5),
        ];
        assert_eq!(c.remote_read_ahead_bytes(), 8 * per_reader);
    }

    /// `block` mode's held blocks are in the bound: 32 MiB per reader.
    #[test]
    fn the_bound_counts_the_blocks_each_reader_holds() {
        let mut c = PipelineConfig {
            inputs: Inputs {
                files: vec!["data/a.tfrecord".into()],
                ..Default::default()
            },
            reading: Reading {
                readers: 3,
                ..Default::default()
            },
            ..PipelineConfig::default()
        };
        let buffer = c.in_flight_bound_bytes(1000);
        assert_eq!(c.block_bytes_held(), 0);
        c.order.shuffle_mode = ShuffleMode::Block;
        assert_eq!(c.block_bytes_held(), 5 * (32 << 20));
        assert_eq!(c.in_flight_bound_bytes(1000), buffer + 5 * (32 << 20));
        c.order.shuffle_mode = ShuffleMode::Global;
        assert_eq!(c.in_flight_bound_bytes(1000), buffer);
    }
}

#[cfg(test)]
mod transform_bound_tests {
    use std::sync::Arc;

    use feedline::format::generator::Sample;
    use feedline::transform::{BoxError, InstanceMap, Row, TransformCtx};

    use super::*;

    /// A map that says it holds `self.0` bytes a call.
    struct Holds(usize);

    impl InstanceMap for Holds {
        fn map(&self, _: &Row<'_>, _: &mut TransformCtx) -> Result<Sample, BoxError> {
            Ok(Sample::new())
        }
        fn working_memory_bytes(&self) -> usize {
            self.0
        }
    }

    #[test]
    fn each_transform_worker_adds_its_maps_working_memory_to_the_bound() {
        // Mutation (tried): dropping `.saturating_add(self.transform_workers_bytes())`
        // from in_flight_bound_bytes → the bound does not grow.
        for workers in [1, 4, 8] {
            let mut c = PipelineConfig::default();
            c.transforms.workers = workers;
            c.transforms.instance = Some(Arc::new(Holds(0)));
            let without = c.in_flight_bound_bytes(1000);
            c.transforms.instance = Some(Arc::new(Holds(12_345_678)));
            assert_eq!(
                c.in_flight_bound_bytes(1000),
                without + workers * 12_345_678,
                "{workers} workers"
            );
            assert_eq!(c.transform_workers_bytes(), workers * 12_345_678);
        }
        // A map that holds more than memory has saturates, never wraps.
        let mut c = PipelineConfig::default();
        c.transforms.instance = Some(Arc::new(Holds(usize::MAX)));
        assert_eq!(c.in_flight_bound_bytes(1000), usize::MAX);
    }

    #[test]
    fn a_metrics_address_is_host_port_and_needs_the_feature() {
        let check = |a: &str| {
            let mut c = PipelineConfig::default();
            c.inputs.files = vec!["data.jsonl".into()];
            c.monitoring.metrics_addr = Some(a.to_string());
            c.check().map_err(|e| e.to_string())
        };
        let good = ["127.0.0.1:9464", "[::1]:0", "localhost:9464", "0.0.0.0:80"];
        let bad = [
            "localhost",
            "127.0.0.1:65536",
            ":80",
            "host:",
            "::1:80",
            "a/b:80",
        ];
        if cfg!(feature = "metrics") {
            for a in good {
                assert_eq!(check(a), Ok(()), "{a}");
            }
            for a in bad {
                let e = check(a).unwrap_err();
                assert!(
                    e.contains(&format!("metrics_addr({a:?}) must be HOST:PORT")),
                    "{e}"
                );
            }
        } else {
            let e = check(good[0]).unwrap_err();
            assert!(e.contains("enable the `metrics` feature"), "{e}");
        }
        // No address, nothing checked, nothing opened.
        assert!(PipelineConfig::default().monitoring.metrics_addr.is_none());
    }
}
