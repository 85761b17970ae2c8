//! What the autotuner chose, as plain data: the settings it tunes
//! ([`TunedSetting`]), their values in force ([`TunedValues`]), the
//! changes it kept ([`AutotuneChange`]) and the snapshot the statistics
//! carry ([`AutotuneSnapshot`]). How they are chosen is
//! [`autotune`](crate::autotune)'s.

use serde::Serialize;

/// A setting the autotuner tunes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TunedSetting {
    /// Prefetch readers.
    Readers,
    /// Transform workers.
    Workers,
    /// Batches the batch maker holds.
    BatchesInFlight,
    /// Unacknowledged chunks per reader.
    ChunksInFlight,
}

impl TunedSetting {
    /// Every tuned setting.
    pub const ALL: [TunedSetting; 4] = [
        TunedSetting::Readers,
        TunedSetting::Workers,
        TunedSetting::BatchesInFlight,
        TunedSetting::ChunksInFlight,
    ];

    /// Its key (`readers`, `workers`, `batches_in_flight`, `chunks_in_flight`).
    pub fn key(self) -> &'static str {
        match self {
            TunedSetting::Readers => "readers",
            TunedSetting::Workers => "workers",
            TunedSetting::BatchesInFlight => "batches_in_flight",
            TunedSetting::ChunksInFlight => "chunks_in_flight",
        }
    }
}

impl std::fmt::Display for TunedSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.key())
    }
}

/// The values in force of the tuned settings (`workers` 0: no transform
/// workers, batches are collated on the batch maker's thread).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TunedValues {
    /// Prefetch readers.
    pub readers: usize,
    /// Transform workers let run at once.
    pub workers: usize,
    /// Batches the batch maker holds at most.
    pub batches_in_flight: usize,
    /// Unacknowledged chunks per reader.
    pub chunks_in_flight: usize,
}

impl TunedValues {
    /// The value of `setting`.
    pub fn get(&self, setting: TunedSetting) -> usize {
        match setting {
            TunedSetting::Readers => self.readers,
            TunedSetting::Workers => self.workers,
            TunedSetting::BatchesInFlight => self.batches_in_flight,
            TunedSetting::ChunksInFlight => self.chunks_in_flight,
        }
    }

    /// These values with `setting` at `value`.
    pub fn with(mut self, setting: TunedSetting, value: usize) -> Self {
        match setting {
            TunedSetting::Readers => self.readers = value,
            TunedSetting::Workers => self.workers = value,
            TunedSetting::BatchesInFlight => self.batches_in_flight = value,
            TunedSetting::ChunksInFlight => self.chunks_in_flight = value,
        }
        self
    }

    /// The threads they take: readers and transform workers.
    pub fn threads(&self) -> usize {
        self.readers + self.workers
    }
}

/// A change the tuner kept: at `t_s`, `setting` from `from` to `to`, the
/// delivered rate `rate_before` the trial and `rate_after` over it (a
/// lowering for the memory budget: the rate then, twice).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AutotuneChange {
    /// Seconds since the pipeline started.
    pub t_s: f64,
    /// The setting.
    pub setting: TunedSetting,
    /// Its value before.
    pub from: usize,
    /// Its value after.
    pub to: usize,
    /// Records per second before.
    pub rate_before: f64,
    /// Records per second after.
    pub rate_after: f64,
}

/// What the tuner chose: the values in force and the changes it kept, in
/// order (a trial it reverted is not among them: see [`trials`](Self::trials)).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AutotuneSnapshot {
    /// The values in force.
    pub values: TunedValues,
    /// The changes kept, in order.
    pub changes: Vec<AutotuneChange>,
    /// Changes tried, kept or not.
    #[serde(skip)]
    pub trials: u64,
    /// No candidate was left at the last interval.
    #[serde(skip)]
    pub settled: bool,
    /// The most transform workers let run at any moment.
    #[serde(skip)]
    pub workers_max: usize,
    /// The shuffle pool's byte bound in force, when the tuner sized it
    /// from the memory budget ([`pool_bytes`](crate::autotune::pool_bytes)).
    #[serde(skip)]
    pub shuffle_bytes: Option<usize>,
}

impl AutotuneSnapshot {
    /// One line: the values in force, the changes kept and tried.
    ///
    /// ```
    /// use feedline_actors::{AutotuneSnapshot, TunedValues};
    /// let s = AutotuneSnapshot {
    ///     values: TunedValues { readers: 2, workers: 3, batches_in_flight: 8, chunks_in_flight: 4 },
    ///     ..AutotuneSnapshot::default()
    /// };
    /// assert_eq!(
    ///     s.summary_line(),
    ///     "autotune: readers 2, workers 3, batches_in_flight 8, chunks_in_flight 4 (0 changes kept of 0 tried)"
    /// );
    /// ```
    pub fn summary_line(&self) -> String {
        let v = &self.values;
        let mut line = format!(
            "autotune: readers {}, workers {}, batches_in_flight {}, chunks_in_flight {} ({} changes kept of {} tried",
            v.readers,
            v.workers,
            v.batches_in_flight,
            v.chunks_in_flight,
            self.changes.len(),
            self.trials
        );
        if let Some(b) = self.shuffle_bytes {
            line += &format!("; the shuffle pool's byte bound {b} bytes, from the memory budget");
        }
        if let Some(c) = self.changes.last() {
            line += &format!(
                "; last at {:.2} s: {} {} → {}, {:.0} → {:.0} records/s",
                c.t_s, c.setting, c.from, c.to, c.rate_before, c.rate_after
            );
        }
        line + ")"
    }
}
