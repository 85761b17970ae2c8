//! The weighted mix of file sets: while several sets have data in a pass,
//! the shuffle stage takes instances from them in proportion to their
//! weights. A set is *served* `taken / weight`; a chunk of a set is taken
//! only while no set still being read is less served. Otherwise it waits,
//! its acknowledgement withheld, so the readers of a set that runs ahead
//! pause. Once a set's part of the pass is read (drained), it no longer
//! holds the others back.
//!
//! In deterministic mode the same rule picks, from each set's plan order,
//! which set's next chunk comes next ([`FileSetMix::next_in_order`]) — a mix
//! that depends on the data only, not on timing; the reorder window then
//! holds chunks until their turn.
//!
//! Generic over the chunk `T` and its acknowledgement `A`, so it is tested
//! without actors.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// The mix; see the [module docs](self).
pub(crate) struct FileSetMix<T, A> {
    names: Vec<String>,
    weights: Vec<f64>,
    /// Instances taken this pass, per set.
    taken: Vec<u64>,
    /// The set's part of the pass is read (not deterministic mode).
    drained: Vec<bool>,
    /// Files per set this pass (deterministic mode).
    files: Vec<usize>,
    /// Per set: chunks waiting for their set's turn, with their records and
    /// acknowledgements, withheld while the set is ahead (not deterministic mode).
    waiting: Vec<VecDeque<(T, u64, Option<A>)>>,
}

/// The mix's state as a plain value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct MixState<P> {
    /// Per set: its name.
    pub names: Vec<String>,
    /// Per set: its weight.
    pub weights: Vec<f64>,
    /// Per set: instances taken this pass.
    pub taken: Vec<u64>,
    /// Per set: its part of the pass is read.
    pub drained: Vec<bool>,
    /// Per set: its files this pass (deterministic mode).
    pub files: Vec<usize>,
    /// Per set: the chunks waiting, as the caller describes them, and
    /// whether each one's acknowledgement is withheld.
    pub waiting: Vec<Vec<(P, bool)>>,
}

impl<T, A> FileSetMix<T, A> {
    /// A mix of sets with these names and weights (each > 0).
    pub fn new(names: Vec<String>, weights: Vec<f64>) -> Self {
        let n = weights.len();
        FileSetMix {
            names,
            weights,
            taken: vec![0; n],
            drained: vec![false; n],
            files: vec![0; n],
            waiting: (0..n).map(|_| VecDeque::new()).collect(),
        }
    }

    /// How many sets.
    pub fn sets(&self) -> usize {
        self.weights.len()
    }

    fn served(&self, set: usize) -> f64 {
        self.taken[set] as f64 / self.weights[set]
    }

    /// Of the sets for which `active` holds, the least served (the first on ties).
    fn least_served(&self, active: impl Fn(usize) -> bool) -> Option<usize> {
        (0..self.sets())
            .filter(|&s| active(s))
            .min_by(|&a, &b| self.served(a).total_cmp(&self.served(b)))
    }

    /// `records` instances of `set` were taken.
    pub fn taken(&mut self, set: usize, records: u64) {
        if let Some(t) = self.taken.get_mut(set) {
            *t += records;
        }
    }

    /// The files of each set this pass (deterministic mode); false (and
    /// nothing changes) if the number of sets differs.
    pub fn set_files(&mut self, files: Vec<usize>) -> bool {
        if files.len() != self.sets() {
            return false;
        }
        self.files = files;
        true
    }

    /// `set`'s part of the pass is read: it no longer holds the others
    /// back; false for an unknown set.
    pub fn set_drained(&mut self, set: usize) -> bool {
        match self.drained.get_mut(set) {
            Some(d) => {
                *d = true;
                true
            }
            None => false,
        }
    }

    /// Deterministic mode: the set whose next chunk comes next — the least
    /// served of those with files left, `files_begun(s)` being the files of
    /// set `s` whose chunks were all taken.
    pub fn next_in_order(&self, files_begun: impl Fn(usize) -> usize) -> Option<usize> {
        self.least_served(|s| files_begun(s) < self.files[s])
    }

    /// True when a chunk of `set` may be taken now: no set still being read
    /// is less served.
    fn turn_of(&self, set: usize) -> bool {
        self.least_served(|s| !self.drained[s])
            .is_some_and(|least| self.served(set) <= self.served(least))
    }

    /// Not deterministic: a chunk of `set` with `records` instances comes
    /// and waits to be taken ([`take_ready`](Self::take_ready)). Its
    /// acknowledgement is returned, to send now, when it is its set's turn;
    /// while the set is ahead of its share it is withheld (so the set's
    /// readers pause) and comes back with the chunk.
    pub fn offer(&mut self, set: usize, item: T, records: u64, ack: A) -> Option<A> {
        let (withheld, now) = if self.turn_of(set) {
            (None, Some(ack))
        } else {
            (Some(ack), None)
        };
        self.waiting[set].push_back((item, records, withheld));
        now
    }

    /// Not deterministic: a waiting chunk that may be taken now — its set
    /// has one, and no set still being read is less served — counted as
    /// taken, with its acknowledgement if that was withheld (send it).
    pub fn take_ready(&mut self) -> Option<(usize, T, Option<A>)> {
        let set = (0..self.sets()).find(|&s| !self.waiting[s].is_empty() && self.turn_of(s))?;
        let (item, records, ack) = self.waiting[set].pop_front().expect("found one");
        self.taken[set] += records;
        Some((set, item, ack))
    }

    /// The end of a pass: every chunk still waiting (counted as taken), with
    /// its withheld acknowledgement.
    pub fn end_pass(&mut self) -> Vec<(usize, T, Option<A>)> {
        let mut left = Vec::new();
        for set in 0..self.sets() {
            while let Some((item, records, ack)) = self.waiting[set].pop_front() {
                self.taken[set] += records;
                left.push((set, item, ack));
            }
        }
        left
    }

    /// A new pass: nothing taken, no set read.
    pub fn start_pass(&mut self) {
        self.taken.iter_mut().for_each(|t| *t = 0);
        self.drained.iter_mut().for_each(|d| *d = false);
    }

    /// What each set gave so far, for the log.
    pub fn summary(&self) -> String {
        let total: u64 = self.taken.iter().sum::<u64>().max(1);
        (self.names.iter().zip(&self.taken))
            .map(|(n, t)| format!("{n} {t} ({:.1}%)", 100.0 * *t as f64 / total as f64))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Drop every waiting chunk and its acknowledgement (shutdown).
    pub fn clear(&mut self) {
        self.waiting.iter_mut().for_each(VecDeque::clear);
    }

    /// The state, each waiting chunk described by `describe`.
    pub fn state<P>(&self, describe: impl Fn(&T) -> P) -> MixState<P> {
        MixState {
            names: self.names.clone(),
            weights: self.weights.clone(),
            taken: self.taken.clone(),
            drained: self.drained.clone(),
            files: self.files.clone(),
            waiting: (self.waiting.iter())
                .map(|w| {
                    w.iter()
                        .map(|(t, _, a)| (describe(t), a.is_some()))
                        .collect()
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix(weights: &[f64]) -> FileSetMix<u32, u32> {
        let names = (0..weights.len()).map(|i| format!("s{i}")).collect();
        FileSetMix::new(names, weights.to_vec())
    }

    #[test]
    fn a_set_ahead_of_its_weight_waits_with_its_acknowledgement_withheld() {
        // Weights 3 : 1, chunks of 10 instances.
        let mut m = mix(&[3.0, 1.0]);
        assert_eq!(m.offer(1, 100, 10, 1000), Some(1000), "both at 0: its turn");
        assert_eq!(m.take_ready(), Some((1, 100, None)));
        // Set 1 is served 10, set 0 is served 0: set 1's next chunk waits,
        // and so does its acknowledgement — its readers pause.
        assert_eq!(m.offer(1, 101, 10, 1001), None, "withheld");
        assert_eq!(m.take_ready(), None);
        assert_eq!(m.state(|t| *t).waiting[1], [(101, true)]);
        for k in 0..3 {
            assert_eq!(m.offer(0, k, 10, k), Some(k));
            assert_eq!(m.take_ready(), Some((0, k, None)));
        }
        // Set 0 served 30 / 3 = 10 = set 1's 10: the waiting chunk goes now,
        // its acknowledgement with it.
        assert_eq!(m.take_ready(), Some((1, 101, Some(1001))));
        assert_eq!(m.state(|t| *t).taken, [30, 20]);
    }

    #[test]
    fn a_drained_set_no_longer_holds_the_others_back() {
        let mut m = mix(&[1.0, 1.0]);
        assert!(m.offer(0, 1, 10, 1).is_some());
        assert!(m.take_ready().is_some());
        assert_eq!(m.offer(0, 2, 10, 2), None, "set 1 is behind and still read");
        assert_eq!(m.take_ready(), None);
        assert!(m.set_drained(1));
        assert_eq!(m.take_ready(), Some((0, 2, Some(2))));
        assert!(!m.set_drained(9));
    }

    #[test]
    fn deterministic_turns_follow_the_weights_among_sets_with_files_left() {
        let mut m = mix(&[2.0, 1.0]);
        assert_eq!(m.next_in_order(|_| 0), None, "no files announced yet");
        assert!(m.set_files(vec![2, 1]));
        assert!(!m.set_files(vec![1]));
        assert_eq!(m.next_in_order(|_| 0), Some(0), "ties go to the first");
        m.taken(0, 10);
        assert_eq!(m.next_in_order(|_| 0), Some(1));
        m.taken(1, 10);
        assert_eq!(m.next_in_order(|_| 0), Some(0), "served 5 against 10");
        // Set 1's one file is done: set 0 goes on alone.
        m.taken(0, 30);
        assert_eq!(m.next_in_order(|s| [0, 1][s]), Some(0));
        assert_eq!(m.next_in_order(|s| [2, 1][s]), None, "the pass is read");
    }

    #[test]
    fn the_end_of_a_pass_takes_every_waiting_chunk_and_a_new_pass_starts_even() {
        let mut m = mix(&[1.0, 1.0]);
        m.offer(0, 1, 10, 1);
        m.take_ready();
        m.offer(0, 2, 5, 2);
        m.offer(0, 3, 5, 3);
        assert_eq!(
            m.state(|t| *t).waiting,
            [vec![(2, true), (3, true)], vec![]]
        );
        assert_eq!(m.end_pass(), [(0, 2, Some(2)), (0, 3, Some(3))]);
        assert_eq!(m.summary(), "s0 20 (100.0%), s1 0 (0.0%)");
        m.set_drained(1);
        m.start_pass();
        let s = m.state(|t| *t);
        assert_eq!(
            (&s.taken[..], &s.drained[..]),
            (&[0, 0][..], &[false, false][..])
        );
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<MixState<u32>>(&json).unwrap(), s);
    }
}
