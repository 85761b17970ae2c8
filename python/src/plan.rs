//! The planning `feedline.ray` takes from the native code, so that a Ray
//! `Service` or `read()` reads what a `feedline.Loader` given the same
//! inputs reads:
//!
//! - `_expand_inputs`: what the user typed (paths, URLs, globs, brace
//!   ranges, `@list` files, `FORMAT:` prefixes, kept on every result) into
//!   file specs, by the Loader's own `feedline::plan::expand_inputs`, its
//!   errors raised as the Loader raises them (same type, same message).
//!
//! `feedline.ray` (`python/pysrc/feedline/ray.py`) only translates these
//! to and from its own values (lists of str).

use feedline_actors::PipelineError;
use pyo3::prelude::*;
use pyo3::types::PyModule;

/// Add this module's functions to the native module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_expand_inputs, m)?)?;
    Ok(())
}

/// `inputs` expanded into file specs as `feedline.Loader(files=inputs)`
/// expands them (remote globs listed with the GIL released); a mistake
/// raises what the Loader raises for it (a glob matching nothing, a list
/// file that is not there, a file given twice: ValueError or
/// FileNotFoundError, the Loader's message).
#[pyfunction]
#[pyo3(signature = (inputs))]
pub fn _expand_inputs(py: Python<'_>, inputs: Vec<String>) -> PyResult<Vec<String>> {
    if inputs.is_empty() {
        // the Loader refuses an empty list in its settings' check
        // (`PipelineConfig::check`), before it expands anything
        return Err(crate::start_err(PipelineError::Config(
            "no input files".into(),
        )));
    }
    py.allow_threads(|| feedline::plan::expand_inputs(&inputs))
        .map_err(|e| crate::start_err(PipelineError::from(e)))
}
