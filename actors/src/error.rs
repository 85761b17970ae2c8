//! [`PipelineError`]: why a pipeline stopped, handed to every consumer; and
//! [`PushError`]: why a push into a push-mode pipeline was refused.

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
    /// Saving, loading or resuming from a checkpoint failed (names the
    /// file, or what changed since the checkpoint, old vs new).
    #[error("{0}")]
    Checkpoint(Arc<feedline::checkpoint::CheckpointError>),
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
    /// A stage panicked — in its own code or in user code it called (a
    /// cost function, a training step or hook, a generator, a format).
    #[error("{stage} panicked handling {handling}: {message}")]
    Panicked {
        /// The stage (`"shuffle stage"`, `"reader 2"`, `"trainer of device 1"`, …).
        stage: Arc<str>,
        /// What it was handling (a message, an event).
        handling: Arc<str>,
        /// The panic message.
        message: Arc<str>,
    },
    /// Ranks cannot be given the same number of batches (`Equalize`): the
    /// very mismatch that hangs collective operations, so the pipeline stops.
    #[error("cannot equalize ranks: {0}")]
    Equalize(String),
    /// A trainer's step failed.
    #[error("device {device}: trainer failed: {message}")]
    Trainer {
        /// The device.
        device: usize,
        /// What happened.
        message: String,
    },
    /// The configuration is invalid: a sentence naming the settings by
    /// key, which each face spells its own way ([`SettingError::spelled`]).
    #[error("invalid configuration: {0}")]
    Config(crate::setting::SettingError),
    /// The Prometheus metrics could not be served on the address given
    /// (`metrics_addr`): in use, not this machine's, not resolved.
    #[error("metrics address {addr}: {message}")]
    Metrics {
        /// The address, as given.
        addr: String,
        /// Why.
        message: String,
    },
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

impl PipelineError {
    /// A configuration error of this sentence.
    pub(crate) fn config(sentence: impl Into<crate::setting::SettingError>) -> Self {
        PipelineError::Config(sentence.into())
    }
}

impl From<feedline::Error> for PipelineError {
    fn from(e: feedline::Error) -> Self {
        PipelineError::Data(Arc::new(e))
    }
}

/// Why a push failed. The item comes back in every case
/// ([`into_inner`](Self::into_inner)).
#[derive(Debug)]
pub enum PushError<T> {
    /// The item does not fit the schema: the error names the field, the
    /// expected and the actual shape. Nothing was pushed.
    Invalid(Box<feedline::Error>, T),
    /// No room now ([`FeedHandle::try_push`](crate::FeedHandle::try_push)).
    Full(T),
    /// No room within the time given.
    Timeout(Duration, T),
    /// The stream was closed ([`FeedHandle::close`](crate::FeedHandle::close), or every handle dropped).
    Closed(T),
    /// The pipeline stopped (the loader was dropped, or it failed): nobody
    /// will consume the item.
    Stopped(PipelineError, T),
}

impl<T> PushError<T> {
    /// The item that was not pushed.
    pub fn into_inner(self) -> T {
        match self {
            PushError::Invalid(_, t)
            | PushError::Full(t)
            | PushError::Timeout(_, t)
            | PushError::Closed(t)
            | PushError::Stopped(_, t) => t,
        }
    }

    /// The item that was not pushed.
    pub fn item(&self) -> &T {
        match self {
            PushError::Invalid(_, t)
            | PushError::Full(t)
            | PushError::Timeout(_, t)
            | PushError::Closed(t)
            | PushError::Stopped(_, t) => t,
        }
    }

    pub(crate) fn map<U>(self, f: impl FnOnce(T) -> U) -> PushError<U> {
        match self {
            PushError::Invalid(e, t) => PushError::Invalid(e, f(t)),
            PushError::Full(t) => PushError::Full(f(t)),
            PushError::Timeout(d, t) => PushError::Timeout(d, f(t)),
            PushError::Closed(t) => PushError::Closed(f(t)),
            PushError::Stopped(e, t) => PushError::Stopped(e, f(t)),
        }
    }
}

impl<T> std::fmt::Display for PushError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PushError::Invalid(e, _) => write!(f, "{e}"),
            PushError::Full(_) => f.write_str("the pipeline is full"),
            PushError::Timeout(d, _) => write!(f, "no room in the pipeline within {d:?}"),
            PushError::Closed(_) => f.write_str("the push stream is closed"),
            PushError::Stopped(e, _) => write!(f, "the pipeline has stopped ({e})"),
        }
    }
}

impl<T: std::fmt::Debug> std::error::Error for PushError<T> {}
