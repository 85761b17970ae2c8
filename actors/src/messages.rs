//! The messages the actors exchange, and the items the feed queue delivers.
//!
//! Chunks flow reader → shuffle-batch with an acknowledgement (the reply)
//! that the receiver may withhold: that is the pipeline's backpressure, since
//! actix mailbox capacity is not. Batches go shuffle-batch → feed queue
//! straight into its shared lanes (no message: see `feed_queue`); actix
//! consumers take them with `Pop`, answered when there is something to give.

use std::sync::Arc;

use actix::prelude::*;
use feedline::plan::FileTask;
use feedline::{Batch, Chunk};

use crate::error::PipelineError;

/// A file to read, from a record on: a pass's task, or a retry of one.
#[derive(Clone, Debug)]
pub struct ReadTask {
    /// The file set the file belongs to (0 without sets).
    pub set: usize,
    /// The plan's task.
    pub task: FileTask,
    /// First record to read (the task's start, or where a failed reader stopped).
    pub start_record: u64,
    /// Index of the next chunk this file sends (continues across retries).
    pub next_chunk: u64,
    /// How many readers failed on this file so far.
    pub attempts: u32,
}

/// Instances read from one file, sent reader → shuffle-batch with
/// `do_send` (a `send` whose request future is dropped — say, because the
/// reader stopped — is discarded unhandled by actix, which would lose the
/// chunk). The receiver answers with a [`ChunkAck`] once it has room.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ChunkMsg {
    /// Where the acknowledgement goes.
    pub ack: Recipient<ChunkAck>,
    /// Pass.
    pub pass: u64,
    /// The file set (0 without sets).
    pub set: usize,
    /// The file's position in its set's order for the pass.
    pub file_seq: usize,
    /// Index of this chunk within the file.
    pub chunk_seq: u64,
    /// True for the file's last chunk (possibly empty).
    pub last: bool,
    /// The instances.
    pub chunk: Arc<Chunk>,
}

/// A ready-made batch pushed by user code (push source → shuffle-batch,
/// with `do_send`): it skips the shuffle buffer and batching and is queued
/// with the stage's own batches. Answered with a [`ChunkAck`] once taken.
#[derive(Message)]
#[rtype(result = "()")]
pub struct BatchMsg {
    /// Where the acknowledgement goes.
    pub ack: Recipient<ChunkAck>,
    /// The batch, already checked against the schema.
    pub batch: Arc<Batch>,
}

/// The shuffle stage took a chunk and has room for another.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ChunkAck;

/// A reader finished a file: every chunk of it was acknowledged.
#[derive(Message)]
#[rtype(result = "()")]
pub struct FileDone {
    /// The task.
    pub task: ReadTask,
    /// Records delivered from this file (by all attempts).
    pub records: u64,
}

/// A reader failed on a file (a panic, or an error under the fail policy).
#[derive(Message)]
#[rtype(result = "()")]
pub struct FileFailed {
    /// The task, with `start_record`/`next_chunk` advanced to what was delivered.
    pub task: ReadTask,
    /// The reader that failed.
    pub reader: usize,
    /// What happened.
    pub error: PipelineError,
    /// True if it was a panic (the file is retried by a fresh reader).
    pub panicked: bool,
}

/// One delivered batch with its place in the stream.
#[derive(Clone, Debug)]
pub struct Delivered {
    /// Pass (0-based).
    pub pass: u64,
    /// Position of the batch in the pass (0-based, over all devices).
    pub seq: u64,
    /// The batch.
    pub batch: Arc<Batch>,
}

/// What a consumer gets from the feed queue.
#[derive(Clone, Debug)]
pub enum Popped {
    /// A batch.
    Batch(Delivered),
    /// Every batch of this pass that this consumer will get has been given.
    EndOfPass(u64),
    /// No more data: all passes done.
    EndOfData,
}

/// File queue → shuffle-batch, with several file sets: how many files each
/// set has in a pass (for the deterministic mix), sent as the pass starts.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct PassSets {
    pub pass: u64,
    pub files: Vec<usize>,
}

/// File queue → shuffle-batch: every file of `set` in `pass` was read (its
/// last chunk is already in the shuffle-batch mailbox); the mix stops
/// waiting for it.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct SetDrained {
    pub pass: u64,
    pub set: usize,
}

/// An item in the feed queue.
#[derive(Clone, Debug)]
pub(crate) enum QueueItem {
    Batch(Delivered),
    EndOfPass(u64),
}

/// Take the next item for consumer `consumer` (a device index); answered
/// when there is one. Embedding applications send this from their own actors.
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "Result<Popped, PipelineError>")]
pub struct Pop {
    /// The consumer (device) asking.
    pub consumer: usize,
}

/// No more items will be pushed: consumers get `EndOfData` once drained.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct CloseQueue;

/// The pipeline failed: every consumer gets this error.
#[derive(Message, Clone)]
#[rtype(result = "()")]
pub(crate) struct Fail(pub PipelineError);

/// Stop now.
#[derive(Message, Clone, Copy)]
#[rtype(result = "()")]
pub struct Shutdown;

/// Every file of a pass was delivered (file queue → shuffle-batch).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct EndOfPass(pub u64);

/// Shuffle-batch pushed the last batch of a pass (→ supervisor).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct PassFlushed {
    pub pass: u64,
    pub batches: u64,
    pub records: u64,
}

/// This rank's share of a pass when ranks are equalized: deliver the first
/// `keep` instances drawn, then `pad` repeats (file queue → shuffle-batch,
/// before the pass's first chunk).
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "()")]
pub(crate) struct PassQuota {
    pub pass: u64,
    pub keep: u64,
    pub pad: u64,
}
