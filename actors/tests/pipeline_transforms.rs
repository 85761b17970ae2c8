//! Transforms in the actor pipeline: the instance map on its workers with
//! per-instance RNGs (the same batches for any reader and worker count in
//! deterministic mode, and the same as the single-thread path's pixels),
//! failing and panicking maps under fail and skip (exactly once per pass by
//! identity, failures with provenance), the record filter before the
//! shuffle, the batch map.

mod common;

use std::collections::BTreeMap;

use common::{all_ids, assert_exactly_once, ids_per_pass, synth_loader, SynthFormat};
use feedline::format::generator::Sample;
use feedline::transform::{instance_rng, TransformCtx};
use feedline::{Instance, Values};
use feedline_actors::{ErrorPolicy, LoaderBuilder, PipelineError};
use rand::Rng;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `y = x[0] + noise`, noise from the instance's RNG; ids in `fail` fail,
/// ids in `panic` panic.
fn noisy_map(
    fail: &'static [i64],
    panic: &'static [i64],
) -> impl Fn(Instance, &mut TransformCtx) -> Result<Sample, BoxError> + Send + Sync + 'static {
    move |inst, ctx| {
        let id = inst.get("id")?.as_i64().ok_or("id is not i64")?[0];
        if fail.contains(&id) {
            return Err(format!("refused {id}").into());
        }
        if panic.contains(&id) {
            panic!("boom {id}");
        }
        let x = inst.get("x")?.as_f32().ok_or("x is not f32")?[0];
        let y = vec![x + ctx.rng().gen::<f32>(), ctx.rng().gen::<f32>()];
        Ok(Sample::new()
            .with("id", Values::I64(vec![id]), [])
            .with("y", Values::F32(y), [2]))
    }
}

/// (pass, seq, ids, y values) of every batch, in delivery order.
type Batches = Vec<(u64, u64, Vec<i64>, Vec<f32>)>;

fn collect(b: LoaderBuilder) -> Result<Batches, PipelineError> {
    let mut out = Vec::new();
    for d in b.build()? {
        let d = d?;
        let ids = d.batch.i64("id").unwrap().iter().copied().collect();
        let y = d.batch.f32("y").unwrap().iter().copied().collect();
        out.push((d.pass, d.seq, ids, y));
    }
    Ok(out)
}

const COUNTS: [u64; 4] = [40, 25, 33, 12];

#[test]
fn deterministic_augmentations_are_identical_for_any_readers_and_workers() {
    for seed in [1u64, 7, 1234] {
        let mut runs: Vec<((usize, usize), Batches)> = Vec::new();
        for (readers, workers) in [(1, 1), (2, 2), (4, 4), (1, 4), (4, 1), (2, 1)] {
            let b = synth_loader(SynthFormat::with_files(&COUNTS).build())
                .readers(readers)
                .workers(workers)
                .map(noisy_map(&[], &[]))
                .chunk_records(7)
                .shuffle(30)
                .batch(8)
                .passes(2)
                .seed(seed)
                .deterministic(true);
            let got = collect(b).unwrap();
            // Every row is its instance's own draw: (seed, pass, source name, record).
            for (pass, _, ids, y) in &got {
                for (i, id) in ids.iter().enumerate() {
                    let (file, record) = (id / 1_000_000, id % 1_000_000);
                    let mut rng =
                        instance_rng(seed, *pass, &format!("synth:f{file}"), record as u64);
                    assert_eq!(y[2 * i], *id as f32 + rng.gen::<f32>());
                    assert_eq!(y[2 * i + 1], rng.gen::<f32>());
                }
            }
            let per_pass =
                got.iter()
                    .fold(BTreeMap::<u64, Vec<i64>>::new(), |mut m, (p, _, ids, _)| {
                        m.entry(*p).or_default().extend(ids);
                        m
                    });
            assert_exactly_once(&per_pass, &all_ids(&COUNTS, &[]), 2);
            runs.push(((readers, workers), got));
        }
        for (rw, run) in &runs[1..] {
            assert!(
                run == &runs[0].1,
                "seed {seed}: readers/workers {rw:?} gave other batches than {:?}",
                runs[0].0
            );
        }
    }
}

const FAIL: &[i64] = &[3, 1_000_007, 2_000_032];
const PANIC: &[i64] = &[0, 3_000_011, 1_000_024];

#[test]
fn failing_and_panicking_maps_skipped_leave_every_other_record_exactly_once() {
    for (seed, readers, workers) in [(1u64, 1, 1), (2, 2, 2), (3, 4, 4), (4, 3, 1), (5, 1, 3)] {
        let loader = synth_loader(SynthFormat::with_files(&COUNTS).build())
            .readers(readers)
            .workers(workers)
            .map(noisy_map(FAIL, PANIC))
            .error_policy(ErrorPolicy::skip())
            .chunk_records(5)
            .shuffle(20)
            .batch(6)
            .passes(2)
            .seed(seed)
            .build()
            .unwrap();
        let stats = loader.stats_handle();
        let (per_pass, err) = ids_per_pass(loader);
        assert!(err.is_none(), "{err:?}");
        let bad: Vec<i64> = FAIL.iter().chain(PANIC).copied().collect();
        assert_exactly_once(&per_pass, &all_ids(&COUNTS, &bad), 2);
        // Each failure skipped once per pass, with its provenance.
        let mut skipped: Vec<(String, u64, bool)> = stats
            .skipped()
            .iter()
            .map(|s| {
                (
                    s.source.clone(),
                    s.record,
                    s.error.contains("panicked: boom"),
                )
            })
            .collect();
        skipped.sort();
        let mut want: Vec<(String, u64, bool)> = bad
            .iter()
            .flat_map(|id| {
                let s = (
                    format!("synth:f{}", id / 1_000_000),
                    (id % 1_000_000) as u64,
                    PANIC.contains(id),
                );
                [s.clone(), s]
            })
            .collect();
        want.sort();
        assert_eq!(skipped, want, "seed {seed}");
    }
}

#[test]
fn a_failing_map_under_fail_stops_the_pipeline_with_its_provenance() {
    for (ids, what) in [
        (&[1_000_007i64][..], "refused 1000007"),
        (&[2_000_005][..], "panicked: boom 2000005"),
    ] {
        for workers in [1, 3] {
            let (fail, panic): (&'static [i64], &'static [i64]) = if what.starts_with("refused") {
                (Box::leak(ids.to_vec().into_boxed_slice()), &[])
            } else {
                (&[], Box::leak(ids.to_vec().into_boxed_slice()))
            };
            let loader = synth_loader(SynthFormat::with_files(&COUNTS).build())
                .workers(workers)
                .map(noisy_map(fail, panic))
                .batch(4)
                .passes(2)
                .build()
                .unwrap();
            let (_, err) = ids_per_pass(loader);
            let err = err.expect("the pipeline fails").to_string();
            let (file, record) = (ids[0] / 1_000_000, ids[0] % 1_000_000);
            assert!(
                err.contains(&format!("synth:f{file}: record {record}")) && err.contains(what),
                "{err}"
            );
        }
    }
}

#[test]
fn a_skip_budget_counts_transform_failures() {
    let loader = synth_loader(SynthFormat::with_files(&COUNTS).build())
        .map(noisy_map(FAIL, PANIC))
        .error_policy(ErrorPolicy::Skip {
            max_bad: Some(4),
            max_bad_fraction: None,
        })
        .batch(4)
        .passes(1)
        .build()
        .unwrap();
    let (_, err) = ids_per_pass(loader);
    let err = err.expect("over budget").to_string();
    assert!(
        err.contains("too many bad records: 5 skipped, budget 4 records"),
        "{err}"
    );
}

#[test]
fn the_record_filter_before_the_shuffle_keeps_exactly_what_it_should() {
    for (seed, readers) in [(1u64, 1), (2, 3), (3, 4)] {
        let loader = synth_loader(SynthFormat::with_files(&COUNTS).build())
            .readers(readers)
            .filter_records(|inst: &Instance| {
                Ok::<_, BoxError>(inst.get("id")?.as_i64().unwrap()[0] % 3 == 1)
            })
            .map_records(|inst: Instance| {
                let id = inst.get("id")?.as_i64().unwrap()[0];
                let x = Values::F32(vec![-(id as f32); 4]);
                Ok::<_, BoxError>(Instance::new(
                    inst.schema(),
                    vec![Values::I64(vec![id]), x],
                    inst.origin(),
                )?)
            })
            .shuffle(16)
            .batch(5)
            .passes(2)
            .seed(seed)
            .build()
            .unwrap();
        let mut per_pass: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
        for d in loader {
            let d = d.unwrap();
            let x = d.batch.f32("x").unwrap();
            for (i, id) in d.batch.i64("id").unwrap().iter().enumerate() {
                assert_eq!(x[[i, 0]], -(*id as f32), "the record map ran on {id}");
                per_pass.entry(d.pass).or_default().push(*id);
            }
        }
        let want: Vec<i64> = all_ids(&COUNTS, &[])
            .into_iter()
            .filter(|id| id % 3 == 1)
            .collect();
        assert_exactly_once(&per_pass, &want, 2);
    }
}

#[test]
fn a_failing_record_filter_is_a_bad_record_on_the_reader() {
    let loader = synth_loader(SynthFormat::with_files(&COUNTS).build())
        .filter_records(|inst: &Instance| {
            let id = inst.get("id")?.as_i64().unwrap()[0];
            if id == 2_000_010 {
                panic!("filter boom");
            }
            Ok::<_, BoxError>(true)
        })
        .error_policy(ErrorPolicy::skip())
        .batch(7)
        .build()
        .unwrap();
    let stats = loader.stats_handle();
    let (per_pass, err) = ids_per_pass(loader);
    assert!(err.is_none(), "{err:?}");
    assert_exactly_once(&per_pass, &all_ids(&COUNTS, &[2_000_010]), 1);
    let skipped = stats.skipped();
    assert_eq!(skipped.len(), 1);
    assert_eq!(
        (skipped[0].source.as_str(), skipped[0].record),
        ("synth:f2", 10)
    );
    assert!(
        skipped[0].error.contains("panicked: filter boom"),
        "{}",
        skipped[0].error
    );
}

#[test]
fn the_batch_map_runs_on_every_batch() {
    let loader = synth_loader(SynthFormat::with_files(&COUNTS).build())
        .map_batches(|b: feedline::Batch| {
            if b.is_empty() {
                return Err("an empty batch".to_string());
            }
            Ok(b)
        })
        .batch(16)
        .build()
        .unwrap();
    let (per_pass, err) = ids_per_pass(loader);
    assert!(err.is_none(), "{err:?}");
    assert_exactly_once(&per_pass, &all_ids(&COUNTS, &[]), 1);
    let failing = synth_loader(SynthFormat::with_files(&COUNTS).build())
        .map_batches(|_: feedline::Batch| Err::<feedline::Batch, _>("no batches today"))
        .batch(16)
        .build()
        .unwrap();
    let (_, err) = ids_per_pass(failing);
    let err = err.expect("fails").to_string();
    assert!(
        err.contains("batch map on the batch of 16 instances from synth:f")
            && err.contains("no batches today"),
        "{err}"
    );
}

#[test]
fn zero_transform_workers_are_refused() {
    let err = synth_loader(SynthFormat::with_files(&COUNTS).build())
        .map(noisy_map(&[], &[]))
        .workers(0)
        .build()
        .expect_err("refused");
    assert!(
        err.to_string()
            .contains("transform workers must be at least 1"),
        "{err}"
    );
}

#[test]
fn a_slow_consumer_keeps_instances_in_flight_within_the_bound_with_a_map() {
    let counts = [3000u64, 3000, 3000];
    let (readers, in_flight, chunk, pool, capacity, batch, workers) =
        (3usize, 2usize, 64usize, 400usize, 2usize, 32usize, 3usize);
    // Each instance grows 64-fold on the workers (x [4] → y [256]).
    let loader = synth_loader(SynthFormat::with_files(&counts).build())
        .readers(readers)
        .workers(workers)
        .map(|inst: Instance, ctx: &mut TransformCtx| {
            let id = inst.get("id")?.as_i64().ok_or("id")?[0];
            let y: Vec<f32> = (0..256).map(|_| ctx.rng().gen()).collect();
            Ok::<_, BoxError>(Sample::new().with("id", Values::I64(vec![id]), []).with(
                "y",
                Values::F32(y),
                [256],
            ))
        })
        .chunks_in_flight(in_flight)
        .chunk_records(chunk)
        .shuffle(pool)
        .capacity(capacity)
        .batch(batch)
        .build()
        .unwrap();
    let stats = loader.stats_handle();
    // chunks in flight (+ the one being read) × chunk + pool (+ one chunk of
    // overshoot) + queue × batch + one batch being transformed and pushed +
    // one being consumed: the map adds no buffer of its own.
    let bound = (readers * (in_flight + 1) * chunk + pool + chunk + (capacity + 2) * batch) as u64;
    let mut consumed = 0u64;
    let mut worst = 0u64;
    for (i, d) in loader.into_iter().enumerate() {
        let d = d.unwrap();
        assert_eq!(d.batch.f32("y").unwrap().shape()[1], 256);
        consumed += d.batch.len() as u64;
        if i < 60 {
            std::thread::sleep(std::time::Duration::from_millis(3)); // far slower than the readers
        }
        let read = stats.snapshot().readers.records;
        worst = worst.max(read.saturating_sub(consumed));
        assert!(
            read - consumed.min(read) <= bound,
            "{read} read, {consumed} consumed, bound {bound}"
        );
    }
    assert_eq!(consumed, 9000);
    assert!(worst > 0);
}

#[test]
fn a_declared_output_schema_is_the_batches_and_the_readers_keep_the_inputs() {
    let declared = feedline::Schema::builder()
        .field("id", feedline::DType::I64, [])
        .field("y", feedline::DType::F32, [2])
        .build()
        .unwrap();
    let loader = synth_loader(SynthFormat::with_files(&COUNTS).build())
        .map(noisy_map(&[], &[]))
        .output_schema(declared.clone())
        .batch(9)
        .build()
        .unwrap();
    assert!(loader.schema().same(&declared), "{}", loader.schema());
    let (per_pass, err) = ids_per_pass(loader);
    assert!(err.is_none(), "{err:?}");
    assert_exactly_once(&per_pass, &all_ids(&COUNTS, &[]), 1);
}
