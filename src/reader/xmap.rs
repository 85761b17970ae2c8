//! `xmap(f, workers, buffer, ordered)`: `f` applied on worker threads
//! (Paddle's `xmap_readers`).
//!
//! One feeder thread reads the source and hands numbered items to `workers`
//! threads through a queue of `buffer`; their results come back numbered.
//! At most `buffer + workers` items are between the source and the consumer
//! at any time (the feeder takes a token per item and the consumer returns it
//! when it yields one), so memory stays bounded even when one item is slow
//! and `ordered` holds the later ones back.
//!
//! A panic in `f` becomes `Err(Error::WorkerPanic)` in that item's place; a
//! panic in the source becomes one such error after the items before it, and
//! ends the pass. Dropping the iterator stops the threads and joins them.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Sender};

use super::{PassIter, Reader};
use crate::error::{Error, Result};
use crate::panic::panic_message;

/// See [`ReaderExt::xmap`](super::ReaderExt::xmap).
pub struct XMap<R, F> {
    inner: Arc<R>,
    f: Arc<F>,
    workers: usize,
    buffer: usize,
    ordered: bool,
}

impl<R, F, U> XMap<R, F>
where
    R: Reader + 'static,
    R::Item: 'static,
    F: Fn(R::Item) -> U + Send + Sync + 'static,
    U: Send + 'static,
{
    pub(crate) fn new(
        inner: R,
        f: F,
        workers: usize,
        buffer: usize,
        ordered: bool,
    ) -> Result<Self> {
        if workers == 0 {
            return Err(Error::Config("xmap needs at least 1 worker".into()));
        }
        Ok(XMap {
            inner: Arc::new(inner),
            f: Arc::new(f),
            workers,
            buffer,
            ordered,
        })
    }
}

type Done<U> = (usize, Result<U>);

impl<R, F, U> Reader for XMap<R, F>
where
    R: Reader + 'static,
    R::Item: 'static,
    F: Fn(R::Item) -> U + Send + Sync + 'static,
    U: Send + 'static,
{
    type Item = Result<U>;

    fn read(&self) -> PassIter<'_, Result<U>> {
        let window = self.buffer + self.workers;
        let (token_tx, token_rx) = bounded::<()>(window);
        for _ in 0..window {
            let _ = token_tx.try_send(());
        }
        let (work_tx, work_rx) = bounded::<(usize, R::Item)>(self.buffer);
        let (out_tx, out_rx) = bounded::<Done<U>>(window);
        let stop = Arc::new(AtomicBool::new(false));
        let mut it = XMapIter {
            out_rx: Some(out_rx),
            token_tx: Some(token_tx),
            stop: stop.clone(),
            threads: Vec::with_capacity(self.workers + 1),
            ordered: self.ordered,
            next_index: 0,
            pending: BTreeMap::new(),
            failed: None,
        };
        for w in 0..self.workers {
            let (work_rx, out_tx, stop, f) = (
                work_rx.clone(),
                out_tx.clone(),
                stop.clone(),
                self.f.clone(),
            );
            let spawned = std::thread::Builder::new()
                .name(format!("feedline-xmap-{w}"))
                .spawn(move || worker(work_rx, out_tx, stop, f));
            match spawned {
                Ok(h) => it.threads.push(h),
                Err(e) => {
                    it.failed = Some(Error::WorkerPanic(format!(
                        "xmap: could not start worker thread {w}: {e}"
                    )));
                    return Box::new(it);
                }
            }
        }
        drop(work_rx);
        let (inner, stop2) = (self.inner.clone(), stop);
        let spawned = std::thread::Builder::new()
            .name("feedline-xmap-feeder".into())
            .spawn(move || feeder(inner, token_rx, work_tx, out_tx, stop2));
        match spawned {
            Ok(h) => it.threads.push(h),
            Err(e) => {
                it.failed = Some(Error::WorkerPanic(format!(
                    "xmap: could not start the feeder thread: {e}"
                )))
            }
        }
        Box::new(it)
    }
}

fn feeder<R: Reader, U>(
    inner: Arc<R>,
    tokens: Receiver<()>,
    work: Sender<(usize, R::Item)>,
    out: Sender<Done<U>>,
    stop: Arc<AtomicBool>,
) {
    let mut src = inner.read();
    let mut i = 0usize;
    loop {
        if tokens.recv().is_err() || stop.load(Ordering::Relaxed) {
            return;
        }
        match catch_unwind(AssertUnwindSafe(|| src.next())) {
            Ok(Some(x)) => {
                if work.send((i, x)).is_err() {
                    return;
                }
            }
            Ok(None) => return,
            Err(payload) => {
                let msg = format!(
                    "xmap: the source reader panicked after {i} items: {}",
                    panic_message(&*payload)
                );
                let _ = out.send((i, Err(Error::WorkerPanic(msg))));
                return;
            }
        }
        i += 1;
    }
}

fn worker<T, U, F: Fn(T) -> U>(
    work: Receiver<(usize, T)>,
    out: Sender<Done<U>>,
    stop: Arc<AtomicBool>,
    f: Arc<F>,
) {
    while let Ok((i, x)) = work.recv() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let r = catch_unwind(AssertUnwindSafe(|| f(x))).map_err(|payload| {
            Error::WorkerPanic(format!(
                "xmap: the map function panicked on item {i}: {}",
                panic_message(&*payload)
            ))
        });
        if out.send((i, r)).is_err() {
            return;
        }
    }
}

struct XMapIter<U> {
    out_rx: Option<Receiver<Done<U>>>,
    token_tx: Option<Sender<()>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    ordered: bool,
    next_index: usize,
    pending: BTreeMap<usize, Result<U>>,
    failed: Option<Error>,
}

impl<U> XMapIter<U> {
    fn give(&mut self, index: usize, r: Result<U>) -> Option<Result<U>> {
        self.next_index = index + 1;
        if let Some(t) = &self.token_tx {
            let _ = t.try_send(());
        }
        Some(r)
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.token_tx = None; // the feeder's wait for a token ends
        self.out_rx = None; // workers' sends fail
        for h in self.threads.drain(..) {
            // Panics in f and the source are caught; nothing else can panic there.
            let _ = h.join();
        }
    }
}

impl<U> Iterator for XMapIter<U> {
    type Item = Result<U>;

    fn next(&mut self) -> Option<Result<U>> {
        if let Some(e) = self.failed.take() {
            self.shutdown();
            return Some(Err(e));
        }
        loop {
            if self.ordered {
                if let Some(r) = self.pending.remove(&self.next_index) {
                    return self.give(self.next_index, r);
                }
            }
            let rx = self.out_rx.as_ref()?;
            match rx.recv() {
                Ok((i, r)) => {
                    if !self.ordered || i == self.next_index {
                        return self.give(i, r);
                    }
                    self.pending.insert(i, r);
                }
                Err(_) => {
                    // Every thread is done.
                    if let Some((i, r)) = self.pending.pop_first() {
                        return self.give(i, r);
                    }
                    self.shutdown();
                    return None;
                }
            }
        }
    }
}

impl<U> Drop for XMapIter<U> {
    fn drop(&mut self) {
        self.shutdown();
    }
}
