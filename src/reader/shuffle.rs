//! `shuffle(buf, seed)`: a random-pick pool of `buf` items over the source,
//! reshuffled differently each pass from `(seed, pass)`.

use std::sync::atomic::{AtomicU64, Ordering};

use rand_chacha::ChaCha8Rng;

use super::{PassIter, Reader};
use crate::plan::{pass_rng, uniform_index, DOMAIN_SHUFFLE_READER};

/// See [`ReaderExt::shuffle`](super::ReaderExt::shuffle).
///
/// The pool fills to `buf` items; then each item out is a uniform pick among
/// the pool (removed by swapping in the last), and one more is read in. At
/// the end of the source the pool drains the same way. The `k`-th read of
/// this reader is pass `start + k` and draws from
/// [`pass_rng`]`(seed, DOMAIN_SHUFFLE_READER, pass)`.
#[derive(Debug)]
pub struct Shuffle<R> {
    inner: R,
    buf: usize,
    seed: u64,
    next_pass: AtomicU64,
}

impl<R: Reader> Shuffle<R> {
    pub(crate) fn new(inner: R, buf: usize, seed: u64) -> Self {
        Shuffle {
            inner,
            buf,
            seed,
            next_pass: AtomicU64::new(0),
        }
    }

    /// Make the next read pass `pass` (to resume a run).
    pub fn start_pass(self, pass: u64) -> Self {
        self.next_pass.store(pass, Ordering::SeqCst);
        self
    }

    /// The pass the next read will be.
    pub fn next_pass(&self) -> u64 {
        self.next_pass.load(Ordering::SeqCst)
    }

    /// Read pass `pass` without touching the pass counter.
    pub fn read_pass(&self, pass: u64) -> PassIter<'_, R::Item> {
        let cap = self.buf.max(1);
        Box::new(ShuffleIter {
            src: self.inner.read(),
            pool: Vec::with_capacity(cap.min(1 << 16)),
            cap,
            rng: pass_rng(self.seed, DOMAIN_SHUFFLE_READER, pass),
            done: false,
        })
    }
}

impl<R: Reader> Reader for Shuffle<R> {
    type Item = R::Item;

    fn read(&self) -> PassIter<'_, R::Item> {
        let pass = self.next_pass.fetch_add(1, Ordering::SeqCst);
        self.read_pass(pass)
    }
}

struct ShuffleIter<'a, T> {
    src: PassIter<'a, T>,
    pool: Vec<T>,
    cap: usize,
    rng: ChaCha8Rng,
    done: bool,
}

impl<T> Iterator for ShuffleIter<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        while !self.done && self.pool.len() < self.cap {
            match self.src.next() {
                Some(x) => self.pool.push(x),
                None => self.done = true,
            }
        }
        if self.pool.is_empty() {
            return None;
        }
        let k = uniform_index(&mut self.rng, self.pool.len());
        Some(self.pool.swap_remove(k))
    }
}
