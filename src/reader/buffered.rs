//! `buffered(n)`: the source read ahead on a thread of its own, at most `n`
//! items in between (Paddle's `buffered`).
//!
//! Dropping the pass's iterator, even mid-pass, stops the thread and joins
//! it: the thread notices at its next item (so a source that never returns
//! from `next` would hold the drop). A panic in the source is raised again in
//! the reading thread when it reaches that point, as if the source ran there.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver};

use super::{PassIter, Reader};

/// See [`ReaderExt::buffered`](super::ReaderExt::buffered).
#[derive(Debug)]
pub struct Buffered<R> {
    inner: Arc<R>,
    size: usize,
}

impl<R: Reader + 'static> Buffered<R> {
    pub(crate) fn new(inner: R, size: usize) -> Self {
        Buffered {
            inner: Arc::new(inner),
            size,
        }
    }
}

impl<R> Reader for Buffered<R>
where
    R: Reader + 'static,
    R::Item: 'static,
{
    type Item = R::Item;

    fn read(&self) -> PassIter<'_, R::Item> {
        let (tx, rx) = bounded(self.size);
        let stop = Arc::new(AtomicBool::new(false));
        let inner = self.inner.clone();
        let stop2 = stop.clone();
        let spawned = std::thread::Builder::new()
            .name("feedline-buffered".into())
            .spawn(move || {
                for x in inner.read() {
                    if stop2.load(Ordering::Relaxed) || tx.send(x).is_err() {
                        break;
                    }
                }
            });
        match spawned {
            Ok(handle) => Box::new(BufferedIter {
                rx: Some(rx),
                handle: Some(handle),
                stop,
            }),
            Err(e) => {
                log::warn!("buffered: could not start a read-ahead thread ({e}); reading inline");
                self.inner.read()
            }
        }
    }
}

struct BufferedIter<T> {
    rx: Option<Receiver<T>>,
    handle: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl<T> Iterator for BufferedIter<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        let rx = self.rx.as_ref()?;
        match rx.recv() {
            Ok(x) => Some(x),
            Err(_) => {
                // The thread has finished (or panicked): join it.
                self.rx = None;
                if let Some(h) = self.handle.take() {
                    if let Err(payload) = h.join() {
                        std::panic::resume_unwind(payload);
                    }
                }
                None
            }
        }
    }
}

impl<T> Drop for BufferedIter<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.rx = None; // a blocked send fails now
        if let Some(h) = self.handle.take() {
            // A panic was already reported by the hook; do not panic in drop.
            let _ = h.join();
        }
    }
}
