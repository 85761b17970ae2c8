//! Shared by the `cli_*` tests: run the `feedline` command, and write the
//! files it reads (generated TFRecord, hand-written `.npy` and `.npz`).
//!
//! `FEEDLINE_BIN=/path/to/feedline` runs the tests against another build of
//! the command (e.g. one from before a fix, to see a test fail).
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use feedline::gen::{generate, GenOptions, Preset};

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

/// `files` small-preset TFRecord files of `records` each in `dir`; their paths.
pub fn small_files(dir: &Path, files: usize, records: usize) -> Vec<String> {
    let mut opts = GenOptions::new(Preset::Small, dir);
    opts.files = Some(files);
    opts.records = Some(records);
    generate(&opts)
        .unwrap()
        .into_iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

/// The bytes of a `.npy` file: numpy's version-1 header and `data`.
pub fn npy_bytes(descr: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    bytes
}

/// `n` images `[3, 32, 32]` f32 and `n` i64 labels `[]`: (x.npy, y.npy) bytes.
pub fn image_arrays(n: usize) -> (Vec<u8>, Vec<u8>) {
    let x: Vec<u8> = (0..n * 3 * 32 * 32)
        .flat_map(|i| (i as f32 / 7.0).to_le_bytes())
        .collect();
    let y: Vec<u8> = (0..n as i64).flat_map(|i| i.to_le_bytes()).collect();
    (
        npy_bytes("<f4", &[n, 3, 32, 32], &x),
        npy_bytes("<i8", &[n], &y),
    )
}

/// Write an `.npz` (a stored ZIP of `.npy` entries) at `path`.
pub fn write_npz(path: &Path, entries: &[(&str, &[u8])]) {
    let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in entries {
        z.start_file(format!("{name}.npy"), opts).unwrap();
        z.write_all(bytes).unwrap();
    }
    z.finish().unwrap();
}
