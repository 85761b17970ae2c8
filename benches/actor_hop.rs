//! The cost of one actor hop with chunks: a producer actor on its own
//! `Arbiter` (as a `PrefetchReader` is) sends `Arc<Chunk>` messages with
//! `do_send` to a consumer actor on another `Arbiter` (as `ShuffleBatch`
//! is), which acknowledges each one; the producer keeps at most
//! `IN_FLIGHT` unacknowledged (the pipeline's backpressure). Compared with
//! the same hand-over through a `crossbeam_channel::bounded(IN_FLIGHT)`.
//!
//! Chunks hold rows of the small preset (64 f32 + 1 i64, 264 B payload) so
//! the figure per element is the hop's overhead per instance at that chunk
//! size; the chunk is built once and shared, so only the hop is measured.
//!
//! A second group, `batch_handoff`, is the shuffle-batch → feed queue →
//! consumer hand-off, modelled with `u64` items standing for batches: a
//! producer actor on its own `Arbiter` emits them in flushes of
//! `PER_FLUSH` (a chunk's batches) into a queue of `CAPACITY`, and a plain
//! thread takes them one by one (the `Loader`'s iterator):
//! - `queue_actor`: as the pipeline did before: one `Push` per item to a
//!   queue actor (on a third arbiter), answered when the item is in, the
//!   flush's replies awaited together; the consumer keeps two `PopTo`
//!   requests (`do_send` + a oneshot reply) in flight;
//! - `shared_lane`: as it does now: the producer pushes a flush into a
//!   mutex-guarded lane in one critical section (waiting on a oneshot only
//!   when it is full), the consumer pops under the same mutex and sleeps on
//!   a condition variable only when the lane is empty.
//!
//! `CARGO_TARGET_DIR=… cargo bench -p feedline --bench actor_hop`

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use feedline::{Chunk, Instance, Origin, SourceId, Values};
use futures::channel::oneshot;

/// Unacknowledged chunks a producer may have (the pipeline's default).
const IN_FLIGHT: usize = 2;

fn small_chunk(rows: usize) -> Arc<Chunk> {
    let schema = feedline::synthetic::preset_schema(feedline::synthetic::Preset::Small);
    let mut chunk = Chunk::with_capacity(&schema, rows);
    let src = SourceId::intern("actor_hop");
    for i in 0..rows {
        let x: Vec<f32> = (0..64).map(|k| (i * 64 + k) as f32).collect();
        let inst = Instance::new(
            &schema,
            vec![Values::F32(x), Values::I64(vec![i as i64])],
            Origin::new(src, i as u64),
        )
        .expect("instance of the preset schema");
        chunk.push_instance(&inst);
    }
    Arc::new(chunk)
}

#[derive(Message)]
#[rtype(result = "()")]
struct ChunkMsg {
    chunk: Arc<Chunk>,
    ack: Recipient<Ack>,
}

#[derive(Message)]
#[rtype(result = "()")]
struct Ack;

#[derive(Message)]
#[rtype(result = "()")]
struct Next;

/// Counts rows and acknowledges every chunk; reports when it has seen all.
struct Consumer {
    rows: u64,
    want: u64,
    done: Option<oneshot::Sender<u64>>,
}

impl Actor for Consumer {
    type Context = Context<Self>;
}

impl Handler<ChunkMsg> for Consumer {
    type Result = ();
    fn handle(&mut self, m: ChunkMsg, _: &mut Context<Self>) {
        m.ack.do_send(Ack);
        self.rows += m.chunk.len() as u64;
        if self.rows >= self.want {
            if let Some(tx) = self.done.take() {
                let _ = tx.send(self.rows);
            }
        }
    }
}

/// Sends `left` chunks, at most `IN_FLIGHT` unacknowledged, driving itself
/// with `Next` as the reader does.
struct Producer {
    chunk: Arc<Chunk>,
    to: Addr<Consumer>,
    left: u64,
    in_flight: usize,
}

impl Actor for Producer {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.notify(Next);
    }
}

impl Handler<Next> for Producer {
    type Result = ();
    fn handle(&mut self, _: Next, ctx: &mut Context<Self>) {
        if self.left == 0 || self.in_flight >= IN_FLIGHT {
            return;
        }
        self.left -= 1;
        self.in_flight += 1;
        self.to.do_send(ChunkMsg {
            chunk: self.chunk.clone(),
            ack: ctx.address().recipient(),
        });
        ctx.notify(Next);
    }
}

impl Handler<Ack> for Producer {
    type Result = ();
    fn handle(&mut self, _: Ack, ctx: &mut Context<Self>) {
        self.in_flight -= 1;
        ctx.notify(Next);
    }
}

/// Move `chunks` chunks from a producer arbiter to a consumer arbiter.
fn actix_hop(chunk: &Arc<Chunk>, chunks: u64) -> Duration {
    let chunk = chunk.clone();
    let want = chunks * chunk.len() as u64;
    let sys = System::new();
    let elapsed = sys.block_on(async move {
        let consumer_arbiter = Arbiter::new();
        let producer_arbiter = Arbiter::new();
        let (tx, rx) = oneshot::channel();
        let t0 = Instant::now();
        let to = Consumer::start_in_arbiter(&consumer_arbiter.handle(), move |_| Consumer {
            rows: 0,
            want,
            done: Some(tx),
        });
        let consumer = to.clone();
        // Hold both addresses until the end: an actor without one stops.
        let producer = Producer::start_in_arbiter(&producer_arbiter.handle(), move |_| Producer {
            chunk,
            to,
            left: chunks,
            in_flight: 0,
        });
        let rows = rx.await.expect("the consumer reports");
        let dt = t0.elapsed();
        drop((producer, consumer));
        assert_eq!(rows, want);
        consumer_arbiter.stop();
        producer_arbiter.stop();
        let _ = consumer_arbiter.join();
        let _ = producer_arbiter.join();
        dt
    });
    drop(sys);
    elapsed
}

/// The same hand-over through a bounded crossbeam channel between two threads.
fn channel_hop(chunk: &Arc<Chunk>, chunks: u64) -> Duration {
    let (tx, rx) = crossbeam_channel::bounded::<Arc<Chunk>>(IN_FLIGHT);
    let t0 = Instant::now();
    let c = chunk.clone();
    let producer = std::thread::spawn(move || {
        for _ in 0..chunks {
            tx.send(c.clone()).expect("consumer alive");
        }
    });
    let consumer = std::thread::spawn(move || rx.iter().map(|c| c.len() as u64).sum::<u64>());
    producer.join().expect("producer");
    let rows = consumer.join().expect("consumer");
    assert_eq!(rows, chunks * chunk.len() as u64);
    t0.elapsed()
}

/// Items per flush (the small preset: a 1,024-row chunk makes 4 batches of 256).
const PER_FLUSH: usize = 4;
/// Feed-queue capacity (the pipeline's default).
const CAPACITY: usize = 4;

mod queue_actor {
    //! The hand-off through a queue actor with `Push`/`PopTo` messages.
    use super::*;
    use std::collections::VecDeque;

    #[derive(Message)]
    #[rtype(result = "()")]
    pub struct Push(pub u64, pub oneshot::Sender<()>);

    #[derive(Message)]
    #[rtype(result = "()")]
    pub struct PopTo(pub oneshot::Sender<Option<u64>>);

    /// Bounded queue: a push is answered when the item is in, a pop when
    /// there is one (or `None` once closed and empty).
    pub struct Queue {
        items: VecDeque<u64>,
        pushes: VecDeque<(u64, oneshot::Sender<()>)>,
        pops: VecDeque<oneshot::Sender<Option<u64>>>,
        left: u64,
    }

    impl Queue {
        pub fn new(total: u64) -> Self {
            Queue {
                items: VecDeque::new(),
                pushes: VecDeque::new(),
                pops: VecDeque::new(),
                left: total,
            }
        }

        fn settle(&mut self) {
            loop {
                let mut progressed = false;
                while self.items.len() < CAPACITY {
                    let Some((x, tx)) = self.pushes.pop_front() else {
                        break;
                    };
                    self.items.push_back(x);
                    let _ = tx.send(());
                    progressed = true;
                }
                while !self.pops.is_empty() {
                    let item = match self.items.pop_front() {
                        Some(x) => Some(x),
                        None if self.left == 0 => None,
                        None => break,
                    };
                    if item.is_some() {
                        self.left -= 1;
                    }
                    let _ = self.pops.pop_front().expect("checked").send(item);
                    progressed = true;
                }
                if !progressed {
                    break;
                }
            }
        }
    }

    impl Actor for Queue {
        type Context = Context<Self>;
        fn started(&mut self, ctx: &mut Context<Self>) {
            ctx.set_mailbox_capacity(4096);
        }
    }

    impl Handler<Push> for Queue {
        type Result = ();
        fn handle(&mut self, m: Push, _: &mut Context<Self>) {
            self.pushes.push_back((m.0, m.1));
            self.settle();
        }
    }

    impl Handler<PopTo> for Queue {
        type Result = ();
        fn handle(&mut self, m: PopTo, _: &mut Context<Self>) {
            self.pops.push_back(m.0);
            self.settle();
        }
    }

    #[derive(Message)]
    #[rtype(result = "()")]
    pub struct Flush;

    /// Emits `left` items, a flush at a time, awaiting each flush's replies.
    pub struct Producer {
        pub queue: Addr<Queue>,
        pub next: u64,
        pub total: u64,
    }

    impl Actor for Producer {
        type Context = Context<Self>;
        fn started(&mut self, ctx: &mut Context<Self>) {
            ctx.notify(Flush);
        }
    }

    impl Handler<Flush> for Producer {
        type Result = ();
        fn handle(&mut self, _: Flush, ctx: &mut Context<Self>) {
            let end = (self.next + PER_FLUSH as u64).min(self.total);
            let replies: Vec<_> = (self.next..end)
                .map(|x| {
                    let (tx, rx) = oneshot::channel();
                    self.queue.do_send(Push(x, tx));
                    rx
                })
                .collect();
            self.next = end;
            ctx.wait(
                futures::future::join_all(replies)
                    .into_actor(self)
                    .map(|_, act, ctx| {
                        if act.next < act.total {
                            ctx.notify(Flush);
                        }
                    }),
            );
        }
    }
}

mod shared_lane {
    //! The hand-off through a mutex-guarded lane shared by both sides.
    use super::*;
    use parking_lot::{Condvar, Mutex};
    use std::collections::VecDeque;

    #[derive(Default)]
    struct State {
        items: VecDeque<u64>,
        sleeping: bool,
        room: Option<oneshot::Sender<()>>,
        closed: bool,
    }

    #[derive(Default)]
    pub struct Lane {
        state: Mutex<State>,
        ready: Condvar,
    }

    impl Lane {
        /// Push from the front of `out` while there is room; `Some` when full.
        pub fn push(&self, out: &mut VecDeque<u64>) -> Option<oneshot::Receiver<()>> {
            let mut st = self.state.lock();
            while st.items.len() < CAPACITY {
                let Some(x) = out.pop_front() else { break };
                st.items.push_back(x);
            }
            if st.sleeping && !st.items.is_empty() {
                self.ready.notify_one();
            }
            if out.is_empty() {
                return None;
            }
            let (tx, rx) = oneshot::channel();
            st.room = Some(tx);
            Some(rx)
        }

        pub fn close(&self) {
            self.state.lock().closed = true;
            self.ready.notify_all();
        }

        pub fn pop(&self) -> Option<u64> {
            let mut st = self.state.lock();
            loop {
                if let Some(x) = st.items.pop_front() {
                    if st.items.len() <= CAPACITY / 2 {
                        if let Some(tx) = st.room.take() {
                            let _ = tx.send(());
                        }
                    }
                    return Some(x);
                }
                if st.closed {
                    return None;
                }
                st.sleeping = true;
                self.ready.wait(&mut st);
                st.sleeping = false;
            }
        }
    }

    #[derive(Message)]
    #[rtype(result = "()")]
    pub struct Flush;

    /// Emits `total` items, a flush at a time, straight into the lane.
    pub struct Producer {
        pub lane: Arc<Lane>,
        pub out: VecDeque<u64>,
        pub next: u64,
        pub total: u64,
    }

    impl Producer {
        fn push(&mut self, ctx: &mut Context<Self>) {
            match self.lane.push(&mut self.out) {
                Some(room) => ctx.wait(room.into_actor(self).map(|_, act, ctx| act.push(ctx))),
                None if self.next < self.total => ctx.notify(Flush),
                None => self.lane.close(),
            }
        }
    }

    impl Actor for Producer {
        type Context = Context<Self>;
        fn started(&mut self, ctx: &mut Context<Self>) {
            ctx.notify(Flush);
        }
    }

    impl Handler<Flush> for Producer {
        type Result = ();
        fn handle(&mut self, _: Flush, ctx: &mut Context<Self>) {
            let end = (self.next + PER_FLUSH as u64).min(self.total);
            self.out.extend(self.next..end);
            self.next = end;
            self.push(ctx);
        }
    }
}

/// `total` items through a queue actor (producer and queue on arbiters of
/// their own, the consumer on a plain thread with two requests in flight).
fn queue_actor_handoff(total: u64) -> Duration {
    let (tx, rx) = std::sync::mpsc::channel();
    let system = std::thread::spawn(move || {
        let sys = System::new();
        sys.block_on(async move {
            let queue_arbiter = Arbiter::new();
            let producer_arbiter = Arbiter::new();
            let queue = queue_actor::Queue::start_in_arbiter(&queue_arbiter.handle(), move |_| {
                queue_actor::Queue::new(total)
            });
            let _ = tx.send((queue.clone(), System::current()));
            let q = queue.clone();
            let producer =
                queue_actor::Producer::start_in_arbiter(&producer_arbiter.handle(), move |_| {
                    queue_actor::Producer {
                        queue: q,
                        next: 0,
                        total,
                    }
                });
            (queue_arbiter, producer_arbiter, queue, producer)
        });
        sys.run().expect("system runs");
    });
    let (queue, sys) = rx.recv().expect("started");
    let t0 = Instant::now();
    let mut pending = std::collections::VecDeque::new();
    let mut sum = 0u64;
    loop {
        while pending.len() < 2 {
            let (tx, rx) = oneshot::channel();
            queue.do_send(queue_actor::PopTo(tx));
            pending.push_back(rx);
        }
        let head = pending.pop_front().expect("a request");
        match futures::executor::block_on(head).expect("answered") {
            Some(x) => sum += x,
            None => break,
        }
    }
    let dt = t0.elapsed();
    assert_eq!(sum, total * (total - 1) / 2);
    drop(pending);
    sys.stop();
    system.join().expect("system thread");
    dt
}

/// `total` items through a shared lane (producer on an arbiter, consumer on a
/// plain thread).
fn shared_lane_handoff(total: u64) -> Duration {
    let lane = Arc::new(shared_lane::Lane::default());
    let l = lane.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let system = std::thread::spawn(move || {
        let sys = System::new();
        sys.block_on(async move {
            let arbiter = Arbiter::new();
            let producer = shared_lane::Producer::start_in_arbiter(&arbiter.handle(), move |_| {
                shared_lane::Producer {
                    lane: l,
                    out: Default::default(),
                    next: 0,
                    total,
                }
            });
            let _ = tx.send(System::current());
            (arbiter, producer)
        });
        sys.run().expect("system runs");
    });
    let sys = rx.recv().expect("started");
    let t0 = Instant::now();
    let mut sum = 0u64;
    while let Some(x) = lane.pop() {
        sum += x;
    }
    let dt = t0.elapsed();
    assert_eq!(sum, total * (total - 1) / 2);
    sys.stop();
    system.join().expect("system thread");
    dt
}

fn handoffs(c: &mut Criterion) {
    let mut g = c.benchmark_group("batch_handoff");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(3));
    g.warm_up_time(Duration::from_millis(500));
    const ITEMS: u64 = 20_000;
    g.throughput(Throughput::Elements(ITEMS));
    g.bench_function("queue_actor", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| queue_actor_handoff(ITEMS)).sum())
    });
    g.bench_function("shared_lane", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| shared_lane_handoff(ITEMS)).sum())
    });
    g.finish();
}

fn hops(c: &mut Criterion) {
    let mut g = c.benchmark_group("actor_hop");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(3));
    g.warm_up_time(Duration::from_millis(500));
    const CHUNKS: u64 = 2_000;
    for rows in [1usize, 64, 1024] {
        let chunk = small_chunk(rows);
        g.throughput(Throughput::Elements(CHUNKS * rows as u64));
        g.bench_with_input(BenchmarkId::new("actix_ack2", rows), &chunk, |b, ch| {
            b.iter_custom(|iters| (0..iters).map(|_| actix_hop(ch, CHUNKS)).sum())
        });
        g.bench_with_input(
            BenchmarkId::new("crossbeam_bounded2", rows),
            &chunk,
            |b, ch| b.iter_custom(|iters| (0..iters).map(|_| channel_hop(ch, CHUNKS)).sum()),
        );
    }
    g.finish();
}

criterion_group!(benches, hops, handoffs);
criterion_main!(benches);
