//! The `Trainer` actor: one per device. It pops batches from the feed
//! queue's lanes, always asking for the next one before it runs a step on
//! the current (the double buffer), and counts its busy and waiting time.
//!
//! The step is the user's [`TrainStep`]; [`SimulatedDevice`] sleeps for a
//! step time, to see whether a loader keeps devices fed before renting them.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;

use crate::error::PipelineError;
use crate::feed_queue::{FeedLanes, FeedQueue, PopNow};
use crate::messages::{Delivered, Pop, Popped};
use crate::stats::{ns, Stats};
use crate::supervisor::{Supervisor, TrainerDone};

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
pub struct Trainer<S: TrainStep> {
    device: usize,
    step: S,
    feed: Addr<FeedQueue>,
    supervisor: Addr<Supervisor>,
    stats: Stats,
    /// The feed queue's lanes, popped directly.
    lanes: Option<Arc<FeedLanes>>,
    waiting_since: Instant,
}

impl<S: TrainStep> Trainer<S> {
    pub(crate) fn new(
        device: usize,
        step: S,
        feed: Addr<FeedQueue>,
        supervisor: Addr<Supervisor>,
        stats: Stats,
    ) -> Self {
        Trainer {
            device,
            step,
            feed,
            supervisor,
            lanes: stats.feed_lanes(),
            stats,
            waiting_since: Instant::now(),
        }
    }

    /// Ask for the next item: straight from the feed queue's lanes when it
    /// is there (delivered by a self-message, after the current step), else
    /// parked in them and answered by the push that brings one — no message
    /// to the queue's actor either way. Without the lanes (a queue not
    /// started by this pipeline) it sends [`Pop`].
    fn request(&mut self, ctx: &mut Context<Self>) {
        if let Some(lanes) = &self.lanes {
            match lanes.pop_async(self.device) {
                PopNow::Ready(r) => ctx.notify(Take(r)),
                PopNow::Later(rx) => {
                    ctx.spawn(rx.into_actor(self).map(|res, act, ctx| {
                        act.on_popped(res.unwrap_or(Err(PipelineError::Stopped)), ctx);
                    }));
                }
            }
            return;
        }
        let fut = self.feed.send(Pop {
            consumer: self.device,
        });
        ctx.spawn(fut.into_actor(self).map(|res, act, ctx| {
            let popped = match res {
                Ok(r) => r,
                Err(_) => Err(PipelineError::Stopped),
            };
            act.on_popped(popped, ctx);
        }));
    }

    fn finish(&mut self, ctx: &mut Context<Self>, error: Option<PipelineError>) {
        self.supervisor.do_send(TrainerDone {
            device: self.device,
            error,
        });
        ctx.stop();
    }

    fn on_popped(&mut self, popped: Result<Popped, PipelineError>, ctx: &mut Context<Self>) {
        match popped {
            Ok(Popped::Batch(d)) => {
                let counters = self.stats.device(self.device);
                if let Some(c) = counters {
                    // The wait before a device's first batch is start-up
                    // (reported as the first-batch latency), not a stall.
                    if c.batches.load(Relaxed) > 0 {
                        c.wait_ns
                            .fetch_add(ns(self.waiting_since.elapsed()), Relaxed);
                    }
                }
                // Ask for the next batch before working on this one.
                self.request(ctx);
                let t0 = Instant::now();
                let device = self.device;
                let step = &mut self.step;
                let result = catch_unwind(AssertUnwindSafe(|| step.step(device, &d)));
                if let Some(c) = self.stats.device(self.device) {
                    c.busy_ns.fetch_add(ns(t0.elapsed()), Relaxed);
                    c.batches.fetch_add(1, Relaxed);
                    c.records.fetch_add(d.batch.len() as u64, Relaxed);
                }
                self.waiting_since = Instant::now();
                let message = match result {
                    Ok(Ok(())) => return,
                    Ok(Err(m)) => m,
                    Err(p) => crate::supervisor::panic_text(p),
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
                self.step.end_of_pass(self.device, p);
                self.waiting_since = Instant::now();
                self.request(ctx);
            }
            Ok(Popped::EndOfData) => {
                self.step.end_of_data(self.device);
                self.finish(ctx, None);
            }
            Err(e) => self.finish(ctx, Some(e)),
        }
    }
}

/// An item the trainer took from the lanes itself, handled after the step
/// that was running when it was taken.
#[derive(Message)]
#[rtype(result = "()")]
struct Take(Result<Popped, PipelineError>);

impl<S: TrainStep> Handler<Take> for Trainer<S> {
    type Result = ();

    fn handle(&mut self, msg: Take, ctx: &mut Context<Self>) {
        self.on_popped(msg.0, ctx);
    }
}

impl<S: TrainStep> Actor for Trainer<S> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.waiting_since = Instant::now();
        self.request(ctx);
    }
}
