//! File sets mixed by weight, each with its own readers: every record of
//! every set exactly once per pass, the batches mixed in the weights'
//! proportion while several sets have data, the same batches on every run in
//! deterministic mode whatever the reader counts, and clear errors for bad
//! settings.

mod common;

use std::collections::HashMap;

use common::{synth_registry, SynthFormat};
use feedline_actors::{FileSet, Loader, PipelineError};

/// Files `f0..` of `counts` records; set `s` gets the files listed in `sets[s].1`.
struct Mixed {
    counts: Vec<u64>,
    sets: Vec<(&'static str, Vec<usize>, f64)>,
}

struct Run {
    readers: Vec<usize>,
    passes: u64,
    batch: usize,
    shuffle: usize,
    chunk: usize,
    seed: u64,
    det: bool,
}

impl Mixed {
    /// The set of a record id (files are numbered by id / 1e6).
    fn set_of(&self, id: i64) -> usize {
        let file = (id / 1_000_000) as usize;
        self.sets
            .iter()
            .position(|(_, files, _)| files.contains(&file))
            .expect("a set")
    }

    fn ids_of_set(&self, set: usize) -> Vec<i64> {
        let mut v: Vec<i64> = self.sets[set]
            .1
            .iter()
            .flat_map(|&f| (0..self.counts[f] as i64).map(move |i| f as i64 * 1_000_000 + i))
            .collect();
        v.sort();
        v
    }

    /// (pass, ids) of every batch.
    fn run(&self, r: &Run) -> Vec<(u64, Vec<i64>)> {
        let synth = SynthFormat::with_files(&self.counts).build();
        let mut b = Loader::builder()
            .registry(synth_registry(synth))
            .schema(SynthFormat::schema())
            .passes(r.passes)
            .batch(r.batch)
            .shuffle(r.shuffle)
            .chunk_records(r.chunk)
            .seed(r.seed)
            .deterministic(r.det);
        for (i, (name, files, weight)) in self.sets.iter().enumerate() {
            let specs: Vec<String> = files.iter().map(|f| format!("synth:f{f}")).collect();
            b = b.file_set(
                FileSet::new(*name, specs)
                    .readers(r.readers[i])
                    .weight(*weight),
            );
        }
        b.build()
            .unwrap()
            .into_iter()
            .map(|d| {
                let d = d.unwrap();
                (d.pass, d.batch.i64("id").unwrap().iter().copied().collect())
            })
            .collect()
    }

    /// Every record of every set exactly once in every pass, passes in order.
    fn check_exactly_once(&self, out: &[(u64, Vec<i64>)], passes: u64) {
        let mut last_pass = 0;
        let mut per_pass: HashMap<u64, Vec<i64>> = HashMap::new();
        for (p, ids) in out {
            assert!(*p >= last_pass, "pass {p} after pass {last_pass}");
            last_pass = *p;
            per_pass.entry(*p).or_default().extend(ids);
        }
        assert_eq!(per_pass.len() as u64, passes);
        for (p, ids) in per_pass {
            for set in 0..self.sets.len() {
                let got: Vec<i64> = {
                    let mut g: Vec<i64> = ids
                        .iter()
                        .copied()
                        .filter(|&i| self.set_of(i) == set)
                        .collect();
                    g.sort();
                    g
                };
                assert_eq!(got, self.ids_of_set(set), "pass {p}, set {set}");
            }
        }
    }
}

#[test]
fn two_weighted_sets_give_every_record_once_and_mix_in_proportion() {
    // 30,000 records weighted 3 and 10,000 weighted 1: the mix holds to the
    // end, and at every batch the share of set 1 so far is 1/4 within what
    // one chunk per set and the shuffle pool can shift.
    let mixed = Mixed {
        counts: vec![5000; 8],
        sets: vec![
            ("train", vec![0, 1, 2, 3, 4, 5], 3.0),
            ("extra", vec![6, 7], 1.0),
        ],
    };
    for (seed, readers, shuffle, chunk) in [
        (1u64, vec![1, 1], 256usize, 64usize),
        (2, vec![3, 1], 0, 50),
        (3, vec![1, 4], 512, 100),
        (4, vec![2, 2], 100, 7),
    ] {
        let run = Run {
            readers: readers.clone(),
            passes: 2,
            batch: 64,
            shuffle,
            chunk,
            seed,
            det: false,
        };
        let out = mixed.run(&run);
        mixed.check_exactly_once(&out, 2);
        let slack = (2 * chunk + shuffle + 64) as f64;
        for pass in 0..2 {
            let (mut seen, mut extra) = (0f64, 0f64);
            for (_, ids) in out.iter().filter(|(p, _)| *p == pass) {
                seen += ids.len() as f64;
                extra += ids.iter().filter(|&&i| mixed.set_of(i) == 1).count() as f64;
                assert!(
                    (extra - seen / 4.0).abs() <= slack,
                    "seed {seed}, readers {readers:?}, pass {pass}: {extra} of {seen} from the weight-1 set (want {} ± {slack})",
                    seen / 4.0
                );
            }
        }
    }
}

#[test]
fn a_set_that_runs_out_leaves_the_others_to_go_on() {
    // Equal weights, set 0 has 2,000 records and set 1 has 12,000: the mix is
    // half and half until set 0 is read, then set 1 alone; nothing is lost.
    let mixed = Mixed {
        counts: vec![1000, 1000, 6000, 6000],
        sets: vec![("small", vec![0, 1], 1.0), ("big", vec![2, 3], 1.0)],
    };
    for (seed, readers) in [(5u64, vec![1, 1]), (6, vec![2, 3]), (7, vec![4, 1])] {
        let run = Run {
            readers,
            passes: 3,
            batch: 100,
            shuffle: 0,
            chunk: 20,
            seed,
            det: false,
        };
        let out = mixed.run(&run);
        mixed.check_exactly_once(&out, 3);
        // The first 3,000 records of a pass hold about 1,500 of the small set.
        let first: Vec<i64> = out
            .iter()
            .filter(|(p, _)| *p == 1)
            .flat_map(|(_, ids)| ids.iter().copied())
            .take(3000)
            .collect();
        let small = first.iter().filter(|&&i| mixed.set_of(i) == 0).count();
        assert!(
            (1400..=1600).contains(&small),
            "seed {seed}: {small} of the first 3000 from the small set"
        );
    }
}

#[test]
fn deterministic_mix_is_the_same_whatever_the_reader_counts() {
    let mixed = Mixed {
        counts: vec![700, 0, 1300, 900, 450, 2000],
        sets: vec![
            ("a", vec![0, 1, 2], 2.0),
            ("b", vec![3, 4], 1.0),
            ("c", vec![5], 0.5),
        ],
    };
    let run = |readers: Vec<usize>| Run {
        readers,
        passes: 2,
        batch: 50,
        shuffle: 300,
        chunk: 40,
        seed: 11,
        det: true,
    };
    let want = mixed.run(&run(vec![1, 1, 1]));
    mixed.check_exactly_once(&want, 2);
    // Mixed from the start (2 : 1 : 0.5), not set after set.
    let mut per_set = [0usize; 3];
    for id in want.iter().flat_map(|(_, ids)| ids).take(1500) {
        per_set[mixed.set_of(*id)] += 1;
    }
    assert!(per_set.iter().all(|&n| n >= 100), "{per_set:?}");
    for readers in [vec![3, 2, 1], vec![1, 4, 2], vec![2, 1, 3]] {
        let got = mixed.run(&run(readers.clone()));
        assert_eq!(got, want, "readers {readers:?}");
    }
    // A different seed gives a different order.
    let mut other = run(vec![1, 1, 1]);
    other.seed = 12;
    assert_ne!(mixed.run(&other), want);
}

#[test]
fn bad_file_set_settings_are_refused_with_a_clear_error() {
    let synth = || synth_registry(SynthFormat::with_files(&[10, 10]).build());
    let base = || {
        Loader::builder()
            .registry(synth())
            .schema(SynthFormat::schema())
    };
    let err = |b: feedline_actors::LoaderBuilder| match b.build() {
        Err(PipelineError::Config(m)) => m,
        Err(e) => panic!("not a config error: {e}"),
        Ok(_) => panic!("accepted"),
    };
    let a = || FileSet::new("a", ["synth:f0"]);
    let m = err(base().files(["synth:f1"]).file_set(a()));
    assert!(m.contains("files or file sets, not both"), "{m}");
    let m = err(base()
        .file_set(a())
        .file_set(FileSet::new("a", ["synth:f1"])));
    assert!(m.contains("two file sets are named \"a\""), "{m}");
    let m = err(base().file_set(a().readers(0)));
    assert!(
        m.contains("file set \"a\": readers must be at least 1"),
        "{m}"
    );
    for w in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let m = err(base().file_set(a().weight(w)));
        assert!(
            m.contains("file set \"a\": weight must be a positive number"),
            "{m}"
        );
    }
    let m = err(base().file_set(FileSet::new("a", Vec::<String>::new())));
    assert!(
        m.contains("file set \"a\": the inputs name no files"),
        "{m}"
    );
    let m = err(base()
        .file_set(a())
        .equalize(feedline::plan::Equalize::Drop));
    assert!(m.contains("not supported with file sets"), "{m}");
}
