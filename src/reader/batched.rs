//! `batch(n, drop_last)`: items grouped into `Vec`s of `n`.

use super::{PassIter, Reader};
use crate::error::{Error, Result};

/// See [`ReaderExt::batch`](super::ReaderExt::batch).
#[derive(Debug)]
pub struct Batched<R> {
    inner: R,
    n: usize,
    drop_last: bool,
}

impl<R: Reader> Batched<R> {
    pub(crate) fn new(inner: R, n: usize, drop_last: bool) -> Result<Self> {
        if n == 0 {
            return Err(Error::Config("batch size must be at least 1".into()));
        }
        Ok(Batched {
            inner,
            n,
            drop_last,
        })
    }
}

impl<R: Reader> Reader for Batched<R> {
    type Item = Vec<R::Item>;

    fn read(&self) -> PassIter<'_, Vec<R::Item>> {
        let mut src = self.inner.read();
        let (n, drop_last) = (self.n, self.drop_last);
        Box::new(std::iter::from_fn(move || {
            let mut batch = Vec::with_capacity(n.min(1 << 16));
            for x in src.by_ref() {
                batch.push(x);
                if batch.len() == n {
                    return Some(batch);
                }
            }
            (!batch.is_empty() && !drop_last).then_some(batch)
        }))
    }
}
