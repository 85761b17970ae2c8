//! What the loader reports about itself: `loader.stats()` as a plain dict
//! (from the actors' [`StatsSnapshot`]) and the time `next()` held the GIL
//! (`len(loader)` is `counting`'s).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use feedline_actors::{StageSnapshot, StatsSnapshot};
use pyo3::prelude::*;
use pyo3::types::PyDict;

fn stage<'py>(py: Python<'py>, s: &StageSnapshot, workers: u64) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("records", s.records)?;
    d.set_item("bytes", s.payload_bytes)?;
    d.set_item("records_per_s", s.records_per_s)?;
    d.set_item("busy", s.busy)?;
    d.set_item("idle", s.idle)?;
    d.set_item("blocked", s.blocked)?;
    d.set_item("workers", workers)?;
    Ok(d)
}

/// The snapshot as a dict: totals at the top (`records`, `batches`,
/// `bytes`, `records_per_s`), per-stage busy/idle/blocked fractions under
/// `stages`, remote requests (`requests`, `retries`, `give_ups`, `bytes`,
/// `cache_hits`, `cache_bytes`) under `remote`, and the `bottleneck`.
/// The autotuner's values and changes, as `--json` has them.
fn autotune_dict<'py>(
    py: Python<'py>,
    a: &feedline_actors::AutotuneSnapshot,
) -> PyResult<Bound<'py, PyDict>> {
    let values = PyDict::new(py);
    for s in feedline_actors::TunedSetting::ALL {
        values.set_item(s.key(), a.values.get(s))?;
    }
    let changes = pyo3::types::PyList::empty(py);
    for c in &a.changes {
        let d = PyDict::new(py);
        d.set_item("t_s", c.t_s)?;
        d.set_item("setting", c.setting.key())?;
        d.set_item("from", c.from)?;
        d.set_item("to", c.to)?;
        d.set_item("rate_before", c.rate_before)?;
        d.set_item("rate_after", c.rate_after)?;
        changes.append(d)?;
    }
    let d = PyDict::new(py);
    d.set_item("values", values)?;
    d.set_item("changes", changes)?;
    Ok(d)
}

pub fn stats_dict<'py>(py: Python<'py>, s: &StatsSnapshot) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("elapsed_s", s.elapsed_s)?;
    d.set_item("records", s.readers.records)?;
    d.set_item("batches", s.batches)?;
    d.set_item("bytes", s.readers.payload_bytes)?;
    d.set_item("records_per_s", s.readers.records_per_s)?;
    let delivered_batches: u64 = s.devices.iter().map(|d| d.batches).sum();
    let delivered_records: u64 = s.devices.iter().map(|d| d.records).sum();
    d.set_item("delivered_batches", delivered_batches)?;
    d.set_item("delivered_records", delivered_records)?;
    let stages = PyDict::new(py);
    stages.set_item("readers", stage(py, &s.readers, s.readers_count)?)?;
    stages.set_item("shuffle_batch", stage(py, &s.shuffle_batch, 1)?)?;
    stages.set_item(
        "batch_maker",
        stage(py, &s.batch_maker, s.batch_maker_workers)?,
    )?;
    let (busy, wait) = s
        .devices
        .iter()
        .fold((0.0, 0.0), |(b, w), d| (b + d.busy_s, w + d.waiting_s));
    let consumer = PyDict::new(py);
    consumer.set_item("batches", delivered_batches)?;
    consumer.set_item("records", delivered_records)?;
    consumer.set_item("busy_s", busy)?;
    consumer.set_item("waiting_s", wait)?;
    let total = busy + wait;
    consumer.set_item("busy", if total > 0.0 { busy / total } else { 0.0 })?;
    consumer.set_item("idle", if total > 0.0 { wait / total } else { 0.0 })?;
    stages.set_item("consumer", consumer)?;
    d.set_item("stages", stages)?;
    if let Some(a) = &s.autotune {
        d.set_item("autotune", autotune_dict(py, a)?)?;
    }
    if let Some(p) = &s.packing {
        let c = &p.counts;
        let pk = PyDict::new(py);
        pk.set_item("length", p.length)?;
        pk.set_item("fill", p.fill)?;
        pk.set_item("documents", c.documents)?;
        pk.set_item("tokens", c.tokens)?;
        pk.set_item("rows", c.rows)?;
        pk.set_item("padding_tokens", c.padding_tokens)?;
        pk.set_item("documents_cut", c.documents_cut)?;
        pk.set_item("long_split", c.long_split)?;
        pk.set_item("long_truncated", c.long_truncated)?;
        pk.set_item("long_dropped", c.long_dropped)?;
        pk.set_item("tokens_left_out", c.tokens_left_out)?;
        pk.set_item("empty_documents", c.empty_documents)?;
        pk.set_item("equalize_padding_rows", c.equalize_padding_rows)?;
        pk.set_item("equalize_dropped_rows", c.equalize_dropped_rows)?;
        pk.set_item("equalize_dropped_tokens", c.equalize_dropped_tokens)?;
        pk.set_item("inputs_held_peak", p.inputs_held_peak)?;
        pk.set_item("tokens_held_peak", p.tokens_held_peak)?;
        d.set_item("packing", pk)?;
    }
    let queue = PyDict::new(py);
    queue.set_item("depth", s.feed_queue_depth)?;
    queue.set_item("mean_depth", s.feed_queue_mean_depth)?;
    queue.set_item("capacity", s.feed_queue_capacity)?;
    d.set_item("feed_queue", queue)?;
    d.set_item("passes_done", s.passes_done)?;
    d.set_item("first_batch_s", s.first_batch_s)?;
    d.set_item("bad_records", s.bad_records)?;
    d.set_item("reader_restarts", s.reader_restarts)?;
    d.set_item("reader_stalls", s.reader_stalls)?;
    let remote = PyDict::new(py);
    remote.set_item("requests", s.remote_requests)?;
    remote.set_item("retries", s.remote_retries)?;
    remote.set_item("give_ups", s.remote_give_ups)?;
    remote.set_item("bytes", s.remote_bytes)?;
    remote.set_item("cache_hits", s.remote_cache_hits)?;
    remote.set_item("cache_bytes", s.remote_cache_bytes)?;
    d.set_item("remote", remote)?;
    d.set_item("bottleneck", s.bottleneck.to_string())?;
    d.set_item("summary", s.summary_line())?;
    Ok(d)
}

/// The time `Loader.__next__` held the GIL: from its entry to its return,
/// less the waits done with the GIL released (`stats()["python"]`).
#[derive(Debug, Default)]
pub struct GilClock {
    calls: AtomicU64,
    nanos: AtomicU64,
}

impl GilClock {
    /// Count one `next()` that held the GIL for `held`.
    pub fn add(&self, held: Duration) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.nanos.fetch_add(
            held.as_nanos().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
    }

    /// `{"next_calls": n, "next_gil_s": s, "next_gil_us": mean µs per call}`.
    pub fn dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let calls = self.calls.load(Ordering::Relaxed);
        let secs = self.nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let d = PyDict::new(py);
        d.set_item("next_calls", calls)?;
        d.set_item("next_gil_s", secs)?;
        d.set_item(
            "next_gil_us",
            if calls > 0 {
                secs * 1e6 / calls as f64
            } else {
                0.0
            },
        )?;
        Ok(d)
    }
}
