//! Every message the actors exchange — self-messages included — and the
//! items the feed queue carries. A stage knows the others only through the
//! `Recipient`s of these messages that the wiring site
//! ([`pipeline`](crate::pipeline)) hands it.
//!
//! Who sends which to whom: the message diagram of
//! `docs/architecture.md` (its section "Messages").
//!
//! Chunks flow reader → shuffle-batch with an acknowledgement ([`ChunkAck`])
//! that the receiver may withhold: that is the pipeline's backpressure, since
//! actix mailbox capacity is not. Drawn batches ([`BatchOrder`]) go
//! shuffle-batch → batch maker through a bounded queue of orders, and made
//! batches batch maker → consumers through the feed queue's lanes (no
//! message either way); actix consumers take them with [`Pop`], answered
//! when there is something to give.

use std::sync::Arc;

use actix::prelude::*;
use feedline::feed_queue::{FeedQueue, Item};
use feedline::format::generator::Sample;
use feedline::plan::FileTask;
use feedline::{Batch, Chunk, RowRef};

use crate::error::{PipelineError, PushError};

/// A file to read, from a record on: a pass's task, or a retry of one.
#[derive(Clone, Debug)]
pub(crate) struct ReadTask {
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
pub(crate) struct ChunkMsg {
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
    /// The record the chunk's reading started at (0 when pushed).
    pub start_record: u64,
    /// The record after it: where the file's next chunk starts.
    pub end_record: u64,
    /// The instances.
    pub chunk: Arc<Chunk>,
}

/// A ready-made batch pushed by user code (push source → shuffle-batch,
/// with `do_send`): it skips the shuffle buffer and batching and is queued
/// with the stage's own batches. Answered with a [`ChunkAck`] once taken.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct BatchMsg {
    /// Where the acknowledgement goes.
    pub ack: Recipient<ChunkAck>,
    /// The batch, already checked against the schema.
    pub batch: Arc<Batch>,
}

/// The shuffle stage took a chunk and has room for another.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ChunkAck;

/// Reader → file queue: a file was read and every chunk of it acknowledged.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct FileDone {
    /// The task.
    pub task: ReadTask,
    /// Records delivered from this file (by all attempts).
    pub records: u64,
}

/// Reader → supervisor: reading a file failed (a panic, or an error under
/// the fail policy).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct FileFailed {
    /// The task, with `start_record`/`next_chunk` advanced to what was delivered.
    pub task: ReadTask,
    /// The reader that failed.
    pub reader: usize,
    /// What happened.
    pub error: PipelineError,
    /// True if it was a panic (the file is retried by a fresh reader).
    pub panicked: bool,
}

/// Reader → file queue: it found no task and waits for a [`Wake`].
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ReaderIdle {
    /// The reader.
    pub reader: usize,
    /// Where to send the [`Wake`].
    pub wake: Recipient<Wake>,
}

/// File queue → idle readers: new tasks are queued.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Wake;

/// A reader to itself: read the next chunk.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Next;

/// Supervisor → file queue: queue a failed file again, from where its reader stopped.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Requeue(pub ReadTask);

/// Wiring site → file queue: start pass 0.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct StartPasses;

/// File queue (or the push source) → shuffle-batch: where a pass stands.
/// Sent in this order within a pass: `Quota` and `Sets` as it starts
/// (before its first chunk), `SetDrained` as sets are read, `Ended` last.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub(crate) enum PassEvent {
    /// Ranks are equalized: this rank's share of `pass` — deliver the first
    /// `keep` instances drawn, then `pad` repeats.
    Quota {
        /// The pass.
        pass: u64,
        /// Instances to keep.
        keep: u64,
        /// Instances to repeat.
        pad: u64,
    },
    /// Several file sets: how many files each set has in `pass` (for the
    /// deterministic mix).
    Sets {
        /// The pass.
        pass: u64,
        /// Files per set.
        files: Vec<usize>,
    },
    /// Every file of `set` in `pass` was read (its last chunk is already in
    /// the shuffle stage's mailbox): the mix stops waiting for it.
    SetDrained {
        /// The pass.
        pass: u64,
        /// The set.
        set: usize,
    },
    /// Every file of the pass was delivered.
    Ended(u64),
}

/// Shuffle-batch → supervisor: the last batch of a pass is made.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct PassFlushed {
    /// The pass.
    pub pass: u64,
    /// Batches made in it.
    pub batches: u64,
    /// Records in them.
    pub records: u64,
}

/// Batch maker → supervisor: every batch of the last pass is in the feed
/// queue, which is closed (without trainers, `finished()` resolves now).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct StreamQueued;

/// Any stage → supervisor: the pipeline cannot go on; every consumer gets
/// this error. The one failure path of the pipeline.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct PipelineFailed(pub PipelineError);

/// Trainer → supervisor: a trainer ended (end of data, or with an error).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct TrainerDone {
    /// Its device.
    pub device: usize,
    /// Why, if not the end of data.
    pub error: Option<PipelineError>,
}

/// A trainer to itself: an item it took from the lanes, handled after the
/// step that was running when it was taken.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Take(pub Result<Popped, PipelineError>);

/// A batch's place in the stream, given when the draw numbers it and
/// carried whole to its delivery: the feed-queue lane it goes to, its pass,
/// its number in the pass, and how many of its last rows are equalize
/// padding (repeated instances).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BatchPlace {
    /// The feed queue lane it goes to.
    pub lane: usize,
    /// Its pass.
    pub pass: u64,
    /// Its number in the pass.
    pub seq: u64,
    /// Of its rows, the last `padded` are equalize padding.
    pub padded: usize,
}

/// The rows of one batch with its place: drawn by the shuffle stage, to
/// be made into a batch by the batch maker.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct BatchJob<R> {
    /// Where it goes.
    pub place: BatchPlace,
    /// Its rows.
    pub rows: Vec<R>,
}

/// What the shuffle stage hands the batch maker, in batch-number order
/// (through the [`OrderQueue`]).
#[derive(Debug)]
pub(crate) enum BatchOrder {
    /// A batch's drawn rows: made into the batch (transforms, collation,
    /// padding marks).
    Rows(BatchJob<RowRef>),
    /// A ready-made (pushed) batch, numbered and laned (nothing padded).
    Ready {
        /// Where it goes.
        place: BatchPlace,
        /// The batch.
        batch: Arc<Batch>,
    },
    /// Every batch of `pass` was ordered; `records` of its records went
    /// into the shuffle pool (for the bad-record fraction of the pass).
    PassEnd {
        /// The pass.
        pass: u64,
        /// Records taken into the pool in it.
        records: u64,
    },
}

/// The bounded queue of orders between the shuffle stage and the batch
/// maker: one lane, `batches_in_flight` orders; closed after the last.
pub(crate) type OrderQueue = FeedQueue<BatchOrder, PipelineError>;

/// A transform worker → the batch maker: the batch of order `ticket` is made.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Made {
    /// The order's place among the orders taken.
    pub ticket: u64,
    /// Where the batch goes.
    pub place: BatchPlace,
    /// What the transforms gave.
    pub made: feedline::Result<feedline::transform::Transformed>,
}

/// Stop now.
#[derive(Message, Clone, Copy)]
#[rtype(result = "()")]
pub(crate) struct Shutdown;

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

/// What a consumer gets from the feed queue: a [`Delivered`] batch, the end
/// of a pass (every batch of it this consumer will get has been given), or
/// the end of data.
pub type Popped = feedline::feed_queue::Popped<Delivered>;

/// An item in the feed queue's lanes.
pub(crate) type QueueItem = Item<Delivered>;

/// The feed queue's lanes as the pipeline uses them.
pub(crate) type BatchQueue = FeedQueue<Delivered, PipelineError>;

/// Take the next item for consumer `consumer` (a device index); answered
/// when there is one. Embedding applications send this from their own
/// actors to [`Pipeline::feed`](crate::Pipeline::feed) (a full example is
/// on [`Pipeline`](crate::Pipeline)).
///
/// ```no_run
/// # use feedline_actors::{Pipeline, Pop, Popped};
/// # async fn consume(pipeline: &Pipeline) -> Result<(), Box<dyn std::error::Error>> {
/// let feed = pipeline.feed();
/// loop {
///     match feed.send(Pop { consumer: 0 }).await.map_err(|e| e.to_string())?? {
///         Popped::Batch(d) => println!("pass {}: {} rows", d.pass, d.batch.len()),
///         Popped::EndOfPass(pass) => println!("pass {pass} done"),
///         Popped::EndOfData => return Ok(()),
///     }
/// }
/// # }
/// ```
#[derive(Message, Clone, Copy, Debug)]
#[rtype(result = "Result<Popped, PipelineError>")]
pub struct Pop {
    /// The consumer (device) asking.
    pub consumer: usize,
}

/// Push one instance (from an actor); answered when it is in the pipeline.
///
/// Once handled, the push completes even if the sender stops waiting.
#[derive(Message)]
#[rtype(result = "Result<(), PushError<Sample>>")]
pub struct PushSample(pub Sample);

/// Push one ready-made batch (from an actor); answered when it is in the pipeline.
#[derive(Message)]
#[rtype(result = "Result<(), PushError<Batch>>")]
pub struct PushBatch(pub Batch);
