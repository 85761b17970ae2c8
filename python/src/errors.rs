//! The package's exceptions and how a pipeline's errors become them:
//! `FeedlineError` (a bad record, a pipeline failure), ValueError for a
//! refused setting — spelled in Python's keywords ([`Keywords`]) —,
//! FileNotFoundError for a missing input.

use feedline_actors::{PipelineError, Setting, SettingError, Spelling, Value};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyFileNotFoundError, PyValueError};
use pyo3::prelude::*;

create_exception!(
    feedline,
    FeedlineError,
    PyException,
    "A bad record (with its file, record and offset), or a pipeline failure."
);

/// Python's spelling of the settings: its keywords (`batch_size`,
/// `min_pool=3000`, `pack_policy="concat"`); a setting with no keyword by
/// its key.
pub(crate) struct Keywords;

impl Keywords {
    fn keyword(setting: Setting) -> &'static str {
        use Setting as S;
        match setting {
            S::FileSet => "file sets",
            S::PushSource => "Loader.with_feed",
            S::Shard => "rank/world_size",
            S::Batch => "batch_size",
            S::MapSchema => "map_schema",
            S::Tokenizer => "tokenizer",
            S::OnError => "on_error",
            s => s.key(),
        }
    }

    /// `e` as Python says it.
    pub(crate) fn say(e: &SettingError) -> String {
        format!("invalid configuration: {}", e.spelled(&Keywords))
    }
}

impl Spelling for Keywords {
    fn name(&self, setting: Setting) -> String {
        Keywords::keyword(setting).to_string()
    }

    fn given(&self, setting: Setting, value: &Value) -> String {
        let k = Keywords::keyword(setting);
        match value {
            Value::Number(n) => format!("{k}={n}"),
            Value::Text(t) => format!("{k}={t:?}"),
        }
    }
}

pub(crate) fn to_py_err(e: PipelineError) -> PyErr {
    match e {
        PipelineError::Config(e) => PyValueError::new_err(Keywords::say(&e)),
        other => FeedlineError::new_err(other.to_string()),
    }
}

/// A start-up error: settings (a glob that matches nothing, an unknown
/// format) are ValueError, a missing file FileNotFoundError, the rest (what
/// the data says: a file that is not what its format says, …) as during
/// iteration.
pub(crate) fn start_err(e: PipelineError) -> PyErr {
    use feedline::Error as E;
    use feedline_actors::checkpoint::CheckpointError as C;
    if let PipelineError::Checkpoint(c) = &e {
        // A resume that does not fit these settings or inputs: what changed.
        if !matches!(&**c, C::Io { .. } | C::Read(_)) {
            return PyValueError::new_err(e.to_string());
        }
    }
    if let PipelineError::Data(d) = &e {
        match &**d {
            E::Config(_) | E::UnknownFormat { .. } => return PyValueError::new_err(e.to_string()),
            E::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                return PyFileNotFoundError::new_err(e.to_string())
            }
            _ => {}
        }
    }
    to_py_err(e)
}
