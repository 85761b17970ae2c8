//! `chain`: readers one after another in each pass.

use super::{PassIter, Reader};

/// See [`ReaderExt::chain`](super::ReaderExt::chain).
#[derive(Debug)]
pub struct Chain<A, B> {
    a: A,
    b: B,
}

impl<A, B> Chain<A, B> {
    pub(crate) fn new(a: A, b: B) -> Self {
        Chain { a, b }
    }
}

impl<A, B> Reader for Chain<A, B>
where
    A: Reader,
    B: Reader<Item = A::Item>,
{
    type Item = A::Item;

    fn read(&self) -> PassIter<'_, A::Item> {
        // `b` is read (its pass started) only once `a` is exhausted.
        let b = &self.b;
        Box::new(
            self.a
                .read()
                .chain(std::iter::once(()).flat_map(move |_| b.read())),
        )
    }
}

/// Several readers of one type one after another; see [`chain_all`].
#[derive(Debug)]
pub struct ChainAll<R> {
    readers: Vec<R>,
}

/// A reader whose pass is a pass of each of `readers`, in order (box them
/// with [`ReaderExt::boxed`](super::ReaderExt::boxed) to mix types).
///
/// ```
/// use feedline::reader::{chain_all, Reader, ReaderExt};
/// let r = chain_all(vec![(|| 0..2).boxed(), (|| vec![7, 8]).boxed()]);
/// assert_eq!(r.read().collect::<Vec<_>>(), [0, 1, 7, 8]);
/// ```
pub fn chain_all<R: Reader>(readers: Vec<R>) -> ChainAll<R> {
    ChainAll { readers }
}

impl<R: Reader> Reader for ChainAll<R> {
    type Item = R::Item;

    fn read(&self) -> PassIter<'_, R::Item> {
        Box::new(self.readers.iter().flat_map(|r| r.read()))
    }
}
