//! The order of a pass in `global` shuffle mode: an exact, uniformly
//! random permutation of every record of the pass, as a function of
//! `(seed, pass, set)` and the position alone ([`IndexPermutation`]: a
//! Feistel cipher with cycle walking, O(1) memory, as Grain's
//! `index_shuffle` and tf.data's `random_index_shuffle` do), and the map
//! from a position of that order to the file and record it names
//! ([`GlobalOrder`]: the files' record counts as prefix sums, O(files)).
//! In `block` mode ([`GlobalOrder::blocks`]) the pass's files are put in
//! a permuted order and taken in groups of [`BLOCK_FILES`]; each group is
//! cut into blocks that hold a slice of each of its files, each block
//! permuted by its own cipher: an order whose every block mixes its
//! group's files and reads one range of each.
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

/// Files a block of `block` mode draws its records from at once, at most:
/// the pass's files, in a permuted order, are taken in groups of this many.
pub const BLOCK_FILES: usize = 16;

/// One file set's order in a pass: the permutation of its records and the
/// map from a position to its file and record.
///
/// Two kinds ([`GlobalOrder::new`], [`GlobalOrder::blocks`]): a permutation
/// of every record (`global` mode), or records permuted within blocks
/// (`block` mode). In block mode the pass's files are put in a permuted
/// order and taken in groups of [`BLOCK_FILES`]; a group of `T` records is
/// cut into `K = ceil(T / block)` blocks, block `k` holding records
/// `floor(k c / K) .. floor((k + 1) c / K)` of each of the group's files
/// (of `c` records): a slice of every file of the group, so that a block
/// mixes them all and its records of one file are one range of it (one
/// ranged read). A block holds `T / K <= block` records give or take one
/// per file of its group. Each block is permuted by its own cipher.
#[derive(Clone, Debug)]
pub struct GlobalOrder {
    kind: OrderKind,
    /// Records in the pass.
    len: u64,
}

#[derive(Clone, Debug)]
enum OrderKind {
    /// One permutation of every record; `starts[f]`: the first global
    /// record of file `f` (the last entry the total).
    Global {
        perm: IndexPermutation,
        starts: Vec<u64>,
    },
    /// Records permuted within blocks of groups of files.
    Blocks(BlockLayout),
}

/// `block` mode's layout of a pass (O(files) memory).
#[derive(Clone, Debug)]
struct BlockLayout {
    /// Records per block asked for (a group's blocks hold its records
    /// over `ceil(T / block)`, give or take one per file).
    block: u64,
    /// Records per file (the set's file order).
    counts: Vec<u64>,
    /// `files[k]`: the file laid out `k`-th.
    files: Vec<usize>,
    /// `slot[f]`: where file `f` is laid out (`files[slot[f]] == f`).
    slot: Vec<usize>,
    /// `group_starts[q]`: the first position of group `q` (groups of
    /// [`BLOCK_FILES`] consecutive slots); the last entry the total.
    group_starts: Vec<u64>,
    seed: u64,
    pass: u64,
    set: u64,
}

/// `floor(k * c / n)` without overflow (in 64 bits where it fits).
#[inline]
fn share(k: u64, c: u64, n: u64) -> u64 {
    match k.checked_mul(c) {
        Some(kc) => kc / n,
        None => ((k as u128 * c as u128) / n as u128) as u64,
    }
}

impl BlockLayout {
    /// The slots of group `q`.
    fn group(&self, q: usize) -> std::ops::Range<usize> {
        q * BLOCK_FILES..((q + 1) * BLOCK_FILES).min(self.files.len())
    }

    /// Blocks of group `q`.
    fn blocks_of(&self, q: usize) -> u64 {
        (self.group_starts[q + 1] - self.group_starts[q]).div_ceil(self.block)
    }

    /// The records of the group's slot `k`'s file in block `b` of `n`.
    fn slice(&self, slot: usize, b: u64, n: u64) -> (u64, u64) {
        let c = self.counts[self.files[slot]];
        (share(b, c, n), share(b + 1, c, n))
    }

    /// Offset in group `q` of the first record of its block `b` of `n`.
    fn block_start(&self, q: usize, b: u64, n: u64) -> u64 {
        self.group(q).map(|k| self.slice(k, b, n).0).sum()
    }

    /// The group, block (of the group's `n`) and the block's first
    /// position that hold `position`.
    fn block_at(&self, position: u64) -> (usize, u64, u64, u64) {
        let q = self.group_starts.partition_point(|&s| s <= position) - 1;
        let n = self.blocks_of(q);
        let total = self.group_starts[q + 1] - self.group_starts[q];
        let o = position - self.group_starts[q];
        // Blocks are within the group's files' count of `total / n` long:
        // start from the even guess and step to the block.
        let mut b = share(o, n, total).min(n - 1);
        while b > 0 && self.block_start(q, b, n) > o {
            b -= 1;
        }
        while b + 1 < n && self.block_start(q, b + 1, n) <= o {
            b += 1;
        }
        (q, b, n, self.group_starts[q] + self.block_start(q, b, n))
    }

    /// The cipher of group `q`'s block `b`, of `len` records.
    fn permutation(&self, q: usize, b: u64, len: u64) -> IndexPermutation {
        IndexPermutation::new(
            len,
            self.seed,
            self.pass,
            block_stream(self.set, q as u64, b),
        )
    }

    fn view(&self, position: u64) -> BlockView {
        let (q, b, n, first) = self.block_at(position);
        let slices: Vec<(usize, u64, u64)> = (self.group(q))
            .map(|k| {
                let (lo, hi) = self.slice(k, b, n);
                (self.files[k], lo, hi)
            })
            .filter(|s| s.1 < s.2)
            .collect();
        let len = slices.iter().map(|s| s.2 - s.1).sum();
        BlockView {
            first,
            len,
            perm: self.permutation(q, b, len),
            slices,
        }
    }

    fn locate(&self, position: u64) -> (usize, u64) {
        let (q, b, n, first) = self.block_at(position);
        // The block's length: the next block's first position (or the group's end).
        let next = if b + 1 < n {
            self.group_starts[q] + self.block_start(q, b + 1, n)
        } else {
            self.group_starts[q + 1]
        };
        let mut j = self.permutation(q, b, next - first).get(position - first);
        for k in self.group(q) {
            let (lo, hi) = self.slice(k, b, n);
            if j < hi - lo {
                return (self.files[k], lo + j);
            }
            j -= hi - lo;
        }
        unreachable!("a group of no files holds no block")
    }

    fn position_of(&self, file: usize, record: u64) -> u64 {
        let k = self.slot[file];
        let q = k / BLOCK_FILES;
        let n = self.blocks_of(q);
        let c = self.counts[file];
        // The block whose slice of the file holds `record`.
        let mut b = share(record, n, c).min(n - 1);
        while b > 0 && share(b, c, n) > record {
            b -= 1;
        }
        while b + 1 < n && share(b + 1, c, n) <= record {
            b += 1;
        }
        let mut j = 0;
        let mut len = 0;
        for s in self.group(q) {
            let (lo, hi) = self.slice(s, b, n);
            if s < k {
                j += hi - lo;
            } else if s == k {
                j += record - lo;
            }
            len += hi - lo;
        }
        self.group_starts[q] + self.block_start(q, b, n) + self.permutation(q, b, len).inverse(j)
    }

    fn block_records(&self, position: u64, file: usize) -> Option<(u64, u64, u64)> {
        let (q, b, n, first) = self.block_at(position);
        let k = *self.slot.get(file)?;
        if !self.group(q).contains(&k) {
            return None;
        }
        let (lo, hi) = self.slice(k, b, n);
        (lo < hi).then_some((first, lo, hi))
    }
}

/// One block of a `block` mode order, looked up once
/// ([`GlobalOrder::block_view`]): its positions, its cipher and its
/// slices of its files, so that locating each of its positions costs the
/// cipher and a scan of at most [`BLOCK_FILES`] slices.
#[derive(Clone, Debug)]
pub struct BlockView {
    first: u64,
    len: u64,
    perm: IndexPermutation,
    /// (file, first record, end) of each of its files, in its order.
    slices: Vec<(usize, u64, u64)>,
}

impl BlockView {
    /// The position after the block's last.
    pub fn end(&self) -> u64 {
        self.first + self.len
    }

    /// Whether `position` is one of the block's.
    pub fn holds(&self, position: u64) -> bool {
        position >= self.first && position - self.first < self.len
    }

    /// The block's first position (its name).
    pub fn first(&self) -> u64 {
        self.first
    }

    /// The block's records of each of its files: (file, first, end).
    pub fn slices(&self) -> &[(usize, u64, u64)] {
        &self.slices
    }

    /// The block's records of file `file`: `first..end`.
    pub fn records_of(&self, file: usize) -> Option<(u64, u64)> {
        (self.slices.iter())
            .find(|s| s.0 == file)
            .map(|s| (s.1, s.2))
    }

    /// The file and record at `position` (one the block [`holds`](Self::holds)).
    pub fn locate(&self, position: u64) -> (usize, u64) {
        let mut j = self.perm.get(position - self.first);
        for &(file, lo, hi) in &self.slices {
            if j < hi - lo {
                return (file, lo + j);
            }
            j -= hi - lo;
        }
        unreachable!("a block's index past its slices")
    }
}

/// Prefix sums of `counts` (the last entry the total).
fn prefix_sums(counts: impl Iterator<Item = u64>) -> Result<Vec<u64>> {
    let mut starts = vec![0];
    let mut total: u64 = 0;
    for c in counts {
        total = total.checked_add(c).ok_or_else(|| {
            Error::Config("global shuffle: the inputs hold more than 2^64 records".into())
        })?;
        starts.push(total);
    }
    Ok(starts)
}

/// The stream of group `group`'s block `block`'s cipher in set `set`
/// (apart from the set's file permutation and from every other block's).
fn block_stream(set: u64, group: u64, block: u64) -> u64 {
    mix(set ^ 0xB10C_B10C_B10C_B10C)
        ^ mix(group.wrapping_add(0x2545_F491_4F6C_DD1D))
        ^ mix(block.wrapping_add(0x5851_F42D_4C95_7F2D)).rotate_left(17)
}

/// The stream of set `set`'s file permutation in block mode.
fn files_stream(set: u64) -> u64 {
    mix(set ^ 0xF11E_5F11_E5F1_1E5F)
}

impl GlobalOrder {
    /// The order of pass `pass` over files holding `counts` records (in
    /// the set's file order), for `seed` and the set `set`: every record
    /// permuted.
    pub fn new(counts: &[u64], seed: u64, pass: u64, set: u64) -> Result<Self> {
        let starts = prefix_sums(counts.iter().copied())?;
        let len = *starts.last().expect("a total");
        Ok(GlobalOrder {
            kind: OrderKind::Global {
                perm: IndexPermutation::new(len, seed, pass, set),
                starts,
            },
            len,
        })
    }

    /// The order of pass `pass` in block mode: the files permuted, taken
    /// in groups of [`BLOCK_FILES`], each group cut into blocks of about
    /// `block` records holding a slice of each of its files, each block
    /// permuted (`block >= 1`).
    pub fn blocks(counts: &[u64], block: u64, seed: u64, pass: u64, set: u64) -> Result<Self> {
        if block == 0 {
            return Err(Error::Config(
                "block shuffle: a block must hold at least 1 record, not 0".into(),
            ));
        }
        let by_files = IndexPermutation::new(counts.len() as u64, seed, pass, files_stream(set));
        let files: Vec<usize> = (0..counts.len() as u64)
            .map(|k| by_files.get(k) as usize)
            .collect();
        let mut slot = vec![0; counts.len()];
        for (k, &f) in files.iter().enumerate() {
            slot[f] = k;
        }
        let group_starts = prefix_sums(
            files
                .chunks(BLOCK_FILES)
                .map(|g| g.iter().map(|&f| counts[f]).sum()),
        )?;
        let len = *group_starts.last().expect("a total");
        Ok(GlobalOrder {
            kind: OrderKind::Blocks(BlockLayout {
                block,
                counts: counts.to_vec(),
                files,
                slot,
                group_starts,
                seed,
                pass,
                set,
            }),
            len,
        })
    }

    /// Records in the pass.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True if the pass has no records.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Records per block asked for in block mode (`None` for a permutation
    /// of every record).
    pub fn block(&self) -> Option<u64> {
        match &self.kind {
            OrderKind::Global { .. } => None,
            OrderKind::Blocks(l) => Some(l.block),
        }
    }

    /// In block mode, the block that holds `position` (named by its first
    /// position) and the records `first..end` of file `file` in it (one
    /// range of the file; `None` in global mode or where the block holds
    /// none of the file).
    pub fn block_records(&self, position: u64, file: usize) -> Option<(u64, u64, u64)> {
        match &self.kind {
            OrderKind::Global { .. } => None,
            OrderKind::Blocks(l) => l.block_records(position, file),
        }
    }

    /// In block mode, the block that holds `position` (`position <
    /// len()`), to locate its positions at less cost than
    /// [`locate`](Self::locate); `None` in global mode.
    pub fn block_view(&self, position: u64) -> Option<BlockView> {
        match &self.kind {
            OrderKind::Global { .. } => None,
            OrderKind::Blocks(l) => Some(l.view(position)),
        }
    }

    /// The file (its index in the set's file order) and record at
    /// `position` of the pass's order (`position < len()`).
    pub fn locate(&self, position: u64) -> (usize, u64) {
        match &self.kind {
            OrderKind::Global { perm, starts } => {
                let g = perm.get(position);
                let file = starts.partition_point(|&s| s <= g) - 1;
                (file, g - starts[file])
            }
            OrderKind::Blocks(l) => l.locate(position),
        }
    }

    /// The position of record `record` of file `file` in the pass's order.
    pub fn position_of(&self, file: usize, record: u64) -> u64 {
        match &self.kind {
            OrderKind::Global { perm, starts } => perm.inverse(starts[file] + record),
            OrderKind::Blocks(l) => l.position_of(file, record),
        }
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

    /// The positions of `o` (a block order), cut into its blocks (by
    /// `block_records`' first positions), each a list of (file, record).
    fn blocks_of(o: &GlobalOrder) -> Vec<Vec<(usize, u64)>> {
        let mut blocks: Vec<Vec<(usize, u64)>> = Vec::new();
        let mut first = None;
        for p in 0..o.len() {
            let (f, r) = o.locate(p);
            let (at, lo, hi) = o.block_records(p, f).expect("a block holds its record");
            assert!(
                (lo..hi).contains(&r),
                "position {p}: record {r} of {lo}..{hi}"
            );
            if first != Some(at) {
                assert_eq!(at, p, "a block starts at its first position");
                blocks.push(Vec::new());
                first = Some(at);
            }
            blocks.last_mut().unwrap().push((f, r));
        }
        blocks
    }

    #[test]
    fn blocks_permute_within_each_block_of_files_in_a_permuted_order() {
        // Six files (one group) and 40 (three groups of at most 16).
        let many: Vec<u64> = (0..40u64).map(|f| (f * 37) % 23).collect();
        for counts in [vec![30u64, 0, 7, 50, 13, 22], many] {
            let total: u64 = counts.iter().sum();
            for block in [1u64, 5, 16, 40, 1000] {
                let mut orders = Vec::new();
                for seed in 0..6u64 {
                    for pass in 0..3u64 {
                        let o = GlobalOrder::blocks(&counts, block, seed, pass, 1).unwrap();
                        assert_eq!((o.len(), o.block()), (total, Some(block)));
                        let got: Vec<(usize, u64)> = (0..total).map(|p| o.locate(p)).collect();
                        for (p, &(f, r)) in got.iter().enumerate() {
                            assert!(r < counts[f], "block {block}: record {r} of file {f}");
                            assert_eq!(o.position_of(f, r), p as u64, "block {block} seed {seed}");
                        }
                        for p in 0..total {
                            let v = o.block_view(p).unwrap();
                            assert!(v.holds(p) && o.locate(p) == v.locate(p));
                            let (f, _) = v.locate(p);
                            let (at, lo, hi) = o.block_records(p, f).unwrap();
                            assert_eq!((at, Some((lo, hi))), (v.first(), v.records_of(f)));
                        }
                        let blocks = blocks_of(&o);
                        let mut blocks_with: std::collections::BTreeMap<usize, Vec<usize>> =
                            Default::default();
                        for (i, b) in blocks.iter().enumerate() {
                            // About `block`: T / K, plus one per file at most.
                            let most = block + BLOCK_FILES as u64 - 1;
                            assert!(b.len() as u64 <= most, "a block of {} records", b.len());
                            // One range of each file, from at most BLOCK_FILES files.
                            let mut per_file: std::collections::BTreeMap<usize, Vec<u64>> =
                                Default::default();
                            for &(f, r) in b {
                                per_file.entry(f).or_default().push(r);
                            }
                            assert!(per_file.len() <= BLOCK_FILES);
                            for (f, rs) in &mut per_file {
                                rs.sort();
                                assert!(rs.windows(2).all(|w| w[1] == w[0] + 1), "{rs:?}");
                                let (_, lo, hi) = o
                                    .block_records(
                                        blocks[..i].iter().map(|b| b.len() as u64).sum(),
                                        *f,
                                    )
                                    .unwrap();
                                assert_eq!((rs[0], rs[rs.len() - 1] + 1), (lo, hi));
                                blocks_with.entry(*f).or_default().push(i);
                            }
                        }
                        // A file's blocks are its group's: fewer than the
                        // blocks of the groups of BLOCK_FILES files apart.
                        for bs in blocks_with.values() {
                            let span = (bs[bs.len() - 1] - bs[0] + 1) as u64;
                            let group_most: u64 = BLOCK_FILES as u64 * 23;
                            assert!(span <= group_most.div_ceil(block), "{bs:?}");
                        }
                        orders.push(got);
                    }
                }
                let want: Vec<(usize, u64)> = (counts.iter().enumerate())
                    .flat_map(|(f, &c)| (0..c).map(move |r| (f, r)))
                    .collect();
                for o in &orders {
                    let mut o = o.clone();
                    o.sort();
                    assert_eq!(o, want, "block {block}: every record once");
                }
                if block > 1 {
                    let mut distinct = orders.clone();
                    distinct.sort();
                    distinct.dedup();
                    assert_eq!(distinct.len(), orders.len(), "block {block}: each its own");
                }
            }
        }
        let counts = [30u64, 0, 7, 50, 13, 22];
        assert!(GlobalOrder::blocks(&counts, 0, 1, 0, 0).is_err());
        assert_eq!(
            GlobalOrder::new(&counts, 1, 0, 0)
                .unwrap()
                .block_records(0, 0),
            None
        );
        // A block mixes every file of its group: blocks of 40 over six
        // files (one group) each hold a slice of the files of 13 or more.
        let o = GlobalOrder::blocks(&counts, 40, 3, 0, 0).unwrap();
        for b in blocks_of(&o) {
            for f in [0, 3, 4, 5] {
                assert!(b.iter().any(|x| x.0 == f), "file {f} missing from {b:?}");
            }
        }
        // The files' order is drawn anew for each seed and pass: with more
        // than BLOCK_FILES files, the file laid out first varies.
        let many: Vec<u64> = vec![5; 40];
        let mut firsts: Vec<usize> = (0..40u64)
            .map(|seed| {
                GlobalOrder::blocks(&many, 1, seed, seed % 3, 0)
                    .unwrap()
                    .locate(0)
                    .0
            })
            .collect();
        firsts.sort();
        firsts.dedup();
        assert!(firsts.len() > 10, "{firsts:?}");
    }
}
