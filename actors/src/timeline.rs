//! A timeline of a running pipeline: a background thread samples the
//! [`Stats`] at a fixed interval and turns the cumulative counters into
//! per-interval figures — each device's busy and waiting fractions, the feed
//! queue's depth, each stage's busy fraction — so stalls can be seen (and
//! plotted) instead of read off totals.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

use crate::stats::{Stats, StatsSnapshot};

/// One interval of the timeline.
#[derive(Clone, Debug, Serialize)]
pub struct TimelineSample {
    /// Seconds since the pipeline started (end of the interval).
    pub t: f64,
    /// Per device: fraction of the interval spent in steps.
    pub device_busy: Vec<f64>,
    /// Per device: fraction of the interval spent waiting for data.
    pub device_waiting: Vec<f64>,
    /// Batches in the feed queue at the end of the interval.
    pub queue_depth: u64,
    /// Feed queue capacity (per lane).
    pub queue_capacity: u64,
    /// Readers' busy fraction (per reader) over the interval.
    pub readers_busy: f64,
    /// The shuffle stage's busy fraction over the interval.
    pub shuffle_busy: f64,
    /// The batch maker's busy fraction (per transform worker) over the interval.
    pub maker_busy: f64,
    /// Records read per second over the interval.
    pub records_per_s: f64,
}

/// Samples a pipeline's stats in the background; [`stop`](Self::stop) returns the timeline.
pub struct Timeline {
    halt: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<TimelineSample>>>,
}

impl Timeline {
    /// Start sampling `stats` every `interval`; `on_sample` sees each new
    /// sample and the snapshot it came from (e.g. to move progress bars).
    pub fn start(
        stats: Stats,
        interval: Duration,
        mut on_sample: impl FnMut(&TimelineSample, &StatsSnapshot) + Send + 'static,
    ) -> Timeline {
        let halt = Arc::new(AtomicBool::new(false));
        let h = halt.clone();
        let thread = std::thread::Builder::new()
            .name("feedline-timeline".into())
            .spawn(move || {
                let mut out = Vec::new();
                let mut prev = stats.snapshot();
                loop {
                    let stop = h.load(Ordering::Acquire);
                    if !stop {
                        std::thread::sleep(interval);
                    }
                    let now = stats.snapshot();
                    let s = interval_sample(&prev, &now);
                    on_sample(&s, &now);
                    out.push(s);
                    prev = now;
                    if stop {
                        return out;
                    }
                }
            })
            .expect("start the timeline thread");
        Timeline {
            halt,
            thread: Some(thread),
        }
    }

    /// Stop sampling (after one last sample) and return the timeline.
    pub fn stop(mut self) -> Vec<TimelineSample> {
        self.halt.store(true, Ordering::Release);
        self.thread
            .take()
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default()
    }
}

impl Drop for Timeline {
    fn drop(&mut self) {
        self.halt.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn interval_sample(a: &StatsSnapshot, b: &StatsSnapshot) -> TimelineSample {
    let dt = (b.elapsed_s - a.elapsed_s).max(1e-9);
    let frac = |x: f64| (x / dt).clamp(0.0, 1.0);
    TimelineSample {
        t: b.elapsed_s,
        device_busy: a
            .devices
            .iter()
            .zip(&b.devices)
            .map(|(x, y)| frac(y.busy_s - x.busy_s))
            .collect(),
        device_waiting: a
            .devices
            .iter()
            .zip(&b.devices)
            .map(|(x, y)| frac(y.waiting_s - x.waiting_s))
            .collect(),
        queue_depth: b.feed_queue_depth,
        queue_capacity: b.feed_queue_capacity,
        readers_busy: ((b.readers.busy * b.elapsed_s - a.readers.busy * a.elapsed_s) / dt)
            .clamp(0.0, 1.0),
        shuffle_busy: ((b.shuffle_batch.busy * b.elapsed_s - a.shuffle_batch.busy * a.elapsed_s)
            / dt)
            .clamp(0.0, 1.0),
        maker_busy: ((b.batch_maker.busy * b.elapsed_s - a.batch_maker.busy * a.elapsed_s) / dt)
            .clamp(0.0, 1.0),
        records_per_s: (b.readers.records.saturating_sub(a.readers.records)) as f64 / dt,
    }
}
