//! The Rust `Loader` owns epochs and length: `next_epoch()` gives one pass
//! per call, `set_epoch(p)` makes the next epoch pass `p` — the batches a
//! fresh loader's pass `p` gives, in deterministic mode — and `len()` is
//! the batches of that pass; an epoch whose last batch was taken is over
//! even when its end was not pulled; one left early is gone on with.

mod common;

use common::jsonl_files;
use feedline_actors::{Delivered, Loader, LoaderBuilder};

/// Pass, seq and ids of a delivered batch.
type Got = (u64, u64, Vec<i64>);

fn got(d: &Delivered) -> Got {
    let ids = d.batch.i64("id").unwrap().iter().copied().collect();
    (d.pass, d.seq, ids)
}

const COUNTS: [u64; 4] = [37, 50, 23, 9];

fn builder(files: &[String], seed: u64, world: usize, rank: usize) -> LoaderBuilder {
    Loader::builder()
        .files(files.to_vec())
        .batch(8)
        .shuffle(40)
        .seed(seed)
        .deterministic(true)
        .readers(2)
        .shard(rank, world)
        .passes(10)
}

/// Pass `pass` of a fresh loader that starts there.
fn fresh_pass(files: &[String], seed: u64, world: usize, rank: usize, pass: u64) -> Vec<Got> {
    let loader = builder(files, seed, world, rank)
        .first_pass(pass)
        .passes(pass + 1)
        .build()
        .unwrap();
    loader.into_iter().map(|d| got(&d.unwrap())).collect()
}

#[test]
fn next_epoch_gives_each_pass_as_fresh_loaders_do_and_len_counts_it() {
    let dir = tempfile::tempdir().unwrap();
    let files = jsonl_files(dir.path(), &COUNTS);
    for seed in [1, 7, 23] {
        for (world, rank) in [(1, 0), (3, 1)] {
            let mut loader = builder(&files, seed, world, rank).build().unwrap();
            for pass in 0..3 {
                let want = fresh_pass(&files, seed, world, rank, pass);
                let len = loader
                    .len()
                    .expect("the records of local files are counted");
                let epoch: Vec<Got> = loader.next_epoch().map(|d| got(&d.unwrap())).collect();
                assert_eq!(epoch, want, "seed {seed} rank {rank}/{world} pass {pass}");
                assert_eq!(len, epoch.len() as u64, "len() of pass {pass}");
            }
        }
    }
}

#[test]
fn set_epoch_makes_the_next_epoch_that_pass_and_is_free_when_it_is_already() {
    let dir = tempfile::tempdir().unwrap();
    let files = jsonl_files(dir.path(), &COUNTS);
    let seed = 5;
    let mut loader = builder(&files, seed, 1, 0).build().unwrap();
    // Free: pass 0 is next anyway (the same pipeline goes on).
    loader.set_epoch(0).unwrap();
    let e0: Vec<Got> = loader.next_epoch().map(|d| got(&d.unwrap())).collect();
    assert_eq!(e0, fresh_pass(&files, seed, 1, 0, 0));
    // Jump ahead, then back, then mid-epoch away: each next epoch is the
    // pass asked for, whole.
    for pass in [4, 2, 6] {
        loader.set_epoch(pass).unwrap();
        assert_eq!(
            loader.len(),
            Some(fresh_pass(&files, seed, 1, 0, pass).len() as u64)
        );
        let part: Vec<Got> = loader
            .next_epoch()
            .take(3)
            .map(|d| got(&d.unwrap()))
            .collect();
        assert_eq!(part.len(), 3);
        loader.set_epoch(pass).unwrap(); // three batches taken: starts the pass again
        let e: Vec<Got> = loader.next_epoch().map(|d| got(&d.unwrap())).collect();
        assert_eq!(e, fresh_pass(&files, seed, 1, 0, pass), "set_epoch({pass})");
        assert_eq!(&e[..3], &part[..]);
    }
    // And the epoch after goes on from there.
    let e7: Vec<Got> = loader.next_epoch().map(|d| got(&d.unwrap())).collect();
    assert_eq!(e7, fresh_pass(&files, seed, 1, 0, 7));
}

#[test]
fn an_epoch_left_early_goes_on_and_one_whose_last_batch_was_taken_is_over() {
    let dir = tempfile::tempdir().unwrap();
    let files = jsonl_files(dir.path(), &COUNTS);
    let seed = 11;
    let mut loader = builder(&files, seed, 1, 0).build().unwrap();
    let want0 = fresh_pass(&files, seed, 1, 0, 0);
    let n = loader.len().unwrap() as usize;
    assert_eq!(n, want0.len());
    // Left early: the next call goes on with it, nothing skipped.
    let mut e0: Vec<Got> = loader
        .next_epoch()
        .take(5)
        .map(|d| got(&d.unwrap()))
        .collect();
    e0.extend(loader.next_epoch().map(|d| got(&d.unwrap())));
    assert_eq!(e0, want0);
    // Exactly len() batches taken, the end not pulled: the next call is
    // the next pass (as Lightning's fetcher iterates).
    let e1: Vec<Got> = loader
        .next_epoch()
        .take(n)
        .map(|d| got(&d.unwrap()))
        .collect();
    assert_eq!(e1, fresh_pass(&files, seed, 1, 0, 1));
    let e2: Vec<Got> = loader.next_epoch().map(|d| got(&d.unwrap())).collect();
    assert_eq!(e2, fresh_pass(&files, seed, 1, 0, 2));
    // The checkpoint taken there resumes with pass 3.
    let cp = loader.checkpoint().unwrap();
    assert_eq!(cp.pass, 3);
}

#[test]
fn after_the_last_pass_next_epoch_is_empty_and_set_epoch_beyond_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let files = jsonl_files(dir.path(), &COUNTS);
    let mut loader = builder(&files, 3, 1, 0).passes(2).build().unwrap();
    assert!(loader.next_epoch().count() > 0);
    assert!(loader.next_epoch().count() > 0);
    assert_eq!(loader.next_epoch().count(), 0);
    let e = loader.set_epoch(2).unwrap_err().to_string();
    assert!(
        e.contains("set_epoch(2): this loader runs 2 passes (passes(2)): epochs 0..1"),
        "{e}"
    );
    // Back to pass 1 of the two: it runs again.
    loader.set_epoch(1).unwrap();
    let e1: Vec<Got> = loader.next_epoch().map(|d| got(&d.unwrap())).collect();
    assert_eq!(e1, fresh_pass(&files, 3, 1, 0, 1));
}

#[test]
fn len_says_why_it_is_not_known() {
    let (loader, _feed) = Loader::builder()
        .schema(common::SynthFormat::schema())
        .batch(4)
        .build_with_feed()
        .unwrap();
    assert_eq!(loader.len(), None);
    let e = loader.len_of_pass(0).unwrap_err().to_string();
    assert!(e.contains("the data is pushed"), "{e}");
}
