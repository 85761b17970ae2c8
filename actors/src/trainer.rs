//! The `Trainer` actor: one per device. It pops batches from the feed
//! queue's lanes, always asking for the next one before it runs a step on
//! the current (the double buffer), and runs its device's clock.
//!
//! The step is the user's [`TrainStep`]; [`SimulatedDevice`] sleeps for a
//! step time, to see whether a loader keeps devices fed before renting them.

use std::time::Duration;

use actix::prelude::*;
use feedline::feed_queue::PopNow;

use crate::error::PipelineError;
use crate::guard::{guarded, StageGuard, Supervised};
use crate::messages::{BatchQueue, Delivered, Popped, Take, TrainerDone};
use crate::progress::SharedProgress;
use crate::recorder::DeviceClock;

/// A device's training step: what a trainer does with each batch.
pub trait TrainStep: Send + Unpin + 'static {
    /// Run one step on `batch`. An `Err` stops the pipeline with that
    /// message; so does a panic (as [`PipelineError::Panicked`], naming the
    /// device's trainer and the batch), here and in the hooks below.
    fn step(&mut self, device: usize, batch: &Delivered) -> Result<(), String>;

    /// Called when the device has had every batch of `pass` it will get.
    fn end_of_pass(&mut self, _device: usize, _pass: u64) {}

    /// Called once at the end of data.
    fn end_of_data(&mut self, _device: usize) {}
}

/// A simulated device: each step takes a fixed time (`std::thread::sleep`).
#[derive(Clone, Debug)]
pub struct SimulatedDevice {
    /// Time per batch.
    pub step_time: Duration,
}

impl TrainStep for SimulatedDevice {
    fn step(&mut self, _device: usize, batch: &Delivered) -> Result<(), String> {
        // Touch the batch as a device copy would.
        std::hint::black_box(batch.batch.payload_bytes());
        if !self.step_time.is_zero() {
            std::thread::sleep(self.step_time);
        }
        Ok(())
    }
}

/// The trainer actor of one device.
pub(crate) struct Trainer<S: TrainStep> {
    device: usize,
    step: S,
    queue: BatchQueue,
    done: Recipient<TrainerDone>,
    clock: DeviceClock,
    guard: StageGuard,
    /// What the devices took, for [`Pipeline::checkpoint`](crate::Pipeline::checkpoint).
    progress: Option<SharedProgress>,
}

impl<S: TrainStep> Trainer<S> {
    /// Count what this trainer's steps took into `progress`.
    pub(crate) fn with_progress(mut self, progress: Option<SharedProgress>) -> Self {
        self.progress = progress;
        self
    }

    /// Device `device`'s trainer, taking from `queue`, telling `done` when it ends.
    pub(crate) fn new(
        device: usize,
        step: S,
        queue: BatchQueue,
        done: Recipient<TrainerDone>,
        clock: DeviceClock,
        guard: StageGuard,
    ) -> Self {
        Trainer {
            device,
            step,
            queue,
            done,
            clock,
            guard,
            progress: None,
        }
    }

    /// Ask for the next item, straight from the feed queue's lanes: taken
    /// now if it is there (handled by a self-message, after the current
    /// step), else parked in them and answered by the push that brings one.
    fn request(&mut self, ctx: &mut Context<Self>) {
        self.clock.wait_begins();
        match self.queue.pop_async(self.device) {
            PopNow::Ready(r) => ctx.notify(Take(r)),
            PopNow::Later(rx) => {
                ctx.spawn(rx.into_actor(self).map(|res, act, ctx| {
                    act.take(res.unwrap_or(Err(PipelineError::Stopped)), ctx);
                }));
            }
        }
    }

    fn finish(&mut self, ctx: &mut Context<Self>, error: Option<PipelineError>) {
        self.done.do_send(TrainerDone {
            device: self.device,
            error,
        });
        ctx.stop();
    }

    /// Handle a popped item under the guard, named after what it is.
    fn take(&mut self, popped: Result<Popped, PipelineError>, ctx: &mut Context<Self>) {
        let handling = match &popped {
            Ok(Popped::Batch(d)) => format!("step on batch {} of pass {}", d.seq, d.pass),
            Ok(Popped::EndOfPass(p)) => format!("end of pass {p}"),
            Ok(Popped::EndOfData) => "end of data".to_string(),
            Err(_) => "the pipeline's failure".to_string(),
        };
        guarded(self, ctx, &handling, |me, ctx| me.on_popped(popped, ctx));
    }

    fn on_popped(&mut self, popped: Result<Popped, PipelineError>, ctx: &mut Context<Self>) {
        match popped {
            Ok(Popped::Batch(d)) => {
                self.clock.item_arrives(Some(d.batch.len()));
                // Ask for the next batch before working on this one; the
                // device waits for it only from the step's end on.
                self.request(ctx);
                let result = self.step.step(self.device, &d);
                if let (Ok(()), Some(p)) = (&result, &self.progress) {
                    p.lock().take(&d);
                }
                self.clock.wait_begins();
                if let Err(message) = result {
                    self.finish(
                        ctx,
                        Some(PipelineError::Trainer {
                            device: self.device,
                            message,
                        }),
                    );
                }
            }
            Ok(Popped::EndOfPass(p)) => {
                self.clock.item_arrives(None);
                self.step.end_of_pass(self.device, p);
                if let Some(progress) = &self.progress {
                    progress.lock().pass_ended(p);
                }
                self.request(ctx);
            }
            Ok(Popped::EndOfData) => {
                self.clock.item_arrives(None);
                self.step.end_of_data(self.device);
                self.finish(ctx, None);
            }
            Err(e) => self.finish(ctx, Some(e)),
        }
    }
}

impl<S: TrainStep> Handler<Take> for Trainer<S> {
    type Result = ();

    fn handle(&mut self, msg: Take, ctx: &mut Context<Self>) {
        self.take(msg.0, ctx);
    }
}

impl<S: TrainStep> Actor for Trainer<S> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        guarded(self, ctx, "start", |me, ctx| me.request(ctx));
    }
}

impl<S: TrainStep> Supervised for Trainer<S> {
    fn guard(&self) -> &StageGuard {
        &self.guard
    }
}
