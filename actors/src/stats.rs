//! Pipeline statistics, read side: [`Stats`] turns the counters that the
//! stages' recorders ([`recorder`](crate::recorder)) write into snapshots,
//! a stall diagnosis, the list of skipped records — and the verdict of where
//! time went: which stage limits the devices. Nothing here writes a counter.

use feedline::pack::PackStats;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use feedline::feed_queue::DepthGauge;
use feedline::Location;
use parking_lot::Mutex;
use serde::Serialize;

use crate::watch::ReaderWatch;

/// Counters of one stage.
#[derive(Default, Debug)]
pub(crate) struct StageCounters {
    pub records: AtomicU64,
    pub bytes: AtomicU64,
    pub busy_ns: AtomicU64,
    /// Readers: waiting for acknowledgements or tasks. Shuffle: waiting for
    /// chunks. Batch maker: waiting for batches to make.
    pub idle_ns: AtomicU64,
    /// Shuffle: waiting for the batch maker to take a batch's rows. Batch
    /// maker: waiting for the feed queue to take a batch.
    pub blocked_ns: AtomicU64,
}

/// Counters of one device.
#[derive(Default, Debug)]
pub(crate) struct DeviceCounters {
    pub batches: AtomicU64,
    pub records: AtomicU64,
    pub busy_ns: AtomicU64,
    pub wait_ns: AtomicU64,
    /// When (ns since start) the device last began to work or to wait (0: not yet).
    pub mark_ns: AtomicU64,
}

/// The skipped records [`Stats::skipped`] lists at most (the first ones);
/// [`StatsSnapshot::bad_records`] counts all.
pub const MAX_SKIPPED_LISTED: usize = 1000;

/// A record skipped under the skip policy, with its place and why.
#[derive(Clone, Debug, Serialize)]
pub struct SkippedRecord {
    /// File or source.
    pub source: String,
    /// 0-based record index (for a file abandoned after a framing error: the
    /// first record not read; `rest_of_file` is then true).
    pub record: u64,
    /// Byte offset, where the format has one.
    pub offset: Option<u64>,
    /// True if the rest of the file from `record` on was unreadable.
    pub rest_of_file: bool,
    /// Records lost — what the skip budgets (`max_bad`,
    /// `max_bad_fraction`) count: 1; for records that could not be read
    /// apart (a Parquet row group with a damaged page) all of them; for an
    /// unreadable rest of a file the records it held from `record` on when
    /// the format knows (npy/npz and Parquet by their headers, an
    /// uncompressed TFRecord file by framing the rest: the file's count
    /// less what was read), else 1. Of those this rank reads, under
    /// sharding by record.
    pub records: u64,
    /// False when the rest of a file held an unknown number of records
    /// (`records` is then 1).
    pub records_known: bool,
    /// The error.
    pub error: String,
}

/// As the skip list shows it: `FILE: record N (offset O): ERROR`, or for
/// the rest of a file `FILE: rest of file from record N (M records lost):
/// ERROR`.
impl std::fmt::Display for SkippedRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural = |n: u64| if n == 1 { "" } else { "s" };
        write!(f, "{}: ", self.source)?;
        if self.rest_of_file {
            write!(f, "rest of file from record {}", self.record)?;
        } else if self.records > 1 {
            write!(
                f,
                "records {}..{}",
                self.record,
                self.record.saturating_add(self.records)
            )?;
        } else {
            write!(f, "record {}", self.record)?;
        }
        if let Some(o) = self.offset {
            write!(f, ", offset {o}")?;
        }
        if !self.records_known {
            write!(f, " (records lost: unknown, counted as 1)")?;
        } else if self.rest_of_file || self.records > 1 {
            write!(f, " ({} record{} lost)", self.records, plural(self.records))?;
        }
        write!(f, ": {}", self.error)
    }
}

impl SkippedRecord {
    pub(crate) fn new(
        loc: Option<&Location>,
        source: &str,
        record: u64,
        rest_of_file: bool,
        records: u64,
        error: String,
    ) -> Self {
        SkippedRecord {
            source: source.to_string(),
            record: loc.map_or(record, |l| l.record),
            offset: loc.and_then(|l| l.offset),
            rest_of_file,
            records,
            records_known: true,
            error,
        }
    }
}

/// The raw counters at one moment ([`Stats::raw`]): each stage's records,
/// busy, idle and blocked nanoseconds, the devices' busy and waiting
/// nanoseconds (all together), the feed queue's depth.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RawCounters {
    pub t_ns: u64,
    pub readers: [u64; 4],
    pub reader_count: u64,
    pub shuffle: [u64; 4],
    pub maker: [u64; 4],
    pub maker_workers: u64,
    pub batches: u64,
    pub devices: usize,
    pub device_busy_ns: u64,
    pub device_wait_ns: u64,
    pub queue_depth: u64,
    pub queue_capacity: u64,
}

/// Every counter of a pipeline: written by the recorders, read by [`Stats`].
pub(crate) struct Counters {
    pub start: Instant,
    pub readers: StageCounters,
    pub reader_count: u64,
    pub shuffle: StageCounters,
    /// The batch maker; its busy time is its workers' (or, without
    /// transform workers, its own thread's).
    pub maker: StageCounters,
    /// The batch maker's workers (1 without transform workers: its thread).
    pub maker_workers: AtomicU64,
    pub batches: AtomicU64,
    pub first_batch_ns: AtomicU64,
    /// The feed queue's depth (the queue samples it).
    pub queue: Arc<DepthGauge>,
    pub devices: Vec<DeviceCounters>,
    pub passes_done: AtomicU64,
    pub reader_restarts: AtomicU64,
    pub reader_stalls: AtomicU64,
    pub equalize_dropped: AtomicU64,
    pub equalize_padded: AtomicU64,
    pub oversize_batches: AtomicU64,
    /// The watch of each reader's current incarnation, by reader id.
    pub watches: Mutex<Vec<Arc<ReaderWatch>>>,
    /// When (ns since start) the shuffle stage last received a chunk.
    pub last_chunk_ns: AtomicU64,
    /// The first [`MAX_SKIPPED_LISTED`] skipped records.
    pub skipped: Mutex<Vec<SkippedRecord>>,
    pub bad_records: AtomicU64,
    /// Per pass: records skipped, and the last one's error.
    pub bad_by_pass: Mutex<std::collections::BTreeMap<u64, (u64, Arc<feedline::Error>)>>,
    /// The most collated batches the shuffle stage held waiting for room.
    pub waiting_peak: AtomicU64,
    /// The readers' remote requests (objects on S3, GCS, HTTP).
    pub remote: Arc<feedline::remote::RemoteCounters>,
    /// Packing: the row length and what the packer did (every pass).
    pub packing: Mutex<Option<PackingSnapshot>>,
    /// Packing: the most input batches, and document tokens, held to pack.
    pub pack_inputs_peak: AtomicU64,
    pub pack_tokens_peak: AtomicU64,
    /// The autotuner's state, when it runs.
    pub autotune: Mutex<Option<crate::tuned::AutotuneSnapshot>>,
}

impl Counters {
    pub(crate) fn new(devices: usize, readers: usize, queue: Arc<DepthGauge>) -> Self {
        Counters {
            start: Instant::now(),
            readers: StageCounters::default(),
            reader_count: readers as u64,
            shuffle: StageCounters::default(),
            maker: StageCounters::default(),
            maker_workers: AtomicU64::new(1),
            batches: AtomicU64::new(0),
            first_batch_ns: AtomicU64::new(0),
            queue,
            devices: (0..devices).map(|_| DeviceCounters::default()).collect(),
            passes_done: AtomicU64::new(0),
            reader_restarts: AtomicU64::new(0),
            reader_stalls: AtomicU64::new(0),
            equalize_dropped: AtomicU64::new(0),
            equalize_padded: AtomicU64::new(0),
            oversize_batches: AtomicU64::new(0),
            watches: Mutex::new(Vec::new()),
            last_chunk_ns: AtomicU64::new(0),
            skipped: Mutex::new(Vec::new()),
            bad_records: AtomicU64::new(0),
            bad_by_pass: Mutex::new(Default::default()),
            waiting_peak: AtomicU64::new(0),
            remote: feedline::remote::RemoteCounters::new(),
            packing: Mutex::new(None),
            pack_inputs_peak: AtomicU64::new(0),
            pack_tokens_peak: AtomicU64::new(0),
            autotune: Mutex::new(None),
        }
    }

    /// Nanoseconds since the pipeline started (at least 1: 0 means "never").
    pub(crate) fn now_ns(&self) -> u64 {
        ns(self.start.elapsed()).max(1)
    }
}

pub(crate) fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// Live statistics of a pipeline, read-only; cheap to clone (shared).
#[derive(Clone)]
pub struct Stats {
    counters: Arc<Counters>,
}

impl std::fmt::Debug for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.snapshot().fmt(f)
    }
}

impl Stats {
    pub(crate) fn of(counters: Arc<Counters>) -> Self {
        Stats { counters }
    }

    /// The statistics of no pipeline, every counter 0, for `devices`
    /// devices: for tests of what reads snapshots (a progress line, a
    /// report) with real snapshots.
    #[doc(hidden)]
    pub fn detached(devices: usize) -> Stats {
        Stats::of(Arc::new(Counters::new(
            devices,
            1,
            Arc::new(DepthGauge::default()),
        )))
    }

    /// The counters themselves (the metrics read them raw at scrape time).
    #[cfg(feature = "metrics")]
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The raw counters now, for figures over an interval (the autotuner's).
    pub(crate) fn raw(&self) -> RawCounters {
        let c = &*self.counters;
        let stage = |s: &StageCounters| {
            [&s.records, &s.busy_ns, &s.idle_ns, &s.blocked_ns].map(|a| a.load(Relaxed))
        };
        RawCounters {
            t_ns: c.now_ns(),
            readers: stage(&c.readers),
            reader_count: c.reader_count,
            shuffle: stage(&c.shuffle),
            maker: stage(&c.maker),
            maker_workers: c.maker_workers.load(Relaxed),
            batches: c.batches.load(Relaxed),
            devices: c.devices.len(),
            device_busy_ns: c.devices.iter().map(|d| d.busy_ns.load(Relaxed)).sum(),
            device_wait_ns: c.devices.iter().map(|d| d.wait_ns.load(Relaxed)).sum(),
            queue_depth: c.queue.now(),
            queue_capacity: c.queue.capacity(),
        }
    }

    /// Publish the autotuner's state (seen in every later snapshot).
    pub(crate) fn set_autotune(&self, snap: crate::tuned::AutotuneSnapshot) {
        *self.counters.autotune.lock() = Some(snap);
    }

    /// The batch maker's transform workers in force now (the autotuner
    /// changes them: busy shares are per worker in force).
    pub(crate) fn set_maker_workers(&self, workers: usize) {
        self.counters
            .maker_workers
            .store(workers.max(1) as u64, Relaxed);
    }

    /// Which stage is stuck, as far as the counters tell: the feed queue's
    /// depth, how long since the shuffle stage got a chunk, and what each
    /// reader is doing.
    pub fn diagnose(&self) -> String {
        let c = &*self.counters;
        let snap = self.snapshot();
        let now = c.now_ns();
        let mut parts = vec![format!(
            "feed queue holds {} batches (capacity {} per lane)",
            snap.feed_queue_depth, snap.feed_queue_capacity
        )];
        let last = c.last_chunk_ns.load(Relaxed);
        parts.push(if last == 0 {
            "the shuffle stage has received no chunk yet".to_string()
        } else {
            format!(
                "the shuffle stage last received a chunk {:.2} s ago",
                now.saturating_sub(last) as f64 / 1e9
            )
        });
        for (id, w) in c.watches.lock().iter().enumerate() {
            let since = w.busy_since();
            let st = w.lock();
            let what = match (&st.task, since) {
                (Some(t), 0) => format!(
                    "reader {id} has {} open at record {}",
                    t.task.file, t.start_record
                ),
                (Some(t), s) => format!(
                    "reader {id} has been reading {} at record {} for {:.2} s",
                    t.task.file,
                    t.start_record,
                    now.saturating_sub(s) as f64 / 1e9
                ),
                (None, 0) => format!("reader {id} is idle"),
                (None, s) => format!(
                    "reader {id} has been opening a file for {:.2} s",
                    now.saturating_sub(s) as f64 / 1e9
                ),
            };
            parts.push(if st.fenced {
                format!("{what} (abandoned as stuck)")
            } else {
                what
            });
        }
        parts.join("; ")
    }

    /// The records skipped so far under the skip policy, with their
    /// places: the first [`MAX_SKIPPED_LISTED`] (the snapshot's
    /// `bad_records` counts all).
    pub fn skipped(&self) -> Vec<SkippedRecord> {
        self.counters.skipped.lock().clone()
    }

    /// The numbers as they stand now.
    pub fn snapshot(&self) -> StatsSnapshot {
        let i = &*self.counters;
        let elapsed = i.start.elapsed().as_secs_f64().max(1e-9);
        let s = |c: &StageCounters, workers: f64| StageSnapshot {
            records: c.records.load(Relaxed),
            payload_bytes: c.bytes.load(Relaxed),
            records_per_s: c.records.load(Relaxed) as f64 / elapsed,
            busy: c.busy_ns.load(Relaxed) as f64 / 1e9 / (elapsed * workers),
            idle: c.idle_ns.load(Relaxed) as f64 / 1e9 / (elapsed * workers),
            blocked: c.blocked_ns.load(Relaxed) as f64 / 1e9 / (elapsed * workers),
        };
        let readers = i.reader_count.max(1) as f64;
        let remote = i.remote.snapshot();
        let devices: Vec<DeviceSnapshot> = i
            .devices
            .iter()
            .enumerate()
            .map(|(d, c)| {
                let busy = c.busy_ns.load(Relaxed) as f64 / 1e9;
                let wait = c.wait_ns.load(Relaxed) as f64 / 1e9;
                DeviceSnapshot {
                    device: d,
                    batches: c.batches.load(Relaxed),
                    records: c.records.load(Relaxed),
                    busy_s: busy,
                    waiting_s: wait,
                    waiting_fraction: if busy + wait > 0.0 {
                        wait / (busy + wait)
                    } else {
                        0.0
                    },
                }
            })
            .collect();
        let mut snap = StatsSnapshot {
            elapsed_s: elapsed,
            readers: s(&i.readers, readers),
            readers_count: i.reader_count,
            shuffle_batch: s(&i.shuffle, 1.0),
            batch_maker: s(&i.maker, i.maker_workers.load(Relaxed).max(1) as f64),
            batches: i.batches.load(Relaxed),
            feed_queue_mean_depth: i.queue.mean(),
            feed_queue_depth: i.queue.now(),
            feed_queue_capacity: i.queue.capacity(),
            made_waiting_peak: i.waiting_peak.load(Relaxed),
            batch_maker_workers: i.maker_workers.load(Relaxed),
            devices,
            passes_done: i.passes_done.load(Relaxed),
            first_batch_s: match i.first_batch_ns.load(Relaxed) {
                0 => None,
                t => Some(t as f64 / 1e9),
            },
            reader_restarts: i.reader_restarts.load(Relaxed),
            reader_stalls: i.reader_stalls.load(Relaxed),
            equalize_dropped: i.equalize_dropped.load(Relaxed),
            equalize_padded: i.equalize_padded.load(Relaxed),
            oversize_batches: i.oversize_batches.load(Relaxed),
            bad_records: i.bad_records.load(Relaxed),
            remote_requests: remote.requests,
            remote_retries: remote.retries,
            remote_give_ups: remote.give_ups,
            remote_bytes: remote.bytes,
            remote_cache_hits: remote.cache_hits,
            remote_cache_bytes: remote.cache_bytes,
            packing: i.packing.lock().map(|p| PackingSnapshot {
                inputs_held_peak: i.pack_inputs_peak.load(Relaxed),
                tokens_held_peak: i.pack_tokens_peak.load(Relaxed),
                ..p
            }),
            autotune: i.autotune.lock().clone(),
            bottleneck: Bottleneck::Devices,
        };
        snap.bottleneck = snap.judge();
        snap
    }
}

/// What the packer did: its counts ([`PackStats`]) and the row length,
/// with the fill they make.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct PackingSnapshot {
    /// Tokens per row.
    pub length: usize,
    /// The counts.
    #[serde(flatten)]
    pub counts: PackStats,
    /// Real tokens / (rows × length).
    pub fill: f64,
    /// The most made batches whose documents the packing step held at
    /// once, taken and not yet all packed (with the batches being made, at
    /// most [`in_flight_batches`](crate::PipelineConfig::in_flight_batches)):
    /// a long document is held whole, in its made batch, while its packed
    /// batches are made from it one at a time.
    pub inputs_held_peak: u64,
    /// The most tokens of those batches' documents held at once.
    pub tokens_held_peak: u64,
}

impl PackingSnapshot {
    /// The snapshot of `counts` for rows of `length`.
    pub fn new(length: usize, counts: PackStats) -> Self {
        PackingSnapshot {
            length,
            counts,
            fill: counts.fill(length),
            inputs_held_peak: 0,
            tokens_held_peak: 0,
        }
    }
}

/// One stage's numbers. Fractions are of wall time (per worker).
#[derive(Clone, Debug, Serialize)]
pub struct StageSnapshot {
    /// Records through the stage.
    pub records: u64,
    /// Payload bytes through the stage.
    pub payload_bytes: u64,
    /// Records per second since the start.
    pub records_per_s: f64,
    /// Fraction of time working.
    pub busy: f64,
    /// Fraction of time waiting for input (readers: for acknowledgements or files).
    pub idle: f64,
    /// Fraction of time waiting for the next stage to take output.
    pub blocked: f64,
}

/// One device's numbers.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceSnapshot {
    /// Device index.
    pub device: usize,
    /// Batches consumed.
    pub batches: u64,
    /// Records consumed.
    pub records: u64,
    /// Seconds in steps.
    pub busy_s: f64,
    /// Seconds waiting for data, after the device's first batch (the wait
    /// for the first is start-up: see [`StatsSnapshot::first_batch_s`]).
    pub waiting_s: f64,
    /// waiting / (busy + waiting).
    pub waiting_fraction: f64,
}

/// The stage that limits how fast devices are fed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bottleneck {
    /// The devices themselves: data is always ready.
    Devices,
    /// Reading and decoding files.
    Readers,
    /// Taking chunks into the shuffle pool and drawing batches.
    Shuffle,
    /// Making batches: the transform workers, collation.
    BatchMaker,
    /// Handing batches over (queue too small, or consumers pop too slowly
    /// while the loader is idle).
    FeedQueue,
}

impl std::fmt::Display for Bottleneck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Bottleneck::Devices => "devices",
            Bottleneck::Readers => "readers",
            Bottleneck::Shuffle => "shuffle",
            Bottleneck::BatchMaker => "batch maker",
            Bottleneck::FeedQueue => "feed queue",
        })
    }
}

/// A point-in-time copy of the statistics.
#[derive(Clone, Debug, Serialize)]
pub struct StatsSnapshot {
    /// Packing ([`feedline::pack`]): what the packer did, summed over the
    /// passes; `None` without packing.
    pub packing: Option<PackingSnapshot>,
    /// Seconds since the pipeline started.
    pub elapsed_s: f64,
    /// The reader pool (fractions per reader).
    pub readers: StageSnapshot,
    /// Number of readers.
    pub readers_count: u64,
    /// The shuffle stage: chunks into the pool, batches drawn (`blocked`:
    /// waiting for the batch maker to take them).
    pub shuffle_batch: StageSnapshot,
    /// The batch maker: transforms and collation (`busy` per transform
    /// worker; `blocked`: waiting for room in the feed queue).
    pub batch_maker: StageSnapshot,
    /// Batches made and sent to the feed queue (with packing: the packed
    /// batches, whose documents `batch_maker.records` counts).
    pub batches: u64,
    /// Mean number of items in the feed queue, sampled at every push and pop.
    pub feed_queue_mean_depth: f64,
    /// Batches in the feed queue now (all lanes).
    pub feed_queue_depth: u64,
    /// Feed queue capacity (per lane).
    pub feed_queue_capacity: u64,
    /// The most batches the batch maker held at once — made or being made,
    /// not yet in the feed queue: at most
    /// [`in_flight_batches`](crate::PipelineConfig::in_flight_batches).
    /// With packing, the packed batches made and not yet in the feed queue
    /// (at most as many; the made batches whose documents are being packed
    /// are [`PackingSnapshot::inputs_held_peak`]).
    pub made_waiting_peak: u64,
    /// The batch maker's transform workers (1 without an instance map:
    /// batches are collated on its own thread).
    pub batch_maker_workers: u64,
    /// Per device.
    pub devices: Vec<DeviceSnapshot>,
    /// Passes completed.
    pub passes_done: u64,
    /// Seconds from start to the first batch.
    pub first_batch_s: Option<f64>,
    /// Readers replaced after a failure (a panic, or a stall).
    pub reader_restarts: u64,
    /// Readers found stuck by the watchdog.
    pub reader_stalls: u64,
    /// Instances left out so that every rank gets the same batches.
    pub equalize_dropped: u64,
    /// Instances repeated so that every rank gets the same batches.
    pub equalize_padded: u64,
    /// Batches over the cost budget: one instance that alone costs more
    /// than `BatchPolicy::Budget`'s `max_cost` (the batcher logs the first
    /// of each pass; every one is counted here).
    pub oversize_batches: u64,
    /// Records skipped under the skip policy.
    pub bad_records: u64,
    /// Requests the readers sent to remote stores (HEAD, ranged GET, LIST;
    /// every attempt, retries included). 0 when every input is local.
    pub remote_requests: u64,
    /// Remote requests that failed transiently (time-out, broken
    /// connection, 408, 429, 5xx) and were sent again.
    pub remote_retries: u64,
    /// Remote requests given up after their retry budget: each ended a
    /// file (a failed file under the error policy).
    pub remote_give_ups: u64,
    /// Bytes received from remote stores.
    pub remote_bytes: u64,
    /// Remote objects read from the local cache directory instead of the
    /// store ([`LoaderBuilder::remote_cache`](crate::LoaderBuilder::remote_cache)).
    pub remote_cache_hits: u64,
    /// Bytes read from the local cache directory.
    pub remote_cache_bytes: u64,
    /// The autotuner's values and the changes it kept
    /// ([`LoaderBuilder::autotune`](crate::LoaderBuilder::autotune));
    /// `None` without autotuning.
    pub autotune: Option<crate::tuned::AutotuneSnapshot>,
    /// The limiting stage.
    pub bottleneck: Bottleneck,
}

/// What the verdict of the limiting stage is made from, over some span
/// (since the start: [`StatsSnapshot::bottleneck`]; one interval: the
/// autotuner's): the devices' busy and waiting seconds, each stage's busy
/// share (per reader, per worker), the batch maker's blocked share and the
/// feed queue's depth.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Verdict {
    pub devices: usize,
    pub device_busy_s: f64,
    pub device_wait_s: f64,
    pub readers_busy: f64,
    pub shuffle_busy: f64,
    pub maker_busy: f64,
    pub maker_blocked: f64,
    pub queue_depth: f64,
    pub queue_capacity: f64,
}

impl Verdict {
    /// The limiting stage: the one place that judges it.
    pub(crate) fn judge(&self) -> Bottleneck {
        let (busy, wait) = (self.device_busy_s, self.device_wait_s);
        if self.devices > 0 && busy + wait > 0.0 && wait / (busy + wait) < 0.05 {
            return Bottleneck::Devices;
        }
        let r = self.readers_busy;
        let s = self.shuffle_busy;
        let m = self.maker_busy;
        let full = self.queue_depth >= 0.5 * self.queue_capacity;
        if full && self.maker_blocked > 0.5 {
            // The loader is ahead and waits for the consumers to take batches.
            Bottleneck::Devices
        } else if r < 0.5 && s < 0.5 && m < 0.5 && self.maker_blocked > 0.5 {
            // Nobody busy, queue not full: the hand-off itself limits.
            Bottleneck::FeedQueue
        } else if r >= s && r >= m {
            Bottleneck::Readers
        } else if m >= s {
            Bottleneck::BatchMaker
        } else {
            Bottleneck::Shuffle
        }
    }
}

impl StatsSnapshot {
    fn judge(&self) -> Bottleneck {
        let (busy, wait) = self
            .devices
            .iter()
            .fold((0.0, 0.0), |(b, w), d| (b + d.busy_s, w + d.waiting_s));
        Verdict {
            devices: self.devices.len(),
            device_busy_s: busy,
            device_wait_s: wait,
            readers_busy: self.readers.busy,
            shuffle_busy: self.shuffle_batch.busy,
            maker_busy: self.batch_maker.busy,
            maker_blocked: self.batch_maker.blocked,
            queue_depth: self.feed_queue_mean_depth,
            queue_capacity: self.feed_queue_capacity as f64,
        }
        .judge()
    }

    /// One line: records/s, devices' waiting, and the limiting stage.
    pub fn summary_line(&self) -> String {
        let wait: f64 = self.devices.iter().map(|d| d.waiting_fraction).sum::<f64>()
            / self.devices.len().max(1) as f64;
        format!(
            "{} records ({:.0}/s), {} batches, readers busy {:.0}%, shuffle busy {:.0}%, batch making busy {:.0}% blocked {:.0}%, feed queue depth {:.1}/{}, devices waiting {:.1}%, bottleneck: {}",
            self.readers.records,
            self.readers.records_per_s,
            self.batches,
            self.readers.busy * 100.0,
            self.shuffle_batch.busy * 100.0,
            self.batch_maker.busy * 100.0,
            self.batch_maker.blocked * 100.0,
            self.feed_queue_mean_depth,
            self.feed_queue_capacity,
            wait * 100.0,
            self.bottleneck
        ) + &self.notes()
    }

    /// What the library otherwise says only through `log` (no logger, no
    /// message): records skipped, batches over the cost budget, readers
    /// restarted or found stuck, remote requests and their retries — `""`
    /// when none.
    fn notes(&self) -> String {
        let mut notes = Vec::new();
        for (n, what) in [
            (self.bad_records, "bad records skipped"),
            (self.oversize_batches, "batches over the cost budget"),
            (self.reader_restarts, "readers restarted"),
            (self.reader_stalls, "readers found stuck"),
        ] {
            if n > 0 {
                notes.push(format!("{n} {what}"));
            }
        }
        if self.remote_requests > 0 {
            notes.push(format!(
                "remote: {} requests, {} retried, {} given up, {:.1} MB",
                self.remote_requests,
                self.remote_retries,
                self.remote_give_ups,
                self.remote_bytes as f64 / 1e6
            ));
        }
        if self.remote_cache_hits > 0 {
            notes.push(format!(
                "remote cache: {} objects, {:.1} MB read locally",
                self.remote_cache_hits,
                self.remote_cache_bytes as f64 / 1e6
            ));
        }
        match notes.is_empty() {
            true => String::new(),
            false => format!("; {}", notes.join(", ")),
        }
    }
}
