//! The `Supervisor` actor: starts the pipeline's actors, counts passes
//! (Paddle's `MultiPassReader`), replaces readers that panicked (their file
//! resumes where they stopped), applies the error policy, signals the end,
//! and stops everything.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use actix::prelude::*;
use futures::channel::oneshot;
use parking_lot::Mutex;

use crate::config::PipelineConfig;
use crate::error::PipelineError;
use crate::feed_queue::FeedQueue;
use crate::file_queue::{FileQueue, Requeue};
use crate::messages::{Fail, FileFailed, PassFlushed, Shutdown};
use crate::prefetch_reader::{PrefetchReader, TaskQueues};
use crate::shuffle_batch::ShuffleBatch;
use crate::stats::Stats;
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

    /// Stop every arbiter and wait for its thread (not from one of them).
    pub fn stop_and_join(&self) {
        let all: Vec<Arbiter> = self.0.lock().drain(..).collect();
        for a in &all {
            a.stop();
        }
        for a in all {
            let _ = a.join();
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
    pub(crate) queues: Arc<TaskQueues>,
    pub(crate) file_queue: Option<Addr<FileQueue>>,
    pub(crate) shuffle: Option<Addr<ShuffleBatch>>,
    pub(crate) feed: Option<Addr<FeedQueue>>,
    pub(crate) readers: Vec<(ArbiterHandle, Option<Addr<PrefetchReader>>)>,
    pub(crate) trainers_left: usize,
    pub(crate) done: Option<oneshot::Sender<Result<(), PipelineError>>>,
    pub(crate) failed: bool,
}

impl Supervisor {
    pub(crate) fn start_reader(&mut self, id: usize, ctx: &mut Context<Self>) {
        let (handle, _) = &self.readers[id];
        let cfg = self.config.clone();
        let schema = self.schema.clone();
        let queues = self.queues.clone();
        let stats = self.stats.clone();
        let fq = self.file_queue.clone().expect("file queue started");
        let sb = self.shuffle.clone().expect("shuffle started");
        let me = ctx.address();
        let addr = PrefetchReader::start_in_arbiter(handle, move |_| {
            PrefetchReader::new(id, cfg, schema, queues, stats, fq, sb, me)
        });
        self.readers[id].1 = Some(addr);
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

impl Actor for Supervisor {
    type Context = Context<Self>;
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
