//! The `Trainer` actor: one per device. It pops batches from the feed
//! queue's lanes, always asking for the next one before it runs a step on
//! the current (the double buffer), and runs its device's clock.
//!
//! The step is the user's [`TrainStep`]; [`SimulatedDevice`] sleeps for a
//! step time, to see whether a loader keeps devices fed before renting them.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use actix::prelude::*;
use feedline::feed_queue::PopNow;

use crate::error::PipelineError;
use crate::messages::{BatchQueue, Delivered, Popped, Take, TrainerDone};
use crate::panic::panic_text;
use crate::recorder::DeviceClock;

/// A device's training step: what a trainer does with each batch.
pub trait TrainStep: Send + Unpin + 'static {
    /// Run one step on `batch`. An `Err` stops the pipeline with that message.
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
}

impl<S: TrainStep> Trainer<S> {
    /// Device `device`'s trainer, taking from `queue`, telling `done` when it ends.
    pub(crate) fn new(
        device: usize,
        step: S,
        queue: BatchQueue,
        done: Recipient<TrainerDone>,
        clock: DeviceClock,
    ) -> Self {
        Trainer {
            device,
            step,
            queue,
            done,
            clock,
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
                    act.on_popped(res.unwrap_or(Err(PipelineError::Stopped)), ctx);
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

    fn on_popped(&mut self, popped: Result<Popped, PipelineError>, ctx: &mut Context<Self>) {
        match popped {
            Ok(Popped::Batch(d)) => {
                self.clock.item_arrives(Some(d.batch.len()));
                // Ask for the next batch before working on this one; the
                // device waits for it only from the step's end on.
                self.request(ctx);
                let device = self.device;
                let step = &mut self.step;
                let result = catch_unwind(AssertUnwindSafe(|| step.step(device, &d)));
                self.clock.wait_begins();
                let message = match result {
                    Ok(Ok(())) => return,
                    Ok(Err(m)) => m,
                    Err(p) => panic_text(p),
                };
                self.finish(
                    ctx,
                    Some(PipelineError::Trainer {
                        device: self.device,
                        message,
                    }),
                );
            }
            Ok(Popped::EndOfPass(p)) => {
                self.clock.item_arrives(None);
                self.step.end_of_pass(self.device, p);
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
        self.on_popped(msg.0, ctx);
    }
}

impl<S: TrainStep> Actor for Trainer<S> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.request(ctx);
    }
}
