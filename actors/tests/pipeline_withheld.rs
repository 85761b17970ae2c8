//! Withheld acknowledgements keep readers within their windows when the
//! shuffle stage cannot take their chunks yet: a file set ahead of its
//! weight (the mix), and early chunks in deterministic mode (the reorder
//! window). The records sent by readers but not yet taken into the shuffle
//! pool never exceed `readers × (chunks_in_flight + 1) × chunk_records`,
//! whatever one slow file holds back — and every record still comes exactly
//! once.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{all_ids, assert_exactly_once, ids, synth_registry, Fault, SynthFormat};
use feedline_actors::{FileSet, Loader, LoaderBuilder};

const CHUNK: usize = 50;
const IN_FLIGHT: usize = 2;

/// A file of `records` whose reads stall 20 ms every 50 records.
fn slow_file(synth: SynthFormat, file: &str, records: u64) -> SynthFormat {
    (0..records).step_by(50).fold(synth, |s, r| {
        s.fault(file, r, Fault::Slow(Duration::from_millis(20)))
    })
}

/// Consume everything: the ids of each pass, and the most records that were
/// sent by the readers and not yet taken into the pool, seen at any batch.
fn consume(builder: LoaderBuilder) -> (BTreeMap<u64, Vec<i64>>, u64) {
    let loader = builder
        .chunk_records(CHUNK)
        .chunks_in_flight(IN_FLIGHT)
        .batch(CHUNK)
        .build()
        .unwrap();
    let stats = loader.stats_handle();
    let mut per_pass: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    let mut worst = 0;
    for d in loader {
        let d = d.unwrap();
        per_pass.entry(d.pass).or_default().extend(ids(&d));
        let s = stats.snapshot();
        worst = worst.max(s.readers.records.saturating_sub(s.shuffle_batch.records));
    }
    (per_pass, worst)
}

/// At most each reader's unacknowledged chunks and the one it reads were
/// sent and not taken.
fn assert_within_windows(worst: u64, readers: usize) {
    let bound = (readers * (IN_FLIGHT + 1) * CHUNK) as u64;
    assert!(
        worst <= bound,
        "{worst} records sent and not taken, bound {bound}"
    );
}

#[test]
fn a_file_set_ahead_of_its_weight_waits_with_its_readers_paused() {
    // Equal weights; set "fast" has 20,000 records, set "slow" 1,000 read
    // slowly: "fast" runs ahead and must wait for "slow", its chunks
    // unacknowledged.
    let counts = [20_000u64, 1_000];
    let synth = slow_file(SynthFormat::with_files(&counts), "f1", counts[1]).build();
    let builder = Loader::builder()
        .registry(synth_registry(synth))
        .schema(SynthFormat::schema())
        .shuffle(0)
        .file_set(FileSet::new("fast", ["synth:f0"]).readers(1).weight(1.0))
        .file_set(FileSet::new("slow", ["synth:f1"]).readers(1).weight(1.0));
    let (per_pass, worst) = consume(builder);
    assert_exactly_once(&per_pass, &all_ids(&counts, &[]), 1);
    assert_within_windows(worst, 2);
}

#[test]
fn early_chunks_in_deterministic_mode_wait_with_their_readers_paused() {
    // The first file in plan order is slow; the other readers read later
    // files, whose chunks are early: held past a reorder window of one byte,
    // their acknowledgements withheld.
    let counts = [1_000u64, 5_000, 5_000, 5_000];
    let synth = slow_file(SynthFormat::with_files(&counts), "f0", counts[0]).build();
    let specs = synth.specs();
    let builder = Loader::builder()
        .registry(synth_registry(synth))
        .files(specs)
        .schema(SynthFormat::schema())
        .shuffle_files(false)
        .readers(3)
        .shuffle(100)
        .deterministic(true)
        .reorder_window(1);
    let (per_pass, worst) = consume(builder);
    assert_exactly_once(&per_pass, &all_ids(&counts, &[]), 1);
    assert_within_windows(worst, 3);
}
