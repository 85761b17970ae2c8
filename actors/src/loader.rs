//! [`Loader`]: the blocking handle for plain Rust training loops. It runs
//! the actix `System` and the pipeline on threads of its own; iterating pops
//! batches straight from the feed queue's lanes; dropping it (or breaking
//! out of `for batch in loader`) stops and joins every thread. Its settings
//! are [`LoaderBuilder`]'s.
//!
//! It owns epochs and length too: [`Loader::next_epoch`] iterates one pass
//! (the next call the pass after), [`Loader::set_epoch`] makes the next
//! epoch a given pass (starting the pipeline again there when it must), and
//! [`Loader::len`] says the batches of a pass from the inputs' record
//! counts — the rules of `epochs.rs` and `counting.rs`, which every face's
//! epoch-by-epoch iteration uses.

mod builder;

use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use actix::prelude::*;
use feedline::feed_queue::Lanes;
use feedline::Schema;

use crate::arbiters::Arbiters;
use crate::checkpoint::{Checkpoint, InputFiles};
use crate::config::PipelineConfig;
use crate::counting::{len_from, packed_len, LenError, RecordCounts};
use crate::epochs::{Epochs, EventStream, PassEnd, Settled};
use crate::error::PipelineError;
use crate::messages::{BatchQueue, Delivered, Pop, Popped, Shutdown};
use crate::pipeline::Pipeline;
use crate::pipeline::StartOptions;
use crate::progress::{CheckpointBase, Progress};
use crate::push::FeedHandle;
use crate::recorder::{DeviceClock, Recorders};
use crate::resume_plan::ConsumerResume;
use crate::stats::{Stats, StatsSnapshot};
pub use builder::LoaderBuilder;

/// A running loader for plain (non-actor) code.
///
/// ```no_run
/// use feedline_actors::Loader;
/// let loader = Loader::builder()
///     .files(["data/train-*.tfrecord"])
///     .batch(256)
///     .shuffle(10_000)
///     .passes(2)
///     .seed(7)
///     .build()
///     .unwrap();
/// for batch in loader {
///     let batch = batch.unwrap();
///     let x = batch.batch.f32("x").unwrap();
///     assert_eq!(x.shape()[1], 64);
/// }
/// ```
pub struct Loader {
    /// Keeps the feed queue's actor alive (when it goes, its lanes fail).
    _feed: Recipient<Pop>,
    /// The feed queue, popped directly.
    queue: BatchQueue,
    /// Stops the pipeline.
    stop: Recipient<Shutdown>,
    recorders: Recorders,
    stats: Stats,
    schema: Schema,
    config: std::sync::Arc<PipelineConfig>,
    arbiters: Arbiters,
    system: Option<System>,
    thread: Option<JoinHandle<()>>,
    merged: MergedState,
    /// What this loader's iteration and its device iterators took (for
    /// [`checkpoint`](Self::checkpoint)).
    progress: Arc<Mutex<Progress>>,
    /// The settings as given, to stamp the inputs and settings with at the
    /// first [`checkpoint`](Self::checkpoint) (a stat — for a remote object
    /// a HEAD request — per input: not paid by runs that never checkpoint).
    given: Box<PipelineConfig>,
    /// The inputs and settings, stamped at the first checkpoint.
    base: Option<Result<CheckpointBase, PipelineError>>,
    /// The local files read, which a checkpoint is never saved over: found
    /// at the first [`save_checkpoint`](Self::save_checkpoint).
    inputs: Option<Arc<InputFiles>>,
    /// Equalized ranks in packed rows: every rank's rows per pass.
    packed_ranks: Option<Arc<crate::equalize::PackedRanks>>,
    /// Where [`next_epoch`](Self::next_epoch)'s epochs stand.
    epochs: Epochs,
    /// The inputs' record counts, for [`len`](Self::len) (made at the first
    /// call; kept through a [`set_epoch`](Self::set_epoch) restart).
    counts: Arc<RecordCounts>,
    /// The Prometheus metrics' server (`metrics_addr`): stopped when the
    /// loader stops; handed to the pipeline a [`set_epoch`](Self::set_epoch)
    /// starts again.
    metrics: Option<crate::metrics::MetricsServer>,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("schema", &self.schema)
            .finish()
    }
}

impl Loader {
    /// Start building.
    pub fn builder() -> LoaderBuilder {
        LoaderBuilder::default()
    }

    fn start(config: PipelineConfig, options: StartOptions) -> Result<Loader, PipelineError> {
        Self::start_full(config, options).map(|(loader, _)| loader)
    }

    fn start_full(
        config: PipelineConfig,
        options: StartOptions,
    ) -> Result<(Loader, Option<FeedHandle>), PipelineError> {
        // Stamped from the settings as given (the pipeline expands them).
        let given = Box::new(config.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("feedline-system".into())
            .spawn(move || {
                let sys = System::new();
                let started =
                    sys.block_on(async move { Pipeline::start_for_loader(config, options) });
                let arbiters = match started {
                    Ok(mut running) => {
                        let arbiters = running.arbiters.clone();
                        // Nobody waits for the end here: the loader's iterators see it.
                        running.done = None;
                        let _ = tx.send(Ok((running, System::current())));
                        Some(arbiters)
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        None
                    }
                };
                if let Some(arbiters) = arbiters {
                    let _ = sys.run();
                    arbiters.stop_and_join();
                }
            })
            .map_err(|e| PipelineError::config(format!("cannot start a thread: {e}")))?;
        let (mut running, system) = match rx.recv().map_err(|_| PipelineError::Stopped) {
            Ok(Ok(x)) => x,
            Ok(Err(e)) | Err(e) => {
                let _ = thread.join();
                return Err(e);
            }
        };
        let push = running.push.take();
        let config = &running.config;
        // Device iterators: one consumer per device, each sees every end of pass.
        let progress = Arc::new(Mutex::new(
            match &running.resume {
                Some(r) => r.progress(config.feeding.devices),
                None => Progress::new(config.feeding.devices),
            }
            .with_snapshots(running.snapshots.clone()),
        ));
        let first_pass = match &running.resume {
            Some(r) => r.first_pass(),
            None => config.resume.first_pass,
        };
        let loader = Loader {
            metrics: running.metrics.take(),
            epochs: Epochs::new(first_pass, running.resume.is_some(), true),
            counts: RecordCounts::new(running.config.clone()),
            packed_ranks: running.packed_ranks,
            merged: MergedState::new(&running.queue, &running.recorders, running.resume.clone()),
            progress,
            given,
            base: None,
            inputs: None,
            stats: running.recorders.stats(),
            _feed: running.feed,
            queue: running.queue,
            stop: running.stop,
            recorders: running.recorders,
            schema: running.schema,
            config: running.config,
            arbiters: running.arbiters,
            system: Some(system),
            thread: Some(thread),
        };
        Ok((loader, push))
    }

    /// The schema of the batches.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The settings in force (inputs expanded).
    pub fn config(&self) -> &PipelineConfig {
        &self.config
    }

    /// The packed batches this rank delivers in the whole of `pass`, where
    /// they are known before the pass runs: packing with ranks equalized
    /// (`equalize` drop or pad over more than one rank), whose rows per pass
    /// every rank counts from every document's tokens at start-up. `None`
    /// otherwise — packing alone makes as many batches as the documents'
    /// tokens and the packing policy turn out to fill, known only as the
    /// pass runs (and without packing, the batches follow from the
    /// records: `feedline::plan`).
    pub fn packed_batches_in_pass(&self, pass: u64) -> Option<u64> {
        let rows = match self.config.batching.batch {
            feedline::batch_policy::BatchPolicy::Fixed(n) => n,
            _ => return None,
        };
        (self.packed_ranks.as_ref()).map(|r| r.batches_in_pass(pass, rows))
    }

    /// The deliveries of the next pass only, in order: calling it again
    /// gives the pass after (every pass left, one call each — what
    /// re-iterating a Python `Loader` gives). An epoch left early (the
    /// iterator dropped before its end) is gone on with by the next call,
    /// nothing skipped; an epoch whose last batch was taken is over even if
    /// its end was not pulled. After the last pass it yields nothing.
    /// [`iter`](Self::iter) is every pass left, in one loop; what it takes
    /// is not counted in these epochs.
    ///
    /// ```no_run
    /// use feedline_actors::Loader;
    /// let mut loader = Loader::builder().files(["data/*.jsonl"]).seed(7).build()?;
    /// for epoch in 0..3 {
    ///     let batches = loader.len(); // Some(n) where the records can be counted
    ///     for delivered in loader.next_epoch() {
    ///         let delivered = delivered?;
    ///         assert_eq!(delivered.pass, epoch);
    ///     }
    ///     let _ = batches;
    /// }
    /// # Ok::<(), feedline_actors::PipelineError>(())
    /// ```
    pub fn next_epoch(&mut self) -> Epoch<'_> {
        Epoch {
            loader: self,
            begun: false,
            done: false,
        }
    }

    /// Make the next [`next_epoch`](Self::next_epoch) pass `pass`: the same
    /// batches (in deterministic mode; else the same order of files and
    /// draws) as pass `pass` of a fresh loader with the same settings. Free
    /// when `pass` is the one the next epoch runs anyway and nothing of it
    /// was taken; otherwise the pipeline stops and starts again at `pass`
    /// (an epoch in progress is given up, and a resume is left behind).
    /// Refused for a push-mode loader and, with `passes(N)`, a `pass` of
    /// `N` or more. Should the new start fail, the error says why and the
    /// loader is stopped.
    pub fn set_epoch(&mut self, pass: u64) -> Result<(), PipelineError> {
        if self.given.inputs.push.is_some() {
            return Err(PipelineError::config(
                "a push-mode loader cannot start again at another pass: its data is what is pushed",
            ));
        }
        Epochs::check_set_epoch(pass, self.config.order.passes).map_err(PipelineError::Config)?;
        let exhausted = matches!(self.settle(None)?, Settled::Exhausted);
        if !exhausted && self.epochs.set_is_free(pass) {
            return Ok(());
        }
        let mut config = (*self.given).clone();
        config.resume.first_pass = pass;
        // The old pipeline stops first (its memory and threads go); the
        // metrics' server serves the new one, its counters going on.
        let metrics = self.metrics.take();
        self.shutdown();
        let options = StartOptions {
            metrics,
            ..StartOptions::default()
        };
        let mut fresh = Loader::start(config, options)?;
        fresh.epochs = std::mem::take(&mut self.epochs);
        fresh.epochs.restarted(pass, false);
        fresh.counts = self.counts.clone();
        *self = fresh;
        Ok(())
    }

    /// Settle the epochs (see [`Epochs::settle`]), waiting at most `wait`.
    fn settle(&mut self, wait: Option<Duration>) -> Result<Settled, PipelineError> {
        let mut epochs = std::mem::take(&mut self.epochs);
        let r = loop {
            match epochs.settle(self, wait) {
                Ok(Settled::Wait) if wait.is_none() => continue,
                r => break r,
            }
        };
        self.epochs = epochs;
        r
    }

    /// Batches this rank gets in the pass [`next_epoch`](Self::next_epoch)
    /// is in or runs next, where the inputs' record counts are known (see
    /// [`len_of_pass`](Self::len_of_pass)); waits for the counting, made
    /// once, at the first call.
    #[allow(clippy::len_without_is_empty)] // a pass's length, not a collection's
    pub fn len(&self) -> Option<u64> {
        self.len_of_pass(self.epochs.pass_for_len(self.config.order.passes))
            .ok()
    }

    /// Batches this rank gets in `pass`: from every input's record count
    /// (headers, or the records framed without decoding them; once per
    /// file per process) and the pass's plan — the numbers Python's `len()`
    /// gives; with packing, the packed batches counted at start-up
    /// ([`packed_batches_in_pass`](Self::packed_batches_in_pass)). The
    /// error says why it is not known: a push-mode loader, batches by a
    /// cost budget, weighted file sets, a stream input, a file that cannot
    /// be read through, packing whose rows are not counted.
    pub fn len_of_pass(&self, pass: u64) -> Result<u64, LenError> {
        if let Some(pack) = &self.config.batching.pack {
            return packed_len(&self.config, pack, || {
                Some(self.packed_batches_in_pass(pass))
            })
            .map_err(LenError::Packed);
        }
        self.counts.start();
        let counted = loop {
            if let Some(c) = self.counts.wait(Duration::from_secs(3600)) {
                break c;
            }
        };
        len_from(self.counts.config(), counted, pass)
    }

    /// Measures of the order delivered ([`OrderStats`](crate::OrderStats)),
    /// to be shown this loader's batches: over its files and their record
    /// counts (a global order's from its record indexes; otherwise the
    /// counts behind [`len`](Self::len), waited for).
    pub fn order_stats(&self) -> Result<crate::OrderStats, LenError> {
        self.counts.start();
        loop {
            if let Some(stats) = crate::OrderStats::of_counts(&self.counts) {
                return Ok(stats);
            }
            match self.counts.wait(Duration::from_secs(3600)) {
                Some(crate::counting::Counted::Unknown(u)) => return Err(LenError::Unknown(u)),
                Some(crate::counting::Counted::Failed(f)) => return Err(LenError::Failed(f)),
                _ => {}
            }
        }
    }

    /// The inputs' record counts behind [`len`](Self::len), to wait for
    /// from another thread (a face that hears Ctrl-C between slices).
    pub fn record_counts(&self) -> Arc<RecordCounts> {
        self.counts.clone()
    }

    /// The statistics as they stand.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// The live statistics handle.
    pub fn stats_handle(&self) -> Stats {
        self.stats.clone()
    }

    /// Iterate over all batches, all passes, in order.
    pub fn iter(&mut self) -> Iter<'_> {
        Iter { loader: self }
    }

    /// An iterator for device `device` (`0..devices`), to move to a thread
    /// of its own. In round-robin mode it gets batches `k` with
    /// `k mod devices == device`; in shared mode whatever is next.
    pub fn device_iter(&self, device: usize) -> DeviceIter {
        DeviceIter {
            popper: Popper::new(&self.queue, &self.recorders, device),
            stats: self.stats.clone(),
            ended: false,
            progress: self.progress.clone(),
        }
    }

    /// The next batch, waiting at most `timeout`. On a timeout the error
    /// says which stage is stuck (see [`Stats::diagnose`]); iteration can go on.
    pub fn next_timeout(&mut self, timeout: Duration) -> Option<Result<Delivered, PipelineError>> {
        self.merged.timeout = Some(timeout);
        let r = self.next_merged();
        self.merged.timeout = None;
        r
    }

    /// The next item of the whole stream, in order, with the ends of
    /// passes: [`Popped::Batch`], then [`Popped::EndOfPass`]`(p)` once every
    /// batch of pass `p` was taken (before the first batch of `p + 1`),
    /// and [`Popped::EndOfData`] after the last pass (again on every later
    /// call). Waits at most `timeout` (`None`: for ever); a time-out is
    /// [`PipelineError::Timeout`] and iteration can go on. What
    /// [`next_timeout`](Self::next_timeout) yields, plus where each pass ends
    /// — what an epoch-by-epoch iteration needs.
    pub fn next_event_timeout(
        &mut self,
        timeout: Option<Duration>,
    ) -> Result<Popped, PipelineError> {
        self.merged.timeout = timeout;
        let r = self.next_merged_event();
        self.merged.timeout = None;
        r
    }

    /// As [`next_event_timeout`](Self::next_event_timeout), but what it
    /// gives is not yet taken for [`checkpoint`](Self::checkpoint)s: the
    /// caller hands it on (to a thread that copies batches to pinned
    /// memory, say) and calls [`record`](Self::record) with each item,
    /// in order, once its consumer has it — so a checkpoint covers exactly
    /// the batches consumed, not the ones fetched ahead.
    pub fn next_event_untracked(
        &mut self,
        timeout: Option<Duration>,
    ) -> Result<Popped, PipelineError> {
        self.merged.untracked = true;
        let r = self.next_event_timeout(timeout);
        self.merged.untracked = false;
        r
    }

    /// The next item of the stream, as
    /// [`next_event_timeout`](Self::next_event_timeout) would give it, left
    /// in place: the next call of any of this loader's own iterations
    /// ([`next_event_timeout`](Self::next_event_timeout),
    /// [`next_event_untracked`](Self::next_event_untracked),
    /// [`iter`](Self::iter), [`next_timeout`](Self::next_timeout)) gives
    /// this same item, and only then is it taken for checkpoints (a
    /// tracked call records it; an untracked one leaves that to
    /// [`record`](Self::record)). An epoch-by-epoch iteration asks it
    /// whether what comes next is the end of the pass — whether the last
    /// batch handed out was the pass's last. Waits at most `timeout`
    /// (`None`: for ever); a time-out is [`PipelineError::Timeout`] and
    /// nothing is left in place.
    pub fn peek_event_timeout(
        &mut self,
        timeout: Option<Duration>,
    ) -> Result<&Popped, PipelineError> {
        if self.merged.peeked.is_none() {
            let popped = self.next_event_untracked(timeout)?;
            self.merged.peeked = Some(popped);
        }
        Ok(self.merged.peeked.as_ref().expect("filled above"))
    }

    /// Take `item` (a batch or an end of pass that
    /// [`next_event_untracked`](Self::next_event_untracked) gave) for
    /// checkpoints: its consumer has it.
    pub fn record(&self, item: &Popped) {
        match item {
            Popped::Batch(d) => self.progress.lock().take(d),
            Popped::EndOfPass(p) => self.progress.lock().pass_complete(*p),
            Popped::EndOfData => {}
        }
    }

    /// The checkpoint of the batches taken so far through this loader's own
    /// iteration ([`iter`](Self::iter), `for batch in loader`,
    /// [`next_timeout`](Self::next_timeout)) or by its
    /// [`device_iter`](Self::device_iter)s — take it between two batches
    /// (with device iterators: while none is inside `next`);
    /// [`LoaderBuilder::resume`] goes on from exactly there. The first
    /// checkpoint stamps the inputs (size and modification time of each,
    /// a HEAD request for a remote object) and the order-fixing settings.
    ///
    /// ```no_run
    /// use feedline_actors::Loader;
    /// let mut loader = Loader::builder().files(["data/*.jsonl"]).seed(7).build()?;
    /// let first: Vec<_> = loader.iter().take(10).collect();
    /// let cp = loader.checkpoint()?;
    /// loader.save_checkpoint(std::path::Path::new("cp.json"))?; // the same, in a file
    /// drop(loader);
    /// let rest = Loader::builder().files(["data/*.jsonl"]).seed(7).resume(cp).build()?;
    /// # Ok::<(), feedline_actors::PipelineError>(())
    /// ```
    pub fn checkpoint(&mut self) -> Result<Checkpoint, PipelineError> {
        let given = &self.given;
        let base = self.base.get_or_insert_with(|| {
            if given.inputs.push.is_some() {
                Err(PipelineError::config(
                    "a push-mode loader has no checkpoint: its data is what is pushed",
                ))
            } else {
                CheckpointBase::of(given)
            }
        });
        let base = base.as_ref().map_err(Clone::clone)?;
        Ok(self.progress.lock().checkpoint(base))
    }

    /// Save [`checkpoint`](Self::checkpoint) to `path` atomically (the file
    /// `feedline run --checkpoint` writes; [`Checkpoint::load`] reads it).
    /// Refused, with nothing written: a path that exists and is not a
    /// regular file (a device such as `/dev/null`, a FIFO, a socket, a
    /// directory, through a symbolic link too), one of this loader's input
    /// files ([`input_files`](Self::input_files)) and a path in a missing
    /// directory — [`feedline::checkpoint::check_save_path`]. A previous
    /// checkpoint at `path` is replaced.
    pub fn save_checkpoint(&mut self, path: &std::path::Path) -> Result<(), PipelineError> {
        let cp = self.checkpoint()?;
        let inputs = self.input_files()?;
        (cp.save_atomic_sparing(path, &inputs)).map_err(|e| PipelineError::Checkpoint(Arc::new(e)))
    }

    /// The local files this loader reads — its data files and list files
    /// ([`crate::input_files`]), found at the first call — which a
    /// checkpoint is never saved over.
    pub fn input_files(&mut self) -> Result<Arc<InputFiles>, PipelineError> {
        if let Some(files) = &self.inputs {
            return Ok(files.clone());
        }
        let files = Arc::new(crate::progress::input_files(&self.given)?);
        self.inputs = Some(files.clone());
        Ok(files)
    }

    /// Stop everything and wait for every thread. Also what `drop` does.
    pub fn shutdown(&mut self) {
        // Iterators on other threads get `Stopped` now, whatever the actors do.
        self.queue.fail(PipelineError::Stopped);
        if let Some(system) = self.system.take() {
            self.stop.do_send(Shutdown);
            system.stop();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.arbiters.stop_and_join();
        // Its port is freed with the last handle.
        self.metrics = None;
    }

    /// The Prometheus metrics' server, when one serves this loader
    /// ([`LoaderBuilder::metrics_addr`]): its [`local_addr`](crate::MetricsServer::local_addr)
    /// is the port chosen for an address of port 0.
    pub fn metrics_server(&self) -> Option<&crate::metrics::MetricsServer> {
        self.metrics.as_ref()
    }

    fn pop(&mut self, consumer: usize) -> Result<Popped, PipelineError> {
        let popper = &mut self.merged.poppers[consumer];
        popper.pop(&self.stats, self.merged.timeout)
    }

    /// The next batch of the whole stream, in order (the ends of passes
    /// passed over).
    fn next_merged(&mut self) -> Option<Result<Delivered, PipelineError>> {
        loop {
            match self.next_merged_event() {
                Ok(Popped::Batch(d)) => return Some(Ok(d)),
                Ok(Popped::EndOfPass(_)) => continue,
                Ok(Popped::EndOfData) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// The next item of the whole stream, in order: in round-robin mode
    /// batch `k` is taken from the lane `k` goes to (whose own consumer this
    /// iterator stands in for), then — once every lane's marker of the pass
    /// was taken — the pass's end, then the next pass's first batch from
    /// lane 0. After the end of the data, or an error other than a
    /// time-out, `EndOfData`.
    fn next_merged_event(&mut self) -> Result<Popped, PipelineError> {
        if let Some(popped) = self.merged.peeked.take() {
            // Fetched ahead, untracked, by `peek_event_timeout`: taken now.
            if !self.merged.untracked {
                self.record(&popped);
            }
            return Ok(popped);
        }
        loop {
            if self.merged.ended {
                return Ok(Popped::EndOfData);
            }
            if let Some(mut sweep) = self.merged.sweep.take() {
                // A lane's pass ended: every other lane holds this pass's
                // marker next; take them. A time-out keeps the sweep where
                // it is, for the next call (iteration can go on).
                while sweep.next < self.merged.lanes.count() {
                    let other = sweep.next;
                    if other == sweep.ended_lane {
                        sweep.next += 1;
                        continue;
                    }
                    match self.pop(other) {
                        Ok(Popped::EndOfPass(_)) | Ok(Popped::EndOfData) => sweep.next += 1,
                        Ok(Popped::Batch(d)) => {
                            log::error!("lane {other} had a batch after its pass ended");
                            self.merged.sweep = Some(sweep);
                            if !self.merged.untracked {
                                self.progress.lock().take(&d);
                            }
                            return Ok(Popped::Batch(d));
                        }
                        Err(e @ PipelineError::Timeout { .. }) => {
                            self.merged.sweep = Some(sweep);
                            return Err(e);
                        }
                        Err(e) => {
                            self.merged.ended = true;
                            return Err(e);
                        }
                    }
                }
                self.merged.next_seq = self.merged.next_seq(sweep.pass + 1, 0);
                if !self.merged.untracked {
                    self.progress.lock().pass_complete(sweep.pass);
                }
                return Ok(Popped::EndOfPass(sweep.pass));
            }
            let lane = self.merged.lanes.of_batch(self.merged.next_seq);
            match self.pop(lane) {
                Ok(Popped::Batch(d)) => {
                    self.merged.next_seq = self.merged.next_seq(d.pass, d.seq + 1);
                    if !self.merged.untracked {
                        self.progress.lock().take(&d);
                    }
                    return Ok(Popped::Batch(d));
                }
                Ok(Popped::EndOfPass(pass)) => {
                    self.merged.sweep = Some(Sweep {
                        pass,
                        ended_lane: lane,
                        next: 0,
                    });
                }
                Ok(Popped::EndOfData) => {
                    self.merged.ended = true;
                    return Ok(Popped::EndOfData);
                }
                Err(e @ PipelineError::Timeout { .. }) => return Err(e),
                Err(e) => {
                    self.merged.ended = true;
                    return Err(e);
                }
            }
        }
    }
}

impl EventStream for Loader {
    fn peek_event(&mut self, wait: Option<Duration>) -> Result<&Popped, PipelineError> {
        self.peek_event_timeout(wait)
    }

    fn take_peeked(&mut self) {
        let _ = self.next_event_timeout(Some(Duration::ZERO));
    }
}

/// The end-of-pass sweep of the merged iterator in progress: the pass, the
/// lane whose marker came first, and the next lane to take the marker from.
#[derive(Clone, Copy, Debug)]
struct Sweep {
    pass: u64,
    ended_lane: usize,
    next: usize,
}

/// Pops for one consumer from a plain thread, straight from the feed
/// queue's lanes: the batch is taken in the same critical section that
/// returns it, so a time-out or a dropped iterator loses nothing (there is
/// no request in flight), and the queue itself is the prefetch buffer.
struct Popper {
    queue: BatchQueue,
    consumer: usize,
    clock: DeviceClock,
}

impl Popper {
    fn new(queue: &BatchQueue, recorders: &Recorders, consumer: usize) -> Self {
        Popper {
            queue: queue.clone(),
            consumer,
            clock: recorders.device(consumer),
        }
    }

    /// The next item, waiting at most `timeout`.
    fn pop(&mut self, stats: &Stats, timeout: Option<Duration>) -> Result<Popped, PipelineError> {
        self.clock.wait_begins();
        let deadline = timeout.map(|t| Instant::now() + t);
        let popped = match self.queue.pop(self.consumer, deadline) {
            Some(r) => r,
            None => Err(PipelineError::Timeout {
                waited: timeout.unwrap_or_default(),
                why: stats.diagnose(),
            }),
        };
        self.clock.item_arrives(match &popped {
            Ok(Popped::Batch(d)) => Some(d.batch.len()),
            _ => None,
        });
        popped
    }
}

/// The merged iterator's state: one popper per lane (in round-robin mode
/// lane `k`'s own consumer `k`; in shared mode consumer 0 alone).
struct MergedState {
    poppers: Vec<Popper>,
    lanes: Lanes,
    /// The number of the next batch expected in the pass.
    next_seq: u64,
    /// The end-of-pass sweep, while it is not finished.
    sweep: Option<Sweep>,
    ended: bool,
    timeout: Option<Duration>,
    /// The item being fetched is not taken for checkpoints (the caller
    /// records it when consumed).
    untracked: bool,
    /// A resumed pipeline leaves out the batches consumed before.
    resume: Option<ConsumerResume>,
    /// What `peek_event_timeout` fetched (untracked), given by the next call.
    peeked: Option<Popped>,
}

impl MergedState {
    fn new(queue: &BatchQueue, recorders: &Recorders, resume: Option<ConsumerResume>) -> Self {
        let lanes = queue.lanes();
        let mut merged = MergedState {
            poppers: (0..lanes.count())
                .map(|c| Popper::new(queue, recorders, c))
                .collect(),
            lanes,
            next_seq: 0,
            sweep: None,
            ended: false,
            timeout: None,
            untracked: false,
            resume,
            peeked: None,
        };
        if let Some(r) = &merged.resume {
            merged.next_seq = merged.next_seq(r.first_pass(), 0);
        }
        merged
    }

    /// The number of the next batch of `pass` from `seq` on: the first not
    /// left out by a resume.
    fn next_seq(&self, pass: u64, seq: u64) -> u64 {
        self.resume.as_ref().map_or(seq, |r| r.next_seq(pass, seq))
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Borrowing iterator over every batch ([`Loader::iter`]).
pub struct Iter<'a> {
    loader: &'a mut Loader,
}

impl Iterator for Iter<'_> {
    type Item = Result<Delivered, PipelineError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.loader.next_merged()
    }
}

/// One pass's deliveries ([`Loader::next_epoch`]).
pub struct Epoch<'a> {
    loader: &'a mut Loader,
    /// The epoch was begun (settled first).
    begun: bool,
    done: bool,
}

impl Epoch<'_> {
    fn step(&mut self) -> Option<Result<Delivered, PipelineError>> {
        let loader = &mut *self.loader;
        if !self.begun {
            self.begun = true;
            match loader.settle(None) {
                Ok(Settled::Done) | Ok(Settled::Wait) => {}
                Ok(Settled::Exhausted) => return None,
                Err(e) => return Some(Err(e)),
            }
            loader.epochs.begin();
        }
        loop {
            match loader.next_event_timeout(None) {
                Ok(Popped::Batch(d)) => {
                    loader.epochs.took_batch(d.pass);
                    return Some(Ok(d));
                }
                Ok(Popped::EndOfPass(p)) => match loader.epochs.took_pass_end(p) {
                    PassEnd::EpochOver => return None,
                    PassEnd::Within => continue,
                },
                Ok(Popped::EndOfData) => {
                    loader.epochs.end();
                    return None;
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

impl Iterator for Epoch<'_> {
    type Item = Result<Delivered, PipelineError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = self.step();
        if !matches!(r, Some(Ok(_))) {
            self.done = true;
        }
        r
    }
}

/// Owning iterator: dropping it (an early `break`) stops the loader.
pub struct IntoIter {
    loader: Loader,
}

impl IntoIter {
    /// The loader's statistics.
    pub fn stats(&self) -> StatsSnapshot {
        self.loader.stats()
    }
}

impl Iterator for IntoIter {
    type Item = Result<Delivered, PipelineError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.loader.next_merged()
    }
}

impl IntoIterator for Loader {
    type Item = Result<Delivered, PipelineError>;
    type IntoIter = IntoIter;
    fn into_iter(self) -> IntoIter {
        IntoIter { loader: self }
    }
}

/// One device's iterator ([`Loader::device_iter`]); `Send`.
pub struct DeviceIter {
    popper: Popper,
    stats: Stats,
    ended: bool,
    /// The loader's record of what was taken.
    progress: Arc<Mutex<Progress>>,
}

impl DeviceIter {
    /// The next item including end-of-pass markers.
    pub fn next_event(&mut self) -> Result<Popped, PipelineError> {
        let popped = self.popper.pop(&self.stats, None);
        self.taken(popped)
    }

    /// The next item, waiting at most `timeout`; a time-out says which stage is stuck.
    pub fn next_event_timeout(&mut self, timeout: Duration) -> Result<Popped, PipelineError> {
        let popped = self.popper.pop(&self.stats, Some(timeout));
        self.taken(popped)
    }

    /// Record what this device took, for the loader's checkpoint.
    fn taken(&self, popped: Result<Popped, PipelineError>) -> Result<Popped, PipelineError> {
        match &popped {
            Ok(Popped::Batch(d)) => self.progress.lock().take(d),
            Ok(Popped::EndOfPass(p)) => self.progress.lock().pass_ended(*p),
            _ => {}
        }
        popped
    }
}

impl Iterator for DeviceIter {
    type Item = Result<Delivered, PipelineError>;
    fn next(&mut self) -> Option<Self::Item> {
        while !self.ended {
            match self.next_event() {
                Ok(Popped::Batch(d)) => return Some(Ok(d)),
                Ok(Popped::EndOfPass(_)) => continue,
                Ok(Popped::EndOfData) => self.ended = true,
                Err(e) => {
                    self.ended = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}
