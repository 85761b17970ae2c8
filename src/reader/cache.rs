//! `cache()`: the first complete pass read from the source and kept in
//! memory; later passes replay it (Paddle's `CACHE_PASS_IN_MEM`).
//!
//! Memory is not bounded: cache only what fits. A pass dropped before its end
//! is not kept (the next pass reads the source again).

use std::marker::PhantomData;
use std::sync::OnceLock;

use super::{PassIter, Reader};

/// See [`ReaderExt::cache`](super::ReaderExt::cache).
pub struct Cache<R: Reader> {
    inner: R,
    store: OnceLock<Vec<R::Item>>,
}

impl<R: Reader> Cache<R>
where
    R::Item: Clone + Sync,
{
    pub(crate) fn new(inner: R) -> Self {
        Cache {
            inner,
            store: OnceLock::new(),
        }
    }

    /// True once a complete pass is in memory.
    pub fn is_filled(&self) -> bool {
        self.store.get().is_some()
    }
}

impl<R: Reader> Reader for Cache<R>
where
    R::Item: Clone + Sync,
{
    type Item = R::Item;

    fn read(&self) -> PassIter<'_, R::Item> {
        if let Some(items) = self.store.get() {
            return Box::new(items.iter().cloned());
        }
        let mut src = self.inner.read();
        let mut kept = Some(Vec::new());
        let store = &self.store;
        Box::new(std::iter::from_fn(move || match src.next() {
            Some(x) => {
                if let Some(k) = kept.as_mut() {
                    k.push(x.clone());
                }
                Some(x)
            }
            None => {
                if let Some(k) = kept.take() {
                    // Another pass may have filled it first: keep that one.
                    let _ = store.set(k);
                }
                None
            }
        }))
    }
}

/// See [`ReaderExt::try_cache`](super::ReaderExt::try_cache).
pub struct TryCache<R, T, E> {
    inner: R,
    store: OnceLock<Vec<T>>,
    _error: PhantomData<fn() -> E>,
}

impl<R, T, E> TryCache<R, T, E>
where
    R: Reader<Item = Result<T, E>>,
    T: Clone + Send + Sync,
    E: Send,
{
    pub(crate) fn new(inner: R) -> Self {
        TryCache {
            inner,
            store: OnceLock::new(),
            _error: PhantomData,
        }
    }

    /// True once a complete pass without error is in memory.
    pub fn is_filled(&self) -> bool {
        self.store.get().is_some()
    }
}

impl<R, T, E> Reader for TryCache<R, T, E>
where
    R: Reader<Item = Result<T, E>>,
    T: Clone + Send + Sync,
    E: Send,
{
    type Item = Result<T, E>;

    fn read(&self) -> PassIter<'_, Result<T, E>> {
        if let Some(items) = self.store.get() {
            return Box::new(items.iter().cloned().map(Ok));
        }
        let mut src = self.inner.read();
        let mut kept = Some(Vec::new());
        let store = &self.store;
        Box::new(std::iter::from_fn(move || match src.next() {
            Some(Ok(x)) => {
                if let Some(k) = kept.as_mut() {
                    k.push(x.clone());
                }
                Some(Ok(x))
            }
            Some(Err(e)) => {
                kept = None;
                Some(Err(e))
            }
            None => {
                if let Some(k) = kept.take() {
                    let _ = store.set(k);
                }
                None
            }
        }))
    }
}
