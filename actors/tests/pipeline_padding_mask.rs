//! Equalize padding is marked in the batches: under
//! `Equalize::Pad` a rank's repeated instances come last in each pass, and
//! `Batch::mask()` / `padded_rows()` say which rows they are, so that
//! evaluation counts every instance once; under `Drop` or `Off` nothing is
//! marked.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{all_ids, ids, synth_loader, SynthFormat};
use feedline::plan::{Equalize, ShardBy};

/// Per pass: (id, marked real) of every row, in delivery order; and the
/// stats' padded count.
fn rows(
    counts: &[u64],
    rank: usize,
    world: usize,
    how: Equalize,
    batch: usize,
) -> (BTreeMap<u64, Vec<(i64, bool)>>, u64) {
    let loader = synth_loader(SynthFormat::with_files(counts).build())
        .shard(rank, world)
        .shard_by(ShardBy::File)
        .equalize(how)
        .batch(batch)
        .shuffle(16)
        .passes(2)
        .seed(3)
        .build()
        .unwrap();
    let stats = loader.stats_handle();
    let mut out: BTreeMap<u64, Vec<(i64, bool)>> = BTreeMap::new();
    for d in loader {
        let d = d.unwrap();
        let mask = d.batch.mask();
        assert_eq!(mask.len(), d.batch.len());
        assert_eq!(mask.iter().filter(|m| !**m).count(), d.batch.padded_rows());
        out.entry(d.pass)
            .or_default()
            .extend(ids(&d).into_iter().zip(mask.iter().copied()));
    }
    (out, stats.snapshot().equalize_padded)
}

#[test]
fn padded_rows_are_marked_and_the_real_rows_are_every_instance_once() {
    let counts = [10u64, 20, 35, 7, 50, 3, 41];
    let world = 3;
    for batch in [8, 5] {
        let mut real_all: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
        let mut marked_total = 0;
        let mut padded_total = 0;
        for rank in 0..world {
            let (per_pass, padded) = rows(&counts, rank, world, Equalize::Pad, batch);
            padded_total += padded;
            for (pass, rows) in per_pass {
                let real: Vec<i64> = rows.iter().filter(|r| r.1).map(|r| r.0).collect();
                let pad: Vec<i64> = rows.iter().filter(|r| !r.1).map(|r| r.0).collect();
                // Padding is the pass's last rows, repeats of its real ones.
                let first_pad = rows.iter().position(|r| !r.1).unwrap_or(rows.len());
                assert!(
                    rows[first_pad..].iter().all(|r| !r.1),
                    "rank {rank} pass {pass}: padding not last"
                );
                let distinct: BTreeSet<i64> = real.iter().copied().collect();
                assert_eq!(
                    distinct.len(),
                    real.len(),
                    "rank {rank} pass {pass}: a real row twice"
                );
                assert!(
                    pad.iter().all(|id| distinct.contains(id)),
                    "rank {rank} pass {pass}: padding of an instance not delivered"
                );
                marked_total += pad.len() as u64;
                real_all.entry(pass).or_default().extend(real);
            }
        }
        assert!(padded_total > 0, "the ranks are unequal: some padding");
        assert_eq!(
            marked_total, padded_total,
            "every padded row marked, no other"
        );
        for (pass, mut ids) in real_all {
            ids.sort();
            assert_eq!(
                ids,
                all_ids(&counts, &[]),
                "batch {batch} pass {pass}: real rows over the ranks"
            );
        }
    }
}

#[test]
fn without_padding_no_row_is_marked() {
    let counts = [10u64, 20, 35, 7];
    for how in [Equalize::Drop, Equalize::Off] {
        for rank in 0..2 {
            let (per_pass, padded) = rows(&counts, rank, 2, how, 8);
            assert_eq!(padded, 0);
            assert!(
                per_pass.values().flatten().all(|r| r.1),
                "{how:?} rank {rank}"
            );
        }
    }
}
