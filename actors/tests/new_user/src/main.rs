//! A new user's first program: everything from `feedline_actors` (its
//! prelude, its `ndarray`, its re-exported core), nothing else but a writer
//! for the `.npy` files numpy would have made and serde's derive for its
//! own row type.
//!
//! `new-user DIR` writes, under `DIR/data/`: TFRecords of `x: f32 [64]`,
//! `y: int64` (`train-*.tfrecord`), `images.npy` + `labels.npy` and the same
//! arrays in `images_labels.npz`, `train.npz` (`x: f32 [n, 8]`, `y`), and
//! `tokens.jsonl`; then loads each (the JSON Lines twice: as columns, and
//! as rows of its own `Line` type) and prints one line per load, which
//! actors/tests/new_user.rs checks. Any mismatch is an error (exit 1).

use std::io::Write;
use std::path::Path;

use feedline_actors::feedline::format::npy::columns_spec;
use feedline_actors::feedline::synthetic::{generate, GenOptions, Preset};
use feedline_actors::ndarray::{Array1, Array2, Array4, Ix1, Ix2, Ix4};
use feedline_actors::prelude::*;

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

const IMAGES: usize = 300;

fn main() -> Res {
    let dir = std::env::args().nth(1).ok_or("usage: new-user DIR")?;
    let data = Path::new(&dir).join("data");
    std::fs::create_dir_all(&data)?;
    write_data(&data)?;
    quick_start(&data)?;
    numpy_columns(&data)?;
    npz_one_path(&data)?;
    jsonl_tokens(&data)?;
    jsonl_rows(&data)?;
    Ok(())
}

fn write_data(data: &Path) -> Res {
    let mut opts = GenOptions::new(Preset::Small, data);
    opts.files = Some(2);
    opts.records = Some(500);
    for (i, p) in generate(&opts)?.into_iter().enumerate() {
        std::fs::rename(p, data.join(format!("train-{i:05}.tfrecord")))?;
    }
    let images = Array4::from_shape_fn((IMAGES, 8, 8, 3), |(i, y, x, c)| {
        ((i + y + x + c) % 256) as u8
    });
    let labels = Array1::from_shape_fn(IMAGES, |i| (i % 10) as i64);
    ndarray_npy::write_npy(data.join("images.npy"), &images)?;
    ndarray_npy::write_npy(data.join("labels.npy"), &labels)?;
    let mut npz = ndarray_npy::NpzWriter::new(std::fs::File::create(data.join("images_labels.npz"))?);
    npz.add_array("images", &images)?;
    npz.add_array("labels", &labels)?;
    npz.finish()?;
    let x = Array2::from_shape_fn((100, 8), |(i, j)| (i * 8 + j) as f32);
    let y = Array1::from_shape_fn(100, |i| i as i64);
    let mut npz = ndarray_npy::NpzWriter::new(std::fs::File::create(data.join("train.npz"))?);
    npz.add_array("x", &x)?;
    npz.add_array("y", &y)?;
    npz.finish()?;
    let mut jsonl = std::fs::File::create(data.join("tokens.jsonl"))?;
    for line in 0..200u64 {
        let tokens: Vec<u64> = (0..1 + line % 37).collect();
        writeln!(jsonl, "{{\"tokens\": {tokens:?}, \"id\": {line}}}")?;
    }
    Ok(())
}

/// The README's quick start, on the generated TFRecords.
fn quick_start(data: &Path) -> Res {
    let loader = Loader::builder()
        .files(data.join("train-*.tfrecord"))
        .readers(2)
        .shuffle(1000)
        .batch(64)
        .passes(2)
        .seed(7)
        .deterministic(true)
        .error_policy(ErrorPolicy::Fail)
        .build()?;
    let (mut rows, mut batches) = (0, 0);
    for delivered in loader {
        let d = delivered?;
        let x = d.batch.view::<f32, Ix2>("x")?; // [64, 64]
        let y = d.batch.view::<i64, Ix1>("y")?; // [64]: a scalar per instance
        if x.ncols() != 64 || y.len() != x.nrows() {
            return Err(format!("x {:?}, y {:?}", x.shape(), y.shape()).into());
        }
        rows += y.len();
        batches += 1;
    }
    println!("quick start: {rows} rows in {batches} batches");
    Ok(())
}

/// Fails unless the label of every image is `(i % 10)` for the image whose
/// pixel (0, 0, 0) is `i % 256`, i.e. the columns stayed paired.
fn check_pairs(images: &ndarray::ArrayView4<'_, u8>, labels: &ndarray::ArrayView1<'_, i64>) -> Res {
    for (image, &label) in images.outer_iter().zip(labels) {
        let first = image[[0, 0, 0]] as i64;
        if (0..IMAGES as i64).all(|i| i % 256 != first || i % 10 != label) {
            return Err(format!("an image starting with {first} came with label {label}").into());
        }
    }
    Ok(())
}

/// Two `.npy` files as the columns of the same rows.
fn numpy_columns(data: &Path) -> Res {
    let loader = Loader::builder()
        .files(columns_spec([data.join("images.npy"), data.join("labels.npy")]))
        .shuffle(100)
        .batch(32)
        .build()?;
    let mut rows = 0;
    for delivered in loader {
        let batch = delivered?.batch;
        let images = batch.view::<u8, Ix4>("images")?;
        let labels = batch.view::<i64, Ix1>("labels")?;
        check_pairs(&images, &labels)?;
        rows += batch.len();
    }
    println!("npy columns: {rows} images with their labels");
    Ok(())
}

/// One `.npz` path, as a plain string.
fn npz_one_path(data: &Path) -> Res {
    let path = data.join("images_labels.npz");
    let loader = Loader::builder()
        .files(path.to_str().ok_or("a UTF-8 path")?)
        .batch(50)
        .build()?;
    let mut rows = 0;
    for delivered in loader {
        let batch = delivered?.batch;
        check_pairs(&batch.view::<u8, Ix4>("images")?, &batch.view::<i64, Ix1>("labels")?)?;
        rows += batch.len();
    }
    println!("npz: {rows} images with their labels");
    Ok(())
}

/// JSON Lines with a ragged field, batched by a token budget.
fn jsonl_tokens(data: &Path) -> Res {
    let schema = Schema::builder()
        .ragged("tokens", DType::I64, Ragged::Offsets)
        .field("id", DType::I64, [])
        .build()?;
    let loader = Loader::builder()
        .files(data.join("tokens.jsonl"))
        .batch_policy(BatchPolicy::tokens("tokens", 256, &schema)?)
        .schema(schema)
        .build()?;
    let (mut rows, mut tokens) = (0, 0);
    for delivered in loader {
        let batch = delivered?.batch;
        let offsets = batch.offsets("tokens")?.ok_or("offsets")?;
        let n = offsets[offsets.len() - 1];
        if n > 256 {
            return Err(format!("a batch of {n} tokens, over the 256 budget").into());
        }
        tokens += n;
        rows += batch.view::<i64, Ix1>("id")?.len();
    }
    println!("jsonl: {rows} lines, {tokens} tokens, batches of at most 256 tokens");
    Ok(())
}

/// A line of tokens.jsonl as the user's own type.
#[derive(serde::Deserialize)]
struct Line {
    id: u64,
    tokens: Vec<u32>,
}

/// The same lines, each batch's rows read as `Line`s (`batch.rows()`).
fn jsonl_rows(data: &Path) -> Res {
    let schema = Schema::builder()
        .ragged("tokens", DType::I64, Ragged::Offsets)
        .field("id", DType::I64, [])
        .build()?;
    let loader = Loader::builder()
        .files(data.join("tokens.jsonl"))
        .schema(schema)
        .batch(16)
        .shuffle(64)
        .build()?;
    let mut ids = std::collections::BTreeSet::new();
    for delivered in loader {
        let lines: Vec<Line> = delivered?.batch.rows()?;
        for line in lines {
            let want: Vec<u32> = (0..1 + line.id as u32 % 37).collect();
            if line.tokens != want || !ids.insert(line.id) {
                return Err(format!("line {}: tokens {:?}", line.id, line.tokens).into());
            }
        }
    }
    println!("rows: {} lines as Line, each with its own tokens", ids.len());
    Ok(())
}
