//! Core benchmarks: the feed queue (one shared lane, items pushed one at a
//! time, a full lane awaited through its room signal) against
//! `crossbeam_channel::bounded` (1 producer / 1 consumer and 2 / 2), the
//! shuffle buffer per instance, and
//! collation of a small (256 × 264 B) and a large (32 × 150 KB) batch.
//!
//! `CARGO_TARGET_DIR=… cargo bench -p feedline --bench core`

use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use feedline::feed_queue::{FeedMode, FeedQueue, Item, Popped, Pushed};
use feedline::shuffle::{ShuffleBuffer, ShuffleConfig};
use feedline::{collate_rows, Chunk, DType, Instance, Origin, RowRef, Schema, SourceId, Values};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const ITEMS: u64 = 200_000;
const CAPACITY: usize = 64;

/// Move `ITEMS` items from `p` producers to `c` consumers; `finish` runs once
/// the producers are done (close the queue / drop the last sender). Returns
/// the time of the whole hand-over.
fn run_pairs<P, C>(
    p: usize,
    c: usize,
    producer: impl Fn() -> P,
    consumer: impl Fn() -> C,
    push: fn(&P, u64),
    pop: fn(&C) -> Option<u64>,
    finish: impl FnOnce(),
) -> Duration
where
    P: Send + 'static,
    C: Send + 'static,
{
    let start = Instant::now();
    let per = ITEMS / p as u64;
    let producers: Vec<_> = (0..p)
        .map(|_| {
            let q = producer();
            thread::spawn(move || {
                for i in 0..per {
                    push(&q, i);
                }
            })
        })
        .collect();
    let consumers: Vec<_> = (0..c)
        .map(|_| {
            let q = consumer();
            thread::spawn(move || {
                let mut sum = 0u64;
                while let Some(v) = pop(&q) {
                    sum = sum.wrapping_add(v);
                }
                sum
            })
        })
        .collect();
    drop((producer, consumer)); // no handle left behind but the threads'
    for h in producers {
        h.join().unwrap();
    }
    finish();
    for h in consumers {
        black_box(h.join().unwrap());
    }
    start.elapsed()
}

fn queues(c: &mut Criterion) {
    let mut g = c.benchmark_group("queue_push_pop");
    g.throughput(Throughput::Elements(ITEMS));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(4));
    for (p, n) in [(1usize, 1usize), (2, 2)] {
        let label = format!("{p}p{n}c");
        g.bench_function(BenchmarkId::new("FeedQueue", &label), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let q =
                            FeedQueue::<u64, ()>::new(FeedMode::Shared.lanes(1), CAPACITY).unwrap();
                        run_pairs(
                            p,
                            n,
                            || q.clone(),
                            || q.clone(),
                            |q, v| {
                                let mut out = VecDeque::from([(0, Item::Batch(v))]);
                                while let Ok(Pushed::Full(room)) = q.push(&mut out) {
                                    let _ = futures::executor::block_on(room);
                                }
                            },
                            |q| match q.pop(0, None) {
                                Some(Ok(Popped::Batch(v))) => Some(v),
                                _ => None,
                            },
                            || q.close(),
                        )
                    })
                    .sum()
            })
        });
        g.bench_function(BenchmarkId::new("crossbeam_bounded", &label), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let (tx, rx) = crossbeam_channel::bounded::<u64>(CAPACITY);
                        let producer = tx.clone();
                        run_pairs(
                            p,
                            n,
                            move || producer.clone(),
                            || rx.clone(),
                            |tx, v| tx.send(v).unwrap(),
                            |rx| rx.recv().ok(),
                            move || drop(tx),
                        )
                    })
                    .sum()
            })
        });
    }
    g.finish();
}

fn schema_small() -> Schema {
    // 264 B: 64 f32 + one i64 label (the `small` preset's record).
    Schema::builder()
        .field("x", DType::F32, [64])
        .field("y", DType::I64, [])
        .build()
        .unwrap()
}

fn schema_large() -> Schema {
    // 150,536 B: a 224 × 224 × 3 u8 image + one i64 label (the `large` preset).
    Schema::builder()
        .field("image", DType::U8, [224, 224, 3])
        .field("label", DType::I64, [])
        .build()
        .unwrap()
}

fn chunks(schema: &Schema, n_chunks: usize, rows: usize) -> Vec<Arc<Chunk>> {
    let src = SourceId::intern("bench");
    (0..n_chunks)
        .map(|k| {
            let mut c = Chunk::with_capacity(schema, rows);
            for i in 0..rows {
                let values = schema
                    .fields()
                    .iter()
                    .map(|f| match f.dtype {
                        DType::F32 => Values::F32(vec![i as f32; f.unit_elements()]),
                        DType::U8 => Values::U8(vec![i as u8; f.unit_elements()]),
                        _ => Values::I64(vec![i as i64; f.unit_elements()]),
                    })
                    .collect();
                let origin = Origin::new(src, (k * rows + i) as u64);
                c.push_instance(&Instance::new(schema, values, origin).unwrap());
            }
            Arc::new(c)
        })
        .collect()
}

fn shuffle_buffer(c: &mut Criterion) {
    let schema = schema_small();
    let chunks = chunks(&schema, 64, 256); // 16,384 instances per pass
    let per_pass = 64 * 256;
    let mut g = c.benchmark_group("shuffle_buffer");
    g.throughput(Throughput::Elements(per_pass as u64));
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(3));
    for pool in [0usize, 1_000, 10_000] {
        g.bench_function(BenchmarkId::new("push_draw_pass", pool), |b| {
            let mut buf = ShuffleBuffer::new(ShuffleConfig {
                pool_size: pool,
                seed: 1,
                ..Default::default()
            });
            let mut pass = 0;
            b.iter(|| {
                buf.start_pass(pass);
                pass += 1;
                let mut next = chunks.iter();
                let mut exhausted = false;
                let mut n = 0usize;
                loop {
                    if !exhausted && buf.has_room() {
                        match next.next() {
                            Some(c) => buf.push_chunk(c.clone()),
                            None => {
                                exhausted = true;
                                buf.set_draining(true);
                            }
                        }
                        continue;
                    }
                    match buf.draw() {
                        Some(r) => {
                            n += r.index;
                            drop(black_box(r));
                        }
                        None => break,
                    }
                }
                n
            })
        });
    }
    g.finish();
}

fn collation(c: &mut Criterion) {
    let mut g = c.benchmark_group("collate_rows");
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(3));
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    for (name, schema, n_chunks, rows, batch) in [
        ("small_256x264B", schema_small(), 16, 256, 256usize),
        ("large_32x150KB", schema_large(), 4, 32, 32usize),
    ] {
        let cs = chunks(&schema, n_chunks, rows);
        // Rows picked from all chunks, as a shuffle buffer hands them out.
        let mut all: Vec<RowRef> = cs
            .iter()
            .flat_map(|c| (0..c.len()).map(move |i| RowRef::new(c.clone(), i)))
            .collect();
        all.shuffle(&mut rng);
        let picked: Vec<RowRef> = all.into_iter().take(batch).collect();
        let bytes: usize = picked
            .iter()
            .map(|r| {
                r.chunk
                    .columns()
                    .iter()
                    .map(|col| col.range(r.index).len() * col.values.dtype().size())
                    .sum::<usize>()
            })
            .sum();
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_function(name, |b| {
            b.iter(|| collate_rows(&schema, black_box(&picked)).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, queues, shuffle_buffer, collation);
criterion_main!(benches);
