//! Batch numbering and the end-of-pass drain.
//!
//! Making a batch is two steps with a value in between: the draw gives the
//! rows of a batch, numbered and laned as a [`BatchJob`] (its rows, pass,
//! number and lane, from [`BatchNumbering`]); the batch maker turns a job
//! into the batch that goes into the feed queue. Anything may sit between
//! the two (the drain below, the queue of orders), as long as the jobs are
//! handed over in their numbers' order.
//!
//! At the end of a pass the shuffle pool empties at once: all its remaining
//! batches are drawn and numbered together, but handed to the batch maker
//! only as it takes them ([`EndOfPassDrain`]), so their big buffers are
//! recycled and not all allocated at once. The pass's end marker queues
//! behind them.
//!
//! Generic over the row type, so it is tested without actors.

use feedline::feed_queue::Lanes;
use serde::{Deserialize, Serialize};

use crate::messages::{BatchJob, BatchPlace};

/// Numbers the batches of each pass and gives each its lane.
#[derive(Debug)]
pub(crate) struct BatchNumbering {
    lanes: Lanes,
    pass: u64,
    seq: u64,
}

impl BatchNumbering {
    /// Numbering from pass 0, with these lanes.
    pub fn new(lanes: Lanes) -> Self {
        BatchNumbering {
            lanes,
            pass: 0,
            seq: 0,
        }
    }

    /// The pass being numbered.
    pub fn pass(&self) -> u64 {
        self.pass
    }

    /// Batches numbered so far in this pass.
    pub fn batches(&self) -> u64 {
        self.seq
    }

    /// Number the next batch (nothing padded yet).
    pub fn next(&mut self) -> BatchPlace {
        let seq = self.seq;
        self.seq += 1;
        BatchPlace {
            lane: self.lanes.of_batch(seq),
            pass: self.pass,
            seq,
            padded: 0,
        }
    }

    /// A job of these rows, numbered next.
    pub fn job<R>(&mut self, rows: Vec<R>) -> BatchJob<R> {
        BatchJob {
            place: self.next(),
            rows,
        }
    }

    /// Number the next batch `seq` (a draw resumed mid-pass).
    pub fn resume_at(&mut self, seq: u64) {
        self.seq = seq;
    }

    /// Number the batches of `pass` from 0.
    pub fn start_pass(&mut self, pass: u64) {
        self.pass = pass;
        self.seq = 0;
    }
}

/// What the drain hands out next.
#[derive(Debug, PartialEq)]
pub(crate) enum Pending<R> {
    /// A job to hand over.
    Job(BatchJob<R>),
    /// The end of a pass.
    EndOfPass {
        /// The pass.
        pass: u64,
        /// Records taken into the pool in it.
        records: u64,
    },
}

/// The end-of-pass drain; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct EndOfPassDrain<R> {
    pending: std::collections::VecDeque<Pending<R>>,
    drawing: bool,
}

/// A pending item of the drain, as [`EndOfPassDrain::state`] describes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum PendingState<P> {
    /// A numbered batch: its place and its rows described.
    Job {
        /// Its lane.
        lane: usize,
        /// Its pass.
        pass: u64,
        /// Its number.
        seq: u64,
        /// Its rows.
        rows: Vec<P>,
    },
    /// The end of a pass.
    EndOfPass {
        /// Its pass.
        pass: u64,
        /// Records taken into the pool in it.
        records: u64,
    },
}

impl<R> EndOfPassDrain<R> {
    /// An empty drain.
    pub fn new() -> Self {
        EndOfPassDrain {
            pending: Default::default(),
            drawing: false,
        }
    }

    /// The pool is being drained (`true`): jobs made now wait here.
    pub fn set_drawing(&mut self, drawing: bool) {
        self.drawing = drawing;
    }

    /// True while the pool is being drained.
    pub fn is_drawing(&self) -> bool {
        self.drawing
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// A job of the drain: handed over later.
    pub fn defer(&mut self, job: BatchJob<R>) {
        self.pending.push_back(Pending::Job(job));
    }

    /// The end marker of `pass` (`records` taken into the pool in it):
    /// returned to hand over now when nothing waits, else queued behind the
    /// drain's jobs.
    pub fn end_of_pass(&mut self, pass: u64, records: u64) -> Option<Pending<R>> {
        let marker = Pending::EndOfPass { pass, records };
        if self.pending.is_empty() {
            return Some(marker);
        }
        self.pending.push_back(marker);
        None
    }

    /// The next item, in order.
    pub fn pop(&mut self) -> Option<Pending<R>> {
        self.pending.pop_front()
    }

    /// The state, each job's rows described by `describe`.
    pub fn state<P>(&self, describe: impl Fn(&R) -> P) -> Vec<PendingState<P>> {
        (self.pending.iter())
            .map(|p| match p {
                Pending::Job(j) => PendingState::Job {
                    lane: j.place.lane,
                    pass: j.place.pass,
                    seq: j.place.seq,
                    rows: j.rows.iter().map(&describe).collect(),
                },
                Pending::EndOfPass { pass, records } => PendingState::EndOfPass {
                    pass: *pass,
                    records: *records,
                },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use feedline::feed_queue::FeedMode;

    #[test]
    fn batches_are_numbered_per_pass_and_laned_by_the_feed_mode() {
        let mut n = BatchNumbering::new(FeedMode::RoundRobin.lanes(3));
        let first: Vec<_> = (0..4)
            .map(|_| n.next())
            .map(|p| (p.lane, p.pass, p.seq, p.padded))
            .collect();
        assert_eq!(
            first,
            [(0, 0, 0, 0), (1, 0, 1, 0), (2, 0, 2, 0), (0, 0, 3, 0)]
        );
        assert_eq!(n.batches(), 4);
        n.start_pass(1);
        assert_eq!(
            n.job(vec!['a']),
            BatchJob {
                place: BatchPlace {
                    lane: 0,
                    pass: 1,
                    seq: 0,
                    padded: 0
                },
                rows: vec!['a'],
            }
        );
        let mut shared = BatchNumbering::new(FeedMode::Shared.lanes(3));
        assert!((0..5).all(|_| shared.next().lane == 0));
    }

    #[test]
    fn markers_wait_behind_the_drains_jobs_in_order() {
        let mut n = BatchNumbering::new(FeedMode::RoundRobin.lanes(2));
        let mut d = EndOfPassDrain::new();
        assert_eq!(
            d.end_of_pass(0, 7),
            Some(Pending::EndOfPass {
                pass: 0,
                records: 7
            }),
            "nothing waits: hand it over now"
        );
        d.set_drawing(true);
        assert!(d.is_drawing());
        d.defer(n.job(vec![1, 2]));
        d.defer(n.job(vec![3]));
        d.set_drawing(false);
        assert_eq!(d.end_of_pass(0, 3), None);
        let st = d.state(|r| *r);
        assert_eq!(
            st,
            [
                PendingState::Job {
                    lane: 0,
                    pass: 0,
                    seq: 0,
                    rows: vec![1, 2]
                },
                PendingState::Job {
                    lane: 1,
                    pass: 0,
                    seq: 1,
                    rows: vec![3]
                },
                PendingState::EndOfPass {
                    pass: 0,
                    records: 3
                },
            ]
        );
        let json = serde_json::to_string(&st).unwrap();
        assert_eq!(
            serde_json::from_str::<Vec<PendingState<i32>>>(&json).unwrap(),
            st
        );
        assert!(matches!(d.pop(), Some(Pending::Job(j)) if j.place.seq == 0));
        assert!(matches!(d.pop(), Some(Pending::Job(j)) if j.place.seq == 1));
        assert!(matches!(
            d.pop(),
            Some(Pending::EndOfPass {
                pass: 0,
                records: 3
            })
        ));
        assert!(d.is_empty() && d.pop().is_none());
    }
}
