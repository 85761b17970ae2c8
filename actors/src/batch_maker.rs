//! The `BatchMaker` actor: makes each batch the shuffle stage drew — its
//! rows through the transforms on the transform workers (or collated on
//! its own thread when there are none), the equalize padding rows marked,
//! every failed instance judged by the bad-record policy — and puts the
//! batches into the feed queue's lanes in number order, with each pass's
//! end-of-pass markers behind its batches.
//!
//! **Batches in flight.** Up to `batches_in_flight` batches are held at
//! once: being made, or made and waiting for an earlier one or for room in
//! the feed queue. Batches handed to the workers one after the other are
//! made side by side — a worker done with its rows of one batch takes rows
//! of the next — so no worker waits for a batch's slowest row, and the
//! shuffle stage draws on while batches are made. They leave in the order
//! they were ordered ([`InOrder`]), and a failed instance is judged there,
//! in that order: a run fails, or skips, the same way whatever the timing.
//! While an instance map's output schema is still to be inferred, one
//! batch is made at a time (the first instance to transform decides it).
//! With packing, the made batches whose documents are being packed count
//! among the batches held, and the packed batches are made one at a time
//! while fewer than `batches_in_flight` wait for room in the feed queue
//! ([`PackStage`]): never all of a long document's at once.
//!
//! It takes orders from the order queue itself (an asynchronous pop, not a
//! message) and never holds its mailbox while it waits: the workers'
//! [`Made`] messages and room in the lanes arrive while it waits for either.
//! A pass's bad-record fraction is judged when its end is released (every
//! batch of it made). Stopping it fails the order queue, so the shuffle
//! stage never waits for it in vain; dropping it stops the batches in
//! flight and waits for them.

mod in_order;
mod packing;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use feedline::feed_queue::{Canceled, Item, PopNow, Popped, Pushed};
use feedline::transform::{BatchTransformer, Transformed};
use feedline::{collate_rows, Batch};

use crate::bad_records::BadRecords;
use crate::error::PipelineError;
use crate::guard::{guarded, StageGuard, Supervised};
use crate::messages::{
    BatchOrder, BatchPlace, BatchQueue, Delivered, Made, OrderQueue, QueueItem, Shutdown,
    StreamQueued,
};
use crate::recorder::MakerRecorder;
use crate::settings::BatchMakerSettings;
use crate::stats::SkippedRecord;
use in_order::InOrder;
pub(crate) use packing::PackStage;
use packing::Packed;

/// Where the batch maker reports.
pub(crate) struct MakerLinks {
    /// Every batch of the last pass is in the closed feed queue.
    pub queued: Recipient<StreamQueued>,
}

/// An order on its way out, in order.
enum Release {
    /// A batch made (or failed) from drawn rows.
    Made {
        place: BatchPlace,
        made: feedline::Result<Transformed>,
    },
    /// A ready-made batch.
    Ready {
        place: BatchPlace,
        batch: Arc<Batch>,
    },
    /// The end of a pass.
    PassEnd { pass: u64, records: u64 },
}

/// The batch-maker actor.
pub(crate) struct BatchMaker {
    settings: BatchMakerSettings,
    orders: OrderQueue,
    queue: BatchQueue,
    transformer: Option<BatchTransformer>,
    bad: BadRecords,
    links: MakerLinks,
    recorder: MakerRecorder,
    guard: StageGuard,
    /// Orders taken, released in the order they came.
    release: InOrder<Release>,
    /// Batches taken and not yet released (being made, or waiting for an
    /// earlier one).
    making: usize,
    /// Released items waiting for room in their lanes.
    out: VecDeque<(usize, QueueItem)>,
    /// Packing: the made batches' documents packed into rows before they
    /// go out.
    packing: Option<PackStage>,
    /// A pop of the order queue waits for an order.
    popping: bool,
    /// Since when nothing is held and a pop waits (idle time).
    idle_since: Option<Instant>,
    /// Released items wait for room in a lane.
    waiting_room: bool,
    /// The order queue is closed and drained.
    ended: bool,
    /// The feed queue is closed: everything is in it.
    closed: bool,
    failed: bool,
}

/// What the batch maker is made with: its settings, the order queue it
/// takes from and the feed queue it fills, the transforms, the bad-record
/// policy, the packing step (with its resume part), its links, recorder and
/// guard.
pub(crate) struct MakerContext {
    /// Its settings.
    pub settings: BatchMakerSettings,
    /// Where it takes the shuffle stage's orders.
    pub orders: OrderQueue,
    /// The feed queue's lanes it puts batches into.
    pub queue: BatchQueue,
    /// The transforms the batches are made through, if any.
    pub transformer: Option<BatchTransformer>,
    /// The bad-record policy.
    pub bad: BadRecords,
    /// Packing: the made batches' documents packed into rows (see
    /// [`PackStage`]).
    pub packing: Option<PackStage>,
    /// Where it reports.
    pub links: MakerLinks,
    /// Its statistics.
    pub recorder: MakerRecorder,
    /// Where a failure goes.
    pub guard: StageGuard,
}

impl BatchMaker {
    /// A batch maker made with `cx`: taking orders from its order queue,
    /// putting batches into the feed queue, making them through its
    /// transforms if any, packing them if asked.
    pub(crate) fn new(cx: MakerContext) -> Self {
        let MakerContext {
            settings,
            orders,
            queue,
            transformer,
            bad,
            packing,
            links,
            recorder,
            guard,
        } = cx;
        BatchMaker {
            settings,
            orders,
            queue,
            transformer,
            bad,
            links,
            recorder,
            guard,
            release: InOrder::default(),
            making: 0,
            out: VecDeque::new(),
            packing,
            popping: false,
            idle_since: None,
            waiting_room: false,
            ended: false,
            closed: false,
            failed: false,
        }
    }

    /// `batch` (at `place`: of its pass, its number, for its lane) goes out — or, when
    /// packing, its documents to the packing step (the bad ones judged),
    /// whose packed batches go out as there is room for them
    /// ([`fill_out`](Self::fill_out)).
    fn out_batch(&mut self, place: BatchPlace, batch: Arc<Batch>) -> Result<(), PipelineError> {
        let BatchPlace {
            lane, pass, seq, ..
        } = place;
        match &mut self.packing {
            Some(p) => {
                // The documents are counted as made; the packed batches go out
                // (`fill_out`), each counted there.
                self.recorder.rows_made(batch.len(), batch.payload_bytes());
                for (origin, e) in p.take(pass, batch)? {
                    let loc = origin.location();
                    let source = origin.source.name().to_string();
                    let rec = SkippedRecord::new(
                        Some(&loc),
                        &source,
                        origin.record,
                        false,
                        1,
                        e.to_string(),
                    );
                    self.bad.judge(rec, pass, e)?;
                }
            }
            None => {
                self.recorder.batch_made(batch.len(), batch.payload_bytes());
                self.out
                    .push_back((lane, Item::Batch(Delivered { pass, seq, batch })));
            }
        }
        Ok(())
    }

    /// Batches made waiting for room in the lanes (`out` holds at most
    /// [`limit`](Self::limit) of them, and the end-of-pass markers).
    fn out_batches(&self) -> usize {
        (self.out.iter())
            .filter(|(_, item)| matches!(item, Item::Batch(_)))
            .count()
    }

    /// Batches held now, what [`limit`](Self::limit) bounds: taken and not
    /// yet in the feed queue — being made, made and waiting for an earlier
    /// one or for room in the lanes; packing, being made or made and
    /// being packed (the packed batches waiting for room are bounded on
    /// their own, [`fill_out`](Self::fill_out)).
    fn held(&self) -> usize {
        match &self.packing {
            None => self.making + self.out_batches(),
            Some(p) => self.making + p.inputs(),
        }
    }

    /// Packing: packed batches made, one at a time, while fewer than
    /// [`limit`](Self::limit) wait for room in the lanes; each pass's
    /// end-of-pass markers behind its last one. True when it stopped at
    /// the limit (more may be ready).
    fn fill_out(&mut self) -> Result<bool, PipelineError> {
        let limit = self.limit();
        let lanes = self.settings.lanes;
        let Some(p) = &mut self.packing else {
            return Ok(false);
        };
        let mut waiting = (self.out.iter())
            .filter(|(_, item)| matches!(item, Item::Batch(_)))
            .count();
        while waiting < limit {
            match p.next(lanes)? {
                Some(Packed::Batch(lane, d)) => {
                    self.recorder.batch_out();
                    self.out.push_back((lane, Item::Batch(d)));
                    waiting += 1;
                }
                Some(Packed::PassEnd(pass)) => {
                    for lane in 0..lanes.count() {
                        self.out.push_back((lane, Item::EndOfPass(pass)));
                    }
                }
                None => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Batches held at most now: one while an instance map's output schema
    /// is still to be inferred, else the setting.
    fn limit(&self) -> usize {
        match &self.transformer {
            Some(t) if t.output_schema().is_none() => 1,
            _ => self.settings.in_flight.get(),
        }
    }

    /// Take orders while there is room for them.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        while !self.popping && !self.ended && !self.failed && self.held() < self.limit() {
            match self.orders.pop_async(0) {
                PopNow::Ready(answer) => self.answer(answer, ctx),
                PopNow::Later(rx) => {
                    self.popping = true;
                    if self.held() == 0 {
                        self.idle_since = Some(Instant::now());
                    }
                    ctx.spawn(rx.into_actor(self).map(|answer, act, ctx| {
                        guarded(act, ctx, "an order", |act, ctx| {
                            act.popping = false;
                            if let Some(t) = act.idle_since.take() {
                                act.recorder.idle(t.elapsed());
                            }
                            match answer {
                                Ok(answer) => act.answer(answer, ctx),
                                // The order queue went away: so does the stage.
                                Err(Canceled) => act.stop(ctx),
                            }
                            act.pump(ctx);
                        });
                    }));
                }
            }
        }
    }

    /// What a pop of the order queue gave.
    fn answer(
        &mut self,
        answer: Result<Popped<BatchOrder>, PipelineError>,
        ctx: &mut Context<Self>,
    ) {
        match answer {
            Ok(Popped::Batch(order)) => self.take(order, ctx),
            // The shuffle stage pushes no markers of the queue's own.
            Ok(Popped::EndOfPass(_)) => {}
            Ok(Popped::EndOfData) => {
                self.ended = true;
                self.push_out(ctx);
            }
            // Failed by this stage (stopping) or the pipeline: nothing more to do.
            Err(_) => self.stop(ctx),
        }
    }

    /// Start making an order (or release it at once).
    fn take(&mut self, order: BatchOrder, ctx: &mut Context<Self>) {
        if !matches!(order, BatchOrder::PassEnd { .. }) {
            self.making += 1;
        }
        match order {
            BatchOrder::Rows(job) => match &self.transformer {
                Some(t) => {
                    let ticket = self.release.start();
                    let me = ctx.address();
                    let place = job.place;
                    t.spawn(job.rows, place.pass, move |made| {
                        me.do_send(Made {
                            ticket,
                            place,
                            made,
                        })
                    });
                }
                None => {
                    let t0 = Instant::now();
                    let made =
                        collate_rows(&self.settings.schema, &job.rows).map(|batch| Transformed {
                            batch,
                            failed: Vec::new(),
                            busy: Duration::ZERO,
                        });
                    self.recorder.busy(t0.elapsed());
                    self.release.done_now(Release::Made {
                        place: job.place,
                        made,
                    });
                    self.release_ready(ctx);
                }
            },
            BatchOrder::Ready { place, batch } => {
                self.release.done_now(Release::Ready { place, batch });
                self.release_ready(ctx);
            }
            BatchOrder::PassEnd { pass, records } => {
                self.release.done_now(Release::PassEnd { pass, records });
                self.release_ready(ctx);
            }
        }
    }

    /// A worker made the batch of `msg.ticket`.
    fn on_made(&mut self, msg: Made, ctx: &mut Context<Self>) {
        let Made {
            ticket,
            place,
            made,
        } = msg;
        let fresh = self.release.finish(ticket, Release::Made { place, made });
        debug_assert!(fresh, "batch {ticket} made twice");
        self.release_ready(ctx);
        self.pump(ctx);
    }

    /// Release what is made, in order, into the items waiting for the lanes.
    fn release_ready(&mut self, ctx: &mut Context<Self>) {
        while !self.failed {
            let Some(r) = self.release.pop() else { break };
            if let Err(e) = self.released(r) {
                self.fail(e);
                return;
            }
        }
        self.push_out(ctx);
    }

    /// One released order into the items for the lanes.
    fn released(&mut self, r: Release) -> Result<(), PipelineError> {
        if !matches!(r, Release::PassEnd { .. }) {
            self.making -= 1;
        }
        match r {
            Release::Made { place, made } => {
                let pass = place.pass;
                let t = made?;
                self.recorder.busy(t.busy);
                for e in t.failed {
                    let loc = e.location().cloned();
                    let source = loc
                        .as_ref()
                        .map_or_else(String::new, |l| l.source.name().to_string());
                    let record = loc.as_ref().map_or(0, |l| l.record);
                    let rec =
                        SkippedRecord::new(loc.as_ref(), &source, record, false, 1, e.to_string());
                    self.bad.judge(rec, pass, e)?;
                }
                // A failed row leaves the batch shorter; padding stays its last rows.
                let padded = place.padded.min(t.batch.len());
                let batch = t.batch.with_padded_rows(padded)?;
                self.out_batch(place, Arc::new(batch))?;
            }
            Release::Ready { place, batch } => {
                self.out_batch(place, batch)?;
            }
            Release::PassEnd { pass, records } => {
                self.bad.judge_pass(pass, records)?;
                match &mut self.packing {
                    // Its markers follow its last packed batch (`fill_out`).
                    Some(p) => p.take_pass_end(pass),
                    None => {
                        for lane in 0..self.settings.lanes.count() {
                            self.out.push_back((lane, Item::EndOfPass(pass)));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Push the released items into the lanes; wait for room (without
    /// holding the mailbox) when a lane is full; close the feed queue once
    /// everything is in.
    fn push_out(&mut self, ctx: &mut Context<Self>) {
        if self.waiting_room || self.failed {
            return;
        }
        loop {
            let more = match self.fill_out() {
                Ok(more) => more,
                Err(e) => return self.fail(e),
            };
            self.recorder.held(match &self.packing {
                None => self.held(),
                Some(_) => self.out_batches(),
            });
            match self.queue.push(&mut self.out) {
                // Room for more packed batches: the next ones.
                Ok(Pushed::All) if more => continue,
                pushed => return self.pushed(pushed, ctx),
            }
        }
    }

    /// What a push into the lanes gave: everything in (close the feed
    /// queue once everything is), or wait for room.
    fn pushed(&mut self, pushed: Result<Pushed, PipelineError>, ctx: &mut Context<Self>) {
        match pushed {
            Ok(Pushed::All) => {
                let packed = self.packing.as_ref().is_none_or(|p| p.is_empty());
                if self.ended && self.release.is_empty() && packed && !self.closed {
                    self.closed = true;
                    self.queue.close();
                    self.links.queued.do_send(StreamQueued);
                }
            }
            Ok(Pushed::Full(room)) => {
                self.waiting_room = true;
                let t0 = Instant::now();
                ctx.spawn(room.into_actor(self).map(move |_, act, ctx| {
                    // A cancelled wait (the queue failed) shows in the next push.
                    guarded(act, ctx, "room in the feed queue", |act, ctx| {
                        act.waiting_room = false;
                        act.recorder.blocked(t0.elapsed());
                        act.push_out(ctx);
                        act.pump(ctx);
                    });
                }));
            }
            // The queue failed or was stopped: nothing more to do here.
            Ok(Pushed::Closed) | Err(_) => self.stop(ctx),
        }
    }

    /// The pipeline fails with `e` (every consumer gets it; the shuffle
    /// stage stops waiting for orders to be taken).
    fn fail(&mut self, e: PipelineError) {
        // The pipeline fails with `e`: its caller reports it, once.
        log::debug!("making a batch failed: {e}");
        self.failed = true;
        self.orders.fail(e.clone());
        self.guard.fail(e);
    }

    /// Stop: nothing more is taken or released.
    fn stop(&mut self, ctx: &mut Context<Self>) {
        self.failed = true;
        self.orders.fail(PipelineError::Stopped);
        ctx.stop();
    }
}

impl Actor for BatchMaker {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        guarded(self, ctx, "start", |me, ctx| me.pump(ctx));
    }
}

impl Drop for BatchMaker {
    /// Gone (stopped, or its system stopped): the shuffle stage must not
    /// wait for it. Dropping the transformer then stops the batches in
    /// flight and waits for them.
    fn drop(&mut self) {
        self.orders.fail(PipelineError::Stopped);
    }
}

impl Supervised for BatchMaker {
    fn guard(&self) -> &StageGuard {
        &self.guard
    }

    fn panicked(&mut self, ctx: &mut Context<Self>, _: &PipelineError) {
        self.stop(ctx);
    }
}

impl Handler<Made> for BatchMaker {
    type Result = ();

    fn handle(&mut self, msg: Made, ctx: &mut Context<Self>) {
        guarded(self, ctx, "Made", |me, ctx| me.on_made(msg, ctx));
    }
}

impl Handler<Shutdown> for BatchMaker {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        guarded(self, ctx, "Shutdown", |me, ctx| me.stop(ctx));
    }
}
