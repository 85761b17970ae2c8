//! Statistics, write side: each stage records through a small recorder with
//! verbs — a reader says `chunk_sent`, the batch maker `batch_made`, a
//! device's [`DeviceClock`] `wait_begins` and `item_arrives` — and never
//! touches a counter itself. [`Recorders`] makes them for the wiring site,
//! and the read side ([`Stats`]) from the same counters.
//!
//! Device time is written in one place, the [`DeviceClock`], whoever the
//! consumer is: a trainer actor, a `Loader` iterator, or an actix consumer
//! popping with `Pop` (the feed queue actor runs its clock).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use feedline::feed_queue::DepthGauge;

use crate::stats::{ns, Counters, SkippedRecord, Stats, MAX_SKIPPED_LISTED};
use crate::watch::ReaderWatch;

/// Makes the recorders of one pipeline, and its [`Stats`].
#[derive(Clone)]
pub(crate) struct Recorders {
    c: Arc<Counters>,
}

impl Recorders {
    /// Counters for `devices` devices and `readers` readers; the feed
    /// queue's depth is read from `queue`.
    pub fn new(devices: usize, readers: usize, queue: Arc<DepthGauge>) -> Self {
        Recorders {
            c: Arc::new(Counters::new(devices, readers, queue)),
        }
    }

    /// The read side.
    pub fn stats(&self) -> Stats {
        Stats::of(self.c.clone())
    }

    /// For the readers (and the push source, which sends chunks like one).
    pub fn reader(&self) -> ReaderRecorder {
        ReaderRecorder { c: self.c.clone() }
    }

    /// For the shuffle stage.
    pub fn shuffle(&self) -> ShuffleRecorder {
        ShuffleRecorder { c: self.c.clone() }
    }

    /// For the packer: what it did, in the statistics.
    pub fn packing(&self) -> PackRecorder {
        PackRecorder { c: self.c.clone() }
    }

    /// For the batch maker, whose busy time is spread over `workers`.
    pub fn maker(&self, workers: usize) -> MakerRecorder {
        self.c.maker_workers.store(workers.max(1) as u64, Relaxed);
        MakerRecorder { c: self.c.clone() }
    }

    /// For every stage that finds bad records (through
    /// [`BadRecords`](crate::bad_records::BadRecords)).
    pub fn bad_records(&self) -> BadRecordRecorder {
        BadRecordRecorder { c: self.c.clone() }
    }

    /// For the supervisor.
    pub fn supervisor(&self) -> SupervisorRecorder {
        SupervisorRecorder { c: self.c.clone() }
    }

    /// The clock of device `device`.
    pub fn device(&self, device: usize) -> DeviceClock {
        DeviceClock {
            c: self.c.clone(),
            device,
        }
    }

    /// Show reader `id`'s current incarnation in the stall diagnosis (a
    /// new incarnation replaces the old).
    pub fn watch_reader(&self, id: usize, watch: Arc<ReaderWatch>) {
        let mut ws = self.c.watches.lock();
        if ws.len() <= id {
            ws.resize_with(id + 1, Default::default);
        }
        ws[id] = watch;
    }
}

/// Records were skipped in `pass` (`rec.records` of them: one, or the rest
/// of a file), by a reader or by the transforms; returns how many were, all
/// stages together. The list keeps the first [`MAX_SKIPPED_LISTED`].
fn skip(c: &Counters, rec: SkippedRecord, pass: u64, error: Arc<feedline::Error>) -> u64 {
    let n = rec.records;
    {
        let mut list = c.skipped.lock();
        if list.len() < MAX_SKIPPED_LISTED {
            list.push(rec);
        }
    }
    {
        let mut by_pass = c.bad_by_pass.lock();
        let e = by_pass.entry(pass).or_insert((0, error.clone()));
        e.0 += n;
        e.1 = error;
    }
    c.bad_records.fetch_add(n, Relaxed) + n
}

/// What readers record.
#[derive(Clone)]
pub(crate) struct ReaderRecorder {
    c: Arc<Counters>,
}

impl ReaderRecorder {
    /// A chunk of `records` records and `bytes` payload bytes was sent.
    pub fn chunk_sent(&self, records: u64, bytes: u64) {
        self.c.readers.records.fetch_add(records, Relaxed);
        self.c.readers.bytes.fetch_add(bytes, Relaxed);
    }

    /// Time spent opening and reading.
    pub fn busy(&self, d: Duration) {
        self.c.readers.busy_ns.fetch_add(ns(d), Relaxed);
    }

    /// Time spent waiting for acknowledgements or tasks.
    pub fn idle(&self, d: Duration) {
        self.c.readers.idle_ns.fetch_add(ns(d), Relaxed);
    }

    /// Nanoseconds since the pipeline started (the watchdog's clock).
    pub fn now_ns(&self) -> u64 {
        self.c.now_ns()
    }

    /// Run `f` (opening or reading a file) counting its remote requests in
    /// this pipeline's stats, reading remote objects through `cache` if
    /// given.
    pub fn remote<R>(
        &self,
        cache: Option<&feedline::remote::cache::RemoteCache>,
        f: impl FnOnce() -> R,
    ) -> R {
        feedline::remote::scoped(&self.c.remote, cache, f)
    }
}

/// What the shuffle stage records.
#[derive(Clone)]
pub(crate) struct ShuffleRecorder {
    c: Arc<Counters>,
}

impl ShuffleRecorder {
    /// A chunk arrived (taken now or held): the stall diagnosis says how long ago.
    pub fn chunk_received(&self) {
        self.c.last_chunk_ns.store(self.c.now_ns(), Relaxed);
    }

    /// A chunk of `records` records and `bytes` payload bytes went into the pool.
    pub fn chunk_taken(&self, records: u64, bytes: u64) {
        self.c.shuffle.records.fetch_add(records, Relaxed);
        self.c.shuffle.bytes.fetch_add(bytes, Relaxed);
    }

    /// Time spent shuffling, batching and collating.
    pub fn busy(&self, d: Duration) {
        self.c.shuffle.busy_ns.fetch_add(ns(d), Relaxed);
    }

    /// Time spent waiting for chunks.
    pub fn idle(&self, d: Duration) {
        self.c.shuffle.idle_ns.fetch_add(ns(d), Relaxed);
    }

    /// Time spent waiting for the batch maker to take a batch's rows.
    pub fn blocked(&self, d: Duration) {
        self.c.shuffle.blocked_ns.fetch_add(ns(d), Relaxed);
    }

    /// Batches made over the cost budget so far (the batcher's count).
    pub fn oversize_batches(&self, total: u64) {
        self.c.oversize_batches.fetch_max(total, Relaxed);
    }

    /// An instance was left out so that every rank gets the same batches.
    pub fn equalize_dropped(&self) {
        self.c.equalize_dropped.fetch_add(1, Relaxed);
    }

    /// An instance was repeated so that every rank gets the same batches.
    pub fn equalize_padded(&self) {
        self.c.equalize_padded.fetch_add(1, Relaxed);
    }
}

/// What the batch maker records.
#[derive(Clone)]
pub(crate) struct PackRecorder {
    c: Arc<Counters>,
}

impl PackRecorder {
    /// The packer's counts so far (all passes), rows of `length`.
    pub fn packed(&self, length: usize, counts: feedline::pack::PackStats) {
        *self.c.packing.lock() = Some(crate::stats::PackingSnapshot::new(length, counts));
    }

    /// The packing step holds `inputs` made batches to pack, `tokens`
    /// document tokens in them.
    pub fn held(&self, inputs: usize, tokens: u64) {
        self.c.pack_inputs_peak.fetch_max(inputs as u64, Relaxed);
        self.c.pack_tokens_peak.fetch_max(tokens, Relaxed);
    }
}

pub(crate) struct MakerRecorder {
    c: Arc<Counters>,
}

impl MakerRecorder {
    /// `n` batches are held: being made, or made and not yet in the feed queue.
    pub fn held(&self, n: usize) {
        self.c.waiting_peak.fetch_max(n as u64, Relaxed);
    }

    /// A batch of `rows` rows, `bytes` of payload, was made and goes to
    /// the feed queue.
    pub fn batch_made(&self, rows: usize, bytes: usize) {
        self.rows_made(rows, bytes);
        self.batch_out();
    }

    /// `rows` rows, `bytes` of payload, were made into a batch (with
    /// packing: documents, which the packer turns into the batches that go
    /// out). The bytes are what a made record holds — after the transforms,
    /// larger than the record read when it decodes — which the in-flight
    /// bound of the run counts ([`PipelineConfig::record_bytes_of_run`]).
    ///
    /// [`PipelineConfig::record_bytes_of_run`]: crate::PipelineConfig::record_bytes_of_run
    pub fn rows_made(&self, rows: usize, bytes: usize) {
        self.c.maker.records.fetch_add(rows as u64, Relaxed);
        self.c.maker.bytes.fetch_add(bytes as u64, Relaxed);
    }

    /// A batch goes to the feed queue (with packing: a packed batch).
    pub fn batch_out(&self) {
        if self.c.batches.fetch_add(1, Relaxed) == 0 {
            let _ = self
                .c
                .first_batch_ns
                .compare_exchange(0, self.c.now_ns(), Relaxed, Relaxed);
        }
    }

    /// Time spent making batches (summed over the transform workers).
    pub fn busy(&self, d: Duration) {
        self.c.maker.busy_ns.fetch_add(ns(d), Relaxed);
    }

    /// Time spent with nothing to make.
    pub fn idle(&self, d: Duration) {
        self.c.maker.idle_ns.fetch_add(ns(d), Relaxed);
    }

    /// Time spent waiting for room in the feed queue.
    pub fn blocked(&self, d: Duration) {
        self.c.maker.blocked_ns.fetch_add(ns(d), Relaxed);
    }
}

/// Where skipped bad records are counted and listed (readers and the batch
/// maker alike).
#[derive(Clone)]
pub(crate) struct BadRecordRecorder {
    c: Arc<Counters>,
}

impl BadRecordRecorder {
    /// Records were skipped in `pass` (`rec.records` of them: one, or the
    /// rest of a file); returns how many were, all stages together.
    pub fn skipped(&self, rec: SkippedRecord, pass: u64, error: Arc<feedline::Error>) -> u64 {
        skip(&self.c, rec, pass, error)
    }

    /// Records skipped as bad in `pass` so far, and the last one's error.
    pub fn bad_in_pass(&self, pass: u64) -> Option<(u64, Arc<feedline::Error>)> {
        self.c.bad_by_pass.lock().get(&pass).cloned()
    }
}

/// What the supervisor records.
#[derive(Clone)]
pub(crate) struct SupervisorRecorder {
    c: Arc<Counters>,
}

impl SupervisorRecorder {
    /// A reader was replaced after a failure.
    pub fn reader_restarted(&self) {
        self.c.reader_restarts.fetch_add(1, Relaxed);
    }

    /// The watchdog found a reader stuck.
    pub fn reader_stalled(&self) {
        self.c.reader_stalls.fetch_add(1, Relaxed);
    }

    /// A pass is done; returns how many are.
    pub fn pass_done(&self) -> u64 {
        self.c.passes_done.fetch_add(1, Relaxed) + 1
    }

    /// Nanoseconds since the pipeline started (the watchdog's clock).
    pub fn now_ns(&self) -> u64 {
        self.c.now_ns()
    }
}

/// A device's busy and waiting time: a consumer alternates between waiting
/// for an item (from [`wait_begins`](Self::wait_begins) to
/// [`item_arrives`](Self::item_arrives)) and working on it (from then to the
/// next `wait_begins`). The wait before a device's first batch is start-up
/// (reported as the first-batch latency), not a stall, and is not counted.
/// Cheap to clone; clones share the device's state.
#[derive(Clone)]
pub(crate) struct DeviceClock {
    c: Arc<Counters>,
    device: usize,
}

impl DeviceClock {
    /// The consumer asks for its next item: the time since its last item
    /// arrived was work.
    pub fn wait_begins(&self) {
        let Some(d) = self.c.devices.get(self.device) else {
            return;
        };
        let now = self.c.now_ns();
        let mark = d.mark_ns.swap(now, Relaxed);
        if mark != 0 {
            d.busy_ns.fetch_add(now.saturating_sub(mark), Relaxed);
        }
    }

    /// An item arrived (a batch of `records`, or `None` for a marker, the
    /// end or an error): the time since the consumer asked was waiting.
    pub fn item_arrives(&self, records: Option<usize>) {
        let Some(d) = self.c.devices.get(self.device) else {
            return;
        };
        let now = self.c.now_ns();
        let mark = d.mark_ns.swap(now, Relaxed);
        if mark != 0 && d.batches.load(Relaxed) > 0 {
            d.wait_ns.fetch_add(now.saturating_sub(mark), Relaxed);
        }
        if let Some(n) = records {
            d.batches.fetch_add(1, Relaxed);
            d.records.fetch_add(n as u64, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorders() -> Recorders {
        Recorders::new(2, 1, Arc::new(DepthGauge::default()))
    }

    #[test]
    fn the_diagnosis_says_when_the_shuffle_stage_last_received_a_chunk() {
        let r = recorders();
        let stats = r.stats();
        assert!(stats.diagnose().contains("has received no chunk yet"));
        r.shuffle().chunk_received();
        let d = stats.diagnose();
        assert!(d.contains("the shuffle stage last received a chunk"), "{d}");
    }

    #[test]
    fn a_device_clock_counts_batches_and_no_wait_before_the_first() {
        let r = recorders();
        let clock = r.device(1);
        clock.wait_begins();
        std::thread::sleep(Duration::from_millis(2));
        clock.item_arrives(Some(8));
        let s = r.stats().snapshot();
        assert_eq!((s.devices[1].batches, s.devices[1].records), (1, 8));
        assert_eq!(s.devices[1].waiting_s, 0.0, "start-up is not a stall");
        std::thread::sleep(Duration::from_millis(2));
        clock.wait_begins();
        clock.item_arrives(None);
        clock.wait_begins();
        std::thread::sleep(Duration::from_millis(2));
        clock.item_arrives(Some(8));
        let s = r.stats().snapshot();
        assert_eq!((s.devices[1].batches, s.devices[1].records), (2, 16));
        assert!(s.devices[1].busy_s >= 0.002, "{s:?}");
        assert!(s.devices[1].waiting_s >= 0.002, "{s:?}");
        assert_eq!(s.devices[0].batches, 0);
        // A device beyond the configured ones records nothing, and nothing breaks.
        r.device(7).item_arrives(Some(1));
    }

    #[test]
    fn batches_made_set_the_first_batch_time_once() {
        let r = recorders();
        assert!(r.stats().snapshot().first_batch_s.is_none());
        r.maker(1).batch_made(3, 24);
        let first = r.stats().snapshot().first_batch_s;
        r.maker(1).batch_made(3, 24);
        let s = r.stats().snapshot();
        assert_eq!((s.batches, s.first_batch_s), (2, first));
        assert!(first.is_some());
    }
}
