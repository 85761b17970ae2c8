//! The `FeedQueue` actor: the bounded queue between the loader and the
//! devices (Paddle's `PyArrayFeedQueue`, as an actor).
//!
//! `Push` is answered only when the item is in (the lane had room), `Pop`
//! only when there is something to give: late replies are the backpressure.
//! In shared mode there is one lane that every device takes from as it is
//! ready; in round-robin mode lane `d` belongs to device `d`.
//!
//! End-of-pass markers are per consumer: each consumer gets
//! `Popped::EndOfPass(p)` once, after the last batch of pass `p` has left the
//! lane, and before any batch of the next pass it takes.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use std::cell::RefCell;
use std::rc::Rc;

use actix::dev::{MessageResponse, OneshotSender};
use actix::prelude::*;
use futures::channel::oneshot;

use crate::error::PipelineError;
use crate::messages::{CloseQueue, Delivered, Fail, Pop, Popped, Push, QueueItem, Shutdown};
use crate::stats::{ns, Stats};

/// A consumer waiting for an item: who, since when, and actix's own reply
/// sender — so a reply to a consumer that has gone (its request dropped, say
/// on a time-out) fails here, and its batch is put back instead of lost.
type ParkedPop = (usize, Instant, ReplyTo);

/// Where a pop's answer goes: actix's reply to a [`Pop`], or the channel of a
/// [`PopTo`]. Either way a send to a consumer that has gone fails and hands
/// the item back.
pub(crate) enum ReplyTo {
    Actix(OneshotSender<Result<Popped, PipelineError>>),
    Plain(oneshot::Sender<Result<Popped, PipelineError>>),
}

impl ReplyTo {
    fn send(self, r: Result<Popped, PipelineError>) -> Result<(), Result<Popped, PipelineError>> {
        match self {
            ReplyTo::Actix(tx) => tx.send(r),
            ReplyTo::Plain(tx) => tx.send(r),
        }
    }
}

/// Like [`Pop`], answered on the consumer's own channel: the consumer can
/// close it and take what was already sent, so a dropped consumer never
/// loses a batch (see `Loader`'s iterators).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct PopTo {
    pub consumer: usize,
    pub reply: oneshot::Sender<Result<Popped, PipelineError>>,
}

/// A batch a consumer received but will not use: back to the front of its lane.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ReturnBatch {
    pub consumer: usize,
    pub batch: Delivered,
}

/// Hand-off from [`PopReply`] (which runs after the handler, without access
/// to the actor) back to the actor: pops to park and batches to put back.
#[derive(Default)]
struct Handoff {
    parked: Vec<(usize, ParkedPop)>,
    returned: Vec<(usize, Delivered)>,
}

/// The answer to a [`Pop`]: an item now, or later once one is there.
pub struct PopReply(ReplyKind);

enum ReplyKind {
    Now {
        result: Result<Popped, PipelineError>,
        lane: usize,
        handoff: Rc<RefCell<Handoff>>,
    },
    Park {
        consumer: usize,
        asked: Instant,
        lane: usize,
        handoff: Rc<RefCell<Handoff>>,
    },
}

/// Take what [`PopReply`]s left in the hand-off.
#[derive(Message)]
#[rtype(result = "()")]
struct DrainHandoff;

impl MessageResponse<FeedQueue, Pop> for PopReply {
    fn handle(
        self,
        ctx: &mut Context<FeedQueue>,
        tx: Option<OneshotSender<Result<Popped, PipelineError>>>,
    ) {
        let Some(tx) = tx else {
            // Sent with do_send: nobody to answer; an item taken for it goes back.
            if let ReplyKind::Now {
                result: Ok(Popped::Batch(b)),
                lane,
                handoff,
            } = self.0
            {
                handoff.borrow_mut().returned.push((lane, b));
                ctx.notify(DrainHandoff);
            }
            return;
        };
        match self.0 {
            ReplyKind::Now {
                result,
                lane,
                handoff,
            } => {
                if let Err(Ok(Popped::Batch(b))) = tx.send(result) {
                    handoff.borrow_mut().returned.push((lane, b));
                    ctx.notify(DrainHandoff);
                }
            }
            ReplyKind::Park {
                consumer,
                asked,
                lane,
                handoff,
            } => {
                handoff
                    .borrow_mut()
                    .parked
                    .push((lane, (consumer, asked, ReplyTo::Actix(tx))));
                ctx.notify(DrainHandoff);
            }
        }
    }
}

struct Lane {
    items: VecDeque<QueueItem>,
    pushes: VecDeque<(QueueItem, oneshot::Sender<Result<(), PipelineError>>)>,
    pops: VecDeque<ParkedPop>,
    /// End-of-pass markers that left the head of this lane.
    ends: u64,
}

impl Lane {
    fn new() -> Self {
        Lane {
            items: VecDeque::new(),
            pushes: VecDeque::new(),
            pops: VecDeque::new(),
            ends: 0,
        }
    }
}

/// The bounded feed queue actor. Consumers send [`Pop`].
pub struct FeedQueue {
    lanes: Vec<Lane>,
    capacity: usize,
    round_robin: bool,
    /// Per consumer: end-of-pass markers it has been given.
    seen_ends: Vec<u64>,
    closed: bool,
    failed: Option<PipelineError>,
    stats: Stats,
    handoff: Rc<RefCell<Handoff>>,
    /// Consumers pop by themselves (no trainer actors): account their time
    /// here — waiting from a `Pop` to its answer, busy from an answer to the next `Pop`.
    account: bool,
    last_answer: Vec<Option<Instant>>,
}

impl FeedQueue {
    /// Start the actor. Its mailbox is made large: a full mailbox makes
    /// `send` hold the message inside its future until polled, which could
    /// reorder batches; the real bound is the queue's capacity.
    pub(crate) fn start_new(
        consumers: usize,
        capacity: usize,
        round_robin: bool,
        stats: Stats,
        account: bool,
    ) -> Addr<Self> {
        FeedQueue::create(move |ctx| {
            ctx.set_mailbox_capacity(4096);
            FeedQueue::new(consumers, capacity, round_robin, stats, account)
        })
    }

    fn new(
        consumers: usize,
        capacity: usize,
        round_robin: bool,
        stats: Stats,
        account: bool,
    ) -> Self {
        let lanes = if round_robin { consumers.max(1) } else { 1 };
        FeedQueue {
            lanes: (0..lanes).map(|_| Lane::new()).collect(),
            capacity: capacity.max(1),
            round_robin,
            seen_ends: vec![0; consumers.max(1)],
            closed: false,
            failed: None,
            stats,
            handoff: Rc::new(RefCell::new(Handoff::default())),
            account,
            last_answer: vec![None; consumers.max(1)],
        }
    }

    /// Consumer `c` asked at `asked` and is answered now.
    fn answered(&mut self, c: usize, asked: Instant, batch: Option<usize>) {
        if !self.account {
            return;
        }
        let now = Instant::now();
        if let Some(d) = self.stats.device(c) {
            // The wait before the first batch is start-up, not a stall.
            if d.batches.load(Relaxed) > 0 {
                d.wait_ns.fetch_add(ns(now - asked), Relaxed);
            }
            if let Some(records) = batch {
                d.batches.fetch_add(1, Relaxed);
                d.records.fetch_add(records as u64, Relaxed);
            }
        }
        if c >= self.last_answer.len() {
            self.last_answer.resize(c + 1, None);
        }
        self.last_answer[c] = Some(now);
    }

    /// Consumer `c` asks again: the time since its last answer was work.
    fn asked(&mut self, c: usize, now: Instant) {
        if !self.account {
            return;
        }
        if let (Some(Some(t)), Some(d)) = (self.last_answer.get(c), self.stats.device(c)) {
            d.busy_ns.fetch_add(ns(now - *t), Relaxed);
        }
    }

    fn lane_of(&self, consumer: usize) -> usize {
        if self.round_robin {
            consumer % self.lanes.len()
        } else {
            0
        }
    }

    fn depth(&self) -> usize {
        self.lanes.iter().map(|l| l.items.len()).sum()
    }

    /// What consumer `c` gets now, if anything.
    fn take(&mut self, c: usize) -> Option<Result<Popped, PipelineError>> {
        if let Some(e) = &self.failed {
            return Some(Err(e.clone()));
        }
        if c >= self.seen_ends.len() {
            self.seen_ends.resize(c + 1, 0);
        }
        let li = self.lane_of(c);
        let lane = &mut self.lanes[li];
        if self.seen_ends[c] < lane.ends {
            let p = self.seen_ends[c];
            self.seen_ends[c] += 1;
            return Some(Ok(Popped::EndOfPass(p)));
        }
        match lane.items.pop_front() {
            Some(QueueItem::EndOfPass(p)) => {
                lane.ends += 1;
                self.seen_ends[c] += 1;
                Some(Ok(Popped::EndOfPass(p)))
            }
            Some(QueueItem::Batch(b)) => Some(Ok(Popped::Batch(b))),
            None if self.closed => Some(Ok(Popped::EndOfData)),
            None => None,
        }
    }

    /// Move parked pushes in while there is room, answer parked pops.
    fn settle(&mut self, lane: usize) {
        loop {
            let mut progressed = false;
            while self.lanes[lane].items.len() < self.capacity {
                match self.lanes[lane].pushes.pop_front() {
                    Some((item, tx)) => {
                        self.lanes[lane].items.push_back(item);
                        let _ = tx.send(Ok(()));
                        progressed = true;
                    }
                    None => break,
                }
            }
            while let Some(&(c, asked, _)) = self.lanes[lane].pops.front() {
                match self.take(c) {
                    Some(r) => {
                        let (_, _, tx) = self.lanes[lane].pops.pop_front().expect("front exists");
                        let records = match &r {
                            Ok(Popped::Batch(b)) => Some(b.batch.len()),
                            _ => None,
                        };
                        self.answered(c, asked, records);
                        if let Err(Ok(Popped::Batch(b))) = tx.send(r) {
                            // The consumer went away: put the batch back so nothing is lost.
                            self.lanes[lane].items.push_front(QueueItem::Batch(b));
                        }
                        progressed = true;
                    }
                    None => break,
                }
            }
            if !progressed {
                break;
            }
        }
        self.stats.sample_queue_depth(self.depth());
    }

    fn fail_all(&mut self) {
        for lane in 0..self.lanes.len() {
            let pops: Vec<_> = self.lanes[lane].pops.drain(..).collect();
            for (c, _, tx) in pops {
                let r = self.take(c).unwrap_or(Err(PipelineError::Stopped));
                let _ = tx.send(r);
            }
            for (_, tx) in self.lanes[lane].pushes.drain(..) {
                let _ = tx.send(Err(self.failed.clone().unwrap_or(PipelineError::Stopped)));
            }
        }
    }
}

impl Actor for FeedQueue {
    type Context = Context<Self>;

    fn stopping(&mut self, _: &mut Self::Context) -> Running {
        if self.failed.is_none() {
            self.failed = Some(PipelineError::Stopped);
        }
        self.fail_all();
        Running::Stop
    }
}

impl Handler<Push> for FeedQueue {
    type Result = ResponseFuture<Result<(), PipelineError>>;

    fn handle(&mut self, msg: Push, _: &mut Context<Self>) -> Self::Result {
        if let Some(e) = &self.failed {
            let e = e.clone();
            return Box::pin(async move { Err(e) });
        }
        let lane = msg.lane % self.lanes.len();
        let (tx, rx) = oneshot::channel();
        self.lanes[lane].pushes.push_back((msg.item, tx));
        self.settle(lane);
        Box::pin(async move { rx.await.unwrap_or(Err(PipelineError::Stopped)) })
    }
}

impl Handler<Pop> for FeedQueue {
    type Result = PopReply;

    fn handle(&mut self, msg: Pop, _: &mut Context<Self>) -> PopReply {
        let now = Instant::now();
        self.asked(msg.consumer, now);
        let lane = self.lane_of(msg.consumer);
        let handoff = self.handoff.clone();
        if self.lanes[lane].pops.is_empty() && self.handoff.borrow().parked.is_empty() {
            if let Some(result) = self.take(msg.consumer) {
                let records = match &result {
                    Ok(Popped::Batch(b)) => Some(b.batch.len()),
                    _ => None,
                };
                self.answered(msg.consumer, now, records);
                self.settle(lane);
                return PopReply(ReplyKind::Now {
                    result,
                    lane,
                    handoff,
                });
            }
        }
        PopReply(ReplyKind::Park {
            consumer: msg.consumer,
            asked: now,
            lane,
            handoff,
        })
    }
}

impl Handler<PopTo> for FeedQueue {
    type Result = ();

    fn handle(&mut self, msg: PopTo, _: &mut Context<Self>) {
        let now = Instant::now();
        self.asked(msg.consumer, now);
        let lane = self.lane_of(msg.consumer);
        self.lanes[lane]
            .pops
            .push_back((msg.consumer, now, ReplyTo::Plain(msg.reply)));
        self.settle(lane);
    }
}

impl Handler<ReturnBatch> for FeedQueue {
    type Result = ();

    fn handle(&mut self, msg: ReturnBatch, _: &mut Context<Self>) {
        let lane = self.lane_of(msg.consumer);
        self.lanes[lane]
            .items
            .push_front(QueueItem::Batch(msg.batch));
        self.settle(lane);
    }
}

impl Handler<DrainHandoff> for FeedQueue {
    type Result = ();

    fn handle(&mut self, _: DrainHandoff, _: &mut Context<Self>) {
        let (parked, returned) = {
            let mut h = self.handoff.borrow_mut();
            (
                std::mem::take(&mut h.parked),
                std::mem::take(&mut h.returned),
            )
        };
        for (lane, b) in returned.into_iter().rev() {
            self.lanes[lane].items.push_front(QueueItem::Batch(b));
        }
        for (lane, p) in parked {
            self.lanes[lane].pops.push_back(p);
        }
        for lane in 0..self.lanes.len() {
            self.settle(lane);
        }
        if self.failed.is_some() {
            self.fail_all();
        }
    }
}

impl Handler<CloseQueue> for FeedQueue {
    type Result = ();

    fn handle(&mut self, _: CloseQueue, _: &mut Context<Self>) {
        self.closed = true;
        for lane in 0..self.lanes.len() {
            self.settle(lane);
        }
    }
}

impl Handler<Fail> for FeedQueue {
    type Result = ();

    fn handle(&mut self, msg: Fail, _: &mut Context<Self>) {
        if self.failed.is_none() {
            self.failed = Some(msg.0);
        }
        self.fail_all();
    }
}

impl Handler<Shutdown> for FeedQueue {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
