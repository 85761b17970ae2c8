//! The settings by neutral key ([`Setting`]) and the one error a refused
//! setting makes ([`SettingError`]): a sentence whose settings are keys,
//! not words, so that every face spells them its own way ([`Spelling`]) —
//! the Rust builder as its methods (the error's `Display`), the command as
//! its flags, Python as its keywords — and one mistake reads the same from
//! every face.

use std::fmt;

/// A setting of a pipeline, by concern, whatever face it was given through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Setting {
    // Inputs.
    /// The input files.
    Files,
    /// A file set (instead of files).
    FileSet,
    /// The schema.
    Schema,
    /// Push mode's source.
    PushSource,
    // Reading.
    /// Prefetch readers.
    Readers,
    /// Instances per chunk.
    ChunkRecords,
    /// Payload bytes per chunk.
    ChunkBytes,
    /// Unacknowledged chunks per reader.
    ChunksInFlight,
    // Order.
    /// The shuffle pool's size.
    Shuffle,
    /// Instances held before draws start.
    MinPool,
    /// The shuffle pool's byte bound.
    ShuffleBytes,
    /// Passes (epochs).
    Passes,
    /// The first pass run.
    FirstPass,
    /// Deterministic mode.
    Deterministic,
    /// The shuffle mode (buffer, global, block).
    ShuffleMode,
    /// Where record indexes are kept.
    IndexDir,
    /// Out-of-order bytes held in deterministic mode.
    ReorderWindow,
    /// The data-parallel shard (rank of world size).
    Shard,
    /// The data-parallel rank, given alone (its world size may come from
    /// the environment).
    Rank,
    /// The data-parallel world size, given alone.
    WorldSize,
    /// Equal batch counts on every rank.
    Equalize,
    // Batching.
    /// The batch size (or cost budget).
    Batch,
    /// Drop each pass's last partial batch.
    DropLast,
    /// Batches the batch maker holds.
    BatchesInFlight,
    /// Sequence packing (its row length).
    Pack,
    /// The packing policy.
    PackPolicy,
    /// The packing window of open rows.
    PackWindow,
    /// What packing does with a document longer than a row.
    LongDocs,
    /// The token field packed.
    PackField,
    // Transforms.
    /// A per-instance map of user code.
    Map,
    /// The map's declared output schema.
    MapSchema,
    /// A built-in image transform.
    Transform,
    /// The most pixels an image may have.
    MaxPixels,
    /// A tokenizer (the instance transform).
    Tokenizer,
    /// The text field the tokenizer reads.
    TextField,
    /// Append the EOS token.
    AddEos,
    /// Put the BOS token first.
    AddBos,
    /// Transform workers.
    Workers,
    // Feeding.
    /// Devices fed.
    Devices,
    /// Feed-queue capacity.
    Capacity,
    // Faults.
    /// The bad-record policy.
    OnError,
    /// The skipped-record budget.
    MaxBad,
    /// The skipped-record fraction budget.
    MaxBadFraction,
    /// Readers that may fail on one file.
    MaxAttempts,
    /// When a reader is stuck.
    StallTimeout,
    // Monitoring.
    /// Where the Prometheus metrics are served (`HOST:PORT`).
    MetricsAddr,
    // Tuning.
    /// Tune the settings not given while the pipeline runs.
    Autotune,
    /// The autotuner's CPU budget: cores of CPU time, each pool at most
    /// that many threads.
    Cpus,
    /// The autotuner's memory budget: the stated in-flight bound.
    MemoryBudget,
}

impl Setting {
    /// The neutral key: the Rust builder's method (or the field of its
    /// value, as `Pack`'s `window` is `pack_window`).
    pub fn key(self) -> &'static str {
        use Setting::*;
        match self {
            Files => "files",
            FileSet => "file_set",
            Schema => "schema",
            PushSource => "push_source",
            Readers => "readers",
            ChunkRecords => "chunk_records",
            ChunkBytes => "chunk_bytes",
            ChunksInFlight => "chunks_in_flight",
            Shuffle => "shuffle",
            MinPool => "min_pool",
            ShuffleBytes => "shuffle_bytes",
            Passes => "passes",
            FirstPass => "first_pass",
            Deterministic => "deterministic",
            ShuffleMode => "shuffle_mode",
            IndexDir => "index_dir",
            ReorderWindow => "reorder_window",
            Shard => "shard",
            Rank => "rank",
            WorldSize => "world_size",
            Equalize => "equalize",
            Batch => "batch",
            DropLast => "drop_last",
            BatchesInFlight => "batches_in_flight",
            Pack => "pack",
            PackPolicy => "pack_policy",
            PackWindow => "pack_window",
            LongDocs => "long_docs",
            PackField => "pack_field",
            Map => "map",
            MapSchema => "output_schema",
            Transform => "transform",
            MaxPixels => "max_pixels",
            Tokenizer => "tokenize",
            TextField => "text_field",
            AddEos => "add_eos",
            AddBos => "add_bos",
            Workers => "workers",
            Devices => "devices",
            Capacity => "capacity",
            OnError => "error_policy",
            MaxBad => "max_bad",
            MaxBadFraction => "max_bad_fraction",
            MaxAttempts => "max_attempts",
            StallTimeout => "stall_timeout",
            MetricsAddr => "metrics_addr",
            Autotune => "autotune",
            Cpus => "cpus",
            MemoryBudget => "memory_budget",
        }
    }
}

/// A value as given, to be spelled by a face: a number (`16`) or a word
/// (`"concat"`, which some faces quote).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A number, spelled as written.
    Number(String),
    /// A word or name (quoted where the face quotes strings).
    Text(String),
}

impl Value {
    /// A number.
    pub fn number(n: impl fmt::Display) -> Self {
        Value::Number(n.to_string())
    }

    /// A word.
    pub fn text(t: impl fmt::Display) -> Self {
        Value::Text(t.to_string())
    }
}

/// How a face names settings.
pub trait Spelling {
    /// The setting's name (`min_pool`, `--min-pool`).
    fn name(&self, setting: Setting) -> String;
    /// The setting given a value (`min_pool(3000)`, `--min-pool 3000`,
    /// `min_pool=3000`).
    fn given(&self, setting: Setting, value: &Value) -> String;
}

/// The Rust builder's spelling: `min_pool`, `min_pool(3000)`,
/// `pack_policy("concat")`.
pub struct BuilderSpelling;

impl Spelling for BuilderSpelling {
    fn name(&self, setting: Setting) -> String {
        setting.key().to_string()
    }

    fn given(&self, setting: Setting, value: &Value) -> String {
        match value {
            Value::Number(n) => format!("{}({n})", setting.key()),
            Value::Text(t) => format!("{}({t:?})", setting.key()),
        }
    }
}

/// One piece of a [`SettingError`]'s sentence.
#[derive(Clone, Debug, PartialEq)]
enum Part {
    Text(String),
    Name(Setting),
    Given(Setting, Value),
}

/// A refused setting (or combination): a sentence naming settings by key,
/// spelled by each face ([`spelled`](Self::spelled)); its `Display` is the
/// Rust builder's spelling. It reads as the sentence (`Deref<Target = str>`).
///
/// ```
/// use feedline_actors::{Setting, SettingError, Value};
/// let e = SettingError::given(Setting::MinPool, Value::number(3000))
///     .text(" must be at most ")
///     .with(Setting::Shuffle, Value::number(1000));
/// assert_eq!(e.to_string(), "min_pool(3000) must be at most shuffle(1000)");
/// assert!(e.contains("at most"));
/// ```
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{rendered}")]
pub struct SettingError {
    parts: Vec<Part>,
    /// The builder's spelling, kept to be read as a `str`.
    rendered: String,
}

impl SettingError {
    fn push(mut self, part: Part) -> Self {
        self.parts.push(part);
        self.rendered = self.spelled(&BuilderSpelling);
        self
    }

    fn empty() -> Self {
        SettingError {
            parts: Vec::new(),
            rendered: String::new(),
        }
    }

    /// A sentence that starts with `text`.
    pub fn says(text: impl Into<String>) -> Self {
        Self::empty().text(text)
    }

    /// A sentence that starts by naming `setting`.
    pub fn name(setting: Setting) -> Self {
        Self::empty().named(setting)
    }

    /// A sentence that starts with `setting` given `value`.
    pub fn given(setting: Setting, value: Value) -> Self {
        Self::empty().with(setting, value)
    }

    /// Then `text`.
    pub fn text(self, text: impl Into<String>) -> Self {
        self.push(Part::Text(text.into()))
    }

    /// Then the name of `setting`.
    pub fn named(self, setting: Setting) -> Self {
        self.push(Part::Name(setting))
    }

    /// Then `setting` given `value`.
    pub fn with(self, setting: Setting, value: Value) -> Self {
        self.push(Part::Given(setting, value))
    }

    /// The settings the sentence names, in order.
    pub fn settings(&self) -> impl Iterator<Item = Setting> + '_ {
        self.parts.iter().filter_map(|p| match p {
            Part::Text(_) => None,
            Part::Name(s) | Part::Given(s, _) => Some(*s),
        })
    }

    /// The sentence as `face` spells settings.
    pub fn spelled(&self, face: &dyn Spelling) -> String {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Text(t) => t.clone(),
                Part::Name(s) => face.name(*s),
                Part::Given(s, v) => face.given(*s, v),
            })
            .collect()
    }
}

impl std::ops::Deref for SettingError {
    type Target = str;
    fn deref(&self) -> &str {
        &self.rendered
    }
}

/// A sentence that names no setting by key.
impl From<String> for SettingError {
    fn from(text: String) -> Self {
        SettingError::says(text)
    }
}

/// A sentence that names no setting by key.
impl From<&str> for SettingError {
    fn from(text: &str) -> Self {
        SettingError::says(text)
    }
}
