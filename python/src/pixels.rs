//! The output steps of a built-in image transform (`to-f32`, `normalize`,
//! `chw`) run on pixels made elsewhere: `feedline.ray`'s worker actors run
//! a transform's pixel steps and ship `u8` `[n, H, W, 3]` (a quarter of an
//! `f32` output's bytes through Ray's object store), and the rank writes
//! the transform's output here — to the bit what the whole transform makes
//! (`Plan::pixels`, `feedline_vision::write_pixels`) — into a recycled,
//! aligned batch buffer, the GIL released.

use std::sync::Arc;

use feedline::{Array, Batch, BatchField, DType, Field, Origin, Schema, SourceId};
use feedline_vision::{write_pixels, Dtype, Plan, VisionError};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::py_batch::PyBatch;

/// The pixel steps of the transform `spec` as a spec (its geometry, the
/// output left `u8` `[H, W, 3]`), or `None` when it has no output steps.
/// A ValueError for a bad spec.
#[pyfunction]
#[pyo3(signature = (transform))]
pub fn _pixel_steps(transform: &str) -> PyResult<Option<String>> {
    let plan = Plan::parse(transform)
        .map_err(|e| PyValueError::new_err(format!("transform={transform:?}: {e}")))?;
    Ok(plan.has_output_steps().then(|| plan.pixels().to_string()))
}

/// The transform `spec`'s output steps applied to `pixels`, a C-contiguous
/// `uint8` array `[n, H, W, 3]` (any object with the buffer protocol, a
/// read-only one too) as that transform's pixel steps made it: a new
/// `FeedArray` `[n, H, W, 3]` or `[n, 3, H, W]`, `float32` (or `uint8` for a
/// bare `chw`). A ValueError names what does not fit.
#[pyfunction]
#[pyo3(signature = (pixels, transform))]
pub fn _expand_pixels(
    py: Python<'_>,
    pixels: &Bound<'_, PyAny>,
    transform: &str,
) -> PyResult<PyObject> {
    let plan = Plan::parse(transform)
        .map_err(|e| PyValueError::new_err(format!("transform={transform:?}: {e}")))?;
    if !plan.has_output_steps() {
        return Err(PyValueError::new_err(format!(
            "transform={transform:?} has no output steps (to-f32, normalize, chw): its pixels are its output"
        )));
    }
    let (ptr, shape) = pixel_buffer(pixels)?;
    let (n, height, width) = (shape[0], shape[1], shape[2]);
    let image = height * width * 3;
    let out_shape: Vec<usize> = std::iter::once(n)
        .chain(plan.format().layout.shape(height, width))
        .collect();
    let format = *plan.format();
    let src: &[u8] = if n * image == 0 {
        &[]
    } else {
        // SAFETY: `pixels` (borrowed for this whole call, so alive) is a
        // C-contiguous uint8 array of `n * image` elements at `ptr`
        // (checked by `pixel_buffer`); it is only read.
        unsafe { std::slice::from_raw_parts(ptr as *const u8, n * image) }
    };
    let src = SendSlice(src);
    let filled_shape = out_shape.clone();
    let (data, dtype, written) = py.allow_threads(move || {
        let out_shape = filled_shape;
        let src = src.0;
        let mut written = Ok(());
        let (data, dtype) = match plan.dtype() {
            Dtype::F32 => (
                Array::aligned_filled(&out_shape, |out: &mut [f32]| {
                    written = expand_all(src, out, image, height, width, &format)
                }),
                DType::F32,
            ),
            Dtype::U8 => (
                Array::aligned_filled(&out_shape, |out: &mut [u8]| {
                    written = expand_all(src, out, image, height, width, &format)
                }),
                DType::U8,
            ),
        };
        (data, dtype, written)
    });
    written.map_err(|e| PyValueError::new_err(format!("pixels: {e}")))?;
    let schema = Schema::new(vec![Field::new("pixels", dtype, out_shape[1..].to_vec())])
        .map_err(|e| PyValueError::new_err(format!("pixels: {e}")))?;
    let source = SourceId::intern("<pixels>");
    let origins = (0..n as u64).map(|k| Origin::new(source, k)).collect();
    let field = BatchField {
        data,
        offsets: None,
        lengths: None,
    };
    let batch = Batch::from_parts(&schema, vec![field], origins)
        .map_err(|e| PyValueError::new_err(format!("pixels: {e}")))?;
    PyBatch::new(Arc::new(batch), 0, 0).view(py, 0)
}

/// The data pointer and shape of `pixels`, a C-contiguous uint8 numpy
/// array `[n, H, W, 3]` (by its `__array_interface__`).
fn pixel_buffer(pixels: &Bound<'_, PyAny>) -> PyResult<(usize, Vec<usize>)> {
    let expected = "pixels: expected a uint8 numpy array [n, H, W, 3]";
    let iface = pixels
        .getattr("__array_interface__")
        .map_err(|_| PyValueError::new_err(format!("{expected}, found {}", pixels.get_type())))?;
    let typestr: String = iface.get_item("typestr")?.extract()?;
    let shape: Vec<usize> = iface.get_item("shape")?.extract()?;
    if typestr != "|u1" || shape.len() != 4 || shape[3] != 3 {
        return Err(PyValueError::new_err(format!(
            "{expected}, found typestr {typestr:?} and shape {shape:?}"
        )));
    }
    if !iface.get_item("strides")?.is_none() {
        return Err(PyValueError::new_err(format!(
            "{expected}, C-contiguous (np.ascontiguousarray)"
        )));
    }
    let (ptr, _readonly): (usize, bool) = iface.get_item("data")?.extract()?;
    Ok((ptr, shape))
}

/// The source bytes, sent to the thread that runs without the GIL.
struct SendSlice<'a>(&'a [u8]);
// SAFETY: a shared byte slice; the buffer it views outlives the closure.
unsafe impl Send for SendSlice<'_> {}

/// Every image of `src` written into `out` (the same count of images),
/// split over up to 4 threads for a large batch.
fn expand_all<T: feedline_vision::Element + Send>(
    src: &[u8],
    out: &mut [T],
    image: usize,
    height: usize,
    width: usize,
    format: &feedline_vision::OutputFormat,
) -> Result<(), VisionError> {
    if image == 0 {
        return Ok(());
    }
    let n = src.len() / image;
    let threads = std::thread::available_parallelism()
        .map_or(1, |p| p.get())
        .min(4)
        .min(n.div_ceil(8))
        .max(1);
    let per = n.div_ceil(threads);
    let one = |src: &[u8], out: &mut [T]| -> Result<(), VisionError> {
        for (s, o) in src.chunks_exact(image).zip(out.chunks_exact_mut(image)) {
            write_pixels(s, height, width, format, o)?;
        }
        Ok(())
    };
    if threads == 1 {
        return one(src, out);
    }
    std::thread::scope(|scope| {
        let parts: Vec<_> = src
            .chunks(per * image)
            .zip(out.chunks_mut(per * image))
            .map(|(s, o)| scope.spawn(move || one(s, o)))
            .collect();
        parts.into_iter().try_for_each(|p| {
            p.join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    })
}
