//! numpy's C API, the three functions a batch view needs: an array of the
//! `FeedArray` type made straight over a batch buffer
//! (`PyArray_NewFromDescr`), its base set to the buffer's owner
//! (`PyArray_SetBaseObject`). One call and one object per view, where
//! `numpy.asarray(holder).view(FeedArray)` made two, through numpy's
//! generic protocol discovery — a long code path that ran cache-cold on
//! the first view after the consumer thread woke up (several µs under the
//! GIL per batch). The table comes from numpy's `_ARRAY_API` capsule (as
//! numpy's own `import_array()` takes it); the slot numbers are numpy's
//! stable C-API (the same in numpy 1.x and 2.x).

use std::ffi::{c_int, c_void};

use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::PyCapsule;

/// `PyArray_DescrFromType` (slot 45).
type DescrFromType = unsafe extern "C" fn(c_int) -> *mut ffi::PyObject;
/// `PyArray_NewFromDescr` (slot 94).
type NewFromDescr = unsafe extern "C" fn(
    *mut ffi::PyTypeObject,
    *mut ffi::PyObject,
    c_int,
    *const isize,
    *const isize,
    *mut c_void,
    c_int,
    *mut ffi::PyObject,
) -> *mut ffi::PyObject;
/// `PyArray_SetBaseObject` (slot 282).
type SetBaseObject = unsafe extern "C" fn(*mut ffi::PyObject, *mut ffi::PyObject) -> c_int;

/// The three entry points, read once from the capsule.
struct Api {
    descr_from_type: DescrFromType,
    new_from_descr: NewFromDescr,
    set_base_object: SetBaseObject,
}

static API: GILOnceCell<Api> = GILOnceCell::new();

fn api(py: Python<'_>) -> PyResult<&Api> {
    API.get_or_try_init(py, || {
        // numpy 2 keeps the module in numpy._core, numpy 1 in numpy.core.
        let m = py
            .import("numpy._core._multiarray_umath")
            .or_else(|_| py.import("numpy.core.multiarray"))?;
        let cap = m.getattr("_ARRAY_API")?;
        let cap = cap.downcast::<PyCapsule>()?;
        let table = cap.pointer() as *const *const c_void;
        if table.is_null() {
            return Err(PyRuntimeError::new_err(
                "numpy's _ARRAY_API capsule is empty",
            ));
        }
        // SAFETY: `_ARRAY_API` is numpy's table of C-API function pointers
        // (more than 282 entries), alive as long as numpy is imported (for
        // good: extension modules are not unloaded); the slots hold
        // functions of the types above (numpy's __multiarray_api.h).
        unsafe {
            Ok(Api {
                descr_from_type: std::mem::transmute::<*const c_void, DescrFromType>(
                    *table.add(45),
                ),
                new_from_descr: std::mem::transmute::<*const c_void, NewFromDescr>(*table.add(94)),
                set_base_object: std::mem::transmute::<*const c_void, SetBaseObject>(
                    *table.add(282),
                ),
            })
        }
    })
}

/// numpy's type number of an array-interface typestr (64-bit Linux: int64
/// is `long`).
fn type_num(typestr: &str) -> Option<c_int> {
    Some(match typestr {
        "|b1" => 0,
        "|u1" => 2,
        "<i4" => 5,
        "<i8" => 7,
        "<f4" => 11,
        "<f8" => 12,
        _ => return None,
    })
}

/// `NPY_ARRAY_ALIGNED`: read-only (no `NPY_ARRAY_WRITEABLE`), aligned; numpy
/// works out the contiguity flags from the strides.
const NPY_ARRAY_ALIGNED: c_int = 0x0100;

/// A read-only array of `subtype` over `data` (`typestr`, `dims`, `strides`
/// in bytes) whose base is `owner` (which keeps `data` alive).
///
/// # Safety
/// `data` must stay valid, for the dims and strides given, as long as
/// `owner` lives.
pub unsafe fn view<'py>(
    py: Python<'py>,
    subtype: &Bound<'py, pyo3::types::PyType>,
    typestr: &str,
    dims: &[isize],
    strides: &[isize],
    data: usize,
    owner: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let api = api(py)?;
    let num = type_num(typestr)
        .ok_or_else(|| PyRuntimeError::new_err(format!("no numpy type for {typestr}")))?;
    // SAFETY: numpy's C API with the GIL held; `descr` is a new reference
    // that NewFromDescr steals; SetBaseObject steals `owner`'s reference
    // (also on failure); `arr` is released on failure.
    unsafe {
        let descr = (api.descr_from_type)(num);
        if descr.is_null() {
            return Err(PyErr::fetch(py));
        }
        let arr = (api.new_from_descr)(
            subtype.as_type_ptr(),
            descr,
            dims.len() as c_int,
            dims.as_ptr(),
            strides.as_ptr(),
            data as *mut c_void,
            NPY_ARRAY_ALIGNED,
            std::ptr::null_mut(),
        );
        if arr.is_null() {
            return Err(PyErr::fetch(py));
        }
        let arr = Bound::from_owned_ptr(py, arr);
        if (api.set_base_object)(arr.as_ptr(), owner.into_ptr()) != 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(arr)
    }
}
