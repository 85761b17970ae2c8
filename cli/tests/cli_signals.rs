//! SIGINT and SIGTERM end a `feedline run` cleanly: the pipeline stops, the
//! trace ends with whole lines (one per batch the devices took), the summary
//! and a message saying it was interrupted are printed, and the exit code is
//! 130 or 143. The signal is sent at a point the test controls: the trace is
//! a FIFO the test reads, and the signal goes once the first line has
//! arrived, while every device is inside a ten-minute step.

mod cli_common;

use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use cli_common::*;

/// How long a run may take to end after the signal before the test kills
/// it (and fails): far longer than a clean stop needs.
const GRACE: Duration = Duration::from_secs(120);

fn interrupted_run(sig: i32, name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let files = small_files(&dir.path().join("data"), 2, 500);
    let fifo = dir.path().join("trace.fifo");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let child = command(&[
        "run",
        &files[0],
        &files[1],
        "--devices",
        "2",
        "--batch",
        "10",
        "--step-ms",
        "600000",
        "--trace",
        fifo.to_str().unwrap(),
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let pid = child.id() as libc::pid_t;
    // The watchdog: past the grace, kill the run and unblock the reader.
    let (done, watch) = mpsc::channel::<()>();
    let watch_fifo = fifo.clone();
    let watchdog = std::thread::spawn(move || {
        if watch.recv_timeout(GRACE).is_err() {
            // SAFETY: kill with a pid this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = std::fs::OpenOptions::new().write(true).open(&watch_fifo);
        }
    });
    let mut trace = BufReader::new(std::fs::File::open(&fifo).unwrap());
    let mut text = String::new();
    trace.read_line(&mut text).unwrap();
    assert!(text.ends_with('\n'), "no first trace line: {text:?}");
    // The run is going: both devices are in a ten-minute step.
    // SAFETY: kill with a pid this test started.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    trace.read_to_string(&mut text).unwrap();
    let out = child.wait_with_output().unwrap();
    let _ = done.send(());
    watchdog.join().unwrap();

    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(128 + sig),
        "{:?}: {err}",
        out.status
    );
    assert!(text.ends_with('\n'), "a torn last trace line: {text:?}");
    let mut lines = 0u64;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("a whole JSON line");
        assert!(
            v["records"].as_array().is_some_and(|r| !r.is_empty()),
            "{line}"
        );
        lines += 1;
    }
    // The summary counts what the devices took: each has its trace line.
    let summary = stdout(&out);
    let device_batches: u64 = summary
        .lines()
        .skip_while(|l| !l.starts_with("device"))
        .skip(1)
        .take(2)
        .map(|l| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(device_batches, lines, "{summary}");
    let said = format!(
        "feedline: interrupted by {name}: stopped after {lines} batches delivered to the devices"
    );
    assert!(err.contains(&said), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn sigint_stops_a_run_with_whole_trace_lines_a_message_and_130() {
    interrupted_run(libc::SIGINT, "SIGINT");
}

#[test]
fn sigterm_stops_a_run_with_whole_trace_lines_a_message_and_143() {
    interrupted_run(libc::SIGTERM, "SIGTERM");
}
