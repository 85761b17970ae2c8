//! Feeding several devices: a shared queue (devices take batches as they are
//! ready) and ordered round-robin; trainers driven by the pipeline inside an
//! actix System.

mod common;

use feedline_actors::{Inputs, Order};
use std::sync::{Arc, Mutex};

use common::{
    all_ids, assert_exactly_once, consume_devices, per_pass, synth_loader, synth_registry, Seen,
    SynthFormat,
};
use feedline_actors::{Delivered, Loader, LoaderBuilder, Pipeline, PipelineConfig, TrainStep};

fn loader(
    counts: &[u64],
    readers: usize,
    devices: usize,
    passes: u64,
    seed: u64,
    rr: bool,
    det: bool,
) -> Loader {
    builder(counts, readers, devices, passes, seed, rr)
        .batch(9)
        .shuffle(30)
        .deterministic(det)
        .chunk_records(5)
        .build()
        .unwrap()
}

/// Synthetic files of `counts` records, read by `readers`, fed to `devices`.
fn builder(
    counts: &[u64],
    readers: usize,
    devices: usize,
    passes: u64,
    seed: u64,
    rr: bool,
) -> LoaderBuilder {
    synth_loader(SynthFormat::with_files(counts).build())
        .readers(readers)
        .devices(devices)
        .passes(passes)
        .seed(seed)
        .round_robin(rr)
}

/// Consume with a device iterator per device (device 1 the slower).
fn consume(loader: Loader, devices: usize) -> Seen {
    consume_devices(loader, devices, Some(1))
}

fn check_exactly_once(seen: &Seen, counts: &[u64], passes: u64) {
    assert_exactly_once(&per_pass(seen), &all_ids(counts, &[]), passes);
}

#[test]
fn a_pass_held_whole_in_the_pool_drains_through_a_one_batch_queue_in_order() {
    // The pool holds every record of a pass, so all its batches come from the
    // end-of-pass drain, which is collated only as the queue (capacity 1 per
    // lane) takes batches: every record once per pass, each device's batches
    // in order and numbered k ≡ d (mod D) in round-robin mode.
    let counts = [40, 0, 97, 13];
    for (readers, devices, rr, seed) in [
        (1, 1, false, 1),
        (2, 3, true, 2),
        (4, 2, false, 3),
        (3, 4, true, 4),
    ] {
        let loader = builder(&counts, readers, devices, 3, seed, rr)
            .batch(4)
            .shuffle(100_000)
            .capacity(1)
            .chunk_records(7)
            .build()
            .unwrap();
        let seen = consume(loader, devices);
        check_exactly_once(&seen, &counts, 3);
        for d in 0..devices {
            let mine: Vec<(u64, u64)> = seen
                .iter()
                .filter(|(dev, ..)| *dev == d)
                .map(|(_, p, s, _)| (*p, *s))
                .collect();
            assert!(mine.windows(2).all(|w| w[0] < w[1]), "device {d}: {mine:?}");
            if rr {
                assert!(mine.iter().all(|(_, s)| *s as usize % devices == d));
            }
        }
        let mut seqs: Vec<(u64, u64)> = seen.iter().map(|(_, p, s, _)| (*p, *s)).collect();
        seqs.sort();
        let per_pass = 150u64.div_ceil(4);
        let want: Vec<(u64, u64)> = (0..3)
            .flat_map(|p| (0..per_pass).map(move |s| (p, s)))
            .collect();
        assert_eq!(seqs, want);
    }
}

#[test]
fn every_record_reaches_exactly_one_device_once_per_pass() {
    let counts = [31, 0, 77, 5, 140];
    for readers in [1, 2, 4, 8] {
        for devices in [1, 3, 4] {
            for rr in [false, true] {
                let passes = if readers % 2 == 0 { 3 } else { 1 };
                let seen = consume(
                    loader(
                        &counts,
                        readers,
                        devices,
                        passes,
                        readers as u64 * 7 + devices as u64,
                        rr,
                        false,
                    ),
                    devices,
                );
                check_exactly_once(&seen, &counts, passes);
                if rr {
                    for (d, _, seq, _) in &seen {
                        assert_eq!(*seq as usize % devices, *d);
                    }
                }
            }
        }
    }
}

#[test]
fn round_robin_deterministic_runs_give_each_device_the_same_batches() {
    let counts = [31, 12, 77, 5, 140, 64];
    let run = |readers| {
        let mut s = consume(loader(&counts, readers, 3, 2, 11, true, true), 3);
        s.sort();
        s
    };
    let a = run(1);
    assert_eq!(a, run(3));
    assert_eq!(a, run(8));
    check_exactly_once(&a, &counts, 2);
}

#[derive(Clone)]
struct Recorder {
    log: Arc<Mutex<Vec<(usize, u64, usize)>>>,
    /// The ids each pass delivered, over all devices.
    ids: Arc<Mutex<std::collections::BTreeMap<u64, Vec<i64>>>>,
}

impl TrainStep for Recorder {
    fn step(&mut self, device: usize, batch: &Delivered) -> Result<(), String> {
        self.log
            .lock()
            .unwrap()
            .push((device, batch.pass, batch.batch.len()));
        (self.ids.lock().unwrap().entry(batch.pass).or_default()).extend(common::ids(batch));
        Ok(())
    }

    fn end_of_pass(&mut self, device: usize, pass: u64) {
        self.log.lock().unwrap().push((device, pass, usize::MAX));
    }
}

/// Recorded (device, pass, batch size or `usize::MAX` for an end-of-pass):
/// each device hears the end of every pass once, after its batches of that
/// pass and before any of the next.
fn check_pass_markers(log: &[(usize, u64, usize)], devices: usize, passes: u64) {
    for d in 0..devices {
        let mine: Vec<(u64, usize)> = log
            .iter()
            .filter(|(dev, ..)| *dev == d)
            .map(|(_, p, n)| (*p, *n))
            .collect();
        let ends: Vec<u64> = mine
            .iter()
            .filter(|(_, n)| *n == usize::MAX)
            .map(|(p, _)| *p)
            .collect();
        assert_eq!(ends, (0..passes).collect::<Vec<_>>(), "device {d}");
        let mut ended = None;
        for (p, n) in &mine {
            if *n == usize::MAX {
                ended = Some(*p);
            } else {
                assert!(
                    ended.is_none_or(|e| *p > e),
                    "device {d}: a batch of pass {p} after pass {ended:?} ended"
                );
            }
        }
    }
}

#[test]
fn trainers_inside_an_actix_system_consume_everything() {
    let synth = SynthFormat::with_files(&[300, 200, 100]).build();
    let total = synth.total() as usize;
    let config = PipelineConfig {
        inputs: Inputs {
            files: synth.specs(),
            registry: synth_registry(synth),
            schema: Some(SynthFormat::schema()),
            ..Default::default()
        },
        order: Order {
            passes: 2,
            ..Default::default()
        },
        ..PipelineConfig::default()
    };
    let log = Arc::new(Mutex::new(Vec::new()));
    let delivered = Arc::new(Mutex::new(Default::default()));
    let steps: Vec<Recorder> = (0..4)
        .map(|_| Recorder {
            log: log.clone(),
            ids: delivered.clone(),
        })
        .collect();
    let sys = actix::System::new();
    let r = sys.block_on(async move {
        let mut p = Pipeline::start_with_trainers(config, steps).unwrap();
        let r = p.finished().await;
        let stats = p.stats().snapshot();
        p.join();
        (r, stats)
    });
    let (result, stats) = r;
    result.unwrap();
    let log = log.lock().unwrap();
    // The pool (10,000) holds whole passes: every batch comes from the
    // end-of-pass drain, collated as the queue takes it.
    check_pass_markers(&log, 4, 2);
    // Every record once per pass, by identity.
    assert_exactly_once(
        &delivered.lock().unwrap(),
        &all_ids(&[300, 200, 100], &[]),
        2,
    );
    assert_eq!(
        stats.devices.iter().map(|d| d.records).sum::<u64>() as usize,
        2 * total
    );
    assert_eq!(stats.passes_done, 2);
}

#[test]
fn a_device_iterator_dropped_mid_pass_loses_nothing() {
    // A device iterator takes a batch from the lanes only as it returns it
    // (no prefetch, no request in flight): what it did not return stays
    // for the other devices.
    let counts = [300u64, 200, 157];
    for seed in 0..8 {
        let l = loader(&counts, 2, 3, 1, seed, false, false);
        let mut quitter = l.device_iter(2);
        let mut early = Vec::new();
        for _ in 0..2 {
            let d = quitter.next().unwrap().unwrap();
            early.extend(d.batch.i64("id").unwrap().iter().copied());
        }
        drop(quitter);
        let mut seen = consume(l, 2);
        seen.push((2, 0, 0, early));
        check_exactly_once(&seen, &counts, 1);
    }
}

#[test]
fn a_time_out_in_the_round_robin_end_of_pass_sweep_lets_iteration_go_on() {
    // One-batch lanes and a consumer that lets them fill (it pauses before
    // each pop): each pass's end markers wait behind full lanes. Right after
    // the pass's last batch the consumer asks again without a pause and
    // without waiting (a zero time-out): the marker of the lane that batch
    // just left is not in yet, so the sweep of the markers meets a time-out
    // — which must leave the stream where it was.
    let counts = [23, 17, 31];
    let batches_per_pass = (counts.iter().sum::<u64>()).div_ceil(4);
    let mut timeouts = 0;
    for seed in 0..6 {
        let devices = 2 + seed as usize % 3;
        let mut l = builder(&counts, 2, devices, 3, seed, true)
            .batch(4)
            .shuffle(10)
            .capacity(1)
            .chunk_records(3)
            .build()
            .unwrap();
        let mut seen: Seen = Vec::new();
        let mut pause = true;
        loop {
            if pause {
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
            match l.next_timeout(std::time::Duration::ZERO) {
                None => break,
                Some(Ok(d)) => {
                    pause = d.seq + 1 != batches_per_pass;
                    seen.push((0, d.pass, d.seq, common::ids(&d)));
                }
                Some(Err(feedline_actors::PipelineError::Timeout { .. })) => {
                    timeouts += 1;
                    pause = true;
                }
                Some(Err(e)) => panic!("seed {seed}: {e}"),
            }
        }
        check_exactly_once(&seen, &counts, 3);
    }
    assert!(timeouts > 0, "the test must meet time-outs");
}
