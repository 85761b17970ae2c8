//! The `FileQueue` actor: owns the pass plan, puts each pass's file tasks
//! where the readers steal them (a `crossbeam_deque::Injector`), hears which
//! files are done, and declares a pass drained when all are.
//!
//! A pass's tasks are queued only when the previous pass's files are all
//! delivered, so every batch of pass `p` precedes every batch of `p + 1`.

use std::sync::Arc;

use actix::prelude::*;
use feedline::plan::PassPlan;

use crate::messages::{EndOfPass, FileDone, ReadTask, Shutdown};
use crate::prefetch_reader::{PrefetchReader, TaskQueues, Wake};
use crate::shuffle_batch::ShuffleBatch;

/// A reader found no task and waits for a `Wake`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ReaderIdle(pub usize, pub Addr<PrefetchReader>);

/// Queue a failed file again, from where its reader stopped.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Requeue(pub ReadTask);

/// Start pass 0.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct StartPasses;

/// The file-queue actor.
pub struct FileQueue {
    plan: PassPlan,
    passes: u64,
    pass: u64,
    outstanding: usize,
    queues: Arc<TaskQueues>,
    idle: Vec<(usize, Addr<PrefetchReader>)>,
    shuffle: Addr<ShuffleBatch>,
}

impl FileQueue {
    pub(crate) fn new(
        plan: PassPlan,
        passes: u64,
        queues: Arc<TaskQueues>,
        shuffle: Addr<ShuffleBatch>,
    ) -> Self {
        FileQueue {
            plan,
            passes,
            pass: 0,
            outstanding: 0,
            queues,
            idle: Vec::new(),
            shuffle,
        }
    }

    fn start_pass(&mut self, pass: u64) {
        self.pass = pass;
        let tasks = self.plan.tasks(pass);
        self.outstanding = tasks.len();
        log::debug!("pass {pass}: {} files queued", tasks.len());
        for task in tasks {
            self.queues.tasks.push(ReadTask {
                start_record: task.start_record,
                task,
                next_chunk: 0,
                attempts: 0,
            });
        }
        if self.outstanding == 0 {
            self.pass_drained();
        } else {
            self.wake_all();
        }
    }

    fn wake_all(&mut self) {
        for (_, r) in self.idle.drain(..) {
            r.do_send(Wake);
        }
    }

    fn pass_drained(&mut self) {
        let pass = self.pass;
        self.shuffle.do_send(EndOfPass(pass));
        if pass + 1 < self.passes {
            self.start_pass(pass + 1);
        }
    }
}

impl Actor for FileQueue {
    type Context = Context<Self>;
}

impl Handler<StartPasses> for FileQueue {
    type Result = ();
    fn handle(&mut self, _: StartPasses, _: &mut Context<Self>) {
        if self.passes > 0 {
            self.start_pass(0);
        }
    }
}

impl Handler<ReaderIdle> for FileQueue {
    type Result = ();
    fn handle(&mut self, msg: ReaderIdle, _: &mut Context<Self>) {
        if !self.queues.tasks.is_empty() || !self.queues.retries.is_empty() {
            msg.1.do_send(Wake);
            return;
        }
        if !self.idle.iter().any(|(id, _)| *id == msg.0) {
            self.idle.push((msg.0, msg.1));
        }
    }
}

impl Handler<FileDone> for FileQueue {
    type Result = ();
    fn handle(&mut self, msg: FileDone, _: &mut Context<Self>) {
        if msg.task.task.pass != self.pass {
            log::error!(
                "file {} of pass {} reported done during pass {}",
                msg.task.task.file,
                msg.task.task.pass,
                self.pass
            );
            return;
        }
        self.outstanding -= 1;
        if self.outstanding == 0 {
            self.pass_drained();
        }
    }
}

impl Handler<Requeue> for FileQueue {
    type Result = ();
    fn handle(&mut self, msg: Requeue, _: &mut Context<Self>) {
        self.queues.retries.push(msg.0);
        self.wake_all();
    }
}

impl Handler<Shutdown> for FileQueue {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        while self.queues.steal_any() {}
        ctx.stop();
    }
}
