//! Images and labels saved by numpy, loaded two ways: `images.npy` +
//! `labels.npy` as two columns of the same rows (an `npy-columns:` group),
//! and the same arrays in one `train.npz`.
//!
//! The data are written by numpy (`np.save`, `np.savez`) when `python3`
//! has it, else by Rust's `ndarray-npy` in the same NPY format — the output
//! says which. Image `i` is `u8 [32, 32, 3]` with its index in its first two
//! bytes; label `i` is `i % 10`. Every batch is read with typed views
//! (`batch.view::<u8, Ix4>`, no `into_dimensionality`) and checked: each
//! label belongs to its own image (the columns stay paired through the
//! shuffle) and every image comes exactly once per pass.
//!
//! ```text
//! cargo run --release --example numpy
//! cargo run --release --example numpy -- --images 5000 --batch 128 --rust-writer
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::Parser;
use feedline::format::npy::columns_spec;
use feedline_actors::ndarray::{Array1, Array4, Ix1, Ix4};
use feedline_actors::prelude::*;

/// Load images and labels saved by numpy (two .npy files as columns, and an
/// .npz) with typed batch views, checking that labels stay with their images.
#[derive(Parser)]
#[command(name = "numpy")]
struct Args {
    /// Folder for images.npy, labels.npy and train.npz (default: a fresh temporary one).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Images to write.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    images: u64,
    /// Batch size.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    batch: u64,
    /// Passes over the data.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=100))]
    passes: u64,
    /// Write the files with Rust's ndarray-npy even when numpy is there.
    #[arg(long)]
    rust_writer: bool,
}

const SIDE: usize = 32;

/// The script numpy runs: the same arrays as [`write_with_rust`].
const NUMPY_SCRIPT: &str = r#"
import sys, numpy as np
out, n = sys.argv[1], int(sys.argv[2])
i = np.arange(n)
images = np.zeros((n, 32, 32, 3), dtype=np.uint8)
images[:, 0, 0, 0] = i // 256
images[:, 0, 0, 1] = i % 256
labels = (i % 10).astype(np.int64)
np.save(f"{out}/images.npy", images)
np.save(f"{out}/labels.npy", labels)
np.savez(f"{out}/train.npz", images=images, labels=labels)
print(np.__version__)
"#;

fn arrays(n: usize) -> (Array4<u8>, Array1<i64>) {
    let images = Array4::from_shape_fn((n, SIDE, SIDE, 3), |(i, y, x, c)| match (y, x, c) {
        (0, 0, 0) => (i / 256) as u8,
        (0, 0, 1) => (i % 256) as u8,
        _ => 0,
    });
    let labels = Array1::from_shape_fn(n, |i| (i % 10) as i64);
    (images, labels)
}

fn write_with_rust(dir: &Path, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let (images, labels) = arrays(n);
    ndarray_npy::write_npy(dir.join("images.npy"), &images)?;
    ndarray_npy::write_npy(dir.join("labels.npy"), &labels)?;
    let mut npz = ndarray_npy::NpzWriter::new(std::fs::File::create(dir.join("train.npz"))?);
    npz.add_array("images", &images)?;
    npz.add_array("labels", &labels)?;
    npz.finish()?;
    Ok(())
}

/// numpy's version if numpy wrote the files, `None` if it is not there.
fn write_with_numpy(dir: &Path, n: usize) -> Option<String> {
    let out = Command::new("python3")
        .arg("-c")
        .arg(NUMPY_SCRIPT)
        .arg(dir)
        .arg(n.to_string())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Load `files`, check every batch, return (batches, rows) over all passes.
fn load(files: impl IntoPaths, args: &Args) -> Result<(u64, u64), Box<dyn std::error::Error>> {
    let loader = Loader::builder()
        .files(files)
        .batch(args.batch as usize)
        .shuffle(512)
        .seed(7)
        .passes(args.passes)
        .build()?;
    let n = args.images as usize;
    let mut seen = vec![u64::MAX; n];
    let (mut batches, mut rows) = (0, 0);
    for delivered in loader {
        let Delivered { pass, batch, .. } = delivered?;
        let images = batch.view::<u8, Ix4>("images")?; // [batch, 32, 32, 3]
        let labels = batch.view::<i64, Ix1>("labels")?; // [batch]
        assert_eq!(&images.shape()[1..], [SIDE, SIDE, 3]);
        for (image, &label) in images.outer_iter().zip(labels.iter()) {
            let i = image[[0, 0, 0]] as usize * 256 + image[[0, 0, 1]] as usize;
            if label != (i % 10) as i64 {
                return Err(format!("image {i} came with label {label}, not {}", i % 10).into());
            }
            if seen[i] == pass {
                return Err(format!("image {i} came twice in pass {pass}").into());
            }
            seen[i] = pass;
        }
        batches += 1;
        rows += batch.len() as u64;
    }
    if let Some(i) = seen.iter().position(|&p| p != args.passes - 1) {
        return Err(format!("image {i} missing from the last pass").into());
    }
    Ok((batches, rows))
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("numpy example: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let temp;
    let dir = match &args.data {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_path_buf()
        }
    };
    let n = args.images as usize;
    let numpy = if args.rust_writer {
        None
    } else {
        write_with_numpy(&dir, n)
    };
    match &numpy {
        Some(version) => println!("data: {n} images and labels written by numpy {version}"),
        None => {
            write_with_rust(&dir, n)?;
            println!(
                "data: {n} images and labels written by Rust's ndarray-npy ({})",
                if args.rust_writer {
                    "--rust-writer"
                } else {
                    "numpy not found"
                }
            );
        }
    }
    let pair = columns_spec([dir.join("images.npy"), dir.join("labels.npy")]);
    let (b, r) = load(pair.as_str(), args)?;
    println!(
        "images.npy + labels.npy as columns: {b} batches, {r} rows over {} passes; labels with their images, each image once per pass",
        args.passes
    );
    let (b, r) = load(dir.join("train.npz"), args)?;
    println!(
        "train.npz: {b} batches, {r} rows over {} passes; labels with their images, each image once per pass",
        args.passes
    );
    Ok(())
}
