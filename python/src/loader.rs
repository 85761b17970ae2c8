//! The `feedline.Loader` class and its epochs' iterator: the Rust
//! `feedline_actors::Loader` behind a mutex only ever waited for with the
//! GIL released, its epochs and length asked of the Rust loader's own
//! (`feedline_actors::epochs`, `counting`), its keywords translated by
//! [`crate::keywords`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use feedline::Schema;
use feedline_actors::counting::{self, LenError, RecordCounts};
use feedline_actors::epochs::{Epochs, PassEnd};
use feedline_actors::{
    Loader as RustLoader, LoaderBuilder, PipelineConfig, PipelineError, Popped, Stats,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::epochs::{self, Closed, Settled, Slot};
use crate::errors::{start_err, to_py_err, FeedlineError, Keywords};
use crate::feed::PyFeed;
use crate::keywords::{self, LoaderKeywords, Translated};
use crate::py_batch::PyBatch;
use crate::{checkpoint, logbridge, schema, stats};

/// How long one wait for a batch lasts before signals are checked.
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// Start a loader on a thread of its own and wait for it with the GIL
/// released, checking for signals between wait slices: a start-up that
/// blocks (a FIFO with no writer, a stalled network file system) yields to
/// Ctrl-C. After an interrupt the start-up finishes by itself and its loader
/// is dropped — stopped — on that thread.
fn build_interruptibly<T: Send + 'static>(
    py: Python<'_>,
    build: impl FnOnce() -> Result<T, PipelineError> + Send + 'static,
) -> PyResult<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    // Waited on with the GIL released: it must be shareable.
    let rx = Mutex::new(rx);
    let thread = std::thread::Builder::new()
        .name("feedline-start".into())
        .spawn(move || {
            // A send fails only if the caller was interrupted: `T` is dropped here.
            let _ = tx.send(build());
        })
        .map_err(|e| FeedlineError::new_err(format!("cannot start a thread: {e}")))?;
    loop {
        let got = py.allow_threads(|| {
            rx.lock()
                .unwrap_or_else(|p| p.into_inner())
                .recv_timeout(WAIT_SLICE)
        });
        match got {
            Ok(r) => {
                // It has sent its result: wait for it to be gone.
                let _ = py.allow_threads(|| thread.join());
                return r.map_err(start_err);
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(FeedlineError::new_err(
                    "the loader's start-up panicked (see the log)",
                ))
            }
        }
    }
}

/// A loader's shared part: its pipeline and epochs (behind a mutex only
/// ever waited for with the GIL released), shared with [`LIVE`].
struct Inner {
    slot: Mutex<Slot>,
    /// Set first thing by `close`: a `next()` in progress stops taking the
    /// lock (an unfair mutex could otherwise keep `close` waiting).
    closing: AtomicBool,
    /// The process that made it.
    pid: u32,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True in a process other than the maker's (a forked child).
    fn foreign(&self) -> bool {
        std::process::id() != self.pid
    }

    /// Stop every thread (call without the GIL), for `why`. A pipeline that
    /// ended by itself (its end, an error, an interrupt) is kept for
    /// `state_dict()`. Nothing in a forked child.
    fn close(&self, why: Closed) {
        if self.foreign() {
            return;
        }
        self.closing.store(true, Ordering::SeqCst);
        let taken = {
            let mut slot = self.lock();
            if slot.closed.is_none() {
                slot.closed = Some(why.clone());
            }
            // The open epoch stays open: its loop's next step raises,
            // saying why (one waiting now ends).
            slot.loader.take()
        };
        if let Some(mut l) = taken {
            l.shutdown();
            if !matches!(why, Closed::ByUser) {
                self.lock().stopped = Some(l);
            }
        }
    }
}

impl Drop for Inner {
    /// In a forked child: the parent's pipeline is forgotten, not stopped.
    fn drop(&mut self) {
        if self.foreign() {
            epochs::forget_in_child(self.slot.get_mut().unwrap_or_else(|p| p.into_inner()));
        }
    }
}

/// Every loader not yet closed, closed by [`close_all`] at interpreter exit.
static LIVE: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());

/// Close every live loader (registered with `atexit`): at exit, while the
/// interpreter still runs threads, not in its finalization — a transform
/// worker inside a Python `map=` then would be killed mid-call. In a forked
/// child the parent's loaders are left alone.
#[pyfunction]
pub(crate) fn close_all(py: Python<'_>) {
    let all: Vec<_> = LIVE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .drain(..)
        .filter_map(|w| w.upgrade())
        .filter(|inner| !inner.foreign())
        .collect();
    py.allow_threads(move || all.iter().for_each(|inner| inner.close(Closed::ByUser)));
    logbridge::flush(py);
}

/// What one step of an iteration gives.
enum Step {
    Batch(PyBatch),
    /// A pass ended (reported to untracked iterations only).
    PassEnd(u64),
    /// The epoch ended (or the loader was closed while waiting).
    End,
    /// No batch within the wait slice.
    Wait,
    /// A use of a closed loader.
    Closed(String),
    Failed(PipelineError),
}

/// The loader: iterate it for batches — each loop one epoch (one pass;
/// `passes=N`: all N passes in one loop).
///
/// Every method may be called from any thread: the Rust loader sits behind a
/// mutex that is only ever waited for with the GIL released (a `next()`
/// holds it for one wait slice at a time), and `stats()`, `schema` and
/// `len()` do not need it.
#[pyclass(module = "feedline", name = "Loader", frozen)]
pub(crate) struct PyLoader {
    /// The pipeline and epochs; shared with [`LIVE`] (closed at exit).
    inner: Arc<Inner>,
    /// Starts the pipeline again (`set_epoch`, `load_state_dict`): the
    /// settings as given, the shard fixed, no resume; `None` in push mode.
    builder: Option<LoaderBuilder>,
    /// The statistics of the running pipeline.
    stats: Mutex<Stats>,
    /// The batches' schema: known at the start, or — a map whose output
    /// schema is inferred — set from the first batch.
    schema: OnceLock<Schema>,
    /// The settings in force (inputs expanded).
    config: Arc<PipelineConfig>,
    /// Every input's record count, for `len()`.
    counts: Arc<RecordCounts>,
    /// Time `next()` held the GIL (`stats()["python"]`).
    gil: stats::GilClock,
    /// The order delivered, measured (`stats()["order"]`), once the
    /// inputs' record counts are known.
    order: Mutex<Option<feedline_actors::OrderStats>>,
    /// The built-in image transform (`transform=`), for `image_fields`.
    image_transform: Option<Arc<feedline_vision::ImageTransform>>,
}

impl PyLoader {
    fn new_running(
        loader: RustLoader,
        builder: Option<LoaderBuilder>,
        endless: bool,
        first_pass: u64,
        resumed: bool,
    ) -> Self {
        let config = Arc::new(loader.config().clone());
        let stats_handle = loader.stats_handle();
        let loader_counts = loader.record_counts();
        let schema = OnceLock::new();
        let inferred =
            config.transforms.instance.is_some() && config.transforms.output_schema.is_none();
        if !inferred {
            let _ = schema.set(loader.schema().clone());
        }
        let epochs = Epochs::new(first_pass, resumed, endless);
        let inner = Arc::new(Inner {
            slot: Mutex::new(Slot {
                loader: Some(loader),
                stopped: None,
                closed: None,
                epochs,
                passes: config.order.passes,
            }),
            closing: AtomicBool::new(false),
            pid: std::process::id(),
        });
        {
            let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
            live.retain(|w| w.strong_count() > 0);
            live.push(Arc::downgrade(&inner));
        }
        // Restarts keep the shard in force (the environment is read once).
        let builder =
            builder.map(|b| b.shard(config.inputs.shard.rank, config.inputs.shard.world_size));
        PyLoader {
            counts: {
                let counts = loader_counts;
                counts.start_if_local();
                counts
            },
            stats: Mutex::new(stats_handle),
            schema,
            config,
            inner,
            builder,
            gil: stats::GilClock::default(),
            order: Mutex::new(None),
            image_transform: None,
        }
    }

    /// An error if this process did not make the loader.
    fn check_process(&self) -> PyResult<()> {
        if self.inner.foreign() {
            return Err(FeedlineError::new_err(epochs::foreign_message(
                self.inner.pid,
            )));
        }
        Ok(())
    }

    /// The loader, locked (call with the GIL released).
    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.inner.lock()
    }

    fn close_for(&self, py: Python<'_>, why: Closed) {
        let inner = self.inner.clone();
        py.allow_threads(move || inner.close(why));
        self.counts.cancel();
    }

    /// `f` on the running pipeline, or on the stopped one kept for
    /// `state_dict()` (without the GIL); an error once it is closed.
    fn on_pipeline<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut RustLoader) -> Result<T, PipelineError> + Send,
    ) -> PyResult<T> {
        let r = py.allow_threads(|| {
            let mut slot = self.lock();
            let slot = &mut *slot;
            slot.loader.as_mut().or(slot.stopped.as_mut()).map(f)
        });
        match r {
            None => Err(PyValueError::new_err(
                "the loader is closed: take its state_dict() before close()",
            )),
            Some(r) => r.map_err(to_py_err),
        }
    }

    /// The checkpoint of the batches taken so far (the first one stamps
    /// the inputs).
    fn take_checkpoint(&self, py: Python<'_>) -> PyResult<feedline_actors::checkpoint::Checkpoint> {
        self.check_process()?;
        self.on_pipeline(py, |l| l.checkpoint())
    }

    /// The local files the loader reads, which a checkpoint is never saved
    /// over (found once).
    fn input_files(
        &self,
        py: Python<'_>,
    ) -> PyResult<Arc<feedline_actors::checkpoint::InputFiles>> {
        self.on_pipeline(py, |l| l.input_files())
    }

    /// Settle the epochs before an `iter()` or a `set_epoch` (see
    /// `epochs`): an open epoch whose last batch was handed out is ended,
    /// a resumed pass with nothing left passed over — waited for without
    /// the GIL, in slices, Ctrl-C heard between them.
    fn settle(&self, py: Python<'_>) -> PyResult<()> {
        self.check_process()?;
        loop {
            let settled = py.allow_threads(|| {
                if self.inner.closing.load(Ordering::SeqCst) {
                    return Settled::Done;
                }
                let r = self.lock().settle_slice(WAIT_SLICE);
                if matches!(r, Settled::Exhausted) {
                    self.inner.closing.store(true, Ordering::SeqCst);
                }
                r
            });
            match settled {
                Settled::Done | Settled::Exhausted => return Ok(()),
                Settled::Wait => {
                    logbridge::flush(py);
                    if let Err(e) = py.check_signals() {
                        self.close_for(py, Closed::Interrupted);
                        return Err(e);
                    }
                }
                Settled::Failed(e) => {
                    self.close_for(py, Closed::Failed(e.to_string()));
                    logbridge::flush(py);
                    return Err(to_py_err(e));
                }
            }
        }
    }

    /// Begin an epoch, or join the open one: its number. The open epoch is
    /// settled first: one whose last batch was handed out is over, and this
    /// begins the next.
    fn begin_epoch(&self, py: Python<'_>) -> PyResult<u64> {
        self.settle(py)?;
        let r = py.allow_threads(|| {
            let mut slot = self.lock();
            match &slot.closed {
                Some(c) => Err(c.message()),
                None => Ok(slot.epochs.begin()),
            }
        });
        r.map_err(FeedlineError::new_err)
    }

    /// One wait slice for the next batch of epoch `gen` (`None`: the open
    /// epoch, begun if none is), with the GIL released. `untracked`: what
    /// is fetched is not taken for checkpoints until [`record`](Self::record)ed,
    /// and every end of a pass is reported (to be recorded in turn).
    /// `first`: the call's first slice — a loader closed before the call
    /// raises; one closed while the call waits (`close()` from another
    /// thread) ends the iteration.
    fn step(&self, gen: Option<u64>, untracked: bool, first: bool) -> Step {
        if !first && self.inner.closing.load(Ordering::SeqCst) {
            return Step::End;
        }
        let mut guard = self.lock();
        let slot = &mut *guard;
        match gen {
            // A loop whose epoch is over ends as usual.
            Some(g) if !slot.epochs.is_open(g) => return Step::End,
            _ => {}
        }
        if let Some(c) = &slot.closed {
            return if first {
                Step::Closed(c.message())
            } else {
                Step::End
            };
        }
        if gen.is_none() {
            slot.epochs.begin();
        }
        let Some(loader) = slot.loader.as_mut() else {
            // Being started again (set_epoch, load_state_dict).
            drop(guard);
            std::thread::sleep(Duration::from_millis(1));
            return Step::Wait;
        };
        let ep = &mut slot.epochs;
        loop {
            let next = if untracked {
                loader.next_event_untracked(Some(WAIT_SLICE))
            } else {
                loader.next_event_timeout(Some(WAIT_SLICE))
            };
            match next {
                Ok(Popped::Batch(d)) => {
                    ep.took_batch(d.pass);
                    // Made before the GIL is taken back (it reads the
                    // batch's headers: cache misses, off the GIL).
                    return Step::Batch(PyBatch::new(d.batch, d.pass, d.seq));
                }
                Ok(Popped::EndOfPass(p)) => {
                    let over = ep.took_pass_end(p) == PassEnd::EpochOver;
                    if untracked {
                        return Step::PassEnd(p);
                    }
                    if over {
                        return Step::End;
                    }
                }
                Ok(Popped::EndOfData) => {
                    self.inner.closing.store(true, Ordering::SeqCst);
                    slot.exhausted(self.config.order.passes);
                    return Step::End;
                }
                Err(PipelineError::Timeout { .. }) => return Step::Wait,
                Err(e) => return Step::Failed(e),
            }
        }
    }

    /// The next batch of epoch `gen` (`None`: the open one, begun if none
    /// is), waited for without the GIL (`released` grows by the time spent
    /// so); `None` at the epoch's end.
    fn next_batch(
        &self,
        py: Python<'_>,
        gen: Option<u64>,
        untracked: bool,
        released: &mut Duration,
    ) -> PyResult<Option<Item>> {
        self.check_process()?;
        logbridge::flush(py);
        let mut first = true;
        loop {
            let t = Instant::now();
            let step = py.allow_threads(|| self.step(gen, untracked, first));
            first = false;
            *released += t.elapsed();
            match step {
                Step::Batch(b) => {
                    {
                        let mut order = self.order.lock().unwrap_or_else(|p| p.into_inner());
                        if order.is_none() {
                            *order = feedline_actors::OrderStats::of_counts(&self.counts);
                        }
                        if let Some(o) = order.as_mut() {
                            o.observe(b.pass_, &b.batch);
                        }
                    }
                    if self.schema.get().is_none() {
                        let _ = self.schema.set(b.batch.schema().clone());
                    }
                    return Ok(Some(Item::Batch(b)));
                }
                Step::PassEnd(p) => return Ok(Some(Item::PassEnd(p))),
                Step::End => {
                    logbridge::flush(py);
                    return Ok(None);
                }
                Step::Closed(m) => return Err(FeedlineError::new_err(m)),
                Step::Wait => {
                    logbridge::flush(py);
                    if let Err(e) = py.check_signals() {
                        self.close_for(py, Closed::Interrupted);
                        return Err(e);
                    }
                }
                Step::Failed(e) => {
                    self.close_for(py, Closed::Failed(e.to_string()));
                    logbridge::flush(py);
                    return Err(to_py_err(e));
                }
            }
        }
    }

    fn next_timed(
        &self,
        py: Python<'_>,
        gen: Option<u64>,
        untracked: bool,
    ) -> PyResult<Option<Item>> {
        let entered = Instant::now();
        let mut released = Duration::ZERO;
        let r = self.next_batch(py, gen, untracked, &mut released);
        self.gil.add(entered.elapsed().saturating_sub(released));
        r
    }

    /// The next batch of the open epoch (begun if none is).
    fn next_plain(&self, py: Python<'_>) -> PyResult<Option<PyBatch>> {
        match self.next_timed(py, None, false)? {
            Some(Item::Batch(b)) => Ok(Some(b)),
            _ => Ok(None),
        }
    }

    /// Stop the running pipeline and start it again from `from` (a pass,
    /// or checkpoints); the open epoch is given up. `first`: the pass the
    /// new pipeline delivers first.
    fn restart(&self, py: Python<'_>, from: Restart, first: u64) -> PyResult<()> {
        self.check_process()?;
        let Some(builder) = self.builder.clone() else {
            return Err(PyValueError::new_err(
                "a push-mode loader cannot start again: its data is what is pushed",
            ));
        };
        let (builder, resumed) = match from {
            Restart::AtPass(p) => (builder.first_pass(p), false),
            Restart::Resume(cps) => (cps.into_iter().fold(builder, |b, cp| b.resume(cp)), true),
        };
        // The old pipeline stops first (its memory and threads go).
        let old = py.allow_threads(|| {
            let mut slot = self.lock();
            if let Some(c) = &slot.closed {
                return Err(c.message());
            }
            slot.epochs.restarted(first, resumed);
            Ok(slot.loader.take())
        });
        let old = old.map_err(FeedlineError::new_err)?;
        // The metrics' server serves the new pipeline (same port, counters going on).
        let builder = match old.as_ref().and_then(|l| l.metrics_server().cloned()) {
            Some(server) => builder.metrics_server(server),
            None => builder,
        };
        py.allow_threads(move || drop(old));
        let started = build_interruptibly(py, move || builder.build());
        let loader = match started {
            Ok(l) => l,
            Err(e) => {
                let why = if e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) {
                    Closed::Interrupted
                } else {
                    Closed::Failed(e.to_string())
                };
                self.close_for(py, why);
                return Err(e);
            }
        };
        *self.stats.lock().unwrap_or_else(|p| p.into_inner()) = loader.stats_handle();
        let left = py.allow_threads(|| {
            let mut slot = self.lock();
            if slot.closed.is_some() {
                // Closed from another thread meanwhile.
                return Some(loader);
            }
            slot.loader = Some(loader);
            None
        });
        if let Some(mut l) = left {
            py.allow_threads(move || l.shutdown());
        }
        logbridge::flush(py);
        Ok(())
    }
}

/// What an iteration step hands out.
enum Item {
    Batch(PyBatch),
    /// A pass ended (untracked iterations).
    PassEnd(u64),
}

/// Where a pipeline starts again.
enum Restart {
    AtPass(u64),
    Resume(Vec<feedline_actors::checkpoint::Checkpoint>),
}

impl Drop for PyLoader {
    /// Stop the loader with the GIL released: the threads it joins may be
    /// waiting for the GIL (a Python `map=` on the transform workers). In
    /// a forked child nothing is stopped (see [`Inner`]'s drop).
    fn drop(&mut self) {
        self.counts.cancel();
        if self.inner.foreign() {
            return;
        }
        // Closed already (by close(), an error, or the exit hook): nothing to wait for.
        if let Ok(g) = self.inner.slot.try_lock() {
            if g.loader.is_none() && g.closed.is_some() {
                return;
            }
        }
        // The lock too is waited for without the GIL (the exit hook may hold it).
        let inner = self.inner.clone();
        Python::with_gil(|py| py.allow_threads(move || inner.close(Closed::ByUser)));
    }
}

/// An epoch's iterator: what `iter(loader)` gives. It yields the batches
/// of the epoch it began (or joined) and stops at its end — in every
/// thread iterating it.
#[pyclass(module = "feedline", name = "EpochIterator", frozen)]
pub(crate) struct PyEpoch {
    loader: Py<PyLoader>,
    gen: u64,
    /// Each batch as `batch._dlpack_dict(convert)` (`Loader._epoch`).
    convert: Option<PyObject>,
    /// Then `post(value, batch)`.
    post: Option<PyObject>,
    /// Batches are not taken for checkpoints until `loader._record(item)`,
    /// and ends of passes come as ints (`Loader._epoch`).
    untracked: bool,
}

#[pymethods]
impl PyEpoch {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyObject>> {
        let item = self
            .loader
            .get()
            .next_timed(py, Some(self.gen), self.untracked)?;
        let b = match item {
            None => return Ok(None),
            Some(Item::PassEnd(p)) => return Ok(Some(p.into_pyobject(py)?.into_any().unbind())),
            Some(Item::Batch(b)) => b,
        };
        if self.convert.is_none() && self.post.is_none() {
            return Ok(Some(Bound::new(py, b)?.into_any().unbind()));
        }
        let b = Bound::new(py, b)?;
        let value = match &self.convert {
            Some(c) => b.get()._dlpack_dict(py, c.bind(py), false)?.into_any(),
            None => b.clone().into_any(),
        };
        match &self.post {
            Some(f) => Ok(Some(f.bind(py).call1((value, b))?.unbind())),
            None => Ok(Some(value.unbind())),
        }
    }
}

impl Drop for PyEpoch {
    /// A loop over the loader left by Ctrl-C (a KeyboardInterrupt raised
    /// in the loop's body unwinds the frame that holds this iterator)
    /// closes the loader, as one raised while `next()` waits does: the
    /// interrupt stopped the training, and the loader's threads stop with
    /// it (`state_dict()` still says where it stood).
    fn drop(&mut self) {
        // SAFETY: dealloc runs with the GIL held; PyErr_Occurred only reads
        // the thread's error indicator, leaving it set.
        let interrupted = unsafe {
            let e = pyo3::ffi::PyErr_Occurred();
            !e.is_null()
                && pyo3::ffi::PyErr_GivenExceptionMatches(e, pyo3::ffi::PyExc_KeyboardInterrupt)
                    != 0
        };
        if interrupted {
            let loader = self.loader.get();
            if !loader.inner.foreign() {
                let inner = loader.inner.clone();
                loader.counts.cancel();
                // No Python call here (an exception is set): only the GIL
                // released while the threads stop.
                Python::with_gil(|py| py.allow_threads(move || inner.close(Closed::Interrupted)));
            }
        }
    }
}

#[pymethods]
impl PyLoader {
    #[new]
    #[pyo3(signature = (files, batch_size=256, shuffle=10_000, seed=0, passes=None, readers=None,
        deterministic=false, drop_last=false, rank=None, world_size=None, on_error="fail",
        max_bad=None, schema=None, capacity=None, map=None, workers=None, map_schema=None,
        resume=None, transform=None, batches_in_flight=None, equalize=None, max_pixels=None,
        tokenizer=None, text_field=None, add_eos=false, add_bos=false, pack=None, pack_window=None,
        pack_policy=None, long_docs=None, pack_field=None, min_pool=None, shuffle_mode=None,
        index_dir=None, metrics_addr=None, autotune=false, cpus=None, memory_budget=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        files: &Bound<'_, PyAny>,
        batch_size: usize,
        shuffle: usize,
        seed: u64,
        passes: Option<u64>,
        readers: Option<usize>,
        deterministic: bool,
        drop_last: bool,
        rank: Option<usize>,
        world_size: Option<usize>,
        on_error: &str,
        max_bad: Option<u64>,
        schema: Option<Bound<'_, PyAny>>,
        capacity: Option<usize>,
        map: Option<Bound<'_, PyAny>>,
        workers: Option<usize>,
        map_schema: Option<Bound<'_, PyAny>>,
        resume: Option<Bound<'_, PyAny>>,
        transform: Option<&str>,
        batches_in_flight: Option<usize>,
        equalize: Option<&str>,
        max_pixels: Option<u64>,
        tokenizer: Option<std::path::PathBuf>,
        text_field: Option<String>,
        add_eos: bool,
        add_bos: bool,
        pack: Option<usize>,
        pack_window: Option<usize>,
        pack_policy: Option<&str>,
        long_docs: Option<&str>,
        pack_field: Option<String>,
        min_pool: Option<usize>,
        shuffle_mode: Option<&str>,
        index_dir: Option<std::path::PathBuf>,
        metrics_addr: Option<String>,
        autotune: bool,
        cpus: Option<usize>,
        memory_budget: Option<u64>,
    ) -> PyResult<Self> {
        let Translated {
            builder: b,
            again,
            endless,
            first_pass,
            resumed,
            image_transform,
            from_env,
        } = LoaderKeywords {
            files,
            batch_size,
            shuffle,
            seed,
            passes,
            readers,
            deterministic,
            drop_last,
            rank,
            world_size,
            on_error,
            max_bad,
            schema,
            capacity,
            map,
            workers,
            map_schema,
            resume,
            transform,
            batches_in_flight,
            equalize,
            max_pixels,
            tokenizer,
            text_field,
            add_eos,
            add_bos,
            pack,
            pack_window,
            pack_policy,
            long_docs,
            pack_field,
            min_pool,
            shuffle_mode,
            index_dir,
            metrics_addr,
            autotune,
            cpus,
            memory_budget,
        }
        .translate(py)?;
        let loader = build_interruptibly(py, move || b.build());
        logbridge::flush(py);
        let mut loader = Self::new_running(loader?, Some(again), endless, first_pass, resumed);
        loader.image_transform = image_transform;
        if from_env && loader.config.inputs.shard.world_size > 1 {
            keywords::warn_env_shard(py, &loader.config)?;
        }
        Ok(loader)
    }

    /// A push-mode loader and its feed: `loader, feed =
    /// Loader.with_feed(schema=..., batch_size=32, capacity=8)`. The loader
    /// yields what is pushed through `feed` (one pass), shuffled in a pool
    /// of `shuffle` instances (default 0: in push order), until
    /// `feed.close()`.
    #[staticmethod]
    #[pyo3(signature = (schema, batch_size=256, capacity=4, shuffle=0, seed=0,
        deterministic=false, drop_last=false))]
    #[allow(clippy::too_many_arguments)]
    fn with_feed(
        py: Python<'_>,
        schema: &Bound<'_, PyAny>,
        batch_size: usize,
        capacity: usize,
        shuffle: usize,
        seed: u64,
        deterministic: bool,
        drop_last: bool,
    ) -> PyResult<(PyLoader, PyFeed)> {
        logbridge::sync_level(py)?;
        let schema = schema::parse_schema(py, schema)?;
        let b = RustLoader::builder()
            .schema(schema)
            .batch(batch_size)
            .capacity(capacity)
            .shuffle(shuffle)
            .seed(seed)
            .deterministic(deterministic)
            .drop_last(drop_last)
            .shard_from_env(false);
        let (loader, feed) = build_interruptibly(py, move || b.build_with_feed())?;
        logbridge::flush(py);
        Ok((
            PyLoader::new_running(loader, None, false, 0, false),
            PyFeed::new(feed),
        ))
    }

    /// An iterator over the next epoch — or over the one in progress, when
    /// a loop left it early: with `passes=None` one pass, with `passes=N`
    /// all N passes.
    fn __iter__(slf: Bound<'_, Self>) -> PyResult<PyEpoch> {
        let py = slf.py();
        let gen = slf.get().begin_epoch(py)?;
        Ok(PyEpoch {
            loader: slf.unbind(),
            gen,
            convert: None,
            post: None,
            untracked: false,
        })
    }

    /// The next batch of the epoch in progress (one is begun if none is).
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyBatch>> {
        self.next_plain(py)
    }

    /// `iter(loader)` whose items are `post(batch._dlpack_dict(convert),
    /// batch)` (each step is optional) — the frameworks' adapters turn
    /// batches into their tensors inside the native iteration. `untracked`:
    /// the batches are not taken for checkpoints until `_record(item)` is
    /// called with each item in turn, and every end of a pass comes as its
    /// number (a thread that fetches ahead, as the pinned-memory copier
    /// does, hands them on; the consumer records them as it gets them).
    #[pyo3(signature = (convert=None, post=None, untracked=false))]
    fn _epoch(
        slf: Bound<'_, Self>,
        convert: Option<PyObject>,
        post: Option<PyObject>,
        untracked: bool,
    ) -> PyResult<PyEpoch> {
        let py = slf.py();
        let gen = slf.get().begin_epoch(py)?;
        Ok(PyEpoch {
            loader: slf.unbind(),
            gen,
            convert,
            post,
            untracked,
        })
    }

    /// Take `item` — a batch (the `Batch`) or an end of a pass (its number)
    /// from an untracked `_epoch` — for checkpoints: its consumer has it.
    fn _record(&self, py: Python<'_>, item: &Bound<'_, PyAny>) -> PyResult<()> {
        self.check_process()?;
        let popped = if let Ok(b) = item.downcast::<PyBatch>() {
            let b = b.get();
            Popped::Batch(feedline_actors::Delivered {
                pass: b.pass_,
                seq: b.seq,
                batch: b.batch.clone(),
            })
        } else {
            Popped::EndOfPass(item.extract::<u64>()?)
        };
        py.allow_threads(|| {
            let slot = self.lock();
            if let Some(l) = slot.loader.as_ref().or(slot.stopped.as_ref()) {
                l.record(&popped);
            }
        });
        Ok(())
    }

    /// Batches this rank gets in the epoch in progress (or the next one) —
    /// with `passes=N`, in one of its passes — from every input's record
    /// count (see `counting`); TypeError for a push-mode loader and a
    /// packing one.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.check_process()?;
        let pass =
            || py.allow_threads(|| self.lock().epochs.pass_for_len(self.config.order.passes));
        let counted = if let Some(p) = &self.config.batching.pack {
            let pass = pass();
            counting::packed_len(&self.config, p, || {
                py.allow_threads(|| {
                    let slot = self.lock();
                    let loader = slot.loader.as_ref().or(slot.stopped.as_ref());
                    loader.map(|l| l.packed_batches_in_pass(pass))
                })
            })
            .map_err(LenError::Packed)
        } else {
            self.counts.start();
            let counted = loop {
                if let Some(c) = py.allow_threads(|| self.counts.wait(WAIT_SLICE)) {
                    break c;
                }
                py.check_signals()?;
            };
            logbridge::flush(py);
            counting::len_from(self.counts.config(), counted, pass())
        };
        match counted {
            Ok(n) => Ok(n as usize),
            Err(e @ LenError::Failed(_)) => Err(FeedlineError::new_err(e.to_string())),
            Err(e) => Err(PyTypeError::new_err(e.to_string())),
        }
    }

    /// The loader's position (the Rust `Checkpoint`) as a JSON-serialisable
    /// dict: `Loader(..., resume=state)` or `load_state_dict(state)` goes
    /// on from exactly there.
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let cp = self.take_checkpoint(py)?;
        checkpoint::to_dict(py, &cp)
    }

    /// Go on from `state` (a `state_dict()`, or a list of them, one per rank
    /// of an old job), as `Loader(..., resume=state)` would: the pipeline
    /// starts again from there, and the next loop yields what is left of
    /// the epoch it was taken in.
    fn load_state_dict(&self, py: Python<'_>, state: &Bound<'_, PyAny>) -> PyResult<()> {
        self.check_process()?;
        let cps = checkpoint::resume_list(py, state)?;
        let first = cps.iter().map(|c| c.pass).min().unwrap_or(0);
        self.restart(py, Restart::Resume(cps), first)
    }

    /// Make the next loop run epoch `epoch` (as `DistributedSampler.set_epoch`):
    /// its order is the one a fresh loader's pass `epoch` has (in
    /// deterministic mode, the same batches). Free when `epoch` is the one the
    /// next loop runs anyway; otherwise the pipeline starts again at that
    /// pass (an epoch in progress is given up). With `passes=N` the next loop
    /// runs passes `epoch..N`.
    fn set_epoch(&self, py: Python<'_>, epoch: u64) -> PyResult<()> {
        self.check_process()?;
        Epochs::check_set_epoch(epoch, self.config.order.passes)
            .map_err(|e| PyValueError::new_err(Keywords::say(&e)))?;
        self.settle(py)?;
        let (free, closed) = py.allow_threads(|| {
            let slot = self.lock();
            (slot.epochs.set_is_free(epoch), slot.closed.clone())
        });
        if let Some(c) = closed {
            return Err(FeedlineError::new_err(c.message()));
        }
        if free {
            return Ok(());
        }
        self.restart(py, Restart::AtPass(epoch), epoch)
    }

    /// Write the loader's position to `path` atomically, as `feedline run
    /// --checkpoint` writes it (a JSON file; `resume=json.load(f)` reads it).
    /// Refused as the Rust `Loader::save_checkpoint` refuses (one rule,
    /// `feedline_actors::checkpoint::check_save_path`): a path that is not a
    /// regular file, one of this loader's input files, one in a missing
    /// directory — nothing written.
    fn checkpoint(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        let cp = self.take_checkpoint(py)?;
        let inputs = self.input_files(py)?;
        py.allow_threads(|| cp.save_atomic_sparing(&path, &inputs))
            .map_err(|e| checkpoint::save_err(&e))
    }

    /// Counters of the run so far: records, batches, bytes, records_per_s,
    /// per-stage busy/idle fractions under "stages", the bottleneck.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.check_process()?;
        let snapshot = self
            .stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .snapshot();
        let d = stats::stats_dict(py, &snapshot)?;
        d.set_item("python", self.gil.dict(py)?)?;
        let order = (self
            .order
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref())
        .and_then(|o| o.measures());
        if let Some(m) = order {
            let o = PyDict::new(py);
            o.set_item("pass", m.pass)?;
            o.set_item("records", m.records)?;
            o.set_item("neighbour_distance", m.neighbour_distance)?;
            o.set_item("files_per_batch", m.files_per_batch)?;
            d.set_item("order", o)?;
        }
        logbridge::flush(py);
        Ok(d)
    }

    /// The schema of the batches, as a dict like `schema=` takes (with a
    /// `map=` and no `map_schema=`: known from the first batch on).
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.check_process()?;
        match self.schema.get() {
            Some(s) => schema::schema_dict(py, s),
            None => Err(FeedlineError::new_err(
                "the map's output schema is inferred from its first output: it is known once the \
                 first batch has come (map_schema= declares it up front)",
            )),
        }
    }

    /// The fields the built-in image transform (`transform=`) decodes:
    /// `None` without one, or until they are known (the fields are found on
    /// the first instance transformed: those of one JPEG or PNG byte string).
    #[getter]
    fn image_fields(&self) -> PyResult<Option<Vec<String>>> {
        self.check_process()?;
        Ok(self
            .image_transform
            .as_ref()
            .and_then(|t| t.image_fields())
            .map(<[String]>::to_vec))
    }

    /// This process's data-parallel rank (given, from `RANK`, or 0).
    #[getter]
    fn rank(&self) -> PyResult<usize> {
        self.check_process()?;
        Ok(self.config.inputs.shard.rank)
    }

    /// The data-parallel world size (given, from `WORLD_SIZE`, or 1).
    #[getter]
    fn world_size(&self) -> PyResult<usize> {
        self.check_process()?;
        Ok(self.config.inputs.shard.world_size)
    }

    /// Stop every thread of the loader (also on `with` exit and when
    /// dropped). From another thread, a `next()` waiting there returns
    /// within a wait slice and ends the iteration. In a forked child it
    /// only forgets the parent's loader there.
    fn close(&self, py: Python<'_>) {
        self.close_for(py, Closed::ByUser);
        logbridge::flush(py);
    }

    /// True once closed: by close(), by its end (every pass of `passes=N`
    /// delivered), an error or Ctrl-C — and in a process other than the
    /// one that made it.
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        self.inner.foreign()
            || self.inner.closing.load(Ordering::SeqCst)
            || py.allow_threads(|| self.lock().closed.is_some())
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyResult<PyRef<'_, Self>> {
        slf.check_process()?;
        Ok(slf)
    }

    #[pyo3(signature = (_t=None, _v=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Option<PyObject>,
        _v: Option<PyObject>,
        _tb: Option<PyObject>,
    ) -> bool {
        self.close(py);
        false
    }
}
