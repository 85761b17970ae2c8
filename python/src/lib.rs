//! The Python module `feedline`: a thin PyO3 layer over
//! `feedline_actors::Loader`. Batches are exposed as mappings of field name
//! to numpy arrays that view the batch's Rust buffer (made by numpy's C
//! API, [`npapi`]; the array's base holds the `Arc<Batch>`), of a
//! small ndarray subclass, `feedline.FeedArray`, that adds DLPack export
//! ([`dlpack`]). The GIL is released while waiting — for a batch, for room
//! to push, for threads to stop — in slices, with signals checked between
//! slices so Ctrl-C raises KeyboardInterrupt. Push-mode loaders
//! (`Loader.with_feed`) are fed through [`feed::PyFeed`].

mod buffer;
mod checkpoint;
mod dlpack;
mod epochs;
mod feed;
mod logbridge;
mod map;
mod npapi;
mod pixels;
mod plan;
mod py_batch;
mod schema;
mod stats;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use feedline::Schema;
use feedline_actors::counting::{self, LenError, RecordCounts};
use feedline_actors::epochs::{Epochs, PassEnd};
use feedline_actors::{
    Equalize, ErrorPolicy, Given, Loader as RustLoader, LoaderBuilder, PipelineConfig,
    PipelineError, Popped, Setting, SettingError, Spelling, Stats, Value,
};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyFileNotFoundError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyModule, PyType};

use epochs::{Closed, Settled, Slot};
use feed::PyFeed;
use py_batch::PyBatch;

create_exception!(
    feedline,
    FeedlineError,
    PyException,
    "A bad record (with its file, record and offset), or a pipeline failure."
);

/// How long one wait for a batch lasts before signals are checked.
const WAIT_SLICE: Duration = Duration::from_millis(50);

static NUMPY: GILOnceCell<Py<PyModule>> = GILOnceCell::new();
static FEED_ARRAY: GILOnceCell<Py<PyType>> = GILOnceCell::new();

/// The numpy module (imported once).
pub(crate) fn numpy(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    NUMPY
        .get_or_try_init(py, || py.import("numpy").map(Bound::unbind))
        .map(|m| m.bind(py))
}

/// `feedline.FeedArray`, the ndarray subclass batches hand out.
pub(crate) fn feed_array_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    FEED_ARRAY
        .get(py)
        .map(|t| t.bind(py))
        .ok_or_else(|| PyException::new_err("feedline is not initialised"))
}

/// The ndarray subclass: numpy's behaviour, plus `__dlpack__` that exports
/// the batch buffer itself (numpy refuses to export read-only arrays to
/// DLPack < 1.0 consumers such as `torch.from_dlpack`).
const FEED_ARRAY_SRC: &std::ffi::CStr = cr#"
import numpy as _np

class FeedArray(_np.ndarray):
    """A numpy array viewing a feedline batch's buffer (read-only, zero-copy).

    It behaves as numpy.ndarray; ``__dlpack__`` hands the same memory to
    ``torch.from_dlpack``, ``jax.dlpack.from_dlpack`` or ``numpy.from_dlpack``
    without a copy, keeping the batch alive until the importer is done.
    Do not write through such an import: the buffer is shared.
    """

    __slots__ = ()

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if dl_device is not None and tuple(dl_device) != (1, 0):
            raise BufferError(f"feedline arrays are on the CPU (1, 0), not {dl_device}")
        if stream is not None and stream != -1:
            raise BufferError("a CPU array takes no stream")
        if copy:
            return _np.array(self).__dlpack__()
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        capsule = _dlpack_capsule(self, versioned)
        if capsule is None:
            # Not (or no longer) a view of a batch buffer: numpy's own export.
            plain = _np.asarray(self)
            if max_version is None:
                return plain.__dlpack__()
            return plain.__dlpack__(max_version=max_version)
        return capsule

    def __dlpack_device__(self):
        return (1, 0)

    def __array_wrap__(self, arr, context=None, return_scalar=False):
        # Results of computations own fresh memory: plain arrays (and
        # scalars for full reductions), not views of a batch.
        if return_scalar or arr.ndim == 0:
            return arr[()]
        return arr if type(arr) is _np.ndarray else arr.view(_np.ndarray)
"#;

/// Python's spelling of the settings: its keywords (`batch_size`,
/// `min_pool=3000`, `pack_policy="concat"`); a setting with no keyword by
/// its key.
pub(crate) struct Keywords;

impl Keywords {
    fn keyword(setting: Setting) -> &'static str {
        use Setting as S;
        match setting {
            S::FileSet => "file sets",
            S::PushSource => "Loader.with_feed",
            S::Shard => "rank/world_size",
            S::Batch => "batch_size",
            S::MapSchema => "map_schema",
            S::Tokenizer => "tokenizer",
            S::OnError => "on_error",
            s => s.key(),
        }
    }

    /// `e` as Python says it.
    pub(crate) fn say(e: &SettingError) -> String {
        format!("invalid configuration: {}", e.spelled(&Keywords))
    }
}

impl Spelling for Keywords {
    fn name(&self, setting: Setting) -> String {
        Keywords::keyword(setting).to_string()
    }

    fn given(&self, setting: Setting, value: &Value) -> String {
        let k = Keywords::keyword(setting);
        match value {
            Value::Number(n) => format!("{k}={n}"),
            Value::Text(t) => format!("{k}={t:?}"),
        }
    }
}

fn to_py_err(e: PipelineError) -> PyErr {
    match e {
        PipelineError::Config(e) => PyValueError::new_err(Keywords::say(&e)),
        other => FeedlineError::new_err(other.to_string()),
    }
}

/// A start-up error: settings (a glob that matches nothing, an unknown
/// format) are ValueError, a missing file FileNotFoundError, the rest (what
/// the data says: a file that is not what its format says, …) as during
/// iteration.
fn start_err(e: PipelineError) -> PyErr {
    use feedline::checkpoint::CheckpointError as C;
    use feedline::Error as E;
    if let PipelineError::Checkpoint(c) = &e {
        // A resume that does not fit these settings or inputs: what changed.
        if !matches!(&**c, C::Io { .. } | C::Read(_)) {
            return PyValueError::new_err(e.to_string());
        }
    }
    if let PipelineError::Data(d) = &e {
        match &**d {
            E::Config(_) | E::UnknownFormat { .. } => return PyValueError::new_err(e.to_string()),
            E::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                return PyFileNotFoundError::new_err(e.to_string())
            }
            _ => {}
        }
    }
    to_py_err(e)
}

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

/// `files=`: a path (str or path-like) or a sequence of them.
fn file_list(py: Python<'_>, files: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    let fspath = py.import("os")?.getattr("fspath")?;
    let one = |f: &Bound<'_, PyAny>| -> PyResult<Option<String>> {
        match fspath.call1((f,)) {
            Ok(p) => p
                .extract::<String>()
                .map(Some)
                .map_err(|_| PyValueError::new_err(format!("files: {f} is not a str path"))),
            Err(_) => Ok(None),
        }
    };
    if let Some(p) = one(files)? {
        return Ok(vec![p]);
    }
    let iter = files.try_iter().map_err(|_| {
        PyValueError::new_err(format!(
            "files: expected a path or a list of paths, got {}",
            files.get_type()
        ))
    })?;
    iter.map(|f| {
        let f = f?;
        one(&f)?.ok_or_else(|| {
            PyValueError::new_err(format!(
                "files: {} is not a path",
                f.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        })
    })
    .collect()
}

fn error_policy(on_error: &str, max_bad: Option<u64>) -> PyResult<ErrorPolicy> {
    match on_error {
        "fail" => Ok(ErrorPolicy::Fail),
        "skip" => Ok(ErrorPolicy::Skip {
            max_bad,
            max_bad_fraction: None,
        }),
        other => Err(PyValueError::new_err(format!(
            "on_error: expected \"fail\" or \"skip\", got {other:?}"
        ))),
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
fn close_all(py: Python<'_>) {
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
struct PyLoader {
    /// The pipeline and epochs; shared with [`LIVE`] (closed at exit).
    inner: Arc<Inner>,
    /// Starts the pipeline again (`set_epoch`, `load_state_dict`): the
    /// settings as given, the shard fixed, no resume; `None` in push mode.
    builder: Option<LoaderBuilder>,
    /// `passes=None`: an epoch is one pass, and passes never run out.
    endless: bool,
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
                passes: config.passes,
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
        let builder = builder.map(|b| b.shard(config.shard.rank, config.shard.world_size));
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
            endless,
            gil: stats::GilClock::default(),
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
    fn take_checkpoint(&self, py: Python<'_>) -> PyResult<feedline::checkpoint::Checkpoint> {
        self.check_process()?;
        self.on_pipeline(py, |l| l.checkpoint())
    }

    /// The local files the loader reads, which a checkpoint is never saved
    /// over (found once).
    fn input_files(&self, py: Python<'_>) -> PyResult<Arc<feedline::checkpoint::InputFiles>> {
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
                    slot.exhausted(self.config.passes);
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
    Resume(Vec<feedline::checkpoint::Checkpoint>),
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

/// `passes=`: None (epochs by iteration, endless) or a number of passes
/// (0 is refused by the settings' check, as every face's is).
fn passes_arg(passes: Option<u64>) -> (u64, bool) {
    match passes {
        None => (feedline_actors::ENDLESS, true),
        Some(n) => (n, false),
    }
}

/// The packing of `pack=` and its settings; the settings given noted in
/// `given` (the settings' check refuses those that do not apply).
fn pack_arg(
    pack: Option<usize>,
    window: Option<usize>,
    policy: Option<&str>,
    long_docs: Option<&str>,
    field: Option<String>,
    given: &mut Given,
) -> PyResult<Option<feedline_actors::Pack>> {
    let policy: Option<feedline_actors::PackPolicy> = policy
        .map(|p| {
            p.parse()
                .map_err(|e: String| PyValueError::new_err(format!("pack_policy: {e}")))
        })
        .transpose()?;
    let long_docs: Option<feedline_actors::LongDocs> = long_docs
        .map(|l| {
            l.parse()
                .map_err(|e: String| PyValueError::new_err(format!("long_docs: {e}")))
        })
        .transpose()?;
    given.pack_policy = policy;
    given.pack_window = window;
    given.long_docs = long_docs;
    given.pack_field = field.is_some();
    let Some(length) = pack else {
        return Ok(None);
    };
    let mut p = feedline_actors::Pack::new(
        policy.unwrap_or(feedline_actors::PackPolicy::BestFit),
        length,
    );
    if let Some(w) = window {
        p = p.window(w);
    }
    if let Some(l) = long_docs {
        p = p.long_docs(l);
    }
    if let Some(f) = field {
        p = p.field(&f);
    }
    // Its values are judged by the settings' check, with the rest.
    Ok(Some(p))
}

/// `equalize=`: None, "drop" or "pad" (with `pack=`, in packed rows).
fn equalize_arg(equalize: Option<&str>) -> PyResult<Equalize> {
    match equalize {
        None | Some("off") => Ok(Equalize::Off),
        Some("drop") => Ok(Equalize::Drop),
        Some("pad") => Ok(Equalize::Pad),
        Some(other) => Err(PyValueError::new_err(format!(
            "equalize: expected \"drop\" (every rank stops at the smallest rank's batches) or \
             \"pad\" (every rank repeats instances up to the largest's), or None, got {other:?}"
        ))),
    }
}

/// Warn (`UserWarning`, and a warning on the `"feedline"` logger) that the
/// shard was taken from `RANK`/`WORLD_SIZE`: a process that meant to read
/// everything would otherwise read a part without a word.
fn warn_env_shard(py: Python<'_>, config: &PipelineConfig) -> PyResult<()> {
    let feedline_actors::Shard { rank, world_size } = config.shard;
    let env = |n: &str| std::env::var(n).unwrap_or_else(|_| "unset".into());
    let msg = format!(
        "feedline.Loader: rank={rank} and world_size={world_size} were taken from the environment \
         (RANK={}, WORLD_SIZE={}): this loader reads 1/{world_size} of the data ({:.1}%) — \
         pass rank=0, world_size=1 to read all of it, or rank= and world_size= to say so",
        env("RANK"),
        env("WORLD_SIZE"),
        100.0 / world_size as f64,
    );
    py.import("logging")?
        .call_method1("getLogger", ("feedline",))?
        .call_method1("warning", (msg.as_str(),))?;
    let category = py.get_type::<pyo3::exceptions::PyUserWarning>();
    PyErr::warn(py, &category, &std::ffi::CString::new(msg)?, 1)
}

/// An epoch's iterator: what `iter(loader)` gives. It yields the batches
/// of the epoch it began (or joined) and stops at its end — in every
/// thread iterating it.
#[pyclass(module = "feedline", name = "EpochIterator", frozen)]
struct PyEpoch {
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
    #[pyo3(signature = (files, batch_size=256, shuffle=10_000, seed=0, passes=None, readers=2,
        deterministic=false, drop_last=false, rank=None, world_size=None, on_error="fail",
        max_bad=None, schema=None, capacity=None, map=None, workers=None, map_schema=None,
        resume=None, transform=None, batches_in_flight=None, equalize=None, max_pixels=None,
        tokenizer=None, text_field=None, add_eos=false, add_bos=false, pack=None, pack_window=None,
        pack_policy=None, long_docs=None, pack_field=None, min_pool=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        files: &Bound<'_, PyAny>,
        batch_size: usize,
        shuffle: usize,
        seed: u64,
        passes: Option<u64>,
        readers: usize,
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
    ) -> PyResult<Self> {
        logbridge::sync_level(py)?;
        let (passes, endless) = passes_arg(passes);
        let mut image_transform = None;
        let mut b = RustLoader::builder()
            .files(file_list(py, files)?)
            .batch(batch_size)
            .shuffle(shuffle)
            .seed(seed)
            .passes(passes)
            .readers(readers)
            .deterministic(deterministic)
            .drop_last(drop_last)
            .equalize(equalize_arg(equalize)?)
            .error_policy(error_policy(on_error, max_bad)?);
        if let Some(s) = schema.filter(|s| !s.is_none()) {
            b = b.schema(schema::parse_schema(py, &s)?);
        }
        if let Some(c) = capacity {
            b = b.capacity(c);
        }
        if let Some(k) = batches_in_flight {
            b = b.batches_in_flight(k);
        }
        let map_schema = match map_schema.filter(|s| !s.is_none()) {
            Some(s) => Some(schema::parse_schema(py, &s)?),
            None => None,
        };
        if let Some(m) = min_pool {
            b = b.min_pool(m);
        }
        // What was given, for the settings' check (which holds every rule
        // across settings: this only translates keywords).
        let map = map.filter(|m| !m.is_none());
        let mut given = Given {
            max_bad,
            tokenizer: tokenizer.is_some(),
            map: map.is_some(),
            transform: transform.is_some(),
            max_pixels,
            map_schema: map_schema.is_some(),
            workers,
            text_field: text_field.is_some(),
            add_eos,
            add_bos,
            ..Given::default()
        };
        if let Some(p) = pack_arg(
            pack,
            pack_window,
            pack_policy,
            long_docs,
            pack_field,
            &mut given,
        )? {
            b = b.pack(p);
        }
        if let Some(spec) = transform {
            let image =
                feedline_vision::ImageTransform::parse(spec, feedline_vision::ImageFields::Detect)
                    .map_err(|e| PyValueError::new_err(format!("transform={spec:?}: {e}")))?;
            let image = match max_pixels {
                Some(n) if n > 0 => image.max_pixels(n),
                _ => image,
            };
            let image = std::sync::Arc::new(image);
            image_transform = Some(image.clone());
            b = b.transform(image);
        }
        if let Some(f) = map {
            if !f.is_callable() {
                return Err(PyValueError::new_err(format!(
                    "map: expected a callable (instance, rng) -> dict, got {}",
                    f.get_type()
                )));
            }
            if let Some(s) = &map_schema {
                b = b.output_schema(s.clone());
            }
            b = b.transform(std::sync::Arc::new(feedline::transform::map_fn(
                map::python_map(f.unbind(), map_schema),
            )));
        }
        if let Some(path) = tokenizer.filter(|_| !(given.map || given.transform)) {
            let bad = |e: feedline_actors::feedline::tokenize::TokenizeError| {
                PyValueError::new_err(format!("tokenizer={}: {e}", path.display()))
            };
            let field = text_field.as_deref().unwrap_or("text");
            let stage = feedline_actors::Tokenize::new(
                feedline_actors::Tokenizer::from_file(&path).map_err(bad)?,
                field,
            )
            .add_eos(add_eos)
            .map_err(bad)?
            .add_bos(add_bos)
            .map_err(bad)?;
            stage.check().map_err(bad)?;
            b = b.tokenize_with(stage);
        }
        if let Some(w) = workers {
            b = b.workers(w);
        }
        b = b.given(given);
        let from_env = rank.is_none()
            && world_size.is_none()
            && (std::env::var_os("RANK").is_some() || std::env::var_os("WORLD_SIZE").is_some());
        b = match feedline_actors::shard_given(rank, world_size)
            .map_err(|e| PyValueError::new_err(Keywords::say(&e)))?
        {
            Some(shard) => b.shard(shard.rank, shard.world_size),
            None => b.shard_from_env(true),
        };
        // Restarts (set_epoch, load_state_dict) start from the settings
        // without the resume.
        let again = b.clone();
        let mut first_pass = 0;
        let resumed = match resume.filter(|r| !r.is_none()) {
            Some(r) => {
                let cps = checkpoint::resume_list(py, &r)?;
                first_pass = cps.iter().map(|c| c.pass).min().unwrap_or(0);
                for cp in cps {
                    b = b.resume(cp);
                }
                true
            }
            None => false,
        };
        let loader = build_interruptibly(py, move || b.build());
        logbridge::flush(py);
        let mut loader = Self::new_running(loader?, Some(again), endless, first_pass, resumed);
        loader.image_transform = image_transform;
        if from_env && loader.config.shard.world_size > 1 {
            warn_env_shard(py, &loader.config)?;
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
        let pass = || py.allow_threads(|| self.lock().epochs.pass_for_len(self.config.passes));
        let counted = if let Some(p) = &self.config.pack {
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
            counting::len_from(&self.config, counted, pass())
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
        Epochs::check_set_epoch(epoch, self.config.passes)
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
    /// `feedline::checkpoint::check_save_path`): a path that is not a
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
        Ok(self.config.shard.rank)
    }

    /// The data-parallel world size (given, from `WORLD_SIZE`, or 1).
    #[getter]
    fn world_size(&self) -> PyResult<usize> {
        self.check_process()?;
        Ok(self.config.shard.world_size)
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

/// `gil_used = false`: on a free-threaded CPython (3.13t and later) the
/// module does not turn the GIL back on. Everything it shares between
/// threads is behind Rust's own synchronisation (the loader behind a mutex,
/// counters atomic, every class frozen and `Sync`); the per-batch caches
/// (`GILOnceCell`) may then make a field's view twice when two threads ask at
/// once, keeping one — both are views of the same buffer.
///
/// The native module is `feedline._native`; the package `feedline`
/// (`python/pysrc/feedline`) re-exports it, with `feedline.torch` and
/// `feedline.jax` beside it.
#[pymodule(gil_used = false)]
#[pyo3(name = "_native")]
fn feedline_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    logbridge::install();
    // `threading` imported here, on the importing (main) thread: the first
    // import of `threading` takes the thread it runs on for the main thread,
    // and a map= worker (which keeps its thread state until the loader
    // stops, see `map`) taken so would make the interpreter's exit wait for
    // that worker before the exit hook that stops it.
    py.import("threading")?;
    m.add_class::<PyLoader>()?;
    m.add_class::<PyEpoch>()?;
    m.add_class::<PyBatch>()?;
    m.add_class::<PyFeed>()?;
    m.add("FeedlineError", py.get_type::<FeedlineError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(logbridge::_flush_logs, m)?)?;
    m.add_function(wrap_pyfunction!(pixels::_expand_pixels, m)?)?;
    m.add_function(wrap_pyfunction!(pixels::_pixel_steps, m)?)?;
    plan::register(m)?;
    let mapping = py.import("collections.abc")?.getattr("Mapping")?;
    mapping.call_method1("register", (py.get_type::<PyBatch>(),))?;
    let ns = PyDict::new(py);
    ns.set_item("__name__", "feedline")?;
    ns.set_item(
        "_dlpack_capsule",
        wrap_pyfunction!(dlpack::dlpack_capsule, m)?,
    )?;
    py.run(FEED_ARRAY_SRC, Some(&ns), None)?;
    let cls = ns
        .get_item("FeedArray")?
        .ok_or_else(|| PyException::new_err("FeedArray was not defined"))?;
    let cls = cls.downcast_into::<PyType>()?;
    m.add("FeedArray", &cls)?;
    let _ = FEED_ARRAY.set(py, cls.unbind());
    py.import("atexit")?
        .call_method1("register", (wrap_pyfunction!(close_all, m)?,))?;
    Ok(())
}
