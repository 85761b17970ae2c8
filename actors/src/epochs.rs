//! Epochs over a loader's stream of passes: where the epochs stand
//! ([`Epochs`]) and the rules that move them — what a batch or the end of
//! a pass does to the open epoch, when an epoch whose last batch was
//! handed out is over, when `set_epoch` is free. `Loader::next_epoch`,
//! `Loader::set_epoch` and `Loader::len` are built on them, and so is
//! every other face's epoch-by-epoch iteration (the Python `Loader`'s
//! loops), which keeps an [`Epochs`] of its own across the pipelines it
//! starts.
//!
//! **An epoch** is one pass ([`Epochs::new`] with `per_pass`), or — a
//! face that runs `passes = N` in one loop — every pass of the run. Each
//! epoch begun gets a number (its generation), so that the iterators of an
//! epoch that is over, or given up, all see it end.
//!
//! **An epoch ends with its last batch.** Trainers take `len()` batches and
//! start the next epoch without pulling the end of the pass (Lightning's
//! fetcher does): before an epoch begins (and before a `set_epoch`) the open
//! one is *settled* ([`Epochs::settle`]): when what the pipeline has next is
//! the end of its pass, that end is taken there and then — the epoch is
//! over, and a checkpoint taken before or after says the same. A resumed
//! pass with nothing left is passed over the same way.
//!
//! **A restart** (a new pipeline at another pass, or from checkpoints) gives
//! up the open epoch — unless nothing was taken from it yet, when it is
//! kept: its iterators go on with the new pipeline's epoch
//! ([`Epochs::restarted`]).

use std::time::Duration;

use crate::error::PipelineError;
use crate::messages::Popped;
use crate::setting::{Setting, SettingError, Value};

/// The stream epochs are settled against: a loader's merged iteration
/// (the `Loader` implements it).
pub trait EventStream {
    /// The next item, left in place (the next take gives it), waiting at
    /// most `wait` (`None`: for ever; a time-out is
    /// [`PipelineError::Timeout`]).
    fn peek_event(&mut self, wait: Option<Duration>) -> Result<&Popped, PipelineError>;
    /// Take the item peeked (for checkpoints too).
    fn take_peeked(&mut self);
}

/// Where the epochs stand.
#[derive(Clone, Debug, Default)]
pub struct Epochs {
    /// Epochs begun so far; the one open (if any) is number `gen`.
    gen: u64,
    /// An epoch is in progress (begun, its end not reached).
    open: bool,
    /// The pass the pipeline delivers next (a batch of it, or its end).
    pass: u64,
    /// Batches taken in the open epoch.
    taken_in_epoch: u64,
    /// Batches taken from the running pipeline (since its last start).
    taken: u64,
    /// A resumed pipeline: its first pass, when nothing of it is left (the
    /// checkpoint was taken after its last batch), is passed over instead
    /// of making an empty epoch.
    skip_empty: bool,
    /// An epoch is one pass (else every pass of the run is one epoch).
    per_pass: bool,
}

/// What the end of a pass did to the open epoch ([`Epochs::took_pass_end`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PassEnd {
    /// The epoch is over.
    EpochOver,
    /// The epoch goes on: a pass's end within an epoch of every pass, or a
    /// resumed pass that had nothing left (the next pass is the epoch).
    Within,
}

/// What one step of settling came to ([`Epochs::settle`]).
#[derive(Debug)]
pub enum Settled {
    /// Nothing (more) to settle: an epoch may begin.
    Done,
    /// The pipeline has nothing yet within the time given: try again.
    Wait,
    /// The end of the data was taken: every pass was delivered.
    Exhausted,
}

impl Epochs {
    /// The epochs of a pipeline that delivers `first_pass` first;
    /// `resumed`: from a checkpoint (an empty first pass is passed over);
    /// `per_pass`: an epoch is one pass.
    pub fn new(first_pass: u64, resumed: bool, per_pass: bool) -> Self {
        Epochs {
            pass: first_pass,
            skip_empty: resumed && per_pass,
            per_pass,
            ..Epochs::default()
        }
    }

    /// The open epoch's number (the last begun).
    pub fn generation(&self) -> u64 {
        self.gen
    }

    /// Epoch `gen` is the open one.
    pub fn is_open(&self, gen: u64) -> bool {
        self.open && self.gen == gen
    }

    /// The pass the pipeline delivers next (a batch of it, or its end).
    pub fn pass(&self) -> u64 {
        self.pass
    }

    /// The pass whose batches `len()` counts: the one in progress or next,
    /// within the run's `passes`.
    pub fn pass_for_len(&self, passes: u64) -> u64 {
        self.pass.min(passes.saturating_sub(1))
    }

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

    /// A pipeline (re)started at `pass` (`resumed`: from checkpoints): the
    /// open epoch is given up — unless nothing was taken from it yet, when
    /// it is kept (its iterators go on with the new pipeline's epoch).
    pub fn restarted(&mut self, pass: u64, resumed: bool) {
        if !(self.open && self.taken_in_epoch == 0) {
            self.end();
        }
        self.pass = pass;
        self.taken = 0;
        self.skip_empty = resumed && self.per_pass;
    }

    /// A batch of `pass` was taken in the open epoch.
    pub fn took_batch(&mut self, pass: u64) {
        self.pass = pass;
        self.taken += 1;
        self.taken_in_epoch += 1;
        self.skip_empty = false;
    }

    /// The end of `pass` was taken in the open epoch.
    pub fn took_pass_end(&mut self, pass: u64) -> PassEnd {
        self.pass = pass + 1;
        if self.per_pass && !(self.skip_empty && self.taken_in_epoch == 0) {
            self.end();
            return PassEnd::EpochOver;
        }
        self.skip_empty = false;
        PassEnd::Within
    }

    /// Whether `set_epoch(pass)` fits a loader of `passes` passes
    /// ([`ENDLESS`](crate::ENDLESS): every pass does): the one judgement of
    /// every face's `set_epoch`, its refusal naming the passes setting as
    /// the face spells it.
    ///
    /// ```
    /// use feedline_actors::epochs::Epochs;
    /// assert!(Epochs::check_set_epoch(1, 2).is_ok());
    /// let e = Epochs::check_set_epoch(2, 2).unwrap_err();
    /// assert_eq!(e.to_string(), "set_epoch(2): this loader runs 2 passes (passes(2)): epochs 0..1");
    /// ```
    pub fn check_set_epoch(pass: u64, passes: u64) -> Result<(), SettingError> {
        if passes == crate::ENDLESS || pass < passes {
            return Ok(());
        }
        Err(SettingError::says(format!(
            "set_epoch({pass}): this loader runs {passes} passes ("
        ))
        .with(Setting::Passes, Value::number(passes))
        .text(format!("): epochs 0..{}", passes.saturating_sub(1))))
    }

    /// `set_epoch(pass)` needs no restart: `pass` is the one the next epoch
    /// runs anyway and nothing was taken from it (call after
    /// [`settle`](Self::settle)).
    pub fn set_is_free(&self, pass: u64) -> bool {
        self.pass == pass && self.taken_in_epoch == 0 && (self.per_pass || self.taken == 0)
    }

    /// One step of settling before an epoch begins (or a `set_epoch`),
    /// waiting at most `wait` (`None`: for ever) for what `loader` has
    /// next: an open epoch that has taken batches is over when that is the
    /// end of its pass (the end is taken, for checkpoints too); a resumed
    /// pass with nothing left is passed over. Call again while it gives
    /// [`Settled::Wait`].
    pub fn settle(
        &mut self,
        loader: &mut impl EventStream,
        wait: Option<Duration>,
    ) -> Result<Settled, PipelineError> {
        loop {
            let finished_maybe = self.open && self.taken_in_epoch > 0;
            let empty_resumed = self.per_pass && self.skip_empty && self.taken_in_epoch == 0;
            if !(finished_maybe || empty_resumed) {
                return Ok(Settled::Done);
            }
            let next = match loader.peek_event(wait) {
                Ok(Popped::Batch(_)) => return Ok(Settled::Done),
                Ok(Popped::EndOfPass(p)) => Popped::EndOfPass(*p),
                Ok(Popped::EndOfData) => Popped::EndOfData,
                Err(PipelineError::Timeout { .. }) => return Ok(Settled::Wait),
                Err(e) => return Err(e),
            };
            // Take the end (tracked: a checkpoint now counts the pass done).
            loader.take_peeked();
            match next {
                Popped::EndOfPass(p) => {
                    self.pass = p + 1;
                    if empty_resumed {
                        // The resumed pass had nothing left: the epoch
                        // begun (if any) is the next pass's.
                        self.skip_empty = false;
                        return Ok(Settled::Done);
                    }
                    if self.per_pass {
                        self.end();
                        return Ok(Settled::Done);
                    }
                    // Every pass is one epoch: a pass's end within it; look on.
                }
                _ => {
                    self.end();
                    return Ok(Settled::Exhausted);
                }
            }
        }
    }
}
