//! `multi_pass(passes)`: several passes of the source as one (Paddle's
//! `MultiPassReader`).

use super::{PassIter, Reader};

/// See [`ReaderExt::multi_pass`](super::ReaderExt::multi_pass). Each source
/// pass starts when the previous one is exhausted.
#[derive(Debug)]
pub struct MultiPass<R> {
    inner: R,
    passes: usize,
}

impl<R> MultiPass<R> {
    pub(crate) fn new(inner: R, passes: usize) -> Self {
        MultiPass { inner, passes }
    }
}

impl<R: Reader> Reader for MultiPass<R> {
    type Item = R::Item;

    fn read(&self) -> PassIter<'_, R::Item> {
        Box::new((0..self.passes).flat_map(move |_| self.inner.read()))
    }
}
