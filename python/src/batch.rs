//! Batches as Python sees them: [`PyBatch`], a read-only mapping of field
//! name to numpy array, and [`FieldBuffer`], the object each array views
//! (through `__array_interface__`) that holds the batch's `Arc<Batch>` — so
//! the Rust buffer lives as long as any array (or DLPack importer) uses it.
//!
//! Layouts, as the schema says:
//! - fixed shape `[d…]`: an array `[batch, d…]`;
//! - ragged, offsets layout (`[None, d…]`): the values of all instances
//!   concatenated, `[total, d…]`, with `batch.offsets(name)` (`batch + 1`
//!   int64 offsets into the leading dimension);
//! - ragged, padded layout: `[batch, max_len, d…]` padded with zeros, with
//!   `batch.lengths(name)` (int64, each instance's length);
//! - bytes: a list of `bytes` per instance for a scalar bytes field, else a
//!   list (per instance) of lists of `bytes`.
//!
//! `batch.instance_values(name)` splits any field per instance.

use std::sync::Arc;

use feedline::{Array, Batch, DType};
use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::{feed_array_type, numpy};

/// One field of a batch, exported to numpy through `__array_interface__`.
#[pyclass(module = "feedline", frozen)]
pub struct FieldBuffer {
    pub batch: Arc<Batch>,
    pub field: usize,
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
pub struct PyBatch {
    pub batch: Arc<Batch>,
    /// The pass (epoch) the batch belongs to, from 0.
    #[pyo3(get)]
    pub pass_: u64,
    /// The batch's number within its pass, from 0.
    #[pyo3(get)]
    pub seq: u64,
}

fn usize_array(py: Python<'_>, v: &[usize]) -> PyResult<PyObject> {
    let list: Vec<i64> = v.iter().map(|&x| x as i64).collect();
    Ok(numpy(py)?.call_method1("array", (list, "int64"))?.unbind())
}

impl PyBatch {
    fn index(&self, key: &str) -> PyResult<usize> {
        self.batch
            .schema()
            .index_of(key)
            .ok_or_else(|| PyKeyError::new_err(key.to_string()))
    }

    /// The array (or list of bytes) of field `i`.
    fn value(&self, py: Python<'_>, i: usize) -> PyResult<PyObject> {
        let f = &self.batch.fields()[i];
        if let Array::Bytes(_) = &f.data {
            return self.bytes_value(py, i);
        }
        let holder = Bound::new(
            py,
            FieldBuffer {
                batch: self.batch.clone(),
                field: i,
            },
        )?;
        let arr = numpy(py)?.call_method1("asarray", (holder,))?;
        Ok(arr.call_method1("view", (feed_array_type(py)?,))?.unbind())
    }

    /// Where each instance's units start and end in field `i`'s leading
    /// dimension (bytes: in its list of strings).
    fn bounds(&self, i: usize) -> Vec<(usize, usize)> {
        let sf = &self.batch.schema().fields()[i];
        let bf = &self.batch.fields()[i];
        let n = self.batch.len();
        if let Some(off) = &bf.offsets {
            return off.windows(2).map(|w| (w[0], w[1])).collect();
        }
        let unit = sf.unit_elements();
        if let Some(len) = &bf.lengths {
            // Padded: instance k's slot starts at k * max (in units).
            let total = bf.data.shape().first().copied().unwrap_or(0);
            let max = if sf.dtype == DType::Bytes {
                total.checked_div(n).unwrap_or(0)
            } else {
                bf.data.shape().get(1).copied().unwrap_or(0)
            };
            return len
                .iter()
                .enumerate()
                .map(|(k, &l)| (k * max, k * max + l))
                .collect();
        }
        (0..n)
            .map(|k| (k * unit.max(1), (k + 1) * unit.max(1)))
            .collect()
    }

    fn bytes_value(&self, py: Python<'_>, i: usize) -> PyResult<PyObject> {
        let Array::Bytes(b) = &self.batch.fields()[i].data else {
            unreachable!("called for bytes fields only")
        };
        let sf = &self.batch.schema().fields()[i];
        let item = |k: usize| PyBytes::new_bound(py, b.get(k)).into_any().unbind();
        if !sf.is_ragged() && sf.shape.is_empty() {
            let items: Vec<PyObject> = (0..b.len()).map(item).collect();
            return Ok(PyList::new_bound(py, items).into_any().unbind());
        }
        let unit = sf.unit_elements().max(1);
        let per: Vec<PyObject> = self
            .bounds(i)
            .into_iter()
            .map(|(s, e)| {
                let (s, e) = if sf.is_ragged() {
                    (s * unit, e * unit)
                } else {
                    (s, e)
                };
                PyList::new_bound(py, (s..e).map(item)).into_any().unbind()
            })
            .collect();
        Ok(PyList::new_bound(py, per).into_any().unbind())
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
        let i = self.index(key)?;
        self.value(py, i)
    }
    fn __len__(&self) -> usize {
        self.batch.fields().len()
    }
    fn __contains__(&self, key: &str) -> bool {
        self.batch.schema().index_of(key).is_some()
    }
    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        PyList::new_bound(py, self.names())
            .into_any()
            .iter()
            .map(|i| i.into_any())
    }
    /// The field names, in schema order.
    fn keys(&self) -> Vec<String> {
        self.names()
    }
    /// The (name, array) pairs, in schema order.
    fn items(&self, py: Python<'_>) -> PyResult<Vec<(String, PyObject)>> {
        (0..self.batch.fields().len())
            .map(|i| Ok((self.names()[i].clone(), self.value(py, i)?)))
            .collect()
    }
    /// The arrays, in schema order.
    fn values(&self, py: Python<'_>) -> PyResult<Vec<PyObject>> {
        (0..self.batch.fields().len())
            .map(|i| self.value(py, i))
            .collect()
    }
    /// The array of `key`, or `default` when there is no such field.
    #[pyo3(signature = (key, default=None))]
    fn get(&self, py: Python<'_>, key: &str, default: Option<PyObject>) -> PyResult<PyObject> {
        match self.batch.schema().index_of(key) {
            Some(i) => self.value(py, i),
            None => Ok(default.unwrap_or_else(|| py.None())),
        }
    }
    /// A ragged field laid out as offsets: `batch + 1` int64 offsets into
    /// the leading dimension of `batch[name]` (instance k is
    /// `batch[name][off[k]:off[k+1]]`). `None` for other fields.
    fn offsets(&self, py: Python<'_>, name: &str) -> PyResult<Option<PyObject>> {
        let i = self.index(name)?;
        self.batch.fields()[i]
            .offsets
            .as_deref()
            .map(|o| usize_array(py, o))
            .transpose()
    }
    /// A ragged field laid out padded: each instance's length (int64) before
    /// padding along dimension 1 of `batch[name]`. `None` for other fields.
    fn lengths(&self, py: Python<'_>, name: &str) -> PyResult<Option<PyObject>> {
        let i = self.index(name)?;
        self.batch.fields()[i]
            .lengths
            .as_deref()
            .map(|l| usize_array(py, l))
            .transpose()
    }
    /// Field `name` split per instance: a list of `batch.size` arrays
    /// (views; ragged fields trimmed to each instance's length) — or, for
    /// bytes fields, what `batch[name]` gives.
    fn instance_values(&self, py: Python<'_>, name: &str) -> PyResult<PyObject> {
        let i = self.index(name)?;
        let all = self.value(py, i)?;
        if self.batch.schema().fields()[i].dtype == DType::Bytes {
            return Ok(all);
        }
        let all = all.bind(py);
        let sf = &self.batch.schema().fields()[i];
        let padded = self.batch.fields()[i].lengths.is_some();
        let mut out = Vec::with_capacity(self.batch.len());
        for (k, (s, e)) in self.bounds(i).into_iter().enumerate() {
            let v = if padded {
                all.get_item(k)?.get_item(pyo3::types::PySlice::new_bound(
                    py,
                    0,
                    (e - s) as isize,
                    1,
                ))?
            } else if sf.is_ragged() {
                all.get_item(pyo3::types::PySlice::new_bound(
                    py, s as isize, e as isize, 1,
                ))?
            } else {
                all.get_item(k)?
            };
            out.push(v.unbind());
        }
        Ok(PyList::new_bound(py, out).into_any().unbind())
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
