//! Equal batch counts across data-parallel ranks (unequal counts hang
//! distributed training): with `Equalize::Drop` every rank keeps as many
//! instances as the smallest has, with `Equalize::Pad` every rank repeats
//! some of its own to reach the largest; the stats say how many.

mod common;

use std::collections::BTreeMap;

use common::{ids, synth_loader, SynthFormat};
use feedline::plan::{Equalize, ShardBy};

/// Per pass: (batch sizes, ids) this rank got.
type PerPass = BTreeMap<u64, (Vec<usize>, Vec<i64>)>;

/// What a rank got per pass, and the stats' (dropped, padded).
fn rank_run(
    counts: &[u64],
    rank: usize,
    world: usize,
    how: Equalize,
    drop_last: bool,
) -> (PerPass, (u64, u64)) {
    let loader = synth_loader(SynthFormat::with_files(counts).build())
        .shard(rank, world)
        .shard_by(ShardBy::File)
        .equalize(how)
        .batch(8)
        .drop_last(drop_last)
        .shuffle(20)
        .passes(2)
        .seed(5)
        .build()
        .unwrap();
    let stats = loader.stats_handle();
    let mut out: PerPass = BTreeMap::new();
    for d in loader {
        let d = d.unwrap();
        let e = out.entry(d.pass).or_default();
        e.0.push(d.batch.len());
        e.1.extend(ids(&d));
    }
    let s = stats.snapshot();
    (out, (s.equalize_dropped, s.equalize_padded))
}

#[test]
fn every_rank_gets_the_same_batches() {
    let counts = [10u64, 20, 35, 7, 50, 3, 41];
    let world = 3;
    for how in [Equalize::Drop, Equalize::Pad] {
        for drop_last in [false, true] {
            let runs: Vec<_> = (0..world)
                .map(|r| rank_run(&counts, r, world, how, drop_last))
                .collect();
            for pass in 0..2u64 {
                let sizes: Vec<&Vec<usize>> = runs.iter().map(|(o, _)| &o[&pass].0).collect();
                assert!(
                    sizes.windows(2).all(|w| w[0] == w[1]),
                    "{how:?} drop_last {drop_last} pass {pass}: {sizes:?}"
                );
                // Across ranks the instances are disjoint but for the padding.
                let mut all: Vec<i64> = Vec::new();
                for (o, _) in &runs {
                    let mut ids = o[&pass].1.clone();
                    ids.sort();
                    let n = ids.len();
                    ids.dedup();
                    let repeats = n - ids.len();
                    match how {
                        Equalize::Drop => assert_eq!(repeats, 0),
                        _ => assert!(repeats as u64 <= counts.iter().sum::<u64>()),
                    }
                    all.extend(ids);
                }
                let n = all.len();
                all.sort();
                all.dedup();
                assert_eq!(all.len(), n, "an instance went to two ranks");
            }
            let (dropped, padded): (u64, u64) = runs
                .iter()
                .map(|(_, s)| *s)
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
            match how {
                Equalize::Drop => assert!(dropped > 0 && padded == 0),
                _ => assert!(padded > 0),
            }
        }
    }
}

#[test]
fn off_keeps_every_instance() {
    let counts = [10u64, 20, 35];
    let total: usize = (0..2)
        .map(|r| rank_run(&counts, r, 2, Equalize::Off, false).0[&0].1.len())
        .sum();
    assert_eq!(total as u64, counts.iter().sum::<u64>());
}
