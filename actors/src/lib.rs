//! # feedline-actors
//!
//! The actor pipeline of feedline, built with actix from the core crate's
//! parts:
//!
//! ```text
//! FileQueue ──steal──▶ PrefetchReader×N ──chunks──▶ ShuffleBatch ──batches──▶ FeedQueue ◀──Pop── Trainer×D
//!      ▲                    │ FileDone/FileFailed                                                    │
//!      └────────────── Supervisor ◀──────────────────────────────────────────────────────────────────┘
//! ```
//!
//! Three ways in:
//! - [`Loader`]: a blocking handle for plain training loops; it runs the
//!   actix `System` on its own thread.
//! - [`Pipeline::start`] inside your own actix `System`: your actors send
//!   [`Pop`] to the feed queue, or implement [`TrainStep`] and let
//!   [`Pipeline::start_with_trainers`] drive them.
//! - The `feedline` command (`feedline run …`).
//!
//! ## Backpressure
//!
//! actix mailbox capacity is not backpressure (`do_send` ignores it), so
//! hand-offs wait for room explicitly: readers have at most
//! `chunks_in_flight` chunks whose acknowledgement the shuffle stage has not
//! sent (it withholds it while it has no room, or while the chunk's file set
//! is ahead of its weight), and the shuffle stage pushes batches into the
//! feed queue's bounded lanes directly, taking no further message while a
//! lane is full. Consumers — the [`Loader`]'s iterators and the trainers —
//! take batches from the lanes directly too; actors of your own send [`Pop`].

#![warn(missing_docs)]

mod config;
mod error;
mod feed_queue;
mod file_queue;
mod loader;
mod messages;
mod pipeline;
mod prefetch_reader;
mod push;
mod shuffle_batch;
mod stats;
mod supervisor;
mod timeline;
mod trainer;

pub use config::{ErrorPolicy, FeedMode, FileSet, PipelineConfig, StallPolicy};
pub use error::PipelineError;
pub use feed_queue::{FeedQueue, PopReply};
pub use file_queue::FileQueue;
pub use loader::{DeviceIter, IntoIter, Iter, Loader, LoaderBuilder};
pub use messages::{Delivered, Pop, Popped, Shutdown};
pub use pipeline::Pipeline;
pub use prefetch_reader::PrefetchReader;
pub use push::{FeedHandle, PushBatch, PushError, PushSample, PushStats};
pub use shuffle_batch::ShuffleBatch;
pub use stats::{Bottleneck, DeviceSnapshot, SkippedRecord, StageSnapshot, Stats, StatsSnapshot};
pub use supervisor::Supervisor;
pub use timeline::{Sample, Timeline};
pub use trainer::{SimulatedDevice, TrainStep, Trainer};

/// The README's Rust examples, compiled as doctests so they stay true.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
