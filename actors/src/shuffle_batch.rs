//! The `ShuffleBatch` actor: takes chunks from the readers into the shuffle
//! pool, draws instances, fills batches — numbered and laned — and hands
//! each batch's rows to the batch maker, in number order, through the
//! bounded queue of orders. It makes no batch itself: transforms,
//! collation and the failed-instance policy are the batch maker's.
//!
//! It is the composition of plain parts, each in its own file with its own
//! tests, none of which knows actix:
//! - [`intake`]: which chunks are taken into the pool, in what order, and
//!   when their acknowledgements go back — composing
//!   - [`reorder`]: deterministic mode takes chunks in a fixed order,
//!     holding early ones in a window of bounded bytes (past it,
//!     acknowledgements are withheld);
//!   - [`mix`]: several file sets mixed by weight (a set ahead of its
//!     share waits, acknowledgements withheld);
//! - [`quota`]: equalized ranks keep their share and pad with repeats;
//! - [`state`]: what the parts hold, as one plain value;
//! - [`snapshot`]: the draw's exact state every [`SNAPSHOT_EVERY`] batches
//!   (deterministic mode), for checkpoints, and the pool made again from one;
//! - [`drain`]: batches as jobs — drawn rows with their number and lane —
//!   made in a second step by the batch maker; at the end of a pass the
//!   pool's last batches are handed over only as the batch maker takes them.
//!
//! Around them the actor owns the core's shuffle buffer and batcher.
//! Backpressure: while orders wait for room in the order queue (the batch
//! maker has `batches_in_flight` batches in hand and as many waiting), the
//! actor processes no further message (`ctx.wait`), so chunks wait in the
//! readers' unacknowledged windows.

mod drain;
mod intake;
mod mix;
mod quota;
mod reorder;
mod snapshot;
mod state;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use feedline::batch_policy::Batcher;
use feedline::feed_queue::{Item, Pushed};
use feedline::shuffle::ShuffleBuffer;
use feedline::RowRef;

use crate::error::PipelineError;
use crate::guard::{guarded, StageGuard, Supervised};
use crate::messages::{
    BatchJob, BatchMsg, BatchOrder, ChunkAck, ChunkMsg, OrderQueue, PassEvent, PassFlushed,
    Shutdown,
};
use crate::progress::DrawSnapshots;
use crate::recorder::ShuffleRecorder;
use crate::resume_plan::ShuffleResume;
use crate::settings::{ReaderSettings, ShuffleSettings};
use drain::{BatchNumbering, EndOfPassDrain, Pending};
use intake::{Arrival, ChunkIntake, Decided};
use quota::{Drawn, EqualizeQuota, Share};
use reorder::ChunkKey;
use snapshot::{DrawState, DrawTracker, Place, Taken};
use state::{records_of, RecordRef, ShuffleState};

/// Where the shuffle stage reports.
pub(crate) struct ShuffleLinks {
    /// The last batch of a pass is drawn.
    pub flushed: Recipient<PassFlushed>,
}

type Ack = Recipient<ChunkAck>;

/// The shuffle-batch actor.
pub(crate) struct ShuffleBatch {
    settings: ShuffleSettings,
    /// A resume's part: the consumed batches left out.
    resume: Option<ShuffleResume>,
    /// Where snapshots of the draw go (for checkpoints).
    snapshots: DrawSnapshots,
    buffer: ShuffleBuffer,
    batcher: Batcher,
    /// Where drawn batches go: the batch maker's orders.
    orders: OrderQueue,
    links: ShuffleLinks,
    recorder: ShuffleRecorder,
    numbering: BatchNumbering,
    pass_records: u64,
    /// Orders waiting for room in the order queue, in order: at most a
    /// queue's worth ([`room`](Self::room)) but for the end-of-pass markers.
    out: VecDeque<(usize, Item<BatchOrder>)>,
    /// Chunks taken (acknowledged) but not yet in the pool: each goes in
    /// once the pool has drawn all it can after the one before — held here
    /// while a queue's worth of batches waits, so the draws are the same
    /// whatever the feed queue's pace.
    pending: VecDeque<Taken>,
    drain: EndOfPassDrain<RowRef>,
    /// Which chunks are taken, in what order (reorder window, file-set mix).
    intake: ChunkIntake<Taken, Ack>,
    quota: EqualizeQuota<RowRef>,
    idle_since: Instant,
    failed: bool,
    /// The feed queue is closed: everything is in it.
    closed: bool,
    /// Where a failure goes (a panic in any handler, an equalize error).
    guard: StageGuard,
    /// Which rows of this pass are equalize padding.
    padding: PaddingRows,
    /// Where the pooled chunks came from, for snapshots of the draw.
    tracker: DrawTracker,
    /// Snapshots of the draw are taken (`snapshot_every` > 0).
    snapshotting: bool,
}

/// Counts the rows of a pass into and out of the batcher (which keeps
/// their order), to tell which rows of each batch are equalize padding:
/// those from the first padding row on (padding comes last in a pass).
#[derive(Debug, Default)]
struct PaddingRows {
    rows_in: u64,
    out: u64,
    /// The index (into the pass's rows) of the first padding row.
    from: Option<u64>,
}

impl PaddingRows {
    /// `n` rows leave the batcher as a batch: how many of them are padding.
    fn rows_out(&mut self, n: usize) -> usize {
        let first = self.out;
        self.out += n as u64;
        match self.from {
            Some(from) if from < self.out => (self.out - from.max(first)) as usize,
            _ => 0,
        }
    }
}

/// A resumed draw: the pool made again from the resume's snapshot, and
/// where the stage goes on.
pub(crate) struct RestoredDraw {
    buffer: ShuffleBuffer,
    tracker: DrawTracker,
    snapshot: crate::checkpoint::DrawSnapshot,
}

impl RestoredDraw {
    /// The draw of the resume's snapshot made again, if it has one
    /// (`Ok(None)` if not), its records read as `reader` reads them; an
    /// error says why it cannot be (then the pass is drawn again from its
    /// start).
    pub(crate) fn of(
        settings: &ShuffleSettings,
        reader: &ReaderSettings,
        resume: Option<&ShuffleResume>,
        plan: &feedline::plan::PassPlan,
    ) -> Result<Option<Self>, String> {
        let Some(s) = resume.and_then(|r| r.snapshot()) else {
            return Ok(None);
        };
        if settings.snapshot_every == 0 {
            return Err("these settings take no snapshot of the draw".into());
        }
        let t0 = std::time::Instant::now();
        // A reader that panics is a reader's failure, not the pipeline's.
        let (buffer, tracker) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            snapshot::restore(reader, plan, settings.pool.clone(), s)
        }))
        .map_err(|p| {
            format!(
                "reading the pool's records panicked: {}",
                crate::panic::panic_text(p)
            )
        })??;
        log::info!(
            "pass {}: the pool of the snapshot before batch {} made again in {:.1} ms ({} instances)",
            s.pass,
            s.seq,
            t0.elapsed().as_secs_f64() * 1e3,
            buffer.len()
        );
        Ok(Some(RestoredDraw {
            buffer,
            tracker,
            snapshot: s.clone(),
        }))
    }
}

/// What the shuffle stage is made with: its settings, resume part and
/// restored draw, where snapshots of the draw go, the batcher, the order
/// queue it fills, its links, recorder and guard.
pub(crate) struct ShuffleContext {
    /// Its settings.
    pub settings: ShuffleSettings,
    /// A resume's part: the consumed batches left out.
    pub resume: Option<ShuffleResume>,
    /// A resumed draw to go on from (the pool made again from the resume's
    /// snapshot before any stage started).
    pub restored: Option<RestoredDraw>,
    /// Where snapshots of the draw go (for checkpoints).
    pub snapshots: DrawSnapshots,
    /// The batcher of the settings.
    pub batcher: Batcher,
    /// Where drawn batches go: the batch maker's orders.
    pub orders: OrderQueue,
    /// Where it reports.
    pub links: ShuffleLinks,
    /// Its statistics.
    pub recorder: ShuffleRecorder,
    /// Where a failure goes.
    pub guard: StageGuard,
}

impl ShuffleBatch {
    /// The shuffle stage made with `cx`: at the resume's first pass, or
    /// going on from its restored draw.
    pub(crate) fn new(cx: ShuffleContext) -> Self {
        let ShuffleContext {
            settings,
            resume,
            restored,
            snapshots,
            batcher,
            orders,
            links,
            recorder,
            guard,
        } = cx;
        let first = resume.as_ref().map_or(0, |r| r.first_pass());
        let intake = ChunkIntake::new(
            settings.deterministic,
            settings.reorder_window,
            settings.sets.clone(),
        )
        .starting_at(first);
        let mut buffer = ShuffleBuffer::new(settings.pool.clone());
        buffer.start_pass(first);
        let mut numbering = BatchNumbering::new(settings.lanes);
        numbering.start_pass(first);
        ShuffleBatch {
            buffer,
            numbering,
            batcher,
            orders,
            links,
            recorder,
            pass_records: 0,
            out: VecDeque::new(),
            pending: VecDeque::new(),
            drain: EndOfPassDrain::new(),
            intake,
            quota: EqualizeQuota::new(),
            idle_since: Instant::now(),
            failed: false,
            closed: false,
            guard,
            padding: PaddingRows::default(),
            tracker: DrawTracker::default(),
            snapshotting: settings.snapshot_every > 0,
            settings,
            resume,
            snapshots,
        }
        .with_restored(restored)
    }

    /// Go on from a resumed draw: its pool, batch number and counters.
    fn with_restored(mut self, restored: Option<RestoredDraw>) -> Self {
        let Some(r) = restored else { return self };
        let s = r.snapshot;
        self.buffer = r.buffer;
        self.tracker = r.tracker;
        self.numbering.start_pass(s.pass);
        self.numbering.resume_at(s.seq);
        self.pass_records = s.pass_records;
        self.padding.rows_in = s.batcher_rows[0];
        self.padding.out = s.batcher_rows[1];
        let intake = std::mem::replace(&mut self.intake, ChunkIntake::new(false, 0, Vec::new()));
        self.intake = intake.next_chunk_at(s.next_file as usize, s.next_chunk);
        log::info!(
            "pass {}: the draw goes on from its snapshot before batch {} ({} instances pooled; reading from file #{} chunk {})",
            s.pass,
            s.seq,
            self.buffer.len(),
            s.next_file,
            s.next_chunk
        );
        self
    }

    /// What the stage holds besides its pool, as a plain value.
    pub(crate) fn state(&self) -> ShuffleState {
        let row = |r: &RowRef| RecordRef::from(r.origin());
        let (reorder, mix) = self.intake.state(|t: &Taken| records_of(&t.chunk));
        ShuffleState {
            pass: self.numbering.pass(),
            batches: self.numbering.batches(),
            reorder,
            mix,
            quota: self.quota.state(row),
            drain: self.drain.state(row),
        }
    }

    /// Put a chunk's instances into the pool.
    fn accept(&mut self, taken: Taken) {
        if self.snapshotting {
            self.tracker.accepted(&taken);
        }
        let chunk = taken.chunk;
        if chunk.is_empty() {
            return;
        }
        self.pass_records += chunk.len() as u64;
        self.recorder
            .chunk_taken(chunk.len() as u64, chunk.payload_bytes() as u64);
        self.buffer.push_chunk(chunk);
    }

    /// Draw, and take the pending chunks into the pool one by one as it
    /// has drawn all it can — until a queue's worth of batches waits.
    fn fill(&mut self) {
        loop {
            self.draw();
            if !self.drain.is_drawing() && self.out.len() >= self.room() {
                return;
            }
            let Some(chunk) = self.pending.pop_front() else {
                return;
            };
            self.accept(chunk);
        }
    }

    /// Orders the order queue can hold: what the stage draws ahead of it at
    /// most, so that one message — a chunk of many small batches — cannot
    /// make it hold more than one queue's worth.
    fn room(&self) -> usize {
        self.orders.capacity()
    }

    /// Draw the rows the pool gives now into batches, until a queue's worth
    /// of orders waits (the rest stays in the pool, drawn as the batch
    /// maker takes them: [`flush_out`](Self::flush_out)); the end-of-pass
    /// drain draws all, its batches handed over later.
    fn draw(&mut self) {
        let room = self.room();
        while self.buffer.can_draw() && (self.drain.is_drawing() || self.out.len() < room) {
            let Some(row) = self.buffer.draw() else { break };
            match self.quota.draw(self.numbering.pass(), row) {
                Drawn::Keep(row) => self.batch_row(row),
                Drawn::Drop => self.recorder.equalize_dropped(),
            }
        }
    }

    fn batch_row(&mut self, row: RowRef) {
        self.padding.rows_in += 1;
        if let Some(rows) = self.batcher.push(row) {
            self.recorder
                .oversize_batches(self.batcher.oversize_batches());
            self.emit(rows);
        }
    }

    /// A batch's rows are drawn: number it, then hand it over now, or later
    /// if it belongs to the end-of-pass drain.
    fn emit(&mut self, rows: Vec<RowRef>) {
        let padded = self.padding.rows_out(rows.len());
        let mut job = self.numbering.job(rows);
        job.place.padded = padded;
        let place = job.place;
        let next = place.seq + 1;
        if self.snapshotting
            && next % self.settings.snapshot_every == 0
            && !self.drain.is_drawing()
            && self.batcher.pending() == 0
        {
            let rows = [self.padding.rows_in, self.padding.out];
            let t0 = Instant::now();
            let s = self.tracker.capture(DrawState {
                pass: place.pass,
                seq: next,
                buffer: &self.buffer,
                pending: &self.pending,
                pass_records: self.pass_records,
                batcher_rows: rows,
            });
            if let Some(s) = s {
                log::trace!(
                    "snapshot of the draw before batch {next} of pass {}: {} rows, {} chunks, in {:.1} µs",
                    place.pass,
                    s.row_slots.len(),
                    s.chunks.iter().flatten().count(),
                    t0.elapsed().as_secs_f64() * 1e6
                );
                self.snapshots.push(s);
            }
        }
        // Resumed: a batch the checkpoint says was consumed is left out
        // (after the padding count, which the uninterrupted run made too).
        if (self.resume.as_ref()).is_some_and(|r| r.skips_batch(place.pass, place.seq)) {
            return;
        }
        if self.drain.is_drawing() {
            self.drain.defer(job);
        } else {
            self.order(job);
        }
    }

    /// Hand a batch's rows over: into the orders waiting for room.
    fn order(&mut self, job: BatchJob<RowRef>) {
        self.out.push_back((0, Item::Batch(BatchOrder::Rows(job))));
    }

    /// Push every pending order into the order queue (then close it, if
    /// `close`). Orders that find it full stay in `out`, and the actor
    /// holds its mailbox (`ctx.wait`) until there is room — the
    /// backpressure that keeps chunks waiting in the readers' windows —
    /// then pushes the rest. One `ctx.wait` at a time: actix runs several
    /// waiting futures last-in-first-out.
    fn flush_out(&mut self, ctx: &mut Context<Self>, close: bool) {
        self.idle_since = Instant::now();
        if self.out.is_empty() && self.drain.is_empty() && !close {
            return;
        }
        loop {
            self.undefer();
            match self.orders.push(&mut self.out) {
                // Room for all: hand over the next part of the drain.
                Ok(Pushed::All) if !self.drain.is_empty() && !self.failed => continue,
                // Room for all: draw what the pool held back.
                Ok(Pushed::All) if !self.failed && self.draw_held() => continue,
                Ok(Pushed::All) => {
                    // Every order is in: close the queue — unless the stage
                    // failed: then the supervisor fails the pipeline
                    // (closing first would end the pass cleanly, and the
                    // error would never reach a consumer).
                    if close && !self.failed && !self.closed {
                        self.closed = true;
                        self.orders.close();
                    }
                }
                Ok(Pushed::Full(room)) => {
                    let t0 = Instant::now();
                    ctx.wait(room.into_actor(self).map(move |_, act, ctx| {
                        // Waiting for the batch maker is not waiting for
                        // input; a cancelled wait (the queue failed) shows in
                        // the next push.
                        guarded(act, ctx, "room in the order queue", |act, ctx| {
                            act.recorder.blocked(t0.elapsed());
                            act.flush_out(ctx, close);
                        });
                    }));
                }
                Ok(Pushed::Closed) | Err(_) => {
                    // The queue failed or stopped: nothing more to do here.
                    self.failed = true;
                    ctx.stop();
                }
            }
            return;
        }
    }

    /// Draw the rows held back in the pool while a queue's worth waited;
    /// true if batches were made.
    fn draw_held(&mut self) -> bool {
        if self.drain.is_drawing() || (!self.buffer.can_draw() && self.pending.is_empty()) {
            return false;
        }
        self.timed(|me| me.fill());
        !self.out.is_empty()
    }

    /// Account the time since the stage last had work as idle.
    fn idle_ends(&mut self) {
        self.recorder.idle(self.idle_since.elapsed());
        self.idle_since = Instant::now();
    }

    /// Run `work`, accounting its time as busy.
    fn timed(&mut self, work: impl FnOnce(&mut Self)) {
        let t0 = Instant::now();
        work(self);
        self.recorder.busy(t0.elapsed());
    }

    /// Hand over the drain's next batches, as many as the order queue
    /// could take now, with the pass's end behind them.
    fn undefer(&mut self) {
        let room = self.room();
        while self.out.len() < room && !self.failed {
            match self.drain.pop() {
                Some(Pending::Job(job)) => self.order(job),
                Some(Pending::EndOfPass { pass, records }) => self.pass_end(pass, records),
                None => break,
            }
        }
    }

    /// Hand over the end of `pass`, whose `records` went into the pool.
    fn pass_end(&mut self, pass: u64, records: u64) {
        self.out
            .push_back((0, Item::Batch(BatchOrder::PassEnd { pass, records })));
    }

    /// Do what the intake decided: send the acknowledgements, take the
    /// chunks into the pool in order.
    fn take(&mut self, d: Decided<Taken, Ack>) {
        for ack in d.acks {
            ack.do_send(ChunkAck);
        }
        self.pending.extend(d.take);
        self.fill();
    }

    fn end_pass(&mut self, pass: u64) {
        let left = self.intake.end_pass(pass);
        // The drain is handed over as the batch maker takes it (`undefer`).
        self.drain.set_drawing(true);
        self.take(left);
        self.buffer.set_draining(true);
        self.draw();
        self.buffer.set_draining(false);
        match self.quota.end_pass(pass) {
            Ok(rows) => {
                self.padding.from = Some(self.padding.rows_in);
                for row in rows {
                    self.recorder.equalize_padded();
                    self.batch_row(row);
                }
            }
            Err(e) => {
                self.failed = true;
                self.guard.fail(PipelineError::Equalize(e.to_string()));
                return;
            }
        }
        if let Some(rows) = self.batcher.flush() {
            self.emit(rows);
        }
        self.padding = PaddingRows::default();
        self.drain.set_drawing(false);
        if let Some(Pending::EndOfPass { pass, records }) =
            self.drain.end_of_pass(pass, self.pass_records)
        {
            self.pass_end(pass, records);
        }
        if log::log_enabled!(log::Level::Debug) {
            let st = self.state();
            log::debug!(
                "pass {pass} drawn to its end in {} batches; {} chunks held in the reorder window, {:?} chunks waiting per file set, {} items of the drain to hand over",
                st.batches,
                st.reorder.map_or(0, |r| r.held.len()),
                st.mix.map(|m| m.waiting.iter().map(Vec::len).collect::<Vec<_>>()),
                st.drain.len(),
            );
        }
        self.links.flushed.do_send(PassFlushed {
            pass,
            batches: self.numbering.batches(),
            records: self.pass_records,
        });
        self.numbering.start_pass(pass + 1);
        self.pass_records = 0;
        self.buffer.start_pass(pass + 1);
        self.tracker.start_pass();
    }

    /// Queue a ready-made (pushed) batch with the stage's own: numbered and
    /// laned like them, not shuffled.
    fn enqueue_ready(&mut self, batch: Arc<feedline::Batch>) {
        let place = self.numbering.next();
        self.pass_records += batch.len() as u64;
        let ready = BatchOrder::Ready { place, batch };
        self.out.push_back((0, Item::Batch(ready)));
    }

    /// A reader's (or the push source's) chunk.
    fn on_chunk(&mut self, msg: ChunkMsg, ctx: &mut Context<Self>) {
        self.recorder.idle(self.idle_since.elapsed());
        self.recorder.chunk_received();
        let t0 = Instant::now();
        if self.failed {
            return;
        }
        let arrival = Arrival {
            pass: msg.pass,
            key: ChunkKey {
                set: msg.set,
                file: msg.file_seq,
                chunk: msg.chunk_seq,
            },
            last: msg.last,
            records: msg.chunk.len() as u64,
            bytes: msg.chunk.memory_bytes(),
            item: Taken {
                place: Place {
                    file: msg.file_seq,
                    chunk: msg.chunk_seq,
                    start: msg.start_record,
                    end: msg.end_record,
                    last: msg.last,
                },
                chunk: msg.chunk,
            },
        };
        let d = self.intake.offer(arrival, msg.ack);
        self.take(d);
        self.recorder.busy(t0.elapsed());
        self.flush_out(ctx, false);
    }

    /// Where a pass stands.
    fn on_pass_event(&mut self, msg: PassEvent, ctx: &mut Context<Self>) {
        let pass = self.numbering.pass();
        match msg {
            PassEvent::Quota { pass, keep, pad } => self.quota.set(Share { pass, keep, pad }),
            PassEvent::Sets { pass: p, files } => {
                self.idle_ends();
                match self.intake.pass_sets(p, files.clone()) {
                    Ok(d) => self.timed(|me| me.take(d)),
                    Err(()) => log::error!(
                        "file sets of pass {p} ({files:?}) announced during pass {pass}"
                    ),
                }
                self.flush_out(ctx, false);
            }
            PassEvent::SetDrained { pass: p, set } => {
                self.idle_ends();
                let d = self.intake.set_drained(p, set);
                self.timed(|me| me.take(d));
                self.flush_out(ctx, false);
            }
            PassEvent::Ended(p) => {
                self.timed(|me| me.end_pass(p));
                let last = p + 1 >= self.settings.passes;
                self.flush_out(ctx, last);
            }
        }
    }
}

impl Actor for ShuffleBatch {
    type Context = Context<Self>;
}

impl Supervised for ShuffleBatch {
    fn guard(&self) -> &StageGuard {
        &self.guard
    }

    fn panicked(&mut self, ctx: &mut Context<Self>, _: &PipelineError) {
        self.failed = true;
        self.intake.clear();
        self.pending.clear();
        ctx.stop();
    }
}

impl Handler<ChunkMsg> for ShuffleBatch {
    type Result = ();

    fn handle(&mut self, msg: ChunkMsg, ctx: &mut Context<Self>) {
        guarded(self, ctx, "ChunkMsg", |me, ctx| me.on_chunk(msg, ctx));
    }
}

impl Handler<PassEvent> for ShuffleBatch {
    type Result = ();

    fn handle(&mut self, msg: PassEvent, ctx: &mut Context<Self>) {
        let handling = format!("{msg:?}");
        guarded(self, ctx, &handling, |me, ctx| me.on_pass_event(msg, ctx));
    }
}

impl Handler<BatchMsg> for ShuffleBatch {
    type Result = ();

    fn handle(&mut self, msg: BatchMsg, ctx: &mut Context<Self>) {
        guarded(self, ctx, "BatchMsg", |me, ctx| {
            me.recorder.idle(me.idle_since.elapsed());
            if me.failed {
                return;
            }
            msg.ack.do_send(ChunkAck);
            me.enqueue_ready(msg.batch);
            me.flush_out(ctx, false);
        });
    }
}

impl Handler<Shutdown> for ShuffleBatch {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        guarded(self, ctx, "Shutdown", |me, ctx| {
            // Withheld acknowledgements go with their chunks.
            me.intake.clear();
            me.pending.clear();
            ctx.stop();
        });
    }
}
