//! Shared by the `cli_*` tests: run the `feedline` command, and write the
//! files it reads (generated TFRecord, hand-written `.npy` and `.npz`: the
//! actor tests' `data_files`, shared with them).
//!
//! `FEEDLINE_BIN=/path/to/feedline` runs the tests against another build of
//! the command (e.g. one from before a fix, to see a test fail).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

#[path = "../../../actors/tests/data_files/mod.rs"]
mod data_files;
#[allow(unused_imports)] // each test file uses some
pub use data_files::*;

/// The command under test.
pub fn bin() -> PathBuf {
    std::env::var_os("FEEDLINE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_feedline")))
}

/// A `feedline` command with these arguments, RUST_LOG unset (the
/// command's own default log filter applies).
pub fn command(args: &[&str]) -> Command {
    let mut c = Command::new(bin());
    c.args(args)
        .env_remove("RUST_LOG")
        .env_remove("RANK")
        .env_remove("WORLD_SIZE");
    c
}

/// Run `feedline` with these arguments to the end.
pub fn feedline(args: &[&str]) -> Output {
    command(args).output().expect("run feedline")
}

/// Run `feedline` with standard output going to `stdout`.
pub fn feedline_to(args: &[&str], stdout: Stdio) -> Output {
    command(args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .expect("run feedline")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Neither a panic nor an abort: the process ended by itself with a message.
pub fn assert_no_panic(o: &Output) {
    let err = stderr(o);
    assert!(
        !err.contains("panicked") && o.status.code().is_some(),
        "status {:?}, stderr: {err}",
        o.status
    );
}

/// The exit code, asserting the process exited (was not killed).
pub fn code(o: &Output) -> i32 {
    o.status
        .code()
        .unwrap_or_else(|| panic!("killed: {:?}, stderr: {}", o.status, stderr(o)))
}

/// `args` are refused as an invalid configuration (exit 2), the error
/// being exactly `sentence`.
pub fn assert_refused(args: &[&str], sentence: &str) {
    let o = feedline(args);
    assert_no_panic(&o);
    assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
    assert_eq!(
        stderr(&o).trim_end(),
        format!("feedline: error: invalid configuration: {sentence}"),
        "{args:?}"
    );
}
