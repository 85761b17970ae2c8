//! The order of a pass in `global` shuffle mode: an exact, uniformly
//! random permutation of every record of the pass, as a function of
//! `(seed, pass, set)` and the position alone ([`IndexPermutation`]: a
//! Feistel cipher with cycle walking, O(1) memory, as Grain's
//! `index_shuffle` and tf.data's `random_index_shuffle` do), and the map
//! from a position of that order to the file and record it names
//! ([`GlobalOrder`]: the files' record counts as prefix sums, O(files)).
//!
//! A pass's order is cut into [`SEGMENTS`] runs of consecutive positions
//! ([`segment_range`]) that readers read side by side; the pipeline sees
//! each run as one input whose record `i` is the run's `i`-th position, so
//! that what was delivered is a range of positions (a checkpoint of
//! constant size) and a rank's share is its stride of every run.
//!
//! ```
//! use feedline::global_order::IndexPermutation;
//!
//! let p = IndexPermutation::new(10, 7, 0, 0);
//! let mut seen: Vec<u64> = (0..10).map(|i| p.get(i)).collect();
//! assert!(seen.iter().all(|&x| p.inverse(x) < 10));
//! seen.sort();
//! assert_eq!(seen, (0..10).collect::<Vec<_>>());
//! ```

use crate::error::{Error, Result};

/// Runs of consecutive positions a pass's order is cut into, per file set:
/// a constant, so that the inputs a checkpoint names do not depend on the
/// dataset's size, the readers or the ranks.
pub const SEGMENTS: u64 = 16;

/// Rounds of the Feistel network (six: well past the four that make a
/// Feistel network a pseudorandom permutation, with a strong round function).
const ROUNDS: usize = 6;

/// A 64-bit mix (splitmix64's finaliser): the round function's core.
#[inline(always)]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A permutation of `0..n` drawn from `(seed, pass, stream)`: [`get`](Self::get)
/// and [`inverse`](Self::inverse) in O(1) memory and expected O(1) time
/// (a Feistel network over the smallest even power of two `>= n`, walked
/// until it lands below `n`: fewer than 4 rounds of the network on average).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexPermutation {
    n: u64,
    half_bits: u32,
    keys: [u64; ROUNDS],
}

impl IndexPermutation {
    /// The permutation of `0..n` for `seed`, `pass` and `stream` (a file set).
    pub fn new(n: u64, seed: u64, pass: u64, stream: u64) -> Self {
        let bits = if n <= 4 {
            2
        } else {
            64 - (n - 1).leading_zeros()
        };
        let half_bits = bits.div_ceil(2);
        let mut k = mix(seed ^ 0x6A09_E667_F3BC_C908)
            ^ mix(pass.wrapping_add(0xBB67_AE85_84CA_A73B))
            ^ mix(stream.wrapping_mul(0x3C6E_F372_FE94_F82B).wrapping_add(1));
        let mut keys = [0u64; ROUNDS];
        for key in &mut keys {
            k = mix(k.wrapping_add(0x9E37_79B9_7F4A_7C15));
            *key = k;
        }
        IndexPermutation { n, half_bits, keys }
    }

    /// How many indices it permutes.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// True if it permutes nothing.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    #[inline(always)]
    fn round(&self, r: usize, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        mix(x ^ self.keys[r]) & mask
    }

    #[inline(always)]
    fn encrypt(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut l, mut r) = (x >> self.half_bits, x & mask);
        for i in 0..ROUNDS {
            let next = l ^ self.round(i, r);
            l = r;
            r = next;
        }
        (l << self.half_bits) | r
    }

    #[inline(always)]
    fn decrypt(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut l, mut r) = (x >> self.half_bits, x & mask);
        for i in (0..ROUNDS).rev() {
            let prev = r ^ self.round(i, l);
            r = l;
            l = prev;
        }
        (l << self.half_bits) | r
    }

    /// The index at position `i` (`i < n`).
    #[inline]
    pub fn get(&self, i: u64) -> u64 {
        debug_assert!(i < self.n);
        let mut x = self.encrypt(i);
        while x >= self.n {
            x = self.encrypt(x);
        }
        x
    }

    /// The position of index `x` (`x < n`): `inverse(get(i)) == i`.
    #[inline]
    pub fn inverse(&self, x: u64) -> u64 {
        debug_assert!(x < self.n);
        let mut i = self.decrypt(x);
        while i >= self.n {
            i = self.decrypt(i);
        }
        i
    }
}

/// Positions `start..end` of run `segment` (of [`SEGMENTS`]) of an order of
/// `n` positions: the runs are consecutive, cover `0..n` and differ in
/// length by at most one.
pub fn segment_range(n: u64, segment: u64) -> (u64, u64) {
    let at = |s: u64| ((n as u128 * s as u128) / SEGMENTS as u128) as u64;
    (at(segment), at(segment + 1))
}

/// One file set's order in a pass: the permutation of its records and the
/// map from a position to its file and record.
#[derive(Clone, Debug)]
pub struct GlobalOrder {
    perm: IndexPermutation,
    /// `starts[f]`: the first global record of file `f`; the last entry is
    /// the total.
    starts: Vec<u64>,
}

impl GlobalOrder {
    /// The order of pass `pass` over files holding `counts` records (in
    /// the set's file order), for `seed` and the set `set`.
    pub fn new(counts: &[u64], seed: u64, pass: u64, set: u64) -> Result<Self> {
        let mut starts = Vec::with_capacity(counts.len() + 1);
        let mut total: u64 = 0;
        starts.push(0);
        for &c in counts {
            total = total.checked_add(c).ok_or_else(|| {
                Error::Config("global shuffle: the inputs hold more than 2^64 records".into())
            })?;
            starts.push(total);
        }
        Ok(GlobalOrder {
            perm: IndexPermutation::new(total, seed, pass, set),
            starts,
        })
    }

    /// Records in the pass.
    pub fn len(&self) -> u64 {
        *self.starts.last().unwrap_or(&0)
    }

    /// True if the pass has no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The file (its index in the set's file order) and record at
    /// `position` of the pass's order (`position < len()`).
    pub fn locate(&self, position: u64) -> (usize, u64) {
        let g = self.perm.get(position);
        let file = self.starts.partition_point(|&s| s <= g) - 1;
        (file, g - self.starts[file])
    }

    /// The position of record `record` of file `file` in the pass's order.
    pub fn position_of(&self, file: usize, record: u64) -> u64 {
        self.perm.inverse(self.starts[file] + record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_size_gives_a_permutation_and_its_inverse() {
        for n in [0u64, 1, 2, 3, 4, 5, 7, 8, 9, 100, 1000, 4097] {
            for seed in 0..5 {
                let p = IndexPermutation::new(n, seed, seed * 3, 1);
                let mut seen = vec![false; n as usize];
                for i in 0..n {
                    let x = p.get(i);
                    assert!(!seen[x as usize], "n {n} seed {seed}: {x} twice");
                    seen[x as usize] = true;
                    assert_eq!(p.inverse(x), i);
                }
            }
        }
    }

    #[test]
    fn passes_seeds_and_sets_draw_other_orders() {
        let n = 1000;
        let order = |seed, pass, set| {
            let p = IndexPermutation::new(n, seed, pass, set);
            (0..n).map(|i| p.get(i)).collect::<Vec<_>>()
        };
        let base = order(1, 0, 0);
        assert_ne!(base, order(1, 1, 0));
        assert_ne!(base, order(2, 0, 0));
        assert_ne!(base, order(1, 0, 1));
        assert_eq!(base, order(1, 0, 0));
        assert_ne!(base, (0..n).collect::<Vec<_>>());
    }

    #[test]
    fn the_permutation_is_near_uniform_by_position() {
        // Where index 0 lands over many seeds: spread over every tenth.
        let n = 50u64;
        let mut buckets = [0u32; 10];
        for seed in 0..5000 {
            let p = IndexPermutation::new(n, seed, 0, 0);
            buckets[(p.inverse(0) * 10 / n) as usize] += 1;
        }
        for b in buckets {
            assert!((380..620).contains(&b), "{buckets:?}");
        }
    }

    #[test]
    fn segments_cover_the_order_in_runs() {
        for n in [0u64, 1, 15, 16, 17, 1000] {
            let mut next = 0;
            for s in 0..SEGMENTS {
                let (a, b) = segment_range(n, s);
                assert_eq!(a, next);
                assert!(b - a <= n / SEGMENTS + 1);
                next = b;
            }
            assert_eq!(next, n);
        }
    }

    #[test]
    fn positions_locate_every_record_of_every_file_once() {
        let counts = [3u64, 0, 5, 1];
        let o = GlobalOrder::new(&counts, 9, 2, 0).unwrap();
        assert_eq!(o.len(), 9);
        let mut got: Vec<(usize, u64)> = (0..9).map(|p| o.locate(p)).collect();
        for (p, &(f, r)) in got.iter().enumerate() {
            assert_eq!(o.position_of(f, r), p as u64);
        }
        got.sort();
        let want: Vec<(usize, u64)> = (counts.iter().enumerate())
            .flat_map(|(f, &c)| (0..c).map(move |r| (f, r)))
            .collect();
        assert_eq!(got, want);
    }
}
