//! The length of a pass ([`Loader::len`](crate::Loader::len), Python's
//! `len(loader)`): the batches of a pass for this rank, from every input's
//! record count. npy/npz and Parquet files say theirs in their headers; the
//! others are counted by reading them through as the pipeline's readers
//! frame them ([`feedline::format::RecordReader::skip_to`]: TFRecord frames
//! by its length headers alone, without payload CRCs or decoding; tar
//! members, JSON Lines and CSV lines are read) — once per file per process:
//! counts are kept by (path, size, modification time).
//!
//! Counting runs on a thread of its own ([`RecordCounts::start`]), once per
//! loader, at the first `len()` — or at once
//! ([`RecordCounts::start_if_local`]: the Python face does, so that a
//! `len()` — and `list(loader)`, which asks for it — finds the counts made,
//! or waits only for what is left of them, and the pipeline's first batch
//! never waits for a count) when every input is a local file (a count of a
//! remote object reads it whole). A face waits for it in slices
//! ([`RecordCounts::wait`]), hearing Ctrl-C between them.
//!
//! Not known ([`LenUnknown`]): push-mode loaders (what comes is what is
//! pushed), and inputs that are a pipe, a socket or a device — counting
//! would read away the data the loader is to read.
//!
//! A packing loader's batches come from tokens, not records: `len()` is
//! known where the pipeline counted every rank's packed rows per pass at
//! start-up (packing with ranks equalized, over more than one rank:
//! [`Loader::packed_batches_in_pass`](crate::Loader::packed_batches_in_pass)),
//! and not known otherwise, saying why ([`packed_len`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::config::PipelineConfig;
use feedline::batch_policy::BatchPolicy;
use feedline::plan::{equalized_counts, Equalize, PassPlan};

/// Why `len(loader)` is not known.
#[derive(Clone, Debug, thiserror::Error)]
pub enum LenUnknown {
    /// A push-mode loader.
    #[error("the data is pushed: the loader cannot know how much will come")]
    Pushed,
    /// Batches are made by a cost budget.
    #[error("batches are made by a cost budget, not a fixed size")]
    CostBudget,
    /// File sets are mixed by weight.
    #[error("file sets are mixed by weight")]
    FileSets,
    /// A stream input (a pipe, a socket, a device).
    #[error("{file} is not a regular file (a pipe, socket or device): counting its records would read away the data the loader reads")]
    Stream {
        /// The input.
        file: String,
    },
}

/// Why `len()` of a packing loader is not known.
#[derive(Clone, Debug, thiserror::Error)]
pub enum PackedLenUnknown {
    /// Packing without equalized ranks (or over one rank).
    #[error("len() of a packing loader (pack={length}) {without}: its batches per pass depend on every document's token count and how the packing fills rows, known only as the pass runs; with equalize=\"drop\" or \"pad\" over more than one rank (world_size > 1) every rank's packed rows are counted at start-up and len() gives them")]
    NotCounted {
        /// Tokens per row.
        length: usize,
        /// What the settings lack.
        without: String,
    },
    /// The loader is closed: its pipeline, which counted the rows, is gone.
    #[error("len() of a packing loader (pack={length}) that is closed: its packed rows were counted by its pipeline, which is gone")]
    Closed {
        /// Tokens per row.
        length: usize,
    },
}

/// `len()` of a packing loader: the packed batches of the pass in
/// progress, from `ask` — what the loader's pipeline counted at start-up
/// (`None`: no pipeline, the loader is closed; `Some(None)`: not counted).
pub fn packed_len(
    config: &PipelineConfig,
    pack: &feedline::pack::Pack,
    ask: impl FnOnce() -> Option<Option<u64>>,
) -> Result<u64, PackedLenUnknown> {
    let length = pack.length;
    match ask() {
        Some(Some(n)) => Ok(n),
        // The pipeline decides when it counts; this says why it did not.
        Some(None) => Err(PackedLenUnknown::NotCounted {
            length,
            without: if config.batching.equalize == Equalize::Off {
                "without equalize".into()
            } else if config.inputs.shard.world_size <= 1 {
                format!(
                    "with equalize over one rank (world_size={}: nothing to equalize, no rows counted)",
                    config.inputs.shard.world_size
                )
            } else {
                "whose pipeline did not count its packed rows".into()
            },
        }),
        None => Err(PackedLenUnknown::Closed { length }),
    }
}

/// Counting failed (a file that cannot be read through).
#[derive(Clone, Debug, thiserror::Error)]
#[error("counting the records of {file} for len(): {why}")]
pub struct CountFailed {
    /// The input.
    pub file: String,
    /// What went wrong.
    pub why: String,
}

/// What `len()` gets.
#[derive(Clone, Debug)]
pub enum Counted {
    /// Records per input, in `config.files` order.
    Records(Vec<u64>),
    /// Not known for this loader.
    Unknown(LenUnknown),
    /// A file could not be counted.
    Failed(CountFailed),
}

type Key = (PathBuf, u64, Option<std::time::SystemTime>);

/// Counts of the files counted in this process, by (path, size, mtime).
static CACHE: Mutex<Option<HashMap<Key, u64>>> = Mutex::new(None);

fn cached(key: &Key) -> Option<u64> {
    let c = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    c.as_ref().and_then(|m| m.get(key).copied())
}

fn remember(key: Key, n: u64) {
    let mut c = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    c.get_or_insert_with(HashMap::new).insert(key, n);
}

/// A loader's record counts: made once, on a thread of its own.
pub struct RecordCounts {
    config: Arc<PipelineConfig>,
    result: Mutex<Option<Counted>>,
    ready: Condvar,
    started: AtomicBool,
    /// Set when the loader goes: a count in progress stops at the next file.
    cancelled: Arc<AtomicBool>,
}

impl std::fmt::Debug for RecordCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordCounts")
            .field("result", &self.peek())
            .finish()
    }
}

impl RecordCounts {
    /// The counts of `config`'s inputs (expanded), not started: the first
    /// [`start`](Self::start) starts them (what is not known, a push-mode
    /// loader say, is known at once).
    pub fn new(config: Arc<PipelineConfig>) -> Arc<Self> {
        // A global order's inputs are the runs of its order (indexed here).
        let (config, failed) = if config.order.shuffle_mode.reads_by_position() {
            match crate::global_shuffle::as_runs(&config) {
                Ok(runs) => (Arc::new(runs), None),
                Err(e) => (config, Some(e)),
            }
        } else {
            (config, None)
        };
        let unknown = if let Some(e) = failed {
            return Arc::new(RecordCounts {
                result: Mutex::new(Some(Counted::Failed(CountFailed {
                    file: config.inputs.files.first().cloned().unwrap_or_default(),
                    why: e.to_string(),
                }))),
                config,
                ready: Condvar::new(),
                started: AtomicBool::new(false),
                cancelled: Arc::new(AtomicBool::new(false)),
            });
        } else if config.inputs.push.is_some() {
            Some(LenUnknown::Pushed)
        } else if !matches!(config.batching.batch, BatchPolicy::Fixed(_)) {
            Some(LenUnknown::CostBudget)
        } else if !config.inputs.sets.is_empty() {
            Some(LenUnknown::FileSets)
        } else {
            None
        };
        Arc::new(RecordCounts {
            config,
            result: Mutex::new(unknown.map(Counted::Unknown)),
            ready: Condvar::new(),
            started: AtomicBool::new(false),
            cancelled: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The settings the counts are of, for [`len_from`]: the loader's, or
    /// for a global order the runs of its order that its stages read.
    pub fn config(&self) -> &PipelineConfig {
        &self.config
    }

    /// Start counting now when every input is a local file (a count of a
    /// remote object reads it whole: that waits for the first `len()`).
    /// (Each input is resolved here, not when the counts are made: a loader
    /// that never asks pays nothing.)
    pub fn start_if_local(self: &Arc<Self>) {
        let config = &self.config;
        let remote = |f: &String| {
            feedline::remote::is_remote(f)
                || (config
                    .inputs
                    .registry
                    .resolve(f, config.inputs.format.as_deref()))
                .is_ok_and(|(_, p, _)| feedline::remote::is_remote(&p.to_string_lossy()))
        };
        if !config.inputs.files.iter().any(remote) {
            self.start();
        }
    }

    /// Start counting (once) unless the result is known.
    pub fn start(self: &Arc<Self>) {
        if self.started.swap(true, Ordering::SeqCst) || self.peek().is_some() {
            return;
        }
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("feedline-count".into())
            .spawn(move || {
                let r = count_all(&me.config, &me.cancelled);
                *me.result.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                me.ready.notify_all();
            });
        if let Err(e) = spawned {
            *self.result.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(Counted::Failed(CountFailed {
                    file: "(all)".into(),
                    why: format!("cannot start a thread: {e}"),
                }));
        }
    }

    /// The result, if made.
    pub fn peek(&self) -> Option<Counted> {
        self.result
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Wait at most `timeout` for the result (call without the GIL).
    pub fn wait(&self, timeout: Duration) -> Option<Counted> {
        let g = self.result.lock().unwrap_or_else(|p| p.into_inner());
        let (g, _) = self
            .ready
            .wait_timeout_while(g, timeout, |r| r.is_none())
            .unwrap_or_else(|p| p.into_inner());
        g.clone()
    }

    /// Stop a count in progress (at its next file).
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }
}

fn count_all(config: &PipelineConfig, cancelled: &AtomicBool) -> Counted {
    let mut out = Vec::with_capacity(config.inputs.files.len());
    for spec in &config.inputs.files {
        if cancelled.load(Ordering::SeqCst) {
            return Counted::Failed(CountFailed {
                file: spec.clone(),
                why: "the loader was closed".into(),
            });
        }
        match count_file(config, spec) {
            Ok(n) => out.push(n),
            Err(CountError::Unknown(u)) => return Counted::Unknown(u),
            Err(CountError::Failed(why)) => {
                return Counted::Failed(CountFailed {
                    file: spec.clone(),
                    why,
                })
            }
        }
    }
    Counted::Records(out)
}

enum CountError {
    Unknown(LenUnknown),
    Failed(String),
}

/// One input's records: from the cache, its header, or read through.
fn count_file(config: &PipelineConfig, spec: &str) -> Result<u64, CountError> {
    let failed = |e: feedline::Error| CountError::Failed(e.to_string());
    let (_, path, _) = config
        .inputs
        .registry
        .resolve(spec, config.inputs.format.as_deref())
        .map_err(failed)?;
    let remote = feedline::remote::is_remote(&path.to_string_lossy());
    // A run of a global order says its length.
    let run = spec.starts_with(crate::global_shuffle::RUNS_FORMAT);
    let key = if remote || run {
        None
    } else {
        let meta = std::fs::metadata(&path)
            .map_err(|e| CountError::Failed(format!("{}: {e}", path.display())))?;
        if !meta.is_file() {
            return Err(CountError::Unknown(LenUnknown::Stream {
                file: spec.to_string(),
            }));
        }
        let key: Key = (path.clone(), meta.len(), meta.modified().ok());
        if let Some(n) = cached(&key) {
            return Ok(n);
        }
        Some(key)
    };
    let mut r = config
        .inputs
        .registry
        .open(spec, config.inputs.format.as_deref(), &config.reading.open)
        .map_err(failed)?;
    let n = match r.len_hint() {
        Some(n) => n,
        None => {
            r.skip_to(u64::MAX).map_err(failed)?;
            let _ = r.next_record().map_err(failed)?;
            r.next_index()
        }
    };
    if let Some(key) = key {
        remember(key, n);
    }
    Ok(n)
}

/// Why a length is not known ([`len_from`]).
#[derive(Clone, Debug, thiserror::Error)]
pub enum LenError {
    /// Not known for this loader.
    #[error("this loader has no len(): {0}")]
    Unknown(LenUnknown),
    /// A packing loader whose packed batches are not counted.
    #[error(transparent)]
    Packed(PackedLenUnknown),
    /// A file could not be counted.
    #[error(transparent)]
    Failed(CountFailed),
}

/// Batches of `pass` for this rank from what counting gave.
pub fn len_from(config: &PipelineConfig, counted: Counted, pass: u64) -> Result<u64, LenError> {
    match counted {
        Counted::Records(counts) => Ok(batches_in_pass(config, &counts, pass)),
        Counted::Unknown(why) => Err(LenError::Unknown(why)),
        Counted::Failed(e) => Err(LenError::Failed(e)),
    }
}

/// Batches of `pass` for this rank, from every input's `counts` (bad
/// records that `on_error="skip"` will pass over are not foreseen).
pub fn batches_in_pass(config: &PipelineConfig, counts: &[u64], pass: u64) -> u64 {
    let batch = match &config.batching.batch {
        BatchPolicy::Fixed(n) => (*n).max(1) as u64,
        _ => return 0,
    };
    let plan = PassPlan::new(config.inputs.files.clone())
        .seed(config.order.seed)
        .shuffle_files(config.order.shuffle_files)
        .shard(config.inputs.shard)
        .shard_by(config.inputs.shard_by);
    let records_of = |p: &PassPlan| -> u64 {
        p.tasks(pass)
            .iter()
            .map(|t| {
                let total = counts.get(t.file_index).copied().unwrap_or(0);
                t.stride.count_from(t.start_record, total)
            })
            .sum()
    };
    if config.batching.equalize != Equalize::Off {
        let per_rank: Vec<u64> = (0..config.inputs.shard.world_size)
            .map(|r| plan.for_rank(r).map_or(0, |p| records_of(&p)))
            .collect();
        if let Ok(c) = equalized_counts(
            &per_rank,
            batch as usize,
            config.batching.drop_last,
            config.batching.equalize,
        ) {
            return c[config.inputs.shard.rank].batches;
        }
    }
    let records = records_of(&plan);
    if config.batching.drop_last {
        records / batch
    } else {
        records.div_ceil(batch)
    }
}
