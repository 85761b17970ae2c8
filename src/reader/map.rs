//! `map(f)`: `f` applied to each item, on the reading thread.

use super::{PassIter, Reader};

/// See [`ReaderExt::map`](super::ReaderExt::map).
pub struct Map<R, F> {
    inner: R,
    f: F,
}

impl<R, F> Map<R, F> {
    pub(crate) fn new(inner: R, f: F) -> Self {
        Map { inner, f }
    }
}

impl<R, F, U> Reader for Map<R, F>
where
    R: Reader,
    F: Fn(R::Item) -> U + Send + Sync,
    U: Send,
{
    type Item = U;

    fn read(&self) -> PassIter<'_, U> {
        Box::new(self.inner.read().map(&self.f))
    }
}
