//! The Python module `feedline`: a thin PyO3 layer over
//! `feedline_actors::Loader`. Batches are exposed as mappings of field name
//! to numpy arrays that view the batch's Rust buffer (made by numpy's C
//! API, [`npapi`]; the array's base holds the `Arc<Batch>`), of a
//! small ndarray subclass, `feedline.FeedArray`, that adds DLPack export
//! ([`dlpack`]). The GIL is released while waiting — for a batch, for room
//! to push, for threads to stop — in slices, with signals checked between
//! slices so Ctrl-C raises KeyboardInterrupt. Push-mode loaders
//! (`Loader.with_feed`) are fed through [`feed::PyFeed`].

mod buffer;
mod checkpoint;
mod dlpack;
mod epochs;
mod errors;
mod feed;
mod feed_array;
mod keywords;
mod loader;
mod logbridge;
mod map;
mod npapi;
mod pixels;
mod plan;
mod py_batch;
mod schema;
mod stats;

use pyo3::prelude::*;
use pyo3::types::PyModule;

use feed::PyFeed;
use loader::{close_all, PyEpoch, PyLoader};
use py_batch::PyBatch;

pub(crate) use errors::{start_err, FeedlineError, Keywords};
pub(crate) use feed_array::{feed_array_type, numpy};

/// `gil_used = false`: on a free-threaded CPython (3.13t and later) the
/// module does not turn the GIL back on. Everything it shares between
/// threads is behind Rust's own synchronisation (the loader behind a mutex,
/// counters atomic, every class frozen and `Sync`); the per-batch caches
/// (`GILOnceCell`) may then make a field's view twice when two threads ask at
/// once, keeping one — both are views of the same buffer.
///
/// The native module is `feedline._native`; the package `feedline`
/// (`python/pysrc/feedline`) re-exports it, with `feedline.torch` and
/// `feedline.jax` beside it.
#[pymodule(gil_used = false)]
#[pyo3(name = "_native")]
fn feedline_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    logbridge::install();
    // `threading` imported here, on the importing (main) thread: the first
    // import of `threading` takes the thread it runs on for the main thread,
    // and a map= worker (which keeps its thread state until the loader
    // stops, see `map`) taken so would make the interpreter's exit wait for
    // that worker before the exit hook that stops it.
    py.import("threading")?;
    m.add_class::<PyLoader>()?;
    m.add_class::<PyEpoch>()?;
    m.add_class::<PyBatch>()?;
    m.add_class::<PyFeed>()?;
    m.add("FeedlineError", py.get_type::<FeedlineError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(logbridge::_flush_logs, m)?)?;
    m.add_function(wrap_pyfunction!(pixels::_expand_pixels, m)?)?;
    m.add_function(wrap_pyfunction!(pixels::_pixel_steps, m)?)?;
    plan::register(m)?;
    let mapping = py.import("collections.abc")?.getattr("Mapping")?;
    mapping.call_method1("register", (py.get_type::<PyBatch>(),))?;
    feed_array::register(m)?;
    py.import("atexit")?
        .call_method1("register", (wrap_pyfunction!(close_all, m)?,))?;
    Ok(())
}
