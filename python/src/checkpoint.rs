//! Checkpoints from Python: the Rust [`Checkpoint`] as a JSON-serialisable
//! dict (`Loader.state_dict()`), and back (`Loader(..., resume=state)`, one
//! dict or a list of them — one per rank of the old job — for an elastic
//! resume under new `rank`/`world_size`), through its JSON form: the dict
//! is exactly the file `loader.checkpoint(path)` and `feedline run
//! --checkpoint` write.

use std::path::Path;

use feedline_actors::checkpoint::{Checkpoint, CheckpointError};
use pyo3::exceptions::{PyFileNotFoundError, PyNotADirectoryError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::FeedlineError;

/// The checkpoint as Python objects (`json.loads` of its JSON form).
pub fn to_dict<'py>(py: Python<'py>, cp: &Checkpoint) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (cp.to_json(),))
}

/// `resume=`: a state dict, or a list (tuple) of them.
pub fn resume_list(py: Python<'_>, resume: &Bound<'_, PyAny>) -> PyResult<Vec<Checkpoint>> {
    let items: Vec<Bound<'_, PyAny>> =
        if resume.is_instance_of::<PyList>() || resume.is_instance_of::<PyTuple>() {
            resume.try_iter()?.collect::<PyResult<_>>()?
        } else {
            vec![resume.clone()]
        };
    if items.is_empty() {
        return Err(PyValueError::new_err(
            "resume: an empty list (give a state_dict(), or one per rank of the old job)",
        ));
    }
    let dumps = py.import("json")?.getattr("dumps")?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let what = if items.len() > 1 {
                format!("resume[{i}]")
            } else {
                "resume".to_string()
            };
            let text: String = dumps
                .call1((item,))
                .and_then(|t| t.extract())
                .map_err(|e| {
                    PyValueError::new_err(format!(
                        "{what}: expected a state_dict() (a JSON-serialisable dict), got {}: {e}",
                        item.get_type()
                    ))
                })?;
            Checkpoint::from_json(&text, Path::new(&what))
                .map_err(|e| PyValueError::new_err(e.to_string()))
        })
        .collect()
}

/// A failed `checkpoint(path)`: the OS error as OSError; a path in a
/// missing directory as FileNotFoundError, under a file as
/// NotADirectoryError (both OSErrors); a path refused as the place of a
/// checkpoint (not a regular file, one of the loader's inputs) as
/// ValueError; the rest as FeedlineError.
pub fn save_err(e: &CheckpointError) -> PyErr {
    let text = e.to_string();
    match e {
        CheckpointError::Io { .. } => PyOSError::new_err(text),
        CheckpointError::MissingDirectory { .. } => PyFileNotFoundError::new_err(text),
        CheckpointError::NotADirectory { .. } => PyNotADirectoryError::new_err(text),
        CheckpointError::NotARegularFile { .. } | CheckpointError::IsAnInput { .. } => {
            PyValueError::new_err(text)
        }
        _ => FeedlineError::new_err(text),
    }
}
