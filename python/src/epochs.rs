//! The Python `Loader`'s state beside its Rust pipeline: epochs by
//! iteration, why it closed, and the process that made it.
//!
//! **Epochs.** With `passes=None` one Rust pipeline runs pass after pass
//! (prefetching across the end of a pass, as within one), and each loop —
//! each `iter(loader)` — yields one pass, up to the pipeline's end-of-pass
//! marker; the next loop yields the next pass. With `passes=N` one loop
//! yields all N passes. Every loop gets an [`EpochIter`](crate::PyEpoch)
//! bound to the epoch it began or joined (by number, `gen`): when that epoch
//! ends (or is given up by `set_epoch`/`load_state_dict`), every iterator of
//! it stops, in any thread, while a new `iter()` begins the next. A loop
//! left early (`break`) leaves its epoch open: the next loop goes on with
//! it, nothing skipped.
//!
//! **An epoch ends with its last batch.** Trainers take `len()` batches and
//! call `iter()` again without pulling the end of the pass (Lightning's
//! fetcher does). So before an `iter()` (and a `set_epoch`) the open epoch
//! is *settled* ([`Slot::settle_slice`]): when what the pipeline has next is
//! the end of its pass, that end is taken there and then — the epoch is over,
//! the `iter()` begins the next one, and a `state_dict()` taken before or
//! after says the same. A resumed pass with nothing left is passed over the
//! same way. An epoch begun but not taken from is kept through a restart
//! (`set_epoch`, `load_state_dict`): its iterator yields the new pipeline's
//! epoch, whatever the order of the calls.
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

use feedline_actors::{Loader as RustLoader, PipelineError, Popped};

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

/// Where the epochs stand.
#[derive(Clone, Debug, Default)]
pub struct Epochs {
    /// Epochs begun so far; the one open (if any) is number `gen`.
    pub gen: u64,
    /// An epoch is in progress (begun, its end not reached).
    pub open: bool,
    /// The pass the pipeline delivers next (a batch of it, or its end).
    pub pass: u64,
    /// Batches taken in the open epoch.
    pub taken_in_epoch: u64,
    /// Batches taken from the running pipeline (since its last start).
    pub taken: u64,
    /// A resumed pipeline: its first pass, when nothing of it is left (the
    /// checkpoint was taken after its last batch), is passed over instead
    /// of making an empty epoch.
    pub skip_empty: bool,
}

impl Epochs {
    /// Begin the next epoch (or join the open one): its number.
    pub fn begin(&mut self) -> u64 {
        if !self.open {
            self.gen += 1;
            self.open = true;
            self.taken_in_epoch = 0;
        }
        self.gen
    }

    /// End the open epoch (its iterators stop).
    pub fn end(&mut self) {
        self.open = false;
        self.taken_in_epoch = 0;
    }

    /// A pipeline (re)started at `pass`: the open epoch is given up — unless
    /// nothing was taken from it yet, when it is kept (its iterators go on
    /// with the new pipeline's epoch).
    pub fn restarted(&mut self, pass: u64, resumed: bool) {
        if !(self.open && self.taken_in_epoch == 0) {
            self.end();
        }
        self.pass = pass;
        self.taken = 0;
        self.skip_empty = resumed;
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

    /// One step of settling the epochs before an `iter()` or a `set_epoch`
    /// (see the module's doc), waiting at most `slice` for what comes next:
    /// an open epoch that has taken batches is over when the pipeline's
    /// next item is the end of its pass (that end is taken, for checkpoints
    /// too); a resumed pass with nothing left is passed over. `endless`:
    /// an epoch is one pass (`passes=None`); else one epoch is every pass,
    /// over at the end of the data.
    pub fn settle_slice(&mut self, endless: bool, slice: Duration) -> Settled {
        loop {
            if self.closed.is_some() {
                return Settled::Done;
            }
            let ep = &self.epochs;
            let finished_maybe = ep.open && ep.taken_in_epoch > 0;
            let empty_resumed = endless && ep.skip_empty && ep.taken_in_epoch == 0;
            if !(finished_maybe || empty_resumed) {
                return Settled::Done;
            }
            let Some(loader) = self.loader.as_mut() else {
                return Settled::Wait; // being started again
            };
            let next = match loader.peek_event_timeout(Some(slice)) {
                Ok(Popped::Batch(_)) => return Settled::Done,
                Ok(Popped::EndOfPass(p)) => Popped::EndOfPass(*p),
                Ok(Popped::EndOfData) => Popped::EndOfData,
                Err(PipelineError::Timeout { .. }) => return Settled::Wait,
                Err(e) => return Settled::Failed(e),
            };
            // Take the end (tracked: a checkpoint now counts the pass done).
            let _ = loader.next_event_timeout(Some(Duration::ZERO));
            let ep = &mut self.epochs;
            match next {
                Popped::EndOfPass(p) => {
                    ep.pass = p + 1;
                    if empty_resumed {
                        // The resumed pass had nothing left: the epoch
                        // begun (if any) is the next pass's.
                        ep.skip_empty = false;
                        return Settled::Done;
                    }
                    if endless {
                        ep.end();
                        return Settled::Done;
                    }
                    // passes=N: a pass's end within the one epoch; look on.
                }
                _ => {
                    self.exhausted(self.passes);
                    return Settled::Exhausted;
                }
            }
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
