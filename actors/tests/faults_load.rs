//! Extreme shapes, each with the exactly-once check: 1,000 small files and
//! one huge file; 64 readers on 2 cores; 16 devices; capacity 1; batch 1 and
//! a batch larger than the pass; no shuffle and a pool larger than the pass;
//! zero-record files; a pass with no files (a clear error). And memory: a
//! slow consumer never lets instances in flight exceed the settings' bound.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{all_ids, assert_exactly_once, consume_devices, per_pass, synth_loader, SynthFormat};
use feedline_actors::{Loader, LoaderBuilder, PipelineError};

fn builder(counts: &[u64]) -> (LoaderBuilder, Vec<i64>) {
    let b = synth_loader(SynthFormat::with_files(counts).build());
    (b, all_ids(counts, &[]))
}

/// Consume with `devices` device iterators on threads; sorted ids per pass.
fn consume(loader: Loader, devices: usize) -> BTreeMap<u64, Vec<i64>> {
    per_pass(&consume_devices(loader, devices, None))
}

#[test]
fn a_thousand_small_files_and_one_huge_file() {
    let mut counts = vec![3u64; 1000];
    counts.push(200_000);
    let (b, want) = builder(&counts);
    let loader = b
        .readers(4)
        .batch(512)
        .shuffle(5000)
        .passes(2)
        .build()
        .unwrap();
    assert_exactly_once(&consume(loader, 2), &want, 2);
}

#[test]
fn sixty_four_readers_on_two_cores() {
    let counts: Vec<u64> = (0..100).map(|i| 50 + i * 7).collect();
    let (b, want) = builder(&counts);
    let loader = b.readers(64).batch(100).passes(2).build().unwrap();
    assert_exactly_once(&consume(loader, 3), &want, 2);
}

#[test]
fn sixteen_devices_capacity_one() {
    let counts = [700u64, 300, 1000, 5];
    for rr in [false, true] {
        let (b, want) = builder(&counts);
        let loader = b
            .devices(16)
            .capacity(1)
            .batch(7)
            .round_robin(rr)
            .passes(3)
            .build()
            .unwrap();
        assert_exactly_once(&consume(loader, 16), &want, 3);
    }
}

#[test]
fn batch_of_one_and_batch_larger_than_the_pass() {
    let counts = [40u64, 17, 0, 33];
    for (batch, drop_last) in [(1usize, false), (1000, false), (90, true)] {
        let (b, want) = builder(&counts);
        let loader = b
            .batch(batch)
            .drop_last(drop_last)
            .passes(2)
            .build()
            .unwrap();
        // With drop_last the 90 instances make one full batch of 90: all kept.
        assert_exactly_once(&consume(loader, 1), &want, 2);
    }
}

#[test]
fn no_shuffle_and_a_pool_larger_than_the_pass() {
    let counts = [40u64, 17, 60];
    for pool in [0usize, 1_000_000] {
        let (b, want) = builder(&counts);
        let loader = b.shuffle(pool).batch(16).passes(2).build().unwrap();
        assert_exactly_once(&consume(loader, 1), &want, 2);
    }
}

#[test]
fn zero_record_files_only() {
    let (b, _) = builder(&[0, 0, 0]);
    let loader = b.passes(2).build().unwrap();
    let stats = loader.stats_handle();
    // Both devices reach the end of data (an error would panic), with no batch.
    let per_pass = consume(loader, 2);
    assert!(per_pass.is_empty(), "{per_pass:?}");
    assert_eq!(stats.snapshot().passes_done, 2);
}

#[test]
fn a_pass_with_no_files_is_a_clear_error() {
    let err = Loader::builder().build().unwrap_err();
    assert!(matches!(err, PipelineError::Config(_)));
    assert!(err.to_string().contains("no input files"), "{err}");
    // A rank with no file of its own.
    let (b, _) = builder(&[10, 10]);
    let err = b
        .shard(2, 3)
        .shard_by(feedline::plan::ShardBy::File)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("a pass has no files"), "{err}");
    // A glob that matches nothing.
    let err = Loader::builder()
        .files(["/nonexistent-dir/*.tfrecord"])
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("nonexistent-dir"), "{err}");
}

#[test]
fn a_slow_consumer_keeps_instances_in_flight_within_the_bound() {
    let counts = [4000u64, 4000, 4000, 4000];
    let (b, want) = builder(&counts);
    let (readers, in_flight, chunk, pool, capacity, batch) =
        (3usize, 2usize, 64usize, 500usize, 2usize, 32usize);
    let loader = b
        .readers(readers)
        .chunks_in_flight(in_flight)
        .chunk_records(chunk)
        .shuffle(pool)
        .capacity(capacity)
        .batch(batch)
        .build()
        .unwrap();
    let stats = loader.stats_handle();
    // chunks in flight (+ the one being read) × chunk + pool (+ one chunk of
    // overshoot) + queue × batch + one batch being pushed + one being
    // consumed + the batches in flight: 2 × K drawn and waiting for the
    // batch maker, K being made (no instance map: K = 2).
    let making = 3 * 2 * batch;
    let bound =
        (readers * (in_flight + 1) * chunk + pool + chunk + (capacity + 2) * batch + making) as u64;
    let mut consumed = 0u64;
    let mut worst = 0u64;
    let mut got = BTreeMap::new();
    for (i, d) in loader.into_iter().enumerate() {
        let d = d.unwrap();
        consumed += d.batch.len() as u64;
        (got.entry(d.pass).or_insert_with(Vec::new)).extend(common::ids(&d));
        if i < 60 {
            std::thread::sleep(Duration::from_millis(3)); // far slower than the readers
        }
        let read = stats.snapshot().readers.records;
        worst = worst.max(read.saturating_sub(consumed));
        assert!(
            read - consumed.min(read) <= bound,
            "{read} read, {consumed} consumed, bound {bound}"
        );
    }
    assert_exactly_once(&got, &want, 1);
    assert!(worst > 0);
}

#[test]
fn a_chunk_of_many_small_batches_waits_in_the_pool_not_collated() {
    // One chunk of 64 records makes 64 one-record batches: the batch maker
    // holds at most its batches in flight (3 here) ahead of the feed queue.
    let counts = [640u64, 320];
    for (devices, round_robin) in [(1, false), (3, true)] {
        let (b, want) = builder(&counts);
        let loader = b
            .readers(2)
            .chunk_records(64)
            .shuffle(0)
            .batch(1)
            .capacity(2)
            .batches_in_flight(3)
            .devices(devices)
            .round_robin(round_robin)
            .passes(2)
            .build()
            .unwrap();
        let stats = loader.stats_handle();
        assert_exactly_once(&consume(loader, devices), &want, 2);
        let peak = stats.snapshot().made_waiting_peak;
        assert!(peak <= 3, "{peak} batches held, more than 3 in flight");
        assert!(peak > 0);
    }
}
