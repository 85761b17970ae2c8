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

/// Every rank of an equalized pass delivers exactly the instances the
/// rule says, counted against what each rank has (its `Off` run): with
/// `Drop` the smallest rank's count, each instance once; with `Pad` the
/// largest rank's, a rank with fewer repeating exactly the difference of
/// its own (both rounded down to whole batches under `drop_last`); the
/// ranks' instances disjoint but for the padding. Mutations killed (issue
/// 28, item 18): `equalized_counts` taking the largest rank for `Drop` or
/// the smallest for `Pad` (every rank still equal to the others), or one
/// record more or fewer.
#[test]
fn every_rank_gets_the_same_batches() {
    let counts = [10u64, 20, 35, 7, 50, 3, 41];
    let world = 3;
    let b = 8u64;
    // What each rank has per pass, unequalized (same seed, same shards).
    let off: Vec<PerPass> = (0..world)
        .map(|r| rank_run(&counts, r, world, Equalize::Off, false).0)
        .collect();
    for how in [Equalize::Drop, Equalize::Pad] {
        for drop_last in [false, true] {
            let runs: Vec<_> = (0..world)
                .map(|r| rank_run(&counts, r, world, how, drop_last))
                .collect();
            for pass in 0..2u64 {
                let has: Vec<u64> = off.iter().map(|o| o[&pass].1.len() as u64).collect();
                let (min, max) = (*has.iter().min().unwrap(), *has.iter().max().unwrap());
                assert!(min < max, "pass {pass}: the ranks need equalizing: {has:?}");
                let whole = |n: u64| if drop_last { n / b * b } else { n };
                let target = match how {
                    Equalize::Drop => whole(min),
                    _ => whole(max),
                };
                let sizes: Vec<&Vec<usize>> = runs.iter().map(|(o, _)| &o[&pass].0).collect();
                assert!(
                    sizes.windows(2).all(|w| w[0] == w[1]),
                    "{how:?} drop_last {drop_last} pass {pass}: {sizes:?}"
                );
                let mut all: Vec<i64> = Vec::new();
                for (r, (o, _)) in runs.iter().enumerate() {
                    let mut ids = o[&pass].1.clone();
                    assert_eq!(
                        ids.len() as u64,
                        target,
                        "{how:?} drop_last {drop_last} pass {pass} rank {r}: instances delivered (ranks have {has:?})"
                    );
                    ids.sort();
                    ids.dedup();
                    let distinct = ids.len() as u64;
                    // Its own instances, as many as it has up to the target.
                    assert_eq!(distinct, has[r].min(target), "rank {r}: distinct instances");
                    assert!(
                        ids.iter().all(|id| off[r][&pass].1.contains(id)),
                        "rank {r} delivered another rank's instance"
                    );
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
    // The two ranks' instances, each pass: every record once, by identity.
    let runs: Vec<PerPass> = (0..2)
        .map(|r| rank_run(&counts, r, 2, Equalize::Off, false).0)
        .collect();
    for pass in 0..2u64 {
        let mut all: Vec<i64> = runs.iter().flat_map(|o| o[&pass].1.clone()).collect();
        all.sort();
        assert_eq!(all, common::all_ids(&counts, &[]), "pass {pass}");
    }
}

/// The first error of a loader run (a bounded wait per batch).
fn first_error(loader: feedline_actors::Loader) -> Option<feedline_actors::PipelineError> {
    let mut loader = loader;
    loop {
        match loader.next_timeout(std::time::Duration::from_secs(30))? {
            Ok(_) => continue,
            Err(e @ feedline_actors::PipelineError::Timeout { .. }) => panic!("hang: {e}"),
            Err(e) => return Some(e),
        }
    }
}

#[test]
fn padding_a_rank_with_no_records_fails_the_pipeline() {
    // Rank 1's one file is empty: no rank can pad like the others.
    for rank in 0..2 {
        let loader = synth_loader(SynthFormat::with_files(&[10, 0]).build())
            .shard(rank, 2)
            .shard_by(ShardBy::File)
            .shuffle_files(false)
            .equalize(Equalize::Pad)
            .batch(4)
            .build()
            .unwrap();
        match first_error(loader) {
            Some(feedline_actors::PipelineError::Equalize(m)) => {
                assert!(m.contains("rank 1 has no instances"), "{m}");
                assert!(m.contains("[10, 0]"), "{m}");
            }
            other => panic!("rank {rank}: expected an equalize error, got {other:?}"),
        }
    }
}

#[test]
fn padding_with_nothing_to_repeat_fails_the_pipeline() {
    let synth = SynthFormat::with_files(&[5, 10]).build();
    let specs = synth.specs();
    // f0 has no records from its second opening on (the first is the
    // loader's count): a file that changed between counting and reading.
    let registry = common::Hooked::registry(synth, |o| {
        if o.file == "f0" && o.earlier > 0 {
            o.opts.start_record = u64::MAX;
        }
        None
    });
    // Rank 0 counted 5 records in f0 and pads 5 to rank 1's 10, but reads none.
    let loader = feedline_actors::Loader::builder()
        .registry(registry)
        .files(specs)
        .schema(SynthFormat::schema())
        .shard(0, 2)
        .shard_by(ShardBy::File)
        .shuffle_files(false)
        .equalize(Equalize::Pad)
        .batch(4)
        .build()
        .unwrap();
    match first_error(loader) {
        Some(feedline_actors::PipelineError::Equalize(m)) => {
            assert!(m.contains("none to repeat"), "{m}")
        }
        other => panic!("expected an equalize error, got {other:?}"),
    }
}
