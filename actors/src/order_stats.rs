//! The order delivered, measured ([`OrderStats`]): for each pass, the mean
//! distance between the original positions (file order, then record) of
//! consecutive records, divided by `(n + 1) / 3` — a uniform permutation's
//! expectation: about 1 for one, near 0 for a streaming order — and the
//! mean number of distinct files in a batch. `feedline bench
//! --order-stats` and Python's `stats()["order"]` report it.

use std::collections::{HashMap, HashSet};

use feedline::SourceId;

use crate::counting::{Counted, RecordCounts};

/// What [`OrderStats`] measured of one pass.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct OrderMeasures {
    /// The pass.
    pub pass: u64,
    /// Records seen in it.
    pub records: u64,
    /// Mean distance between consecutive records' original positions over
    /// `(n + 1) / 3` (`n`: the records of the inputs): about 1 for a uniform
    /// permutation, near 0 for a streaming order.
    pub neighbour_distance: f64,
    /// Mean number of distinct files in a batch.
    pub files_per_batch: f64,
}

/// Measures the order of the batches it is shown, pass by pass (a new pass
/// starts the measures again), in O(1) memory beyond one batch.
///
/// ```
/// use feedline_actors::OrderStats;
/// let stats = OrderStats::new(&[("a.jsonl".to_string(), 10)]);
/// assert!(stats.measures().is_none());
/// ```
#[derive(Clone, Debug)]
pub struct OrderStats {
    /// Each file's first original position, by the name its records carry.
    starts: HashMap<SourceId, u64>,
    total: u64,
    pass: Option<u64>,
    last: Option<u64>,
    distance: f64,
    pairs: u64,
    records: u64,
    batches: u64,
    files: u64,
}

impl OrderStats {
    /// Measures over `files` (each as its records name it, with its record
    /// count), in the inputs' order.
    pub fn new(files: &[(String, u64)]) -> Self {
        let mut starts = HashMap::new();
        let mut total = 0;
        for (name, n) in files {
            starts.insert(SourceId::intern(name), total);
            total += n;
        }
        OrderStats {
            starts,
            total,
            pass: None,
            last: None,
            distance: 0.0,
            pairs: 0,
            records: 0,
            batches: 0,
            files: 0,
        }
    }

    /// Over the files of a loader's record counts ([`Loader::record_counts`](crate::Loader::record_counts)):
    /// `None` until they are counted (a global order's are known at once).
    pub fn of_counts(counts: &RecordCounts) -> Option<Self> {
        let config = counts.config();
        if let Some(files) = crate::global_shuffle::real_files(config) {
            return Some(OrderStats::new(&files));
        }
        let Some(Counted::Records(counts)) = counts.peek() else {
            return None;
        };
        let names = (config.inputs.files.iter()).map(|f| {
            match (config.inputs.registry).resolve(f, config.inputs.format.as_deref()) {
                Ok((_, path, _)) => path.to_string_lossy().into_owned(),
                Err(_) => f.clone(),
            }
        });
        Some(OrderStats::new(&names.zip(counts).collect::<Vec<_>>()))
    }

    /// Take a batch of `pass` into the measures (its origins as the files
    /// and records they stand for, [`real_origins`](crate::real_origins)).
    pub fn observe(&mut self, pass: u64, batch: &feedline::Batch) {
        if self.pass != Some(pass) {
            *self = OrderStats {
                pass: Some(pass),
                ..OrderStats::new(&[])
            }
            .with_starts(std::mem::take(&mut self.starts), self.total);
        }
        let mut files = HashSet::new();
        for o in crate::real_origins(pass, batch.origins()) {
            files.insert(o.source);
            let Some(start) = self.starts.get(&o.source) else {
                continue;
            };
            let pos = start + o.record;
            if let Some(last) = self.last {
                self.distance += pos.abs_diff(last) as f64;
                self.pairs += 1;
            }
            self.last = Some(pos);
            self.records += 1;
        }
        self.batches += 1;
        self.files += files.len() as u64;
    }

    fn with_starts(mut self, starts: HashMap<SourceId, u64>, total: u64) -> Self {
        self.starts = starts;
        self.total = total;
        self
    }

    /// The measures of the pass seen last; `None` before any batch.
    pub fn measures(&self) -> Option<OrderMeasures> {
        let pass = self.pass?;
        let expected = (self.total as f64 + 1.0) / 3.0;
        Some(OrderMeasures {
            pass,
            records: self.records,
            neighbour_distance: if self.pairs == 0 {
                0.0
            } else {
                self.distance / self.pairs as f64 / expected
            },
            files_per_batch: self.files as f64 / self.batches.max(1) as f64,
        })
    }
}
