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
    /// draining. Rows still held stay (normally there are none).
    pub fn start_pass(&mut self, pass: u64) {
        self.rng = pass_rng(self.cfg.seed, DOMAIN_SHUFFLE_BUFFER, pass);
        self.draining = false;
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

    /// Drop every held row (e.g. when a pass is abandoned).
    pub fn clear(&mut self) {
        self.rows.clear();
        self.slots.clear();
        self.free_slots.clear();
        self.held_bytes = 0;
    }
}
