//! The `Supervisor` actor: counts passes (Paddle's `MultiPassReader`),
//! replaces readers that panicked or stalled (their file resumes where they
//! stopped), applies the error policy, signals the end, and stops
//! everything.
//!
//! Every stage reaches it through `Recipient`s of its messages, and it
//! reaches them the same way: it holds the other stages' `Shutdown`
//! recipients, the feed queue (to fail it), and a factory that starts a
//! reader — built by the wiring site, so that the supervisor does not know
//! how a reader is made. [`Supervisor::fail`] is the pipeline's one failure
//! path: every consumer gets the error, the producers stop, `finished()`
//! resolves with it.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures_channel::oneshot;

use crate::autotune::Runner;
use crate::config::StallPolicy;
use crate::error::PipelineError;
use crate::guard::{guarded, StageGuard, Supervised};
use crate::messages::{
    BatchQueue, FileFailed, PassFlushed, PipelineFailed, Requeue, Shutdown, StreamQueued,
    TrainerDone,
};
use crate::recorder::SupervisorRecorder;
use crate::settings::SupervisorSettings;
use crate::stats::Stats;
use crate::watch::ReaderWatch;

/// A running reader incarnation, as the supervisor sees it.
pub(crate) struct ReaderHandle {
    /// Stops it.
    pub stop: Recipient<Shutdown>,
    /// Where it stands (the watchdog fences it through this).
    pub watch: Arc<ReaderWatch>,
}

/// On which thread a new reader incarnation starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReaderThread {
    /// The reader's own (its last incarnation stopped).
    Same,
    /// A fresh one (the last incarnation is stuck in its thread).
    Fresh,
}

/// Starts reader `id`'s next incarnation.
pub(crate) type ReaderFactory = Box<dyn FnMut(usize, ReaderThread) -> ReaderHandle>;

/// What the supervisor stops and fails.
pub(crate) struct SupervisorLinks {
    /// Failed files go back to the file queue.
    pub requeue: Recipient<Requeue>,
    /// The producers: the file queue, the shuffle stage, the batch maker.
    pub producers: Vec<Recipient<Shutdown>>,
    /// The feed queue's lanes, failed when the pipeline fails.
    pub queue: BatchQueue,
    /// The feed queue's actor.
    pub feed: Recipient<Shutdown>,
}

/// The supervisor actor.
pub(crate) struct Supervisor {
    settings: SupervisorSettings,
    recorder: SupervisorRecorder,
    stats: Stats,
    links: Option<SupervisorLinks>,
    readers: Vec<Option<ReaderHandle>>,
    start_reader: ReaderFactory,
    trainers_left: usize,
    done: Option<oneshot::Sender<Result<(), PipelineError>>>,
    failed: bool,
    /// Every batch is in the closed feed queue: a stop leaves it to the consumers.
    queued: bool,
    guard: StageGuard,
    autotune: Option<Runner>,
}

/// What the supervisor is made with: its settings, recorder, the
/// statistics, its links to the other stages, the reader factory and how
/// many readers and trainers it watches, where the end is told, its guard.
pub(crate) struct SupervisorContext {
    /// Its settings.
    pub settings: SupervisorSettings,
    /// Its statistics.
    pub recorder: SupervisorRecorder,
    /// The pipeline's statistics (read when the pipeline ends).
    pub stats: Stats,
    /// What it stops and fails.
    pub links: SupervisorLinks,
    /// How many readers it starts (when it starts) and replaces.
    pub readers: usize,
    /// Starts a reader's incarnation.
    pub start_reader: ReaderFactory,
    /// How many trainers it waits for.
    pub trainers: usize,
    /// The autotuner, ticked every interval while the pipeline runs.
    pub autotune: Option<Runner>,
    /// Hears how the pipeline ended.
    pub done: oneshot::Sender<Result<(), PipelineError>>,
    /// Where its own failure goes (the lanes; no supervisor to tell).
    pub guard: StageGuard,
}

impl Supervisor {
    /// A supervisor made with `cx`: its readers started (by the factory)
    /// when it starts, its trainers waited for, the end told to `done`.
    pub(crate) fn new(cx: SupervisorContext) -> Self {
        let SupervisorContext {
            settings,
            recorder,
            stats,
            links,
            readers,
            start_reader,
            trainers,
            autotune,
            done,
            guard,
        } = cx;
        Supervisor {
            settings,
            recorder,
            stats,
            links: Some(links),
            readers: (0..readers).map(|_| None).collect(),
            start_reader,
            trainers_left: trainers,
            done: Some(done),
            failed: false,
            queued: false,
            guard,
            autotune,
        }
    }

    fn start_reader(&mut self, id: usize, thread: ReaderThread) {
        self.readers[id] = Some((self.start_reader)(id, thread));
    }

    /// Find readers inside one open or read for longer than the stall
    /// timeout; fence each, and retry its file on a fresh reader or fail.
    fn watchdog(&mut self) {
        let Some(timeout) = self.settings.stall_timeout else {
            return;
        };
        if self.failed {
            return;
        }
        let now = self.recorder.now_ns();
        for id in 0..self.readers.len() {
            let Some(watch) = self.readers[id].as_ref().map(|r| r.watch.clone()) else {
                continue;
            };
            let since = watch.busy_since();
            if since == 0 || now.saturating_sub(since) < crate::stats::ns(timeout) {
                continue;
            }
            // Only if it is still inside the call seen (atomic with its
            // taking a new task: see `watch`).
            let Some(fenced) = watch.fence_if_stuck(since) else {
                continue;
            };
            let task = fenced.task;
            let stuck = Duration::from_nanos(now.saturating_sub(since));
            self.recorder.reader_stalled();
            let (file, record) = task
                .as_ref()
                .map_or(("(opening a file)".to_string(), 0), |t| {
                    (t.task.file.clone(), t.start_record)
                });
            log::warn!("reader {id} stuck on {file} at record {record} for {stuck:?}");
            let error = PipelineError::ReaderStuck {
                file,
                record,
                stuck,
            };
            match (self.settings.on_stall, task) {
                (StallPolicy::Retry, Some(mut t))
                    if t.attempts + 1 < self.settings.max_attempts.max(1) =>
                {
                    t.attempts += 1;
                    if let Some(l) = &self.links {
                        l.requeue.do_send(Requeue(t));
                    }
                }
                (StallPolicy::Retry, None) => {}
                _ => {
                    self.fail(error);
                    return;
                }
            }
            // The stuck thread cannot be interrupted: a fresh reader gets a thread of its own.
            self.recorder.reader_restarted();
            self.start_reader(id, ReaderThread::Fresh);
        }
    }

    /// The pipeline's failure path: every consumer gets `e`, the producers
    /// stop, `finished()` resolves with `e`. The first failure wins.
    fn fail(&mut self, e: PipelineError) {
        if self.failed {
            return;
        }
        self.failed = true;
        // Every consumer and `finished()` get `e`: the caller reports it, once.
        log::debug!("pipeline failed: {e}");
        if let Some(l) = &self.links {
            l.queue.fail(e.clone());
        }
        self.stop_producers();
        if let Some(done) = self.done.take() {
            let _ = done.send(Err(e));
        }
    }

    fn stop_readers(&mut self) {
        for r in self.readers.iter_mut().filter_map(Option::take) {
            r.stop.do_send(Shutdown);
        }
    }

    fn stop_producers(&mut self) {
        self.stop_readers();
        if let Some(l) = &mut self.links {
            for p in l.producers.drain(..) {
                p.do_send(Shutdown);
            }
        }
    }

    fn resolve(&mut self, r: Result<(), PipelineError>) {
        if let Some(d) = self.done.take() {
            let _ = d.send(r);
        }
    }
}

impl Supervisor {
    fn on_file_failed(&mut self, msg: FileFailed) {
        if self.failed {
            return;
        }
        if !msg.panicked {
            self.fail(msg.error);
            return;
        }
        self.recorder.reader_restarted();
        if msg.task.attempts >= self.settings.max_attempts {
            self.fail(msg.error);
            return;
        }
        log::warn!(
            "reader {} replaced; {} resumes at record {}",
            msg.reader,
            msg.task.task.file,
            msg.task.start_record
        );
        if let Some(l) = &self.links {
            l.requeue.do_send(Requeue(msg.task));
        }
        self.start_reader(msg.reader, ReaderThread::Same);
    }

    fn on_pass_flushed(&mut self, msg: PassFlushed) {
        let done = self.recorder.pass_done();
        log::info!(
            "pass {} done: {} records in {} batches; {}",
            msg.pass,
            msg.records,
            msg.batches,
            self.stats.snapshot().summary_line()
        );
        if done >= self.settings.passes_to_run {
            // Readers have nothing more to do.
            self.stop_readers();
        }
    }

    /// Without trainers the pipeline's work is done once every batch is
    /// in the feed queue (the end-of-pass drain is collated as the queue
    /// takes it, so that is later than the last pass's flush).
    fn on_stream_queued(&mut self) {
        self.queued = true;
        if self.trainers_left == 0 {
            self.resolve(Ok(()));
        }
    }

    fn on_trainer_done(&mut self, msg: TrainerDone) {
        if let Some(e) = msg.error {
            if !matches!(e, PipelineError::Stopped) || !self.failed {
                log::debug!("device {} ended: {e}", msg.device);
                self.fail(e);
            }
        }
        self.trainers_left = self.trainers_left.saturating_sub(1);
        if self.trainers_left == 0 {
            self.resolve(Ok(()));
        }
    }

    fn shutdown(&mut self, ctx: &mut Context<Self>) {
        self.stop_producers();
        if let Some(l) = self.links.take() {
            // Once every batch is queued the consumers take the rest and
            // the end of data (the feed queue's actor lives on with the system).
            if !self.queued || self.failed {
                l.queue.fail(PipelineError::Stopped);
                l.feed.do_send(Shutdown);
            }
        }
        self.resolve(Err(PipelineError::Stopped));
        ctx.stop();
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        guarded(self, ctx, "start", |me, ctx| {
            for id in 0..me.readers.len() {
                me.start_reader(id, ReaderThread::Same);
            }
            if let Some(t) = me.settings.stall_timeout {
                let every = (t / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
                ctx.run_interval(every, |act, ctx| {
                    guarded(act, ctx, "the stall watchdog", |act, _| act.watchdog());
                });
            }
            if let Some(every) = me.autotune.as_ref().map(|r| r.interval) {
                ctx.run_interval(every, |act, ctx| {
                    guarded(act, ctx, "the autotuner", |act, _| {
                        if let Some(r) = &mut act.autotune {
                            r.tick();
                        }
                    });
                });
            }
        });
    }
}

impl Supervised for Supervisor {
    fn guard(&self) -> &StageGuard {
        &self.guard
    }

    /// The supervisor itself panicked (the guard failed the lanes): stop
    /// the producers and resolve `finished()` with the error.
    fn panicked(&mut self, ctx: &mut Context<Self>, e: &PipelineError) {
        self.fail(e.clone());
        ctx.stop();
    }
}

impl Drop for Supervisor {
    /// Gone before the pipeline ended (its system stopped, or a panic got
    /// past the guard): nobody may wait forever on the lanes or `finished()`.
    fn drop(&mut self) {
        if self.done.is_some() {
            self.guard.fail(PipelineError::Stopped);
            self.resolve(Err(PipelineError::Stopped));
        }
    }
}

impl Handler<FileFailed> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: FileFailed, ctx: &mut Context<Self>) {
        guarded(self, ctx, "FileFailed", |me, _| me.on_file_failed(msg));
    }
}

impl Handler<PipelineFailed> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: PipelineFailed, ctx: &mut Context<Self>) {
        guarded(self, ctx, "PipelineFailed", |me, _| me.fail(msg.0));
    }
}

impl Handler<PassFlushed> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: PassFlushed, ctx: &mut Context<Self>) {
        guarded(self, ctx, "PassFlushed", |me, _| me.on_pass_flushed(msg));
    }
}

impl Handler<StreamQueued> for Supervisor {
    type Result = ();
    fn handle(&mut self, _: StreamQueued, ctx: &mut Context<Self>) {
        guarded(self, ctx, "StreamQueued", |me, _| me.on_stream_queued());
    }
}

impl Handler<TrainerDone> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: TrainerDone, ctx: &mut Context<Self>) {
        guarded(self, ctx, "TrainerDone", |me, _| me.on_trainer_done(msg));
    }
}

impl Handler<Shutdown> for Supervisor {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        guarded(self, ctx, "Shutdown", |me, ctx| me.shutdown(ctx));
    }
}
