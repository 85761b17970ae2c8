//! The autotuner's decisions, by event: a fake counter source models a
//! pipeline (the delivered rate and the limiting stage as functions of the
//! values in force) and the tests assert what the tuner does interval by
//! interval — which setting it raises for which limiting stage, that a
//! change is kept only when the rate rose, reverted and never tried again
//! when not, that no candidate past a budget is tried, and that it settles.

use feedline_actors::autotune::{Budgets, CounterSource, Measurement, StageShares, Tuner, MARGIN};
use feedline_actors::{Bottleneck, PipelineConfig, TunedSetting, TunedValues};

/// What a modelled pipeline shows for the values in force: the delivered
/// rate, the limiting stage, the stages' shares.
type Model = Box<dyn Fn(&TunedValues) -> (f64, Bottleneck, StageShares)>;

/// The CPU time, in cores, a modelled pipeline uses for the values in force.
type CpuModel = Box<dyn Fn(&TunedValues) -> f64>;

/// A modelled pipeline: what an interval shows for the values in force.
struct World {
    values: TunedValues,
    t_s: f64,
    record_bytes: usize,
    model: Model,
    /// The process's CPU time, in cores, for the values in force (`None`:
    /// not measured).
    cpu: Option<CpuModel>,
}

impl CounterSource for World {
    fn measure(&mut self) -> Measurement {
        self.t_s += 0.5;
        let (rate, limiting, shares) = (self.model)(&self.values);
        Measurement {
            t_s: self.t_s,
            rate,
            readers: shares,
            shuffle: StageShares::default(),
            batch_maker: shares,
            limiting,
            feed_queue_depth: 0,
            record_bytes: self.record_bytes,
            cpu_cores: self.cpu.as_ref().map(|cpu| cpu(&self.values)),
        }
    }
}

const BUSY: StageShares = StageShares {
    busy: 0.9,
    idle: 0.05,
    blocked: 0.05,
};
const WAITING: StageShares = StageShares {
    busy: 0.3,
    idle: 0.7,
    blocked: 0.0,
};

fn start() -> TunedValues {
    TunedValues {
        readers: 1,
        workers: 1,
        batches_in_flight: 2,
        chunks_in_flight: 2,
    }
}

/// Settings whose bound the batches in flight weigh in: batches of 1024
/// records, no shuffle pool.
fn config() -> PipelineConfig {
    let mut c = PipelineConfig::default();
    c.batching.batch = feedline_actors::BatchPolicy::Fixed(1024);
    c.order.shuffle = 0;
    c
}

fn roomy() -> Budgets {
    Budgets {
        cpus: 8,
        memory: 1 << 40,
    }
}

struct Run {
    tuner: Tuner,
    world: World,
    config: PipelineConfig,
    budgets: Budgets,
    /// The values at the start and after each interval.
    seen: Vec<TunedValues>,
}

impl Run {
    fn new(
        tunable: &[TunedSetting],
        budgets: Budgets,
        model: impl Fn(&TunedValues) -> (f64, Bottleneck, StageShares) + 'static,
    ) -> Run {
        let config = config();
        Run {
            tuner: Tuner::new(&config, tunable.to_vec(), start(), budgets, 64),
            world: World {
                values: start(),
                t_s: 0.0,
                record_bytes: 1024,
                model: Box::new(model),
                cpu: None,
            },
            config,
            budgets,
            seen: vec![start()],
        }
    }

    /// `n` intervals; every one within the budgets.
    fn ticks(&mut self, n: usize) -> &mut Self {
        for _ in 0..n {
            if let Some(v) = self.tuner.tick(&mut self.world) {
                self.world.values = v;
            }
            let v = self.tuner.values();
            assert_eq!(v, self.world.values);
            match &self.world.cpu {
                None => assert!(v.threads() <= self.budgets.cpus, "{v:?} over the CPUs"),
                Some(_) => assert!(
                    v.readers.max(v.workers) <= self.budgets.cpus,
                    "{v:?}: a pool over the CPUs"
                ),
            }
            let bound = v.bound_bytes(&self.config, self.world.record_bytes) as u64;
            assert!(bound <= self.budgets.memory, "{v:?}: bound {bound}");
            self.seen.push(v);
        }
        self
    }

    /// The (setting, from, to) of the changes kept.
    fn kept(&self) -> Vec<(TunedSetting, usize, usize)> {
        (self.tuner.snapshot().changes.iter())
            .map(|c| (c.setting, c.from, c.to))
            .collect()
    }

    /// The distinct values of `setting` seen, in order.
    fn path(&self, setting: TunedSetting) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::new();
        for v in &self.seen {
            if out.last() != Some(&v.get(setting)) {
                out.push(v.get(setting));
            }
        }
        out
    }
}

const ALL: [TunedSetting; 3] = [
    TunedSetting::Workers,
    TunedSetting::BatchesInFlight,
    TunedSetting::ChunksInFlight,
];

#[test]
fn readers_waiting_for_acknowledgements_get_more_chunks_in_flight_kept_while_the_rate_rises() {
    // Readers limit, mostly waiting: chunks in flight feed them. The rate
    // rises up to 8 chunks, not past.
    let mut run = Run::new(&ALL, roomy(), |v| {
        let rate = 1000.0 * v.chunks_in_flight.min(8) as f64;
        (rate, Bottleneck::Readers, WAITING)
    });
    run.ticks(40);
    use TunedSetting::ChunksInFlight as C;
    assert_eq!(run.kept(), vec![(C, 2, 4), (C, 4, 8)]);
    // 16 was tried, did not help, was reverted; never tried again.
    assert_eq!(run.path(C), vec![2, 4, 8, 16, 8]);
    assert_eq!(run.tuner.values().chunks_in_flight, 8);
    let snap = run.tuner.snapshot();
    assert!(snap.settled, "no candidate left: settled");
    assert_eq!(snap.trials, 3);
    // Nothing else was touched: the workers and batches feed another stage.
    assert!(run
        .seen
        .iter()
        .all(|v| v.workers == 1 && v.batches_in_flight == 2));
    let c = &snap.changes[0];
    assert_eq!((c.rate_before, c.rate_after), (2000.0, 4000.0));
}

#[test]
fn a_busy_batch_maker_gets_workers_first_and_a_change_that_lowers_the_rate_is_reverted_for_good() {
    // The batch maker limits with busy workers: workers first. More than 2
    // workers make it slower (say, memory bandwidth); batches in flight
    // help up to 8.
    let mut run = Run::new(&ALL, roomy(), |v| {
        let by_workers = match v.workers {
            1 => 1000.0,
            2 => 1900.0,
            _ => 1500.0,
        };
        let rate = by_workers * (1.0 + 0.1 * v.batches_in_flight.min(8) as f64);
        (rate, Bottleneck::BatchMaker, BUSY)
    });
    run.ticks(60);
    use TunedSetting::{BatchesInFlight as B, Workers as W};
    assert_eq!(run.kept(), vec![(W, 1, 2), (B, 2, 4), (B, 4, 8)]);
    assert_eq!(
        run.path(W),
        vec![1, 2, 4, 2],
        "4 workers tried once, reverted"
    );
    assert_eq!(run.path(B), vec![2, 4, 8, 16, 8]);
    assert_eq!(run.tuner.values().workers, 2);
    assert!(run.tuner.snapshot().settled);
    // Settled: more intervals change nothing.
    let before = run.tuner.values();
    run.ticks(20);
    assert!(run.seen[run.seen.len() - 20..].iter().all(|v| *v == before));
}

#[test]
fn a_rise_below_the_margin_is_not_kept() {
    // 2 % more with 2 workers: under the 3 % margin, reverted.
    const _: () = assert!(MARGIN > 0.02);
    let mut run = Run::new(&[TunedSetting::Workers], roomy(), |v| {
        let rate = if v.workers >= 2 { 1020.0 } else { 1000.0 };
        (rate, Bottleneck::BatchMaker, BUSY)
    });
    run.ticks(10);
    assert!(run.kept().is_empty());
    assert_eq!(run.path(TunedSetting::Workers), vec![1, 2, 1]);
}

#[test]
fn workers_stay_within_the_cpu_budget_and_batches_within_the_memory_budget() {
    // Every raise would help, without end; the budgets stop it.
    let config = config();
    let memory = start()
        .with(TunedSetting::BatchesInFlight, 8)
        .bound_bytes(&config, 1024) as u64;
    let budgets = Budgets { cpus: 6, memory };
    let mut run = Run::new(&ALL, budgets, |v| {
        let rate = 100.0 * (v.workers * v.batches_in_flight) as f64;
        (rate, Bottleneck::BatchMaker, BUSY)
    });
    run.ticks(60);
    let v = run.tuner.values();
    // 1 reader + 5 workers = the 6 CPUs: 1 → 2 → 4 → 5 (doubling clipped).
    assert_eq!(run.path(TunedSetting::Workers), vec![1, 2, 4, 5]);
    assert_eq!(v.workers, 5);
    // Doubling 8 would pass the bound, and so would 9: not tried.
    assert_eq!(run.path(TunedSetting::BatchesInFlight), vec![2, 4, 8]);
    assert!(run.tuner.snapshot().settled);
    // (Every interval's values were within both: `ticks` asserts it.)
}

#[test]
fn settings_not_given_to_the_tuner_never_change_and_the_devices_limiting_is_left_alone() {
    // Workers fixed by the user: a busy batch maker gets batches in flight.
    let mut run = Run::new(&[TunedSetting::BatchesInFlight], roomy(), |v| {
        let rate = 100.0 * v.batches_in_flight.min(4) as f64;
        (rate, Bottleneck::BatchMaker, BUSY)
    });
    run.ticks(30);
    assert!(run
        .seen
        .iter()
        .all(|v| v.workers == 1 && v.chunks_in_flight == 2));
    assert_eq!(run.tuner.values().batches_in_flight, 4);
    // The devices limit: nothing to tune, settled at once.
    let mut run = Run::new(&ALL, roomy(), |_| (5000.0, Bottleneck::Devices, BUSY));
    run.ticks(20);
    assert!(run.seen.iter().all(|v| *v == start()));
    assert!(run.tuner.snapshot().settled);
    assert_eq!(run.tuner.snapshot().trials, 0);
}

#[test]
fn records_larger_than_the_budget_allows_lower_batches_in_flight() {
    // Budget for 8 batches in flight of 1 KiB records; the records turn out
    // 2 KiB: batches in flight come down until the bound fits.
    let config = config();
    let at = |bif: usize, bytes: usize| {
        start()
            .with(TunedSetting::BatchesInFlight, bif)
            .bound_bytes(&config, bytes) as u64
    };
    let budgets = Budgets {
        cpus: 4,
        memory: at(8, 1024),
    };
    let mut run = Run::new(&ALL, budgets, |v| {
        let rate = 100.0 * v.batches_in_flight as f64;
        (rate, Bottleneck::FeedQueue, WAITING)
    });
    run.ticks(20);
    assert_eq!(run.tuner.values().batches_in_flight, 8);
    assert!(at(2, 2048) <= budgets.memory, "the test's premise");
    assert!(at(4, 2048) > budgets.memory, "the test's premise");
    run.world.record_bytes = 2048;
    for _ in 0..10 {
        if let Some(v) = run.tuner.tick(&mut run.world) {
            run.world.values = v;
        }
    }
    let v = run.tuner.values();
    assert!(
        v.bound_bytes(&config, 2048) as u64 <= budgets.memory,
        "{v:?} over the budget"
    );
    assert_eq!(v.batches_in_flight, 2);
    let last = run.tuner.snapshot().changes.last().cloned().unwrap();
    assert_eq!(last.setting, TunedSetting::BatchesInFlight);
    assert!(last.to < last.from);
}

/// An instance map that does nothing (the settings then have workers).
struct Nothing;

impl feedline::transform::InstanceMap for Nothing {
    fn map(
        &self,
        _: &feedline::transform::Row<'_>,
        _: &mut feedline::transform::TransformCtx,
    ) -> Result<feedline::format::generator::Sample, feedline::transform::BoxError> {
        Ok(feedline::format::generator::Sample::new())
    }
}

#[test]
fn with_more_workers_the_batches_in_flight_follow_them_and_go_back_with_them() {
    // Batches of 8 rows: 16 rows a worker is 2 batches a worker. Up to 4
    // workers help; each trial of workers brings the batches in flight to
    // 2 × workers, and the revert of 7 workers (the 8 CPUs less the reader)
    // takes them back to 8.
    let mut config = config();
    config.batching.batch = feedline_actors::BatchPolicy::Fixed(8);
    config.transforms.instance = Some(std::sync::Arc::new(Nothing));
    let mut tuner = Tuner::new(&config, ALL.to_vec(), start(), roomy(), 64);
    let mut world = World {
        values: start(),
        t_s: 0.0,
        record_bytes: 64,
        model: Box::new(|v: &TunedValues| {
            (
                1000.0 * v.workers.min(4) as f64,
                Bottleneck::BatchMaker,
                BUSY,
            )
        }),
        cpu: None,
    };
    let mut seen = vec![start()];
    for _ in 0..12 {
        if let Some(v) = tuner.tick(&mut world) {
            world.values = v;
            seen.push(v);
        }
    }
    let pairs: Vec<(usize, usize)> = seen
        .iter()
        .map(|v| (v.workers, v.batches_in_flight))
        .collect();
    assert_eq!(
        &pairs[..5],
        &[(1, 2), (2, 4), (4, 8), (7, 14), (4, 8)],
        "{pairs:?}"
    );
    use TunedSetting::{BatchesInFlight as B, Workers as W};
    let kept: Vec<_> = (tuner.snapshot().changes.iter())
        .map(|c| (c.setting, c.from, c.to))
        .collect();
    assert_eq!(kept[..4], [(W, 1, 2), (B, 2, 4), (W, 2, 4), (B, 4, 8)]);
}

#[test]
fn with_the_cpu_time_measured_threads_are_added_while_the_cpus_have_room() {
    use TunedSetting::Workers as W;
    let rate = |v: &TunedValues| (1000.0 * v.workers as f64, Bottleneck::BatchMaker, BUSY);
    let budgets = |cpus| Budgets {
        cpus,
        memory: 1 << 40,
    };
    // A reader that mostly waits and workers of 0.7 cores each: on 2 CPUs,
    // 1 reader and 2 workers (1.7 cores) — more threads than CPUs — and no
    // third worker (a pool is at most the 2 CPUs).
    let mut run = Run::new(&[W], budgets(2), rate);
    run.world.cpu = Some(Box::new(|v| 0.3 + 0.7 * v.workers as f64));
    run.ticks(20);
    assert_eq!(run.path(W), vec![1, 2]);
    assert_eq!(run.tuner.values().threads(), 3);
    assert!(run.tuner.snapshot().settled);
    // The CPUs saturated (1.8 of 2 used, less than a quarter core left):
    // no worker is tried, though more would seem to help.
    let mut run = Run::new(&[W], budgets(2), rate);
    run.world.cpu = Some(Box::new(|_| 1.8));
    run.ticks(20);
    assert_eq!(run.path(W), vec![1]);
    assert_eq!(run.tuner.snapshot().trials, 0);
    // Workers of a full core each on 4 CPUs: 4 workers would use 4.2
    // cores, over the budget: reverted though the rate rose.
    let mut run = Run::new(&[W], budgets(4), rate);
    run.world.cpu = Some(Box::new(|v| 0.2 + v.workers as f64));
    run.ticks(30);
    assert_eq!(run.path(W), vec![1, 2, 4, 2]);
    assert_eq!(run.kept(), vec![(W, 1, 2)]);
}
