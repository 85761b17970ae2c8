//! Which chunks the shuffle stage takes into its pool, in what order, and
//! when their acknowledgements go back: the reorder window (deterministic
//! mode) and the file-set mix (several sets) composed. Each call answers
//! with what to do now — acknowledgements to send, chunks to take in order.
//!
//! - One set, not deterministic: a chunk is taken as it comes.
//! - Several sets, not deterministic: the mix decides; a chunk of a set
//!   ahead of its weight waits, its acknowledgement withheld.
//! - Deterministic: the next chunk is the next `(file, chunk)` of the set
//!   the mix picks from the plan order (with one set, set 0); others are
//!   held in the reorder window.
//!
//! Generic over the chunk `T` and its acknowledgement `A`, so it is tested
//! without actors.

use super::mix::{FileSetMix, MixState};
use super::reorder::{ChunkKey, ReorderState, ReorderWindow};

/// A chunk as it arrives from a reader.
pub(crate) struct Arrival<T> {
    /// Its pass.
    pub pass: u64,
    /// Its place in the deterministic order.
    pub key: ChunkKey,
    /// The file's last chunk.
    pub last: bool,
    /// Its instances.
    pub records: u64,
    /// Its bytes in memory (counted against the reorder window).
    pub bytes: usize,
    /// The chunk.
    pub item: T,
}

/// What to do now.
pub(crate) struct Decided<T, A> {
    /// Acknowledgements to send.
    pub acks: Vec<A>,
    /// Chunks to take into the pool, in this order.
    pub take: Vec<T>,
}

impl<T, A> Decided<T, A> {
    fn new() -> Self {
        Decided {
            acks: Vec::new(),
            take: Vec::new(),
        }
    }
}

/// The intake; see the [module docs](self).
pub(crate) struct ChunkIntake<T, A> {
    pass: u64,
    /// Deterministic mode only; chunks with their records.
    reorder: Option<ReorderWindow<(T, u64), A>>,
    /// Several file sets only.
    mix: Option<FileSetMix<T, A>>,
}

impl<T, A> ChunkIntake<T, A> {
    /// An intake for pass 0: deterministic with a reorder window of
    /// `window` bytes, or not; mixing `sets` (name, weight) if more than one.
    pub fn new(deterministic: bool, window: usize, sets: Vec<(String, f64)>) -> Self {
        let n = sets.len();
        let mix = (n > 1).then(|| {
            let (names, weights) = sets.into_iter().unzip();
            FileSetMix::new(names, weights)
        });
        ChunkIntake {
            pass: 0,
            reorder: deterministic.then(|| ReorderWindow::new(n, window)),
            mix,
        }
    }

    /// The same, for chunks of pass `pass` first (a resumed pipeline).
    pub fn starting_at(mut self, pass: u64) -> Self {
        self.pass = pass;
        self
    }

    /// Deterministic mode, one set: the first chunk to take is chunk
    /// `chunk` of file `file` (a draw resumed from a snapshot).
    pub fn next_chunk_at(mut self, file: usize, chunk: u64) -> Self {
        if let Some(w) = &mut self.reorder {
            w.set_next(0, (file, chunk));
        }
        self
    }

    /// Deterministic mode: the set whose next chunk comes next (with one
    /// set, set 0).
    fn next_set(&self) -> Option<usize> {
        let next = self.reorder.as_ref()?.next();
        match &self.mix {
            None => Some(0),
            Some(m) => m.next_in_order(|s| next[s].0),
        }
    }

    fn taken(&mut self, set: usize, records: u64) {
        if let Some(m) = &mut self.mix {
            m.taken(set, records);
        }
    }

    /// A chunk arrives with its acknowledgement.
    pub fn offer(&mut self, a: Arrival<T>, ack: A) -> Decided<T, A> {
        let mut d = Decided::new();
        let set = a.key.set;
        if self.reorder.is_some() {
            let in_order = a.pass == self.pass
                && self.next_set() == Some(set)
                && self.reorder.as_ref().is_some_and(|w| w.is_next(a.key));
            let w = self.reorder.as_mut().expect("deterministic");
            if in_order {
                d.acks.push(ack);
                w.advance(set, a.last);
                self.taken(set, a.records);
                d.take.push(a.item);
                self.take_in_order(&mut d);
            } else if let Some(ack) = w.hold(a.key, (a.item, a.records), a.bytes, a.last, ack) {
                d.acks.push(ack);
            }
            return d;
        }
        match &mut self.mix {
            Some(m) if set < m.sets() => {
                d.acks.extend(m.offer(set, a.item, a.records, ack));
                self.take_mixed(&mut d);
            }
            _ => {
                d.acks.push(ack);
                d.take.push(a.item);
            }
        }
        d
    }

    /// Deterministic mode: take every held chunk that is next in order,
    /// then release the withheld acknowledgements that now fit the window.
    fn take_in_order(&mut self, d: &mut Decided<T, A>) {
        while let Some(set) = self.next_set() {
            let w = self.reorder.as_mut().expect("deterministic");
            let Some(((item, records), ack)) = w.pop_next(set) else {
                break;
            };
            d.acks.extend(ack);
            self.taken(set, records);
            d.take.push(item);
        }
        if let Some(w) = &mut self.reorder {
            d.acks.extend(w.release());
        }
    }

    /// Several sets, not deterministic: take waiting chunks while their set
    /// is among the least served.
    fn take_mixed(&mut self, d: &mut Decided<T, A>) {
        while let Some((_, item, ack)) = self.mix.as_mut().and_then(|m| m.take_ready()) {
            d.acks.extend(ack);
            d.take.push(item);
        }
    }

    /// Several sets: how many files each has in `pass` (its start). `Err`
    /// if that is not the pass being taken or not the sets' number.
    pub fn pass_sets(&mut self, pass: u64, files: Vec<usize>) -> Result<Decided<T, A>, ()> {
        let mut d = Decided::new();
        if let Some(m) = &mut self.mix {
            if pass != self.pass || !m.set_files(files) {
                return Err(());
            }
        }
        // A set with no files this pass no longer holds the others back.
        self.take_in_order(&mut d);
        Ok(d)
    }

    /// Every file of `set` in `pass` was read: it no longer holds the
    /// others back.
    pub fn set_drained(&mut self, pass: u64, set: usize) -> Decided<T, A> {
        let mut d = Decided::new();
        let Some(m) = &mut self.mix else { return d };
        if pass != self.pass || !m.set_drained(set) {
            return d;
        }
        if self.reorder.is_none() {
            self.take_mixed(&mut d);
        }
        d
    }

    /// The end of `pass`: every chunk still held or waiting is taken (in
    /// order where there is one; such chunks at the end of a pass are
    /// logged), and the next pass starts.
    pub fn end_pass(&mut self, pass: u64) -> Decided<T, A> {
        let mut d = Decided::new();
        if self.reorder.is_some() {
            self.take_in_order(&mut d);
            let expected = (self.next_set())
                .zip(self.reorder.as_ref())
                .map(|(s, w)| (s, w.next()[s]));
            let left = self
                .reorder
                .as_mut()
                .map(|w| w.end_pass())
                .unwrap_or_default();
            if !left.is_empty() {
                log::error!(
                    "pass {pass}: {} chunks out of order at the end of the pass (next expected (set, (file, chunk)) {expected:?}); taking them as they are",
                    left.len(),
                );
            }
            for (key, (item, records), ack) in left {
                d.acks.extend(ack);
                self.taken(key.set, records);
                d.take.push(item);
            }
        }
        if let Some(m) = &mut self.mix {
            let left = m.end_pass();
            if !left.is_empty() {
                log::error!(
                    "pass {pass}: {} chunks of file sets still waiting at the end of the pass; taking them",
                    left.len()
                );
            }
            for (_, item, ack) in left {
                d.acks.extend(ack);
                d.take.push(item);
            }
            log::info!("pass {pass}: file sets gave {}", m.summary());
            m.start_pass();
        }
        self.pass = pass + 1;
        d
    }

    /// Drop every held or waiting chunk and its acknowledgement (shutdown).
    pub fn clear(&mut self) {
        if let Some(w) = &mut self.reorder {
            w.clear();
        }
        if let Some(m) = &mut self.mix {
            m.clear();
        }
    }

    /// The reorder window's and the mix's states, each chunk described by `describe`.
    pub fn state<P>(
        &self,
        describe: impl Fn(&T) -> P,
    ) -> (Option<ReorderState<P>>, Option<MixState<P>>) {
        (
            self.reorder.as_ref().map(|w| w.state(|(t, _)| describe(t))),
            self.mix.as_ref().map(|m| m.state(&describe)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chunk of 10 records of 10 bytes, named and acknowledged by `name`.
    fn arrival(pass: u64, set: usize, file: usize, chunk: u64, last: bool) -> Arrival<String> {
        Arrival {
            pass,
            key: ChunkKey { set, file, chunk },
            last,
            records: 10,
            bytes: 10,
            item: format!("{set}:{file}:{chunk}"),
        }
    }

    fn offer(
        i: &mut ChunkIntake<String, String>,
        a: Arrival<String>,
    ) -> (Vec<String>, Vec<String>) {
        let ack = format!("ack {}", a.item);
        let d = i.offer(a, ack);
        (d.take, d.acks)
    }

    #[test]
    fn one_set_not_deterministic_takes_chunks_as_they_come() {
        let mut i = ChunkIntake::new(false, 0, vec![("all".into(), 1.0)]);
        let (take, acks) = offer(&mut i, arrival(0, 0, 3, 1, false));
        assert_eq!(
            (take, acks),
            (vec!["0:3:1".to_string()], vec!["ack 0:3:1".to_string()])
        );
    }

    #[test]
    fn deterministic_mode_takes_each_sets_chunks_in_plan_order_as_the_weights_pick() {
        // Two sets, equal weights, one file each of two chunks; a window of
        // 15 bytes: one early chunk's acknowledgement goes at once, the next
        // is withheld.
        let mut i = ChunkIntake::new(true, 15, vec![("a".into(), 1.0), ("b".into(), 1.0)]);
        assert!(i.pass_sets(0, vec![1, 1]).unwrap().take.is_empty());
        assert!(
            i.pass_sets(1, vec![1, 1]).is_err(),
            "not the pass being taken"
        );
        // Set 1's chunks come first: held (set 0 goes first on ties).
        let (take, acks) = offer(&mut i, arrival(0, 1, 0, 0, false));
        assert_eq!((take.len(), acks), (0, vec!["ack 1:0:0".to_string()]));
        let (take, acks) = offer(&mut i, arrival(0, 1, 0, 1, true));
        assert_eq!(
            (take.len(), acks.len()),
            (0, 0),
            "past the window: withheld"
        );
        // Set 0's first chunk: taken, then set 1's first (the least served),
        // then set 0 waits for its second chunk; set 1's second stays held,
        // its acknowledgement withheld (10 bytes held, 5 of the window free).
        let (take, acks) = offer(&mut i, arrival(0, 0, 0, 0, false));
        assert_eq!(take, ["0:0:0", "1:0:0"]);
        assert_eq!(acks, ["ack 0:0:0"]);
        let (take, acks) = offer(&mut i, arrival(0, 0, 0, 1, true));
        assert_eq!(take, ["0:0:1", "1:0:1"]);
        assert_eq!(
            acks,
            ["ack 0:0:1", "ack 1:0:1"],
            "the held one's comes with it"
        );
        let (reorder, mix) = i.state(|t| t.clone());
        assert!(reorder.unwrap().held.is_empty());
        assert_eq!(mix.unwrap().taken, [20, 20]);
        assert!(i.end_pass(0).take.is_empty());
    }

    #[test]
    fn several_sets_not_deterministic_withhold_a_set_ahead_until_its_turn() {
        let mut i = ChunkIntake::new(false, 0, vec![("a".into(), 1.0), ("b".into(), 1.0)]);
        let (take, acks) = offer(&mut i, arrival(0, 0, 0, 0, false));
        assert_eq!((take.len(), acks.len()), (1, 1));
        let (take, acks) = offer(&mut i, arrival(0, 0, 0, 1, false));
        assert_eq!((take.len(), acks.len()), (0, 0), "set a is ahead: withheld");
        let (take, acks) = offer(&mut i, arrival(0, 1, 0, 0, false));
        assert_eq!(take, ["1:0:0", "0:0:1"], "set b's turn, then a's again");
        assert_eq!(acks, ["ack 1:0:0", "ack 0:0:1"]);
        // Set b is read: set a no longer waits for it.
        let (take, _) = offer(&mut i, arrival(0, 0, 0, 2, false));
        assert!(take.is_empty());
        assert_eq!(i.set_drained(0, 1).take, ["0:0:2"]);
    }

    #[test]
    fn the_end_of_a_pass_takes_what_is_left_and_starts_the_next() {
        let mut i = ChunkIntake::new(true, 0, vec![("all".into(), 1.0)]);
        let (take, acks) = offer(&mut i, arrival(0, 0, 1, 0, true));
        assert_eq!((take.len(), acks.len()), (0, 0), "early, withheld");
        let d = i.end_pass(0);
        assert_eq!(
            (d.take, d.acks),
            (vec!["0:1:0".to_string()], vec!["ack 0:1:0".to_string()])
        );
        // Pass 1 starts at file 0 again.
        let (take, _) = offer(&mut i, arrival(1, 0, 0, 0, true));
        assert_eq!(take, ["0:0:0"]);
        i.clear();
    }
}
