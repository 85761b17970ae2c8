//! Supervision of every actor's handlers: the one mechanism that turns a
//! panic — in an actor's own code or in user code it calls (a
//! `BatchPolicy` cost function, a `TrainStep` and its hooks, a generator, a
//! format) — into the pipeline's failure, which every consumer sees.
//!
//! Each actor holds a [`StageGuard`] (made by the wiring site: its stage's
//! name, the feed queue, the supervisor's `PipelineFailed` recipient) and
//! runs every handler, its `started` and every continuation of a future it
//! waits on through [`guarded`]. A caught panic becomes
//! [`PipelineError::Panicked`] naming the stage and what it was handling;
//! the guard fails the feed queue itself — so consumers are answered even
//! when the supervisor is the stage that panicked — and tells the
//! supervisor, which stops the producers and resolves `finished()`. The
//! actor then stops ([`Supervised::panicked`]): its state may be half-changed.
//!
//! [`FaultPlan`] injects panics at named points of this mechanism (a stage
//! and what it handles), for tests of the failure paths; it is empty
//! unless a test sets one.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use actix::prelude::*;
use parking_lot::Mutex;

use crate::error::PipelineError;
use crate::messages::{BatchQueue, PipelineFailed};
use crate::panic::panic_text;

/// One stage's supervision: its name, and where its failure goes.
#[derive(Clone)]
pub(crate) struct StageGuard {
    stage: String,
    queue: BatchQueue,
    /// The supervisor (`None` for the supervisor itself).
    report: Option<Recipient<PipelineFailed>>,
    faults: FaultPlan,
}

impl StageGuard {
    /// The guard of `stage`, failing `queue` and telling `report`.
    pub fn new(
        stage: impl Into<String>,
        queue: BatchQueue,
        report: Option<Recipient<PipelineFailed>>,
        faults: FaultPlan,
    ) -> Self {
        StageGuard {
            stage: stage.into(),
            queue,
            report,
            faults,
        }
    }

    /// The same links for another stage.
    pub fn named(&self, stage: impl Into<String>) -> Self {
        StageGuard {
            stage: stage.into(),
            ..self.clone()
        }
    }

    /// The pipeline cannot go on: every consumer gets `e` now (the first
    /// failure wins), and the supervisor hears it.
    pub fn fail(&self, e: PipelineError) {
        self.queue.fail(e.clone());
        if let Some(r) = &self.report {
            r.do_send(PipelineFailed(e));
        }
    }

    /// Run `work` with `handling` as its name: an injected fault first, if
    /// one is due there. A panic becomes the error that names both.
    fn run<R>(&self, handling: &str, work: impl FnOnce() -> R) -> Result<R, PipelineError> {
        catch_unwind(AssertUnwindSafe(|| {
            self.faults.hit(&self.stage, handling);
            work()
        }))
        .map_err(|p| PipelineError::Panicked {
            stage: self.stage.as_str().into(),
            handling: handling.into(),
            message: panic_text(p).into(),
        })
    }
}

/// An actor whose handlers run through [`guarded`].
pub(crate) trait Supervised: Actor<Context = Context<Self>> {
    /// The actor's guard.
    fn guard(&self) -> &StageGuard;

    /// After a panic became the pipeline's failure `e`: stop (the default;
    /// the state may be half-changed), after whatever the actor must still
    /// do so that nobody waits on it.
    fn panicked(&mut self, ctx: &mut Context<Self>, e: &PipelineError) {
        let _ = e;
        ctx.stop();
    }
}

/// Run a handler's `work` (`handling`: the message or event, for the
/// error); a panic in it fails the pipeline and stops the actor (`None`).
pub(crate) fn guarded<A: Supervised, R>(
    act: &mut A,
    ctx: &mut Context<A>,
    handling: &str,
    work: impl FnOnce(&mut A, &mut Context<A>) -> R,
) -> Option<R> {
    let guard = act.guard().clone();
    match guard.run(handling, || work(act, ctx)) {
        Ok(r) => Some(r),
        Err(e) => {
            // Every consumer and `finished()` get `e`: the caller reports it, once.
            log::debug!("{e}");
            guard.fail(e.clone());
            if catch_unwind(AssertUnwindSafe(|| act.panicked(ctx, &e))).is_err() {
                ctx.stop();
            }
            None
        }
    }
}

/// Panics to inject at named points of the supervision (tests only): a
/// stage (`"shuffle stage"`, `"reader 1"`, or a prefix such as `"reader"`)
/// and what it handles (a prefix of the name its guard gives, e.g.
/// `"ChunkMsg"`, `"step"`, `"end of pass"`), after that point was passed
/// `after` times. Each point fires once. Cheap to clone (shared).
#[doc(hidden)]
#[derive(Clone, Default)]
pub struct FaultPlan(Arc<Mutex<Vec<FaultPoint>>>);

struct FaultPoint {
    stage: String,
    handling: String,
    after: u64,
    fired: Option<String>,
}

impl fmt::Debug for FaultPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let points = self.0.lock();
        f.debug_list()
            .entries(points.iter().map(|p| (&p.stage, &p.handling, p.after)))
            .finish()
    }
}

impl FaultPlan {
    /// No faults.
    pub fn new() -> Self {
        FaultPlan::default()
    }

    /// Panic in `stage` handling `handling`, the `after + 1`-th time it gets there.
    pub fn panic_at(self, stage: &str, handling: &str, after: u64) -> Self {
        self.0.lock().push(FaultPoint {
            stage: stage.into(),
            handling: handling.into(),
            after,
            fired: None,
        });
        self
    }

    /// The panic messages of the faults that fired.
    pub fn fired(&self) -> Vec<String> {
        self.0
            .lock()
            .iter()
            .filter_map(|p| p.fired.clone())
            .collect()
    }

    /// True if no fault is planned.
    pub fn is_empty(&self) -> bool {
        self.0.lock().is_empty()
    }

    /// Panic if a fault is due at this point.
    pub(crate) fn hit(&self, stage: &str, handling: &str) {
        let message = {
            let mut points = self.0.lock();
            let Some(p) = points.iter_mut().find(|p| {
                p.fired.is_none()
                    && stage.starts_with(&p.stage)
                    && handling.starts_with(&p.handling)
            }) else {
                return;
            };
            if p.after > 0 {
                p.after -= 1;
                return;
            }
            let m = format!("injected fault in {stage} handling {handling}");
            p.fired = Some(m.clone());
            m
        };
        panic!("{message}");
    }
}
