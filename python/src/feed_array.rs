//! `feedline.FeedArray`, the small ndarray subclass every field of a
//! batch is, which adds DLPack export ([`crate::dlpack`]): its class,
//! defined from Python source at import, and the numpy module, imported
//! once.

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyModule, PyType};

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

/// Define `FeedArray` and add it to the module `m`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let ns = PyDict::new(py);
    ns.set_item("__name__", "feedline")?;
    ns.set_item(
        "_dlpack_capsule",
        wrap_pyfunction!(crate::dlpack::dlpack_capsule, m)?,
    )?;
    py.run(FEED_ARRAY_SRC, Some(&ns), None)?;
    let cls = ns
        .get_item("FeedArray")?
        .ok_or_else(|| PyException::new_err("FeedArray was not defined"))?;
    let cls = cls.downcast_into::<PyType>()?;
    m.add("FeedArray", &cls)?;
    let _ = FEED_ARRAY.set(py, cls.unbind());
    Ok(())
}
