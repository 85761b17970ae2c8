//! The actor pipeline in deterministic mode gives exactly the batches of the
//! core crate's single-thread path (`reader::batches`) — the semantics the
//! pipeline must reproduce — whatever its reader count.

use feedline::batcher::BatchPolicy;
use feedline::format::{OpenOptions, Registry};
use feedline::gen::{generate, preset_schema, GenOptions, Preset};
use feedline::plan::PassPlan;
use feedline::reader::{batches, BatchesConfig, Reader};
use feedline::shuffle::ShuffleConfig;
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
