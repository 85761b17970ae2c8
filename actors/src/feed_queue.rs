//! The feed queue: the bounded queue between the loader and the devices
//! (Paddle's `PyArrayFeedQueue`), as shared lanes plus an actor.
//!
//! The lanes (`FeedLanes`) are one mutex-guarded state that the
//! shuffle-batch stage pushes into and consumers take from directly — the
//! [`Loader`](crate::Loader)'s iterators (plain threads) and the
//! [`Trainer`](crate::Trainer) actors: a batch moves from producer to
//! consumer with one lock each and, only when the other side sleeps, one
//! wake-up — no message, no reply, no actor thread in between. A push that
//! finds a lane full leaves those batches with the producer and hands it a
//! `room` signal, given once that lane is half empty (the shuffle stage waits
//! for it with `ctx.wait`, holding its mailbox: that is the backpressure). A
//! plain-thread pop that finds its lane empty sleeps on the lane's condition
//! variable; an actor's is parked in the lane and answered by the push that
//! brings an item.
//!
//! The [`FeedQueue`] actor is the lanes' face for other actix code: [`Pop`]
//! is answered when there is something to give (parked in the lanes
//! meanwhile), and it takes the control messages: [`CloseQueue`], [`Fail`],
//! [`Shutdown`]; when it stops, the lanes fail with `Stopped`.
//!
//! In shared mode there is one lane that every consumer takes from as it is
//! ready; in round-robin mode lane `d` belongs to device `d`. A lane holds at
//! most `capacity` items (and a batch a consumer hands back). End-of-pass markers are per consumer: each
//! consumer gets `Popped::EndOfPass(p)` once, after the last batch of pass
//! `p` has left its lane, and before any batch of the next pass it takes.
//! A batch is taken out of a lane only in the same critical section that
//! hands it to its consumer (returned to a plain thread, or sent on a parked
//! pop's reply — put back at the front if that consumer has gone), so none
//! is lost or given twice whatever consumers do.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use actix::dev::{MessageResponse, OneshotSender};
use actix::prelude::*;
use futures::channel::oneshot;
use parking_lot::{Condvar, Mutex};

use crate::error::PipelineError;
use crate::messages::{CloseQueue, Fail, Pop, Popped, QueueItem, Shutdown};
use crate::stats::{ns, Stats};

/// A consumer waiting for an item: who, since when, and where the answer
/// goes — so a reply to a consumer that has gone (its request dropped, say
/// on a time-out) fails here, and its batch is put back instead of lost.
type ParkedPop = (usize, Instant, ReplyTo);

/// Where a parked pop's answer goes: actix's reply to a [`Pop`], or the
/// channel of an actor that waits on the lanes itself (a trainer).
enum ReplyTo {
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

/// What an asynchronous pop got: an item now, or a channel the item comes on.
pub(crate) enum PopNow {
    /// Taken now.
    Ready(Result<Popped, PipelineError>),
    /// Parked: answered by the push that brings an item (cancelled if the
    /// queue goes). A receiver dropped before the answer loses nothing (the
    /// push puts the item back); to give up safely, close it and take what
    /// was already sent (as `FeedLanes::cancel` does).
    Later(oneshot::Receiver<Result<Popped, PipelineError>>),
}

struct Lane {
    items: VecDeque<QueueItem>,
    /// Pops parked for an item (actix `Pop`s, actors' async pops); there
    /// are some only while `items` is empty.
    pops: VecDeque<ParkedPop>,
    /// End-of-pass markers that left the head of this lane.
    ends: u64,
    /// Plain-thread consumers asleep on this lane's condition variable.
    sleepers: usize,
    /// Producers waiting for room in this lane.
    room: Vec<oneshot::Sender<()>>,
}

impl Lane {
    fn new() -> Self {
        Lane {
            items: VecDeque::new(),
            pops: VecDeque::new(),
            ends: 0,
            sleepers: 0,
            room: Vec::new(),
        }
    }
}

struct State {
    lanes: Vec<Lane>,
    capacity: usize,
    round_robin: bool,
    /// Per consumer: end-of-pass markers it has been given.
    seen_ends: Vec<u64>,
    closed: bool,
    failed: Option<PipelineError>,
    /// Consumers pop by themselves with [`Pop`] (no trainer actors, no
    /// loader): account their time here — waiting from a `Pop` to its
    /// answer, busy from an answer to the next `Pop`.
    account: bool,
    last_answer: Vec<Option<Instant>>,
}

/// The lanes of the feed queue, shared by the producer (the shuffle-batch
/// stage), plain-thread consumers and the [`FeedQueue`] actor.
pub(crate) struct FeedLanes {
    state: Mutex<State>,
    /// One per lane: plain-thread consumers sleep here while it is empty.
    ready: Vec<Condvar>,
    stats: Stats,
}

/// What a producer's push left to do.
pub(crate) enum Pushed {
    /// Every item is in.
    All,
    /// Some lanes are full: resolves (or is cancelled, when the queue fails)
    /// once the lane of the first item left has room; push the rest again then.
    Full(oneshot::Receiver<()>),
}

impl State {
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

    /// What consumer `c` gets now, if anything. Takes it out of the lane.
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

    /// Consumer `c` (popping with [`Pop`]) asks again: the time since its
    /// last answer was work.
    fn asked(&mut self, stats: &Stats, c: usize, now: Instant) {
        if !self.account {
            return;
        }
        if let (Some(Some(t)), Some(d)) = (self.last_answer.get(c), stats.device(c)) {
            d.busy_ns.fetch_add(ns(now - *t), Relaxed);
        }
    }

    /// Consumer `c` asked at `asked` and is answered now.
    fn answered(&mut self, stats: &Stats, c: usize, asked: Instant, records: Option<usize>) {
        if !self.account {
            return;
        }
        let now = Instant::now();
        if let Some(d) = stats.device(c) {
            // The wait before the first batch is start-up, not a stall.
            if d.batches.load(Relaxed) > 0 {
                d.wait_ns.fetch_add(ns(now - asked), Relaxed);
            }
            if let Some(records) = records {
                d.batches.fetch_add(1, Relaxed);
                d.records.fetch_add(records as u64, Relaxed);
            }
        }
        if c >= self.last_answer.len() {
            self.last_answer.resize(c + 1, None);
        }
        self.last_answer[c] = Some(now);
    }

    /// An item left lane `li`: wake its waiting producers once it is half
    /// empty (a producer then pushes several items per wake-up, and a slow
    /// consumer still has half a lane in hand while it comes), its other
    /// consumers if a marker left (they have one to take now).
    fn took(&mut self, li: usize, r: &Result<Popped, PipelineError>, ready: &[Condvar]) {
        let lane = &mut self.lanes[li];
        if lane.items.len() <= self.capacity / 2 {
            for tx in lane.room.drain(..) {
                let _ = tx.send(());
            }
        }
        if matches!(r, Ok(Popped::EndOfPass(_))) && lane.sleepers > 0 {
            ready[li].notify_all();
        }
    }

    /// Answer the pops parked on lane `li` that can have something
    /// now, in the order they came (one that cannot means the lane is empty:
    /// those after it can only have a marker, or the end of data).
    fn answer_parked(&mut self, li: usize, stats: &Stats, ready: &[Condvar]) {
        let mut i = 0;
        while i < self.lanes[li].pops.len() {
            let c = self.lanes[li].pops[i].0;
            let Some(r) = self.take(c) else {
                i += 1;
                continue;
            };
            let (_, asked, tx) = self.lanes[li].pops.remove(i).expect("index exists");
            let records = match &r {
                Ok(Popped::Batch(b)) => Some(b.batch.len()),
                _ => None,
            };
            self.answered(stats, c, asked, records);
            self.took(li, &r, ready);
            match tx.send(r) {
                // The consumer went away: put the batch back so nothing is
                // lost; a marker stays due to it.
                Err(Ok(Popped::Batch(b))) => self.lanes[li].items.push_front(QueueItem::Batch(b)),
                Err(Ok(Popped::EndOfPass(_))) => self.seen_ends[c] -= 1,
                _ => {}
            }
        }
    }

    /// A consumer took end-of-pass marker `r` off lane `li` by itself: the
    /// pops parked there have one to take now too.
    fn after_marker(
        &mut self,
        li: usize,
        r: &Result<Popped, PipelineError>,
        stats: &Stats,
        ready: &[Condvar],
    ) {
        if matches!(r, Ok(Popped::EndOfPass(_))) && !self.lanes[li].pops.is_empty() {
            self.answer_parked(li, stats, ready);
        }
    }

    /// Wake the plain consumers of lane `li` that can take something now.
    fn wake_sleepers(&self, li: usize, ready: &[Condvar]) {
        let lane = &self.lanes[li];
        if lane.sleepers == 0 {
            return;
        }
        if lane.items.len() >= lane.sleepers || self.closed || self.failed.is_some() {
            ready[li].notify_all();
        } else {
            for _ in 0..lane.items.len() {
                ready[li].notify_one();
            }
        }
    }
}

impl FeedLanes {
    fn new(
        consumers: usize,
        capacity: usize,
        round_robin: bool,
        stats: Stats,
        account: bool,
    ) -> Self {
        let lanes = if round_robin { consumers.max(1) } else { 1 };
        FeedLanes {
            state: Mutex::new(State {
                lanes: (0..lanes).map(|_| Lane::new()).collect(),
                capacity: capacity.max(1),
                round_robin,
                seen_ends: vec![0; consumers.max(1)],
                closed: false,
                failed: None,
                account,
                last_answer: vec![None; consumers.max(1)],
            }),
            ready: (0..lanes).map(|_| Condvar::new()).collect(),
            stats,
        }
    }

    /// Push the items of `out`, each lane's in order, while their lanes have
    /// room; the items of a full lane (and those after them for the same
    /// lane) stay in `out`, the other lanes' go in.
    pub(crate) fn push(
        &self,
        out: &mut VecDeque<(usize, QueueItem)>,
    ) -> Result<Pushed, PipelineError> {
        let mut st = self.state.lock();
        if let Some(e) = &st.failed {
            return Err(e.clone());
        }
        let n = st.lanes.len();
        loop {
            let mut touched = vec![false; n];
            let mut blocked = vec![false; n];
            let mut first_blocked = None;
            let mut kept = VecDeque::new();
            let mut depth = st.depth();
            for (lane, item) in out.drain(..) {
                let li = lane % n;
                blocked[li] = blocked[li] || st.lanes[li].items.len() >= st.capacity;
                if blocked[li] {
                    first_blocked.get_or_insert(li);
                    kept.push_back((lane, item));
                    continue;
                }
                st.lanes[li].items.push_back(item);
                touched[li] = true;
                depth += 1;
                self.stats.sample_queue_depth(depth);
            }
            *out = kept;
            for li in (0..n).filter(|&li| touched[li]) {
                st.answer_parked(li, &self.stats, &self.ready);
                st.wake_sleepers(li, &self.ready);
            }
            let Some(li) = first_blocked else {
                return Ok(Pushed::All);
            };
            // Parked pops may just have made room: then push on now, since
            // nobody else will signal it.
            if (0..n).any(|l| blocked[l] && st.lanes[l].items.len() < st.capacity) {
                continue;
            }
            let (tx, rx) = oneshot::channel();
            st.lanes[li].room.push(tx);
            return Ok(Pushed::Full(rx));
        }
    }

    /// No more items will be pushed: consumers get `EndOfData` once drained.
    pub(crate) fn close(&self) {
        let mut st = self.state.lock();
        st.closed = true;
        for li in 0..st.lanes.len() {
            st.answer_parked(li, &self.stats, &self.ready);
            st.wake_sleepers(li, &self.ready);
        }
    }

    /// The pipeline failed (or stopped): every consumer gets `e` (the first
    /// failure wins), waiting producers are released to find it out.
    pub(crate) fn fail(&self, e: PipelineError) {
        let mut st = self.state.lock();
        if st.failed.is_none() {
            st.failed = Some(e);
        }
        for li in 0..st.lanes.len() {
            st.answer_parked(li, &self.stats, &self.ready);
            // Dropping the senders cancels the producers' waits.
            st.lanes[li].room.clear();
            st.wake_sleepers(li, &self.ready);
        }
    }

    /// The next item for plain-thread consumer `consumer`, sleeping until
    /// there is one or until `deadline` (`None` then).
    pub(crate) fn pop(
        &self,
        consumer: usize,
        deadline: Option<Instant>,
    ) -> Option<Result<Popped, PipelineError>> {
        let mut st = self.state.lock();
        let li = st.lane_of(consumer);
        loop {
            // (Actix pops parked on this lane mean that it is empty.)
            if let Some(r) = st.take(consumer) {
                st.took(li, &r, &self.ready);
                st.after_marker(li, &r, &self.stats, &self.ready);
                self.stats.sample_queue_depth(st.depth());
                return Some(r);
            }
            st.lanes[li].sleepers += 1;
            let timed_out = match deadline {
                None => {
                    self.ready[li].wait(&mut st);
                    false
                }
                Some(d) => self.ready[li].wait_until(&mut st, d).timed_out(),
            };
            st.lanes[li].sleepers -= 1;
            if timed_out {
                let r = st.take(consumer);
                if let Some(r) = &r {
                    st.took(li, r, &self.ready);
                    st.after_marker(li, r, &self.stats, &self.ready);
                }
                return r;
            }
        }
    }

    /// An actor's pop without a message: the item now if there is one,
    /// else a channel it will come on.
    pub(crate) fn pop_async(&self, consumer: usize) -> PopNow {
        let mut st = self.state.lock();
        let li = st.lane_of(consumer);
        if let Some(r) = st.take(consumer) {
            st.took(li, &r, &self.ready);
            st.after_marker(li, &r, &self.stats, &self.ready);
            self.stats.sample_queue_depth(st.depth());
            return PopNow::Ready(r);
        }
        let (tx, rx) = oneshot::channel();
        st.lanes[li]
            .pops
            .push_back((consumer, Instant::now(), ReplyTo::Plain(tx)));
        PopNow::Later(rx)
    }

    /// Give up a parked pop: it is closed, so nothing more is sent on it; an
    /// item already sent is returned — the caller has it now (putting it back
    /// could bring a batch after an end-of-pass marker another consumer took).
    #[cfg(test)]
    fn cancel(
        mut rx: oneshot::Receiver<Result<Popped, PipelineError>>,
    ) -> Option<Result<Popped, PipelineError>> {
        rx.close();
        rx.try_recv().ok().flatten()
    }

    /// An actix consumer's pop: answered now if there is something, else parked.
    fn pop_or_park(
        &self,
        consumer: usize,
        asked: Instant,
        tx: OneshotSender<Result<Popped, PipelineError>>,
    ) {
        let mut st = self.state.lock();
        st.asked(&self.stats, consumer, asked);
        let li = st.lane_of(consumer);
        st.lanes[li]
            .pops
            .push_back((consumer, asked, ReplyTo::Actix(tx)));
        st.answer_parked(li, &self.stats, &self.ready);
        st.wake_sleepers(li, &self.ready);
        self.stats.sample_queue_depth(st.depth());
    }
}

/// The answer to a [`Pop`]: an item now, or later once one is there. The
/// item is taken only when actix hands over the request's reply sender, so
/// a `Pop` sent with `do_send` (nobody to answer) takes nothing.
pub struct PopReply {
    lanes: Arc<FeedLanes>,
    consumer: usize,
    asked: Instant,
}

impl MessageResponse<FeedQueue, Pop> for PopReply {
    fn handle(
        self,
        _: &mut Context<FeedQueue>,
        tx: Option<OneshotSender<Result<Popped, PipelineError>>>,
    ) {
        if let Some(tx) = tx {
            self.lanes.pop_or_park(self.consumer, self.asked, tx);
        }
    }
}

/// The feed queue actor. Consumers send [`Pop`].
pub struct FeedQueue {
    lanes: Arc<FeedLanes>,
}

impl FeedQueue {
    /// Start the actor and publish its lanes in `stats` (`Stats::feed_lanes`)
    /// for the producer and plain-thread consumers.
    /// Its mailbox is made large: control messages and pops must never be
    /// held back; the real bound is the queue's capacity.
    pub(crate) fn start_new(
        consumers: usize,
        capacity: usize,
        round_robin: bool,
        stats: Stats,
        account: bool,
    ) -> Addr<Self> {
        let lanes = Arc::new(FeedLanes::new(
            consumers,
            capacity,
            round_robin,
            stats.clone(),
            account,
        ));
        stats.set_feed_lanes(&lanes);
        FeedQueue::create(move |ctx| {
            ctx.set_mailbox_capacity(4096);
            FeedQueue { lanes }
        })
    }
}

impl Drop for FeedQueue {
    /// The actor is gone (its system stopped): nobody waits forever on its lanes.
    fn drop(&mut self) {
        self.lanes.fail(PipelineError::Stopped);
    }
}

impl Actor for FeedQueue {
    type Context = Context<Self>;

    fn stopping(&mut self, _: &mut Self::Context) -> Running {
        self.lanes.fail(PipelineError::Stopped);
        Running::Stop
    }
}

impl Handler<Pop> for FeedQueue {
    type Result = PopReply;

    fn handle(&mut self, msg: Pop, _: &mut Context<Self>) -> PopReply {
        PopReply {
            lanes: self.lanes.clone(),
            consumer: msg.consumer,
            asked: Instant::now(),
        }
    }
}

impl Handler<CloseQueue> for FeedQueue {
    type Result = ();

    fn handle(&mut self, _: CloseQueue, _: &mut Context<Self>) {
        self.lanes.close();
    }
}

impl Handler<Fail> for FeedQueue {
    type Result = ();

    fn handle(&mut self, msg: Fail, _: &mut Context<Self>) {
        self.lanes.fail(msg.0);
    }
}

impl Handler<Shutdown> for FeedQueue {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::Delivered;
    use std::time::Duration;

    fn batch(pass: u64, seq: u64) -> QueueItem {
        let schema = feedline::gen::preset_schema(feedline::gen::Preset::Small);
        let b = feedline::collate_rows(&schema, &[]).expect("an empty batch");
        QueueItem::Batch(Delivered {
            pass,
            seq,
            batch: Arc::new(b),
        })
    }

    fn lanes(consumers: usize, capacity: usize, round_robin: bool) -> Arc<FeedLanes> {
        let stats = Stats::new(consumers, 1, capacity);
        Arc::new(FeedLanes::new(
            consumers,
            capacity,
            round_robin,
            stats,
            false,
        ))
    }

    fn seq(r: Option<Result<Popped, PipelineError>>) -> u64 {
        match r {
            Some(Ok(Popped::Batch(d))) => d.seq,
            other => panic!("expected a batch, got {other:?}"),
        }
    }

    fn now_plus(ms: u64) -> Option<Instant> {
        Some(Instant::now() + Duration::from_millis(ms))
    }

    #[test]
    fn a_lane_holds_at_most_its_capacity_and_signals_room() {
        let q = lanes(1, 2, false);
        let mut out: VecDeque<_> = (0..3).map(|i| (0, batch(0, i))).collect();
        let Ok(Pushed::Full(mut room)) = q.push(&mut out) else {
            panic!("the third batch must not fit");
        };
        assert_eq!(out.len(), 1);
        assert_eq!(q.stats.inner.queue_depth_now.load(Relaxed), 2);
        assert!(matches!(room.try_recv(), Ok(None)), "no room yet");
        assert_eq!(seq(q.pop(0, None)), 0);
        assert!(matches!(room.try_recv(), Ok(Some(()))), "room after a pop");
        assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
        assert_eq!(seq(q.pop(0, None)), 1);
        assert_eq!(seq(q.pop(0, None)), 2);
    }

    #[test]
    fn a_waiting_producer_is_woken_when_its_lane_is_half_empty() {
        let q = lanes(1, 4, false);
        let mut out: VecDeque<_> = (0..6).map(|i| (0, batch(0, i))).collect();
        let Ok(Pushed::Full(mut room)) = q.push(&mut out) else {
            panic!("capacity 4");
        };
        assert_eq!(seq(q.pop(0, None)), 0);
        assert!(matches!(room.try_recv(), Ok(None)), "3 of 4 left: not yet");
        assert_eq!(seq(q.pop(0, None)), 1);
        assert!(matches!(room.try_recv(), Ok(Some(()))), "2 of 4 left");
        assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
        for i in 2..6 {
            assert_eq!(seq(q.pop(0, None)), i);
        }
    }

    #[test]
    fn room_that_parked_pops_make_during_a_push_is_filled_at_once() {
        let q = lanes(2, 2, false);
        let parked: Vec<_> = (0..2)
            .map(|c| match q.pop_async(c) {
                PopNow::Later(rx) => rx,
                PopNow::Ready(_) => panic!("the lane is empty"),
            })
            .collect();
        let mut out: VecDeque<_> = (0..5).map(|i| (0, batch(0, i))).collect();
        let Ok(Pushed::Full(_)) = q.push(&mut out) else {
            panic!("5 batches, 2 parked pops, capacity 2");
        };
        assert_eq!(out.len(), 1, "the parked pops' room was filled");
        for (i, mut rx) in parked.into_iter().enumerate() {
            assert_eq!(seq(rx.try_recv().expect("answered")), i as u64);
        }
        assert_eq!(seq(q.pop(0, now_plus(0))), 2);
        assert_eq!(seq(q.pop(1, now_plus(0))), 3);
    }

    #[test]
    fn a_timed_out_pop_takes_nothing() {
        let q = lanes(1, 2, false);
        let t = Instant::now();
        assert!(q.pop(0, now_plus(30)).is_none());
        assert!(t.elapsed() >= Duration::from_millis(30));
        let mut out = VecDeque::from([(0, batch(0, 7))]);
        assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
        assert_eq!(seq(q.pop(0, now_plus(1000))), 7);
    }

    #[test]
    fn a_sleeping_consumer_is_woken_by_a_push_from_another_thread() {
        let q = lanes(1, 2, false);
        let q2 = q.clone();
        let consumer = std::thread::spawn(move || seq(q2.pop(0, now_plus(5000))));
        std::thread::sleep(Duration::from_millis(20));
        let mut out = VecDeque::from([(0, batch(0, 3))]);
        assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
        assert_eq!(consumer.join().expect("consumer"), 3);
    }

    #[test]
    fn every_consumer_gets_each_end_of_pass_marker_once_in_shared_mode() {
        let q = lanes(2, 4, false);
        let mut out = VecDeque::from([
            (0, batch(0, 0)),
            (0, QueueItem::EndOfPass(0)),
            (0, batch(1, 0)),
        ]);
        assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
        assert_eq!(seq(q.pop(0, None)), 0);
        assert!(matches!(q.pop(1, None), Some(Ok(Popped::EndOfPass(0)))));
        // Consumer 0 gets its marker before the next pass's batch.
        assert!(matches!(q.pop(0, None), Some(Ok(Popped::EndOfPass(0)))));
        assert!(matches!(q.pop(0, None), Some(Ok(Popped::Batch(d))) if d.pass == 1));
        q.close();
        assert!(matches!(q.pop(1, None), Some(Ok(Popped::EndOfData))));
        assert!(matches!(q.pop(0, None), Some(Ok(Popped::EndOfData))));
    }

    #[test]
    fn round_robin_lanes_are_separate_and_a_full_one_holds_back_only_its_own() {
        let q = lanes(2, 1, true);
        let mut out = VecDeque::from([
            (0, batch(0, 0)),
            (1, batch(0, 1)),
            (0, batch(0, 2)),
            (1, batch(0, 3)),
            (0, batch(0, 4)),
        ]);
        let Ok(Pushed::Full(_)) = q.push(&mut out) else {
            panic!("each lane holds one batch");
        };
        let left: Vec<u64> = out
            .iter()
            .map(|(_, i)| match i {
                QueueItem::Batch(d) => d.seq,
                QueueItem::EndOfPass(_) => u64::MAX,
            })
            .collect();
        assert_eq!(left, [2, 3, 4]);
        assert_eq!(seq(q.pop(1, None)), 1);
        assert!(q.pop(1, now_plus(10)).is_none());
        // Lane 1 has room, lane 0 not: batch 3 goes in past 2.
        let Ok(Pushed::Full(_)) = q.push(&mut out) else {
            panic!("lane 0 is still full");
        };
        assert_eq!(out.len(), 2);
        assert_eq!(seq(q.pop(1, None)), 3);
        assert_eq!(seq(q.pop(0, None)), 0);
        let Ok(Pushed::Full(_)) = q.push(&mut out) else {
            panic!("lane 0 takes one");
        };
        assert_eq!(seq(q.pop(0, None)), 2);
        assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
        assert_eq!(seq(q.pop(0, None)), 4);
    }

    #[test]
    fn a_failure_wakes_sleepers_and_waiting_producers() {
        let q = lanes(1, 1, false);
        let mut out = VecDeque::from([(0, batch(0, 0)), (0, batch(0, 1))]);
        let Ok(Pushed::Full(room)) = q.push(&mut out) else {
            panic!("capacity 1");
        };
        assert_eq!(seq(q.pop(0, None)), 0);
        let q2 = q.clone();
        let sleeper = std::thread::spawn(move || q2.pop(0, now_plus(5000)));
        std::thread::sleep(Duration::from_millis(20));
        q.fail(PipelineError::Stopped);
        assert!(matches!(
            sleeper.join().expect("sleeper"),
            Some(Err(PipelineError::Stopped))
        ));
        // The producer's signal fired (room) or was cancelled: either way it
        // learns of the failure on its next push.
        let _ = futures::executor::block_on(room);
        assert!(matches!(q.push(&mut out), Err(PipelineError::Stopped)));
    }

    #[test]
    fn an_actix_pop_is_answered_by_a_push_and_a_gone_one_loses_nothing() {
        let stats = Stats::new(1, 1, 2);
        System::new().block_on(async move {
            let addr = FeedQueue::start_new(1, 2, false, stats.clone(), false);
            let q = stats.feed_lanes().expect("published");
            // A pop parked on the empty lane whose requester goes away.
            let req = Box::pin(addr.send(Pop { consumer: 0 }));
            let delay = futures_timer::Delay::new(Duration::from_millis(30));
            match futures::future::select(req, delay).await {
                futures::future::Either::Left(_) => panic!("nothing to pop yet"),
                futures::future::Either::Right((_, req)) => drop(req),
            }
            let mut out = VecDeque::from([(0, batch(0, 5))]);
            assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
            assert_eq!(seq(q.pop(0, now_plus(1000))), 5);
            // A live one is answered by the next push.
            let req = Box::pin(addr.send(Pop { consumer: 0 }));
            let delay = futures_timer::Delay::new(Duration::from_millis(30));
            let req = match futures::future::select(req, delay).await {
                futures::future::Either::Left(_) => panic!("nothing to pop yet"),
                futures::future::Either::Right((_, req)) => req,
            };
            let mut out = VecDeque::from([(0, batch(0, 6))]);
            assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
            assert_eq!(seq(Some(req.await.expect("answered"))), 6);
            // One sent with do_send takes nothing.
            addr.do_send(Pop { consumer: 0 });
            let mut out = VecDeque::from([(0, batch(0, 7))]);
            assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
            futures_timer::Delay::new(Duration::from_millis(20)).await;
            assert_eq!(seq(q.pop(0, now_plus(1000))), 7);
        });
    }

    #[test]
    fn an_async_pop_is_answered_by_a_push_and_a_given_up_one_loses_nothing() {
        let q = lanes(1, 2, false);
        let PopNow::Later(rx) = q.pop_async(0) else {
            panic!("the lane is empty");
        };
        drop(rx);
        let mut out = VecDeque::from([(0, batch(0, 1))]);
        assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
        let PopNow::Ready(r) = q.pop_async(0) else {
            panic!("the batch was put back");
        };
        assert_eq!(seq(Some(r)), 1);
        let PopNow::Later(mut rx) = q.pop_async(0) else {
            panic!("the lane is empty again");
        };
        let mut out = VecDeque::from([(0, batch(0, 2))]);
        assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
        assert_eq!(seq(rx.try_recv().expect("not cancelled")), 2);
        // Given up after it was answered: the caller gets the batch.
        let PopNow::Later(rx) = q.pop_async(0) else {
            panic!("the lane is empty again");
        };
        let mut out = VecDeque::from([(0, batch(0, 3))]);
        assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
        assert_eq!(seq(FeedLanes::cancel(rx)), 3);
        // Given up before: nothing, and nothing is lost.
        let PopNow::Later(rx) = q.pop_async(0) else {
            panic!("the lane is empty again");
        };
        assert!(FeedLanes::cancel(rx).is_none());
        let mut out = VecDeque::from([(0, batch(0, 4))]);
        assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
        assert_eq!(seq(q.pop(0, now_plus(0))), 4);
    }

    /// Producer and consumers of every kind at random speeds, consumers
    /// that give up (time-outs, cancelled async pops): every batch of every
    /// pass reaches exactly one consumer once, each consumer gets each
    /// pass's marker once and in order, and nothing hangs.
    #[test]
    fn random_stress_exactly_once_and_no_hang() {
        use rand::{Rng, SeedableRng};
        const PASSES: u64 = 3;
        const BATCHES: u64 = 60;
        for seed in 0..24u64 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let consumers = rng.gen_range(1..=3usize);
            let round_robin = rng.gen_bool(0.5);
            let capacity = rng.gen_range(1..=5usize);
            let flush = rng.gen_range(1..=6usize);
            let q = lanes(consumers, capacity, round_robin);
            let n_lanes = if round_robin { consumers } else { 1 };
            let producer = {
                let q = q.clone();
                std::thread::spawn(move || {
                    let mut out = VecDeque::new();
                    let drain = |out: &mut VecDeque<(usize, QueueItem)>| {
                        while !out.is_empty() {
                            match q.push(out).expect("not failed") {
                                Pushed::All => {}
                                Pushed::Full(room) => {
                                    let _ = futures::executor::block_on(room);
                                }
                            }
                        }
                    };
                    for pass in 0..PASSES {
                        for k in 0..BATCHES {
                            out.push_back(((k as usize) % n_lanes, batch(pass, k)));
                            if out.len() >= flush {
                                drain(&mut out);
                            }
                        }
                        for lane in 0..n_lanes {
                            out.push_back((lane, QueueItem::EndOfPass(pass)));
                        }
                        drain(&mut out);
                    }
                    q.close();
                })
            };
            let handles: Vec<_> = (0..consumers)
                .map(|c| {
                    let q = q.clone();
                    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed * 100 + c as u64);
                    std::thread::spawn(move || {
                        let mut got = Vec::new();
                        let mut markers = Vec::new();
                        loop {
                            let r = match rng.gen_range(0..3) {
                                0 => q.pop(c, None),
                                1 => q.pop(c, now_plus(rng.gen_range(0..3))),
                                _ => match q.pop_async(c) {
                                    PopNow::Ready(r) => Some(r),
                                    PopNow::Later(rx) if rng.gen_bool(0.3) => {
                                        if rng.gen_bool(0.2) {
                                            std::thread::yield_now();
                                        }
                                        FeedLanes::cancel(rx)
                                    }
                                    PopNow::Later(rx) => futures::executor::block_on(rx).ok(),
                                },
                            };
                            match r {
                                None => {}
                                Some(Ok(Popped::Batch(d))) => got.push((d.pass, d.seq)),
                                Some(Ok(Popped::EndOfPass(p))) => markers.push(p),
                                Some(Ok(Popped::EndOfData)) => return (got, markers),
                                Some(Err(e)) => panic!("{e}"),
                            }
                            if rng.gen_bool(0.1) {
                                std::thread::sleep(Duration::from_micros(200));
                            }
                        }
                    })
                })
                .collect();
            let deadline = Instant::now() + Duration::from_secs(30);
            while !(producer.is_finished() && handles.iter().all(|h| h.is_finished())) {
                assert!(
                    Instant::now() < deadline,
                    "seed {seed}: hung ({consumers} consumers, round robin {round_robin}, capacity {capacity}, flush {flush})"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            producer.join().expect("producer");
            let mut all = Vec::new();
            for (c, h) in handles.into_iter().enumerate() {
                let (got, markers) = h.join().expect("consumer");
                assert_eq!(
                    markers,
                    (0..PASSES).collect::<Vec<_>>(),
                    "seed {seed} consumer {c}"
                );
                // A consumer's batches come pass by pass.
                assert!(got.windows(2).all(|w| w[0].0 <= w[1].0), "seed {seed}");
                if round_robin {
                    assert!(got.iter().all(|&(_, k)| k as usize % consumers == c));
                }
                all.extend(got);
            }
            all.sort_unstable();
            let want: Vec<_> = (0..PASSES)
                .flat_map(|p| (0..BATCHES).map(move |k| (p, k)))
                .collect();
            assert_eq!(all, want, "seed {seed}: every batch exactly once");
        }
    }
}
