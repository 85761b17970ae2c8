//! The feed queue: the bounded queue between a loader and its devices
//! (Paddle's `PyArrayFeedQueue` / `double_buffer_reader`), as lanes that
//! a producer pushes into and consumers take from directly.
//!
//! A [`FeedQueue`] is one mutex-guarded state with a condition variable per
//! lane; cloning it gives another handle to the same queue. A batch moves
//! from producer to consumer with one lock each and, only when the other
//! side sleeps, one wake-up — no message and no thread in between (in the
//! actor pipeline a message per batch cost about 4 hops and 2 thread sleeps).
//!
//! - **Lanes.** [`FeedMode`] decides them, in one place ([`Lanes`]): in shared
//!   mode one lane that every consumer takes from as it is ready; in
//!   round-robin mode lane `d` belongs to device `d`, and batch `k` of a pass
//!   goes to lane `k mod D`.
//! - **Bounded.** A lane holds at most `capacity` items (and a batch a
//!   consumer handed back). A [`push`](FeedQueue::push) that finds a lane
//!   full leaves those items with the producer and hands it a [`Room`]
//!   signal, given once that lane is half empty: the producer then pushes
//!   several items per wake-up, and a slow consumer still has half a lane
//!   in hand while it comes.
//! - **End-of-pass markers per consumer.** A producer pushes one
//!   [`Item::EndOfPass`] per lane; each consumer gets
//!   [`Popped::EndOfPass`] once, after the last batch of that pass has left
//!   its lane and before any batch of the next it takes.
//! - **Nothing lost, nothing twice.** A batch is taken out of a lane only in
//!   the same critical section that hands it to its consumer: returned to a
//!   plain thread ([`pop`](FeedQueue::pop)), or sent on a parked pop's
//!   [`Reply`] — put back at the front if that consumer has gone.
//! - **Three kinds of consumer.** A plain thread sleeps on its lane's
//!   condition variable ([`pop`](FeedQueue::pop), with an optional
//!   deadline); an asynchronous one gets a future
//!   ([`pop_async`](FeedQueue::pop_async)); an embedder (the actor crate's
//!   `Pop` message) parks a [`Reply`] of its own
//!   ([`pop_or_park`](FeedQueue::pop_or_park)).
//! - **The end.** [`close`](FeedQueue::close): consumers get
//!   [`Popped::EndOfData`] once their lane is drained. [`fail`](FeedQueue::fail):
//!   every consumer gets the error (the first failure wins), parked pops are
//!   answered with it, and waiting producers' [`Room`]s are cancelled.
//!
//! The queue's depth is sampled at every push and pop into a [`DepthGauge`]
//! that statistics can hold without holding the queue.
//!
//! ```
//! use std::collections::VecDeque;
//! use feedline::feed_queue::{FeedMode, FeedQueue, Item, Popped, Pushed};
//!
//! // Two devices fed round-robin, three items per lane.
//! let lanes = FeedMode::RoundRobin.lanes(2);
//! let q: FeedQueue<&str, String> = FeedQueue::new(lanes, 3).unwrap();
//! let mut out: VecDeque<_> = ["b0", "b1", "b2"]
//!     .into_iter()
//!     .enumerate()
//!     .map(|(k, b)| (lanes.of_batch(k as u64), Item::Batch(b)))
//!     .collect();
//! out.extend((0..lanes.count()).map(|lane| (lane, Item::EndOfPass(0))));
//! assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
//! q.close();
//! let take = |device| std::iter::from_fn(|| match q.pop(device, None) {
//!     Some(Ok(Popped::EndOfData)) | None => None,
//!     other => Some(other),
//! }).count();
//! assert_eq!(take(1), 2); // b1 and the end of pass 0
//! assert_eq!(take(0), 3); // b0, b2 and the end of pass 0
//! ```

mod oneshot;

pub use oneshot::{channel, Canceled, Receiver, Sender};

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};

/// How batches reach the devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeedMode {
    /// One lane; each device takes the next batch when it is ready
    /// (devices of different speeds take different numbers of batches).
    Shared,
    /// Batch `k` of a pass goes to device `k mod D` (Paddle's ordered
    /// multi-device feeding): reproducible per device.
    RoundRobin,
}

impl FeedMode {
    /// The lanes of this mode for `devices` devices.
    pub fn lanes(self, devices: usize) -> Lanes {
        Lanes {
            mode: self,
            count: match self {
                FeedMode::Shared => 1,
                FeedMode::RoundRobin => devices.max(1),
            },
        }
    }
}

/// The lanes of a feed queue: how many, which lane a batch goes to, and
/// which lane a consumer takes from — the one place that decides them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lanes {
    mode: FeedMode,
    count: usize,
}

impl Lanes {
    /// How many lanes.
    pub fn count(self) -> usize {
        self.count
    }

    /// The feed mode.
    pub fn mode(self) -> FeedMode {
        self.mode
    }

    /// The lane of batch `seq` of a pass (round-robin: `seq mod D`; shared: 0).
    /// In round-robin mode lane `d` is consumer `d`'s.
    pub fn of_batch(self, seq: u64) -> usize {
        (seq % self.count as u64) as usize
    }

    /// The lane consumer `consumer` takes from (round-robin: its own; shared: 0).
    pub fn of_consumer(self, consumer: usize) -> usize {
        consumer % self.count
    }
}

/// What a producer pushes into a lane.
#[derive(Clone, Debug, PartialEq)]
pub enum Item<B> {
    /// A batch.
    Batch(B),
    /// The end of a pass (one per lane).
    EndOfPass(u64),
}

/// What a consumer gets.
#[derive(Clone, Debug, PartialEq)]
pub enum Popped<B> {
    /// A batch.
    Batch(B),
    /// Every batch of this pass that this consumer will get has been given.
    EndOfPass(u64),
    /// No more data: the queue is closed and this consumer's lane drained.
    EndOfData,
}

/// An answer to a pop: what was taken, or the queue's failure.
pub type Answer<B, E> = std::result::Result<Popped<B>, E>;

/// Where a parked pop's answer goes. `send` hands the answer back when the
/// consumer has gone, so that the queue puts a batch back instead of losing
/// it. The queue calls it with its lock held: it must not block.
pub trait Reply<B, E>: Send {
    /// Deliver the answer, or hand it back.
    fn send(self: Box<Self>, answer: Answer<B, E>) -> std::result::Result<(), Answer<B, E>>;
}

impl<B: Send, E: Send> Reply<B, E> for Sender<Answer<B, E>> {
    fn send(self: Box<Self>, answer: Answer<B, E>) -> std::result::Result<(), Answer<B, E>> {
        Sender::send(*self, answer)
    }
}

/// A producer's signal that a full lane has room: resolves once the lane is
/// half empty, or is cancelled (`Err`) when the queue fails.
pub type Room = Receiver<()>;

/// What a push left to do.
#[derive(Debug)]
pub enum Pushed {
    /// Every item is in.
    All,
    /// Some lanes are full: the items left in `out` wait for the [`Room`]
    /// of the lane of the first of them; push them again then.
    Full(Room),
    /// The queue was closed: nothing more goes in (the items stay in `out`).
    Closed,
}

/// What an asynchronous pop got.
pub enum PopNow<B, E> {
    /// Taken now.
    Ready(Answer<B, E>),
    /// Parked: answered by the push that brings an item (cancelled if the
    /// queue goes). A receiver dropped before the answer loses nothing (the
    /// push puts the item back); to give up and keep what was already sent,
    /// [`cancel`](Receiver::cancel) it.
    Later(Receiver<Answer<B, E>>),
}

/// The feed queue's depth, sampled at every push and pop.
#[derive(Debug, Default)]
pub struct DepthGauge {
    now: AtomicU64,
    sum: AtomicU64,
    samples: AtomicU64,
    capacity: AtomicU64,
}

impl DepthGauge {
    fn sample(&self, depth: usize) {
        self.now.store(depth as u64, Relaxed);
        self.sum.fetch_add(depth as u64, Relaxed);
        self.samples.fetch_add(1, Relaxed);
    }

    /// Items in the queue now (all lanes).
    pub fn now(&self) -> u64 {
        self.now.load(Relaxed)
    }

    /// The mean of the samples so far (0 before the first).
    pub fn mean(&self) -> f64 {
        match self.samples.load(Relaxed) {
            0 => 0.0,
            n => self.sum.load(Relaxed) as f64 / n as f64,
        }
    }

    /// The capacity of a lane.
    pub fn capacity(&self) -> u64 {
        self.capacity.load(Relaxed)
    }
}

struct Lane<B, E> {
    items: VecDeque<Item<B>>,
    /// Pops parked for an item, by consumer; there are some only while
    /// `items` is empty.
    pops: VecDeque<(usize, Box<dyn Reply<B, E>>)>,
    /// End-of-pass markers that left the head of this lane.
    ends: u64,
    /// Plain-thread consumers asleep on this lane's condition variable.
    sleepers: usize,
    /// Producers waiting for room in this lane.
    room: Vec<Sender<()>>,
}

struct State<B, E> {
    lanes: Vec<Lane<B, E>>,
    map: Lanes,
    capacity: usize,
    /// Per consumer: end-of-pass markers it has been given.
    seen_ends: Vec<u64>,
    closed: bool,
    failed: Option<E>,
}

struct Inner<B, E> {
    state: Mutex<State<B, E>>,
    /// One per lane: plain-thread consumers sleep here while it is empty.
    ready: Vec<Condvar>,
    gauge: Arc<DepthGauge>,
}

/// The bounded feed queue; see the [module docs](self). `B` is a batch,
/// `E` the error every consumer gets when the queue fails.
pub struct FeedQueue<B, E> {
    inner: Arc<Inner<B, E>>,
}

impl<B, E> Clone for FeedQueue<B, E> {
    fn clone(&self) -> Self {
        FeedQueue {
            inner: self.inner.clone(),
        }
    }
}

impl<B, E> std::fmt::Debug for FeedQueue<B, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.inner.state.lock();
        f.debug_struct("FeedQueue")
            .field("lanes", &st.map)
            .field("capacity", &st.capacity)
            .field("depth", &st.depth())
            .field("closed", &st.closed)
            .field("failed", &st.failed.is_some())
            .finish()
    }
}

impl<B, E> State<B, E> {
    fn depth(&self) -> usize {
        self.lanes.iter().map(|l| l.items.len()).sum()
    }
}

impl<B, E: Clone> State<B, E> {
    /// What consumer `c` gets now, if anything. Takes it out of the lane.
    fn take(&mut self, c: usize) -> Option<Answer<B, E>> {
        if let Some(e) = &self.failed {
            return Some(Err(e.clone()));
        }
        if c >= self.seen_ends.len() {
            self.seen_ends.resize(c + 1, 0);
        }
        let lane = &mut self.lanes[self.map.of_consumer(c)];
        if self.seen_ends[c] < lane.ends {
            let p = self.seen_ends[c];
            self.seen_ends[c] += 1;
            return Some(Ok(Popped::EndOfPass(p)));
        }
        match lane.items.pop_front() {
            Some(Item::EndOfPass(p)) => {
                lane.ends += 1;
                self.seen_ends[c] += 1;
                Some(Ok(Popped::EndOfPass(p)))
            }
            Some(Item::Batch(b)) => Some(Ok(Popped::Batch(b))),
            None if self.closed => Some(Ok(Popped::EndOfData)),
            None => None,
        }
    }

    /// An item left lane `li`: wake its waiting producers once it is half
    /// empty, its other consumers if a marker left (they have one to take now).
    fn took(&mut self, li: usize, r: &Answer<B, E>, ready: &[Condvar]) {
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

    /// Answer the pops parked on lane `li` that can have something now, in
    /// the order they came (one that cannot means the lane is empty: those
    /// after it can only have a marker, or the end of data).
    fn answer_parked(&mut self, li: usize, ready: &[Condvar]) {
        let mut i = 0;
        while i < self.lanes[li].pops.len() {
            let c = self.lanes[li].pops[i].0;
            let Some(r) = self.take(c) else {
                i += 1;
                continue;
            };
            let (_, reply) = self.lanes[li].pops.remove(i).expect("index exists");
            self.took(li, &r, ready);
            match reply.send(r) {
                // The consumer went away: put the batch back so nothing is
                // lost; a marker stays due to it.
                Err(Ok(Popped::Batch(b))) => self.lanes[li].items.push_front(Item::Batch(b)),
                Err(Ok(Popped::EndOfPass(_))) => self.seen_ends[c] -= 1,
                _ => {}
            }
        }
    }

    /// A consumer took answer `r` off lane `li` by itself: if it was a
    /// marker, the pops parked there have one to take now too.
    fn after_marker(&mut self, li: usize, r: &Answer<B, E>, ready: &[Condvar]) {
        if matches!(r, Ok(Popped::EndOfPass(_))) && !self.lanes[li].pops.is_empty() {
            self.answer_parked(li, ready);
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

impl<B: Send + 'static, E: Clone + Send + 'static> FeedQueue<B, E> {
    /// A queue with these lanes, each holding at most `capacity` items; an
    /// error for a capacity of 0.
    pub fn new(lanes: Lanes, capacity: usize) -> Result<Self> {
        if capacity == 0 {
            return Err(Error::Config(
                "feed queue capacity must be at least 1".into(),
            ));
        }
        let n = lanes.count();
        let gauge = DepthGauge::default();
        gauge.capacity.store(capacity as u64, Relaxed);
        Ok(FeedQueue {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    lanes: (0..n)
                        .map(|_| Lane {
                            items: VecDeque::new(),
                            pops: VecDeque::new(),
                            ends: 0,
                            sleepers: 0,
                            room: Vec::new(),
                        })
                        .collect(),
                    map: lanes,
                    capacity,
                    seen_ends: Vec::new(),
                    closed: false,
                    failed: None,
                }),
                ready: (0..n).map(|_| Condvar::new()).collect(),
                gauge: Arc::new(gauge),
            }),
        })
    }

    /// The lanes.
    pub fn lanes(&self) -> Lanes {
        self.inner.state.lock().map
    }

    /// The capacity of a lane.
    pub fn capacity(&self) -> usize {
        self.inner.state.lock().capacity
    }

    /// Items queued now (all lanes).
    pub fn depth(&self) -> usize {
        self.inner.state.lock().depth()
    }

    /// The depth gauge, to read without holding the queue.
    pub fn gauge(&self) -> Arc<DepthGauge> {
        self.inner.gauge.clone()
    }

    /// Push the items of `out` — `(lane, item)`, the lane from
    /// [`Lanes::of_batch`] — each lane's in order, while their lanes have
    /// room; the items of a full lane (and those after them for the same
    /// lane) stay in `out`, the other lanes' go in. `Err` once the queue failed.
    pub fn push(&self, out: &mut VecDeque<(usize, Item<B>)>) -> std::result::Result<Pushed, E> {
        let inner = &*self.inner;
        let mut st = inner.state.lock();
        if let Some(e) = &st.failed {
            return Err(e.clone());
        }
        if st.closed {
            return Ok(Pushed::Closed);
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
                inner.gauge.sample(depth);
            }
            *out = kept;
            for li in (0..n).filter(|&li| touched[li]) {
                st.answer_parked(li, &inner.ready);
                st.wake_sleepers(li, &inner.ready);
            }
            let Some(li) = first_blocked else {
                return Ok(Pushed::All);
            };
            // Parked pops may just have made room: then push on now, since
            // nobody else will signal it.
            if (0..n).any(|l| blocked[l] && st.lanes[l].items.len() < st.capacity) {
                continue;
            }
            let (tx, rx) = channel();
            st.lanes[li].room.push(tx);
            return Ok(Pushed::Full(rx));
        }
    }

    /// No more items will be pushed: consumers get [`Popped::EndOfData`]
    /// once their lane is drained. Idempotent.
    pub fn close(&self) {
        let inner = &*self.inner;
        let mut st = inner.state.lock();
        st.closed = true;
        for li in 0..st.lanes.len() {
            st.answer_parked(li, &inner.ready);
            st.wake_sleepers(li, &inner.ready);
        }
    }

    /// Fail the queue: every consumer gets `e` (the first failure wins),
    /// waiting producers' [`Room`]s are cancelled and later pushes refused.
    pub fn fail(&self, e: E) {
        let inner = &*self.inner;
        let mut st = inner.state.lock();
        if st.failed.is_none() {
            st.failed = Some(e);
        }
        for li in 0..st.lanes.len() {
            st.answer_parked(li, &inner.ready);
            // Dropping the senders cancels the producers' waits.
            st.lanes[li].room.clear();
            st.wake_sleepers(li, &inner.ready);
        }
    }

    /// Plain-thread consumers asleep in [`pop`](Self::pop) now (counted
    /// under the queue's lock, right before they wait): tests wait for this
    /// event instead of sleeping for a while.
    #[doc(hidden)]
    pub fn sleepers(&self) -> usize {
        let st = self.inner.state.lock();
        st.lanes.iter().map(|l| l.sleepers).sum()
    }

    /// The failure, if the queue failed.
    pub fn failure(&self) -> Option<E> {
        self.inner.state.lock().failed.clone()
    }

    /// The next item for plain-thread consumer `consumer`, sleeping until
    /// there is one or until `deadline` (`None` then).
    pub fn pop(&self, consumer: usize, deadline: Option<Instant>) -> Option<Answer<B, E>> {
        let inner = &*self.inner;
        let mut st = inner.state.lock();
        let li = st.map.of_consumer(consumer);
        loop {
            // (Pops parked on this lane mean that it is empty.)
            if let Some(r) = st.take(consumer) {
                st.took(li, &r, &inner.ready);
                st.after_marker(li, &r, &inner.ready);
                inner.gauge.sample(st.depth());
                return Some(r);
            }
            st.lanes[li].sleepers += 1;
            let timed_out = match deadline {
                None => {
                    inner.ready[li].wait(&mut st);
                    false
                }
                Some(d) => inner.ready[li].wait_until(&mut st, d).timed_out(),
            };
            st.lanes[li].sleepers -= 1;
            if timed_out {
                let r = st.take(consumer);
                if let Some(r) = &r {
                    st.took(li, r, &inner.ready);
                    st.after_marker(li, r, &inner.ready);
                }
                return r;
            }
        }
    }

    /// An asynchronous consumer's pop: the item now if there is one, else a
    /// future it will come on.
    pub fn pop_async(&self, consumer: usize) -> PopNow<B, E> {
        let inner = &*self.inner;
        let mut st = inner.state.lock();
        let li = st.map.of_consumer(consumer);
        if let Some(r) = st.take(consumer) {
            st.took(li, &r, &inner.ready);
            st.after_marker(li, &r, &inner.ready);
            inner.gauge.sample(st.depth());
            return PopNow::Ready(r);
        }
        let (tx, rx) = channel();
        st.lanes[li].pops.push_back((consumer, Box::new(tx)));
        PopNow::Later(rx)
    }

    /// A pop answered through `reply` — now if there is an item, else by the
    /// push that brings one (or by the close or failure of the queue). The
    /// item is taken only as `reply` delivers it, so a reply that finds its
    /// consumer gone leaves the item in the queue.
    pub fn pop_or_park(&self, consumer: usize, reply: Box<dyn Reply<B, E>>) {
        let inner = &*self.inner;
        let mut st = inner.state.lock();
        let li = st.map.of_consumer(consumer);
        st.lanes[li].pops.push_back((consumer, reply));
        st.answer_parked(li, &inner.ready);
        st.wake_sleepers(li, &inner.ready);
        inner.gauge.sample(st.depth());
    }
}
