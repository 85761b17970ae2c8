//! The `FileQueue` actor: owns the pass plans, puts each pass's file tasks
//! where the readers steal them ([`TaskQueues`]), hears which files are
//! done, and declares a pass drained when all are.
//!
//! A pass's tasks are queued only when the previous pass's files are all
//! delivered, so every batch of pass `p` precedes every batch of `p + 1`.
//!
//! With several file sets ([`FileSet`](crate::FileSet)) each set has its own
//! plan, task queues and readers; a pass ends when every set's files are
//! delivered, and the shuffle stage hears when each set's part is. With
//! equalized ranks it tells the shuffle stage this rank's share of each pass.

use std::sync::Arc;

use actix::prelude::*;
use feedline::plan::{FileTask, PassPlan, RecordStride};

use crate::equalize::EqualizeRanks;
use crate::error::PipelineError;
use crate::guard::{guarded, StageGuard, Supervised};
use crate::messages::{
    FileDone, PassEvent, ReadTask, ReaderIdle, Requeue, Shutdown, StartPasses, Wake,
};
use crate::resume_plan::FileQueueResume;
use crate::task_queue::TaskQueues;

/// One file set's plan, task queues and files not yet delivered this pass.
pub(crate) struct SetQueue {
    plan: PassPlan,
    queues: Arc<TaskQueues>,
    outstanding: usize,
}

impl SetQueue {
    pub(crate) fn new(plan: PassPlan, queues: Arc<TaskQueues>) -> Self {
        SetQueue {
            plan,
            queues,
            outstanding: 0,
        }
    }
}

/// The file-queue actor.
pub(crate) struct FileQueue {
    sets: Vec<SetQueue>,
    /// The file set of each reader (by reader id).
    reader_set: Vec<usize>,
    passes: u64,
    pass: u64,
    /// Where a resumed pipeline starts, and the passes it reads nothing of.
    resume: Option<FileQueueResume>,
    idle: Vec<(usize, Recipient<Wake>)>,
    /// Where the pass stands, told to the shuffle stage.
    shuffle: Recipient<PassEvent>,
    equalize: Option<EqualizeRanks>,
    guard: StageGuard,
}

/// What the file queue is made with: each file set's plan and task
/// queues, each reader's file set, the passes to run, its resume part,
/// the shuffle stage it tells where a pass stands, the equalize counts and
/// its guard.
pub(crate) struct FileQueueContext {
    /// Each file set's plan and task queues.
    pub sets: Vec<SetQueue>,
    /// Each reader's file set (by reader id).
    pub reader_set: Vec<usize>,
    /// How many passes run.
    pub passes: u64,
    /// A resume's part: where the run starts, the passes it reads nothing of.
    pub resume: Option<FileQueueResume>,
    /// Where the pass stands, told to the shuffle stage.
    pub shuffle: Recipient<PassEvent>,
    /// Equalizing ranks: every file's records.
    pub equalize: Option<EqualizeRanks>,
    /// Where a failure goes.
    pub guard: StageGuard,
}

impl FileQueue {
    /// The file queue made with `cx`, at the resume's first pass.
    pub(crate) fn new(cx: FileQueueContext) -> Self {
        let FileQueueContext {
            sets,
            reader_set,
            passes,
            resume,
            shuffle,
            equalize,
            guard,
        } = cx;
        FileQueue {
            sets,
            reader_set,
            passes,
            pass: resume.as_ref().map_or(0, |r| r.first_pass()),
            resume,
            idle: Vec::new(),
            shuffle,
            equalize,
            guard,
        }
    }

    /// Tell the shuffle stage this rank's share of `pass`, from every rank's
    /// records in it; false if ranks cannot be equalized (the pipeline failed).
    ///
    /// What "equal" means on a pass resumed by record (shuffled mode, or
    /// another shard):
    /// - elastic resume (the checkpoints of all old ranks, merged, or another
    ///   rank/world size): each new rank's records are its piece of what the
    ///   old ranks left of the pass (`ResumeFrom::rebalance`; with file sets,
    ///   its files' remainders); [`equalized_counts`] over these gives every new
    ///   rank the same number of batches (and batch sizes) in the resumed
    ///   pass, dropping or padding only by its rule applied to the
    ///   remainders;
    /// - same shard (one checkpoint, shuffled): the rank's quota of the
    ///   uninterrupted pass less what it delivered before the stop (batches ×
    ///   batch size; kept instances first, then pads), so that before + after
    ///   deliver exactly the uninterrupted pass's batch count;
    ///
    /// later passes are equalized as usual.
    fn send_quota(&self, pass: u64) -> bool {
        let Some(eq) = &self.equalize else {
            return true;
        };
        // Equalizing is refused with several sets (pipeline::prepare).
        match eq.quota(&self.sets[0].plan, pass, self.resume.as_ref()) {
            Ok(q) => {
                log::info!("pass {pass}: {q}");
                self.shuffle.do_send(PassEvent::Quota {
                    pass,
                    keep: q.mine.keep,
                    pad: q.mine.pad,
                });
                true
            }
            Err(e) => {
                self.guard
                    .fail(PipelineError::Equalize(format!("pass {pass}: {e}")));
                false
            }
        }
    }

    fn start_pass(&mut self, pass: u64) {
        self.pass = pass;
        // A resumed pipeline whose passes were all consumed reads nothing.
        let nothing = self.resume.as_ref().is_some_and(|r| r.reads_nothing(pass));
        if !nothing && !self.send_quota(pass) {
            return;
        }
        // A draw resumed from a snapshot reads on from its next chunk.
        let from = (self.resume.as_ref()).and_then(|r| r.reads_on_from(pass));
        let spread = (self.resume.as_ref()).and_then(|r| r.spread_files(pass));
        let mut files = Vec::with_capacity(self.sets.len());
        for (set, sq) in self.sets.iter_mut().enumerate() {
            let mut tasks = if nothing {
                Vec::new()
            } else if let Some(files) = spread {
                // A rebalanced elastic pass: whole files, the readers leave
                // out what is not this rank's.
                (files.iter().enumerate())
                    .map(|(seq, &file_index)| FileTask {
                        pass,
                        seq,
                        file_index,
                        file: sq.plan.files()[file_index].clone(),
                        start_record: 0,
                        stride: RecordStride::ALL,
                    })
                    .collect()
            } else {
                sq.plan.tasks(pass)
            };
            if let Some((file, _, _)) = from {
                tasks.retain(|t| t.seq >= file);
            }
            sq.outstanding = tasks.len();
            files.push(tasks.len());
            for task in tasks {
                let (start_record, next_chunk) = match from {
                    Some((file, chunk, record)) if task.seq == file => {
                        (record.unwrap_or(task.start_record), chunk)
                    }
                    _ => (task.start_record, 0),
                };
                sq.queues.tasks.push(ReadTask {
                    set,
                    start_record,
                    task,
                    next_chunk,
                    attempts: 0,
                });
            }
        }
        log::debug!("pass {pass}: {files:?} files queued");
        if self.sets.len() > 1 {
            self.shuffle.do_send(PassEvent::Sets {
                pass,
                files: files.clone(),
            });
            for (set, n) in files.iter().enumerate() {
                if *n == 0 {
                    self.shuffle.do_send(PassEvent::SetDrained { pass, set });
                }
            }
        }
        if self.sets.iter().all(|s| s.outstanding == 0) {
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
        self.shuffle.do_send(PassEvent::Ended(pass));
        if pass + 1 < self.passes {
            self.start_pass(pass + 1);
        }
    }

    fn queues_of_reader(&self, reader: usize) -> &TaskQueues {
        let set = self.reader_set.get(reader).copied().unwrap_or(0);
        &self.sets[set].queues
    }
}

impl FileQueue {
    fn on_reader_idle(&mut self, msg: ReaderIdle) {
        if self.queues_of_reader(msg.reader).has_work() {
            msg.wake.do_send(Wake);
            return;
        }
        if !self.idle.iter().any(|(id, _)| *id == msg.reader) {
            self.idle.push((msg.reader, msg.wake));
        }
    }

    fn on_file_done(&mut self, msg: FileDone) {
        if msg.task.task.pass != self.pass {
            log::error!(
                "file {} of pass {} reported done during pass {}",
                msg.task.task.file,
                msg.task.task.pass,
                self.pass
            );
            return;
        }
        log::debug!(
            "{} of pass {} read: {} records",
            msg.task.task.file,
            self.pass,
            msg.records
        );
        let set = msg.task.set;
        let sq = &mut self.sets[set];
        sq.outstanding -= 1;
        if sq.outstanding == 0 && self.sets.len() > 1 {
            self.shuffle.do_send(PassEvent::SetDrained {
                pass: self.pass,
                set,
            });
        }
        if self.sets.iter().all(|s| s.outstanding == 0) {
            self.pass_drained();
        }
    }

    fn stop(&mut self, ctx: &mut Context<Self>) {
        for s in &self.sets {
            s.queues.clear();
        }
        ctx.stop();
    }
}

impl Actor for FileQueue {
    type Context = Context<Self>;
}

impl Supervised for FileQueue {
    fn guard(&self) -> &StageGuard {
        &self.guard
    }

    fn panicked(&mut self, ctx: &mut Context<Self>, _: &PipelineError) {
        self.stop(ctx);
    }
}

impl Handler<StartPasses> for FileQueue {
    type Result = ();
    fn handle(&mut self, _: StartPasses, ctx: &mut Context<Self>) {
        guarded(self, ctx, "StartPasses", |me, _| {
            if me.pass < me.passes {
                me.start_pass(me.pass);
            }
        });
    }
}

impl Handler<ReaderIdle> for FileQueue {
    type Result = ();
    fn handle(&mut self, msg: ReaderIdle, ctx: &mut Context<Self>) {
        guarded(self, ctx, "ReaderIdle", |me, _| me.on_reader_idle(msg));
    }
}

impl Handler<FileDone> for FileQueue {
    type Result = ();
    fn handle(&mut self, msg: FileDone, ctx: &mut Context<Self>) {
        guarded(self, ctx, "FileDone", |me, _| me.on_file_done(msg));
    }
}

impl Handler<Requeue> for FileQueue {
    type Result = ();
    fn handle(&mut self, msg: Requeue, ctx: &mut Context<Self>) {
        guarded(self, ctx, "Requeue", |me, _| {
            me.sets[msg.0.set].queues.retries.push(msg.0);
            me.wake_all();
        });
    }
}

impl Handler<Shutdown> for FileQueue {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        guarded(self, ctx, "Shutdown", |me, ctx| me.stop(ctx));
    }
}
