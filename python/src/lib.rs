//! The Python module `feedline`: a thin PyO3 layer over
//! `feedline_actors::Loader`. Batches are exposed as mappings of field name
//! to numpy arrays that view the batch's Rust buffer (made by numpy's C
//! API, [`npapi`]; the array's base holds the `Arc<Batch>`), of a
//! small ndarray subclass, `feedline.FeedArray`, that adds DLPack export
//! ([`dlpack`]). The GIL is released while waiting — for a batch, for room
//! to push, for threads to stop — in slices, with signals checked between
//! slices so Ctrl-C raises KeyboardInterrupt. Push-mode loaders
//! (`Loader.with_feed`) are fed through [`feed::PyFeed`].

mod batch;
mod checkpoint;
mod dlpack;
mod feed;
mod map;
mod npapi;
mod schema;
mod stats;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use feedline::Schema;
use feedline_actors::{
    ErrorPolicy, Loader as RustLoader, LoaderBuilder, PipelineConfig, PipelineError, Stats,
};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyFileNotFoundError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyModule, PyType};

use batch::PyBatch;
use feed::PyFeed;

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

fn to_py_err(e: PipelineError) -> PyErr {
    match e {
        PipelineError::Config(_) => PyValueError::new_err(e.to_string()),
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
        "fail" => {
            if max_bad.is_some() {
                return Err(PyValueError::new_err(
                    "max_bad is only meaningful with on_error=\"skip\"",
                ));
            }
            Ok(ErrorPolicy::Fail)
        }
        "skip" => Ok(ErrorPolicy::Skip {
            max_bad,
            max_bad_fraction: None,
        }),
        other => Err(PyValueError::new_err(format!(
            "on_error: expected \"fail\" or \"skip\", got {other:?}"
        ))),
    }
}

/// A running loader, shared by its Python object and [`LIVE`].
struct Inner {
    /// `None` once closed.
    loader: Mutex<Option<RustLoader>>,
    /// Set first thing by `close`: a `next()` in progress stops taking the
    /// lock (an unfair mutex could otherwise keep `close` waiting).
    closing: AtomicBool,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Option<RustLoader>> {
        self.loader.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stop every thread (call without the GIL).
    fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        let taken = self.lock().take();
        if let Some(mut l) = taken {
            l.shutdown();
        }
    }
}

/// Every loader not yet closed, closed by [`close_all`] at interpreter exit.
static LIVE: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());

/// Close every live loader (registered with `atexit`): at exit, while the
/// interpreter still runs threads, not in its finalization — a transform
/// worker inside a Python `map=` then would be killed mid-call.
#[pyfunction]
fn close_all(py: Python<'_>) {
    let all: Vec<_> = LIVE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .drain(..)
        .filter_map(|w| w.upgrade())
        .collect();
    py.allow_threads(move || all.iter().for_each(|inner| inner.close()));
}

/// The loader: iterate it for batches (all passes, in order).
///
/// Every method may be called from any thread: the Rust loader sits behind a
/// mutex that is only ever waited for with the GIL released (a `next()`
/// holds it for one wait slice at a time), and `stats()`, `schema` and
/// `len()` do not need it.
#[pyclass(module = "feedline", name = "Loader", frozen)]
struct PyLoader {
    /// The loader; shared with [`LIVE`] (closed at exit).
    inner: Arc<Inner>,
    stats: Stats,
    /// The batches' schema: known at the start, or — a map whose output
    /// schema is inferred — set from the first batch.
    schema: OnceLock<Schema>,
    config: PipelineConfig,
    /// `len()`: batches per pass, or why it is not known (computed once).
    len: OnceLock<Result<u64, stats::LenUnknown>>,
    /// Time `next()` held the GIL (`stats()["python"]`).
    gil: stats::GilClock,
}

impl PyLoader {
    fn new_running(loader: RustLoader) -> Self {
        let config = loader.config().clone();
        let stats_handle = loader.stats_handle();
        let schema = OnceLock::new();
        let inferred =
            config.transforms.instance.is_some() && config.transforms.output_schema.is_none();
        if !inferred {
            let _ = schema.set(loader.schema().clone());
        }
        let inner = Arc::new(Inner {
            loader: Mutex::new(Some(loader)),
            closing: AtomicBool::new(false),
        });
        {
            let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
            live.retain(|w| w.strong_count() > 0);
            live.push(Arc::downgrade(&inner));
        }
        PyLoader {
            stats: stats_handle,
            schema,
            config,
            inner,
            len: OnceLock::new(),
            gil: stats::GilClock::default(),
        }
    }

    fn start(py: Python<'_>, b: LoaderBuilder) -> PyResult<Self> {
        let loader = build_interruptibly(py, move || b.build())?;
        Ok(Self::new_running(loader))
    }

    /// The loader, locked (call with the GIL released).
    fn lock(&self) -> MutexGuard<'_, Option<RustLoader>> {
        self.inner.lock()
    }

    /// The checkpoint of the batches taken so far (without the GIL: the
    /// first one stamps the inputs).
    fn take_checkpoint(&self, py: Python<'_>) -> PyResult<feedline::checkpoint::Checkpoint> {
        match py.allow_threads(|| self.lock().as_mut().map(|l| l.checkpoint())) {
            None => Err(PyValueError::new_err(
                "the loader is closed: take its state_dict() before close()",
            )),
            Some(r) => r.map_err(to_py_err),
        }
    }

    /// The next batch, waited for without the GIL (`released` grows by the
    /// time spent so).
    fn next_batch(&self, py: Python<'_>, released: &mut Duration) -> PyResult<Option<PyBatch>> {
        loop {
            if self.inner.closing.load(Ordering::SeqCst) {
                return Ok(None);
            }
            let t = Instant::now();
            // The batch's Python object is made before the GIL is taken back
            // (`PyBatch::new` reads the batch's headers: cache misses, off the GIL).
            let r = py.allow_threads(|| {
                self.lock().as_mut().map(|l| {
                    l.next_timeout(WAIT_SLICE)
                        .map(|r| r.map(|d| PyBatch::new(d.batch, d.pass, d.seq)))
                })
            });
            *released += t.elapsed();
            match r {
                // Closed, or the end of the data.
                None | Some(None) => return Ok(None),
                Some(Some(Ok(b))) => {
                    if self.schema.get().is_none() {
                        let _ = self.schema.set(b.batch.schema().clone());
                    }
                    return Ok(Some(b));
                }
                Some(Some(Err(PipelineError::Timeout { .. }))) => {
                    if let Err(e) = py.check_signals() {
                        self.close(py);
                        return Err(e);
                    }
                }
                Some(Some(Err(e))) => {
                    self.close(py);
                    return Err(to_py_err(e));
                }
            }
        }
    }
}

impl Drop for PyLoader {
    /// Stop the loader with the GIL released: the threads it joins may be
    /// waiting for the GIL (a Python `map=` on the transform workers).
    fn drop(&mut self) {
        // Closed already (by close(), an error, or the exit hook): nothing to wait for.
        if let Ok(g) = self.inner.loader.try_lock() {
            if g.is_none() {
                return;
            }
        }
        // The lock too is waited for without the GIL (the exit hook may hold it).
        let inner = self.inner.clone();
        Python::with_gil(|py| py.allow_threads(move || inner.close()));
    }
}

#[pymethods]
impl PyLoader {
    #[new]
    #[pyo3(signature = (files, batch_size=256, shuffle=10_000, seed=0, passes=1, readers=2,
        deterministic=false, drop_last=false, rank=None, world_size=None, on_error="fail",
        max_bad=None, schema=None, capacity=None, map=None, workers=None, map_schema=None,
        resume=None, transform=None, batches_in_flight=None, max_pixels=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        files: &Bound<'_, PyAny>,
        batch_size: usize,
        shuffle: usize,
        seed: u64,
        passes: u64,
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
        max_pixels: Option<u64>,
    ) -> PyResult<Self> {
        let mut b = RustLoader::builder()
            .files(file_list(py, files)?)
            .batch(batch_size)
            .shuffle(shuffle)
            .seed(seed)
            .passes(passes)
            .readers(readers)
            .deterministic(deterministic)
            .drop_last(drop_last)
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
        match (map.filter(|m| !m.is_none()), transform) {
            (Some(_), Some(t)) => {
                return Err(PyValueError::new_err(format!(
                    "give map= or transform={t:?}, not both (a Python map after the built-in \
                     transform is not supported)"
                )))
            }
            _ if max_pixels.is_some() && transform.is_none() => {
                return Err(PyValueError::new_err(
                    "max_pixels is a setting of transform= (the images it decodes)",
                ))
            }
            (None, Some(spec)) => {
                if map_schema.is_some() {
                    return Err(PyValueError::new_err(
                        "map_schema is a setting of map=: the built-in transforms know their output",
                    ));
                }
                let image = feedline_vision::ImageTransform::parse(
                    spec,
                    feedline_vision::ImageFields::Detect,
                )
                .map_err(|e| PyValueError::new_err(format!("transform={spec:?}: {e}")))?;
                let image = match max_pixels {
                    Some(0) => return Err(PyValueError::new_err("max_pixels must be >= 1")),
                    Some(n) => image.max_pixels(n),
                    None => image,
                };
                b = b.transform(std::sync::Arc::new(image));
                if let Some(w) = workers {
                    b = b.workers(w);
                }
            }
            (Some(f), None) => {
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
                if let Some(w) = workers {
                    b = b.workers(w);
                }
            }
            (None, None) if map_schema.is_some() || workers.is_some() => {
                return Err(PyValueError::new_err(
                    "map_schema and workers are settings of map= (workers also of transform=): \
                     give a map or a transform",
                ))
            }
            (None, None) => {}
        }
        if let Some(r) = resume.filter(|r| !r.is_none()) {
            for cp in checkpoint::resume_list(py, &r)? {
                b = b.resume(cp);
            }
        }
        b = match (rank, world_size) {
            (Some(r), Some(w)) => b.shard(r, w),
            (None, None) => b.shard_from_env(true),
            _ => {
                return Err(PyValueError::new_err(
                    "rank and world_size: give both or neither (neither: from RANK / WORLD_SIZE, else 0 / 1)",
                ))
            }
        };
        Self::start(py, b)
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
        Ok((PyLoader::new_running(loader), PyFeed::new(feed)))
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyBatch>> {
        let entered = Instant::now();
        let mut released = Duration::ZERO;
        let r = self.next_batch(py, &mut released);
        self.gil.add(entered.elapsed().saturating_sub(released));
        r
    }

    /// Batches per pass for this rank, when the inputs tell their record
    /// counts (npy/npz, Parquet); else TypeError, as for any unsized iterable.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let len = match self.len.get() {
            Some(l) => l,
            None => {
                let l = py.allow_threads(|| stats::batches_per_pass(&self.config));
                self.len.get_or_init(|| l)
            }
        };
        match len {
            Ok(n) => Ok(*n as usize),
            Err(why) => Err(PyTypeError::new_err(format!(
                "this loader has no len(): the batches per pass are not known ({why})"
            ))),
        }
    }

    /// The loader's position (the Rust `Checkpoint`) as a JSON-serialisable
    /// dict: `Loader(..., resume=state)` goes on from exactly there.
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let cp = self.take_checkpoint(py)?;
        checkpoint::to_dict(py, &cp)
    }

    /// Write the loader's position to `path` atomically, as `feedline run
    /// --checkpoint` writes it (a JSON file; `resume=json.load(f)` reads it).
    fn checkpoint(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        let cp = self.take_checkpoint(py)?;
        py.allow_threads(|| cp.save_atomic(&path))
            .map_err(|e| checkpoint::save_err(&e))
    }

    /// Counters of the run so far: records, batches, bytes, records_per_s,
    /// per-stage busy/idle fractions under "stages", the bottleneck.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = stats::stats_dict(py, &self.stats.snapshot())?;
        d.set_item("python", self.gil.dict(py)?)?;
        Ok(d)
    }

    /// The schema of the batches, as a dict like `schema=` takes (with a
    /// `map=` and no `map_schema=`: known from the first batch on).
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        match self.schema.get() {
            Some(s) => schema::schema_dict(py, s),
            None => Err(FeedlineError::new_err(
                "the map's output schema is inferred from its first output: it is known once the \
                 first batch has come (map_schema= declares it up front)",
            )),
        }
    }

    /// Stop every thread of the loader (also on `with` exit and when
    /// dropped). From another thread, a `next()` waiting there returns
    /// within a wait slice and ends the iteration.
    fn close(&self, py: Python<'_>) {
        py.allow_threads(|| self.inner.close());
    }

    /// True once closed (or ended by an error or Ctrl-C).
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        self.inner.closing.load(Ordering::SeqCst) || py.allow_threads(|| self.lock().is_none())
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
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
#[pymodule(gil_used = false)]
#[pyo3(name = "feedline")]
fn feedline_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    // `threading` imported here, on the importing (main) thread: the first
    // import of `threading` takes the thread it runs on for the main thread,
    // and a map= worker (which keeps its thread state until the loader
    // stops, see `map`) taken so would make the interpreter's exit wait for
    // that worker before the exit hook that stops it.
    py.import("threading")?;
    m.add_class::<PyLoader>()?;
    m.add_class::<PyBatch>()?;
    m.add_class::<PyFeed>()?;
    m.add("FeedlineError", py.get_type::<FeedlineError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
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
