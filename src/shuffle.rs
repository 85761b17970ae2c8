//! The shuffle buffer: a bounded pool of instances (rows of shared
//! [`Chunk`]s) from which rows are drawn uniformly at random.
//!
//! It is a sliding random-pick pool in the manner of tf.data's `shuffle`: once
//! `min_pool_size` rows are held, every draw picks one of the held rows
//! uniformly at random (and removes it by swapping in the last one), and the
//! owner refills whenever there is room. (Paddle's `shuffle` decorator
//! instead fills, shuffles and drains the whole buffer.) At the end of a
//! pass, [`ShuffleBuffer::set_draining`] lets the rest be drawn.
//!
//! The buffer is bounded twice: by `pool_size` rows and by `max_bytes` of
//! memory ([`ShuffleBuffer::memory_bytes`]: what every chunk that still has
//! a row in the pool really holds — [`Chunk::memory_bytes`], the capacity of
//! its vectors, however few of its rows are left — plus the pool's own
//! bookkeeping). A caller pushes only while [`ShuffleBuffer::has_room`], so
//! it overshoots a bound by at most one chunk. A chunk pushed with far more
//! room than rows (the only chunk of a small file, the last of any file) is
//! first shrunk to its rows ([`Chunk::shrink_to_fit`]) when the pool holds
//! it alone, so that many small files do not each keep a chunk's worth of
//! memory alive.
//!
//! The sequence of draws depends only on the sequence of `push_chunk` /
//! `draw` calls and on the seed (a portable `ChaCha8Rng`), which makes a
//! pipeline built on it deterministic when its pushes and draws are.
//!
//! ```
//! use std::sync::Arc;
//! use feedline::shuffle::{ShuffleBuffer, ShuffleConfig};
//! use feedline::{Chunk, DType, Instance, Origin, Schema, SourceId, Values};
//! let schema = Schema::builder().field("x", DType::I64, []).build().unwrap();
//! let mut chunk = Chunk::new(&schema);
//! for i in 0..4 {
//!     let o = Origin::new(SourceId::intern("mem"), i);
//!     chunk.push_instance(&Instance::new(&schema, vec![Values::I64(vec![i as i64])], o).unwrap());
//! }
//! let mut buf = ShuffleBuffer::new(ShuffleConfig { pool_size: 8, seed: 1, ..Default::default() });
//! buf.push_chunk(Arc::new(chunk));
//! assert!(buf.has_room() && !buf.can_draw()); // 4 < min_pool_size = 8
//! buf.set_draining(true); // end of the pass: draw everything left
//! let mut seen: Vec<u64> = std::iter::from_fn(|| buf.draw()).map(|r| r.origin().record).collect();
//! seen.sort();
//! assert_eq!(seen, [0, 1, 2, 3]);
//! assert_eq!(buf.held_bytes(), 0);
//! ```

use std::collections::VecDeque;
use std::sync::Arc;

use rand_chacha::ChaCha8Rng;

use crate::chunk::{Chunk, RowRef};
use crate::plan::{pass_rng, uniform_index, DOMAIN_SHUFFLE_BUFFER};

/// Default byte bound: 512 MiB.
pub const DEFAULT_SHUFFLE_BYTES: usize = 512 << 20;

/// Sizes and seed of a [`ShuffleBuffer`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShuffleConfig {
    /// Rows held at most (before the one-chunk overshoot); `0` = no shuffle:
    /// rows come out in the order they went in.
    pub pool_size: usize,
    /// Draws start once this many rows are held (default: `pool_size`;
    /// values above `pool_size` are taken as `pool_size`).
    pub min_pool_size: Option<usize>,
    /// Bytes of chunks held at most (before the one-chunk overshoot).
    pub max_bytes: usize,
    /// Seed; pass `p` draws from `(seed, p)` (see [`ShuffleBuffer::start_pass`]).
    pub seed: u64,
}

impl Default for ShuffleConfig {
    /// 10,000 rows, 512 MiB, seed 0.
    fn default() -> Self {
        ShuffleConfig {
            pool_size: 10_000,
            min_pool_size: None,
            max_bytes: DEFAULT_SHUFFLE_BYTES,
            seed: 0,
        }
    }
}

impl ShuffleConfig {
    /// The effective threshold for draws: `min(min_pool_size, pool_size)`.
    pub fn min_pool(&self) -> usize {
        self.min_pool_size
            .unwrap_or(self.pool_size)
            .min(self.pool_size)
    }
}

/// Memory the pool holds per row slot, beside the chunks: a row's place.
const ROW_BYTES: usize = std::mem::size_of::<(usize, usize)>();

/// A held chunk and how many of its rows are still in the pool.
struct Slot {
    chunk: Option<Arc<Chunk>>,
    remaining: usize,
    bytes: usize,
}

/// A [`ShuffleBuffer`]'s exact state ([`ShuffleBuffer::parts`],
/// [`ShuffleBuffer::restore`]).
#[derive(Clone, Debug)]
pub struct PoolParts {
    /// By slot: the chunk held there and the bytes it was counted for
    /// (`None`: a free slot).
    pub chunks: Vec<Option<(Arc<Chunk>, usize)>>,
    /// The held rows in pool order: (slot, row of the slot's chunk).
    pub rows: Vec<(u32, u32)>,
    /// Free slots, in the order they are reused (last first).
    pub free_slots: Vec<u32>,
    /// Capacities of the row, slot and free-slot tables (counted by
    /// [`ShuffleBuffer::memory_bytes`]).
    pub capacities: [usize; 3],
    /// Position of the draw stream (`ChaCha8Rng` word position).
    pub word_pos: u128,
}

/// A bounded random-pick pool of rows; see the [module docs](self).
pub struct ShuffleBuffer {
    cfg: ShuffleConfig,
    min_pool: usize,
    rng: ChaCha8Rng,
    /// Held rows: (slot, row index in the slot's chunk).
    rows: VecDeque<(usize, usize)>,
    slots: Vec<Slot>,
    free_slots: Vec<usize>,
    held_bytes: usize,
    draining: bool,
}

impl std::fmt::Debug for ShuffleBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShuffleBuffer")
            .field("cfg", &self.cfg)
            .field("len", &self.rows.len())
            .field("held_bytes", &self.held_bytes)
            .field("draining", &self.draining)
            .finish()
    }
}

impl ShuffleBuffer {
    /// An empty buffer drawing from `(cfg.seed, pass 0)`.
    pub fn new(cfg: ShuffleConfig) -> Self {
        let rng = pass_rng(cfg.seed, DOMAIN_SHUFFLE_BUFFER, 0);
        ShuffleBuffer {
            min_pool: cfg.min_pool(),
            cfg,
            rng,
            rows: VecDeque::new(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            held_bytes: 0,
            draining: false,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ShuffleConfig {
        &self.cfg
    }

    /// Start pass `pass`: draw from `(seed, pass)` from now on, and stop
    /// draining. Rows still held stay (normally there are none); an empty
    /// buffer also starts with empty tables, so that what a pass draws
    /// depends on its own pushes only, not on the passes before (the byte
    /// bound counts the tables' capacities).
    pub fn start_pass(&mut self, pass: u64) {
        self.rng = pass_rng(self.cfg.seed, DOMAIN_SHUFFLE_BUFFER, pass);
        self.draining = false;
        if self.rows.is_empty() {
            self.rows = VecDeque::new();
            self.slots = Vec::new();
            self.free_slots = Vec::new();
            self.held_bytes = 0;
        }
    }

    /// Draw from `(seed, pass 0)` from now on, with a new seed.
    pub fn reseed(&mut self, seed: u64) {
        self.cfg.seed = seed;
        self.rng = pass_rng(seed, DOMAIN_SHUFFLE_BUFFER, 0);
    }

    /// Add all rows of `chunk` (an empty chunk is ignored). Call it while
    /// [`has_room`](Self::has_room); it never refuses. A chunk with room for
    /// more than twice its rows is shrunk first if this is its only holder.
    pub fn push_chunk(&mut self, mut chunk: Arc<Chunk>) {
        let n = chunk.len();
        if n == 0 {
            return;
        }
        if chunk.capacity() > 2 * n {
            if let Some(c) = Arc::get_mut(&mut chunk) {
                c.shrink_to_fit();
            }
        }
        let bytes = chunk.memory_bytes();
        let slot = Slot {
            chunk: Some(chunk),
            remaining: n,
            bytes,
        };
        let id = match self.free_slots.pop() {
            Some(id) => {
                self.slots[id] = slot;
                id
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        self.held_bytes += bytes;
        self.rows.extend((0..n).map(|i| (id, i)));
    }

    /// True if a chunk may be pushed: the buffer is empty, or it holds fewer
    /// than `pool_size` rows and less than `max_bytes` of
    /// [`memory_bytes`](Self::memory_bytes).
    pub fn has_room(&self) -> bool {
        self.rows.is_empty()
            || (self.rows.len() < self.cfg.pool_size && self.memory_bytes() < self.cfg.max_bytes)
    }

    /// True if a row may be drawn: some are held, and there are at least
    /// `min_pool_size` of them, or the byte bound is reached (so a buffer full
    /// of bytes never waits for rows that cannot come), or the buffer is
    /// draining.
    pub fn can_draw(&self) -> bool {
        !self.rows.is_empty()
            && (self.rows.len() >= self.min_pool
                || self.memory_bytes() >= self.cfg.max_bytes
                || self.draining)
    }

    /// End of pass (`true`): let every held row be drawn. `false` restores
    /// the `min_pool_size` rule.
    pub fn set_draining(&mut self, draining: bool) {
        self.draining = draining;
    }

    /// True while draining.
    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// Take one held row: uniformly at random (FIFO when `pool_size == 0`).
    /// `None` if the buffer is empty. It does not check
    /// [`can_draw`](Self::can_draw): the caller decides when to draw.
    pub fn draw(&mut self) -> Option<RowRef> {
        let (slot_id, row) = if self.cfg.pool_size == 0 {
            self.rows.pop_front()?
        } else {
            if self.rows.is_empty() {
                return None;
            }
            let k = uniform_index(&mut self.rng, self.rows.len());
            self.rows.swap_remove_back(k)?
        };
        let slot = &mut self.slots[slot_id];
        slot.remaining -= 1;
        let chunk = if slot.remaining == 0 {
            self.held_bytes -= slot.bytes;
            self.free_slots.push(slot_id);
            slot.chunk.take().expect("a slot with rows holds its chunk")
        } else {
            slot.chunk
                .clone()
                .expect("a slot with rows holds its chunk")
        };
        Some(RowRef::new(chunk, row))
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True if no row is held.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Memory of the chunks that still have a row in the pool (each one's
    /// [`Chunk::memory_bytes`]), and of those rows' places in the pool.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// All the memory the pool holds: [`held_bytes`](Self::held_bytes),
    /// plus the capacity of its own row and chunk tables. This is what
    /// `max_bytes` bounds.
    pub fn memory_bytes(&self) -> usize {
        self.held_bytes
            + self.rows.capacity() * ROW_BYTES
            + self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.free_slots.capacity() * std::mem::size_of::<usize>()
    }

    /// Chunks that still have a row in the pool.
    pub fn chunks_held(&self) -> usize {
        self.slots.len() - self.free_slots.len()
    }

    /// The pool's exact state: what [`restore`](Self::restore) needs to
    /// make a buffer that draws what this one draws from here on, given the
    /// same pushes (a checkpoint's snapshot of the draw, issue 17).
    pub fn parts(&self) -> PoolParts {
        PoolParts {
            chunks: (self.slots.iter())
                .map(|s| s.chunk.as_ref().map(|c| (c.clone(), s.bytes)))
                .collect(),
            rows: (self.rows.iter())
                .map(|&(s, r)| (s as u32, r as u32))
                .collect(),
            free_slots: self.free_slots.iter().map(|&s| s as u32).collect(),
            capacities: [
                self.rows.capacity(),
                self.slots.capacity(),
                self.free_slots.capacity(),
            ],
            word_pos: self.rng.get_word_pos(),
        }
    }

    /// A buffer of `cfg` drawing pass `pass`, in the state `parts` describe
    /// (the chunks may be equal copies of the ones [`parts`](Self::parts)
    /// saw): the same rows in the same places, the same byte accounting and
    /// the draw stream at the same position. An error says what does not
    /// fit (a row naming a free slot or a row past its chunk's end, a chunk
    /// with no row).
    pub fn restore(
        cfg: ShuffleConfig,
        pass: u64,
        parts: PoolParts,
    ) -> std::result::Result<Self, String> {
        let mut buf = ShuffleBuffer::new(cfg);
        buf.start_pass(pass);
        buf.rng.set_word_pos(parts.word_pos);
        let [rows_cap, slots_cap, free_cap] = parts.capacities;
        // Capacities from a file: a failed allocation is an error, not an abort.
        let cannot = |what: &'static str, n: usize| {
            move |e: std::collections::TryReserveError| {
                format!("the pool's {what} table of capacity {n} cannot be allocated: {e}")
            }
        };
        let n = rows_cap.max(parts.rows.len());
        buf.rows.try_reserve_exact(n).map_err(cannot("row", n))?;
        let n = slots_cap.max(parts.chunks.len());
        buf.slots.try_reserve_exact(n).map_err(cannot("slot", n))?;
        let n = free_cap.max(parts.free_slots.len());
        buf.free_slots
            .try_reserve_exact(n)
            .map_err(cannot("free-slot", n))?;
        for slot in parts.chunks {
            let (chunk, bytes) = match slot {
                Some((c, bytes)) => (Some(c), bytes),
                None => (None, 0),
            };
            buf.held_bytes += bytes;
            buf.slots.push(Slot {
                chunk,
                remaining: 0,
                bytes,
            });
        }
        let n = buf.slots.len();
        for (s, r) in parts.rows {
            let (s, r) = (s as usize, r as usize);
            let slot = (buf.slots.get_mut(s)).ok_or_else(|| {
                format!("a row of the pool names slot {s}, the pool has {n} slots")
            })?;
            match &slot.chunk {
                Some(c) if r < c.len() => slot.remaining += 1,
                Some(c) => {
                    return Err(format!(
                        "a row of the pool is row {r} of a chunk of {} rows",
                        c.len()
                    ))
                }
                None => return Err(format!("a row of the pool names the free slot {s}")),
            }
            buf.rows.push_back((s, r));
        }
        for (i, slot) in buf.slots.iter().enumerate() {
            if slot.chunk.is_some() && slot.remaining == 0 {
                return Err(format!("slot {i} holds a chunk but no row of the pool"));
            }
        }
        // The free slots: each an empty slot, once, and every empty slot.
        let mut free = vec![false; n];
        for &s in &parts.free_slots {
            let s = s as usize;
            match buf.slots.get(s) {
                None => {
                    return Err(format!(
                        "free slot {s} is out of range: the pool has {n} slots"
                    ))
                }
                Some(slot) if slot.chunk.is_some() => {
                    return Err(format!("free slot {s} holds a chunk"))
                }
                Some(_) if free[s] => return Err(format!("free slot {s} is given twice")),
                Some(_) => free[s] = true,
            }
            buf.free_slots.push(s);
        }
        if let Some(s) = (0..n).find(|&s| buf.slots[s].chunk.is_none() && !free[s]) {
            return Err(format!("slot {s} holds no chunk but is not a free slot"));
        }
        Ok(buf)
    }

    /// Drop every held row (e.g. when a pass is abandoned).
    pub fn clear(&mut self) {
        self.rows.clear();
        self.slots.clear();
        self.free_slots.clear();
        self.held_bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Instance, Origin, Schema, SourceId, Values};

    fn chunk(schema: &Schema, file: &str, from: u64, n: u64) -> Arc<Chunk> {
        let mut c = Chunk::new(schema);
        for i in from..from + n {
            let o = Origin::new(SourceId::intern(file), i);
            let v = vec![Values::I64(vec![i as i64])];
            c.push_instance(&Instance::new(schema, v, o).unwrap());
        }
        Arc::new(c)
    }

    /// A buffer restored from `parts` (with copies of the chunks) draws what
    /// the original draws, pushes included — with a byte bound in play.
    #[test]
    fn restored_parts_draw_what_the_original_draws() {
        let schema = Schema::builder()
            .field("x", DType::I64, [])
            .build()
            .unwrap();
        for seed in [1u64, 5, 99] {
            let cfg = ShuffleConfig {
                pool_size: 40,
                min_pool_size: Some(25),
                max_bytes: 3000,
                seed,
            };
            let mut a = ShuffleBuffer::new(cfg.clone());
            a.start_pass(2);
            let mut next = 0u64;
            let step = |b: &mut ShuffleBuffer, out: &mut Vec<u64>, next: &mut u64| {
                while !b.can_draw() {
                    b.push_chunk(chunk(&schema, "/pool/f", *next, 7));
                    *next += 7;
                }
                out.push(b.draw().unwrap().origin().record);
            };
            let mut skip = Vec::new();
            for _ in 0..57 {
                step(&mut a, &mut skip, &mut next);
            }
            let parts = a.parts();
            // The chunks re-made from their records: equal copies.
            let copies = PoolParts {
                chunks: (parts.chunks.iter())
                    .map(|c| {
                        c.as_ref().map(|(c, bytes)| {
                            let first = c.origins()[0].record;
                            (chunk(&schema, "/pool/f", first, c.len() as u64), *bytes)
                        })
                    })
                    .collect(),
                ..parts
            };
            let mut b = ShuffleBuffer::restore(cfg, 2, copies).unwrap();
            assert_eq!(b.memory_bytes(), a.memory_bytes());
            let (mut want, mut got) = (Vec::new(), Vec::new());
            let mut next_b = next;
            for _ in 0..200 {
                step(&mut a, &mut want, &mut next);
                step(&mut b, &mut got, &mut next_b);
            }
            assert_eq!(got, want, "seed {seed}");
        }
    }

    #[test]
    fn restore_refuses_rows_that_do_not_fit() {
        let schema = Schema::builder()
            .field("x", DType::I64, [])
            .build()
            .unwrap();
        let c = chunk(&schema, "/pool/g", 0, 2);
        let parts = |rows: Vec<(u32, u32)>| PoolParts {
            chunks: vec![Some((c.clone(), 10)), None],
            rows,
            free_slots: vec![1],
            capacities: [4, 2, 1],
            word_pos: 0,
        };
        let e =
            ShuffleBuffer::restore(ShuffleConfig::default(), 0, parts(vec![(0, 2)])).unwrap_err();
        assert!(e.contains("row 2 of a chunk of 2 rows"), "{e}");
        let e =
            ShuffleBuffer::restore(ShuffleConfig::default(), 0, parts(vec![(1, 0)])).unwrap_err();
        assert!(e.contains("free slot 1"), "{e}");
        let e =
            ShuffleBuffer::restore(ShuffleConfig::default(), 0, parts(vec![(5, 0)])).unwrap_err();
        assert!(e.contains("slot 5"), "{e}");
        let e = ShuffleBuffer::restore(ShuffleConfig::default(), 0, parts(vec![])).unwrap_err();
        assert!(e.contains("no row"), "{e}");
        // Free slots and capacities from a damaged file: errors, never a
        // panic (a slot reused twice) or an abort (a failed allocation).
        let with = |free_slots: Vec<u32>, capacities: [usize; 3]| PoolParts {
            free_slots,
            capacities,
            ..parts(vec![(0, 0)])
        };
        for (free, caps, want) in [
            (vec![1, 1], [4, 2, 2], "given twice"),
            (vec![0], [4, 2, 1], "holds a chunk"),
            (vec![7], [4, 2, 1], "out of range"),
            (vec![], [4, 2, 1], "slot 1 holds no chunk"),
            (vec![1], [1 << 62, 2, 1], "cannot be allocated"),
            (vec![1], [4, usize::MAX, 1], "cannot be allocated"),
        ] {
            let e =
                ShuffleBuffer::restore(ShuffleConfig::default(), 0, with(free, caps)).unwrap_err();
            assert!(e.contains(want), "{want}: {e}");
        }
    }
}
