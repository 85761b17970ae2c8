//! The push source's shared state and its actor: credits like a reader's
//! (chunks sent and not yet acknowledged by the shuffle stage), the pending
//! chunk that gathers instances while no credit is free, pushes from actors
//! parked until there is room, and the end of the stream.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use feedline::format::generator::{append_sample, Sample};
use feedline::{Batch, Chunk, Origin, Schema, SourceId};
use futures_channel::oneshot;
use parking_lot::{Condvar, Mutex};

use super::check::check_batch;
use super::{PushLinks, PushStats};
use crate::error::{PipelineError, PushError};
use crate::guard::{guarded, StageGuard, Supervised};
use crate::messages::{BatchMsg, ChunkAck, ChunkMsg, PassEvent, PushBatch, PushSample};
use crate::recorder::ReaderRecorder;
use crate::settings::PushSettings;

/// How often a waiting push looks whether the pipeline is still there.
const POLL: Duration = Duration::from_millis(50);

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

pub(super) struct State {
    /// Messages the shuffle stage may still take unacknowledged.
    credits: usize,
    /// Instances waiting for a credit.
    pending: Option<Chunk>,
    chunk_seq: u64,
    /// Live `FeedHandle`s: the stream closes when the last one goes.
    pub(super) handles: usize,
    pub(super) closed: bool,
    /// The end of the pass was sent.
    ended: bool,
    pub(super) stopped: Option<PipelineError>,
    parked: VecDeque<Parked>,
    /// Threads waiting to push a batch (they have precedence for a credit
    /// over a pending chunk that is not full).
    batch_waiters: usize,
    pub(super) stats: PushStats,
}

pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    room: Condvar,
    pub(super) schema: Schema,
    pub(super) source: SourceId,
    chunk_records: usize,
    chunk_bytes: usize,
    /// Deterministic mode: send only full chunks (and the last), so that the
    /// shuffle sees the same chunks whatever the timing.
    full_chunks_only: bool,
    links: PushLinks,
    pub(super) intake: Addr<PushIntake>,
    recorder: ReaderRecorder,
    next_record: AtomicU64,
    next_batch: AtomicU64,
}

/// How long a push may wait.
#[derive(Clone, Copy)]
pub(super) enum Wait {
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
        self.recorder.chunk_sent(n, chunk.payload_bytes() as u64);
        st.credits = st.credits.saturating_sub(1);
        st.stats.chunks += 1;
        let msg = ChunkMsg {
            ack: self.intake.clone().recipient(),
            pass: 0,
            set: 0,
            file_seq: 0,
            chunk_seq: st.chunk_seq,
            last: false,
            start_record: 0,
            end_record: 0,
            chunk: Arc::new(chunk),
        };
        st.chunk_seq += 1;
        self.links.chunks.do_send(msg);
    }

    fn send_batch(&self, st: &mut State, batch: Arc<Batch>) {
        self.recorder
            .chunk_sent(batch.len() as u64, batch.payload_bytes() as u64);
        st.credits = st.credits.saturating_sub(1);
        st.stats.batches += 1;
        st.stats.batch_instances += batch.len() as u64;
        self.links.batches.do_send(BatchMsg {
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
    pub(super) fn pump(&self, st: &mut State) {
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
            self.links.pass.do_send(PassEvent::Ended(0));
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
        if !self.links.chunks.connected() {
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

    pub(super) fn push_instance(
        &self,
        sample: Sample,
        wait: Wait,
    ) -> Result<(), PushError<Sample>> {
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
            if !waited {
                waited = true;
                st.stats.waiting += 1;
            }
            if !self.wait(&mut st, wait) {
                break Err(match wait {
                    Wait::Until(_, d) => PushError::Timeout(d, ()),
                    _ => PushError::Full(()),
                });
            }
        };
        if waited {
            st.stats.waiting -= 1;
            st.stats.blocked += t0.elapsed();
        }
        result.map_err(|e| {
            st.stats.refused += 1;
            e.map(|()| sample)
        })
    }

    pub(super) fn push_batch(&self, batch: Batch, wait: Wait) -> Result<(), PushError<Batch>> {
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
            if !waited {
                waited = true;
                st.stats.waiting += 1;
            }
            if !self.wait(&mut st, wait) {
                break Err(match wait {
                    Wait::Until(_, d) => PushError::Timeout(d, ()),
                    _ => PushError::Full(()),
                });
            }
        };
        st.batch_waiters -= 1;
        if waited {
            st.stats.waiting -= 1;
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

/// Start the intake of a push source (in the pipeline's actix `System`);
/// the shared state every `FeedHandle` holds.
pub(super) fn start(
    name: &str,
    settings: &PushSettings,
    schema: &Schema,
    links: PushLinks,
    recorder: ReaderRecorder,
    guard: StageGuard,
) -> Arc<Shared> {
    let mut slot = None;
    let credits = settings.chunks_in_flight;
    let (chunk_records, chunk_bytes) = (settings.chunk_records, settings.chunk_bytes);
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
            full_chunks_only: settings.full_chunks_only,
            links,
            intake: ctx.address(),
            recorder,
            next_record: AtomicU64::new(0),
            next_batch: AtomicU64::new(0),
        });
        slot = Some(shared.clone());
        PushIntake { shared, guard }
    });
    slot.expect("set by create")
}

/// The actor of a push source: hears the shuffle stage's acknowledgements,
/// serves pushes from actors, and notices when the pipeline is gone.
pub(crate) struct PushIntake {
    shared: Arc<Shared>,
    guard: StageGuard,
}

impl Actor for PushIntake {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(POLL, |act, ctx| {
            guarded(act, ctx, "its check of the pipeline", |act, ctx| {
                if !act.shared.links.chunks.connected() {
                    let mut st = act.shared.state.lock();
                    act.shared.stop(&mut st, PipelineError::Stopped);
                    ctx.stop();
                }
            });
        });
    }
}

impl Supervised for PushIntake {
    fn guard(&self) -> &StageGuard {
        &self.guard
    }

    /// Producers waiting for room get the failure too.
    fn panicked(&mut self, ctx: &mut Context<Self>, e: &PipelineError) {
        let mut st = self.shared.state.lock();
        self.shared.stop(&mut st, e.clone());
        drop(st);
        ctx.stop();
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
    fn handle(&mut self, _: ChunkAck, ctx: &mut Context<Self>) {
        guarded(self, ctx, "ChunkAck", |me, _| {
            let mut st = me.shared.state.lock();
            st.credits += 1;
            me.shared.pump(&mut st);
        });
    }
}

impl PushIntake {
    /// Check an instance and park it until there is room; the answer comes on the receiver.
    fn park_instance(&mut self, sample: &Sample) -> Result<Parking, PushError<()>> {
        let sh = &self.shared;
        let row = match sh.conform(sample) {
            Ok(row) => row,
            Err(e) => {
                sh.state.lock().stats.refused += 1;
                return Err(PushError::Invalid(Box::new(e), ()));
            }
        };
        let mut st = sh.state.lock();
        if let Some(e) = Shared::closed_error(&st, ()) {
            st.stats.refused += 1;
            return Err(e);
        }
        let (tx, rx) = oneshot::channel();
        st.parked.push_back(Parked::Instance(row, tx));
        sh.pump(&mut st);
        Ok(rx)
    }

    /// Check a batch and park it until there is room.
    fn park_batch(&mut self, batch: &Arc<Batch>) -> Result<Parking, PushError<()>> {
        let sh = &self.shared;
        let index = sh.next_batch.fetch_add(1, Relaxed);
        if let Err(e) = check_batch(&sh.schema, batch, sh.source, index) {
            sh.state.lock().stats.refused += 1;
            return Err(PushError::Invalid(Box::new(e), ()));
        }
        let mut st = sh.state.lock();
        if let Some(e) = Shared::closed_error(&st, ()) {
            st.stats.refused += 1;
            return Err(e);
        }
        let (tx, rx) = oneshot::channel();
        st.parked.push_back(Parked::Batch(batch.clone(), tx));
        sh.pump(&mut st);
        Ok(rx)
    }

    /// The answer to an actor's push, from what parking it gave (`None`:
    /// the intake panicked; the pipeline failed).
    fn answer<T: 'static>(
        &self,
        parked: Option<Result<Parking, PushError<()>>>,
        item: impl FnOnce() -> T + 'static,
    ) -> ResponseFuture<Result<(), PushError<T>>> {
        match parked {
            Some(Ok(rx)) => Box::pin(answered(rx, item)),
            Some(Err(e)) => Box::pin(async move { Err(e.map(|()| item())) }),
            None => {
                let e =
                    (self.shared.state.lock().stopped.clone()).unwrap_or(PipelineError::Stopped);
                Box::pin(async move { Err(PushError::Stopped(e, item())) })
            }
        }
    }
}

/// Where a parked push's answer comes.
type Parking = oneshot::Receiver<Result<(), PushError<()>>>;

impl Handler<PushSample> for PushIntake {
    type Result = ResponseFuture<Result<(), PushError<Sample>>>;

    fn handle(&mut self, msg: PushSample, ctx: &mut Context<Self>) -> Self::Result {
        let sample = msg.0;
        let parked = guarded(self, ctx, "PushSample", |me, _| me.park_instance(&sample));
        self.answer(parked, move || sample)
    }
}

impl Handler<PushBatch> for PushIntake {
    type Result = ResponseFuture<Result<(), PushError<Batch>>>;

    fn handle(&mut self, msg: PushBatch, ctx: &mut Context<Self>) -> Self::Result {
        let batch = Arc::new(msg.0);
        let parked = guarded(self, ctx, "PushBatch", |me, _| me.park_batch(&batch));
        self.answer(parked, move || {
            Arc::try_unwrap(batch).unwrap_or_else(|shared| (*shared).clone())
        })
    }
}
