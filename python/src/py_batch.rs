//! Batches as Python sees them: [`PyBatch`], a read-only mapping of field
//! name to numpy array; each array is made by numpy's C API straight over
//! the buffer (see `npapi`), its base a [`FieldBuffer`] (module `buffer`),
//! which holds the batch's `Arc<Batch>` — so the Rust buffer lives as long
//! as any array (or DLPack importer) uses it.
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
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::buffer::{layout, FieldBuffer, Layout};
use crate::{feed_array_type, numpy};

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
    /// Each field's value, made at its first access (the same object after).
    values: Vec<GILOnceCell<PyObject>>,
    /// Each field's layout (pointer, dtype, shape, strides).
    layouts: Vec<Layout>,
}

fn usize_array(py: Python<'_>, v: &[usize]) -> PyResult<PyObject> {
    let list: Vec<i64> = v.iter().map(|&x| x as i64).collect();
    Ok(numpy(py)?.call_method1("array", (list, "int64"))?.unbind())
}

impl PyBatch {
    /// A delivered batch. Needs no GIL, and the loader makes it before it
    /// takes the GIL back: reading the batch's field headers here, once,
    /// pulls them (written by the collating thread, on another core) into
    /// this core's cache off the GIL — the first field view under the GIL
    /// took several µs more than the next ones for those cache misses alone.
    pub fn new(batch: Arc<Batch>, pass_: u64, seq: u64) -> Self {
        let n = batch.fields().len();
        let values = (0..n).map(|_| GILOnceCell::new()).collect();
        let layouts = (0..n).map(|i| layout(&batch, i)).collect();
        PyBatch {
            batch,
            pass_,
            seq,
            values,
            layouts,
        }
    }

    fn index(&self, key: &str) -> PyResult<usize> {
        self.batch
            .schema()
            .index_of(key)
            .ok_or_else(|| PyKeyError::new_err(key.to_string()))
    }

    /// The array (or list of bytes) of field `i` (made once).
    fn value(&self, py: Python<'_>, i: usize) -> PyResult<PyObject> {
        self.values[i]
            .get_or_try_init(py, || self.make_value(py, i))
            .map(|v| v.clone_ref(py))
    }

    fn make_value(&self, py: Python<'_>, i: usize) -> PyResult<PyObject> {
        let f = &self.batch.fields()[i];
        if let Array::Bytes(_) = &f.data {
            return self.bytes_value(py, i);
        }
        self.view(py, i)
    }

    /// A `FeedArray` viewing field `i`'s buffer.
    pub(crate) fn view(&self, py: Python<'_>, i: usize) -> PyResult<PyObject> {
        let holder = Bound::new(
            py,
            FieldBuffer {
                batch: self.batch.clone(),
                field: i,
            },
        )?;
        let (ptr, typestr, shape, strides, _) = &self.layouts[i];
        // SAFETY: the layout is the field's own (pointer, shape and strides
        // of its buffer), and `holder`, the array's base, keeps the batch
        // (so the buffer) alive as long as the array.
        let arr = unsafe {
            crate::npapi::view(
                py,
                feed_array_type(py)?,
                typestr,
                shape,
                strides,
                *ptr,
                holder.into_any(),
            )?
        };
        Ok(arr.unbind())
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
                // `total` strings: `n` slots of `max` units of `unit` strings.
                total.checked_div(n * unit.max(1)).unwrap_or(0)
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
            return self.view(py, i);
        };
        let sf = &self.batch.schema().fields()[i];
        let item = |k: usize| PyBytes::new(py, b.get(k)).into_any().unbind();
        if !sf.is_ragged() && sf.shape.is_empty() {
            let items: Vec<PyObject> = (0..b.len()).map(item).collect();
            return Ok(PyList::new(py, items)?.into_any().unbind());
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
                Ok(PyList::new(py, (s..e).map(item))?.into_any().unbind())
            })
            .collect::<PyResult<_>>()?;
        Ok(PyList::new(py, per)?.into_any().unbind())
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

/// A packed batch's piece as Python sees it: (row, source, record, start,
/// length, doc_tokens).
type SegmentTuple = (u32, String, u64, u64, u32, u64);

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
        PyList::new(py, self.names())?
            .into_any()
            .try_iter()
            .map(|i| i.into_any())
    }
    /// The field names, in schema order.
    fn keys(&self) -> Vec<String> {
        self.names()
    }
    /// Every field as `{name: convert(capsule)}`, in one call: each
    /// numeric field's buffer as a DLPack capsule (legacy `dltensor`, or
    /// `dltensor_versioned` flagged read-only when `versioned`) holding the
    /// batch, handed to `convert` (`torch.from_dlpack`,
    /// `jax.dlpack.from_dlpack`, …) — no copy and no numpy view made on
    /// the way; bytes fields as `batch[name]` gives them. What
    /// `feedline.torch` turns each batch into tensors with.
    #[pyo3(signature = (convert, versioned=false))]
    pub fn _dlpack_dict<'py>(
        &self,
        py: Python<'py>,
        convert: &Bound<'py, PyAny>,
        versioned: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (i, f) in self.batch.schema().fields().iter().enumerate() {
            let v = match crate::dlpack::field_capsule(py, &self.batch, i, versioned)? {
                Some(capsule) => convert.call1((capsule,))?,
                None => self.value(py, i)?.into_bound(py),
            };
            d.set_item(&f.name, v)?;
        }
        Ok(d)
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
                all.get_item(k)?
                    .get_item(pyo3::types::PySlice::new(py, 0, (e - s) as isize, 1))?
            } else if sf.is_ragged() {
                all.get_item(pyo3::types::PySlice::new(py, s as isize, e as isize, 1))?
            } else {
                all.get_item(k)?
            };
            out.push(v.unbind());
        }
        Ok(PyList::new(py, out)?.into_any().unbind())
    }
    /// A bytes field without copies: `(data, offsets)`, `data` a read-only
    /// uint8 array viewing every byte string of the batch concatenated (in
    /// instance order), `offsets` (int64) where each starts and ends —
    /// string k is `data[offsets[k]:offsets[k+1]]`. `batch[name]` copies
    /// each string into a `bytes` object instead.
    fn bytes_buffer(&self, py: Python<'_>, name: &str) -> PyResult<(PyObject, PyObject)> {
        let i = self.index(name)?;
        let Array::Bytes(b) = &self.batch.fields()[i].data else {
            return Err(PyValueError::new_err(format!(
                "field `{name}` is not a bytes field (it is {})",
                crate::schema::describe_field(&self.batch.schema().fields()[i])
            )));
        };
        let offsets: Vec<usize> = std::iter::once(0).chain(b.ends().iter().copied()).collect();
        Ok((self.view(py, i)?, usize_array(py, &offsets)?))
    }
    /// Provenance: (source, record) of every instance, in batch order —
    /// the file and record, in every shuffle mode (`global` reads
    /// positions of its order: each is given as the record it stands for).
    #[getter]
    fn origins(&self) -> Vec<(String, u64)> {
        (feedline_actors::real_origins(self.pass_, self.batch.origins()).iter())
            .map(|o| (o.source.to_string(), o.record))
            .collect()
    }
    /// A packed batch's document pieces, row by row: `(row, source,
    /// record, start, length, doc_tokens)` — document `record` of `source`,
    /// its tokens `[start, start + length)` (of `doc_tokens` as packed) in
    /// row `row`, in order; `None` for a batch that is not packed.
    #[getter]
    fn segments(&self) -> Option<Vec<SegmentTuple>> {
        self.batch.segments().map(|segs| {
            segs.iter()
                .map(|s| {
                    let o = feedline_actors::real_origin(self.pass_, s.origin);
                    (
                        s.row,
                        o.source.to_string(),
                        o.record,
                        s.start,
                        s.len,
                        s.doc_tokens,
                    )
                })
                .collect()
        })
    }
    /// Rows at the end of the batch that are padding — instances repeated
    /// (`equalize="pad"`), or packed rows holding no token — which a loss
    /// or metric should not count.
    #[getter]
    fn padded_rows(&self) -> usize {
        self.batch.padded_rows()
    }
    /// One flag per row (a numpy bool array): True for a real instance or
    /// packed row, False for padding (see `padded_rows`) — multiply a
    /// per-row loss or metric by it.
    #[getter]
    fn mask(&self, py: Python<'_>) -> PyResult<PyObject> {
        let flags: Vec<bool> = self.batch.mask().to_vec();
        Ok(numpy(py)?.call_method1("array", (flags, "bool"))?.unbind())
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
