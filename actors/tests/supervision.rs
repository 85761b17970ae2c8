//! A panic in any stage — its own code or user code it calls — fails the
//! pipeline: every consumer gets an error naming the stage and what it was
//! handling, `finished()` resolves, nobody waits forever. Each wait here is
//! bounded (30 s, a hang detector only: a time-out fails the test).

mod common;

use feedline_actors::{Batching, Feeding, Inputs, Order};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{ids, sample, synth_loader, synth_registry, SynthFormat};
use feedline_actors::{
    BatchPolicy, Delivered, FaultPlan, Loader, Pipeline, PipelineConfig, PipelineError, Pop,
    Popped, SimulatedDevice, StartOptions, TrainStep,
};

/// The hang detector.
const HANG: Duration = Duration::from_secs(30);

/// Iterate `loader` with a bounded wait per batch: the ids delivered (each
/// once, or the test fails) and the error that ended it.
fn drain(mut loader: Loader) -> (usize, Option<PipelineError>) {
    let mut seen = HashSet::new();
    let mut per_pass: std::collections::BTreeMap<u64, HashSet<i64>> = Default::default();
    loop {
        match loader.next_timeout(HANG) {
            None => return (seen.len(), None),
            Some(Ok(d)) => {
                for id in ids(&d) {
                    assert!(
                        per_pass.entry(d.pass).or_default().insert(id),
                        "id {id} twice in pass {}",
                        d.pass
                    );
                    seen.insert((d.pass, id));
                }
            }
            Some(Err(e @ PipelineError::Timeout { .. })) => panic!("hang: {e}"),
            Some(Err(e)) => return (seen.len(), Some(e)),
        }
    }
}

/// The error names `stage` and what it handled.
fn assert_panicked(e: &PipelineError, stage: &str, handling: &str) {
    match e {
        PipelineError::Panicked {
            stage: s,
            handling: h,
            message,
        } => {
            assert!(s.starts_with(stage), "stage {s:?}, expected {stage:?}");
            assert!(
                h.starts_with(handling),
                "handling {h:?}, expected {handling:?}"
            );
            assert!(!message.is_empty());
        }
        other => panic!("expected a panic of {stage} handling {handling}, got {other}"),
    }
}

fn files() -> SynthFormat {
    SynthFormat::with_files(&[90, 70, 55, 40]).build()
}

#[test]
fn a_panic_in_any_stage_handler_fails_every_consumer() {
    // (stage, what it handles, times the point is passed before it panics)
    let points = [
        ("file queue", "StartPasses", 0),
        ("file queue", "FileDone", 2),
        ("reader", "Next", 3),
        ("reader", "ChunkAck", 1),
        ("shuffle stage", "ChunkMsg", 4),
        ("shuffle stage", "Ended(0)", 0),
        // Not here: ("shuffle stage", "room in the feed queue") is reached
        // only if the consumer falls behind, which a draining consumer does
        // or not by timing (one miss in 8 full runs on a loaded machine);
        // the fault-schedule test covers shuffle-stage panics by seed.
        ("supervisor", "PassFlushed", 0),
    ];
    for (stage, handling, after) in points {
        let faults = FaultPlan::new().panic_at(stage, handling, after);
        let loader = synth_loader(files())
            .readers(2)
            .chunk_records(8)
            .shuffle(20)
            .batch(4)
            .capacity(1)
            .passes(2)
            .inject_faults(faults.clone())
            .build()
            .unwrap();
        let (_, error) = drain(loader);
        assert_eq!(faults.fired().len(), 1, "{stage}/{handling} never reached");
        let e = error.unwrap_or_else(|| panic!("{stage}/{handling}: no error"));
        assert_panicked(&e, stage, handling);
    }
}

#[test]
fn a_panicking_cost_function_fails_the_pipeline() {
    let calls = Arc::new(AtomicU64::new(0));
    let c = calls.clone();
    let policy = BatchPolicy::Budget {
        max_cost: 10,
        cost: Arc::new(move |_, _| {
            if c.fetch_add(1, Ordering::SeqCst) == 100 {
                panic!("cost of a bad instance");
            }
            1
        }),
    };
    let loader = synth_loader(files())
        .batch_policy(policy)
        .shuffle(0)
        .build()
        .unwrap();
    let (delivered, error) = drain(loader);
    let e = error.expect("an error");
    // The shuffle stage draws as a chunk comes, or as the batch maker
    // makes room for more orders: which one reaches the 100th cost is the
    // timing's choice.
    match &e {
        PipelineError::Panicked { handling, .. } if handling.starts_with("room") => {
            assert_panicked(&e, "shuffle stage", "room in the order queue")
        }
        _ => assert_panicked(&e, "shuffle stage", "ChunkMsg"),
    }
    assert!(e.to_string().contains("cost of a bad instance"), "{e}");
    assert!(delivered < 255);
}

/// A step that panics on device `bad` (any if `None`) at `when`.
#[derive(Clone)]
struct Faulty {
    bad: Option<usize>,
    when: When,
}

impl Faulty {
    fn bad(&self, device: usize) -> bool {
        self.bad.is_none_or(|b| b == device)
    }
}

#[derive(Clone, Copy, Debug)]
enum When {
    Step(u64),
    EndOfPass(u64),
    EndOfData,
}

impl TrainStep for Faulty {
    fn step(&mut self, device: usize, batch: &Delivered) -> Result<(), String> {
        if let When::Step(seq) = self.when {
            if self.bad(device) && batch.seq == seq {
                panic!("step exploded");
            }
        }
        Ok(())
    }
    fn end_of_pass(&mut self, device: usize, pass: u64) {
        if matches!(self.when, When::EndOfPass(p) if p == pass) && self.bad(device) {
            panic!("end_of_pass exploded");
        }
    }
    fn end_of_data(&mut self, device: usize) {
        if matches!(self.when, When::EndOfData) && self.bad(device) {
            panic!("end_of_data exploded");
        }
    }
}

/// Run `fut` in a new actix system, failing the test after [`HANG`].
fn bounded<F: std::future::Future + 'static>(fut: F) -> F::Output {
    actix::System::new().block_on(async move {
        let delay = futures_timer::Delay::new(HANG);
        match futures::future::select(Box::pin(fut), delay).await {
            futures::future::Either::Left((r, _)) => r,
            futures::future::Either::Right(_) => panic!("hang: nothing resolved in {HANG:?}"),
        }
    })
}

fn config(passes: u64, round_robin: bool) -> PipelineConfig {
    let synth = files();
    PipelineConfig {
        inputs: Inputs {
            files: synth.specs(),
            registry: synth_registry(synth),
            schema: Some(SynthFormat::schema()),
            ..Default::default()
        },
        order: Order {
            passes,
            shuffle: 30,
            ..Default::default()
        },
        batching: Batching {
            batch: BatchPolicy::Fixed(5),
            ..Default::default()
        },
        feeding: Feeding {
            capacity: 1,
            feed: if round_robin {
                feedline_actors::FeedMode::RoundRobin
            } else {
                feedline_actors::FeedMode::Shared
            },
            ..Default::default()
        },
        ..PipelineConfig::default()
    }
}

#[test]
fn a_panicking_train_step_or_hook_fails_the_pipeline_and_stalls_no_device() {
    let cases = [
        (When::Step(7), "step on batch 7"),
        (When::EndOfPass(0), "end of pass 0"),
        (When::EndOfPass(1), "end of pass 1"),
        (When::EndOfData, "end of data"),
    ];
    for round_robin in [true, false] {
        for (when, handling) in cases {
            // Shared: which device takes batch 7 is the timing's choice.
            let bad = match when {
                When::Step(_) if !round_robin => None,
                _ => Some(1),
            };
            let steps: Vec<Faulty> = (0..3).map(|_| Faulty { bad, when }).collect();
            let config = config(2, round_robin);
            let r = bounded(async move {
                let mut p = Pipeline::start_with_trainers(config, steps).unwrap();
                let r = p.finished().await;
                p.join();
                r
            });
            let e = r.expect_err("the panic fails the pipeline");
            let stage = if bad.is_some() {
                "trainer of device 1"
            } else {
                "trainer of device"
            };
            assert_panicked(&e, stage, handling);
        }
    }
}

#[test]
fn a_panic_in_the_feed_queue_actor_answers_every_pop() {
    let faults = FaultPlan::new().panic_at("feed queue", "Pop", 3);
    let config = config(1, false);
    let r = bounded(async move {
        let options = StartOptions {
            faults,
            ..StartOptions::default()
        };
        let mut p = Pipeline::start_with::<SimulatedDevice>(config, options, Vec::new()).unwrap();
        let feed = p.feed();
        let mut answers = Vec::new();
        loop {
            match feed.send(Pop { consumer: 0 }).await.expect("answered") {
                Ok(Popped::EndOfData) => break,
                Ok(_) => answers.push(()),
                Err(e) => {
                    let finished = p.finished().await;
                    p.join();
                    return (answers.len(), Some(e), finished);
                }
            }
        }
        let finished = p.finished().await;
        p.join();
        (answers.len(), None, finished)
    });
    let (answered, error, finished) = r;
    assert_eq!(answered, 3, "three pops answered before the panic");
    assert_panicked(&error.expect("an error"), "feed queue", "Pop");
    assert_panicked(
        &finished.expect_err("finished() fails"),
        "feed queue",
        "Pop",
    );
}

#[test]
fn a_panicking_supervisor_fails_the_lanes_and_finished() {
    let faults = FaultPlan::new().panic_at("supervisor", "PassFlushed", 0);
    let config = config(2, true);
    let steps: Vec<Faulty> = (0..2)
        .map(|_| Faulty {
            bad: Some(9),
            when: When::EndOfData,
        })
        .collect();
    let options = StartOptions {
        faults: faults.clone(),
        ..StartOptions::default()
    };
    let r = bounded(async move {
        let mut p = Pipeline::start_with(config, options, steps).unwrap();
        let r = p.finished().await;
        p.join();
        r
    });
    assert_panicked(&r.expect_err("fails"), "supervisor", "PassFlushed");
    assert_eq!(faults.fired().len(), 1);
}

#[test]
fn a_panic_in_the_push_source_stops_producers_and_consumers() {
    let faults = FaultPlan::new().panic_at("push source", "ChunkAck", 2);
    let (loader, feed) = Loader::builder()
        .schema(SynthFormat::schema())
        .batch(4)
        .chunk_records(4)
        .inject_faults(faults.clone())
        .build_with_feed()
        .unwrap();
    let producer = std::thread::spawn(move || {
        for i in 0..100_000 {
            if let Err(e) = feed.push(sample(i)) {
                return Some(e.to_string());
            }
        }
        None
    });
    let (_, error) = drain(loader);
    assert_panicked(&error.expect("an error"), "push source", "ChunkAck");
    let refused = producer.join().unwrap().expect("a push refused");
    assert!(refused.contains("push source"), "{refused}");
}

#[test]
fn without_trainers_finished_waits_for_the_last_drain_and_a_stop_then_loses_nothing() {
    for round_robin in [false, true] {
        // The pool holds whole passes: every batch comes from the end-of-pass
        // drain, which reaches the one-batch lanes only as consumers pop.
        let config = {
            let base = config(2, round_robin);
            PipelineConfig {
                order: Order {
                    shuffle: 10_000,
                    ..base.order
                },
                feeding: Feeding {
                    devices: 2,
                    ..base.feeding
                },
                ..base
            }
        };
        let (seen, ends) = bounded(async move {
            let mut p = Pipeline::start(config).unwrap();
            let consumers: Vec<_> = (0..2)
                .map(|consumer| {
                    let feed = p.feed();
                    let (tx, rx) = futures::channel::oneshot::channel();
                    actix::spawn(async move {
                        let mut got = Vec::new();
                        let end = loop {
                            match feed.send(Pop { consumer }).await.expect("answered") {
                                Ok(Popped::Batch(d)) => got.push((d.pass, ids(&d))),
                                Ok(Popped::EndOfPass(_)) => {}
                                Ok(Popped::EndOfData) => break Ok(()),
                                Err(e) => break Err(e),
                            }
                        };
                        let _ = tx.send((got, end));
                    });
                    rx
                })
                .collect();
            p.finished().await.expect("finished");
            // The embedder stops right away: nothing already made is lost.
            p.stop();
            let mut seen = Vec::new();
            let mut ends = Vec::new();
            for rx in consumers {
                let (got, end) = rx.await.expect("a consumer's result");
                seen.extend(got);
                ends.push(end);
            }
            p.join();
            (seen, ends)
        });
        for end in ends {
            end.unwrap_or_else(|e| panic!("round robin {round_robin}: a consumer got {e}"));
        }
        let mut per_pass = std::collections::BTreeMap::new();
        for (pass, ids) in seen {
            per_pass.entry(pass).or_insert_with(Vec::new).extend(ids);
        }
        common::assert_exactly_once(&per_pass, &common::all_ids(&[90, 70, 55, 40], &[]), 2);
    }
}
