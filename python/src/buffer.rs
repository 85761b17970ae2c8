//! [`FieldBuffer`], the base object of each array a batch hands out (made
//! by numpy's C API straight over the buffer, see `npapi`; it also exports
//! `__array_struct__` and `__array_interface__`), which holds the batch's
//! `Arc<Batch>` — so the Rust buffer lives as long as any array (or DLPack
//! importer) uses it — and the layout of a batch field (pointer, dtype,
//! shape, strides). A module of its own: `batch` (the views) and `dlpack`
//! (the DLPack export) both use it, and neither uses the other's insides
//! through it.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use feedline::{Array, Batch};
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// One field of a batch: the base of its numpy view (and an exporter of
/// `__array_struct__` / `__array_interface__` for other consumers).
#[pyclass(module = "feedline", frozen)]
pub struct FieldBuffer {
    pub batch: Arc<Batch>,
    pub field: usize,
}

/// The layout of field `field` of `batch`: data pointer, numpy typestr,
/// shape (as numpy's `npy_intp` dims), strides in bytes, element size (a
/// bytes field: its payload as a 1-D uint8 array).
pub(crate) type Layout = (usize, &'static str, Vec<isize>, Vec<isize>, usize);

pub(crate) fn layout(batch: &Batch, field: usize) -> Layout {
    fn of<T>(a: &feedline_actors::ndarray::ArrayD<T>, typestr: &'static str) -> Layout {
        let item = std::mem::size_of::<T>();
        let strides = a.strides().iter().map(|s| s * item as isize).collect();
        (
            a.as_ptr() as usize,
            typestr,
            a.shape().iter().map(|&d| d as isize).collect(),
            strides,
            item,
        )
    }
    match &batch.fields()[field].data {
        Array::F32(a) => of(a, "<f4"),
        Array::F64(a) => of(a, "<f8"),
        Array::I64(a) => of(a, "<i8"),
        Array::I32(a) => of(a, "<i4"),
        Array::U8(a) => of(a, "|u1"),
        Array::Bool(a) => of(a, "|b1"),
        // The byte strings' payload, concatenated (`Batch.bytes_buffer`).
        Array::Bytes(b) => (
            b.data().as_ptr() as usize,
            "|u1",
            vec![b.data().len() as isize],
            vec![1],
            1,
        ),
    }
}

/// numpy's `PyArrayInterface` (the C side of the array interface).
#[repr(C)]
struct ArrayStruct {
    two: c_int,
    nd: c_int,
    typekind: c_char,
    itemsize: c_int,
    flags: c_int,
    shape: *mut isize,
    strides: *mut isize,
    data: *mut c_void,
    descr: *mut ffi::PyObject,
}

/// An `ArrayStruct` with the shape and strides it points to; the capsule's
/// pointer is to its first field.
#[repr(C)]
struct ArrayStructBox {
    iface: ArrayStruct,
    shape: Vec<isize>,
    strides: Vec<isize>,
}

const NPY_ALIGNED: c_int = 0x0100;
const NPY_NOTSWAPPED: c_int = 0x0200;

unsafe extern "C" fn free_array_struct(capsule: *mut ffi::PyObject) {
    // SAFETY: the capsule was made by `__array_struct__` around a boxed
    // `ArrayStructBox` and is freed once, by this destructor.
    unsafe {
        let p = ffi::PyCapsule_GetPointer(capsule, std::ptr::null());
        if !p.is_null() {
            drop(Box::from_raw(p as *mut ArrayStructBox));
        }
    }
}

#[pymethods]
impl FieldBuffer {
    /// The array interface, C side (what numpy reads first: no dict to
    /// build and parse). Read-only (no WRITEABLE flag): the buffer is shared.
    #[getter]
    fn __array_struct__(&self, py: Python<'_>) -> PyResult<PyObject> {
        let (ptr, typestr, shape, strides, item) = layout(&self.batch, self.field);
        let mut b = Box::new(ArrayStructBox {
            iface: ArrayStruct {
                two: 2,
                nd: shape.len() as c_int,
                typekind: typestr.as_bytes()[1] as c_char,
                itemsize: item as c_int,
                flags: NPY_ALIGNED | NPY_NOTSWAPPED,
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                data: ptr as *mut c_void,
                descr: std::ptr::null_mut(),
            },
            shape,
            strides,
        });
        b.iface.shape = b.shape.as_mut_ptr();
        b.iface.strides = b.strides.as_mut_ptr();
        let raw = Box::into_raw(b);
        // SAFETY: the capsule owns `raw` and frees it in its destructor.
        unsafe {
            let cap = ffi::PyCapsule_New(
                raw as *mut c_void,
                std::ptr::null(),
                Some(free_array_struct),
            );
            if cap.is_null() {
                drop(Box::from_raw(raw));
            }
            PyObject::from_owned_ptr_or_err(py, cap)
        }
    }

    /// The array interface, Python side (for consumers that read only it).
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (ptr, typestr, shape, strides, _) = layout(&self.batch, self.field);
        let d = PyDict::new(py);
        d.set_item(intern!(py, "version"), 3)?;
        d.set_item(intern!(py, "typestr"), typestr)?;
        d.set_item(intern!(py, "shape"), PyTuple::new(py, shape)?)?;
        d.set_item(intern!(py, "strides"), PyTuple::new(py, strides)?)?;
        // Read-only: the buffer is shared (Arc) and may be read by others.
        d.set_item(intern!(py, "data"), (ptr, true))?;
        Ok(d)
    }
}
