//! Start-up work on the input files — counting their records, inferring
//! the schema — done before the readers (and their watchdog) exist, under
//! the same stall timeout: a file that makes no progress is an error
//! naming it, not a start-up that hangs.

use std::time::Duration;

use crate::error::PipelineError;

/// Run `work` on `file` before the readers (and their watchdog) exist, with
/// the stall timeout all the same: a file that makes no progress for that
/// long is an error naming it and `what` was done, not a start-up that
/// hangs forever (the thread blocked in I/O is left to end by itself).
/// The outer error is the stall (or a panic); the inner, `work`'s own.
pub(crate) fn within_stall_timeout<T: Send + 'static>(
    stall_timeout: Option<Duration>,
    file: &str,
    what: &str,
    work: impl FnOnce() -> Result<T, feedline::Error> + Send + 'static,
) -> Result<Result<T, feedline::Error>, PipelineError> {
    let Some(timeout) = stall_timeout else {
        return Ok(work());
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("feedline-prepare".into())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(|e| PipelineError::config(format!("cannot start a thread: {e}")))?;
    rx.recv_timeout(timeout).map_err(|e| match e {
        std::sync::mpsc::RecvTimeoutError::Timeout => PipelineError::ReaderStuck {
            file: format!("{file} ({what}, before reading started)"),
            record: 0,
            stuck: timeout,
        },
        std::sync::mpsc::RecvTimeoutError::Disconnected => PipelineError::Panicked {
            stage: "pipeline start-up".into(),
            handling: format!("{what} of {file}").into(),
            message: "(see the log)".into(),
        },
    })
}
