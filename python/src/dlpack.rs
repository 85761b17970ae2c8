//! DLPack export of the arrays a batch hands out: `__dlpack__` builds a
//! managed tensor that describes the array as it is (its own pointer,
//! shape and strides, so slices export too) and holds the batch's
//! `Arc<Batch>` until the consumer calls the deleter — the Rust buffer lives
//! as long as any importer (torch, JAX, numpy) uses it, and the deleter
//! needs no GIL. When the caller asks for `max_version >= (1, 0)` (numpy
//! 2's and recent torch's `from_dlpack`) a versioned tensor (capsule
//! `dltensor_versioned`) flagged read-only is made — numpy then makes a
//! read-only array, torch ignores the flag —; otherwise a legacy v0.8 one
//! (capsule `dltensor`: older torch, JAX).

use std::ffi::{c_char, c_void, CStr};
use std::sync::Arc;

use feedline::{Array, Batch};
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::buffer::FieldBuffer;

const KDL_CPU: i32 = 1;
const KDL_INT: u8 = 0;
const KDL_UINT: u8 = 1;
const KDL_FLOAT: u8 = 2;
const KDL_BOOL: u8 = 6;
const READ_ONLY: u64 = 1;

const LEGACY_NAME: &CStr = c"dltensor";
const VERSIONED_NAME: &CStr = c"dltensor_versioned";

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

/// What a managed tensor owns: the batch (its buffers) and the shape and
/// strides arrays the tensor points into.
struct Owner {
    _batch: Arc<Batch>,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

unsafe extern "C" fn delete_legacy(t: *mut DLManagedTensor) {
    if t.is_null() {
        return;
    }
    // SAFETY: made by `Box::into_raw` in `export`, deleted once (the DLPack contract).
    let t = unsafe { Box::from_raw(t) };
    drop(unsafe { Box::from_raw(t.manager_ctx as *mut Owner) });
}

unsafe extern "C" fn delete_versioned(t: *mut DLManagedTensorVersioned) {
    if t.is_null() {
        return;
    }
    // SAFETY: as in `delete_legacy`.
    let t = unsafe { Box::from_raw(t) };
    drop(unsafe { Box::from_raw(t.manager_ctx as *mut Owner) });
}

/// The capsule's destructor: delete the tensor unless a consumer took it
/// (consumers rename the capsule `used_dltensor…` and call the deleter later).
unsafe extern "C" fn capsule_legacy(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with the capsule, GIL held.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, LEGACY_NAME.as_ptr()) == 1 {
            let t =
                ffi::PyCapsule_GetPointer(capsule, LEGACY_NAME.as_ptr()) as *mut DLManagedTensor;
            if let Some(d) = (*t).deleter {
                d(t);
            }
        }
    }
}

unsafe extern "C" fn capsule_versioned(capsule: *mut ffi::PyObject) {
    // SAFETY: as in `capsule_legacy`.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, VERSIONED_NAME.as_ptr()) == 1 {
            let t = ffi::PyCapsule_GetPointer(capsule, VERSIONED_NAME.as_ptr())
                as *mut DLManagedTensorVersioned;
            if let Some(d) = (*t).deleter {
                d(t);
            }
        }
    }
}

/// The batch buffer behind `arr` (following `.base`), if any.
fn find_buffer<'py>(arr: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, FieldBuffer>>> {
    let mut obj = arr.getattr("base")?;
    for _ in 0..64 {
        if obj.is_none() {
            return Ok(None);
        }
        if let Ok(b) = obj.downcast::<FieldBuffer>() {
            return Ok(Some(b.clone()));
        }
        // numpy keeps (object, capsule) as the base of an array made through
        // `__array_struct__`.
        if let Ok(t) = obj.downcast::<PyTuple>() {
            for item in t.iter() {
                if let Ok(b) = item.downcast::<FieldBuffer>() {
                    return Ok(Some(b.clone()));
                }
            }
            return Ok(None);
        }
        match obj.getattr("base") {
            Ok(next) => obj = next,
            Err(_) => return Ok(None),
        }
    }
    Ok(None)
}

/// The data range of field `field` of `batch` (a bytes field: its payload).
fn field_range(batch: &Batch, field: usize) -> (usize, usize) {
    let f = &batch.fields()[field];
    let ptr = match &f.data {
        Array::F32(a) => a.as_ptr() as usize,
        Array::F64(a) => a.as_ptr() as usize,
        Array::I64(a) => a.as_ptr() as usize,
        Array::I32(a) => a.as_ptr() as usize,
        Array::U8(a) => a.as_ptr() as usize,
        Array::Bool(a) => a.as_ptr() as usize,
        Array::Bytes(b) => b.data().as_ptr() as usize,
    };
    (ptr, ptr + f.data.payload_bytes())
}

/// `arr.__dlpack__()` for an array viewing a batch's buffer: the capsule, or
/// `None` when `arr` does not view one (the caller falls back to numpy's own).
#[pyfunction]
#[pyo3(signature = (arr, versioned=false))]
pub fn dlpack_capsule(
    py: Python<'_>,
    arr: &Bound<'_, PyAny>,
    versioned: bool,
) -> PyResult<Option<PyObject>> {
    let Some(buffer) = find_buffer(arr)? else {
        return Ok(None);
    };
    let buffer = buffer.get();
    let iface = arr.getattr("__array_interface__")?;
    let iface = iface.downcast::<PyDict>()?;
    let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        iface
            .get_item(k)?
            .ok_or_else(|| PyBufferError::new_err(format!("__array_interface__ has no {k}")))
    };
    let (ptr, _readonly): (usize, bool) = get("data")?.extract()?;
    let typestr: String = get("typestr")?.extract()?;
    let shape: Vec<i64> = get("shape")?.extract()?;
    let itemsize: usize = arr.getattr("itemsize")?.extract()?;
    let strides: Vec<i64> = match iface.get_item("strides")? {
        Some(s) if !s.is_none() => s.extract()?,
        _ => {
            // C-contiguous: strides from the shape.
            let mut st = vec![itemsize as i64; shape.len()];
            for i in (0..shape.len().saturating_sub(1)).rev() {
                st[i] = st[i + 1] * shape[i + 1];
            }
            st
        }
    };
    let (lo, hi) = field_range(&buffer.batch, buffer.field);
    let empty = shape.contains(&0);
    if !empty && !(lo..hi.max(lo + 1)).contains(&ptr) {
        return Ok(None);
    }
    let (kind, little) = (
        typestr.chars().nth(1).unwrap_or('?'),
        !typestr.starts_with('>'),
    );
    let code = match kind {
        'f' => KDL_FLOAT,
        'i' => KDL_INT,
        'u' => KDL_UINT,
        'b' => KDL_BOOL,
        _ => {
            return Err(PyBufferError::new_err(format!(
                "DLPack: element type {typestr} cannot be exported"
            )))
        }
    };
    if !little {
        return Err(PyBufferError::new_err(
            "DLPack: big-endian arrays cannot be exported",
        ));
    }
    let mut el_strides = Vec::with_capacity(strides.len());
    for &s in &strides {
        if s % itemsize as i64 != 0 {
            return Err(PyBufferError::new_err(format!(
                "DLPack: stride {s} bytes is not a multiple of the element size {itemsize}"
            )));
        }
        el_strides.push(s / itemsize as i64);
    }
    make_capsule(
        py,
        buffer.batch.clone(),
        ptr,
        code,
        itemsize,
        shape,
        el_strides,
        versioned,
    )
    .map(Some)
}

/// A DLPack capsule (legacy `dltensor`, or `dltensor_versioned` flagged
/// read-only) of the CPU memory at `ptr`, of elements of `code` and
/// `itemsize` bytes, `shape` and strides `el_strides` (in elements); it
/// holds `batch` until the importer calls its deleter.
#[allow(clippy::too_many_arguments)]
fn make_capsule(
    py: Python<'_>,
    batch: Arc<Batch>,
    ptr: usize,
    code: u8,
    itemsize: usize,
    shape: Vec<i64>,
    el_strides: Vec<i64>,
    versioned: bool,
) -> PyResult<PyObject> {
    let mut owner = Box::new(Owner {
        _batch: batch,
        shape,
        strides: el_strides,
    });
    let tensor = DLTensor {
        data: ptr as *mut c_void,
        device: DLDevice {
            device_type: KDL_CPU,
            device_id: 0,
        },
        ndim: owner.shape.len() as i32,
        dtype: DLDataType {
            code,
            bits: (itemsize * 8) as u8,
            lanes: 1,
        },
        shape: owner.shape.as_mut_ptr(),
        strides: owner.strides.as_mut_ptr(),
        byte_offset: 0,
    };
    let ctx = Box::into_raw(owner) as *mut c_void;
    // SAFETY: the capsule owns the tensor until a consumer renames it; the
    // destructors free it exactly once either way.
    let capsule = unsafe {
        if versioned {
            let t = Box::into_raw(Box::new(DLManagedTensorVersioned {
                version: DLPackVersion { major: 1, minor: 0 },
                manager_ctx: ctx,
                deleter: Some(delete_versioned),
                flags: READ_ONLY,
                dl_tensor: tensor,
            }));
            ffi::PyCapsule_New(
                t as *mut c_void,
                VERSIONED_NAME.as_ptr() as *const c_char,
                Some(capsule_versioned),
            )
        } else {
            let t = Box::into_raw(Box::new(DLManagedTensor {
                dl_tensor: tensor,
                manager_ctx: ctx,
                deleter: Some(delete_legacy),
            }));
            ffi::PyCapsule_New(
                t as *mut c_void,
                LEGACY_NAME.as_ptr() as *const c_char,
                Some(capsule_legacy),
            )
        }
    };
    // SAFETY: a new reference, or null with an exception set.
    unsafe { PyObject::from_owned_ptr_or_err(py, capsule) }
}

/// A capsule of field `field` of `batch` as it is laid out (numeric fields:
/// `[batch, dims…]`, ragged values `[total, dims…]`, padded `[batch, max,
/// dims…]`); `None` for a bytes field.
pub fn field_capsule(
    py: Python<'_>,
    batch: &Arc<Batch>,
    field: usize,
    versioned: bool,
) -> PyResult<Option<PyObject>> {
    fn of<T>(
        a: &feedline_actors::ndarray::ArrayD<T>,
        code: u8,
    ) -> (usize, u8, usize, Vec<i64>, Vec<i64>) {
        (
            a.as_ptr() as usize,
            code,
            std::mem::size_of::<T>(),
            a.shape().iter().map(|&d| d as i64).collect(),
            a.strides().iter().map(|&s| s as i64).collect(),
        )
    }
    let (ptr, code, itemsize, shape, strides) = match &batch.fields()[field].data {
        Array::F32(a) => of(a, KDL_FLOAT),
        Array::F64(a) => of(a, KDL_FLOAT),
        Array::I64(a) => of(a, KDL_INT),
        Array::I32(a) => of(a, KDL_INT),
        Array::U8(a) => of(a, KDL_UINT),
        Array::Bool(a) => of(a, KDL_BOOL),
        Array::Bytes(_) => return Ok(None),
    };
    make_capsule(
        py,
        batch.clone(),
        ptr,
        code,
        itemsize,
        shape,
        strides,
        versioned,
    )
    .map(Some)
}
