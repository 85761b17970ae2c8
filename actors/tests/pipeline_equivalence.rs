//! The actor pipeline in deterministic mode gives exactly the batches of the
//! core crate's single-thread path (`reader::batches`) — the semantics the
//! pipeline must reproduce — whatever its reader count.

use feedline::batch_policy::BatchPolicy;
use feedline::format::{OpenOptions, Registry};
use feedline::plan::PassPlan;
use feedline::reader::{batches, BatchesConfig, Reader};
use feedline::shuffle::ShuffleConfig;
use feedline::synthetic::{generate, preset_schema, GenOptions, Preset};
use feedline::{Batch, Origin};
use feedline_actors::Loader;

fn summary(b: &Batch) -> (Vec<Origin>, Vec<f32>) {
    (
        b.origins().to_vec(),
        b.f32("x").unwrap().iter().copied().collect(),
    )
}

#[test]
fn deterministic_pipeline_equals_the_single_thread_path() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = GenOptions::new(Preset::Small, dir.path());
    opts.files = Some(7);
    opts.records = Some(333);
    let files: Vec<String> = generate(&opts)
        .unwrap()
        .into_iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let schema = preset_schema(Preset::Small);
    for (seed, pool, batch, chunk) in [
        (1u64, 500usize, 64usize, 100usize),
        (9, 0, 50, 33),
        (4, 2000, 128, 1024),
    ] {
        let plan = PassPlan::new(files.clone()).seed(seed);
        let cfg = BatchesConfig {
            shuffle: ShuffleConfig {
                pool_size: pool,
                min_pool_size: None,
                max_bytes: 256 << 20,
                seed,
            },
            policy: BatchPolicy::Fixed(batch),
            drop_last: false,
            chunk_rows: chunk,
            chunk_bytes: 1 << 20,
        };
        let single = batches(
            Registry::with_builtin(),
            plan,
            schema.clone(),
            OpenOptions::default(),
            cfg,
        )
        .unwrap();
        let mut want = Vec::new();
        for _pass in 0..2 {
            want.extend(single.read().map(|b| summary(&b.unwrap())));
        }
        for readers in [1, 3] {
            let loader = Loader::builder()
                .files(files.clone())
                .schema(schema.clone())
                .readers(readers)
                .seed(seed)
                .shuffle(pool)
                .shuffle_bytes(256 << 20)
                .batch(batch)
                .chunk_records(chunk)
                .passes(2)
                .deterministic(true)
                .build()
                .unwrap();
            let got: Vec<_> = loader
                .into_iter()
                .map(|d| summary(&d.unwrap().batch))
                .collect();
            assert_eq!(
                got.len(),
                want.len(),
                "seed {seed}, readers {readers}: batch count"
            );
            assert!(
                got == want,
                "seed {seed}, pool {pool}, readers {readers}: batches differ"
            );
        }
    }
}

/// Every item of a loader's own iteration with the ends of passes:
/// `(pass, batch summary)` for batches, `(pass, None)` for an end of pass.
type Item = (u64, Option<(Vec<Origin>, Vec<f32>)>);

fn events(loader: &mut Loader) -> Vec<Item> {
    let mut out = Vec::new();
    loop {
        match loader.next_event_timeout(None).unwrap() {
            feedline_actors::Popped::Batch(d) => out.push((d.pass, Some(summary(&d.batch)))),
            feedline_actors::Popped::EndOfPass(p) => out.push((p, None)),
            feedline_actors::Popped::EndOfData => return out,
        }
    }
}

/// `first_pass(n)`: the run starts at pass `n`, and pass `n` (and every
/// later one) is in deterministic mode the very batches the run from pass
/// 0 gives there; `next_event_timeout` marks each pass's end after its
/// last batch. (Mutation: wiring `first_pass` as pass 0's plan — the
/// stages starting at pass 0 — fails the comparison; dropping the end
/// markers fails the marker count.)
#[test]
fn a_run_from_a_later_pass_gives_that_pass_as_the_whole_run_does() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = GenOptions::new(Preset::Small, dir.path());
    opts.files = Some(5);
    opts.records = Some(211);
    let files: Vec<String> = generate(&opts)
        .unwrap()
        .into_iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let build = |first: u64, readers: usize| {
        Loader::builder()
            .files(files.clone())
            .schema(preset_schema(Preset::Small))
            .readers(readers)
            .seed(11)
            .shuffle(300)
            .batch(64)
            .chunk_records(50)
            .passes(4)
            .first_pass(first)
            .deterministic(true)
            .build()
            .unwrap()
    };
    let whole = events(&mut build(0, 2));
    let ends: Vec<u64> = whole
        .iter()
        .filter(|(_, b)| b.is_none())
        .map(|(p, _)| *p)
        .collect();
    assert_eq!(ends, vec![0, 1, 2, 3], "one end marker per pass, in order");
    // Each pass's batches come before its marker, and only its own.
    let mut pass = 0;
    for (p, b) in &whole {
        assert_eq!(*p, pass);
        if b.is_none() {
            pass += 1;
        }
    }
    let passes_differ = whole.iter().filter(|(p, _)| *p == 1).collect::<Vec<_>>()
        != whole.iter().filter(|(p, _)| *p == 2).collect::<Vec<_>>();
    assert!(passes_differ);
    for first in [1u64, 3] {
        let got = events(&mut build(first, 3));
        let want: Vec<Item> = whole.iter().filter(|(p, _)| *p >= first).cloned().collect();
        assert_eq!(got.len(), want.len(), "from pass {first}: item count");
        assert!(
            got == want,
            "from pass {first}: the batches differ from the whole run's"
        );
    }
    // A checkpoint of a run started at a later pass says so.
    let mut l = build(2, 1);
    let _ = l
        .next_timeout(std::time::Duration::from_secs(60))
        .unwrap()
        .unwrap();
    assert_eq!(l.checkpoint().unwrap().pass, 2);
    // Refused: at or past the passes, and together with a resume.
    let cp = l.checkpoint().unwrap();
    drop(l);
    let err = Loader::builder()
        .files(files.clone())
        .passes(2)
        .first_pass(2)
        .build()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("first_pass must be below passes (2), not 2"),
        "{err}"
    );
    let err = Loader::builder()
        .files(files.clone())
        .schema(preset_schema(Preset::Small))
        .seed(11)
        .shuffle(300)
        .batch(64)
        .chunk_records(50)
        .passes(4)
        .deterministic(true)
        .first_pass(1)
        .resume(cp)
        .build()
        .unwrap_err();
    assert!(
        err.to_string().contains("first_pass 1 and a resume"),
        "{err}"
    );
}
