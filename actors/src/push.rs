//! Feeding from user code: the push source and its [`FeedHandle`] (Paddle's
//! `py_reader` / `PyArrayFeedQueue`).
//!
//! A pipeline started in push mode ([`Inputs::push`](crate::Inputs::push),
//! [`LoaderBuilder::build_with_feed`](crate::LoaderBuilder::build_with_feed))
//! reads no files: its data is what producers push through a `FeedHandle`
//! (cloneable, `Send`), from any number of threads, until the stream is
//! closed — by [`FeedHandle::close`] or by dropping every clone. Consumers
//! then get the end of the pass (pass 0) and the end of data after
//! everything that was pushed.
//!
//! - Instances ([`Sample`]s) are checked against the schema at push time
//!   (field present, element type, exact dimensions: an error names the
//!   field, the expected and the actual shape, and nothing is pushed), then
//!   enter the shuffle-batch stage as chunks, like a reader's: shuffled,
//!   batched, collated. Provenance is the push source's name and the push's
//!   index (`push: record 17`); indices are unique, and a refused push uses
//!   one up.
//! - Whole ready-made [`Batch`]es (checked the same way, per field) bypass
//!   the shuffle buffer and batching: the shuffle-batch actor only numbers
//!   them and puts them in the feed queue with its own batches, so
//!   round-robin lanes, batch numbers and the end-of-pass markers stay
//!   consistent.
//!
//! ## Backpressure
//!
//! The push source has the credits of a reader: at most
//! [`chunks_in_flight`](crate::Reading::chunks_in_flight) messages (chunks or
//! batches) sent and not yet acknowledged by the shuffle-batch actor, which
//! stops acknowledging while the feed queue is full. With a credit free a
//! pushed instance is sent at once (low latency); without, instances gather
//! in one pending chunk (up to `chunk_records` instances or `chunk_bytes`),
//! which is sent when a credit comes back — so under load the messages grow
//! to full chunks. A push that finds no credit and the pending chunk full
//! waits: [`push`](FeedHandle::push) blocks, [`try_push`](FeedHandle::try_push)
//! returns [`PushError::Full`], [`push_timeout`](FeedHandle::push_timeout)
//! waits at most as long as asked. A batch needs a credit of its own. In
//! deterministic mode only full chunks are sent (and the last one at the
//! close), so one producer's pushes make the same batches on every run.
//!
//! A waiting push ends when there is room (a consumer took a batch), when the
//! stream is closed ([`PushError::Closed`]), or when the pipeline stops —
//! the loader dropped, a failure, the consumers gone ([`PushError::Stopped`]);
//! every refused item comes back in the error. Never call the blocking
//! `push` from a thread of the pipeline's actix `System`: actors there push
//! with the [`PushSample`] / [`PushBatch`] messages
//! ([`FeedHandle::recipient`]), answered when there is room.

mod check;
mod intake;

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use feedline::format::generator::Sample;
use feedline::{Batch, Schema};

use crate::error::PushError;
use crate::guard::StageGuard;
use crate::messages::{BatchMsg, ChunkMsg, PassEvent, PushBatch, PushSample};
use crate::recorder::ReaderRecorder;
use crate::settings::PushSettings;
use intake::{Shared, Wait};

/// Where a push source sends what is pushed: the shuffle stage's inputs.
pub(crate) struct PushLinks {
    /// Instances, in chunks.
    pub chunks: Recipient<ChunkMsg>,
    /// Ready-made batches.
    pub batches: Recipient<BatchMsg>,
    /// The end of the stream (the end of its one pass).
    pub pass: Recipient<PassEvent>,
}

/// What the producers have done so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PushStats {
    /// Instances accepted.
    pub instances: u64,
    /// Batches accepted.
    pub batches: u64,
    /// Instances in the accepted batches.
    pub batch_instances: u64,
    /// Chunk messages sent to the shuffle stage.
    pub chunks: u64,
    /// Pushes refused (invalid, full, timed out, closed, stopped).
    pub refused: u64,
    /// Time pushes spent waiting for room, summed over all producers.
    pub blocked: Duration,
    /// Pushes waiting for room right now (instances and batches): a
    /// producer held back by a full pipeline shows here while it waits.
    pub waiting: usize,
}

/// A handle to push instances and batches into a push-mode pipeline;
/// cloneable and `Send`. The stream ends at [`close`](Self::close) or when
/// the last clone is dropped.
///
/// ```
/// use feedline::format::generator::Sample;
/// use feedline::{DType, Schema, Values};
/// use feedline_actors::Loader;
///
/// let schema = Schema::builder()
///     .field("x", DType::F32, [2])
///     .field("y", DType::I64, [])
///     .build()
///     .unwrap();
/// let (loader, feed) = Loader::builder().schema(schema).batch(4).build_with_feed().unwrap();
/// let producer = std::thread::spawn(move || {
///     for i in 0..10 {
///         let s = Sample::new()
///             .with("x", Values::F32(vec![i as f32, 0.5]), [2])
///             .with("y", Values::I64(vec![i]), []);
///         feed.push(s).unwrap();
///     }
///     // dropping the last handle closes the stream
/// });
/// let mut seen = 0;
/// for batch in loader {
///     seen += batch.unwrap().batch.len();
/// }
/// producer.join().unwrap();
/// assert_eq!(seen, 10);
/// ```
pub struct FeedHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for FeedHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedHandle")
            .field("source", &self.shared.source)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Clone for FeedHandle {
    fn clone(&self) -> Self {
        self.shared.state.lock().handles += 1;
        FeedHandle {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for FeedHandle {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock();
        st.handles -= 1;
        if st.handles == 0 && !st.closed {
            st.closed = true;
            self.shared.pump(&mut st);
        }
    }
}

impl FeedHandle {
    /// Start the push source of a pipeline (in its actix `System`).
    pub(crate) fn start(
        name: &str,
        settings: &PushSettings,
        schema: &Schema,
        links: PushLinks,
        recorder: ReaderRecorder,
        guard: StageGuard,
    ) -> FeedHandle {
        FeedHandle {
            shared: intake::start(name, settings, schema, links, recorder, guard),
        }
    }

    /// Push an instance, waiting while the pipeline is full.
    pub fn push(&self, sample: Sample) -> Result<(), PushError<Sample>> {
        self.shared.push_instance(sample, Wait::Forever)
    }

    /// Push an instance if there is room now ([`PushError::Full`] if not).
    pub fn try_push(&self, sample: Sample) -> Result<(), PushError<Sample>> {
        self.shared.push_instance(sample, Wait::No)
    }

    /// Push an instance, waiting at most `timeout` for room.
    pub fn push_timeout(&self, sample: Sample, timeout: Duration) -> Result<(), PushError<Sample>> {
        self.shared
            .push_instance(sample, Wait::Until(Instant::now() + timeout, timeout))
    }

    /// Push a ready-made batch (it goes to the devices as it is), waiting
    /// while the pipeline is full.
    pub fn push_batch(&self, batch: Batch) -> Result<(), PushError<Batch>> {
        self.shared.push_batch(batch, Wait::Forever)
    }

    /// Push a batch if there is room now.
    pub fn try_push_batch(&self, batch: Batch) -> Result<(), PushError<Batch>> {
        self.shared.push_batch(batch, Wait::No)
    }

    /// Push a batch, waiting at most `timeout` for room.
    pub fn push_batch_timeout(
        &self,
        batch: Batch,
        timeout: Duration,
    ) -> Result<(), PushError<Batch>> {
        self.shared
            .push_batch(batch, Wait::Until(Instant::now() + timeout, timeout))
    }

    /// End the stream (for every clone): consumers get the end of data after
    /// everything pushed so far; pushes waiting now and later fail with
    /// [`PushError::Closed`]. Idempotent.
    pub fn close(&self) {
        let mut st = self.shared.state.lock();
        if !st.closed {
            st.closed = true;
            self.shared.pump(&mut st);
        }
    }

    /// True once the stream is closed or the pipeline stopped.
    pub fn is_closed(&self) -> bool {
        let st = self.shared.state.lock();
        st.closed || st.stopped.is_some()
    }

    /// The schema pushed items must fit.
    pub fn schema(&self) -> &Schema {
        &self.shared.schema
    }

    /// What the producers have done so far.
    pub fn stats(&self) -> PushStats {
        self.shared.state.lock().stats.clone()
    }

    /// The push source as a recipient of [`PushSample`], for actors: the
    /// answer comes when the instance is in (never blocks the actor's thread).
    pub fn recipient(&self) -> Recipient<PushSample> {
        self.shared.intake.clone().recipient()
    }

    /// The push source as a recipient of [`PushBatch`].
    pub fn batch_recipient(&self) -> Recipient<PushBatch> {
        self.shared.intake.clone().recipient()
    }
}
