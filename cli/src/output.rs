//! Standard output and standard error with every write checked: `writeln!`
//! on [`Stdout`] or [`Stderr`] returns a [`CliError::Output`] (e.g. "cannot
//! write to standard output: No space left on device") where `println!`
//! would panic. A closed pipe is not seen here: SIGPIPE keeps its default
//! action, so `feedline cat … | head` ends quietly as Unix tools do.

use std::fmt;
use std::io::{self, BufWriter, Write};

use crate::error::{CliError, CliResult};

const STDOUT: &str = "standard output";
const STDERR: &str = "standard error";

/// Buffered standard output; [`finish`](Self::finish) flushes it and says
/// whether every byte was written.
pub struct Stdout {
    out: BufWriter<io::StdoutLock<'static>>,
}

impl Stdout {
    /// Standard output, locked for this command.
    pub fn new() -> Self {
        Stdout {
            out: BufWriter::with_capacity(1 << 16, io::stdout().lock()),
        }
    }

    /// What `write!`/`writeln!` call.
    pub fn write_fmt(&mut self, args: fmt::Arguments<'_>) -> CliResult<()> {
        self.out.write_fmt(args).map_err(to_stdout)
    }

    /// Writes what `f` writes to the buffered stream (a record's JSON
    /// streamed element by element, say), every write checked.
    pub fn write_with(
        &mut self,
        f: impl FnOnce(&mut BufWriter<io::StdoutLock<'static>>) -> io::Result<()>,
    ) -> CliResult<()> {
        f(&mut self.out).map_err(to_stdout)
    }

    /// Flush what is buffered (e.g. before a long wait, so a reader sees it).
    pub fn flush(&mut self) -> CliResult<()> {
        self.out.flush().map_err(to_stdout)
    }

    /// Flush, and report a write that failed.
    pub fn finish(mut self) -> CliResult<()> {
        self.flush()
    }
}

impl Default for Stdout {
    fn default() -> Self {
        Self::new()
    }
}

fn to_stdout(source: io::Error) -> CliError {
    CliError::Output {
        stream: STDOUT,
        source,
    }
}

/// Standard error (unbuffered): notes and progress lines.
pub struct Stderr;

impl Stderr {
    /// What `write!`/`writeln!` call.
    pub fn write_fmt(&self, args: fmt::Arguments<'_>) -> CliResult<()> {
        io::stderr()
            .lock()
            .write_fmt(args)
            .map_err(|source| CliError::Output {
                stream: STDERR,
                source,
            })
    }
}
