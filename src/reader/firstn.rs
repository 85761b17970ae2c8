//! `firstn(n)`: at most the first `n` items of each pass.

use super::{PassIter, Reader};

/// See [`ReaderExt::firstn`](super::ReaderExt::firstn).
#[derive(Debug)]
pub struct FirstN<R> {
    inner: R,
    n: usize,
}

impl<R> FirstN<R> {
    pub(crate) fn new(inner: R, n: usize) -> Self {
        FirstN { inner, n }
    }
}

impl<R: Reader> Reader for FirstN<R> {
    type Item = R::Item;

    fn read(&self) -> PassIter<'_, R::Item> {
        Box::new(self.inner.read().take(self.n))
    }
}
