//! Shuffle buffer: a pass is a permutation, bounds hold, draws are
//! reproducible, and with a pool as large as the pass the positions are
//! uniform (chi-square).

use std::sync::Arc;

use feedline::shuffle::{ShuffleBuffer, ShuffleConfig};
use feedline::{Chunk, DType, Instance, Origin, Schema, SourceId, Values};
use proptest::prelude::*;

fn schema() -> Schema {
    Schema::builder()
        .field("id", DType::I64, [])
        .field("x", DType::F32, [16])
        .build()
        .unwrap()
}

/// A chunk of ids `first..first + n`.
fn chunk(schema: &Schema, first: u64, n: usize) -> Arc<Chunk> {
    let mut c = Chunk::new(schema);
    let src = SourceId::intern("mem");
    for i in 0..n as u64 {
        let id = first + i;
        let inst = Instance::new(
            schema,
            vec![Values::I64(vec![id as i64]), Values::F32(vec![0.5; 16])],
            Origin::new(src, id),
        )
        .unwrap();
        c.push_instance(&inst);
    }
    Arc::new(c)
}

/// Drive the buffer as the pipeline does (push while there is room, else
/// draw; drain at the end), checking the bounds after every push. Returns the
/// ids in draw order.
fn run(buf: &mut ShuffleBuffer, chunks: &[Arc<Chunk>]) -> Vec<u64> {
    let cfg = buf.config().clone();
    let max_chunk_bytes = chunks.iter().map(|c| c.memory_bytes()).max().unwrap_or(0);
    let max_chunk_len = chunks.iter().map(|c| c.len()).max().unwrap_or(0);
    let mut next = chunks.iter();
    let mut out = Vec::new();
    let mut exhausted = false;
    loop {
        if !exhausted && buf.has_room() {
            match next.next() {
                Some(c) => {
                    buf.push_chunk(c.clone());
                    assert!(buf.held_bytes() <= cfg.max_bytes + max_chunk_bytes);
                    assert!(buf.len() <= cfg.pool_size.max(1) + max_chunk_len);
                }
                None => {
                    exhausted = true;
                    buf.set_draining(true);
                }
            }
            continue;
        }
        assert!(
            buf.can_draw() || buf.is_empty(),
            "no room, yet nothing to draw"
        );
        match buf.draw() {
            Some(r) => out.push(r.origin().record),
            None => break,
        }
    }
    assert_eq!(buf.held_bytes(), 0);
    assert_eq!(buf.chunks_held(), 0);
    out
}

fn make_chunks(sizes: &[usize]) -> (Vec<Arc<Chunk>>, u64) {
    let schema = schema();
    let mut first = 0;
    let chunks = sizes
        .iter()
        .map(|&n| {
            let c = chunk(&schema, first, n);
            first += n as u64;
            c
        })
        .collect();
    (chunks, first)
}

proptest! {
    #[test]
    fn a_pass_is_a_permutation_within_bounds(
        sizes in prop::collection::vec(0usize..40, 0..30),
        pool in 0usize..200,
        min_pool in prop::option::of(0usize..250),
        max_kib in 1usize..64,
        seed in any::<u64>(),
    ) {
        let (chunks, total) = make_chunks(&sizes);
        let mut buf = ShuffleBuffer::new(ShuffleConfig {
            pool_size: pool,
            min_pool_size: min_pool,
            max_bytes: max_kib << 10,
            seed,
        });
        let mut got = run(&mut buf, &chunks);
        if pool == 0 {
            prop_assert_eq!(&got, &(0..total).collect::<Vec<_>>(), "pool 0 is FIFO");
        }
        got.sort_unstable();
        prop_assert_eq!(got, (0..total).collect::<Vec<_>>());
    }
}

#[test]
fn same_seed_same_draws_other_seed_other_draws() {
    let (chunks, _) = make_chunks(&[7, 13, 5, 20, 1, 9]);
    let cfg = ShuffleConfig {
        pool_size: 16,
        seed: 3,
        ..Default::default()
    };
    let a = run(&mut ShuffleBuffer::new(cfg.clone()), &chunks);
    let b = run(&mut ShuffleBuffer::new(cfg.clone()), &chunks);
    assert_eq!(a, b);
    let other = run(
        &mut ShuffleBuffer::new(ShuffleConfig {
            seed: 4,
            ..cfg.clone()
        }),
        &chunks,
    );
    assert_ne!(a, other);
    // Passes: start_pass(p) draws from (seed, p).
    let mut buf = ShuffleBuffer::new(cfg.clone());
    buf.start_pass(1);
    let p1 = run(&mut buf, &chunks);
    assert_ne!(a, p1);
    buf.start_pass(0);
    assert!(!buf.is_draining());
    assert_eq!(run(&mut buf, &chunks), a);
    buf.start_pass(1);
    assert_eq!(run(&mut buf, &chunks), p1);
    // reseed(s) is pass 0 of seed s.
    buf.reseed(4);
    assert_eq!(run(&mut buf, &chunks), other);
}

#[test]
fn draws_depend_only_on_the_push_draw_sequence() {
    // Same sequence of calls over chunks of the same sizes but other content:
    // the same (chunk, row) picks.
    let schema = schema();
    let mk = |base: u64| -> Vec<Arc<Chunk>> {
        [4usize, 9, 3]
            .iter()
            .scan(base, |b, &n| {
                let c = chunk(&schema, *b, n);
                *b += 100;
                Some(c)
            })
            .collect()
    };
    let cfg = ShuffleConfig {
        pool_size: 10,
        seed: 11,
        ..Default::default()
    };
    let pick = |chunks: Vec<Arc<Chunk>>| {
        let mut buf = ShuffleBuffer::new(cfg.clone());
        let ptrs: Vec<*const Chunk> = chunks.iter().map(Arc::as_ptr).collect();
        let mut out = Vec::new();
        for c in chunks {
            buf.push_chunk(c);
            if buf.can_draw() {
                let r = buf.draw().unwrap();
                out.push((
                    ptrs.iter().position(|p| *p == Arc::as_ptr(&r.chunk)),
                    r.index,
                ));
            }
        }
        buf.set_draining(true);
        while let Some(r) = buf.draw() {
            out.push((
                ptrs.iter().position(|p| *p == Arc::as_ptr(&r.chunk)),
                r.index,
            ));
        }
        out
    };
    assert_eq!(pick(mk(0)), pick(mk(5000)));
}

#[test]
fn room_draw_and_byte_accounting() {
    let schema = schema();
    let c1 = chunk(&schema, 0, 4);
    let c2 = chunk(&schema, 4, 4);
    let bytes = c1.memory_bytes();
    // A byte bound of one chunk: after one push there is no room, and a draw
    // is allowed although min_pool (100) is far off: no deadlock.
    let mut buf = ShuffleBuffer::new(ShuffleConfig {
        pool_size: 100,
        min_pool_size: None,
        max_bytes: bytes,
        seed: 0,
    });
    assert!(buf.has_room() && !buf.can_draw() && buf.is_empty());
    buf.push_chunk(c1.clone());
    assert_eq!(buf.held_bytes(), bytes);
    assert!(!buf.has_room() && buf.can_draw());
    // Bytes are released when a chunk's last row is drawn, not before.
    for k in 0..3 {
        buf.draw().unwrap();
        assert_eq!(buf.held_bytes(), bytes, "after {} draws", k + 1);
    }
    buf.draw().unwrap();
    assert_eq!((buf.held_bytes(), buf.len()), (0, 0));
    assert!(buf.has_room() && !buf.can_draw() && buf.draw().is_none());
    // An empty chunk is ignored.
    buf.push_chunk(Arc::new(Chunk::new(&schema)));
    assert_eq!((buf.len(), buf.held_bytes(), buf.chunks_held()), (0, 0, 0));
    // min_pool_size lower than pool_size: draws start early.
    let mut buf = ShuffleBuffer::new(ShuffleConfig {
        pool_size: 100,
        min_pool_size: Some(6),
        max_bytes: usize::MAX,
        seed: 0,
    });
    buf.push_chunk(c1.clone());
    assert!(!buf.can_draw());
    buf.push_chunk(c2.clone());
    assert!(buf.can_draw() && buf.has_room());
    assert_eq!(buf.chunks_held(), 2);
    buf.clear();
    assert_eq!((buf.len(), buf.held_bytes(), buf.chunks_held()), (0, 0, 0));
    // min_pool_size above pool_size counts as pool_size.
    let cfg = ShuffleConfig {
        pool_size: 4,
        min_pool_size: Some(50),
        ..Default::default()
    };
    assert_eq!(cfg.min_pool(), 4);
    let mut buf = ShuffleBuffer::new(cfg);
    buf.push_chunk(c1);
    assert!(!buf.has_room() && buf.can_draw());
}

/// 99.9% quantile of chi-square with `k` degrees of freedom
/// (Wilson–Hilferty; within 0.2% of the exact value for k ≥ 30).
fn chi2_999(k: f64) -> f64 {
    let z = 3.090_232; // standard normal 99.9% quantile
    let a = 2.0 / (9.0 * k);
    k * (1.0 - a + z * a.sqrt()).powi(3)
}

/// With a pool at least as large as the pass, every instance is equally
/// likely at every position. For each of 20 fixed seeds (and pools of 8 and
/// 24), 4,000 passes of 8 instances (in chunks of 3, 3, 2) fill an 8 × 8
/// table of (instance, position) counts (expected 500 each). Each pass adds a
/// permutation matrix, whose covariance is a scalar on the (n-1)² space of
/// zero row and column sums, so Pearson's statistic times (n-1)/n follows
/// chi-square with (n-1)² = 49 degrees of freedom under uniformity. It must
/// stay under the 99.9% quantile (≈ 85.4) for every seed, and the sum over
/// the 20 seeds (980 degrees of freedom) under its own (≈ 1,122).
#[test]
fn positions_are_uniform_when_the_pool_holds_the_pass() {
    let (chunks, n) = make_chunks(&[3, 3, 2]);
    let n = n as usize;
    let passes = 4_000u64;
    let expected = passes as f64 / n as f64;
    let df = ((n - 1) * (n - 1)) as f64;
    let mut total = 0.0;
    for seed in 0..20u64 {
        for pool in [n, 3 * n] {
            let mut buf = ShuffleBuffer::new(ShuffleConfig {
                pool_size: pool,
                seed,
                ..Default::default()
            });
            let mut table = vec![vec![0u32; n]; n];
            for pass in 0..passes {
                buf.start_pass(pass);
                for (pos, id) in run(&mut buf, &chunks).into_iter().enumerate() {
                    table[id as usize][pos] += 1;
                }
            }
            let pearson: f64 = table
                .iter()
                .flatten()
                .map(|&o| (o as f64 - expected).powi(2) / expected)
                .sum();
            let stat = pearson * (n - 1) as f64 / n as f64;
            assert!(
                stat < chi2_999(df),
                "seed {seed}, pool {pool}: chi-square {stat:.1} ≥ {:.1}",
                chi2_999(df)
            );
            if pool == n {
                total += stat;
            }
        }
    }
    assert!(total < chi2_999(20.0 * df), "sum {total:.1}");

    // The test has power: a pool of 2 (a sliding window over the pass) is far
    // from uniform and fails it.
    let mut buf = ShuffleBuffer::new(ShuffleConfig {
        pool_size: 2,
        seed: 0,
        ..Default::default()
    });
    let mut table = vec![vec![0u32; n]; n];
    for pass in 0..passes {
        buf.start_pass(pass);
        for (pos, id) in run(&mut buf, &chunks).into_iter().enumerate() {
            table[id as usize][pos] += 1;
        }
    }
    let pearson: f64 = table
        .iter()
        .flatten()
        .map(|&o| (o as f64 - expected).powi(2) / expected)
        .sum();
    assert!(pearson * (n - 1) as f64 / n as f64 > chi2_999(df));
}
