//! The Python module `feedline`: a thin PyO3 layer over
//! `feedline_actors::Loader`. Batches are exposed as mappings of field name
//! to numpy arrays that view the batch's Rust buffer (via
//! `__array_interface__`; the array's base holds the `Arc<Batch>`). The GIL
//! is released while waiting for a batch, in slices, with signals checked
//! between slices so Ctrl-C raises KeyboardInterrupt.
// pyo3 0.22's #[pymethods] expansion converts PyErr into PyErr (clippy's
// useless_conversion on every PyResult method); the code has none itself.
#![allow(clippy::useless_conversion)]

use std::sync::Arc;
use std::time::Duration;

use feedline::{Array, Batch};
use feedline_actors::{ErrorPolicy, Loader as RustLoader, PipelineError};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

create_exception!(feedline, FeedlineError, PyException);

/// How long one wait for a batch lasts before signals are checked.
const WAIT_SLICE: Duration = Duration::from_millis(50);

fn to_py_err(e: PipelineError) -> PyErr {
    match e {
        PipelineError::Config(_) => PyValueError::new_err(e.to_string()),
        other => FeedlineError::new_err(other.to_string()),
    }
}

/// One field of a batch, exported to numpy through `__array_interface__`.
#[pyclass(module = "feedline", frozen)]
struct FieldBuffer {
    batch: Arc<Batch>,
    field: usize,
}

#[pymethods]
impl FieldBuffer {
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let f = &self.batch.fields()[self.field];
        let (ptr, typestr, shape, strides, item): (usize, &str, Vec<usize>, Vec<isize>, usize) =
            match &f.data {
                Array::F32(a) => (
                    a.as_ptr() as usize,
                    "<f4",
                    a.shape().to_vec(),
                    a.strides().to_vec(),
                    4,
                ),
                Array::F64(a) => (
                    a.as_ptr() as usize,
                    "<f8",
                    a.shape().to_vec(),
                    a.strides().to_vec(),
                    8,
                ),
                Array::I64(a) => (
                    a.as_ptr() as usize,
                    "<i8",
                    a.shape().to_vec(),
                    a.strides().to_vec(),
                    8,
                ),
                Array::I32(a) => (
                    a.as_ptr() as usize,
                    "<i4",
                    a.shape().to_vec(),
                    a.strides().to_vec(),
                    4,
                ),
                Array::U8(a) => (
                    a.as_ptr() as usize,
                    "|u1",
                    a.shape().to_vec(),
                    a.strides().to_vec(),
                    1,
                ),
                Array::Bool(a) => (
                    a.as_ptr() as usize,
                    "|b1",
                    a.shape().to_vec(),
                    a.strides().to_vec(),
                    1,
                ),
                Array::Bytes(_) => {
                    return Err(PyValueError::new_err("a bytes field has no array view"))
                }
            };
        let d = PyDict::new_bound(py);
        d.set_item("version", 3)?;
        d.set_item("typestr", typestr)?;
        d.set_item("shape", PyTuple::new_bound(py, shape))?;
        let byte_strides: Vec<isize> = strides.iter().map(|s| s * item as isize).collect();
        d.set_item("strides", PyTuple::new_bound(py, byte_strides))?;
        // Read-only: the buffer is shared (Arc) and may be read by others.
        d.set_item("data", (ptr, true))?;
        Ok(d)
    }
}

/// A batch: a mapping of field name to numpy array (zero-copy views).
#[pyclass(module = "feedline", name = "Batch", frozen)]
struct PyBatch {
    batch: Arc<Batch>,
    #[pyo3(get)]
    pass_: u64,
    #[pyo3(get)]
    seq: u64,
}

impl PyBatch {
    fn index(&self, key: &str) -> Option<usize> {
        self.batch
            .schema()
            .fields()
            .iter()
            .position(|f| f.name == key)
    }
    fn value(&self, py: Python<'_>, i: usize) -> PyResult<PyObject> {
        let f = &self.batch.fields()[i];
        if let Array::Bytes(b) = &f.data {
            let items: Vec<PyObject> = (0..b.len())
                .map(|k| {
                    pyo3::types::PyBytes::new_bound(py, b.get(k))
                        .into_any()
                        .unbind()
                })
                .collect();
            return Ok(PyList::new_bound(py, items).into_any().unbind());
        }
        let holder = Py::new(
            py,
            FieldBuffer {
                batch: self.batch.clone(),
                field: i,
            },
        )?;
        let np = py.import_bound("numpy")?;
        Ok(np.call_method1("asarray", (holder,))?.unbind())
    }
    fn names(&self) -> Vec<String> {
        self.batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.name.clone())
            .collect()
    }
}

#[pymethods]
impl PyBatch {
    fn __getitem__(&self, py: Python<'_>, key: &str) -> PyResult<PyObject> {
        match self.index(key) {
            Some(i) => self.value(py, i),
            None => Err(PyKeyError::new_err(key.to_string())),
        }
    }
    fn __len__(&self) -> usize {
        self.batch.fields().len()
    }
    fn __contains__(&self, key: &str) -> bool {
        self.index(key).is_some()
    }
    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        PyList::new_bound(py, self.names())
            .into_any()
            .iter()
            .map(|i| i.into_any())
    }
    fn keys(&self) -> Vec<String> {
        self.names()
    }
    /// Provenance: (source, record) of every instance, in batch order.
    #[getter]
    fn origins(&self) -> Vec<(String, u64)> {
        self.batch
            .origins()
            .iter()
            .map(|o| (o.source.to_string(), o.record))
            .collect()
    }
    /// Instances in the batch.
    #[getter]
    fn size(&self) -> usize {
        self.batch.len()
    }
    fn __repr__(&self) -> String {
        format!(
            "Batch(pass_={}, seq={}, size={}, fields={:?})",
            self.pass_,
            self.seq,
            self.batch.len(),
            self.names()
        )
    }
}

/// The loader: iterate it for batches (all passes, in order).
#[pyclass(module = "feedline", name = "Loader")]
struct PyLoader {
    inner: Option<RustLoader>,
}

#[pymethods]
impl PyLoader {
    #[new]
    #[pyo3(signature = (files, batch_size=256, shuffle=10_000, seed=0, passes=1, readers=2,
        deterministic=false, drop_last=false, rank=None, world_size=None, on_error="fail",
        max_bad=None, schema=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        files: Vec<String>,
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
        schema: Option<PyObject>,
    ) -> PyResult<Self> {
        if schema.is_some() {
            return Err(PyValueError::new_err(
                "schema=: only None (inferred from the files) is supported by this build",
            ));
        }
        let policy = match on_error {
            "fail" => {
                if max_bad.is_some() {
                    return Err(PyValueError::new_err(
                        "max_bad is only meaningful with on_error=\"skip\"",
                    ));
                }
                ErrorPolicy::Fail
            }
            "skip" => ErrorPolicy::Skip {
                max_bad,
                max_bad_fraction: None,
            },
            other => {
                return Err(PyValueError::new_err(format!(
                    "on_error: expected \"fail\" or \"skip\", got {other:?}"
                )))
            }
        };
        let mut b = RustLoader::builder()
            .files(files)
            .batch(batch_size)
            .shuffle(shuffle)
            .seed(seed)
            .passes(passes)
            .readers(readers)
            .deterministic(deterministic)
            .drop_last(drop_last)
            .error_policy(policy);
        b = match (rank, world_size) {
            (Some(r), Some(w)) => b.shard(r, w),
            (None, None) => b.shard_from_env(true),
            _ => {
                return Err(PyValueError::new_err(
                    "rank and world_size: give both or neither (neither: from RANK / WORLD_SIZE, else 0 / 1)",
                ))
            }
        };
        let loader = py.allow_threads(move || b.build()).map_err(to_py_err)?;
        Ok(PyLoader {
            inner: Some(loader),
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<PyBatch>> {
        loop {
            let Some(loader) = self.inner.as_mut() else {
                return Ok(None);
            };
            let r = py.allow_threads(|| loader.next_timeout(WAIT_SLICE));
            match r {
                None => return Ok(None),
                Some(Ok(d)) => {
                    return Ok(Some(PyBatch {
                        batch: d.batch,
                        pass_: d.pass,
                        seq: d.seq,
                    }))
                }
                Some(Err(PipelineError::Timeout { .. })) => {
                    if let Err(e) = py.check_signals() {
                        self.close(py);
                        return Err(e);
                    }
                }
                Some(Err(e)) => {
                    self.close(py);
                    return Err(to_py_err(e));
                }
            }
        }
    }

    /// Counters of the run so far (records, batches, bytes, per-stage figures).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new_bound(py);
        if let Some(l) = &self.inner {
            let s = l.stats();
            d.set_item("summary", format!("{s:?}"))?;
        }
        Ok(d)
    }

    /// Stop every thread of the loader (also on `with` exit and when dropped).
    fn close(&mut self, py: Python<'_>) {
        if let Some(mut l) = self.inner.take() {
            py.allow_threads(move || l.shutdown());
        }
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (_t=None, _v=None, _tb=None))]
    fn __exit__(
        &mut self,
        py: Python<'_>,
        _t: Option<PyObject>,
        _v: Option<PyObject>,
        _tb: Option<PyObject>,
    ) -> bool {
        self.close(py);
        false
    }
}

#[pymodule]
#[pyo3(name = "feedline")]
fn feedline_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyLoader>()?;
    m.add_class::<PyBatch>()?;
    m.add("FeedlineError", py.get_type_bound::<FeedlineError>())?;
    let mapping = py.import_bound("collections.abc")?.getattr("Mapping")?;
    mapping.call_method1("register", (py.get_type_bound::<PyBatch>(),))?;
    Ok(())
}
