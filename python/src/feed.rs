//! Feeding from Python (Paddle's `PyArrayFeedQueue`): [`PyFeed`], the
//! producer's handle of a push-mode loader (`Loader.with_feed`). Pushed
//! values are checked against the schema field by field before anything is
//! pushed — missing or unknown fields, element types and shapes; an error is
//! a `ValueError` naming the field, the expected and the actual shape and
//! dtype — then copied into Rust values. A push waits for room with the GIL
//! released, in slices, checking for signals between them (Ctrl-C raises
//! `KeyboardInterrupt`, the item not pushed).
//!
//! Element types: a numpy array (or numpy scalar) must have the field's
//! dtype exactly; plain Python values (ints, floats, bools, lists) are
//! converted when numpy's `same_kind` casting allows (`3` for an `int64` or
//! a `float32` field, `[0.5, 1.5]` for `float32`) and ints for `uint8`
//! fields, never by truncation nor wrapping (an int out of an `int32` or
//! `uint8` field's range is an error).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use feedline::format::generator::Sample;
use feedline::{
    Array, Batch, BatchField, BytesList, DType, Dim, Field, Origin, Ragged, Schema, SourceId,
    Tensor, Values,
};
use feedline_actors::ndarray::{ArrayD, IxDyn};
use feedline_actors::{FeedHandle, PipelineError, PushError};
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple,
};

use crate::schema::{describe_field, numpy_name};
use crate::{numpy, FeedlineError};

/// How long one wait for room lasts before signals are checked.
const PUSH_SLICE: Duration = Duration::from_millis(50);

fn shape_text(shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", dims.join(", "))
}

/// A value checked and copied for one field.
struct Checked {
    values: Values,
    shape: Vec<usize>,
    /// A whole batch's numeric field: its array itself, already copied to a
    /// [`feedline::DATA_ALIGN`]-aligned buffer (then `values` is empty) —
    /// the one copy the push makes, aligned as collated batches are.
    aligned: Option<Array>,
}

impl Checked {
    fn new(values: Values, shape: Vec<usize>) -> Self {
        Checked {
            values,
            shape,
            aligned: None,
        }
    }
}

/// Element type, shape and contiguous copy of `obj` for field `f`; `lead`
/// is `Some(n)` for a batch (a leading dimension of `n` instances).
fn convert(
    py: Python<'_>,
    what: &str,
    f: &Field,
    obj: &Bound<'_, PyAny>,
    batch: bool,
) -> PyResult<Checked> {
    let np = numpy(py)?;
    let expected = if batch {
        format!("[n, {}", &describe_field(f)[1..]).replace("[n, ]", "[n]")
    } else {
        describe_field(f)
    };
    let bad = |actual: String| {
        PyValueError::new_err(format!(
            "{what}: field `{}`: expected {expected}, got {actual}",
            f.name
        ))
    };
    if !batch && f.shape.is_empty() {
        if let Some(values) = scalar_fast(obj, f.dtype) {
            return Ok(Checked::new(values, vec![]));
        }
    }
    if let Some(c) = array_fast(py, obj, f.dtype, batch)? {
        if shape_fits(f, &c.shape, batch) {
            return Ok(c);
        }
        // A wrong shape: the general path says so.
    }
    let is_numpy =
        obj.is_instance(&np.getattr("ndarray")?)? || obj.is_instance(&np.getattr("generic")?)?;
    let arr = np
        .call_method1("asarray", (obj,))
        .map_err(|e| bad(format!("{} ({e})", obj.get_type())))?;
    let dtype_name: String = arr.getattr("dtype")?.getattr("name")?.extract()?;
    let shape: Vec<usize> = arr.getattr("shape")?.extract()?;
    let actual = format!("{} {dtype_name}", shape_text(&shape));
    let want = numpy_name(f.dtype);
    let arr = if dtype_name == want {
        arr
    } else {
        let src = arr.getattr("dtype")?;
        // Plain ints for a uint8 field too (the range is checked below).
        let int_to_u8 = f.dtype == DType::U8 && src.getattr("kind")?.extract::<String>()? == "i";
        let castable = !is_numpy
            && (int_to_u8
                || np
                    .call_method1("can_cast", (src, want, "same_kind"))?
                    .extract::<bool>()?);
        if !castable {
            return Err(bad(actual));
        }
        let cast = arr.call_method1("astype", (want,))?;
        // Narrower integers: a value out of range would wrap.
        if matches!(f.dtype, DType::I32 | DType::U8)
            && !np
                .call_method1("array_equal", (&cast, &arr))?
                .extract::<bool>()?
        {
            return Err(bad(format!("{actual} out of the range of {want}")));
        }
        cast
    };
    // The shape: [n?] + (fixed dims | [any] + trailing dims).
    if !shape_fits(f, &shape, batch) {
        return Err(bad(actual));
    }
    if batch {
        return copy_aligned(py, &arr, f.dtype, shape);
    }
    let values = copy_values(py, &arr, f.dtype)?;
    Ok(Checked::new(values, shape))
}

/// A copy of `n` elements of `dtype` at `ptr`.
///
/// # Safety
/// `ptr` points to `n` initialised, aligned elements of `dtype` that stay
/// alive and unchanged during the call.
unsafe fn copy_from(ptr: usize, n: usize, dtype: DType) -> PyResult<Values> {
    if n == 0 {
        return Ok(Values::new(dtype));
    }
    // SAFETY: as the caller promises.
    Ok(unsafe {
        match dtype {
            DType::F32 => Values::F32(std::slice::from_raw_parts(ptr as *const f32, n).to_vec()),
            DType::F64 => Values::F64(std::slice::from_raw_parts(ptr as *const f64, n).to_vec()),
            DType::I64 => Values::I64(std::slice::from_raw_parts(ptr as *const i64, n).to_vec()),
            DType::I32 => Values::I32(std::slice::from_raw_parts(ptr as *const i32, n).to_vec()),
            DType::U8 => Values::U8(std::slice::from_raw_parts(ptr as *const u8, n).to_vec()),
            DType::Bool => Values::Bool(
                std::slice::from_raw_parts(ptr as *const u8, n)
                    .iter()
                    .map(|&b| b != 0)
                    .collect(),
            ),
            DType::Bytes => {
                return Err(PyValueError::new_err("a bytes field is not a numpy array"))
            }
        }
    })
}

/// numpy's typestr of an element type (little-endian machine).
fn typestr(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::I64 => "<i8",
        DType::I32 => "<i4",
        DType::U8 => "|u1",
        DType::Bool => "|b1",
        DType::Bytes => "",
    }
}

/// A plain Python scalar for a scalar field, without numpy: ints for int
/// and float fields, floats for float fields, bools for bool fields (`None`:
/// anything else, left to the general path and its errors).
fn scalar_fast(obj: &Bound<'_, PyAny>, dtype: DType) -> Option<Values> {
    if obj.is_exact_instance_of::<PyInt>() {
        let v: i64 = obj.extract().ok()?;
        return match dtype {
            DType::I64 => Some(Values::I64(vec![v])),
            DType::I32 => i32::try_from(v).ok().map(|v| Values::I32(vec![v])),
            DType::F64 => Some(Values::F64(vec![v as f64])),
            DType::F32 => Some(Values::F32(vec![v as f32])),
            _ => None,
        };
    }
    if obj.is_exact_instance_of::<PyFloat>() {
        let v: f64 = obj.extract().ok()?;
        return match dtype {
            DType::F64 => Some(Values::F64(vec![v])),
            DType::F32 => Some(Values::F32(vec![v as f32])),
            _ => None,
        };
    }
    if obj.is_exact_instance_of::<PyBool>() && dtype == DType::Bool {
        return Some(Values::Bool(vec![obj.is_truthy().ok()?]));
    }
    None
}

/// A numpy array of exactly the field's dtype, C-contiguous and aligned:
/// its shape and a copy of its elements from one `__array_interface__`
/// (`None`: anything else, left to the general path).
fn array_fast<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    dtype: DType,
    batch: bool,
) -> PyResult<Option<Checked>> {
    let np = numpy(py)?;
    if !obj.get_type().is(&np.getattr(intern!(py, "ndarray"))?) {
        return Ok(None);
    }
    let iface = obj.getattr(intern!(py, "__array_interface__"))?;
    let get = |k: &Bound<'py, PyString>| iface.get_item(k);
    let ts = get(intern!(py, "typestr"))?;
    if ts.downcast::<PyString>()?.to_cow()? != typestr(dtype) {
        return Ok(None);
    }
    if !get(intern!(py, "strides"))?.is_none() {
        return Ok(None);
    }
    let (ptr, _): (usize, bool) = get(intern!(py, "data"))?.extract()?;
    if ptr % dtype.size().max(1) != 0 {
        return Ok(None);
    }
    let shape: Vec<usize> = get(intern!(py, "shape"))?.extract()?;
    let n: usize = shape.iter().product();
    // SAFETY: a C-contiguous (no strides), aligned array of `n` elements of
    // `dtype` (its typestr), held by `obj`, copied with the GIL held.
    unsafe {
        if batch {
            return aligned_from(ptr, dtype, shape).map(Some);
        }
        Ok(Some(Checked::new(copy_from(ptr, n, dtype)?, shape)))
    }
}

/// A whole batch's field of `shape` from the `shape`'s worth of `dtype`
/// elements at `ptr`: one copy, into a [`feedline::DATA_ALIGN`]-aligned
/// (recycled when one fits) buffer (bool: numpy's bytes are read as
/// `u8` and made `bool` first, a second copy).
///
/// # Safety
/// As [`copy_from`], for the product of `shape` elements.
unsafe fn aligned_from(ptr: usize, dtype: DType, shape: Vec<usize>) -> PyResult<Checked> {
    let n: usize = shape.iter().product();
    /// The `n` elements at `ptr` (none: no pointer is read).
    ///
    /// # Safety
    /// As [`copy_from`].
    unsafe fn slice<'a, T>(ptr: usize, n: usize) -> &'a [T] {
        if n == 0 {
            &[]
        } else {
            // SAFETY: as the caller promises.
            unsafe { std::slice::from_raw_parts(ptr as *const T, n) }
        }
    }
    // SAFETY: as the caller promises.
    let array = unsafe {
        match dtype {
            DType::F32 => Array::aligned_copy(slice::<f32>(ptr, n), &shape),
            DType::F64 => Array::aligned_copy(slice::<f64>(ptr, n), &shape),
            DType::I64 => Array::aligned_copy(slice::<i64>(ptr, n), &shape),
            DType::I32 => Array::aligned_copy(slice::<i32>(ptr, n), &shape),
            DType::U8 => Array::aligned_copy(slice::<u8>(ptr, n), &shape),
            DType::Bool => {
                let b: Vec<bool> = slice::<u8>(ptr, n).iter().map(|&b| b != 0).collect();
                Array::aligned_copy(&b, &shape)
            }
            DType::Bytes => {
                return Err(PyValueError::new_err("a bytes field is not a numpy array"))
            }
        }
    }
    .map_err(|e| {
        PyValueError::new_err(format!(
            "push_batch: {} elements do not fill shape {}: {e}",
            n,
            shape_text(&shape)
        ))
    })?;
    Ok(Checked {
        values: Values::new(dtype),
        shape,
        aligned: Some(array),
    })
}

/// [`aligned_from`] for numpy array `arr`, whose dtype is `dtype`'s
/// (checked by the caller), of shape `shape`.
fn copy_aligned(
    py: Python<'_>,
    arr: &Bound<'_, PyAny>,
    dtype: DType,
    shape: Vec<usize>,
) -> PyResult<Checked> {
    // C-contiguous and aligned (a copy only when it is not already).
    let arr = numpy(py)?.call_method1("require", (arr, py.None(), "CA"))?;
    let iface = arr.getattr("__array_interface__")?;
    let (ptr, _): (usize, bool) = iface.get_item("data")?.extract()?;
    // SAFETY: `arr` is a C-contiguous, aligned numpy array of `shape`'s
    // elements of the type read (its dtype was checked by the caller); it is
    // alive (held by `arr`) and the GIL is held while it is copied.
    unsafe { aligned_from(ptr, dtype, shape) }
}

/// The dims `shape` must have for field `f` (with a leading instance
/// dimension for a batch).
fn shape_fits(f: &Field, shape: &[usize], batch: bool) -> bool {
    let lead = usize::from(batch);
    shape.len() == lead + f.shape.len()
        && f.shape.iter().zip(&shape[lead..]).all(|(d, &s)| match d {
            Dim::Fixed(n) => *n == s,
            Dim::Var => true,
        })
}

/// A copy of the elements of numpy array `arr`, whose dtype is `dtype`'s
/// (checked by the caller), in C order.
pub(crate) fn copy_values(
    py: Python<'_>,
    arr: &Bound<'_, PyAny>,
    dtype: DType,
) -> PyResult<Values> {
    // C-contiguous and aligned (a copy only when it is not already).
    let arr = numpy(py)?.call_method1("require", (arr, py.None(), "CA"))?;
    let iface = arr.getattr("__array_interface__")?;
    let (ptr, _): (usize, bool) = iface.get_item("data")?.extract()?;
    let n: usize = arr.getattr("size")?.extract()?;
    if n == 0 {
        return Ok(Values::new(dtype));
    }
    // SAFETY: `arr` is a C-contiguous, aligned numpy array of `n` elements
    // of the type read (its dtype was checked by the caller); it is alive
    // (held by `arr`) and the GIL is held while it is copied.
    let values = unsafe { copy_from(ptr, n, dtype)? };
    Ok(values)
}

pub(crate) fn one_bytes(obj: &Bound<'_, PyAny>) -> Option<Vec<u8>> {
    if let Ok(b) = obj.downcast::<PyBytes>() {
        return Some(b.as_bytes().to_vec());
    }
    if let Ok(b) = obj.downcast::<PyByteArray>() {
        return Some(b.to_vec());
    }
    None
}

/// A bytes field's value for one instance: `bytes` for a scalar field, a
/// list of `bytes` (of the declared length, or any length when ragged).
fn convert_bytes(what: &str, f: &Field, obj: &Bound<'_, PyAny>) -> PyResult<Checked> {
    let bad = |actual: String| {
        PyValueError::new_err(format!(
            "{what}: field `{}`: expected {}, got {actual}",
            f.name,
            describe_field(f)
        ))
    };
    let mut list = BytesList::new();
    if f.shape.is_empty() {
        let b = one_bytes(obj).ok_or_else(|| bad(obj.get_type().to_string()))?;
        list.push(&b);
        return Ok(Checked::new(Values::Bytes(list), vec![]));
    }
    if !(obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>()) {
        return Err(bad(obj.get_type().to_string()));
    }
    for item in obj.try_iter()? {
        let item = item?;
        let b =
            one_bytes(&item).ok_or_else(|| bad(format!("a list holding {}", item.get_type())))?;
        list.push(&b);
    }
    let n = list.len();
    let unit = f.unit_elements().max(1);
    let ok = match f.shape[0] {
        Dim::Fixed(_) => n == f.unit_elements(),
        Dim::Var => n.is_multiple_of(unit),
    };
    if !ok {
        return Err(bad(format!("a list of {n} bytes")));
    }
    let shape = if f.is_ragged() {
        std::iter::once(n / unit).chain(f.fixed_dims()).collect()
    } else {
        f.fixed_dims()
    };
    Ok(Checked::new(Values::Bytes(list), shape))
}

/// The fields of `dict` in schema order, after checking that there are no
/// others and none is missing.
fn fields_of<'py>(
    what: &str,
    schema: &Schema,
    dict: &Bound<'py, PyAny>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let dict = dict.downcast::<PyDict>().map_err(|_| {
        PyValueError::new_err(format!(
            "{what}: expected a dict of field name to value, got {}",
            dict.get_type()
        ))
    })?;
    let names = || schema.field_names();
    for k in dict.keys() {
        let k: String = k.extract()?;
        if schema.index_of(&k).is_none() {
            return Err(PyValueError::new_err(format!(
                "{what}: no field `{k}` in the schema (fields: {})",
                names()
            )));
        }
    }
    schema
        .fields()
        .iter()
        .map(|f| {
            dict.get_item(&f.name)?.ok_or_else(|| {
                PyValueError::new_err(format!(
                    "{what}: field `{}` is missing (expected {})",
                    f.name,
                    describe_field(f)
                ))
            })
        })
        .collect()
}

/// A dict of one instance's values as a [`Sample`] of `schema` (`what`
/// names the caller in errors).
pub(crate) fn to_sample(
    py: Python<'_>,
    what: &str,
    schema: &Schema,
    dict: &Bound<'_, PyAny>,
) -> PyResult<Sample> {
    let values = fields_of(what, schema, dict)?;
    let mut s = Sample::new();
    for (f, v) in schema.fields().iter().zip(values) {
        let c = if f.dtype == DType::Bytes {
            convert_bytes(what, f, &v)?
        } else {
            convert(py, what, f, &v, false)?
        };
        s.insert(
            f.name.clone(),
            Tensor {
                values: c.values,
                shape: c.shape,
            },
        );
    }
    Ok(s)
}

/// Values as an array of `shape` (for a field of a pushed batch).
fn to_array(field: &str, values: Values, shape: Vec<usize>) -> PyResult<Array> {
    let d = IxDyn(&shape);
    let err = |e: feedline_actors::ndarray::ShapeError| {
        PyValueError::new_err(format!(
            "push_batch: field `{field}`: the values do not fill shape {}: {e}",
            shape_text(&shape)
        ))
    };
    Ok(match values {
        Values::F32(v) => Array::F32(ArrayD::from_shape_vec(d, v).map_err(err)?),
        Values::F64(v) => Array::F64(ArrayD::from_shape_vec(d, v).map_err(err)?),
        Values::I64(v) => Array::I64(ArrayD::from_shape_vec(d, v).map_err(err)?),
        Values::I32(v) => Array::I32(ArrayD::from_shape_vec(d, v).map_err(err)?),
        Values::U8(v) => Array::U8(ArrayD::from_shape_vec(d, v).map_err(err)?),
        Values::Bool(v) => Array::Bool(ArrayD::from_shape_vec(d, v).map_err(err)?),
        Values::Bytes(b) => Array::Bytes(b),
    })
}

/// A ragged field of a batch from a list of per-instance values.
fn ragged_field(
    py: Python<'_>,
    what: &str,
    f: &Field,
    obj: &Bound<'_, PyAny>,
    n: usize,
) -> PyResult<BatchField> {
    let items: Vec<Bound<'_, PyAny>> =
        if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
            obj.try_iter()?.collect::<PyResult<_>>()?
        } else {
            return Err(PyValueError::new_err(format!(
            "{what}: field `{}` is ragged ({}): expected a list of {n} per-instance values, got {}",
            f.name,
            describe_field(f),
            obj.get_type()
        )));
        };
    if items.len() != n {
        return Err(PyValueError::new_err(format!(
            "{what}: field `{}`: {} instances, the other fields have {n}",
            f.name,
            items.len()
        )));
    }
    let mut parts = Vec::with_capacity(n);
    for it in &items {
        parts.push(if f.dtype == DType::Bytes {
            convert_bytes(what, f, it)?
        } else {
            convert(py, what, f, it, false)?
        });
    }
    let lens: Vec<usize> = parts
        .iter()
        .map(|c| c.shape.first().copied().unwrap_or(0))
        .collect();
    let unit = f.unit_elements();
    let trailing = f.fixed_dims();
    let mut all = Values::new(f.dtype);
    match f.ragged {
        Ragged::Offsets => {
            let mut offsets = vec![0];
            for (c, &l) in parts.iter().zip(&lens) {
                all.extend_range(&c.values, 0, c.values.len());
                offsets.push(offsets.last().copied().unwrap_or(0) + l);
            }
            let total = offsets[n];
            let shape = if f.dtype == DType::Bytes {
                vec![total * unit.max(1)]
            } else {
                std::iter::once(total).chain(trailing).collect()
            };
            Ok(BatchField {
                data: to_array(&f.name, all, shape)?,
                offsets: Some(offsets),
                lengths: None,
            })
        }
        Ragged::Padded => {
            let max = lens.iter().copied().max().unwrap_or(0);
            for (c, &l) in parts.iter().zip(&lens) {
                all.extend_range(&c.values, 0, c.values.len());
                let missing = (max - l) * unit.max(1);
                append_zeros(&mut all, missing);
            }
            let shape = if f.dtype == DType::Bytes {
                vec![n * max * unit.max(1)]
            } else {
                [n, max].into_iter().chain(trailing).collect()
            };
            Ok(BatchField {
                data: to_array(&f.name, all, shape)?,
                offsets: None,
                lengths: Some(lens),
            })
        }
    }
}

fn append_zeros(v: &mut Values, k: usize) {
    match v {
        Values::F32(x) => x.resize(x.len() + k, 0.0),
        Values::F64(x) => x.resize(x.len() + k, 0.0),
        Values::I64(x) => x.resize(x.len() + k, 0),
        Values::I32(x) => x.resize(x.len() + k, 0),
        Values::U8(x) => x.resize(x.len() + k, 0),
        Values::Bool(x) => x.resize(x.len() + k, false),
        Values::Bytes(b) => (0..k).for_each(|_| b.push(b"")),
    }
}

/// A dict of whole-batch values as a [`Batch`]: fixed fields as arrays with
/// a leading dimension of `n` instances, ragged and bytes fields as lists of
/// `n` per-instance values.
fn to_batch(
    py: Python<'_>,
    schema: &Schema,
    dict: &Bound<'_, PyAny>,
    source: SourceId,
    first: &AtomicU64,
) -> PyResult<Batch> {
    let what = "push_batch";
    let values = fields_of(what, schema, dict)?;
    // The instance count: from the first fixed array field, else the first list.
    let mut n: Option<usize> = None;
    for v in &values {
        let len = v.len().map_err(|_| {
            PyValueError::new_err(format!(
                "{what}: every field needs a leading dimension (one entry per instance)"
            ))
        })?;
        n.get_or_insert(len);
    }
    let n = n.unwrap_or(0);
    let mut fields = Vec::with_capacity(schema.len());
    for (f, v) in schema.fields().iter().zip(&values) {
        if f.is_ragged() || f.dtype == DType::Bytes {
            if f.is_ragged() {
                fields.push(ragged_field(py, what, f, v, n)?);
                continue;
            }
            // Fixed-shape bytes: a list of n per-instance values.
            let items: Vec<Bound<'_, PyAny>> = v.try_iter()?.collect::<PyResult<_>>()?;
            if items.len() != n {
                return Err(PyValueError::new_err(format!(
                    "{what}: field `{}`: {} instances, the other fields have {n}",
                    f.name,
                    items.len()
                )));
            }
            let mut all = BytesList::new();
            for it in &items {
                if let Values::Bytes(b) = convert_bytes(what, f, it)?.values {
                    for s in b.iter() {
                        all.push(s);
                    }
                }
            }
            let len = all.len();
            fields.push(BatchField {
                data: to_array(&f.name, Values::Bytes(all), vec![len])?,
                offsets: None,
                lengths: None,
            });
            continue;
        }
        let c = convert(py, what, f, v, true)?;
        if c.shape[0] != n {
            return Err(PyValueError::new_err(format!(
                "{what}: field `{}`: {} instances, the other fields have {n}",
                f.name, c.shape[0]
            )));
        }
        fields.push(BatchField {
            data: match c.aligned {
                Some(a) => a,
                None => to_array(&f.name, c.values, c.shape)?,
            },
            offsets: None,
            lengths: None,
        });
    }
    let start = first.fetch_add(n as u64, Relaxed);
    let origins = (0..n as u64)
        .map(|k| Origin::new(source, start + k))
        .collect();
    Batch::from_parts(schema, fields, origins)
        .map_err(|e| PyValueError::new_err(format!("{what}: {e}")))
}

/// A refused push as a Python exception: an item that does not fit is a
/// ValueError; a closed stream or a stopped pipeline a FeedlineError.
fn push_error<T>(e: PushError<T>) -> PyErr {
    match e {
        PushError::Invalid(..) => PyValueError::new_err(e.to_string()),
        PushError::Stopped(PipelineError::Stopped, _) => {
            FeedlineError::new_err("the pipeline has stopped (the loader was closed)")
        }
        other => FeedlineError::new_err(other.to_string()),
    }
}

/// The producer's side of a push-mode loader (`Loader.with_feed`).
#[pyclass(module = "feedline", name = "Feed", frozen)]
pub struct PyFeed {
    /// A push works on a clone, so that `close` from another thread ends a
    /// push that waits (closing closes the stream for every clone).
    handle: Mutex<FeedHandle>,
    schema: Schema,
    batch_source: SourceId,
    batch_records: AtomicU64,
    /// Wait slices that ended without room (the Rust counters call them refused).
    slices: AtomicU64,
    /// Pushes waiting for room now.
    waiting: AtomicU64,
}

impl PyFeed {
    pub fn new(handle: FeedHandle) -> Self {
        PyFeed {
            schema: handle.schema().clone(),
            handle: Mutex::new(handle),
            batch_source: SourceId::intern("push_batch"),
            batch_records: AtomicU64::new(0),
            slices: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
        }
    }

    fn handle(&self) -> PyResult<FeedHandle> {
        Ok(self.lock().clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FeedHandle> {
        self.handle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Push: first at once with the GIL held (a push that finds room costs
    /// no GIL hand-over), then waiting with the GIL released, in slices,
    /// signals checked between them. The attempts that end without room are
    /// not refusals: they are counted apart and taken off the producer
    /// counters' `refused`.
    fn push_loop<T: Send>(
        &self,
        py: Python<'_>,
        item: T,
        now: impl Fn(T) -> Result<(), PushError<T>>,
        wait: impl Fn(T, Duration) -> Result<(), PushError<T>> + Send + Sync,
    ) -> PyResult<()> {
        let mut item = match now(item) {
            Ok(()) => return Ok(()),
            Err(PushError::Full(back)) => {
                self.slices.fetch_add(1, Relaxed);
                back
            }
            Err(e) => return Err(push_error(e)),
        };
        self.waiting.fetch_add(1, Relaxed);
        let result = loop {
            match py.allow_threads(|| wait(item, PUSH_SLICE)) {
                Ok(()) => break Ok(()),
                Err(PushError::Timeout(_, back)) | Err(PushError::Full(back)) => {
                    self.slices.fetch_add(1, Relaxed);
                    if let Err(e) = py.check_signals() {
                        break Err(e);
                    }
                    item = back;
                }
                Err(e) => break Err(push_error(e)),
            }
        };
        self.waiting.fetch_sub(1, Relaxed);
        result
    }
}

#[pymethods]
impl PyFeed {
    /// Push one instance (a dict of field name to value), waiting while the
    /// pipeline is full (GIL released). A wrong field raises ValueError and
    /// nothing is pushed.
    fn push(&self, py: Python<'_>, instance: &Bound<'_, PyAny>) -> PyResult<()> {
        let h = self.handle()?;
        let sample = to_sample(py, "push", &self.schema, instance)?;
        self.push_loop(py, sample, |s| h.try_push(s), |s, t| h.push_timeout(s, t))
    }

    /// Push a ready-made batch (a dict of field name to an array with one
    /// row per instance; ragged and bytes fields as lists of per-instance
    /// values). It reaches the consumer as it is, not shuffled.
    fn push_batch(&self, py: Python<'_>, batch: &Bound<'_, PyAny>) -> PyResult<()> {
        let h = self.handle()?;
        let b = to_batch(
            py,
            &self.schema,
            batch,
            self.batch_source,
            &self.batch_records,
        )?;
        self.push_loop(
            py,
            b,
            |b| h.try_push_batch(b),
            |b, t| h.push_batch_timeout(b, t),
        )
    }

    /// End the stream: the consumer sees the end after everything pushed;
    /// pushes waiting now and later raise FeedlineError. Idempotent.
    fn close(&self, py: Python<'_>) {
        let h = self.lock().clone();
        py.allow_threads(move || {
            h.close();
            drop(h)
        });
    }

    /// True once the stream is closed or the pipeline stopped.
    #[getter]
    fn closed(&self) -> bool {
        self.lock().is_closed()
    }

    /// Producer counters: instances, batches, batch_instances, refused
    /// (invalid, or the stream closed), blocked_s (time pushes waited for
    /// room), waiting (pushes waiting for room now).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        {
            let s = self.lock().stats();
            d.set_item("instances", s.instances)?;
            d.set_item("batches", s.batches)?;
            d.set_item("batch_instances", s.batch_instances)?;
            let slices = self.slices.load(Relaxed);
            d.set_item("refused", s.refused.saturating_sub(slices))?;
            d.set_item("waiting", self.waiting.load(Relaxed))?;
            d.set_item("blocked_s", s.blocked.as_secs_f64())?;
        }
        Ok(d)
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
