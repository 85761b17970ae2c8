//! Data files the tests write as their users' tools would: generated
//! TFRecord shards, hand-written `.npy` (numpy's version-1 header) and
//! `.npz` (a stored ZIP of `.npy` entries). Shared by the actor tests and
//! the command's (`cli/tests/cli_common`).
#![allow(dead_code)]

use std::io::Write;
use std::path::Path;

use feedline::synthetic::{generate, GenOptions, Preset};

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
