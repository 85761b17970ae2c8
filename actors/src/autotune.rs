//! The autotuner: it owns the choice, while a pipeline runs, of the
//! settings the user did not give — transform workers, batches in flight,
//! chunks in flight (and, in its policy, readers) — within a CPU budget
//! (the process's CPU time, in cores, the consumer's included: a thread
//! is added only while the process used less; each pool of threads at
//! most that many, [`Budgets`]) and a memory budget (the stated in-flight bound,
//! [`PipelineConfig::in_flight_bound_bytes`]).
//!
//! It decides from measurement, not from a model (tf.data's `STAGE_BASED`
//! idea, on the stage counters feedline keeps anyway): at the end of every
//! interval a [`CounterSource`] says how many records were delivered per
//! second, each stage's busy, idle and blocked shares, which stage limits
//! and the feed queue's depth. The [`Tuner`] then
//! - raises one setting that feeds the limiting stage (readers limit:
//!   chunks in flight, or readers; the batch maker limits: workers, or
//!   batches in flight — the one its busy share points at first; the
//!   hand-off limits: batches in flight), never past a budget (a candidate
//!   over one is not tried);
//! - after a trial (an interval to settle, one to measure) keeps the change
//!   only if the delivered rate rose by [`MARGIN`], else puts the old value
//!   back and never tries raising that setting again;
//! - settles when no candidate is left; when the records turn out larger
//!   than the bound assumed, it lowers batches in flight, then chunks in
//!   flight, then workers, until the bound is within the memory budget.
//!
//! The tuner is pure: its measurements come through the trait, its values
//! go out as [`TunedValues`], so a test drives it with a fake source. The
//! pipeline's side (`LiveCounters`, `Knobs`, `Runner`) reads the
//! counters, applies the values to the stages' shared settings and
//! publishes an [`AutotuneSnapshot`] in the statistics. Readers are fixed
//! while a pipeline runs (a reader is a thread with its files' state):
//! the pipeline does not hand them to the tuner.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use crate::config::{available_cpus, available_memory, Autotune};
use crate::config::{PipelineConfig, MAX_BATCHES_IN_FLIGHT, MAX_READERS, MIN_BATCHES_IN_FLIGHT};
use crate::stats::{Bottleneck, RawCounters, Stats, Verdict};
pub use crate::tuned::{AutotuneChange, AutotuneSnapshot, TunedSetting, TunedValues};

/// How often the pipeline's tuner looks at the counters by default.
pub const INTERVAL: Duration = Duration::from_millis(100);

/// A measurement spans at least this many looks ([`INTERVAL`]s)…
pub const MIN_LOOKS: u32 = 2;

/// …and at least this many batches made (a rate of fewer is too coarse to
/// judge a change by), unless it has spanned [`MAX_LOOKS`].
pub const MIN_BATCHES: u64 = 8;

/// The longest a measurement spans, in looks, however few batches it saw.
pub const MAX_LOOKS: u32 = 50;

/// How much the delivered rate must rise for a change to be kept: 3 %.
pub const MARGIN: f64 = 0.03;

/// The CPU time, in cores, the process must leave unused of the CPU
/// budget for the tuner to try one more reader or worker: a quarter of a
/// core (a thread that mostly waits, as a reader of small records does,
/// still fits; a saturated machine gets no more threads).
pub const CPU_ROOM: f64 = 0.25;

/// The CPU seconds (user and system) this process has used so far; `None`
/// where they cannot be read (not a Unix).
pub fn process_cpu_seconds() -> Option<f64> {
    #[cfg(unix)]
    {
        // SAFETY: getrusage writes into the struct passed; RUSAGE_SELF is valid.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
            return None;
        }
        let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
        Some(t(u.ru_utime) + t(u.ru_stime))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The most chunks in flight per reader the tuner raises to.
pub const MAX_CHUNKS_IN_FLIGHT: usize = 64;

impl TunedValues {
    /// The values `config` starts with.
    pub fn of(config: &PipelineConfig) -> Self {
        let (readers, workers) = config.threads();
        TunedValues {
            readers,
            workers,
            batches_in_flight: config.in_flight_batches(),
            chunks_in_flight: config.reading.chunks_in_flight.max(1),
        }
    }

    /// `config` with these values.
    pub fn applied(&self, config: &PipelineConfig) -> PipelineConfig {
        let mut c = config.clone();
        if c.inputs.sets.is_empty() && c.inputs.push.is_none() {
            c.reading.readers = self.readers;
        }
        if self.workers > 0 {
            c.transforms.workers = self.workers;
        }
        c.batching.batches_in_flight = Some(self.batches_in_flight);
        c.reading.chunks_in_flight = self.chunks_in_flight;
        c
    }

    /// The stated in-flight bound of `config` with these values, for
    /// records of `record_bytes`.
    pub fn bound_bytes(&self, config: &PipelineConfig, record_bytes: usize) -> usize {
        self.applied(config).in_flight_bound_bytes(record_bytes)
    }
}

impl AutotuneSnapshot {
    /// `config` (the settings as given) with what the tuner chose in it:
    /// its values, and the shuffle pool's byte bound when it sized it.
    pub fn applied(&self, config: &PipelineConfig) -> PipelineConfig {
        let mut c = self.values.applied(config);
        if let Some(bytes) = self.shuffle_bytes {
            c.order.shuffle_bytes = bytes;
        }
        c
    }
}

/// Which settings of `config` the tuner may change while the pipeline
/// runs (the config says which are its: [`PipelineConfig::tuners_settings`];
/// not readers, fixed once it runs: see the module's doc).
pub(crate) fn tunable(config: &PipelineConfig) -> Vec<TunedSetting> {
    let t = config.tuners_settings();
    [
        (TunedSetting::Workers, t.workers),
        (TunedSetting::BatchesInFlight, t.batches_in_flight),
        (TunedSetting::ChunksInFlight, t.chunks_in_flight),
    ]
    .into_iter()
    .filter_map(|(s, yes)| yes.then_some(s))
    .collect()
}

/// The least value of a tuned setting.
fn least(setting: TunedSetting) -> usize {
    match setting {
        TunedSetting::BatchesInFlight => MIN_BATCHES_IN_FLIGHT,
        _ => 1,
    }
}

/// The values a tuned pipeline of `config` starts with: its own, the
/// tuned pools of threads at most `cpus` each (the CPU time they use, not
/// their count, is what the tuner then keeps within the budget,
/// [`Budgets`]) — the readers, fixed once it runs, at most half of
/// `cpus` (at least 1: the shuffle stage and the batch maker are a busy
/// thread each beside them, and the consumer another); the workers at
/// most `cpus` (the tuner adds more while the CPUs have room).
pub(crate) fn start_values(config: &PipelineConfig, cpus: usize) -> TunedValues {
    let mut v = TunedValues::of(config);
    if config.tuners_settings().readers {
        v.readers = v.readers.min(cpus / 2).max(1);
    }
    if tunable(config).contains(&TunedSetting::Workers) {
        v.workers = v.workers.min(cpus).max(1);
    }
    if config.batching.batches_in_flight.is_none() {
        // The default follows the workers: ⌈16 × workers / batch⌉.
        let mut c = config.clone();
        c.transforms.workers = v.workers.max(1);
        v.batches_in_flight = c.in_flight_batches();
    }
    v
}

/// The shuffle pool's byte bound of a tuned pipeline of `config` within a
/// memory budget of `memory` bytes, when it is the tuner's
/// ([`PipelineConfig::tuners_settings`]: not given, with a pool) and the
/// default is more than [`POOL_SHARE_OF_BUDGET`] of the budget: that share
/// (at least 1 byte). The pool holds its bound twice at most (the pool and
/// the end-of-pass drain), so a quarter leaves half the budget to the
/// chunks, the batches and the workers. Sized once as the pipeline starts
/// (the pool does not change size while it runs). Not in deterministic
/// mode: the pool's bound is part of what the draw is a function of, and
/// tuning never changes a deterministic run's batches.
pub fn pool_bytes(config: &PipelineConfig, memory: u64) -> Option<usize> {
    if !config.tuners_settings().shuffle_bytes || config.deterministic() {
        return None;
    }
    let share = usize::try_from((memory as f64 * POOL_SHARE_OF_BUDGET) as u64)
        .unwrap_or(usize::MAX)
        .max(1);
    (config.order.shuffle_bytes > share).then_some(share)
}

/// The share of the memory budget the shuffle pool's byte bound may take
/// when the tuner sizes it ([`pool_bytes`]).
pub const POOL_SHARE_OF_BUDGET: f64 = 0.25;

/// One stage's shares of an interval (per reader, per worker).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StageShares {
    /// Working.
    pub busy: f64,
    /// Waiting for input.
    pub idle: f64,
    /// Waiting for the next stage to take output.
    pub blocked: f64,
}

/// What one measurement interval showed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measurement {
    /// Seconds since the pipeline started (the interval's end).
    pub t_s: f64,
    /// Records delivered (made into the feed queue) per second over the interval.
    pub rate: f64,
    /// The readers' shares.
    pub readers: StageShares,
    /// The shuffle stage's shares.
    pub shuffle: StageShares,
    /// The batch maker's shares (per transform worker in force).
    pub batch_maker: StageShares,
    /// The stage that limited over the interval.
    pub limiting: Bottleneck,
    /// Batches in the feed queue at the interval's end.
    pub feed_queue_depth: u64,
    /// A record's bytes as the bound counts them, as seen so far
    /// ([`PipelineConfig::record_bytes_of_run`]).
    pub record_bytes: usize,
    /// The CPU time the process used over the interval, in cores (user
    /// and system, [`process_cpu_seconds`]: every thread of the process,
    /// a consumer's in the same process too); `None` where it is not
    /// measured (then threads count: readers and workers together within
    /// the CPU budget).
    pub cpu_cores: Option<f64>,
}

/// Where the tuner's measurements come from: the pipeline's counters, or
/// a test's.
pub trait CounterSource {
    /// The interval since the last call.
    fn measure(&mut self) -> Measurement;
}

/// The budgets the tuner keeps within.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budgets {
    /// Cores of CPU time. A reader or worker is added only while the
    /// process used at most `cpus − `[`CPU_ROOM`] cores over the interval,
    /// and kept only if it used at most `cpus × (1 + `[`MARGIN`]`)` over
    /// its trial; each pool (the readers, the workers) is at most `cpus`
    /// threads. Unmeasured ([`Measurement::cpu_cores`] `None`): readers and
    /// workers together at most `cpus` threads.
    pub cpus: usize,
    /// The stated in-flight bound, at most.
    pub memory: u64,
}

/// Where a trial stands.
#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    /// Intervals to let pass before measuring (after a start or a revert).
    Settling(u32),
    /// Measuring, choosing the next trial.
    Choosing,
    /// `setting` raised from `from` to `to` (the values `before` it);
    /// judged after `left` intervals.
    Trial {
        before: TunedValues,
        setting: TunedSetting,
        from: usize,
        to: usize,
        rate_before: f64,
        left: u32,
    },
}

/// The tuner: measurements in, values out ([`tick`](Self::tick)).
pub struct Tuner {
    config: PipelineConfig,
    budgets: Budgets,
    tunable: Vec<TunedSetting>,
    /// The most workers (the pool's threads).
    workers_cap: usize,
    values: TunedValues,
    /// Settings whose raising did not help: never tried again.
    exhausted: Vec<TunedSetting>,
    state: State,
    changes: Vec<AutotuneChange>,
    trials: u64,
    settled: bool,
    workers_max: usize,
    /// Intervals a trial lets pass before the one it is judged by.
    settle: u32,
    /// The shuffle pool's byte bound, when the pipeline sized it from the
    /// memory budget ([`pool_bytes`]).
    shuffle_bytes: Option<usize>,
    /// Whether the log has said that the bound cannot be brought within
    /// the memory budget (said once).
    over_budget_said: bool,
}

impl Tuner {
    /// A tuner of `config`'s settings `tunable`, from `start`, within
    /// `budgets`; workers never past `workers_cap`.
    pub fn new(
        config: &PipelineConfig,
        tunable: Vec<TunedSetting>,
        start: TunedValues,
        budgets: Budgets,
        workers_cap: usize,
    ) -> Self {
        Tuner {
            config: config.clone(),
            budgets,
            tunable,
            workers_cap,
            values: start,
            exhausted: Vec::new(),
            state: State::Settling(1),
            changes: Vec::new(),
            trials: 0,
            settled: false,
            workers_max: start.workers,
            settle: 1,
            shuffle_bytes: None,
            over_budget_said: false,
        }
    }

    /// Says that the pipeline sized the shuffle pool's byte bound to
    /// `bytes` ([`pool_bytes`]): the snapshot carries it.
    pub fn with_shuffle_bytes(mut self, bytes: Option<usize>) -> Self {
        self.shuffle_bytes = bytes;
        self
    }

    /// The values in force.
    pub fn values(&self) -> TunedValues {
        self.values
    }

    /// What it chose so far.
    pub fn snapshot(&self) -> AutotuneSnapshot {
        AutotuneSnapshot {
            values: self.values,
            changes: self.changes.clone(),
            trials: self.trials,
            settled: self.settled,
            workers_max: self.workers_max,
            shuffle_bytes: self.shuffle_bytes,
        }
    }

    /// One interval ended: measure it through `source` and decide; the
    /// values to put in force when they changed.
    pub fn tick(&mut self, source: &mut dyn CounterSource) -> Option<TunedValues> {
        let m = source.measure();
        if let Some(v) = self.within_memory(&m) {
            return Some(v);
        }
        match self.state {
            State::Settling(n) if n > 1 => {
                self.state = State::Settling(n - 1);
                None
            }
            State::Settling(_) | State::Choosing => self.choose(&m),
            State::Trial { left, .. } if left > 1 => {
                if let State::Trial { left, .. } = &mut self.state {
                    *left -= 1;
                }
                None
            }
            State::Trial {
                before,
                setting,
                from,
                to,
                rate_before,
                ..
            } => {
                if m.rate >= rate_before * (1.0 + MARGIN)
                    && m.rate > 0.0
                    && self.cpu_kept(setting, &m)
                {
                    log::info!(
                        "autotune: {setting} {from} → {to} kept ({rate_before:.0} → {:.0} records/s)",
                        m.rate
                    );
                    self.changes.push(AutotuneChange {
                        t_s: m.t_s,
                        setting,
                        from,
                        to,
                        rate_before,
                        rate_after: m.rate,
                    });
                    // Batches in flight that followed the workers.
                    let (b0, b1) = (before.batches_in_flight, self.values.batches_in_flight);
                    if setting == TunedSetting::Workers && b1 != b0 {
                        self.changes.push(AutotuneChange {
                            t_s: m.t_s,
                            setting: TunedSetting::BatchesInFlight,
                            from: b0,
                            to: b1,
                            rate_before,
                            rate_after: m.rate,
                        });
                    }
                    // This interval is the next trial's baseline.
                    self.choose(&m).or(Some(self.values))
                } else {
                    log::info!(
                        "autotune: {setting} {from} → {to} reverted ({rate_before:.0} → {:.0} records/s); not raised again",
                        m.rate
                    );
                    self.values = before;
                    self.exhausted.push(setting);
                    self.state = State::Settling(self.settle + 1);
                    Some(self.values)
                }
            }
        }
    }

    /// Over the memory budget (the records are larger than the bound
    /// assumed so far): lower one setting, the trial in progress (if any)
    /// abandoned as not to be tried again.
    fn within_memory(&mut self, m: &Measurement) -> Option<TunedValues> {
        if self.bound(&self.values, m.record_bytes) <= self.budgets.memory {
            return None;
        }
        if let State::Trial {
            before, setting, ..
        } = self.state
        {
            self.values = before;
            self.exhausted.push(setting);
            self.state = State::Settling(self.settle + 1);
            if self.bound(&self.values, m.record_bytes) <= self.budgets.memory {
                return Some(self.values);
            }
        }
        let lower = [
            TunedSetting::BatchesInFlight,
            TunedSetting::ChunksInFlight,
            TunedSetting::Workers,
        ]
        .into_iter()
        .filter(|s| self.tunable.contains(s))
        .find_map(|s| {
            let from = self.values.get(s);
            let to = match s {
                TunedSetting::Workers => from.saturating_sub(1),
                _ => from / 2,
            }
            .max(least(s));
            (to < from).then_some((s, from, to))
        });
        let Some((setting, from, to)) = lower else {
            if !self.over_budget_said {
                self.over_budget_said = true;
                log::warn!(
                    "autotune: the in-flight bound, {} bytes, is over the memory budget of {} bytes with the tuned settings at their least: the settings given (the shuffle pool's bytes, the feed queue's capacity, the workers) hold more",
                    self.bound(&self.values, m.record_bytes),
                    self.budgets.memory
                );
            }
            return None;
        };
        log::info!(
            "autotune: {setting} {from} → {to}: the in-flight bound was over the memory budget of {} bytes",
            self.budgets.memory
        );
        self.values = self.values.with(setting, to);
        self.exhausted.push(setting);
        self.changes.push(AutotuneChange {
            t_s: m.t_s,
            setting,
            from,
            to,
            rate_before: m.rate,
            rate_after: m.rate,
        });
        self.state = State::Settling(self.settle + 1);
        Some(self.values)
    }

    /// Start the next trial for what `m` shows, or settle.
    fn choose(&mut self, m: &Measurement) -> Option<TunedValues> {
        self.state = State::Choosing;
        let next = match m.rate > 0.0 {
            true => self.candidates(m).into_iter().find_map(|s| {
                let from = self.values.get(s);
                self.raised(s, from, m).map(|to| (s, from, to))
            }),
            false => None,
        };
        let Some((setting, from, to)) = next else {
            self.settled = true;
            return None;
        };
        self.settled = false;
        self.trials += 1;
        let before = self.values;
        self.values = self.trial_values(setting, to);
        self.workers_max = self.workers_max.max(self.values.workers);
        self.state = State::Trial {
            before,
            setting,
            from,
            to,
            rate_before: m.rate,
            left: self.settle + 1,
        };
        Some(self.values)
    }

    /// The settings that feed the limiting stage of `m`, the likelier first:
    /// readers limit — chunks in flight first when they mostly wait for
    /// acknowledgements, else readers; the batch maker limits — batches in
    /// flight first when its workers are mostly not busy (they wait for
    /// rows), else workers; the hand-off limits — batches in flight. The
    /// shuffle stage (one thread) and the devices have none.
    fn candidates(&self, m: &Measurement) -> Vec<TunedSetting> {
        use TunedSetting as T;
        let order: &[TunedSetting] = match m.limiting {
            Bottleneck::Readers if m.readers.idle > m.readers.busy => {
                &[T::ChunksInFlight, T::Readers]
            }
            Bottleneck::Readers => &[T::Readers, T::ChunksInFlight],
            Bottleneck::BatchMaker if m.batch_maker.busy < 0.5 => &[T::BatchesInFlight, T::Workers],
            Bottleneck::BatchMaker => &[T::Workers, T::BatchesInFlight],
            Bottleneck::FeedQueue => &[T::BatchesInFlight],
            Bottleneck::Shuffle | Bottleneck::Devices => &[],
        };
        (order.iter().copied())
            .filter(|s| self.tunable.contains(s) && !self.exhausted.contains(s))
            .collect()
    }

    /// Whether a kept trial of `setting` used CPU time within the budget
    /// (settings that are not threads: always).
    fn cpu_kept(&self, setting: TunedSetting, m: &Measurement) -> bool {
        let threads = matches!(setting, TunedSetting::Readers | TunedSetting::Workers);
        let most = self.budgets.cpus as f64 * (1.0 + MARGIN);
        !threads || m.cpu_cores.is_none_or(|c| c <= most)
    }

    /// `setting` raised from `from` after the interval `m`: doubled
    /// (readers: one more), or as far as the budgets and its most let;
    /// `None` when it cannot rise. A pool of threads rises only while `m`
    /// left [`CPU_ROOM`] of the CPU budget, to `cpus` threads at most (not
    /// measured: readers and workers together at most `cpus`).
    fn raised(&self, setting: TunedSetting, from: usize, m: &Measurement) -> Option<usize> {
        let most = match setting {
            TunedSetting::Readers => MAX_READERS,
            TunedSetting::Workers => self.workers_cap,
            TunedSetting::BatchesInFlight => MAX_BATCHES_IN_FLIGHT,
            TunedSetting::ChunksInFlight => MAX_CHUNKS_IN_FLIGHT,
        };
        let cpus = self.budgets.cpus;
        let most = match (setting, m.cpu_cores) {
            (TunedSetting::Readers | TunedSetting::Workers, Some(used))
                if used <= cpus as f64 - CPU_ROOM =>
            {
                most.min(cpus)
            }
            (TunedSetting::Readers | TunedSetting::Workers, Some(_)) => from,
            (TunedSetting::Readers | TunedSetting::Workers, None) => {
                most.min(from + cpus.saturating_sub(self.values.threads()))
            }
            _ => most,
        };
        let record_bytes = m.record_bytes;
        let step = match setting {
            TunedSetting::Readers => from + 1,
            _ => from.saturating_mul(2).max(from + 1),
        };
        [step.min(most), from + 1]
            .into_iter()
            .filter(|&to| to > from && to <= most)
            .find(|&to| {
                self.bound(&self.trial_values(setting, to), record_bytes) <= self.budgets.memory
            })
    }

    /// The values of a trial of `setting` at `to`: with more workers, the
    /// batches in flight (when tuned) follow them up to the pipeline's
    /// default for that many ([`PipelineConfig::in_flight_batches`]: 16 rows
    /// a worker), or the workers would wait for rows.
    fn trial_values(&self, setting: TunedSetting, to: usize) -> TunedValues {
        let v = self.values.with(setting, to);
        if setting != TunedSetting::Workers
            || !self.tunable.contains(&TunedSetting::BatchesInFlight)
            || self.exhausted.contains(&TunedSetting::BatchesInFlight)
        {
            return v;
        }
        let mut c = self.config.clone();
        c.transforms.workers = to;
        c.batching.batches_in_flight = None;
        let follow = c.in_flight_batches();
        v.with(
            TunedSetting::BatchesInFlight,
            v.batches_in_flight.max(follow),
        )
    }

    fn bound(&self, values: &TunedValues, record_bytes: usize) -> u64 {
        values.bound_bytes(&self.config, record_bytes) as u64
    }
}

/// The tuner's measurements from a pipeline's counters: each interval's
/// differences.
pub(crate) struct LiveCounters {
    stats: Stats,
    config: Arc<PipelineConfig>,
    last: RawCounters,
    /// The process's CPU seconds at the last measurement.
    last_cpu_s: Option<f64>,
}

impl LiveCounters {
    pub(crate) fn new(stats: Stats, config: Arc<PipelineConfig>) -> Self {
        let last = stats.raw();
        LiveCounters {
            stats,
            config,
            last,
            last_cpu_s: process_cpu_seconds(),
        }
    }
}

impl CounterSource for LiveCounters {
    fn measure(&mut self) -> Measurement {
        let now = self.stats.raw();
        let last = std::mem::replace(&mut self.last, now);
        let dt_ns = now.t_ns.saturating_sub(last.t_ns).max(1) as f64;
        let cpu_s = process_cpu_seconds();
        let last_cpu_s = std::mem::replace(&mut self.last_cpu_s, cpu_s);
        let cpu_cores = cpu_s
            .zip(last_cpu_s)
            .map(|(now_s, then_s)| (now_s - then_s).max(0.0) / (dt_ns / 1e9));
        let shares = |a: [u64; 4], b: [u64; 4], workers: u64| {
            let per = dt_ns * workers.max(1) as f64;
            let d = |i: usize| b[i].saturating_sub(a[i]) as f64 / per;
            StageShares {
                busy: d(1),
                idle: d(2),
                blocked: d(3),
            }
        };
        let readers = shares(last.readers, now.readers, now.reader_count);
        let shuffle = shares(last.shuffle, now.shuffle, 1);
        let batch_maker = shares(last.maker, now.maker, now.maker_workers);
        let limiting = Verdict {
            devices: now.devices,
            device_busy_s: now.device_busy_ns.saturating_sub(last.device_busy_ns) as f64 / 1e9,
            device_wait_s: now.device_wait_ns.saturating_sub(last.device_wait_ns) as f64 / 1e9,
            readers_busy: readers.busy,
            shuffle_busy: shuffle.busy,
            maker_busy: batch_maker.busy,
            maker_blocked: batch_maker.blocked,
            queue_depth: now.queue_depth as f64,
            queue_capacity: now.queue_capacity as f64,
        }
        .judge();
        let made = now.maker[0].saturating_sub(last.maker[0]) as f64;
        Measurement {
            t_s: now.t_ns as f64 / 1e9,
            rate: made / (dt_ns / 1e9),
            readers,
            shuffle,
            batch_maker,
            limiting,
            feed_queue_depth: now.queue_depth,
            record_bytes: self.config.record_bytes_of_run(&self.stats.snapshot()),
            cpu_cores,
        }
    }
}

/// The stages' shared settings the tuner changes while they run.
#[derive(Clone, Default)]
pub(crate) struct Knobs {
    /// The batch maker's batches in flight.
    pub batches_in_flight: Option<Tunable>,
    /// Each reader's chunks in flight.
    pub chunks_in_flight: Option<Tunable>,
    /// The transform workers let run at once.
    pub workers: Option<Arc<feedline::transform::WorkerGate>>,
}

/// A setting a stage reads each time it decides (and the tuner writes).
#[derive(Clone, Debug)]
pub(crate) struct Tunable(Arc<AtomicUsize>);

impl Tunable {
    pub(crate) fn new(v: usize) -> Self {
        Tunable(Arc::new(AtomicUsize::new(v)))
    }

    /// The value now.
    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self, v: usize) {
        self.0.store(v, Ordering::Relaxed)
    }
}

/// The tuner at work in a pipeline: every [`interval`](Self::interval) the
/// supervisor ticks it; the values go to the stages, the snapshot to the
/// statistics.
pub(crate) struct Runner {
    tuner: Tuner,
    source: LiveCounters,
    knobs: Knobs,
    stats: Stats,
    /// How often it looks at the counters.
    pub interval: Duration,
    /// Looks since the last measurement.
    looks: u32,
}

impl Runner {
    /// The runner of `config` (tuning on) changing `tunable` from `start`
    /// (workers never past `workers_cap`; the shuffle pool's byte bound
    /// sized to `shuffle_bytes`, if it was) through its stages' `knobs`,
    /// reading `stats`.
    pub(crate) fn new(
        config: Arc<PipelineConfig>,
        tunable: &[TunedSetting],
        start: TunedValues,
        workers_cap: usize,
        shuffle_bytes: Option<usize>,
        knobs: Knobs,
        stats: Stats,
    ) -> Self {
        let tune = config.tuning.autotune.unwrap_or_default();
        let budgets = Budgets {
            cpus: tune.resolved_cpus(),
            memory: tune.resolved_memory_budget(),
        };
        // What the stages can change while they run.
        let tunable: Vec<TunedSetting> = (tunable.iter().copied())
            .filter(|s| match s {
                TunedSetting::Workers => knobs.workers.is_some(),
                TunedSetting::BatchesInFlight => knobs.batches_in_flight.is_some(),
                TunedSetting::ChunksInFlight => knobs.chunks_in_flight.is_some(),
                TunedSetting::Readers => false,
            })
            .collect();
        log::info!(
            "autotune: {tunable:?} within {} CPUs and {} bytes, from {start:?}",
            budgets.cpus,
            budgets.memory
        );
        let tuner = Tuner::new(&config, tunable, start, budgets, workers_cap)
            .with_shuffle_bytes(shuffle_bytes);
        stats.set_autotune(tuner.snapshot());
        let interval = config.tuning.interval.unwrap_or(INTERVAL);
        Runner {
            tuner,
            source: LiveCounters::new(stats.clone(), config),
            knobs,
            stats,
            interval,
            looks: 0,
        }
    }

    /// A look at the counters: when the interval since the last
    /// measurement is long enough ([`MIN_LOOKS`], [`MIN_BATCHES`],
    /// [`MAX_LOOKS`]), the tuner measures it and decides.
    pub(crate) fn tick(&mut self) {
        self.looks += 1;
        let batches = self.stats.raw().batches - self.source.last.batches;
        if self.looks < MIN_LOOKS || (batches < MIN_BATCHES && self.looks < MAX_LOOKS) {
            return;
        }
        self.looks = 0;
        if let Some(v) = self.tuner.tick(&mut self.source) {
            if let Some(k) = &self.knobs.batches_in_flight {
                k.set(v.batches_in_flight);
            }
            if let Some(k) = &self.knobs.chunks_in_flight {
                k.set(v.chunks_in_flight);
            }
            if let Some(g) = &self.knobs.workers {
                g.set_limit(v.workers);
                self.stats.set_maker_workers(v.workers);
            }
        }
        let mut snap = self.tuner.snapshot();
        if let Some(g) = &self.knobs.workers {
            snap.workers_max = snap.workers_max.max(g.peak());
        }
        self.stats.set_autotune(snap);
    }
}
