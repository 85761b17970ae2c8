//! `map=`: a Python callable as the loader's per-instance map, run on the
//! pipeline's transform workers after the shuffle draw. Each call takes the
//! GIL: on CPython with a GIL the maps of all workers run one at a time (and
//! in turn with the training loop's own Python code), so a Python map helps
//! overlap with the Rust stages and I/O, not CPU parallelism; on a
//! free-threaded CPython (3.13t: the module declares `gil_used = false`)
//! they run in parallel, one per worker
//! (`python/examples/bench_map_workers.py`).
//!
//! The callable gets `(instance, rng)`: a dict of field name to a writable
//! numpy array (bytes fields: `bytes`, or a list of `bytes`), and a
//! `numpy.random.Generator` seeded from (seed, pass, source, record) — the
//! same draws for the same record whatever the scheduling. It returns a dict
//! of the output fields: checked against `map_schema` when one is given,
//! else taken as they come (numpy arrays or plain values; `bytes` or lists of
//! `bytes` for bytes fields) and the output schema inferred from the first.
//! An exception is a bad record under the loader's `on_error` policy.

use feedline::format::generator::Sample;
use feedline::transform::{BoxError, TransformCtx};
use feedline::{BytesList, DType, Instance, Schema, Tensor, Values};
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyTuple};
use rand::RngCore;

use crate::feed::{copy_values, one_bytes, to_sample};
use crate::numpy;
use crate::schema::{dtype_of_name, numpy_name};

/// The raw bytes of numeric values (C order).
fn raw(v: &Values) -> Vec<u8> {
    fn bytes<T>(x: &[T]) -> Vec<u8> {
        // SAFETY: plain-old-data elements, read as bytes.
        unsafe { std::slice::from_raw_parts(x.as_ptr() as *const u8, std::mem::size_of_val(x)) }
            .to_vec()
    }
    match v {
        Values::F32(x) => bytes(x),
        Values::F64(x) => bytes(x),
        Values::I64(x) => bytes(x),
        Values::I32(x) => bytes(x),
        Values::U8(x) => x.clone(),
        Values::Bool(x) => x.iter().map(|&b| u8::from(b)).collect(),
        Values::Bytes(b) => b.data().to_vec(),
    }
}

/// An instance as the dict the callable gets.
fn instance_dict<'py>(py: Python<'py>, inst: &Instance) -> PyResult<Bound<'py, PyDict>> {
    let np = numpy(py)?;
    let d = PyDict::new(py);
    let sample = Sample::from_instance(inst);
    for (name, t) in &sample.fields {
        let v: PyObject = match &t.values {
            Values::Bytes(b) if t.shape.is_empty() && b.len() == 1 => {
                PyBytes::new(py, b.get(0)).into_any().unbind()
            }
            Values::Bytes(b) => PyList::new(py, b.iter().map(|s| PyBytes::new(py, s)))?
                .into_any()
                .unbind(),
            v => {
                let buf = PyByteArray::new(py, &raw(v));
                let dtype = numpy_name(v.dtype());
                let shape = PyTuple::new(py, &t.shape)?;
                np.call_method1("frombuffer", (buf, dtype))?
                    .call_method1("reshape", (shape,))?
                    .unbind()
            }
        };
        d.set_item(name, v)?;
    }
    Ok(d)
}

/// The callable's output without a declared schema: each value as it comes.
fn any_sample(py: Python<'_>, out: &Bound<'_, PyAny>) -> PyResult<Sample> {
    let dict = out.downcast::<PyDict>().map_err(|_| {
        PyValueError::new_err(format!(
            "map: expected a dict of field name to value, got {}",
            out.get_type()
        ))
    })?;
    let np = numpy(py)?;
    let mut s = Sample::new();
    for (k, v) in dict.iter() {
        let name: String = k
            .extract()
            .map_err(|_| PyValueError::new_err(format!("map: field name {k} is not a str")))?;
        if let Some(b) = one_bytes(&v) {
            let mut list = BytesList::new();
            list.push(&b);
            s.insert(name, Tensor::scalar(Values::Bytes(list)));
            continue;
        }
        if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
            let items: Vec<Bound<'_, PyAny>> = v.try_iter()?.collect::<PyResult<_>>()?;
            if !items.is_empty() && items.iter().all(|i| one_bytes(i).is_some()) {
                let list: BytesList = items
                    .iter()
                    .filter_map(one_bytes)
                    .collect::<Vec<_>>()
                    .iter()
                    .map(|b| b.as_slice())
                    .collect();
                s.insert(name, Tensor::vector(Values::Bytes(list)));
                continue;
            }
        }
        let arr = np.call_method1("asarray", (&v,))?;
        let dname: String = arr.getattr("dtype")?.getattr("name")?.extract()?;
        let dtype = dtype_of_name(&dname)
            .filter(|d| *d != DType::Bytes)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "map: field `{name}`: dtype {dname} is not supported (float32, float64, int64, int32, uint8, bool, or bytes)"
                ))
            })?;
        let shape: Vec<usize> = arr.getattr("shape")?.extract()?;
        let values = copy_values(py, &arr, dtype)?;
        s.insert(name, Tensor { values, shape });
    }
    Ok(s)
}

/// A Python thread state kept for the life of a transform worker thread
/// (made at its first map call, released when the thread ends). Without
/// it each call's `with_gil` made the thread's state and destroyed it again
/// — a worker thread is not a Python thread — which on a free-threaded
/// CPython cost more than a small map's own work.
struct KeptThreadState {
    gilstate: ffi::PyGILState_STATE,
    tstate: *mut ffi::PyThreadState,
}

impl Drop for KeptThreadState {
    fn drop(&mut self) {
        // SAFETY: this thread's own state, saved by `keep_thread_state`; the
        // thread is ending. Loaders stop (and join their workers) before
        // the interpreter finalizes — close(), or the module's exit hook —
        // and after it has, nothing is touched.
        unsafe {
            if ffi::Py_IsInitialized() != 0 {
                ffi::PyEval_RestoreThread(self.tstate);
                ffi::PyGILState_Release(self.gilstate);
            }
        }
    }
}

thread_local! {
    static KEPT: std::cell::RefCell<Option<KeptThreadState>> =
        const { std::cell::RefCell::new(None) };
}

/// Give this thread a Python thread state that outlives each call, if it
/// has none (a Python thread has its own: nothing is done there).
fn keep_thread_state() {
    KEPT.with(|kept| {
        let mut kept = kept.borrow_mut();
        if kept.is_some() {
            return;
        }
        // SAFETY: the GIL is not held here (the map runs on the pipeline's
        // threads with the GIL released); Ensure makes the thread's state
        // and takes the GIL, SaveThread releases the GIL keeping the state
        // (gilstate counter 1, so later `with_gil`s reuse it).
        unsafe {
            if ffi::PyGILState_GetThisThreadState().is_null() {
                let gilstate = ffi::PyGILState_Ensure();
                let tstate = ffi::PyEval_SaveThread();
                *kept = Some(KeptThreadState { gilstate, tstate });
            }
        }
    });
}

/// The loader's map for Python callable `f`.
pub fn python_map(
    f: Py<PyAny>,
    schema: Option<Schema>,
) -> impl Fn(Instance, &mut TransformCtx) -> Result<Sample, BoxError> + Send + Sync + 'static {
    move |inst, ctx| {
        let seed = ctx.rng().next_u64();
        keep_thread_state();
        Python::with_gil(|py| {
            let run = || -> PyResult<Sample> {
                let d = instance_dict(py, &inst)?;
                let rng = numpy(py)?
                    .getattr("random")?
                    .call_method1("default_rng", (seed,))?;
                let out = f.bind(py).call1((d, rng))?;
                match &schema {
                    Some(s) => to_sample(py, "map", s, &out),
                    None => any_sample(py, &out),
                }
            };
            run().map_err(|e| -> BoxError {
                let ty = e.get_type(py);
                let ty = ty.name().map(|n| n.to_string()).unwrap_or_default();
                format!("the Python map raised {ty}: {}", e.value(py)).into()
            })
        })
    }
}
