//! # feedline-actors
//!
//! The actor pipeline of feedline, built with actix from the core crate's
//! parts, and its [`Loader`]. Depend on this crate alone: it brings the core
//! ([`feedline`]) and the `ndarray` and `actix` its API uses.
//!
//! ## Quick start
//!
//! ```no_run
//! use feedline_actors::prelude::*;
//! use feedline_actors::ndarray::{Ix1, Ix2};
//!
//! let loader = Loader::builder()
//!     .files("data/train-*.tfrecord")      // one path or glob, or many; .npz, .jsonl, …
//!     .shuffle(10_000)
//!     .batch(256)
//!     .passes(2)
//!     .seed(7)
//!     .build()?;
//! for delivered in loader {
//!     let Delivered { pass, batch, .. } = delivered?;  // errors name file, record, field
//!     let x = batch.view::<f32, Ix2>("x")?;            // [256, 64]
//!     let y = batch.view::<i64, Ix1>("y")?;            // [256]
//!     let _ = (pass, x, y);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A batch's fields are contiguous `ndarray` views ([`Batch::view`]); for
//! records rather than columns, [`Batch::rows`] reads each row as your own
//! `#[derive(serde::Deserialize)]` type, fields by name.
//!
//! Warnings (a skipped record, an over-budget batch) go through the `log`
//! crate: with no logger installed (`env_logger::init()`) you see none;
//! skipped records are also counted and listed by [`Loader::stats`].
//!
//! ## Inside
//!
//! One actor per file; the pipeline's diagram, the stages and the messages
//! between them: `docs/architecture.md`.
//!
//! The shuffle stage takes chunks into its pool and draws batches; the
//! batch maker makes them — transforms on its workers, several batches in
//! flight, collation, the failed-instance policy — and releases them in
//! number order.
//!
//! `pipeline/builder.rs` is the one place that wires them: it creates the
//! queues and the statistics' recorders, derives each stage's own settings
//! (`settings.rs`) and its part of a resume (`resume_plan.rs`), starts
//! every actor, and hands each the `Recipient`s of the messages it sends
//! (`messages.rs`) — no stage file imports another, so each can be changed
//! alone. Policies have one owner each: bad records (`bad_records.rs`),
//! equal ranks (`equalize.rs`); the shuffle stage's own are plain parts
//! beside it (`shuffle_batch/`: reorder window, file-set mix, equalize
//! quota, end-of-pass drain). Taking progress for checkpoints is
//! `progress.rs`'s. Statistics are written through small recorders
//! (`recorder.rs`) and read through [`Stats`].
//!
//! Three ways in:
//! - [`Loader`]: a blocking handle for plain training loops; it runs the
//!   actix `System` on its own thread.
//! - [`Pipeline::start`] inside your own actix `System`: your actors send
//!   [`Pop`] to [`Pipeline::feed`], or implement [`TrainStep`] and let
//!   [`Pipeline::start_with_trainers`] drive them.
//! - The `feedline` command (`feedline run …`), in its own package
//!   (`cli/`, `cargo install --path cli`).
//!
//! `use feedline_actors::prelude::*;` gives what a training loop needs; the
//! core crate's types that this API takes or returns are re-exported here,
//! with the core crate itself, `ndarray` and `actix`.
//!
//! ## Features
//!
//! The light formats (TFRecord, npy/npz, JSON Lines, CSV/TSV, WebDataset
//! tar) are always in. Cargo features add the heavy parts:
//!
//! - `parquet` (default): Parquet files, the core's feature;
//! - `remote` (default): `s3://`, `gs://`, `http(s)://` inputs, the core's
//!   feature;
//! - `vision`: the image transforms of `feedline-vision` (JPEG/PNG decoding,
//!   crops, resize; needs libjpeg-turbo's C headers), re-exported as
//!   `feedline_actors::vision`.
//!
//! With `default-features = false`, a Parquet path or a URL is refused with
//! an error naming the feature to enable
//! ([`feedline::Error::NotCompiledIn`]).
//!
//! ## Backpressure
//!
//! actix mailbox capacity is not backpressure (`do_send` ignores it), so
//! hand-offs wait for room explicitly: readers have at most
//! `chunks_in_flight` chunks whose acknowledgement the shuffle stage has not
//! sent (it withholds it while it has no room, or while the chunk's file set
//! is ahead of its weight, or past the reorder window), and the shuffle
//! stage pushes batches into the feed queue's bounded lanes directly, taking
//! no further message while a lane is full. Consumers — the [`Loader`]'s
//! iterators and the trainers — take batches from the lanes directly too;
//! actors of your own send [`Pop`].

#![warn(missing_docs)]

mod arbiters;
pub mod autotune;
mod bad_records;
mod batch_maker;
pub mod checkpoint;
mod config;
pub mod counting;
pub mod epochs;
mod equalize;
mod error;
mod feed_queue_actor;
mod file_queue;
mod global_shuffle;
mod group_plan;
mod guard;
mod loader;
mod messages;
mod metrics;
mod order_stats;
mod panic;
mod paths;
mod pipeline;
mod prefetch_reader;
mod progress;
mod push;
mod recorder;
mod resume_plan;
mod setting;
mod settings;
mod shuffle_batch;
mod stall;
mod stats;
mod supervisor;
mod task_queue;
mod timeline;
mod token_field;
mod trainer;
mod tuned;
mod watch;

pub use crate::checkpoint::{Checkpoint, CheckpointError, InputFiles};
pub use crate::config::shard_given;
pub use crate::config::{
    Autotune, Batching, ErrorPolicy, Faults, Feeding, FileSet, FixedSettings, Given, Inputs,
    Monitoring, Order, PipelineConfig, Reading, Resume, ShuffleMode, StallPolicy, Tuning,
    UnusedPackSetting, ENDLESS, MAX_BATCHES_IN_FLIGHT, MAX_DEVICES, MAX_READERS,
    MIN_BATCHES_IN_FLIGHT, ROWS_IN_FLIGHT_PER_WORKER, SCHEMA_SAMPLE_RECORDS, SNAPSHOT_EVERY,
};
pub use crate::error::{PipelineError, PushError};
pub use crate::global_shuffle::{real_origin, real_origins};
pub use crate::group_plan::{group_plan, GroupPart, GroupPlan};
#[doc(hidden)]
pub use crate::guard::FaultPlan;
pub use crate::loader::{DeviceIter, Epoch, IntoIter, Iter, Loader, LoaderBuilder};
pub use crate::messages::{Delivered, Pop, Popped, PushBatch, PushSample};
pub use crate::metrics::MetricsServer;
pub use crate::order_stats::{OrderMeasures, OrderStats};
pub use crate::paths::{IntoPath, IntoPaths};
pub use crate::pipeline::{Pipeline, StartOptions};
pub use crate::progress::{input_files, CheckpointBase, DrawSnapshots, Progress};
pub use crate::push::{FeedHandle, PushStats};
pub use crate::resume_plan::ResumePlan;
pub use crate::setting::{BuilderSpelling, Setting, SettingError, Spelling, Value};
pub use crate::stats::{
    Bottleneck, DeviceSnapshot, PackingSnapshot, SkippedRecord, StageSnapshot, Stats,
    StatsSnapshot, MAX_SKIPPED_LISTED,
};
pub use crate::timeline::{Timeline, TimelineSample};
pub use crate::trainer::{SimulatedDevice, TrainStep};
pub use crate::tuned::{AutotuneChange, AutotuneSnapshot, TunedSetting, TunedValues};
pub use feedline::batch_policy::BatchPolicy;
pub use feedline::feed_queue::FeedMode;
pub use feedline::format::generator::{IntoSample, Sample};
pub use feedline::format::{Compression, Format, OpenOptions, RecordReader, Registry};
pub use feedline::pack::{LongDocs, Pack, PackPolicy, PackStats};
pub use feedline::plan::{Equalize, Shard, ShardBy};
#[cfg(feature = "tokenize")]
pub use feedline::tokenize::{Tokenize, Tokenizer};
pub use feedline::{
    Batch, BatchField, DType, Dim, Element, Field, Origin, Ragged, Record, Schema, SchemaBuilder,
    Values,
};
/// The image transforms (`feedline-vision`): JPEG/PNG decoding, crops,
/// resize, flip and normalise, as a [`LoaderBuilder::transform`] (the
/// `vision` feature).
#[cfg(feature = "vision")]
pub use feedline_vision as vision;
pub use {actix, feedline, ndarray};

/// Everything a training loop needs: `use feedline_actors::prelude::*;`.
///
/// ```no_run
/// use feedline_actors::prelude::*;
///
/// let schema = Schema::builder().field("x", DType::F32, [64]).field("y", DType::I64, []).build()?;
/// let loader = Loader::builder()
///     .files(["data/train-*.tfrecord"])
///     .schema(schema)
///     .batch_policy(BatchPolicy::Fixed(256))
///     .shard(0, 2)
///     .equalize(Equalize::Drop)
///     .error_policy(ErrorPolicy::skip())
///     .build()?;
/// for delivered in loader {
///     let Delivered { pass, batch, .. } = delivered?;
///     let x: ndarray::ArrayViewD<'_, f32> = batch.f32("x")?;
///     let _ = (pass, x);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub mod prelude {
    pub use crate::{
        ndarray, Batch, BatchPolicy, DType, Delivered, Dim, Equalize, ErrorPolicy, FeedMode,
        FileSet, IntoPaths, Loader, LoaderBuilder, PipelineError, Popped, Ragged, Sample, Schema,
        Shard, ShardBy, Values,
    };
}

/// The README's Rust examples, compiled as doctests so they stay true.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

// The guides' Rust examples (docs/*.md), one doctest item per guide;
// actors/tests/new_user.rs also builds and runs them.
/// docs/architecture.md's Rust examples, compiled as doctests.
#[doc = include_str!("../../docs/architecture.md")]
#[cfg(doctest)]
pub struct DocsArchitecture;
/// docs/cli.md's Rust examples, compiled as doctests.
#[doc = include_str!("../../docs/cli.md")]
#[cfg(doctest)]
pub struct DocsCli;
/// docs/formats.md's Rust examples, compiled as doctests.
#[doc = include_str!("../../docs/formats.md")]
#[cfg(doctest)]
pub struct DocsFormats;
/// docs/performance.md's Rust examples, compiled as doctests.
#[doc = include_str!("../../docs/performance.md")]
#[cfg(doctest)]
pub struct DocsPerformance;
/// docs/python.md's Rust examples, compiled as doctests.
#[doc = include_str!("../../docs/python.md")]
#[cfg(doctest)]
pub struct DocsPython;
/// docs/remote.md's Rust examples, compiled as doctests.
#[doc = include_str!("../../docs/remote.md")]
#[cfg(doctest)]
pub struct DocsRemote;
/// docs/resume.md's Rust examples, compiled as doctests.
#[doc = include_str!("../../docs/resume.md")]
#[cfg(doctest)]
pub struct DocsResume;
/// docs/rust.md's Rust examples, compiled as doctests.
#[doc = include_str!("../../docs/rust.md")]
#[cfg(doctest)]
pub struct DocsRust;
/// docs/transforms.md's Rust examples, compiled as doctests.
#[doc = include_str!("../../docs/transforms.md")]
#[cfg(doctest)]
pub struct DocsTransforms;
