//! The `Supervisor` actor: starts the pipeline's actors, counts passes
//! (Paddle's `MultiPassReader`), replaces readers that panicked (their file
//! resumes where they stopped), applies the error policy, signals the end,
//! and stops everything.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use actix::prelude::*;
use futures::channel::oneshot;
use parking_lot::Mutex;

use crate::config::{PipelineConfig, StallPolicy};
use crate::error::PipelineError;
use crate::feed_queue::FeedQueue;
use crate::file_queue::{FileQueue, Requeue};
use crate::messages::{Fail, FileFailed, PassFlushed, Shutdown};
use crate::prefetch_reader::{PrefetchReader, TaskQueues};
use crate::shuffle_batch::ShuffleBatch;
use crate::stats::{ReaderWatch, Stats};
use feedline::Schema;

/// A stage failed: stop with this error.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct PipelineFailed(pub PipelineError);

/// A trainer ended (end of data, or with an error).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct TrainerDone {
    pub device: usize,
    pub error: Option<PipelineError>,
}

/// The arbiters (OS threads) a pipeline started, to stop and join at the end.
#[derive(Clone, Default)]
pub(crate) struct Arbiters(pub Arc<Mutex<Vec<Arbiter>>>);

impl Arbiters {
    pub fn new_arbiter(&self) -> ArbiterHandle {
        let a = Arbiter::new();
        let h = a.handle();
        self.0.lock().push(a);
        h
    }

    /// Stop every arbiter and wait for its thread (not from one of them) —
    /// at most a grace period: a reader blocked in I/O that the watchdog
    /// abandoned cannot be interrupted; its thread is left to end by itself.
    pub fn stop_and_join(&self) {
        let all: Vec<Arbiter> = self.0.lock().drain(..).collect();
        if all.is_empty() {
            return;
        }
        for a in &all {
            a.stop();
        }
        let n = all.len();
        let (tx, rx) = std::sync::mpsc::channel();
        let joiner = std::thread::Builder::new()
            .name("feedline-join".into())
            .spawn(move || {
                for a in all {
                    let _ = a.join();
                }
                let _ = tx.send(());
            });
        if joiner.is_ok() && rx.recv_timeout(std::time::Duration::from_secs(2)).is_err() {
            log::warn!("not all of {n} pipeline threads ended within 2 s (a reader blocked in I/O?); leaving them to end by themselves");
        }
    }
}

pub(crate) fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".into()
    }
}

/// The supervisor actor.
pub struct Supervisor {
    pub(crate) config: Arc<PipelineConfig>,
    pub(crate) schema: Schema,
    pub(crate) stats: Stats,
    /// Task queues per file set, and each reader's set.
    pub(crate) queues: Vec<Arc<TaskQueues>>,
    pub(crate) reader_set: Vec<usize>,
    pub(crate) file_queue: Option<Addr<FileQueue>>,
    pub(crate) shuffle: Option<Addr<ShuffleBatch>>,
    pub(crate) feed: Option<Addr<FeedQueue>>,
    pub(crate) readers: Vec<(ArbiterHandle, Option<Addr<PrefetchReader>>)>,
    pub(crate) trainers_left: usize,
    pub(crate) done: Option<oneshot::Sender<Result<(), PipelineError>>>,
    pub(crate) failed: bool,
    pub(crate) arbiters: Arbiters,
}

impl Supervisor {
    pub(crate) fn start_reader(&mut self, id: usize, ctx: &mut Context<Self>) {
        let (handle, _) = &self.readers[id];
        let cfg = self.config.clone();
        let schema = self.schema.clone();
        let queues = self.queues[self.reader_set[id]].clone();
        let stats = self.stats.clone();
        let fq = self.file_queue.clone().expect("file queue started");
        let sb = self.shuffle.clone().expect("shuffle started");
        let me = ctx.address();
        let watch = Arc::new(ReaderWatch::default());
        self.stats.set_watch(id, watch.clone());
        let addr = PrefetchReader::start_in_arbiter(handle, move |_| {
            let mut r = PrefetchReader::new(id, cfg, schema, queues, stats, fq, sb, me);
            r.watch = watch;
            r
        });
        self.readers[id].1 = Some(addr);
    }

    /// Find readers inside one open or read for longer than the stall
    /// timeout; fence each, and retry its file on a fresh reader or fail.
    fn watchdog(&mut self, ctx: &mut Context<Self>) {
        let Some(timeout) = self.config.stall_timeout else {
            return;
        };
        if self.failed {
            return;
        }
        let now = self.stats.now_ns();
        let watches: Vec<Arc<ReaderWatch>> = self.stats.inner.watches.lock().clone();
        for (id, w) in watches.iter().enumerate() {
            let since = w.busy_since.load(Relaxed);
            if since == 0 || now.saturating_sub(since) < stats_ns(timeout) {
                continue;
            }
            let task = {
                let mut st = w.state.lock();
                if st.fenced {
                    continue;
                }
                st.fenced = true;
                st.task.take()
            };
            let stuck = std::time::Duration::from_nanos(now.saturating_sub(since));
            self.stats.inner.reader_stalls.fetch_add(1, Relaxed);
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
            match (self.config.on_stall, task) {
                (StallPolicy::Retry, Some(mut t))
                    if t.attempts + 1 < self.config.max_attempts.max(1) =>
                {
                    t.attempts += 1;
                    if let Some(fq) = &self.file_queue {
                        fq.do_send(Requeue(t));
                    }
                }
                (StallPolicy::Retry, None) => {}
                _ => {
                    self.fail(error);
                    return;
                }
            }
            // The stuck thread cannot be interrupted: a fresh reader gets a thread of its own.
            self.stats.inner.reader_restarts.fetch_add(1, Relaxed);
            self.readers[id].0 = self.arbiters.new_arbiter();
            self.start_reader(id, ctx);
        }
    }

    fn fail(&mut self, e: PipelineError) {
        if self.failed {
            return;
        }
        self.failed = true;
        log::error!("pipeline failed: {e}");
        if let Some(feed) = &self.feed {
            feed.do_send(Fail(e.clone()));
        }
        self.stop_producers();
        if let Some(done) = self.done.take() {
            let _ = done.send(Err(e));
        }
    }

    fn stop_producers(&mut self) {
        for (_, r) in &mut self.readers {
            if let Some(r) = r.take() {
                r.do_send(Shutdown);
            }
        }
        if let Some(fq) = self.file_queue.take() {
            fq.do_send(Shutdown);
        }
        if let Some(sb) = self.shuffle.take() {
            sb.do_send(Shutdown);
        }
    }
}

fn stats_ns(d: std::time::Duration) -> u64 {
    crate::stats::ns(d)
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if let Some(t) = self.config.stall_timeout {
            let every = (t / 4).clamp(
                std::time::Duration::from_millis(10),
                std::time::Duration::from_secs(1),
            );
            ctx.run_interval(every, |act, ctx| act.watchdog(ctx));
        }
    }
}

impl Handler<FileFailed> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: FileFailed, ctx: &mut Context<Self>) {
        if self.failed {
            return;
        }
        if !msg.panicked {
            self.fail(msg.error);
            return;
        }
        self.stats.inner.reader_restarts.fetch_add(1, Relaxed);
        if msg.task.attempts >= self.config.max_attempts {
            self.fail(msg.error);
            return;
        }
        log::warn!(
            "reader {} replaced; {} resumes at record {}",
            msg.reader,
            msg.task.task.file,
            msg.task.start_record
        );
        if let Some(fq) = &self.file_queue {
            fq.do_send(Requeue(msg.task));
        }
        self.start_reader(msg.reader, ctx);
    }
}

impl Handler<PipelineFailed> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: PipelineFailed, _: &mut Context<Self>) {
        self.fail(msg.0);
    }
}

impl Handler<PassFlushed> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: PassFlushed, _: &mut Context<Self>) {
        let done = self.stats.inner.passes_done.fetch_add(1, Relaxed) + 1;
        log::info!(
            "pass {} done: {} records in {} batches; {}",
            msg.pass,
            msg.records,
            msg.batches,
            self.stats.snapshot().summary_line()
        );
        if done >= self.config.passes {
            // Readers have nothing more to do.
            for (_, r) in &mut self.readers {
                if let Some(r) = r.take() {
                    r.do_send(Shutdown);
                }
            }
            if self.trainers_left == 0 {
                if let Some(d) = self.done.take() {
                    let _ = d.send(Ok(()));
                }
            }
        }
    }
}

impl Handler<TrainerDone> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: TrainerDone, _: &mut Context<Self>) {
        if let Some(e) = msg.error {
            if !matches!(e, PipelineError::Stopped) || !self.failed {
                log::debug!("device {} ended: {e}", msg.device);
                self.fail(e);
            }
        }
        self.trainers_left = self.trainers_left.saturating_sub(1);
        if self.trainers_left == 0 {
            if let Some(d) = self.done.take() {
                let _ = d.send(Ok(()));
            }
        }
    }
}

impl Handler<Shutdown> for Supervisor {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        self.stop_producers();
        if let Some(feed) = self.feed.take() {
            feed.do_send(Fail(PipelineError::Stopped));
            feed.do_send(Shutdown);
        }
        if let Some(d) = self.done.take() {
            let _ = d.send(Err(PipelineError::Stopped));
        }
        ctx.stop();
    }
}
