//! The `FileQueue` actor: owns the pass plan, puts each pass's file tasks
//! where the readers steal them (a `crossbeam_deque::Injector`), hears which
//! files are done, and declares a pass drained when all are.
//!
//! A pass's tasks are queued only when the previous pass's files are all
//! delivered, so every batch of pass `p` precedes every batch of `p + 1`.

use std::sync::Arc;

use actix::prelude::*;
use feedline::plan::{equalized_counts, Equalize, PassPlan};

use crate::messages::{EndOfPass, FileDone, PassQuota, ReadTask, Shutdown};
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
    /// Equalizing ranks: records per file (by `FileTask::file_index`), the
    /// batch size, drop_last and how.
    pub(crate) equalize: Option<(Arc<Vec<u64>>, usize, bool, Equalize)>,
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
            equalize: None,
        }
    }

    /// Tell the shuffle stage this rank's quota for `pass`, from every rank's
    /// records in it.
    fn send_quota(&self, pass: u64) {
        let Some((counts, batch, drop_last, how)) = &self.equalize else {
            return;
        };
        let world = self.plan.get_shard().world_size;
        let per_rank: Vec<u64> = (0..world)
            .map(|r| {
                self.plan.for_rank(r).map_or(0, |p| {
                    p.tasks(pass)
                        .iter()
                        .map(|t| t.stride.count_from(t.start_record, counts[t.file_index]))
                        .sum()
                })
            })
            .collect();
        match equalized_counts(&per_rank, *batch, *drop_last, *how) {
            Ok(c) => {
                let mine = c[self.plan.get_shard().rank];
                log::info!(
                    "pass {pass}: ranks have {per_rank:?} records; this rank keeps {}, drops {}, pads {} ({} batches)",
                    mine.keep,
                    mine.drop,
                    mine.pad,
                    mine.batches
                );
                self.shuffle.do_send(PassQuota {
                    pass,
                    keep: mine.keep,
                    pad: mine.pad,
                });
            }
            Err(e) => log::error!("pass {pass}: cannot equalize ranks {per_rank:?}: {e}"),
        }
    }

    fn start_pass(&mut self, pass: u64) {
        self.pass = pass;
        let tasks = self.plan.tasks(pass);
        self.send_quota(pass);
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
