//! Checkpoint and resume through the `Loader`: a run stopped at
//! a batch, checkpointed (through its JSON form) and resumed — with other
//! reader and device counts — delivers with the batches before the stop
//! every instance of each pass exactly once; in deterministic mode the
//! resumed batches are the uninterrupted run's (ids, values, numbers).
//! Stop points: the first batch, the last batch of a pass, just after a
//! pass boundary, random ones and the very end; with bad records skipped
//! and a reader restart, with file sets, and elastic (3 ranks → 2, 2 → 3,
//! mid-pass).

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{
    all_ids, assert_exactly_once, jsonl_files, synth_registry, CountingFormat, Fault, SynthFormat,
};
use feedline_actors::{Checkpoint, Equalize, ErrorPolicy, FileSet, Loader, LoaderBuilder, ShardBy};
use rand::{Rng, SeedableRng};

/// A delivered batch as compared: pass, seq, ids and the bits of `x`.
type Got = (u64, u64, Vec<i64>, Vec<u32>);

fn got(d: &feedline_actors::Delivered) -> Got {
    let ids = d.batch.i64("id").unwrap().iter().copied().collect();
    let x = d
        .batch
        .f32("x")
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect();
    (d.pass, d.seq, ids, x)
}

const COUNTS: [u64; 5] = [37, 50, 23, 64, 9];

#[derive(Clone, Copy, Debug)]
struct Case {
    seed: u64,
    det: bool,
    readers: usize,
    devices: usize,
    round_robin: bool,
    bad: bool,
    sets: bool,
}

impl Case {
    /// Two readers, one device, no bad records, no file sets.
    fn plain(seed: u64, det: bool) -> Case {
        Case {
            seed,
            det,
            readers: 2,
            devices: 1,
            round_robin: false,
            bad: false,
            sets: false,
        }
    }
}

fn synth(case: &Case) -> SynthFormat {
    let mut s = SynthFormat::with_files(&COUNTS);
    if case.bad {
        for (f, r) in [("f0", 3), ("f1", 0), ("f1", 49), ("f3", 30)] {
            s = s.fault(f, r, Fault::BadRecord);
        }
        // A reader dies once mid-file: replaced, it resumes the file.
        s = s.fault("f2", 10, Fault::Panic { times: 1 });
    }
    s.build()
}

fn bad_ids(case: &Case) -> Vec<i64> {
    if case.bad {
        vec![3, 1_000_000, 1_000_049, 3_000_030]
    } else {
        vec![]
    }
}

/// The builder of `case` with `readers` readers and `devices` devices.
fn builder(case: &Case, readers: usize, devices: usize) -> LoaderBuilder {
    let s = synth(case);
    let specs = s.specs();
    let mut b = Loader::builder()
        .registry(synth_registry(s))
        .schema(SynthFormat::schema())
        .shard_from_env(false)
        .batch(8)
        .shuffle(32)
        .chunk_records(4)
        .passes(2)
        .seed(case.seed)
        .deterministic(case.det)
        .devices(devices)
        .round_robin(case.round_robin);
    if case.bad {
        b = b.error_policy(ErrorPolicy::skip());
    }
    if case.sets {
        b = b
            .file_set(
                FileSet::new("a", specs[..2].to_vec())
                    .readers(readers)
                    .weight(2.0),
            )
            .file_set(
                FileSet::new("b", specs[2..].to_vec())
                    .readers(readers)
                    .weight(1.0),
            );
    } else {
        b = b.files(specs).readers(readers);
    }
    b
}

/// Take `n` batches (or all there are), then the checkpoint, through JSON.
fn take(mut loader: Loader, n: usize) -> (Vec<Got>, Checkpoint) {
    let mut out = Vec::new();
    let mut it = loader.iter();
    while out.len() < n {
        match it.next() {
            Some(d) => out.push(got(&d.unwrap())),
            None => break,
        }
    }
    let cp = loader.checkpoint().unwrap();
    assert_eq!(cp.batches, out.len() as u64);
    let back = Checkpoint::from_json(&cp.to_json(), Path::new("cp.json")).unwrap();
    assert_eq!(back, cp);
    (out, back)
}

fn all(loader: Loader) -> Vec<Got> {
    loader.into_iter().map(|d| got(&d.unwrap())).collect()
}

fn ids_by_pass<'a>(batches: impl IntoIterator<Item = &'a Got>) -> BTreeMap<u64, Vec<i64>> {
    let mut m: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for (p, _, ids, _) in batches {
        m.entry(*p).or_default().extend(ids);
    }
    m
}

/// Stop `case` after `stop` batches, resume with other reader and device
/// counts, check exactly once (and, deterministic, identity with `full`).
fn check_stop(case: &Case, stop: usize, full: &[Got]) {
    let (before, cp) = take(
        builder(case, case.readers, case.devices).build().unwrap(),
        stop,
    );
    let (r2, d2) = (case.readers % 8 + 1, 4 - case.devices);
    let after = all(builder(case, r2, d2).resume(cp.clone()).build().unwrap());
    let mut both = before.clone();
    both.extend(after.iter().cloned());
    let want = all_ids(&COUNTS, &bad_ids(case));
    let per_pass = ids_by_pass(&both);
    // A pass all of whose batches came before the stop has none after.
    assert_exactly_once(&per_pass, &want, 2);
    if case.det {
        assert_eq!(before, full[..before.len()], "{case:?} stop {stop}: before");
        assert!(
            after == full[before.len()..],
            "{case:?} stop {stop}: the resumed batches differ from the uninterrupted run's ({} vs {})",
            after.len(),
            full.len() - before.len()
        );
    }
    // Resuming from the end of the resumed run delivers nothing.
    if stop == 1 {
        let mut resumed = builder(case, r2, d2).resume(cp).build().unwrap();
        let mut n = 0;
        for d in resumed.iter() {
            d.unwrap();
            n += 1;
        }
        let end = resumed.checkpoint().unwrap();
        assert_eq!(end.batches, n as u64);
        assert_eq!(end.pass, 2, "{end:?}");
        let none = all(builder(case, 1, 1).resume(end).build().unwrap());
        assert!(none.is_empty(), "{} batches after the end", none.len());
    }
}

fn stops(full: &[Got], rng: &mut impl Rng) -> Vec<usize> {
    let first_pass = full.iter().filter(|g| g.0 == 0).count();
    let mut s = vec![
        1,
        first_pass - 1,
        first_pass,
        first_pass + 1,
        full.len(),
        rng.gen_range(1..full.len()),
    ];
    s.sort_unstable();
    s.dedup();
    s
}

fn run_cases(det: bool, bad: bool, sets: bool) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(17 + det as u64 + 2 * bad as u64);
    for seed in [1u64, 7, 123] {
        for (readers, devices, round_robin) in [
            (1, 1, false),
            (2, 3, true),
            (8, 3, false),
            (2, 1, false),
            (8, 1, true),
        ] {
            let case = Case {
                seed,
                det,
                readers,
                devices,
                round_robin,
                bad,
                sets,
            };
            let full = all(builder(&case, readers, devices).build().unwrap());
            for stop in stops(&full, &mut rng) {
                check_stop(&case, stop, &full);
            }
        }
    }
}

#[test]
fn deterministic_resume_is_the_uninterrupted_run() {
    run_cases(true, false, false);
}

#[test]
fn shuffled_resume_is_exactly_once_per_pass() {
    run_cases(false, false, false);
}

#[test]
fn skip_policy_with_bad_records() {
    run_cases(true, true, false);
    run_cases(false, true, false);
}

#[test]
fn file_sets() {
    run_cases(true, false, true);
    run_cases(false, false, true);
}

/// Elastic: `old` ranks each stop mid-pass; `new` ranks resume from all
/// their checkpoints; every instance of every pass exactly once across all.
fn elastic(old: usize, new: usize, det: bool, seed: u64) {
    let case = Case::plain(seed, det);
    let counts = [20u64, 31, 17, 40, 25, 12];
    let shard = |b: LoaderBuilder, rank, world| b.shard(rank, world).shard_by(ShardBy::File);
    let make = |rank: usize, world: usize| {
        let s = SynthFormat::with_files(&counts).build();
        let specs = s.specs();
        let b = Loader::builder()
            .registry(synth_registry(s))
            .schema(SynthFormat::schema())
            .files(specs)
            .batch(4)
            .shuffle(16)
            .chunk_records(4)
            .passes(2)
            .seed(case.seed)
            .deterministic(det)
            .readers(case.readers);
        shard(b, rank, world)
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut everything = Vec::new();
    let mut cps = Vec::new();
    for rank in 0..old {
        let full = all(make(rank, old).build().unwrap());
        let in_pass0 = full.iter().filter(|g| g.0 == 0).count();
        let stop = rng.gen_range(1..in_pass0);
        let (before, cp) = take(make(rank, old).build().unwrap(), stop);
        assert_eq!(cp.pass, 0);
        everything.extend(before);
        cps.push(cp);
    }
    cps.reverse(); // the order the checkpoints come in does not matter
    let mut again = Vec::new();
    for rank in 0..new {
        let mut b = make(rank, new);
        for cp in &cps {
            b = b.resume(cp.clone());
        }
        let after = all(b.build().unwrap());
        again.push(after.clone());
        everything.extend(after);
    }
    let want = all_ids(&counts, &[]);
    assert_exactly_once(&ids_by_pass(&everything), &want, 2);
    // Rebalanced: what is left of pass 0 is split between the new ranks
    // record by record (sizes differ by at most one).
    let left: Vec<usize> = (again.iter())
        .map(|a| a.iter().filter(|g| g.0 == 0).map(|g| g.2.len()).sum())
        .collect();
    let (lo, hi) = (left.iter().min().unwrap(), left.iter().max().unwrap());
    assert!(
        hi - lo <= 1,
        "{old} -> {new} seed {seed}: pass 0 left {left:?}"
    );
    // Deterministic for (checkpoints, new world, seed).
    let mut b = make(0, new);
    for cp in &cps {
        b = b.resume(cp.clone());
    }
    if det {
        assert_eq!(all(b.build().unwrap()), again[0]);
    }
}

#[test]
fn elastic_three_ranks_to_two_and_two_to_three() {
    for seed in [3u64, 11, 40] {
        for det in [true, false] {
            elastic(3, 2, det, seed);
            elastic(2, 3, det, seed);
        }
    }
}

#[test]
fn resume_refuses_changed_settings_inputs_and_incomplete_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let text: String = (0..40).map(|i| format!("{{\"v\": {i}}}\n")).collect();
    std::fs::write(&path, &text).unwrap();
    let files = [path.to_str().unwrap().to_string()];
    let base = || {
        Loader::builder()
            .files(files.clone())
            .shard_from_env(false)
            .batch(4)
            .shuffle(8)
            .seed(5)
    };
    let taken = |mut loader: Loader, n: usize| {
        for d in loader.iter().take(n) {
            d.unwrap();
        }
        loader.checkpoint().unwrap()
    };
    let cp = taken(base().build().unwrap(), 3);
    let msg = |b: LoaderBuilder| match b.build() {
        Err(e) => e.to_string(),
        Ok(_) => panic!("resumed"),
    };
    let e = msg(base().batch(5).resume(cp.clone()));
    assert!(
        e.contains("setting `batch` changed since the checkpoint: was 4, now 5"),
        "{e}"
    );
    let e = msg(base().seed(6).resume(cp.clone()));
    assert!(e.contains("`seed`") && e.contains("was 5, now 6"), "{e}");
    // Two checkpoints of one rank are not a job.
    let e = msg(base().resume(cp.clone()).resume(cp.clone()));
    assert!(
        e.contains("every rank of the old job") && e.contains("[0, 0]"),
        "{e}"
    );
    // Checkpoints of one rank of two cannot resume alone under another shard.
    let half = taken(base().shard(1, 2).build().unwrap(), 1);
    let e = msg(base().shard(0, 3).resume(half));
    assert!(e.contains("got ranks [1]"), "{e}");
    // Equalized ranks resume by record too; a padding rank stopped after
    // all its kept instances cannot repeat them: a clear error.
    let eq = |rank| base().equalize(Equalize::Pad).shard(rank, 2);
    let cp_eq = taken(eq(1).build().unwrap(), 1);
    eq(1)
        .resume(cp_eq)
        .build()
        .unwrap()
        .into_iter()
        .for_each(|d| {
            d.unwrap();
        });
    // 40 records by record over 9 ranks: rank 8 has 4 (one batch), pads 1.
    let cp_pad = taken(
        base().equalize(Equalize::Pad).shard(8, 9).build().unwrap(),
        1,
    );
    let e = match base()
        .equalize(Equalize::Pad)
        .shard(8, 9)
        .resume(cp_pad)
        .build()
    {
        Err(e) => e.to_string(),
        Ok(l) => match l.into_iter().find_map(|d| d.err()) {
            Some(e) => e.to_string(),
            None => String::new(),
        },
    };
    assert!(
        e.contains("pads left repeat instances delivered before the stop"),
        "{e}"
    );
    // The file grew.
    std::fs::write(&path, format!("{text}{{\"v\": 40}}\n")).unwrap();
    let e = msg(base().resume(cp));
    assert!(
        e.contains("the inputs changed since the checkpoint")
            && e.contains("a.jsonl: size was")
            && e.contains(&format!("{} bytes", text.len())),
        "{e}"
    );
}

#[test]
fn device_iterators_are_covered() {
    for det in [true, false] {
        for round_robin in [true, false] {
            for seed in [2u64, 9] {
                let case = Case {
                    devices: 3,
                    round_robin,
                    ..Case::plain(seed, det)
                };
                let mut loader = builder(&case, 2, 3).build().unwrap();
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                let threads: Vec<_> = (0..3)
                    .map(|d| {
                        let n = rng.gen_range(1..=4);
                        let it = loader.device_iter(d);
                        std::thread::spawn(move || {
                            it.take(n).map(|b| got(&b.unwrap())).collect::<Vec<_>>()
                        })
                    })
                    .collect();
                let mut before: Vec<Got> = Vec::new();
                for t in threads {
                    before.extend(t.join().unwrap());
                }
                let cp = loader.checkpoint().unwrap();
                assert_eq!(cp.batches, before.len() as u64);
                drop(loader);
                let after = all(builder(&case, 1, 1).resume(cp).build().unwrap());
                let mut both = before.clone();
                both.extend(after.iter().cloned());
                assert_exactly_once(&ids_by_pass(&both), &all_ids(&COUNTS, &[]), 2);
                if det {
                    let full = all(builder(&case, 2, 1).build().unwrap());
                    let mut got = both.clone();
                    got.sort();
                    let mut want = full;
                    want.sort();
                    assert!(got == want, "{case:?}: resumed batches differ");
                }
            }
        }
    }
}

/// Deterministic mode with the draw snapshot every 3 batches (and a byte
/// bound on the pool that decides when draws start, in half the cases): a
/// checkpoint carries the latest snapshot before its first batch not
/// taken, the resume draws on from it — with other reader and device
/// counts — and the batches are still the uninterrupted run's.
#[test]
fn deterministic_resume_from_a_snapshot_of_the_draw() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut used = 0;
    for seed in [1u64, 7, 123] {
        for bad in [false, true] {
            for (readers, devices, round_robin, bytes) in [
                (1, 1, false, None),
                (2, 3, true, Some(600)),
                (8, 3, false, None),
                (8, 1, true, Some(900)),
            ] {
                let case = Case {
                    seed,
                    det: true,
                    readers,
                    devices,
                    round_robin,
                    bad,
                    sets: false,
                };
                let make = |readers, devices| {
                    let b = builder(&case, readers, devices).snapshot_every(3);
                    match bytes {
                        Some(n) => b.shuffle_bytes(n),
                        None => b,
                    }
                };
                let full = all(make(readers, devices).build().unwrap());
                let mut at = stops(&full, &mut rng);
                at.extend((0..3).map(|_| rng.gen_range(1..full.len())));
                for stop in at {
                    let (before, cp) = take(make(readers, devices).build().unwrap(), stop);
                    if let Some(p) = cp.passes.iter().find(|p| !p.complete) {
                        if let Some(s) = &p.snapshot {
                            let taken_in_pass = before.iter().filter(|g| g.0 == p.pass).count();
                            assert!(s.seq <= taken_in_pass as u64 && s.seq % 3 == 0, "{s:?}");
                            used += 1;
                        }
                    }
                    let after = all(make(readers % 8 + 1, 4 - devices)
                        .resume(cp)
                        .build()
                        .unwrap());
                    assert_eq!(before, full[..before.len()], "{case:?} stop {stop}");
                    assert!(
                        after == full[before.len()..],
                        "{case:?} bytes {bytes:?} stop {stop}: the resumed batches differ from the uninterrupted run's"
                    );
                }
            }
        }
    }
    assert!(used > 20, "only {used} checkpoints had a snapshot");
}

/// `Equalize::Pad`, deterministic: every batch of a resumed run — stopped
/// anywhere, the end-of-pass drain with its padding included — carries the
/// padding marks (`padded_rows`, `mask`) of the uninterrupted run's batch.
#[test]
fn padding_marks_survive_a_resume() {
    type Marked = (u64, u64, Vec<i64>, usize, Vec<bool>);
    let marked = |d: &feedline_actors::Delivered| -> Marked {
        let ids = d.batch.i64("id").unwrap().iter().copied().collect();
        let mask = d.batch.mask().iter().copied().collect();
        (d.pass, d.seq, ids, d.batch.padded_rows(), mask)
    };
    let mut padded_seen = 0;
    for seed in [2u64, 11, 31] {
        for world in [2usize, 3] {
            for rank in 0..world {
                let case = Case::plain(seed, true);
                let make = |readers: usize, devices: usize| {
                    builder(&case, readers, devices)
                        .shard(rank, world)
                        .shard_by(ShardBy::File)
                        .equalize(Equalize::Pad)
                };
                let full: Vec<Marked> = (make(2, 1).build().unwrap())
                    .into_iter()
                    .map(|d| marked(&d.unwrap()))
                    .collect();
                padded_seen += full.iter().filter(|m| m.3 > 0).count();
                let per_pass = full.iter().filter(|m| m.0 == 0).count();
                // Every stop in the first pass and at its boundary.
                for stop in 1..=per_pass + 1 {
                    let mut loader = make(2, 1).build().unwrap();
                    let mut before = Vec::new();
                    for d in loader.iter().take(stop) {
                        before.push(marked(&d.unwrap()));
                    }
                    let cp = loader.checkpoint().unwrap();
                    drop(loader);
                    let after: Vec<Marked> = (make(3, 2).resume(cp).build().unwrap())
                        .into_iter()
                        .map(|d| marked(&d.unwrap()))
                        .collect();
                    assert_eq!(before, full[..stop]);
                    assert!(
                        after == full[stop..],
                        "seed {seed} rank {rank}/{world} stop {stop}: padding marks or rows differ after the resume"
                    );
                }
            }
        }
    }
    assert!(padded_seen > 0, "no batch was padded");
}

/// An actix embedder's pipeline: `Pipeline::checkpoint` covers exactly the
/// batches its `Pop` consumer took; a loader resumed from it delivers the
/// rest — in deterministic mode the uninterrupted run's batches.
#[test]
fn pipeline_checkpoint_covers_what_pop_consumers_took() {
    use feedline_actors::{Pipeline, Pop, Popped};
    for det in [true, false] {
        for seed in [3u64, 8] {
            let case = Case::plain(seed, det);
            let full = all(builder(&case, 2, 1).build().unwrap());
            for stop in [1, 9, full.len() / 2 + 1, full.len() - 1] {
                let config = builder(&case, 2, 1).settings().clone();
                let (before, cp) = actix::System::new().block_on(async move {
                    let p = Pipeline::start(config).unwrap();
                    let feed = p.feed();
                    let mut before = Vec::new();
                    while before.len() < stop {
                        match feed.send(Pop { consumer: 0 }).await.unwrap().unwrap() {
                            Popped::Batch(d) => before.push(got(&d)),
                            Popped::EndOfPass(_) => {}
                            Popped::EndOfData => break,
                        }
                    }
                    let cp = p.checkpoint().unwrap();
                    p.join();
                    (before, cp)
                });
                assert_eq!(cp.batches, stop as u64);
                let after = all(builder(&case, 1, 1).resume(cp).build().unwrap());
                let mut both = before.clone();
                both.extend(after.iter().cloned());
                assert_exactly_once(&ids_by_pass(&both), &all_ids(&COUNTS, &[]), 2);
                if det {
                    assert_eq!(before, full[..stop]);
                    assert!(after == full[stop..], "seed {seed} stop {stop}");
                }
            }
        }
    }
}

/// Trainers: a step that fails at its `n+1`-th batch stops the pipeline;
/// `Pipeline::checkpoint` covers exactly the `n` batches stepped, and a
/// loader resumed from it delivers the rest, the failed batch included.
#[test]
fn pipeline_checkpoint_covers_what_trainers_stepped() {
    use feedline_actors::{Delivered, Pipeline, TrainStep};
    use std::sync::{Arc, Mutex};
    struct Step {
        left: usize,
        seen: Arc<Mutex<Vec<Got>>>,
    }
    impl TrainStep for Step {
        fn step(&mut self, _: usize, d: &Delivered) -> Result<(), String> {
            if self.left == 0 {
                return Err("the device failed".into());
            }
            self.left -= 1;
            self.seen.lock().unwrap().push(got(d));
            Ok(())
        }
    }
    for seed in [4u64, 21] {
        let case = Case::plain(seed, true);
        let full = all(builder(&case, 2, 1).build().unwrap());
        for n in [0, 5, full.len() / 2 + 3] {
            let config = builder(&case, 2, 1).settings().clone();
            let seen = Arc::new(Mutex::new(Vec::new()));
            let step = Step {
                left: n,
                seen: seen.clone(),
            };
            let (ended, cp) = actix::System::new().block_on(async move {
                let mut p = Pipeline::start_with_trainers(config, vec![step]).unwrap();
                let ended = p.finished().await;
                let cp = p.checkpoint().unwrap();
                p.join();
                (ended, cp)
            });
            let e = ended.expect_err("the step failed");
            assert!(e.to_string().contains("the device failed"), "{e}");
            let before = seen.lock().unwrap().clone();
            assert_eq!(before.len(), n);
            assert_eq!(cp.batches, n as u64);
            let after = all(builder(&case, 1, 1).resume(cp).build().unwrap());
            assert_eq!(before, full[..n]);
            assert!(after == full[n..], "seed {seed} n {n}");
        }
    }
}

/// A loader over `counts` (one file each), rank `rank` of `world` by file,
/// shuffled, equalized by `how`.
fn equalized(counts: &[u64], rank: usize, world: usize, how: Equalize, seed: u64) -> LoaderBuilder {
    let s = SynthFormat::with_files(counts).build();
    let specs = s.specs();
    Loader::builder()
        .registry(synth_registry(s))
        .schema(SynthFormat::schema())
        .shard_from_env(false)
        .files(specs)
        .batch(4)
        .shuffle(16)
        .chunk_records(4)
        .passes(2)
        .seed(seed)
        .deterministic(false)
        .readers(2)
        .equalize(how)
        .shard(rank, world)
        .shard_by(ShardBy::File)
}

/// Instances, distinct ids and batches of `pass` in `batches`.
fn tally(batches: &[Got], pass: u64) -> (usize, BTreeMap<i64, usize>, usize) {
    let mut ids: BTreeMap<i64, usize> = BTreeMap::new();
    let mut n = 0;
    let mut b = 0;
    for (p, _, i, _) in batches.iter().filter(|g| g.0 == pass) {
        assert_eq!(*p, pass);
        b += 1;
        n += i.len();
        for id in i {
            *ids.entry(*id).or_default() += 1;
        }
    }
    (n, ids, b)
}

#[test]
fn equalized_shuffled_resume_keeps_the_uninterrupted_quota() {
    // Two ranks by file: rank 0 has 20 + 17 + 25 = 62, rank 1 31 + 40 = 71.
    let counts = [20u64, 31, 17, 40, 25];
    for seed in [2u64, 9, 31] {
        for how in [Equalize::Drop, Equalize::Pad] {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            for rank in 0..2 {
                let share: BTreeMap<u64, Vec<i64>> =
                    ids_by_pass(&all(equalized(&counts, rank, 2, Equalize::Off, seed)
                        .build()
                        .unwrap()));
                let full = all(equalized(&counts, rank, 2, how, seed).build().unwrap());
                // Stop among the kept instances of pass 0 (pads, if any, come last).
                let stop = rng.gen_range(1..15);
                let (before, cp) = take(
                    equalized(&counts, rank, 2, how, seed).build().unwrap(),
                    stop,
                );
                assert_eq!(cp.pass, 0);
                let after = all(equalized(&counts, rank, 2, how, seed)
                    .resume(cp)
                    .build()
                    .unwrap());
                let mut both = before.clone();
                both.extend(after);
                for pass in 0..2 {
                    let (n_full, ids_full, b_full) = tally(&full, pass);
                    let (n, ids, b) = tally(&both, pass);
                    let ctx = format!("seed {seed} {how:?} rank {rank} stop {stop} pass {pass}");
                    assert_eq!((n, b), (n_full, b_full), "{ctx}: instances, batches");
                    assert_eq!(ids.len(), ids_full.len(), "{ctx}: distinct records");
                    let repeats =
                        |m: &BTreeMap<i64, usize>| m.values().map(|c| c - 1).sum::<usize>();
                    assert_eq!(repeats(&ids), repeats(&ids_full), "{ctx}: pads");
                    if how == Equalize::Drop {
                        assert_eq!(repeats(&ids), 0, "{ctx}");
                    }
                    let mine: std::collections::BTreeSet<i64> =
                        share[&pass].iter().copied().collect();
                    assert!(
                        ids.keys().all(|i| mine.contains(i)),
                        "{ctx}: a record of another rank"
                    );
                    if how == Equalize::Pad && rank == 0 {
                        // The smaller rank pads: it keeps every record of its share.
                        assert_eq!(ids.len(), mine.len(), "{ctx}");
                    }
                }
            }
        }
    }
}

/// Elastic under equalize: `old` ranks stop mid-pass; `new` ranks resume
/// from all checkpoints. In the resumed pass every new rank delivers the
/// same batches; `Drop` keeps the smallest remainder on each (no record
/// twice), `Pad` pads to the largest (every remaining record delivered).
fn elastic_equalized(old: usize, new: usize, how: Equalize, seed: u64) {
    let counts = [20u64, 31, 17, 40, 25, 12];
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut before = Vec::new();
    let mut cps = Vec::new();
    for rank in 0..old {
        let stop = rng.gen_range(1..3);
        let (got, cp) = take(
            equalized(&counts, rank, old, how, seed).build().unwrap(),
            stop,
        );
        assert_eq!(cp.pass, 0);
        before.extend(got);
        cps.push(cp);
    }
    let resumed = |rank: usize, how: Equalize| {
        let mut b = equalized(&counts, rank, new, how, seed);
        for cp in &cps {
            b = b.resume(cp.clone());
        }
        all(b.build().unwrap())
    };
    let taken: std::collections::BTreeSet<i64> = (before.iter())
        .filter(|g| g.0 == 0)
        .flat_map(|g| g.2.iter().copied())
        .collect();
    assert_eq!(
        taken.len(),
        before.iter().map(|g| g.2.len()).sum::<usize>(),
        "old ranks took a record twice"
    );
    let afters: Vec<Vec<Got>> = (0..new).map(|r| resumed(r, how)).collect();
    // What is left of pass 0 is split evenly between the new ranks.
    let all_left = counts.iter().sum::<u64>() as usize - taken.len();
    let left: Vec<usize> = (0..new)
        .map(|r| all_left * (r + 1) / new - all_left * r / new)
        .collect();
    let (min, max) = (*left.iter().min().unwrap(), *left.iter().max().unwrap());
    let ctx = format!("{old} -> {new} {how:?} seed {seed}, left {left:?}");
    let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
    for (r, after) in afters.iter().enumerate() {
        let (n, ids, b) = tally(after, 0);
        let want = if how == Equalize::Drop { min } else { max };
        assert_eq!(n, want, "{ctx}: new rank {r} instances in the resumed pass");
        assert_eq!(b, want.div_ceil(4), "{ctx}: new rank {r} batches");
        assert!(
            ids.keys().all(|i| !taken.contains(i)),
            "{ctx}: rank {r} delivered a record not left for it"
        );
        if how == Equalize::Pad {
            assert_eq!(ids.len(), left[r], "{ctx}: rank {r} left a record out");
        } else {
            assert!(
                ids.values().all(|&c| c == 1),
                "{ctx}: rank {r} repeated a record"
            );
        }
        for id in ids.keys() {
            *seen.entry(*id).or_default() += 1;
        }
        // The next pass: equalized as usual over the new ranks.
        let (_, _, b1) = tally(after, 1);
        let (_, _, b1_0) = tally(&afters[0], 1);
        assert_eq!(b1, b1_0, "{ctx}: pass 1 batches of rank {r}");
    }
    assert!(
        seen.values().all(|&c| c == 1),
        "{ctx}: a record on two new ranks"
    );
    // Deterministic for (checkpoints, new world, seed) in what it keeps.
    if how == Equalize::Pad {
        let again = resumed(0, how);
        assert_eq!(
            tally(&again, 0).1.keys().collect::<Vec<_>>(),
            tally(&afters[0], 0).1.keys().collect::<Vec<_>>()
        );
    }
}

#[test]
fn elastic_equalized_three_to_two_and_two_to_three() {
    for seed in [4u64, 17, 58] {
        for how in [Equalize::Drop, Equalize::Pad] {
            elastic_equalized(3, 2, how, seed);
            elastic_equalized(2, 3, how, seed);
        }
    }
}

/// A loader over real JSON Lines files, each given as `counted:PATH` so
/// that `reads` keeps which records the readers read (the records carry
/// their file's path as the readers name it: a resume's skip past a
/// consumed prefix is reached, as with any file).
fn counted(files: &[String], registry: feedline_actors::Registry, seed: u64) -> LoaderBuilder {
    Loader::builder()
        .registry(registry)
        .schema(SynthFormat::schema())
        .shard_from_env(false)
        .files(
            files
                .iter()
                .map(|f| format!("counted:{f}"))
                .collect::<Vec<_>>(),
        )
        .batch(4)
        .chunk_records(5)
        .passes(1)
        .seed(seed)
}

/// Shuffled resume of real files (issue 28, item 18): each reader starts
/// its file past the records the checkpoint says were consumed from the
/// file's start — it reads exactly the rest of each file, not one record
/// of the consumed prefix — and the pass is delivered exactly once.
/// Mutations killed (`ResumePlan::start_record`): the reader starting at
/// the file's start (`_ => start` for every range), one record early
/// (`e - 1`: a consumed record read again) and one late (`e + 1`: a record
/// lost).
#[test]
fn a_shuffled_resume_of_real_files_skips_each_consumed_prefix() {
    let counts = [60u64, 45, 80];
    let total: u64 = counts.iter().sum();
    let mut prefixes_seen = 0;
    for seed in [1u64, 2, 3, 4, 5, 6] {
        let dir = tempfile::tempdir().unwrap();
        let files = jsonl_files(dir.path(), &counts);
        let (registry, reads) = CountingFormat::of("jsonl").registry();
        let make = |readers| {
            counted(&files, registry.clone(), seed)
                .shuffle(6)
                .readers(readers)
        };
        let full = all(make(2).build().unwrap());
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let stop = rng.gen_range(full.len() / 2..full.len() - 1);
        let (before, cp) = take(make(2).build().unwrap(), stop);
        // Per file, the end of the consumed prefix [0, e) (0 if none).
        let prefix: BTreeMap<String, u64> = (cp.consumed(0).into_iter())
            .map(|(name, r)| {
                let e = match r.ranges().first() {
                    Some(&[0, e]) => e,
                    _ => 0,
                };
                (name.to_string(), e)
            })
            .collect();
        prefixes_seen += prefix.values().filter(|&&e| e > 0).count();
        reads.take_reads();
        let after = all(make(3).resume(cp).build().unwrap());
        let read = reads.take_reads();
        let mut both = before.clone();
        both.extend(after);
        assert_exactly_once(&ids_by_pass(&both), &all_ids(&counts, &[]), 1);
        for (name, record) in &read {
            let e = prefix.get(name).copied().unwrap_or(0);
            assert!(
                *record >= e,
                "seed {seed}: {name} record {record} read again: it is in the consumed prefix [0, {e})"
            );
        }
        let skipped: u64 = prefix.values().sum();
        assert_eq!(
            read.len() as u64,
            total - skipped,
            "seed {seed}: records read by the resume"
        );
    }
    assert!(prefixes_seen >= 6, "only {prefixes_seen} consumed prefixes");
}

/// A deterministic resume from a snapshot of the draw (issue 28, item 17)
/// reads again only the records in the snapshot's pool, then the pass from
/// where its reading had got to — counted by the readers — and delivers
/// the uninterrupted run's batches. Mutation killed: the snapshot dropped
/// on resume (`RestoredDraw::of` giving `Ok(None)`): the test fails (its
/// resumed batches differ; a plan that dropped the snapshot cleanly would
/// read the pass from its start, which the read count refuses).
#[test]
fn a_deterministic_resume_reads_only_the_pooled_records_again() {
    use std::sync::atomic::Ordering;
    let total: u64 = COUNTS.iter().sum();
    let mut checked = 0;
    for seed in [1u64, 7, 123] {
        let make = |s: SynthFormat| {
            let specs = s.specs();
            Loader::builder()
                .registry(synth_registry(s))
                .schema(SynthFormat::schema())
                .shard_from_env(false)
                .files(specs)
                .batch(8)
                .shuffle(32)
                .chunk_records(4)
                .passes(1)
                .seed(seed)
                .deterministic(true)
                .snapshot_every(3)
                .readers(2)
        };
        let full = all(make(SynthFormat::with_files(&COUNTS).build())
            .build()
            .unwrap());
        for stop in [4, 9, full.len() / 2, full.len() - 2] {
            let (before, cp) = take(
                make(SynthFormat::with_files(&COUNTS).build())
                    .build()
                    .unwrap(),
                stop,
            );
            let s = cp.passes[0]
                .snapshot
                .clone()
                .expect("a snapshot of the draw");
            let synth = SynthFormat::with_files(&COUNTS).build();
            let reads = synth.reads();
            let after = all(make(synth).readers(3).resume(cp).build().unwrap());
            assert!(
                after == full[stop..],
                "seed {seed} stop {stop}: other batches"
            );
            assert_eq!(before, full[..stop]);
            let want = s.row_records.len() as u64 + total - s.pass_records;
            assert!(s.pass_records > s.row_records.len() as u64);
            assert_eq!(
                reads.load(Ordering::Relaxed),
                want,
                "seed {seed} stop {stop}: records read by the resume ({} pooled, {} of {total} taken before)",
                s.row_records.len(),
                s.pass_records
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 12);
}

/// The error a builder gives instead of a loader.
fn refused(b: LoaderBuilder) -> String {
    match b.build() {
        Err(e) => e.to_string(),
        Ok(_) => panic!("resumed"),
    }
}

/// Hand-edited or damaged checkpoints (issue 28, item 7), of real files:
/// each edit of a field against what it must agree with — the files'
/// record counts, the other fields, the settings, the pass plan, the other
/// ranks' checkpoints — is refused before anything starts, naming the
/// field: no spin (a range to 2^64 - 1), no abort (capacities of 1e11 and
/// 2^62), no panic (free slots out of range or in use). The intact
/// checkpoints resume. Mutations killed, one per check: each `return
/// Err(invalid(..))` of `resume_plan/check.rs` and `Checkpoint::validate`
/// made to go on (the case naming it then resumes, spins or panics).
#[test]
fn hostile_checkpoints_are_refused_naming_the_field() {
    let counts = [60u64, 45, 80];
    let dir = tempfile::tempdir().unwrap();
    let files = jsonl_files(dir.path(), &counts);
    let make = |det: bool| {
        Loader::builder()
            .files(files.clone())
            .schema(SynthFormat::schema())
            .shard_from_env(false)
            .batch(8)
            .shuffle(32)
            .chunk_records(4)
            .passes(2)
            .seed(9)
            .deterministic(det)
            .snapshot_every(3)
    };
    let (_, det) = take(make(true).build().unwrap(), 7);
    let (_, shuffled) = take(make(false).build().unwrap(), 7);
    let snap = det.passes[0].snapshot.clone().expect("a snapshot");
    assert!(snap.next_file < 3, "{snap:?}");
    // Both resume as they are.
    all(make(true).resume(det.clone()).build().unwrap());
    all(make(false).resume(shuffled.clone()).build().unwrap());

    type Edit = Box<dyn Fn(&mut Checkpoint)>;
    let on_snapshot = |f: Box<dyn Fn(&mut feedline_actors::checkpoint::DrawSnapshot)>| -> Edit {
        Box::new(move |c: &mut Checkpoint| f(c.passes[0].snapshot.as_mut().unwrap()))
    };
    // A source's records with its last consumed record moved to `to`.
    let moved = |c: &mut Checkpoint, to: u64| {
        let (&s, r) = c.passes[0].records.iter().next().unwrap();
        let mut rec: Vec<u64> = r.records().collect();
        rec.pop();
        rec.push(to);
        let r = feedline_actors::checkpoint::RecordRanges::from_records(rec);
        c.passes[0].records.insert(s, r);
        s
    };
    let cases: Vec<(bool, Edit, &str, &str)> = vec![
        (
            false,
            Box::new(move |c| {
                let s = moved(c, 60);
                assert!(c.sources[s as usize].ends_with("f0.jsonl"));
            }),
            "checkpoint field `passes[0].records.0`",
            "f0.jsonl is beyond its 60 records",
        ),
        (
            false,
            Box::new(|c| {
                let r = feedline_actors::checkpoint::RecordRanges::from_ranges([[0, u64::MAX]]);
                c.passes[0].records.insert(0, r);
            }),
            "checkpoint field `passes[0].batches`",
            "is 7, too few for the pass's",
        ),
        (
            false,
            Box::new(|c| {
                c.sources[0] = format!("{}.other", c.sources[0]);
            }),
            "checkpoint field `sources[0]`",
            "is not one of the inputs",
        ),
        (
            true,
            Box::new(|c| {
                c.passes[0].seqs = feedline_actors::checkpoint::RecordRanges::from_ranges([[0, 8]])
            }),
            "checkpoint field `passes[0].seqs`",
            "numbers 8 batches, but `batches` is 7",
        ),
        (
            false,
            Box::new(|c| {
                c.passes.clear();
                c.pass = 5;
            }),
            "checkpoint field `pass`",
            "is 5, beyond the 2 passes of these settings",
        ),
        (
            false,
            Box::new(|c| c.passes[0].pass = 2),
            "checkpoint field `passes[0].pass`",
            "is 2, beyond the 2 passes of these settings",
        ),
        (
            true,
            Box::new(|c| c.pass = 1),
            "checkpoint field `pass`",
            "a pass beyond the passes run",
        ),
        (
            true,
            Box::new(|c| c.deterministic = false),
            "checkpoint field `deterministic`",
            "settings say `deterministic` = true",
        ),
        (
            true,
            Box::new(|c| {
                c.deterministic = false;
                c.passes[0].snapshot = None;
                c.settings = c.settings.clone().with("deterministic", false);
            }),
            "setting `deterministic`",
            "changed since the checkpoint: was false, now true",
        ),
        (
            true,
            on_snapshot(Box::new(|s| s.capacities[0] = 100_000_000_000)),
            "checkpoint field `passes[0].snapshot.capacities[0]`",
            "is 100000000000, beyond the",
        ),
        (
            true,
            on_snapshot(Box::new(|s| s.capacities[1] = 1 << 62)),
            "checkpoint field `passes[0].snapshot.capacities[1]`",
            "beyond the",
        ),
        (
            true,
            on_snapshot(Box::new(|s| s.free_slots.push(9999))),
            "checkpoint field `passes[0].snapshot.free_slots[",
            "slot 9999 is out of range",
        ),
        (
            true,
            on_snapshot(Box::new(|s| s.word_pos = u64::MAX)),
            "checkpoint field `passes[0].snapshot.word_pos`",
            "beyond the",
        ),
        (
            true,
            on_snapshot(Box::new(|s| s.next_file = 7)),
            "checkpoint field `passes[0].snapshot.next_file`",
            "has 3 files here",
        ),
        (
            true,
            on_snapshot(Box::new(|s| s.next_record = Some(1 << 40))),
            "checkpoint field `passes[0].snapshot.next_record`",
            "is 1099511627776, but",
        ),
        (
            true,
            on_snapshot(Box::new(|s| {
                s.row_records[0] = s.row_records[0].max(1) * 1000 + 10_000
            })),
            "checkpoint field `passes[0].snapshot.row_records[0]`",
            "records",
        ),
        (
            true,
            on_snapshot(Box::new(|s| {
                s.batcher_rows = [s.batcher_rows[0] + 8, s.batcher_rows[1] + 8];
                s.pass_records += 8;
            })),
            "checkpoint field `passes[0].snapshot.batcher_rows`",
            "batches of 8 make",
        ),
        (
            true,
            on_snapshot(Box::new(|s| s.pass_records += 1)),
            "checkpoint field `passes[0].snapshot.pass_records`",
            "rows do not add up",
        ),
    ];
    for (k, (is_det, edit, field, what)) in cases.into_iter().enumerate() {
        let mut c = if is_det {
            det.clone()
        } else {
            shuffled.clone()
        };
        edit(&mut c);
        // Through the file format too: the checksum made again for the edit.
        let c = Checkpoint::from_json(&c.to_json(), Path::new("cp.json")).unwrap_or(c);
        let e = refused(make(is_det).resume(c));
        assert!(
            e.contains(field) && e.contains(what),
            "case {k} ({field}): {e}"
        );
    }
    // Where reading goes on moved back: records taken twice.
    if let Some(r) = snap.next_record.filter(|&r| r > 0) {
        let mut c = det.clone();
        c.passes[0].snapshot.as_mut().unwrap().next_record = Some(r - 1);
        let e = refused(make(true).resume(c));
        assert!(
            e.contains("checkpoint field `passes[0].snapshot.pass_records`")
                && e.contains("more than"),
            "{e}"
        );
    }
    // Two ranks that consumed the same record.
    let ranks: Vec<Checkpoint> = (0..2)
        .map(|rank| take(make(false).shard(rank, 2).build().unwrap(), 3).1)
        .collect();
    let mut both = ranks.clone();
    let theirs = ranks[0].consumed(0);
    let (name, r) = theirs.iter().next().unwrap();
    let record = r.ranges()[0][0];
    let s = both[1]
        .sources
        .iter()
        .position(|x| x == name)
        .map(|i| i as u32);
    let s = s.unwrap_or_else(|| {
        both[1].sources.push(name.to_string());
        (both[1].sources.len() - 1) as u32
    });
    let mine = both[1].passes[0].records.entry(s).or_default();
    *mine = feedline_actors::checkpoint::RecordRanges::from_records(mine.records().chain([record]));
    // (its batch count has room for one record more only if short of a batch)
    both[1].passes[0].batches += 1;
    let seqs = &both[1].passes[0].seqs;
    both[1].passes[0].seqs = feedline_actors::checkpoint::RecordRanges::from_ranges(
        seqs.ranges().iter().copied().chain([[1000, 1001]]),
    );
    let mut b = make(false).shard(0, 3);
    for c in &both {
        b = b.resume(c.clone());
    }
    let e = refused(b);
    assert!(
        e.contains("checkpoint field `resume[1].passes[0].records.")
            && e.contains(&format!(
                "record {record} of pass 0 was consumed by the rank of resume[0] too"
            )),
        "{e}"
    );
    let mut b = make(false).shard(0, 3);
    for c in &ranks {
        b = b.resume(c.clone());
    }
    all(b.build().unwrap());
}

/// A changed input is refused on resume (issue 28, item 13), at the
/// loader: a file rewritten to the same size with its modification time
/// put back is told by its content. Mutation killed: the content
/// comparison in `InputFingerprint::check_unchanged` disabled.
#[test]
fn resume_refuses_a_file_rewritten_to_the_same_size() {
    let dir = tempfile::tempdir().unwrap();
    let files = jsonl_files(dir.path(), &[40, 30]);
    let make = || {
        Loader::builder()
            .files(files.clone())
            .schema(SynthFormat::schema())
            .shard_from_env(false)
            .batch(4)
            .shuffle(8)
    };
    let (_, cp) = take(make().build().unwrap(), 3);
    let path = Path::new(&files[1]);
    let mtime = std::fs::metadata(path).unwrap().modified().unwrap();
    let text = std::fs::read_to_string(path).unwrap();
    // Record 7's id written as record 8's: same size, other data.
    std::fs::write(
        path,
        text.replacen("{\"id\": 1000007,", "{\"id\": 1000008,", 1),
    )
    .unwrap();
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let e = refused(make().resume(cp));
    assert!(
        e.contains("the inputs changed since the checkpoint")
            && e.contains(&format!("{}: content changed (same size", files[1])),
        "{e}"
    );
}

/// An instance map known by its name alone, as the built-in image
/// transforms are by their canonical spec (`feedline run --transform`:
/// `cli_checkpoint.rs` resumes those).
struct Spec(&'static str);

impl feedline_actors::feedline::transform::InstanceMap for Spec {
    fn map(
        &self,
        row: &feedline_actors::feedline::transform::Row<'_>,
        _: &mut feedline_actors::feedline::transform::TransformCtx,
    ) -> Result<feedline_actors::Sample, feedline_actors::feedline::transform::BoxError> {
        Ok(feedline_actors::Sample::new().with("id", row.values("id")?, []))
    }

    fn name(&self) -> String {
        self.0.to_string()
    }
}

/// Changed transforms are refused on resume (issue 28, item 14): an
/// instance map by its name (the image transforms' canonical spec), a user
/// map by its declared name and version, the record stage by its kind,
/// the user's declared version of their transform code — each naming the
/// changed field, old vs new; the same ones resume. Mutations killed: the
/// transforms fingerprinted by presence only (as version 1 did); the
/// instance map's version, the record stage or `transform_version` left
/// out of `order_settings`.
#[test]
fn resume_refuses_changed_transforms_naming_them() {
    use feedline_actors::feedline::transform::{map_fn, BoxError, TransformCtx};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let files = jsonl_files(dir.path(), &[40]);
    let base = || {
        Loader::builder()
            .files(files.clone())
            .schema(SynthFormat::schema())
            .shard_from_env(false)
            .batch(4)
    };
    let spec = |s: &'static str| base().transform(Arc::new(Spec(s)));
    // The checkpoint of a loader that took nothing yet: its settings.
    let cp_of = |b: LoaderBuilder| b.build().unwrap().checkpoint().unwrap();
    let cp = cp_of(spec("decode,resize(16x16)"));
    spec("decode,resize(16x16)")
        .resume(cp.clone())
        .build()
        .unwrap();
    let e = refused(spec("decode,resize(8x8),to-f32").resume(cp.clone()));
    assert_eq!(
        e,
        "setting `transforms.instance.name` changed since the checkpoint: was decode,resize(16x16), now decode,resize(8x8),to-f32"
    );
    let e = refused(base().resume(cp));
    assert!(
        e.contains("`transforms.instance` changed") && e.contains("now null"),
        "{e}"
    );

    let named = |version: &str| {
        let ids = |i: feedline_actors::feedline::Instance, _: &mut TransformCtx| {
            let id = i.get("id").map_err(|e| e.to_string())?.clone();
            Ok::<_, BoxError>(feedline_actors::Sample::new().with("id", id, []))
        };
        base().transform(Arc::new(map_fn(ids).named("ids", version)))
    };
    let cp = cp_of(named("1"));
    named("1").resume(cp.clone()).build().unwrap();
    let e = refused(named("2").resume(cp));
    assert!(
        e.contains("`transforms.instance.version` changed") && e.contains("was 1, now 2"),
        "{e}"
    );

    let cp = cp_of(base().filter_records(|_| Ok::<_, BoxError>(true)));
    let e = refused(base().resume(cp));
    assert!(
        e.contains("`transforms.records` changed") && e.contains("was filter, now null"),
        "{e}"
    );

    let cp = cp_of(base().transform_version("2024-06"));
    base()
        .transform_version("2024-06")
        .resume(cp.clone())
        .build()
        .unwrap();
    let e = refused(base().transform_version("2024-07").resume(cp));
    assert_eq!(
        e,
        "setting `transforms.version` changed since the checkpoint: was 2024-06, now 2024-07"
    );
}

/// `peek_event_timeout` shows the next item without taking it: the next
/// call gives that same item, a checkpoint taken after the peek does not
/// count it and one taken after the call does — over every batch and end
/// of pass of two passes, for several seeds (the same stream as without
/// peeking, deterministic mode).
#[test]
fn a_peeked_item_is_the_next_one_and_taken_only_when_given() {
    use feedline_actors::Popped;
    for seed in [1, 7, 19] {
        let case = Case::plain(seed, true);
        let plain = all(builder(&case, 2, 1).build().unwrap());
        let mut loader = builder(&case, 2, 1).build().unwrap();
        let mut peeked_stream = Vec::new();
        let mut ends = Vec::new();
        loop {
            let before = loader.checkpoint().unwrap();
            let shown = match loader.peek_event_timeout(None).unwrap() {
                Popped::Batch(d) => Some(got(d)),
                Popped::EndOfPass(p) => {
                    ends.push(*p);
                    None
                }
                Popped::EndOfData => break,
            };
            // A second peek shows the same item; the checkpoint is unmoved.
            let again = match loader.peek_event_timeout(None).unwrap() {
                Popped::Batch(d) => Some(got(d)),
                _ => None,
            };
            assert_eq!(again, shown, "seed {seed}");
            assert_eq!(loader.checkpoint().unwrap(), before, "a peek takes nothing");
            let taken = match loader.next_event_timeout(None).unwrap() {
                Popped::Batch(d) => Some(got(&d)),
                Popped::EndOfPass(p) => {
                    assert_eq!(Some(&p), ends.last());
                    None
                }
                Popped::EndOfData => unreachable!("peeked a batch or an end of pass"),
            };
            assert_eq!(taken, shown, "seed {seed}: the call gives the peeked item");
            if let Some(b) = taken {
                let after = loader.checkpoint().unwrap();
                assert_eq!(
                    after.batches,
                    before.batches + 1,
                    "seed {seed}: taken when given"
                );
                peeked_stream.push(b);
            }
        }
        assert_eq!(ends, vec![0, 1]);
        assert_eq!(
            peeked_stream, plain,
            "seed {seed}: the same stream as without peeks"
        );
    }
}

/// Issue 39: `Loader::save_checkpoint` never replaces one of the loader's
/// own inputs — a data file reached through a list file, the list file
/// itself — nor a FIFO, and a path in a missing directory is named with
/// that directory (not the temporary file's name); nothing at the path is
/// touched (inode, kind, size). A previous checkpoint is replaced, and
/// resumes. Mutation caught: `Loader::save_checkpoint` saving with
/// `InputFiles::new()` — the list file and the data file are replaced by
/// the JSON.
#[cfg(unix)]
#[test]
fn save_checkpoint_spares_the_inputs_and_names_a_missing_directory() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let files = jsonl_files(d, &[20, 30]);
    let list = d.join("train.list");
    std::fs::write(&list, format!("{}\n{}\n", files[0], files[1])).unwrap();
    let build = || {
        Loader::builder()
            .files([format!("@{}", list.display())])
            .batch(5)
            .shuffle(8)
            .seed(3)
    };
    let mut loader = build().build().unwrap();
    let first: Vec<Vec<i64>> = (loader.iter().take(3))
        .map(|b| {
            b.unwrap()
                .batch
                .i64("id")
                .unwrap()
                .iter()
                .copied()
                .collect()
        })
        .collect();
    let state = |p: &Path| {
        let m = std::fs::symlink_metadata(p).unwrap();
        (m.ino(), m.file_type(), m.len(), std::fs::read(p).ok())
    };
    let data = std::path::PathBuf::from(&files[1]);
    for (path, input) in [(&data, &data), (&list, &list)] {
        let before = state(path);
        let e = loader.save_checkpoint(path).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{}: that is one of this loader's input files ({}); saving a checkpoint there \
                 would destroy it: give another path",
                path.display(),
                input.display()
            )
        );
        assert_eq!(state(path), before);
    }
    let fifo = d.join("cp.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.unwrap().success(), "mkfifo");
    let before = std::fs::symlink_metadata(&fifo).unwrap();
    let e = loader.save_checkpoint(&fifo).unwrap_err().to_string();
    assert!(e.contains("that is a FIFO, not a regular file"), "{e}");
    let after = std::fs::symlink_metadata(&fifo).unwrap();
    assert_eq!(
        (before.ino(), before.file_type()),
        (after.ino(), after.file_type())
    );
    let missing = d.join("nonexistent/dir/c.json");
    let e = loader.save_checkpoint(&missing).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}: cannot save a checkpoint there: the directory {} does not exist",
            missing.display(),
            d.join("nonexistent/dir").display()
        )
    );
    // Over a previous checkpoint: replaced, and it resumes.
    let cp = d.join("cp.json");
    std::fs::write(&cp, "old").unwrap();
    loader.save_checkpoint(&cp).unwrap();
    loader.save_checkpoint(&cp).unwrap();
    drop(loader);
    let saved = Checkpoint::load(&cp).unwrap();
    assert_eq!(saved.batches, 3);
    let rest: Vec<Vec<i64>> = (build().resume(saved).build().unwrap().into_iter())
        .map(|b| {
            b.unwrap()
                .batch
                .i64("id")
                .unwrap()
                .iter()
                .copied()
                .collect()
        })
        .collect();
    let mut ids: Vec<i64> = first.into_iter().chain(rest).flatten().collect();
    ids.sort_unstable();
    let mut want: Vec<i64> = (0..20).chain(1_000_000..1_000_030).collect();
    want.sort_unstable();
    assert_eq!(ids, want);
}
