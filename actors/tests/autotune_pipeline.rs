//! Autotuning in a running pipeline: the settings change while batches
//! are made (a slow map keeps the batch maker the limiting stage, and the
//! tuner ticks every few milliseconds), and still every record of a pass
//! comes exactly once; in deterministic mode the batches are those of the
//! untuned run, and a checkpoint taken while tuning resumes to them. The
//! budgets are checked with every other setting.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{all_ids, assert_exactly_once, ids_per_pass, synth_loader, SynthFormat};
use feedline::format::generator::Sample;
use feedline::transform::{BoxError, TransformCtx};
use feedline::{Instance, Values};
use feedline_actors::{Autotune, Checkpoint, Given, Loader, LoaderBuilder, PipelineError};
use rand::Rng;

const COUNTS: [u64; 4] = [120, 90, 150, 60];

/// A slow map (it sleeps 300 µs a row) whose output draws on the row's RNG.
fn slow(b: LoaderBuilder) -> LoaderBuilder {
    b.map(|inst: Instance, ctx: &mut TransformCtx| {
        std::thread::sleep(Duration::from_micros(300));
        let id = inst.get("id")?.as_i64().ok_or("id")?[0];
        let noise: f32 = ctx.rng().gen();
        Ok::<_, BoxError>(Sample::new().with("id", Values::I64(vec![id]), []).with(
            "noise",
            Values::F32(vec![noise]),
            [1],
        ))
    })
}

fn base(seed: u64, deterministic: bool) -> LoaderBuilder {
    slow(synth_loader(SynthFormat::with_files(&COUNTS).build()))
        .shard_from_env(false)
        .batch(8)
        .chunk_records(8)
        .shuffle(64)
        .passes(2)
        .seed(seed)
        .deterministic(deterministic)
}

fn tuned(b: LoaderBuilder) -> LoaderBuilder {
    b.autotune(Autotune {
        cpus: Some(8),
        memory_budget: None,
    })
    .autotune_interval(Duration::from_millis(5))
}

/// A batch as compared: pass, number, ids, the noise's bits.
type Got = (u64, u64, Vec<i64>, Vec<u32>);

fn got(d: &feedline_actors::Delivered) -> Got {
    let ids = d.batch.i64("id").unwrap().iter().copied().collect();
    let noise = (d.batch.f32("noise").unwrap().iter())
        .map(|v| v.to_bits())
        .collect();
    (d.pass, d.seq, ids, noise)
}

/// Every batch of `loader`, and how many changes its tuner tried.
fn all(loader: Loader) -> (Vec<Got>, u64) {
    let stats = loader.stats_handle();
    let batches = loader.into_iter().map(|d| got(&d.unwrap())).collect();
    let trials = stats.snapshot().autotune.map_or(0, |a| a.trials);
    (batches, trials)
}

#[test]
fn with_tuning_on_every_record_comes_once_per_pass() {
    let want = all_ids(&COUNTS, &[]);
    for seed in [1, 2, 3] {
        let loader = tuned(base(seed, false)).build().unwrap();
        let stats = loader.stats_handle();
        let (per_pass, err) = ids_per_pass(loader);
        assert!(err.is_none(), "seed {seed}: {err:?}");
        assert_exactly_once(&per_pass, &want, 2);
        let a = stats.snapshot().autotune.expect("tuning on: its snapshot");
        assert!(a.trials >= 1, "seed {seed}: the settings never changed");
        // Each pool at most the 8 CPUs of the budget.
        assert!(a.values.workers <= 8 && a.values.readers <= 8);
        assert!(a.workers_max <= 8);
    }
}

#[test]
fn deterministic_batches_are_the_same_with_tuning_on_and_off() {
    for seed in [4, 5] {
        let (untuned, none) = all(base(seed, true).build().unwrap());
        assert_eq!(none, 0);
        let (tuned, trials) = all(tuned(base(seed, true)).build().unwrap());
        assert!(trials >= 1, "seed {seed}: the settings never changed");
        assert_eq!(tuned.len(), untuned.len());
        assert!(
            tuned == untuned,
            "seed {seed}: other batches with tuning on"
        );
    }
}

#[test]
fn a_checkpoint_taken_while_tuning_resumes_to_the_uninterrupted_batches() {
    let (full, _) = all(base(6, true).build().unwrap());
    for stop in [5, full.len() / 2, full.len() - 3] {
        let mut loader = tuned(base(6, true)).build().unwrap();
        let mut before = Vec::new();
        {
            let mut it = loader.iter();
            while before.len() < stop {
                before.push(got(&it.next().unwrap().unwrap()));
            }
        }
        let cp = loader.checkpoint().unwrap();
        drop(loader);
        let cp = Checkpoint::from_json(&cp.to_json(), Path::new("cp.json")).unwrap();
        let (after, _) = all(tuned(base(6, true)).resume(cp).build().unwrap());
        before.extend(after);
        assert!(
            before == full,
            "stop at {stop}: other batches after the resume"
        );
    }
}

#[test]
fn without_autotuning_the_statistics_have_no_autotune() {
    let loader = synth_loader(SynthFormat::with_files(&[10]).build())
        .build()
        .unwrap();
    let stats = loader.stats_handle();
    let _ = ids_per_pass(loader);
    assert!(stats.snapshot().autotune.is_none());
}

fn refused(b: LoaderBuilder) -> String {
    match b.build() {
        Err(PipelineError::Config(e)) => e.to_string(),
        Err(e) => panic!("expected a Config error, got {e}"),
        Ok(_) => panic!("accepted"),
    }
}

#[test]
fn budgets_are_checked_with_every_setting() {
    let b = || synth_loader(SynthFormat::with_files(&[10]).build());
    let m = refused(b().autotune(Autotune {
        cpus: Some(0),
        memory_budget: None,
    }));
    assert_eq!(m, "cpus must be at least 1, not 0");
    let m = refused(b().autotune(Autotune {
        cpus: None,
        memory_budget: Some(0),
    }));
    assert_eq!(m, "memory_budget must be at least 1 byte, not 0");
    // Readers given: 3 threads are more than 2 CPUs.
    let m = refused(b().readers(3).autotune(Autotune {
        cpus: Some(2),
        memory_budget: None,
    }));
    assert!(m.starts_with("cpus(2) is fewer than the threads"), "{m}");
    assert!(m.contains("3 readers and 0 transform workers"), "{m}");
    // Deterministic mode holds its reorder window (64 MiB) whatever the records.
    let m = refused(b().deterministic(true).autotune(Autotune {
        cpus: None,
        memory_budget: Some(1 << 20),
    }));
    assert!(
        m.starts_with("memory_budget(1048576) is below the least in-flight bound"),
        "{m}"
    );
    assert!(m.contains(&format!("{} bytes", 64 << 20)), "{m}");
    // Readers not given are the tuner's: one reader fits one CPU.
    let loader = b()
        .autotune(Autotune {
            cpus: Some(1),
            memory_budget: None,
        })
        .build()
        .unwrap();
    assert_eq!(loader.config().reading.readers, 1);
    // At most half the CPU budget starts reading (the shuffle stage, the
    // batch maker and the consumer are busy threads beside the readers):
    // 2 CPUs, 1 of the 2 default readers; 8 CPUs, both.
    for (cpus, readers) in [(2, 1), (3, 1), (8, 2)] {
        let loader = b()
            .autotune(Autotune {
                cpus: Some(cpus),
                memory_budget: None,
            })
            .build()
            .unwrap();
        assert_eq!(loader.config().reading.readers, readers, "{cpus} CPUs");
    }
    // A budget without autotuning is refused.
    let given = Given {
        cpus: Some(4),
        ..Given::default()
    };
    let m = refused(b().given(given));
    assert!(m.starts_with("cpus(4) applies only with autotune"), "{m}");
}

/// With a memory budget, the shuffle pool's byte bound not given is sized
/// to a quarter of it (the stated bound then within the budget for records
/// of every size the pool holds), every record still once; given, or in
/// deterministic mode, it is left as it was.
#[test]
fn a_memory_budget_sizes_the_shuffle_pool_not_given() {
    let budget: u64 = 64 << 20;
    let with_budget = |b: LoaderBuilder| {
        b.autotune(Autotune {
            cpus: Some(8),
            memory_budget: Some(budget),
        })
        .autotune_interval(Duration::from_millis(5))
    };
    let want = all_ids(&COUNTS, &[]);
    for seed in [6, 7] {
        let loader = with_budget(base(seed, false)).build().unwrap();
        let config = loader.config().clone();
        let stats = loader.stats_handle();
        let (per_pass, err) = ids_per_pass(loader);
        assert!(err.is_none(), "seed {seed}: {err:?}");
        assert_exactly_once(&per_pass, &want, 2);
        let a = stats.snapshot().autotune.expect("tuning on: its snapshot");
        assert_eq!(a.shuffle_bytes, Some((budget / 4) as usize), "seed {seed}");
        let in_force = a.applied(&config);
        assert_eq!(in_force.order.shuffle_bytes, (budget / 4) as usize);
        // The pool's and the drain's share of the bound, for records large
        // enough that the byte bound is what holds the pool.
        let mut small = in_force.clone();
        small.order.shuffle_bytes = feedline_actors::PipelineConfig::default()
            .order
            .shuffle_bytes;
        let large = in_force;
        let record = 1 << 20;
        assert!(small.in_flight_bound_bytes(record) > budget as usize);
        assert!(
            large.in_flight_bound_bytes(record) < small.in_flight_bound_bytes(record),
            "the sized pool lowers the bound"
        );
    }
    // Given: left as given.
    let given = with_budget(base(8, false))
        .shuffle_bytes(256 << 20)
        .build()
        .unwrap();
    let stats = given.stats_handle();
    let _ = ids_per_pass(given);
    assert_eq!(stats.snapshot().autotune.unwrap().shuffle_bytes, None);
    // Deterministic: the pool's bound is part of the draw; left as it was.
    let det = with_budget(base(8, true)).build().unwrap();
    let stats = det.stats_handle();
    let _ = ids_per_pass(det);
    assert_eq!(stats.snapshot().autotune.unwrap().shuffle_bytes, None);
}

/// A map that makes each record far larger than it was read (as a JPEG
/// decode does): the batch maker counts the bytes it made, so the bound
/// of the run — the one the tuner keeps within the memory budget and the
/// metrics state — counts a made record, not the smaller one read.
#[test]
fn the_bound_of_a_run_counts_the_records_a_map_makes_larger() {
    const MADE: usize = 4096;
    let loader = synth_loader(SynthFormat::with_files(&COUNTS).build())
        .shard_from_env(false)
        .batch(8)
        .passes(1)
        .map(|inst: Instance, _: &mut TransformCtx| {
            let id = inst.get("id")?.as_i64().ok_or("id")?[0];
            Ok::<_, BoxError>(Sample::new().with("id", Values::I64(vec![id]), []).with(
                "pixels",
                Values::U8(vec![id as u8; MADE]),
                [MADE],
            ))
        })
        .build()
        .unwrap();
    let config = loader.config().clone();
    let stats = loader.stats_handle();
    let mut delivered = 0u64;
    for d in loader {
        delivered += d.unwrap().batch.payload_bytes() as u64;
    }
    let s = stats.snapshot();
    assert_eq!(s.batch_maker.payload_bytes, delivered);
    assert!(s.readers.payload_bytes / s.readers.records < MADE as u64);
    assert!(config.record_bytes_of_run(&s) >= MADE + 8);
}
