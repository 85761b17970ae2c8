//! The Python `Loader`'s state beside its Rust pipeline: its epochs, why
//! it closed, and the process that made it.
//!
//! **Epochs.** With `passes=None` one Rust pipeline runs pass after pass
//! (prefetching across the end of a pass, as within one), and each loop —
//! each `iter(loader)` — yields one pass; with `passes=N` one loop yields
//! all N passes. Every loop gets an [`EpochIter`](crate::PyEpoch) bound to
//! the epoch it began or joined (by number): when that epoch ends (or is
//! given up by `set_epoch`/`load_state_dict`), every iterator of it stops,
//! in any thread, while a new `iter()` begins the next. The rules — an
//! epoch ends with its last batch, a loop left early is gone on with, an
//! untouched epoch is kept through a restart, when `set_epoch` is free —
//! are the Rust loader's ([`feedline_actors::epochs`]); the slot keeps one
//! [`Epochs`] across the pipelines the loader starts.
//!
//! **Closed.** Every way a loader ends is kept with its reason
//! ([`Closed`]), and iterating it afterwards raises `FeedlineError` saying
//! it. A loader closed by its end, an error or Ctrl-C keeps its stopped
//! pipeline, so `state_dict()` still says where it stood.
//!
//! **Fork.** A loader belongs to the process that made it: a child made by
//! `fork()` has copies of its memory but none of its threads. Every use in
//! another process raises at once, and the child never joins, frees or
//! stops the parent's pipeline (its threads do not exist there).

use std::time::Duration;

use feedline_actors::epochs::{Epochs, Settled as RustSettled};
use feedline_actors::{Loader as RustLoader, PipelineError};

/// Why a loader is closed.
#[derive(Clone, Debug)]
pub enum Closed {
    /// `close()`, leaving `with`, or the interpreter's exit.
    ByUser,
    /// Every pass was delivered (`passes=N`).
    Exhausted {
        /// The passes run.
        passes: u64,
    },
    /// The pipeline failed.
    Failed(String),
    /// Ctrl-C (KeyboardInterrupt) while waiting for a batch, or ending a loop over it.
    Interrupted,
}

impl Closed {
    /// The `FeedlineError` message for a use of the closed loader.
    pub fn message(&self) -> String {
        match self {
            Closed::ByUser => "this loader is closed (by close(), the end of its `with` block or the interpreter's exit): make a new Loader to read again".into(),
            Closed::Exhausted { passes } => format!(
                "this loader is closed: all {passes} {} delivered (passes={passes}); \
                 with passes=None (the default) each loop runs the next epoch",
                if *passes == 1 { "pass" } else { "passes" }
            ),
            Closed::Failed(e) => format!("this loader is closed: it failed: {e}"),
            Closed::Interrupted => {
                "this loader is closed: it was interrupted (KeyboardInterrupt); \
                 its state_dict() says where it stood"
                    .into()
            }
        }
    }
}

/// The pipeline and the epochs, behind the loader's mutex.
pub struct Slot {
    /// The running pipeline; `None` once closed (or while it restarts).
    pub loader: Option<RustLoader>,
    /// A pipeline stopped by its end, an error or an interrupt (not by
    /// `close()`): kept for `state_dict()`.
    pub stopped: Option<RustLoader>,
    /// Why it is closed.
    pub closed: Option<Closed>,
    /// The epochs.
    pub epochs: Epochs,
    /// The passes the loader runs (`passes=N`; endless: `ENDLESS`).
    pub passes: u64,
}

/// What one slice of settling the open epoch came to.
#[derive(Debug)]
pub enum Settled {
    /// Nothing (more) to settle.
    Done,
    /// The pipeline has nothing yet within the slice (or is being started
    /// again): try again.
    Wait,
    /// Every pass was delivered: the loader is closed now (see
    /// [`Slot::exhausted`]).
    Exhausted,
    /// The pipeline failed.
    Failed(PipelineError),
}

impl Slot {
    /// The end of the data was taken (every one of `passes` delivered): the
    /// epoch ends, the loader is closed, its stopped pipeline kept for
    /// `state_dict()`.
    pub fn exhausted(&mut self, passes: u64) {
        self.epochs.end();
        self.closed = Some(Closed::Exhausted { passes });
        if let Some(mut l) = self.loader.take() {
            l.shutdown();
            self.stopped = Some(l);
        }
    }

    /// One slice of settling the epochs before an `iter()` or a
    /// `set_epoch` ([`Epochs::settle`]), waiting at most `slice`.
    pub fn settle_slice(&mut self, slice: Duration) -> Settled {
        if self.closed.is_some() {
            return Settled::Done;
        }
        let Some(loader) = self.loader.as_mut() else {
            return Settled::Wait; // being started again
        };
        match self.epochs.settle(loader, Some(slice)) {
            Ok(RustSettled::Done) => Settled::Done,
            Ok(RustSettled::Wait) => Settled::Wait,
            Ok(RustSettled::Exhausted) => {
                self.exhausted(self.passes);
                Settled::Exhausted
            }
            Err(e) => Settled::Failed(e),
        }
    }
}

/// Forget (never drop: no join, no free of the parent's threads) what a
/// forked child holds of its parent's pipeline.
pub fn forget_in_child(slot: &mut Slot) {
    if let Some(l) = slot.loader.take() {
        std::mem::forget(l);
    }
    if let Some(l) = slot.stopped.take() {
        std::mem::forget(l);
    }
}

/// The message of a use of a loader in a process other than its maker's.
pub fn foreign_message(made_in: u32) -> String {
    format!(
        "this loader was created in another process; create it after fork (it was made in \
         process {made_in}, and this is process {}: a forked child has a copy of the loader but \
         none of its threads — with multiprocessing or torch DataLoader workers, make the loader \
         in the worker, e.g. feedline.torch.IterableDataset)",
        std::process::id()
    )
}
