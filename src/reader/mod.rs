//! Paddle v2's reader algebra: readers that can be read again pass after
//! pass, and decorators that shuffle, batch, prefetch, chain, zip, map (also
//! in parallel), cut, cache and repeat them. Plus the single-thread file
//! path — [`files`] and [`batches`] — that the actor pipeline reproduces and
//! is measured against.
//!
//! ## Readers
//!
//! A [`Reader`] is anything that gives a fresh iterator each time it is read:
//! one call of [`Reader::read`] is one pass. Every closure
//! `Fn() -> impl IntoIterator` is a reader (Paddle's "reader creator"):
//!
//! ```
//! use feedline::reader::{Reader, ReaderExt};
//! let numbers = || 0..10u32;
//! let r = numbers.map(|x| x * 2).shuffle(4, 7).batch(3, true).unwrap();
//! let pass: Vec<Vec<u32>> = r.read().collect();
//! assert_eq!(pass.len(), 3); // 10 instances, batches of 3, the partial one dropped
//! let mut all: Vec<u32> = pass.concat();
//! all.sort();
//! assert!(all.iter().all(|x| x % 2 == 0));
//! ```
//!
//! ## Pass numbers
//!
//! Readers whose output depends on the pass ([`ReaderExt::shuffle`],
//! [`files`], [`batches`]) count their own reads: the `k`-th call of `read`
//! on such a reader (0-based) is pass `start + k`, where `start` is 0 unless
//! set with their `start_pass` method (to resume). A decorator reads its
//! source once per pass of its own, so in `r.shuffle(..).multi_pass(3)` one
//! read of the outer reader is passes 0, 1, 2 of the shuffle, and the next
//! read passes 3, 4, 5. A reader behind [`ReaderExt::cache`] is read once.
//!
//! ## Decorators
//!
//! One file each: [`shuffle`](ReaderExt::shuffle) (random-pick pool),
//! [`batch`](ReaderExt::batch), [`buffered`](ReaderExt::buffered) (prefetch
//! thread), [`chain`](ReaderExt::chain) / [`chain_all`],
//! [`compose`](ReaderExt::compose) / [`compose_all`] (zip, checking
//! alignment), [`map`](ReaderExt::map), [`xmap`](ReaderExt::xmap) (parallel
//! map, ordered or not), [`firstn`](ReaderExt::firstn),
//! [`cache`](ReaderExt::cache) / [`try_cache`](ReaderExt::try_cache), and
//! [`multi_pass`](ReaderExt::multi_pass). Decorators that run threads end
//! and join them when their iterator is dropped, even mid-pass.

use crate::error::Result;

mod batched;
mod buffered;
mod cache;
mod chain;
mod compose;
mod files;
mod firstn;
mod map;
mod multi_pass;
mod shuffle;
mod xmap;

pub use batched::Batched;
pub use buffered::Buffered;
pub use cache::{Cache, TryCache};
pub use chain::{chain_all, Chain, ChainAll};
pub use compose::{compose_all, Compose, ComposeAll};
pub use files::{
    batches, files, BatchesConfig, BatchesReader, FileChunks, FilesReader, DEFAULT_CHUNK_BYTES,
    DEFAULT_CHUNK_ROWS,
};
pub use firstn::FirstN;
pub use map::Map;
pub use multi_pass::MultiPass;
pub use shuffle::Shuffle;
pub use xmap::XMap;

/// The iterator of one pass.
pub type PassIter<'a, T> = Box<dyn Iterator<Item = T> + Send + 'a>;

/// Something that can be read pass after pass: each [`read`](Self::read)
/// starts a new pass.
///
/// The iterator may borrow the reader. Decorators that move the reading to
/// other threads ([`ReaderExt::buffered`], [`ReaderExt::xmap`]) need a
/// `'static` reader, which they share through an `Arc`.
pub trait Reader: Send + Sync {
    /// What one pass yields.
    type Item: Send;

    /// Start a pass.
    fn read(&self) -> PassIter<'_, Self::Item>;
}

/// A closure that makes an iterator is a reader (Paddle's reader creator).
impl<F, I> Reader for F
where
    F: Fn() -> I + Send + Sync,
    I: IntoIterator,
    I::IntoIter: Send + 'static,
    I::Item: Send,
{
    type Item = I::Item;

    fn read(&self) -> PassIter<'_, I::Item> {
        Box::new(self().into_iter())
    }
}

/// A reader behind a box, to mix readers of different types (e.g. in
/// [`chain_all`]).
pub struct BoxedReader<T> {
    inner: Box<dyn Reader<Item = T>>,
}

impl<T: Send> BoxedReader<T> {
    /// Box `reader`.
    pub fn new(reader: impl Reader<Item = T> + 'static) -> Self {
        BoxedReader {
            inner: Box::new(reader),
        }
    }
}

impl<T: Send> Reader for BoxedReader<T> {
    type Item = T;

    fn read(&self) -> PassIter<'_, T> {
        self.inner.read()
    }
}

impl<T> std::fmt::Debug for BoxedReader<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BoxedReader")
    }
}

/// The decorators, on every [`Reader`].
pub trait ReaderExt: Reader + Sized {
    /// Shuffle with a random-pick pool of `buf` items (`0` or `1`: no
    /// shuffle). Pass `p` draws from `(seed, p)`, so each pass has another
    /// order and the same seed repeats the same orders.
    fn shuffle(self, buf: usize, seed: u64) -> Shuffle<Self> {
        Shuffle::new(self, buf, seed)
    }

    /// Group items into `Vec`s of `n` (the last one shorter, or dropped with
    /// `drop_last`). An error for `n == 0`.
    fn batch(self, n: usize, drop_last: bool) -> Result<Batched<Self>> {
        Batched::new(self, n, drop_last)
    }

    /// Read ahead on a thread, holding at most `n` items in between (`0`:
    /// hand over one at a time). Dropping the iterator stops and joins the
    /// thread; a panic in the source is raised again in the reading thread.
    fn buffered(self, n: usize) -> Buffered<Self>
    where
        Self: 'static,
        Self::Item: 'static,
    {
        Buffered::new(self, n)
    }

    /// This reader's pass, then `other`'s.
    fn chain<B: Reader<Item = Self::Item>>(self, other: B) -> Chain<Self, B> {
        Chain::new(self, other)
    }

    /// Zip with `other`: pairs of items; if one ends before the other, one
    /// [`Error::NotAligned`](crate::Error::NotAligned) ends the pass.
    fn compose<B: Reader>(self, other: B) -> Compose<Self, B> {
        Compose::new(self, other)
    }

    /// Apply `f` to each item.
    fn map<U, F>(self, f: F) -> Map<Self, F>
    where
        F: Fn(Self::Item) -> U + Send + Sync,
        U: Send,
    {
        Map::new(self, f)
    }

    /// Apply `f` on `workers` threads, with `buffer` items queued for them;
    /// `ordered` keeps the source's order. Yields `Result`s: a panic in `f`
    /// (or in the source) becomes [`Error::WorkerPanic`](crate::Error::WorkerPanic)
    /// for that item. Dropping the iterator stops and joins the threads.
    /// An error for `workers == 0`.
    fn xmap<U, F>(self, f: F, workers: usize, buffer: usize, ordered: bool) -> Result<XMap<Self, F>>
    where
        Self: 'static,
        Self::Item: 'static,
        F: Fn(Self::Item) -> U + Send + Sync + 'static,
        U: Send + 'static,
    {
        XMap::new(self, f, workers, buffer, ordered)
    }

    /// At most the first `n` items of each pass.
    fn firstn(self, n: usize) -> FirstN<Self> {
        FirstN::new(self, n)
    }

    /// Read the source in the first complete pass and keep its items in
    /// memory; later passes replay them (Paddle's `CACHE_PASS_IN_MEM`).
    fn cache(self) -> Cache<Self>
    where
        Self::Item: Clone + Sync,
    {
        Cache::new(self)
    }

    /// [`cache`](Self::cache) for readers of `Result`s: a pass is kept only
    /// if it had no error (errors are not `Clone`); until then every pass
    /// reads the source.
    fn try_cache<T, E>(self) -> TryCache<Self, T, E>
    where
        Self: Reader<Item = std::result::Result<T, E>>,
        T: Clone + Send + Sync,
        E: Send,
    {
        TryCache::new(self)
    }

    /// `passes` passes of this reader as one (Paddle's `MultiPassReader`).
    fn multi_pass(self, passes: usize) -> MultiPass<Self> {
        MultiPass::new(self, passes)
    }

    /// Box this reader (to mix types).
    fn boxed(self) -> BoxedReader<Self::Item>
    where
        Self: 'static,
    {
        BoxedReader::new(self)
    }
}

impl<R: Reader> ReaderExt for R {}
