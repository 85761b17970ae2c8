//! [`PipelineError`]: why a pipeline stopped, handed to every consumer.

use std::sync::Arc;
use std::time::Duration;

/// Why the pipeline failed or refused. Cheap to clone: every consumer gets
/// the same error.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// Bad data under the `fail` policy (names file, record, offset, field).
    #[error("{0}")]
    Data(Arc<feedline::Error>),
    /// More bad records than the skip policy's budget allows.
    #[error("too many bad records: {bad} skipped, budget {budget}; last: {last}")]
    TooManyBad {
        /// Bad records skipped so far.
        bad: u64,
        /// The budget, as configured.
        budget: String,
        /// The last bad record's error.
        last: Arc<feedline::Error>,
    },
    /// A reader panicked on the same file more often than allowed.
    #[error("{file}: reader panicked at record {record} ({attempts} attempts): {message}")]
    ReaderPanic {
        /// The file.
        file: String,
        /// The record the reader had reached.
        record: u64,
        /// How many readers tried.
        attempts: u32,
        /// The panic message.
        message: String,
    },
    /// A reader made no progress for too long.
    #[error("{file}: reader stuck at record {record} for {stuck:?}")]
    ReaderStuck {
        /// The file.
        file: String,
        /// The record it had reached.
        record: u64,
        /// How long it has made no progress.
        stuck: Duration,
    },
    /// A trainer's step failed or panicked.
    #[error("device {device}: trainer failed: {message}")]
    Trainer {
        /// The device.
        device: usize,
        /// What happened.
        message: String,
    },
    /// The configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The pipeline was stopped (the loader dropped, or the system stopped).
    #[error("the pipeline has stopped")]
    Stopped,
    /// Waited longer than asked.
    #[error("timed out after {waited:?}: {why}")]
    Timeout {
        /// How long.
        waited: Duration,
        /// Which stage is stuck, as far as the stats tell.
        why: String,
    },
}

impl From<feedline::Error> for PipelineError {
    fn from(e: feedline::Error) -> Self {
        PipelineError::Data(Arc::new(e))
    }
}
