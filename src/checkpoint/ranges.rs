//! The one set of integers the checkpoints and the progress that makes
//! them keep — batch numbers, record indices, token ranges —
//! ([`RecordRanges`]): sorted, disjoint half-open ranges, built at once
//! from records or ranges, or by insertion one number at a time, and
//! written as a JSON list of `[start, end]` pairs.

use std::borrow::Cow;
use std::collections::VecDeque;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Words of 64 numbers that the window of a set built by insertion spans
/// at most (1 Gi numbers, 128 MiB, allocated only as far as numbers come):
/// past it, its lowest words move into the ranges whether full or not. A
/// set with a gap every few numbers (every k-th record: another rank takes
/// the rest) costs a bit per number within the window, 16 bytes per range
/// past it — so the window spans a whole source of up to 1 Gi records.
/// The unit tests move the window at 1 Mi numbers (the same code, small).
#[cfg(not(test))]
const MAX_WINDOW_WORDS: usize = 1 << 24;
#[cfg(test)]
const MAX_WINDOW_WORDS: usize = 1 << 14;

/// The numbers the window spans at most.
const WINDOW_SPAN: u64 = 64 * MAX_WINDOW_WORDS as u64;

/// A set of integers (record indices of one source, batch numbers, token
/// offsets) as sorted, disjoint, non-adjacent half-open ranges
/// `[start, end)`; in JSON a list of `[start, end]` pairs.
///
/// A set built by [`insert`](Self::insert) keeps, above its ranges, a
/// bitset window whose lowest words move into the ranges as they fill: an
/// insert is O(1) (amortized) at or near the top of the set — records
/// taken in about the order they were read (the shuffle pool's window),
/// batch numbers taken by several consumers. The window spans at most
/// 1 Mi numbers below the top: it is moved down to take a number below it
/// (once per 64 numbers going down), and a number further down is merged
/// into the ranges (O(ranges)). Every other operation sees the ranges and
/// the window as one set.
///
/// A set read from JSON is kept as written (not merged or sorted), for
/// [`check_sorted`](Self::check_sorted) to name what is wrong.
#[derive(Clone, Default)]
pub struct RecordRanges {
    /// The ranges below the window (`end <= base` for each, when built
    /// here); as read when deserialized.
    ranges: Vec<[u64; 2]>,
    /// The number of the window's first bit (meaningful while `bits` is
    /// not empty).
    base: u64,
    /// The window: bit `i % 64` of word `i / 64` is number `base + i`. The
    /// last word, if any, is not zero.
    bits: VecDeque<u64>,
}

impl RecordRanges {
    /// The ranges covering `records` (any order, duplicates allowed).
    pub fn from_records(records: impl IntoIterator<Item = u64>) -> Self {
        let mut v: Vec<u64> = records.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        let mut ranges: Vec<[u64; 2]> = Vec::new();
        for r in v {
            match ranges.last_mut() {
                Some(last) if last[1] == r => last[1] = r + 1,
                _ => ranges.push([r, r + 1]),
            }
        }
        Self::of_vec(ranges)
    }

    /// The set covering `ranges` (half-open `[start, end)`, any order,
    /// overlapping or adjacent ones merged; empty ones dropped).
    pub fn from_ranges(ranges: impl IntoIterator<Item = [u64; 2]>) -> Self {
        let mut all: Vec<[u64; 2]> = ranges.into_iter().filter(|[s, e]| s < e).collect();
        all.sort_unstable();
        let mut out: Vec<[u64; 2]> = Vec::with_capacity(all.len());
        for [s, e] in all {
            match out.last_mut() {
                Some(last) if s <= last[1] => last[1] = last[1].max(e),
                _ => out.push([s, e]),
            }
        }
        Self::of_vec(out)
    }

    /// The set of exactly these ranges, kept as they are.
    fn of_vec(ranges: Vec<[u64; 2]>) -> Self {
        RecordRanges {
            ranges,
            base: 0,
            bits: VecDeque::new(),
        }
    }

    /// A set of these ranges as given, not checked (tests of the checks).
    #[doc(hidden)]
    pub fn unchecked(ranges: Vec<[u64; 2]>) -> Self {
        Self::of_vec(ranges)
    }

    /// The union of `sets`.
    pub fn union<'a>(sets: impl IntoIterator<Item = &'a RecordRanges>) -> Self {
        Self::from_ranges(sets.into_iter().flat_map(|s| s.iter()))
    }

    /// Add `x`: O(1) (amortized) at or near the top of the set, O(ranges)
    /// far below it (see the type's docs).
    #[inline]
    pub fn insert(&mut self, x: u64) {
        if let Some(off) = x.checked_sub(self.base) {
            let w = (off / 64) as usize;
            if w < self.bits.len() {
                self.bits[w] |= 1 << (off % 64);
                if w == 0 {
                    while self.bits.front() == Some(&u64::MAX) {
                        self.fold_front();
                    }
                }
                return;
            }
        }
        self.insert_outside(x);
    }

    /// Add `x`, outside the window.
    fn insert_outside(&mut self, x: u64) {
        if self.bits.is_empty() {
            let end = self.ranges.last().map_or(0, |r| r[1]);
            if x >= end {
                self.base = if x - end < WINDOW_SPAN { end } else { x };
            } else if !self.lower_window(x) {
                return;
            }
        } else if x < self.base && !self.lower_window(x) {
            return;
        }
        let mut w = ((x - self.base) / 64) as usize;
        while w >= MAX_WINDOW_WORDS {
            if self.bits.is_empty() {
                // All moved into the ranges: the window starts again at `x`.
                self.base = x;
                w = 0;
                break;
            }
            self.fold_front();
            w -= 1;
        }
        if w >= self.bits.len() {
            self.bits.resize(w + 1, 0);
        }
        self.bits[w] |= 1 << ((x - self.base) % 64);
        while self.bits.front() == Some(&u64::MAX) {
            self.fold_front();
        }
    }

    /// Make the window start at or below `x`, which is below it (or below
    /// the ranges' end when there is none), so that `x` can be set there:
    /// true then. False if there is nothing to do (`x` is in the set) or
    /// `x` is too far below the top for the window, and was added to the
    /// ranges instead.
    fn lower_window(&mut self, x: u64) -> bool {
        let i = self.ranges.partition_point(|&[_, e]| e <= x);
        if self.ranges.get(i).is_some_and(|&[s, _]| s <= x) {
            return false;
        }
        let base = x & !63;
        if self.end() - base > WINDOW_SPAN {
            self.insert_low(x);
            return false;
        }
        let window: Vec<[u64; 2]> = self.window_ranges().collect();
        let j = self.ranges.partition_point(|&[_, e]| e <= base);
        let mut moved: Vec<[u64; 2]> = self.ranges.drain(j..).collect();
        if let Some(first) = moved.first_mut().filter(|r| r[0] < base) {
            self.ranges.push([first[0], base]);
            first[0] = base;
        }
        self.bits.clear();
        self.base = base;
        for [s, e] in moved.into_iter().chain(window) {
            self.set_bits(s, e);
        }
        true
    }

    /// Set the window's bits of `[s, e)` (at or above `base`, within the
    /// window's span).
    fn set_bits(&mut self, s: u64, e: u64) {
        let (mut a, b) = (s - self.base, e - self.base);
        let words = b.div_ceil(64) as usize;
        if words > self.bits.len() {
            self.bits.resize(words, 0);
        }
        while a < b {
            let w = a / 64;
            let (lo, hi) = (a % 64, (b - 64 * w).min(64));
            let ones = if hi - lo == 64 {
                u64::MAX
            } else {
                ((1u64 << (hi - lo)) - 1) << lo
            };
            self.bits[w as usize] |= ones;
            a = 64 * w + hi;
        }
    }

    /// Move the window's lowest word into the ranges.
    fn fold_front(&mut self) {
        let Some(word) = self.bits.pop_front() else {
            return;
        };
        let at = self.base;
        self.base += 64;
        if word == u64::MAX {
            push_merged(&mut self.ranges, at, at + 64);
            return;
        }
        for [s, e] in word_ranges(at, word) {
            push_merged(&mut self.ranges, s, e);
        }
    }

    /// The window's runs of ones, as ranges (those that touch across words
    /// not merged).
    fn window_ranges(&self) -> impl Iterator<Item = [u64; 2]> + '_ {
        (self.bits.iter().enumerate())
            .flat_map(move |(w, &word)| word_ranges(self.base + 64 * w as u64, word))
    }

    /// Add `x`, below the window, to the ranges.
    fn insert_low(&mut self, x: u64) {
        let v = &mut self.ranges;
        let i = v.partition_point(|&[_, e]| e < x);
        // `v[i]` is the first range that ends at `x` or above.
        match v.get(i).copied() {
            Some([s, _]) if s <= x && x < v[i][1] => {}
            Some([_, e]) if e == x => {
                v[i][1] = x + 1;
                if v.get(i + 1).is_some_and(|n| n[0] == x + 1) {
                    v[i][1] = v[i + 1][1];
                    v.remove(i + 1);
                }
            }
            Some([s, _]) if s == x + 1 => v[i][0] = x,
            _ => v.insert(i, [x, x + 1]),
        }
    }

    /// The ranges, in order: those read or built, then the window's.
    fn iter(&self) -> impl Iterator<Item = [u64; 2]> + '_ {
        let mut window = self.window_ranges().peekable();
        let mut stored = self.ranges.iter().copied().peekable();
        // Merge runs that touch across words and at the seam.
        std::iter::from_fn(move || {
            let mut r = match stored.next() {
                Some(r) if stored.peek().is_some() => return Some(r),
                Some(r) => r,
                None => window.next()?,
            };
            while let Some(&[s, e]) = window.peek() {
                if s != r[1] {
                    break;
                }
                r[1] = e;
                window.next();
            }
            Some(r)
        })
    }

    /// The record indices, ascending.
    pub fn records(&self) -> impl Iterator<Item = u64> + '_ {
        self.iter().flat_map(|[s, e]| s..e)
    }

    /// How many records.
    pub fn count(&self) -> u64 {
        let low: u64 = self.ranges.iter().map(|&[s, e]| e.saturating_sub(s)).sum();
        low + self
            .bits
            .iter()
            .map(|w| u64::from(w.count_ones()))
            .sum::<u64>()
    }

    /// True if `record` is in the set.
    pub fn contains(&self, record: u64) -> bool {
        if !self.bits.is_empty() && record >= self.base {
            let off = record - self.base;
            return self
                .bits
                .get((off / 64) as usize)
                .is_some_and(|w| w & (1 << (off % 64)) != 0);
        }
        let i = self.ranges.partition_point(|&[_, e]| e <= record);
        self.ranges.get(i).is_some_and(|&[s, _]| s <= record)
    }

    /// The ranges (borrowed, unless the set has a window of insertions to
    /// turn into ranges).
    pub fn ranges(&self) -> Cow<'_, [[u64; 2]]> {
        if self.bits.is_empty() {
            Cow::Borrowed(&self.ranges)
        } else {
            Cow::Owned(self.iter().collect())
        }
    }

    /// The smallest number not in the set.
    pub fn first_gap(&self) -> u64 {
        match self.iter().next() {
            Some([0, e]) => e,
            _ => 0,
        }
    }

    /// `Ok` when the ranges are as this type keeps them — each non-empty
    /// (`start < end`), in order, none overlapping the next (touching is
    /// allowed) —; otherwise what is wrong, naming the ranges.
    pub fn check_sorted(&self) -> Result<(), String> {
        let mut prev: Option<[u64; 2]> = None;
        for (k, [s, e]) in self.iter().enumerate() {
            if s >= e {
                return Err(format!("range #{k} [{s}, {e}) is empty or reversed"));
            }
            if let Some([ps, pe]) = prev {
                if s < pe {
                    return Err(format!(
                        "range #{k} [{s}, {e}) overlaps or comes before range #{} [{ps}, {pe})",
                        k - 1
                    ));
                }
            }
            prev = Some([s, e]);
        }
        Ok(())
    }

    /// The end of the last range (0 when empty): every record is below it.
    pub fn end(&self) -> u64 {
        match self.bits.iter().rposition(|&w| w != 0) {
            Some(w) => self.base + 64 * w as u64 + 64 - u64::from(self.bits[w].leading_zeros()),
            None => self.ranges.last().map_or(0, |r| r[1]),
        }
    }
}

/// Append `[s, e)` to sorted ranges, merging it into the last one it touches.
fn push_merged(out: &mut Vec<[u64; 2]>, s: u64, e: u64) {
    match out.last_mut() {
        Some(last) if last[1] == s => last[1] = e,
        _ => out.push([s, e]),
    }
}

/// The runs of ones in `word` as ranges, bit `i` being number `at + i`.
fn word_ranges(at: u64, word: u64) -> impl Iterator<Item = [u64; 2]> {
    let mut rest = word;
    std::iter::from_fn(move || {
        if rest == 0 {
            return None;
        }
        let start = rest.trailing_zeros() as u64;
        let ones = (rest >> start).trailing_ones() as u64;
        rest = if start + ones >= 64 {
            0
        } else {
            rest & !(((1u64 << ones) - 1) << start)
        };
        Some([at + start, at + start + ones])
    })
}

impl PartialEq for RecordRanges {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for RecordRanges {}

impl std::fmt::Debug for RecordRanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RecordRanges").field(&self.ranges()).finish()
    }
}

impl Serialize for RecordRanges {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for RecordRanges {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<[u64; 2]>::deserialize(deserializer).map(Self::of_vec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small random generator (an LCG).
    fn lcg(state: &mut u64) -> u64 {
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *state >> 33
    }

    #[test]
    fn inserts_merge_neighbours_in_any_order() {
        let mut s = RecordRanges::default();
        for x in [5, 3, 4, 9, 7, 8, 4, 0, 6] {
            s.insert(x);
        }
        assert_eq!(&*s.ranges(), &[[0, 1], [3, 10]]);
        s.insert(1);
        s.insert(2);
        assert_eq!(&*s.ranges(), &[[0, 10]]);
        assert_eq!(s.first_gap(), 10);
    }

    #[test]
    fn inserted_sets_fold_full_words_and_give_exact_ranges() {
        let mut rng = 12345u64;
        for round in 0..50 {
            let mut set = RecordRanges::default();
            let mut want = std::collections::BTreeSet::new();
            for _ in 0..400 {
                let r = lcg(&mut rng) % 300;
                set.insert(r);
                want.insert(r);
            }
            for r in 0..130 {
                set.insert(r);
                want.insert(r);
            }
            if round % 2 == 1 {
                // Below the window, after it moved on.
                for r in [1000, 500, 499, 2, 700] {
                    set.insert(r);
                    want.insert(r);
                }
            }
            assert!(
                set.bits.is_empty() || set.base >= 128,
                "full words fold: base {}",
                set.base
            );
            let exact = RecordRanges::from_records(want.iter().copied());
            assert_eq!(set, exact);
            assert_eq!(&*set.ranges(), &*exact.ranges());
            assert_eq!(set.count(), want.len() as u64);
            assert_eq!(set.end(), want.last().unwrap() + 1);
            assert_eq!(
                set.records().collect::<Vec<_>>(),
                want.iter().copied().collect::<Vec<_>>()
            );
            for r in 0..1100 {
                assert_eq!(set.contains(r), want.contains(&r), "{r}");
            }
            assert_eq!(
                serde_json::to_string(&set).unwrap(),
                serde_json::to_string(&exact).unwrap()
            );
            set.check_sorted().unwrap();
            let again = set.ranges().into_owned();
            assert_eq!(RecordRanges::from_ranges(again), set);
        }
    }

    #[test]
    fn a_far_insert_moves_the_window_on_and_keeps_every_number() {
        let mut set = RecordRanges::default();
        let far = 64 * MAX_WINDOW_WORDS as u64 * 3;
        for x in [1, 3, 64, 65, far, far + 1, 7, far + 64 * 10, 2] {
            set.insert(x);
        }
        assert!(set.bits.len() <= MAX_WINDOW_WORDS);
        let want = RecordRanges::from_records([1, 2, 3, 7, 64, 65, far, far + 1, far + 640]);
        assert_eq!(set, want);
        assert_eq!(set.count(), 9);
        assert_eq!(set.end(), far + 641);
    }

    #[test]
    fn inserts_in_every_order_give_the_set_of_the_numbers() {
        let mut rng = 777u64;
        for round in 0..40 {
            let mut set = if round % 4 == 3 {
                RecordRanges::from_ranges([[0, 100], [150, 300], [301, 5000]])
            } else {
                RecordRanges::default()
            };
            let mut want: std::collections::BTreeSet<u64> = set.records().collect();
            let mut x = 0u64;
            for k in 0..3000 {
                x = match (round + k / 500) % 4 {
                    0 => x + lcg(&mut rng) % 3,                      // ascending
                    1 => x.saturating_sub(lcg(&mut rng) % 3),        // descending
                    2 => lcg(&mut rng) % 20_000,                     // anywhere
                    _ => x + lcg(&mut rng) % 200 * WINDOW_SPAN / 64, // jumps
                };
                let y = x.saturating_sub(lcg(&mut rng) % 64);
                set.insert(y);
                want.insert(y);
                assert!(set.bits.len() <= MAX_WINDOW_WORDS);
            }
            let exact = RecordRanges::from_records(want.iter().copied());
            assert_eq!(set, exact, "round {round}");
            assert_eq!(set.count(), want.len() as u64);
            assert_eq!(set.end(), want.last().map_or(0, |l| l + 1));
            set.check_sorted().unwrap();
            for &w in want.iter().take(500) {
                assert!(set.contains(w));
                assert_eq!(set.contains(w + 1), want.contains(&(w + 1)));
            }
        }
    }

    #[test]
    fn json_is_the_list_of_ranges_as_written() {
        let r = RecordRanges::from_ranges([[5, 9], [0, 2], [2, 3]]);
        assert_eq!(serde_json::to_string(&r).unwrap(), "[[0,3],[5,9]]");
        let odd: RecordRanges = serde_json::from_str("[[0,10],[5,12]]").unwrap();
        assert_eq!(serde_json::to_string(&odd).unwrap(), "[[0,10],[5,12]]");
        assert!(odd.check_sorted().unwrap_err().contains("range #1"));
        let empty: RecordRanges = serde_json::from_str("[]").unwrap();
        assert_eq!(empty, RecordRanges::default());
    }
}
