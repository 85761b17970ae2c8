//! The command's errors: a refused flag (named, with its value and what it
//! accepts), bad data or settings found by the libraries, a file the command
//! writes, and a failed write to standard output or standard error.

use std::path::PathBuf;

use feedline_actors::PipelineError;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A flag's value, or a combination of flags, that the command refuses
    /// (exit code 2, as for clap's own usage errors).
    #[error("{0}")]
    Usage(String),
    /// Bad data or settings found by the core crate.
    #[error(transparent)]
    Core(#[from] feedline::Error),
    /// The pipeline failed, or refused its settings (said with the
    /// settings spelled as the command's flags).
    #[error("{}", said(.0))]
    Pipeline(#[from] PipelineError),
    /// A file the command writes (the trace) could not be written.
    #[error("{}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// SIGINT and SIGTERM could not be taken over.
    #[error("cannot handle SIGINT and SIGTERM: {0}")]
    Signals(#[source] std::io::Error),
    /// Writing to standard output or standard error failed (a full disk, a
    /// closed terminal). A closed pipe ends the process quietly instead
    /// (SIGPIPE keeps its default action).
    #[error("cannot write to {stream}: {source}")]
    Output {
        /// `standard output` or `standard error`.
        stream: &'static str,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

impl CliError {
    /// A usage error from its message.
    pub fn usage(message: impl Into<String>) -> Self {
        CliError::Usage(message.into())
    }
}

/// `e` as the command says it: a refused setting by its flag.
fn said(e: &PipelineError) -> String {
    match e {
        PipelineError::Config(s) => crate::flags::Flags::say(s),
        e => e.to_string(),
    }
}

/// The result of a command.
pub type CliResult<T> = Result<T, CliError>;
