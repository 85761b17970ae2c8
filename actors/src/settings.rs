//! Each stage's own settings (vector's narrow contexts): what a stage
//! reads of the pipeline's settings, derived once by the wiring site from
//! the checked [`PipelineConfig`] ([`StageSettings::derive`]). A stage's
//! constructor takes its settings and nothing else of the config, so what
//! a stage can be told is visible in one struct, and a setting no stage
//! reads shows as one no struct has.
//!
//! Policies that depend on several settings are decided here, once: which
//! readers may defer checksums (the bad-record policy's), whether the draw
//! can be snapshot, how many batches the batch maker holds (and, under
//! autotuning, how many drawn batches wait for it).

use std::time::Duration;

use feedline::feed_queue::Lanes;
use feedline::format::{OpenOptions, RecordReader, Registry};
use feedline::pack::Pack;
use feedline::plan::Equalize;
use feedline::remote::cache::RemoteCache;
use feedline::shuffle::ShuffleConfig;
use feedline::transform::RecordStage;
use feedline::Schema;

use crate::autotune::Tunable;
use crate::bad_records::checksums_may_wait;
use crate::config::{ErrorPolicy, PipelineConfig, StallPolicy, MIN_BATCHES_IN_FLIGHT};

/// What a prefetch reader (and a draw made again from a snapshot, which
/// reads as the readers do) needs: how to open files and cut chunks.
#[derive(Clone)]
pub(crate) struct ReaderSettings {
    /// The formats known.
    pub registry: Registry,
    /// A format for every file, if set.
    pub format: Option<String>,
    /// How files are opened (checksum deferral decided by the bad-record
    /// policy: a record to skip must be found bad by its reader).
    pub open: OpenOptions,
    /// Instances per chunk, at most.
    pub chunk_records: usize,
    /// Payload bytes per chunk, at most.
    pub chunk_bytes: usize,
    /// Chunks sent and not acknowledged, at most (read at every step: the
    /// autotuner may change it).
    pub chunks_in_flight: Tunable,
    /// The record filter / map on the readers, if any.
    pub records: Option<RecordStage>,
    /// The local cache of remote inputs, if any.
    pub remote_cache: Option<RemoteCache>,
    /// The instances' schema.
    pub schema: Schema,
}

impl ReaderSettings {
    /// Open `file` at record `start` as the readers do.
    pub fn open_file(
        &self,
        file: &str,
        start: u64,
        pass: u64,
        keep: feedline::plan::RecordStride,
    ) -> Result<Box<dyn RecordReader>, feedline::Error> {
        let mut opts = self.open.clone();
        opts.start_record = start;
        opts.pass = pass;
        opts.keep = keep;
        self.registry.open(file, self.format.as_deref(), &opts)
    }

    /// The name `file`'s records carry (its resolved path; the file as
    /// given when it cannot be resolved).
    pub fn source_name(&self, file: &str) -> String {
        match self.registry.resolve(file, self.format.as_deref()) {
            Ok((_, path, _)) => path.to_string_lossy().into_owned(),
            Err(_) => file.to_string(),
        }
    }
}

/// What the shuffle stage needs.
#[derive(Clone, Debug)]
pub(crate) struct ShuffleSettings {
    /// The pool's sizes and seed.
    pub pool: ShuffleConfig,
    /// Chunks taken in a fixed order, whatever the timing.
    pub deterministic: bool,
    /// Bytes of early chunks held in deterministic mode.
    pub reorder_window: usize,
    /// The file sets' names and weights (empty without sets).
    pub sets: Vec<(String, f64)>,
    /// Passes to make.
    pub passes: u64,
    /// Snapshot the draw before every `snapshot_every`-th batch; 0: never
    /// (also when the draw of these settings cannot be snapshot: see
    /// [`snapshots_possible`]).
    pub snapshot_every: u64,
    /// The feed queue's lanes (each batch is numbered and laned).
    pub lanes: Lanes,
}

/// What the batch maker needs.
#[derive(Clone, Debug)]
pub(crate) struct BatchMakerSettings {
    /// Batches held at most: being made, or made and not yet in the feed
    /// queue (read at every decision: the autotuner may change it).
    pub in_flight: Tunable,
    /// The most batches waiting in the order queue for the batch maker: its
    /// batches in flight, or under autotuning the least it may be lowered
    /// to (the bound counts that many at most).
    pub orders_waiting: usize,
    /// The feed queue's lanes (each pass ends with a marker in every one).
    pub lanes: Lanes,
    /// The rows' schema, to collate them when there are no transforms.
    pub schema: Schema,
    /// Packing, and the rows of a packed batch.
    pub pack: Option<(Pack, usize)>,
}

/// What the supervisor needs.
#[derive(Clone, Debug)]
pub(crate) struct SupervisorSettings {
    /// A reader inside one open or read for longer is stuck (`None`: never).
    pub stall_timeout: Option<Duration>,
    /// What to do with a stuck reader.
    pub on_stall: StallPolicy,
    /// Readers that may fail on one file before the pass fails.
    pub max_attempts: u32,
    /// Passes this run makes (from its first, which a resume may move on).
    pub passes_to_run: u64,
}

/// What a push source needs.
#[derive(Clone, Debug)]
pub(crate) struct PushSettings {
    /// Chunks sent and not acknowledged, at most.
    pub chunks_in_flight: usize,
    /// Instances per chunk, at most.
    pub chunk_records: usize,
    /// Payload bytes per chunk, at most.
    pub chunk_bytes: usize,
    /// Only full chunks (deterministic mode: chunk boundaries fixed).
    pub full_chunks_only: bool,
}

/// Every stage's settings.
pub(crate) struct StageSettings {
    /// The readers'.
    pub reader: ReaderSettings,
    /// The shuffle stage's.
    pub shuffle: ShuffleSettings,
    /// The batch maker's.
    pub maker: BatchMakerSettings,
    /// The supervisor's.
    pub supervisor: SupervisorSettings,
    /// A push source's.
    pub push: PushSettings,
}

/// True when the draw of `config` can be snapshot for checkpoints: it then
/// depends only on the pool, its random stream and the chunks read next —
/// deterministic mode, one file set, no push source, no record transform,
/// no equalize quota, no bad-record fraction judged per pass, no packing
/// (the packer's window is not in the snapshot: a packed pass is drawn again
/// from its start).
pub(crate) fn snapshots_possible(config: &PipelineConfig) -> bool {
    config.order.deterministic
        && config.inputs.sets.len() <= 1
        && config.inputs.push.is_none()
        && config.transforms.records.is_none()
        && config.batching.pack.is_none()
        && config.batching.equalize == Equalize::Off
        && !matches!(
            config.faults.error_policy,
            ErrorPolicy::Skip {
                max_bad_fraction: Some(_),
                ..
            }
        )
}

impl StageSettings {
    /// Each stage's settings of `config` (checked, inputs expanded), whose
    /// instances are of `schema`, batches going into `lanes`, the run
    /// starting at pass `first_pass` (a resume's).
    pub fn derive(config: &PipelineConfig, schema: &Schema, lanes: Lanes, first_pass: u64) -> Self {
        let mut open = config.reading.open.clone();
        open.defer_checksums &= checksums_may_wait(&config.faults.error_policy);
        StageSettings {
            reader: ReaderSettings {
                registry: config.inputs.registry.clone(),
                format: config.inputs.format.clone(),
                open,
                chunk_records: config.reading.chunk_records.max(1),
                chunk_bytes: config.reading.chunk_bytes,
                chunks_in_flight: Tunable::new(config.reading.chunks_in_flight.max(1)),
                records: config.transforms.records.clone(),
                remote_cache: config.reading.remote_cache.clone(),
                schema: schema.clone(),
            },
            shuffle: ShuffleSettings {
                pool: ShuffleConfig {
                    pool_size: config.order.shuffle,
                    min_pool_size: config.order.min_pool,
                    max_bytes: config.order.shuffle_bytes,
                    seed: config.order.seed,
                },
                deterministic: config.order.deterministic,
                reorder_window: config.order.reorder_window,
                sets: (config.inputs.sets.iter())
                    .map(|s| (s.name.clone(), s.weight))
                    .collect(),
                passes: config.order.passes,
                snapshot_every: if snapshots_possible(config) {
                    config.resume.snapshot_every
                } else {
                    0
                },
                lanes,
            },
            maker: BatchMakerSettings {
                in_flight: Tunable::new(config.in_flight_batches()),
                orders_waiting: match config.tuning.autotune {
                    Some(_) => config.in_flight_batches().min(MIN_BATCHES_IN_FLIGHT),
                    None => config.in_flight_batches(),
                },
                lanes,
                schema: schema.clone(),
                pack: match (&config.batching.pack, &config.batching.batch) {
                    (Some(p), feedline::batch_policy::BatchPolicy::Fixed(rows)) => {
                        Some((p.clone(), *rows))
                    }
                    _ => None,
                },
            },
            supervisor: SupervisorSettings {
                stall_timeout: config.faults.stall_timeout,
                on_stall: config.faults.on_stall,
                max_attempts: config.faults.max_attempts,
                passes_to_run: config.order.passes.saturating_sub(first_pass),
            },
            push: PushSettings {
                chunks_in_flight: config.reading.chunks_in_flight.max(1),
                chunk_records: config.reading.chunk_records.max(1),
                chunk_bytes: config.reading.chunk_bytes,
                full_chunks_only: config.order.deterministic,
            },
        }
    }
}
