//! The fault-schedule test (model-based, many seeds): random pipelines —
//! readers 1–4 or two file sets, devices 1–3, shared or round-robin,
//! deterministic or not, skip or fail, consumed by the `Loader`'s iterator,
//! by device iterators or by trainers — with random faults at random
//! points: panics in a reader (retried, or past its attempts), in the file
//! queue, the shuffle stage, the supervisor, a user cost function, a
//! trainer's step and hooks; stalls; bad records; early drops. On each the
//! invariant: every pass is delivered exactly once (by identity: the
//! records the model expects, skipped ones left out), or the run ends with
//! an error that names the fault — never a lost or doubled instance, never
//! a hang (a bounded wait, 30 s, that fails the test).
//!
//! `CI_SCHEDULES` seeds run by default; `FEEDLINE_FAULT_SCHEDULES=N` runs
//! N more.

mod common;

use feedline_actors::{Batching, Faults, Feeding, Inputs, Order, Reading};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{ids, synth_registry, Fault, SynthFormat};
use feedline_actors::{
    BatchPolicy, Delivered, ErrorPolicy, FaultPlan, FeedMode, FileSet, Loader, Pipeline,
    PipelineConfig, PipelineError, Popped, StallPolicy, StartOptions, TrainStep,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const CI_SCHEDULES: u64 = 120;
const HANG: Duration = Duration::from_secs(30);

/// How the run is consumed.
#[derive(Clone, Copy, Debug)]
enum Consumer {
    /// The loader's merged iterator; drop it after this many batches.
    Merged { drop_after: Option<usize> },
    /// One device iterator per device, on threads.
    Devices,
    /// Trainers driven by the pipeline.
    Trainers,
}

/// A trainer hook fault: device, and when.
#[derive(Clone, Copy, Debug)]
enum HookFault {
    Step(u64),
    EndOfPass(u64),
    EndOfData,
}

#[derive(Debug)]
struct Schedule {
    counts: Vec<u64>,
    sets: bool,
    readers: usize,
    devices: usize,
    round_robin: bool,
    deterministic: bool,
    skip: bool,
    passes: u64,
    batch: usize,
    shuffle: usize,
    chunk_records: usize,
    capacity: usize,
    consumer: Consumer,
    /// Synthetic-file faults: (file, record, fault).
    record_faults: Vec<(usize, u64, Fault)>,
    /// Panics at named points of the stages' handlers.
    stage_faults: Vec<(&'static str, &'static str, u64)>,
    /// A cost function that panics at this call.
    cost_panic: Option<u64>,
    /// A trainer hook that panics (device 0's).
    hook: Option<HookFault>,
}

fn schedule(seed: u64) -> Schedule {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    let files = r.gen_range(2..=5);
    let counts: Vec<u64> = (0..files).map(|_| r.gen_range(1..=60)).collect();
    let sets = r.gen_bool(0.25);
    let devices = r.gen_range(1..=3);
    let consumer = match r.gen_range(0..4) {
        0 => Consumer::Devices,
        1 => Consumer::Trainers,
        2 => Consumer::Merged {
            drop_after: Some(r.gen_range(0..6)),
        },
        _ => Consumer::Merged { drop_after: None },
    };
    let mut record_faults = Vec::new();
    for _ in 0..r.gen_range(0..=2) {
        let f = r.gen_range(0..files);
        let at = r.gen_range(0..counts[f]);
        let fault = match r.gen_range(0..5) {
            0 => Fault::BadRecord,
            1 => Fault::BadRestOfFile,
            2 => Fault::Panic { times: 1 },
            3 => Fault::Panic { times: 9 },
            _ => Fault::Hang {
                time: Duration::from_millis(400),
                times: 1,
            },
        };
        if !record_faults.iter().any(|(g, a, _)| *g == f && *a == at) {
            record_faults.push((f, at, fault));
        }
    }
    let mut stage_faults = Vec::new();
    if r.gen_bool(0.4) {
        let points: [(&str, &str); 12] = [
            ("file queue", "StartPasses"),
            ("file queue", "FileDone"),
            ("file queue", "ReaderIdle"),
            ("reader", "Next"),
            ("reader", "ChunkAck"),
            ("shuffle stage", "ChunkMsg"),
            ("shuffle stage", "Ended"),
            ("shuffle stage", "room in the order queue"),
            ("batch maker", "an order"),
            ("batch maker", "Made"),
            ("batch maker", "room in the feed queue"),
            ("supervisor", "PassFlushed"),
        ];
        let (stage, handling) = points[r.gen_range(0..points.len())];
        stage_faults.push((stage, handling, r.gen_range(0..6)));
    }
    let trainers = matches!(consumer, Consumer::Trainers);
    Schedule {
        readers: r.gen_range(1..=4),
        round_robin: r.gen_bool(0.5),
        deterministic: r.gen_bool(0.5),
        skip: r.gen_bool(0.5),
        passes: r.gen_range(1..=3),
        batch: r.gen_range(1..=9),
        shuffle: [0, 7, 50][r.gen_range(0..3)],
        chunk_records: r.gen_range(1..=10),
        capacity: r.gen_range(1..=3),
        cost_panic: r.gen_bool(0.1).then(|| r.gen_range(0..200)),
        hook: (trainers && r.gen_bool(0.3)).then(|| match r.gen_range(0..3) {
            0 => HookFault::Step(r.gen_range(0..6)),
            1 => HookFault::EndOfPass(r.gen_range(0..3)),
            _ => HookFault::EndOfData,
        }),
        counts,
        sets,
        devices,
        consumer,
        record_faults,
        stage_faults,
    }
}

impl Schedule {
    fn synth(&self) -> SynthFormat {
        let mut s = SynthFormat::with_files(&self.counts);
        for (f, at, fault) in &self.record_faults {
            s = s.fault(&format!("f{f}"), *at, fault.clone());
        }
        s.build()
    }

    fn config(&self, cost_calls: &Arc<AtomicU64>) -> PipelineConfig {
        let synth = self.synth();
        let specs = synth.specs();
        let (files, sets) = if self.sets {
            let half = specs.len() / 2;
            (
                Vec::new(),
                vec![
                    FileSet::new("a", specs[..half].to_vec()).readers(1),
                    FileSet::new("b", specs[half..].to_vec()).readers(2),
                ],
            )
        } else {
            (specs, Vec::new())
        };
        let batch = match self.cost_panic {
            Some(at) => {
                let calls = cost_calls.clone();
                BatchPolicy::Budget {
                    max_cost: self.batch as u64,
                    cost: Arc::new(move |_, _| {
                        if calls.fetch_add(1, Ordering::SeqCst) == at {
                            panic!("injected cost panic");
                        }
                        1
                    }),
                }
            }
            None => BatchPolicy::Fixed(self.batch),
        };
        PipelineConfig {
            inputs: Inputs {
                files,
                sets,
                registry: synth_registry(synth),
                schema: Some(SynthFormat::schema()),
                ..Default::default()
            },
            reading: Reading {
                readers: self.readers,
                chunk_records: self.chunk_records,
                ..Default::default()
            },
            order: Order {
                deterministic: self.deterministic,
                passes: self.passes,
                shuffle: self.shuffle,
                ..Default::default()
            },
            batching: Batching {
                batch,
                ..Default::default()
            },
            feeding: Feeding {
                devices: self.devices,
                feed: if self.round_robin {
                    FeedMode::RoundRobin
                } else {
                    FeedMode::Shared
                },
                capacity: self.capacity,
            },
            faults: Faults {
                error_policy: if self.skip {
                    ErrorPolicy::skip()
                } else {
                    ErrorPolicy::Fail
                },
                stall_timeout: Some(Duration::from_millis(100)),
                on_stall: StallPolicy::Retry,
                ..Default::default()
            },
            ..PipelineConfig::default()
        }
    }

    /// The ids a pass delivers, by the model: every record, but those the
    /// skip policy drops.
    fn expected(&self) -> Vec<i64> {
        let mut lost = HashSet::new();
        for (f, at, fault) in &self.record_faults {
            let base = *f as i64 * 1_000_000;
            match fault {
                Fault::BadRecord => {
                    lost.insert(base + *at as i64);
                }
                Fault::BadRestOfFile => {
                    for i in *at..self.counts[*f] {
                        lost.insert(base + i as i64);
                    }
                }
                _ => {}
            }
        }
        common::all_ids(&self.counts, &[])
            .into_iter()
            .filter(|id| !lost.contains(id))
            .collect()
    }

    /// True if the schedule must end with an error whatever the timing.
    fn must_fail(&self) -> bool {
        let bad_data = self
            .record_faults
            .iter()
            .any(|(_, _, f)| matches!(f, Fault::BadRecord | Fault::BadRestOfFile));
        let hopeless_panic = (self.record_faults.iter())
            .any(|(_, _, f)| matches!(f, Fault::Panic { times } if *times > 2));
        (bad_data && !self.skip) || hopeless_panic
    }
}

/// (pass, ids) of each batch delivered.
type Batches = Vec<(u64, Vec<i64>)>;

/// What a run delivered, and how it ended.
type Run = (Batches, Option<PipelineError>);

fn run_merged(config: PipelineConfig, faults: FaultPlan, drop_after: Option<usize>) -> Run {
    let mut loader = match Loader::builder()
        .config(config)
        .inject_faults(faults)
        .build()
    {
        Ok(l) => l,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let mut got = Vec::new();
    loop {
        if drop_after.is_some_and(|n| got.len() >= n) {
            drop(loader);
            return (got, None);
        }
        match loader.next_timeout(HANG) {
            None => return (got, None),
            Some(Ok(d)) => got.push((d.pass, ids(&d))),
            Some(Err(e @ PipelineError::Timeout { .. })) => panic!("hang: {e}"),
            Some(Err(e)) => return (got, Some(e)),
        }
    }
}

fn run_devices(config: PipelineConfig, faults: FaultPlan, devices: usize) -> Run {
    let loader = match Loader::builder()
        .config(config)
        .inject_faults(faults)
        .build()
    {
        Ok(l) => l,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let threads: Vec<_> = (0..devices)
        .map(|d| {
            let mut it = loader.device_iter(d);
            std::thread::spawn(move || {
                let mut got = Vec::new();
                loop {
                    match it.next_event_timeout(HANG) {
                        Ok(Popped::Batch(b)) => got.push((b.pass, ids(&b))),
                        Ok(Popped::EndOfPass(_)) => {}
                        Ok(Popped::EndOfData) => return (got, None),
                        Err(e @ PipelineError::Timeout { .. }) => panic!("hang: {e}"),
                        Err(e) => return (got, Some(e)),
                    }
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut error = None;
    for t in threads {
        let (got, e) = t.join().expect("a device thread");
        all.extend(got);
        error = error.or(e);
    }
    drop(loader);
    (all, error)
}

#[derive(Clone)]
struct Recording {
    got: Arc<Mutex<Batches>>,
    hook: Option<HookFault>,
}

impl TrainStep for Recording {
    fn step(&mut self, device: usize, batch: &Delivered) -> Result<(), String> {
        if device == 0 && matches!(self.hook, Some(HookFault::Step(s)) if s == batch.seq) {
            panic!("injected hook panic in step");
        }
        self.got.lock().unwrap().push((batch.pass, ids(batch)));
        Ok(())
    }
    fn end_of_pass(&mut self, device: usize, pass: u64) {
        if device == 0 && matches!(self.hook, Some(HookFault::EndOfPass(p)) if p == pass) {
            panic!("injected hook panic in end_of_pass");
        }
    }
    fn end_of_data(&mut self, device: usize) {
        if device == 0 && matches!(self.hook, Some(HookFault::EndOfData)) {
            panic!("injected hook panic in end_of_data");
        }
    }
}

fn run_trainers(
    config: PipelineConfig,
    faults: FaultPlan,
    devices: usize,
    hook: Option<HookFault>,
) -> Run {
    let got = Arc::new(Mutex::new(Vec::new()));
    let steps: Vec<Recording> = (0..devices)
        .map(|_| Recording {
            got: got.clone(),
            hook,
        })
        .collect();
    let result = actix::System::new().block_on(async move {
        let options = StartOptions {
            faults,
            ..StartOptions::default()
        };
        let mut p = match Pipeline::start_with(config, options, steps) {
            Ok(p) => p,
            Err(e) => return Err(e),
        };
        let delay = futures_timer::Delay::new(HANG);
        let r = match futures::future::select(Box::pin(p.finished()), delay).await {
            futures::future::Either::Left((r, _)) => r,
            futures::future::Either::Right(_) => panic!("hang: finished() never resolved"),
        };
        p.join();
        r
    });
    let got = std::mem::take(&mut *got.lock().unwrap());
    (got, result.err())
}

/// The error names an injected fault (or a stall the schedule made).
fn names_a_fault(e: &PipelineError) -> bool {
    let text = e.to_string();
    text.contains("injected") || matches!(e, PipelineError::ReaderStuck { .. })
}

fn check(seed: u64) {
    let s = schedule(seed);
    let faults = FaultPlan::new();
    let faults = (s.stage_faults.iter()).fold(faults, |f, (stage, handling, after)| {
        f.panic_at(stage, handling, *after)
    });
    let cost_calls = Arc::new(AtomicU64::new(0));
    let config = s.config(&cost_calls);
    let (got, error) = match s.consumer {
        Consumer::Merged { drop_after } => run_merged(config, faults.clone(), drop_after),
        Consumer::Devices => run_devices(config, faults.clone(), s.devices),
        Consumer::Trainers => run_trainers(config, faults.clone(), s.devices, s.hook),
    };
    let ctx = || format!("seed {seed}: {s:?}");
    // Never a doubled instance, error or not.
    let mut per_pass: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for (pass, ids) in got {
        per_pass.entry(pass).or_default().extend(ids);
    }
    let expected = s.expected();
    let want: HashSet<i64> = expected.iter().copied().collect();
    for (pass, ids) in &per_pass {
        let mut seen = HashSet::new();
        for id in ids {
            assert!(seen.insert(*id), "{}: id {id} twice in pass {pass}", ctx());
            assert!(want.contains(id), "{}: id {id} not expected", ctx());
        }
    }
    let dropped_early = matches!(
        s.consumer,
        Consumer::Merged {
            drop_after: Some(_)
        }
    );
    match error {
        Some(e) => assert!(
            names_a_fault(&e),
            "{}: an error that names no fault: {e}",
            ctx()
        ),
        None => {
            // A fault may fire after the end of data (an idle reader's
            // last message): the run is then complete, and checked so.
            assert!(
                !s.must_fail() || dropped_early,
                "{}: ended without the error",
                ctx()
            );
            if !dropped_early {
                common::assert_exactly_once(&per_pass, &expected, s.passes);
            }
        }
    }
}

#[test]
fn fault_schedules() {
    let extra: u64 = std::env::var("FEEDLINE_FAULT_SCHEDULES")
        .ok()
        .map(|v| v.parse().expect("FEEDLINE_FAULT_SCHEDULES: a count"))
        .unwrap_or(0);
    for seed in 0..CI_SCHEDULES + extra {
        check(seed);
    }
}
