//! Feeding from user code: the push source and its [`FeedHandle`] (Paddle's
//! `py_reader` / `PyArrayFeedQueue`).
//!
//! A pipeline started in push mode ([`PipelineConfig::push`],
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
//! [`chunks_in_flight`](PipelineConfig::chunks_in_flight) messages (chunks or
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

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use feedline::format::generator::{append_sample, describe_shape, Sample};
use feedline::plan::PassPlan;
use feedline::{Batch, Chunk, DType, Dim, Field, Origin, Ragged, Schema, SourceId};
use futures::channel::oneshot;
use parking_lot::{Condvar, Mutex};

use crate::config::PipelineConfig;
use crate::error::PipelineError;
use crate::messages::{BatchMsg, ChunkAck, ChunkMsg, EndOfPass};
use crate::shuffle_batch::ShuffleBatch;
use crate::stats::Stats;

/// How often a waiting push looks whether the pipeline is still there.
const POLL: Duration = Duration::from_millis(50);

/// Why a push failed. The item comes back in every case
/// ([`into_inner`](Self::into_inner)).
#[derive(Debug)]
pub enum PushError<T> {
    /// The item does not fit the schema: the error names the field, the
    /// expected and the actual shape. Nothing was pushed.
    Invalid(Box<feedline::Error>, T),
    /// No room now ([`FeedHandle::try_push`]).
    Full(T),
    /// No room within the time given.
    Timeout(Duration, T),
    /// The stream was closed ([`FeedHandle::close`], or every handle dropped).
    Closed(T),
    /// The pipeline stopped (the loader was dropped, or it failed): nobody
    /// will consume the item.
    Stopped(PipelineError, T),
}

impl<T> PushError<T> {
    /// The item that was not pushed.
    pub fn into_inner(self) -> T {
        match self {
            PushError::Invalid(_, t)
            | PushError::Full(t)
            | PushError::Timeout(_, t)
            | PushError::Closed(t)
            | PushError::Stopped(_, t) => t,
        }
    }

    /// The item that was not pushed.
    pub fn item(&self) -> &T {
        match self {
            PushError::Invalid(_, t)
            | PushError::Full(t)
            | PushError::Timeout(_, t)
            | PushError::Closed(t)
            | PushError::Stopped(_, t) => t,
        }
    }

    fn map<U>(self, f: impl FnOnce(T) -> U) -> PushError<U> {
        match self {
            PushError::Invalid(e, t) => PushError::Invalid(e, f(t)),
            PushError::Full(t) => PushError::Full(f(t)),
            PushError::Timeout(d, t) => PushError::Timeout(d, f(t)),
            PushError::Closed(t) => PushError::Closed(f(t)),
            PushError::Stopped(e, t) => PushError::Stopped(e, f(t)),
        }
    }
}

impl<T> std::fmt::Display for PushError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PushError::Invalid(e, _) => write!(f, "{e}"),
            PushError::Full(_) => f.write_str("the pipeline is full"),
            PushError::Timeout(d, _) => write!(f, "no room in the pipeline within {d:?}"),
            PushError::Closed(_) => f.write_str("the push stream is closed"),
            PushError::Stopped(e, _) => write!(f, "the pipeline has stopped ({e})"),
        }
    }
}

impl<T: std::fmt::Debug> std::error::Error for PushError<T> {}

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
}

/// The answer to a parked push (the item stays with the waiting future).
type Answer = oneshot::Sender<Result<(), PushError<()>>>;

/// A push from an actor that waits for room.
enum Parked {
    Instance(Chunk, Answer),
    Batch(Arc<Batch>, Answer),
}

impl Parked {
    fn canceled(&self) -> bool {
        match self {
            Parked::Instance(_, tx) | Parked::Batch(_, tx) => tx.is_canceled(),
        }
    }

    /// Answer with the stream's end (`stopped` or else closed).
    fn refuse(self, stopped: &Option<PipelineError>) {
        // Drop the item first: the waiting future then holds the only reference.
        let tx = match self {
            Parked::Instance(row, tx) => {
                drop(row);
                tx
            }
            Parked::Batch(batch, tx) => {
                drop(batch);
                tx
            }
        };
        let _ = tx.send(Err(match stopped {
            Some(e) => PushError::Stopped(e.clone(), ()),
            None => PushError::Closed(()),
        }));
    }
}

/// Wait for a parked push's answer; the item comes back on refusal.
async fn answered<T>(
    rx: oneshot::Receiver<Result<(), PushError<()>>>,
    item: impl FnOnce() -> T,
) -> Result<(), PushError<T>> {
    match rx.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.map(|()| item())),
        // The intake went away with the pipeline.
        Err(_) => Err(PushError::Stopped(PipelineError::Stopped, item())),
    }
}

struct State {
    /// Messages the shuffle stage may still take unacknowledged.
    credits: usize,
    /// Instances waiting for a credit.
    pending: Option<Chunk>,
    chunk_seq: u64,
    /// Live `FeedHandle`s: the stream closes when the last one goes.
    handles: usize,
    closed: bool,
    /// The end of the pass was sent.
    ended: bool,
    stopped: Option<PipelineError>,
    parked: VecDeque<Parked>,
    /// Threads waiting to push a batch (they have precedence for a credit
    /// over a pending chunk that is not full).
    batch_waiters: usize,
    stats: PushStats,
}

struct Shared {
    state: Mutex<State>,
    room: Condvar,
    schema: Schema,
    source: SourceId,
    chunk_records: usize,
    chunk_bytes: usize,
    /// Deterministic mode: send only full chunks (and the last), so that the
    /// shuffle sees the same chunks whatever the timing.
    full_chunks_only: bool,
    shuffle: Addr<ShuffleBatch>,
    intake: Addr<PushIntake>,
    stats: Stats,
    next_record: AtomicU64,
    next_batch: AtomicU64,
}

/// How long a push may wait.
#[derive(Clone, Copy)]
enum Wait {
    No,
    Until(Instant, Duration),
    Forever,
}

impl Shared {
    fn pending_len(st: &State) -> usize {
        st.pending.as_ref().map_or(0, Chunk::len)
    }

    fn pending_full(&self, st: &State) -> bool {
        st.pending
            .as_ref()
            .is_some_and(|p| p.len() >= self.chunk_records || p.payload_bytes() >= self.chunk_bytes)
    }

    fn room_for_instance(&self, st: &State) -> bool {
        st.credits > 0 || !self.pending_full(st)
    }

    fn send_chunk(&self, st: &mut State, chunk: Chunk) {
        let n = chunk.len() as u64;
        let r = &self.stats.inner.readers;
        r.records.fetch_add(n, Relaxed);
        r.bytes.fetch_add(chunk.payload_bytes() as u64, Relaxed);
        st.credits = st.credits.saturating_sub(1);
        st.stats.chunks += 1;
        let msg = ChunkMsg {
            ack: self.intake.clone().recipient(),
            pass: 0,
            set: 0,
            file_seq: 0,
            chunk_seq: st.chunk_seq,
            last: false,
            chunk: Arc::new(chunk),
        };
        st.chunk_seq += 1;
        self.shuffle.do_send(msg);
    }

    fn send_batch(&self, st: &mut State, batch: Arc<Batch>) {
        let r = &self.stats.inner.readers;
        r.records.fetch_add(batch.len() as u64, Relaxed);
        r.bytes.fetch_add(batch.payload_bytes() as u64, Relaxed);
        st.credits = st.credits.saturating_sub(1);
        st.stats.batches += 1;
        st.stats.batch_instances += batch.len() as u64;
        self.shuffle.do_send(BatchMsg {
            ack: self.intake.clone().recipient(),
            batch,
        });
    }

    /// Take a checked one-row chunk (there is room).
    fn insert_instance(&self, st: &mut State, row: Chunk) {
        st.stats.instances += 1;
        let chunk = match st.pending.take() {
            None => row,
            Some(mut p) => {
                p.extend_rows(&row, 0, row.len())
                    .expect("a pushed row is held in memory, with no CRC left to check");
                p
            }
        };
        let full = chunk.len() >= self.chunk_records || chunk.payload_bytes() >= self.chunk_bytes;
        if st.credits > 0 && (full || (st.batch_waiters == 0 && !self.full_chunks_only)) {
            self.send_chunk(st, chunk);
        } else {
            st.pending = Some(chunk);
        }
    }

    /// Serve parked actor pushes, send the pending chunk if it may go, and
    /// end the stream once closed.
    fn pump(&self, st: &mut State) {
        if st.stopped.is_some() {
            return;
        }
        while let Some(front) = st.parked.front() {
            if front.canceled() {
                st.parked.pop_front();
                continue;
            }
            let room = match front {
                Parked::Instance(..) => self.room_for_instance(st),
                Parked::Batch(..) => st.credits > 0,
            };
            if !room || st.closed {
                break;
            }
            match st.parked.pop_front().expect("front exists") {
                Parked::Instance(row, tx) => {
                    self.insert_instance(st, row);
                    let _ = tx.send(Ok(()));
                }
                Parked::Batch(b, tx) => {
                    self.send_batch(st, b);
                    let _ = tx.send(Ok(()));
                }
            }
        }
        let full = self.pending_full(st);
        if st.credits > 0
            && Self::pending_len(st) > 0
            && (full || (st.batch_waiters == 0 && !self.full_chunks_only))
        {
            let p = st.pending.take().expect("pending");
            self.send_chunk(st, p);
        }
        if st.closed && !st.ended {
            for p in std::mem::take(&mut st.parked) {
                st.stats.refused += 1;
                p.refuse(&None);
            }
            if let Some(p) = st.pending.take() {
                // The last chunk may go beyond the credits: it is bounded.
                st.credits += 1;
                self.send_chunk(st, p);
            }
            st.ended = true;
            self.shuffle.do_send(EndOfPass(0));
            log::debug!(
                "push stream closed after {} instances and {} batches",
                st.stats.instances,
                st.stats.batches
            );
        }
        self.room.notify_all();
    }

    fn stop(&self, st: &mut State, e: PipelineError) {
        if st.stopped.is_none() {
            st.stopped = Some(e);
            st.pending = None;
            for p in std::mem::take(&mut st.parked) {
                st.stats.refused += 1;
                p.refuse(&st.stopped);
            }
        }
        self.room.notify_all();
    }

    /// Wait for a change; false if the wait is over (`Wait::No` or the
    /// deadline passed).
    fn wait(&self, st: &mut parking_lot::MutexGuard<'_, State>, wait: Wait) -> bool {
        let slice = match wait {
            Wait::No => return false,
            Wait::Until(deadline, _) => {
                let now = Instant::now();
                if now >= deadline {
                    return false;
                }
                (deadline - now).min(POLL)
            }
            Wait::Forever => POLL,
        };
        self.room.wait_for(st, slice);
        if !self.shuffle.connected() {
            self.stop(st, PipelineError::Stopped);
        }
        true
    }

    fn closed_error<T>(st: &State, t: T) -> Option<PushError<T>> {
        if let Some(e) = &st.stopped {
            return Some(PushError::Stopped(e.clone(), t));
        }
        if st.closed {
            return Some(PushError::Closed(t));
        }
        None
    }

    /// Check `sample` and make it a one-row chunk.
    fn conform(&self, sample: &Sample) -> Result<Chunk, feedline::Error> {
        let mut row = Chunk::with_capacity(&self.schema, 1);
        let origin = Origin::new(self.source, self.next_record.fetch_add(1, Relaxed));
        append_sample(&mut row, sample, origin)?;
        Ok(row)
    }

    fn push_instance(&self, sample: Sample, wait: Wait) -> Result<(), PushError<Sample>> {
        let row = match self.conform(&sample) {
            Ok(row) => row,
            Err(e) => {
                self.state.lock().stats.refused += 1;
                return Err(PushError::Invalid(Box::new(e), sample));
            }
        };
        let t0 = Instant::now();
        let mut st = self.state.lock();
        let mut waited = false;
        let result = loop {
            if let Some(e) = Self::closed_error(&st, ()) {
                break Err(e);
            }
            if self.room_for_instance(&st) {
                self.insert_instance(&mut st, row);
                break Ok(());
            }
            waited = true;
            if !self.wait(&mut st, wait) {
                break Err(match wait {
                    Wait::Until(_, d) => PushError::Timeout(d, ()),
                    _ => PushError::Full(()),
                });
            }
        };
        if waited {
            st.stats.blocked += t0.elapsed();
        }
        result.map_err(|e| {
            st.stats.refused += 1;
            e.map(|()| sample)
        })
    }

    fn push_batch(&self, batch: Batch, wait: Wait) -> Result<(), PushError<Batch>> {
        let index = self.next_batch.fetch_add(1, Relaxed);
        if let Err(e) = check_batch(&self.schema, &batch, self.source, index) {
            self.state.lock().stats.refused += 1;
            return Err(PushError::Invalid(Box::new(e), batch));
        }
        let t0 = Instant::now();
        let mut st = self.state.lock();
        let mut waited = false;
        st.batch_waiters += 1;
        let result = loop {
            if let Some(e) = Self::closed_error(&st, ()) {
                break Err(e);
            }
            if st.credits > 0 {
                break Ok(());
            }
            waited = true;
            if !self.wait(&mut st, wait) {
                break Err(match wait {
                    Wait::Until(_, d) => PushError::Timeout(d, ()),
                    _ => PushError::Full(()),
                });
            }
        };
        st.batch_waiters -= 1;
        if waited {
            st.stats.blocked += t0.elapsed();
        }
        match result {
            Ok(()) => {
                self.send_batch(&mut st, Arc::new(batch));
                self.pump(&mut st);
                Ok(())
            }
            Err(e) => {
                st.stats.refused += 1;
                // The credit this waiter had precedence for may go to a pending chunk.
                self.pump(&mut st);
                Err(e.map(|()| batch))
            }
        }
    }
}

/// Check a ready-made batch against the schema: the same fields, each of the
/// declared type, layout (ragged: the schema's offsets or padded layout) and
/// dimensions for `batch.len()` instances.
fn check_batch(
    schema: &Schema,
    batch: &Batch,
    source: SourceId,
    index: u64,
) -> Result<(), feedline::Error> {
    let bad =
        |what: String| feedline::Error::Schema(format!("{source}: pushed batch {index}: {what}"));
    if batch.schema().len() != schema.len() {
        return Err(bad(format!(
            "{} fields, the schema has {} ({})",
            batch.schema().len(),
            schema.len(),
            schema
                .fields()
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let n = batch.len();
    for f in schema.fields() {
        let bf = batch
            .field(&f.name)
            .map_err(|_| bad(format!("no field `{}`", f.name)))?;
        let shape = bf.data.shape();
        let layout = |bf: &feedline::BatchField| match (&bf.offsets, &bf.lengths) {
            (None, None) => "",
            (Some(_), _) => " with offsets",
            (None, Some(_)) => " with lengths",
        };
        let expected = batch_expected(f, n);
        let actual = format!("{}{}", describe_shape(&shape, bf.data.dtype()), layout(bf));
        let mismatch = || {
            bad(format!(
                "field `{}`: expected {expected}, got {actual}",
                f.name
            ))
        };
        if bf.data.dtype() != f.dtype {
            return Err(mismatch());
        }
        let bytes = f.dtype == DType::Bytes;
        let trailing = f.fixed_dims();
        if !f.is_ragged() {
            let want: Vec<usize> = if bytes {
                vec![n * f.unit_elements()]
            } else {
                std::iter::once(n).chain(trailing).collect()
            };
            if shape != want || bf.offsets.is_some() || bf.lengths.is_some() {
                return Err(mismatch());
            }
            continue;
        }
        match (f.ragged, &bf.offsets, &bf.lengths) {
            (Ragged::Offsets, Some(off), None) => {
                if off.len() != n + 1 || off[0] != 0 || off.windows(2).any(|w| w[0] > w[1]) {
                    return Err(bad(format!(
                        "field `{}`: offsets {off:?} for {n} instances (expected {} from 0, not decreasing)",
                        f.name,
                        n + 1
                    )));
                }
                let total = off[n];
                let want: Vec<usize> = if bytes {
                    vec![total]
                } else {
                    std::iter::once(total).chain(trailing).collect()
                };
                if shape != want {
                    return Err(mismatch());
                }
            }
            (Ragged::Padded, None, Some(len)) => {
                let max = if bytes {
                    shape[0].checked_div(n).unwrap_or(0)
                } else {
                    shape.get(1).copied().unwrap_or(0)
                };
                let want: Vec<usize> = if bytes {
                    vec![n * max]
                } else {
                    [n, max].into_iter().chain(trailing).collect()
                };
                if len.len() != n || shape != want {
                    return Err(mismatch());
                }
                if let Some(l) = len.iter().find(|&&l| l > max) {
                    return Err(bad(format!(
                        "field `{}`: a length {l} beyond the padded extent {max}",
                        f.name
                    )));
                }
            }
            _ => return Err(mismatch()),
        }
    }
    Ok(())
}

/// The shape a batch of `n` needs for field `f`, as errors show it.
fn batch_expected(f: &Field, n: usize) -> String {
    let trailing: Vec<String> = f.fixed_dims().iter().map(|d| d.to_string()).collect();
    let dims = |lead: Vec<String>| {
        let all: Vec<String> = lead.into_iter().chain(trailing.iter().cloned()).collect();
        format!("[{}] {}", all.join(", "), f.dtype)
    };
    match (f.shape.first(), f.dtype, f.ragged) {
        (Some(Dim::Var), DType::Bytes, Ragged::Offsets) => {
            format!("[total] bytes with {} offsets", n + 1)
        }
        (Some(Dim::Var), DType::Bytes, Ragged::Padded) => {
            format!("[{n} × max] bytes with {n} lengths")
        }
        (Some(Dim::Var), _, Ragged::Offsets) => {
            format!("{} with {} offsets", dims(vec!["total".into()]), n + 1)
        }
        (Some(Dim::Var), _, Ragged::Padded) => {
            format!(
                "{} with {n} lengths",
                dims(vec![n.to_string(), "max".into()])
            )
        }
        (_, DType::Bytes, _) => format!("[{}] bytes", n * f.unit_elements()),
        _ => dims(vec![n.to_string()]),
    }
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
        config: &PipelineConfig,
        schema: &Schema,
        shuffle: Addr<ShuffleBatch>,
        stats: Stats,
    ) -> FeedHandle {
        let mut slot = None;
        let credits = config.chunks_in_flight.max(1);
        let (chunk_records, chunk_bytes) = (config.chunk_records.max(1), config.chunk_bytes);
        let schema = schema.clone();
        let source = SourceId::intern(name);
        PushIntake::create(|ctx| {
            let shared = Arc::new(Shared {
                state: Mutex::new(State {
                    credits,
                    pending: None,
                    chunk_seq: 0,
                    handles: 1,
                    closed: false,
                    ended: false,
                    stopped: None,
                    parked: VecDeque::new(),
                    batch_waiters: 0,
                    stats: PushStats::default(),
                }),
                room: Condvar::new(),
                schema,
                source,
                chunk_records,
                chunk_bytes,
                full_chunks_only: config.deterministic,
                shuffle,
                intake: ctx.address(),
                stats,
                next_record: AtomicU64::new(0),
                next_batch: AtomicU64::new(0),
            });
            slot = Some(shared.clone());
            PushIntake { shared }
        });
        FeedHandle {
            shared: slot.expect("set by create"),
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

/// The actor of a push source: hears the shuffle stage's acknowledgements,
/// serves pushes from actors, and notices when the pipeline is gone.
pub(crate) struct PushIntake {
    shared: Arc<Shared>,
}

impl Actor for PushIntake {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(POLL, |act, ctx| {
            if !act.shared.shuffle.connected() {
                let mut st = act.shared.state.lock();
                act.shared.stop(&mut st, PipelineError::Stopped);
                ctx.stop();
            }
        });
    }
}

impl Drop for PushIntake {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock();
        self.shared.stop(&mut st, PipelineError::Stopped);
    }
}

impl Handler<ChunkAck> for PushIntake {
    type Result = ();
    fn handle(&mut self, _: ChunkAck, _: &mut Context<Self>) {
        let mut st = self.shared.state.lock();
        st.credits += 1;
        self.shared.pump(&mut st);
    }
}

impl Handler<PushSample> for PushIntake {
    type Result = ResponseFuture<Result<(), PushError<Sample>>>;

    fn handle(&mut self, msg: PushSample, _: &mut Context<Self>) -> Self::Result {
        let sh = &self.shared;
        let sample = msg.0;
        let row = match sh.conform(&sample) {
            Ok(row) => row,
            Err(e) => {
                sh.state.lock().stats.refused += 1;
                return Box::pin(async move { Err(PushError::Invalid(Box::new(e), sample)) });
            }
        };
        let mut st = sh.state.lock();
        if let Some(e) = Shared::closed_error(&st, ()) {
            st.stats.refused += 1;
            return Box::pin(async move { Err(e.map(|()| sample)) });
        }
        let (tx, rx) = oneshot::channel();
        st.parked.push_back(Parked::Instance(row, tx));
        sh.pump(&mut st);
        Box::pin(answered(rx, move || sample))
    }
}

impl Handler<PushBatch> for PushIntake {
    type Result = ResponseFuture<Result<(), PushError<Batch>>>;

    fn handle(&mut self, msg: PushBatch, _: &mut Context<Self>) -> Self::Result {
        let sh = &self.shared;
        let batch = msg.0;
        let index = sh.next_batch.fetch_add(1, Relaxed);
        if let Err(e) = check_batch(&sh.schema, &batch, sh.source, index) {
            sh.state.lock().stats.refused += 1;
            return Box::pin(async move { Err(PushError::Invalid(Box::new(e), batch)) });
        }
        let mut st = sh.state.lock();
        if let Some(e) = Shared::closed_error(&st, ()) {
            st.stats.refused += 1;
            return Box::pin(async move { Err(e.map(|()| batch)) });
        }
        let batch = Arc::new(batch);
        let (tx, rx) = oneshot::channel();
        st.parked.push_back(Parked::Batch(batch.clone(), tx));
        sh.pump(&mut st);
        Box::pin(answered(rx, move || {
            Arc::try_unwrap(batch).unwrap_or_else(|shared| (*shared).clone())
        }))
    }
}

/// Settle a push-mode configuration: a schema is needed (there is nothing to
/// infer it from), there are no files and no readers, and the stream is one
/// pass.
pub(crate) fn prepare(
    mut config: PipelineConfig,
) -> Result<(PipelineConfig, Schema, PassPlan), PipelineError> {
    if !config.files.is_empty() {
        return Err(PipelineError::Config(format!(
            "push mode reads no files ({} given); to mix user code with files use generator sources",
            config.files.len()
        )));
    }
    let Some(schema) = config.schema.clone() else {
        return Err(PipelineError::Config(
            "push mode needs a schema (there are no files to infer it from)".into(),
        ));
    };
    if config.passes != 1 {
        log::debug!("push mode: the pushed stream is one pass");
    }
    config.passes = 1;
    config.readers = 0;
    Ok((config, schema, PassPlan::new(Vec::new())))
}
