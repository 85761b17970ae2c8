//! The feed queue's actor: the face of the core's feed queue
//! ([`feedline::feed_queue`]) for actix code. Batches do not pass through
//! it — the shuffle stage pushes into the queue's lanes and the trainers
//! and the `Loader`'s iterators take from them directly; this actor answers
//! [`Pop`] from actors of your own: now if there is something to give, else
//! parked in the lanes and answered by the push that brings an item. When it
//! stops, the lanes fail with `Stopped`, so nobody waits forever.
//!
//! With `account` (consumers that only pop with `Pop`, one at a time) it
//! runs each consumer's [`DeviceClock`]: waiting from a `Pop` to its answer,
//! busy from an answer to the next `Pop`.

use actix::dev::{MessageResponse, OneshotSender};
use actix::prelude::*;
use feedline::feed_queue::{Answer, Reply};

use crate::error::PipelineError;
use crate::guard::{guarded, StageGuard, Supervised};
use crate::messages::{BatchQueue, Delivered, Pop, Popped, Shutdown};
use crate::progress::SharedProgress;
use crate::recorder::DeviceClock;

/// The feed queue actor.
pub(crate) struct FeedQueueActor {
    queue: BatchQueue,
    /// Per consumer, when the queue runs their clocks.
    clocks: Option<Vec<DeviceClock>>,
    /// What the consumers took, for [`Pipeline::checkpoint`](crate::Pipeline::checkpoint).
    progress: Option<SharedProgress>,
    guard: StageGuard,
}

impl FeedQueueActor {
    /// Start the actor over `queue`; with `clocks`, it runs consumer `c`'s
    /// `clocks[c]` for its `Pop`s. Its mailbox is made large: control
    /// messages and pops must never be held back; the real bound is the
    /// queue's capacity.
    pub(crate) fn start(
        queue: BatchQueue,
        clocks: Option<Vec<DeviceClock>>,
        progress: Option<SharedProgress>,
        guard: StageGuard,
    ) -> Addr<Self> {
        FeedQueueActor::create(move |ctx| {
            ctx.set_mailbox_capacity(4096);
            FeedQueueActor {
                queue,
                clocks,
                progress,
                guard,
            }
        })
    }
}

/// The answer to a [`Pop`]: an item now, or later once one is there. The
/// item is taken only when actix hands over the request's reply sender, so
/// a `Pop` sent with `do_send` (nobody to answer) takes nothing.
pub(crate) struct PopReply {
    queue: BatchQueue,
    consumer: usize,
    clock: Option<DeviceClock>,
    progress: Option<SharedProgress>,
}

/// A parked `Pop`'s reply: actix's sender, the consumer's clock, and what
/// the consumers took (a batch or an end of pass counts once handed over).
struct ActixReply {
    tx: OneshotSender<Result<Popped, PipelineError>>,
    clock: Option<DeviceClock>,
    progress: Option<SharedProgress>,
}

impl Reply<Delivered, PipelineError> for ActixReply {
    fn send(
        self: Box<Self>,
        answer: Answer<Delivered, PipelineError>,
    ) -> Result<(), Answer<Delivered, PipelineError>> {
        let records = match &answer {
            Ok(Popped::Batch(d)) => Some(d.batch.len()),
            _ => None,
        };
        let taken = match (&self.progress, &answer) {
            (Some(_), Ok(Popped::Batch(d))) => Some(Ok(d.clone())),
            (Some(_), Ok(Popped::EndOfPass(p))) => Some(Err(*p)),
            _ => None,
        };
        // Counted under the lock held across the send: a checkpoint the
        // consumer asks for once it has the item covers it.
        let mut progress = self.progress.as_ref().map(|p| p.lock());
        self.tx.send(answer)?;
        if let (Some(progress), Some(taken)) = (&mut progress, taken) {
            match taken {
                Ok(d) => progress.take(&d),
                Err(pass) => progress.pass_ended(pass),
            }
        }
        drop(progress);
        if let Some(clock) = &self.clock {
            clock.item_arrives(records);
        }
        Ok(())
    }
}

impl MessageResponse<FeedQueueActor, Pop> for PopReply {
    fn handle(
        self,
        _: &mut Context<FeedQueueActor>,
        tx: Option<OneshotSender<Result<Popped, PipelineError>>>,
    ) {
        let Some(tx) = tx else { return };
        if let Some(clock) = &self.clock {
            clock.wait_begins();
        }
        let reply = ActixReply {
            tx,
            clock: self.clock,
            progress: self.progress,
        };
        self.queue.pop_or_park(self.consumer, Box::new(reply));
    }
}

impl Drop for FeedQueueActor {
    /// The actor is gone (its system stopped): nobody waits forever on its lanes.
    fn drop(&mut self) {
        self.queue.fail(PipelineError::Stopped);
    }
}

impl Actor for FeedQueueActor {
    type Context = Context<Self>;

    fn stopping(&mut self, _: &mut Self::Context) -> Running {
        self.queue.fail(PipelineError::Stopped);
        Running::Stop
    }
}

impl Handler<Pop> for FeedQueueActor {
    type Result = PopReply;

    fn handle(&mut self, msg: Pop, ctx: &mut Context<Self>) -> PopReply {
        let reply = guarded(self, ctx, "Pop", |me, _| PopReply {
            queue: me.queue.clone(),
            consumer: msg.consumer,
            clock: (me.clocks.as_ref()).and_then(|c| c.get(msg.consumer).cloned()),
            progress: me.progress.clone(),
        });
        // After a panic the queue has failed: the pop is answered with that.
        reply.unwrap_or_else(|| PopReply {
            queue: self.queue.clone(),
            consumer: msg.consumer,
            clock: None,
            progress: None,
        })
    }
}

impl Handler<Shutdown> for FeedQueueActor {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        guarded(self, ctx, "Shutdown", |_, ctx| ctx.stop());
    }
}

impl Supervised for FeedQueueActor {
    fn guard(&self) -> &StageGuard {
        &self.guard
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use feedline::feed_queue::{FeedMode, Item, Pushed};

    use crate::messages::QueueItem;
    use crate::recorder::Recorders;

    fn batch(pass: u64, seq: u64) -> QueueItem {
        let schema = feedline::synthetic::preset_schema(feedline::synthetic::Preset::Small);
        let b = feedline::collate_rows(&schema, &[]).expect("an empty batch");
        Item::Batch(Delivered {
            pass,
            seq,
            batch: Arc::new(b),
        })
    }

    fn seq(r: Option<Answer<Delivered, PipelineError>>) -> u64 {
        match r {
            Some(Ok(Popped::Batch(d))) => d.seq,
            other => panic!("expected a batch, got {other:?}"),
        }
    }

    fn soon() -> Option<Instant> {
        Some(Instant::now() + Duration::from_secs(1))
    }

    #[test]
    fn an_actix_pop_is_answered_by_a_push_and_a_gone_one_loses_nothing() {
        let recorders = Recorders::new(1, 1, Arc::default());
        let stats = recorders.stats();
        System::new().block_on(async move {
            let q = BatchQueue::new(FeedMode::Shared.lanes(1), 2).unwrap();
            let guard = StageGuard::new("feed queue", q.clone(), None, Default::default());
            let addr =
                FeedQueueActor::start(q.clone(), Some(vec![recorders.device(0)]), None, guard);
            // A pop parked on the empty lane whose requester goes away.
            let req = Box::pin(addr.send(Pop { consumer: 0 }));
            let delay = futures_timer::Delay::new(Duration::from_millis(30));
            match futures::future::select(req, delay).await {
                futures::future::Either::Left(_) => panic!("nothing to pop yet"),
                futures::future::Either::Right((_, req)) => drop(req),
            }
            let mut out = VecDeque::from([(0, batch(0, 5))]);
            assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
            assert_eq!(seq(q.pop(0, soon())), 5);
            // A live one is answered by the next push, and its clock counts the batch.
            let req = Box::pin(addr.send(Pop { consumer: 0 }));
            let delay = futures_timer::Delay::new(Duration::from_millis(30));
            let req = match futures::future::select(req, delay).await {
                futures::future::Either::Left(_) => panic!("nothing to pop yet"),
                futures::future::Either::Right((_, req)) => req,
            };
            let mut out = VecDeque::from([(0, batch(0, 6))]);
            assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
            assert_eq!(seq(Some(req.await.expect("answered"))), 6);
            assert_eq!(stats.snapshot().devices[0].batches, 1);
            // One sent with do_send takes nothing.
            addr.do_send(Pop { consumer: 0 });
            let mut out = VecDeque::from([(0, batch(0, 7))]);
            assert!(matches!(q.push(&mut out), Ok(Pushed::All)));
            futures_timer::Delay::new(Duration::from_millis(20)).await;
            assert_eq!(seq(q.pop(0, soon())), 7);
            // When the actor stops, the lanes fail: nobody waits forever.
            addr.send(Shutdown).await.expect("handled");
            let t0 = Instant::now();
            while q.failure().is_none() {
                assert!(
                    t0.elapsed() < Duration::from_secs(5),
                    "the lanes never failed"
                );
                futures_timer::Delay::new(Duration::from_millis(1)).await;
            }
            assert!(matches!(q.pop(0, None), Some(Err(PipelineError::Stopped))));
        });
    }
}
