//! The actor pipeline on synthetic data: every record exactly once per pass.

mod common;

use std::collections::HashMap;

use common::{synth_registry, SynthFormat};
use feedline_actors::Loader;

fn run(
    counts: &[u64],
    readers: usize,
    passes: u64,
    batch: usize,
    shuffle: usize,
    seed: u64,
    det: bool,
) -> Vec<(u64, u64, Vec<i64>)> {
    let synth = SynthFormat::with_files(counts).build();
    let specs = synth.specs();
    let loader = Loader::builder()
        .registry(synth_registry(synth))
        .files(specs)
        .schema(SynthFormat::schema())
        .readers(readers)
        .passes(passes)
        .batch(batch)
        .shuffle(shuffle)
        .seed(seed)
        .deterministic(det)
        .chunk_records(7)
        .build()
        .unwrap();
    let mut out = Vec::new();
    for d in loader {
        let d = d.unwrap();
        let ids = d.batch.i64("id").unwrap().iter().copied().collect();
        out.push((d.pass, d.seq, ids));
    }
    out
}

#[test]
fn every_record_once_per_pass() {
    let counts = [50, 0, 33, 120, 1];
    for readers in [1, 2, 4] {
        let out = run(&counts, readers, 3, 16, 40, readers as u64, false);
        let mut per_pass: HashMap<u64, Vec<i64>> = HashMap::new();
        for (p, _, ids) in &out {
            per_pass.entry(*p).or_default().extend(ids);
        }
        assert_eq!(per_pass.len(), 3);
        for (_, mut ids) in per_pass {
            ids.sort();
            let mut want: Vec<i64> = counts
                .iter()
                .enumerate()
                .flat_map(|(f, &n)| (0..n as i64).map(move |i| f as i64 * 1_000_000 + i))
                .collect();
            want.sort();
            assert_eq!(ids, want);
        }
    }
}

#[test]
fn deterministic_runs_are_identical_across_reader_counts() {
    let counts = [50, 10, 33, 120, 1, 64];
    let a = run(&counts, 1, 2, 16, 40, 9, true);
    let b = run(&counts, 4, 2, 16, 40, 9, true);
    let c = run(&counts, 2, 2, 16, 40, 9, true);
    assert_eq!(a, b);
    assert_eq!(a, c);
}
