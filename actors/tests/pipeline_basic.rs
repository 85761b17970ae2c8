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

#[test]
fn batches_over_the_cost_budget_are_counted_in_the_stats_and_the_summary() {
    // Ids of file f1 cost 20 against a budget of 10: each forms a batch
    // alone (counted; the batcher logs only the first of a pass); the others
    // cost 1 and share batches.
    let cost: feedline::batch_policy::CostFn = std::sync::Arc::new(|chunk: &feedline::Chunk, i| {
        let row = chunk.row(i).ok();
        let id = row
            .as_ref()
            .and_then(|r| r.get("id").ok()?.as_i64().map(|v| v[0]));
        if id.is_some_and(|id| id / 1_000_000 == 1) {
            20
        } else {
            1
        }
    });
    let loader = synth_loader(SynthFormat::with_files(&[12, 5, 9]).build())
        .readers(2)
        .passes(2)
        .shuffle(8)
        .batch_policy(feedline::batch_policy::BatchPolicy::Budget { max_cost: 10, cost })
        .build()
        .unwrap();
    let stats = loader.stats_handle();
    let mut alone = 0;
    for d in loader {
        let ids = ids(&d.unwrap());
        let heavy = ids.iter().filter(|id| **id / 1_000_000 == 1).count();
        assert!(
            heavy == 0 || ids.len() == 1,
            "a costly instance shares a batch: {ids:?}"
        );
        alone += heavy;
    }
    assert_eq!(alone, 10, "5 costly instances in each of 2 passes");
    let s = stats.snapshot();
    assert_eq!(s.oversize_batches, 10);
    assert!(
        s.summary_line()
            .ends_with("; 10 batches over the cost budget"),
        "{}",
        s.summary_line()
    );
}
