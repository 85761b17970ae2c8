//! `compose`: readers zipped item by item, with an alignment check.

use super::{PassIter, Reader};
use crate::error::{Error, Result};

/// See [`ReaderExt::compose`](super::ReaderExt::compose).
///
/// Yields `Ok((a, b))` while both have items; if exactly one of them ends
/// first, it yields one [`Error::NotAligned`] saying which and after how
/// many items, and ends.
#[derive(Debug)]
pub struct Compose<A, B> {
    a: A,
    b: B,
}

impl<A, B> Compose<A, B> {
    pub(crate) fn new(a: A, b: B) -> Self {
        Compose { a, b }
    }
}

impl<A: Reader, B: Reader> Reader for Compose<A, B> {
    type Item = Result<(A::Item, B::Item)>;

    fn read(&self) -> PassIter<'_, Self::Item> {
        let mut a = self.a.read();
        let mut b = self.b.read();
        let mut n: u64 = 0;
        let mut done = false;
        Box::new(std::iter::from_fn(move || {
            if done {
                return None;
            }
            match (a.next(), b.next()) {
                (Some(x), Some(y)) => {
                    n += 1;
                    Some(Ok((x, y)))
                }
                (None, None) => {
                    done = true;
                    None
                }
                (x, _) => {
                    done = true;
                    let (short, long) = if x.is_none() {
                        ("first", "second")
                    } else {
                        ("second", "first")
                    };
                    Some(Err(Error::NotAligned(format!(
                        "the {short} reader ended after {n} items, the {long} has more"
                    ))))
                }
            }
        }))
    }
}

/// Several readers of one type zipped; see [`compose_all`].
#[derive(Debug)]
pub struct ComposeAll<R> {
    readers: Vec<R>,
}

/// A reader yielding `Ok(vec![one item of each reader])`, checking that all
/// end together (else one [`Error::NotAligned`] naming the readers that
/// ended first).
///
/// ```
/// use feedline::reader::{compose_all, Reader};
/// let r = compose_all(vec![|| 0..2, || 10..12]);
/// let rows: Vec<Vec<i32>> = r.read().collect::<Result<_, _>>().unwrap();
/// assert_eq!(rows, [[0, 10], [1, 11]]);
/// ```
pub fn compose_all<R: Reader>(readers: Vec<R>) -> ComposeAll<R> {
    ComposeAll { readers }
}

impl<R: Reader> Reader for ComposeAll<R> {
    type Item = Result<Vec<R::Item>>;

    fn read(&self) -> PassIter<'_, Self::Item> {
        let mut its: Vec<_> = self.readers.iter().map(|r| r.read()).collect();
        let mut n: u64 = 0;
        let mut done = its.is_empty();
        Box::new(std::iter::from_fn(move || {
            if done {
                return None;
            }
            let items: Vec<Option<R::Item>> = its.iter_mut().map(|it| it.next()).collect();
            let ended: Vec<usize> = (0..items.len()).filter(|&i| items[i].is_none()).collect();
            if ended.len() == items.len() {
                done = true;
                return None;
            }
            if !ended.is_empty() {
                done = true;
                return Some(Err(Error::NotAligned(format!(
                    "reader(s) {ended:?} of {} ended after {n} items, the others have more",
                    items.len()
                ))));
            }
            n += 1;
            Some(Ok(items.into_iter().flatten().collect()))
        }))
    }
}
