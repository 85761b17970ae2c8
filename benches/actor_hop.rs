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
    let schema = feedline::gen::preset_schema(feedline::gen::Preset::Small);
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

criterion_group!(benches, hops);
criterion_main!(benches);
