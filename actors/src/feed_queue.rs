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

use actix::prelude::*;
use futures::channel::oneshot;

use crate::error::PipelineError;
use crate::messages::{CloseQueue, Fail, Pop, Popped, Push, QueueItem, Shutdown};
use crate::stats::{ns, Stats};

/// A consumer waiting for an item: who, since when, where the answer goes.
type ParkedPop = (
    usize,
    Instant,
    oneshot::Sender<Result<Popped, PipelineError>>,
);

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
    /// Consumers pop by themselves (no trainer actors): account their time
    /// here — waiting from a `Pop` to its answer, busy from an answer to the next `Pop`.
    account: bool,
    last_answer: Vec<Option<Instant>>,
}

impl FeedQueue {
    pub(crate) fn new(
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
            d.wait_ns.fetch_add(ns(now - asked), Relaxed);
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
    type Result = ResponseFuture<Result<Popped, PipelineError>>;

    fn handle(&mut self, msg: Pop, _: &mut Context<Self>) -> Self::Result {
        let now = Instant::now();
        self.asked(msg.consumer, now);
        let lane = self.lane_of(msg.consumer);
        if self.lanes[lane].pops.is_empty() {
            if let Some(r) = self.take(msg.consumer) {
                let records = match &r {
                    Ok(Popped::Batch(b)) => Some(b.batch.len()),
                    _ => None,
                };
                self.answered(msg.consumer, now, records);
                self.settle(lane);
                return Box::pin(async move { r });
            }
        }
        let (tx, rx) = oneshot::channel();
        self.lanes[lane].pops.push_back((msg.consumer, now, tx));
        self.settle(lane);
        Box::pin(async move { rx.await.unwrap_or(Err(PipelineError::Stopped)) })
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
