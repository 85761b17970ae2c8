//! The actor pipeline on synthetic data: every record exactly once per pass.

mod common;

use common::{all_ids, assert_exactly_once, ids, synth_loader, SynthFormat};

fn run(
    counts: &[u64],
    readers: usize,
    passes: u64,
    batch: usize,
    shuffle: usize,
    seed: u64,
    det: bool,
) -> Vec<(u64, u64, Vec<i64>)> {
    let loader = synth_loader(SynthFormat::with_files(counts).build())
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
        out.push((d.pass, d.seq, ids(&d)));
    }
    out
}

#[test]
fn every_record_once_per_pass() {
    let counts = [50, 0, 33, 120, 1];
    for readers in [1, 2, 4] {
        let out = run(&counts, readers, 3, 16, 40, readers as u64, false);
        let mut per_pass = std::collections::BTreeMap::new();
        for (p, _, ids) in &out {
            per_pass.entry(*p).or_insert_with(Vec::new).extend(ids);
        }
        assert_exactly_once(&per_pass, &all_ids(&counts, &[]), 3);
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

#[path = "../../tests/format_helpers/mod.rs"]
mod format_helpers;

#[test]
fn readers_read_on_after_short_chunks() {
    // `read_chunk` returns at most 3, 1, 2, … records: only 0 ends a file.
    let counts = [20u64, 1, 7, 33];
    let synth = SynthFormat::with_files(&counts).build();
    let specs: Vec<String> = synth
        .specs()
        .iter()
        .map(|s| s.replace("synth:", "short:"))
        .collect();
    let mut registry = feedline::format::Registry::with_builtin();
    registry.register(std::sync::Arc::new(format_helpers::ShortChunks {
        name: "short",
        inner: std::sync::Arc::new(synth),
        pattern: vec![3, 1, 2],
    }));
    for readers in [1, 3] {
        let loader = feedline_actors::Loader::builder()
            .registry(registry.clone())
            .files(specs.clone())
            .schema(SynthFormat::schema())
            .readers(readers)
            .chunk_records(16)
            .batch(5)
            .passes(2)
            .build()
            .unwrap();
        let mut per_pass = std::collections::BTreeMap::new();
        for d in loader {
            let d = d.unwrap();
            per_pass
                .entry(d.pass)
                .or_insert_with(Vec::new)
                .extend(ids(&d));
        }
        assert_exactly_once(&per_pass, &all_ids(&counts, &[]), 2);
    }
}
